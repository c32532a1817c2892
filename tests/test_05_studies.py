"""The studies beside 05_grpo_rloo (studies/05_*.py): groups with no reward spread, PPO's token
critic (GAE over tokens, its truth, gradient variance by length), the failure modes, the bench,
the chapter's experiment on several seeds; the tables each study prints (and the docs show).
Each study's loop is the chapter's with its own additions: a pin holds it to the chapter's
numbers with the additions off. CLI checks and a --smoke run of each study."""

import copy
import dataclasses
import importlib
import itertools
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import lm_world
from lm_pins import hand_completions, tiny_model

ROOT = Path(__file__).resolve().parents[1]
grpo = importlib.import_module("05_grpo_rloo")
zs = importlib.import_module("studies.05_zero_spread")
ppo = importlib.import_module("studies.05_critic")
fm = importlib.import_module("studies.05_failure_modes")
bench = importlib.import_module("studies.05_bench")
seeds = importlib.import_module("studies.05_seeds")


def loop_args(tmp_path, **changes):
    """The chapter's settings on a small task space (one step, values up to 30), as in
    test_05_grpo_rloo.py."""
    settings = dict(rl_steps=3, prompts=4, group_size=4, eval_every=2, max_new_tokens=8, eval_problems=4,
                    eval_samples=2, min_steps=1, max_steps=1, max_value=30, max_operand=3, clip_eps=0.3, beta=0.07,
                    inner_iters=2, max_grad_norm=0.9, warmup=3, lr=0.01, loss_norm="token", seed=5)
    return grpo.Args(device="cpu", out=str(tmp_path / "out"), **settings | changes)


def parity_reward(problems, texts, truncated):
    """A verifier stand-in whose reward depends on the problem and on the text: groups with a spread."""
    return torch.tensor([float((len(t) + p.start) % 2) for p, t in zip(problems, texts)]) * (~truncated).float()


# ------------------------------------------------------------- pins: each study's loop is the chapter's
def train_both(monkeypatch, tmp_path, study_train):
    monkeypatch.setattr(grpo, "verifier_rewards", parity_reward)
    rl = loop_args(tmp_path)
    held_out = rl.task.held_out(rl.eval_problems)
    runs, policies = [], []
    for train in (lambda *a: grpo.train(*a[:4], "grpo", *a[4:]), study_train):
        policy, tok = tiny_model(5)
        runs.append(train(policy, lm_world.frozen_copy(tiny_model(4)[0]), tok, rl, held_out, "cpu"))
        policies.append(policy)
    return runs, policies


@pytest.mark.parametrize("study", ["critic", "failure modes"])
def test_each_study_loop_with_its_additions_off_trains_exactly_as_the_chapter(monkeypatch, tmp_path, study):
    """PPO's loop without a critic, and the failure modes' loop on-policy with no reference reset,
    give the chapter's GRPO: the same samples, rewards, statistics, evaluations and parameters."""
    study_train = {"critic": lambda p, r, tok, rl, held, dev: ppo.train(p, r, tok, rl, ppo.Args(), held, dev),
                   "failure modes": fm.train}[study]
    (chapter, restated), policies = train_both(monkeypatch, tmp_path, study_train)
    assert restated["evals"] == chapter["evals"] and len(chapter["evals"]) == 3
    assert any(0 < h["reward"] < 1 for h in chapter["history"])
    for original, record in zip(chapter["history"], restated["history"]):
        assert {k: v for k, v in record.items() if k in original} == original
    for a, b in zip(policies[0].parameters(), policies[1].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


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


# --------------------------------------------------------------------------- zero-spread study
@pytest.mark.parametrize("n,c,G", [(8, 3, 2), (8, 0, 4), (8, 8, 8), (6, 2, 3)])
def test_zero_spread_probability_matches_enumeration(n, c, G):
    outcomes = [1] * c + [0] * (n - c)
    groups = list(itertools.combinations(outcomes, G))
    expected = np.mean([len(set(g)) == 1 for g in groups])
    assert math.isclose(zs.zero_spread_probability(n, c, G), expected)


def test_zero_spread_table_by_difficulty():
    table = zs.zero_spread_table([0, 4, 2, 4], [1, 1, 2, 2], samples=4, group_sizes=[2, 4])
    assert table[1] == {"pass@1": 0.5, 2: 1.0, 4: 1.0}  # all wrong and all right: never a signal
    assert table[2]["pass@1"] == 0.75 and table[2][4] == 0.5 and math.isclose(table[2][2], (2 / 6 + 1) / 2)  # C(2,2)+C(2,2) of C(4,2)


def test_zero_spread_study_reads_each_policy_counts_by_difficulty():
    args = zs.Args(final_samples=4, group_sizes="2,4")
    held_out = [lm_world.ChainProblem(1, (("+", 1),)), lm_world.ChainProblem(2, (("+", 1), ("+", 1))),
                lm_world.ChainProblem(3, (("+", 1),))]
    before, after = {"correct": [0, 2, 4]}, {"correct": [1, 4, 3]}
    tables = zs.zero_spread_study(args, held_out, before, {"grpo": {"final": after}})
    assert tables == {"cold start": zs.zero_spread_table([0, 2, 4], [1, 2, 1], 4, [2, 4]),
                      "after GRPO": zs.zero_spread_table([1, 4, 3], [1, 2, 1], 4, [2, 4])}
    assert list(zs.zero_spread_study(args, held_out, before, {})) == ["cold start"]


# --------------------------------------------------------------------- gradient by spread
def spread_reward(problems, texts, truncated):
    """By problem: always right (start divisible by 3), always wrong (remainder 1), or by the
    text's length (remainder 2): zero-spread groups of both kinds, and mixed ones."""
    return torch.tensor([1.0 if p.start % 3 == 0 else 0.0 if p.start % 3 == 1 else float(len(t) % 2)
                         for p, t in zip(problems, texts)])


def test_gradient_by_spread_splits_rows_by_their_group_and_uses_their_grpo_advantages(monkeypatch, tmp_path):
    """Against a direct computation: the zero-spread part is the rows of groups whose G rewards
    are all equal (all right or all wrong), the mixed part the others; the policy-gradient term
    uses each row's GRPO advantage, the KL term β·k3 to the reference, each normalised by its
    part's tokens. Zero-spread rows give no policy gradient, but their KL term still pulls."""
    sampled = []

    def recorded_sample_groups(*args):
        completions, rewards = real_sample_groups(*args)
        sampled.append((completions, rewards))
        return completions, rewards

    real_sample_groups = grpo.sample_groups
    monkeypatch.setattr(grpo, "verifier_rewards", spread_reward)
    monkeypatch.setattr(grpo, "sample_groups", recorded_sample_groups)
    args = loop_args(tmp_path, prompts=8, beta=0.3)
    policy, tok = tiny_model(8)
    reference = lm_world.frozen_copy(tiny_model(9)[0])
    norms = zs.gradient_by_spread(policy, reference, tok, args, "cpu")
    (completions, rewards), = sampled
    G = args.group_size
    flat = [len(set(group.tolist())) == 1 for group in rewards]
    assert {group[0].item() for group, same in zip(rewards, flat) if same} == {0.0, 1.0} and not all(flat)
    same = torch.tensor([flat[i // G] for i in range(len(flat) * G)])
    advantages = grpo.group_advantages(rewards, "grpo").flatten()
    batch = (completions.sequences, completions.attention_mask, completions.prompt_length)
    with torch.no_grad():
        ref_logp, _ = lm_world.token_logprobs(reference, *batch)
    expected = {"zero-spread share": sum(flat) / len(flat)}
    for part, rows in (("zero-spread", same), ("mixed", ~same)):
        mask = completions.completion_mask & rows[:, None]
        for term in ("pg", "kl"):
            policy.zero_grad()
            logp, _ = lm_world.token_logprobs(policy, *batch)
            log_ratio = ref_logp - logp
            per_token = -advantages[:, None] * logp if term == "pg" else args.beta * (log_ratio.exp() - log_ratio - 1)
            (per_token[mask].sum() / mask.sum()).backward()
            expected[f"{part} {term}"] = math.sqrt(sum(float((p.grad ** 2).sum()) for p in policy.parameters()
                                                       if p.grad is not None))
    assert norms["zero-spread pg"] == 0.0 and norms["zero-spread kl"] > 0 and norms["mixed pg"] > 0
    assert norms == pytest.approx(expected, rel=1e-4)


def test_gradient_by_spread_leaves_no_gradient_behind(tmp_path):
    model, tok = tiny_model(8)
    zs.gradient_by_spread(model, lm_world.frozen_copy(tiny_model(9)[0]), tok, loop_args(tmp_path), "cpu")
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_with_only_all_wrong_groups_the_mixed_part_reads_zero(tmp_path):
    """A random model never answers right: every group is all-wrong, the mixed part is empty and
    reads 0 (not NaN), and with the policy as its own reference the KL term is 0 too."""
    model, tok = tiny_model(10)
    norms = zs.gradient_by_spread(model, lm_world.frozen_copy(model), tok, loop_args(tmp_path), "cpu")
    assert norms == {"zero-spread share": 1.0, "zero-spread pg": 0.0, "zero-spread kl": 0.0, "mixed pg": 0.0,
                     "mixed kl": 0.0}


# ---------------------------------------------------------------- PPO's critic, GAE over tokens
gae_script = importlib.import_module("02_gae")


def test_token_gae_is_02s_gae_on_each_completion():
    """The copy in 05 gives 02's GAE, completion by completion laid out as 02's (time, batch)
    episodes: the reward on the last token, V = 0 after it, the episode ending there."""
    g = torch.Generator().manual_seed(0)
    lengths = [5, 1, 3, 5]
    mask = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]
    values, rewards = torch.randn(4, 5, generator=g), torch.tensor([1.0, 0.0, 1.0, 0.5])
    for gamma, lam in [(1.0, 0.95), (1.0, 1.0), (0.9, 0.5), (1.0, 0.0)]:
        advantages, targets = ppo.token_gae(values, rewards, mask, gamma, lam)
        for i, T in enumerate(lengths):
            r = torch.zeros(T, 1)
            r[-1] = rewards[i]
            v = values[i, :T, None]
            v_next = torch.cat([values[i, 1:T], torch.zeros(1)])[:, None]
            ends = torch.zeros(T, 1, dtype=torch.bool)
            ends[-1] = True
            expected = gae_script.gae(r, v, v_next, ends, gamma, lam)[:, 0]
            torch.testing.assert_close(advantages[i, :T], expected)
            torch.testing.assert_close(targets[i, :T], expected + values[i, :T])
        assert not advantages[~mask].any() and not targets[~mask].any()


def test_token_gae_at_lambda_one_is_the_outcome_minus_v_and_at_zero_the_one_step_error():
    values = torch.tensor([[0.2, 0.4, 0.7, 9.0]])  # the last cell is padding
    mask = torch.tensor([[True, True, True, False]])
    advantages, targets = ppo.token_gae(values, torch.tensor([1.0]), mask, 1.0, 1.0)
    torch.testing.assert_close(advantages, torch.tensor([[0.8, 0.6, 0.3, 0.0]]))
    torch.testing.assert_close(targets, torch.tensor([[1.0, 1.0, 1.0, 0.0]]))
    td, _ = ppo.token_gae(values, torch.tensor([1.0]), mask, 1.0, 0.0)
    torch.testing.assert_close(td, torch.tensor([[0.2, 0.3, 0.3, 0.0]]))


def test_value_loss_on_a_hand_case():
    values = torch.tensor([[1.0, 2.0, float("nan")], [0.0, 0.0, 0.0]])
    targets = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    # ½ (1 + 4 + 1) / 3 tokens; the NaN in a padding cell stays out
    assert ppo.value_loss(values, targets, mask).item() == pytest.approx(1.0)
    assert ppo.value_loss(values, targets, torch.zeros_like(mask)).item() == 0.0


def test_whiten_puts_the_completion_tokens_at_mean_zero_std_one_and_leaves_padding_zero():
    advantages = torch.tensor([[1.0, 2.0, 7.0], [3.0, 5.0, 5.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    white = ppo.whiten(advantages, mask)
    assert white[mask].mean().abs() < 1e-6 and white[mask].std().item() == pytest.approx(1.0, abs=1e-6)
    assert white[~mask].tolist() == [0.0, 0.0, 0.0]


def test_the_critic_reads_each_token_from_the_prefix_before_it():
    """V(s_t) sees x and y_<t only: changing token t changes V from t+1 on, not before."""
    policy, _ = tiny_model(5)
    critic = ppo.TokenCritic(policy)
    torch.nn.init.normal_(critic.head.weight, generator=torch.Generator().manual_seed(0))
    c = hand_completions(["12+3\n"], ["12+3=15\n#15"])
    values = critic(c)
    assert values.shape == c.completion_mask.shape
    changed = dataclasses.replace(c, sequences=c.sequences.clone())
    changed.sequences[0, c.prompt_length + 3] = 5  # the 4th completion token
    after = critic(changed)
    torch.testing.assert_close(after[0, :4], values[0, :4])
    assert not torch.allclose(after[0, 4:], values[0, 4:])
    # the trunk is a copy: training the critic leaves the policy alone
    assert critic.trunk is not policy.base_model
    assert all(torch.equal(a, b) for a, b in zip(critic.trunk.parameters(), policy.base_model.parameters()))


def test_a_value_head_reads_the_policys_own_trunk_and_trains_only_itself():
    policy, _ = tiny_model(5)
    critic = ppo.TokenCritic(policy, "head")
    assert critic.trunk is policy.base_model
    assert critic.trained_parameters() == list(critic.head.parameters())
    torch.nn.init.normal_(critic.head.weight, generator=torch.Generator().manual_seed(0))
    c = hand_completions(["12+3\n"], ["12+3=15\n#15"])
    critic(c).sum().backward()  # no gradient reaches the policy: its step is unchanged
    assert all(p.grad is None for p in policy.parameters()) and critic.head.weight.grad is not None
    moved = critic.for_policy(other := tiny_model(6)[0])
    assert moved.trunk is other.base_model and torch.equal(moved.head.weight, critic.head.weight)
    separate = ppo.TokenCritic(policy)
    assert separate.for_policy(other).trunk is not other.base_model  # a separate critic is copied whole
    # the training state counts the shared trunk once
    assert ppo.state_bytes(policy, critic) == ppo.state_bytes(policy) + ppo.state_bytes(critic.head)


def test_a_fresh_critic_says_zero_and_the_warm_up_fits_it_toward_the_outcome(monkeypatch, tmp_path):
    policy, tok = tiny_model(6)
    critic = ppo.TokenCritic(policy)
    c = hand_completions(["1+1\n"], ["1+1=2\n#2"])
    assert not critic(c).any()
    monkeypatch.setattr(grpo, "verifier_rewards", lambda problems, texts, truncated: torch.ones(len(texts)))
    rl = loop_args(tmp_path)
    losses = ppo.warm_up_critic(critic, policy, tok, rl, ppo.Args(critic_warmup=30, critic_lr=1e-2), "cpu")
    assert len(losses) == 30 and losses[-1] < 0.1 * losses[0]
    assert critic(c).mean().item() == pytest.approx(1.0, abs=0.2)  # every completion scores 1


def test_ppo_hands_whitened_gae_advantages_to_the_step_and_trains_the_critic(monkeypatch, tmp_path):
    """In the loop, PPO's advantages are the critic's GAE over tokens (whitened), not a group
    advantage; the critic then takes a step toward its targets."""
    policy, tok = tiny_model(7)
    critic = ppo.TokenCritic(policy)
    seen = {}
    step = grpo.policy_gradient_step

    def spy_step(policy, optimizer, completions, advantages, *rest):
        seen["advantages"], seen["completions"] = advantages.clone(), completions
        with torch.no_grad():
            seen["values"] = critic(completions).clone()
        return step(policy, optimizer, completions, advantages, *rest)

    monkeypatch.setattr(grpo, "policy_gradient_step", spy_step)
    monkeypatch.setattr(grpo, "verifier_rewards", lambda problems, texts, truncated: torch.arange(len(texts)) % 2.0)
    rl = loop_args(tmp_path, rl_steps=1)
    held_out = rl.task.held_out(rl.eval_problems)
    result = ppo.train(policy, lm_world.frozen_copy(policy), tok, rl, ppo.Args(gae_lambda=0.9, critic_lr=1e-2), held_out,
                       "cpu", critic)
    c = seen["completions"]
    rewards = torch.arange(len(c.sequences)) % 2.0
    expected, targets = ppo.token_gae(seen["values"], rewards, c.completion_mask, 1.0, 0.9)
    torch.testing.assert_close(seen["advantages"], ppo.whiten(expected, c.completion_mask))
    assert "value_loss" in result["history"][0]
    with torch.no_grad():
        after = ppo.value_loss(critic(c), targets, c.completion_mask)
    assert after < ppo.value_loss(seen["values"], targets, c.completion_mask)


def test_state_bytes_counts_parameters_gradients_and_adam_moments():
    layer = torch.nn.Linear(3, 2)  # 8 parameters
    assert ppo.state_bytes(layer) == 8 * 4
    optimizer = torch.optim.AdamW(layer.parameters())
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    # parameters, gradients, two moments: 4 x 8 floats; and Adam's step counter, one per tensor
    steps = sum(s["step"].numel() * s["step"].element_size() for s in optimizer.state.values())
    assert ppo.state_bytes(layer, optimizer) == 4 * 8 * 4 + steps


# ------------------------------------------------------------------ gradient variance by length
def test_per_completion_gradients_match_a_backward_pass_per_completion():
    policy, tok = tiny_model(8)
    c = hand_completions(["12+3\n", "7\n", "45*2\n"], ["12+3=15\n#15", "#7", "45*2=90"], cut=[False, False, True])
    weights = torch.randn(c.completion_mask.shape, generator=torch.Generator().manual_seed(0)) * c.completion_mask
    grads = ppo.per_completion_gradients(policy, c, weights, chunk=2)
    for i in range(3):
        policy.zero_grad()
        logp, _ = lm_world.token_logprobs(policy, c.sequences[i:i + 1], c.attention_mask[i:i + 1], c.prompt_length)
        (weights[i:i + 1] * logp).sum().backward()
        expected = torch.cat([p.grad.flatten() for p in policy.parameters()])
        torch.testing.assert_close(grads[i], expected, atol=1e-5, rtol=1e-4)


def test_variance_by_length_bins_in_log_length_and_fits_the_slope():
    lengths = torch.tensor([10, 10, 11, 20, 20, 21, 40, 40, 40, 80])
    # per bin gradients ±a (and a zero when the bin has three): tr Cov ∝ a² ∝ length
    a = torch.sqrt(lengths.float())
    sign = torch.tensor([1.0, -1.0, 0.0, 1.0, -1.0, 0.0, 1.0, -1.0, 0.0, 1.0])
    gradients = torch.stack([sign * a, torch.zeros(10)], 1)
    study = ppo.variance_by_length(gradients, lengths, 4, min_count=3)  # edges 10, 18.9, 35.7, 67.5, 81
    assert study["count"] == [3, 3, 3]  # the 80 alone is dropped
    assert study["length"] == pytest.approx([31 / 3, 61 / 3, 40.0])
    assert study["variance"] == pytest.approx([(10 + 10) / 2, (20 + 20) / 2, (40 + 40) / 2])
    slope = np.polyfit(np.log([31 / 3, 61 / 3, 40.0]), np.log([10.0, 20.0, 40.0]), 1)[0]
    assert study["slope"] == pytest.approx(slope)
    assert math.isnan(ppo.variance_by_length(torch.zeros(10, 2), lengths, 4, min_count=3)["slope"])


def test_step_prefixes_are_the_prompt_then_each_complete_line_but_the_last():
    problem = lm_world.ChainProblem(12, (("+", 3), ("*", 2)))
    assert ppo.step_prefixes(problem, "12+3=15\n15*2=30\n#30") == [
        "12+3*2\n", "12+3*2\n12+3=15\n", "12+3*2\n12+3=15\n15*2=30\n"]
    assert ppo.step_prefixes(problem, "#30") == ["12+3*2\n"]


# -------------------------------------------- failure modes: KL both sides, train/serve skew, blindness

def test_the_skew_study_serves_each_problem_three_ways(monkeypatch):
    seen = {}

    def fake_final(policy, tokenizer, args, problems, device):
        seen[len(seen)] = [p.prompt for p in problems]
        return {"pass@1": 0.5 / len(seen)}

    monkeypatch.setattr(grpo, "final_evaluation", fake_final)
    problems = [lm_world.ChainProblem(12, (("+", 7), ("*", 3))), lm_world.ChainProblem(5, (("-", 2),))]
    skew = fm.skew_study(None, None, grpo.Args(), problems, "cpu")
    assert seen == {0: ["12+7*3\n", "5-2\n"], 1: ["Q: 12+7*3\nA:\n", "Q: 5-2\nA:\n"], 2: ["12+7\n", "5\n"]}
    assert skew == {"as trained": 0.5, "another template": 0.25, "last operation missing": 0.5 / 3}
    assert [c["holds"] for c in fm.skew_claims(skew)] == [True, True]
    assert [c["holds"] for c in fm.skew_claims({"as trained": 0.5, "another template": 0.46,
                                                   "last operation missing": 0.26})] == [False, False]


def test_sample_quality_counts_distinct_well_formed_and_step_writing_samples(monkeypatch):
    texts = ["#5", "#5", "1+4=5\n#5", "junk", "#7", "#8", "#9", "#9"]
    monkeypatch.setattr(lm_world, "sample", lambda *a, **k: (None, texts))
    args = grpo.Args(final_samples=4)
    quality = fm.sample_quality(None, None, args, [lm_world.ChainProblem(1, (("+", 4),))] * 2, "cpu")
    assert quality == {"distinct": (3 / 4 + 3 / 4) / 2, "well_formed": 7 / 8, "writes_steps": 1 / 8}


def kl_row(kl, pass1, distinct=1.0, well_formed=1.0):
    return {"kl": kl, "pass@1": pass1, "pass@16": 0.9, "entropy": 0.5, "distinct": distinct, "well_formed": well_formed}


@pytest.mark.parametrize("strong,free,holds", [
    (kl_row(0.01, 0.34), kl_row(0.05, 0.5, distinct=0.9), [True, True]),    # gain 0.04 ≤ 0.2 / 2; 10 points fewer
    (kl_row(0.01, 0.45), kl_row(0.05, 0.5, well_formed=0.97), [False, False]),
    (kl_row(0.04, 0.3), kl_row(0.05, 0.5, well_formed=0.94), [False, True]),  # as much KL as the default β
])
def test_the_kl_verdicts_look_at_both_sides_of_the_default_beta(strong, free, holds):
    args = grpo.Args(beta=0.04)
    kl = {0.0: free, 0.04: kl_row(0.03, 0.5), 0.5: strong}
    claims = fm.kl_claims(args, {"pass@1": 0.3}, kl)
    assert [c["holds"] for c in claims] == holds
    assert fm.kl_claims(args, {"pass@1": 0.3}, {0.04: kl_row(0.03, 0.5)}) == []


# ------------------------------------------------------------------ failure mode: async staleness
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


def test_worst_regression_is_the_largest_drop_below_the_best_so_far():
    run = {"evals": [{"pass@1": p} for p in (0.2, 0.5, 0.3, 0.6, 0.55)]}
    assert fm.worst_regression(run) == pytest.approx(0.2)
    assert fm.worst_regression({"evals": [{"pass@1": p} for p in (0.1, 0.2)]}) == 0.0


def stale_run(final: float) -> dict:
    return {"final": {"pass@1": final}, "evals": [{"pass@1": final}],
            "history": [{"clip_fraction": 0.1, "policy_drift": 0.2}]}


@pytest.mark.parametrize("fresh,ignored,weighted,holds", [
    (0.5, 0.45, 0.49, [True, True]),
    (0.5, 0.48, 0.49, [False, False]),
    (0.5, 0.4, 0.42, [True, False]),
])
def test_the_staleness_verdicts_compare_the_oldest_rollouts_with_on_policy_and_each_other(fresh, ignored, weighted, holds):
    args = fm.Args(stale_lags="2,8")
    stale = {"on-policy": stale_run(fresh), "age 2, ignore": stale_run(0.0), "age 2, importance": stale_run(0.0),
             "age 8, ignore": stale_run(ignored), "age 8, importance": stale_run(weighted)}
    claims = fm.staleness_claims(args, stale)
    assert [c["holds"] for c in claims] == holds and "8 updates old" in claims[0]["claim"]
    assert fm.staleness_claims(args, {}) == []


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


def fake_sampler(texts_for):
    def fake_sample(model, tokenizer, prompts, *rest):
        return None, [texts_for(i) for i in range(len(prompts))]
    return fake_sample


@pytest.mark.parametrize("right_every,kept_share", [(2, 1.0), (0, 0.0)])
def test_rejection_sampling_keeps_the_verified_completions_and_fine_tunes_only_on_them(
        monkeypatch, tmp_path, right_every, kept_share):
    policy, tok = tiny_model(6)
    weights = [p.detach().clone() for p in policy.parameters()]
    monkeypatch.setattr(lm_world, "sample", fake_sampler(lambda i: "right" if right_every and i % right_every == 0 else "wrong"))
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


def pass_run(pass1: float, correct: list[int], zero_spread: float = 0.5, **extra) -> dict:
    return {"final": {"pass@1": pass1, "pass@16": pass1, "correct": correct},
            "history": [{"zero_spread": zero_spread}], "evals": [], **extra}


@pytest.mark.parametrize("grpo_final,spread,both_final,holds", [
    (0.02, 0.9, 0.10, [True, True, True, True]),
    (0.10, 0.9, 0.11, [False, False, False, False]),
    (0.02, 0.5, 0.04, [False, True, False, True]),
])
def test_the_sparse_reward_verdicts(grpo_final, spread, both_final, holds):
    rl, args = grpo.Args(), fm.Args()
    weak = {"final": {"pass@1": 0.01, "pass@16": 0.1, "correct": [0] * 9 + [1]}}
    after = [0] * 9 + [2] if grpo_final < 0.05 else [1] * 10  # GRPO solves none, or all, of the unsolved
    sparse = {"weak cold start": weak, "GRPO": pass_run(grpo_final, after, spread),
              "rejection sampling": {"final": {"pass@1": 0.05}, "rounds": [{"kept": 3, "sampled": 64}]},
              "rejection sampling, then GRPO": pass_run(both_final, [1] * 10)}
    before, runs = {"pass@1": 0.2}, {"grpo": pass_run(0.3, [])}  # the default cold start gains 10 points
    claims = fm.sparse_claims(rl, args, sparse, before, runs)
    assert [c["holds"] for c in claims] == holds and "3 of 64" in claims[2]["measured"]
    assert fm.sparse_claims(rl, args, {}, before, runs) == [] == fm.sparse_claims(rl, args, sparse, before, {})


@pytest.mark.parametrize("good,bad,reset,holds", [
    (0.40, 0.30, 0.38, [True, True]), (0.40, 0.39, 0.45, [False, True]), (0.40, 0.30, 0.31, [True, False])])
def test_the_poor_reference_verdicts(good, bad, reset, holds):
    poor = {"poor reference itself": {"final": {"pass@1": 0.07}, "writes_steps": 0.1},
            "cold start as reference": pass_run(good, [], writes_steps=0.8, final_kl=0.02),
            "poor reference": pass_run(bad, [], writes_steps=0.2, final_kl=0.3),
            "poor reference, reset": pass_run(reset, [], writes_steps=0.6, final_kl=0.01)}
    claims = fm.poor_reference_claims(grpo.Args(), poor, 0.5)
    assert [c["holds"] for c in claims] == holds and "writes steps 0.80" in claims[0]["measured"]
    assert "β = 0.5" in claims[0]["claim"] and fm.poor_reference_claims(grpo.Args(), {}, 0.5) == []



def test_the_critic_studys_run_records_the_training_state_and_no_critic_for_grpo(monkeypatch, tmp_path):
    """`run_method` of the critic study: the chapter's run, plus the bytes of the training state
    and the critic that was trained (none for GRPO)."""
    def fake_train(policy, reference, tokenizer, rl, args, held_out, device, critic=None):
        return {"history": [{"kl": float(i)} for i in range(30)], "evals": [{"pass@1": 0.0}], "state_bytes": 8}

    monkeypatch.setattr(ppo, "train", fake_train)
    monkeypatch.setattr(grpo, "final_evaluation", lambda *args: {"pass@1": 0.25})
    initial, tok = tiny_model(2)
    result = ppo.run_method(initial, tok, loop_args(tmp_path), ppo.Args(), "grpo", ["held"], "cpu", {})
    assert result["state_bytes"] == 8 and result["critic"] is None and result["peak_memory_bytes"] is None
    assert result["final_kl"] == pytest.approx((27 + 28 + 29) / 3)


def test_the_critic_studys_tables_read_each_run_each_length_bin_and_each_critic():
    rl, args = grpo.Args(final_samples=4), ppo.Args(gae_lambda=0.95)
    before = {"pass@1": 0.25, "pass@4": 0.5}

    def run(p1):
        return {"final": {"pass@1": p1, "pass@4": 0.75}, "final_kl": 0.03, "state_bytes": 3 * 2**19,
                "wall_clock_s": 7.0, "history": [{"zero_spread": 0.25}, {"zero_spread": 0.75}]}
    runs = {"grpo": run(0.5), "ppo": run(0.375), "ppo_head": run(0.25)}
    table = ppo.runs_table(rl, args, before, runs, {0.95: runs["ppo"], 1.0: run(0.125)})
    assert [row[0] for row in table["rows"]] == ["cold start", "GRPO", "PPO, critic, λ=0.95", "PPO, value head, λ=0.95",
                                                 "PPO, critic, λ=1"]
    assert table["rows"][2] == ["PPO, critic, λ=0.95", "+12.5", 0.375, 0.75, 0.03, "50%", 1.5, 7.0]
    assert table["rows"][4][1] == "-12.5"
    bins = {"length": [4.2, 12.0], "slope": 1.5, "relative": 140.0}
    table = ppo.variance_table({"Ψ = 1": bins | {"variance": [2384.6, 20441.4]}, "RLOO": bins | {"variance": [63.3, 0.5]}})
    assert table["header"][-1] == "tr Cov at mean length 4 / 12"
    assert table["rows"] == [["Ψ = 1", 1.5, 140.0, "2,380 / 20,400"], ["RLOO", 1.5, 140.0, "63.3 / 0.5"]]
    assert ppo.variance_table({"RLOO": {"length": [], "variance": [], "slope": math.nan, "relative": 0.0}})[
        "header"][-1] == "tr Cov (no length bin)"
    truth = {"error_first_token": 0.2, "error_boundaries": 0.4, "bias": -0.1, "correlation": 0.3, "noise_floor": 0.05}
    assert ppo.truth_table({"cold start": truth})["rows"] == [["cold start", 0.2, 0.4, -0.1, 0.3, 0.05]]


# ------------------------------------------------------------------ zero-spread claims
ZERO_SPREAD_KEYS = {"vanishes": "the gradient vanishes", "medium": "medium-difficulty"}


def zero_spread_summary(**changes):
    """Every verdict holds: at G = 4 the difficulty with pass@1 nearest 0.5 (2 steps) has the most
    groups with a signal (at G = 2 it would be 3 steps)."""
    summary = dict(
        args=zs.Args(group_sizes="2,4", final_samples=8), rl=grpo.Args(group_size=4, final_samples=8, beta=0.04),
        tables={"cold start": {1: {"pass@1": 0.875, 2: 0.75, 4: 0.625}, 2: {"pass@1": 0.375, 2: 0.5, 4: 0.25},
                               3: {"pass@1": 0.0625, 2: 0.375, 4: 0.875}}},
        grads={"zero-spread share": 0.5, "zero-spread pg": 0.0, "mixed pg": 1.5, "zero-spread kl": 0.25})
    return summary | changes


def zero_spread_verdicts(claims):
    return {name: c["holds"] for c in claims for name, key in ZERO_SPREAD_KEYS.items() if key in c["claim"]}


def with_table(steps, column, value):
    summary = zero_spread_summary()
    summary["tables"]["cold start"][steps][column] = value
    return summary


def test_zero_spread_claim_verdicts_on_a_hand_made_summary():
    claims = zs.check_claims(**zero_spread_summary())
    assert zero_spread_verdicts(claims) == {"vanishes": True, "medium": True}
    assert [c["source"] for c in claims] == ["over-long-generations", "over-long-generations"]
    assert claims[1]["measured"] == ("share of G=4 groups with a signal, cold start, by steps: 1: 0.38 (pass@1 0.88), "
                                     "2: 0.75 (pass@1 0.38), 3: 0.12 (pass@1 0.06)")
    assert list(zero_spread_verdicts(zs.check_claims(**zero_spread_summary(grads=None)))) == ["medium"]


@pytest.mark.parametrize("summary,flipped", [
    (zero_spread_summary(grads={"zero-spread share": 0.5, "zero-spread pg": 1e-9, "mixed pg": 1.5,
                                "zero-spread kl": 0.25}), {"vanishes": False}),
    (with_table(1, 4, 0.125), {"medium": False}),  # 1 step now has the most signal at G = 4
    (with_table(3, "pass@1", 0.5), {"medium": False}),  # 3 steps is now the medium difficulty
    (with_table(1, "pass@1", 0.45), {"medium": None}),  # every stratum below 0.5: none is easy, no verdict
    (zero_spread_summary(rl=grpo.Args(group_size=2, final_samples=8, beta=0.04)), {"medium": False}),
    (zero_spread_summary(rl=grpo.Args(group_size=8, final_samples=8, beta=0.04)), {"medium": True}),
])
def test_each_zero_spread_verdict_flips_with_its_measurement(summary, flipped):
    baseline = zero_spread_verdicts(zs.check_claims(**zero_spread_summary()))
    assert zero_spread_verdicts(zs.check_claims(**summary)) == baseline | flipped


# ------------------------------------------------------------------ the β sweep and its claim
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


def sweep_of(kls: dict) -> dict:
    return {b: {"final_kl": kl, "final": {"pass@1": 0.5}} for b, kl in kls.items()}


@pytest.mark.parametrize("kls,holds", [
    ({0.0: 0.5, 0.04: 0.5, 0.5: 0.125}, True),
    ({0.0: 0.5, 0.04: 0.5, 0.5: 0.5001}, False),  # a larger β drifted further than β = 0
    ({0.0: 0.5, 0.04: 0.6, 0.5: 0.125}, False),
])
def test_the_beta_verdict_flips_with_the_kl_of_each_beta(kls, holds):
    (found,) = fm.beta_claims(sweep_of(kls))
    assert found["holds"] is holds and "small β allows" in found["claim"]
    assert fm.beta_claims(sweep_of({0.04: 0.5, 0.5: 0.125})) == [] == fm.beta_claims(sweep_of({0.0: 0.5}))


# ------------------------------------------------------------------ the bench
def test_the_bench_times_generation_and_the_update_of_each_step(tmp_path):
    policy, tok = tiny_model(6)
    start = time.time()
    timings = bench.timed_steps(policy, tok, loop_args(tmp_path), 2, "cpu")
    elapsed = time.time() - start
    assert len(timings) == 2 and all(0 < t["generate_s"] and 0 < t["update_s"] and t["length"] > 0 for t in timings)
    assert sum(t["generate_s"] + t["update_s"] for t in timings) < elapsed


def test_the_bench_table_names_its_batches_and_trl_where_it_ran():
    found = {"completions_per_s": 250.0, "tokens_per_s": 4000.0, "generation_share": 0.41, "seconds_per_update": 0.5,
             "own_loop_generate_s": 2.0, "hf_generate_s": 2.1, "completions_per_step": 128, "trl": "not installed"}
    rows = dict(bench.throughput_table(found, bench.Args(bench_steps=5), "cpu")["rows"])
    assert rows["device, torch threads"] == "cpu, 1" and rows["share of the time in generation"] == "41%"
    assert rows["our sampling loop, 5 x 128 completions, with scoring: seconds"] == 2.0
    assert rows["model.generate, 5 x 128 completions: seconds"] == 2.1 and rows["trl"] == "not installed"
    found |= {"trl": "GRPOTrainer, trl 1.0", "trl_completions_per_s": 166.4, "trl_seconds_per_step": 0.77}
    rows = dict(bench.throughput_table(found, bench.Args(bench_steps=5), "cpu")["rows"])
    assert rows["trl"] == "GRPOTrainer, trl 1.0: 166 completions/s, 0.77 s per step"


# ------------------------------------------------------------------ the chapter on several seeds
def seed_claims(*verdicts):
    return [{"source": "s", "claim": f"c{i}", "measured": f"m{i}", "holds": v} for i, v in enumerate(verdicts)]


def test_a_claim_holds_on_every_seed_only_if_it_holds_on_each():
    claims = seeds.on_every_seed({0: {"claims": seed_claims(True, True, None)},
                                  3: {"claims": seed_claims(True, False, True)}})
    assert [c["holds"] for c in claims] == [True, False, None]
    assert claims[1]["claim"] == "c1 (on every seed)" and claims[1]["measured"] == "seed 0: m1; seed 3: m1"


def test_the_seed_table_gives_each_policy_per_seed_and_the_spread_between_methods():
    def found(cold, rloo, grpo_):
        return {"cold_start": {"pass@1": cold}, "runs": {"rloo": {"final": {"pass@1": rloo}},
                                                         "grpo": {"final": {"pass@1": grpo_}}}}
    table = seeds.pass_table({0: found(0.25, 0.5, 0.375), 1: found(0.25, 0.4375, 0.5)})
    assert table["header"] == ["pass@1", "seed 0", "seed 1", "mean", "spread over seeds (points)"]
    assert table["rows"] == [["cold start", 0.25, 0.25, 0.25, "0.0"], ["RLOO", 0.5, 0.4375, 0.46875, "6.2"],
                             ["GRPO", 0.375, 0.5, 0.4375, "12.5"],
                             ["spread between the methods (points)", "12.5", "6.2", "-", "-"]]


# ------------------------------------------------------------------ CLI and smoke runs
@pytest.mark.parametrize("study,flag,value,message", [
    ("05_zero_spread", "--group-sizes", "1,4", "--group-sizes must be in 2..--final-samples"),
    ("05_critic", "--gae-lambda", "1.5", "--gae-lambda and --critic-lambdas must be in [0, 1]"),
    ("05_critic", "--critic-lambdas", "0.9,-1", "--gae-lambda and --critic-lambdas must be in [0, 1]"),
    ("05_critic", "--truth-problems", "600", "--truth-problems must be at most 512"),
    ("05_critic", "--critic-warmup", "-1", "--critic-warmup must be non-negative"),
    ("05_critic", "--methods", "ppo,a2c", "argument --methods: 'a2c' is not one of grpo"),
    ("05_failure_modes", "--poor-shortcut-prob", "1.5", "--poor-shortcut-prob must be in [0, 1]"),
    ("05_failure_modes", "--rft-n", "0", "--rft-n must be positive"),
    ("05_failure_modes", "--stale-lags", "0,4", "--stale-lags must be positive"),
    ("05_bench", "--bench-steps", "0", "--bench-steps must be positive"),
    ("05_seeds", "--seeds", "1", "--seeds must be at least two different seeds"),
    ("05_seeds", "--seeds", "1,1", "--seeds must be at least two different seeds"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, study, flag, value, message):
    assert message in cli_error(f"studies.{study}", flag, value)


def smoke(tmp_path, read_results, study: str, *flags: str) -> dict:
    """Run a study with --smoke as a program: exit 0, strict JSON, tables a docs page can name."""
    out = tmp_path / study
    run = subprocess.run([sys.executable, f"studies/{study}.py", "--smoke", "--cache", str(tmp_path / "cache"),
                          "--out", str(out), *flags], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    data = read_results(out / "results.json")
    # a docs page shows each table by name (<!-- generated: table RUN NAME -->): a word, and rows as wide as the header
    for name, table in data["metrics"].get("tables", {}).items():
        assert re.fullmatch(r"\w+", name) and all(len(row) == len(table["header"]) for row in table["rows"])
    return data


def test_the_zero_spread_study_runs_with_smoke(tmp_path, read_results):
    data = smoke(tmp_path, read_results, "05_zero_spread")
    table = data["metrics"].pop("tables")["zero_spread"]
    assert all(np.isfinite(v) for v in data["metrics"].values()) and len(data["claims"]) == 2
    assert set(data["zero_spread"]) == {"cold start", "after GRPO"}
    assert table["rows"] == [[name, int(steps), row["pass@1"], f"{row['2']:.0%}"]
                             for name, strata in data["zero_spread"].items() for steps, row in strata.items()]
    assert (tmp_path / "05_zero_spread" / "zero_spread.png").stat().st_size > 1000


def test_the_critic_study_runs_with_smoke(tmp_path, read_results):
    data = smoke(tmp_path, read_results, "05_critic")
    # a smoke cold start never succeeds: no variance slope, critic correlation or right length
    undefined = ("variance_slope", "correlation", "late_length_right")
    tables = data["metrics"].pop("tables")
    assert all(np.isfinite(v) for k, v in data["metrics"].items() if not any(u in k for u in undefined))
    assert [row[2] for row in tables["runs"]["rows"][1:]] == [data["metrics"][f"{m}_pass@1"] for m in
                                                               ("grpo", "ppo", "ppo_head", "ppo_lambda1")]
    assert [row[0] for row in tables["critic_truth"]["rows"]] == list(data["critic_truth"])
    assert {"grpo_state_bytes", "ppo_state_bytes", "ppo_head_state_bytes", "ppo_lambda1_pass@1"} <= set(data["metrics"])
    assert "value_loss" in data["runs"]["ppo"]["history"][0]
    for name in ("learning_curves.png", "gradient_variance.png", "critic_truth.png"):
        assert (tmp_path / "05_critic" / name).stat().st_size > 1000


def test_the_failure_modes_study_runs_with_smoke(tmp_path, read_results):
    data = smoke(tmp_path, read_results, "05_failure_modes", "--stale-lags", "1", "--betas", "")
    tables = data["metrics"].pop("tables")
    assert all(np.isfinite(v) for v in data["metrics"].values())
    assert set(tables) == set(fm.TITLES)
    for name, study in (("staleness", "staleness"), ("sparse", "sparse_reward"), ("poor_reference", "poor_reference")):
        assert [row[:2] for row in tables[name]["rows"]] == [[label, run["final"]["pass@1"]]
                                                             for label, run in data[study].items()]
    assert tables["serving"]["rows"] == [list(item) for item in data["served"].items()]
    assert set(data["staleness"]) == {"on-policy", "age 1, ignore", "age 1, importance"}
    assert data["metrics"]["staleness[age 1, importance]_policy_age"] == 0.5  # ages 0, 1 over two updates
    assert (tmp_path / "05_failure_modes" / "staleness.png").stat().st_size > 1000
    assert set(data["served"]) == {"as trained", "another template", "last operation missing"}
    assert set(data["kl_study"]) == {"0.04"}  # the sweep had only the default β here
    assert set(data["sparse_reward"]) == {"weak cold start", "GRPO", "rejection sampling",
                                          "rejection sampling, then GRPO"}
    assert list(data["poor_reference"]) == ["poor reference itself", "cold start as reference", "poor reference",
                                            "poor reference, reset"]
    assert data["poor_reference"]["poor reference, reset"]["history"][1]["kl"] == 0.0  # reset before update 1
    for name in ("support_and_anchor.png", "reward_kl.png"):
        assert (tmp_path / "05_failure_modes" / name).stat().st_size > 1000
    sources = [c["source"] for c in data["claims"]]
    assert sources.count("whole-game §7.9") == 2 and {"whole-game §7.10", "whole-game §7.1"} <= set(sources)
    assert sources.count("whole-game §7.5") == 2 and "whole-game §7.3, §8" in sources


def test_the_bench_runs_with_smoke(tmp_path, read_results):
    data = smoke(tmp_path, read_results, "05_bench")
    metrics = data["metrics"]
    assert metrics["completions_per_s"] > 0 and 0 < metrics["generation_share"] < 1
    assert all(np.isfinite(v) for k, v in metrics.items() if k != "tables" and not isinstance(v, str))
    assert metrics["tables"]["throughput"]["rows"][1][1] == metrics["completions_per_s"]


def test_the_seeds_study_runs_with_smoke(tmp_path, read_results):
    data = smoke(tmp_path, read_results, "05_seeds", "--seeds", "0,3")
    table = data["metrics"].pop("tables")["pass_at_1"]
    assert all(np.isfinite(v) for k, v in data["metrics"].items() if "late_length_right" not in k)
    assert [row[1:3] for row in table["rows"][1:-1]] == [[data["metrics"][f"seed{s}_{m}_pass@1"] for s in (0, 3)]
                                                         for m in grpo.ESTIMATORS]
    assert len(data["claims"]) == 4 and all("seed 0: " in c["measured"] and "; seed 3: " in c["measured"]
                                            for c in data["claims"])
    chapter = subprocess.run([sys.executable, "05_grpo_rloo.py", "--smoke", "--cache", str(tmp_path / "cache"), "--out",
                              str(tmp_path / "chapter")], cwd=ROOT, capture_output=True, timeout=600)
    assert chapter.returncode == 0
    chapter = read_results(tmp_path / "chapter" / "results.json")["metrics"]
    # seed 0 is the chapter's default run
    assert {k: v for k, v in chapter.items() if k != "tables" and "wall_clock" not in k} == {
        k.removeprefix("seed0_"): v for k, v in data["metrics"].items() if k.startswith("seed0_") and "wall_clock" not in k}
