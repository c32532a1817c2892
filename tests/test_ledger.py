"""The claims ledger is generated: docs/claims_ledger.md is what docs/publish.py writes from the
hand-kept statements (docs/ledger_statements.py) and the committed results; every claim a statement
names exists; every quote stands verbatim in its essay."""

import importlib
import json
import os
import re
from pathlib import Path

import pytest

publish = importlib.import_module("docs.publish")
statements = importlib.import_module("docs.ledger_statements")

ROWS = [(essay, row) for essay, rows in statements.STATEMENTS.items() for row in rows]
ESSAY_DIRS = [Path(os.environ.get("ESSAYS", "/nonexistent")), publish.ROOT / "shared" / "essays",
              publish.ROOT.parent / "shared" / "essays"]
ESSAY_DIR = next((d for d in ESSAY_DIRS if d.is_dir()), None)


def test_the_committed_ledger_is_the_generated_one():
    assert publish.LEDGER.read_text() == publish.ledger_page(), "docs/claims_ledger.md is stale: run python docs/publish.py"


@pytest.mark.parametrize("essay, row", ROWS, ids=[f"{e} {r['section']} {r['says'][:40]}" for e, r in ROWS])
def test_every_row_is_well_formed_and_names_claims_that_exist(essay, row):
    assert essay in statements.ESSAYS
    assert row["quote"] and row["says"] and row["section"]
    assert len(row["quote"]) <= 200, "a quote is the essay's own words, kept short"
    assert row["how"] in {"keep", "rephrase", "re-point", "new"}
    # a row is answered by claims, or not checkable here (naming none), or its check is being rebuilt
    assert bool(row["answers"]) + bool(row["not_checkable"]) + bool(row["fix"]) >= 1
    assert not (row["not_checkable"] and (row["answers"] or row["fix"]))
    assert not row["metrics"] or row["fix"], "numbers without a claim are shown only beside a check being rebuilt"
    for run, claim in row["answers"]:
        publish.ledger_answer(run, claim)  # stops if the committed results do not hold exactly one such claim
    for run, key in row["metrics"]:
        publish.ledger_metric(run, key)


def normalised(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.skipif(ESSAY_DIR is None, reason="the essays are not on this machine (set ESSAYS to their folder)")
@pytest.mark.parametrize("essay, row", ROWS, ids=[f"{e} {r['section']} {r['says'][:40]}" for e, r in ROWS])
def test_every_quote_is_verbatim_in_its_essay(essay, row):
    text = normalised((ESSAY_DIR / statements.ESSAYS[essay]).read_text())
    assert normalised(row["quote"]) in text, f"not in {statements.ESSAYS[essay]}: {row['quote']!r}"


@pytest.fixture
def two_runs(tmp_path, monkeypatch):
    """A docs folder with two committed runs whose claims cover every verdict."""
    monkeypatch.setattr(publish, "DOCS", tmp_path)
    (tmp_path / "results").mkdir()
    claims = {"a": [("up", True), ("down", False), ("unclear", None), ("premise", None), ("same", True)],
              "b": [("same", False)]}
    for run, found in claims.items():
        listed = [{"source": "s", "claim": c, "holds": h,
                   "measured": "premise not met: no gain" if c == "premise" else f"{c} measured"} for c, h in found]
        (tmp_path / "results" / f"{run}.json").write_text(json.dumps({"metrics": {"x": 0.12345}, "claims": listed}))
    return tmp_path


def row(*answers, **fields) -> dict:
    return statements.said("§1", "q", "s", *answers, **fields)


def test_each_holds_maps_to_one_verdict_and_disagreeing_runs_give_partly(two_runs):
    verdict = lambda *answers, **f: publish.ledger_verdict(row(*answers, **f))[0]  # noqa: E731
    assert verdict(("a", "up")) == "yes"
    assert verdict(("a", "down")) == "no"
    assert verdict(("a", "unclear")) == "inconclusive"
    assert verdict(("a", "premise")) == "premise not met"
    assert verdict(("a", "up"), ("a", "same")) == "yes"
    assert verdict(("a", "same"), ("b", "same")) == "partly"
    assert verdict(("a", "up"), ("a", "premise")) == "yes"  # a run without the premise does not test it
    assert verdict(("a", "down"), ("a", "unclear")) == "partly"  # one run decides, the other cannot
    assert verdict(not_checkable="no such run") == "not checkable here"
    assert verdict(("a", "up"), fix="compute this instead") == "check being rebuilt"


def test_a_statement_naming_a_missing_claim_stops_the_publish(two_runs):
    with pytest.raises(SystemExit, match="holds 0 times, not once: 'gone'"):
        publish.ledger_verdict(row(("a", "gone")))
    with pytest.raises(SystemExit, match="does not hold: 'y'"):
        publish.ledger_page({"whole-game": [row(("a", "up"), fix="f", metrics=(("a", "y"),))]})


def test_the_page_shows_each_verdict_its_measurements_and_the_checks_being_rebuilt(two_runs):
    page = publish.ledger_page({"whole-game": [row(("a", "same"), ("b", "same")), row(not_checkable="no robot"),
                                               row(("a", "up"), fix="compute z", metrics=(("a", "x"),))]})
    assert "| whole-game | 3 | 0 | 0 | 1 | 0 | 0 | 1 | 1 |" in page
    assert "[a](results/a.json): same measured (yes)<br>[b](results/b.json): same measured (no) | partly |" in page
    assert "| not checkable here: no robot |" in page
    assert "### whole-game: checks being rebuilt" in page
    assert "| [a](results/a.json): “up” (yes) | up measured<br>x = 0.123 | compute z |" in page
