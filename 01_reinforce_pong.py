"""01 — REINFORCE from pixels: who gets the score in Pong?

Karpathy's "Pong from Pixels" (2016), rebuilt to learn in minutes on a laptop: a Pong written
in torch (common.Pong) runs 128 games side by side, a one-hidden-layer MLP reads the frame and
the frame difference and outputs P(up), and the only learning signal is +1/-1 when a point
ends. Which of the ~50 paddle moves of a rally earned the point? Three answers, same seeds and frame budget,
each followed by REINFORCE (Williams, 1992): minimise -mean_t Ψ_t log π(a_t|s_t).
  flat          every move of a point gets the point's outcome R            Ψ_t = R
  rtg           discounted reward-to-go, reset at each point (Karpathy)     Ψ_t = γ^(T-t) R
  rtg_baseline  rtg, standardised over the batch (a baseline + scale)       Ψ_t = (G_t - mean) / std

Read beside: credit-assignment-is-the-whole-game.txt §0, §3, §4 and Appendix A.

What to look at (in runs/01_reinforce_pong/):
  who_gets_the_score.png one recorded rally: frames, and the credit each variant gives each frame
  learning_curves.png    points won vs frames per variant (mean and min-max over seeds)
  results.json           curves, final win rates, frames to 50/70/80% of points, the claim
The default budget, 1.25M frames a run, is sized for 5 minutes on 2 idle CPU cores; `--frames
2500000` is the full one (twice as long; the first 1.25M frames of each run are the same).
Studies beside it, in studies/: 01_gradient_variance.py (the gradient's variance against rally
length), 01_state_blindness.py (the policy without the frame difference), 01_atari_pong.py (the
same agent on gymnasium's ALE/Pong-v5: the paper-scale setting, for a GPU and hours).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
from tqdm import tqdm

import common

VARIANTS = ("flat", "rtg", "rtg_baseline")


# ============================================================================================
# The method: who gets the credit, and the REINFORCE loss that spends it
# ============================================================================================
def reward_to_go(rewards: torch.Tensor, ends: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted reward-to-go, time-major (T, ...). `ends[t]`: step t is the last of its episode
    (or credit segment), so nothing after it flows back; the tail after the last end is summed as
    if it ended at T."""
    returns = torch.zeros_like(rewards, dtype=torch.float32)
    running = torch.zeros_like(rewards[0], dtype=torch.float32)
    for t in reversed(range(rewards.shape[0])):
        # G_t = r_t + γ G_{t+1} (1 - end_t)
        running = rewards[t] + gamma * running * (~ends[t].bool())
        returns[t] = running
    return returns


def standardize(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Standardise over the entries where mask is true; 0 elsewhere."""
    values = x[mask]
    # (x - mean) / (std + eps), mean and std over the masked entries
    return torch.where(mask, (x - values.mean()) / (values.std(unbiased=False) + eps), torch.zeros_like(x))


def credit(variant: str, rewards: torch.Tensor, segment_ends: torch.Tensor, gamma: float,
           mask: torch.Tensor) -> torch.Tensor:
    """Ψ_t for every step, time-major (T, N). A point is a credit segment: nothing crosses it."""
    if variant == "flat":  # Ψ_t = R: the point's outcome on every move of the point
        return reward_to_go(rewards, segment_ends, gamma=1.0)  # a point's only reward is its last
    returns = reward_to_go(rewards, segment_ends, gamma)  # Ψ_t = G_t = Σ_k γ^k r_{t+k}
    if variant == "rtg":
        return returns
    if variant == "rtg_baseline":  # Ψ_t = (G_t - mean) / std: a constant baseline and a scale
        return standardize(returns, mask)
    raise ValueError(f"unknown credit variant {variant!r}")


def finished_segment_mask(segment_ends: torch.Tensor) -> torch.Tensor:
    """True at steps whose point has ended by the end of the window (a reverse cumulative OR of the
    ends along time): only their credit is known."""
    return segment_ends.flip(0).int().cummax(0).values.flip(0).bool()


def policy_gradient_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Surrogate loss whose gradient is the policy gradient; the advantages Ψ are constants."""
    # L = -mean_t Ψ_t log π(a_t|s_t), so ∇L = -mean_t Ψ_t ∇log π(a_t|s_t)
    return -(logp * advantages.detach()).mean()


# ============================================================================================
# The agent: Karpathy's MLP from pixels to P(up), and the games it plays
# ============================================================================================
class PixelPolicy(nn.Module):
    """x = [frame, frame - previous frame] -> 200 ReLU units -> logit of P(up)."""

    def __init__(self, size: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(2 * size * size, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        nn.init.zeros_(self.net[-1].weight)  # start at P(up) = 0.5 exactly
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def log_prob(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log π(a|s) of a Bernoulli policy: log σ(z) for up (a=1), log σ(-z) for down (a=0)."""
    return -nn.functional.binary_cross_entropy_with_logits(logits, actions.float(), reduction="none")


@dataclass
class Window:
    """Consecutive frames of N games, time-major. `used` marks frames already trained on."""
    inputs: torch.Tensor  # (T, N, 2, H, W) int8
    actions: torch.Tensor  # (T, N)
    rewards: torch.Tensor  # (T, N)
    segment_ends: torch.Tensor  # (T, N) point over, or game over
    used: torch.Tensor  # (T, N)

    def __len__(self) -> int:
        return len(self.actions)

    def rows(self, start: int) -> Window:
        return Window(*(x[start:] for x in vars(self).values()))

    @staticmethod
    def cat(a: Window, b: Window) -> Window:
        return Window(*(torch.cat([x, y]) for x, y in zip(vars(a).values(), vars(b).values())))


class Player:
    """Plays a policy in a batch of games and records windows of frames. The policy sees
    x = [frame, frame - previous frame] as int8, the difference zero at a game's first frame
    (Karpathy's `prev_x = None`); motion=False keeps it zero: the frame shows where the ball is,
    not where it is going (studies/01_state_blindness.py)."""

    def __init__(self, env: common.Pong, policy: nn.Module, motion: bool = True):
        self.env, self.policy, self.motion = env, policy, motion
        self.frame, _ = env.reset()
        self.x = self.observe(self.frame, self.frame)

    def observe(self, frame: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        difference = frame - previous if self.motion else torch.zeros_like(frame)
        return torch.stack([frame, difference], dim=1).to(torch.int8)

    @torch.no_grad()
    def play(self, steps: int) -> tuple[Window, torch.Tensor]:
        """`steps` frames of every game: the window, and where the agent returned the ball."""
        keep = {k: [] for k in ("inputs", "actions", "rewards", "segment_ends", "agent_hit")}
        for _ in range(steps):
            p_up = torch.sigmoid(self.policy(self.x.float()))
            action = (torch.rand_like(p_up) < p_up).long()  # a ~ π(·|s), as in training
            frame, reward, terminated, truncated, info = self.env.step(action)
            game_over = terminated | truncated
            hit = info.get("agent_hit", torch.zeros_like(game_over))  # ALE does not say
            for key, value in zip(keep, (self.x, action, reward, info["point_over"] | game_over, hit)):
                keep[key].append(value)
            previous = torch.where(game_over[:, None, None], frame, self.frame)  # a new game: no motion yet
            self.x, self.frame = self.observe(frame, previous), frame
        window = {k: torch.stack(v) for k, v in keep.items()}
        agent_hit = window.pop("agent_hit")
        return Window(**window, used=torch.zeros_like(agent_hit)), agent_hit


# ============================================================================================
# Training: frames held until their point is over, and REINFORCE on them
# ============================================================================================
class PointBuffer:
    """Holds frames until their point is over, so that every frame is trained on once, with its
    point's outcome known: a point can straddle updates, and its early frames wait here. At most
    `max_frames` frames per game wait, a safety net against a point that never ends."""

    def __init__(self, max_frames: int):
        self.max_frames, self.waiting = max_frames, None

    def add(self, window: Window) -> tuple[Window, torch.Tensor]:
        """Append a window; return everything held and the mask of frames ready to train on."""
        batch = window if self.waiting is None else Window.cat(self.waiting, window)
        ready = finished_segment_mask(batch.segment_ends) & ~batch.used
        batch.used |= ready
        still_waiting = (~batch.used).any(1)
        first = int(torch.nonzero(still_waiting)[0]) if still_waiting.any() else len(batch)
        self.waiting = batch.rows(max(first, len(batch) - self.max_frames))
        return batch, ready


def reinforce_step(policy: PixelPolicy, optimizer: torch.optim.Optimizer, variant: str, batch: Window,
                   ready: torch.Tensor, gamma: float) -> None:
    """One REINFORCE update on the frames whose point is over."""
    psi = credit(variant, batch.rewards, batch.segment_ends, gamma, ready)
    logp = log_prob(policy(batch.inputs[ready].float()), batch.actions[ready])
    loss = policy_gradient_loss(logp, psi[ready])  # -mean Ψ_t log π(a_t|s_t)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def points_won(window: Window) -> float:
    """The share of the points over in a window that the agent won (0 if none is over)."""
    won, lost = int((window.rewards > 0).sum()), int((window.rewards < 0).sum())
    return won / max(1, won + lost)


def train(args: Args, variant: str, seed: int, device: torch.device, motion: bool = True):
    """REINFORCE with one credit variant: the learning curve (the points won in each window
    played) and the trained policy. motion=False: the policy sees the frame alone (see Player)."""
    common.seed_everything(seed)
    env = args.make_env(seed, device)
    policy = PixelPolicy(env.size, args.hidden).to(device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    player, buffer = Player(env, policy, motion), PointBuffer(max_frames=8 * args.window_len)
    frames_per_update = args.num_envs * args.window_len
    updates = max(1, args.frames // frames_per_update)
    curve = {"frames": [], "win_rate": []}
    bar = tqdm(range(1, updates + 1), desc=f"{variant} seed {seed}", leave=False)
    for update in bar:
        window, _ = player.play(args.window_len)
        batch, ready = buffer.add(window)
        reinforce_step(policy, optimizer, variant, batch, ready, args.gamma)
        curve["frames"].append(update * frames_per_update)
        curve["win_rate"].append(points_won(window))
        bar.set_postfix(points_won=f"{np.mean(curve['win_rate'][-20:]):.2f}")  # over the last 20 updates
    return curve, policy


@torch.no_grad()
def win_rate(args: Args, policy: nn.Module | None, seed: int, device: torch.device, motion: bool = True) -> float:
    """Share of points won by a policy (None: a coin-flip policy) on fresh games."""
    env = args.make_env(seed, device)
    if policy is None:
        policy = PixelPolicy(env.size, 1).to(device)  # zero output layer: P(up) = 0.5
    return points_won(Player(env, policy, motion).play(args.eval_frames)[0])


def frames_to_reach(curve: dict, level: float, smooth: int = 5) -> float:
    """First frame count at which the moving average of points won reaches `level` (nan: never)."""
    hits = np.nonzero(common.moving_average(curve["win_rate"], smooth) >= level)[0]
    return float(curve["frames"][hits[0]]) if len(hits) else math.nan


# ============================================================================================
# Config: the command line
# ============================================================================================
@dataclass
class Args(common.RunArgs):
    seed: int = common.arg(0, "first seed; variant runs use seed, seed+1, ...", bounds=common.SEED_BOUNDS)
    out: str = common.arg("runs/01_reinforce_pong", "output folder for figures and results.json")
    variants: str = common.arg(",".join(VARIANTS), "comma-separated credit variants to compare", VARIANTS, item=str)
    seeds: int = common.arg(2, "seeds per variant")
    frames: int = common.arg(1_250_000, "training frames per run, summed over the games (full budget: 2500000)")
    num_envs: int = common.arg(128, "parallel games")
    window_len: int = common.arg(64, "frames per game in a window, between two updates")
    size: int = common.arg(32, "frame side in pixels (the court's geometry scales with it)")
    opponent_speed: float = common.arg(0.2, "scripted opponent's top speed, px/frame at size 32")
    hidden: int = common.arg(200, "hidden units of the policy MLP (Karpathy: 200)")
    lr: float = common.arg(1e-3, "Adam learning rate")
    gamma: float = common.arg(0.9, "discount of the reward-to-go variants (per frame)")
    eval_frames: int = common.arg(200, "frames per game when measuring a final win rate")
    rally_frames: int = common.arg(400, "frames per game played to find the rally of the figure")

    SMOKE = dict(seeds=1, frames=4 * 32 * 16, num_envs=16, window_len=32, eval_frames=64, rally_frames=96)

    def __post_init__(self):
        common.require_positive(self, "lr", "seeds", "frames", "num_envs", "window_len", "hidden", "eval_frames",
                                "rally_frames")
        common.require(0 < self.gamma <= 1, f"--gamma must be in (0, 1], got {self.gamma}")
        common.require(self.size >= 16, f"--size must be at least 16 pixels, got {self.size}")
        common.require(self.opponent_speed >= 0, "--opponent-speed must be non-negative")
        common.require(self.variant_list and set(self.variant_list) <= set(VARIANTS),
                       f"--variants must be among {', '.join(VARIANTS)}")

    @property
    def variant_list(self) -> list[str]:
        return common.as_list(self.variants, str)

    def make_env(self, seed: int, device: torch.device) -> common.Pong:
        """The games a run trains and plays in (studies/01_atari_pong.py puts Atari's here)."""
        return common.Pong(self.num_envs, size=self.size, opponent_speed=self.opponent_speed, seed=seed, device=device)


# ============================================================================================
# The experiment: the credit variants on the same seeds and budget, and one rally they credit
# ============================================================================================
def run_variants(args: Args, device: torch.device) -> dict:
    """Train every variant on the same seeds and budget, each policy's win rate measured on fresh
    games right after it trains; keep the first seed's rtg_baseline policy for the rally."""
    reference = "rtg_baseline" if "rtg_baseline" in args.variant_list else args.variant_list[0]
    runs = {"curves": {}, "win_rates_per_seed": {}, "seconds": 0.0}
    for variant in args.variant_list:
        curves, rates = runs["curves"].setdefault(variant, []), runs["win_rates_per_seed"].setdefault(variant, [])
        for seed in range(args.seed, args.seed + args.seeds):
            t0 = time.time()
            curve, policy = train(args, variant, seed, device)
            runs["seconds"] += time.time() - t0
            curves.append(curve)
            rates.append(win_rate(args, policy, seed + 10_000, device))
            if (variant, seed) == (reference, args.seed):
                runs["final_policy"] = policy
        print(f"{variant}: points won at the end {np.mean(rates):.3f} (seeds {np.round(rates, 3).tolist()})")
    runs["frames_to_70pct_per_seed"] = {v: [frames_to_reach(c, 0.7) for c in cs] for v, cs in runs["curves"].items()}
    runs["final"] = {v: summary(runs["curves"][v], runs["win_rates_per_seed"][v]) for v in args.variant_list}
    return runs


def summary(curves: list[dict], rates: list[float]) -> dict:
    """A variant over its seeds: the mean and worst final win rate, and the median of the frames
    each seed needed to win 50, 70 and 80% of points."""
    to_reach = {f"frames_to_{p}pct": float(np.median([frames_to_reach(c, p / 100) for c in curves]))
                for p in (50, 70, 80)}
    return {"win_rate": float(np.mean(rates)), "worst_seed": float(np.min(rates)), **to_reach}


def point_spans(window: Window) -> list[tuple[int, int, int]]:
    """(game, first frame, last frame) of every complete point in a window that has an outcome."""
    done = finished_segment_mask(window.segment_ends)
    spans = []
    for n in range(window.rewards.shape[1]):
        ends = torch.nonzero(window.segment_ends[:, n] & done[:, n]).flatten().tolist()
        starts = [0] + [e + 1 for e in ends[:-1]]
        spans += [(n, start, end) for start, end in zip(starts, ends) if window.rewards[end, n] != 0]
    return spans


def span_length(span: tuple[int, int, int]) -> int:
    """Last frame minus first frame of a (game, first, last) span: orders points by length."""
    return span[2] - span[1]


@torch.no_grad()
def record_rally(args: Args, policy: PixelPolicy, seed: int, device: torch.device) -> dict:
    """Play with the trained policy and keep the longest won point in which the agent returns."""
    window, agent_hit = Player(args.make_env(seed, device), policy).play(args.rally_frames)
    spans = point_spans(window) or [(0, 0, len(window) - 1)]  # no point over: the whole window
    won = [(n, s, e) for n, s, e in spans if window.rewards[e, n] > 0 and agent_hit[s:e + 1, n].any()]
    n, start, end = max(won or spans, key=span_length)
    mask, steps = finished_segment_mask(window.segment_ends), slice(start, end + 1)
    return {"frames": window.inputs[steps, n, 0].float().cpu(), "agent_hit": agent_hit[steps, n].cpu(),
            "outcome": float(window.rewards[end, n]),
            "credit": {v: credit(v, window.rewards, window.segment_ends, args.gamma, mask)[steps, n].cpu()
                       for v in VARIANTS}}


# ============================================================================================
# Report: the figures, the claim and the table
# ============================================================================================
def plot_learning(curves: dict, path):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant, seed_curves in curves.items():
        rates = np.array([common.moving_average(c["win_rate"], 5) for c in seed_curves])
        common.plot_curves(ax, np.array(seed_curves[0]["frames"]), {variant: rates})
    ax.axhline(0.8, color="gray", linestyle="--", linewidth=1)
    ax.set(xlabel="training frames (all games)", ylabel="fraction of points won",
           title="REINFORCE on Pong from pixels: credit variants", ylim=(0, 1))
    common.save_figure(fig, path)


def plot_rally(rally: dict, path, shown_frames: int = 8):
    length = len(rally["frames"])
    fig = plt.figure(figsize=(12, 5.5))
    for i, t in enumerate(np.linspace(0, length - 1, shown_frames).astype(int)):
        ax = fig.add_subplot(2, shown_frames, i + 1)
        ax.imshow(rally["frames"][t], cmap="gray", vmin=0, vmax=1)
        ax.set_title(f"t={t}", fontsize=8)
        ax.axis("off")
    ax = fig.add_subplot(2, 1, 2)
    for variant, psi in rally["credit"].items():
        ax.plot(np.arange(length), psi.numpy(), label=variant)
    for t in torch.nonzero(rally["agent_hit"]).flatten().tolist():
        ax.axvline(t, color="gray", linestyle=":", linewidth=1)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set(xlabel="frame of the rally (dotted: the agent returns the ball)", ylabel="credit Ψ_t",
           title=f"Who gets the score? One rally, outcome {rally['outcome']:+.0f}")
    ax.legend(fontsize="small")
    common.save_figure(fig, path)


def frames_text(frames: float) -> str:
    return f"{frames:,.0f}" if math.isfinite(frames) else "never (in budget)"


def check_claims(per_seed: dict) -> list[dict]:
    """Flat against rtg_baseline, seed by seed, in frames to win 70% of points."""
    if not {"flat", "rtg_baseline"} <= per_seed.keys():
        return []
    flat, base = np.array(per_seed["flat"]), np.array(per_seed["rtg_baseline"])
    return [common.claim(
        "whole-game §3 and Karpathy", "flat broadcast of the outcome (entangled credit) learns slower than "
        "discounted reward-to-go with a baseline", "frames to win 70% of points, per seed: flat "
        f"{', '.join(map(frames_text, flat))}; rtg_baseline {', '.join(map(frames_text, base))}",
        # holds only if every flat seed is slower than every rtg_baseline seed (nan: never)
        bool(np.all(np.nan_to_num(flat, nan=np.inf) > np.nanmax(base))) if np.isfinite(base).all() else None)]


def headline_metrics(runs: dict, random_rate: float) -> dict:
    """results.json's numbers: win rates and frames to a level per variant, and the final table
    (frames to a level: the median over seeds)."""
    frames = sum(c["frames"][-1] for curves in runs["curves"].values() for c in curves)
    metrics = {"random_policy_win_rate": random_rate, "training_frames_per_second": frames / runs["seconds"]}
    rows = []
    for variant, final in runs["final"].items():
        metrics |= {f"{variant}_{key}": value for key, value in final.items()}
        rows.append([variant, final["win_rate"], final["worst_seed"],
                     *(frames_text(final[f"frames_to_{p}pct"]) for p in (50, 70, 80))])
    table = {"header": ["variant", "points won", "worst seed", "frames to 50%", "to 70%", "to 80%"],
             "rows": rows + [["random policy", random_rate, "-", "-", "-", "-"]]}
    return metrics | {"tables": {"variants": table}}


# ============================================================================================
# Main: the chapter's table of contents
# ============================================================================================
def main(args: Args) -> dict:
    start = time.time()
    args, device, out = common.start_run(args)
    print(f"01 REINFORCE on Pong ({device}): {args.variants} x {args.seeds} seeds x {args.frames:,} frames")

    runs = run_variants(args, device)
    random_rate = win_rate(args, None, args.seed + 10_000, device)
    rally = record_rally(args, runs["final_policy"], args.seed + 30_000, device)

    plot_learning(runs["curves"], out / "learning_curves.png")
    plot_rally(rally, out / "who_gets_the_score.png")

    claims = check_claims(runs["frames_to_70pct_per_seed"])
    metrics = headline_metrics(runs, random_rate)
    wall = time.time() - start
    common.write_results(out, args, wall, metrics, claims, curves=runs["curves"],
                         frames_to_70pct_per_seed=runs["frames_to_70pct_per_seed"],
                         win_rates_per_seed=runs["win_rates_per_seed"])
    table = metrics["tables"]["variants"]
    print("\n" + common.format_table(table["rows"], table["header"]) + "\n\n" + common.format_claims(claims))
    print(f"\n{metrics['training_frames_per_second']:,.0f} training frames/s; wall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    common.run_script(main, Args)
