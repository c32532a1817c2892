"""01 study — state blindness: the Pong policy without the frame difference.

rtg_baseline is trained and played twice on the same seeds and budget: on the chapter's input
[frame, frame - previous frame], and on [frame, 0] (the difference channel zeroed: where the
ball is, not where it is going). The whole-game essay (§7.1) calls an observation that drops a
fact the decision needs state blindness, and its mitigation putting the fact in the state;
here that is measured as points won at the end, with the difference minus frame only, per seed
(the same seed gives both runs the same initial weights and games), and decided on its 95%
interval over the seeds (common.seed_verdict); frames to win 70% of points are shown beside it.
The budget is the chapter's default, 1.25M frames (half its full 2.5M), so that 5 seeds fit.

    python studies/01_state_blindness.py   # 10 x 1.25M training frames: 637 s on 2 shared CPU cores

Writes learning_curves.png (both inputs) and results.json.
"""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules

import numpy as np
import torch

import common

pong = importlib.import_module("01_reinforce_pong")


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/01_state_blindness", "output folder for the figure and results.json")
    seeds: int = common.arg(5, "seeds per input: the claim's interval is over them")
    frames: int = common.arg(1_250_000, "training frames per run (the chapter's default budget; its full one: 2.5M)")

    SMOKE = dict(seeds=1, frames=4 * 32 * 16)

    def __post_init__(self):
        common.require_positive(self, "seeds", "frames")


def chapter_args(args: Args) -> pong.Args:
    """The chapter's hyperparameters (its smoke values in a smoke run): rtg_baseline alone."""
    return common.apply_smoke(pong.Args(seed=args.seed, seeds=args.seeds, frames=args.frames, smoke=args.smoke,
                                        device=args.device, variants="rtg_baseline"))


def state_blindness_study(args: pong.Args, device: torch.device) -> dict:
    """rtg_baseline trained and evaluated on [frame, 0]: the same network and seeds, the motion
    removed from its input."""
    curves, rates = [], []
    for seed in range(args.seed, args.seed + args.seeds):
        curve, policy = pong.train(args, "rtg_baseline", seed, device, motion=False)
        curves.append(curve)
        rates.append(pong.win_rate(args, policy, seed + 10_000, device, motion=False))
    print(f"rtg_baseline, frame only: points won at the end {np.mean(rates):.3f} (seeds {np.round(rates, 3).tolist()})")
    to_70 = [pong.frames_to_reach(c, 0.7) for c in curves]
    return {"curves": curves, "win_rates": rates, "frames_to_70pct": to_70,
            "final": {"win_rate": float(np.mean(rates)), "worst_seed": float(np.min(rates)),
                      "frames_to_70pct": float(np.median(to_70))}}


def blindness_claims(runs: dict, blind: dict) -> list[dict]:
    """State blindness: does rtg_baseline win more points at the end with the difference than on
    the frame alone? The gap per seed (both runs share the seed's initial weights and games):
    yes if its 95% interval over the seeds lies above 0, no if below 0, else inconclusive (the
    smallest gap the seeds can detect, its half-width, is shown beside it)."""
    sighted, blind_rates = runs["win_rates_per_seed"]["rtg_baseline"], blind["win_rates"]
    gaps = np.subtract(sighted, blind_rates)
    holds, text = common.seed_verdict(gaps)
    _, low, high = common.mean_interval(gaps)

    def per_seed(values: list[float], show=lambda v: f"{v:.3f}") -> str:
        return ", ".join(map(show, values))

    return [common.claim(
        "whole-game §7.1", "state blindness: an observation that drops a fact the decision needs (here: the ball's "
        "motion) costs the policy, and putting the fact back in the state (the frame difference) recovers it: more "
        "points won at the end with the difference than on the frame alone",
        f"points won at the end, with the difference minus frame only, per seed, mean [95% interval over {len(gaps)} "
        f"seeds]: {text}; smallest gap the seeds can detect {(high - low) / 2:.3f}. Per seed: frame only "
        f"{per_seed(blind_rates)}; with the difference {per_seed(sighted)}. Frames "
        f"to 70%: frame only {per_seed(blind['frames_to_70pct'], pong.frames_text)}; with the difference "
        f"{per_seed(runs['frames_to_70pct_per_seed']['rtg_baseline'], pong.frames_text)}", holds)]


def inputs_table(runs: dict, blind: dict) -> dict:
    """The table it prints and the docs show: each input's points won at the end (mean and worst
    seed) and the median over seeds of the frames to win 70% of points."""
    rows = [[name, final["win_rate"], final["worst_seed"], pong.frames_text(final["frames_to_70pct"])]
            for name, final in (("[frame, difference]", runs["final"]["rtg_baseline"]), ("[frame, 0]", blind["final"]))]
    return {"header": ["input", "points won", "worst seed", "frames to 70% (median)"], "rows": rows}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    setting = chapter_args(args)
    runs = pong.run_variants(setting, device)
    blind = state_blindness_study(setting, device)
    pong.plot_learning(runs["curves"] | {"rtg_baseline, frame only": blind["curves"]}, out / "learning_curves.png")

    claims = blindness_claims(runs, blind)
    metrics = {f"rtg_baseline_{key}": value for key, value in runs["final"]["rtg_baseline"].items()}
    metrics.update({f"rtg_baseline_frame_only_{key}": value for key, value in blind["final"].items()})
    metrics["tables"] = {"inputs": inputs_table(runs, blind)}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, curves=runs["curves"], state_blindness=blind,
                         frames_to_70pct_per_seed=runs["frames_to_70pct_per_seed"],
                         win_rates_per_seed=runs["win_rates_per_seed"])
    table = metrics["tables"]["inputs"]
    print("\n" + common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
