"""06 study — the chapter's experiment on several seeds, so that its claims decide on an interval.

A seed draws other labelled solutions, other reward-model minibatches, other held-out samples and
other RL prompts; the cold start is the same (it does not depend on --seed). For each seed of
--seeds, the chapter's default experiment (`experiment`: Math-Shepherd labels, the PRM and Q-RM,
their localisation of the first wrong step, RL with each advantage); then the chapter's claims
(`credit_claims`, `rl_claims`) on all the seeds at once: each difference, one value per seed,
decided on its 95% interval over the seeds. Seed 0 is the chapter's default run.

    python studies/06_seeds.py      # 417 s on 2 CPU cores (three seeds, beside other jobs);
                                    # writes runs/studies/06_seeds/
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

prm = importlib.import_module("06_prm_qrm")

LOCALISED = ("PRM step score", "PRM drop (score - previous)", "Q-RM (mean Z of the step)")


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/06_seeds", "output folder for results.json")
    seeds: str = common.arg("0,1,2", "the seeds to run the chapter's experiment on (in place of --seed)", item=int)

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM)

    def __post_init__(self):
        super().__post_init__()
        low, high = common.SEED_BOUNDS
        common.require(len(set(self.seed_list)) == len(self.seed_list) >= 2 and all(low <= s <= high for s in self.seed_list),
                       f"--seeds must be at least two different seeds in {low}..{high}")

    @property
    def seed_list(self) -> list[int]:
        return common.as_list(self.seeds, int)


def run_seed(policy, tokenizer, args: Args, seed: int, device) -> dict:
    """The chapter's experiment with one seed: its localisation results and RL runs."""
    chapter = lm_world.chapter_lm_args(prm.Args, dataclasses.replace(args, seed=seed))
    found = prm.experiment(policy, tokenizer, chapter, device)
    credit = {k: found["credit"][k] for k in ("solutions", "results")}  # the example is the chapter's figure
    print(f"  seed {seed}: AUROC PRM drop {credit['results'][LOCALISED[1]]['auroc']:.3f}, Q-RM "
          f"{credit['results'][LOCALISED[2]]['auroc']:.3f}; final pass@1 "
          + ", ".join(f"{m} {r['evals'][-1]['pass@1']:.3f}" for m, r in found["runs"].items()))
    return {"args": chapter, "credit": credit, "runs": found["runs"]}


def seed_table(per_seed: dict) -> dict:
    """Per seed: each credit's localisation AUROC, and each RL run's held-out pass@1 at its peak and
    at its end; the last column, the mean over the seeds."""
    seeds = list(per_seed)
    values = {f"AUROC, {name}": [per_seed[s]["credit"]["results"][name]["auroc"] for s in seeds] for name in LOCALISED}
    for method in prm.RL_METHODS:
        golds = [[e["pass@1"] for e in per_seed[s]["runs"][method]["evals"]] for s in seeds]
        values[f"peak pass@1, {prm.RL_METHODS[method]}"] = [max(g) for g in golds]
        values[f"final pass@1, {prm.RL_METHODS[method]}"] = [g[-1] for g in golds]
    return {"header": ["", *(f"seed {s}" for s in seeds), "mean"],
            "rows": [[name, *v, float(np.mean(v))] for name, v in values.items()]}


def collect_metrics(per_seed: dict) -> dict:
    """The chapter's localisation and RL numbers for each seed, under seed<N>_."""
    metrics = {}
    for seed, found in per_seed.items():
        chapter = {f"localisation_{k}[{name}]": v for name, loc in found["credit"]["results"].items()
                   for k, v in loc.items()}
        chapter |= {f"rl[{m}]_pass@1_final": r["evals"][-1]["pass@1"] for m, r in found["runs"].items()}
        metrics |= {f"seed{seed}_{k}": v for k, v in chapter.items()}
    return metrics | {"tables": {"seeds": seed_table(per_seed)}}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, policy, tokenizer, info = lm_world.start_lm_run(args)
    print(f"06 study: the chapter's experiment on seeds {args.seeds}; policy {info['path']}, device {device}")
    per_seed = {seed: run_seed(policy, tokenizer, args, seed, device) for seed in args.seed_list}
    found = list(per_seed.values())
    claims = (prm.credit_claims(*(f["credit"] for f in found))
              + prm.rl_claims(found[0]["args"], *(f["runs"] for f in found)))
    metrics = collect_metrics(per_seed)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims,
                         seeds={s: {k: v for k, v in f.items() if k != "args"} for s, f in per_seed.items()})
    table = metrics["tables"]["seeds"]
    print("\nOn each seed:\n" + common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
