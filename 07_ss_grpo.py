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
same prompts, budget and seed, and asks whether SS-GRPO recovers the PRM's gain over GRPO.

Read beside: ss-grpo-step-sparse-grpo.txt (all), credit-assignment-problem-survey.txt §4.5.
Papers: Shao et al. 2024 (GRPO, process supervision); Lightman et al. 2024.
Figure in runs/07_ss_grpo/: learning_curves.png (held-out pass@1 per method over training).
Study beside it, studies/07_credit.py: two seeds, what w(s) learns (does it drop at the first
wrong step?), a signed weight, a step-size control, costs, the article's numbers, chain lengths.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn
from tqdm import tqdm

import common
import lm_world
from lm_world import Completions, evaluate, sample, token_logprobs, verifier_rewards

NAMES = {"grpo": "GRPO", "ss_grpo": "SS-GRPO", "prm_grpo": "PRM-GRPO (gold)"}  # the methods compared
ARTICLE_SHARE = 0.97  # "97% of the accuracy gain of a full PRM"
MAX_POSITIONS = 1024  # the estimator's learned position embeddings: a prompt and one window
CHUNK = 512  # the article's window: a longer step is cut into windows whose weights are averaged


# ============================================================================================
# The method: the step-value estimator f(s, P) -> w(s) on each step, its targets and loss
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
        return segment_mean(self(batch.ids, batch.attention, batch.pool), batch.window_step, len(batch.step_completion))


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


def step_batch(completions: Completions, step_ids: torch.Tensor, end_tokens: torch.Tensor, chunk: int,
               pad_id: int) -> StepBatch:
    """Cut each completion into its steps (lm_world.token_step_ids) and each step into windows of
    at most `chunk` tokens; each window becomes a row prompt + window. A step with no token of its
    own (it begins and ends inside one token, as the empty line of "\n\n") reads the token it
    ends in (lm_world.step_end_tokens), so every line of the text gets a weight."""
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


def read_steps(tokenizer, completions: Completions, problems: list) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Each token's line (B, T; -1 off the completion), the token each line ends in (B, max
    steps), and each completion's first wrong line by the gold labels (None: none)."""
    ids, mask = completions.completion_ids, completions.completion_mask
    texts = lm_world.completion_texts(tokenizer, completions)
    return (lm_world.token_step_ids(tokenizer, ids, mask), lm_world.step_end_tokens(tokenizer, ids, mask),
            [lm_world.first_wrong_step(p, t) for p, t in zip(problems, texts)])


# ============================================================================================
# Each method's credit, the loop's advantage_fn: GRPO's advantage (05, restated), process
# supervision by the gold step verifier (06, restated), SS-GRPO's A_i · w(s)
# ============================================================================================
def grpo_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """05's GRPO advantage of each completion, rewards (N prompts, G completions)."""
    # A_i = (r_i - mean_g) / (std_g + eps)
    return (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + eps)


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


class Credit:
    """The advantage of every token under one method: its step's credit. For SS-GRPO it holds
    the estimator, retrained every N updates on the groups of the last N updates."""

    def __init__(self, method: str, tokenizer, args: Args, estimator: StepValueEstimator | None, seed: int):
        self.method, self.tokenizer, self.args, self.estimator = method, tokenizer, args, estimator
        self.optimizer = torch.optim.Adam(estimator.parameters(), lr=args.est_lr) if estimator else None
        self.rng = np.random.default_rng(seed)
        self.buffer: list[tuple[StepBatch, torch.Tensor]] = []
        self.log: list[dict] = []  # per update: the credit's seconds, the estimator's fit when it retrained

    def __call__(self, completions: Completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        G = self.args.group_size
        step_ids, end_tokens, wrong = read_steps(self.tokenizer, completions, [p for p in problems for _ in range(G)])
        steps = step_ids.max(1).values + 1
        A = grpo_advantages(rewards).flatten()
        fit, start = {}, time.time()
        if self.method == "grpo":  # A_i on every step
            grid = A[:, None].expand(-1, int(steps.max()))
        elif self.method == "prm_grpo":  # every step checked by the gold verifier (a free string compare here)
            grid = process_advantages(*gold_step_rewards(wrong, steps), G)
        else:  # SS-GRPO: every N updates f(s, P) fits r̂ on recent groups
            batch = step_batch(completions, step_ids, end_tokens, CHUNK, self.tokenizer.pad_token_id)
            fit = self.fit(batch, minmax_targets(rewards).flatten())
            with torch.no_grad():
                w = step_grid(self.estimator.step_weights(batch), batch)
            grid = A[:, None] * w  # A_i(s) = A_i · w(s)
        self.log.append({**fit, "credit_s": time.time() - start})
        return broadcast_to_tokens(grid, step_ids)

    def fit(self, batch: StepBatch, targets: torch.Tensor) -> dict:
        """Store this update's groups; every N updates, retrain: est_iters Adam steps, each on
        est_groups groups of one stored update, drawn at random."""
        self.buffer = (self.buffer + [(batch, targets)])[-self.args.retrain_every:]
        if len(self.log) % self.args.retrain_every:
            return {}
        losses, tokens = [], 0
        groups, device = batch.num_completions // self.args.group_size, targets.device
        for _ in range(self.args.est_iters):
            stored, stored_targets = self.buffer[self.rng.integers(len(self.buffer))]
            chosen = self.rng.choice(groups, size=min(self.args.est_groups, groups), replace=False)
            keep = torch.isin(torch.arange(groups, device=device), torch.as_tensor(chosen, device=device))
            keep = keep.repeat_interleave(self.args.group_size)  # the chosen groups' completions
            part = stored.select(keep)
            tokens += int(part.attention.sum())
            loss = estimator_loss(self.estimator.step_weights(part), part, stored_targets[keep])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        return {"estimator_loss": float(np.mean(losses)), "estimator_train_tokens": tokens / batch.num_completions}


# ============================================================================================
# The RL loop: 05's, restated compactly (05_grpo_rloo.py teaches it in full)
# ============================================================================================
def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """05's per-token KL(π || π_ref) estimate: k3 = r - log r - 1, r = π_ref/π."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def policy_gradient_step(policy, optimizer, completions: Completions, advantages: torch.Tensor,
                         ref_logp: torch.Tensor, beta: float, max_grad_norm: float) -> dict:
    """05's step with μ = 1 (the ratio is 1, the clip never acts) and its per-sequence normalisation:

      loss = mean_i mean_{t in i} [ -A_it log π_θ(y_it) + β k3(π_θ, π_ref)_it ]

    Returns the KL to the reference and the entropy per token, and the grad norm before clipping."""
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
    """05's loop, the advantages left to `advantage_fn(completions, rewards (N, G), problems) ->
    (B, T)`: each update, G completions of `prompts` fresh training problems, one step; every
    `eval_every` updates, held-out pass@1. Returns {"history": per update, "evals": [...]}."""
    rng = np.random.default_rng(args.seed)
    generator = torch.Generator(device).manual_seed(args.seed)
    eval_generator = torch.Generator(device).manual_seed(args.seed + 1)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / args.warmup))
    exclude = frozenset(p.prompt for p in args.task.held_out())  # never train on a held-out problem
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
        stats = policy_gradient_step(policy, optimizer, completions, advantages, ref_logp, args.beta, args.max_grad_norm)
        schedule.step()
        history.append({"reward": float(rewards.mean()), "length": float(completions.lengths.float().mean()),
                        **stats, "generate_s": generated - start, "update_s": time.time() - generated})
    held_out_eval(args.rl_steps)
    return {"history": history, "evals": evals}


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/07_ss_grpo", "output folder for figures and results.json")
    rl_steps: int = common.arg(80, "RL: policy updates")
    prompts: int = common.arg(16, "RL: prompts per update")
    group_size: int = common.arg(8, "RL: completions per prompt, K in the article, G in GRPO (TRL: num_generations)")
    lr: float = common.arg(1e-4, "RL: AdamW learning rate (TRL: learning_rate)")
    warmup: int = common.arg(20, "RL: updates of linear learning-rate warmup")
    beta: float = common.arg(0.04, "RL: weight β of the k3 KL penalty to the cold-start reference (TRL: beta)")
    max_grad_norm: float = common.arg(1.0, "RL: gradient clipping (TRL: max_grad_norm)")
    eval_every: int = common.arg(20, "RL: updates between held-out evaluations")
    est_layers: int = common.arg(2, "step-value estimator: transformer layers (article: 2)")
    est_hidden: int = common.arg(128, "step-value estimator: width (article: 128)")
    est_heads: int = common.arg(4, "step-value estimator: attention heads (article: 4)")
    est_ffn: int = common.arg(512, "step-value estimator: feed-forward width (the article's code: PyTorch's 2048)")
    est_lr: float = common.arg(1e-3, "step-value estimator: Adam learning rate")
    retrain_every: int = common.arg(5, "N: policy updates between estimator retrainings")
    est_iters: int = common.arg(10, "Adam steps per retraining, each on groups of one stored update")
    est_groups: int = common.arg(4, "groups (prompts) per estimator minibatch")
    final_samples: int = common.arg(16, "samples per held-out problem after RL (pass@1)")

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, rl_steps=2, prompts=2, group_size=2, eval_every=1, est_layers=1,
                 est_hidden=16, est_heads=2, est_ffn=32, est_iters=2, retrain_every=1, est_groups=1, final_samples=2)

    def __post_init__(self):
        common.require(self.group_size >= 2, f"--group-size (K) must be at least 2: SS-GRPO normalises rewards "
                       f"and estimator targets within the group of K completions, got {self.group_size}")
        super().__post_init__()
        common.require_positive(self, "rl_steps", "prompts", "lr", "warmup", "max_grad_norm", "eval_every",
                                "est_layers", "est_hidden", "est_heads", "est_ffn", "est_lr", "retrain_every",
                                "est_iters", "est_groups", "final_samples")
        common.require(self.beta >= 0, "--beta must be non-negative")
        common.require(self.est_hidden % self.est_heads == 0, "--est-hidden must be a multiple of --est-heads")


# ============================================================================================
# The experiment: each method from the same cold start, prompts, budget and seed
# ============================================================================================
def make_credit(method: str, tokenizer, args: Args, device) -> Credit:
    """A method's credit; SS-GRPO's with a fresh estimator, seeded by the run's seed."""
    torch.manual_seed(args.seed)
    sizes = (args.est_hidden, args.est_layers, args.est_heads, args.est_ffn)
    estimator = StepValueEstimator(len(tokenizer), *sizes).to(device) if method.startswith("ss_") else None
    return Credit(method, tokenizer, args, estimator, args.seed)


def held_out_pass(policy, tokenizer, held_out: list, args: Args, device) -> dict:
    """Held-out pass@1 with final_samples per problem, the same draws for every method."""
    return evaluate(policy, tokenizer, held_out, args.final_samples, args.max_new_tokens,
                    torch.Generator(device).manual_seed(args.seed + 2), device)


def run_method(initial, tokenizer, args: Args, method: str, held_out: list, device) -> dict:
    """Train a copy of the cold start with one method's credit (the cold start is the KL reference); held-out pass@1."""
    policy, start = copy.deepcopy(initial), time.time()
    credit = make_credit(method, tokenizer, args, device)
    result = train(policy, lm_world.frozen_copy(initial), tokenizer, args, credit, held_out, device, NAMES[method])
    final = held_out_pass(policy, tokenizer, held_out, args, device)
    result |= {"wall_clock_s": time.time() - start, "final": final, "credit": credit.log}
    print(f"  {NAMES[method]:16s} held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> {final['pass@1']:.3f}, "
          f"{result['wall_clock_s']:.0f} s")
    return result


def plot_learning_curves(runs: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for method, run in runs.items():
        ax.plot([e["step"] for e in run["evals"]], [e["pass@1"] for e in run["evals"]], "o-", label=NAMES[method])
    ax.set(xlabel="policy update", ylabel="held-out pass@1", title="Same prompts, budget and seed")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def check_claims(accuracy: dict) -> list[dict]:
    """Does the learned weight beat GRPO, and how much of the gold step verifier's gain does it recover?"""
    gain, lead = accuracy["prm_grpo"] - accuracy["grpo"], accuracy["ss_grpo"] - accuracy["grpo"]
    return [
        common.claim("SS-GRPO article, Performance", "SS-GRPO beats GRPO (its table: 77.5% against 72.3%)",
                     f"held-out pass@1: SS-GRPO {accuracy['ss_grpo']:.3f} against GRPO {accuracy['grpo']:.3f} "
                     f"({100 * lead:+.1f} points)", bool(lead > 0)),
        common.claim("SS-GRPO article, Performance", f"SS-GRPO recovers {ARTICLE_SHARE:.0%} of the PRM's accuracy "
                     "gain over GRPO (90% or more counts as holding)",
                     f"{lead / gain:.0%} of a {100 * gain:+.1f}-point gain of the gold PRM-GRPO" if gain > 0 else
                     f"not testable here: the gold PRM-GRPO does not beat GRPO ({accuracy['prm_grpo']:.3f} against "
                     f"{accuracy['grpo']:.3f}, {100 * gain:+.1f} points), so there is no gain to share",
                     bool(lead / gain >= 0.9) if gain > 0 else None)]


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    print(f"07 SS-GRPO; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), device {device}")
    held_out = args.task.held_out(args.eval_problems)
    before = held_out_pass(initial, tokenizer, held_out, args, device)
    print(f"cold start: held-out pass@1 {before['pass@1']:.3f}")
    runs = {m: run_method(initial, tokenizer, args, m, held_out, device) for m in NAMES}
    plot_learning_curves(runs, out / "learning_curves.png")
    accuracy = {m: run["final"]["pass@1"] for m, run in runs.items()}
    claims = check_claims(accuracy)
    gains = [[NAMES[m], p, f"{100 * (p - before['pass@1']):+.1f}"] for m, p in accuracy.items()]
    table = {"header": ["policy", "held-out pass@1", "Δ vs cold start (points)"],
             "rows": [["cold start", before["pass@1"], "-"], *gains]}
    metrics = {"cold_start_pass@1": before["pass@1"], **{f"{m}_pass@1": p for m, p in accuracy.items()},
               **{f"{m}_train_wall_clock_s": run["wall_clock_s"] for m, run in runs.items()},
               "tables": {"methods": table}}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, cold_start=before, runs=runs)
    print(f"\nAfter {args.rl_steps} updates of {args.prompts}x{args.group_size} completions, seed {args.seed} "
          f"({args.eval_problems} held-out problems x {args.final_samples} samples):")
    print(common.format_table(table["rows"], table["header"]) + "\n\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
