"""05 study — the classic alternative the group baselines replace: PPO with a learned token
critic and GAE over tokens; what the critic costs, whether its V tells the truth, and what
completion length does to the gradient's variance under each Ψ.

  PPO   A_it = Σ_l λ^l δ_{t+l},  δ_t = r_t + V(s_{t+1}) - V(s_t)
        GAE(γ = 1, λ) over tokens, V a learned critic (a copy of the policy's trunk, or a value
        head on the policy itself), then the chapter's clipped, KL-penalised step

Length is the essays' argument: the score Σ_t ∇ log π(y_t) of a T-token completion sums T terms,
so a terminal reward's gradient grows noisier with T. We measure each completion's gradient under
each Ψ (torch.func) at the cold start and fit the slope of its variance against the completion
length; and we ask whether the critic tells the truth: its V at the first token and at each step
boundary against P(success | prefix) estimated by fresh rollouts from that prefix. Beside PPO,
GRPO at the same budget, and the training state each holds.

    python studies/05_critic.py             # 195 s on 2 CPU cores, measured with the other one busy;
                                            # writes runs/studies/05_critic/
Whether the critic pays more as chains grow is studies/07_lengths.py's question (its PPO arms).

Read beside: credit-assignment-over-long-generations.txt (length, variance, the critic's memory);
credit-assignment-is-the-whole-game.txt §5 (group baselines or PPO + GAE). Papers: Schulman et
al. 2016 (GAE); Ouyang et al. 2022 (InstructGPT: PPO with a value model).
Figures: learning_curves.png (held-out pass@1, PPO and GRPO), gradient_variance.png
(per-completion gradient variance vs length, log-log, per Ψ), critic_truth.png (the critic's V
against rollout truth, before and after PPO, per λ).
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


@dataclass
class Args(lm_world.LMArgs):
    out: str = common.arg("runs/studies/05_critic", "output folder for figures and results.json")
    methods: str = common.arg("grpo,ppo,ppo_head", "what to train: GRPO (the baseline), PPO with a separate "
                              "critic, PPO with a value head on the policy", METHODS, item=str)
    gae_lambda: float = common.arg(0.95, "PPO: GAE's λ over tokens (γ = 1)")
    critic_lr: float = common.arg(1e-3, "PPO: the critic's AdamW learning rate")
    critic_warmup: int = common.arg(10, "PPO: value-only updates on the cold start's samples before PPO begins")
    critic_lambdas: str = common.arg("1", "extra GAE λ for PPO runs in the does-the-critic-lie study (the "
                                     "--gae-lambda run is reused)", item=float, empty=True)
    truth_problems: int = common.arg(32, "held-out problems whose prefixes test the critic")
    truth_rollouts: int = common.arg(16, "fresh completions from each prefix: the rollout estimate of "
                                     "P(success | prefix)")
    variance_prompts: int = common.arg(64, "prompts (G completions each) whose per-completion gradients are measured")
    variance_bins: int = common.arg(6, "completion-length bins (equal widths in log length) of the gradient-variance "
                                    "study")

    SMOKE = dict(lm_world.LMArgs.SMOKE_LM, critic_warmup=1, truth_problems=2, truth_rollouts=2, variance_prompts=4,
                 variance_bins=2)

    def __post_init__(self):
        super().__post_init__()
        common.require_positive(self, "critic_lr", "truth_problems", "truth_rollouts", "variance_prompts",
                                "variance_bins")
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


def critic_against_rollouts(policy, critic: TokenCritic, tokenizer, args: Args, problems: list, device) -> dict:
    """Does the critic tell the truth? One completion per problem from the policy; at each of its
    prefixes (`step_prefixes`), the critic's V against P(success | prefix), estimated by
    `truth_rollouts` fresh completions of the same policy from that prefix. The noise floor is
    the mean error a perfect V would show against that estimate, √(2/π) · √(p(1-p)/K)."""
    generator = torch.Generator(device).manual_seed(args.seed + 13)
    _, texts = lm_world.sample(policy, tokenizer, [p.prompt for p in problems], args.max_new_tokens, generator, device)
    owners, prefixes = [], []
    for problem, text in zip(problems, texts):
        for prefix in step_prefixes(problem, text):
            owners.append(problem)
            prefixes.append(prefix)
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
    floor = math.sqrt(2 / math.pi) * np.sqrt(truth * (1 - truth) / K)
    return {"values": values.tolist(), "truth": truth.tolist(), "first_token": first.tolist(),
            "error_first_token": float(np.abs(values - truth)[first].mean()),
            "error_boundaries": float(np.abs(values - truth)[~first].mean()) if (~first).any() else float("nan"),
            "bias": float((values - truth).mean()), "noise_floor": float(floor.mean()),
            "correlation": common.pearson(values, truth)}


def critic_study(initial, tokenizer, args: Args, device, critics: dict, runs: dict, by_lambda: dict) -> dict:
    """The critics against rollout truth on the first --truth-problems held-out problems: each
    warmed-up critic at the cold start, then after PPO at each λ, and after PPO with the head."""
    problems = args.task.held_out(args.truth_problems)
    stages = {"cold start": (initial, critics["separate"]["critic"])}
    if "head" in critics:
        stages["cold start, value head"] = (initial, critics["head"]["critic"])
    stages |= {f"after PPO λ={lam:g}": (run["policy"], run["critic"]) for lam, run in sorted(by_lambda.items())}
    if "ppo_head" in runs:
        stages["after PPO, value head"] = (runs["ppo_head"]["policy"], runs["ppo_head"]["critic"])
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


def variance_by_length(gradients: torch.Tensor, lengths: torch.Tensor, bins: int, min_count: int = 8) -> dict:
    """Completions in `bins` length bins of equal width in log length (a bin with fewer than
    `min_count` completions is dropped); per bin, the mean length and the total variance
    tr Cov(g) = mean_i ||g_i - mean g||² (n - 1 in the denominator); and the slope of log
    variance on log length."""
    lengths = lengths.cpu().float()
    edges = np.geomspace(float(lengths.min()), float(lengths.max()) + 1, bins + 1)
    which = np.clip(np.searchsorted(edges, lengths.numpy(), side="right") - 1, 0, bins - 1)
    groups = [torch.from_numpy(np.flatnonzero(which == b)) for b in range(bins)]
    groups = [rows for rows in groups if len(rows) >= max(min_count, 2)]
    mean_length = [float(lengths[rows].mean()) for rows in groups]
    variance = [float(gradients[rows.to(gradients.device)].var(0).sum()) for rows in groups]
    return {"length": mean_length, "variance": variance, "count": [len(rows) for rows in groups],
            "slope": common.loglog_slope(mean_length, variance)}


def critic_name(lam: float) -> str:
    return f"critic GAE λ={lam:g}"


def gradient_variance_study(policy, critic: TokenCritic, tokenizer, rl: grpo.Args, args: Args, device) -> dict:
    """At the cold start: `variance_prompts` fresh problems, G completions each; each completion's
    policy-gradient vector under each Ψ (the outcome R with no baseline, minus the batch mean,
    RLOO, GRPO, and the warmed-up critic's GAE(γ = 1, λ) per token for --gae-lambda and each
    --critic-lambdas), and its total variance binned by completion length. Ψ = 1, the score
    Σ_t ∇ log π(y_t) alone, shows what length does by itself: R also changes with length."""
    rng = np.random.default_rng(rl.seed + 17)
    problems = rl.task.sample(args.variance_prompts, rng, exclude=frozenset(p.prompt for p in rl.task.held_out()))
    completions, rewards = grpo.sample_groups(policy, tokenizer, problems, rl,
                                              torch.Generator(device).manual_seed(rl.seed + 17), device)
    mask = completions.completion_mask
    with torch.no_grad():
        values = critic(completions)
    # every group baseline is one number per completion: g_i = Ψ_i · s_i with s_i = Σ_t ∇ log π(y_it)
    scores = per_completion_gradients(policy, completions, mask.float())
    psi = {"Ψ = 1 (the score alone)": torch.ones_like(rewards.flatten()), "Ψ = R (no baseline)": rewards.flatten(),
           **{grpo.NAMES[m]: grpo.group_advantages(rewards, m).flatten() for m in ("reinforce", "rloo", "grpo")}}

    def spread(g: torch.Tensor) -> dict:  # one (B, D) matrix at a time: they are large
        return {**variance_by_length(g, completions.lengths, args.variance_bins),
                # tr Cov(g) / ||E g||²: the variance on the scale of the signal (Ψ's scale cancels)
                "relative": float(g.var(0).sum() / g.mean(0).square().sum().clamp(min=1e-30))}

    study = {name: spread(weights[:, None] * scores) for name, weights in psi.items()}
    for lam in sorted({args.gae_lambda, *args.lambda_list}, reverse=True):
        advantages, _ = token_gae(values, rewards.flatten(), mask, 1.0, lam)
        study[critic_name(lam)] = spread(per_completion_gradients(policy, completions, advantages))
    return study


# ============================================================================================
# Figures, claims, report
# ============================================================================================
def plot_learning_curves(runs: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label, run in runs.items():
        ax.plot([e["samples"] for e in run["evals"]], [e["pass@1"] for e in run["evals"]], "o-", label=label)
    ax.set(xlabel="completions sampled", ylabel="held-out pass@1", title="PPO's critic against GRPO")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    common.save_figure(fig, path)


def plot_variance(variance: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for name, row in variance.items():
        ax.loglog(row["length"], row["variance"], "o-", label=f"{name} (slope {row['slope']:.2f})")
    ax.set(xlabel="completion length (tokens, bin mean)", ylabel="tr Cov of the per-completion gradient",
           title="Policy-gradient variance vs length, at the cold start")
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


def linear(slope: float) -> bool | None:
    """Roughly linear: a log-log slope within 1 ± 0.3; no verdict where no slope could be fitted."""
    return None if math.isnan(slope) else abs(slope - 1) <= 0.3


def variance_claims(args: Args, variance: dict) -> list[dict]:
    """The length claims, on the slopes of log variance against log completion length."""
    claims = []
    score, bare = variance.get("Ψ = 1 (the score alone)"), variance.get("Ψ = R (no baseline)")
    if score is not None and bare is not None:
        span = (f"completion lengths {bare['length'][0]:.0f}-{bare['length'][-1]:.0f}" if bare["length"]
                else "no length bin with enough completions")
        claims.append(common.claim(
            "over-long-generations", "the same scalar multiplies every per-token log-probability gradient, so the "
            "variance grows with episode length (the sum of T per-token scores: log-log slope within 1 ± 0.3)",
            f"Ψ = 1: slope {score['slope']:.2f} over {span}", linear(score["slope"])))
        claims.append(common.claim(
            "over-long-generations", "with a terminal reward the gradient's variance grows roughly linearly with "
            "episode length (here: log-log slope within 1 ± 0.3)",
            f"Ψ = R: slope {bare['slope']:.2f} over {span} (R itself changes with length here)", linear(bare["slope"])))
    names = [grpo.NAMES[m] for m in ("reinforce", "rloo", "grpo")]
    baselines = {name: row for name, row in variance.items() if name in names}
    if baselines:
        claims.append(common.claim(
            "over-long-generations", "long reasoning traces amplify variance even with baselines (here: every "
            "group baseline's log-log slope ≥ 0.5)",
            "; ".join(f"{name}: slope {row['slope']:.2f}" for name, row in baselines.items()),
            None if any(math.isnan(row["slope"]) for row in baselines.values())
            else all(row["slope"] >= 0.5 for row in baselines.values())))
    lams = sorted(lam for lam in {args.gae_lambda, *args.lambda_list} if critic_name(lam) in variance)
    if len(lams) > 1:
        relative = {lam: variance[critic_name(lam)]["relative"] for lam in lams}
        claims.append(common.claim(
            "whole-game §5", "GAE's λ is a bias-variance dial: a smaller λ leans on V and lowers the variance",
            "tr Cov(g) / ||E g||² with the warmed-up critic: " + ", ".join(f"λ={lam:g}: {r:.3g}" for lam, r in relative.items()),
            relative[lams[0]] < relative[lams[-1]]))
    return claims


def critic_claims(runs: dict, truth: dict) -> list[dict]:
    """The critic's memory, and whether its V tells the truth."""
    claims = []
    if "ppo" in runs and "grpo" in runs:
        mib = {m: runs[m]["state_bytes"] / 2**20 for m in ("grpo", "ppo", "ppo_head") if m in runs}
        ratio = mib["ppo"] / mib["grpo"]
        head = f"; a value head on the policy instead: {mib['ppo_head']:.2f} MiB" if "ppo_head" in mib else ""
        claims.append(common.claim(
            "over-long-generations", "PPO's critic, a copy of the policy, roughly doubles the memory footprint "
            "(here: training state 1.5-2.5x GRPO's)",
            f"parameters, gradients, Adam moments and reference: PPO {mib['ppo']:.2f} MiB, GRPO {mib['grpo']:.2f} MiB "
            f"({ratio:.2f}x){head}", 1.5 <= ratio <= 2.5))
    if truth:
        worst = max(truth, key=lambda stage: truth[stage]["error_boundaries"] / max(truth[stage]["noise_floor"], 1e-9))
        row = truth[worst]
        claims.append(common.claim(
            "whole-game §5", "a learned V can be wrong on sparse verifiable rewards, and a bad V injects systematic "
            "lies into Ψ (here: mean |V - P(success | prefix)| at step boundaries > 2x the rollouts' noise floor)",
            "; ".join(f"{stage}: first token {r['error_first_token']:.3f}, boundaries {r['error_boundaries']:.3f}, "
                      f"floor {r['noise_floor']:.3f}" for stage, r in truth.items()),
            bool(row["error_boundaries"] > 2 * row["noise_floor"])))
    return claims


def trained(runs: dict, by_lambda: dict) -> dict:
    """Each trained policy's run under its metric label: the methods, then PPO at each λ."""
    return runs | {f"ppo_lambda{lam:g}": run for lam, run in by_lambda.items()}


def collect_metrics(rl: grpo.Args, runs: dict, by_lambda: dict, variance: dict, truth: dict) -> dict:
    metrics = {}
    for label, run in trained(runs, by_lambda).items():
        metrics |= {f"{label}_pass@{k}": run["final"][f"pass@{k}"] for k in rl.ks}
        metrics |= {f"{label}_kl": run["final_kl"], f"{label}_length": run["final"]["length"],
                    f"{label}_wall_clock_s": run["wall_clock_s"], f"{label}_state_bytes": run["state_bytes"]}
        if run["peak_memory_bytes"] is not None:
            metrics[f"{label}_peak_memory_bytes"] = run["peak_memory_bytes"]
    for method, run in runs.items():
        metrics |= {f"{method}_late_{key}": grpo.late_mean(run, key) for key in ("length_right", "length_wrong")}
    for name, row in variance.items():
        metrics |= {f"variance_slope[{name}]": row["slope"], f"variance_relative[{name}]": row["relative"]}
    for stage, row in truth.items():
        for key in ("error_first_token", "error_boundaries", "bias", "noise_floor", "correlation"):
            metrics[f"critic[{stage}]_{key}"] = row[key]
    return metrics


def runs_table(rl: grpo.Args, args: Args, before: dict, runs: dict, by_lambda: dict) -> dict:
    """Each trained policy on the held-out problems, with the bytes its training holds."""
    last = f"pass@{rl.final_samples}"
    labelled = [(NAMES[m] if m not in CRITICS else f"{SHORT[m]}, λ={args.gae_lambda:g}", r) for m, r in runs.items()]
    labelled += [(f"{SHORT['ppo']}, λ={lam:g}", r) for lam, r in by_lambda.items() if lam != args.gae_lambda]
    rows = [["cold start", "-", before["pass@1"], before[last], 0.0, "-", "-", "-"]]
    rows += [[label, f"{100 * (run['final']['pass@1'] - before['pass@1']):+.1f}", run["final"]["pass@1"],
              run["final"][last], run["final_kl"], f"{np.mean([h['zero_spread'] for h in run['history']]):.0%}",
              run["state_bytes"] / 2**20, run["wall_clock_s"]] for label, run in labelled]
    return {"header": ["policy", "Δ pass@1 (points)", "pass@1", last, "KL", "zero-spread", "MiB", "seconds"],
            "rows": rows}


def three_digits(x: float) -> str:
    """A number rounded to 3 significant digits, written in full with thousands separators."""
    return f"{float(f'{x:.3g}'):,g}"


def variance_table(variance: dict) -> dict:
    """Per Ψ: the log-log slope, the relative variance and tr Cov in each length bin (the bins are
    the same completions for every Ψ)."""
    lengths = next(iter(variance.values()))["length"] if variance else []
    bins = f"tr Cov at mean length {' / '.join(f'{x:.0f}' for x in lengths)}" if lengths else "tr Cov (no length bin)"
    return {"header": ["Ψ", "log-log slope", "tr Cov / ‖E g‖²", bins],
            "rows": [[name, row["slope"], row["relative"], " / ".join(map(three_digits, row["variance"]))]
                     for name, row in variance.items()]}


def truth_table(truth: dict) -> dict:
    """Per critic: its mean error |V - P(success | prefix)| at the first token and at step
    boundaries, its bias, its correlation with the rollout truth, and the noise floor."""
    return {"header": ["critic", "error, first token", "error, step boundaries", "bias", "correlation",
                       "noise floor"],
            "rows": [[stage, r["error_first_token"], r["error_boundaries"], r["bias"], r["correlation"],
                      r["noise_floor"]] for stage, r in truth.items()]}


def report(rl: grpo.Args, args: Args, claims: list[dict], tables: dict) -> None:
    print(f"\nHeld-out ({rl.eval_problems} problems, {rl.final_samples} samples each), after {rl.rl_steps} updates "
          f"of {rl.prompts}x{rl.group_size} completions, β={rl.beta:g}:")
    print(common.format_table(tables["runs"]["rows"], tables["runs"]["header"]))
    print("\nPer-completion gradient variance at the cold start, by completion length:")
    print(common.format_table(tables["variance"]["rows"], tables["variance"]["header"]))
    print(f"\nThe critic's V against P(success | prefix) from {args.truth_rollouts} rollouts per prefix:")
    print(common.format_table(tables["critic_truth"]["rows"], tables["critic_truth"]["header"]))
    print("\n" + common.format_claims(claims))


def without_models(runs: dict) -> dict:
    """The runs without their policy and critic (what results.json can hold)."""
    return {name: {k: v for k, v in run.items() if k not in ("policy", "critic")} for name, run in runs.items()}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out, initial, tokenizer, info = lm_world.start_lm_run(args)
    rl = lm_world.chapter_lm_args(grpo.Args, args)
    print(f"05 study: PPO's learned critic; policy {info['path']}, device {device}")
    held_out = rl.task.held_out(rl.eval_problems)
    before = grpo.final_evaluation(initial, tokenizer, rl, held_out, device)
    critics = warmed_critics(initial, tokenizer, rl, args, device)
    variance = gradient_variance_study(initial, critics["separate"]["critic"], tokenizer, rl, args, device)
    runs = {m: run_method(initial, tokenizer, rl, args, m, held_out, device, critics) for m in args.method_list}
    by_lambda = critic_lambda_runs(initial, tokenizer, rl, args, held_out, device, runs, critics) if "ppo" in runs else {}
    truth = critic_study(initial, tokenizer, args, device, critics, runs, by_lambda)
    plot_learning_curves({NAMES[m]: r for m, r in runs.items()}
                         | {f"PPO λ={lam:g}": r for lam, r in by_lambda.items() if lam != args.gae_lambda},
                         out / "learning_curves.png")
    plot_variance(variance, out / "gradient_variance.png")
    plot_critic_truth(truth, out / "critic_truth.png")
    claims = variance_claims(args, variance) + critic_claims(runs, truth)
    metrics = collect_metrics(rl, runs, by_lambda, variance, truth)
    metrics["tables"] = {"runs": runs_table(rl, args, before, runs, by_lambda), "variance": variance_table(variance),
                         "critic_truth": truth_table(truth)}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, chapter_args=dataclasses.asdict(rl), cold_start=before,
                         runs=without_models(trained(runs, by_lambda)), gradient_variance=variance,
                         critic_truth=truth, critic_warmup_losses={kind: c["losses"] for kind, c in critics.items()})
    report(rl, args, claims, metrics["tables"])
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
