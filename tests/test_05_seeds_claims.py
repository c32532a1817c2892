"""studies/05_seeds.py: the chapter on seeds --seed, --seed + 1, ...; its claims decided on the
interval over seeds (verdicts on constructed per-seed results, both ways and inconclusive), the
clip's update and the masked gradient on a tiny LM (each against a variant that must fail), CLI
checks and a --smoke run pinned to the chapter's own run at the same seed."""

import dataclasses
import importlib
import math

import numpy as np
import pytest
import torch

import common
import lm_world
from lm_pins import tiny_model

seeds = importlib.import_module("studies.05_seeds")
grpo = seeds.grpo


# ------------------------------------------------------------------ the verdict over seeds
def test_an_effect_decides_on_its_interval_over_seeds():
    yes, no, unsure = (seeds.decided("s", "c", "q", v) for v in ([0.2, 0.21, 0.19], [-0.1, -0.12, -0.11],
                                                                  [0.1, -0.1, 0.05]))
    assert (yes["holds"], no["holds"], unsure["holds"]) == (True, False, None)
    assert yes["measured"].startswith("q, per seed +0.200, +0.210, +0.190; mean [95% interval over 3 seeds] +0.2 [")
    half = common.t_quantile(2) * np.std([0.2, 0.21, 0.19], ddof=1) / math.sqrt(3)
    assert yes["measured"].endswith(f"the smallest effect the seeds can detect {half:.3f}")
    # an effect centred on 0 could still be as large as the half-width: inconclusive, not no
    assert seeds.decided("s", "c", "q", [0.001, -0.001, 0.0005, -0.0005])["holds"] is None


def test_a_premise_not_met_makes_the_claim_inconclusive_and_says_why():
    found = seeds.decided("s", "c", "q", [0.2, 0.21, 0.19], premise="no spread")
    assert found["holds"] is None and found["measured"].endswith("(premise not met: no spread)")


def run(p1: float, pk: float, wrong: list[float] | None = None) -> dict:
    return {"final": {"pass@1": p1, "pass@16": pk},
            "history": [{"length_wrong": w, "length_right": 20.0} for w in (wrong or [22.0] * 4)]}


def seed_result(cold=(0.25, 0.75), reinforce=0.4, rloo=0.45, grpo_=(0.5, 0.8), grpo_wrong=None, dr_wrong=None,
                clip=(0.05, 0.06, 0.03), masked=0.0, completion=0.1) -> dict:
    """One seed's results, as run_seed returns them, from the numbers the claims read."""
    return {"args": grpo.Args(final_samples=16, clip_eps=0.2),
            "cold_start": {"pass@1": cold[0], "pass@16": cold[1]},
            "runs": {"reinforce": run(reinforce, 0.8), "rloo": run(rloo, 0.8), "grpo": run(*grpo_, grpo_wrong),
                     "dr_grpo": run(0.45, 0.8, dr_wrong)},
            "clip": {"clipped": clip[0], "unclipped": clip[1], "clipped_clip_fraction": clip[2],
                     "unclipped_clip_fraction": 0.0},
            "masking": {"masked": masked, "completion": [completion] * 3,
                        "positions": {"masked": 30, "completion": 10}}}


def three(*changes: dict) -> dict:
    """Three seeds (3, 4, 5), each seed_result with its changes."""
    return {3 + i: seed_result(**change) for i, change in enumerate(changes or ({}, {}, {}))}


def claims_of(per_seed: dict) -> dict:
    keys = {"GRPO learns": "GRPO on the sparse", "RLOO learns": "RLOO on the sparse", "pass@1": "GRPO on groups",
            "peaked": "peaked", "RLOO baseline": "learn it: RLOO", "GRPO baseline": "learn it: GRPO", "length": "length bias",
            "clip": "clipping", "masking": "masked positions"}
    found = {}
    for c in seeds.seed_claims(per_seed, seeds.Args(clip_passes=4)):
        (name,) = [n for n, key in keys.items() if key in c["claim"]]
        found[name] = c
    assert len(found) == len(keys)
    return found


def verdicts(per_seed: dict) -> dict:
    return {name: c["holds"] for name, c in claims_of(per_seed).items()}


def test_each_claim_on_three_seeds_where_every_effect_shows():
    jitter = [{"grpo_": (0.5 + d, 0.8), "rloo": 0.45 + d, "reinforce": 0.4 - d, "grpo_wrong": [30, 30, 25 + d, 25],
               "dr_wrong": [20, 20, 22, 22], "clip": (0.05 - d / 10, 0.06, 0.03)} for d in (0.0, 0.01, 0.02)]
    found = claims_of(three(*jitter))
    assert all(c["holds"] is True for c in found.values()), {n: c["measured"] for n, c in found.items()}
    # the GRPO gain per seed: 0.5 + d - 0.25
    assert "per seed +0.250, +0.260, +0.270" in found["GRPO learns"]["measured"]
    # pass@1 gain minus pass@16 gain: 0.25 + d - 0.05
    assert "per seed +0.200, +0.210, +0.220" in found["peaked"]["measured"]
    assert "leaves 0.250 to gain" in found["peaked"]["measured"]
    # RLOO minus REINFORCE: 0.05 + 2d; the wrong lengths of the second half only: (25 + d + 25) / 2 - 22
    assert "per seed +0.050, +0.070, +0.090" in found["RLOO baseline"]["measured"]
    assert "per seed +3.000, +3.005, +3.010" in found["length"]["measured"]
    assert "per seed +0.010, +0.011, +0.012" in found["clip"]["measured"]
    assert "the 90 masked positions 0;" in found["masking"]["measured"]


def test_the_claims_say_no_where_the_seeds_rule_the_effect_out():
    jitter = [{"grpo_": (0.2 + d, 0.9), "rloo": 0.2 + d, "reinforce": 0.4 + d, "grpo_wrong": [20, 20, 20 + d, 20],
               "dr_wrong": [25, 25, 25, 25], "clip": (0.07 + d / 10, 0.06, 0.03)} for d in (0.0, 0.01, 0.02)]
    assert verdicts(three(*jitter)) == {"GRPO learns": False, "RLOO learns": False, "pass@1": False, "peaked": False,
                                        "RLOO baseline": False, "GRPO baseline": False, "length": False,
                                        "clip": False, "masking": True}


def test_spread_seeds_leave_the_claims_inconclusive():
    spread = [{"grpo_": (0.5, 0.8), "rloo": 0.45, "reinforce": 0.4}, {"grpo_": (0.1, 0.6), "rloo": 0.2, "reinforce": 0.3},
              {"grpo_": (0.55, 0.8), "rloo": 0.45, "reinforce": 0.4}]
    found = verdicts(three(*spread))
    assert found["GRPO learns"] is found["RLOO baseline"] is found["GRPO baseline"] is None


def test_a_cold_start_that_never_succeeds_leaves_learning_unjudged():
    found = claims_of(three({}, {"cold": (0.0, 0.0), "grpo_": (0.25, 0.8)}, {}))
    assert found["GRPO learns"]["holds"] is found["RLOO learns"]["holds"] is None
    assert "premise not met: the cold start never succeeds" in found["GRPO learns"]["measured"]
    assert found["pass@1"]["holds"] is True  # that statement assumes nothing of the cold start


def test_a_clip_that_never_acted_leaves_its_claim_unjudged():
    found = claims_of(three(*[{"clip": (0.05, 0.05, 0.0)}] * 3))["clip"]
    assert found["holds"] is None and "premise not met: the ratio never left" in found["measured"]


@pytest.mark.parametrize("masked,completion,holds", [(0.0, 0.1, True), (1e-12, 0.1, False), (0.0, 0.0, None)])
def test_the_masking_claim_is_exact_on_every_seeds_batch(masked, completion, holds):
    """One seed's batch with a gradient at a masked position makes it fail; a loss with no
    gradient anywhere cannot tell."""
    assert verdicts(three({}, {"masked": masked, "completion": completion}, {}))["masking"] is holds


# --------------------------------------------------------------- the measurements on a tiny LM
def parity_reward(problems, texts, truncated):
    """A verifier stand-in whose reward depends on the problem and on the text: groups with a spread."""
    return torch.tensor([float((len(t) + p.start) % 2) for p, t in zip(problems, texts)]) * (~truncated).float()


def tiny_args(**changes) -> "grpo.Args":
    settings = dict(prompts=4, group_size=4, max_new_tokens=8, eval_problems=4, eval_samples=2, min_steps=1,
                    max_steps=1, max_value=30, max_operand=3, lr=0.05, clip_eps=0.05, beta=0.1, seed=5)
    return grpo.Args(device="cpu", **settings | changes)


def test_the_clips_update_moves_the_log_probabilities_less_and_only_the_clip_differs(monkeypatch):
    monkeypatch.setattr(grpo, "verifier_rewards", parity_reward)
    initial, tok = tiny_model(5)
    snapshot = [p.detach().clone() for p in initial.parameters()]
    found = seeds.clip_update(initial, tok, tiny_args(), 4, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(initial.parameters(), snapshot))  # each arm trains a copy
    assert found["clipped_clip_fraction"] > 0 == found["unclipped_clip_fraction"]
    assert found["unclipped"] > found["clipped"] > 0
    same = seeds.clip_update(initial, tok, tiny_args(clip_eps=math.inf), 4, "cpu")
    assert same["clipped"] == same["unclipped"]  # with ε = ∞ both arms are one computation


def test_the_masked_positions_get_exactly_zero_gradient_and_a_leaking_loss_does_not(monkeypatch):
    monkeypatch.setattr(grpo, "verifier_rewards", parity_reward)
    policy, tok = tiny_model(5)
    reference = lm_world.frozen_copy(tiny_model(4)[0])
    rl = tiny_args()
    batch, _ = seeds.first_batch(policy, tok, rl, "cpu")
    assert (~batch.completion_mask).any()  # some completions end early: padding to mask
    found = seeds.masked_gradients(policy, reference, tok, rl, "cpu")
    assert found["masked"] == 0.0 and min(found["completion"]) > 0 and len(found["completion"]) == 3
    assert found["positions"] == {"masked": batch.sequences.numel() - int(batch.completion_mask.sum()),
                                  "completion": int(batch.completion_mask.sum())}
    # a loss that averages over every cell, padding included, gives the padding positions a gradient
    monkeypatch.setattr(grpo, "masked_loss", lambda per_token, mask, norm, max_new_tokens: per_token.mean())
    assert seeds.masked_gradients(policy, reference, tok, rl, "cpu")["masked"] > 0


# ------------------------------------------------------------------ seeds, CLI and smoke
def test_the_seeds_run_from_the_seed_flag_on(monkeypatch):
    assert seeds.Args(seed=7, seeds=3).seed_list == [7, 8, 9]
    seen = []
    monkeypatch.setattr(grpo, "final_evaluation", lambda policy, tok, rl, held, device: seen.append(rl.seed) or {})
    monkeypatch.setattr(grpo, "run_method", lambda *a: {"policy": None})
    monkeypatch.setattr(seeds, "clip_update", lambda initial, tok, rl, passes, device: rl.seed)
    monkeypatch.setattr(seeds, "masked_gradients", lambda policy, reference, tok, rl, device: rl.seed)
    found = seeds.run_seed(None, None, seeds.Args(seed=7, clip_passes=3), 8, "cpu")
    assert seen == [8] and found["clip"] == found["masking"] == found["args"].seed == 8
    assert set(found["runs"]) == set(grpo.ESTIMATORS) and all(run == {} for run in found["runs"].values())


@pytest.mark.parametrize("flag,value,message", [
    ("--seeds", "1", "--seeds must be at least 2"),
    ("--clip-passes", "1", "--clip-passes must be at least 2"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("studies.05_seeds", flag, value)


def test_smoke_run_is_the_chapter_on_each_seed(tmp_path, read_results):
    """--seed 1 --smoke runs seeds 1 and 2; seed 1's metrics are the chapter's own at --seed 1."""
    cache = str(tmp_path / "cache")
    seeds.main(seeds.Args(smoke=True, seed=1, device="cpu", out=str(tmp_path / "study"), cache=cache))
    data = read_results(tmp_path / "study" / "results.json")
    assert list(data["seeds"]) == ["1", "2"] and len(data["claims"]) == 9
    assert all("interval over 2 seeds" in c["measured"] for c in data["claims"][:-1])
    again = seeds.main(seeds.Args(reanalyse=str(tmp_path / "study" / "results.json")))["claims"]  # nothing trained
    assert again == data["claims"] and read_results(tmp_path / "study" / "results.json") == data
    table = data["metrics"]["tables"]["pass_at_1"]
    assert table["header"] == ["pass@1", "seed 1", "seed 2", "mean", "spread over seeds (points)"]
    chapter = grpo.main(dataclasses.replace(grpo.Args(smoke=True, seed=1, device="cpu", out=str(tmp_path / "chapter"),
                                                      cache=cache)))["metrics"]
    assert common.json_ready({k: v for k, v in chapter.items() if k != "tables" and "wall_clock" not in k}) == {
        k.removeprefix("seed1_"): v for k, v in data["metrics"].items()
        if k.startswith("seed1_") and "wall_clock" not in k and "clip_update" not in k}
