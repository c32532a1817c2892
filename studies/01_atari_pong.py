"""01 study — the chapter's agent on real Atari Pong: gymnasium's ALE/Pong-v5, Karpathy's setting.

The chapter's experiment (its credit variants, policy, loop, figures and claim) with the torch
Pong swapped for gymnasium's vectorised ALE/Pong-v5 and Karpathy's preprocessing: the frame
cropped, downsampled and binarised to 80x80, his two actions (up, down), +1/-1 per point, a game
to 21 points. It is the paper-scale setting, for a GPU and hours, not run here:

    pip install gymnasium ale-py
    python studies/01_atari_pong.py --device cuda --frames 50000000

It takes the chapter's flags (--size and --opponent-speed shape the torch Pong only, so it
refuses them) and writes what the chapter writes. ALE does not say when the agent returns the
ball: the rally figure has no return marks and shows the longest point played.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the chapters and the shared modules

import numpy as np
import torch

import common

pong = importlib.import_module("01_reinforce_pong")

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
    """gymnasium's vectorised ALE/Pong-v5 behind the chapter's `Pong` interface."""

    def __init__(self, num_envs: int, seed: int = 0, device: torch.device | str = "cpu"):
        try:  # imported here: optional dependencies that only this study needs
            import ale_py
            import gymnasium as gym
        except ImportError:
            raise SystemExit("studies/01_atari_pong.py needs gymnasium and the Atari emulator: "
                             "pip install gymnasium ale-py") from None
        gym.register_envs(ale_py)
        self.num_envs, self.size, self.seed, self.device = num_envs, 80, seed, torch.device(device)
        self.envs = gym.make_vec("ALE/Pong-v5", num_envs=num_envs, vectorization_mode="sync",
                                 vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})

    def reset(self):
        obs, info = self.envs.reset(seed=self.seed)  # every reset replays the seed: like a fresh Pong
        return preprocess_atari(obs).to(self.device), info

    def step(self, action: torch.Tensor):
        ale_action = np.where(action.cpu().numpy() == 1, ATARI_UP, ATARI_DOWN)
        obs, reward, terminated, truncated, _ = self.envs.step(ale_action)
        reward = self._tensor(reward).float()
        info = {"point_over": reward != 0}
        return preprocess_atari(obs).to(self.device), reward, self._tensor(terminated), self._tensor(truncated), info

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)


@dataclass
class Args(pong.Args):
    out: str = common.arg("runs/studies/01_atari_pong", "output folder for figures and results.json")

    SMOKE = dict(pong.Args.SMOKE, num_envs=2, frames=2 * 2 * 32, eval_frames=16, rally_frames=32)  # the emulator is slow

    def __post_init__(self):
        super().__post_init__()
        common.require((self.size, self.opponent_speed) == (pong.Args.size, pong.Args.opponent_speed),
                       "--size and --opponent-speed shape the torch Pong, not Atari's")

    def make_env(self, seed: int, device: torch.device) -> AtariPong:
        return AtariPong(self.num_envs, seed=seed, device=device)


def main(args: Args) -> dict:
    """The chapter's experiment, every game played on the Atari emulator."""
    return pong.main(args)


if __name__ == "__main__":
    common.run_script(main, Args)
