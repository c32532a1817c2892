"""Mutation testing: plant one small, plausible bug at a time in a script's methods and loops, run
that script's tests, and count the bugs they catch. Not a test itself (pytest collects test_*.py).

    python tests/mutation.py 05_grpo_rloo                 # 40 mutants drawn at random, 2 at a time
    python tests/mutation.py 05_grpo_rloo --mutants 0     # every mutant
    python tests/mutation.py 03_rudder --only solve,transport --show-survivors
    python tests/mutation.py 02_gae --survivors-of runs/mutation/02_gae.before.json  # after new tests

A mutant changes one place of the script's source: a comparison (< to <=, == to !=), an
arithmetic operator (+ to -, * to /), a constant (0 to 1, n to n + 1), a boolean (and to or,
not x to x, ~x to x), a unary minus, the first two arguments of a call swapped, a keyword
argument dropped, a call to .detach() removed, min/max or sum/mean swapped, a slice bound moved
by one, or a statement removed. Only functions that compute (the method, the world, the loops,
the studies and the claims) are mutated, not the figures, the report, the metrics' assembly, the
timing benchmark or main. A mutant is
caught when the script's test file fails or runs past its time limit. Results (score, and each
surviving mutant with its line) go to runs/mutation/<script>.json.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import copy
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# not the method or its loops: the entry point, the printed and plotted report, the assembly of
# metrics, and the timing benchmark
SKIPPED = ("main", "report", "print_report", "plot_all", "headline_metrics", "collect_metrics", "metrics_of",
           "__post_init__", "__repr__", "benchmark", "trl_benchmark", "run_benchmark")
SWAPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
         ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.And: ast.Or, ast.Or: ast.And}
RENAMES = {"min": "max", "max": "min", "minimum": "maximum", "maximum": "minimum", "sum": "mean", "mean": "sum",
           "any": "all", "all": "any", "argmax": "argmin", "argmin": "argmax"}


@dataclass
class Mutant:
    function: str
    line: int
    kind: str
    before: str
    after: str = ""
    caught: bool | None = None
    seconds: float = 0.0


def targets(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """The functions and methods to mutate, by qualified name."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not skipped(node.name):
            found.append((node.name, node))
        elif isinstance(node, ast.ClassDef) and node.name != "Args":
            found += [(f"{node.name}.{item.name}", item) for item in node.body
                      if isinstance(item, ast.FunctionDef) and not skipped(item.name)]
    return found


def skipped(name: str) -> bool:
    return name in SKIPPED or name.startswith(("plot_", "print_"))


NOISE_KEYWORDS = {"desc", "leave", "disable", "file", "flush", "end", "sep"}


def sites(function: ast.AST) -> list[tuple[ast.AST, str]]:
    """Every (node, kind of mutation) inside one function, except in f-strings, docstrings and
    print calls (what they change is text, not behaviour)."""
    text = {id(inner) for node in ast.walk(function) if isinstance(node, ast.JoinedStr) or
            (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "print") for inner in ast.walk(node)}
    found = []
    for node in ast.walk(function):
        if id(node) in text:
            continue
        if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAPS:
            found.append((node, "comparison"))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in SWAPS:
            found.append((node, "operator"))
        elif isinstance(node, ast.BoolOp):
            found.append((node, "boolean"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.Invert, ast.USub)):
            found.append((node, "unary"))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            found.append((node, "constant"))
        elif isinstance(node, ast.Call):
            found += call_sites(node)
        elif isinstance(node, ast.Slice):
            found += [(node, f"slice {part}") for part in ("lower", "upper") if getattr(node, part) is not None]
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Expr)) and not (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            found.append((node, "statement removed"))
    return found


def call_sites(node: ast.Call) -> list[tuple[ast.AST, str]]:
    found = []
    if len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
        found.append((node, "argument order"))
    found += [(node, f"drop {k.arg}=") for k in node.keywords if k.arg and k.arg not in NOISE_KEYWORDS]
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    if name == "detach" and isinstance(node.func, ast.Attribute):
        found.append((node, "no detach"))
    if name in RENAMES:
        found.append((node, "rename"))
    return found


def mutate(node: ast.AST, kind: str) -> ast.AST:
    """A mutated copy of node (or the node that replaces it)."""
    new = copy.deepcopy(node)
    if kind in ("comparison",):
        new.ops[0] = SWAPS[type(new.ops[0])]()
    elif kind in ("operator", "boolean"):
        new.op = SWAPS[type(new.op)]()
    elif kind == "unary":
        return new.operand
    elif kind == "constant":
        new.value = 1 if new.value == 0 else (0 if new.value == 1 else new.value + 1)
    elif kind == "argument order":
        new.args[0], new.args[1] = new.args[1], new.args[0]
    elif kind.startswith("drop "):
        new.keywords = [k for k in new.keywords if k.arg != kind[5:-1]]
    elif kind == "no detach":
        return new.func.value
    elif kind == "rename":
        if isinstance(new.func, ast.Attribute):
            new.func.attr = RENAMES[new.func.attr]
        else:
            new.func.id = RENAMES[new.func.id]
    elif kind.startswith("slice "):
        part = kind[6:]
        setattr(new, part, ast.BinOp(getattr(new, part), ast.Add(), ast.Constant(1)))
    elif kind == "statement removed":
        return ast.Pass()
    return new


class Replace(ast.NodeTransformer):
    """Put `replacement` where `target` (that very node object) was."""

    def __init__(self, target: ast.AST, replacement: ast.AST):
        self.target, self.replacement = target, replacement

    def visit(self, node):
        return self.replacement if node is self.target else super().visit(node)


def locate(tree: ast.AST, original: ast.AST) -> ast.AST:
    """The node of `tree` (another parse of the same source) at the place of `original`."""
    return next(node for node in ast.walk(tree) if type(node) is type(original)
                and getattr(node, "lineno", None) == original.lineno
                and getattr(node, "col_offset", None) == original.col_offset
                and getattr(node, "end_lineno", None) == original.end_lineno
                and getattr(node, "end_col_offset", None) == original.end_col_offset)


def all_mutants(source: str) -> list[tuple[Mutant, str]]:
    """Every mutant of the source: (what it changes, the mutated source)."""
    mutants = []
    for name, function in targets(ast.parse(source)):
        for node, kind in sites(function):
            tree = ast.parse(source)  # a fresh tree for each mutant
            twin = locate(tree, node)
            replacement = mutate(twin, kind)
            mutated = ast.unparse(ast.fix_missing_locations(Replace(twin, replacement).visit(tree)))
            before = (ast.get_source_segment(source, node) or ast.unparse(node)).splitlines()[0][:100]
            after = "pass" if isinstance(replacement, ast.Pass) else ast.unparse(replacement).splitlines()[0][:100]
            mutants.append((Mutant(name, node.lineno, kind, before, after), mutated))
    return mutants


def run_tests(script: str, mutated: str, timeout: float) -> tuple[bool, float]:
    """Run the script's test file against a copy of the repository whose script is mutated:
    True when a test fails (the mutant is caught) or the run outlasts `timeout`."""
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="mutant-") as folder:
        copy_root = Path(folder) / "repo"
        shutil.copytree(ROOT, copy_root, ignore=shutil.ignore_patterns("runs", ".git", "__pycache__", "*.pyc"))
        (copy_root / f"{script}.py").write_text(mutated)
        try:
            result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly",
                                     f"tests/test_{script}.py"], cwd=copy_root, capture_output=True, timeout=timeout)
            caught = result.returncode != 0
        except subprocess.TimeoutExpired:
            caught = True
    return caught, time.time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("script", help="a script's name without .py, e.g. 05_grpo_rloo")
    parser.add_argument("--mutants", type=int, default=40, help="how many mutants to draw at random (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw")
    parser.add_argument("--only", default="", help="comma-separated function names to mutate (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="test runs at once")
    parser.add_argument("--show-survivors", action="store_true", help="print each surviving mutant")
    parser.add_argument("--survivors-of", default="", help="a results file: run again only the mutants that "
                        "survived there (the same line and change: for a script unchanged since), e.g. once new "
                        "tests are written")
    args = parser.parse_args()

    source = (ROOT / f"{args.script}.py").read_text()
    mutants = all_mutants(source)
    if args.only:
        wanted = set(args.only.split(","))
        mutants = [m for m in mutants if m[0].function.split(".")[-1] in wanted or m[0].function in wanted]
    if args.survivors_of:
        earlier = json.loads(Path(args.survivors_of).read_text())["all"]
        wanted = {(m["function"], m["line"], m["kind"], m["before"], m["after"]) for m in earlier if not m["caught"]}
        by_key = {(m.function, m.line, m.kind, m.before, m.after): (m, mutated) for m, mutated in reversed(mutants)}
        mutants = [by_key[key] for key in sorted(wanted) if key in by_key]  # one mutant per place, as drawn there
    elif args.mutants and len(mutants) > args.mutants:
        mutants = random.Random(args.seed).sample(mutants, args.mutants)
    clean, baseline = run_tests(args.script, source, timeout=1800)
    if clean:
        raise SystemExit(f"the tests of {args.script} fail without any mutant: fix them first")
    print(f"{args.script}: {len(mutants)} mutants; the clean test run takes {baseline:.0f} s")
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run_tests, args.script, mutated, 3 * baseline + 30): mutant for mutant, mutated in mutants}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            mutant = futures[future]
            mutant.caught, mutant.seconds = future.result()
            print(f"  [{done}/{len(mutants)}] {'caught  ' if mutant.caught else 'SURVIVED'} {mutant.function}:"
                  f"{mutant.line} {mutant.kind}: {mutant.before!r} -> {mutant.after!r}", flush=True)
    caught = sum(m.caught for m, _ in mutants)
    survivors = [m for m, _ in mutants if not m.caught]
    print(f"{args.script}: caught {caught} of {len(mutants)} ({caught / max(1, len(mutants)):.0%})")
    if args.show_survivors:
        for m in survivors:
            print(f"  survived: {m.function}:{m.line} {m.kind}: {m.before!r} -> {m.after!r}")
    out = ROOT / "runs" / "mutation"
    out.mkdir(parents=True, exist_ok=True)
    name = f"{args.script}.survivors" if args.survivors_of else args.script
    (out / f"{name}.json").write_text(json.dumps(
        {"script": args.script, "seed": args.seed, "mutants": len(mutants), "caught": caught,
         "score": caught / max(1, len(mutants)), "baseline_test_seconds": baseline,
         "all": [asdict(m) for m, _ in mutants]}, indent=1))


if __name__ == "__main__":
    main()
