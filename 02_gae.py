"""02 — The advantage zoo against exact truth: which estimate of A^π is closest to it?

Every policy-gradient method fills the slot Ψ_t in  ∇J = E[Σ_t Ψ_t ∇log π(a_t|s_t)]. Here the
fillings are measured against the truth, on the survey's robot (common.KeyToDoor): take the key at
step 0, walk a corridor of L cells where small distractor rewards fall at random, get 1 at the door
if the key was taken. The world is tabular, so dynamic programming gives the exact A^π(s, a), and
each estimator's error splits into bias² and variance, at the key step and in the corridor, with
the exact V and with noisy critics.

  MC         Ψ_t = G_t - V(s_t)                                   (λ = 1)
  TD(0)      Ψ_t = δ_t = r_t + γ V(s_{t+1}) - V(s_t)              (λ = 0)
  n-step     Ψ_t = Σ_{k<n} γ^k r_{t+k} + γ^n V(s_{t+n}) - V(s_t)
  GAE(γ, λ)  Ψ_t = Σ_l (γλ)^l δ_{t+l}, computed backwards: A_t = δ_t + γλ A_{t+1}
  flat       Ψ_t = R - V(s_0)   (the episode's return on every step: outcome-only RL)

Read beside: credit-assignment-problem-survey.txt §2.1, §3, §4.1.1; credit-assignment-is-the-whole-
game.txt §4, §5. Paper: Schulman et al. (2016), High-Dimensional Continuous Control Using
Generalized Advantage Estimation.

Figures (runs/02_gae/): bias_variance_lambda.png and bias_variance_nstep.png (bias² and variance
at the key step vs λ and vs n, exact and noisy V). Beside it: studies/02_dilemmas.py (discount and
dilution, the essays' arithmetic, Diagram 4); studies/02_learning.py (an actor-critic learns it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import torch

import common
from common import (
    KeyToDoor,
    RunArgs,
    arg,
    as_list,
    claim,
    evaluate_policy,
    play_episodes,
    require,
    seed_verdict,
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
    """Σ_{k<n} γ^k r_{t+k} + γ^n V(s_{t+n}) - V(s_t); no bootstrap past an episode's end. Near the
    end of the batch, the window stops at T - 1 and bootstraps from V(s_T)."""
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
    """The world of args's flags distractor_prob, distractor and noise (a study's Args has them too)."""
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
    there is noise on irrelevant log-probs: we report its mean square, E[Ψ²]. key_bias2_net is bias²
    less the sampled contrast's variance Σ_a Var(e | a) / n_a: 0 on average where unbiased."""
    error = estimate - truth
    by_action = [error[0][actions[0] == a] for a in (0, 1)]
    bias2 = float((by_action[1].mean() - by_action[0].mean()) ** 2)
    return {"key_bias2": bias2, "key_bias2_net": bias2 - float(sum(e.var() / len(e) for e in by_action)),
            "key_var": float((by_action[0].var() + by_action[1].var()) / 2),
            "corridor_mse": float((error[1:-1] ** 2).mean())}


def measure_estimators(args: Args, episode: dict, values: torch.Tensor, truth: torch.Tensor) -> dict:
    """bias_and_variance of every estimator (γ = 1) with the value table `values` as baseline."""
    estimates = all_estimates(episode, values, 1.0, args.lambda_list, args.nstep_list)
    return {name: bias_and_variance(psi, truth, episode["actions"]) for name, psi in estimates.items()}


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
    seeds: int = arg(32, "the claims' seeds, at the longest L: more noisy critics, each on its own episodes")
    episodes: int = arg(20_000, "sampled episodes per corridor length")

    SMOKE = dict(lengths="3,6", lambdas="0,0.9,1", nsteps="1,4", episodes=256, critics=2, seeds=2)

    def __post_init__(self):
        common.require_positive(self, "episodes", "critics", "seeds")
        require(0 <= self.distractor_prob <= 1, "--distractor-prob must be in [0, 1]")
        require(self.noise >= 0 and self.value_noise >= 0, "noise levels must be non-negative")
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
# The experiment: every Ψ against the exact A, and when GAE is Monte Carlo
# ============================================================================================
def exact_truth_study(args: Args, device) -> dict:
    """For each L: a uniform policy, its exact A, and every estimator's bias² and variance, with
    the exact V and with noisy critics V + ε, ε ~ N(0, value_noise²) per state, averaged over
    `critics` draws of ε: what an estimator fed a critic off by that much gets on average. At the
    longest L, "seeds": --seeds more critics, each on its own slice of the episodes (n-step: n = 1)."""
    results = {}
    for L in args.length_list:
        env = make_env(args, L, args.episodes, args.seed, device)
        policy = uniform_policy(env)
        V, A = exact_truth(env, policy, gamma=1.0)
        episode = play_episodes(env, policy)
        truth = A[episode["states"], episode["actions"]]
        generator = torch.Generator().manual_seed(args.seed)
        errors = [args.value_noise * torch.randn(len(V), generator=generator).to(device)
                  for _ in range(args.critics + args.seeds)]
        for error in errors:
            error[-1] = 0.0  # the terminal state's value is known: 0
        noisy = [measure_estimators(args, episode, V + error, truth) for error in errors[:args.critics]]
        parts = torch.arange(args.episodes).chunk(args.seeds) if L == max(args.length_list) else []
        seeds = [measure_estimators(replace(args, nsteps="1"), {k: v[:, part] for k, v in episode.items()},
                                    V + e, truth[:, part]) for e, part in zip(errors[args.critics:], parts)]
        mean = {name: {m: float(np.mean([draw[name][m] for draw in noisy])) for m in noisy[0][name]}
                for name in noisy[0]}  # over the critics' draws
        results[L] = {"exact V": measure_estimators(args, episode, V, truth), "noisy V": mean, "seeds": seeds}
    return results


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


def plot_bias_variance(study: dict, names: list[str], xs: list[float], xlabel: str, path, log_x=False):
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for row, critic in enumerate(("exact V", "noisy V")):
        for col, (metric, label) in enumerate((("key_bias2", "bias² (take vs leave)"), ("key_var", "variance"))):
            ax = axes[row, col]
            for L, by_critic in study.items():
                ax.plot(xs, [by_critic[critic][name][metric] for name in names], "o-", label=f"L={L}")
            ax.set(title=f"{critic}: {label} at the key step", xlabel=xlabel)
            if log_x:
                ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize="small")
    common.save_figure(fig, path)


def estimator_claims(args: Args, study: dict, gaps: dict) -> list[dict]:
    """TD vs MC at the longest L, noisy critics, over the seeds; is GAE MC at γ = 1 (exact)?"""
    claims, L, seeds = [], max(study), study[max(study)]["seeds"]
    if {0, 1} <= set(args.lambda_list):
        b0, b1, v0, v1 = ([seed[gae_name(lam)][metric] for seed in seeds]
                          for metric in ("key_bias2_net", "key_var") for lam in (0, 1))
        parts = [seed_verdict(np.subtract(b0, b1)), seed_verdict(np.subtract(v1, v0)),
                 seed_verdict(b1, zero_below=float(np.mean(b0)))]
        verdicts = [verdict for verdict, _ in parts]
        claims.append(claim(
            "survey §4.1.1", "λ = 0 is one-step TD (low variance, high bias); λ = 1 is Monte Carlo "
            "(high variance, no bias)",
            f"at the key, L={L}, noisy V, mean [95% interval] over {len(seeds)} seeds (each its own critic "
            f"and {args.episodes // args.seeds:,} episodes; bias² net of its sampling variance): bias² λ=0 "
            f"minus λ=1 {parts[0][1]}, variance λ=1 minus λ=0 {parts[1][1]}, λ=1's bias² {parts[2][1]}; with "
            f"the exact V, λ=0 has bias² {study[L]['exact V'][gae_name(0)]['key_bias2']:.2g}: the bias is the "
            "critic's, not λ's", common.all_parts(*verdicts)))
        claims.append(claim(  # the Monte Carlo half alone, so that TD's bias cannot decide it
            "whole-game §5", "the Monte Carlo return (λ = 1) is honest but noisy: no bias, more variance than one-step "
            "TD's", f"at the key, L={L}, noisy V, mean [95% interval] over {len(seeds)} seeds: λ=1's bias² "
            f"{parts[2][1]} (none: the interval holds 0 and stays below λ=0's bias², {np.mean(b0):.3g}), variance "
            f"λ=1 minus λ=0 {parts[1][1]}", common.all_parts(*verdicts[1:])))
    worst = max(gaps["exact V"][lam] for lam in gaps["exact V"] if lam < 1)
    claims.append(claim(
        "survey §4.1.1", "with γ = 1, GAE with any λ reduces to the Monte Carlo return",
        f"max |GAE_λ - (G - V)| on sampled episodes, exact V: λ=1 {gaps['exact V'][1.0]:.1e}, "
        f"λ<1 up to {worst:.2f}; with V = 0, λ=0.9: {gaps['V = 0'][0.9]:.2f}. It holds for λ = 1 only "
        "(any V); with λ < 1 GAE keeps bootstrapping, and with V = 0 it discounts by λ instead of γ",
        all(gap < 1e-4 for by_lam in gaps.values() for gap in by_lam.values())))
    return claims



def headline_metrics(study: dict) -> dict:
    """results.json's headline numbers: TD, MC and flat at the longest L, with both critics."""
    L_max = max(study)
    return {f"L{L_max}[{critic}][{name}]_{metric}": value
            for name in (gae_name(0), gae_name(1), "flat") for critic in ("exact V", "noisy V")
            for metric, value in study[L_max][critic].get(name, {}).items()}


def estimator_table(at_L: dict) -> dict:
    """Every estimator at one L: bias² and variance at the key step with each critic, and E[Ψ²] on
    the corridor's irrelevant steps with the exact V."""
    noisy = at_L["noisy V"]
    rows = [[name, exact["key_bias2"], exact["key_var"], noisy[name]["key_bias2"], noisy[name]["key_var"],
             exact["corridor_mse"]] for name, exact in at_L["exact V"].items()]
    header = ["estimator", "bias² exact V", "var exact V", "bias² noisy V", "var noisy V", "corridor E[Ψ²]"]
    return {"header": header, "rows": rows}


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    print(f"02 advantage estimators on key-to-door, L in {args.length_list}, device {device}")

    study = exact_truth_study(args, device)  # every Ψ against the exact A, exact and noisy V
    gaps = gae_vs_mc_at_gamma_one(args, device)  # does GAE reduce to MC when γ = 1?
    plot_bias_variance(study, [gae_name(lam) for lam in args.lambda_list], args.lambda_list, "λ",
                       out / "bias_variance_lambda.png")
    plot_bias_variance(study, [nstep_name(n) for n in args.nstep_list], args.nstep_list, "n",
                       out / "bias_variance_nstep.png", log_x=True)
    claims = estimator_claims(args, study, gaps)
    metrics = headline_metrics(study)
    metrics["tables"] = {f"L{L}": estimator_table(study[L]) for L in (min(study), max(study))}
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, bias_variance=study, gae_minus_mc_gaps=gaps)
    longest = metrics["tables"][f"L{max(study)}"]
    print(f"\nAt L={max(study)}, key step bias² and variance, and mean Ψ² on the irrelevant corridor steps:")
    print(common.format_table(longest["rows"], longest["header"]) + "\n\n" + common.format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
