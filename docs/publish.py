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
   not show in rendered Markdown. A verdict in a sentence or a cell is written the same way:
   `<!-- verdict RUN "START" -->yes<!-- end -->` shows the verdict of the run's one claim that
   starts with START, in the words the runs print it.

5. The claims ledger, docs/claims_ledger.md, is written whole from the hand-kept list of what
   the essays say, docs/ledger_statements.py, and the claims of the committed results it names
   (a statement naming a claim that a results file does not hold stops the publish).

`python docs/publish.py --check` writes nothing and exits 1 where a page disagrees with the
committed results (the test suite runs the same check).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

try:
    from docs import ledger_statements
except ModuleNotFoundError:  # run as a script: docs/ is on the path, the repository root is not
    import ledger_statements

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # common.py: the claims' verdicts in the words the runs print them
import common  # noqa: E402

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]
BLOCK = re.compile(r"(<!-- generated: (\w+) ([\w/.-]+)(?: (\w+))? -->\n)(.*?)(<!-- end generated -->)", re.S)
VALUE = re.compile(r"(<!-- value ([\w/.-]+) (\"[^\"]+\"|\S+) (\S+) -->)(.*?)(<!-- end -->)")
VERDICT = re.compile(r"(<!-- verdict ([\w/.-]+) \"([^\"]+)\" -->)(.*?)(<!-- end -->)")
FIGURE = re.compile(r"\]\((?:docs/)?figures/([\w/.-]+)/([\w.-]+\.png)\)")
KEPT = ("args", "wall_clock_s", "metrics", "claims")
LEDGER = DOCS / "claims_ledger.md"


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
    rows = [[f"{c['claim']} ({c['source']})", c["measured"], common.verdict_word(c)] for c in results["claims"]]
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


def verdict(run: str, start: str) -> str:
    found = [c for c in committed(run)["claims"] if c["claim"].startswith(start)]
    if len(found) != 1:
        raise SystemExit(f"publish: {run} has {len(found)} claims that start {start!r}, not one")
    return common.verdict_word(found[0])


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
    if text.count("<!-- verdict ") != len(VERDICT.findall(text)):
        raise SystemExit('publish: a \'<!-- verdict\' marker that is not RUN "START" -->, or has no end on its line')
    text = VALUE.sub(lambda m: m.group(1) + value(m.group(2), m.group(3), m.group(4)) + m.group(6), text)
    text = VERDICT.sub(lambda m: m.group(1) + verdict(m.group(2), m.group(3)) + m.group(5), text)
    return BLOCK.sub(lambda m: m.group(1) + render(m.group(2), m.group(3), m.group(4) or "") + m.group(6), text)


def runs_quoted(text: str) -> set[str]:
    return ({run for _, _, run, _, _, _ in BLOCK.findall(text)} | {run for _, run, _, _, _, _ in VALUE.findall(text)}
            | {run for _, run, _, _, _ in VERDICT.findall(text)})


# ============================================================================================
# The claims ledger
# ============================================================================================
LEDGER_KINDS = ("yes", "no", "partly", "inconclusive", "premise not met", "not checkable here", "check being rebuilt")
LEDGER_RULE = """\
One rule for every row. The row says what the essay says, no stronger and no weaker, with its
section and its own words. Its verdict is the `holds` of the claim the row names in that run's
committed results (the link in the run column), and that claim computes the statement's own
quantities in the statement's direction and decides with the spread over seeds (an interval over
seeds, or a gap larger than the seeds' spread), never with a round number; where the seeds are
too few, it says so. An exact quantity (arithmetic, dynamic programming, a count, a construction)
needs no seeds, and an essay's approximate figure is met to the precision it is stated with. Verdicts: **yes**, **no**, **inconclusive** (the measurement cannot tell),
**premise not met** (the claim found the statement's condition absent here), **not checkable
here** (with the reason), and **partly** only where the claims of two runs, two settings of one
run (a policy before and after training, best-of-N and RL) or seeds disagree (one decides and
another cannot, or they decide both ways; a run whose setting lacks the statement's premise does
not count), each shown with its own verdict. Two readings or two parts of one statement are two
rows, each with its own verdict.

A row whose check does not follow the rule yet (it answers another question, decides by a round
number or on one seed, or is missing though the numbers are measured) gets no verdict: it is
listed under "checks being rebuilt" at the end of its essay's section, with the check as it stands,
that check's answer to its own question, and what it must compute instead. A rebuilt check
decides on the interval over seeds of what it computes: yes where the interval lies above 0 in the
statement's direction, no only where it lies below 0 (the reverse) or below the effect the
statement names, else inconclusive.
"""


def ledger_answer(run: str, statement: str) -> tuple[dict, str]:
    """The committed claim of `run` that reads `statement`, and the verdict it gives: holds
    true / false / null as yes / no / inconclusive, null as premise not met where its measured
    text says so."""
    found = [c for c in committed(run)["claims"] if c["claim"] == statement]
    if len(found) != 1:
        raise SystemExit(f"publish: the ledger names a claim that docs/results/{run}.json holds "
                         f"{len(found)} times, not once: {statement!r}")
    return found[0], common.verdict_word(found[0])


def ledger_metric(run: str, key: str) -> str:
    number = committed(run)["metrics"].get(key)
    if not isinstance(number, (int, float)):
        raise SystemExit(f"publish: the ledger names a number docs/results/{run}.json does not hold: {key!r}")
    return f"{key} = {cell(float(number))}"


def run_link(run: str) -> str:
    return f"[{run.removeprefix('studies/')}](results/{run}.json)"


def ledger_verdict(statement: dict) -> tuple[str, list[tuple[str, dict, str]]]:
    """A statement's verdict (one of LEDGER_KINDS) and its answers as (run, claim, verdict)."""
    answers = [(run, *ledger_answer(run, text)) for run, text in statement["answers"]]
    if statement["fix"]:
        return "check being rebuilt", answers
    if statement["not_checkable"]:
        return "not checkable here", answers
    verdicts = {verdict for _, _, verdict in answers}
    if len(verdicts) > 1:  # a run whose setting lacks the premise does not test the statement
        verdicts.discard("premise not met")
    return (verdicts.pop() if len(verdicts) == 1 else "partly"), answers


def ledger_rows(statements: list[dict]) -> tuple[list[list[str]], list[list[str]], dict]:
    """One essay's rows with a verdict, its rows whose check is being rebuilt, and its tally."""
    judged, rebuilt, tally = [], [], dict.fromkeys(LEDGER_KINDS, 0)
    for s in statements:
        verdict, answers = ledger_verdict(s)
        tally[verdict] += 1
        evidence = [ledger_metric(run, key) for run, key in s["metrics"]]
        several = len(answers) > 1
        measured = "<br>".join([f"{run_link(run)}: {c['measured']} ({v})" if several else c["measured"]
                                for run, c, v in answers] + ["; ".join(evidence)] * bool(evidence)) or "–"
        said = [s["says"], s["section"], f"“{s['quote']}”"]
        if verdict == "check being rebuilt":
            today = "<br>".join(f"{run_link(run)}: “{c['claim']}” ({v})" for run, c, v in answers) or "none"
            rebuilt.append([*said, today, measured, s["fix"]])
            continue
        shown = f"not checkable here: {s['not_checkable']}" if verdict == "not checkable here" else verdict
        judged.append([*said, "<br>".join(run_link(run) for run, _, _ in answers) or "–", measured, shown])
    return judged, rebuilt, tally


def ledger_page(statements: dict | None = None) -> str:
    """docs/claims_ledger.md, from the hand-kept statements and the committed claims they name."""
    statements = ledger_statements.STATEMENTS if statements is None else statements
    sections, tallies = [], {}
    for essay, rows in statements.items():
        judged, rebuilt, tallies[essay] = ledger_rows(rows)
        text = f"## {essay} (`{ledger_statements.ESSAYS[essay]}`)\n\n"
        header = ["what the essay says (our words)", "§", "its words"]
        text += (markdown_table(header + ["run", "measured", "verdict"], judged) if judged
                 else "No statement of this essay has a verdict yet.\n")
        if rebuilt:
            text += (f"\n### {essay}: checks being rebuilt\n\n"
                     + markdown_table(header + ["the check today (its answer to its own question)", "measured",
                                               "what the check must compute"], rebuilt))
        if ledger_statements.LEFT_OUT.get(essay):
            text += f"\nLeft out, not a checkable statement of the essay: {ledger_statements.LEFT_OUT[essay]}\n"
        sections.append(text)
    total = {kind: sum(t[kind] for t in tallies.values()) for kind in LEDGER_KINDS}
    tally = markdown_table(["essay", "statements", *LEDGER_KINDS],
                           [[essay, str(sum(t.values())), *map(str, t.values())] for essay, t in tallies.items()]
                           + [["**all four**", f"**{sum(total.values())}**", *(f"**{n}**" for n in total.values())]])
    return ("# What the essays claim, and what we measured\n\n"
            "<!-- docs/publish.py writes this page from docs/ledger_statements.py and docs/results/: "
            "edit those, then run it -->\n\n" + LEDGER_RULE + "\n" + tally + "\n" + "\n".join(sections))


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
    pages = {page: rendered(text) for page, text in texts.items()} | {LEDGER: ledger_page()}
    stale = [page for page, text in pages.items() if text != texts.get(page)]
    for page in stale:
        if check:
            print(f"publish: {page.relative_to(ROOT)} disagrees with docs/results", file=sys.stderr)
        else:
            page.write_text(pages[page])
    raise SystemExit(1 if check and stale else 0)


if __name__ == "__main__":
    main()
