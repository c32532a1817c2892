"""05 study — the chapter's experiment on several seeds: how much of the gap between the four
group baselines a seed moves.

A seed draws other training prompts, other samples and other held-out draws; the cold start is
the same (it does not depend on --seed). For each seed of --seeds, the chapter's default
experiment (`run_method` for REINFORCE, RLOO, GRPO and Dr. GRPO from the same cold start), then
held-out pass@1 per seed and the chapter's claims that depend on training, checked on every seed.
Seed 0 is the chapter's default run.

    python studies/05_seeds.py      # 245 s on 2 CPU cores (two seeds), the other one busy;
                                    # writes runs/studies/05_seeds/
"""

import dataclasses
import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402

grpo = importlib.import_module("05_grpo_rloo")


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/05_seeds", "output folder for results.json")
    seeds: str = common.arg("0,1", "the seeds to run the chapter's experiment on (in place of --seed)", item=int)

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM)

    def __post_init__(self):
        super().__post_init__()
        low, high = common.SEED_BOUNDS
        common.require(len(set(self.seed_list)) == len(self.seed_list) >= 2 and all(low <= s <= high for s in self.seed_list),
                       f"--seeds must be at least two different seeds in {low}..{high}")

    @property
    def seed_list(self) -> list[int]:
        return common.as_list(self.seeds, int)


def run_seed(initial, tokenizer, args: Args, seed: int, device) -> dict:
    """The chapter's experiment with one seed: the cold start's held-out numbers, each method's
    run (without its policy) and the chapter's claims that need a run."""
    rl = lm_world.chapter_lm_args(grpo.Args, dataclasses.replace(args, seed=seed))
    held_out = rl.task.held_out(rl.eval_problems)
    before = grpo.final_evaluation(initial, tokenizer, rl, held_out, device)
    runs = {m: grpo.run_method(initial, tokenizer, rl, m, held_out, device) for m in rl.method_list}
    for run in runs.values():
        del run["policy"]
    arithmetic = len(grpo.check_claims(rl, {}, before))  # the claims that hold without training come first
    return {"args": rl, "cold_start": before, "runs": runs, "claims": grpo.check_claims(rl, runs, before)[arithmetic:]}


def on_every_seed(per_seed: dict) -> list[dict]:
    """Each of the chapter's claims that need a run, measured on every seed: it holds if it holds
    on all of them, and is not checked if any seed leaves it unchecked."""
    seeds = list(per_seed)
    claims = []
    for found in zip(*(per_seed[seed]["claims"] for seed in seeds)):
        verdicts = [c["holds"] for c in found]
        claims.append(common.claim(found[0]["source"], f"{found[0]['claim']} (on every seed)",
                                   "; ".join(f"seed {seed}: {c['measured']}" for seed, c in zip(seeds, found)),
                                   None if None in verdicts else all(verdicts)))
    return claims


def pass_table(per_seed: dict) -> dict:
    """Held-out pass@1 of the cold start and of each method per seed, with the mean and the
    spread over seeds; the last row, the spread between the methods on each seed."""
    seeds = list(per_seed)
    methods = list(per_seed[seeds[0]]["runs"])
    values = {"cold start": [per_seed[s]["cold_start"]["pass@1"] for s in seeds]}
    values |= {grpo.NAMES[m]: [per_seed[s]["runs"][m]["final"]["pass@1"] for s in seeds] for m in methods}
    rows = [[name, *v, float(np.mean(v)), f"{100 * (max(v) - min(v)):.1f}"] for name, v in values.items()]
    between = [max(column) - min(column) for column in zip(*(values[grpo.NAMES[m]] for m in methods))]
    rows.append(["spread between the methods (points)", *(f"{100 * b:.1f}" for b in between), "-", "-"])
    return {"header": ["pass@1", *(f"seed {s}" for s in seeds), "mean", "spread over seeds (points)"], "rows": rows}


def collect_metrics(per_seed: dict) -> dict:
    """The chapter's metrics for each seed, under seed<N>_."""
    metrics = {}
    for seed, found in per_seed.items():
        chapter = grpo.collect_metrics(found["args"], found["runs"], found["cold_start"])
        metrics |= {f"seed{seed}_{k}": v for k, v in chapter.items() if k != "tables"}
    return metrics | {"tables": {"pass_at_1": pass_table(per_seed)}}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    print(f"05 study: the chapter's experiment on seeds {args.seeds}; policy {info['path']}, device {device}")
    per_seed = {}
    for seed in args.seed_list:
        print(f"seed {seed}:")
        per_seed[seed] = run_seed(initial, tokenizer, args, seed, device)
    claims = on_every_seed(per_seed)
    metrics = collect_metrics(per_seed)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims,
                         seeds={s: {k: v for k, v in found.items() if k != "args"} for s, found in per_seed.items()})
    table = metrics["tables"]["pass_at_1"]
    print("\nHeld-out pass@1 on each seed:")
    print(common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
