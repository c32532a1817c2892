"""02 — The advantage zoo against exact truth: MC, TD, n-step and GAE(λ), and two dilemmas.

Every policy-gradient method fills the slot Ψ_t in  ∇J = E[Σ_t Ψ_t ∇log π(a_t|s_t)]. Here the
fillings are measured against the truth, on the survey's robot (common.KeyToDoor): take the key at
step 0, walk a corridor of L cells where small distractor rewards fall at random, get 1 at the door
if the key was taken. The world is tabular, so dynamic programming gives the exact A^π(s, a), and
each estimator's error splits into bias² and variance, at the key step and in the corridor.

  MC         Ψ_t = G_t - V(s_t)                                   (λ = 1)
  TD(0)      Ψ_t = δ_t = r_t + γ V(s_{t+1}) - V(s_t)              (λ = 0)
  n-step     Ψ_t = Σ_{k<n} γ^k r_{t+k} + γ^n V(s_{t+n}) - V(s_t)
  GAE(γ, λ)  Ψ_t = Σ_l (γλ)^l δ_{t+l}, computed backwards: A_t = δ_t + γλ A_{t+1}
  flat       Ψ_t = R - V(s_0)   (the episode's return on every step: outcome-only RL)

Then the survey's two dilemmas (§3), measured: with γ < 1 the credit reaching the key shrinks as
γ^L (discount); with γ = 1 its variance grows with L as the distractors pile up (dilution). Last,
a tabular actor-critic learns the task with MC, TD(0) and GAE advantages, for several L.

Read beside: credit-assignment-problem-survey.txt §2.1, §3, §4.1.1; credit-assignment-is-the-whole-
game.txt §4, §5 (Diagram 4). Paper: Schulman et al. (2016), High-Dimensional Continuous Control
Using Generalized Advantage Estimation.

Figures (runs/02_gae/): bias_variance_lambda.png and bias_variance_nstep.png (bias² and variance
at the key step vs λ and vs n, exact and noisy V); dilemmas.png; episodes_to_solve.png (episodes
to 90% success vs L); diagram4.png (one trajectory, flat next to GAE); results.json (every number).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm import tqdm

from common import (
    KeyToDoor,
    RunArgs,
    arg,
    as_list,
    claim,
    evaluate_policy,
    format_claims,
    format_table,
    loglog_slope,
    play_episodes,
    plot_curves,
    require,
    require_positive,
    run_script,
    save_figure,
    seed_everything,
    start_run,
    write_results,
)


# ============================================================================================
# The estimators. All time-major, shape (T, N); ends[t] marks the last step of an episode;
# values[t] = V(s_t) and next_values[t] = V(s_{t+1}) (ignored where ends[t]).
# ============================================================================================
def reward_to_go(rewards, ends, gamma: float) -> torch.Tensor:
    """G_t = r_t + γ G_{t+1} (1 - end_t), summed backwards; the tail after the last end is summed
    as if it ended at T. A compact copy of the reward_to_go that 01_reinforce_pong.py teaches
    (tests/test_02_gae.py checks that the two agree)."""
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running * (~ends[t])
        returns[t] = running
    return returns


def mc_advantage(rewards, values, ends, gamma: float) -> torch.Tensor:
    """Monte Carlo return minus the baseline: G_t - V(s_t)."""
    return reward_to_go(rewards, ends, gamma) - values


def td_residuals(rewards, values, next_values, ends, gamma: float) -> torch.Tensor:
    """δ_t = r_t + γ V(s_{t+1}) (1 - end_t) - V(s_t)."""
    return rewards + gamma * next_values * (~ends) - values


def gae(rewards, values, next_values, ends, gamma: float, lam: float) -> torch.Tensor:
    """GAE(γ, λ) by the backward recursion A_t = δ_t + γλ (1 - end_t) A_{t+1}."""
    deltas = td_residuals(rewards, values, next_values, ends, gamma)
    advantages = torch.zeros_like(deltas)
    running = torch.zeros_like(deltas[0])
    for t in reversed(range(len(deltas))):
        running = deltas[t] + gamma * lam * (~ends[t]) * running
        advantages[t] = running
    return advantages


def nstep_advantage(rewards, values, next_values, ends, gamma: float, n: int) -> torch.Tensor:
    """Σ_{k<n} γ^k r_{t+k} + γ^n V(s_{t+n}) - V(s_t); no bootstrap past an episode's end.

    Near the end of the batch, the window stops at T - 1 and bootstraps from V(s_T).
    """
    T = len(rewards)
    advantages = torch.zeros_like(rewards)
    for t in range(T):
        total = torch.zeros_like(rewards[0])
        alive = torch.ones_like(ends[0])  # no episode end yet within the window
        window = min(n, T - t)
        for k in range(window):
            total = total + alive * gamma**k * rewards[t + k]
            alive = alive & ~ends[t + k]
        total = total + alive * gamma**window * next_values[t + window - 1]  # V(s_{t+window})
        advantages[t] = total - values[t]
    return advantages


def flat_broadcast(rewards, values, ends) -> torch.Tensor:
    """Ψ_t = R - V(s_0): the episode's undiscounted return minus the start value, on every step."""
    returns = reward_to_go(rewards, ends, 1.0)
    starts = torch.cat([torch.ones_like(ends[:1]), ends[:-1]])  # first step of each episode
    episode_return = torch.zeros_like(returns)
    start_value = torch.zeros_like(values)
    for t in range(len(rewards)):
        episode_return[t] = torch.where(starts[t], returns[t], episode_return[t - 1])
        start_value[t] = torch.where(starts[t], values[t], start_value[t - 1])
    return episode_return - start_value


def gae_name(lam: float) -> str:
    return f"GAE λ={lam:g}"


def nstep_name(n: int) -> str:
    return f"{n}-step"


# ============================================================================================
# Key-to-door: the exact truth by DP, and what an estimator's error is there
# ============================================================================================
def make_env(args: Args, corridor: int, num_envs: int, seed: int, device) -> KeyToDoor:
    return KeyToDoor(num_envs, corridor=corridor, distractor_prob=args.distractor_prob,
                     distractor=args.distractor, noise=args.noise, seed=seed, device=device)


def uniform_policy(env: KeyToDoor) -> torch.Tensor:
    """π(a | s) = 1/2 everywhere: take the key half the time."""
    return torch.full((env.num_states + 1, 2), 0.5, device=env.device)


def exact_truth(env: KeyToDoor, policy: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """V^π and A^π = Q^π - V^π by dynamic programming (common.evaluate_policy), on env's device."""
    P, R = env.model()
    V, Q = evaluate_policy(P, R, policy.double().cpu(), gamma)
    return V.float().to(env.device), (Q - V[:, None]).float().to(env.device)


def all_estimates(episode: dict, V: torch.Tensor, gamma: float, lambdas, nsteps) -> dict:
    """Every estimator's Ψ on the sampled episodes, with the value table V as the baseline."""
    r, ends = episode["rewards"], episode["ends"]
    v, v_next = V[episode["states"]], V[episode["next_states"]]
    estimates = {gae_name(lam): gae(r, v, v_next, ends, gamma, lam) for lam in lambdas}
    estimates.update({nstep_name(n): nstep_advantage(r, v, v_next, ends, gamma, n) for n in nsteps})
    estimates["MC"] = mc_advantage(r, v, ends, gamma)
    estimates["flat"] = flat_broadcast(r, v, ends)
    return estimates


def bias_and_variance(estimate: torch.Tensor, truth: torch.Tensor, actions: torch.Tensor) -> dict:
    """Error e = Ψ_t - A(s_t, a_t) of one estimator.

    At the key step what the policy gradient uses is the contrast between the two actions, so
    bias² is measured on it: (E[e | take] - E[e | leave])². An error shared by both actions,
    like a wrong V(s_0) in G - V(s_0), biases Ψ but not the gradient. Variance is Var(e) within
    each action, averaged. In the corridor the actions do nothing (A = 0), so everything Ψ puts
    there is noise on irrelevant log-probs: we report its mean square, E[Ψ²].
    """
    error = estimate - truth
    by_action = [error[0][actions[0] == a] for a in (0, 1)]
    return {"key_bias2": float((by_action[1].mean() - by_action[0].mean()) ** 2),
            "key_var": float((by_action[0].var() + by_action[1].var()) / 2),
            "corridor_mse": float((error[1:-1] ** 2).mean())}


def measure_estimators(args: Args, episode: dict, values: torch.Tensor, truth: torch.Tensor) -> dict:
    """bias_and_variance of every estimator (γ = 1) with the value table `values` as baseline."""
    estimates = all_estimates(episode, values, 1.0, args.lambda_list, args.nstep_list)
    return {name: bias_and_variance(psi, truth, episode["actions"]) for name, psi in estimates.items()}


# ============================================================================================
# Learning: a tabular actor-critic with GAE(γ = 1, λ) advantages (MC at λ = 1, TD(0) at λ = 0)
# ============================================================================================
def actor_critic(args: Args, L: int, lam: float, seed: int, device) -> int:
    """Episodes until π(take key | key room) ≥ args.success (args.max_episodes if never).

    Actor: softmax over tabular logits, policy-gradient step with Ψ = GAE(γ=1, λ).
    Critic: tabular V moved toward the λ-return Ψ + V (MC target at λ = 1, TD(0) at λ = 0).
    """
    seed_everything(seed)
    env = make_env(args, L, args.batch, seed, device)
    logits = torch.zeros(env.num_states + 1, 2, device=device, requires_grad=True)
    V = torch.zeros(env.num_states + 1, device=device)
    actor = torch.optim.SGD([logits], lr=args.actor_lr)
    for episodes in range(args.batch, args.max_episodes + 1, args.batch):
        episode = play_episodes(env, torch.softmax(logits.detach(), 1))
        s, a = episode["states"], episode["actions"]
        advantages = gae(episode["rewards"], V[s], V[episode["next_states"]], episode["ends"], 1.0, lam)
        logp = torch.log_softmax(logits, 1)[s, a]
        actor.zero_grad()
        # sum over steps, mean over episodes: the key step's share does not shrink with L
        (-(logp * advantages).sum(0).mean()).backward()
        actor.step()
        # critic: V(s) += lr · mean over the batch's visits of s of (λ-return - V(s)) = Ψ_t
        target_error = advantages.flatten()
        visits = torch.bincount(s.flatten(), minlength=len(V)).clamp(min=1)
        V += args.critic_lr * torch.zeros_like(V).index_add_(0, s.flatten(), target_error) / visits
        if torch.softmax(logits.detach()[0], 0)[1] >= args.success:
            return episodes
    return args.max_episodes


# ============================================================================================
# Config
# ============================================================================================
@dataclass
class Args(RunArgs):
    out: str = arg("runs/02_gae", "output folder for figures and results.json")
    lengths: str = arg("5,10,20,40,80", "corridor lengths L (the delay), comma-separated", item=int)
    distractor_prob: float = arg(0.5, "probability of a distractor reward at each corridor step")
    distractor: float = arg(0.2, "size of a distractor reward (the key is worth 1)")
    noise: float = arg(0.0, "std of Gaussian noise added to every reward")
    lambdas: str = arg("0,0.5,0.8,0.9,0.95,0.99,1", "GAE λ values for the bias-variance study", item=float)
    nsteps: str = arg("1,2,4,8,16,32", "n values for the n-step study", item=int)
    value_noise: float = arg(0.2, "std of the error added to the exact V (the 'noisy V')")
    critics: int = arg(8, "noisy critics (independent draws of that error) averaged over")
    episodes: int = arg(20_000, "sampled episodes per corridor length in the exact-truth study")
    learn_seeds: int = arg(5, "seeds per (estimator, L) in the actor-critic experiment")
    batch: int = arg(16, "episodes per actor-critic update")
    max_episodes: int = arg(20_000, "actor-critic budget; unsolved runs count as this")
    actor_lr: float = arg(0.1, "actor step size (SGD on the tabular logits)")
    critic_lr: float = arg(0.2, "critic step size (tabular V)")
    gae_lambda: float = arg(0.9, "λ of the GAE learner")
    success: float = arg(0.9, "solved once π(take key | key room) reaches this")

    SMOKE = dict(lengths="3,6", lambdas="0,0.9,1", nsteps="1,4", episodes=256, critics=2, learn_seeds=1,
                 max_episodes=64, batch=8)

    def __post_init__(self):
        require_positive(self, "episodes", "critics", "learn_seeds", "batch", "max_episodes",
                         "actor_lr", "critic_lr")
        require(0 <= self.distractor_prob <= 1, "--distractor-prob must be in [0, 1]")
        require(self.noise >= 0 and self.value_noise >= 0, "noise levels must be non-negative")
        require(0 <= self.gae_lambda <= 1, "--gae-lambda must be in [0, 1]")
        require(0 < self.success < 1, "--success must be in (0, 1)")
        require(all(L >= 1 for L in self.length_list), "--lengths must be positive integers")
        require(all(0 <= lam <= 1 for lam in self.lambda_list), "--lambdas must be in [0, 1]")
        require(all(n >= 1 for n in self.nstep_list), "--nsteps must be positive integers")

    @property
    def length_list(self) -> list[int]:
        return as_list(self.lengths, int)

    @property
    def lambda_list(self) -> list[float]:
        return as_list(self.lambdas, float)

    @property
    def nstep_list(self) -> list[int]:
        return as_list(self.nsteps, int)


# ============================================================================================
# The studies
# ============================================================================================
def mean_over_draws(draws: list[dict]) -> dict:
    """{estimator: {metric: value}} averaged over the noisy critics' draws."""
    return {name: {metric: float(np.mean([draw[name][metric] for draw in draws]))
                   for metric in draws[0][name]} for name in draws[0]}


def exact_truth_study(args: Args, device) -> dict:
    """For each L: a uniform policy, its exact A, and every estimator's bias² and variance,
    with the exact V and with noisy critics V + ε, ε ~ N(0, value_noise²) per state. For the
    noisy critics the numbers are averaged over `critics` independent draws of ε, so they are
    the expected bias² and variance of an estimator fed a critic that is off by that much."""
    results = {}
    for L in args.length_list:
        env = make_env(args, L, args.episodes, args.seed, device)
        policy = uniform_policy(env)
        V, A = exact_truth(env, policy, gamma=1.0)
        episode = play_episodes(env, policy)
        truth = A[episode["states"], episode["actions"]]

        generator = torch.Generator().manual_seed(args.seed)
        noisy = []
        for _ in range(args.critics):
            error = args.value_noise * torch.randn(len(V), generator=generator).to(device)
            error[-1] = 0.0  # the terminal state's value is known: 0
            noisy.append(measure_estimators(args, episode, V + error, truth))
        results[L] = {"exact V": measure_estimators(args, episode, V, truth),
                      "noisy V": mean_over_draws(noisy)}
    return results


DISCOUNTS = (0.9, 0.99, 0.999, 1.0)


def dilemmas(args: Args, device) -> dict:
    """Discount: the exact γ-discounted advantage of taking the key, relative to γ = 1 (DP).
    Dilution: with γ = 1 and no critic (V = 0), the sampled credit at the key is R; its
    variance and the signal-to-noise ratio A² / Var as L grows."""
    out = {"lengths": args.length_list, "relative_credit": {}, "key_var": [], "snr": []}
    for gamma in DISCOUNTS:
        credit = []
        for L in args.length_list:
            env = make_env(args, L, 1, args.seed, device)
            _, A = exact_truth(env, uniform_policy(env), gamma)
            credit.append(float(A[0, 1] - A[0, 0]))  # take vs leave, in the key room
        out["relative_credit"][gamma] = credit
    for L in args.length_list:
        env = make_env(args, L, args.episodes, args.seed, device)
        episode = play_episodes(env, uniform_policy(env))
        R = episode["rewards"].sum(0)
        took = episode["actions"][0] == 1
        signal = float(R[took].mean() - R[~took].mean())  # sampled contrast, truth 1
        variance = float((R[took].var() + R[~took].var()) / 2)
        out["key_var"].append(variance)
        out["snr"].append(signal**2 / variance)
    return out


def gae_vs_mc_at_gamma_one(args: Args, device) -> dict:
    """The essay says that with γ = 1 'GAE with any λ reduces to the Monte Carlo return'.
    Measure the largest gap |GAE_λ - (G - V)| on sampled episodes for a few λ, with the exact V
    and with V = 0 (no critic). They agree for λ = 1 only."""
    env = make_env(args, args.length_list[0], 256, args.seed, device)
    policy = uniform_policy(env)
    V, _ = exact_truth(env, policy, gamma=1.0)
    episode = play_episodes(env, policy)
    r, ends = episode["rewards"], episode["ends"]
    gaps = {}
    for critic, table in (("exact V", V), ("V = 0", torch.zeros_like(V))):
        v, v_next = table[episode["states"]], table[episode["next_states"]]
        mc = mc_advantage(r, v, ends, 1.0)
        gaps[critic] = {lam: float((gae(r, v, v_next, ends, 1.0, lam) - mc).abs().max())
                        for lam in (0.0, 0.5, 0.9, 0.99, 1.0)}
    return gaps


def learning_study(args: Args, device) -> dict:
    """{learner: {L: episodes to solve, one per seed}} for MC, GAE(--gae-lambda) and TD(0)."""
    learners = {"MC (λ=1)": 1.0, f"GAE (λ={args.gae_lambda:g})": args.gae_lambda, "TD(0) (λ=0)": 0.0}
    results = {}
    runs = [(name, lam, L) for name, lam in learners.items() for L in args.length_list]
    for name, lam, L in tqdm(runs, desc="actor-critic", leave=False):
        results.setdefault(name, {})[L] = [actor_critic(args, L, lam, args.seed + i, device)
                                           for i in range(args.learn_seeds)]
    return results


def diagram4(args: Args, device) -> dict:
    """The essay's Diagram 4 on one trajectory that took the key (second corridor length):
    {title: Ψ_t per step} for the flat broadcast and for per-step GAE with the exact V."""
    L = args.length_list[min(1, len(args.length_list) - 1)]
    env = make_env(args, L, 64, args.seed, device)
    policy = uniform_policy(env)
    V, _ = exact_truth(env, policy, gamma=1.0)
    episode = play_episodes(env, policy)
    n = int(torch.nonzero(episode["actions"][0] == 1)[0])  # the first trajectory that took the key
    r, ends = episode["rewards"][:, n:n + 1], episode["ends"][:, n:n + 1]
    v, v_next = V[episode["states"][:, n:n + 1]], V[episode["next_states"][:, n:n + 1]]
    bars = {"flat: R - V(s_0) on every step": flat_broadcast(r, v, ends),
            f"GAE(γ=1, λ={args.gae_lambda:g}), exact V": gae(r, v, v_next, ends, 1.0, args.gae_lambda)}
    return {title: psi[:, 0].cpu().tolist() for title, psi in bars.items()}


# ============================================================================================
# Figures
# ============================================================================================
def plot_bias_variance(study: dict, names: list[str], xs: list[float], xlabel: str, path, log_x=False):
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for row, critic in enumerate(("exact V", "noisy V")):
        for col, (metric, label) in enumerate((("key_bias2", "bias² (take vs leave)"),
                                               ("key_var", "variance"))):
            ax = axes[row, col]
            for L, by_critic in study.items():
                ax.plot(xs, [by_critic[critic][name][metric] for name in names], "o-", label=f"L={L}")
            ax.set(title=f"{critic}: {label} at the key step", xlabel=xlabel)
            if log_x:
                ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize="small")
    save_figure(fig, path)


def plot_dilemmas(dilemma: dict, path):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for gamma, credit in dilemma["relative_credit"].items():
        axes[0].plot(dilemma["lengths"], credit, "o-", label=f"γ={gamma:g}")
    axes[0].set(title="discount dilemma: exact credit reaching the key", xlabel="corridor length L",
                ylabel="A(take) - A(leave), γ-discounted (γ=1: 1)")
    axes[0].legend(fontsize="small")
    axes[1].plot(dilemma["lengths"], dilemma["key_var"], "o-", label="Var of the return at the key (γ=1)")
    axes[1].plot(dilemma["lengths"], dilemma["snr"], "s--", label="signal² / variance")
    axes[1].set(title="dilution dilemma (γ = 1, no critic)", xlabel="corridor length L",
                xscale="log", yscale="log")
    axes[1].legend(fontsize="small")
    for ax in axes:
        ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_learning(learning: dict, lengths: list[int], path):
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    plot_curves(ax, np.array(lengths), {name: np.array([by_L[L] for L in lengths]).T
                                       for name, by_L in learning.items()})
    ax.set(xlabel="corridor length L", ylabel="episodes to 90% success",
           title="Tabular actor-critic: who learns the key fastest?")
    save_figure(fig, path)


def plot_diagram4(diagram: dict, path):
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, (title, psi) in zip(axes, diagram.items()):
        ax.bar(np.arange(len(psi)), psi, color=["tab:red"] + ["tab:blue"] * (len(psi) - 1))
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set(title=title, xlabel="step (0: key taken; last: door)")
    axes[0].set_ylabel("advantage Ψ_t")
    save_figure(fig, path)


# ============================================================================================
# Claims and report
# ============================================================================================
def decay_steps(gamma: float, fraction: float) -> float:
    """The delay d at which γ^d = fraction: d = ln(fraction) / ln(γ)."""
    return math.log(fraction) / math.log(gamma)


def toy_reward_to_go(rewards: list[float]) -> list[float]:
    """G_t with γ = 1 of one episode given as a list of rewards (the essays' toy trajectories)."""
    ends = torch.zeros(len(rewards), 1, dtype=torch.bool)
    ends[-1] = True
    return reward_to_go(torch.tensor(rewards, dtype=torch.float32)[:, None], ends, 1.0)[:, 0].tolist()


def arithmetic_claims() -> list[dict]:
    """The essays' discount arithmetic and their five-step toy, computed."""
    passed, failed = toy_reward_to_go([0, 0, 0, 0, 1]), toy_reward_to_go([0, 0, 0, 0, 0])
    return [
        claim("survey §2.1", "0.99^500 ≈ 0.0066", f"0.99^500 = {0.99**500:.4f}",
              math.isclose(0.99**500, 0.0066, rel_tol=0.02)),
        claim("survey §3", "with γ = 0.999, γ^999 ≈ 0.00043", f"0.999^999 = {0.999**999:.3f}, "
              f"{0.999**999 / 0.00043:.0f}x the essay's number; 0.00043 needs a delay of "
              f"{decay_steps(0.999, 0.00043):,.0f} steps at γ = 0.999 (or {decay_steps(0.99, 0.00043):.0f} "
              "at γ = 0.99)", math.isclose(0.999**999, 0.00043, rel_tol=0.1)),
        claim("over-long-generations", "0.99^999 ≈ 0.00004", f"0.99^999 = {0.99**999:.2e}",
              math.isclose(0.99**999, 0.00004, rel_tol=0.15)),
        claim("whole-game §3 (and App. A)", "with γ = 1 and one terminal reward, every step's reward-to-go "
              "is that reward: the useless step gets the same +1 as the decisive one",
              f"G_t of r = [0, 0, 0, 0, 1]: {passed}", all(g == 1 for g in passed)),
        claim("whole-game §3", "if the verifier fails (r_5 = 0), every G_t = 0",
              f"G_t of r = [0, 0, 0, 0, 0]: {failed}", all(g == 0 for g in failed)),
    ]


def estimator_claims(study: dict, gaps: dict) -> list[dict]:
    """TD vs MC at the longest L (noisy critic), and whether GAE is MC when γ = 1."""
    claims = []
    L = max(study)
    noisy, exact = study[L]["noisy V"], study[L]["exact V"]
    td, mc = gae_name(0), gae_name(1)
    if td in noisy and mc in noisy:
        claims.append(claim(
            "survey §4.1.1", "λ = 0 is one-step TD (low variance, high bias); λ = 1 is Monte Carlo "
            "(high variance, no bias)",
            f"at the key, L={L}, noisy V: bias² {noisy[td]['key_bias2']:.3g} (λ=0) vs "
            f"{noisy[mc]['key_bias2']:.3g} (λ=1), variance {noisy[td]['key_var']:.3g} vs "
            f"{noisy[mc]['key_var']:.3g}; with the exact V, λ=0 has bias² {exact[td]['key_bias2']:.2g}: "
            "the bias is the critic's, not λ's",
            noisy[td]["key_var"] < noisy[mc]["key_var"] and noisy[td]["key_bias2"] > noisy[mc]["key_bias2"]))
    worst = max(gaps["exact V"][lam] for lam in gaps["exact V"] if lam < 1)
    claims.append(claim(
        "survey §4.1.1", "with γ = 1, GAE with any λ reduces to the Monte Carlo return",
        f"max |GAE_λ - (G - V)| on sampled episodes, exact V: λ=1 {gaps['exact V'][1.0]:.1e}, "
        f"λ<1 up to {worst:.2f}; with V = 0, λ=0.9: {gaps['V = 0'][0.9]:.2f}. It holds for λ = 1 only "
        "(any V); with λ < 1 GAE keeps bootstrapping, and with V = 0 it discounts by λ instead of γ",
        all(gap < 1e-4 for by_lam in gaps.values() for gap in by_lam.values())))
    return claims


def dilemma_claims(dilemma: dict) -> list[dict]:
    """The discount dilemma as a formula, and the dilution dilemma's two halves (survey §3, §5)."""
    lengths, var, snr = dilemma["lengths"], dilemma["key_var"], dilemma["snr"]
    credit = dilemma["relative_credit"]
    # the door's reward is L + 1 steps after the key step
    formula_gap = max(abs(c / gamma ** (L + 1) - 1) for gamma, by_L in credit.items() for L, c in zip(lengths, by_L))
    span = f"L = {lengths[0]} → {lengths[-1]}"
    enough = len(lengths) >= 2
    slope = loglog_slope(lengths, var) if enough else float("nan")
    return [
        claim("survey §2.1", "a reward d steps after the decisive action reaches it discounted by γ^d",
              f"exact credit of taking the key (DP) against γ^(L+1), every γ in {list(credit)} and L in "
              f"{lengths}: largest relative gap {formula_gap:.1e}; at γ = 0.9, L = {lengths[-1]}: "
              f"{credit[0.9][-1]:.2g}", formula_gap < 1e-6),
        claim("survey §3", "pushing γ to 1 preserves the signal's magnitude",
              f"exact credit of taking the key at γ = 1: {', '.join(f'{c:.3f}' for c in credit[1.0])} at L = "
              f"{', '.join(map(str, lengths))}", all(math.isclose(c, 1.0, rel_tol=1e-6) for c in credit[1.0])),
        claim("survey §3", "with γ = 1 the credit is diluted: the estimate's variance grows and the signal "
              "from the decisive action washes out",
              f"γ = 1, no critic, {span}: variance of the return at the key {var[0]:.3g} → {var[-1]:.3g}, "
              f"signal²/variance {snr[0]:.3g} → {snr[-1]:.3g}",
              all(np.diff(var) > 0) and all(np.diff(snr) < 0) if enough else None),
        claim("survey §5", "Monte Carlo's variance scales with the trajectory length",
              f"variance of the return at the key ∝ L^{slope:.2f} ({span})" if enough
              else "one corridor length: no slope to fit", 0.8 <= slope <= 1.2 if enough else None),
    ]


def learning_claims(learning: dict, lengths: list[int], budget: int) -> list[dict]:
    """Does bootstrapping's cost grow with the delay faster than Monte Carlo's (survey §2.1)?
    TD(0)'s growth from the shortest L to the longest against twice MC's. A run that never
    solves counts as the budget, so a censored growth decides only when it already exceeds that."""
    statement = "small value errors compound when bootstrapped over long horizons"
    td, mc = "TD(0) (λ=0)", "MC (λ=1)"
    short, long = min(lengths), max(lengths)
    median = {name: (float(np.median(by_L[short])), float(np.median(by_L[long]))) for name, by_L in learning.items()}
    if len(lengths) < 2 or max(median[td][0], median[mc][0], median[mc][1]) >= budget:
        return [claim("survey §2.1", statement, "needs two corridor lengths, and MC (at both) and TD(0) (at the "
                      f"shortest) solved within the budget of {budget:,} episodes", None)]
    growth = {name: b / a for name, (a, b) in median.items()}
    censored = median[td][1] >= budget
    measured = (f"median episodes to solve, L = {short} → {long}: "
                + ", ".join(f"{name} {a:,.0f} → {b:,.0f} ({'≥ ' if b >= budget else ''}{growth[name]:.1f}x)"
                            for name, (a, b) in median.items()))
    compounds = growth[td] > 2 * growth[mc]
    return [claim("survey §2.1", statement, measured, True if compounds else (None if censored else False))]


def check_claims(args: Args, study: dict, dilemma: dict, gaps: dict, learning: dict) -> list[dict]:
    return (arithmetic_claims() + estimator_claims(study, gaps) + dilemma_claims(dilemma)
            + learning_claims(learning, args.length_list, args.max_episodes))


def headline_metrics(study: dict, dilemma: dict, learning: dict, lengths: list[int]) -> dict:
    """results.json's headline numbers: TD, MC and flat at the longest L, then per L."""
    L_max = max(lengths)
    metrics = {}
    for name in (gae_name(0), gae_name(1), "flat"):
        for critic in ("exact V", "noisy V"):
            for metric, value in study[L_max][critic].get(name, {}).items():
                metrics[f"L{L_max}[{critic}][{name}]_{metric}"] = value
    for i, L in enumerate(lengths):
        metrics[f"L{L}_key_return_var_gamma1"] = dilemma["key_var"][i]
        metrics[f"L{L}_credit_gamma0.99"] = dilemma["relative_credit"][0.99][i]
        for name, by_L in learning.items():
            metrics[f"L{L}_episodes_to_solve[{name}]"] = float(np.median(by_L[L]))
    return metrics


def print_report(args: Args, study: dict, dilemma: dict, learning: dict, claims: list[dict]) -> None:
    L_max = max(args.length_list)
    names = [gae_name(lam) for lam in args.lambda_list] + [nstep_name(n) for n in args.nstep_list]
    at_L = study[L_max]
    rows = [[name] + [f"{at_L[critic][name]['key_bias2']:.3g} / {at_L[critic][name]['key_var']:.3g}"
                      for critic in ("exact V", "noisy V")] + [at_L["exact V"][name]["corridor_mse"]]
            for name in names + ["MC", "flat"]]
    print(f"\nAt L={L_max}, key step bias² / variance, and mean Ψ² on the irrelevant corridor steps:")
    print(format_table(rows, ["estimator", "exact V", "noisy V", "corridor E[Ψ²]"]))
    rows = [[L, *(dilemma["relative_credit"][g][i] for g in DISCOUNTS), dilemma["key_var"][i],
             *(float(np.median(by_L[L])) for by_L in learning.values())]
            for i, L in enumerate(args.length_list)]
    print("\nCredit reaching the key (γ-discounted, exact), γ=1 return variance, and median episodes "
          "to solve:")
    print(format_table(rows, ["L", *(f"γ={g:g}" for g in DISCOUNTS), "Var R (γ=1)", *learning.keys()]))
    print("\n" + format_claims(claims))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = start_run(args)
    print(f"02 advantage estimators on key-to-door, L in {args.length_list}, device {device}")

    study = exact_truth_study(args, device)  # every Ψ against the exact A, exact and noisy V
    dilemma = dilemmas(args, device)  # discount and dilution (survey §3)
    gaps = gae_vs_mc_at_gamma_one(args, device)  # does GAE reduce to MC when γ = 1?
    learning = learning_study(args, device)  # actor-critic: episodes to solve vs L
    diagram = diagram4(args, device)  # one trajectory: flat next to GAE

    plot_bias_variance(study, [gae_name(lam) for lam in args.lambda_list], args.lambda_list, "λ",
                       out / "bias_variance_lambda.png")
    plot_bias_variance(study, [nstep_name(n) for n in args.nstep_list], args.nstep_list, "n",
                       out / "bias_variance_nstep.png", log_x=True)
    plot_dilemmas(dilemma, out / "dilemmas.png")
    plot_learning(learning, args.length_list, out / "episodes_to_solve.png")
    plot_diagram4(diagram, out / "diagram4.png")

    claims = check_claims(args, study, dilemma, gaps, learning)
    metrics = headline_metrics(study, dilemma, learning, args.length_list)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, bias_variance=study, dilemmas=dilemma,
                  gae_minus_mc_gaps=gaps, episodes_to_solve=learning, diagram4=diagram)
    print_report(args, study, dilemma, learning, claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    run_script(main, Args)
