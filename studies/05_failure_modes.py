"""05 study — where GRPO falls down (the whole-game essay's §7 catalog, the modes that live on a
small LM): the KL weight on both sides, a poor reference and its resets, async staleness, a sparse
reward from a weak cold start, and train/serve skew and state blindness at serving time.

  KL, both sides   GRPO at each β of --betas beside the chapter's default β: the reward-KL
                   frontier, the training reward's rise, entropy and the quality of the samples
                   (distinct, well-formed) against the cold start's
  poor reference   GRPO anchored to a cold start that rarely writes the steps, at --poor-beta;
                   then the same with the reference reset to the current policy; held-out pass@1
                   and the share of each policy's samples that write the steps
  staleness        rollouts from the weights of k updates ago, π_old in the clipped ratio being
                   the policy that sampled (the importance ratio) or the current one (ignored)
  sparse reward    GRPO from a weak cold start against rejection sampling (best-of-N) into SFT,
                   then GRPO, at the same budget of completions; the problems the weak start
                   never solves, against what fresh draws of the same start solve by luck
  serving          the GRPO policy served with another prompt template, and with a fact missing

Five more parts run where --parts names them (the default, modes, is the list above):

  blame            the GRPO policy's groups on held-out prompts, whole and with the last operation
                   cut: of the completions right by what the prompt shows, the share that GRPO's
                   group advantage blames (A < 0), the verifier wanting the whole chain's answer
  curriculum       from a weak cold start (--curriculum-sft-steps of SFT: the fewest at which the
                   easy problems are easier for it while the normal mix stays sparse), GRPO whose
                   first --curriculum-share of the updates draw only --min-steps-operation problems,
                   then the normal mix, against GRPO on the normal mix throughout, at the same
                   number of completions; beside them §7.8's mitigations of group collapse:
                   adaptive difficulty (each update's number of operations one fewer after a batch
                   that passed less than half the time, one more after one that passed more) and
                   mixed groups first (1 + --mixed-rounds times the prompts drawn, the --prompts
                   groups with reward spread trained on first); a floor on the group's std is
                   checked exactly (no run)
  support          from the sparse-reward study's weak cold start, each estimator that differs in
                   its baseline only (REINFORCE's batch mean, RLOO, GRPO) at the same budget: of the
                   problems the weak start never solves, the share each solves beyond what fresh
                   draws of the weak start solve by luck (beside modes, its runs are reused)
  groups           from the same weak start, GRPO at twice the group size with half the prompts per
                   update against the chapter's G, the same completions: held-out pass@1 and the
                   share of groups without reward spread
  pressure         from the default cold start, GRPO (pressure on pass@1) against GRPO with the
                   pass@k advantage (--pass-k; Chen et al. 2025), the same completions: held-out
                   pass@1 and pass@16, and the share of distinct completions among a problem's

The loop is the chapter's `train` with what these modes need: rollouts from older weights, the
ratio against them, the drift between the two policies, reference resets, and the chapter's other
estimators in GRPO's place.

Every study runs at --seeds seeds (--seed, --seed + 1, ...: each its own prompts, samples and
evaluation draws; the cold starts are trained once and shared). Each claim takes one
quantity per seed, a difference paired by seed in the statement's direction, and decides on its
95% interval over the seeds (common.seed_verdict): yes where it lies above 0, no where it lies
below 0 (the seeds show the reverse), else inconclusive; a 'none'
statement (stuck, no gain, nothing solved beyond luck) holds where the interval stays below the
size of an effect that is there (the working setting's) and fails where it lies off 0. Tables
and metrics are means over the seeds; the figures draw every seed.

    python studies/05_failure_modes.py  # 3 seeds; writes runs/studies/05_failure_modes/ (the first
                                        # run also trains the two extra cold starts, about 100 s)
    python studies/05_failure_modes.py --reanalyse runs/studies/05_failure_modes/results.json
                                        # the claims again from the stored seeds, nothing trained
    python studies/05_failure_modes.py --parts blame,curriculum --out runs/studies/05_failure_modes_blame_curriculum
                                        # the blame and curriculum parts, 3 seeds: 1,197 s on 2 CPU cores (shared)
    python studies/05_failure_modes.py --parts support,groups --out runs/studies/05_failure_modes_support_groups
                                        # the support and groups parts, 3 seeds: 649 s on 2 CPU cores (shared)
    python studies/05_failure_modes.py --parts pressure --out runs/studies/05_failure_modes_pressure
                                        # the pressure part, 3 seeds: 515 s on 2 CPU cores (shared)

To fit three seeds in about the time one took, the default staleness study is one policy age (8);
the paper-scale version adds the oldest rollouts: --stale-lags 8,32 (two more runs a seed). The
default run (with β = 5 in the KL study) took 1,158 s on 2 CPU cores beside another heavy job
(the committed run, on a slower machine beside two other heavy jobs, 2,951 s); with a core to
itself a seed takes about 250 s (the one-seed study, two runs more, took 294 s), about 13 min for
the three.

Read beside: credit-assignment-is-the-whole-game.txt §1, §2, §7.1, §7.3, §7.5, §7.8, §7.9, §7.10, §8;
credit-assignment-over-long-generations.txt (the KL weight; When it falls down).
Figures: reward_kl.png (the β sweep), staleness.png (pass@1 and clip fraction with stale
rollouts), support_and_anchor.png (the weak start and its mitigation; the poor reference),
curriculum.png (--parts curriculum: the weak start's GRPO with and without easy problems first).
"""

import collections
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
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402

grpo = importlib.import_module("05_grpo_rloo")

SERVING_FORMAT = "Q: {prompt}A:\n"  # a prompt template the policy never saw in training
SERVED = ("as trained", "another template", "last operation missing")  # the skew study's prompts
PARTS = ("modes", "blame", "curriculum", "support", "groups", "pressure")  # what a run measures (--parts)
# The support part's estimators: the chapter's that differ in their baseline only (batch mean,
# leave-one-out, group mean and std; Dr. GRPO changes the loss's normaliser too)
SUPPORT_ESTIMATORS = ("reinforce", "rloo", "grpo")
SHOWN = ("whole prompt", "last operation missing")  # the blame study's prompts
# The curriculum's cold start, chosen by its premise alone (never by the curriculum's outcome): the
# smallest SFT budget of the ladder 60, 100, 150, 200, 300 at which (a) the start passes 1-step
# problems more often than the normal mix (the 95% interval of the difference over problems above
# 0, in two draws: 256 and 512 problems, 8 completions each, prompts outside the held-out set) and
# (b) the normal mix stays sparse (more than half of the groups of 8 without reward spread, the
# sparse-reward study's premise). Measured (pass rate 1-step vs mix, difference; mix zero-spread):
#   60   0.006 vs 0.007, -0.001 [-0.006, +0.004]; 0.95   (the sparse-reward study's start: (a) fails)
#   100  0.019 vs 0.014, +0.005 [-0.003, +0.014]; 0.90   second draw 0.016 vs 0.013, +0.003 [-0.003, +0.009]; 0.90
#   150  0.027 vs 0.025, +0.002 [-0.008, +0.012]; 0.81   second draw 0.031 vs 0.024, +0.007 [-0.001, +0.014]; 0.83
#   200  0.039 vs 0.026, +0.012 [+0.001, +0.023]; 0.82   second draw 0.038 vs 0.024, +0.014 [+0.006, +0.022]; 0.83
#   300  0.052 vs 0.030, +0.022 [+0.009, +0.035]; 0.81   second draw 0.049 vs 0.033, +0.016 [+0.007, +0.025]; 0.77
CURRICULUM_SFT_STEPS = 200
# §7.8's mitigations of group collapse, run beside the curriculum from its weak start
ADAPTIVE, MIXED = "GRPO, adaptive difficulty", "GRPO, mixed groups first"


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/05_failure_modes", "output folder for figures and results.json")
    reanalyse: str = common.reanalyse_arg()
    seeds: int = common.arg(3, "seeds, --seed, --seed + 1, ...: each draws its own prompts, samples and evaluations "
                            "(the cold starts are shared); the claims decide on their confidence interval over the seeds")
    betas: str = common.arg("0,0.5,5", "KL weights β beside the chapter's --beta (the KL study; the largest is "
                            "its 'too strong' side)", item=float, empty=True)
    poor_beta: float = common.arg(0.5, "β of the poor-reference study (beside it, the same β anchored to the "
                                  "cold start: the KL study's run where it has one)")
    stale_lags: str = common.arg("8", "the policy ages of the async-staleness study (8,32: the paper-scale "
                                 "version)", item=int)
    sparse_sft_steps: int = common.arg(60, "SFT steps of the weak cold start of the sparse-reward study (and of the "
                                       "support and groups parts)")
    curriculum_sft_steps: int = common.arg(CURRICULUM_SFT_STEPS, "SFT steps of the curriculum study's cold start "
                                           "(see CURRICULUM_SFT_STEPS for why this many)")
    rft_rounds: int = common.arg(2, "rounds of rejection sampling into SFT (best-of-N, then fine-tune)")
    rft_n: int = common.arg(32, "completions per problem in a rejection-sampling round, N")
    rft_sft_steps: int = common.arg(25, "fine-tuning steps on the kept completions, per round")
    rft_lr: float = common.arg(1e-3, "AdamW learning rate of the rejection-sampling fine-tune")
    poor_shortcut_prob: float = common.arg(0.9, "share of bare-answer demonstrations in the poor reference's "
                                                "SFT (the default cold start has --shortcut-prob)")
    parts: str = common.arg("modes", "what to run, comma-separated: modes (the failure modes above), blame (GRPO's "
                            "blame with the last operation cut), curriculum (easy problems first, weak start), "
                            "support (each estimator on the weak start's unsolved problems), groups (GRPO at twice "
                            "the group size, weak start)", PARTS, item=str)
    blame_problems: int = common.arg(512, "held-out problems the blame study puts to the GRPO policy, a group of "
                                     "--group-size completions each, whole and with the last operation cut")
    curriculum_share: float = common.arg(0.5, "share of the curriculum arm's updates, the first ones, that draw "
                                         "only the easiest problems (--min-steps operations)")
    mixed_rounds: int = common.arg(3, "the mixed-groups arm's extra draws of --prompts problems per update (it "
                                   "trains on the groups with reward spread first)")
    pass_k: int = common.arg(4, "k of the pressure part's pass@k arm, below the chapter's group size (at k = G a "
                             "group's pass@k is 0 or 1: no gradient)")

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, betas="0", sparse_sft_steps=2, curriculum_sft_steps=2, rft_rounds=1,
                 rft_n=2, rft_sft_steps=1, seeds=2, blame_problems=4, pass_k=1)

    def __post_init__(self):
        super().__post_init__()
        common.require(self.seeds >= 2, "--seeds must be at least 2: the claims decide on an interval over seeds")
        common.require_positive(self, "sparse_sft_steps", "curriculum_sft_steps", "rft_rounds", "rft_n",
                                "rft_sft_steps", "rft_lr", "mixed_rounds")
        common.require(0 <= self.poor_shortcut_prob <= 1, "--poor-shortcut-prob must be in [0, 1]")
        common.require(all(lag > 0 for lag in self.lag_list), "--stale-lags must be positive")
        common.require(all(b >= 0 for b in self.beta_list), "--betas must be non-negative")
        common.require(self.poor_beta >= 0, "--poor-beta must be non-negative")
        common.require(0 < self.blame_problems <= lm_world.HELD_OUT_SIZE,
                       f"--blame-problems must be in 1..{lm_world.HELD_OUT_SIZE} (the held-out set's size)")
        common.require(0 < self.curriculum_share < 1, "--curriculum-share must be in (0, 1): a curriculum starts "
                       "easy and ends on the normal mix")
        common.require(1 <= self.pass_k < grpo.Args.group_size, f"--pass-k must be in 1..{grpo.Args.group_size - 1} "
                       "(below the chapter's group size)")

    @property
    def beta_list(self) -> list[float]:
        return common.as_list(self.betas, float)

    @property
    def lag_list(self) -> list[int]:
        return common.as_list(self.stale_lags, int)

    @property
    def part_list(self) -> list[str]:
        return common.as_list(self.parts, str)


# ============================================================================================
# The chapter's loop, with stale rollouts and reference resets
# ============================================================================================
@dataclass(frozen=True)
class Setting:
    """How a run departs from the chapter's loop: rollouts from the weights of `lag` updates ago,
    π_old in the ratio being the policy that sampled ('importance') or the current one ('ignore',
    as if on-policy); the KL reference reset to the current policy every `ref_reset` updates (0:
    never); the first `easy_updates` updates drawing only the easiest problems, of --min-steps
    operations (a curriculum; 0: none); `adaptive` difficulty (`next_difficulty`); `mixed_rounds` more
    draws of --prompts problems per update, the groups with reward spread trained on first
    (`mixed_first`); the chapter's advantage estimator `method` (one of its ESTIMATORS), or, where
    `pass_k` is set, the pass@k advantage (`pass_k_advantages`). The default is the chapter's loop
    for GRPO."""
    lag: int = 0
    ratio: str = "importance"
    ref_reset: int = 0
    easy_updates: int = 0
    method: str = "grpo"
    adaptive: bool = False
    mixed_rounds: int = 0
    pass_k: int = 0

    @property
    def label(self) -> str:
        name = grpo.NAMES[self.method]
        if self.easy_updates:
            return f"{name}, {self.easy_updates} easy first"
        if self.adaptive:
            return f"{name}, adaptive difficulty"
        if self.mixed_rounds:
            return f"{name}, mixed groups first"
        if self.pass_k:
            return f"{name}, pass@{self.pass_k} advantages"
        return f"{name} age {self.lag} ({self.ratio})" if self.lag else name


class RolloutWorker:
    """Who samples: the policy itself (lag 0, on-policy), or an asynchronous worker that runs the
    weights of `lag` updates ago (in the first updates, the oldest weights there are)."""

    def __init__(self, policy, lag: int):
        self.policy, self.lag = policy, lag
        self.actor = copy.deepcopy(policy) if lag else policy
        self.weights = collections.deque([self.snapshot()], maxlen=lag + 1) if lag else None

    def snapshot(self) -> dict:
        return {name: value.detach().clone() for name, value in self.policy.state_dict().items()}

    def model(self):
        if self.lag:
            self.actor.load_state_dict(self.weights[0])
        return self.actor

    def age(self) -> int:
        """Updates between the weights that sample now and the policy's."""
        return len(self.weights) - 1 if self.lag else 0

    def updated(self) -> None:
        """Call after each optimiser step: the worker receives the new weights `lag` updates late."""
        if self.lag:
            self.weights.append(self.snapshot())


@torch.no_grad()
def policy_drift(policy, completions: lm_world.Completions) -> float:
    """Mean |log π_θ(y_t) - log π_old(y_t)| over the completion tokens: how far the policy has moved
    from the one that sampled them (0 on-policy)."""
    now, _ = lm_world.token_logprobs(policy, completions.sequences, completions.attention_mask,
                                   completions.prompt_length)
    mask = completions.completion_mask
    return float(torch.where(mask, (now - completions.logprobs).abs(), 0.0).sum() / mask.sum().clamp(min=1))


def stale_step(policy, optimizer: torch.optim.Optimizer, completions: lm_world.Completions, advantages: torch.Tensor,
               ref_logp: torch.Tensor, args: grpo.Args, behaviour_logp: torch.Tensor | None) -> dict:
    """The chapter's `policy_gradient_step`, but π_old in ρ = π_θ / π_old is the policy that sampled
    when `behaviour_logp` gives its log-probs (stale rollouts: ρ is the importance ratio from the
    first iteration on, and the clip can act at once); None is the chapter's step."""
    mask = completions.completion_mask
    batch = (completions.sequences, completions.attention_mask, completions.prompt_length)
    stats = {"loss": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0}
    for iteration in range(args.inner_iters):
        logp, entropy = lm_world.token_logprobs(policy, *batch, with_entropy=iteration == 0)
        if iteration == 0:
            old_logp = logp.detach() if behaviour_logp is None else behaviour_logp
            tokens = mask.sum().clamp(min=1)
            stats["kl"] = float(torch.where(mask, grpo.kl_k3(old_logp, ref_logp), 0.0).sum() / tokens)
            stats["entropy"] = float(torch.where(mask, entropy.detach(), 0.0).sum() / tokens)
        per_token, clip_active = grpo.clipped_surrogate(logp, old_logp, advantages, args.clip_eps)
        if args.beta > 0:
            per_token = per_token + args.beta * grpo.kl_k3(logp, ref_logp)
        loss = grpo.masked_loss(per_token, mask, args.loss_norm, args.max_new_tokens)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
        optimizer.step()
        stats["loss"] += loss.item() / args.inner_iters
        stats["clip_fraction"] += float((clip_active & mask).sum() / tokens) / args.inner_iters
        stats["grad_norm"] += grad_norm.item() / args.inner_iters
    return stats


def next_difficulty(operations: int, rewards: torch.Tensor, rl: grpo.Args) -> int:
    """Adaptive difficulty: the next update's number of operations, one fewer after a batch that
    passed less than half the time, one more after one that passed more (a 0/1 group's spread is
    largest at a pass rate of 1/2), within --min-steps..--max-steps."""
    move = int(np.sign(rewards.mean().item() - 0.5))
    return min(max(operations + move, rl.min_steps), rl.max_steps)


def mixed_first(rewards: torch.Tensor, keep: int) -> torch.Tensor:
    """The `keep` groups an update trains on, of all it drew: those with reward spread first (in the
    order drawn), then the rest ("ensure mixed outcomes in groups when possible")."""
    return torch.argsort(grpo.zero_spread(rewards).int(), stable=True)[:keep]


def pass_k_advantages(rewards: torch.Tensor, k: int, eps: float = 1e-4) -> torch.Tensor:
    """(N·G,) the advantage of each completion under pressure on pass@k instead of pass@1, for 0/1
    rewards (N, G): a k-subset of the group scores the best of its rewards, and a completion gets
    the mean z-score of the k-subsets that hold it (Chen et al. 2025, "Pass@k Training"). With c
    right of G: the group's pass@k is ρ = 1 - C(G-c, k)/C(G, k); every subset holding a right
    completion scores 1, so A+ = (1 - ρ)/σ; a wrong one's subsets score 0 only where its k - 1
    companions are all wrong, so A- = (1 - ρ - C(G-c-1, k-1)/C(G-1, k-1))/σ; σ = sqrt(ρ(1 - ρ)),
    and ε keeps a group whose pass@k is 0 or 1 at A = 0, as GRPO's. At k = 1 it is GRPO's
    z-score with the std over G."""
    G = rewards.shape[1]
    right = rewards.sum(1).round().long().tolist()  # one sync per update
    rho = torch.tensor([1 - math.comb(G - c, k) / math.comb(G, k) for c in right], device=rewards.device)
    alone = torch.tensor([math.comb(G - c - 1, k - 1) / math.comb(G - 1, k - 1) if c < G else 0.0 for c in right],
                         device=rewards.device)  # the chance a wrong completion's companions are all wrong
    sigma = (rho * (1 - rho)).sqrt() + eps
    positive, negative = (1 - rho) / sigma, (1 - rho - alone) / sigma
    return torch.where(rewards > 0, positive[:, None], negative[:, None]).flatten()


def group_rows(completions: lm_world.Completions, groups: torch.Tensor, group_size: int) -> lm_world.Completions:
    """The completions of `groups` (rows are grouped by problem, G to a group)."""
    rows = (groups[:, None] * group_size + torch.arange(group_size, device=groups.device)).flatten()
    return dataclasses.replace(completions, **{f.name: getattr(completions, f.name)[rows]
                                               for f in dataclasses.fields(completions) if f.name != "prompt_length"})


def train(policy, reference, tokenizer, rl: grpo.Args, held_out: list, device, setting: Setting = Setting()) -> dict:
    """The chapter's `train` for `setting.method` (GRPO by default), with `setting`'s stale rollouts
    (`RolloutWorker`) and reference resets. Each update's record adds the age of the weights that
    sampled and the policy's drift from them."""
    rng = np.random.default_rng(rl.seed)
    generator = torch.Generator(device).manual_seed(rl.seed)
    eval_generator = torch.Generator(device).manual_seed(rl.seed + 1)
    optimizer, schedule = grpo.make_optimizer(policy, rl)
    step_args = dataclasses.replace(rl, loss_norm=grpo.loss_norm_of(setting.method, rl))  # as the chapter's loop
    worker = RolloutWorker(policy, setting.lag)
    exclude = frozenset(p.prompt for p in rl.task.held_out())
    history, evals = [], []
    operations = rl.max_steps  # adaptive difficulty starts at the hardest problems and finds its level

    def held_out_eval(step: int) -> None:
        result = lm_world.evaluate(policy, tokenizer, held_out, rl.eval_samples, rl.max_new_tokens, eval_generator,
                                 device)
        evals.append({"step": step, "samples": step * rl.prompts * (1 + setting.mixed_rounds) * rl.group_size,
                      "pass@1": result["pass@1"], "length": result["length"]})

    for step in tqdm(range(rl.rl_steps), desc=setting.label, leave=False):
        if step % rl.eval_every == 0:
            held_out_eval(step)
        if setting.ref_reset and step and step % setting.ref_reset == 0:
            reference = lm_world.frozen_copy(policy)  # re-anchor: the KL now measures the drift since this update
        easy = step < setting.easy_updates  # the curriculum's first updates: the fewest operations only
        steps = rl.min_steps if easy else operations if setting.adaptive else None
        drawn = rl.prompts * (1 + setting.mixed_rounds)
        problems = rl.task.sample(drawn, rng, steps=steps, exclude=exclude)
        completions, rewards = grpo.sample_groups(worker.model(), tokenizer, problems, rl, generator, device)
        if setting.mixed_rounds:
            kept = mixed_first(rewards, rl.prompts)
            completions, rewards = group_rows(completions, kept, rl.group_size), rewards[kept]
        if setting.adaptive:
            operations = next_difficulty(operations, rewards, rl)
        age = worker.age()
        mask = completions.completion_mask
        advantages = (pass_k_advantages(rewards, setting.pass_k)[:, None] * mask if setting.pass_k
                      else grpo.token_advantages(rewards, setting.method, mask))
        ref_logp = grpo.reference_logprobs(reference, completions)
        # stale rollouts: the ratio's π_old is the policy that sampled, or (ignored) the current one
        behaviour = completions.logprobs if setting.lag and setting.ratio == "importance" else None
        drift = policy_drift(policy, completions) if setting.lag else 0.0
        stats = stale_step(policy, optimizer, completions, advantages, ref_logp, step_args, behaviour)
        schedule.step()
        worker.updated()
        history.append(grpo.batch_record(completions, rewards) | {
            "policy_age": age, "policy_drift": drift, "sampled": drawn * rl.group_size, "operations": steps or 0} | stats)
    held_out_eval(rl.rl_steps)
    return {"history": history, "evals": evals}


def run_grpo(initial, tokenizer, rl: grpo.Args, held_out: list, device, setting: Setting = Setting(),
             reference=None) -> dict:
    """The chapter's `run_method` for GRPO through this loop; the KL reference is the cold start
    itself unless `reference` is given."""
    policy = copy.deepcopy(initial)
    start = time.time()
    result = train(policy, lm_world.frozen_copy(initial if reference is None else reference), tokenizer, rl, held_out,
                   device, setting)
    result["wall_clock_s"] = time.time() - start
    result["final"] = grpo.final_evaluation(policy, tokenizer, rl, held_out, device)
    last = result["history"][-max(1, len(result["history"]) // 10):]
    result["final_kl"] = float(np.mean([h["kl"] for h in last]))
    result["policy"] = policy
    print(f"  {setting.label:24s} β={rl.beta:<5g} held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> "
          f"{result['final']['pass@1']:.3f}, KL {result['final_kl']:.3f}, {result['wall_clock_s']:.0f} s")
    return result


def worst_regression(run: dict) -> float:
    """The largest drop of held-out pass@1 below its best so far, over training."""
    curve = np.array([e["pass@1"] for e in run["evals"]])
    return float((np.maximum.accumulate(curve) - curve).max())


def history_mean(run: dict, key: str) -> float:
    """The mean of a history entry over all of training."""
    return float(np.mean([h[key] for h in run["history"]]))


def reward_rise(run: dict) -> float:
    """The training reward (the verifier's pass rate on the training batches) over the last tenth
    of the updates minus over the first tenth: how far RL pushed the reward it optimises."""
    rewards = [h["reward"] for h in run["history"]]
    tenth = max(1, len(rewards) // 10)
    return float(np.mean(rewards[-tenth:]) - np.mean(rewards[:tenth]))


# ============================================================================================
# The studies
# ============================================================================================
def beta_sweep(initial, tokenizer, rl: grpo.Args, args: Args, held_out: list, device, on_policy: dict) -> dict:
    """GRPO at each β of --betas, beside the default-β run `on_policy`."""
    sweep = {rl.beta: on_policy}
    for beta in args.beta_list:
        if beta not in sweep:
            sweep[beta] = run_grpo(initial, tokenizer, dataclasses.replace(rl, beta=beta), held_out, device)
    return sweep


def sample_quality(policy, tokenizer, rl: grpo.Args, problems: list, device) -> dict:
    """What a KL weight does to the samples: the share of distinct completions among the
    `final_samples` of each problem, the share of well-formed ones, and the share that write at
    least one step before the answer."""
    repeated = [p for p in problems for _ in range(rl.final_samples)]
    _, texts = lm_world.sample(policy, tokenizer, [p.prompt for p in repeated], rl.max_new_tokens,
                             torch.Generator(device).manual_seed(rl.seed + 19), device)
    return {**lm_world.sample_shape(texts, rl.final_samples), "writes_steps": float(np.mean(["\n" in t for t in texts]))}


def kl_study(tokenizer, rl: grpo.Args, held_out: list, device, sweep: dict) -> dict:
    """KL mis-tune, both sides: each β of the sweep, its KL, pass@1 and pass@k, entropy (second
    half of training) and `sample_quality`."""
    k = rl.final_samples
    return {beta: {"kl": run["final_kl"], "pass@1": run["final"]["pass@1"], f"pass@{k}": run["final"][f"pass@{k}"],
                   "entropy": grpo.late_mean(run, "entropy"),
                   **sample_quality(run["policy"], tokenizer, rl, held_out[:64], device)}
            for beta, run in sorted(sweep.items())}


def staleness_study(initial, tokenizer, rl: grpo.Args, args: Args, held_out: list, device, on_policy: dict) -> dict:
    """Async staleness: GRPO with rollouts `lag` updates old, π_old in the ratio being the policy
    that sampled (the clipped importance ratio) or the current one (staleness ignored), beside
    the on-policy run."""
    study = {"on-policy": on_policy}
    for lag in args.lag_list:
        for ratio in ("ignore", "importance"):
            study[f"age {lag}, {ratio}"] = run_grpo(initial, tokenizer, rl, held_out, device, Setting(lag, ratio))
    return study


def skew_study(policy, tokenizer, rl: grpo.Args, held_out: list, device) -> dict:
    """Memory / state mismatch at serving time: the GRPO policy evaluated with the prompt built
    as in training, by another template, and with a fact missing (the last operation dropped
    from the prompt; the verifier still wants the full chain's answer): pass@1 and the share of
    well-formed completions, each way."""
    served = (held_out, [dataclasses.replace(p, prompt_format=SERVING_FORMAT) for p in held_out],
              # a prompt_format without {prompt} is the prompt itself: here the question minus its last step
              [dataclasses.replace(p, prompt_format=lm_world.ChainProblem(p.start, p.ops[:-1]).question)
               for p in held_out])
    evaluations = {name: grpo.final_evaluation(policy, tokenizer, rl, problems, device)
                   for name, problems in zip(SERVED, served)}
    return {name: {key: found[key] for key in ("pass@1", "well_formed")} for name, found in evaluations.items()}


def rejection_sampling_sft(policy, tokenizer, args: Args, samples: int, device) -> list[dict]:
    """Best-of-N into SFT, in place: each of --rft-rounds rounds samples --rft-n completions of
    fresh training problems, adds those the verifier passes to a buffer of wins, and fine-tunes
    the policy on the buffer (cross-entropy on the completion, prompt masked). Spends `samples`
    completions in all. Returns per round: completions sampled, wins kept (distinct), the share
    of its problems solved, and the buffer's size."""
    rng = np.random.default_rng(args.seed + 23)
    generator = torch.Generator(device).manual_seed(args.seed + 23)
    exclude = frozenset(p.prompt for p in args.task.held_out())
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.rft_lr, weight_decay=0.0)
    wins, rounds = [], []
    for _ in range(args.rft_rounds):
        problems = args.task.sample(max(1, samples // (args.rft_rounds * args.rft_n)), rng, exclude=exclude)
        repeated = [p for p in problems for _ in range(args.rft_n)]
        _, texts = lm_world.sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens, generator,
                                 device)
        kept = sorted({(p.prompt, t) for p, t in zip(repeated, texts) if lm_world.verify(p, t)})
        wins += kept
        rounds.append({"sampled": len(texts), "kept": len(kept), "buffer": len(wins),
                       "solved": len({prompt for prompt, _ in kept}) / len(problems)})
        for _ in range(args.rft_sft_steps if wins else 0):
            batch = [wins[i] for i in rng.integers(len(wins), size=args.sft_batch)]
            loss = lm_world.target_nll(policy, *lm_world.text_batch(tokenizer, *zip(*batch), device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return rounds


def unsolved(evaluation: dict) -> float:
    """The share of held-out problems none of whose samples was right."""
    return float(np.mean([c == 0 for c in evaluation["correct"]]))


def still_unsolved(before: dict, after: dict) -> float:
    """Of the held-out problems with no right sample before, the share with none after."""
    never = [a == 0 for b, a in zip(before["correct"], after["correct"]) if b == 0]
    return float(np.mean(never)) if never else math.nan


def two_draws(policy, tokenizer, rl: grpo.Args, held_out: list, device) -> tuple[dict, dict]:
    """`grpo.final_evaluation` (the draws every policy is evaluated with), then the same measures on
    the generator's next draws: the second is what luck alone changes."""
    generator = torch.Generator(device).manual_seed(rl.seed + 2)
    return tuple(lm_world.evaluate(policy, tokenizer, held_out, rl.final_samples, rl.max_new_tokens, generator, device,
                                   ks=rl.ks) for _ in range(2))


def weak_start(args: Args, device):
    """The weak cold start (--sparse-sft-steps of SFT), trained once and cached."""
    weak, _, _ = lm_world.cold_start_policy(dataclasses.replace(args.cold_start, sft_steps=args.sparse_sft_steps),
                                          device, args.cache, progress=False)
    return weak


def sparse_reward_study(tokenizer, rl: grpo.Args, args: Args, held_out: list, device, on_policy: dict) -> dict:
    """Sparse terminal reward: a weak cold start (--sparse-sft-steps of SFT) that rarely succeeds,
    evaluated twice (fresh draws: what luck solves). GRPO from it, against the mitigation at the
    same budget of completions: rejection sampling into SFT with half of them, then GRPO for half
    the updates. Beside them, GRPO from the default cold start (`on_policy`, evaluation only)."""
    weak = weak_start(args, device)
    budget = rl.rl_steps * rl.prompts * rl.group_size
    first, again = two_draws(weak, tokenizer, rl, held_out, device)
    study = {"weak cold start": {"final": first}, "weak cold start, resampled": {"final": again}}
    study["GRPO"] = run_grpo(weak, tokenizer, rl, held_out, device)
    rft = copy.deepcopy(weak)
    rounds = rejection_sampling_sft(rft, tokenizer, args, budget // 2, device)
    study["rejection sampling"] = {"final": grpo.final_evaluation(rft, tokenizer, rl, held_out, device),
                                   "rounds": rounds}
    half = dataclasses.replace(rl, rl_steps=max(1, rl.rl_steps // 2))
    study["rejection sampling, then GRPO"] = run_grpo(rft, tokenizer, half, held_out, device)
    study["GRPO from the default cold start"] = {"final": on_policy["final"]}
    return study


def poor_reference_study(initial, tokenizer, rl: grpo.Args, args: Args, held_out: list, device, sweep: dict) -> dict:
    """KL anchoring with a poor reference: GRPO from the cold start, but anchored to an SFT model
    that rarely writes the steps (--poor-shortcut-prob of bare answers), at --poor-beta; then the
    same with the reference reset to the current policy every --eval-every updates.
    Beside them, GRPO at that β anchored to the cold start itself (the sweep's run, if it has one). Each with
    `sample_quality` (does it write the steps that pay?)."""
    poor, _, _ = lm_world.cold_start_policy(dataclasses.replace(args.cold_start, shortcut_prob=args.poor_shortcut_prob),
                                          device, args.cache, progress=False)
    strong = dataclasses.replace(rl, beta=args.poor_beta)
    study = {"poor reference itself": {"final": grpo.final_evaluation(poor, tokenizer, rl, held_out, device),
                                       **sample_quality(poor, tokenizer, rl, held_out[:64], device)}}
    anchored = sweep.get(strong.beta) or run_grpo(initial, tokenizer, strong, held_out, device)
    study["cold start as reference"] = dict(anchored)  # a copy: the quality below is this study's
    for name, setting in {"poor reference": Setting(), "poor reference, reset": Setting(ref_reset=rl.eval_every)}.items():
        study[name] = run_grpo(initial, tokenizer, strong, held_out, device, setting, reference=poor)
    for run in study.values():
        if "policy" in run and "writes_steps" not in run:
            run.update(sample_quality(run["policy"], tokenizer, rl, held_out[:64], device))
    return study


def blame_shares(rewards: torch.Tensor, right_given_prompt: torch.Tensor) -> dict:
    """Where GRPO's blame lands in a batch of groups: `rewards` (N, G) from the verifier,
    `right_given_prompt` (N, G) true where a completion's answer is the value of the chain its
    prompt shows. Blamed: a negative group advantage, A_i < 0 (r_i below its group's mean), on
    every one of its tokens. Returns the verifier's mean reward, the share right given the prompt,
    the share of those blamed, the share blamed of those wrong given the prompt that the verifier
    fails too, the share of all blame on completions right given the prompt, and the share of
    zero-spread groups (NaN where a share has no completion to count)."""
    blamed = grpo.group_advantages(rewards, "grpo") < 0
    right, failed = right_given_prompt.bool(), rewards == 0

    def share(of: torch.Tensor, among: torch.Tensor) -> float:
        return float(of[among].float().mean()) if among.any() else math.nan
    return {"reward": float(rewards.mean()), "right": float(right.float().mean()),
            "blamed_right": share(blamed, right), "blamed_wrong": share(blamed, ~right & failed),
            "blame_on_right": share(right, blamed), "zero_spread": float(grpo.zero_spread(rewards).float().mean())}


def blame_study(policy, tokenizer, rl: grpo.Args, problems: list, device) -> dict:
    """State blindness in the credit (whole-game §1): a group of --group-size completions of each
    problem from `policy`, its prompt whole or with the last operation cut (the skew study's
    prompt); the verifier scores the whole chain's answer either way, what the prompt shows
    decides which completions did right by it. `blame_shares` of each (the same draws for both)."""
    study = {}
    for name in SHOWN:
        shown = [p if name == "whole prompt" else lm_world.ChainProblem(p.start, p.ops[:-1]) for p in problems]
        # the prompt shows `shown`, the verifier still wants the whole chain's answer
        served = [dataclasses.replace(p, prompt_format=s.question) for p, s in zip(problems, shown)]
        completions, rewards = grpo.sample_groups(policy, tokenizer, served, rl,
                                                  torch.Generator(device).manual_seed(rl.seed + 29), device)
        texts = lm_world.completion_texts(tokenizer, completions)
        repeated = [s for s in shown for _ in range(rl.group_size)]
        right = lm_world.verifier_rewards(repeated, texts, completions.truncated).view_as(rewards)
        study[name] = blame_shares(rewards.cpu(), right)
    return study


def easy_updates(rl: grpo.Args, args: Args) -> int:
    """The curriculum arm's first updates, those on the easiest problems (at least one)."""
    return max(1, round(args.curriculum_share * rl.rl_steps))


def curriculum_study(tokenizer, rl: grpo.Args, args: Args, held_out: list, device) -> dict:
    """Sparse reward's mitigation by a curriculum (whole-game §7.3): from a weak cold start
    (--curriculum-sft-steps of SFT: easy problems easier for it, the mix still sparse), GRPO on the
    normal mix, against GRPO whose first --curriculum-share of the updates draw only problems of
    --min-steps operations, then the normal mix: the same updates, prompts and group size, so the
    same number of completions, and the same reference (the weak start). Beside them, §7.8's
    mitigations of group collapse: adaptive difficulty (the same completions) and mixed groups
    first (the same updates, (1 + --mixed-rounds) times the completions drawn)."""
    weak, _, _ = lm_world.cold_start_policy(dataclasses.replace(args.cold_start, sft_steps=args.curriculum_sft_steps),
                                          device, args.cache, progress=False)
    easy = easy_updates(rl, args)
    return {"weak cold start": {"final": grpo.final_evaluation(weak, tokenizer, rl, held_out, device)},
            "GRPO": run_grpo(weak, tokenizer, rl, held_out, device),
            "easy first, then GRPO": run_grpo(weak, tokenizer, rl, held_out, device, Setting(easy_updates=easy)),
            ADAPTIVE: run_grpo(weak, tokenizer, rl, held_out, device, Setting(adaptive=True)),
            MIXED: run_grpo(weak, tokenizer, rl, held_out, device, Setting(mixed_rounds=args.mixed_rounds))}


def support_study(weak, tokenizer, rl: grpo.Args, held_out: list, device, known: dict) -> dict:
    """No estimator fixes a support problem (whole-game §8): from the weak cold start, each of
    SUPPORT_ESTIMATORS for the same updates, prompts and group size; beside them the weak start's
    two draws (the second: what luck solves) and GRPO from the default cold start (what solving
    beyond luck looks like where the support is there, evaluation only). `known`: the runs of
    these already made, by name (the sparse-reward study's, where it ran), not made again."""
    if "weak cold start" in known:
        draws = (known["weak cold start"]["final"], known["weak cold start, resampled"]["final"])
    else:
        draws = two_draws(weak, tokenizer, rl, held_out, device)
    study = {"weak cold start": {"final": draws[0]}, "weak cold start, resampled": {"final": draws[1]}}
    for method in SUPPORT_ESTIMATORS:
        name = grpo.NAMES[method]
        study[name] = known.get(name) or run_grpo(weak, tokenizer, rl, held_out, device, Setting(method=method))
    study["GRPO from the default cold start"] = {"final": known["GRPO from the default cold start"]["final"]}
    return study


def pressure_arm(args: Args) -> str:
    """The pressure part's pass@k arm by its k."""
    return f"GRPO, pass@{args.pass_k} advantages"


def pressure_study(initial, tokenizer, rl: grpo.Args, args: Args, held_out: list, device, on_policy: dict) -> dict:
    """Pressure on pass@1 against pass@k (whole-game §8): from the default cold start, GRPO
    (`on_policy`, already run) and GRPO with the pass@k advantage (`pass_k_advantages`), the same
    updates, prompts and completions; each final policy's held-out pass@k and the shape of its
    samples (`sample_quality`: distinct completions among a problem's)."""
    study = {"GRPO (pass@1)": on_policy,
             pressure_arm(args): run_grpo(initial, tokenizer, rl, held_out, device, Setting(pass_k=args.pass_k))}
    for run in study.values():
        run["quality"] = sample_quality(run["policy"], tokenizer, rl, held_out[:64], device)
    return study


def larger_groups(rl: grpo.Args) -> grpo.Args:
    """The groups part's other arm: twice the group size, half the prompts, the same completions."""
    return dataclasses.replace(rl, prompts=rl.prompts // 2, group_size=2 * rl.group_size)


def group_arm(rl: grpo.Args) -> str:
    """A run of the groups part by its batch's shape."""
    return f"G = {rl.group_size}, {rl.prompts} prompts"


def groups_study(weak, tokenizer, rl: grpo.Args, held_out: list, device, default: dict) -> dict:
    """Larger groups against a sparse reward (whole-game §7.3, §7.8): from the weak cold start,
    GRPO at the chapter's group size (`default`, already run) and at twice it with half the prompts
    per update: the same updates and completions, the same reference (the weak start)."""
    larger = larger_groups(rl)
    return {group_arm(rl): default, group_arm(larger): run_grpo(weak, tokenizer, larger, held_out, device)}


# ============================================================================================
# Figures: every seed drawn, one colour per run
# ============================================================================================
def seed_lines(ax, studies: list[dict], xy, style: str = "o-") -> None:
    """Each run of a study in its own colour, one line per seed (labelled once); xy(name, run)
    gives its (x, y), or None to leave it out."""
    for colour, name in enumerate(studies[0]):
        for seed, study in enumerate(studies):
            points = xy(name, study[name])
            if points is not None:
                ax.plot(*points, style, color=f"C{colour}", alpha=0.8, label=None if seed else name)


def curve(run: dict, offset: int = 0) -> tuple[list, list] | None:
    """Held-out pass@1 against completions sampled (None: a policy that was not trained here)."""
    if "evals" not in run:
        return None
    return [offset + e["samples"] for e in run["evals"]], [e["pass@1"] for e in run["evals"]]


def plot_frontier(runs: list[dict], before: float, path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4.5))
    sweeps = [{f"β={beta:g}": run for beta, run in sorted(seed["beta_sweep"].items())} for seed in runs]
    seed_lines(ax, sweeps, lambda name, run: ([run["final_kl"]], [run["final"]["pass@1"]]), "o")
    ax.axhline(before, color="gray", linestyle="--", label="cold start (mean of seeds)")
    ax.set(xlabel="KL to the reference (k3, per token, last 10% of updates)", ylabel="held-out pass@1",
           title=f"GRPO: reward vs KL ({len(runs)} seeds)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def plot_staleness(runs: list[dict], path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    stale = [seed["staleness"] for seed in runs]
    seed_lines(axes[0], stale, lambda name, run: curve(run))
    seed_lines(axes[1], stale, lambda name, run: (
        range(len(run["history"])), common.moving_average([h["clip_fraction"] for h in run["history"]], 5)), "-")
    axes[0].set(xlabel="completions sampled", ylabel="held-out pass@1", title="GRPO with stale rollouts")
    axes[1].set(xlabel="update", ylabel="clip fraction (trailing mean of 5)", title="where the clip acts")
    for ax in axes:
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def plot_support_and_anchor(runs: list[dict], budget: int, path) -> None:
    """Held-out pass@1 against completions sampled: the weak start's GRPO against rejection
    sampling then GRPO (drawn from where its sampling budget ends); GRPO from the poor reference."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    offsets = {"rejection sampling, then GRPO": budget // 2}
    for ax, study in zip(axes, ("sparse_reward", "poor_reference")):
        seed_lines(ax, [seed[study] for seed in runs], lambda name, run: curve(run, offsets.get(name, 0)))
        ax.set(xlabel="completions sampled", ylabel="held-out pass@1")
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
    axes[0].set_title("Sparse reward: a weak cold start")
    axes[1].set_title("KL to a reference that rarely writes the steps")
    common.save_figure(fig, path)


def plot_curriculum(runs: list[dict], path) -> None:
    """Held-out pass@1 against completions sampled, from the weak cold start: GRPO on the normal
    mix, and the curriculum arm (easy problems first)."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    seed_lines(ax, [seed["curriculum"] for seed in runs], lambda name, run: curve(run))
    ax.set(xlabel="completions sampled", ylabel="held-out pass@1",
           title=f"A curriculum from the weak cold start ({len(runs)} seeds)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    common.save_figure(fig, path)


# ============================================================================================
# Claims: each decides on one quantity per seed (paired by seed, in the statement's direction)
# ============================================================================================

def per_seed(seeds: list[dict], key: str) -> np.ndarray:
    return np.array([metrics[key] for metrics in seeds], dtype=float)


def gap(seeds: list[dict], key: str, other: str) -> np.ndarray:
    """`key` minus `other`, seed by seed (the same seed's prompts and draws)."""
    return per_seed(seeds, key) - per_seed(seeds, other)


def effect(values: np.ndarray) -> tuple[bool | None, str]:
    """common.seed_verdict on an effect (> 0 in the statement's direction), its text with the
    smallest effect the seeds can detect (the interval's half-width), shown, not deciding."""
    holds, text = common.seed_verdict(values)
    _, low, high = common.mean_interval(values)
    return holds, f"{text} (smallest detectable {(high - low) / 2:.3g})"


def none_beyond(values: np.ndarray, real: float, what: str) -> tuple[bool | None, str]:
    """'No effect', where less would still agree (no gain, nothing solved beyond luck): no where the
    95% interval lies above 0, yes where it stays below `real` (`what`: the size of an effect that is
    there, in the setting that works), else None; and the interval's text."""
    _, low, high = common.mean_interval(values)
    _, text = common.seed_verdict(values)
    return (False if low > 0 else True if high < real else None), f"{text} (none: below {what}, {real:+.3f})"


def level(seeds: list[dict], key: str) -> str:
    """A measure's mean [95% interval] over the seeds."""
    mean, low, high = common.mean_interval(per_seed(seeds, key))
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]"


def over(seeds: list[dict]) -> str:
    return f"mean [95% interval over {len(seeds)} seeds]"


def betas_of(rl: grpo.Args, args: Args) -> list[float]:
    return sorted({rl.beta, *args.beta_list})


def beta_claims(rl: grpo.Args, args: Args, seeds: list[dict]) -> list[dict]:
    """The β trade (over-long-generations, the KL section): the training reward rises more at the
    sweep's smallest β than at its largest; the KL is smaller at its largest; and the strongest β
    learns slower than the default one. Each step up in β is shown beside the decision."""
    betas = betas_of(rl, args)
    if len(betas) < 2:
        return []
    source = "over-long-generations"

    def falls(measure: str) -> tuple[bool | None, str]:
        keys = {b: f"grpo_beta{b:g}_{measure}" for b in betas}
        steps = [(a, b, effect(gap(seeds, keys[a], keys[b]))[1]) for a, b in zip(betas, betas[1:])]
        holds, text = effect(gap(seeds, keys[betas[0]], keys[betas[-1]]))
        return holds, (", ".join(f"β={b:g} {level(seeds, keys[b])}" for b in betas) + f"; smallest β minus largest "
                       f"{text}; its fall at each step up in β: " + ", ".join(f"{a:g} → {b:g} {t}" for a, b, t in steps))
    rise, rise_text = falls("reward_rise")
    close, close_text = falls("kl")
    claims = [common.claim(source, "small β allows more aggressive reward optimisation: the training reward rises "
                           "more at the sweep's smallest β than at its largest", f"{over(seeds)}, the rise of the "
                           "training reward (the verifier's "
                           f"pass rate on the training batches, last tenth of the updates minus first): {rise_text}",
                           rise),
              common.claim(source, "large β keeps the policy close to the SFT reference: the KL to it is smaller at "
                           "the sweep's largest β than at its smallest", f"{over(seeds)}, the KL to the reference (k3 "
                           "per token, last tenth of the "
                           f"updates): {close_text}", close)]
    strong = betas[-1]
    if strong > rl.beta:
        final = {b: f"grpo_beta{b:g}_pass@1" for b in (rl.beta, strong)}
        slows, text = effect(gap(seeds, final[rl.beta], final[strong]))
        claims.append(common.claim(
            source, f"large β slows learning: after the same {rl.rl_steps} updates, held-out pass@1 is lower at the "
            f"sweep's strongest β ({strong:g}) than at the default ({rl.beta:g})",
            f"{over(seeds)}: pass@1 at β={rl.beta:g} {level(seeds, final[rl.beta])}, at β={strong:g} "
            f"{level(seeds, final[strong])}, cold start {level(seeds, 'cold_start_pass@1')}; the default's lead {text}",
            slows))
    return claims


def stuck_claim(rl: grpo.Args, seeds: list[dict], strong: float) -> dict:
    """KL too strong (whole-game §7.5): stuck, no gain over the cold start at the strongest β (a
    zero: its interval holds 0 and stays below the default β's gain)."""
    gain = {b: gap(seeds, f"grpo_beta{b:g}_pass@1", "cold_start_pass@1") for b in (rl.beta, strong)}
    stuck, text = common.seed_verdict(gain[strong], zero_below=float(gain[rl.beta].mean()))
    return common.claim(
        "whole-game §7.5", f"KL too strong: the policy stays stuck near the SFT reference (here, at the sweep's "
        f"strongest β = {strong:g}: no held-out pass@1 gain over the cold start)",
        f"{over(seeds)}: gain at β={strong:g} {text} (stuck: the interval holds 0 and stays below the default β's "
        f"gain, {gain[rl.beta].mean():+.3f}); KL to the reference {level(seeds, f'grpo_beta{strong:g}_kl')} against "
        f"{level(seeds, f'grpo_beta{rl.beta:g}_kl')} at β={rl.beta:g}", stuck)


def weak_kl_claim(rl: grpo.Args, seeds: list[dict]) -> dict:
    """KL too weak (whole-game §7.5): the quality collapses, fewer well-formed samples at β = 0
    than at the default β and than the reference itself (the cold start) writes."""
    def quality(measure: str) -> dict:
        return {"β=0": f"kl_study[beta=0]_{measure}", f"β={rl.beta:g}": f"kl_study[beta={rl.beta:g}]_{measure}",
                "the cold start": f"cold_start_{measure}"}

    def levels(keys: dict) -> str:
        return ", ".join(f"{name} {level(seeds, key)}" for name, key in keys.items())
    formed = quality("well_formed")
    than_default, default_text = effect(gap(seeds, formed[f"β={rl.beta:g}"], formed["β=0"]))
    than_start, start_text = effect(gap(seeds, formed["the cold start"], formed["β=0"]))
    return common.claim(
        "whole-game §7.5", "KL too weak: the quality of the samples collapses (here: at β = 0 fewer completions are "
        "well-formed than at the default β and than the reference, the cold start, writes)",
        f"{over(seeds)}, share of well-formed completions: {levels(formed)}; the default β's lead {default_text}; the "
        f"cold start's lead {start_text}; distinct completions among a problem's {rl.final_samples}: "
        f"{levels(quality('distinct'))}", common.all_parts(than_default, than_start))


def peaked_claim(rl: grpo.Args, seeds: list[dict]) -> dict:
    """whole-game §8: after GRPO at the default β (optimising pass@1), are a problem's samples
    peaked (fewer distinct completions than the cold start's) and usually right (more often right
    than the cold start, and right more often than not: held-out pass@1 above 1/2)? Each part
    decided over seeds."""
    distinct, after = "cold_start_distinct", f"kl_study[beta={rl.beta:g}]_distinct"
    trained = f"grpo_beta{rl.beta:g}_pass@1"
    fewer, fewer_text = effect(gap(seeds, distinct, after))
    right, right_text = effect(gap(seeds, trained, "cold_start_pass@1"))
    # "usually": right on more than half the held-out samples, pass@1 - 1/2 > 0
    usually, usually_text = effect(per_seed(seeds, trained) - 0.5)
    return common.claim(
        "whole-game §8", "optimisation pressure on pass@1 can make a model peaked-and-usually-right: after GRPO a "
        "problem's samples are less diverse (fewer distinct completions among them) and more often right than at "
        "the cold start, and right more often than not (held-out pass@1 above 1/2)",
        f"{over(seeds)}: share of distinct completions among a problem's {rl.final_samples}, cold start "
        f"{level(seeds, distinct)}, after GRPO (β = {rl.beta:g}) {level(seeds, after)}, the fall {fewer_text}; "
        f"held-out pass@1 {level(seeds, 'cold_start_pass@1')} -> {level(seeds, trained)}, "
        f"the rise {right_text}; pass@1 after GRPO minus 1/2 {usually_text}", common.all_parts(fewer, right, usually))


def kl_claims(rl: grpo.Args, args: Args, seeds: list[dict]) -> list[dict]:
    """KL mis-tune, both sides, where the sweep has a β above the default and β = 0."""
    betas = betas_of(rl, args)
    return ([stuck_claim(rl, seeds, betas[-1])] if betas[-1] > rl.beta else []) + (
        [weak_kl_claim(rl, seeds)] if 0.0 in betas and rl.beta > 0 else [])


def stale_key(age: int, measure: str, ratio: str = "ignore") -> str:
    """The metric key of the staleness study's run at `age` (0: on-policy)."""
    return f"staleness[{'on-policy' if age == 0 else f'age {age}, {ratio}'}]_{measure}"


def staleness_claims(rl: grpo.Args, args: Args, seeds: list[dict]) -> list[dict]:
    """Async staleness (whole-game §7.9): the symptom at the oldest rollouts (a larger worst drop
    than on-policy), limiting the lag (pass@1 falls at each step up in age), and the clipped
    importance ratio at each age."""
    ages = [0, *sorted(args.lag_list)]
    oldest, drop = ages[-1], "worst_regression"
    unstable, unstable_text = effect(gap(seeds, stale_key(oldest, drop), stale_key(0, drop)))
    steps = [(a, b, *effect(gap(seeds, stale_key(a, "pass@1"), stale_key(b, "pass@1"))))
             for a, b in zip(ages, ages[1:])]
    return [
        common.claim("whole-game §7.9", f"workers acting with old weights make updates unstable, with regressions "
                     f"(here: rollouts {oldest} updates old, taken as on-policy, fall further below their best held-out "
                     "pass@1 between evaluations than on-policy rollouts)",
                     f"{over(seeds)}, the worst drop of held-out pass@1 below its best so far (evaluations every "
                     f"{rl.eval_every} updates): on-policy {level(seeds, stale_key(0, drop))}, age {oldest} "
                     f"{level(seeds, stale_key(oldest, drop))}; the stale rollouts' excess {unstable_text}; policy "
                     f"drift |log ρ| {level(seeds, stale_key(oldest, 'policy_drift'))}", unstable),
        common.claim("whole-game §7.9", "the mitigation: limit the off-policy lag (here: held-out pass@1 is higher, the "
                     f"younger the rollouts taken as on-policy, ages {', '.join(map(str, ages))})",
                     f"{over(seeds)}, pass@1 by age: " + ", ".join(f"{a} {level(seeds, stale_key(a, 'pass@1'))}"
                                                                   for a in ages)
                     + "; its fall at each step up in age: " + ", ".join(f"{a} → {b} {text}" for a, b, _, text in steps),
                     common.all_parts(*(holds for _, _, holds, _ in steps))),
        *(ratio_claim(seeds, age) for age in ages[1:])]


def ratio_claim(seeds: list[dict], age: int) -> dict:
    """The clipped importance ratio at one policy age: pass@1 above ignoring the staleness."""
    weighted, ignored = stale_key(age, "pass@1", "importance"), stale_key(age, "pass@1")
    helps, text = effect(gap(seeds, weighted, ignored))
    drop = stale_key(age, "worst_regression")
    _, drop_text = effect(gap(seeds, drop, stale_key(age, "worst_regression", "importance")))
    return common.claim(
        "whole-game §7.9", f"the mitigation: importance ratios with clipping (here: rollouts {age} updates old, the "
        "clipped ratio against the policy that sampled, end with higher held-out pass@1 than ignoring the staleness)",
        f"{over(seeds)}: pass@1 with the ratio {level(seeds, weighted)}, ignoring it {level(seeds, ignored)}, "
        f"on-policy {level(seeds, stale_key(0, 'pass@1'))}; the ratio's lead {text}; the worst drop it saves "
        f"{drop_text}; clip fraction {level(seeds, stale_key(age, 'clip_fraction', 'importance'))}", helps)


def skew_claims(seeds: list[dict]) -> list[dict]:
    """Memory / state mismatch (§7.10) and state blindness (§7.1) at serving time, on the GRPO
    policy. A collapse: below the trained policy and below the cold start (all RL gave, lost)."""
    served = {name: f"served[{name}]_pass@1" for name in SERVED}
    skew, skew_text = effect(gap(seeds, served["as trained"], served["another template"]))
    falls, falls_text = effect(gap(seeds, served["as trained"], served["last operation missing"]))
    below, below_text = effect(gap(seeds, "cold_start_pass@1", served["last operation missing"]))
    return [common.claim("whole-game §7.10", "train/serve skew poisons serving: a serving-time prompt built by "
                         "another template than training's lowers held-out pass@1 (the fix, one builder for both, is "
                         "the as-trained number)",
                         f"{over(seeds)}: as trained {level(seeds, served['as trained'])}; served as "
                         f"{SERVING_FORMAT!r} {level(seeds, served['another template'])}; the fall {skew_text}", skew),
            silent_skew_claim(seeds, skew),
            common.claim("whole-game §7.1", "state blindness: when the context drops a fact the answer needs, "
                         "performance collapses (here: with the last operation missing from the prompt, held-out pass@1 "
                         "falls below the trained policy's and below the cold start's)",
                         f"{over(seeds)}: as trained {level(seeds, served['as trained'])}; last operation missing "
                         f"{level(seeds, served['last operation missing'])}; cold start "
                         f"{level(seeds, 'cold_start_pass@1')}; the fall from the trained policy {falls_text}, from "
                         f"the cold start {below_text}", common.all_parts(falls, below))]


def silent_skew_claim(seeds: list[dict], harms: bool | None) -> dict:
    """Is the skew's harm silent? Nothing here can raise an error (a prompt is text), so the outputs'
    shape decides: yes where the skewed prompt's fall in the well-formed share is none beyond the harm
    (its interval's top below the mean fall in pass@1), no where it lies above 0 (the outputs break,
    visibly). Only where the skew harms (`harms`, the poison claim's verdict): premise not met otherwise."""
    shape = {name: f"served[{name}]_well_formed" for name in SERVED}
    harm = float(np.mean(gap(seeds, "served[as trained]_pass@1", "served[another template]_pass@1")))
    fall = gap(seeds, shape["as trained"], shape["another template"])
    silent, _ = none_beyond(fall, harm, "the mean fall in pass@1")  # its text would read as the result: ours below
    text = (f"{common.seed_verdict(fall)[1]} (silent where its interval's top stays below the mean fall in pass@1, "
            f"{harm:+.3f}; loud where it lies above 0)")
    measured = (f"{over(seeds)}: well-formed share as trained {level(seeds, shape['as trained'])}, served as "
                f"{SERVING_FORMAT!r} {level(seeds, shape['another template'])}; its fall {text}")
    if harms is not True:
        measured += " (premise not met: the skew is not shown to lower pass@1, so there is no harm to hide)"
    return common.claim("whole-game §7.10", "train/serve skew does its harm silently, read as outputs that look "
                        "normal: no fall in the well-formed share of the skewed prompt's completions is shown, the top "
                        "of its interval below the fall in pass@1 (the harm)", measured, silent if harms is True else None)


def sparse_key(name: str, measure: str = "pass@1") -> str:
    """The metric key of a run of the sparse-reward study."""
    return f"sparse[{name}]_{measure}"


def gains(rl: grpo.Args, seeds: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """GRPO's held-out pass@1 gain from the weak cold start, and from the default one, per seed."""
    return (gap(seeds, sparse_key("GRPO"), sparse_key("weak cold start")),
            gap(seeds, f"grpo_beta{rl.beta:g}_pass@1", "cold_start_pass@1"))


def sparse_claims(rl: grpo.Args, seeds: list[dict]) -> list[dict]:
    """Sparse terminal reward from a weak cold start (§2, §7.3): most of the batch has no signal
    (more than half of the completions in groups with zero spread); and, a claim apart, RL does not
    get off the ground (no gain, below the default cold start's)."""
    most, most_text = effect(per_seed(seeds, sparse_key("GRPO", "zero_spread")) - 0.5)
    weak_gain, default_gain = gains(rl, seeds)
    flat, flat_text = none_beyond(weak_gain, float(default_gain.mean()), "the default cold start's gain")
    spread = (f"{over(seeds)}: the share of GRPO's sampled completions (from the weak cold start, all its "
              f"{rl.rl_steps} updates) in groups with zero reward spread "
              f"{level(seeds, sparse_key('GRPO', 'zero_spread'))}, "
              f"above one half by {most_text}")
    return [common.claim(
                "whole-game §2", "with a sparse 0/1 verifier most trajectories teach almost nothing (here, from the weak "
                "cold start: more than half of GRPO's sampled completions sit in groups with zero reward spread, A = 0)",
                spread, most),
            common.claim(
                "whole-game §7.3", "sparse terminal reward from a cold start that rarely succeeds: the cold start fails "
                "(here: GRPO's held-out pass@1 gain from the weak cold start is none, below the default cold start's)",
                f"{over(seeds)}: pass@1 weak start {level(seeds, sparse_key('weak cold start'))} -> GRPO "
                f"{level(seeds, sparse_key('GRPO'))}, gain {flat_text}", flat)]


def support_claim(rl: grpo.Args, seeds: list[dict]) -> dict:
    """§8: of the problems the weak start leaves unsolved, GRPO solves none beyond what fresh draws
    of the weak start solve by luck (below what GRPO from the default cold start solves)."""
    luck = per_seed(seeds, sparse_key("weak cold start, resampled", "still_unsolved"))
    solved = {name: luck - per_seed(seeds, sparse_key(name, "still_unsolved"))
              for name in ("GRPO", "rejection sampling, then GRPO", "GRPO from the default cold start")}
    support, text = none_beyond(solved["GRPO"], float(solved["GRPO from the default cold start"].mean()),
                                "what GRPO from the default cold start solves")
    still = ", ".join(f"{name} {level(seeds, sparse_key(name, 'still_unsolved'))}" for name in (
        "weak cold start, resampled", "GRPO", "rejection sampling, then GRPO", "GRPO from the default cold start"))
    premise = bool(np.isfinite(luck).all())
    return common.claim(
        "whole-game §8", f"no estimator fixes a support problem (here: of the held-out problems with no right answer "
        f"in {rl.final_samples} samples at the weak start, GRPO solves no more than fresh draws of the weak start "
        "solve by luck)",
        f"{over(seeds)}: problems unsolved at the weak start "
        f"{level(seeds, sparse_key('weak cold start', 'unsolved'))}; "
        f"of those, still unsolved: {still}; solved beyond luck by GRPO {text}; by rejection sampling then GRPO "
        f"{effect(solved['rejection sampling, then GRPO'])[1]}"
        + ("" if premise else "; premise not met: the weak start solves every held-out problem"),
        support if premise else None)


def sparse_mitigation_claims(rl: grpo.Args, args: Args, seeds: list[dict]) -> list[dict]:
    """§7.3, §8: rejection sampling into SFT then GRPO against GRPO alone, at the same number of
    completions; and the SFT cold start on demonstrations (GRPO's gain from it minus from the weak one)."""
    rft, rft_text = effect(gap(seeds, sparse_key("rejection sampling, then GRPO"), sparse_key("GRPO")))
    weak_gain, default_gain = gains(rl, seeds)
    sft, sft_text = effect(default_gain - weak_gain)
    return [common.claim(
                "whole-game §7.3, §8", "the mitigation: rejection sampling (best-of-N) into SFT, then GRPO, gets wins "
                "into the buffer first (here: higher held-out pass@1 than GRPO alone for the same number of completions)",
                f"{over(seeds)}: best-of-{args.rft_n} kept {level(seeds, sparse_key('rejection sampling', 'kept'))} of "
                f"{per_seed(seeds, sparse_key('rejection sampling', 'sampled')).mean():.0f} completions; pass@1 after "
                f"rejection sampling {level(seeds, sparse_key('rejection sampling'))}, then GRPO for {rl.rl_steps // 2} "
                f"updates {level(seeds, sparse_key('rejection sampling, then GRPO'))}; GRPO alone for {rl.rl_steps} "
                f"updates {level(seeds, sparse_key('GRPO'))}; the lead {rft_text}", rft),
            common.claim(
                "whole-game §7.3, §2", "the mitigation: an SFT cold start on successful traces (here: GRPO gains more "
                f"held-out pass@1 from the default cold start, {args.sft_steps} SFT steps on demonstrations, than from "
                f"the weak one, {args.sparse_sft_steps})",
                f"{over(seeds)}: weak start {level(seeds, sparse_key('weak cold start'))} -> "
                f"{level(seeds, sparse_key('GRPO'))}; "
                f"default cold start {level(seeds, 'cold_start_pass@1')} -> "
                f"{level(seeds, f'grpo_beta{rl.beta:g}_pass@1')}; the difference of the gains {sft_text}", sft)]


def poor_key(name: str, measure: str = "pass@1") -> str:
    """The metric key of a run of the poor-reference study."""
    return f"poor_reference[{name}]_{measure}"


def poor_reference_claims(seeds: list[dict], strong: float, reset_every: int) -> list[dict]:
    """KL anchoring (§7.5; over-long-generations, When it falls down) to a reference that rarely
    writes the steps, at --poor-beta (`strong`): the hold-back, the reset, and what the anchor does
    to the steps themselves."""
    rows = "; ".join(f"{name}: pass@1 {level(seeds, poor_key(name))}, writes steps "
                     f"{level(seeds, poor_key(name, 'writes_steps'))}"
                     for name in ("poor reference itself", "cold start as reference", "poor reference",
                                  "poor reference, reset"))
    held, held_text = effect(gap(seeds, poor_key("cold start as reference"), poor_key("poor reference")))
    reset, reset_text = effect(gap(seeds, poor_key("poor reference, reset"), poor_key("poor reference")))
    return [common.claim(
                "whole-game §7.5", "a wrong reference: KL to an SFT model that rarely writes the steps holds the "
                f"policy back from the behaviour that pays (here, GRPO at β = {strong:g}: lower held-out pass@1 than "
                "the same β anchored to the cold start)",
                f"{over(seeds)}: {rows}; the cold-start anchor's lead {held_text}", held),
            common.claim(
                "whole-game §7.5", f"the mitigation: reset the reference carefully (here: to the current policy every "
                f"{reset_every} updates; higher held-out pass@1 than the poor reference without resets)",
                f"{over(seeds)}: {rows}; the reset's lead {reset_text}", reset),
            anchoring_claim(seeds, strong)]


def anchoring_claim(seeds: list[dict], strong: float) -> dict:
    """over-long-generations, When it falls down: KL to a reference that rarely (or never) writes
    the worked steps discourages the policy from writing them. At --poor-beta (`strong`), per seed:
    the share of GRPO's samples that write steps anchored to the cold start minus anchored to the
    poor reference. Its premise: the poor reference writes them less often than the cold start."""
    itself = poor_key("poor reference itself", "writes_steps")
    never = bool((per_seed(seeds, itself) == 0).all())
    fewer, text = effect(gap(seeds, poor_key("cold start as reference", "writes_steps"),
                             poor_key("poor reference", "writes_steps")))
    poorer, poorer_text = effect(gap(seeds, "cold_start_writes_steps", itself))
    return common.claim(
        "over-long-generations, When it falls down", "KL anchoring breaks when the reference is poor: KL to a "
        f"reference that {'never' if never else 'rarely'} writes the worked steps discourages the policy from "
        f"writing them, though the reward pays for them: anchored to it at β = {strong:g}, GRPO's samples write the "
        "steps less often than anchored to the cold start at the same β",
        f"{over(seeds)}, share of samples that write at least one step before the answer: the poor reference "
        f"itself {level(seeds, itself)}, the cold start {level(seeds, 'cold_start_writes_steps')} (the poor "
        f"reference's shortfall {poorer_text}); GRPO at β = {strong:g} anchored to the cold start "
        f"{level(seeds, poor_key('cold start as reference', 'writes_steps'))}, anchored to the poor reference "
        f"{level(seeds, poor_key('poor reference', 'writes_steps'))}; the cold-start anchor's lead {text}"
        + ("" if poorer else "; premise not met: the poor reference is not shown to write the steps less often "
           "than the cold start"), fewer if poorer else None)


def blame_key(shown: str, measure: str) -> str:
    """The metric key of a measure of the blame study (`shown`: one of SHOWN)."""
    return f"blame[{shown}]_{measure}"


def blame_claim(rl: grpo.Args, args: Args, seeds: list[dict]) -> dict:
    """whole-game §1: with a fact cut from the prompt, GRPO blames completions that did right by
    what they were shown; with the whole prompt a right completion is never below its group's mean."""
    cut, whole = (blame_key(shown, "blamed_right") for shown in reversed(SHOWN))
    blames, text = effect(gap(seeds, cut, whole))
    premise = bool(np.isfinite(per_seed(seeds, cut)).all() and np.isfinite(per_seed(seeds, whole)).all())
    rows = "; ".join(f"{shown}: verifier's reward {level(seeds, blame_key(shown, 'reward'))}, right given the "
                     f"prompt {level(seeds, blame_key(shown, 'right'))}, of those blamed "
                     f"{level(seeds, blame_key(shown, 'blamed_right'))}" for shown in SHOWN)
    last = SHOWN[-1]
    return common.claim(
        "whole-game §1", "when the policy sees only a truncated window, credit assignment blames the wrong tokens "
        "because the real cause left the context (here, on the GRPO policy's samples: with the last operation cut "
        "from the prompt, more of the completions that are right given what the prompt shows get a negative group "
        "advantage than of the right completions with the whole prompt)",
        f"{over(seeds)}, {args.blame_problems} held-out problems, {rl.group_size} completions each from the GRPO "
        f"policy (β = {rl.beta:g}, {rl.rl_steps} updates): {rows}; the excess blame with the operation cut {text}; "
        f"beside it, of the completions wrong given the cut prompt (verifier 0 too) blamed "
        f"{level(seeds, blame_key(last, 'blamed_wrong'))}, and the share of all blame on completions right given "
        f"the prompt {level(seeds, blame_key(last, 'blame_on_right'))}"
        + ("" if premise else "; premise not met: no completion right given the prompt in a seed"),
        blames if premise else None)


def curriculum_key(name: str, measure: str = "pass@1") -> str:
    """The metric key of a run of the curriculum study."""
    return f"curriculum[{name}]_{measure}"


def curriculum_claim(rl: grpo.Args, args: Args, seeds: list[dict]) -> dict:
    """whole-game §7.3: a curriculum on easier items against GRPO alone, at the same completions.
    Its premise: the easy items are easier for the start (the curriculum's training reward in its
    easy updates above GRPO's in the same updates on the normal mix)."""
    easy, arm = easy_updates(rl, args), "easy first, then GRPO"
    lead, text = effect(gap(seeds, curriculum_key(arm), curriculum_key("GRPO")))
    easier, easier_text = effect(gap(seeds, curriculum_key(arm, "easy_reward"), curriculum_key("GRPO", "easy_reward")))
    rewards = (f"the verifier's pass rate on the training completions of the first {easy} updates, easy first "
               f"{level(seeds, curriculum_key(arm, 'easy_reward'))}, GRPO on the normal mix "
               f"{level(seeds, curriculum_key('GRPO', 'easy_reward'))}, the easy items' lead {easier_text}")
    return common.claim(
        "whole-game §7.3", f"the mitigation: a curriculum on easier items (here, from a weak cold start of "
        f"{args.curriculum_sft_steps} SFT steps: GRPO that draws only {rl.min_steps}-step problems for its first "
        f"{easy} of {rl.rl_steps} updates, then the normal mix, ends with higher held-out pass@1 than GRPO on the "
        "normal mix throughout, for the same number of completions)",
        f"{over(seeds)}: pass@1 weak start {level(seeds, curriculum_key('weak cold start'))}; GRPO "
        f"{level(seeds, curriculum_key('GRPO'))}; easy first, then GRPO {level(seeds, curriculum_key(arm))}; the "
        f"curriculum's lead {text}; {rewards}; share of completions in zero-spread groups over all updates, GRPO "
        f"{level(seeds, curriculum_key('GRPO', 'zero_spread'))}, easy first "
        f"{level(seeds, curriculum_key(arm, 'zero_spread'))}"
        + ("" if easier else "; premise not met: the weak start is not shown to pass the easy items more often "
           "than the normal mix"), lead if easier else None)


def group_mix_claims(rl: grpo.Args, args: Args, seeds: list[dict]) -> list[dict]:
    """whole-game §7.8's mitigations of group collapse (a group's members all score alike: A = 0,
    training stalls), each arm against GRPO on the normal mix from the curriculum's weak start:
    held-out pass@1. Their premise, the groups part's: a sparse reward (more than half of GRPO's
    groups without spread); adaptive difficulty's too, the curriculum claim's: fewer operations are
    easier for the start. The floor on the std needs no run (`std_floor_claim`)."""
    sparse, sparse_text = effect(per_seed(seeds, curriculum_key("GRPO", "zero_spread")) - 0.5)
    easier, _ = effect(gap(seeds, curriculum_key("easy first, then GRPO", "easy_reward"),
                           curriculum_key("GRPO", "easy_reward")))

    def against_grpo(arm: str, statement: str, premise: bool | None, missing: str) -> dict:
        lead, text = effect(gap(seeds, curriculum_key(arm), curriculum_key("GRPO")))
        drawn = ", ".join(f"{name} {np.mean(per_seed(seeds, curriculum_key(name, 'sampled'))):.0f}"
                          for name in ("GRPO", arm))
        return common.claim(
            "whole-game §7.8", f"the mitigation of group collapse, {statement}",
            f"{over(seeds)}: pass@1 GRPO {level(seeds, curriculum_key('GRPO'))}, {arm} {level(seeds, curriculum_key(arm))};"
            f" its lead {text}; share of the trained groups without reward spread, GRPO "
            f"{level(seeds, curriculum_key('GRPO', 'zero_spread'))}, {arm} {level(seeds, curriculum_key(arm, 'zero_spread'))}"
            f"; completions drawn per update, {drawn}; GRPO's groups without spread above one half by {sparse_text}"
            + ("" if premise else f"; premise not met: {missing}"), lead if premise else None)

    not_sparse = "the reward is not shown sparse under GRPO (more than half of the groups without spread)"
    return [
        against_grpo(ADAPTIVE, f"adaptive difficulty: from a weak cold start of {args.curriculum_sft_steps} SFT steps, "
                     "GRPO whose problems' number of operations moves each update toward a pass rate of 1/2 (one "
                     "fewer after a batch below it, one more above) ends with higher held-out pass@1 on the normal "
                     "mix than GRPO on the normal mix throughout, at the same completions",
                     sparse and easier, not_sparse if not sparse else "fewer operations are not shown easier for the "
                     "weak start (the curriculum claim's premise)"),
        against_grpo(MIXED, f"ensure mixed outcomes in groups when possible: from the same start, GRPO that draws "
                     f"{1 + args.mixed_rounds}x the prompts each update and trains on the {rl.prompts} groups with "
                     "reward spread first (then the rest) ends with higher held-out pass@1 than GRPO, at the same "
                     "updates", sparse, not_sparse),
        std_floor_claim(rl)]


def floored_advantages(rewards: torch.Tensor, floor: float) -> torch.Tensor:
    """GRPO's group z-score with a floor on the std in place of ε: (r - mean) / max(std, floor)."""
    mean, std = rewards.mean(1, keepdim=True), rewards.std(1, keepdim=True)
    return (rewards - mean) / std.clamp(min=floor)


def std_floor_claim(rl: grpo.Args) -> dict:
    """whole-game §7.8's floor on the std, exactly: set at the smallest std a group of G 0/1 rewards
    with spread has (one right answer), it leaves every such group's z-score as it is, and bounds
    what near-homogeneous scores (one δ below the rest) get per unit of their gap by the lone right
    answer's; the chapter's ε alone gives them the same advantages whatever δ (tiny gaps made
    full-size, the chapter's claim). float64; "no further apart" allows float64's rounding."""
    G = rl.group_size
    lone = torch.eye(G, dtype=torch.float64)[:1]
    floor = lone.std(1).item()
    binary = torch.tril(torch.ones(G - 1, G, dtype=torch.float64))  # k = 1..G-1 right answers
    kept = torch.equal(floored_advantages(binary, floor), grpo.group_advantages(binary, "grpo", eps=0.0))
    lone_gap = (floored_advantages(lone, floor)[0, 0] - floored_advantages(lone, floor)[0, 1]).item()

    def per_unit(delta: float, advantages) -> float:
        A = advantages(1 - delta * lone)
        return (A[0, 1] - A[0, 0]).item() / delta

    deltas = (1e-3, 1e-2, 1e-1)
    floored = [per_unit(d, lambda r: floored_advantages(r, floor)) for d in deltas]
    bare = [per_unit(d, lambda r: grpo.group_advantages(r, "grpo")) for d in deltas]
    bounded = max(floored) <= lone_gap * (1 + 1e-12)
    return common.claim(
        "whole-game §7.8", "the mitigation of group collapse, a floor on the std: at the smallest std a group of 0/1 "
        "rewards with spread has, it leaves the verifier's groups as they are, and near-homogeneous scores no longer "
        "blow up: per unit of reward gap their advantages lie no further apart than a lone right answer's",
        f"G={G}, floor {floor:.4f}: the z-score of every 0/1 group with spread {'unchanged' if kept else 'changed'}; "
        "one score δ below the rest, advantage gap per unit of reward gap for δ = "
        + ", ".join(f"{d:g}" for d in deltas) + ": with the floor " + ", ".join(f"{v:.3f}" for v in floored)
        + ", with ε alone " + ", ".join(f"{v:,.0f}" for v in bare) + f"; a lone right answer: {lone_gap:.3f} (exact)",
        kept and bounded)


def support_key(name: str, measure: str = "still_unsolved") -> str:
    """The metric key of a run of the support part."""
    return f"support[{name}]_{measure}"


def estimators_claim(rl: grpo.Args, seeds: list[dict]) -> dict:
    """§8, each estimator: of the problems the weak start leaves unsolved, none of REINFORCE, RLOO
    and GRPO solves any beyond what fresh draws of the weak start solve by luck (`none_beyond`, the
    GRPO-only claim's rule, against what GRPO from the default cold start solves); every part must hold."""
    luck = per_seed(seeds, support_key("weak cold start, resampled"))
    there = float((luck - per_seed(seeds, support_key("GRPO from the default cold start"))).mean())
    names = [grpo.NAMES[method] for method in SUPPORT_ESTIMATORS]
    # solved beyond luck: the share still unsolved after fresh draws minus after training
    found = {name: none_beyond(luck - per_seed(seeds, support_key(name)), there,
                               "what GRPO from the default cold start solves") for name in names}
    still = ", ".join(f"{name} {level(seeds, support_key(name))}" for name in (
        "weak cold start, resampled", *names, "GRPO from the default cold start"))
    premise = bool(np.isfinite(luck).all())
    return common.claim(
        "whole-game §8", "no estimator fixes a support problem: of the held-out problems with no right answer in "
        f"{rl.final_samples} samples at the weak start, none of REINFORCE, RLOO and GRPO solves more than fresh draws "
        "of the weak start solve by luck",
        f"{over(seeds)}, each estimator from the weak start for {rl.rl_steps} updates of {rl.prompts}x"
        f"{rl.group_size} completions: problems unsolved at the weak start "
        f"{level(seeds, support_key('weak cold start', 'unsolved'))}; of those, still unsolved: {still}; solved "
        "beyond luck by " + ", by ".join(f"{name} {text}" for name, (_, text) in found.items())
        + ("" if premise else "; premise not met: the weak start solves every held-out problem"),
        common.all_parts(*(holds for holds, _ in found.values())) if premise else None)


def pressure_key(name: str, measure: str = "pass@1") -> str:
    """The metric key of a run of the pressure part."""
    return f"pressure[{name}]_{measure}"


def pressure_claim(rl: grpo.Args, args: Args, seeds: list[dict]) -> dict:
    """§8: 'optimization pressure on pass@1 versus pass@k changes behavior: models can learn to be
    diverse-and-sometimes-right or peaked-and-usually-right', the pass@k side against GRPO's: more
    distinct samples and a lower pass@1, each paired by seed."""
    arm, grpo_arm = pressure_arm(args), "GRPO (pass@1)"
    diverse, diverse_text = effect(gap(seeds, pressure_key(arm, "distinct"), pressure_key(grpo_arm, "distinct")))
    sometimes, sometimes_text = effect(gap(seeds, pressure_key(grpo_arm), pressure_key(arm)))
    k = rl.final_samples
    return common.claim(
        "whole-game §8", f"optimisation pressure on pass@1 versus pass@k changes behaviour: under pass@{args.pass_k} "
        f"pressure (GRPO with pass@{args.pass_k} advantages) a model is diverse-and-sometimes-right beside GRPO's "
        "peaked-and-usually-right: from the same cold start at the same completions, its samples are more diverse "
        "(more distinct completions among a problem's) and right less often (lower held-out pass@1)",
        f"{over(seeds)}: share of distinct completions among a problem's {rl.final_samples}, GRPO "
        f"{level(seeds, pressure_key(grpo_arm, 'distinct'))}, pass@{args.pass_k} arm "
        f"{level(seeds, pressure_key(arm, 'distinct'))}, the pass@{args.pass_k} arm's excess {diverse_text}; held-out "
        f"pass@1 GRPO {level(seeds, pressure_key(grpo_arm))}, pass@{args.pass_k} arm {level(seeds, pressure_key(arm))}, "
        f"GRPO's lead {sometimes_text}; held-out pass@{k}, GRPO {level(seeds, pressure_key(grpo_arm, f'pass@{k}'))}, "
        f"pass@{args.pass_k} arm {level(seeds, pressure_key(arm, f'pass@{k}'))}", common.all_parts(diverse, sometimes))


def groups_key(name: str, measure: str = "pass@1") -> str:
    """The metric key of a run of the groups part."""
    return f"groups[{name}]_{measure}"


def groups_claim(rl: grpo.Args, seeds: list[dict]) -> dict:
    """§7.3, §7.8: GRPO at twice the group size (half the prompts) against the chapter's, from the
    weak cold start, at the same completions. Its premise, a sparse reward: at the chapter's group
    size more than half of the groups have no reward spread (the sparse-reward claim's measure)."""
    larger = larger_groups(rl)
    small, large = group_arm(rl), group_arm(larger)
    lead, text = effect(gap(seeds, groups_key(large), groups_key(small)))
    sparse, sparse_text = effect(per_seed(seeds, groups_key(small, "zero_spread")) - 0.5)
    return common.claim(
        "whole-game §7.3, §7.8", f"larger group sizes for GRPO mitigate a sparse reward: from the weak cold start, "
        f"GRPO with G = {larger.group_size} (half the prompts per update, the same completions) ends with higher "
        f"held-out pass@1 than with G = {rl.group_size}",
        f"{over(seeds)}, {rl.rl_steps} updates of {rl.prompts * rl.group_size} completions: pass@1 with {small} "
        f"{level(seeds, groups_key(small))}, with {large} {level(seeds, groups_key(large))}; the larger group's lead "
        f"{text}; share of zero-spread groups over the updates, {small} {level(seeds, groups_key(small, 'zero_spread'))}"
        f", {large} {level(seeds, groups_key(large, 'zero_spread'))}; the reward sparse with {small} (more than half "
        f"of the groups without spread): above one half by {sparse_text}"
        + ("" if sparse else f"; premise not met: the reward is not shown sparse at G = {rl.group_size} (more than "
           "half of the groups without reward spread)"), lead if sparse else None)


def mode_claims(rl: grpo.Args, args: Args, seeds: list[dict]) -> list[dict]:
    return (beta_claims(rl, args, seeds) + staleness_claims(rl, args, seeds) + kl_claims(rl, args, seeds)
            + [peaked_claim(rl, seeds)]
            + skew_claims(seeds) + sparse_claims(rl, seeds) + [support_claim(rl, seeds)]
            + sparse_mitigation_claims(rl, args, seeds)
            + poor_reference_claims(seeds, args.poor_beta, rl.eval_every))


def check_claims(rl: grpo.Args, args: Args, seeds: list[dict]) -> list[dict]:
    """The claims of the parts the run measured (--parts), in the order of PARTS."""
    found = {"modes": lambda: mode_claims(rl, args, seeds), "blame": lambda: [blame_claim(rl, args, seeds)],
             "curriculum": lambda: [curriculum_claim(rl, args, seeds), *group_mix_claims(rl, args, seeds)],
             "support": lambda: [estimators_claim(rl, seeds)], "groups": lambda: [groups_claim(rl, seeds)],
             "pressure": lambda: [pressure_claim(rl, args, seeds)]}
    return [claim for part in PARTS if part in args.part_list for claim in found[part]()]


# ============================================================================================
# Metrics (one seed's; the run's are their means), tables, report, main
# ============================================================================================
def collect_metrics(rl: grpo.Args, before: dict, sweep: dict, stale: dict, skew: dict, kl: dict, sparse: dict,
                    poor: dict) -> dict:
    metrics = {f"cold_start_{key}": value for key, value in before.items() if key != "correct"}
    for beta, run in sweep.items():
        label = f"grpo_beta{beta:g}"
        metrics |= {f"{label}_pass@{k}": run["final"][f"pass@{k}"] for k in rl.ks}
        metrics |= {f"{label}_kl": run["final_kl"], f"{label}_length": run["final"]["length"],
                    f"{label}_reward_rise": reward_rise(run), f"{label}_wall_clock_s": run["wall_clock_s"]}
    for name, run in stale.items():
        metrics[f"staleness[{name}]_pass@1"] = run["final"]["pass@1"]
        metrics[f"staleness[{name}]_worst_regression"] = worst_regression(run)
        metrics |= {f"staleness[{name}]_{key}": history_mean(run, key)
                    for key in ("clip_fraction", "policy_drift", "policy_age")}
    metrics |= {f"served[{name}]_{key}": value for name, found in skew.items() for key, value in found.items()}
    for study, runs in (("sparse", sparse), ("poor_reference", poor)):
        for name, run in runs.items():
            metrics |= {f"{study}[{name}]_pass@{k}": run["final"][f"pass@{k}"] for k in rl.ks}
            metrics[f"{study}[{name}]_unsolved"] = unsolved(run["final"])
            metrics |= {f"{study}[{name}]_{key}": run[key] for key in ("writes_steps", "final_kl") if key in run}
            if "history" in run:
                metrics[f"{study}[{name}]_zero_spread"] = history_mean(run, "zero_spread")
    weak = sparse["weak cold start"]["final"]
    metrics |= {f"sparse[{name}]_still_unsolved": still_unsolved(weak, run["final"]) for name, run in sparse.items()
                if name != "weak cold start"}
    metrics |= {f"sparse[rejection sampling]_{key}": sum(r[key] for r in sparse["rejection sampling"]["rounds"])
                for key in ("kept", "sampled")}
    metrics |= {f"kl_study[beta={beta:g}]_{key}": value for beta, row in kl.items() for key, value in row.items()}
    return metrics


TITLES = {"staleness": "GRPO with stale rollouts (failure mode: async staleness):",
          "kl": "KL weight, both sides (failure mode: KL mis-tune):",
          "serving": "The GRPO policy served differently from how it was trained (state mismatch, state blindness):",
          "sparse": "A weak cold start (sparse reward) and its mitigation:",
          "poor_reference": "GRPO from a poor reference that rarely writes the steps (KL anchoring):",
          "blame": "Where GRPO's blame lands, the prompt whole or with its last operation cut (state blindness):",
          "curriculum": "A curriculum from the weak cold start (sparse reward), at the same completions:",
          "support": "Each estimator from the weak cold start: the problems it leaves unsolved (a support problem):",
          "groups": "GRPO from the weak cold start at twice the group size, half the prompts (sparse reward):",
          "pressure": "Pressure on pass@1 (GRPO) against pass@k, from the default cold start, the same completions:"}


def tables(rl: grpo.Args, means: dict, names: dict) -> dict:
    """Each study the run measured as the table it prints and the docs show (keys of TITLES), from
    the means over the seeds; `names`: each study's runs, in order."""
    found = mode_tables(rl, means, names) if "beta_sweep" in names else {}
    if "blame" in names:
        columns = ("reward", "right", "blamed_right", "blamed_wrong", "blame_on_right", "zero_spread")
        found["blame"] = {"header": ["prompt", "reward", "right by it", "blamed right", "blamed wrong",
                                     "blame on right", "zero-spread"],
                          "rows": [[shown, *(percent(means[blame_key(shown, c)]) for c in columns)]
                                   for shown in names["blame"]]}
    if "curriculum" in names:
        found["curriculum"] = {"header": ["policy", "pass@1", f"pass@{rl.final_samples}", "zero-spread",
                                          "reward, easy updates", "KL"],
                               "rows": [[name, *(means.get(curriculum_key(name, c), "-") for c in (
                                   "pass@1", f"pass@{rl.final_samples}", "zero_spread", "easy_reward", "final_kl"))]
                                   for name in names["curriculum"]]}
    if "support" in names:
        found["support"] = {"header": ["policy", "pass@1", f"pass@{rl.final_samples}", "unsolved", "still unsolved",
                                       "zero-spread"],
                            "rows": [[name, *(means.get(support_key(name, c), "-") for c in (
                                "pass@1", f"pass@{rl.final_samples}")), *(percent(means.get(support_key(name, c), math.nan))
                                                                          for c in ("unsolved", "still_unsolved",
                                                                                    "zero_spread"))]
                                     for name in names["support"]]}
    if "pressure" in names:
        columns = ("pass@1", f"pass@{rl.final_samples}", "distinct", "well_formed")
        found["pressure"] = {"header": ["policy", *columns[:2], "distinct", "well-formed"],
                             "rows": [[name, *(means[pressure_key(name, c)] for c in columns)]
                                      for name in names["pressure"]]}
    if "groups" in names:
        found["groups"] = {"header": ["GRPO", "pass@1", f"pass@{rl.final_samples}", "zero-spread", "KL"],
                           "rows": [[name, *(means[groups_key(name, c)] for c in (
                               "pass@1", f"pass@{rl.final_samples}")), percent(means[groups_key(name, "zero_spread")]),
                                     means[groups_key(name, "final_kl")]] for name in names["groups"]]}
    return found


def percent(value: float) -> str:
    """A share as a table shows it ('-': nothing to count)."""
    return f"{value:.1%}" if np.isfinite(value) else "-"


def mode_tables(rl: grpo.Args, means: dict, names: dict) -> dict:
    """The failure modes' tables (--parts modes)."""
    k = rl.final_samples

    def cell(key: str, percent: bool = False):
        value = means.get(key)
        return "-" if value is None else f"{value:.0%}" if percent else value

    kl_columns = ("kl", "pass@1", f"pass@{k}", "entropy", "distinct", "well_formed", "writes_steps")
    kl_rows = [["cold start", "-", *(cell(f"cold_start_{c}") for c in kl_columns[1:3]), "-", "-",
                *(cell(f"cold_start_{c}") for c in kl_columns[4:])]]
    kl_rows += [[f"{b:g}", *(cell(f"kl_study[beta={b:g}]_{c}") for c in kl_columns[:3]),
                 cell(f"grpo_beta{b:g}_reward_rise"), *(cell(f"kl_study[beta={b:g}]_{c}") for c in kl_columns[3:])]
                for b in sorted(names["beta_sweep"])]
    stale_rows = [[name, *(cell(f"staleness[{name}]_{c}") for c in ("pass@1", "worst_regression", "policy_age",
                                                                      "clip_fraction", "policy_drift"))]
                  for name in names["staleness"]]
    found = {"staleness": {"header": ["rollouts", "pass@1", "worst drop", "policy age", "clip fraction",
                                      "drift (mean abs log ρ)"], "rows": stale_rows},
             "kl": {"header": ["β", "KL", "pass@1", f"pass@{k}", "reward rise", "entropy", "distinct", "well-formed",
                               "writes steps"], "rows": kl_rows},
             "serving": {"header": ["prompt at serving", "pass@1"],
                         "rows": [[name, means[f"served[{name}]_pass@1"]] for name in SERVED]}}
    found["sparse"] = {"header": ["policy", "pass@1", f"pass@{k}", "unsolved", "still unsolved", "zero-spread", "KL"],
                       "rows": [[name, *(cell(f"sparse[{name}]_{c}") for c in ("pass@1", f"pass@{k}")),
                                 *(cell(f"sparse[{name}]_{c}", True) for c in ("unsolved", "still_unsolved",
                                                                               "zero_spread")),
                                 cell(f"sparse[{name}]_final_kl")] for name in names["sparse_reward"]]}
    found["poor_reference"] = {
        "header": ["policy", "pass@1", f"pass@{k}", "unsolved", "zero-spread", "writes steps", "KL"],
        "rows": [[name, *(cell(f"poor_reference[{name}]_{c}") for c in ("pass@1", f"pass@{k}")),
                  *(cell(f"poor_reference[{name}]_{c}", True) for c in ("unsolved", "zero_spread", "writes_steps")),
                  cell(f"poor_reference[{name}]_final_kl")] for name in names["poor_reference"]]}
    return found


def report(claims: list[dict], found: dict) -> None:
    for name, title in TITLES.items():
        if name not in found:
            continue
        print(f"\n{title}")
        print(common.format_table(found[name]["rows"], found[name]["header"]))
    print("\n" + common.format_claims(claims))


def without_models(study: dict) -> dict:
    """A study's runs without their policy (what results.json can hold)."""
    return {name: {k: v for k, v in run.items() if k != "policy"} for name, run in study.items()}


def run_seed(args: Args, initial, tokenizer, device) -> tuple[dict, dict]:
    """Every part of --parts at args.seed: the seed's metrics, and its runs without their policies.
    The blame study scores the samples of the failure modes' GRPO policy (trained here)."""
    rl = lm_world.chapter_lm_args(grpo.Args, args)
    print(f"\nseed {args.seed}")
    held_out = rl.task.held_out(rl.eval_problems)
    metrics, runs, on_policy = {}, {}, None
    if "modes" in args.part_list:
        metrics, runs, on_policy = failure_modes(args, rl, initial, tokenizer, held_out, device)
    if "blame" in args.part_list:
        on_policy = on_policy or run_grpo(initial, tokenizer, rl, held_out, device)
        runs["blame"] = blame_study(on_policy["policy"], tokenizer, rl, rl.task.held_out(args.blame_problems), device)
        metrics |= {blame_key(shown, key): value for shown, row in runs["blame"].items() for key, value in row.items()}
    if "curriculum" in args.part_list:
        study = curriculum_study(tokenizer, rl, args, held_out, device)
        runs["curriculum"] = without_models(study)
        for name, run in study.items():
            metrics |= {curriculum_key(name, f"pass@{k}"): run["final"][f"pass@{k}"] for k in rl.ks}
            if "history" in run:
                easy = run["history"][:easy_updates(rl, args)]  # the curriculum's easy updates, and the same of GRPO's
                metrics |= {curriculum_key(name, "zero_spread"): history_mean(run, "zero_spread"),
                            curriculum_key(name, "sampled"): history_mean(run, "sampled"),
                            curriculum_key(name, "final_kl"): run["final_kl"],
                            curriculum_key(name, "easy_reward"): float(np.mean([h["reward"] for h in easy]))}
    if "pressure" in args.part_list:
        on_policy = on_policy or run_grpo(initial, tokenizer, rl, held_out, device)
        study = pressure_study(initial, tokenizer, rl, args, held_out, device, on_policy)
        runs["pressure"] = without_models(study)
        metrics |= {pressure_key(name, key): value for name, run in study.items()
                    for key, value in [*run["final"].items(), *run["quality"].items()] if key != "correct"}
    if "support" in args.part_list or "groups" in args.part_list:
        # what the failure modes already ran from the weak start, and GRPO from the default cold start
        known = {**runs.get("sparse_reward", {}), "GRPO from the default cold start": on_policy}
        found_metrics, found_runs = weak_start_parts(args, rl, initial, tokenizer, held_out, device, known)
        metrics |= found_metrics
        runs |= found_runs
    return metrics, runs


def weak_start_parts(args: Args, rl: grpo.Args, initial, tokenizer, held_out: list, device,
                     known: dict) -> tuple[dict, dict]:
    """The support and groups parts of --parts at args.seed: their metrics, and their runs without
    policies. GRPO from the weak start serves both; it, the weak start's draws and GRPO from the
    default cold start come from `known` where there (None: not run yet)."""
    weak = weak_start(args, device)
    known = {name: run for name, run in known.items() if run is not None}
    known["GRPO"] = known.get("GRPO") or run_grpo(weak, tokenizer, rl, held_out, device)
    metrics, runs = {}, {}
    if "support" in args.part_list:
        if "GRPO from the default cold start" not in known:
            known["GRPO from the default cold start"] = run_grpo(initial, tokenizer, rl, held_out, device)
        runs["support"] = without_models(support_study(weak, tokenizer, rl, held_out, device, known))
        metrics |= support_metrics(rl, runs["support"])
    if "groups" in args.part_list:
        runs["groups"] = without_models(groups_study(weak, tokenizer, rl, held_out, device, known["GRPO"]))
        for name, run in runs["groups"].items():
            metrics |= {groups_key(name, f"pass@{k}"): run["final"][f"pass@{k}"] for k in rl.ks}
            metrics |= {groups_key(name, "zero_spread"): history_mean(run, "zero_spread"),
                        groups_key(name, "final_kl"): run["final_kl"]}
    return metrics, runs


def support_metrics(rl: grpo.Args, study: dict) -> dict:
    """The support part's measures of each run: pass@k, the held-out problems unsolved, of those
    unsolved at the weak start's first draws the share still unsolved, and the zero-spread share."""
    first, metrics = study["weak cold start"]["final"], {}
    for name, run in study.items():
        metrics |= {support_key(name, f"pass@{k}"): run["final"][f"pass@{k}"] for k in rl.ks}
        metrics[support_key(name, "unsolved")] = unsolved(run["final"])
        if name != "weak cold start":
            metrics[support_key(name)] = still_unsolved(first, run["final"])
        if "history" in run:
            metrics[support_key(name, "zero_spread")] = history_mean(run, "zero_spread")
    return metrics


def failure_modes(args: Args, rl: grpo.Args, initial, tokenizer, held_out: list, device) -> tuple[dict, dict, dict]:
    """The failure modes (--parts modes) at args.seed: metrics, runs without their policies, and
    the on-policy GRPO run (with its policy)."""
    before = grpo.final_evaluation(initial, tokenizer, rl, held_out, device) | sample_quality(
        initial, tokenizer, rl, held_out[:64], device)
    on_policy = run_grpo(initial, tokenizer, rl, held_out, device)
    sweep = beta_sweep(initial, tokenizer, rl, args, held_out, device, on_policy)
    stale = staleness_study(initial, tokenizer, rl, args, held_out, device, on_policy)
    sparse = sparse_reward_study(tokenizer, rl, args, held_out, device, on_policy)
    poor = poor_reference_study(initial, tokenizer, rl, args, held_out, device, sweep)
    skew = skew_study(on_policy["policy"], tokenizer, rl, held_out, device)
    kl = kl_study(tokenizer, rl, held_out, device, sweep)
    metrics = collect_metrics(rl, before, sweep, stale, skew, kl, sparse, poor)
    runs = {"beta_sweep": without_models(sweep), "staleness": without_models(stale),
            "sparse_reward": without_models(sparse), "poor_reference": without_models(poor)}
    return metrics, runs, on_policy


def main(args: Args) -> dict:
    if args.reanalyse:
        return {"claims": common.reanalyse(args, lambda run, stored: check_claims(
            lm_world.chapter_lm_args(grpo.Args, run), run, [seed["metrics"] for seed in stored["seeds"]]))}
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    rl = lm_world.chapter_lm_args(grpo.Args, args)
    print(f"05 study: failure modes ({args.parts}); policy {info['path']}, device {device}, {args.seeds} seeds")
    seeds, runs = [], []
    for seed in range(args.seed, args.seed + args.seeds):
        metrics, seed_runs = run_seed(dataclasses.replace(args, seed=seed), initial, tokenizer, device)
        seeds.append(metrics)
        runs.append(seed_runs)
    means = {key: float(np.mean([metrics[key] for metrics in seeds])) for key in seeds[0]}
    means["tables"] = tables(rl, means, {study: list(found) for study, found in runs[0].items()})
    claims = check_claims(rl, args, seeds)
    if "modes" in args.part_list:
        plot_frontier(runs, means["cold_start_pass@1"], out / "reward_kl.png")
        plot_staleness(runs, out / "staleness.png")
        plot_support_and_anchor(runs, rl.rl_steps * rl.prompts * rl.group_size, out / "support_and_anchor.png")
    if "curriculum" in args.part_list:
        plot_curriculum(runs, out / "curriculum.png")
    wall = time.time() - start
    common.write_results(out, args, wall, means, claims, chapter_args=dataclasses.asdict(rl),
                         seeds=[{"seed": args.seed + i, "metrics": metrics, "runs": found}
                                for i, (metrics, found) in enumerate(zip(seeds, runs))])
    report(claims, means["tables"])
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": means, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
