"""06 study — the reward models at full scale: reranking, dense RL and its hacking, over-optimisation, length.

The chapter trains its PRM and Q-RM on a compact budget and asks whether their credit lands on the
wrong step. This study runs the whole pipeline at full scale (16 rollouts per step prefix, 400
reward-model steps, 64 held-out samples per problem, RL on 16 x 8 completions for 80 updates) and
measures what the chapter leaves out:

  label quality         the hard Math-Shepherd label against the gold one at N = 1..16 (exact
                        expectation over subsets of the 16 rollouts); the soft label's AUROC
  ORM                   the PRM's loss on the final token only, trained beside the PRM and Q-RM
  best-of-N             rerank 64 cold-start samples per held-out problem by PRM-min, -mean,
                        -product (a whole solution's score from its steps'), ORM, Q-RM and
                        majority vote, against Lightman et al.'s MATH numbers
  dense RL              the chapter's three advantages (outcome, PRM, PRM + verifier) and Q-RM's Z
                        as per-token advantages (A_t = (Z_t - mean) / std over the group's tokens),
                        with Chen et al.'s convergence-speed and pass@1 claims and what each policy
                        writes
  over-optimisation     best-of-N (KL = log N - (N-1)/N) and RL (β = 0) against the learned ORM
                        while the verifier watches; Gao et al.'s R_bon(d) = d(α - βd) and
                        R_RL(d) = d(α - β log d), d = sqrt(KL)
  length bias           each learned score's correlation with token count, and whether RL on it
                        pads; with --length-bias, a Bradley-Terry RM -log σ(r(chosen) - r(rejected))
                        on the pairs of a labeller who prefers the longer of two equally right (or
                        wrong) answers, RL on it, and the two fixes: r - b·length (b fitted with
                        correctness held fixed) and the same RM trained on length-balanced pairs

    python studies/06_overoptimisation.py                # runs/studies/06_overoptimisation/
    python studies/06_overoptimisation.py --length-bias  # + 2 preference RMs and 3 RL runs: 642 s on 2 CPU
                                                         # cores, the run docs/06_prm_qrm.md shows

Read beside: credit-assignment-problem-survey.txt §4.5.2, §9, §10; credit-assignment-over-long-generations.txt
(process rewards, over-optimisation); credit-assignment-is-the-whole-game.txt §7.2, §7.6, §7.7. Papers:
Lightman et al. 2024; Wang et al. 2024 (Math-Shepherd); Chen et al. 2025 (Q-RM); Gao, Schulman & Hilton
2022. Figures: label_quality.png, best_of_n.png, rl.png, overoptimisation.png, and length_bias.png with
--length-bias.
"""

import copy
import dataclasses
import importlib
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402
from common import claim, mean_or_nan, moving_average, pearson, save_figure  # noqa: E402
from lm_world import (  # noqa: E402
    Completions,
    auroc,
    frozen_copy,
    pass_at_k,
    sample,
    token_logprobs,
    verifier_rewards,
    well_formed,
)

prm = importlib.import_module("06_prm_qrm")

RL_METHODS = {**prm.RL_METHODS, "qrm": "Q-RM tokens"}
REWARD_MODELS = ("prm", "orm", "qrm")  # made, then trained, in this order from one random stream
LIGHTMAN_N = 1860  # Lightman et al. (2024), best-of-1860 on MATH (their Figure 3)
LIGHTMAN = {"PRM": 0.782, "ORM": 0.724, "majority vote": 0.696}
LENGTH_RUNS = ("length-preferring RM", "same RM, length-normalised", "RM on length-balanced pairs")
PADDING = 0.25  # characters past the worked solution per completion, gained in RL, that count as padding learnt


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/06_overoptimisation", "output folder for figures and results.json")
    # the chapter's pipeline at full scale
    rollouts_per_prefix: int = common.arg(16, "Math-Shepherd: completions rolled out from each step prefix (largest N)")
    rm_steps: int = common.arg(400, "optimiser steps for each reward model (PRM, ORM, Q-RM)")
    rl_steps: int = common.arg(80, "RL: policy updates")
    prompts: int = common.arg(16, "RL: prompts per update")
    rl_methods: str = common.arg("outcome,prm,prm_outcome,qrm", "RL: advantages to compare (outcome GRPO, PRM "
                                 "steps, PRM steps with the verifier on the last step, Q-RM tokens)", tuple(RL_METHODS),
                                 item=str)
    # this study's own
    label_ns: str = common.arg("1,2,4,8,16", "Math-Shepherd: the N at which label quality is measured (at most "
                               "--rollouts-per-prefix)", item=int)
    bon_samples: int = common.arg(64, "best-of-N: samples per held-out problem (the largest N)")
    bon_repeats: int = common.arg(64, "best-of-N: random subsets of size N drawn per problem")
    speed_window: int = common.arg(5, "RL: trailing window (updates) of the training pass rate read for convergence speed")
    overopt_steps: int = common.arg(120, "over-optimisation: RL updates against the learned ORM")
    overopt_lr: float = common.arg(3e-4, "over-optimisation: learning rate, 3x the chapter's (β = 0: nothing holds "
                                   "the policy back)")
    length_bias: bool = common.arg(False, "also run the length-bias study: RL on a preference RM that prefers length, "
                                   "raw, length-normalised, and retrained on length-balanced pairs (about 6 more minutes)")
    length_steps: int = common.arg(80, "length bias: RL updates on each preference RM")

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, rollouts_per_prefix=4, rm_steps=2, rl_steps=2, prompts=2, label_ns="1,4",
                 bon_samples=4, bon_repeats=2, overopt_steps=2, length_steps=2)

    def __post_init__(self):
        super().__post_init__()
        common.require_positive(self, "rollouts_per_prefix", "rm_steps", "rl_steps", "prompts", "bon_samples",
                                "bon_repeats", "speed_window", "overopt_steps", "overopt_lr", "length_steps")
        common.require(all(0 < n <= self.rollouts_per_prefix for n in self.label_n_list),
                       "--label-ns must be in 1..--rollouts-per-prefix")
        common.require(self.rl_method_list and set(self.rl_method_list) <= set(RL_METHODS),
                       f"--rl-methods must be among {','.join(RL_METHODS)}")

    @property
    def label_n_list(self) -> list[int]:
        return common.as_list(self.label_ns, int)

    @property
    def rl_method_list(self) -> list[str]:
        return common.as_list(self.rl_methods, str)


def chapter_args(args: Args) -> "prm.Args":
    """The chapter's settings (its smoke values under --smoke) at this study's scale, on this run's
    model, task and seed (the RL methods are this study's own, Q-RM's among them)."""
    scale = {"rollouts_per_prefix": args.rollouts_per_prefix, "rm_steps": args.rm_steps, "rl_steps": args.rl_steps,
             "prompts": args.prompts, "credit_samples": args.bon_samples}
    return dataclasses.replace(lm_world.chapter_lm_args(prm.Args, args), **scale)


# ============================================================================================
# What the chapter's reward models leave out: the ORM, a PRM's score of a whole solution, Q-RM in RL
# ============================================================================================


def last_token_mask(mask: torch.Tensor) -> torch.Tensor:
    """True on each row's last completion token (EOS): where an ORM reads its score."""
    last = mask.long().cumsum(1) == mask.long().sum(1, keepdim=True)
    return last & mask


def orm_loss(data: dict) -> tuple:
    """The ORM's (loss(model, rows), items): the PRM's loss (`prm.step_bce`) on the final token only,
    against the verifier's verdict on the solution."""
    r = data["completions"]
    last = last_token_mask(r.completion_mask)
    targets = last.float() * data["rewards"].to(last.device)[:, None]

    def loss(model, rows):
        return prm.step_bce(prm.batch_scores(model, r, rows), targets[rows], last[rows])

    return loss, len(r.sequences)


def train_reward_models(policy, tokenizer, data: dict, run: "prm.Args") -> dict:
    """The chapter's PRM and Q-RM with the ORM between them (`REWARD_MODELS`' order)."""
    losses = {**prm.reward_model_losses(tokenizer, data, run), "orm": orm_loss(data)}
    return prm.train_reward_models(policy, {kind: losses[kind] for kind in REWARD_MODELS}, run)


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


def token_advantages(z: torch.Tensor, mask: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """Q-RM's credit as advantages: Z at each token, standardised over the tokens of the G
    completions of a prompt (the mean acts as the baseline V, so A_t ≈ Q_t - V)."""
    B, T = z.shape
    v = z.view(-1, group_size, T)
    m = mask.view(-1, group_size, T).float()
    count = m.sum((1, 2), keepdim=True)
    mean = (v * m).sum((1, 2), keepdim=True) / count
    std = (((v - mean) ** 2 * m).sum((1, 2), keepdim=True) / (count - 1).clamp(min=1)).sqrt()
    # A_t = (Z_t - mean_group) / (std_group + eps)
    return ((v - mean) / (std + eps) * m).view(B, T)


def qrm_advantage_fn(qrm, group_size: int):
    """Q-RM's per-token Z as advantages (`token_advantages`)."""
    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        return token_advantages(prm.reward_model_logits(qrm, completions), completions.completion_mask, group_size)
    return advantage_fn


def advantages_of(method: str, models: dict, tokenizer, group_size: int):
    """The per-token advantages of one --rl-methods name: Q-RM's here, the others the chapter's."""
    if method == "qrm":
        return qrm_advantage_fn(models["qrm"], group_size)
    if method == "outcome":
        return prm.outcome_advantage_fn
    return prm.prm_advantage_fn(models["prm"], tokenizer, group_size, with_outcome=method == "prm_outcome")


# ============================================================================================
# Label quality: the hard label against the gold one at each N
# ============================================================================================


def label_quality(gold: np.ndarray, counts: np.ndarray, rollouts: int, n: int) -> dict:
    """Expected quality of the hard label from n rollouts, exactly, given c of `rollouts` right
    per step: P(label = 1) = pass@n = 1 - C(rollouts-c, n)/C(rollouts, n). Positive = "step
    right". False positive: a wrong prefix that a lucky completion rescued; false negative: a
    right prefix that no completion finished."""
    p_one = np.array([pass_at_k(rollouts, int(c), n) for c in counts])
    gold = gold.astype(bool)
    return {"accuracy": float(np.where(gold, p_one, 1 - p_one).mean()),
            "false_positive_rate": mean_or_nan(p_one[~gold]), "false_negative_rate": mean_or_nan(1 - p_one[gold])}


def label_quality_study(data: dict, n_max: int, ns: list[int]) -> dict:
    """The hard label's expected quality against the gold labels at each N of `ns`, from the
    `n_max` rollouts of every step prefix (the last step's label is exact: c = 0 or all)."""
    counts = np.concatenate([np.concatenate([o.sum(1), [float(r) * n_max]])
                             for o, r in zip(data["outcomes"], data["rewards"])])
    gold = [prm.gold_step_labels(p, t) for p, t in zip(data["problems"], data["texts"])]
    all_gold = np.concatenate([np.array(g, dtype=bool) for g in gold])
    inner = np.concatenate([np.arange(len(g)) < len(g) - 1 for g in gold])  # the steps that needed rollouts
    quality = {n: label_quality(all_gold, counts, n_max, n) for n in ns}
    soft = counts / n_max
    print(f"hard-label accuracy at N={ns[-1]}: {quality[ns[-1]]['accuracy']:.3f}")
    return {"quality": quality, "quality_inner_steps": {n: label_quality(all_gold[inner], counts[inner], n_max, n)
                                                          for n in ns},
            "soft_auroc": auroc(soft[all_gold], soft[~all_gold]), "soft_mean_on_gold_right": mean_or_nan(soft[all_gold]),
            "soft_mean_on_gold_wrong": mean_or_nan(soft[~all_gold]), "steps_labelled": int(len(all_gold)),
            "prefixes_rolled_out": int(inner.sum())}


# ============================================================================================
# Best-of-N: rerank the cold start's samples
# ============================================================================================


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


def held_out_study(policy, tokenizer, models: dict, run: "prm.Args", args: Args, device) -> dict:
    """The chapter's held-out samples (`bon_samples` per problem): best-of-N by each reranker, where
    each credit puts the blame in the failed ones, and how each score tracks length."""
    h = prm.held_out_samples(policy, tokenizer, models, run, device)
    r, correct, ends, z = h["completions"], h["correct"], h["ends"], h["z"]
    orm_probs = torch.sigmoid(prm.reward_model_logits(models["orm"], r))[last_token_mask(r.completion_mask)].cpu()
    mask = h["mask"].float()
    rankers = {"PRM-min": prm_min(h["prm_probs"], ends), "PRM-mean": prm_mean(h["prm_probs"], ends),
               "PRM-product": prm_product(h["prm_probs"], ends), "ORM": orm_probs,
               "Q-RM (mean Z)": (z * mask).sum(1) / mask.sum(1)}
    M = run.credit_samples
    ns = [2 ** i for i in range(int(math.log2(M)) + 1)]
    shape = (len(h["problems"]) // M, M)
    correct_pm = correct.reshape(shape)
    curves = {name: best_of_n(s.numpy().reshape(shape), correct_pm, ns, args.bon_repeats,
                              np.random.default_rng(args.seed + 5)) for name, s in rankers.items()}
    curves["majority vote"] = majority_of_n(answer_codes(h["texts"]).reshape(shape), correct_pm, ns, args.bon_repeats,
                                            np.random.default_rng(args.seed + 5))
    curves["oracle (pass@N)"] = {N: float(np.mean([pass_at_k(M, int(c), N) for c in correct_pm.sum(1)])) for N in ns}
    orm_pm = orm_probs.numpy().reshape(shape)
    proxy_of_pick = best_of_n(orm_pm, orm_pm, ns, args.bon_repeats, np.random.default_rng(args.seed + 5))
    lengths = r.lengths.cpu().numpy()
    length_corr = {name: length_correlations(rankers[name].numpy(), lengths, correct)
                   for name in ("ORM", "PRM-min", "Q-RM (mean Z)")}
    print(f"best-of-{ns[-1]}: " + ", ".join(f"{k} {curves[k][ns[-1]]:.3f}"
                                              for k in ("PRM-min", "ORM", "majority vote", "oracle (pass@N)")))
    return {"ns": ns, "curves": curves, "orm_proxy_of_pick": proxy_of_pick, "credit": prm.credit_study(h),
            "pass@1": float(correct.mean()), "samples": len(h["texts"]), "length_corr": length_corr,
            "stats": output_stats(h["problems"], h["texts"], correct, lengths), "completions": r, "correct": correct}


# ============================================================================================
# Dense RL at full scale, and what each policy writes
# ============================================================================================


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


def what_it_writes(policy, tokenizer, problems: list, args: lm_world.LMArgs, device, samples: int = 3) -> list[str]:
    """A few completions of the trained policy: what the credit taught it to write."""
    prompts = [p.prompt for p in problems for _ in range(samples)]
    _, texts = sample(policy, tokenizer, prompts, args.max_new_tokens, torch.Generator(device).manual_seed(args.seed),
                      device)
    return [prompt + text for prompt, text in zip(prompts, texts)]


def sample_stats(policy, tokenizer, problems: list, args: lm_world.LMArgs, device) -> dict:
    """`output_stats` of `eval_samples` completions of each problem by the policy."""
    repeated = [p for p in problems for _ in range(args.eval_samples)]
    completions, texts = sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens,
                                torch.Generator(device).manual_seed(args.seed + 6), device)
    correct = verifier_rewards(repeated, texts, completions.truncated).numpy()
    return output_stats(repeated, texts, correct, completions.lengths.cpu().numpy())


def rl_comparison(initial, tokenizer, models: dict, run: "prm.Args", args: Args, device) -> dict:
    """The chapter's RL runs (as `prm.rl_study`, with Q-RM's advantages too), each followed by what
    its policy writes on the held-out problems (`sample_stats`) and a few examples."""
    held_out, runs = run.task.held_out(run.eval_problems), {}
    for method in args.rl_method_list:
        start, policy = time.time(), copy.deepcopy(initial)
        runs[method] = prm.train(policy, frozen_copy(initial), tokenizer, run,
                                 advantages_of(method, models, tokenizer, run.group_size), held_out, device,
                                 f"RL {method}")
        runs[method]["wall_clock_s"] = time.time() - start
        runs[method]["examples"] = what_it_writes(policy, tokenizer, held_out[:2], run, device)
        runs[method]["final"] = sample_stats(policy, tokenizer, held_out, run, device)
        print(f"  RL {method:11s} held-out pass@1 {runs[method]['evals'][0]['pass@1']:.3f} -> "
              f"{runs[method]['evals'][-1]['pass@1']:.3f} in {runs[method]['wall_clock_s']:.0f} s")
    return runs


# ============================================================================================
# Over-optimisation: best-of-N and RL against the learned ORM, Gao et al.'s forms
# ============================================================================================


def centred_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """05's Dr. GRPO advantage of each completion, rewards (N prompts, G completions)."""
    # A_i = r_i - mean_g
    return rewards - rewards.mean(1, keepdim=True)


def proxy_advantage_fn(orm, reference, group_size: int, log: list):
    """Group-centred advantages (05's Dr. GRPO) on the learned ORM's P(right) instead of the
    verifier. Logs, per update, the proxy and the sequence KL(π || π_ref), estimated as
    mean_i Σ_t log π(y_t)/π_ref(y_t) (k1, summed)."""
    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        proxy = torch.sigmoid(prm.reward_model_logits(orm, completions))[last_token_mask(completions.completion_mask)]
        with torch.no_grad():
            ref_logp, _ = token_logprobs(reference, completions.sequences, completions.attention_mask,
                                         completions.prompt_length)
        kl = ((completions.logprobs - ref_logp) * completions.completion_mask).sum(1).mean()
        log.append({"proxy": float(proxy.mean()), "kl": float(kl), "gold": float(rewards.mean())})
        # centred, not z-scored: GRPO's std division would blow tiny proxy differences up to unit advantages
        return centred_advantages(proxy.view(-1, group_size)).flatten()[:, None] * completions.completion_mask.float()
    return advantage_fn


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


def overoptimisation_rl(initial, tokenizer, models: dict, run: "prm.Args", args: Args, device) -> dict:
    """GRPO on the learned ORM's score with β = 0 for `overopt_steps` updates; the verifier
    (gold) is only watched: held-out pass@1 every eval_every updates, and on the training batch."""
    log = []
    run_args = dataclasses.replace(run, beta=0.0, lr=args.overopt_lr, rl_steps=args.overopt_steps)
    start = time.time()
    policy, held_out = copy.deepcopy(initial), run.task.held_out(run.eval_problems)
    result = prm.train(policy, frozen_copy(initial), tokenizer, run_args,
                       proxy_advantage_fn(models["orm"], frozen_copy(initial), run.group_size, log),
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
            "final": sample_stats(policy, tokenizer, held_out, run, device)}


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
# Length bias: each score against length; a preference RM that prefers length, and two fixes
# ============================================================================================


def length_correlations(scores, lengths, correct) -> dict:
    """r(score, token count) over all samples, and within the right and within the wrong ones
    (where correctness cannot be what the length stands for)."""
    scores, lengths, correct = np.asarray(scores, float), np.asarray(lengths, float), np.asarray(correct, bool)
    return {"all": pearson(scores, lengths), "right": pearson(scores[correct], lengths[correct]),
            "wrong": pearson(scores[~correct], lengths[~correct])}


def length_preferring_pairs(problems: list, rewards, lengths) -> list[tuple[int, int]]:
    """(chosen, rejected) pairs from a labeller with a length bias: of two solutions to one
    problem, the right one; of two equally right (or equally wrong) ones, the longer one; same
    verdict and same length: no preference, no pair."""
    return [(i, j) for group in prm.problem_groups(problems) for i in group for j in group
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
        score = prm.reward_model_logits(rm, completions)[last_token_mask(completions.completion_mask)]
        lengths = completions.lengths.to(score.dtype)
        log.append({"proxy": float(score.mean()), "length": float(lengths.mean())})
        reward = length_normalised(score, lengths, slope).view(-1, group_size)
        return prm.grpo_advantages(reward).flatten()[:, None] * completions.completion_mask.float()
    return advantage_fn


def train_preference_rm(policy, r: Completions, pairs: list[tuple[int, int]], run: "prm.Args", rng: np.random.Generator,
                        desc: str) -> tuple:
    """A scorer from the policy's body, Bradley-Terry on (chosen, rejected) rows of r, read at EOS."""
    rm, pairs = prm.make_scorer(policy), torch.tensor(pairs, dtype=torch.long).view(-1, 2)
    if not len(pairs):  # nothing to learn from: the scorer stays as made
        return rm.eval(), []
    last = last_token_mask(r.completion_mask)

    def loss(model, rows):
        win, lose = pairs[rows, 0], pairs[rows, 1]
        return bradley_terry_loss(prm.batch_scores(model, r, win)[last[win]],
                                  prm.batch_scores(model, r, lose)[last[lose]])

    return rm, prm.fit_scorer(rm, loss, len(pairs), run, rng, desc)


def length_bias_study(initial, tokenizer, data: dict, held: dict, run: "prm.Args", args: Args, device) -> dict:
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
        train_preference_rm(initial, r, chosen, run, rng, desc)
        for chosen, desc in ((pairs, "length-preferring RM"), (balanced, "length-balanced RM")))
    slope = length_slope(prm.reward_model_logits(biased_rm, r)[last_token_mask(r.completion_mask)].cpu().numpy(),
                         lengths, rewards)
    h = held["completions"]
    corr = {name: length_correlations(prm.reward_model_logits(rm, h)[last_token_mask(h.completion_mask)].cpu().numpy(),
                                      h.lengths.cpu().numpy(), held["correct"])
            for name, rm in (("length-preferring RM", biased_rm), ("length-balanced RM", balanced_rm))}
    held_out = run.task.held_out(run.eval_problems)
    runs = {}
    for name, rm, run_slope in zip(LENGTH_RUNS, (biased_rm, biased_rm, balanced_rm), (0.0, slope, 0.0)):
        log, policy, start = [], copy.deepcopy(initial), time.time()
        result = prm.train(policy, frozen_copy(initial), tokenizer, dataclasses.replace(run, rl_steps=args.length_steps),
                           rm_advantage_fn(rm, run.group_size, run_slope, log), held_out, device, desc=f"RL on the {name}")
        runs[name] = {**result, "log": log, "final": sample_stats(policy, tokenizer, held_out, run, device),
                      "wall_clock_s": time.time() - start}
        f = runs[name]["final"]
        print(f"  RL on the {name}: {f['length']:.1f} tokens, {f['excess_chars']:.1f} characters past the "
              f"solution, pass@1 {f['pass@1']:.3f}")
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


# ============================================================================================
# Claims, metrics and report
# ============================================================================================


def mean_over(curve: dict, ns: list[int]) -> float:
    """A best-of-N curve's mean accuracy over the given N."""
    return float(np.mean([curve[N] for N in ns]))


def label_and_rerank_claims(run: "prm.Args", data: dict, held: dict) -> list[dict]:
    q = data["quality"][run.label_n]
    claims = [claim("survey §4.5.2, §10", "automatic (Monte Carlo) step labels are noisy: a step may be labelled "
                    "correct because a lucky rollout reached the right answer",
                    f"hard labels at N={run.label_n}: accuracy {q['accuracy']:.3f}, false positives "
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
    claims += prm.rl_claims(args, runs)  # a dense reward better than outcome-only? a second proxy?
    if "prm" in runs:
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


def check_claims(run: "prm.Args", args: Args, data: dict, held: dict, runs: dict, fits: dict, proxy_rl: dict | None,
                 length: dict | None = None) -> list[dict]:
    return (label_and_rerank_claims(run, data, held) + prm.credit_claims(held["credit"]) + rl_claims(args, runs)
            + overoptimisation_claims(fits, proxy_rl) + length_claims(held, runs, proxy_rl, length))


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


# ============================================================================================
# Tables: what the run prints, and the docs page shows (docs/publish.py)
# ============================================================================================


def table(title: str, header: list[str], rows: list[list]) -> dict:
    return {"title": title, "header": header, "rows": rows}


def label_tables(data: dict) -> dict:
    quality = table(f"Math-Shepherd hard labels against the gold ones ({len(data['texts'])} solutions)",
                    ["N rollouts", "accuracy", "false positives (of wrong steps)", "false negatives (of right steps)",
                     "accuracy (steps that needed rollouts)"],
                    [[n, q["accuracy"], q["false_positive_rate"], q["false_negative_rate"],
                      data["quality_inner_steps"][n]["accuracy"]] for n, q in data["quality"].items()])
    counts = table("The labelled solutions", ["", "value"],
                   [["solutions (training problems x samples)", len(data["texts"])],
                    ["share right", float(data["rewards"].mean())], ["steps labelled", data["steps_labelled"]],
                    ["step prefixes rolled out (all steps but the answer)", data["prefixes_rolled_out"]],
                    ["soft label (share of rollouts right): AUROC against gold", data["soft_auroc"]]])
    return {"labels": counts, "label_quality": quality}


def rerank_table(run: "prm.Args", held: dict) -> dict:
    names = list(held["curves"])
    lightman = [LIGHTMAN.get(k.split("-")[0] if k.startswith("PRM-min") else k, "–") for k in names]
    return table(f"Best-of-N on {run.eval_problems} held-out problems (Lightman et al.'s MATH numbers in the last row)",
                 ["N", *names], [[N, *(held["curves"][k][N] for k in names)] for N in held["ns"]]
                 + [[f"{LIGHTMAN_N} (Lightman et al., MATH)", *lightman]])


def rl_tables(run: "prm.Args", args: Args, runs: dict) -> dict:
    steps = [e["step"] for e in next(iter(runs.values()))["evals"]]
    speed = convergence(runs, args.speed_window) if "outcome" in runs else None
    halfway = f" ({speed['start']:.3f} -> {speed['target']:.3f})" if speed else " (no outcome GRPO run)"
    problem = run.task.held_out(1)[0].question.strip()

    def peak(evals: list[dict]) -> str:
        best = max(evals, key=lambda e: e["pass@1"])
        return f"{best['pass@1']:.3f} at {best['step']}"

    def first_completion(r: dict) -> str:  # a code span: the task's "*" is markdown's emphasis
        return "`" + r["examples"][0].split("\n", 1)[-1].replace("\n", "⏎") + "`"

    curves = table(f"Held-out pass@1 through RL, {run.prompts}x{run.group_size} completions per update",
                   ["advantages", *(f"update {s}" for s in steps)],
                   [[RL_METHODS[m], *(e["pass@1"] for e in r["evals"])] for m, r in runs.items()])
    summary = table(f"Updates to halfway on the training pass rate{halfway}, and what each policy writes",
                    ["advantages", "updates to halfway", "held-out pass@1 peak (update)", f"a completion of {problem}"],
                    [[RL_METHODS[m], speed and speed["updates"][m], peak(r["evals"]), first_completion(r)]
                     for m, r in runs.items()])
    return {"rl": curves, "rl_summary": summary}


def written_table(run: "prm.Args", held: dict, runs: dict, proxy_rl: dict | None, length: dict | None) -> dict:
    written = {f"cold start ({held['samples']} samples)": held["stats"],
               **{RL_METHODS[m]: r["final"] for m, r in runs.items()}}
    if proxy_rl is not None:
        written[f"RL on the ORM, β = 0 ({proxy_rl['evals'][-1]['step']} updates)"] = proxy_rl["final"]
    if length is not None:
        written.update({f"RL on the {name}": r["final"] for name, r in length["runs"].items()})
    keys = ("pass@1", "length", "extra_lines", "excess_chars", "worked_form_share", "worked_form_wrong_share")
    return table(f"What each policy writes on the held-out problems ({run.eval_samples} samples each after RL)",
                 ["policy", "pass@1", "tokens", "extra lines", "characters past the solution", "worked form",
                  "worked form, wrong answer"], [[name, *(stats[k] for k in keys)] for name, stats in written.items()])


def overoptimisation_tables(held: dict, fits: dict, proxy_rl: dict | None) -> dict:
    bon = fits["bon"]
    tables = {"overopt_bon": table("Best-of-N against the ORM: gold gain and the ORM's score of the pick",
                                   ["N", "KL (nats)", "gold gain", "ORM score of the pick"],
                                   [[N, d * d, g, p] for N, d, g, p in zip(held["ns"], bon["d"], bon["gain"], bon["proxy"])])}
    if proxy_rl is not None:
        tables["overopt_rl"] = table("RL against the ORM (β = 0): gold and proxy against KL",
                                     ["update", "KL (nats)", "gold (held-out pass@1)", "ORM score (training batches)"],
                                     [[p["step"], p["kl"], p["gold"], p["proxy"]] for p in proxy_rl["points"]])
    kinds = {"bon": "best-of-N", "rl": "RL, β = 0"}
    forms = {"bon": "R_bon(d) = d(α − βd)", "rl": "R_RL(d) = d(α − β log d)"}
    tables["overopt_fits"] = table("Gao et al.'s forms fitted to the gold gain (d = sqrt(KL))",
                                   ["optimisation", "form", "α", "β", "R²"],
                                   [[kinds[kind], forms[form], *(part[f"fit_{form}"][k] for k in ("alpha", "beta", "r2"))]
                                    for kind, part in fits.items() for form in forms])
    return tables


def length_tables(args: Args, held: dict, length: dict | None) -> dict:
    correlations = {**held["length_corr"], **(length["length_corr"] if length else {})}
    tables = {"length_corr": table(f"Each score against token count on {held['samples']} held-out cold-start samples "
                                   "(Pearson r)", ["score", "all", "within right answers", "within wrong answers"],
                                   [[name, *c.values()] for name, c in correlations.items()])}
    if length is None:
        return tables
    labels = {LENGTH_RUNS[0]: f"{LENGTH_RUNS[0]} ({length['pairs']} pairs)",
              LENGTH_RUNS[1]: f"same RM, length-normalised (r − {length['slope']:.3f}·tokens)",
              LENGTH_RUNS[2]: f"{LENGTH_RUNS[2]} ({length['balanced_pairs']} pairs)"}
    rows = []
    for name, run in length["runs"].items():
        best = max(run["evals"], key=lambda e: e["pass@1"])
        proxies = [entry["proxy"] for entry in run["log"]]
        rows.append([labels[name], run["final"]["pass@1"], f"{best['pass@1']:.3f} at {best['step']}",
                     run["final"]["length"], run["final"]["extra_lines"], run["final"]["excess_chars"],
                     mean_or_nan(proxies[:args.speed_window]), mean_or_nan(proxies[-args.speed_window:])])
    tables["length_rl"] = table(f"RL on each preference RM ({args.length_steps} updates)",
                                ["reward", "pass@1", "peak pass@1 (update)", "tokens", "extra lines",
                                 "characters past the solution", f"RM score, first {args.speed_window} updates",
                                 f"RM score, last {args.speed_window} updates"],
                                rows)
    return tables


def tables_of(run: "prm.Args", args: Args, data: dict, held: dict, runs: dict, fits: dict, proxy_rl: dict | None,
              length: dict | None) -> dict:
    credit = held["credit"]
    localisation = table(f"Credit localisation on {credit['solutions']} failed held-out solutions",
                         ["credit", "AUROC", "top-1"], [[k, v["auroc"], v["top1"]] for k, v in credit["results"].items()])
    return {**label_tables(data), "best_of_n": rerank_table(run, held), "localisation": localisation,
            **rl_tables(run, args, runs), "written": written_table(run, held, runs, proxy_rl, length),
            **overoptimisation_tables(held, fits, proxy_rl), **length_tables(args, held, length)}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, policy, tokenizer, info = lm_world.start_lm_run(args)
    run = chapter_args(args)
    common.seed_everything(args.seed)  # the same numbers whether the cold start was trained now or loaded
    print(f"06 study: the reward models at full scale; policy {info['path']}, device {device}")
    data = prm.label_study(policy, tokenizer, run, device)
    data.update(label_quality_study(data, run.rollouts_per_prefix, args.label_n_list))
    models = train_reward_models(policy, tokenizer, data, run)
    held = held_out_study(policy, tokenizer, models, run, args, device)
    runs = rl_comparison(policy, tokenizer, models, run, args, device)
    proxy_rl = overoptimisation_rl(policy, tokenizer, models, run, args, device)
    fits = overoptimisation_fits(held, proxy_rl)
    length = length_bias_study(policy, tokenizer, data, held, run, args, device) if args.length_bias else None

    plot_label_quality(data, out / "label_quality.png")
    plot_best_of_n(held, out / "best_of_n.png")
    plot_rl(runs, proxy_rl, out / "rl.png")
    plot_overoptimisation(fits, out / "overoptimisation.png")
    if length is not None:
        plot_length_bias(length, proxy_rl, out / "length_bias.png")
    claims = check_claims(run, args, data, held, runs, fits, proxy_rl, length)
    metrics = {**metrics_of(args, data, held, runs, fits, proxy_rl, length),
               "tables": tables_of(run, args, data, held, runs, fits, proxy_rl, length)}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, chapter_args=dataclasses.asdict(run),
                         label_quality=data["quality"], best_of_n={"ns": held["ns"], "curves": held["curves"]},
                         localisation=held["credit"]["results"], rl=runs, overoptimisation=fits,
                         overoptimisation_rl=proxy_rl, reward_model_losses=models["losses"], length_bias=length,
                         cold_start_info={k: v for k, v in info.items() if k != "sft_losses"})
    prm.report(metrics["tables"], claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
