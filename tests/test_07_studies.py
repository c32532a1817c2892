"""studies/07_credit.py: the signed weight and the step-size control, the diagnostics each update
logs (blame, flawed steps, flat credit, push, padding, weights), whether a credit moves with the step
labels, the held-out probe of w(s), what each credit costs, the article's numbers against each other
and its estimator objective asked of its own code, every claim's verdict over the seeds flipped each
way, the numbers of each run and their pairing by seed, the tables; CLI checks and smoke runs. The
chapter's own pieces are tested in test_07_ss_grpo.py, whose hand-made completions these tests share."""

import dataclasses
import importlib
import json
import math

import numpy as np
import pytest
import torch
from test_07_ss_grpo import (
    PROBLEMS,
    REWARDS,
    TEXTS,
    TOK,
    assert_credit_stays_on_the_device_of_its_inputs,
    assert_zero_spread_groups_get_zero,
    credit_args,
    end_tokens_of,
    estimator,
    step_ids_of,
    without_timing,
)

import common
import lm_pins
import lm_world
from lm_pins import hand_completions

ss = importlib.import_module("07_ss_grpo")
lab = importlib.import_module("studies.07_credit")


def credit_of(method: str, args: ss.Args) -> lab.Diagnosed:
    """A method's logged credit: a small fresh estimator for SS-GRPO, SCALES for the step-size control."""
    model = estimator(hidden=16, layers=1, heads=2, ffn=32) if method.startswith("ss_") else None
    return lab.Diagnosed(method, TOK, args, model, seed=0, scales=SCALES if method == "grpo_scaled" else None)


SCALES = [0.5, 0.25, float("nan")]  # the step-size control's multiplier at updates 0, 1, 2


def test_zero_spread_group_gives_zero_advantage_and_no_nan(tmp_path):
    assert_zero_spread_groups_get_zero(credit_of, lab.METHODS, tmp_path)


def test_blame_and_entropy_diagnostics():
    step_ids = torch.tensor([[0, 0, 1, 1], [0, 1, 1, -1]])
    rewards = torch.tensor([[1.0, 0.0]])
    A = ss.grpo_advantages(rewards).flatten()
    advantages = ss.broadcast_to_tokens(A[:, None] * torch.tensor([[0.9, 0.8], [0.6, 0.1]]), step_ids)
    stats = lab.blame_stats(advantages, A, step_ids, [None, 1], rewards)
    assert math.isclose(stats["wrong_step_blame"], 0.1, rel_tol=1e-5)  # the mistake keeps 10% of GRPO's blame
    assert 0 < stats["negative_share"] < 0.5
    uniform = lab.weight_entropy(torch.tensor([[0.3, 0.3, 0.3], [1.0, 1e-9, 0.0]]), torch.tensor([3, 2]))
    assert torch.allclose(uniform, torch.tensor([1.0, 0.0]), atol=1e-4)


def test_credit_on_flawed_steps_of_right_solutions_and_on_right_steps_before_a_slip_by_hand():
    """Group 0 (rewards 1, 1, 0, 0; A = ±0.866): a right solution with a wrong line 1, a right one
    with none, a failed one wrong from line 0, a failed one wrong from line 1. Group 1 (all right,
    A = 0) holds flaws too, and counts nowhere. Credit = mean advantage on the step's tokens / A_i."""
    step_ids = torch.tensor([[0, 0, 1, 1, 1, 2]] * 8)
    rewards = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    A = ss.grpo_advantages(rewards).flatten()
    wrong = [1, None, 0, 1, 1, 1, 1, 1]
    advantages = torch.zeros(8, 6)
    advantages[0] = torch.tensor([1.0, 3.0, 2.0, 2.0, 5.0, 9.0])  # right steps: 2; flawed step: 3
    advantages[2] = torch.tensor([-1.0, -1.0, 0.0, 0.0, 0.0, 0.0])  # its wrong line 0 gets -1
    advantages[3] = torch.tensor([4.0, 0.0, -3.0, -3.0, -3.0, 0.0])  # right step before the slip: 2; slip: -3
    a = float(A[0])
    flawed = lab.flawed_step_stats(advantages, A, step_ids, wrong, rewards)
    assert flawed["flawed_right_share"] == 0.5  # one of group 0's two right solutions; group 1 has no spread
    assert flawed["flawed_step_credit"] == pytest.approx(3 / a) and flawed["flawed_right_steps_credit"] == pytest.approx(2 / a)
    blame = lab.blame_stats(advantages, A, step_ids, wrong, rewards)
    assert blame["wrong_step_blame"] == pytest.approx(np.mean([-1 / -a, -3 / -a]))
    assert blame["right_steps_blame"] == pytest.approx(2 / -a)  # only completion 3 has steps before its slip
    grpo = ss.broadcast_to_tokens(A[:, None].expand(-1, 3), step_ids)  # GRPO: exactly its own credit
    assert lab.flawed_step_stats(grpo, A, step_ids, wrong, rewards)["flawed_step_credit"] == pytest.approx(1.0)
    assert lab.blame_stats(grpo, A, step_ids, wrong, rewards)["right_steps_blame"] == pytest.approx(1.0)
    nobody = lab.flawed_step_stats(advantages, A, step_ids, [None] * 8, rewards)
    assert nobody["flawed_right_share"] == 0 and math.isnan(nobody["flawed_step_credit"])


def test_own_step_advantages_are_each_steps_normalised_gold_reward_by_a_loop():
    """The per-step counterpart of the chapter's process_advantages: A_s = r̃_s, the step's reward z-scored over
    the real steps of its group (sample std, + eps), not summed over the steps after it; 0 off the steps."""
    right, valid = ss.gold_step_rewards([None, 1, 0, 2], torch.tensor([2, 3, 1, 3]))
    got = lab.lengths_lab.own_step_advantages(right, valid, group_size=2)
    expected = torch.zeros(4, 3)
    for group in (slice(0, 2), slice(2, 4)):
        steps = right[group][valid[group]]
        z = (right[group] - steps.mean()) / (steps.std() + 1e-4)
        expected[group] = torch.where(valid[group], z, 0.0)
    torch.testing.assert_close(got, expected)
    assert got[0, 0] > 0 > got[1, 1]  # a right step credited, the wrong one blamed, whatever follows it
    summed = ss.process_advantages(right, valid, group_size=2)  # the chapter's: the same r̃, summed to go
    torch.testing.assert_close(summed, expected.flip(1).cumsum(1).flip(1) * valid)


def test_advantage_scale_is_the_push_relative_to_grpos_by_hand():
    """Σ_i mean_t |a_it| / Σ_i |A_i| over each completion's step tokens; 1 for GRPO itself."""
    step_ids = torch.tensor([[0, 0, 1, -1], [0, 1, 1, 1], [0, -1, -1, -1]])
    A = torch.tensor([2.0, -1.0, 0.0])
    w = torch.tensor([[0.5, 0.25], [0.1, 0.4], [0.9, 0.0]])
    advantages = ss.broadcast_to_tokens(A[:, None] * w, step_ids)
    per_completion = [abs(2.0) * (0.5 + 0.5 + 0.25) / 3, abs(-1.0) * (0.1 + 0.4 * 3) / 4, 0.0]
    assert lab.advantage_scale(advantages, A, step_ids) == pytest.approx(sum(per_completion) / 3.0)
    grpo = ss.broadcast_to_tokens(A[:, None].expand(-1, 2), step_ids)
    assert lab.advantage_scale(grpo, A, step_ids) == pytest.approx(1.0)
    assert math.isnan(lab.advantage_scale(torch.zeros(3, 4), torch.zeros(3), step_ids))


def test_the_signed_weight_blames_the_steps_rated_low_in_failed_completions(tmp_path):
    """SS-GRPO ±: A_i · w(s) where A_i ≥ 0 (as SS-GRPO), A_i · (1 - w(s)) where A_i < 0, w the
    estimator's weights of the very update (after its retraining)."""
    A, w = torch.tensor([2.0, -1.0]), torch.tensor([[0.1, 0.5, 0.9], [0.25, 0.75, 0.0]])
    assert torch.allclose(lab.signed_advantages(A, w), torch.tensor([[0.2, 1.0, 1.8], [-0.75, -0.25, -1.0]]))
    r = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    step_ids = step_ids_of(r)
    credit = credit_of("ss_grpo_signed", credit_args(tmp_path, est_iters=3))
    got = credit(r, REWARDS, PROBLEMS)
    batch = ss.step_batch(r, step_ids, end_tokens_of(r), 512, TOK.pad_token_id)
    with torch.no_grad():
        w = ss.step_grid(credit.estimator.step_weights(batch), batch)
    A = ss.grpo_advantages(REWARDS).flatten()
    torch.testing.assert_close(got, ss.broadcast_to_tokens(A[:, None] * torch.where(A[:, None] < 0, 1 - w, w), step_ids))
    assert credit.log[0]["estimator_loss"] >= 0  # it retrained as SS-GRPO does


def test_zero_spread_is_05s():
    groups = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.equal(lab.zero_spread(groups), lm_pins.grpo.zero_spread(groups))


def test_the_step_size_control_is_grpo_times_ss_grpos_scale_of_each_update(tmp_path):
    r = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    step_ids = step_ids_of(r)
    grpo = lab.Diagnosed("grpo", TOK, credit_args(tmp_path), None, seed=0)(r, REWARDS, PROBLEMS)
    control = credit_of("grpo_scaled", credit_args(tmp_path))
    for scale in (0.5, 0.25, 1.0):  # SCALES; a NaN (no advantage in SS-GRPO's update) leaves GRPO's
        torch.testing.assert_close(control(r, REWARDS, PROBLEMS), grpo * scale)
    assert [e["advantage_scale"] for e in control.log] == pytest.approx([0.5, 0.25, 1.0])
    assert lab.advantage_scale(grpo, ss.grpo_advantages(REWARDS).flatten(), step_ids) == pytest.approx(1.0)
    for method, scales in (("grpo_scaled", None), ("grpo", SCALES), ("ss_grpo", SCALES)):
        with pytest.raises(ValueError, match="step-size control"):
            lab.Diagnosed(method, TOK, credit_args(tmp_path), estimator(), seed=0, scales=scales)


def test_blame_and_padding_diagnostics_equal_a_loop_over_completions():
    g = torch.Generator().manual_seed(0)
    B, T = 48, 9
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    step_ids = torch.sort(torch.randint(0, 4, (B, T), generator=g), 1).values  # steps in order
    step_ids = torch.where(torch.arange(T)[None] < lengths[:, None], step_ids, -1)
    step_ids[:, 0] = 0
    rewards = (torch.rand(12, 4, generator=g) > 0.5).float()
    A = ss.grpo_advantages(rewards).flatten()
    advantages = torch.randn(B, T, generator=g) * (step_ids >= 0)
    wrong = [int(w) if w < 4 else None for w in torch.randint(0, 5, (B,), generator=g)]
    mixed = ~lab.zero_spread(rewards).repeat_interleave(4)
    shares = [float(advantages[b][step_ids[b] == w].mean() / A[b]) for b, w in enumerate(wrong)
              if w is not None and mixed[b] and A[b] < 0 and (step_ids[b] == w).any()]
    stats = lab.blame_stats(advantages, A, step_ids, wrong, rewards)
    assert len(shares) > 1 and math.isclose(stats["wrong_step_blame"], float(np.mean(shares)), rel_tol=1e-5)
    padding = []
    for row in step_ids:
        counts = torch.bincount(row[row >= 0])
        padding.append(1 - float(counts.sum()) / (len(counts) * int(counts.max())))
    got = lab.article_padding(step_ids)
    assert math.isclose(got["padding_share"], np.mean(padding)) and math.isclose(got["padding_share_max"], max(padding))


@pytest.mark.parametrize("flag,value,message", [
    ("--mc-rollouts", "0", "--mc-rollouts must be positive"),
    ("--probe-samples", "0", "--probe-samples must be positive"),
    ("--methods", "grpo_scaled,ss_grpo", "grpo_scaled needs ss_grpo before it"),
    ("--methods", "grpo,grpo_scaled", "grpo_scaled needs ss_grpo before it"),
    ("--methods", "grpo,ppo", "argument --methods: 'ppo' is not one of grpo"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("studies.07_credit", flag, value)


def test_smoke_run_writes_results_and_figures_and_repeats_exactly(tmp_path, read_results):
    args = lab.Args(smoke=True, device="cpu", out=str(tmp_path / "out"), cache=str(tmp_path / "cache"))
    first = lab.main(args)
    data = read_results(tmp_path / "out" / "results.json")
    for name in ("learning_curves.png", "step_weights.png", "localisation.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    assert set(data["per_seed"]) == set(lab.METHODS)
    assert data["metrics"]["estimator_params"] > 0 and len(data["claims"]) >= 4
    tables = data["metrics"].pop("tables")
    assert set(tables) == {"accuracy", "cost", "seconds", "credit", "weights", "probe"}
    assert all(len(t["rows"]) == len(lab.METHODS) for k, t in tables.items() if k not in ("weights", "probe", "credit"))
    assert tables["credit"]["rows"][-1][0] == f"{lab.NAMES['prm_grpo']}, per step"  # PRM-GRPO's batches, per step
    assert len(tables["credit"]["rows"]) == len(lab.METHODS) + 1
    own = [k for k in data["per_seed"]["prm_grpo"][0] if k.startswith(lab.OWN_STEP)]
    assert own == [lab.OWN_STEP + k for k in lab.CREDIT_KEYS]
    assert not any(k.startswith(lab.OWN_STEP) for m in lab.METHODS if m != "prm_grpo" for k in data["per_seed"][m][0])
    assert sum(c["claim"].startswith("mitigation of entangled credit") for c in data["claims"]) == 6
    for name in ("weights", "probe"):  # the estimator's own, SS-GRPO's and SS-GRPO ±'s
        assert [row[0] for row in tables[name]["rows"]] == [lab.NAMES["ss_grpo"], lab.NAMES["ss_grpo_signed"]]
    assert all(math.isfinite(v) for v in data["metrics"].values() if v is not None)
    assert data["metrics"]["ss_grpo_seed0_localisation_auroc"] == data["per_seed"]["ss_grpo"][0]["localisation_auroc"]
    assert {"w_right", "estimator_tokens", "credit_s"} <= set(data["runs"]["ss_grpo"][0]["credit"][0])
    timing = set(first["metrics"]) - set(without_timing(first["metrics"]))
    assert timing == {f"{m}_{k}" for m in lab.METHODS for k in ("train_wall_clock_s", "train_wall_clock_vs_grpo",
                                                               "credit_wall_clock_share")}
    # what this run must show: GRPO is its own cost unit; the estimator and the PRM add inference;
    # the PRM verifies every step; the estimator retrains every update (N = 1); the article's own
    # table does not reach its claim
    m = first["metrics"]
    assert m["grpo_inference_flops_vs_grpo"] == 1.0 and m["grpo_train_wall_clock_vs_grpo"] == 1.0
    assert m["grpo_evaluator_calls"] == 1.0 == m["ss_grpo_evaluator_calls"] and m["prm_grpo_evaluator_calls"] >= 1
    assert m["ss_grpo_inference_flops_vs_grpo"] > 1 and m["prm_grpo_inference_flops_vs_grpo"] > 1
    for method in ("ss_grpo", "ss_grpo_signed"):
        log = data["runs"][method][0]["credit"]
        assert len(log) == common.apply_smoke(args.chapter_args()).rl_steps and all(e["estimator_loss"] >= 0 for e in log)
    assert first["claims"][0]["holds"] is False
    assert m["article_estimator_params_total"] == 5_282_177 and m["grpo_scaled_mc_prm_train_flops_vs_grpo"] > 1
    # the control's push at each update is SS-GRPO's (1 where SS-GRPO's update had no advantage)
    for ss_entry, control in zip(data["runs"]["ss_grpo"][0]["credit"], data["runs"]["grpo_scaled"][0]["credit"]):
        if control["advantage_scale"] is not None:
            assert control["advantage_scale"] == pytest.approx(ss_entry["advantage_scale"] or 1.0)
    again = lab.main(args)
    assert json.dumps(without_timing(again["metrics"])) == json.dumps(without_timing(first["metrics"]))
    stored = lab.main(lab.Args(reanalyse=str(tmp_path / "out" / "results.json")))["claims"]  # nothing trained
    assert stored == read_results(tmp_path / "out" / "results.json")["claims"] == common.json_ready(again["claims"])


def test_cost_row_by_hand():
    """Inference FLOPs per completion relative to GRPO: 2·params per token read, the policy on its
    tokens, the estimator on its rows, a policy-sized PRM on every step prefix; training FLOPs:
    10·params per policy token, plus that inference, plus 6·params per token the estimator trains
    on; a Monte-Carlo-labelled PRM: 10·P per policy token + 2·P per label token; means over
    updates (a key an update did not log counts 0); the credit's share of an update's seconds; the
    seconds without the study's bookkeeping (diagnostics_s)."""
    run = {"credit": [{"policy_tokens": 10.0, "estimator_tokens": 30.0, "evaluator_calls": 1.0, "credit_s": 0.5,
                       "estimator_train_tokens": 50.0, "mc_label_tokens": 160.0, "steps": 2.0, "diagnostics_s": 1.0},
                      {"policy_tokens": 14.0, "prm_tokens": 40.0, "evaluator_calls": 3.0, "credit_s": 1.5,
                       "mc_label_tokens": 240.0, "steps": 3.0, "diagnostics_s": 1.0}],
           "history": [{"generate_s": 1.0, "update_s": 3.0}, {"generate_s": 3.0, "update_s": 3.0}],
           "wall_clock_s": 32.0}
    row = lab.cost_row(run, {"wall_clock_s": 21.0, "credit": [{"diagnostics_s": 1.0}]}, policy_params=100, est_params=7)
    # in FLOPs: policy 2·100·12 per generation; estimator 2·7·15; PRM 2·100·20; estimator training 6·7·25
    train = 10 * 100 * 12.0
    expected = {"train_wall_clock_s": 30.0, "train_wall_clock_vs_grpo": 1.5,
                "inference_flops_vs_grpo": (2 * 100 * 12 + 2 * 7 * 15 + 2 * 100 * 20) / (2 * 100 * 12),
                "train_flops_vs_grpo": (train + 2 * 7 * 15 + 2 * 100 * 20 + 6 * 7 * 25) / train,
                "mc_prm_train_flops_vs_grpo": (train + 2 * 100 * 200) / train,
                "estimator_tokens_per_policy_token": 15 / 12, "tokens_per_rollout": 12.0, "steps_per_rollout": 2.5,
                "evaluator_calls": 2.0, "credit_wall_clock_share": 1.0 / 4.0}
    assert set(row) == set(expected)
    for key, value in expected.items():
        assert math.isclose(row[key], value, rel_tol=1e-12), key


def test_prefix_tokens_by_hand():
    """A per-step evaluator reads prompt + completion through each step's end token, per step."""
    r = hand_completions(["12+7*3\n", "5+1\n"], ["12+7=19\n19*3=57\n#57", "#6"])
    assert lab.prefix_tokens(r, torch.tensor([[7, 15, 19], [1, -1, -1]])) == ((7 + 8) + (7 + 16) + (7 + 20) + (4 + 2)) / 2
    assert lab.prefix_tokens(r, end_tokens_of(r)) == ((7 + 8) + (7 + 16) + (7 + 20) + (4 + 3)) / 2
    empty_first = hand_completions(["5+1\n"], ["\n#6"])  # line 0 is empty and ends at token 0
    assert end_tokens_of(empty_first).tolist() == [[0, 3]]
    assert lab.prefix_tokens(empty_first, end_tokens_of(empty_first)) == (4 + 1) + (4 + 4)


def test_each_method_logs_what_its_credit_costs(tmp_path):
    """Per completion: the policy's tokens, one outcome verification (GRPO, SS-GRPO) or one step
    verification per line (PRM-GRPO, which reads every step prefix), the estimator's row tokens,
    and the tokens Monte-Carlo step labels would read (every method: they price the alternative)."""
    prompts = [p.prompt for p in PROBLEMS for _ in range(4)]
    r = hand_completions(prompts, TEXTS)
    lines = [t.split("\n") for t in TEXTS]
    policy = np.mean([len(p) + len(t) + 1 for p, t in zip(prompts, TEXTS)])  # + EOS
    prefixes = np.mean([sum(len(p) + len("\n".join(ls[:k + 1])) + 1 for k in range(len(ls)))
                        for p, ls in zip(prompts, lines)])
    rows = np.mean([len(p) * len(ls) + len(t) + 1 for p, ls, t in zip(prompts, lines, TEXTS)])
    expected = {"grpo": {"evaluator_calls": 1.0},
                "prm_grpo": {"evaluator_calls": np.mean([len(ls) for ls in lines]), "prm_tokens": prefixes},
                "ss_grpo": {"evaluator_calls": 1.0, "estimator_tokens": rows},
                "ss_grpo_signed": {"evaluator_calls": 1.0, "estimator_tokens": rows},
                "grpo_scaled": {"evaluator_calls": 1.0}}
    # Monte-Carlo labels: 8 continuations of each step prefix but the last, each as long as the completion
    mc = np.mean([8 * (len(ls) - 1) * (len(p) + len(t) + 1) for p, ls, t in zip(prompts, lines, TEXTS)])
    for method in lab.METHODS:
        credit = credit_of(method, credit_args(tmp_path))
        credit(r, REWARDS, PROBLEMS)
        entry = credit.log[0]
        assert math.isclose(entry["policy_tokens"], policy, rel_tol=1e-6), method
        assert math.isclose(entry["mc_label_tokens"], mc, rel_tol=1e-6), method
        assert math.isclose(entry["steps"], np.mean([len(ls) for ls in lines]), rel_tol=1e-6), method
        assert 0 <= entry["credit_s"] < 60, method  # seconds, measured
        for key in ("prm_tokens", "estimator_tokens"):
            assert (key in entry) == (key in expected[method]), (method, key)
        for key, value in expected[method].items():
            assert math.isclose(entry[key], value, rel_tol=1e-6), (method, key)


def test_the_credit_keeps_every_tensor_on_the_device_of_its_inputs(tmp_path):
    assert_credit_stays_on_the_device_of_its_inputs(credit_of, lab.METHODS, tmp_path)


# -------------------------------------------------- the article's numbers against each other


def test_the_article_table_arithmetic():
    """97% of the gain? (77.5 - 72.3)/(78.1 - 72.3) = 5.2/5.8; 4% of the cost? 28/120 of the hours,
    or (28 - 24)/(120 - 24) of the hours beyond GRPO's."""
    assert lab.table_gain_share(lab.ARTICLE) == pytest.approx(5.2 / 5.8) == pytest.approx(0.8966, abs=1e-4)
    total, extra = lab.table_cost_readings(lab.ARTICLE)
    assert total == pytest.approx(0.2333, abs=1e-4) and extra == pytest.approx(4 / 96)
    other = {"grpo": (50.0, 10, 1.0), "prm_grpo": (60.0, 110, 9.0), "ss_grpo": (59.0, 20, 1.1)}
    assert lab.table_gain_share(other) == pytest.approx(0.9)
    assert lab.table_cost_readings(other) == pytest.approx((20 / 110, 0.1))


def article_module(vocab: int, hidden: int, layers: int) -> torch.nn.Module:
    """The article's StepValueEstimator's modules, as its __init__ builds them (PyTorch's defaults)."""
    layer = torch.nn.TransformerEncoderLayer(d_model=hidden, nhead=4, batch_first=True)
    return torch.nn.ModuleDict({"embed": torch.nn.Embedding(vocab, hidden), "head": torch.nn.Linear(hidden, 1),
                                "transformer": torch.nn.TransformerEncoder(layer, num_layers=layers)})


def test_encoder_parameters_count_what_pytorch_builds():
    article = lab.encoder_parameters(**lab.ARTICLE_ESTIMATOR)
    assert article == {"embedding": 4_096_000, "layers": 1_186_048, "head": 129, "total": 5_282_177}
    assert sum(p.numel() for p in article_module(32000, 128, 2).parameters()) == article["total"]
    assert sum(p.numel() for p in article_module(50, 64, 3).parameters()) == lab.encoder_parameters(
        50, 64, 3, 2048)["total"]
    ours = lab.encoder_parameters(len(TOK), 32, 2, 64, positions=ss.MAX_POSITIONS)
    model = estimator()
    assert sum(p.numel() for p in model.parameters()) == ours["total"]
    assert lab.parameters(model) == ours["layers"] + ours["head"]  # what costs FLOPs per token


def test_flops_share_and_prefix_rescoring_by_hand():
    assert lab.estimator_flops_share(1e6, 7e9, 2.0) == pytest.approx(2e6 / 7e9)
    for T in (1, 2, 7, 50):  # Σ over prefixes of their lengths, per token of one pass
        assert lab.prefix_rescoring_cost(T) == pytest.approx(sum(len(range(t)) for t in range(1, T + 1)) / T)
    assert lab.prefix_rescoring_cost(1000) == 500.5


def test_article_numbers_read_the_estimators_measured_tokens_when_ss_grpo_ran():
    steps_only = lab.article_numbers({})
    assert steps_only["article_estimator_tokens_per_policy_token"] == 1.0
    assert steps_only["article_estimator_flops_share_7b"] == pytest.approx((1_186_048 + 129) / 7e9)
    assert "article_weight_memory_share_low" not in steps_only  # no rollouts to measure
    measured = lab.article_numbers({"ss_grpo": {"estimator_tokens_per_policy_token": 3.0, **ROLLOUTS},
                                   "grpo": {"steps_per_rollout": 4.0, "tokens_per_rollout": 20.0}})
    assert measured["article_estimator_flops_share_7b"] == pytest.approx(3 * (1_186_048 + 129) / 7e9)
    assert measured["article_weight_memory_share_low"] == pytest.approx(4 * 4 / (24 * 20))  # GRPO's rollouts
    assert measured["article_weight_memory_share_high"] == pytest.approx(4 * 4 / (4 * 20))  # an int32 id alone
    assert measured["article_gain_share"] == lab.table_gain_share(lab.ARTICLE)


# -------------------------------------------------- the verdicts, each flipped both ways


HOLDING = {"ARTICLE": {"grpo": (70.0, 1, 1.0), "prm_grpo": (80.0, 100, 1000.0), "ss_grpo": (79.7, 4.48, 1.05)},
           "ARTICLE_INFERENCE_OVERHEAD": 0.06, "ARTICLE_ROLLOUT_OVERHEAD": 0.05,  # 5% and the table's 5%: below 6%
           "BUFFER_BYTES_PER_TOKEN": (24, 28),  # step weights: 12 of 96 to 112 buffer bytes, 12.5% to 10.7%
           "ARTICLE_POLICY_SHAPE": {"layers": 1, "hidden": 128},  # attention as wide as the estimator's: long
           # rollouts reach the bound on their longest steps (undetermined: not on every step length)
           "ARTICLE_ESTIMATOR": {"vocab": 1000, "hidden": 128, "layers": 2, "ffn": 512},  # 0.52M
           "ARTICLE_ROLLOUT_TOKENS": 1, "ARTICLE_PER_STEP_COST": 1.0}  # one token: 1 call and 1x the tokens
# an objective that reads its margin, and an estimator whose w does not change with a step read k times over
CONTRASTIVE = {"article_margin_effect": 0.1, "article_pair_effect": 0.01, "article_tiled_change": 0.0,
               **{f"article_definition_share[{n}]": x
                  for n, x in zip("ABCDEFGHIJKL", (2 / 3, 1, 0.5, 0.5, 0, 0.5, 1 / 3, 1, 0, 2 / 3, 0.5, 1))},
               **{f"article_definition_weight[{n}]": x
                  for n, x in zip("ABCDEFGHIJKL", (0.6, 0.9, 0.4, 0.4, 0.1, 0.5, 0.3, 0.9, 0.1, 0.6, 0.5, 0.9))}}
SEEDS = 3


def holding_article(monkeypatch, **changes) -> None:
    """Article constants on which every arithmetic verdict holds, with some changed."""
    for name, value in (HOLDING | changes).items():
        monkeypatch.setattr(lab, name, value)


ROLLOUTS = {"steps_per_rollout": 3.0, "tokens_per_rollout": 4.0}  # step weights: 12 bytes


def claims_per_seed(**changes) -> dict:
    """Each method's numbers on SEEDS seeds, alike on every seed, on which every verdict holds (the
    margin advice has no premise: the weights are far from uniform); changes {"method.key": value for
    every seed, or a tuple, one per seed}."""
    ss_numbers = {"localisation_auroc": 0.7, "auroc_step_right_in_failed": 0.7, "auroc_outcome": 0.8,
                  "localisation_top1": 0.5, "chance_top1": 0.3, "w_entropy": 0.5, "right_target_zero": 0.3,
                  "credit_wall_clock_share": 0.04, "inference_flops_vs_grpo": 1.2, "train_flops_vs_grpo": 1.04,
                  "mc_prm_train_flops_vs_grpo": 2.0, "estimator_tokens_per_policy_token": 2.0,
                  "flawed_right_share": 0.1, "flawed_step_credit": -1.1, "flawed_right_steps_credit": 0.5,
                  "right_steps_blame": 0.4, "advantage_scale": 0.4, "w_length_r": 0.0, "probe_steps": 1000, "w_tiled_change": 0.0,
                  "step_label_effect": 0.0, "evaluator_calls": 1.0, "flat_credit": 0.0, **ROLLOUTS}
    flat = {"flawed_right_share": 0.1, "flawed_step_credit": 1.0, "flawed_right_steps_credit": 1.0, "flat_credit": 1.0,
            "right_steps_blame": 1.0, "wrong_step_blame": 1.0, "inference_flops_vs_grpo": 1.0, "advantage_scale": 1.0,
            "samples_to_halfway": 1000.0, "samples_budget": 2000.0, "step_label_effect": 0.0, "evaluator_calls": 1.0,
            **ROLLOUTS}
    seed = {"grpo": {"pass@1": 0.25, "train_wall_clock_s": 50.0, **flat},
            "prm_grpo": {"pass@1": 0.8, "train_wall_clock_s": 100.0, **flat, "inference_flops_vs_grpo": 3.0,
                         "flawed_right_share": 0.05,  # half GRPO's right answers through a wrong line
                         "evaluator_calls": 3.0, "flawed_step_credit": -2.0, "wrong_step_blame": 2.0,
                         "right_steps_blame": -1.0, "flat_credit": 0.0, "samples_to_halfway": 500.0,
                         "step_label_effect": 1.0, "own_step_flawed_step_credit": -1.5,
                         "own_step_wrong_step_blame": 1.5, "own_step_right_steps_blame": -0.5},
            # a 0.55 gain of SS-GRPO over GRPO, 100% of the PRM's; 0.04 of 1.0 extra FLOPs: exactly 4%
            "ss_grpo": {"pass@1": 0.8, "train_wall_clock_s": 10.0, "wrong_step_blame": 0.5, **ss_numbers},
            "ss_grpo_signed": {"pass@1": 0.8, "train_wall_clock_s": 12.0, "wrong_step_blame": 0.9, **ss_numbers},
            "grpo_scaled": {"pass@1": 0.75, "train_wall_clock_s": 50.0, **flat, "advantage_scale": 0.4, "flat_credit": 0.0}}
    per_seed = {m: [dict(numbers) for _ in range(SEEDS)] for m, numbers in seed.items()}
    for name, value in changes.items():
        method, key = name.split(".")
        for s, numbers in enumerate(per_seed[method]):
            numbers[key] = value[s] if isinstance(value, tuple) else value
    return per_seed


NAMES = {"SS-GRPO achieves 97%": "table share", "...at 4% of the PRM's training cost, read as total": "table cost",
         "...at 4% of the PRM's training cost, read as the hours": "table extra cost",
         "SS-GRPO trains at a fraction of the PRM's cost, read on its table": "table fraction",
         "the tiny estimator keeps the overhead below": "overhead figures",
         "the estimator adds only 5% overhead to rollout": "rollout overhead", "the estimator adds ~1M": "parameters",
         "storing step-level weights": "memory", "the only extra cost is the estimator's": "only cost", "SS-GRPO beats GRPO (": "beats", "SS-GRPO recovers 97%": "share",
         "SS-GRPO recovers most (": "most", "SS-GRPO recovers most of the benefits of process reward models at": "summary",
         "SS-GRPO recovers most of the benefits of process reward models, read as": "summary credit",
         "SS-GRPO trains at a fraction of a PRM's cost": "fraction cost",
         "...at 4% of the PRM's training cost (read as cost beyond": "cost",
         "a flawed step in a chain": "flawed", "GRPO penalises the right steps": "slip",
         "flat credit (GRPO's broadcast) makes reasoning brittle": "brittle",
         "SS-GRPO's step weight credits the flawed": "ss flawed", "SS-GRPO's step weight blames the first wrong": "ss wrong",
         "the broadcast of one advantage slows": "convergence", "the learned step weights give credit": "step size",
         "SS-GRPO: the estimator learns": "causal", "SS-GRPO ±: the estimator learns": "causal signed",
         "a sign-aware weight": "signed", "the estimator is trained with a contrastive": "contrastive",
         "the estimator's objective, the article's definition": "definition",
         "if the entropy of the step weights": "margin advice",
         "SS-GRPO needs no per-step evaluation": "evaluator", "the estimator adds only ~5% overhead": "overhead"}
ARITHMETIC = {"table share", "table cost", "table extra cost", "table fraction", "overhead figures", "rollout overhead",
              "parameters", "per-step calls", "per-step tokens", "memory"}
# the estimator's FLOPs on the article's code (any rollout; past 5000 tokens) and its prose (undetermined)
LONG = {"flops", "flops prose", "long rollouts", "long rollouts prose"}


PROCESS = {"process wrong", "process off", "process down"}  # the three parts of the process-reward mitigation
PROCESS_PER_STEP = {"process per step wrong", "process per step off", "process per step down"}
LENGTH = {"length article", "length trained"}  # one statement, of the article's estimator and of this run's


def name_of(statement: str) -> str:
    if statement.startswith("for a "):  # the per-step cost, read two ways
        return "per-step calls" if "read as evaluator calls" in statement else "per-step tokens"
    if statement.startswith("the estimator's forward pass costs below"):  # read on the code and on the prose
        return "flops prose" if "read on the article's prose" in statement else "flops"
    if statement.startswith("for very long rollouts"):  # the estimator's cost past 5000 tokens, read two ways
        return "long rollouts prose" if "read on the article's prose" in statement else "long rollouts"
    if statement.startswith("mitigation of entangled credit: process rewards"):  # two forms, three parts each
        part = "wrong" if "more blame on the first wrong" in statement else "off" if "blame off" in statement else "down"
        return ("process per step " if "each step credited" in statement else "process ") + part
    if statement.startswith("a mean-pooled"):  # the article's estimator, and this run's trained ones
        return "length article" if "(its estimator" in statement else "length trained"
    (name,) = [n for start, n in NAMES.items() if statement.startswith(start)]
    return name


def verdicts(per_seed: dict, objective: dict | None = None) -> dict:
    """The verdict of each claim, by the first words of its statement."""
    summary = {m: lab.seed_means(numbers) for m, numbers in per_seed.items()}
    out = {}
    for c in lab.check_claims(summary, per_seed, mc_rollouts=8, objective=objective or CONTRASTIVE):
        name = name_of(c["claim"])
        assert c["holds"] in (True, False, None) and name not in out
        out[name] = c["holds"]
    return out


def test_the_articles_own_numbers_fail_where_they_disagree():
    """As published: 89.7% of the gain, 23% of the hours (4.2% of the extra hours), overheads of
    1%, 5% and 5%, 5.28M parameters, 0.03% of a 7B policy's FLOPs, 1000 evaluator calls but 500.5x
    the tokens for per-token rescoring."""
    got = verdicts(claims_per_seed())
    assert {name: got[name] for name in ARITHMETIC} == {
        "table share": False, "table cost": False, "table extra cost": True, "table fraction": True,
        "overhead figures": False,
        "rollout overhead": True, "parameters": False, "per-step calls": True, "per-step tokens": False,
        "memory": None}  # 12 of 16 to 96 bytes: 75% to 12.5%
    assert {name: got[name] for name in LONG} == {"flops": True, "flops prose": None, "long rollouts": False,
                                                  "long rollouts prose": False}  # 0.39% at most
    assert got["only cost"] is False  # +17% training hours against +5% inference


@pytest.mark.parametrize("changes,flipped", [
    ({}, set()),
    ({"ARTICLE": HOLDING["ARTICLE"] | {"ss_grpo": (79.6, 4.48, 1.05)}}, {"table share"}),  # 96%
    ({"ARTICLE": HOLDING["ARTICLE"] | {"ss_grpo": (79.655, 4.49, 1.05)}}, set()),  # 96.55% and 4.49% round up/down
    ({"ARTICLE": HOLDING["ARTICLE"] | {"ss_grpo": (79.7, 5, 1.05)}}, {"table cost"}),  # 5% of the hours; 4% extra
    ({"ARTICLE": HOLDING["ARTICLE"] | {"grpo": (70.0, 0.1, 1.0), "ss_grpo": (79.7, 5, 1.05)}},
     {"table cost", "table extra cost"}),  # and 4.9 of 99.9 extra hours
    ({"ARTICLE": HOLDING["ARTICLE"] | {"ss_grpo": (79.7, 4.48, 1.5)}},
     {"rollout overhead", "overhead figures"}),  # the table's 1.5x
    ({"ARTICLE_INFERENCE_OVERHEAD": 0.01}, {"overhead figures"}),
    ({"ARTICLE_ROLLOUT_OVERHEAD": 0.01}, {"rollout overhead"}),  # 1% and the table's 5%: both below 6%
    ({"ARTICLE_ROLLOUT_OVERHEAD": 0.06}, {"overhead figures", "rollout overhead"}),  # not below 6%
    ({"ARTICLE_ESTIMATOR": {"vocab": 32000, "hidden": 128, "layers": 2, "ffn": 2048}}, {"parameters"}),
    ({"ARTICLE": HOLDING["ARTICLE"] | {"ss_grpo": (79.7, 2, 1.05)}}, {"table cost", "table extra cost"}),  # 2%: not 4%
    ({"ARTICLE": HOLDING["ARTICLE"] | {"ss_grpo": (79.7, 100, 1.05)}},
     {"table cost", "table extra cost", "table fraction"}),  # as many hours as the PRM: no fraction
    ({"ARTICLE": HOLDING["ARTICLE"] | {"ss_grpo": (79.7, 4.48, 1000.0)}},
     {"rollout overhead", "overhead figures", "table fraction"}),  # as much inference as the PRM
    ({"ARTICLE_PER_STEP_COST": 2.0}, {"per-step calls", "per-step tokens"}),
    ({"ARTICLE_ROLLOUT_TOKENS": 3, "ARTICLE_PER_STEP_COST": 2.0}, {"per-step calls"}),  # 3 calls, 2x the tokens
    ({"ARTICLE_ROLLOUT_TOKENS": 3, "ARTICLE_PER_STEP_COST": 3.0}, {"per-step tokens"}),
    ({"BUFFER_BYTES_PER_TOKEN": (64, 80)}, {"memory"}),  # 12 of 256 to 320 bytes: 4.7% to 3.8%, not ~10%
    ({"BUFFER_BYTES_PER_TOKEN": (8, 24)}, {"memory"}),  # 12 of 32 to 96 bytes: 37.5% to 12.5%, inconclusive
    ({"BUFFER_BYTES_PER_TOKEN": (14, 18)}, {"memory"}),  # 12 of 56 to 72 bytes: 21% to 17%, ~20%
])
def test_each_arithmetic_verdict_flips_with_its_own_numbers(changes, flipped, monkeypatch):
    holding_article(monkeypatch, **changes)
    got = verdicts(claims_per_seed())
    assert {name for name in ARITHMETIC if not got[name]} == flipped


# common.seed_verdict on each effect (a bound the statement names subtracted first): yes where the 95%
# interval over the seeds lies above 0, no only where it lies below 0; an interval that holds 0 is None
# whatever the sign of its mean (SEEDS = 3: t = 4.30, so a spread of 0.5 reaches ±1.24 around the mean)


@pytest.mark.parametrize("changes,flipped", [
    ({}, {}),
    ({"ss_grpo.pass@1": 0.78}, {"share": False}),  # 96% of the PRM's gain on every seed
    ({"ss_grpo.pass@1": (0.7, 0.8, 0.86)}, {"share": None, "step size": None}),  # 97% inside the interval
    ({"ss_grpo.pass@1": 0.24}, {"beats": False, "share": False, "most": False, "summary": False, "step size": False}),
    # a spread too wide to tell, around a mean above GRPO's and below the control's (-0.25 [-1.49, +0.99])
    ({"ss_grpo.pass@1": (0.0, 0.5, 1.0)}, {"beats": None, "share": None, "most": None, "summary": None,
                                           "step size": None}),
    # below GRPO on the mean (-0.05) and below 97%, half and the control on every seed, no interval below 0
    ({"ss_grpo.pass@1": (0.0, 0.1, 0.5)}, {"beats": None, "share": None, "most": None, "summary": None,
                                           "step size": None}),
    ({"ss_grpo.pass@1": (0.2, 0.21, 0.22)}, {"beats": False, "share": False, "most": False, "summary": False,
                                             "step size": False}),
    # 64% of the PRM's gain on every seed: most of it, not 97% (and below the control's 0.75)
    ({"ss_grpo.pass@1": 0.6}, {"share": False, "step size": False}),
    ({"ss_grpo.pass@1": 0.5}, {"share": False, "most": False, "summary": False, "step size": False}),  # 45%
    ({"prm_grpo.pass@1": 0.25}, {"share": None, "most": None, "summary": None}),  # premise: no PRM gain to share
    ({"prm_grpo.pass@1": (0.2, 0.3, 0.9)}, {"share": None, "most": None, "summary": None}),  # a gain the seeds
    # cannot tell from 0
    ({"ss_grpo.train_flops_vs_grpo": 1.05}, {"cost": False}),  # 5% of the MC-labelled PRM's extra FLOPs
    # more FLOPs than the PRM's 2.0x
    ({"ss_grpo.train_flops_vs_grpo": 2.5}, {"cost": False, "summary": False, "fraction cost": False}),
    # a PRM cheaper than SS-GRPO
    ({"ss_grpo.mc_prm_train_flops_vs_grpo": 1.02}, {"cost": False, "summary": False, "fraction cost": False}),
    # the PRM's 2.0x inside
    ({"ss_grpo.train_flops_vs_grpo": (1.5, 2.0, 2.5)}, {"cost": None, "summary": None, "fraction cost": None}),
    ({"ss_grpo.train_flops_vs_grpo": (1.5, 1.9, 2.3)}, {"cost": None, "summary": None, "fraction cost": None}),
    ({"ss_grpo.train_flops_vs_grpo": (1.5, 1.6, 1.7)}, {"cost": False}),  # cheaper than 2.0x on every seed, not 4%
    # the cost: fails the statement even where the accuracy half lacks its premise
    ({"prm_grpo.pass@1": 0.25, "ss_grpo.train_flops_vs_grpo": 2.5}, {"share": None, "most": None, "cost": False,
                                                                     "summary": False, "fraction cost": False}),
    ({"ss_grpo.train_flops_vs_grpo": 1.044}, {}),  # 4.4% still reads as 4%
    ({"ss_grpo.train_flops_vs_grpo": (1.03, 1.05, 1.07)}, {"cost": None}),  # 5% on the mean, 4% inside its interval
    ({"grpo.flawed_step_credit": -0.1}, {"flawed": False}),
    ({"grpo.flawed_step_credit": (0.3, -0.1, -0.5)}, {"flawed": None}),  # below 0 on the mean only
    ({"grpo.flawed_right_share": 0.0}, {"flawed": None, "brittle": False}),  # no right completion with a wrong line
    ({"grpo.flawed_right_share": (0.1, 0.0, 0.1), "grpo.flawed_step_credit": (1.0, math.nan, 1.0)},
     {"brittle": None}),  # 2 seeds; GRPO's share below PRM-GRPO's on one
    ({"grpo.flawed_right_share": (0.1, 0.0, 0.0)}, {"flawed": None, "brittle": None}),  # one seed has one: no interval
    ({"grpo.flat_credit": (1.0, 0.0, 1.0)}, {"slip": False}),  # one seed gave a token other than its A_i
    ({"grpo.right_steps_blame": math.nan}, {"slip": None, "process off": None, "process per step off": None}),  # no right
    # step before a slip to look at
    ({"prm_grpo.right_steps_blame": 2.5}, {"process wrong": False, "process off": False}),  # more than on the slip
    ({"prm_grpo.right_steps_blame": 1.2}, {"process off": False}),  # less than on the slip, more than GRPO's 1
    ({"prm_grpo.right_steps_blame": (0.6, 1.0, 1.4)}, {"process off": None}),  # GRPO's 1 inside the interval
    ({"prm_grpo.flawed_right_share": 0.2}, {"brittle": False}),  # more wrong lines under step credit
    ({"prm_grpo.flawed_right_share": (0.0, 0.1, 0.2)}, {"brittle": None}),
    ({"prm_grpo.flawed_step_credit": 0.5}, {"process down": False}),  # the flawed step reinforced
    ({"prm_grpo.flawed_step_credit": (0.5, -0.5, -1.5)}, {"process down": None, "summary credit": None}),
    # the per-step form on the same batches, decided on its own numbers
    ({"prm_grpo.own_step_right_steps_blame": 1.2}, {"process per step off": False}),  # more than GRPO's 1
    ({"prm_grpo.own_step_right_steps_blame": 1.6}, {"process per step wrong": False,
                                                    "process per step off": False}),  # more than on the slip too
    ({"prm_grpo.own_step_right_steps_blame": (0.6, 1.0, 1.4)}, {"process per step off": None,
                                                                "process per step wrong": None}),  # 1.5 - it: 0.9 to 0.1
    ({"prm_grpo.own_step_flawed_step_credit": 0.5}, {"process per step down": False}),  # the flawed step reinforced
    ({"prm_grpo.own_step_wrong_step_blame": (-3.0, 0.0, 3.0)}, {"process per step wrong": None}),
    ({"ss_grpo.flawed_step_credit": 0.55}, {"ss flawed": False, "summary credit": False}),  # more credit than the right steps
    ({"ss_grpo.flawed_right_steps_credit": math.nan}, {"ss flawed": None, "summary credit": None}),
    ({"ss_grpo.wrong_step_blame": 0.2}, {"ss wrong": False}),  # less blame on the mistake than on the steps before it
    ({"ss_grpo.wrong_step_blame": (0.3, 0.4, 0.5)}, {"ss wrong": None}),  # the right steps' 0.4 inside
    ({"prm_grpo.samples_to_halfway": 1500.0}, {"convergence": False}),
    ({"prm_grpo.samples_to_halfway": (500.0, 400.0, math.nan)}, {"convergence": None}),  # one seed never gets there
    ({"prm_grpo.samples_to_halfway": math.nan}, {"convergence": False}),  # at the budget on every seed: slower
    ({"grpo.samples_to_halfway": (1000.0, math.nan, 1000.0)}, {"convergence": None}),  # GRPO did not rise
    ({"grpo_scaled.pass@1": 0.8}, {"step size": None}),  # a tie on every seed
    ({"ss_grpo.localisation_auroc": 0.4}, {}),  # context only: it counts the steps after the first error as negatives
    ({"ss_grpo.auroc_step_right_in_failed": 0.4}, {"causal": False}),
    ({"ss_grpo.auroc_step_right_in_failed": (0.2, 0.5, 0.6)}, {"causal": None}),  # below chance on the mean only
    ({"ss_grpo.auroc_step_right_in_failed": 0.5}, {"causal": None}),
    ({"ss_grpo_signed.auroc_step_right_in_failed": 0.45}, {"causal signed": False}),
    ({"ss_grpo_signed.wrong_step_blame": 0.1}, {"signed": False}),  # less blame than the faithful one
    ({"ss_grpo.w_entropy": (0.99, 1.0, 1.0)}, {"margin advice": None}),  # collapsed, and the margin is read
    ({"ss_grpo.w_length_r": 0.3}, {}),  # context only: length mixed with content
    ({"ss_grpo.w_tiled_change": (0.0, 1e-3, 0.0)}, {"length trained": False}),  # one seed's w moved with the length
    ({"ss_grpo.w_tiled_change": (0.0, 1e-8, 0.0)}, {}),  # below float32's rounding
    ({"ss_grpo.w_tiled_change": (0.0, math.nan, 0.0)}, {"length trained": None}),
    ({"ss_grpo.step_label_effect": (0.0, 0.2, 0.0)}, {"evaluator": False}),
    ({"prm_grpo.step_label_effect": 0.0}, {"evaluator": None}),  # even the PRM did not move: cannot tell
    ({"ss_grpo.credit_wall_clock_share": 0.06}, {"overhead": False}),
    ({"ss_grpo.credit_wall_clock_share": (0.02, 0.06, 0.07)}, {"overhead": None}),  # 5% inside the interval
])
def test_each_run_verdict_flips_with_its_own_numbers(changes, flipped, monkeypatch):
    holding_article(monkeypatch)
    got = verdicts(claims_per_seed(**changes))
    assert set(got) == set(NAMES.values()) | ARITHMETIC | LENGTH | LONG | PROCESS | PROCESS_PER_STEP
    expected = ({name: name not in ARITHMETIC or got[name]
                 for name in set(NAMES.values()) | ARITHMETIC | LENGTH | PROCESS | PROCESS_PER_STEP}
                | {"margin advice": None, "only cost": False, "long rollouts": None, "long rollouts prose": None,
                   "flops": False, "flops prose": None})  # HOLDING's attention as wide as the estimator's
    assert got == expected | flipped


def test_the_summary_reads_both_halves_and_names_a_missing_gain_as_its_premise(monkeypatch):
    """Most of the PRM's gain and less compute than the MC-labelled PRM, in one verdict: with no PRM gain to
    share it is the premise that is missing (not an undecided share), and the cost half still shows."""
    holding_article(monkeypatch)

    def summary(per_seed: dict, name: str = "summary") -> dict:
        means = {m: lab.seed_means(numbers) for m, numbers in per_seed.items()}
        (found,) = [c for c in lab.check_claims(means, per_seed, 8, CONTRASTIVE) if name_of(c["claim"]) == name]
        return found

    held = summary(claims_per_seed())
    assert held["holds"] is True and "+0.48 [+0.48, +0.48]" in held["measured"]  # 1 - 1.04/2.0 on each seed
    lacking = summary(claims_per_seed(**{"prm_grpo.pass@1": 0.2}))  # below GRPO on every seed
    assert common.verdict_word(lacking) == "premise not met" and "(yes: less)" in lacking["measured"]
    cost = summary(claims_per_seed(**{"prm_grpo.pass@1": 0.2}), "fraction cost")  # the cost half: its own verdict
    assert cost["holds"] is True and cost["measured"] in lacking["measured"] and "+0.48 [+0.48, +0.48]" in cost["measured"]
    assert common.verdict_word(summary(claims_per_seed(**{"prm_grpo.pass@1": (0.2, 0.3, 0.9)}))) == "inconclusive"


def margin_claim(per_seed: dict, objective: dict) -> dict:
    summary = {m: lab.seed_means(numbers) for m, numbers in per_seed.items()}
    (found,) = [c for c in lab.check_claims(summary, per_seed, 8, objective) if name_of(c["claim"]) == "margin advice"]
    return found


def test_the_margin_advice_cannot_help_where_the_loss_never_reads_the_margin(monkeypatch):
    holding_article(monkeypatch)
    read, unread = CONTRASTIVE, {**CONTRASTIVE, "article_margin_effect": 0.0, "article_pair_effect": 0.0}
    for per_seed in (claims_per_seed(), claims_per_seed(**{"ss_grpo.w_entropy": (0.99, 1.0, 1.0)})):
        assert margin_claim(per_seed, unread)["measured"].startswith("raising the margin leaves the article's loss")
        assert margin_claim(per_seed, read)["measured"].startswith("not tested")
        assert margin_claim(per_seed, unread)["holds"] is False and margin_claim(per_seed, read)["holds"] is None
    assert verdicts(claims_per_seed(), unread)["contrastive"] is False
    assert verdicts(claims_per_seed(), {**unread, "article_pair_effect": 1e-3})["contrastive"] is True


def test_the_articles_objective_is_no_contrast_and_a_contrastive_one_is_told_apart(monkeypatch):
    """Its own code: an MSE per rollout that never reads `margin`. A Q-RM-like pairwise loss with a
    margin, between a group's right and failed rollout, moves with both probes."""
    found = lab.article_objective()  # a tiled step's w in float64: 0 up to the last bit, which CPUs round apart
    assert found.pop("article_tiled_change") == pytest.approx(0.0, abs=1e-12)
    assert found == {"article_margin_effect": 0.0, "article_pair_effect": 0.0, **lab.article_definition()}

    def contrastive(estimator, rollouts, optimizer, margin=0.1):
        (right, _), (wrong, _) = rollouts
        scores = [estimator(torch.stack(steps), torch.ones(len(steps), len(steps[0]))).mean() for steps in (right, wrong)]
        return float(-torch.nn.functional.logsigmoid(scores[0] - scores[1] - margin).detach())

    monkeypatch.setattr(lab, "article_train_step_estimator", contrastive)
    monkeypatch.setattr(lab, "article_definition", dict)  # a group of two rollouts only
    moved = lab.article_objective()
    assert moved["article_margin_effect"] > 0 and moved["article_pair_effect"] > 1e-6


def test_the_articles_loss_weighs_each_step_by_its_rollouts_lengths():
    """Its optimum, exactly: each step gets the mean reward of the rollouts that hold it, each weighted by one
    over its number of steps; with equal lengths that is its share of appearances in right rollouts (A-E),
    with one and four steps it reverses F (share 1/2) and G (1/3), and J and K (J in more right rollouts too)."""
    found = lab.article_definition()
    shares = [found[f"article_definition_share[{n}]"] for n in "ABCDEFGHIJKL"]
    weights = [found[f"article_definition_weight[{n}]"] for n in "ABCDEFGHIJKL"]
    assert shares == pytest.approx([2 / 3, 1.0, 0.5, 0.5, 0.0, 0.5, 1 / 3, 1.0, 0.0, 2 / 3, 0.5, 1.0])
    assert weights == pytest.approx(shares[:5] + [0.25 / 1.25, 1 / 1.5, 1.0, 0.0, 0.5 / 1.5, 0.5, 1.0], abs=1e-4)


@pytest.mark.parametrize("weight,holds", [
    ((0.6, 0.9, 0.4, 0.4, 0.1, 0.5, 0.3, 0.9, 0.1, 0.6, 0.5, 0.9), True),  # C and D tie, as their shares do
    ((0.6, 0.9, 0.4, 0.4, 0.7, 0.5, 0.3, 0.9, 0.1, 0.6, 0.5, 0.9), False),  # E, in no right rollout, weighed above A
    ((0.6, 0.6, 0.4, 0.4, 0.1, 0.5, 0.3, 0.9, 0.1, 0.6, 0.5, 0.9), False),  # A and B tie where their shares differ
    ((0.6, 0.9, 0.4, 0.4, 0.1, 0.2, 0.7, 0.9, 0.1, 0.6, 0.5, 0.9), False),  # the second group reversed (F below G)
    ((0.6, 0.9, 0.4, 0.4, 0.1, 0.5, 0.3, 0.9, 0.1, 0.3, 0.5, 0.9), False),  # the third reversed (J below K)
    ((0.6, 0.9, 0.4, 0.4, 0.35, 0.5, 0.3, 0.9, 0.1, 0.6, 0.5, 0.9), True),  # E (share 0) above G: two groups
])
def test_the_definition_claim_asks_every_pair_of_steps_of_a_group_for_the_shares_order(weight, holds):
    objective = {**CONTRASTIVE, **{f"article_definition_weight[{n}]": x for n, x in zip("ABCDEFGHIJKL", weight)}}
    assert verdicts(claims_per_seed(), objective)["definition"] is holds


def test_claims_need_only_the_methods_they_compare(monkeypatch):
    holding_article(monkeypatch)
    full = claims_per_seed()
    own = {"contrastive", "definition", "margin advice", "length article", "length trained", "causal", "overhead"}  # SS-GRPO's alone
    article = ARITHMETIC | LONG | {"only cost"}  # the article's numbers: no run needed
    assert set(verdicts({m: full[m] for m in ("grpo", "prm_grpo", "ss_grpo")})) == article | own | {
        "beats", "share", "most", "summary", "summary credit", "fraction cost", "cost", "flawed", "slip", "brittle",
        *PROCESS, *PROCESS_PER_STEP,
        "ss flawed", "ss wrong", "convergence", "evaluator"}
    assert set(verdicts({m: full[m] for m in ("ss_grpo", "ss_grpo_signed")})) == article | own | {
        "ss flawed", "ss wrong", "causal signed", "signed"}
    assert set(verdicts({m: full[m] for m in ("grpo", "prm_grpo")})) == article | {
        "flawed", "slip", "brittle", *PROCESS, *PROCESS_PER_STEP, "convergence"}
    # a PRM-GRPO run logged before the per-step form: its own claim only, the reward-to-go one as before
    before = {m: full[m] for m in ("grpo", "prm_grpo")} | {"prm_grpo": [
        {k: v for k, v in numbers.items() if not k.startswith(lab.OWN_STEP)} for numbers in full["prm_grpo"]]}
    assert set(verdicts(before)) == article | {"flawed", "slip", "brittle", *PROCESS, "convergence"}
    assert set(verdicts({m: full[m] for m in ("grpo", "ss_grpo", "grpo_scaled")})) == article | own | {
        "flawed", "slip", "ss flawed", "ss wrong", "step size", "fraction cost"}


def test_samples_to_a_target_interpolate_between_evaluations():
    evals = [{"samples": 0, "pass@1": 0.2}, {"samples": 100, "pass@1": 0.3}, {"samples": 200, "pass@1": 0.5}]
    assert lab.halfway(evals) == pytest.approx(0.35)
    assert lab.samples_to(evals, 0.35) == pytest.approx(125.0)  # a quarter of the way from 0.3 to 0.5
    assert lab.samples_to(evals, 0.2) == 0.0 and math.isnan(lab.samples_to(evals, 0.6))
    assert math.isnan(lab.halfway(evals[::-1])) and math.isnan(lab.samples_to(evals, math.nan))


# -------------------------------------------------- the numbers of each run, and their pairing by seed


def hand_run(wall: float, blames: list[float], probe: bool) -> dict:
    credit = [{"policy_tokens": 10.0, "evaluator_calls": 1.0, "credit_s": 0.1, "wrong_step_blame": b,
               "negative_share": 0.5 + i, "padding_share": 0.1 * i, "w_right": 0.6, "w_failed": 0.2 + i,
               "w_entropy": 0.8, "right_target_zero": 0.25, "flat_credit": float(i < 3 or wall < 35)} for i, b in enumerate(blames)]
    run = {"credit": credit, "history": [{"generate_s": 1.0, "update_s": 1.0}] * len(blames), "wall_clock_s": wall,
           "final": {"pass@1": wall / 100}, "step_label_effect": wall / 1000,
           "evals": [{"samples": 0, "pass@1": 0.0}, {"samples": 100, "pass@1": wall / 100}]}
    if probe:
        run["probe"] = {"auroc_outcome": wall / 50, "w_by_offset": {0: 0.5}}
    return run


def test_run_metrics_average_the_second_half_of_training_and_pair_each_run_with_grpo_of_its_seed():
    nan = math.nan
    runs = {"grpo": [hand_run(10.0, [nan] * 4, False), hand_run(20.0, [nan] * 4, False)],
            "ss_grpo": [hand_run(30.0, [0.9, 0.8, 0.3, nan], True), hand_run(40.0, [0.9, nan, 0.1, 0.2], True)]}
    model, tok = lm_pins.tiny_model()
    args = dataclasses.replace(common.apply_smoke(ss.Args(smoke=True, device="cpu")), est_hidden=8, est_heads=2,
                               est_layers=1, est_ffn=16)
    per_seed, summary, sizes = lab.summarise(model, tok, args, runs)
    assert sizes["estimator_params"] == lab.parameters(lab.make_estimator(tok, args, "cpu")) > 0
    first, second = per_seed["ss_grpo"]
    assert first["train_wall_clock_vs_grpo"] == 3.0 and second["train_wall_clock_vs_grpo"] == 2.0  # its own seed's GRPO
    assert first["wrong_step_blame"] == 0.3 and second["wrong_step_blame"] == pytest.approx(0.15)  # updates 2 and 3
    assert first["negative_share"] == 3.0 and first["padding_share"] == pytest.approx(0.25)
    assert first["w_failed"] == pytest.approx(2.7) and first["w_right"] == pytest.approx(0.6)
    assert first["auroc_outcome"] == 0.6 and "w_by_offset" not in first
    # to its own seed's GRPO's halfway mark (0.05, then 0.1) on a straight line from 0 to 0.3 (then 0.4)
    assert first["samples_to_halfway"] == pytest.approx(100 * 0.05 / 0.3) and second["samples_to_halfway"] == 25.0
    assert first["samples_budget"] == 100.0 and first["step_label_effect"] == 0.03
    assert first["flat_credit"] == 1.0 and second["flat_credit"] == 0.0  # its update 3 gave a token other than A_i
    assert summary["ss_grpo"]["pass@1"] == pytest.approx(0.35) and summary["ss_grpo"]["wrong_step_blame"] == pytest.approx(0.225)
    assert "w_right" not in per_seed["grpo"][0] and math.isnan(summary["grpo"]["wrong_step_blame"])
    assert summary["grpo"]["train_wall_clock_vs_grpo"] == 1.0


def test_seed_curve_is_the_nan_aware_mean_over_seeds_then_smoothed():
    runs = [{"credit": [{"k": 1.0}, {"k": math.nan}, {}, {"k": 4.0}, {"k": 2.0}, {"k": 0.0}, {"k": 6.0}]},
            {"credit": [{"k": 3.0}, {"k": 5.0}, {}, {}, {"k": math.nan}, {"k": 1.0}, {"k": 8.0}]}]
    per_update = [2.0, 5.0, math.nan, 4.0, 2.0, 0.5, 7.0]
    np.testing.assert_allclose(lab.seed_curve(runs, "k"), common.moving_average(per_update, 5))


def test_weight_stats_by_hand():
    """w on the real steps of right and of failed completions, the weights' entropy over
    completions with ≥ 2 steps, and the share of right completions trained toward 0."""
    w = torch.tensor([[0.8, 0.4, 0.7], [0.2, 0.9, 0.0], [0.5, 0.5, 0.5], [0.3, 0.0, 0.0]])
    steps = torch.tensor([3, 2, 3, 1])
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    targets = ss.minmax_targets(rewards)
    got = lab.weight_stats(w, steps, rewards, targets)
    assert math.isclose(got["w_right"], (0.8 + 0.4 + 0.7 + 0.5 * 3 + 0.3) / 7, rel_tol=1e-6)
    assert math.isclose(got["w_failed"], (0.2 + 0.9) / 2, rel_tol=1e-6)
    assert got["right_target_zero"] == 2 / 3  # the all-right group's two completions
    entropies = lab.weight_entropy(w, steps).tolist()
    assert len(entropies) == 3 and math.isclose(entropies[2], 1.0, rel_tol=1e-6)
    p = np.array([0.2, 0.9]) / 1.1
    assert math.isclose(entropies[1], float(-(p * np.log(p)).sum() / np.log(2)), rel_tol=1e-5)
    assert math.isclose(got["w_entropy"], float(np.mean(entropies)), rel_tol=1e-6)


def test_each_run_trains_a_copy_of_the_cold_start_with_its_methods_credit(tmp_path, monkeypatch):
    """run_method: the policy trained is a copy of the cold start (left untouched), the reference a
    frozen copy; the credit is the method's, with a fresh estimator (seeded by the run's seed) for
    SS-GRPO only, SS-GRPO's step sizes for the control only; the trained policy is the one evaluated
    and probed, with the final-evaluation seed. compare_methods: every method for every seed, in order."""
    initial, tok = lm_pins.tiny_model(7)
    start = [p.detach().clone() for p in initial.parameters()]
    args = dataclasses.replace(credit_args(tmp_path, est_hidden=8, est_heads=2, est_ffn=16, est_layers=1), seed=3)
    study = lab.Args(probe_samples=3)
    seen = {}

    def fake_train(policy, reference, tokenizer, run_args, advantage_fn, held_out, device, desc="RL"):
        assert policy is not initial and all(torch.equal(a, b) for a, b in zip(policy.parameters(), start))
        assert all(torch.equal(a, b) and not a.requires_grad for a, b in zip(reference.parameters(), start))
        seen.update(policy=policy, credit=advantage_fn, args=run_args)
        assert advantage_fn.args is run_args and advantage_fn.rng.bit_generator.state == np.random.default_rng(
            run_args.seed).bit_generator.state
        if advantage_fn.estimator is not None:
            torch.manual_seed(run_args.seed)
            fresh = lab.make_estimator(tok, run_args, "cpu")
            assert all(torch.equal(a, b) for a, b in zip(advantage_fn.estimator.parameters(), fresh.parameters()))
        with torch.no_grad():
            next(policy.parameters()).add_(1.0)
        advantage_fn.log.append({"marker": run_args.seed})
        return {"history": [], "evals": [{"pass@1": 0.0}]}

    def fake_evaluate(model, tokenizer, problems, samples, max_new_tokens, generator, device):
        assert model is seen["policy"] and samples == args.final_samples and generator.initial_seed() == args.seed + 2
        return {"pass@1": 0.5}

    def fake_probe(policy, model, tokenizer, held_out, run_args, samples, device):
        assert policy is seen["policy"] and model is seen["credit"].estimator and samples == 3
        return {"probed": True}

    monkeypatch.setattr(ss, "train", fake_train)
    monkeypatch.setattr(ss, "evaluate", fake_evaluate)
    monkeypatch.setattr(lab, "probe_weights", fake_probe)
    monkeypatch.setattr(lab, "step_label_effect", lambda credit: 0.25 if credit is seen["credit"] else math.nan)
    for method in lab.METHODS:
        scales = SCALES if method == "grpo_scaled" else None
        result = lab.run_method(initial, tok, args, method, [], "cpu", study, scales)
        credit = seen["credit"]
        assert credit.name == method and (credit.estimator is not None) == method.startswith("ss_")
        assert credit.method == lab.BASE.get(method, method) and credit.scales is scales
        assert result["credit"] == [{"marker": 3}] and result["seed"] == 3 and result["final"] == {"pass@1": 0.5}
        assert ("probe" in result) == method.startswith("ss_") and 0 <= result["wall_clock_s"] < 60
        assert result["step_label_effect"] == 0.25  # of the credit that trained
    assert all(torch.equal(a, b) for a, b in zip(initial.parameters(), start))

    def fake_run(model, tokenizer, run_args, method, held_out, device, run_study, scales=None):
        assert model is initial and tokenizer is tok and run_study is two
        return {"run": (method, run_args.seed), "scales": scales,
                "credit": [{"advantage_scale": run_args.seed + u / 10} for u in range(3)]}

    monkeypatch.setattr(lab, "run_method", fake_run)
    two = lab.Args(methods="ss_grpo,grpo,grpo_scaled", seed=3, repeats=2)
    got = lab.compare_methods(initial, tok, args, two, [], "cpu")
    assert {m: [r["run"] for r in rs] for m, rs in got.items()} == {
        "ss_grpo": [("ss_grpo", 3), ("ss_grpo", 4)], "grpo": [("grpo", 3), ("grpo", 4)],
        "grpo_scaled": [("grpo_scaled", 3), ("grpo_scaled", 4)]}
    # the control of each seed takes the step sizes of SS-GRPO's run of that seed; no other run takes any
    assert [r["scales"] for r in got["grpo_scaled"]] == [[3.0, 3.1, 3.2], [4.0, 4.1, 4.2]]
    assert all(r["scales"] is None for m in ("ss_grpo", "grpo") for r in got[m])


def test_each_update_logs_the_diagnostics_of_the_advantages_it_returns(tmp_path):
    """The blame on the first wrong step, the negative share, the article's padding share (every
    method), and w(s) on right and failed completions (SS-GRPO), of this very update."""
    r = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    step_ids = step_ids_of(r)
    wrong = [lm_world.first_wrong_step(PROBLEMS[b // 4], t) for b, t in enumerate(TEXTS)]
    A = ss.grpo_advantages(REWARDS).flatten()
    for method in lab.METHODS:
        credit = credit_of(method, credit_args(tmp_path))
        model = credit.estimator
        advantages = credit(r, REWARDS, PROBLEMS)
        expected = (lab.blame_stats(advantages, A, step_ids, wrong, REWARDS) | lab.article_padding(step_ids)
                    | lab.flawed_step_stats(advantages, A, step_ids, wrong, REWARDS)
                    | {"advantage_scale": lab.advantage_scale(advantages, A, step_ids)})
        if method == "prm_grpo":  # its batch credited per step too, the same gold step rewards: a reading only
            steps = step_ids.max(1).values + 1
            own = ss.broadcast_to_tokens(lab.lengths_lab.own_step_advantages(*ss.gold_step_rewards(wrong, steps), 4), step_ids)
            stats = (lab.blame_stats(own, A, step_ids, wrong, REWARDS) | lab.flawed_step_stats(own, A, step_ids, wrong, REWARDS)
                     | {"advantage_scale": lab.advantage_scale(own, A, step_ids)})
            expected |= {lab.OWN_STEP + k: v for k, v in stats.items()}
            assert set(stats) == set(lab.CREDIT_KEYS)
        assert (lab.OWN_STEP + "wrong_step_blame" in credit.log[0]) == (method == "prm_grpo")
        if model is not None:
            batch = ss.step_batch(r, step_ids, end_tokens_of(r), 512, TOK.pad_token_id)
            with torch.no_grad():
                w = ss.step_grid(model.step_weights(batch), batch)
            expected |= lab.weight_stats(w, step_ids.max(1).values + 1, REWARDS, ss.minmax_targets(REWARDS))
        entry = credit.log[0]
        for key, value in expected.items():
            assert math.isclose(entry[key], value, rel_tol=1e-6), (method, key)


def test_only_the_gold_step_credit_moves_when_the_step_labels_change(tmp_path):
    """step_label_effect on each method's credit after one update: GRPO's, SS-GRPO's (both) and the
    control's read the rewards and the text only; PRM-GRPO's moves; the credit's own log is kept."""
    r = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    for method in lab.METHODS:
        credit = credit_of(method, credit_args(tmp_path))
        credit(r, REWARDS, PROBLEMS)
        effect = lab.step_label_effect(credit)
        assert (effect > 0) == (method == "prm_grpo") and len(credit.log) == 1, method
        other = ss.Credit.__call__(credit_of("prm_grpo", credit_args(tmp_path)), r, REWARDS, PROBLEMS[1:] + PROBLEMS[:1])
        if method == "prm_grpo":  # the largest change of a token's advantage
            assert effect == pytest.approx(float((ss.Credit.__call__(credit, r, REWARDS, PROBLEMS) - other).abs().max()))


def test_flat_credit_marks_updates_where_every_token_gets_its_a_i(tmp_path):
    r = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    for method in lab.METHODS:
        credit = credit_of(method, credit_args(tmp_path))
        credit(r, REWARDS, PROBLEMS)
        assert credit.log[0]["flat_credit"] == float(method == "grpo"), method  # the control's scale is 0.5


# -------------------------------------------------- the held-out probe of w(s), on hand-made samples


PROBE_TEXTS = ["47-7=40\n40*2=80\n#80", "47-7=41\n41*2=82\n#82", "47-7=40\n40*2=81\n#81", "47-7=40\n40*2=80",
               "4+8=12\n12*3=36\n#36", "4+8=12\n#36", "4+8=12\n12*3=36\n#37", "4+8=13\n#39",
               "31*2=62\n62+8=70\n#70", "31*2=62\n62+8=71\n#71", "#70", "1\n2\n3\n#4"]


def probe_weight(b: int, k: int) -> float:
    return ((7 * b + 3 * k) % 11) / 10


class TableEstimator:
    """w(s) read from a table by (completion, line): no model."""

    def step_weights(self, batch: ss.StepBatch) -> torch.Tensor:
        return torch.tensor([probe_weight(int(b), int(k)) for b, k in zip(batch.step_completion, batch.step_index)])


def test_probe_scores_each_held_out_step_against_its_gold_labels(tmp_path, monkeypatch):
    """The probe's AUROCs, localisation, offsets and r with the step's length equal a loop over the sampled solutions: w by
    outcome; within failed solutions, the steps before the first wrong one against it and those
    after; the first wrong step's localisation among failed solutions with ≥ 2 steps (a solution
    that stops before its first wrong line has no such step and is left out)."""
    args = credit_args(tmp_path)
    prompts = [p.prompt for p in PROBLEMS for _ in range(4)]

    policy = object()

    def fake_sample(model, tokenizer, asked, max_new_tokens, generator, device):
        assert model is policy and tokenizer is TOK and asked == prompts and max_new_tokens == args.max_new_tokens
        # its own samples: a seed apart from training's (seed), the evaluations' (seed + 1, seed + 2)
        assert generator.initial_seed() == args.seed + 3
        return hand_completions(asked, PROBE_TEXTS), list(PROBE_TEXTS)

    monkeypatch.setattr(lm_world, "sample", fake_sample)
    table = TableEstimator()
    monkeypatch.setattr(lab, "tiled_change", lambda estimator, batch: 0.25 if estimator is table else math.nan)
    got = lab.probe_weights(policy, table, TOK, PROBLEMS, args, 4, "cpu")
    by_outcome, good, bad, credits, wrongs, offsets, chance = {True: [], False: []}, [], [], [], [], {}, []
    every_weight, every_length = [], []
    for b, text in enumerate(PROBE_TEXTS):
        problem, lines = PROBLEMS[b // 4], text.split("\n")
        weights = np.array([probe_weight(b, k) for k in range(len(lines))])
        right = lines[-1] == f"#{problem.answer}"
        by_outcome[right] += list(weights)
        every_weight += list(weights)
        every_length += [len(line) + 1 for line in lines]  # a character a token, and its newline (the last: EOS)
        if len(lines) >= 2:
            chance.append(1 / len(lines))
        wrong = lm_world.first_wrong_step(problem, text)
        if right or wrong is None or wrong >= len(lines):
            continue
        good += list(weights[:wrong])
        bad += list(weights[wrong:])
        for k, value in enumerate(weights):
            offsets.setdefault(k - wrong, []).append(value)
        if len(lines) >= 2:
            credits.append(weights)
            wrongs.append(wrong)
    located = lm_world.localisation(credits, wrongs)
    assert len(credits) == 6 and sorted(k for k, v in offsets.items() if len(v) >= 5) == [0, 1]
    expected = {"auroc_outcome": lm_world.auroc(np.array(by_outcome[True]), np.array(by_outcome[False])),
                "auroc_step_right_in_failed": lm_world.auroc(np.array(good), np.array(bad)),
                "localisation_auroc": located["auroc"], "localisation_top1": located["top1"],
                "chance_top1": np.mean(chance), "failed_solutions": 6,
                "w_right_solutions": np.mean(by_outcome[True]), "w_failed_solutions": np.mean(by_outcome[False]),
                "w_length_r": common.pearson(every_weight, every_length), "probe_steps": len(every_weight),
                "w_tiled_change": 0.25}
    assert set(got) == set(expected) | {"w_by_offset"}
    for key, value in expected.items():
        assert math.isclose(got[key], value, rel_tol=1e-6), key
    assert list(got["w_by_offset"]) == [0, 1]
    for k in (0, 1):
        assert math.isclose(got["w_by_offset"][k], np.mean(offsets[k]), rel_tol=1e-6)


@pytest.mark.parametrize("prm,premise", [(0.2, True), ((0.2, 0.3, 0.9), False)])  # GRPO: 0.25
def test_a_share_of_the_prms_gain_lacks_its_premise_only_where_the_gain_is_shown_below_0(prm, premise, monkeypatch):
    holding_article(monkeypatch)
    per_seed = claims_per_seed(**{"prm_grpo.pass@1": prm})
    summary = {m: lab.seed_means(numbers) for m, numbers in per_seed.items()}
    shares = [c for c in lab.accuracy_claims(per_seed) if c["claim"].startswith("SS-GRPO recovers")]
    assert len(shares) == 2 and all(c["holds"] is None for c in shares) and summary
    assert all(c["measured"].startswith("premise not met") is premise for c in shares)


def test_the_only_extra_cost_holds_where_training_grows_no_more_than_inference(monkeypatch):
    holding_article(monkeypatch, ARTICLE=HOLDING["ARTICLE"] | {"grpo": (70.0, 24, 1.0), "ss_grpo": (79.7, 25, 1.05)})
    assert verdicts(claims_per_seed())["only cost"] is True  # +4% hours, within the forward pass's +5%
    holding_article(monkeypatch, ARTICLE=HOLDING["ARTICLE"] | {"grpo": (70.0, 24, 1.0), "ss_grpo": (79.7, 26, 1.05)})
    assert verdicts(claims_per_seed())["only cost"] is False  # +8%


@pytest.mark.parametrize("low,high,verdict", [(0.06, 0.12, True), (0.01, 0.04, False), (0.16, 0.3, False),
                                              (0.018, 0.109, None), (0.12, 0.2, None)])
def test_memory_reads_10_percent_only_where_every_plausible_buffer_does(low, high, verdict):
    assert lab.memory_verdict(low, high) is verdict


def test_a_steps_tokens_tiled_after_the_same_prompt_by_hand():
    ids = torch.tensor([[5, 6, 7, 8], [5, 9, 0, 0]])
    attention = torch.tensor([[True] * 4, [True, True, False, False]])
    pool = torch.tensor([[False, False, True, True], [False, True, False, False]])
    got = lab.tiled(ids, attention, pool, 3)
    assert got[0].tolist() == [[5, 6, 7, 8, 7, 8, 7, 8], [5, 9, 9, 9, 0, 0, 0, 0]]
    assert got[1].tolist() == [[True] * 8, [True] * 4 + [False] * 4]
    assert got[2].tolist() == [[False, False] + [True] * 6, [False, True, True, True] + [False] * 4]


def test_tiling_leaves_w_exact_only_without_positions_and_prompt():
    """Mean-pooling over an encoder without positions, on rows that are all step (no prompt): every copy's output
    is the same, so w is the same up to float64 rounding; learned positions (the chapter's) move it."""
    torch.manual_seed(0)
    estimator = ss.StepValueEstimator(20, 8, 1, 2, 16).eval()
    ids = torch.randint(1, 20, (3, 4))
    everything = torch.ones(3, 4, dtype=torch.bool)
    batch = ss.StepBatch(ids, everything, everything, torch.arange(3), torch.arange(3), torch.zeros(3, dtype=torch.long), 3)
    assert lab.tiled_change(estimator, batch) > torch.finfo(torch.float32).eps
    torch.nn.init.zeros_(estimator.position.weight)
    assert lab.tiled_change(estimator, batch) < torch.finfo(torch.float32).eps
    assert lab.article_tiled_change() < torch.finfo(torch.float32).eps  # the article's: no positions at all


def test_the_length_claims_decide_exactly_against_float32_rounding(monkeypatch):
    holding_article(monkeypatch)
    assert verdicts(claims_per_seed(), {**CONTRASTIVE, "article_tiled_change": 1e-3})["length article"] is False
    assert verdicts(claims_per_seed(), {**CONTRASTIVE, "article_tiled_change": 1e-9})["length article"] is True


@pytest.mark.parametrize("shape,params,holds", [
    ({"layers": 32, "hidden": 4096}, 7e9, True),  # at most 0.39%, the limit of the two attention terms
    ({"layers": 32, "hidden": 4096}, 5e7, True),  # a one-token rollout: 2·0.40M + 4·2·128 of 2·50M + 2·32·4096: 0.79%
    ({"layers": 32, "hidden": 4096}, 2e7, False),  # of 20M: 1.97%
    ({"layers": 1, "hidden": 128}, 7e9, False),  # attention as wide as the estimator's: limit 4
])
def test_the_flops_bound_on_the_articles_code_holds_only_where_every_rollout_stays_below_it(shape, params, holds,
                                                                                          monkeypatch):
    holding_article(monkeypatch, ARTICLE_POLICY_SHAPE=shape, ARTICLE_POLICY_PARAMS=params, ARTICLE_INFERENCE_OVERHEAD=0.01)
    got = verdicts(claims_per_seed())
    assert got["flops"] is holds and got["flops prose"] is None


def test_at_a_fixed_prompt_and_step_the_share_falls_as_the_rollout_grows():
    size = lab.encoder_parameters(**lab.ARTICLE_ESTIMATOR)
    for step, prompt in ((10, 500.0), (100, 3000.0)):
        shares = [lab.long_rollout_flops_share(size, T, step, prompt) for T in (1000, 5000, 50000)]
        assert shares == sorted(shares, reverse=True)
    assert lab.long_rollout_flops_share(size, 10**7, 10**7, 0) < lab.attention_limit()  # one step: below its limit


def test_long_rollouts_share_is_the_larger_of_its_value_at_5000_tokens_and_its_limit_by_hand(monkeypatch):
    estimator = {"layers": 1000.0, "head": 0.0}
    monkeypatch.setattr(lab, "ARTICLE_ESTIMATOR", {"vocab": 10, "hidden": 2, "layers": 1, "ffn": 4})
    monkeypatch.setattr(lab, "ARTICLE_POLICY_SHAPE", {"layers": 1, "hidden": 4})
    monkeypatch.setattr(lab, "ARTICLE_POLICY_PARAMS", 1e6)
    # one step as long as the rollout, no prompt: (2·1000 + 4·1·2·T)·T / (2e6·T + 2·1·4·T²); limit 8 / 8 = 1
    at = (2000 + 8 * 5000) * 5000 / (2e6 * 5000 + 8 * 5000 ** 2)
    assert lab.long_rollout_flops_share(estimator, 5000, 5000, 0) == pytest.approx(at)
    assert lab.largest_share(estimator, 5000) == pytest.approx(1.0)
    # a falling share: an estimator as big as the policy, attention 100 times the estimator's: limit 0.01
    monkeypatch.setattr(lab, "ARTICLE_POLICY_SHAPE", {"layers": 100, "hidden": 4})
    assert lab.largest_share({"layers": 1e6, "head": 0.0}, 5000) == pytest.approx(
        (2e6 + 8 * 5000) * 5000 / (2e6 * 5000 + 800 * 5000 ** 2))


def test_long_rollouts_share_with_steps_and_prompt_by_a_loop_and_the_prompt_that_reaches_a_share(monkeypatch):
    """The policy's tokens one by one over their keys (prompt and rollout), the estimator's passes one per step
    over the step and the prompt; the sum over t of 4·layers·width·t is taken as 2·layers·width·T², as the code
    takes it. Then the prompt at which the share reaches a given one puts it there, and it rises with the prompt."""
    estimator, T, step, prompt = {"layers": 300.0, "head": 1.0}, 60, 12, 7
    monkeypatch.setattr(lab, "ARTICLE_ESTIMATOR", {"vocab": 10, "hidden": 2, "layers": 1, "ffn": 4})
    monkeypatch.setattr(lab, "ARTICLE_POLICY_SHAPE", {"layers": 2, "hidden": 4})
    monkeypatch.setattr(lab, "ARTICLE_POLICY_PARAMS", 1e4)
    policy = sum(2e4 + 4 * 2 * 4 * (prompt + t) for t in range(1, T + 1)) - 2 * 2 * 4 * T  # Σ t = T²/2 + T/2
    passes = [(step + prompt) * (2 * 301 + 4 * 1 * 2 * (step + prompt)) for _ in range(T // step)]
    assert lab.long_rollout_flops_share(estimator, T, step, prompt) == pytest.approx(sum(passes) / policy)
    reached = lab.prompt_at_share(estimator, T, step, 0.5)
    assert lab.long_rollout_flops_share(estimator, T, step, reached) == pytest.approx(0.5)
    assert lab.long_rollout_flops_share(estimator, T, step, reached / 2) < 0.5
    assert lab.prompt_at_share(estimator, T, step, 1e-6) == 0.0  # reached with no prompt at all


@pytest.mark.parametrize("shape,code", [({"layers": 1, "hidden": 128}, None), ({"layers": 32, "hidden": 4096}, False)])
def test_long_rollouts_are_no_only_where_the_costliest_steps_stay_below_the_bound_on_code_and_prose(
        shape, code, monkeypatch):
    """The code's reading: a policy whose attention is as wide as the estimator's reaches the 6% bound on its
    longest steps (limit 4): undetermined, the steps' length decides; a 7B policy's keeps it below (0.39%): no.
    The prose's: the prompt sets the level (the prompts that reach the bound are in its measured text), but
    the share grows with the rollout only toward that same limit: the same verdict."""
    holding_article(monkeypatch, ARTICLE_POLICY_SHAPE=shape)
    summary = {m: lab.seed_means(numbers) for m, numbers in claims_per_seed().items()}
    claims = {name_of(c["claim"]): c for c in lab.check_claims(summary, claims_per_seed(), 8, CONTRASTIVE)}
    # the prose: the prompt sets the level, but the share does not grow with the rollout past the limit
    assert claims["long rollouts"]["holds"] is code and claims["long rollouts prose"]["holds"] is code
    n = lab.article_numbers(summary)
    assert f"{n['article_long_rollout_prompt_at_bound_10']:,.0f} tokens for 10-token steps" in claims[
        "long rollouts prose"]["measured"]
