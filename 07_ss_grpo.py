"""07 — Step-sparse GRPO: does a learned step weight replace per-step evaluation?

GRPO copies one advantage A_i onto every token of completion i (05); a process reward model
scores every step instead (06), at one evaluation per step. The article "Fixing GRPO's Credit
Assignment Problem Without Evaluating Every Step" proposes SS-GRPO: a small transformer f(s, P)
reads each step s (one solution line) with the prompt P and outputs a weight w(s) in [0, 1],

  A_i(s) = A_i · w(s)          on the tokens of step s, A_i the GRPO group advantage

trained on the same rollouts every N updates, each step pulled toward its rollout's reward
min-max normalised within the group:

  L = mean_i mean_{s in i} (w(s) - r̂_i)²,   r̂_i = (r_i - min_g r) / (max_g r - min_g r + 1e-8)

The target is the same for every step of a rollout, so w can only fit P(success | prompt, step).
The default run trains GRPO, SS-GRPO and PRM-GRPO (every step scored by the gold step verifier,
06's process advantages: the per-step evaluation SS-GRPO avoids) from one cold start, with the
same prompts, budget and seed, then asks on held-out samples whether w(s) drops at the first
wrong step. `--methods` adds SS-GRPO ± (ours: A_i · (1 - w(s)) when A_i < 0, so that a step
that looks like failure takes the blame). studies/07_credit.py holds the rest: two seeds, a
step-size control, what each credit does to each step and costs, the article's own numbers
against each other, and the sweep over chain lengths.

Read beside: ss-grpo-step-sparse-grpo.txt (all), credit-assignment-problem-survey.txt §4.5.
Papers: Shao et al. 2024 (GRPO, process supervision); Lightman et al. 2024.
Figures in runs/07_ss_grpo/: learning_curves.png (held-out pass@1 per method), localisation.png
(w(s) by position relative to the first wrong step, held-out failed solutions).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field

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

METHODS = ("grpo", "ss_grpo", "ss_grpo_signed", "prm_grpo")
NAMES = {"grpo": "GRPO", "ss_grpo": "SS-GRPO", "ss_grpo_signed": "SS-GRPO ±", "prm_grpo": "PRM-GRPO (gold)"}
ARTICLE_SHARE = 0.97  # "97% of the accuracy gain of a full PRM"
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
# The baselines, restated: GRPO's advantage (05), process supervision by the gold verifier (06)
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
# Each method's credit: the loop's advantage_fn
# ============================================================================================


@dataclass
class Rollouts:
    """One update's completions as the credit reads them, and what SS-GRPO computes on them."""

    completions: Completions
    rewards: torch.Tensor  # (N, G)
    step_ids: torch.Tensor  # (B, T): each token's line, -1 off the completion
    end_tokens: torch.Tensor  # (B, max steps): the token each line ends in
    wrong: list[int | None]  # the first wrong line of each completion by the gold labels (None: none)
    A: torch.Tensor  # (B,) GRPO's group advantage
    batch: StepBatch | None = None  # SS-GRPO: the estimator's rows, their targets r̂, fit and weights w(s)
    targets: torch.Tensor | None = None
    fit: dict = field(default_factory=dict)
    w: torch.Tensor | None = None

    @property
    def steps(self) -> torch.Tensor:
        return self.step_ids.max(1).values + 1


class Credit:
    """The loop's advantage_fn for one method: each step's advantage (`step_credit`) on its tokens,
    and per update what it did (`diagnose`; studies/07_credit.py logs much more)."""

    def __init__(self, method: str, tokenizer, args: Args, estimator: StepValueEstimator | None, seed: int):
        self.method, self.tokenizer, self.args, self.estimator = method, tokenizer, args, estimator
        self.optimizer = torch.optim.Adam(estimator.parameters(), lr=args.est_lr) if estimator else None
        self.rng = np.random.default_rng(seed)
        self.buffer: list[tuple[StepBatch, torch.Tensor]] = []
        self.log: list[dict] = []

    def __call__(self, completions: Completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        r = self.rollouts(completions, rewards, problems)
        start = time.time()
        grid = self.step_credit(r)
        seconds = time.time() - start
        advantages = broadcast_to_tokens(grid, r.step_ids)
        self.log.append({"credit_s": seconds, **self.diagnose(r, advantages)})
        return advantages

    def step_credit(self, r: Rollouts) -> torch.Tensor:
        """Each method's advantage of every step, (B, max steps)."""
        if self.method == "grpo":  # A_i on every step
            return r.A[:, None].expand(-1, int(r.steps.max()))
        if self.method == "prm_grpo":  # every step checked by the gold verifier (a free string compare here)
            return process_advantages(*gold_step_rewards(r.wrong, r.steps), self.args.group_size)
        # SS-GRPO: every N updates f(s, P) fits r̂ on recent groups; then A_i(s) = A_i · w(s)
        r.batch = step_batch(r.completions, r.step_ids, r.end_tokens, self.args.chunk, self.tokenizer.pad_token_id)
        r.targets = minmax_targets(r.rewards)
        r.fit = self.fit(r.batch, r.targets.flatten())
        with torch.no_grad():
            r.w = step_grid(self.estimator.step_weights(r.batch), r.batch)
        return step_advantages(r.A, r.w, signed=self.method == "ss_grpo_signed")

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

    def rollouts(self, completions: Completions, rewards: torch.Tensor, problems: list) -> Rollouts:
        ids, mask = completions.completion_ids, completions.completion_mask
        texts = completion_texts(self.tokenizer, completions)
        repeated = [p for p in problems for _ in range(self.args.group_size)]
        return Rollouts(completions, rewards, token_step_ids(self.tokenizer, ids, mask),
                        step_end_tokens(self.tokenizer, ids, mask),
                        [first_wrong_step(p, t) for p, t in zip(repeated, texts)], grpo_advantages(rewards).flatten())

    def diagnose(self, r: Rollouts, advantages: torch.Tensor) -> dict:
        """What this update logs besides the credit's seconds: the estimator's loss when it retrained."""
        return r.fit


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
    methods: str = arg("grpo,ss_grpo,prm_grpo", "methods to compare, comma-separated", METHODS, item=str)
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
    repeats: int = arg(1, "seeds per method: --seed, --seed + 1, ...")
    final_samples: int = arg(16, "samples per held-out problem after RL (pass@1)")
    probe_samples: int = arg(4, "samples per held-out problem for the probe of w(s)")

    SMOKE = dict(LMArgs.SMOKE_LM, rl_steps=2, prompts=2, group_size=2, eval_every=1, est_layers=1, est_hidden=16,
                 est_heads=2, est_ffn=32, est_iters=2, retrain_every=1, est_groups=1, repeats=1, final_samples=2,
                 probe_samples=2)

    def __post_init__(self):
        # K = group size: checked first, with the reason that matters here
        require(self.group_size >= 2, f"--group-size (K) must be at least 2: SS-GRPO normalises rewards "
                f"and estimator targets within the group of K completions, got {self.group_size}")
        super().__post_init__()
        require_positive(self, "rl_steps", "prompts", "lr", "warmup", "max_grad_norm", "eval_every", "est_layers",
                         "est_hidden", "est_heads", "est_ffn", "est_lr", "retrain_every", "est_iters", "est_groups",
                         "chunk", "repeats", "final_samples", "probe_samples")
        require(self.beta >= 0, "--beta must be non-negative")
        require(self.est_hidden % self.est_heads == 0, "--est-hidden must be a multiple of --est-heads")
        require(self.chunk <= MAX_POSITIONS // 2, f"--chunk must be at most {MAX_POSITIONS // 2}")
        require(self.method_list and all(m in METHODS for m in self.method_list),
                f"--methods must be among {','.join(METHODS)}")

    @property
    def method_list(self) -> list[str]:
        return as_list(self.methods, str)

    @property
    def seeds(self) -> list[int]:
        return [self.seed + i for i in range(self.repeats)]


# ============================================================================================
# The experiment: each method from the cold start, then the held-out probe of w(s)
# ============================================================================================


def make_estimator(tokenizer, args: Args, device) -> StepValueEstimator:
    return StepValueEstimator(len(tokenizer), args.est_hidden, args.est_layers, args.est_heads, args.est_ffn).to(device)


def make_credit(method: str, tokenizer, args: Args, device, credit_class: type = Credit, **extra) -> Credit:
    """A method's credit; SS-GRPO's with a fresh estimator seeded by the run's seed."""
    torch.manual_seed(args.seed)
    estimator = make_estimator(tokenizer, args, device) if method.startswith("ss_") else None
    return credit_class(method, tokenizer, args, estimator, args.seed, **extra)


def held_out_pass(policy, tokenizer, held_out: list, args: Args, device) -> dict:
    """Held-out pass@1 with final_samples per problem, the same draws for every method."""
    return evaluate(policy, tokenizer, held_out, args.final_samples, args.max_new_tokens,
                    torch.Generator(device).manual_seed(args.seed + 2), device)


def run_method(initial, tokenizer, args: Args, credit: Credit, held_out: list, device, name: str) -> dict:
    """Train a copy of the cold start with one credit; evaluate it, and probe its w(s) if it has one."""
    policy, reference = copy.deepcopy(initial), frozen_copy(initial)
    start = time.time()
    result = train(policy, reference, tokenizer, args, credit, held_out, device, desc=name)
    result["wall_clock_s"] = time.time() - start
    result["final"] = held_out_pass(policy, tokenizer, held_out, args, device)
    result["credit"], result["seed"] = credit.log, args.seed
    if credit.estimator is not None:
        result["probe"] = probe_weights(policy, credit.estimator, tokenizer, held_out, args, device)
    print(f"  {name:18s} seed {args.seed}: held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> "
          f"{result['final']['pass@1']:.3f}, {result['wall_clock_s']:.0f} s")
    return result


def compare_methods(initial, tokenizer, args: Args, held_out: list, device) -> dict:
    """Every method from the cold start, for each seed --seed, --seed + 1, ...: {method: [runs]}."""
    runs = {m: [] for m in args.method_list}
    for seed in args.seeds:
        at = dataclasses.replace(args, seed=seed)
        for m in args.method_list:
            runs[m].append(run_method(initial, tokenizer, at, make_credit(m, tokenizer, at, device), held_out,
                                      device, NAMES[m]))
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


def run_summary(run: dict) -> dict:
    """A run's held-out pass@1, training seconds and the probe of its w(s)."""
    probe = {k: v for k, v in run.get("probe", {}).items() if k != "w_by_offset"}
    return {"pass@1": run["final"]["pass@1"], "train_wall_clock_s": run["wall_clock_s"], **probe}


def seed_means(per_seed: list[dict]) -> dict:
    """The mean over seeds of every metric (NaN-free values only)."""
    return {k: mean_or_nan([m[k] for m in per_seed]) for k in per_seed[0]}


# ============================================================================================
# Figures, claims, report
# ============================================================================================


def plot_learning_curves(runs: dict, path, names: dict = NAMES) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, seeds in runs.items():
        steps = [e["step"] for e in seeds[0]["evals"]]
        ax.plot(steps, np.mean([[e["pass@1"] for e in r["evals"]] for r in seeds], 0), "o-", label=names[method])
    ax.set(xlabel="policy update", ylabel=f"held-out pass@1 (mean of {len(seeds)} seeds)",
           title="Same prompts, budget and seeds")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, path)



def plot_localisation(runs: dict, path, names: dict = NAMES) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, seeds in runs.items():
        if "probe" in seeds[0]:
            offsets = seeds[0]["probe"]["w_by_offset"]
            ax.plot(list(offsets), list(offsets.values()), "o-", label=f"{names[method]} (seed {seeds[0]['seed']})")
    ax.axvline(0, color="gray", linestyle="--")
    ax.set(xlabel="step position relative to the first wrong step (0)", ylabel="mean w(s)",
           title="Held-out failed solutions: does w(s) drop at the mistake?")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def accuracy_claims(summary: dict, per_seed: dict) -> list[dict]:
    """Does the learned weight beat GRPO, and how much of the gold step verifier's gain does it recover?"""
    if not {"grpo", "prm_grpo", "ss_grpo"} <= set(summary):
        return []
    acc = {m: summary[m]["pass@1"] for m in ("grpo", "prm_grpo", "ss_grpo")}
    seeds = "; ".join(f"{NAMES[m]} " + "/".join(f"{r['pass@1']:.3f}" for r in per_seed[m]) for m in acc)
    gain, lead = acc["prm_grpo"] - acc["grpo"], acc["ss_grpo"] - acc["grpo"]
    share = lead / gain if gain > 0 else math.nan
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
              bool(share >= 0.9) if gain > 0 else None)]


def weight_claims(summary: dict) -> list[dict]:
    """Does w(s) tell the steps apart, as a per-step evaluation would? (held-out probe)"""
    return [claim("SS-GRPO article", f"{NAMES[m]}: the estimator learns to identify steps causally "
                  "correlated with success",
                  f"held-out: AUROC of w for 'the solution is right' {s['auroc_outcome']:.2f}, for 'this step is "
                  f"right' within failed solutions {s['auroc_step_right_in_failed']:.2f}; localisation of the first "
                  f"wrong step AUROC {s['localisation_auroc']:.2f}, top-1 {s['localisation_top1']:.2f} (chance "
                  f"{s['chance_top1']:.2f})",
                  bool(s["localisation_auroc"] > 0.6 and s["auroc_step_right_in_failed"] > 0.6))
            for m, s in summary.items() if m.startswith("ss_")]


def print_report(summary: dict, args: Args, before: float) -> None:
    rows = [[NAMES[m], s["pass@1"], s["pass@1"] - before, s.get("auroc_outcome", "-"),
             s.get("auroc_step_right_in_failed", "-"), s.get("localisation_auroc", "-"),
             f"{s['localisation_top1']:.2f} ({s['chance_top1']:.2f})" if "localisation_top1" in s else "-",
             s["train_wall_clock_s"]] for m, s in summary.items()]
    print(f"\nHeld-out pass@1 ({args.eval_problems} problems x {args.final_samples} samples) after {args.rl_steps} "
          f"updates of {args.prompts}x{args.group_size},\nmean of seeds {args.seeds}; cold start {before:.3f}; "
          "AUROCs of w(s) on held-out samples of the trained policy:")
    print(format_table(rows, ["method", "pass@1", "Δ", "AUROC outcome", "AUROC step", "loc. AUROC",
                              "top-1 (chance)", "train s"]))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = start_lm_run(args)
    print(f"07 SS-GRPO; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), device {device}")
    held_out = args.task.held_out(args.eval_problems)
    before = held_out_pass(initial, tokenizer, held_out, args, device)
    print(f"cold start: held-out pass@1 {before['pass@1']:.3f}")
    runs = compare_methods(initial, tokenizer, args, held_out, device)
    per_seed = {m: [run_summary(r) for r in rs] for m, rs in runs.items()}
    summary = {m: seed_means(v) for m, v in per_seed.items()}
    claims = accuracy_claims(summary, per_seed) + weight_claims(summary)
    plot_learning_curves(runs, out / "learning_curves.png")
    plot_localisation(runs, out / "localisation.png")

    metrics = {"cold_start_pass@1": before["pass@1"], **{f"{m}_{k}": v for m, s in summary.items() for k, v in s.items()},
               **{f"{m}_seed{r['seed']}_pass@1": r["final"]["pass@1"] for m, rs in runs.items() for r in rs}}
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, cold_start=before, per_seed=per_seed, runs=runs)
    print_report(summary, args, before["pass@1"])
    print("\n" + format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    run_script(main, Args)
