"""studies/07_estimator.py: the arms' settings (K with the completions held fixed), the frozen estimator, the update
with several passes (one pass is the chapter's; the clip pinned to 05's), each claim's verdict both ways and its
premise, CLI checks and a smoke run."""

import copy
import importlib
import math

import numpy as np
import pytest
import torch
from test_07_ss_grpo import PROBLEMS, REWARDS, TEXTS, TOK, credit_args, estimator

import common
import lm_world
from lm_pins import hand_completions, tiny_model

ss = importlib.import_module("07_ss_grpo")
grpo = importlib.import_module("05_grpo_rloo")
lab = importlib.import_module("studies.07_estimator")


def test_every_k_gets_the_same_completions_per_update_and_per_estimator_minibatch():
    study = lab.Args()
    shapes = {arm: study.chapter_args(arm, seed=5) for arm in lab.ARMS}
    assert [(a.group_size, a.prompts, a.est_groups) for a in shapes.values()] == [
        (2, 32, 16), (4, 16, 8), (8, 8, 4), (8, 8, 4), (8, 8, 4), (8, 8, 4)]
    # the frozen arm refits at updates 0, 5, 10, 15 (of 20) against 0, 5, ..., 35 (of 40): as many Adam steps in all
    assert [a.est_iters for a in shapes.values()] == [10, 10, 10, 20, 10, 10]
    assert all(a.seed == 5 and a.rl_steps == study.rl_steps and a.retrain_every == study.retrain_every
               for a in shapes.values())


def test_the_clip_is_05s():
    torch.manual_seed(0)
    logp, old, advantages = torch.randn(4, 6) * 0.3, torch.randn(4, 6) * 0.3, torch.randn(4, 6)
    for eps in (0.2, math.inf):
        ours, theirs = lab.clipped_surrogate(logp, old, advantages, eps), grpo.clipped_surrogate(logp, old, advantages, eps)
        assert torch.equal(ours[0], theirs[0]) and torch.equal(ours[1], theirs[1])
    # by hand: ρ = 1.5 and 0.5, A = ±1, ε = 0.2
    logp, old = torch.log(torch.tensor([1.5, 0.5, 0.5, 1.5])), torch.zeros(4)
    loss, active = lab.clipped_surrogate(logp, old, torch.tensor([1.0, 1.0, -1.0, -1.0]), 0.2)
    assert torch.allclose(loss, torch.tensor([-1.2, -0.5, 0.8, 1.5])) and active.tolist() == [True, False, True, False]
    assert not lab.clipped_surrogate(logp, old, torch.tensor([1.0, 1.0, -1.0, -1.0]), math.inf)[1].any()


def batch_and_advantages():
    completions = hand_completions(["12+7*3\n", "5+1\n"], ["12+7=19\n19*3=57\n#57", "#7"])
    advantages = torch.where(completions.completion_mask, torch.tensor([[0.8], [-0.8]]), 0.0)
    return completions, advantages


def update(step, seed: int = 0, lr: float = 1e-2):
    """A tiny policy after `step` on a hand batch (the policy itself as the KL reference), and the stats."""
    policy, _ = tiny_model(seed)
    completions, advantages = batch_and_advantages()
    reference = lm_world.frozen_copy(policy)
    with torch.no_grad():
        ref_logp, _ = lm_world.token_logprobs(reference, completions.sequences, completions.attention_mask,
                                             completions.prompt_length)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    stats = step(policy, optimizer, completions, advantages, ref_logp, 0.04, 1.0)
    return policy, stats


def test_one_pass_is_the_chapters_update():
    chapter, chapter_stats = update(ss.policy_gradient_step)
    ours, stats = update(lab.Passes(1, 0.2, 0.2))
    for a, b in zip(chapter.parameters(), ours.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    assert all(stats[k] == pytest.approx(chapter_stats[k], rel=1e-5) for k in ("kl", "entropy", "grad_norm"))
    assert stats["clip_fraction"] == 0  # on the first pass ρ = 1


def test_passes_log_how_far_the_update_moved_the_tokens():
    before, _ = tiny_model(0)
    completions, _ = batch_and_advantages()
    mask = completions.completion_mask
    for clip_eps in (0.2, math.inf):
        policy, stats = update(lab.Passes(3, clip_eps, 0.2), lr=5e-2)
        with torch.no_grad():
            old, new = (lm_world.token_logprobs(m, completions.sequences, completions.attention_mask,
                                                completions.prompt_length)[0][mask] for m in (before, policy))
        assert stats["log_ratio"] == pytest.approx(float((new - old).abs().mean()), rel=1e-5)
        assert stats["outside"] == pytest.approx(float(((new - old).exp() - 1).abs().gt(0.2).float().mean()))
        assert (stats["clip_fraction"] > 0) == math.isfinite(clip_eps)  # a large step: the clip acts, unless ε = ∞


def test_the_frozen_estimator_refits_only_in_its_first_updates(tmp_path):
    args = credit_args(tmp_path, retrain_every=1)
    torch.manual_seed(0)
    base = ss.Credit("ss_grpo", TOK, args, estimator(hidden=16, layers=1, heads=2, ffn=32), seed=0)
    frozen = lab.FrozenCredit(base, freeze_after=2)
    completions = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    for update_index in range(4):
        weights = copy.deepcopy(frozen.estimator.state_dict())
        frozen(completions, REWARDS, PROBLEMS)
        moved = any(not torch.equal(weights[k], v) for k, v in frozen.estimator.state_dict().items())
        assert moved == (update_index < 2) == ("estimator_loss" in frozen.log[-1])


NUMBERS = {arm: {"localisation_auroc": np.array([0.6, 0.6, 0.6]), "auroc_outcome": np.array([0.6, 0.6, 0.6]),
                 "auroc_step_right_in_failed": np.array([0.5, 0.5, 0.5]), "pass@1": np.array([0.4, 0.4, 0.4]),
                 "regression": np.zeros(3), "estimator_steps": np.array([80.0, 80.0, 80.0])} for arm in lab.ARMS}
MOVE = {"log_ratio": np.array([0.01, 0.01, 0.01]), "outside": np.zeros(3), "clip_fraction": np.array([0.01, 0.0, 0.02])}


def numbers_with(changes: dict) -> dict:
    numbers = {arm: dict(n) | (MOVE if arm in ("clip", "no_clip") else {}) for arm, n in NUMBERS.items()}
    for (arm, key), values in changes.items():
        numbers[arm][key] = np.array(values)
    return numbers


UP, DOWN = [0.05, 0.06, 0.07], [-0.05, -0.06, -0.07]


@pytest.mark.parametrize("index,arm,key,base,holds", [
    (0, "k4", "auroc_outcome", 0.6, True), (0, "k2", "auroc_outcome", 0.6, False),
    (1, "k8", "auroc_outcome", 0.6, True), (1, "frozen", "auroc_outcome", 0.6, False),
    (2, "no_clip", "log_ratio", 0.01, True), (2, "clip", "log_ratio", 0.01, False),
    (3, "no_clip", "regression", 0.0, True), (3, "clip", "regression", 0.0, False),
])
def test_each_claim_says_yes_and_no_with_its_own_numbers(index, arm, key, base, holds):
    args = lab.Args()
    claims = lab.check_claims(numbers_with({(arm, key): np.add(base, UP)}), args)
    assert claims[index]["holds"] is holds
    assert lab.check_claims(numbers_with({}), args)[index]["holds"] is None  # no effect: inconclusive
    assert [c["holds"] for c in lab.check_claims(numbers_with({(arm, key): np.add(base, DOWN)}), args)][index] is (
        not holds)


@pytest.mark.parametrize("k4,k2", [([0.4, 0.45, 0.42], [0.3, 0.31, 0.32]), ([0.4, 0.6, 0.5], [0.3, 0.5, 0.4])])
def test_the_group_size_claim_lacks_its_premise_where_k4_does_not_beat_chance(k4, k2):
    numbers = numbers_with({("k4", "auroc_outcome"): k4, ("k2", "auroc_outcome"): k2})
    found = lab.check_claims(numbers, lab.Args())[0]
    assert found["holds"] is None and "premise not met" in found["measured"]


def test_the_clip_claims_lack_their_premise_where_the_clip_never_acted():
    numbers = numbers_with({("clip", "clip_fraction"): [0.0, 0.0, 0.0], ("no_clip", "log_ratio"): np.add(0.01, UP)})
    for found in lab.check_claims(numbers, lab.Args())[2:]:
        assert found["holds"] is None and "premise not met" in found["measured"]


@pytest.mark.parametrize("flag,value,message", [
    ("--group-size", "6", "--group-size must be a multiple of 4 above 4"),
    ("--freeze-after", "40", "--freeze-after must be below --rl-steps"),
    ("--freeze-after", "15", "--est-iters x the refits in --rl-steps must be a multiple of the refits in"),
    ("--passes", "1", "--passes must be at least 2"),
    ("--repeats", "0", "--repeats must be positive"),
    ("--clip-eps", "0", "--clip-eps must be positive"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("studies.07_estimator", flag, value)


def test_smoke_run_writes_results_figure_and_table(tmp_path, read_results):
    args = lab.Args(smoke=True, device="cpu", out=str(tmp_path / "out"), cache=str(tmp_path / "cache"))
    found = lab.main(args)
    data = read_results(tmp_path / "out" / "results.json")
    assert (tmp_path / "out" / "estimator.png").stat().st_size > 1000
    assert [row[:3] for row in data["metrics"]["tables"]["arms"]["rows"]] == [
        ["K = 2", 2, 4], ["K = 4", 4, 2], ["K = 8", 8, 1], ["frozen", 8, 1], ["clip", 8, 1], ["no clip", 8, 1]]
    assert len(found["claims"]) == 4 and all(set(c) == {"source", "claim", "measured", "holds"} for c in found["claims"])
    smoke = common.apply_smoke(args)
    runs = data["runs"]
    assert all(len(r) == smoke.repeats for r in runs.values())
    assert runs["k8"][0]["estimator_steps"] == smoke.rl_steps * smoke.est_iters  # refitted every update
    assert runs["frozen"][0]["estimator_steps"] == runs["k8"][0]["estimator_steps"]  # as many steps, in its first
    assert sum("estimator_loss" in e for e in runs["frozen"][0]["credit"]) == smoke.freeze_after  # updates only
    assert all("log_ratio" in h for arm in ("clip", "no_clip") for h in runs[arm][0]["history"])
    assert data["metrics"]["k2_seed0_localisation_auroc"] == runs["k2"][0]["probe"]["localisation_auroc"]
    again = lab.main(lab.Args(reanalyse=str(tmp_path / "out" / "results.json")))["claims"]  # nothing trained
    assert again == data["claims"]


def test_an_arm_repeats_exactly(tmp_path):
    args = common.apply_smoke(lab.Args(smoke=True, device="cpu", out=str(tmp_path / "out"),
                                       cache=str(tmp_path / "cache")))
    args, device, _, initial, tokenizer, _ = lm_world.start_lm_run(args)
    held_out = args.task.held_out(args.eval_problems)
    first, again = (lab.run_arm(initial, tokenizer, args, "clip", 0, held_out, device) for _ in range(2))
    strip = ("wall_clock_s", "generate_s", "update_s", "credit_s")
    for run in (first, again):
        run.pop("wall_clock_s")
        for entry in run["history"] + run["credit"]:
            for key in strip:
                entry.pop(key, None)
    assert first == again
