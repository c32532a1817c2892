"""06 — Dense credit for LMs: process reward models, Q-RM, and reward over-optimisation.

05 gave every token of a completion the same advantage. Here the credit gets denser, from models
that score parts of a completion, on the same task and cold-start policy (common.py):

  Math-Shepherd labels  from each step prefix of a sampled solution, roll out N completions:
                        hard label = any of them right, soft = the share right (gold labels
                        exist here, so we measure how often the automatic label is wrong)
  PRM / ORM             a per-token score head, binary cross-entropy on each step's last token
                        (PRM) or on the final token only (ORM); best-of-N by PRM (min, mean or
                        product over steps), ORM, majority vote
  Q-RM                  a token scorer Z trained on (right, wrong) pairs of one prompt with
                        -log σ(β (mean_t Z(τ_w) - mean_t Z(τ_l)) - γ): Z is per-token credit
  dense RL              PRM step rewards (DeepSeekMath's process supervision
                        A_t = Σ_{k≥t} (r_k - mean)/std) and Q-RM credit as per-token advantages
                        in 05's step, against outcome-only GRPO on the same prompts and seed
  over-optimisation     best-of-N and RL (β = 0) against the learned ORM while the verifier
                        watches; Gao et al.'s R_bon(d) = d(α - βd), R_RL(d) = d(α - β log d)
  length bias           the learned rewards' correlation with token count; with --length-bias, a
                        Bradley-Terry RM -log σ(r(chosen) - r(rejected)) on the pairs of a labeller
                        who prefers the longer of two equally right (or wrong) answers, RL on it,
                        and the two fixes: r - b·length (b fitted with correctness held fixed)
                        and the same RM trained on length-balanced pairs

Read beside: credit-assignment-problem-survey.txt §4.5, §9 (Q-RM), §10 (PRMs);
credit-assignment-over-long-generations.txt (process rewards, over-optimisation);
credit-assignment-is-the-whole-game.txt §7.2, §7.6, §7.7 (reward hacking, length bias, RM
over-optimisation). Papers: Lightman et al. 2024; Wang et al. 2024 (Math-Shepherd); Shao et al.
2024; Chen et al. 2025 (Q-RM); Gao, Schulman & Hilton 2022. Figures in runs/06_prm_qrm/:
label_quality.png, best_of_n.png, credit.png (one failed solution coloured by each credit),
rl.png, overoptimisation.png, and length_bias.png with --length-bias.
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
from transformers import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING, AutoModelForTokenClassification
from transformers.modeling_outputs import TokenClassifierOutput

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
    head_width,
    localisation,
    mean_or_nan,
    moving_average,
    pass_at_k,
    pearson,
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
    well_formed,
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


def prm_mean(token_probs: torch.Tensor, end_tokens: torch.Tensor) -> torch.Tensor:
    """A solution's PRM score = the mean of its steps' P(right) (what the survey sets min against)."""
    steps = (end_tokens >= 0).float()
    return (per_step(token_probs, end_tokens, 0.0) * steps).sum(1) / steps.sum(1).clamp(min=1)


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
# Length bias: a preference RM that prefers length, and the two fixes the essay names
# ============================================================================================


def problem_groups(problems: list) -> list[range]:
    """The runs of consecutive rows that share one problem (each problem's sampled solutions)."""
    groups, start = [], 0
    while start < len(problems):
        end = start
        while end < len(problems) and problems[end] is problems[start]:
            end += 1
        groups.append(range(start, end))
        start = end
    return groups


def length_preferring_pairs(problems: list, rewards, lengths) -> list[tuple[int, int]]:
    """(chosen, rejected) pairs from a labeller with a length bias: of two solutions to one
    problem, the right one; of two equally right (or equally wrong) ones, the longer one; same
    verdict and same length: no preference, no pair."""
    return [(i, j) for group in problem_groups(problems) for i in group for j in group
            if (rewards[i], lengths[i]) > (rewards[j], lengths[j])]


def length_balanced(pairs: list[tuple[int, int]], lengths, rng: np.random.Generator) -> list[tuple[int, int]]:
    """The pairs subsampled so that the chosen solution is the longer one exactly as often as the
    shorter one (pairs of equal length all kept): length alone no longer predicts the choice."""
    longer = [(i, j) for i, j in pairs if lengths[i] > lengths[j]]
    shorter = [(i, j) for i, j in pairs if lengths[i] < lengths[j]]
    n = min(len(longer), len(shorter))

    def some(of: list) -> list:
        return [of[k] for k in rng.choice(len(of), n, replace=False)]

    return sorted(some(longer) + some(shorter) + [(i, j) for i, j in pairs if lengths[i] == lengths[j]])


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """A preference RM's loss: -log σ(r(chosen) - r(rejected)), mean over pairs."""
    return -F.logsigmoid(chosen - rejected).mean()


def length_slope(scores, lengths, correct) -> float:
    """b of the least-squares fit score ≈ a + b·length + c·right over labelled solutions: the
    reward a token earns that correctness does not explain."""
    X = np.stack([np.ones(len(scores)), np.asarray(lengths, float), np.asarray(correct, float)], 1)
    (_, b, _), *_ = np.linalg.lstsq(X, np.asarray(scores, float), rcond=None)
    return float(b)


def length_normalised(scores: torch.Tensor, lengths: torch.Tensor, slope: float) -> torch.Tensor:
    """The RM's score with its length trend removed: r' = r - b·length."""
    return scores - slope * lengths


def rm_advantage_fn(rm, group_size: int, slope: float, log: list):
    """GRPO advantages (z-scored in the group) on a preference RM's score at EOS, length-normalised
    with `slope` (0: the raw score). Logs each batch's mean raw score and length."""
    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        score = reward_model_logits(rm, completions)[last_token_mask(completions.completion_mask)]
        lengths = completions.lengths.to(score.dtype)
        log.append({"proxy": float(score.mean()), "length": float(lengths.mean())})
        reward = length_normalised(score, lengths, slope).view(-1, group_size)
        return grpo_advantages(reward).flatten()[:, None] * completions.completion_mask.float()
    return advantage_fn


def worked_form(text: str) -> bool:
    """The shape of a worked solution, right or wrong: "a op b=c" lines, then "#n" (not a bare answer)."""
    return "\n" in text and well_formed(text)


def output_stats(problems: list, texts: list[str], correct, lengths) -> dict:
    """What a policy writes: gold pass@1, tokens, padding (lines beyond the worked solution's
    count, characters beyond its length) and form (worked form; worked form with a wrong answer)."""
    extra = np.array([max(0, len(t.split("\n")) - len(p.lines)) for p, t in zip(problems, texts)])
    excess = np.array([max(0, len(t) - len(p.solution)) for p, t in zip(problems, texts)])
    form, correct = np.array([worked_form(t) for t in texts], bool), np.asarray(correct, bool)
    return {"pass@1": float(correct.mean()), "length": float(np.mean(lengths)), "extra_lines": float(extra.mean()),
            "padded_share": float((extra > 0).mean()), "excess_chars": float(excess.mean()),
            "worked_form_share": float(form.mean()), "worked_form_wrong_share": float((form & ~correct).mean())}


def length_correlations(scores, lengths, correct) -> dict:
    """r(score, token count) over all samples, and within the right and within the wrong ones
    (where correctness cannot be what the length stands for)."""
    scores, lengths, correct = np.asarray(scores, float), np.asarray(lengths, float), np.asarray(correct, bool)
    return {"all": pearson(scores, lengths), "right": pearson(scores[correct], lengths[correct]),
            "wrong": pearson(scores[~correct], lengths[~correct])}


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


class TrunkScorer(torch.nn.Module):
    """What transformers' token-classification classes build, for a family that has none (OPT,
    GPT-J, CodeGen): the policy's trunk, then dropout and a linear score head on its last
    hidden states."""

    def __init__(self, policy):
        super().__init__()
        self.body = copy.deepcopy(policy.base_model)
        self.dropout = torch.nn.Dropout(0.1)  # the token-classification classes' default
        self.score = torch.nn.Linear(head_width(policy), 1)

    def forward(self, **inputs) -> TokenClassifierOutput:
        return TokenClassifierOutput(logits=self.score(self.dropout(self.body(**inputs).last_hidden_state)))


def make_scorer(policy):
    """A token-classification model of the policy's own family with one output per token (the
    score head), its body copied from the policy (Lightman et al. fine-tune the PRM from the
    base model too)."""
    config = copy.deepcopy(policy.config)
    config.num_labels = 1
    if type(config) not in MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING:
        return TrunkScorer(policy)
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
    length_bias: bool = arg(False, "also run the length-bias study: RL on a preference RM that prefers length, "
                            "raw, length-normalised, and retrained on length-balanced pairs (about 6 more minutes)")
    length_steps: int = arg(80, "length bias: RL updates on each preference RM")
    speed_window: int = arg(5, "RL: trailing window (updates) of the training pass rate read for convergence speed")

    SMOKE = dict(LMArgs.SMOKE_LM, rl_steps=2, prompts=2, group_size=2, eval_every=1, label_prompts=4,
                 label_samples=4, rollouts_per_prefix=4, label_ns="1,4", label_n=4, rm_steps=2, rm_batch=4,
                 bon_samples=4, bon_repeats=2, overopt_steps=2, length_steps=2)

    def __post_init__(self):
        super().__post_init__()
        require_positive(self, "rl_steps", "prompts", "lr", "warmup", "max_grad_norm", "eval_every", "label_prompts",
                         "label_samples", "rollouts_per_prefix", "label_n", "rm_steps", "rm_batch", "rm_lr", "qrm_beta",
                         "bon_samples", "bon_repeats", "overopt_steps", "overopt_lr", "length_steps",
                         "speed_window")
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
    return [(win, lose) for group in problem_groups(problems) for win in group if rewards[win] == 1
            for lose in group if rewards[lose] == 0]


def batch_scores(model, r: Completions, rows: torch.Tensor) -> torch.Tensor:
    """The scorer's logits on completions `rows` of r, (len(rows), T), computed only up to the
    batch's longest completion (padding costs time) and zero-padded back to r's width."""
    width = r.prompt_length + int(r.completion_mask[rows].sum(1).max())
    scores = scorer_logits(model, r.sequences[rows, :width], r.attention_mask[rows, :width], r.prompt_length)
    return F.pad(scores, (0, r.completion_mask.shape[1] - scores.shape[1]))


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

    prm, orm, qrm = make_scorer(policy), make_scorer(policy), make_scorer(policy)
    losses = {
        "prm": fit_scorer(prm, lambda rows: step_bce(batch_scores(prm, r, rows), prm_targets[rows], ends[rows]),
                          len(r.sequences), args, rng, "PRM"),
        "orm": fit_scorer(orm, lambda rows: step_bce(batch_scores(orm, r, rows), orm_targets[rows], last[rows]),
                          len(r.sequences), args, rng, "ORM"),
    }
    if len(pairs):
        def qrm_batch(rows):
            win, lose = pairs[rows, 0], pairs[rows, 1]
            return qrm_loss(batch_scores(qrm, r, win), r.completion_mask[win], batch_scores(qrm, r, lose),
                            r.completion_mask[lose], args.qrm_beta, args.qrm_gamma)
        losses["qrm"] = fit_scorer(qrm, qrm_batch, len(pairs), args, rng, "Q-RM")
    print(f"reward models trained: PRM ({args.labels} labels) loss {np.mean(losses['prm'][-20:]):.3f}, "
          f"ORM {np.mean(losses['orm'][-20:]):.3f}, Q-RM on {len(pairs)} pairs "
          f"{np.mean(losses.get('qrm', [float('nan')])[-20:]):.3f}")
    return {"prm": prm, "orm": orm, "qrm": qrm, "losses": losses, "pairs": len(pairs)}


# ============================================================================================
# Study 3: best-of-N and credit localisation on held-out problems
# ============================================================================================


def held_out_study(policy, tokenizer, models: dict, args: Args, device) -> dict:
    """`bon_samples` cold-start solutions per held-out problem: best-of-N by each reranker, where
    each credit puts the blame in the failed ones, and how each score tracks length."""
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
    rankers = {"PRM-min": prm_min(prm_probs, ends), "PRM-mean": prm_mean(prm_probs, ends),
               "PRM-product": prm_product(prm_probs, ends), "ORM": orm_probs,
               "Q-RM (mean Z)": (z * mask).sum(1) / mask.sum(1)}
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
    lengths = r.lengths.cpu().numpy()
    length_corr = {name: length_correlations(rankers[name].numpy(), lengths, correct)
                   for name in ("ORM", "PRM-min", "Q-RM (mean Z)")}
    print(f"best-of-N at N={ns[-1]}: " + ", ".join(f"{k} {v[ns[-1]]:.3f}" for k, v in curves.items()))
    return {"ns": ns, "curves": curves, "orm_proxy_of_pick": proxy_of_pick, "credit": credit,
            "pass@1": float(correct.mean()), "samples": len(texts), "length_corr": length_corr,
            "stats": output_stats(repeated, texts, correct, lengths), "completions": r, "correct": correct}


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
    """Each --rl-methods advantage in the same loop, from the cold start, same prompts and seed;
    then what each trained policy writes on the held-out problems (`sample_stats`)."""
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
        result["final"] = sample_stats(policy, tokenizer, held_out, args, device)
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


def sample_stats(policy, tokenizer, problems: list, args: Args, device) -> dict:
    """`output_stats` of `eval_samples` completions of each problem by the policy."""
    repeated = [p for p in problems for _ in range(args.eval_samples)]
    completions, texts = sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens,
                                torch.Generator(device).manual_seed(args.seed + 6), device)
    correct = verifier_rewards(repeated, texts, completions.truncated).numpy()
    return output_stats(repeated, texts, correct, completions.lengths.cpu().numpy())


def overoptimisation_rl(initial, tokenizer, models: dict, args: Args, device) -> dict:
    """GRPO on the learned ORM's score with β = 0 for `overopt_steps` updates; the verifier
    (gold) is only watched: held-out pass@1 every eval_every updates, and on the training batch."""
    log = []
    run_args = dataclasses.replace(args, beta=0.0, lr=args.overopt_lr, rl_steps=args.overopt_steps)
    start = time.time()
    policy, held_out = copy.deepcopy(initial), args.task.held_out(args.eval_problems)
    result = train(policy, frozen_copy(initial), tokenizer, run_args,
                   proxy_advantage_fn(models["orm"], frozen_copy(initial), args.group_size, log),
                   held_out, device, desc="RL on the ORM proxy")
    kl = moving_average([h["kl"] for h in log], 5)
    proxy = moving_average([h["proxy"] for h in log], 5)
    points = [{"step": e["step"], "gold": e["pass@1"], "kl": float(max(kl[min(e["step"], len(log) - 1)], 0.0)),
               "proxy": float(proxy[min(e["step"], len(log) - 1)])} for e in result["evals"]]
    points[0]["kl"] = 0.0  # the first evaluation is the reference policy itself
    print(f"  RL on the ORM proxy: gold {points[0]['gold']:.3f} -> {points[-1]['gold']:.3f} (best "
          f"{max(p['gold'] for p in points):.3f}), proxy {proxy[0]:.3f} -> {proxy[-1]:.3f}, KL {points[-1]['kl']:.2f} "
          f"nats, {time.time() - start:.0f} s")
    return {"log": log, "points": points, "evals": result["evals"], "wall_clock_s": time.time() - start,
            "final": sample_stats(policy, tokenizer, held_out, args, device)}


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


LENGTH_RUNS = ("length-preferring RM", "same RM, length-normalised", "RM on length-balanced pairs")


def train_preference_rm(policy, r: Completions, pairs: list[tuple[int, int]], args: Args, rng: np.random.Generator,
                        desc: str) -> tuple:
    """A scorer from the policy's body, Bradley-Terry on (chosen, rejected) rows of r, read at EOS."""
    rm, pairs = make_scorer(policy), torch.tensor(pairs, dtype=torch.long).view(-1, 2)
    if not len(pairs):  # nothing to learn from: the scorer stays as made
        return rm.eval(), []
    last = last_token_mask(r.completion_mask)

    def loss_of_batch(rows):
        win, lose = pairs[rows, 0], pairs[rows, 1]
        return bradley_terry_loss(batch_scores(rm, r, win)[last[win]], batch_scores(rm, r, lose)[last[lose]])

    return rm, fit_scorer(rm, loss_of_batch, len(pairs), args, rng, desc)


def length_bias_study(initial, tokenizer, data: dict, held: dict, args: Args, device) -> dict:
    """Two preference RMs on the labelled solutions: one on the pairs of a labeller who prefers the
    longer of two equally right (or wrong) solutions, one on those pairs length-balanced. Each
    one's score against length on the held-out samples; then 05's loop, GRPO on the RM's score,
    on the first (raw, and length-normalised) and on the second."""
    r = data["completions"]
    lengths, rewards = r.lengths.cpu().numpy(), data["rewards"].numpy()
    pairs = length_preferring_pairs(data["problems"], rewards, lengths)
    balanced = length_balanced(pairs, lengths, np.random.default_rng(args.seed + 7))
    rng = np.random.default_rng(args.seed + 8)
    (biased_rm, biased_losses), (balanced_rm, balanced_losses) = (
        train_preference_rm(initial, r, chosen, args, rng, desc)
        for chosen, desc in ((pairs, "length-preferring RM"), (balanced, "length-balanced RM")))
    slope = length_slope(reward_model_logits(biased_rm, r)[last_token_mask(r.completion_mask)].cpu().numpy(),
                         lengths, rewards)
    h = held["completions"]
    corr = {name: length_correlations(reward_model_logits(rm, h)[last_token_mask(h.completion_mask)].cpu().numpy(),
                                      h.lengths.cpu().numpy(), held["correct"])
            for name, rm in (("length-preferring RM", biased_rm), ("length-balanced RM", balanced_rm))}
    held_out = args.task.held_out(args.eval_problems)
    runs = {}
    for name, rm, run_slope in zip(LENGTH_RUNS, (biased_rm, biased_rm, balanced_rm), (0.0, slope, 0.0)):
        log, policy, start = [], copy.deepcopy(initial), time.time()
        result = train(policy, frozen_copy(initial), tokenizer, dataclasses.replace(args, rl_steps=args.length_steps),
                       rm_advantage_fn(rm, args.group_size, run_slope, log), held_out, device, desc=f"RL on the {name}")
        runs[name] = {**result, "log": log, "final": sample_stats(policy, tokenizer, held_out, args, device),
                      "wall_clock_s": time.time() - start}
        f = runs[name]["final"]
        print(f"  RL, {name}: length {f['length']:.1f} tokens, {f['extra_lines']:.2f} extra lines, "
              f"{f['excess_chars']:.1f} characters past the worked solution, pass@1 {f['pass@1']:.3f}")
    return {"pairs": len(pairs), "balanced_pairs": len(balanced), "slope": slope, "length_corr": corr, "runs": runs,
            "losses": {"length-preferring RM": biased_losses, "length-balanced RM": balanced_losses}}


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


def plot_length_bias(length: dict, proxy_rl: dict, path) -> None:
    """Held-out length and pass@1 through RL on each preference RM (and on the ORM, β = 0)."""
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.3))
    runs = {**{f"RL on the {name}": run for name, run in length["runs"].items()}, "RL on the ORM, β=0": proxy_rl}
    for name, run in runs.items():
        steps = [e["step"] for e in run["evals"]]
        for ax, key in zip(axes, ("length", "pass@1")):
            ax.plot(steps, [e[key] for e in run["evals"]], "o-", markersize=3, label=name)
    axes[0].set(xlabel="update", ylabel="held-out completion length (tokens)", title="Length under RL on a learned reward")
    axes[1].set(xlabel="update", ylabel="held-out pass@1 (verifier)", title="Gold accuracy on the same runs")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    save_figure(fig, path)


def plot_all(out, data: dict, held: dict, runs: dict, proxy_rl: dict, fits: dict, length: dict | None = None) -> None:
    plot_label_quality(data, out / "label_quality.png")
    plot_best_of_n(held, out / "best_of_n.png")
    example = held["credit"]["example"]
    if example is not None:
        plot_credit(example["problem"], example["text"], example["rows"], out / "credit.png")
    plot_rl(runs, proxy_rl, out / "rl.png")
    plot_overoptimisation(fits, out / "overoptimisation.png")
    if length is not None:
        plot_length_bias(length, proxy_rl, out / "length_bias.png")


# ============================================================================================
# Claims and report
# ============================================================================================


def mean_over(curve: dict, ns: list[int]) -> float:
    """A best-of-N curve's mean accuracy over the given N."""
    return float(np.mean([curve[N] for N in ns]))


def label_and_rerank_claims(args: Args, data: dict, held: dict) -> list[dict]:
    q = data["quality"][args.label_n]
    claims = [claim("survey §4.5.2, §10", "automatic (Monte Carlo) step labels are noisy: a step may be labelled "
                    "correct because a lucky rollout reached the right answer",
                    f"hard labels at N={args.label_n}: accuracy {q['accuracy']:.3f}, false positives "
                    f"{q['false_positive_rate']:.3f} of wrong steps, false negatives {q['false_negative_rate']:.3f} "
                    "of right steps", q["false_positive_rate"] > 0)]
    curves, N = held["curves"], held["ns"][-1]
    c = {k: v[N] for k, v in curves.items()}
    above_1 = [n for n in held["ns"] if n > 1]
    for better, worse in (("PRM-min", "ORM"), ("PRM-min", "majority vote"), ("ORM", "majority vote")):
        wins = sum(curves[better][n] > curves[worse][n] for n in above_1)
        a, b = better.split("-")[0], worse
        claims.append(claim("Lightman et al. 2024", f"best-of-{LIGHTMAN_N} on MATH: {a} beats {b} "
                            f"({100 * LIGHTMAN[a]:.1f}% vs {100 * LIGHTMAN[b]:.1f}%)",
                            f"best-of-{N} here: {better} {c[better]:.3f} vs {worse} {c[worse]:.3f} (oracle "
                            f"{c['oracle (pass@N)']:.3f}); ahead at {wins} of {len(above_1)} N > 1",
                            c[better] > c[worse]))
    wins = sum(curves["PRM-min"][n] > curves["PRM-mean"][n] for n in above_1)
    claims.append(claim("survey §10", "for best-of-N, min aggregation of step scores outperforms mean aggregation "
                        "(it catches the first error)",
                        f"mean best-of-N accuracy over N = {above_1[0]}..{above_1[-1]}: min "
                        f"{mean_over(curves['PRM-min'], above_1):.3f}, mean {mean_over(curves['PRM-mean'], above_1):.3f} "
                        f"(product {mean_over(curves['PRM-product'], above_1):.3f}); min ahead of mean at {wins} of "
                        f"{len(above_1)} N", mean_over(curves["PRM-min"], above_1) > mean_over(curves["PRM-mean"], above_1)))
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


def updates_to_reach(curve, target: float) -> int | None:
    """The first update whose (smoothed) value reaches target; None if none does."""
    hits = np.nonzero(np.asarray(curve) >= target)[0]
    return int(hits[0]) if len(hits) else None


def convergence(runs: dict, window: int) -> dict:
    """Updates each run takes to get halfway from the cold start to outcome GRPO's final level,
    read on the training batches' verifier pass rate (128 fresh samples every update, a trailing
    mean over `window` updates): one-update resolution, unlike the held-out evaluations."""
    curves = {m: moving_average([h["reward"] for h in r["history"]], window) for m, r in runs.items()}
    first = float(np.mean([h["reward"] for h in runs["outcome"]["history"][:window]]))
    target = first + 0.5 * (curves["outcome"][-1] - first)
    return {"target": float(target), "start": first, "updates": {m: updates_to_reach(c, target) for m, c in curves.items()}}


def speed_claim(speed: dict, slow: str, fast: str, claimed: float, statement: str) -> dict:
    reach = speed["updates"]
    if speed["target"] <= speed["start"]:
        return claim("Chen et al. 2025 (Q-RM)", statement, f"outcome GRPO's training pass rate did not rise "
                     f"({speed['start']:.3f} at the start), so there is no halfway mark (not testable)", None)
    counts = (f"updates to a training pass rate of {speed['target']:.3f} (halfway from {speed['start']:.3f} to "
              f"outcome GRPO's final): " + ", ".join(f"{m} {v}" for m, v in reach.items()))
    if reach.get(slow) is None or reach.get(fast) is None:
        return claim("Chen et al. 2025 (Q-RM)", statement, counts + f"; {slow if reach.get(slow) is None else fast} "
                     "never gets there, so there is no ratio (not testable)", None)
    ratio = reach[slow] / max(reach[fast], 1)
    return claim("Chen et al. 2025 (Q-RM)", statement, counts + f"; ratio {slow}/{fast} {ratio:.2g}x", ratio >= claimed)


def rl_claims(args: Args, runs: dict) -> list[dict]:
    if "outcome" not in runs:
        return []
    claims = []
    final_of = {m: r["evals"][-1]["pass@1"] for m, r in runs.items()}
    final = final_of["outcome"]
    speed = convergence(runs, args.speed_window)
    if "qrm" in runs:
        claims.append(speed_claim(speed, "outcome", "qrm", 12, "RL with Q-RM converges 12x faster than with an ORM "
                                  "(GSM8K; our outcome baseline is the exact verifier)"))
        gain = final_of["qrm"] - final
        claims.append(claim("Chen et al. 2025 (Q-RM)", "Q-RM raises pass@1 by about 5 points over the ORM baseline",
                            f"Q-RM {final_of['qrm']:.3f} vs outcome GRPO (exact verifier, a "
                            f"stronger baseline than a learned ORM) {final:.3f}: {100 * gain:+.1f} points", gain >= 0.05))
    if "qrm" in runs and "prm" in runs:
        claims.append(speed_claim(speed, "prm", "qrm", 11, "RL with Q-RM converges 11x faster than with a step-level "
                                  "PRM (MATH)"))
        gain = final_of["qrm"] - final_of["prm"]
        claims.append(claim("Chen et al. 2025 (Q-RM)", "Q-RM raises pass@1 by about 4-5 points over PRM baselines",
                            f"Q-RM {final_of['qrm']:.3f} vs PRM step rewards (a step-level PRM; the paper's are "
                            f"token-level) {final_of['prm']:.3f} after {args.rl_steps} updates: {100 * gain:+.1f} points",
                            gain >= 0.04))
    if "prm" in runs:
        gain = final_of["prm"] - final
        claims.append(claim("over-long-generations", "a PRM converts the sparse credit problem into a dense one "
                            "(better RL than outcome-only)", f"PRM process GRPO {final_of['prm']:.3f}"
                            f" vs outcome GRPO {final:.3f} after {args.rl_steps} updates ({100 * gain:+.1f} points)",
                            gain > 0))
        golds = [e["pass@1"] for e in runs["prm"]["evals"]]
        best = int(np.argmax(golds))
        anchored = (f"; with the verifier on the answer step it ends at {final_of['prm_outcome']:.3f}"
                    if "prm_outcome" in runs else "")
        claims.append(claim("over-long-generations", "the PRM used as a dense reward is a second proxy and "
                            "inherits the over-optimisation risks of an ORM",
                            f"PRM alone: held-out pass@1 {golds[0]:.3f} -> peak {golds[best]:.3f} at update "
                            f"{runs['prm']['evals'][best]['step']} -> {golds[-1]:.3f}{anchored}; outcome GRPO {final:.3f}",
                            0 < best < len(golds) - 1 and golds[-1] < golds[best] - 0.05))
        if "final" in runs["prm"] and "final" in runs["outcome"]:
            hacked, honest = runs["prm"]["final"], runs["outcome"]["final"]
            claims.append(claim("whole-game §7.2; over-long-generations (Gao et al.)", "reward hacking shows as format "
                                "tricks: well-formed outputs that score well on the learned reward but are wrong",
                                f"share of held-out completions in worked form with a wrong answer after RL: PRM "
                                f"alone {hacked['worked_form_wrong_share']:.3f} (worked form {hacked['worked_form_share']:.3f},"
                                f" pass@1 {hacked['pass@1']:.3f}) vs outcome GRPO {honest['worked_form_wrong_share']:.3f} "
                                f"(worked form {honest['worked_form_share']:.3f}, pass@1 {honest['pass@1']:.3f})",
                                hacked["worked_form_wrong_share"] > honest["worked_form_wrong_share"]))
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


PADDING = 0.25  # characters past the worked solution per completion, gained in RL, that count as padding learnt


def padding_growth(stats: dict, cold: dict) -> float:
    """Characters past the worked solution per completion, after RL minus before it."""
    return stats["excess_chars"] - cold["excess_chars"]


def writes(stats: dict) -> str:
    return (f"{stats['length']:.1f} tokens, {stats['excess_chars']:.2f} characters and {stats['extra_lines']:.2f} "
            f"lines past the worked solution, pass@1 {stats['pass@1']:.3f}")


def length_claims(held: dict, runs: dict, proxy_rl: dict | None, length: dict | None) -> list[dict]:
    cold, corr = held["stats"], held["length_corr"]
    orm, qrm = corr["ORM"], corr["Q-RM (mean Z)"]
    claims = [claim("whole-game §7.6", "length bias shows as a reward that correlates with token count",
                    f"r(score, tokens) on {held['samples']} held-out cold-start samples: ORM {orm['all']:.2f} (within "
                    f"right answers {orm['right']:.2f}, within wrong {orm['wrong']:.2f}); PRM-min "
                    f"{corr['PRM-min']['all']:.2f}; Q-RM {qrm['all']:.2f}", orm["all"] > 0.1)]
    if "qrm" in runs:
        final = runs["qrm"]["final"]
        claims.append(claim("over-long-generations (Gao et al.)", "reward models rate longer responses higher, so "
                            "policies learn to pad (Q-RM's token credit as the reward)",
                            f"Q-RM's mean Z vs tokens: r = {qrm['all']:.2f} (within right {qrm['right']:.2f}, within "
                            f"wrong {qrm['wrong']:.2f}); RL on its credit: cold start {writes(cold)} -> {writes(final)}",
                            qrm["all"] > 0.1 and padding_growth(final, cold) >= PADDING))
    if proxy_rl is not None:
        longest = max(proxy_rl["evals"], key=lambda e: e["length"])
        claims.append(claim("over-long-generations (Gao et al.)", "reward models rate longer responses higher, so "
                            "policies learn to pad (the ORM as the reward, β = 0)",
                            f"ORM vs tokens: r = {orm['all']:.2f}; RL on it: cold start {writes(cold)}; after "
                            f"{proxy_rl['evals'][-1]['step']} updates {writes(proxy_rl['final'])} (longest on the way: "
                            f"{longest['length']:.1f} tokens at update {longest['step']})",
                            padding_growth(proxy_rl["final"], cold) >= PADDING))
    if length is None:
        return claims
    runs = {name: run["final"] for name, run in length["runs"].items()}
    raw, biased = runs[LENGTH_RUNS[0]], length["length_corr"]["length-preferring RM"]
    grew = padding_growth(raw, cold)
    # growth: at least a fifth more tokens; no information gain: gold pass@1 no higher than before
    claims.append(claim("whole-game §7.6", "length bias: answers grow without information gain and the reward "
                        "correlates with token count (an RM whose preference data favour length)",
                        f"RM from a labeller who prefers the longer of two equally right (or wrong) answers: r(score, "
                        f"tokens) {biased['all']:.2f} (within right {biased['right']:.2f}, within wrong "
                        f"{biased['wrong']:.2f}); RL on it: cold start {writes(cold)} -> {writes(raw)}",
                        biased["all"] > 0.1 and raw["length"] >= 1.2 * cold["length"]
                        and raw["pass@1"] <= cold["pass@1"] + 0.02))
    for name, fix in ((LENGTH_RUNS[1], "length-normalise the reward (the RM's fitted length trend removed)"),
                      (LENGTH_RUNS[2], "train the RM on length-balanced preferences")):
        fixed = runs[name]
        measured = f"{name}: {writes(fixed)}; unfixed: {writes(raw)}"
        if grew < PADDING:
            claims.append(claim("whole-game §7.6", f"mitigation of length bias: {fix}", measured + "; the unfixed RM "
                                "taught no padding, so there is nothing to mitigate (not testable)", None))
            continue
        claims.append(claim("whole-game §7.6", f"mitigation of length bias: {fix}", measured,
                            padding_growth(fixed, cold) <= 0.5 * grew and fixed["pass@1"] >= raw["pass@1"] - 0.02))
    return claims


def check_claims(args: Args, data: dict, held: dict, runs: dict, fits: dict, proxy_rl: dict | None,
                 length: dict | None = None) -> list[dict]:
    return (label_and_rerank_claims(args, data, held) + rl_claims(args, runs) + overoptimisation_claims(fits, proxy_rl)
            + length_claims(held, runs, proxy_rl, length))


def metrics_of(args: Args, data: dict, held: dict, runs: dict, fits: dict, proxy_rl: dict | None,
               length: dict | None = None) -> dict:
    metrics = {"label_solutions": len(data["texts"]), "label_solutions_right": float(data["rewards"].mean()),
               "soft_label_auroc": data["soft_auroc"]}
    for n, q in data["quality"].items():
        metrics.update({f"hard_label_{k}[N={n}]": v for k, v in q.items()})
    for name, curve in held["curves"].items():
        metrics.update({f"best_of_n[{name}][N={N}]": v for N, v in curve.items()})
    for name, loc in held["credit"]["results"].items():
        metrics.update({f"localisation_{k}[{name}]": v for k, v in loc.items()})
    for name, corr in held["length_corr"].items():
        metrics.update({f"length_corr[{name}]_{k}": v for k, v in corr.items()})
    metrics.update({f"cold_start_{k}": v for k, v in held["stats"].items()})
    speed = convergence(runs, args.speed_window) if "outcome" in runs else {"updates": {}}
    for method, run in runs.items():
        metrics[f"rl[{method}]_pass@1_start"] = run["evals"][0]["pass@1"]
        metrics[f"rl[{method}]_pass@1_final"] = run["evals"][-1]["pass@1"]
        metrics[f"rl[{method}]_updates_to_halfway"] = speed["updates"].get(method)
        metrics.update({f"rl[{method}]_final_{k}": v for k, v in run["final"].items()})
        metrics[f"rl[{method}]_wall_clock_s"] = run["wall_clock_s"]
    for kind, part in fits.items():
        for form in ("bon", "rl"):
            metrics.update({f"overopt_{kind}_fit_{form}_{k}": v for k, v in part[f"fit_{form}"].items()})
    if proxy_rl is not None:
        metrics["overopt_rl_gold_final"] = proxy_rl["points"][-1]["gold"]
        metrics["overopt_rl_gold_best"] = max(p["gold"] for p in proxy_rl["points"])
        metrics["overopt_rl_kl_final"] = proxy_rl["points"][-1]["kl"]
        metrics.update({f"overopt_rl_final_{k}": v for k, v in proxy_rl["final"].items()})
    if length is not None:
        metrics.update({"length_bias_pairs": length["pairs"], "length_bias_balanced_pairs": length["balanced_pairs"],
                        "length_bias_slope_per_token": length["slope"]})
        for name, corr in length["length_corr"].items():
            metrics.update({f"length_corr[{name}]_{k}": v for k, v in corr.items()})
        for name, run in length["runs"].items():
            metrics.update({f"length_rl[{name}]_final_{k}": v for k, v in run["final"].items()})
            proxies = [entry["proxy"] for entry in run["log"]]
            metrics[f"length_rl[{name}]_rm_score_first"] = mean_or_nan(proxies[:args.speed_window])
            metrics[f"length_rl[{name}]_rm_score_last"] = mean_or_nan(proxies[-args.speed_window:])
            metrics[f"length_rl[{name}]_wall_clock_s"] = run["wall_clock_s"]
    return metrics


def report(args: Args, data: dict, held: dict, runs: dict, fits: dict, proxy_rl: dict | None, length: dict | None,
           claims: list[dict]) -> None:
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
    written = {"cold start": held["stats"], **{f"RL: {m}": r["final"] for m, r in runs.items()}}
    if proxy_rl is not None:
        written["RL on the ORM, β=0"] = proxy_rl["final"]
    if length is not None:
        written.update({f"RL on the {name}": run["final"] for name, run in length["runs"].items()})
    keys = ("pass@1", "length", "extra_lines", "excess_chars", "worked_form_share", "worked_form_wrong_share")
    print(f"\nWhat each policy writes on the held-out problems ({args.eval_samples} samples each):")
    print(format_table([[name, *(stats[k] for k in keys)] for name, stats in written.items()],
                       ["policy", "pass@1", "tokens", "extra lines", "chars past the solution", "worked form",
                        "worked form, wrong"]))
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
    length = length_bias_study(policy, tokenizer, data, held, args, device) if args.length_bias else None

    plot_all(out, data, held, runs, proxy_rl, fits, length)
    claims = check_claims(args, data, held, runs, fits, proxy_rl, length)
    metrics = metrics_of(args, data, held, runs, fits, proxy_rl, length)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, label_quality=data["quality"],
                  best_of_n={"ns": held["ns"], "curves": held["curves"]}, localisation=held["credit"]["results"],
                  rl=runs, overoptimisation=fits, overoptimisation_rl=proxy_rl, reward_model_losses=models["losses"],
                  length_bias=length, cold_start_info={k: v for k, v in info.items() if k != "sft_losses"})
    report(args, data, held, runs, fits, proxy_rl, length, claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    run_script(main, Args)
