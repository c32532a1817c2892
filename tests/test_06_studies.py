"""studies/06_overoptimisation.py: the ORM, a PRM's score of a whole solution and Q-RM's advantages
(what the chapter leaves out), label quality and the PRM's calibration, best-of-N and majority vote,
the RL comparison, GRPO on the ORM with and without KL, Gao et al.'s forms, length bias, the seeds'
mean, every claim's verdict on constructed seeds, the CLI and a smoke run. The hand-made problems,
fake sampler and fake reward models are the chapter's tests'."""

import dataclasses
import importlib
import json
import math

import numpy as np
import pytest
import torch
from test_06_prm_qrm import (
    GROUPED,
    GROUPED_REWARDS,
    LABELLED,
    POLICY,
    PROBLEM,
    RIGHT,
    SLIP,
    SMALL,
    SMALL_RIGHT,
    SMALL_SLIP,
    TOK,
    HandArgs,
    fake_reward_models,
    fake_sampler,
    labelled_data,
    record_samples,
    step_ends_by_hand,
)

import common
import lm_pins
import lm_world
from lm_pins import hand_completions

prm = importlib.import_module("06_prm_qrm")
overopt = importlib.import_module("studies.06_overoptimisation")
critic05 = importlib.import_module("studies.05_critic")  # what the ppo part restates, pinned here


# ------------------------------------------------- what the chapter leaves out: ORM, aggregation, Q-RM in RL
def test_the_orm_reads_the_verdict_on_the_last_token_and_trains_between_the_prm_and_q_rm(monkeypatch):
    """All three scorers are made before any trains and fitted in the order prm, orm, qrm (one
    random stream); the ORM's loss is the PRM's on each row's last token, against the verdict."""
    data = labelled_data()
    fits, bce = {}, []
    real_bce = prm.step_bce

    def fit_once(scorer, loss, n_items, args, rng, desc):
        fits[desc] = (scorer, n_items)
        scorer.eval()
        return [loss(scorer, torch.arange(n_items)).item()]

    def bce_spy(scores, targets, ends):
        bce.append((targets, ends))
        return real_bce(scores, targets, ends)

    monkeypatch.setattr(prm, "fit_scorer", fit_once)
    monkeypatch.setattr(prm, "step_bce", bce_spy)
    made, real_make = [], prm.make_scorer

    def make_spy(policy):
        made.append(len(fits))  # how many had been trained when this one was made
        return real_make(policy)

    monkeypatch.setattr(prm, "make_scorer", make_spy)
    models = overopt.train_reward_models(lm_pins.tiny_model(0)[0], TOK, data, prm.Args())
    assert list(fits) == list(overopt.REWARD_MODELS) and made == [0, 0, 0]  # all made before the first fit
    assert [fits[k] for k in fits] == [(models["prm"], 5), (models["orm"], 5), (models["qrm"], 3)]
    mask = data["completions"].completion_mask
    targets, ends = torch.zeros(mask.shape), torch.zeros(mask.shape, dtype=torch.bool)
    for row, text in enumerate(LABELLED):
        targets[row, len(text)], ends[row, len(text)] = data["rewards"][row], True  # the EOS after the text
    (_, (orm_targets, orm_ends)) = bce
    assert torch.equal(orm_targets, targets) and torch.equal(orm_ends, ends)


def test_orm_reads_the_last_completion_token():
    mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    assert overopt.last_token_mask(mask).tolist() == [[False, False, True, False], [True, False, False, False]]


def test_min_and_product_aggregation_by_hand():
    probs = torch.tensor([[0.9, 0.5, 0.8, 0.1], [0.7, 0.2, 0.6, 0.3]])
    end_tokens = torch.tensor([[0, 2, -1], [1, 2, 3]])  # row 0 has two steps, row 1 three
    assert torch.allclose(overopt.prm_min(probs, end_tokens), torch.tensor([0.8, 0.2]))
    assert torch.allclose(overopt.prm_product(probs, end_tokens), torch.tensor([0.72, 0.036]))
    assert torch.allclose(overopt.prm_mean(probs, end_tokens), torch.tensor([0.85, 1.1 / 3]))  # padding steps left out


def test_token_advantages_are_standardised_within_each_group():
    z = torch.tensor([[1.0, 2.0, 9.0], [3.0, 4.0, 9.0], [5.0, 5.0, 5.0], [5.0, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]], dtype=torch.bool)
    A = overopt.token_advantages(z, mask, group_size=2)
    assert A[0, 2] == 0 and torch.isclose(A[:2][mask[:2]].mean(), torch.tensor(0.0), atol=1e-6)
    assert torch.isclose(A[:2][mask[:2]].std(), torch.tensor(1.0), atol=1e-3)
    assert (A[2:] == 0).all()  # all-equal credit: no signal, no NaN


def test_qrm_advantages_are_its_token_scores_standardised_per_group(monkeypatch):
    given = fake_reward_models(monkeypatch)
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    A = overopt.qrm_advantage_fn("QRM", 2)(r, GROUPED_REWARDS, [SMALL, PROBLEM])
    torch.testing.assert_close(A, overopt.token_advantages(given["QRM"], r.completion_mask, 2))




def test_label_quality_is_the_exact_expectation_over_subsets_of_rollouts():
    gold = np.array([True, True, False, False])
    counts = np.array([4, 0, 1, 0])  # right steps: always / never finished; wrong steps: once lucky / never
    q = overopt.label_quality(gold, counts, rollouts=4, n=4)
    assert q == {"accuracy": 0.5, "false_positive_rate": 0.5, "false_negative_rate": 0.5}
    q = overopt.label_quality(gold, counts, rollouts=4, n=1)  # a single rollout finds the lucky one 1 time in 4
    assert math.isclose(q["false_positive_rate"], 0.125) and q["false_negative_rate"] == 0.5
    rng = np.random.default_rng(0)  # against drawing 1 rollout of the 4 at random
    draws = np.array([[rng.integers(4) < c for c in counts] for _ in range(20000)])
    assert abs(draws[:, 2:].mean() - q["false_positive_rate"]) < 0.01


def test_label_study_scores_each_step_from_its_rollouts(monkeypatch):
    """Solutions of two problems, two each (right, wrong); every step prefix rolled out 4 times."""
    g0, g1 = PROBLEM.prompt + "12+7=19\n", PROBLEM.prompt + "12+7=19\n19*3=57\n"
    g2, w1 = g1 + "57-5=52\n", g0 + "19*3=56\n"
    w2, h0, h0_slip = w1 + "56-5=51\n", SMALL.prompt + "3+1=4\n", SMALL.prompt + "3+1=5\n"
    R, W, r, w = ("#52", False), ("#0", False), ("#4", False), ("#0", False)
    fake_sampler(monkeypatch, {
        PROBLEM.prompt: [(RIGHT, False), (SLIP, False)], SMALL.prompt: [(SMALL_RIGHT, False), (SMALL_SLIP, False)],
        g0: [R, R, W, R] + [R, W, R, R],  # the right solution's rollouts from here, then the slip's
        g1: [R, R, R, R], g2: [W, R, R, W], w1: [W, W, W, R], w2: [W, W, W, W],
        h0: [w, r, w, w], h0_slip: [w, w, r, r]})
    args = HandArgs(hand_problems=(PROBLEM, SMALL), label_prompts=2, label_samples=2, rollouts_per_prefix=4,
                    label_n=2)
    data = prm.label_study(POLICY, TOK, args, "cpu")
    data.update(overopt.label_quality_study(data, args.rollouts_per_prefix, [1, 4]))
    assert data["problems"] == [PROBLEM, PROBLEM, SMALL, SMALL] and data["rewards"].tolist() == [1, 0, 1, 0]
    assert [prm.gold_step_labels(p, t) for p, t in zip(data["problems"], data["texts"])] == [
        [True] * 4, [True, False, False, False], [True, True], [False, False]]
    # labels from the first label_n = 2 rollouts; the last step's is the verifier's verdict
    assert data["labels"] == [[1, 1, 1, 1], [1, 0, 0, 0], [1, 1], [0, 0]]
    gold = np.array([True] * 5 + [False] * 3 + [True, True, False, False])
    right_of_4 = np.array([3, 4, 2, 4, 3, 1, 0, 0, 1, 4, 2, 0])  # of all 4 rollouts; the last steps: 4 or 0
    for n in (1, 4):
        assert data["quality"][n] == overopt.label_quality(gold, right_of_4, 4, n)
    inner = np.array([1, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 0], dtype=bool)
    assert data["quality_inner_steps"][4] == overopt.label_quality(gold[inner], right_of_4[inner], 4, 4)
    soft = right_of_4 / 4
    assert data["soft_auroc"] == pytest.approx(lm_world.auroc(soft[gold], soft[~gold])) and data["soft_auroc"] > 0.8
    assert data["soft_mean_on_gold_right"] == pytest.approx(soft[gold].mean())
    assert data["soft_mean_on_gold_wrong"] == pytest.approx(soft[~gold].mean())
    assert data["steps_labelled"] == 12 and data["prefixes_rolled_out"] == 8


def test_best_of_n_kl_formula_against_the_exact_kl_of_best_of_n():
    assert overopt.best_of_n_kl(1) == 0.0 and math.isclose(overopt.best_of_n_kl(2), math.log(2) - 0.5)
    M = 100_000  # a base policy uniform over M outcomes with distinct rewards (nearly continuous)
    i = np.arange(1, M + 1)
    for n in (2, 4, 16):
        best = (i / M) ** n - ((i - 1) / M) ** n  # P(the best of n draws is outcome i)
        exact = float((best * np.log(best * M)).sum())
        assert exact <= overopt.best_of_n_kl(n) + 1e-9 and math.isclose(exact, overopt.best_of_n_kl(n), rel_tol=1e-3)


def test_best_of_n_and_majority_by_hand():
    scores = np.array([[0.1, 0.9, 0.5]])
    correct = np.array([[0.0, 1.0, 0.0]])
    curve = overopt.best_of_n(scores, correct, [1, 2, 3], repeats=3000, rng=np.random.default_rng(0))
    assert curve[3] == 1.0 and abs(curve[1] - 1 / 3) < 0.03 and abs(curve[2] - 2 / 3) < 0.03
    codes = overopt.answer_codes(["1+1=2\n#2", "#3", "#2", "#x", ""])
    assert codes[:3].tolist() == [2, 3, 2] and codes[3] != codes[4] and codes[3] < 0
    majority = overopt.majority_of_n(codes[None, :3], np.array([[1.0, 0.0, 1.0]]), [3], 10, np.random.default_rng(0))
    assert majority[3] == 1.0


def test_held_out_study_pairs_every_score_with_its_own_sample(monkeypatch):
    """Four samples of each of two problems; the fake reward models' scores are read back by hand
    (PRM where steps end, ORM on EOS, Q-RM over the tokens) and each reranker's best-of-N is
    recomputed on them with the study's own random draws."""
    cut_right = "12+7=19\n19*3=57\n57-5=52\n#52"  # right text, but no EOS within the budget: scores 0
    samples = {PROBLEM.prompt: [(SLIP, False), (RIGHT, False), (cut_right, True), ("12+7=19\n#19", False)],
               SMALL.prompt: [(SMALL_SLIP, False), ("3+1=4\n#5", False), ("#4", False), (SMALL_RIGHT, False)]}
    fake_sampler(monkeypatch, samples)
    # the ORM ranks the right samples first: its best-of-4 is the oracle's, if its scores stay with their samples
    given = fake_reward_models(monkeypatch, {"ORM": [0.0, 2.0, 1.5, -1.0, 0.5, 1.0, 3.0, 2.5]})
    monkeypatch.setattr(overopt, "calibration_study", lambda *a: "calibration")  # tested on its own below
    run = HandArgs(hand_problems=(PROBLEM, SMALL), eval_problems=2, credit_samples=4)
    held = overopt.held_out_study(POLICY, TOK, {"prm": "PRM", "orm": "ORM", "qrm": "QRM"}, run,
                                  overopt.Args(bon_samples=4, bon_repeats=8), "cpu")
    texts = [t for p in (PROBLEM, SMALL) for t, _ in samples[p.prompt]]
    correct = np.array([0, 1, 0, 0, 0, 0, 1, 1.0])
    assert held["ns"] == [1, 2, 4] and held["samples"] == 8 and held["pass@1"] == 3 / 8
    p_step = torch.sigmoid(given["PRM"])
    ends = [step_ends_by_hand(t)[:-1] + [len(t) - (i == 2)] for i, t in enumerate(texts)]  # the cut one ends on "2"
    z = given["QRM"]
    scores = {"PRM-min": [float(p_step[i, e].min()) for i, e in enumerate(ends)],
              "PRM-mean": [float(p_step[i, e].mean()) for i, e in enumerate(ends)],
              "PRM-product": [float(p_step[i, e].prod()) for i, e in enumerate(ends)],
              "ORM": [float(torch.sigmoid(given["ORM"][i, e[-1]])) for i, e in enumerate(ends)],
              "Q-RM (mean Z)": [float(z[i, :e[-1] + 1].mean()) for i, e in enumerate(ends)]}
    for name, s in scores.items():
        expected = overopt.best_of_n(np.reshape(s, (2, 4)), correct.reshape(2, 4), [1, 2, 4], 8, np.random.default_rng(5))
        assert held["curves"][name] == pytest.approx(expected), name
    assert held["curves"]["ORM"][4] == 1.0 and held["curves"]["PRM-min"][4] < 1.0
    codes = overopt.answer_codes(texts).reshape(2, 4)
    assert held["curves"]["majority vote"] == overopt.majority_of_n(codes, correct.reshape(2, 4), [1, 2, 4], 8,
                                                                np.random.default_rng(5))
    assert held["curves"]["oracle (pass@N)"] == pytest.approx({1: 3 / 8, 2: (0.5 + 5 / 6) / 2, 4: 1.0})
    orm = np.reshape(scores["ORM"], (2, 4))
    assert held["orm_proxy_of_pick"] == pytest.approx(overopt.best_of_n(orm, orm, [1, 2, 4], 8, np.random.default_rng(5)))
    assert held["orm_proxy_of_pick"][4] == pytest.approx(orm.max(1).mean())
    lengths = np.array([len(t) + 1 - (i == 2) for i, t in enumerate(texts)])  # EOS counts; the cut one has none
    assert held["completions"].lengths.tolist() == lengths.tolist() and held["correct"].tolist() == correct.tolist()
    for name in ("ORM", "PRM-min", "Q-RM (mean Z)"):
        assert held["length_corr"][name] == pytest.approx(overopt.length_correlations(scores[name], lengths, correct),
                                                          nan_ok=True), name
    assert held["stats"] == overopt.output_stats([PROBLEM] * 4 + [SMALL] * 4, texts, correct, lengths)
    # the failed, complete solutions whose first wrong step is a line: SLIP, "12+7=19\n#19", SMALL_SLIP, "3+1=4\n#5"
    credit = held["credit"]
    assert credit["solutions"] == 4
    failed, wrong = [0, 3, 4, 5], [1, 1, 0, 1]
    step_scores = [p_step[i, ends[i]].numpy() for i in failed]
    assert credit["results"]["PRM step score"] == pytest.approx(lm_world.localisation(step_scores, wrong))
    drops = [s - np.concatenate([[1.0], s[:-1]]) for s in step_scores]
    assert credit["results"]["PRM drop (score - previous)"] == pytest.approx(lm_world.localisation(drops, wrong))
    step_means = [[float(z[i, ([-1] + ends[i])[k] + 1:ends[i][k] + 1].mean()) for k in range(len(ends[i]))] for i in failed]
    assert credit["results"]["Q-RM (mean Z of the step)"] == pytest.approx(
        lm_world.localisation([np.array(m) for m in step_means], wrong))
    assert held["format"] == pytest.approx(overopt.format_scores(np.array(scores["PRM-min"]), texts, correct), nan_ok=True)
    assert held["calibration"] == "calibration" and "example" not in credit


# ------------------------------------------------------------------ what well-formed wrong answers score, calibration
def test_format_scores_count_the_wrong_answers_of_each_form_that_reach_the_median_right_one():
    texts = [SLIP, "12+7=19\n#19", "#51", RIGHT, SMALL_RIGHT, "3+1=5\n#5"]  # three well-formed wrong, one bare wrong
    correct = np.array([0, 0, 0, 1, 1, 0])
    scores = np.array([0.9, 0.1, 0.99, 0.5, 0.7, 0.6])  # the right ones' median: 0.6
    found = overopt.format_scores(scores, texts, correct)
    assert found == pytest.approx({"formed_wrong": 3, "median_right": 0.6, "share_reaching_median_right": 2 / 3,
                                   "formed_wrong_mean": 1.6 / 3, "unformed_wrong": 1, "unformed_wrong_mean": 0.99,
                                   "unformed_share_reaching_median_right": 1.0})
    all_formed = overopt.format_scores(scores, texts[:2] + [SLIP] + texts[3:], correct)  # no bare wrong answer left
    assert all_formed["unformed_wrong"] == 0 and math.isnan(all_formed["unformed_share_reaching_median_right"])
    assert math.isnan(overopt.format_scores(scores, texts, np.zeros(6))["share_reaching_median_right"])  # no right one


def test_calibration_distances_are_unbiased_where_the_square_of_one_estimate_is_not():
    """200,000 prefixes, value p uniform, the PRM's score s = p + 0.1: its distance to the value is
    0.01 and to the label's mean 1 - (1 - p)^n is known in closed form; 2n Bernoulli(p) rollouts
    each. The naive squared error of the share right adds its variance p(1 - p)/2n."""
    rng, n = np.random.default_rng(0), 4
    p = rng.random(200_000)
    s = p + 0.1
    outcomes = rng.random((len(p), 2 * n)) < p[:, None]
    found = overopt.calibration(s, outcomes.astype(float), n)
    q = 1 - (1 - p) ** n
    assert found["to_value"] == pytest.approx(0.01, abs=1e-3)
    assert found["to_label_mean"] == pytest.approx(np.mean((s - q) ** 2), abs=2e-3)
    naive = np.mean((s - outcomes.mean(1)) ** 2)
    assert naive - 0.01 == pytest.approx(np.mean(p * (1 - p)) / (2 * n), abs=1e-3)  # what the halves take away
    assert found["value"] == pytest.approx(0.5, abs=5e-3) and found["label_mean"] == pytest.approx(q.mean(), abs=5e-3)
    assert found["prefixes"] == len(p) and found["score"] == pytest.approx(s.mean())


def test_calibration_study_rolls_out_the_inner_prefixes_of_evenly_spaced_samples(monkeypatch):
    """Four held-out samples, two to calibrate (rows 0 and 2): each inner step prefix rolled out
    2 x label_n times; the PRM's score read where that step ends."""
    texts = [SLIP, "#52", SMALL_SLIP, RIGHT]
    held = {"problems": [PROBLEM, PROBLEM, SMALL, PROBLEM], "texts": texts,
            "prm_probs": torch.rand(4, 30, generator=torch.Generator().manual_seed(0)),
            "ends": torch.tensor([step_ends_by_hand(t) + [-1] * (4 - len(step_ends_by_hand(t))) for t in texts])}
    calls, outcomes = [], [np.array([[1, 0, 0, 0]] * 3, bool), np.array([[1, 1, 0, 1]], bool)]  # 3 and 1 inner steps

    def rollouts(policy, tokenizer, problems, texts, n, budget, generator, device):
        calls.append((problems, texts, n, budget))
        return outcomes

    monkeypatch.setattr(prm, "rollout_outcomes", rollouts)
    run = HandArgs(label_n=2, max_new_tokens=48)
    found = overopt.calibration_study(POLICY, TOK, held, run, overopt.Args(calibration_solutions=2), "cpu")
    assert calls == [([PROBLEM, SMALL], [SLIP, SMALL_SLIP], 4, 48)]
    scores = np.concatenate([held["prm_probs"][0, step_ends_by_hand(SLIP)[:3]], held["prm_probs"][2, [5]]])
    assert found == pytest.approx(overopt.calibration(scores, np.concatenate(outcomes).astype(float), 2))


# ------------------------------------------------------------------ RL: the chapter's advantages and the ORM's
def test_proxy_advantages_are_grpo_on_the_orms_score_at_eos_and_log_it(monkeypatch):
    given = fake_reward_models(monkeypatch)
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    log = []
    A = overopt.proxy_advantage_fn("ORM", 2, log)(r, GROUPED_REWARDS, [SMALL, PROBLEM])
    proxy = torch.sigmoid(given["ORM"][torch.arange(4), [len(t) for t in GROUPED]])  # read on EOS
    grpo = lm_pins.grpo.group_advantages(proxy.view(2, 2), "grpo")  # 05's: (r - mean) / (std + eps)
    torch.testing.assert_close(A, grpo.flatten()[:, None] * r.completion_mask)
    assert log == [{"proxy": pytest.approx(float(proxy.mean()))}]


def spy_training(monkeypatch, r, initial) -> tuple[dict, list]:
    """prm.train, what_it_writes and sample_stats replaced: each run's arguments and advantages on r
    recorded by its desc, and the policy each measure is taken of."""
    seen, measured = {}, []

    def train_spy(policy, reference, tokenizer, args, advantage_fn, held_out, device, desc="RL"):
        assert policy is not initial and reference is not initial and not any(p.requires_grad for p in reference.parameters())
        with torch.no_grad():
            next(policy.parameters()).add_(1.0)  # training moves this copy only
        seen[desc] = (args, advantage_fn(r, GROUPED_REWARDS, [SMALL, PROBLEM]), held_out)
        return {"history": [], "evals": [{"step": 0, "pass@1": 0.0}]}

    def stats_spy(policy, tokenizer, problems, args, device):
        measured.append((policy, problems))
        return stats_of()

    monkeypatch.setattr(prm, "train", train_spy)
    monkeypatch.setattr(overopt, "what_it_writes", lambda policy, tok, problems, args, device: [p.prompt for p in problems])
    monkeypatch.setattr(overopt, "sample_stats", stats_spy)
    return seen, measured


def test_rl_comparison_runs_the_chapters_advantages_then_reads_what_each_trained_policy_writes(monkeypatch):
    given = fake_reward_models(monkeypatch)
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    initial, _ = lm_pins.tiny_model(0)
    seen, measured = spy_training(monkeypatch, r, initial)
    run = HandArgs(hand_problems=(PROBLEM, SMALL, PROBLEM), eval_problems=2, group_size=2)
    runs = overopt.rl_comparison(initial, TOK, {"prm": "PRM", "orm": "ORM", "qrm": "QRM"}, run,
                                 overopt.Args(rl_methods="outcome,qrm,orm"), "cpu")
    assert list(runs) == ["outcome", "qrm", "orm"] and list(seen) == ["RL outcome", "RL qrm", "RL orm"]
    assert all(args == run for args, _, _ in seen.values())  # the chapter's settings, the ORM's run too
    torch.testing.assert_close(seen["RL outcome"][1], prm.outcome_advantage_fn(r, GROUPED_REWARDS, None))
    torch.testing.assert_close(seen["RL qrm"][1], overopt.token_advantages(given["QRM"], r.completion_mask, 2))
    torch.testing.assert_close(seen["RL orm"][1], overopt.proxy_advantage_fn("ORM", 2, [])(r, GROUPED_REWARDS, None))
    for (policy, problems), run_of in zip(measured, runs.values()):
        assert problems == [PROBLEM, SMALL] and run_of["examples"] == [PROBLEM.prompt, SMALL.prompt]
        assert not torch.equal(next(policy.parameters()), next(initial.parameters()))  # the trained copy
        assert run_of["final"] == stats_of() and run_of["wall_clock_s"] >= 0


def test_the_orms_over_optimisation_arms_differ_in_beta_only_and_log_its_score(monkeypatch):
    given = fake_reward_models(monkeypatch)
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    initial, _ = lm_pins.tiny_model(0)
    seen, _ = spy_training(monkeypatch, r, initial)
    run = HandArgs(hand_problems=(PROBLEM, SMALL, PROBLEM), eval_problems=2, group_size=2, beta=0.04, lr=1e-4, rl_steps=80)
    arms = overopt.orm_arms(initial, TOK, {"prm": "PRM", "orm": "ORM", "qrm": "QRM"}, run,
                            overopt.Args(kl_beta=0.5, overopt_lr=3e-4, overopt_steps=7), "cpu")
    assert list(arms) == list(overopt.ORM_ARMS) == ["kl", "no_kl"]
    (kl_args, kl_A, held_out), (free_args, free_A, _) = seen["RL on the ORM, β=0.5"], seen["RL on the ORM, β=0"]
    assert (kl_args.beta, free_args.beta, kl_args.lr, kl_args.rl_steps) == (0.5, 0.0, 3e-4, 7)
    assert dataclasses.replace(free_args, beta=0.5) == kl_args  # nothing else differs between the arms
    assert dataclasses.replace(kl_args, beta=0.04, lr=1e-4, rl_steps=80) == run  # nor from the chapter's, but those
    expected = overopt.proxy_advantage_fn("ORM", 2, [])(r, GROUPED_REWARDS, None)
    torch.testing.assert_close(kl_A, expected)
    torch.testing.assert_close(free_A, expected)
    assert held_out == [PROBLEM, SMALL]
    assert arms["kl"]["log"] == arms["no_kl"]["log"] == [{"proxy": pytest.approx(float(
        torch.sigmoid(given["ORM"][torch.arange(4), [len(t) for t in GROUPED]]).mean()))}]


# ---------------------------------------------------------------------- over-optimisation
def orm_run(kl=(0.0, 0.5, 1.0, 2.0), proxy=(0.1, 0.2, 0.3, 0.4), rewards=(0.2, 0.4, 0.6, 0.2),
            golds=((0, 0.3), (2, 0.2), (4, 0.5))) -> dict:
    """Four updates of 10, 10, 20, 20 tokens a completion, evaluated at updates 0, 2 and 4."""
    return {"history": [{"kl": k, "length": n, "reward": w} for k, n, w in zip(kl, (10, 10, 20, 20), rewards)],
            "log": [{"proxy": p} for p in proxy], "evals": [{"step": s, "pass@1": g} for s, g in golds]}


def test_arm_points_read_trailing_means_of_the_training_batches_at_each_evaluation():
    points = overopt.arm_points(orm_run(), window=2)
    # sequence KL = per-token k3 x tokens: 0, 5, 20, 40; trailing means of 2: 0, 2.5, 12.5, 30 (the last at update 4)
    assert points == [{"step": 0, "gold": 0.3, "kl": 0.0, "proxy": pytest.approx(0.1), "train_gold": pytest.approx(0.2)},
                      {"step": 2, "gold": 0.2, "kl": 12.5, "proxy": pytest.approx(0.25), "train_gold": pytest.approx(0.5)},
                      {"step": 4, "gold": 0.5, "kl": 30.0, "proxy": pytest.approx(0.35), "train_gold": pytest.approx(0.4)}]


def test_the_peak_is_picked_by_the_training_batches_not_by_the_held_out_gold():
    summary = overopt.arm_summary(overopt.arm_points(orm_run(), window=2))
    # the training pass rate picks update 2 (0.5); the held-out gold is highest at the end by its own noise
    assert summary == pytest.approx({"peak_step": 2, "gold_start": 0.3, "gold_peak": 0.2, "gold_end": 0.5,
                                     "gold_rise": -0.1, "gold_fall": -0.3, "proxy_start": 0.1, "proxy_end": 0.35,
                                     "proxy_rise": 0.25, "kl_end": 30.0, "proxy_kl_rank_r": 1.0})
    falling = overopt.arm_summary(overopt.arm_points(orm_run(proxy=(0.4, 0.3, 0.2, 0.1)), window=2))
    assert falling["proxy_kl_rank_r"] == pytest.approx(-1.0) and falling["proxy_rise"] < 0


@pytest.mark.parametrize("form", ["bon", "rl"])
def test_gao_fit_recovers_alpha_and_beta(form):
    d = np.linspace(0.1, 3.0, 20)
    truth = {"alpha": 0.4, "beta": 0.15}
    fit = overopt.fit_gao(d, overopt.gao_curve(d, truth, form), form)
    assert fit["alpha"] == pytest.approx(0.4) and fit["beta"] == pytest.approx(0.15) and fit["r2"] == pytest.approx(1.0)
    d_peak = 0.4 / (2 * 0.15)  # d(α - βd) peaks at α / 2β
    assert overopt.gao_curve(np.array([d_peak]), truth, "bon")[0] == pytest.approx(0.4 ** 2 / (4 * 0.15))


def test_overoptimisation_fits_recover_known_alpha_and_beta_of_each_form():
    """Best-of-N gold gains built on d(α - βd) and RL gold gains on d(α - β log d): each fit
    gets its own data's α, β back, against d = sqrt(KL) (the best-of-N KL for best-of-N)."""
    ns = [1, 2, 4, 8, 16, 32]
    d_bon = np.sqrt(overopt.best_of_n_kl(np.array(ns)))
    bon_truth, rl_truth = {"alpha": 0.5, "beta": 0.2}, {"alpha": 0.3, "beta": 0.1}
    gains = overopt.gao_curve(d_bon, bon_truth, "bon")
    held = {"ns": ns, "curves": {"ORM": {N: 0.4 + g for N, g in zip(ns, gains)}},
            "orm_proxy_of_pick": {N: 0.5 + 0.01 * N for N in ns}}
    kls = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0]
    rl_gains = overopt.gao_curve(np.sqrt(kls), rl_truth, "rl")
    points = [{"kl": kl, "gold": 0.3 + g, "proxy": 0.1 * i} for i, (kl, g) in enumerate(zip(kls, rl_gains))]
    fits = overopt.overoptimisation_fits(held, points)
    assert fits["bon"]["d"] == pytest.approx(d_bon.tolist()) and fits["bon"]["gain"] == pytest.approx(gains.tolist())
    assert fits["bon"]["proxy"] == [held["orm_proxy_of_pick"][N] for N in ns]
    assert fits["rl"]["d"] == pytest.approx(np.sqrt(kls).tolist()) and fits["rl"]["gain"] == pytest.approx(rl_gains.tolist())
    assert fits["rl"]["proxy"] == [0.1 * i for i in range(6)]
    for kind, form, truth in (("bon", "bon", bon_truth), ("rl", "rl", rl_truth)):
        fit = fits[kind][f"fit_{form}"]
        assert (fit["alpha"], fit["beta"], fit["r2"]) == pytest.approx((truth["alpha"], truth["beta"], 1.0)), kind
    for kind, form, d, gain in (("bon", "rl", d_bon, gains), ("rl", "bon", np.sqrt(kls), rl_gains)):
        assert fits[kind][f"fit_{form}"] == pytest.approx(overopt.fit_gao(d, gain, form)), kind  # the other form, same data
        assert fits[kind][f"fit_{form}"]["r2"] < 0.999  # fits worse


def test_what_it_writes_samples_each_problem_in_turn(monkeypatch):
    calls = fake_sampler(monkeypatch, {SMALL.prompt: [("#4", False), ("#5", False)],
                                       PROBLEM.prompt: [("#52", False), ("#1", False)]}, modules=(overopt,))
    texts = overopt.what_it_writes(POLICY, TOK, [SMALL, PROBLEM], prm.Args(), "cpu", samples=2)
    assert calls == [[SMALL.prompt] * 2 + [PROBLEM.prompt] * 2]
    assert texts == [SMALL.prompt + "#4", SMALL.prompt + "#5", PROBLEM.prompt + "#52", PROBLEM.prompt + "#1"]


# ------------------------------------------------------------------------------- length bias
def test_the_length_biased_labeller_prefers_the_right_answer_then_the_longer_one():
    problems = [PROBLEM, PROBLEM, PROBLEM, SMALL, SMALL]
    rewards, lengths = [1.0, 0.0, 0.0, 0.0, 0.0], [5, 9, 3, 4, 4]
    # right beats wrong even when shorter; of two wrong, the longer; equal verdict and length: no pair
    assert overopt.length_preferring_pairs(problems, rewards, lengths) == [(0, 1), (0, 2), (1, 2)]
    assert overopt.length_preferring_pairs([SMALL, SMALL], [0.0, 0.0], [4, 4]) == []


def test_length_balanced_pairs_choose_the_longer_as_often_as_the_shorter():
    lengths = [5, 9, 3, 4, 4, 7]
    pairs = [(0, 1), (0, 2), (1, 2), (5, 2), (3, 4)]  # chosen shorter once, longer three times, one tie
    seen = set()
    for seed in range(20):
        kept = overopt.length_balanced(pairs, lengths, np.random.default_rng(seed))
        longer = [(i, j) for i, j in kept if lengths[i] > lengths[j]]
        shorter = [(i, j) for i, j in kept if lengths[i] < lengths[j]]
        assert len(longer) == len(shorter) == 1 and (0, 1) in kept and (3, 4) in kept and set(kept) <= set(pairs)
        seen.add(longer[0])
    assert seen == {(0, 2), (1, 2), (5, 2)}  # any of the longer-chosen pairs can be kept
    assert overopt.length_balanced([(0, 2), (1, 2)], lengths, np.random.default_rng(0)) == []  # all longer: none left


def test_bradley_terry_loss_by_hand():
    loss = overopt.bradley_terry_loss(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0]))
    assert math.isclose(loss.item(), (math.log1p(math.exp(-1)) + math.log1p(math.exp(1))) / 2, rel_tol=1e-6)


def test_length_slope_is_the_trend_that_correctness_does_not_explain():
    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 40, 500).astype(float)
    correct = (lengths + rng.normal(0, 8, 500) > 20).astype(float)  # longer answers are right more often
    scores = 0.3 + 0.05 * lengths + 2.0 * correct
    assert overopt.length_slope(scores, lengths, correct) == pytest.approx(0.05)
    naive = np.polyfit(lengths, scores, 1)[0]  # a slope on length alone also takes correctness's credit
    assert naive > 0.08
    normalised = overopt.length_normalised(torch.tensor(scores), torch.tensor(lengths), 0.05)
    torch.testing.assert_close(normalised, torch.tensor(0.3 + 2.0 * correct, dtype=torch.float64))


def test_rm_advantages_are_grpo_on_the_length_normalised_score_at_eos(monkeypatch):
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    lengths = torch.tensor([len(t) + 1.0 for t in GROUPED])  # EOS counts
    eos = [0.5, 1.0, 2.0, 4.0]
    fake_reward_models(monkeypatch, {"ORM": eos})
    for slope in (0.0, 0.5):
        log = []
        A = overopt.rm_advantage_fn("ORM", 2, slope, log)(r, GROUPED_REWARDS, [SMALL, PROBLEM])
        reward = torch.tensor(eos) - slope * lengths
        expected = prm.grpo_advantages(reward.view(2, 2)).flatten()[:, None] * r.completion_mask
        torch.testing.assert_close(A, expected)
        assert log == [{"proxy": pytest.approx(np.mean(eos)), "length": pytest.approx(float(lengths.mean()))}]
    # a slope that makes each group's rewards equal leaves no advantage at all
    fake_reward_models(monkeypatch, {"ORM": (0.1 * lengths).tolist()})
    assert overopt.rm_advantage_fn("ORM", 2, 0.1, [])(r, GROUPED_REWARDS, None).abs().max() < 1e-3


def test_the_verbosity_penalty_charges_the_slope_on_the_characters_past_each_groups_worked_solution(monkeypatch):
    padded = "3+1=4\n3+1=4\n#4"  # right, 6 characters past "3+1=4\n#4"
    texts = [SMALL_RIGHT, padded, "#52", SLIP]  # two groups of G = 2: SMALL's, then PROBLEM's
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, texts)
    past = overopt.padding_of(TOK, 2)(r, [SMALL, PROBLEM])
    assert past.tolist() == [0.0, 6.0, 0.0, max(0, len(SLIP) - len(PROBLEM.solution))]
    eos = [0.5, 1.0, 2.0, 4.0]
    fake_reward_models(monkeypatch, {"ORM": eos})
    A = overopt.rm_advantage_fn("ORM", 2, 0.5, [], overopt.padding_of(TOK, 2))(r, GROUPED_REWARDS, [SMALL, PROBLEM])
    expected = prm.grpo_advantages((torch.tensor(eos) - 0.5 * past).view(2, 2)).flatten()[:, None] * r.completion_mask
    torch.testing.assert_close(A, expected)
    assert A[0, 0] > 0 > A[1, 0]  # the padded right answer, paid more by the RM (1.0 > 0.5), now loses to the plain one


@pytest.mark.parametrize("text,form", [
    ("12+7=19\n#19", True), ("12+7=19\n19*3=56\n#51", True), ("#52", False), ("12+7=19\n\n#19", False),
    ("12+7=19\n#19\n", False), ("12+7=1a\n#19", False), ("27915", False), ("12-7=5\n#x", False),
])
def test_worked_form_by_hand(text, form):
    assert overopt.worked_form(text) is form


def test_output_stats_count_padding_and_form_by_hand():
    padded = "3+1=4\n3+1=4\n3+1=4\n#4"  # right, two lines and 12 characters past "3+1=4\n#4"
    texts = [SMALL_RIGHT, padded, SLIP, "#52"]
    problems = [SMALL, SMALL, PROBLEM, PROBLEM]
    correct = [lm_world.verify(p, t) for p, t in zip(problems, texts)]
    stats = overopt.output_stats(problems, texts, correct, [9, 21, 27, 4])
    assert stats == pytest.approx({"pass@1": 0.75, "length": 15.25, "extra_lines": 0.5, "padded_share": 0.25,
                                   "excess_chars": 3.0, "well_formed_share": 1.0, "worked_form_share": 0.75,
                                   "worked_form_wrong_share": 0.25})
    garbled = overopt.output_stats([SMALL, SMALL], ["#4", "3+1=4\n#4#"], [1.0, 0.0], [2, 9])
    assert garbled["well_formed_share"] == 0.5  # a bare answer is well-formed; a broken answer line is not


def test_length_correlations_overall_and_within_each_verdict():
    scores, lengths = np.array([1.0, 2.0, 3.0, 5.0, 4.0, 3.0]), np.array([1, 2, 3, 10, 11, 12])
    correct = np.array([0, 0, 0, 1, 1, 1], bool)
    corr = overopt.length_correlations(scores, lengths, correct)
    assert corr["right"] == pytest.approx(-1.0) and corr["wrong"] == pytest.approx(1.0)
    assert corr["all"] == pytest.approx(np.corrcoef(scores, lengths)[0, 1]) and corr["all"] > 0.5


def test_length_bias_study_trains_on_the_biased_and_balanced_pairs_and_runs_rl_on_each_reward(monkeypatch):
    """Fakes for the RM trainer (the biased RM is "ORM", the balanced one "QRM"), the loop and the
    final sampling: the pairs each RM gets, the slope read from the biased RM's scores of its own
    training solutions, and the reward each RL run optimises."""
    data = labelled_data()
    lengths = data["completions"].lengths.numpy()
    def eos_scores(slope, wiggle):
        def scores(completions):
            n = completions.lengths.float()
            return (slope * n + wiggle * torch.arange(len(n)) % 3).tolist()
        return scores

    eos = {"ORM": eos_scores(0.2, 0.7), "QRM": eos_scores(-0.1, 1.3)}
    fake_reward_models(monkeypatch, eos)
    trained, ran = {}, []

    def train_rm(policy, r, pairs, args, rng, desc):
        trained[desc] = list(pairs)
        return ("ORM" if desc == "length-preferring RM" else "QRM"), [0.5]

    def train_spy(policy, reference, tokenizer, args, advantage_fn, held_out, device, desc="RL"):
        ran.append((args.rl_steps, advantage_fn(r, GROUPED_REWARDS, [SMALL]), held_out, args.max_new_tokens))
        return {"history": [], "evals": [{"step": 0, "pass@1": 0.25, "length": 9.0}]}

    monkeypatch.setattr(overopt, "train_preference_rm", train_rm)
    monkeypatch.setattr(prm, "train", train_spy)
    monkeypatch.setattr(overopt, "sample_stats", lambda *a, **k: stats_of())
    monkeypatch.setattr(overopt, "what_it_writes", lambda *a, **k: ["an example"])
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    held = {"completions": data["completions"], "correct": data["rewards"].numpy()}
    run = HandArgs(hand_problems=(PROBLEM, SMALL), eval_problems=2, group_size=4)  # one group
    study = overopt.length_bias_study(lm_pins.tiny_model(0)[0], TOK, data, held, run, overopt.Args(length_steps=7), "cpu")
    pairs = overopt.length_preferring_pairs(data["problems"], data["rewards"].numpy(), lengths)
    assert trained["length-preferring RM"] == pairs and study["pairs"] == len(pairs) == 4  # (0,1) (0,2) (1,2) (3,4)
    assert trained["length-balanced RM"] == overopt.length_balanced(pairs, lengths, np.random.default_rng(7))
    slope = overopt.length_slope(eos["ORM"](data["completions"]), lengths, data["rewards"].numpy())
    assert study["slope"] == pytest.approx(slope) and slope != 0
    assert study["length_corr"]["length-balanced RM"] == pytest.approx(
        overopt.length_correlations(eos["QRM"](data["completions"]), lengths, data["rewards"].numpy()), nan_ok=True)
    assert list(study["runs"]) == list(overopt.LENGTH_RUNS) and all(steps == 7 for steps, *_ in ran)
    padding = overopt.padding_of(TOK, 4)  # the penalised arm: the slope charged on the characters past the solution
    for (_, advantages, held_out, _), rm, run_slope, charged in zip(ran, ("ORM", "ORM", "QRM", "ORM", "ORM"),
                                                                  (0.0, slope, 0.0, 0.0, slope),
                                                                  (None, None, None, None, padding)):
        expected = overopt.rm_advantage_fn(rm, 4, run_slope, [], charged)(r, GROUPED_REWARDS, [SMALL])
        torch.testing.assert_close(advantages, expected)
        assert held_out == [PROBLEM, SMALL]
    assert not torch.equal(ran[0][1], ran[1][1]) and not torch.equal(ran[0][1], ran[4][1])
    cap = min(run.max_new_tokens, run.cold_start.task.longest_solution)  # the capped arm alone samples fewer tokens
    assert [budget for *_, budget in ran] == [run.max_new_tokens] * 3 + [cap, run.max_new_tokens] and cap < run.max_new_tokens
    for name in overopt.LENGTH_RUNS:  # each run its own log, one entry an update; its writing read after it
        assert len(study["runs"][name]["log"]) == 1 and study["runs"][name]["final"] == stats_of()




# ------------------------------------- --parts hacking, pairs, ppo: wrong steps' score, Q-RM's pairs, Q-RM for GAE
def test_wrong_step_scores_pool_the_prms_score_on_the_steps_the_gold_labels_call_wrong():
    """RIGHT has no wrong step; SLIP's go wrong from its line 1 on, the bare "#5" at its only line; the
    bare "#4" differs from the worked solution too, but is right: not a wrong step."""
    texts, problems, correct = [RIGHT, SLIP, "#5", "#4"], [PROBLEM, PROBLEM, SMALL, SMALL], [1.0, 0.0, 0.0, 1.0]
    r = hand_completions([q.prompt for q in problems], texts)
    ends = lm_world.step_end_tokens(TOK, r.completion_ids, r.completion_mask)
    assert [e[e >= 0].tolist() for e in ends] == [step_ends_by_hand(t) for t in texts]
    probs = torch.arange(r.completion_mask.numel(), dtype=torch.float).view(r.completion_mask.shape) / 100
    found = overopt.wrong_step_scores(probs, ends, problems, texts, correct)
    wrong = [float(probs[1, e]) for e in step_ends_by_hand(SLIP)[1:]] + [float(probs[2, 2])]
    every = [float(probs[i, e]) for i, t in enumerate(texts) for e in step_ends_by_hand(t)]  # 4 + 4 + 1 + 1 steps
    assert found == {"pass@1": 0.5, "wrong_steps": 4, "wrong_step_score": pytest.approx(np.mean(wrong)),
                     "worked_form_of_wrong": 0.5,  # SLIP in worked form, "#5" a bare answer
                     "step_score": pytest.approx(np.mean(every))} and len(every) == 10


def test_step_marks_count_the_prms_more_likely_class_against_the_gold_labels():
    """RIGHT's lines are all right, SLIP's line 0 too (its 1-3 wrong), the bare "#5" wrong; the bare "#4" is
    right but leaves the worked solution: left out. The PRM marks a step right where P(step right) > 1/2."""
    texts, problems, correct = [RIGHT, SLIP, "#5", "#4"], [PROBLEM, PROBLEM, SMALL, SMALL], [1.0, 0.0, 0.0, 1.0]
    r = hand_completions([q.prompt for q in problems], texts)
    ends = lm_world.step_end_tokens(TOK, r.completion_ids, r.completion_mask)
    probs = torch.full(r.completion_mask.shape, 0.9)
    probs[0, step_ends_by_hand(RIGHT)[0]] = 0.1  # a right step marked wrong
    probs[1, step_ends_by_hand(SLIP)[0]] = 0.5  # not above 1/2: marked wrong, though right
    probs[1, step_ends_by_hand(SLIP)[2]] = 0.1  # a wrong step marked wrong
    found = overopt.step_marks(probs, ends, problems, texts, correct)
    assert found == {"right_steps": 5, "right_marked_wrong": 2, "wrong_steps": 4, "wrong_marked_right": 3,
                     "left_out": 1, "left_out_marked_wrong": 0, "creative": 1, "creative_marked_wrong": 0}
    probs[3, step_ends_by_hand("#4")[0]] = 0.2  # the creative right step marked wrong
    assert overopt.step_marks(probs, ends, problems, texts, correct) == {
        **found, "left_out_marked_wrong": 1, "creative_marked_wrong": 1}


def test_step_marks_count_as_creative_only_the_lines_still_true_of_the_problem():
    """A slip made good by a second slip reaches the right answer: its two false lines leave the worked
    solution and are not creative; its answer line, off the solution only after them, is."""
    lucky = "12+7=19\n19*3=56\n56-4=52\n#52"
    r = hand_completions([PROBLEM.prompt], [lucky])
    ends = lm_world.step_end_tokens(TOK, r.completion_ids, r.completion_mask)
    found = overopt.step_marks(torch.full(r.completion_mask.shape, 0.1), ends, [PROBLEM], [lucky], [1.0])
    assert (found["left_out"], found["left_out_marked_wrong"], found["creative"], found["creative_marked_wrong"]) == (
        3, 3, 1, 1)


def test_the_prm_judges_the_very_samples_sample_stats_describes(monkeypatch):
    """The same prompts and the same generator seed as `sample_stats`, the PRM read on those completions."""
    texts = {PROBLEM.prompt: [(SLIP, False)] * 2, SMALL.prompt: [(SMALL_SLIP, False)] * 2}
    drawn, real_sample = [], fake_sampler(monkeypatch, {k: v * 2 for k, v in texts.items()}, modules=(overopt,))
    fake = overopt.sample

    def seeded(policy, tokenizer, prompts, budget, generator, device, chunk=512):
        drawn.append((list(prompts), generator.initial_seed()))
        return fake(policy, tokenizer, prompts, budget, generator, device)

    monkeypatch.setattr(overopt, "sample", seeded)
    given = fake_reward_models(monkeypatch)
    run = HandArgs(hand_problems=(PROBLEM, SMALL), eval_problems=2, eval_samples=2, seed=3)
    judged = overopt.prm_judge("PRM", TOK, run, "cpu")(POLICY)
    overopt.sample_stats(POLICY, TOK, run.task.held_out(2), run, "cpu")
    assert drawn[0] == drawn[1] == ([PROBLEM.prompt] * 2 + [SMALL.prompt] * 2, 9)
    problems, done = [PROBLEM, PROBLEM, SMALL, SMALL], [SLIP, SLIP, SMALL_SLIP, SMALL_SLIP]
    r = hand_completions([q.prompt for q in problems], done)
    ends = lm_world.step_end_tokens(TOK, r.completion_ids, r.completion_mask)
    scored = (torch.sigmoid(given["PRM"]), ends, problems, done, [0.0] * 4)
    assert judged == {**overopt.wrong_step_scores(*scored), **overopt.step_marks(*scored)}
    assert real_sample == [drawn[0][0]] * 2


def test_hacking_study_runs_rl_on_the_prm_and_on_the_verifier_and_judges_each_and_the_cold_start(monkeypatch):
    calls = []
    monkeypatch.setattr(overopt, "prm_judge", lambda model, tok, run, device: lambda policy: f"{model} on {policy}")

    def rl_spy(initial, tokenizer, run, advantage_fn, device, desc, judge=None):
        calls.append((desc, advantage_fn))
        return {"judged": judge(f"{desc} policy")}

    monkeypatch.setattr(overopt, "rl_run", rl_spy)
    found = overopt.hacking_study(POLICY, TOK, {"prm": "PRM", "orm": "ORM", "qrm": "QRM"},
                                  HandArgs(group_size=2), "cpu")
    assert found == {"cold_start": f"PRM on {POLICY}", "runs": {"outcome": {"judged": "PRM on RL outcome policy"},
                                                               "prm": {"judged": "PRM on RL prm policy"}}}
    assert [desc for desc, _ in calls] == ["RL outcome", "RL prm"] and calls[0][1] is prm.outcome_advantage_fn


def test_the_broadcast_is_grpo_on_the_prms_min_step_score_on_every_token(monkeypatch):
    given = fake_reward_models(monkeypatch)
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    A = overopt.broadcast_advantage_fn("PRM", TOK, 2)(r, GROUPED_REWARDS, [SMALL, PROBLEM])
    probs = torch.sigmoid(given["PRM"])
    worst = torch.tensor([float(min(probs[i, e] for e in step_ends_by_hand(text))) for i, text in enumerate(GROUPED)])
    grpo = lm_pins.grpo.group_advantages(worst.view(2, 2), "grpo")  # 05's: (r - mean) / (std + eps)
    torch.testing.assert_close(A, grpo.flatten()[:, None] * r.completion_mask)  # one advantage, every token


def test_an_ensembles_advantages_are_grpo_on_the_mean_of_its_orms_scores(monkeypatch):
    given = fake_reward_models(monkeypatch)
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    log = []
    A = overopt.ensemble_advantage_fn(["ORM", "QRM"], 2, log)(r, GROUPED_REWARDS, [SMALL, PROBLEM])
    eos = (torch.arange(4), [len(t) for t in GROUPED])
    mean = (torch.sigmoid(given["ORM"][eos]) + torch.sigmoid(given["QRM"][eos])) / 2
    torch.testing.assert_close(A, lm_pins.grpo.group_advantages(mean.view(2, 2), "grpo").flatten()[:, None]
                               * r.completion_mask)
    assert log == [{"proxy": pytest.approx(float(mean.mean()))}]


def test_the_broadcast_part_runs_both_credits_on_one_prm_and_judges_each_and_the_cold_start(monkeypatch):
    given = fake_reward_models(monkeypatch)
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    monkeypatch.setattr(overopt, "prm_judge", lambda model, tok, run, device: lambda policy: f"{model} on {policy}")
    seen = {}

    def rl_spy(initial, tokenizer, run, advantage_fn, device, desc, judge=None):
        seen[desc] = (run, advantage_fn(r, GROUPED_REWARDS, [SMALL, PROBLEM]))
        return {**orm_run(), "judged": judge(f"{desc} policy")}

    monkeypatch.setattr(overopt, "rl_run", rl_spy)
    run = HandArgs(group_size=2)
    found = overopt.broadcast_study(POLICY, TOK, {"prm": "PRM", "orm": "ORM", "qrm": "QRM"}, run,
                                    overopt.Args(speed_window=2), "cpu")
    assert found["cold_start"] == f"PRM on {POLICY}" and list(found["runs"]) == list(overopt.BROADCAST_ARMS)
    assert list(seen) == ["RL broadcast", "RL prm"] and all(args == run for args, _ in seen.values())
    torch.testing.assert_close(seen["RL broadcast"][1], overopt.broadcast_advantage_fn("PRM", TOK, 2)(r, None, None))
    torch.testing.assert_close(seen["RL prm"][1], prm.prm_advantage_fn("PRM", TOK, 2)(r, None, None))
    assert given  # the PRM scored both runs' batches
    for arm, result in found["runs"].items():
        assert result["judged"] == f"PRM on RL {arm} policy"
        assert result["summary"] == overopt.gold_course(orm_run(), 2)


def test_gold_course_reads_the_held_out_gold_where_the_training_batches_peak():
    # trailing means of 2 of the training pass rate at updates 0, 2, 4: 0.2, 0.5, 0.4: update 2 is picked
    assert overopt.gold_course(orm_run(), 2) == pytest.approx({"peak_step": 2, "gold_peak": 0.2, "gold_end": 0.5,
                                                               "gold_fall": -0.3})
    late = overopt.gold_course(orm_run(rewards=(0.2, 0.2, 0.2, 0.9)), 1)  # the last evaluation reads the last batch
    assert late == pytest.approx({"peak_step": 4, "gold_peak": 0.5, "gold_end": 0.5, "gold_fall": 0.0})


def test_the_ensembles_extra_orms_learn_the_orms_loss_each_on_its_own_seed(monkeypatch):
    fits = []

    def fit_spy(scorer, loss, n_items, args, rng, desc):
        fits.append((n_items, rng.integers(1 << 30), desc))
        return [0.5]

    monkeypatch.setattr(prm, "fit_scorer", fit_spy)
    policy, _ = lm_pins.tiny_model(0)
    data = labelled_data()
    run = HandArgs(seed=3)
    orms, losses = overopt.extra_orms(policy, data, run, 2)
    again, _ = overopt.extra_orms(policy, data, run, 2)
    heads = [[p for p in m.parameters() if all(p is not q for q in m.base_model.parameters())] for m in orms]
    assert losses == [[0.5], [0.5]] and [f[2] for f in fits[:2]] == ["ORM 2", "ORM 3"]
    assert fits[0][0] == len(data["texts"]) and fits[:2] == fits[2:] and fits[0][1] != fits[1][1]
    assert not all(torch.equal(a, b) for a, b in zip(*heads))  # the members start apart
    for first, second in zip(orms, again):  # and alike on the same seed
        assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))


def test_the_ensemble_part_optimises_the_studys_orm_and_the_ensemble_alike_at_beta_zero(monkeypatch):
    calls = []
    monkeypatch.setattr(overopt, "extra_orms", lambda policy, data, run, count: (["ORM 2", "ORM 3"][:count], ["L"]))

    def proxy_spy(initial, tokenizer, orms, run, args, beta, device, desc):
        calls.append((orms, run, beta, desc))
        return orm_run()

    monkeypatch.setattr(overopt, "proxy_run", proxy_spy)
    run = HandArgs(group_size=2)
    found = overopt.ensemble_study(POLICY, TOK, {"orm": "ORM"}, {}, run, overopt.Args(speed_window=2), "cpu")
    assert [c[0] for c in calls] == [["ORM"], ["ORM", "ORM 2", "ORM 3"]]
    assert all(c[1] == run and c[2] == 0.0 for c in calls) and [c[3] for c in calls] == ["RL on the ORM, β=0", "RL on the mean of 3 ORMs, β=0"]
    assert found["orms"] == 3 and found["losses"] == ["L"] and list(found["arms"]) == list(overopt.ENSEMBLE_ARMS)
    assert found["arms"]["single"] == overopt.with_summary(orm_run(), 2)


def test_the_betas_part_runs_the_orm_at_each_beta_alike_and_samples_the_cold_start(monkeypatch):
    calls = []

    def proxy_spy(initial, tokenizer, orms, run, args, beta, device, desc):
        calls.append((initial, orms, run, beta, desc))
        return orm_run()

    monkeypatch.setattr(overopt, "proxy_run", proxy_spy)
    monkeypatch.setattr(overopt, "sample_stats", lambda policy, tok, problems, run, device: (policy, problems, run))
    run = HandArgs(hand_problems=(PROBLEM, SMALL), group_size=2, eval_problems=2)
    found = overopt.betas_study(POLICY, TOK, {"orm": "ORM"}, run, overopt.Args(speed_window=2, small_beta=0.05), "cpu")
    assert [c[3] for c in calls] == [0.0, 0.05, overopt.KL_BETA] and found["betas"] == dict(zip(overopt.BETA_ARMS, [
        0.0, 0.05, overopt.KL_BETA]))
    assert all(c[:3] == (POLICY, ["ORM"], run) for c in calls) and calls[2][4] == "RL on the ORM, β=0.3"
    assert found["cold_start"] == (POLICY, run.task.held_out(2), run)  # the held-out problems each run's final samples, same seed
    assert found["arms"]["small"] == overopt.with_summary(orm_run(), 2)


def test_nested_pairs_keep_the_first_solutions_of_each_problem():
    problems, rewards = [PROBLEM] * 3 + [SMALL] * 3, torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 0.0])
    assert overopt.nested_pairs(problems, rewards, 3, 3) == prm.preference_pairs(problems, rewards) == [
        (0, 1), (0, 2), (4, 3), (4, 5)]
    assert overopt.nested_pairs(problems, rewards, 3, 2) == [(0, 1), (4, 3)]


def test_the_sweeps_q_rms_start_alike_and_learn_the_chapters_loss_on_their_pairs(monkeypatch):
    data, fitted = labelled_data(), []
    r, policy = data["completions"], lm_pins.tiny_model(0)[0]

    def fit_spy(scorer, loss, n_items, args, rng, desc):
        fitted.append((n_items, loss(scorer, torch.arange(n_items)).item(), rng.random()))

    monkeypatch.setattr(prm, "fit_scorer", fit_spy)
    run = prm.Args(seed=4)
    first, second, untrained = (overopt.train_qrm(policy, r, pairs, run) for pairs in ([(0, 1)], [(0, 1), (3, 4)], []))
    for a, b in ((first, second), (first, untrained)):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    win, lose = torch.tensor([0, 3]), torch.tensor([1, 4])
    expected = prm.qrm_loss(prm.batch_scores(second, r, win), r.completion_mask[win], prm.batch_scores(second, r, lose),
                            r.completion_mask[lose], run.qrm_beta, run.qrm_gamma)
    stream = np.random.default_rng(run.seed + 3).random()  # each fit draws the chapter's minibatch stream
    assert len(fitted) == 2 and fitted[0][0] == 1 and fitted[1] == (2, pytest.approx(expected.item()), stream)


def test_pairs_study_trains_one_q_rm_per_size_on_nested_pairs_and_reads_each_ones_localisation(monkeypatch):
    solutions = {PROBLEM.prompt: [(SLIP, False), (RIGHT, False), (SLIP, False)],
                 SMALL.prompt: [(SMALL_RIGHT, False), (SMALL_SLIP, False), (SMALL_SLIP, False)]}
    fake_sampler(monkeypatch, solutions, modules=(overopt,))
    held = {"completions": "held-out completions", "z": "the chapter's Q-RM"}
    monkeypatch.setattr(prm, "held_out_samples", lambda policy, tok, models, run, device: held)
    trained = []

    def train_spy(policy, r, pairs, run):
        trained.append(pairs)
        return f"Q-RM on {len(pairs)}"

    monkeypatch.setattr(overopt, "train_qrm", train_spy)
    monkeypatch.setattr(prm, "reward_model_logits", lambda model, completions: torch.tensor(float(model[-1])))
    auroc = {"the chapter's Q-RM": 0.5, 2.0: 0.6, 4.0: 0.7}  # by the z each credit study sees
    monkeypatch.setattr(prm, "credit_study", lambda h: {"solutions": 5, "results": {"Q-RM (mean Z of the step)": {
        "auroc": auroc[h["z"] if isinstance(h["z"], str) else float(h["z"])], "top1": 0.1}}})
    run = HandArgs(hand_problems=(PROBLEM, SMALL), label_prompts=2)
    found = overopt.pairs_study(POLICY, TOK, {}, run, [2, 3], "cpu")
    assert trained == [[(1, 0), (3, 4)], [(1, 0), (1, 2), (3, 4), (3, 5)]]
    assert found == {"solutions": 5, "chapter": {"auroc": 0.5, "top1": 0.1},
                     "sweep": [{"samples": 2, "pairs": 2, "auroc": 0.6, "top1": 0.1},
                               {"samples": 3, "pairs": 4, "auroc": 0.7, "top1": 0.1}]}


# ------------------------------------------------------------------------------- the seeds' mean
def test_seed_mean_averages_the_numbers_and_keeps_what_every_seed_shares():
    seeds = [{"n": 4, "x": 1.0, "runs": [{"step": 10, "p": 0.2, "text": "a"}], "missing": None, "gone": None},
             {"n": 4, "x": 3.0, "runs": [{"step": 10, "p": 0.4, "text": "b"}], "missing": 2.0, "gone": None}]
    assert overopt.seed_mean(seeds) == {"n": 4, "x": 2.0, "runs": [{"step": 10, "p": pytest.approx(0.3), "text": "a"}],
                                        "missing": 2.0, "gone": None}
    assert overopt.seed_mean([{"flag": True}, {"flag": False}]) == {"flag": True}  # not a number: the first seed's


# ------------------------------------------------------------------------------------ claims
def stats_of(length=20.0, excess_chars=0.5, pass_at_1=0.4, worked_form_wrong_share=0.2, worked_form_share=0.5) -> dict:
    return {"pass@1": pass_at_1, "length": length, "extra_lines": excess_chars / 6, "padded_share": 0.1,
            "excess_chars": excess_chars, "worked_form_share": worked_form_share,
            "worked_form_wrong_share": worked_form_wrong_share}


def spread(value: float, i: int) -> float:
    """Seed i of three: the value ± 0.01, a 95% interval of about ± 0.025 around it."""
    return value + 0.01 * (i - 1)


def three(make, **change) -> list[dict]:
    return [make(i, **change) for i in range(3)]


def verdicts(claims: list[dict]) -> list:
    return [c["holds"] for c in claims]


def label_seed(i, fp=(0.1, 0.0, 0.0), fn=(0.0, 0.05, 0.0)) -> dict:
    return {"label_n": 4, "data": {"quality": {4: {"accuracy": 0.9, "false_positive_rate": fp[i],
                                                   "false_negative_rate": fn[i]}}}}


@pytest.mark.parametrize("change,expected", [
    ({}, [True, True]),  # each kind of error in one seed is enough: counts decide, no interval
    ({"fp": (0.0, 0.0, 0.0)}, [False, False]),  # no wrong step ever rescued
    ({"fn": (0.0, 0.0, 0.0)}, [True, False]),  # no right step ever failed
])
def test_label_noise_verdicts_are_exact(change, expected):
    claims = overopt.label_claims(three(label_seed, **change))
    assert verdicts(claims) == expected and "lucky rollout" in claims[0]["claim"] and "both ways" in claims[1]["claim"]


LEVELS = {"PRM-min": 0.6, "PRM-mean": 0.5, "PRM-product": 0.45, "ORM": 0.5, "majority vote": 0.4, "oracle (pass@N)": 0.9}


def rerank_seed(i, levels=None, at_2=None, share=0.3, unformed=(30, 0.1), calibration_gap=0.05) -> dict:
    """Best-of-N accuracy 0.3 at N = 1 for all; at N = 2 and 8 LEVELS (changed by `levels`, and at N = 2
    only by `at_2`), PRM-min's ± 0.01 over the seeds; the calibration gap as given; the share of wrong
    answers reaching the median right one's score, in worked form (± 0.01) and not in it (count, share)."""
    at = {**LEVELS, **(levels or {})}
    curves = {name: {1: 0.3, 2: {**at, **(at_2 or {})}[name], 8: at[name]} for name in at}
    curves["PRM-min"] = {n: spread(v, i) if n > 1 else v for n, v in curves["PRM-min"].items()}
    calibration = {"prefixes": 100, "score": 0.7, "value": 0.5, "label_mean": 0.8,
                   "to_value": 0.03 + spread(calibration_gap, i), "to_label_mean": 0.03}
    return {"label_n": 4, "held": {"ns": [1, 2, 8], "curves": curves, "calibration": calibration,
                                   "format": {"formed_wrong": 40, "median_right": 0.7,
                                              "share_reaching_median_right": spread(share, i), "formed_wrong_mean": 0.5,
                                              "unformed_wrong": unformed[0], "unformed_wrong_mean": 0.4,
                                              "unformed_share_reaching_median_right": unformed[1]}}}


@pytest.mark.parametrize("change,expected", [
    ({}, [True, True, True, True, True, True, None]),  # the ORM's gold rises to N = 2 and stays: no fall
    ({"levels": {"PRM-min": 0.5}}, [None, True, True, None, True, True, None]),  # PRM = ORM = mean: gaps within the seeds' noise
    ({"levels": {"ORM": 0.7}}, [False, True, True, True, True, True, None]),  # the ORM ahead
    ({"levels": {"majority vote": 0.65}}, [True, False, False, True, True, True, None]),  # majority vote ahead of both
    ({"levels": {"PRM-mean": 0.7}}, [True, True, True, False, True, True, None]),  # mean ahead of min
    ({"at_2": {"ORM": 0.6}}, [None, True, True, True, True, True, True]),  # ahead at N = 8 but not shown at N = 2
    ({"at_2": {"PRM-mean": 0.6}}, [True, True, True, True, True, True, None]),  # min vs mean: a tendency, level at N = 2
    ({"at_2": {"PRM-mean": 0.7}}, [True, True, True, None, True, True, None]),  # ... mean ahead at N = 2: mixed
    ({"unformed": (30, 0.3)}, [True, True, True, True, None, True, None]),  # wrong answers reach it as often in any form
    ({"share": 0.0}, [True, True, True, True, False, True, None]),  # only wrong answers not in worked form reach it
    ({"unformed": (0, math.nan)}, [True, True, True, True, None, True, None]),  # every wrong answer in worked form
    ({"calibration_gap": -0.05}, [True, True, True, True, True, False, None]),  # nearer the value than the label's mean
])
def test_rerank_format_and_calibration_verdicts_decide_over_the_seeds(change, expected):
    claims = overopt.rerank_claims(three(rerank_seed, **change))
    assert verdicts(claims) == expected
    assert ["PRM beats ORM" in claims[0]["claim"], "PRM beats majority" in claims[1]["claim"],
            "ORM beats majority" in claims[2]["claim"], "tends to outperform mean" in claims[3]["claim"],
            "format" in claims[4]["claim"], "label distribution" in claims[5]["claim"],
            "best-of-N on the learned ORM" in claims[6]["claim"]] == [True] * 7
    assert "2: " in claims[0]["measured"] and "8: " in claims[0]["measured"]  # every N's interval shown
    assert ("premise not met" in claims[4]["measured"]) is (change.get("unformed", (1,))[0] == 0)


def rl_seed(i, reach=(24, 22, 1), qrm_final=0.6, orm_final=0.45, prm_final=0.5, rose=True) -> dict:
    """Updates to halfway (the learned ORM's run, PRM, Q-RM; None: never) and held-out pass@1 at the end of each run
    (Q-RM's spread the other way round, so that its gains have a spread); the training batches' pass rate alike
    in every run for 5 updates, then each run's final level."""
    def run(final: float, seed: int = i) -> dict:
        evals = [{"step": 0, "pass@1": 0.25}, {"step": 18, "pass@1": 0.6}, {"step": 36, "pass@1": spread(final, seed)}]
        history = [{"reward": 0.25 if u < 5 else final} for u in range(36)]
        return {"evals": evals, "final": stats_of(), "history": history}

    updates = dict(zip(("orm", "prm", "qrm"), (None if r is None else r + i if r > 1 else r for r in reach)))
    return {"rl_steps": 36, "speed": {"start": 0.2, "target": 0.6 if rose else 0.2, "updates": updates},
            "runs": {"outcome": run(0.5), "prm": run(prm_final), "qrm": run(qrm_final, seed=2 - i), "orm": run(orm_final)}}


@pytest.mark.parametrize("change,expected", [
    ({}, [True, True, True, True]),  # 24x and 22x faster, +15 and +10 points
    ({"reach": (24, 22, 4)}, [False, True, False, True]),  # 6x and 5.5x
    ({"reach": (24, 22, None)}, [False, True, False, True]),  # Q-RM never halfway: slower still, a no stands
    ({"reach": (24, None, 4)}, [False, True, None, True]),  # the PRM never: its ratio may lie higher
    ({"reach": (None, 22, 4)}, [None, True, False, True]),  # the ORM run never: its ratio may lie higher
    ({"reach": (24, None, 1)}, [True, True, True, True]),  # ... and a yes stands
    ({"rose": False}, [None, True, None, True]),  # outcome GRPO never rose: no halfway mark
    ({"qrm_final": 0.46}, [True, None, True, False]),  # +1 point over the ORM: within the noise
])
def test_rl_verdicts_decide_over_the_seeds(change, expected):
    seeds = three(rl_seed, **change)
    claims = overopt.rl_claims(overopt.Args(), seeds)
    assert verdicts(claims[:4]) == expected
    assert "12x faster" in claims[0]["claim"] and "11x faster" in claims[2]["claim"]
    assert "ORM baseline" in claims[1]["claim"] and "learned ORM" in claims[1]["measured"]
    chapter = prm.rl_claims(overopt.chapter_args(overopt.Args(), 0), *(s["runs"] for s in seeds))
    assert claims[4:] == chapter  # the chapter's own, on the same runs; reward hacking is --parts hacking's


@pytest.mark.parametrize("reach,expected", [((24, 33, 8), [False, False]), ((15, 15, 15), [None, None]),
                                             ((15, 16, 15), [False, False])])
def test_no_verdict_on_speed_where_no_arm_is_timed_apart(reach, expected):
    """Q-RM 3-4x faster (24-26 and 33-35 against 8-10 updates): a no to 12x and 11x. Every arm at 15-17
    updates: no pair of arms differs, so the setup shows no room for any speed difference. The PRM one update
    behind in every seed: timed apart, so the timing can tell arms apart, and Q-RM is level with the ORM."""
    claims = overopt.rl_claims(overopt.Args(), three(rl_seed, reach=reach))
    assert [claims[0]["holds"], claims[2]["holds"]] == expected
    for found in (claims[0], claims[2]):
        no_room = "no room for a speed difference" in found["measured"]
        assert no_room is (len(set(reach)) == 1) and ("first 5, 5, 5 updates" in found["measured"]) is no_room


def test_shared_updates_count_the_leading_updates_every_run_scores_alike():
    def run(*rewards: float) -> dict:
        return {"history": [{"reward": r} for r in rewards]}

    assert overopt.shared_updates({"a": run(0.1, 0.2, 0.3), "b": run(0.1, 0.2, 0.4), "c": run(0.1, 0.3, 0.4)}) == 1
    assert overopt.shared_updates({"a": run(0.1, 0.2), "b": run(0.1, 0.2)}) == 2


def judged_of(score: float, pass_at_1: float = 0.3) -> dict:
    """The PRM's score of wrong steps, and of every step (as the wrong steps' score, 0.1 higher)."""
    return {"pass@1": pass_at_1, "wrong_steps": 400, "wrong_step_score": score, "worked_form_of_wrong": 0.8,
            "step_score": score + 0.1}


def hacking_seed(i, hacked=0.6, before=0.4, honest=0.45, hacked_pass=0.2, aurocs=(0.5, 0.55, 0.6), qrm=0.2,
                 gae=0.4, gae_spread=0.0) -> dict:
    """The PRM's score of wrong steps after RL on it (± 0.01 over the seeds), before RL and after outcome
    GRPO; held-out pass@1 after RL on the PRM (± 0.01; 0.3 before RL), 0.35 at update 18, the one its
    training batches' pass rate picks; Q-RM's AUROC trained on 3, 6 and 12 solutions a problem (the
    largest ± 0.01); held-out pass@1 at the end with Q-RM's advantages (± 0.01) and with GAE's (± gae_spread)."""
    sweep = [{"samples": n, "pairs": 100 * n + i, "auroc": a, "top1": 0.2} for n, a in zip((3, 6, 12), aurocs)]
    sweep[-1]["auroc"] = spread(aurocs[-1], i)

    def run(final: float) -> dict:
        return {"evals": [{"step": 0, "pass@1": 0.25}, {"step": 36, "pass@1": final}]}

    return {"seed": i, "rl_steps": 36,
            "hacking": {"cold_start": judged_of(before), "runs": {"outcome": {"judged": judged_of(honest, 0.45)},
                                                                  "prm": {"judged": judged_of(spread(hacked, i),
                                                                                          spread(hacked_pass, i)),
                                                                          **prm_course(spread(hacked_pass, i))}}},
            "pairs": {"solutions": 900, "chapter": {"auroc": 0.48, "top1": 0.2}, "sweep": sweep},
            "ppo": {"qrm": run(spread(qrm, i)), "gae": run(gae + gae_spread * (i - 1)), "gae_lambda": 0.95},
            "marks": marks_of(i)}


def prm_course(end: float) -> dict:
    """RL on the PRM for 36 updates: the training batches' pass rate peaks at update 18 (alone above 0),
    where held-out pass@1 is 0.35; evaluations at 0, 18 and 36."""
    return {"history": [{"reward": float(step == 18)} for step in range(36)],
            "evals": [{"step": 0, "pass@1": 0.3}, {"step": 18, "pass@1": 0.35}, {"step": 36, "pass@1": end}]}


def marks_of(i, wrong=(3, 1, 2), right=(1, 2, 1), steps=(40, 60), creative=(1, 2, 1), true=(5, 5, 5)) -> dict:
    """Seed i's `step_marks`: wrong steps marked right, right steps marked wrong, of (wrong, right) steps;
    the creative lines (right completions' lines off the worked solution, true of the problem) marked
    wrong, of `true`, among 7 lines off the worked solution of which 3 marked wrong."""
    return {"wrong_steps": steps[0], "wrong_marked_right": wrong[i], "right_steps": steps[1],
            "right_marked_wrong": right[i], "left_out": 7, "left_out_marked_wrong": 3, "creative": true[i],
            "creative_marked_wrong": creative[i]}


@pytest.mark.parametrize("change,expected", [
    ({}, (True, True)),  # each kind of error on every seed: counts decide, no interval
    ({"wrong": (0, 0, 0)}, (False, True)),  # no wrong step ever marked right
    ({"right": (0, 0, 0)}, (True, False)),  # no right step ever marked wrong
    ({"right": (0, 2, 0)}, (True, None)),  # on one seed only: the seeds disagree
    ({"steps": (0, 60), "wrong": (0, 0, 0)}, (None, True)),  # no wrong step to mark: premise not met
])
def test_the_prms_marks_verdicts_are_exact_on_every_seed(change, expected):
    seeds = [{"marks": marks_of(i, **change)} for i in range(3)]
    found = overopt.wrong_marks_claim(seeds), overopt.right_marks_claim(seeds)
    assert tuple(c["holds"] for c in found) == expected and all("learned PRM" in c["claim"] for c in found)
    assert ("premise not met" in found[0]["measured"]) is ("steps" in change)
    assert "marked right 3 of 40 (0.075), 1 of 40 (0.025), 2 of 40 (0.050)" in found[0]["measured"] or change
    assert "marked wrong 1 of 60 (0.017), 2 of 60 (0.033), 1 of 60 (0.017)" in found[1]["measured"] or change


@pytest.mark.parametrize("change,expected", [
    ({}, True),  # some creative line marked wrong on every seed
    ({"creative": (0, 0, 0)}, False),  # none on any seed
    ({"creative": (2, 0, 1)}, None),  # some seeds only: the seeds disagree
    ({"true": (5, 0, 5), "creative": (1, 0, 1)}, None),  # a seed with no creative line: premise not met
])
def test_the_creative_steps_verdict_is_exact_on_every_seed(change, expected):
    found = overopt.creative_marks_claim([{"marks": marks_of(i, **change)} for i in range(3)])
    assert found["holds"] is expected and found["source"] == "whole-game §2" and found["claim"] == (
        "step judges mark creative correct steps wrong: of the lines of right held-out completions that leave the "
        "worked solution yet are true of the problem (a line of its worked solution in another place, or its "
        "answer), the learned PRM marks some wrong")
    assert ("premise not met" in found["measured"]) is ("true" in change)
    assert "(7, 7, 7 per seed)" in found["measured"]
    assert "per seed: 1 of 5 (0.200), 2 of 5 (0.400), 1 of 5 (0.200)" in found["measured"] or change


@pytest.mark.parametrize("true,premise", [((5, 5, 5), "premise not met"), ((0, 1, 0), "premise not met"),
                                          ((0, 0, 0), "no seed's right completions hold a creative line")])
def test_a_correct_but_irrelevant_line_meets_a_prm_of_the_solution_path_not_of_correctness(true, premise):
    """The gold labels mark every creative line wrong, so wherever one exists the PRM is shown not to
    measure correctness alone; the marks are shown, never decided."""
    found = overopt.irrelevant_marks_claim([{"marks": marks_of(i, true=true, creative=(0, 0, 0))} for i in range(3)])
    assert found["holds"] is None and found["source"] == "survey §4.5.2" and found["measured"].startswith(premise)
    assert common.verdict_word(found) == ("premise not met" if any(true) else "inconclusive")
    assert f"creative lines marked wrong 0 of {true[0]}, 0 of {true[1]}, 0 of {true[2]}" in found["measured"]


@pytest.mark.parametrize("change,expected", [
    ({}, [True, True, True, False]),
    ({"hacked": 0.44, "honest": 0.5}, [False, True, True, False]),  # above the cold start, below the verifier's run
    ({"hacked": 0.44, "honest": 0.38}, [True, True, True, False]),
    ({"hacked": 0.4, "honest": 0.3}, [None, None, True, False]),  # no rise over the cold start shown
    ({"hacked_pass": 0.35}, [True, None, True, False]),  # the PRM's score rises, pass@1 holds at its peak: no fall
    ({"hacked_pass": 0.45}, [True, False, True, False]),  # pass@1 rises past the picked update: not over-optimised
    ({"aurocs": (0.7, 0.6, 0.58)}, [True, True, False, False]),  # the fewest pairs already localise
    ({"aurocs": (0.5, 0.7, 0.6)}, [True, True, True, False]),  # the fewest at chance, the most above it
    ({"aurocs": (0.6, 0.55, 0.5)}, [True, True, False, False]),  # the fewest localise, the most do not: no need shown
    ({"aurocs": (0.5, 0.55, 0.5)}, [True, True, None, False]),  # at chance with the most pairs: localisation not shown
    ({"aurocs": (0.2, 0.3, 0.4)}, [True, True, None, False]),  # below chance with the most pairs: premise not met
    ({"qrm": 0.45}, [True, True, True, True]),  # Q-RM's credit learns and ends above GAE's
    ({"qrm": 0.4}, [True, True, True, None]),  # level with GAE, whose seeds agree: no spread to be level within
    ({"qrm": 0.4, "gae_spread": 0.01}, [True, True, True, True]),  # level with GAE, within GAE's spread over seeds
    ({"qrm": 0.38, "gae_spread": 0.01}, [True, True, True, False]),  # below GAE by more than GAE's spread
    ({"qrm": 0.3}, [True, True, True, False]),  # it learns, but GAE ends measurably higher
    ({"qrm": 0.25, "gae": 0.2}, [True, True, True, None]),  # above GAE, but no learning shown
    ({"qrm": 0.2, "gae": 0.1}, [True, True, True, False]),  # above GAE, but below its own cold start (0.25): no
])
def test_the_checks_verdicts_decide_over_the_seeds(change, expected):
    seeds = three(hacking_seed, **change)
    claims = overopt.check_claims(overopt.Args(parts="hacking,pairs,ppo,marks"), seeds)
    assert claims[-4:] == [overopt.wrong_marks_claim(seeds), overopt.right_marks_claim(seeds),
                           overopt.creative_marks_claim(seeds), overopt.irrelevant_marks_claim(seeds)]
    claims = claims[:-4]
    assert claims == [overopt.hacking_claim(seeds), overopt.prm_proxy_claim(seeds, 5), overopt.pairs_claim(seeds),
                      overopt.ppo_claim(seeds)]
    assert verdicts(claims) == expected
    assert "cheap correlate" in claims[0]["claim"] and "second" not in claims[1]["claim"]
    assert "learned proxy" in claims[1]["claim"] and "comparative data" in claims[2]["claim"]
    assert "replace GAE" in claims[3]["claim"] and "λ = 0.95" in claims[3]["measured"]
    assert "minus before RL" in claims[0]["measured"] and "minus after outcome GRPO" in claims[0]["measured"]
    assert "after minus before" in claims[1]["measured"] and "at the picked update (update 18, 18, 18)" in claims[1][
        "measured"]
    assert "3 (300 pairs)" not in claims[2]["measured"] and "3 (301 pairs)" in claims[2]["measured"]  # pairs: means
    most, fewest = [s["pairs"]["sweep"][-1]["auroc"] - 0.5 for s in seeds], seeds[0]["pairs"]["sweep"][0]["auroc"] - 0.5
    assert ("premise not met" in claims[2]["measured"]) is (max(most) < -0.05)  # shown below chance only
    assert ("inconclusive" in claims[2]["measured"]) is bool(abs(np.mean(most)) < 0.05 and fewest <= 0)
    assert "learns: Q-RM minus the cold start (0.250)" in claims[3]["measured"]
    assert overopt.check_claims(overopt.Args(), [{k: s[k] for k in ("seed", "pairs")} for s in seeds]) == [claims[2]]


def gold_course_of(fall: float, i: int = 0) -> dict:
    return {"peak_step": 30 + i, "gold_peak": 0.4, "gold_end": 0.4 - fall, "gold_fall": fall}


def broadcast_seed(i, broadcast=0.6, steps=0.5, before=0.4, falls=(0.2, 0.05)) -> dict:
    """The PRM's score of wrong steps before RL and after GRPO with its score broadcast (± 0.01 over the
    seeds) or as step credit; pass@1's fall from the picked update under each (the broadcast's ± 0.01)."""
    runs = {"broadcast": {"judged": judged_of(spread(broadcast, i)), "summary": gold_course_of(spread(falls[0], i), i)},
            "prm": {"judged": judged_of(steps), "summary": gold_course_of(falls[1], i)}}
    return {"seed": i, "rl_steps": 36, "broadcast": {"cold_start": judged_of(before), "runs": runs}}


@pytest.mark.parametrize("change,expected", [
    ({}, True),  # the broadcast's score of wrong steps rises more, and its pass@1 falls further
    ({"broadcast": 0.45}, False),  # it rises less than under step credit
    ({"broadcast": 0.5}, None),  # as much: not shown either way
    ({"falls": (0.05, 0.05)}, None),  # pass@1 falls as far under both
    ({"falls": (0.0, 0.1)}, False),  # step credit's pass@1 falls further
    ({"before": 0.7}, True),  # both scores fall below the cold start's, the broadcast's less: still the larger rise
])
def test_the_broadcast_verdict_compares_both_halves_of_the_hacking_per_seed(change, expected):
    seeds = three(broadcast_seed, **change)
    found = overopt.check_claims(overopt.Args(parts="broadcast"), seeds)
    assert found == [overopt.broadcast_claim(seeds)] and found[0]["holds"] is expected
    assert found[0]["source"] == "SS-GRPO article, The Problem" and found[0]["claim"] == (
        "broadcasting one sequence-level advantage to every token causes reward hacking: on the same learned PRM, GRPO "
        "with its score broadcast as one sequence reward games it more than GRPO with the PRM as step credit (its score "
        "of wrong steps rises more, and held-out pass@1 falls further from its peak)")
    assert "cold start 0.400" in found[0]["measured"] or "before" in change
    assert "(update 30, 31, 32)" in found[0]["measured"] and "pass@1's fall" in found[0]["measured"]


def ensemble_seed(i, single=0.2, ensemble=0.05, ends=(0.1, 0.3), orms=3) -> dict:
    """The gold's fall from the picked update at β = 0 on the study's ORM (± 0.01 over the seeds) and on
    the mean of `orms` ORMs, and the gold at the end of each."""
    def arm(fall: float, end: float) -> dict:
        return {"summary": {**gold_course_of(fall, i), "gold_end": end, "proxy_start": 0.5, "proxy_end": 0.9,
                            "kl_end": 20.0}}

    return {"seed": i, "rl_steps": 36, "ensemble": {"orms": orms, "losses": [], "arms": {
        "single": arm(spread(single, i), ends[0]), "ensemble": arm(ensemble, ends[1])}}}


def betas_seed(i, small=0.2, large=0.05, rise=0.3, cold=0.9, free=0.5) -> dict:
    """GRPO on the ORM at β = 0, 0.03 and 0.3: the gold's fall at the small β (± 0.01 over the seeds) and at
    the larger, the ORM's rise at the small β; the well-formed share of the cold start's samples and after
    β = 0 (± 0.01)."""
    def arm(fall: float, shape: float) -> dict:
        return {"summary": {**gold_course_of(fall, i), "proxy_start": 0.5, "proxy_end": 0.5 + rise,
                            "proxy_rise": rise + 0.01 * (i - 1), "kl_end": 20.0},
                "final": {"well_formed_share": shape, "worked_form_share": 0.5, "pass@1": 0.1}}

    return {"seed": i, "rl_steps": 36, "betas": {
        "betas": {"no_kl": 0.0, "small": 0.03, "kl": 0.3},
        "cold_start": {"well_formed_share": cold, "worked_form_share": 0.5, "pass@1": 0.3},
        "arms": {"no_kl": arm(0.3, spread(free, i)), "small": arm(spread(small, i), 0.8), "kl": arm(large, 0.9)}}}


@pytest.mark.parametrize("change,expected", [
    ({}, [True, None]),  # the small β's proxy rises and its gold falls further; β = 0 leaves half well-formed
    ({"small": 0.05}, [None, None]),  # the gold falls as far at the small β as at the larger
    ({"small": 0.0}, [False, None]),  # less far
    ({"rise": -0.2}, [False, None]),  # the ORM's score falls at the small β: not hacked
    ({"free": 0.4}, [True, True]),  # most samples after β = 0 are not well-formed: a collapse
    ({"free": 0.9}, [True, False]),  # most still are
])
def test_the_betas_verdicts_compare_the_small_beta_with_the_larger_and_beta_zero_with_the_cold_start(change, expected):
    seeds = three(betas_seed, **change)
    found = overopt.check_claims(overopt.Args(parts="betas"), seeds)
    assert found == [overopt.small_beta_claim(seeds), overopt.gibberish_claim(seeds)] and verdicts(found) == expected
    assert found[0]["claim"] == "a small β invites reward hacking (here β = 0.03 against 0.3)"
    assert found[1]["claim"] == ("without KL to the reference, optimising a learned reward turns a fluent model into "
                                 "gibberish: after RL on the learned ORM at β = 0, most samples are no longer "
                                 "well-formed")
    assert [c["source"] for c in found] == ["over-long-generations", "whole-game §6"]
    assert "at β = 0.03 minus at β = 0.3" in found[0]["measured"] and "One half minus the well-formed share" in found[1]["measured"]
    assert "cold start: well-formed 0.9, 0.9, 0.9" in found[1]["measured"] or "cold" in change


def gold_seed(i, exact=(0.3, 0.4, 0.5), orm=(0.2, 0.3, 0.4)) -> dict:
    """Best-of-N accuracy at N = 1, 2, 4, 8 by the PRM on the exact labels, the Monte Carlo PRM and the ORM (each
    at N = 1 the sample's own, 0.2; the exact-label PRM ± 0.01 over the seeds)."""
    curves = {overopt.GOLD_PRM: dict(zip((1, 2, 4, 8), (0.2, *(spread(x, i) for x in exact)))),
              "PRM-min": {1: 0.2, 2: 0.25, 4: 0.3, 8: 0.35}, "ORM": dict(zip((1, 2, 4, 8), (0.2, *orm)))}
    return {"seed": i, "gold": {"ns": [1, 2, 4, 8], "curves": curves}}


@pytest.mark.parametrize("change,expected", [
    ({}, True),  # the exact-label PRM above the ORM at every N > 1
    ({"orm": (0.2, 0.3, 0.5)}, None),  # level at N = 8: not at every N
    ({"orm": (0.2, 0.3, 0.6)}, False),  # below at N = 8
])
def test_the_gold_prm_verdict_needs_the_exact_label_prm_above_the_orm_at_every_n(change, expected):
    seeds = three(gold_seed, **change)
    found = overopt.check_claims(overopt.Args(parts="gold"), seeds)
    assert found == [overopt.gold_claim(seeds)] and found[0]["holds"] is expected
    assert found[0]["source"] == "over-long-generations, Process rewards"
    assert "minus the ORM, at N = 2: +0.1 [" in found[0]["measured"] and "N = 1:" not in found[0]["measured"]
    assert "minus PRM-min on Monte Carlo labels (the study's), at N = 2: +0.05 [" in found[0]["measured"]


def test_the_gold_smoke_run_reranks_the_same_samples_by_three_scores(tmp_path, read_results):
    args = overopt.Args(smoke=True, device="cpu", out=str(tmp_path / "out"), cache=str(tmp_path / "cache"), parts="gold")
    overopt.main(args)
    data = read_results(tmp_path / "out" / "results.json")
    (curves, ns) = (data["seeds"][0]["gold"][k] for k in ("curves", "ns"))
    assert set(curves) == {overopt.GOLD_PRM, "PRM-min", "ORM"} and ns == [1, 2, 4]  # the smoke's 4 samples a problem
    # at N = 1 every ranker keeps the one sample drawn: the same draws, so the same accuracy
    assert len({c["1"] for c in curves.values()}) == 1
    assert [c["source"] for c in data["claims"]] == ["over-long-generations, Process rewards"]
    assert data["metrics"]["tables"]["gold_check"]["rows"][-1][3] == data["metrics"]["gold_best_of_n[ORM][N=4]"]
    again = overopt.main(overopt.Args(reanalyse=str(tmp_path / "out" / "results.json")))["claims"]  # nothing trained
    assert again == data["claims"]


@pytest.mark.parametrize("change,expected", [
    ({}, True),  # the single ORM's gold falls, the ensemble's falls less
    ({"ensemble": 0.2}, None),  # as far
    ({"ensemble": 0.35}, False),  # further
    ({"single": 0.0}, None),  # no fall shown under the single ORM: nothing to mitigate
    ({"single": -0.1, "ensemble": -0.3}, None),  # the single ORM's gold rises to the end: premise not met
])
def test_the_ensemble_verdict_needs_the_single_orms_fall_and_a_smaller_one(change, expected):
    seeds = three(ensemble_seed, **change)
    found = overopt.check_claims(overopt.Args(parts="ensemble"), seeds)
    assert found == [overopt.ensemble_claim(seeds)] and found[0]["holds"] is expected
    assert found[0]["source"] == "whole-game §7.7" and found[0]["claim"] == (
        "mitigation of over-optimisation: a reward ensemble (the mean of 3 ORMs) falls less in gold at β = 0 than a "
        "single ORM")
    assert ("premise not met" in found[0]["measured"]) is (change.get("single", 0) < 0)
    assert ("inconclusive" in found[0]["measured"]) is (change.get("single") == 0.0)
    assert "ensemble minus single +0.2 [+0.2, +0.2]" in found[0]["measured"]


def test_rl_claims_need_the_outcome_baseline_and_skip_missing_methods():
    seeds = three(rl_seed)

    def keeping(*methods: str) -> list[dict]:
        return [{**s, "runs": {k: s["runs"][k] for k in methods}} for s in seeds]

    assert overopt.rl_claims(overopt.Args(), keeping("prm", "qrm")) == []
    assert [c["claim"][:15] for c in overopt.rl_claims(overopt.Args(), keeping("outcome", "qrm", "orm"))] == [
        "RL with Q-RM co", "Q-RM raises pas"]
    assert overopt.rl_claims(overopt.Args(), keeping("outcome", "qrm")) == []  # no ORM run: nothing to compare with


def test_convergence_reads_the_smoothed_training_pass_rate_at_one_update_resolution():
    def history(reach: int | None) -> list[dict]:
        return [{"reward": 0.2 if reach is None or u < reach else 1.0} for u in range(20)]

    runs = {"outcome": {"history": history(12)}, "prm": {"history": history(11)}, "qrm": {"history": history(4)},
            "never": {"history": history(None)}}
    speed = overopt.convergence(runs, window=1)
    assert speed["start"] == 0.2 and speed["target"] == pytest.approx(0.6)
    assert speed["updates"] == {"outcome": 12, "prm": 11, "qrm": 4, "never": None}
    smoothed = overopt.convergence(runs, window=3)  # a trailing mean of 3 crosses 0.6 one update after the jump
    assert smoothed["updates"] == {"outcome": 13, "prm": 12, "qrm": 5, "never": None}
    assert overopt.updates_to_reach([0.1, 0.5, 0.4], 0.5) == 1 and overopt.updates_to_reach([0.1], 0.5) is None


ARM = {"gold_rise": 0.1, "gold_fall": 0.2, "proxy_rise": 0.3, "proxy_kl_rank_r": 0.9, "gold_end": 0.1}


def gains(d, alpha: float, beta: float) -> list[float]:
    return [x * (alpha - beta * x) for x in d]


def orm_seed(i, free=None, kl=None, bon=(0.35, 0.25), alpha=0.3, beta=0.1, rl_d=(0.0, 0.5, 1.0, 4.0), lost=0.3,
             kept=0.2) -> dict:
    """The ORM's two runs (summary numbers ± 0.01 over the seeds: ARM for β = 0, changed by `free`,
    its evaluations' ORM score and KL in update order; a small fall and a high end for β = 0.3, changed
    by `kl`), the gold gains of best-of-N (d up to 1) and of the β = 0 run (at `rl_d`) on d(α - βd)
    with the given coefficients ± 0.01, the worked-form share lost at β = 0 and kept by the KL."""
    def arm(values: dict, form_share: float) -> dict:
        proxies = values.pop("proxy_points", (0.2, 0.4, 0.6, 0.8))  # the ORM's score at each evaluation
        kls = values.pop("kl_points", (0.0, 1.0, 2.0, 3.0))  # and the KL there
        summary = {"peak_step": 10, "gold_start": 0.3, "gold_peak": 0.4, "proxy_start": 0.2, "proxy_end": 0.8,
                   "kl_end": 20.0, **{k: spread(v, i) for k, v in values.items()}}
        return {"summary": summary, "final": stats_of(worked_form_share=spread(form_share, i), pass_at_1=0.1),
                "points": [{"proxy": spread(p, (i + k) % 3), "kl": q} for k, (p, q) in enumerate(zip(proxies, kls))]}

    bon_d, (a, b) = [0.0, 0.5, 1.0], (spread(v, i) for v in bon)
    whole = {"alpha": -0.1, "beta": 0.0, "r2": 0.5}  # the whole run's fit: shown, never decided
    fit = {"rl": {"d": list(rl_d), "gain": gains(rl_d, spread(alpha, i), spread(beta, i)), "fit_bon": whole,
                  "fit_rl": whole},
           "bon": {"d": bon_d, "gain": gains(bon_d, a, b), "fit_bon": {"alpha": a, "beta": b, "r2": 0.98}}}
    return {"kl_beta": 0.3, "held": {"stats": stats_of(worked_form_share=0.5)}, "fits": fit,
            "arms": {"no_kl": arm({**ARM, **(free or {})}, 0.5 - lost),
                     "kl": arm({**ARM, "gold_fall": 0.05, "gold_end": 0.3, **(kl or {})}, 0.5 - lost + kept)}}


@pytest.mark.parametrize("change,expected", [
    ({}, [True, True, True, True, True, True, True, True, True, True]),
    ({"free": {"proxy_points": (0.2, 0.6, 0.4, 0.8)}}, [False, True, True, True, True, True, True, True, True, True]),  # one falls
    ({"free": {"proxy_points": (0.2, 0.6, 0.6, 0.8)}}, [None, True, True, True, True, True, True, True, True, True]),  # one flat
    ({"free": {"proxy_points": (0.2, 0.6, 0.4, 0.8), "kl_points": (0.0, 2.0, 1.0, 3.0)}},
     [True, True, True, True, True, True, True, True, True, True]),  # it fell between updates, but so did KL: rises with KL
    ({"free": {"gold_rise": 0.0}}, [True, None, True, True, True, True, True, True, True, True]),  # no rise to a peak shown
    ({"free": {"gold_fall": 0.0}}, [True, None, None, None, True, True, False, None, True, True]),  # no fall: nothing to save
    ({"free": {"gold_fall": -0.1}}, [True, False, False, False, True, True, False, None, True, True]),  # ends above its pick
    ({"free": {"proxy_rise": -0.1}}, [True, True, False, True, True, True, False, True, True, False]),  # no proxy rise
    ({"bon": (-0.1, 0.25)}, [True, True, True, True, False, True, True, True, True, True]),  # best-of-N's α is negative
    ({"alpha": -0.1}, [True, True, True, True, True, False, True, True, True, True]),  # the RL fit's α is negative
    ({"beta": 0.0}, [True, True, True, True, True, None, True, True, True, True]),  # no fall within the range: β not shown
    ({"rl_d": (0.0, 0.5, 2.0, 4.0)}, [True, True, True, True, True, None, True, True, True, True]),  # one evaluation in range
    ({"kl": {"gold_fall": 0.2}}, [True, True, True, True, True, True, None, True, True, True]),  # β = 0.3 falls as far
    ({"kl": {"gold_end": 0.1}}, [True, True, True, True, True, True, True, None, True, True]),  # and ends no higher
    ({"lost": 0.0}, [True, True, True, True, True, True, True, True, None, True]),  # β = 0 kept its form: no gibberish shown
    ({"free": {"gold_end": 0.35}}, [True, True, True, True, True, True, True, False, True, False]),  # ends above the start
    ({"lost": -0.3}, [True, True, True, True, True, True, True, True, False, True]),  # more well-formed than the cold start
])
def test_overoptimisation_verdicts_decide_over_the_seeds(change, expected):
    claims = overopt.overoptimisation_claims(three(orm_seed, **change))
    assert verdicts(claims) == expected
    assert claims[1]["claim"].endswith("the gold reward peaks and then degrades") and "monotonically" not in claims[1]["claim"]
    claims = claims[:1] + claims[2:]
    assert ["monotonically" in claims[0]["claim"], "over-optimises" in claims[1]["claim"],
            "other than the RM being optimised" in claims[2]["claim"], "best-of-N" in claims[3]["claim"], "sqrt(KL)" in claims[4]["claim"]
            and claims[4]["claim"].endswith(": RL"), claims[5]["claim"].endswith("(here β = 0 against 0.3)"),
            "KL to the reference" in claims[6]["claim"], "gibberish" in claims[7]["claim"],
            "below the cold start's" in claims[8]["claim"]] == [True] * 9
    assert ("premise not met" in claims[6]["measured"]) is (claims[2]["holds"] is not True)  # the fall's own verdict
    assert ("cannot fit" in claims[4]["measured"]) is (change.get("rl_d", (0, 0, 1))[2] > 1)  # beyond best-of-N's range


def length_seed(i, orm_r=0.4, qrm_r=0.8, within=(0.1, 0.3), qrm_pad=20.0, orm_pad=0.0, study=True, biased_r=0.5,
                raw=(26.0, 3.5, 0.25), normalised=(22.0, 0.6, 0.3), balanced=(22.0, 3.6, 0.2), capped=(22.0, 0.6, 0.3),
                penalised=(22.0, 0.6, 0.3)) -> dict:
    """The cold start: 13 tokens, 0.5 characters past the worked solution, pass@1 0.3; each RL run's
    (tokens, characters past, pass@1) ± 0.01 over the seeds; r(score, tokens) over all samples as given,
    within the right and within the wrong ones `within`, each ± 0.01."""
    def corr(r: float) -> dict:
        return {"all": spread(r, i), "right": spread(within[0], i), "wrong": spread(within[1], i)}

    def final(tokens: float, chars: float, gold: float) -> dict:
        return stats_of(length=spread(tokens, i), excess_chars=spread(chars, i), pass_at_1=spread(gold, i))

    held = {"samples": 64, "stats": stats_of(length=13.0, excess_chars=0.5, pass_at_1=0.3),
            "length_corr": {"ORM": corr(orm_r), "PRM-min": corr(0.2), "Q-RM (mean Z)": corr(qrm_r)}}
    length = {"length_corr": {"length-preferring RM": corr(biased_r)},
              "runs": {name: {"final": final(*run)} for name, run in zip(overopt.LENGTH_RUNS, (
                  raw, normalised, balanced, capped, penalised))}}
    return {"held": held, "runs": {"qrm": {"final": final(46.0, 0.5 + qrm_pad, 0.0)}},
            "arms": {"no_kl": {"final": final(12.0, 0.5 + orm_pad, 0.0)}}, "length": length if study else None}


@pytest.mark.parametrize("change,expected", [
    ({}, [True, True, True, None, None, True, True, True, False, True, True]),  # the ORM's run does not pad; the balanced RM as much
    ({"orm_pad": 2.0}, [True, True, True, True, True, True, True, True, False, True, True]),
    ({"orm_r": -0.2}, [False, True, True, None, None, True, True, True, False, True, True]),  # the pads claim reads r within right and wrong
    ({"qrm_pad": 0.0}, [True, None, None, None, None, True, True, True, False, True, True]),
    ({"within": (0.0, 0.3)}, [True, None, True, None, None, True, True, True, False, True, True]),  # not shown within the right answers
    ({"within": (0.1, -0.3)}, [True, False, True, False, None, True, True, True, False, True, True]),  # shorter wrong answers score higher
    ({"within": (-0.3, -0.3), "orm_pad": 2.0}, [True, False, True, False, True, True, True, True, False, True, True]),  # correctness only
    ({"raw": (13.0, 3.5, 0.25)}, [True, True, True, None, None, True, True, True, False, True, True]),  # no more tokens, but padding grows
    ({"raw": (26.0, 3.5, 0.4)}, [True, True, True, None, None, False, True, True, False, True, True]),  # they grow, but so does gold
    ({"biased_r": 0.0}, [True, True, True, None, None, True, None, True, False, True, True]),  # padding without the correlation
    ({"raw": (26.0, 0.5, 0.25)}, [True, True, True, None, None, None, True, None, None, None, None]),  # longer, padding not shown
    ({"raw": (26.0, 0.2, 0.25)}, [True, True, True, None, None, False, True, None, None, None, None]),  # padding shown to shrink
    ({"normalised": (22.0, 3.6, 0.3)}, [True, True, True, None, None, True, True, False, False, True, True]),
])
def test_length_verdicts_decide_over_the_seeds(change, expected):
    claims = overopt.length_claims(three(length_seed, **change))
    assert verdicts(claims) == expected
    assert ["Q-RM" in claims[1]["claim"], "ORM" in claims[3]["claim"], "answers grow" in claims[5]["claim"],
            "correlates with token count" in claims[6]["claim"], "normalise" in claims[7]["claim"],
            "balanced" in claims[8]["claim"], "cap generation" in claims[9]["claim"],
            "empty verbosity" in claims[10]["claim"]] == [True] * 8
    for pads, padding in ((claims[1], claims[2]), (claims[3], claims[4])):  # the symptom alone, the same arm
        assert padding["claim"].startswith("reward hacking shows as verbose padding")
        assert padding["claim"].endswith(pads["claim"][pads["claim"].index("("):])
        assert padding["measured"].split(": ", 1)[1].split(" (mean")[0] in pads["measured"]  # the same growth
    assert "tokens after minus before" in claims[5]["measured"] and "length-balanced pairs" in claims[5]["measured"]
    padding = change.get("raw", (0, 3.5))[1] - 0.5  # the unfixed RM's, after RL minus the cold start's
    for fix in claims[7:]:
        assert ("premise not met" in fix["measured"]) is (padding < 0)  # shown absent
        assert ("inconclusive: the unfixed RM's padding gain" in fix["measured"]) is (padding == 0)  # not shown


def test_length_claims_without_the_study_keep_the_correlation_and_the_rl_runs():
    seeds = three(length_seed, study=False)
    assert verdicts(overopt.length_claims(seeds)) == [True, True, True, None, None]
    no_qrm = [{**s, "runs": {}} for s in seeds]
    assert len(overopt.length_claims(no_qrm)) == 3


def merged(*parts: dict) -> dict:
    """The parts' keys together; a key in several, their dicts merged the same way (the last part wins)."""
    whole = {}
    for part in parts:
        for k, v in part.items():
            whole[k] = merged(whole[k], v) if isinstance(v, dict) and isinstance(whole.get(k), dict) else v
    return whole


def test_check_claims_are_the_studys_claims_in_order():
    credit = {"solutions": 7, "results": {"PRM drop (score - previous)": {"auroc": 0.7, "top1": 0.5},
                                          "Q-RM (mean Z of the step)": {"auroc": 0.6, "top1": 0.4}}}
    seeds = [merged(label_seed(i), rerank_seed(i), rl_seed(i), orm_seed(i), length_seed(i), {"held": {"credit": credit}})
             for i in range(3)]
    args = overopt.Args()
    assert overopt.check_claims(args, seeds) == (
        overopt.label_claims(seeds) + overopt.rerank_claims(seeds) + prm.credit_claims(credit, credit, credit)
        + overopt.rl_claims(args, seeds) + overopt.overoptimisation_claims(seeds) + overopt.length_claims(seeds))


# ------------------------------------------------------------------------------ the copy of 05's critic (ppo)
def test_the_critics_settings_are_05s_defaults_and_smoke_values():
    assert (overopt.GAE_LAMBDA, overopt.CRITIC_LR) == (critic05.Args().gae_lambda, critic05.Args().critic_lr)
    assert overopt.Args().critic_warmup == critic05.Args().critic_warmup
    smoke = (common.apply_smoke(script.Args(smoke=True)).critic_warmup for script in (overopt, critic05))
    assert len(set(smoke)) == 1


def test_gae_and_whitening_copies_give_05s_numbers():
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([7, 1, 4, 0, 7])  # full, one token, padded, empty
    mask = torch.arange(7)[None] < lengths[:, None]
    values, rewards = torch.randn(5, 7, generator=g), torch.rand(5, generator=g)
    for copied, original in zip(overopt.token_gae(values, rewards, mask),
                                critic05.token_gae(values, rewards, mask, 1.0, critic05.Args().gae_lambda)):
        assert torch.equal(copied, original)
    advantages = torch.randn(5, 7, generator=g)
    assert torch.equal(overopt.whiten(advantages, mask), critic05.whiten(advantages, mask))
    one = torch.zeros(5, 7, dtype=torch.bool)
    one[0, 0] = True  # a single token: left as it is
    assert torch.equal(overopt.whiten(advantages, one), critic05.whiten(advantages, one))


def parity_reward(problems, texts, truncated):
    """A reward that varies on a random model's samples (the verifier gives it 0 everywhere)."""
    return torch.tensor([float((len(t) + p.start) % 2) for p, t in zip(problems, texts)]) * (~truncated).float()


def test_the_critic_copy_reads_warms_up_and_steps_as_05s(monkeypatch):
    """The same random stream at construction, the same warm-up losses (05's with 2 updates), then the
    same V, value loss and parameters after one value step on the same batch and targets."""
    monkeypatch.setattr(critic05.grpo, "verifier_rewards", parity_reward)
    monkeypatch.setattr(overopt, "verifier_rewards", parity_reward)
    policy, tok = lm_pins.tiny_model(2)
    run = dataclasses.replace(prm.Args(), prompts=2, group_size=4, max_new_tokens=10, max_grad_norm=0.5)
    ppo = critic05.Args(critic_warmup=2)
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n", "45*2\n", "7\n"])
    completions = lm_world.sample_completions(policy, ids, mask, 10, tok.eos_token_id, tok.pad_token_id,
                                            torch.Generator().manual_seed(0))
    targets = torch.rand(completions.completion_mask.shape, generator=torch.Generator().manual_seed(1))
    critics, states, warm_ups, values, losses = [], [], [], [], []
    for critic_of, warm_up, step in (
            (critic05.TokenCritic, lambda c: critic05.warm_up_critic(c, policy, tok, run, ppo, "cpu"),
             lambda c, o: critic05.value_step(c, o, completions, targets, 1, 0.5)),
            (overopt.TokenCritic, lambda c: overopt.warm_up_critic(c, policy, tok, run, 2, "cpu"),
             lambda c, o: overopt.value_step(c, o, completions, targets, 0.5))):
        torch.manual_seed(7)
        critic = critic_of(policy)
        critics.append(critic)
        states.append(torch.get_rng_state())  # what the head's draw left for whatever comes next
        warm_ups.append(warm_up(critic))
        with torch.no_grad():
            values.append(critic(completions))
        losses.append(step(critic, torch.optim.AdamW(critic.parameters(), lr=overopt.CRITIC_LR, weight_decay=0.0)))
    assert torch.equal(states[0], states[1])
    assert warm_ups[0] == warm_ups[1] and any(loss > 0 for loss in warm_ups[0])
    assert torch.equal(values[0], values[1]) and values[0].abs().sum() > 0
    assert losses[0] == losses[1]
    for a, b in zip(critics[0].parameters(), critics[1].parameters(), strict=True):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------------ CLI and smoke
@pytest.mark.parametrize("flag,value,message", [
    ("--label-ns", "1,32", "--label-ns must be in 1..--rollouts-per-prefix"),
    ("--rl-methods", "outcome,ppo", "argument --rl-methods: 'ppo' is not one of outcome"),
    ("--rm-steps", "0", "--rm-steps must be positive"),
    ("--length-steps", "0", "--length-steps must be positive"),
    ("--seeds", "1", "--seeds must be at least 2"),
    ("--parts", "study,gae", "argument --parts: 'gae' is not one of study"),
    ("--qrm-samples", "6,3", "--qrm-samples must be at least two increasing sizes"),
    ("--qrm-samples", "1,6", "--qrm-samples must be at least two increasing sizes"),
    ("--qrm-samples", "6", "--qrm-samples must be at least two increasing sizes"),
    ("--critic-warmup", "-1", "--critic-warmup must be non-negative"),
    ("--ensemble-size", "1", "--ensemble-size must be at least 2"),
    ("--small-beta", "0.3", "--small-beta must be above 0 and below --kl-beta"),
    ("--small-beta", "0", "--small-beta must be above 0 and below --kl-beta"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("studies.06_overoptimisation", flag, value)


def test_smoke_run_writes_results_and_figures_and_repeats_exactly(tmp_path, read_results, monkeypatch):
    sampled = record_samples(monkeypatch)
    args = overopt.Args(smoke=True, device="cpu", out=str(tmp_path / "out"), cache=str(tmp_path / "cache"),
                        length_bias=True)
    first = overopt.main(args)
    data = read_results(tmp_path / "out" / "results.json")
    for name in ("label_quality.png", "best_of_n.png", "rl.png", "overoptimisation.png", "length_bias.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    assert {"best_of_n[PRM-min][N=1]", "best_of_n[majority vote][N=4]", "hard_label_accuracy[N=4]",
            "rl[qrm]_pass@1_final", "best_of_n[PRM-mean][N=4]", "length_corr[ORM]_all", "rl[prm]_final_extra_lines",
            "orm_rl[no_kl]_final_excess_chars", "orm_rl[kl]_gold_fall", "calibration_to_value",
            "length_corr[length-balanced RM]_wrong", f"length_rl[{overopt.LENGTH_RUNS[1]}]_final_pass@1"} <= set(first["metrics"])
    assert [s["seed"] for s in data["seeds"]] == [0, 1] and data["metrics"] == common.json_ready(first["metrics"])
    assert all(set(s["length"]["runs"]) == set(overopt.LENGTH_RUNS) for s in data["seeds"])
    again = overopt.main(overopt.Args(reanalyse=str(tmp_path / "out" / "results.json")))["claims"]  # nothing trained
    assert again == data["claims"] and read_results(tmp_path / "out" / "results.json") == data
    # each seed labels its own solutions: 4 (--rollouts-per-prefix) rollouts from each step prefix of each
    solutions = [(prompts, texts) for prompts, texts in sampled if len(texts) == 16]  # 4 problems x 4 samples
    for prompts, texts in solutions[:1]:
        prefixes = [p + "\n".join(t.split("\n")[:k + 1]) + "\n" for p, t in zip(prompts, texts) for k in range(t.count("\n"))]
        following = sampled[sampled.index((prompts, texts)) + 1][0]
        assert not prefixes or following == [prefix for prefix in prefixes for _ in range(4)]
    # the gold verifier's credit (-1 on the first wrong step, 0 elsewhere) localises every failure exactly
    metrics = first["metrics"]
    assert metrics["localisation_auroc[gold verifier]"] == 1.0 and metrics["localisation_top1[gold verifier]"] == 1.0
    largest = max(data["seeds"][0]["held"]["ns"])  # with N = all samples, no reranker's pick beats the oracle
    for name in ("PRM-min", "PRM-product", "ORM", "Q-RM (mean Z)", "majority vote"):
        assert metrics[f"best_of_n[{name}][N={largest}]"] <= metrics[f"best_of_n[oracle (pass@N)][N={largest}]"]
    # a metric is the mean of the seeds'
    assert metrics["rl[outcome]_pass@1_final"] == pytest.approx(
        np.mean([s["runs"]["outcome"]["evals"][-1]["pass@1"] for s in data["seeds"]]))
    # the tables it prints and the docs show hold the same numbers as its metrics
    tables = data["metrics"]["tables"]
    assert set(tables) == {"labels", "label_quality", "best_of_n", "localisation", "rl", "rl_summary", "written",
                           "overopt_bon", "overopt_rl", "overopt_fits", "length_corr", "length_rl"}
    names = tables["best_of_n"]["header"][1:]
    for row in tables["best_of_n"]["rows"][:-1]:  # the last row is Lightman et al.'s
        assert row[1:] == [data["metrics"][f"best_of_n[{name}][N={row[0]}]"] for name in names]
    methods = overopt.Args().rl_method_list
    assert [row[0] for row in tables["rl"]["rows"]][:len(methods)] == [overopt.RL_METHODS[m] for m in methods]
    assert [row[1] for row in tables["rl_summary"]["rows"]][:len(methods)] == [
        data["metrics"][f"rl[{m}]_updates_to_halfway"] for m in methods]
    assert tables["label_quality"]["rows"][0][1] == data["metrics"]["hard_label_accuracy[N=1]"]
    assert len(first["claims"]) == len(data["claims"]) and all(c["holds"] in (True, False, None) for c in data["claims"])
    # a seed's numbers do not depend on the seeds run before it: seed 1 again, alone
    args, device, _, policy, tokenizer, _ = lm_world.start_lm_run(args)
    again = common.json_ready(overopt.run_seed(policy, tokenizer, args, 1, device))
    assert json.dumps(timeless(again)) == json.dumps(timeless(data["seeds"][1]))


def test_the_checks_smoke_run_writes_their_own_results_and_reanalyses_them(tmp_path, read_results):
    args = overopt.Args(smoke=True, device="cpu", out=str(tmp_path / "out"), cache=str(tmp_path / "cache"),
                        parts="hacking,pairs,ppo,marks,broadcast,ensemble,betas")
    first = overopt.main(args)
    data = read_results(tmp_path / "out" / "results.json")
    constructed = [merged(hacking_seed(i), broadcast_seed(i), ensemble_seed(i, orms=2), betas_seed(i)) for i in range(3)]
    assert [c["claim"] for c in first["claims"]] == [c["claim"] for c in overopt.check_claims(args, constructed)]
    seeds, tables, metrics = data["seeds"], data["metrics"]["tables"], data["metrics"]
    assert [s["seed"] for s in seeds] == [0, 1] and set(seeds[0]) == {"seed", "rl_steps", "hacking", "pairs", "ppo", "marks",
                                                                      "broadcast", "ensemble", "betas"}
    assert [row["samples"] for row in seeds[0]["pairs"]["sweep"]] == [2, 4]  # the smoke sizes
    for s in seeds:  # each policy judged on the very samples its written stats describe
        assert all(r["judged"]["pass@1"] == r["final"]["pass@1"] for r in s["hacking"]["runs"].values())
        assert len(s["ppo"]["critic_warmup_losses"]) == 1 and s["ppo"]["gae_lambda"] == 0.95  # 05's smoke warm-up, its λ
        assert s["marks"] == s["hacking"]["cold_start"] == s["broadcast"]["cold_start"]  # the study's models
        assert s["broadcast"]["runs"]["prm"]["judged"] == s["hacking"]["runs"]["prm"]["judged"]  # the same run
        assert len(s["ensemble"]["losses"]) == 1 and len(s["ensemble"]["losses"][0]) == 2  # the smoke's 2 ORMs, 2 steps
        assert [len(a["log"]) for a in s["ensemble"]["arms"].values()] == [2, 2]  # --overopt-steps updates each
        assert s["betas"]["arms"]["no_kl"]["evals"] == s["ensemble"]["arms"]["single"]["evals"]  # the same run
    assert set(tables) == {"hacking_check", "pairs_check", "ppo_check", "marks_check", "broadcast_check",
                           "ensemble_check", "betas_check"}
    assert tables["ensemble_check"]["rows"][1][4] == metrics["ensemble[ensemble]_gold_fall"]
    assert tables["betas_check"]["rows"][1][-1] == metrics["betas[small]_well_formed_share"]
    assert tables["marks_check"]["rows"][2][1:] == [metrics["marks_left_out"], metrics["marks_left_out_marked_wrong"]]
    assert tables["marks_check"]["rows"][3][1:] == [metrics["marks_creative"], metrics["marks_creative_marked_wrong"]]
    assert tables["broadcast_check"]["rows"][0][2] == metrics["broadcast[broadcast]_wrong_step_score"]
    assert tables["broadcast_check"]["rows"][1][-1] == metrics["broadcast[prm]_gold_fall"]
    assert tables["marks_check"]["rows"][0][1:] == [metrics["marks_wrong_steps"], metrics["marks_wrong_marked_right"]]
    assert [row[0] for row in tables["hacking_check"]["rows"]] == ["cold start", *(overopt.RL_METHODS[m]
                                                                                   for m in ("outcome", "prm"))]
    assert tables["hacking_check"]["rows"][2][3] == metrics[f"hacking[{overopt.RL_METHODS['prm']}]_wrong_step_score"]
    assert tables["pairs_check"]["rows"][1][2] == metrics["qrm_pairs[s=4]_auroc"] == pytest.approx(
        np.mean([s["pairs"]["sweep"][1]["auroc"] for s in seeds]))
    assert tables["ppo_check"]["rows"][1][-1] == metrics["ppo[gae]_pass@1_final"]
    again = overopt.main(overopt.Args(reanalyse=str(tmp_path / "out" / "results.json")))["claims"]  # nothing trained
    assert again == data["claims"] and read_results(tmp_path / "out" / "results.json") == data


def timeless(tree):
    """A results tree without its wall-clock times (the only numbers that may differ between runs)."""
    if isinstance(tree, dict):
        return {k: timeless(v) for k, v in tree.items() if "wall_clock" not in str(k)}
    return [timeless(v) for v in tree] if isinstance(tree, list) else tree


@pytest.mark.parametrize("claimed,holds", [(0.05, None), (0.5, False)])
def test_a_gain_claim_says_no_only_where_it_rules_out_the_papers_gain(claimed, holds):
    """Q-RM behind the ORM on average, but its interval still holds the paper's +5 points: cannot say no."""
    def seed(gap: float) -> dict:
        runs = {m: {"evals": [{"pass@1": p}]} for m, p in (("qrm", 0.5 + gap), ("orm", 0.5))}
        return {"rl_steps": 36, "runs": runs}

    seeds = [seed(g) for g in (-0.30, 0.10, -0.20)]  # -0.133 [-0.65, +0.384]: half-width 0.517
    found = overopt.gain_claim(seeds, "Q-RM raises pass@1", "the ORM", lambda s: s["runs"]["orm"], claimed=claimed)
    assert found["holds"] is holds and "-0.133 [-0.65, +0.384]" in found["measured"]
