"""06 — Dense credit for LMs: process reward models, Q-RM, and reward over-optimisation.

05 gave every token of a completion the same advantage. Here the credit gets denser, from models
that score parts of a completion, on the same task and cold-start policy (common.py):

  Math-Shepherd labels  from each step prefix of a sampled solution, roll out N completions:
                        hard label = any of them right, soft = the share right (gold labels
                        exist here, so we measure how often the automatic label is wrong)
  PRM / ORM             a per-token score head, binary cross-entropy on each step's last token
                        (PRM) or on the final token only (ORM); best-of-N by PRM (min or product
                        over steps), ORM, majority vote
  Q-RM                  a token scorer Z trained on (right, wrong) pairs of one prompt with
                        -log σ(β (mean_t Z(τ_w) - mean_t Z(τ_l)) - γ): Z is per-token credit
  dense RL              PRM step rewards (DeepSeekMath's process supervision
                        A_t = Σ_{k≥t} (r_k - mean)/std) and Q-RM credit as per-token advantages
                        in 05's step, against outcome-only GRPO on the same prompts and seed
  over-optimisation     best-of-N and RL (β = 0) against the learned ORM while the verifier
                        watches; Gao et al.'s R_bon(d) = d(α - βd), R_RL(d) = d(α - β log d)

Read beside: credit-assignment-problem-survey.txt §4.5, §9 (Q-RM), §10 (PRMs);
credit-assignment-over-long-generations.txt (process rewards, over-optimisation). Papers:
Lightman et al. 2024; Wang et al. 2024 (Math-Shepherd); Shao et al. 2024; Chen et al. 2025 (Q-RM);
Gao, Schulman & Hilton 2022. Figures in runs/06_prm_qrm/: label_quality.png, best_of_n.png,
credit.png (one failed solution coloured by each credit), rl.png, overoptimisation.png.
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
import torch.nn.functional as F
from tqdm import tqdm
from transformers import AutoModelForTokenClassification

from common import (
    Completions,
    LMArgs,
    arg,
    as_list,
    auroc,
    claim,
    evaluate,
    first_wrong_step,
    format_claims,
    format_table,
    frozen_copy,
    localisation,
    mean_or_nan,
    moving_average,
    pass_at_k,
    positions_from_mask,
    require,
    require_positive,
    run_script,
    sample,
    save_figure,
    seed_everything,
    start_lm_run,
    step_end_mask,
    step_end_tokens,
    token_logprobs,
    token_step_ids,
    verifier_rewards,
    write_results,
)

LIGHTMAN_N = 1860  # Lightman et al. (2024), best-of-1860 on MATH (their Figure 3)
LIGHTMAN = {"PRM": 0.782, "ORM": 0.724, "majority vote": 0.696}
RL_METHODS = ("outcome", "prm", "prm_outcome", "qrm")


# ============================================================================================
# Math-Shepherd: step labels from rollouts
# ============================================================================================


def step_prefixes(problem, text: str) -> list[str]:
    """The prompts Math-Shepherd completes: the problem, then the solution up to and including
    step k, for every step but the last (the last one's label is the verifier's verdict)."""
    lines = text.split("\n")
    return [problem.prompt + "\n".join(lines[:k + 1]) + "\n" for k in range(len(lines) - 1)]


def rollout_outcomes(policy, tokenizer, problems: list, texts: list[str], rollouts: int, max_new_tokens: int,
                     generator, device) -> list[np.ndarray]:
    """For each solution, a (steps - 1, rollouts) array: did completion j from prefix k reach the
    right answer? (The prefix's own tokens count toward the token budget of the completion.)"""
    jobs = [(i, p, prefix) for i, (p, t) in enumerate(zip(problems, texts)) for prefix in step_prefixes(p, t)]
    prompts = [prefix for _, _, prefix in jobs for _ in range(rollouts)]
    outcomes = np.zeros((len(jobs), rollouts), dtype=bool)
    if jobs:
        continuations, tails = sample(policy, tokenizer, prompts, max_new_tokens, generator, device, chunk=1024)
        repeated = [p for _, p, _ in jobs for _ in range(rollouts)]
        solutions = [prefix[len(p.prompt):] + tail for p, prefix, tail in zip(repeated, prompts, tails)]
        right = verifier_rewards(repeated, solutions, continuations.truncated)
        outcomes = right.numpy().astype(bool).reshape(len(jobs), rollouts)
    per_solution = [[] for _ in texts]
    for (i, _, _), row in zip(jobs, outcomes):
        per_solution[i].append(row)
    return [np.array(rows, dtype=bool).reshape(-1, rollouts) for rows in per_solution]


def math_shepherd_labels(outcomes: np.ndarray, final: float, n: int) -> tuple[list[float], list[float]]:
    """Hard and soft labels of each step from the first n rollouts of each prefix:
    hard = 1 if any completion is right (Math-Shepherd's HE), soft = the share right (SE).
    The last step's label is the verifier's verdict on the solution itself."""
    right = outcomes[:, :n]
    hard = [float(r.any()) for r in right] + [final]
    soft = [float(r.mean()) for r in right] + [final]
    return hard, soft


# ============================================================================================
# Reward models: the PRM, ORM and Q-RM objectives
# ============================================================================================


def step_targets(end_tokens: torch.Tensor, labels: list[list[float]], width: int) -> torch.Tensor:
    """Label k of each solution on the token where its line k ends (end_tokens (B, S), from
    common.step_end_tokens), as a (B, width) grid, 0 elsewhere. Where several lines end in one
    token (a token that holds two newlines), its target is the mean of their labels."""
    per_step = torch.zeros(end_tokens.shape, device=end_tokens.device)
    for row, row_labels in enumerate(labels):
        per_step[row, :len(row_labels)] = torch.tensor(row_labels, dtype=torch.float, device=end_tokens.device)
    valid = (end_tokens >= 0).float()
    at = end_tokens.clamp(min=0)
    sums = torch.zeros(len(end_tokens), width, device=end_tokens.device).scatter_add_(1, at, per_step * valid)
    counts = torch.zeros_like(sums).scatter_add_(1, at, valid)
    return sums / counts.clamp(min=1)


def step_bce(scores: torch.Tensor, targets: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """The PRM loss: binary cross-entropy of σ(score) against the step label, on the last token
    of each step only (every other token is masked out, as in TRL's PRMTrainer)."""
    losses = F.binary_cross_entropy_with_logits(scores, targets, reduction="none")
    return losses[ends].mean()


def last_token_mask(mask: torch.Tensor) -> torch.Tensor:
    """True on each row's last completion token (EOS): where an ORM reads its score."""
    last = mask.long().cumsum(1) == mask.long().sum(1, keepdim=True)
    return last & mask


def qrm_loss(z_w: torch.Tensor, mask_w: torch.Tensor, z_l: torch.Tensor, mask_l: torch.Tensor,
             beta: float, gamma: float) -> torch.Tensor:
    """Q-RM's pairwise loss: -log σ(β (mean_t Z(τ_w) - mean_t Z(τ_l)) - γ), mean over pairs,
    each mean over that completion's tokens (Chen et al. 2025, the authors' "mean-score")."""
    def token_mean(z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return (z * mask).sum(1) / mask.sum(1).clamp(min=1)

    return -F.logsigmoid(beta * (token_mean(z_w, mask_w.float()) - token_mean(z_l, mask_l.float())) - gamma).mean()


# ============================================================================================
# Reranking: a solution's score from its steps, best-of-N, majority vote
# ============================================================================================


def per_step(token_values: torch.Tensor, end_tokens: torch.Tensor, fill: float) -> torch.Tensor:
    """A per-token value read where each step ends, (B, S); `fill` beyond a row's steps."""
    values = token_values.gather(1, end_tokens.clamp(min=0))
    return torch.where(end_tokens >= 0, values, torch.full_like(values, fill))


def prm_min(token_probs: torch.Tensor, end_tokens: torch.Tensor) -> torch.Tensor:
    """A solution's PRM score = its worst step's P(right) (Lightman et al.: catches the first error)."""
    return per_step(token_probs, end_tokens, 1.0).min(1).values


def prm_product(token_probs: torch.Tensor, end_tokens: torch.Tensor) -> torch.Tensor:
    """A solution's PRM score = Π_k P(step k right) (Lightman et al.'s choice; penalises length)."""
    return per_step(token_probs, end_tokens, 1.0).prod(1)


def answer_codes(texts: list[str]) -> np.ndarray:
    """The final answer of each text as an integer; a missing or malformed answer gets its own
    negative code, so it never agrees with anything in a majority vote."""
    codes = []
    for i, text in enumerate(texts):
        last = text.split("\n")[-1]
        codes.append(int(last[1:]) if last[:1] == "#" and last[1:].isdigit() else -1 - i)
    return np.array(codes)


def best_of_n(scores: np.ndarray, correct: np.ndarray, ns: list[int], repeats: int,
              rng: np.random.Generator) -> dict[int, float]:
    """Accuracy of the highest-scoring of N samples, averaged over problems and `repeats` random
    N-subsets of each problem's samples (scores, correct: (problems, samples)). The subset
    comes in random order and argmax takes the first of equals: ties are broken at random."""
    P, M = scores.shape
    result = {}
    for N in ns:
        picks = []
        for _ in range(repeats):
            subset = np.argsort(rng.random((P, M)), axis=1)[:, :N]
            best = np.take_along_axis(scores, subset, 1).argmax(1)
            picks.append(np.take_along_axis(correct, subset[np.arange(P), best][:, None], 1))
        result[N] = float(np.mean(picks))
    return result


def votes(codes: np.ndarray) -> np.ndarray:
    """Majority vote as a score: how many samples of the same problem share each one's answer."""
    return (codes[:, :, None] == codes[:, None, :]).sum(2).astype(float)


def majority_of_n(codes: np.ndarray, correct: np.ndarray, ns: list[int], repeats: int,
                  rng: np.random.Generator) -> dict[int, float]:
    """Majority vote among N random samples (votes are counted inside the subset)."""
    P, M = codes.shape
    result = {}
    for N in ns:
        picks = []
        for _ in range(repeats):
            subset = np.argsort(rng.random((P, M)), axis=1)[:, :N]
            sub_codes = np.take_along_axis(codes, subset, 1)
            best = votes(sub_codes).argmax(1)
            picks.append(correct[np.arange(P), subset[np.arange(P), best]])
        result[N] = float(np.mean(picks))
    return result


# ============================================================================================
# Dense credit as per-token advantages
# ============================================================================================


def process_advantages(step_rewards: torch.Tensor, rewarded: torch.Tensor, group_size: int,
                       eps: float = 1e-4) -> torch.Tensor:
    """DeepSeekMath's process supervision (Shao et al. 2024, §4.1.3) along the last dim of (B, T):
    the rewards at the `rewarded` positions (a step's last token, or one cell per step) are
    normalised over all rewarded positions of a group's G rows, and each position gets the sum
    of the normalised rewards at and after it; 0 after a row's last reward."""
    B, T = step_rewards.shape
    r = step_rewards.view(-1, group_size, T)
    m = rewarded.view(-1, group_size, T).float()
    count = m.sum((1, 2), keepdim=True).clamp(min=1)  # a group with no rewarded cell gets 0, not NaN
    mean = (r * m).sum((1, 2), keepdim=True) / count
    std = (((r - mean) ** 2 * m).sum((1, 2), keepdim=True) / (count - 1).clamp(min=1)).sqrt()
    # r̃_k = (r_k - mean_group) / (std_group + eps)
    normalised = ((r - mean) / (std + eps) * m).view(B, T)
    # A_t = Σ_{k ≥ t} r̃_k
    reward_to_come = rewarded.flip(1).cumsum(1).flip(1) > 0
    return normalised.flip(1).cumsum(1).flip(1) * reward_to_come


def token_advantages(z: torch.Tensor, mask: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """Q-RM's credit as advantages: Z at each token, standardised over the tokens of the G
    completions of a prompt (the mean acts as the baseline V, so A_t ≈ Q_t - V)."""
    B, T = z.shape
    v = z.view(-1, group_size, T)
    m = mask.view(-1, group_size, T).float()
    count = m.sum((1, 2), keepdim=True)
    mean = (v * m).sum((1, 2), keepdim=True) / count
    std = (((v - mean) ** 2 * m).sum((1, 2), keepdim=True) / (count - 1).clamp(min=1)).sqrt()
    return ((v - mean) / (std + eps) * m).view(B, T)


def prm_advantage_fn(prm, tokenizer, group_size: int, with_outcome: bool = False):
    """Process supervision with the PRM's P(step right) as each step's reward; with_outcome puts
    the verifier's verdict in place of the PRM's on the last step (the answer line)."""
    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        ends = step_end_mask(token_step_ids(tokenizer, completions.completion_ids, completions.completion_mask))
        step_rewards = torch.where(ends, torch.sigmoid(reward_model_logits(prm, completions)), 0.0)
        if with_outcome:
            last = last_token_mask(completions.completion_mask)
            step_rewards = torch.where(last, rewards.flatten()[:, None].float(), step_rewards)
        return process_advantages(step_rewards, ends, group_size)
    return advantage_fn


def qrm_advantage_fn(qrm, group_size: int):
    """Q-RM's per-token Z as advantages (`token_advantages`)."""
    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        return token_advantages(reward_model_logits(qrm, completions), completions.completion_mask, group_size)
    return advantage_fn


def centred_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """05's Dr. GRPO advantage of each completion, rewards (N prompts, G completions)."""
    # A_i = r_i - mean_g
    return rewards - rewards.mean(1, keepdim=True)


def proxy_advantage_fn(orm, reference, group_size: int, log: list):
    """Group-centred advantages (05's Dr. GRPO) on the learned ORM's P(right) instead of the
    verifier. Logs, per update, the proxy and the sequence KL(π || π_ref), estimated as
    mean_i Σ_t log π(y_t)/π_ref(y_t) (k1, summed)."""
    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        proxy = torch.sigmoid(reward_model_logits(orm, completions))[last_token_mask(completions.completion_mask)]
        with torch.no_grad():
            ref_logp, _ = token_logprobs(reference, completions.sequences, completions.attention_mask,
                                         completions.prompt_length)
        kl = ((completions.logprobs - ref_logp) * completions.completion_mask).sum(1).mean()
        log.append({"proxy": float(proxy.mean()), "kl": float(kl), "gold": float(rewards.mean())})
        # centred, not z-scored: GRPO's std division would blow tiny proxy differences up to unit advantages
        return centred_advantages(proxy.view(-1, group_size)).flatten()[:, None] * completions.completion_mask.float()
    return advantage_fn


# ============================================================================================
# Over-optimisation: the KL of best-of-N, Gao et al.'s functional forms
# ============================================================================================


def best_of_n_kl(n: int | np.ndarray) -> float | np.ndarray:
    """KL(best-of-n || π) = log n - (n-1)/n: the analytic value used by Gao et al. (exact for a
    continuous reward, an upper bound in general, Beirami et al. 2024)."""
    return np.log(n) - (n - 1) / n


def fit_gao(d: np.ndarray, gain: np.ndarray, form: str) -> dict:
    """Least squares for R(d) = d(α - β d) ("bon") or R(d) = d(α - β log d) ("rl"), both linear
    in (α, β); R is the gold reward's gain over the reference policy, d = sqrt(KL)."""
    d, gain = np.asarray(d, float), np.asarray(gain, float)
    keep = d > 0
    d, gain = d[keep], gain[keep]
    if len(d) < 2:
        return {"alpha": float("nan"), "beta": float("nan"), "r2": float("nan")}
    second = d * d if form == "bon" else d * np.log(d)
    X = np.stack([d, -second], 1)
    (alpha, beta), *_ = np.linalg.lstsq(X, gain, rcond=None)
    fitted = X @ np.array([alpha, beta])
    total = ((gain - gain.mean()) ** 2).sum()
    return {"alpha": float(alpha), "beta": float(beta),
            "r2": float(1 - ((gain - fitted) ** 2).sum() / total) if total > 0 else float("nan")}


def gao_curve(d: np.ndarray, fit: dict, form: str) -> np.ndarray:
    """R_bon(d) = d(α - βd) or R_RL(d) = d(α - β log d) with the fitted α, β."""
    d = np.asarray(d, float)
    if form == "bon":
        return d * (fit["alpha"] - fit["beta"] * d)
    return d * (fit["alpha"] - fit["beta"] * np.log(np.maximum(d, 1e-12)))


# ============================================================================================
# This world: gold step labels, and reward models built from the policy's body
# ============================================================================================


def gold_step_labels(problem, text: str) -> list[bool]:
    """Gold label of each step (line): true while no line so far differs from the worked
    solution, i.e. the prefix can still be completed to the right answer by right steps."""
    wrong = first_wrong_step(problem, text)
    n = len(text.split("\n"))
    return [wrong is None or k < wrong for k in range(n)]


def label_quality(gold: np.ndarray, counts: np.ndarray, rollouts: int, n: int) -> dict:
    """Expected quality of the hard label from n rollouts, exactly, given c of `rollouts` right
    per step: P(label = 1) = pass@n = 1 - C(rollouts-c, n)/C(rollouts, n). Positive = "step
    right". False positive: a wrong prefix that a lucky completion rescued; false negative: a
    right prefix that no completion finished."""
    p_one = np.array([pass_at_k(rollouts, int(c), n) for c in counts])
    gold = gold.astype(bool)
    return {"accuracy": float(np.where(gold, p_one, 1 - p_one).mean()),
            "false_positive_rate": mean_or_nan(p_one[~gold]), "false_negative_rate": mean_or_nan(1 - p_one[gold])}


def make_scorer(policy):
    """A token-classification model of the policy's own family with one output per token (the
    score head), its body copied from the policy (Lightman et al. fine-tune the PRM from the
    base model too)."""
    config = copy.deepcopy(policy.config)
    config.num_labels = 1
    scorer = AutoModelForTokenClassification.from_config(config).to(policy.device)
    scorer.base_model.load_state_dict(policy.base_model.state_dict())
    return scorer


def scorer_logits(scorer, sequences: torch.Tensor, attention_mask: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """The score head's output at every completion token, (B, T): a logit, read where needed."""
    logits = scorer(input_ids=sequences, attention_mask=attention_mask,
                    position_ids=positions_from_mask(attention_mask)).logits[..., 0]
    return logits[:, prompt_length:]


@torch.no_grad()
def reward_model_logits(scorer, completions: Completions, chunk: int = 1024) -> torch.Tensor:
    """`scorer_logits` on every completion token of every row, (B, T), `chunk` rows at a time."""
    c = completions
    return torch.cat([scorer_logits(scorer, c.sequences[i:i + chunk], c.attention_mask[i:i + chunk], c.prompt_length)
                      for i in range(0, len(c.sequences), chunk)])


def fit_scorer(scorer, loss_of_batch, n_items: int, args: Args, rng: np.random.Generator, desc: str) -> list[float]:
    """AdamW on random minibatches of item indices; loss_of_batch(indices) -> scalar loss."""
    optimizer = torch.optim.AdamW(scorer.parameters(), lr=args.rm_lr, weight_decay=0.0)
    scorer.train()
    losses = []
    for _ in tqdm(range(args.rm_steps), desc=desc, leave=False):
        loss = loss_of_batch(torch.as_tensor(rng.choice(n_items, min(args.rm_batch, n_items), replace=False)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scorer.eval()
    return losses


def step_means(token_values: torch.Tensor, step_ids: torch.Tensor, end_tokens: torch.Tensor, steps: int) -> np.ndarray:
    """The mean of a per-token value over the tokens of each step (one row); a step with no token
    of its own (it begins and ends inside one token) takes the value of the token it ends in."""
    return np.array([float(token_values[step_ids == k].mean()) if (step_ids == k).any()
                     else float(token_values[end_tokens[k]]) for k in range(steps)])


# ============================================================================================
# The RL loop: 05's, restated compactly (05_grpo_rloo.py teaches it in full)
# ============================================================================================


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
    out: str = arg("runs/06_prm_qrm", "output folder for figures and results.json")
    # the labelled data: cold-start solutions to training problems
    label_prompts: int = arg(256, "training problems whose sampled solutions train the reward models")
    label_samples: int = arg(6, "solutions sampled per training problem")
    rollouts_per_prefix: int = arg(16, "Math-Shepherd: completions rolled out from each step prefix (largest N)")
    label_ns: str = arg("1,2,4,8,16", "Math-Shepherd: the N at which label quality is measured (at most "
                        "--rollouts-per-prefix)", item=int)
    label_n: int = arg(8, "Math-Shepherd: N of the labels the PRM trains on (the paper's N = 8)")
    labels: str = arg("hard", "PRM training labels: Math-Shepherd hard or soft, or the gold step labels",
                      choices=("hard", "soft", "gold"))
    # the reward models
    rm_steps: int = arg(400, "optimiser steps for each reward model (PRM, ORM, Q-RM)")
    rm_batch: int = arg(64, "solutions (or pairs) per reward-model step")
    rm_lr: float = arg(1e-3, "AdamW learning rate of the reward models")
    qrm_beta: float = arg(0.2, "Q-RM: β in -log σ(β Δ - γ) (the authors' script)")
    qrm_gamma: float = arg(2.0, "Q-RM: margin γ (the authors' script)")
    # best-of-N and credit localisation on held-out problems
    bon_samples: int = arg(64, "best-of-N: samples per held-out problem (the largest N)")
    bon_repeats: int = arg(64, "best-of-N: random subsets of size N drawn per problem")
    # RL: 05's loop with one optimiser step per batch
    rl_steps: int = arg(80, "RL: policy updates")
    prompts: int = arg(16, "RL: prompts per update")
    group_size: int = arg(8, "RL: completions per prompt, G (TRL: num_generations)")
    lr: float = arg(1e-4, "RL: AdamW learning rate (TRL: learning_rate)")
    warmup: int = arg(20, "RL: updates of linear learning-rate warmup")
    beta: float = arg(0.04, "RL: weight β of the k3 KL penalty to the cold-start reference (TRL: beta)")
    max_grad_norm: float = arg(1.0, "RL: gradient clipping (TRL: max_grad_norm)")
    eval_every: int = arg(10, "RL: updates between held-out evaluations")
    rl_methods: str = arg("outcome,prm,prm_outcome,qrm", "RL: advantages to compare (outcome GRPO, PRM steps, "
                          "PRM steps with the verifier on the last step, Q-RM tokens)", RL_METHODS, item=str)
    overopt_steps: int = arg(120, "over-optimisation: RL updates against the learned ORM")
    overopt_lr: float = arg(3e-4, "over-optimisation: learning rate, 3x --lr's default (β = 0: nothing holds the policy back)")

    SMOKE = dict(LMArgs.SMOKE_LM, rl_steps=2, prompts=2, group_size=2, eval_every=1, label_prompts=4,
                 label_samples=4, rollouts_per_prefix=4, label_ns="1,4", label_n=4, rm_steps=2, rm_batch=4,
                 bon_samples=4, bon_repeats=2, overopt_steps=2)

    def __post_init__(self):
        super().__post_init__()
        require_positive(self, "rl_steps", "prompts", "lr", "warmup", "max_grad_norm", "eval_every", "label_prompts",
                         "label_samples", "rollouts_per_prefix", "label_n", "rm_steps", "rm_batch", "rm_lr", "qrm_beta",
                         "bon_samples", "bon_repeats", "overopt_steps", "overopt_lr")
        require(self.group_size >= 2, f"--group-size must be at least 2: GRPO takes the baseline from the other "
                f"completions of the same prompt, got {self.group_size}")
        require(self.beta >= 0, "--beta must be non-negative")
        n_max = self.rollouts_per_prefix
        require(all(0 < n <= n_max for n in self.label_n_list) and self.label_n <= n_max,
                "--label-ns and --label-n must be in 1..--rollouts-per-prefix")
        require(self.label_samples >= 2, "--label-samples must be at least 2: Q-RM pairs a right and a wrong "
                "solution of the same problem")
        require(self.rl_method_list and set(self.rl_method_list) <= set(RL_METHODS),
                f"--rl-methods must be among {','.join(RL_METHODS)}")

    @property
    def label_n_list(self) -> list[int]:
        return as_list(self.label_ns, int)

    @property
    def rl_method_list(self) -> list[str]:
        return as_list(self.rl_methods, str)


# ============================================================================================
# Study 1: solutions of the cold start, their automatic and gold step labels
# ============================================================================================


def label_study(policy, tokenizer, args: Args, device) -> dict:
    """Sample `label_samples` solutions to each of `label_prompts` training problems, roll out
    from every step prefix, and compare the automatic labels with the gold ones."""
    rng = np.random.default_rng(args.seed + 11)  # not the problems RL will draw (those use args.seed)
    generator = torch.Generator(device).manual_seed(args.seed)
    exclude = frozenset(p.prompt for p in args.task.held_out())
    problems = [p for p in args.task.sample(args.label_prompts, rng, exclude=exclude) for _ in range(args.label_samples)]
    completions, texts = sample(policy, tokenizer, [p.prompt for p in problems], args.max_new_tokens, generator,
                                device, chunk=1024)
    rewards = verifier_rewards(problems, texts, completions.truncated)
    start = time.time()
    n_max = args.rollouts_per_prefix
    outcomes = rollout_outcomes(policy, tokenizer, problems, texts, n_max, args.max_new_tokens, generator, device)
    gold = [gold_step_labels(p, t) for p, t in zip(problems, texts)]
    labels = [math_shepherd_labels(o, float(r), args.label_n) for o, r in zip(outcomes, rewards)]
    # quality of the hard label at each N, over every step (the last step's label is exact: c = 0 or all)
    counts = np.concatenate([np.concatenate([o.sum(1), [float(r) * n_max]]) for o, r in zip(outcomes, rewards)])
    all_gold = np.concatenate([np.array(g, dtype=bool) for g in gold])
    inner = np.concatenate([np.arange(len(g)) < len(g) - 1 for g in gold])  # the steps that needed rollouts
    quality = {n: label_quality(all_gold, counts, n_max, n) for n in args.label_n_list}
    quality_inner = {n: label_quality(all_gold[inner], counts[inner], n_max, n) for n in args.label_n_list}
    soft = counts / n_max
    soft_auroc = auroc(soft[all_gold], soft[~all_gold])
    print(f"labels: {len(texts)} solutions ({float(rewards.mean()):.2f} right), {int(inner.sum())} step prefixes x "
          f"{n_max} rollouts in {time.time() - start:.0f} s; hard-label accuracy at N={args.label_n_list[-1]}: "
          f"{quality[args.label_n_list[-1]]['accuracy']:.3f}")
    return {"problems": problems, "completions": completions, "texts": texts, "rewards": rewards, "gold": gold,
            "hard": [h for h, _ in labels], "soft": [s for _, s in labels], "quality": quality,
            "quality_inner_steps": quality_inner, "soft_auroc": soft_auroc,
            "soft_mean_on_gold_right": mean_or_nan(soft[all_gold]),
            "soft_mean_on_gold_wrong": mean_or_nan(soft[~all_gold]),
            "steps_labelled": int(len(all_gold)), "prefixes_rolled_out": int(inner.sum())}


# ============================================================================================
# Study 2: train the PRM, the ORM and Q-RM on those solutions
# ============================================================================================


def preference_pairs(problems: list, rewards: torch.Tensor) -> list[tuple[int, int]]:
    """Every (right, wrong) pair of solutions to the same problem (consecutive rows share one)."""
    pairs, start = [], 0
    while start < len(problems):
        end = start
        while end < len(problems) and problems[end] is problems[start]:
            end += 1
        group = range(start, end)
        pairs += [(win, lose) for win in group if rewards[win] == 1 for lose in group if rewards[lose] == 0]
        start = end
    return pairs


def train_reward_models(policy, tokenizer, data: dict, args: Args) -> dict:
    """The PRM on the step labels (--labels), the ORM on the verifier's verdicts, Q-RM on every
    (right, wrong) pair of solutions to one problem; each from a copy of the policy's body."""
    rng = np.random.default_rng(args.seed + 3)
    r = data["completions"]
    ends = step_end_mask(token_step_ids(tokenizer, r.completion_ids, r.completion_mask))
    step_labels = {"hard": data["hard"], "soft": data["soft"],
                   "gold": [[float(g) for g in gold] for gold in data["gold"]]}[args.labels]
    prm_targets = step_targets(step_end_tokens(tokenizer, r.completion_ids, r.completion_mask), step_labels,
                               r.completion_mask.shape[1])
    last = last_token_mask(r.completion_mask)
    orm_targets = last.float() * data["rewards"].to(last.device)[:, None]
    pairs = torch.tensor(preference_pairs(data["problems"], data["rewards"]), dtype=torch.long).view(-1, 2)

    def scores_of(model, rows):  # the batch's columns up to its longest completion (padding costs time)
        width = r.prompt_length + int(r.completion_mask[rows].sum(1).max())
        scores = scorer_logits(model, r.sequences[rows, :width], r.attention_mask[rows, :width], r.prompt_length)
        return F.pad(scores, (0, r.completion_mask.shape[1] - scores.shape[1]))

    prm, orm, qrm = make_scorer(policy), make_scorer(policy), make_scorer(policy)
    losses = {
        "prm": fit_scorer(prm, lambda rows: step_bce(scores_of(prm, rows), prm_targets[rows], ends[rows]),
                          len(r.sequences), args, rng, "PRM"),
        "orm": fit_scorer(orm, lambda rows: step_bce(scores_of(orm, rows), orm_targets[rows], last[rows]),
                          len(r.sequences), args, rng, "ORM"),
    }
    if len(pairs):
        def qrm_batch(rows):
            win, lose = pairs[rows, 0], pairs[rows, 1]
            return qrm_loss(scores_of(qrm, win), r.completion_mask[win], scores_of(qrm, lose), r.completion_mask[lose],
                            args.qrm_beta, args.qrm_gamma)
        losses["qrm"] = fit_scorer(qrm, qrm_batch, len(pairs), args, rng, "Q-RM")
    print(f"reward models trained: PRM ({args.labels} labels) loss {np.mean(losses['prm'][-20:]):.3f}, "
          f"ORM {np.mean(losses['orm'][-20:]):.3f}, Q-RM on {len(pairs)} pairs "
          f"{np.mean(losses.get('qrm', [float('nan')])[-20:]):.3f}")
    return {"prm": prm, "orm": orm, "qrm": qrm, "losses": losses, "pairs": len(pairs)}


# ============================================================================================
# Study 3: best-of-N and credit localisation on held-out problems
# ============================================================================================


def held_out_study(policy, tokenizer, models: dict, args: Args, device) -> dict:
    """`bon_samples` cold-start solutions per held-out problem: best-of-N by each reranker, and
    where each credit puts the blame in the failed ones."""
    problems = args.task.held_out(args.eval_problems)
    M = args.bon_samples
    repeated = [p for p in problems for _ in range(M)]
    generator = torch.Generator(device).manual_seed(args.seed + 4)
    r, texts = sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens, generator, device,
                      chunk=1024)
    correct = verifier_rewards(repeated, texts, r.truncated).numpy()
    step_ids = token_step_ids(tokenizer, r.completion_ids, r.completion_mask)
    ends = step_end_tokens(tokenizer, r.completion_ids, r.completion_mask)
    prm_probs = torch.sigmoid(reward_model_logits(models["prm"], r)).cpu()  # the analysis below is on the CPU
    orm_probs = torch.sigmoid(reward_model_logits(models["orm"], r))[last_token_mask(r.completion_mask)].cpu()
    z = reward_model_logits(models["qrm"], r).cpu()
    step_ids, ends, completion_mask = step_ids.cpu(), ends.cpu(), r.completion_mask.cpu()
    mask = completion_mask.float()
    rankers = {"PRM-min": prm_min(prm_probs, ends), "PRM-product": prm_product(prm_probs, ends),
               "ORM": orm_probs, "Q-RM (mean Z)": (z * mask).sum(1) / mask.sum(1)}
    ns = [2 ** i for i in range(int(math.log2(M)) + 1)]
    shape = (len(problems), M)
    correct_pm = correct.reshape(shape)
    curves = {name: best_of_n(s.numpy().reshape(shape), correct_pm, ns, args.bon_repeats,
                              np.random.default_rng(args.seed + 5)) for name, s in rankers.items()}
    curves["majority vote"] = majority_of_n(answer_codes(texts).reshape(shape), correct_pm, ns, args.bon_repeats,
                                            np.random.default_rng(args.seed + 5))
    counts = correct_pm.sum(1)
    curves["oracle (pass@N)"] = {N: float(np.mean([pass_at_k(M, int(c), N) for c in counts])) for N in ns}
    orm_pm = orm_probs.numpy().reshape(shape)
    proxy_of_pick = best_of_n(orm_pm, orm_pm, ns, args.bon_repeats, np.random.default_rng(args.seed + 5))
    credit = credit_study(repeated, texts, correct, r.truncated.cpu(), step_ids, ends, prm_probs, z, completion_mask)
    print(f"best-of-N at N={ns[-1]}: " + ", ".join(f"{k} {v[ns[-1]]:.3f}" for k, v in curves.items()))
    return {"ns": ns, "curves": curves, "orm_proxy_of_pick": proxy_of_pick, "credit": credit,
            "pass@1": float(correct.mean()), "samples": len(texts)}


def step_credits(prm_probs_row, z_row, step_ids_row, ends_row, gold: list[bool]) -> dict[str, np.ndarray]:
    """Each method's credit for each step (line) of one solution; ends_row: where each line ends."""
    n = len(gold)
    prm = prm_probs_row[ends_row[:n]].numpy()
    before = np.concatenate([[1.0], prm[:-1]])
    gold_value = np.array(gold, float)
    return {"outcome only (flat)": np.zeros(n),
            "PRM step score": prm,
            "PRM drop (score - previous)": prm - before,
            "Q-RM (mean Z of the step)": step_means(z_row, step_ids_row, ends_row, n),
            "gold verifier": gold_value - np.concatenate([[1.0], gold_value[:-1]])}


def credit_study(problems, texts, correct, truncated, step_ids, ends, prm_probs, z, mask) -> dict:
    """Failed solutions (not cut by the token budget) with at least two steps whose first wrong
    step is one of their lines."""
    credits, wrong_steps, rows = {}, [], []
    for i, (p, t) in enumerate(zip(problems, texts)):
        wrong, n = first_wrong_step(p, t), len(t.split("\n"))
        if correct[i] == 0 and not truncated[i] and n >= 2 and wrong is not None and wrong < n:
            for name, c in step_credits(prm_probs[i], z[i], step_ids[i], ends[i], gold_step_labels(p, t)).items():
                credits.setdefault(name, []).append(c)
            wrong_steps.append(wrong)
            rows.append(i)
    results = {name: localisation(c, wrong_steps) for name, c in credits.items()}
    i = pick_example(problems, texts, rows, wrong_steps)
    example = None if i is None else example_rows(problems[i], texts[i], step_ids[i], ends[i], prm_probs[i], z[i], mask[i])
    return {"solutions": len(rows), "results": results, "example": example}


def pick_example(problems, texts, rows: list[int], wrong_steps: list[int]) -> int | None:
    """A failed solution with a right step before its first wrong one, and a step after it."""
    for i, wrong in zip(rows, wrong_steps):
        if 1 <= wrong < len(texts[i].split("\n")) - 1:
            return i
    return rows[0] if rows else None


def example_rows(problem, text: str, step_ids_row, ends_row, prm_probs_row, z_row, mask_row) -> dict:
    """Per-token credit of one solution for the figure: the step methods' credit spread over
    their step's tokens, and Q-RM's own per-token Z (standardised)."""
    n_tokens = int(mask_row.sum())
    ids = step_ids_row[:n_tokens].numpy()
    credits = step_credits(prm_probs_row, z_row, step_ids_row, ends_row, gold_step_labels(problem, text))
    z = z_row[:n_tokens].numpy()
    return {"text": text, "problem": problem.question.strip(),
            "rows": {"outcome only (flat)": np.full(n_tokens, -1.0).tolist(),
                     "PRM drop": credits["PRM drop (score - previous)"][ids].tolist(),
                     "Q-RM Z (standardised)": ((z - z.mean()) / (z.std() + 1e-8)).tolist(),
                     "gold verifier": credits["gold verifier"][ids].tolist()}}


# ============================================================================================
# Study 4: dense rewards in RL, and RL against the learned ORM (over-optimisation)
# ============================================================================================


def rl_study(initial, tokenizer, models: dict, args: Args, device) -> dict:
    """Each --rl-methods advantage in the same loop, from the cold start, same prompts and seed."""
    held_out = args.task.held_out(args.eval_problems)
    G = args.group_size
    fns = {"outcome": outcome_advantage_fn, "prm": prm_advantage_fn(models["prm"], tokenizer, G),
           "prm_outcome": prm_advantage_fn(models["prm"], tokenizer, G, with_outcome=True),
           "qrm": qrm_advantage_fn(models["qrm"], G)}
    runs = {}
    for method in args.rl_method_list:
        start = time.time()
        policy = copy.deepcopy(initial)
        result = train(policy, frozen_copy(initial), tokenizer, args, fns[method], held_out, device,
                       desc=f"RL {method}")
        result["wall_clock_s"] = time.time() - start
        result["examples"] = what_it_writes(policy, tokenizer, held_out[:2], args, device)
        runs[method] = result
        print(f"  RL {method:11s} held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> "
              f"{result['evals'][-1]['pass@1']:.3f} in {result['wall_clock_s']:.0f} s; writes {result['examples'][:2]}")
    return runs


def what_it_writes(policy, tokenizer, problems: list, args: Args, device, samples: int = 3) -> list[str]:
    """A few completions of the trained policy: what the credit taught it to write."""
    prompts = [p.prompt for p in problems for _ in range(samples)]
    _, texts = sample(policy, tokenizer, prompts, args.max_new_tokens, torch.Generator(device).manual_seed(args.seed),
                      device)
    return [prompt + text for prompt, text in zip(prompts, texts)]


def overoptimisation_rl(initial, tokenizer, models: dict, args: Args, device) -> dict:
    """GRPO on the learned ORM's score with β = 0 for `overopt_steps` updates; the verifier
    (gold) is only watched: held-out pass@1 every eval_every updates, and on the training batch."""
    log = []
    run_args = dataclasses.replace(args, beta=0.0, lr=args.overopt_lr, rl_steps=args.overopt_steps)
    start = time.time()
    result = train(copy.deepcopy(initial), frozen_copy(initial), tokenizer, run_args,
                   proxy_advantage_fn(models["orm"], frozen_copy(initial), args.group_size, log),
                   args.task.held_out(args.eval_problems), device, desc="RL on the ORM proxy")
    kl = moving_average([h["kl"] for h in log], 5)
    proxy = moving_average([h["proxy"] for h in log], 5)
    points = [{"step": e["step"], "gold": e["pass@1"], "kl": float(max(kl[min(e["step"], len(log) - 1)], 0.0)),
               "proxy": float(proxy[min(e["step"], len(log) - 1)])} for e in result["evals"]]
    points[0]["kl"] = 0.0  # the first evaluation is the reference policy itself
    print(f"  RL on the ORM proxy: gold {points[0]['gold']:.3f} -> {points[-1]['gold']:.3f} (best "
          f"{max(p['gold'] for p in points):.3f}), proxy {proxy[0]:.3f} -> {proxy[-1]:.3f}, KL {points[-1]['kl']:.2f} "
          f"nats, {time.time() - start:.0f} s")
    return {"log": log, "points": points, "evals": result["evals"], "wall_clock_s": time.time() - start}


def overoptimisation_fits(held: dict, proxy_rl: dict) -> dict:
    """Both of Gao et al.'s forms fitted to the gold gain, for best-of-N and for RL on the ORM."""
    ns = np.array(held["ns"])
    d_bon = np.sqrt(best_of_n_kl(ns))
    gold_bon = np.array([held["curves"]["ORM"][N] for N in held["ns"]])
    d_rl = np.sqrt([p["kl"] for p in proxy_rl["points"]])
    gold_rl = np.array([p["gold"] for p in proxy_rl["points"]])
    return {"bon": {"d": d_bon.tolist(), "gain": (gold_bon - gold_bon[0]).tolist(),
                    "proxy": [held["orm_proxy_of_pick"][N] for N in held["ns"]],
                    "fit_bon": fit_gao(d_bon, gold_bon - gold_bon[0], "bon"),
                    "fit_rl": fit_gao(d_bon, gold_bon - gold_bon[0], "rl")},
            "rl": {"d": d_rl.tolist(), "gain": (gold_rl - gold_rl[0]).tolist(),
                   "proxy": [p["proxy"] for p in proxy_rl["points"]],
                   "fit_bon": fit_gao(d_rl, gold_rl - gold_rl[0], "bon"),
                   "fit_rl": fit_gao(d_rl, gold_rl - gold_rl[0], "rl")}}


# ============================================================================================
# Figures
# ============================================================================================


def plot_label_quality(data: dict, path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (title, quality) in zip(axes, (("every step (the last one is the verifier's)", data["quality"]),
                                           ("steps that needed rollouts", data["quality_inner_steps"]))):
        ns = sorted(quality)
        for key in ("accuracy", "false_positive_rate", "false_negative_rate"):
            ax.plot(ns, [quality[n][key] for n in ns], "o-", label=key.replace("_", " "))
        ax.set(xscale="log", xlabel="N rollouts per step prefix", title=title)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("hard Math-Shepherd label vs gold")
    axes[0].legend(fontsize="small")
    save_figure(fig, path)


def plot_best_of_n(held: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name, curve in held["curves"].items():
        style = "k--" if name.startswith("oracle") else "o-"
        ax.plot(held["ns"], [curve[N] for N in held["ns"]], style, label=name, markersize=4)
    ax.set(xscale="log", xlabel="N samples per problem", ylabel="held-out accuracy of the pick",
           title="Best-of-N reranking of cold-start samples")
    ax.set_xticks(held["ns"], [str(N) for N in held["ns"]])
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_credit(problem: str, text: str, rows: dict, path) -> None:
    """The characters of one failed solution, each boxed in the colour of its credit (red low,
    green high), one row per method. Per-step methods colour a whole step alike."""
    chars = [("⏎" if c == "\n" else c) for c in text] + ["■"]  # ■ is EOS, the last step's end
    fig, ax = plt.subplots(figsize=(max(6.0, 0.32 * len(chars) + 3), 0.55 * len(rows) + 0.9))
    cmap = plt.get_cmap("RdYlGn")
    for r, (name, values) in enumerate(rows.items()):
        values = np.asarray(values, float)
        scale = np.abs(values).max() or 1.0
        y = len(rows) - r
        ax.text(-0.5, y, name, ha="right", va="center", fontsize=9)
        for x, (c, v) in enumerate(zip(chars, values)):
            ax.text(x * 0.8, y, c, ha="center", va="center", family="monospace", fontsize=10,
                    bbox=dict(boxstyle="square,pad=0.25", facecolor=cmap(0.5 + 0.5 * v / scale), edgecolor="none"))
    ax.set(xlim=(-6, 0.8 * len(chars)), ylim=(0.3, len(rows) + 0.7), title=f"Credit on one failed solution of {problem} (red: low, green: high)")
    ax.axis("off")
    save_figure(fig, path)


def plot_rl(runs: dict, proxy_rl: dict | None, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    names = {"outcome": "outcome-only GRPO (verifier)", "prm": "PRM steps (process GRPO)",
             "prm_outcome": "PRM steps, verifier on the last", "qrm": "Q-RM tokens"}
    for method, run in runs.items():
        ax.plot([e["step"] for e in run["evals"]], [e["pass@1"] for e in run["evals"]], "o-", label=names[method])
    if proxy_rl is not None:
        ax.plot([e["step"] for e in proxy_rl["evals"]], [e["pass@1"] for e in proxy_rl["evals"]], "x:",
                label="RL on the learned ORM, β=0 (over-optimisation run)")
    ax.set(xlabel="update", ylabel="held-out pass@1 (verifier)", title="Dense credit in RL, same prompts and seed")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_overoptimisation(fits: dict, path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.3))
    for ax, (kind, part) in zip(axes, fits.items()):
        d = np.array(part["d"])
        grid = np.linspace(1e-3, d.max() * 1.05, 200)
        ax.plot(d, part["gain"], "ko", label="gold (verifier) gain")
        ax.plot(d, np.array(part["proxy"]) - part["proxy"][0], "s", color="tab:orange", label="proxy (ORM) gain")
        for form, style in (("bon", "-"), ("rl", "--")):
            f = part[f"fit_{form}"]
            ax.plot(grid, gao_curve(grid, f, form), style,
                    label=f"R_{form}: α={f['alpha']:.3f}, β={f['beta']:.3f}, R²={f['r2']:.2f}")
        title = "best-of-N against the ORM" if kind == "bon" else "RL (group-centred, β=0) against the ORM"
        ax.set(xlabel="d = sqrt(KL to the reference, nats)", ylabel="gain over the reference", title=title)
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_all(out, data: dict, held: dict, runs: dict, proxy_rl: dict, fits: dict) -> None:
    plot_label_quality(data, out / "label_quality.png")
    plot_best_of_n(held, out / "best_of_n.png")
    example = held["credit"]["example"]
    if example is not None:
        plot_credit(example["problem"], example["text"], example["rows"], out / "credit.png")
    plot_rl(runs, proxy_rl, out / "rl.png")
    plot_overoptimisation(fits, out / "overoptimisation.png")


# ============================================================================================
# Claims and report
# ============================================================================================


def updates_to_reach(evals: list[dict], target: float) -> int | None:
    return next((e["step"] for e in evals if e["pass@1"] >= target), None)


def label_and_rerank_claims(args: Args, data: dict, held: dict) -> list[dict]:
    q = data["quality"][args.label_n]
    claims = [claim("survey §4.5.2, §10", "automatic (Monte Carlo) step labels are noisy: a step may be labelled "
                    "correct because a lucky rollout reached the right answer",
                    f"hard labels at N={args.label_n}: accuracy {q['accuracy']:.3f}, false positives "
                    f"{q['false_positive_rate']:.3f} of wrong steps, false negatives {q['false_negative_rate']:.3f} "
                    "of right steps", q["false_positive_rate"] > 0)]
    N = held["ns"][-1]
    c = {k: v[N] for k, v in held["curves"].items()}
    claims.append(claim("Lightman et al. 2024", f"best-of-{LIGHTMAN_N} on MATH: PRM 78.2% > ORM 72.4% > majority 69.6%",
                        f"best-of-{N} here: PRM-min {c['PRM-min']:.3f}, ORM {c['ORM']:.3f}, majority "
                        f"{c['majority vote']:.3f} (oracle {c['oracle (pass@N)']:.3f})",
                        c["PRM-min"] > c["ORM"] > c["majority vote"]))
    claims.append(claim("survey §10", "for best-of-N, min aggregation of step scores catches the first error",
                        f"best-of-{N}: min {c['PRM-min']:.3f}, product {c['PRM-product']:.3f}",
                        c["PRM-min"] >= c["PRM-product"]))
    loc = held["credit"]["results"]
    if loc:
        claims.append(claim("survey §10", "a PRM localises the error to the step where reasoning went astray",
                            f"AUROC for the first wrong step over {held['credit']['solutions']} failed solutions: "
                            f"PRM drop {loc['PRM drop (score - previous)']['auroc']:.3f}, PRM score "
                            f"{loc['PRM step score']['auroc']:.3f}, flat {loc['outcome only (flat)']['auroc']:.3f}",
                            loc["PRM drop (score - previous)"]["auroc"] > 0.5))
        claims.append(claim("survey §9", "Q-RM assigns low credit to the tokens that caused the failure, from pairs "
                            "alone (no step labels)", f"AUROC of Q-RM's step-mean Z {loc['Q-RM (mean Z of the step)']['auroc']:.3f}"
                            f" (top-1 {loc['Q-RM (mean Z of the step)']['top1']:.3f})",
                            loc["Q-RM (mean Z of the step)"]["auroc"] > 0.5))
    return claims


def rl_claims(args: Args, runs: dict) -> list[dict]:
    if "outcome" not in runs:
        return []
    claims = []
    cold, final = runs["outcome"]["evals"][0]["pass@1"], runs["outcome"]["evals"][-1]["pass@1"]
    target = cold + 0.5 * (final - cold)
    reach = {m: updates_to_reach(r["evals"], target) for m, r in runs.items()}
    if "qrm" in runs:
        speed = (f"updates to reach pass@1 {target:.3f} (halfway to outcome GRPO's final): "
                 + ", ".join(f"{m} {v}" for m, v in reach.items()))
        ratio = reach["outcome"] / reach["qrm"] if reach["qrm"] and reach["outcome"] else None
        claims.append(claim("Chen et al. 2025 (Q-RM)", "RL with Q-RM converges 12x faster than with an ORM (GSM8K)",
                            speed + (f"; ratio outcome/Q-RM {ratio:.2g}" if ratio else ""),
                            None if ratio is None else ratio >= 12))
        gain = runs["qrm"]["evals"][-1]["pass@1"] - final
        claims.append(claim("Chen et al. 2025 (Q-RM)", "Q-RM raises pass@1 by about 5 points over the ORM baseline",
                            f"Q-RM {runs['qrm']['evals'][-1]['pass@1']:.3f} vs outcome GRPO (exact verifier, a "
                            f"stronger baseline than a learned ORM) {final:.3f}: {100 * gain:+.1f} points", gain >= 0.05))
    if "prm" in runs:
        gain = runs["prm"]["evals"][-1]["pass@1"] - final
        claims.append(claim("over-long-generations", "a PRM converts the sparse credit problem into a dense one "
                            "(better RL than outcome-only)", f"PRM process GRPO {runs['prm']['evals'][-1]['pass@1']:.3f}"
                            f" vs outcome GRPO {final:.3f} after {args.rl_steps} updates ({100 * gain:+.1f} points)",
                            gain > 0))
    if "prm_outcome" in runs:
        gain = runs["prm_outcome"]["evals"][-1]["pass@1"] - final
        claims.append(claim("over-long-generations", "the PRM used as a dense reward is a second proxy and "
                            "inherits the over-optimisation risks of an ORM",
                            f"PRM alone {runs['prm']['evals'][-1]['pass@1'] if 'prm' in runs else float('nan'):.3f}; "
                            f"PRM steps with the verifier on the answer step {runs['prm_outcome']['evals'][-1]['pass@1']:.3f}; "
                            f"outcome GRPO {final:.3f} ({100 * gain:+.1f} points for PRM + verifier)", None))
    return claims


def overoptimisation_claims(fits: dict, proxy_rl: dict | None) -> list[dict]:
    claims = []
    if proxy_rl is not None:
        points = proxy_rl["points"]
        golds = [p["gold"] for p in points]
        best = int(np.argmax(golds))
        proxy_up = points[-1]["proxy"] > points[0]["proxy"]
        claims.append(claim("over-long-generations (Gao et al.)", "optimising a learned proxy: proxy rises with KL, "
                            "gold peaks then degrades",
                            f"proxy {points[0]['proxy']:.3f} -> {points[-1]['proxy']:.3f}; gold {golds[0]:.3f} -> peak "
                            f"{golds[best]:.3f} at KL {points[best]['kl']:.2f} -> {golds[-1]:.3f} at KL {points[-1]['kl']:.2f}",
                            proxy_up and 0 < best < len(points) - 1 and golds[-1] < golds[best] - 0.02))
    bon = fits["bon"]
    claims.append(claim("over-long-generations", "gold ≈ α·sqrt(KL) − β·KL",
                        f"with d = sqrt(KL) this is d(α − βd): Gao et al.'s best-of-N form, not their RL form "
                        f"d(α − β log d). Best-of-N on the ORM here: α={bon['fit_bon']['alpha']:.3f}, "
                        f"β={bon['fit_bon']['beta']:.3f}, R²={bon['fit_bon']['r2']:.2f}", None))
    return claims


def check_claims(args: Args, data: dict, held: dict, runs: dict, fits: dict, proxy_rl: dict | None) -> list[dict]:
    return label_and_rerank_claims(args, data, held) + rl_claims(args, runs) + overoptimisation_claims(fits, proxy_rl)


def metrics_of(args: Args, data: dict, held: dict, runs: dict, fits: dict, proxy_rl: dict | None) -> dict:
    metrics = {"label_solutions": len(data["texts"]), "label_solutions_right": float(data["rewards"].mean()),
               "soft_label_auroc": data["soft_auroc"]}
    for n, q in data["quality"].items():
        metrics.update({f"hard_label_{k}[N={n}]": v for k, v in q.items()})
    for name, curve in held["curves"].items():
        metrics.update({f"best_of_n[{name}][N={N}]": v for N, v in curve.items()})
    for name, loc in held["credit"]["results"].items():
        metrics.update({f"localisation_{k}[{name}]": v for k, v in loc.items()})
    for method, run in runs.items():
        metrics[f"rl[{method}]_pass@1_start"] = run["evals"][0]["pass@1"]
        metrics[f"rl[{method}]_pass@1_final"] = run["evals"][-1]["pass@1"]
        metrics[f"rl[{method}]_wall_clock_s"] = run["wall_clock_s"]
    for kind, part in fits.items():
        for form in ("bon", "rl"):
            metrics.update({f"overopt_{kind}_fit_{form}_{k}": v for k, v in part[f"fit_{form}"].items()})
    if proxy_rl is not None:
        metrics["overopt_rl_gold_final"] = proxy_rl["points"][-1]["gold"]
        metrics["overopt_rl_gold_best"] = max(p["gold"] for p in proxy_rl["points"])
        metrics["overopt_rl_kl_final"] = proxy_rl["points"][-1]["kl"]
    return metrics


def report(args: Args, data: dict, held: dict, runs: dict, fits: dict, claims: list[dict]) -> None:
    rows = [[n, q["accuracy"], q["false_positive_rate"], q["false_negative_rate"],
             data["quality_inner_steps"][n]["accuracy"]] for n, q in data["quality"].items()]
    print(f"\nMath-Shepherd hard labels vs gold ({data['steps_labelled']} steps of {len(data['texts'])} solutions; "
          f"soft-label AUROC {data['soft_auroc']:.3f}):")
    print(format_table(rows, ["N", "accuracy", "false pos. rate", "false neg. rate", "accuracy (rolled-out steps)"]))
    names = list(held["curves"])
    rows = [[N, *(held["curves"][k][N] for k in names)] for N in held["ns"]]
    rows.append([f"{LIGHTMAN_N} (MATH)", *(LIGHTMAN.get(k.split("-")[0] if k.startswith("PRM-min") else k, "-")
                                           for k in names)])
    print(f"\nBest-of-N on {args.eval_problems} held-out problems (Lightman et al.'s MATH numbers in the last row):")
    print(format_table(rows, ["N", *names]))
    loc = held["credit"]["results"]
    print(f"\nCredit localisation on {held['credit']['solutions']} failed held-out solutions (≥ 2 steps):")
    print(format_table([[k, v["auroc"], v["top1"]] for k, v in loc.items()], ["credit", "AUROC", "top-1"]))
    if runs:
        print(f"\nRL, {args.rl_steps} updates of {args.prompts}x{args.group_size} completions, β={args.beta:g}:")
        print(format_table([[m, r["evals"][0]["pass@1"], r["evals"][-1]["pass@1"], r["wall_clock_s"]] for m, r in runs.items()],
                           ["advantages", "pass@1 before", "pass@1 after", "seconds"]))
    rows = [[kind, form, part[f"fit_{form}"]["alpha"], part[f"fit_{form}"]["beta"], part[f"fit_{form}"]["r2"]]
            for kind, part in fits.items() for form in ("bon", "rl")]
    print("\nGao et al.'s forms fitted to the gold gain (d = sqrt(KL)):")
    print(format_table(rows, ["optimisation", "form", "α", "β", "R²"]))
    print("\n" + format_claims(claims))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, policy, tokenizer, info = start_lm_run(args)
    seed_everything(args.seed)  # the same numbers whether the cold start was trained now or loaded
    print(f"06 PRM, Q-RM and over-optimisation; policy {info['path']} "
          f"({'trained now' if info['trained_now'] else 'cached'}), device {device}")
    data = label_study(policy, tokenizer, args, device)
    models = train_reward_models(policy, tokenizer, data, args)
    held = held_out_study(policy, tokenizer, models, args, device)
    runs = rl_study(policy, tokenizer, models, args, device)
    proxy_rl = overoptimisation_rl(policy, tokenizer, models, args, device)
    fits = overoptimisation_fits(held, proxy_rl)

    plot_all(out, data, held, runs, proxy_rl, fits)
    claims = check_claims(args, data, held, runs, fits, proxy_rl)
    metrics = metrics_of(args, data, held, runs, fits, proxy_rl)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, label_quality=data["quality"],
                  best_of_n={"ns": held["ns"], "curves": held["curves"]}, localisation=held["credit"]["results"],
                  rl=runs, overoptimisation=fits, overoptimisation_rl=proxy_rl, reward_model_losses=models["losses"],
                  cold_start_info={k: v for k, v in info.items() if k != "sft_losses"})
    report(args, data, held, runs, fits, claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    run_script(main, Args)
