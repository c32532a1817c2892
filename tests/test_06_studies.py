"""studies/06_overoptimisation.py: the ORM, a PRM's score of a whole solution and Q-RM's advantages
(what the chapter leaves out), label quality, best-of-N and majority vote, the full-scale RL
comparison, RL against the ORM and Gao et al.'s forms, length bias, their claims and tables, the CLI
and a smoke run. The hand-made problems, fake sampler and fake reward models are the chapter's tests'."""

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
    without_timing,
)

import common
import lm_pins
import lm_world
from lm_pins import hand_completions

prm = importlib.import_module("06_prm_qrm")
overopt = importlib.import_module("studies.06_overoptimisation")


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
    example = credit["example"]  # the first with a right step before the slip and a step after it
    assert example["text"] == SLIP and example["problem"] == "12+7*3-5"
    assert all(len(row) == len(SLIP) + 1 for row in example["rows"].values())  # one value a token, EOS included
    steps_of_tokens = np.cumsum([0] + [c == "\n" for c in SLIP])  # the step each token is in
    assert example["rows"]["PRM drop"] == pytest.approx(drops[0][steps_of_tokens].tolist())
    assert example["rows"]["gold verifier"] == [0.0 if k == 0 else (-1.0 if k == 1 else 0.0) for k in steps_of_tokens]


def test_proxy_advantages_centre_the_orm_score_and_log_proxy_kl_and_gold(monkeypatch):
    given = fake_reward_models(monkeypatch)
    policy, reference = lm_pins.tiny_model(1)[0], lm_world.frozen_copy(lm_pins.tiny_model(2)[0])
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    with torch.no_grad():
        logp, _ = lm_world.token_logprobs(policy, r.sequences, r.attention_mask, r.prompt_length)
    r.logprobs = logp * r.completion_mask  # as sampled from the policy
    log = []
    A = overopt.proxy_advantage_fn("ORM", reference, 2, log)(r, GROUPED_REWARDS, [SMALL, PROBLEM])
    proxy = torch.sigmoid(given["ORM"][torch.arange(4), [len(t) for t in GROUPED]])  # read on EOS
    centred = proxy.view(2, 2) - proxy.view(2, 2).mean(1, keepdim=True)
    torch.testing.assert_close(A, centred.flatten()[:, None] * r.completion_mask)
    ref_logp, _ = lm_world.token_logprobs(reference, r.sequences, r.attention_mask, r.prompt_length)
    kl = sum(float((logp[i] - ref_logp[i])[r.completion_mask[i]].sum()) for i in range(4)) / 4
    assert log == [{"proxy": pytest.approx(float(proxy.mean())), "kl": pytest.approx(kl, abs=1e-5), "gold": 0.5}]
    assert abs(kl) > 0.1


def test_rl_comparison_runs_the_chapters_advantages_then_reads_what_each_trained_policy_writes(monkeypatch):
    given = fake_reward_models(monkeypatch)
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    initial, _ = lm_pins.tiny_model(0)
    seen, measured = {}, []

    def train_spy(policy, reference, tokenizer, args, advantage_fn, held_out, device, desc="RL"):
        assert policy is not initial and reference is not initial
        with torch.no_grad():
            next(policy.parameters()).add_(1.0)  # training moves this copy only
        seen[desc] = advantage_fn(r, GROUPED_REWARDS, [SMALL, PROBLEM])
        return {"history": [], "evals": [{"step": 0, "pass@1": 0.0}]}

    def stats_spy(policy, tokenizer, problems, args, device):
        measured.append((policy, problems))
        return stats_of()

    monkeypatch.setattr(prm, "train", train_spy)
    monkeypatch.setattr(overopt, "what_it_writes", lambda policy, tok, problems, args, device: [p.prompt for p in problems])
    monkeypatch.setattr(overopt, "sample_stats", stats_spy)
    run = HandArgs(hand_problems=(PROBLEM, SMALL, PROBLEM), eval_problems=2, group_size=2)
    runs = overopt.rl_comparison(initial, TOK, {"prm": "PRM", "orm": "ORM", "qrm": "QRM"}, run,
                                 overopt.Args(rl_methods="outcome,qrm"), "cpu")
    assert list(runs) == ["outcome", "qrm"] and list(seen) == ["RL outcome", "RL qrm"]
    torch.testing.assert_close(seen["RL outcome"], prm.outcome_advantage_fn(r, GROUPED_REWARDS, None))
    torch.testing.assert_close(seen["RL qrm"], overopt.token_advantages(given["QRM"], r.completion_mask, 2))
    for (policy, problems), run_of in zip(measured, runs.values()):
        assert problems == [PROBLEM, SMALL] and run_of["examples"] == [PROBLEM.prompt, SMALL.prompt]
        assert not torch.equal(next(policy.parameters()), next(initial.parameters()))  # the trained copy
        assert run_of["final"] == stats_of() and run_of["wall_clock_s"] >= 0


def test_proxy_advantages_are_05s_dr_grpo_centring():
    g = torch.Generator().manual_seed(0)
    proxy = torch.rand(3, 4, generator=g)
    assert torch.equal(overopt.centred_advantages(proxy), lm_pins.grpo.group_advantages(proxy, "dr_grpo"))


# ---------------------------------------------------------------------- Gao et al.'s forms
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_gao_fit_recovers_alpha_and_beta(form):
    d = np.linspace(0.1, 3.0, 20)
    truth = {"alpha": 0.4, "beta": 0.15}
    fit = overopt.fit_gao(d, overopt.gao_curve(d, truth, form), form)
    assert fit["alpha"] == pytest.approx(0.4) and fit["beta"] == pytest.approx(0.15) and fit["r2"] == pytest.approx(1.0)
    d_peak = 0.4 / (2 * 0.15)  # d(α - βd) peaks at α / 2β
    assert overopt.gao_curve(np.array([d_peak]), truth, "bon")[0] == pytest.approx(0.4 ** 2 / (4 * 0.15))


def test_overoptimisation_rl_optimises_the_orm_without_kl_and_reads_kl_and_proxy_at_each_evaluation(monkeypatch):
    """A fake loop logs kl = -6, -6, -6, -6, 10, 30 and proxy 0.1 .. 0.6 over 6 updates, evaluating
    every 3: each point takes the 5-update trailing means at its update (the last at the last
    update), KL clipped at 0, and 0 at the reference itself."""
    initial, _ = lm_pins.tiny_model(0)
    made, ran = [], []

    def proxy_fn(orm, reference, group_size, log):
        made.append((orm, reference, group_size, log))
        return "proxy advantages"

    def train_spy(policy, reference, tokenizer, args, advantage_fn, held_out, device, desc="RL"):
        ran.append((policy, args, advantage_fn, held_out))
        log = made[0][3]
        for kl, proxy in zip([-6, -6, -6, -6, 10, 30], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]):
            log.append({"proxy": proxy, "kl": kl, "gold": 0.0})
        return {"history": [], "evals": [{"step": s, "pass@1": g} for s, g in ((0, 0.25), (3, 0.5), (6, 0.375))]}

    monkeypatch.setattr(overopt, "proxy_advantage_fn", proxy_fn)
    monkeypatch.setattr(prm, "train", train_spy)
    args = HandArgs(hand_problems=(PROBLEM, SMALL, PROBLEM), eval_problems=2, group_size=3, beta=0.04, lr=1e-4,
                    rl_steps=80, eval_every=3)
    result = overopt.overoptimisation_rl(initial, TOK, {"prm": "PRM", "orm": "ORM", "qrm": "QRM"}, args,
                                       overopt.Args(overopt_steps=6, overopt_lr=3e-4), "cpu")
    ((orm, reference, group_size, _),) = made
    assert orm == "ORM" and group_size == 3 and reference is not initial
    ((policy, run_args, advantage_fn, held_out),) = ran
    assert policy is not initial and advantage_fn == "proxy advantages" and held_out == [PROBLEM, SMALL]
    assert (run_args.beta, run_args.lr, run_args.rl_steps) == (0.0, 3e-4, 6)
    assert dataclasses.replace(run_args, beta=0.04, lr=1e-4, rl_steps=80) == args  # nothing else changes
    assert result["points"] == [{"step": 0, "gold": 0.25, "kl": 0.0, "proxy": pytest.approx(0.1)},
                                {"step": 3, "gold": 0.5, "kl": 0.0, "proxy": pytest.approx(0.25)},
                                {"step": 6, "gold": 0.375, "kl": pytest.approx(4.4), "proxy": pytest.approx(0.4)}]


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
    proxy_rl = {"points": [{"kl": kl, "gold": 0.3 + g, "proxy": 0.1 * i} for i, (kl, g) in enumerate(zip(kls, rl_gains))]}
    fits = overopt.overoptimisation_fits(held, proxy_rl)
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
                                   "excess_chars": 3.0, "worked_form_share": 0.75, "worked_form_wrong_share": 0.25})


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
        ran.append((args.rl_steps, advantage_fn(r, GROUPED_REWARDS, None), held_out))
        return {"history": [], "evals": [{"step": 0, "pass@1": 0.25, "length": 9.0}]}

    monkeypatch.setattr(overopt, "train_preference_rm", train_rm)
    monkeypatch.setattr(prm, "train", train_spy)
    monkeypatch.setattr(overopt, "sample_stats", lambda *a, **k: stats_of())
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
    assert list(study["runs"]) == list(overopt.LENGTH_RUNS) and all(steps == 7 for steps, _, _ in ran)
    for (_, advantages, held_out), rm, run_slope in zip(ran, ("ORM", "ORM", "QRM"), (0.0, slope, 0.0)):
        torch.testing.assert_close(advantages, overopt.rm_advantage_fn(rm, 4, run_slope, [])(r, GROUPED_REWARDS, None))
        assert held_out == [PROBLEM, SMALL]
    assert not torch.equal(ran[0][1], ran[1][1])


# ------------------------------------------------------------------------------------ claims
def rerank_inputs(false_positives=0.1, at_largest_n=(0.75, 0.5, 0.75, 0.5, 0.25), drop_auroc=0.75, qrm_auroc=0.75):
    """label_and_rerank_claims' inputs; at_largest_n = (PRM-min, PRM-mean, PRM-product, ORM,
    majority) at the largest N, whose order makes the verdicts (at N = 1 every verdict would go the
    other way)."""
    data = {"quality": {4: {"accuracy": 0.8, "false_positive_rate": false_positives, "false_negative_rate": 0.1},
                        1: {"accuracy": 0.8, "false_positive_rate": 0.0, "false_negative_rate": 0.1}}}
    names = ("PRM-min", "PRM-mean", "PRM-product", "ORM", "majority vote")
    curves = {name: {1: first, 8: last} for name, first, last in zip(names, (0.0, 0.5, 0.5, 0.5, 0.5), at_largest_n)}
    curves["oracle (pass@N)"] = {1: 0.5, 8: 1.0}
    results = {"outcome only (flat)": {"auroc": 0.5, "top1": 0.25}, "PRM step score": {"auroc": 0.6, "top1": 0.3},
               "PRM drop (score - previous)": {"auroc": drop_auroc, "top1": 0.5},
               "Q-RM (mean Z of the step)": {"auroc": qrm_auroc, "top1": 0.5}}
    corr = {"all": 0.4, "right": 0.0, "wrong": 0.3}
    held = {"ns": [1, 8], "curves": curves, "credit": {"solutions": 7, "results": results}, "samples": 16,
            "stats": stats_of(length=13.0, excess_chars=0.5, pass_at_1=0.3),
            "length_corr": {"ORM": corr, "PRM-min": corr, "Q-RM (mean Z)": corr}}
    return prm.Args(label_n=4), data, held


def stats_of(length=20.0, excess_chars=0.5, pass_at_1=0.4, worked_form_wrong_share=0.2) -> dict:
    return {"pass@1": pass_at_1, "length": length, "extra_lines": excess_chars / 6, "padded_share": 0.1,
            "excess_chars": excess_chars, "worked_form_share": 0.5, "worked_form_wrong_share": worked_form_wrong_share}


def verdicts(claims: list[dict]) -> list:
    return [c["holds"] for c in claims]


@pytest.mark.parametrize("change,expected", [
    ({}, [True, True, True, True, True, True, True]),
    ({"false_positives": 0.0}, [False, True, True, True, True, True, True]),  # labels without noise
    ({"at_largest_n": (0.5, 0.25, 0.5, 0.5, 0.25)}, [True, False, True, True, True, True, True]),  # PRM = ORM
    ({"at_largest_n": (0.5, 0.25, 0.5, 0.25, 0.5)}, [True, True, False, False, True, True, True]),  # majority ahead
    ({"at_largest_n": (0.75, 0.75, 0.25, 0.5, 0.25)}, [True, True, True, True, False, True, True]),  # min = mean
    ({"at_largest_n": (0.5, 0.75, 0.25, 0.25, 0.125)}, [True, True, True, True, False, True, True]),  # mean ahead
    ({"drop_auroc": 0.5}, [True, True, True, True, True, False, True]),  # PRM drop no better than chance
    ({"qrm_auroc": 0.5}, [True, True, True, True, True, True, False]),
])
def test_label_and_rerank_verdicts_follow_the_measurements(change, expected):
    args, data, held = rerank_inputs(**change)
    claims = overopt.label_and_rerank_claims(args, data, held) + prm.credit_claims(held["credit"])
    assert verdicts(claims) == expected
    assert ["beats ORM" in claims[1]["claim"], "PRM beats majority" in claims[2]["claim"],
            "ORM beats majority" in claims[3]["claim"], "mean aggregation" in claims[4]["claim"]] == [True] * 4


def test_label_and_rerank_claims_skip_localisation_without_failed_solutions():
    args, data, held = rerank_inputs()
    held["credit"] = {"solutions": 0, "results": {}}
    assert verdicts(overopt.label_and_rerank_claims(args, data, held) + prm.credit_claims(held["credit"])) == [True] * 5


def history(reach: int | None, updates: int = 20) -> list[dict]:
    """A training pass rate of 0.2 until update `reach`, 1.0 from then on (never, for None)."""
    return [{"reward": 0.2 if reach is None or u < reach else 1.0} for u in range(updates)]


def rl_runs(outcome_reach=12, prm_reach=11, qrm_reach=1, qrm_final=0.875, prm_golds=(0.25, 0.6, 0.4),
            outcome_final=0.3, format_shares=(0.5, 0.1)):
    """rl_claims' input. On the training pass rate (read with --speed-window 1) outcome GRPO goes
    0.2 -> 1.0, halfway (0.6) at update `outcome_reach`; by default Q-RM gets there 12x faster
    than outcome GRPO and 11x faster than the PRM. Held-out pass@1: PRM peaks inside and falls."""
    def run(points, reach, share=0.0):
        return {"evals": [{"step": s, "pass@1": p} for s, p in points], "history": history(reach),
                "final": stats_of(worked_form_wrong_share=share)}
    prm_points = tuple(zip((0, 18, 36), prm_golds))
    return {"outcome": run(((0, 0.25), (36, outcome_final)), outcome_reach, format_shares[1]),
            "prm": run(prm_points, prm_reach, format_shares[0]),
            "prm_outcome": run(((0, 0.25), (36, 0.5)), 12), "qrm": run(((0, 0.25), (36, qrm_final)), qrm_reach)}


@pytest.mark.parametrize("change,expected", [
    ({}, [True, True, True, True, True, True, True]),
    ({"qrm_reach": 2}, [False, True, False, True, True, True, True]),  # 6x and 5.5x
    ({"qrm_reach": None}, [None, True, None, True, True, True, True]),  # Q-RM never halfway: no ratio
    ({"outcome_reach": None}, [None, True, None, True, True, True, True]),  # outcome never rises: no halfway mark
    ({"qrm_final": 0.42}, [True, True, True, False, True, True, True]),  # +12 over outcome, +2 over the PRM
    ({"qrm_final": 0.34}, [True, False, True, False, True, True, True]),
    ({"prm_golds": (0.25, 0.6, 0.58)}, [True, True, True, True, True, False, True]),  # falls by only 0.02
    ({"prm_golds": (0.25, 0.2, 0.1)}, [True, True, True, True, False, False, True]),  # never above the start
    ({"format_shares": (0.1, 0.1)}, [True, True, True, True, True, True, False]),
])
def test_rl_verdicts_follow_the_measurements(change, expected):
    claims = overopt.rl_claims(overopt.Args(rl_steps=36, speed_window=1), rl_runs(**change))
    assert verdicts(claims) == expected
    assert "12x faster" in claims[0]["claim"] and "11x faster" in claims[2]["claim"]
    assert "second proxy" in claims[5]["claim"] and "format" in claims[6]["claim"]


def test_convergence_reads_the_smoothed_training_pass_rate_at_one_update_resolution():
    runs = rl_runs(qrm_reach=4)
    speed = overopt.convergence(runs, window=1)
    assert speed["start"] == 0.2 and speed["target"] == pytest.approx(0.6)
    assert speed["updates"] == {"outcome": 12, "prm": 11, "prm_outcome": 12, "qrm": 4}
    smoothed = overopt.convergence(runs, window=3)  # a trailing mean of 3 crosses 0.6 one update after the jump
    assert smoothed["updates"] == {"outcome": 13, "prm": 12, "prm_outcome": 13, "qrm": 5}
    assert overopt.updates_to_reach([0.1, 0.5, 0.4], 0.5) == 1 and overopt.updates_to_reach([0.1], 0.5) is None


def test_rl_claims_need_the_outcome_baseline_and_skip_missing_methods():
    runs = rl_runs()
    args = overopt.Args(speed_window=1)
    assert overopt.rl_claims(args, {k: v for k, v in runs.items() if k != "outcome"}) == []
    assert verdicts(overopt.rl_claims(args, {"outcome": runs["outcome"], "prm": runs["prm"]})) == [True, True, True]
    assert verdicts(overopt.rl_claims(args, {"outcome": runs["outcome"], "qrm": runs["qrm"]})) == [True, True]


def overoptimisation_inputs(golds, proxies, final_excess=0.5):
    fits = {"bon": {"fit_bon": {"alpha": 0.5, "beta": 0.2, "r2": 0.9}}}
    points = [{"gold": g, "proxy": p, "kl": float(i)} for i, (g, p) in enumerate(zip(golds, proxies))]
    evals = [{"step": 10 * i, "pass@1": g, "length": 13.0 + i} for i, g in enumerate(golds)]
    return fits, {"points": points, "evals": evals, "final": stats_of(excess_chars=final_excess)}


@pytest.mark.parametrize("golds,proxies,holds", [
    ((0.3, 0.5, 0.4), (0.1, 0.2, 0.3), True),  # proxy up, gold peaks inside then falls
    ((0.3, 0.5, 0.48), (0.1, 0.2, 0.3), False),  # falls by only 0.02
    ((0.3, 0.5, 0.4), (0.3, 0.2, 0.3), False),  # the proxy did not rise
    ((0.3, 0.4, 0.5), (0.1, 0.2, 0.3), False),  # gold peaks at the end
    ((0.5, 0.4, 0.3), (0.1, 0.2, 0.3), False),  # gold peaks at the start
])
def test_overoptimisation_verdict_needs_a_rising_proxy_and_an_inner_gold_peak(golds, proxies, holds):
    claims = overopt.overoptimisation_claims(*overoptimisation_inputs(golds, proxies))
    assert verdicts(claims) == [holds, None]


def length_inputs(orm_corr=0.4, natural_excess=0.5, biased_corr=0.3, raw=(24.0, 3.5, 0.3), normalised=(16.0, 1.0, 0.35),
                  balanced=(15.0, 0.5, 0.3), qrm_corr=0.8, qrm_excess=20.0):
    """length_claims' inputs: the cold start writes 13 tokens, 0.5 characters past the worked
    solution, pass@1 0.3; each RL run's (tokens, characters past, pass@1) as given."""
    _, _, held = rerank_inputs()
    held["length_corr"]["ORM"] = {"all": orm_corr, "right": 0.0, "wrong": 0.3}
    held["length_corr"]["Q-RM (mean Z)"] = {"all": qrm_corr, "right": 0.5, "wrong": 0.5}
    rl = {"qrm": {"final": stats_of(length=46.0, excess_chars=qrm_excess, pass_at_1=0.0)}}
    _, proxy_rl = overoptimisation_inputs((0.3, 0.5, 0.4), (0.1, 0.2, 0.3), natural_excess)
    runs = {name: {"final": stats_of(length=t, excess_chars=c, pass_at_1=p)}
            for name, (t, c, p) in zip(overopt.LENGTH_RUNS, (raw, normalised, balanced))}
    corr = {"all": biased_corr, "right": biased_corr, "wrong": biased_corr}
    return held, rl, proxy_rl, {"runs": runs, "length_corr": {"length-preferring RM": corr, "length-balanced RM": corr}}


@pytest.mark.parametrize("change,expected", [
    ({}, [True, True, False, True, True, True]),
    ({"orm_corr": 0.05, "natural_excess": 0.8}, [False, True, True, True, True, True]),  # the ORM run pads (+0.3)
    ({"qrm_corr": 0.05}, [True, False, False, True, True, True]),  # Q-RM's score does not track length
    ({"qrm_excess": 0.6}, [True, False, False, True, True, True]),  # its run does not pad
    ({"biased_corr": 0.05}, [True, True, False, False, True, True]),  # no correlation: not the symptom
    ({"raw": (15.0, 3.5, 0.3)}, [True, True, False, False, True, True]),  # answers barely grow
    ({"raw": (24.0, 3.5, 0.35)}, [True, True, False, False, True, False]),  # they grow, but so does gold
    ({"raw": (24.0, 0.7, 0.3)}, [True, True, False, True, None, None]),  # longer but no padding: nothing to mitigate
    ({"normalised": (20.0, 2.5, 0.35)}, [True, True, False, True, False, True]),  # padding cut by a third only
    ({"balanced": (15.0, 0.5, 0.25)}, [True, True, False, True, True, False]),  # less padding, but gold pays for it
])
def test_length_verdicts_follow_the_measurements(change, expected):
    claims = overopt.length_claims(*length_inputs(**change))
    assert verdicts(claims) == expected
    assert ["Q-RM" in claims[1]["claim"], "ORM" in claims[2]["claim"]] == [True, True]
    assert all("7.6" in c["source"] for i, c in enumerate(claims) if i not in (1, 2))


def test_length_claims_without_the_study_keep_the_correlation_and_the_rl_runs():
    held, rl, proxy_rl, _ = length_inputs()
    assert verdicts(overopt.length_claims(held, rl, proxy_rl, None)) == [True, True, False]
    assert verdicts(overopt.length_claims(held, {}, None, None)) == [True]


def test_check_claims_are_the_four_studies_claims_in_order():
    args, data, held = rerank_inputs()
    args = dataclasses.replace(args, rl_steps=36)
    fits, proxy_rl = overoptimisation_inputs((0.3, 0.5, 0.4), (0.1, 0.2, 0.3))
    runs = rl_runs()
    length = length_inputs()[-1]
    held["length_corr"]["Q-RM (mean Z)"] = {"all": 0.8, "right": 0.5, "wrong": 0.5}
    study_args = overopt.Args(rl_steps=36, speed_window=1)
    assert overopt.check_claims(args, study_args, data, held, runs, fits, proxy_rl, length) == (
        overopt.label_and_rerank_claims(args, data, held) + prm.credit_claims(held["credit"])
        + overopt.rl_claims(study_args, runs) + overopt.overoptimisation_claims(fits, proxy_rl)
        + overopt.length_claims(held, runs, proxy_rl, length))


def test_overoptimisation_claims_without_the_rl_run_keep_the_fit_only():
    fits, _ = overoptimisation_inputs((0.3, 0.5, 0.4), (0.1, 0.2, 0.3))
    (only,) = overopt.overoptimisation_claims(fits, None)
    assert only["holds"] is None and "α=0.500, β=0.200" in only["measured"]


# ------------------------------------------------------------------------------ CLI and smoke
@pytest.mark.parametrize("flag,value,message", [
    ("--label-ns", "1,32", "--label-ns must be in 1..--rollouts-per-prefix"),
    ("--rl-methods", "outcome,ppo", "argument --rl-methods: 'ppo' is not one of outcome"),
    ("--rm-steps", "0", "--rm-steps must be positive"),
    ("--length-steps", "0", "--length-steps must be positive"),
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
            "overopt_rl_final_excess_chars", "length_corr[length-balanced RM]_wrong",
            f"length_rl[{overopt.LENGTH_RUNS[1]}]_final_pass@1"} <= set(first["metrics"])
    assert set(data["length_bias"]["runs"]) == set(overopt.LENGTH_RUNS)
    assert data["metrics"] == common.json_ready(first["metrics"])
    # the labels' rollouts: 4 (--rollouts-per-prefix) from each step prefix of each sampled solution
    (solution_prompts, solutions), (rollout_prompts, _) = sampled[:2]
    assert len(solutions) == 16 == first["metrics"]["label_solutions"]
    prefixes = [prompt + "\n".join(text.split("\n")[:k + 1]) + "\n"
                for prompt, text in zip(solution_prompts, solutions) for k in range(text.count("\n"))]
    assert prefixes and rollout_prompts == [prefix for prefix in prefixes for _ in range(4)]
    # the gold verifier's credit (-1 on the first wrong step, 0 elsewhere) localises every failure exactly
    metrics = first["metrics"]
    assert metrics["localisation_auroc[gold verifier]"] == 1.0 and metrics["localisation_top1[gold verifier]"] == 1.0
    largest = max(data["best_of_n"]["ns"])  # with N = all samples, no reranker's pick beats the oracle
    for name in ("PRM-min", "PRM-product", "ORM", "Q-RM (mean Z)", "majority vote"):
        assert metrics[f"best_of_n[{name}][N={largest}]"] <= metrics[f"best_of_n[oracle (pass@N)][N={largest}]"]
    # the tables it prints and the docs show hold the same numbers as its metrics
    tables = data["metrics"]["tables"]
    assert set(tables) == {"labels", "label_quality", "best_of_n", "localisation", "rl", "rl_summary", "written",
                           "overopt_bon", "overopt_rl", "overopt_fits", "length_corr", "length_rl"}
    names = tables["best_of_n"]["header"][1:]
    for row in tables["best_of_n"]["rows"][:-1]:  # the last row is Lightman et al.'s
        assert row[1:] == [data["metrics"][f"best_of_n[{name}][N={row[0]}]"] for name in names]
    assert [row[0] for row in tables["rl"]["rows"]] == list(overopt.RL_METHODS.values())
    assert [row[1] for row in tables["rl_summary"]["rows"]] == [
        data["metrics"][f"rl[{m}]_updates_to_halfway"] for m in overopt.RL_METHODS]
    assert tables["label_quality"]["rows"][0][1] == data["metrics"]["hard_label_accuracy[N=1]"]
    again = overopt.main(dataclasses.replace(args))
    assert json.dumps(without_timing(again["metrics"])) == json.dumps(without_timing(first["metrics"]))
