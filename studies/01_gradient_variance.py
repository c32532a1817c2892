"""01 study — the policy gradient's variance against rally length, with and without a baseline.

At a fixed policy (rtg_baseline, seed 0, after the chapter's default 1.25M training frames: the
halfway point of its full 2.5M budget), it records every point of 128 games played for 400
frames, computes one gradient vector per point, g_i = Σ_t (Ψ_t - b) ∇ log π(a_t|s_t) (torch.func:
grad, vmapped over points), and measures tr Cov of g over the points, binned by rally length, and
the mean g, for two Ψ (flat: R; reward-to-go: γ^(T-t) R), each without and with a constant
baseline b. A reference batch of games comes first: its mean Ψ is b (so b does not depend on the
actions it is measured on, the classic argument's premise) and its mean gradient without b the
direction the bias is measured along. Then --batches independent batches, each its own games: the
claims decide on their 95% t-intervals over these batches (common.seed_verdict), the bias claim exactly.

- over-long-generations (Why long generations make credit assignment hard): the terminal-reward
  estimator's variance "grows roughly linearly with episode length": the log-log slope of flat's
  tr Cov against rally length, per batch, as studies/07_lengths.py's variance_claim decides it;
- whole-game §3, a baseline reduces variance: tr Cov without minus with b, per batch;
- whole-game §3, without introducing bias: exactly, Σ_a π(a|s) b ∇ log π(a|s) = b ∇ Σ_a π(a|s) = 0 at
  every state of the reference batch, to float32 precision, on the trained policy (score_identity);
  for context, the mean gradient with b minus without along the reference direction, per batch,
  and whether the batches could detect a bias of the gradient's size at all.

    python studies/01_gradient_variance.py                # 102 s on 2 shared CPU cores, one thread
    python studies/01_gradient_variance.py --gamma 0.99 --out runs/studies/01_gradient_variance_gamma_099
                                                          # the policy and the reward-to-go at γ = 0.99: 116 s

About half the time trains the policy (1.25M frames), the rest measures 7 batches (the reference
and 6), some 10 s each, and replays the reference's games for the identity.

Writes gradient_variance.png (tr Cov per length bin, log-log, every batch) and results.json.
"""

from __future__ import annotations

import importlib
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap

import common

pong = importlib.import_module("01_reinforce_pong")

VARIANCE_ESTIMATORS = {
    "flat, no baseline": "Ψ_t = R",
    "flat - mean": "Ψ_t = R - b",
    "rtg, no baseline": "Ψ_t = γ^(T-t) R",
    "rtg - mean": "Ψ_t = G_t - b",
}
REFERENCE_SEED = 20_000  # the reference batch's games: seed + this, clear of the training seeds and the batches'
PAIRS = {"flat": ("flat, no baseline", "flat - mean"), "rtg": ("rtg, no baseline", "rtg - mean")}  # without b, with


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/01_gradient_variance", "output folder for the figure and results.json")
    frames: int = common.arg(1_250_000, "training frames of the measured policy (rtg_baseline, the first seed)")
    variance_frames: int = common.arg(400, "frames per game recorded with the trained policy, in every batch")
    batches: int = common.arg(6, "independent batches of games measured (the claims' seeds), after the reference one")
    gamma: float = common.arg(0.9, "discount of the reward-to-go (per frame), in training and in Ψ")

    SMOKE = dict(frames=2 * 16 * 32, variance_frames=96, batches=2)

    def __post_init__(self):
        common.require_positive(self, "frames", "variance_frames", "batches")
        common.require(0 < self.gamma <= 1, f"--gamma must be in (0, 1], got {self.gamma}")


def chapter_args(args: Args) -> pong.Args:
    """The chapter's hyperparameters (its smoke values in a smoke run), with this study's budget and γ."""
    return common.apply_smoke(pong.Args(seed=args.seed, frames=args.frames, gamma=args.gamma, smoke=args.smoke,
                                        device=args.device))


def recorded_points(args: pong.Args, policy: pong.PixelPolicy, seed: int, frames: int,
                    device: torch.device) -> list[dict]:
    """Play `frames` frames of every game with a fixed policy; every complete point's inputs,
    actions and Ψ (flat and rtg), shortest first."""
    window, _ = pong.Player(args.make_env(seed, device), policy).play(frames)
    flat = pong.reward_to_go(window.rewards, window.segment_ends, 1.0)
    rtg = pong.reward_to_go(window.rewards, window.segment_ends, args.gamma)
    return [{"inputs": window.inputs[s:e + 1, n], "actions": window.actions[s:e + 1, n],
             "flat": flat[s:e + 1, n], "rtg": rtg[s:e + 1, n]}
            for n, s, e in sorted(pong.point_spans(window), key=pong.span_length)]


def pad_to(x: torch.Tensor, length: int) -> torch.Tensor:
    """Zeros appended along the first dimension up to `length`."""
    return nn.functional.pad(x, [0, 0] * (x.dim() - 1) + [0, length - len(x)])


def per_point_gradients(policy: pong.PixelPolicy, points: list[dict], psi: list[torch.Tensor]) -> torch.Tensor:
    """g_i = Σ_t Ψ_it ∇ log π(a_t|s_t) for each point i (psi[i]: its Ψ per frame), flattened: (M, #params).

    torch.func: grad of one point's surrogate, vmapped over points padded to equal length
    (padding steps get Ψ = 0, so they add nothing).
    """
    params = {k: v.detach() for k, v in policy.named_parameters()}

    def point_surrogate(p, x, a, weight):
        logits = functional_call(policy, p, (x.float(),))
        return (pong.log_prob(logits, a) * weight).sum()

    length = max(len(pt["actions"]) for pt in points)
    x = torch.stack([pad_to(pt["inputs"], length) for pt in points])
    a = torch.stack([pad_to(pt["actions"], length) for pt in points])
    weights = torch.stack([pad_to(w, length) for w in psi])
    grads = vmap(grad(point_surrogate), in_dims=(None, 0, 0, 0))(params, x, a, weights)
    return torch.cat([g.flatten(1) for g in grads.values()], dim=1)


def estimator_gradients(policy: pong.PixelPolicy, points: list[dict], baselines: dict) -> dict[str, torch.Tensor]:
    """Every estimator's per-point gradients from two backward passes: the score sum
    s_i = Σ_t ∇ log π(a_t|s_t) and the reward-to-go gradient. Flat credit is one scalar per point,
    its outcome R_i (the same scalar on every frame: the essay's point), so its gradient is R_i s_i;
    a constant baseline b subtracts b s_i."""
    score = per_point_gradients(policy, points, [torch.ones_like(pt["flat"]) for pt in points])
    rtg = per_point_gradients(policy, points, [pt["rtg"] for pt in points])
    outcome = torch.stack([pt["flat"][-1] for pt in points]).to(score)[:, None]
    return {"flat, no baseline": outcome * score, "flat - mean": (outcome - baselines["flat"]) * score,
            "rtg, no baseline": rtg, "rtg - mean": rtg - baselines["rtg"] * score}


class GroupedVariance:
    """tr Cov of vectors, per group and overall, and their mean, from running sums (the vectors
    are not kept).

    tr Cov = (Σ||g||² - ||Σg||²/n) / (n - 1). Each added chunk is summed in its own precision
    (float32: a second pass over it in float64 would double the study's time), the running sums
    are float64.
    """

    def __init__(self, groups: int, dim: int, device: torch.device | str = "cpu"):
        self.count = torch.zeros(groups, dtype=torch.float64, device=device)
        self.total = torch.zeros(groups, dim, dtype=torch.float64, device=device)
        self.total_sq = torch.zeros(groups, dtype=torch.float64, device=device)

    def add(self, vectors: torch.Tensor, group: torch.Tensor) -> None:
        """Add vectors (M, dim), vector i to group[i]; they may live on another device."""
        sums = vectors.new_zeros(len(self.total), vectors.shape[1]).index_add_(0, group.to(vectors.device), vectors)
        squares = torch.linalg.vector_norm(vectors, dim=1).square()
        group = group.to(self.total.device)
        self.count.index_add_(0, group, torch.ones(len(group), dtype=torch.float64, device=group.device))
        self.total += sums.to(self.total)
        self.total_sq.index_add_(0, group, squares.to(self.total))

    @staticmethod
    def _trace(count, total, total_sq) -> float:
        return float((total_sq - total.pow(2).sum(-1) / count) / (count - 1)) if count > 1 else math.nan

    def per_group(self) -> list[float]:
        return [self._trace(*stats) for stats in zip(self.count, self.total, self.total_sq)]

    def overall(self) -> float:
        return self._trace(self.count.sum(), self.total.sum(0), self.total_sq.sum())

    def mean(self) -> torch.Tensor:
        """The mean vector over every group."""
        return self.total.sum(0) / self.count.sum()


def length_bins(lengths: np.ndarray, bins: int) -> torch.Tensor:
    """The quantile bin of each length, numbered 0.. with none empty.

    Rally lengths cluster (a missed serve, one exchange, two ...), so equal quantiles merge
    and there are often fewer than `bins`.
    """
    edges = np.unique(np.quantile(lengths, np.linspace(0, 1, bins + 1)).astype(int))
    _, bin_of = np.unique(np.searchsorted(edges[1:-1], lengths, side="right"), return_inverse=True)
    return torch.from_numpy(bin_of)


def gradient_variance_study(args: pong.Args, policy: pong.PixelPolicy, seed: int, frames: int, device: torch.device,
                            baselines: dict | None = None, bins: int = 8,
                            chunk: int = 64) -> tuple[dict, dict[str, torch.Tensor]]:
    """Record one batch of points with a fixed policy; for flat and reward-to-go credit, each
    without and with the constant baseline (`baselines[Ψ]`; None: this batch's own mean Ψ per
    frame), tr Cov of the per-point gradients per length bin and overall, and their mean vector."""
    points = recorded_points(args, policy, seed, frames, device)
    n_params = sum(p.numel() for p in policy.parameters())
    if len(points) < 2:  # e.g. a window too short for two points to end
        nothing = {"total": math.nan, "by_length": [], "slope": math.nan}
        return ({"points": len(points), "mean_length": math.nan, "bin_mean_length": [],
                 "baseline": {"flat": math.nan, "rtg": math.nan}, **{name: nothing for name in VARIANCE_ESTIMATORS}},
                {name: torch.full((n_params,), math.nan, dtype=torch.float64) for name in VARIANCE_ESTIMATORS})
    lengths = np.array([len(pt["actions"]) for pt in points])
    bin_of = length_bins(lengths, bins)
    n_bins = int(bin_of.max()) + 1
    if baselines is None:
        baselines = {key: float(torch.cat([pt[key] for pt in points]).mean()) for key in ("flat", "rtg")}
    variances = {name: GroupedVariance(n_bins, n_params, device) for name in VARIANCE_ESTIMATORS}
    for i in range(0, len(points), chunk):
        for name, grads in estimator_gradients(policy, points[i:i + chunk], baselines).items():
            variances[name].add(grads, bin_of[i:i + chunk])
    study = {"points": len(points), "mean_length": float(lengths.mean()), "baseline": baselines,
             "bin_mean_length": [float(lengths[bin_of.numpy() == b].mean()) for b in range(n_bins)]}
    for name, variance in variances.items():
        by_length = variance.per_group()
        study[name] = {"total": variance.overall(), "by_length": by_length,
                       "slope": common.loglog_slope(study["bin_mean_length"], by_length)}
    return study, {name: variance.mean().cpu() for name, variance in variances.items()}


def batches_study(args: Args, setting: pong.Args, policy: pong.PixelPolicy, device: torch.device) -> dict:
    """The reference batch (its mean Ψ the baselines, its mean gradient without them each Ψ's
    direction), then --batches independent ones, each with its mean gradients along those
    directions (`along_gradient`)."""
    seed = args.seed + REFERENCE_SEED
    reference, means = gradient_variance_study(setting, policy, seed, args.variance_frames, device)
    directions = {family: means[without] / means[without].norm() for family, (without, _) in PAIRS.items()}
    batches = []
    for k in range(1, args.batches + 1):
        study, means = gradient_variance_study(setting, policy, seed + k, args.variance_frames, device,
                                               reference["baseline"])
        study["along_gradient"] = {name: float(means[name] @ directions[family])
                                   for family, pair in PAIRS.items() for name in pair}
        batches.append(study)
    return {"reference": reference, "batches": batches}


def plot_variance(batches: list[dict], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for colour, name in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], VARIANCE_ESTIMATORS):
        slope, _, _ = common.mean_interval([b[name]["slope"] for b in batches])
        for k, batch in enumerate(batches):
            ax.loglog(batch["bin_mean_length"], batch[name]["by_length"], "o-", color=colour, alpha=0.6,
                      linewidth=1, markersize=3, label=f"{name}: slope {slope:.2f} (mean)" if k == 0 else None)
    ax.set(xlabel="rally length (frames, bin mean)", ylabel="tr Cov of per-point gradient",
           title=f"Policy-gradient variance vs rally length, {len(batches)} batches")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    common.save_figure(fig, path)


# ============================================================================================
# Claims: decided over the batches (95% t-intervals), the bias claim by an exact identity
# ============================================================================================
def all_hold(verdicts: list[bool | None]) -> bool | None:
    """One statement checked on several estimators: yes if it holds on each, no if it fails on one."""
    return False if False in verdicts else None if None in verdicts else True


def interval_text(values: list[float], digits: int = 2) -> str:
    mean, low, high = common.mean_interval(values)
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def slope_claim(batches: list[dict]) -> dict:
    """Does the terminal-reward estimator's variance grow roughly linearly with the length? Flat's
    log-log slope per batch, read by common.slope_verdict; a slope needs 3 length bins in every batch."""
    slopes = [b["flat, no baseline"]["slope"] for b in batches]
    holds, _ = common.slope_verdict(slopes)
    enough = min(len(b["bin_mean_length"]) for b in batches) >= 3
    rtg = interval_text([b["rtg, no baseline"]["slope"] for b in batches])
    return common.claim(
        "over-long-generations, Why long generations make credit assignment hard",
        "with one terminal reward (Ψ_t = R on every frame), the policy gradient's variance grows roughly linearly "
        "with the episode's length",
        f"tr Cov of the flat-credit gradient per rally-length bin; its log-log slope per batch, mean [95% interval "
        f"over {len(batches)} batches]: {interval_text(slopes)} (roughly linear: within {common.ROUGHLY_LINEAR[0]}-"
        f"{common.ROUGHLY_LINEAR[1]}, nearer 1 than 0 or 2); the discounted reward-to-go's: {rtg}"
        + ("" if enough else "; premise not met: a batch has fewer than 3 length bins"), holds if enough else None)


def baseline_variance_claim(batches: list[dict]) -> dict:
    """Does the baseline lower the variance? tr Cov without minus with it, per batch, for each Ψ."""
    verdicts, texts = [], []
    for family, (without, with_) in PAIRS.items():
        holds, text = common.seed_verdict([b[without]["total"] - b[with_]["total"] for b in batches])
        verdicts.append(holds)
        texts.append(f"{family} {np.mean([b[without]['total'] for b in batches]):.3g} -> "
                     f"{np.mean([b[with_]['total'] for b in batches]):.3g}, without minus with {text}")
    return common.claim(
        "whole-game §3", "a baseline that does not depend on the action lowers the variance of the policy gradient "
        "(here: a constant, the mean Ψ of a held-out batch)",
        f"tr Cov of the per-point gradient without -> with the baseline (mean of {len(batches)} independent batches), "
        f"and without minus with per batch, mean [95% interval]: " + "; ".join(texts), all_hold(verdicts))


FLOAT32_EPS = float(torch.finfo(torch.float32).eps)  # the precision the study's gradients are computed in


def state_logits(policy: pong.PixelPolicy, points: list[dict], chunk: int = 64) -> torch.Tensor:
    """The policy's logit z(s) at every frame of the points, in float64 (chunks: all frames at once
    would not fit in memory)."""
    with torch.no_grad():
        return torch.cat([policy(torch.cat([pt["inputs"] for pt in points[i:i + chunk]]).float()).double()
                          for i in range(0, len(points), chunk)])


def score_identity(logits: torch.Tensor, baseline: torch.Tensor | float) -> dict:
    """Σ_a π(a|s) b(s,a) ∇_θ log π(a|s) at each state (logits: z(s), one per state; baseline
    b(s,a): a number, or (states, 2) for down, up), by autograd over the action probabilities.

    θ enters log π only through z(s), so ∇_θ log π(a|s) = ∂_z log π(a|s) ∇_θ z(s): the sum is
    ∇_θ z(s) times Σ_a π b ∂_z log π, and its size relative to the largest term the estimator can add
    at s, ||Σ_a π b ∇_θ log π|| / max_a ||b ∇_θ log π||, is that of the scalars (∇_θ z(s) cancels).
    (Relative to Σ_a π |b| ||∇ log π|| instead, a confident state's 1 - σ(z), computed as σ(z) - 1,
    would look like a bias.) A b(s) alone multiplies Σ_a π ∇ log π = ∇ Σ_a π = 0. Returns the
    largest relative size over the states and whether each is zero to float32 precision (within ε)."""
    z = logits.detach().double().requires_grad_(True)
    # pong.log_prob's log σ(∓z) for down, up, in float64 (pong.log_prob returns float32)
    log_pi = nn.functional.logsigmoid(torch.stack([-z, z], dim=1))
    d_log_pi = torch.stack([torch.autograd.grad(log_pi[:, a].sum(), z, retain_graph=True)[0] for a in (0, 1)], dim=1)
    terms = torch.as_tensor(baseline, dtype=torch.float64) * d_log_pi  # b ∂_z log π(a|s): (states, 2)
    total, size = (log_pi.detach().exp() * terms).sum(1).abs(), terms.abs().amax(1)
    return {"states": len(z), "largest_relative": float((total / size).nan_to_num(0.0).max()),
            "zero": bool((total <= FLOAT32_EPS * size).all()) if terms.isfinite().all() else None}


def baseline_identities(setting: pong.Args, policy: pong.PixelPolicy, seed: int, frames: int,
                        baselines: dict, device: torch.device) -> dict:
    """score_identity for each Ψ's constant baseline, at every state of the reference batch (its
    games replayed: same seed, same states)."""
    logits = state_logits(policy, recorded_points(setting, policy, seed, frames, device))
    return {family: score_identity(logits, b) for family, b in baselines.items()}


def baseline_bias_claim(batches: list[dict], identities: dict) -> dict:
    """Does the baseline leave the gradient's mean alone? Exactly: at every state of the reference
    batch, Σ_a π b ∇ log π is zero to float32 precision (score_identity), for each Ψ's b. For context,
    the empirical comparison: per batch, the mean gradient with it minus without, along the policy
    gradient (unit: the held-out batch's mean gradient without it), and the smallest change the
    batches can detect (the half-width of the gradient's own interval), which may not be below the
    gradient's size along it."""
    texts = []
    for family, (without, with_) in PAIRS.items():
        along = [b["along_gradient"][without] for b in batches]
        mean, low, high = common.mean_interval(along)
        _, text = common.seed_verdict([b["along_gradient"][with_] - a for b, a in zip(batches, along)])
        blind = "" if (high - low) / 2 < abs(mean) else "; this empirical test cannot detect a bias of the gradient's size"
        identity = identities[family]
        texts.append(f"{family} (b = {batches[0]['baseline'][family]:.3g}): largest "
                     f"||Σ_a π b ∇log π|| / max_a ||b ∇log π|| over {identity['states']} states "
                     f"{identity['largest_relative']:.2g} (zero to float32 precision: <= {FLOAT32_EPS:.2g}); "
                     f"empirically, with minus without {text} (smallest change detectable {(high - low) / 2:.3g}; the "
                     f"gradient without the baseline along it {interval_text(along, 3)}{blind})")
    return common.claim(
        "whole-game §3", "a baseline that does not depend on the action adds no bias to the policy gradient "
        "(here: a constant, the mean Ψ of a held-out batch)",
        "exactly, at every state of the held-out batch, Σ_a π(a|s) b ∇_θ log π(a|s) = b ∇_θ Σ_a π(a|s) = 0 on the "
        "trained policy (autograd over the action probabilities, float64); for context, the mean per-point gradient "
        "with the baseline minus without, along the policy gradient's direction (a held-out batch's, unit length), "
        f"per batch, mean [95% interval over {len(batches)} independent batches]: " + "; ".join(texts),
        all_hold([identity["zero"] for identity in identities.values()]))


def variance_claims(batches: list[dict], identities: dict) -> list[dict]:
    return [slope_claim(batches), baseline_variance_claim(batches), baseline_bias_claim(batches, identities)]


def variance_cell(value: float) -> str:
    """3 significant digits, or the whole number where they would need an exponent (1,530, not 1.53e+03)."""
    text = f"{value:.3g}"
    return f"{value:,.0f}" if "e+" in text else text


def variance_tables(batches: list[dict]) -> dict:
    """The tables it prints and the docs show: each estimator's tr Cov over all points and its
    log-log slope against rally length, mean [95% interval] over the batches; and the first
    batch's tr Cov in each length bin (frames)."""
    def interval_cell(values: list[float]) -> str:
        mean, low, high = common.mean_interval(values)
        return f"{variance_cell(mean)} [{variance_cell(low)}, {variance_cell(high)}]"

    overall = [[name, psi, interval_cell([b[name]["total"] for b in batches]),
                interval_text([b[name]["slope"] for b in batches])] for name, psi in VARIANCE_ESTIMATORS.items()]
    first = batches[0]
    by_length = [[length, *(variance_cell(first[name]["by_length"][k]) for name in VARIANCE_ESTIMATORS)]
                 for k, length in enumerate(first["bin_mean_length"])]
    points = round(np.mean([b["points"] for b in batches]))
    rally = np.mean([b["mean_length"] for b in batches])
    return {"estimators": {"header": [f"estimator ({len(batches)} batches of {points} points, mean rally "
                                      f"{rally:.0f} frames)", "Ψ_t", "tr Cov", "slope vs length"], "rows": overall},
            "by_length": {"header": [f"rally length (bin mean, batch 1, {first['points']} points)",
                                     *VARIANCE_ESTIMATORS], "rows": by_length}}


def study_metrics(batches: list[dict]) -> dict:
    """Each estimator's tr Cov and slope, mean of the batches; the tables."""
    metrics = {}
    for name in VARIANCE_ESTIMATORS:
        metrics[f"grad_var[{name}]"] = float(np.mean([b[name]["total"] for b in batches]))
        metrics[f"grad_var_length_slope[{name}]"] = float(np.mean([b[name]["slope"] for b in batches]))
    metrics["tables"] = variance_tables(batches)
    return metrics


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    setting = chapter_args(args)
    _, policy = pong.train(setting, "rtg_baseline", args.seed, device)
    study = batches_study(args, setting, policy, device)
    identities = baseline_identities(setting, policy, args.seed + REFERENCE_SEED, args.variance_frames,
                                     study["reference"]["baseline"], device)
    plot_variance(study["batches"], out / "gradient_variance.png")

    claims = variance_claims(study["batches"], identities)
    metrics = study_metrics(study["batches"])
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, variance_study=study, score_identity=identities)
    print(f"\nGradient variance, rtg_baseline after {args.frames:,} frames (γ = {args.gamma:g}):")
    for table in metrics["tables"].values():
        print(common.format_table(table["rows"], table["header"]) + "\n")
    print(common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
