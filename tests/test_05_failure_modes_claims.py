"""Tests of studies/05_failure_modes.py: its loop's additions (stale rollouts, the ratio against
the policy that sampled, reference resets), its measures (sample quality, worst drop, the
training reward's rise, unsolved problems, rejection sampling, the weak start's second draws),
the claims' verdicts on constructed seeds (each quantity in its statement's direction, decided on
its 95% interval over seeds), CLI checks and a --smoke run."""

import copy
import importlib
import itertools
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import common
import lm_world
from lm_pins import tiny_model

ROOT = Path(__file__).resolve().parents[1]
grpo = importlib.import_module("05_grpo_rloo")
fm = importlib.import_module("studies.05_failure_modes")


def loop_args(tmp_path, **changes):
    """The chapter's settings on a small task space (one step, values up to 30)."""
    settings = dict(rl_steps=3, prompts=4, group_size=4, eval_every=2, max_new_tokens=8, eval_problems=4,
                    eval_samples=2, min_steps=1, max_steps=1, max_value=30, max_operand=3, clip_eps=0.3, beta=0.07,
                    inner_iters=2, max_grad_norm=0.9, warmup=3, lr=0.01, loss_norm="token", seed=5)
    return grpo.Args(device="cpu", out=str(tmp_path / "out"), **settings | changes)


# ------------------------------------------------------------------ the loop: stale rollouts, resets
def test_the_stale_step_without_behaviour_logprobs_is_the_chapters_step():
    model, tok = tiny_model(3)
    reference = lm_world.frozen_copy(tiny_model(4)[0])
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n", "45*2\n", "7\n", "9-1\n"])
    completions = lm_world.sample_completions(model, ids, mask, 10, tok.eos_token_id, tok.pad_token_id,
                                              torch.Generator().manual_seed(0))
    advantages = torch.randn(completions.completion_mask.shape, generator=torch.Generator().manual_seed(1))
    ref_logp = grpo.reference_logprobs(reference, completions)
    settings = grpo.Args(clip_eps=0.2, beta=0.3, inner_iters=3, loss_norm="sequence", max_new_tokens=10,
                         max_grad_norm=0.5)
    stats, policies = [], []
    for step in (grpo.policy_gradient_step, lambda *a: fm.stale_step(*a, behaviour_logp=None)):
        policy = copy.deepcopy(model)
        stats.append(step(policy, torch.optim.AdamW(policy.parameters(), lr=1e-2), completions, advantages, ref_logp,
                          settings))
        policies.append(policy)
    assert stats[0] == stats[1] and stats[0]["clip_fraction"] > 0
    for a, b in zip(policies[0].parameters(), policies[1].parameters()):
        assert torch.equal(a, b)


def test_a_stale_ratio_is_taken_against_the_policy_that_sampled():
    """With the behaviour policy's log-probs, ρ = π_θ / π_behaviour from the first iteration: a
    policy that already doubled a token's probability is clipped there (A > 0), and that token
    gives no gradient; without them the first iteration's ratio is 1 and nothing is clipped."""
    model, tok = tiny_model(1)
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n"] * 4)
    r = lm_world.sample_completions(model, ids, mask, 6, tok.eos_token_id, tok.pad_token_id,
                                    torch.Generator().manual_seed(0))
    advantages = r.completion_mask.float()
    with torch.no_grad():
        now, _ = lm_world.token_logprobs(model, r.sequences, r.attention_mask, r.prompt_length)
    settings = grpo.Args(clip_eps=0.2, beta=0.0, inner_iters=1, loss_norm="token", max_new_tokens=6,
                         max_grad_norm=100.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    doubled = fm.stale_step(model, optimizer, r, advantages, now, settings, behaviour_logp=now - math.log(2))
    assert doubled["clip_fraction"] == 1.0 and doubled["grad_norm"] == 0.0
    fresh = fm.stale_step(model, optimizer, r, advantages, now, settings, behaviour_logp=None)
    assert fresh["clip_fraction"] == 0.0 and fresh["grad_norm"] > 0


def test_the_rollout_worker_runs_the_weights_of_lag_updates_ago():
    policy, _ = tiny_model(2)
    assert fm.RolloutWorker(policy, 0).model() is policy
    worker = fm.RolloutWorker(policy, 2)
    seen = []
    for update in range(4):
        actor = worker.model()
        seen.append((worker.age(), float(next(actor.parameters()).detach().flatten()[0])))
        with torch.no_grad():
            next(policy.parameters()).flatten()[0] = update + 1.0  # the optimiser's step
        worker.updated()
    first = seen[0][1]
    assert seen == [(0, first), (1, first), (2, first), (2, 1.0)]
    assert worker.model() is not policy


@pytest.mark.parametrize("ratio", ["importance", "ignore"])
def test_stale_training_samples_with_old_weights_and_hands_their_logprobs_to_the_ratio(monkeypatch, tmp_path, ratio):
    policy, tok = tiny_model(6)
    sampled_with, behaviours = [], []
    real_sample_groups, real_step = grpo.sample_groups, fm.stale_step

    def spy_sample_groups(model, *rest):
        sampled_with.append(next(model.parameters()).detach().clone())
        return real_sample_groups(model, *rest)

    def spy_step(policy, optimizer, completions, advantages, *rest):
        behaviours.append((rest[-1], completions.logprobs))
        return real_step(policy, optimizer, completions, advantages, *rest)

    monkeypatch.setattr(grpo, "sample_groups", spy_sample_groups)
    monkeypatch.setattr(fm, "stale_step", spy_step)
    monkeypatch.setattr(grpo, "verifier_rewards", lambda problems, texts, truncated: torch.arange(len(texts)) % 2.0)
    rl = loop_args(tmp_path, rl_steps=4, lr=0.05, warmup=1, inner_iters=1)
    history = fm.train(policy, lm_world.frozen_copy(policy), tok, rl, rl.task.held_out(4), "cpu",
                       fm.Setting(lag=2, ratio=ratio))["history"]
    assert [h["policy_age"] for h in history] == [0, 1, 2, 2]
    assert torch.equal(sampled_with[0], sampled_with[1]) and torch.equal(sampled_with[1], sampled_with[2])
    assert not torch.equal(sampled_with[3], sampled_with[0])  # the policy after the first update, two late
    for given, logprobs in behaviours:
        assert (given is logprobs) if ratio == "importance" else given is None
    assert history[0]["policy_drift"] < 1e-5 < history[2]["policy_drift"]


def test_the_settings_estimator_reaches_the_advantage_and_grpo_is_the_default(monkeypatch, tmp_path):
    seen = []
    real = grpo.token_advantages
    monkeypatch.setattr(grpo, "token_advantages", lambda rewards, method, mask: seen.append(method) or real(
        rewards, method, mask))
    policy, tok = tiny_model(6)
    rl = loop_args(tmp_path, rl_steps=2, inner_iters=1)
    for setting in (fm.Setting(method="rloo"), fm.Setting()):
        fm.train(policy, lm_world.frozen_copy(policy), tok, rl, rl.task.held_out(2), "cpu", setting)
    assert seen == ["rloo", "rloo", "grpo", "grpo"]
    assert fm.Setting(method="reinforce").label == "REINFORCE (batch mean)" and fm.Setting().label == "GRPO"


def test_a_reference_reset_re_anchors_the_kl_to_the_current_policy(monkeypatch, tmp_path):
    monkeypatch.setattr(grpo, "verifier_rewards", lambda problems, texts, truncated: torch.arange(len(texts)) % 2.0)
    kls = {}
    for reset in (0, 1):
        policy, tok = tiny_model(6)
        rl = loop_args(tmp_path, rl_steps=3, inner_iters=1, lr=0.05, warmup=1)
        history = fm.train(policy, lm_world.frozen_copy(policy), tok, rl, rl.task.held_out(4), "cpu",
                           fm.Setting(ref_reset=reset))["history"]
        kls[reset] = [h["kl"] for h in history]
    assert kls[0][0] == kls[1][0] == 0.0  # the first batch: the policy is its reference either way
    assert kls[0][2] > 1e-6 and kls[1][1] == kls[1][2] == 0.0  # reset before each batch: no drift to measure


def test_the_sweep_reuses_the_default_beta_run_and_trains_each_other_beta_once(monkeypatch, tmp_path):
    calls = []

    def fake_run_grpo(initial, tokenizer, rl, held_out, device, setting=None, reference=None):
        calls.append(rl.beta)
        return {"method": "grpo", "beta": rl.beta}

    monkeypatch.setattr(fm, "run_grpo", fake_run_grpo)
    on_policy = {"method": "grpo", "beta": 0.04}
    sweep = fm.beta_sweep(None, None, loop_args(tmp_path, beta=0.04), fm.Args(betas="0,0.04,0.5"), [], "cpu",
                          on_policy)
    assert sweep == {0.04: on_policy, 0.0: {"method": "grpo", "beta": 0.0}, 0.5: {"method": "grpo", "beta": 0.5}}
    assert calls == [0.0, 0.5]  # the default β is not trained twice


# ------------------------------------------------------------------ the measures
def test_the_skew_study_serves_each_problem_three_ways(monkeypatch):
    seen = {}

    def fake_final(policy, tokenizer, args, problems, device):
        seen[len(seen)] = [p.prompt for p in problems]
        return {"pass@1": 0.5 / len(seen), "well_formed": 1 - 0.1 * len(seen), "length": 9.0}

    monkeypatch.setattr(grpo, "final_evaluation", fake_final)
    problems = [lm_world.ChainProblem(12, (("+", 7), ("*", 3))), lm_world.ChainProblem(5, (("-", 2),))]
    skew = fm.skew_study(None, None, grpo.Args(), problems, "cpu")
    assert seen == {0: ["12+7*3\n", "5-2\n"], 1: ["Q: 12+7*3\nA:\n", "Q: 5-2\nA:\n"], 2: ["12+7\n", "5\n"]}
    assert skew == {"as trained": {"pass@1": 0.5, "well_formed": 0.9},
                    "another template": {"pass@1": 0.25, "well_formed": 0.8},
                    "last operation missing": {"pass@1": 0.5 / 3, "well_formed": 0.7}}


def test_sample_quality_counts_distinct_well_formed_and_step_writing_samples(monkeypatch):
    texts = ["#5", "#5", "1+4=5\n#5", "junk", "#7", "#8", "#9", "#9"]
    monkeypatch.setattr(lm_world, "sample", lambda *a, **k: (None, texts))
    args = grpo.Args(final_samples=4)
    quality = fm.sample_quality(None, None, args, [lm_world.ChainProblem(1, (("+", 4),))] * 2, "cpu")
    assert quality == {"distinct": (3 / 4 + 3 / 4) / 2, "well_formed": 7 / 8, "writes_steps": 1 / 8}


def test_worst_regression_is_the_largest_drop_below_the_best_so_far():
    run = {"evals": [{"pass@1": p} for p in (0.2, 0.5, 0.3, 0.6, 0.55)]}
    assert fm.worst_regression(run) == pytest.approx(0.2)
    assert fm.worst_regression({"evals": [{"pass@1": p} for p in (0.1, 0.2)]}) == 0.0


def test_the_reward_rise_is_the_last_tenth_of_the_updates_minus_the_first():
    rewards = [0.1, 0.3] + [0.5] * 16 + [0.6, 0.8]  # 20 updates: tenths of two
    assert fm.reward_rise({"history": [{"reward": r} for r in rewards]}) == pytest.approx(0.7 - 0.2)
    assert fm.reward_rise({"history": [{"reward": 0.25}]}) == 0.0  # one update: its own first and last tenth


def test_the_weak_starts_first_draws_are_the_final_evaluation_and_its_second_are_fresh(tmp_path):
    policy, tok = tiny_model(6)
    rl = loop_args(tmp_path, max_new_tokens=6, final_samples=8)
    held_out = rl.task.held_out(6)
    first, again = fm.two_draws(policy, tok, rl, held_out, "cpu")
    assert first == grpo.final_evaluation(policy, tok, rl, held_out, "cpu")
    assert again["length"] != first["length"] and set(again) == set(first)


def fake_sampler(texts_for):
    def fake_sample(model, tokenizer, prompts, *rest):
        return None, [texts_for(i) for i in range(len(prompts))]
    return fake_sample


@pytest.mark.parametrize("right_every,kept_share", [(2, 1.0), (0, 0.0)])
def test_rejection_sampling_keeps_the_verified_completions_and_fine_tunes_only_on_them(
        monkeypatch, tmp_path, right_every, kept_share):
    policy, tok = tiny_model(6)
    weights = [p.detach().clone() for p in policy.parameters()]
    monkeypatch.setattr(lm_world, "sample", fake_sampler(lambda i: "right" if right_every and i % right_every == 0
                                                         else "wrong"))
    monkeypatch.setattr(lm_world, "verify", lambda problem, text: text == "right")
    args = fm.Args(device="cpu", out=str(tmp_path / "out"), min_steps=1, max_steps=1, max_value=30, max_operand=3,
                   max_new_tokens=8, seed=5, rft_rounds=2, rft_n=4, rft_sft_steps=2, rft_lr=0.01, sft_batch=4)
    rounds = fm.rejection_sampling_sft(policy, tok, args, 40, "cpu")
    problems = 40 // (2 * 4)
    # one kept pair per problem (its two right samples are the same text); the buffer grows by round
    kept = int(problems * kept_share)
    assert rounds == [{"sampled": problems * 4, "kept": kept, "buffer": kept * (r + 1), "solved": kept_share}
                      for r in range(2)]
    moved = any(not torch.equal(w, p) for w, p in zip(weights, policy.parameters()))
    assert moved == bool(right_every)


def test_unsolved_counts_the_problems_with_no_right_sample_and_which_stay_so():
    before, after = {"correct": [0, 0, 3, 0, 1]}, {"correct": [0, 2, 0, 0, 1]}
    assert fm.unsolved(before) == pytest.approx(0.6) and fm.unsolved(after) == pytest.approx(0.6)
    assert fm.still_unsolved(before, after) == pytest.approx(2 / 3)
    assert math.isnan(fm.still_unsolved({"correct": [1]}, {"correct": [0]}))


def naive_blame(rewards: list[list[float]], right: list[list[bool]]) -> dict:
    """`fm.blame_shares` by hand: a completion is blamed where its reward is below its group's mean."""
    rows = [(r < sum(group) / len(group), r, ok) for group, oks in zip(rewards, right) for r, ok in zip(group, oks)]
    right_rows = [blamed for blamed, _, ok in rows if ok]
    wrong_rows = [blamed for blamed, r, ok in rows if not ok and r == 0]
    blamed_rows = [ok for blamed, _, ok in rows if blamed]

    def mean(xs):
        return sum(xs) / len(xs) if xs else math.nan
    return {"reward": mean([r for _, r, _ in rows]), "right": mean([ok for _, _, ok in rows]),
            "blamed_right": mean(right_rows), "blamed_wrong": mean(wrong_rows), "blame_on_right": mean(blamed_rows),
            "zero_spread": mean([len(set(group)) == 1 for group in rewards])}


@pytest.mark.parametrize("rewards,right", [
    ([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 1]], [[0, 1, 1, 0], [1, 0, 1, 0], [1, 0, 1, 0]]),
    ([[0, 0, 0], [1, 1, 1]], [[0, 0, 0], [1, 1, 1]]),  # no spread: nobody blamed, no wrong completion failed
    ([[1, 0], [0, 1]], [[0, 0], [0, 0]]),  # nothing right by its prompt: the blame on it has nothing to count
])
def test_the_blame_shares_are_a_naive_loops_over_the_groups(rewards, right):
    found = fm.blame_shares(torch.tensor(rewards, dtype=torch.float), torch.tensor(right, dtype=torch.bool))
    expected = naive_blame(rewards, right)
    assert found.keys() == expected.keys()
    for key, value in expected.items():
        assert (math.isnan(found[key]) and math.isnan(value)) or found[key] == pytest.approx(value), key


def test_the_blame_study_shows_the_cut_prompt_and_scores_the_whole_chain(monkeypatch):
    """Each group: its first completion answers the whole chain, the others the chain without its
    last operation. With the whole prompt the blame lands on the wrong ones; with the cut prompt,
    on the ones right by what it shows."""
    problems = [lm_world.ChainProblem(12, (("+", 7), ("*", 3))), lm_world.ChainProblem(5, (("-", 2),))]
    seen, texts = [], []

    def fake_sample_groups(policy, tokenizer, served, rl, generator, device):
        seen.append([p.prompt for p in served])
        texts[:] = [f"#{p.answer if i == 0 else lm_world.ChainProblem(p.start, p.ops[:-1]).answer}"
                    for p in served for i in range(rl.group_size)]
        repeated = [p for p in served for _ in range(rl.group_size)]
        rewards = torch.tensor([lm_world.verify(p, t) for p, t in zip(repeated, texts)])
        return SimpleNamespace(truncated=torch.zeros(len(texts), dtype=torch.bool)), rewards.view(len(served), -1)

    monkeypatch.setattr(grpo, "sample_groups", fake_sample_groups)
    monkeypatch.setattr(lm_world, "completion_texts", lambda tokenizer, completions: texts)
    study = fm.blame_study(None, None, grpo.Args(group_size=3), problems, "cpu")
    assert seen == [["12+7*3\n", "5-2\n"], ["12+7\n", "5\n"]]
    assert study["whole prompt"] == pytest.approx({"reward": 1 / 3, "right": 1 / 3, "blamed_right": 0.0,
                                                   "blamed_wrong": 1.0, "blame_on_right": 0.0, "zero_spread": 0.0})
    cut = study["last operation missing"]
    assert [cut[k] for k in ("reward", "right", "blamed_right", "blame_on_right")] == pytest.approx([1 / 3, 2 / 3, 1, 1])
    assert math.isnan(cut["blamed_wrong"])  # every completion wrong by the cut prompt was the verifier's right one


def test_the_curriculum_draws_only_the_easiest_problems_for_its_first_updates(monkeypatch, tmp_path):
    drawn = []
    real_sample_groups = grpo.sample_groups

    def spy_sample_groups(model, tokenizer, problems, *rest):
        drawn.append([len(p.ops) for p in problems])
        return real_sample_groups(model, tokenizer, problems, *rest)

    monkeypatch.setattr(grpo, "sample_groups", spy_sample_groups)
    policy, tok = tiny_model(6)
    rl = loop_args(tmp_path, rl_steps=4, max_steps=3, inner_iters=1)
    history = fm.train(policy, lm_world.frozen_copy(policy), tok, rl, rl.task.held_out(4), "cpu",
                       fm.Setting(easy_updates=2))["history"]
    assert len(history) == 4 and drawn[0] == drawn[1] == [1] * rl.prompts
    assert max(drawn[2] + drawn[3]) > 1  # then the normal mix of 1 to 3 operations


def test_the_curriculum_arm_spends_the_same_completions_from_its_own_weak_start(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(lm_world, "cold_start_policy", lambda config, *rest, **options: (config.sft_steps, None, {}))
    monkeypatch.setattr(grpo, "final_evaluation", lambda policy, *rest: {"start": policy})
    monkeypatch.setattr(fm, "run_grpo", lambda initial, tokenizer, rl, held_out, device, *setting:
                        calls.append((initial, rl, *setting)) or {})
    rl = loop_args(tmp_path, rl_steps=10)
    args = fm.Args(sparse_sft_steps=5, curriculum_sft_steps=7, curriculum_share=0.3, mixed_rounds=2)
    study = fm.curriculum_study(None, rl, args, [], "cpu")
    assert list(study) == ["weak cold start", "GRPO", "easy first, then GRPO", fm.ADAPTIVE, fm.MIXED]
    assert study["weak cold start"] == {"final": {"start": 7}}
    assert calls == [(7, rl), (7, rl, fm.Setting(easy_updates=3)), (7, rl, fm.Setting(adaptive=True)),
                     (7, rl, fm.Setting(mixed_rounds=2))]  # the same updates, prompts and group size


def test_adaptive_difficulty_moves_the_operations_toward_a_pass_rate_of_one_half():
    rl = grpo.Args(min_steps=1, max_steps=4)
    assert fm.next_difficulty(4, torch.zeros(2, 4), rl) == 3 and fm.next_difficulty(1, torch.zeros(2, 4), rl) == 1
    assert fm.next_difficulty(2, torch.ones(2, 4), rl) == 3 and fm.next_difficulty(4, torch.ones(2, 4), rl) == 4
    assert fm.next_difficulty(2, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), rl) == 2  # at 1/2 it stays


def test_the_adaptive_arm_starts_at_the_hardest_problems_and_eases_while_it_fails(monkeypatch, tmp_path):
    drawn = []

    def failing_groups(model, tokenizer, problems, rl, *rest):
        drawn.append({len(p.ops) for p in problems})
        completions, _ = real(model, tokenizer, problems, rl, *rest)
        return completions, torch.zeros(len(problems), rl.group_size)

    real = grpo.sample_groups
    monkeypatch.setattr(grpo, "sample_groups", failing_groups)
    policy, tok = tiny_model(6)
    rl = loop_args(tmp_path, rl_steps=4, max_steps=3, inner_iters=1)
    history = fm.train(policy, lm_world.frozen_copy(policy), tok, rl, rl.task.held_out(4), "cpu",
                       fm.Setting(adaptive=True))["history"]
    assert drawn == [{3}, {2}, {1}, {1}] and [h["operations"] for h in history] == [3, 2, 1, 1]


def test_mixed_groups_first_trains_on_the_groups_with_spread_among_all_it_drew():
    rewards = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    assert fm.mixed_first(rewards, 3).tolist() == [1, 3, 0]  # the two with spread, then the first without
    rows = SimpleNamespace(**{name: torch.arange(10) * 10 for name in (
        "sequences", "attention_mask", "completion_mask", "logprobs", "truncated")})
    kept = fm.group_rows(lm_world.Completions(**vars(rows), prompt_length=1), torch.tensor([1, 3]), 2)
    assert kept.sequences.tolist() == [20, 30, 60, 70] and kept.truncated.tolist() == [20, 30, 60, 70]


def test_the_mixed_arm_draws_more_prompts_and_keeps_the_chapters_batch(monkeypatch, tmp_path):
    shapes = []
    real = grpo.sample_groups

    def spy(model, tokenizer, problems, rl, *rest):
        completions, rewards = real(model, tokenizer, problems, rl, *rest)
        shapes.append(len(problems))
        return completions, torch.arange(rewards.numel()).remainder(3).eq(0).float().view_as(rewards)

    monkeypatch.setattr(grpo, "sample_groups", spy)
    policy, tok = tiny_model(6)
    rl = loop_args(tmp_path, rl_steps=2, inner_iters=1)
    history = fm.train(policy, lm_world.frozen_copy(policy), tok, rl, rl.task.held_out(4), "cpu",
                       fm.Setting(mixed_rounds=2))["history"]
    assert shapes == [3 * rl.prompts] * 2  # (1 + 2) x the prompts drawn; the update keeps rl.prompts groups
    assert all(h["sampled"] == 3 * rl.prompts * rl.group_size and h["zero_spread"] == 0.0 for h in history)


def naive_pass_k(rewards: torch.Tensor, k: int, eps: float = 1e-4) -> torch.Tensor:
    """Each completion's mean z-score over the k-subsets of its group that hold it, a subset scoring its best."""
    out = []
    for group in rewards.tolist():
        subsets = list(itertools.combinations(range(len(group)), k))
        score = {s: max(group[i] for i in s) for s in subsets}
        rho = sum(score.values()) / len(subsets)
        sigma = math.sqrt(rho * (1 - rho)) + eps
        out += [(np.mean([score[s] for s in subsets if i in s]) - rho) / sigma for i in range(len(group))]
    return torch.tensor(out)


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_pass_k_advantages_are_the_mean_z_score_of_the_k_subsets_that_hold_each_completion(k):
    rewards = (torch.rand(12, 8, generator=torch.Generator().manual_seed(k)) < 0.3).float()
    rewards[0], rewards[1] = 0.0, 1.0  # all wrong, all right: A = 0
    A = fm.pass_k_advantages(rewards, k)
    torch.testing.assert_close(A, naive_pass_k(rewards, k).float(), atol=1e-5, rtol=1e-5)
    assert A[:16].abs().max() == 0
    if k == 1:  # GRPO's z-score, the std over G (not G - 1)
        spread = rewards.std(1, keepdim=True, correction=0)
        torch.testing.assert_close(A, ((rewards - rewards.mean(1, keepdim=True)) / (spread + 1e-4)).flatten())


def test_under_pass_k_a_wrong_completion_in_a_group_with_enough_right_ones_is_not_pushed_down():
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]])  # with k = 4 every subset holds a right one
    assert fm.pass_k_advantages(rewards, 4).abs().max() == 0
    lone = fm.pass_k_advantages(torch.tensor([[1.0] + [0.0] * 7]), 4)
    assert lone[0] > 0 > lone[1]  # one right: still pushed up, the wrong ones down


def fake_weak_start(monkeypatch, calls):
    """The weak start is "weak"; each GRPO run records its start, estimator and batch shape."""
    monkeypatch.setattr(fm, "weak_start", lambda args, device: "weak")
    monkeypatch.setattr(fm, "two_draws", lambda *a: pytest.fail("the weak start drawn again"))

    def fake_run_grpo(initial, tokenizer, rl, held_out, device, setting=None):
        calls.append((initial, (setting or fm.Setting()).method, rl.prompts, rl.group_size))
        return {"final": {"pass@1": 0.1, "correct": [0, 1]}, "history": [{"zero_spread": 0.5}], "final_kl": 0.0}
    monkeypatch.setattr(fm, "run_grpo", fake_run_grpo)


def test_the_support_and_groups_parts_reuse_the_failure_modes_runs_and_train_the_rest(monkeypatch, tmp_path):
    calls = []
    fake_weak_start(monkeypatch, calls)
    done = {"final": {"pass@1": 0.0, "correct": [0, 0]}}
    known = {"weak cold start": done, "weak cold start, resampled": done, "GRPO": dict(done, history=[
        {"zero_spread": 1.0}], final_kl=0.0), "GRPO from the default cold start": {"final": done["final"]}}
    rl = loop_args(tmp_path, prompts=4, group_size=4, final_samples=1)
    metrics, runs = fm.weak_start_parts(fm.Args(parts="support,groups"), rl, "cold start", None, [], "cpu", known)
    # REINFORCE and RLOO from the weak start, then GRPO at twice the group size and half the prompts
    assert calls == [("weak", "reinforce", 4, 4), ("weak", "rloo", 4, 4), ("weak", "grpo", 2, 8)]
    assert list(runs["support"]) == ["weak cold start", "weak cold start, resampled", "REINFORCE (batch mean)",
                                     "RLOO", "GRPO", "GRPO from the default cold start"]
    assert list(runs["groups"]) == ["G = 4, 4 prompts", "G = 8, 2 prompts"]
    assert metrics["support[RLOO]_still_unsolved"] == 0.5 and metrics["support[GRPO]_still_unsolved"] == 1.0
    assert metrics["groups[G = 4, 4 prompts]_zero_spread"] == 1.0  # the failure modes' GRPO run, reused


def test_the_weak_start_parts_alone_run_grpo_from_both_starts(monkeypatch, tmp_path):
    calls = []
    fake_weak_start(monkeypatch, calls)
    monkeypatch.setattr(fm, "two_draws", lambda *a: ({"pass@1": 0.0, "correct": [0, 0]},) * 2)
    rl = loop_args(tmp_path, prompts=4, group_size=4, final_samples=1)
    metrics, runs = fm.weak_start_parts(fm.Args(parts="support"), rl, "cold start", None, [], "cpu",
                                        {"GRPO from the default cold start": None})
    assert calls == [("weak", "grpo", 4, 4), ("cold start", "grpo", 4, 4), ("weak", "reinforce", 4, 4),
                     ("weak", "rloo", 4, 4)] and list(runs) == ["support"]


# ------------------------------------------------------------------ the claims, on constructed seeds
NOISE = np.array([0.004, -0.003, 0.001, -0.002])  # a small spread over four seeds, mean 0


def world(**changes) -> list[dict]:
    """Four seeds' metrics of a world where every statement holds: each key a mean plus NOISE
    (the keys' noises independent of each other). `changes`: a key's mean, or its four values."""
    means = {
        "cold_start_pass@1": 0.27, "cold_start_well_formed": 0.95, "cold_start_distinct": 0.5,
        "cold_start_writes_steps": np.full(4, 0.5),  # no noise drawn: the other keys keep theirs
        "grpo_beta0_pass@1": 0.47, "grpo_beta0_kl": 0.05, "grpo_beta0_reward_rise": 0.3,
        "grpo_beta0.04_pass@1": 0.6, "grpo_beta0.04_kl": 0.03, "grpo_beta0.04_reward_rise": 0.25,
        "grpo_beta0.5_pass@1": 0.27, "grpo_beta0.5_kl": 0.01, "grpo_beta0.5_reward_rise": 0.1,  # stuck
        "kl_study[beta=0]_well_formed": 0.8, "kl_study[beta=0.04]_well_formed": 0.97,  # collapses at β = 0
        "kl_study[beta=0]_distinct": 0.4, "kl_study[beta=0.04]_distinct": 0.4,  # GRPO's samples less diverse
        "staleness[on-policy]_pass@1": 0.5, "staleness[on-policy]_worst_regression": 0.02,
        "staleness[age 8, ignore]_pass@1": 0.38, "staleness[age 8, ignore]_worst_regression": 0.1,
        "staleness[age 8, importance]_pass@1": 0.48, "staleness[age 8, importance]_worst_regression": 0.03,
        "staleness[age 8, ignore]_policy_drift": 0.05, "staleness[age 8, importance]_clip_fraction": 0.01,
        "served[as trained]_pass@1": 0.5, "served[another template]_pass@1": 0.01,
        "served[last operation missing]_pass@1": 0.01,
        "served[as trained]_well_formed": 0.98, "served[another template]_well_formed": 0.98,  # the harm is silent
        "sparse[GRPO]_zero_spread": 0.93, "sparse[weak cold start]_pass@1": 0.006, "sparse[GRPO]_pass@1": 0.006,
        "sparse[weak cold start]_unsolved": 0.9, "sparse[rejection sampling]_pass@1": 0.02,
        "sparse[rejection sampling, then GRPO]_pass@1": 0.05, "sparse[rejection sampling]_kept": 40,
        "sparse[rejection sampling]_sampled": 5120,
        "sparse[weak cold start, resampled]_still_unsolved": 0.95, "sparse[GRPO]_still_unsolved": 0.95,
        "sparse[rejection sampling, then GRPO]_still_unsolved": 0.9,
        "sparse[GRPO from the default cold start]_still_unsolved": 0.1,
        **{f"poor_reference[{name}]_{measure}": value for name, pass1, steps in (
            ("poor reference itself", 0.07, 0.1), ("cold start as reference", 0.4, 0.8), ("poor reference", 0.11, 0.3),
            ("poor reference, reset", 0.46, 0.95)) for measure, value in (("pass@1", pass1), ("writes_steps", steps))},
    } | changes
    rng = np.random.default_rng(0)
    values = {key: np.broadcast_to(value, 4) if np.ndim(value) else value + rng.permutation(NOISE)
              for key, value in means.items()}
    return [{key: float(v[i]) for key, v in values.items()} for i in range(4)]


def verdicts(seeds: list[dict]) -> dict:
    """Each claim's verdict by a word of its source and text (they are unique)."""
    rl, args = grpo.Args(beta=0.04, rl_steps=80, eval_every=20), fm.Args(betas="0,0.5", stale_lags="8")
    return {c["claim"]: c["holds"] for c in fm.check_claims(rl, args, seeds)}


def verdict(seeds: list[dict], words: str) -> bool | None:
    found = [holds for claim, holds in verdicts(seeds).items() if words in claim]
    assert len(found) == 1, words
    return found[0]


def test_in_a_world_where_every_statement_holds_every_claim_says_yes():
    seeds = world()
    found = verdicts(seeds)
    assert len(found) == 20 and all(holds is True for holds in found.values()), found
    claims = fm.check_claims(grpo.Args(beta=0.04), fm.Args(betas="0,0.5", stale_lags="8"), seeds)
    assert all("95% interval over 4 seeds" in c["measured"] for c in claims)
    assert "rollouts 8 updates old" in " ".join(c["claim"] for c in claims)


@pytest.mark.parametrize("words,changes", [
    ("more aggressive", {"grpo_beta0_reward_rise": 0.05}),                # β = 0 rises less than the largest
    ("KL to it is smaller", {"grpo_beta0.5_kl": 0.06}),                    # 0.5 drifts further than β = 0
    ("slows learning", {"grpo_beta0.5_pass@1": 0.7}),
    ("stays stuck", {"grpo_beta0.5_pass@1": 0.4}),                         # a gain: it moved
    ("stays stuck", {"grpo_beta0.5_pass@1": 0.2}),                         # a loss: it moved too
    ("collapses (here: at β = 0", {"kl_study[beta=0]_well_formed": 0.965}),  # below the default, not the cold start
    ("unstable", {"staleness[age 8, ignore]_worst_regression": 0.0}),
    ("limit the off-policy lag", {"staleness[age 8, ignore]_pass@1": 0.6}),
    ("importance ratios", {"staleness[age 8, importance]_pass@1": 0.3}),
    ("train/serve skew poisons", {"served[another template]_pass@1": 0.6}),
    ("harm silently", {"served[another template]_well_formed": 0.6}),      # the outputs break, visibly
    ("peaked-and-usually-right", {"kl_study[beta=0.04]_distinct": 0.6}),   # more diverse than the cold start
    ("peaked-and-usually-right", {"grpo_beta0.04_pass@1": 0.2}),           # less often right
    ("peaked-and-usually-right", {"grpo_beta0.04_pass@1": 0.4}),           # more often right, but not usually
    ("state blindness", {"served[last operation missing]_pass@1": 0.35}),  # below the trained, above the cold start
    ("most trajectories", {"sparse[GRPO]_zero_spread": 0.3}),
    ("cold start fails", {"sparse[GRPO]_pass@1": 0.2}),                    # the weak start gains
    ("support problem", {"sparse[GRPO]_still_unsolved": 0.5}),             # GRPO solves beyond luck
    ("rejection sampling (best-of-N)", {"sparse[GRPO]_pass@1": 0.2}),                # GRPO alone ahead
    ("SFT cold start", {"grpo_beta0.04_pass@1": 0.2}),
    ("wrong reference", {"poor_reference[poor reference]_pass@1": 0.5}),
    ("reset the reference", {"poor_reference[poor reference, reset]_pass@1": 0.05}),
    ("writes the worked steps", {"poor_reference[poor reference]_writes_steps": 0.9}),  # the poor anchor writes more
])
def test_each_claim_says_no_where_its_quantity_runs_the_other_way(words, changes):
    assert verdict(world(), words) is True
    assert verdict(world(**changes), words) is False


@pytest.mark.parametrize("words,key,mean", [
    ("unstable", "staleness[age 8, ignore]_worst_regression", 0.03),  # an excess of 0.01 in a wide spread
    ("importance ratios", "staleness[age 8, importance]_pass@1", 0.39),
    ("wrong reference", "poor_reference[poor reference]_pass@1", 0.39),
    ("writes the worked steps", "poor_reference[poor reference]_writes_steps", 0.79),
    ("stays stuck", "grpo_beta0.5_pass@1", 0.27),  # no gain, but the interval reaches past the default's gain
    ("harm silently", "served[another template]_well_formed", 0.8),  # a fall the seeds cannot size against the harm
])
def test_an_effect_the_seeds_cannot_tell_from_zero_is_inconclusive(words, key, mean):
    spread = mean + np.array([0.3, -0.3, 0.2, -0.2])
    assert verdict(world(**{key: spread}), words) is None


def test_a_skew_that_does_no_harm_leaves_its_silence_as_premise_not_met():
    seeds = world(**{"served[another template]_pass@1": 0.5, "served[another template]_well_formed": 0.98})
    claim = next(c for c in fm.check_claims(grpo.Args(beta=0.04), fm.Args(betas="0,0.5", stale_lags="8"), seeds)
                 if "harm silently" in c["claim"])
    assert claim["holds"] is None and common.verdict_word(claim) == "premise not met"


def test_right_about_half_the_time_leaves_usually_right_undecided_though_pass1_rose():
    about_half = 0.5 + np.array([0.05, -0.05, 0.03, -0.03])  # well above the cold start, 1/2 in the interval
    seeds = world(**{"grpo_beta0.04_pass@1": about_half})
    assert verdict(seeds, "peaked-and-usually-right") is None
    claim = next(c for c in fm.check_claims(grpo.Args(beta=0.04), fm.Args(betas="0,0.5", stale_lags="8"), seeds)
                 if "usually-right" in c["claim"])
    rise = fm.effect(fm.gap(seeds, "grpo_beta0.04_pass@1", "cold_start_pass@1"))[0]
    assert rise is True and "pass@1 after GRPO minus 1/2" in claim["measured"]


def test_solving_fewer_than_luck_still_fixes_no_support_and_losing_ground_still_fails():
    """The 'none' statements are one-sided: less than luck, or a loss, agrees with them."""
    assert verdict(world(**{"sparse[GRPO]_still_unsolved": 0.99}), "support problem") is True
    assert verdict(world(**{"sparse[GRPO]_pass@1": 0.0}), "cold start fails") is True


def test_a_weak_start_that_solves_everything_leaves_the_support_claim_without_its_premise():
    seeds = world(**{key: math.nan for key in ("sparse[weak cold start, resampled]_still_unsolved",
                                               "sparse[GRPO]_still_unsolved")})
    claim = fm.support_claim(grpo.Args(), seeds)
    assert claim["holds"] is None and "premise not met" in claim["measured"]


def anchoring(seeds: list[dict]) -> dict:
    return fm.anchoring_claim(seeds, 0.5)


def test_the_anchoring_claim_says_never_where_the_poor_reference_writes_no_step_on_any_seed():
    assert "a reference that rarely writes" in anchoring(world())["claim"]
    claim = anchoring(world(**{"poor_reference[poor reference itself]_writes_steps": np.zeros(4)}))
    assert "a reference that never writes" in claim["claim"] and claim["holds"] is True
    assert claim["source"] == "over-long-generations, When it falls down" and "at β = 0.5" in claim["claim"]
    assert "the poor reference itself 0.000 [0.000, 0.000]" in claim["measured"]


def test_a_poor_reference_that_writes_the_steps_as_often_as_the_cold_start_leaves_anchoring_without_its_premise():
    claim = anchoring(world(**{"cold_start_writes_steps": 0.1}))  # the poor reference's own share
    assert claim["holds"] is None and "premise not met" in claim["measured"]
    assert "the cold-start anchor's lead +0.5" in claim["measured"]  # shown, not deciding


def test_the_beta_and_kl_claims_need_a_beta_beside_the_default():
    rl, seeds = grpo.Args(beta=0.04), world()
    assert fm.beta_claims(rl, fm.Args(betas=""), seeds) == [] == fm.kl_claims(rl, fm.Args(betas=""), seeds)
    weaker_only = fm.Args(betas="0")  # no β above the default: no 'stuck', no 'slows'
    assert len(fm.beta_claims(rl, weaker_only, seeds)) == 2 and len(fm.kl_claims(rl, weaker_only, seeds)) == 1


def part_seeds(**changes) -> list[dict]:
    """Four seeds' metrics of the blame and curriculum parts where both statements hold."""
    shares = {"reward": 0.02, "right": 0.45, "blamed_wrong": 0.07, "blame_on_right": 0.4}
    means = {**{f"blame[{shown}]_{key}": value for shown in fm.SHOWN for key, value in shares.items()},
             "blame[whole prompt]_blamed_right": 0.0, "blame[last operation missing]_blamed_right": 0.06,
             **{f"curriculum[{name}]_{key}": value for name, key, value in (
                 ("weak cold start", "pass@1", 0.007), ("GRPO", "pass@1", 0.007), ("easy first, then GRPO", "pass@1",
                                                                                     0.05),
                 ("GRPO", "zero_spread", 0.94), ("easy first, then GRPO", "zero_spread", 0.7),
                 ("GRPO", "easy_reward", 0.008), ("easy first, then GRPO", "easy_reward", 0.1),
                 (fm.ADAPTIVE, "pass@1", 0.05), (fm.MIXED, "pass@1", 0.05), (fm.ADAPTIVE, "zero_spread", 0.6),
                 (fm.MIXED, "zero_spread", 0.5), ("GRPO", "sampled", 128.0), (fm.ADAPTIVE, "sampled", 128.0),
                 (fm.MIXED, "sampled", 512.0))}} | changes
    return world(**means)


def part_verdicts(seeds: list[dict]) -> list[tuple[str, bool | None]]:
    rl, args = grpo.Args(beta=0.04, rl_steps=80), fm.Args(parts="blame,curriculum")
    return [(c["source"], c["holds"]) for c in fm.check_claims(rl, args, seeds)]


@pytest.mark.parametrize("changes,found", [
    ({}, [True, True, True, True]),
    ({"blame[last operation missing]_blamed_right": 0.0, "blame[whole prompt]_blamed_right": 0.06},
     [False, True, True, True]),  # the whole prompt's right completions blamed more often than the cut one's
    ({"blame[last operation missing]_blamed_right": 0.0}, [None, True, True, True]),  # no blame either way
    ({"curriculum[GRPO]_pass@1": 0.1}, [True, False, False, False]),  # GRPO alone ends above every mitigation
    ({"curriculum[easy first, then GRPO]_pass@1": 0.007 + np.array([0.3, -0.3, 0.2, -0.2])}, [True, None, True, True]),
    ({f"curriculum[{fm.MIXED}]_pass@1": 0.007 + np.array([0.3, -0.3, 0.2, -0.2])}, [True, True, True, None]),
    # fewer operations no easier for the start: adaptive difficulty's premise is missing, not mixed groups'
    ({"curriculum[easy first, then GRPO]_easy_reward": 0.008}, [True, None, None, True]),
    ({"curriculum[GRPO]_zero_spread": 0.3}, [True, True, None, None]),  # the reward not sparse: no collapse to mend
])
def test_the_blame_curriculum_and_group_mix_claims_decide_on_their_gap_over_seeds(changes, found):
    sources = ["whole-game §1", "whole-game §7.3", "whole-game §7.8", "whole-game §7.8", "whole-game §7.8"]
    assert part_verdicts(part_seeds(**changes)) == list(zip(sources, [*found, True]))  # the std floor: exact


def test_the_std_floor_keeps_0_1_groups_and_bounds_near_homogeneous_gaps():
    claim = fm.std_floor_claim(grpo.Args(group_size=8))
    assert claim["holds"] is True and "floor 0.3536" in claim["measured"] and "unchanged" in claim["measured"]
    assert "with ε alone 2,205" in claim["measured"]  # the chapter's blow-up at δ = 0.001, beside it
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 0.999, 1.0, 1.0]], dtype=torch.float64)
    floored = fm.floored_advantages(rewards, 0.5)
    torch.testing.assert_close(floored[0], grpo.group_advantages(rewards[:1], "grpo", eps=0.0)[0])  # std 0.5: kept
    assert floored[1].abs().max() < 0.002  # a 0.001 gap stays about that size


def test_easy_items_the_start_passes_no_more_often_leave_the_curriculum_claim_without_its_premise():
    seeds = part_seeds(**{"curriculum[easy first, then GRPO]_easy_reward": 0.008})
    claim = fm.curriculum_claim(grpo.Args(), fm.Args(curriculum_sft_steps=150), seeds)
    assert claim["holds"] is None and "premise not met" in claim["measured"]
    assert "from a weak cold start of 150 SFT steps" in claim["claim"]  # the start it measured, named


def test_a_seed_with_nothing_right_by_its_prompt_leaves_the_blame_claim_without_its_premise():
    seeds = part_seeds(**{"blame[last operation missing]_blamed_right": np.array([0.06, math.nan, 0.05, 0.07])})
    claim = fm.blame_claim(grpo.Args(), fm.Args(), seeds)
    assert claim["holds"] is None and "premise not met" in claim["measured"]


def weak_seeds(**changes) -> list[dict]:
    """Four seeds' metrics of the support and groups parts where both statements hold (the
    chapter's G = 8 of 16 prompts against G = 16 of 8)."""
    still = {f"support[{name}]_still_unsolved": 0.95 for name in ("weak cold start, resampled", "REINFORCE (batch mean)",
                                                                   "RLOO", "GRPO")}
    means = {**still, "support[GRPO from the default cold start]_still_unsolved": 0.1,
             "support[weak cold start]_unsolved": 0.9,
             "groups[G = 8, 16 prompts]_pass@1": 0.01, "groups[G = 16, 8 prompts]_pass@1": 0.05,
             "groups[G = 8, 16 prompts]_zero_spread": 0.95, "groups[G = 16, 8 prompts]_zero_spread": 0.9} | changes
    return world(**means)


def weak_claims(seeds: list[dict]) -> list[dict]:
    return fm.check_claims(grpo.Args(beta=0.04, rl_steps=80), fm.Args(parts="support,groups"), seeds)


@pytest.mark.parametrize("changes,found", [
    ({}, [True, True]),
    ({"support[RLOO]_still_unsolved": 0.5}, [False, True]),  # RLOO solves beyond luck: one estimator fixes it
    ({"support[REINFORCE (batch mean)]_still_unsolved": 0.99}, [True, True]),  # fewer than luck: none fixed
    ({"groups[G = 16, 8 prompts]_pass@1": 0.005}, [True, False]),  # the larger group ends lower
    ({"groups[G = 16, 8 prompts]_pass@1": 0.01 + np.array([0.03, -0.03, 0.02, -0.02])}, [True, None]),
])
def test_the_support_and_groups_claims_decide_on_their_quantity_over_seeds(changes, found):
    claims = weak_claims(weak_seeds(**changes))
    assert [(c["source"], c["holds"]) for c in claims] == list(zip(["whole-game §8", "whole-game §7.3, §7.8"], found))
    assert "none of REINFORCE, RLOO and GRPO" in claims[0]["claim"] and "G = 16 (half the prompts" in claims[1]["claim"]
    assert "smallest detectable" in claims[1]["measured"] and "zero-spread groups" in claims[1]["measured"]


@pytest.mark.parametrize("changes,which", [
    ({"support[weak cold start, resampled]_still_unsolved": math.nan}, 0),  # the weak start solved everything
    ({"groups[G = 8, 16 prompts]_zero_spread": 0.3}, 1),  # the reward is not sparse at G = 8
])
def test_the_support_and_groups_claims_need_their_premise(changes, which):
    claim = weak_claims(weak_seeds(**changes))[which]
    assert claim["holds"] is None and "premise not met" in claim["measured"]


def test_the_claims_follow_the_parts_a_run_measured():
    seeds = [a | b for a, b in zip(world(), part_seeds())]
    rl = grpo.Args(beta=0.04, rl_steps=80, eval_every=20)

    def sources(parts: str) -> list[str]:
        return [c["source"] for c in fm.check_claims(rl, fm.Args(betas="0,0.5", stale_lags="8", parts=parts), seeds)]
    modes = sources("modes")
    mixes = ["whole-game §7.8"] * 3  # adaptive difficulty, mixed groups, the std floor: beside the curriculum
    assert len(modes) == 20 and sources("curriculum,modes,blame") == modes + ["whole-game §1", "whole-game §7.3", *mixes]
    assert sources("curriculum") == ["whole-game §7.3", *mixes]


def test_a_run_of_the_blame_part_alone_trains_the_grpo_policy_once_and_scores_its_samples(monkeypatch):
    trained, scored = [], []
    monkeypatch.setattr(fm, "failure_modes", lambda *a: pytest.fail("the failure modes ran"))
    monkeypatch.setattr(fm, "run_grpo", lambda initial, *rest: trained.append(initial) or {"policy": "trained"})
    monkeypatch.setattr(fm, "blame_study", lambda policy, tokenizer, rl, problems, device: scored.append(
        (policy, len(problems))) or {shown: {"right": 0.5} for shown in fm.SHOWN})
    metrics, runs = fm.run_seed(fm.Args(parts="blame", blame_problems=6), "cold start", None, "cpu")
    assert trained == ["cold start"] and scored == [("trained", 6)]
    assert metrics == {"blame[whole prompt]_right": 0.5, "blame[last operation missing]_right": 0.5}
    assert list(runs) == ["blame"]


def test_a_run_of_the_new_parts_alone_tables_only_them():
    means = {f"blame[{shown}]_{key}": 0.5 for shown in fm.SHOWN for key in (
        "reward", "right", "blamed_right", "blamed_wrong", "blame_on_right", "zero_spread")}
    means |= {"blame[whole prompt]_blamed_right": math.nan, "curriculum[GRPO]_pass@1": 0.1}
    found = fm.tables(grpo.Args(), means, {"blame": list(fm.SHOWN), "curriculum": ["GRPO"]})
    assert list(found) == ["blame", "curriculum"]
    assert found["blame"]["rows"][0][:4] == ["whole prompt", "50.0%", "50.0%", "-"]
    assert found["curriculum"]["rows"] == [["GRPO", 0.1, "-", "-", "-", "-"]]




# ------------------------------------------------------------------ CLI and the smoke run
@pytest.mark.parametrize("flag,value,message", [
    ("--poor-shortcut-prob", "1.5", "--poor-shortcut-prob must be in [0, 1]"),
    ("--rft-n", "0", "--rft-n must be positive"),
    ("--stale-lags", "0,4", "--stale-lags must be positive"),
    ("--seeds", "1", "--seeds must be at least 2"),
    ("--parts", "modes,luck", "'luck' is not one of modes, blame, curriculum, support, groups"),
    ("--curriculum-share", "1", "--curriculum-share must be in (0, 1)"),
    ("--curriculum-sft-steps", "0", "--curriculum-sft-steps must be positive"),
    ("--blame-problems", "513", "--blame-problems must be in 1..512"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("studies.05_failure_modes", flag, value)


def run_reanalyse(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "studies/05_failure_modes.py", "--reanalyse", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_the_support_and_groups_parts_run_with_smoke(tmp_path, read_results):
    out = tmp_path / "05_failure_modes"
    run = subprocess.run([sys.executable, "studies/05_failure_modes.py", "--smoke", "--cache", str(tmp_path / "cache"),
                          "--out", str(out), "--parts", "support,groups"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr
    data = read_results(out / "results.json")
    assert [c["source"] for c in data["claims"]] == ["whole-game §8", "whole-game §7.3, §7.8"]
    assert all(c["holds"] in (True, False, None) for c in data["claims"])
    assert set(data["metrics"]["tables"]) == {"support", "groups"}
    assert list(data["seeds"][0]["runs"]["groups"]) == ["G = 2, 2 prompts", "G = 4, 1 prompts"]


def test_the_failure_modes_study_runs_with_smoke(tmp_path, read_results):
    out = tmp_path / "05_failure_modes"
    run = subprocess.run([sys.executable, "studies/05_failure_modes.py", "--smoke", "--cache", str(tmp_path / "cache"),
                          "--out", str(out), "--stale-lags", "1", "--betas", "0", "--parts", "modes,blame,curriculum,pressure"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    data = read_results(out / "results.json")
    tables, metrics = data["metrics"].pop("tables"), data["metrics"]
    seeds = [seed["metrics"] for seed in data["seeds"]]
    assert [seed["seed"] for seed in data["seeds"]] == [0, 1]
    # a smoke weak start solves nothing, so no problem is solved by it to be left 'still unsolved' of: all defined;
    # but a smoke policy may write nothing right by its prompt, whose blame is then undefined (null)
    assert all(v is not None and np.isfinite(v) for key, v in metrics.items() if not key.startswith("blame["))
    assert {f"blame[{shown}]_blamed_right" for shown in fm.SHOWN} <= set(metrics)
    values = {key: [m[key] for m in seeds] for key in seeds[0]}
    assert metrics == pytest.approx({key: None if None in v else np.mean(v) for key, v in values.items()})
    assert set(tables) == set(fm.TITLES) - {"support", "groups"}
    again = run_reanalyse(out / "results.json")  # the claims from the stored seeds, nothing trained
    assert again.returncode == 0 and read_results(out / "results.json")["claims"] == data["claims"]
    runs = data["seeds"][0]["runs"]
    for name, study in (("staleness", "staleness"), ("sparse", "sparse_reward"), ("poor_reference", "poor_reference"),
                        ("curriculum", "curriculum")):
        assert [row[:2] for row in tables[name]["rows"]] == [[label, metrics[f"{name}[{label}]_pass@1"]]
                                                             for label in runs[study]]
    assert list(runs["staleness"]) == ["on-policy", "age 1, ignore", "age 1, importance"]
    assert metrics["staleness[age 1, importance]_policy_age"] == 0.5  # ages 0, 1 over two updates
    assert [row[0] for row in tables["serving"]["rows"]] == list(fm.SERVED)
    assert [row[0] for row in tables["kl"]["rows"]] == ["cold start", "0", "0.04"]
    assert list(runs["sparse_reward"]) == ["weak cold start", "weak cold start, resampled", "GRPO",
                                           "rejection sampling", "rejection sampling, then GRPO",
                                           "GRPO from the default cold start"]
    assert list(runs["poor_reference"]) == ["poor reference itself", "cold start as reference", "poor reference",
                                            "poor reference, reset"]
    assert runs["poor_reference"]["poor reference, reset"]["history"][1]["kl"] == 0.0  # reset before update 1
    assert list(runs["curriculum"]) == ["weak cold start", "GRPO", "easy first, then GRPO", fm.ADAPTIVE, fm.MIXED]
    assert list(runs["pressure"]) == ["GRPO (pass@1)", "GRPO, pass@1 advantages"]  # --smoke's G = 2 leaves k = 1
    assert [row[0] for row in tables["blame"]["rows"]] == list(runs["blame"]) == list(fm.SHOWN)
    for name in ("staleness.png", "support_and_anchor.png", "reward_kl.png", "curriculum.png"):
        assert (out / name).stat().st_size > 1000
    sources = [c["source"] for c in data["claims"]]
    assert sources.count("whole-game §7.9") == 3 and sources.count("over-long-generations") == 2
    assert {"whole-game §1", "whole-game §2", "whole-game §7.1", "whole-game §7.3", "whole-game §7.10",
            "whole-game §8"} <= set(sources)
    # the other parts' claims follow the modes', in the order of PARTS
    assert sources[-6:] == ["whole-game §1", "whole-game §7.3", *["whole-game §7.8"] * 3, "whole-game §8"]
    assert data["args"]["parts"] == "modes,blame,curriculum,pressure"
    assert all("95% interval over 2 seeds" in c["measured"] for c in data["claims"] if "(exact)" not in c["measured"])


# ------------------------------------------------------------------ pressure on pass@1 against pass@k
def test_the_pressure_part_runs_pass_k_beside_the_grpo_run_from_the_same_start(monkeypatch):
    calls = []
    monkeypatch.setattr(fm, "run_grpo", lambda initial, tokenizer, rl, held_out, device, setting:
                        calls.append((initial, setting)) or {"policy": "pass@k policy"})
    monkeypatch.setattr(fm, "sample_quality", lambda policy, tokenizer, rl, problems, device: {"distinct": policy})
    study = fm.pressure_study("start", None, grpo.Args(), fm.Args(pass_k=3), list(range(80)), "cpu",
                              {"policy": "GRPO policy"})
    assert list(study) == ["GRPO (pass@1)", "GRPO, pass@3 advantages"] and calls == [("start", fm.Setting(pass_k=3))]
    assert [run["quality"] for run in study.values()] == [{"distinct": "GRPO policy"}, {"distinct": "pass@k policy"}]


def pressure_seeds(**changes) -> list[dict]:
    """Four seeds where the pass@4 arm samples more distinct completions and is right less often."""
    arm = fm.pressure_arm(fm.Args())
    means = {"pressure[GRPO (pass@1)]_distinct": 0.3, f"pressure[{arm}]_distinct": 0.5,
             "pressure[GRPO (pass@1)]_pass@1": 0.5, f"pressure[{arm}]_pass@1": 0.44,
             "pressure[GRPO (pass@1)]_pass@16": 0.9, f"pressure[{arm}]_pass@16": 0.9}
    return world(**means | changes)


@pytest.mark.parametrize("changes,holds", [
    ({}, True),
    ({"pressure[GRPO (pass@1)]_distinct": 0.6}, False),  # GRPO's samples the more diverse
    ({"pressure[GRPO (pass@1)]_pass@1": 0.44}, None),  # right as often: 'sometimes-right' not shown
])
def test_the_pressure_claim_needs_more_diverse_samples_and_a_lower_pass_at_1(changes, holds):
    claim = fm.pressure_claim(grpo.Args(), fm.Args(), pressure_seeds(**changes))
    assert claim["holds"] is holds and claim["source"] == "whole-game §8" and "pass@4 pressure" in claim["claim"]
