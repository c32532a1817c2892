"""studies/06_progress.py: the prefixes, the rollouts' outcomes and each step's own accuracy on a
sampler whose behaviour is known, progress against a naive loop, the rankings, the claim both
ways and its premise, the CLI and a smoke run."""

import importlib
import itertools

import numpy as np
import pytest

import common
import lm_world
from lm_pins import hand_completions

prm = importlib.import_module("06_prm_qrm")
lab = importlib.import_module("studies.06_progress")

# 12+7=19, 19*3=57, 57-5=52: the hard step is line 1
PROBLEM = lm_world.ChainProblem(12, (("+", 7), ("*", 3), ("-", 5)))


def slipping_sampler(monkeypatch, problem=PROBLEM, calls=None):
    """A policy that writes the worked solution on from any prefix, but the multiplication one too
    high when it has to write it (the chain going on from the wrong value): from a prefix that
    holds the hard step it always succeeds, from one that lacks it never."""
    slipped = problem.values[:]
    hard = lab.hard_step(problem)
    slipped[hard + 1:] = [v + 1 for v in slipped[hard + 1:]]
    lines = [f"{slipped[i]}{op}{b}={slipped[i + 1]}" for i, (op, b) in enumerate(problem.ops)] + [f"#{slipped[-1]}"]

    def sample(policy, tokenizer, prompts, budget, generator, device, chunk=512):
        texts = []
        for prompt in prompts:
            written = prompt[len(problem.prompt):].count("\n")
            texts.append("\n".join(problem.lines[written:] if written > hard else lines[written:]))
        if calls is not None:
            calls.append(list(prompts))
        return hand_completions(list(prompts), texts), texts

    monkeypatch.setattr(lm_world, "sample", sample)


def args_for(**values) -> lab.Args:
    return lab.Args(smoke=True, steps=3, max_steps=3, label_n=1, **values)


def test_prefixes_are_the_bare_problem_then_each_line_of_the_worked_solution():
    assert lab.prefixes(PROBLEM) == ["12+7*3-5\n", "12+7*3-5\n12+7=19\n", "12+7*3-5\n12+7=19\n19*3=57\n",
                                     "12+7*3-5\n12+7=19\n19*3=57\n57-5=52\n"]
    assert lab.hard_step(PROBLEM) == 1
    assert lab.hard_mask([1, 0], 3).tolist() == [[False, True, False], [True, False, False]]


def test_rollouts_succeed_after_the_hard_step_only_and_record_each_steps_own_accuracy(monkeypatch):
    calls = []
    slipping_sampler(monkeypatch, calls=calls)
    rolled = lab.roll_out("policy", "tokenizer", [PROBLEM], args_for(rollouts=2), None, "cpu")
    assert calls == [[prefix for prefix in lab.prefixes(PROBLEM) for _ in range(2)]]
    assert rolled["success"].shape == (1, 4, 2)
    assert rolled["success"][0].tolist() == [[False] * 2, [False] * 2, [True] * 2, [True] * 2]
    # from prefix j the rollout writes line j: the easy step 0 right, the hard step 1 wrong, then right again
    assert rolled["next_right"][0].tolist() == [[True] * 2, [False] * 2, [True] * 2, [True] * 2]


def test_a_cut_rollout_fails_even_with_the_right_answer(monkeypatch):
    def sample(policy, tokenizer, prompts, budget, generator, device, chunk=512):
        texts = ["\n".join(PROBLEM.lines[p[len(PROBLEM.prompt):].count("\n"):]) for p in prompts]
        return hand_completions(list(prompts), texts, cut=[True] * len(texts)), texts

    monkeypatch.setattr(lm_world, "sample", sample)
    assert not lab.roll_out("policy", "tokenizer", [PROBLEM], args_for(rollouts=1), None, "cpu")["success"].any()


def test_progress_is_the_change_in_the_share_of_right_rollouts_naively():
    success = np.random.default_rng(0).random((5, 7, 9)) < 0.6
    progress = lab.step_progress(success)
    for p in range(5):
        for k in range(6):
            before = sum(success[p, k]) / 9
            through = sum(success[p, k + 1]) / 9
            assert progress[p, k] == pytest.approx(through - before)


def test_scores_of_the_slipping_policy_put_all_the_progress_on_the_hard_step(monkeypatch):
    slipping_sampler(monkeypatch)
    rolled = lab.roll_out("policy", "tokenizer", [PROBLEM], args_for(rollouts=3), None, "cpu")
    scores = lab.step_scores([PROBLEM], rolled["success"], label_n=2)
    assert scores["progress"].tolist() == [[0.0, 1.0, 0.0]]
    assert scores["value after the step"].tolist() == [[0.0, 1.0, 1.0]]
    assert scores["Math-Shepherd label"].tolist() == [[0.0, 1.0, 1.0]]
    assert scores["correctness"].tolist() == [[1.0, 1.0, 1.0]]
    ranks = lab.ranking(scores, lab.hard_mask([1], 3))
    assert ranks == {"progress": 1.0, "value after the step": 0.75, "Math-Shepherd label": 0.75, "correctness": 0.5}


def test_the_math_shepherd_label_is_the_chapters_on_the_prefixes_through_each_step():
    success = np.random.default_rng(1).random((3, 5, 6)) < 0.3
    labels = lab.step_scores([PROBLEM] * 3, success[:, :4], label_n=4)["Math-Shepherd label"]
    for p in range(3):
        assert labels[p].tolist() == [float(success[p, j, :4].any()) for j in range(1, 4)]
        assert labels[p].tolist() == prm.math_shepherd_labels(success[p, 1:4], 1.0, 4)[:-1]


def seed_result(seed, progress_auroc, hard=0.3, easy=0.99, label=0.5, correctness=0.5):
    return {"seed": seed, "auroc": {"progress": progress_auroc, "value after the step": 0.6,
                                    "Math-Shepherd label": label, "correctness": correctness},
            "hard_accuracy": hard, "easy_accuracy": easy, "progress_hard": 0.5, "progress_easy": 0.0}


@pytest.mark.parametrize("aurocs,hard,holds,word", [
    ((0.95, 0.97, 0.99), 0.3, True, "yes"),
    ((0.2, 0.25, 0.3), 0.3, False, "no"),
    ((0.3, 0.9, 0.6), 0.3, None, "inconclusive"),
    ((0.95, 0.97, 0.99), 0.995, None, "premise not met"),  # the hard step is not harder on every seed
])
def test_the_claim_both_ways_and_its_premise(aurocs, hard, holds, word):
    per_seed = [seed_result(i, a, hard=hard if i == 1 else 0.3) for i, a in enumerate(aurocs)]
    made = lab.progress_claim(args_for(), per_seed)
    assert made["holds"] is holds and common.verdict_word(made) == word
    assert made["source"] == "survey §4.5.3" and "correct-but-irrelevant" in made["claim"]
    assert f"progress {lab.by_seed(aurocs)}, correctness 0.500/0.500/0.500" in made["measured"]
    assert lab.CONTRAST in made["measured"]


def test_the_least_detectable_auroc_is_the_mann_whitney_null_spread():
    # every way to place 2 hard steps among 5 untied scores: AUROC's variance is (2 + 3 + 1) / (12 * 2 * 3)
    ranks = [np.isin(np.arange(5), placed) for placed in itertools.combinations(range(5), 2)]
    values = [lm_world.auroc(np.flatnonzero(h), np.flatnonzero(~h)) for h in ranks]
    assert np.var(values) == pytest.approx(1 / 12)
    assert lab.detectable_auroc(2, 3) == pytest.approx(common.t_quantile(3) * np.sqrt(1 / 12))
    assert lab.detectable_auroc(64, 448) == pytest.approx(0.0759, abs=1e-4)


@pytest.mark.parametrize("gold,hard,holds,word", [
    (0.5, 0.3, True, "yes"),  # 1 on every right step: tied, exact
    (0.6, 0.3, False, "no"),
    (0.5, 0.995, None, "premise not met"),
])
def test_the_gold_prm_claim_both_ways_and_its_premise(gold, hard, holds, word):
    per_seed = [seed_result(i, 0.99, hard=hard if i == 1 else 0.3, label=0.56, correctness=gold) for i in range(3)]
    made = lab.gold_prm_claim(args_for(problems=64), per_seed)
    assert made["holds"] is holds and common.verdict_word(made) == word
    assert made["source"] == "survey §4.5.2" and "gold step-correctness label" in made["claim"]
    assert "Math-Shepherd" not in made["claim"] + made["measured"]  # decided on its own label only
    assert ("all tied, chance on every seed, exact" in made["measured"]) is (gold == 0.5)
    assert lab.CONTRAST in made["measured"]


@pytest.mark.parametrize("labels,hard,holds,word", [
    ((0.49, 0.50, 0.51), 0.3, True, "yes"),  # chance, within the least detectable
    ((0.555, 0.561, 0.556), 0.3, False, "no"),  # the default run's: the label tells the steps apart
    ((0.45, 0.44, 0.46), 0.3, False, "no"),  # ranking the decisive step lower tells it apart too
    ((0.3, 0.5, 0.75), 0.3, None, "inconclusive"),
    ((0.49, 0.50, 0.51), 0.995, None, "premise not met"),
])
def test_the_math_shepherd_claim_both_ways_and_its_premise(labels, hard, holds, word):
    # the gold label not tied: the Math-Shepherd claim is decided on its own label only
    per_seed = [seed_result(i, 0.99, hard=hard if i == 1 else 0.3, label=a, correctness=0.6)
                for i, a in enumerate(labels)]
    made = lab.math_shepherd_claim(args_for(problems=64), per_seed)
    assert made["holds"] is holds and common.verdict_word(made) == word
    assert made["source"] == "survey §4.5.2" and "Math-Shepherd label" in made["claim"]
    assert "gold" not in made["claim"] + made["measured"]
    assert "Math-Shepherd's label (any of 1 rollouts through the step right: " in made["measured"]
    assert f") {lab.by_seed(labels)}, minus 0.5" in made["measured"]


@pytest.mark.parametrize("argv,message", [
    (("--steps", "1"), "--steps must be at least 2"),
    (("--steps", "20"), "within --min-steps..--max-steps"),
    (("--label-n", "17"), "--label-n must be in 1..--rollouts"),
    (("--hard-accuracy", "0"), "--hard-accuracy must be in (0, 1]"),
    (("--repeats", "0"), "--repeats must be positive"),
])
def test_bad_flags_stop_with_one_line(cli_error, argv, message):
    assert message in cli_error("studies.06_progress", *argv)


def test_the_default_policy_is_studies_07_lengths_cold_start():
    lengths = importlib.import_module("studies.07_lengths")
    assert lab.Args().cold_start == lengths.Args().cold_start


def test_smoke_run_writes_results_a_figure_and_the_claim_and_repeats_exactly(tmp_path, read_results):
    def run(out):
        lab.main(lab.Args(smoke=True, device="cpu", out=str(tmp_path / out), cache=str(tmp_path / "cache")))
        return read_results(tmp_path / out / "results.json")

    first, second = run("a"), run("b")
    assert (tmp_path / "a" / "progress.png").stat().st_size > 1000
    assert [c["source"] for c in first["claims"]] == ["survey §4.5.3", "survey §4.5.2", "survey §4.5.2"]
    assert first["metrics"] == second["metrics"] and first["claims"] == second["claims"]
    rows = first["metrics"]["tables"]["progress"]["rows"]
    assert [row[0] for row in rows] == [0, 1, "mean"] and all(row[-1] == 0.5 for row in rows)
