"""studies/06_seeds.py: the chapter's experiment on several seeds, its claims decided over them; the
per-seed table; the CLI; a smoke run whose seeds are the chapter's own runs, in any order."""

import importlib
import json

import pytest

import common

prm = importlib.import_module("06_prm_qrm")
seeds = importlib.import_module("studies.06_seeds")


def seed_run(drop: float, qrm: float, prm_golds: tuple) -> dict:
    """What run_seed keeps of one seed: localisation results and the RL runs' held-out evaluations."""
    results = {name: {"auroc": a, "top1": 0.5} for name, a in zip(seeds.LOCALISED, (0.4, drop, qrm))}
    runs = {m: {"evals": [{"step": s, "pass@1": g} for s, g in zip((0, 10, 20), golds)]}
            for m, golds in zip(prm.RL_METHODS, ((0.25, 0.3, 0.35), prm_golds, (0.25, 0.3, 0.3)))}
    return {"credit": {"solutions": 5, "results": results}, "runs": runs}


def test_the_table_holds_each_seeds_numbers_and_their_mean():
    table = seeds.seed_table({0: seed_run(0.7, 0.6, (0.25, 0.5, 0.25)), 4: seed_run(0.8, 0.4, (0.25, 0.45, 0.4))})
    assert table["header"] == ["", "seed 0", "seed 4", "mean"]
    rows = {row[0]: row[1:] for row in table["rows"]}
    assert rows["AUROC, PRM drop (score - previous)"] == pytest.approx([0.7, 0.8, 0.75])
    assert rows["AUROC, Q-RM (mean Z of the step)"] == pytest.approx([0.6, 0.4, 0.5])
    assert rows[f"peak pass@1, {prm.RL_METHODS['prm']}"] == pytest.approx([0.5, 0.45, 0.475])
    assert rows[f"final pass@1, {prm.RL_METHODS['prm']}"] == pytest.approx([0.25, 0.4, 0.325])
    assert rows[f"final pass@1, {prm.RL_METHODS['outcome']}"] == pytest.approx([0.35, 0.35, 0.35])


@pytest.mark.parametrize("value", ["1", "1,1"])
def test_cli_needs_two_different_seeds(cli_error, value):
    assert "--seeds must be at least two different seeds" in cli_error("studies.06_seeds", "--seeds", value)


def test_smoke_run_is_the_chapters_run_on_each_seed_and_decides_over_them(tmp_path, read_results):
    cache = str(tmp_path / "cache")
    study = seeds.main(seeds.Args(smoke=True, device="cpu", seeds="1,0", out=str(tmp_path / "study"), cache=cache))
    data = read_results(tmp_path / "study" / "results.json")
    chapter = prm.main(prm.Args(smoke=True, device="cpu", seed=0, out=str(tmp_path / "chapter"), cache=cache))
    # seed 0, run after seed 1 on the same policy, is the chapter's own seed-0 run: nothing leaks between seeds
    compared = [k for k in chapter["metrics"] if k.startswith("localisation_") or k.endswith("_pass@1_final")]
    assert len(compared) == 2 * 5 + 3  # AUROC and top-1 of five credits, three RL runs
    assert {k: study["metrics"][f"seed0_{k}"] for k in compared} == {k: chapter["metrics"][k] for k in compared}
    # the claims are the chapter's, given every seed's results at once
    kept = [data["seeds"][s] for s in ("1", "0")]
    expected = (prm.credit_claims(*(k["credit"] for k in kept))
                + prm.rl_claims(common.apply_smoke(prm.Args(smoke=True)), *(k["runs"] for k in kept)))
    assert json.dumps(common.json_ready(expected)) == json.dumps(data["claims"])
    assert len(data["claims"]) == 6 and all("over 2 seeds" in c["measured"] for c in data["claims"])
    assert data["metrics"]["tables"]["seeds"]["header"] == ["", "seed 1", "seed 0", "mean"]
