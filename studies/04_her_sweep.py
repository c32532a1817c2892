"""04, study: HER against plain DQN as the bit string grows, and the paper's thresholds.

Bit flipping with n from 5 to 30 bits, DQN and DQN+HER (the chapter's hyperparameters, a budget
of 10n cycles), two seeds each: the final greedy success against n, the learning curves, and the
HER paper's claims (DQN fails beyond about 13-15 bits; DQN+HER solves up to 50; HER makes
reward dense). The relabelling strategy is a flag: compare a run with `--strategy final`.

    python studies/04_her_sweep.py                      # 69 s on 2 CPU cores
    python studies/04_her_sweep.py --strategy final --bits 10,20,30 --out runs/studies/04_her_sweep_final
    python studies/04_her_sweep.py --bits 40,50 --her-seeds 1 --out runs/studies/04_her_sweep_large
    python studies/04_her_sweep.py --bits 40 --cycles 25 --her-seeds 1 --out runs/studies/04_her_sweep_budget

The last two go towards the paper's n = 50, with the default budget and with 2.5 times as much.
Writes runs/studies/04_her_sweep/: her_success_vs_bits.png and results.json, whose table (also
printed) has the final success of each seed, the share of reward-0 replays and when the mean
success first reached 90%.
"""

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402

hindsight = importlib.import_module("04_her_hca")


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/04_her_sweep", "output folder for figures and results.json")
    bits: str = common.arg("5,10,15,20,30", "bit-string lengths n, comma-separated", item=int)
    her_seeds: int = common.arg(2, "seeds per (n, method)")
    cycles: int = common.arg(10, "collect-then-train cycles per bit: n bits get n * cycles cycles")
    strategy: str = common.arg("future", "HER goal-sampling strategy", choices=("future", "final"))

    SMOKE = dict(bits="4,6", her_seeds=1, cycles=1)

    def __post_init__(self):
        common.require_positive(self, "her_seeds", "cycles")
        common.require(all(n >= 1 for n in self.bit_list), "--bits must be positive integers")

    @property
    def bit_list(self) -> list[int]:
        return common.as_list(self.bits, int)


def chapter_args(args: Args) -> hindsight.Args:
    """The chapter's hyperparameters (its smoke values in a smoke run), with this study's flags."""
    smoke = hindsight.Args.SMOKE if args.smoke else {}
    return hindsight.Args(**{**smoke, "seed": args.seed, "her_seeds": args.her_seeds, "cycles": args.cycles,
                             "strategy": args.strategy})


def her_sweep(args: Args, device) -> dict:
    """{method: {n: [one train_bitflip result per seed]}}."""
    chapter, results = chapter_args(args), {name: {} for name in hindsight.HER_METHODS}
    for n in args.bit_list:
        for name, runs in hindsight.her_runs(chapter, n, device).items():
            results[name][n] = runs
    return results


def plot_her(her: dict, bits: list[int], path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    common.plot_curves(axes[0], np.array(bits), {
        name: np.array([[r["final_success"] for r in by_n[n]] for n in bits]).T for name, by_n in her.items()})
    axes[0].set(xlabel="number of bits n", ylabel="final greedy success rate",
                title="Bit flipping: success vs n", ylim=(-0.05, 1.05))
    for name, style in zip(her, ("--", "-")):
        for n in bits:
            curves = np.array([r["curve"] for r in her[name][n]])
            axes[1].plot(np.linspace(0.1, 1, curves.shape[1]), curves.mean(0), style, label=f"{name} n={n}")
    axes[1].set(xlabel="fraction of the training budget", ylabel="greedy success rate (mean over seeds)",
                title="Learning curves (budget grows with n)")
    axes[1].legend(fontsize="small", ncol=2)
    axes[1].grid(alpha=0.3)
    common.save_figure(fig, path)


def her_claims(args: Args, her: dict) -> list[dict]:
    success = {name: {n: float(np.mean([r["final_success"] for r in by_n[n]])) for n in by_n}
               for name, by_n in her.items()}
    listing = "; ".join(f"{name}: " + ", ".join(f"n={n} {s:.2f}" for n, s in by_n.items())
                        for name, by_n in success.items())
    bits = args.bit_list

    def dqn_fails_from(smallest: int) -> bool | None:
        tried = [n for n in bits if n >= smallest]
        return all(success["DQN"][n] < 0.1 for n in tried) if tried else None

    failed = [n for n in bits if n <= 50 and success["DQN+HER"][n] < 0.9]
    share = {name: np.mean([r["reward_share"] for r in her[name][max(bits)]]) for name in her}
    first_failure = min((n for n in bits if dqn_fails_from(n)), default=None)  # fails there and beyond
    claims = [
        common.claim("HER paper, Fig. 1", "DQN alone fails beyond about 13-15 bits",
                     f"mean final success over {args.her_seeds} seeds: {listing}; DQN is below 10% from n = "
                     f"{first_failure} on" if first_failure is not None else f"mean final success: {listing}",
                     dqn_fails_from(15)),
        common.claim("HER paper, Fig. 1", "DQN+HER solves up to 50 bits",
                     "DQN+HER: " + ", ".join(f"n={n} {success['DQN+HER'][n]:.2f}" for n in bits)
                     + ("" if max(bits) >= 50 else "; n = 50 not run by default (add it to --bits)"),
                     False if failed else (True if max(bits) >= 50 else None)),
        common.claim("survey §4.2.2 and §7", "HER turns failed episodes into useful signal (reward density)",
                     f"n={max(bits)}: share of replayed transitions with reward 0, which is success in the −1/0 "
                     f"convention: DQN {share['DQN']:.4f}, DQN+HER {share['DQN+HER']:.3f}",
                     bool(share["DQN+HER"] > 10 * share["DQN"])),
        common.claim("survey §7", "among the relabelling strategies, \"future\" tends to work best",
                     f"not checked by the default run: it relabels with one strategy (--strategy {args.strategy}); "
                     f"compare a run with --strategy {'final' if args.strategy == 'future' else 'future'}", None)]
    if 30 in bits:
        claims.append(common.claim("HER paper, Fig. 1", "DQN+HER reaches ≥ 90% success at n = 30",
                                   f"DQN+HER at n=30: {success['DQN+HER'][30]:.2f}", success["DQN+HER"][30] >= 0.9))
    if any(n >= 20 for n in bits):
        claims.append(common.claim("HER paper, Fig. 1", "DQN alone is below 10% success from n = 20 on",
                                   "DQN at n ≥ 20: " + ", ".join(f"n={n} {success['DQN'][n]:.2f}" for n in bits
                                                                 if n >= 20), dqn_fails_from(20)))
    return claims


def success_table(args: Args, her: dict) -> dict:
    """Per n and method: the final greedy success (the mean and each seed's), the share of replayed
    transitions with reward 0, and after what share of the budget the mean success first reached
    90% ("–": never)."""
    def reached_90(runs: list[dict]) -> str:
        curve = np.mean([r["curve"] for r in runs], 0)
        above = np.flatnonzero(curve >= 0.9)
        return f"{(above[0] + 1) / len(curve):.0%}" if len(above) else "–"

    rows = [[n, name, float(np.mean([r["final_success"] for r in runs])),
             ", ".join(f"{r['final_success']:.3g}" for r in runs), float(np.mean([r["reward_share"] for r in runs])),
             reached_90(runs)] for n in args.bit_list for name, runs in ((m, her[m][n]) for m in hindsight.HER_METHODS)]
    return {"title": f"Bit flipping, {args.her_seeds} seeds, relabelling \"{args.strategy}\", {args.cycles}n cycles",
            "header": ["n", "method", "final greedy success", "per seed", "share of reward-0 replays", "90% after"],
            "rows": rows}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    print(f"04 study: DQN and DQN+HER on bit flipping, n in {args.bit_list}; device {device}")
    her = her_sweep(args, device)
    plot_her(her, args.bit_list, out / "her_success_vs_bits.png")
    metrics = {f"bits{n}_success[{name}]": float(np.mean([r["final_success"] for r in runs]))
               for name, by_n in her.items() for n, runs in by_n.items()}
    metrics["tables"] = {"success": success_table(args, her)}
    claims = her_claims(args, her)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, her=her)
    table = metrics["tables"]["success"]
    print(f"\n{table['title']}:\n" + common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    torch.set_num_threads(1)  # every tensor here is small: on a CPU, threads cost more than they save
    common.run_script(main, Args)
