"""07_ss_grpo: the step-value estimator, the article's targets and loss, per-step advantages,
the gold process advantages, the diagnostics, CLI checks and a smoke run."""

import dataclasses
import importlib
import json
import math

import numpy as np
import pytest
import torch

import common
import lm_pins

ss = importlib.import_module("07_ss_grpo")
prm = importlib.import_module("06_prm_qrm")
TOK = common.make_char_tokenizer()


def hand_completions(prompts: list[str], completions: list[str]) -> common.Completions:
    """Completions built from text: left-padded prompts, completions + EOS, right-padded."""
    ids, mask = common.encode_prompts(TOK, prompts)
    rows = [TOK(c, add_special_tokens=False)["input_ids"] + [TOK.eos_token_id] for c in completions]
    width = max(len(r) for r in rows)
    completion = torch.tensor([r + [TOK.pad_token_id] * (width - len(r)) for r in rows])
    completion_mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows])
    return common.Completions(sequences=torch.cat([ids, completion], 1),
                              attention_mask=torch.cat([mask, completion_mask.long()], 1),
                              completion_mask=completion_mask, logprobs=torch.zeros(completion.shape),
                              truncated=torch.zeros(len(rows), dtype=torch.bool), prompt_length=ids.shape[1])


def step_ids_of(r: common.Completions) -> torch.Tensor:
    return common.token_step_ids(TOK, r.completion_ids, r.completion_mask)


def end_tokens_of(r: common.Completions) -> torch.Tensor:
    return common.step_end_tokens(TOK, r.completion_ids, r.completion_mask)


def estimator(seed: int = 0, **sizes) -> ss.StepValueEstimator:
    torch.manual_seed(seed)
    shape = {"hidden": 32, "layers": 2, "heads": 4, "ffn": 64} | sizes
    return ss.StepValueEstimator(len(TOK), **shape)


def test_estimator_output_in_unit_interval_and_blind_to_padding():
    model = estimator()
    torch.manual_seed(1)
    ids = torch.randint(3, len(TOK), (6, 9))
    attention = torch.arange(9)[None] < torch.tensor([9, 7, 5, 9, 3, 8])[:, None]
    pool = attention & (torch.arange(9)[None] >= 2)
    w = model(ids, attention, pool)
    assert w.shape == (6,) and ((w > 0) & (w < 1)).all()
    # anything written in the padding, and any number of extra padding columns, changes nothing
    garbage = torch.where(attention, ids, torch.randint(0, len(TOK), ids.shape))

    def wider(x: torch.Tensor, fill) -> torch.Tensor:
        return torch.cat([x, torch.full((6, 5), fill, dtype=x.dtype)], 1)

    assert torch.allclose(model(garbage, attention, pool), w, atol=1e-6)
    assert torch.allclose(model(wider(ids, 7), wider(attention, False), wider(pool, False)), w, atol=1e-6)
    # a saturated head still stays in [0, 1]
    with torch.no_grad():
        model.head.bias.fill_(1e4)
    assert (model(ids, attention, pool) <= 1).all()


def test_step_batch_rows_are_prompt_plus_each_step_and_long_steps_are_windowed():
    r = hand_completions(["12+7*3\n", "5+1\n"], ["12+7=19\n19*3=57\n#57", "#6"])
    step_ids = step_ids_of(r)
    batch = ss.step_batch(r, step_ids, end_tokens_of(r), chunk=512, pad_id=TOK.pad_token_id)
    rows = [TOK.decode(row[a].tolist()) for row, a in zip(batch.ids, batch.attention)]
    assert rows == ["12+7*3\n12+7=19\n", "12+7*3\n19*3=57\n", "12+7*3\n#57<eos>", "5+1\n#6<eos>"]
    pooled = [TOK.decode(row[p].tolist()) for row, p in zip(batch.ids, batch.pool)]
    assert pooled == ["12+7=19\n", "19*3=57\n", "#57<eos>", "#6<eos>"]
    assert batch.step_completion.tolist() == [0, 0, 0, 1] and batch.step_index.tolist() == [0, 1, 2, 0]
    # chunk = 3: "12+7=19\n" (8 tokens) becomes 3 windows; its weight is their mean
    chunked = ss.step_batch(r, step_ids, end_tokens_of(r), chunk=3, pad_id=TOK.pad_token_id)
    assert [TOK.decode(row[p].tolist()) for row, p in zip(chunked.ids, chunked.pool)][:3] == ["12+", "7=1", "9\n"]
    model = estimator()
    with torch.no_grad():
        windows = model(chunked.ids, chunked.attention, chunked.pool)
        steps = model.step_weights(chunked)
    assert len(steps) == 4 and math.isclose(float(steps[0]), float(windows[:3].mean()), rel_tol=1e-6)


def test_per_step_advantages_reach_exactly_their_steps_tokens():
    step_ids = torch.tensor([[0, 0, 0, 1, 1, 2, -1, -1], [0, 1, 1, 1, -1, -1, -1, -1]])
    A = torch.tensor([2.0, -1.0])
    w = torch.tensor([[0.1, 0.5, 0.9], [0.25, 0.75, 0.0]])
    tokens = ss.broadcast_to_tokens(ss.step_advantages(A, w, signed=False), step_ids)
    expected = torch.tensor([[0.2, 0.2, 0.2, 1.0, 1.0, 1.8, 0, 0], [-0.25, -0.75, -0.75, -0.75, 0, 0, 0, 0]])
    assert torch.allclose(tokens, expected)
    signed = ss.broadcast_to_tokens(ss.step_advantages(A, w, signed=True), step_ids)
    assert torch.allclose(signed[0], expected[0])  # A > 0: unchanged
    assert torch.allclose(signed[1, :4], torch.tensor([-0.75, -0.25, -0.25, -0.25]))  # A < 0: A·(1 - w)


def test_article_targets_on_a_hand_made_group():
    rewards = torch.tensor([[0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.5, 1.0, 1.0]])
    targets = ss.minmax_targets(rewards)
    assert torch.isfinite(targets).all()
    assert torch.allclose(targets[0], torch.tensor([0.0, 1.0, 0.0, 1.0]), atol=1e-6)
    assert torch.equal(targets[1], torch.zeros(4))  # all right: 0/(0 + eps) = 0, as the article writes it
    assert torch.equal(targets[2], torch.zeros(4))
    assert torch.allclose(targets[3], torch.tensor([0.0, 0.5, 1.0, 1.0]), atol=1e-6)


def test_estimator_loss_is_the_articles_per_rollout_mse_and_training_follows_the_target():
    r = hand_completions(["3+4\n"] * 4, ["3+4=7\n#7", "3+4=8\n#8", "#7", "3+4=7\n7+1=8\n#8"])
    batch = ss.step_batch(r, step_ids_of(r), end_tokens_of(r), chunk=512, pad_id=TOK.pad_token_id)
    targets = ss.minmax_targets(torch.tensor([[1.0, 0.0, 1.0, 0.0]])).flatten()
    model = estimator()
    w = model.step_weights(batch).detach()
    naive = np.mean([np.mean([(float(w[k]) - float(targets[i])) ** 2 for k in range(len(w))
                              if batch.step_completion[k] == i]) for i in range(4)])  # the article's loop
    assert math.isclose(float(ss.estimator_loss(w, batch, targets)), naive, rel_tol=1e-5)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(60):
        loss = ss.estimator_loss(model.step_weights(batch), batch, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        grid = ss.step_grid(model.step_weights(batch), batch)
    assert grid[0, 1] > 0.9 and grid[2, 0] > 0.9  # "#7": only in right rollouts
    assert grid[1, 0] < 0.1 and grid[1, 1] < 0.1  # "3+4=8", "#8": only in failed ones
    # "3+4=7" is right, but also opens failed rollout 3: w fits the outcome, each rollout's steps
    # weighted 1/steps: (1·1/2 + 0·1/3) / (1/2 + 1/3) = 0.6, the same in both rollouts
    assert abs(grid[0, 0] - 0.6) < 0.05 and abs(grid[3, 0] - grid[0, 0]) < 1e-6


def test_zero_spread_group_gives_zero_advantage_and_no_nan(tmp_path):
    args = common.apply_smoke(ss.Args(smoke=True, device="cpu", out=str(tmp_path)))
    args = dataclasses.replace(args, group_size=4, prompts=2)
    problem = common.ChainTask().sample(1, np.random.default_rng(0))[0]
    r = hand_completions([problem.prompt] * 8, [problem.solution] * 4 + ["#1", "1+1=2\n#2", problem.solution, "#0"])
    rewards = common.verifier_rewards([problem] * 8, common.completion_texts(TOK, r), r.truncated).view(2, 4)
    assert rewards[0].tolist() == [1.0] * 4 and len(set(rewards[1].tolist())) == 2
    for method in ss.METHODS:
        model = estimator(hidden=16, layers=1, heads=2, ffn=32) if method.startswith("ss_") else None
        advantages = ss.Credit(method, TOK, args, model, seed=0)(r, rewards, [problem, problem])
        assert torch.isfinite(advantages).all()
        assert torch.equal(advantages[:4], torch.zeros_like(advantages[:4])), method
        assert advantages[4:].abs().sum() > 0, method
        assert torch.equal(advantages[~r.completion_mask], torch.zeros_like(advantages[~r.completion_mask]))


def test_gold_process_advantages_by_hand():
    rewards, valid = ss.gold_step_rewards([None, 1], torch.tensor([2, 3]))
    assert rewards.tolist() == [[1, 1, 0], [1, 0, 0]] and valid.tolist() == [[True, True, False], [True] * 3]
    adv = ss.process_advantages(rewards, valid, group_size=2)
    r = torch.tensor([1.0, 1, 1, 0, 0])
    z = (r - r.mean()) / (r.std() + 1e-4)  # normalised over the 5 steps of the group
    assert torch.allclose(adv, torch.tensor([[z[0] + z[1], z[1], 0], [z[2] + z[3] + z[4], z[3] + z[4], z[4]]]))
    same, valid = ss.gold_step_rewards([None, None], torch.tensor([2, 2]))
    assert torch.equal(ss.process_advantages(same, valid, 2), torch.zeros(2, 2))


def test_blame_and_entropy_diagnostics():
    step_ids = torch.tensor([[0, 0, 1, 1], [0, 1, 1, -1]])
    rewards = torch.tensor([[1.0, 0.0]])
    A = ss.grpo_advantages(rewards).flatten()
    advantages = ss.broadcast_to_tokens(ss.step_advantages(A, torch.tensor([[0.9, 0.8], [0.6, 0.1]]), False), step_ids)
    stats = ss.blame_stats(advantages, A, step_ids, [None, 1], rewards)
    assert math.isclose(stats["wrong_step_blame"], 0.1, rel_tol=1e-5)  # the mistake keeps 10% of GRPO's blame
    assert 0 < stats["negative_share"] < 0.5
    uniform = ss.weight_entropy(torch.tensor([[0.3, 0.3, 0.3], [1.0, 1e-9, 0.0]]), torch.tensor([3, 2]))
    assert torch.allclose(uniform, torch.tensor([1.0, 0.0]), atol=1e-4)


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
    mixed = ~ss.zero_spread(rewards).repeat_interleave(4)
    shares = [float(advantages[b][step_ids[b] == w].mean() / A[b]) for b, w in enumerate(wrong)
              if w is not None and mixed[b] and A[b] < 0 and (step_ids[b] == w).any()]
    stats = ss.blame_stats(advantages, A, step_ids, wrong, rewards)
    assert len(shares) > 1 and math.isclose(stats["wrong_step_blame"], float(np.mean(shares)), rel_tol=1e-5)
    padding = []
    for row in step_ids:
        counts = torch.bincount(row[row >= 0])
        padding.append(1 - float(counts.sum()) / (len(counts) * int(counts.max())))
    got = ss.article_padding(step_ids)
    assert math.isclose(got["padding_share"], np.mean(padding)) and math.isclose(got["padding_share_max"], max(padding))


def test_a_step_with_no_token_of_its_own_reads_the_token_it_ends_in():
    """As if the newline token of "12+7=19\n" had held two newlines (as "\n\n" is one token in a
    byte-level BPE): line 1 is empty and ends in that token, so its row is prompt + that token."""
    r = hand_completions(["12+7\n"], ["12+7=19\n#19"])
    step_ids = torch.where(step_ids_of(r) == 1, 2, step_ids_of(r))
    end_tokens = torch.tensor([[7, 7, 11]])
    batch = ss.step_batch(r, step_ids, end_tokens, chunk=512, pad_id=TOK.pad_token_id)
    assert batch.step_index.tolist() == [0, 1, 2]
    pooled = [TOK.decode(row[p].tolist()) for row, p in zip(batch.ids, batch.pool)]
    assert pooled == ["12+7=19\n", "\n", "#19<eos>"]
    with torch.no_grad():
        grid = ss.step_grid(estimator().step_weights(batch), batch)
    assert torch.isfinite(grid).all() and (grid[0] > 0).all()


def test_process_advantages_are_06s_and_zero_spread_is_05s():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(6, 5, generator=g)
    rewarded = torch.rand(6, 5, generator=g) > 0.4
    for group_size in (2, 3):
        assert torch.equal(ss.process_advantages(rewards, rewarded, group_size),
                           prm.process_advantages(rewards, rewarded, group_size))
    groups = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.equal(ss.zero_spread(groups), lm_pins.grpo.zero_spread(groups))


# -------------------------------------------------- the RL loop restated from 05, pinned to it
def test_grpo_advantage_and_k3_are_05s():
    lm_pins.assert_advantage_and_kl_match_05(ss)


def test_policy_gradient_step_is_05s_with_one_inner_iteration():
    lm_pins.assert_step_matches_05(ss)


def test_rl_loop_is_05s(monkeypatch, tmp_path):
    def grpo_credit(completions, rewards, problems):
        return ss.grpo_advantages(rewards).flatten()[:, None] * completions.completion_mask.float()

    lm_pins.assert_loop_matches_05(ss, grpo_credit, monkeypatch, tmp_path)


@pytest.mark.parametrize("flag,value,message", [
    ("--group-size", "1", "--group-size (K) must be at least 2"),
    ("--methods", "grpo,ppo", "argument --methods: 'ppo' is not one of grpo"),
    ("--est-heads", "3", "--est-hidden must be a multiple of --est-heads"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("07_ss_grpo.py", flag, value)


def without_timing(metrics: dict) -> dict:
    """The metrics that must repeat exactly: all but the wall-clock ones, which say so in their name."""
    return {k: v for k, v in metrics.items() if "wall_clock" not in k}


def test_smoke_run_writes_results_and_figures_and_repeats_exactly(tmp_path, read_results):
    args = ss.Args(smoke=True, device="cpu", out=str(tmp_path / "out"), cache=str(tmp_path / "cache"))
    first = ss.main(args)
    data = read_results(tmp_path / "out" / "results.json")
    for name in ("learning_curves.png", "step_weights.png", "localisation.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    assert set(data["per_seed"]) == set(ss.METHODS)
    assert data["metrics"]["estimator_params"] > 0 and len(data["claims"]) >= 4
    assert {"w_right", "estimator_tokens", "credit_s"} <= set(data["runs"]["ss_grpo"][0]["credit"][0])
    timing = set(first["metrics"]) - set(without_timing(first["metrics"]))
    assert timing == {f"{m}_{k}" for m in ss.METHODS for k in ("train_wall_clock_s", "train_wall_clock_vs_grpo",
                                                               "credit_wall_clock_share")}
    again = ss.main(args)
    assert json.dumps(without_timing(again["metrics"])) == json.dumps(without_timing(first["metrics"]))
