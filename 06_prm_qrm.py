"""06 — Dense credit for LMs: can a model give each step its own credit?

05 gave every token of a completion the same advantage. Here models score the parts of a
completion, on the same task and cold-start policy (lm_world.py), and this world's gold step labels
(the first line that differs from the worked solution) say whether their credit lands on the step
that went wrong:

  Math-Shepherd labels  from each step prefix of a sampled solution, roll out N completions:
                        hard label = any of them right (Math-Shepherd's N = 8)
  PRM                   a per-token score head, binary cross-entropy on each step's last token
                        only; P(step k right) read where step k ends
  Q-RM                  a token scorer Z trained on (right, wrong) pairs of one prompt with
                        -log σ(β (mean_t Z(τ_w) - mean_t Z(τ_l)) - γ): Z is per-token credit
  localisation          on failed held-out solutions: does the lowest credit fall on the first
                        wrong step? (the PRM's level, its drop from the previous step, Q-RM's Z)
  dense RL              the PRM's step scores as process rewards (DeepSeekMath:
                        A_t = Σ_{k≥t} (r_k - mean)/std), alone or with the verifier on the answer
                        step, in 05's step, against outcome-only GRPO on the same prompts and seed

The default run is compact (8 rollouts per prefix, 200 reward-model steps, RL on 8 x 8 completions
for 60 updates) and one seed, too few for its claims' verdicts: studies/06_seeds.py runs it on
several and decides them over the seeds. studies/06_overoptimisation.py runs it at full scale, with
the labels' quality, the ORM, best-of-N, Q-RM in RL, RL against a learned ORM, and length bias.

Read beside: survey §4.5, §9 (Q-RM), §10 (PRMs); over-long-generations (process rewards); whole-game
§7.2 (reward hacking). Papers: Lightman et al. 2024; Wang et al. 2024 (Math-Shepherd); Shao et al.
2024; Chen et al. 2025 (Q-RM). Figure: runs/06_prm_qrm/credit.png, one failed solution shaded by each credit.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

import common
import lm_world
from common import arg, claim
from lm_world import Completions, LMArgs, make_scorer, sample, token_logprobs, verifier_rewards

RL_METHODS = {"outcome": "outcome GRPO (verifier)", "prm": "PRM steps (process supervision)",
              "prm_outcome": "PRM steps, verifier on the answer step"}


# ==== Step labels: Math-Shepherd's from rollouts, and this world's gold ones
def step_prefixes(problem, text: str) -> list[str]:
    """The prompts Math-Shepherd completes: the problem and the solution up to step k, each k but the last."""
    lines = text.split("\n")
    return [problem.prompt + "\n".join(lines[:k + 1]) + "\n" for k in range(len(lines) - 1)]


def rollout_outcomes(policy, tokenizer, problems: list, texts: list[str], rollouts: int, max_new_tokens: int,
                     generator, device) -> list[np.ndarray]:
    """For each solution, a (steps - 1, rollouts) array: did completion j from prefix k reach the
    right answer? (The prefix's own tokens count toward the token budget of the completion.)"""
    prefixes = [step_prefixes(p, t) for p, t in zip(problems, texts)]
    prompts = [prefix for own in prefixes for prefix in own for _ in range(rollouts)]
    repeated = [p for p, own in zip(problems, prefixes) for _ in range(len(own) * rollouts)]
    right = np.zeros(0, dtype=bool)
    if prompts:
        continuations, tails = sample(policy, tokenizer, prompts, max_new_tokens, generator, device, chunk=1024)
        solutions = [prompt[len(p.prompt):] + tail for p, prompt, tail in zip(repeated, prompts, tails)]
        right = verifier_rewards(repeated, solutions, continuations.truncated).numpy().astype(bool)
    return np.split(right.reshape(-1, rollouts), np.cumsum([len(own) for own in prefixes])[:-1])


def math_shepherd_labels(outcomes: np.ndarray, final: float, n: int) -> list[float]:
    """The hard label of each step from the first n rollouts of its prefix: 1 if any of them is
    right (Math-Shepherd's HE); the last step's label is the verifier's verdict on the solution."""
    return [float(r.any()) for r in outcomes[:, :n]] + [final]


def gold_step_labels(problem, text: str) -> list[bool]:
    """Gold label of each step (line): true while no line so far differs from the worked solution."""
    wrong = lm_world.first_wrong_step(problem, text)
    n = len(text.split("\n"))
    return [wrong is None or k < wrong for k in range(n)]


# ==== Reward models: the PRM and Q-RM objectives, and scorers built from the policy's body
def step_targets(end_tokens: torch.Tensor, labels: list[list[float]], width: int) -> torch.Tensor:
    """Label k of each solution on the token where its line k ends (end_tokens (B, S)), 0 elsewhere,
    (B, width); a token that ends several lines (it holds two newlines) gets the mean of their labels."""
    per_step = torch.zeros(end_tokens.shape, device=end_tokens.device)
    for row, row_labels in enumerate(labels):
        per_step[row, :len(row_labels)] = torch.tensor(row_labels, dtype=torch.float, device=end_tokens.device)
    valid = (end_tokens >= 0).float()
    at = end_tokens.clamp(min=0)
    sums = torch.zeros(len(end_tokens), width, device=end_tokens.device).scatter_add_(1, at, per_step * valid)
    counts = torch.zeros_like(sums).scatter_add_(1, at, valid)
    return sums / counts.clamp(min=1)


def step_bce(scores: torch.Tensor, targets: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """The PRM loss: BCE of σ(score) against the step label on each step's last token only (TRL's PRMTrainer)."""
    losses = F.binary_cross_entropy_with_logits(scores, targets, reduction="none")
    return losses[ends].mean()


def qrm_loss(z_w: torch.Tensor, mask_w: torch.Tensor, z_l: torch.Tensor, mask_l: torch.Tensor,
             beta: float, gamma: float) -> torch.Tensor:
    """Q-RM's pairwise loss: -log σ(β (mean_t Z(τ_w) - mean_t Z(τ_l)) - γ), mean over pairs,
    each mean over that completion's tokens (Chen et al. 2025, the authors' "mean-score")."""
    def token_mean(z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (z * mask).sum(1) / mask.sum(1).clamp(min=1)

    return -F.logsigmoid(beta * (token_mean(z_w, mask_w.float()) - token_mean(z_l, mask_l.float())) - gamma).mean()


def scorer_logits(scorer, sequences: torch.Tensor, attention_mask: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """The score head's output at every completion token, (B, T): a logit, read where needed."""
    logits = scorer(input_ids=sequences, attention_mask=attention_mask,
                    position_ids=lm_world.positions_from_mask(attention_mask)).logits[..., 0]
    return logits[:, prompt_length:]


@torch.no_grad()
def reward_model_logits(scorer, completions: Completions, chunk: int = 1024) -> torch.Tensor:
    """`scorer_logits` on every completion token of every row, (B, T), `chunk` rows at a time."""
    c = completions
    return torch.cat([scorer_logits(scorer, c.sequences[i:i + chunk], c.attention_mask[i:i + chunk], c.prompt_length)
                      for i in range(0, len(c.sequences), chunk)])


def batch_scores(model, r: Completions, rows: torch.Tensor) -> torch.Tensor:
    """`scorer_logits` on rows of r, up to their longest completion (padding costs time), zero-padded back."""
    width = r.prompt_length + int(r.completion_mask[rows].sum(1).max())
    scores = scorer_logits(model, r.sequences[rows, :width], r.attention_mask[rows, :width], r.prompt_length)
    return F.pad(scores, (0, r.completion_mask.shape[1] - scores.shape[1]))


def fit_scorer(scorer, loss, n_items: int, args: Args, rng: np.random.Generator, desc: str) -> list[float]:
    """AdamW on random minibatches of item indices; loss(scorer, indices) -> scalar loss."""
    optimizer, losses = torch.optim.AdamW(scorer.parameters(), lr=args.rm_lr, weight_decay=0.0), []
    scorer.train()
    for _ in tqdm(range(args.rm_steps), desc=desc, leave=False):
        batch_loss = loss(scorer, torch.as_tensor(rng.choice(n_items, min(args.rm_batch, n_items), replace=False)))
        optimizer.zero_grad()
        batch_loss.backward()
        optimizer.step()
        losses.append(batch_loss.item())
    scorer.eval()
    return losses


def problem_groups(problems: list) -> list[range]:
    """The runs of consecutive rows that share one problem (its sampled solutions)."""
    starts = [i for i in range(len(problems)) if i == 0 or problems[i] is not problems[i - 1]]
    return [range(a, b) for a, b in zip(starts, starts[1:] + [len(problems)])]


def preference_pairs(problems: list, rewards: torch.Tensor) -> list[tuple[int, int]]:
    """Every (right, wrong) pair of solutions to the same problem (consecutive rows share one)."""
    return [(win, lose) for group in problem_groups(problems) for win in group if rewards[win] == 1
            for lose in group if rewards[lose] == 0]


def step_means(token_values: torch.Tensor, step_ids: torch.Tensor, end_tokens: torch.Tensor, steps: int) -> np.ndarray:
    """Each step's mean of a per-token value (one row); a step inside one token takes that token's."""
    return np.array([float(token_values[step_ids == k].mean()) if (step_ids == k).any()
                     else float(token_values[end_tokens[k]]) for k in range(steps)])


# ==== Dense credit in RL: process advantages, in 05's step and loop restated (05_grpo_rloo.py teaches them)
def process_advantages(step_rewards: torch.Tensor, rewarded: torch.Tensor, group_size: int,
                       eps: float = 1e-4) -> torch.Tensor:
    """DeepSeekMath's process supervision (Shao et al. 2024, §4.1.3) along the last dim of (B, T): the rewards at the
    `rewarded` positions (a step's last token, or one cell per step) are normalised over all rewarded positions of a
    group's G rows, and each position gets the sum of the normalised rewards at and after it; 0 after a row's last."""
    B, T = step_rewards.shape
    r, m = step_rewards.view(-1, group_size, T), rewarded.view(-1, group_size, T).float()
    count = m.sum((1, 2), keepdim=True).clamp(min=1)  # a group with no rewarded cell gets 0, not NaN
    mean = (r * m).sum((1, 2), keepdim=True) / count
    std = (((r - mean) ** 2 * m).sum((1, 2), keepdim=True) / (count - 1).clamp(min=1)).sqrt()
    # r̃_k = (r_k - mean_group) / (std_group + eps);  A_t = Σ_{k ≥ t} r̃_k
    normalised = ((r - mean) / (std + eps) * m).view(B, T)
    reward_to_come = rewarded.flip(1).cumsum(1).flip(1) > 0
    return normalised.flip(1).cumsum(1).flip(1) * reward_to_come


def prm_advantage_fn(prm, tokenizer, group_size: int, with_outcome: bool = False):
    """Process supervision with the PRM's P(step right) as each step's reward (with_outcome: the
    verifier's verdict on the answer step instead)."""
    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        ends = lm_world.step_end_mask(lm_world.token_step_ids(tokenizer, completions.completion_ids, completions.completion_mask))
        step_rewards = torch.where(ends, torch.sigmoid(reward_model_logits(prm, completions)), 0.0)
        if with_outcome:  # the answer step ends on the last token (EOS)
            last = completions.completion_mask.sum(1) - 1
            step_rewards[torch.arange(len(last)), last] = rewards.flatten().float()
        return process_advantages(step_rewards, ends, group_size)
    return advantage_fn


def grpo_advantages(rewards: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """05's GRPO advantage of each completion, rewards (N prompts, G completions)."""
    # A_i = (r_i - mean_g) / (std_g + eps)
    return (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + eps)


def outcome_advantage_fn(completions: Completions, rewards: torch.Tensor, problems) -> torch.Tensor:
    """Outcome-only GRPO: completion i's advantage on each of its tokens."""
    return grpo_advantages(rewards).flatten()[:, None] * completions.completion_mask.float()


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """05's per-token KL(π || π_ref) estimate: k3 = r - log r - 1, r = π_ref/π."""
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio - 1


def policy_gradient_step(policy, optimizer, completions: Completions, advantages: torch.Tensor,
                         ref_logp: torch.Tensor, beta: float, max_grad_norm: float) -> dict:
    """05's step with one optimiser step per batch (μ = 1): π_old is π_θ, the ratio is 1, the clip never acts, and PPO's
    surrogate has the loss's gradient. Returns the KL to the reference and entropy per token, the grad norm before clipping."""
    mask = completions.completion_mask
    logp, entropy = token_logprobs(policy, completions.sequences, completions.attention_mask,
                                   completions.prompt_length, with_entropy=True)
    per_token = -advantages * logp
    if beta > 0:
        per_token = per_token + beta * kl_k3(logp, ref_logp)
    # loss = mean_i mean_{t in i} [ -A_it log π_θ(y_it) + β k3(π_θ, π_ref)_it ]  (05's per-sequence normalisation)
    loss = (torch.where(mask, per_token, 0.0).sum(1) / mask.float().sum(1).clamp(min=1)).mean()
    optimizer.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()
    tokens = mask.sum().clamp(min=1)  # an all-padding batch has no token: statistics 0, not NaN
    return {"kl": float(torch.where(mask, kl_k3(logp.detach(), ref_logp), 0.0).sum() / tokens),
            "entropy": float(torch.where(mask, entropy.detach(), 0.0).sum() / tokens), "grad_norm": grad_norm.item()}


def train(policy, reference, tokenizer, args: Args, advantage_fn, held_out: list, device, desc: str = "RL") -> dict:
    """05's RL loop, the advantages left to `advantage_fn(completions, rewards (N, G), problems) -> (B, T)`: each update,
    G completions of `prompts` fresh training problems, verified, one step; every `eval_every` updates, held-out pass@1."""
    rng, generator = np.random.default_rng(args.seed), torch.Generator(device).manual_seed(args.seed)
    eval_generator = torch.Generator(device).manual_seed(args.seed + 1)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / args.warmup))
    exclude, history, evals = frozenset(p.prompt for p in args.task.held_out()), [], []  # never train on a held-out one

    def held_out_eval(step: int) -> None:
        result = lm_world.evaluate(policy, tokenizer, held_out, args.eval_samples, args.max_new_tokens, eval_generator, device)
        evals.append({"step": step, "samples": step * args.prompts * args.group_size,
                      "pass@1": result["pass@1"], "length": result["length"]})

    for step in tqdm(range(args.rl_steps), desc=desc, leave=False):
        if step % args.eval_every == 0:
            held_out_eval(step)
        problems = args.task.sample(args.prompts, rng, exclude=exclude)
        repeated = [p for p in problems for _ in range(args.group_size)]
        completions, texts = sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens,
                                    generator, device)
        rewards = verifier_rewards(repeated, texts, completions.truncated).to(device).view(args.prompts, args.group_size)
        advantages = advantage_fn(completions, rewards, problems)
        with torch.no_grad():
            ref_logp, _ = token_logprobs(reference, completions.sequences, completions.attention_mask, completions.prompt_length)
        stats = policy_gradient_step(policy, optimizer, completions, advantages, ref_logp, args.beta, args.max_grad_norm)
        schedule.step()
        history.append({"reward": float(rewards.mean()), "length": float(completions.lengths.float().mean()), **stats})
    held_out_eval(args.rl_steps)
    return {"history": history, "evals": evals}


@dataclass
class Args(LMArgs):
    out: str = arg("runs/06_prm_qrm", "output folder for figures and results.json")
    # the labelled data: cold-start solutions to training problems
    label_prompts: int = arg(256, "training problems whose sampled solutions train the reward models")
    label_samples: int = arg(6, "solutions sampled per training problem")
    rollouts_per_prefix: int = arg(8, "Math-Shepherd: completions rolled out from each step prefix")
    label_n: int = arg(8, "Math-Shepherd: the labels come from the first N rollouts (the paper's N = 8)")
    # the reward models
    rm_steps: int = arg(200, "optimiser steps for each reward model")
    rm_batch: int = arg(64, "solutions (or pairs) per reward-model step")
    rm_lr: float = arg(1e-3, "AdamW learning rate of the reward models")
    qrm_beta: float = arg(0.2, "Q-RM: β in -log σ(β Δ - γ) (the authors' script)")
    qrm_gamma: float = arg(2.0, "Q-RM: margin γ (the authors' script)")
    credit_samples: int = arg(16, "cold-start samples per held-out problem; the failed ones test localisation")
    # RL: 05's loop with one optimiser step per batch
    rl_steps: int = arg(60, "RL: policy updates")
    prompts: int = arg(8, "RL: prompts per update")
    group_size: int = arg(8, "RL: completions per prompt, G (TRL: num_generations)")
    lr: float = arg(1e-4, "RL: AdamW learning rate (TRL: learning_rate)")
    warmup: int = arg(20, "RL: updates of linear learning-rate warmup")
    beta: float = arg(0.04, "RL: weight β of the k3 KL penalty to the cold-start reference (TRL: beta)")
    max_grad_norm: float = arg(1.0, "RL: gradient clipping (TRL: max_grad_norm)")
    eval_every: int = arg(10, "RL: updates between held-out evaluations")

    SMOKE = dict(LMArgs.SMOKE_LM, rl_steps=2, prompts=2, group_size=2, eval_every=1, label_prompts=4,
                 label_samples=4, rollouts_per_prefix=4, label_n=4, rm_steps=2, rm_batch=4, credit_samples=4)

    def __post_init__(self):
        super().__post_init__()
        common.require_positive(self, "rl_steps", "prompts", "lr", "warmup", "max_grad_norm", "eval_every",
                                "label_prompts", "label_samples", "rollouts_per_prefix", "label_n", "rm_steps",
                                "rm_batch", "rm_lr", "qrm_beta", "credit_samples")
        common.require(self.group_size >= 2, f"--group-size must be at least 2 (GRPO's baseline), got {self.group_size}")
        common.require(self.beta >= 0, "--beta must be non-negative")
        common.require(self.label_n <= self.rollouts_per_prefix, "--label-n must be in 1..--rollouts-per-prefix")
        common.require(self.label_samples >= 2, "--label-samples must be at least 2: Q-RM pairs solutions of one problem")


# ==== The experiment: label solutions, train the reward models, read their credit, use it in RL
def label_study(policy, tokenizer, args: Args, device) -> dict:
    """`label_samples` solutions to each of `label_prompts` training problems; `rollouts_per_prefix`
    completions from every step prefix; each step labelled from the first `label_n`."""
    rng = np.random.default_rng(args.seed + 11)  # not the problems RL will draw (those use args.seed)
    generator, exclude = torch.Generator(device).manual_seed(args.seed), frozenset(p.prompt for p in args.task.held_out())
    problems = [p for p in args.task.sample(args.label_prompts, rng, exclude=exclude) for _ in range(args.label_samples)]
    completions, texts = sample(policy, tokenizer, [p.prompt for p in problems], args.max_new_tokens, generator,
                                device, chunk=1024)
    rewards = verifier_rewards(problems, texts, completions.truncated)
    outcomes = rollout_outcomes(policy, tokenizer, problems, texts, args.rollouts_per_prefix, args.max_new_tokens,
                                generator, device)
    return {"problems": problems, "completions": completions, "texts": texts, "rewards": rewards,
            "outcomes": outcomes, "labels": [math_shepherd_labels(o, float(r), args.label_n) for o, r in zip(outcomes, rewards)]}


def reward_model_losses(tokenizer, data: dict, args: Args) -> dict:
    """What each reward model learns, as (loss(model, item indices), number of items): the PRM the
    step labels where steps end, Q-RM every (right, wrong) pair of solutions to one problem."""
    r = data["completions"]
    ends = lm_world.step_end_mask(lm_world.token_step_ids(tokenizer, r.completion_ids, r.completion_mask))
    targets = step_targets(lm_world.step_end_tokens(tokenizer, r.completion_ids, r.completion_mask), data["labels"],
                           r.completion_mask.shape[1])
    pairs = torch.tensor(preference_pairs(data["problems"], data["rewards"]), dtype=torch.long).view(-1, 2)

    def prm_loss(model, rows):
        return step_bce(batch_scores(model, r, rows), targets[rows], ends[rows])

    def pair_loss(model, rows):
        win, lose = pairs[rows, 0], pairs[rows, 1]
        return qrm_loss(batch_scores(model, r, win), r.completion_mask[win], batch_scores(model, r, lose),
                        r.completion_mask[lose], args.qrm_beta, args.qrm_gamma)

    return {"prm": (prm_loss, len(r.sequences)), "qrm": (pair_loss, len(pairs))}


def train_reward_models(policy, losses: dict, args: Args) -> dict:
    """A scorer from the policy's body (Lightman et al. fine-tune the PRM from the base model too) for each of
    `losses`, trained on it. All are made before any trains; all draw minibatches from one random stream, in order."""
    rng = np.random.default_rng(args.seed + 3)
    models = {kind: make_scorer(policy) for kind in losses}
    trained = {kind: fit_scorer(models[kind], loss, n_items, args, rng, kind)
               for kind, (loss, n_items) in losses.items() if n_items}
    return {**models, "losses": trained}


def held_out_samples(policy, tokenizer, models: dict, args: Args, device) -> dict:
    """`credit_samples` cold-start solutions per held-out problem, verified, with the PRM's
    P(step right) and Q-RM's Z at every token (on the CPU, where the analysis runs)."""
    problems = [p for p in args.task.held_out(args.eval_problems) for _ in range(args.credit_samples)]
    generator = torch.Generator(device).manual_seed(args.seed + 4)
    r, texts = sample(policy, tokenizer, [p.prompt for p in problems], args.max_new_tokens, generator, device, chunk=1024)
    correct = verifier_rewards(problems, texts, r.truncated).numpy()
    return {"problems": problems, "texts": texts, "completions": r, "correct": correct,
            "truncated": r.truncated.cpu(), "mask": r.completion_mask.cpu(),
            "step_ids": lm_world.token_step_ids(tokenizer, r.completion_ids, r.completion_mask).cpu(),
            "ends": lm_world.step_end_tokens(tokenizer, r.completion_ids, r.completion_mask).cpu(),
            "prm_probs": torch.sigmoid(reward_model_logits(models["prm"], r)).cpu(),
            "z": reward_model_logits(models["qrm"], r).cpu()}


def step_credits(held: dict, i: int) -> dict[str, np.ndarray]:
    """Each method's credit for each step (line) of held-out solution i."""
    gold = np.array(gold_step_labels(held["problems"][i], held["texts"][i]), float)
    n, ends = len(gold), held["ends"][i]
    prm = held["prm_probs"][i][ends[:n]].numpy()
    return {"outcome only (flat)": np.zeros(n), "PRM step score": prm,
            "PRM drop (score - previous)": prm - np.concatenate([[1.0], prm[:-1]]),
            "Q-RM (mean Z of the step)": step_means(held["z"][i], held["step_ids"][i], ends, n),
            "gold verifier": gold - np.concatenate([[1.0], gold[:-1]])}


def credit_study(held: dict) -> dict:
    """Localisation over the failed held-out solutions (not cut by the token budget) with at least
    two steps whose first wrong step is one of their lines; one of them drawn token by token."""
    credits, wrong_steps, rows = {}, [], []
    for i, (p, t) in enumerate(zip(held["problems"], held["texts"])):
        wrong, n = lm_world.first_wrong_step(p, t), len(t.split("\n"))
        if held["correct"][i] == 0 and not held["truncated"][i] and n >= 2 and wrong is not None and wrong < n:
            for name, c in step_credits(held, i).items():
                credits.setdefault(name, []).append(c)
            wrong_steps.append(wrong)
            rows.append(i)
    results = {name: lm_world.localisation(c, wrong_steps) for name, c in credits.items()}
    i = pick_example(held["texts"], rows, wrong_steps)
    return {"solutions": len(rows), "results": results, "example": None if i is None else example_rows(held, i)}


def pick_example(texts: list[str], rows: list[int], wrong_steps: list[int]) -> int | None:
    """A failed solution with a right step before its first wrong one, and a step after it."""
    fits = [i for i, wrong in zip(rows, wrong_steps) if 1 <= wrong < len(texts[i].split("\n")) - 1]
    return (fits or rows or [None])[0]  # none fits: the first failure, if any


def example_rows(held: dict, i: int) -> dict:
    """Per-token credit of one solution for the figure: the step methods' credit spread over
    their step's tokens, and Q-RM's own per-token Z (standardised)."""
    n_tokens, credits = int(held["mask"][i].sum()), step_credits(held, i)
    ids, z = held["step_ids"][i][:n_tokens].numpy(), held["z"][i][:n_tokens].numpy()
    return {"text": held["texts"][i], "problem": held["problems"][i].question.strip(),
            "rows": {"outcome only (flat)": np.full(n_tokens, -1.0).tolist(),
                     "PRM drop": credits["PRM drop (score - previous)"][ids].tolist(),
                     "Q-RM Z (standardised)": ((z - z.mean()) / (z.std() + 1e-8)).tolist(),
                     "gold verifier": credits["gold verifier"][ids].tolist()}}


def rl_study(initial, tokenizer, models: dict, args: Args, device) -> dict:
    """Each of RL_METHODS' advantages in the same loop, from the cold start, same prompts and seed."""
    held_out, runs = args.task.held_out(args.eval_problems), {}
    advantages = {"outcome": outcome_advantage_fn, "prm": prm_advantage_fn(models["prm"], tokenizer, args.group_size),
                  "prm_outcome": prm_advantage_fn(models["prm"], tokenizer, args.group_size, with_outcome=True)}
    for method in RL_METHODS:
        start = time.time()
        runs[method] = train(copy.deepcopy(initial), lm_world.frozen_copy(initial), tokenizer, args, advantages[method],
                             held_out, device, f"RL {method}")
        runs[method]["wall_clock_s"] = time.time() - start
    return runs


# ==== Figure, claims and report
def plot_credit(example: dict, path) -> None:
    """One failed solution, a character a column, shaded by each method's credit (red low, green high)
    over its row's largest |credit|; the per-step methods shade a whole step alike."""
    rows = {name: np.asarray(v) / (np.abs(v).max() or 1.0) for name, v in example["rows"].items()}
    common.token_grid(path, [{"title": "", "tokens": [*example["text"], "■"], "rows": rows}],  # ■: EOS, the last step's end
                      f"Credit on one failed solution of {example['problem']}", "credit / its row's largest", "RdYlGn")


def over_seeds(values: list[float]) -> tuple[bool | None, str]:
    """common.seed_verdict on one value per seed, and its text; one seed has no interval, so no verdict."""
    if len(values) < 2:
        return None, f"{values[0]:+.3f} (one seed: no interval, no verdict; studies/06_seeds.py runs several)"
    holds, text = common.seed_verdict(values)
    return holds, f"{text} (mean [95% interval over {len(values)} seeds])"


LOCALISING = {  # the credit that should be lowest on the first wrong step: (source, statement)
    "PRM drop (score - previous)": ("survey §10", "a PRM localises the error to the step where reasoning went astray"),
    "Q-RM (mean Z of the step)": ("survey §9", "Q-RM assigns low credit to the tokens that caused the failure, from "
                                               "pairs alone (no step labels)")}


def credit_claims(*credits: dict) -> list[dict]:
    """Does the lowest credit fall on the first wrong step? One credit_study per seed: its AUROC
    over the seed's failed held-out solutions minus chance (0.5), decided over the seeds."""
    if not all(c["results"] for c in credits):
        return []
    solutions, claims = "/".join(str(c["solutions"]) for c in credits), []
    for name, (source, statement) in LOCALISING.items():
        auroc = [c["results"][name]["auroc"] for c in credits]
        holds, text = over_seeds(np.subtract(auroc, 0.5))
        claims.append(claim(source, statement, f"AUROC of the {name} for the first wrong step over {solutions} failed "
                            f"held-out solutions {np.mean(auroc):.3f}; minus chance (0.5) {text}", holds))
    return claims


def rl_claims(args: Args, *runs: dict) -> list[dict]:
    """The RL runs of each seed against each other, each difference decided over the seeds."""
    if not all({"outcome", "prm"} <= set(r) for r in runs):
        return []

    def final(method: str) -> list[float]:
        return [r[method]["evals"][-1]["pass@1"] for r in runs]

    def fall(method: str) -> list[float]:  # held-out pass@1 at the run's peak minus at its end
        return [max(e["pass@1"] for e in r[method]["evals"]) - r[method]["evals"][-1]["pass@1"] for r in runs]

    def versus(source: str, statement: str, method: str, other: str) -> dict:
        holds, text = over_seeds(np.subtract(final(method), final(other)))
        return claim(source, statement, f"held-out pass@1 after {args.rl_steps} updates, {RL_METHODS[method]} "
                     f"{np.mean(final(method)):.3f} minus {RL_METHODS[other]} {np.mean(final(other)):.3f}: {text}", holds)

    # a noisy curve's highest point lies above its end even when flat: outcome GRPO's fall (a reward no one games) is that
    proxy, text = over_seeds(np.subtract(fall("prm"), fall("outcome")))
    verified = ["outcome"] + (["prm_outcome"] if all("prm_outcome" in r for r in runs) else [])
    return [versus("over-long-generations", "a PRM converts the sparse credit problem into a dense one (better RL "
                   "than outcome-only)", "prm", "outcome"),
            claim("over-long-generations", "the PRM used as a dense reward is a second proxy and inherits the "
                  "over-optimisation risks of an ORM", f"held-out pass@1 at the peak minus at the end, PRM alone "
                  f"{np.mean(fall('prm')):.3f} minus outcome GRPO's (noise alone) {np.mean(fall('outcome')):.3f}: "
                  + text, proxy),
            *(versus("whole-game §7.2", "prefer a verifiable check to a learned score: RL with the verifier in the "
                     f"reward ends above RL on the learned PRM alone ({RL_METHODS[m]})", m, "prm") for m in verified)]


def tables_of(args: Args, credit: dict, runs: dict) -> dict:
    """The run's two tables (printed, shown in the docs): where each credit blames, pass@1 in RL."""
    steps = [e["step"] for e in next(iter(runs.values()))["evals"]]
    return {"localisation": {"title": f"Credit localisation on {credit['solutions']} failed held-out solutions",
                             "header": ["credit", "AUROC", "top-1"],
                             "rows": [[k, v["auroc"], v["top1"]] for k, v in credit["results"].items()]},
            "rl": {"title": f"Held-out pass@1 through RL, {args.prompts}x{args.group_size} completions per update",
                   "header": ["advantages", *(f"update {s}" for s in steps)],
                   "rows": [[RL_METHODS[m], *(e["pass@1"] for e in r["evals"])] for m, r in runs.items()]}}


def metrics_of(args: Args, data: dict, credit: dict, runs: dict) -> dict:
    metrics = {"label_solutions": len(data["texts"]), "label_solutions_right": float(data["rewards"].mean())}
    for name, loc in credit["results"].items():
        metrics.update({f"localisation_{k}[{name}]": v for k, v in loc.items()})
    for method, run in runs.items():
        metrics |= {f"rl[{method}]_pass@1_start": run["evals"][0]["pass@1"], f"rl[{method}]_pass@1_final":
                    run["evals"][-1]["pass@1"], f"rl[{method}]_wall_clock_s": run["wall_clock_s"]}
    return {**metrics, "tables": tables_of(args, credit, runs)}


def report(tables: dict, claims: list[dict]) -> None:
    for table in tables.values():
        print(f"\n{table['title']}:\n" + common.format_table(table["rows"], table["header"]))
    print("\n" + common.format_claims(claims))


def experiment(policy, tokenizer, args: Args, device) -> dict:
    """The chapter's experiment on args.seed: label, train the reward models, read their credit, RL."""
    common.seed_everything(args.seed)  # the same numbers whether the cold start was trained now or loaded
    data = label_study(policy, tokenizer, args, device)
    models = train_reward_models(policy, reward_model_losses(tokenizer, data, args), args)
    credit = credit_study(held_out_samples(policy, tokenizer, models, args, device))
    return {"data": data, "losses": models["losses"], "credit": credit,
            "runs": rl_study(policy, tokenizer, models, args, device)}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, policy, tokenizer, info = lm_world.start_lm_run(args)
    print(f"06 PRM and Q-RM credit; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), "
          f"device {device}")
    found = experiment(policy, tokenizer, args, device)
    data, credit, runs = found["data"], found["credit"], found["runs"]
    if credit["example"] is not None:
        plot_credit(credit["example"], out / "credit.png")
    claims = credit_claims(credit) + rl_claims(args, runs)
    metrics = metrics_of(args, data, credit, runs)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, localisation=credit["results"], rl=runs,
                         reward_model_losses=found["losses"],
                         cold_start_info={k: v for k, v in info.items() if k != "sft_losses"})
    report(metrics["tables"], claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}

if __name__ == "__main__":
    common.run_script(main, Args)
