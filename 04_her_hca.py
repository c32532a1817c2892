"""04 — Hindsight: relabel the goal (HER), or relabel the credit (HCA). Can hindsight make a
failure useful?

HER (Andrychowicz et al. 2017) asks "which goal would this episode have reached?" and replays a
failure as a success at reaching what it did reach: reward where there was almost none (density).
HCA (Harutyunyan et al. 2019) asks "given what followed, how likely was this action?": the
hindsight ratio h(a|x,z)/π(a|x) is the credit, ≈ 1 for actions that did not matter, so their
noise drops out of the gradient (breadth).

HER: DQN on (state, goal) on the paper's bit flipping, with and without relabelling ("future",
k = 4, or "final"); a relabelled transition's reward is recomputed, and
  y = r + γ (1 - done) max_a' Q'(s', g, a'), clipped to [-1/(1-γ), 0].
HCA: three policy gradients on the delayed effect of common.KeyToDoor (the first action alone
decides the reward; every reward is noisy, σ):
  PG + V baseline   Ψ_t = Z_t - V(X_t)                                       (Z_t = Σ_{k≥t} R_k)
  state HCA         Σ_b ∇π(b|X_t) [r̂(X_t,b) + Σ_{k>t} h(b|X_t,X_k)/π(b|X_t) R_k]
  return HCA        Ψ_t = (1 - π(A_t|X_t)/h(A_t|X_t,Z_t)) Z_t
with h a classifier trained on the agent's own episodes.

The default run: DQN and DQN+HER at n = 20 bits, where DQN alone never sees a success; each
estimator's gradient variance at the uniform policy as σ grows; and a tabular policy learning
with each. More in studies/: 04_her_sweep.py (n from 5 to 30, the paper's thresholds) and
04_hca_tasks.py (two more tasks, bias against the exact gradient, the exact h, the return
identity, COCOA's premise, learning curves on every task).

Read beside: credit-assignment-problem-survey.txt §4.2, §7 and §8. In runs/04_her_hca/:
  hindsight.png   greedy success while DQN(+HER) trains; tr Cov of each gradient vs σ; exact J(π)
                  while learning with each gradient
  results.json    every number, and the papers' claims beside our measurements
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
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
    pairs h(a|X_t, X_k) for state HCA (learned or, in studies/04_hca_tasks.py, exact)."""
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
# HCA's world: a small task with an exact model (Harutyunyan et al. 2019, §5)
# ============================================================================================
@dataclass
class TabularTask:
    """An episodic MDP whose model we know, so that the true policy gradient is computable.

    States 0 .. S-2, and S-1 the absorbing terminal state; every episode starts in state 0 and
    ends within `horizon` steps. P[s, a, s'] are the transitions. A reward is one of K outcome
    means values[s, a, k], drawn with probability probs[s, a, k], plus Gaussian noise of std
    `noise`, the σ of the experiment.
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


def delayed_effect(corridor: int, noise: float) -> TabularTask:
    """common.KeyToDoor as HCA's delayed-effect task: the first action alone decides the final
    reward (1 or 0), after `corridor` steps whose actions change nothing; every reward is noisy."""
    P, R = KeyToDoor(1, corridor=corridor).model()
    return TabularTask("delayed effect", P.float(), *deterministic_rewards(R), noise, horizon=corridor + 2)


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


def exact_return(task: TabularTask, logits: torch.Tensor) -> float:
    """J(π) = V^π(s_0) of the softmax policy π = softmax(θ[s]), by exact policy evaluation (γ = 1)."""
    V, _ = evaluate_policy(task.P.double().cpu(), task.R.double().cpu(),
                           torch.softmax(logits.detach().double().cpu(), 1), 1.0)
    return float(V[0])


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
# ============================================================================================
# Config
# ============================================================================================
@dataclass
class Args(RunArgs):
    out: str = arg("runs/04_her_hca", "output folder for figures and results.json")
    # HER on bit flipping
    bits: int = arg(20, "bit-string length n")
    her_seeds: int = arg(2, "seeds of DQN and of DQN+HER")
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
    # HCA on the delayed effect
    sigmas: str = arg("0.25,0.5,1,2,4", "reward noise levels σ of the variance measurement, comma-separated",
                      item=float)
    corridor: int = arg(10, "delayed effect: steps between the decisive action and its reward")
    measure_episodes: int = arg(4000, "episodes per σ on which each estimator's variance is measured")
    hindsight_episodes: int = arg(2000, "episodes per σ the hindsight classifiers are trained on")
    hindsight_steps: int = arg(600, "Adam steps of each hindsight classifier before the variance is measured")
    hca_hidden: int = arg(64, "hidden units of the hindsight classifier (two layers)")
    hca_lr: float = arg(3e-3, "Adam learning rate of the hindsight classifier")
    hca_batch: int = arg(256, "minibatch of the hindsight classifier")
    h_min: float = arg(0.02, "return HCA: h is clipped below at this, so π/h stays finite")
    learn_sigma: float = arg(1.0, "reward noise σ of the learning curves")
    learn_iters: int = arg(100, "policy updates per learning run")
    learn_batch: int = arg(32, "episodes per policy update")
    learn_seeds: int = arg(3, "seeds per estimator of the learning curves")
    pg_lr: float = arg(0.5, "step size of the tabular policy (gradient ascent on the logits)")
    value_rate: float = arg(0.2, "step size of the running-mean V (baseline) and r̂ (state HCA)")
    refit_steps: int = arg(10, "learning runs: hindsight classifier steps after each batch")
    hindsight_batches: int = arg(4, "learning runs: the classifier trains on the last this many batches")

    SMOKE = dict(bits=6, her_seeds=1, cycles=1, updates=2, batch=16, hidden=16, eval_episodes=16,
                 buffer_episodes=64, sigmas="0.5,2", corridor=3, measure_episodes=64, hindsight_episodes=32,
                 hindsight_steps=5, hca_hidden=8, learn_iters=3, learn_batch=4, learn_seeds=1, refit_steps=2)

    def __post_init__(self):
        require_positive(self, "bits", "her_seeds", "relabel_k", "envs", "cycles", "updates", "batch", "hidden",
                         "lr", "buffer_episodes", "eval_episodes", "corridor", "measure_episodes",
                         "hindsight_episodes", "hindsight_steps", "hca_hidden", "hca_lr", "hca_batch",
                         "learn_iters", "learn_batch", "learn_seeds", "pg_lr", "refit_steps",
                         "hindsight_batches")
        require(0 < self.gamma < 1, "--gamma must be in (0, 1)")
        require(0 <= self.polyak < 1, "--polyak must be in [0, 1)")
        require(0 <= self.epsilon <= 1, "--epsilon must be in [0, 1]")
        require(0 < self.h_min < 1, "--h-min must be in (0, 1)")
        require(0 < self.value_rate <= 1, "--value-rate must be in (0, 1]")
        require(self.learn_sigma > 0, "--learn-sigma must be positive")
        require(all(s > 0 for s in self.sigma_list), "--sigmas must be positive")

    @property
    def sigma_list(self) -> list[float]:
        return as_list(self.sigmas, float)


# ============================================================================================
# The experiment: a failure made useful, once by a new goal and once by a new credit
# ============================================================================================
HER_METHODS = ("DQN", "DQN+HER")
ESTIMATORS = ("PG + V baseline", "state HCA (learned h)", "return HCA (learned h)")


def her_runs(args: Args, bits: int, device) -> dict:
    """{method: [one train_bitflip result per seed]} on n = bits."""
    results = {name: [] for name in HER_METHODS}
    runs = [(name, seed) for name in HER_METHODS for seed in range(args.seed, args.seed + args.her_seeds)]
    for name, seed in tqdm(runs, desc=f"bit flipping, n = {bits}", leave=False):
        run = train_bitflip(args, bits, args.strategy if name == "DQN+HER" else "none", seed, device)
        results[name].append(run)
        tqdm.write(f"  {name:8s} n={bits:3d} seed {seed}: success {run['final_success']:.2f} after "
                   f"{run['episodes']} episodes, share of reward-0 replays {run['reward_share']:.3f}")
    return results


def fitted(args: Args, task: TabularTask, condition: str, episodes: dict, device) -> HindsightLearner:
    learner = HindsightLearner(args, task, condition, device)
    learner.fit(episodes, args.hindsight_steps)
    return learner


def trace_covariance(grads: torch.Tensor) -> float:
    """tr Cov of per-episode gradients (N, S, A): the variance of the estimator."""
    return float(((grads - grads.mean(0)) ** 2).sum((1, 2)).mean())


def gradient_variances(args: Args, noise: float, device) -> dict:
    """{estimator: tr Cov} on the delayed effect at the uniform policy: h learned on one batch of
    episodes, every estimator measured on a fresh one. V and r̂ are exact: only h is learned.
    Seeded here, so that each σ's numbers do not depend on what ran before."""
    seed_everything(args.seed)
    task = delayed_effect(args.corridor, noise).to(device)
    generator = torch.Generator(device).manual_seed(args.seed)
    policy = torch.full((task.num_states, task.num_actions), 1 / task.num_actions, device=device)
    V, _ = evaluate_policy(task.P.double().cpu(), task.R.double().cpu(), policy.double().cpu(), 1.0)
    train = sample_episodes(task, policy, args.hindsight_episodes, generator)
    test = sample_episodes(task, policy, args.measure_episodes, generator)
    h = {"return HCA (learned h)": fitted(args, task, "return", train, device).probabilities(
             test["states"], test["returns"]),
         "state HCA (learned h)": learned_state_pairs(fitted(args, task, "state", train, device), test)}
    variances = {}
    for method in ESTIMATORS:
        rows = gradient_rows(method, test, policy, V.float().to(device), task.R, h.get(method), args.h_min)
        variances[method] = trace_covariance(per_episode_gradients(test, rows, task.num_states))
    return variances


def learning_runs(args: Args, device) -> dict:
    """{estimator: [one exact-J curve per seed]} on the delayed effect at σ = learn_sigma."""
    task = delayed_effect(args.corridor, args.learn_sigma)
    runs = [(method, args.seed + i) for method in ESTIMATORS for i in range(args.learn_seeds)]
    curves = {method: [] for method in ESTIMATORS}
    for method, seed in tqdm(runs, desc="HCA learning", leave=False):
        curves[method].append(learn(args, task, method, seed, device))
    return curves


# ============================================================================================
# Figure, claims, report
# ============================================================================================
def plot(args: Args, her: dict, variances: dict, learning: dict, path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    plot_curves(axes[0], np.linspace(0.1, 1, len(her["DQN"][0]["curve"])),
                {name: np.array([r["curve"] for r in runs]) for name, runs in her.items()})
    axes[0].set(title=f"Bit flipping, n = {args.bits}", xlabel="fraction of the training budget",
                ylabel="greedy success rate", ylim=(-0.05, 1.05))
    for method in ESTIMATORS:
        axes[1].plot(args.sigma_list, [variances[s][method] for s in args.sigma_list], "o-", label=method)
    axes[1].set(title="Delayed effect: tr Cov of the gradient", xlabel="reward noise σ", xscale="log",
                yscale="log")
    axes[1].legend(fontsize="small")
    axes[1].grid(alpha=0.3)
    plot_curves(axes[2], np.arange(args.learn_iters + 1) * args.learn_batch,
                {m: np.array(c) for m, c in learning.items()})
    axes[2].set(title=f"Delayed effect, σ = {args.learn_sigma:g}: learning", xlabel="episodes",
                ylabel="exact J(π)")
    save_figure(fig, path)


def her_claims(bits: int, success: dict, share: dict) -> list[dict]:
    """success and share: {method: mean final success / share of reward-0 replays} at n = bits."""
    beyond = bits >= 15
    return [claim("HER paper, Fig. 1", "DQN alone fails beyond about 13-15 bits",
                  f"n = {bits}: DQN's final success {success['DQN']:.2f}",
                  bool(success["DQN"] < 0.1) if beyond else None),
            claim("HER paper, Fig. 1", "DQN+HER solves bit flipping where DQN alone fails (up to 50 bits)",
                  f"n = {bits}: DQN+HER's final success {success['DQN+HER']:.2f}", bool(success["DQN+HER"] >= 0.9)),
            claim("survey §4.2.2 and §7", "HER turns failed episodes into useful signal (reward density)",
                  f"n = {bits}: share of replayed transitions with reward 0, which is success in the −1/0 "
                  f"convention: DQN {share['DQN']:.4f}, DQN+HER {share['DQN+HER']:.3f}",
                  bool(share["DQN+HER"] > 10 * share["DQN"]))]


def variance_ratio(variances: dict, method: str) -> float:
    """How many times larger the variance of PG + V baseline is than `method`'s, at one σ."""
    return variances["PG + V baseline"] / variances[method]


def variance_claims(name: str, by_sigma: dict) -> list[dict]:
    """by_sigma: {σ: {estimator: tr Cov}}. Does HCA (learned h) have a lower gradient variance than
    PG + V baseline at every σ, and does its edge (the ratio PG / HCA) grow from the smallest σ to
    the largest, for each HCA variant?"""
    sigmas = sorted(by_sigma)
    low, high = sigmas[0], sigmas[-1]
    methods = [m for m in ("state HCA (learned h)", "return HCA (learned h)") if m in by_sigma[high]]
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


def summary(args: Args, her: dict, variances: dict, learning: dict) -> tuple[dict, list[dict], dict]:
    """The headline metrics, the claims, and the mean share of reward-0 replays per HER method."""
    success = {name: float(np.mean([r["final_success"] for r in runs])) for name, runs in her.items()}
    share = {name: float(np.mean([r["reward_share"] for r in runs])) for name, runs in her.items()}
    metrics = {f"bits{args.bits}_success[{name}]": s for name, s in success.items()}
    metrics |= {f"delayed effect_sigma{s:g}_variance[{m}]": v for s, by_m in variances.items() for m, v in by_m.items()}
    metrics |= {f"delayed effect_final_J[{m}]": float(np.mean([c[-1] for c in curves])) for m, curves in learning.items()}
    return metrics, her_claims(args.bits, success, share) + variance_claims("delayed effect", variances), share


def report(args: Args, metrics: dict, share: dict, claims: list[dict]) -> None:
    print(f"\nBit flipping, n = {args.bits}, mean over {args.her_seeds} seeds:")
    print(format_table([[name, metrics[f"bits{args.bits}_success[{name}]"], share[name]] for name in HER_METHODS],
                       ["", "final greedy success", "share of reward-0 replays"]))
    print("\nDelayed effect: tr Cov of each gradient at the uniform policy, by σ; and the final exact J(π)\n"
          f"after learning for {args.learn_iters * args.learn_batch} episodes at σ = {args.learn_sigma:g}:")
    rows = [[f"σ={s:g}", *(metrics[f"delayed effect_sigma{s:g}_variance[{m}]"] for m in ESTIMATORS)]
            for s in args.sigma_list]
    print(format_table(rows + [["final J", *(metrics[f"delayed effect_final_J[{m}]"] for m in ESTIMATORS)]],
                       ["", *ESTIMATORS]))
    print("\n" + format_claims(claims))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = start_run(args)
    print(f"04 hindsight: DQN(+HER) on {args.bits}-bit flipping; HCA on the delayed effect; device {device}")
    her = her_runs(args, args.bits, device)
    variances = {noise: gradient_variances(args, noise, device)
                 for noise in tqdm(args.sigma_list, desc="HCA variance", leave=False)}
    learning = learning_runs(args, device)
    plot(args, her, variances, learning, out / "hindsight.png")
    metrics, claims, share = summary(args, her, variances, learning)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, her=her, hca_variances=variances, hca_learning=learning)
    report(args, metrics, share, claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    torch.set_num_threads(1)  # every tensor here is small: on a CPU, threads cost more than they save
    run_script(main, Args)
