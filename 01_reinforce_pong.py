"""01 — REINFORCE from pixels: who gets the score in Pong?

Karpathy's "Pong from Pixels" (2016), rebuilt to learn in minutes on a laptop: a Pong written in
torch runs 128 games side by side, a one-hidden-layer MLP reads the frame and the frame
difference and outputs P(up), and the only learning signal is +1/-1 when a point ends. Which of
the ~50 paddle moves of a rally earned the point? Three answers, same seeds and frame budget,
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
2500000` is the full one (twice as long; the first 1.25M frames of each run are the same). `--env ale` plays
gymnasium's ALE/Pong-v5 (pip install gymnasium ale-py) with Karpathy's preprocessing: the
paper-scale setting, for a GPU and hours. Studies beside it: studies/01_gradient_variance.py
(the gradient's variance against rally length) and studies/01_state_blindness.py (the policy
without the frame difference).
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

from common import (
    SEED_BOUNDS,
    RunArgs,
    arg,
    as_list,
    claim,
    format_claims,
    format_table,
    moving_average,
    plot_curves,
    require,
    require_positive,
    run_script,
    save_figure,
    seed_everything,
    start_run,
    write_results,
)

VARIANTS = ("flat", "rtg", "rtg_baseline")




# ============================================================================================
# The method: who gets the credit, and the REINFORCE loss that spends it
# ============================================================================================
def reward_to_go(rewards: torch.Tensor, ends: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted reward-to-go, time-major: shape (T, ...).

    `ends[t]` is true when step t is the last of its episode (or credit segment), so nothing
    after it flows back into it. The tail after the last end is summed as if it ended at T.
    """
    returns = torch.zeros_like(rewards, dtype=torch.float32)
    running = torch.zeros_like(rewards[0], dtype=torch.float32)
    for t in reversed(range(rewards.shape[0])):
        # G_t = r_t + γ G_{t+1} (1 - end_t)
        running = rewards[t] + gamma * running * (~ends[t].bool())
        returns[t] = running
    return returns


def standardize(x: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-8) -> torch.Tensor:
    """Standardise over the entries where mask is true (all if None); 0 elsewhere."""
    if mask is None:
        mask = torch.ones_like(x, dtype=torch.bool)
    mask = mask.bool()
    values = x[mask]
    # (x - mean) / (std + eps), mean and std over the masked entries
    centred = (x - values.mean()) / (values.std(unbiased=False) + eps)
    return torch.where(mask, centred, torch.zeros_like(x))


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
    """True at steps whose point has ended by the end of the window: only their credit is known.

    A reverse cumulative OR of the ends along time.
    """
    return segment_ends.flip(0).int().cummax(0).values.flip(0).bool()


def policy_gradient_loss(logp: torch.Tensor, advantages: torch.Tensor,
                         mask: torch.Tensor | None = None) -> torch.Tensor:
    """Surrogate loss whose gradient is the policy gradient -mean_t[ Ψ_t ∇log π(a_t|s_t) ].

    The advantages Ψ are constants (detached); the mean runs over the entries where mask is true.
    """
    weights = advantages.detach()
    if mask is None:
        # L = -mean_t Ψ_t log π(a_t|s_t)
        return -(logp * weights).mean()
    mask = mask.float()
    # L = -Σ_t m_t Ψ_t log π(a_t|s_t) / max(1, Σ_t m_t)
    return -(logp * weights * mask).sum() / mask.sum().clamp(min=1.0)


# ============================================================================================
# The world: Pong in torch, N games at once
# ============================================================================================
class Pong:
    """N games of Pong as tensors: the agent plays the right paddle, a scripted opponent the left.

    Gymnasium's conventions over a batch: reset() -> (obs, info); step(action) -> (obs, reward,
    terminated, truncated, info), obs (N, size, size) in {0, 1}, action 1 = up and 0 = down
    (Karpathy's two), reward +1 when the opponent misses and -1 when the agent does. A game ends
    at `points_per_game` points; only finished games are reset, in the same step.

    Every point is served toward the agent, so it must return the ball to score (a coin flip
    cannot win serves). Off a paddle the ball's angle is set by where it hits, and it speeds up
    a little each return, so rallies end. The opponent chases the ball only in its own half and
    at a limited speed: slow, returning alone wins, which REINFORCE learns in minutes.
    """

    def __init__(self, num_envs: int, size: int = 32, opponent_speed: float = 0.2,
                 points_per_game: int = 21, max_game_frames: int = 20_000,
                 seed: int = 0, device: torch.device | str = "cpu"):
        u = size / 32  # every length and speed below is in pixels of a 32-pixel court
        self.num_envs, self.size, self.device = num_envs, size, torch.device(device)
        self.paddle_half, self.ball_half = 3.0 * u, 1.0 * u
        self.agent_speed, self.opponent_speed = 2.0 * u, opponent_speed * u
        self.serve_speed, self.max_speed, self.speedup = 1.0 * u, 2.0 * u, 1.05
        self.max_vy = 1.5 * u
        self.agent_x, self.opponent_x = size - 2, 1  # paddle columns
        self.points_per_game, self.max_game_frames = points_per_game, max_game_frames
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.pixel_centres = torch.arange(size, device=self.device) + 0.5

        def zeros() -> torch.Tensor:
            return torch.zeros(num_envs, device=self.device)

        self.ball_x, self.ball_y, self.vel_x, self.vel_y = zeros(), zeros(), zeros(), zeros()
        self.agent_y, self.opponent_y = zeros(), zeros()
        self.score_agent, self.score_opponent, self.game_frames = zeros(), zeros(), zeros()

    # -- gymnasium API ------------------------------------------------------------------------
    def reset(self, seed: int | None = None):
        if seed is not None:
            self.generator.manual_seed(seed)
        self._reset_games(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self.render(), {}

    def step(self, action: torch.Tensor):
        self.agent_y = self._move_paddle(self.agent_y, torch.where(action == 1, -1.0, 1.0)
                                         * self.agent_speed)
        self.opponent_y = self._move_paddle(self.opponent_y, self._opponent_move())
        self.ball_x, self.ball_y = self.ball_x + self.vel_x, self.ball_y + self.vel_y
        self._bounce_off_walls()
        agent_hit, agent_miss = self._paddle_contact(self.agent_y, toward_agent=True)
        opponent_hit, opponent_miss = self._paddle_contact(self.opponent_y, toward_agent=False)

        reward = opponent_miss.float() - agent_miss.float()
        self.score_agent += opponent_miss
        self.score_opponent += agent_miss
        self.game_frames += 1
        self._serve(opponent_miss | agent_miss)
        terminated = torch.maximum(self.score_agent, self.score_opponent) >= self.points_per_game
        truncated = ~terminated & (self.game_frames >= self.max_game_frames)
        info = {"agent_hit": agent_hit, "point_over": reward != 0}
        self._reset_games(terminated | truncated)
        return self.render(), reward, terminated, truncated, info

    def render(self) -> torch.Tensor:
        """(N, size, size) frame: two paddles and a square ball, 1 on 0."""
        frame = torch.zeros(self.num_envs, self.size, self.size, device=self.device)
        frame[:, :, self.agent_x] = self._pixels_within(self.agent_y, self.paddle_half)
        frame[:, :, self.opponent_x] = self._pixels_within(self.opponent_y, self.paddle_half)
        ball = (self._pixels_within(self.ball_y, self.ball_half)[:, :, None]
                * self._pixels_within(self.ball_x, self.ball_half)[:, None, :])
        return torch.maximum(frame, ball)

    def _pixels_within(self, centre: torch.Tensor, half: float) -> torch.Tensor:
        """(N, size): 1 at the pixels (of a row or a column) whose centre is within `half` of it."""
        return ((self.pixel_centres[None] - centre[:, None]).abs() < half).float()

    # -- dynamics -----------------------------------------------------------------------------
    def _move_paddle(self, y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        return (y + dy).clamp(self.paddle_half, self.size - self.paddle_half)

    def _opponent_move(self) -> torch.Tensor:
        """Chase the ball once it comes into the left half, else drift back to the centre."""
        coming = (self.vel_x < 0) & (self.ball_x < self.size / 2)
        target = torch.where(coming, self.ball_y, torch.full_like(self.ball_y, self.size / 2))
        return (target - self.opponent_y).clamp(-self.opponent_speed, self.opponent_speed)

    def _bounce_off_walls(self) -> None:
        low, high = self.ball_half, self.size - self.ball_half
        top, bottom = self.ball_y < low, self.ball_y > high
        self.ball_y = torch.where(top, 2 * low - self.ball_y, self.ball_y)
        self.ball_y = torch.where(bottom, 2 * high - self.ball_y, self.ball_y)
        self.vel_y = torch.where(top | bottom, -self.vel_y, self.vel_y)

    def _paddle_contact(self, paddle_y: torch.Tensor, toward_agent: bool):
        """When the ball reaches a paddle's face: a hit reflects it, a miss ends the point."""
        if toward_agent:
            face = self.agent_x - self.ball_half  # ball centre touches the paddle's left edge
            reached = (self.vel_x > 0) & (self.ball_x >= face)
        else:
            face = self.opponent_x + 1 + self.ball_half
            reached = (self.vel_x < 0) & (self.ball_x <= face)
        offset = (self.ball_y - paddle_y) / (self.paddle_half + self.ball_half)  # -1 top .. +1 bottom
        hit = reached & (offset.abs() <= 1)
        speed = (self.vel_x.abs() * self.speedup).clamp(max=self.max_speed)
        self.vel_x = torch.where(hit, -torch.sign(self.vel_x) * speed, self.vel_x)
        self.vel_y = torch.where(hit, offset * self.max_vy, self.vel_y)  # angle from the contact point
        self.ball_x = torch.where(hit, 2 * face - self.ball_x, self.ball_x)
        return hit, reached & ~hit

    def _serve(self, mask: torch.Tensor) -> None:
        """New point: ball on the centre line at a random height, toward the agent, shallow angle.
        Every game draws its numbers, used where mask is true: no count of the masked games, so
        no wait for a GPU on every frame."""
        u = torch.rand(self.num_envs, 2, generator=self.generator, device=self.device)
        self.ball_x.masked_fill_(mask, self.size / 2)
        self.ball_y = torch.where(mask, self.size * (0.25 + 0.5 * u[:, 0]), self.ball_y)
        self.vel_x.masked_fill_(mask, self.serve_speed)  # always toward the agent: it must return to score
        self.vel_y = torch.where(mask, (2 * u[:, 1] - 1) * 0.5 * self.max_vy, self.vel_y)

    def _reset_games(self, mask: torch.Tensor) -> None:
        for state in (self.agent_y, self.opponent_y):
            state.masked_fill_(mask, self.size / 2)
        for state in (self.score_agent, self.score_opponent, self.game_frames):
            state.masked_fill_(mask, 0)
        self._serve(mask)


# ============================================================================================
# Environment option: the real Atari Pong with Karpathy's preprocessing
# ============================================================================================
ATARI_BACKGROUND = (144, 109)  # the two background colours of Pong's red channel
ATARI_UP, ATARI_DOWN = 2, 3  # ALE action ids for Pong (RIGHT moves up, LEFT moves down)


def preprocess_atari(frames: np.ndarray) -> torch.Tensor:
    """Karpathy's prepro: (N, 210, 160, 3) uint8 -> (N, 80, 80) float in {0, 1}.

    Crop the score and borders (rows 35..194), keep every second pixel of the red channel,
    erase the two background colours, and set everything else (paddles, ball) to 1.
    """
    red = frames[:, 35:195:2, ::2, 0]
    foreground = ~np.isin(red, ATARI_BACKGROUND) & (red != 0)
    return torch.from_numpy(foreground.astype(np.float32))


class AtariPong:
    """gymnasium's vectorised ALE/Pong-v5 behind the same interface as `Pong`."""

    def __init__(self, num_envs: int, seed: int = 0, device: torch.device | str = "cpu"):
        try:  # imported here: an optional dependency that only `--env ale` needs
            import ale_py
            import gymnasium as gym
        except ImportError:
            raise SystemExit("--env ale needs gymnasium and the Atari emulator: "
                             "pip install gymnasium ale-py") from None
        gym.register_envs(ale_py)
        self.num_envs, self.size, self.seed, self.device = num_envs, 80, seed, torch.device(device)
        self.envs = gym.make_vec("ALE/Pong-v5", num_envs=num_envs, vectorization_mode="sync",
                                 vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})

    def reset(self, seed: int | None = None):
        obs, info = self.envs.reset(seed=self.seed if seed is None else seed)
        return preprocess_atari(obs).to(self.device), info

    def step(self, action: torch.Tensor):
        ale_action = np.where(action.cpu().numpy() == 1, ATARI_UP, ATARI_DOWN)
        obs, reward, terminated, truncated, info = self.envs.step(ale_action)
        reward = self._tensor(reward).float()
        info = {"point_over": reward != 0}
        return (preprocess_atari(obs).to(self.device), reward, self._tensor(terminated),
                self._tensor(truncated), info)

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)


def make_env(args: Args, seed: int, device: torch.device) -> Pong | AtariPong:
    """`args.num_envs` games of the Pong that `--env` names."""
    if args.env == "ale":
        return AtariPong(args.num_envs, seed=seed, device=device)
    return Pong(args.num_envs, size=args.size, opponent_speed=args.opponent_speed, seed=seed, device=device)


# ============================================================================================
# Policy: Karpathy's MLP from pixels to P(up)
# ============================================================================================
class PixelPolicy(nn.Module):
    """x = [frame, frame - previous frame] -> 200 ReLU units -> logit of P(up)."""

    def __init__(self, size: int, hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(2 * size * size, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))
        nn.init.zeros_(self.net[-1].weight)  # start at P(up) = 0.5 exactly
        nn.init.zeros_(self.net[-1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def log_prob(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log π(a|s) of a Bernoulli policy: log σ(z) for up (a=1), log σ(-z) for down (a=0)."""
    return -nn.functional.binary_cross_entropy_with_logits(logits, actions.float(), reduction="none")


class FrameDifference:
    """Keeps each game's previous frame; the input is [frame, frame - previous] as int8.

    At a game's first frame the difference is zero (Karpathy's `prev_x = None`). With
    `motion=False` the difference channel stays zero: the frame alone shows where the ball is,
    not where it is going (studies/01_state_blindness.py).
    """

    def __init__(self, first_frame: torch.Tensor, motion: bool = True):
        self.previous, self.motion = first_frame, motion

    def __call__(self, frame: torch.Tensor, new_game: torch.Tensor | None = None) -> torch.Tensor:
        previous = self.previous if new_game is None else torch.where(
            new_game[:, None, None], frame, self.previous)
        self.previous = frame
        difference = frame - previous if self.motion else torch.zeros_like(frame)
        return torch.stack([frame, difference], dim=1).to(torch.int8)


# ============================================================================================
# Training: windows of frames, held until their point is over, and REINFORCE on them
# ============================================================================================
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


class PointBuffer:
    """Holds frames until their point is over, so that every frame is trained on once, with
    its point's outcome known. A point can straddle updates; its early frames wait here.
    At most `max_frames` frames per game wait (a safety net; what it drops is counted).
    """

    def __init__(self, max_frames: int):
        self.max_frames, self.waiting = max_frames, None
        self.trained, self.dropped = 0, 0

    def add(self, window: Window) -> tuple[Window, torch.Tensor]:
        """Append a window; return everything held and the mask of frames ready to train on."""
        batch = window if self.waiting is None else Window.cat(self.waiting, window)
        ready = finished_segment_mask(batch.segment_ends) & ~batch.used
        batch.used |= ready
        self.trained += int(ready.sum())
        still_waiting = (~batch.used).any(1)
        first = int(torch.nonzero(still_waiting)[0]) if still_waiting.any() else len(batch)
        first = max(first, len(batch) - self.max_frames)
        self.dropped += int((~batch.used[:first]).sum())
        self.waiting = batch.rows(first)
        return batch, ready

    def dropped_fraction(self) -> float:
        return self.dropped / max(1, self.dropped + self.trained)


class Player:
    """Runs a policy in a batch of games and records windows of frames."""

    def __init__(self, env: Pong | AtariPong, policy: PixelPolicy, motion: bool = True):
        self.env, self.policy = env, policy
        frame, _ = env.reset()
        self.difference = FrameDifference(frame, motion)
        self.x = self.difference(frame)

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
            self.x = self.difference(frame, new_game=game_over)
        window = {k: torch.stack(v) for k, v in keep.items()}
        agent_hit = window.pop("agent_hit")
        return Window(**window, used=torch.zeros_like(agent_hit)), agent_hit


def points_won(window: Window) -> tuple[int, int]:
    return int((window.rewards > 0).sum()), int((window.rewards < 0).sum())


def reinforce_step(policy: PixelPolicy, optimizer: torch.optim.Optimizer, variant: str,
                   batch: Window, ready: torch.Tensor, gamma: float) -> None:
    """One REINFORCE update on the frames whose point is over."""
    psi = credit(variant, batch.rewards, batch.segment_ends, gamma, ready)
    logp = log_prob(policy(batch.inputs[ready].float()), batch.actions[ready])
    loss = policy_gradient_loss(logp, psi[ready])  # -mean Ψ_t log π(a_t|s_t)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def train(args: Args, variant: str, seed: int, device: torch.device, motion: bool = True):
    """REINFORCE with one credit variant: the learning curve and the trained policy. Each update
    trains on the frames whose point is over (see PointBuffer); the curve counts the points won
    in the window just played. `motion=False` trains on the frame alone (see FrameDifference).
    """
    seed_everything(seed)
    env = make_env(args, seed, device)
    policy = PixelPolicy(env.size, args.hidden).to(device)
    frames_per_update = args.num_envs * args.window_len
    updates = max(1, args.frames // frames_per_update)
    optimizer = torch.optim.Adam(policy.parameters(), lr=args.lr)
    player = Player(env, policy, motion)
    buffer = PointBuffer(max_frames=8 * args.window_len)
    curve = {"frames": [], "win_rate": [], "points": []}
    bar = tqdm(range(updates), desc=f"{variant} seed {seed}", leave=False)
    for update in bar:
        window, _ = player.play(args.window_len)
        batch, ready = buffer.add(window)
        reinforce_step(policy, optimizer, variant, batch, ready, args.gamma)
        won, lost = points_won(window)
        curve["frames"].append((update + 1) * frames_per_update)
        curve["win_rate"].append(won / max(1, won + lost))
        curve["points"].append(won + lost)
        if (update + 1) % args.log_every == 0:
            recent = np.mean(curve["win_rate"][-args.log_every:])
            bar.write(f"{variant} seed {seed} | update {update + 1}/{updates} | "
                      f"frames {curve['frames'][-1]:,} | points won {recent:.2f}")
    curve["dropped_frame_fraction"] = buffer.dropped_fraction()
    return curve, policy


@torch.no_grad()
def win_rate(args: Args, policy: nn.Module | None, seed: int, device: torch.device,
             motion: bool = True) -> float:
    """Fraction of points won by a policy (None: a coin-flip policy) on fresh games."""
    env = make_env(args, seed, device)
    if policy is None:
        policy = PixelPolicy(env.size, 1).to(device)  # zero output layer: P(up) = 0.5
    won, lost = points_won(Player(env, policy, motion).play(args.eval_frames)[0])
    return won / max(1, won + lost)


def frames_to_reach(curve: dict, level: float, smooth: int = 5) -> float:
    """First frame count at which the moving average of points won reaches `level` (nan: never)."""
    hits = np.nonzero(moving_average(curve["win_rate"], smooth) >= level)[0]
    return float(curve["frames"][hits[0]]) if len(hits) else math.nan


# ============================================================================================
# Config: the command line
# ============================================================================================
@dataclass
class Args(RunArgs):
    seed: int = arg(0, "first seed; variant runs use seed, seed+1, ...", bounds=SEED_BOUNDS)
    out: str = arg("runs/01_reinforce_pong", "output folder for figures and results.json")
    env: str = arg("torch", "torch: our vectorised Pong; ale: gymnasium ALE/Pong-v5",
                   choices=("torch", "ale"))
    variants: str = arg(",".join(VARIANTS), "comma-separated credit variants to compare", VARIANTS, item=str)
    seeds: int = arg(2, "seeds per variant")
    frames: int = arg(1_250_000, "training frames per run, summed over the games (full budget: 2500000)")
    num_envs: int = arg(128, "parallel games")
    window_len: int = arg(64, "frames per game in a window, between two updates")
    size: int = arg(32, "torch Pong: frame side in pixels (geometry scales with it)")
    opponent_speed: float = arg(0.2, "torch Pong: scripted opponent's top speed, px/frame at size 32")
    hidden: int = arg(200, "hidden units of the policy MLP (Karpathy: 200)")
    lr: float = arg(1e-3, "Adam learning rate")
    gamma: float = arg(0.9, "discount of the reward-to-go variants (per frame)")
    eval_frames: int = arg(200, "frames per game when measuring a final win rate")
    rally_frames: int = arg(400, "frames per game played to find the rally of the figure")
    log_every: int = arg(20, "updates between two log lines")

    SMOKE = dict(seeds=1, frames=4 * 32 * 16, num_envs=16, window_len=32, eval_frames=64,
                 rally_frames=96, log_every=2)

    def __post_init__(self):
        require_positive(self, "lr", "seeds", "frames", "num_envs", "window_len", "hidden",
                         "eval_frames", "rally_frames", "log_every")
        require(0 < self.gamma <= 1, f"--gamma must be in (0, 1], got {self.gamma}")
        require(self.size >= 16, f"--size must be at least 16 pixels, got {self.size}")
        require(self.opponent_speed >= 0, "--opponent-speed must be non-negative")
        require(self.variant_list and set(self.variant_list) <= set(VARIANTS),
                f"--variants must be among {', '.join(VARIANTS)}")

    @property
    def variant_list(self) -> list[str]:
        return as_list(self.variants, str)


# ============================================================================================
# The experiment: the credit variants on the same seeds and budget, and one rally they credit
# ============================================================================================
def run_variants(args: Args, device: torch.device) -> dict:
    """Train every variant on the same seeds and frame budget; measure final win rates."""
    reference = "rtg_baseline" if "rtg_baseline" in args.variant_list else args.variant_list[0]
    runs = {"curves": {}, "final": {}, "frames_to_70pct_per_seed": {}, "win_rates_per_seed": {}, "frames": 0,
            "seconds": 0.0}
    for variant in args.variant_list:
        curves, rates = [], []
        for seed in range(args.seed, args.seed + args.seeds):
            t0 = time.time()
            curve, policy = train(args, variant, seed, device)
            runs["seconds"] += time.time() - t0
            runs["frames"] += curve["frames"][-1]
            curves.append(curve)
            rates.append(win_rate(args, policy, seed + 10_000, device))
            if variant == reference and seed == args.seed:
                runs["final_policy"] = policy
        runs["curves"][variant] = curves
        runs["final"][variant] = {"win_rate": float(np.mean(rates)), "worst_seed": float(np.min(rates))}
        for level in (50, 70, 80):  # the median over seeds of the frames each needed
            runs["final"][variant][f"frames_to_{level}pct"] = float(np.median(
                [frames_to_reach(c, level / 100) for c in curves]))
        runs["frames_to_70pct_per_seed"][variant] = [frames_to_reach(c, 0.7) for c in curves]
        runs["win_rates_per_seed"][variant] = rates
        print(f"{variant}: points won at the end {np.mean(rates):.3f} (seeds {np.round(rates, 3).tolist()})")
    return runs


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
    _, first, last = span
    return last - first


@torch.no_grad()
def record_rally(args: Args, policy: PixelPolicy, seed: int, device: torch.device) -> dict:
    """Play with the trained policy and keep the longest won point in which the agent returns."""
    window, agent_hit = Player(make_env(args, seed, device), policy).play(args.rally_frames)
    spans = point_spans(window) or [(0, 0, len(window) - 1)]  # no point over: the whole window
    won = [(n, s, e) for n, s, e in spans if window.rewards[e, n] > 0 and agent_hit[s:e + 1, n].any()]
    n, start, end = max(won or spans, key=span_length)
    mask = finished_segment_mask(window.segment_ends)
    steps = slice(start, end + 1)
    return {"frames": window.inputs[steps, n, 0].float().cpu(),
            "agent_hit": agent_hit[steps, n].cpu(),
            "outcome": float(window.rewards[end, n]),
            "credit": {v: credit(v, window.rewards, window.segment_ends, args.gamma, mask)[steps, n].cpu()
                       for v in VARIANTS}}


# ============================================================================================
# Figures
# ============================================================================================
def plot_learning(curves: dict, path):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for variant, seed_curves in curves.items():
        rates = np.array([moving_average(c["win_rate"], 5) for c in seed_curves])
        plot_curves(ax, np.array(seed_curves[0]["frames"]), {variant: rates})
    ax.axhline(0.8, color="gray", linestyle="--", linewidth=1)
    ax.set(xlabel="training frames (all games)", ylabel="fraction of points won",
           title="REINFORCE on Pong from pixels: credit variants", ylim=(0, 1))
    save_figure(fig, path)


def plot_rally(rally: dict, path, shown_frames: int = 8):
    length = len(rally["frames"])
    fig = plt.figure(figsize=(12, 5.5))
    picks = np.linspace(0, length - 1, shown_frames).astype(int)
    for i, t in enumerate(picks):
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
    ax.set(xlabel="frame of the rally (dotted: the agent returns the ball)",
           ylabel="credit Ψ_t", title=f"Who gets the score? One rally, outcome {rally['outcome']:+.0f}")
    ax.legend(fontsize="small")
    save_figure(fig, path)


# ============================================================================================
# Claims and report
# ============================================================================================
def frames_text(frames: float) -> str:
    return f"{frames:,.0f}" if math.isfinite(frames) else "never (in budget)"


def check_claims(per_seed: dict) -> list[dict]:
    """Flat against rtg_baseline, seed by seed, in frames to win 70% of points."""
    if not {"flat", "rtg_baseline"} <= per_seed.keys():
        return []
    flat_seeds, base_seeds = np.array(per_seed["flat"]), np.array(per_seed["rtg_baseline"])
    return [claim(
        "whole-game §3 and Karpathy", "flat broadcast of the outcome (entangled credit) learns "
        "slower than discounted reward-to-go with a baseline",
        "frames to win 70% of points, per seed: flat "
        f"{', '.join(map(frames_text, flat_seeds))}; rtg_baseline {', '.join(map(frames_text, base_seeds))}",
        # holds only if every flat seed is slower than every rtg_baseline seed (nan: never)
        bool(np.all(np.nan_to_num(flat_seeds, nan=np.inf) > np.nanmax(base_seeds)))
        if np.isfinite(base_seeds).all() else None)]


def headline_metrics(runs: dict, random_rate: float) -> dict:
    """The flat numbers of results.json: win rates and frames to a level, per variant."""
    metrics = {"random_policy_win_rate": random_rate,
               "training_frames_per_second": runs["frames"] / runs["seconds"]}
    for variant, final in runs["final"].items():
        metrics.update({f"{variant}_{key}": value for key, value in final.items()})
    return metrics


def print_report(runs: dict, random_rate: float, claims: list[dict]) -> None:
    rows = [[v, *f.values()] for v, f in runs["final"].items()]
    rows.append(["random policy", random_rate, "-", "-", "-", "-"])
    print("\n" + format_table(rows, ["variant", "points won", "worst seed", "frames to 50%",
                                     "to 70%", "to 80% (median over seeds)"]))
    print("\n" + format_claims(claims))


# ============================================================================================
# Main: the chapter's table of contents
# ============================================================================================
def main(args: Args) -> dict:
    start = time.time()
    args, device, out = start_run(args)
    print(f"01 REINFORCE on {args.env} Pong ({device}): {args.variants} x {args.seeds} seeds "
          f"x {args.frames:,} frames")

    runs = run_variants(args, device)
    random_rate = win_rate(args, None, args.seed + 10_000, device)
    rally = record_rally(args, runs["final_policy"], args.seed + 30_000, device)

    plot_learning(runs["curves"], out / "learning_curves.png")
    plot_rally(rally, out / "who_gets_the_score.png")

    claims = check_claims(runs["frames_to_70pct_per_seed"])
    metrics = headline_metrics(runs, random_rate)
    wall = time.time() - start
    write_results(out, args, wall, metrics, claims, curves=runs["curves"],
                  frames_to_70pct_per_seed=runs["frames_to_70pct_per_seed"],
                  win_rates_per_seed=runs["win_rates_per_seed"])
    print_report(runs, random_rate, claims)
    print(f"\n{metrics['training_frames_per_second']:,.0f} training frames/s; "
          f"wall clock {wall:.0f} s; results in {out}/")
    return {"metrics": metrics, "claims": claims}


if __name__ == "__main__":
    run_script(main, Args)
