"""05_grpo_rloo: the group advantages, k3, the clip, the loss normalisations and the step; the
zero-spread study, the gradient of all-equal groups, CLI checks, smoke runs."""

import dataclasses
import importlib
import itertools
import math

import numpy as np
import pytest
import torch

import common

grpo = importlib.import_module("05_grpo_rloo")


def tiny_model(seed=0):
    torch.manual_seed(seed)
    tok = common.make_char_tokenizer()
    return common.make_tiny_lm(tok, hidden=16, layers=2, heads=2), tok


# -------------------------------------------------------------------------------- advantages
def test_appendix_a_exactly():
    rewards = torch.tensor([[0.0, 1.0, 0.0, 1.0]])
    assert grpo.group_advantages(rewards, "dr_grpo").tolist() == [[-0.5, 0.5, -0.5, 0.5]]
    assert math.isclose(grpo.group_advantages(rewards, "rloo")[0, 1].item(), 2 / 3, rel_tol=1e-6)
    torch.testing.assert_close(grpo.group_advantages(rewards, "rloo"), torch.tensor([[-2 / 3, 2 / 3, -2 / 3, 2 / 3]]))
    # GRPO divides by the sample std (G - 1 in the denominator, as TRL): 0.5 / sqrt(1/3) = 0.866
    expected = 0.5 / math.sqrt(1 / 3)
    torch.testing.assert_close(grpo.group_advantages(rewards, "grpo"),
                               torch.tensor([[-expected, expected, -expected, expected]]), atol=1e-3, rtol=1e-3)


def test_rloo_is_a_rescaled_centred_reward_and_reinforce_uses_the_batch_mean():
    rewards = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    centred = rewards - rewards.mean(1, keepdim=True)
    torch.testing.assert_close(grpo.group_advantages(rewards, "rloo"), centred * 3 / 2)
    torch.testing.assert_close(grpo.group_advantages(rewards, "reinforce"), rewards - 0.5)


@pytest.mark.parametrize("method", grpo.ESTIMATORS)
def test_zero_spread_groups_give_zero_advantage_and_no_nan(method):
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    advantages = grpo.group_advantages(rewards, method)
    assert torch.isfinite(advantages).all()
    if method != "reinforce":  # the batch-mean baseline is not per prompt
        assert torch.all(advantages[:2] == 0)
    assert grpo.zero_spread(rewards).tolist() == [True, True, False]


@pytest.mark.parametrize("method", ["rloo", "grpo", "dr_grpo"])
def test_group_of_one_is_rejected_with_a_clear_message(method):
    with pytest.raises(ValueError, match="at least 2 completions per prompt"):
        grpo.group_advantages(torch.ones(4, 1), method)


def test_dr_grpo_comes_with_the_constant_normaliser():
    args = grpo.Args(loss_norm="token")
    assert grpo.loss_norm_of("dr_grpo", args) == "constant" and grpo.loss_norm_of("grpo", args) == "token"


# ------------------------------------------------------------------------ KL, clip, losses
def test_k3_is_nonnegative_zero_at_equal_policies_and_unbiased():
    g = torch.Generator().manual_seed(0)
    logp, ref = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    assert torch.all(grpo.kl_k3(logp, ref) >= 0)
    assert torch.all(grpo.kl_k3(logp, logp) == 0)
    p, q = torch.tensor([0.6, 0.3, 0.1]), torch.tensor([0.2, 0.5, 0.3])
    samples = torch.multinomial(p, 200_000, replacement=True, generator=g)
    estimate = grpo.kl_k3(p.log()[samples], q.log()[samples]).mean()
    assert math.isclose(estimate.item(), (p * (p / q).log()).sum().item(), rel_tol=0.02)


def test_clip_limits_the_ratio_and_zeroes_the_gradient_where_active():
    old = torch.zeros(4)
    logp = torch.log(torch.tensor([1.5, 0.5, 0.5, 1.1])).requires_grad_()
    advantages = torch.tensor([1.0, 1.0, -1.0, 1.0])
    loss, active = grpo.clipped_surrogate(logp, old, advantages, clip_eps=0.2)
    torch.testing.assert_close(loss.detach(), torch.tensor([-1.2, -0.5, 0.8, -1.1]))
    assert active.tolist() == [True, False, True, False]
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([0.0, -0.5, 0.0, -1.1]))  # d(-ρA)/dlogρ = -ρA


def test_each_loss_normalisation_on_a_hand_case():
    per_token = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    assert grpo.masked_loss(per_token, mask, "sequence", 4).item() == pytest.approx((2.0 + 4.0) / 2)
    assert grpo.masked_loss(per_token, mask, "token", 4).item() == pytest.approx(10.0 / 4)
    assert grpo.masked_loss(per_token, mask, "constant", 4).item() == pytest.approx(10.0 / 8)
    with pytest.raises(ValueError, match="loss normalisation"):
        grpo.masked_loss(per_token, mask, "median", 4)


@pytest.mark.parametrize("norm", grpo.LOSS_NORMS)
def test_a_non_finite_value_in_a_masked_cell_stays_out_of_the_loss(norm):
    per_token = torch.tensor([[1.0, 2.0, float("nan")], [4.0, float("inf"), float("-inf")]], requires_grad=True)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    loss = grpo.masked_loss(per_token, mask, norm, 3)
    clean = grpo.masked_loss(torch.tensor([[1.0, 2.0, 0.0], [4.0, 0.0, 0.0]]), mask, norm, 3)
    assert loss.item() == clean.item()
    loss.backward()
    assert torch.isfinite(per_token.grad).all() and torch.all(per_token.grad[~mask] == 0)


def test_policy_gradient_step_moves_probability_toward_positive_advantages():
    model, tok = tiny_model(1)
    ids, mask = common.encode_prompts(tok, ["1+2\n"] * 8)
    r = common.sample_completions(model, ids, mask, 10, tok.eos_token_id, tok.pad_token_id,
                                  torch.Generator().manual_seed(0))
    advantages = torch.tensor([1.0, -1.0] * 4)[:, None] * r.completion_mask
    before, _ = common.token_logprobs(model, r.sequences, r.attention_mask, r.prompt_length)
    ref = before.detach()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    stats = grpo.policy_gradient_step(model, optimizer, r, advantages, ref, clip_eps=0.2, beta=0.1,
                                      inner_iters=3, loss_norm="sequence", max_new_tokens=10, max_grad_norm=100.0)
    after, _ = common.token_logprobs(model, r.sequences, r.attention_mask, r.prompt_length)
    change = ((after - before) * r.completion_mask).sum(1).detach()
    assert change[0::2].mean() > 0 > change[1::2].mean()
    assert stats["kl"] == 0.0 and stats["grad_norm"] > 0 and 0 <= stats["clip_fraction"] <= 1
    assert set(stats) == {"loss", "kl", "entropy", "clip_fraction", "grad_norm"}


def test_the_step_on_an_all_padding_batch_reports_zeros_not_nan():
    model, tok = tiny_model(1)
    ids, mask = common.encode_prompts(tok, ["1+2\n"] * 2)
    r = common.sample_completions(model, ids, mask, 4, tok.eos_token_id, tok.pad_token_id,
                                  torch.Generator().manual_seed(0))
    r.completion_mask[:] = False
    before = [p.clone() for p in model.parameters()]
    stats = grpo.policy_gradient_step(model, torch.optim.SGD(model.parameters(), lr=0.1), r,
                                      torch.ones(r.completion_mask.shape), torch.zeros(r.completion_mask.shape),
                                      clip_eps=0.2, beta=0.1, inner_iters=1, loss_norm="sequence", max_new_tokens=4,
                                      max_grad_norm=1.0)
    assert all(math.isfinite(v) for v in stats.values()) and stats["kl"] == 0 and stats["entropy"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


# --------------------------------------------------------------------------- zero-spread study
@pytest.mark.parametrize("n,c,G", [(8, 3, 2), (8, 0, 4), (8, 8, 8), (6, 2, 3)])
def test_zero_spread_probability_matches_enumeration(n, c, G):
    outcomes = [1] * c + [0] * (n - c)
    groups = list(itertools.combinations(outcomes, G))
    expected = np.mean([len(set(g)) == 1 for g in groups])
    assert math.isclose(grpo.zero_spread_probability(n, c, G), expected)


def test_zero_spread_table_by_difficulty():
    table = grpo.zero_spread_table([0, 4, 2, 4], [1, 1, 2, 2], samples=4, group_sizes=[2, 4])
    assert table[1] == {"pass@1": 0.5, 2: 1.0, 4: 1.0}  # all wrong and all right: never a signal
    assert table[2]["pass@1"] == 0.75 and table[2][4] == 0.5 and math.isclose(table[2][2], (2 / 6 + 1) / 2)  # C(2,2)+C(2,2) of C(4,2)


def smoke_args(tmp_path, **changes):
    return dataclasses.replace(grpo.Args(smoke=True, device="cpu", out=str(tmp_path / "out"),
                                         cache=str(tmp_path / "cache")), **changes)


def test_zero_spread_groups_give_no_policy_gradient(tmp_path):
    args = common.apply_smoke(smoke_args(tmp_path, prompts=4, group_size=4))
    model, tok = common.make_tiny_lm(common.make_char_tokenizer(), 16, 1, 2), common.make_char_tokenizer()
    norms = grpo.gradient_by_spread(model, common.frozen_copy(model), tok, args, "cpu")
    # a random model never answers right: every group is all-wrong, so the policy gradient is 0
    assert norms["zero-spread share"] == 1.0 and norms["zero-spread pg"] == 0.0
    assert norms["zero-spread kl"] == 0.0  # the policy still equals its reference


@pytest.mark.parametrize("flag,value,message", [
    ("--group-size", "1", "--group-size must be at least 2"),
    ("--methods", "grpo,ppo", "argument --methods: 'ppo' is not one of reinforce"),
    ("--group-sizes", "1,4", "--group-sizes must be in 2..--final-samples"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("05_grpo_rloo.py", flag, value)


def without_timing(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if "wall_clock" not in k}


def test_smoke_run_writes_results_and_figures_and_repeats_exactly(tmp_path, read_results):
    first = grpo.main(smoke_args(tmp_path))
    data = read_results(tmp_path / "out" / "results.json")
    for name in ("learning_curves.png", "training.png", "reward_kl.png", "zero_spread.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    assert data["metrics"] == first["metrics"] and all(np.isfinite(v) for v in first["metrics"].values())
    history = data["runs"]["grpo beta=0.04"]["history"]
    assert {"reward", "kl", "entropy", "length", "zero_spread", "clip_fraction", "grad_norm"} <= set(history[0])
    again = grpo.main(smoke_args(tmp_path))  # the cold start now comes from the cache
    assert without_timing(again["metrics"]) == without_timing(first["metrics"])
    rerun = read_results(tmp_path / "out" / "results.json")["runs"]["grpo beta=0.04"]["history"]
    timing = ("generate_s", "update_s")
    assert [{k: v for k, v in h.items() if k not in timing} for h in rerun] == \
        [{k: v for k, v in h.items() if k not in timing} for h in history]


def test_model_flag_loads_a_saved_causal_lm(tmp_path):
    torch.manual_seed(0)
    tok = common.make_char_tokenizer()
    common.make_tiny_lm(tok, 16, 1, 2).save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    result = grpo.main(smoke_args(tmp_path, model=str(tmp_path / "tiny"), methods="rloo", betas=""))
    assert "rloo_pass@1" in result["metrics"]


def test_bench_reports_throughput(tmp_path):
    result = grpo.main(smoke_args(tmp_path, bench=True))
    assert result["metrics"]["completions_per_s"] > 0 and 0 < result["metrics"]["generation_share"] < 1
