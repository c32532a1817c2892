"""03 — Return decomposition (RUDDER) and reward transport (TRT): can a delayed reward be moved
back to the step that earned it?

RUDDER (Arjona-Medina et al., 2019; survey §4.1.2 and §5): an LSTM predicts an episode's return G
from its (state, action) sequence, ĝ_t at every step. The differences r̃_t = ĝ_t - ĝ_{t-1}, plus
the last prediction's error (G - ĝ_{T-1}) / T, are a new reward that sums to G exactly: the optimal
policy is unchanged while the delay is gone. When the predictor is good, ĝ jumps at the step that
decided the return, and r̃ is near zero everywhere else.

TRT (survey §4.1.4 and §6) is lighter and not return-equivalent: a classifier with one
self-attention layer learns whether the return beats a threshold, and at the steps its attention
picks out, the rewards beyond the discount's horizon τ_γ = 1/(1 - γ) are added to the immediate
reward, r'_t = r_t + Σ_{t' ≥ t + τ_γ} r_t'. A heuristic that bets on the attention.

The default run, on key-to-door (common.KeyToDoor) with tabular learners so that only the credit
differs: the return predictor, fit on stored episodes of a uniform random policy (where does r̃
put the credit, and does it sum to G?), then the delay sweep (γ = 1): episodes until Q-learning on
the delayed reward (TD), Monte Carlo and Q-learning on r̃ prefer the key as the corridor grows.
Figures (runs/03_rudder/): redistribution.png (one episode per outcome: r and r̃), delay_sweep.png.

Beside it, in studies/: 03_pocket_watch.py (the RUDDER authors' demonstration), 03_transport.py
(TRT below and beyond τ_γ), 03_redistribution.py (the survey's promises of a redistribution, and
potential-based shaping) and 03_predictor_inputs.py (the change of state against the state).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

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
    exponential_growth,
    format_claims,
    format_table,
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


# ============================================================================================
# TRT: a classifier's attention marks the important steps; rewards beyond τ_γ are moved to them
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
# The tabular learners: Q-learning on a reward (the delayed one, or its rewrite) and Monte Carlo
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
# Key-to-door (common.KeyToDoor) as the models see it, step by step
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


# ============================================================================================
# Training: models fit on stored episodes rewrite each batch's rewards (RUDDER, TRT) for a learner
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
    model, loss = ReturnPredictor(features, args.hidden).to(device), partial(predictor_loss, aux_weight=args.aux_weight)
    return Fitter(model, loss, args.lr, args.batch, args.seed if seed is None else seed)


def transport_classifier(args: Args, features: int, device, seed: int | None = None) -> Fitter:
    model = AttentionClassifier(features, args.trt_width).to(device)
    return Fitter(model, classifier_loss, args.lr, args.batch, args.seed if seed is None else seed)


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
        return Redistribution(args, return_predictor(args, encoded_size(env.num_states, args.inputs), device, seed))
    if method == "TRT":
        classifier = transport_classifier(args, encoded_size(env.num_states, "difference"), device, seed)
        return Transport(args, classifier, key_threshold(env), horizon=discount_horizon(gamma))
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
    # the learners, and the delay sweep (γ = 1)
    sweep: str = arg("5,10,20,40,80", "corridor lengths of the delay sweep", item=int)
    sweep_seeds: int = arg(3, "seeds per (method, corridor) in the sweeps")
    learn_batch: int = arg(16, "episodes per learner update")
    max_episodes: int = arg(10_000, "learner budget; unsolved runs count as this")
    alpha: float = arg(0.5, "tabular step size of the learners")
    epsilon: float = arg(0.2, "exploration rate of the learners (ε-greedy)")
    stable: int = arg(30, "solved once the greedy policy has taken the key for this many updates in a row")
    refit_steps: int = arg(10, "RUDDER, TRT: model steps per learner update")
    buffer_batches: int = arg(32, "RUDDER, TRT: stored batches of episodes the model trains on")
    # TRT's classifier and transport (its study, studies/03_transport.py, sets them)
    trt_width: int = arg(16, "TRT classifier width")
    trt_focus: float = arg(3.0, "TRT: a step is important when it receives this many times the uniform attention")
    trt_scale: float = arg(1.0, "TRT: share of the distant rewards added at an important step")

    SMOKE = dict(corridor=5, episodes=64, steps=5, batch=16, sweep="3", sweep_seeds=1, max_episodes=32,
                 learn_batch=8, refit_steps=2)

    def __post_init__(self):
        require_positive(self, "corridor", "episodes", "hidden", "steps", "batch", "lr", "sweep_seeds", "learn_batch",
                         "max_episodes", "alpha", "refit_steps", "buffer_batches", "stable", "trt_width")
        for name in ("epsilon", "distractor_prob"):
            require(0 <= getattr(self, name) <= 1, f"--{name.replace('_', '-')} must be in [0, 1]")
        require(self.aux_weight >= 0, "--aux-weight must be non-negative")
        require(all(L > 0 for L in self.sweep_list), "--sweep: corridor lengths must be positive")

    @property
    def sweep_list(self) -> list[int]:
        return as_list(self.sweep, int)


# ============================================================================================
# The default experiment: the predictor on stored episodes, the learners as the delay grows, figures
# ============================================================================================
SWEEP_METHODS = ("Q-learning (TD)", "Monte Carlo", "RUDDER")


def uniform_episodes(args: Args, distractor_prob: float, device) -> tuple[KeyToDoor, dict]:
    """args.episodes key-to-door episodes of the uniform random policy."""
    env = KeyToDoor(args.episodes, corridor=args.corridor, distractor_prob=distractor_prob,
                    seed=args.seed, device=device)
    return env, play_episodes(env, torch.full((env.num_states + 1, KeyToDoor.num_actions), 0.5, device=device))


def predictor_study(args: Args, device) -> dict:
    """Train the return predictor on stored random episodes; where does r̃ put the credit?"""
    env, episode = uniform_episodes(args, args.distractor_prob, device)
    x, returns = encode(episode, env.num_states, args.inputs), episode["rewards"].sum(0)
    fitter = return_predictor(args, x.shape[-1], device)
    losses = fitter.fit(x, returns, args.steps, progress=True)
    with torch.no_grad():
        predictions = fitter.model(x)
    redistributed = redistribute(predictions, returns)
    return {"predictor_final_mse": float(((predictions[-1] - returns) ** 2).mean()),
            "credit_share_at_key": float(credit_share(redistributed)[0]),
            "max_abs_sum_minus_return": float((redistributed.sum(0) - returns).abs().max()),
            # float32 summation of T terms errs by at most about T·2^-24 of their magnitudes; twice that as the bound
            "gap_over_rounding": float(((redistributed.sum(0) - returns).abs() / (
                len(redistributed) * 2.0**-23 * (redistributed.abs().sum(0) + returns.abs()))).max()),
            "losses": losses, "env": env, "episode": episode, "redistributed": redistributed}


def delay_study(args: Args, device) -> dict:
    """Key-to-door with γ = 1 and no distractors: episodes to solve as the corridor grows."""
    return sweep(args, SWEEP_METHODS, args.sweep_list, device, "delay sweep")


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


def plot_delay(args: Args, delay: dict, path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4.5))
    curves = {m: np.array([by_L[L] for L in args.sweep_list]).T for m, by_L in delay.items()}
    plot_curves(ax, np.array(args.sweep_list), curves)
    ax.set(xlabel="corridor length L (delay)", ylabel="episodes to solve", yscale="log", title="γ = 1")
    save_figure(fig, path)


# ============================================================================================
# Claims (the RUDDER paper's "exponentially faster", what a redistribution must do), report, main
# ============================================================================================
def delay_claims(args: Args, sweep_results: dict, study: dict) -> tuple[dict, list[dict]]:
    medians = {m: [float(np.median(sweep_results[m][L])) for L in args.sweep_list] for m in SWEEP_METHODS}
    metrics = {f"L{L}_episodes_to_solve[{m}]": medians[m][i]
               for m in SWEEP_METHODS for i, L in enumerate(args.sweep_list)}
    lengths, floor = args.sweep_list, args.learn_batch  # one batch: the fewest episodes measurable

    def censored(method: str) -> int:
        return sum(not floor < v < args.max_episodes for L in lengths for v in sweep_results[method][L])

    td, ru = sweep_results["Q-learning (TD)"], sweep_results["RUDDER"]
    _, td_text = exponential_growth(lengths, td, censored("Q-learning (TD)"))
    # the theorem is about the time to remove TD's bias |Q - Q*|; solving needs only the sign of Q's gap
    claims = [claim("survey §5 (RUDDER paper's theorem)", "TD needs time exponential in the delay to remove its bias",
                    "not decided: this measures the episodes until TD's greedy policy takes the key (the sign of "
                    "its Q gap), not the time until its bias |Q - Q*| is removed; as context, TD's episodes to "
                    f"solve at L = {', '.join(map(str, lengths))}, median of the seeds: "
                    f"{', '.join(f'{np.median(td[L]):,.0f}' for L in lengths)}; {td_text}", None)]
    for name, slow in (("TD", "Q-learning (TD)"), ("Monte Carlo", "Monte Carlo")):
        lead = {L: np.divide(sweep_results[slow][L], ru[L]).tolist() for L in lengths}
        faster, text = exponential_growth(lengths, lead, censored(slow) + censored("RUDDER"))
        unseen = {m: censored(m) for m in (slow, "RUDDER") if censored(m)}
        claims.append(claim("survey §5 (RUDDER paper)", f"RUDDER is exponentially faster than {name} on delayed rewards",
                            f"{'TD' if name == 'TD' else 'MC'} / RUDDER episodes to solve, median of the seeds, at L = "
                            + ", ".join(f"{L}: {np.median(lead[L]):.1f}x" for L in lengths) + f"; {text}"
                            + "".join(f"; {m} at the floor ({floor} episodes, one batch) or the budget in {n} of "
                                      f"{len(lengths) * len(ru[lengths[0]])} runs: its own growth cannot be seen"
                                      for m, n in unseen.items()), faster))
    gap, rounding = study["max_abs_sum_minus_return"], study["gap_over_rounding"]
    claims += [claim("survey §5 (RUDDER paper)", "RUDDER is exponentially faster than Monte Carlo tree search",
                     "not checked: no tree search here", None),
               claim("survey §5", "the redistributed rewards sum to the original return",
                     f"largest |Σ r̃ - G| over {args.episodes} episodes: {gap:.1e}; the largest over its float32 "
                     f"rounding bound, T·2^-23·(Σ_t |r̃_t| + |G|) per episode, {rounding:.2g} (within it: ≤ 1)",
                     rounding <= 1)]
    return metrics, claims


PREDICTOR_METRICS = ("predictor_final_mse", "credit_share_at_key", "max_abs_sum_minus_return")


def seed_spread(values: list[float]) -> str:
    """The median of the seeds' values, with their range where they differ: "16", or "400 (384-416)"."""
    low, high = min(values), max(values)
    return f"{np.median(values):,.0f}" + ("" if low == high else f" ({low:,.0f}-{high:,.0f})")


def final_tables(metrics: dict, delay: dict, lengths: list[int]) -> dict:
    """What the run ends with (and results.json keeps for the docs): the predictor, and the sweep."""
    sweep = [[L, *(seed_spread(by_L[L]) for by_L in delay.values())] for L in lengths]
    return {"predictor": {"title": "The return predictor on the stored episodes", "header": ["metric", "value"],
                          "rows": [[k, metrics[k]] for k in PREDICTOR_METRICS]},
            "delay_sweep": {"title": "Delay sweep (γ = 1), episodes to solve: median (range) of the seeds",
                            "header": ["corridor L", *delay], "rows": sweep}}


def report(tables: dict, claims: list[dict]) -> None:
    for table in tables.values():
        print(f"\n{table['title']}:\n" + format_table(table["rows"], table["header"]))
    print("\n" + format_claims(claims))


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = start_run(args)
    torch.set_num_threads(1)  # small models stepped one batch at a time: threads only wait on each other
    print(f"03 RUDDER: the return predictor on key-to-door, then the delay sweep ({args.sweep}), device {device}")
    predictor = predictor_study(args, device)
    delay = delay_study(args, device)

    plot_redistribution(predictor, out / "redistribution.png")
    plot_delay(args, delay, out / "delay_sweep.png")
    delay_metrics, claims = delay_claims(args, delay, predictor)
    metrics = {**{k: predictor[k] for k in PREDICTOR_METRICS}, **delay_metrics}
    metrics["tables"] = final_tables(metrics, delay, args.sweep_list)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, predictor_losses=predictor["losses"], delay_sweep=delay)
    report(metrics["tables"], claims)
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    run_script(main, Args)
