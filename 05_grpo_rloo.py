"""05 — Group baselines on a small LM: REINFORCE, RLOO, GRPO and Dr. GRPO, with KL to a reference;
and the classic alternative they replace, PPO with a learned critic.

Post-training an LM on a verifiable task is policy gradient with one reward per completion: the
Ψ slot holds one number per completion, copied onto each of its tokens. The methods differ in
the baseline subtracted from the reward r_i of completion i, one of the G sampled for a prompt:

  REINFORCE   A_i = r_i - mean(batch)            one baseline for every prompt
  RLOO        A_i = r_i - mean_{j≠i} r_j         the other G-1 completions of the same prompt
  GRPO        A_i = (r_i - mean_g) / std_g       the group's z-score, no critic
  Dr. GRPO    A_i = r_i - mean_g                 no std, and a constant loss normaliser
  PPO         A_it = Σ_l λ^l δ_{t+l},  δ_t = r_t + V(s_{t+1}) - V(s_t)
              GAE(γ = 1, λ) over tokens, V a learned critic (a copy of the policy's trunk)

All five feed one step: PPO's clipped ratio ρ = π_θ/π_old, a k3 estimate of KL(π_θ || π_ref) to
the frozen cold start weighted by β, and a loss normalisation. The task (common.py) is a chain of
arithmetic operations solved one step per line; the verifier checks the answer. The cold start,
a tiny Llama trained here on demonstrations that often skip the working, mostly answers bare and
wrong: RL has to find out, from one bit per completion, that writing the steps pays.

Length is the essays' argument: the score Σ_t ∇ log π(y_t) of a T-token completion sums T terms,
so a terminal reward's gradient grows noisier with T. We measure each completion's gradient under
each Ψ (torch.func) and fit the slope of its variance against the completion length; and we ask
whether the critic tells the truth: its V at the first token and at each step boundary against
P(success | prefix) estimated by fresh rollouts from that prefix. `--max-steps 16` makes the
chains (and completions) four times longer.

Read beside: credit-assignment-over-long-generations.txt (all: length, GRPO, KL, "when it falls
down"); credit-assignment-is-the-whole-game.txt §5 (the decision tree: group baselines or PPO +
GAE), §7.4, §7.8, §8 and Appendix A. Papers: Shao et al. 2024 (DeepSeekMath: GRPO); Ahmadian et
al. 2024 (RLOO); Liu et al. 2025 (Dr. GRPO); Schulman 2020 (k3); Schulman et al. 2016 (GAE);
Ouyang et al. 2022 (InstructGPT: PPO with a value model).
Figures in runs/05_grpo_rloo/: learning_curves.png (held-out pass@1 per estimator), training.png
(reward, KL, entropy, length, zero-spread share, grad norm per update), reward_kl.png (the β
sweep), zero_spread.png (groups with no reward spread vs G, per difficulty, before and after RL),
gradient_variance.png (per-completion gradient variance vs length, log-log, per Ψ),
critic_truth.png (the critic's V against rollout truth, before and after PPO, per λ).
--failure-modes adds the essay's failure modes that live here (whole-game §7): async staleness
(staleness.png: rollouts k updates old, with and without the clipped importance ratio), KL
mis-tune on both sides, train/serve skew and state blindness at serving time, and
(support_and_anchor.png) a sparse reward from a weak cold start against rejection sampling into
SFT, and KL anchoring to a reference that rarely writes the steps, with reference resets; every
default run also measures length bias (the length of wrong completions, GRPO against Dr. GRPO).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import math
import time
import warnings
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap
from tqdm import tqdm

from common import (
    HELD_OUT_SIZE,
    ChainProblem,
    Completions,
    LMArgs,
    arg,
    as_list,
    claim,
    cold_start_policy,
    encode_prompts,
    evaluate,
    format_claims,
    format_table,
    frozen_copy,
    head_width,
    loglog_slope,
    mean_or_nan,
    moving_average,
    pearson,
    positions_from_mask,
    require,
    require_positive,
    run_script,
    sample,
    save_figure,
    start_lm_run,
    target_nll,
    text_batch,
    token_logprobs,
    verifier_rewards,
    verify,
    well_formed,
    write_results,
)

ESTIMATORS = ("reinforce", "rloo", "grpo", "dr_grpo")
METHODS = (*ESTIMATORS, "ppo", "ppo_head")  # the group baselines, and PPO's learned critic
CRITICS = {"ppo": "separate", "ppo_head": "head"}  # the kind of critic each PPO method learns
NAMES = {"reinforce": "REINFORCE (batch mean)", "rloo": "RLOO", "grpo": "GRPO", "dr_grpo": "Dr. GRPO",
         "ppo": "PPO (critic, GAE)", "ppo_head": "PPO (value head on the policy)"}
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
                         advantages: torch.Tensor, ref_logp: torch.Tensor, clip_eps: float, beta: float,
                         inner_iters: int, loss_norm: str, max_new_tokens: int, max_grad_norm: float,
                         behaviour_logp: torch.Tensor | None = None) -> dict:
    """μ = inner_iters optimiser steps on one batch, the loss of token t of completion i being

      loss_it = -min(ρ_it A_it, clip(ρ_it, 1-ε, 1+ε) A_it) + β k3(π_θ, π_ref)_it,
      ρ_it = π_θ(y_it) / π_old(y_it)

    reduced by `masked_loss`. A (B, T) holds per-token advantages. π_old is the policy that
    sampled, held fixed over the μ iterations (so the clip can act from the second one on; on
    the first, ρ = 1), unless `behaviour_logp` gives the log-probs of an older policy that
    sampled (stale rollouts: then ρ is the importance ratio from the start). Returns the mean
    over iterations of the loss, the clip fraction and the grad norm (before clipping), the
    sampling policy's KL to the reference and entropy.
    """
    mask = completions.completion_mask
    batch = (completions.sequences, completions.attention_mask, completions.prompt_length)
    stats = {"loss": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0}
    for iteration in range(inner_iters):
        logp, entropy = token_logprobs(policy, *batch, with_entropy=iteration == 0)
        if iteration == 0:
            old_logp = logp.detach() if behaviour_logp is None else behaviour_logp
            tokens = mask.sum().clamp(min=1)  # an all-padding batch has no token: statistics 0, not NaN
            stats["kl"] = float(torch.where(mask, kl_k3(old_logp, ref_logp), 0.0).sum() / tokens)
            stats["entropy"] = float(torch.where(mask, entropy.detach(), 0.0).sum() / tokens)
        per_token, clip_active = clipped_surrogate(logp, old_logp, advantages, clip_eps)
        if beta > 0:
            per_token = per_token + beta * kl_k3(logp, ref_logp)
        loss = masked_loss(per_token, mask, loss_norm, max_new_tokens)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
        optimizer.step()
        stats["loss"] += loss.item() / inner_iters
        stats["clip_fraction"] += float((clip_active & mask).sum() / tokens) / inner_iters
        stats["grad_norm"] += grad_norm.item() / inner_iters
    return stats


# ============================================================================================
# The classic alternative: PPO with a learned token critic and GAE over tokens
# ============================================================================================
class TokenCritic(torch.nn.Module):
    """V(x, y_<t), the value of each prefix, read where completion token y_t is about to be
    sampled: a linear head, zero at first, on the last hidden state of a transformer trunk.

      separate  the trunk is a copy of the policy's, trained with the head (InstructGPT's value
                model also starts from a trained LM): a second model and its optimiser state
      head      the head sits on the policy's own trunk and reads its features without changing
                them (no gradient into the trunk): one linear layer, the cheap variant
    """

    def __init__(self, policy, kind: str = "separate"):
        super().__init__()
        self.kind = kind
        self.trunk = copy.deepcopy(policy.base_model) if kind == "separate" else policy.base_model
        self.head = torch.nn.Linear(head_width(policy), 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def trained_parameters(self) -> list[torch.nn.Parameter]:
        """What the value loss trains: the trunk copy and the head, or the head alone."""
        return list((self if self.kind == "separate" else self.head).parameters())

    def for_policy(self, policy) -> TokenCritic:
        """A copy to train beside `policy` (a head moves onto `policy`'s trunk)."""
        if self.kind == "separate":
            return copy.deepcopy(self)
        critic = TokenCritic(policy, "head").to(self.head.weight.device)
        critic.head.load_state_dict(self.head.state_dict())
        return critic

    def prefix_values(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """V after each position, (B, L): position j has read tokens 0..j."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.kind == "separate"):
            hidden = self.trunk(input_ids=ids, attention_mask=attention_mask,
                                position_ids=positions_from_mask(attention_mask)).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)

    def forward(self, completions: Completions) -> torch.Tensor:
        """V(s_t) for each completion token, (B, T): position P-1+t has read x and y_<t."""
        values = self.prefix_values(completions.sequences, completions.attention_mask)
        return values[:, completions.prompt_length - 1:-1]


def token_gae(values: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, gamma: float,
              lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(γ, λ) over the tokens of each completion (02_gae.py teaches GAE; this is its backward
    recursion on batch-major, right-padded rows). The outcome reward comes with the last token
    and the episode ends there, so V = 0 after it (a completion cut by the budget ends too: it
    scores 0). values, mask (B, T); rewards (B,). Returns the advantages and the critic's targets
    A_t + V(s_t), both (B, T) and 0 on padding."""
    mask = mask.float()
    values = values * mask
    still_going = F.pad(mask[:, 1:], (0, 1))  # a token follows this one
    # r_t = R on the last token, 0 before it
    token_rewards = (mask - still_going) * rewards[:, None]
    # δ_t = r_t + γ V(s_{t+1}) - V(s_t)
    deltas = token_rewards + gamma * F.pad(values[:, 1:], (0, 1)) * still_going - values
    advantages = torch.zeros_like(deltas)
    running = torch.zeros_like(deltas[:, 0])
    for t in reversed(range(deltas.shape[1])):
        # A_t = δ_t + γλ A_{t+1}   (0 on the padding after the end, so nothing leaks back)
        running = deltas[:, t] + gamma * lam * running
        advantages[:, t] = running
    return advantages * mask, (advantages + values) * mask


def whiten(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Advantages to mean 0, std 1 over the batch's completion tokens (PPO for LMs does this, as
    TRL's PPOTrainer; it puts PPO's step on GRPO's scale)."""
    real = advantages[mask]
    return torch.where(mask, (advantages - real.mean()) / (real.std() + 1e-8), 0.0) if real.numel() > 1 else advantages


def value_loss(values: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """½ (V(s_t) - target_t)², the mean over completion tokens (no value clipping)."""
    squared = torch.where(mask, (values - targets) ** 2, 0.0)
    return 0.5 * squared.sum() / mask.sum().clamp(min=1)


def value_step(critic: TokenCritic, optimizer: torch.optim.Optimizer, completions: Completions,
               targets: torch.Tensor, iters: int, max_grad_norm: float) -> float:
    """`iters` optimiser steps of the value loss on one batch; returns the mean loss."""
    total = 0.0
    for _ in range(iters):
        loss = value_loss(critic(completions), targets, completions.completion_mask)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(critic.trained_parameters(), max_grad_norm)
        optimizer.step()
        total += loss.item() / iters
    return total


# ============================================================================================
# Groups with no reward spread: how many, by difficulty and group size
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


def state_bytes(*parts) -> int:
    """Bytes held by modules' parameters and gradients and by optimisers' state (Adam: two moments),
    each tensor once (a value head's critic holds the policy's own trunk)."""
    tensors = {}
    for part in parts:
        if isinstance(part, torch.optim.Optimizer):
            found = [t for state in part.state.values() for t in state.values() if torch.is_tensor(t)]
        else:
            found = [t for p in part.parameters() for t in (p, p.grad) if t is not None]
        tensors.update({id(t): t for t in found})
    return sum(t.numel() * t.element_size() for t in tensors.values())


def warm_up_critic(critic: TokenCritic, policy, tokenizer, args: Args, device) -> list[float]:
    """Fit the critic to the policy as it is before PPO starts (`critic_warmup` updates of fresh
    groups, value loss only, Monte Carlo targets: V(s_t) -> R): a critic that starts at V = 0
    would make PPO's first updates plain REINFORCE. Returns the value loss per update."""
    rng = np.random.default_rng(args.seed + 11)
    generator = torch.Generator(device).manual_seed(args.seed + 11)
    optimizer = torch.optim.AdamW(critic.trained_parameters(), lr=args.critic_lr, weight_decay=0.0)
    exclude = frozenset(p.prompt for p in args.task.held_out())
    losses = []
    for _ in tqdm(range(args.critic_warmup), desc="critic warm-up", leave=False):
        problems = args.task.sample(args.prompts, rng, exclude=exclude)
        completions, rewards = sample_groups(policy, tokenizer, problems, args, generator, device)
        # γ = 1 and one reward at the end: the return from every token is R
        targets = rewards.flatten()[:, None] * completions.completion_mask
        losses.append(value_step(critic, optimizer, completions, targets, 1, args.max_grad_norm))
    return losses


class RolloutWorker:
    """Who samples: the policy itself (lag 0, on-policy), or an asynchronous worker that runs the
    weights of `lag` updates ago (in the first updates, the oldest weights there are)."""

    def __init__(self, policy, lag: int):
        self.policy, self.lag = policy, lag
        self.actor = copy.deepcopy(policy) if lag else policy
        self.weights = collections.deque([self.snapshot()], maxlen=lag + 1) if lag else None

    def snapshot(self) -> dict:
        return {name: value.detach().clone() for name, value in self.policy.state_dict().items()}

    def model(self):
        if self.lag:
            self.actor.load_state_dict(self.weights[0])
        return self.actor

    def age(self) -> int:
        """Updates between the weights that sample now and the policy's."""
        return len(self.weights) - 1 if self.lag else 0

    def updated(self) -> None:
        """Call after each optimiser step: the worker receives the new weights `lag` updates late."""
        if self.lag:
            self.weights.append(self.snapshot())


def lengths_by_outcome(lengths: torch.Tensor, rewards: torch.Tensor) -> dict:
    """Mean length of the right (reward > 0) and of the wrong completions (NaN where none)."""
    right = rewards > 0
    return {f"length_{name}": float(lengths[rows].float().mean()) if rows.any() else math.nan
            for name, rows in (("right", right), ("wrong", ~right))}


@torch.no_grad()
def policy_drift(policy, completions: Completions) -> float:
    """Mean |log π_θ(y_t) - log π_old(y_t)| over the completion tokens: how far the policy has moved
    from the one that sampled them (0 on-policy)."""
    now, _ = token_logprobs(policy, completions.sequences, completions.attention_mask, completions.prompt_length)
    mask = completions.completion_mask
    return float(torch.where(mask, (now - completions.logprobs).abs(), 0.0).sum() / mask.sum().clamp(min=1))


def make_optimizer(policy, args: Args) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (or SGD) with a linear learning-rate warmup: Adam's first steps are large."""
    if args.optimizer == "adam":
        optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=0.0)
    else:
        optimizer = torch.optim.SGD(policy.parameters(), lr=args.lr)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / args.warmup))


def train(policy, reference, tokenizer, args: Args, method: str, held_out: list, device, desc: str = "RL",
          critic: TokenCritic | None = None) -> dict:
    """Each update: `prompts` fresh training problems (never a held-out one), G completions of
    each scored by the verifier, the group advantage of each completion copied onto its tokens
    (or, for PPO, the critic's GAE advantage of each token, and then a step of the critic), one
    `policy_gradient_step`. Every `eval_every` updates, held-out pass@1.

    With --staleness k the rollouts come from the weights of k updates ago (`RolloutWorker`); with
    --ref-reset k the KL reference is reset to the current policy every k updates.
    Returns {"history": one dict per update (reward, KL, entropy, length, zero-spread share,
    lengths of the right and wrong completions, policy age and drift, clip fraction, grad norm,
    the critic's value loss, seconds in generation and in the update), "evals": [...],
    "state_bytes": what the training holds (`state_bytes`, the reference too)}.
    """
    rng = np.random.default_rng(args.seed)
    generator = torch.Generator(device).manual_seed(args.seed)
    eval_generator = torch.Generator(device).manual_seed(args.seed + 1)
    optimizer, schedule = make_optimizer(policy, args)
    worker = RolloutWorker(policy, args.staleness)
    if critic is not None:
        critic_optimizer = torch.optim.AdamW(critic.trained_parameters(), lr=args.critic_lr, weight_decay=0.0)
    exclude = frozenset(p.prompt for p in args.task.held_out())
    history, evals = [], []

    def held_out_eval(step: int) -> None:
        result = evaluate(policy, tokenizer, held_out, args.eval_samples, args.max_new_tokens, eval_generator, device)
        evals.append({"step": step, "samples": step * args.prompts * args.group_size,
                      "pass@1": result["pass@1"], "length": result["length"]})

    for step in tqdm(range(args.rl_steps), desc=desc, leave=False):
        if step % args.eval_every == 0:
            held_out_eval(step)
        if args.ref_reset and step and step % args.ref_reset == 0:
            reference = frozen_copy(policy)  # re-anchor: the KL now measures the drift since this update
        start = time.time()
        problems = args.task.sample(args.prompts, rng, exclude=exclude)
        completions, rewards = sample_groups(worker.model(), tokenizer, problems, args, generator, device)
        generated, age = time.time(), worker.age()
        mask = completions.completion_mask
        if critic is None:
            advantages = token_advantages(rewards, method, mask)
        else:
            with torch.no_grad():
                values = critic(completions)
            advantages, targets = token_gae(values, rewards.flatten(), mask, 1.0, args.gae_lambda)
            advantages = whiten(advantages, mask)
        with torch.no_grad():
            ref_logp, _ = token_logprobs(reference, completions.sequences, completions.attention_mask,
                                         completions.prompt_length)
        # stale rollouts: the ratio's π_old is the policy that sampled, or (ignored) the current one
        behaviour = completions.logprobs if args.staleness and args.stale_ratio == "importance" else None
        drift = policy_drift(policy, completions) if args.staleness else 0.0
        stats = policy_gradient_step(policy, optimizer, completions, advantages, ref_logp, args.clip_eps,
                                     args.beta, args.inner_iters, loss_norm_of(method, args), args.max_new_tokens,
                                     args.max_grad_norm, behaviour)
        schedule.step()
        worker.updated()
        if critic is not None:
            stats["value_loss"] = value_step(critic, critic_optimizer, completions, targets, args.inner_iters,
                                             args.max_grad_norm)
        history.append({"reward": float(rewards.mean()), "length": float(completions.lengths.float().mean()),
                        **lengths_by_outcome(completions.lengths, rewards.flatten()),
                        "truncated": float(completions.truncated.float().mean()),
                        "zero_spread": float(zero_spread(rewards).float().mean()), "policy_age": age,
                        "policy_drift": drift, **stats,
                        "generate_s": generated - start, "update_s": time.time() - generated})
    held_out_eval(args.rl_steps)
    trained_parts = (policy, optimizer) if critic is None else (policy, optimizer, critic, critic_optimizer)
    return {"history": history, "evals": evals, "state_bytes": state_bytes(*trained_parts, reference)}


# ============================================================================================
# Config
# ============================================================================================
@dataclass
class Args(LMArgs):
    out: str = arg("runs/05_grpo_rloo", "output folder for figures and results.json")
    methods: str = arg("reinforce,rloo,grpo,dr_grpo,ppo,ppo_head", "advantage estimators to compare, comma-separated "
                       "(grpo divides by the group std, TRL's scale_rewards; dr_grpo does not; ppo learns a critic, "
                       "ppo_head a value head on the policy)",
                       METHODS, item=str)
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
    betas: str = arg("0,0.5", "extra KL weights β for the GRPO sweep (the default --beta run is reused)",
                     item=float, empty=True)
    group_sizes: str = arg("2,4,8,16", "group sizes G of the zero-spread study (at most --final-samples)", item=int)
    final_samples: int = arg(16, "samples per held-out problem before/after RL (pass@1 and pass@k)")
    gae_lambda: float = arg(0.95, "PPO: GAE's λ over tokens (γ = 1)")
    critic_lr: float = arg(1e-3, "PPO: the critic's AdamW learning rate")
    critic_warmup: int = arg(10, "PPO: value-only updates on the cold start's samples before PPO begins")
    critic_lambdas: str = arg("1", "extra GAE λ for PPO runs in the does-the-critic-lie study (the --gae-lambda run "
                              "is reused)", item=float, empty=True)
    truth_problems: int = arg(32, "held-out problems whose prefixes test the critic")
    truth_rollouts: int = arg(16, "fresh completions from each prefix: the rollout estimate of P(success | prefix)")
    variance_prompts: int = arg(64, "prompts (G completions each) whose per-completion gradients are measured")
    variance_bins: int = arg(6, "completion-length bins (equal widths in log length) of the gradient-variance study")
    staleness: int = arg(0, "async actors: rollouts come from the policy of this many updates ago (0: on-policy)")
    stale_ratio: str = arg("importance", "with stale rollouts, π_old in the clipped ratio: the policy that sampled "
                           "('importance') or the current one ('ignore', as if on-policy)", choices=("importance", "ignore"))
    failure_modes: bool = arg(False, "also run the failure-mode studies (async staleness at each --stale-lags)")
    stale_lags: str = arg("8,32", "failure modes: the policy ages of the async-staleness study", item=int)
    ref_reset: int = arg(0, "updates between resets of the KL reference to the current policy (0: never)")
    sparse_sft_steps: int = arg(60, "failure modes: SFT steps of the weak cold start of the sparse-reward study")
    rft_rounds: int = arg(2, "failure modes: rounds of rejection sampling into SFT (best-of-N, then fine-tune)")
    rft_n: int = arg(32, "failure modes: completions per problem in a rejection-sampling round, N")
    rft_sft_steps: int = arg(25, "failure modes: fine-tuning steps on the kept completions, per round")
    rft_lr: float = arg(1e-3, "failure modes: AdamW learning rate of the rejection-sampling fine-tune")
    poor_shortcut_prob: float = arg(0.9, "failure modes: share of bare-answer demonstrations in the poor "
                                         "reference's SFT (the default cold start has --shortcut-prob)")
    bench: bool = arg(False, "time RL steps (generation vs update, own loop vs model.generate) and stop")
    bench_steps: int = arg(5, "RL steps timed by --bench")

    SMOKE = dict(LMArgs.SMOKE_LM, rl_steps=2, prompts=2, group_size=2, eval_every=1, betas="0", group_sizes="2",
                 final_samples=2, bench_steps=1, critic_warmup=1, truth_problems=2, truth_rollouts=2,
                 variance_prompts=4, variance_bins=2, sparse_sft_steps=2, rft_rounds=1, rft_n=2, rft_sft_steps=1)

    def __post_init__(self):
        super().__post_init__()
        require_positive(self, "rl_steps", "prompts", "lr", "warmup", "inner_iters", "max_grad_norm", "eval_every",
                         "final_samples", "bench_steps", "critic_lr", "truth_problems", "truth_rollouts",
                         "variance_prompts", "variance_bins", "sparse_sft_steps", "rft_rounds", "rft_n",
                         "rft_sft_steps", "rft_lr")
        require(self.critic_warmup >= 0 and self.staleness >= 0 and self.ref_reset >= 0,
                "--critic-warmup, --staleness and --ref-reset must be non-negative")
        require(0 <= self.poor_shortcut_prob <= 1, "--poor-shortcut-prob must be in [0, 1]")
        require(all(lag > 0 for lag in self.lag_list), "--stale-lags must be positive")
        require(all(0 <= lam <= 1 for lam in [self.gae_lambda, *self.lambda_list]),
                "--gae-lambda and --critic-lambdas must be in [0, 1]")
        require(self.truth_problems <= HELD_OUT_SIZE, f"--truth-problems must be at most {HELD_OUT_SIZE}")
        require(self.group_size >= 2, f"--group-size must be at least 2: RLOO and GRPO take the baseline "
                f"from the other completions of the same prompt, got {self.group_size}")
        require(self.clip_eps > 0 and self.beta >= 0, "--clip-eps must be positive and --beta non-negative")
        require(self.method_list and all(m in METHODS for m in self.method_list),
                f"--methods must be among {','.join(METHODS)}")
        require(all(b >= 0 for b in self.beta_list), "--betas must be non-negative")
        require(all(2 <= g <= self.final_samples for g in self.group_list),
                "--group-sizes must be in 2..--final-samples")

    @property
    def method_list(self) -> list[str]:
        return as_list(self.methods, str)

    @property
    def beta_list(self) -> list[float]:
        return as_list(self.betas, float)

    @property
    def strongest_beta(self) -> float:
        """The largest KL weight the run trains GRPO with (--beta and the --betas sweep)."""
        return max([self.beta, *self.beta_list])

    @property
    def lag_list(self) -> list[int]:
        return as_list(self.stale_lags, int)

    @property
    def lambda_list(self) -> list[float]:
        return as_list(self.critic_lambdas, float)

    @property
    def group_list(self) -> list[int]:
        return as_list(self.group_sizes, int)

    @property
    def ks(self) -> tuple[int, ...]:
        """The k of the pass@k reported before and after RL."""
        return tuple(k for k in (1, 4, self.final_samples) if k <= self.final_samples)


# ============================================================================================
# Studies
# ============================================================================================
def final_evaluation(policy, tokenizer, args: Args, held_out: list, device) -> dict:
    """pass@k on the held-out problems, `final_samples` each (the same draws before and after)."""
    return evaluate(policy, tokenizer, held_out, args.final_samples, args.max_new_tokens,
                    torch.Generator(device).manual_seed(args.seed + 2), device, ks=args.ks)


def run_method(initial, tokenizer, args: Args, method: str, held_out: list, device, beta: float,
               critic: TokenCritic | None = None, reference=None) -> dict:
    """Train a copy of the cold start with one estimator and β (PPO: and a copy of the warmed-up
    critic); evaluate it on the held-out set. The KL reference is the cold start itself unless
    `reference` is given. Records the bytes of the training state and, on a GPU, the allocator's
    peak."""
    policy = copy.deepcopy(initial)
    critic = critic.for_policy(policy) if critic is not None else None
    on_gpu = torch.device(device).type == "cuda"
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(device)
    start = time.time()
    name = (NAMES[method] + (f" λ={args.gae_lambda:g}" if critic is not None else "")
            + (f" age {args.staleness} ({args.stale_ratio})" if args.staleness else ""))
    result = train(policy, frozen_copy(initial if reference is None else reference), tokenizer,
                   dataclasses.replace(args, beta=beta), method, held_out, device, desc=f"{name} β={beta:g}",
                   critic=critic)
    result["wall_clock_s"] = time.time() - start
    result["seconds_per_update"] = float(np.mean([h["generate_s"] + h["update_s"] for h in result["history"]]))
    result["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device) if on_gpu else None
    result["final"] = final_evaluation(policy, tokenizer, args, held_out, device)
    last = result["history"][-max(1, len(result["history"]) // 10):]
    result["final_kl"] = float(np.mean([h["kl"] for h in last]))
    result["policy"], result["critic"] = policy, critic
    print(f"  {name:24s} β={beta:<5g} held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> "
          f"{result['final']['pass@1']:.3f}, KL {result['final_kl']:.3f}, {result['wall_clock_s']:.0f} s")
    return result


def warmed_critics(initial, tokenizer, args: Args, device) -> dict:
    """PPO's starting critics, each built on the cold start and fitted to it (`warm_up_critic`):
    the separate one always (the variance and truth studies use it), the value head if a method
    learns one. {kind: {"critic", "losses"}}."""
    critics = {}
    for kind in ["separate"] + (["head"] if "ppo_head" in args.method_list else []):
        critic = TokenCritic(initial, kind).to(device)
        critics[kind] = {"critic": critic, "losses": warm_up_critic(critic, initial, tokenizer, args, device)}
    return critics


def compare_estimators(initial, tokenizer, args: Args, held_out: list, device, critics: dict) -> dict:
    """Every estimator on the same prompts, samples and seed, at the default β."""
    return {m: run_method(initial, tokenizer, args, m, held_out, device, args.beta,
                          critics[CRITICS[m]]["critic"] if m in CRITICS else None) for m in args.method_list}


def beta_sweep(initial, tokenizer, args: Args, held_out: list, device, runs: dict) -> dict:
    """GRPO at each β of --betas, plus the default-β run of `compare_estimators`."""
    sweep = {args.beta: runs["grpo"]} if "grpo" in runs else {}
    for beta in args.beta_list:
        if beta not in sweep:
            sweep[beta] = run_method(initial, tokenizer, args, "grpo", held_out, device, beta)
    return sweep


def critic_lambda_runs(initial, tokenizer, args: Args, held_out: list, device, runs: dict, critics: dict) -> dict:
    """PPO at each λ of --critic-lambdas, plus the --gae-lambda run of `compare_estimators`."""
    by_lambda = {args.gae_lambda: runs["ppo"]} if "ppo" in runs else {}
    for lam in args.lambda_list:
        if lam not in by_lambda:
            by_lambda[lam] = run_method(initial, tokenizer, dataclasses.replace(args, gae_lambda=lam), "ppo",
                                        held_out, device, args.beta, critics["separate"]["critic"])
    return by_lambda


def step_prefixes(problem, completion: str) -> list[str]:
    """Where credit is read: the prompt alone (before the first token) and the prompt followed by
    each complete line of the completion but the last (each step boundary)."""
    lines = completion.split("\n")
    return [problem.prompt + "".join(line + "\n" for line in lines[:k]) for k in range(len(lines))]


def critic_against_rollouts(policy, critic: TokenCritic, tokenizer, args: Args, problems: list, device) -> dict:
    """Does the critic tell the truth? One completion per problem from the policy; at each of its
    prefixes (`step_prefixes`), the critic's V against P(success | prefix), estimated by
    `truth_rollouts` fresh completions of the same policy from that prefix. The noise floor is
    the mean error a perfect V would show against that estimate, √(2/π) · √(p(1-p)/K)."""
    generator = torch.Generator(device).manual_seed(args.seed + 13)
    _, texts = sample(policy, tokenizer, [p.prompt for p in problems], args.max_new_tokens, generator, device)
    owners, prefixes = [], []
    for problem, text in zip(problems, texts):
        for prefix in step_prefixes(problem, text):
            owners.append(problem)
            prefixes.append(prefix)
    K = args.truth_rollouts
    completions, continuations = sample(policy, tokenizer, [p for p in prefixes for _ in range(K)],
                                        args.max_new_tokens, generator, device)
    written = [prefix[len(problem.prompt):] for problem, prefix in zip(owners, prefixes)]
    used = torch.tensor([len(tokenizer(w, add_special_tokens=False)["input_ids"]) for w in written])
    # a rollout succeeds if the whole completion (the prefix's lines, then its own) passes within the budget
    texts = [w + c for w, c in zip(np.repeat(written, K), continuations)]
    within = (used.repeat_interleave(K) + completions.lengths.cpu()) <= args.max_new_tokens
    wins = verifier_rewards([o for o in owners for _ in range(K)], texts, completions.truncated) * within
    truth = wins.view(-1, K).mean(1).numpy()
    with torch.no_grad():
        ids, mask = encode_prompts(tokenizer, prefixes, device)
        values = critic.prefix_values(ids, mask)[:, -1].cpu().numpy()  # left-padded: the last column is the prefix's end
    first = np.array([prefix == problem.prompt for problem, prefix in zip(owners, prefixes)])
    floor = math.sqrt(2 / math.pi) * np.sqrt(truth * (1 - truth) / K)
    return {"values": values.tolist(), "truth": truth.tolist(), "first_token": first.tolist(),
            "error_first_token": float(np.abs(values - truth)[first].mean()),
            "error_boundaries": float(np.abs(values - truth)[~first].mean()) if (~first).any() else float("nan"),
            "bias": float((values - truth).mean()), "noise_floor": float(floor.mean()),
            "correlation": pearson(values, truth)}


def critic_study(initial, tokenizer, args: Args, device, critics: dict, runs: dict, by_lambda: dict) -> dict:
    """The critics against rollout truth on the first --truth-problems held-out problems: each
    warmed-up critic at the cold start, then after PPO at each λ, and after PPO with the head."""
    problems = args.task.held_out(args.truth_problems)
    stages = {"cold start": (initial, critics["separate"]["critic"])}
    if "head" in critics:
        stages["cold start, value head"] = (initial, critics["head"]["critic"])
    stages |= {f"after PPO λ={lam:g}": (run["policy"], run["critic"]) for lam, run in sorted(by_lambda.items())}
    if "ppo_head" in runs:
        stages["after PPO, value head"] = (runs["ppo_head"]["policy"], runs["ppo_head"]["critic"])
    return {stage: critic_against_rollouts(policy, critic, tokenizer, args, problems, device)
            for stage, (policy, critic) in stages.items()}


def per_completion_gradients(policy, completions: Completions, weights: torch.Tensor, chunk: int = 32) -> torch.Tensor:
    """g_i = Σ_t w_it ∇_θ log π(y_it | x, y_<t) for each completion i, flattened, (B, D): the
    gradient of one completion's weighted log-likelihood (torch.func), vmapped over completions
    (01 does the same for Pong points). HF's mask builder looks at the mask's values, which vmap
    cannot trace, so each row gets its causal-and-padding mask ready made."""
    params = {name: p.detach() for name, p in policy.named_parameters()}
    P = completions.prompt_length

    def weighted_logp(p: dict, ids: torch.Tensor, attention: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        L = len(ids)
        causal = torch.tril(torch.ones(L, L, dtype=torch.bool, device=ids.device))
        # a padding position attends to itself only (no row of the attention is empty)
        allowed = causal & attention.bool()[None, :] | torch.eye(L, dtype=torch.bool, device=ids.device)
        logits = functional_call(policy, p, (), {"input_ids": ids[None], "attention_mask": allowed[None, None],
                                                 "position_ids": positions_from_mask(attention[None])}).logits
        logp = torch.log_softmax(logits[0, P - 1:-1].float(), dim=-1).gather(1, ids[P:, None]).squeeze(1)
        return (w * logp).sum()

    gradient_of = vmap(grad(weighted_logp), in_dims=(None, 0, 0, 0))
    rows = []
    with warnings.catch_warnings():  # vmap has no batching rule for CPU attention yet: it loops, correctly
        warnings.filterwarnings("ignore", message="There is a performance drop")
        for i in range(0, len(weights), chunk):
            part = slice(i, i + chunk)
            g = gradient_of(params, completions.sequences[part], completions.attention_mask[part], weights[part])
            rows.append(torch.cat([g[name].flatten(1) for name in params], 1))
    return torch.cat(rows)


def variance_by_length(gradients: torch.Tensor, lengths: torch.Tensor, bins: int, min_count: int = 8) -> dict:
    """Completions in `bins` length bins of equal width in log length (a bin with fewer than
    `min_count` completions is dropped); per bin, the mean length and the total variance
    tr Cov(g) = mean_i ||g_i - mean g||² (n - 1 in the denominator); and the slope of log
    variance on log length."""
    lengths = lengths.cpu().float()
    edges = np.geomspace(float(lengths.min()), float(lengths.max()) + 1, bins + 1)
    which = np.clip(np.searchsorted(edges, lengths.numpy(), side="right") - 1, 0, bins - 1)
    groups = [torch.from_numpy(np.flatnonzero(which == b)) for b in range(bins)]
    groups = [rows for rows in groups if len(rows) >= max(min_count, 2)]
    mean_length = [float(lengths[rows].mean()) for rows in groups]
    variance = [float(gradients[rows.to(gradients.device)].var(0).sum()) for rows in groups]
    return {"length": mean_length, "variance": variance, "count": [len(rows) for rows in groups],
            "slope": loglog_slope(mean_length, variance)}


def critic_name(lam: float) -> str:
    return f"critic GAE λ={lam:g}"


def gradient_variance_study(policy, critic: TokenCritic, tokenizer, args: Args, device) -> dict:
    """At the cold start: `variance_prompts` fresh problems, G completions each; each completion's
    policy-gradient vector under each Ψ (the outcome R with no baseline, minus the batch mean,
    RLOO, GRPO, and the warmed-up critic's GAE(γ = 1, λ) per token for --gae-lambda and each
    --critic-lambdas), and its total variance binned by completion length. Ψ = 1, the score
    Σ_t ∇ log π(y_t) alone, shows what length does by itself: R also changes with length."""
    rng = np.random.default_rng(args.seed + 17)
    problems = args.task.sample(args.variance_prompts, rng, exclude=frozenset(p.prompt for p in args.task.held_out()))
    completions, rewards = sample_groups(policy, tokenizer, problems, args,
                                         torch.Generator(device).manual_seed(args.seed + 17), device)
    mask = completions.completion_mask
    with torch.no_grad():
        values = critic(completions)
    # every group baseline is one number per completion: g_i = Ψ_i · s_i with s_i = Σ_t ∇ log π(y_it)
    scores = per_completion_gradients(policy, completions, mask.float())
    psi = {"Ψ = 1 (the score alone)": torch.ones_like(rewards.flatten()), "Ψ = R (no baseline)": rewards.flatten(),
           **{NAMES[m]: group_advantages(rewards, m).flatten() for m in ("reinforce", "rloo", "grpo")}}
    def spread(g: torch.Tensor) -> dict:  # one (B, D) matrix at a time: they are large
        return {**variance_by_length(g, completions.lengths, args.variance_bins),
                # tr Cov(g) / ||E g||²: the variance on the scale of the signal (Ψ's scale cancels)
                "relative": float(g.var(0).sum() / g.mean(0).square().sum().clamp(min=1e-30))}

    study = {name: spread(weights[:, None] * scores) for name, weights in psi.items()}
    for lam in sorted({args.gae_lambda, *args.lambda_list}, reverse=True):
        advantages, _ = token_gae(values, rewards.flatten(), mask, 1.0, lam)
        study[critic_name(lam)] = spread(per_completion_gradients(policy, completions, advantages))
    return study


def zero_spread_study(args: Args, held_out: list, before: dict, runs: dict) -> dict:
    """The share of groups with zero spread by difficulty and G, at the cold start and after GRPO."""
    steps = [len(p.ops) for p in held_out]
    tables = {"cold start": zero_spread_table(before["correct"], steps, args.final_samples, args.group_list)}
    if "grpo" in runs:
        tables["after GRPO"] = zero_spread_table(runs["grpo"]["final"]["correct"], steps, args.final_samples,
                                                 args.group_list)
    return tables


def gradient_by_spread(policy, reference, tokenizer, args: Args, device) -> dict:
    """On one batch of the current policy: the gradient norm of the policy-gradient term and of
    the β·KL term, from the zero-spread groups alone and from the mixed groups alone (GRPO)."""
    problems = args.task.sample(args.prompts, np.random.default_rng(args.seed + 7))
    completions, rewards = sample_groups(policy, tokenizer, problems, args,
                                         torch.Generator(device).manual_seed(args.seed + 7), device)
    advantages = group_advantages(rewards, "grpo").flatten()
    no_spread_rows = zero_spread(rewards).repeat_interleave(args.group_size)
    batch = (completions.sequences, completions.attention_mask, completions.prompt_length)
    with torch.no_grad():
        ref_logp, _ = token_logprobs(reference, *batch)
    norms = {}
    for part, rows in (("zero-spread", no_spread_rows), ("mixed", ~no_spread_rows)):
        mask = completions.completion_mask & rows[:, None]
        for term in ("pg", "kl"):
            policy.zero_grad()
            logp, _ = token_logprobs(policy, *batch)
            per_token = -advantages[:, None] * logp if term == "pg" else args.beta * kl_k3(logp, ref_logp)
            masked_loss(per_token, mask, "token", args.max_new_tokens).backward()
            grads = [p.grad.norm() for p in policy.parameters() if p.grad is not None]
            norms[f"{part} {term}"] = float(torch.stack(grads).norm()) if rows.any() else 0.0
    policy.zero_grad()
    norms["zero-spread share"] = float(zero_spread(rewards).float().mean())
    return norms


# ============================================================================================
# Failure modes (--failure-modes): async staleness, KL both sides, train/serve skew and blindness
# ============================================================================================
def staleness_study(initial, tokenizer, args: Args, held_out: list, device, runs: dict) -> dict:
    """Async staleness: GRPO with rollouts `lag` updates old, π_old in the ratio being the policy
    that sampled (the clipped importance ratio) or the current one (staleness ignored), beside
    the on-policy run."""
    study = {"on-policy": runs["grpo"]} if "grpo" in runs else {}
    for lag in args.lag_list:
        for ratio in ("ignore", "importance"):
            stale = dataclasses.replace(args, staleness=lag, stale_ratio=ratio)
            study[f"age {lag}, {ratio}"] = run_method(initial, tokenizer, stale, "grpo", held_out, device, args.beta)
    return study


SERVING_FORMAT = "Q: {prompt}A:\n"  # a prompt template the policy never saw in training
def skew_study(policy, tokenizer, args: Args, held_out: list, device) -> dict:
    """Memory / state mismatch at serving time: the GRPO policy evaluated with the prompt built
    as in training, by another template, and with a fact missing (the last operation dropped
    from the prompt; the verifier still wants the full chain's answer)."""
    served = {"as trained": held_out,
              "another template": [dataclasses.replace(p, prompt_format=SERVING_FORMAT) for p in held_out],
              # a prompt_format without {prompt} is the prompt itself: here the question minus its last step
              "last operation missing": [dataclasses.replace(p, prompt_format=ChainProblem(p.start, p.ops[:-1]).question)
                                         for p in held_out]}
    return {name: final_evaluation(policy, tokenizer, args, problems, device)["pass@1"] for name, problems in served.items()}


def sample_quality(policy, tokenizer, args: Args, problems: list, device) -> dict:
    """What a KL weight does to the samples: the share of distinct completions among the
    `final_samples` of each problem, the share of well-formed ones, and the share that write at
    least one step before the answer."""
    repeated = [p for p in problems for _ in range(args.final_samples)]
    _, texts = sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens,
                      torch.Generator(device).manual_seed(args.seed + 19), device)
    groups = [texts[i:i + args.final_samples] for i in range(0, len(texts), args.final_samples)]
    return {"distinct": float(np.mean([len(set(g)) / len(g) for g in groups])),
            "well_formed": float(np.mean([well_formed(t) for t in texts])),
            "writes_steps": float(np.mean(["\n" in t for t in texts]))}


def kl_study(tokenizer, args: Args, held_out: list, device, sweep: dict) -> dict:
    """KL mis-tune, both sides: each β of the sweep, its KL, pass@1 and pass@k, entropy (second
    half of training) and `sample_quality`."""
    k = args.final_samples
    return {beta: {"kl": run["final_kl"], "pass@1": run["final"]["pass@1"], f"pass@{k}": run["final"][f"pass@{k}"],
                   "entropy": late_mean(run, "entropy"),
                   **sample_quality(run["policy"], tokenizer, args, held_out[:64], device)}
            for beta, run in sorted(sweep.items())}


def rejection_sampling_sft(policy, tokenizer, args: Args, samples: int, device) -> list[dict]:
    """Best-of-N into SFT, in place: each of --rft-rounds rounds samples --rft-n completions of
    fresh training problems, adds those the verifier passes to a buffer of wins, and fine-tunes
    the policy on the buffer (cross-entropy on the completion, prompt masked). Spends `samples`
    completions in all. Returns per round: completions sampled, wins kept (distinct), the share
    of its problems solved, and the buffer's size."""
    rng = np.random.default_rng(args.seed + 23)
    generator = torch.Generator(device).manual_seed(args.seed + 23)
    exclude = frozenset(p.prompt for p in args.task.held_out())
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.rft_lr, weight_decay=0.0)
    wins, rounds = [], []
    for _ in range(args.rft_rounds):
        problems = args.task.sample(max(1, samples // (args.rft_rounds * args.rft_n)), rng, exclude=exclude)
        repeated = [p for p in problems for _ in range(args.rft_n)]
        _, texts = sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens, generator, device)
        kept = sorted({(p.prompt, t) for p, t in zip(repeated, texts) if verify(p, t)})
        wins += kept
        rounds.append({"sampled": len(texts), "kept": len(kept), "buffer": len(wins),
                       "solved": len({prompt for prompt, _ in kept}) / len(problems)})
        for _ in range(args.rft_sft_steps if wins else 0):
            batch = [wins[i] for i in rng.integers(len(wins), size=args.sft_batch)]
            loss = target_nll(policy, *text_batch(tokenizer, *zip(*batch), device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return rounds


def unsolved(evaluation: dict) -> float:
    """The share of held-out problems none of whose samples was right."""
    return float(np.mean([c == 0 for c in evaluation["correct"]]))


def sparse_reward_study(tokenizer, args: Args, held_out: list, device) -> dict:
    """Sparse terminal reward: a weak cold start (--sparse-sft-steps of SFT) that rarely succeeds.
    GRPO from it, against the mitigation at the same budget of completions: rejection sampling
    into SFT with half of them, then GRPO for half the updates."""
    weak, _, _ = cold_start_policy(dataclasses.replace(args.cold_start, sft_steps=args.sparse_sft_steps), device,
                                   args.cache, progress=False)
    budget = args.rl_steps * args.prompts * args.group_size
    study = {"weak cold start": {"final": final_evaluation(weak, tokenizer, args, held_out, device)}}
    study["GRPO"] = run_method(weak, tokenizer, args, "grpo", held_out, device, args.beta)
    rft = copy.deepcopy(weak)
    rounds = rejection_sampling_sft(rft, tokenizer, args, budget // 2, device)
    study["rejection sampling"] = {"final": final_evaluation(rft, tokenizer, args, held_out, device), "rounds": rounds}
    half = dataclasses.replace(args, rl_steps=max(1, args.rl_steps // 2))
    study["rejection sampling, then GRPO"] = run_method(rft, tokenizer, half, "grpo", held_out, device, args.beta)
    return study


def poor_reference_study(initial, tokenizer, args: Args, held_out: list, device, sweep: dict) -> dict:
    """KL anchoring with a poor reference: GRPO from the cold start, but anchored to an SFT model
    that rarely writes the steps (--poor-shortcut-prob of bare answers), at the sweep's strongest
    β; then the same with the reference reset to the current policy every --eval-every updates.
    Beside them, the sweep's runs at that β and at β = 0, anchored to the cold start itself.
    Each with `sample_quality` (does it write the steps that pay?)."""
    poor, _, _ = cold_start_policy(dataclasses.replace(args.cold_start, shortcut_prob=args.poor_shortcut_prob),
                                   device, args.cache, progress=False)
    strong = args.strongest_beta
    study = {"poor reference itself": {"final": final_evaluation(poor, tokenizer, args, held_out, device),
                                       **sample_quality(poor, tokenizer, args, held_out[:64], device)}}
    if strong in sweep:  # a copy: the quality measured below is this study's, not the sweep run's
        study["cold start as reference"] = dict(sweep[strong])
    settings = {"poor reference": args, "poor reference, reset": dataclasses.replace(args, ref_reset=args.eval_every)}
    for name, setting in settings.items():
        study[name] = run_method(initial, tokenizer, setting, "grpo", held_out, device, strong, reference=poor)
    for run in study.values():
        if "policy" in run and "writes_steps" not in run:
            run.update(sample_quality(run["policy"], tokenizer, args, held_out[:64], device))
    return study


def worst_regression(run: dict) -> float:
    """The largest drop of held-out pass@1 below its best so far, over training."""
    curve = np.array([e["pass@1"] for e in run["evals"]])
    return float((np.maximum.accumulate(curve) - curve).max())


def history_mean(run: dict, key: str) -> float:
    """The mean of a history entry over all of training."""
    return float(np.mean([h[key] for h in run["history"]]))


def late_mean(run: dict, key: str) -> float:
    """The mean of a history entry over the second half of training (NaN entries left out)."""
    return mean_or_nan([h[key] for h in run["history"][len(run["history"]) // 2:]])


# ============================================================================================
# Throughput (--bench): our loop, model.generate, trl's GRPOTrainer
# ============================================================================================
def benchmark(policy, tokenizer, args: Args, device) -> dict:
    """Throughput of RL steps: seconds in generation and in the update (reference forward +
    policy-gradient step), completions and tokens per second; and model.generate on the same
    prompts for comparison with our KV-cache loop."""
    held_out = args.task.held_out(args.eval_problems)
    bench_args = dataclasses.replace(args, rl_steps=args.bench_steps, eval_every=10**9)
    history = train(copy.deepcopy(policy), frozen_copy(policy), tokenizer, bench_args, "grpo", held_out, device,
                    desc="bench")["history"]
    generate_s = sum(h["generate_s"] for h in history)
    update_s = sum(h["update_s"] for h in history)
    completions = args.bench_steps * args.prompts * args.group_size
    tokens = sum(h["length"] for h in history) * args.prompts * args.group_size
    prompts = [p.prompt for p in held_out[:args.prompts] for _ in range(args.group_size)]
    ids, mask = encode_prompts(tokenizer, prompts, device)
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
    try:  # optional dependencies: imported here so that the script runs without them
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
        def __init__(self):
            self.ends: list[float] = []

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
# Figures
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


def plot_variance(variance: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name, row in variance.items():
        ax.loglog(row["length"], row["variance"], "o-", label=f"{name} (slope {row['slope']:.2f})")
    ax.set(xlabel="completion length (tokens, bin mean)", ylabel="tr Cov of the per-completion gradient",
           title="Policy-gradient variance vs length, at the cold start")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    save_figure(fig, path)


def plot_critic_truth(truth: dict, path) -> None:
    fig, axes = plt.subplots(1, len(truth), figsize=(4.5 * len(truth), 4.2), sharey=True, squeeze=False)
    for ax, (stage, row) in zip(axes[0], truth.items()):
        first = np.array(row["first_token"], dtype=bool)
        values, rollouts = np.array(row["values"]), np.array(row["truth"])
        ax.plot(rollouts[first], values[first], "o", alpha=0.6, label="first token")
        ax.plot(rollouts[~first], values[~first], "x", alpha=0.6, label="step boundary")
        ax.plot([0, 1], [0, 1], color="gray", linestyle="--")
        ax.set(title=stage, xlabel="P(success | prefix), rollouts", xlim=(-0.05, 1.05))
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("critic's V(prefix)")
    axes[0, 0].legend(fontsize="small")
    save_figure(fig, path)


def plot_staleness(stale: dict, path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, run in stale.items():
        axes[0].plot([e["samples"] for e in run["evals"]], [e["pass@1"] for e in run["evals"]], "o-", label=name)
        axes[1].plot(moving_average([h["clip_fraction"] for h in run["history"]], 5), label=name)
    axes[0].set(xlabel="completions sampled", ylabel="held-out pass@1", title="GRPO with stale rollouts")
    axes[1].set(xlabel="update", ylabel="clip fraction (trailing mean of 5)", title="where the clip acts")
    for ax in axes:
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_support_and_anchor(sparse: dict, poor: dict, budget: int, path) -> None:
    """Held-out pass@1 against completions sampled: the weak start's GRPO against rejection
    sampling then GRPO (drawn from where its sampling budget ends); GRPO from the poor reference."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, study, offsets in ((axes[0], sparse, {"rejection sampling, then GRPO": budget // 2}), (axes[1], poor, {})):
        for name, run in study.items():
            if "evals" in run:
                ax.plot([offsets.get(name, 0) + e["samples"] for e in run["evals"]],
                        [e["pass@1"] for e in run["evals"]], "o-", label=name)
        ax.set(xlabel="completions sampled", ylabel="held-out pass@1")
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    axes[0].set_title("Sparse reward: a weak cold start")
    axes[1].set_title("KL to a reference that rarely writes the steps")
    save_figure(fig, path)


def plot_all(args: Args, out: Path, runs: dict, sweep: dict, before: dict, tables: dict, variance: dict,
             by_lambda: dict, truth: dict, stale: dict, sparse: dict, poor: dict, **_) -> None:
    plot_learning_curves(runs, out / "learning_curves.png")
    others = {f"GRPO β={b:g}": r for b, r in sweep.items() if b != args.beta}
    others |= {f"PPO λ={lam:g}": r for lam, r in by_lambda.items() if lam != args.gae_lambda}
    plot_training({NAMES[m]: r for m, r in runs.items()} | others, out / "training.png")
    if sweep:
        plot_frontier(sweep, before["pass@1"], out / "reward_kl.png")
    plot_zero_spread(tables, args.group_list, out / "zero_spread.png")
    plot_variance(variance, out / "gradient_variance.png")
    plot_critic_truth(truth, out / "critic_truth.png")
    if stale:
        plot_staleness(stale, out / "staleness.png")
    if sparse and poor:
        plot_support_and_anchor(sparse, poor, args.rl_steps * args.prompts * args.group_size,
                                out / "support_and_anchor.png")


# ============================================================================================
# Claims and report
# ============================================================================================
def check_claims(args: Args, runs: dict, sweep: dict, before: dict, tables: dict, grads: dict | None,
                 variance: dict | None = None, by_lambda: dict | None = None, truth: dict | None = None,
                 stale: dict | None = None, skew: dict | None = None, kl: dict | None = None,
                 sparse: dict | None = None, poor: dict | None = None) -> list[dict]:
    A = group_advantages(torch.tensor([[0.0, 1.0, 0.0, 1.0]]), "dr_grpo")[0].tolist()
    rloo = group_advantages(torch.tensor([[0.0, 1.0, 0.0, 1.0]]), "rloo")[0, 1].item()
    # the advantages the loop hands to the loss, for one group of completions of 5 tokens
    per_token = token_advantages(torch.tensor([[0.0, 1.0, 0.0, 1.0]]), "grpo", torch.ones(4, 5, dtype=torch.bool))
    varies = bool((per_token != per_token[:, :1]).any())
    claims = [claim("whole-game App. A", "R = [0, 1, 0, 1]: centred advantages [-0.5, 0.5, -0.5, 0.5]; RLOO "
                    "advantage of sample 2 = 2/3", f"{A}; RLOO {rloo:.4f}",
                    A == [-0.5, 0.5, -0.5, 0.5] and math.isclose(rloo, 2 / 3, rel_tol=1e-6)),
              claim("survey §4.1.1", "GAE is the default in PPO, GRPO and most modern policy gradient methods",
                    f"GRPO's token advantages within a completion {'vary' if varies else 'are all equal'} "
                    f"(completion 2: {[round(a, 3) for a in per_token[1].tolist()]}): no critic, so no GAE; "
                    "its advantage is the group z-score of the outcome reward", varies)]
    G = args.group_size
    lone = group_advantages(torch.eye(G)[:1], "grpo")[0, 0].item()  # one right answer in the group
    same = group_advantages(torch.ones(1, G), "grpo").abs().max().item()
    claims.append(claim(
        "whole-game §7.8", "when group rewards are homogeneous, the normalisation blows up or flattens",
        f"all-equal group: A = {same:g} (flattens, no NaN thanks to ε); with 0/1 rewards |A| is at most "
        f"(G-1)/√G, reached by a lone right answer: {lone:.2f} at G={G} (no blow-up)", same == 0.0 or not math.isfinite(same)))
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
    # "medium" is only told apart from "hard" (or "easy") by strata on both sides of pass@1 = 0.5
    straddles = min(r["pass@1"] for r in cold.values()) < 0.5 < max(r["pass@1"] for r in cold.values())
    claims.append(claim(
        "over-long-generations", "GRPO gives no signal on easy or impossible prompts, which biases training "
        "toward medium-difficulty examples",
        f"share of G={G} groups with a signal, cold start, by steps: "
        + ", ".join(f"{k}: {s:.2f} (pass@1 {cold[k]['pass@1']:.2f})" for k, s in signal.items())
        + ("" if straddles else "; not checked: the strata do not lie on both sides of pass@1 = 0.5"),
        max(signal, key=signal.get) == medium if straddles else None))
    for method in ("grpo", "rloo"):
        if method in runs:
            gain = runs[method]["final"]["pass@1"] - before["pass@1"]
            claims.append(claim("whole-game §2, §8", f"from a cold start that can occasionally succeed, {NAMES[method]} "
                                "on the sparse verifier reward learns (here: held-out pass@1 up ≥ 15 points)",
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
    return (claims + length_bias_claims(runs) + variance_claims(args, variance or {})
            + critic_claims(args, runs, truth or {}) + staleness_claims(args, stale or {})
            + kl_claims(args, before, kl or {}) + skew_claims(skew or {}) + sparse_claims(args, sparse or {}, before, runs)
            + poor_reference_claims(args, poor or {}))


def kl_claims(args: Args, before: dict, kl: dict) -> list[dict]:
    """KL mis-tune, both sides: the largest β against --beta, and β = 0 against --beta."""
    if args.beta not in kl or len(kl) < 2:
        return []
    k = args.final_samples

    def row(beta: float) -> str:
        r = kl[beta]
        return (f"β={beta:g}: KL {r['kl']:.3f}, pass@1 {r['pass@1']:.3f}, pass@{k} {r[f'pass@{k}']:.3f}, entropy "
                f"{r['entropy']:.3f}, distinct {r['distinct']:.2f}, well-formed {r['well_formed']:.2f}")
    claims, strong = [], max(kl)
    if strong > args.beta:
        gain, held = (kl[b]["pass@1"] - before["pass@1"] for b in (args.beta, strong))
        claims.append(claim("whole-game §7.5", "KL too strong: the policy stays stuck near the SFT reference (here: "
                            "less KL and at most half the pass@1 gain of the default β)",
                            f"{row(args.beta)}; {row(strong)}", kl[strong]["kl"] < kl[args.beta]["kl"] and held <= gain / 2))
    if 0.0 in kl and args.beta > 0:
        free, anchored = kl[0.0], kl[args.beta]
        claims.append(claim("whole-game §7.5", "KL too weak: the quality of the samples collapses (here: distinct or "
                            "well-formed completions ≥ 5 points below the default β's)", f"{row(0.0)}; {row(args.beta)}",
                            anchored["distinct"] - free["distinct"] >= 0.05
                            or anchored["well_formed"] - free["well_formed"] >= 0.05))
    return claims


def still_unsolved(before: dict, after: dict) -> float:
    """Of the held-out problems with no right sample before, the share with none after."""
    never = [a == 0 for b, a in zip(before["correct"], after["correct"]) if b == 0]
    return float(np.mean(never)) if never else math.nan


def sparse_claims(args: Args, sparse: dict, before: dict, runs: dict) -> list[dict]:
    """Sparse terminal reward from a weak cold start: the symptom, the support problem, and two
    mitigations: rejection sampling into SFT, then GRPO, at the same budget of completions; and
    the full SFT cold start on demonstrations (the default one) under the same GRPO."""
    if not sparse or "grpo" not in runs:
        return []
    weak, grpo = sparse["weak cold start"]["final"], sparse["GRPO"]
    rft, both = sparse["rejection sampling"], sparse["rejection sampling, then GRPO"]
    k, spread = args.final_samples, history_mean(grpo, "zero_spread")
    gain = grpo["final"]["pass@1"] - weak["pass@1"]
    kept = ", ".join(f"{r['kept']} of {r['sampled']}" for r in rft["rounds"])
    return [claim("whole-game §7.3", "sparse terminal reward: almost all trajectories get 0, so groups carry no "
                  "signal and the cold start fails (here: ≥ 80% of GRPO's groups with zero spread, pass@1 up < 5 points)",
                  f"weak cold start pass@1 {weak['pass@1']:.3f}, pass@{k} {weak[f'pass@{k}']:.3f}; GRPO: {spread:.0%} of "
                  f"groups with zero spread, pass@1 -> {grpo['final']['pass@1']:.3f} ({100 * gain:+.1f} points)",
                  spread >= 0.8 and gain < 0.05),
            claim("whole-game §8", "no estimator fixes a support problem (here: ≥ 80% of the held-out problems with no "
                  f"right answer in {k} samples at the weak start still have none after GRPO)",
                  f"{unsolved(weak):.0%} of problems unsolved at the weak start; of those, {still_unsolved(weak, grpo['final']):.0%} "
                  f"after GRPO, {still_unsolved(weak, both['final']):.0%} after rejection sampling then GRPO",
                  still_unsolved(weak, grpo["final"]) >= 0.8),
            claim("whole-game §7.3, §8", "the mitigation: rejection sampling (best-of-N) into SFT, then GRPO, gets "
                  "wins into the buffer first (here: ≥ 3 points above GRPO alone for the same number of completions)",
                  f"best-of-{args.rft_n} kept {kept}; pass@1 after rejection sampling {rft['final']['pass@1']:.3f}, then "
                  f"GRPO for {args.rl_steps // 2} updates {both['final']['pass@1']:.3f}; GRPO alone for {args.rl_steps} "
                  f"updates {grpo['final']['pass@1']:.3f}", both["final"]["pass@1"] - grpo["final"]["pass@1"] >= 0.03),
            claim("whole-game §7.3, §2", "the mitigation: an SFT cold start on successful traces (here: GRPO from the "
                  f"default cold start, {args.sft_steps} SFT steps on demonstrations against {args.sparse_sft_steps}, "
                  "gains ≥ 3 points more)", f"weak start {weak['pass@1']:.3f} -> {grpo['final']['pass@1']:.3f} "
                  f"({100 * gain:+.1f} points); cold start {before['pass@1']:.3f} -> {runs['grpo']['final']['pass@1']:.3f} "
                  f"({100 * (runs['grpo']['final']['pass@1'] - before['pass@1']):+.1f} points)",
                  runs["grpo"]["final"]["pass@1"] - before["pass@1"] - gain >= 0.03)]


def poor_reference_claims(args: Args, poor: dict) -> list[dict]:
    """KL anchoring to a reference that rarely writes the steps: the hold-back, and the reset."""
    if "cold start as reference" not in poor:
        return []
    strong = args.strongest_beta

    def row(name: str) -> str:
        r = poor[name]
        return (f"{name}: pass@1 {r['final']['pass@1']:.3f}, writes steps {r['writes_steps']:.2f}, "
                f"KL {r['final_kl']:.3f}")
    reference, good, bad, reset = (poor[name]["final"]["pass@1"] for name in (
        "poor reference itself", "cold start as reference", "poor reference", "poor reference, reset"))
    return [claim("whole-game §7.5", "a wrong reference: KL to an SFT model that rarely writes the steps holds the "
                  f"policy back from the behaviour that pays (here, GRPO at β = {strong:g}: pass@1 ≥ 3 points below "
                  "the same β anchored to the cold start)", f"the poor reference itself: pass@1 {reference:.3f}, "
                  f"writes steps {poor['poor reference itself']['writes_steps']:.2f}; {row('cold start as reference')}; "
                  f"{row('poor reference')}", good - bad >= 0.03),
            claim("whole-game §7.5", f"the mitigation: reset the reference carefully (here: to the current policy "
                  f"every {args.eval_every} updates; ≥ 3 points above the poor reference without resets)",
                  f"{row('poor reference, reset')}; {row('poor reference')}", reset - bad >= 0.03)]


def skew_claims(skew: dict) -> list[dict]:
    """Memory / state mismatch and state blindness at serving time, on the GRPO policy."""
    if not skew:
        return []
    trained = skew["as trained"]
    return [claim("whole-game §7.10", "train/serve skew is silent poison: a serving-time prompt built by another "
                  "template than training's (here: pass@1 ≥ 5 points lower; the fix, one builder for both, is the "
                  "as-trained number)", f"as trained {trained:.3f}; served as {SERVING_FORMAT!r} {skew['another template']:.3f}",
                  trained - skew["another template"] >= 0.05),
            claim("whole-game §7.1", "state blindness: when the context drops a fact the answer needs, the policy "
                  "cannot act on it (here: the last operation missing from the prompt halves pass@1 or worse)",
                  f"as trained {trained:.3f}; last operation missing {skew['last operation missing']:.3f}",
                  skew["last operation missing"] <= trained / 2 if trained > 0 else None)]


def length_bias_claims(runs: dict) -> list[dict]:
    """Length bias (failure mode): the per-sequence normaliser against Dr. GRPO's constant one."""
    if not {"grpo", "dr_grpo"} <= set(runs):
        return []
    wrong = {m: late_mean(runs[m], "length_wrong") for m in ("grpo", "dr_grpo")}
    right = {m: late_mean(runs[m], "length_right") for m in ("grpo", "dr_grpo")}
    return [claim("whole-game §7.6; Liu et al. 2025", "length bias: dividing each completion's loss by its own "
                  "length pushes a long wrong completion down less per token, so wrong completions grow longer; "
                  "a constant normaliser (Dr. GRPO) removes the bias",
                  f"mean length over the second half of training, wrong / right completions: GRPO (per-sequence) "
                  f"{wrong['grpo']:.1f} / {right['grpo']:.1f}, Dr. GRPO (constant) {wrong['dr_grpo']:.1f} / "
                  f"{right['dr_grpo']:.1f}", wrong["grpo"] > wrong["dr_grpo"])]


def staleness_claims(args: Args, stale: dict) -> list[dict]:
    """The async-staleness mode at the largest policy age: its symptom, and the clipped ratio."""
    if "on-policy" not in stale or not args.lag_list:
        return []
    lag = max(args.lag_list)
    fresh, ignored, weighted = stale["on-policy"], stale[f"age {lag}, ignore"], stale[f"age {lag}, importance"]

    def row(run: dict) -> str:
        return (f"pass@1 {run['final']['pass@1']:.3f}, worst drop {worst_regression(run):.3f}, clip fraction "
                f"{history_mean(run, 'clip_fraction'):.3f}, |log ρ| {history_mean(run, 'policy_drift'):.3f}")
    return [claim("whole-game §7.9", f"workers acting with old weights make updates unstable, with regressions "
                  f"(here: rollouts {lag} updates old, taken as on-policy, end ≥ 3 points below on-policy)",
                  f"on-policy: {row(fresh)}; age {lag}, ignored: {row(ignored)}",
                  fresh["final"]["pass@1"] - ignored["final"]["pass@1"] >= 0.03),
            claim("whole-game §7.9", f"the mitigation: importance ratios with clipping (here: at age {lag}, ≥ 3 "
                  "points above ignoring the staleness)", f"age {lag}, clipped importance ratio: {row(weighted)}",
                  weighted["final"]["pass@1"] - ignored["final"]["pass@1"] >= 0.03)]


def linear(slope: float) -> bool | None:
    """Roughly linear: a log-log slope within 1 ± 0.3; no verdict where no slope could be fitted."""
    return None if math.isnan(slope) else abs(slope - 1) <= 0.3


def variance_claims(args: Args, variance: dict) -> list[dict]:
    """The length claims, on the slopes of log variance against log completion length."""
    claims = []
    score, bare = variance.get("Ψ = 1 (the score alone)"), variance.get("Ψ = R (no baseline)")
    if score is not None and bare is not None:
        span = (f"completion lengths {bare['length'][0]:.0f}-{bare['length'][-1]:.0f}" if bare["length"]
                else "no length bin with enough completions")
        claims.append(claim(
            "over-long-generations", "the same scalar multiplies every per-token log-probability gradient, so the "
            "variance grows with episode length (the sum of T per-token scores: log-log slope within 1 ± 0.3)",
            f"Ψ = 1: slope {score['slope']:.2f} over {span}", linear(score["slope"])))
        claims.append(claim(
            "over-long-generations", "with a terminal reward the gradient's variance grows roughly linearly with "
            "episode length (here: log-log slope within 1 ± 0.3)",
            f"Ψ = R: slope {bare['slope']:.2f} over {span} (R itself changes with length here)", linear(bare["slope"])))
    baselines = {name: row for name, row in variance.items() if name in (NAMES["reinforce"], NAMES["rloo"], NAMES["grpo"])}
    if baselines:
        claims.append(claim(
            "over-long-generations", "long reasoning traces amplify variance even with baselines (here: every "
            "group baseline's log-log slope ≥ 0.5)",
            "; ".join(f"{name}: slope {row['slope']:.2f}" for name, row in baselines.items()),
            None if any(math.isnan(row["slope"]) for row in baselines.values())
            else all(row["slope"] >= 0.5 for row in baselines.values())))
    lams = sorted(lam for lam in {args.gae_lambda, *args.lambda_list} if critic_name(lam) in variance)
    if len(lams) > 1:
        relative = {lam: variance[critic_name(lam)]["relative"] for lam in lams}
        claims.append(claim(
            "whole-game §5", "GAE's λ is a bias-variance dial: a smaller λ leans on V and lowers the variance",
            "tr Cov(g) / ||E g||² with the warmed-up critic: " + ", ".join(f"λ={lam:g}: {r:.3g}" for lam, r in relative.items()),
            relative[lams[0]] < relative[lams[-1]]))
    return claims


def critic_claims(args: Args, runs: dict, truth: dict) -> list[dict]:
    """The critic's memory, and whether its V tells the truth."""
    claims = []
    if "ppo" in runs and "grpo" in runs:
        mib = {m: runs[m]["state_bytes"] / 2**20 for m in ("grpo", "ppo", "ppo_head") if m in runs}
        ratio = mib["ppo"] / mib["grpo"]
        head = f"; a value head on the policy instead: {mib['ppo_head']:.2f} MiB" if "ppo_head" in mib else ""
        claims.append(claim(
            "over-long-generations", "PPO's critic, a copy of the policy, roughly doubles the memory footprint "
            "(here: training state 1.5-2.5x GRPO's)",
            f"parameters, gradients, Adam moments and reference: PPO {mib['ppo']:.2f} MiB, GRPO {mib['grpo']:.2f} MiB "
            f"({ratio:.2f}x){head}", 1.5 <= ratio <= 2.5))
    if truth:
        worst = max(truth, key=lambda stage: truth[stage]["error_boundaries"] / max(truth[stage]["noise_floor"], 1e-9))
        row = truth[worst]
        claims.append(claim(
            "whole-game §5", "a learned V can be wrong on sparse verifiable rewards, and a bad V injects systematic "
            "lies into Ψ (here: mean |V - P(success | prefix)| at step boundaries > 2x the rollouts' noise floor)",
            "; ".join(f"{stage}: first token {r['error_first_token']:.3f}, boundaries {r['error_boundaries']:.3f}, "
                      f"floor {r['noise_floor']:.3f}" for stage, r in truth.items()),
            bool(row["error_boundaries"] > 2 * row["noise_floor"])))
    return claims


def trained(args: Args, runs: dict, sweep: dict, by_lambda: dict) -> list[tuple[str, str, dict]]:
    """(metric label, results.json key, run) of each trained policy: the estimators, the β sweep,
    the λ runs of PPO."""
    return ([(m, f"{m} beta={args.beta}", r) for m, r in runs.items()]
            + [(f"grpo_beta{b:g}", f"grpo beta={b}", r) for b, r in sweep.items()]
            + [(f"ppo_lambda{lam:g}", f"ppo lambda={lam}", r) for lam, r in by_lambda.items()])


def collect_metrics(args: Args, runs: dict, sweep: dict, before: dict, tables: dict, grads: dict | None,
                    variance: dict, by_lambda: dict, truth: dict, stale: dict, skew: dict, kl: dict,
                    sparse: dict, poor: dict) -> dict:
    metrics = {f"cold_start_pass@{k}": before[f"pass@{k}"] for k in args.ks}
    for label, _, run in trained(args, runs, sweep, by_lambda):
        for k in args.ks:
            metrics[f"{label}_pass@{k}"] = run["final"][f"pass@{k}"]
        metrics[f"{label}_kl"] = run["final_kl"]
        metrics[f"{label}_length"] = run["final"]["length"]
        metrics[f"{label}_wall_clock_s"] = run["wall_clock_s"]
        metrics[f"{label}_seconds_per_update"] = run["seconds_per_update"]
        metrics[f"{label}_state_bytes"] = run["state_bytes"]
        if run["peak_memory_bytes"] is not None:
            metrics[f"{label}_peak_memory_bytes"] = run["peak_memory_bytes"]
    for name, row in variance.items():
        metrics[f"variance_slope[{name}]"] = row["slope"]
        metrics[f"variance_relative[{name}]"] = row["relative"]
    for stage, row in truth.items():
        for key in ("error_first_token", "error_boundaries", "bias", "noise_floor", "correlation"):
            metrics[f"critic[{stage}]_{key}"] = row[key]
    for name, run in stale.items():
        metrics[f"staleness[{name}]_pass@1"] = run["final"]["pass@1"]
        metrics[f"staleness[{name}]_worst_regression"] = worst_regression(run)
        for key in ("clip_fraction", "policy_drift", "policy_age"):
            metrics[f"staleness[{name}]_{key}"] = history_mean(run, key)
    metrics.update({f"served[{name}]_pass@1": value for name, value in skew.items()})
    for study, runs_of in (("sparse", sparse), ("poor_reference", poor)):
        for name, run in runs_of.items():
            metrics[f"{study}[{name}]_pass@1"] = run["final"]["pass@1"]
            metrics[f"{study}[{name}]_unsolved"] = unsolved(run["final"])
            for key in ("writes_steps", "final_kl"):
                if key in run:
                    metrics[f"{study}[{name}]_{key}"] = run[key]
            if "history" in run:
                metrics[f"{study}[{name}]_zero_spread"] = history_mean(run, "zero_spread")
    metrics.update({f"kl_study[beta={beta:g}]_{key}": value for beta, row in kl.items() for key, value in row.items()})
    for method, run in runs.items():
        for key in ("length_right", "length_wrong"):
            metrics[f"{method}_late_{key}"] = late_mean(run, key)
    for name, table in tables.items():
        for k, row in table.items():
            for G in args.group_list:
                metrics[f"zero_spread[{name}][steps={k}][G={G}]"] = row[G]
    if grads is not None:
        metrics.update({f"grad_norm[{k}]": v for k, v in grads.items()})
    return metrics


def report(args: Args, claims: list[dict], runs: dict, sweep: dict, before: dict, tables: dict, variance: dict,
           by_lambda: dict, truth: dict, stale: dict, skew: dict, kl: dict, sparse: dict, poor: dict, **_) -> None:
    k = args.final_samples
    rows = [["cold start", "-", before["pass@1"], before[f"pass@{k}"], 0.0, before["length"], "-", "-", "-", "-"]]
    extra = [(f"GRPO β={b:g}", r) for b, r in sweep.items() if b != args.beta]
    extra += [(f"PPO λ={lam:g}", r) for lam, r in by_lambda.items() if lam != args.gae_lambda]
    for label, run in [(NAMES[m], r) for m, r in runs.items()] + extra:
        rows.append([label, run["final"]["pass@1"] - before["pass@1"], run["final"]["pass@1"],
                     run["final"][f"pass@{k}"], run["final_kl"], run["final"]["length"],
                     history_mean(run, "zero_spread"), run["state_bytes"] / 2**20,
                     run["seconds_per_update"], run["wall_clock_s"]])
    print(f"\nHeld-out ({args.eval_problems} problems, {k} samples each), after {args.rl_steps} updates of "
          f"{args.prompts}x{args.group_size} completions, β={args.beta:g} unless named (PPO: λ={args.gae_lambda:g}):")
    print(format_table(rows, ["policy", "Δ pass@1", "pass@1", f"pass@{k}", "KL", "length", "zero-spread", "MiB",
                              "s/update", "seconds"]))
    rows = [[name, row["slope"], row["relative"], "  ".join(f"{x:.0f}: {v:.3g}" for x, v in zip(row["length"], row["variance"]))]
            for name, row in variance.items()]
    print("\nPer-completion gradient variance at the cold start, by completion length:")
    print(format_table(rows, ["Ψ", "log-log slope", "tr Cov / |E g|²", "mean length: tr Cov, per bin"]))
    rows = [[stage, r["error_first_token"], r["error_boundaries"], r["bias"], r["correlation"], r["noise_floor"]]
            for stage, r in truth.items()]
    print(f"\nThe critic's V against P(success | prefix) from {args.truth_rollouts} rollouts per prefix:")
    print(format_table(rows, ["critic", "|error| first token", "|error| boundaries", "bias", "correlation",
                              "noise floor"]))
    if stale:
        rows = [[name, run["final"]["pass@1"], worst_regression(run),
                 *(history_mean(run, key) for key in ("policy_age", "clip_fraction", "policy_drift"))]
                for name, run in stale.items()]
        print("\nGRPO with stale rollouts (failure mode: async staleness):")
        print(format_table(rows, ["rollouts", "pass@1", "worst drop", "policy age", "clip fraction", "|log ρ|"]))
    if kl:
        keys = list(next(iter(kl.values())))
        print("\nKL weight, both sides (failure mode: KL mis-tune):")
        print(format_table([[f"β={b:g}", *row.values()] for b, row in kl.items()], ["β", *keys]))
    if skew:
        print("\nThe GRPO policy served differently from how it was trained (state mismatch, state blindness):")
        print(format_table([[name, value] for name, value in skew.items()], ["prompt at serving", "pass@1"]))
    for title, study in (("A weak cold start (sparse reward) and its mitigation:", sparse),
                         ("GRPO from a poor reference that rarely writes the steps (KL anchoring):", poor)):
        if study:
            print("\n" + title)
            print(format_table([[name, r["final"]["pass@1"], r["final"][f"pass@{k}"], unsolved(r["final"]),
                                 history_mean(r, "zero_spread") if "history" in r else "-",
                                 r.get("writes_steps", "-"), r.get("final_kl", "-")] for name, r in study.items()],
                               ["policy", "pass@1", f"pass@{k}", "unsolved", "zero-spread", "writes steps", "KL"]))
    rows = [[name, steps, row["pass@1"], *(row[G] for G in args.group_list)]
            for name, table in tables.items() for steps, row in table.items()]
    print("\nShare of groups with zero reward spread (no policy gradient), by difficulty and G:")
    print(format_table(rows, ["policy", "steps", "pass@1", *(f"G={G}" for G in args.group_list)]))
    print("\n" + format_claims(claims))


def run_benchmark(args: Args, out: Path, initial, tokenizer, device, start: float) -> dict:
    bench = benchmark(initial, tokenizer, args, device)
    print(format_table([[k, v] for k, v in bench.items()], ["benchmark", "value"]))
    write_results(out, args, time.time() - start, bench, [], benchmark=bench)
    return {"metrics": bench, "claims": []}


def without_models(study: dict) -> dict:
    """A study's runs without their policy and critic (what results.json can hold)."""
    return {name: {k: v for k, v in run.items() if k not in ("policy", "critic")} for name, run in study.items()}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = start_lm_run(args)
    print(f"05 group baselines; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), "
          f"device {device}")
    if args.bench:
        return run_benchmark(args, out, initial, tokenizer, device, start)
    held_out = args.task.held_out(args.eval_problems)
    before = final_evaluation(initial, tokenizer, args, held_out, device)
    print(f"cold start: held-out pass@1 {before['pass@1']:.3f}, pass@{args.final_samples} "
          f"{before[f'pass@{args.final_samples}']:.3f}, length {before['length']:.1f}")
    critics = warmed_critics(initial, tokenizer, args, device)
    variance = gradient_variance_study(initial, critics["separate"]["critic"], tokenizer, args, device)
    runs = compare_estimators(initial, tokenizer, args, held_out, device, critics)
    sweep = beta_sweep(initial, tokenizer, args, held_out, device, runs)
    by_lambda = critic_lambda_runs(initial, tokenizer, args, held_out, device, runs, critics) if "ppo" in runs else {}
    truth = critic_study(initial, tokenizer, args, device, critics, runs, by_lambda)
    stale, skew, kl, sparse, poor = {}, {}, {}, {}, {}
    if args.failure_modes:
        stale = staleness_study(initial, tokenizer, args, held_out, device, runs)
        sparse = sparse_reward_study(tokenizer, args, held_out, device)
        poor = poor_reference_study(initial, tokenizer, args, held_out, device, sweep)
        skew = skew_study(runs["grpo"]["policy"], tokenizer, args, held_out, device) if "grpo" in runs else {}
        kl = kl_study(tokenizer, args, held_out, device, sweep)
    tables = zero_spread_study(args, held_out, before, runs)
    grads = None
    if "grpo" in runs:
        grads = gradient_by_spread(runs["grpo"]["policy"], frozen_copy(initial), tokenizer, args, device)
    found = dict(runs=runs, sweep=sweep, before=before, tables=tables, grads=grads, variance=variance,
                 by_lambda=by_lambda, truth=truth, stale=stale, skew=skew, kl=kl, sparse=sparse, poor=poor)

    plot_all(args, out, **found)
    claims = check_claims(args, **found)
    metrics = collect_metrics(args, **found)
    wall = time.time() - start
    serialisable = without_models({key: r for _, key, r in trained(args, runs, sweep, by_lambda)})
    write_results(out, args, wall, metrics, claims, runs=serialisable, zero_spread=tables, cold_start=before,
                  gradient_variance=variance, critic_truth=truth,
                  critic_warmup_losses={kind: c["losses"] for kind, c in critics.items()},
                  staleness=without_models(stale), served=skew, kl_study=kl,
                  sparse_reward=without_models(sparse), poor_reference=without_models(poor),
                  cold_start_info={k: v for k, v in info.items() if k != "sft_losses"})
    report(args, claims, **found)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    run_script(main, Args)
