"""Shared plumbing for the numbered scripts: CLI, seeding, devices, results, figures, returns.

Only what two or more scripts use lives here. Every function is small, typed and tested in
tests/test_common.py. A script's own idea (its environment, its estimator) stays in the script.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
from pathlib import Path
from typing import Any, TypeVar

import matplotlib

matplotlib.use("Agg")  # scripts write PNGs; they never open windows
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

ArgsT = TypeVar("ArgsT")


# --------------------------------------------------------------------------------------------
# Command line: a @dataclass Args becomes an argparse CLI
# --------------------------------------------------------------------------------------------
def arg(default: Any, help: str, choices: tuple | None = None) -> Any:
    """A dataclass field with its one-line help (and optional choices) for the CLI."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclasses.dataclass
class RunArgs:
    """The flags every script has; a script's `Args(RunArgs)` sets its own `out` and adds the rest."""

    seed: int = arg(0, "random seed")
    device: str = arg("auto", "torch device: auto (cuda if present), cpu, cuda, cuda:1 ...")
    out: str = arg("runs", "output folder for figures and results.json")
    smoke: bool = arg(False, "a seconds-long run that exercises every code path (for tests)")


def require(condition: bool, message: str) -> None:
    """Validation used in `Args.__post_init__`: a bad value raises ValueError(message)."""
    if not condition:
        raise ValueError(message)


def require_positive(args: Any, *names: str) -> None:
    """`require` each named field of args to be > 0, naming its flag in the message."""
    for name in names:
        value = getattr(args, name)
        require(value > 0, f"--{name.replace('_', '-')} must be positive, got {value}")


class _OneLineErrors(argparse.ArgumentParser):
    """argparse, but a bad flag or value ends with one line (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(args_class: type[ArgsT], argv: list[str] | None = None) -> ArgsT:
    """Build a CLI from a dataclass: one `--flag-with-dashes` per field, with its help.

    Booleans become `--flag/--no-flag`. The dataclass validates itself in `__post_init__`
    (see `require`); a ValueError there ends the program with a one-line message, no trace.
    """
    parser = _OneLineErrors(
        description=(sys.modules[args_class.__module__].__doc__ or "").split("\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for f in dataclasses.fields(args_class):
        flag = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        if isinstance(f.default, bool):
            parser.add_argument(flag, default=f.default, help=help_text,
                                action=argparse.BooleanOptionalAction)
        else:
            parser.add_argument(flag, default=f.default, help=help_text,
                                type=type(f.default), choices=f.metadata.get("choices"))
    values = vars(parser.parse_args(argv))
    try:
        return args_class(**values)
    except ValueError as error:
        parser.error(str(error))


def apply_smoke(args: ArgsT) -> ArgsT:
    """With `--smoke`, replace the fields listed in the class's SMOKE dict (a seconds-long run)."""
    if not getattr(args, "smoke", False):
        return args
    return dataclasses.replace(args, **type(args).SMOKE)


# --------------------------------------------------------------------------------------------
# Reproducibility and devices
# --------------------------------------------------------------------------------------------
def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and every GPU) from one integer."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    """'auto' picks cuda when present, else cpu; any other name is passed to torch.

    A device this machine lacks stops the program with one line instead of failing later.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise SystemExit(f"error: --device {name!r} is not a torch device") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"error: --device {name}: no CUDA GPU on this machine (try --device cpu)")
    return device


def make_out_dir(path: str | Path) -> Path:
    """Create (if needed) and return the run's output folder."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def start_run(args: ArgsT) -> tuple[ArgsT, torch.device, Path]:
    """The first lines of every script's main: smoke overrides, seeding, device, out folder."""
    args = apply_smoke(args)
    seed_everything(args.seed)
    return args, resolve_device(args.device), make_out_dir(args.out)


# --------------------------------------------------------------------------------------------
# Results: results.json, claims and the final table
# --------------------------------------------------------------------------------------------
def claim(source: str, statement: str, measured: str, holds: bool | None) -> dict:
    """One checked claim: where it comes from, what it says, what we measured, and the verdict.

    `holds=None` means the measurement neither confirms nor refutes it (say why in `measured`).
    """
    return {"source": source, "claim": statement, "measured": measured, "holds": holds}


def _to_json(value: Any) -> Any:
    """json.dump fallback for numpy and torch scalars/arrays."""
    if isinstance(value, (np.generic, torch.Tensor)) and np.ndim(value) == 0:
        return value.item()
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to results.json")


def write_results(out: Path, args: Any, wall_clock_s: float, metrics: dict,
                  claims: list[dict], **extra: Any) -> Path:
    """Write results.json: args, wall-clock, flat headline metrics, checked claims, extras."""
    payload = {"args": dataclasses.asdict(args), "wall_clock_s": wall_clock_s,
               "metrics": metrics, "claims": claims, **extra}
    path = Path(out) / "results.json"
    path.write_text(json.dumps(payload, indent=1, default=_to_json))
    return path


def format_table(rows: list[list[Any]], header: list[str]) -> str:
    """A plain fixed-width text table (floats with 3 significant digits)."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if math.isfinite(v) else str(v)
        return str(v)

    table = [header] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_claims(claims: list[dict]) -> str:
    """The claims as a table: claim | measured | holds?"""
    verdict = {True: "yes", False: "NO", None: "n/a"}
    rows = [[c["source"], c["claim"], c["measured"], verdict[c["holds"]]] for c in claims]
    return format_table(rows, ["source", "claim", "measured", "holds?"])


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------
def plot_curves(ax: plt.Axes, x: np.ndarray, curves: dict[str, np.ndarray],
                band: str = "minmax") -> None:
    """One line per name: the mean over seeds, with a min-max or ±1 std band.

    `curves[name]` has shape (seeds, len(x)).
    """
    for name, ys in curves.items():
        ys = np.atleast_2d(np.asarray(ys, dtype=float))
        mean = ys.mean(axis=0)
        if band == "minmax":
            low, high = ys.min(axis=0), ys.max(axis=0)
        elif band == "std":
            low, high = mean - ys.std(axis=0), mean + ys.std(axis=0)
        else:
            raise ValueError(f"band must be 'minmax' or 'std', not {band!r}")
        (line,) = ax.plot(x, mean, label=f"{name} (n={len(ys)})")
        ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


def moving_average(x: np.ndarray | list[float], window: int) -> np.ndarray:
    """Trailing mean over the last `window` entries (fewer at the start); same length as x."""
    x = np.asarray(x, dtype=float)
    sums = np.concatenate([[0.0], np.cumsum(x)])
    ends = np.arange(1, len(x) + 1)
    counts = np.minimum(ends, window)
    return (sums[ends] - sums[ends - counts]) / counts


def save_figure(fig: plt.Figure, path: Path) -> Path:
    """Save a figure as PNG and close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------
# Policy-gradient primitives
# --------------------------------------------------------------------------------------------
def discounted_returns(rewards: torch.Tensor, ends: torch.Tensor, gamma: float) -> torch.Tensor:
    """Reward-to-go G_t = r_t + γ G_{t+1} (1 - end_t), time-major: shape (T, ...).

    `ends[t]` is true when step t is the last of its episode (or credit segment), so nothing
    after it flows back into it. The tail after the last end is summed as if it ended at T.
    """
    returns = torch.zeros_like(rewards, dtype=torch.float32)
    running = torch.zeros_like(rewards[0], dtype=torch.float32)
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * running * (~ends[t].bool())
        returns[t] = running
    return returns


def standardize(x: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the entries where mask is true (all if None); 0 elsewhere."""
    if mask is None:
        mask = torch.ones_like(x, dtype=torch.bool)
    mask = mask.bool()
    values = x[mask]
    centred = (x - values.mean()) / (values.std(unbiased=False) + eps)
    return torch.where(mask, centred, torch.zeros_like(x))


def policy_gradient_loss(logp: torch.Tensor, advantages: torch.Tensor,
                         mask: torch.Tensor | None = None) -> torch.Tensor:
    """Surrogate loss whose gradient is the policy gradient: -mean_t[ Ψ_t ∇log π(a_t|s_t) ].

    The advantages Ψ are constants (detached); the mean runs over the entries where mask is true.
    """
    weights = advantages.detach()
    if mask is None:
        return -(logp * weights).mean()
    mask = mask.float()
    return -(logp * weights * mask).sum() / mask.sum().clamp(min=1.0)


# --------------------------------------------------------------------------------------------
# The shared toy world: key-to-door (02, 03 and 04 use it)
# --------------------------------------------------------------------------------------------
class KeyToDoor:
    """The survey's robot (credit-assignment-problem-survey.txt §2.1), as a tabular MDP batch.

    Step 0, in the key room: action 1 picks up the key, action 0 leaves it. Then a corridor of
    `corridor` cells that any action walks through (the actions there change nothing), where a
    distractor reward `distractor` falls with probability `distractor_prob` at each step
    (unrelated to the key, as in TVT). Last, the door: reward 1 if the key was taken, else 0,
    and the episode ends. Gaussian noise of std `noise` is added to every reward.
    Every episode lasts corridor + 2 steps.

    State s = 2 * position + has_key, position 0 (key room) .. corridor + 1 (door); the
    absorbing terminal state is `num_states`. Gymnasium conventions over a batch, with the
    finished episodes reset in the same step. `model()` gives the exact P and R for DP.
    """

    num_actions = 2

    def __init__(self, num_envs: int, corridor: int = 10, distractor_prob: float = 0.0,
                 distractor: float = 0.1, noise: float = 0.0, seed: int = 0,
                 device: torch.device | str = "cpu"):
        self.num_envs, self.corridor, self.device = num_envs, corridor, torch.device(device)
        self.distractor_prob, self.distractor, self.noise = distractor_prob, distractor, noise
        self.door = corridor + 1
        self.num_states = 2 * (corridor + 2)
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.position = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.has_key = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    @property
    def state(self) -> torch.Tensor:
        return 2 * self.position + self.has_key

    def reset(self, seed: int | None = None) -> tuple[torch.Tensor, dict]:
        if seed is not None:
            self.generator.manual_seed(seed)
        self.position.zero_()
        self.has_key.zero_()
        return self.state, {}

    def step(self, action: torch.Tensor):
        at_key, at_door = self.position == 0, self.position == self.door
        in_corridor = ~at_key & ~at_door
        rand = torch.rand(self.num_envs, generator=self.generator, device=self.device)
        reward = torch.where(in_corridor & (rand < self.distractor_prob), self.distractor, 0.0)
        reward = reward + torch.where(at_door, self.has_key.float(), 0.0)
        if self.noise > 0:
            reward = reward + self.noise * torch.randn(self.num_envs, generator=self.generator,
                                                       device=self.device)
        self.has_key = torch.where(at_key, action.long(), self.has_key)
        self.position = self.position + 1
        terminated = at_door
        self.position[terminated] = 0  # same-step reset of finished episodes only
        self.has_key[terminated] = 0
        truncated = torch.zeros_like(terminated)
        return self.state, reward, terminated, truncated, {}

    def model(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact dynamics: P[s, a, s'] over num_states + 1 states (the last is terminal and
        absorbing) and the expected reward R[s, a]."""
        n = self.num_states
        P = torch.zeros(n + 1, 2, n + 1, dtype=torch.float64)
        R = torch.zeros(n + 1, 2, dtype=torch.float64)
        P[n, :, n] = 1.0
        for key in (0, 1):
            for position in range(self.door + 1):
                s = 2 * position + key
                for a in (0, 1):
                    if position == self.door:
                        P[s, a, n], R[s, a] = 1.0, float(key)
                    else:
                        next_key = a if position == 0 else key
                        P[s, a, 2 * (position + 1) + next_key] = 1.0
                        R[s, a] = self.distractor_prob * self.distractor if position > 0 else 0.0
        return P, R


@torch.no_grad()
def rollout(env: KeyToDoor, policy: torch.Tensor) -> dict:
    """One episode per env under a tabular policy π[s, a], time-major (T = corridor + 2).

    Returns states, actions, rewards, ends and next_states; after the last step the next state
    is the terminal one (`env.num_states`), whose value is 0.
    """
    state, _ = env.reset()
    steps = {"states": [], "actions": [], "rewards": [], "ends": []}
    for _ in range(env.corridor + 2):
        action = torch.multinomial(policy[state], 1, generator=env.generator).squeeze(1)
        next_state, reward, terminated, _, _ = env.step(action)
        for key, value in zip(steps, (state, action, reward, terminated)):
            steps[key].append(value)
        state = next_state
    episode = {k: torch.stack(v) for k, v in steps.items()}
    terminal = torch.full_like(episode["states"][:1], env.num_states)
    episode["next_states"] = torch.cat([episode["states"][1:], terminal])
    return episode


def evaluate_policy(P: torch.Tensor, R: torch.Tensor, policy: torch.Tensor,
                    gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact V^π and Q^π of a tabular policy π[s, a] by solving the Bellman equations.

    V = r_π + γ P_π V, solved as (I - γ P_π) V = r_π with the absorbing last state pinned to 0;
    then Q(s, a) = R(s, a) + γ Σ_s' P(s' | s, a) V(s').
    """
    policy = policy.to(P.dtype)
    P_pi = torch.einsum("sa,sat->st", policy, P)
    r_pi = (policy * R).sum(1)
    P_pi[-1] = 0.0  # the terminal state earns nothing and goes nowhere
    eye = torch.eye(len(P), dtype=P.dtype)
    V = torch.linalg.solve(eye - gamma * P_pi, r_pi)
    Q = R + gamma * torch.einsum("sat,t->sa", P, V)
    return V, Q
