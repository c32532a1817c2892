"""Study beside 07: does step credit pay more as chains grow? A length experiment with the power to answer.

The essays' thesis about length: one scalar per completion is spread over more tokens as
generations grow, so outcome-only credit should degrade and step-level credit should pay more
the longer the chain. To test credit and nothing else, the task holds what must be learned fixed
while the length grows: every chain of L steps holds exactly one hard step (a multiplication, at
a random position) and L - 1 easy ones (additions and subtractions). The cold start learns from
demonstrations that get the hard step right only `--hard-accuracy` of the time (a solver who
slips, the chain going on from the wrong value), so it is right at the hard step about that often
and at the easy steps almost always: RL has one step to fix, at every length.

Arms, at equal samples and updates (same cold start, prompts and seeds; 07's loop):
  grpo         flat: A_i = (r_i - mean_g) / std_g on every token
  own          each step by its own correctness (the oracle of step credit): r_s = 1 if line s is
               right on its own (lm_world.steps_right), r̃_s normalised over the group's steps,
               A_t = r̃_s(t)
  summed       DeepSeekMath's process credit on the gold labels (07's PRM-GRPO): A_t = Σ_{k≥s(t)} r̃_k,
               which carries a later wrong step's penalty back onto the right steps before it
  ss_grpo      07's SS-GRPO: A_i · w(s)
  ss_signed    SS-GRPO ± (studies/07_credit.py): A_i · (1 - w(s)) where A_i < 0
  ppo_0.95     PPO's learned critic (a copy of the policy's trunk and a value head, trained each
  ppo_1        update) and token GAE(γ = 1, λ), whitened (studies/05_critic.py teaches it)

Measures: held-out pass@1 and samples to a target; the hard step's and the easy steps' accuracy
(does flat credit damage the right steps?); the right prefix (lines before the first wrong one);
at the cold start, each arm's update noise (tr Cov(g) / |E g|² over batches of the same size) and
the variance of the essays' estimator (1/N) Σ_n R_n Σ_t ∇log π(y_nt); the wall time per update. Gains are over flat GRPO, paired by seed, with 95% intervals over seeds.
Verdict, for each arm: yes where its gain over flat grows from the shortest to the longest chain
(the interval of that growth, seed by seed, above 0) and the interval at the longest lies above 0;
no where either interval lies below 0 (the gain shrinks with length, or the arm loses to flat at
the longest chain); else inconclusive. That uniform weighting wastes learning on long generations
is decided on own step credit's gain at the longest chain alone (seed by seed, no growth asked).
The cold start's pass@1 is kept within 0.1-0.7 at every length by design (away from 0 and 1, so
gains and losses can show), so the reward need not be sparse here:
the claims that step credit mitigates a sparse reward are decided only where more than half of
the groups of G that flat GRPO sampled over its updates at the longest chain lack reward spread
(the interval of that share - 1/2 over seeds above 0); premise not met where it lies below 0, else
inconclusive. Every run records each update's zero-spread share. The smallest gap the design can
detect (--detectable-gap, from the pilot; and this run's own) is shown beside each claim: it sizes
the design, it does not decide.

Read beside: credit-assignment-over-long-generations.txt (Why long generations..., When it falls
down), ss-grpo-step-sparse-grpo.txt, credit-assignment-is-the-whole-game.txt §5.

    python studies/07_lengths.py --lengths 2,8 --arms grpo,own --repeats 1 --rl-steps 30   # a taste, ~5 min
    python studies/07_lengths.py --lengths 2,16 --arms grpo,own,summed --out runs/studies/07_lengths_pilot  # pilot
    python studies/07_lengths.py                                         # the sweep (see docs for its time)
    python studies/07_lengths.py --reanalyse runs/studies/07_lengths/results.json  # claims, table, figure again
The sweep's runs/studies/07_lengths predates the zero-spread record: flat GRPO at 16 steps was re-run
(the same runs: identical evaluations) and its shares copied in,
    python studies/07_lengths.py --lengths 16 --arms grpo --workers 1 --out runs/studies/07_lengths_spread  # 346 s
    python studies/07_lengths.py --reanalyse runs/studies/07_lengths/results.json \
        --spread-from runs/studies/07_lengths_spread/results.json
The first run trains the cold start (2-16 steps, cached in runs/cold_start/).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402

ssg = importlib.import_module("07_ss_grpo")
grpo = importlib.import_module("05_grpo_rloo")

ARMS = ("grpo", "own", "summed", "ss_grpo", "ss_signed", "ppo_0.95", "ppo_1")
NAMES = {"grpo": "flat GRPO", "own": "own step credit (oracle)", "summed": "summed process credit",
         "ss_grpo": "SS-GRPO", "ss_signed": "SS-GRPO ±", "ppo_0.95": "PPO critic, λ=0.95", "ppo_1": "PPO critic, λ=1"}
COLOURS = dict(zip(ARMS, ("C0", "C1", "C2", "C3", "C4", "C5", "C6")))  # one colour per arm in every panel
CHAPTER_METHOD = {"grpo": "grpo", "summed": "prm_grpo", "ss_grpo": "ss_grpo", "ss_signed": "ss_grpo"}


@dataclass
class Args(ssg.Args):
    out: str = common.arg("runs/studies/07_lengths", "output folder for figures and results.json")
    lengths: str = common.arg("2,4,8,16", "chain lengths (steps), each arm trained and evaluated at each", item=int)
    arms: str = common.arg(",".join(ARMS), "arms to train (grpo, the flat baseline, always runs)", ARMS, item=str)
    repeats: int = common.arg(3, "seeds per arm and length: --seed, --seed + 1, ...")
    hard_accuracy: float = common.arg(0.4, "cold start: share of demonstrations whose hard step is right")
    target_gain: float = common.arg(0.1, "samples until held-out pass@1 first reaches the cold start's + this")
    detectable_gap: float = common.arg(0.22, "the smallest gain over flat this design detects at --repeats seeds "
                                       "(the pilot's measured_detectable_gap), shown beside the claims")
    critic_lr: float = common.arg(1e-3, "PPO: the critic's AdamW learning rate")
    critic_warmup: int = common.arg(5, "PPO: value-only updates on the cold start's samples before RL (extra samples)")
    variance_batches: int = common.arg(8, "batches per arm whose gradients give the variance at the cold start")
    workers: int = common.arg(2, "runs trained at once, one CPU thread each")
    reanalyse: str = common.arg("", "a results.json of this study: its claims, table and figure re-derived from its "
                                "own measurements by this code, with its own args and out folder; nothing trained")
    spread_from: str = common.arg("", "a results.json of this study that re-ran some of these runs (same arm, length, "
                                  "seed and evaluations): each update's zero-spread share copied from it")
    min_steps: int = common.arg(2, "cold start: fewest operations in a demonstration")
    max_steps: int = common.arg(16, "cold start: most operations in a demonstration (the longest length)")
    sft_steps: int = common.arg(3000, "cold start: SFT steps on demonstrations")
    shortcut_prob: float = common.arg(0.0, "cold start: share of demonstrations that give the bare answer, no steps")
    rl_steps: int = common.arg(40, "RL: policy updates")
    prompts: int = common.arg(8, "RL: prompts per update")
    lr: float = common.arg(3e-4, "RL: AdamW learning rate")
    warmup: int = common.arg(5, "RL: updates of linear learning-rate warmup")
    eval_every: int = common.arg(10, "held-out pass@1 every this many updates")
    eval_problems: int = common.arg(64, "held-out problems at each length")

    SMOKE = dict(ssg.Args.SMOKE, lengths="2,3", min_steps=2, max_steps=3, repeats=2, critic_warmup=1, variance_batches=2,
                 workers=1)

    def __post_init__(self):
        super().__post_init__()
        common.require(self.arm_list and set(self.arm_list) <= set(ARMS), f"--arms must be among {','.join(ARMS)}")
        common.require(self.length_list and all(self.min_steps <= n <= self.max_steps for n in self.length_list),
                       "--lengths must be within --min-steps..--max-steps (the cold start learns those lengths)")
        common.require(0 < self.hard_accuracy <= 1, "--hard-accuracy must be in (0, 1]")
        common.require_positive(self, "repeats", "target_gain", "detectable_gap", "critic_lr", "variance_batches",
                                "workers")
        common.require(self.critic_warmup >= 0, "--critic-warmup must be non-negative")

    @property
    def arm_list(self) -> list[str]:
        return ["grpo"] + [a for a in common.as_list(self.arms, str) if a != "grpo"]

    @property
    def length_list(self) -> list[int]:
        return sorted(set(common.as_list(self.lengths, int)))

    @property
    def cold_start(self) -> lm_world.ColdStart:
        return dataclasses.replace(super().cold_start, one_hard_step=True, hard_step_accuracy=self.hard_accuracy)

    @property
    def task(self) -> lm_world.ChainTask:
        return dataclasses.replace(super().task, one_hard_step=True)


def at_length(args: Args, steps: int, seed: int) -> Args:
    """The same settings on problems of exactly `steps` operations and their token budget (the cold
    start stays the one passed in: it learned every length)."""
    return dataclasses.replace(args, min_steps=steps, max_steps=steps, lengths=str(steps), max_new_tokens=0, seed=seed)


# ============================================================================================
# The arms' credit: each an advantage_fn(completions, rewards (N, G), problems) -> (B, T) for 07's loop
# ============================================================================================
def own_step_advantages(right: torch.Tensor, valid: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each step credited by its own correctness, (B, S): the per-step counterpart of 07's process_advantages,
    each step's normalised reward r̃_s not summed over the steps after it (studies/07_credit.py uses it too)."""
    summed = ssg.process_advantages(right, valid, group_size)  # A_s = Σ_{k≥s} r̃_k
    # r̃_s = A_s - A_{s+1}: the step's own normalised reward
    return summed - torch.nn.functional.pad(summed[:, 1:], (0, 1))


def own_credit(tokenizer, args: Args):
    def advantage_fn(completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        repeated = [p for p in problems for _ in range(args.group_size)]
        step_ids, _, _ = ssg.read_steps(tokenizer, completions, repeated)
        texts = lm_world.completion_texts(tokenizer, completions)
        right = [lm_world.steps_right(p, t) for p, t in zip(repeated, texts)]
        S = int(step_ids.max()) + 1
        # a cut completion that ends in a newline has an empty last line with no token: no credit to give it
        grid = torch.tensor([r[:S] + [False] * (S - len(r)) for r in right], device=step_ids.device)
        valid = torch.arange(S, device=step_ids.device)[None] < (step_ids.max(1).values + 1)[:, None]
        return ssg.broadcast_to_tokens(own_step_advantages(grid.float(), valid, args.group_size), step_ids)
    return advantage_fn


class SignedCredit(ssg.Credit):
    """SS-GRPO ± (studies/07_credit.py): A_i · (1 - w(s)) where A_i < 0, so in a failed completion the
    steps the estimator rates low carry the blame. From the chapter's A_i · w(s): A_i (1 - w) = A_i - A_i w."""

    def __call__(self, completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        weighted = super().__call__(completions, rewards, problems)
        A = torch.where(completions.completion_mask, ssg.grpo_advantages(rewards).flatten()[:, None], 0.0)
        return torch.where(A < 0, A - weighted, weighted)


class TokenCritic(torch.nn.Module):
    """studies/05_critic.py's separate critic, restated: a copy of the policy's trunk and a linear
    value head, zero at first; V(s_t) read where completion token y_t is about to be sampled."""

    def __init__(self, policy):
        super().__init__()
        self.trunk = copy.deepcopy(policy.base_model)
        self.head = torch.nn.Linear(lm_world.head_width(policy), 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, completions: lm_world.Completions) -> torch.Tensor:
        mask = completions.attention_mask
        hidden = self.trunk(input_ids=completions.sequences, attention_mask=mask,
                            position_ids=lm_world.positions_from_mask(mask)).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)[:, completions.prompt_length - 1:-1]


class CriticCredit:
    """PPO's credit: token GAE(γ = 1, λ) on the critic's V, whitened over the batch's tokens; then
    one step of the value loss ½ (V(s_t) - (A_t + V(s_t)))² on the same batch, as PPO does after
    computing its advantages."""

    def __init__(self, policy, args: Args, lam: float):
        self.critic, self.lam, self.max_grad_norm = TokenCritic(policy), lam, args.max_grad_norm
        self.optimizer = torch.optim.AdamW(self.critic.parameters(), lr=args.critic_lr, weight_decay=0.0)

    def __call__(self, completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        mask = completions.completion_mask
        with torch.no_grad():
            values = self.critic(completions)
        advantages = ssg.token_gae(values, rewards.flatten(), mask, 1.0, self.lam)
        self.fit(completions, torch.where(mask, advantages + values, 0.0))  # targets A_t + V(s_t)
        real = advantages[mask]
        return torch.where(mask, (advantages - real.mean()) / (real.std() + 1e-8), 0.0)

    def fit(self, completions, targets: torch.Tensor) -> None:
        mask = completions.completion_mask
        loss = 0.5 * torch.where(mask, (self.critic(completions) - targets) ** 2, 0.0).sum() / mask.sum().clamp(min=1)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.max_grad_norm)
        self.optimizer.step()

    def warm_up(self, policy, tokenizer, args: Args, device) -> None:
        """Value-only updates on the cold start's samples (Monte Carlo targets: γ = 1 and one reward at
        the end make every token's return R): a critic at V = 0 would make PPO's first updates REINFORCE."""
        rng, generator = np.random.default_rng(args.seed + 11), torch.Generator(device).manual_seed(args.seed + 11)
        for _ in range(args.critic_warmup):
            completions, rewards, _ = sample_batch(policy, tokenizer, args, rng, generator, device)
            self.fit(completions, rewards.flatten()[:, None] * completions.completion_mask)


def make_arm(arm: str, policy, tokenizer, args: Args, device):
    """An arm's advantage_fn, fresh for one run (its learned parts, if any, seeded by the run's seed)."""
    if arm == "own":
        return own_credit(tokenizer, args)
    if arm.startswith("ppo_"):
        torch.manual_seed(args.seed)
        credit = CriticCredit(policy, args, float(arm.split("_")[1]))
        credit.critic.to(device)
        credit.warm_up(policy, tokenizer, args, device)
        return credit
    credit = ssg.make_credit(CHAPTER_METHOD[arm], tokenizer, args, device)
    if arm == "ss_signed":  # the chapter's estimator, read the signed way
        return SignedCredit(credit.method, tokenizer, args, credit.estimator, args.seed)
    return credit


def sample_batch(policy, tokenizer, args: Args, rng, generator, device) -> tuple:
    """G completions of `prompts` fresh training problems, and their rewards (N, G), as 07's loop draws them."""
    exclude = frozenset(p.prompt for p in args.task.held_out())
    problems = args.task.sample(args.prompts, rng, exclude=exclude)
    repeated = [p for p in problems for _ in range(args.group_size)]
    completions, texts = lm_world.sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens,
                                         generator, device)
    rewards = lm_world.verifier_rewards(repeated, texts, completions.truncated).to(device)
    return completions, rewards.view(args.prompts, args.group_size), problems


# ============================================================================================
# Measures
# ============================================================================================
def step_accuracy(policy, tokenizer, held_out: list, args: Args, device) -> dict:
    """Held-out pass@1 over final_samples per problem, the hard step's and the easy steps' own
    accuracy (over the completions that write them), and the right prefix (lines before the first
    wrong one), the same draws for every arm."""
    repeated = [p for p in held_out for _ in range(args.final_samples)]
    completions, texts = lm_world.sample(policy, tokenizer, [p.prompt for p in repeated], args.max_new_tokens,
                                         torch.Generator(device).manual_seed(args.seed + 2), device)
    rewards = lm_world.verifier_rewards(repeated, texts, completions.truncated)
    hard, easy, prefix = [], [], []
    for problem, text in zip(repeated, texts):
        right = lm_world.steps_right(problem, text)[:len(problem.ops)]
        k = next(i for i, (op, _) in enumerate(problem.ops) if op == "*")
        hard += right[k:k + 1]
        easy += [ok for i, ok in enumerate(right) if i != k]
        wrong = lm_world.first_wrong_step(problem, text)
        prefix.append(len(problem.lines) if wrong is None else wrong)
    return {"pass@1": float(rewards.mean()), "hard": common.mean_or_nan(hard), "easy": common.mean_or_nan(easy),
            "right_prefix": float(np.mean(prefix))}


def batch_gradients(policy, tokenizer, args: Args, device, advantage_fn, per_token_mean: bool = True) -> torch.Tensor:
    """The gradient of -Σ_i Σ_t A_it log π(y_it) / N, over each completion's tokens their mean (the
    loop's loss) or their sum (the essays' estimator), on each of variance_batches batches at the cold
    start, (batches, parameters): the same batches for every caller."""
    rng, generator = np.random.default_rng(args.seed + 21), torch.Generator(device).manual_seed(args.seed + 21)
    gradients = []
    for _ in range(args.variance_batches):
        completions, rewards, problems = sample_batch(policy, tokenizer, args, rng, generator, device)
        advantages = advantage_fn(completions, rewards, problems).detach()
        logp, _ = lm_world.token_logprobs(policy, completions.sequences, completions.attention_mask,
                                          completions.prompt_length)
        mask = completions.completion_mask
        per_completion = torch.where(mask, advantages * logp, 0.0).sum(1)
        loss = -(per_completion / mask.sum(1).clamp(min=1) if per_token_mean else per_completion).mean()
        policy.zero_grad()
        loss.backward()
        gradients.append(torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None]).cpu())
    policy.zero_grad()
    return torch.stack(gradients).double()


def gradient_noise(policy, tokenizer, arm: str, args: Args, device) -> float:
    """tr Cov(g) / |E g|² of the update an arm takes at the cold start (learned credit learns on the
    batches, as in a run's first updates)."""
    g = batch_gradients(policy, tokenizer, args, device, make_arm(arm, policy, tokenizer, args, device))
    signal = float(g.mean(0).pow(2).sum())
    return float(g.var(0).sum()) / signal if signal > 0 else math.nan  # no signal (no mixed group): undefined


def outcome_variance(policy, tokenizer, args: Args, device) -> float:
    """tr Cov(g) of the essays' estimator g = (1/N) Σ_n R_n Σ_t ∇log π(y_nt): the raw outcome on every
    token, summed over the completion."""
    def outcome(completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        return rewards.flatten()[:, None] * completions.completion_mask

    return float(batch_gradients(policy, tokenizer, args, device, outcome, per_token_mean=False).var(0).sum())


def recording_spread(credit, shares: list):
    """The arm's advantage_fn, which also appends to `shares`, each update, the share of the update's
    groups whose G rewards are all equal (no reward spread: a group advantage of 0 on every completion)."""
    def advantage_fn(completions, rewards: torch.Tensor, problems: list) -> torch.Tensor:
        shares.append(float(grpo.zero_spread(rewards).float().mean()))
        return credit(completions, rewards, problems)
    return advantage_fn


def run_job(job: tuple) -> dict:
    """One arm at one length and seed: RL from the cold start (07's loop), then its measures."""
    args, arm, steps, seed = job
    torch.set_num_threads(1)
    at = at_length(args, steps, seed)
    initial, tokenizer, _ = lm_world.cold_start_policy(args.cold_start, at.device, args.cache, progress=False)
    held_out = at.task.held_out(at.eval_problems)
    policy, start, zero_spread = copy.deepcopy(initial), time.time(), []
    credit = recording_spread(make_arm(arm, policy, tokenizer, at, at.device), zero_spread)
    result = ssg.train(policy, lm_world.frozen_copy(initial), tokenizer, at, credit, held_out, at.device,
                       f"{arm} L={steps} seed {seed}")
    history = result["history"]
    return {"arm": arm, "steps": steps, "seed": seed, "evals": result["evals"], "wall_clock_s": time.time() - start,
            "update_s": float(np.mean([h["generate_s"] + h["update_s"] for h in history])),
            "final": step_accuracy(policy, tokenizer, held_out, at, at.device), "zero_spread": zero_spread}


def cold_start_job(job: tuple) -> dict:
    """The cold start at one length and seed: its measures, and the gradient noise of each arm's credit."""
    args, steps, seed = job
    torch.set_num_threads(1)
    at = at_length(args, steps, seed)
    initial, tokenizer, _ = lm_world.cold_start_policy(args.cold_start, at.device, args.cache, progress=False)
    measured = step_accuracy(initial, tokenizer, at.task.held_out(at.eval_problems), at, at.device)
    noise = {arm: gradient_noise(copy.deepcopy(initial), tokenizer, arm, at, at.device) for arm in args.arm_list}
    return {"steps": steps, "seed": seed, **measured, "gradient_noise": noise,
            "outcome_variance": outcome_variance(copy.deepcopy(initial), tokenizer, at, at.device)}


def cold_start_means(cold: list) -> dict:
    """The cold start's measures at each length, the mean over seeds."""
    means = {}
    for n in sorted({c["steps"] for c in cold}):
        mine = [c for c in cold if c["steps"] == n]
        means[n] = {k: float(np.mean([c[k] for c in mine]))
                    for k in ("pass@1", "hard", "easy", "right_prefix", "outcome_variance")}
        means[n]["gradient_noise"] = {arm: float(np.mean([c["gradient_noise"][arm] for c in mine]))
                                      for arm in mine[0]["gradient_noise"]}
    return means


def run_all(function, jobs: list, workers: int, desc: str) -> list:
    """Jobs over `workers` processes (each loads the cached cold start), results in the jobs' order."""
    if workers == 1:
        return [function(job) for job in tqdm(jobs, desc=desc)]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return list(tqdm(pool.map(function, jobs), total=len(jobs), desc=desc))


# ============================================================================================
# Analysis: gains over flat, paired by seed, with intervals; the verdict rule
# ============================================================================================
def samples_to_target(evals: list, target: float) -> float:
    """Completions sampled before held-out pass@1 first reached `target` (NaN: never)."""
    return next((e["samples"] for e in evals if e["pass@1"] >= target), math.nan)


def gains(runs: list, arm: str, steps: int, key: str = "pass@1") -> list[float]:
    """The arm's final `key` minus flat GRPO's, seed by seed (paired: same seed, prompts and draws)."""
    by_seed = {(r["arm"], r["seed"]): r["final"][key] for r in runs if r["steps"] == steps}
    return [by_seed[(arm, s)] - by_seed[("grpo", s)] for a, s in by_seed if a == arm]


def verdict(by_length: dict, growth: dict) -> bool | None:
    """yes: the gain over flat grows from the shortest to the longest chain (the 95% interval of the
    paired growth, seed by seed, lies above 0) and the longest's interval lies above 0; no: either
    lies below 0; otherwise None (inconclusive)."""
    longest = by_length[max(by_length)]
    if growth["low"] > 0 and longest["low"] > 0:
        return True
    if growth["high"] < 0 or longest["high"] < 0:
        return False
    return None


def analyse(args: Args, runs: list, cold: list) -> dict:
    """Per arm and length: the gain over flat with its interval; the smallest gap detectable at
    --repeats seeds from the spread of the paired gains (t · sd / √n, sd pooled over arms and lengths)."""
    table = {arm: {n: dict(zip(("mean", "low", "high"), common.mean_interval(gains(runs, arm, n))))
                   for n in args.length_list} for arm in args.arm_list if arm != "grpo"}
    spreads = [np.var(gains(runs, arm, n), ddof=1) for arm in table for n in args.length_list if args.repeats > 1]
    pooled = math.sqrt(np.mean(spreads)) if spreads else math.nan
    detectable = common.t_quantile(args.repeats - 1) * pooled / math.sqrt(args.repeats) if args.repeats > 1 else math.nan
    before = cold_start_means(cold)
    to_target = {arm: {n: [samples_to_target(r["evals"], before[n]["pass@1"] + args.target_gain) for r in runs
                           if r["arm"] == arm and r["steps"] == n] for n in args.length_list} for arm in args.arm_list}
    shortest, longest = min(args.length_list), max(args.length_list)
    growth = {arm: dict(zip(("mean", "low", "high"), common.mean_interval(
        np.subtract(gains(runs, arm, longest), gains(runs, arm, shortest))))) for arm in table}
    # each arm's final pass@1 by seed, so a claim on one length can pair the arms seed by seed
    by_seed = {arm: {n: {r["seed"]: r["final"]["pass@1"] for r in runs if r["arm"] == arm and r["steps"] == n}
                     for n in args.length_list} for arm in args.arm_list}
    # flat GRPO's share of sampled groups without reward spread at the longest chain, by seed (NaN: not recorded)
    flat = [r for r in runs if r["arm"] == "grpo" and r["steps"] == longest]
    zero_spread = {r["seed"]: common.mean_or_nan(r.get("zero_spread", [])) for r in flat}
    return {"gain": table, "growth": growth, "pooled_sd": pooled, "measured_detectable_gap": detectable,
            "to_target": to_target, "pass@1_by_seed": by_seed, "flat_zero_spread_by_seed": zero_spread}


# ============================================================================================
# Report: claims, figure, metrics
# ============================================================================================
CLAIMS = {
    "own": ("over-long-generations, When it falls down", "uniform token-level weighting wastes the policy's capacity to "
            "learn which decisions matter: crediting each step by its own correctness gains more over flat GRPO as "
            "chains grow"),
    "summed": ("over-long-generations, Process rewards", "per-step process rewards convert the sparse credit problem "
               "into a dense one: DeepSeekMath's summed process credit gains more over flat GRPO as chains grow"),
    "ss_grpo": ("SS-GRPO article", "a learned step weight recovers step credit without per-step evaluation: SS-GRPO's "
                "gain over flat GRPO grows with chain length"),
    "ss_signed": ("SS-GRPO article (ours: signed)", "SS-GRPO ±, which puts a failed completion's blame on its "
                  "low-weight steps, gains more over flat GRPO as chains grow"),
    "ppo_0.95": ("whole-game §5", "a learned critic gives per-token credit: PPO with token GAE (λ = 0.95) gains more "
                 "over flat GRPO as chains grow"),
    "ppo_1": ("whole-game §5", "PPO with a learned critic and token GAE (λ = 1) gains more over flat GRPO as chains grow"),
}
MITIGATION = {"own": "each step credited by its own gold correctness",
              "summed": "DeepSeekMath's summed process credit on the gold step labels"}


def check_claims(args: Args, analysis: dict, cold: list) -> list[dict]:
    before = cold_start_means(cold)
    inside = [0.1 <= c["pass@1"] <= 0.7 for c in before.values()]
    claims = [common.claim("design (this study)", "the cold start's pass@1 lies within 0.1-0.7 at every length, so "
                           "every arm has room to gain and to lose", "cold-start pass@1 by length (mean of seeds): "
                           + ", ".join(f"{n}: {c['pass@1']:.3f}" for n, c in before.items())
                           + "; 0.1-0.7 is the design's premise, chosen before the sweep, not a measured threshold: the "
                           "cold start kept away from 0 and 1 so that gains and losses over flat can show",
                           all(inside))]
    for arm, (source, statement) in CLAIMS.items():
        if arm not in analysis["gain"]:
            continue
        by_length = analysis["gain"][arm]
        measured = (f"gain over flat GRPO in held-out pass@1, mean [95% interval over {args.repeats} seeds], by "
                    "length: " + "; ".join(f"{n}: {g['mean']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]"
                                          for n, g in by_length.items())
                    + f"; the gap the design was planned to detect (the pilot's) {args.detectable_gap:.3f}")
        growth = analysis["growth"][arm]
        measured += (f"; growth from {min(by_length)} to {max(by_length)} steps, seed by seed: {growth['mean']:+.3f} "
                     f"[{growth['low']:+.3f}, {growth['high']:+.3f}]")
        holds = verdict(by_length, growth) if all(inside) else None
        if not all(inside):
            measured += " (premise not met: the cold start is outside 0.1-0.7 at some length)"
        claims.append(common.claim(source, statement, measured, holds))
    if "own" in analysis["gain"]:
        claims.append(waste_claim(args, analysis["pass@1_by_seed"], all(inside)))
    sparse = sparse_premise(args, analysis["flat_zero_spread_by_seed"])
    claims += [mitigation_claim(args, arm, analysis["gain"][arm], all(inside), sparse)
               for arm in MITIGATION if arm in analysis["gain"]]
    claims.append(variance_claim(cold))
    return claims


def waste_claim(args: Args, by_seed: dict, inside: bool) -> dict:
    """Does uniform weighting waste learning on long generations? The statement's own quantity: at the
    longest chain, own step credit's held-out pass@1 minus flat GRPO's, seed by seed, read by
    common.seed_verdict (the statement names no size). Not its growth with length (the arm's other
    claim) and no sparse reward assumed (the statement names none); the cold start within its window
    is kept, as for every comparison here: it leaves both arms room to gain and to lose."""
    longest = max(args.length_list)
    own, flat = by_seed["own"][longest], by_seed["grpo"][longest]
    seeds = sorted(own)
    holds, text = common.seed_verdict([own[s] - flat[s] for s in seeds])
    measured = (f"held-out pass@1 at {longest} steps, own step credit - flat GRPO, seed by seed: "
                + ", ".join(f"{own[s]:.3f} - {flat[s]:.3f} = {own[s] - flat[s]:+.3f}" for s in seeds)
                + f"; mean [95% interval over {len(seeds)} seeds]: {text}; the gap the design was planned to detect "
                f"(the pilot's) {args.detectable_gap:.3f}; no sparse reward assumed (the statement names none)")
    if not inside:
        measured += " (premise not met: the cold start is outside 0.1-0.7 at some length)"
    return common.claim("over-long-generations, When it falls down", "uniform weighting wastes learning on long "
                        f"generations: {MITIGATION['own']} beats flat GRPO at the longest chain ({longest} steps)",
                        measured, holds if inside else None)


def sparse_premise(args: Args, zero_spread: dict) -> tuple[bool | None, str]:
    """Is the reward sparse at the longest chain, as the mitigation statement assumes? The essay's cause,
    "no learning signal until pass@k luck", is a group without reward spread (A = 0 on all of it), so the
    premise is read on the groups flat GRPO sampled over its updates (`zero_spread`: the share by seed),
    as the sparse-reward study's (studies/05_failure_modes.py). Not met where the interval of share - 1/2
    over seeds lies below 0: most groups then carry a signal, whatever stricter "almost all" is meant;
    met where it lies above 0 (the least "no signal" can mean: most groups without one); else not shown."""
    seeds = sorted(zero_spread)
    share = [zero_spread[s] for s in seeds]
    sparse, text = common.seed_verdict(np.subtract(share, 0.5))
    source = f" (recorded by a re-run of the same runs: {args.spread_from})" if args.spread_from else ""
    return sparse, (f"share of the groups of {args.group_size} that flat GRPO sampled over its {args.rl_steps} updates "
                    f"at {max(args.length_list)} steps with zero reward spread, by seed{source}: "
                    + ", ".join(f"{v:.3f}" for v in share) + f"; minus one half, mean [95% interval over "
                    f"{len(seeds)} seeds]: {text}")


def mitigation_claim(args: Args, arm: str, by_length: dict, inside: bool, sparse: tuple[bool | None, str]) -> dict:
    """Does step credit from a trusted judge (the gold step labels) mitigate a sparse reward? At the
    longest chain: yes if the gain's interval lies above 0, no if below 0, else inconclusive; whether
    it grows with length is the arm's other claim. Decided only where the reward is sparse there
    (`sparse`: sparse_premise's verdict and text; premise not met where it is shown not sparse) and
    the cold start within its window."""
    longest = max(by_length)
    gain = by_length[longest]
    is_sparse, sparse_text = sparse
    holds = (True if gain["low"] > 0 else False if gain["high"] < 0 else None) if inside and is_sparse else None
    measured = (f"gain in held-out pass@1 at {longest} steps {gain['mean']:+.3f} [95% interval over {args.repeats} "
                f"seeds: {gain['low']:+.3f}, {gain['high']:+.3f}]; the gap the design was planned to detect (the "
                f"pilot's) {args.detectable_gap:.3f}; {sparse_text}")
    if is_sparse is False:
        measured += (" (premise not met: the reward is not sparse here, fewer than half of flat GRPO's groups are "
                     "without spread)")
    elif is_sparse is None:
        measured += " (the premise, a sparse reward, is not shown: more than half of the groups without spread)"
    if not inside:
        measured += " (premise not met: the cold start is outside 0.1-0.7 at some length)"
    return common.claim("whole-game §7.3", f"process rewards from a trustworthy judge mitigate a sparse reward: "
                        f"{MITIGATION[arm]} beats flat GRPO at the longest chain ({longest} steps)", measured, holds)


def variance_claim(cold: list) -> dict:
    """Does the essays' estimator's variance grow roughly linearly with the length? The log-log
    slope per seed, read by common.slope_verdict. The design holds the success rate near one value
    at every length, so the length alone changes."""
    seeds = sorted({c["seed"] for c in cold})
    slopes = [common.loglog_slope([c["steps"] for c in cold if c["seed"] == s],
                                  [c["outcome_variance"] for c in cold if c["seed"] == s]) for s in seeds]
    holds, slope = common.slope_verdict(slopes)
    variance = {n: c["outcome_variance"] for n, c in cold_start_means(cold).items()}
    return common.claim(
        "over-long-generations, Why long generations make credit assignment hard",
        "with one terminal reward, the gradient's variance grows roughly linearly with the length",
        "the estimator (1/N) Σ_n R_n Σ_t ∇log π(y_nt) at the cold start, tr Cov(g) by chain length (mean of "
        "seeds): " + ", ".join(f"{n}: {v:.3g}" for n, v in variance.items())
        + f"; log-log slope, mean [95% interval over {len(seeds)} seeds]: {slope} (roughly linear: within "
        f"{common.ROUGHLY_LINEAR[0]}-{common.ROUGHLY_LINEAR[1]}, nearer 1 than 0 or 2)", holds if len(variance) >= 3 else None)


def plot(args: Args, analysis: dict, runs: list, cold: list, path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    lengths = args.length_list
    for arm, by_length in analysis["gain"].items():
        mean = [by_length[n]["mean"] for n in lengths]
        axes[0].plot(lengths, mean, "o-", color=COLOURS[arm], label=NAMES[arm])
        axes[0].fill_between(lengths, [by_length[n]["low"] for n in lengths], [by_length[n]["high"] for n in lengths],
                             color=COLOURS[arm], alpha=0.15, linewidth=0)
    axes[0].axhline(0, color="black", linewidth=0.8)
    axes[0].axhspan(-args.detectable_gap, args.detectable_gap, color="gray", alpha=0.12, label="below detectable gap")
    axes[0].set(xscale="log", xlabel="chain length (steps)", ylabel="gain over flat GRPO, held-out pass@1",
                title=f"Step credit against flat, mean and 95% interval ({args.repeats} seeds)")
    for key, ax, title in (("hard", axes[1], "hard step accuracy (its own)"),
                           ("easy", axes[2], "easy steps' accuracy (their own)")):
        ax.plot(lengths, [cold_start_means(cold)[n][key] for n in lengths], "k--", label="cold start")
        for arm in args.arm_list:
            ax.plot(lengths, [np.mean([r["final"][key] for r in runs if r["arm"] == arm and r["steps"] == n])
                              for n in lengths], "o-", color=COLOURS[arm], label=NAMES[arm])
        ax.set(xscale="log", xlabel="chain length (steps)", title=f"{title}, after RL (mean of seeds)")
    for ax in axes:
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.minorticks_off()  # the log axis's minor ticks would carry unlabelled lengths
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    common.save_figure(fig, path)


def metrics_and_tables(args: Args, analysis: dict, runs: list, cold: list) -> dict:
    metrics = {"detectable_gap": args.detectable_gap, "measured_detectable_gap": analysis["measured_detectable_gap"],
               "pooled_sd_of_gains": analysis["pooled_sd"]}
    rows, before = [], cold_start_means(cold)
    for n in args.length_list:
        c = before[n]
        metrics |= {f"length{n}_cold_start_{k}": c[k] for k in ("pass@1", "hard", "easy", "right_prefix")}
        rows.append([n, "cold start", c["pass@1"], c["hard"], c["easy"], c["right_prefix"], "-", "-", "-", "-"])
        for arm in args.arm_list:
            mine = [r for r in runs if r["arm"] == arm and r["steps"] == n]
            final = {k: float(np.mean([r["final"][k] for r in mine])) for k in ("pass@1", "hard", "easy", "right_prefix")}
            gain = analysis["gain"].get(arm, {}).get(n)
            reached = [x for x in analysis["to_target"][arm][n] if math.isfinite(x)]
            update_s = float(np.mean([r["update_s"] for r in mine]))
            metrics |= {f"length{n}_{arm}_{k}": v for k, v in final.items()} | {
                f"length{n}_{arm}_gradient_noise": c["gradient_noise"][arm], f"length{n}_{arm}_update_s": update_s,
                f"length{n}_{arm}_samples_to_target": common.mean_or_nan(reached)}
            if gain:
                metrics |= {f"length{n}_{arm}_gain_{k}": v for k, v in gain.items()}
            rows.append([n, NAMES[arm], final["pass@1"], final["hard"], final["easy"], final["right_prefix"],
                         f"{gain['mean']:+.3f} [{gain['low']:+.3f}, {gain['high']:+.3f}]" if gain else "-",
                         f"{common.mean_or_nan(reached):,.0f} ({len(reached)}/{len(mine)})" if reached else "never",
                         f"{c['gradient_noise'][arm]:.3g}", f"{update_s:.2f}"])
    header = ["L", "arm", "pass@1", "hard", "easy", "prefix", "gain over flat [95%]", "samples to target",
              "grad noise", "s/update"]
    return metrics | {"tables": {"lengths": {"header": header, "rows": rows}}}


def measure(args: Args) -> tuple[Args, list, list, float]:
    """Train and evaluate every arm at every length and seed: (args, cold-start measurements, runs, seconds)."""
    start = time.time()
    args, device, _ = common.start_run(args)
    args = dataclasses.replace(args, device=str(device))
    lm_world.cold_start_policy(args.cold_start, device, args.cache)  # trained once here, loaded by every worker
    print(f"07 lengths: arms {', '.join(args.arm_list)} x lengths {args.length_list} x {args.repeats} seeds, "
          f"{args.rl_steps} updates of {args.prompts} x {args.group_size} completions")
    cold = run_all(cold_start_job, [(args, n, args.seed + i) for n in reversed(args.length_list)
                                    for i in range(args.repeats)], args.workers, "cold start")
    jobs = [(args, arm, n, args.seed + i) for n in reversed(args.length_list) for arm in args.arm_list
            for i in range(args.repeats)]  # the longest first: the pool ends on short jobs
    return args, cold, run_all(run_job, jobs, args.workers, "runs"), time.time() - start


def reload(path: str) -> tuple[Args, list, list, float]:
    """A past run's (args, cold-start measurements, runs, seconds), as `measure` returned them."""
    saved = json.loads(Path(path).read_text())
    stored = common.stored_numbers({"cold_start": saved["cold_start"], "runs": saved["runs"]})
    return Args(**saved["args"]), stored["cold_start"], stored["runs"], saved["wall_clock_s"]


def with_spread(runs: list, path: str) -> list:
    """The runs, each re-run in `path` given the zero-spread shares that the re-run recorded (a run
    written before they were recorded has none). Same arm, length, seed and evaluations, or it stops."""
    try:
        again = common.stored_numbers(json.loads(Path(path).read_text())["runs"])
    except (OSError, ValueError, KeyError):
        common.fail(f"--spread-from {path}: not a results.json of this study")
    index = {(r["arm"], r["steps"], r["seed"]): i for i, r in enumerate(runs)}
    runs = list(runs)
    for rerun in again:
        i = index.get((rerun["arm"], rerun["steps"], rerun["seed"]))
        if i is None or "zero_spread" not in rerun or (runs[i]["evals"], runs[i]["final"]) != (rerun["evals"],
                                                                                            rerun["final"]):
            common.fail(f"--spread-from {path}: its {rerun['arm']} run at {rerun['steps']} steps, seed "
                        f"{rerun['seed']} is not a re-run of one of these (or recorded no zero-spread share)")
        runs[i] = runs[i] | {"zero_spread": rerun["zero_spread"]}
    return runs


def main(args: Args) -> dict:
    spread_from = args.spread_from
    args, cold, runs, wall = reload(args.reanalyse) if args.reanalyse else measure(args)
    if spread_from:  # the shares an older run did not record, from a re-run of the same runs
        args, runs = dataclasses.replace(args, spread_from=spread_from), with_spread(runs, spread_from)
    out = common.make_out_dir(args.out)
    analysis = analyse(args, runs, cold)
    claims = check_claims(args, analysis, cold)
    plot(args, analysis, runs, cold, out / "gain_by_length.png")
    metrics = metrics_and_tables(args, analysis, runs, cold)
    common.write_results(out, args, wall, metrics, claims, cold_start=cold, runs=runs, analysis=analysis)
    table = metrics["tables"]["lengths"]
    print("\n" + common.format_table(table["rows"], table["header"]) + "\n\n" + common.format_claims(claims))
    print(f"\nsmallest detectable gap at {args.repeats} seeds, from this run's spread: "
          f"{analysis['measured_detectable_gap']:.3f} (used: {args.detectable_gap:.3f}); wall clock {wall:.0f} s; "
          f"results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
