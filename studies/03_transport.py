"""03 study — reward transport (TRT) against TD and RUDDER, below and beyond the horizon τ_γ.

Key-to-door with a distractor reward (0.1, p = 0.5) at every corridor step and γ = 0.9, so
τ_γ = 1/(1 - γ) = 10 steps. TRT's classifier (03_rudder.py's AttentionClassifier) learns "the
return beats 0.5 + the expected distractors"; at the steps its attention picks out it adds the
rewards from τ_γ steps on (survey §4.1.4, §6). First on stored random episodes (which steps does
transport change? one classifier per seed, each on its own episodes), then as the reward of a
Q-learner, beside TD and RUDDER, as the corridor grows. The learners explore uniformly (ε = 1), so
that both branches are seen alike. Last, the survey's "distracting rewards limit RUDDER" (§5): TD
and RUDDER again without the distractors, at the same γ and ε. Then the survey's "TRT can
increase the classifier's learning rate without destabilizing the actor-critic" (§6):
studies/02_learning.py's tabular actor-critic (restated here) learns from TRT's reward at
--ac-corridor over a sweep of the classifier's learning rate (--classifier-lrs, the chapter's rate
first); where does its learning curve end at the highest rate, against the chapter's, and does it
solve sooner? The claims decide over the seeds (common.seed_verdict).

    python studies/03_transport.py      # 112 s on 2 CPU cores

Figures: transport.png (episodes to solve against the corridor length, with τ_γ; TRT's attention
and the transported reward on one episode that took the key); classifier_rate.png (the
actor-critic's learning curves, one per seed and classifier learning rate).
"""

import dataclasses
import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402

gae = importlib.import_module("02_gae")
rudder = importlib.import_module("03_rudder")

TRANSPORT_METHODS = ("Q-learning (TD)", "TRT", "RUDDER")
# studies/02_learning.py's tabular actor-critic, its defaults: actor and critic step sizes, GAE's λ,
# and "solved" once π(take key | key room) reaches SUCCESS
ACTOR_LR, CRITIC_LR, GAE_LAMBDA, SUCCESS = 0.1, 0.2, 0.9, 0.9


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/03_transport", "output folder for figures and results.json")
    sweep: str = common.arg("5,10,20,40", "corridor lengths of the transport study", item=int)
    gamma: float = common.arg(0.9, "discount (τ_γ = 1 / (1 - γ) steps)")
    distractor_prob: float = common.arg(0.5, "distractor probability per corridor step")
    epsilon: float = common.arg(1.0, "exploration of the learners (1: uniform, both branches seen alike)")
    width: int = common.arg(16, "TRT classifier width")
    focus: float = common.arg(3.0, "a step is important when it receives this many times the uniform attention")
    scale: float = common.arg(1.0, "share of the distant rewards added at an important step")
    seeds: int = common.arg(5, "seeds per (method, length), and classifiers in the demo: the claims' seeds")
    classifier_lrs: str = common.arg("3e-3,1e-2,3e-2,1e-1", "TRT classifier learning rates (Adam) under the "
                                     "actor-critic, ascending: the first the chapter's, the last the raised one",
                                     item=float)
    ac_corridor: int = common.arg(20, "corridor length of the actor-critic on TRT's reward")
    ac_episodes: int = common.arg(1600, "episodes per actor-critic run (it keeps learning once solved: does it fall back?)")

    SMOKE = dict(sweep="4", seeds=1, classifier_lrs="3e-3,3e-2", ac_corridor=12, ac_episodes=32)

    def __post_init__(self):
        common.require_positive(self, "width", "seeds")
        for name in ("distractor_prob", "epsilon"):
            common.require(0 <= getattr(self, name) <= 1, f"--{name.replace('_', '-')} must be in [0, 1]")
        common.require(0 < self.gamma < 1, "--gamma must be in (0, 1)")
        common.require(all(L > 0 for L in self.sweep_list), "--sweep: corridor lengths must be positive")
        rates = self.classifier_lr_list
        common.require(len(rates) >= 2 and 0 < rates[0] and rates == sorted(set(rates)),
                       "--classifier-lrs: two or more positive rates, ascending")
        common.require_positive(self, "ac_corridor")
        common.require(self.ac_episodes >= rudder.Args().learn_batch,
                       f"--ac-episodes must hold one batch ({rudder.Args().learn_batch} episodes)")

    @property
    def sweep_list(self) -> list[int]:
        return common.as_list(self.sweep, int)

    @property
    def classifier_lr_list(self) -> list[float]:
        return common.as_list(self.classifier_lrs, float)


def chapter_args(args: Args, seed: int | None = None) -> "rudder.Args":
    """The chapter's settings (its smoke settings in a smoke run), with TRT's and the number of
    seeds from this study, and `seed` (args.seed if None)."""
    settings = rudder.Args(seed=args.seed if seed is None else seed, smoke=args.smoke, trt_width=args.width,
                           trt_focus=args.focus, trt_scale=args.scale, sweep_seeds=args.seeds)
    return common.apply_smoke(settings)


def transport_demo(args: Args, settings: "rudder.Args", device) -> dict:
    """Train TRT's classifier on stored random episodes with distractors; what does it mark?"""
    env, episode = rudder.uniform_episodes(settings, args.distractor_prob, device)
    x = rudder.encode(episode, env.num_states, "difference")
    fitter = rudder.transport_classifier(settings, x.shape[-1], device)
    fitter.fit(x, (episode["rewards"].sum(0) > rudder.key_threshold(env)).float(), settings.steps // 3, progress=True)
    with torch.no_grad():
        weights = rudder.importance(fitter.model(x)[1])
    horizon = rudder.discount_horizon(args.gamma)
    transported = rudder.transport(episode["rewards"], weights, horizon, settings.trt_focus, settings.trt_scale)
    changed = (transported != episode["rewards"]).float()  # (steps, episodes); step 0 is the key room
    marked = weights > settings.trt_focus  # the steps its attention picks
    return {"episode": episode, "weights": weights, "transported": transported, "horizon": horizon,
            "share_of_steps_changed": float(changed.mean()), "share_changed_at_key": float(changed[0].mean()),
            "share_changed_elsewhere": float(changed[1:].mean()), "steps_per_episode": changed.shape[0],
            "share_marked": float(marked.float().mean()), "unmarked_changed": int(changed[~marked].sum()),
            "steps_changed_per_episode": float(changed.sum(0).mean())}


def transport_demos(args: Args, settings: "rudder.Args", device) -> list[dict]:
    """transport_demo once per seed of the sweep, each its own stored episodes and classifier."""
    return [transport_demo(args, chapter_args(args, settings.seed + i), device) for i in range(settings.sweep_seeds)]


def transport_study(args: Args, settings: "rudder.Args", device) -> dict:
    """Key-to-door with γ < 1 and distractors: TD, TRT and RUDDER below and beyond τ_γ."""
    return rudder.sweep(settings, TRANSPORT_METHODS, args.sweep_list, device, "transport study",
                        gamma=args.gamma, distractor_prob=args.distractor_prob, epsilon=args.epsilon)


def quiet_study(args: Args, settings: "rudder.Args", device) -> dict:
    """The same γ and ε without the distractors: TD and RUDDER."""
    return rudder.sweep(settings, ("Q-learning (TD)", "RUDDER"), args.sweep_list, device, "without distractors",
                        gamma=args.gamma, distractor_prob=0.0, epsilon=args.epsilon)


def actor_critic(env: common.KeyToDoor, rewrite, gamma: float, updates: int) -> list[float]:
    """studies/02_learning.py's tabular actor-critic (actor_critic, critic_step: taught there),
    restated to learn from a rewritten reward at γ < 1 for a fixed number of updates. Actor: softmax
    over tabular logits, stepped along Σ_t Ψ_t ∇log π(a_t|s_t), Ψ = GAE(γ, λ) on rewrite(episode);
    critic: tabular V moved toward the λ-return Ψ + V. π(take key | key room) after each update."""
    logits = torch.zeros(env.num_states + 1, 2, device=env.device, requires_grad=True)
    V = torch.zeros(env.num_states + 1, device=env.device)
    actor = torch.optim.SGD([logits], lr=ACTOR_LR)
    curve = []
    for _ in range(updates):
        episode = common.play_episodes(env, torch.softmax(logits.detach(), 1))
        s, a = episode["states"], episode["actions"]
        advantages = gae.gae(rewrite(episode), V[s], V[episode["next_states"]], episode["ends"], gamma, GAE_LAMBDA)
        logp = torch.log_softmax(logits, 1)[s, a]
        actor.zero_grad()
        # sum over steps, mean over episodes: the key step's share does not shrink with L
        (-(logp * advantages).sum(0).mean()).backward()
        actor.step()
        # V(s) += lr · the mean over the batch's visits of s of Ψ_t (its λ-return - V(s))
        visits = torch.bincount(s.flatten(), minlength=len(V)).clamp(min=1)
        V += CRITIC_LR * torch.zeros_like(V).index_add_(0, s.flatten(), advantages.flatten()) / visits
        curve.append(float(torch.softmax(logits.detach()[0], 0)[1]))
    return curve


def trt_actor_critic(args: Args, settings: "rudder.Args", rate: float, seed: int, device) -> list[float]:
    """The actor-critic on key-to-door with distractors (--ac-corridor, γ = --gamma), learning from
    TRT's transported reward, the classifier at Adam learning rate `rate` (the chapter's refits):
    its learning curve, π(take key | key room) after each update."""
    common.seed_everything(seed)  # the classifier's initial weights: the same at every rate
    env = common.KeyToDoor(settings.learn_batch, corridor=args.ac_corridor, distractor_prob=args.distractor_prob,
                           seed=seed, device=device)
    shaper = rudder.make_shaper(dataclasses.replace(settings, lr=rate), "TRT", env, args.gamma, seed, device)
    return actor_critic(env, lambda episode: shaper(episode, env.num_states), args.gamma,
                        args.ac_episodes // settings.learn_batch)


def classifier_rate_study(args: Args, settings: "rudder.Args", device) -> dict:
    """{classifier learning rate: [one learning curve per seed]}, every rate on the same seeds."""
    runs = [(rate, settings.seed + i) for rate in args.classifier_lr_list for i in range(settings.sweep_seeds)]
    curves = {}
    for rate, seed in tqdm(runs, desc="actor-critic on TRT", leave=False):
        curves.setdefault(rate, []).append(trt_actor_critic(args, settings, rate, seed, device))
    return curves


def plot_transport(args: Args, transport_sweep: dict, demo: dict, path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    curves = {m: np.array([by_L[L] for L in args.sweep_list]).T for m, by_L in transport_sweep.items()}
    common.plot_curves(left, np.array(args.sweep_list), curves)
    left.set(xlabel="corridor length L (delay)", ylabel="episodes to solve", yscale="log",
             title=f"γ = {args.gamma}, distractors p = {args.distractor_prob}")
    left.axvline(demo["horizon"], color="k", ls=":", lw=1, label="τ_γ")
    took = int(torch.nonzero(demo["episode"]["actions"][0] == 1)[0])
    steps = np.arange(len(demo["weights"]))
    right.bar(steps - 0.2, demo["episode"]["rewards"][:, took].cpu().numpy(), width=0.4, label="reward r_t")
    right.bar(steps + 0.2, demo["transported"][:, took].cpu().numpy(), width=0.4, label="after transport")
    right.plot(steps, demo["weights"][:, took].cpu().numpy() / demo["weights"].shape[0], "k.-",
               label="attention received (share)")
    right.set(xlabel="step (0: key room)", title="TRT on one episode that took the key")
    right.legend(fontsize="small")
    common.save_figure(fig, path)


def plot_classifier_rates(curves: dict, batch: int, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for (rate, runs), color in zip(curves.items(), plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        episodes = batch * np.arange(1, len(runs[0]) + 1)
        for i, curve in enumerate(runs):
            ax.plot(episodes, curve, color=color, lw=1, alpha=0.7, label=f"classifier lr {rate:g}" if i == 0 else None)
    ax.axhline(SUCCESS, color="k", ls=":", lw=1, label="solved")
    ax.set(xlabel="episodes", ylabel="π(take key | key room)", title="Actor-critic on TRT's reward, one line per seed")
    ax.legend(fontsize="small")
    common.save_figure(fig, path)


def by_length(lengths: list[int], effects: dict, lower: dict | None = None,
              higher: dict | None = None) -> tuple[bool | None, str]:
    """A statement at every length, {L: [one effect per seed, > 0 in its direction]}: yes if each
    length's holds, no if one's fails (02_gae.seed_verdict), else None. Where a run sat at the floor
    (one batch) or the budget, the true effect may lie lower (lower[L]) or higher (higher[L]) than
    measured: that length's yes stands only if it cannot lie lower, its no only if it cannot lie
    higher. With each length's text."""
    lower, higher, verdicts, texts = lower or {}, higher or {}, [], []
    for L in lengths:
        verdict, text = censored(*common.seed_verdict(effects[L]), lower.get(L, False), higher.get(L, False))
        verdicts.append(verdict)
        texts.append(f"{L}: {text}")
    holds = False if False in verdicts else None if None in verdicts or not verdicts else True
    return holds, ", ".join(texts)


def censored(verdict: bool | None, text: str, lower: bool, higher: bool) -> tuple[bool | None, str]:
    """A verdict on an effect whose true value may lie lower or higher than measured (runs at the
    floor or the budget): a yes stands only if it cannot lie lower, a no only if it cannot lie higher."""
    if (verdict is True and lower) or (verdict is False and higher):
        return None, text + " (censored: runs at the floor or the budget)"
    return verdict, text


def edge(settings: "rudder.Args", runs: dict, L: int, side: str) -> bool:
    """Did a run at length L sit at the floor (one batch: the fewest episodes measurable, so it
    may need fewer) or at the budget (unsolved: it would need more)?"""
    return any(v <= settings.learn_batch if side == "floor" else v >= settings.max_episodes for v in runs[L])


def transport_claims(args: Args, settings: "rudder.Args", results: dict, demos: list[dict],
                     quiet: dict) -> tuple[dict, list[dict]]:
    lengths, horizon, seeds = args.sweep_list, demos[0]["horizon"], f"{settings.sweep_seeds} seeds"
    medians = {m: [float(np.median(results[m][L])) for L in lengths] for m in TRANSPORT_METHODS}
    metrics = {f"trt_L{L}_episodes_to_solve[{m}]": medians[m][i]
               for m in TRANSPORT_METHODS for i, L in enumerate(lengths)}
    metrics.update({f"trt_{k}": float(np.mean([d[k] for d in demos]))
                    for k in ("share_of_steps_changed", "share_changed_at_key", "share_changed_elsewhere",
                              "steps_changed_per_episode")})
    td, tr, ru = (results[m] for m in TRANSPORT_METHODS)
    gains = {L: np.divide(td[L], tr[L]) for L in lengths}
    short, long = [L for L in lengths if L + 1 < horizon], [L for L in lengths if L + 1 >= horizon]
    # TD / TRT (and TD - TRT) may lie lower where TD sits at the floor or TRT at the budget, higher where
    # TRT sits at the floor or TD at the budget
    gain_lower = {L: edge(settings, td, L, "floor") or edge(settings, tr, L, "budget") for L in lengths}
    gain_higher = {L: edge(settings, tr, L, "floor") or edge(settings, td, L, "budget") for L in lengths}
    largest, largest_text = None, "needs lengths on both sides of τ_γ"
    if short and long:
        largest, largest_text = censored(
            *common.seed_verdict(np.mean([gains[L] for L in long], 0) - np.mean([gains[L] for L in short], 0)),
            any(gain_lower[L] for L in long) or any(gain_higher[L] for L in short),
            any(gain_higher[L] for L in long) or any(gain_lower[L] for L in short))
    few, few_text = common.seed_verdict([d["share_changed_at_key"] - d["share_changed_elsewhere"] for d in demos])
    # a length whose episodes end within τ_γ of the key has nothing to transport: TRT is TD there
    transported = [L for L in lengths if L + 2 > horizon]
    beats, beats_text = by_length(transported, {L: np.subtract(td[L], tr[L]) for L in transported}, gain_lower,
                                  gain_higher)
    ahead, ahead_text = by_length(  # RUDDER - TRT
        lengths, {L: np.subtract(ru[L], tr[L]) for L in lengths},
        {L: edge(settings, ru, L, "floor") or edge(settings, tr, L, "budget") for L in lengths},
        {L: edge(settings, tr, L, "floor") or edge(settings, ru, L, "budget") for L in lengths})
    claims = [
        common.claim("survey §6", f"TRT's gain over the plain learner is largest when the delay exceeds τ_γ = {horizon}",
                     "TD / TRT episodes to solve, median of the seeds, at L = "
                     + ", ".join(f"{L}: {np.median(gains[L]):.1f}x" for L in lengths)
                     + f"; per seed, the mean gain beyond τ_γ minus below it, mean [95% interval over {seeds}]: "
                     + largest_text, largest),
        common.claim("survey §4.1.4", "transport augments the critical step (the key room), not steps at random",
                     f"on stored random episodes, one classifier per seed: {metrics['trt_share_changed_at_key']:.1%} "
                     f"of key-room steps changed, {metrics['trt_share_changed_elsewhere']:.1%} of the others, "
                     f"{metrics['trt_steps_changed_per_episode']:.2f} of {demos[0]['steps_per_episode']} steps per "
                     f"episode (mean of {seeds}); key room minus the others per seed, mean [95% interval]: {few_text}",
                     few),
        rest_claim(demos, metrics, seeds),
        common.claim("survey §6", "TRT consistently beats the plain learner (Q-learning here): fewer episodes to "
                     "solve at every length where a reward lies beyond τ_γ",
                     f"TD's episodes to solve minus TRT's per seed, mean [95% interval over {seeds}], at L = "
                     f"{beats_text}" + (f"; at L = {', '.join(str(L) for L in lengths if L not in transported)} the "
                                        "episode ends within τ_γ: nothing to transport, TRT is TD"
                                        if len(transported) < len(lengths) else ""), beats),
        common.claim("survey §4.1.5", "transport methods (TVT, TRT) are more successful than RUDDER",
                     f"RUDDER's episodes to solve minus TRT's per seed (> 0: TRT needs fewer), mean [95% interval "
                     f"over {seeds}], at L = {ahead_text}; medians TRT vs RUDDER "
                     + ", ".join(f"{a:,.0f} vs {b:,.0f}" for a, b in zip(medians["TRT"], medians["RUDDER"]))
                     + f" (the floor: {settings.learn_batch} episodes, one batch)", ahead),
        distractor_claim(args, settings, results, quiet)]
    return metrics, claims


def rest_claim(demos: list[dict], metrics: dict, seeds: str) -> dict:
    """'Leave the rest unchanged': the steps its attention does not pick keep their reward, exactly
    (a count on every seed). Whether the steps it picks are the critical ones is the claim before."""
    edited = [d["unmarked_changed"] for d in demos]
    return common.claim("survey §4.1.4", "transport leaves the rewards of the steps its attention does not pick "
                        "unchanged",
                        "on stored random episodes, one classifier per seed: steps picked (importance above the "
                        "focus) " + ", ".join(f"{d['share_marked']:.1%}" for d in demos) + "; edited steps among "
                        "those not picked " + ", ".join(map(str, edited)) + f", by seed (exact); of the steps outside "
                        f"the key room, {metrics['trt_share_changed_elsewhere']:.1%} are picked and edited (mean of "
                        f"{seeds})", not any(edited))


def distractor_claim(args: Args, settings: "rudder.Args", noisy: dict, quiet: dict) -> dict:
    """Do sporadic intermediate rewards limit RUDDER's gains? Per seed and length, RUDDER's lead
    over TD (TD / RUDDER episodes to solve) without the distractors minus with them, at the same γ
    and ε. RUDDER at the floor (one batch) hides how much its lead could be: with the distractors,
    the difference may lie lower; without, higher (by_length)."""
    lengths, td, ru = args.sweep_list, "Q-learning (TD)", "RUDDER"
    lead = {name: {L: np.divide(runs[td][L], runs[ru][L]) for L in lengths}
            for name, runs in (("with", noisy), ("without", quiet))}
    limits, text = by_length(
        lengths, {L: lead["without"][L] - lead["with"][L] for L in lengths},
        {L: edge(settings, noisy[ru], L, "floor") or edge(settings, quiet[td], L, "floor")
         or edge(settings, noisy[td], L, "budget") for L in lengths},
        {L: edge(settings, quiet[ru], L, "floor") or edge(settings, noisy[td], L, "floor")
         or edge(settings, quiet[td], L, "budget") for L in lengths})
    medians = ", ".join(f"{L}: {np.median(lead['with'][L]):.1f}x vs {np.median(lead['without'][L]):.1f}x"
                        for L in lengths)
    floored = sum(v <= settings.learn_batch for runs in (noisy, quiet) for L in lengths for v in runs[ru][L])
    return common.claim("survey §5", "sporadic intermediate (distracting) rewards limit RUDDER's improvements",
                        f"γ = {args.gamma}, ε = {args.epsilon}, distractors p = {args.distractor_prob} or none; "
                        f"RUDDER's lead over TD (TD / RUDDER episodes to solve), median of the seeds, with vs "
                        f"without, L = {medians}; without minus with per seed, mean [95% interval over "
                        f"{settings.sweep_seeds} seeds], at L = {text}; RUDDER at the floor ({settings.learn_batch} "
                        f"episodes, one batch) in {floored} of {2 * len(lengths) * settings.sweep_seeds} runs", limits)


def episodes_to_solve(curve: list[float], batch: int) -> int:
    """Episodes until π(take key | key room) first reaches SUCCESS (02_learning's "solved"); the
    run's episodes if never."""
    reached = np.flatnonzero(np.asarray(curve) >= SUCCESS)
    return batch * (int(reached[0]) + 1 if len(reached) else len(curve))


def largest_drop(curve: list[float]) -> float:
    """How far the learning curve ever fell below its best so far: max_t (max_{t' ≤ t} π_t' - π_t)."""
    return float(np.max(np.maximum.accumulate(curve) - curve))


def no_harm(harm, tolerance: float) -> tuple[bool | None, str]:
    """A statement that a change does no harm, on the harm per seed (> 0: worse): no where its
    interval lies above 0 (measurably worse, common.seed_verdict); yes where it lies below
    `tolerance` (any harm is smaller than that); else None. With "mean [95% interval]"."""
    worse, text = common.seed_verdict(harm)
    if worse:
        return False, text
    within, _ = common.seed_verdict(np.subtract(tolerance, harm))
    return (True if within else None), text


def classifier_rate_summary(curves: dict, batch: int) -> tuple[dict, dict]:
    """Per rate, one value per seed: π(take key | key room) at the end, whether and after how many
    episodes it reached SUCCESS, its largest drop; and their table (means; episodes: median, range)."""
    summary = {rate: {"final": [c[-1] for c in runs], "solved": [max(c) >= SUCCESS for c in runs],
                      "episodes": [episodes_to_solve(c, batch) for c in runs], "drop": [largest_drop(c) for c in runs]}
               for rate, runs in curves.items()}
    rows = [[f"{rate:g}", rudder.seed_spread(v["episodes"]), f"{np.mean(v['final']):.3f}", f"{np.mean(v['drop']):.3f}",
             f"{sum(v['solved'])} of {len(v['solved'])}"] for rate, v in summary.items()]
    header = ["classifier lr", "episodes to solve", "final π(take key)", "largest drop", "solved"]
    return summary, {"header": header, "rows": rows}


def classifier_rate_metrics(summary: dict) -> dict:
    """Per rate: the final π(take key | key room) and the largest drop (means of the seeds), the
    episodes to solve (median)."""
    metrics = {}
    for rate, v in summary.items():
        metrics[f"trt_ac_final_p_key[lr={rate:g}]"] = float(np.mean(v["final"]))
        metrics[f"trt_ac_largest_drop[lr={rate:g}]"] = float(np.mean(v["drop"]))
        metrics[f"trt_ac_episodes_to_solve[lr={rate:g}]"] = float(np.median(v["episodes"]))
    return metrics


def classifier_rate_claim(args: Args, summary: dict, budget: int) -> dict:
    """Survey §6: the classifier's learning rate can rise without destabilising the actor-critic.
    Per seed, π(take key | key room) after the run at the chapter's rate minus at the highest (> 0:
    the raised rate left the actor-critic worse): no where that harm is measurable; yes where its
    interval stays below the spread between seeds at the chapter's rate (std of their final π: how
    far one seed lies from another with nothing changed). The premise: at the chapter's rate the
    actor-critic learns (a seed solves). Beside it, the benefit the essay implies: episodes to solve
    at the chapter's rate minus at the highest (> 0: faster; censored where a run never solved)."""
    base, high = summary[args.classifier_lr_list[0]], summary[args.classifier_lr_list[-1]]
    low_rate, high_rate = args.classifier_lr_list[0], args.classifier_lr_list[-1]
    seeds = len(base["final"])
    spread = float(np.std(base["final"], ddof=1)) if seeds > 1 else float("nan")
    holds, harm = no_harm(np.subtract(base["final"], high["final"]), spread)
    _, speed = censored(*common.seed_verdict(np.subtract(base["episodes"], high["episodes"])),
                        not all(high["solved"]), not all(base["solved"]))
    _, drops = common.seed_verdict(np.subtract(high["drop"], base["drop"]))
    measured = (f"studies/02_learning.py's actor-critic (GAE γ = {args.gamma}, λ = {GAE_LAMBDA}) on TRT's reward, "
                f"L = {args.ac_corridor}, distractors p = {args.distractor_prob}, {budget:,} episodes, {seeds} seeds. "
                f"Per classifier lr ({', '.join(f'{rate:g}' for rate in summary)}): final π(take key), mean "
                + ", ".join(f"{np.mean(v['final']):.3f}" for v in summary.values())
                + "; solved " + ", ".join(f"{sum(v['solved'])}" for v in summary.values()) + f" of {seeds}"
                + "; episodes to solve, median " + ", ".join(f"{np.median(v['episodes']):,.0f}" for v in summary.values())
                + "; the learning curve's largest drop, mean " + ", ".join(f"{np.mean(v['drop']):.2g}"
                                                                        for v in summary.values())
                + f". Final π per seed at {low_rate:g}: " + ", ".join(f"{f:.2f}" for f in base["final"])
                + f"; at {high_rate:g}: " + ", ".join(f"{f:.2f}" for f in high["final"])
                + f"; at {low_rate:g} minus at {high_rate:g} (> 0: worse at {high_rate:g}), mean [95% interval]: {harm}, "
                f"against the spread between seeds at {low_rate:g} (std) {spread:.3g}. Largest drop at {high_rate:g} "
                f"minus at {low_rate:g}: {drops}; episodes to solve at {low_rate:g} minus at {high_rate:g} (> 0: faster "
                f"at {high_rate:g}): {speed}")
    if not any(base["solved"]):
        holds, measured = None, f"premise not met: the actor-critic never solves at {low_rate:g}. {measured}"
    return common.claim("survey §6", f"TRT's classifier learning rate can rise ({high_rate / low_rate:.0f}x here) "
                        "without destabilising the actor-critic that learns from its reward", measured, holds)


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    torch.set_num_threads(1)  # small models stepped one batch at a time: threads only wait on each other
    settings = chapter_args(args)
    print(f"03 study: TRT, γ = {args.gamma}, distractors p = {args.distractor_prob}, L in {args.sweep}, device {device}")
    # the models draw their initial weights from torch's global generator in turn: keep this order
    demos = transport_demos(args, settings, device)
    transport_sweep = transport_study(args, settings, device)
    quiet = quiet_study(args, settings, device)
    curves = classifier_rate_study(args, settings, device)

    plot_transport(args, transport_sweep, demos[0], out / "transport.png")
    plot_classifier_rates(curves, settings.learn_batch, out / "classifier_rate.png")
    metrics, claims = transport_claims(args, settings, transport_sweep, demos, quiet)
    rates, rate_table = classifier_rate_summary(curves, settings.learn_batch)
    claims.append(classifier_rate_claim(args, rates, args.ac_episodes // settings.learn_batch * settings.learn_batch))
    metrics.update(classifier_rate_metrics(rates))
    rows = [[L, *(rudder.seed_spread(by_L[L]) for by_L in transport_sweep.values())] for L in args.sweep_list]
    table = {"header": ["corridor L", *transport_sweep], "rows": rows}
    metrics["tables"] = {"transport": table, "classifier_rate": rate_table}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, transport_sweep=transport_sweep, without_distractors=quiet,
                         classifier_rate={f"{rate:g}": v for rate, v in rates.items()})
    print(f"\nTransport study (γ = {args.gamma}, distractors), episodes to solve: median (range) of the seeds:")
    print(common.format_table(table["rows"], table["header"]))
    print(f"\nActor-critic on TRT's reward (L = {args.ac_corridor}) per classifier learning rate, {settings.sweep_seeds} seeds:")
    print(common.format_table(rate_table["rows"], rate_table["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
