"""07 study — four credits side by side (a fifth on request): what w(s) learns, what each credit does to the steps, what it costs, and the article's numbers.

The chapter trains GRPO, SS-GRPO and the gold PRM-GRPO on one seed. This study runs them over three
seeds with SS-GRPO ± (ours: A_i · (1 - w(s)) where A_i < 0, so that in a failed completion the steps
the estimator rates low carry the blame). A fifth method, the step-size control grpo_scaled, is left
out of the default run (three more GRPO-sized runs, about 2 minutes more) and runs with --methods
grpo,ss_grpo,ss_grpo_signed,prm_grpo,grpo_scaled: GRPO with its advantages scaled at each update by
SS-GRPO's push relative to GRPO's (advantage_scale, Σ_i mean_t |A_i w(s)| / Σ_i |A_i|) at the same
update of the same seed, SS-GRPO's step size without its step weights. After training, w(s) is
probed on held-out samples against the gold step labels: does it tell right solutions from failed
ones, right steps from wrong ones, does it drop at the first wrong step, does it follow the
step's length, and does it change when a step's tokens are read twice or three times over? Each
update logs what the credit does: w(s) on right and on failed completions and
its entropy, the blame on the first wrong step of failed completions and on the right steps before
it, the credit on a flawed step of a right completion, whether every token got exactly its A_i, the
share of |advantage| that is negative, the targets of all-equal groups, the article's loss padding (and,
on PRM-GRPO's batches, the same for its gold step rewards credited per step, each step by its own
normalised reward rather than summed to go as PRM-GRPO trains; a reading, nothing trained on it);
and what it costs: evaluator calls, tokens read, FLOPs against GRPO's and against a PRM labelled by
Monte Carlo, seconds; after training, whether the credit moves when the gold step labels change
(does it read a per-step evaluation?). The article's own numbers are checked against each other
(gain share, cost readings, overhead figures, its estimator's parameters and FLOPs next to a 7B
policy, memory, per-step cost), computed, not typed, and its own estimator objective is asked
whether it is contrastive. Claims on the runs decide on their 95% interval over the seeds
(common.seed_verdict: no only where the interval rules out what the statement says), or are exact.
Whether step credit pays more as chains grow is studies/07_lengths.py's question.

    python studies/07_credit.py      # 720 s on 2 CPU cores beside other jobs (3 seeds, 4 methods);
                                     # runs/studies/07_credit/
    python studies/07_credit.py --methods grpo,ss_grpo,ss_grpo_signed,prm_grpo,grpo_scaled   # and the control
    python studies/07_credit.py --reanalyse runs/studies/07_credit/results.json   # claims again, nothing trained

Figures: learning_curves.png (held-out pass@1 per method, mean of the seeds), step_weights.png
(w(s) on right vs failed solutions, the first wrong step's blame, the weights' entropy),
localisation.png (w(s) by position relative to the first wrong step, held-out failed solutions).
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
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402
from common import claim, format_claims, format_table, mean_or_nan, moving_average  # noqa: E402
from lm_world import Completions  # noqa: E402

ssg = importlib.import_module("07_ss_grpo")
lengths_lab = importlib.import_module("studies.07_lengths")  # its per-step credit (arm "own"), re-used as it is

METHODS = ("grpo", "ss_grpo", "ss_grpo_signed", "prm_grpo", "grpo_scaled")
DEFAULT_METHODS = METHODS[:4]  # the step-size control: three more GRPO-sized runs, about 2 minutes more
NAMES = ssg.NAMES | {"ss_grpo_signed": "SS-GRPO ±", "grpo_scaled": "GRPO, SS step size"}
BASE = {"ss_grpo_signed": "ss_grpo", "grpo_scaled": "grpo"}  # the chapter's credit each of this study's methods starts from
CREDIT_KEYS = ("wrong_step_blame", "right_steps_blame", "negative_share", "flawed_right_share", "flawed_step_credit",
               "flawed_right_steps_credit", "advantage_scale")  # credit_stats: what a credit does to the steps
OWN_STEP = "own_step_"  # PRM-GRPO's batches credited per step (own_step_stats): its CREDIT_KEYS' prefix
PROBE_KEYS = ("auroc_outcome", "auroc_step_right_in_failed", "localisation_auroc", "localisation_top1", "chance_top1",
              "failed_solutions", "w_right_solutions", "w_failed_solutions", "w_length_r", "probe_steps", "w_tiled_change")
# The article's table (7B policy, GSM8K, 8×A100): accuracy %, training hours, inference cost per rollout
ARTICLE = {"grpo": (72.3, 24, 1.0), "prm_grpo": (78.1, 120, 1000.0), "ss_grpo": (77.5, 28, 1.05)}
ARTICLE_SHARE, ARTICLE_COST = ssg.ARTICLE_SHARE, 0.04  # "97% of the accuracy gain of a full PRM at 4% of the training cost"
# The estimator's overhead as the article's text states it, twice (its table gives a third figure)
ARTICLE_INFERENCE_OVERHEAD, ARTICLE_ROLLOUT_OVERHEAD = 0.01, 0.05  # "<1% of LLM inference", "5% ... rollout generation"
ARTICLE_ESTIMATOR = {"vocab": 32000, "hidden": 128, "layers": 2, "ffn": 2048}  # its code; PyTorch's default ffn
ARTICLE_ESTIMATOR_PARAMS = 1e6  # "the estimator adds ~1M parameters"
ARTICLE_POLICY_PARAMS = 7e9
ARTICLE_POLICY_SHAPE = {"layers": 32, "hidden": 4096}  # a 7B policy's attention: Llama-2-7B's layers and width
ARTICLE_LONG_ROLLOUT = 5000  # "for very long rollouts (>5000 tokens), the estimator's cost becomes non-negligible"
PROSE_STEPS = (10, 100, 1000)  # step lengths (tokens) at which the prose reading's prompt threshold is shown: none given
ARTICLE_ROLLOUT_TOKENS, ARTICLE_PER_STEP_COST = 1000, 1000.0  # "a 1000-token rollout ... multiplies inference by 1000x"
ARTICLE_WEIGHT_MEMORY = 0.10  # "storing step-level weights for all rollouts increases memory by ~10%"
# A rollout buffer's bytes per token, smallest and largest plausible (an int32 id alone; an int64 id and float32
# log-probs of policy, sampler and reference, and the advantage), and per stored step weight (float32)
BUFFER_BYTES_PER_TOKEN, WEIGHT_BYTES = (4, 8 + 4 * 4), 4


@dataclass
class Args(common.RunArgs):
    out: str = common.arg("runs/studies/07_credit", "output folder for figures and results.json")
    cache: str = common.arg("runs/cold_start", "folder of cached cold-start models, one per config")
    methods: str = common.arg(",".join(DEFAULT_METHODS), "methods to compare, comma-separated", METHODS, item=str)
    repeats: int = common.arg(3, "seeds per method: --seed, --seed + 1, ... (the claims' interval is over them)")
    probe_samples: int = common.arg(4, "samples per held-out problem for the probe of w(s) after training")
    mc_rollouts: int = common.arg(8, "cost comparison: rollouts per step prefix of Monte-Carlo step labels (06's N = 8)")
    min_steps: int = common.arg(1, "task: fewest operations in a problem")
    max_steps: int = common.arg(4, "task: most operations in a problem (the cold start learns 1..max)")
    sft_steps: int = common.arg(1000, "cold start: SFT steps on demonstrations")
    reanalyse: str = common.reanalyse_arg()

    SMOKE = dict(repeats=1, probe_samples=2, methods=",".join(METHODS))  # every method's code path

    def __post_init__(self):
        common.require_positive(self, "repeats", "probe_samples", "mc_rollouts", "min_steps", "max_steps", "sft_steps")
        common.require(self.method_list and all(m in METHODS for m in self.method_list),
                       f"--methods must be among {','.join(METHODS)}")
        if "grpo_scaled" in self.method_list:  # the control takes its step sizes from SS-GRPO's run of its seed
            common.require("ss_grpo" in self.method_list[:self.method_list.index("grpo_scaled")],
                           "--methods: grpo_scaled needs ss_grpo before it (it uses SS-GRPO's step sizes)")

    @property
    def method_list(self) -> list[str]:
        return common.as_list(self.methods, str)

    @property
    def seeds(self) -> list[int]:
        return [self.seed + i for i in range(self.repeats)]

    def chapter_args(self) -> ssg.Args:
        """The chapter's hyperparameters, with this study's first seed, task lengths and cold start."""
        return ssg.Args(seed=self.seed, device=self.device, out=self.out, smoke=self.smoke, cache=self.cache,
                        min_steps=self.min_steps, max_steps=self.max_steps, sft_steps=self.sft_steps)


# ============================================================================================
# The credit, logged: this study's two methods, what each credit costs and does to each step
# ============================================================================================


@dataclass
class Rollouts:
    """One update as the diagnostics read it: the steps, the gold labels, GRPO's A_i, and for
    SS-GRPO the estimator's rows, their targets r̂ and the weights w(s) the credit used."""

    completions: Completions
    rewards: torch.Tensor  # (N, G)
    step_ids: torch.Tensor  # (B, T): each token's line, -1 off the completion
    end_tokens: torch.Tensor  # (B, max steps): the token each line ends in
    wrong: list[int | None]  # each completion's first wrong line by the gold labels (None: none)
    A: torch.Tensor  # (B,) GRPO's group advantage
    batch: ssg.StepBatch | None = None
    targets: torch.Tensor | None = None
    w: torch.Tensor | None = None

    @property
    def steps(self) -> torch.Tensor:
        return self.step_ids.max(1).values + 1


class Diagnosed(ssg.Credit):
    """The chapter's credit, with this study's two methods and a log per update: evaluator calls and
    tokens (and those Monte-Carlo step labels would read); w(s) on right / failed completions and its
    entropy; the blame on the first wrong step of failed completions and on the right steps before it,
    the credit on a flawed step of a right completion (each as a share of GRPO's |A_i|), whether every
    token got exactly its A_i, the share of |advantage| that is negative, the article's padding, and the
    size of the push relative to GRPO's (advantage_scale).

    SS-GRPO ± (ours): A_i · (1 - w(s)) where A_i < 0. The step-size control (grpo_scaled): GRPO's
    advantages times `scales` at each update, SS-GRPO's advantage_scale at that update: GRPO with
    SS-GRPO's step size but no step weights."""

    def __init__(self, method: str, tokenizer, args: ssg.Args, estimator: ssg.StepValueEstimator | None, seed: int,
                 scales: list[float] | None = None, mc_rollouts: int = 8):
        if (method == "grpo_scaled") != (scales is not None):
            raise ValueError("the step-size control, and only it, takes SS-GRPO's advantage scales")
        super().__init__(BASE.get(method, method), tokenizer, args, estimator, seed)
        self.name, self.scales, self.mc_rollouts, self.last, self.windows = method, scales, mc_rollouts, None, None
        if estimator is not None:
            estimator.register_forward_hook(self.record)

    def record(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        """Keep the estimator's last output: after the credit's call, its weights of this update's windows."""
        self.windows = output.detach()

    def __call__(self, completions: Completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        advantages = super().__call__(completions, rewards, problems)
        start = time.time()  # from here on, this study's bookkeeping: its cost is not the method's
        self.last = (completions, rewards, problems)  # the batch `step_label_effect` reads again
        r = self.rollouts(completions, rewards, problems)
        if self.name == "ss_grpo_signed":
            advantages = ssg.broadcast_to_tokens(signed_advantages(r.A, r.w), r.step_ids)
        elif self.name == "grpo_scaled":
            advantages = advantages * self.step_scale()
        self.log[-1].update(self.diagnose(r, advantages), diagnostics_s=time.time() - start)
        return advantages

    def rollouts(self, completions: Completions, rewards: torch.Tensor, problems: list) -> Rollouts:
        """The update read again with the chapter's functions; w(s) is the credit's own: the last pass of
        its estimator weighed this update's windows (reading them again would cost a second pass)."""
        repeated = [p for p in problems for _ in range(self.args.group_size)]
        r = Rollouts(completions, rewards, *ssg.read_steps(self.tokenizer, completions, repeated),
                     ssg.grpo_advantages(rewards).flatten())
        if self.estimator is not None:
            r.batch = ssg.step_batch(completions, r.step_ids, r.end_tokens, ssg.CHUNK, self.tokenizer.pad_token_id)
            r.targets = ssg.minmax_targets(rewards)
            steps = ssg.segment_mean(self.windows, r.batch.window_step, len(r.batch.step_completion))
            r.w = ssg.step_grid(steps, r.batch)
        return r

    def step_scale(self) -> float:
        """The control's multiplier at this update: SS-GRPO's advantage scale at the same update of
        the same seed; 1 where that update had no advantage (its A is 0 here too)."""
        scale = self.scales[len(self.log) - 1]
        return scale if math.isfinite(scale) else 1.0

    def diagnose(self, r: Rollouts, advantages: torch.Tensor) -> dict:
        completions, steps, B = r.completions, r.steps, len(r.wrong)
        entry = {"evaluator_calls": 1.0,  # the outcome verifier, once per completion
                 "policy_tokens": float(completions.attention_mask.sum()) / B, "steps": float(steps.float().mean()),
                 "mc_label_tokens": mc_label_tokens(completions, steps, self.mc_rollouts)}
        if self.name == "prm_grpo":
            entry["evaluator_calls"] = float(steps.float().mean())  # one verification per step
            entry["prm_tokens"] = prefix_tokens(completions, r.end_tokens)
            entry.update(own_step_stats(r, self.args.group_size))
        if r.w is not None:
            entry.update(estimator_tokens=float(r.batch.attention.sum()) / B,
                         **weight_stats(r.w, steps, r.rewards, r.targets))
        tokens = r.step_ids >= 0  # does every token of every completion get exactly its A_i?
        entry["flat_credit"] = float(torch.equal(torch.where(tokens, advantages, 0.0), torch.where(tokens, r.A[:, None], 0.0)))
        entry.update(credit_stats(advantages, r), **article_padding(r.step_ids))
        return entry


def credit_stats(advantages: torch.Tensor, r: Rollouts) -> dict:
    """What a credit does to the steps of an update: the blame around the first wrong step, the credit on a
    flawed step of a right completion, the push relative to GRPO's (CREDIT_KEYS)."""
    return (blame_stats(advantages, r.A, r.step_ids, r.wrong, r.rewards)
            | flawed_step_stats(advantages, r.A, r.step_ids, r.wrong, r.rewards)
            | {"advantage_scale": advantage_scale(advantages, r.A, r.step_ids)})


def own_step_stats(r: Rollouts, group_size: int) -> dict:
    """PRM-GRPO's update credited per step instead (A_t = r̃ of t's step, from the same gold step rewards): what
    that credit would do to the same completions, under OWN_STEP keys. It trains nothing: PRM-GRPO trains on the
    reward-to-go form, so these completions are those of the reward-to-go policy."""
    grid = lengths_lab.own_step_advantages(*ssg.gold_step_rewards(r.wrong, r.steps), group_size)
    stats = credit_stats(ssg.broadcast_to_tokens(grid, r.step_ids), r)
    return {OWN_STEP + k: v for k, v in stats.items()}


def signed_advantages(A: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """SS-GRPO ± (ours), (B, S): A_i · w(s) where A_i ≥ 0, A_i · (1 - w(s)) where A_i < 0, so in a
    failed completion the steps the estimator rates low carry the blame."""
    return A[:, None] * torch.where(A[:, None] < 0, 1 - w, w)


def zero_spread(rewards: torch.Tensor) -> torch.Tensor:
    """05's (N,) mask of the groups whose G rewards are all equal (no group advantage)."""
    return rewards.max(1).values == rewards.min(1).values


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
# The runs: each method over seeds, their costs and diagnostics
# ============================================================================================


def make_estimator(tokenizer, args: ssg.Args, device) -> ssg.StepValueEstimator:
    return ssg.StepValueEstimator(len(tokenizer), args.est_hidden, args.est_layers, args.est_heads,
                                  args.est_ffn).to(device)


def run_method(initial, tokenizer, args: ssg.Args, method: str, held_out: list, device, study: Args,
               scales: list[float] | None = None) -> dict:
    """The chapter's run of one method (a copy of the cold start, the cold start as the KL reference,
    an estimator seeded by the run's seed), with its credit logged (and the control's step sizes);
    then held-out pass@1 and, for SS-GRPO, the probe of w(s)."""
    torch.manual_seed(args.seed)
    estimator = make_estimator(tokenizer, args, device) if method.startswith("ss_") else None
    credit = Diagnosed(method, tokenizer, args, estimator, args.seed, scales, study.mc_rollouts)
    policy, start = copy.deepcopy(initial), time.time()
    result = ssg.train(policy, lm_world.frozen_copy(initial), tokenizer, args, credit, held_out, device, NAMES[method])
    result |= {"wall_clock_s": time.time() - start, "final": ssg.held_out_pass(policy, tokenizer, held_out, args, device),
               "credit": credit.log, "seed": args.seed}
    result["step_label_effect"] = step_label_effect(credit)
    if estimator is not None:
        result["probe"] = probe_weights(policy, estimator, tokenizer, held_out, args, study.probe_samples, device)
    print(f"  {NAMES[method]:18s} seed {args.seed}: held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> "
          f"{result['final']['pass@1']:.3f}, {result['wall_clock_s']:.0f} s")
    return result


def step_label_effect(credit: Diagnosed) -> float:
    """Does the method's credit read a per-step evaluation? Its advantages on its last update's batch, once
    with each group's own problem and once with the next group's (other worked solutions, so other gold
    step labels; the same rewards): the largest change of a token's advantage, 0 where the credit reads
    only the rewards and the text. The chapter's credit of the method, two copies as trained, so that
    both fit alike and the run's own log stays as it was."""
    completions, rewards, problems = credit.last
    own, moved = (ssg.Credit.__call__(copy.deepcopy(credit), completions, rewards, p)
                  for p in (problems, problems[1:] + problems[:1]))
    return float((own - moved).abs().max())


def compare_methods(initial, tokenizer, args: ssg.Args, study: Args, held_out: list, device) -> dict:
    """Every method of --methods from the cold start, for each seed: {method: [runs]}. The step-size
    control gets the advantage scale of each update of SS-GRPO's run of its seed."""
    runs = {m: [] for m in study.method_list}
    for seed in study.seeds:
        at = dataclasses.replace(args, seed=seed)
        for m in study.method_list:
            scales = [e["advantage_scale"] for e in runs["ss_grpo"][-1]["credit"]] if m == "grpo_scaled" else None
            runs[m].append(run_method(initial, tokenizer, at, m, held_out, device, study, scales))
    return runs


def probe_weights(policy, estimator: ssg.StepValueEstimator, tokenizer, held_out: list, args: ssg.Args, samples: int,
                  device) -> dict:
    """Sample held-out solutions (`samples` per problem), score every step with w(s), compare with
    the gold labels: AUROC of w for "the solution is right" (what the target teaches), AUROC of w
    for "this step is right" within failed solutions, and 06's localisation (AUROC and top-1 of -w
    for "this is the first wrong step", failed solutions with ≥ 2 steps); w by offset to that step; and
    Pearson's r of w with the number of tokens it pools over, every step of every sample; and the largest change
    of w when each step's tokens are read TILES times over (tiled_change)."""
    problems = [p for p in held_out for _ in range(samples)]
    completions, texts = lm_world.sample(policy, tokenizer, [p.prompt for p in problems], args.max_new_tokens,
                                       torch.Generator(device).manual_seed(args.seed + 3), device)
    right = lm_world.verifier_rewards(problems, texts, completions.truncated).bool().tolist()
    step_ids, end_tokens, first_wrong = ssg.read_steps(tokenizer, completions, problems)
    batch = ssg.step_batch(completions, step_ids, end_tokens, ssg.CHUNK, tokenizer.pad_token_id)
    with torch.no_grad():
        w = ssg.step_grid(estimator.step_weights(batch), batch).cpu().numpy()
    pooled = torch.zeros(len(batch.step_index), device=device).index_add(0, batch.window_step, batch.pool.sum(1).float())
    lengths = ssg.step_grid(pooled, batch).cpu().numpy()  # the tokens w(s) pools over, per step
    steps = (step_ids.max(1).values + 1).tolist()
    by_outcome, weighed = {True: [], False: []}, ([], [])
    good, bad, credits, wrongs, offsets = [], [], [], [], {}
    for b, wrong in enumerate(first_wrong):
        weights = w[b, :steps[b]]
        by_outcome[right[b]].extend(weights)
        weighed[0].extend(weights)
        weighed[1].extend(lengths[b, :steps[b]])
        if right[b] or wrong is None or wrong >= steps[b]:
            continue
        good.extend(weights[:wrong])
        bad.extend(weights[wrong:])
        for k, value in enumerate(weights):
            offsets.setdefault(k - wrong, []).append(value)
        if steps[b] >= 2:
            credits.append(weights)
            wrongs.append(wrong)
    located = lm_world.localisation(credits, wrongs)
    return {"auroc_outcome": lm_world.auroc(np.array(by_outcome[True]), np.array(by_outcome[False])),
            "auroc_step_right_in_failed": lm_world.auroc(np.array(good), np.array(bad)),
            "localisation_auroc": located["auroc"],
            "localisation_top1": located["top1"], "chance_top1": mean_or_nan([1 / n for n in steps if n >= 2]),
            "failed_solutions": len(credits), "w_right_solutions": mean_or_nan(by_outcome[True]),
            "w_failed_solutions": mean_or_nan(by_outcome[False]), "w_length_r": common.pearson(*weighed),
            "probe_steps": len(weighed[0]), "w_tiled_change": tiled_change(estimator, batch),
            "w_by_offset": {k: float(np.mean(v)) for k, v in sorted(offsets.items()) if len(v) >= 5}}


def tiled(ids: torch.Tensor, attention: torch.Tensor, pool: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    """Estimator rows (ids, attention, pool) with each row's pooled tokens read k times in a row, after the
    same prompt: the same content, k times as long; padding (id 0) masked out."""
    rows, pools = [], []
    for row, seen, pooled in zip(ids.tolist(), attention.tolist(), pool.tolist()):
        prompt = [t for t, a, p in zip(row, seen, pooled) if a and not p]
        window = [t for t, p in zip(row, pooled) if p]
        rows.append(prompt + window * k)
        pools.append([False] * len(prompt) + [True] * len(window) * k)
    width = max(len(r) for r in rows)
    padded = [(r + [0] * (width - len(r)), [True] * len(r) + [False] * (width - len(r)), p + [False] * (width - len(p)))
              for r, p in zip(rows, pools)]
    return tuple(torch.tensor(column, device=ids.device) for column in zip(*padded))


TILES = (2, 3)  # each step's tokens read twice and three times over (within the estimator's positions)


def tiled_change(estimator: nn.Module, batch: ssg.StepBatch) -> float:
    """The largest |w(row with its step's tokens tiled k times) - w(row)| over the rows of `batch` and k in TILES,
    computed in float64 (so that float rounding stays far below float32's): 0 up to rounding where mean-pooling
    makes w independent of the step's length; a row too long for the estimator's positions is left out."""
    model = copy.deepcopy(estimator).double()
    fits = [k for k in TILES if int(batch.attention.sum(1).max()) * k <= ssg.MAX_POSITIONS]
    with torch.no_grad():
        w = model(batch.ids, batch.attention, batch.pool)
        return max((float((model(*tiled(batch.ids, batch.attention, batch.pool, k)) - w).abs().max()) for k in fits),
                   default=math.nan)


def parameters(model: nn.Module, skip: tuple[str, ...] = ("embed", "position", "embed_tokens")) -> int:
    """Parameters that cost FLOPs per token (embeddings are look-ups)."""
    return sum(p.numel() for n, p in model.named_parameters() if not any(s in n for s in skip))


def train_seconds(run: dict) -> float:
    """A run's training seconds without this study's own bookkeeping (reading each update again)."""
    return run["wall_clock_s"] - sum(e.get("diagnostics_s", 0.0) for e in run["credit"])


def cost_row(run: dict, grpo: dict, policy_params: int, est_params: int) -> dict:
    """Training seconds (and relative to GRPO); inference FLOPs per completion relative to
    GRPO's (2·params per token: the policy on prompt + completion, plus the estimator on its
    rows, plus, for PRM-GRPO, a policy-sized PRM run on every step prefix as the article prices
    per-step evaluation); training FLOPs per completion relative to GRPO's on the same rollouts
    (the policy generates, the reference scores and the policy trains: 2 + 2 + 6 = 10·params per
    token; the estimator adds 2· per token it scores and 6· per token it trains on), and the same
    for a PRM labelled by Monte Carlo (the labels' rollouts only: its own training is left out);
    evaluator calls per completion; the credit's share of an update. Seconds leave out the study's
    bookkeeping."""
    log = run["credit"]

    def mean(key: str) -> float:
        return float(np.mean([e.get(key, 0.0) for e in log]))

    generation = policy_params * mean("policy_tokens")  # FLOPs / 2
    extra = est_params * mean("estimator_tokens") + policy_params * mean("prm_tokens")
    update = 5 * generation  # 10·params per token
    estimator_training = 3 * est_params * mean("estimator_train_tokens")  # 6·params per token
    step_s = np.mean([h["generate_s"] + h["update_s"] for h in run["history"]]) - mean("diagnostics_s")
    return {"train_wall_clock_s": train_seconds(run), "train_wall_clock_vs_grpo": train_seconds(run) / train_seconds(grpo),
            "inference_flops_vs_grpo": (generation + extra) / generation,
            "train_flops_vs_grpo": (update + extra + estimator_training) / update,
            "mc_prm_train_flops_vs_grpo": (update + policy_params * mean("mc_label_tokens")) / update,
            "estimator_tokens_per_policy_token": mean("estimator_tokens") / mean("policy_tokens"),
            "tokens_per_rollout": mean("policy_tokens"), "steps_per_rollout": mean("steps"),
            "evaluator_calls": mean("evaluator_calls"), "credit_wall_clock_share": mean("credit_s") / step_s}


def halfway(evals: list[dict]) -> float:
    """Held-out pass@1 halfway from a run's first evaluation to its last; NaN where it did not rise."""
    start, end = evals[0]["pass@1"], evals[-1]["pass@1"]
    return start + (end - start) / 2 if end > start else math.nan


def samples_to(evals: list[dict], target: float) -> float:
    """Completions sampled until held-out pass@1 first reaches `target`, linearly interpolated between
    the evaluations around it; NaN: never (or no target)."""
    if evals[0]["pass@1"] >= target:
        return float(evals[0]["samples"])
    for before, after in zip(evals, evals[1:]):
        if after["pass@1"] >= target:
            share = (target - before["pass@1"]) / (after["pass@1"] - before["pass@1"])
            return before["samples"] + share * (after["samples"] - before["samples"])
    return math.nan


def run_metrics(run: dict, grpo: dict, policy_params: int, est_params: int) -> dict:
    """The flat numbers of one run: held-out pass@1 and the completions it sampled to reach GRPO's
    halfway mark on the same seed, costs, credit diagnostics over the second half of training (and
    whether every update gave each token exactly its A_i; for PRM-GRPO, also of its batches credited per step),
    how far its credit moves with the step labels, and the held-out probes of w(s)."""
    late = run["credit"][len(run["credit"]) // 2:]
    metrics = {"pass@1": run["final"]["pass@1"], **cost_row(run, grpo, policy_params, est_params),
               "samples_to_halfway": samples_to(run["evals"], halfway(grpo["evals"])),
               "samples_budget": float(run["evals"][-1]["samples"]), "step_label_effect": run["step_label_effect"],
               "flat_credit": min(e["flat_credit"] for e in run["credit"])}
    estimator_keys = ("w_right", "w_failed", "w_entropy", "right_target_zero") if "probe" in run else ()
    own_step_keys = tuple(OWN_STEP + k for k in CREDIT_KEYS) if OWN_STEP + CREDIT_KEYS[0] in run["credit"][0] else ()
    keys = CREDIT_KEYS + ("padding_share", "padding_share_max") + estimator_keys + own_step_keys
    metrics.update({key: mean_or_nan([e.get(key, math.nan) for e in late]) for key in keys})
    metrics.update({k: v for k, v in run.get("probe", {}).items() if k != "w_by_offset"})
    return metrics


def seed_means(per_seed: list[dict]) -> dict:
    """The mean over seeds of every metric (NaN-free values only)."""
    return {k: mean_or_nan([m[k] for m in per_seed]) for k in per_seed[0]}


def summarise(initial, tokenizer, args: ssg.Args, runs: dict) -> tuple[dict, dict, dict]:
    """The numbers of each run (per seed) and their mean over seeds, and the parameter counts."""
    sizes = {"policy_params": parameters(initial), "estimator_params": parameters(make_estimator(tokenizer, args, "cpu"))}
    per_seed = {m: [run_metrics(r, runs.get("grpo", rs)[i], sizes["policy_params"], sizes["estimator_params"])
                    for i, r in enumerate(rs)] for m, rs in runs.items()}
    return per_seed, {m: seed_means(v) for m, v in per_seed.items()}, sizes


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
    common.save_figure(fig, path)


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
    common.save_figure(fig, path)


def plot_localisation(runs: dict, path) -> None:
    """The probe of each SS-GRPO's first seed: mean w(s) by position relative to the first wrong step."""
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
    common.save_figure(fig, path)


# ============================================================================================
# The article's numbers against each other, the claims, the report
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


def weight_memory_share(steps: float, tokens: float, bytes_per_token: int) -> float:
    """Bytes of the stored step weights (one float32 per step) relative to a rollout buffer of
    `bytes_per_token`, for a rollout of `steps` steps and `tokens` tokens."""
    return WEIGHT_BYTES * steps / (bytes_per_token * tokens)


def long_rollout_flops_share(estimator: dict, tokens: float, step: float, prompt: float) -> float:
    """The estimator's inference FLOPs as a share of a 7B policy's generation FLOPs over a `tokens`-token
    rollout cut into steps of `step` tokens after a `prompt`-token prompt, attention included (the article's
    prose: f(s, P) reads each step with the prompt; its code reads the step alone, prompt 0 for the estimator).
    The policy's token at position t costs 2·params + 4·layers·width·(prompt + t) (QKᵀ and the weighted sum
    over its keys); the estimator (bidirectional) reads each step and the prompt whole, 2·params +
    4·layers·width·(step + prompt) per token it reads."""
    layers, width = ARTICLE_POLICY_SHAPE["layers"], ARTICLE_POLICY_SHAPE["hidden"]
    # Σ_{t=1..T} of the policy's cost ≈ 2·params·T + 4·layers·width·prompt·T + 2·layers·width·T²
    policy = 2 * ARTICLE_POLICY_PARAMS * tokens + 4 * layers * width * prompt * tokens + 2 * layers * width * tokens ** 2
    read = step + prompt  # tokens in one of the estimator's passes, tokens / step passes
    per_token = 2 * (estimator["layers"] + estimator["head"]) + 4 * ARTICLE_ESTIMATOR["layers"] * ARTICLE_ESTIMATOR["hidden"] * read
    return tokens / step * read * per_token / policy


def largest_share(estimator: dict, shortest: int) -> float:
    """The largest share on the article's code (each step read alone) over rollouts of `shortest` tokens or
    more, any prompt, any cut into steps: the estimator's cost grows with the step, so one step as long as the
    rollout bounds it, and a prompt only adds to the policy's; then (a + b·T) / (c + e·T) is monotone in T, so
    it is the larger of its value at `shortest` and its limit b / e (T → ∞), the ratio of the two attention
    terms."""
    return max(long_rollout_flops_share(estimator, shortest, shortest, 0), attention_limit())


def attention_limit() -> float:
    """The share's limit as one step as long as the rollout grows without bound: the estimator's attention
    term over the policy's."""
    return 4 * ARTICLE_ESTIMATOR["layers"] * ARTICLE_ESTIMATOR["hidden"] / (
        2 * ARTICLE_POLICY_SHAPE["layers"] * ARTICLE_POLICY_SHAPE["hidden"])


def prompt_at_share(estimator: dict, tokens: int, step: float, share: float) -> float:
    """On the article's prose (each step read with the prompt), the prompt length at which a rollout of
    `tokens` tokens in steps of `step` tokens costs `share` of the policy's FLOPs (0 where even no prompt
    reaches it): the root of estimator(P) = share · policy(P), quadratic in x = step + P."""
    if long_rollout_flops_share(estimator, tokens, step, 0) >= share:
        return 0.0
    T, layers, width = tokens, ARTICLE_POLICY_SHAPE["layers"], ARTICLE_POLICY_SHAPE["hidden"]
    a = 2 * (estimator["layers"] + estimator["head"])
    b = 4 * ARTICLE_ESTIMATOR["layers"] * ARTICLE_ESTIMATOR["hidden"]
    # (T/step)·x·(a + b·x) = share·(2·params·T + 4·layers·width·(x - step)·T + 2·layers·width·T²)
    quadratic = T / step * b
    linear = T / step * a - share * 4 * layers * width * T
    constant = -share * (2 * ARTICLE_POLICY_PARAMS * T - 4 * layers * width * step * T + 2 * layers * width * T ** 2)
    x = (-linear + math.sqrt(linear ** 2 - 4 * quadratic * constant)) / (2 * quadratic)
    return max(x - step, 0.0)


def article_numbers(summary: dict) -> dict:
    """The article's own numbers checked against each other, and its estimator at its own sizes;
    the FLOPs share uses the estimator's measured tokens per policy token where SS-GRPO ran (it
    re-reads the prompt with each step), else 1 (steps only, as the article's code reads them); on rollouts over
    ARTICLE_LONG_ROLLOUT tokens, the code's bound, and the prompts at which the prose's reading reaches 1%."""
    share = table_gain_share(ARTICLE)
    total, incremental = table_cost_readings(ARTICLE)
    size = encoder_parameters(**ARTICLE_ESTIMATOR)
    reads = summary["ss_grpo"]["estimator_tokens_per_policy_token"] if "ss_grpo" in summary else 1.0
    rollouts = summary.get("grpo") or next(iter(summary.values()), None)  # steps and tokens of a rollout here
    memory = {} if rollouts is None else {
        "rollout_steps": rollouts["steps_per_rollout"], "rollout_tokens": rollouts["tokens_per_rollout"],
        **{f"article_weight_memory_share_{end}": weight_memory_share(rollouts["steps_per_rollout"],
                                                                     rollouts["tokens_per_rollout"], size)
           for end, size in zip(("high", "low"), BUFFER_BYTES_PER_TOKEN)}}  # the smallest buffer, the largest share
    return {"article_gain_share": share, "article_accuracy_ratio": ARTICLE["ss_grpo"][0] / ARTICLE["prm_grpo"][0],
            "article_cost_share_total": total, "article_cost_share_incremental": incremental,
            "article_training_hours_vs_grpo": ARTICLE["ss_grpo"][1] / ARTICLE["grpo"][1],
            **{f"article_estimator_params_{k}": v for k, v in size.items()},
            "article_estimator_tokens_per_policy_token": reads,
            "article_estimator_flops_share_7b": estimator_flops_share(size["layers"] + size["head"],
                                                                      ARTICLE_POLICY_PARAMS, reads),
            "article_estimator_flops_share_7b_any": largest_share(size, 1),
            "article_estimator_flops_share_7b_long": largest_share(size, ARTICLE_LONG_ROLLOUT),
            **{f"article_{name}_prompt_at_bound_{step}": prompt_at_share(size, tokens, step, ARTICLE_INFERENCE_OVERHEAD)
               for name, tokens in (("rollout", ARTICLE_ROLLOUT_TOKENS), ("long_rollout", ARTICLE_LONG_ROLLOUT))
               for step in PROSE_STEPS},
            "article_prefix_rescoring_cost": prefix_rescoring_cost(ARTICLE_ROLLOUT_TOKENS), **memory}


def memory_verdict(low: float, high: float) -> bool | None:
    """~10% to one significant figure (round(share, 1) == 0.1) over the plausible buffers, whose shares run
    from low (the largest buffer) to high (the smallest): yes where both ends read ~10%, no where neither does
    and they lie on the same side of it, else None (the buffer, which the article does not name, decides)."""
    reads = [round(share, 1) == ARTICLE_WEIGHT_MEMORY for share in (low, high)]
    if all(reads):
        return True
    return False if high < ARTICLE_WEIGHT_MEMORY / 2 or round(low, 1) > ARTICLE_WEIGHT_MEMORY else None


def article_claims(n: dict, summary: dict) -> list[dict]:
    """The article's numbers against each other (n = article_numbers), no training involved."""
    table = ARTICLE
    hours = "/".join(f"{table[m][1]:g}" for m in ("grpo", "prm_grpo", "ss_grpo"))
    inference = "/".join(f"{table[m][2]:g}x" for m in ("grpo", "prm_grpo", "ss_grpo"))
    table_overhead = table["ss_grpo"][2] - table["grpo"][2]
    figures = {"5% of rollout generation (Performance)": ARTICLE_ROLLOUT_OVERHEAD,
               f"{table['ss_grpo'][2]:g}x inference per rollout (its table)": table_overhead}
    overheads = "; ".join(f"{k}: {v:.0%}" for k, v in figures.items())
    shares = n.get("article_weight_memory_share_low"), n.get("article_weight_memory_share_high")
    prm = summary.get("prm_grpo")
    ours = (f"; our PRM-GRPO run reads {prm['inference_flops_vs_grpo'] - 1:.2f}x the policy's tokens in step "
            f"prefixes ({prm['evaluator_calls']:.2f} steps per rollout)") if prm else ""
    return [
        claim("SS-GRPO article, Performance", f"SS-GRPO achieves {ARTICLE_SHARE:.0%} of the accuracy gain of a full "
              "PRM (its table: GRPO 72.3%, PRM 78.1%, SS-GRPO 77.5%)",
              f"its table gives {n['article_gain_share']:.1%} of the gain ({table['ss_grpo'][0] - table['grpo'][0]:.1f} "
              f"of {table['prm_grpo'][0] - table['grpo'][0]:.1f} points); the other reading, SS-GRPO's accuracy over "
              f"the PRM's, is {n['article_accuracy_ratio']:.1%}",
              round(n["article_gain_share"], 2) == ARTICLE_SHARE),
        claim("SS-GRPO article, Performance", f"...at {ARTICLE_COST:.0%} of the PRM's training cost, read as total "
              f"training hours (its table: {hours} h for GRPO/PRM/SS-GRPO)",
              f"{table['ss_grpo'][1]:g}/{table['prm_grpo'][1]:g} h = {n['article_cost_share_total']:.1%}",
              round(n["article_cost_share_total"], 2) == ARTICLE_COST),
        claim("SS-GRPO article, Performance", f"...at {ARTICLE_COST:.0%} of the PRM's training cost, read as the "
              "hours each spends beyond GRPO's",
              f"({table['ss_grpo'][1]:g} - {table['grpo'][1]:g})/({table['prm_grpo'][1]:g} - {table['grpo'][1]:g}) h "
              f"= {n['article_cost_share_incremental']:.1%}: the only reading that gives {ARTICLE_COST:.0%}",
              round(n["article_cost_share_incremental"], 2) == ARTICLE_COST),
        claim("SS-GRPO article, Summary", "SS-GRPO trains at a fraction of the PRM's cost, read on its table: fewer "
              f"training hours and less inference per rollout than the PRM ({hours} h; {inference} for "
              "GRPO/PRM/SS-GRPO)", f"{table['ss_grpo'][1]:g}/{table['prm_grpo'][1]:g} h = "
              f"{n['article_cost_share_total']:.1%}; {table['ss_grpo'][2]:g}/{table['prm_grpo'][2]:g} inference = "
              f"{table['ss_grpo'][2] / table['prm_grpo'][2]:.2%} (exact)",
              table["ss_grpo"][1] < table["prm_grpo"][1] and table["ss_grpo"][2] < table["prm_grpo"][2]),
        claim("SS-GRPO article, Engineering decisions", "the tiny estimator keeps the overhead below "
              f"{ARTICLE_INFERENCE_OVERHEAD:.0%} of LLM inference, read as the article's own stated overheads "
              "(each below it)", f"the estimator's overhead as the article states it elsewhere (inference or rollout "
              f"time, not FLOPs; the FLOPs reading is the claim on a 7B policy's generation): {overheads}; the "
              f"largest, {max(figures.values()):.0%}, against the bound {ARTICLE_INFERENCE_OVERHEAD:.0%} (exact)",
              max(figures.values()) < ARTICLE_INFERENCE_OVERHEAD),
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
        *flops_claims(n),
        *long_rollout_claims(n),
        claim("SS-GRPO article, Why it works", "the only extra cost is the estimator's forward pass, read against "
              "its table (1.05x inference per rollout; 24 and 28 training hours for GRPO and SS-GRPO)",
              f"training takes +{n['article_training_hours_vs_grpo'] - 1:.0%} over GRPO's hours against the forward "
              f"pass's +{table_overhead:.0%} of inference: the estimator's own training costs too (exact)",
              n["article_training_hours_vs_grpo"] - 1 <= table_overhead),
        *([claim("SS-GRPO article, Trade-offs", "storing step-level weights for all rollouts increases memory by "
                 f"~{ARTICLE_WEIGHT_MEMORY:.0%} (to its one significant figure)",
                 f"one float32 per step against a rollout buffer of {BUFFER_BYTES_PER_TOKEN[0]} to "
                 f"{BUFFER_BYTES_PER_TOKEN[1]} B per token (an int32 id alone; an int64 id, float32 log-probs of "
                 f"policy, sampler and reference, and the advantage), on our rollouts ({n['rollout_steps']:.1f} steps, "
                 f"{n['rollout_tokens']:.0f} tokens): {shares[0]:.2%} to {shares[1]:.2%}; the article does not say "
                 "what memory its 10% is of (weights, optimiser state and activations would add to the denominator): "
                 "no only where no plausible buffer gives ~10%", memory_verdict(*shares))]
          if shares[0] is not None else []),
        claim("SS-GRPO article, The Problem", f"for a {ARTICLE_ROLLOUT_TOKENS}-token rollout, per-step evaluation "
              f"multiplies inference cost by {ARTICLE_PER_STEP_COST:g}x, read as evaluator calls (one per token)",
              f"one evaluation of each token's prefix is {ARTICLE_ROLLOUT_TOKENS} calls where the outcome needs one: "
              f"{ARTICLE_ROLLOUT_TOKENS}x (exact; per step, not per token, it is fewer calls)" + ours,
              ARTICLE_ROLLOUT_TOKENS == ARTICLE_PER_STEP_COST),
        claim("SS-GRPO article, The Problem", f"for a {ARTICLE_ROLLOUT_TOKENS}-token rollout, per-step evaluation "
              f"multiplies inference cost by {ARTICLE_PER_STEP_COST:g}x, read as tokens processed",
              f"scoring every token's prefix in its own forward pass reads {n['article_prefix_rescoring_cost']:.1f}x "
              f"the tokens of one pass (Σ t over t = 1..{ARTICLE_ROLLOUT_TOKENS}); a causal PRM with a head at each "
              f"step's end scores all steps in one pass (1x)" + ours,
              round(n["article_prefix_rescoring_cost"]) == ARTICLE_PER_STEP_COST),
    ]


def flops_model() -> str:
    return (f"2·params per token plus attention (4·layers·width per key), the policy {ARTICLE_POLICY_SHAPE['layers']} "
            f"layers of width {ARTICLE_POLICY_SHAPE['hidden']} over the rollout")


def prompts_at_bound(n: dict, rollout: str) -> str:
    return ", ".join(f"{n[f'article_{rollout}_prompt_at_bound_{step}']:,.0f} tokens for {step}-token steps"
                     for step in PROSE_STEPS)


def flops_claims(n: dict) -> list[dict]:
    """Is the estimator's forward pass below ARTICLE_INFERENCE_OVERHEAD of a 7B policy's generation FLOPs (the
    article's "<1% of LLM inference", and the bound its "negligible" is read with)? On its code (each step read
    alone) the largest share over every rollout and cut decides, exactly; on its prose (each step with the
    prompt) the share rises without bound with the prompt, whose length the article does not state:
    undetermined."""
    statement = (f"the estimator's forward pass costs below {ARTICLE_INFERENCE_OVERHEAD:.0%} of a 7B policy's "
                 "generation (FLOPs, attention included; read on the article's ")
    bound, largest = ARTICLE_INFERENCE_OVERHEAD, n["article_estimator_flops_share_7b_any"]
    return [
        claim("SS-GRPO article, Why it works; Engineering decisions", statement + "code, whose estimator reads each "
              "step's tokens alone)", f"{flops_model()}, the estimator reading each step whole and nothing else: at most "
              f"{largest:.3%} of the policy's FLOPs for any rollout, any prompt and any cut into steps (the larger of "
              f"its value at one token and its limit; exact), against the bound {bound:.0%}", largest < bound),
        claim("SS-GRPO article, Why it works; Engineering decisions", statement + "prose, where f(s, P) reads each "
              "step with the prompt)", f"{flops_model()} after the prompt, the estimator reading each step with the "
              "prompt ((step + prompt)/step tokens per policy token): depends on the prompt's length and the steps', "
              f"which the article does not state: with no prompt it is the code's reading (at most {largest:.3%}); "
              f"it rises without bound as the prompt grows, reaching {bound:.0%} on a {ARTICLE_ROLLOUT_TOKENS}-token "
              f"rollout with a prompt of {prompts_at_bound(n, 'rollout')}; at our task's lengths "
              f"({n['article_estimator_tokens_per_policy_token']:.2f} tokens read per policy token, attention left "
              f"out) it would be {n['article_estimator_flops_share_7b']:.3%}", None),
    ]


def long_rollout_claims(n: dict) -> list[dict]:
    """Past ARTICLE_LONG_ROLLOUT tokens, is the estimator's cost at or above the 1% bound (the claim on a 7B
    policy's generation)? The article gives neither the steps' length nor the prompt's, so no where every length
    keeps the share below it, else undetermined (yes would need every length to reach it, and one-token steps of
    a long enough rollout fall below). On its code (steps alone) the largest share decides, exactly. On its
    prose (each step with the prompt) the share rises without bound with the prompt, but "becomes" is about
    the rollout's length: at a fixed prompt and step length the share falls as the rollout grows (the
    estimator's cost per policy token is fixed, the policy's attention per token grows), and with one step as
    long as the rollout it rises only toward `attention_limit`; so no rollout becomes non-negligible by its
    length where that limit is below the bound (exact), else undetermined."""
    statement = (f"for very long rollouts (>{ARTICLE_LONG_ROLLOUT} tokens) the estimator's cost becomes "
                 "non-negligible (FLOPs against a 7B policy's generation, attention included; read on the article's ")
    model, prompts = flops_model(), prompts_at_bound(n, "long_rollout")
    bound, longest, limit = ARTICLE_INFERENCE_OVERHEAD, n["article_estimator_flops_share_7b_long"], attention_limit()
    size, step = encoder_parameters(**ARTICLE_ESTIMATOR), PROSE_STEPS[0]
    prompt = n[f"article_long_rollout_prompt_at_bound_{step}"]
    at = {T: long_rollout_flops_share(size, T, step, prompt) for T in (ARTICLE_ROLLOUT_TOKENS, 10 * ARTICLE_LONG_ROLLOUT)}
    return [
        claim("SS-GRPO article, Trade-offs", statement + "code, whose estimator reads each step's tokens alone)",
              f"{model}, the estimator reading each step whole and nothing else (1 token per policy token; one step "
              f"as long as the rollout costs the most, a prompt adds only to the policy's): at most {longest:.3%} of "
              f"the policy's FLOPs for any rollout of {ARTICLE_LONG_ROLLOUT} tokens or more, any prompt and any cut "
              f"into steps (the larger of its value at {ARTICLE_LONG_ROLLOUT} and its limit; exact); at or above "
              f"{bound:.0%} counts as non-negligible, the bound of the claim on a 7B policy's generation (no where "
              "even the costliest cut stays below it, else the steps' length, which the article does not state, "
              "decides)", False if longest < bound else None),
        claim("SS-GRPO article, Trade-offs", statement + "prose, where f(s, P) reads each step with the prompt)",
              f"{model} after the prompt, the estimator reading each step with the prompt ((step + prompt)/step tokens "
              f"per policy token): its level depends on the prompt's length and the steps', which the article does "
              f"not state: with no prompt it is the code's reading (at most {longest:.3%}); it rises without bound as "
              f"the prompt grows, reaching {bound:.0%} on a {ARTICLE_LONG_ROLLOUT}-token rollout with a prompt of "
              f"{prompts}. But it does not grow with the rollout: at a fixed prompt and step length it falls as the "
              f"rollout grows (with the {prompt:,.0f}-token prompt and {step}-token steps: {at[ARTICLE_ROLLOUT_TOKENS]:.2%} "
              f"on {ARTICLE_ROLLOUT_TOKENS:,} tokens, {at[10 * ARTICLE_LONG_ROLLOUT]:.2%} on "
              f"{10 * ARTICLE_LONG_ROLLOUT:,}), and with one step as long as the rollout it rises only toward "
              f"{limit:.3%}: where it reaches {bound:.0%}, the prompt does it, on shorter rollouts first (no where that "
              f"limit is below {bound:.0%}; exact)", False if limit < bound else None),
    ]


def cost_claims(summary: dict, per_seed: dict, mc_rollouts: int) -> list[dict]:
    """SS-GRPO's training cost against a PRM labelled by Monte Carlo (the chapter checks its accuracy),
    paired by seed: "4%" holds for a share that rounds to it (below 4.5%)."""
    if not {"grpo", "prm_grpo", "ss_grpo"} <= set(summary):
        return []
    ss = summary["ss_grpo"]
    ss_extra, mc_extra = ss["train_flops_vs_grpo"] - 1, ss["mc_prm_train_flops_vs_grpo"] - 1
    wall = ss["train_wall_clock_s"] / summary["prm_grpo"]["train_wall_clock_s"]
    # per seed, SS-GRPO's extra FLOPs as a share of the MC-labelled PRM's, against what still reads as 4% (< 4.5%)
    shares = (of(per_seed, "ss_grpo", "train_flops_vs_grpo") - 1) / (of(per_seed, "ss_grpo", "mc_prm_train_flops_vs_grpo") - 1)
    holds, text = decided(ARTICLE_COST + 0.005 - shares)
    return [
        claim("SS-GRPO article, Performance", f"...at {ARTICLE_COST:.0%} of the PRM's training cost (read as cost "
              "beyond GRPO's, the reading that gives 4% in its table)",
              f"training FLOPs per rollout against GRPO's: SS-GRPO {ss['train_flops_vs_grpo']:.2f}x; a PRM labelled "
              f"by Monte Carlo ({mc_rollouts} rollouts per step prefix, its own training not counted) "
              f"{ss['mc_prm_train_flops_vs_grpo']:.2f}x on the same rollouts; SS-GRPO's extra cost is "
              f"{ss_extra / mc_extra:.0%} of the PRM's (its total {ss['train_flops_vs_grpo'] / ss['mc_prm_train_flops_vs_grpo']:.0%}); "
              f"4.5% minus that share, per seed: {text}. Our PRM-GRPO run's step checker is a free string compare, "
              f"so SS-GRPO's wall-clock at {wall:.0%} of that run's says nothing about a PRM's cost", holds),
    ]


# The article's step-value estimator and estimator training ("Production Code Example"), its code with
# the names prefixed and some comments left out: what `article_objective` asks about its objective
class ArticleStepValueEstimator(nn.Module):
    """Lightweight transformer to score each step's contribution."""
    def __init__(self, hidden_dim: int = 128, num_layers: int = 2, vocab_size: int = 32000):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden_dim)
        encoder_layer = nn.TransformerEncoderLayer(d_model=hidden_dim, nhead=4, batch_first=True)
        self.transformer = nn.TransformerEncoder(encoder_layer, num_layers=num_layers)
        self.head = nn.Linear(hidden_dim, 1)

    def forward(self, step_ids: torch.Tensor, step_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(step_ids)
        x = self.transformer(x, src_key_padding_mask=~step_mask.bool())
        # mean-pool over non-padding tokens
        pooled = (x * step_mask.unsqueeze(-1)).sum(dim=1) / step_mask.sum(dim=1, keepdim=True)
        return torch.sigmoid(self.head(pooled)).squeeze(-1)  # (batch,)


def article_train_step_estimator(estimator, rollouts, optimizer, margin: float = 0.1):
    """Contrastive training: steps from high-reward rollouts should score higher."""
    rewards = torch.tensor([r for _, r in rollouts])
    # Normalize rewards to [0,1] for weighting
    norm_rewards = (rewards - rewards.min()) / (rewards.max() - rewards.min() + 1e-8)

    total_loss = 0.0
    for i, (steps, _) in enumerate(rollouts):
        # Encode each step (padded)
        step_ids = torch.stack([s for s in steps])  # (num_steps, seq_len)
        step_mask = (step_ids != 0).float()
        weights = estimator(step_ids, step_mask)  # (num_steps,)
        # Loss: pull weights toward normalized reward of the rollout
        target = norm_rewards[i].expand_as(weights)
        loss = F.mse_loss(weights, target)
        total_loss += loss

    optimizer.zero_grad()
    total_loss.backward()
    optimizer.step()
    return total_loss.item()


def article_objective(vocab: int = 50) -> dict:
    """Is the article's estimator objective contrastive? Asked of its own code on random steps (a small
    copy of its estimator in eval mode, so that dropout draws nothing, and an optimiser that does not
    move it): the loss's change when only `margin` changes (0.1 -> 10), and the change of the summed
    loss of two groups when they swap their failed rollouts, relative to that sum: a loss with one term
    per rollout does not change (up to float32 rounding, ~1e-7), one that compares a group's rollouts does."""
    torch.manual_seed(0)
    estimator = ArticleStepValueEstimator(hidden_dim=16, num_layers=1, vocab_size=vocab).eval()
    optimizer = torch.optim.SGD(estimator.parameters(), lr=0.0)
    a, b, c, d = (list(torch.randint(1, vocab, (3, 5))) for _ in range(4))  # 3 steps of 5 tokens, no padding (0)

    def loss(right, wrong, margin: float = 0.1) -> float:
        return article_train_step_estimator(estimator, [(right, 1.0), (wrong, 0.0)], optimizer, margin)

    paired, swapped = loss(a, b) + loss(c, d), loss(a, d) + loss(c, b)
    return {"article_margin_effect": abs(loss(a, b, 10.0) - loss(a, b)),
            "article_pair_effect": abs(paired - swapped) / paired, "article_tiled_change": article_tiled_change(),
            **article_definition()}


# Three groups for the article's own definition, steps named by letter (ids 1-12), rewards 1 (right) or 0:
# rollouts of three steps each, where a step's share of appearances in right rollouts is A 2/3, B 1, C 1/2,
# D 1/2, E 0; rollouts of one or four steps, where F (share 1/2) appears in right ones more than G (1/3); and
# one where J leads K on both readings of "more frequently": in more right rollouts (2 against 1) and a
# larger share of its appearances (2/3 against 1/2)
DEFINITION_STEPS = "ABCDEFGHIJKL"
DEFINITION_GROUPS = {"three steps each": [((2, 1, 3), 1.0), ((2, 1, 4), 1.0), ((1, 3, 5), 0.0), ((4, 5, 5), 0.0)],
                     "one or four steps": [((6, 8, 8, 8), 1.0), ((6,), 0.0), ((7,), 1.0), ((7, 9, 9, 9), 0.0),
                                           ((7, 9, 9, 9), 0.0)],
                     "both readings": [((10, 12, 12, 12), 1.0), ((10, 12, 12, 12), 1.0), ((10,), 0.0), ((11,), 1.0),
                                       ((11,), 0.0)]}


class FreeStepWeights(nn.Module):
    """An estimator that can fit any weight per step: one free number per step id (a step is its id)."""
    def __init__(self, steps: int):
        super().__init__()
        self.w = nn.Parameter(torch.full((steps + 1,), 0.5))

    def forward(self, step_ids: torch.Tensor, step_mask: torch.Tensor) -> torch.Tensor:
        return self.w[step_ids[:, 0]]


def article_definition(updates: int = 2000) -> dict:
    """The article's definition of its contrastive objective ("steps that appear more frequently in successful
    rollouts" get higher weights), asked of its train_step_estimator: run to convergence on each of
    DEFINITION_GROUPS with an estimator free to fit any weight per step, the weights it reaches beside each
    step's share of appearances in right rollouts."""
    estimator = FreeStepWeights(len(DEFINITION_STEPS))
    for group in DEFINITION_GROUPS.values():  # each alone, as the article's code takes one prompt's rollouts
        rollouts = [([torch.tensor([step]) for step in rollout], reward) for rollout, reward in group]
        optimizer = torch.optim.Adam(estimator.parameters(), lr=0.05)
        for _ in range(updates):
            article_train_step_estimator(estimator, rollouts, optimizer)
    found = {}
    for step, name in enumerate(DEFINITION_STEPS, 1):
        rewards = [reward for group in DEFINITION_GROUPS.values() for rollout, reward in group for s in rollout
                   if s == step]
        found[f"article_definition_share[{name}]"] = float(np.mean(rewards))
        found[f"article_definition_weight[{name}]"] = float(estimator.w[step].detach())
    return found


def article_tiled_change() -> float:
    """The article's estimator at its own sizes (random weights, eval mode so that dropout draws nothing, float64):
    the largest |w(a step's tokens repeated k times) - w(step)| over k in TILES, on 3 random steps of 5 tokens."""
    torch.manual_seed(0)
    estimator = ArticleStepValueEstimator().eval().double()
    steps = torch.randint(1, ARTICLE_ESTIMATOR["vocab"], (3, 5))
    with torch.no_grad():
        w = estimator(steps, torch.ones(steps.shape))
        return max(float((estimator(steps.repeat(1, k), torch.ones(3, 5 * k)) - w).abs().max()) for k in TILES)


# ============================================================================================
# The claims on the runs: one value per seed, decided on its 95% interval over the seeds
# ============================================================================================


def decided(values: list[float]) -> tuple[bool | None, str]:
    """common.seed_verdict on an effect measured once per seed (> 0 in the statement's direction; a
    bound the statement names is subtracted first, so 0 is that bound), and its text: yes where the
    95% interval lies above 0, no only where it lies below 0 (it rules out what was said), else None."""
    holds, text = common.seed_verdict(values)
    return holds, f"{text} (mean [95% interval over {len(values)} seeds])"


def every(*verdicts: bool | None) -> bool | None:
    """A statement of several parts: yes if each part holds, no if one fails, else None."""
    return False if False in verdicts else None if None in verdicts else True


def of(per_seed: dict, method: str, key: str) -> np.ndarray:
    """A method's number on each seed."""
    return np.array([m[key] for m in per_seed[method]], dtype=float)


def accuracy_claims(per_seed: dict) -> list[dict]:
    """Does SS-GRPO beat GRPO, and how much of the gold PRM-GRPO's gain does it recover? Paired by seed."""
    if not {"grpo", "prm_grpo", "ss_grpo"} <= set(per_seed):
        return []
    source, (lead, gain) = "SS-GRPO article, Performance", gains(per_seed)
    beats, beats_text = decided(lead)
    claims = [claim(source, "SS-GRPO beats GRPO (here: at our scale; its table's 5.2 points at 7B on GSM8K are not a size "
                    "that carries over)", f"held-out pass@1, SS-GRPO "
                    f"{np.mean(of(per_seed, 'ss_grpo', 'pass@1')):.3f} minus GRPO "
                    f"{np.mean(of(per_seed, 'grpo', 'pass@1')):.3f}: {beats_text}", beats)]
    for share, statement in ((ARTICLE_SHARE, f"SS-GRPO recovers {ARTICLE_SHARE:.0%} of the PRM's accuracy gain over GRPO"),
                             (MOST, "SS-GRPO recovers most (over half) of the PRM's accuracy gain over GRPO")):
        holds, text = gain_share(lead, gain, share)
        claims.append(claim(source, statement, text, holds))
    return claims


MOST = 0.5  # "most" of a gain: over half of it


def gains(per_seed: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, held-out pass@1 over GRPO's: SS-GRPO's, and the gold PRM-GRPO's."""
    passes = {m: of(per_seed, m, "pass@1") for m in ("grpo", "prm_grpo", "ss_grpo")}
    return passes["ss_grpo"] - passes["grpo"], passes["prm_grpo"] - passes["grpo"]


def gain_share(lead: np.ndarray, gain: np.ndarray, share: float, what: str = "gain over GRPO") -> tuple[bool | None, str]:
    """Does SS-GRPO's gain over GRPO (`lead`) reach `share` of the PRM's (`gain`), per seed? Undetermined where
    the PRM's gain is not above 0: premise not met where it lies below 0, inconclusive where the seeds cannot tell.
    (`what` names the gain: held-out pass@1 by default.)"""
    gained, gain_text = decided(gain)
    if gained is False:  # no gain to share
        return None, (f"premise not met: the gold PRM-GRPO's {what}, {gain_text}, lies below 0, so there is "
                      "nothing to share")
    if gained is None:  # a gain the seeds cannot tell from 0: a share of it is undetermined
        return None, f"the gold PRM-GRPO's {what}, {gain_text}, cannot be told from 0, so no share of it can be read"
    holds, text = decided(lead - share * gain)  # SS-GRPO's gain minus the share of the PRM's, per seed
    return holds, (f"SS-GRPO's {what} {np.mean(lead):+.3f}, the PRM's {gain_text}; SS-GRPO's share of it "
                   f"{np.mean(lead) / np.mean(gain):.0%}; its {what} minus {share:.0%} of the PRM's, per seed: {text} "
                   f"(yes: at least {share:.0%})")


def cheaper_than_mc_prm(per_seed: dict, mc_rollouts: int) -> tuple[bool | None, str]:
    """Does SS-GRPO train on less compute than a PRM labelled by Monte Carlo (priced as cost_claims prices it,
    on SS-GRPO's own rollouts)? Per seed, 1 minus SS-GRPO's share of the PRM's training FLOPs; and its text."""
    ss, mc = of(per_seed, "ss_grpo", "train_flops_vs_grpo"), of(per_seed, "ss_grpo", "mc_prm_train_flops_vs_grpo")
    # the share of the PRM's training FLOPs SS-GRPO spares, 1 - ss/mc: > 0 exactly where SS-GRPO's extra cost
    # beyond GRPO's, ss - 1, is also below the PRM's, mc - 1 (the 4% claim's reading): on each seed the readings agree in sign
    cheaper, cheaper_text = decided(1 - ss / mc)
    return cheaper, (
        f"training FLOPs per rollout against GRPO's, SS-GRPO {np.mean(ss):.2f}x, a PRM labelled by Monte Carlo "
        f"({mc_rollouts} rollouts per step prefix, its own training not counted) {np.mean(mc):.2f}x on the same "
        f"rollouts, so SS-GRPO's total is {np.mean(ss) / np.mean(mc):.0%} of the PRM's (its extra cost "
        f"{(np.mean(ss) - 1) / (np.mean(mc) - 1):.0%}); 1 minus SS-GRPO's share of the PRM's FLOPs, per seed: "
        f"{cheaper_text} (yes: less)")


def summary_claims(per_seed: dict, mc_rollouts: int) -> list[dict]:
    """The article's summary, both halves per seed in one claim: most of a PRM's benefit (over half of its
    accuracy gain over GRPO, as accuracy_claims reads it) at a fraction of its cost (less training compute than a
    PRM labelled by Monte Carlo); the cost half in its own claim, which needs no PRM-GRPO run; and the benefit
    read as step credit: over half of the PRM's gap between a right solution's right steps and its flawed one."""
    if not {"grpo", "ss_grpo"} <= set(per_seed):
        return []
    source = "SS-GRPO article, Summary"
    cheaper, cheaper_text = cheaper_than_mc_prm(per_seed, mc_rollouts)
    cost = claim(source, "SS-GRPO trains at a fraction of a PRM's cost: its training compute is below that of a PRM "
                 "labelled by Monte Carlo", cheaper_text, cheaper)
    if "prm_grpo" not in per_seed:
        return [cost]
    most, most_text = gain_share(*gains(per_seed), MOST)
    # the step credit's benefit is where it goes within a solution (GRPO's broadcast gives every step the same): the
    # right steps' credit minus the flawed step's, not the flawed step's level, which any w < 1 lowers
    gap = {m: of(per_seed, m, "flawed_right_steps_credit") - of(per_seed, m, "flawed_step_credit")
           for m in ("prm_grpo", "ss_grpo")}
    moved, moved_text = gain_share(gap["ss_grpo"], gap["prm_grpo"], MOST,
                                   "credit on the right steps minus on the flawed step")
    credit = claim(source, "SS-GRPO recovers most of the benefits of process reward models, read as their step "
                   "credit: in a right solution, SS-GRPO credits the flawed step below the right steps before it by "
                   "over half PRM-GRPO's gap", "right completions with a wrong line in mixed groups (second half of "
                   f"training; shares of GRPO's A_i, whose broadcast leaves no gap): {moved_text}", moved)
    return [credit, claim(
        source, "SS-GRPO recovers most of the benefits of process reward models at a fraction of the cost: most (over "
        "half) of the PRM's accuracy gain over GRPO, at less training compute than a PRM labelled by Monte Carlo",
        f"most of the gain: {most_text}; at a fraction of the cost: {cheaper_text}",
        common.all_parts(most, cheaper)), cost]


def slip_claims(per_seed: dict) -> list[dict]:
    """What the article says GRPO does to a flawed step and to the right steps before a slip."""
    if "grpo" not in per_seed:
        return []
    summary = {m: seed_means(per_seed[m]) for m in ("grpo", "ss_grpo", "ss_grpo_signed", "prm_grpo") if m in per_seed}

    def shares(key: str) -> str:
        return ", ".join(f"{NAMES[m]} {s[key]:+.2f}" for m, s in summary.items())

    grpo = summary["grpo"]
    flawed, slips, flat = grpo["flawed_right_share"], grpo["right_steps_blame"], of(per_seed, "grpo", "flat_credit")
    # GRPO's credit on the flawed step, decided over the seeds whose rewarded completions hold one
    credit = of(per_seed, "grpo", "flawed_step_credit")
    seen = (of(per_seed, "grpo", "flawed_right_share") > 0) & np.isfinite(credit)
    reinforced, text = decided(credit[seen]) if seen.any() else (None, "")
    return [
        claim("SS-GRPO article, The Problem", "a flawed step in a chain that still reaches the right answer is "
              "reinforced by GRPO",
              (f"{flawed:.1%} of GRPO's rewarded completions (second half of training) hold a wrong line; the credit "
               f"on it as a share of GRPO's A_i > 0: {shares('flawed_step_credit')}; GRPO's, on the {int(seen.sum())} "
               f"of {len(seen)} seeds that have one: {text}") if seen.any() else
              "premise not met: no rewarded completion of GRPO's (second half of training) holds a wrong line",
              reinforced),
        claim("SS-GRPO article, The Problem", "GRPO penalises the right steps before a single slip as much as the slip, "
              "in a mixed group (a failed completion in a group with a success): every token of the failed "
              "completion gets its A_i < 0",
              f"every step token of every completion got exactly its A_i on {int(flat.sum())} of {len(flat)} seeds "
              f"(all updates; exact); the blame on the right steps before the first wrong one in failed completions, "
              f"as a share of A_i < 0 (second half of training): {shares('right_steps_blame')}",
              None if math.isnan(slips) else bool(flat.min() == 1.0)), *brittle_claims(per_seed)]


def brittle_claims(per_seed: dict) -> list[dict]:
    """Flat credit makes reasoning brittle: GRPO's rewarded completions reach the right answer through a wrong
    line more often than those of the gold step credit (PRM-GRPO), paired by seed."""
    if "prm_grpo" not in per_seed:
        return []
    grpo, prm = of(per_seed, "grpo", "flawed_right_share"), of(per_seed, "prm_grpo", "flawed_right_share")
    more, text = decided(grpo - prm)
    return [claim("SS-GRPO article, The Problem", "flat credit (GRPO's broadcast) makes reasoning brittle: more of its "
                  "right answers are reached through a wrong line than under step credit (the gold PRM-GRPO)",
                  f"share of the rewarded completions of mixed groups that hold a wrong line (second half of "
                  f"training): GRPO {np.mean(grpo):.3f}, PRM-GRPO {np.mean(prm):.3f}; GRPO's minus PRM-GRPO's {text}",
                  more)]


def step_credit_claims(per_seed: dict) -> list[dict]:
    """Where the gold step credit (PRM-GRPO, and its batches credited per step) and SS-GRPO's weight put the
    blame, and how fast step credit learns."""
    claims = []
    if {"grpo", "prm_grpo"} <= set(per_seed):
        claims += process_claims(per_seed, "")
        if OWN_STEP + CREDIT_KEYS[0] in per_seed["prm_grpo"][0]:  # a run logged before the per-step form has none
            claims += process_claims(per_seed, OWN_STEP)
    if "ss_grpo" in per_seed:
        less, text = decided(of(per_seed, "ss_grpo", "flawed_right_steps_credit")
                             - of(per_seed, "ss_grpo", "flawed_step_credit"))
        claims.append(claim(
            "SS-GRPO article, The Problem and Mechanics", "SS-GRPO's step weight credits the flawed step less: in "
            "a right solution it gets less credit than the solution's right steps", f"SS-GRPO, right completions with a "
            f"wrong line (second half of training; shares of GRPO's A_i): credit on the right steps before the flawed "
            f"one minus on the flawed step {text}", less))
        more, text = decided(of(per_seed, "ss_grpo", "wrong_step_blame") - of(per_seed, "ss_grpo", "right_steps_blame"))
        claims.append(claim(
            "SS-GRPO article, Mechanics", "SS-GRPO's step weight blames the first wrong step more: in a failed "
            "solution it gets more blame than the right steps before it", f"SS-GRPO, failed completions in mixed "
            f"groups (second half of training; shares of GRPO's A_i): blame on the first wrong step minus on the "
            f"right steps before it {text}", more))
    if {"grpo", "prm_grpo"} <= set(per_seed):
        claims.append(convergence_claim(per_seed))
    return claims


# The two forms of the gold process advantage, by their metrics' prefix: what the claim calls each, the name
# its numbers go under, and where those numbers come from
PROCESS_FORMS = {
    "": ("PRM-GRPO, with DeepSeekMath's reward-to-go process advantage", "PRM-GRPO", ""),
    OWN_STEP: ("each step credited by its own normalised reward, not summed to go", "the per-step credit",
               " (A_t = r̃ of t's step, on PRM-GRPO's batches and gold step rewards; PRM-GRPO trained on the "
               "reward-to-go form)")}


def process_claims(per_seed: dict, prefix: str) -> list[dict]:
    """Process rewards as the mitigation of entangled credit, in one form of the process advantage (its
    metrics under `prefix`), one claim per part: more blame on the first wrong step than on the right steps
    before it, less blame on those right steps than GRPO gives (same seed), a right solution's flawed step
    pushed down."""
    form, name, source = PROCESS_FORMS[prefix]
    right_blame = of(per_seed, "prm_grpo", prefix + "right_steps_blame")
    wrong = of(per_seed, "prm_grpo", prefix + "wrong_step_blame") - right_blame
    (on_wrong, wrong_text), (down, down_text) = decided(wrong), decided(-of(per_seed, "prm_grpo", prefix + "flawed_step_credit"))
    # taken off the right ones: their blame under GRPO minus under the step credit, same seed
    off, off_text = decided(of(per_seed, "grpo", "right_steps_blame") - right_blame)
    head = f"mitigation of entangled credit: process rewards (the gold step verifier's, {form})"
    shares = f"{name}{source}, as shares of GRPO's A_i (second half of training): "
    return [claim("whole-game §7.4", f"{head} put more blame on the first wrong step than on the right steps before "
                  "it", f"{shares}blame on the first wrong step of failed completions minus on the right steps before "
                  f"it {wrong_text}", on_wrong),
            claim("whole-game §7.4", f"{head} take the blame off the right steps: less on the right steps before the "
                  "first wrong one than GRPO gives", f"{shares}the right steps' blame under GRPO "
                  f"({np.mean(of(per_seed, 'grpo', 'right_steps_blame')):.2f}) minus under {name} "
                  f"({np.mean(right_blame):.2f}) {off_text}", off),
            claim("whole-game §7.4", f"{head} push a right solution's flawed step down", f"{shares}minus the credit on "
                  f"the flawed step of right completions {down_text}", down)]


def convergence_claim(per_seed: dict) -> dict:
    """Does step credit converge faster? Completions sampled until held-out pass@1 reaches GRPO's
    halfway mark on the same seed, GRPO's minus PRM-GRPO's; a PRM-GRPO run that never reaches it
    counts at the budget, which can only overstate its speed (so it cannot give a yes)."""
    grpo, prm = of(per_seed, "grpo", "samples_to_halfway"), of(per_seed, "prm_grpo", "samples_to_halfway")
    statement = ("the broadcast of one advantage slows convergence: the gold step credit (PRM-GRPO) reaches GRPO's "
                 "halfway mark in fewer samples")
    if not np.isfinite(grpo).all():
        return claim("SS-GRPO article, The Problem", statement, "premise not met: GRPO's held-out pass@1 did not rise "
                     "on every seed, so it has no halfway mark", None)
    censored = ~np.isfinite(prm)
    faster, text = decided(grpo - np.where(censored, of(per_seed, "prm_grpo", "samples_budget"), prm))
    return claim("SS-GRPO article, The Problem", statement, f"completions sampled to GRPO's halfway mark (interpolated "
                 f"between held-out evaluations): GRPO {np.mean(grpo):.0f}, PRM-GRPO {mean_or_nan(prm):.0f} "
                 f"({int(censored.sum())} of {len(prm)} seeds never reach it: counted at the budget); GRPO's minus "
                 f"PRM-GRPO's {text}", None if faster is True and censored.any() else faster)


def step_size_claims(per_seed: dict) -> list[dict]:
    """SS-GRPO against GRPO with SS-GRPO's step size (its advantage scale at each update), paired by seed."""
    if not {"ss_grpo", "grpo_scaled"} <= set(per_seed):
        return []
    holds, text = decided(of(per_seed, "ss_grpo", "pass@1") - of(per_seed, "grpo_scaled", "pass@1"))
    return [claim(
        "SS-GRPO article, Mechanics and Why it works", "the learned step weights give credit to the steps that "
        "matter: SS-GRPO beats GRPO given the same step size at every update (its advantages scaled by SS-GRPO's "
        "mean weight)", f"SS-GRPO's push is {np.mean(of(per_seed, 'ss_grpo', 'advantage_scale')):.2f}x GRPO's (second "
        f"half of training); held-out pass@1, SS-GRPO minus the control: {text}", holds)]


def estimator_claims(per_seed: dict, objective: dict) -> list[dict]:
    """What w(s) learns (held-out probes), the signed variant, the article's objective, the length of
    a step, the evaluator calls and the overhead at our scale."""
    claims = []
    for method in ("ss_grpo", "ss_grpo_signed"):
        if method in per_seed:
            (right, right_text), (_, located_text) = (
                decided(of(per_seed, method, key) - 0.5) for key in ("auroc_step_right_in_failed", "localisation_auroc"))
            claims.append(claim(
                "SS-GRPO article", f"{NAMES[method]}: the estimator learns to identify steps causally correlated with "
                "success", f"held-out, minus chance (0.5): AUROC of w for 'this step is right' within failed solutions "
                f"{right_text} (decides: the right steps against the wrong line's); context, AUROC of -w for 'this is "
                f"the first wrong step' {located_text}, which counts the steps after it as negatives too: they lie on "
                "the failing path, where w falls further, so it asks for the exact first error, not for the steps "
                "that drive success", right))
    if {"ss_grpo", "ss_grpo_signed"} <= set(per_seed):
        more, text = decided(of(per_seed, "ss_grpo_signed", "wrong_step_blame") - of(per_seed, "ss_grpo", "wrong_step_blame"))
        _, pass_text = decided(of(per_seed, "ss_grpo_signed", "pass@1") - of(per_seed, "ss_grpo", "pass@1"))
        claims.append(claim(
            "this script (our variant)", "a sign-aware weight (1 - w when A_i < 0) gives the mistakes of failed "
            "completions their blame back", f"blame on the first wrong step (share of GRPO's), SS-GRPO ± minus SS-GRPO "
            f"{text}; held-out pass@1, SS-GRPO ± minus SS-GRPO {pass_text}", more))
    if "ss_grpo" in per_seed:
        claims += objective_claims(per_seed, objective) + length_claims(per_seed, objective)
    if {"ss_grpo", "prm_grpo"} <= set(per_seed):
        claims.append(evaluator_claim(per_seed))
    if "ss_grpo" in per_seed:
        under, text = decided(ARTICLE_ROLLOUT_OVERHEAD - of(per_seed, "ss_grpo", "credit_wall_clock_share"))
        claims.append(claim(
            "SS-GRPO article", "the estimator adds only ~5% overhead (a single forward pass per step), measured at our "
            "scale", f"estimator training + inference, share of an update's wall-clock: "
            f"{np.mean(of(per_seed, 'ss_grpo', 'credit_wall_clock_share')):.0%} (it varies between identical runs); 5% "
            f"minus it {text}; +{np.mean(of(per_seed, 'ss_grpo', 'inference_flops_vs_grpo')) - 1:.0%} inference FLOPs "
            "per rollout (the 2-layer, 128-wide estimator is bigger than our policy)", under))
    return claims


def objective_claims(per_seed: dict, objective: dict) -> list[dict]:
    """The article's estimator objective (asked of its own code) and its advice on a collapsed entropy."""
    contrastive = objective["article_margin_effect"] > 0 or objective["article_pair_effect"] > 1e-6
    found = (f"the article's train_step_estimator: its loss moves by {objective['article_margin_effect']:.3g} when "
             f"`margin` goes from 0.1 to 10, and by {objective['article_pair_effect']:.2g} of itself when two groups swap "
             "their failed rollouts (an MSE of each rollout's weights to its own min-max reward)")
    entropy = of(per_seed, "ss_grpo", "w_entropy")
    mean, low, high = common.mean_interval(entropy)
    collapsed = f"normalised entropy of w over a completion's steps {mean:.4f} [{low:.4f}, {high:.4f}] (1 = uniform)"
    # the advice acts on a margin term: where the loss never reads it (the article's code), raising it leaves the loss,
    # so the training, as it was and cannot help; where the loss reads it, whether raising it helps needs runs at two
    # margins (not made here)
    unread = objective["article_margin_effect"] == 0
    measured = ("raising the margin leaves the article's loss, so its training, the same: it cannot help (exact)" if unread
                else "not tested: the loss reads the margin, and whether raising it helps needs runs at two margins")
    groups = {label: sorted({DEFINITION_STEPS[s - 1] for rollout, _ in group for s in rollout})
              for label, group in DEFINITION_GROUPS.items()}
    share, weight = ({name: objective[f"article_definition_{k}[{name}]"] for name in DEFINITION_STEPS}
                     for k in ("share", "weight"))
    ordered = all(weight[a] > weight[b] for names in groups.values() for a in names for b in names
                  if share[a] > share[b])
    return [claim("SS-GRPO article, Checklist", "the estimator is trained with a contrastive loss (one that compares "
                  "a group's rollouts)", found + " (exact)", contrastive),
            claim("SS-GRPO article, Mechanics", "the estimator's objective, the article's definition: steps that "
                  "appear more often in a group's successful rollouts get higher weights",
                  "the article's train_step_estimator run to convergence on three groups with an estimator free to "
                  "fit any weight per step: per step, its share of appearances in right rollouts -> the weight "
                  "reached; " + "; ".join(f"{label}: " + ", ".join(f"{n} {share[n]:.2f} -> {weight[n]:.3f}" for n in names)
                                          for label, names in groups.items())
                  + " (exact: the loss's optimum is the mean normalised reward of the rollouts that hold the step, "
                  "each weighted by one over its number of steps, so where rollouts differ in length a step seen "
                  "more often in successes can weigh less)", ordered),
            claim("SS-GRPO article, Checklist", "if the entropy of the step weights collapses to uniform, increasing "
                  "the contrastive margin helps, read on the article's code (its train_step_estimator)",
                  f"{measured}; the {collapsed}; {found}", False if unread else None)]


def length_claims(per_seed: dict, objective: dict) -> list[dict]:
    """Does the mean-pooled step representation make w(s) independent of the step's length? Exact: the same
    step's tokens read TILES times over, w compared at float64, the same where the change stays below float32's
    rounding (the precision the runs compute w in). The article's estimator (its code, no positions) and this
    run's trained estimators (every seed; learned positions, the prompt in each row); Pearson's r of w with the
    step's tokens as context (it mixes length with content: longer steps may be worse ones)."""
    precision = float(torch.finfo(torch.float32).eps)
    statement = ("a mean-pooled, fixed-size step representation avoids dependence on the step's length: the same "
                 "step's tokens repeated k times get the same w(s)")
    tiles = " and ".join(str(k) for k in TILES)
    article = objective["article_tiled_change"]
    changes, r = of(per_seed, "ss_grpo", "w_tiled_change"), of(per_seed, "ss_grpo", "w_length_r")
    _, r_text = common.seed_verdict(r)
    return [claim("SS-GRPO article, Engineering decisions", f"{statement} (its estimator, as its code builds it)",
                  f"its StepValueEstimator at its own sizes, random weights, eval mode: the largest |w(step's tokens "
                  f"x{tiles}) - w(step)| {article:.2g} against float32's {precision:.2g} (exact: without positions, "
                  "attention over k copies of every key weighs each as one, so every copy's output and the mean are "
                  "the same)", bool(article < precision)),
            claim("SS-GRPO article, Engineering decisions (this chapter's estimator)", f"{statement} (this run's "
                  "trained estimators: learned positions, the prompt in each row)",
                  f"held-out steps, the prompt kept, the step's tokens x{tiles}: the largest |w change| per seed "
                  f"{' / '.join(f'{c:.3g}' for c in changes)} against float32's {precision:.2g} (exact); the "
                  f"representation's size is fixed (the estimator's width) whatever the length, but the encoder's "
                  f"outputs are not: a copy sits at other positions and weighs the prompt less; context, Pearson's r "
                  f"of w with the step's tokens {r_text} (mean [95% interval over {len(r)} seeds]; it mixes length "
                  "with content)", bool(changes.max() < precision) if np.isfinite(changes).all() else None)]


def evaluator_claim(per_seed: dict) -> dict:
    """Does SS-GRPO's credit read a per-step evaluation? Exact: its advantages with other gold step
    labels, against PRM-GRPO's (which must move, or the check cannot tell)."""
    ss, prm = of(per_seed, "ss_grpo", "step_label_effect"), of(per_seed, "prm_grpo", "step_label_effect")
    return claim("SS-GRPO article, Why it works", "SS-GRPO needs no per-step evaluation: its credit reads only the "
                 "outcome reward (one verifier call per rollout) and the steps' text",
                 f"on each seed's last update, judged against other problems' worked solutions (other step labels, the "
                 f"same rewards), the largest change of a token's advantage: SS-GRPO {ss.max():.3g}, PRM-GRPO (which "
                 f"checks every step) {prm.min():.3g} at least; verifier calls per rollout: SS-GRPO "
                 f"{np.mean(of(per_seed, 'ss_grpo', 'evaluator_calls')):.2f}, PRM-GRPO "
                 f"{np.mean(of(per_seed, 'prm_grpo', 'evaluator_calls')):.2f}",
                 None if prm.min() == 0 else bool(ss.max() == 0))


def check_claims(summary: dict, per_seed: dict, mc_rollouts: int, objective: dict) -> list[dict]:
    return (article_claims(article_numbers(summary), summary) + accuracy_claims(per_seed)
            + cost_claims(summary, per_seed, mc_rollouts) + summary_claims(per_seed, mc_rollouts) + slip_claims(per_seed) + step_credit_claims(per_seed)
            + step_size_claims(per_seed) + estimator_claims(per_seed, objective))


def per_seed_cell(value: float, runs: list[dict], key: str) -> str:
    """The mean over seeds and each seed's value: "0.455 (0.441 / 0.468)"."""
    return f"{value:.3f} (" + " / ".join(f"{r[key]:.3f}" for r in runs) + ")"


def credit_rows(summary: dict) -> list[tuple[str, dict, str]]:
    """The credit table's rows: (name, a method's means, the prefix of its credit metrics): each method, and
    PRM-GRPO's batches credited per step where its run logged them."""
    rows = [(NAMES[m], s, "") for m, s in summary.items()]
    if OWN_STEP + CREDIT_KEYS[0] in summary.get("prm_grpo", {}):
        rows.append((f"{NAMES['prm_grpo']}, per step", summary["prm_grpo"], OWN_STEP))
    return rows


def tables_of(summary: dict, per_seed: dict, before: float, args: ssg.Args, study: Args) -> dict:
    """The run's tables, printed and shown in the docs: held-out pass@1 (with the article's numbers),
    costs, seconds (they vary between identical runs), what the credit does, the step weights during
    training, and what w(s) learned (held-out probe)."""
    grpo, prm = summary.get("grpo"), summary.get("prm_grpo")
    prm_gain = prm["pass@1"] - grpo["pass@1"] if grpo and prm else math.nan
    article = {m: f"{a[0]}% / {a[1]} h / {a[2]:g}x" for m, a in ARTICLE.items()}
    late = "second half of training, as a share of GRPO's A_i on the same completion"
    rows = {
        "accuracy": [[NAMES[m], per_seed_cell(s["pass@1"], per_seed[m], "pass@1"), f"{100 * (s['pass@1'] - before):+.1f}",
                      (s["pass@1"] - grpo["pass@1"]) / prm_gain if prm_gain > 0 else "- (no PRM gain)",
                      article.get(m, "-")] for m, s in summary.items()],
        "cost": [[NAMES[m], s["inference_flops_vs_grpo"], s["train_flops_vs_grpo"], s["mc_prm_train_flops_vs_grpo"],
                  s["evaluator_calls"]] for m, s in summary.items()],
        "seconds": [[NAMES[m], s["train_wall_clock_s"], s["train_wall_clock_vs_grpo"], s["credit_wall_clock_share"]]
                    for m, s in summary.items()],
        "credit": [[name, *(s[prefix + k] for k in ("wrong_step_blame", "right_steps_blame", "flawed_right_share",
                                                     "flawed_step_credit", "flawed_right_steps_credit",
                                                     "advantage_scale", "negative_share"))]
                   for name, s, prefix in credit_rows(summary)],
        "weights": [[NAMES[m], s["w_right"], s["w_failed"], s["w_entropy"], s["right_target_zero"], s["padding_share"],
                     s["padding_share_max"]] for m, s in summary.items() if "w_right" in s],
        "probe": [[NAMES[m], *(per_seed_cell(s[k], per_seed[m], k) for k in PROBE_KEYS[:4]), s["chance_top1"]]
                  for m, s in summary.items() if "localisation_auroc" in s]}
    return {"accuracy": {"title": f"Held-out pass@1 ({args.eval_problems} problems x {args.final_samples} samples) after "
                                  f"{args.rl_steps} updates of {args.prompts}x{args.group_size}, mean of seeds "
                                  f"{study.seeds} (each seed); cold start {before:.3f}",
                         "header": ["method", "pass@1 (per seed)", "Δ points", "share of PRM gain",
                                    "article: acc. / hours / inference"], "rows": rows["accuracy"]},
            "cost": {"title": "Cost per rollout against GRPO's (FLOPs: 2 x params per token read, 6 x per token trained)",
                     "header": ["method", "inference FLOPs", "training FLOPs",
                                f"MC-labelled PRM (N = {study.mc_rollouts}): training FLOPs", "evaluator calls"],
                     "rows": rows["cost"]},
            "seconds": {"title": "Seconds (they vary between identical runs)",
                        "header": ["method", "train s", "train vs GRPO", "credit share of an update"],
                        "rows": rows["seconds"]},
            "credit": {"title": f"What the credit does ({late}; PRM-GRPO, per step: its batches credited by each "
                                "step's own normalised reward, not summed to go, a reading that trained nothing)",
                       "header": ["method", "blame 1st wrong step", "blame right steps before it",
                                  "right sol. with a wrong line", "credit on that flawed step", "credit its right steps",
                                  "push vs GRPO", "negative share of the advantages"], "rows": rows["credit"]},
            "weights": {"title": "The step weights during training (second half): w(s), its normalised entropy over a "
                                 "completion's steps (1 = uniform), the right completions trained toward w = 0, and the "
                                 "padding share of the article's loss layout (mean; worst completion of a batch)",
                        "header": ["method", "w right", "w failed", "w entropy", "right sol. with target 0",
                                   "padding", "padding, worst"], "rows": rows["weights"]},
            "probe": {"title": f"What w(s) learned: {study.probe_samples} held-out samples per problem from the trained "
                               "policy, mean of seeds (each seed)",
                      "header": ["method", "AUROC w: solution right", "AUROC w: step right (failed solutions)",
                                 "localisation AUROC", "localisation top-1", "top-1 by chance"], "rows": rows["probe"]}}


def report(tables: dict, claims: list[dict]) -> None:
    for table in tables.values():
        print(f"\n{table['title']}:\n" + format_table(table["rows"], table["header"]))
    print("\n" + format_claims(claims))


def comparison(args: ssg.Args, study: Args, initial, tokenizer, device) -> dict:
    """Every method over the seeds at the chapter's task: their runs, per-seed numbers and means,
    the cold start's pass@1 and the parameter counts."""
    held_out = args.task.held_out(args.eval_problems)
    before = ssg.held_out_pass(initial, tokenizer, held_out, args, device)
    print(f"cold start: held-out pass@1 {before['pass@1']:.3f}")
    runs = compare_methods(initial, tokenizer, args, study, held_out, device)
    per_seed, summary, sizes = summarise(initial, tokenizer, args, runs)
    return {"before": before, "runs": runs, "per_seed": per_seed, "summary": summary, "sizes": sizes}


def stored_claims(study: Args, stored: dict) -> list[dict]:
    """--reanalyse: the claims again from a results.json's per-seed numbers (the article's objective asked again)."""
    per_seed = stored["per_seed"]
    summary = {m: seed_means(numbers) for m, numbers in per_seed.items()}
    return check_claims(summary, per_seed, study.mc_rollouts, article_objective())


def main(study: Args) -> dict:
    if study.reanalyse:
        return {"claims": common.reanalyse(study, stored_claims)}
    start = time.time()
    study = common.apply_smoke(study)
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(study.chapter_args())
    print(f"07 study; policy {info['path']} ({'trained now' if info['trained_now'] else 'cached'}), device {device}")
    result = comparison(args, study, initial, tokenizer, device)
    summary, per_seed, runs = result["summary"], result["per_seed"], result["runs"]
    objective = article_objective()
    claims = check_claims(summary, per_seed, study.mc_rollouts, objective)
    plot_learning_curves(runs, out / "learning_curves.png")
    plot_step_weights(runs, out / "step_weights.png")
    plot_localisation(runs, out / "localisation.png")
    metrics = {"cold_start_pass@1": result["before"]["pass@1"], **result["sizes"], **article_numbers(summary), **objective}
    metrics.update({f"{m}_{k}": v for m, s in summary.items() for k, v in s.items()})
    metrics.update({f"{m}_seed{seed}_{k}": r[k] for m, rs in per_seed.items() for seed, r in zip(study.seeds, rs)
                    for k in ("pass@1", *PROBE_KEYS) if k in r})
    metrics["tables"] = tables_of(summary, per_seed, result["before"]["pass@1"], args, study)
    extra = {"cold_start": result["before"], "per_seed": per_seed, "runs": runs}
    wall = time.time() - start
    common.write_results(out, study, wall, metrics, claims, **extra)
    report(metrics["tables"], claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
