"""05 — Group baselines on a small LM: REINFORCE, RLOO, GRPO and Dr. GRPO, with KL to a reference.

Post-training a language model on a verifiable task is policy gradient with one reward per
completion. The Ψ slot holds one number per completion, copied onto every token; what changes
between the methods is the baseline subtracted from the reward (common.group_advantages):

  REINFORCE   A_i = r_i - mean(batch)                 one baseline for every prompt
  RLOO        A_i = r_i - mean_{j≠i} r_j              the other G-1 completions of the same prompt
  GRPO        A_i = (r_i - mean_g) / std_g            group z-score (DeepSeekMath), no critic
  Dr. GRPO    A_i = r_i - mean_g, loss / constant     no std, no per-length normalisation

All four feed the same step (common.policy_gradient_step): PPO's clipped ratio, a k3 KL penalty
to the frozen cold-start model (β), and a choice of loss normalisation. The task
(common.ChainTask) is a chain of arithmetic operations solved one step per line, ending in
"#<answer>"; the verifier checks the answer. The policy is a ~200K-parameter Llama trained from
scratch here by SFT (the cold start, cached in runs/cold_start/). Its demonstrations mix worked
solutions with bare answers, so the cold start often answers without working, and usually fails:
RL has to find out, from one bit per completion, that writing the steps is what pays.

Studies: the four estimators on the same prompts, samples and seed; a β sweep (held-out pass@1
against KL to the reference, and β = 0); the share of groups whose G rewards are all equal
(zero advantage) per difficulty and group size, before and after RL; the gradient that such
groups give; pass@1 and pass@k before and after; completion length over training.

Read beside: credit-assignment-over-long-generations.txt (GRPO, KL, "when it falls down");
credit-assignment-is-the-whole-game.txt §5-9 and Appendix A.
Papers: Shao et al. (2024) DeepSeekMath (GRPO); Ahmadian et al. (2024) Back to Basics (RLOO);
Liu et al. (2025) Understanding R1-Zero-Like Training (Dr. GRPO); Schulman (2020) on KL estimators.

What to look at (in runs/05_grpo_rloo/):
  learning_curves.png   held-out pass@1 vs completions sampled, one line per estimator
  training.png          reward, KL, entropy, length, zero-spread share, grad norm per update
  reward_kl.png         the β sweep: held-out pass@1 against KL to the reference
  zero_spread.png       share of groups with all-equal rewards vs G, per difficulty, before/after
  results.json          every number, and the essays' claims beside our measurements
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from common import (
    GROUP_ADVANTAGES,
    LMArgs,
    arg,
    claim,
    completion_texts,
    encode_prompts,
    evaluate,
    format_claims,
    format_table,
    frozen_copy,
    group_advantages,
    kl_k3,
    masked_loss,
    moving_average,
    outcome_advantages,
    parse_args,
    require,
    sample_completions,
    save_figure,
    score,
    start_lm_run,
    token_logprobs,
    train_policy_gradient,
    verify,
    write_results,
    zero_spread,
)

NAMES = {"reinforce": "REINFORCE (batch mean)", "rloo": "RLOO", "grpo": "GRPO", "dr_grpo": "Dr. GRPO"}


# ============================================================================================
# Config
# ============================================================================================
@dataclass
class Args(LMArgs):
    out: str = arg("runs/05_grpo_rloo", "output folder for figures and results.json")
    methods: str = arg("reinforce,rloo,grpo,dr_grpo", "advantage estimators to compare, comma-separated")
    betas: str = arg("0,0.5", "extra KL weights β for the GRPO sweep (the default --beta run is reused)")
    group_sizes: str = arg("2,4,8,16", "group sizes G of the zero-spread study (at most --final-samples)")
    final_samples: int = arg(16, "samples per held-out problem before/after RL (pass@1 and pass@k)")
    bench: bool = arg(False, "time RL steps (generation vs update, own loop vs model.generate) and stop")
    bench_steps: int = arg(5, "RL steps timed by --bench")

    SMOKE = dict(LMArgs.SMOKE_LM, betas="0", group_sizes="2", final_samples=2, bench_steps=1)

    def __post_init__(self):
        super().__post_init__()
        require(all(m in GROUP_ADVANTAGES for m in self.method_list),
                f"--methods must be among {','.join(GROUP_ADVANTAGES)}")
        require(all(b >= 0 for b in self.beta_list), "--betas must be non-negative")
        require(all(2 <= g <= self.final_samples for g in self.group_list),
                "--group-sizes must be in 2..--final-samples")

    @property
    def method_list(self) -> list[str]:
        return self.methods.split(",")

    @property
    def beta_list(self) -> list[float]:
        return [float(b) for b in self.betas.split(",") if b]

    @property
    def group_list(self) -> list[int]:
        return [int(g) for g in self.group_sizes.split(",")]


# ============================================================================================
# Zero-spread groups: how many, and what gradient they give
# ============================================================================================
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


def gradient_by_spread(policy, reference, tokenizer, args: Args, device) -> dict:
    """On one batch of the current policy: the gradient norm of the policy-gradient term and of
    the β·KL term, from the zero-spread groups alone and from the mixed groups alone (GRPO)."""
    problems = args.task.sample(args.prompts, np.random.default_rng(args.seed + 7))
    repeated = [p for p in problems for _ in range(args.group_size)]
    rollouts = sample_completions(policy, *encode_prompts(tokenizer, [p.prompt for p in repeated], device),
                                  args.max_new_tokens, tokenizer.eos_token_id, tokenizer.pad_token_id,
                                  torch.Generator(device).manual_seed(args.seed + 7))
    rewards = score(repeated, completion_texts(tokenizer, rollouts), rollouts.truncated).to(device)
    rewards = rewards.view(args.prompts, args.group_size)
    advantages = group_advantages(rewards, "grpo").flatten()
    flat = zero_spread(rewards).repeat_interleave(args.group_size)
    with torch.no_grad():
        ref_logp, _ = token_logprobs(reference, rollouts.sequences, rollouts.attention_mask, rollouts.prompt_length)
    norms = {}
    for part, rows in (("zero-spread", flat), ("mixed", ~flat)):
        mask = rollouts.completion_mask & rows[:, None]
        for term in ("pg", "kl"):
            policy.zero_grad()
            logp, _ = token_logprobs(policy, rollouts.sequences, rollouts.attention_mask, rollouts.prompt_length)
            per_token = -advantages[:, None] * logp if term == "pg" else args.beta * kl_k3(logp, ref_logp)
            masked_loss(per_token, mask, "token", args.max_new_tokens).backward()
            grads = [p.grad.norm() for p in policy.parameters() if p.grad is not None]
            norms[f"{part} {term}"] = float(torch.stack(grads).norm()) if rows.any() else 0.0
    policy.zero_grad()
    norms["zero-spread share"] = float(zero_spread(rewards).float().mean())
    return norms


# ============================================================================================
# Experiment
# ============================================================================================
def run_method(initial, tokenizer, args: Args, method: str, held_out, device, beta: float) -> dict:
    """Train a copy of the cold start with one estimator; evaluate it on the held-out set."""
    policy, reference = copy.deepcopy(initial), frozen_copy(initial)
    run_args = dataclasses.replace(args, beta=beta, loss_norm="constant" if method == "dr_grpo" else args.loss_norm)
    start = time.time()
    result = train_policy_gradient(policy, reference, tokenizer, run_args, outcome_advantages(method),
                                   held_out, device, desc=f"{NAMES[method]} β={beta:g}")
    result["wall_clock_s"] = time.time() - start
    result["final"] = evaluate(policy, tokenizer, held_out, args.final_samples, args.max_new_tokens,
                               torch.Generator(device).manual_seed(args.seed + 2), device, ks=ks(args))
    last = result["history"][-max(1, len(result["history"]) // 10):]
    result["final_kl"] = float(np.mean([h["kl"] for h in last]))
    result["policy"] = policy
    print(f"  {NAMES[method]:24s} β={beta:<5g} held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> "
          f"{result['final']['pass@1']:.3f}, KL {result['final_kl']:.3f}, {result['wall_clock_s']:.0f} s")
    return result


def ks(args: Args) -> tuple[int, ...]:
    return tuple(k for k in (1, 4, args.final_samples) if k <= args.final_samples)


def benchmark(policy, tokenizer, args: Args, device) -> dict:
    """Throughput of RL steps: seconds in generation and in the update (reference forward +
    policy-gradient step), completions and tokens per second; and model.generate on the same
    prompts for comparison with our KV-cache loop."""
    held_out = args.task.held_out(args.eval_problems)
    bench_args = dataclasses.replace(args, rl_steps=args.bench_steps, eval_every=10**9)
    result = train_policy_gradient(copy.deepcopy(policy), frozen_copy(policy), tokenizer, bench_args,
                                   outcome_advantages("grpo"), held_out, device, desc="bench")
    history = result["history"]
    generate_s = sum(h["generate_s"] for h in history)
    update_s = sum(h["update_s"] for h in history)
    completions = args.bench_steps * args.prompts * args.group_size
    tokens = sum(h["length"] for h in history) * args.prompts * args.group_size
    ids, mask = encode_prompts(tokenizer, [p.prompt for p in held_out[:args.prompts] for _ in range(args.group_size)],
                               device)
    start = time.time()
    for _ in range(args.bench_steps):
        policy.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=args.max_new_tokens,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    hf_generate_s = time.time() - start
    return {"completions_per_s": completions / (generate_s + update_s),
            "tokens_per_s": tokens / (generate_s + update_s), "generation_share": generate_s / (generate_s + update_s),
            "own_loop_generate_s": generate_s, "update_s": update_s, "hf_generate_s": hf_generate_s,
            "steps": args.bench_steps, "completions_per_step": args.prompts * args.group_size,
            **trl_benchmark(policy, tokenizer, args, device)}


def trl_benchmark(policy, tokenizer, args: Args, device) -> dict:
    """The same RL steps with trl's GRPOTrainer (optional: `pip install trl`): same model, G,
    prompts per step, completion budget, β and learning rate. Seconds per step from the second
    step on (the first pays for start-up), as completions per second."""
    try:
        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        return {"trl": "not installed"}
    problems = args.task.sample((args.bench_steps + 1) * args.prompts, np.random.default_rng(args.seed))
    by_prompt = {p.prompt: p for p in problems}

    def reward(prompts, completions, **_):
        return [verify(by_prompt[p], c) for p, c in zip(prompts, completions)]

    class StepClock(TrainerCallback):
        ends: list[float] = []

        def on_step_end(self, *_, **__):
            self.ends.append(time.time())

    batch = args.prompts * args.group_size
    config = GRPOConfig(output_dir=str(Path(args.out) / "trl"), per_device_train_batch_size=batch,
                        num_generations=args.group_size, max_completion_length=args.max_new_tokens,
                        max_steps=args.bench_steps + 1, learning_rate=args.lr, beta=args.beta,
                        loss_type="grpo", use_cpu=device.type == "cpu", save_strategy="no", report_to="none",
                        logging_steps=10**6, seed=args.seed, disable_tqdm=True)
    clock = StepClock()
    trainer = GRPOTrainer(model=copy.deepcopy(policy), reward_funcs=reward, args=config, processing_class=tokenizer,
                          train_dataset=Dataset.from_dict({"prompt": [p.prompt for p in problems]}), callbacks=[clock])
    trainer.train()
    seconds = clock.ends[-1] - clock.ends[0]
    return {"trl": f"GRPOTrainer, trl {version('trl')}", "trl_completions_per_s": args.bench_steps * batch / seconds,
            "trl_seconds_per_step": seconds / args.bench_steps}


# ============================================================================================
# Figures, claims, report
# ============================================================================================
def plot_learning_curves(runs: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, run in runs.items():
        ax.plot([e["samples"] for e in run["evals"]], [e["pass@1"] for e in run["evals"]], "o-", label=NAMES[method])
    ax.set(xlabel="completions sampled", ylabel="held-out pass@1", title="Same prompts, samples and seed")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_training(runs: dict, path) -> None:
    keys = ("reward", "kl", "entropy", "length", "zero_spread", "grad_norm")
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, key in zip(axes.flat, keys):
        for label, run in runs.items():
            ax.plot(moving_average([h[key] for h in run["history"]], 5), label=label, linewidth=1)
        ax.set(title=f"{key} (trailing mean of 5)", xlabel="update")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize="small")
    save_figure(fig, path)


def plot_frontier(sweep: dict, before: float, path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for beta, run in sorted(sweep.items()):
        ax.plot(run["final_kl"], run["final"]["pass@1"], "o", markersize=8, label=f"β={beta:g}")
    ax.axhline(before, color="gray", linestyle="--", label="cold start")
    ax.set(xlabel="KL to the reference (k3, per token, last 10% of updates)", ylabel="held-out pass@1",
           title="GRPO: reward vs KL")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


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
    save_figure(fig, path)


def check_claims(args: Args, runs: dict, sweep: dict, before: dict, tables: dict, grads: dict | None) -> list[dict]:
    A = group_advantages(torch.tensor([[0.0, 1.0, 0.0, 1.0]]), "dr_grpo")[0].tolist()
    rloo = group_advantages(torch.tensor([[0.0, 1.0, 0.0, 1.0]]), "rloo")[0, 1].item()
    claims = [claim("whole-game App. A", "R = [0, 1, 0, 1]: centred advantages [-0.5, 0.5, -0.5, 0.5]; RLOO "
                    "advantage of sample 2 = 2/3", f"{A}; RLOO {rloo:.4f}",
                    A == [-0.5, 0.5, -0.5, 0.5] and math.isclose(rloo, 2 / 3, rel_tol=1e-6)),
              claim("survey §4.1.1", "GAE is the default in PPO, GRPO and most modern policy gradient methods",
                    "GRPO has no critic, so no GAE: its advantage is the group z-score of the outcome "
                    "reward, the same on every token (common.group_advantages)", False)]
    G = args.group_size
    lone = group_advantages(torch.eye(G)[:1], "grpo")[0, 0].item()  # one right answer in the group
    same = group_advantages(torch.ones(1, G), "grpo").abs().max().item()
    claims.append(claim(
        "whole-game §7.8", "when group rewards are homogeneous, the normalisation blows up or flattens",
        f"all-equal group: A = {same:g} (flattens, no NaN thanks to ε); with 0/1 rewards |A| is at most "
        f"(G-1)/√G, reached by a lone right answer: {lone:.2f} at G={G} (no blow-up)", None))
    if grads is not None:
        claims.append(claim(
            "over-long-generations", "if all G samples get the same reward, the normalised advantage is zero "
            "and the gradient vanishes",
            f"after GRPO, {grads['zero-spread share']:.0%} of groups had zero spread; their policy-gradient "
            f"norm {grads['zero-spread pg']:.1e} (mixed groups {grads['mixed pg']:.2g}); but with β = {args.beta:g} "
            f"their KL term still pulls: norm {grads['zero-spread kl']:.2g}",
            grads["zero-spread pg"] == 0.0))
    cold = tables["cold start"]
    G = args.group_size if args.group_size in args.group_list else args.group_list[-1]
    signal = {k: 1 - row[G] for k, row in cold.items()}
    medium = min(cold, key=lambda k: abs(cold[k]["pass@1"] - 0.5))
    claims.append(claim(
        "over-long-generations", "GRPO gives no signal on easy or impossible prompts, which biases training "
        "toward medium-difficulty examples",
        f"share of G={G} groups with a signal, cold start, by steps: "
        + ", ".join(f"{k}: {s:.2f} (pass@1 {cold[k]['pass@1']:.2f})" for k, s in signal.items()),
        max(signal, key=signal.get) == medium))
    for method in ("grpo", "rloo"):
        if method in runs:
            gain = runs[method]["final"]["pass@1"] - before["pass@1"]
            claims.append(claim("issue 6", f"{NAMES[method]} raises held-out pass@1 by ≥ 15 points over the cold start",
                                f"{before['pass@1']:.3f} -> {runs[method]['final']['pass@1']:.3f} ({100 * gain:+.1f} points)",
                                gain >= 0.15))
    if "grpo" in runs:
        k = args.final_samples
        after = runs["grpo"]["final"]
        claims.append(claim(
            "whole-game §8", "GRPO on groups improves pass@1 (pass@k measures diversity-and-sometimes-right)",
            f"pass@1 {before['pass@1']:.3f} -> {after['pass@1']:.3f}; pass@{k} {before[f'pass@{k}']:.3f} -> "
            f"{after[f'pass@{k}']:.3f}", after["pass@1"] > before["pass@1"]))
    if 0.0 in sweep and len(sweep) > 1:
        free, others = sweep[0.0], {b: r for b, r in sweep.items() if b > 0}
        claims.append(claim(
            "over-long-generations", "small β allows more aggressive reward optimisation; large β keeps the "
            "policy close to the reference",
            "; ".join(f"β={b:g}: KL {r['final_kl']:.3f}, pass@1 {r['final']['pass@1']:.3f}" for b, r in sorted(sweep.items())),
            all(free["final_kl"] >= r["final_kl"] for r in others.values())))
    return claims


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = start_lm_run(args)
    print(f"05 group baselines; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), "
          f"device {device}")
    if args.bench:
        bench = benchmark(initial, tokenizer, args, device)
        print(format_table([[k, v] for k, v in bench.items()], ["benchmark", "value"]))
        write_results(out, args, time.time() - start, bench, [], benchmark=bench)
        return {"metrics": bench, "claims": []}

    held_out = args.task.held_out(args.eval_problems)
    steps = [len(p.ops) for p in held_out]
    before = evaluate(initial, tokenizer, held_out, args.final_samples, args.max_new_tokens,
                      torch.Generator(device).manual_seed(args.seed + 2), device, ks=ks(args))
    print(f"cold start: held-out pass@1 {before['pass@1']:.3f}, pass@{args.final_samples} "
          f"{before[f'pass@{args.final_samples}']:.3f}, length {before['length']:.1f}")

    runs = {m: run_method(initial, tokenizer, args, m, held_out, device, args.beta) for m in args.method_list}
    sweep = {args.beta: runs["grpo"]} if "grpo" in runs else {}
    for beta in args.beta_list:
        if beta not in sweep:
            sweep[beta] = run_method(initial, tokenizer, args, "grpo", held_out, device, beta)

    tables = {"cold start": zero_spread_table(before["correct"], steps, args.final_samples, args.group_list)}
    grads = None
    if "grpo" in runs:
        trained = runs["grpo"]["policy"]
        tables["after GRPO"] = zero_spread_table(runs["grpo"]["final"]["correct"], steps, args.final_samples,
                                                 args.group_list)
        grads = gradient_by_spread(trained, frozen_copy(initial), tokenizer, args, device)

    plot_learning_curves(runs, out / "learning_curves.png")
    plot_training({NAMES[m]: r for m, r in runs.items()} | {f"GRPO β={b:g}": r for b, r in sweep.items()
                                                           if b != args.beta}, out / "training.png")
    if sweep:
        plot_frontier(sweep, before["pass@1"], out / "reward_kl.png")
    plot_zero_spread(tables, args.group_list, out / "zero_spread.png")
    claims = check_claims(args, runs, sweep, before, tables, grads)

    metrics = {f"cold_start_pass@{k}": before[f"pass@{k}"] for k in ks(args)}
    for label, run in [(m, r) for m, r in runs.items()] + [(f"grpo_beta{b:g}", r) for b, r in sweep.items()]:
        for k in ks(args):
            metrics[f"{label}_pass@{k}"] = run["final"][f"pass@{k}"]
        metrics[f"{label}_kl"] = run["final_kl"]
        metrics[f"{label}_length"] = run["final"]["length"]
        metrics[f"{label}_wall_clock_s"] = run["wall_clock_s"]
    for name, table in tables.items():
        for k, row in table.items():
            for G in args.group_list:
                metrics[f"zero_spread[{name}][steps={k}][G={G}]"] = row[G]
    if grads is not None:
        metrics.update({f"grad_norm[{k}]": v for k, v in grads.items()})
    wall = time.time() - start
    serialisable = {f"{m} beta={r_beta}": {k: v for k, v in r.items() if k != "policy"}
                    for m, r_beta, r in [(m, args.beta, r) for m, r in runs.items()]
                    + [("grpo", b, r) for b, r in sweep.items()]}
    write_results(out, args, wall, metrics, claims, runs=serialisable, zero_spread=tables, cold_start=before,
                  cold_start_info={k: v for k, v in info.items() if k != "sft_losses"})

    k = args.final_samples
    rows = [["cold start", "-", before["pass@1"], before[f"pass@{k}"], 0.0, before["length"], "-", "-"]]
    for label, run in [(NAMES[m], r) for m, r in runs.items()] + [(f"GRPO β={b:g}", r) for b, r in sweep.items()
                                                                 if b != args.beta]:
        history = run["history"]
        rows.append([label, run["final"]["pass@1"] - before["pass@1"], run["final"]["pass@1"],
                     run["final"][f"pass@{k}"], run["final_kl"], run["final"]["length"],
                     float(np.mean([h["zero_spread"] for h in history])), run["wall_clock_s"]])
    print(f"\nHeld-out ({len(held_out)} problems, {k} samples each), after {args.rl_steps} updates of "
          f"{args.prompts}x{args.group_size} completions, β={args.beta:g} unless named:")
    print(format_table(rows, ["policy", "Δ pass@1", "pass@1", f"pass@{k}", "KL", "length",
                              "zero-spread", "seconds"]))
    rows = [[name, k_steps, row["pass@1"], *(row[G] for G in args.group_list)]
            for name, table in tables.items() for k_steps, row in table.items()]
    print("\nShare of groups with zero reward spread (no policy gradient), by difficulty and G:")
    print(format_table(rows, ["policy", "steps", "pass@1", *(f"G={G}" for G in args.group_list)]))
    print("\n" + format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    main(parse_args(Args))
