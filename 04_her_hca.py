"""04 — Hindsight: relabel the goal (HER), or relabel the credit (HCA).

HER (Andrychowicz et al. 2017) asks "which goal would this episode have reached?" and replays a
failure as a success at reaching what it did reach: reward where there was almost none (density).
HCA (Harutyunyan et al. 2019) asks "given what followed, how likely was this action?": the
hindsight ratio h(a|x,z)/π(a|x) is the credit, ≈ 1 for actions that did not matter, so their
noise drops out of the gradient (breadth).

HER: DQN on (state, goal) on the paper's bit flipping, swept over n bits, with and without
relabelling ("future", k = 4, or "final"); a relabelled transition's reward is recomputed, and
  y = r + γ (1 - done) max_a' Q'(s', g, a'), clipped to [-1/(1-γ), 0].
HCA: three policy gradients on three tabular tasks with a known model (a shortcut chain, the
delayed effect of common.KeyToDoor, an ambiguous bandit), against the exact gradient:
  PG + V baseline   Ψ_t = Z_t - V(X_t)                                       (Z_t = Σ_{k≥t} R_k)
  state HCA         Σ_b ∇π(b|X_t) [r̂(X_t,b) + Σ_{k>t} h(b|X_t,X_k)/π(b|X_t) R_k]
  return HCA        Ψ_t = (1 - π(A_t|X_t)/h(A_t|X_t,Z_t)) Z_t
with h a classifier trained on the agent's own episodes (or Bayes' rule on the model). COCOA
(Meulemans et al. 2023) is not implemented; its premise, that state HCA degrades to REINFORCE
when the later state reveals the action, is measured on the delayed effect.

Read beside: credit-assignment-problem-survey.txt §4.2, §7 and §8. In runs/04_her_hca/:
  her_success_vs_bits.png     final success rate vs n, DQN and DQN+HER; learning curves
  hca_variance_vs_sigma.png   tr Cov of each gradient estimator vs the reward noise σ, per task
  hca_hindsight_ratio.png     delayed effect: |h/π - 1| per step (large at step 0 only)
  hca_learning_curves.png     exact J(π) while learning, per task and estimator
  results.json                every number, and the papers' claims beside our measurements
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections import defaultdict
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
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
# HER: replay each transition with a goal it did reach (Andrychowicz et al. 2017)
# ============================================================================================
def goal_reward(achieved: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
    """r(s, g) = 0 if the achieved bits equal the goal, else -1 (over the last dimension).
    HER needs the reward as a function of what was achieved, to recompute it for a new goal."""
    return -(achieved != goal).any(-1).float()


def uniform(n: int, generator: torch.Generator) -> torch.Tensor:
    """n draws from U[0, 1), on the generator's device."""
    return torch.rand(n, generator=generator, device=generator.device)


def hindsight_goal_steps(step: torch.Tensor, length: torch.Tensor, strategy: str, k: int,
                         generator: torch.Generator) -> torch.Tensor:
    """For a transition at step t of an episode of T = length steps, the step t' whose achieved
    state s_{t'+1} becomes its goal; -1 keeps the episode's own goal.

    "future": with probability k / (k + 1), t' uniform in [t, T - 1]. "final": with probability
    1/2, t' = T - 1 (the paper stores each transition once with its goal and once with the final
    one). "none": never, plain DQN.
    """
    keep = torch.full_like(step, -1)
    if strategy == "future":
        relabel = uniform(len(step), generator) < k / (k + 1)
        return torch.where(relabel, step + (uniform(len(step), generator) * (length - step)).long(), keep)
    if strategy == "final":
        return torch.where(uniform(len(step), generator) < 0.5, length - 1, keep)
    return keep


class EpisodeBuffer:
    """Whole episodes in preallocated tensors, on the run's device, replayed with hindsight goals.

    states[e, t] is the state before step t of episode e (t = 0 .. n, so states[e, t + 1] is what
    step t achieved), actions[e, t] the action at step t, goals[e] the episode's goal and
    lengths[e] its number of steps (fewer than n when it reached its goal). Oldest episodes are
    overwritten first.
    """

    def __init__(self, capacity: int, bits: int, device):
        self.capacity, self.size, self.next = capacity, 0, 0
        self.states = torch.zeros(capacity, bits + 1, bits, dtype=torch.uint8, device=device)
        self.actions = torch.zeros(capacity, bits, dtype=torch.long, device=device)
        self.goals = torch.zeros(capacity, bits, dtype=torch.uint8, device=device)
        self.lengths = torch.zeros(capacity, dtype=torch.long, device=device)

    def add(self, states, actions, goals, lengths) -> None:
        """Store a batch of episodes: states (N, n + 1, n), actions (N, n), goals (N, n), lengths (N,)."""
        index = (self.next + torch.arange(len(lengths), device=lengths.device)) % self.capacity
        self.states[index], self.actions[index] = states.to(torch.uint8), actions
        self.goals[index], self.lengths[index] = goals.to(torch.uint8), lengths
        self.next = int(index[-1] + 1) % self.capacity
        self.size = min(self.size + len(lengths), self.capacity)

    def sample(self, batch: int, strategy: str, k: int, generator: torch.Generator) -> dict:
        """A minibatch of transitions (s_t, a_t, s_{t+1}): an episode uniformly, a step t uniformly
        among its steps, the goal from `hindsight_goal_steps`, and the reward recomputed from what
        was achieved, r = goal_reward(s_{t+1}, goal): 0 exactly when s_{t+1} equals the goal."""
        episode = (uniform(batch, generator) * self.size).long()
        length = self.lengths[episode]
        step = (uniform(batch, generator) * length).long()
        goal_step = hindsight_goal_steps(step, length, strategy, k, generator)
        goal = torch.where((goal_step >= 0)[:, None], self.states[episode, goal_step.clamp(min=0) + 1],
                           self.goals[episode])
        next_state = self.states[episode, step + 1]
        reward = goal_reward(next_state, goal)
        return {"state": self.states[episode, step].float(), "action": self.actions[episode, step],
                "next_state": next_state.float(), "goal": goal.float(), "reward": reward,
                "done": (reward == 0).float(), "episode": episode, "step": step, "goal_step": goal_step}


class QNetwork(nn.Module):
    """Q(s, g, a), a universal value function approximator: an MLP from the concatenated state and
    goal bits to one Q-value per bit to flip."""

    def __init__(self, bits: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * bits, hidden), nn.ReLU(), nn.Linear(hidden, bits))

    def forward(self, state: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([state, goal], dim=-1))


def td_loss(q_net: QNetwork, target_net: QNetwork, batch: dict, gamma: float) -> torch.Tensor:
    """(Q(s, g, a) - y)², y = r + γ (1 - done) max_a' Q'(s', g, a'), clipped to [-1/(1-γ), 0].

    Rewards are -1 or 0, so every true value lies in that range; clipping the target there, as
    the HER paper does, keeps early bootstrapping from drifting out of it.
    """
    with torch.no_grad():
        next_q = target_net(batch["next_state"], batch["goal"]).max(1).values
        target = (batch["reward"] + gamma * (1 - batch["done"]) * next_q).clamp(-1 / (1 - gamma), 0.0)
    q = q_net(batch["state"], batch["goal"]).gather(1, batch["action"][:, None]).squeeze(1)
    return ((q - target) ** 2).mean()


@torch.no_grad()
def polyak_update(target_net: QNetwork, q_net: QNetwork, polyak: float) -> None:
    """θ' ← polyak θ' + (1 - polyak) θ: the target network trails the Q-network."""
    for p, p_target in zip(q_net.parameters(), target_net.parameters()):
        p_target.mul_(polyak).add_((1 - polyak) * p)


# ============================================================================================
# HCA: credit an action by how much more likely it becomes given what followed
# (Harutyunyan et al. 2019; episodes are time-major dicts, see sample_episodes)
# ============================================================================================
def returns_to_go(rewards: torch.Tensor) -> torch.Tensor:
    """Z_t = Σ_{k ≥ t} R_k, the undiscounted return from step t on, time-major (T, ...): the
    reward_to_go of 01_reinforce_pong.py with γ = 1 and no episode ends. Summed backward one step
    at a time in float32, as there: a reverse cumsum accumulates in double on the CPU and rounds
    differently."""
    returns = torch.zeros_like(rewards, dtype=torch.float32)
    running = torch.zeros_like(rewards[0], dtype=torch.float32)
    for t in reversed(range(len(rewards))):
        # Z_t = R_t + Z_{t+1}
        running = rewards[t] + running
        returns[t] = running
    return returns


def running_mean(table: torch.Tensor, index: torch.Tensor, targets: torch.Tensor,
                 rate: float | torch.Tensor) -> None:
    """The tabular learner that 03_rudder.py teaches, copied: each entry of `table` (flattened)
    that `index` visits moves by `rate` toward the mean of its targets in the batch; entries not
    visited stay. `rate` is a number or one per entry of the flattened table."""
    entries = table.view(-1)
    total = torch.zeros_like(entries).index_add_(0, index, targets.to(entries.dtype))
    visits = torch.bincount(index, minlength=len(entries))
    # x += rate (mean targets - x)
    entries += rate * torch.where(visits > 0, total / visits.clamp(min=1) - entries, torch.zeros_like(entries))


class Hindsight(nn.Module):
    """h(a | x, c): the probability that action a was taken in state x, given what followed, c:
    a later state (state-conditional HCA) or the return from x (return-conditional HCA).
    An MLP on the one-hot x and c, trained by cross-entropy to predict the action actually taken."""

    def __init__(self, num_states: int, num_actions: int, condition: str, return_scale: float, hidden: int):
        super().__init__()
        self.num_states, self.condition, self.return_scale = num_states, condition, return_scale
        context = num_states if condition == "state" else 1
        self.net = nn.Sequential(nn.Linear(num_states + context, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_actions))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """Action logits; x: states (...), c: later states (...) or returns (...)."""
        if self.condition == "state":
            c = nn.functional.one_hot(c, self.num_states).float()
        else:
            c = (c / self.return_scale)[..., None]
        return self.net(torch.cat([nn.functional.one_hot(x, self.num_states).float(), c], -1))


def at_later_steps(values: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """values[t, n] once for each k where pairs[t, k, n] holds (values (T, N), pairs (T, T, N))."""
    T = len(values)
    return values[:, None, :].expand(T, T, -1)[pairs]


def hindsight_examples(episodes: dict, condition: str) -> tuple[torch.Tensor, ...]:
    """(x, c, action) examples: every step with its return (return HCA), or every pair of a step
    and a later step of the same episode, with the later state (state HCA)."""
    s, a, alive = episodes["states"], episodes["actions"], episodes["alive"]
    if condition == "return":
        return s[alive], episodes["returns"][alive], a[alive]
    T = len(s)
    later = torch.triu(torch.ones(T, T, dtype=torch.bool, device=s.device), diagonal=1)  # [t, k]: k > t
    pairs = later[:, :, None] & alive[None, :, :]
    return at_later_steps(s, pairs), s[None].expand(T, T, -1)[pairs], at_later_steps(a, pairs)


class HindsightLearner:
    """A Hindsight classifier and its optimiser; `fit` takes Adam steps on sampled examples."""

    def __init__(self, args: Args, task: TabularTask, condition: str, device):
        scale = 1.0 + task.noise * math.sqrt(task.horizon)  # the size of a return: inputs of order 1
        self.model = Hindsight(task.num_states, task.num_actions, condition, scale, args.hca_hidden).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=args.hca_lr)
        self.condition, self.batch = condition, args.hca_batch
        self.generator = torch.Generator(device).manual_seed(args.seed)

    def fit(self, episodes: dict, steps: int) -> None:
        x, c, action = hindsight_examples(episodes, self.condition)
        for _ in range(steps):
            pick = torch.randint(0, len(x), (self.batch,), generator=self.generator, device=x.device)
            loss = nn.functional.cross_entropy(self.model(x[pick], c[pick]), action[pick])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

    @torch.no_grad()
    def probabilities(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.model(x, c), -1)


def learned_state_pairs(learner: HindsightLearner, episodes: dict) -> torch.Tensor:
    """h(· | X_t, X_k) for every pair of steps (t, k) of each episode: (T, T, N, A)."""
    s = episodes["states"]
    T = len(s)
    return learner.probabilities(s[:, None].expand(T, T, -1), s[None].expand(T, T, -1))


# The estimators: one gradient per episode with respect to the tabular logits θ[s, a].
def score_rows(episodes: dict, policy: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """Sampled-action form: Ψ_t ∇_θ[X_t] log π(A_t|X_t) = Ψ_t (onehot(A_t) - π(X_t)); (T, N, A)."""
    pi = policy[episodes["states"]]
    return psi[..., None] * (nn.functional.one_hot(episodes["actions"], pi.shape[-1]) - pi)


def all_action_rows(episodes: dict, policy: torch.Tensor, q_hat: torch.Tensor) -> torch.Tensor:
    """All-action form: Σ_b Q̂_t(b) ∇_θ[X_t] π(b|X_t) = π ⊙ (Q̂_t - Σ_b π_b Q̂_t(b)); (T, N, A)."""
    pi = policy[episodes["states"]]
    return pi * (q_hat - (pi * q_hat).sum(-1, keepdim=True))


def per_episode_gradients(episodes: dict, rows: torch.Tensor, num_states: int) -> torch.Tensor:
    """Sum each episode's rows into the logits of the states they belong to: (N, S, A)."""
    T, N, A = rows.shape
    rows = (rows * episodes["alive"][..., None]).transpose(0, 1)
    index = episodes["states"].T[..., None].expand(N, T, A)
    return torch.zeros(N, num_states, A, device=rows.device).scatter_add_(1, index, rows)


def pg_baseline_psi(episodes: dict, V: torch.Tensor) -> torch.Tensor:
    """Policy gradient with a value baseline: Ψ_t = Z_t - V(X_t)."""
    return episodes["returns"] - V[episodes["states"]]


def return_hca_psi(episodes: dict, policy: torch.Tensor, h: torch.Tensor, h_min: float) -> torch.Tensor:
    """Return-conditional HCA: Ψ_t = (1 - π(A_t|X_t) / h(A_t|X_t, Z_t)) Z_t.

    Its expectation given (X_t, A_t) is Q(X_t, A_t) - V(X_t): the HCA paper's advantage. When the
    return says nothing about the action, h = π and Ψ = 0, whatever the noise in Z_t.
    h is clipped at h_min: a learned h near 0 would make the ratio explode.
    """
    a = episodes["actions"][..., None]
    pi_taken = policy[episodes["states"]].gather(-1, a).squeeze(-1)
    h_taken = h.gather(-1, a).squeeze(-1).clamp(min=h_min)
    return (1 - pi_taken / h_taken) * episodes["returns"]


def state_hca_q(episodes: dict, policy: torch.Tensor, h_pairs: torch.Tensor, r_hat: torch.Tensor) -> torch.Tensor:
    """State-conditional HCA (Theorem 1 with γ = 1):
    Q̂_t(b) = r̂(X_t, b) + Σ_{k > t} h(b | X_t, X_k) / π(b | X_t) R_k.

    h_pairs[t, k, n, b] = h(b | X_t, X_k) of episode n. A reward R_k is credited to the action b
    at t in proportion to how much more likely b becomes once we know X_k was visited.
    """
    s, rewards = episodes["states"], episodes["rewards"]
    T = len(s)
    later = torch.triu(torch.ones(T, T, device=s.device), diagonal=1)[:, :, None, None]
    ratio = h_pairs / policy[s][:, None]  # [t, k, n, b]: the hindsight ratio h/π
    return r_hat[s] + (later * ratio * rewards[None, :, :, None]).sum(1)


def gradient_rows(method: str, episodes: dict, policy: torch.Tensor, V: torch.Tensor, r_hat: torch.Tensor,
                  h: torch.Tensor | None, h_min: float) -> torch.Tensor:
    """The per-step gradient rows of each estimator; h is h(a|X_t, Z_t) for return HCA and the
    pairs h(a|X_t, X_k) for state HCA."""
    if method.startswith("REINFORCE"):
        return score_rows(episodes, policy, episodes["returns"])
    if method.startswith("PG"):
        return score_rows(episodes, policy, pg_baseline_psi(episodes, V))
    if method.startswith("return HCA"):
        return score_rows(episodes, policy, return_hca_psi(episodes, policy, h, h_min))
    return all_action_rows(episodes, policy, state_hca_q(episodes, policy, h, r_hat))


# ============================================================================================
# HER's world: bit flipping (Andrychowicz et al. 2017, §3.1)
# ============================================================================================
class BitFlip:
    """A batch of bit-flipping episodes run in lockstep, in gymnasium's goal-env style.

    The state is n bits, the goal another n bits, both uniform at random. Action i flips bit i.
    The reward is -1 at every step except the one that makes the state equal the goal: 0, and
    the episode terminates. After n steps it is truncated. A finished episode's state stays as
    it was (later actions do nothing); `reset` starts a fresh batch.
    """

    def __init__(self, num_envs: int, bits: int, seed: int = 0, device: torch.device | str = "cpu"):
        self.num_envs, self.bits, self.device = num_envs, bits, torch.device(device)
        self.generator = torch.Generator(self.device).manual_seed(seed)

    def observation(self) -> dict:
        return {"observation": self.state.clone(), "achieved_goal": self.state.clone(),
                "desired_goal": self.goal.clone()}

    def reset(self) -> tuple[dict, dict]:
        shape = (self.num_envs, self.bits)
        self.state = torch.randint(0, 2, shape, generator=self.generator, device=self.device)
        self.goal = torch.randint(0, 2, shape, generator=self.generator, device=self.device)
        self.steps = 0
        self.done = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return self.observation(), {}

    def step(self, action: torch.Tensor):
        flip = nn.functional.one_hot(action, self.bits) * (~self.done)[:, None]
        self.state = self.state ^ flip
        reward = goal_reward(self.state, self.goal)
        terminated = (reward == 0) & ~self.done
        self.done |= terminated
        self.steps += 1
        truncated = torch.full_like(terminated, self.steps >= self.bits) & ~self.done
        self.done |= truncated
        return self.observation(), reward, terminated, truncated, {}


# ============================================================================================
# HCA's worlds: three small tasks with an exact model (Harutyunyan et al. 2019, §5)
# ============================================================================================
@dataclass
class TabularTask:
    """An episodic MDP whose model we know, so that the true policy gradient is computable.

    States 0 .. S-2, and S-1 the absorbing terminal state; every episode starts in state 0 and
    ends within `horizon` steps. P[s, a, s'] are the transitions. A reward is one of K outcome
    means values[s, a, k], drawn with probability probs[s, a, k], plus Gaussian noise of std
    `noise`: the σ of the study.
    """

    name: str
    P: torch.Tensor
    values: torch.Tensor
    probs: torch.Tensor
    noise: float
    horizon: int

    @property
    def num_states(self) -> int:
        return self.P.shape[0]

    @property
    def num_actions(self) -> int:
        return self.P.shape[1]

    @property
    def R(self) -> torch.Tensor:
        """Expected reward R[s, a]."""
        return (self.values * self.probs).sum(-1)

    def to(self, device) -> TabularTask:
        return dataclasses.replace(self, P=self.P.to(device), values=self.values.to(device),
                                   probs=self.probs.to(device))


def deterministic_rewards(R: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """values, probs for rewards with a single outcome R[s, a] (before noise)."""
    return R[..., None].float(), torch.ones(*R.shape, 1)


def shortcut_chain(length: int, noise: float) -> TabularTask:
    """A chain s_0 .. s_{L-1}. 'Right' (action 0) moves one state on; 'shortcut' (action 1) jumps
    straight to the last state s_{L-1}, from which either action ends the episode. Every step
    costs -1, so the shortcut at s_0 is best (return -2) and walking the chain costs -L."""
    terminal = length
    P = torch.zeros(length + 1, 2, length + 1)
    for s in range(length - 1):
        P[s, 0, s + 1] = P[s, 1, length - 1] = 1.0
    P[length - 1, :, terminal] = P[terminal, :, terminal] = 1.0
    R = torch.full((length + 1, 2), -1.0)
    R[terminal] = 0.0
    return TabularTask("shortcut", P, *deterministic_rewards(R), noise, horizon=length)


def delayed_effect(corridor: int, noise: float) -> TabularTask:
    """common.KeyToDoor as HCA's delayed-effect task: the first action alone decides the final
    reward (1 or 0), after `corridor` steps whose actions change nothing; every reward is noisy."""
    P, R = KeyToDoor(1, corridor=corridor).model()
    return TabularTask("delayed effect", P.float(), *deterministic_rewards(R), noise, horizon=corridor + 2)


def ambiguous_bandit(noise: float, crossover: float) -> TabularTask:
    """Two arms: arm 1 pays 1 and arm 0 pays 0, except that with probability `crossover` an arm
    pays the other arm's amount; plus noise. A reward alone does not tell which arm was pulled."""
    P = torch.zeros(2, 2, 2)
    P[:, :, 1] = 1.0  # one step, then the terminal state
    values = torch.tensor([[[0.0, 1.0], [1.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]])
    probs = torch.tensor([[[1 - crossover, crossover], [1 - crossover, crossover]], [[1.0, 0.0], [1.0, 0.0]]])
    return TabularTask("ambiguous bandit", P, values, probs, noise, horizon=1)


def make_tasks(args: Args, noise: float) -> list[TabularTask]:
    return [shortcut_chain(args.chain, noise), delayed_effect(args.corridor, noise),
            ambiguous_bandit(noise, args.crossover)]


def draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One index per row of probs (N, K), drawn with those probabilities."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@torch.no_grad()
def sample_episodes(task: TabularTask, policy: torch.Tensor, num: int, generator: torch.Generator) -> dict:
    """`num` episodes under the tabular policy π[s, a], time-major (horizon, num).

    alive[t] marks the steps that happened (after the end, the terminal state earns nothing).
    returns[t] is Z_t = Σ_{k ≥ t} r_k, the return from step t on (γ = 1).
    """
    device, terminal = policy.device, task.num_states - 1
    state = torch.zeros(num, dtype=torch.long, device=device)
    steps = {"states": [], "actions": [], "rewards": [], "alive": []}
    for _ in range(task.horizon):
        action = draw(policy[state], generator)
        outcome = draw(task.probs[state, action], generator)
        noise = task.noise * torch.randn(num, generator=generator, device=device)
        alive = state != terminal
        reward = (task.values[state, action, outcome] + noise) * alive
        for key, value in zip(steps, (state, action, reward, alive)):
            steps[key].append(value)
        state = draw(task.P[state, action], generator)
    episodes = {key: torch.stack(value) for key, value in steps.items()}
    episodes["returns"] = returns_to_go(episodes["rewards"])
    return episodes


# The exact truth, from the model: the policy gradient and the hindsight distributions.
def exact_gradient(task: TabularTask, logits: torch.Tensor) -> torch.Tensor:
    """∇_θ J for the softmax policy π = softmax(θ[s]), J = V^π(s_0), by autograd through the
    exact policy evaluation (common.evaluate_policy, γ = 1)."""
    logits = logits.detach().double().cpu().requires_grad_()
    V, _ = evaluate_policy(task.P.double().cpu(), task.R.double().cpu(), torch.softmax(logits, 1), 1.0)
    V[0].backward()
    return logits.grad.float()


def exact_return(task: TabularTask, logits: torch.Tensor) -> float:
    V, _ = evaluate_policy(task.P.double().cpu(), task.R.double().cpu(),
                           torch.softmax(logits.detach().double().cpu(), 1), 1.0)
    return float(V[0])


def exact_state_hindsight(task: TabularTask, policy: torch.Tensor) -> torch.Tensor:
    """h[x, y, a] = P(A_t = a | X_t = x, y visited later) = π(a|x) d(y|x,a) / d(y|x), where
    d(y|x,a) is the expected number of later visits to y after taking a in x: the
    occupancy-weighted hindsight distribution that makes Theorem 1 of HCA hold with γ = 1."""
    P, policy = task.P.double().cpu(), policy.double().cpu()
    P_pi = torch.einsum("sa,sat->st", policy, P)
    P_pi[-1] = 0.0  # nothing is visited after the terminal state
    visits = torch.linalg.inv(torch.eye(len(P), dtype=P.dtype) - P_pi)  # visits[s, y], from s on
    after_action = torch.einsum("xas,sy->xya", P, visits)  # d(y | x, a)
    joint = policy[:, None, :] * after_action
    total = joint.sum(-1, keepdim=True)
    h = torch.where(total > 0, joint / total.clamp(min=1e-300), policy[:, None, :])  # y never follows x: π
    return h.float()


def exact_state_pairs(h_table: torch.Tensor, episodes: dict) -> torch.Tensor:
    """h(· | X_t, X_k) for every pair of steps (t, k) of each episode, from the exact table."""
    s = episodes["states"]
    return h_table.to(s.device)[s[:, None], s[None]]


def return_components(task: TabularTask, policy: torch.Tensor, state: int, action: int) -> dict:
    """The return from taking `action` in `state`, then following π: a mixture of Gaussians, one
    per (sum of outcome means, number of noisy steps), enumerated step by step.
    Returns {(mean, steps): probability}."""
    terminal, done = task.num_states - 1, defaultdict(float)
    frontier, first = {(state, 0.0, 0): 1.0}, True
    P, values, probs, policy = (t.double().cpu() for t in (task.P, task.values, task.probs, policy))
    while frontier:
        following = defaultdict(float)
        for (s, mean, steps), weight in frontier.items():
            if s == terminal:
                done[(mean, steps)] += weight
                continue
            actions = [(action, 1.0)] if first else [(b, float(policy[s, b])) for b in range(P.shape[1])]
            for b, p_b in actions:
                for k in torch.nonzero(probs[s, b] * p_b > 0).flatten().tolist():
                    for s2 in torch.nonzero(P[s, b]).flatten().tolist():
                        key = (s2, round(mean + float(values[s, b, k]), 9), steps + 1)
                        following[key] += weight * p_b * float(probs[s, b, k] * P[s, b, s2])
        frontier, first = following, False
    return dict(done)


def return_log_density(components: dict, z: torch.Tensor, noise: float) -> torch.Tensor:
    """log p(z) of the Gaussian mixture {(mean, steps): weight}; the noise of `steps` steps adds up
    to a variance of steps σ²."""
    terms = []
    for (mean, steps), weight in components.items():
        var = noise**2 * steps
        terms.append(math.log(weight) - 0.5 * math.log(2 * math.pi * var) - (z - mean) ** 2 / (2 * var))
    return torch.logsumexp(torch.stack(terms), 0)


def exact_return_hindsight(task: TabularTask, policy: torch.Tensor, states: torch.Tensor,
                           returns: torch.Tensor) -> torch.Tensor:
    """h(a | x, z) = π(a|x) p(z|x,a) / Σ_b π(b|x) p(z|x,b), Bayes' rule on the exact return
    distributions, for each (state, return) pair; shape states.shape + (A,). Needs noise > 0."""
    h = policy[states].clone()  # the terminal state: no information, h = π
    for x in states.unique().tolist():
        if x == task.num_states - 1:
            continue
        at = states == x
        z = returns[at].double().cpu()
        log_p = torch.stack([return_log_density(return_components(task, policy, x, a), z, task.noise)
                             for a in range(task.num_actions)], -1)
        h[at] = torch.softmax(torch.log(policy[x].double().cpu()) + log_p, -1).to(h)
    return h


def hindsight_identity_gap(task: TabularTask, policy: torch.Tensor, state: int = 0) -> float:
    """max_a |E_z[h(a|x,z)/π(a|x) z] - Q(x, a)|: the return-conditional identity of HCA (survey §8),
    the expectation by numerical integration over z, Q by dynamic programming."""
    policy = policy.double().cpu()
    _, Q = evaluate_policy(task.P.double().cpu(), task.R.double().cpu(), policy, 1.0)
    parts = [return_components(task, policy, state, a) for a in range(task.num_actions)]
    means = [m for c in parts for m, _ in c]
    spread = 10 * task.noise * math.sqrt(task.horizon)
    z = torch.linspace(min(means) - spread, max(means) + spread, 4001, dtype=torch.float64)
    log_p = torch.stack([return_log_density(c, z, task.noise) for c in parts], -1)  # log p(z | x, a)
    p_z = (policy[state] * log_p.exp()).sum(-1)  # p(z | x)
    h = exact_return_hindsight(task, policy, torch.full_like(z, state, dtype=torch.long), z).double()
    q = torch.trapezoid(p_z[:, None] * h / policy[state] * z[:, None], z, dim=0)
    return float((q - Q[state]).abs().max())


# ============================================================================================
# The training loops: DQN(+HER) on bit flipping; gradient ascent on a tabular policy
# ============================================================================================
@torch.no_grad()
def play_bitflip(env: BitFlip, q_net: QNetwork, epsilon: float) -> dict:
    """One batch of episodes with the ε-greedy policy; returns them in EpisodeBuffer's layout."""
    obs, _ = env.reset()
    states, actions = [obs["observation"]], []
    lengths = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
    success = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    for _ in range(env.bits):
        alive = ~env.done
        greedy = q_net(obs["observation"].float(), obs["desired_goal"].float()).argmax(1)
        random = torch.randint(0, env.bits, greedy.shape, generator=env.generator, device=env.device)
        explore = torch.rand(greedy.shape, generator=env.generator, device=env.device) < epsilon
        action = torch.where(explore, random, greedy)
        obs, _, terminated, _, _ = env.step(action)
        states.append(obs["observation"])
        actions.append(action)
        lengths += alive
        success |= terminated
    return {"states": torch.stack(states, 1), "actions": torch.stack(actions, 1), "goals": env.goal,
            "lengths": lengths, "success": success}


def greedy_success(env: BitFlip, q_net: QNetwork) -> float:
    return float(play_bitflip(env, q_net, 0.0)["success"].float().mean())


def train_bitflip(args: Args, bits: int, strategy: str, seed: int, device) -> dict:
    """DQN (strategy "none") or DQN+HER on n = bits. The budget, args.cycles * n cycles, grows with
    n. Returns the greedy success-rate curve (every tenth of training), the final success rate and
    the share of replayed transitions that carry reward 0 (the density HER manufactures)."""
    seed_everything(seed)
    env = BitFlip(args.envs, bits, seed=seed, device=device)
    eval_env = BitFlip(args.eval_episodes, bits, seed=seed + 10_000, device=device)
    q_net = QNetwork(bits, args.hidden).to(device)
    target_net = copy.deepcopy(q_net)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=args.lr)
    buffer = EpisodeBuffer(args.buffer_episodes, bits, device)
    generator = torch.Generator(device).manual_seed(seed)
    cycles = args.cycles * bits
    curve = []
    for cycle in range(1, cycles + 1):
        episodes = play_bitflip(env, q_net, args.epsilon)
        buffer.add(episodes["states"], episodes["actions"], episodes["goals"], episodes["lengths"])
        for _ in range(args.updates):
            loss = td_loss(q_net, target_net, buffer.sample(args.batch, strategy, args.relabel_k, generator),
                           args.gamma)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        polyak_update(target_net, q_net, args.polyak)
        if cycle % max(1, cycles // 10) == 0:
            curve.append(greedy_success(eval_env, q_net))
    replayed = buffer.sample(4096, strategy, args.relabel_k, generator)
    return {"curve": curve, "final_success": greedy_success(eval_env, q_net),
            "episodes": cycles * args.envs, "reward_share": float((replayed["reward"] == 0).float().mean())}


def learn(args: Args, task: TabularTask, method: str, seed: int, device) -> list[float]:
    """Exact J(π) after each update of a tabular softmax policy trained with `method`'s gradient.
    V (for the baseline) and r̂ (for state HCA) are running means; the hindsight classifier is
    refitted for a few steps after each batch, on the last few batches."""
    seed_everything(seed)
    task = task.to(device)
    generator = torch.Generator(device).manual_seed(seed)
    num_states, num_actions = task.num_states, task.num_actions
    logits = torch.zeros(num_states, num_actions, device=device)
    V, r_hat = torch.zeros(num_states, device=device), torch.zeros(num_states, num_actions, device=device)
    condition = "state" if method.startswith("state") else "return"
    learner = HindsightLearner(args, task, condition, device) if "HCA" in method else None
    recent, curve = [], [exact_return(task, logits)]
    for _ in range(args.learn_iters):
        policy = torch.softmax(logits, 1)
        episodes = sample_episodes(task, policy, args.learn_batch, generator)
        h = None
        if learner is not None:
            recent = (recent + [episodes])[-args.hindsight_batches:]
            learner.fit({k: torch.cat([e[k] for e in recent], 1) for k in episodes}, args.refit_steps)
            h = (learner.probabilities(episodes["states"], episodes["returns"]) if condition == "return"
                 else learned_state_pairs(learner, episodes))
        rows = gradient_rows(method, episodes, policy, V, r_hat, h, args.h_min)
        logits += args.pg_lr * per_episode_gradients(episodes, rows, num_states).mean(0)
        s, alive = episodes["states"][episodes["alive"]], episodes["alive"]
        running_mean(V, s, episodes["returns"][alive], args.value_rate)
        running_mean(r_hat, s * num_actions + episodes["actions"][alive], episodes["rewards"][alive], args.value_rate)
        curve.append(exact_return(task, logits))
    return curve


# ============================================================================================
# Config
# ============================================================================================
@dataclass
class Args(RunArgs):
    out: str = arg("runs/04_her_hca", "output folder for figures and results.json")
    # HER on bit flipping
    bits: str = arg("5,10,15,20,30", "bit-string lengths n of the HER sweep, comma-separated", item=int)
    her_seeds: int = arg(2, "seeds per (n, method) in the HER sweep")
    strategy: str = arg("future", "HER goal-sampling strategy", choices=("future", "final"))
    relabel_k: int = arg(4, "HER 'future': relabelled goals per original one (a goal is replaced "
                         "with probability k / (k + 1))")
    envs: int = arg(32, "bit-flip episodes collected in parallel per cycle")
    cycles: int = arg(10, "collect-then-train cycles per bit: n bits get n * cycles cycles")
    updates: int = arg(20, "DQN optimisation steps per cycle")
    batch: int = arg(256, "DQN minibatch of transitions")
    hidden: int = arg(256, "hidden units of the Q-network")
    lr: float = arg(3e-3, "Adam learning rate of the Q-network")
    gamma: float = arg(0.98, "discount of the DQN (HER paper: 0.98)")
    polyak: float = arg(0.8, "target network: θ' ← polyak θ' + (1 - polyak) θ after each cycle")
    epsilon: float = arg(0.2, "exploration: probability of a random action")
    buffer_episodes: int = arg(20_000, "replay buffer capacity, in episodes")
    eval_episodes: int = arg(512, "greedy episodes for each success rate")
    # HCA on tabular tasks
    sigmas: str = arg("0.25,0.5,1,2,4", "reward noise levels σ of the gradient study, comma-separated", item=float)
    chain: int = arg(8, "shortcut chain length")
    corridor: int = arg(10, "delayed effect: steps between the decisive action and its reward")
    crossover: float = arg(0.2, "ambiguous bandit: probability that an arm pays the other arm's amount")
    study_episodes: int = arg(4000, "episodes per (task, σ) to measure each estimator's bias and variance")
    hindsight_episodes: int = arg(2000, "episodes per (task, σ) the hindsight classifiers are trained on")
    hindsight_steps: int = arg(600, "Adam steps of each hindsight classifier in the gradient study")
    hca_hidden: int = arg(64, "hidden units of the hindsight classifier (two layers)")
    hca_lr: float = arg(3e-3, "Adam learning rate of the hindsight classifier")
    hca_batch: int = arg(256, "minibatch of the hindsight classifier")
    h_min: float = arg(0.02, "return HCA: h is clipped below at this, so π/h stays finite")
    learn_sigma: float = arg(1.0, "reward noise σ of the learning curves")
    learn_iters: int = arg(100, "policy updates per learning run")
    learn_batch: int = arg(32, "episodes per policy update")
    learn_seeds: int = arg(3, "seeds per (task, estimator) of the learning curves")
    pg_lr: float = arg(0.5, "step size of the tabular policy (gradient ascent on the logits)")
    value_rate: float = arg(0.2, "step size of the running-mean V (baseline) and r̂ (state HCA)")
    refit_steps: int = arg(10, "learning runs: hindsight classifier steps after each batch")
    hindsight_batches: int = arg(4, "learning runs: the classifier trains on the last this many batches")

    SMOKE = dict(bits="4,6", her_seeds=1, cycles=1, updates=2, batch=16, hidden=16, eval_episodes=16,
                 buffer_episodes=64, sigmas="0.5,2", chain=4, corridor=3, study_episodes=64,
                 hindsight_episodes=32, hindsight_steps=5, hca_hidden=8, learn_iters=3, learn_batch=4,
                 learn_seeds=1, refit_steps=2)

    def __post_init__(self):
        require_positive(self, "her_seeds", "relabel_k", "envs", "cycles", "updates", "batch", "hidden", "lr",
                         "buffer_episodes", "eval_episodes", "chain", "corridor", "study_episodes",
                         "hindsight_episodes", "hindsight_steps", "hca_hidden", "hca_lr", "hca_batch",
                         "learn_iters", "learn_batch", "learn_seeds", "pg_lr", "refit_steps",
                         "hindsight_batches")
        require(0 < self.gamma < 1, "--gamma must be in (0, 1)")
        require(0 <= self.polyak < 1, "--polyak must be in [0, 1)")
        require(0 <= self.epsilon <= 1, "--epsilon must be in [0, 1]")
        require(0 < self.crossover < 0.5, "--crossover must be in (0, 0.5)")
        require(0 < self.h_min < 1, "--h-min must be in (0, 1)")
        require(0 < self.value_rate <= 1, "--value-rate must be in (0, 1]")
        require(self.chain >= 2, "--chain must be at least 2")
        require(self.learn_sigma > 0, "--learn-sigma must be positive")
        require(all(n >= 1 for n in self.bit_list), "--bits must be positive integers")
        require(all(s > 0 for s in self.sigma_list), "--sigmas must be positive (exact h needs noise)")

    @property
    def bit_list(self) -> list[int]:
        return as_list(self.bits, int)

    @property
    def sigma_list(self) -> list[float]:
        return as_list(self.sigmas, float)


# ============================================================================================
# Study 1: the HER sweep over n
# ============================================================================================
HER_METHODS = ("DQN", "DQN+HER")


def her_sweep(args: Args, device) -> dict:
    """{method: {n: [one train_bitflip result per seed]}}."""
    results = {name: {} for name in HER_METHODS}
    runs = [(name, n, seed) for n in args.bit_list for name in HER_METHODS
            for seed in range(args.seed, args.seed + args.her_seeds)]
    for name, n, seed in tqdm(runs, desc="bit flipping", leave=False):
        strategy = args.strategy if name == "DQN+HER" else "none"
        run = train_bitflip(args, n, strategy, seed, device)
        results[name].setdefault(n, []).append(run)
        tqdm.write(f"  {name:8s} n={n:3d} seed {seed}: success {run['final_success']:.2f} after "
                   f"{run['episodes']} episodes, reward-0 share of replayed transitions {run['reward_share']:.3f}")
    return results


# ============================================================================================
# Study 2: bias and variance of each gradient estimator against the exact gradient
# ============================================================================================
def study_methods(task: TabularTask) -> list[str]:
    """State HCA needs later states: the one-step bandit has none (it would reduce to r̂)."""
    methods = ["REINFORCE (no baseline)", "PG + V baseline", "return HCA (learned h)", "return HCA (exact h)"]
    return methods + (["state HCA (learned h)", "state HCA (exact h)"] if task.horizon > 1 else [])


def fitted(args: Args, task: TabularTask, condition: str, episodes: dict, device) -> HindsightLearner:
    learner = HindsightLearner(args, task, condition, device)
    learner.fit(episodes, args.hindsight_steps)
    return learner


def hindsight_estimates(args: Args, task: TabularTask, policy: torch.Tensor, train: dict, test: dict,
                        device) -> dict:
    """Each HCA estimator's h on the test episodes: learned on the train episodes, or exact."""
    h = {"return HCA (learned h)": fitted(args, task, "return", train, device).probabilities(
             test["states"], test["returns"]),
         "return HCA (exact h)": exact_return_hindsight(task, policy, test["states"], test["returns"])}
    if task.horizon > 1:
        h["state HCA (learned h)"] = learned_state_pairs(fitted(args, task, "state", train, device), test)
        h["state HCA (exact h)"] = exact_state_pairs(exact_state_hindsight(task, policy), test)
    return h


def estimator_errors(grads: torch.Tensor, truth: torch.Tensor) -> dict:
    """Bias² and variance (tr Cov) of per-episode gradients (N, S, A) against the exact gradient."""
    mean = grads.mean(0)
    variance = float(((grads - mean) ** 2).sum((1, 2)).mean())
    return {"bias2": float(((mean - truth) ** 2).sum()), "variance": variance,
            "bias2_noise_floor": variance / len(grads),  # E|mean - truth|² if unbiased
            "start_state_variance": float(((grads[:, 0] - mean[0]) ** 2).sum(-1).mean())}


def ratio_profile(episodes: dict, policy: torch.Tensor, h: dict) -> dict:
    """Per step t, the mean over episodes of |h(A_t | X_t, ·)/π(A_t | X_t) - 1|: how far what
    followed moves the credit of the action taken. State HCA: conditioned on the last state."""
    a, alive = episodes["actions"][..., None], episodes["alive"]
    pi = policy[episodes["states"]].gather(-1, a).squeeze(-1)
    last = alive.sum(0) - 1  # each episode's last step
    steps = torch.arange(len(alive), device=alive.device)[:, None]
    profile = {}
    for method, probs in h.items():
        valid = alive
        if method.startswith("state"):
            probs = probs[:, last, torch.arange(probs.shape[2], device=probs.device)]  # h(· | X_t, X_last)
            valid = alive & (steps < last)  # the last step has no later state
        deviation = ((probs.gather(-1, a).squeeze(-1) / pi - 1).abs() * valid).sum(1) / valid.sum(1).clamp(min=1)
        profile[method] = deviation.tolist()
    return profile


def study_one(args: Args, task: TabularTask, device) -> dict:
    """At the uniform policy: the exact gradient, hindsight classifiers fitted on one batch of
    episodes, and every estimator's per-episode gradients on a fresh batch."""
    task = task.to(device)
    generator = torch.Generator(device).manual_seed(args.seed)
    logits = torch.zeros(task.num_states, task.num_actions, device=device)
    policy = torch.softmax(logits, 1)
    truth = exact_gradient(task, logits).to(device)
    V, _ = evaluate_policy(task.P.double().cpu(), task.R.double().cpu(), policy.double().cpu(), 1.0)
    V, r_hat = V.float().to(device), task.R.to(device)  # the baseline and r̂ are exact: only h is learned
    train = sample_episodes(task, policy, args.hindsight_episodes, generator)
    test = sample_episodes(task, policy, args.study_episodes, generator)
    h = hindsight_estimates(args, task, policy, train, test, device)
    estimators = {}
    for method in study_methods(task):
        rows = gradient_rows(method, test, policy, V, r_hat, h.get(method), args.h_min)
        estimators[method] = estimator_errors(per_episode_gradients(test, rows, task.num_states), truth)
    return {"estimators": estimators, "hindsight_ratio": ratio_profile(test, policy, h),
            "exact_gradient_norm2": float((truth**2).sum())}  # the scale of bias²; σ does not change it


def gradient_study(args: Args, device) -> dict:
    """{task: {σ: study_one's result}}."""
    study = {}
    for noise in tqdm(args.sigma_list, desc="HCA gradient study", leave=False):
        for task in make_tasks(args, noise):
            study.setdefault(task.name, {})[noise] = study_one(args, task, device)
    return study


# ============================================================================================
# Study 3: learning curves, a tabular softmax policy trained by each estimator's gradient
# ============================================================================================
LEARNERS = ("PG + V baseline", "state HCA (learned h)", "return HCA (learned h)")


def learning_study(args: Args, device) -> dict:
    """{task: {estimator: [one exact-J curve per seed]}}."""
    results = {}
    tasks = make_tasks(args, args.learn_sigma)
    runs = [(task, m) for task in tasks for m in LEARNERS if task.horizon > 1 or not m.startswith("state")]
    for task, method in tqdm(runs, desc="HCA learning", leave=False):
        results.setdefault(task.name, {})[method] = [learn(args, task, method, args.seed + i, device)
                                                     for i in range(args.learn_seeds)]
    return results


# ============================================================================================
# Study 4: the return-conditional identity Q = E_z[h/π z], checked by integration
# ============================================================================================
def identity_study(args: Args) -> dict:
    """{task: max_a |E_z[h(a|x,z)/π(a|x) z] - Q(x, a)|} at the start state, uniform π, σ = 1."""
    uniform_policy = torch.full((1, 2), 0.5)
    return {task.name: hindsight_identity_gap(task, uniform_policy.expand(task.num_states, 2))
            for task in make_tasks(args, 1.0)}


# ============================================================================================
# Figures
# ============================================================================================
def plot_her(her: dict, bits: list[int], path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    plot_curves(axes[0], np.array(bits), {name: np.array([[r["final_success"] for r in by_n[n]] for n in bits]).T
                                          for name, by_n in her.items()})
    axes[0].set(xlabel="number of bits n", ylabel="final greedy success rate",
                title="Bit flipping: success vs n", ylim=(-0.05, 1.05))
    for name, style in zip(her, ("--", "-")):
        for n in bits:
            curves = np.array([r["curve"] for r in her[name][n]])
            axes[1].plot(np.linspace(0.1, 1, curves.shape[1]), curves.mean(0), style, label=f"{name} n={n}")
    axes[1].set(xlabel="fraction of the training budget", ylabel="greedy success rate (mean over seeds)",
                title="Learning curves (budget grows with n)")
    axes[1].legend(fontsize="small", ncol=2)
    axes[1].grid(alpha=0.3)
    save_figure(fig, path)


def plot_variance(study: dict, path) -> None:
    fig, axes = plt.subplots(1, len(study), figsize=(5 * len(study), 4))
    axes = np.atleast_1d(axes)
    for ax, (name, by_sigma) in zip(axes, study.items()):
        sigmas = list(by_sigma)
        for method in by_sigma[sigmas[0]]["estimators"]:
            ax.plot(sigmas, [by_sigma[s]["estimators"][method]["variance"] for s in sigmas],
                    "s--" if "exact" in method else "o-", label=method)
        ax.set(title=f"{name}: tr Cov of the gradient", xlabel="reward noise σ", xscale="log", yscale="log")
        ax.set_xticks(sigmas, [f"{s:g}" for s in sigmas])
        ax.set_xticks([], minor=True)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="x-small")
    save_figure(fig, path)


def plot_ratio(profile: dict, noise: float, path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for method, deviation in profile.items():
        ax.plot(np.arange(len(deviation)), deviation, "o-", label=method)
    ax.set(title=f"Delayed effect, σ = {noise:g}: how far hindsight moves the credit",
           xlabel="step t (0: the decisive first action)", ylabel="mean |h(A_t|X_t, ·) / π(A_t|X_t) - 1|")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_learning(learning: dict, args: Args, path) -> None:
    fig, axes = plt.subplots(1, len(learning), figsize=(5 * len(learning), 4))
    episodes = np.arange(args.learn_iters + 1) * args.learn_batch
    for ax, (name, by_method) in zip(np.atleast_1d(axes), learning.items()):
        plot_curves(ax, episodes, {m: np.array(c) for m, c in by_method.items()})
        ax.set(title=f"{name}, σ = {args.learn_sigma:g}", xlabel="episodes", ylabel="exact J(π)")
    save_figure(fig, path)


# ============================================================================================
# Claims
# ============================================================================================
def her_claims(args: Args, her: dict) -> list[dict]:
    success = {name: {n: float(np.mean([r["final_success"] for r in by_n[n]])) for n in by_n}
               for name, by_n in her.items()}
    listing = "; ".join(f"{name}: " + ", ".join(f"n={n} {s:.2f}" for n, s in by_n.items())
                        for name, by_n in success.items())
    bits = args.bit_list

    def dqn_fails_from(smallest: int) -> bool | None:
        tried = [n for n in bits if n >= smallest]
        return all(success["DQN"][n] < 0.1 for n in tried) if tried else None

    failed = [n for n in bits if n <= 50 and success["DQN+HER"][n] < 0.9]
    share = {name: np.mean([r["reward_share"] for r in her[name][max(bits)]]) for name in her}
    first_failure = min((n for n in bits if dqn_fails_from(n)), default=None)  # fails there and beyond
    claims = [
        claim("HER paper, Fig. 1", "DQN alone fails beyond about 13-15 bits",
              f"mean final success over {args.her_seeds} seeds: {listing}; DQN is below 10% from n = "
              f"{first_failure} on" if first_failure is not None else f"mean final success: {listing}",
              dqn_fails_from(15)),
        claim("HER paper, Fig. 1", "DQN+HER solves up to 50 bits",
              "DQN+HER: " + ", ".join(f"n={n} {success['DQN+HER'][n]:.2f}" for n in bits)
              + ("" if max(bits) >= 50 else "; n = 50 not run by default (add it to --bits)"),
              False if failed else (True if max(bits) >= 50 else None)),
        claim("survey §4.2.2 and §7", "HER turns failed episodes into useful signal (reward density)",
              f"n={max(bits)}: share of replayed transitions with reward 0, which is success in the −1/0 "
              f"convention: DQN {share['DQN']:.4f}, DQN+HER {share['DQN+HER']:.3f}", bool(share["DQN+HER"] > 10 * share["DQN"])),
        claim("survey §7", "among the relabelling strategies, \"future\" tends to work best",
              f"not checked by the default run: it relabels with one strategy (--strategy {args.strategy}); "
              "compare a run with --strategy final", None)]
    if 30 in bits:
        claims.append(claim("HER paper, Fig. 1", "DQN+HER reaches ≥ 90% success at n = 30",
                            f"DQN+HER at n=30: {success['DQN+HER'][30]:.2f}", success["DQN+HER"][30] >= 0.9))
    if any(n >= 20 for n in bits):
        claims.append(claim("HER paper, Fig. 1", "DQN alone is below 10% success from n = 20 on",
                            "DQN at n ≥ 20: " + ", ".join(f"n={n} {success['DQN'][n]:.2f}" for n in bits if n >= 20),
                            dqn_fails_from(20)))
    return claims


def variance_ratio(at_sigma: dict, method: str) -> float:
    """How many times larger the variance of PG + V baseline is than `method`'s, at one σ."""
    variance = {m: e["variance"] for m, e in at_sigma["estimators"].items()}
    return variance["PG + V baseline"] / variance[method]


def variance_claims(name: str, by_sigma: dict) -> list[dict]:
    """Does HCA (learned h) have a lower gradient variance than PG + V baseline at every σ, and does
    its edge (the variance ratio PG / HCA) grow from the smallest σ to the largest, per HCA variant?"""
    sigmas = sorted(by_sigma)
    low, high = sigmas[0], sigmas[-1]
    methods = [m for m in ("state HCA (learned h)", "return HCA (learned h)") if m in by_sigma[high]["estimators"]]
    ratio = {s: {m: variance_ratio(by_sigma[s], m) for m in methods} for s in sigmas}
    every = "; ".join(f"{m.split(' (')[0]}: " + ", ".join(f"{ratio[s][m]:.3g}x" for s in sigmas) for m in methods)
    ends = "; ".join(f"{m.split(' (')[0]}: {ratio[low][m]:.3g}x at σ={low:g}, {ratio[high][m]:.3g}x at "
                     f"σ={high:g}" for m in methods)
    return [claim("HCA paper §5", f"{name}: HCA's gradient has a lower variance than PG with a value baseline",
                  f"variance of PG + V baseline / HCA (learned h) at σ = {', '.join(f'{s:g}' for s in sigmas)}: {every}",
                  all(ratio[s][m] > 1 for s in sigmas for m in methods)),
            claim("HCA paper §5", f"{name}: HCA's edge in variance over PG with a value baseline grows with the "
                  "reward noise σ", f"variance of PG + V baseline / HCA (learned h): {ends}",
                  all(ratio[high][m] > ratio[low][m] for m in methods))]


def conditioning_claim(name: str, by_sigma: dict) -> dict:
    """Return HCA against state HCA (both with the learned h): which has the lower gradient
    variance, at how many σ?"""
    sigmas = sorted(by_sigma)
    variance = {s: {m: by_sigma[s]["estimators"][m]["variance"] for m in ("state HCA (learned h)", "return HCA (learned h)")}
                for s in sigmas}
    lower = sum(v["return HCA (learned h)"] < v["state HCA (learned h)"] for v in variance.values())
    return claim("survey §8", f"{name}: return-conditional HCA is preferable to state-conditional HCA",
                 "gradient variance (tr Cov), return HCA vs state HCA (learned h): " + ", ".join(
                     f"σ={s:g} {v['return HCA (learned h)']:.3g} vs {v['state HCA (learned h)']:.3g}" for s, v in variance.items())
                 + f"; return HCA lower at {lower} of {len(sigmas)}", lower > len(sigmas) / 2)


def hca_claims(args: Args, study: dict, identity: dict) -> list[dict]:
    low = min(args.sigma_list)
    delayed = study["delayed effect"][low]
    profile = delayed["hindsight_ratio"]
    corridor = {m: float(np.mean(p[1:-1])) for m, p in profile.items()}
    decisive = all(p[0] > 5 * corridor[m] for m, p in profile.items() if "learned" in m)
    reinforce, state = (delayed["estimators"][m] for m in ("REINFORCE (no baseline)", "state HCA (exact h)"))
    return [c for name, by_sigma in study.items() for c in variance_claims(name, by_sigma)] + [
        conditioning_claim(name, by_sigma) for name, by_sigma in study.items()
        if "state HCA (learned h)" in by_sigma[min(by_sigma)]["estimators"]] + [
        claim("survey §4.2.1", "irrelevant actions get a hindsight ratio ≈ 1, the decisive one is far from 1",
              f"delayed effect, σ = {low:g}, mean |h/π - 1| at the first action vs over the corridor: "
              + "; ".join(f"{m} {p[0]:.2f} vs {corridor[m]:.3f}" for m, p in profile.items() if "learned" in m),
              decisive),
        claim("survey §8", "Q(x, a) = E_z[h(a|x,z)/π(a|x) · z]",
              "largest |E_z[h/π z] - Q| at the start state, uniform π, σ = 1: "
              + ", ".join(f"{name} {gap:.1e}" for name, gap in identity.items()),
              max(identity.values()) < 1e-3),
        claim("survey §8 (COCOA)", "when the later state reveals the action, state HCA degrades to REINFORCE",
              f"delayed effect, variance at the first action: state HCA (exact h) "
              f"{state['start_state_variance']:.3g}, REINFORCE without baseline "
              f"{reinforce['start_state_variance']:.3g}",
              math.isclose(state["start_state_variance"], reinforce["start_state_variance"], rel_tol=0.2)),
    ]


# ============================================================================================
# Report
# ============================================================================================
def headline_metrics(her: dict, study: dict, learning: dict) -> dict:
    metrics = {}
    for name, by_n in her.items():
        for n, runs in by_n.items():
            metrics[f"bits{n}_success[{name}]"] = float(np.mean([r["final_success"] for r in runs]))
    for name, by_sigma in study.items():
        for noise, at in by_sigma.items():
            for method, m in at["estimators"].items():
                metrics[f"{name}_sigma{noise:g}_variance[{method}]"] = m["variance"]
                metrics[f"{name}_sigma{noise:g}_bias2[{method}]"] = m["bias2"]
    for name, by_method in learning.items():
        for method, curves in by_method.items():
            metrics[f"{name}_final_J[{method}]"] = float(np.mean([c[-1] for c in curves]))
    return metrics


def print_report(args: Args, study: dict, learning: dict, metrics: dict, claims: list[dict]) -> None:
    print("\nBit flipping, final greedy success rate (mean over seeds):")
    print(format_table([[n, *(metrics[f"bits{n}_success[{name}]"] for name in HER_METHODS)] for n in args.bit_list],
                       ["n", *HER_METHODS]))
    for name, by_sigma in study.items():
        methods = list(by_sigma[args.sigma_list[0]]["estimators"])
        print(f"\n{name}: gradient variance (tr Cov) / bias² against the exact gradient, uniform π "
              f"(|∇J|² = {by_sigma[args.sigma_list[0]]['exact_gradient_norm2']:.3g})")
        rows = [[f"σ={s:g}", *(f"{by_sigma[s]['estimators'][m]['variance']:.3g} / "
                               f"{by_sigma[s]['estimators'][m]['bias2']:.2g}" for m in methods)]
                for s in args.sigma_list]
        print(format_table(rows, ["", *methods]))
    rows = [[name, *(metrics.get(f"{name}_final_J[{m}]", float("nan")) for m in LEARNERS)] for name in learning]
    print(f"\nFinal exact J(π) after {args.learn_iters * args.learn_batch} episodes, σ = {args.learn_sigma:g}:")
    print(format_table(rows, ["task", *LEARNERS]))
    print("\n" + format_claims(claims))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = start_run(args)
    print(f"04 hindsight: HER on bit flipping, n in {args.bit_list}; HCA on 3 tabular tasks; device {device}")
    her = her_sweep(args, device)
    plot_her(her, args.bit_list, out / "her_success_vs_bits.png")
    study = gradient_study(args, device)
    plot_variance(study, out / "hca_variance_vs_sigma.png")
    low = min(args.sigma_list)  # the return still says something about the first action
    plot_ratio(study["delayed effect"][low]["hindsight_ratio"], low, out / "hca_hindsight_ratio.png")
    learning = learning_study(args, device)
    plot_learning(learning, args, out / "hca_learning_curves.png")
    identity = identity_study(args)
    claims = her_claims(args, her) + hca_claims(args, study, identity)
    metrics = headline_metrics(her, study, learning)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, her=her, hca_gradient_study=study,
                  hca_learning=learning, hindsight_identity_gap=identity)
    print_report(args, study, learning, metrics, claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    torch.set_num_threads(1)  # every tensor here is small: on a CPU, threads cost more than they save
    run_script(main, Args)
