"""01 study — the policy gradient's variance against rally length.

At a fixed policy (rtg_baseline, seed 0, after the chapter's default 1.25M training frames: the
halfway point of its full 2.5M budget), it records every point of 128 games, computes one
gradient vector per point, g_i = Σ_t (Ψ_t - b) ∇ log π(a_t|s_t) (torch.func: grad, vmapped over
points), and measures tr Cov of g over the points, binned by rally length, for two Ψ (flat: R;
reward-to-go: γ^(T-t) R), each without and with the mean Ψ as a constant baseline b. The
over-long-generations essay says the terminal-reward estimator's variance "grows roughly
linearly with episode length" (its gradient-variance paragraph); the whole-game essay (§3) that
a baseline reduces it.

    python studies/01_gradient_variance.py                # 89 s on 2 shared CPU cores
    python studies/01_gradient_variance.py --gamma 0.99 --out runs/studies/01_gradient_variance_gamma_099
                                                          # the policy and the reward-to-go at γ = 0.99: 53 s

Most of the time trains the policy (1.25M frames).

Writes gradient_variance.png (tr Cov per length bin, log-log) and results.json.
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
    "flat - mean": "Ψ_t = R - mean(R)",
    "rtg, no baseline": "Ψ_t = γ^(T-t) R",
    "rtg - mean": "Ψ_t = G_t - mean(G)",
}


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/01_gradient_variance", "output folder for the figure and results.json")
    frames: int = common.arg(1_250_000, "training frames of the measured policy (rtg_baseline, the first seed)")
    variance_frames: int = common.arg(400, "frames per game recorded with the trained policy")
    gamma: float = common.arg(0.9, "discount of the reward-to-go (per frame), in training and in Ψ")

    SMOKE = dict(frames=2 * 16 * 32, variance_frames=96)

    def __post_init__(self):
        common.require_positive(self, "frames", "variance_frames")
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


def per_point_gradients(policy: pong.PixelPolicy, points: list[dict], psi_key: str, baseline: float):
    """g_i = Σ_t (Ψ_t - b) ∇ log π(a_t|s_t) for each point i, flattened: (M, #params).

    torch.func: grad of one point's surrogate, vmapped over points padded to equal length
    (padding steps get Ψ = 0, so they add nothing).
    """
    params = {k: v.detach() for k, v in policy.named_parameters()}

    def point_surrogate(p, x, a, psi):
        logits = functional_call(policy, p, (x.float(),))
        return (pong.log_prob(logits, a) * psi).sum()

    length = max(len(pt["actions"]) for pt in points)
    x = torch.stack([pad_to(pt["inputs"], length) for pt in points])
    a = torch.stack([pad_to(pt["actions"], length) for pt in points])
    psi = torch.stack([pad_to(pt[psi_key] - baseline, length) for pt in points])
    grads = vmap(grad(point_surrogate), in_dims=(None, 0, 0, 0))(params, x, a, psi)
    return torch.cat([g.flatten(1) for g in grads.values()], dim=1)


class GroupedVariance:
    """tr Cov of vectors, per group and overall, from running sums (the vectors are not kept).

    tr Cov = (Σ||g||² - ||Σg||²/n) / (n - 1), in float64.
    """

    def __init__(self, groups: int, dim: int, device: torch.device | str = "cpu"):
        self.count = torch.zeros(groups, dtype=torch.float64, device=device)
        self.total = torch.zeros(groups, dim, dtype=torch.float64, device=device)
        self.total_sq = torch.zeros(groups, dtype=torch.float64, device=device)

    def add(self, vectors: torch.Tensor, group: torch.Tensor) -> None:
        """Add vectors (M, dim), vector i to group[i]; they may live on another device."""
        v, group = vectors.to(self.total.device, torch.float64), group.to(self.total.device)
        self.count.index_add_(0, group, torch.ones_like(v[:, 0]))
        self.total.index_add_(0, group, v)
        self.total_sq.index_add_(0, group, v.pow(2).sum(1))

    @staticmethod
    def _trace(count, total, total_sq) -> float:
        return float((total_sq - total.pow(2).sum(-1) / count) / (count - 1)) if count > 1 else math.nan

    def per_group(self) -> list[float]:
        return [self._trace(*stats) for stats in zip(self.count, self.total, self.total_sq)]

    def overall(self) -> float:
        return self._trace(self.count.sum(), self.total.sum(0), self.total_sq.sum())


def length_bins(lengths: np.ndarray, bins: int) -> torch.Tensor:
    """The quantile bin of each length, numbered 0.. with none empty.

    Rally lengths cluster (a missed serve, one exchange, two ...), so equal quantiles merge
    and there are often fewer than `bins`.
    """
    edges = np.unique(np.quantile(lengths, np.linspace(0, 1, bins + 1)).astype(int))
    _, bin_of = np.unique(np.searchsorted(edges[1:-1], lengths, side="right"), return_inverse=True)
    return torch.from_numpy(bin_of)


def gradient_variance_study(args: pong.Args, policy: pong.PixelPolicy, seed: int, frames: int,
                            device: torch.device, bins: int = 8, chunk: int = 64) -> dict:
    """Record points with a fixed policy; measure tr Cov of per-point gradients per length bin,
    for flat and reward-to-go credit, each without and with the mean as a baseline."""
    points = recorded_points(args, policy, seed, frames, device)
    if len(points) < 2:  # e.g. a window too short for two points to end
        nothing = {"total": math.nan, "by_length": [], "slope": math.nan}
        return {"points": len(points), "mean_length": math.nan, "bin_mean_length": [],
                **{name: nothing for name in VARIANCE_ESTIMATORS}}
    lengths = np.array([len(pt["actions"]) for pt in points])
    bin_of = length_bins(lengths, bins)
    n_bins = int(bin_of.max()) + 1
    mean_of = {key: float(torch.cat([pt[key] for pt in points]).mean()) for key in ("flat", "rtg")}
    setups = {"flat, no baseline": ("flat", 0.0), "flat - mean": ("flat", mean_of["flat"]),
              "rtg, no baseline": ("rtg", 0.0), "rtg - mean": ("rtg", mean_of["rtg"])}
    n_params = sum(p.numel() for p in policy.parameters())
    variances = {name: GroupedVariance(n_bins, n_params, device) for name in setups}
    for i in range(0, len(points), chunk):
        for name, (key, baseline) in setups.items():
            grads = per_point_gradients(policy, points[i:i + chunk], key, baseline)
            variances[name].add(grads, bin_of[i:i + chunk])
    result = {"points": len(points), "mean_length": float(lengths.mean()),
              "bin_mean_length": [float(lengths[bin_of.numpy() == b].mean()) for b in range(n_bins)]}
    for name, variance in variances.items():
        by_length = variance.per_group()
        result[name] = {"total": variance.overall(), "by_length": by_length,
                        "slope": common.loglog_slope(result["bin_mean_length"], by_length)}
    return result


def plot_variance(study: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    x = study["bin_mean_length"]
    for name in VARIANCE_ESTIMATORS:
        ax.loglog(x, study[name]["by_length"], "o-", label=f"{name}: slope {study[name]['slope']:.2f}")
    ax.set(xlabel="rally length (frames, bin mean)", ylabel="tr Cov of per-point gradient",
           title="Policy-gradient variance vs rally length")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    common.save_figure(fig, path)


def variance_claims(study: dict) -> list[dict]:
    flat, flat_b = study["flat, no baseline"], study["flat - mean"]
    rtg, rtg_b = study["rtg, no baseline"], study["rtg - mean"]
    slope = flat["slope"]
    return [
        common.claim("over-long-generations, gradient variance",
                     "variance of the terminal-reward estimator grows roughly linearly with episode length",
                     f"tr Cov of the flat-credit gradient vs rally length: log-log slope {slope:.2f} "
                     f"(1 = linear); with discounted reward-to-go: {rtg['slope']:.2f}",
                     bool(0.7 <= slope <= 1.3) if math.isfinite(slope) else None),
        common.claim("whole-game §3", "a baseline reduces the variance of the policy gradient",
                     f"tr Cov, flat: {flat['total']:.3g} -> {flat_b['total']:.3g} with the mean subtracted; "
                     f"reward-to-go: {rtg['total']:.3g} -> {rtg_b['total']:.3g}",
                     flat_b["total"] < flat["total"] and rtg_b["total"] < rtg["total"]),
    ]


def variance_cell(value: float) -> str:
    """3 significant digits, or the whole number where they would need an exponent (1,530, not 1.53e+03)."""
    text = f"{value:.3g}"
    return f"{value:,.0f}" if "e+" in text else text


def variance_tables(study: dict) -> dict:
    """The tables it prints and the docs show: each estimator's tr Cov over all points and its
    log-log slope against rally length, and its tr Cov in each length bin (frames)."""
    overall = [[name, psi, variance_cell(study[name]["total"]), study[name]["slope"]]
               for name, psi in VARIANCE_ESTIMATORS.items()]
    by_length = [[length, *(variance_cell(study[name]["by_length"][b]) for name in VARIANCE_ESTIMATORS)]
                 for b, length in enumerate(study["bin_mean_length"])]
    return {"estimators": {"header": [f"estimator ({study['points']} points, mean rally "
                                      f"{study['mean_length']:.0f} frames)", "Ψ_t", "tr Cov", "slope vs length"],
                           "rows": overall},
            "by_length": {"header": ["rally length (bin mean)", *VARIANCE_ESTIMATORS], "rows": by_length}}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    setting = chapter_args(args)
    _, policy = pong.train(setting, "rtg_baseline", args.seed, device)
    study = gradient_variance_study(setting, policy, args.seed + 20_000, args.variance_frames, device)
    plot_variance(study, out / "gradient_variance.png")

    claims = variance_claims(study)
    metrics = {}
    for name in VARIANCE_ESTIMATORS:
        metrics[f"grad_var[{name}]"] = study[name]["total"]
        metrics[f"grad_var_length_slope[{name}]"] = study[name]["slope"]
    metrics["tables"] = variance_tables(study)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, variance_study=study)
    print(f"\nGradient variance, rtg_baseline after {args.frames:,} frames (γ = {args.gamma:g}):")
    for table in metrics["tables"].values():
        print(common.format_table(table["rows"], table["header"]) + "\n")
    print(common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
