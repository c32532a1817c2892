"""07 — Step-sparse GRPO: does a learned step weight replace per-step evaluation?

GRPO copies one advantage A_i onto every token of completion i (05); a process reward model scores every step
(06), one evaluation per step. SS-GRPO (the article "Fixing GRPO's Credit Assignment Problem Without Evaluating
Every Step") weighs step s (a solution line) by w(s) = f(s, P) in [0, 1], P the prompt, f a small transformer
refitted every N updates on the same rollouts, each step toward its rollout's reward min-max normalised in the
group: one target for all of a rollout's steps, so w can only fit P(success | prompt, step).

  A_i(s) = A_i · w(s),  L = mean_i mean_{s in i} (w(s) - r̂_i)²,  r̂_i = (r_i - min_g r) / (max_g r - min_g r + 1e-8)

The default run trains GRPO, SS-GRPO and PRM-GRPO (the gold step verifier scores every step, 06's process
advantages: the per-step evaluation SS-GRPO avoids) alike from one cold start, asks whether SS-GRPO recovers the
PRM's gain over GRPO, and shows who gets the credit, token by token (runs/07_ss_grpo/who_gets_the_credit.png).
Read beside: ss-grpo-step-sparse-grpo.txt, credit-assignment-problem-survey.txt §4.5. Papers: Shao et al. 2024;
Lightman et al. 2024; Schulman et al. 2016 (GAE). Study: studies/07_credit.py (seeds, what w(s) learns, costs).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

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
GAE_LAMBDA = 0.95  # the figure's PPO: token GAE(γ = 1, λ), studies/05_critic.py's λ
ROWS = {"grpo": "GRPO: A_i on every token", "ppo": f"PPO: critic, token GAE λ={GAE_LAMBDA}",
        "prm_grpo": "PRM-GRPO: gold step labels", "ss_grpo": "SS-GRPO: A_i · w(s)"}  # the figure's rows, in order


# ==== The method: the step-value estimator f(s, P) -> w(s) on each step, its targets and loss
class StepValueEstimator(nn.Module):
    """The article's small transformer encoder, plus learned position embeddings (its code has none: "12+7=19" and
    "21+7=91" would look alike) and attention to the prompt, pooled over the step's own tokens; padding masked out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, ffn: int):
        super().__init__()
        self.embed, self.position = nn.Embedding(vocab, hidden), nn.Embedding(MAX_POSITIONS, hidden)
        layer = nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.0, batch_first=True)
        self.encoder, self.head = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False), nn.Linear(hidden, 1)

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
    """The article's targets r̂ = (r - min_g) / (max_g - min_g + eps), (N, G): 0 in an all-equal group, right or not."""
    low, high = rewards.min(1, keepdim=True).values, rewards.max(1, keepdim=True).values
    return (rewards - low) / (high - low + eps)


def estimator_loss(weights: torch.Tensor, batch: StepBatch, targets: torch.Tensor) -> torch.Tensor:
    """The article's objective: the mean over completions (each once) of the mean over its steps of (w(s) - r̂_i)²."""
    squared = (weights - targets[batch.step_completion]) ** 2
    return segment_mean(squared, batch.step_completion, batch.num_completions).mean()


@dataclass
class StepBatch:
    """Every step of B completions as estimator rows: row r = prompt + one window of step window_step[r] (pool marks the
    window's tokens, attention the prompt's too); flat step k is line step_index[k] of completion step_completion[k]."""

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
        new_step, new_completion = step_keep.long().cumsum(0) - 1, keep.long().cumsum(0) - 1
        rows = step_keep[self.window_step]
        width = int((self.attention[rows].sum(1)).max())
        return StepBatch(self.ids[rows, :width], self.attention[rows, :width], self.pool[rows, :width],
                         new_step[self.window_step[rows]], new_completion[self.step_completion[step_keep]],
                         self.step_index[step_keep], int(keep.sum()))


def step_batch(completions: Completions, step_ids: torch.Tensor, end_tokens: torch.Tensor, chunk: int,
               pad_id: int) -> StepBatch:
    """Each completion cut into its steps (lm_world.token_step_ids), each step into windows of at most `chunk` tokens, a
    row prompt + window each; a step with no token of its own (the empty line in "\n\n") reads the token it ends in."""
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
    width, device = max(len(r) for r in rows), completions.sequences.device
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], device=device)
    attention = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows], device=device)
    pool = torch.tensor([p + [False] * (width - len(p)) for p in pools], device=device)
    index = (torch.tensor(values, device=device) for values in (window_step, step_completion, step_index))
    return StepBatch(ids, attention, pool, *index, num_completions=len(prompts))


def step_grid(values: torch.Tensor, batch: StepBatch) -> torch.Tensor:
    """Flat per-step values (S,) as a (B, max steps) grid; 0 where a completion has no such step."""
    grid = torch.zeros(batch.num_completions, int(batch.step_index.max()) + 1, device=values.device, dtype=values.dtype)
    grid[batch.step_completion, batch.step_index] = values
    return grid


def broadcast_to_tokens(grid: torch.Tensor, step_ids: torch.Tensor) -> torch.Tensor:
    """Token t of completion b gets grid[b, step of t]; masked tokens (step id -1) get 0."""
    return torch.where(step_ids >= 0, grid.gather(1, step_ids.clamp(min=0)), 0.0)


def read_steps(tokenizer, completions: Completions, problems: list) -> tuple[torch.Tensor, torch.Tensor, list]:
    """Each token's line (B, T; -1 off it), each line's end token (B, max steps), each first wrong line (gold; None)."""
    ids, mask = completions.completion_ids, completions.completion_mask
    texts = lm_world.completion_texts(tokenizer, completions)
    return (lm_world.token_step_ids(tokenizer, ids, mask), lm_world.step_end_tokens(tokenizer, ids, mask),
            [lm_world.first_wrong_step(p, t) for p, t in zip(problems, texts)])


# ==== Each method's credit, the loop's advantage_fn: GRPO's advantage (05, restated), process supervision by the
# gold step verifier (06, restated), SS-GRPO's A_i · w(s)
def grpo_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """05's GRPO advantage of each completion, rewards (N prompts, G completions)."""
    # A_i = (r_i - mean_g) / (std_g + eps)
    return (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + eps)


def process_advantages(step_rewards: torch.Tensor, rewarded: torch.Tensor, group_size: int,
                       eps: float = 1e-4) -> torch.Tensor:
    """06's process supervision (DeepSeekMath §4.1.3) on (B, T): `rewarded` cells z-scored in their group, summed on."""
    B, T = step_rewards.shape
    r, m = step_rewards.view(-1, group_size, T), rewarded.view(-1, group_size, T).float()
    count = m.sum((1, 2), keepdim=True).clamp(min=1)  # a group with no rewarded cell gets 0, not NaN
    mean = (r * m).sum((1, 2), keepdim=True) / count
    std = (((r - mean) ** 2 * m).sum((1, 2), keepdim=True) / (count - 1).clamp(min=1)).sqrt()
    # r̃_k = (r_k - mean_group) / (std_group + eps);  A_t = Σ_{k ≥ t} r̃_k
    normalised = ((r - mean) / (std + eps) * m).view(B, T)
    reward_to_come = rewarded.flip(1).cumsum(1).flip(1) > 0
    return normalised.flip(1).cumsum(1).flip(1) * reward_to_come


def gold_step_rewards(wrong: list[int | None], steps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gold step verifier on a (B, max steps) grid (1 before the first wrong line, 0 from it on); the real steps."""
    S = int(steps.max())
    index, first = torch.arange(S, device=steps.device)[None], [S if w is None else w for w in wrong]
    first, valid = torch.tensor(first, device=steps.device)[:, None], index < steps[:, None]
    return ((index < first) & valid).float(), valid


class Credit:
    """Every token's advantage under one method, its step's credit; SS-GRPO's estimator refitted every N updates."""

    def __init__(self, method: str, tokenizer, args: Args, estimator: StepValueEstimator | None, seed: int):
        self.method, self.tokenizer, self.args, self.estimator = method, tokenizer, args, estimator
        self.optimizer = torch.optim.Adam(estimator.parameters(), lr=args.est_lr) if estimator else None
        self.rng, self.learning = np.random.default_rng(seed), True  # learning off: w(s) read as it is (the figure)
        self.buffer, self.log = [], []  # the last N updates' (StepBatch, targets); per update, seconds and fit

    def __call__(self, completions: Completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        G = self.args.group_size
        step_ids, end_tokens, wrong = read_steps(self.tokenizer, completions, [p for p in problems for _ in range(G)])
        steps = step_ids.max(1).values + 1
        A, fit, start = grpo_advantages(rewards).flatten(), {}, time.time()
        if self.method == "grpo":  # A_i on every step
            grid = A[:, None].expand(-1, int(steps.max()))
        elif self.method == "prm_grpo":  # every step checked by the gold verifier (a free string compare here)
            grid = process_advantages(*gold_step_rewards(wrong, steps), G)
        else:  # SS-GRPO: every N updates f(s, P) fits r̂ on recent groups
            batch = step_batch(completions, step_ids, end_tokens, CHUNK, self.tokenizer.pad_token_id)
            fit = self.fit(batch, minmax_targets(rewards).flatten()) if self.learning else {}
            with torch.no_grad():
                w = step_grid(self.estimator.step_weights(batch), batch)
            grid = A[:, None] * w  # A_i(s) = A_i · w(s)
        self.log.append({**fit, "credit_s": time.time() - start})
        return broadcast_to_tokens(grid, step_ids)

    def fit(self, batch: StepBatch, targets: torch.Tensor) -> dict:
        """Store this update's groups; every N updates, est_iters Adam steps on est_groups groups of a stored update."""
        self.buffer = (self.buffer + [(batch, targets)])[-self.args.retrain_every:]
        if len(self.log) % self.args.retrain_every:
            return {}
        losses, tokens, groups, device = [], 0, batch.num_completions // self.args.group_size, targets.device
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


# ==== The RL loop: 05's, restated compactly (05_grpo_rloo.py teaches it in full)
def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """05's per-token KL(π || π_ref) estimate: k3 = r - log r - 1, r = π_ref/π."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def policy_gradient_step(policy, optimizer, completions: Completions, advantages: torch.Tensor,
                         ref_logp: torch.Tensor, beta: float, max_grad_norm: float) -> dict:
    """05's step with μ = 1 (the ratio is 1, the clip never acts), per-sequence normalised; returns the KL to the
    reference and the entropy per token, and the grad norm before clipping:
      loss = mean_i mean_{t in i} [ -A_it log π_θ(y_it) + β k3(π_θ, π_ref)_it ]"""
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
    """05's loop, the advantages left to `advantage_fn(completions, rewards (N, G), problems) -> (B, T)`: G samples of
    `prompts` fresh training problems and one step per update, held-out pass@1 every `eval_every` (history, evals)."""
    rng, generator = np.random.default_rng(args.seed), torch.Generator(device).manual_seed(args.seed)
    eval_generator = torch.Generator(device).manual_seed(args.seed + 1)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / args.warmup))
    exclude, history, evals = frozenset(p.prompt for p in args.task.held_out()), [], []  # never train on a held-out one

    def held_out_eval(step: int) -> None:
        result = evaluate(policy, tokenizer, held_out, args.eval_samples, args.max_new_tokens, eval_generator, device)
        evals.append({"step": step, "samples": step * args.prompts * args.group_size,
                      "pass@1": result["pass@1"], "length": result["length"]})

    for step in tqdm(range(args.rl_steps), desc=desc, leave=False):
        if step % args.eval_every == 0:
            held_out_eval(step)
        start, problems = time.time(), args.task.sample(args.prompts, rng, exclude=exclude)
        repeated = [p for p in problems for _ in range(args.group_size)]
        completions, texts = sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens,
                                    generator, device)
        rewards = verifier_rewards(repeated, texts, completions.truncated).to(device).view(args.prompts, args.group_size)
        generated, advantages = time.time(), advantage_fn(completions, rewards, problems)
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
        common.require(self.group_size >= 2, f"--group-size (K) must be at least 2 (a group), got {self.group_size}")
        super().__post_init__()
        common.require_positive(self, "rl_steps", "prompts", "lr", "warmup", "max_grad_norm", "eval_every", "est_layers",
                                "est_hidden", "est_heads", "est_ffn", "est_lr", "retrain_every", "est_iters",
                                "est_groups", "final_samples")
        common.require(self.beta >= 0, "--beta must be non-negative")
        common.require(self.est_hidden % self.est_heads == 0, "--est-hidden must be a multiple of --est-heads")


# ==== The experiment: each method from the same cold start, prompts, budget and seed
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
    policy, start, credit = copy.deepcopy(initial), time.time(), make_credit(method, tokenizer, args, device)
    result = train(policy, lm_world.frozen_copy(initial), tokenizer, args, credit, held_out, device, NAMES[method])
    final = held_out_pass(policy, tokenizer, held_out, args, device)
    result |= {"wall_clock_s": time.time() - start, "final": final, "credit": credit.log, "trained": (policy, credit)}
    print(f"  {NAMES[method]:16s} held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> {final['pass@1']:.3f}, "
          f"{result['wall_clock_s']:.0f} s")
    return result


# ==== Who gets the credit, token by token (01's rally figure); PPO's beside, restated from studies/05_critic.py
def token_gae(values: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """02_gae.py's GAE(γ, λ) over each completion's tokens, values and mask (B, T): R (B,) comes with the last one."""
    values, last = values * mask, mask & ~nn.functional.pad(mask[:, 1:], (0, 1))  # V = 0 after the last token
    # δ_t = r_t + γ V(s_{t+1}) - V(s_t), r_t = R on the last token and 0 before it
    deltas = torch.where(last, rewards[:, None], 0.0) + gamma * nn.functional.pad(values[:, 1:], (0, 1)) - values
    advantages, running = torch.zeros_like(deltas), torch.zeros_like(deltas[:, 0])
    for t in reversed(range(deltas.shape[1])):
        running = advantages[:, t] = deltas[:, t] + gamma * lam * running  # A_t = δ_t + γλ A_{t+1}
    return advantages


def ppo_credit(policy, completions: Completions, rewards: torch.Tensor):
    """PPO's advantage_fn: whitened token GAE(γ = 1, λ) on V(s_t), a linear head on the policy's trunk fitted by
    least squares to the outcomes R (B,) of `completions` (γ = 1, one reward at the end: every token's return is R)."""
    def features(c: Completions) -> torch.Tensor:  # the trunk's state where y_t is drawn (x, y_<t read), and a 1
        with torch.no_grad():
            hidden = policy.base_model(input_ids=c.sequences, attention_mask=c.attention_mask,
                                       position_ids=lm_world.positions_from_mask(c.attention_mask)).last_hidden_state
        return nn.functional.pad(hidden[:, c.prompt_length - 1:-1].float(), (0, 1), value=1.0)

    mask = completions.completion_mask  # the head minimises Σ_t (V(s_t) - R)² over the completions' tokens
    head = torch.linalg.lstsq(features(completions)[mask], rewards[:, None].expand(mask.shape)[mask, None]).solution

    def advantages(c: Completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        A = token_gae((features(c) @ head)[..., 0], rewards.flatten(), c.completion_mask, 1.0, GAE_LAMBDA)
        return torch.where(m := c.completion_mask, (A - A[m].mean()) / (A[m].std() + 1e-8), 0.0)  # whitened, as PPO does
    return advantages


def credit_example(runs: dict, tokenizer, args: Args, held_out: list, device) -> dict:
    """The figure, by rule: G samples of each held-out problem from the trained SS-GRPO policy (seed + 3), one batch
    for every method's advantage_fn; shown, the first group with a right and a wrong one (none: the first group)."""
    trained = {m: run.pop("trained") for m, run in runs.items()}  # (policy, credit) per method: not results
    policy, G = trained["ss_grpo"][0], args.group_size
    repeated = [p for p in held_out for _ in range(G)]
    completions, texts = sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens,
                                torch.Generator(device).manual_seed(args.seed + 3), device)
    rewards = verifier_rewards(repeated, texts, completions.truncated).to(device).view(-1, G)
    credits = {"ppo": ppo_credit(policy, completions, rewards.flatten())}
    for m, (_, credit) in trained.items():  # copies read as trained, never refitted; the runs' logs stay as they were
        credits[m] = copy.copy(credit)
        credits[m].learning, credits[m].log = False, []
    rows = {ROWS[m]: credits[m](completions, rewards, held_out).cpu() for m in ROWS}
    step_ids, _, wrong = read_steps(tokenizer, completions, repeated)
    g, panels = int((rewards.amin(1) < rewards.amax(1)).long().argmax()), []  # the first group with a spread
    for i in (g * G + int(rewards[g].argmax()), g * G + int(rewards[g].argmin())):  # its first right, first wrong
        ids = completions.completion_ids[i, :int(completions.lengths[i])].tolist()
        panels.append({"title": f"a {'right' if rewards.flatten()[i] else 'wrong'} completion",
                       "tokens": ["■" if t == tokenizer.eos_token_id else tokenizer.decode([t]) for t in ids],
                       "rows": {name: a[i, :len(ids)].numpy() for name, a in rows.items()},
                       "box": (step_ids[i, :len(ids)] == (-1 if wrong[i] is None else wrong[i])).cpu().numpy()})
    return {"panels": panels, "label": "advantage on the token (the loss's A_t)", "title": f"Who gets the credit? Two "
            f"of {G} samples of trained SS-GRPO on held-out {held_out[g].question.strip()}; boxed: the first wrong step"}


def check_claims(accuracy: dict) -> list[dict]:
    """Does the learned weight beat GRPO, and how much of the gold step verifier's gain does it
    recover? One seed has no interval, so no verdict: studies/07_credit.py decides over seeds."""
    ss, grpo, prm = accuracy["ss_grpo"], accuracy["grpo"], accuracy["prm_grpo"]
    gain, lead, source = prm - grpo, ss - grpo, "SS-GRPO article, Performance"
    one_seed = "; one seed: no interval, no verdict (studies/07_credit.py decides it over three seeds)"
    share = (f"{lead / gain:.0%} of a {100 * gain:+.1f}-point gain of the gold PRM-GRPO" if gain > 0 else
             f"the gold PRM-GRPO does not beat GRPO here ({prm:.3f} against {grpo:.3f}): no gain to share")
    return [common.claim(source, "SS-GRPO beats GRPO (its table: 77.5% against 72.3%)", f"held-out pass@1: SS-GRPO "
                         f"{ss:.3f} against GRPO {grpo:.3f} ({100 * lead:+.1f} points){one_seed}", None),
            common.claim(source, f"SS-GRPO recovers {ARTICLE_SHARE:.0%} of the PRM's accuracy gain over GRPO",
                         share + one_seed, None)]


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    held_out = args.task.held_out(args.eval_problems)
    before = held_out_pass(initial, tokenizer, held_out, args, device)
    print(f"07 SS-GRPO; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), device {device}; "
          f"cold start: held-out pass@1 {before['pass@1']:.3f}")
    runs, figure_start = {m: run_method(initial, tokenizer, args, m, held_out, device) for m in NAMES}, time.time()
    common.token_grid(out / "who_gets_the_credit.png", **credit_example(runs, tokenizer, args, held_out, device))
    accuracy = {m: run["final"]["pass@1"] for m, run in runs.items()}
    claims = check_claims(accuracy)
    gains = [[NAMES[m], p, f"{100 * (p - before['pass@1']):+.1f}"] for m, p in accuracy.items()]
    table = {"header": ["policy", "held-out pass@1", "Δ vs cold start (points)"],
             "rows": [["cold start", before["pass@1"], "-"], *gains]}
    metrics = {"cold_start_pass@1": before["pass@1"], **{f"{m}_pass@1": p for m, p in accuracy.items()},
               **{f"{m}_train_wall_clock_s": run["wall_clock_s"] for m, run in runs.items()},
               "credit_figure_wall_clock_s": time.time() - figure_start, "tables": {"methods": table}}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, cold_start=before, runs=runs)
    print(f"\nAfter {args.rl_steps} updates of {args.prompts}x{args.group_size} completions, seed {args.seed} "
          f"({args.eval_problems} held-out problems x {args.final_samples} samples):")
    print(common.format_table(table["rows"], table["header"]) + "\n\n" + common.format_claims(claims)
          + f"\n\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
