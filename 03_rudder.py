"""03 — Return decomposition (RUDDER) and reward transport (TRT): move a delayed reward to the
step that earned it.

RUDDER (Arjona-Medina et al., 2019; survey §4.1.2 and §5): an LSTM predicts an episode's return G
from its (state, action) sequence, ĝ_t at every step. The differences r̃_t = ĝ_t - ĝ_{t-1}, plus
the last prediction's error (G - ĝ_{T-1}) / T, are a new reward that sums to G exactly: the optimal
policy is unchanged while the delay is gone. When the predictor is good, ĝ jumps at the step that
decided the return, and r̃ is near zero everywhere else.

TRT (survey §4.1.4 and §6) is lighter and not return-equivalent: a classifier with one
self-attention layer learns whether the return beats a threshold, and at the steps its attention
picks out, the rewards beyond the discount's horizon τ_γ = 1/(1 - γ) are added to the immediate
reward, r'_t = r_t + Σ_{t' ≥ t + τ_γ} r_t'. A heuristic that bets on the attention.

Three experiments, each with tabular learners so that only the credit differs:
  1. The RUDDER authors' pocket-watch shop: one decision (repair or not) at t = 0, the sale 50
     steps later, noisy costs on the way. Q-learning, Monte Carlo and Q-learning on r̃, each over
     a grid of step sizes, until 95% of the last 750 greedy decisions are optimal.
  2. Key-to-door (γ = 1): episodes until the key is preferred as the corridor (the delay) grows.
  3. Key-to-door with distractor rewards and γ = 0.9: TD, TRT and RUDDER below and beyond τ_γ.
Besides, on the predictor's stored episodes and by exact dynamic programming: what the survey
promises of a redistribution (no expected future reward, the same optimal policy) and of
potential-based shaping, r'_t = r_t + Φ(s_{t+1}) - Φ(s_t) (Ng et al. 1999).

What to look at (in runs/03_rudder/): redistribution.png (one episode per outcome: the delayed
reward and r̃), pocket_watch.png (optimal decisions over episodes, and the step sizes),
sweeps.png (episodes to solve vs delay in both key-to-door studies, and TRT's attention), and
results.json (all numbers, and the authors' and the essay's claims beside ours).
"""

from __future__ import annotations

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
    moving_average,
    play_episodes,
    plot_curves,
    require,
    require_positive,
    run_script,
    save_figure,
    start_run,
    write_results,
)


# ============================================================================================
# RUDDER: predict the return at every step; the differences of the predictions are the reward
# ============================================================================================
class ReturnPredictor(nn.Module):
    """LSTM over the encoded steps; ĝ_t, a prediction of the return, at every step."""

    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (T, N, features) -> predictions (T, N)."""
        hidden, _ = self.lstm(x)
        return self.head(hidden).squeeze(-1)


def predictor_loss(predictions: torch.Tensor, returns: torch.Tensor, aux_weight: float) -> torch.Tensor:
    """Main loss: (ĝ_{T-1} - G)², the return predicted at the last step. Auxiliary loss: the
    return predicted at every step, mean over steps of (ĝ_t - G)². Both real means over episodes."""
    main = ((predictions[-1] - returns) ** 2).mean()
    auxiliary = ((predictions - returns[None]) ** 2).mean()
    return main + aux_weight * auxiliary


def redistribute(predictions: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """r̃_t = ĝ_t - ĝ_{t-1} (ĝ_{-1} = 0), plus the last prediction's error (G - ĝ_{T-1}) spread
    evenly over the T steps, so that Σ_t r̃_t = G exactly (return-equivalent)."""
    differences = torch.diff(predictions, dim=0, prepend=torch.zeros_like(predictions[:1]))
    error = returns - predictions[-1]
    return differences + error[None] / len(predictions)


def credit_share(redistributed: torch.Tensor) -> torch.Tensor:
    """Where the redistribution puts what differs between episodes: the variance over episodes
    of r̃_t at each step, as a share of the total. (The first step also receives ĝ_0, about the
    mean return, which is the same for every episode; a share of |r̃| would count it as credit.)"""
    variance = redistributed.var(dim=1)
    return variance / variance.sum()


def future_rewards(rewards: torch.Tensor) -> torch.Tensor:
    """Σ_{k>t} r_k at every step t, time-major: what is still to come after step t's reward."""
    return rewards.flip(0).cumsum(0).flip(0) - rewards


def pair_index(episode: dict) -> torch.Tensor:
    """Each step's (s_t, a_t) as one index, 2 s_t + a_t (key-to-door has two actions)."""
    return episode["states"] * KeyToDoor.num_actions + episode["actions"]


def pair_means(values: torch.Tensor, pairs: torch.Tensor, num_pairs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean of `values` over the visits of each (s, a) pair, and the visit counts (mean 0
    where a pair was never visited)."""
    counts = torch.bincount(pairs.flatten(), minlength=num_pairs)
    sums = torch.zeros(num_pairs, dtype=values.dtype, device=values.device).index_add_(0, pairs.flatten(), values.flatten())
    return sums / counts.clamp(min=1), counts


def conditional_variance(values: torch.Tensor, pairs: torch.Tensor, num_pairs: int) -> float:
    """E[Var(values | s_t, a_t)]: the mean squared distance of each visit from its pair's mean."""
    means, _ = pair_means(values, pairs, num_pairs)
    return float(((values - means[pairs]) ** 2).mean())


def optimal_q(P: torch.Tensor, R: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Q* by value iteration, Q(s, a) ← R(s, a) + γ Σ_s' P(s'|s, a) max_a' Q(s', a'); as many sweeps
    as states, which is exact on an episodic chain like key-to-door."""
    Q = R.clone()
    for _ in range(len(P)):
        Q = R + gamma * torch.einsum("sat,t->sa", P, Q.max(1).values)
    return Q


def potential_shaping(P: torch.Tensor, R: torch.Tensor, potential: torch.Tensor) -> torch.Tensor:
    """Ng et al.'s shaped reward in expectation, R'(s, a) = R(s, a) + Σ_s' P(s'|s, a) Φ(s') - Φ(s)
    (γ = 1; Φ of the terminal state is 0)."""
    return R + torch.einsum("sat,t->sa", P, potential) - potential[:, None]


# ============================================================================================
# TRT, the lighter cousin: a classifier's attention marks the important steps, and the rewards
# from beyond the discount's horizon are transported to them
# ============================================================================================
class AttentionClassifier(nn.Module):
    """Embed each step, one self-attention layer, mean-pool, one logit for "this episode's return
    exceeds the threshold". Its attention says which steps the verdict was read from."""

    def __init__(self, features: int, width: int):
        super().__init__()
        self.embed = nn.Linear(features, width)
        self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: (T, N, features) -> logits (N,) and attention (N, T, T), row i = where step i looks."""
        h = torch.relu(self.embed(x)).transpose(0, 1)
        scores = self.query(h) @ self.key(h).transpose(1, 2) / h.shape[-1] ** 0.5
        attention = scores.softmax(-1)  # A_ij = softmax_j(q_i · k_j / √d)
        pooled = (attention @ self.value(h)).mean(1)
        return self.head(pooled).squeeze(-1), attention


def classifier_loss(output: tuple, labels: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the logits; the attention, the second output, is not in the loss."""
    return nn.functional.binary_cross_entropy_with_logits(output[0], labels)


def importance(attention: torch.Tensor) -> torch.Tensor:
    """The attention each step receives, averaged over the steps that look: (N, T, T) -> (T, N),
    in units of the uniform share 1/T (1 = ordinary, far above 1 = where the classifier looks)."""
    return attention.mean(1).T * attention.shape[-1]


def discount_horizon(gamma: float) -> int:
    """τ_γ = 1 / (1 - γ), in steps: rewards further away than this barely reach a TD learner."""
    return round(1 / (1 - gamma))


def transport(rewards: torch.Tensor, weights: torch.Tensor, horizon: int, focus: float,
              scale: float) -> torch.Tensor:
    """r'_t = r_t + scale · Σ_{t' ≥ t + τ_γ} r_t' at the steps whose importance exceeds `focus`;
    every other step keeps its reward. (Time-major; rewards beyond the episode count as 0.)"""
    to_go = rewards.flip(0).cumsum(0).flip(0)  # Σ_{t' ≥ t} r_t'
    beyond = torch.cat([to_go[horizon:], torch.zeros_like(to_go[:horizon])])[: len(rewards)]
    return rewards + scale * (weights > focus) * beyond


# ============================================================================================
# The tabular learners the credit is for: Q-learning on a reward (the delayed one, or RUDDER's
# or TRT's rewrite of it) and Monte Carlo control
# ============================================================================================
def running_mean(table: torch.Tensor, index: torch.Tensor, targets: torch.Tensor,
                 rate: float | torch.Tensor) -> None:
    """Tabular learning from a batch: each entry of `table` (flattened) that `index` visits moves
    by `rate` toward the mean of its targets in the batch; entries not visited stay. `rate` is a
    number or one per entry of the flattened table (learners that share one table)."""
    entries = table.view(-1)
    total = torch.zeros_like(entries).index_add_(0, index, targets.to(entries.dtype))
    visits = torch.bincount(index, minlength=len(entries))
    # x += rate (mean targets - x), at the visited entries only
    entries += rate * torch.where(visits > 0, total / visits.clamp(min=1) - entries, torch.zeros_like(entries))


def epsilon_greedy(Q: torch.Tensor, epsilon: float) -> torch.Tensor:
    """The ε-greedy policy of a Q table as π[s, a]: 1 - ε + ε/2 on the greedy action, ε/2 else."""
    greedy = nn.functional.one_hot(Q.argmax(1), Q.shape[1]).float()
    return (1 - epsilon) * greedy + epsilon / Q.shape[1]


def q_learning_update(Q, episode: dict, rewards: torch.Tensor, alpha, gamma: float = 1.0) -> None:
    """Q(s, a) += α (r + γ max_a' Q(s', a') - Q(s, a)), averaged over a batch's visits
    (α: a number, or one per entry when several learners share one flattened table)."""
    s, a = episode["states"].flatten(), episode["actions"].flatten()
    target = rewards.flatten() + gamma * Q[episode["next_states"].flatten()].max(1).values
    running_mean(Q, s * Q.shape[1] + a, target, alpha)


def mc_update(Q, episode: dict, alpha) -> None:
    """Q(s, a) += α (G_t - Q(s, a)), the undiscounted return from step t on."""
    returns = episode["rewards"].flip(0).cumsum(0).flip(0)  # G_t = Σ_{t' ≥ t} r_t'
    s, a = episode["states"].flatten(), episode["actions"].flatten()
    running_mean(Q, s * Q.shape[1] + a, returns.flatten(), alpha)


# ============================================================================================
# The worlds as the models see them: key-to-door (common.KeyToDoor) step by step, and the
# RUDDER authors' pocket-watch shop
# ============================================================================================
def one_hot(x: torch.Tensor, n: int) -> torch.Tensor:
    return nn.functional.one_hot(x, n).float()


def encode(episode: dict, num_states: int, inputs: str) -> torch.Tensor:
    """The model's input at each step, (T, N, features), with the action one-hot at the end.

    "state": the state one-hot, so carrying the key is visible at every step after it.
    "difference": what changed, as RUDDER feeds it: where the agent is (position one-hot) and
    the change in has_key, which is non-zero only at the step the key is picked up.
    """
    actions = one_hot(episode["actions"], KeyToDoor.num_actions)
    states, next_states = episode["states"], episode["next_states"]
    if inputs == "state":
        return torch.cat([one_hot(states, num_states + 1), actions], dim=-1)
    has_key = states % 2  # state = 2 position + has_key; the terminal state changes nothing
    next_has_key = torch.where(next_states == num_states, has_key, next_states % 2)
    where = one_hot(states // 2, num_states // 2)
    return torch.cat([where, (next_has_key - has_key).float()[..., None], actions], dim=-1)


def encoded_size(num_states: int, inputs: str) -> int:
    """Features per step of `encode`."""
    return (num_states + 1 if inputs == "state" else num_states // 2 + 1) + KeyToDoor.num_actions


def key_threshold(env: KeyToDoor) -> float:
    """TRT's label, "the return beats this": halfway between the expected returns without the
    key (the distractors alone) and with it (one more)."""
    return 0.5 + env.distractor_prob * env.distractor * env.corridor


class PocketWatch:
    """A batch of independent pocket-watch shops, after the RUDDER authors' example.

    At t = 0 a watch of one of 4 brands comes in (uniformly) and the only decision is made:
    sell it as it is (action 0) or repair it (action 1: pay the repair cost now, and the spare
    parts' delivery cost at the end). For the next `steps - 1` steps nothing can be decided,
    and a traffic jam (-0.1, p = 0.1) or a flat tyre (-7, p = 0.05) may cost something at each
    step. At the last step the watch is sold: its brand's price if repaired, `unrepaired` if not.

    State (brand, repaired, t), indexed (2 brand + repaired) steps + t; the terminal state is
    `num_states`. With one decision, an episode is drawn whole: `reset()` gives each shop's
    first state (and the brands in info), `finish(repair)` all steps of the episode, time-major.
    """

    repair_mean, repair_var = (1.0, 4.0, 5.0, 24.5), (2.0, 2.0, 2.0, 1.0)
    price = (18.0, 28.0, 31.0, 59.0)
    delivery_mean, delivery_var = (0.5, 2.5, 4.5, 18.0), 1.5
    jam, jam_prob, tyre, tyre_prob = 0.1, 0.1, 7.0, 0.05
    num_brands, num_actions = 4, 2

    def __init__(self, num_envs: int, steps: int = 50, unrepaired: float = 19.0, seed: int = 0, device="cpu"):
        self.num_envs, self.steps, self.unrepaired = num_envs, steps, unrepaired
        self.num_states = 2 * self.num_brands * steps
        self.device = torch.device(device)
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.brand = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def table(self, values) -> torch.Tensor:
        return torch.tensor(values, device=self.device)

    def state(self, brand, repaired, t) -> torch.Tensor:
        return (2 * brand + repaired) * self.steps + t

    def noise(self) -> torch.Tensor:
        """One standard normal draw per shop."""
        return torch.randn(self.num_envs, generator=self.generator, device=self.device)

    def reset(self) -> tuple[torch.Tensor, dict]:
        self.brand = torch.randint(0, self.num_brands, (self.num_envs,), generator=self.generator, device=self.device)
        return self.state(self.brand, 0, 0), {"brand": self.brand}

    def finish(self, repair: torch.Tensor) -> dict:
        T, brand = self.steps, self.brand
        u = torch.rand(T, self.num_envs, generator=self.generator, device=self.device)
        rewards = -torch.where(u < self.tyre_prob, self.tyre, torch.where(u < self.tyre_prob + self.jam_prob, self.jam, 0.0))
        rewards[0] = -repair * (self.table(self.repair_mean)[brand] + self.table(self.repair_var)[brand].sqrt() * self.noise())
        delivery = self.table(self.delivery_mean)[brand] + self.delivery_var ** 0.5 * self.noise()
        rewards[-1] += torch.where(repair == 1, self.table(self.price)[brand] - delivery, self.unrepaired)
        t = torch.arange(T, device=self.device)[:, None]
        states = self.state(brand, repair * (t > 0), t)
        actions = torch.zeros_like(states)
        actions[0] = repair
        next_states = torch.cat([states[1:], torch.full_like(states[:1], self.num_states)])
        return {"states": states, "actions": actions, "rewards": rewards, "next_states": next_states, "brand": brand}

    def expected_returns(self) -> torch.Tensor:
        """E[G | brand, action], (4, 2): the sale minus what was paid, minus the costs on the way."""
        on_the_way = (self.steps - 1) * (self.jam_prob * self.jam + self.tyre_prob * self.tyre)
        repaired = self.table(self.price) - self.table(self.repair_mean) - self.table(self.delivery_mean)
        return torch.stack([torch.full_like(repaired, self.unrepaired), repaired], 1) - on_the_way

    def q_table(self, learners: int) -> torch.Tensor:
        """Zeros for `learners` flattened tables of num_states + 1 rows; the waiting states and the
        terminal state have one action (index 0), so the other is -inf and never the max."""
        Q = torch.zeros(self.num_states + 1, 2, device=self.device)
        waiting = torch.ones(self.num_states + 1, dtype=torch.bool, device=self.device)
        waiting[self.state(torch.arange(self.num_brands, device=self.device), 0, 0)] = False
        Q[waiting, 1] = -torch.inf
        return Q.repeat(learners, 1)


def watch_features(episode: dict, steps: int) -> torch.Tensor:
    """The predictor's input, (T, N, 8): brand one-hot, repaired, the decision (at t = 0 only),
    and the reward just received (/10), so that costs on the way can be explained as they come."""
    T, N = episode["rewards"].shape
    brand = one_hot(episode["brand"], PocketWatch.num_brands).expand(T, N, -1)
    repaired = ((episode["states"] // steps) % 2).float()[..., None]
    decision = one_hot(episode["actions"], 2) * (torch.arange(T, device=brand.device) == 0)[:, None, None]
    return torch.cat([brand, repaired, decision, episode["rewards"][..., None] / 10], dim=-1)


# ============================================================================================
# Training: the models are fit on stored episodes; the learners rewrite each new batch's
# rewards with them (RUDDER, TRT) and update their Q tables, on key-to-door and the pocket watch
# ============================================================================================
class Fitter:
    """A model, its Adam optimiser and its loss; `fit` takes steps on random batches of stored
    episodes: x time-major (T, N, features), one target per episode."""

    def __init__(self, model: nn.Module, loss, lr: float, batch: int, seed: int):
        self.model, self.loss, self.batch = model, loss, batch
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.generator = torch.Generator().manual_seed(seed)

    def fit(self, x: torch.Tensor, targets: torch.Tensor, steps: int, progress: bool = False) -> list[float]:
        losses = []
        for _ in tqdm(range(steps), desc=type(self.model).__name__, leave=False, disable=not progress):
            pick = torch.randint(0, len(targets), (min(self.batch, len(targets)),), generator=self.generator)
            pick = pick.to(targets.device)
            loss = self.loss(self.model(x[:, pick]), targets[pick])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        return losses


def return_predictor(args: Args, features: int, device, seed: int | None = None) -> Fitter:
    def loss(predictions: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
        return predictor_loss(predictions, returns, args.aux_weight)

    model = ReturnPredictor(features, args.hidden).to(device)
    return Fitter(model, loss, args.lr, args.batch, args.seed if seed is None else seed)


def transport_classifier(args: Args, features: int, device, seed: int | None = None) -> Fitter:
    model = AttentionClassifier(features, args.trt_width).to(device)
    return Fitter(model, classifier_loss, args.lr, args.batch, args.seed if seed is None else seed)


def train_predictor(args: Args, x: torch.Tensor, returns: torch.Tensor, device) -> tuple:
    """A return predictor fit for args.steps on stored episodes; the model and its losses."""
    fitter = return_predictor(args, x.shape[-1], device)
    losses = fitter.fit(x, returns, args.steps, progress=True)
    return fitter.model, losses


class LearnedReward:
    """Keeps the latest `buffer_batches` batches of (x, target) and refits a Fitter on them."""

    def __init__(self, args: Args, fitter: Fitter):
        self.args, self.fitter, self.buffer = args, fitter, []

    def remember_and_fit(self, x: torch.Tensor, targets: torch.Tensor) -> None:
        self.buffer = (self.buffer + [(x, targets)])[-self.args.buffer_batches:]
        xs, ys = zip(*self.buffer)
        self.fitter.fit(torch.cat(xs, dim=1), torch.cat(ys), self.args.refit_steps)


class Redistribution(LearnedReward):
    """RUDDER: r̃ from the return predictor, return-equivalent."""

    def __call__(self, episode: dict, num_states: int) -> torch.Tensor:
        x, returns = encode(episode, num_states, self.args.inputs), episode["rewards"].sum(0)
        self.remember_and_fit(x, returns)
        with torch.no_grad():
            return redistribute(self.fitter.model(x), returns)


class Transport(LearnedReward):
    """TRT: the classifier learns "return > threshold"; its focus steps get the distant rewards."""

    def __init__(self, args: Args, fitter: Fitter, threshold: float, horizon: int):
        super().__init__(args, fitter)
        self.threshold, self.horizon = threshold, horizon

    def __call__(self, episode: dict, num_states: int) -> torch.Tensor:
        x, returns = encode(episode, num_states, "difference"), episode["rewards"].sum(0)
        self.remember_and_fit(x, (returns > self.threshold).float())
        with torch.no_grad():
            weights = importance(self.fitter.model(x)[1])
        return transport(episode["rewards"], weights, self.horizon, self.args.trt_focus, self.args.trt_scale)


def make_shaper(args: Args, method: str, env: KeyToDoor, gamma: float, seed: int,
                device) -> LearnedReward | None:
    """RUDDER's or TRT's reward rewriter for a key-to-door learner; None for the others."""
    if method == "RUDDER":
        features = encoded_size(env.num_states, args.inputs)
        return Redistribution(args, return_predictor(args, features, device, seed))
    if method == "TRT":
        features = encoded_size(env.num_states, "difference")
        return Transport(args, transport_classifier(args, features, device, seed), key_threshold(env),
                         horizon=discount_horizon(gamma))
    return None


def solve(args: Args, method: str, corridor: int, seed: int, device, gamma: float = 1.0,
          distractor_prob: float | None = None, epsilon: float | None = None) -> int:
    """Episodes until the greedy policy takes the key for good: from then on it prefers the key
    at every update for the next `args.stable` updates (args.max_episodes if it never does)."""
    torch.manual_seed(seed)
    distractor_prob = args.distractor_prob if distractor_prob is None else distractor_prob
    epsilon = args.epsilon if epsilon is None else epsilon
    env = KeyToDoor(args.learn_batch, corridor=corridor, distractor_prob=distractor_prob, seed=seed, device=device)
    Q = torch.zeros(env.num_states + 1, 2, device=device)
    shaper = make_shaper(args, method, env, gamma, seed, device)
    streak = 0  # updates in a row after which the greedy policy takes the key
    for episodes in range(args.learn_batch, args.max_episodes + 1, args.learn_batch):
        episode = play_episodes(env, epsilon_greedy(Q, epsilon))
        if method == "Monte Carlo":
            mc_update(Q, episode, args.alpha)
        else:
            rewards = shaper(episode, env.num_states) if shaper else episode["rewards"]
            q_learning_update(Q, episode, rewards, args.alpha, gamma)
        streak = streak + 1 if Q[0, 1] > Q[0, 0] else 0
        if streak == args.stable:
            return episodes - (streak - 1) * args.learn_batch  # the episodes when the streak began
    return args.max_episodes


def sweep(args: Args, methods: tuple, lengths: list[int], device, desc: str, **kwargs) -> dict:
    """Episodes to solve per method and corridor length, over args.sweep_seeds seeds."""
    results = {m: {} for m in methods}
    for method, L in tqdm([(m, L) for m in methods for L in lengths], desc=desc, leave=False):
        results[method][L] = [solve(args, method, L, args.seed + i, device, **kwargs) for i in range(args.sweep_seeds)]
    return results


class WatchRedistribution:
    """RUDDER for the watch learners: one return predictor per learner, each refit every
    `watch_refit_every` episodes on its latest `watch_buffer` episodes."""

    def __init__(self, args: Args, learners: int, device):
        self.args, self.count = args, 0
        self.fitters = [return_predictor(args, 8, device, seed=args.seed + i) for i in range(learners)]
        self.x = torch.zeros(args.watch_steps, args.watch_buffer, learners, 8, device=device)
        self.returns = torch.zeros(args.watch_buffer, learners, device=device)

    def __call__(self, episode: dict) -> torch.Tensor:
        x, returns = watch_features(episode, self.args.watch_steps), episode["rewards"].sum(0)
        slot = self.count % self.args.watch_buffer
        self.x[:, slot], self.returns[slot] = x, returns
        self.count += 1
        if self.count % self.args.watch_refit_every == 0:
            stored = min(self.count, self.args.watch_buffer)
            for i, fitter in enumerate(self.fitters):
                fitter.fit(self.x[:, :stored, i], self.returns[:stored, i], self.args.watch_refit_steps)
        with torch.no_grad():
            predictions = torch.cat([f.model(x[:, i:i + 1]) for i, f in enumerate(self.fitters)], dim=1)
        return redistribute(predictions, returns)


def watch_learn(args: Args, method: str, alphas: list[float], device) -> dict:
    """len(alphas) x watch_seeds independent learners, one episode each per iteration, until
    each one's greedy decision was optimal in ≥ watch_target of its last watch_window episodes
    (checked every 50 episodes). Returns episodes to solve (alphas, seeds), the budget when
    never, the curves and the wall-clock seconds per iteration. The learners share one Q table,
    each in its own block of rows."""
    seeds = args.watch_seeds
    learners = len(alphas) * seeds
    env = PocketWatch(learners, args.watch_steps, args.unrepaired, seed=args.seed, device=device)
    Q = env.q_table(learners)
    rows = env.num_states + 1
    alpha = torch.tensor(alphas, device=device).repeat_interleave(seeds * rows * 2)  # one per Q entry
    offset = torch.arange(learners, device=device) * rows  # each learner's first row
    optimal = env.expected_returns().argmax(1)
    shaper = WatchRedistribution(args, learners, device) if method == "RUDDER" else None
    budget = args.watch_max_episodes if method != "RUDDER" else args.watch_rudder_max_episodes
    correct = torch.zeros(budget, learners, device=device)
    solved = torch.full((learners,), budget, device=device)
    start = time.time()
    for i in tqdm(range(budget), desc=f"pocket watch, {method}", leave=False, mininterval=1):
        first, info = env.reset()
        greedy = Q[first + offset].argmax(1)
        explore = torch.rand(learners, generator=env.generator, device=device) < args.watch_epsilon
        coin = torch.randint(0, 2, (learners,), generator=env.generator, device=device)
        episode = env.finish(torch.where(explore, coin, greedy))
        correct[i] = (greedy == optimal[info["brand"]]).float()
        in_shared_table = dict(episode, states=episode["states"] + offset,
                               next_states=episode["next_states"] + offset)
        if method == "Monte Carlo":
            mc_update(Q, in_shared_table, alpha)
        else:
            q_learning_update(Q, in_shared_table, shaper(episode) if shaper else episode["rewards"], alpha)
        if i + 1 >= args.watch_window and (i + 1) % 50 == 0:
            rate = correct[i + 1 - args.watch_window:i + 1].mean(0)
            solved = torch.where((rate >= args.watch_target) & (solved == budget), i + 1, solved)
            if (solved < budget).all():
                break
    return {"episodes": solved.view(len(alphas), seeds).cpu().numpy(), "budget": budget,
            "correct": correct[: i + 1].view(i + 1, len(alphas), seeds).cpu().numpy(),
            "seconds_per_episode": (time.time() - start) / (i + 1)}  # one episode of every learner


# ============================================================================================
# Config
# ============================================================================================
@dataclass
class Args(RunArgs):
    out: str = arg("runs/03_rudder", "output folder for figures and results.json")
    # the return predictor, shown on stored episodes of a uniform random policy on key-to-door
    corridor: int = arg(30, "key-to-door corridor length (the delay)")
    distractor_prob: float = arg(0.0, "probability of a distractor reward per corridor step")
    episodes: int = arg(2048, "stored episodes (uniform random policy) to train the predictor on")
    hidden: int = arg(32, "LSTM hidden units")
    steps: int = arg(1500, "predictor training steps")
    batch: int = arg(128, "episodes per predictor (or classifier) step")
    lr: float = arg(3e-3, "Adam learning rate of the predictor and the classifier")
    aux_weight: float = arg(0.5, "weight of the auxiliary loss (predict the return at every step)")
    inputs: str = arg("difference", "predictor input besides the action: the change of state "
                      "(RUDDER's choice) or the state itself", choices=("difference", "state"))
    # task 1: the pocket watch
    watch_seeds: int = arg(5, "pocket watch: seeds per method (and per step size)")
    watch_steps: int = arg(50, "pocket watch: steps per episode (the delay of the sale)")
    unrepaired: float = arg(19.0, "pocket watch: price of an unrepaired watch (our choice; any value "
                            "in (16.5, 21.5) makes [sell, repair, repair, sell] optimal)")
    watch_alphas: str = arg("0.03,0.1,0.3,0.5", "pocket watch: step sizes tried for every method (its best is reported)",
                            item=float)
    watch_epsilon: float = arg(0.1, "pocket watch: exploration rate of the decision (ε-greedy)")
    watch_window: int = arg(750, "pocket watch: solved when the greedy decision was optimal in ...")
    watch_target: float = arg(0.95, "... this share of the last watch-window episodes")
    watch_max_episodes: int = arg(50_000, "pocket watch: budget of Q-learning and MC")
    watch_rudder_max_episodes: int = arg(6_000, "pocket watch: budget of RUDDER (its model makes an episode dearer)")
    watch_buffer: int = arg(1000, "pocket watch, RUDDER: latest episodes the predictor trains on")
    watch_refit_every: int = arg(25, "pocket watch, RUDDER: episodes between predictor refits")
    watch_refit_steps: int = arg(5, "pocket watch, RUDDER: predictor steps per refit")
    # task 2: key-to-door, delay sweep (γ = 1) and transport study (γ < 1, distractors)
    sweep: str = arg("5,10,20,40,80", "corridor lengths of the delay sweep", item=int)
    sweep_seeds: int = arg(3, "seeds per (method, corridor) in the sweeps")
    learn_batch: int = arg(16, "episodes per learner update")
    max_episodes: int = arg(10_000, "learner budget; unsolved runs count as this")
    alpha: float = arg(0.5, "tabular step size of the learners")
    epsilon: float = arg(0.2, "exploration rate of the learners (ε-greedy)")
    stable: int = arg(30, "solved once the greedy policy has taken the key for this many updates in a row")
    refit_steps: int = arg(10, "RUDDER, TRT: model steps per learner update")
    buffer_batches: int = arg(32, "RUDDER, TRT: stored batches of episodes the model trains on")
    trt_sweep: str = arg("5,10,20,40", "corridor lengths of the transport study", item=int)
    trt_gamma: float = arg(0.9, "discount of the transport study (τ_γ = 1 / (1 - γ) steps)")
    trt_distractor_prob: float = arg(0.5, "distractor probability per corridor step in the transport study")
    trt_epsilon: float = arg(1.0, "exploration in the transport study (1: uniform, both branches seen alike)")
    trt_width: int = arg(16, "TRT classifier width")
    trt_focus: float = arg(3.0, "TRT: a step is important when it receives this many times the uniform attention")
    trt_scale: float = arg(1.0, "TRT: share of the distant rewards added at an important step")

    SMOKE = dict(corridor=5, episodes=64, steps=5, batch=16, sweep="3", trt_sweep="4", sweep_seeds=1,
                 max_episodes=32, learn_batch=8, refit_steps=2, watch_seeds=1, watch_steps=6,
                 watch_alphas="0.3", watch_window=20, watch_max_episodes=60, watch_rudder_max_episodes=60,
                 watch_refit_every=20, watch_refit_steps=2)

    def __post_init__(self):
        require_positive(self, "corridor", "episodes", "hidden", "steps", "batch", "lr", "sweep_seeds",
                         "learn_batch", "max_episodes", "alpha", "refit_steps", "buffer_batches", "stable",
                         "trt_width", "watch_seeds", "watch_steps", "watch_window",
                         "watch_max_episodes", "watch_rudder_max_episodes", "watch_buffer",
                         "watch_refit_every", "watch_refit_steps")
        for name in ("epsilon", "distractor_prob", "trt_distractor_prob", "trt_epsilon", "watch_epsilon", "watch_target"):
            require(0 <= getattr(self, name) <= 1, f"--{name.replace('_', '-')} must be in [0, 1]")
        require(0 < self.trt_gamma < 1, "--trt-gamma must be in (0, 1)")
        require(self.aux_weight >= 0, "--aux-weight must be non-negative")
        require(self.watch_steps >= 2, "--watch-steps must be at least 2")
        require(all(a > 0 for a in self.watch_alpha_list), "--watch-alphas must be positive")
        require(all(L > 0 for L in self.sweep_list), "--sweep: corridor lengths must be positive")
        require(all(L > 0 for L in self.trt_sweep_list), "--trt-sweep: corridor lengths must be positive")

    @property
    def sweep_list(self) -> list[int]:
        return as_list(self.sweep, int)

    @property
    def trt_sweep_list(self) -> list[int]:
        return as_list(self.trt_sweep, int)

    @property
    def watch_alpha_list(self) -> list[float]:
        return as_list(self.watch_alphas, float)


# ============================================================================================
# Studies, each returning a dict
# ============================================================================================
WATCH_METHODS = ("Q-learning (TD)", "Monte Carlo", "RUDDER")
SWEEP_METHODS = ("Q-learning (TD)", "Monte Carlo", "RUDDER")
TRANSPORT_METHODS = ("Q-learning (TD)", "TRT", "RUDDER")
AUTHORS = {"RUDDER": "about 1,900 to 3,800", "Q-learning (TD)": "about 71,800",
           "Monte Carlo": "27,700 to over 240,000"}  # the RUDDER authors' pocket-watch numbers


def uniform_episodes(args: Args, distractor_prob: float, device) -> tuple[KeyToDoor, dict]:
    """args.episodes key-to-door episodes of the uniform random policy."""
    env = KeyToDoor(args.episodes, corridor=args.corridor, distractor_prob=distractor_prob,
                    seed=args.seed, device=device)
    return env, play_episodes(env, torch.full((env.num_states + 1, KeyToDoor.num_actions), 0.5, device=device))


def predictor_study(args: Args, device) -> dict:
    """Train the return predictor on stored random episodes; where does r̃ put the credit?"""
    env, episode = uniform_episodes(args, args.distractor_prob, device)
    returns = episode["rewards"].sum(0)
    x = encode(episode, env.num_states, args.inputs)
    predictor, losses = train_predictor(args, x, returns, device)
    with torch.no_grad():
        predictions = predictor(x)
    redistributed = redistribute(predictions, returns)
    return {"predictor_final_mse": float(((predictions[-1] - returns) ** 2).mean()),
            "credit_share_at_key": float(credit_share(redistributed)[0]),
            "max_abs_sum_minus_return": float((redistributed.sum(0) - returns).abs().max()),
            **redistribution_properties(env, episode, redistributed),
            "losses": losses, "episode": episode, "redistributed": redistributed}


def redistribution_properties(env: KeyToDoor, episode: dict, redistributed: torch.Tensor) -> dict:
    """What the survey says an optimal redistribution does, measured on the stored episodes, for
    the redistributed reward r̃ and the original r alike:
      expected future reward, max over (s, a) of |E[Σ_{k>t} r_k | s_t = s, a_t = a]| (0: none left);
      the Monte Carlo return-to-go's variance given (s_t, a_t), at the key step and over all steps;
      the optimal policy at the key room and its value by dynamic programming on the mean r̃ of
      each (s, a) (the redistributed MDP) and on the true model."""
    pairs, num_pairs = pair_index(episode), KeyToDoor.num_actions * (env.num_states + 1)
    out = {}
    for name, rewards in (("redistributed", redistributed), ("original", episode["rewards"])):
        means, counts = pair_means(future_rewards(rewards), pairs, num_pairs)
        out[f"expected_future_max[{name}]"] = float(means[counts > 0].abs().max())
        to_go = rewards.flip(0).cumsum(0).flip(0)  # Σ_{k≥t} r_k, the Monte Carlo target
        out[f"mc_variance_at_key[{name}]"] = conditional_variance(to_go[:1], pairs[:1], num_pairs)
        out[f"mc_variance_all_steps[{name}]"] = conditional_variance(to_go, pairs, num_pairs)
    P, R = env.model()
    mean_redistributed, _ = pair_means(redistributed.double().cpu(), pairs.cpu(), num_pairs)
    for name, table in (("redistributed", mean_redistributed.view(-1, KeyToDoor.num_actions)), ("original", R)):
        Q = optimal_q(P, table)
        out[f"optimal_key_action[{name}]"] = int(Q[0].argmax())
        out[f"optimal_start_value[{name}]"] = float(Q[0].max())
    return out


def shaping_study(args: Args, seed: int) -> dict:
    """Potential-based shaping by exact dynamic programming on key-to-door (γ = 1): with a random
    Φ, does Q* keep its argmax, and is Q*' = Q* - Φ(s) (Ng et al. 1999)? With Φ = V^π (π uniform),
    what future reward does the shaped MDP still expect after each (s, a)?"""
    env = KeyToDoor(1, corridor=args.corridor, distractor_prob=args.distractor_prob)
    P, R = env.model()
    potential = torch.randn(len(P), generator=torch.Generator().manual_seed(seed), dtype=R.dtype)
    potential[-1] = 0.0  # the terminal state's
    Q, shaped = optimal_q(P, R), optimal_q(P, potential_shaping(P, R, potential))
    decisive = (Q.max(1).values - Q.min(1).values) > 1e-9  # where the choice matters at all
    uniform = torch.full_like(R, 0.5)
    V, _ = evaluate_policy(P, R, uniform, 1.0)
    by_value = potential_shaping(P, R, V)
    _, Q_by_value = evaluate_policy(P, by_value, uniform, 1.0)
    return {"decisive_states": int(decisive.sum()),
            "argmax_kept": bool((Q.argmax(1) == shaped.argmax(1))[decisive].all()),
            "identity_gap": float((shaped - (Q - potential[:, None])).abs().max()),
            "value_potential_future_max": float((Q_by_value - by_value)[:-1].abs().max())}


def watch_study(args: Args, device) -> dict:
    """Each method on the pocket watch over every step size."""
    return {m: watch_learn(args, m, args.watch_alpha_list, device) for m in WATCH_METHODS}


def delay_study(args: Args, device) -> dict:
    """Key-to-door with γ = 1 and no distractors: episodes to solve as the corridor grows."""
    return sweep(args, SWEEP_METHODS, args.sweep_list, device, "delay sweep")


def transport_demo(args: Args, device) -> dict:
    """Train TRT's classifier on stored random episodes with distractors; what does it mark?"""
    env, episode = uniform_episodes(args, args.trt_distractor_prob, device)
    x = encode(episode, env.num_states, "difference")
    fitter = transport_classifier(args, x.shape[-1], device)
    fitter.fit(x, (episode["rewards"].sum(0) > key_threshold(env)).float(), args.steps // 3, progress=True)
    with torch.no_grad():
        weights = importance(fitter.model(x)[1])
    horizon = discount_horizon(args.trt_gamma)
    transported = transport(episode["rewards"], weights, horizon, args.trt_focus, args.trt_scale)
    changed = (transported != episode["rewards"]).float()
    return {"episode": episode, "weights": weights, "transported": transported, "horizon": horizon,
            "share_of_steps_changed": float(changed.mean()), "share_changed_at_key": float(changed[0].mean())}


def transport_study(args: Args, device) -> dict:
    """Key-to-door with γ < 1 and distractors: TD, TRT and RUDDER below and beyond τ_γ."""
    return sweep(args, TRANSPORT_METHODS, args.trt_sweep_list, device, "transport study",
                 gamma=args.trt_gamma, distractor_prob=args.trt_distractor_prob, epsilon=args.trt_epsilon)


# ============================================================================================
# Figures
# ============================================================================================
def best_alpha(result: dict) -> int:
    """Index of the step size with the lowest median episodes to solve."""
    return int(np.argmin(np.median(result["episodes"], axis=1)))


def plot_redistribution(study: dict, path) -> None:
    episode, redistributed = study["episode"], study["redistributed"]
    took = episode["actions"][0] == 1
    picks = {"took the key": int(torch.nonzero(took)[0]), "left the key": int(torch.nonzero(~took)[0])}
    fig, axes = plt.subplots(2, 2, figsize=(11, 5.5), sharex=True)
    steps = np.arange(len(redistributed))
    for col, (title, n) in enumerate(picks.items()):
        axes[0, col].bar(steps, episode["rewards"][:, n].cpu().numpy(), color="tab:gray")
        axes[0, col].set(title=f"{title}: original reward", ylabel="r_t")
        axes[1, col].bar(steps, redistributed[:, n].cpu().numpy(), color="tab:red")
        axes[1, col].set(title="redistributed reward r̃_t", xlabel="step (0: key room)", ylabel="r̃_t")
    save_figure(fig, path)


def plot_watch(args: Args, study: dict, path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for method, result in study.items():
        i = best_alpha(result)
        rates = np.array([moving_average(c, args.watch_window) for c in result["correct"][:, i].T])
        plot_curves(left, np.arange(1, rates.shape[1] + 1), {f"{method}, α={args.watch_alpha_list[i]}": rates})
        right.plot(args.watch_alpha_list, np.median(result["episodes"], axis=1), "o-", label=method)
    left.axhline(args.watch_target, color="k", ls=":", lw=1)
    left.set(xscale="log", xlabel="episodes", ylabel=f"optimal decisions (last {args.watch_window})",
             title="Pocket watch: learning the repair decision")
    right.set(xscale="log", yscale="log", xlabel="step size α", ylabel="median episodes to solve",
              title=f"budget: {args.watch_max_episodes:,} (RUDDER {args.watch_rudder_max_episodes:,})")
    right.set_xticks(args.watch_alpha_list, [str(a) for a in args.watch_alpha_list], minor=False)
    right.minorticks_off()
    right.legend(fontsize="small")
    right.grid(alpha=0.3)
    save_figure(fig, path)


def plot_sweeps(args: Args, delay: dict, transport_sweep: dict, demo: dict, path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, results, lengths, title in ((axes[0], delay, args.sweep_list, "γ = 1, no distractors"),
                                        (axes[1], transport_sweep, args.trt_sweep_list,
                                         f"γ = {args.trt_gamma}, distractors p = {args.trt_distractor_prob}")):
        curves = {m: np.array([by_L[L] for L in lengths]).T for m, by_L in results.items()}
        plot_curves(ax, np.array(lengths), curves)
        ax.set(xlabel="corridor length L (delay)", ylabel="episodes to solve", yscale="log", title=title)
    axes[1].axvline(demo["horizon"], color="k", ls=":", lw=1, label="τ_γ")
    took = int(torch.nonzero(demo["episode"]["actions"][0] == 1)[0])
    steps = np.arange(len(demo["weights"]))
    axes[2].bar(steps - 0.2, demo["episode"]["rewards"][:, took].cpu().numpy(), width=0.4, label="reward r_t")
    axes[2].bar(steps + 0.2, demo["transported"][:, took].cpu().numpy(), width=0.4, label="after transport")
    axes[2].plot(steps, demo["weights"][:, took].cpu().numpy() / demo["weights"].shape[0], "k.-",
                 label="attention received (share)")
    axes[2].set(xlabel="step (0: key room)", title="TRT on one episode that took the key")
    axes[2].legend(fontsize="small")
    save_figure(fig, path)


# ============================================================================================
# Claims
# ============================================================================================
def growth_law(lengths: list[int], values: list[float]) -> dict:
    """Fit log(value) against L (exponential growth) and against log L (power law); the
    residual sums of squares say which describes the measurements better."""
    y, L = np.log(values), np.asarray(lengths, dtype=float)
    fits = {}
    for name, x in (("exponential", L), ("power", np.log(L))):
        coefficients, residual, *_ = np.polyfit(x, y, 1, full=True)
        fits[name] = float(coefficients[0])
        fits[f"{name}_residual"] = float(residual[0]) if len(residual) else 0.0
    return fits


def growth_verdict(growth: dict) -> bool | None:
    """Exponential (True) or power law (False) only when one fit's residual is under half the
    other's; None when the measurements cannot tell them apart."""
    exponential, power = growth["exponential_residual"], growth["power_residual"]
    if exponential < power / 2:
        return True
    return False if power < exponential / 2 else None


def fewer_episodes(episodes: float, budget: int, other: float, other_budget: int) -> bool | None:
    """Did a learner solve in fewer episodes than another? A median at a learner's budget means
    unsolved: it decides only against one that solved within that budget (False), or one that
    never solved either (None); and a learner that solved beats one that never did (True)."""
    solved, other_solved = episodes < budget, other < other_budget
    if not solved:
        return False if other_solved and other <= budget else None
    if not other_solved:
        return True if episodes <= other_budget else None
    return episodes < other


def watch_claims(args: Args, study: dict) -> tuple[dict, list[dict]]:
    metrics, medians = {}, {}
    for method, result in study.items():
        i = best_alpha(result)
        medians[method] = float(np.median(result["episodes"][i]))
        metrics[f"watch_episodes_to_solve[{method}]"] = medians[method]
        metrics[f"watch_best_alpha[{method}]"] = args.watch_alpha_list[i]
        for alpha, row in zip(args.watch_alpha_list, result["episodes"]):
            metrics[f"watch_episodes_to_solve[{method}, α={alpha}]"] = float(np.median(row))
    ratio = medians["Q-learning (TD)"] / medians["RUDDER"]
    same_alpha = {a: metrics[f"watch_episodes_to_solve[Q-learning (TD), α={a}]"]
                  / metrics[f"watch_episodes_to_solve[RUDDER, α={a}]"] for a in args.watch_alpha_list}
    metrics["watch_ratio_Q_over_RUDDER"] = ratio

    def spread(method: str) -> str:
        result = study[method]
        row = result["episodes"][best_alpha(result)]
        unsolved = int((row >= result["budget"]).sum())
        text = (f"median {np.median(row):,.0f} (range {row.min():,.0f}-{row.max():,.0f}) "
                f"at α={metrics[f'watch_best_alpha[{method}]']}")
        return text + (f", {unsolved} of {len(row)} seeds unsolved in {result['budget']:,}" if unsolved else "")

    claims = [claim("RUDDER authors, pocket watch", f"{m} needs {AUTHORS[m]} episodes", "ours: " + spread(m), None)
              for m in WATCH_METHODS]
    claims.append(claim("RUDDER authors, pocket watch (ratio 19-38x)",
                        "RUDDER needs at least 10x fewer episodes than Q-learning on the pocket watch",
                        f"{ratio:.1f}x, each at its best step size; at equal step sizes "
                        + ", ".join(f"α={a}: {r:.1f}x" for a, r in same_alpha.items())
                        + f"; no learner can finish under the {args.watch_window}-episode window",
                        ratio >= 10))
    versus_mc = ", ".join(f"α={a}: {metrics[f'watch_episodes_to_solve[RUDDER, α={a}]']:,.0f} vs "
                          f"{metrics[f'watch_episodes_to_solve[Monte Carlo, α={a}]']:,.0f}" for a in args.watch_alpha_list)
    claims.append(claim("RUDDER authors, pocket watch", "RUDDER needs fewer episodes than Monte Carlo",
                        f"RUDDER {medians['RUDDER']:,.0f} vs MC {medians['Monte Carlo']:,.0f}, each at its best step "
                        f"size; at equal step sizes {versus_mc}",
                        fewer_episodes(medians["RUDDER"], study["RUDDER"]["budget"],
                                       medians["Monte Carlo"], study["Monte Carlo"]["budget"])))
    seconds = {m: study[m]["seconds_per_episode"] for m in WATCH_METHODS}
    metrics.update({f"watch_seconds_per_episode[{m}]": t for m, t in seconds.items()})
    claims.append(claim("survey §5", "the LSTM return predictor adds computational overhead",
                        f"pocket watch, wall clock per episode (all {len(args.watch_alpha_list) * args.watch_seeds} "
                        "learners at once): " + ", ".join(f"{m} {1000 * t:.2g} ms" for m, t in seconds.items())
                        + f"; RUDDER / Q-learning {seconds['RUDDER'] / seconds['Q-learning (TD)']:.0f}x",
                        seconds["RUDDER"] > seconds["Q-learning (TD)"]))
    return metrics, claims


def speedup_verdict(lengths: list[int], ratios: list[float]) -> bool | None:
    """Is one method exponentially faster than another as the delay grows? Not if it is never
    faster or its lead does not grow; otherwise growth_verdict on its lead (None with < 3 lengths)."""
    if all(r <= 1 for r in ratios) or ratios[-1] <= ratios[0]:
        return False
    return growth_verdict(growth_law(lengths, ratios)) if len(ratios) >= 3 else None


def range_text(values: list[float]) -> str:
    """"16 at every L", or "32 to 128"."""
    low, high = min(values), max(values)
    return f"{low:,.0f} at every L" if low == high else f"{low:,.0f} to {high:,.0f}"


def delay_claims(args: Args, sweep_results: dict, study: dict) -> tuple[dict, list[dict]]:
    medians = {m: [float(np.median(sweep_results[m][L])) for L in args.sweep_list] for m in SWEEP_METHODS}
    metrics = {f"L{L}_episodes_to_solve[{m}]": medians[m][i]
               for m in SWEEP_METHODS for i, L in enumerate(args.sweep_list)}
    lengths = args.sweep_list
    td, mc, ru = medians["Q-learning (TD)"], medians["Monte Carlo"], medians["RUDDER"]
    growth = growth_law(lengths, td)  # the paper: TD's time grows exponentially with the delay
    share, gap = study["credit_share_at_key"], study["max_abs_sum_minus_return"]

    def lead(over: list[float]) -> tuple[list[float], str]:
        ratios = [a / b for a, b in zip(over, ru)]
        return ratios, ", ".join(f"{L}: {r:.1f}x" for L, r in zip(lengths, ratios))

    td_lead, td_text = lead(td)
    mc_lead, mc_text = lead(mc)
    claims = [claim("survey §5 (RUDDER paper's theorem)", "TD needs time exponential in the delay to remove its bias",
                    f"TD's episodes to solve at L = {', '.join(map(str, lengths))}: {', '.join(f'{v:,.0f}' for v in td)}; "
                    f"a power law L^{growth['power']:.2f} fits with residual {growth['power_residual']:.3f}, an "
                    f"exponential with {growth['exponential_residual']:.3f}",
                    growth_verdict(growth) if len(td) >= 3 else None),
              claim("survey §5 (RUDDER paper)", "RUDDER is exponentially faster than TD on delayed rewards",
                    f"TD / RUDDER episodes to solve at L = {td_text}; RUDDER needs {range_text(ru)}",
                    speedup_verdict(lengths, td_lead)),
              claim("survey §5 (RUDDER paper)", "RUDDER is exponentially faster than Monte Carlo on delayed rewards",
                    f"MC / RUDDER episodes to solve at L = {mc_text}; MC needs {range_text(mc)}, RUDDER {range_text(ru)}",
                    speedup_verdict(lengths, mc_lead)),
              claim("survey §5 (RUDDER paper)", "RUDDER is exponentially faster than Monte Carlo tree search",
                    "not checked: no tree search here", None),
              claim("survey §5", "the return predictor's jump, and so the redistributed reward, sits "
                    "at the decisive step and is near zero elsewhere",
                    f"{share:.1%} of the variance of r̃ across episodes sits on the key step, "
                    f"of {args.corridor + 2} steps", share > 0.5),
              claim("survey §5", "the redistributed rewards sum to the original return",
                    f"largest |Σ r̃ - G| over {args.episodes} episodes: {gap:.1e}", gap < 1e-4)]
    return metrics, claims


def redistribution_claims(study: dict, shaping: dict) -> tuple[dict, list[dict]]:
    """The survey's promises for an optimal redistribution, on the predictor's stored episodes,
    and potential-based shaping by exact dynamic programming."""
    keys = [k for k in study if k.startswith(("expected_future_max", "mc_variance", "optimal_"))]
    metrics = {k: study[k] for k in keys}
    metrics.update({f"shaping_{k}": v for k, v in shaping.items()})
    future, future_r = study["expected_future_max[redistributed]"], study["expected_future_max[original]"]
    at_key, at_key_r = study["mc_variance_at_key[redistributed]"], study["mc_variance_at_key[original]"]
    steps, steps_r = study["mc_variance_all_steps[redistributed]"], study["mc_variance_all_steps[original]"]
    action, action_r = study["optimal_key_action[redistributed]"], study["optimal_key_action[original]"]
    value, value_r = study["optimal_start_value[redistributed]"], study["optimal_start_value[original]"]
    variance = (f"Var(Σ_{{k≥t}} r_k | s_t, a_t), r̃ vs r: key step {at_key:.2g} vs {at_key_r:.2g} (equal by "
                f"construction: Σ r̃ = G), all steps {steps:.2g} vs {steps_r:.2g}")
    claims = [
        claim("survey §4.1.2, §5", "an optimal redistribution makes the expected future reward zero everywhere",
              f"largest |E[Σ_{{k>t}} r̃_k | s_t, a_t]| over the visited (s, a): {future:.2g} (original reward: "
              f"{future_r:.2g})", future < 0.05 * future_r),
        claim("survey §4.1.2, §5", "in the redistributed MDP, TD is unbiased",
              f"a one-step target r̃_t + Q(s_{{t+1}}) with Q not yet learned (0) is off from Q by the expected "
              f"future reward: at most {future:.2g} with r̃, {future_r:.2g} with r", future < 0.05 * future_r),
        claim("survey §4.1.2, §5", "in the redistributed MDP, Monte Carlo's variance is minimal",
              variance + ("; not testable here: the stored world is deterministic given (s_t, a_t), so r's "
                          "variance is already 0 (try --distractor-prob 0.5)" if steps_r < 1e-9 else ""),
              None if steps_r < 1e-9 else steps < steps_r),
        claim("survey §4.1.2", "the redistributed MDP has the same optimal policy",
              f"dynamic programming on the mean r̃ of each (s, a) vs the true model: optimal action in the key "
              f"room {action} vs {action_r} (1: take the key), optimal value {value:.3f} vs {value_r:.3f}",
              action == action_r and abs(value - value_r) < 0.05),
        claim("survey §4.1.2 (Ng et al. 1999)", "potential-based shaping Φ(s') - Φ(s) preserves the optimal policy",
              f"exact dynamic programming, key-to-door, a random Φ: argmax Q* kept in all "
              f"{shaping['decisive_states']} states where the choice matters: {'yes' if shaping['argmax_kept'] else 'no'}; "
              f"largest |Q*' - (Q* - Φ(s))| {shaping['identity_gap']:.1e}",
              shaping["argmax_kept"] and shaping["identity_gap"] < 1e-9),
        claim("survey §4.1.2", "zero expected future reward is a stronger property than potential-based "
              "shaping provides",
              f"shaping with Φ = V^π (π uniform) leaves a largest |E[Σ_{{k>t}} r'_k | s_t, a_t]| of "
              f"{shaping['value_potential_future_max']:.1e}: where the state is Markov (key-to-door's holds "
              "the key), a potential gives the same property", shaping["value_potential_future_max"] > 0.05),
    ]
    return metrics, claims


def transport_claims(args: Args, results: dict, demo: dict) -> tuple[dict, list[dict]]:
    horizon = demo["horizon"]
    medians = {m: [float(np.median(results[m][L])) for L in args.trt_sweep_list] for m in TRANSPORT_METHODS}
    metrics = {f"trt_L{L}_episodes_to_solve[{m}]": medians[m][i]
               for m in TRANSPORT_METHODS for i, L in enumerate(args.trt_sweep_list)}
    gains = [td / trt for td, trt in zip(medians["Q-learning (TD)"], medians["TRT"])]
    short = [g for g, L in zip(gains, args.trt_sweep_list) if L + 1 < horizon]
    long = [g for g, L in zip(gains, args.trt_sweep_list) if L + 1 >= horizon]
    metrics.update(trt_share_of_steps_changed=demo["share_of_steps_changed"],
                   trt_share_changed_at_key=demo["share_changed_at_key"])
    claims = [claim("survey §6", f"TRT's gain over the plain learner is largest when the delay exceeds τ_γ = {horizon}",
                    "TD / TRT episodes to solve at L = "
                    + ", ".join(f"{L}: {g:.1f}x" for L, g in zip(args.trt_sweep_list, gains)),
                    (max(long) > max(short)) if short and long else None),
              claim("survey §4.1.4", "transport augments a few critical steps and leaves the rest unchanged",
                    f"{demo['share_of_steps_changed']:.1%} of all steps changed; "
                    f"{demo['share_changed_at_key']:.1%} of key-room steps",
                    demo["share_of_steps_changed"] < 0.2)]
    trt_wins = sum(a < b for a, b in zip(medians["TRT"], medians["RUDDER"]))
    claims.append(claim("survey §4.1.5", "transport methods (TVT, TRT) are more successful than RUDDER",
                        "episodes to solve, TRT vs RUDDER, at L = " + ", ".join(
                            f"{L}: {a:,.0f} vs {b:,.0f}" for L, a, b in zip(args.trt_sweep_list, medians["TRT"],
                                                                            medians["RUDDER"]))
                        + f"; TRT needs fewer at {trt_wins} of {len(args.trt_sweep_list)}",
                        trt_wins > len(args.trt_sweep_list) / 2))
    return metrics, claims


def distractor_claim(args: Args, delay: dict, transport_sweep: dict) -> dict:
    """Do sporadic intermediate rewards slow RUDDER down? Its episodes to solve in the transport
    study (distractor rewards) against the delay sweep (none), at the lengths both ran."""
    statement = "sporadic intermediate (distracting) rewards limit RUDDER's improvements"
    common_lengths = [L for L in args.trt_sweep_list if L in args.sweep_list]
    if not common_lengths:
        return claim("survey §5", statement, "not checked: the two sweeps share no corridor length", None)
    def medians(results: dict, method: str) -> np.ndarray:
        return np.array([np.median(results[method][L]) for L in common_lengths])

    with_, without = medians(transport_sweep, "RUDDER"), medians(delay, "RUDDER")
    lead_with, lead_without = medians(transport_sweep, "Q-learning (TD)") / with_, medians(delay, "Q-learning (TD)") / without
    slower = sum(a > b for a, b in zip(with_, without))
    return claim("survey §5", statement,
                 f"RUDDER's episodes to solve with distractor rewards (p = {args.trt_distractor_prob}) vs without, "
                 "L = " + ", ".join(f"{L}: {a:,.0f} vs {b:,.0f}" for L, a, b in zip(common_lengths, with_, without))
                 + "; its lead over TD " + ", ".join(f"{a:.1f}x vs {b:.1f}x" for a, b in zip(lead_with, lead_without))
                 + f" (the studies also differ in γ, {args.trt_gamma} vs 1, and ε, {args.trt_epsilon} vs {args.epsilon})",
                 bool(slower > len(common_lengths) / 2))


def metrics_and_claims(args: Args, predictor: dict, shaping: dict, watch: dict, delay: dict,
                       transport_sweep: dict, demo: dict) -> tuple[dict, list[dict]]:
    metrics = {k: predictor[k] for k in ("predictor_final_mse", "credit_share_at_key", "max_abs_sum_minus_return")}
    claims = []
    for part_metrics, part_claims in (watch_claims(args, watch), delay_claims(args, delay, predictor),
                                      redistribution_claims(predictor, shaping),
                                      transport_claims(args, transport_sweep, demo)):
        metrics.update(part_metrics)
        claims += part_claims
    return metrics, claims + [distractor_claim(args, delay, transport_sweep)]


# ============================================================================================
# Report and main
# ============================================================================================
def report(args: Args, metrics: dict, claims: list[dict], delay: dict, transport_sweep: dict, watch: dict) -> None:
    print(format_table([[k, metrics[k]] for k in ("predictor_final_mse", "credit_share_at_key",
                                                   "max_abs_sum_minus_return")], ["metric", "value"]))
    rows = [[m, *(f"{np.median(r):,.0f}" for r in watch[m]["episodes"]), AUTHORS[m]] for m in WATCH_METHODS]
    print(f"\nPocket watch, median episodes until the greedy decision was optimal in ≥{args.watch_target:.0%} "
          f"of the last {args.watch_window}:")
    print(format_table(rows, ["method", *(f"α={a}" for a in args.watch_alpha_list), "authors"]))
    for title, results, lengths in (("Delay sweep (γ = 1)", delay, args.sweep_list),
                                    (f"Transport study (γ = {args.trt_gamma}, distractors)", transport_sweep,
                                     args.trt_sweep_list)):
        rows = [[L, *(float(np.median(results[m][L])) for m in results)] for L in lengths]
        print(f"\n{title}, median episodes to solve:")
        print(format_table(rows, ["corridor L", *results]))
    print("\n" + format_claims(claims))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = start_run(args)
    torch.set_num_threads(1)  # small models stepped one episode at a time: threads only wait on each other
    print(f"03 RUDDER and TRT: pocket watch ({args.watch_seeds} seeds), key-to-door sweeps, device {device}")
    # the studies draw from torch's global generator in turn (model initialisations): keep their order
    predictor = predictor_study(args, device)
    shaping = shaping_study(args, args.seed)  # exact DP: draws from its own generator
    watch = watch_study(args, device)
    delay = delay_study(args, device)
    demo = transport_demo(args, device)
    transport_sweep = transport_study(args, device)

    plot_redistribution(predictor, out / "redistribution.png")
    plot_watch(args, watch, out / "pocket_watch.png")
    plot_sweeps(args, delay, transport_sweep, demo, out / "sweeps.png")
    metrics, claims = metrics_and_claims(args, predictor, shaping, watch, delay, transport_sweep, demo)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, predictor_losses=predictor["losses"], delay_sweep=delay,
                  transport_sweep=transport_sweep, pocket_watch={m: r["episodes"] for m, r in watch.items()})
    report(args, metrics, claims, delay, transport_sweep, watch)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    run_script(main, Args)
