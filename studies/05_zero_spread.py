"""05 study — groups with no reward spread: how many there are, by difficulty and group size G,
and what they give the gradient.

A group whose G rewards are all equal (all right or all wrong) has a zero advantage under every
per-group baseline: it adds nothing to the policy gradient. From `final_samples` held-out samples
per problem, at the cold start and after GRPO, the expected share of such groups for each G, by
the number of steps in the problem (over-long-generations: "no signal on easy or impossible
prompts"). Then, on one batch of the GRPO policy, the gradient norm of the policy-gradient term
and of the β·KL term from the zero-spread groups alone and from the mixed ones.

    python studies/05_zero_spread.py    # 34 s on 2 CPU cores, measured with the other one busy;
                                        # writes runs/studies/05_zero_spread/

Figure: zero_spread.png (share of groups with zero spread vs G, per difficulty, before and after
GRPO).
"""

import importlib
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402

grpo = importlib.import_module("05_grpo_rloo")


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/05_zero_spread", "output folder for figures and results.json")
    group_sizes: str = common.arg("2,4,8,16", "group sizes G of the zero-spread table (at most --final-samples)",
                                  item=int)
    final_samples: int = common.arg(16, "samples per held-out problem before/after GRPO")

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, group_sizes="2", final_samples=2)

    def __post_init__(self):
        super().__post_init__()
        common.require_positive(self, "final_samples")
        common.require(all(2 <= g <= self.final_samples for g in self.group_list),
                       "--group-sizes must be in 2..--final-samples")

    @property
    def group_list(self) -> list[int]:
        return common.as_list(self.group_sizes, int)


def zero_spread_probability(n: int, c: int, G: int) -> float:
    """The chance that G of n samples (c right), drawn without replacement, are all right or
    all wrong: [C(c, G) + C(n-c, G)] / C(n, G). Unbiased for p^G + (1-p)^G."""
    return (math.comb(c, G) + math.comb(n - c, G)) / math.comb(n, G)


def zero_spread_table(correct: list[int], steps: list[int], samples: int, group_sizes: list[int]) -> dict:
    """Per difficulty (number of steps): held-out pass rate and, for each G, the expected share
    of groups with zero reward spread, from `samples` completions per problem."""
    table = {}
    for k in sorted(set(steps)):
        counts = [c for c, s in zip(correct, steps) if s == k]
        table[k] = {"pass@1": float(np.mean(counts)) / samples,
                    **{G: float(np.mean([zero_spread_probability(samples, c, G) for c in counts]))
                       for G in group_sizes}}
    return table


def zero_spread_study(args: Args, held_out: list, before: dict, runs: dict) -> dict:
    """The share of groups with zero spread by difficulty and G, at the cold start and after GRPO."""
    steps = [len(p.ops) for p in held_out]
    tables = {"cold start": zero_spread_table(before["correct"], steps, args.final_samples, args.group_list)}
    if "grpo" in runs:
        tables["after GRPO"] = zero_spread_table(runs["grpo"]["final"]["correct"], steps, args.final_samples,
                                                 args.group_list)
    return tables


def gradient_by_spread(policy, reference, tokenizer, args: grpo.Args, device) -> dict:
    """On one batch of the current policy: the gradient norm of the policy-gradient term and of
    the β·KL term, from the zero-spread groups alone and from the mixed groups alone (GRPO)."""
    problems = args.task.sample(args.prompts, np.random.default_rng(args.seed + 7))
    completions, rewards = grpo.sample_groups(policy, tokenizer, problems, args,
                                              torch.Generator(device).manual_seed(args.seed + 7), device)
    advantages = grpo.group_advantages(rewards, "grpo").flatten()
    no_spread_rows = grpo.zero_spread(rewards).repeat_interleave(args.group_size)
    batch = (completions.sequences, completions.attention_mask, completions.prompt_length)
    ref_logp = grpo.reference_logprobs(reference, completions)
    norms = {}
    for part, rows in (("zero-spread", no_spread_rows), ("mixed", ~no_spread_rows)):
        mask = completions.completion_mask & rows[:, None]
        for term in ("pg", "kl"):
            policy.zero_grad()
            logp, _ = lm_world.token_logprobs(policy, *batch)
            per_token = -advantages[:, None] * logp if term == "pg" else args.beta * grpo.kl_k3(logp, ref_logp)
            grpo.masked_loss(per_token, mask, "token", args.max_new_tokens).backward()
            grads = [p.grad.norm() for p in policy.parameters() if p.grad is not None]
            norms[f"{part} {term}"] = float(torch.stack(grads).norm()) if rows.any() else 0.0
    policy.zero_grad()
    norms["zero-spread share"] = float(grpo.zero_spread(rewards).float().mean())
    return norms


def plot_zero_spread(tables: dict, group_sizes: list[int], path) -> None:
    fig, axes = plt.subplots(1, len(tables), figsize=(5.5 * len(tables), 4), sharey=True, squeeze=False)
    for ax, (name, table) in zip(axes[0], tables.items()):
        for k, row in table.items():
            ax.plot(group_sizes, [row[G] for G in group_sizes], "o-", label=f"{k} steps (pass@1 {row['pass@1']:.2f})")
        ax.set(title=name, xlabel="group size G", ylabel="share of groups with zero spread")
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
        ax.set_xticks(group_sizes, [str(G) for G in group_sizes])
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def check_claims(args: Args, rl: grpo.Args, tables: dict, grads: dict | None) -> list[dict]:
    """The gradient of the zero-spread groups, and which difficulty has the most signal."""
    claims = []
    if grads is not None:
        claims.append(common.claim(
            "over-long-generations", "if all G samples get the same reward, the normalised advantage is zero "
            "and the gradient vanishes",
            f"after GRPO, {grads['zero-spread share']:.0%} of groups had zero spread; their policy-gradient "
            f"norm {grads['zero-spread pg']:.1e} (mixed groups {grads['mixed pg']:.2g}); but with β = {rl.beta:g} "
            f"their KL term still pulls: norm {grads['zero-spread kl']:.2g}",
            grads["zero-spread pg"] == 0.0))
    cold = tables["cold start"]
    G = rl.group_size if rl.group_size in args.group_list else args.group_list[-1]
    signal = {k: 1 - row[G] for k, row in cold.items()}
    medium = min(cold, key=lambda k: abs(cold[k]["pass@1"] - 0.5))
    # "medium" is only told apart from "hard" (or "easy") by strata on both sides of pass@1 = 0.5
    straddles = min(r["pass@1"] for r in cold.values()) < 0.5 < max(r["pass@1"] for r in cold.values())
    claims.append(common.claim(
        "over-long-generations", "GRPO gives no signal on easy or impossible prompts, which biases training "
        "toward medium-difficulty examples",
        f"share of G={G} groups with a signal, cold start, by steps: "
        + ", ".join(f"{k}: {s:.2f} (pass@1 {cold[k]['pass@1']:.2f})" for k, s in signal.items())
        + ("" if straddles else "; not checked: the strata do not lie on both sides of pass@1 = 0.5"),
        max(signal, key=signal.get) == medium if straddles else None))
    return claims


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    rl = lm_world.chapter_lm_args(grpo.Args, args, final_samples=args.final_samples)
    print(f"05 study: groups with no reward spread; policy {info['path']}, device {device}")
    held_out = rl.task.held_out(rl.eval_problems)
    before = grpo.final_evaluation(initial, tokenizer, rl, held_out, device)
    runs = {"grpo": grpo.run_method(initial, tokenizer, rl, "grpo", held_out, device)}
    tables = zero_spread_study(args, held_out, before, runs)
    grads = gradient_by_spread(runs["grpo"]["policy"], lm_world.frozen_copy(initial), tokenizer, rl, device)
    plot_zero_spread(tables, args.group_list, out / "zero_spread.png")
    claims = check_claims(args, rl, tables, grads)
    metrics = {f"zero_spread[{name}][steps={k}][G={G}]": row[G]
               for name, table in tables.items() for k, row in table.items() for G in args.group_list}
    metrics |= {f"grad_norm[{k}]": v for k, v in grads.items()}
    rows = [[name, steps, row["pass@1"], *(f"{row[G]:.0%}" for G in args.group_list)]
            for name, table in tables.items() for steps, row in table.items()]
    metrics["tables"] = {"zero_spread": {"header": ["policy", "steps", "pass@1", *(f"G = {G}" for G in args.group_list)],
                                         "rows": rows}}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, zero_spread=tables, gradient_by_spread=grads)
    print("\nShare of groups with zero reward spread (no policy gradient), by difficulty and G:")
    print(common.format_table(rows, metrics["tables"]["zero_spread"]["header"]))
    print("\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
