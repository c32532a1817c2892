"""07 study — the estimator's settings: the group size K, retraining every N updates, and the clip over several passes.

Three of the SS-GRPO article's engineering statements, each checked with the chapter's SS-GRPO (A_i · w(s)) from
the same cold start, prompts and seeds; six arms, each trained on every seed:

  K = 2, K = 4, K = 8  "If the group size is too small (K<4), the contrastive signal is weak." The completions per
                       update (prompts x K) and per estimator minibatch (groups x K) are held fixed, so K is the
                       only change; measured: the trained estimator's held-out AUROC for right against failed
                       solutions, what the group's contrast trains it to fit (no verdict where K = 4's is not
                       above chance: no signal there for K = 2 to weaken); the first wrong step's beside it.
  frozen               "Re-train the estimator every N policy updates to avoid distribution shift." K = 8, its
                       estimator refitted every N updates as the chapter does, but only within its first
                       --freeze-after updates, then read as it is; against the K = 8 arm (retrained throughout):
                       the held-out AUROCs of w(s) on each final policy's own samples, and held-out pass@1. Both
                       take the same Adam steps in all (the frozen arm's fewer refits each take --est-iters scaled
                       by the retrained arm's refits over its own: by default 20 steps at each of 4 against 10 at
                       each of 8), so the two differ in which policy's rollouts the estimator learns from, not in
                       how much it learns; the verdict reads the AUROC for right against failed solutions, what
                       w(s) is trained to fit (the first wrong step's is shown).
  clip, no clip        "The policy loss applies the same clipping as PPO but with per-step advantages, preserving
                       stability." The chapter takes one optimiser pass per batch (μ = 1: the ratio is 1 and the
                       clip never acts); these take --passes passes over each batch with PPO's clipped surrogate on
                       the chapter's per-step advantages, with ε = --clip-eps and without the clip (ε = ∞):
                       how far each update moves the token log-probabilities (mean |log π_new - log π_old| after
                       the passes) and held-out pass@1 (studies/05_seeds.py measures the clip so for GRPO).

The held-out probe of w(s) is studies/07_credit.py's (`probe_weights`, imported, not copied): --probe-samples
samples per held-out problem from the trained policy, each step scored by w(s) against the gold labels. Every
claim decides on an effect measured once per seed (common.seed_verdict on its 95% interval over the seeds).
Shrunk from the chapter to fit about 10 minutes: 40 updates of 64 completions (the chapter: 80 of 128),
warm-up 10 updates (20), held-out pass@1 every 10 updates (20).

    python studies/07_estimator.py      # 673 s on 2 CPU cores beside other jobs (3 seeds, 6 arms; a run 15-42 s
                                        # as the load varies); runs/studies/07_estimator/
    python studies/07_estimator.py --reanalyse runs/studies/07_estimator/results.json  # claims again, nothing trained

Figure: estimator.png (the probe's AUROCs by K, retrained against frozen, and each update's move with and without
the clip).
"""

import copy
import dataclasses
import importlib
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402

ssg = importlib.import_module("07_ss_grpo")
credit_lab = importlib.import_module("studies.07_credit")  # its held-out probe of w(s), re-used as it is

ARMS = ("k2", "k4", "k8", "frozen", "clip", "no_clip")
SMALL_GROUPS = {"k2": 2, "k4": 4}  # the K of the group-size arms below the chapter's (k8 takes --group-size)
PROBES = ("localisation_auroc", "auroc_outcome", "auroc_step_right_in_failed")  # the probe's AUROCs, in the table
MOVES = ("log_ratio", "outside", "clip_fraction")  # what the multi-pass arms log per update


@dataclass
class Args(ssg.Args):
    out: str = common.arg("runs/studies/07_estimator", "output folder for figures and results.json")
    repeats: int = common.arg(3, "seeds per arm: --seed, --seed + 1, ... (the claims' interval is over them; one "
                                 "seed gives no verdict)")
    probe_samples: int = common.arg(4, "samples per held-out problem for the probe of w(s) after training")
    freeze_after: int = common.arg(20, "the frozen arm: its estimator is refitted only within its first N updates")
    passes: int = common.arg(4, "the clip arms: optimiser passes μ over each batch (the clip can act from the second)")
    clip_eps: float = common.arg(0.2, "the clip arm's ε (the article's clip_epsilon); the no-clip arm's band for "
                                      "counting tokens outside [1 - ε, 1 + ε]")
    rl_steps: int = common.arg(40, "RL: policy updates (the chapter: 80)")
    prompts: int = common.arg(8, "RL: prompts per update at K = --group-size; K = 2 and 4 get as many completions")
    warmup: int = common.arg(10, "RL: updates of linear learning-rate warmup (the chapter: 20 of 80)")
    eval_every: int = common.arg(10, "RL: updates between held-out evaluations")
    reanalyse: str = common.reanalyse_arg()

    SMOKE = dict(ssg.Args.SMOKE, group_size=8, prompts=1, repeats=1, probe_samples=2, freeze_after=1, passes=2,
                 eval_every=2)

    def __post_init__(self):
        common.require(self.group_size > 4 and self.group_size % 4 == 0, "--group-size must be a multiple of 4 above "
                       f"4 (the largest K; K = 2 and 4 then get whole prompts), got {self.group_size}")
        super().__post_init__()
        common.require_positive(self, "repeats", "probe_samples", "freeze_after", "clip_eps")
        common.require(self.seed + self.repeats - 1 <= common.SEED_BOUNDS[1],
                       f"--seed + --repeats - 1 must be at most {common.SEED_BOUNDS[1]}")
        common.require(self.freeze_after < self.rl_steps, "--freeze-after must be below --rl-steps (or nothing freezes)")
        common.require(self.passes >= 2, "--passes must be at least 2: on the first pass the ratio is 1")
        common.require(self.est_iters * self.refits(self.rl_steps) % self.refits(self.freeze_after) == 0,
                       "--est-iters x the refits in --rl-steps must be a multiple of the refits in --freeze-after "
                       "(the frozen arm's refits share the retrained arm's Adam steps equally)")

    def refits(self, updates: int) -> int:
        """The estimator's refits in the first `updates` updates: at updates 0, N, 2N, ... (N = --retrain-every)."""
        return -(-updates // self.retrain_every)

    @property
    def seeds(self) -> list[int]:
        return [self.seed + i for i in range(self.repeats)]

    def chapter_args(self, arm: str, seed: int) -> ssg.Args:
        """The chapter's settings for one arm and seed: at K = 2 and 4, the same completions per update and per
        estimator minibatch as at --group-size (prompts x K and groups x K fixed); the frozen arm's refits, fewer,
        take the retrained arm's Adam steps in all."""
        K = SMALL_GROUPS.get(arm, self.group_size)
        scale = self.group_size // K
        iters = self.est_iters * self.refits(self.rl_steps) // self.refits(self.freeze_after) if arm == "frozen" \
            else self.est_iters
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(ssg.Args)}
        return ssg.Args(**shared | {"seed": seed, "group_size": K, "prompts": self.prompts * scale,
                                    "est_groups": self.est_groups * scale, "est_iters": iters})


# ============================================================================================
# The arms: a frozen estimator, and the update with several passes, clipped or not
# ============================================================================================
class FrozenCredit(ssg.Credit):
    """The chapter's SS-GRPO credit whose estimator is refitted (every N updates, as the chapter's) only within its
    first `freeze_after` updates; after them w(s) is read as it is, trained on the early policy's rollouts only
    (its args' est_iters, from Args.chapter_args, give it the retrained arm's Adam steps in all)."""

    def __init__(self, base: ssg.Credit, freeze_after: int):
        super().__init__(base.method, base.tokenizer, base.args, base.estimator, base.args.seed)
        self.freeze_after = freeze_after

    def fit(self, batch: ssg.StepBatch, targets: torch.Tensor) -> dict:
        return super().fit(batch, targets) if len(self.log) < self.freeze_after else {}


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                      clip_eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's per-token loss, and where the clip acts (the clipped term is the smaller one: that token's gradient is 0);
    05's, restated (a study imports only its own chapter)."""
    # -min(ρ A, clip(ρ, 1-ε, 1+ε) A),  ρ = π_θ / π_old
    ratio = torch.exp(logp - old_logp)
    unclipped, clipped = ratio * advantages, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantages
    return -torch.minimum(unclipped, clipped), clipped < unclipped


class Passes:
    """The chapter's update (`ssg.policy_gradient_step`'s signature, per-sequence normalised, its k3 penalty) with
    `passes` optimiser passes over the batch and PPO's clipped surrogate on the per-step advantages A_it:

      loss = mean_i mean_{t in i} [ -min(ρ_it A_it, clip(ρ_it, 1-ε, 1+ε) A_it) + β k3(π_θ, π_ref)_it ],
      ρ_it = π_θ(y_it) / π_old(y_it), π_old the policy that sampled (ρ = 1 on the first pass; ε = ∞: no clip)

    Logs, besides the chapter's statistics, how far the update moved the tokens it trained on: the mean
    |log π_new - log π_old| after the last pass, the share of tokens with ρ outside [1 - band, 1 + band], and the
    share of token-passes where the clip acted (its gradient 0)."""

    def __init__(self, passes: int, clip_eps: float, band: float):
        self.passes, self.clip_eps, self.band = passes, clip_eps, band

    def __call__(self, policy, optimizer, completions: lm_world.Completions, advantages: torch.Tensor,
                 ref_logp: torch.Tensor, beta: float, max_grad_norm: float) -> dict:
        mask, batch = completions.completion_mask, (completions.sequences, completions.attention_mask,
                                                     completions.prompt_length)
        tokens = mask.sum().clamp(min=1)  # an all-padding batch has no token: statistics 0, not NaN
        stats = {"grad_norm": 0.0, "clip_fraction": 0.0}
        for k in range(self.passes):
            logp, entropy = lm_world.token_logprobs(policy, *batch, with_entropy=k == 0)
            if k == 0:
                old = logp.detach()
                stats["kl"] = float(torch.where(mask, ssg.kl_k3(old, ref_logp), 0.0).sum() / tokens)
                stats["entropy"] = float(torch.where(mask, entropy.detach(), 0.0).sum() / tokens)
            surrogate, clip_active = clipped_surrogate(logp, old, advantages, self.clip_eps)
            per_token = surrogate + beta * ssg.kl_k3(logp, ref_logp)
            loss = (torch.where(mask, per_token, 0.0).sum(1) / mask.float().sum(1).clamp(min=1)).mean()
            optimizer.zero_grad()
            loss.backward()
            stats["grad_norm"] += torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm).item() / self.passes
            optimizer.step()
            stats["clip_fraction"] += float((clip_active & mask).sum() / tokens) / self.passes
        return stats | self.moved(policy, batch, old, mask, tokens)

    def moved(self, policy, batch: tuple, old: torch.Tensor, mask: torch.Tensor, tokens: torch.Tensor) -> dict:
        """How far the update moved the batch's tokens: mean |log ρ| and the share with ρ outside the band."""
        with torch.no_grad():
            log_ratio = lm_world.token_logprobs(policy, *batch)[0] - old  # log π_new - log π_old
        outside = (log_ratio.exp() - 1).abs() > self.band
        return {"log_ratio": float(torch.where(mask, log_ratio.abs(), 0.0).sum() / tokens),
                "outside": float((outside & mask).sum() / tokens)}


def make_arm(arm: str, tokenizer, study: Args, args: ssg.Args, device) -> tuple[ssg.Credit, object]:
    """An arm's credit (the chapter's SS-GRPO, its estimator seeded by the run's seed) and policy update."""
    credit = ssg.make_credit("ss_grpo", tokenizer, args, device)
    if arm == "frozen":
        credit = FrozenCredit(credit, study.freeze_after)
    if arm in ("clip", "no_clip"):
        return credit, Passes(study.passes, study.clip_eps if arm == "clip" else math.inf, study.clip_eps)
    return credit, ssg.policy_gradient_step


def run_arm(initial, tokenizer, study: Args, arm: str, seed: int, held_out: list, device) -> dict:
    """The chapter's loop on a copy of the cold start (the cold start the KL reference) with the arm's credit and
    update, then held-out pass@1 and studies/07_credit.py's probe of w(s) on the trained policy's samples."""
    args = study.chapter_args(arm, seed)
    credit, update = make_arm(arm, tokenizer, study, args, device)
    policy, start = copy.deepcopy(initial), time.time()
    with mock.patch.object(ssg, "policy_gradient_step", update):  # the loop calls the chapter's update by name
        result = ssg.train(policy, lm_world.frozen_copy(initial), tokenizer, args, credit, held_out, device,
                           f"{arm} seed {args.seed}")
    fits = sum("estimator_loss" in e for e in credit.log)
    return result | {
        "arm": arm, "seed": args.seed, "group_size": args.group_size, "prompts": args.prompts,
        "wall_clock_s": time.time() - start, "estimator_steps": fits * args.est_iters, "credit": credit.log,
        "final": ssg.held_out_pass(policy, tokenizer, held_out, args, device),
        "probe": credit_lab.probe_weights(policy, credit.estimator, tokenizer, held_out, args, study.probe_samples,
                                          device)}


def run_all(initial, tokenizer, args: Args, device) -> dict:
    """Every arm on every seed: {arm: [run per seed]}."""
    held_out, runs = args.task.held_out(args.eval_problems), {arm: [] for arm in ARMS}
    for seed, arm in tqdm([(s, a) for s in args.seeds for a in ARMS], desc="runs"):
        runs[arm].append(run_arm(initial, tokenizer, args, arm, seed, held_out, device))
    return runs


# ============================================================================================
# Per-seed numbers, the claims
# ============================================================================================
def run_numbers(run: dict) -> dict:
    """One run's numbers: held-out pass@1 (and its drop from its best evaluation during training), the probe's
    AUROCs, the estimator's Adam steps, and for the multi-pass arms the mean over updates of what each logged."""
    best = max(e["pass@1"] for e in run["evals"])
    numbers = {"pass@1": run["final"]["pass@1"], "regression": best - run["evals"][-1]["pass@1"],
               "estimator_steps": run["estimator_steps"], **{k: run["probe"][k] for k in PROBES}}
    return numbers | {k: float(np.mean([h[k] for h in run["history"]])) for k in MOVES if k in run["history"][0]}


def per_seed_numbers(runs: dict) -> dict:
    """{arm: {number: values per seed}}."""
    table = {arm: [run_numbers(r) for r in rs] for arm, rs in runs.items()}
    return {arm: {k: np.array([n[k] for n in rows], dtype=float) for k in rows[0]} for arm, rows in table.items()}


def interval(values: np.ndarray) -> tuple[bool | None, str]:
    """common.seed_verdict on an effect (> 0 in the statement's direction) and its text, per seed listed."""
    holds, text = common.seed_verdict(values)
    return holds, f"{text} (per seed {', '.join(f'{v:+.3f}' for v in values)})"


def means(numbers: dict, key: str) -> str:
    """Each arm's mean over seeds of one number, where it has it: "K = 2 0.412, ..."."""
    return ", ".join(f"{name(arm)} {np.mean(n[key]):.3f}" for arm, n in numbers.items() if key in n)


def name(arm: str) -> str:
    return {"frozen": "frozen", "clip": "clip", "no_clip": "no clip"}.get(arm, f"K = {arm[1:]}")


def group_size_claim(numbers: dict, args: Args) -> dict:
    """K < 4 against K = 4: how well the trained estimator tells right from failed solutions, what the group's
    contrast (A_i of right against failed completions) trains it to fit, per seed; the first wrong step's AUROC is
    shown beside. The statement presumes a signal at K = 4 for K = 2 to weaken: where K = 4's AUROC is not shown
    above chance, no verdict."""
    outcome = {arm: numbers[arm]["auroc_outcome"] for arm in ("k2", "k4", "k8")}
    holds, text = interval(outcome["k4"] - outcome["k2"])
    signal, signal_text = common.seed_verdict(outcome["k4"] - 0.5)
    premise = "" if signal else (f"; premise not met: at K = 4 the estimator does not tell right from failed "
                                 f"solutions better than chance (AUROC minus 0.5: {signal_text}), so there is no "
                                 "signal for K = 2 to weaken")
    _, eight = interval(outcome["k8"] - outcome["k4"])
    B = args.prompts * args.group_size
    return common.claim(
        "SS-GRPO article, Trade-offs", "with groups smaller than 4 the contrastive signal is weak: the estimator "
        "trained at K = 2 tells right from failed solutions less well than at K = 4",
        f"held-out AUROC of w(s) for right against failed solutions (steps of the trained policy's own samples; 0.5 "
        f"is chance), mean of seeds: K = 2 {np.mean(outcome['k2']):.3f}, K = 4 {np.mean(outcome['k4']):.3f}, K = "
        f"{args.group_size} {np.mean(outcome['k8']):.3f}; K = 4 minus K = 2 {text}; K = {args.group_size} minus "
        f"K = 4 {eight} (mean [95% interval over {len(outcome['k2'])} seeds]); {B} completions per update and "
        f"{args.est_groups * args.group_size} per estimator minibatch at every K; AUROC of -w(s) for the first "
        f"wrong step: {means({a: numbers[a] for a in outcome}, 'localisation_auroc')}{premise}",
        None if premise else holds)


def retrain_claim(numbers: dict, args: Args) -> dict:
    """Retrained every N updates against frozen after the first --freeze-after: the probe on each final policy."""
    retrained, frozen = numbers["k8"], numbers["frozen"]
    holds, text = interval(retrained["auroc_outcome"] - frozen["auroc_outcome"])
    _, located = interval(retrained["localisation_auroc"] - frozen["localisation_auroc"])
    _, passed = interval(retrained["pass@1"] - frozen["pass@1"])
    return common.claim(
        "SS-GRPO article, Checklist", f"retraining the estimator every N updates avoids distribution shift: on the "
        f"final policy's samples the estimator retrained every N = {args.retrain_every} updates tells right from "
        f"failed solutions better than one frozen after its first {args.freeze_after} updates",
        f"held-out AUROC of w(s) for right against failed solutions (steps of the trained policy's own samples; what "
        f"w is trained to fit), retrained ({np.mean(retrained['estimator_steps']):.0f} Adam steps, {args.est_iters} "
        f"every {args.retrain_every} updates) {np.mean(retrained['auroc_outcome']):.3f} minus frozen "
        f"({np.mean(frozen['estimator_steps']):.0f} Adam steps, all within its first {args.freeze_after} updates) "
        f"{np.mean(frozen['auroc_outcome']):.3f}: {text}; the same for the first wrong step's AUROC (retrained "
        f"{np.mean(retrained['localisation_auroc']):.3f}, frozen {np.mean(frozen['localisation_auroc']):.3f}): "
        f"{located}; held-out pass@1 (retrained {np.mean(retrained['pass@1']):.3f}, frozen "
        f"{np.mean(frozen['pass@1']):.3f}): {passed} (mean [95% interval over {len(frozen['pass@1'])} seeds]; "
        f"{args.rl_steps} updates, K = {args.group_size})",
        holds)


def clip_claims(numbers: dict, args: Args) -> list[dict]:
    """The clip over --passes passes on the chapter's per-step advantages: the move per update, and pass@1."""
    clip, free = numbers["clip"], numbers["no_clip"]
    acted = clip["clip_fraction"]
    premise = "" if acted.max() > 0 else "; premise not met: the ratio never left [1 - ε, 1 + ε], the clip had " \
                                         "nothing to limit"
    holds, text = interval(free["log_ratio"] - clip["log_ratio"])
    setting = (f"μ = {args.passes} optimiser passes over each batch, ε = {args.clip_eps:g}, SS-GRPO's A_i · w(s), "
               f"{args.rl_steps} updates")
    moved = common.claim(
        "SS-GRPO article, Engineering decisions", "the policy loss's PPO clip on per-step advantages limits how far "
        "token probabilities move in one update",
        f"{setting}: mean per-token |log π_new - log π_old| after an update's passes (mean over updates), without the "
        f"clip {np.mean(free['log_ratio']):.4f} minus with it {np.mean(clip['log_ratio']):.4f}: {text}; tokens with "
        f"π_new/π_old outside [1 - ε, 1 + ε]: {np.mean(free['outside']):.2%} without, {np.mean(clip['outside']):.2%} "
        f"with; the clip acted on {np.mean(acted):.2%} of token-passes (mean [95% interval over {len(acted)} "
        f"seeds]){premise}", None if premise else holds)
    # stability is not falling back from what was reached (a higher end alone could be mere speed)
    stable, drop_text = interval(free["regression"] - clip["regression"])
    _, pass_text = interval(clip["pass@1"] - free["pass@1"])
    kept = common.claim(
        "SS-GRPO article, Engineering decisions", "the clip on per-step advantages preserves stability: over several "
        "passes per batch, training with the clip falls back less from its best held-out pass@1 than without it",
        f"{setting}: the drop from the best held-out pass@1 during training to the last, without the clip "
        f"{np.mean(free['regression']):.3f} minus with it {np.mean(clip['regression']):.3f}: {drop_text}; held-out "
        f"pass@1 at the end, with the clip {np.mean(clip['pass@1']):.3f} minus without {np.mean(free['pass@1']):.3f}: "
        f"{pass_text} (mean [95% interval over {len(acted)} seeds]){premise}", None if premise else stable)
    return [moved, kept]


def check_claims(numbers: dict, args: Args) -> list[dict]:
    return [group_size_claim(numbers, args), retrain_claim(numbers, args), *clip_claims(numbers, args)]


# ============================================================================================
# Figure, table, the run
# ============================================================================================
def seed_points(ax, x: float, values: np.ndarray, colour: str) -> None:
    """One bar, the mean over seeds, with each seed's value as a dot."""
    ax.bar(x, np.mean(values), color=colour, alpha=0.4, width=0.6)
    ax.plot([x] * len(values), values, "o", color=colour)


def plot(numbers: dict, runs: dict, args: Args, path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, arm in enumerate(("k2", "k4", "k8")):
        seed_points(axes[0], i, numbers[arm]["localisation_auroc"], "C0")
    axes[0].set(xticks=range(3), xticklabels=[name(a) for a in ("k2", "k4", "k8")], ylabel="held-out AUROC",
                title="first wrong step, by group size\n(same completions per update)")
    for i, (arm, colour) in enumerate((("k8", "C0"), ("frozen", "C1"))):
        seed_points(axes[1], i, numbers[arm]["auroc_outcome"], colour)
        seed_points(axes[1], i + 3, numbers[arm]["localisation_auroc"], colour)
    axes[1].set(xticks=[0, 1, 3, 4], xticklabels=["retrained", "frozen", "retrained", "frozen"],
                title=f"right vs failed (left), first wrong step (right)\nretrained every {args.retrain_every} "
                      f"vs frozen after {args.freeze_after} updates")
    for arm, colour in (("clip", "C2"), ("no_clip", "C3")):
        moves = np.mean([[h["log_ratio"] for h in r["history"]] for r in runs[arm]], 0)
        axes[2].plot(moves, color=colour, label=f"{name(arm)} (μ = {args.passes})")
    axes[2].set(xlabel="update", ylabel="mean |log π_new - log π_old|", title="how far each update moves the tokens\n"
                "(mean of seeds)")
    axes[2].legend(fontsize="small")
    for ax in axes[:2]:
        ax.axhline(0.5, color="gray", linestyle="--", linewidth=1)
    for ax in axes:
        ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def table_of(numbers: dict, runs: dict) -> dict:
    """One row per arm: its K and prompts, means over seeds."""
    keys = ("pass@1", *PROBES, "log_ratio")
    rows = [[name(arm), runs[arm][0]["group_size"], runs[arm][0]["prompts"],
             *(f"{np.mean(n[k]):.3f}" if k in n else "-" for k in keys),
             f"{np.mean(n['estimator_steps']):.0f}"] for arm, n in numbers.items()]
    return {"header": ["arm", "K", "prompts", "pass@1", "AUROC: 1st wrong", "right/failed", "step right", "|log ρ|",
                       "est. steps"], "rows": rows}


def main(args: Args) -> dict:
    if args.reanalyse:
        return {"claims": common.reanalyse(args, lambda run_args, stored: check_claims(
            per_seed_numbers(stored["runs"]), run_args))}
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    print(f"07 estimator study; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), "
          f"device {device}; {len(ARMS)} arms x seeds {args.seeds}, {args.rl_steps} updates of "
          f"{args.prompts * args.group_size} completions")
    before = ssg.held_out_pass(initial, tokenizer, args.task.held_out(args.eval_problems), args, device)
    runs = run_all(initial, tokenizer, args, device)
    numbers = per_seed_numbers(runs)
    claims = check_claims(numbers, args)
    plot(numbers, runs, args, out / "estimator.png")
    table = table_of(numbers, runs)
    metrics = {"cold_start_pass@1": before["pass@1"], "tables": {"arms": table},
               **{f"{arm}_{k}": float(np.mean(v)) for arm, n in numbers.items() for k, v in n.items()},
               **{f"{arm}_seed{s}_{k}": v[i] for arm, n in numbers.items() for k, v in n.items()
                  for i, s in enumerate(args.seeds)}}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, cold_start=before, runs=runs)
    print(f"\nMeans over seeds {args.seeds}; cold start pass@1 {before['pass@1']:.3f}:\n"
          + common.format_table(table["rows"], table["header"]) + "\n\n" + common.format_claims(claims)
          + f"\n\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
