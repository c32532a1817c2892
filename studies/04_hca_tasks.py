"""04, study: HCA's estimators on three tabular tasks, against the exact gradient.

The chapter measures the variance of two policy gradients on the delayed effect: PG with a value
baseline and return-conditional HCA. Here, on three tasks with a known model (a shortcut chain,
the delayed effect, an ambiguous bandit; our versions of the HCA paper's §5 tasks), five
estimators at the uniform policy: REINFORCE, PG with the exact value baseline, return HCA and
state-conditional HCA (the paper's Theorem 1, in its all-action form), each with the learned h
or the exact one (Bayes' rule on the model). Each one's bias² against the exact gradient
(autograd through the exact policy evaluation) and its variance, as the reward noise σ grows;
how far h/π moves the credit at each step of the delayed effect; the return identity
Q(x, a) = E_z[h(a|x,z)/π(a|x) z] by numerical integration; COCOA's premise (Meulemans et al.
2023; COCOA itself is not implemented), that state HCA degrades toward REINFORCE when the later
state reveals the action (exact: its first-action term is REINFORCE's, episode by episode); the
decisive action's hindsight ratio as its reward moves further away (--distances), the return's
noise held the same; backward against forward search from the model, on key-to-door and on bit
flipping; and a tabular softmax policy learning with each estimator on each task.
The gradient study runs --seeds times (each seed its own episodes and classifiers; the first,
--seed, is the chapter's), and its claims decide on the 95% interval over those seeds.

    python studies/04_hca_tasks.py          # 165 s on 2 CPU cores, beside other jobs

Writes runs/studies/04_hca_tasks/: hca_variance_vs_sigma.png (tr Cov of each estimator vs σ,
per task), hca_hindsight_ratio.png (delayed effect: |h/π - 1| per step, large at step 0 only),
hca_learning_curves.png (exact J(π) while learning) and results.json.
"""

import dataclasses
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
import torch.nn as nn
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402

hindsight = importlib.import_module("04_her_hca")


MAX_SEARCH_BITS = 10  # the bit-flip model is dense: (2^n + 1)² n numbers, 42 MB at n = 10


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/04_hca_tasks", "output folder for figures and results.json")
    sigmas: str = common.arg("0.25,0.5,1,2,4", "reward noise levels σ, comma-separated", item=float)
    chain: int = common.arg(8, "shortcut chain length")
    corridor: int = common.arg(10, "delayed effect: steps between the decisive action and its reward")
    distances: str = common.arg("3,10,30", "delayed effect: the corridors of the distance check (return noise: the lowest "
                                "σ)", item=int)
    crossover: float = common.arg(0.2, "ambiguous bandit: probability that an arm pays the other arm's amount")
    seeds: int = common.arg(4, "seeds of the gradient study: each its own episodes and hindsight classifiers")
    learn_sigma: float = common.arg(1.0, "reward noise σ of the learning curves")
    learn_iters: int = common.arg(100, "policy updates per learning run")
    learn_batch: int = common.arg(32, "episodes per policy update")
    learn_seeds: int = common.arg(3, "seeds per estimator of the learning curves")
    pg_lr: float = common.arg(0.5, "step size of the tabular policy (gradient ascent on the logits)")
    value_rate: float = common.arg(0.2, "step size of the running-mean V (baseline) and r̂ (state HCA)")
    refit_steps: int = common.arg(10, "learning runs: hindsight classifier steps after each batch")
    hindsight_batches: int = common.arg(4, "learning runs: the classifier trains on the last this many batches")
    search_bits: int = common.arg(5, "bit flipping: the bits n of the backward-search check (2^n states)")

    SMOKE = dict(sigmas="0.5,2", chain=4, corridor=3, distances="2,3", seeds=2, learn_iters=3, learn_batch=4,
                 learn_seeds=1, refit_steps=2, search_bits=3)

    def __post_init__(self):
        common.require_positive(self, "corridor", "seeds", "learn_sigma", "learn_iters", "learn_batch", "learn_seeds",
                                "pg_lr", "refit_steps", "hindsight_batches")
        common.require(0 < self.value_rate <= 1, "--value-rate must be in (0, 1]")
        common.require(self.chain >= 2, "--chain must be at least 2")
        common.require(1 <= self.search_bits <= MAX_SEARCH_BITS, f"--search-bits must be in [1, {MAX_SEARCH_BITS}]")
        common.require(0 < self.crossover < 0.5, "--crossover must be in (0, 0.5)")
        common.require(all(s > 0 for s in self.sigma_list), "--sigmas must be positive (exact h needs noise)")
        common.require(all(d > 0 for d in self.distance_list), "--distances must be positive")

    @property
    def sigma_list(self) -> list[float]:
        return common.as_list(self.sigmas, float)

    @property
    def distance_list(self) -> list[int]:
        return common.as_list(self.distances, int)


def chapter_args(args: Args) -> hindsight.Args:
    """The chapter's hyperparameters (its smoke values in a smoke run), with this study's flags:
    the hindsight classifier and the variance measurement are the chapter's."""
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
# State-conditional HCA beside the chapter's two gradients (and REINFORCE, their common root)
# ============================================================================================
class StateHindsight(nn.Module):
    """h(a | x, y): the chapter's hindsight classifier conditioned on a state y visited after x
    instead of on the return: an MLP on the one-hot x and y (the same layers as the chapter's)."""

    def __init__(self, task: hindsight.TabularTask, hidden: int):
        super().__init__()
        self.num_states = task.num_states
        self.net = nn.Sequential(nn.Linear(2 * task.num_states, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, task.num_actions))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        one_hot = nn.functional.one_hot
        return self.net(torch.cat([one_hot(x, self.num_states).float(), one_hot(y, self.num_states).float()], -1))


def at_later_steps(values: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """values[t, n] once for each k where pairs[t, k, n] holds (values (T, N), pairs (T, T, N))."""
    T = len(values)
    return values[:, None, :].expand(T, T, -1)[pairs]


def hindsight_examples(episodes: dict, condition: str) -> tuple[torch.Tensor, ...]:
    """(x, c, action) examples: every step with its return (the chapter's), or every pair of a step
    and a later step of the same episode, with the later state (state HCA)."""
    if condition == "return":
        return hindsight.return_examples(episodes)
    s, a, alive = episodes["states"], episodes["actions"], episodes["alive"]
    T = len(s)
    later = torch.triu(torch.ones(T, T, dtype=torch.bool, device=s.device), diagonal=1)  # [t, k]: k > t
    pairs = later[:, :, None] & alive[None, :, :]
    return at_later_steps(s, pairs), s[None].expand(T, T, -1)[pairs], at_later_steps(a, pairs)


def hindsight_learner(args: hindsight.Args, task: hindsight.TabularTask, condition: str,
                      device) -> hindsight.HindsightLearner:
    """A fresh classifier: the chapter's h(a | x, z) on the return, or h(a | x, y) on a later state."""
    model = StateHindsight if condition == "state" else hindsight.Hindsight
    return hindsight.HindsightLearner(args, model(task, args.hca_hidden), device)


def fitted(args: hindsight.Args, task: hindsight.TabularTask, condition: str, episodes: dict,
           device) -> hindsight.HindsightLearner:
    learner = hindsight_learner(args, task, condition, device)
    learner.fit(hindsight_examples(episodes, condition), args.hindsight_steps)
    return learner


def learned_state_pairs(learner: hindsight.HindsightLearner, episodes: dict) -> torch.Tensor:
    """h(· | X_t, X_k) for every pair of steps (t, k) of each episode: (T, T, N, A)."""
    s = episodes["states"]
    T = len(s)
    return learner.probabilities(s[:, None].expand(T, T, -1), s[None].expand(T, T, -1))


def learned_h(learner: hindsight.HindsightLearner, condition: str, episodes: dict) -> torch.Tensor:
    """What a classifier says about these episodes: h(· | X_t, Z_t), or h(· | X_t, X_k) per pair."""
    if condition == "state":
        return learned_state_pairs(learner, episodes)
    return learner.probabilities(episodes["states"], episodes["returns"])


def all_action_rows(episodes: dict, policy: torch.Tensor, q_hat: torch.Tensor) -> torch.Tensor:
    """All-action form: Σ_b Q̂_t(b) ∇_θ[X_t] π(b|X_t) = π ⊙ (Q̂_t - Σ_b π_b Q̂_t(b)); (T, N, A)."""
    pi = policy[episodes["states"]]
    return pi * (q_hat - (pi * q_hat).sum(-1, keepdim=True))


def state_hca_q(episodes: dict, policy: torch.Tensor, h_pairs: torch.Tensor, r_hat: torch.Tensor) -> torch.Tensor:
    """State-conditional HCA (Theorem 1 with γ = 1):
    Q̂_t(b) = r̂(X_t, b) + Σ_{k > t} h(b | X_t, X_k) / π(b | X_t) R_k.

    h_pairs[t, k, n, b] = h(b | X_t, X_k) of episode n. A reward R_k is credited to the action b
    at t in proportion to how much more likely b becomes once we know X_k was visited.
    """
    s, rewards = episodes["states"], episodes["rewards"]
    T = len(s)
    later = torch.triu(torch.ones(T, T, device=s.device), diagonal=1)[:, :, None, None]
    ratio = h_pairs / policy[s][:, None]  # [t, k, n, b]: the hindsight ratio h/π
    return r_hat[s] + (later * ratio * rewards[None, :, :, None]).sum(1)


def estimator_rows(method: str, episodes: dict, policy: torch.Tensor, V: torch.Tensor, r_hat: torch.Tensor,
                   h: torch.Tensor | None, h_min: float) -> torch.Tensor:
    """The per-step gradient rows of each estimator. h is h(a|X_t, Z_t) for return HCA and the
    pairs h(a|X_t, X_k) for state HCA, learned or exact."""
    if method.startswith("REINFORCE"):  # Ψ_t = Z_t
        return hindsight.score_rows(episodes, policy, episodes["returns"])
    if method.startswith("state HCA"):
        return all_action_rows(episodes, policy, state_hca_q(episodes, policy, h, r_hat))
    if method.startswith("return HCA"):
        return hindsight.score_rows(episodes, policy, hindsight.return_hca_psi(episodes, policy, h, h_min))
    # PG + V baseline, the chapter's: Ψ_t = Z_t - V(X_t)
    return hindsight.score_rows(episodes, policy, episodes["returns"] - V[episodes["states"]])


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


def hindsight_estimates(args: hindsight.Args, task: hindsight.TabularTask, policy: torch.Tensor, train: dict,
                        test: dict, device) -> dict:
    """Each HCA estimator's h on the test episodes: learned on the train episodes, or exact."""
    h = {"return HCA (learned h)": learned_h(fitted(args, task, "return", train, device), "return", test),
         "return HCA (exact h)": exact_return_hindsight(task, policy, test["states"], test["returns"])}
    if task.horizon > 1:
        h["state HCA (learned h)"] = learned_h(fitted(args, task, "state", train, device), "state", test)
        h["state HCA (exact h)"] = exact_state_pairs(exact_state_hindsight(task, policy), test)
    return h


def estimator_errors(grads: torch.Tensor, truth: torch.Tensor) -> dict:
    """Bias² and variance (tr Cov) of per-episode gradients (N, S, A) against the exact gradient."""
    mean, variance = grads.mean(0), hindsight.trace_covariance(grads)
    return {"bias2": float(((mean - truth) ** 2).sum()), "variance": variance,
            "bias2_noise_floor": variance / len(grads),  # E|mean - truth|² if unbiased
            "start_state_variance": float(((grads[:, 0] - mean[0]) ** 2).sum(-1).mean())}


def ratio_profile(episodes: dict, policy: torch.Tensor, h: dict, signed: bool = False) -> dict:
    """Per step t, the mean over episodes of |h(A_t | X_t, ·)/π(A_t | X_t) - 1|: how far what
    followed moves the credit of the action taken; `signed`, of h/π - 1 itself, its elevation
    (for an exact h its expectation is ≥ 0, and 0 only where the action leaves what followed
    alone). State HCA: conditioned on the last state."""
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
        deviation = probs.gather(-1, a).squeeze(-1) / pi - 1
        deviation = ((deviation if signed else deviation.abs()) * valid).sum(1) / valid.sum(1).clamp(min=1)
        profile[method] = deviation.tolist()
    return profile


def revealed_share(h_pairs: torch.Tensor, episodes: dict) -> float:
    """The share of (first step, later step k) pairs of the episodes where h(· | X_0, X_k) is
    one-hot: the later state gives the first action away (COCOA's case)."""
    one_hot = h_pairs[0, 1:].max(-1).values == 1  # (T - 1, N): k = 1 .. T - 1
    return float(one_hot[episodes["alive"][1:]].float().mean())


FLOAT32_ROUNDOFF = 2.0**-24  # u: float32 rounds each operation within a relative u


def first_action_gap(episodes: dict, policy: torch.Tensor, h_pairs: torch.Tensor) -> float:
    """State HCA's term at the first action from the later rewards against REINFORCE's,
    (onehot(A_0) - π(X_0)) Z_1 with Z_1 = Σ_{k≥1} R_k: where h(· | X_0, X_k) is one-hot on A_0 for
    every k, the two are the same sum (COCOA's case). The largest |difference| over episodes and
    actions, in units of what float32 rounding allows per episode, 2T u Σ_{k≥1} |R_k| (the T - 1
    rewards summed in two orders, each within (T - 2) u Σ|R_k|, and a few products within u):
    at most 1 where the two are equal to float precision."""
    s, a, rewards = episodes["states"], episodes["actions"], episodes["rewards"]
    later_only = torch.zeros_like(policy)  # r̂ = 0: state HCA's part from the rewards after step 0
    state = all_action_rows(episodes, policy, state_hca_q(episodes, policy, h_pairs, later_only))[0]
    reinforce = (nn.functional.one_hot(a[0], policy.shape[1]) - policy[s[0]]) * episodes["returns"][1][:, None]
    rounding = 2 * len(rewards) * FLOAT32_ROUNDOFF * rewards[1:].abs().sum(0)
    return float(((state - reinforce).abs().amax(-1) / rounding).max())


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
    result = {"estimators": estimators, "hindsight_ratio": ratio_profile(test, policy, h),
              "hindsight_elevation": ratio_profile(test, policy, h, signed=True),
              "exact_gradient_norm2": float((truth**2).sum())}  # the scale of bias²; σ does not change it
    if "state HCA (exact h)" in h:
        result["first_action_revealed"] = revealed_share(h["state HCA (exact h)"], test)
        result["first_action_gap"] = first_action_gap(test, policy, h["state HCA (exact h)"])
    return result


def distance_study(args: Args, device) -> dict:
    """{corridor: [study_one's result per seed]} on the delayed effect, one corridor of --distances
    at a time: the decisive action as far from its reward as each. Each of the corridor + 2 rewards
    gets noise σ/√(corridor + 2), σ the lowest of --sigmas: the return's noise sd is σ at every
    corridor, so only the distance changes (with σ on every reward, a longer corridor would also
    mean a noisier return)."""
    chapter, low = chapter_args(args), min(args.sigma_list)
    return {d: [study_one(dataclasses.replace(chapter, seed=seed, corridor=d),
                          hindsight.delayed_effect(d, low / math.sqrt(d + 2)), device)
                for seed in range(args.seed, args.seed + args.seeds)]
            for d in tqdm(args.distance_list, desc="HCA distance study", leave=False)}


def gradient_study(args: Args, device) -> dict:
    """{task: {σ: [study_one's result per seed]}}; the first seed, --seed, is the chapter's."""
    chapter, study = chapter_args(args), {}
    for noise in tqdm(args.sigma_list, desc="HCA gradient study", leave=False):
        for task in make_tasks(args, noise):
            study.setdefault(task.name, {})[noise] = [
                study_one(dataclasses.replace(chapter, seed=seed), task, device)
                for seed in range(args.seed, args.seed + args.seeds)]
    return study


def pooled(runs: list[dict]) -> dict:
    """study_one's result with every number the mean over the seeds' runs (for tables and figures)."""
    first = runs[0]
    return {"estimators": {m: {k: float(np.mean([r["estimators"][m][k] for r in runs])) for k in e}
                           for m, e in first["estimators"].items()},
            **{kind: {m: np.mean([r[kind][m] for r in runs], 0).tolist() for m in first[kind]}
               for kind in ("hindsight_ratio", "hindsight_elevation")},
            "exact_gradient_norm2": first["exact_gradient_norm2"]}


# ============================================================================================
# Study 2: learning curves, a tabular softmax policy trained by each estimator's gradient
# ============================================================================================
LEARNERS = ("PG + V baseline", "state HCA (learned h)", "return HCA (learned h)")


def running_mean(table: torch.Tensor, index: torch.Tensor, targets: torch.Tensor,
                 rate: float | torch.Tensor) -> None:
    """The tabular learner that 03_rudder.py teaches, copied: each entry of `table` (flattened)
    that `index` visits moves by `rate` toward the mean of its targets in the batch; entries not
    visited stay. `rate` is a number or one per entry of the flattened table."""
    entries = table.view(-1)
    total = torch.zeros_like(entries).index_add_(0, index, targets.to(entries.dtype))
    visits = torch.bincount(index, minlength=len(entries))
    # x += rate (mean targets - x)
    entries += rate * torch.where(visits > 0, total / visits.clamp(min=1) - entries, torch.zeros_like(entries))


def exact_return(task: hindsight.TabularTask, logits: torch.Tensor) -> float:
    """J(π) = V^π(s_0) of the softmax policy π = softmax(θ[s]), by exact policy evaluation (γ = 1)."""
    V, _ = common.evaluate_policy(task.P.double().cpu(), task.R.double().cpu(),
                                  torch.softmax(logits.detach().double().cpu(), 1), 1.0)
    return float(V[0])


def optimal_return(task: hindsight.TabularTask) -> float:
    """max_π J(π), by value iteration: with γ = 1 every episode ends within the horizon."""
    V = torch.zeros(task.num_states, dtype=torch.float64)
    for _ in range(task.horizon):
        V = (task.R.double().cpu() + task.P.double().cpu() @ V).max(1).values
    return float(V[0])


def learn(args: Args, task: hindsight.TabularTask, method: str, seed: int, device) -> list[float]:
    """Exact J(π) after each update of a tabular softmax policy trained with `method`'s gradient.
    V (for the baseline) and r̂ (for state HCA) are running means; the hindsight classifier is
    refitted for a few steps after each batch, on the last few batches."""
    chapter = chapter_args(args)
    common.seed_everything(seed)
    task = task.to(device)
    generator = torch.Generator(device).manual_seed(seed)
    num_states, num_actions = task.num_states, task.num_actions
    logits = torch.zeros(num_states, num_actions, device=device)
    V, r_hat = torch.zeros(num_states, device=device), torch.zeros(num_states, num_actions, device=device)
    condition = "state" if method.startswith("state") else "return"
    learner = hindsight_learner(chapter, task, condition, device) if "HCA" in method else None
    recent, curve = [], [exact_return(task, logits)]
    for _ in range(args.learn_iters):
        policy = torch.softmax(logits, 1)
        episodes = hindsight.sample_episodes(task, policy, args.learn_batch, generator)
        h = None
        if learner is not None:
            recent = (recent + [episodes])[-args.hindsight_batches:]
            learner.fit(hindsight_examples({k: torch.cat([e[k] for e in recent], 1) for k in episodes}, condition),
                        args.refit_steps)
            h = learned_h(learner, condition, episodes)
        rows = estimator_rows(method, episodes, policy, V, r_hat, h, chapter.h_min)
        logits += args.pg_lr * hindsight.per_episode_gradients(episodes, rows, num_states).mean(0)
        s, alive = episodes["states"][episodes["alive"]], episodes["alive"]
        running_mean(V, s, episodes["returns"][alive], args.value_rate)
        running_mean(r_hat, s * num_actions + episodes["actions"][alive], episodes["rewards"][alive], args.value_rate)
        curve.append(exact_return(task, logits))
    return curve


def learning_study(args: Args, device) -> dict:
    """{task: {estimator: [one exact-J curve per seed]}}, at σ = learn_sigma."""
    results = {}
    runs = [(task, m) for task in make_tasks(args, args.learn_sigma) for m in LEARNERS
            if task.horizon > 1 or not m.startswith("state")]
    for task, method in tqdm(runs, desc="HCA learning", leave=False):
        results.setdefault(task.name, {})[method] = [learn(args, task, method, args.seed + i, device)
                                                     for i in range(args.learn_seeds)]
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


def plot_learning(learning: dict, args: Args, path) -> None:
    fig, axes = plt.subplots(1, len(learning), figsize=(5 * len(learning), 4))
    episodes = np.arange(args.learn_iters + 1) * args.learn_batch
    for ax, (name, by_method) in zip(np.atleast_1d(axes), learning.items()):
        common.plot_curves(ax, episodes, {m: np.array(c) for m, c in by_method.items()})
        ax.set(title=f"{name}, σ = {args.learn_sigma:g}", xlabel="episodes", ylabel="exact J(π)")
    common.save_figure(fig, path)


def variances(by_sigma: dict) -> dict:
    """{σ: [{estimator: tr Cov} per seed]} from {σ: [study_one's result per seed]}."""
    return {s: [{m: e["variance"] for m, e in run["estimators"].items()} for run in runs]
            for s, runs in by_sigma.items()}


def variance_ratio(variances: dict, method: str) -> float:
    """How many times larger the variance of PG + V baseline is than `method`'s, at one σ."""
    return variances["PG + V baseline"] / variances[method]



def above_one(ratios: np.ndarray) -> tuple[bool | None, str]:
    """The ledger's rule on ratios measured once per seed, for ratio > 1 (the effect is ratio - 1);
    the text shows the ratio itself, mean [95% interval]."""
    verdict, _ = common.seed_verdict(ratios - 1)
    mean, low, high = common.mean_interval(ratios)
    return verdict, f"{mean:.3g}x [{low:.3g}, {high:.3g}]"


def learned_variants(by_sigma: dict) -> list[str]:
    """The HCA variants with a learned h measured on this task (no state HCA without later states)."""
    measured = by_sigma[min(by_sigma)][0]
    return [m for m in ("state HCA (learned h)", "return HCA (learned h)") if m in measured]


def variance_claims(name: str, by_sigma: dict) -> list[dict]:
    """The chapter's two variance claims on one task, for each HCA variant with the learned h,
    decided over the seeds: PG + V's variance over HCA's above 1 at every σ; and that ratio at the
    largest σ minus at the smallest. by_sigma: {σ: [{estimator: tr Cov} per seed]}."""
    sigmas, methods = sorted(by_sigma), learned_variants(by_sigma)
    low, high, seeds = sigmas[0], sigmas[-1], len(by_sigma[sigmas[0]])
    ratio = {s: {m: np.array([variance_ratio(v, m) for v in by_sigma[s]]) for m in methods} for s in sigmas}
    lower = {m: [above_one(ratio[s][m]) for s in sigmas] for m in methods}
    grows = {m: common.seed_verdict(ratio[high][m] - ratio[low][m]) for m in methods}
    every = "; ".join(f"{m.split(' (')[0]}: " + ", ".join(f"σ={s:g} {text}" for s, (_, text) in
                                                           zip(sigmas, lower[m])) for m in methods)
    ends = "; ".join(f"{m.split(' (')[0]}: {grows[m][1]}" for m in methods)
    where = f"mean [95% interval] over {seeds} seeds (each its own episodes and classifier)"
    return [common.claim("HCA paper §5", f"{name}: HCA's gradient has a lower variance than PG with a value baseline",
                         f"variance of PG + V baseline / HCA (learned h), {where}: {every}",
                         common.all_parts(*(verdict for m in methods for verdict, _ in lower[m]))),
            common.claim("HCA paper §5", f"{name}: HCA's edge in variance over PG with a value baseline grows with "
                         "the reward noise σ", f"variance of PG + V baseline / HCA (learned h) at σ={high:g} minus "
                         f"at σ={low:g}, {where}: {ends}", common.all_parts(*(verdict for verdict, _ in grows.values())))]


def conditioning_claim(name: str, by_sigma: dict) -> dict:
    """Return HCA against state HCA (both with the learned h): state HCA's gradient variance minus
    return HCA's at each σ, decided over the seeds; yes if return HCA's is lower at every σ."""
    sigmas = sorted(by_sigma)
    gaps = {s: common.seed_verdict([v["state HCA (learned h)"] - v["return HCA (learned h)"] for v in by_sigma[s]])
            for s in sigmas}
    means = {s: {m: np.mean([v[f"{m} HCA (learned h)"] for v in by_sigma[s]]) for m in ("return", "state")}
             for s in sigmas}
    return common.claim("survey §8", f"{name}: return-conditional HCA is preferable to state-conditional HCA",
                        "gradient variance (tr Cov) with the learned h, return HCA vs state HCA (mean of the seeds), "
                        "and state's minus return's, mean [95% interval] over " f"{len(by_sigma[sigmas[0]])} seeds: "
                        + "; ".join(f"σ={s:g} {means[s]['return']:.3g} vs {means[s]['state']:.3g}, {gaps[s][1]}"
                                    for s in sigmas), common.all_parts(*(verdict for verdict, _ in gaps.values())))


def learned_methods(runs: list[dict]) -> list[str]:
    return [m for m in runs[0]["hindsight_elevation"] if "learned" in m]


def elevations(runs: list[dict], methods: list[str]) -> tuple[bool | None, str]:
    """Per method (an h), over seeds: the elevation h/π - 1 of the action taken under what
    followed, at the first (decisive) action, and that minus its mean over the corridor (the steps
    between it and the last), each yes where its interval lies above 0; and the corridor's mean
    itself, a zero below the first action's elevation (E[h/π] - 1 is a χ² divergence ≥ 0: a mean
    near 0 means every ratio near 1). Yes where all three hold for every method; and their text."""
    elevation = {m: [r["hindsight_elevation"][m] for r in runs] for m in methods}
    first = {m: common.seed_verdict([p[0] for p in e]) for m, e in elevation.items()}
    above = {m: common.seed_verdict([p[0] - np.mean(p[1:-1]) for p in e]) for m, e in elevation.items()}
    corridor = {m: common.seed_verdict([np.mean(p[1:-1]) for p in e], zero_below=float(np.mean([p[0] for p in e])))
                for m, e in elevation.items()}
    text = "; ".join(f"{m} {first[m][1]}, {above[m][1]}, corridor {corridor[m][1]}" for m in elevation)
    return common.all_parts(*(v for parts in (first, above, corridor) for v, _ in parts.values())), text


def decisive_claim(runs: list[dict], noise: float) -> dict:
    """Survey §4.2.1 on the delayed effect: only the decisive action's ratio is elevated (`elevations`)."""
    holds, text = elevations(runs, learned_methods(runs))
    return common.claim(
        "survey §4.2.1", "only the decisive action gets a significantly elevated hindsight ratio: h/π - 1 of the "
        "action taken, under what followed, lies above 0 at the decisive action and above that of the irrelevant "
        "actions, whose mean h/π - 1 is zero (their ratio stays near 1)",
        f"delayed effect, σ = {noise:g}, h/π - 1 at the first action, the first's minus its mean over the corridor, "
        f"and that mean (zero below the first's), mean [95% interval] over {len(runs)} seeds: {text}", holds)


def spurious_claim(runs: list[dict], noise: float) -> dict:
    """Survey §4.2.1 on the delayed effect: the actions after the first change nothing, so their
    exact gradient is 0; what REINFORCE hands them per episode is spurious credit, its size the
    gradient's variance off the first state. Yes where its interval over seeds lies above 0."""
    def off_start(method: str) -> list[float]:
        return [r["estimators"][method]["variance"] - r["estimators"][method]["start_state_variance"] for r in runs]

    holds, text = common.seed_verdict(off_start("REINFORCE (no baseline)"))
    hca = common.mean_interval(off_start("return HCA (learned h)"))
    return common.claim(
        "survey §4.2.1", "correlated but non-causal actions may pick up spurious credit: REINFORCE credits the "
        "actions that change nothing (their exact gradient is 0)",
        f"delayed effect, σ = {noise:g}: the per-episode gradient's variance (tr Cov) on the states after the first, "
        f"where the exact gradient is 0, mean [95% interval over {len(runs)} seeds]: REINFORCE {text}; return HCA "
        f"(learned h) {hca[0]:.3g} [{hca[1]:.3g}, {hca[2]:.3g}]", holds)


IN_WORDS = {True: "yes", False: "no", None: "inconclusive"}  # one part's verdict, as the ledger words a claim's


def fade(distance: dict, method: str) -> tuple[bool | None, str]:
    """Does the decisive action's elevation h/π - 1 under `method` hold up with distance? Its value
    at the shortest corridor minus at the longest, per seed: no where that fall's interval lies
    above 0; yes where it lies below 0 (a rise is no fade) or holds 0 with its top within the
    precision the seeds give the elevation itself (the half-width of its interval at the shortest
    corridor); else None, with that precision in the text."""
    near, far = distance[min(distance)], distance[max(distance)]
    falls = [n["hindsight_elevation"][method][0] - f["hindsight_elevation"][method][0] for n, f in zip(near, far)]
    _, low, high = common.mean_interval([n["hindsight_elevation"][method][0] for n in near])
    precision = (high - low) / 2
    _, text = common.seed_verdict(falls)
    _, fall_low, fall_high = common.mean_interval(falls)
    verdict = False if fall_low > 0 else True if fall_high < 0 or fall_high <= precision else None
    return verdict, f"{text}, against the elevation's own precision at {min(distance)}, ±{precision:.3g}"


RETURN_LEARNED = "return HCA (learned h)"  # the distance claim's: state HCA's later state gives the action away


def distance_claim(distance: dict, noise: float) -> dict:
    """Survey §8 on return HCA (learned h), the return's noise the same at every corridor of
    --distances (`distance_study`): is the decisive action found at every distance (`elevations`),
    with an elevation that does not fade from the shortest to the longest (`fade`)? The exact h's
    elevation, the same in distribution at every corridor, is shown as the check. State HCA is not
    judged: its later state reveals the first action, h/π - 1 = 1/π - 1, whether or not it matters."""
    found = {d: elevations(runs, [RETURN_LEARNED]) for d, runs in distance.items()}
    exact = {d: common.mean_interval([r["hindsight_elevation"]["return HCA (exact h)"][0] for r in runs])
             for d, runs in distance.items()}
    near, far = min(distance), max(distance)
    falls = fade(distance, RETURN_LEARNED) if far > near else (None, "one distance only, nothing to compare")
    return common.claim(
        "survey §8", DISTANCE,
        f"delayed effect, the return's noise sd σ = {noise:g} at every corridor (σ/√(corridor + 2) on each reward), "
        f"{RETURN_LEARNED}: h/π - 1 at the first action, the first's minus the corridor's and the corridor's, mean "
        f"[95% interval] over {len(distance[near])} seeds, by corridor: "
        + " | ".join(f"{d}: {text.removeprefix(RETURN_LEARNED + ' ')}" for d, (_, text) in found.items())
        + f"; the first's at {near} minus at {far} (> 0: fades with distance; no fade where its interval's top stays "
        f"within the first's own precision at {near}): "
        f"{falls[1]} ({IN_WORDS[falls[0]]}). Check, the exact h's h/π - 1 at the first action: "
        + ", ".join(f"{d}: {m:.3g} [{lo:.3g}, {hi:.3g}]" for d, (m, lo, hi) in exact.items())
        + ". State HCA not judged: its later state reveals the first action (h/π - 1 = 1/π - 1 at every distance)",
        common.all_parts(*(v for v, _ in found.values()), falls[0]))


DISTANCE = ("HCA judges a past action's relevance whatever its distance in time: return HCA's hindsight ratio for the "
            "decisive action is elevated, above the irrelevant ones', at every distance from its reward, and does not "
            "fade as that distance grows (the return's noise the same at every distance)")


def first_action_shares(run: dict) -> tuple[float, float]:
    """State HCA's (exact h) variance as a share of REINFORCE's, at the first action and on every
    other state together (tr Cov splits over the states)."""
    state, reinforce = (run["estimators"][m] for m in ("state HCA (exact h)", "REINFORCE (no baseline)"))
    first = state["start_state_variance"] / reinforce["start_state_variance"]
    rest = ((state["variance"] - state["start_state_variance"])
            / (reinforce["variance"] - reinforce["start_state_variance"]))
    return first, rest


def degrades_claim(by_sigma: dict) -> dict:
    """COCOA's premise on the delayed effect, exact: where the later state reveals the first action
    (the exact h(· | X_0, X_k) one-hot, the premise), state HCA's (exact h) term at that action is
    REINFORCE's on the rewards after it, episode by episode (`first_action_gap` at most 1 on every
    seed and σ). State HCA's share of REINFORCE's variance, at the first action and elsewhere, beside."""
    sigmas = sorted(by_sigma)
    shares = {s: np.array([first_action_shares(r) for r in by_sigma[s]]) for s in sigmas}
    gaps = {s: max(r["first_action_gap"] for r in by_sigma[s]) for s in sigmas}
    revealed = min(r["first_action_revealed"] for s in sigmas for r in by_sigma[s])
    measured = ("delayed effect, state HCA's (exact h) term at the first action from the later rewards against "
                "REINFORCE's, (onehot(A_0) - π) Z_1, per episode: the largest |difference| over the episodes of "
                f"{len(by_sigma[sigmas[0]])} seeds in units of float32 rounding (2T·2⁻²⁴·Σ_{{k≥1}} |R_k|; ≤ 1: the same "
                "term), " + ", ".join(f"σ={s:g} {gaps[s]:.2g}" for s in sigmas) + "; state HCA's variance as a share "
                "of REINFORCE's (no baseline), at the first action vs on the other states (mean of the seeds): "
                + ", ".join(f"σ={s:g} {shares[s][:, 0].mean():.3g} vs {shares[s][:, 1].mean():.2g}" for s in sigmas)
                + f"; the later state reveals the first action in {revealed:.0%} of the pairs")
    if revealed < 1:
        return common.claim("survey §8 (COCOA)", DEGRADES, f"premise not met: {measured}", None)
    return common.claim("survey §8 (COCOA)", DEGRADES, measured, max(gaps.values()) <= 1)


DEGRADES = "when the later state reveals the action, state HCA degrades toward REINFORCE"


def frontier_sizes(P: torch.Tensor, start: int, depth: int, backward: bool = False) -> list[int]:
    """The states a search first reaches at each depth 1..`depth` from `start` (its breadth-first
    layers), along the model's transitions under any action (P[s, a, s']), or against them: each
    state's successors, or its predecessors. A state met again is not explored again."""
    edges = P.sum(1) > 0
    edges = edges.T if backward else edges
    reached = torch.zeros(len(edges), dtype=torch.bool)
    reached[start] = True
    frontier, sizes = reached.clone(), []
    for _ in range(depth):
        frontier = edges[frontier].any(0) & ~reached
        reached |= frontier
        sizes.append(int(frontier.sum()))
    return sizes


def bitflip_model(bits: int) -> torch.Tensor:
    """P[s, i, s'] of the chapter's bit flipping (04_her_hca.play_bitflip) for the goal 1...1: the
    state is n bits (as an integer), action i flips bit i, and the goal ends the episode (it leads
    to the absorbing terminal state 2^n only)."""
    states = torch.arange(2**bits)
    goal, terminal = 2**bits - 1, 2**bits
    P = torch.zeros(terminal + 1, bits, terminal + 1)
    for i in range(bits):
        P[states, i, states ^ (1 << i)] = 1.0
    P[goal] = 0.0
    P[goal, :, terminal] = P[terminal, :, terminal] = 1.0
    return P


SEARCH = ("there are fewer predecessors of the goal than successors of the start: searching backward from the goal "
          "reaches fewer states in all, and no more at any depth, than searching forward from the start")


def search_claim(statement: str, world: str, forward: list[int], backward: list[int]) -> dict:
    """Exact from a model: the breadth-first layers of the two searches (`frontier_sizes`), compared."""
    return common.claim(
        "survey §4.4.1", statement, f"{world}, exact from its model, states first reached at depth 1-{len(forward)}: "
        f"forward from the start {forward}, backward from the goal {backward} ({sum(forward)} against "
        f"{sum(backward)} in all)", sum(backward) < sum(forward) and all(b <= f for b, f in zip(backward, forward)))


def backward_search_claim(corridor: int) -> dict:
    """Survey §4.4.1 on key-to-door: forward search from the key room against backward search from
    the reward's state (the door, key in hand), down to the key room."""
    world = common.KeyToDoor(1, corridor=corridor)
    P, _ = world.model()
    return search_claim(SEARCH, f"key-to-door with a corridor of {corridor} (start: the key room; goal: the door "
                        "with the key)", frontier_sizes(P, 0, world.door),
                        frontier_sizes(P, 2 * world.door + 1, world.door, backward=True))


def bitflip_search_claim(bits: int) -> dict:
    """Survey §4.4.1 on bit flipping, the project's other world: from 0...0 forward and from the
    goal 1...1 backward, n flips apart. The hypercube looks the same from every corner."""
    P = bitflip_model(bits)
    return search_claim(f"{SEARCH} (bit flipping)", f"bit flipping with n = {bits} (start: 0...0; goal: 1...1)",
                        frontier_sizes(P, 0, bits), frontier_sizes(P, 2**bits - 1, bits, backward=True))


def hca_claims(args: Args, study: dict, identity: dict, distance: dict) -> list[dict]:
    delayed = study["delayed effect"]
    low = min(args.sigma_list)  # the return still says something about the first action
    return [c for name, by_sigma in study.items() for c in variance_claims(name, variances(by_sigma))] + [
        conditioning_claim(name, variances(by_sigma)) for name, by_sigma in study.items()
        if "state HCA (learned h)" in learned_variants(variances(by_sigma))] + [
        decisive_claim(delayed[low], low),
        distance_claim(distance, low),
        spurious_claim(delayed[low], low),
        common.claim("survey §8", "Q(x, a) = E_z[h(a|x,z)/π(a|x) · z]",
                     "largest |E_z[h/π z] - Q| at the start state, uniform π, σ = 1: "
                     + ", ".join(f"{name} {gap:.1e}" for name, gap in identity.items()),
                     max(identity.values()) < 1e-3),
        degrades_claim(delayed),
        backward_search_claim(args.corridor),
        bitflip_search_claim(args.search_bits),
    ]


ESTIMATORS = ("REINFORCE (no baseline)", "PG + V baseline", "state HCA (learned h)", "state HCA (exact h)",
              "return HCA (learned h)", "return HCA (exact h)")


def estimator_cells(at: dict, cell) -> list:
    """cell(method, its errors) for each estimator measured at one (task, σ); "–" where it was not."""
    return [cell(m, at["estimators"][m]) if m in at["estimators"] else "–" for m in ESTIMATORS]


def variance_row(at: dict) -> list:
    """tr Cov of each estimator; for the learned HCAs, PG + V's ratio to it in brackets."""
    by_method = {m: e["variance"] for m, e in at["estimators"].items()}
    return estimator_cells(at, lambda m, e: f"{e['variance']:.3g} ({variance_ratio(by_method, m):.3g}x)"
                           if "learned" in m else e["variance"])


def bias_row(at: dict) -> list:
    """|∇J|², then each estimator's bias² with, in brackets, tr Cov / episodes: what an unbiased
    estimator shows from sampling alone."""
    return [at["exact_gradient_norm2"],
            *estimator_cells(at, lambda m, e: f"{e['bias2']:.2g} ({e['bias2_noise_floor']:.1g})")]


def final_returns(curves: list) -> str:
    """The final exact J(π) of each seed's curve: mean [min, max]."""
    ends = [c[-1] for c in curves]
    return f"{np.mean(ends):.3g} [{min(ends):.3g}, {max(ends):.3g}]"


def tables(args: Args, study: dict, learning: dict) -> dict:
    """The tables the run prints and the docs show; study: {task: {σ: pooled over the seeds}}."""
    keys = [(name, s) for name in study for s in args.sigma_list]
    learned = [[task.name, optimal_return(task),
                *(final_returns(learning[task.name][m]) if m in learning[task.name] else "–" for m in LEARNERS)]
               for task in make_tasks(args, args.learn_sigma)]
    return {"variance": {"title": f"tr Cov of each gradient at the uniform policy, mean of {args.seeds} seeds "
                                  "(PG + V / learned HCA in brackets)",
                         "header": ["task", "σ", *ESTIMATORS], "rows": [[n, s, *variance_row(study[n][s])] for n, s in keys]},
            "bias": {"title": f"bias² of each gradient against the exact one, mean of {args.seeds} seeds (in "
                              "brackets: an unbiased one's, tr Cov / N)",
                     "header": ["task", "σ", "|∇J|²", *ESTIMATORS], "rows": [[n, s, *bias_row(study[n][s])] for n, s in keys]},
            "learning": {"title": f"final exact J(π) after {args.learn_iters * args.learn_batch} episodes at "
                                  f"σ = {args.learn_sigma:g}, mean [min, max] over {args.learn_seeds} seeds",
                         "header": ["task", "optimum", *LEARNERS], "rows": learned}}


def headline_metrics(args: Args, study: dict, learning: dict) -> dict:
    """Each estimator's variance and bias² per (task, σ), mean of the seeds; each learner's final J."""
    metrics = {}
    for name, by_sigma in study.items():
        for noise, at in by_sigma.items():
            for method, m in at["estimators"].items():
                metrics[f"{name}_sigma{noise:g}_variance[{method}]"] = m["variance"]
                metrics[f"{name}_sigma{noise:g}_bias2[{method}]"] = m["bias2"]
    for name, by_method in learning.items():
        for method, curves in by_method.items():
            metrics[f"{name}_final_J[{method}]"] = float(np.mean([c[-1] for c in curves]))
    return metrics | {"tables": tables(args, study, learning)}


def print_report(metrics: dict, claims: list[dict]) -> None:
    for table in metrics["tables"].values():
        print(f"\n{table['title']}:\n" + common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    print(f"04 study: HCA's estimators on 3 tabular tasks, σ in {args.sigma_list}; device {device}")
    study = gradient_study(args, device)
    means = {name: {s: pooled(runs) for s, runs in by_sigma.items()} for name, by_sigma in study.items()}
    plot_variance(means, out / "hca_variance_vs_sigma.png")
    low = min(args.sigma_list)  # the return still says something about the first action
    plot_ratio(means["delayed effect"][low]["hindsight_ratio"], low, out / "hca_hindsight_ratio.png")
    learning = learning_study(args, device)
    plot_learning(learning, args, out / "hca_learning_curves.png")
    identity = identity_study(args)
    distance = distance_study(args, device)
    claims = hca_claims(args, study, identity, distance)
    metrics = headline_metrics(args, means, learning)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, hca_gradient_study=study, hca_learning=learning,
                         hindsight_identity_gap=identity, hca_distance=distance)
    print_report(metrics, claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    torch.set_num_threads(1)  # every tensor here is small: on a CPU, threads cost more than they save
    common.run_script(main, Args)
