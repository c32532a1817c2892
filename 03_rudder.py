"""03 — Return decomposition (RUDDER): move a delayed reward to the step that earned it.

(Work in progress: this first part builds the return predictor and the redistribution and shows
them on the key-to-door world. The learners, the pocket-watch task and TRT come next; see the
README.)

RUDDER's idea (Arjona-Medina et al., 2019; survey §4.1.2 and §5): train an LSTM g to predict an
episode's return from its (state, action) sequence, at every step. The differences of its
predictions, r̃_t = ĝ_t - ĝ_{t-1}, are a new reward. When the predictor is good, the jump in ĝ
happens at the step that decided the return (the key), and r̃ is near zero everywhere else; and
the r̃ sum to the return (we spread the predictor's final error over the steps so that they do,
exactly), so the optimal policy is unchanged while the delay is gone.

What to look at (in runs/03_rudder/):
  redistribution.png  one episode per outcome: the original delayed reward and the redistributed r̃
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
    arg,
    claim,
    format_claims,
    format_table,
    parse_args,
    require,
    require_positive,
    save_figure,
    start_run,
    write_results,
)


# ============================================================================================
# Config
# ============================================================================================
@dataclass
class Args:
    seed: int = arg(0, "random seed")
    device: str = arg("auto", "torch device: auto (cuda if present), cpu, cuda ...")
    out: str = arg("runs/03_rudder", "output folder for figures and results.json")
    smoke: bool = arg(False, "a seconds-long run that exercises every code path (for tests)")
    corridor: int = arg(30, "key-to-door corridor length (the delay)")
    distractor_prob: float = arg(0.0, "probability of a distractor reward per corridor step")
    episodes: int = arg(2048, "stored episodes (uniform random policy) to train the predictor on")
    hidden: int = arg(32, "LSTM hidden units")
    steps: int = arg(1500, "predictor training steps")
    batch: int = arg(128, "episodes per predictor step")
    lr: float = arg(3e-3, "Adam learning rate of the predictor")
    aux_weight: float = arg(0.5, "weight of the auxiliary loss (predict the return at every step)")

    SMOKE = dict(corridor=5, episodes=64, steps=5, batch=16)

    def __post_init__(self):
        require_positive(self, "corridor", "episodes", "hidden", "steps", "batch", "lr")
        require(0 <= self.distractor_prob <= 1, "--distractor-prob must be in [0, 1]")
        require(self.aux_weight >= 0, "--aux-weight must be non-negative")


# ============================================================================================
# The return predictor and the redistribution
# ============================================================================================
class ReturnPredictor(nn.Module):
    """LSTM over one-hot (state, action) pairs; ĝ_t, a prediction of the return, at every step."""

    def __init__(self, num_states: int, num_actions: int, hidden: int):
        super().__init__()
        self.num_states, self.num_actions = num_states, num_actions
        self.lstm = nn.LSTM(num_states + num_actions, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """states, actions: (T, N) integers -> predictions (T, N)."""
        x = torch.cat([nn.functional.one_hot(states, self.num_states),
                       nn.functional.one_hot(actions, self.num_actions)], dim=-1).float()
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


def train_predictor(args: Args, states, actions, returns, num_states: int, device) -> tuple:
    predictor = ReturnPredictor(num_states, KeyToDoor.num_actions, args.hidden).to(device)
    optimizer = torch.optim.Adam(predictor.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(args.seed)
    losses = []
    for _ in tqdm(range(args.steps), desc="return predictor", leave=False):
        pick = torch.randint(0, states.shape[1], (args.batch,), generator=generator).to(device)
        loss = predictor_loss(predictor(states[:, pick], actions[:, pick]), returns[pick], args.aux_weight)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return predictor, losses


# ============================================================================================
# Experiment: stored episodes of a random policy on key-to-door
# ============================================================================================
@torch.no_grad()
def random_episodes(env: KeyToDoor) -> dict:
    state, _ = env.reset()
    keep = {"states": [], "actions": [], "rewards": []}
    for _ in range(env.corridor + 2):
        action = torch.randint(0, 2, (env.num_envs,), generator=env.generator, device=env.device)
        next_state, reward, *_ = env.step(action)
        for key, value in zip(keep, (state, action, reward)):
            keep[key].append(value)
        state = next_state
    return {k: torch.stack(v) for k, v in keep.items()}


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


def main(args: Args) -> dict:
    start = time.time()
    args, device, out = start_run(args)
    env = KeyToDoor(args.episodes, corridor=args.corridor, distractor_prob=args.distractor_prob,
                    seed=args.seed, device=device)
    episode = random_episodes(env)
    returns = episode["rewards"].sum(0)
    predictor, losses = train_predictor(args, episode["states"], episode["actions"], returns,
                                        env.num_states, device)
    with torch.no_grad():
        predictions = predictor(episode["states"], episode["actions"])
    redistributed = redistribute(predictions, returns)
    plot_redistribution(episode, redistributed, out / "redistribution.png")

    share_at_key = float(credit_share(redistributed)[0])
    final_error = float(((predictions[-1] - returns) ** 2).mean())
    sum_gap = float((redistributed.sum(0) - returns).abs().max())
    metrics = {"predictor_final_mse": final_error, "credit_share_at_key": share_at_key,
               "max_abs_sum_minus_return": sum_gap, "delay_steps": args.corridor + 1}
    claims = [claim("survey §5", "the return predictor's jump, and so the redistributed reward, sits "
                    "at the decisive step and is near zero elsewhere",
                    f"{share_at_key:.1%} of the variance of r̃ across episodes sits on the key step, "
                    f"of {args.corridor + 2} steps",
                    share_at_key > 0.5),
              claim("survey §5", "the redistributed rewards sum to the original return",
                    f"largest |Σ r̃ - G| over {args.episodes} episodes: {sum_gap:.1e}", sum_gap < 1e-4)]
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, predictor_losses=losses)
    print(format_table([[k, v] for k, v in metrics.items()], ["metric", "value"]))
    print("\n" + format_claims(claims))
    print(f"\nwall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    main(parse_args(Args))
