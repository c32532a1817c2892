"""03 — Return decomposition (RUDDER): move a delayed reward to the step that earned it.

(Work in progress: the return predictor, the redistribution and a delay sweep on the
key-to-door world are here; the pocket-watch task and TRT come next; see the README.)

RUDDER's idea (Arjona-Medina et al., 2019; survey §4.1.2 and §5): train an LSTM g to predict an
episode's return from its (state, action) sequence, at every step. The differences of its
predictions, r̃_t = ĝ_t - ĝ_{t-1}, are a new reward. When the predictor is good, the jump in ĝ
happens at the step that decided the return (the key), and r̃ is near zero everywhere else; and
the r̃ sum to the return (we spread the predictor's final error over the steps so that they do,
exactly), so the optimal policy is unchanged while the delay is gone.

What to look at (in runs/03_rudder/):
  redistribution.png  one episode per outcome: the original delayed reward and the redistributed r̃
  delay_sweep.png     episodes until the key is preferred vs corridor length: TD, MC, RUDDER
  results.json        predictor error, and the share of the redistributed credit on the key step
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
    claim,
    format_claims,
    format_table,
    parse_args,
    plot_curves,
    require,
    require_positive,
    rollout,
    save_figure,
    start_run,
    write_results,
)


# ============================================================================================
# Config
# ============================================================================================
@dataclass
class Args(RunArgs):
    out: str = arg("runs/03_rudder", "output folder for figures and results.json")
    corridor: int = arg(30, "key-to-door corridor length (the delay)")
    distractor_prob: float = arg(0.0, "probability of a distractor reward per corridor step")
    episodes: int = arg(2048, "stored episodes (uniform random policy) to train the predictor on")
    hidden: int = arg(32, "LSTM hidden units")
    steps: int = arg(1500, "predictor training steps")
    batch: int = arg(128, "episodes per predictor step")
    lr: float = arg(3e-3, "Adam learning rate of the predictor")
    aux_weight: float = arg(0.5, "weight of the auxiliary loss (predict the return at every step)")
    inputs: str = arg("difference", "predictor input besides the action: the change of state "
                      "(RUDDER's choice) or the state itself", choices=("difference", "state"))
    sweep: str = arg("5,10,20,40,80", "corridor lengths of the delay sweep")
    sweep_seeds: int = arg(3, "seeds per (method, corridor) in the delay sweep")
    learn_batch: int = arg(16, "episodes per learner update")
    max_episodes: int = arg(10_000, "learner budget; unsolved runs count as this")
    alpha: float = arg(0.5, "tabular step size of the learners")
    epsilon: float = arg(0.2, "exploration rate of the learners (ε-greedy)")
    margin: float = arg(0.2, "solved once Q(key room, take) exceeds Q(key room, leave) by this")
    refit_steps: int = arg(10, "RUDDER: predictor steps per learner update")
    buffer_batches: int = arg(32, "RUDDER: stored batches of episodes the predictor trains on")

    SMOKE = dict(corridor=5, episodes=64, steps=5, batch=16, sweep="3", sweep_seeds=1,
                 max_episodes=32, learn_batch=8, refit_steps=2)

    def __post_init__(self):
        require_positive(self, "corridor", "episodes", "hidden", "steps", "batch", "lr", "sweep_seeds",
                         "learn_batch", "max_episodes", "alpha", "refit_steps", "buffer_batches")
        require(0 <= self.epsilon <= 1, "--epsilon must be in [0, 1]")
        require(0 <= self.distractor_prob <= 1, "--distractor-prob must be in [0, 1]")
        require(self.aux_weight >= 0, "--aux-weight must be non-negative")

    @property
    def sweep_list(self) -> list[int]:
        return [int(v) for v in self.sweep.split(",")]


# ============================================================================================
# The return predictor and the redistribution
# ============================================================================================
def encode(episode: dict, num_states: int, inputs: str) -> torch.Tensor:
    """The predictor's input at each step, (T, N, features): the action one-hot, and either the
    state one-hot ("state") or the change of state s_{t+1} - s_t ("difference", as RUDDER does:
    a fact that persists in the state, like carrying the key, then shows only where it changes)."""
    one_hot = lambda x, n: nn.functional.one_hot(x, n).float()  # noqa: E731
    actions = one_hot(episode["actions"], KeyToDoor.num_actions)
    if inputs == "state":
        return torch.cat([one_hot(episode["states"], num_states + 1), actions], dim=-1)
    change = one_hot(episode["next_states"], num_states + 1) - one_hot(episode["states"], num_states + 1)
    return torch.cat([change, actions], dim=-1)


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


class PredictorTrainer:
    """A return predictor with its Adam optimiser; `fit` takes steps on stored episodes."""

    def __init__(self, args: Args, features: int, device):
        self.args = args
        self.predictor = ReturnPredictor(features, args.hidden).to(device)
        self.optimizer = torch.optim.Adam(self.predictor.parameters(), lr=args.lr)
        self.generator = torch.Generator().manual_seed(args.seed)

    def fit(self, x: torch.Tensor, returns: torch.Tensor, steps: int, progress: bool = False) -> list[float]:
        losses = []
        for _ in tqdm(range(steps), desc="return predictor", leave=False, disable=not progress):
            size = min(self.args.batch, len(returns))
            pick = torch.randint(0, len(returns), (size,), generator=self.generator).to(returns.device)
            predictions = self.predictor(x[:, pick])
            loss = predictor_loss(predictions, returns[pick], self.args.aux_weight)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        return losses


def train_predictor(args: Args, x: torch.Tensor, returns: torch.Tensor, device) -> tuple:
    trainer = PredictorTrainer(args, x.shape[-1], device)
    losses = trainer.fit(x, returns, args.steps, progress=True)
    return trainer.predictor, losses


# ============================================================================================
# Task 2: a delay sweep. Tabular Q-learning on the delayed reward (TD), Monte Carlo control,
# and Q-learning on RUDDER's redistributed reward, on key-to-door with growing corridors.
# ============================================================================================
def epsilon_greedy(Q: torch.Tensor, epsilon: float) -> torch.Tensor:
    """The ε-greedy policy of a Q table as π[s, a]: 1 - ε + ε/2 on the greedy action, ε/2 else."""
    greedy = nn.functional.one_hot(Q.argmax(1), Q.shape[1]).float()
    return (1 - epsilon) * greedy + epsilon / Q.shape[1]


def q_learning_update(Q, episode: dict, rewards: torch.Tensor, alpha: float) -> None:
    """Q(s, a) += α (r + max_a' Q(s', a') - Q(s, a)), γ = 1, averaged over a batch's visits."""
    s, a = episode["states"].flatten(), episode["actions"].flatten()
    target = rewards.flatten() + Q[episode["next_states"].flatten()].max(1).values
    average_step(Q, s, a, target - Q[s, a], alpha)


def mc_update(Q, episode: dict, alpha: float) -> None:
    """Q(s, a) += α (G_t - Q(s, a)), the undiscounted return from step t on."""
    returns = episode["rewards"].flip(0).cumsum(0).flip(0)
    s, a = episode["states"].flatten(), episode["actions"].flatten()
    average_step(Q, s, a, returns.flatten() - Q[s, a], alpha)


def average_step(Q, s, a, errors, alpha: float) -> None:
    """Move each visited Q(s, a) by α times the mean of its errors in the batch."""
    index = s * Q.shape[1] + a
    total = torch.zeros(Q.numel(), device=Q.device).index_add_(0, index, errors)
    visits = torch.bincount(index, minlength=Q.numel()).clamp(min=1)
    Q += alpha * (total / visits).view_as(Q)


def solve(args: Args, method: str, corridor: int, seed: int, device) -> int:
    """Episodes until the greedy policy takes the key with a margin (args.max_episodes if never)."""
    torch.manual_seed(seed)
    env = KeyToDoor(args.learn_batch, corridor=corridor, distractor_prob=args.distractor_prob,
                    seed=seed, device=device)
    Q = torch.zeros(env.num_states + 1, 2, device=device)
    buffer, trainer = [], PredictorTrainer(args, env.num_states + 1 + KeyToDoor.num_actions, device)
    for episodes in range(args.learn_batch, args.max_episodes + 1, args.learn_batch):
        episode = rollout(env, epsilon_greedy(Q, args.epsilon))
        if method == "Q-learning (TD)":
            q_learning_update(Q, episode, episode["rewards"], args.alpha)
        elif method == "Monte Carlo":
            mc_update(Q, episode, args.alpha)
        else:  # RUDDER: refit the predictor on the stored episodes, then learn from r̃
            buffer = (buffer + [episode])[-args.buffer_batches:]
            stored = {k: torch.cat([e[k] for e in buffer], dim=1) for k in episode}
            trainer.fit(encode(stored, env.num_states, args.inputs), stored["rewards"].sum(0), args.refit_steps)
            with torch.no_grad():
                g = trainer.predictor(encode(episode, env.num_states, args.inputs))
            q_learning_update(Q, episode, redistribute(g, episode["rewards"].sum(0)), args.alpha)
        if Q[0, 1] > Q[0, 0] + args.margin:
            return episodes
    return args.max_episodes


METHODS = ("Q-learning (TD)", "Monte Carlo", "RUDDER")


def delay_sweep(args: Args, device) -> dict:
    results = {m: {} for m in METHODS}
    runs = [(m, L) for m in METHODS for L in args.sweep_list]
    for method, L in tqdm(runs, desc="delay sweep", leave=False):
        results[method][L] = [solve(args, method, L, args.seed + i, device) for i in range(args.sweep_seeds)]
    return results


# ============================================================================================
# Experiment: stored episodes of a uniform random policy on key-to-door
# ============================================================================================
def plot_redistribution(episode: dict, redistributed: torch.Tensor, path) -> None:
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


def plot_sweep(sweep: dict, lengths: list[int], path) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    plot_curves(ax, np.array(lengths), {m: np.array([by_L[L] for L in lengths]).T for m, by_L in sweep.items()})
    ax.set(xlabel="corridor length L (delay)", ylabel="episodes to solve", yscale="log",
           title="Key-to-door: episodes until the key is preferred")
    save_figure(fig, path)


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = start_run(args)
    env = KeyToDoor(args.episodes, corridor=args.corridor, distractor_prob=args.distractor_prob,
                    seed=args.seed, device=device)
    uniform = torch.full((env.num_states + 1, KeyToDoor.num_actions), 0.5, device=device)
    episode = rollout(env, uniform)
    returns = episode["rewards"].sum(0)
    x = encode(episode, env.num_states, args.inputs)
    predictor, losses = train_predictor(args, x, returns, device)
    with torch.no_grad():
        predictions = predictor(x)
    redistributed = redistribute(predictions, returns)
    plot_redistribution(episode, redistributed, out / "redistribution.png")

    sweep = delay_sweep(args, device)
    plot_sweep(sweep, args.sweep_list, out / "delay_sweep.png")
    share_at_key = float(credit_share(redistributed)[0])
    final_error = float(((predictions[-1] - returns) ** 2).mean())
    sum_gap = float((redistributed.sum(0) - returns).abs().max())
    metrics = {"predictor_final_mse": final_error, "credit_share_at_key": share_at_key,
               "max_abs_sum_minus_return": sum_gap, "delay_steps": args.corridor + 1}
    medians = {m: [float(np.median(sweep[m][L])) for L in args.sweep_list] for m in METHODS}
    for m in METHODS:
        for L, value in zip(args.sweep_list, medians[m]):
            metrics[f"L{L}_episodes_to_solve[{m}]"] = value
    td, ru = medians["Q-learning (TD)"], medians["RUDDER"]
    growth = growth_law(args.sweep_list, td)  # the paper: TD's time grows exponentially with the delay
    claims = [claim("RUDDER paper, survey §5", "RUDDER is exponentially faster than TD as the delay grows "
                    "(TD needs time exponential in the delay)",
                    "TD / RUDDER episodes to solve at L = "
                    + ", ".join(f"{L}: {a / b:.1f}x" for L, a, b in zip(args.sweep_list, td, ru))
                    + f"; TD's own episodes fit a power law L^{growth['power']:.2f} with residual "
                    f"{growth['power_residual']:.3f}, an exponential with {growth['exponential_residual']:.3f}; "
                    f"RUDDER stays within {min(ru):.0f}-{max(ru):.0f}",
                    growth_verdict(growth) if len(td) >= 3 else None),
              claim("survey §5", "the return predictor's jump, and so the redistributed reward, sits "
                    "at the decisive step and is near zero elsewhere",
                    f"{share_at_key:.1%} of the variance of r̃ across episodes sits on the key step, "
                    f"of {args.corridor + 2} steps",
                    share_at_key > 0.5),
              claim("survey §5", "the redistributed rewards sum to the original return",
                    f"largest |Σ r̃ - G| over {args.episodes} episodes: {sum_gap:.1e}", sum_gap < 1e-4)]
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, predictor_losses=losses, delay_sweep=sweep)
    print(format_table([[k, v] for k, v in metrics.items() if not k.startswith("L")], ["metric", "value"]))
    rows = [[L, *(medians[m][i] for m in METHODS)] for i, L in enumerate(args.sweep_list)]
    print("\nDelay sweep, median episodes to solve:")
    print(format_table(rows, ["corridor L", *METHODS]))
    print("\n" + format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    main(parse_args(Args))
