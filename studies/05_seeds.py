"""05 study — the chapter's experiment on several seeds, and the chapter's claims that need them.

A seed draws other training prompts, other samples and other held-out draws; the cold start is
the same (it does not depend on --seed). For each of --seeds seeds from --seed on (seed, seed + 1,
...): the chapter's default experiment (`run_method` for REINFORCE, RLOO, GRPO and Dr. GRPO from
the same cold start); one update of --clip-passes optimiser passes over a batch of the cold
start's completions, with the clip and without it (how far it moves the token log-probabilities);
and the chapter's loss on one batch of a trained policy, with its gradient at every position's
logits (an exact check: the masked positions get exactly 0).

The claims that need training decide on each quantity's 95% t-interval over the seeds
(common.seed_verdict: yes where it lies above 0, no where it lies below 0, else inconclusive; each
claim also shows the smallest effect the seeds can detect, the interval's half-width). With --seed 0, seed 0 is the chapter's
default run.

    python studies/05_seeds.py      # 959 s on 2 CPU cores (three seeds) under a load average of 6-9,
                                    # a method's run 37-121 s against the chapter's 31 s on a quiet
                                    # machine, where it takes about 6.5 min; writes runs/studies/05_seeds/
    python studies/05_seeds.py --reanalyse runs/studies/05_seeds/results.json  # claims again, nothing trained
"""

import copy
import dataclasses
import importlib
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402

grpo = importlib.import_module("05_grpo_rloo")


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/05_seeds", "output folder for results.json")
    reanalyse: str = common.reanalyse_arg()
    seeds: int = common.arg(3, "seeds, from --seed on: the chapter's experiment on each (the claims' intervals)")
    clip_passes: int = common.arg(4, "optimiser passes over one batch in the clip's update, μ (the clip can act "
                                     "from the second pass on)")

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, seeds=2)

    def __post_init__(self):
        super().__post_init__()
        common.require(self.seeds >= 2, "--seeds must be at least 2: an interval over seeds needs two")
        common.require(self.seed + self.seeds - 1 <= common.SEED_BOUNDS[1],
                       f"--seed + --seeds - 1 must be at most {common.SEED_BOUNDS[1]}")
        common.require(self.clip_passes >= 2, "--clip-passes must be at least 2: on the first pass the ratio is 1")

    @property
    def seed_list(self) -> list[int]:
        return [self.seed + i for i in range(self.seeds)]


# ============================================================================================
# One seed: the chapter's runs, the clip's update, the masked gradient
# ============================================================================================
def first_batch(policy, tokenizer, rl: "grpo.Args", device) -> tuple[lm_world.Completions, torch.Tensor]:
    """G completions of `prompts` training problems drawn with the seed, and their rewards (N, G)."""
    problems = rl.task.sample(rl.prompts, np.random.default_rng(rl.seed))
    return grpo.sample_groups(policy, tokenizer, problems, rl, torch.Generator(device).manual_seed(rl.seed), device)


def clip_update(initial, tokenizer, rl: "grpo.Args", passes: int, device) -> dict:
    """One update of `passes` optimiser passes over one batch of the cold start's completions
    (GRPO's advantages, the chapter's loss, a fresh optimiser at the full learning rate), from the
    cold start with the clip (ε = rl.clip_eps) and without it (ε = ∞): the mean per-token
    |log π_new - log π_old| of each, and the share of token-passes where the clip acted."""
    batch, rewards = first_batch(initial, tokenizer, rl, device)
    advantages = grpo.token_advantages(rewards, "grpo", batch.completion_mask)
    before = grpo.reference_logprobs(initial, batch)  # π_old, and the KL reference
    found = {}
    for name, clip_eps in (("clipped", rl.clip_eps), ("unclipped", math.inf)):
        policy = copy.deepcopy(initial)
        settings = dataclasses.replace(rl, clip_eps=clip_eps, inner_iters=passes, warmup=1)
        optimizer, _ = grpo.make_optimizer(policy, settings)
        stats = grpo.policy_gradient_step(policy, optimizer, batch, advantages, before, settings)
        moved = (grpo.reference_logprobs(policy, batch) - before).abs()[batch.completion_mask]
        found |= {name: float(moved.mean()), f"{name}_clip_fraction": stats["clip_fraction"]}
    return found


def masked_gradients(policy, reference, tokenizer, rl: "grpo.Args", device) -> dict:
    """The chapter's loss on one batch of `policy`'s completions (GRPO's advantages, against the
    reference), under each loss normalisation, and its gradient at every position's logits, on a
    copy (a learning rate of 0 keeps it the same for each): the largest |∂loss/∂logit| where the
    position predicts a prompt or padding token, or nothing (the last: "masked"), and, per
    normalisation, where it predicts a completion token."""
    batch, rewards = first_batch(policy, tokenizer, rl, device)
    counted = torch.zeros_like(batch.attention_mask, dtype=torch.bool)
    counted[:, batch.prompt_length - 1:-1] = batch.completion_mask  # the logits at t predict token t+1
    policy, logits = copy.deepcopy(policy), []
    # keep each forward pass's logits, and their gradient after the backward pass
    policy.get_output_embeddings().register_forward_hook(lambda module, inputs, out: logits.append(out)
                                                         or out.retain_grad())
    for norm in grpo.LOSS_NORMS:
        grpo.policy_gradient_step(policy, torch.optim.SGD(policy.parameters(), lr=0.0), batch,
                                  grpo.token_advantages(rewards, "grpo", batch.completion_mask),
                                  grpo.reference_logprobs(reference, batch),
                                  dataclasses.replace(rl, loss_norm=norm, inner_iters=1))
    grads = [logit.grad.abs().amax(-1) for logit in logits]  # (B, L): the largest |∂loss/∂logit| per position
    return {"masked": max(float(torch.where(counted, 0.0, g).max()) for g in grads),
            "completion": [float(torch.where(counted, g, 0.0).max()) for g in grads],
            "positions": {"masked": int((~counted).sum()), "completion": int(counted.sum())}}


def run_seed(initial, tokenizer, args: Args, seed: int, device) -> dict:
    """The chapter's experiment with one seed: the cold start's held-out numbers, each method's
    run (without its policy), the clip's update, the masked gradient of GRPO's trained policy."""
    rl = lm_world.chapter_lm_args(grpo.Args, dataclasses.replace(args, seed=seed))
    held_out = rl.task.held_out(rl.eval_problems)
    before = grpo.final_evaluation(initial, tokenizer, rl, held_out, device)
    runs = {m: grpo.run_method(initial, tokenizer, rl, m, held_out, device) for m in rl.method_list}
    policies = {m: run.pop("policy") for m, run in runs.items()}
    return {"args": rl, "cold_start": before, "runs": runs,
            "clip": clip_update(initial, tokenizer, rl, args.clip_passes, device),
            "masking": masked_gradients(policies["grpo"], initial, tokenizer, rl, device)}


# ============================================================================================
# The claims: each an effect measured once per seed, decided on its interval
# ============================================================================================
def decided(source: str, statement: str, quantity: str, values: list[float], premise: str = "") -> dict:
    """A claim on an effect measured once per seed, > 0 in the statement's direction: the seeds'
    values and their 95% interval (common.seed_verdict). `premise`, where the setting lacks what
    the statement assumes, makes it inconclusive."""
    holds, text = common.seed_verdict(values)
    mean, low, high = common.mean_interval(values)
    measured = (f"{quantity}, per seed {', '.join(f'{v:+.3f}' for v in values)}; mean [95% interval over "
                f"{len(values)} seeds] {text}; the smallest effect the seeds can detect {(high - low) / 2:.3f}")
    return common.claim(source, statement, measured + (f" (premise not met: {premise})" if premise else ""),
                        None if premise else holds)


def gains(per_seed: dict, method: str, k: int = 1) -> list[float]:
    """Held-out pass@k after RL minus the cold start's, one per seed."""
    return [found["runs"][method]["final"][f"pass@{k}"] - found["cold_start"][f"pass@{k}"]
            for found in per_seed.values()]


def final(per_seed: dict, method: str) -> np.ndarray:
    return np.array([found["runs"][method]["final"]["pass@1"] for found in per_seed.values()])


def learning_claims(per_seed: dict) -> list[dict]:
    """RLOO and GRPO learn from a cold start that succeeds sometimes; GRPO raises pass@1 more than
    pass@k (k the final samples: the model grows peaked)."""
    cold = [found["cold_start"]["pass@1"] for found in per_seed.values()]
    never = "" if min(cold) > 0 else "the cold start never succeeds on a held-out problem"
    claims = [decided("whole-game §2", f"from a cold start that can occasionally succeed, {grpo.NAMES[m]} on the "
                      "sparse verifier reward learns: held-out pass@1 rises above the cold start's",
                      f"held-out pass@1 gain over the cold start (pass@1 {np.mean(cold):.3f})", gains(per_seed, m),
                      never) for m in ("grpo", "rloo")]
    claims.append(decided("whole-game §8", "GRPO on groups improves pass@1", "GRPO's held-out pass@1 gain over "
                          "the cold start", gains(per_seed, "grpo")))
    k = next(iter(per_seed.values()))["args"].final_samples
    cold_k = np.mean([found["cold_start"][f"pass@{k}"] for found in per_seed.values()])
    claims.append(decided(
        "whole-game §8", f"optimising pass@1 makes the model peaked-and-usually-right: GRPO raises pass@1 more than "
        f"pass@{k}", f"GRPO's held-out pass@1 gain minus its pass@{k} gain (pass@{k} gain "
        f"{np.mean(gains(per_seed, 'grpo', k)):+.3f}; the cold start's pass@{k}, {cold_k:.3f}, leaves "
        f"{1 - cold_k:.3f} to gain)", list(np.subtract(gains(per_seed, "grpo"), gains(per_seed, "grpo", k)))))
    return claims


def baseline_claims(per_seed: dict) -> list[dict]:
    """A per-prompt baseline (RLOO, GRPO) against one baseline for the batch (REINFORCE)."""
    return [decided("whole-game §5", "a per-prompt group baseline gets the prompt's difficulty for free, where one "
                    f"baseline for all prompts must learn it: {grpo.NAMES[m]} ends with a higher held-out pass@1 "
                    "than REINFORCE with the batch-mean baseline", f"{grpo.NAMES[m]}'s held-out pass@1 minus "
                    "REINFORCE's after the same updates", list(final(per_seed, m) - final(per_seed, "reinforce")))
            for m in ("rloo", "grpo")]


def length_claim(per_seed: dict) -> dict:
    wrong = {m: [grpo.late_mean(found["runs"][m], "length_wrong") for found in per_seed.values()]
             for m in ("grpo", "dr_grpo")}
    return decided("whole-game §7.6; Liu et al. 2025", "length bias: dividing each completion's loss by its own "
                   "length pushes a long wrong completion down less per token, so wrong completions grow longer; a "
                   "constant normaliser (Dr. GRPO) removes the bias", "mean length of the wrong completions over the "
                   f"second half of training, GRPO (per-sequence; {np.mean(wrong['grpo']):.1f} tokens) minus Dr. GRPO "
                   f"(constant; {np.mean(wrong['dr_grpo']):.1f})", list(np.subtract(wrong["grpo"], wrong["dr_grpo"])))


def clip_claim(per_seed: dict, passes: int) -> dict:
    clip = [found["clip"] for found in per_seed.values()]
    acted = [c["clipped_clip_fraction"] for c in clip]
    return decided("whole-game §6", "PPO's clipping limits how far token probabilities move in one update",
                   f"one update of {passes} optimiser passes over a batch of the cold start's completions: mean "
                   f"per-token |log π_new - log π_old| without the clip ({np.mean([c['unclipped'] for c in clip]):.4f}) "
                   f"minus with it ({np.mean([c['clipped'] for c in clip]):.4f}; ε = "
                   f"{next(iter(per_seed.values()))['args'].clip_eps:g}, acting on {np.mean(acted):.1%} of the "
                   "token-passes)", [c["unclipped"] - c["clipped"] for c in clip],
                   "" if max(acted) > 0 else "the ratio never left [1 - ε, 1 + ε]: the clip had nothing to limit")


def masking_claim(per_seed: dict) -> dict:
    """Exact on each seed's batch: no seeds needed, every batch must show it."""
    found = [seed["masking"] for seed in per_seed.values()]
    masked, completion = max(f["masked"] for f in found), min(min(f["completion"]) for f in found)
    return common.claim(
        "whole-game App. A", "masked positions contribute nothing: the loss's gradient at the logits of every "
        "position that predicts a prompt or padding token is exactly 0",
        f"the chapter's loss (GRPO's advantages, β k3 to the cold start) on one batch of GRPO's trained policy per "
        f"seed, under each normalisation ({', '.join(grpo.LOSS_NORMS)}): the largest |∂loss/∂logit| at the "
        f"{sum(f['positions']['masked'] for f in found)} masked positions {masked:g}; at the "
        f"{sum(f['positions']['completion'] for f in found)} completion positions, the smallest per-batch largest "
        f"{completion:.2g}" + (" (the loss has no gradient: the check cannot tell)" if completion == 0 else ""),
        None if completion == 0 else masked == 0.0)


def seed_claims(per_seed: dict, args: Args) -> list[dict]:
    return [*learning_claims(per_seed), *baseline_claims(per_seed), length_claim(per_seed),
            clip_claim(per_seed, args.clip_passes), masking_claim(per_seed)]


# ============================================================================================
# Tables, metrics, the run
# ============================================================================================
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
    """The chapter's metrics and the clip's update for each seed, under seed<N>_."""
    metrics = {}
    for seed, found in per_seed.items():
        chapter = grpo.collect_metrics(found["args"], found["runs"], found["cold_start"])
        metrics |= {f"seed{seed}_{k}": v for k, v in chapter.items() if k != "tables"}
        metrics |= {f"seed{seed}_clip_update_{k}": v for k, v in found["clip"].items()}
    return metrics | {"tables": {"pass_at_1": pass_table(per_seed)}}


def stored_claims(args: Args, stored: dict) -> list[dict]:
    """The claims again from a results.json's seeds (each seed's chapter args rebuilt, as run_seed made them)."""
    per_seed = {seed: found | {"args": lm_world.chapter_lm_args(grpo.Args, dataclasses.replace(args, seed=seed))}
                for seed, found in stored["seeds"].items()}
    return seed_claims(per_seed, args)


def main(args: Args) -> dict:
    if args.reanalyse:
        return {"claims": common.reanalyse(args, stored_claims)}
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    print(f"05 study: the chapter's experiment on seeds {args.seed_list}; policy {info['path']}, device {device}")
    per_seed = {}
    for seed in args.seed_list:
        print(f"seed {seed}:")
        per_seed[seed] = run_seed(initial, tokenizer, args, seed, device)
    claims = seed_claims(per_seed, args)
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
