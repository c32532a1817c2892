"""06 study — the reward models at scale, on several seeds: reranking, dense RL and its hacking, over-optimisation, length.

The chapter trains its PRM and Q-RM and asks whether their credit lands on the wrong step. This
study runs the whole pipeline on --seeds seeds (the cold start is the same; the labelled solutions,
the reward models' minibatches, the held-out samples and the RL prompts differ) and measures what
the chapter leaves out:

  label quality         the hard Math-Shepherd label against the gold one at N = 1..8 (exact
                        expectation over subsets of the rollouts); the soft label's AUROC
  ORM                   the PRM's loss on the final token only, trained beside the PRM and Q-RM
  PRM calibration       held-out step prefixes rolled out 2N times: is the PRM's P(step right)
                        nearer the value P(success | prefix) or its hard label's mean, pass@N?
  best-of-N             rerank the cold start's held-out samples by PRM-min, -mean, -product (a
                        whole solution's score from its steps'), ORM, Q-RM and majority vote,
                        against Lightman et al.'s MATH numbers; how wrong answers in worked form score
                        against wrong answers in any other form
  dense RL              outcome GRPO, the PRM's steps (and, with --rl-methods, the PRM with the
                        verifier on the last step), Q-RM's Z as per-token advantages (A_t =
                        (Z_t - mean) / std over the group's tokens) and GRPO on the learned
                        ORM's P(right): Chen et al.'s speed and pass@1 claims, what each writes
  over-optimisation     GRPO on the ORM at 3x the chapter's learning rate, at β = 0 and at
                        --kl-beta, the verifier only watching: the proxy and the gold against KL,
                        Gao et al.'s forms R_bon(d) = d(α - βd) and R_RL(d) = d(α - β log d),
                        d = sqrt(KL) (and best-of-N against the ORM, KL = log N - (N-1)/N), early
                        stopping on an evaluation apart from the one reported, what KL saves
  length bias           each learned score's correlation with token count, and whether RL on it
                        pads; with --length-bias, a Bradley-Terry RM -log σ(r(chosen) - r(rejected))
                        on the pairs of a labeller who prefers the longer of two equally right (or
                        wrong) answers, RL on it, and four fixes: r - b·length (b fitted with
                        correctness held fixed), the same RM trained on length-balanced pairs,
                        generation capped at the longest worked solution, and r - b·(characters
                        past the worked solution), a verifier's penalty on empty verbosity

Eight checks run alone where --parts names them (the default, study, is all of the above), each on
the study's labelled solutions and reward models (the same draws, so the same models):

  hacking               the PRM's P(step right) on the wrong steps of wrong held-out completions
                        (correctness held fixed), before RL, after RL on the PRM and after outcome
                        GRPO on the verifier: does RL on a learned score find a cheap correlate of it,
                        and does held-out pass@1 fall meanwhile (the PRM over-optimised as an ORM is)?
  pairs                 Q-RM trained (the same steps) on the (right, wrong) pairs among the first 3, 6
                        and 12 (--qrm-samples) solutions of each training problem: does it localise
                        the first wrong step from the most pairs and not from the fewest?
  ppo                   the chapter's loop (one optimiser step per batch, as studies/05_critic.py's
                        PPO) with Q-RM's token advantages against GAE on 05's learned critic: does it
                        learn, and no worse than GAE?
  marks                 the PRM's own marks (its more likely class: P(step right) > 1/2) on the steps of the
                        cold start's held-out completions (the hacking check's cold start) against the gold
                        labels: does the step judge the policy is rewarded by err both ways, and does it mark
                        creative correct steps wrong (lines of right completions off the worked solution
                        yet true of the problem)?
  broadcast             GRPO on the learned PRM two ways, the same prompts, seed and updates: its score of the
                        whole solution (PRM-min) as one sequence reward broadcast to every token, and its step
                        scores as step credit (PRM steps): does the broadcast game the PRM more (its score of
                        wrong steps rises more, held-out pass@1 falls further from the picked update)?
  ensemble              GRPO at β = 0 (the over-optimisation arms' settings) on the mean P(right) of
                        --ensemble-size ORMs (the study's, the others trained alike on their own seeds) and on
                        the study's ORM alone: does the reward ensemble's gold fall less?
  betas                 GRPO on the ORM (the over-optimisation arms' settings) at β = 0, --small-beta and
                        --kl-beta, and the cold start's held-out samples: is the small β hacked (the ORM's score
                        rises, the gold falls further than at the larger β), and does β = 0 leave fewer samples
                        well-formed than the cold start wrote (gibberish)?
  gold                  a second PRM trained on this task's exact step labels (prm.gold_step_labels, the nearest
                        stand-in here for Lightman et al.'s careful human labels) reranks the study's held-out
                        samples: does it beat the ORM at best-of-N, at every N?

Every claim is decided on the 95% interval over the seeds (common.seed_verdict: one value per seed,
> 0 in the statement's direction) or is exact (counts). To fit three seeds in 15 minutes the
default run is the chapter's scale, not the full scale of the study's earlier one-seed runs: 8
rollouts per prefix, 200 reward-model steps, 32 held-out samples per problem, RL on 8 x 8
completions for 60 updates (the full scale: --rollouts-per-prefix 16 --label-ns 1,2,4,8,16
--rm-steps 400 --bon-samples 64 --prompts 16 --rl-steps 80 --overopt-steps 120 --length-steps 80).

    python studies/06_overoptimisation.py                # 784 s on 2 CPU cores (3 seeds), beside other jobs
    python studies/06_overoptimisation.py --length-bias --out runs/studies/06_overoptimisation_length
                                           # + 2 preference RMs and 3 RL runs a seed: 1,046 s, beside other jobs
    python studies/06_overoptimisation.py --parts hacking,pairs,ppo --out runs/studies/06_overoptimisation_checks
                                           # three checks alone (3 seeds): 1,024 s, beside other jobs
    python studies/06_overoptimisation.py --parts marks --out runs/studies/06_overoptimisation_marks
                                           # the PRM's marks alone (3 seeds): 434 s, beside other jobs
    python studies/06_overoptimisation.py --parts broadcast,ensemble --out runs/studies/06_overoptimisation_mitigations
                                           # the broadcast and the ensemble (3 seeds): 677 s, beside other jobs
    python studies/06_overoptimisation.py --parts betas --out runs/studies/06_overoptimisation_betas
                                           # the ORM at three β, the cold start's samples: 551 s, beside other jobs
    python studies/06_overoptimisation.py --parts gold --out runs/studies/06_overoptimisation_gold
                                           # best-of-N with a PRM on the exact step labels (3 seeds): 425 s, beside other jobs
    python studies/06_overoptimisation.py --reanalyse runs/studies/06_overoptimisation/results.json
                                           # the claims again from the stored seeds, nothing trained

Read beside: credit-assignment-problem-survey.txt §4.5.2, §4.5.4, §4.6, §9, §10; credit-assignment-over-long-generations.txt
(KL, process rewards, over-optimisation); credit-assignment-is-the-whole-game.txt §2, §6, §7.2, §7.6, §7.7.
Papers: Lightman et al. 2024; Wang et al. 2024 (Math-Shepherd); Chen et al. 2025 (Q-RM); Gao, Schulman &
Hilton 2022. Figures (means over the seeds): label_quality.png, best_of_n.png, rl.png, overoptimisation.png,
and length_bias.png with --length-bias.
"""

import copy
import dataclasses
import functools
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
    verifier_rewards,
    well_formed,
)

prm = importlib.import_module("06_prm_qrm")

RL_METHODS = {**prm.RL_METHODS, "qrm": "Q-RM tokens", "orm": "GRPO on the learned ORM"}
REWARD_MODELS = ("prm", "orm", "qrm")  # made, then trained, in this order from one random stream
PARTS = ("study", "hacking", "pairs", "ppo", "marks", "broadcast", "ensemble", "betas", "gold")  # --parts: the study, then checks
ORM_ARMS = ("kl", "no_kl")  # the over-optimisation runs on the ORM: at --kl-beta, and at β = 0
BROADCAST_ARMS = {"broadcast": "the PRM's score of the solution (PRM-min) broadcast as one sequence reward",
                  "prm": "the PRM as step credit (PRM steps)"}  # the broadcast part's GRPO runs, on one PRM
BETA_ARMS = ("no_kl", "small", "kl")  # the betas part's GRPO runs on the ORM: at β = 0, --small-beta and --kl-beta
ENSEMBLE_ARMS = ("single", "ensemble")  # the ensemble part's GRPO runs at β = 0: the study's ORM, the ORMs' mean
# the ensemble's extra ORMs seed their heads and minibatches from --seed + ENSEMBLE_SEED + k (k = 1, 2, ...), apart
# from every stream the study seeds (--seed + 0 .. 13)
ENSEMBLE_SEED = 100
MARK_COUNTS = ("right_steps", "right_marked_wrong", "wrong_steps", "wrong_marked_right", "left_out",
               "left_out_marked_wrong", "creative", "creative_marked_wrong")  # `step_marks`
LIGHTMAN_N = 1860  # Lightman et al. (2024), best-of-1860 on MATH (their Figure 3)
LIGHTMAN = {"PRM": 0.782, "ORM": 0.724, "majority vote": 0.696}
LENGTH_RUNS = ("length-preferring RM", "same RM, length-normalised", "RM on length-balanced pairs",
               "same RM, generation capped", "same RM, padding penalised")
# the KL arm's β: in a pilot (one seed, 60 updates at 3x the chapter's learning rate) the chapter's β = 0.04 let the
# policy drift 12 nats from the reference (β = 0: 40); 0.3 held it within 3, a KL constraint that constrains
KL_BETA = 0.3
# the betas part's small β: a tenth of KL_BETA, an order of magnitude less pull to the reference but still a
# KL-penalised objective (the chapter's β = 0.04 is of that size)
SMALL_BETA = 0.03
# the ppo part's critic, with studies/05_critic.py's settings (its --gae-lambda, --critic-lr; --critic-warmup below)
GAE_LAMBDA = 0.95  # GAE's λ over tokens (γ = 1)
CRITIC_LR = 1e-3  # the critic's AdamW learning rate


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/06_overoptimisation", "output folder for figures and results.json")
    reanalyse: str = common.reanalyse_arg()
    seeds: int = common.arg(3, "seeds --seed, --seed + 1, ...: each claim decides on its 95% interval over them")
    # the chapter's pipeline, at its own scale
    rollouts_per_prefix: int = common.arg(8, "Math-Shepherd: completions rolled out from each step prefix (largest N)")
    rm_steps: int = common.arg(200, "optimiser steps for each reward model (PRM, ORM, Q-RM, preference RMs)")
    rl_steps: int = common.arg(60, "RL: policy updates of the compared runs (--rl-methods)")
    prompts: int = common.arg(8, "RL: prompts per update")
    rl_methods: str = common.arg("outcome,prm,qrm,orm", "RL: advantages to compare (outcome GRPO, PRM steps, PRM "
                                 "steps with the verifier on the last step, Q-RM tokens, GRPO on the learned ORM)",
                                 tuple(RL_METHODS), item=str)
    # this study's own
    label_ns: str = common.arg("1,2,4,8", "Math-Shepherd: the N at which label quality is measured (at most "
                               "--rollouts-per-prefix)", item=int)
    bon_samples: int = common.arg(32, "best-of-N: samples per held-out problem (the largest N)")
    bon_repeats: int = common.arg(64, "best-of-N: random subsets of size N drawn per problem")
    calibration_solutions: int = common.arg(128, "PRM calibration: held-out samples whose step prefixes are rolled "
                                            "out twice the label's N times")
    overopt_steps: int = common.arg(60, "over-optimisation: updates of GRPO on the learned ORM, at --kl-beta and at β = 0")
    overopt_lr: float = common.arg(3e-4, "over-optimisation: learning rate, 3x the chapter's (the ORM optimised hard)")
    kl_beta: float = common.arg(KL_BETA, "over-optimisation: β of the KL arm's penalty to the reference")
    small_beta: float = common.arg(SMALL_BETA, "betas: the small β of the ORM's third arm (above 0, below --kl-beta)")
    speed_window: int = common.arg(5, "RL: trailing window (updates) of the training batches' numbers (pass rate, "
                                   "KL, ORM score)")
    length_bias: bool = common.arg(False, "also run the length-bias study: RL on a preference RM that prefers length, "
                                   "raw, length-normalised, and retrained on length-balanced pairs")
    length_steps: int = common.arg(60, "length bias: RL updates on each preference RM")
    parts: str = common.arg("study", "what to run, comma-separated: study (all of the above), hacking (the PRM's "
                            "score of the wrong steps written before RL, after RL on it and on the verifier), pairs "
                            "(Q-RM's localisation against its preference pairs), ppo (Q-RM's token credit against "
                            "GAE on a learned critic in the same loop), marks (the PRM's marks on held-out steps "
                            "against the gold labels), broadcast (GRPO on the PRM's score of the solution "
                            "broadcast to every token against the PRM as step credit), ensemble (GRPO at β = 0 on "
                            "the mean of --ensemble-size ORMs against the ORM alone), betas (GRPO on the ORM at β = 0, "
                            "--small-beta and --kl-beta, and the cold start's samples), gold (best-of-N with a PRM on the "
                            "exact step labels against the ORM)", PARTS, item=str)
    qrm_samples: str = common.arg("3,6,12", "pairs: solutions sampled per training problem (the chapter's 256), whose "
                                  "(right, wrong) pairs train a Q-RM each; the chapter's: 6", item=int)
    critic_warmup: int = common.arg(10, "ppo: the critic's value-only updates on the cold start's samples before RL "
                                    "(studies/05_critic.py's)")
    ensemble_size: int = common.arg(3, "ensemble: ORMs whose mean P(right) is the reward (the study's and the rest "
                                    "trained alike, each on its own seed)")

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, seeds=2, rollouts_per_prefix=4, rm_steps=2, rl_steps=2, prompts=2,
                 label_ns="1,4", bon_samples=4, bon_repeats=2, calibration_solutions=4, overopt_steps=2, length_steps=2,
                 qrm_samples="2,4", critic_warmup=1, ensemble_size=2)

    def __post_init__(self):
        super().__post_init__()
        common.require_positive(self, "rollouts_per_prefix", "rm_steps", "rl_steps", "prompts", "bon_samples",
                                "bon_repeats", "calibration_solutions", "overopt_steps", "overopt_lr", "kl_beta",
                                "speed_window", "length_steps")
        common.require(self.critic_warmup >= 0, "--critic-warmup must be non-negative")
        common.require(0 < self.small_beta < self.kl_beta, "--small-beta must be above 0 and below --kl-beta")
        common.require(self.ensemble_size >= 2, "--ensemble-size must be at least 2: one ORM is the single arm")
        common.require(self.seeds >= 2, "--seeds must be at least 2: a verdict needs an interval over seeds")
        common.require(self.seed + self.seeds - 1 <= common.SEED_BOUNDS[1], "--seed + --seeds - 1 must be a valid seed")
        common.require(all(0 < n <= self.rollouts_per_prefix for n in self.label_n_list),
                       "--label-ns must be in 1..--rollouts-per-prefix")
        common.require(self.rl_method_list and set(self.rl_method_list) <= set(RL_METHODS),
                       f"--rl-methods must be among {','.join(RL_METHODS)}")
        common.require(self.part_list and set(self.part_list) <= set(PARTS), f"--parts must be among {','.join(PARTS)}")
        sizes = self.qrm_sample_list
        common.require(len(sizes) >= 2 and sizes[0] >= 2 and sizes == sorted(set(sizes)),
                       "--qrm-samples must be at least two increasing sizes, each at least 2 (a right and a wrong one)")

    @property
    def label_n_list(self) -> list[int]:
        return common.as_list(self.label_ns, int)

    @property
    def rl_method_list(self) -> list[str]:
        return common.as_list(self.rl_methods, str)

    @property
    def part_list(self) -> list[str]:
        return common.as_list(self.parts, str)

    @property
    def qrm_sample_list(self) -> list[int]:
        return common.as_list(self.qrm_samples, int)


def chapter_args(args: Args, seed: int) -> "prm.Args":
    """The chapter's settings (its smoke values under --smoke) at this study's scale, on this run's
    model and task, with `seed`."""
    scale = {"rollouts_per_prefix": args.rollouts_per_prefix, "rm_steps": args.rm_steps, "rl_steps": args.rl_steps,
             "prompts": args.prompts, "credit_samples": args.bon_samples}
    return dataclasses.replace(lm_world.chapter_lm_args(prm.Args, args), seed=seed, **scale)
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
    """The per-token advantages of one --rl-methods name: Q-RM's and the ORM's here, the others the chapter's."""
    if method == "qrm":
        return qrm_advantage_fn(models["qrm"], group_size)
    if method == "orm":  # its scores are logged by the over-optimisation runs, not here
        return proxy_advantage_fn(models["orm"], group_size, [])
    if method == "outcome":
        return prm.outcome_advantage_fn
    return prm.prm_advantage_fn(models["prm"], tokenizer, group_size, with_outcome=method == "prm_outcome")



def proxy_advantage_fn(orm, group_size: int, log: list):
    """GRPO's advantages (05's, z-scored in the group) on the learned ORM's P(right) in place of
    the verifier's verdict; logs each update's mean ORM score (the proxy)."""
    return ensemble_advantage_fn([orm], group_size, log)


def ensemble_advantage_fn(orms: list, group_size: int, log: list):
    """`proxy_advantage_fn` on a reward ensemble: the mean of the ORMs' P(right) at EOS (one ORM: its own)."""
    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        last = last_token_mask(completions.completion_mask)
        # r = (1/k) Σ_j σ(ORM_j(x, y)) at EOS
        proxy = torch.stack([torch.sigmoid(prm.reward_model_logits(orm, completions))[last] for orm in orms]).mean(0)
        log.append({"proxy": float(proxy.mean())})
        return prm.grpo_advantages(proxy.view(-1, group_size)).flatten()[:, None] * completions.completion_mask.float()
    return advantage_fn


def broadcast_advantage_fn(prm_model, tokenizer, group_size: int):
    """The PRM as one sequence reward: its score of the whole solution (PRM-min, the worst step's
    P(right), `prm_min`) z-scored in the group as GRPO's, the one advantage broadcast to every token."""
    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        ends = lm_world.step_end_tokens(tokenizer, completions.completion_ids, completions.completion_mask)
        score = prm_min(torch.sigmoid(prm.reward_model_logits(prm_model, completions)), ends)
        return prm.grpo_advantages(score.view(-1, group_size)).flatten()[:, None] * completions.completion_mask.float()
    return advantage_fn


# ============================================================================================
# Label quality: the hard label against the gold one at each N, and what the PRM learns from it
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
    return {"quality": quality, "quality_inner_steps": {n: label_quality(all_gold[inner], counts[inner], n_max, n)
                                                          for n in ns},
            "soft_auroc": auroc(soft[all_gold], soft[~all_gold]), "soft_mean_on_gold_right": mean_or_nan(soft[all_gold]),
            "soft_mean_on_gold_wrong": mean_or_nan(soft[~all_gold]), "steps_labelled": int(len(all_gold)),
            "prefixes_rolled_out": int(inner.sum()), "solutions": len(data["texts"]),
            "solutions_right": float(data["rewards"].float().mean())}


def squared_distance(scores: np.ndarray, first: np.ndarray, second: np.ndarray) -> float:
    """Mean over items of (s - x̂₁)(s - x̂₂): unbiased for mean (s - x)² when x̂₁ and x̂₂ are
    independent unbiased estimates of x (the square of one estimate would add its variance)."""
    return float(np.mean((scores - first) * (scores - second)))


def calibration(scores: np.ndarray, outcomes: np.ndarray, n: int) -> dict:
    """What the PRM's P(step right) tracks, per step prefix: its 2n rollouts (prefixes, 2n) split in
    two independent halves of n. The value p = P(success | prefix): each half's share right. The
    mean of the hard label it was trained on, q = pass@n = 1 - (1 - p)^n: each half's any-right."""
    first, second = outcomes[:, :n], outcomes[:, n:]
    return {"prefixes": len(scores), "score": mean_or_nan(scores), "value": mean_or_nan(outcomes.mean(1)),
            "label_mean": mean_or_nan(np.concatenate([first.any(1), second.any(1)])),
            "to_value": squared_distance(scores, first.mean(1), second.mean(1)),
            "to_label_mean": squared_distance(scores, first.any(1), second.any(1))}


def calibration_study(policy, tokenizer, h: dict, run: "prm.Args", args: Args, device) -> dict:
    """`calibration` on the inner step prefixes of `calibration_solutions` held-out samples (evenly
    spaced, so spread over the problems), each rolled out 2 x run.label_n times."""
    rows = np.arange(len(h["texts"]))[::max(1, len(h["texts"]) // args.calibration_solutions)][:args.calibration_solutions]
    problems, texts = [h["problems"][i] for i in rows], [h["texts"][i] for i in rows]
    outcomes = prm.rollout_outcomes(policy, tokenizer, problems, texts, 2 * run.label_n, run.max_new_tokens,
                                    torch.Generator(device).manual_seed(run.seed + 9), device)
    scores = [h["prm_probs"][i][h["ends"][i][:len(o)]].numpy() for i, o in zip(rows, outcomes)]
    return calibration(np.concatenate(scores), np.concatenate(outcomes).astype(float), run.label_n)


# ============================================================================================
# Best-of-N: rerank the cold start's samples
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


def orm_scores(orm, r: Completions) -> torch.Tensor:
    """The ORM's P(right) of each completion, read on its last token (on the CPU)."""
    return torch.sigmoid(prm.reward_model_logits(orm, r))[last_token_mask(r.completion_mask)].cpu()


def reranked(rankers: dict, correct: np.ndarray, run: "prm.Args", args: Args) -> tuple[list[int], dict]:
    """Best-of-N accuracy by each ranker's scores (one per held-out sample, `credit_samples` per problem,
    in order) at N = 1, 2, 4 ... `credit_samples`, each on the same draws of N."""
    M = run.credit_samples
    ns = [2 ** i for i in range(int(math.log2(M)) + 1)]
    shape = (len(correct) // M, M)
    return ns, {name: best_of_n(s.numpy().reshape(shape), correct.reshape(shape), ns, args.bon_repeats,
                                np.random.default_rng(run.seed + 5)) for name, s in rankers.items()}


def held_out_study(policy, tokenizer, models: dict, run: "prm.Args", args: Args, device) -> dict:
    """The chapter's held-out samples (`bon_samples` per problem): best-of-N by each reranker, where
    each credit puts the blame in the failed ones, how each score tracks length, how well-formed
    wrong answers score, and the PRM's calibration."""
    h = prm.held_out_samples(policy, tokenizer, models, run, device)
    r, correct, ends, z = h["completions"], h["correct"], h["ends"], h["z"]
    orm_probs = orm_scores(models["orm"], r)
    mask = h["mask"].float()
    rankers = {"PRM-min": prm_min(h["prm_probs"], ends), "PRM-mean": prm_mean(h["prm_probs"], ends),
               "PRM-product": prm_product(h["prm_probs"], ends), "ORM": orm_probs,
               "Q-RM (mean Z)": (z * mask).sum(1) / mask.sum(1)}
    ns, curves = reranked(rankers, correct, run, args)
    M = run.credit_samples
    shape = (len(h["problems"]) // M, M)
    correct_pm = correct.reshape(shape)
    curves["majority vote"] = majority_of_n(answer_codes(h["texts"]).reshape(shape), correct_pm, ns, args.bon_repeats,
                                            np.random.default_rng(run.seed + 5))
    curves["oracle (pass@N)"] = {N: float(np.mean([pass_at_k(M, int(c), N) for c in correct_pm.sum(1)])) for N in ns}
    orm_pm = orm_probs.numpy().reshape(shape)
    proxy_of_pick = best_of_n(orm_pm, orm_pm, ns, args.bon_repeats, np.random.default_rng(run.seed + 5))
    lengths = r.lengths.cpu().numpy()
    length_corr = {name: length_correlations(rankers[name].numpy(), lengths, correct)
                   for name in ("ORM", "PRM-min", "Q-RM (mean Z)")}
    print(f"best-of-{ns[-1]}: " + ", ".join(f"{k} {curves[k][ns[-1]]:.3f}"
                                              for k in ("PRM-min", "ORM", "majority vote", "oracle (pass@N)")))
    credit = prm.credit_study(h)
    return {"ns": ns, "curves": curves, "orm_proxy_of_pick": proxy_of_pick,
            "credit": {"solutions": credit["solutions"], "results": credit["results"]},
            "pass@1": float(correct.mean()), "samples": len(h["texts"]), "length_corr": length_corr,
            "stats": output_stats(h["problems"], h["texts"], correct, lengths),
            "format": format_scores(rankers["PRM-min"].numpy(), h["texts"], correct),
            "calibration": calibration_study(policy, tokenizer, h, run, args, device), "completions": r, "correct": correct}


# ============================================================================================
# Dense RL at full scale, and what each policy writes


# ============================================================================================
# RL: the chapter's advantages and the ORM's, and what each trained policy writes
# ============================================================================================


def worked_form(text: str) -> bool:
    """The shape of a worked solution, right or wrong: "a op b=c" lines, then "#n" (not a bare answer)."""
    return "\n" in text and well_formed(text)


def padding_chars(problem, text: str) -> int:
    """Characters past the problem's worked solution: the padding, growth that carries no information."""
    return max(0, len(text) - len(problem.solution))


def output_stats(problems: list, texts: list[str], correct, lengths) -> dict:
    """What a policy writes: gold pass@1, tokens, padding (lines beyond the worked solution's
    count, characters beyond its length) and form (well-formed, a bare answer too: `well_formed`; worked form;
    worked form with a wrong answer)."""
    extra = np.array([max(0, len(t.split("\n")) - len(p.lines)) for p, t in zip(problems, texts)])
    excess = np.array([padding_chars(p, t) for p, t in zip(problems, texts)])
    form, correct = np.array([worked_form(t) for t in texts], bool), np.asarray(correct, bool)
    return {"pass@1": float(correct.mean()), "length": float(np.mean(lengths)), "extra_lines": float(extra.mean()),
            "padded_share": float((extra > 0).mean()), "excess_chars": float(excess.mean()),
            "well_formed_share": float(np.mean([well_formed(t) for t in texts])),
            "worked_form_share": float(form.mean()), "worked_form_wrong_share": float((form & ~correct).mean())}


def format_scores(scores: np.ndarray, texts: list[str], correct) -> dict:
    """How a learned score rates well-formed wrong answers against wrong answers of any other form:
    for the wrong samples in worked form and those not in it, how many, their mean score and the
    share reaching the median right sample's score (the form's own effect is the difference)."""
    form, correct = np.array([worked_form(t) for t in texts], bool), np.asarray(correct, bool)
    bar = float(np.median(scores[correct])) if correct.any() else math.nan

    def of(wrong: np.ndarray) -> dict:
        return {"count": int(len(wrong)), "mean": mean_or_nan(wrong),
                "share_reaching_median_right": mean_or_nan(wrong >= bar) if len(wrong) and correct.any() else math.nan}

    formed, other = of(scores[form & ~correct]), of(scores[~form & ~correct])
    return {"formed_wrong": formed["count"], "median_right": bar,
            "share_reaching_median_right": formed["share_reaching_median_right"], "formed_wrong_mean": formed["mean"],
            "unformed_wrong": other["count"], "unformed_wrong_mean": other["mean"],
            "unformed_share_reaching_median_right": other["share_reaching_median_right"]}


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


def rl_run(initial, tokenizer, run: "prm.Args", advantage_fn, device, desc: str, judge=None) -> dict:
    """The chapter's loop (`prm.train`) on a copy of the cold start, then what the trained policy
    writes on the held-out problems (`sample_stats`), a few examples and, given `judge(policy) ->
    dict`, its verdict on the trained policy."""
    held_out, start, policy = run.task.held_out(run.eval_problems), time.time(), copy.deepcopy(initial)
    result = prm.train(policy, frozen_copy(initial), tokenizer, run, advantage_fn, held_out, device, desc)
    result.update(wall_clock_s=time.time() - start, examples=what_it_writes(policy, tokenizer, held_out[:2], run, device),
                  final=sample_stats(policy, tokenizer, held_out, run, device))
    if judge:
        result["judged"] = judge(policy)
    print(f"  {desc}: held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> {result['evals'][-1]['pass@1']:.3f} in "
          f"{result['wall_clock_s']:.0f} s")
    return result


def rl_comparison(initial, tokenizer, models: dict, run: "prm.Args", args: Args, device) -> dict:
    """The chapter's RL runs (as `prm.rl_study`, with Q-RM's advantages too), same prompts and seed."""
    return {method: rl_run(initial, tokenizer, run, advantages_of(method, models, tokenizer, run.group_size), device,
                           f"RL {method}") for method in args.rl_method_list}


def orm_arms(initial, tokenizer, models: dict, run: "prm.Args", args: Args, device) -> dict:
    """GRPO on the learned ORM's P(right) (`proxy_advantage_fn`) at --overopt-lr for --overopt-steps,
    at --kl-beta ("kl") and at β = 0 ("no_kl"), the same prompts and seed; the verifier only watches."""
    return {arm: proxy_run(initial, tokenizer, [models["orm"]], run, args, beta, device, f"RL on the ORM, β={beta:g}")
            for arm, beta in zip(ORM_ARMS, (args.kl_beta, 0.0))}


def proxy_run(initial, tokenizer, orms: list, run: "prm.Args", args: Args, beta: float, device, desc: str) -> dict:
    """GRPO on the mean P(right) of `orms` (`ensemble_advantage_fn`) at --overopt-lr for --overopt-steps and
    β = beta, the verifier only watching; with each update's score logged."""
    log = []
    hard = dataclasses.replace(run, beta=beta, lr=args.overopt_lr, rl_steps=args.overopt_steps)
    return {**rl_run(initial, tokenizer, hard, ensemble_advantage_fn(orms, run.group_size, log), device, desc),
            "log": log}


# ============================================================================================
# Over-optimisation: the proxy and the gold against KL, early stopping, Gao et al.'s forms
# ============================================================================================


def arm_points(arm: dict, window: int) -> list[dict]:
    """At each held-out evaluation: the held-out gold, and trailing means over `window` updates (up
    to that one) of the training batches' sequence KL to the reference (the chapter's per-token k3
    times the tokens per completion), their ORM score and their verifier pass rate. The batch of
    update s is sampled by the policy the evaluation at s scores; the last evaluation reads the last
    batches."""
    evals = arm["evals"]
    kl = at_evaluations([h["kl"] * h["length"] for h in arm["history"]], evals, window)
    proxy = at_evaluations([entry["proxy"] for entry in arm["log"]], evals, window)
    train_gold = at_evaluations([h["reward"] for h in arm["history"]], evals, window)
    return [{"step": e["step"], "gold": e["pass@1"], "kl": k, "proxy": p, "train_gold": g}
            for e, k, p, g in zip(evals, kl, proxy, train_gold)]


def at_evaluations(values: list[float], evals: list[dict], window: int) -> list[float]:
    """Trailing means over `window` updates of one number per update, read at each evaluation's update
    (the last evaluation, after the last update, reads the last updates)."""
    curve = moving_average(values, window)
    return [float(curve[min(e["step"], len(curve) - 1)]) for e in evals]


def with_summary(arm: dict, window: int) -> dict:
    """A run on a learned ORM with its evaluations' points (`arm_points`) and their reading (`arm_summary`)."""
    points = arm_points(arm, window)
    return {**arm, "points": points, "summary": arm_summary(points)}


def gold_course(run: dict, window: int) -> dict:
    """A run's held-out gold at the evaluation that its training batches' verifier pass rate picks
    (`arm_summary`'s peak, on problems apart from the held-out ones) and at the end, and the fall between."""
    picks = at_evaluations([h["reward"] for h in run["history"]], run["evals"], window)
    peak, gold = int(np.argmax(picks)), [e["pass@1"] for e in run["evals"]]
    return {"peak_step": run["evals"][peak]["step"], "gold_peak": gold[peak], "gold_end": gold[-1],
            "gold_fall": gold[peak] - gold[-1]}


def ranks(values) -> np.ndarray:
    return np.argsort(np.argsort(values)).astype(float)


def arm_summary(points: list[dict]) -> dict:
    """One run on the ORM, read for the claims. The peak is the evaluation that the verifier's pass
    rate on the training batches picks, an evaluation apart from the held-out problems whose gold is
    reported: the held-out maximum would sit above the end by its noise alone."""
    gold, proxy = np.array([p["gold"] for p in points]), np.array([p["proxy"] for p in points])
    peak = int(np.argmax([p["train_gold"] for p in points]))
    return {"peak_step": points[peak]["step"], "gold_start": gold[0], "gold_peak": gold[peak], "gold_end": gold[-1],
            "gold_rise": gold[peak] - gold[0], "gold_fall": gold[peak] - gold[-1], "proxy_start": proxy[0],
            "proxy_end": proxy[-1], "proxy_rise": proxy[-1] - proxy[0], "kl_end": points[-1]["kl"],
            "proxy_kl_rank_r": pearson(ranks(proxy), ranks([p["kl"] for p in points]))}


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


def overoptimisation_fits(held: dict, points: list[dict]) -> dict:
    """Both of Gao et al.'s forms fitted to the gold gain, for best-of-N and for RL on the ORM (at β = 0)."""
    ns = np.array(held["ns"])
    d_bon = np.sqrt(best_of_n_kl(ns))
    gold_bon = np.array([held["curves"]["ORM"][N] for N in held["ns"]])
    d_rl = np.sqrt([p["kl"] for p in points])
    gold_rl = np.array([p["gold"] for p in points])
    return {"bon": {"d": d_bon.tolist(), "gain": (gold_bon - gold_bon[0]).tolist(),
                    "proxy": [held["orm_proxy_of_pick"][N] for N in held["ns"]],
                    "fit_bon": fit_gao(d_bon, gold_bon - gold_bon[0], "bon"),
                    "fit_rl": fit_gao(d_bon, gold_bon - gold_bon[0], "rl")},
            "rl": {"d": d_rl.tolist(), "gain": (gold_rl - gold_rl[0]).tolist(),
                   "proxy": [p["proxy"] for p in points],
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


def padding_of(tokenizer, group_size: int):
    """Each completion's characters past its problem's worked solution (B,): the empty verbosity a
    verifier can penalise (`problems`: one a group)."""
    def padding(completions: Completions, problems: list) -> torch.Tensor:
        texts = lm_world.completion_texts(tokenizer, completions)
        repeated = [p for p in problems for _ in range(group_size)]
        return torch.tensor([padding_chars(p, t) for p, t in zip(repeated, texts)],
                            dtype=torch.float32, device=completions.sequences.device)
    return padding


def rm_advantage_fn(rm, group_size: int, slope: float, log: list, charged=None):
    """GRPO advantages (z-scored in the group) on a preference RM's score at EOS, length-normalised
    with `slope` (0: the raw score) on the whole length, or on what `charged(completions, problems)`
    counts (`padding_of`: a penalty on empty verbosity). Logs each batch's mean raw score and length."""
    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        score = prm.reward_model_logits(rm, completions)[last_token_mask(completions.completion_mask)]
        lengths = completions.lengths.to(score.dtype)
        log.append({"proxy": float(score.mean()), "length": float(lengths.mean())})
        counted = lengths if charged is None else charged(completions, problems).to(score.dtype)
        reward = length_normalised(score, counted, slope).view(-1, group_size)
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
    on the first (raw, length-normalised, with generation capped at the longest worked solution, and
    with its length pay taken back on the characters past the worked solution: §7.6's mitigations)
    and on the second."""
    r = data["completions"]
    lengths, rewards = r.lengths.cpu().numpy(), data["rewards"].numpy()
    pairs = length_preferring_pairs(data["problems"], rewards, lengths)
    balanced = length_balanced(pairs, lengths, np.random.default_rng(run.seed + 7))
    rng = np.random.default_rng(run.seed + 8)
    (biased_rm, biased_losses), (balanced_rm, balanced_losses) = (
        train_preference_rm(initial, r, chosen, run, rng, desc)
        for chosen, desc in ((pairs, "length-preferring RM"), (balanced, "length-balanced RM")))
    slope = length_slope(prm.reward_model_logits(biased_rm, r)[last_token_mask(r.completion_mask)].cpu().numpy(),
                         lengths, rewards)
    h = held["completions"]
    corr = {name: length_correlations(prm.reward_model_logits(rm, h)[last_token_mask(h.completion_mask)].cpu().numpy(),
                                      h.lengths.cpu().numpy(), held["correct"])
            for name, rm in (("length-preferring RM", biased_rm), ("length-balanced RM", balanced_rm))}
    length_run = dataclasses.replace(run, rl_steps=args.length_steps)
    capped = dataclasses.replace(length_run, max_new_tokens=min(run.max_new_tokens, run.cold_start.task.longest_solution))
    penalty = max(slope, 0.0)  # the RM's pay per character, taken back on padding: a penalty, never a bonus
    arms = {LENGTH_RUNS[0]: (biased_rm, 0.0, None, length_run), LENGTH_RUNS[1]: (biased_rm, slope, None, length_run),
            LENGTH_RUNS[2]: (balanced_rm, 0.0, None, length_run), LENGTH_RUNS[3]: (biased_rm, 0.0, None, capped),
            LENGTH_RUNS[4]: (biased_rm, penalty, padding_of(tokenizer, run.group_size), length_run)}
    runs = {}
    for name, (rm, run_slope, charged, arm_run) in arms.items():
        log = []
        runs[name] = rl_run(initial, tokenizer, arm_run, rm_advantage_fn(rm, run.group_size, run_slope, log, charged),
                            device, f"RL on the {name}")
        runs[name]["log"] = log
    return {"pairs": len(pairs), "balanced_pairs": len(balanced), "slope": slope, "length_corr": corr, "runs": runs,
            "losses": {"length-preferring RM": biased_losses, "length-balanced RM": balanced_losses}}


# ============================================================================================
# The checks of their own (--parts): the PRM's score of wrong steps after RL on it; Q-RM against its
# number of pairs; Q-RM's credit in place of GAE
# ============================================================================================


def wrong_step_scores(probs: torch.Tensor, ends: torch.Tensor, problems: list, texts: list[str], correct) -> dict:
    """The PRM's P(step right) (probs, (B, T), read where each step ends) on the wrong steps of the
    wrong samples (the first line that differs from the worked solution and every line after it;
    a right bare answer differs from it too, but is right), pooled: a score that correctness
    cannot raise. With pass@1, the share of the wrong samples in worked form (the format trick) and
    the PRM's mean P(step right) over every step of every sample (the score RL on it raises)."""
    correct = np.asarray(correct, bool)
    golds = [prm.gold_step_labels(p, t) for p, t in zip(problems, texts)]
    steps = [probs[i][ends[i][:len(gold)]] for i, gold in enumerate(golds)]
    wrong = [s[~torch.tensor(gold)] for s, gold, right in zip(steps, golds, correct) if not right]
    wrong = torch.cat(wrong).numpy() if wrong else np.array([])
    form = np.array([worked_form(t) for t in texts], bool)
    return {"pass@1": float(correct.mean()), "wrong_steps": len(wrong), "wrong_step_score": mean_or_nan(wrong),
            "worked_form_of_wrong": mean_or_nan(form[~correct]), "step_score": mean_or_nan(torch.cat(steps).numpy())}


def step_marks(probs: torch.Tensor, ends: torch.Tensor, problems: list, texts: list[str], correct) -> dict:
    """The PRM's own marks (its more likely class: P(step right) > 1/2, probs read where each step ends)
    against the gold labels, counted: right steps (no line so far differs from the worked solution)
    marked wrong, and wrong steps of the wrong samples marked right. A right sample's lines that
    leave the worked solution are left out of both counts and counted apart with those of them marked
    wrong; among them, the creative correct steps: lines still true of the problem (a line of its
    worked solution in another place, or its answer), counted apart too."""
    correct, found = np.asarray(correct, bool), dict.fromkeys(MARK_COUNTS, 0)
    for i, (problem, text) in enumerate(zip(problems, texts)):
        gold = np.array(prm.gold_step_labels(problem, text), bool)
        right_mark = (probs[i][ends[i][:len(gold)]] > 0.5).numpy()
        found["right_steps"] += int(gold.sum())
        found["right_marked_wrong"] += int((gold & ~right_mark).sum())
        if correct[i]:
            true = np.array([line in problem.lines for line in text.split("\n")], bool)
            found["left_out"] += int((~gold).sum())
            found["left_out_marked_wrong"] += int((~gold & ~right_mark).sum())
            found["creative"] += int((~gold & true).sum())
            found["creative_marked_wrong"] += int((~gold & true & ~right_mark).sum())
        else:
            found["wrong_steps"] += int((~gold).sum())
            found["wrong_marked_right"] += int((~gold & right_mark).sum())
    return found


def prm_judge(prm_model, tokenizer, run: "prm.Args", device):
    """judge(policy) -> `wrong_step_scores` and `step_marks` of its `eval_samples` completions of each
    held-out problem (sampled as `sample_stats` samples them: the same completions its numbers describe)."""
    problems = [p for p in run.task.held_out(run.eval_problems) for _ in range(run.eval_samples)]

    def judge(policy) -> dict:
        r, texts = sample(policy, tokenizer, [p.prompt for p in problems], run.max_new_tokens,
                          torch.Generator(device).manual_seed(run.seed + 6), device)
        probs = torch.sigmoid(prm.reward_model_logits(prm_model, r)).cpu()
        ends = lm_world.step_end_tokens(tokenizer, r.completion_ids, r.completion_mask).cpu()
        correct = verifier_rewards(problems, texts, r.truncated).numpy()
        return {**wrong_step_scores(probs, ends, problems, texts, correct),
                **step_marks(probs, ends, problems, texts, correct)}
    return judge


def hacking_study(initial, tokenizer, models: dict, run: "prm.Args", device) -> dict:
    """RL on the PRM's steps and on the verifier (outcome GRPO), the same prompts and seed; the PRM
    judges the cold start's held-out completions and each trained policy's."""
    judge = prm_judge(models["prm"], tokenizer, run, device)
    runs = {method: rl_run(initial, tokenizer, run, advantages_of(method, models, tokenizer, run.group_size), device,
                           f"RL {method}", judge) for method in ("outcome", "prm")}
    return {"cold_start": judge(initial), "runs": runs}


def broadcast_study(initial, tokenizer, models: dict, run: "prm.Args", args: Args, device) -> dict:
    """GRPO on one learned PRM two ways (`BROADCAST_ARMS`), the same prompts, seed and updates: its score of
    the whole solution as one sequence reward broadcast to every token, and its step scores as step credit
    (the chapter's process advantages). The PRM judges the cold start's held-out completions and each
    trained policy's (`prm_judge`); each run's held-out gold is read at its picked update and at the end."""
    judge = prm_judge(models["prm"], tokenizer, run, device)
    credit = {"broadcast": broadcast_advantage_fn(models["prm"], tokenizer, run.group_size),
              "prm": advantages_of("prm", models, tokenizer, run.group_size)}
    runs = {arm: rl_run(initial, tokenizer, run, credit[arm], device, f"RL {arm}", judge) for arm in BROADCAST_ARMS}
    return {"cold_start": judge(initial),
            "runs": {arm: {**r, "summary": gold_course(r, args.speed_window)} for arm, r in runs.items()}}


def extra_orms(policy, data: dict, run: "prm.Args", count: int) -> tuple[list, list]:
    """`count` more ORMs trained as the study's (`orm_loss`: the same labelled solutions, steps and
    settings), each on its own seed (its head's initialisation and its minibatches: Coste et al.'s
    ensembles differ in seed), with their training losses."""
    loss, items = orm_loss(data)
    orms, losses = [], []
    for k in range(1, count + 1):
        torch.manual_seed(run.seed + ENSEMBLE_SEED + k)
        orms.append(prm.make_scorer(policy))
        losses.append(prm.fit_scorer(orms[-1], loss, items, run, np.random.default_rng(run.seed + ENSEMBLE_SEED + k),
                                     f"ORM {k + 1}"))
    return orms, losses


def ensemble_study(initial, tokenizer, models: dict, data: dict, run: "prm.Args", args: Args, device) -> dict:
    """GRPO at β = 0 (`proxy_run`, the over-optimisation arms' learning rate and updates) on the study's
    ORM alone and on the mean of --ensemble-size ORMs (the study's and `extra_orms`), the same prompts and
    seed; the verifier only watches."""
    extra, losses = extra_orms(initial, data, run, args.ensemble_size - 1)
    members = {"single": [models["orm"]], "ensemble": [models["orm"], *extra]}
    descs = {"single": "RL on the ORM, β=0", "ensemble": f"RL on the mean of {len(members['ensemble'])} ORMs, β=0"}
    arms = {arm: proxy_run(initial, tokenizer, members[arm], run, args, 0.0, device, descs[arm]) for arm in ENSEMBLE_ARMS}
    return {"orms": args.ensemble_size, "losses": losses,
            "arms": {arm: with_summary(r, args.speed_window) for arm, r in arms.items()}}


def betas_study(initial, tokenizer, models: dict, run: "prm.Args", args: Args, device) -> dict:
    """GRPO on the learned ORM (`proxy_run`: the over-optimisation arms' learning rate and updates) at each
    β of `BETA_ARMS`, the same prompts and seed (at β = 0 and --kl-beta the study's `orm_arms` runs), and
    what the cold start writes on the held-out problems (`sample_stats`: the samples each run's final reads)."""
    betas = dict(zip(BETA_ARMS, (0.0, args.small_beta, args.kl_beta)))
    arms = {arm: proxy_run(initial, tokenizer, [models["orm"]], run, args, beta, device, f"RL on the ORM, β={beta:g}")
            for arm, beta in betas.items()}
    return {"betas": betas, "cold_start": sample_stats(initial, tokenizer, run.task.held_out(run.eval_problems), run,
                                                       device),
            "arms": {arm: with_summary(r, args.speed_window) for arm, r in arms.items()}}


def nested_pairs(problems: list, rewards, per_problem: int, first: int) -> list[tuple[int, int]]:
    """The (right, wrong) pairs among the first `first` of each problem's `per_problem` consecutive
    solutions: a smaller set is part of every larger one."""
    return [(win, lose) for win, lose in prm.preference_pairs(problems, rewards)
            if win % per_problem < first and lose % per_problem < first]


def train_qrm(policy, r: Completions, pairs: list[tuple[int, int]], run: "prm.Args"):
    """A Q-RM (the chapter's loss, steps, minibatch size and stream) on `pairs` of rows of r, its
    head initialised alike whatever the pairs: only the data differs between the sweep's Q-RMs."""
    torch.manual_seed(run.seed + 13)
    qrm, pairs = prm.make_scorer(policy), torch.tensor(pairs, dtype=torch.long).view(-1, 2)
    if not len(pairs):  # nothing to learn from: the scorer stays as made
        return qrm.eval()

    def loss(model, rows):
        win, lose = pairs[rows, 0], pairs[rows, 1]
        return prm.qrm_loss(prm.batch_scores(model, r, win), r.completion_mask[win], prm.batch_scores(model, r, lose),
                            r.completion_mask[lose], run.qrm_beta, run.qrm_gamma)

    prm.fit_scorer(qrm, loss, len(pairs), run, np.random.default_rng(run.seed + 3), f"Q-RM, {len(pairs)} pairs")
    return qrm


def pairs_study(policy, tokenizer, models: dict, run: "prm.Args", sizes: list[int], device) -> dict:
    """max(sizes) cold-start solutions of each of `label_prompts` fresh training problems; for each s
    of `sizes`, a Q-RM on the pairs among the first s of each (`nested_pairs`) and its localisation
    of the first wrong step on the held-out failures (the chapter's `credit_study`), beside the
    chapter's own Q-RM's (on the labelled solutions)."""
    rng, n = np.random.default_rng(run.seed + 12), max(sizes)
    exclude = frozenset(p.prompt for p in run.task.held_out())
    problems = [p for p in run.task.sample(run.label_prompts, rng, exclude=exclude) for _ in range(n)]
    r, texts = sample(policy, tokenizer, [p.prompt for p in problems], run.max_new_tokens,
                      torch.Generator(device).manual_seed(run.seed + 12), device, chunk=1024)
    rewards = verifier_rewards(problems, texts, r.truncated)
    held = prm.held_out_samples(policy, tokenizer, models, run, device)
    name = "Q-RM (mean Z of the step)"
    chapter = prm.credit_study(held)
    sweep = []
    for s in sizes:
        pairs = nested_pairs(problems, rewards, n, s)
        held["z"] = prm.reward_model_logits(train_qrm(policy, r, pairs, run), held["completions"]).cpu()
        sweep.append({"samples": s, "pairs": len(pairs), **prm.credit_study(held)["results"][name]})
        print(f"  Q-RM on {len(pairs)} pairs ({s} solutions a problem): AUROC {sweep[-1]['auroc']:.3f}")
    return {"solutions": chapter["solutions"], "chapter": chapter["results"][name], "sweep": sweep}


# PPO's learned token critic and GAE over tokens, taught in studies/05_critic.py: a compact copy of
# what the ppo part needs (its separate critic, γ = 1, one value step a batch), pinned to 05's by the tests
class TokenCritic(torch.nn.Module):
    """V(x, y_<t) of each completion token: a linear head, zero at first, on the last hidden state of
    a copy of the policy's trunk."""

    def __init__(self, policy):
        super().__init__()
        self.trunk = copy.deepcopy(policy.base_model)
        self.head = torch.nn.Linear(lm_world.head_width(policy), 1)  # drawn, then zeroed: 05's random stream
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, completions: Completions) -> torch.Tensor:
        """V(s_t), (B, T): position P-1+t has read x and y_<t."""
        mask = completions.attention_mask
        hidden = self.trunk(input_ids=completions.sequences, attention_mask=mask,
                            position_ids=lm_world.positions_from_mask(mask)).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)[:, completions.prompt_length - 1:-1]


def token_gae(values: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(γ = 1, GAE_LAMBDA) over the tokens of each row, the outcome R (B,) on the last token and
    V = 0 after it. Returns the advantages and the critic's targets A_t + V(s_t), (B, T), 0 on padding."""
    mask = mask.float()
    values = values * mask
    still_going = F.pad(mask[:, 1:], (0, 1))  # a token follows this one
    # δ_t = r_t + V(s_{t+1}) - V(s_t), r_t = R on the last token, 0 before it
    deltas = (mask - still_going) * rewards[:, None] + F.pad(values[:, 1:], (0, 1)) * still_going - values
    advantages, running = torch.zeros_like(deltas), torch.zeros_like(deltas[:, 0])
    for t in reversed(range(deltas.shape[1])):
        # A_t = δ_t + λ A_{t+1}
        running = deltas[:, t] + GAE_LAMBDA * running
        advantages[:, t] = running
    return advantages * mask, (advantages + values) * mask


def whiten(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Advantages to mean 0, std 1 over the batch's completion tokens."""
    real = advantages[mask]
    return torch.where(mask, (advantages - real.mean()) / (real.std() + 1e-8), 0.0) if real.numel() > 1 else advantages


def value_step(critic: TokenCritic, optimizer, completions: Completions, targets: torch.Tensor,
               max_grad_norm: float) -> float:
    """One optimiser step of ½ (V(s_t) - target_t)², the mean over completion tokens; returns the loss."""
    mask = completions.completion_mask
    loss = 0.5 * torch.where(mask, (critic(completions) - targets) ** 2, 0.0).sum() / mask.sum().clamp(min=1)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(critic.parameters(), max_grad_norm)
    optimizer.step()
    return loss.item()


def warm_up_critic(critic: TokenCritic, policy, tokenizer, run: "prm.Args", updates: int, device) -> list[float]:
    """`updates` value steps on fresh groups of the policy's samples, toward the Monte Carlo return R on
    every token (γ = 1), before RL: a critic at V = 0 would make the first updates plain REINFORCE."""
    rng, generator = np.random.default_rng(run.seed + 11), torch.Generator(device).manual_seed(run.seed + 11)
    optimizer = torch.optim.AdamW(critic.parameters(), lr=CRITIC_LR, weight_decay=0.0)
    exclude, losses = frozenset(p.prompt for p in run.task.held_out()), []
    for _ in range(updates):
        problems = [p for p in run.task.sample(run.prompts, rng, exclude=exclude) for _ in range(run.group_size)]
        completions, texts = sample(policy, tokenizer, [p.prompt for p in problems], run.max_new_tokens, generator,
                                    device)
        rewards = verifier_rewards(problems, texts, completions.truncated).to(device)
        targets = rewards[:, None] * completions.completion_mask
        losses.append(value_step(critic, optimizer, completions, targets, run.max_grad_norm))
    return losses


def gae_advantage_fn(critic: TokenCritic, max_grad_norm: float):
    """studies/05_critic.py's PPO advantages: GAE on the critic's V, whitened over the batch's tokens;
    the critic then takes its value step toward A_t + V(s_t) on the same batch (after the advantages
    are read, so the policy's step sees the critic as 05's does)."""
    optimizer = torch.optim.AdamW(critic.parameters(), lr=CRITIC_LR, weight_decay=0.0)

    def advantage_fn(completions: Completions, rewards, problems) -> torch.Tensor:
        mask = completions.completion_mask
        with torch.no_grad():
            values = critic(completions)
        advantages, targets = token_gae(values, rewards.flatten().float(), mask)
        value_step(critic, optimizer, completions, targets, max_grad_norm)
        return whiten(advantages, mask)
    return advantage_fn


def ppo_study(initial, tokenizer, models: dict, run: "prm.Args", args: Args, device) -> dict:
    """The chapter's loop (one optimiser step per batch, as studies/05_critic.py's PPO) from the cold
    start, the same prompts and seed, with each token's advantage from Q-RM's credit
    (`token_advantages`) or from GAE on 05's learned critic (a copy of the policy's trunk, warmed up
    on the cold start's samples with 05's settings)."""
    critic = TokenCritic(initial).to(device)
    warm_up = warm_up_critic(critic, initial, tokenizer, run, args.critic_warmup, device)
    return {"qrm": rl_run(initial, tokenizer, run, qrm_advantage_fn(models["qrm"], run.group_size), device, "RL qrm"),
            "gae": rl_run(initial, tokenizer, run, gae_advantage_fn(critic, run.max_grad_norm), device, "RL GAE"),
            "gae_lambda": GAE_LAMBDA, "critic_warmup_losses": warm_up}


GOLD_PRM = "PRM-min (exact labels)"


def gold_prm_study(policy, tokenizer, models: dict, data: dict, run: "prm.Args", args: Args, device) -> dict:
    """A PRM trained as the study's, on the same solutions, but on this task's exact step labels
    (`prm.gold_step_labels`) instead of Monte Carlo ones; best-of-N on the study's held-out samples by
    its PRM-min, the study's PRM-min and the ORM, on the same draws of N."""
    gold = {**data, "labels": [[float(x) for x in prm.gold_step_labels(problem, text)]
                               for problem, text in zip(data["problems"], data["texts"])]}
    gold_prm = prm.train_reward_models(policy, {"prm": prm.reward_model_losses(tokenizer, gold, run)["prm"]}, run)["prm"]
    h = prm.held_out_samples(policy, tokenizer, models, run, device)
    r = h["completions"]
    rankers = {GOLD_PRM: prm_min(torch.sigmoid(prm.reward_model_logits(gold_prm, r)).cpu(), h["ends"]),
               "PRM-min": prm_min(h["prm_probs"], h["ends"]), "ORM": orm_scores(models["orm"], r)}
    ns, curves = reranked(rankers, h["correct"], run, args)
    return {"ns": ns, "curves": curves}


def run_checks(policy, tokenizer, args: Args, seed: int, device) -> dict:
    """The checks of --parts but the study, with one seed, on the labelled solutions and reward models
    of the study's seed (the same draws, so the same models)."""
    run = chapter_args(args, seed)
    common.seed_everything(seed)
    data = prm.label_study(policy, tokenizer, run, device)
    models = train_reward_models(policy, tokenizer, data, run)
    checks = {"hacking": lambda: hacking_study(policy, tokenizer, models, run, device),
              "pairs": lambda: pairs_study(policy, tokenizer, models, run, args.qrm_sample_list, device),
              "ppo": lambda: ppo_study(policy, tokenizer, models, run, args, device),
              "marks": lambda: prm_judge(models["prm"], tokenizer, run, device)(policy),
              "broadcast": lambda: broadcast_study(policy, tokenizer, models, run, args, device),
              "ensemble": lambda: ensemble_study(policy, tokenizer, models, data, run, args, device),
              "betas": lambda: betas_study(policy, tokenizer, models, run, args, device),
              "gold": lambda: gold_prm_study(policy, tokenizer, models, data, run, args, device)}
    return {"seed": seed, "rl_steps": run.rl_steps, **{part: checks[part]() for part in PARTS[1:] if part in args.part_list}}


# ============================================================================================
# Seeds: one record per seed, and their mean for the tables and figures
# ============================================================================================


def run_seed(policy, tokenizer, args: Args, seed: int, device) -> dict:
    """Everything the study measures with one seed, kept to what the claims, tables and figures read."""
    run = chapter_args(args, seed)
    common.seed_everything(seed)  # the same numbers whether the cold start was trained now or loaded
    data = prm.label_study(policy, tokenizer, run, device)
    data.update(label_quality_study(data, run.rollouts_per_prefix, sorted({*args.label_n_list, run.label_n})))
    models = train_reward_models(policy, tokenizer, data, run)
    held = held_out_study(policy, tokenizer, models, run, args, device)
    runs = rl_comparison(policy, tokenizer, models, run, args, device)
    arms = {k: with_summary(arm, args.speed_window) for k, arm in orm_arms(policy, tokenizer, models, run, args,
                                                                            device).items()}
    length = length_bias_study(policy, tokenizer, data, held, run, args, device) if args.length_bias else None
    labels = {k: v for k, v in data.items() if k not in ("problems", "completions", "texts", "rewards", "outcomes",
                                                          "labels")}
    return {"seed": seed, "label_n": run.label_n, "kl_beta": args.kl_beta, "rl_steps": run.rl_steps, "data": labels,
            "held": {k: v for k, v in held.items() if k not in ("completions", "correct")}, "runs": runs,
            "speed": convergence(runs, args.speed_window) if "outcome" in runs else None, "arms": arms,
            "fits": overoptimisation_fits(held, arms["no_kl"]["points"]), "length": length,
            "losses": models["losses"]}


def is_number(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


def seed_mean(trees: list):
    """The seeds' records averaged leaf by leaf (records of one shape: dicts, lists): a number the
    mean of the seeds' (None, nothing measured, left out); anything else, or a number every seed
    shares (update counts, N), the first seed's."""
    first = trees[0]
    if isinstance(first, dict):
        return {k: seed_mean([t[k] for t in trees]) for k in first}
    if isinstance(first, (list, tuple)) and all(len(t) == len(first) for t in trees):
        return [seed_mean(list(items)) for items in zip(*trees)]
    numbers = [t for t in trees if is_number(t)]
    if numbers and all(is_number(t) or t is None for t in trees) and any(t != first for t in trees):
        return mean_or_nan(numbers)
    return first
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


def plot_rl(runs: dict, arms: dict, names: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    curves = {**{RL_METHODS[m]: (r, "o-") for m, r in runs.items()},
              **{names[arm]: (run, "x:") for arm, run in arms.items()}}
    for name, (run, style) in curves.items():
        ax.plot([e["step"] for e in run["evals"]], [e["pass@1"] for e in run["evals"]], style, label=name)
    ax.set(xlabel="update", ylabel="held-out pass@1 (verifier)", title="Dense credit in RL, same prompts (mean of the seeds)")
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
        title = "best-of-N against the ORM" if kind == "bon" else "GRPO on the ORM (β=0), mean of the seeds"
        ax.set(xlabel="d = sqrt(KL to the reference, nats)", ylabel="gain over the reference", title=title)
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_length_bias(length: dict, orm: dict, path) -> None:
    """Held-out length and pass@1 through RL on each preference RM (and on the ORM, β = 0)."""
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.3))
    runs = {**{f"RL on the {name}": run for name, run in length["runs"].items()}, "RL on the ORM, β=0": orm}
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
# Claims: each decided on its 95% interval over the seeds, or exact
# ============================================================================================


def over_seeds(values) -> tuple[bool | None, str]:
    """common.seed_verdict on one value per seed (> 0: the statement's direction), and its text."""
    return common.seed_verdict(np.asarray(values, float))



def none_shown(verdict: bool | None) -> bool | None:
    """The verdict on "no effect" from the verdict on the effect: an effect shown is a no; one ruled
    out (its interval below 0, or below the size the statement names) is a yes."""
    return None if verdict is None else not verdict


def legend(seeds: list[dict]) -> str:
    return f"mean [95% interval] over {len(seeds)} seeds"


def mean_of(values) -> float:
    return mean_or_nan([math.nan if v is None else v for v in values])


def per_seed(values) -> str:
    return ", ".join(f"{v:.3g}" for v in values)


def label_claims(seeds: list[dict]) -> list[dict]:
    """Exact: the expected false-positive and false-negative rates of the hard label (over subsets of
    each prefix's rollouts) are above 0 exactly when some wrong step's rollouts ever finish, and some
    right step's ever all fail."""
    n = seeds[0]["label_n"]
    fp = [s["data"]["quality"][n]["false_positive_rate"] for s in seeds]
    fn = [s["data"]["quality"][n]["false_negative_rate"] for s in seeds]
    rates = (f"hard labels from N={n} rollouts against the gold ones, exact expectations over subsets of each "
             f"prefix's rollouts, per seed: false positives {per_seed(fp)} of wrong steps, false negatives "
             f"{per_seed(fn)} of right steps")
    return [claim("survey §4.5.2, §10", "automatic (Monte Carlo) step labels are noisy: a step may be labelled "
                  "correct because a lucky rollout reached the right answer", rates, any(f > 0 for f in fp)),
            claim("whole-game §2", "step judges misjudge steps both ways: wrong steps marked correct, and correct "
                  "steps marked wrong (Math-Shepherd's automatic step labels)", rates,
                  any(f > 0 for f in fp) and any(f > 0 for f in fn))]



def best_of_n_gaps(seeds: list[dict], better: str, worse: str, part: str = "held") -> tuple[list, str]:
    """better's best-of-N accuracy minus worse's at each N > 1 (in each seed's `part`), decided over the
    seeds at each N: the verdict at each N (the caller combines them: `every` N or a tendency, `tends`),
    and their text."""
    ns = [n for n in seeds[0][part]["ns"] if n > 1]
    found = {n: over_seeds([s[part]["curves"][better][n] - s[part]["curves"][worse][n] for s in seeds])
             for n in ns}
    return [v for v, _ in found.values()], ", ".join(f"{n}: {text}" for n, (_, text) in found.items())


def rerank_claims(seeds: list[dict]) -> list[dict]:
    curves, N = seed_mean([s["held"]["curves"] for s in seeds]), seeds[0]["held"]["ns"][-1]
    claims = []
    for better, worse in (("PRM-min", "ORM"), ("PRM-min", "majority vote"), ("ORM", "majority vote")):
        a = better.split("-")[0]
        verdicts, text = best_of_n_gaps(seeds, better, worse)
        claims.append(claim("Lightman et al. 2024", f"best-of-N: {a} beats {worse} at the same test-time compute, at "
                            f"every N (best-of-{LIGHTMAN_N} on MATH: {100 * LIGHTMAN[a]:.1f}% vs "
                            f"{100 * LIGHTMAN[worse]:.1f}%)",
                            f"best-of-N accuracy, {better} minus {worse}, at N = {text} ({legend(seeds)}); at N = {N}: "
                            f"{better} {curves[better][N]:.3f}, {worse} {curves[worse][N]:.3f}, oracle "
                            f"{curves['oracle (pass@N)'][N]:.3f}", common.all_parts(*verdicts)))
    verdicts, text = best_of_n_gaps(seeds, "PRM-min", "PRM-mean")
    claims.append(claim("survey §10", "for best-of-N, min aggregation of step scores tends to outperform mean "
                        "aggregation (it catches the first error)", f"best-of-N accuracy, PRM-min minus PRM-mean, at N = "
                        f"{text} ({legend(seeds)}; a tendency: yes if above 0 at some N and below at none); at N = {N}: "
                        f"min {curves['PRM-min'][N]:.3f}, mean {curves['PRM-mean'][N]:.3f}, product "
                        f"{curves['PRM-product'][N]:.3f}", common.tends(*verdicts)))
    return claims + [format_claim(seeds), calibration_claim(seeds), bon_course_claim(seeds)]


def bon_course_claim(seeds: list[dict]) -> dict:
    """Gao et al.'s course under best-of-N on the learned ORM, N the optimisation's strength: per seed, the
    held-out accuracy (gold) at the N where the seeds' mean peaks, minus at N = 1 (the policy itself: the
    rise) and minus at the largest N (the fall); yes where both intervals over seeds lie above 0."""
    ns, curves = seeds[0]["held"]["ns"], [s["held"]["curves"]["ORM"] for s in seeds]
    mean = {N: float(np.mean([c[N] for c in curves])) for N in ns}
    peak = max(ns, key=mean.get)
    rise, rise_text = over_seeds([c[peak] - c[ns[0]] for c in curves])
    fall, fall_text = over_seeds([c[peak] - c[ns[-1]] for c in curves])
    return claim("over-long-generations (Gao et al.)", "optimising a learned proxy: the gold reward peaks and then "
                 "degrades (best-of-N on the learned ORM, N the optimisation's strength)", "held-out accuracy of "
                 "best-of-N on the learned ORM, mean of the seeds, by N: " + ", ".join(f"{N}: {v:.3f}" for N, v in
                                                                                      mean.items())
                 + f"; at N = {peak} (the mean's peak) minus at N = {ns[0]} {rise_text}, minus at N = {ns[-1]} "
                 f"{fall_text} ({legend(seeds)})", common.all_parts(rise, fall))


def format_claim(seeds: list[dict]) -> dict:
    """Does the form earn the score? Wrong answers in worked form against wrong answers not in it:
    comparing only the former with the right ones would pass any score that errs on wrong answers."""
    found = [s["held"]["format"] for s in seeds]
    counts = ", ".join(f"{f['formed_wrong']} and {f['unformed_wrong']}" for f in found)
    holds, text = over_seeds([f["share_reaching_median_right"] - f["unformed_share_reaching_median_right"]
                              for f in found])
    premise = ("" if all(f["formed_wrong"] and f["unformed_wrong"] for f in found) else
               "; premise not met: a seed has no wrong answer in worked form, or none outside it to compare with")
    return claim("over-long-generations (Gao et al.)", "format hacking: well-formed outputs can score well on a learned "
                 "reward model while being wrong (the form, not the answer, earning the score)", "held-out cold-start "
                 f"samples with a wrong answer, in worked form and not in it, per seed: {counts}; the share whose PRM-min "
                 f"score reaches the median right sample's ({mean_of([f['median_right'] for f in found]):.3f}), in "
                 f"worked form minus not in it {text} ({legend(seeds)}; in worked form "
                 f"{mean_of([f['share_reaching_median_right'] for f in found]):.3f}, not in it "
                 f"{mean_of([f['unformed_share_reaching_median_right'] for f in found]):.3f}); mean PRM-min score, in "
                 f"worked form {mean_of([f['formed_wrong_mean'] for f in found]):.3f}, not in it "
                 f"{mean_of([f['unformed_wrong_mean'] for f in found]):.3f}" + premise, holds if not premise else None)


def calibration_claim(seeds: list[dict]) -> dict:
    found, n = seed_mean([s["held"]["calibration"] for s in seeds]), seeds[0]["label_n"]
    holds, text = over_seeds([s["held"]["calibration"]["to_value"] - s["held"]["calibration"]["to_label_mean"]
                              for s in seeds])
    return claim("over-long-generations", "a PRM assigns step scores that reflect the label distribution, not a "
                 "ground-truth value function", f"on {found['prefixes']:.0f} held-out step prefixes a seed, each rolled "
                 f"out 2 x {n} times: the PRM's mean squared distance to the value P(success | prefix) "
                 f"{found['to_value']:.4f}, to the mean of the hard label it learnt (pass@{n}: any of {n} rollouts "
                 f"right) {found['to_label_mean']:.4f}, each net of the rollouts' noise; the first minus the second "
                 f"{text} ({legend(seeds)}); mean PRM score {found['score']:.3f}, value {found['value']:.3f}, label "
                 f"mean {found['label_mean']:.3f}", holds)


def updates_to_reach(curve, target: float) -> int | None:
    """The first update whose (smoothed) value reaches target; None if none does."""
    hits = np.nonzero(np.asarray(curve) >= target)[0]
    return int(hits[0]) if len(hits) else None


def convergence(runs: dict, window: int) -> dict:
    """Updates each run takes to get halfway from the cold start to outcome GRPO's final level,
    read on the training batches' verifier pass rate (fresh samples every update, a trailing
    mean over `window` updates): one-update resolution, unlike the held-out evaluations."""
    curves = {m: moving_average([h["reward"] for h in r["history"]], window) for m, r in runs.items()}
    first = float(np.mean([h["reward"] for h in runs["outcome"]["history"][:window]]))
    target = first + 0.5 * (curves["outcome"][-1] - first)
    return {"target": float(target), "start": first, "updates": {m: updates_to_reach(c, target) for m, c in curves.items()}}


def shared_updates(runs: dict) -> int:
    """The leading updates in which every run's training batches score exactly alike: the runs share
    their prompts and sampling stream, so their batches agree until their policies sample apart."""
    curves = np.array([[h["reward"] for h in r["history"]] for r in runs.values()])
    apart = np.nonzero((curves != curves[0]).any(axis=0))[0]
    return int(apart[0]) if len(apart) else curves.shape[1]


def halfway_at(seed: dict, arm: str) -> int:
    """Updates the arm takes to halfway (`convergence`), a run that never gets there counted at the last update."""
    found = seed["speed"]["updates"][arm]
    return seed["rl_steps"] if found is None else found


def timed_apart(seeds: list[dict]) -> bool:
    """Does any arm (outcome GRPO's included) reach halfway measurably sooner than another, over the
    seeds? Where none does, the timing has not shown that it can tell a faster learner at all."""
    arms = list(seeds[0]["speed"]["updates"])
    return any(over_seeds([halfway_at(s, a) - halfway_at(s, b) for s in seeds])[0] is not None
               for i, a in enumerate(arms) for b in arms[i + 1:])


def speed_claim(seeds: list[dict], slow: str, fast: str, claimed: float, statement: str) -> dict:
    """Chen et al.'s convergence speed: updates to the halfway mark (`convergence`), slow over fast, per
    seed, minus the paper's ratio. A run that never gets there counts as getting there at the last
    update, so the true ratio may lie higher (slow never there) or lower (fast never there): a yes
    stands only if it cannot lie lower, a no only if it cannot lie higher. Where no two arms are timed
    apart (`timed_apart`), the setup shows no room for a speed difference: no verdict."""
    timed = [s for s in seeds if s["speed"]["target"] > s["speed"]["start"]]  # outcome GRPO rose: a halfway mark
    source = "Chen et al. 2025 (Q-RM)"
    if len(timed) < 2:
        return claim(source, statement, "premise not met: outcome GRPO's training pass rate rose in fewer than 2 "
                     "seeds, so there is no halfway mark to time", None)
    ratios = [halfway_at(s, slow) / max(halfway_at(s, fast), 1) for s in timed]
    lower, higher = (any(s["speed"]["updates"][arm] is None for s in timed) for arm in (fast, slow))
    holds, text = over_seeds(np.subtract(ratios, claimed))
    censored = (holds is True and lower) or (holds is False and higher)
    arms = "; ".join(f"{arm} {', '.join(str(s['speed']['updates'][arm]) for s in timed)}"
                     for arm in timed[0]["speed"]["updates"])
    measured = (f"updates to halfway from the cold start's training pass rate to outcome GRPO's final, per seed: "
                f"{arms} (None: never there, counted at the last update); ratio {slow}/{fast} {per_seed(ratios)}; "
                f"minus {claimed} {text} ({legend(timed)})")
    if not timed_apart(timed):
        return claim(source, statement, f"{measured}; no verdict: no arm reaches halfway measurably sooner than "
                     "another (each pair's difference in updates holds 0 over the seeds), and the arms' training pass "
                     f"rates are identical in their first {per_seed([shared_updates(s['runs']) for s in timed])} "
                     "updates (per seed): the setup shows no room for a speed difference", None)
    return claim(source, statement, measured + ("; censored: the ratio may lie on the other side" if censored else ""),
                 None if censored else holds)


def final_pass(run: dict) -> float:
    return run["evals"][-1]["pass@1"]


def gain_claim(seeds: list[dict], statement: str, other: str, read, claimed: float) -> dict:
    """Q-RM's held-out pass@1 at the end minus another run's (read(seed) -> that run); a no must
    also rule out the gain the paper reports (`claimed`)."""
    qrm, others = [final_pass(s["runs"]["qrm"]) for s in seeds], [final_pass(read(s)) for s in seeds]
    holds, text = common.seed_verdict(np.subtract(qrm, others), claimed=claimed)
    return claim("Chen et al. 2025 (Q-RM)", statement, f"held-out pass@1 after {seeds[0]['rl_steps']} updates, Q-RM "
                 f"tokens {mean_of(qrm):.3f} minus {other} {mean_of(others):.3f}: {text} ({legend(seeds)})", holds)


def rl_claims(args: Args, seeds: list[dict]) -> list[dict]:
    methods = set.intersection(*(set(s["runs"]) for s in seeds))
    if "outcome" not in methods:
        return []
    claims = []
    if {"qrm", "orm"} <= methods:
        claims.append(speed_claim(seeds, "orm", "qrm", 12, "RL with Q-RM converges 12x faster than with an ORM "
                                  "(GSM8K; here GRPO on the learned ORM)"))
        claims.append(gain_claim(seeds, "Q-RM raises pass@1 over an ORM baseline (Chen et al.: by about 5 points)",
                                 "GRPO on the learned ORM (the same β, learning rate and updates)",
                                 lambda s: s["runs"]["orm"], claimed=0.05))
    if {"qrm", "prm"} <= methods:
        claims += [speed_claim(seeds, "prm", "qrm", 11, "RL with Q-RM converges 11x faster than with a step-level "
                               "PRM (MATH)"),
                   gain_claim(seeds, "Q-RM raises pass@1 over PRM baselines (Chen et al.: by about 4-5 points over "
                              "token-level PRMs)", "the PRM's step rewards (step-level)", lambda s: s["runs"]["prm"],
                              claimed=0.04)]
    if "prm" in methods:  # the chapter's: a dense reward better than outcome-only? a second proxy?
        claims += prm.rl_claims(chapter_args(args, args.seed), *(s["runs"] for s in seeds))
    return claims


def hacking_claim(seeds: list[dict]) -> dict:
    """Does RL on the PRM teach the policy to write wrong steps the PRM scores higher? The PRM's
    score of wrong steps (`wrong_step_scores`: correctness held fixed) after RL on it, minus before
    RL and minus after RL on the verifier (the same updates, blind to the PRM), per seed."""
    found = [s["hacking"] for s in seeds]
    before, honest, hacked = ([f["cold_start"] for f in found], *([f["runs"][m]["judged"] for f in found]
                                                                  for m in ("outcome", "prm")))
    rose, rose_text = over_seeds([a["wrong_step_score"] - b["wrong_step_score"] for a, b in zip(hacked, before)])
    above, above_text = over_seeds([a["wrong_step_score"] - b["wrong_step_score"] for a, b in zip(hacked, honest)])

    def arm(name: str, judged: list[dict]) -> str:
        return (f"{name} {mean_of([j['wrong_step_score'] for j in judged]):.3f} (pass@1 "
                f"{mean_of([j['pass@1'] for j in judged]):.3f}, wrong ones in worked form "
                f"{mean_of([j['worked_form_of_wrong'] for j in judged]):.3f})")

    return claim("whole-game §2, §7.2", "reward hacking: RL on a learned score finds a cheap correlate of it: the score "
                 "of wrong work rises (e.g. well-formed work with a wrong final answer)", "the PRM's P(step right) on the "
                 "wrong steps of wrong held-out completions (the first line off the worked solution and every line after "
                 f"it; {mean_of([j['wrong_steps'] for j in hacked]):.0f} a seed after RL on the "
                 f"PRM): {arm('after RL on the PRM', hacked)}, {arm('before RL', before)}, "
                 f"{arm('after outcome GRPO on the verifier', honest)}; after RL on the PRM minus before RL "
                 f"{rose_text}, minus after outcome GRPO {above_text} ({legend(seeds)}; {seeds[0]['rl_steps']} updates "
                 "each)", common.all_parts(rose, above))


def prm_proxy_claim(seeds: list[dict], window: int) -> dict:
    """Over-optimisation of the PRM as of an ORM, read as the ORM's is (`gold_course`): under RL on it, per
    seed, the proxy (the PRM's mean score of every step of the policy's held-out samples, against the cold
    start's) rises while the gold (held-out pass@1) falls from the update the training batches' pass rate
    picks (trailing `window` updates) to the end."""
    found = [s["hacking"] for s in seeds]
    before, hacked = [f["cold_start"] for f in found], [f["runs"]["prm"]["judged"] for f in found]
    courses = [gold_course(f["runs"]["prm"], window) for f in found]
    rose, rose_text = over_seeds([a["step_score"] - b["step_score"] for a, b in zip(hacked, before)])
    fell, fell_text = over_seeds([c["gold_fall"] for c in courses])
    return claim("over-long-generations", "a PRM used as a dense RL reward is itself a learned proxy, open to the "
                 "over-optimisation an ORM suffers: under RL on the PRM its score of the policy's work rises while "
                 "held-out pass@1 falls from its peak (the update the training batches pick, as for the ORM)",
                 f"after {seeds[0]['rl_steps']} updates of RL on the PRM against the cold start, the PRM's mean "
                 f"P(step right) over every step of the held-out samples {mean_of([b['step_score'] for b in before]):.3f}"
                 f" -> {mean_of([a['step_score'] for a in hacked]):.3f}, after minus before {rose_text}; held-out "
                 f"pass@1 at the picked update (update {per_seed([c['peak_step'] for c in courses])}) "
                 f"{per_seed([c['gold_peak'] for c in courses])} -> at the end {per_seed([c['gold_end'] for c in courses])}"
                 f", fall {fell_text} ({legend(seeds)}); shown, not decided: the cold start's pass@1 "
                 f"{per_seed([b['pass@1'] for b in before])}", common.all_parts(rose, fell))


def premise_of(shown: bool | None, quantity: str, text: str) -> str:
    """The measured text's note on a premise decided over the seeds: none where it is shown, "premise
    not met" only where it is shown absent (its interval below 0), "not shown" where the interval holds 0."""
    if shown is None:
        return f"; inconclusive: {quantity} {text} is not shown (nor shown absent)"
    return "" if shown else f"; premise not met: {quantity} {text} lies below 0"


def pairs_claim(seeds: list[dict]) -> dict:
    """Does Q-RM, with no strong prior, need much comparative data to localise the first wrong step?
    Its AUROC minus chance (0.5) per seed, trained on the fewest pairs and on the most: yes where the
    most localise (above chance) and the fewest do not (not above it), no where the fewest already
    localise (the need refuted), else none; the most shown below chance: premise not met."""
    sweeps = [s["pairs"]["sweep"] for s in seeds]
    few, few_text = over_seeds([w[0]["auroc"] - 0.5 for w in sweeps])
    localises, localises_text = over_seeds([w[-1]["auroc"] - 0.5 for w in sweeps])
    _, gain_text = over_seeds([w[-1]["auroc"] - w[0]["auroc"] for w in sweeps])
    sizes = ", ".join(f"{row['samples']} ({row['pairs']:.0f} pairs) {row['auroc']:.3f}" for row in seed_mean(sweeps))
    chapter = seed_mean([s["pairs"]["chapter"] for s in seeds])
    holds = False if few else (True if localises else None)
    return claim("survey §4.5.4", "token-level credit needs large amounts of comparative data (the half checked here; "
                 "strong inductive biases are the other): with no strong prior, Q-RM localises the first wrong step "
                 "from many (right, wrong) pairs and not from few", f"AUROC of Q-RM's mean Z of each step for the first "
                 f"wrong step, over {mean_of([s['pairs']['solutions'] for s in seeds]):.0f} failed held-out solutions a "
                 f"seed, Q-RM trained (the same steps) on the pairs among the first s solutions of each of the chapter's "
                 f"training problems, s = {sizes} (means); minus chance (0.5), fewest pairs {few_text}, most "
                 f"{localises_text} ({legend(seeds)}; yes: the most above 0 and the fewest not; no: the fewest above "
                 f"0); most minus fewest {gain_text}; the chapter's Q-RM on the labelled solutions {chapter['auroc']:.3f}"
                 + ("" if few else premise_of(localises, "Q-RM's localisation with the most pairs, AUROC minus 0.5,",
                                              localises_text)), holds)


def ppo_claim(seeds: list[dict]) -> dict:
    """Q-RM's token credit in place of GAE: can it stand in? Per seed, whether PPO on it learns (its
    held-out pass@1 at the end minus the cold start's) and its pass@1 at the end minus GAE's, against
    GAE's own spread over the seeds (its std: a gap within it is level). Yes where it learns and
    Q-RM minus GAE lies above minus that spread (level or better); no where it is shown not to learn
    (below the cold start) or Q-RM minus GAE lies below minus the spread (worse); else none."""
    qrm, gae = ([final_pass(s["ppo"][m]) for s in seeds] for m in ("qrm", "gae"))
    cold = [s["ppo"]["qrm"]["evals"][0]["pass@1"] for s in seeds]  # update 0: the cold start, the same problems
    learns, learns_text = over_seeds(np.subtract(qrm, cold))
    _, gae_learns_text = over_seeds(np.subtract(gae, cold))
    _, text = over_seeds(np.subtract(qrm, gae))
    level = float(np.std(gae, ddof=1)) if len(gae) > 1 else float("nan")
    _, low, high = common.mean_interval(np.subtract(qrm, gae))
    holds = False if learns is False or high < -level else (True if learns and low > -level else None)
    return claim("survey §4.6, §9", "Q-RM's token-level credit can replace GAE inside PPO (or REINFORCE)", "held-out "
                 f"pass@1 after {seeds[0]['rl_steps']} updates of the chapter's loop (one optimiser step per batch, "
                 f"as studies/05_critic.py's PPO), the same prompts: Q-RM's token advantages {mean_of(qrm):.3f} minus "
                 f"GAE(λ = {seeds[0]['ppo']['gae_lambda']:g}) on a learned critic (05's, warmed up on the cold start) "
                 f"{mean_of(gae):.3f}: {text}; learns: Q-RM minus the cold start ({mean_of(cold):.3f}) {learns_text}, "
                 f"GAE minus the cold start {gae_learns_text} ({legend(seeds)}); GAE's spread over the seeds (std) "
                 f"{level:.3f}; yes: Q-RM learns (above 0) and Q-RM minus GAE lies above minus that spread (level "
                 "or better); no: Q-RM minus the cold start below 0, or Q-RM minus GAE below minus the spread",
                 holds)


def irrelevant_marks_claim(seeds: list[dict]) -> dict:
    """Survey §4.5.2: does a PRM, measuring step correctness, score a correct but irrelevant step (the
    creative lines: true of the problem, off the worked solution, so the answer does not rest on them) like a
    correct decisive one? Its premise is a PRM of correctness; ours learns the gold step labels, which mark
    every creative line wrong (`step_marks`' creative are the true lines the labels call wrong): premise not
    met wherever a seed has such a line, the marks shown; not shown where none has."""
    found = [s["marks"] for s in seeds]
    lines = ", ".join(f"{f['creative']}" for f in found)
    premise = ("premise not met: the PRM here learns the gold step labels, which call a line right only on the "
               f"worked solution: they mark every one of the creative lines wrong ({lines} per seed), so it measures "
               "being on the solution path, not correctness" if any(f["creative"] for f in found) else
               "no seed's right completions hold a creative line: nothing to score")
    return claim("survey §4.5.2", "a PRM, measuring step correctness, scores a correct but irrelevant step like a "
                 "correct decisive one (here: the lines of right completions that are true of the problem but off "
                 "the worked solution, against the right steps)", f"{premise}; for the record, the learned PRM's marks "
                 "(P(step right) > 1/2) per seed: creative lines marked wrong "
                 + ", ".join(f"{f['creative_marked_wrong']} of {f['creative']}" for f in found)
                 + "; right steps marked wrong "
                 + ", ".join(f"{f['right_marked_wrong']} of {f['right_steps']}" for f in found), None)


def marked(found: list[dict], errors: str, steps: str) -> tuple[bool | None, str]:
    """One of the PRM's errors, exact, per seed (`step_marks`' counts): yes where every seed's PRM makes
    it, no where none does, else None; premise not met where a seed has none of those steps to mark."""
    counts = ", ".join(f"{f[errors]} of {f[steps]} ({f[errors] / max(f[steps], 1):.3f})" for f in found)
    if not all(f[steps] for f in found):
        return None, f"{counts}; premise not met: a seed has none of these steps to mark"
    made = [f[errors] for f in found]
    return (True if all(made) else False if not any(made) else None), counts


MARKS_HEAD = ("the learned PRM's marks (P(step right) > 1/2) on the steps of the cold start's held-out completions "
              "against the gold labels, per seed: ")


def wrong_marks_claim(seeds: list[dict]) -> dict:
    """Does the step judge the policy is rewarded by, the learned PRM, mark wrong steps right (`marked`)?"""
    holds, counts = marked([s["marks"] for s in seeds], "wrong_marked_right", "wrong_steps")
    return claim("whole-game §2", "step judges mark wrong steps correct: of the wrong steps of wrong held-out "
                 "completions, the learned PRM marks some right", f"{MARKS_HEAD}wrong steps (the first line off the "
                 f"worked solution and every line after it) marked right {counts}", holds)


def right_marks_claim(seeds: list[dict]) -> dict:
    """Does the learned PRM mark right steps wrong (`marked`)?"""
    holds, counts = marked([s["marks"] for s in seeds], "right_marked_wrong", "right_steps")
    return claim("whole-game §2", "step judges mark correct steps wrong: of the right steps (no line so far off the "
                 "worked solution), the learned PRM marks some wrong", f"{MARKS_HEAD}right steps marked wrong {counts}",
                 holds)


def creative_marks_claim(seeds: list[dict]) -> dict:
    """Does the learned PRM mark creative correct steps wrong: the lines of right completions that leave
    the worked solution yet are true of the problem (`step_marks`' creative: a line of its worked solution
    in another place, or its answer)? Exact, per seed (`marked`)."""
    found = [s["marks"] for s in seeds]
    holds, counts = marked(found, "creative_marked_wrong", "creative")
    return claim("whole-game §2", "step judges mark creative correct steps wrong: of the lines of right held-out "
                 "completions that leave the worked solution yet are true of the problem (a line of its worked "
                 "solution in another place, or its answer), the learned PRM marks some wrong",
                 "the learned PRM's marks (P(step right) > 1/2) on the cold start's held-out completions: of the "
                 "lines of right completions off the worked solution ("
                 + ", ".join(str(f["left_out"]) for f in found) + " per seed), those still true of the problem "
                 f"marked wrong, per seed: {counts}", holds)


def broadcast_claim(seeds: list[dict]) -> dict:
    """Does the broadcast of one sequence-level advantage cause the hacking? GRPO on one learned PRM,
    its score of the solution broadcast against its step scores as step credit, per seed: the rise of
    the PRM's score of wrong steps from the cold start (correctness held fixed, `wrong_step_scores`), and
    the fall of held-out pass@1 from the update the training batches pick to the end (`gold_course`),
    each broadcast minus step credit: yes where both are larger under the broadcast."""
    found = [s["broadcast"] for s in seeds]
    before = [f["cold_start"]["wrong_step_score"] for f in found]
    rise = {arm: np.subtract([f["runs"][arm]["judged"]["wrong_step_score"] for f in found], before)
            for arm in BROADCAST_ARMS}
    fall = {arm: [f["runs"][arm]["summary"]["gold_fall"] for f in found] for arm in BROADCAST_ARMS}
    more_rise, more_rise_text = over_seeds(rise["broadcast"] - rise["prm"])
    more_fall, more_fall_text = over_seeds(np.subtract(fall["broadcast"], fall["prm"]))

    def arm(name: str) -> str:
        runs = [f["runs"][name] for f in found]
        return (f"{BROADCAST_ARMS[name]}: the score's rise {over_seeds(rise[name])[1]}, held-out pass@1 "
                f"{per_seed([r['summary']['gold_peak'] for r in runs])} at the picked update (update "
                f"{', '.join(str(r['summary']['peak_step']) for r in runs)}) -> "
                f"{per_seed([r['summary']['gold_end'] for r in runs])} at the end (per seed)")

    return claim("SS-GRPO article, The Problem", "broadcasting one sequence-level advantage to every token causes "
                 "reward hacking: on the same learned PRM, GRPO with its score broadcast as one sequence reward games "
                 "it more than GRPO with the PRM as step credit (its score of wrong steps rises more, and held-out "
                 "pass@1 falls further from its peak)", f"{seeds[0]['rl_steps']} updates of GRPO each, the same "
                 "prompts; the PRM's P(step right) on the wrong steps of wrong held-out completions, cold start "
                 f"{mean_of(before):.3f}; held-out pass@1 at the update the verifier's pass rate on the training "
                 f"batches picks, and at the end. {arm('broadcast')}; {arm('prm')}. Broadcast minus step credit: the "
                 f"score's rise {more_rise_text}, pass@1's fall {more_fall_text} ({legend(seeds)})",
                 common.all_parts(more_rise, more_fall))


def ensemble_claim(seeds: list[dict]) -> dict:
    """A reward ensemble against one ORM, both optimised at β = 0: held-out gold's fall from the
    update the training batches pick to the end (`arm_summary`), single minus ensemble per seed. Its
    premise is the single ORM's own fall (over-optimisation to mitigate), as for the KL mitigation."""
    found = [s["ensemble"] for s in seeds]
    single, ensemble = ([f["arms"][arm]["summary"] for f in found] for arm in ENSEMBLE_ARMS)
    fell, fell_text = over_seeds([a["gold_fall"] for a in single])
    less, less_text = over_seeds([a["gold_fall"] - b["gold_fall"] for a, b in zip(single, ensemble)])
    _, end_text = over_seeds([b["gold_end"] - a["gold_end"] for a, b in zip(single, ensemble)])
    premise = premise_of(fell, "the single ORM's gold fall from the picked update", fell_text)

    def arm(name: str, summaries: list[dict]) -> str:
        m = seed_mean(summaries)
        return (f"{name}: held-out gold {per_seed([a['gold_peak'] for a in summaries])} at the picked update (update "
                f"{', '.join(str(a['peak_step']) for a in summaries)}) -> {per_seed([a['gold_end'] for a in summaries])}"
                f" at the end (per seed), its score {m['proxy_start']:.3f} -> {m['proxy_end']:.3f}, KL at the end "
                f"{m['kl_end']:.1f} nats")

    return claim("whole-game §7.7", f"mitigation of over-optimisation: a reward ensemble (the mean of "
                 f"{found[0]['orms']} ORMs) falls less in gold at β = 0 than a single ORM",
                 f"GRPO at β = 0 on the mean P(right) of {found[0]['orms']} ORMs (the study's and the rest trained "
                 "alike, each on its own seed) and on the study's ORM alone, the same prompts and updates; the picked "
                 "update is the one the verifier's pass rate on the training batches picks. "
                 f"{arm('ORM alone', single)}; {arm('ensemble', ensemble)}. The gold's fall, single minus ensemble "
                 f"{less_text}; the single ORM's fall {fell_text}; gold at the end, ensemble minus single {end_text} "
                 f"({legend(seeds)}){premise}", less if fell else None)


def small_beta_claim(seeds: list[dict]) -> dict:
    """GRPO on the ORM at a small β against the larger one, as `kl_claims` reads β = 0 against it: hacking
    at the small β is both halves, the ORM's score rises there and the gold falls further than at the larger."""
    found, betas = [s["betas"]["arms"] for s in seeds], seeds[0]["betas"]["betas"]
    small, large = ([f[arm]["summary"] for f in found] for arm in ("small", "kl"))
    up, up_text = over_seeds([a["proxy_rise"] for a in small])
    more, more_text = over_seeds([a["gold_fall"] - b["gold_fall"] for a, b in zip(small, large)])

    def arm(name: str) -> str:
        m = seed_mean([f[name]["summary"] for f in found])
        return (f"β = {betas[name]:g}: held-out gold {m['gold_peak']:.3f} at the picked update -> {m['gold_end']:.3f} "
                f"at the end (fall {m['gold_fall']:.3f}), the ORM's score {m['proxy_start']:.3f} -> "
                f"{m['proxy_end']:.3f}, KL at the end {m['kl_end']:.1f} nats")

    return claim("over-long-generations", f"a small β invites reward hacking (here β = {betas['small']:g} against "
                 f"{betas['kl']:g})", f"GRPO on the learned ORM, the same prompts and updates (means): "
                 f"{'; '.join(arm(name) for name in BETA_ARMS)}. The ORM's score at the end minus at the start, at "
                 f"β = {betas['small']:g}, {up_text}; the gold's fall from the picked update at β = {betas['small']:g} "
                 f"minus at β = {betas['kl']:g} {more_text} ({legend(seeds)})", common.all_parts(up, more))


def gibberish_claim(seeds: list[dict]) -> dict:
    """Gibberish read as not well-formed (`well_formed`, a bare answer too: the measure studies/05_failure_modes
    reads for "quality collapses"), and "collapses into" as most samples no longer well-formed: one half minus
    the share of well-formed held-out samples after GRPO on the ORM at β = 0, per seed (above 0: most are not);
    the cold start's share beside it, on the same problems, sample counts and generator seed."""
    found = [s["betas"] for s in seeds]
    cold = [f["cold_start"] for f in found]
    finals = {arm: [f["arms"][arm]["final"] for f in found] for arm in BETA_ARMS}
    collapsed, collapsed_text = over_seeds([0.5 - f["well_formed_share"] for f in finals["no_kl"]])
    _, fewer_text = over_seeds([c["well_formed_share"] - f["well_formed_share"] for c, f in zip(cold, finals["no_kl"])])

    def shares(stats: list[dict]) -> str:
        return (f"well-formed {per_seed([s['well_formed_share'] for s in stats])}, in worked form "
                f"{per_seed([s['worked_form_share'] for s in stats])}, pass@1 {per_seed([s['pass@1'] for s in stats])}")

    betas, free = found[0]["betas"], seed_mean([f["arms"]["no_kl"]["summary"] for f in found])
    after = "; ".join(f"after GRPO on the learned ORM at β = {betas[arm]:g}: {shares(finals[arm])}" for arm in BETA_ARMS)
    return claim("whole-game §6", "without KL to the reference, optimising a learned reward turns a fluent model into "
                 "gibberish: after RL on the learned ORM at β = 0, most samples are no longer well-formed",
                 f"held-out samples (per seed), cold start: {shares(cold)}; {after} (the ORM's score at β = 0 "
                 f"{free['proxy_start']:.3f} -> {free['proxy_end']:.3f}). One half minus the well-formed share at "
                 f"β = 0 {collapsed_text} (> 0: most are not well-formed); shown, not decided: cold start minus β = 0 "
                 f"{fewer_text} ({legend(seeds)})", collapsed)


def rises_at_every_step(seeds: list[dict]) -> tuple[bool | None, str]:
    """Does the ORM's score rise monotonically with KL along the β = 0 run? Each seed's evaluations
    ordered by their KL (not by update: KL can fall between updates), the score's change from each to
    the next in that order: yes where every step's interval over seeds lies above 0, no where one
    lies below 0."""
    by_kl = [sorted(s["arms"]["no_kl"]["points"], key=lambda p: p["kl"]) for s in seeds]
    steps = np.transpose([np.diff([p["proxy"] for p in points]) for points in by_kl])
    verdicts, texts = zip(*(over_seeds(step) for step in steps))
    return common.all_parts(*verdicts), ", ".join(texts)


def overoptimisation_claims(seeds: list[dict]) -> list[dict]:
    free = [s["arms"]["no_kl"]["summary"] for s in seeds]
    rank, rank_text = rises_at_every_step(seeds)
    rise, rise_text = over_seeds([f["gold_rise"] for f in free])
    fall, fall_text = over_seeds([f["gold_fall"] for f in free])
    up, up_text = over_seeds([f["proxy_rise"] for f in free])
    collapse, collapse_text = over_seeds([f["gold_start"] - f["gold_end"] for f in free])
    m = seed_mean(free)
    course = (f"held-out gold {m['gold_start']:.3f} at the start, {m['gold_peak']:.3f} at the update the verifier's "
              f"pass rate on the training batches picks (update {', '.join(str(f['peak_step']) for f in free)}), "
              f"{m['gold_end']:.3f} at the end, KL {m['kl_end']:.1f} nats; the ORM's score {m['proxy_start']:.3f} -> "
              f"{m['proxy_end']:.3f}")
    return [claim("over-long-generations (Gao et al.)", "optimising a learned proxy: the proxy rises monotonically with "
                  "KL", f"GRPO on the learned ORM at β = 0: {course}. The ORM's score from each evaluation to the next "
                  f"in order of KL {rank_text} ({legend(seeds)})", rank),
            claim("over-long-generations (Gao et al.)", "optimising a learned proxy: the gold reward peaks and then "
                  "degrades", f"GRPO on the learned ORM at β = 0: {course}. Gold at the picked update minus at the "
                  f"start {rise_text}, minus at the end {fall_text} ({legend(seeds)})", common.all_parts(rise, fall)),
            claim("whole-game §7.7", "optimising a learned reward model over-optimises it: its score rises while the "
                  "true quality (the verifier's, on held-out problems) falls", f"GRPO on the learned ORM at β = 0: the "
                  f"ORM's score at the end minus at the start {up_text}; held-out gold at the picked update minus at "
                  f"the end {fall_text} ({legend(seeds)}); {course}", common.all_parts(up, fall)),
            claim("whole-game §7.7", "mitigation of over-optimisation: stop early on an evaluation other than the RM "
                  "being optimised (here the verifier's pass rate on the training batches)",
                  "GRPO on the learned ORM at β = 0, stopped at the update that the verifier's pass rate on the "
                  "training batches (problems apart from the held-out ones reported) picks: held-out gold there minus "
                  f"at the end {fall_text} ({legend(seeds)}); {course}", fall),
            *gao_claims(seeds), *kl_claims(seeds, fall),
            claim("whole-game §6", "without KL to the reference, a learned reward drives a fluent policy to outputs it "
                  "scores high while their true quality collapses: after RL on the learned ORM at β = 0, the ORM's score "
                  "has risen and held-out gold has fallen below the cold start's", f"GRPO on the learned ORM at β = 0: "
                  f"the ORM's score at the end minus at the start {up_text}; held-out gold at the start minus at the end "
                  f"{collapse_text} ({legend(seeds)}); {course}", common.all_parts(up, collapse))]


def within_bon(rl: dict, bon: dict) -> dict:
    """Gao et al.'s best-of-N form fitted to the RL run's evaluations inside the KL range that the
    best-of-N sweep spans (its small-to-medium KL), and how many evaluations (d > 0) it had."""
    d, gain = np.asarray(rl["d"]), np.asarray(rl["gain"])
    keep = d <= max(bon["d"])
    return {**fit_gao(d[keep], gain[keep], "bon"), "points": int(np.sum(keep & (d > 0)))}


def gao_claims(seeds: list[dict]) -> list[dict]:
    """gold ≈ d(α − βd), d = sqrt(KL), for small to medium KL: fitted per seed to best-of-N on the ORM
    (the setting of the form), and to RL on the ORM at β = 0 within best-of-N's KL range; α, β > 0
    decided over the seeds' coefficients."""
    fits = [s["fits"] for s in seeds]
    statement = "gold ≈ α·sqrt(KL) − β·KL for small to medium KL (α, β > 0: the gold rises, peaks and falls as KL grows)"
    bon = [f["bon"]["fit_bon"] for f in fits]
    alpha, alpha_text = over_seeds([b["alpha"] for b in bon])
    beta, beta_text = over_seeds([b["beta"] for b in bon])
    kl_bon = max(fits[0]["bon"]["d"]) ** 2
    claims = [claim("over-long-generations (Gao et al.)", f"{statement}: best-of-N", "the held-out gold gain of "
                    f"best-of-N on the learned ORM against d = sqrt(KL), KL = log N − (N−1)/N up to {kl_bon:.2f} nats, "
                    f"fitted per seed: α {alpha_text}, β {beta_text} ({legend(seeds)}), R² "
                    f"{mean_of([b['r2'] for b in bon]):.2f}", common.all_parts(alpha, beta))]
    rl = [within_bon(f["rl"], f["bon"]) for f in fits]
    points = [r["points"] for r in rl]
    whole = (f"the whole run (KL up to {max(max(f['rl']['d']) for f in fits) ** 2:.0f} nats): α "
             f"{mean_of([f['rl']['fit_bon']['alpha'] for f in fits]):.3f}, β "
             f"{mean_of([f['rl']['fit_bon']['beta'] for f in fits]):.3f}, R² "
             f"{mean_of([f['rl']['fit_bon']['r2'] for f in fits]):.2f} (means, not decided: past small-to-medium KL)")
    head = (f"the held-out gold gain of GRPO on the learned ORM at β = 0 against d = sqrt(KL), fitted per seed on its "
            f"evaluations with KL up to best-of-N's {kl_bon:.2f} nats ({per_seed(points)} a seed past the start)")
    if min(points) < 2:
        return claims + [claim("over-long-generations (Gao et al.)", f"{statement}: RL", f"{head}: two coefficients "
                               f"need 2 evaluations; cannot fit without denser early evaluations; {whole}", None)]
    alpha, alpha_text = over_seeds([r["alpha"] for r in rl])
    beta, beta_text = over_seeds([r["beta"] for r in rl])
    return claims + [claim("over-long-generations (Gao et al.)", f"{statement}: RL", f"{head}: α {alpha_text}, β "
                           f"{beta_text} ({legend(seeds)}), R² {mean_of([r['r2'] for r in rl]):.2f}; {whole}",
                           common.all_parts(alpha, beta))]


def kl_claims(seeds: list[dict], fell: bool | None) -> list[dict]:
    """The ORM's two arms, at the chapter's β and at β = 0, against each other (`fell`: did the gold
    fall at β = 0, the premise of a mitigation). Hacking at the small β is both halves: the proxy
    rises there, and the gold falls further than under the larger β."""
    (kl, free), beta = ([s["arms"][arm] for s in seeds] for arm in ORM_ARMS), seeds[0]["kl_beta"]
    kl_m, free_m = seed_mean([a["summary"] for a in kl]), seed_mean([a["summary"] for a in free])
    up, up_text = over_seeds([f["summary"]["proxy_rise"] for f in free])
    more, more_text = over_seeds([f["summary"]["gold_fall"] - k["summary"]["gold_fall"] for k, f in zip(kl, free)])
    saved, saved_text = over_seeds([k["summary"]["gold_end"] - f["summary"]["gold_end"] for k, f in zip(kl, free)])
    arms = (f"GRPO on the learned ORM at β = {beta:g} vs β = 0: held-out gold at the end {kl_m['gold_end']:.3f} vs "
            f"{free_m['gold_end']:.3f}, its fall from the picked update {kl_m['gold_fall']:.3f} vs "
            f"{free_m['gold_fall']:.3f}, KL to the reference at the end {kl_m['kl_end']:.1f} vs {free_m['kl_end']:.1f} nats")
    premise = "" if fell else "; premise not met: the gold's fall at β = 0 is not shown, so there is no hacking to mitigate"
    form = "worked_form_share"
    cold = [s["held"]["stats"][form] for s in seeds]
    lost, lost_text = over_seeds([c - f["final"][form] for c, f in zip(cold, free)])
    kept, kept_text = over_seeds([k["final"][form] - f["final"][form] for k, f in zip(kl, free)])
    return [claim("over-long-generations", f"a small β invites reward hacking (here β = 0 against {beta:g})",
                  f"{arms}; the ORM's score at the end minus at the start, at β = 0, {up_text}; the gold's fall from "
                  f"the picked update at β = 0 minus at β = {beta:g} {more_text} ({legend(seeds)})",
                  common.all_parts(up, more)),
            claim("whole-game §7.2", "against reward hacking keep KL to the reference (the half checked here: no reward "
                  "here has a cheap heuristic bonus to remove)", f"{arms}; gold at the end at β = {beta:g} minus at β = 0 "
                  f"{saved_text} ({legend(seeds)}){premise}", saved if fell else None),
            claim("whole-game §6", "without KL to the reference, optimising a learned reward turns a fluent model into "
                  "high-reward gibberish", f"share of held-out completions in worked form: cold start {mean_of(cold):.3f}"
                  f", after GRPO on the learned ORM at β = 0 {mean_of([f['final'][form] for f in free]):.3f} (ORM score "
                  f"{free_m['proxy_end']:.3f}, pass@1 {mean_of([f['final']['pass@1'] for f in free]):.3f}), at β = "
                  f"{beta:g} {mean_of([k['final'][form] for k in kl]):.3f}; cold start minus β = 0 {lost_text}, β = "
                  f"{beta:g} minus β = 0 {kept_text} ({legend(seeds)})", common.all_parts(lost, kept))]


def padding_growth(stats: dict, cold: dict) -> float:
    """Characters past the worked solution per completion, after RL minus before it."""
    return stats["excess_chars"] - cold["excess_chars"]


def writes(stats: dict) -> str:
    return (f"{stats['length']:.1f} tokens, {stats['excess_chars']:.2f} characters and {stats['extra_lines']:.2f} "
            f"lines past the worked solution, pass@1 {stats['pass@1']:.3f}")


def pads_claim(seeds: list[dict], reward: str, score: str, finals: list[dict]) -> dict:
    """"Rates longer higher" within right and within wrong answers (over all samples the longer are
    more often right, so length would stand for correctness), and the padding RL on the score adds."""
    cold, corr = [s["held"]["stats"] for s in seeds], [s["held"]["length_corr"][score] for s in seeds]
    right, right_text = over_seeds([c["right"] for c in corr])
    wrong, wrong_text = over_seeds([c["wrong"] for c in corr])
    padded, padded_text = over_seeds([padding_growth(f, c) for f, c in zip(finals, cold)])
    return claim("over-long-generations (Gao et al.)", f"reward models rate longer responses higher, so policies learn "
                 f"to pad ({reward})", f"r(score, tokens) on the cold start's held-out samples, within right answers "
                 f"{right_text}, within wrong {wrong_text} (all samples {mean_of([c['all'] for c in corr]):.2f}); "
                 f"characters past the worked solution after RL minus before {padded_text} ({legend(seeds)}); cold "
                 f"start {writes(seed_mean(cold))} -> {writes(seed_mean(finals))}", common.all_parts(right, wrong, padded))


def padding_claim(seeds: list[dict], reward: str, finals: list[dict]) -> dict:
    """The symptom alone: the padding RL on the learned reward adds (`pads_claim`'s last part), per
    seed; whether the RM rates length higher is a cause, not part of the symptom."""
    cold = [s["held"]["stats"] for s in seeds]
    grown = [padding_growth(f, c) for f, c in zip(finals, cold)]
    holds, text = over_seeds(grown)
    return claim("whole-game §7.2", "reward hacking shows as verbose padding: after RL on a learned reward, completions "
                 f"carry more characters past the worked solution than before ({reward})", "characters past the worked "
                 f"solution per held-out completion, after RL minus before, per seed {per_seed(grown)}: {text} "
                 f"({legend(seeds)}); cold start {writes(seed_mean(cold))} -> {writes(seed_mean(finals))}", holds)


def length_claims(seeds: list[dict]) -> list[dict]:
    def r(name: str, part: str = "all") -> list[float]:
        return [s["held"]["length_corr"][name][part] for s in seeds]

    holds, text = over_seeds(r("ORM"))
    claims = [claim("whole-game §7.6", "length bias shows as a reward that correlates with token count",
                    f"r(score, tokens) on {seeds[0]['held']['samples']} held-out cold-start samples a seed: ORM {text} "
                    f"({legend(seeds)}; within right answers {mean_of(r('ORM', 'right')):.2f}, within wrong "
                    f"{mean_of(r('ORM', 'wrong')):.2f}); PRM-min {mean_of(r('PRM-min')):.2f}; Q-RM "
                    f"{mean_of(r('Q-RM (mean Z)')):.2f}", holds)]
    arms = ([("Q-RM's token credit as the reward", "Q-RM (mean Z)", [s["runs"]["qrm"]["final"] for s in seeds])]
            if all("qrm" in s["runs"] for s in seeds) else [])
    arms.append(("the ORM as the reward, β = 0", "ORM", [s["arms"]["no_kl"]["final"] for s in seeds]))
    for reward, score, finals in arms:
        claims += [pads_claim(seeds, reward, score, finals), padding_claim(seeds, reward, finals)]
    return claims + (preference_claims(seeds) if all(isinstance(s["length"], dict) for s in seeds) else [])


def preference_claims(seeds: list[dict]) -> list[dict]:
    """The length study's: the length-preferring RM's symptoms, and each fix against it. Its answers
    "grow" by the padding RL on it adds (characters past the worked solution): the tokens RL adds on
    any reward (the worked form replacing bare answers) grow under the length-neutral RMs as well."""
    cold = [s["held"]["stats"] for s in seeds]
    runs = {name: [s["length"]["runs"][name]["final"] for s in seeds] for name in LENGTH_RUNS}
    raw, balanced = runs[LENGTH_RUNS[0]], runs[LENGTH_RUNS[2]]
    _, grew_text = over_seeds([a["length"] - c["length"] for a, c in zip(raw, cold)])
    _, beyond_text = over_seeds([a["length"] - b["length"] for a, b in zip(raw, balanced)])
    gained, gained_text = over_seeds([a["pass@1"] - c["pass@1"] for a, c in zip(raw, cold)])
    tracks, tracks_text = over_seeds([s["length"]["length_corr"]["length-preferring RM"]["all"] for s in seeds])
    padded, padded_text = over_seeds([padding_growth(a, c) for a, c in zip(raw, cold)])
    labeller = "RM from a labeller who prefers the longer of two equally right (or wrong) answers"
    claims = [claim("whole-game §7.6", "length bias: answers grow without information gain (an RM whose preference "
                    "data favour length)", f"{labeller}; RL on it, padding (characters past the worked solution, "
                    f"growth that carries no information) after minus before {padded_text}, pass@1 after minus before "
                    f"{gained_text} (no gain: not above 0) ({legend(seeds)}); shown, not decided: tokens after minus "
                    f"before {grew_text} (RL's own growth into the worked form is in it), minus after RL on the RM "
                    f"trained on length-balanced pairs {beyond_text}; cold start {writes(seed_mean(cold))} -> "
                    f"{writes(seed_mean(raw))}", common.all_parts(padded, none_shown(gained))),
              claim("whole-game §7.6", "length bias: the reward correlates with token count (an RM whose preference "
                    "data favour length)", f"{labeller}: r(score, tokens) on held-out cold-start samples {tracks_text} "
                    f"({legend(seeds)})", tracks)]
    premise = premise_of(padded, "the unfixed RM's padding gain (characters past the worked solution, after RL "
                         "minus before)", padded_text)
    for name, fix in ((LENGTH_RUNS[1], "length-normalise the reward (the RM's fitted length trend removed)"),
                      (LENGTH_RUNS[2], "train the RM on length-balanced preferences"),
                      (LENGTH_RUNS[3], "cap generation (at the longest worked solution's length)"),
                      (LENGTH_RUNS[4], "penalise empty verbosity in the verifier (the RM's fitted pay per token "
                                       "taken back on the characters past the worked solution)")):
        fixed = runs[name]
        cut, cut_text = over_seeds([a["excess_chars"] - f["excess_chars"] for a, f in zip(raw, fixed)])
        _, cost_text = over_seeds([f["pass@1"] - a["pass@1"] for a, f in zip(raw, fixed)])
        claims.append(claim("whole-game §7.6", f"mitigation of length bias: {fix}", "characters past the worked "
                            f"solution after RL, unfixed minus fixed {cut_text}; pass@1 fixed minus unfixed {cost_text} "
                            f"({legend(seeds)}); {name}: {writes(seed_mean(fixed))}; unfixed: {writes(seed_mean(raw))}"
                            + premise, cut if padded else None))
    return claims


def gold_claim(seeds: list[dict]) -> dict:
    """Over-long-generations: Lightman et al.'s PRM, trained on human step labels, beats an ORM at the
    same test-time compute. Here a PRM on the task's exact step labels against the ORM, at every N > 1
    (`best_of_n_gaps`), with the PRM on Monte Carlo labels beside it."""
    curves, N = seed_mean([s["gold"]["curves"] for s in seeds]), seeds[0]["gold"]["ns"][-1]
    verdicts, text = best_of_n_gaps(seeds, GOLD_PRM, "ORM", part="gold")
    _, mc_text = best_of_n_gaps(seeds, GOLD_PRM, "PRM-min", part="gold")
    return claim("over-long-generations, Process rewards", "best-of-N: a PRM trained on step labels beats an ORM at "
                 "the same test-time compute, at every N tried (here: the task's exact step labels, the nearest "
                 "stand-in for careful human ones)",
                 f"best-of-N accuracy, PRM-min on the exact labels minus the ORM, at N = {text} ({legend(seeds)}); "
                 f"minus PRM-min on Monte Carlo labels (the study's), at N = {mc_text}; at N = {N}: exact-label PRM "
                 f"{curves[GOLD_PRM][N]:.3f}, Monte Carlo PRM {curves['PRM-min'][N]:.3f}, ORM {curves['ORM'][N]:.3f}",
                 common.all_parts(*verdicts))


CHECK_CLAIMS = {"hacking": (hacking_claim,), "pairs": (pairs_claim,), "ppo": (ppo_claim,),
                "marks": (wrong_marks_claim, right_marks_claim, creative_marks_claim, irrelevant_marks_claim),
                "broadcast": (broadcast_claim,),
                "ensemble": (ensemble_claim,), "betas": (small_beta_claim, gibberish_claim), "gold": (gold_claim,)}


def check_claims(args: Args, seeds: list[dict]) -> list[dict]:
    """The claims of the parts the seeds hold (--parts), the study's first."""
    study = (label_claims(seeds) + rerank_claims(seeds) + prm.credit_claims(*(s["held"]["credit"] for s in seeds))
             + rl_claims(args, seeds) + overoptimisation_claims(seeds) + length_claims(seeds)) if "held" in seeds[0] else []
    # and the PRM's over-optimisation, which picks its peak as the ORM's does, over the run's trailing window
    checks = CHECK_CLAIMS | {"hacking": (hacking_claim, functools.partial(prm_proxy_claim, window=args.speed_window))}
    return study + [claim_of(seeds) for part, claims_of in checks.items() if part in seeds[0] for claim_of in claims_of]


def metrics_of(args: Args, m: dict) -> dict:
    """The headline numbers, each the mean over the seeds (`seed_mean`)."""
    data, held = m["data"], m["held"]
    metrics = {"label_solutions": data["solutions"], "label_solutions_right": data["solutions_right"],
               "soft_label_auroc": data["soft_auroc"], **{f"calibration_{k}": v for k, v in held["calibration"].items()},
               **{f"format_{k}": v for k, v in held["format"].items()}}
    for n, q in data["quality"].items():
        metrics.update({f"hard_label_{k}[N={n}]": v for k, v in q.items()})
    for name, curve in held["curves"].items():
        metrics.update({f"best_of_n[{name}][N={N}]": v for N, v in curve.items()})
    for name, loc in held["credit"]["results"].items():
        metrics.update({f"localisation_{k}[{name}]": v for k, v in loc.items()})
    for name, corr in held["length_corr"].items():
        metrics.update({f"length_corr[{name}]_{k}": v for k, v in corr.items()})
    metrics.update({f"cold_start_{k}": v for k, v in held["stats"].items()})
    updates = m["speed"]["updates"] if m["speed"] else {}
    for method, run in m["runs"].items():
        metrics.update({f"rl[{method}]_pass@1_start": run["evals"][0]["pass@1"], f"rl[{method}]_pass@1_final":
                        final_pass(run), f"rl[{method}]_updates_to_halfway": updates.get(method),
                        f"rl[{method}]_wall_clock_s": run["wall_clock_s"]})
        metrics.update({f"rl[{method}]_final_{k}": v for k, v in run["final"].items()})
    for arm, run in m["arms"].items():
        metrics.update({f"orm_rl[{arm}]_{k}": v for k, v in run["summary"].items()})
        metrics.update({f"orm_rl[{arm}]_final_{k}": v for k, v in run["final"].items()})
        metrics[f"orm_rl[{arm}]_wall_clock_s"] = run["wall_clock_s"]
    for kind, part in m["fits"].items():
        for form in ("bon", "rl"):
            metrics.update({f"overopt_{kind}_fit_{form}_{k}": v for k, v in part[f"fit_{form}"].items()})
    return {**metrics, **(length_metrics(args, m["length"]) if m["length"] else {})}


def length_metrics(args: Args, length: dict) -> dict:
    metrics = {"length_bias_pairs": length["pairs"], "length_bias_balanced_pairs": length["balanced_pairs"],
               "length_bias_slope_per_token": length["slope"]}
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
# Tables: what the run prints, and the docs page shows (docs/publish.py); means over the seeds
# ============================================================================================


def table(title: str, header: list[str], rows: list[list]) -> dict:
    return {"title": title, "header": header, "rows": rows}


def label_tables(data: dict, calibration: dict) -> dict:
    quality = table(f"Math-Shepherd hard labels against the gold ones ({data['solutions']} solutions a seed)",
                    ["N rollouts", "accuracy", "false positives (of wrong steps)", "false negatives (of right steps)",
                     "accuracy (steps that needed rollouts)"],
                    [[n, q["accuracy"], q["false_positive_rate"], q["false_negative_rate"],
                      data["quality_inner_steps"][n]["accuracy"]] for n, q in data["quality"].items()])
    counts = table("The labelled solutions, and what the PRM learnt from them", ["", "value"],
                   [["solutions (training problems x samples)", data["solutions"]],
                    ["share right", data["solutions_right"]], ["steps labelled", data["steps_labelled"]],
                    ["step prefixes rolled out (all steps but the answer)", data["prefixes_rolled_out"]],
                    ["soft label (share of rollouts right): AUROC against gold", data["soft_auroc"]],
                    ["held-out step prefixes rolled out for the PRM's calibration", calibration["prefixes"]],
                    ["their mean PRM score", calibration["score"]], ["their value P(success | prefix)", calibration["value"]],
                    ["their hard label's mean (pass@N)", calibration["label_mean"]],
                    ["PRM's squared distance to the value", calibration["to_value"]],
                    ["PRM's squared distance to the label's mean", calibration["to_label_mean"]]])
    return {"labels": counts, "label_quality": quality}


def rerank_table(run: "prm.Args", held: dict) -> dict:
    names = list(held["curves"])
    lightman = [LIGHTMAN.get(k.split("-")[0] if k.startswith("PRM-min") else k, "–") for k in names]
    return table(f"Best-of-N on {run.eval_problems} held-out problems (Lightman et al.'s MATH numbers in the last row)",
                 ["N", *names], [[N, *(held["curves"][k][N] for k in names)] for N in held["ns"]]
                 + [[f"{LIGHTMAN_N} (Lightman et al., MATH)", *lightman]])


def arm_names(m: dict) -> dict:
    return {arm: f"over-optimisation: GRPO on the ORM, β = {beta:g}" for arm, beta in zip(ORM_ARMS, (m["kl_beta"], 0))}


def rl_tables(run: "prm.Args", m: dict) -> dict:
    runs, speed, names = {**m["runs"], **m["arms"]}, m["speed"], {**RL_METHODS, **arm_names(m)}
    steps = [e["step"] for e in next(iter(runs.values()))["evals"]]
    halfway = f" ({speed['start']:.3f} -> {speed['target']:.3f})" if speed else " (no outcome GRPO run)"
    problem = run.task.held_out(1)[0].question.strip()

    def peak(evals: list[dict]) -> str:
        best = max(evals, key=lambda e: e["pass@1"])
        return f"{best['pass@1']:.3f} at {best['step']}"

    def first_completion(r: dict) -> str:  # a code span: the task's "*" is markdown's emphasis
        return "`" + r["examples"][0].split("\n", 1)[-1].replace("\n", "⏎") + "`"

    curves = table(f"Held-out pass@1 through RL, {run.prompts}x{run.group_size} completions per update",
                   ["advantages", *(f"update {s}" for s in steps)],
                   [[names[key], *(e["pass@1"] for e in r["evals"])] for key, r in runs.items()])
    summary = table(f"Updates to halfway on the training pass rate{halfway}, and what each policy writes (the first "
                    "seed's)", ["advantages", "updates to halfway", "held-out pass@1 peak (update)",
                                f"a completion of {problem}"],
                    [[names[key], speed and speed["updates"].get(key), peak(r["evals"]), first_completion(r)]
                     for key, r in runs.items()])
    return {"rl": curves, "rl_summary": summary}


def written_table(run: "prm.Args", m: dict) -> dict:
    written = {f"cold start ({m['held']['samples']} samples)": m["held"]["stats"],
               **{RL_METHODS[method]: r["final"] for method, r in m["runs"].items()},
               **{arm_names(m)[arm]: r["final"] for arm, r in m["arms"].items()}}
    if m["length"]:
        written.update({f"RL on the {name}": r["final"] for name, r in m["length"]["runs"].items()})
    keys = ("pass@1", "length", "extra_lines", "excess_chars", "worked_form_share", "worked_form_wrong_share")
    return table(f"What each policy writes on the held-out problems ({run.eval_samples} samples each after RL)",
                 ["policy", "pass@1", "tokens", "extra lines", "characters past the solution", "worked form",
                  "worked form, wrong answer"], [[name, *(stats[k] for k in keys)] for name, stats in written.items()])


def overoptimisation_tables(m: dict) -> dict:
    bon, (kl, free) = m["fits"]["bon"], (m["arms"][arm]["points"] for arm in ORM_ARMS)
    tables = {"overopt_bon": table("Best-of-N against the ORM: gold gain and the ORM's score of the pick",
                                   ["N", "KL (nats)", "gold gain", "ORM score of the pick"],
                                   [[N, d * d, g, p] for N, d, g, p in zip(m["held"]["ns"], bon["d"], bon["gain"],
                                                                            bon["proxy"])]),
              "overopt_rl": table(f"GRPO on the ORM at β = 0 and β = {m['kl_beta']:g}: gold and proxy against KL (training "
                                  "batches: trailing means)", ["update", "KL, β=0 (nats)", "gold, β=0 (held-out pass@1)",
                                                               "ORM score, β=0", "verifier pass rate, β=0",
                                                               f"KL, β={m['kl_beta']:g}", f"gold, β={m['kl_beta']:g}",
                                                               f"ORM score, β={m['kl_beta']:g}"],
                                  [[p["step"], p["kl"], p["gold"], p["proxy"], p["train_gold"], q["kl"], q["gold"],
                                    q["proxy"]] for p, q in zip(free, kl)])}
    kinds = {"bon": "best-of-N", "rl": "GRPO, β = 0"}
    forms = {"bon": "R_bon(d) = d(α − βd)", "rl": "R_RL(d) = d(α − β log d)"}
    tables["overopt_fits"] = table("Gao et al.'s forms fitted to the gold gain (d = sqrt(KL)), each seed's, their mean",
                                   ["optimisation", "form", "α", "β", "R²"],
                                   [[kinds[kind], forms[form], *(part[f"fit_{form}"][k] for k in ("alpha", "beta", "r2"))]
                                    for kind, part in m["fits"].items() for form in forms])
    return tables


def length_tables(args: Args, m: dict) -> dict:
    held, length = m["held"], m["length"]
    correlations = {**held["length_corr"], **(length["length_corr"] if length else {})}
    tables = {"length_corr": table(f"Each score against token count on {held['samples']} held-out cold-start samples "
                                   "(Pearson r)", ["score", "all", "within right answers", "within wrong answers"],
                                   [[name, *c.values()] for name, c in correlations.items()])}
    if not length:
        return tables
    labels = {LENGTH_RUNS[0]: f"{LENGTH_RUNS[0]} ({length['pairs']:.0f} pairs)",
              LENGTH_RUNS[1]: f"same RM, length-normalised (r − {length['slope']:.3f}·tokens)",
              LENGTH_RUNS[2]: f"{LENGTH_RUNS[2]} ({length['balanced_pairs']:.0f} pairs)",
              LENGTH_RUNS[3]: LENGTH_RUNS[3], LENGTH_RUNS[4]: LENGTH_RUNS[4]}
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


def tables_of(run: "prm.Args", args: Args, m: dict) -> dict:
    credit = m["held"]["credit"]
    localisation = table(f"Credit localisation on {credit['solutions']:.0f} failed held-out solutions a seed",
                         ["credit", "AUROC", "top-1"], [[k, v["auroc"], v["top1"]] for k, v in credit["results"].items()])
    return {**label_tables(m["data"], m["held"]["calibration"]), "best_of_n": rerank_table(run, m["held"]),
            "localisation": localisation, **rl_tables(run, m), "written": written_table(run, m),
            **overoptimisation_tables(m), **length_tables(args, m)}


def hacking_results(args: Args, m: dict, rl_steps: int) -> tuple[dict, dict]:
    """--parts hacking: the metrics (means over the seeds) and the table."""
    judged = {"cold start": m["cold_start"], **{RL_METHODS[k]: r["judged"] for k, r in m["runs"].items()}}
    keys = ("pass@1", "wrong_steps", "wrong_step_score", "worked_form_of_wrong", "step_score")
    return ({f"hacking[{name}]_{k}": j[k] for name, j in judged.items() for k in keys},
            table(f"The PRM's score of the wrong steps each policy writes on the held-out problems ({args.eval_samples} "
                  f"samples each; RL: {rl_steps} updates)", ["policy", "pass@1", "wrong steps",
                                                             "PRM's P(step right) on wrong steps",
                                                             "wrong ones in worked form", "on every step"],
                  [[name, *(j[k] for k in keys)] for name, j in judged.items()]))


def pairs_results(m: dict) -> tuple[dict, dict]:
    """--parts pairs: the metrics (means over the seeds) and the table."""
    metrics = {f"qrm_pairs[s={row['samples']}]_{k}": row[k] for row in m["sweep"] for k in ("pairs", "auroc", "top1")}
    metrics.update(qrm_pairs_failed_solutions=m["solutions"], qrm_chapter_auroc=m["chapter"]["auroc"])
    return metrics, table(f"Q-RM's localisation of the first wrong step on {m['solutions']:.0f} failed held-out solutions, "
                          "against its (right, wrong) pairs", ["solutions per training problem", "pairs", "AUROC", "top-1"],
                          [[row["samples"], row["pairs"], row["auroc"], row["top1"]] for row in m["sweep"]])


def ppo_results(m: dict) -> tuple[dict, dict]:
    """--parts ppo: the metrics (means over the seeds) and the table."""
    names = {"qrm": "Q-RM's token credit", "gae": f"GAE (λ = {m['gae_lambda']:g}) on a learned critic"}
    metrics = {}
    for k in names:
        metrics.update({f"ppo[{k}]_pass@1_start": m[k]["evals"][0]["pass@1"], f"ppo[{k}]_pass@1_final": final_pass(m[k])})
    steps = [e["step"] for e in m["qrm"]["evals"]]
    return metrics, table("Held-out pass@1 through the chapter's loop with each token-level advantage",
                          ["advantages", *(f"update {s}" for s in steps)],
                          [[name, *(e["pass@1"] for e in m[k]["evals"])] for k, name in names.items()])


def marks_results(m: dict) -> tuple[dict, dict]:
    """--parts marks: the metrics (means over the seeds) and the table."""
    rows = [["wrong steps of wrong completions", m["wrong_steps"], m["wrong_marked_right"]],
            ["right steps", m["right_steps"], m["right_marked_wrong"]],
            ["lines of right completions off the worked solution", m["left_out"], m["left_out_marked_wrong"]],
            ["of them, true of the problem (creative)", m["creative"], m["creative_marked_wrong"]]]
    return ({f"marks_{k}": m[k] for k in MARK_COUNTS},
            table("The PRM's marks (P(step right) > 1/2) on the cold start's held-out steps against the gold labels",
                  ["gold label", "steps", "marked the other way"], rows))


def broadcast_results(m: dict) -> tuple[dict, dict]:
    """--parts broadcast: the metrics (means over the seeds) and the table."""
    before = m["cold_start"]["wrong_step_score"]
    rows = [[BROADCAST_ARMS[arm], before, r["judged"]["wrong_step_score"], r["evals"][0]["pass@1"],
             r["summary"]["gold_peak"], r["summary"]["gold_end"], r["summary"]["gold_fall"]]
            for arm, r in m["runs"].items()]
    metrics = {f"broadcast[{arm}]_{k}": r["summary"][k] for arm, r in m["runs"].items() for k in r["summary"]}
    metrics.update({f"broadcast[{arm}]_wrong_step_score": r["judged"]["wrong_step_score"]
                    for arm, r in m["runs"].items()})
    metrics["broadcast_cold_start_wrong_step_score"] = before
    return metrics, table("GRPO on one learned PRM: its score of the solution broadcast to every token, or its steps as "
                          "step credit", ["reward", "PRM's P(step right) on wrong steps, before RL", "after RL",
                                          "held-out pass@1 at the start", "at the picked update", "at the end",
                                          "fall from the picked update"], rows)


def ensemble_results(m: dict) -> tuple[dict, dict]:
    """--parts ensemble: the metrics (means over the seeds) and the table."""
    names = {"single": "the study's ORM", "ensemble": f"the mean of {m['orms']:.0f} ORMs"}
    keys = ("gold_start", "gold_peak", "gold_end", "gold_fall", "proxy_start", "proxy_end", "kl_end")
    metrics = {f"ensemble[{arm}]_{k}": m["arms"][arm]["summary"][k] for arm in ENSEMBLE_ARMS for k in keys}
    return metrics, table("GRPO at β = 0 on one ORM and on a reward ensemble: held-out gold and the optimised score",
                          ["reward", "gold at the start", "at the picked update", "at the end", "fall", "score at the "
                           "start", "at the end", "KL at the end (nats)"],
                          [[names[arm], *(m["arms"][arm]["summary"][k] for k in keys)] for arm in ENSEMBLE_ARMS])


def betas_results(m: dict) -> tuple[dict, dict]:
    """--parts betas: the metrics (means over the seeds) and the table."""
    keys = ("gold_peak", "gold_end", "gold_fall", "proxy_start", "proxy_end", "kl_end")
    metrics = {f"betas[{arm}]_{k}": m["arms"][arm]["summary"][k] for arm in BETA_ARMS for k in keys}
    metrics.update({f"betas[{arm}]_well_formed_share": m["arms"][arm]["final"]["well_formed_share"] for arm in BETA_ARMS})
    metrics["betas_cold_start_well_formed_share"] = m["cold_start"]["well_formed_share"]
    rows = [[f"β = {m['betas'][arm]:g}", *(m["arms"][arm]["summary"][k] for k in keys),
             m["arms"][arm]["final"]["well_formed_share"]] for arm in BETA_ARMS]
    return metrics, table(f"GRPO on the learned ORM at three β (the cold start's samples: "
                          f"{m['cold_start']['well_formed_share']:.3f} well-formed)",
                          ["β", "gold at the picked update", "at the end", "fall", "score at the start", "at the end",
                           "KL at the end (nats)", "well-formed at the end"], rows)


def gold_results(m: dict) -> tuple[dict, dict]:
    """--parts gold: the metrics (means over the seeds) and the table."""
    names = (GOLD_PRM, "PRM-min", "ORM")
    metrics = {f"gold_best_of_n[{name}][N={N}]": m["curves"][name][N] for name in names for N in m["ns"]}
    return metrics, table("Best-of-N accuracy on the held-out samples: a PRM on the exact step labels, the study's PRM "
                          "on Monte Carlo labels and the ORM", ["N", "PRM-min, exact labels", "PRM-min, Monte Carlo "
                                                                "labels", "ORM"],
                          [[N, *(m["curves"][name][N] for name in names)] for N in m["ns"]])


def checks_results(args: Args, seeds: list[dict]) -> dict:
    """The metrics (means over the seeds) and tables of the checks the seeds hold."""
    m, metrics, tables = seed_mean(seeds), {}, {}
    found = {"hacking": lambda: hacking_results(args, m["hacking"], seeds[0]["rl_steps"]),
             "pairs": lambda: pairs_results(m["pairs"]), "ppo": lambda: ppo_results(m["ppo"]),
             "marks": lambda: marks_results(m["marks"]), "broadcast": lambda: broadcast_results(m["broadcast"]),
             "ensemble": lambda: ensemble_results(m["ensemble"]), "betas": lambda: betas_results(m["betas"]),
             "gold": lambda: gold_results(m["gold"])}
    for part in PARTS[1:]:
        if part in m:
            part_metrics, tables[f"{part}_check"] = found[part]()
            metrics.update(part_metrics)
    return {**metrics, "tables": tables}


def study_results(args: Args, seeds: list[dict], out: Path) -> dict:
    """The whole study's figures, metrics (means over the seeds) and tables."""
    m, run = seed_mean(seeds), chapter_args(args, args.seed)
    plot_label_quality(m["data"], out / "label_quality.png")
    plot_best_of_n(m["held"], out / "best_of_n.png")
    plot_rl(m["runs"], m["arms"], arm_names(m), out / "rl.png")
    plot_overoptimisation(m["fits"], out / "overoptimisation.png")
    if m["length"]:
        plot_length_bias(m["length"], m["arms"]["no_kl"], out / "length_bias.png")
    return {**metrics_of(args, m), "tables": tables_of(run, args, m)}


def main(args: Args) -> dict:
    if args.reanalyse:
        return {"claims": common.reanalyse(args, lambda run, stored: check_claims(run, stored["seeds"]))}
    start = time.time()
    args, device, out, policy, tokenizer, info = lm_world.start_lm_run(args)
    print(f"06 study: {args.parts} on {args.seeds} seeds; policy {info['path']}, device {device}")
    study, checks = "study" in args.part_list, set(args.part_list) - {"study"}
    seeds = []
    for seed in range(args.seed, args.seed + args.seeds):
        print(f"seed {seed}")
        seeds.append({**(run_seed(policy, tokenizer, args, seed, device) if study else {}),
                      **(run_checks(policy, tokenizer, args, seed, device) if checks else {})})
    claims = check_claims(args, seeds)
    found = study_results(args, seeds, out) if study else {"tables": {}}
    checked = checks_results(args, seeds)
    metrics = {**found, **checked, "tables": {**found["tables"], **checked["tables"]}}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, chapter_args=dataclasses.asdict(chapter_args(args, args.seed)),
                         seeds=seeds, cold_start_info={k: v for k, v in info.items() if k != "sft_losses"})
    prm.report(metrics["tables"], claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
