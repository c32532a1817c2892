"""05 study — the classic alternative the group baselines replace: PPO with a learned token
critic and GAE over tokens; what the critic costs, whether its V tells the truth, and what
completion length does to the gradient's variance under each Ψ.

  PPO   A_it = Σ_l λ^l δ_{t+l},  δ_t = r_t + V(s_{t+1}) - V(s_t)
        GAE(γ = 1, λ) over tokens, V a learned critic (a copy of the policy's trunk, or a value
        head on the policy itself), then the chapter's clipped, KL-penalised step

Length is the essays' argument: the score Σ_t ∇ log π(y_t) of a T-token completion sums T terms,
so a terminal reward's gradient grows noisier with T. We measure each completion's gradient under
each Ψ (torch.func) at the cold start and fit the slope of its variance against the completion
length, and put the essay's cause, one R on every token, beside the same R on one token of the
same completion (a sum of T terms against one), and GRPO's advantage on every token beside the same
advantage on the tokens that mattered alone (a failed completion's first wrong line, all of a right
one), each one's signal per unit of noise; and we ask whether the critic tells the truth:
its V at the first token and at each step boundary against P(success | prefix) estimated by fresh
rollouts from that prefix, and the credit V(after a step) - V(before it) it feeds into Ψ against
the same difference of the rollout truth.
Beside PPO, GRPO at the same budget, and the training state each holds.

The whole study runs on --seeds seeds (the cold start is the same; prompts, samples and the
critics' warm-up differ), and each claim decides on the 95% interval over them
(common.seed_verdict): the slopes per seed, the log of one arm's variance or signal over
another's, the critics' squared errors net of the rollouts' noise, GRPO's held-out pass@1 minus
PPO's. Where an essay's statement assumes a critic that is wrong, or one to trust, the claim
decides only where the seeds show it (wrong: the net error's interval above 0; to trust: a zero,
the interval holding 0 and staying below the rollouts' own error), and says "premise not met" where
they show the reverse. The essay's GAE branch also assumes long or semi-dense episodes: read off
the run's own completions.

    python studies/05_critic.py             # 664 s on 2 CPU cores (3 seeds), beside other jobs;
                                            # writes runs/studies/05_critic/
    python studies/05_critic.py --reanalyse runs/studies/05_critic/results.json
                                            # its claims again from the stored seeds, nothing trained
Whether the critic pays more as chains grow is studies/07_lengths.py's question (its PPO arms).

Read beside: credit-assignment-over-long-generations.txt (length, variance, the critic's memory);
credit-assignment-is-the-whole-game.txt §5 (group baselines or PPO + GAE). Papers: Schulman et
al. 2016 (GAE); Ouyang et al. 2022 (InstructGPT: PPO with a value model).
Figures: learning_curves.png (held-out pass@1, PPO and GRPO, mean of the seeds),
gradient_variance.png (per-completion gradient variance vs length, log-log, per Ψ, a line per
seed), critic_truth.png (the first seed's critics' V against rollout truth, before and after PPO).
"""

import copy
import dataclasses
import importlib
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules
import common  # noqa: E402
import lm_world  # noqa: E402

grpo = importlib.import_module("05_grpo_rloo")

METHODS = ("grpo", "ppo", "ppo_head")  # GRPO, and PPO with each kind of critic
CRITICS = {"ppo": "separate", "ppo_head": "head"}  # the kind of critic each PPO method learns
NAMES = {"grpo": "GRPO", "ppo": "PPO (critic, GAE)", "ppo_head": "PPO (value head on the policy)"}
SHORT = {"ppo": "PPO, critic", "ppo_head": "PPO, value head"}  # in the tables, beside their λ
BARE, ONE_TOKEN = "Ψ = R (no baseline)", "R on one token only"  # the outcome on every token; on one, drawn uniformly
GROUP_BASELINES = ("reinforce", "rloo", "grpo")  # the baselines whose gradient variance the study compares


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/05_critic", "output folder for figures and results.json")
    methods: str = common.arg("grpo,ppo,ppo_head", "what to train: GRPO (the baseline), PPO with a separate "
                              "critic, PPO with a value head on the policy", METHODS, item=str)
    gae_lambda: float = common.arg(0.95, "PPO: GAE's λ over tokens (γ = 1)")
    critic_lr: float = common.arg(1e-3, "PPO: the critic's AdamW learning rate")
    critic_warmup: int = common.arg(10, "PPO: value-only updates on the cold start's samples before PPO begins")
    critic_lambdas: str = common.arg("", "extra GAE λ at which PPO is also trained (its critic then tested against "
                                     "rollouts; the variance study measures each too)", item=float, empty=True)
    truth_problems: int = common.arg(32, "held-out problems whose prefixes test the critic")
    truth_rollouts: int = common.arg(16, "fresh completions from each prefix: the rollout estimate of "
                                     "P(success | prefix)")
    variance_prompts: int = common.arg(64, "prompts (G completions each) whose per-completion gradients are measured")
    variance_bins: int = common.arg(6, "completion-length bins (equal widths in log length) of the gradient-variance "
                                    "study")
    seeds: int = common.arg(3, "seeds --seed, --seed + 1, ...: each runs the whole study; the claims decide on the "
                            "95% interval over them")
    reanalyse: str = common.reanalyse_arg()

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, critic_warmup=1, truth_problems=2, truth_rollouts=2, variance_prompts=4,
                 variance_bins=2, seeds=2)

    def __post_init__(self):
        super().__post_init__()
        common.require_positive(self, "critic_lr", "truth_problems", "variance_bins", "seeds")
        common.require(self.truth_rollouts >= 2, "--truth-rollouts must be at least 2 (the noise is measured from their spread)")
        common.require(self.variance_prompts >= 2, "--variance-prompts must be at least 2 (the signal is estimated "
                       "from pairs of prompts)")
        common.require(self.critic_warmup >= 0, "--critic-warmup must be non-negative")
        common.require(all(0 <= lam <= 1 for lam in [self.gae_lambda, *self.lambda_list]),
                       "--gae-lambda and --critic-lambdas must be in [0, 1]")
        common.require(self.truth_problems <= lm_world.HELD_OUT_SIZE,
                       f"--truth-problems must be at most {lm_world.HELD_OUT_SIZE}")
        common.require(self.method_list and all(m in METHODS for m in self.method_list),
                       f"--methods must be among {','.join(METHODS)}")

    @property
    def method_list(self) -> list[str]:
        return common.as_list(self.methods, str)

    @property
    def lambda_list(self) -> list[float]:
        return common.as_list(self.critic_lambdas, float)


# ============================================================================================
# PPO's learned token critic and GAE over tokens
# ============================================================================================
class TokenCritic(torch.nn.Module):
    """V(x, y_<t), the value of each prefix, read where completion token y_t is about to be
    sampled: a linear head, zero at first, on the last hidden state of a transformer trunk.

      separate  the trunk is a copy of the policy's, trained with the head (InstructGPT's value
                model also starts from a trained LM): a second model and its optimiser state
      head      the head sits on the policy's own trunk and reads its features without changing
                them (no gradient into the trunk): one linear layer, the cheap variant
    """

    def __init__(self, policy, kind: str = "separate"):
        super().__init__()
        self.kind = kind
        self.trunk = copy.deepcopy(policy.base_model) if kind == "separate" else policy.base_model
        self.head = torch.nn.Linear(lm_world.head_width(policy), 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def trained_parameters(self) -> list[torch.nn.Parameter]:
        """What the value loss trains: the trunk copy and the head, or the head alone."""
        return list((self if self.kind == "separate" else self.head).parameters())

    def for_policy(self, policy) -> "TokenCritic":
        """A copy to train beside `policy` (a head moves onto `policy`'s trunk)."""
        if self.kind == "separate":
            return copy.deepcopy(self)
        critic = TokenCritic(policy, "head").to(self.head.weight.device)
        critic.head.load_state_dict(self.head.state_dict())
        return critic

    def prefix_values(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """V after each position, (B, L): position j has read tokens 0..j."""
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.kind == "separate"):
            hidden = self.trunk(input_ids=ids, attention_mask=attention_mask,
                                position_ids=lm_world.positions_from_mask(attention_mask)).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)

    def forward(self, completions: lm_world.Completions) -> torch.Tensor:
        """V(s_t) for each completion token, (B, T): position P-1+t has read x and y_<t."""
        values = self.prefix_values(completions.sequences, completions.attention_mask)
        return values[:, completions.prompt_length - 1:-1]


def token_gae(values: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor, gamma: float,
              lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(γ, λ) over the tokens of each completion (02_gae.py teaches GAE; this is its backward
    recursion on batch-major, right-padded rows). The outcome reward comes with the last token
    and the episode ends there, so V = 0 after it (a completion cut by the budget ends too: it
    scores 0). values, mask (B, T); rewards (B,). Returns the advantages and the critic's targets
    A_t + V(s_t), both (B, T) and 0 on padding."""
    mask = mask.float()
    values = values * mask
    still_going = F.pad(mask[:, 1:], (0, 1))  # a token follows this one
    # r_t = R on the last token, 0 before it
    token_rewards = (mask - still_going) * rewards[:, None]
    # δ_t = r_t + γ V(s_{t+1}) - V(s_t)
    deltas = token_rewards + gamma * F.pad(values[:, 1:], (0, 1)) * still_going - values
    advantages = torch.zeros_like(deltas)
    running = torch.zeros_like(deltas[:, 0])
    for t in reversed(range(deltas.shape[1])):
        # A_t = δ_t + γλ A_{t+1}   (0 on the padding after the end, so nothing leaks back)
        running = deltas[:, t] + gamma * lam * running
        advantages[:, t] = running
    return advantages * mask, (advantages + values) * mask


def whiten(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Advantages to mean 0, std 1 over the batch's completion tokens (PPO for LMs does this, as
    TRL's PPOTrainer; it puts PPO's step on GRPO's scale)."""
    real = advantages[mask]
    return torch.where(mask, (advantages - real.mean()) / (real.std() + 1e-8), 0.0) if real.numel() > 1 else advantages


def value_loss(values: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """½ (V(s_t) - target_t)², the mean over completion tokens (no value clipping)."""
    squared = torch.where(mask, (values - targets) ** 2, 0.0)
    return 0.5 * squared.sum() / mask.sum().clamp(min=1)


def value_step(critic: TokenCritic, optimizer: torch.optim.Optimizer, completions: lm_world.Completions,
               targets: torch.Tensor, iters: int, max_grad_norm: float) -> float:
    """`iters` optimiser steps of the value loss on one batch; returns the mean loss."""
    total = 0.0
    for _ in range(iters):
        loss = value_loss(critic(completions), targets, completions.completion_mask)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(critic.trained_parameters(), max_grad_norm)
        optimizer.step()
        total += loss.item() / iters
    return total


def state_bytes(*parts) -> int:
    """Bytes held by modules' parameters and gradients and by optimisers' state (Adam: two moments),
    each tensor once (a value head's critic holds the policy's own trunk)."""
    tensors = {}
    for part in parts:
        if isinstance(part, torch.optim.Optimizer):
            found = [t for state in part.state.values() for t in state.values() if torch.is_tensor(t)]
        else:
            found = [t for p in part.parameters() for t in (p, p.grad) if t is not None]
        tensors.update({id(t): t for t in found})
    return sum(t.numel() * t.element_size() for t in tensors.values())


def warm_up_critic(critic: TokenCritic, policy, tokenizer, rl: grpo.Args, args: Args, device) -> list[float]:
    """Fit the critic to the policy as it is before PPO starts (`critic_warmup` updates of fresh
    groups, value loss only, Monte Carlo targets: V(s_t) -> R): a critic that starts at V = 0
    would make PPO's first updates plain REINFORCE. Returns the value loss per update."""
    rng = np.random.default_rng(rl.seed + 11)
    generator = torch.Generator(device).manual_seed(rl.seed + 11)
    optimizer = torch.optim.AdamW(critic.trained_parameters(), lr=args.critic_lr, weight_decay=0.0)
    exclude = frozenset(p.prompt for p in rl.task.held_out())
    losses = []
    for _ in tqdm(range(args.critic_warmup), desc="critic warm-up", leave=False):
        problems = rl.task.sample(rl.prompts, rng, exclude=exclude)
        completions, rewards = grpo.sample_groups(policy, tokenizer, problems, rl, generator, device)
        # γ = 1 and one reward at the end: the return from every token is R
        targets = rewards.flatten()[:, None] * completions.completion_mask
        losses.append(value_step(critic, optimizer, completions, targets, 1, rl.max_grad_norm))
    return losses


def train(policy, reference, tokenizer, rl: grpo.Args, args: Args, held_out: list, device,
          critic: TokenCritic | None = None) -> dict:
    """The chapter's `train` for GRPO; given a critic, PPO: each token's advantage is the
    critic's GAE(γ = 1, --gae-lambda), whitened, and after the policy's step the critic takes μ
    steps toward its targets A_t + V(s_t). Also returns `state_bytes` of what the training holds
    (the reference too)."""
    rng = np.random.default_rng(rl.seed)
    generator = torch.Generator(device).manual_seed(rl.seed)
    eval_generator = torch.Generator(device).manual_seed(rl.seed + 1)
    optimizer, schedule = grpo.make_optimizer(policy, rl)
    held = [policy, optimizer, reference]
    if critic is not None:
        critic_optimizer = torch.optim.AdamW(critic.trained_parameters(), lr=args.critic_lr, weight_decay=0.0)
        held += [critic, critic_optimizer]
    exclude = frozenset(p.prompt for p in rl.task.held_out())
    history, evals = [], []

    def held_out_eval(step: int) -> None:
        result = lm_world.evaluate(policy, tokenizer, held_out, rl.eval_samples, rl.max_new_tokens, eval_generator,
                                 device)
        evals.append({"step": step, "samples": step * rl.prompts * rl.group_size,
                      "pass@1": result["pass@1"], "length": result["length"]})

    for step in tqdm(range(rl.rl_steps), desc="GRPO" if critic is None else "PPO", leave=False):
        if step % rl.eval_every == 0:
            held_out_eval(step)
        problems = rl.task.sample(rl.prompts, rng, exclude=exclude)
        completions, rewards = grpo.sample_groups(policy, tokenizer, problems, rl, generator, device)
        mask = completions.completion_mask
        if critic is None:
            advantages = grpo.token_advantages(rewards, "grpo", mask)
        else:
            with torch.no_grad():
                values = critic(completions)
            advantages, targets = token_gae(values, rewards.flatten(), mask, 1.0, args.gae_lambda)
            advantages = whiten(advantages, mask)
        stats = grpo.policy_gradient_step(policy, optimizer, completions, advantages,
                                          grpo.reference_logprobs(reference, completions), rl)
        schedule.step()
        if critic is not None:
            stats["value_loss"] = value_step(critic, critic_optimizer, completions, targets, rl.inner_iters,
                                             rl.max_grad_norm)
        history.append(grpo.batch_record(completions, rewards) | stats)
    held_out_eval(rl.rl_steps)
    return {"history": history, "evals": evals, "state_bytes": state_bytes(*held)}


# ============================================================================================
# The runs: GRPO, PPO with each critic, PPO at each λ
# ============================================================================================
def warmed_critics(initial, tokenizer, rl: grpo.Args, args: Args, device) -> dict:
    """PPO's starting critics, each built on the cold start and fitted to it (`warm_up_critic`):
    the separate one always (the variance and truth studies use it), the value head if a method
    learns one. {kind: {"critic", "losses"}}."""
    critics = {}
    for kind in ["separate"] + (["head"] if "ppo_head" in args.method_list else []):
        critic = TokenCritic(initial, kind).to(device)
        critics[kind] = {"critic": critic, "losses": warm_up_critic(critic, initial, tokenizer, rl, args, device)}
    return critics


def run_method(initial, tokenizer, rl: grpo.Args, args: Args, method: str, held_out: list, device,
               critics: dict) -> dict:
    """Train a copy of the cold start (PPO: with a copy of its warmed-up critic), as the chapter's
    `run_method`; also records the bytes of the training state and, on a GPU, the allocator's peak."""
    policy = copy.deepcopy(initial)
    critic = critics[CRITICS[method]]["critic"].for_policy(policy) if method in CRITICS else None
    on_gpu = torch.device(device).type == "cuda"
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(device)
    start = time.time()
    result = train(policy, lm_world.frozen_copy(initial), tokenizer, rl, args, held_out, device, critic)
    result["wall_clock_s"] = time.time() - start
    result["peak_memory_bytes"] = torch.cuda.max_memory_allocated(device) if on_gpu else None
    result["final"] = grpo.final_evaluation(policy, tokenizer, rl, held_out, device)
    last = result["history"][-max(1, len(result["history"]) // 10):]
    result["final_kl"] = float(np.mean([h["kl"] for h in last]))
    result["policy"], result["critic"] = policy, critic
    name = NAMES[method] + (f" λ={args.gae_lambda:g}" if critic is not None else "")
    print(f"  {name:24s} β={rl.beta:<5g} held-out pass@1 {result['evals'][0]['pass@1']:.3f} -> "
          f"{result['final']['pass@1']:.3f}, KL {result['final_kl']:.3f}, {result['wall_clock_s']:.0f} s")
    return result


def critic_lambda_runs(initial, tokenizer, rl: grpo.Args, args: Args, held_out: list, device, runs: dict,
                       critics: dict) -> dict:
    """PPO at each λ of --critic-lambdas, plus the --gae-lambda run."""
    by_lambda = {args.gae_lambda: runs["ppo"]} if "ppo" in runs else {}
    for lam in args.lambda_list:
        if lam not in by_lambda:
            by_lambda[lam] = run_method(initial, tokenizer, rl, dataclasses.replace(args, gae_lambda=lam), "ppo",
                                        held_out, device, critics)
    return by_lambda


# ============================================================================================
# Does the critic tell the truth?
# ============================================================================================
def step_prefixes(problem, completion: str) -> list[str]:
    """Where credit is read: the prompt alone (before the first token) and the prompt followed by
    each complete line of the completion but the last (each step boundary)."""
    lines = completion.split("\n")
    return [problem.prompt + "".join(line + "\n" for line in lines[:k]) for k in range(len(lines))]


MEAN_ABS = math.sqrt(2 / math.pi)  # E|ε| = σ √(2/π) for ε ~ N(0, σ²): the mean error of pure noise


def critic_against_rollouts(policy, critic: TokenCritic, tokenizer, args: Args, problems: list, device) -> dict:
    """Does the critic tell the truth? One completion per problem from the policy; at each of its
    prefixes (`step_prefixes`), the critic's V against P(success | prefix), estimated by
    `truth_rollouts` fresh completions of the same policy from that prefix (`accuracy`), and the
    credit V hands each step against the truth's (`step_credit`)."""
    generator = torch.Generator(device).manual_seed(args.seed + 13)
    sampled, texts = lm_world.sample(policy, tokenizer, [p.prompt for p in problems], args.max_new_tokens, generator,
                                     device)
    outcomes = lm_world.verifier_rewards(problems, texts, sampled.truncated).numpy()
    owners, prefixes, which = [], [], []
    for i, (problem, text) in enumerate(zip(problems, texts)):
        for prefix in step_prefixes(problem, text):
            owners.append(problem)
            prefixes.append(prefix)
            which.append(i)
    K = args.truth_rollouts
    completions, continuations = lm_world.sample(policy, tokenizer, [p for p in prefixes for _ in range(K)],
                                               args.max_new_tokens, generator, device)
    written = [prefix[len(problem.prompt):] for problem, prefix in zip(owners, prefixes)]
    used = torch.tensor([len(tokenizer(w, add_special_tokens=False)["input_ids"]) for w in written])
    # a rollout succeeds if the whole completion (the prefix's lines, then its own) passes within the budget
    texts = [w + c for w, c in zip(np.repeat(written, K), continuations)]
    within = (used.repeat_interleave(K) + completions.lengths.cpu()) <= args.max_new_tokens
    wins = lm_world.verifier_rewards([o for o in owners for _ in range(K)], texts, completions.truncated) * within
    truth = wins.view(-1, K).mean(1).numpy()
    with torch.no_grad():
        ids, mask = lm_world.encode_prompts(tokenizer, prefixes, device)
        values = critic.prefix_values(ids, mask)[:, -1].cpu().numpy()  # left-padded: the last column is the prefix's end
    first = np.array([prefix == problem.prompt for problem, prefix in zip(owners, prefixes)])
    spread = rollout_noise(truth, K)
    return {"values": values.tolist(), "truth": truth.tolist(), "first_token": first.tolist(), "completion": which,
            "outcome": outcomes.tolist(), **accuracy(values, truth, first, spread),
            **step_credit(values, truth, spread, np.array(which), outcomes)}


def rollout_noise(truth: np.ndarray, rollouts: int) -> np.ndarray:
    """Each rollout estimate's variance p(1 - p)/K, unbiased from its own p̂: p̂(1 - p̂)/(K - 1)."""
    return truth * (1 - truth) / (rollouts - 1)


def accuracy(values: np.ndarray, truth: np.ndarray, first: np.ndarray, spread: np.ndarray) -> dict:
    """The mean error |V - P(success | prefix)| at the first token and at step boundaries; the
    noise floor, the mean error a perfect V would show at the same boundaries against the rollout
    estimate, ≈ √(2/π) · √(p(1 - p)/K); the verdicts' `net_error` at the boundaries; the bias and
    the correlation over all prefixes."""
    error, boundary = np.abs(values - truth), ~first
    return {"error_first_token": float(error[first].mean()),
            "error_boundaries": float(error[boundary].mean()) if boundary.any() else math.nan,
            "noise_floor": float((MEAN_ABS * np.sqrt(spread[boundary])).mean()) if boundary.any() else math.nan,
            "net_error": net_error(values[boundary], truth[boundary], spread[boundary]),
            "bias": float((values - truth).mean()), "correlation": common.pearson(values, truth)}


def net_error(estimates: np.ndarray, measured: np.ndarray, noise: np.ndarray) -> float:
    """mean (estimate - measured)² - noise: without bias, the mean (estimate - truth)² where each
    measured value is the truth plus independent noise of variance `noise` (estimated without
    bias), so 0 for a perfect estimate. (The mean |error| minus a floor is biased: near p = 0 or 1
    the floor from p̂ falls short.) NaN where there is nothing to measure."""
    return float(((estimates - measured) ** 2 - noise).mean()) if len(estimates) else math.nan


def step_credit(values: np.ndarray, truth: np.ndarray, spread: np.ndarray, which: np.ndarray,
                outcomes: np.ndarray) -> dict:
    """What V feeds into Ψ: the credit of each step, V after it minus V before it (after the last
    step, the outcome R itself), against the same difference of the rollout truth (whose noise is
    the two estimates'): its mean |error| and its `net_error`. `which`: each prefix's completion,
    its prefixes in order."""
    last = np.append(which[1:] != which[:-1], True)  # the completion's last prefix: the outcome follows

    def following(x: np.ndarray, at_end: np.ndarray | float) -> np.ndarray:
        return np.where(last, at_end, np.append(x[1:], 0.0))

    outcome = outcomes[which]
    by_critic, by_rollouts = following(values, outcome) - values, following(truth, outcome) - truth
    return {"credit_error": float(np.abs(by_critic - by_rollouts).mean()),
            "credit_net_error": net_error(by_critic, by_rollouts, spread + following(spread, 0.0))}


def stage_names(args: Args, kind: str) -> list[str]:
    """The truth study's names for a critic before PPO (warmed up) and after PPO at --gae-lambda."""
    return (["cold start", f"after PPO λ={args.gae_lambda:g}"] if kind == "separate"
            else ["cold start, value head", "after PPO, value head"])


def critic_study(initial, tokenizer, args: Args, device, critics: dict, runs: dict, by_lambda: dict) -> dict:
    """The critics against rollout truth on the first --truth-problems held-out problems: each
    warmed-up critic at the cold start, then after PPO at each λ, and after PPO with the head."""
    problems = args.task.held_out(args.truth_problems)
    stages = {stage_names(args, kind)[0]: (initial, c["critic"]) for kind, c in critics.items()}
    stages |= {f"after PPO λ={lam:g}": (run["policy"], run["critic"]) for lam, run in sorted(by_lambda.items())}
    if "ppo_head" in runs:
        stages[stage_names(args, "head")[1]] = (runs["ppo_head"]["policy"], runs["ppo_head"]["critic"])
    return {stage: critic_against_rollouts(policy, critic, tokenizer, args, problems, device)
            for stage, (policy, critic) in stages.items()}


# ============================================================================================
# Gradient variance against completion length
# ============================================================================================
def per_completion_gradients(policy, completions: lm_world.Completions, weights: torch.Tensor,
                             chunk: int = 32) -> torch.Tensor:
    """g_i = Σ_t w_it ∇_θ log π(y_it | x, y_<t) for each completion i, flattened, (B, D): the
    gradient of one completion's weighted log-likelihood (torch.func), vmapped over completions
    (01 does the same for Pong points). HF's mask builder looks at the mask's values, which vmap
    cannot trace, so each row gets its causal-and-padding mask ready made."""
    params = {name: p.detach() for name, p in policy.named_parameters()}
    P = completions.prompt_length

    def weighted_logp(p: dict, ids: torch.Tensor, attention: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        L = len(ids)
        causal = torch.tril(torch.ones(L, L, dtype=torch.bool, device=ids.device))
        # a padding position attends to itself only (no row of the attention is empty)
        allowed = causal & attention.bool()[None, :] | torch.eye(L, dtype=torch.bool, device=ids.device)
        logits = functional_call(policy, p, (), {"input_ids": ids[None], "attention_mask": allowed[None, None],
                                                 "position_ids": lm_world.positions_from_mask(attention[None])}).logits
        logp = torch.log_softmax(logits[0, P - 1:-1].float(), dim=-1).gather(1, ids[P:, None]).squeeze(1)
        return (w * logp).sum()

    gradient_of = vmap(grad(weighted_logp), in_dims=(None, 0, 0, 0))
    rows = []
    with warnings.catch_warnings():  # vmap has no batching rule for CPU attention yet: it loops, correctly
        warnings.filterwarnings("ignore", message="There is a performance drop")
        for i in range(0, len(weights), chunk):
            part = slice(i, i + chunk)
            g = gradient_of(params, completions.sequences[part], completions.attention_mask[part], weights[part])
            rows.append(torch.cat([g[name].flatten(1) for name in params], 1))
    return torch.cat(rows)


def length_bins(lengths: torch.Tensor, bins: int, min_count: int = 8) -> tuple[list[torch.Tensor], list[float]]:
    """Completions in `bins` length bins of equal width in log length (a bin with fewer than
    `min_count` completions is dropped): each bin's rows and mean length."""
    lengths = lengths.cpu().float()
    edges = np.geomspace(float(lengths.min()), float(lengths.max()) + 1, bins + 1)
    which = np.clip(np.searchsorted(edges, lengths.numpy(), side="right") - 1, 0, bins - 1)
    groups = [torch.from_numpy(np.flatnonzero(which == b)) for b in range(bins)]
    groups = [rows for rows in groups if len(rows) >= max(min_count, 2)]
    return groups, [float(lengths[rows].mean()) for rows in groups]


def variance_by_length(gradients: torch.Tensor, lengths: torch.Tensor, bins: int, min_count: int = 8) -> dict:
    """Per `length_bins` bin, the mean length and the total variance tr Cov(g) = mean_i
    ||g_i - mean g||² (n - 1 in the denominator); and the slope of log variance on log length."""
    groups, mean_length = length_bins(lengths, bins, min_count)
    variance = [float(gradients[rows.to(gradients.device)].var(0).sum()) for rows in groups]
    return {"length": mean_length, "variance": variance, "count": [len(rows) for rows in groups],
            "slope": common.loglog_slope(mean_length, variance)}


def bin_means(values: torch.Tensor, lengths: torch.Tensor, bins: int) -> list[float]:
    """Per `length_bins` bin, the mean of `values` (one per completion)."""
    groups, _ = length_bins(lengths, bins)
    return [float(values.cpu()[rows].mean()) for rows in groups]


def one_token(mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Per completion, 1 on one of its tokens drawn uniformly and 0 elsewhere, (B, T) on mask's
    device (a completion with no token gets none). mask: right-padded, its tokens first."""
    counts = mask.sum(1).cpu()
    picked = (torch.rand(len(counts), generator=generator) * counts).long().clamp(max=mask.shape[1] - 1)
    return F.one_hot(picked, mask.shape[1]).to(mask.device) * mask


def every_over_one(variance: dict) -> list[float]:
    """Per length bin, tr Cov with R on every token (Ψ = R) over tr Cov with the same R on one
    token of each completion (NaN where the latter is 0: no completion in the bin scores)."""
    every, one = variance[BARE]["variance"], variance[ONE_TOKEN]["variance"]
    return [e / o if o > 0 else math.nan for e, o in zip(every, one)]


def held_out_projection(gradients: torch.Tensor, group_size: int) -> torch.Tensor:
    """Each completion's gradient projected on the mean gradient of the other half of the prompts
    (a direction its own noise did not pick), (B,) in float64."""
    prompt = torch.arange(len(gradients), device=gradients.device) // group_size
    half = prompt % 2 == 0
    projection = torch.zeros(len(gradients), dtype=torch.float64, device=gradients.device)
    for rows, other in ((half, ~half), (~half, half)):
        direction = gradients[other].double().mean(0)
        projection[rows] = gradients[rows].double() @ direction / direction.norm().clamp(min=1e-12)
    return projection


def snr(projection: torch.Tensor) -> float:
    """The projections' mean² over their variance (NaN where the mean is not above 0: no signal)."""
    return float(projection.mean() ** 2 / projection.var()) if projection.mean() > 0 and projection.var() > 0 else math.nan


def signal_by_length(gradients: torch.Tensor, lengths: torch.Tensor, group_size: int, bins: int) -> dict:
    """The update's signal against its noise along its own direction: the `held_out_projection`'s
    `snr` over all completions ("pooled") and per `length_bins` bin; and the slope of the bins' log
    on log length (below 0: a longer completion carries less signal per unit of noise)."""
    projection = held_out_projection(gradients, group_size)
    groups, mean_length = length_bins(lengths, bins)
    ratio = [snr(projection[rows.to(gradients.device)]) for rows in groups]
    return {"length": mean_length, "snr": ratio, "slope": common.loglog_slope(mean_length, ratio),
            "pooled": snr(projection)}


def mattered(tokenizer, completions: lm_world.Completions, problems: list, rewards: torch.Tensor) -> torch.Tensor:
    """1 on the tokens that decided each completion's outcome, 0 elsewhere, (B, T): every token of a
    right completion (each of its lines is needed for the answer); of a failed one, the tokens of
    its first wrong line (the gold label `lm_world.first_wrong_step`: the first line that differs
    from the worked solution), its last line where the text ends before that line (it stopped
    short) or matches throughout (it was cut off). problems: each row's problem; rewards (B,)."""
    mask = completions.completion_mask
    steps = lm_world.token_step_ids(tokenizer, completions.completion_ids, mask)
    texts = lm_world.completion_texts(tokenizer, completions)
    wrong = [lm_world.first_wrong_step(p, t) for p, t in zip(problems, texts)]
    line = torch.tensor([len(t.split("\n")) - 1 if w is None else w for w, t in zip(wrong, texts)], device=mask.device)
    line = torch.minimum(line, steps.max(1).values)
    return torch.where(rewards.bool()[:, None], mask.bool(), steps == line[:, None]).float()


def relative_variance(gradients: torch.Tensor, group_size: int) -> float:
    """tr Cov(h) / ||E h||², h_p the mean gradient of prompt p's group: the update's noise on the
    scale of its signal (Ψ's scale cancels). Prompts are the independent draws (a group's
    completions share their baseline). ||E h||² without bias: the mean of h_p · h_q over the pairs
    p ≠ q (||mean h||² would add tr Cov(h) / P of noise, and read Ψ = 1, whose mean is 0, as
    signal). NaN where no signal shows (that estimate ≤ 0)."""
    h = gradients.double().view(-1, group_size, gradients.shape[1]).mean(1)
    P = len(h)
    signal = (h.sum(0).square().sum() - h.square().sum()) / (P * (P - 1))
    return float(h.var(0).sum() / signal) if signal > 0 else math.nan


def decisive(tokenizer, completions: lm_world.Completions, problems: list, rewards: torch.Tensor) -> torch.Tensor:
    """`mattered` narrowed, in a failed completion, to the few tokens that decided it: the result of its
    first wrong line (the tokens after that line's first "=", its newline included; the whole line where
    it has no "="). A right completion keeps every token, as in `mattered`: the arms differ on the
    failures alone, where the survey's few decisive tokens are."""
    focus = mattered(tokenizer, completions, problems, rewards).bool()
    ids = completions.completion_ids
    equals = torch.tensor([[("=" in tokenizer.decode([t])) for t in row] for row in ids.tolist()], device=ids.device)
    marks = equals & focus
    after = (marks.int().cumsum(1) - marks.int()) > 0  # a "=" of the line lies before the token
    few = torch.where(marks.any(1, keepdim=True), focus & after, focus)
    return torch.where(rewards.bool()[:, None], focus, few).float()


def failed_share(focus: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor) -> float:
    """The share of the failed completions' tokens that `focus` marks (those that decided their failure),
    NaN where none failed: a right completion's tokens all count in `mattered` and `decisive`, its
    formatting too, so the failures alone say how few tokens decide an outcome."""
    failed = ~rewards.flatten().bool()
    return float(focus[failed].sum() / mask[failed].sum()) if failed.any() else math.nan


def critic_name(lam: float) -> str:
    return f"critic GAE λ={lam:g}"


def variance_lambdas(args: Args) -> list[float]:
    """The λ of the variance study, largest first: λ = 1 (V as a baseline alone), --gae-lambda, --critic-lambdas."""
    return sorted({1.0, args.gae_lambda, *args.lambda_list}, reverse=True)


def advantage_spread(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per completion, the largest minus the smallest advantage over its tokens (0: one advantage
    for every token). advantages, mask (B, T); a completion with no token spreads 0."""
    mask = mask.bool()
    big = torch.finfo(advantages.dtype).max
    highest = advantages.masked_fill(~mask, -big).max(1).values
    lowest = advantages.masked_fill(~mask, big).min(1).values
    return torch.where(mask.any(1), highest - lowest, torch.zeros_like(highest))


def gradient_variance_study(policy, critic: TokenCritic, tokenizer, rl: grpo.Args, args: Args,
                            device) -> tuple[dict, dict]:
    """At the cold start: `variance_prompts` fresh problems, G completions each; each completion's
    policy-gradient vector under each Ψ (the outcome R with no baseline, minus the batch mean,
    RLOO, GRPO, and the warmed-up critic's GAE(γ = 1, λ) per token at each `variance_lambdas`),
    its total variance binned by completion length, and the update's `relative_variance`. Ψ = 1,
    the score Σ_t ∇ log π(y_t) alone, shows what length does by itself: R also changes with length,
    which the same R on one token of each completion (`one_token`) holds fixed: the essay's cause
    is the scalar's reaching every token.
    Also, at --gae-lambda, how far PPO's token advantages spread within a completion; and GRPO's
    signal against its noise (`signal_by_length`) with its A_i on every token, and with the same
    A_i on the tokens that mattered alone (`mattered`), on the same completions."""
    rng = np.random.default_rng(rl.seed + 17)
    problems = rl.task.sample(args.variance_prompts, rng, exclude=frozenset(p.prompt for p in rl.task.held_out()))
    completions, rewards = grpo.sample_groups(policy, tokenizer, problems, rl,
                                              torch.Generator(device).manual_seed(rl.seed + 17), device)
    mask = completions.completion_mask
    with torch.no_grad():
        values = critic(completions)
    # every group baseline is one number per completion: g_i = Ψ_i · s_i with s_i = Σ_t ∇ log π(y_it)
    scores = per_completion_gradients(policy, completions, mask.float())
    psi = {"Ψ = 1 (the score alone)": torch.ones_like(rewards.flatten()), BARE: rewards.flatten(),
           **{grpo.NAMES[m]: grpo.group_advantages(rewards, m).flatten() for m in GROUP_BASELINES}}

    def spread(g: torch.Tensor) -> dict:  # one (B, D) matrix at a time: they are large
        return {**variance_by_length(g, completions.lengths, args.variance_bins),
                "relative": relative_variance(g, rl.group_size)}

    # each Ψ's mean square per bin: its size, which also changes with length, divides out of tr Cov below
    study = {name: spread(weights[:, None] * scores)
             | {"psi_square": bin_means(weights.square(), completions.lengths, args.variance_bins)}
             for name, weights in psi.items()}
    picked = one_token(mask, torch.Generator().manual_seed(rl.seed + 19))
    study[ONE_TOKEN] = spread(per_completion_gradients(policy, completions, picked * rewards.flatten()[:, None]))
    for lam in variance_lambdas(args):
        advantages, _ = token_gae(values, rewards.flatten(), mask, 1.0, lam)
        study[critic_name(lam)] = spread(per_completion_gradients(policy, completions, advantages))
    within = advantage_spread(token_gae(values, rewards.flatten(), mask, 1.0, args.gae_lambda)[0], mask).cpu()
    advantage = psi[grpo.NAMES["grpo"]]
    broadcast = advantage[:, None] * scores  # GRPO's: one A_i on every token
    repeated = [p for p in problems for _ in range(rl.group_size)]

    def on(focus: torch.Tensor) -> dict:  # the same A_i on the `focus` tokens alone: fewer tokens
        gradients = per_completion_gradients(policy, completions, advantage[:, None] * focus)
        return (signal_by_length(gradients, completions.lengths, rl.group_size, args.variance_bins)
                | {"token_share": float(focus.sum() / mask.sum()), "failed_token_share": failed_share(focus, mask, rewards)})

    return study, {"ppo_spread": {"mean": float(within.mean()), "share_unequal": float((within > 1e-6).float().mean()),
                                  "completions": len(within)},
                   "grpo_signal": signal_by_length(broadcast, completions.lengths, rl.group_size, args.variance_bins),
                   "focused_signal": on(mattered(tokenizer, completions, repeated, rewards.flatten())),
                   "few_signal": on(decisive(tokenizer, completions, repeated, rewards.flatten()))}


# ============================================================================================
# One seed, then each claim over the seeds
# ============================================================================================
def without_models(runs: dict) -> dict:
    """The runs without their policy and critic (what results.json can hold)."""
    return {name: {k: v for k, v in run.items() if k not in ("policy", "critic")} for name, run in runs.items()}


def trained(runs: dict, by_lambda: dict) -> dict:
    """Each trained policy's run under its metric label: the methods, then PPO at each λ."""
    return runs | {f"ppo_lambda{lam:g}": run for lam, run in by_lambda.items()}


def run_seed(initial, tokenizer, args: Args, device) -> dict:
    """The whole study on one seed (args.seed): the cold start on the held-out problems, the
    warmed-up critics, the gradient variance, each method's run, PPO at each λ and the critics
    against rollout truth. The runs come back without their models."""
    print(f" seed {args.seed}:")
    rl = lm_world.chapter_lm_args(grpo.Args, args)
    held_out = rl.task.held_out(rl.eval_problems)
    before = grpo.final_evaluation(initial, tokenizer, rl, held_out, device)
    critics = warmed_critics(initial, tokenizer, rl, args, device)
    variance, credit = gradient_variance_study(initial, critics["separate"]["critic"], tokenizer, rl, args, device)
    runs = {m: run_method(initial, tokenizer, rl, args, m, held_out, device, critics) for m in args.method_list}
    by_lambda = critic_lambda_runs(initial, tokenizer, rl, args, held_out, device, runs, critics) if "ppo" in runs else {}
    truth = critic_study(initial, tokenizer, args, device, critics, runs, by_lambda)
    return {"seed": args.seed, "rl": rl, "cold_start": before, "runs": without_models(runs),
            "by_lambda": without_models(by_lambda), "gradient_variance": variance, "token_credit": credit,
            "critic_truth": truth,
            "critic_warmup_losses": {kind: c["losses"] for kind, c in critics.items()}}


def labelled(args: Args, seed: dict) -> dict:
    """One seed's trained policies under their names in the tables and figures."""
    runs = {(NAMES[m] if m not in CRITICS else f"{SHORT[m]}, λ={args.gae_lambda:g}"): r for m, r in seed["runs"].items()}
    return runs | {f"{SHORT['ppo']}, λ={lam:g}": r for lam, r in seed["by_lambda"].items() if lam != args.gae_lambda}


def interval(values, digits: int = 3) -> str:
    """mean [95% interval over the seeds]."""
    mean, low, high = common.mean_interval(values)
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def pass_at_1(per_seed: list[dict], method: str) -> np.ndarray:
    return np.array([s["runs"][method]["final"]["pass@1"] for s in per_seed])


def any_of(verdicts: list) -> bool | None:
    """Something happens somewhere: yes if one says yes, no if all say no, else None."""
    return True if True in verdicts else False if verdicts and all(v is False for v in verdicts) else None



LINEAR = (f"roughly linear: within {common.ROUGHLY_LINEAR[0]}-{common.ROUGHLY_LINEAR[1]}, nearer 1 than no growth (0) "
          "or quadratic growth (2)")


def variance_of(per_seed: list[dict], name: str, key: str) -> np.ndarray:
    """One number of the gradient-variance study under one Ψ, per seed."""
    return np.array([s["gradient_variance"][name][key] for s in per_seed])


def scaled_slopes(per_seed: list[dict], name: str) -> list[float]:
    """Per seed, the log-log slope on length of tr Cov over Ψ's mean square, bin by bin (NaN where a bin's Ψ is 0)."""
    rows = [s["gradient_variance"][name] for s in per_seed]
    return [common.loglog_slope(r["length"], [v / q if q > 0 else math.nan for v, q in zip(r["variance"], r["psi_square"])])
            for r in rows]


def length_claims(per_seed: list[dict]) -> list[dict]:
    """Does the variance grow with the length? Each seed's log-log slope of tr Cov against the
    completion length, under the score alone, the bare outcome and each group baseline."""
    n = f"{len(per_seed)} seeds"
    lengths = [x for s in per_seed for x in s["gradient_variance"][BARE]["length"]]
    span = f"completion lengths {min(lengths):.0f}-{max(lengths):.0f}" if lengths else "no length bin with enough completions"
    score, bare = (variance_of(per_seed, name, "slope") for name in ("Ψ = 1 (the score alone)", BARE))
    names = [grpo.NAMES[m] for m in GROUP_BASELINES]
    baselines = {name: common.seed_verdict(variance_of(per_seed, name, "slope")) for name in names}
    scaled = {name: common.seed_verdict(scaled_slopes(per_seed, name)) for name in names}
    return [
        common.claim("over-long-generations", "the score alone (Ψ = 1) is a sum of T per-token terms: its variance "
                     "grows linearly with the episode's length T",
                     f"Ψ = 1: log-log slope of tr Cov by length bin, mean [95% interval over {n}]: {interval(score, 2)} "
                     f"({LINEAR}) over {span}", common.slope_verdict(score)[0]),
        common.claim("over-long-generations", "with a terminal reward the gradient's variance grows roughly linearly "
                     "with episode length",
                     f"Ψ = R: log-log slope of tr Cov by length bin, mean [95% interval over {n}]: {interval(bare, 2)} "
                     f"({LINEAR}) over {span} (R itself changes with length here)", common.slope_verdict(bare)[0]),
        common.claim("over-long-generations", "long reasoning traces amplify variance even with baselines: under each "
                     "group baseline the gradient's variance grows with the completion's length (log-log slope above 0)",
                     f"log-log slope of tr Cov by length bin, mean [95% interval over {n}], over {span}: "
                     + "; ".join(f"{name} {text}" for name, (_, text) in baselines.items()),
                     common.all_parts(*[verdict for verdict, _ in baselines.values()])),
        common.claim("over-long-generations", "long reasoning traces amplify variance even with baselines, read per "
                     "unit of the advantage's size: under each group baseline the gradient's variance over the "
                     "advantage's mean square grows with the completion's length (log-log slope above 0)",
                     f"log-log slope of tr Cov over the bin's mean A² (the advantage's size, which changes with length "
                     f"too, divided out) by length bin, mean [95% interval over {n}], over {span}: "
                     + "; ".join(f"{name} {text}" for name, (_, text) in scaled.items()),
                     common.all_parts(*[verdict for verdict, _ in scaled.values()]))]


def cause_claim(per_seed: list[dict]) -> dict:
    """'Grows roughly linearly with episode length, because the same scalar R_n multiplies every
    per-token log-probability gradient': on the same completions and the same R, put R on every
    token (Ψ = R) or on one token drawn uniformly, and per length bin take the ratio of the two
    variances (`every_over_one`). R's size and its coupling with the completion are the same on
    both sides, so only the scalar's reaching every term differs; where that is what makes the
    variance a sum of T per-token terms, the ratio grows roughly linearly with T (`slope_verdict`
    on each seed's log-log slope). Not the other designs: each length bin's tr Cov over its E[R²]
    keeps R's coupling with the score (with R ∈ {0, 1}, it is the score's variance over the
    completions that succeed, which changes with length for reasons of its own); and per-token
    multipliers independent across tokens with R's second moment give a sum of T terms as well,
    so setting them beside the one scalar cannot show whether reaching every term makes the sum."""
    n = f"{len(per_seed)} seeds"
    first = per_seed[0]["gradient_variance"]
    bins = ", ".join(f"{x:.0f} tokens {three_digits(r)}" for x, r in zip(first[BARE]["length"], every_over_one(first)))
    slopes = [common.loglog_slope(s["gradient_variance"][BARE]["length"], every_over_one(s["gradient_variance"]))
              for s in per_seed]
    linear, text = common.slope_verdict(slopes)
    return common.claim(
        "over-long-generations, Why", "the gradient's variance grows with length because the same scalar R "
        "multiplies every per-token log-probability gradient, which makes it a sum of T per-token terms: with the "
        "same R on the same completions, its variance on every token over its variance on one token grows roughly "
        "linearly with the length T",
        f"tr Cov at the cold start with R on every token (Ψ = R) over tr Cov with R on one token of each completion "
        f"(drawn uniformly), per length bin (seed {per_seed[0]['seed']}: {bins}); its log-log slope on the length, "
        f"mean [95% interval over {n}]: {text} ({LINEAR}); the two slopes apart: Ψ = R "
        f"{interval(variance_of(per_seed, BARE, 'slope'), 2)}, R on one token "
        f"{interval(variance_of(per_seed, ONE_TOKEN, 'slope'), 2)}", linear)


def broadcast_claim(per_seed: list[dict]) -> dict:
    """Survey §3: 'Every token ... receives the same advantage estimate. The result is high-variance
    gradient estimates': is the variance with the outcome on every token above that with the same
    outcome on one token, on the same completions? Per seed, the mean over the length bins of the
    log of `every_over_one` (a bin where no completion scores has no ratio: both sides are 0), decided
    over the seeds (above 0: yes)."""
    logs = [common.mean_or_nan(np.log(every_over_one(s["gradient_variance"]))) for s in per_seed]
    above, text = common.seed_verdict(logs)
    first = per_seed[0]["gradient_variance"]
    bins = ", ".join(f"{x:.0f} tokens {three_digits(r)}" for x, r in zip(first[BARE]["length"], every_over_one(first)))
    return common.claim(
        "survey §3", "one outcome broadcast to every token gives high-variance gradient estimates, read as raw "
        "variance: with the same R on the same completions, the gradient's variance with R on every token (a sum of T "
        "terms) is above its variance with R on one token (one term, so not the same expected gradient)",
        f"tr Cov at the cold start with R on every token (Ψ = R) over tr Cov with R on one token of each completion "
        f"(drawn uniformly), per length bin (seed {per_seed[0]['seed']}: {bins}); the mean over the bins of its log, "
        "per seed " + ", ".join(f"{x:+.3g}" for x in logs) + f", mean [95% interval over {len(per_seed)} seeds]: "
        f"{text} (> 0: the broadcast's variance is above)", above)


def relative_claims(args: Args, per_seed: list[dict]) -> list[dict]:
    """Which Ψ lowers the update's noise on the scale of its signal (tr Cov(h) / ||E h||²)? The
    log of one Ψ's over another's, paired on each seed's batch: GRPO against the bare outcome, and
    the warmed-up critic's GAE at the largest λ against the smallest. And is the update noisy at all:
    under each group baseline, the noise above the signal (the ratio's log above 0)?"""
    n = f"{len(per_seed)} seeds"
    bare, normalised = (variance_of(per_seed, name, "relative") for name in (BARE, "GRPO"))
    reduced, text = common.seed_verdict(np.log(bare / normalised))
    claims = [common.claim(
        "over-long-generations", "normalising within the group (GRPO) reduces the gradient's variance: the update's "
        "tr Cov(h) / ||E h||² is lower under GRPO than under Ψ = R with no baseline",
        f"tr Cov(h) / ||E h||² over prompts at the cold start (h: a group's mean gradient), mean of {n}: Ψ = R "
        f"{np.mean(bare):.3g}, GRPO {np.mean(normalised):.3g}; log(Ψ = R's / GRPO's) per seed, mean [95% interval]: "
        f"{text}", reduced)]
    names, P = [grpo.NAMES[m] for m in GROUP_BASELINES], lm_world.chapter_lm_args(grpo.Args, args).prompts
    # an update averages P prompts' group gradients: its tr Cov / ||E||² is one prompt's over P
    noisy = {name: common.seed_verdict(np.log(variance_of(per_seed, name, "relative") / P)) for name in names}
    claims.append(common.claim(
        "whole-game §2", "with a sparse 0/1 verifier the gradients are noisy: under each group baseline the update's "
        "gradient has more variance than its mean's square (tr Cov / |E g|² above 1)",
        f"tr Cov(h) / ||E h||² over prompts at the cold start (h: a group's mean gradient), mean of {n}: "
        + ", ".join(f"{name} {np.mean(variance_of(per_seed, name, 'relative')):.3g}" for name in names)
        + f"; over an update's {P} prompts, log(that / {P}) per seed (above 0: the noise outweighs the signal), "
        "mean [95% interval]: " + "; ".join(f"{name} {text}" for name, (_, text) in noisy.items()),
        common.all_parts(*[holds for holds, _ in noisy.values()])))
    lams = variance_lambdas(args)
    if len(lams) > 1:
        largest, smallest = (variance_of(per_seed, critic_name(lam), "relative") for lam in (lams[0], lams[-1]))
        lower, text = common.seed_verdict(np.log(largest / smallest))
        claims.append(common.claim(
            "whole-game §5", "GAE's λ is a bias-variance dial: a smaller λ leans on V and lowers the variance",
            f"tr Cov(h) / ||E h||² with the warmed-up critic, mean of {n}: "
            + ", ".join(f"λ={lam:g}: {np.mean(variance_of(per_seed, critic_name(lam), 'relative')):.3g}" for lam in lams)
            + f"; log(λ={lams[0]:g}'s / λ={lams[-1]:g}'s) per seed, mean [95% interval]: {text}", lower))
    return claims


def truth_of(per_seed: list[dict], stage: str, key: str) -> list[float]:
    """One number of the critic truth study at one stage, per seed."""
    return [s["critic_truth"][stage][key] for s in per_seed]


def wrong_at(per_seed: list[dict], stage: str) -> tuple[bool | None, str]:
    """Is V wrong at this stage? Its squared error at step boundaries net of the rollouts' noise
    (`net_error`, 0 for a perfect V), over the seeds."""
    return common.seed_verdict(truth_of(per_seed, stage, "net_error"))


def critic_wrong(args: Args, per_seed: list[dict], kind: str) -> tuple[bool | None, str]:
    """Is the critic PPO trains with wrong, warmed up or after PPO? Wrong if it is at one stage,
    right if at every stage its net error's interval lies below 0, else None."""
    found = {stage: wrong_at(per_seed, stage) for stage in stage_names(args, kind) if stage in per_seed[0]["critic_truth"]}
    return any_of([v for v, _ in found.values()]), "; ".join(f"{stage} {text}" for stage, (_, text) in found.items())


def lies_claim(args: Args, per_seed: list[dict]) -> dict:
    """Can V be wrong, and does it then feed errors into Ψ? At each stage, V's squared error at step
    boundaries and that of the step credit it hands out, each net of the rollouts' noise
    (`net_error`), over the seeds: yes where both lie above 0 at some stage, no where at every
    stage one's interval lies below 0."""
    parts, verdicts = [], []
    for stage in per_seed[0]["critic_truth"]:
        v, v_text = wrong_at(per_seed, stage)
        c, c_text = common.seed_verdict(truth_of(per_seed, stage, "credit_net_error"))
        verdicts.append(common.all_parts(v, c))
        parts.append(f"{stage}: V {v_text}, step credit {c_text}")
    return common.claim(
        "whole-game §5", "a learned V can be wrong on sparse verifiable rewards, and a bad V injects systematic lies "
        "into Ψ: its error |V - P(success | prefix)| at step boundaries, and the error of the step credit V(after) - "
        "V(before) it feeds into Ψ, exceed what the rollouts' noise explains",
        f"{args.truth_rollouts} rollouts per prefix, {args.truth_problems} held-out problems; each squared error net "
        f"of the rollouts' noise (0 for a perfect V), mean [95% interval over {len(per_seed)} seeds]: " + "; ".join(parts), any_of(verdicts))


def boundary_noise(args: Args, row: dict) -> float:
    """The rollouts' own squared error at one stage's step boundaries, the mean of `rollout_noise`
    there: how far the --truth-rollouts estimate that measures V is from the truth itself."""
    truth, boundary = np.array(row["truth"]), ~np.array(row["first_token"], dtype=bool)
    return float(rollout_noise(truth[boundary], args.truth_rollouts).mean()) if boundary.any() else math.nan


def trusted_at(args: Args, per_seed: list[dict], stage: str) -> tuple[bool | None, str]:
    """Can V be trusted at this stage? Its net error (0 for a perfect V) is a zero: yes where the
    interval over the seeds holds 0 and stays below the rollouts' own squared error (`boundary_noise`,
    mean over the seeds), no where it excludes 0. Not "the interval lies below 0", which a perfect V
    reaches only by chance; not "the interval does not lie above 0" either, which too few or too
    noisy rollouts would meet for any V: a V whose error cannot be told from that of the rollouts
    that measure it has not been shown to be one to trust."""
    bar = common.mean_or_nan([boundary_noise(args, s["critic_truth"][stage]) for s in per_seed])
    verdict, text = common.seed_verdict(truth_of(per_seed, stage, "net_error"), zero_below=bar)
    return verdict, f"{stage} {text} (the rollouts' own error {bar:.3g})"


def critic_trusted(args: Args, per_seed: list[dict]) -> tuple[bool | None, str]:
    """Is the separate critic PPO trains with one to trust, warmed up and after PPO? `trusted_at`
    at every stage."""
    found = [trusted_at(args, per_seed, stage) for stage in stage_names(args, "separate")
             if stage in per_seed[0]["critic_truth"]]
    return common.all_parts(*(v for v, _ in found)), "; ".join(text for _, text in found)


# The whole-game essay's cold open, its picture of one sparse verifier bit: "a five-step solution" (its fifth step
# writes the answer). Episodes no longer than that are not the "long" ones of its GAE branch.
COLD_OPEN_STEPS = 5
REWARDS_PER_EPISODE = 1  # `token_gae`: the outcome R on the last token, 0 on every other


def steps_per_completion(per_seed: list[dict], stage: str) -> float:
    """The mean number of lines (steps, the answer line included) of a stage's truth-study
    completions, over the seeds: `step_prefixes` gives each completion one prefix per line."""
    return float(np.mean([np.unique(s["critic_truth"][stage]["completion"], return_counts=True)[1].mean()
                          for s in per_seed]))


def long_or_semi_dense(args: Args, per_seed: list[dict]) -> tuple[bool, str]:
    """The GAE branch's second premise, exact on the run's episodes: long (more steps than the
    cold open's, at the cold start or after PPO) or semi-dense (more than one reward each)."""
    steps = {stage: steps_per_completion(per_seed, stage) for stage in stage_names(args, "separate")
             if stage in per_seed[0]["critic_truth"]}
    tokens = np.mean([h["length"] for s in per_seed for h in s["runs"]["ppo"]["history"]])
    long, semi_dense = max(steps.values()) > COLD_OPEN_STEPS, REWARDS_PER_EPISODE > 1
    found = ("long (more steps than the essay's cold-open five-step solution)" if long else
             "not long (no more steps than the essay's cold-open five-step solution)") + (
             ", semi-dense" if semi_dense else ", not semi-dense")
    return long or semi_dense, (
        "episodes here: " + ", ".join(f"{stage} {n:.2f}" for stage, n in steps.items())
        + f" steps per completion on average (lines, the answer's included; {tokens:.0f} tokens in PPO's batches), "
        f"{REWARDS_PER_EPISODE} reward per episode, at the end: {found} (studies/07_lengths.py's PPO arms give the "
        "long ones)")


def prefer_gae_claim(args: Args, per_seed: list[dict]) -> dict:
    """The branch 'a value model you trust (and long or semi-dense episodes): prefer GAE': PPO's
    lead over GRPO, over the seeds. Its premises: a critic to trust (`critic_trusted`) and long or
    semi-dense episodes (`long_or_semi_dense`); where either fails, premise not met."""
    trusted, trusted_text = critic_trusted(args, per_seed)
    episodes, episodes_text = long_or_semi_dense(args, per_seed)
    better, lead_text = common.seed_verdict(pass_at_1(per_seed, "ppo") - pass_at_1(per_seed, "grpo"))
    unmet = ((["the critic is not one to trust (its error at step boundaries, net of the rollouts' noise, is not 0)"]
              if trusted is False else []) + ([] if episodes else ["the episodes are neither long nor semi-dense"]))
    premise = ("premise not met: " + "; ".join(unmet) + "; " if unmet else
               "inconclusive: whether the critic can be trusted cannot be told from these seeds; " if trusted is None
               else "")
    return common.claim(
        "whole-game §5", "with a value model you trust (and long or semi-dense episodes), prefer GAE: PPO with a "
        "learned critic and GAE beats GRPO at the same samples",
        f"{premise}PPO (critic, GAE λ={args.gae_lambda:g}) minus GRPO, held-out pass@1 at the same samples, mean [95% "
        f"interval over {len(per_seed)} seeds]: {lead_text}; the critic's squared error at step boundaries net of "
        f"the rollouts' noise, a zero to trust: {trusted_text}; {episodes_text}",
        better if trusted is True and episodes else None)


def ppo_ahead(per_seed: list[dict], method: str) -> tuple[bool | None, str]:
    """Is PPO (`method`) ahead of GRPO in held-out pass@1, over the seeds (paired by seed), and GRPO's
    lead as text: the fallback advice holds where PPO is shown behind, fails where it is shown ahead."""
    gap = pass_at_1(per_seed, "grpo") - pass_at_1(per_seed, method)
    return common.seed_verdict(-gap)[0], common.seed_verdict(gap)[1]


def fallback_claim(args: Args, per_seed: list[dict], method: str) -> dict:
    """'Value learning unstable: fall back to group baselines'. Premise: the critic is wrong
    (`critic_wrong`). GRPO at least as good as PPO: yes where the interval of PPO's lead lies
    below 0, no where it lies above 0, else None (the essay names no margin that a lead too small
    to matter would stay under)."""
    wrong, wrong_text = critic_wrong(args, per_seed, CRITICS[method])
    ahead, lead = ppo_ahead(per_seed, method)
    premise = {True: "", False: "premise not met: this critic's error is within the rollouts' noise at every stage; ",
               None: "inconclusive: whether this critic is wrong cannot be told from these seeds; "}[wrong]
    return common.claim(
        "whole-game §5", "where the learned value is wrong, group baselines do at least as well as PPO with that "
        f"critic: GRPO's held-out pass@1 is not below that of {NAMES[method]}",
        f"{premise}GRPO's held-out pass@1 minus that of {NAMES[method]} at the same samples, mean [95% interval over "
        f"{len(per_seed)} seeds]: {lead}; the critic's squared error at step boundaries net of "
        f"the rollouts' noise: {wrong_text}", None if ahead is None or wrong is not True else not ahead)


def value_loss_growth(per_seed: list[dict], method: str) -> np.ndarray:
    """Per seed, how the critic's loss moves over PPO's training: its mean over the last quarter of
    the updates minus over the first quarter, relative to the first (> 0: it grows)."""
    def growth(history: list[dict]) -> float:
        loss, quarter = np.array([h["value_loss"] for h in history]), max(1, len(history) // 4)
        return float(loss[-quarter:].mean() / loss[:quarter].mean() - 1)
    return np.array([growth(s["runs"][method]["history"]) for s in per_seed])


def unstable_claim(per_seed: list[dict], method: str) -> dict:
    """'Value learning is unstable on your data: fall back to MC or group baselines', its own
    premise read on the value loss: unstable where it grows over training (`value_loss_growth`'s
    interval above 0), stable where it falls (below 0). Only where unstable does the advice apply;
    then GRPO at least as good as PPO decides, as in `fallback_claim`; else its premise is not met."""
    unstable, growth = common.seed_verdict(value_loss_growth(per_seed, method))
    ahead, lead = ppo_ahead(per_seed, method)
    premise = {True: "", False: "premise not met: the critic's loss falls over training (its learning is stable); ",
               None: "inconclusive: whether the critic's loss grows or falls cannot be told from these seeds; "}[unstable]
    return common.claim(
        "whole-game §5", "where value learning is unstable, fall back to group baselines: read as a critic whose loss "
        f"grows over training, GRPO's held-out pass@1 is not below that of {NAMES[method]}",
        f"{premise}the critic's loss over PPO's last quarter of updates against its first, relative change, mean [95% "
        f"interval over {len(per_seed)} seeds]: {growth}; GRPO's held-out pass@1 minus that of {NAMES[method]}: "
        f"{lead}", None if ahead is None or unstable is not True else not ahead)


def same_advantage_claim(args: Args, per_seed: list[dict]) -> dict:
    """'Whether using PPO with a terminal reward or GRPO, every token receives the same advantage':
    for PPO, exact on each seed's batch at the cold start (the warmed-up critic's token GAE)."""
    found = [s["token_credit"]["ppo_spread"] for s in per_seed]
    return common.claim(
        "over-long-generations, When it falls down", "with PPO and a terminal reward, too, every token of a "
        "generation receives the same advantage signal",
        f"PPO's token advantages (the warmed-up critic's GAE, γ = 1, λ = {args.gae_lambda:g}) on each seed's batch of "
        f"{found[0]['completions']} cold-start completions: largest minus smallest within a completion, mean "
        + ", ".join(f"{f['mean']:.3g}" for f in found) + "; share of completions whose tokens get unequal "
        "advantages " + ", ".join(f"{f['share_unequal']:.0%}" for f in found)
        + " (exact; GRPO's spread is 0 by construction)", all(f["share_unequal"] == 0 for f in found))


def dilution_claim(per_seed: list[dict]) -> dict:
    """Survey §3's dilution: under GRPO's broadcast (γ = 1, one A_i on every token), does the
    signal along the update's direction fall, per unit of noise, as completions grow? Each seed's
    log-log slope of that ratio on the length (`signal_by_length`), decided over the seeds."""
    found = [s["token_credit"]["grpo_signal"] for s in per_seed]
    falls, text = common.seed_verdict([-f["slope"] for f in found])
    return common.claim(
        "survey §3", "with γ = 1 the credit is diluted: one advantage for every token washes out the signal of the "
        "few tokens that mattered, so a longer completion's gradient carries less signal per unit of noise",
        f"GRPO's per-completion gradient at the cold start, projected on the mean gradient of the other half of the "
        f"prompts; per length bin, its mean² over its variance (seed {per_seed[0]['seed']}: "
        + ", ".join(f"{n:.0f} tokens {r:.3g}" for n, r in zip(found[0]["length"], found[0]["snr"]))
        + f"); minus its log-log slope on the length, mean [95% interval over {len(found)} seeds]: {text} (> 0: "
        "it falls)", falls)


MATTERED = "the gold first wrong line of a failed completion, every token of a right one"
DECISIVE = "the result of a failed completion's first wrong line, the tokens after its '=', every token of a right one"


def focus_verdict(per_seed: list[dict], key: str = "focused_signal", tokens: str = MATTERED) -> tuple[bool | None, str]:
    """On the same completions and the same GRPO A_i, the signal per unit of noise with A_i on every
    token against A_i on the tokens that mattered (`key`: `mattered`'s, or `decisive`'s few; `tokens`
    says which): the verdict and what it measured."""
    broadcast, focused = ([s["token_credit"][k] for s in per_seed] for k in ("grpo_signal", key))
    logs = [math.log(f["pooled"] / b["pooled"]) if f["pooled"] > 0 and b["pooled"] > 0 else math.nan
            for b, f in zip(broadcast, focused)]
    washes, text = common.seed_verdict(logs)
    return washes, (
        f"GRPO's per-completion gradient at the cold start, A_i on every token or on the tokens that mattered ({tokens}: "
        + ", ".join(f"{f['token_share']:.0%}" for f in focused) + " of the tokens, "
        + ", ".join(f"{f['failed_token_share']:.0%}" for f in focused) + " of a failed completion's, by seed), each "
        "projected on its own mean gradient over the other half of the prompts; over all completions, the projection's "
        "mean² over its variance, broadcast against focused: " + ", ".join(f"{b['pooled']:.3g} against {f['pooled']:.3g}"
                                                                     for b, f in zip(broadcast, focused))
        + f" by seed; log(focused / broadcast), mean [95% interval over {len(per_seed)} seeds]: {text} (> 0: the "
        "broadcast carries less)")


def focus_claim(per_seed: list[dict]) -> dict:
    """Survey §3: 'every token ... receives the same advantage estimate. The result is
    high-variance gradient estimates': on the same completions and the same GRPO A_i, the
    signal per unit of noise (`signal_by_length` over all completions, as `dilution_claim` measures
    it per length bin) with A_i on every token against A_i on the tokens that mattered (`mattered`).
    Per seed the log of focused over broadcast, decided over the seeds (above 0: the broadcast
    carries less). Pooled, not per bin: a bin where one side shows no signal has no ratio, and
    dropping it would drop the bins that speak against that side."""
    washes, measured = focus_verdict(per_seed)
    return common.claim(
        "survey §3", "one advantage on every token gives noisier gradient estimates than credit on the tokens that "
        "mattered: GRPO's gradient with its advantage on every token carries less signal per unit of noise than the "
        "same advantage on the tokens that mattered (here: a failed completion's first wrong line, every line of a "
        "right one)", measured, washes)


FEW_TOKENS = "the broadcast washes out the signal of the tokens that mattered (the decisive ones)"


def few_tokens_claim(per_seed: list[dict]) -> dict:
    """Survey §3: '... that wash out the signal from the few tokens that actually mattered': `focus_verdict`
    with A_i on the few tokens that decided a failed completion (`decisive`: its wrong result) against A_i
    on every token, the same completions."""
    washes, measured = focus_verdict(per_seed, "few_signal", DECISIVE)
    return common.claim("survey §3", FEW_TOKENS, measured, washes)


ESSAY_CHAIN_TOKENS = 1000  # survey §3's chain of thought, whose filler and formatting the statement describes


def few_matter_claim(args: Args, per_seed: list[dict]) -> dict:
    """Survey §3's 'the few tokens that actually mattered', a description of a 1,000-token chain with
    filler words and formatting: its premise needs chains that long (exact against --max-new-tokens);
    the share of a failed completion's tokens that decided it (`decisive`) is shown beside it. 'Few'
    names no share, so on chains that long the claim stays inconclusive."""
    shares = [s["token_credit"]["few_signal"]["failed_token_share"] for s in per_seed]
    mean, low, high = common.mean_interval(shares)
    long_enough = args.max_new_tokens >= ESSAY_CHAIN_TOKENS
    premise = "" if long_enough else (
        f"premise not met: our completions are at most {args.max_new_tokens} tokens of arithmetic lines, without "
        f"filler words or formatting, against the essay's {ESSAY_CHAIN_TOKENS}-token chains; ")
    return common.claim(
        "survey §3", "of a long chain's tokens (filler words, formatting, reasoning), only a few actually matter: "
        "the tokens that decided a failed completion are a few of its tokens",
        f"{premise}the share of a failed completion's tokens that decided it (the result of its first wrong line), "
        + ", ".join(f"{share:.0%}" for share in shares) + f" by seed, mean [95% interval over {len(per_seed)} seeds] "
        f"{mean:.3f} [{low:.3f}, {high:.3f}]" + ("; 'few' names no share to test it against" if long_enough else ""),
        None)


# "roughly doubles": nearer 2x than no growth (1x) or tripling (3x), the midpoints, as common.ROUGHLY_LINEAR for a slope
ROUGHLY_DOUBLE = (1.5, 2.5)


def memory_claim(runs: dict) -> dict:
    """The bytes of the training state, the same on every seed."""
    mib = {m: runs[m]["state_bytes"] / 2**20 for m in ("grpo", "ppo", "ppo_head") if m in runs}
    ratio, (low, high) = mib["ppo"] / mib["grpo"], ROUGHLY_DOUBLE
    head = f"; a value head on the policy instead: {mib['ppo_head']:.2f} MiB" if "ppo_head" in mib else ""
    return common.claim(
        "over-long-generations", "PPO's critic, a copy of the policy, roughly doubles the memory footprint "
        "(here: the training state, against GRPO's)",
        f"parameters, gradients, Adam moments and reference: PPO {mib['ppo']:.2f} MiB, GRPO {mib['grpo']:.2f} MiB "
        f"({ratio:.2f}x; roughly double: within {low:g}-{high:g}x, nearer 2x than 1x or 3x){head}",
        low <= ratio <= high)


def critic_claims(args: Args, per_seed: list[dict]) -> list[dict]:
    """The critic's memory, whether its V tells the truth, and the essay's choice between PPO and GRPO."""
    runs = per_seed[0]["runs"]
    claims = [lies_claim(args, per_seed)]
    if "grpo" in runs and "ppo" in runs:
        claims = [memory_claim(runs), *claims, prefer_gae_claim(args, per_seed)]
    fitted = [m for m in CRITICS if m in runs and "grpo" in runs]  # the PPO runs GRPO is beside
    return (claims + [fallback_claim(args, per_seed, m) for m in fitted] + [unstable_claim(per_seed, m) for m in fitted]
            + [same_advantage_claim(args, per_seed), dilution_claim(per_seed), focus_claim(per_seed),
               few_tokens_claim(per_seed), few_matter_claim(args, per_seed)])


# ============================================================================================
# Figures, metrics, tables, report
# ============================================================================================
def plot_learning_curves(args: Args, per_seed: list[dict], path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label in labelled(args, per_seed[0]):
        evals = [labelled(args, seed)[label]["evals"] for seed in per_seed]
        ax.plot([e["samples"] for e in evals[0]], np.mean([[e["pass@1"] for e in run] for run in evals], 0), "o-",
                label=label)
    ax.set(xlabel="completions sampled", ylabel="held-out pass@1",
           title=f"PPO's critic against GRPO (mean of {len(per_seed)} seeds)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def plot_variance(per_seed: list[dict], path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for i, name in enumerate(per_seed[0]["gradient_variance"]):
        slope = common.mean_or_nan([seed["gradient_variance"][name]["slope"] for seed in per_seed])
        for j, seed in enumerate(per_seed):
            row = seed["gradient_variance"][name]
            ax.loglog(row["length"], row["variance"], "o-", color=f"C{i}", alpha=0.7,
                      label=f"{name} (slope {slope:.2f})" if j == 0 else None)
    ax.set(xlabel="completion length (tokens, bin mean)", ylabel="tr Cov of the per-completion gradient",
           title="Policy-gradient variance vs length, at the cold start (a line per seed)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    common.save_figure(fig, path)


def plot_critic_truth(truth: dict, path) -> None:
    fig, axes = plt.subplots(1, len(truth), figsize=(4.5 * len(truth), 4.2), sharey=True, squeeze=False)
    for ax, (stage, row) in zip(axes[0], truth.items()):
        first = np.array(row["first_token"], dtype=bool)
        values, rollouts = np.array(row["values"]), np.array(row["truth"])
        ax.plot(rollouts[first], values[first], "o", alpha=0.6, label="first token")
        ax.plot(rollouts[~first], values[~first], "x", alpha=0.6, label="step boundary")
        ax.plot([0, 1], [0, 1], color="gray", linestyle="--")
        ax.set(title=stage, xlabel="P(success | prefix), rollouts", xlim=(-0.05, 1.05))
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("critic's V(prefix)")
    axes[0, 0].legend(fontsize="small")
    common.save_figure(fig, path)


TRUTH_KEYS = ("error_first_token", "error_boundaries", "noise_floor", "net_error", "credit_error", "credit_net_error",
              "bias", "correlation")


def seed_metrics(seed: dict) -> dict:
    """One seed's headline numbers."""
    rl, metrics = seed["rl"], {}
    for label, run in trained(seed["runs"], seed["by_lambda"]).items():
        metrics |= {f"{label}_pass@{k}": run["final"][f"pass@{k}"] for k in rl.ks}
        metrics |= {f"{label}_kl": run["final_kl"], f"{label}_length": run["final"]["length"],
                    f"{label}_wall_clock_s": run["wall_clock_s"], f"{label}_state_bytes": run["state_bytes"]}
        if run["peak_memory_bytes"] is not None:
            metrics[f"{label}_peak_memory_bytes"] = run["peak_memory_bytes"]
    for method, run in seed["runs"].items():
        metrics |= {f"{method}_late_{key}": grpo.late_mean(run, key) for key in ("length_right", "length_wrong")}
    for name, row in seed["gradient_variance"].items():
        metrics |= {f"variance_slope[{name}]": row["slope"], f"variance_relative[{name}]": row["relative"]}
    for stage, row in seed["critic_truth"].items():
        metrics |= {f"critic[{stage}]_{key}": row[key] for key in TRUTH_KEYS}
    return metrics


def collect_metrics(per_seed: list[dict]) -> dict:
    """Each headline number, the mean over the seeds (NaN where no seed measured it)."""
    each = [seed_metrics(seed) for seed in per_seed]
    return {key: common.mean_or_nan([m[key] for m in each]) for key in each[0]}


def runs_table(args: Args, per_seed: list[dict]) -> dict:
    """Each trained policy on the held-out problems, the mean of the seeds (pass@1 with its
    interval), with the bytes its training holds."""
    last = f"pass@{per_seed[0]['rl'].final_samples}"
    before = [seed["cold_start"] for seed in per_seed]
    rows = [["cold start", "-", interval([b["pass@1"] for b in before]), np.mean([b[last] for b in before]), 0.0, "-",
             "-", "-"]]
    for label in labelled(args, per_seed[0]):
        runs = [labelled(args, seed)[label] for seed in per_seed]
        gain = np.mean([r["final"]["pass@1"] - b["pass@1"] for r, b in zip(runs, before)])
        rows.append([label, f"{100 * gain:+.1f}", interval([r["final"]["pass@1"] for r in runs]),
                     np.mean([r["final"][last] for r in runs]), np.mean([r["final_kl"] for r in runs]),
                     f"{np.mean([h['zero_spread'] for r in runs for h in r['history']]):.0%}",
                     runs[0]["state_bytes"] / 2**20, np.mean([r["wall_clock_s"] for r in runs])])
    return {"header": ["policy", "Δ pass@1 (points)", "pass@1 [95% interval]", last, "KL", "zero-spread", "MiB",
                       "seconds"], "rows": rows}


def three_digits(x: float) -> str:
    """A number rounded to 3 significant digits, written in full with thousands separators ("-": none)."""
    return f"{float(f'{x:.3g}'):,g}" if math.isfinite(x) else "-"


def variance_table(per_seed: list[dict]) -> dict:
    """Per Ψ: the log-log slope with its interval over the seeds, the mean relative variance of
    the update ("-" where a seed shows no signal), and the first seed's tr Cov in each length bin
    (the bins are the same completions for every Ψ)."""
    first = per_seed[0]["gradient_variance"]
    lengths = next(iter(first.values()))["length"] if first else []
    bins = (f"seed {per_seed[0]['seed']}: tr Cov at mean length {' / '.join(f'{x:.0f}' for x in lengths)}" if lengths
            else "tr Cov (no length bin)")
    return {"header": ["Ψ", "log-log slope [95% interval]", "tr Cov(h) / ‖E h‖²", bins],
            "rows": [[name, interval(variance_of(per_seed, name, "slope"), 2),
                      three_digits(np.mean(variance_of(per_seed, name, "relative"))),
                      " / ".join(map(three_digits, row["variance"]))] for name, row in first.items()]}


def truth_table(per_seed: list[dict]) -> dict:
    """Per critic, the mean of the seeds: its error |V - P(success | prefix)| at the first token
    and at step boundaries, the noise floor, its squared error at the boundaries net of the noise
    (with its interval), the step credit's error and its net squared error (interval), the bias
    and the correlation with the truth."""
    def mean(stage: str, key: str) -> float:
        return common.mean_or_nan(truth_of(per_seed, stage, key))

    return {"header": ["critic", "error, first token", "error, boundaries", "noise floor", "net error² [95% interval]",
                       "step credit error", "its net error²", "bias", "correlation"],
            "rows": [[stage, mean(stage, "error_first_token"), mean(stage, "error_boundaries"), mean(stage, "noise_floor"),
                      interval(truth_of(per_seed, stage, "net_error")), mean(stage, "credit_error"),
                      interval(truth_of(per_seed, stage, "credit_net_error")), mean(stage, "bias"),
                      mean(stage, "correlation")] for stage in per_seed[0]["critic_truth"]]}


def report(args: Args, per_seed: list[dict], claims: list[dict], tables: dict) -> None:
    rl = per_seed[0]["rl"]
    print(f"\nHeld-out ({rl.eval_problems} problems, {rl.final_samples} samples each), after {rl.rl_steps} updates "
          f"of {rl.prompts}x{rl.group_size} completions, β={rl.beta:g}, mean of {len(per_seed)} seeds:")
    print(common.format_table(tables["runs"]["rows"], tables["runs"]["header"]))
    print("\nGradient variance at the cold start, by completion length:")
    print(common.format_table(tables["variance"]["rows"], tables["variance"]["header"]))
    print(f"\nThe critic's V against P(success | prefix) from {args.truth_rollouts} rollouts per prefix:")
    print(common.format_table(tables["critic_truth"]["rows"], tables["critic_truth"]["header"]))
    print("\n" + common.format_claims(claims))


def all_claims(args: Args, per_seed: list[dict]) -> list[dict]:
    """Every claim of the study, from the seeds' measurements alone (a run, or --reanalyse)."""
    return (length_claims(per_seed) + [cause_claim(per_seed), broadcast_claim(per_seed)] + relative_claims(args, per_seed)
            + critic_claims(args, per_seed))


def from_records(records: list[dict]) -> list[dict]:
    """The seeds as results.json stores them (`main`'s records) back as `run_seed` returned them,
    less the chapter's args: each method's run and PPO's run at each λ apart again."""
    lambdas = {name: float(name.removeprefix("ppo_lambda")) for name in records[0]["runs"] if name not in METHODS}
    return [seed | {"runs": {m: r for m, r in seed["runs"].items() if m in METHODS},
                    "by_lambda": {lambdas[m]: r for m, r in seed["runs"].items() if m in lambdas}} for seed in records]


def main(args: Args) -> dict:
    if args.reanalyse:
        return {"claims": common.reanalyse(args, lambda run, stored: all_claims(run, from_records(stored["per_seed"])))}
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    print(f"05 study: PPO's learned critic; policy {info['path']}, device {device}, {args.seeds} seeds")
    per_seed = [run_seed(initial, tokenizer, dataclasses.replace(args, seed=args.seed + i), device)
                for i in range(args.seeds)]
    plot_learning_curves(args, per_seed, out / "learning_curves.png")
    plot_variance(per_seed, out / "gradient_variance.png")
    plot_critic_truth(per_seed[0]["critic_truth"], out / "critic_truth.png")
    claims = all_claims(args, per_seed)
    metrics = collect_metrics(per_seed)
    metrics["tables"] = {"runs": runs_table(args, per_seed), "variance": variance_table(per_seed),
                         "critic_truth": truth_table(per_seed)}
    wall = time.time() - start
    records = [{k: v for k, v in seed.items() if k not in ("rl", "runs", "by_lambda")}
               | {"runs": trained(seed["runs"], seed["by_lambda"])} for seed in per_seed]
    common.write_results(out, args, wall, metrics, claims, chapter_args=dataclasses.asdict(per_seed[0]["rl"]),
                         per_seed=records)
    report(args, per_seed, claims, metrics["tables"])
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
