"""07 — Step-sparse GRPO: a learned step weight instead of evaluating every step.

GRPO copies one advantage A_i onto every token of completion i (05); a process reward model
scores every step instead (06), at one evaluation per step. The article "Fixing GRPO's Credit
Assignment Problem Without Evaluating Every Step" proposes SS-GRPO: a small transformer f(s, P)
reads each step s (one solution line) with the prompt P and outputs a weight w(s) in [0, 1],

  A_i(s) = A_i · w(s)          on the tokens of step s, A_i the GRPO group advantage

trained on the same rollouts every N updates, each step pulled toward its rollout's reward
min-max normalised within the group:

  L = mean_i mean_{s in i} (w(s) - r̂_i)²,   r̂_i = (r_i - min_g r) / (max_g r - min_g r + 1e-8)

Compared on the same task, cold start, budget and seeds: GRPO (05); SS-GRPO as written; SS-GRPO
± (ours, not the article's: A_i · (1 - w(s)) when A_i < 0, so a step that looks like failure
takes the blame); PRM-GRPO, every step scored by the gold step verifier with 06's process
advantages (the per-step evaluation SS-GRPO avoids); and a control, GRPO with its advantages
scaled at each update by SS-GRPO's mean weight there (its step size without its step weights).
Measured: what w(s) learns (its target is the same for every step of a rollout, so it fits
P(success | prompt, step)), the blame the first wrong step keeps, the credit a flawed step of a
right solution gets, the targets of all-equal groups, the article's loss padding, its cost table;
and the article's own numbers against each other (gain share, cost readings, overhead figures,
its estimator's parameter count and FLOPs next to a 7B policy), computed, not typed.

Read beside: ss-grpo-step-sparse-grpo.txt (all), credit-assignment-problem-survey.txt §4.5.
Papers: Shao et al. 2024 (GRPO, process supervision); Lightman et al. 2024.
Figures in runs/07_ss_grpo/: learning_curves.png (held-out pass@1 per method), step_weights.png
(w(s) on right vs failed solutions, the first wrong step's blame, the weights' entropy),
localisation.png (w(s) by position relative to the first wrong step, held-out failed solutions).
With --lengths (e.g. --max-steps 16 --sft-steps 2000 --lengths 2,4,8,16): length_sweep.png,
held-out pass@1 of every method against the chain length, and what RL added to the cold start.
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
from torch import nn
from tqdm import tqdm

from common import (
    Completions,
    LMArgs,
    arg,
    as_list,
    auroc,
    claim,
    completion_texts,
    evaluate,
    first_wrong_step,
    format_claims,
    format_table,
    frozen_copy,
    localisation,
    mean_or_nan,
    moving_average,
    require,
    require_positive,
    run_script,
    sample,
    save_figure,
    start_lm_run,
    step_end_tokens,
    token_logprobs,
    token_step_ids,
    verifier_rewards,
    write_results,
)

METHODS = ("grpo", "ss_grpo", "ss_grpo_signed", "prm_grpo", "grpo_scaled")
NAMES = {"grpo": "GRPO", "ss_grpo": "SS-GRPO", "ss_grpo_signed": "SS-GRPO ±", "prm_grpo": "PRM-GRPO (gold)",
         "grpo_scaled": "GRPO, SS step size"}
# The article's table (7B policy, GSM8K, 8×A100): accuracy %, training hours, inference cost per rollout
ARTICLE = {"grpo": (72.3, 24, 1.0), "prm_grpo": (78.1, 120, 1000.0), "ss_grpo": (77.5, 28, 1.05)}
ARTICLE_SHARE, ARTICLE_COST = 0.97, 0.04  # "97% of the accuracy gain of a full PRM at 4% of the training cost"
# The estimator's overhead as the article's text states it, twice (its table gives a third figure)
ARTICLE_INFERENCE_OVERHEAD, ARTICLE_ROLLOUT_OVERHEAD = 0.01, 0.05  # "<1% of LLM inference", "5% ... rollout generation"
ARTICLE_ESTIMATOR = {"vocab": 32000, "hidden": 128, "layers": 2, "ffn": 2048}  # its code; PyTorch's default ffn
ARTICLE_ESTIMATOR_PARAMS = 1e6  # "the estimator adds ~1M parameters"
ARTICLE_POLICY_PARAMS = 7e9
ARTICLE_ROLLOUT_TOKENS, ARTICLE_PER_STEP_COST = 1000, 1000.0  # "a 1000-token rollout ... multiplies inference by 1000x"
ARTICLE_WEIGHT_MEMORY = 0.10  # "storing step-level weights for all rollouts increases memory by ~10%"
# A rollout buffer's bytes per token (int64 id; float32 log-probs of policy, sampler and reference, and
# the advantage) and per stored step weight (float32)
BUFFER_BYTES_PER_TOKEN, WEIGHT_BYTES = 8 + 4 * 4, 4
MAX_POSITIONS = 1024  # the estimator's learned position embeddings


# ============================================================================================
# The method: the step-value estimator f(s, P) -> w(s), its targets and loss, A_i · w(s)
# ============================================================================================


class StepValueEstimator(nn.Module):
    """The article's small transformer encoder, with two changes: learned position embeddings
    (its code has none, so "12+7=19" and "21+7=91" would look alike) and attention to the
    prompt tokens, pooling only over the step's own tokens. Padding is masked out of both."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, ffn: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(MAX_POSITIONS, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, 1)

    def forward(self, ids: torch.Tensor, attention: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.encoder(self.embed(ids) + self.position(positions), src_key_padding_mask=~attention)
        pool = pool.float().unsqueeze(-1)
        pooled = (x * pool).sum(1) / pool.sum(1)  # mean over the step's real tokens
        return torch.sigmoid(self.head(pooled)).squeeze(-1)  # w = σ(head(pooled)) in [0, 1]

    def step_weights(self, batch: StepBatch) -> torch.Tensor:
        """w(s) for every step (S,): the mean of its windows' weights (the article's chunking)."""
        return segment_mean(self(batch.ids, batch.attention, batch.pool), batch.window_step,
                            len(batch.step_completion))


def segment_mean(values: torch.Tensor, index: torch.Tensor, segments: int) -> torch.Tensor:
    """The mean of values over each segment index[k] = 0..segments-1."""
    sums = torch.zeros(segments, device=values.device, dtype=values.dtype).index_add(0, index, values)
    counts = torch.zeros(segments, device=values.device).index_add(0, index, torch.ones_like(values))
    return sums / counts


def minmax_targets(rewards: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """The article's targets r̂ = (r - min_g) / (max_g - min_g + eps), (N, G). An all-equal
    group gets 0 everywhere, all-right groups included."""
    low, high = rewards.min(1, keepdim=True).values, rewards.max(1, keepdim=True).values
    return (rewards - low) / (high - low + eps)


def estimator_loss(weights: torch.Tensor, batch: StepBatch, targets: torch.Tensor) -> torch.Tensor:
    """The article's objective: per completion, the mean over its steps of (w(s) - r̂_i)²; then
    the mean over completions (every completion counts once, whatever its number of steps)."""
    squared = (weights - targets[batch.step_completion]) ** 2
    return segment_mean(squared, batch.step_completion, batch.num_completions).mean()


def step_advantages(A: torch.Tensor, w: torch.Tensor, signed: bool) -> torch.Tensor:
    """SS-GRPO: A_i(s) = A_i · w(s), (B, S). Signed (ours): A_i · (1 - w(s)) where A_i < 0, so
    in a failed completion the steps the estimator rates low carry the blame."""
    weight = torch.where(A[:, None] < 0, 1 - w, w) if signed else w
    return A[:, None] * weight


# ============================================================================================
# Steps as estimator rows, and step values back on the token grid
# ============================================================================================


@dataclass
class StepBatch:
    """Every step of B completions as estimator rows. Row r = prompt tokens + one window of
    step window_step[r] (pool marks the window's tokens, attention the prompt's too). Flat step
    k belongs to completion step_completion[k] and is its line step_index[k]."""

    ids: torch.Tensor  # (R, L)
    attention: torch.Tensor  # (R, L) bool
    pool: torch.Tensor  # (R, L) bool
    window_step: torch.Tensor  # (R,)
    step_completion: torch.Tensor  # (S,)
    step_index: torch.Tensor  # (S,)
    num_completions: int  # B

    def select(self, keep: torch.Tensor) -> StepBatch:
        """The rows of the completions where keep (B,) is true, re-indexed."""
        step_keep = keep[self.step_completion]
        new_step = step_keep.long().cumsum(0) - 1
        new_completion = keep.long().cumsum(0) - 1
        rows = step_keep[self.window_step]
        width = int((self.attention[rows].sum(1)).max())
        return StepBatch(self.ids[rows, :width], self.attention[rows, :width], self.pool[rows, :width],
                         new_step[self.window_step[rows]], new_completion[self.step_completion[step_keep]],
                         self.step_index[step_keep], int(keep.sum()))

    @property
    def tokens(self) -> int:
        return int(self.attention.sum())


def step_batch(completions: Completions, step_ids: torch.Tensor, end_tokens: torch.Tensor, chunk: int,
               pad_id: int) -> StepBatch:
    """Cut each completion into its steps (common.token_step_ids) and each step into windows of
    at most `chunk` tokens; each window becomes a row prompt + window. A step with no token of its
    own (it begins and ends inside one token, as the empty line of "\n\n") reads the token it
    ends in (common.step_end_tokens), so every line of the text gets a weight."""
    P = completions.prompt_length
    prompts = [row[m.bool()].tolist() for row, m in zip(completions.sequences[:, :P], completions.attention_mask[:, :P])]
    rows, pools, window_step, step_completion, step_index = [], [], [], [], []
    for b, (ids, steps, ends) in enumerate(zip(completions.completion_ids.tolist(), step_ids.tolist(),
                                               end_tokens.tolist())):
        for j in range(max(steps) + 1):
            tokens = [t for t, s in zip(ids, steps) if s == j] or [ids[ends[j]]]
            for start in range(0, len(tokens), chunk):
                window = tokens[start:start + chunk]
                rows.append(prompts[b] + window)
                pools.append([False] * len(prompts[b]) + [True] * len(window))
                window_step.append(len(step_completion))
            step_completion.append(b)
            step_index.append(j)
    width = max(len(r) for r in rows)
    device = completions.sequences.device
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], device=device)
    attention = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows], device=device)
    pool = torch.tensor([p + [False] * (width - len(p)) for p in pools], device=device)
    index = {name: torch.tensor(values, device=device) for name, values in
             (("window_step", window_step), ("step_completion", step_completion), ("step_index", step_index))}
    return StepBatch(ids, attention, pool, num_completions=len(prompts), **index)


def step_grid(values: torch.Tensor, batch: StepBatch) -> torch.Tensor:
    """Flat per-step values (S,) as a (B, max steps) grid; 0 where a completion has no such step."""
    grid = torch.zeros(batch.num_completions, int(batch.step_index.max()) + 1, device=values.device, dtype=values.dtype)
    grid[batch.step_completion, batch.step_index] = values
    return grid


def broadcast_to_tokens(grid: torch.Tensor, step_ids: torch.Tensor) -> torch.Tensor:
    """Token t of completion b gets grid[b, step of t]; masked tokens (step id -1) get 0."""
    return torch.where(step_ids >= 0, grid.gather(1, step_ids.clamp(min=0)), 0.0)


# ============================================================================================
# The baselines: GRPO (05), and process supervision by the gold step verifier (06)
# ============================================================================================


def grpo_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """05's GRPO advantage of each completion, rewards (N prompts, G completions)."""
    # A_i = (r_i - mean_g) / (std_g + eps)
    return (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + eps)


def zero_spread(rewards: torch.Tensor) -> torch.Tensor:
    """05's (N,) mask of the groups whose G rewards are all equal (no group advantage)."""
    return rewards.max(1).values == rewards.min(1).values


def process_advantages(step_rewards: torch.Tensor, rewarded: torch.Tensor, group_size: int,
                       eps: float = 1e-4) -> torch.Tensor:
    """06's process supervision (DeepSeekMath §4.1.3) along the last dim of (B, T): rewards at the
    `rewarded` cells, normalised over a group's rewarded cells, summed at and after each cell."""
    B, T = step_rewards.shape
    r = step_rewards.view(-1, group_size, T)
    m = rewarded.view(-1, group_size, T).float()
    count = m.sum((1, 2), keepdim=True).clamp(min=1)  # a group with no rewarded cell gets 0, not NaN
    mean = (r * m).sum((1, 2), keepdim=True) / count
    std = (((r - mean) ** 2 * m).sum((1, 2), keepdim=True) / (count - 1).clamp(min=1)).sqrt()
    # r̃_k = (r_k - mean_group) / (std_group + eps);  A_t = Σ_{k ≥ t} r̃_k
    normalised = ((r - mean) / (std + eps) * m).view(B, T)
    reward_to_come = rewarded.flip(1).cumsum(1).flip(1) > 0
    return normalised.flip(1).cumsum(1).flip(1) * reward_to_come


def gold_step_rewards(wrong: list[int | None], steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gold step verifier on a (B, max steps) grid: 1 before the first wrong line, 0 from it
    on; and the mask of real steps."""
    S = int(steps.max())
    index = torch.arange(S, device=steps.device)[None]
    first = torch.tensor([S if w is None else w for w in wrong], device=steps.device)[:, None]
    valid = index < steps[:, None]
    return ((index < first) & valid).float(), valid


# ============================================================================================
# The advantages of each method, with what they do (the loop's advantage_fn)
# ============================================================================================


class Credit:
    """The advantage_fn of one method for the loop. Logs per update: seconds spent on credit (estimator training
    and inference, or step verification), evaluator calls and tokens (and those Monte-Carlo step labels
    would read), and what the credit does: w(s) on right / failed completions, the blame on the first
    wrong step of failed completions and on the right steps before it, the credit on a flawed step of a
    right completion (each as a share of GRPO's |A_i|), the share of |advantage| that is negative, weight
    entropy, and the size of the push relative to GRPO's (advantage_scale).

    `scales` (grpo_scaled only): the multiplier of GRPO's advantages at each update, SS-GRPO's
    advantage_scale at that update: GRPO with SS-GRPO's step size but no step weights."""

    def __init__(self, method: str, tokenizer, args: Args, estimator: StepValueEstimator | None, seed: int,
                 scales: list[float] | None = None):
        if (method == "grpo_scaled") != (scales is not None):
            raise ValueError("the step-size control, and only it, takes SS-GRPO's advantage scales")
        self.method, self.tokenizer, self.args, self.estimator, self.scales = method, tokenizer, args, estimator, scales
        self.optimizer = torch.optim.Adam(estimator.parameters(), lr=args.est_lr) if estimator else None
        self.rng = np.random.default_rng(seed)
        self.buffer: list[tuple[StepBatch, torch.Tensor]] = []
        self.log: list[dict] = []

    def __call__(self, completions: Completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        G = self.args.group_size
        step_ids = token_step_ids(self.tokenizer, completions.completion_ids, completions.completion_mask)
        end_tokens = step_end_tokens(self.tokenizer, completions.completion_ids, completions.completion_mask)
        steps = step_ids.max(1).values + 1
        texts = completion_texts(self.tokenizer, completions)
        wrong = [first_wrong_step(p, t) for p, t in zip([p for p in problems for _ in range(G)], texts)]
        A = grpo_advantages(rewards).flatten()
        entry = {"evaluator_calls": 1.0,  # the outcome verifier, once per completion
                 "policy_tokens": float(completions.attention_mask.sum()) / len(texts), "steps": float(steps.float().mean()),
                 "mc_label_tokens": mc_label_tokens(completions, steps, self.args.mc_rollouts)}
        start = time.time()
        if self.method in ("grpo", "grpo_scaled"):
            grid = A[:, None].expand(-1, int(steps.max())) * self.step_scale()
        elif self.method == "prm_grpo":  # (the gold labels `wrong` are string compares: ~free here)
            grid = process_advantages(*gold_step_rewards(wrong, steps), G)
            entry["evaluator_calls"] = float(steps.float().mean())  # one verification per step
            entry["prm_tokens"] = prefix_tokens(completions, end_tokens)
        else:
            batch = step_batch(completions, step_ids, end_tokens, self.args.chunk, self.tokenizer.pad_token_id)
            targets = minmax_targets(rewards)
            entry.update(self.fit(batch, targets.flatten()))
            with torch.no_grad():
                w = step_grid(self.estimator.step_weights(batch), batch)
            grid = step_advantages(A, w, signed=self.method == "ss_grpo_signed")
            entry["estimator_tokens"] = batch.tokens / len(texts)
        entry["credit_s"] = time.time() - start
        if self.estimator is not None:
            entry.update(weight_stats(w, steps, rewards, targets))
        advantages = broadcast_to_tokens(grid, step_ids)
        entry.update(blame_stats(advantages, A, step_ids, wrong, rewards), **article_padding(step_ids),
                     **flawed_step_stats(advantages, A, step_ids, wrong, rewards),
                     advantage_scale=advantage_scale(advantages, A, step_ids))
        self.log.append(entry)
        return advantages

    def step_scale(self) -> float:
        """The control's multiplier at this update: SS-GRPO's advantage scale at the same update of
        the same seed; 1 for GRPO, and where that update had no advantage (its A is 0 here too)."""
        scale = self.scales[len(self.log)] if self.scales is not None else 1.0
        return scale if math.isfinite(scale) else 1.0

    def fit(self, batch: StepBatch, targets: torch.Tensor) -> dict:
        """Store this update's groups; every N updates, retrain on the last N updates' groups."""
        self.buffer = (self.buffer + [(batch, targets)])[-self.args.retrain_every:]
        if (len(self.log)) % self.args.retrain_every:
            return {}
        losses, tokens = [], 0
        groups = batch.num_completions // self.args.group_size
        for _ in range(self.args.est_iters):
            stored, stored_targets = self.buffer[self.rng.integers(len(self.buffer))]
            chosen = self.rng.choice(groups, size=min(self.args.est_groups, groups), replace=False)
            keep = torch.zeros(groups, dtype=torch.bool, device=targets.device)
            keep[torch.as_tensor(chosen, device=targets.device)] = True
            keep = keep.repeat_interleave(self.args.group_size)
            part = stored.select(keep)
            tokens += part.tokens
            loss = estimator_loss(self.estimator.step_weights(part), part, stored_targets[keep])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        return {"estimator_loss": float(np.mean(losses)), "estimator_train_tokens": tokens / batch.num_completions}


def weight_entropy(grid: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """Per completion with ≥ 2 steps: the entropy of w(s)/Σw over its steps, divided by
    log(steps) (1 = uniform: the weights say nothing about which step mattered)."""
    valid = torch.arange(grid.shape[1], device=grid.device)[None] < steps[:, None]
    p = torch.where(valid, grid, 0.0) / torch.where(valid, grid, 0.0).sum(1, keepdim=True).clamp(min=1e-12)
    h = -(p * p.clamp(min=1e-12).log()).sum(1)
    several = steps >= 2
    return h[several] / steps[several].float().log()


def weight_stats(w: torch.Tensor, steps: torch.Tensor, rewards: torch.Tensor, targets: torch.Tensor) -> dict:
    """Mean w(s) over the steps of right and of failed completions, the weights' normalised
    entropy, and the share of right completions whose target is 0 (all-right groups)."""
    valid = torch.arange(w.shape[1], device=w.device)[None] < steps[:, None]
    right = rewards.flatten().bool()[:, None]
    return {"w_right": mean_or_nan(w[valid & right].tolist()), "w_failed": mean_or_nan(w[valid & ~right].tolist()),
            "w_entropy": mean_or_nan(weight_entropy(w, steps).tolist()),
            "right_target_zero": mean_or_nan((targets[rewards > 0] == 0).float().tolist())}


def first_wrong_credit(advantages: torch.Tensor, A: torch.Tensor, step_ids: torch.Tensor,
                       wrong: list[int | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per completion (B,): the mean advantage on the tokens of its first wrong step, and on the
    tokens of the steps before it, each divided by A_i (1 = GRPO's credit); NaN where the
    completion has no such tokens or A_i = 0."""
    first = torch.tensor([-1 if w is None else w for w in wrong], device=step_ids.device)[:, None]
    on_wrong = (step_ids == first) & (first >= 0)
    before_wrong = (step_ids >= 0) & (step_ids < first)

    def share(where: torch.Tensor) -> torch.Tensor:
        tokens = where.sum(1)
        mean = torch.where(where, advantages, 0.0).sum(1) / tokens.clamp(min=1)
        return torch.where((tokens > 0) & (A != 0), mean / torch.where(A != 0, A, 1.0), math.nan)

    return share(on_wrong), share(before_wrong)


def blame_stats(advantages: torch.Tensor, A: torch.Tensor, step_ids: torch.Tensor, wrong: list[int | None],
                rewards: torch.Tensor) -> dict:
    """On failed completions of mixed groups (A_i < 0): the blame on the first wrong step and on
    the right steps before that slip, each as a share of GRPO's A_i (1 = GRPO's, 0 = none); and
    the share of Σ|advantage| over all tokens that is negative (GRPO: about half in mixed groups)."""
    mixed = ~zero_spread(rewards).repeat_interleave(rewards.shape[1])
    on_wrong, before_wrong = first_wrong_credit(advantages, A, step_ids, wrong)
    failed = mixed & (A < 0)
    total = advantages.abs().sum()
    return {"wrong_step_blame": mean_or_nan(on_wrong[failed].tolist()),
            "right_steps_blame": mean_or_nan(before_wrong[failed].tolist()),
            "negative_share": float(advantages.clamp(max=0).abs().sum() / total) if total > 0 else math.nan}


def flawed_step_stats(advantages: torch.Tensor, A: torch.Tensor, step_ids: torch.Tensor, wrong: list[int | None],
                      rewards: torch.Tensor) -> dict:
    """Right completions that hold a wrong line (a flawed step that still reaches the answer), in
    mixed groups (A_i > 0): their share of those groups' right completions, and the credit on the
    flawed step and on the right steps before it, each as a share of GRPO's A_i."""
    on_wrong, before_wrong = first_wrong_credit(advantages, A, step_ids, wrong)
    rewarded = ~zero_spread(rewards).repeat_interleave(rewards.shape[1]) & (A > 0)
    flawed = rewarded & on_wrong.isfinite()
    return {"flawed_right_share": float(flawed.sum() / rewarded.sum()) if rewarded.any() else math.nan,
            "flawed_step_credit": mean_or_nan(on_wrong[flawed].tolist()),
            "flawed_right_steps_credit": mean_or_nan(before_wrong[flawed].tolist())}


def advantage_scale(advantages: torch.Tensor, A: torch.Tensor, step_ids: torch.Tensor) -> float:
    """The size of this update's policy-gradient push relative to GRPO's on the same completions:
    Σ_i mean_t |a_it| / Σ_i mean_t |A_i| over each completion's step tokens (the loss averages over a
    completion's tokens). SS-GRPO: the token mean of w(s), weighted by |A_i|. NaN: no advantage."""
    tokens = step_ids >= 0
    count = tokens.sum(1).clamp(min=1)
    flat = (A.abs()[:, None] * tokens).sum(1) / count
    total = flat.sum()
    return float((advantages.abs() * tokens).sum(1).div(count).sum() / total) if total > 0 else math.nan


def mc_label_tokens(completions: Completions, steps: torch.Tensor, rollouts: int) -> float:
    """Tokens per completion that Monte-Carlo step labels (06, Math-Shepherd) would read: `rollouts`
    continuations from the prefix of every step but the last (the verifier labels the last), each
    as long as the completion it continues (the prefix read, the rest generated)."""
    lengths = completions.attention_mask.sum(1)
    return float((rollouts * (steps - 1) * lengths).sum()) / len(lengths)


def article_padding(step_ids: torch.Tensor) -> dict:
    """The article's ss_grpo_loss lays one completion out as (steps, longest step) and takes
    .mean() over all of it, padding included: the share of those cells that are padding, and so
    the factor by which every real token's gradient shrinks (it differs between completions)."""
    steps = step_ids.max(1).values + 1
    lengths = torch.zeros(len(step_ids), int(steps.max()), dtype=torch.long, device=step_ids.device)
    lengths.scatter_add_(1, step_ids.clamp(min=0), (step_ids >= 0).long())  # tokens per (completion, step)
    shares = 1 - lengths.sum(1).double() / (steps * lengths.max(1).values).double()
    return {"padding_share": float(shares.mean()), "padding_share_max": float(shares.max())}


def prefix_tokens(completions: Completions, end_tokens: torch.Tensor) -> float:
    """Tokens a per-step evaluator reads per completion when it scores each step prefix
    (prompt + completion up to that step's end token) in its own forward pass."""
    prompt = completions.attention_mask[:, :completions.prompt_length].sum(1)
    lengths = torch.where(end_tokens >= 0, end_tokens + 1 + prompt[:, None], 0)
    return float(lengths.sum()) / len(end_tokens)


# ============================================================================================
# The RL loop: 05's, restated compactly (05_grpo_rloo.py teaches it in full)
# ============================================================================================


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """05's per-token KL(π || π_ref) estimate: k3 = r - log r - 1, r = π_ref/π."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def policy_gradient_step(policy, optimizer, completions: Completions, advantages: torch.Tensor,
                         ref_logp: torch.Tensor, beta: float, max_grad_norm: float) -> dict:
    """05's step with one optimiser step per batch (μ = 1): π_old is π_θ itself, so the ratio is 1,
    the clip never acts, and PPO's surrogate has the gradient of

      loss = mean_i mean_{t in i} [ -A_it log π_θ(y_it) + β k3(π_θ, π_ref)_it ]

    (05's per-sequence normalisation). Returns the sampling policy's KL to the reference and
    entropy per token, and the grad norm before clipping."""
    mask = completions.completion_mask
    logp, entropy = token_logprobs(policy, completions.sequences, completions.attention_mask,
                                   completions.prompt_length, with_entropy=True)
    per_token = -advantages * logp
    if beta > 0:
        per_token = per_token + beta * kl_k3(logp, ref_logp)
    loss = (torch.where(mask, per_token, 0.0).sum(1) / mask.float().sum(1).clamp(min=1)).mean()
    optimizer.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()
    tokens = mask.sum().clamp(min=1)  # an all-padding batch has no token: statistics 0, not NaN
    return {"kl": float(torch.where(mask, kl_k3(logp.detach(), ref_logp), 0.0).sum() / tokens),
            "entropy": float(torch.where(mask, entropy.detach(), 0.0).sum() / tokens), "grad_norm": grad_norm.item()}


def train(policy, reference, tokenizer, args: Args, advantage_fn, held_out: list, device, desc: str = "RL") -> dict:
    """05's RL loop with the advantages left to `advantage_fn(completions, rewards (N, G),
    problems) -> (B, T)`: each update, G completions of `prompts` fresh training problems (never
    a held-out one), scored by the verifier, one `policy_gradient_step`; every `eval_every`
    updates, held-out pass@1. Returns {"history": per update, "evals": [...]}."""
    rng = np.random.default_rng(args.seed)
    generator = torch.Generator(device).manual_seed(args.seed)
    eval_generator = torch.Generator(device).manual_seed(args.seed + 1)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / args.warmup))
    exclude = frozenset(p.prompt for p in args.task.held_out())
    history, evals = [], []

    def held_out_eval(step: int) -> None:
        result = evaluate(policy, tokenizer, held_out, args.eval_samples, args.max_new_tokens, eval_generator, device)
        evals.append({"step": step, "samples": step * args.prompts * args.group_size,
                      "pass@1": result["pass@1"], "length": result["length"]})

    for step in tqdm(range(args.rl_steps), desc=desc, leave=False):
        if step % args.eval_every == 0:
            held_out_eval(step)
        start = time.time()
        problems = args.task.sample(args.prompts, rng, exclude=exclude)
        repeated = [p for p in problems for _ in range(args.group_size)]
        completions, texts = sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens,
                                    generator, device)
        rewards = verifier_rewards(repeated, texts, completions.truncated).to(device).view(args.prompts, args.group_size)
        generated = time.time()
        advantages = advantage_fn(completions, rewards, problems)
        with torch.no_grad():
            ref_logp, _ = token_logprobs(reference, completions.sequences, completions.attention_mask,
                                         completions.prompt_length)
        stats = policy_gradient_step(policy, optimizer, completions, advantages, ref_logp, args.beta,
                                     args.max_grad_norm)
        schedule.step()
        history.append({"reward": float(rewards.mean()), "length": float(completions.lengths.float().mean()),
                        **stats, "generate_s": generated - start, "update_s": time.time() - generated})
    held_out_eval(args.rl_steps)
    return {"history": history, "evals": evals}


# ============================================================================================
# Config
# ============================================================================================


@dataclass
class Args(LMArgs):
    out: str = arg("runs/07_ss_grpo", "output folder for figures and results.json")
    methods: str = arg(",".join(METHODS), "methods to compare, comma-separated", METHODS, item=str)
    rl_steps: int = arg(80, "RL: policy updates")
    prompts: int = arg(16, "RL: prompts per update")
    group_size: int = arg(8, "RL: completions per prompt, K in the article, G in GRPO (TRL: num_generations)")
    lr: float = arg(1e-4, "RL: AdamW learning rate (TRL: learning_rate)")
    warmup: int = arg(20, "RL: updates of linear learning-rate warmup")
    beta: float = arg(0.04, "RL: weight β of the k3 KL penalty to the cold-start reference (TRL: beta)")
    max_grad_norm: float = arg(1.0, "RL: gradient clipping (TRL: max_grad_norm)")
    eval_every: int = arg(20, "RL: updates between held-out evaluations")
    est_layers: int = arg(2, "step-value estimator: transformer layers (article: 2)")
    est_hidden: int = arg(128, "step-value estimator: width (article: 128)")
    est_heads: int = arg(4, "step-value estimator: attention heads (article: 4)")
    est_ffn: int = arg(512, "step-value estimator: feed-forward width (the article's code leaves "
                            "PyTorch's 2048: 1.19M parameters in its layers; 4x width here for CPU time)")
    est_lr: float = arg(1e-3, "step-value estimator: Adam learning rate")
    retrain_every: int = arg(5, "N: policy updates between estimator retrainings")
    est_iters: int = arg(10, "Adam steps per retraining, each on groups of one stored update")
    est_groups: int = arg(4, "groups (prompts) per estimator minibatch")
    chunk: int = arg(512, "steps longer than this many tokens are cut into windows whose weights "
                          "are averaged (article: 512)")
    repeats: int = arg(2, "seeds per method: --seed, --seed + 1, ...")
    final_samples: int = arg(16, "samples per held-out problem after RL (pass@1)")
    probe_samples: int = arg(4, "samples per held-out problem for the credit-localisation probe")
    lengths: str = arg("", "flat against step credit as chains grow: chain lengths (e.g. 2,4,8,16), each method "
                       "trained and evaluated on problems of exactly that many steps, from one cold start that "
                       "knows them all (--max-steps 16); this sweep replaces the default study", item=int, empty=True)
    target_gain: float = arg(0.1, "length sweep: samples until held-out pass@1 first reaches the cold start's + this")
    mc_rollouts: int = arg(8, "cost comparison: rollouts per step prefix of Monte-Carlo step labels (06's N = 8)")

    SMOKE = dict(LMArgs.SMOKE_LM, rl_steps=2, prompts=2, group_size=2, eval_every=1, est_layers=1, est_hidden=16, est_heads=2, est_ffn=32, est_iters=2,
                 retrain_every=1, est_groups=1, repeats=1, final_samples=2, probe_samples=2)

    def __post_init__(self):
        # K = group size: checked first, with the reason that matters here
        require(self.group_size >= 2, f"--group-size (K) must be at least 2: SS-GRPO normalises rewards "
                f"and estimator targets within the group of K completions, got {self.group_size}")
        super().__post_init__()
        require_positive(self, "rl_steps", "prompts", "lr", "warmup", "max_grad_norm", "eval_every", "est_layers", "est_hidden", "est_heads", "est_ffn", "est_lr", "retrain_every",
                         "est_iters", "est_groups", "chunk", "repeats", "final_samples", "probe_samples", "mc_rollouts")
        require(self.beta >= 0, "--beta must be non-negative")
        require(self.est_hidden % self.est_heads == 0, "--est-hidden must be a multiple of --est-heads")
        require(self.chunk <= MAX_POSITIONS // 2, f"--chunk must be at most {MAX_POSITIONS // 2}")
        require(self.method_list and all(m in METHODS for m in self.method_list),
                f"--methods must be among {','.join(METHODS)}")
        if "grpo_scaled" in self.method_list:  # the control takes its step sizes from SS-GRPO's run of its seed
            require("ss_grpo" in self.method_list[:self.method_list.index("grpo_scaled")],
                    "--methods: grpo_scaled needs ss_grpo before it (it uses SS-GRPO's step sizes)")
        require(all(self.min_steps <= n <= self.max_steps for n in self.length_list),
                "--lengths must be within --min-steps..--max-steps (the cold start learns those lengths)")
        require(self.target_gain > 0, "--target-gain must be positive")

    @property
    def method_list(self) -> list[str]:
        return as_list(self.methods, str)

    @property
    def length_list(self) -> list[int]:
        return as_list(self.lengths, int)

    @property
    def seeds(self) -> list[int]:
        return [self.seed + i for i in range(self.repeats)]


# ============================================================================================
# Studies: each method over seeds, the held-out probes of w(s), the costs
# ============================================================================================


def make_estimator(tokenizer, args: Args, device) -> StepValueEstimator:
    return StepValueEstimator(len(tokenizer), args.est_hidden, args.est_layers, args.est_heads, args.est_ffn).to(device)


def parameters(model: nn.Module, skip: tuple[str, ...] = ("embed", "position", "embed_tokens")) -> int:
    """Parameters that cost FLOPs per token (embeddings are look-ups)."""
    return sum(p.numel() for n, p in model.named_parameters() if not any(s in n for s in skip))


def run_method(initial, tokenizer, args: Args, method: str, held_out, device,
               scales: list[float] | None = None) -> dict:
    """Train a copy of the cold start with one method; evaluate it on the held-out set."""
    policy, reference = copy.deepcopy(initial), frozen_copy(initial)
    torch.manual_seed(args.seed)
    estimator = make_estimator(tokenizer, args, device) if method.startswith("ss_") else None
    credit = Credit(method, tokenizer, args, estimator, args.seed, scales)
    start = time.time()
    result = train(policy, reference, tokenizer, args, credit, held_out, device, desc=NAMES[method])
    result["wall_clock_s"] = time.time() - start
    result["final"] = evaluate(policy, tokenizer, held_out, args.final_samples, args.max_new_tokens,
                               torch.Generator(device).manual_seed(args.seed + 2), device)
    result["credit"], result["seed"] = credit.log, args.seed
    if estimator is not None:
        result["probe"] = probe_weights(policy, estimator, tokenizer, held_out, args, device)
    print(f"  {NAMES[method]:16s} held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> "
          f"{result['final']['pass@1']:.3f}, {result['wall_clock_s']:.0f} s")
    return result


def compare_methods(initial, tokenizer, args: Args, held_out: list, device) -> dict:
    """Every method from the cold start, for each seed --seed, --seed + 1, ...: {method: [runs]}.
    The step-size control gets the advantage scale of each update of SS-GRPO's run of its seed."""
    runs = {m: [] for m in args.method_list}
    for seed in args.seeds:
        for m in args.method_list:
            scales = [e["advantage_scale"] for e in runs["ss_grpo"][-1]["credit"]] if m == "grpo_scaled" else None
            runs[m].append(run_method(initial, tokenizer, dataclasses.replace(args, seed=seed), m, held_out, device,
                                      scales))
    return runs


def probe_weights(policy, estimator: StepValueEstimator, tokenizer, held_out: list, args: Args, device) -> dict:
    """Sample held-out solutions, score every step with w(s), compare with the gold labels:
    AUROC of w for "the solution is right" (what the target teaches), AUROC of w for "this
    step is right" within failed solutions, and 06's localisation (AUROC and top-1 of -w for
    "this is the first wrong step", failed solutions with ≥ 2 steps); w by offset to that step."""
    problems = [p for p in held_out for _ in range(args.probe_samples)]
    completions, texts = sample(policy, tokenizer, [p.prompt for p in problems], args.max_new_tokens,
                                torch.Generator(device).manual_seed(args.seed + 3), device)
    right = verifier_rewards(problems, texts, completions.truncated).bool().tolist()
    step_ids = token_step_ids(tokenizer, completions.completion_ids, completions.completion_mask)
    end_tokens = step_end_tokens(tokenizer, completions.completion_ids, completions.completion_mask)
    batch = step_batch(completions, step_ids, end_tokens, args.chunk, tokenizer.pad_token_id)
    with torch.no_grad():
        w = step_grid(estimator.step_weights(batch), batch).cpu().numpy()
    steps = (step_ids.max(1).values + 1).tolist()
    by_outcome = {True: [], False: []}
    good, bad, credits, wrongs, offsets = [], [], [], [], {}
    for b, (problem, text) in enumerate(zip(problems, texts)):
        weights = w[b, :steps[b]]
        by_outcome[right[b]].extend(weights)
        wrong = first_wrong_step(problem, text)
        if right[b] or wrong is None or wrong >= steps[b]:
            continue
        good.extend(weights[:wrong])
        bad.extend(weights[wrong:])
        for k, value in enumerate(weights):
            offsets.setdefault(k - wrong, []).append(value)
        if steps[b] >= 2:
            credits.append(weights)
            wrongs.append(wrong)
    located = localisation(credits, wrongs)
    return {"auroc_outcome": auroc(np.array(by_outcome[True]), np.array(by_outcome[False])),
            "auroc_step_right_in_failed": auroc(np.array(good), np.array(bad)),
            "localisation_auroc": located["auroc"],
            "localisation_top1": located["top1"], "chance_top1": mean_or_nan([1 / n for n in steps if n >= 2]),
            "failed_solutions": len(credits), "w_right_solutions": mean_or_nan(by_outcome[True]),
            "w_failed_solutions": mean_or_nan(by_outcome[False]),
            "w_by_offset": {k: float(np.mean(v)) for k, v in sorted(offsets.items()) if len(v) >= 5}}


def cost_row(run: dict, grpo: dict, policy_params: int, est_params: int) -> dict:
    """Training seconds (and relative to GRPO); inference FLOPs per completion relative to
    GRPO's (2·params per token: the policy on prompt + completion, plus the estimator on its
    rows, plus, for PRM-GRPO, a policy-sized PRM run on every step prefix as the article prices
    per-step evaluation); training FLOPs per completion relative to GRPO's on the same rollouts
    (the policy generates, the reference scores and the policy trains: 2 + 2 + 6 = 10·params per
    token; the estimator adds 2· per token it scores and 6· per token it trains on), and the same
    for a PRM labelled by Monte Carlo (the labels' rollouts only: its own training is left out);
    evaluator calls per completion; the credit's share of an update."""
    log = run["credit"]

    def mean(key: str) -> float:
        return float(np.mean([e.get(key, 0.0) for e in log]))

    generation = policy_params * mean("policy_tokens")  # FLOPs / 2
    extra = est_params * mean("estimator_tokens") + policy_params * mean("prm_tokens")
    update = 5 * generation  # 10·params per token
    estimator_training = 3 * est_params * mean("estimator_train_tokens")  # 6·params per token
    step_s = np.mean([h["generate_s"] + h["update_s"] for h in run["history"]])
    return {"train_wall_clock_s": run["wall_clock_s"], "train_wall_clock_vs_grpo": run["wall_clock_s"] / grpo["wall_clock_s"],
            "inference_flops_vs_grpo": (generation + extra) / generation,
            "train_flops_vs_grpo": (update + extra + estimator_training) / update,
            "mc_prm_train_flops_vs_grpo": (update + policy_params * mean("mc_label_tokens")) / update,
            "estimator_tokens_per_policy_token": mean("estimator_tokens") / mean("policy_tokens"),
            "tokens_per_rollout": mean("policy_tokens"), "steps_per_rollout": mean("steps"),
            "evaluator_calls": mean("evaluator_calls"), "credit_wall_clock_share": mean("credit_s") / step_s}


def run_metrics(run: dict, grpo: dict, policy_params: int, est_params: int) -> dict:
    """The flat numbers of one run: held-out pass@1, costs, credit diagnostics over the second
    half of training, and the held-out probes of w(s)."""
    late = run["credit"][len(run["credit"]) // 2:]
    metrics = {"pass@1": run["final"]["pass@1"], **cost_row(run, grpo, policy_params, est_params)}
    estimator_keys = ("w_right", "w_failed", "w_entropy", "right_target_zero") if "probe" in run else ()
    keys = ("wrong_step_blame", "right_steps_blame", "negative_share", "padding_share", "flawed_right_share",
            "flawed_step_credit", "flawed_right_steps_credit", "advantage_scale") + estimator_keys
    metrics.update({key: mean_or_nan([e.get(key, math.nan) for e in late]) for key in keys})
    metrics.update({k: v for k, v in run.get("probe", {}).items() if k != "w_by_offset"})
    return metrics


def seed_means(per_seed: list[dict]) -> dict:
    """The mean over seeds of every metric (NaN-free values only)."""
    return {k: mean_or_nan([m[k] for m in per_seed]) for k in per_seed[0]}


def summarise(initial, tokenizer, args: Args, runs: dict) -> tuple[dict, dict, dict]:
    """The numbers of each run (per seed) and their mean over seeds, and the parameter counts."""
    sizes = {"policy_params": parameters(initial), "estimator_params": parameters(make_estimator(tokenizer, args, "cpu"))}
    per_seed = {m: [run_metrics(r, runs.get("grpo", rs)[i], sizes["policy_params"], sizes["estimator_params"])
                    for i, r in enumerate(rs)] for m, rs in runs.items()}
    return per_seed, {m: seed_means(v) for m, v in per_seed.items()}, sizes


def at_length(args: Args, steps: int) -> Args:
    """The same run on problems of exactly `steps` operations, with the budget their solutions
    need (its training and held-out problems are drawn at that length)."""
    return dataclasses.replace(args, min_steps=steps, max_steps=steps, max_new_tokens=0, lengths="")


def samples_to_target(run: dict, target: float) -> float:
    """Completions sampled before held-out pass@1 first reached `target` (NaN: never)."""
    return next((e["samples"] for e in run["evals"] if e["pass@1"] >= target), math.nan)


def length_sweep(initial, tokenizer, args: Args, device) -> dict:
    """Every method at each chain length of --lengths, on the same cold start, seeds and budget:
    {steps: {"before": cold-start pass@1, "target": pass@1 to reach, "per_seed": run metrics,
    "summary": their means, "to_target": {method: samples per seed}, "curves": {method: evals}}}."""
    sweep = {}
    for steps in args.length_list:
        at = at_length(args, steps)
        held_out = at.task.held_out(at.eval_problems)
        before = evaluate(initial, tokenizer, held_out, at.final_samples, at.max_new_tokens,
                          torch.Generator(device).manual_seed(at.seed + 2), device)["pass@1"]
        print(f"{steps} steps (budget {at.max_new_tokens} tokens): cold start pass@1 {before:.3f}")
        runs = compare_methods(initial, tokenizer, at, held_out, device)
        per_seed, summary, _ = summarise(initial, tokenizer, at, runs)
        target = before + args.target_gain
        sweep[steps] = {"before": before, "target": target, "per_seed": per_seed, "summary": summary,
                        "to_target": {m: [samples_to_target(r, target) for r in rs] for m, rs in runs.items()},
                        "curves": {m: [r["evals"] for r in rs] for m, rs in runs.items()}}
    return sweep


# ============================================================================================
# Figures
# ============================================================================================


def seed_curve(runs: list[dict], key: str) -> np.ndarray:
    """A credit diagnostic per update, averaged over seeds (NaN-aware), then smoothed."""
    table = np.array([[e.get(key, math.nan) for e in run["credit"]] for run in runs], dtype=float)
    finite = np.isfinite(table)
    mean = np.where(finite.any(0), np.nansum(table, 0) / np.maximum(finite.sum(0), 1), np.nan)
    return moving_average(mean, 5)


def plot_learning_curves(runs: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, seeds in runs.items():
        steps = [e["step"] for e in seeds[0]["evals"]]
        ax.plot(steps, np.mean([[e["pass@1"] for e in r["evals"]] for r in seeds], 0), "o-", label=NAMES[method])
    ax.set(xlabel="policy update", ylabel=f"held-out pass@1 (mean of {len(seeds)} seeds)",
           title="Same prompts, budget and seeds")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_step_weights(runs: dict, path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for method, seeds in runs.items():
        axes[1].plot(seed_curve(seeds, "wrong_step_blame"), label=NAMES[method])
        if method.startswith("ss_"):
            for key, style in (("w_right", "-"), ("w_failed", "--")):
                axes[0].plot(seed_curve(seeds, key), style, label=f"{NAMES[method]}: {key}")
            axes[2].plot(seed_curve(seeds, "w_entropy"), label=NAMES[method])
    axes[0].set(title="w(s) on steps of right / failed completions", xlabel="update")
    axes[1].set(title="blame on the first wrong step of a failed completion\n(share of GRPO's |A_i|)",
                xlabel="update")
    axes[2].set(title="entropy of w(s)/Σw over a completion's steps\n(1 = uniform)", xlabel="update")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    save_figure(fig, path)


def plot_localisation(runs: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, seeds in runs.items():
        if "probe" in seeds[0]:
            offsets = seeds[0]["probe"]["w_by_offset"]
            ax.plot(list(offsets), list(offsets.values()), "o-", label=f"{NAMES[method]} (seed {seeds[0]['seed']})")
    ax.axvline(0, color="gray", linestyle="--")
    ax.set(xlabel="step position relative to the first wrong step (0)", ylabel="mean w(s)",
           title="Held-out failed solutions: does w(s) drop at the mistake?")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_length_sweep(sweep: dict, path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    lengths = sorted(sweep)
    methods = list(sweep[lengths[0]]["summary"])
    for method in methods:
        finals = np.array([[r["pass@1"] for r in sweep[n]["per_seed"][method]] for n in lengths])
        axes[0].errorbar(lengths, finals.mean(1), yerr=[finals.mean(1) - finals.min(1), finals.max(1) - finals.mean(1)],
                         marker="o", capsize=3, label=NAMES[method])
        gains = finals.mean(1) - np.array([sweep[n]["before"] for n in lengths])
        axes[1].plot(lengths, gains, "o-", label=NAMES[method])
    axes[0].plot(lengths, [sweep[n]["before"] for n in lengths], "k--", label="cold start")
    axes[0].set(ylabel="held-out pass@1 after equal samples (seed min-max)", title="pass@1 vs chain length")
    axes[1].set(ylabel="gain over the cold start", title="what RL added, by chain length")
    for ax in axes:
        ax.set(xlabel="operations in the chain")
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    save_figure(fig, path)


def plot_all(out, runs: dict) -> None:
    plot_learning_curves(runs, out / "learning_curves.png")
    plot_step_weights(runs, out / "step_weights.png")
    plot_localisation(runs, out / "localisation.png")


# ============================================================================================
# Claims and report
# ============================================================================================


def table_gain_share(table: dict) -> float:
    """SS-GRPO's share of the PRM's accuracy gain over GRPO in the article's table."""
    # (acc_SS - acc_GRPO) / (acc_PRM - acc_GRPO)
    return (table["ss_grpo"][0] - table["grpo"][0]) / (table["prm_grpo"][0] - table["grpo"][0])


def table_cost_readings(table: dict) -> tuple[float, float]:
    """SS-GRPO's training hours as a share of the PRM's in the article's table: of the total, and
    of the hours each spends beyond GRPO's."""
    ss_hours, prm_hours, grpo_hours = (table[m][1] for m in ("ss_grpo", "prm_grpo", "grpo"))
    return ss_hours / prm_hours, (ss_hours - grpo_hours) / (prm_hours - grpo_hours)


def encoder_parameters(vocab: int, hidden: int, layers: int, ffn: int, positions: int = 0) -> dict:
    """Parameters of a step-value estimator: token (and position) embeddings, PyTorch's
    TransformerEncoderLayer (attention in/out projections with biases, two feed-forward linears,
    two LayerNorms) per layer, and the linear head to one number."""
    d = hidden
    # attention 4d² + 4d, feed-forward 2·d·ffn + ffn + d, two LayerNorms 4d
    per_layer = 4 * d * d + 4 * d + 2 * d * ffn + ffn + d + 4 * d
    counts = {"embedding": (vocab + positions) * d, "layers": layers * per_layer, "head": d + 1}
    return counts | {"total": sum(counts.values())}


def estimator_flops_share(estimator_params: float, policy_params: float, tokens_per_policy_token: float) -> float:
    """The estimator's inference FLOPs as a share of the policy's generation FLOPs, 2·params per
    token each (attention left out): it reads tokens_per_policy_token tokens per policy token."""
    return estimator_params * tokens_per_policy_token / policy_params


def prefix_rescoring_cost(tokens: int) -> float:
    """Scoring every prefix of a T-token rollout in its own forward pass reads Σ_{t=1..T} t
    tokens; relative to one pass over the rollout (a causal PRM with a head on every token): (T + 1) / 2."""
    return tokens * (tokens + 1) / 2 / tokens


def weight_memory_share(steps: float, tokens: float) -> float:
    """Bytes of the stored step weights (one float32 per step) relative to the rollout buffer's
    per-token bytes (BUFFER_BYTES_PER_TOKEN), for a rollout of `steps` steps and `tokens` tokens."""
    return WEIGHT_BYTES * steps / (BUFFER_BYTES_PER_TOKEN * tokens)


def article_numbers(summary: dict) -> dict:
    """The article's own numbers checked against each other, and its estimator at its own sizes;
    the FLOPs share uses the estimator's measured tokens per policy token where SS-GRPO ran (it
    re-reads the prompt with each step), else 1 (steps only, as the article's code reads them)."""
    share = table_gain_share(ARTICLE)
    total, incremental = table_cost_readings(ARTICLE)
    size = encoder_parameters(**ARTICLE_ESTIMATOR)
    reads = summary["ss_grpo"]["estimator_tokens_per_policy_token"] if "ss_grpo" in summary else 1.0
    rollouts = summary.get("grpo") or next(iter(summary.values()), None)  # steps and tokens of a rollout here
    memory = {} if rollouts is None else {
        "rollout_steps": rollouts["steps_per_rollout"], "rollout_tokens": rollouts["tokens_per_rollout"],
        "article_weight_memory_share": weight_memory_share(rollouts["steps_per_rollout"], rollouts["tokens_per_rollout"])}
    return {"article_gain_share": share, "article_accuracy_ratio": ARTICLE["ss_grpo"][0] / ARTICLE["prm_grpo"][0],
            "article_cost_share_total": total, "article_cost_share_incremental": incremental,
            "article_training_hours_vs_grpo": ARTICLE["ss_grpo"][1] / ARTICLE["grpo"][1],
            **{f"article_estimator_params_{k}": v for k, v in size.items()},
            "article_estimator_tokens_per_policy_token": reads,
            "article_estimator_flops_share_7b": estimator_flops_share(size["layers"] + size["head"],
                                                                      ARTICLE_POLICY_PARAMS, reads),
            "article_prefix_rescoring_cost": prefix_rescoring_cost(ARTICLE_ROLLOUT_TOKENS), **memory}


def article_claims(n: dict, summary: dict) -> list[dict]:
    """The article's numbers against each other (n = article_numbers), no training involved."""
    table = ARTICLE
    hours = "/".join(f"{table[m][1]:g}" for m in ("grpo", "prm_grpo", "ss_grpo"))
    table_overhead = table["ss_grpo"][2] - table["grpo"][2]
    figures = {"<1% of LLM inference (Engineering decisions)": ARTICLE_INFERENCE_OVERHEAD,
               "5% of rollout generation (Performance)": ARTICLE_ROLLOUT_OVERHEAD,
               f"{table['ss_grpo'][2]:g}x inference per rollout (its table)": table_overhead}
    overheads = "; ".join(f"{k}: {v:.0%}" for k, v in figures.items())
    prm = summary.get("prm_grpo")
    ours = (f"; our PRM-GRPO run reads {prm['inference_flops_vs_grpo'] - 1:.2f}x the policy's tokens in step "
            f"prefixes ({prm['evaluator_calls']:.2f} steps per rollout)") if prm else ""
    return [
        claim("SS-GRPO article, Performance", f"SS-GRPO achieves {ARTICLE_SHARE:.0%} of the accuracy gain of a full "
              "PRM (its table: GRPO 72.3%, PRM 78.1%, SS-GRPO 77.5%)",
              f"its table gives {n['article_gain_share']:.1%} of the gain ({table['ss_grpo'][0] - table['grpo'][0]:.1f} "
              f"of {table['prm_grpo'][0] - table['grpo'][0]:.1f} points); the other reading, SS-GRPO's accuracy over "
              f"the PRM's, is {n['article_accuracy_ratio']:.1%}",
              round(n["article_gain_share"], 2) >= ARTICLE_SHARE),
        claim("SS-GRPO article, Performance", f"...at {ARTICLE_COST:.0%} of the PRM's training cost, read as total "
              f"training hours (its table: {hours} h for GRPO/PRM/SS-GRPO)",
              f"{table['ss_grpo'][1]:g}/{table['prm_grpo'][1]:g} h = {n['article_cost_share_total']:.1%}",
              round(n["article_cost_share_total"], 2) <= ARTICLE_COST),
        claim("SS-GRPO article, Performance", f"...at {ARTICLE_COST:.0%} of the PRM's training cost, read as the "
              "hours each spends beyond GRPO's",
              f"({table['ss_grpo'][1]:g} - {table['grpo'][1]:g})/({table['prm_grpo'][1]:g} - {table['grpo'][1]:g}) h "
              f"= {n['article_cost_share_incremental']:.1%}: the only reading that gives {ARTICLE_COST:.0%}",
              round(n["article_cost_share_incremental"], 2) <= ARTICLE_COST),
        claim("SS-GRPO article, Engineering decisions", "the tiny estimator keeps the overhead below 1% of LLM "
              "inference, as the article's other overhead figures say",
              f"the article states three figures: {overheads}; the smallest is "
              f"{min(figures.values()) / max(figures.values()):.0%} of the largest",
              len({round(v, 3) for v in figures.values()}) == 1),
        claim("SS-GRPO article, Performance", "the estimator adds only 5% overhead to rollout generation (its table: "
              "1.05x inference per rollout)",
              f"the table's {table['ss_grpo'][2]:g}x is +{table_overhead:.0%} per rollout, as the text says; its "
              f"training time is +{n['article_training_hours_vs_grpo'] - 1:.0%} over GRPO's ({table['ss_grpo'][1]:g}/"
              f"{table['grpo'][1]:g} h), {(n['article_training_hours_vs_grpo'] - 1) / table_overhead:.1f}x the "
              "rollout overhead",
              math.isclose(table_overhead, ARTICLE_ROLLOUT_OVERHEAD)),
        claim("SS-GRPO article, Trade-offs", "the estimator adds ~1M parameters",
              f"its StepValueEstimator with its own sizes (vocab {ARTICLE_ESTIMATOR['vocab']:,}, width "
              f"{ARTICLE_ESTIMATOR['hidden']}, {ARTICLE_ESTIMATOR['layers']} layers, PyTorch's default feed-forward "
              f"width {ARTICLE_ESTIMATOR['ffn']}): {n['article_estimator_params_embedding'] / 1e6:.2f}M embedding + "
              f"{n['article_estimator_params_layers'] / 1e6:.2f}M layers + {n['article_estimator_params_head']} head "
              f"= {n['article_estimator_params_total'] / 1e6:.2f}M; ~1M only without the embedding table",
              round(n["article_estimator_params_total"] / ARTICLE_ESTIMATOR_PARAMS) == 1),
        claim("SS-GRPO article, Why it works", "the only extra cost is one forward pass of a tiny model per step, "
              "negligible next to the LLM's generation (at the article's scale, a 7B policy)",
              f"FLOPs (2·params per token, attention left out): the article's estimator without its embedding "
              f"({(n['article_estimator_params_layers'] + n['article_estimator_params_head']) / 1e6:.2f}M) reading "
              f"{n['article_estimator_tokens_per_policy_token']:.2f} tokens per policy token (measured here: it re-reads "
              f"the prompt with every step) costs {n['article_estimator_flops_share_7b']:.3%} of a 7B policy's "
              f"generation (below 1% counts as negligible); its 5% and 1.05x are not FLOPs",
              n["article_estimator_flops_share_7b"] < 0.01),
        *([claim("SS-GRPO article, Trade-offs", "storing step-level weights for all rollouts increases memory by "
                 f"~{ARTICLE_WEIGHT_MEMORY:.0%} ({50 * ARTICLE_WEIGHT_MEMORY:g}-{200 * ARTICLE_WEIGHT_MEMORY:g}% counts as holding)",
                 f"one float32 per step against the rollout buffer alone ({BUFFER_BYTES_PER_TOKEN} B per token: int64 "
                 f"id, float32 log-probs of policy, sampler and reference, advantage), on our rollouts "
                 f"({n['rollout_steps']:.1f} steps, {n['rollout_tokens']:.0f} tokens): "
                 f"{n['article_weight_memory_share']:.2%}; weights, optimiser state and activations would add to "
                 "the denominator", ARTICLE_WEIGHT_MEMORY / 2 <= n["article_weight_memory_share"] <= 2 * ARTICLE_WEIGHT_MEMORY)]
          if "article_weight_memory_share" in n else []),
        claim("SS-GRPO article, The Problem", f"for a {ARTICLE_ROLLOUT_TOKENS}-token rollout, per-step evaluation "
              f"multiplies inference cost by {ARTICLE_PER_STEP_COST:g}x",
              f"scoring every token's prefix in its own forward pass reads {n['article_prefix_rescoring_cost']:.1f}x "
              f"the tokens of one pass (Σ t over t = 1..{ARTICLE_ROLLOUT_TOKENS}); per step (not per token) it is "
              f"fewer passes still, and a causal PRM with a head at each step's end scores all steps in one pass (1x)"
              + ours,
              round(n["article_prefix_rescoring_cost"]) >= ARTICLE_PER_STEP_COST),
    ]


def accuracy_claims(summary: dict, per_seed: dict, mc_rollouts: int) -> list[dict]:
    """SS-GRPO against GRPO, the share of the gold PRM's gain (undefined without a gain), and
    the training cost against a PRM labelled by Monte Carlo."""
    if not {"grpo", "prm_grpo", "ss_grpo"} <= set(summary):
        return []
    acc = {m: summary[m]["pass@1"] for m in ("grpo", "prm_grpo", "ss_grpo")}
    seeds = "; ".join(f"{NAMES[m]} " + "/".join(f"{r['pass@1']:.3f}" for r in per_seed[m]) for m in acc)
    gain, lead = acc["prm_grpo"] - acc["grpo"], acc["ss_grpo"] - acc["grpo"]
    share = lead / gain if gain > 0 else math.nan
    ss = summary["ss_grpo"]
    ss_extra, mc_extra = ss["train_flops_vs_grpo"] - 1, ss["mc_prm_train_flops_vs_grpo"] - 1
    wall = ss["train_wall_clock_s"] / summary["prm_grpo"]["train_wall_clock_s"]
    return [
        claim("SS-GRPO article, Performance", "SS-GRPO beats GRPO (its table: 77.5% against 72.3%)",
              f"held-out pass@1, mean of seeds: SS-GRPO {acc['ss_grpo']:.3f} against GRPO {acc['grpo']:.3f} "
              f"({100 * lead:+.1f} points); per seed: {seeds}", bool(lead > 0)),
        claim("SS-GRPO article, Performance", f"SS-GRPO recovers {ARTICLE_SHARE:.0%} of the PRM's accuracy gain over "
              "GRPO (90% or more counts as holding)",
              (f"{share:.0%} of a {100 * gain:+.1f}-point gain of the gold PRM-GRPO" if gain > 0 else
               f"not testable here: the gold PRM-GRPO does not beat GRPO ({acc['prm_grpo']:.3f} against "
               f"{acc['grpo']:.3f}, {100 * gain:+.1f} points), so there is no gain to share; the finding is "
               f"SS-GRPO against GRPO, {100 * lead:+.1f} points (row above)"),
              bool(share >= 0.9) if gain > 0 else None),
        claim("SS-GRPO article, Performance", f"...at {ARTICLE_COST:.0%} of the PRM's training cost (read as cost "
              "beyond GRPO's, the reading that gives 4% in its table)",
              f"training FLOPs per rollout against GRPO's: SS-GRPO {ss['train_flops_vs_grpo']:.2f}x; a PRM labelled "
              f"by Monte Carlo ({mc_rollouts} rollouts per step prefix, its own training not counted) "
              f"{ss['mc_prm_train_flops_vs_grpo']:.2f}x on the same rollouts; SS-GRPO's extra cost is "
              f"{ss_extra / mc_extra:.0%} of the PRM's (its total {ss['train_flops_vs_grpo'] / ss['mc_prm_train_flops_vs_grpo']:.0%}). "
              f"Our PRM-GRPO run's step checker is a free string compare, so SS-GRPO's wall-clock at {wall:.0%} "
              "of that run's says nothing about a PRM's cost",
              round(ss_extra / mc_extra, 2) <= ARTICLE_COST),
    ]


def credit_claims(summary: dict) -> list[dict]:
    """What the article says GRPO does to a flawed step, and whether SS-GRPO's weight changes it."""
    if "grpo" not in summary:
        return []
    credit = {m: summary[m] for m in ("grpo", "ss_grpo", "ss_grpo_signed", "prm_grpo") if m in summary}

    def shares(key: str) -> str:
        return ", ".join(f"{NAMES[m]} {s[key]:+.2f}" for m, s in credit.items())

    flawed, slips = summary["grpo"]["flawed_right_share"], summary["grpo"]["right_steps_blame"]
    claims = [
        claim("SS-GRPO article, The Problem", "a flawed step in a chain that still reaches the right answer is "
              "reinforced by GRPO",
              f"{flawed:.1%} of GRPO's rewarded completions (second half of training) hold a wrong line; the credit "
              f"on it as a share of GRPO's A_i > 0: {shares('flawed_step_credit')}",
              None if math.isnan(flawed) or flawed == 0 else bool(summary["grpo"]["flawed_step_credit"] > 0)),
        claim("SS-GRPO article, The Problem", "a correct step followed by a single slip is penalised by GRPO",
              f"blame on the right steps before the first wrong one in failed completions, as a share of GRPO's "
              f"A_i < 0 (positive = pushed down): {shares('right_steps_blame')}",
              None if math.isnan(slips) else bool(slips > 0))]
    if "ss_grpo" in summary:
        ss = summary["ss_grpo"]
        on, before = ss["flawed_step_credit"], ss["flawed_right_steps_credit"]
        claims.append(claim(
            "SS-GRPO article, The Problem and Mechanics", "SS-GRPO's step weight stops reinforcing the flawed step: "
            "in a right solution it gets clearly less credit than the solution's right steps (at most 0.9x)",
            f"SS-GRPO, right completions with a wrong line: credit on the flawed step {on:.2f}, on the right steps "
            f"before it {before:.2f} (shares of GRPO's A_i; {ss['flawed_right_share']:.1%} of its rewarded "
            f"completions hold a wrong line)",
            None if math.isnan(on) or math.isnan(before) else bool(on <= 0.9 * before)))
    return claims


def step_size_claims(summary: dict, per_seed: dict) -> list[dict]:
    """SS-GRPO against GRPO with SS-GRPO's step size (its advantage scale at each update)."""
    if not {"ss_grpo", "grpo_scaled"} <= set(summary):
        return []
    ss, control = per_seed["ss_grpo"], per_seed["grpo_scaled"]
    seeds = "; ".join(f"{a['pass@1']:.3f} against {b['pass@1']:.3f}" for a, b in zip(ss, control))
    grpo = f"; GRPO {summary['grpo']['pass@1']:.3f}" if "grpo" in summary else ""
    lead = summary["ss_grpo"]["pass@1"] - summary["grpo_scaled"]["pass@1"]
    return [claim(
        "SS-GRPO article, Mechanics and Why it works", "the learned step weights give credit to the steps that "
        "matter: SS-GRPO beats GRPO given the same step size at every update (its advantages scaled by SS-GRPO's "
        "mean weight), on the mean and on every seed",
        f"SS-GRPO's push is {summary['ss_grpo']['advantage_scale']:.2f}x GRPO's (second half of training); held-out "
        f"pass@1 SS-GRPO {summary['ss_grpo']['pass@1']:.3f} against the control {summary['grpo_scaled']['pass@1']:.3f} "
        f"({100 * lead:+.1f} points; per seed {seeds}){grpo}",
        bool(lead > 0 and all(a["pass@1"] > b["pass@1"] for a, b in zip(ss, control))))]


def estimator_claims(summary: dict) -> list[dict]:
    """What w(s) learns, the signed variant, the article's objective and its overhead at our scale."""
    claims = []
    for method in ("ss_grpo", "ss_grpo_signed"):
        if method in summary:
            m = summary[method]
            claims.append(claim(
                "SS-GRPO article", f"{NAMES[method]}: the estimator learns to identify steps causally correlated with "
                "success", f"held-out: AUROC of w for 'the solution is right' {m['auroc_outcome']:.2f}, for 'this step "
                f"is right' within failed solutions {m['auroc_step_right_in_failed']:.2f}; localisation of the first "
                f"wrong step AUROC {m['localisation_auroc']:.2f}, top-1 {m['localisation_top1']:.2f} (chance "
                f"{m['chance_top1']:.2f}); that step keeps {m['wrong_step_blame']:.0%} of GRPO's blame",
                bool(m["localisation_auroc"] > 0.6 and m["auroc_step_right_in_failed"] > 0.6)))
    if {"ss_grpo", "ss_grpo_signed"} <= set(summary):
        plain, signed = summary["ss_grpo"], summary["ss_grpo_signed"]
        claims.append(claim(
            "this script (our variant)", "a sign-aware weight (1 - w when A_i < 0) gives the mistakes of failed "
            "completions their blame back and does no worse than the faithful SS-GRPO",
            f"blame on the first wrong step {plain['wrong_step_blame']:.2f} -> {signed['wrong_step_blame']:.2f} of "
            f"GRPO's; pass@1 {plain['pass@1']:.3f} -> {signed['pass@1']:.3f}",
            bool(signed["wrong_step_blame"] > plain["wrong_step_blame"] and signed["pass@1"] >= plain["pass@1"])))
    if "ss_grpo" in summary:
        m = summary["ss_grpo"]
        claims.append(claim(
            "SS-GRPO article", "the estimator is trained with a contrastive objective on normalised rewards; if the "
            "entropy of the step weights collapses to uniform, increase the contrastive margin",
            f"the code's loss is a regression, MSE to the rollout's min-max reward, the same target for every step of "
            f"a rollout, and its `margin` is never used; normalised entropy of w over a completion's steps "
            f"{m['w_entropy']:.3f} (1 = uniform); all-right groups get target 0 (0/(0 + 1e-8)): "
            f"{m['right_target_zero']:.0%} of right completions were trained toward w = 0",
            bool(m["w_entropy"] < 0.9)))
        claims.append(claim("SS-GRPO article", "the estimator adds only ~5% overhead (a single forward pass per step), "
                            "measured at our scale",
                            f"estimator training + inference {m['credit_wall_clock_share']:.0%} of an update's "
                            f"wall-clock (it varies between identical runs); +{m['inference_flops_vs_grpo'] - 1:.0%} "
                            "inference FLOPs per rollout (the 2-layer, 128-wide estimator is bigger than our policy)",
                            bool(m["credit_wall_clock_share"] <= 0.05)))
    return claims


def check_claims(summary: dict, per_seed: dict, mc_rollouts: int) -> list[dict]:
    return (article_claims(article_numbers(summary), summary) + accuracy_claims(summary, per_seed, mc_rollouts)
            + credit_claims(summary) + step_size_claims(summary, per_seed) + estimator_claims(summary))


def length_claims(sweep: dict) -> list[dict]:
    """Does step credit's lead over flat credit grow as chains grow? (shortest against longest)"""
    shortest, longest = min(sweep), max(sweep)
    claims = []
    for method, source, statement in (
            ("prm_grpo", "over-long-generations", "uniform token-level weighting wastes the policy's capacity to learn "
             "which decisions matter: step credit (the gold step verifier) gains more over flat GRPO as chains grow"),
            ("ss_grpo", "SS-GRPO article", "one scalar per rollout cannot tell a good step from a bad one, and the "
             "learned step weight recovers that credit without per-step evaluation: SS-GRPO's lead over GRPO grows "
             "with chain length")):
        if not {method, "grpo"} <= set(sweep[shortest]["summary"]) or shortest == longest:
            continue
        lead = {n: sweep[n]["summary"][method]["pass@1"] - sweep[n]["summary"]["grpo"]["pass@1"] for n in sorted(sweep)}
        claims.append(claim(source, statement, f"{NAMES[method]} - GRPO, held-out pass@1 (mean of seeds), by chain "
                            "length: " + ", ".join(f"{n}: {gap:+.3f}" for n, gap in lead.items()),
                            bool(lead[longest] > max(lead[shortest], 0.0))))
    return claims


def length_metrics(sweep: dict) -> dict:
    metrics = {}
    for n, at in sweep.items():
        metrics[f"length{n}_cold_start_pass@1"] = at["before"]
        for m, s in at["summary"].items():
            finals = [r["pass@1"] for r in at["per_seed"][m]]
            reached = [x for x in at["to_target"][m] if not math.isnan(x)]
            metrics.update({f"length{n}_{m}_pass@1": s["pass@1"], f"length{n}_{m}_pass@1_min": min(finals),
                            f"length{n}_{m}_pass@1_max": max(finals),
                            f"length{n}_{m}_samples_to_target": mean_or_nan(reached),
                            f"length{n}_{m}_seeds_reaching_target": len(reached),
                            f"length{n}_{m}_wrong_step_blame": s["wrong_step_blame"],
                            f"length{n}_{m}_train_wall_clock_s": s["train_wall_clock_s"]})
            if "localisation_auroc" in s:
                metrics[f"length{n}_{m}_localisation_auroc"] = s["localisation_auroc"]
                metrics[f"length{n}_{m}_localisation_top1"] = s["localisation_top1"]
    return metrics


def print_length_report(sweep: dict, args: Args) -> None:
    rows = []
    for n, at in sweep.items():
        for m, s in at["summary"].items():
            finals = [r["pass@1"] for r in at["per_seed"][m]]
            reached = [x for x in at["to_target"][m] if not math.isnan(x)]
            rows.append([n, NAMES[m], at["before"], s["pass@1"], f"{min(finals):.3f}-{max(finals):.3f}",
                         f"{mean_or_nan(reached):.0f} ({len(reached)}/{len(finals)})" if reached else f"never (0/{len(finals)})",
                         s["wrong_step_blame"], s.get("localisation_auroc", "-"), s["train_wall_clock_s"]])
    print(f"\nFlat against step credit by chain length: {args.rl_steps} updates of {args.prompts}x{args.group_size}, "
          f"seeds {args.seeds}; target = cold start + {args.target_gain:g}:")
    print(format_table(rows, ["steps", "method", "cold start", "pass@1", "seed range", "samples to target",
                              "blame on 1st wrong step", "loc. AUROC", "train s"]))


def run_length_sweep(args: Args, out, initial, tokenizer, device, start: float) -> dict:
    sweep = length_sweep(initial, tokenizer, args, device)
    plot_length_sweep(sweep, out / "length_sweep.png")
    claims = length_claims(sweep)
    metrics = length_metrics(sweep)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, length_sweep=sweep)
    print_length_report(sweep, args)
    print("\n" + format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


def print_report(summary: dict, args: Args, before: float, seeds: list[int]) -> None:
    grpo, prm = summary.get("grpo"), summary.get("prm_grpo")
    prm_gain = prm["pass@1"] - grpo["pass@1"] if grpo and prm else math.nan
    rows = []
    for m, s in summary.items():
        a = ARTICLE.get(m)
        share = (s["pass@1"] - grpo["pass@1"]) / prm_gain if grpo and prm_gain > 0 else "- (no PRM gain)"
        rows.append([NAMES[m], s["pass@1"], s["pass@1"] - before, share, s["train_wall_clock_s"], s["train_wall_clock_vs_grpo"],
                     s["inference_flops_vs_grpo"], s["train_flops_vs_grpo"], s["mc_prm_train_flops_vs_grpo"],
                     s["evaluator_calls"], s["credit_wall_clock_share"], f"{a[0]}% / {a[1]} h / {a[2]:g}x" if a else "-"])
    print(f"\nHeld-out pass@1 ({args.eval_problems} problems x {args.final_samples} samples) after {args.rl_steps} "
          f"updates of {args.prompts}x{args.group_size}, mean of seeds {seeds}; cold start {before:.3f}:")
    print(format_table(rows, ["method", "pass@1", "Δ", "share of PRM gain", "train s", "train vs GRPO",
                              "inference FLOPs vs GRPO", "train FLOPs vs GRPO",
                              f"MC-label PRM (N={args.mc_rollouts}) train FLOPs", "evaluator calls",
                              "credit share of update", "article: acc / time / inference"]))
    rows = [[NAMES[m], s.get("wrong_step_blame"), s.get("right_steps_blame"), s.get("flawed_step_credit"),
             s.get("flawed_right_steps_credit"), s.get("flawed_right_share"), s.get("advantage_scale"),
             s.get("negative_share"), s.get("w_right", "-"), s.get("w_failed", "-"), s.get("w_entropy", "-"),
             s.get("auroc_outcome", "-"), s.get("auroc_step_right_in_failed", "-"), s.get("localisation_auroc", "-"),
             s.get("localisation_top1", "-")] for m, s in summary.items()]
    print("\nWhat the credit does (second half of training; credit as a share of GRPO's A_i; AUROCs from held-out "
          "samples of the trained policy):")
    print(format_table(rows, ["method", "blame 1st wrong step", "blame right steps before it",
                              "credit flawed step (right sol.)", "credit its right steps", "right sol. with a flaw",
                              "push vs GRPO", "negative share of |A|", "w right", "w failed", "w entropy",
                              "AUROC w: outcome", "AUROC w: step right", "loc. AUROC", "loc. top-1"]))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = start_lm_run(args)
    print(f"07 SS-GRPO; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), device {device}")
    if args.length_list:
        return run_length_sweep(args, out, initial, tokenizer, device, start)
    held_out = args.task.held_out(args.eval_problems)
    before = evaluate(initial, tokenizer, held_out, args.final_samples, args.max_new_tokens,
                      torch.Generator(device).manual_seed(args.seed + 2), device)
    print(f"cold start: held-out pass@1 {before['pass@1']:.3f}")
    runs = compare_methods(initial, tokenizer, args, held_out, device)
    per_seed, summary, sizes = summarise(initial, tokenizer, args, runs)
    claims = check_claims(summary, per_seed, args.mc_rollouts)
    plot_all(out, runs)

    metrics = {"cold_start_pass@1": before["pass@1"], **sizes, **article_numbers(summary)}
    metrics.update({f"{m}_{k}": v for m, s in summary.items() for k, v in s.items()})
    metrics.update({f"{m}_seed{seed}_pass@1": r["pass@1"] for m, rs in per_seed.items() for seed, r in zip(args.seeds, rs)})
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, cold_start=before, per_seed=per_seed, runs=runs)
    print_report(summary, args, before["pass@1"], args.seeds)
    print("\n" + format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    run_script(main, Args)
