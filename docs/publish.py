"""Publish the reference runs into the docs, by one command, never by hand:

    python docs/publish.py            # after the runs the pages name have been made under runs/

1. Every figure a page or the README shows (a link `figures/<run>/<name>.png`) is copied from
   `runs/<run>/<name>.png` to `docs/figures/<run>/`, as a small palette PNG.
2. Every run a page quotes (in a generated block or value) gets its `runs/<run>/results.json`
   copied to `docs/results/<run>.json`, trimmed to what a page reads: args, wall clock,
   metrics and claims.
3. Every generated block is written anew from those committed results. A block is the lines
   between `<!-- generated: KIND RUN [NAME] -->` and `<!-- end generated -->`: `claims RUN` is
   every claim of the run, `table RUN NAME` the table the run wrote into its metrics as
   `"tables": {NAME: {"header": [...], "rows": [[...], ...]}}` (the run prints the same one).
4. Every generated value, a number inside a sentence or a table cell, is written anew too:
   `<!-- value RUN KEY FORMAT -->0.495<!-- end -->` shows the run's metrics[KEY] (or its
   wall_clock_s; a KEY with spaces in double quotes) in the Python format FORMAT (`.3f`, `.0f`, `,.0f`, `.1%` ...). The markers do
   not show in rendered Markdown.

`python docs/publish.py --check` writes nothing and exits 1 where a page disagrees with the
committed results (the test suite runs the same check).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(r"(<!-- generated: (\w+) ([\w/.-]+)(?: (\w+))? -->\n)(.*?)(<!-- end generated -->)", re.S)
VALUE = re.compile(r"(<!-- value ([\w/.-]+) (\"[^\"]+\"|\S+) (\S+) -->)(.*?)(<!-- end -->)")
FIGURE = re.compile(r"\]\((?:docs/)?figures/([\w/.-]+)/([\w.-]+\.png)\)")
KEPT = ("args", "wall_clock_s", "metrics", "claims")
VERDICT = {True: "yes", False: "no", None: "not checked"}


def cell(value) -> str:
    """A number with 3 significant digits (integers whole), text with its pipes escaped."""
    if isinstance(value, float):
        return f"{value:.3g}"
    return "–" if value is None else str(value).replace("|", "\\|")


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def claims_table(results: dict) -> str:
    rows = [[f"{c['claim']} ({c['source']})", c["measured"], VERDICT[c["holds"]]] for c in results["claims"]]
    return markdown_table(["claim (source)", "measured", "verdict"], rows)


def committed(run: str) -> dict:
    path = DOCS / "results" / f"{run}.json"
    if not path.exists():
        raise SystemExit(f"publish: no committed results for {run} (docs/results/{run}.json); run it, then publish")
    return json.loads(path.read_text())


def value(run: str, key: str, spec: str) -> str:
    results, key = committed(run), key.strip('"')
    number = results["wall_clock_s"] if key == "wall_clock_s" else results["metrics"].get(key)
    if not isinstance(number, (int, float)):
        raise SystemExit(f"publish: {run} has no number {key!r}")
    return format(number, spec)


def render(kind: str, run: str, name: str) -> str:
    if kind == "claims" and not name:
        return claims_table(committed(run))
    tables = committed(run)["metrics"].get("tables", {}) if kind == "table" else {}
    if name in tables:
        return markdown_table(tables[name]["header"], tables[name]["rows"])
    raise SystemExit(f"publish: unknown block '{' '.join(filter(None, (kind, run, name)))}'")


def rendered(text: str) -> str:
    """The page with every generated block written from the committed results."""
    if text.count("<!-- generated:") != len(BLOCK.findall(text)):  # a typo in a marker would hide its block
        raise SystemExit("publish: a '<!-- generated:' line that is not KIND RUN [NAME] -->, or has no end")
    if text.count("<!-- value ") != len(VALUE.findall(text)):
        raise SystemExit("publish: a '<!-- value' marker that is not RUN KEY FORMAT -->, or has no end on its line")
    text = VALUE.sub(lambda m: m.group(1) + value(m.group(2), m.group(3), m.group(4)) + m.group(6), text)
    return BLOCK.sub(lambda m: m.group(1) + render(m.group(2), m.group(3), m.group(4) or "") + m.group(6), text)


def runs_quoted(text: str) -> set[str]:
    return {run for _, _, run, _, _, _ in BLOCK.findall(text)} | {run for _, run, _, _, _, _ in VALUE.findall(text)}


def publish_run(run: str) -> None:
    results = json.loads((ROOT / "runs" / run / "results.json").read_text())
    target = DOCS / "results" / f"{run}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({k: results[k] for k in KEPT}, indent=1, ensure_ascii=False) + "\n")


def publish_figure(run: str, name: str) -> None:
    from PIL import Image

    target = DOCS / "figures" / run / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(ROOT / "runs" / run / name) as image:  # 256 colours: a plot needs no more
        image.convert("RGB").quantize(256).save(target, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    check = parser.parse_args().check
    texts = {page: page.read_text() for page in PAGES}
    if not check:
        for run in sorted(set().union(*map(runs_quoted, texts.values()))):
            publish_run(run)
        for run, name in sorted({m for text in texts.values() for m in FIGURE.findall(text)}):
            publish_figure(run, name)
    stale = [page for page, text in texts.items() if rendered(text) != text]
    for page in stale:
        if check:
            print(f"publish: {page.relative_to(ROOT)} disagrees with docs/results", file=sys.stderr)
        else:
            page.write_text(rendered(texts[page]))
    raise SystemExit(1 if check and stale else 0)


if __name__ == "__main__":
    main()
