"""The docs never disagree with their runs: every generated table in the docs and the README is
what docs/publish.py writes from the committed results, and every figure they show is committed."""

import importlib
import json

import pytest

publish = importlib.import_module("docs.publish")


@pytest.mark.parametrize("page", publish.PAGES, ids=lambda p: p.name)
def test_every_generated_block_matches_the_committed_results(page):
    text = page.read_text()
    assert publish.rendered(text) == text, f"{page.name} is stale: run python docs/publish.py"


@pytest.mark.parametrize("page", publish.PAGES, ids=lambda p: p.name)
def test_every_figure_shown_is_committed(page):
    for run, name in publish.FIGURE.findall(page.read_text()):
        assert (publish.DOCS / "figures" / run / name).exists(), f"{page.name} shows figures/{run}/{name}"


def test_every_committed_result_is_quoted_by_a_page():
    quoted = set().union(*(publish.runs_quoted(page.read_text()) for page in publish.PAGES))
    committed = {str(p.relative_to(publish.DOCS / "results").with_suffix(""))
                 for p in (publish.DOCS / "results").rglob("*.json")}
    assert committed <= quoted


@pytest.fixture
def one_run(tmp_path, monkeypatch):
    """A docs folder holding one committed run, "demo", with two claims and one metric."""
    monkeypatch.setattr(publish, "DOCS", tmp_path)
    (tmp_path / "results").mkdir()
    results = {"args": {}, "wall_clock_s": 1.4,
               "metrics": {"pass@1": 0.41234, "tables": {"pass": {"header": ["k", "pass@k"], "rows": [[1, 0.41234]]}}},
               "claims": [{"source": "survey §3", "claim": "a | b", "measured": "0.5", "holds": True},
                          {"source": "s", "claim": "c", "measured": "m", "holds": None}]}
    (tmp_path / "results" / "demo.json").write_text(json.dumps(results))
    return tmp_path


def test_a_stale_block_is_rewritten_and_the_text_around_it_kept(one_run):
    page = ("intro\n<!-- generated: claims demo -->\nold numbers\n<!-- end generated -->\nmiddle\n"
            "<!-- generated: table demo pass -->\n<!-- end generated -->\nend\n")
    new = publish.rendered(page)
    assert new == ("intro\n<!-- generated: claims demo -->\n"
                   "| claim (source) | measured | verdict |\n|---|---|---|\n"
                   "| a \\| b (survey §3) | 0.5 | yes |\n| c (s) | m | inconclusive |\n<!-- end generated -->\nmiddle\n"
                   "<!-- generated: table demo pass -->\n| k | pass@k |\n|---|---|\n| 1 | 0.412 |\n<!-- end generated -->\nend\n")
    assert publish.rendered(new) == new and publish.runs_quoted(new) == {"demo"}


def test_a_value_is_the_runs_number_in_its_format_and_stale_ones_are_rewritten(one_run):
    page = ("pass@1 is <!-- value demo pass@1 .3f -->0.9<!-- end --> | "
            "<!-- value demo wall_clock_s .0f -->7<!-- end --> s\n")
    assert publish.rendered(page) == ("pass@1 is <!-- value demo pass@1 .3f -->0.412<!-- end --> | "
                                      "<!-- value demo wall_clock_s .0f -->1<!-- end --> s\n")
    assert publish.runs_quoted(page) == {"demo"}
    assert publish.rendered('<!-- value demo "pass@1" .1% -->x<!-- end -->') == '<!-- value demo "pass@1" .1% -->41.2%<!-- end -->'
    with pytest.raises(SystemExit, match="has no number 'tables'"):
        publish.rendered("<!-- value demo tables .3f -->x<!-- end -->")
    with pytest.raises(SystemExit, match="not RUN KEY FORMAT"):
        publish.rendered("<!-- value demo pass@1 -->x<!-- end -->")


def test_a_verdict_is_the_one_claim_that_starts_so_in_the_runs_words(one_run):
    page = 'a: <!-- verdict demo "a | b" -->no<!-- end -->; c: <!-- verdict demo "c" -->yes<!-- end -->\n'
    assert publish.rendered(page) == ('a: <!-- verdict demo "a | b" -->yes<!-- end -->; '
                                      'c: <!-- verdict demo "c" -->inconclusive<!-- end -->\n')
    assert publish.runs_quoted(page) == {"demo"}
    with pytest.raises(SystemExit, match="has 0 claims that start 'z', not one"):
        publish.rendered('<!-- verdict demo "z" -->x<!-- end -->')
    with pytest.raises(SystemExit, match="not RUN \"START\""):
        publish.rendered("<!-- verdict demo c -->x<!-- end -->")


def test_a_block_without_committed_results_or_table_stops_with_one_line(one_run):
    with pytest.raises(SystemExit, match="no committed results for other"):
        publish.rendered("<!-- generated: claims other -->\n<!-- end generated -->")
    with pytest.raises(SystemExit, match="unknown block 'table demo nothing'"):
        publish.rendered("<!-- generated: table demo nothing -->\n<!-- end generated -->")
    with pytest.raises(SystemExit, match="unknown block 'claims demo pass'"):
        publish.rendered("<!-- generated: claims demo pass -->\n<!-- end generated -->")


def test_a_marker_that_does_not_parse_stops_instead_of_hiding_its_block(one_run):
    for page in ("<!-- generated: table demo pass@1 -->\n<!-- end generated -->",
                 "<!-- generated: claims demo -->\nno end"):
        with pytest.raises(SystemExit, match="not KIND RUN"):
            publish.rendered(page)


def test_figure_links_name_the_run_and_the_file():
    text = "![a](figures/02_gae/bias.png) ![b](docs/figures/studies/05_length/variance.png)"
    assert publish.FIGURE.findall(text) == [("02_gae", "bias.png"), ("studies/05_length", "variance.png")]
