"""05 — Group baselines on a small LM: REINFORCE, RLOO, GRPO and Dr. GRPO, with KL to a reference.

Post-training an LM on a verifiable task is policy gradient with one reward per completion: the
Ψ slot holds one number per completion, copied onto each of its tokens. The methods differ in
the baseline subtracted from the reward r_i of completion i, one of the G sampled for a prompt:

  REINFORCE   A_i = r_i - mean(batch)            one baseline for every prompt
  RLOO        A_i = r_i - mean_{j≠i} r_j         the other G-1 completions of the same prompt
  GRPO        A_i = (r_i - mean_g) / std_g       the group's z-score, no critic
  Dr. GRPO    A_i = r_i - mean_g                 no std, and a constant loss normaliser

All four feed one step: PPO's clipped ratio ρ = π_θ/π_old, a k3 estimate of KL(π_θ || π_ref) to
the frozen cold start weighted by β, and a loss normalisation. The task (lm_world.py) is a chain of
arithmetic operations solved one step per line; the verifier checks the answer. The cold start,
a tiny Llama trained here on demonstrations that often skip the working, mostly answers bare and
wrong: RL has to find out, from one bit per completion, that writing the steps pays.

Read beside: credit-assignment-over-long-generations.txt (all: length, GRPO, KL, "when it falls
down"); credit-assignment-is-the-whole-game.txt §5 (the decision tree: group baselines or PPO +
GAE), §7.4, §7.6, §7.8, §8 and Appendix A. Papers: Shao et al. 2024 (DeepSeekMath: GRPO);
Ahmadian et al. 2024 (RLOO); Liu et al. 2025 (Dr. GRPO); Schulman 2020 (k3).
Figures in runs/05_grpo_rloo/: learning_curves.png (held-out pass@1 per estimator), training.png
(reward, KL, entropy, length, zero-spread share, grad norm per update).
Studies beside it, in studies/: 05_zero_spread.py (groups with no reward spread, by difficulty and
G), 05_critic.py (PPO's learned token critic and GAE: its memory, whether its V tells the truth,
gradient variance against completion length), 05_failure_modes.py (KL on both sides, a poor
reference, async staleness, a weak start, train/serve skew), 05_bench.py (throughput), 05_seeds.py
(this experiment on several seeds; the claims that need training decide there, over the seeds).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

from common import (
    arg,
    as_list,
    claim,
    format_claims,
    format_table,
    mean_or_nan,
    moving_average,
    require,
    require_positive,
    run_script,
    save_figure,
    write_results,
)
from lm_world import (
    Completions,
    LMArgs,
    evaluate,
    frozen_copy,
    sample,
    start_lm_run,
    token_logprobs,
    verifier_rewards,
)

ESTIMATORS = ("reinforce", "rloo", "grpo", "dr_grpo")
NAMES = {"reinforce": "REINFORCE (batch mean)", "rloo": "RLOO", "grpo": "GRPO", "dr_grpo": "Dr. GRPO"}
LOSS_NORMS = ("sequence", "token", "constant")


# ============================================================================================
# The method: a group baseline per completion, and one clipped, KL-penalised step
# ============================================================================================
def group_advantages(rewards: torch.Tensor, method: str, eps: float = 1e-4) -> torch.Tensor:
    """One advantage per completion from rewards (N prompts, G completions each). A group whose
    rewards are all equal gets A = 0 under every per-group baseline (eps keeps GRPO finite)."""
    N, G = rewards.shape
    if method == "reinforce":
        # A_i = r_i - mean of the whole batch: one baseline for all prompts
        return rewards - rewards.mean()
    if method not in ESTIMATORS:
        raise ValueError(f"unknown advantage {method!r}; choose from {ESTIMATORS}")
    if G < 2:
        raise ValueError(f"{method} needs a group of at least 2 completions per prompt (the baseline "
                         f"comes from the siblings), got {G}")
    mean = rewards.mean(1, keepdim=True)
    if method == "rloo":
        # A_i = r_i - mean_{j≠i} r_j = G/(G-1) (r_i - mean_g)   (leave-one-out)
        return rewards - (rewards.sum(1, keepdim=True) - rewards) / (G - 1)
    if method == "grpo":
        # A_i = (r_i - mean_g) / (std_g + eps), the std with G-1 in the denominator, as in TRL
        return (rewards - mean) / (rewards.std(1, keepdim=True) + eps)
    # Dr. GRPO: A_i = r_i - mean_g (no std division: a nearly unanimous group is not blown up)
    return rewards - mean


def zero_spread(rewards: torch.Tensor) -> torch.Tensor:
    """(N,) true for the groups whose G rewards are all equal: every group advantage is 0 there."""
    return rewards.max(1).values == rewards.min(1).values


def token_advantages(rewards: torch.Tensor, method: str, completion_mask: torch.Tensor) -> torch.Tensor:
    """Ψ for the loss, (N·G, T): completion i's group advantage on each of its tokens, 0 on padding.
    There is no critic, so no per-token estimate (no GAE): every token of a completion shares one A_i."""
    return group_advantages(rewards, method).flatten()[:, None] * completion_mask.float()


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(π || π_ref) estimate at the sampled token (GRPO's choice; Schulman 2020)."""
    # k3 = r - log r - 1 with r = π_ref/π: unbiased, and ≥ 0 always
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                      clip_eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's per-token loss, and where the clip is active (the clipped term is the smaller one,
    so that token's gradient is 0)."""
    # -min(ρ A, clip(ρ, 1-ε, 1+ε) A),  ρ = π_θ / π_old
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantages
    return -torch.minimum(unclipped, clipped), clipped < unclipped


def masked_loss(per_token: torch.Tensor, mask: torch.Tensor, norm: str, max_new_tokens: int) -> torch.Tensor:
    """Reduce a per-token loss (B, T) over the completion tokens:

      sequence  mean over each completion's tokens, then over completions (the GRPO paper)
      token     sum over all tokens / number of tokens (DAPO; long completions weigh more)
      constant  sum over all tokens / (B · max_new_tokens) (Dr. GRPO: no length bias)
    """
    total = torch.where(mask.bool(), per_token, 0.0)  # a NaN or inf in a masked cell stays out
    mask = mask.float()
    if norm == "sequence":
        return (total.sum(1) / mask.sum(1).clamp(min=1)).mean()
    if norm == "token":
        return total.sum() / mask.sum().clamp(min=1)
    if norm == "constant":
        return total.sum() / (per_token.shape[0] * max_new_tokens)
    raise ValueError(f"unknown loss normalisation {norm!r}; choose from {LOSS_NORMS}")


def loss_norm_of(method: str, args: Args) -> str:
    """Dr. GRPO comes with its constant normaliser; the others use --loss-norm."""
    return "constant" if method == "dr_grpo" else args.loss_norm


def policy_gradient_step(policy, optimizer: torch.optim.Optimizer, completions: Completions,
                         advantages: torch.Tensor, ref_logp: torch.Tensor, args: Args) -> dict:
    """μ = args.inner_iters optimiser steps on one batch, the loss of token t of completion i being

      loss_it = -min(ρ_it A_it, clip(ρ_it, 1-ε, 1+ε) A_it) + β k3(π_θ, π_ref)_it,
      ρ_it = π_θ(y_it) / π_old(y_it)

    reduced by `masked_loss` (args.loss_norm). A (B, T) holds per-token advantages. π_old is the
    policy that sampled, held fixed over the μ iterations: on the first one ρ = 1, so the clip
    can only act from the second on. Returns the mean over iterations of the loss, the clip
    fraction and the grad norm (before clipping), the sampling policy's KL to the reference and
    its entropy.
    """
    mask = completions.completion_mask
    batch = (completions.sequences, completions.attention_mask, completions.prompt_length)
    stats = {"loss": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0}
    for iteration in range(args.inner_iters):
        logp, entropy = token_logprobs(policy, *batch, with_entropy=iteration == 0)
        if iteration == 0:
            old_logp = logp.detach()
            tokens = mask.sum().clamp(min=1)  # an all-padding batch has no token: statistics 0, not NaN
            stats["kl"] = float(torch.where(mask, kl_k3(old_logp, ref_logp), 0.0).sum() / tokens)
            stats["entropy"] = float(torch.where(mask, entropy.detach(), 0.0).sum() / tokens)
        per_token, clip_active = clipped_surrogate(logp, old_logp, advantages, args.clip_eps)
        if args.beta > 0:
            per_token = per_token + args.beta * kl_k3(logp, ref_logp)
        loss = masked_loss(per_token, mask, args.loss_norm, args.max_new_tokens)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
        optimizer.step()
        stats["loss"] += loss.item() / args.inner_iters
        stats["clip_fraction"] += float((clip_active & mask).sum() / tokens) / args.inner_iters
        stats["grad_norm"] += grad_norm.item() / args.inner_iters
    return stats


# ============================================================================================
# The RL loop
# ============================================================================================
def sample_groups(policy, tokenizer, problems: list, args: Args, generator, device) -> tuple[Completions, torch.Tensor]:
    """G completions of each problem (rows grouped by problem) and their rewards (N, G)."""
    repeated = [p for p in problems for _ in range(args.group_size)]
    completions, texts = sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens,
                                generator, device)
    rewards = verifier_rewards(repeated, texts, completions.truncated).to(device)
    return completions, rewards.view(len(problems), args.group_size)


@torch.no_grad()
def reference_logprobs(reference, completions: Completions) -> torch.Tensor:
    """log π_ref of each sampled token, (B, T): what the KL penalty compares against."""
    logp, _ = token_logprobs(reference, completions.sequences, completions.attention_mask, completions.prompt_length)
    return logp


def make_optimizer(policy, args: Args) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (or SGD) with a linear learning-rate warmup: Adam's first steps are large."""
    if args.optimizer == "adam":
        optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=0.0)
    else:
        optimizer = torch.optim.SGD(policy.parameters(), lr=args.lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / args.warmup))


def train(policy, reference, tokenizer, args: Args, method: str, held_out: list, device) -> dict:
    """Each update: `prompts` fresh training problems (never a held-out one), G completions of
    each scored by the verifier, the group advantage of each completion copied onto its tokens,
    one `policy_gradient_step` against the frozen reference. Every `eval_every` updates and at
    the end, held-out pass@1. Returns {"history": one `batch_record` and the step's statistics
    per update, "evals": [...]}."""
    rng = np.random.default_rng(args.seed)
    generator = torch.Generator(device).manual_seed(args.seed)
    eval_generator = torch.Generator(device).manual_seed(args.seed + 1)
    optimizer, schedule = make_optimizer(policy, args)
    step_args = dataclasses.replace(args, loss_norm=loss_norm_of(method, args))
    exclude = frozenset(p.prompt for p in args.task.held_out())
    history, evals = [], []

    def held_out_eval(step: int) -> None:
        result = evaluate(policy, tokenizer, held_out, args.eval_samples, args.max_new_tokens, eval_generator, device)
        evals.append({"step": step, "samples": step * args.prompts * args.group_size,
                      "pass@1": result["pass@1"], "length": result["length"]})

    for step in tqdm(range(args.rl_steps), desc=NAMES[method], leave=False):
        if step % args.eval_every == 0:
            held_out_eval(step)
        problems = args.task.sample(args.prompts, rng, exclude=exclude)
        # sample G completions of each problem and score them: one bit per completion
        completions, rewards = sample_groups(policy, tokenizer, problems, args, generator, device)
        # the advantage: each completion's reward minus its baseline, on every one of its tokens
        advantages = token_advantages(rewards, method, completions.completion_mask)
        # the loss (clipped ratio, β k3 to the reference, normalised) and the optimiser's step
        stats = policy_gradient_step(policy, optimizer, completions, advantages,
                                     reference_logprobs(reference, completions), step_args)
        schedule.step()
        history.append(batch_record(completions, rewards) | stats)
    held_out_eval(args.rl_steps)
    return {"history": history, "evals": evals}


def lengths_by_outcome(lengths: torch.Tensor, rewards: torch.Tensor) -> dict:
    """Mean length of the right (reward > 0) and of the wrong completions (NaN where none)."""
    right = rewards > 0
    return {f"length_{name}": float(lengths[rows].float().mean()) if rows.any() else math.nan
            for name, rows in (("right", right), ("wrong", ~right))}


def batch_record(completions: Completions, rewards: torch.Tensor) -> dict:
    """One batch at a glance: reward, lengths, share cut by the budget, share of zero-spread groups."""
    return {"reward": float(rewards.mean()), "length": float(completions.lengths.float().mean()),
            **lengths_by_outcome(completions.lengths, rewards.flatten()),
            "truncated": float(completions.truncated.float().mean()),
            "zero_spread": float(zero_spread(rewards).float().mean())}


@dataclass
class Args(LMArgs):
    out: str = arg("runs/05_grpo_rloo", "output folder for figures and results.json")
    methods: str = arg("reinforce,rloo,grpo,dr_grpo", "advantage estimators to compare, comma-separated "
                       "(grpo divides by the group std, TRL's scale_rewards; dr_grpo does not)", ESTIMATORS, item=str)
    rl_steps: int = arg(80, "policy updates")
    prompts: int = arg(16, "prompts per update")
    group_size: int = arg(8, "completions per prompt, G (TRL: num_generations)")
    optimizer: str = arg("adam", "AdamW, or plain SGD (whose step scales with the advantages)", choices=("adam", "sgd"))
    lr: float = arg(1e-4, "learning rate (TRL: learning_rate)")
    warmup: int = arg(20, "updates of linear learning-rate warmup (Adam's first steps are large)")
    clip_eps: float = arg(0.2, "PPO clip range ε (TRL: epsilon)")
    beta: float = arg(0.04, "weight β of the k3 KL penalty to the cold-start reference (TRL: beta)")
    inner_iters: int = arg(1, "optimiser steps per batch of completions, μ (TRL: num_iterations)")
    loss_norm: str = arg("sequence", "loss normalisation: sequence (TRL loss_type 'grpo'), token ('bnpo'), "
                         "constant ('dr_grpo'); Dr. GRPO always uses constant", choices=LOSS_NORMS)
    max_grad_norm: float = arg(1.0, "gradient clipping (TRL: max_grad_norm)")
    eval_every: int = arg(20, "updates between held-out evaluations")
    final_samples: int = arg(16, "samples per held-out problem before/after RL (pass@1 and pass@k)")

    SMOKE = dict(LMArgs.SMOKE_LM, rl_steps=2, prompts=2, group_size=2, eval_every=1, final_samples=2)

    def __post_init__(self):
        super().__post_init__()
        require_positive(self, "rl_steps", "prompts", "lr", "warmup", "inner_iters", "max_grad_norm", "eval_every",
                         "final_samples")
        require(self.group_size >= 2, f"--group-size must be at least 2: RLOO and GRPO take the baseline "
                f"from the other completions of the same prompt, got {self.group_size}")
        require(self.clip_eps > 0 and self.beta >= 0, "--clip-eps must be positive and --beta non-negative")
        require(self.method_list and all(m in ESTIMATORS for m in self.method_list),
                f"--methods must be among {','.join(ESTIMATORS)}")

    @property
    def method_list(self) -> list[str]:
        return as_list(self.methods, str)

    @property
    def ks(self) -> tuple[int, ...]:
        """The k of the pass@k reported before and after RL."""
        return tuple(k for k in (1, 4, self.final_samples) if k <= self.final_samples)


# ============================================================================================
# The experiment: every estimator from the same cold start, on the same prompts and seed
# ============================================================================================
def final_evaluation(policy, tokenizer, args: Args, held_out: list, device) -> dict:
    """pass@k on the held-out problems, `final_samples` each (the same draws before and after)."""
    return evaluate(policy, tokenizer, held_out, args.final_samples, args.max_new_tokens,
                    torch.Generator(device).manual_seed(args.seed + 2), device, ks=args.ks)


def run_method(initial, tokenizer, args: Args, method: str, held_out: list, device) -> dict:
    """Train a copy of the cold start with one estimator, the cold start itself frozen as the KL
    reference; evaluate it on the held-out set."""
    policy = copy.deepcopy(initial)
    start = time.time()
    result = train(policy, frozen_copy(initial), tokenizer, args, method, held_out, device)
    result["wall_clock_s"] = time.time() - start
    result["final"] = final_evaluation(policy, tokenizer, args, held_out, device)
    last = result["history"][-max(1, len(result["history"]) // 10):]
    result["final_kl"] = float(np.mean([h["kl"] for h in last]))
    result["policy"] = policy
    print(f"  {NAMES[method]:24s} β={args.beta:<5g} held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> "
          f"{result['final']['pass@1']:.3f}, KL {result['final_kl']:.3f}, {result['wall_clock_s']:.0f} s")
    return result


def late_mean(run: dict, key: str) -> float:
    """The mean of a history entry over the second half of training (NaN entries left out)."""
    return mean_or_nan([h[key] for h in run["history"][len(run["history"]) // 2:]])


def plot_runs(runs: dict, out) -> None:
    """learning_curves.png: held-out pass@1 against completions sampled; training.png: each update."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, run in runs.items():
        ax.plot([e["samples"] for e in run["evals"]], [e["pass@1"] for e in run["evals"]], "o-", label=NAMES[method])
    ax.set(xlabel="completions sampled", ylabel="held-out pass@1", title="Same prompts, samples and seed")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, out / "learning_curves.png")
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, key in zip(axes.flat, ("reward", "kl", "entropy", "length", "zero_spread", "grad_norm")):
        for method, run in runs.items():
            ax.plot(moving_average([h[key] for h in run["history"]], 5), label=NAMES[method], linewidth=1)
        ax.set(title=f"{key} (trailing mean of 5)", xlabel="update")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize="small")
    save_figure(fig, out / "training.png")


def check_claims(args: Args) -> list[dict]:
    """The claims the arithmetic decides, exactly (no seeds); those that need training decide on
    their intervals over seeds in studies/05_seeds.py."""
    rewards = torch.tensor([[0.0, 1.0, 0.0, 1.0]])  # whole-game Appendix A's group
    A = group_advantages(rewards, "dr_grpo")[0].tolist()
    rloo = group_advantages(rewards, "rloo")[0, 1].item()
    # the advantages the loop hands to the loss, for that group's completions of 3, 5, 2 and 4 tokens
    mask = torch.arange(5) < torch.tensor([[3], [5], [2], [4]])
    per_token = {m: token_advantages(rewards, m, mask) for m in ESTIMATORS}
    # on its tokens, the group z-score of the rewards alone: no V read
    from_rewards = torch.equal(per_token["grpo"] * mask, group_advantages(rewards, "grpo").T * mask)
    shared = all(torch.equal(t, group_advantages(rewards, m).T * mask) for m, t in per_token.items())
    G = args.group_size
    lone = group_advantages(torch.eye(G)[:1], "grpo")[0]  # one right answer in the group
    same = group_advantages(torch.ones(1, G), "grpo").abs().max().item()
    bare = group_advantages(torch.ones(1, G), "grpo", eps=0.0)[0, 0].item()  # no ε: 0 / 0
    delta = 1e-3  # near-homogeneous: one score δ below the others (a learned score's noise, say)
    near = group_advantages(1 - delta * torch.eye(G)[:1], "grpo")[0]
    # the advantage gap per unit of reward gap: near-homogeneous scores against a lone right answer's 0/1
    near_gap, lone_gap = (near[1] - near[0]).item() / delta, (lone[0] - lone[1]).item()
    wrong = [round(a, 3) for a in per_token["grpo"][2][mask[2]].tolist()]
    return [claim("whole-game App. A", "R = [0, 1, 0, 1]: centred advantages [-0.5, 0.5, -0.5, 0.5]", f"{A}",
                  A == [-0.5, 0.5, -0.5, 0.5]),
            claim("whole-game App. A", "R = [0, 1, 0, 1]: RLOO advantage of sample 2 = 1 - 1/3 = 2/3", f"{rloo:.4f}",
                  math.isclose(rloo, 2 / 3, rel_tol=1e-6)),
            claim("survey §4.1.1", "GAE is the default in GRPO (the survey says so of PPO, GRPO and most modern "
                  "policy gradient methods)",
                  f"GRPO's token advantages {'are' if from_rewards else 'are not'} its group z-score of the outcome "
                  f"rewards on every token (completion 2: {[round(a, 3) for a in per_token['grpo'][1].tolist()]}): "
                  "computed from the rewards alone, with no value function, so no GAE (exact)", not from_rewards),
            claim("whole-game §4; over-long-generations, GRPO", "every token of a completion gets the same "
                  "advantage A_i: one sequence-level advantage, the completion's, broadcast to all its tokens",
                  f"R = [0, 1, 0, 1], completions of 3, 5, 2 and 4 tokens: the loop's per-token advantages "
                  f"{'equal' if shared else 'differ from'} A_i on every token (0 on padding) under "
                  f"{', '.join(NAMES.values())}; GRPO's on the 2 tokens of the wrong completion 3: {wrong}", shared),
            claim("whole-game §7.8", "when group rewards are homogeneous (all pass or all fail), the normalisation "
                  "flattens: with ε in the denominator every A_i is 0", f"all-equal group of G={G}: max |A| = {same:g}",
                  same == 0.0),
            claim("whole-game §7.8", "when group rewards are homogeneous, the normalisation blows up, read as the "
                  "z-score without ε: 0 / 0", f"all-equal group of G={G}, ε = 0: A = {bare}", not math.isfinite(bare)),
            claim("whole-game §7.8", "when group rewards are nearly homogeneous, the normalisation blows up, read as "
                  "tiny differences made full-size: per unit of reward gap, the advantages lie further apart than for "
                  "0/1 rewards", f"G={G}, one score {delta:g} below the others: its A {near[0].item():.2f} against "
                  f"{near[1].item():.2f}, {near_gap:,.0f} per unit of reward gap; a lone right answer among 0/1 rewards: "
                  f"{lone_gap:.2f} per unit", near_gap > lone_gap)]


def collect_metrics(args: Args, runs: dict, before: dict) -> dict:
    """The headline numbers, and the final table (printed, and shown in the docs)."""
    metrics = {f"cold_start_pass@{k}": before[f"pass@{k}"] for k in args.ks}
    last = f"pass@{args.final_samples}"
    rows = [["cold start", "-", before["pass@1"], before[last], 0.0, before["length"], "-", "-"]]
    for method, run in runs.items():
        metrics |= {f"{method}_pass@{k}": run["final"][f"pass@{k}"] for k in args.ks}
        metrics |= {f"{method}_kl": run["final_kl"], f"{method}_length": run["final"]["length"],
                    f"{method}_wall_clock_s": run["wall_clock_s"]}
        metrics |= {f"{method}_late_{key}": late_mean(run, key) for key in ("length_right", "length_wrong")}
        rows.append([NAMES[method], f"{100 * (run['final']['pass@1'] - before['pass@1']):+.1f}", run["final"]["pass@1"],
                     run["final"][last], run["final_kl"], run["final"]["length"],
                     f"{np.mean([h['zero_spread'] for h in run['history']]):.0%}", run["wall_clock_s"]])
    header = ["policy", "Δ pass@1 (points)", "pass@1", last, "KL", "length", "zero-spread", "seconds"]
    return metrics | {"tables": {"results": {"header": header, "rows": rows}}}


def report(args: Args, claims: list[dict], table: dict) -> None:
    print(f"\nHeld-out ({args.eval_problems} problems, {args.final_samples} samples each), after {args.rl_steps} "
          f"updates of {args.prompts}x{args.group_size} completions, β={args.beta:g}:")
    print(format_table(table["rows"], table["header"]))
    print("\n" + format_claims(claims))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = start_lm_run(args)
    print(f"05 group baselines; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), "
          f"device {device}")
    held_out = args.task.held_out(args.eval_problems)
    before = final_evaluation(initial, tokenizer, args, held_out, device)
    print(f"cold start: held-out pass@1 {before['pass@1']:.3f}, pass@{args.final_samples} "
          f"{before[f'pass@{args.final_samples}']:.3f}, length {before['length']:.1f}")
    runs = {method: run_method(initial, tokenizer, args, method, held_out, device) for method in args.method_list}
    plot_runs(runs, out)
    claims = check_claims(args)
    metrics = collect_metrics(args, runs, before)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, cold_start=before,
                  runs={m: {k: v for k, v in run.items() if k != "policy"} for m, run in runs.items()},
                  cold_start_info={k: v for k, v in info.items() if k != "sft_losses"})
    report(args, claims, metrics["tables"]["results"])
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    run_script(main, Args)
