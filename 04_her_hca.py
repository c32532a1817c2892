"""04 — Hindsight: relabel the goal (HER), or relabel the credit (HCA). Can hindsight make a
failure useful?

HER (Andrychowicz et al. 2017) asks "which goal would this episode have reached?" and replays a
failure as a success at reaching what it did reach: reward where there was almost none (density).
HCA (Harutyunyan et al. 2019) asks "given what followed, how likely was this action?": the
hindsight ratio h(a|x,z)/π(a|x) is the credit, ≈ 1 for actions that did not matter, so their
noise drops out of the gradient (breadth).

HER: DQN on (state, goal) on the paper's bit flipping, with and without relabelling ("future",
k = 4; or "final", "episode", "random"); a relabelled transition's reward is recomputed, and
  y = r + γ (1 - done) max_a' Q'(s', g, a'), clipped to [-1/(1-γ), 0].
HCA: two policy gradients on the delayed effect of common.KeyToDoor (the first action alone
decides the reward; every reward is noisy, σ), with Z_t = Σ_{k≥t} R_k:
  PG + V baseline   Ψ_t = Z_t - V(X_t)
  return HCA        Ψ_t = (1 - π(A_t|X_t)/h(A_t|X_t,Z_t)) Z_t
with h a classifier trained on the agent's own episodes (return-conditional HCA, which the
survey prefers: it conditions on a scalar, not on a later state).

The default run: DQN and DQN+HER at n = 20 bits, where DQN alone never sees a success; each
gradient's variance at the uniform policy as σ grows. In studies/: 04_her_sweep.py (n from 5 to
30) and 04_hca_tasks.py (state-conditional HCA, REINFORCE, two more tasks, the exact gradient and
h, the return identity, COCOA's premise, a tabular policy learning with each estimator).

Read beside: credit-assignment-problem-survey.txt §4.2, §7 and §8. In runs/04_her_hca/:
  hindsight.png   greedy success while DQN(+HER) trains; tr Cov of each gradient vs σ
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
    state s_{t'+1} becomes its goal; -1 keeps the episode's own goal. "future": with probability
    k / (k + 1), t' uniform in [t, T - 1]. "final": with probability 1/2, t' = T - 1 (the paper
    stores each transition with its goal and with the final one). "episode" and "random": with
    probability k / (k + 1), t' uniform in [0, T - 1], of the same episode for "episode", of an
    episode drawn from the whole buffer for "random" (`length` is then that episode's; the caller
    draws it). "none": never, plain DQN."""
    keep = torch.full_like(step, -1)
    if strategy == "future":
        relabel = uniform(len(step), generator) < k / (k + 1)
        return torch.where(relabel, step + (uniform(len(step), generator) * (length - step)).long(), keep)
    if strategy == "final":
        return torch.where(uniform(len(step), generator) < 0.5, length - 1, keep)
    if strategy in ("episode", "random"):
        relabel = uniform(len(step), generator) < k / (k + 1)
        return torch.where(relabel, (uniform(len(step), generator) * length).long(), keep)
    return keep


class EpisodeBuffer:
    """Whole episodes in preallocated tensors, replayed with hindsight goals. states[e, t] is the
    state before step t of episode e (so states[e, t + 1] is what step t achieved), actions[e, t]
    the action at step t, goals[e] its goal and lengths[e] its number of steps (fewer than n when
    it reached its goal). The oldest episodes are overwritten first."""

    def __init__(self, capacity: int, bits: int, device):
        self.capacity, self.size, self.next = capacity, 0, 0
        self.states = torch.zeros(capacity, bits + 1, bits, dtype=torch.uint8, device=device)
        self.actions = torch.zeros(capacity, bits, dtype=torch.long, device=device)
        self.goals = torch.zeros(capacity, bits, dtype=torch.uint8, device=device)
        self.lengths = torch.zeros(capacity, dtype=torch.long, device=device)

    def add(self, episodes: dict) -> None:
        """Store a batch of episodes: states (N, n + 1, n), actions (N, n), goals (N, n), lengths (N,)."""
        lengths = episodes["lengths"]
        index = (self.next + torch.arange(len(lengths), device=lengths.device)) % self.capacity
        self.states[index], self.actions[index] = episodes["states"].to(torch.uint8), episodes["actions"]
        self.goals[index], self.lengths[index] = episodes["goals"].to(torch.uint8), lengths
        self.next = int(index[-1] + 1) % self.capacity
        self.size = min(self.size + len(lengths), self.capacity)

    def sample(self, batch: int, strategy: str, k: int, generator: torch.Generator) -> dict:
        """A minibatch of transitions (s_t, a_t, s_{t+1}): an episode uniformly, a step t uniformly
        among its steps, the goal from `hindsight_goal_steps` (a state achieved in the same episode,
        or for "random" in an episode drawn uniformly from the buffer), and the reward recomputed
        from what was achieved, r = goal_reward(s_{t+1}, goal): 0 exactly when s_{t+1} equals the goal."""
        episode = (uniform(batch, generator) * self.size).long()
        length = self.lengths[episode]
        step = (uniform(batch, generator) * length).long()
        # "random" takes its goals from any stored episode, including this one (the paper's "states
        # encountered so far in the whole training procedure")
        goal_episode = (uniform(batch, generator) * self.size).long() if strategy == "random" else episode
        goal_step = hindsight_goal_steps(step, self.lengths[goal_episode], strategy, k, generator)
        goal = torch.where((goal_step >= 0)[:, None], self.states[goal_episode, goal_step.clamp(min=0) + 1],
                           self.goals[episode])
        next_state = self.states[episode, step + 1]
        reward = goal_reward(next_state, goal)
        return {"state": self.states[episode, step].float(), "action": self.actions[episode, step],
                "next_state": next_state.float(), "goal": goal.float(), "reward": reward,
                "done": (reward == 0).float(), "episode": episode, "step": step, "goal_episode": goal_episode,
                "goal_step": goal_step}


class QNetwork(nn.Module):
    """Q(s, g, a), a universal value function approximator: an MLP from the concatenated state and
    goal bits to one Q-value per bit to flip."""

    def __init__(self, bits: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2 * bits, hidden), nn.ReLU(), nn.Linear(hidden, bits))

    def forward(self, state: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([state, goal], dim=-1))


def td_loss(q_net: QNetwork, target_net: QNetwork, batch: dict, gamma: float) -> torch.Tensor:
    """(Q(s, g, a) - y)², y = r + γ (1 - done) max_a' Q'(s', g, a') clipped to [-1/(1-γ), 0], where
    every true value lies (rewards are -1 or 0): as in the HER paper, bootstrapping cannot drift out."""
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
# HCA: credit an action by how much more likely it becomes given what followed (Harutyunyan et al. 2019)
# ============================================================================================
def returns_to_go(rewards: torch.Tensor) -> torch.Tensor:
    """Z_t = Σ_{k ≥ t} R_k, time-major (T, ...): the reward_to_go of 01_reinforce_pong.py with
    γ = 1 and no episode ends. Summed backward one step at a time in float32, as there: a reverse
    cumsum accumulates in double on the CPU and rounds differently."""
    returns = torch.zeros_like(rewards, dtype=torch.float32)
    running = torch.zeros_like(rewards[0], dtype=torch.float32)
    for t in reversed(range(len(rewards))):
        # Z_t = R_t + Z_{t+1}
        running = rewards[t] + running
        returns[t] = running
    return returns


class Hindsight(nn.Module):
    """h(a | x, z): the probability that action a was taken in state x, given the return z that
    followed. An MLP on the one-hot x and on z scaled by the typical size of a return (inputs of
    order 1), trained by cross-entropy to predict the action actually taken."""

    def __init__(self, task: TabularTask, hidden: int):
        super().__init__()
        self.num_states, self.return_scale = task.num_states, 1.0 + task.noise * math.sqrt(task.horizon)
        self.net = nn.Sequential(nn.Linear(task.num_states + 1, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, task.num_actions))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        z = (z / self.return_scale)[..., None]
        return self.net(torch.cat([nn.functional.one_hot(x, self.num_states).float(), z], -1))


def return_examples(episodes: dict) -> tuple[torch.Tensor, ...]:
    """(x, z, action) at every step that happened: the action, to predict from x and the return z."""
    alive = episodes["alive"]
    return episodes["states"][alive], episodes["returns"][alive], episodes["actions"][alive]


class HindsightLearner:
    """A hindsight classifier and its optimiser; `fit` takes Adam steps on minibatches of
    (x, c, action) examples, c being what followed x."""

    def __init__(self, args: Args, model: nn.Module, device):
        self.model = model.to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=args.hca_lr)
        self.batch = args.hca_batch
        self.generator = torch.Generator(device).manual_seed(args.seed)

    def fit(self, examples: tuple[torch.Tensor, ...], steps: int) -> None:
        x, c, action = examples
        for _ in range(steps):
            pick = torch.randint(0, len(x), (self.batch,), generator=self.generator, device=x.device)
            loss = nn.functional.cross_entropy(self.model(x[pick], c[pick]), action[pick])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()

    @torch.no_grad()
    def probabilities(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.model(x, c), -1)


# The estimators: one gradient per episode with respect to the tabular logits θ[s, a].
def score_rows(episodes: dict, policy: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """Ψ_t ∇_θ[X_t] log π(A_t|X_t) = Ψ_t (onehot(A_t) - π(X_t)) at every step; (T, N, A)."""
    pi = policy[episodes["states"]]
    return psi[..., None] * (nn.functional.one_hot(episodes["actions"], pi.shape[-1]) - pi)


def per_episode_gradients(episodes: dict, rows: torch.Tensor, num_states: int) -> torch.Tensor:
    """Sum each episode's rows into the logits of the states they belong to: (N, S, A)."""
    T, N, A = rows.shape
    rows = (rows * episodes["alive"][..., None]).transpose(0, 1)
    index = episodes["states"].T[..., None].expand(N, T, A)
    return torch.zeros(N, num_states, A, device=rows.device).scatter_add_(1, index, rows)


def return_hca_psi(episodes: dict, policy: torch.Tensor, h: torch.Tensor, h_min: float) -> torch.Tensor:
    """Return-conditional HCA: Ψ_t = (1 - π(A_t|X_t) / h(A_t|X_t, Z_t)) Z_t. Its expectation given
    (X_t, A_t) is Q(X_t, A_t) - V(X_t), the HCA paper's advantage. When the return says nothing
    about the action, h = π and Ψ = 0, whatever the noise in Z_t. h is clipped at h_min: a learned
    h near 0 would make the ratio explode."""
    a = episodes["actions"][..., None]
    pi_taken = policy[episodes["states"]].gather(-1, a).squeeze(-1)
    h_taken = h.gather(-1, a).squeeze(-1).clamp(min=h_min)
    return (1 - pi_taken / h_taken) * episodes["returns"]


# HCA's world: a small task with an exact model (the HCA paper's §5).
@dataclass
class TabularTask:
    """An episodic MDP whose model we know, so that the true policy gradient is computable. States
    0 .. S-2, and S-1 absorbing; every episode starts in state 0 and ends within `horizon` steps.
    P[s, a, s'] are the transitions. A reward is one of K outcome means values[s, a, k], drawn with
    probability probs[s, a, k], plus Gaussian noise of std `noise`, the σ of the experiment."""

    name: str
    P: torch.Tensor
    values: torch.Tensor
    probs: torch.Tensor
    noise: float
    horizon: int

    def __post_init__(self):
        self.num_states, self.num_actions = self.P.shape[:2]

    @property
    def R(self) -> torch.Tensor:  # the expected reward R[s, a]
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
    """`num` episodes under the tabular policy π[s, a], time-major (horizon, num). alive[t] marks
    the steps that happened (after the end, the terminal state earns nothing); returns[t] is Z_t."""
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


# ============================================================================================
# The training loop: DQN(+HER) on bit flipping
# ============================================================================================
@torch.no_grad()
def play_bitflip(q_net: QNetwork, num: int, bits: int, epsilon: float, generator: torch.Generator) -> dict:
    """`num` episodes of bit flipping in lockstep with the ε-greedy policy, in EpisodeBuffer's
    layout. HER's world (the paper's §3.1): the state is n bits, the goal another n bits, both
    uniform at random; action i flips bit i. The reward is -1 at every step except the one that
    makes the state equal the goal: 0, and the episode ends (or after n steps)."""
    device = generator.device
    state = torch.randint(0, 2, (num, bits), generator=generator, device=device)
    goal = torch.randint(0, 2, (num, bits), generator=generator, device=device)
    done = torch.zeros(num, dtype=torch.bool, device=device)
    states, actions, lengths = [state], [], torch.zeros(num, dtype=torch.long, device=device)
    for _ in range(bits):
        greedy = q_net(state.float(), goal.float()).argmax(1)
        random = torch.randint(0, bits, (num,), generator=generator, device=device)
        explore = torch.rand(num, generator=generator, device=device) < epsilon
        action = torch.where(explore, random, greedy)
        lengths += ~done
        state = state ^ nn.functional.one_hot(action, bits) * (~done)[:, None]  # a finished episode stays
        done = done | (goal_reward(state, goal) == 0)
        states.append(state)
        actions.append(action)
    return {"states": torch.stack(states, 1), "actions": torch.stack(actions, 1), "goals": goal,
            "lengths": lengths, "success": done}


def greedy_success(q_net: QNetwork, num: int, bits: int, generator: torch.Generator) -> float:
    return float(play_bitflip(q_net, num, bits, 0.0, generator)["success"].float().mean())


def success_by_distance(episodes: dict) -> dict:
    """Per Hamming distance d = 0 .. n from the start state to the goal (the bits to flip): how
    many of these episodes had it, and how many of those reached their goal."""
    bits = episodes["goals"].shape[1]
    distance = (episodes["states"][:, 0] != episodes["goals"]).sum(1)
    return {"episodes": torch.bincount(distance, minlength=bits + 1).tolist(),
            "successes": torch.bincount(distance[episodes["success"]], minlength=bits + 1).tolist()}


def train_bitflip(args: Args, bits: int, strategy: str, seed: int, device) -> dict:
    """DQN (strategy "none") or DQN+HER on n = bits, for args.cycles * n cycles. Returns the greedy
    success rate every tenth of training (curve, and by_distance: those evaluations split by the
    goal's distance) and at the end, and the share of replayed transitions that carry reward 0
    (the density HER manufactures)."""
    seed_everything(seed)
    play_rng = torch.Generator(device).manual_seed(seed)
    eval_rng = torch.Generator(device).manual_seed(seed + 10_000)  # the test goals: the same all run long
    q_net = QNetwork(bits, args.hidden).to(device)
    target_net = copy.deepcopy(q_net)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=args.lr)
    buffer = EpisodeBuffer(args.buffer_episodes, bits, device)
    generator = torch.Generator(device).manual_seed(seed)
    cycles, curve, by_distance = args.cycles * bits, [], []
    for cycle in range(1, cycles + 1):
        buffer.add(play_bitflip(q_net, args.envs, bits, args.epsilon, play_rng))
        for _ in range(args.updates):
            batch = buffer.sample(args.batch, strategy, args.relabel_k, generator)
            loss = td_loss(q_net, target_net, batch, args.gamma)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        polyak_update(target_net, q_net, args.polyak)
        if cycle % max(1, cycles // 10) == 0:
            evaluated = play_bitflip(q_net, args.eval_episodes, bits, 0.0, eval_rng)
            curve.append(float(evaluated["success"].float().mean()))
            by_distance.append(success_by_distance(evaluated))
    replayed = buffer.sample(4096, strategy, args.relabel_k, generator)
    return {"curve": curve, "by_distance": by_distance,
            "final_success": greedy_success(q_net, args.eval_episodes, bits, eval_rng),
            "episodes": cycles * args.envs, "reward_share": float((replayed["reward"] == 0).float().mean())}


# ============================================================================================
# Config
# ============================================================================================
@dataclass
class Args(RunArgs):
    out: str = arg("runs/04_her_hca", "output folder for figures and results.json")
    # HER on bit flipping
    bits: int = arg(20, "bit-string length n")
    her_seeds: int = arg(2, "seeds of DQN and of DQN+HER")
    strategy: str = arg("future", "HER goal-sampling strategy", choices=("future", "final", "episode", "random"))
    relabel_k: int = arg(4, "HER 'future': a goal is replaced with probability k / (k + 1)")
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
    sigmas: str = arg("0.25,0.5,1,2,4", "reward noise levels σ, comma-separated", item=float)
    corridor: int = arg(10, "delayed effect: steps between the decisive action and its reward")
    measure_episodes: int = arg(4000, "episodes per σ on which each gradient's variance is measured")
    hindsight_episodes: int = arg(2000, "episodes per σ the hindsight classifier is trained on")
    hindsight_steps: int = arg(600, "Adam steps of the hindsight classifier")
    hca_hidden: int = arg(64, "hidden units of the hindsight classifier (two layers)")
    hca_lr: float = arg(3e-3, "Adam learning rate of the hindsight classifier")
    hca_batch: int = arg(256, "minibatch of the hindsight classifier")
    h_min: float = arg(0.02, "return HCA: h is clipped below at this, so π/h stays finite")

    SMOKE = dict(bits=6, her_seeds=1, cycles=1, updates=2, batch=16, hidden=16, eval_episodes=16,
                 buffer_episodes=64, sigmas="0.5,2", corridor=3, measure_episodes=64, hindsight_episodes=32,
                 hindsight_steps=5, hca_hidden=8)

    def __post_init__(self):
        require_positive(self, "bits", "her_seeds", "relabel_k", "envs", "cycles", "updates", "batch", "hidden",
                         "lr", "buffer_episodes", "eval_episodes", "corridor", "measure_episodes",
                         "hindsight_episodes", "hindsight_steps", "hca_hidden", "hca_lr", "hca_batch")
        require(0 < self.gamma < 1, "--gamma must be in (0, 1)")
        require(0 <= self.polyak < 1, "--polyak must be in [0, 1)")
        require(0 <= self.epsilon <= 1, "--epsilon must be in [0, 1]")
        require(0 < self.h_min < 1, "--h-min must be in (0, 1)")
        require(all(s > 0 for s in self.sigma_list), "--sigmas must be positive")

    @property
    def sigma_list(self) -> list[float]:
        return as_list(self.sigmas, float)


# ============================================================================================
# The experiment, a failure made useful by a new goal and by a new credit; figure, claims, report
# ============================================================================================
HER_METHODS = ("DQN", "DQN+HER")
ESTIMATORS = ("PG + V baseline", "return HCA (learned h)")


def her_runs(args: Args, bits: int, device) -> dict:
    """{method: [one train_bitflip result per seed]} on n = bits."""
    seeds = range(args.seed, args.seed + args.her_seeds)
    return {name: [train_bitflip(args, bits, args.strategy if name == "DQN+HER" else "none", seed, device)
                   for seed in tqdm(seeds, desc=f"{name}, n = {bits}", leave=False)] for name in HER_METHODS}


def trace_covariance(grads: torch.Tensor) -> float:
    """tr Cov of per-episode gradients (N, S, A): the variance of the estimator."""
    return float(((grads - grads.mean(0)) ** 2).sum((1, 2)).mean())


def gradient_variances(args: Args, noise: float, device) -> dict:
    """{estimator: tr Cov} on the delayed effect at the uniform policy: h learned on one batch of
    episodes, both gradients measured on a fresh one; V is exact, only h is learned. Seeded here,
    so that each σ's numbers do not depend on what ran before."""
    seed_everything(args.seed)
    task = delayed_effect(args.corridor, noise).to(device)
    generator = torch.Generator(device).manual_seed(args.seed)
    policy = torch.full((task.num_states, task.num_actions), 1 / task.num_actions, device=device)
    V, _ = evaluate_policy(task.P.double().cpu(), task.R.double().cpu(), policy.double().cpu(), 1.0)
    train = sample_episodes(task, policy, args.hindsight_episodes, generator)
    test = sample_episodes(task, policy, args.measure_episodes, generator)
    learner = HindsightLearner(args, Hindsight(task, args.hca_hidden), device)
    learner.fit(return_examples(train), args.hindsight_steps)
    h = learner.probabilities(test["states"], test["returns"])
    # PG + V baseline: Ψ_t = Z_t - V(X_t)
    psi = {"PG + V baseline": test["returns"] - V.float().to(device)[test["states"]],
           "return HCA (learned h)": return_hca_psi(test, policy, h, args.h_min)}
    return {m: trace_covariance(per_episode_gradients(test, score_rows(test, policy, psi[m]), task.num_states))
            for m in ESTIMATORS}


def plot(args: Args, her: dict, variances: dict, path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    plot_curves(axes[0], np.linspace(0.1, 1, len(her["DQN"][0]["curve"])),
                {name: np.array([r["curve"] for r in runs]) for name, runs in her.items()})
    axes[0].set(title=f"Bit flipping, n = {args.bits}", xlabel="fraction of the training budget",
                ylabel="greedy success rate", ylim=(-0.05, 1.05))
    for method in ESTIMATORS:
        axes[1].plot(args.sigma_list, [variances[s][method] for s in args.sigma_list], "o-", label=method)
    axes[1].set(title="Delayed effect: tr Cov of the gradient", xlabel="reward noise σ", xscale="log", yscale="log",
                xticks=args.sigma_list, xticklabels=[f"{s:g}" for s in args.sigma_list])
    axes[1].minorticks_off()
    axes[1].legend(fontsize="small")
    axes[1].grid(alpha=0.3)
    save_figure(fig, path)


def her_claims(bits: int, success: dict, share: dict) -> list[dict]:
    """success and share: {method: mean final success / share of reward-0 replays} at n = bits."""
    return [claim("HER paper, Fig. 1", "DQN alone fails beyond about 13-15 bits",
                  f"n = {bits}: DQN's final success {success['DQN']:.2f}",
                  bool(success["DQN"] < 0.1) if bits >= 15 else None),
            claim("HER paper, Fig. 1", "DQN+HER solves bit flipping where DQN alone fails (up to 50 bits)",
                  f"n = {bits}: DQN+HER's final success {success['DQN+HER']:.2f}", bool(success["DQN+HER"] >= 0.9)),
            claim("survey §4.2.2 and §7", "HER turns failed episodes into useful signal (reward density)",
                  f"n = {bits}: share of replayed transitions with reward 0, which is success in the −1/0 "
                  f"convention: DQN {share['DQN']:.4f}, DQN+HER {share['DQN+HER']:.3f}",
                  bool(share["DQN+HER"] > 10 * share["DQN"]))]


def variance_claims(ratio: dict) -> list[dict]:
    """ratio: {σ: tr Cov of PG + V baseline / tr Cov of return HCA}. Is HCA's gradient variance the
    lower one at every σ, and does its edge grow from the smallest σ to the largest?"""
    low, high = min(ratio), max(ratio)
    return [claim("HCA paper §5", "delayed effect: HCA's gradient has a lower variance than PG with a value baseline",
                  "variance of PG + V baseline / return HCA (learned h): "
                  + ", ".join(f"{r:.3g}x at σ = {s:g}" for s, r in ratio.items()), all(r > 1 for r in ratio.values())),
            claim("HCA paper §5", "delayed effect: HCA's edge in variance over PG with a value baseline grows with "
                  "the reward noise σ", f"variance of PG + V baseline / return HCA (learned h): {ratio[low]:.3g}x at "
                  f"σ = {low:g}, {ratio[high]:.3g}x at σ = {high:g}", ratio[high] > ratio[low])]


def summary(args: Args, her: dict, variances: dict) -> tuple[dict, list[dict]]:
    """The headline metrics, with the tables the run prints (metrics["tables"]), and the claims."""
    success = {name: [r["final_success"] for r in runs] for name, runs in her.items()}
    mean = {name: float(np.mean(s)) for name, s in success.items()}
    share = {name: float(np.mean([r["reward_share"] for r in runs])) for name, runs in her.items()}
    ratio = {s: v["PG + V baseline"] / v["return HCA (learned h)"] for s, v in variances.items()}
    metrics = {f"bits{args.bits}_success[{name}]": s for name, s in mean.items()}
    metrics |= {f"delayed effect_sigma{s:g}_variance[{m}]": v for s, by_m in variances.items() for m, v in by_m.items()}
    her_rows = [[name, mean[name], ", ".join(f"{s:.3g}" for s in success[name]), share[name]] for name in HER_METHODS]
    hca_rows = [[f"{s:g}", *v.values(), f"{ratio[s]:.3g}x"] for s, v in variances.items()]
    metrics["tables"] = {
        "her": {"title": f"Bit flipping, {args.her_seeds} seeds", "rows": her_rows,
                "header": [f"n = {args.bits}", "final greedy success", "per seed", "share of reward-0 replays"]},
        "variance": {"title": "Delayed effect: tr Cov of each gradient at the uniform policy", "rows": hca_rows,
                     "header": ["σ", *ESTIMATORS, "PG / HCA"]}}
    return metrics, her_claims(args.bits, mean, share) + variance_claims(ratio)


def report(metrics: dict, claims: list[dict]) -> None:
    for table in metrics["tables"].values():
        print(f"\n{table['title']}:\n" + format_table(table["rows"], table["header"]))
    print("\n" + format_claims(claims))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = start_run(args)
    print(f"04 hindsight: DQN(+HER) on {args.bits}-bit flipping; HCA on the delayed effect; device {device}")
    her = her_runs(args, args.bits, device)
    variances = {noise: gradient_variances(args, noise, device)
                 for noise in tqdm(args.sigma_list, desc="HCA variance", leave=False)}
    plot(args, her, variances, out / "hindsight.png")
    metrics, claims = summary(args, her, variances)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, her=her, hca_variances=variances)
    report(metrics, claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    torch.set_num_threads(1)  # every tensor here is small: on a CPU, threads cost more than they save
    run_script(main, Args)
