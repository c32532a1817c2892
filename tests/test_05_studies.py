"""The studies beside 05_grpo_rloo (studies/05_*.py): PPO's token critic (GAE over tokens, its
truth, gradient variance by length; its claims: test_05_critic_claims.py), the failure modes'
loop (the rest of that study: test_05_failure_modes_claims.py), the bench, the chapter's
experiment on several seeds (its claims: test_05_seeds_claims.py; groups with no reward spread:
test_05_zero_spread_claims.py); the tables each study prints (and the docs show). Each study's
loop is the chapter's with its own additions: a pin holds it to the chapter's numbers with the
additions off. CLI checks and a --smoke run of each study."""

import dataclasses
import importlib
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
    ("05_critic", "--gae-lambda", "1.5", "--gae-lambda and --critic-lambdas must be in [0, 1]"),
    ("05_critic", "--critic-lambdas", "0.9,-1", "--gae-lambda and --critic-lambdas must be in [0, 1]"),
    ("05_critic", "--truth-problems", "600", "--truth-problems must be at most 512"),
    ("05_critic", "--critic-warmup", "-1", "--critic-warmup must be non-negative"),
    ("05_critic", "--methods", "ppo,a2c", "argument --methods: 'a2c' is not one of grpo"),
    ("05_bench", "--bench-steps", "0", "--bench-steps must be positive"),
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


def test_the_bench_runs_with_smoke(tmp_path, read_results):
    data = smoke(tmp_path, read_results, "05_bench")
    metrics = data["metrics"]
    assert metrics["completions_per_s"] > 0 and 0 < metrics["generation_share"] < 1
    assert all(np.isfinite(v) for k, v in metrics.items() if k != "tables" and not isinstance(v, str))
    assert metrics["tables"]["throughput"]["rows"][1][1] == metrics["completions_per_s"]
