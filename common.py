"""What the numbered scripts share, and nothing they teach: run plumbing and the two small worlds.

Plumbing: the dataclass CLI, seeding, devices, results.json with its claims, tables and figures.
Worlds: Pong in torch (01) and the key-to-door gridworld with its exact model (02-04). The
small-LM world of 05-07 is lm_world.py. No estimator, loss, learning rule or training loop of a
method lives here: each is in the script that teaches it. Tested in tests/test_common.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import matplotlib

matplotlib.use("Agg")  # scripts write PNGs; they never open windows
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

ArgsT = TypeVar("ArgsT")


# ---------------------------------------------------- command line: a @dataclass Args as a CLI
def arg(default: Any, help: str, choices: tuple | None = None, item: type | None = None,
        bounds: tuple[float, float] | None = None, empty: bool = False) -> Any:
    """A dataclass field with its one-line help. `choices`: the allowed values (of each item, for
    a list); `item`: the flag is a comma-separated list of int, float or str (`empty`: may be
    empty); `bounds`: the inclusive range of a number."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices, "item": item,
                                                        "bounds": bounds, "empty": empty})


SEED_BOUNDS = (0, 2**32 - 1)  # numpy's legacy seed range


@dataclasses.dataclass
class RunArgs:
    """The flags every script has; a script's `Args(RunArgs)` sets its own `out` and adds the rest."""

    seed: int = arg(0, "random seed", bounds=SEED_BOUNDS)
    device: str = arg("auto", "torch device: auto (cuda if present), cpu, cuda, cuda:1, mps ...")
    out: str = arg("runs", "output folder for figures and results.json")
    smoke: bool = arg(False, "a seconds-long run that exercises every code path (for tests); "
                             "flags you pass keep their values")


def reanalyse_arg() -> Any:
    """The --reanalyse flag of a study whose results.json stores its measurements (see `reanalyse`)."""
    return arg("", "a results.json of this script: its claims re-derived by this code from the measurements it "
                   "stores, written back in place (nothing trained; its args, metrics and wall clock kept)")


def require(condition: bool, message: str) -> None:
    """Validation in `Args.__post_init__`: a bad value raises ValueError(message)."""
    if not condition:
        raise ValueError(message)


def require_positive(args: Any, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        require(value > 0, f"--{name.replace('_', '-')} must be positive, got {value}")


def as_list(value: str, item: type) -> list:
    """A comma-separated flag as a list of `item` (int, float or str); "" is the empty list."""
    return [item(part.strip()) for part in value.split(",")] if value.strip() else []


def fail(message: str) -> NoReturn:
    """End the program with one line on stderr and exit code 2 (a bad flag, value or input)."""
    print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class _OneLineErrors(argparse.ArgumentParser):
    def error(self, message: str):  # a bad flag or value ends with one line, no usage block
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _number(kind: type, bounds: tuple[float, float] | None) -> Callable[[str], Any]:
    """An argparse type for an int or float: finite, and within bounds when given."""
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            raise argparse.ArgumentTypeError(f"must be in {bounds[0]}..{bounds[1]}, got {text!r}")
        return value
    return convert


def _listing(item: type, choices: tuple | None, empty: bool) -> Callable[[str], str]:
    """An argparse type for a list flag: every item parses (and is a known choice); the string is
    kept as it is (`as_list` reads it)."""
    def convert(text: str) -> str:
        parts = as_list(text, str)
        if not parts and not empty:
            kind = {int: "integers", float: "numbers", str: "names"}[item]
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind}, got {text!r}")
        for part in parts:
            if item is not str:
                _number(item, None)(part)
            elif not part or (choices and part not in choices):
                raise argparse.ArgumentTypeError(f"{part!r} is not one of {', '.join(choices or ())}")
        return text
    return convert


def parse_args(args_class: type[ArgsT], argv: list[str] | None = None) -> ArgsT:
    """A CLI from a dataclass: one `--flag-with-dashes` per field, with its help. Booleans become
    `--flag/--no-flag`, numbers must be finite (and within `bounds`), list flags are checked item
    by item; then the dataclass validates itself in `__post_init__` (see `require`), and a
    ValueError there ends the program with one line."""
    parser = _OneLineErrors(description=(sys.modules[args_class.__module__].__doc__ or "").split("\n")[0],
                            formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(args_class):
        # argparse reads % in a help as a format sign ("95%" would crash --help)
        meta, options = f.metadata, {"default": f.default, "help": f.metadata.get("help", "").replace("%", "%%")}
        if isinstance(f.default, bool):
            options["action"] = argparse.BooleanOptionalAction
        elif meta.get("item"):
            options["type"] = _listing(meta["item"], meta["choices"], meta["empty"])
        else:
            options["choices"] = meta.get("choices")
            if isinstance(f.default, (int, float)):
                options["type"] = _number(type(f.default), meta.get("bounds"))
        parser.add_argument("--" + f.name.replace("_", "-"), **options)
    values = vars(parser.parse_args(argv))
    try:
        return args_class(**values)
    except ValueError as error:
        parser.error(str(error))


def apply_smoke(args: ArgsT) -> ArgsT:
    """With `--smoke`, the class's SMOKE values (a seconds-long run) replace the fields still at
    their defaults; a flag you passed keeps its value."""
    if not getattr(args, "smoke", False):
        return args
    defaults = {f.name: f.default for f in dataclasses.fields(args)}
    return dataclasses.replace(args, **{k: v for k, v in type(args).SMOKE.items() if getattr(args, k) == defaults[k]})


def run_script(main: Callable[[ArgsT], Any], args_class: type[ArgsT]) -> None:
    """Parse the flags, run `main`, and end a Ctrl-C with one line (exit code 130): results,
    figures and the cold-start cache are written whole or not at all."""
    args = parse_args(args_class)
    try:
        main(args)
    except KeyboardInterrupt:
        print(f"\n{Path(sys.argv[0]).name}: interrupted; what it wrote is complete, nothing was left half-written",
              file=sys.stderr)
        raise SystemExit(130) from None


# ---------------------------------------------------------------- reproducibility and devices
def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch from one integer (numpy's legacy generator modulo 2^32, so
    that seed + i stays valid near the top of the range)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _available(device: torch.device) -> bool:
    """cpu always; cuda, mps and xpu when torch sees them; meta, or a type we never run on, never."""
    if device.type == "cuda":
        return torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count()
    backend = {"mps": torch.backends.mps, "xpu": getattr(torch, "xpu", None)}.get(device.type)
    return device.type == "cpu" or (backend is not None and backend.is_available())


def resolve_device(name: str) -> torch.device:
    """'auto' picks cuda when present, else cpu. A device this machine lacks, or a name that is
    no device, stops with one line (exit code 2) instead of failing later."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        fail(f"--device {name!r} is not a torch device (try auto, cpu or cuda)")
    if not _available(device):
        fail(f"--device {name}: this machine cannot run on it (available: cpu"
             + (", cuda" if torch.cuda.is_available() else "") + ")")
    return device


def make_out_dir(path: str | Path) -> Path:
    """The run's output folder, made if needed; one line if that cannot be done."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        fail(f"--out {path}: cannot make a folder there ({error.strerror or error})")
    if not os.access(out, os.W_OK):
        fail(f"--out {path}: the folder is not writable")
    return out


def start_run(args: ArgsT) -> tuple[ArgsT, torch.device, Path]:
    """The first lines of every script's main: smoke values, seeding, device, out folder."""
    args = apply_smoke(args)
    seed_everything(args.seed)
    return args, resolve_device(args.device), make_out_dir(args.out)


# ------------------------------------------------------ results: results.json, claims, tables
def claim(source: str, statement: str, measured: str, holds: bool | None) -> dict:
    """One checked claim: its source, what it says, what we measured, and the verdict
    (`holds=None`: the measurement neither confirms nor refutes it; `measured` says why)."""
    return {"source": source, "claim": statement, "measured": measured, "holds": holds}


def json_ready(value: Any) -> Any:
    """The value as strict JSON holds it: numpy and torch numbers as Python's, NaN and ±inf (no
    such case, nothing measured) as None, which JSON writes null."""
    if isinstance(value, dict):
        return {(k.item() if isinstance(k, np.generic) else k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, (np.ndarray, torch.Tensor, np.generic)):
        return json_ready(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value) if isinstance(value, Path) else value


def _not_json(value: Any) -> Any:
    raise TypeError(f"cannot write {type(value).__name__} to results.json")


def write_atomically(path: Path, write: Callable[[Path], Any]) -> Path:
    """`write(temporary path)` in the same folder, then rename it to `path`: a reader (or a run
    stopped half-way) sees the old file or the whole new one, never half of it."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.partial")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def write_results(out: Path, args: Any, wall_clock_s: float, metrics: dict,
                  claims: list[dict], **extra: Any) -> Path:
    """results.json, strict JSON (undefined numbers are null): args, wall clock, headline
    metrics, checked claims, extras. A table the docs show goes in metrics["tables"][name] as
    {"header": [...], "rows": [...]} (docs/publish.py renders it)."""
    payload = json_ready({"args": dataclasses.asdict(args), "wall_clock_s": wall_clock_s,
                           "metrics": metrics, "claims": claims, **extra})
    text = json.dumps(payload, indent=1, allow_nan=False, default=_not_json)
    return write_atomically(Path(out) / "results.json", lambda temporary: temporary.write_text(text))


def stored_numbers(tree: Any) -> Any:
    """A tree read back from results.json as the run held it: number keys restored ("8" -> 8,
    "0.95" -> 0.95; JSON writes every key as a string) and every null read as NaN (an undefined
    number is written as null)."""
    def key(text: str) -> Any:
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
        return text
    if isinstance(tree, dict):
        return {key(k): stored_numbers(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [stored_numbers(v) for v in tree]
    return math.nan if tree is None else tree


def reanalyse(args: Any, claims_of: Callable[[Any, dict], list[dict]]) -> list[dict]:
    """--reanalyse PATH: a run's claims re-derived by this code from the measurements its
    results.json stores, nothing trained or sampled. `claims_of(run_args, stored)` gets the run's
    own args and its stored extras (`stored_numbers`: a null comes back as NaN, so a study that
    stores None to mean "absent" tests for a dict instead); the file keeps its args, metrics, wall
    clock and measurements, and its claims are replaced in place and printed."""
    path = Path(args.reanalyse)
    if not path.is_file():
        fail(f"--reanalyse {path}: no such results.json")
    stored = json.loads(path.read_text())
    names = {field.name for field in dataclasses.fields(args)} - {"reanalyse"}
    run_args = dataclasses.replace(args, reanalyse="", **{k: v for k, v in stored["args"].items() if k in names})
    stored["claims"] = json_ready(claims_of(run_args, stored_numbers(stored)))
    text = json.dumps(stored, indent=1, allow_nan=False, default=_not_json)
    write_atomically(path, lambda temporary: temporary.write_text(text))
    print(format_claims(stored["claims"]) + f"\n\nclaims re-derived from {path}'s measurements; written back")
    return stored["claims"]


TERMINAL_WIDTH = 100  # every final table fits a terminal this wide


def format_table(rows: list[list[Any]], header: list[str], width: int = TERMINAL_WIDTH) -> str:
    """A fixed-width text table (floats with 3 significant digits). A table wider than `width` is
    printed as several, each repeating the first column, so no line wraps."""
    table = [header] + [[f"{v:.3g}" if isinstance(v, float) and math.isfinite(v) else str(v) for v in row]
                        for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    groups = [[0]]
    for i in range(1, len(header)):
        if groups[-1] != [0] and sum(widths[j] + 2 for j in groups[-1]) + widths[i] > width:
            groups.append([0])
        groups[-1].append(i)

    def part(columns: list[int]) -> str:
        lines = ["  ".join(r[i].ljust(widths[i]) for i in columns).rstrip() for r in table]
        return "\n".join([lines[0], "  ".join("-" * widths[i] for i in columns), *lines[1:]])

    return "\n\n".join(part(columns) for columns in groups)


def verdict_word(claim: dict) -> str:
    """A claim's verdict in words: yes, no, premise not met (`measured` says so) or inconclusive."""
    if claim["holds"] is None:
        return "premise not met" if "premise not met" in claim["measured"] else "inconclusive"
    return "yes" if claim["holds"] else "no"


def format_claims(claims: list[dict], width: int = TERMINAL_WIDTH) -> str:
    """One block per claim, wrapped to `width`: verdict and source, the claim, what was measured."""
    def wrapped(label: str, text: str) -> list[str]:
        return textwrap.wrap(f"{label}{text}", width, initial_indent="  ", subsequent_indent=" " * (2 + len(label)))

    return "\n".join("\n".join([f"[{verdict_word(c)}] {c['source']}", *wrapped("", c["claim"]),
                                *wrapped("measured: ", c["measured"])]) for c in claims)


# ------------------------------------------------------------------------ figures and numbers
def plot_curves(ax: plt.Axes, x: np.ndarray, curves: dict[str, np.ndarray]) -> None:
    """One line per name, `curves[name]` of shape (seeds, len(x)): the mean over seeds and a
    min-max band."""
    for name, ys in curves.items():
        ys = np.atleast_2d(np.asarray(ys, dtype=float))
        (line,) = ax.plot(x, ys.mean(axis=0), label=f"{name} (n={len(ys)})")
        ax.fill_between(x, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.2, linewidth=0)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


def loglog_slope(x: list[float] | np.ndarray, y: list[float] | np.ndarray) -> float:
    """Exponent k of y ∝ x^k by least squares in log-log, over the points where both are positive;
    NaN with fewer than 2 such points."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = (x > 0) & (y > 0)
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0]) if ok.sum() >= 2 else math.nan


def pearson(x: list[float] | np.ndarray, y: list[float] | np.ndarray) -> float:
    """Pearson's r; NaN with fewer than two points or a constant side."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return float(np.corrcoef(x, y)[0, 1]) if len(x) >= 2 and x.std() > 0 and y.std() > 0 else math.nan


def moving_average(x: np.ndarray | list[float], window: int) -> np.ndarray:
    """Trailing mean over the last `window` entries (fewer at the start), skipping NaN; NaN where a
    window holds nothing else."""
    x = np.asarray(x, dtype=float)
    finite = np.isfinite(x)
    sums = np.concatenate([[0.0], np.cumsum(np.where(finite, x, 0.0))])
    seen = np.concatenate([[0], np.cumsum(finite)])
    ends = np.arange(1, len(x) + 1)
    starts = ends - np.minimum(ends, window)
    counts = seen[ends] - seen[starts]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, (sums[ends] - sums[starts]) / counts, np.nan)


def mean_or_nan(values: Any) -> float:
    """The mean of the finite values; NaN when there are none."""
    values = np.asarray(values, dtype=float).ravel()
    return float(values[np.isfinite(values)].mean()) if np.isfinite(values).any() else math.nan


# Student's t, the 0.975 quantile (a two-sided 95% interval) for 1..30 degrees of freedom
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile(df: int) -> float:
    """Student's t at 0.975 with `df` degrees of freedom (past 30, the Cornish-Fisher term
    z + (z³ + z) / 4df, within 0.005); NaN for df < 1."""
    if df < 1:
        return math.nan
    z = 1.959964
    return T975[df - 1] if df <= len(T975) else z + (z**3 + z) / (4 * df)


def mean_interval(values: list[float] | np.ndarray) -> tuple[float, float, float]:
    """The mean and its 95% t-interval over independent values (seeds): (mean, low, high); the
    bounds are NaN with fewer than two values."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean()) if len(values) else math.nan
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = t_quantile(len(values) - 1) * float(values.std(ddof=1)) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def seed_verdict(values, zero_below: float | None = None, claimed: float | None = None) -> tuple[bool | None, str]:
    """The ledger's rule on a quantity measured once per seed, and "mean [95% interval]". An effect
    (> 0 in the statement's direction): yes where the interval lies above 0; no where it lies below
    0 (the seeds show the reverse) or below the effect the statement names (`claimed`: a "no" must
    rule out what was said); else None. A negative mean whose interval reaches above 0 is None:
    without a named size to rule out, the interval's top, not the mean's sign, bounds the effect.
    A zero (zero_below given): yes where the interval holds 0 and stays below zero_below, no where
    it excludes 0, else None."""
    mean, low, high = mean_interval(values)
    text = f"{mean:+.3g} [{low:+.3g}, {high:+.3g}]"
    if not np.isfinite(low):
        return None, text
    if zero_below is not None:
        return (False if low > 0 or high < 0 else True if high < zero_below else None), text
    ruled_out = high < 0 or (claimed is not None and high < claimed)
    return (True if low > 0 else False if ruled_out else None), text


def all_parts(*verdicts: bool | None) -> bool | None:
    """The verdict of a statement made of parts: no if a part is no, yes if every part is yes, else
    None (a part the seeds cannot tell, or no part at all)."""
    if False in verdicts:
        return False
    return True if verdicts and None not in verdicts else None


def tends(*verdicts: bool | None) -> bool | None:
    """A tendency across settings: yes if it holds somewhere and fails nowhere, no if it fails
    somewhere and holds nowhere, else None (mixed, or no setting can tell)."""
    if True in verdicts:
        return None if False in verdicts else True
    return False if False in verdicts else None


ROUGHLY_LINEAR = (0.5, 1.5)  # the exponents halfway from linear (1) to no growth (0) and to quadratic (2)


def slope_verdict(slopes) -> tuple[bool | None, str]:
    """Does a quantity grow roughly linearly (y ∝ x^k, k near 1)? On the log-log slope per seed:
    yes where its 95% interval lies nearer linear growth than no growth or quadratic growth (inside
    ROUGHLY_LINEAR), no where it lies wholly outside that band, else None; and "mean [interval]"."""
    mean, low, high = mean_interval(slopes)
    text = f"{mean:.2f} [{low:.2f}, {high:.2f}]"
    below, above = ROUGHLY_LINEAR
    if not np.isfinite(low) or not (below < low and high < above or high < below or low > above):
        return None, text
    return bool(below < low and high < above), text


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


def growth_gaps(lengths: list[int], runs: dict) -> list[float]:
    """Per seed, from {L: [one value per seed]}: the power law's residual minus the exponential's
    (> 0: the exponential describes that seed's growth better)."""
    fits = [growth_law(lengths, [runs[L][i] for L in lengths]) for i in range(len(runs[lengths[0]]))]
    return [fit["power_residual"] - fit["exponential_residual"] for fit in fits]


def exponential_growth(lengths: list[int], runs: dict, censored: int) -> tuple[bool | None, str]:
    """Does a value (episodes to solve, or one method's lead over another), {L: [one per seed]},
    grow exponentially with L? Per seed, the exponential fit's residual against the power law's,
    and the exponential rate, decided over the seeds (seed_verdict); None with < 3 lengths or
    where `censored` runs sat at the floor or the budget (their growth unseen)."""
    seeds = range(len(runs[lengths[0]]))
    (better, gap), (grows, rate) = (seed_verdict(growth_gaps(lengths, runs)), seed_verdict(
        [growth_law(lengths, [runs[L][i] for L in lengths])["exponential"] for i in seeds]))
    text = (f"per seed, the power law's residual minus the exponential's, mean [95% interval over {len(seeds)} "
            f"seeds]: {gap} (> 0: exponential), the exponential rate {rate}")
    if len(lengths) < 3 or censored:
        return None, text + ("; needs three lengths" if len(lengths) < 3 else "")
    return (False if False in (better, grows) else None if None in (better, grows) else True), text


def save_figure(fig: plt.Figure, path: Path) -> Path:
    """Save a figure as PNG (whole or not at all) and close it."""
    fig.tight_layout()
    write_atomically(path, lambda temporary: fig.savefig(temporary, dpi=110, format="png"))
    plt.close(fig)
    return path


def token_grid(path: Path, panels: list[dict], title: str, label: str, cmap: str = "RdBu") -> Path:
    """Token sequences as monospace grids, one panel per entry of `panels` ({"title"; "tokens", one string per column,
    a newline shown as ⏎ and another unprintable character as ·; "rows", {row label: one value per token}; "box",
    None or one bool per token, the columns outlined}), each cell shaded by its value on one diverging scale centred
    at 0 that every panel shares (white is 0: sign and size read alike in every row), with its colorbar (`label`).
    Saved as `save_figure` saves."""
    scale = max(float(np.abs(np.asarray(v, dtype=float)).max()) for p in panels for v in p["rows"].values()) or 1.0
    norm, width = plt.Normalize(-scale, scale), max(len(p["tokens"]) for p in panels)
    heights = [len(p["rows"]) for p in panels]
    fig = plt.figure(figsize=(0.26 * width + 3.6, 0.36 * sum(heights) + 0.75 * len(panels) + 0.5))
    grid = fig.add_gridspec(len(panels), 2, height_ratios=heights, width_ratios=[60, 1])
    for k, panel in enumerate(panels):
        ax, values = fig.add_subplot(grid[k, 0]), np.array(list(panel["rows"].values()), dtype=float)
        image = ax.imshow(values, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
        for (r, c), value in np.ndenumerate(values):  # white letters where the shade is dark
            text = "".join(ch if ch.isprintable() else "·" for ch in panel["tokens"][c].replace("\n", "⏎"))
            ax.text(c, r, text, ha="center", va="center", family="monospace", fontsize=9,
                    color="white" if abs(norm(value) - 0.5) > 0.33 else "black")
        ax.set_xlim(-0.5, width - 0.5)
        ax.set_xticks([])
        ax.set_yticks(range(len(values)), list(panel["rows"]))
        ax.set_xticks(np.arange(width + 1) - 0.5, minor=True)  # white lines between the cells
        ax.set_yticks(np.arange(len(values) + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", linewidth=1.5)
        ax.tick_params(which="both", length=0)
        ax.set_title(panel["title"], fontsize=9, loc="left")
        columns = np.flatnonzero(np.asarray(panel["box"], dtype=bool)) if panel.get("box") is not None else []
        if len(columns):
            ax.add_patch(plt.Rectangle((columns[0] - 0.5, -0.5), columns[-1] - columns[0] + 1, len(values),
                                       fill=False, edgecolor="black", linewidth=2.5, clip_on=False, zorder=3))
    fig.colorbar(image, cax=fig.add_subplot(grid[:, 1]), label=label)
    fig.suptitle(title, fontsize=11)
    return save_figure(fig, path)


# ---------------------------------------------------------- the key-to-door world (02, 03, 04)
class KeyToDoor:
    """The survey's robot (credit-assignment-problem-survey.txt §2.1), as a batch of tabular MDPs.

    Step 0, in the key room: action 1 takes the key, action 0 leaves it. Then a corridor of
    `corridor` cells that every action walks through, where a distractor reward `distractor`
    falls with probability `distractor_prob` at each step (unrelated to the key, as in TVT).
    Last, the door: reward 1 if the key was taken, else 0, and the episode ends (corridor + 2
    steps in all). Gaussian noise of std `noise` is added to every reward.

    State s = 2 * position + has_key, position 0 (key room) .. corridor + 1 (door); the absorbing
    terminal state is `num_states`. Gymnasium's conventions over a batch, finished episodes reset
    in the same step; `model()` gives the exact P and R for dynamic programming.
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

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        at_key, at_door = self.position == 0, self.position == self.door
        in_corridor = ~at_key & ~at_door
        rand = torch.rand(self.num_envs, generator=self.generator, device=self.device)
        reward = torch.where(in_corridor & (rand < self.distractor_prob), self.distractor, 0.0)
        reward = reward + torch.where(at_door, self.has_key.float(), 0.0)
        if self.noise > 0:
            reward = reward + self.noise * torch.randn(self.num_envs, generator=self.generator, device=self.device)
        self.has_key = torch.where(at_key, action.long(), self.has_key)
        self.position = self.position + 1
        self.position[at_door] = 0  # same-step reset of the finished episodes only
        self.has_key[at_door] = 0
        return self.state, reward, at_door, torch.zeros_like(at_door), {}

    def model(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Exact dynamics: P[s, a, s'] over num_states + 1 states (the last is terminal and
        absorbing) and the expected reward R[s, a]."""
        n = self.num_states
        P = torch.zeros(n + 1, 2, n + 1, dtype=torch.float64)
        R = torch.zeros(n + 1, 2, dtype=torch.float64)
        P[n, :, n] = 1.0
        for key in (0, 1):
            P[2 * self.door + key, :, n], R[2 * self.door + key] = 1.0, float(key)
            for position in range(self.door):
                for a in (0, 1):
                    P[2 * position + key, a, 2 * (position + 1) + (a if position == 0 else key)] = 1.0
                    R[2 * position + key, a] = self.distractor_prob * self.distractor if position > 0 else 0.0
        return P, R


@torch.no_grad()
def play_episodes(env: KeyToDoor, policy: torch.Tensor) -> dict:
    """One episode per env under a tabular policy π[s, a], time-major (T = corridor + 2): states,
    actions, rewards, ends and next_states (after the last step, the terminal state, value 0)."""
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
    """Exact V^π and Q^π of a tabular policy π[s, a]: (I - γ P_π) V = r_π solved with the
    absorbing last state pinned to 0, then Q(s, a) = R(s, a) + γ Σ_s' P(s' | s, a) V(s')."""
    policy = policy.to(P.dtype)
    P_pi = torch.einsum("sa,sat->st", policy, P)
    r_pi = (policy * R).sum(1)
    P_pi[-1] = 0.0  # the terminal state earns nothing and goes nowhere
    V = torch.linalg.solve(torch.eye(len(P), dtype=P.dtype) - gamma * P_pi, r_pi)
    return V, R + gamma * torch.einsum("sat,t->sa", P, V)


# ------------------------------------------------------------ Pong in torch, N games at once (01)
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

    def __init__(self, num_envs: int, size: int = 32, opponent_speed: float = 0.2, points_per_game: int = 21,
                 max_game_frames: int = 20_000, seed: int = 0, device: torch.device | str = "cpu"):
        u = size / 32  # every length and speed below is in pixels of a 32-pixel court
        self.num_envs, self.size, self.device = num_envs, size, torch.device(device)
        self.paddle_half, self.ball_half, self.max_vy = 3.0 * u, 1.0 * u, 1.5 * u
        self.agent_speed, self.opponent_speed = 2.0 * u, opponent_speed * u
        self.serve_speed, self.max_speed, self.speedup = 1.0 * u, 2.0 * u, 1.05
        self.agent_x, self.opponent_x = size - 2, 1  # paddle columns
        self.points_per_game, self.max_game_frames = points_per_game, max_game_frames
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.pixel_centres = torch.arange(size, device=self.device) + 0.5
        zeros = [torch.zeros(num_envs, device=self.device) for _ in range(9)]
        self.ball_x, self.ball_y, self.vel_x, self.vel_y, self.agent_y, self.opponent_y = zeros[:6]
        self.score_agent, self.score_opponent, self.game_frames = zeros[6:]

    def reset(self) -> tuple[torch.Tensor, dict]:
        self._reset_games(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self.render(), {}

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        self.agent_y = self._move_paddle(self.agent_y, torch.where(action == 1, -1.0, 1.0) * self.agent_speed)
        self.opponent_y = self._move_paddle(self.opponent_y, self._opponent_move())
        self.ball_x, self.ball_y = self.ball_x + self.vel_x, self.ball_y + self.vel_y
        self._bounce_off_walls()
        agent_hit, agent_miss = self._paddle_contact(self.agent_y, toward_agent=True)
        _, opponent_miss = self._paddle_contact(self.opponent_y, toward_agent=False)
        reward = opponent_miss.float() - agent_miss.float()
        self.score_agent += opponent_miss
        self.score_opponent += agent_miss
        self.game_frames += 1
        self._serve(opponent_miss | agent_miss)
        terminated = torch.maximum(self.score_agent, self.score_opponent) >= self.points_per_game
        truncated = ~terminated & (self.game_frames >= self.max_game_frames)
        self._reset_games(terminated | truncated)
        return self.render(), reward, terminated, truncated, {"agent_hit": agent_hit, "point_over": reward != 0}

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

    def _paddle_contact(self, paddle_y: torch.Tensor, toward_agent: bool) -> tuple[torch.Tensor, torch.Tensor]:
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
