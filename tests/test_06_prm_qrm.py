"""06_prm_qrm: Math-Shepherd labels, the PRM/ORM/Q-RM losses, aggregation, best-of-N and its KL,
dense advantages, credit localisation, Gao et al.'s fits, the CLI and a smoke run."""

import dataclasses
import importlib
import json
import math

import numpy as np
import pytest
import torch

import common
import lm_pins

prm = importlib.import_module("06_prm_qrm")
PROBLEM = common.ChainProblem(12, (("+", 7), ("*", 3), ("-", 5)))  # 12+7=19, 19*3=57, 57-5=52


# ----------------------------------------------------------------------- Math-Shepherd labels
def test_step_prefixes_and_gold_labels_by_hand():
    text = "12+7=19\n19*3=56\n56-5=51\n#51"  # the slip is at step 1
    assert prm.step_prefixes(PROBLEM, text) == ["12+7*3-5\n12+7=19\n", "12+7*3-5\n12+7=19\n19*3=56\n",
                                                "12+7*3-5\n12+7=19\n19*3=56\n56-5=51\n"]
    assert prm.gold_step_labels(PROBLEM, text) == [True, False, False, False]
    assert prm.gold_step_labels(PROBLEM, PROBLEM.solution) == [True] * 4
    assert prm.step_prefixes(PROBLEM, "#52") == [] and prm.gold_step_labels(PROBLEM, "#52") == [False]


def test_hard_and_soft_labels_from_rollout_outcomes():
    outcomes = np.array([[1, 1, 0, 0, 1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]], dtype=bool)
    hard, soft = prm.math_shepherd_labels(outcomes, final=0.0, n=4)  # only the first 4 rollouts count
    assert hard == [1.0, 0.0, 0.0, 0.0] and soft == [0.5, 0.0, 0.0, 0.0]
    hard, soft = prm.math_shepherd_labels(outcomes, final=1.0, n=5)
    assert hard == [1.0, 1.0, 0.0, 1.0] and soft == [0.6, 0.2, 0.0, 1.0]


def test_label_quality_is_the_exact_expectation_over_subsets_of_rollouts():
    gold = np.array([True, True, False, False])
    counts = np.array([4, 0, 1, 0])  # right steps: always / never finished; wrong steps: once lucky / never
    q = prm.label_quality(gold, counts, rollouts=4, n=4)
    assert q == {"accuracy": 0.5, "false_positive_rate": 0.5, "false_negative_rate": 0.5}
    q = prm.label_quality(gold, counts, rollouts=4, n=1)  # a single rollout finds the lucky one 1 time in 4
    assert math.isclose(q["false_positive_rate"], 0.125) and q["false_negative_rate"] == 0.5
    rng = np.random.default_rng(0)  # against drawing 1 rollout of the 4 at random
    draws = np.array([[rng.integers(4) < c for c in counts] for _ in range(20000)])
    assert abs(draws[:, 2:].mean() - q["false_positive_rate"]) < 0.01


# ------------------------------------------------------------------------- reward model losses
def test_prm_loss_reads_only_step_end_tokens():
    tok = common.make_char_tokenizer()
    ids = torch.tensor([tok("12+7=19\n#19", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    ends = common.step_end_mask(common.token_step_ids(tok, ids, mask))
    assert ends[0].nonzero().squeeze(1).tolist() == [7, 11]  # the newline and EOS
    end_tokens = common.step_end_tokens(tok, ids, mask)
    assert end_tokens.tolist() == [[7, 11]]
    targets = prm.step_targets(end_tokens, [[1.0, 0.0]], ids.shape[1])
    assert targets[0, 7] == 1.0 and targets[0].sum() == 1.0
    scores = torch.randn(1, 12, requires_grad=True)
    loss = prm.step_bce(scores, targets, ends)
    loss.backward()
    assert (scores.grad[~ends] == 0).all() and (scores.grad[ends] != 0).all()
    expected = -(torch.log(torch.sigmoid(scores[0, 7])) + torch.log(1 - torch.sigmoid(scores[0, 11]))) / 2
    assert torch.isclose(loss, expected)
    noise = torch.where(ends, 0.0, 100 * torch.randn(1, 12))  # anything between steps changes nothing
    assert torch.isclose(prm.step_bce(scores + noise, targets, ends), loss)


def test_orm_reads_the_last_completion_token():
    mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    assert prm.last_token_mask(mask).tolist() == [[False, False, True, False], [True, False, False, False]]


def test_min_and_product_aggregation_by_hand():
    probs = torch.tensor([[0.9, 0.5, 0.8, 0.1], [0.7, 0.2, 0.6, 0.3]])
    end_tokens = torch.tensor([[0, 2, -1], [1, 2, 3]])  # row 0 has two steps, row 1 three
    assert torch.allclose(prm.prm_min(probs, end_tokens), torch.tensor([0.8, 0.2]))
    assert torch.allclose(prm.prm_product(probs, end_tokens), torch.tensor([0.72, 0.036]))


def test_qrm_loss_on_a_hand_case_ignores_padding():
    z_w, mask_w = torch.tensor([[1.0, 2.0, 3.0, 99.0]]), torch.tensor([[1, 1, 1, 0]])  # mean 2
    z_l, mask_l = torch.tensor([[0.0, -1.0, 77.0, 77.0]]), torch.tensor([[1, 1, 0, 0]])  # mean -0.5
    loss = prm.qrm_loss(z_w, mask_w, z_l, mask_l, beta=0.2, gamma=2.0)
    assert math.isclose(loss.item(), math.log1p(math.exp(-(0.2 * 2.5 - 2.0))), rel_tol=1e-6)
    assert prm.qrm_loss(z_l, mask_l, z_w, mask_w, 0.2, 2.0) > loss  # the wrong order costs more


def test_preference_pairs_stay_within_a_problem():
    a, b = PROBLEM, common.ChainProblem(3, (("+", 1),))
    pairs = prm.preference_pairs([a, a, a, b, b], torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0]))
    assert pairs == [(0, 1), (0, 2)]


# ------------------------------------------------------------------------------- best-of-N
def test_best_of_n_kl_formula_against_the_exact_kl_of_best_of_n():
    assert prm.best_of_n_kl(1) == 0.0 and math.isclose(prm.best_of_n_kl(2), math.log(2) - 0.5)
    M = 100_000  # a base policy uniform over M outcomes with distinct rewards (nearly continuous)
    i = np.arange(1, M + 1)
    for n in (2, 4, 16):
        best = (i / M) ** n - ((i - 1) / M) ** n  # P(the best of n draws is outcome i)
        exact = float((best * np.log(best * M)).sum())
        assert exact <= prm.best_of_n_kl(n) + 1e-9 and math.isclose(exact, prm.best_of_n_kl(n), rel_tol=1e-3)


def test_best_of_n_and_majority_by_hand():
    scores = np.array([[0.1, 0.9, 0.5]])
    correct = np.array([[0.0, 1.0, 0.0]])
    curve = prm.best_of_n(scores, correct, [1, 2, 3], repeats=3000, rng=np.random.default_rng(0))
    assert curve[3] == 1.0 and abs(curve[1] - 1 / 3) < 0.03 and abs(curve[2] - 2 / 3) < 0.03
    codes = prm.answer_codes(["1+1=2\n#2", "#3", "#2", "#x", ""])
    assert codes[:3].tolist() == [2, 3, 2] and codes[3] != codes[4] and codes[3] < 0
    majority = prm.majority_of_n(codes[None, :3], np.array([[1.0, 0.0, 1.0]]), [3], 10, np.random.default_rng(0))
    assert majority[3] == 1.0


# ------------------------------------------------------------------------- dense advantages
def test_step_rewards_broadcast_to_their_step_and_every_earlier_token():
    # two completions of one prompt: steps of lengths 2, 2 (+ pad) and 3, 1
    ends = torch.tensor([[False, True, False, True, False], [False, False, True, True, False]])
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]])
    A = prm.process_advantages(rewards, ends, group_size=2, eps=0.0)
    r = torch.tensor([1.0, 0.0, 1.0, 0.0])  # the four step rewards of the group
    n = (r - r.mean()) / r.std()
    expected = torch.tensor([[n[0] + n[1], n[0] + n[1], n[1], n[1], 0.0],
                             [n[2] + n[3], n[2] + n[3], n[2] + n[3], n[3], 0.0]])
    assert torch.allclose(A, expected)


def test_a_group_with_no_rewarded_position_gets_zero_advantages_not_nan():
    rewards = torch.tensor([[1.0, 0.0], [0.5, 0.0], [1.0, 1.0], [0.0, 1.0]])
    rewarded = torch.tensor([[False, False], [False, False], [True, False], [True, True]])
    A = prm.process_advantages(rewards, rewarded, group_size=2)
    assert torch.isfinite(A).all() and torch.equal(A[:2], torch.zeros(2, 2)) and A[2:].abs().sum() > 0


def test_token_advantages_are_standardised_within_each_group():
    z = torch.tensor([[1.0, 2.0, 9.0], [3.0, 4.0, 9.0], [5.0, 5.0, 5.0], [5.0, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]], dtype=torch.bool)
    A = prm.token_advantages(z, mask, group_size=2)
    assert A[0, 2] == 0 and torch.isclose(A[:2][mask[:2]].mean(), torch.tensor(0.0), atol=1e-6)
    assert torch.isclose(A[:2][mask[:2]].std(), torch.tensor(1.0), atol=1e-3)
    assert (A[2:] == 0).all()  # all-equal credit: no signal, no NaN


def test_proxy_advantages_are_05s_dr_grpo_centring():
    g = torch.Generator().manual_seed(0)
    proxy = torch.rand(3, 4, generator=g)
    assert torch.equal(prm.centred_advantages(proxy), lm_pins.grpo.group_advantages(proxy, "dr_grpo"))


# -------------------------------------------------- the RL loop restated from 05, pinned to it
def test_grpo_advantage_and_k3_are_05s():
    lm_pins.assert_advantage_and_kl_match_05(prm)


def test_policy_gradient_step_is_05s_with_one_inner_iteration():
    lm_pins.assert_step_matches_05(prm)


def test_rl_loop_is_05s(monkeypatch, tmp_path):
    lm_pins.assert_loop_matches_05(prm, prm.outcome_advantage_fn, monkeypatch, tmp_path)


# ---------------------------------------------------------------------- Gao et al.'s forms
@pytest.mark.parametrize("form", ["bon", "rl"])
def test_gao_fit_recovers_alpha_and_beta(form):
    d = np.linspace(0.1, 3.0, 20)
    truth = {"alpha": 0.4, "beta": 0.15}
    fit = prm.fit_gao(d, prm.gao_curve(d, truth, form), form)
    assert fit["alpha"] == pytest.approx(0.4) and fit["beta"] == pytest.approx(0.15) and fit["r2"] == pytest.approx(1.0)
    d_peak = 0.4 / (2 * 0.15)  # d(α - βd) peaks at α / 2β
    assert prm.gao_curve(np.array([d_peak]), truth, "bon")[0] == pytest.approx(0.4 ** 2 / (4 * 0.15))


# ------------------------------------------------------------------------------ CLI and smoke
@pytest.mark.parametrize("flag,value,message", [
    ("--label-ns", "1,32", "--label-ns and --label-n must be in 1..--rollouts-per-prefix"),
    ("--label-samples", "1", "--label-samples must be at least 2"),
    ("--rl-methods", "outcome,ppo", "argument --rl-methods: 'ppo' is not one of outcome"),
    ("--rm-steps", "0", "--rm-steps must be positive"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("06_prm_qrm.py", flag, value)


def without_timing(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if "wall_clock" not in k}


def test_smoke_run_writes_results_and_figures_and_repeats_exactly(tmp_path, read_results):
    args = prm.Args(smoke=True, device="cpu", out=str(tmp_path / "out"), cache=str(tmp_path / "cache"))
    first = prm.main(args)
    data = read_results(tmp_path / "out" / "results.json")
    for name in ("label_quality.png", "best_of_n.png", "rl.png", "overoptimisation.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    assert {"best_of_n[PRM-min][N=1]", "best_of_n[majority vote][N=4]", "hard_label_accuracy[N=4]",
            "rl[qrm]_pass@1_final"} <= set(first["metrics"])
    assert data["metrics"] == common.json_ready(first["metrics"])
    again = prm.main(dataclasses.replace(args))
    assert json.dumps(without_timing(again["metrics"])) == json.dumps(without_timing(first["metrics"]))
