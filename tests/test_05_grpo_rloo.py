"""05_grpo_rloo: the zero-spread study, the gradient of all-equal groups, CLI checks, smoke runs."""

import dataclasses
import importlib
import itertools
import json
import math

import numpy as np
import pytest
import torch

import common

grpo = importlib.import_module("05_grpo_rloo")


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
    ("--methods", "grpo,ppo", "--methods must be among"),
    ("--group-sizes", "1,4", "--group-sizes must be in 2..--final-samples"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("05_grpo_rloo.py", flag, value)


def test_smoke_run_writes_results_and_figures_and_repeats_exactly(tmp_path):
    first = grpo.main(smoke_args(tmp_path))
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    for name in ("learning_curves.png", "training.png", "reward_kl.png", "zero_spread.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    assert data["metrics"] == first["metrics"] and all(np.isfinite(v) for v in first["metrics"].values())
    history = data["runs"]["grpo beta=0.04"]["history"]
    assert {"reward", "kl", "entropy", "length", "zero_spread", "clip_fraction", "grad_norm"} <= set(history[0])
    again = grpo.main(smoke_args(tmp_path))  # the cold start now comes from the cache
    numbers = lambda m: {k: v for k, v in m.items() if "wall_clock" not in k}  # noqa: E731
    assert numbers(again["metrics"]) == numbers(first["metrics"])
    rerun = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]["grpo beta=0.04"]["history"]
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
