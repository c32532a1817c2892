"""04, study: HCA's estimators on three tabular tasks, against the exact gradient.

The chapter measures the variance of three policy gradients on the delayed effect. Here, on
three tasks with a known model (a shortcut chain, the delayed effect, an ambiguous bandit; our
versions of the HCA paper's §5 tasks), five estimators at the uniform policy: REINFORCE, PG with
the exact value baseline, and return and state HCA with the learned h or the exact one (Bayes'
rule on the model). Each one's bias² against the exact gradient (autograd through the exact
policy evaluation) and its variance, as the reward noise σ grows; how far h/π moves the credit
at each step of the delayed effect; the return identity Q(x, a) = E_z[h(a|x,z)/π(a|x) z] by
numerical integration; COCOA's premise (Meulemans et al. 2023; COCOA itself is not implemented),
that state HCA degrades to REINFORCE when the later state reveals the action; and a tabular
policy learning with each estimator on each task.

    python studies/04_hca_tasks.py          # 34 s on 2 CPU cores (one other heavy job running)

Writes runs/studies/04_hca_tasks/: hca_variance_vs_sigma.png (tr Cov of each estimator vs σ,
per task), hca_hindsight_ratio.png (delayed effect: |h/π - 1| per step, large at step 0 only),
hca_learning_curves.png (exact J(π) while learning) and results.json.
"""

import importlib
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and common.py
import common  # noqa: E402

hindsight = importlib.import_module("04_her_hca")


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/04_hca_tasks", "output folder for figures and results.json")
    sigmas: str = common.arg("0.25,0.5,1,2,4", "reward noise levels σ, comma-separated", item=float)
    chain: int = common.arg(8, "shortcut chain length")
    corridor: int = common.arg(10, "delayed effect: steps between the decisive action and its reward")
    crossover: float = common.arg(0.2, "ambiguous bandit: probability that an arm pays the other arm's amount")

    SMOKE = dict(sigmas="0.5,2", chain=4, corridor=3)

    def __post_init__(self):
        common.require_positive(self, "corridor")
        common.require(self.chain >= 2, "--chain must be at least 2")
        common.require(0 < self.crossover < 0.5, "--crossover must be in (0, 0.5)")
        common.require(all(s > 0 for s in self.sigma_list), "--sigmas must be positive (exact h needs noise)")

    @property
    def sigma_list(self) -> list[float]:
        return common.as_list(self.sigmas, float)


def chapter_args(args: Args) -> hindsight.Args:
    """The chapter's hyperparameters (its smoke values in a smoke run), with this study's flags."""
    smoke = hindsight.Args.SMOKE if args.smoke else {}
    return hindsight.Args(**{**smoke, "seed": args.seed, "sigmas": args.sigmas, "corridor": args.corridor})


# ============================================================================================
# Two more worlds beside the chapter's delayed effect
# ============================================================================================
def shortcut_chain(length: int, noise: float) -> hindsight.TabularTask:
    """A chain s_0 .. s_{L-1}. 'Right' (action 0) moves one state on; 'shortcut' (action 1) jumps
    straight to the last state s_{L-1}, from which either action ends the episode. Every step
    costs -1, so the shortcut at s_0 is best (return -2) and walking the chain costs -L."""
    terminal = length
    P = torch.zeros(length + 1, 2, length + 1)
    for s in range(length - 1):
        P[s, 0, s + 1] = P[s, 1, length - 1] = 1.0
    P[length - 1, :, terminal] = P[terminal, :, terminal] = 1.0
    R = torch.full((length + 1, 2), -1.0)
    R[terminal] = 0.0
    return hindsight.TabularTask("shortcut", P, *hindsight.deterministic_rewards(R), noise, horizon=length)


def ambiguous_bandit(noise: float, crossover: float) -> hindsight.TabularTask:
    """Two arms: arm 1 pays 1 and arm 0 pays 0, except that with probability `crossover` an arm
    pays the other arm's amount; plus noise. A reward alone does not tell which arm was pulled."""
    P = torch.zeros(2, 2, 2)
    P[:, :, 1] = 1.0  # one step, then the terminal state
    values = torch.tensor([[[0.0, 1.0], [1.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]])
    probs = torch.tensor([[[1 - crossover, crossover], [1 - crossover, crossover]], [[1.0, 0.0], [1.0, 0.0]]])
    return hindsight.TabularTask("ambiguous bandit", P, values, probs, noise, horizon=1)


def make_tasks(args: Args, noise: float) -> list[hindsight.TabularTask]:
    return [shortcut_chain(args.chain, noise), hindsight.delayed_effect(args.corridor, noise),
            ambiguous_bandit(noise, args.crossover)]


# ============================================================================================
# The exact truth, from the model: the policy gradient and the hindsight distributions
# ============================================================================================
def exact_gradient(task: hindsight.TabularTask, logits: torch.Tensor) -> torch.Tensor:
    """∇_θ J for the softmax policy π = softmax(θ[s]), J = V^π(s_0), by autograd through the
    exact policy evaluation (common.evaluate_policy, γ = 1)."""
    logits = logits.detach().double().cpu().requires_grad_()
    V, _ = common.evaluate_policy(task.P.double().cpu(), task.R.double().cpu(), torch.softmax(logits, 1), 1.0)
    V[0].backward()
    return logits.grad.float()


def exact_state_hindsight(task: hindsight.TabularTask, policy: torch.Tensor) -> torch.Tensor:
    """h[x, y, a] = P(A_t = a | X_t = x, y visited later) = π(a|x) d(y|x,a) / d(y|x), where
    d(y|x,a) is the expected number of later visits to y after taking a in x: the
    occupancy-weighted hindsight distribution that makes Theorem 1 of HCA hold with γ = 1."""
    P, policy = task.P.double().cpu(), policy.double().cpu()
    P_pi = torch.einsum("sa,sat->st", policy, P)
    P_pi[-1] = 0.0  # nothing is visited after the terminal state
    visits = torch.linalg.inv(torch.eye(len(P), dtype=P.dtype) - P_pi)  # visits[s, y], from s on
    after_action = torch.einsum("xas,sy->xya", P, visits)  # d(y | x, a)
    joint = policy[:, None, :] * after_action
    total = joint.sum(-1, keepdim=True)
    h = torch.where(total > 0, joint / total.clamp(min=1e-300), policy[:, None, :])  # y never follows x: π
    return h.float()


def exact_state_pairs(h_table: torch.Tensor, episodes: dict) -> torch.Tensor:
    """h(· | X_t, X_k) for every pair of steps (t, k) of each episode, from the exact table."""
    s = episodes["states"]
    return h_table.to(s.device)[s[:, None], s[None]]


def return_components(task: hindsight.TabularTask, policy: torch.Tensor, state: int, action: int) -> dict:
    """The return from taking `action` in `state`, then following π: a mixture of Gaussians, one
    per (sum of outcome means, number of noisy steps), enumerated step by step.
    Returns {(mean, steps): probability}."""
    terminal, done = task.num_states - 1, defaultdict(float)
    frontier, first = {(state, 0.0, 0): 1.0}, True
    P, values, probs, policy = (t.double().cpu() for t in (task.P, task.values, task.probs, policy))
    while frontier:
        following = defaultdict(float)
        for (s, mean, steps), weight in frontier.items():
            if s == terminal:
                done[(mean, steps)] += weight
                continue
            actions = [(action, 1.0)] if first else [(b, float(policy[s, b])) for b in range(P.shape[1])]
            for b, p_b in actions:
                for k in torch.nonzero(probs[s, b] * p_b > 0).flatten().tolist():
                    for s2 in torch.nonzero(P[s, b]).flatten().tolist():
                        key = (s2, round(mean + float(values[s, b, k]), 9), steps + 1)
                        following[key] += weight * p_b * float(probs[s, b, k] * P[s, b, s2])
        frontier, first = following, False
    return dict(done)


def return_log_density(components: dict, z: torch.Tensor, noise: float) -> torch.Tensor:
    """log p(z) of the Gaussian mixture {(mean, steps): weight}; the noise of `steps` steps adds up
    to a variance of steps σ²."""
    terms = []
    for (mean, steps), weight in components.items():
        var = noise**2 * steps
        terms.append(math.log(weight) - 0.5 * math.log(2 * math.pi * var) - (z - mean) ** 2 / (2 * var))
    return torch.logsumexp(torch.stack(terms), 0)


def exact_return_hindsight(task: hindsight.TabularTask, policy: torch.Tensor, states: torch.Tensor,
                           returns: torch.Tensor) -> torch.Tensor:
    """h(a | x, z) = π(a|x) p(z|x,a) / Σ_b π(b|x) p(z|x,b), Bayes' rule on the exact return
    distributions, for each (state, return) pair; shape states.shape + (A,). Needs noise > 0."""
    h = policy[states].clone()  # the terminal state: no information, h = π
    for x in states.unique().tolist():
        if x == task.num_states - 1:
            continue
        at = states == x
        z = returns[at].double().cpu()
        log_p = torch.stack([return_log_density(return_components(task, policy, x, a), z, task.noise)
                             for a in range(task.num_actions)], -1)
        h[at] = torch.softmax(torch.log(policy[x].double().cpu()) + log_p, -1).to(h)
    return h


def hindsight_identity_gap(task: hindsight.TabularTask, policy: torch.Tensor, state: int = 0) -> float:
    """max_a |E_z[h(a|x,z)/π(a|x) z] - Q(x, a)|: the return-conditional identity of HCA (survey §8),
    the expectation by numerical integration over z, Q by dynamic programming."""
    policy = policy.double().cpu()
    _, Q = common.evaluate_policy(task.P.double().cpu(), task.R.double().cpu(), policy, 1.0)
    parts = [return_components(task, policy, state, a) for a in range(task.num_actions)]
    means = [m for c in parts for m, _ in c]
    spread = 10 * task.noise * math.sqrt(task.horizon)
    z = torch.linspace(min(means) - spread, max(means) + spread, 4001, dtype=torch.float64)
    log_p = torch.stack([return_log_density(c, z, task.noise) for c in parts], -1)  # log p(z | x, a)
    p_z = (policy[state] * log_p.exp()).sum(-1)  # p(z | x)
    h = exact_return_hindsight(task, policy, torch.full_like(z, state, dtype=torch.long), z).double()
    q = torch.trapezoid(p_z[:, None] * h / policy[state] * z[:, None], z, dim=0)
    return float((q - Q[state]).abs().max())


# ============================================================================================
# Study 1: bias and variance of each gradient estimator against the exact gradient
# ============================================================================================
def study_methods(task: hindsight.TabularTask) -> list[str]:
    """State HCA needs later states: the one-step bandit has none (it would reduce to r̂)."""
    methods = ["REINFORCE (no baseline)", "PG + V baseline", "return HCA (learned h)", "return HCA (exact h)"]
    return methods + (["state HCA (learned h)", "state HCA (exact h)"] if task.horizon > 1 else [])


def estimator_rows(method: str, episodes: dict, policy: torch.Tensor, V: torch.Tensor, r_hat: torch.Tensor,
                   h: torch.Tensor | None, h_min: float) -> torch.Tensor:
    """The chapter's gradient_rows, and REINFORCE without a baseline (Ψ_t = Z_t) beside them."""
    if method.startswith("REINFORCE"):
        return hindsight.score_rows(episodes, policy, episodes["returns"])
    return hindsight.gradient_rows(method, episodes, policy, V, r_hat, h, h_min)


def hindsight_estimates(args: hindsight.Args, task: hindsight.TabularTask, policy: torch.Tensor, train: dict,
                        test: dict, device) -> dict:
    """Each HCA estimator's h on the test episodes: learned on the train episodes, or exact."""
    h = {"return HCA (learned h)": hindsight.fitted(args, task, "return", train, device).probabilities(
             test["states"], test["returns"]),
         "return HCA (exact h)": exact_return_hindsight(task, policy, test["states"], test["returns"])}
    if task.horizon > 1:
        h["state HCA (learned h)"] = hindsight.learned_state_pairs(hindsight.fitted(args, task, "state", train, device),
                                                                   test)
        h["state HCA (exact h)"] = exact_state_pairs(exact_state_hindsight(task, policy), test)
    return h


def estimator_errors(grads: torch.Tensor, truth: torch.Tensor) -> dict:
    """Bias² and variance (tr Cov) of per-episode gradients (N, S, A) against the exact gradient."""
    mean, variance = grads.mean(0), hindsight.trace_covariance(grads)
    return {"bias2": float(((mean - truth) ** 2).sum()), "variance": variance,
            "bias2_noise_floor": variance / len(grads),  # E|mean - truth|² if unbiased
            "start_state_variance": float(((grads[:, 0] - mean[0]) ** 2).sum(-1).mean())}


def ratio_profile(episodes: dict, policy: torch.Tensor, h: dict) -> dict:
    """Per step t, the mean over episodes of |h(A_t | X_t, ·)/π(A_t | X_t) - 1|: how far what
    followed moves the credit of the action taken. State HCA: conditioned on the last state."""
    a, alive = episodes["actions"][..., None], episodes["alive"]
    pi = policy[episodes["states"]].gather(-1, a).squeeze(-1)
    last = alive.sum(0) - 1  # each episode's last step
    steps = torch.arange(len(alive), device=alive.device)[:, None]
    profile = {}
    for method, probs in h.items():
        valid = alive
        if method.startswith("state"):
            probs = probs[:, last, torch.arange(probs.shape[2], device=probs.device)]  # h(· | X_t, X_last)
            valid = alive & (steps < last)  # the last step has no later state
        deviation = ((probs.gather(-1, a).squeeze(-1) / pi - 1).abs() * valid).sum(1) / valid.sum(1).clamp(min=1)
        profile[method] = deviation.tolist()
    return profile


def study_one(args: hindsight.Args, task: hindsight.TabularTask, device) -> dict:
    """At the uniform policy: the exact gradient, hindsight classifiers fitted on one batch of
    episodes, and every estimator's per-episode gradients on a fresh batch. Seeded as the
    chapter's gradient_variances, so the two agree on the delayed effect."""
    common.seed_everything(args.seed)
    task = task.to(device)
    generator = torch.Generator(device).manual_seed(args.seed)
    logits = torch.zeros(task.num_states, task.num_actions, device=device)
    policy = torch.softmax(logits, 1)
    truth = exact_gradient(task, logits).to(device)
    V, _ = common.evaluate_policy(task.P.double().cpu(), task.R.double().cpu(), policy.double().cpu(), 1.0)
    V, r_hat = V.float().to(device), task.R.to(device)  # the baseline and r̂ are exact: only h is learned
    train = hindsight.sample_episodes(task, policy, args.hindsight_episodes, generator)
    test = hindsight.sample_episodes(task, policy, args.measure_episodes, generator)
    h = hindsight_estimates(args, task, policy, train, test, device)
    estimators = {}
    for method in study_methods(task):
        rows = estimator_rows(method, test, policy, V, r_hat, h.get(method), args.h_min)
        estimators[method] = estimator_errors(hindsight.per_episode_gradients(test, rows, task.num_states), truth)
    return {"estimators": estimators, "hindsight_ratio": ratio_profile(test, policy, h),
            "exact_gradient_norm2": float((truth**2).sum())}  # the scale of bias²; σ does not change it


def gradient_study(args: Args, device) -> dict:
    """{task: {σ: study_one's result}}."""
    chapter, study = chapter_args(args), {}
    for noise in tqdm(args.sigma_list, desc="HCA gradient study", leave=False):
        for task in make_tasks(args, noise):
            study.setdefault(task.name, {})[noise] = study_one(chapter, task, device)
    return study


# ============================================================================================
# Study 2: learning curves, a tabular softmax policy trained by each estimator's gradient
# ============================================================================================
def learning_study(args: Args, device) -> dict:
    """{task: {estimator: [one exact-J curve per seed]}}, at the chapter's learn_sigma."""
    chapter, results = chapter_args(args), {}
    runs = [(task, m) for task in make_tasks(args, chapter.learn_sigma) for m in hindsight.ESTIMATORS
            if task.horizon > 1 or not m.startswith("state")]
    for task, method in tqdm(runs, desc="HCA learning", leave=False):
        results.setdefault(task.name, {})[method] = [hindsight.learn(chapter, task, method, chapter.seed + i, device)
                                                     for i in range(chapter.learn_seeds)]
    return results


# ============================================================================================
# Study 3: the return-conditional identity Q = E_z[h/π z], checked by integration
# ============================================================================================
def identity_study(args: Args) -> dict:
    """{task: max_a |E_z[h(a|x,z)/π(a|x) z] - Q(x, a)|} at the start state, uniform π, σ = 1."""
    uniform_policy = torch.full((1, 2), 0.5)
    return {task.name: hindsight_identity_gap(task, uniform_policy.expand(task.num_states, 2))
            for task in make_tasks(args, 1.0)}


# ============================================================================================
# Figures, claims, report
# ============================================================================================
def plot_variance(study: dict, path) -> None:
    fig, axes = plt.subplots(1, len(study), figsize=(5 * len(study), 4))
    axes = np.atleast_1d(axes)
    for ax, (name, by_sigma) in zip(axes, study.items()):
        sigmas = list(by_sigma)
        for method in by_sigma[sigmas[0]]["estimators"]:
            ax.plot(sigmas, [by_sigma[s]["estimators"][method]["variance"] for s in sigmas],
                    "s--" if "exact" in method else "o-", label=method)
        ax.set(title=f"{name}: tr Cov of the gradient", xlabel="reward noise σ", xscale="log", yscale="log")
        ax.set_xticks(sigmas, [f"{s:g}" for s in sigmas])
        ax.set_xticks([], minor=True)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="x-small")
    common.save_figure(fig, path)


def plot_ratio(profile: dict, noise: float, path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for method, deviation in profile.items():
        ax.plot(np.arange(len(deviation)), deviation, "o-", label=method)
    ax.set(title=f"Delayed effect, σ = {noise:g}: how far hindsight moves the credit",
           xlabel="step t (0: the decisive first action)", ylabel="mean |h(A_t|X_t, ·) / π(A_t|X_t) - 1|")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def plot_learning(learning: dict, args: hindsight.Args, path) -> None:
    fig, axes = plt.subplots(1, len(learning), figsize=(5 * len(learning), 4))
    episodes = np.arange(args.learn_iters + 1) * args.learn_batch
    for ax, (name, by_method) in zip(np.atleast_1d(axes), learning.items()):
        common.plot_curves(ax, episodes, {m: np.array(c) for m, c in by_method.items()})
        ax.set(title=f"{name}, σ = {args.learn_sigma:g}", xlabel="episodes", ylabel="exact J(π)")
    common.save_figure(fig, path)


def variances(by_sigma: dict) -> dict:
    """{σ: {estimator: tr Cov}}, the chapter's layout, from {σ: study_one's result}."""
    return {s: {m: e["variance"] for m, e in at["estimators"].items()} for s, at in by_sigma.items()}


def conditioning_claim(name: str, by_sigma: dict) -> dict:
    """Return HCA against state HCA (both with the learned h): which has the lower gradient
    variance, at how many σ?"""
    sigmas = sorted(by_sigma)
    variance = {s: {m: by_sigma[s]["estimators"][m]["variance"] for m in ("state HCA (learned h)", "return HCA (learned h)")}
                for s in sigmas}
    lower = sum(v["return HCA (learned h)"] < v["state HCA (learned h)"] for v in variance.values())
    return common.claim("survey §8", f"{name}: return-conditional HCA is preferable to state-conditional HCA",
                        "gradient variance (tr Cov), return HCA vs state HCA (learned h): " + ", ".join(
                            f"σ={s:g} {v['return HCA (learned h)']:.3g} vs {v['state HCA (learned h)']:.3g}"
                            for s, v in variance.items()) + f"; return HCA lower at {lower} of {len(sigmas)}",
                        lower > len(sigmas) / 2)


def hca_claims(args: Args, study: dict, identity: dict) -> list[dict]:
    low = min(args.sigma_list)
    delayed = study["delayed effect"][low]
    profile = delayed["hindsight_ratio"]
    corridor = {m: float(np.mean(p[1:-1])) for m, p in profile.items()}
    decisive = all(p[0] > 5 * corridor[m] for m, p in profile.items() if "learned" in m)
    reinforce, state = (delayed["estimators"][m] for m in ("REINFORCE (no baseline)", "state HCA (exact h)"))
    return [c for name, by_sigma in study.items() for c in hindsight.variance_claims(name, variances(by_sigma))] + [
        conditioning_claim(name, by_sigma) for name, by_sigma in study.items()
        if "state HCA (learned h)" in by_sigma[min(by_sigma)]["estimators"]] + [
        common.claim("survey §4.2.1", "irrelevant actions get a hindsight ratio ≈ 1, the decisive one is far from 1",
                     f"delayed effect, σ = {low:g}, mean |h/π - 1| at the first action vs over the corridor: "
                     + "; ".join(f"{m} {p[0]:.2f} vs {corridor[m]:.3f}" for m, p in profile.items() if "learned" in m),
                     decisive),
        common.claim("survey §8", "Q(x, a) = E_z[h(a|x,z)/π(a|x) · z]",
                     "largest |E_z[h/π z] - Q| at the start state, uniform π, σ = 1: "
                     + ", ".join(f"{name} {gap:.1e}" for name, gap in identity.items()),
                     max(identity.values()) < 1e-3),
        common.claim("survey §8 (COCOA)", "when the later state reveals the action, state HCA degrades to REINFORCE",
                     f"delayed effect, variance at the first action: state HCA (exact h) "
                     f"{state['start_state_variance']:.3g}, REINFORCE without baseline "
                     f"{reinforce['start_state_variance']:.3g}",
                     math.isclose(state["start_state_variance"], reinforce["start_state_variance"], rel_tol=0.2)),
    ]


def headline_metrics(study: dict, learning: dict) -> dict:
    metrics = {}
    for name, by_sigma in study.items():
        for noise, at in by_sigma.items():
            for method, m in at["estimators"].items():
                metrics[f"{name}_sigma{noise:g}_variance[{method}]"] = m["variance"]
                metrics[f"{name}_sigma{noise:g}_bias2[{method}]"] = m["bias2"]
    for name, by_method in learning.items():
        for method, curves in by_method.items():
            metrics[f"{name}_final_J[{method}]"] = float(np.mean([c[-1] for c in curves]))
    return metrics


def print_report(args: Args, study: dict, learning: dict, metrics: dict, claims: list[dict]) -> None:
    chapter = chapter_args(args)
    for name, by_sigma in study.items():
        methods = list(by_sigma[args.sigma_list[0]]["estimators"])
        print(f"\n{name}: tr Cov / bias² of each gradient against the exact one, uniform π "
              f"(|∇J|² = {by_sigma[args.sigma_list[0]]['exact_gradient_norm2']:.3g})")
        rows = [[f"σ={s:g}", *(f"{by_sigma[s]['estimators'][m]['variance']:.3g} / "
                               f"{by_sigma[s]['estimators'][m]['bias2']:.2g}" for m in methods)]
                for s in args.sigma_list]
        print(common.format_table(rows, ["", *methods]))
    rows = [[name, *(metrics.get(f"{name}_final_J[{m}]", float("nan")) for m in hindsight.ESTIMATORS)]
            for name in learning]
    print(f"\nFinal exact J(π) after {chapter.learn_iters * chapter.learn_batch} episodes, "
          f"σ = {chapter.learn_sigma:g}:")
    print(common.format_table(rows, ["task", *hindsight.ESTIMATORS]))
    print("\n" + common.format_claims(claims))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    print(f"04 study: HCA's estimators on 3 tabular tasks, σ in {args.sigma_list}; device {device}")
    study = gradient_study(args, device)
    plot_variance(study, out / "hca_variance_vs_sigma.png")
    low = min(args.sigma_list)  # the return still says something about the first action
    plot_ratio(study["delayed effect"][low]["hindsight_ratio"], low, out / "hca_hindsight_ratio.png")
    learning = learning_study(args, device)
    plot_learning(learning, chapter_args(args), out / "hca_learning_curves.png")
    identity = identity_study(args)
    claims = hca_claims(args, study, identity)
    metrics = headline_metrics(study, learning)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, hca_gradient_study=study, hca_learning=learning,
                         hindsight_identity_gap=identity)
    print_report(args, study, learning, metrics, claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    torch.set_num_threads(1)  # every tensor here is small: on a CPU, threads cost more than they save
    common.run_script(main, Args)
