"""05_grpo_rloo: the group advantages, k3, the clip, the loss normalisations and the step (against
a token-by-token update); the RL loop's wiring (recorded with spies), the experiment's runs, the
claim checker's verdicts both ways, CLI checks, smoke runs. The studies beside the chapter are
tested in test_05_studies.py."""

import dataclasses
import importlib
import math
import time

import numpy as np
import pytest
import torch

import common
import lm_world
from lm_pins import tiny_model

grpo = importlib.import_module("05_grpo_rloo")


# -------------------------------------------------------------------------------- advantages
def test_appendix_a_exactly():
    rewards = torch.tensor([[0.0, 1.0, 0.0, 1.0]])
    assert grpo.group_advantages(rewards, "dr_grpo").tolist() == [[-0.5, 0.5, -0.5, 0.5]]
    assert math.isclose(grpo.group_advantages(rewards, "rloo")[0, 1].item(), 2 / 3, rel_tol=1e-6)
    torch.testing.assert_close(grpo.group_advantages(rewards, "rloo"), torch.tensor([[-2 / 3, 2 / 3, -2 / 3, 2 / 3]]))
    # GRPO divides by the sample std (G - 1 in the denominator, as TRL) plus ε: 0.5 / (sqrt(1/3) + 1e-4)
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    torch.testing.assert_close(grpo.group_advantages(rewards, "grpo"),
                               torch.tensor([[-expected, expected, -expected, expected]]), atol=0, rtol=1e-6)


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
def test_a_batch_with_no_completion_token_has_loss_zero_not_nan(norm):
    loss = grpo.masked_loss(torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.bool), norm, 3)
    assert loss.item() == 0.0


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
    """On a real tiny LM: completions with A > 0 gain log-probability, those with A < 0 lose it;
    the reported KL is the sampling policy's k3 to the reference, and with three inner
    iterations of a large step the clip acts."""
    model, tok = tiny_model(1)
    reference = lm_world.frozen_copy(tiny_model(2)[0])
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n"] * 8)
    r = lm_world.sample_completions(model, ids, mask, 10, tok.eos_token_id, tok.pad_token_id,
                                  torch.Generator().manual_seed(0))
    advantages = torch.tensor([1.0, -1.0] * 4)[:, None] * r.completion_mask
    before, _ = lm_world.token_logprobs(model, r.sequences, r.attention_mask, r.prompt_length)
    with torch.no_grad():
        ref, _ = lm_world.token_logprobs(reference, r.sequences, r.attention_mask, r.prompt_length)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    settings = grpo.Args(clip_eps=0.2, beta=0.1, inner_iters=3, loss_norm="sequence", max_new_tokens=10,
                         max_grad_norm=100.0)
    stats = grpo.policy_gradient_step(model, optimizer, r, advantages, ref, settings)
    after, _ = lm_world.token_logprobs(model, r.sequences, r.attention_mask, r.prompt_length)
    change = ((after - before) * r.completion_mask).sum(1).detach()
    assert change[0::2].mean() > 0 > change[1::2].mean()
    log_ratio = (ref - before.detach())[r.completion_mask]
    assert stats["kl"] == pytest.approx(float((log_ratio.exp() - log_ratio - 1).mean()), rel=1e-5)
    assert stats["kl"] > 0 and stats["grad_norm"] > 0 and stats["clip_fraction"] > 0
    assert set(stats) == {"loss", "kl", "entropy", "clip_fraction", "grad_norm"}


@pytest.mark.parametrize("norm", grpo.LOSS_NORMS)
def test_the_step_on_an_all_padding_batch_reports_zeros_not_nan(norm):
    model, tok = tiny_model(1)
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n"] * 2)
    r = lm_world.sample_completions(model, ids, mask, 4, tok.eos_token_id, tok.pad_token_id,
                                  torch.Generator().manual_seed(0))
    r.completion_mask[:] = False
    before = [p.clone() for p in model.parameters()]
    settings = grpo.Args(clip_eps=0.2, beta=0.1, inner_iters=1, loss_norm=norm, max_new_tokens=4, max_grad_norm=1.0)
    stats = grpo.policy_gradient_step(model, torch.optim.SGD(model.parameters(), lr=0.1), r,
                                      torch.ones(r.completion_mask.shape), torch.zeros(r.completion_mask.shape),
                                      settings)
    assert all(math.isfinite(v) for v in stats.values()) and stats["kl"] == 0 and stats["entropy"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


# ------------------------------------------------------- the step on a table of log-probs
class TokenTable(torch.nn.Module):
    """A stand-in policy whose log-prob of each completion token is a free parameter (B, T), so
    that the step's update can be followed token by token; `entropy` is what it reports."""

    def __init__(self, logp: torch.Tensor, entropy: torch.Tensor):
        super().__init__()
        self.logp = torch.nn.Parameter(logp.clone())
        self.register_buffer("entropy", entropy.clone())


def table_logprobs(policy, sequences, attention_mask, prompt_length, with_entropy=False):
    return policy.logp * 1.0, (policy.entropy.clone() if with_entropy else None)


def table_completions(mask: torch.Tensor) -> lm_world.Completions:
    B, T = mask.shape
    return lm_world.Completions(sequences=torch.zeros(B, 2 + T, dtype=torch.long),
                              attention_mask=torch.ones(B, 2 + T, dtype=torch.long), completion_mask=mask,
                              logprobs=torch.zeros(B, T), truncated=torch.zeros(B, dtype=torch.bool),
                              prompt_length=2)


def naive_step(theta, mask, advantages, ref, clip_eps, beta, inner_iters, norm, max_new_tokens, lr,
               max_grad_norm):
    """The step token by token in plain floats: SGD on -min(ρA, clip(ρ)A) + β k3(π_θ, π_ref),
    ρ = π_θ/π_old with π_old the sampling policy, d k3/d log π = 1 - π_ref/π."""
    theta = [row[:] for row in theta]
    old = [row[:] for row in theta]
    B, T = len(theta), len(theta[0])
    count = sum(sum(row) for row in mask)
    stats = {"loss": 0.0, "clip_fraction": 0.0, "grad_norm": 0.0}
    stats["kl"] = sum(math.exp(ref[b][t] - old[b][t]) - (ref[b][t] - old[b][t]) - 1
                      for b in range(B) for t in range(T) if mask[b][t]) / count
    for _ in range(inner_iters):
        grad = [[0.0] * T for _ in range(B)]
        loss, clipped = 0.0, 0
        for b in range(B):
            weight = {"sequence": 1 / (sum(mask[b]) * B), "token": 1 / count, "constant": 1 / (B * max_new_tokens)}[norm]
            for t in range(T):
                if not mask[b][t]:
                    continue
                ratio, a = math.exp(theta[b][t] - old[b][t]), advantages[b][t]
                bounded = min(max(ratio, 1 - clip_eps), 1 + clip_eps)
                active = bounded * a < ratio * a
                clipped += active
                k3 = math.exp(ref[b][t] - theta[b][t]) - (ref[b][t] - theta[b][t]) - 1
                loss += weight * (-min(ratio * a, bounded * a) + beta * k3)
                grad[b][t] = weight * ((0.0 if active else -ratio * a) + beta * (1 - math.exp(ref[b][t] - theta[b][t])))
        norm_ = math.sqrt(sum(g * g for row in grad for g in row))
        scale = min(1.0, max_grad_norm / (norm_ + 1e-6))
        theta = [[theta[b][t] - lr * scale * grad[b][t] for t in range(T)] for b in range(B)]
        stats["loss"] += loss / inner_iters
        stats["clip_fraction"] += clipped / count / inner_iters
        stats["grad_norm"] += norm_ / inner_iters
    return theta, stats


MASK = torch.tensor([[True, True, True, False], [True, True, False, False], [True, False, False, False]])
THETA = torch.tensor([[-1.0, -0.5, -2.0, -3.0], [-0.2, -1.5, -0.7, -0.1], [-0.9, -2.5, -0.3, -1.1]])
REF = torch.tensor([[-1.3, -0.4, -1.0, -0.6], [-0.2, -2.0, -0.5, -2.2], [-0.5, -0.8, -1.9, -0.4]])
ADV = torch.tensor([[1.5], [-1.0], [0.5]]) * MASK
ENTROPY = torch.tensor([[0.5, 1.0, 1.5, 9.0], [2.0, 0.25, 9.0, 9.0], [0.75, 9.0, 9.0, 9.0]])


def table_step(monkeypatch, theta=THETA, advantages=ADV, ref=REF, lr=1.0, **changes):
    monkeypatch.setattr(grpo, "token_logprobs", table_logprobs)
    policy = TokenTable(theta, ENTROPY)
    settings = dict(clip_eps=0.2, beta=0.3, inner_iters=3, loss_norm="sequence", max_new_tokens=5,
                    max_grad_norm=100.0) | changes
    stats = grpo.policy_gradient_step(policy, torch.optim.SGD(policy.parameters(), lr=lr), table_completions(MASK),
                                      advantages, ref, grpo.Args(**settings))
    return policy.logp.detach(), stats, settings


@pytest.mark.parametrize("loss_norm", grpo.LOSS_NORMS)
@pytest.mark.parametrize("inner_iters,max_grad_norm", [(1, 100.0), (3, 100.0), (3, 0.5)])
def test_the_step_matches_a_token_by_token_update(monkeypatch, loss_norm, inner_iters, max_grad_norm):
    """The whole step against plain floats: the clipped surrogate against the sampling policy
    (held fixed over the μ iterations), the β·k3 term, the normalisation, gradient clipping, and
    the statistics (KL and entropy of the sampling policy, means over iterations)."""
    theta, stats, s = table_step(monkeypatch, inner_iters=inner_iters, loss_norm=loss_norm,
                                 max_grad_norm=max_grad_norm)
    expected, expected_stats = naive_step(THETA.tolist(), MASK.tolist(), ADV.tolist(), REF.tolist(), s["clip_eps"],
                                          s["beta"], inner_iters, loss_norm, s["max_new_tokens"], 1.0, max_grad_norm)
    torch.testing.assert_close(theta, torch.tensor(expected), rtol=1e-5, atol=1e-6)
    entropy = (ENTROPY * MASK).sum().item() / MASK.sum().item()
    assert stats.keys() == {"loss", "kl", "entropy", "clip_fraction", "grad_norm"}
    assert stats["entropy"] == pytest.approx(entropy)
    for key, value in expected_stats.items():
        assert stats[key] == pytest.approx(value, rel=1e-5), key


def test_the_clip_acts_from_the_second_iteration_against_the_sampling_policy(monkeypatch):
    """With a large step, the second iteration's ratio π_θ/π_old leaves [1-ε, 1+ε] on some
    tokens: the clip fraction is 0 on the first iteration and positive after."""
    _, one, _ = table_step(monkeypatch, inner_iters=1)
    _, two, _ = table_step(monkeypatch, inner_iters=2)
    assert one["clip_fraction"] == 0 and two["clip_fraction"] > 0


def test_masked_cells_change_nothing_in_the_step(monkeypatch):
    noise = torch.where(MASK, 0.0, 7.0)
    theta, stats, _ = table_step(monkeypatch)
    theta2, stats2, _ = table_step(monkeypatch, theta=THETA - noise, advantages=ADV + noise, ref=REF + noise)
    assert torch.equal(theta[MASK], theta2[MASK]) and stats == pytest.approx(stats2)
    assert torch.equal(theta[~MASK], THETA[~MASK])  # no gradient reaches a masked cell


def test_the_kl_term_pulls_toward_the_reference_with_the_gradient_of_k3_policy_against_reference(monkeypatch):
    """No advantage, β = 1, one SGD step of size 1, token normalisation: each log-prob moves by
    -(1 - π_ref/π)/n, the gradient of k3(π_θ, π_ref) = π_ref/π - log(π_ref/π) - 1 (the reverse
    k3(π_ref, π_θ) would give π/π_ref - 1)."""
    theta, stats, _ = table_step(monkeypatch, advantages=torch.zeros_like(ADV), beta=1.0, inner_iters=1,
                                 loss_norm="token")
    n = MASK.sum()
    expected = THETA - (1 - torch.exp(REF - THETA)) / n
    torch.testing.assert_close(theta[MASK], expected[MASK])
    toward = (theta - THETA).sign() == (REF - THETA).sign()
    assert toward[MASK & (REF != THETA)].all()
    k3 = torch.exp(REF - THETA) - (REF - THETA) - 1
    assert stats["kl"] == pytest.approx(float(k3[MASK].mean()))


# ------------------------------------------------------------------------------ the RL loop
def text_reward(problems, texts, truncated):
    """A verifier stand-in whose reward depends on the problem and on the text, so that a random
    model's groups have a spread, and a completion scored against another's text shows."""
    return torch.tensor([float((len(t) + p.start) % 2) for p, t in zip(problems, texts)]) * (~truncated).float()


def loop_args(tmp_path, **changes):
    """A small task space (one step, values up to 30): the 512 held-out prompts cover most of it,
    so a training batch that ignored the exclusion would hit them."""
    settings = dict(rl_steps=3, prompts=4, group_size=4, eval_every=2, max_new_tokens=8, eval_problems=4,
                    eval_samples=2, min_steps=1, max_steps=1, max_value=30, max_operand=3, clip_eps=0.3, beta=0.07,
                    inner_iters=2, max_grad_norm=0.9, warmup=3, lr=0.01, loss_norm="token", seed=5)
    return grpo.Args(device="cpu", out=str(tmp_path / "out"), **settings | changes)


def spy_on_train(monkeypatch, tmp_path, method, **changes):
    """Run `train` with the verifier replaced by `text_reward`, and record what it passes to the
    verifier, to `policy_gradient_step` (which only records) and to the held-out evaluation."""
    calls = {"rewards": [], "steps": [], "evals": [], "generators": set(), "eval_generators": set()}

    def verifier(problems, texts, truncated):
        rewards = text_reward(problems, texts, truncated)
        calls["rewards"].append((list(problems), list(texts), rewards))
        return rewards

    def step(policy, optimizer, completions, advantages, ref_logp, settings):
        calls["steps"].append(dict(policy=policy, lr=optimizer.param_groups[0]["lr"], completions=completions,
                                   advantages=advantages, ref_logp=ref_logp, settings=settings))
        optimizer.step()  # no gradient: nothing moves, but the schedule sees a step
        return {"loss": 0.5, "kl": float(len(calls["steps"])), "entropy": 1.0, "clip_fraction": 0.0, "grad_norm": 2.0}

    def evaluate(policy, tokenizer, problems, samples, max_new_tokens, generator, device):
        calls["evals"].append((problems, samples, max_new_tokens))
        calls["eval_generators"].add(generator)
        return {"pass@1": len(calls["evals"]) / 10, "length": 3.0}

    def sample(policy, tokenizer, prompts, max_new_tokens, generator, device):
        calls["generators"].add(generator)
        return real_sample(policy, tokenizer, prompts, max_new_tokens, generator, device)

    real_sample = grpo.sample
    monkeypatch.setattr(grpo, "sample", sample)
    monkeypatch.setattr(grpo, "verifier_rewards", verifier)
    monkeypatch.setattr(grpo, "policy_gradient_step", step)
    monkeypatch.setattr(grpo, "evaluate", evaluate)
    args = loop_args(tmp_path, **changes)
    policy, tok = tiny_model(6)
    reference = lm_world.frozen_copy(tiny_model(7)[0])
    held_out = args.task.held_out(args.eval_problems)
    result = grpo.train(policy, reference, tok, args, method, held_out, "cpu")
    return result, calls, args, policy, reference, tok, held_out


@pytest.mark.parametrize("method", grpo.ESTIMATORS)
def test_train_pairs_each_completion_with_its_own_problem_reward_and_advantage(monkeypatch, tmp_path, method):
    """What `train` hands to the step: each completion's own group advantage (from its own
    problem and text) on each of its tokens, the reference's log-probs of those tokens, the
    method's loss normalisation and the run's knobs; the held-out problems never train."""
    result, calls, args, policy, reference, tok, held_out = spy_on_train(monkeypatch, tmp_path, method)
    N, G = args.prompts, args.group_size
    assert len(calls["steps"]) == args.rl_steps == len(calls["rewards"]) == len(result["history"])
    held_prompts = {p.prompt for p in args.task.held_out()}
    spreads = 0
    for step, (problems, _, _), record in zip(calls["steps"], calls["rewards"], result["history"]):
        completions = step["completions"]
        assert all(problems[i * G + j] == problems[i * G] for i in range(N) for j in range(G))  # grouped rows
        assert not {p.prompt for p in problems} & held_prompts
        texts = lm_world.completion_texts(tok, completions)
        rewards = text_reward(problems, texts, completions.truncated).view(N, G)
        spreads += int((~grpo.zero_spread(rewards)).sum())
        expected = grpo.group_advantages(rewards, method).flatten()[:, None] * completions.completion_mask
        assert torch.equal(step["advantages"], expected)
        with torch.no_grad():
            ref_logp, _ = lm_world.token_logprobs(reference, completions.sequences, completions.attention_mask,
                                                completions.prompt_length)
        torch.testing.assert_close(step["ref_logp"], ref_logp)
        assert step["policy"] is policy
        norm = "constant" if method == "dr_grpo" else "token"
        knobs = ("clip_eps", "beta", "inner_iters", "loss_norm", "max_new_tokens", "max_grad_norm")
        assert tuple(getattr(step["settings"], k) for k in knobs) == (
            args.clip_eps, args.beta, args.inner_iters, norm, args.max_new_tokens, args.max_grad_norm)
        assert record["reward"] == pytest.approx(float(rewards.mean()))
        assert record["zero_spread"] == pytest.approx(float(grpo.zero_spread(rewards).float().mean()))
        assert record["length"] == pytest.approx(float(completions.completion_mask.sum(1).float().mean()))
        assert record["truncated"] == pytest.approx(float(completions.truncated.float().mean()))
    assert spreads > 0  # some groups have a spread: their advantages are not all zero
    assert [h["kl"] for h in result["history"]] == [1.0, 2.0, 3.0]  # the step's statistics, in order
    assert [s["lr"] for s in calls["steps"]] == pytest.approx([args.lr / 3, 2 * args.lr / 3, args.lr])  # warmup
    assert result["evals"] == [{"step": s, "samples": s * N * G, "pass@1": (i + 1) / 10, "length": 3.0}
                               for i, s in enumerate([0, 2, 3])]
    assert all(e == (held_out, args.eval_samples, args.max_new_tokens) for e in calls["evals"])
    (train_draws,), (eval_draws,) = calls["generators"], calls["eval_generators"]  # one stream each
    assert train_draws.initial_seed() != eval_draws.initial_seed()


# ------------------------------------------------------------------ optimiser and the runs
@pytest.mark.parametrize("name,kind", [("adam", torch.optim.AdamW), ("sgd", torch.optim.SGD)])
def test_optimizer_warms_the_learning_rate_up_linearly(tmp_path, name, kind):
    model, _ = tiny_model()
    optimizer, schedule = grpo.make_optimizer(model, loop_args(tmp_path, optimizer=name, lr=0.02, warmup=4))
    assert type(optimizer) is kind and optimizer.param_groups[0].get("weight_decay", 0.0) == 0.0
    assert len(optimizer.param_groups[0]["params"]) == len(list(model.parameters()))
    rates = []
    for _ in range(6):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert rates == pytest.approx([0.005, 0.01, 0.015, 0.02, 0.02, 0.02])


def test_run_method_trains_a_copy_at_its_beta_and_reports_the_late_kl(monkeypatch, tmp_path):
    """`run_method` trains a copy (the cold start stays as it was) against a frozen copy of the
    cold start, at the β it is given, and reports the KL of the last 10% of updates."""
    initial, tok = tiny_model(2)
    snapshot = [p.detach().clone() for p in initial.parameters()]
    seen = {}

    def fake_train(policy, reference, tokenizer, args, method, held_out, device):
        seen.update(policy=policy, reference=reference, beta=args.beta, method=method, held_out=held_out)
        assert policy is not initial and not any(p.requires_grad for p in reference.parameters())
        assert all(torch.equal(a, b) for a, b in zip(reference.parameters(), snapshot))
        with torch.no_grad():
            next(policy.parameters()).add_(1.0)
        return {"history": [{"kl": float(i)} for i in range(30)], "evals": [{"pass@1": 0.0}]}

    def fake_final(policy, tokenizer, args, held_out, device):
        seen["evaluated"] = policy
        return {"pass@1": 0.25}

    monkeypatch.setattr(grpo, "train", fake_train)
    monkeypatch.setattr(grpo, "final_evaluation", fake_final)
    args = loop_args(tmp_path, beta=0.5)
    start = time.time()
    result = grpo.run_method(initial, tok, args, "rloo", ["held"], "cpu")
    assert 0 < result["wall_clock_s"] < time.time() - start
    assert seen["beta"] == 0.5 and seen["method"] == "rloo" and seen["held_out"] == ["held"]
    assert result["policy"] is seen["policy"] is seen["evaluated"] and result["final"] == {"pass@1": 0.25}
    assert result["final_kl"] == pytest.approx((27 + 28 + 29) / 3)  # the last 3 of 30 updates
    assert all(torch.equal(a, b) for a, b in zip(initial.parameters(), snapshot))
    assert not torch.equal(next(result["policy"].parameters()), snapshot[0])


def test_a_short_run_reports_the_kl_of_its_last_update(monkeypatch, tmp_path):
    def fake_train(policy, reference, tokenizer, args, method, held_out, device):
        return {"history": [{"kl": float(i)} for i in range(5)], "evals": [{"pass@1": 0.0}]}

    monkeypatch.setattr(grpo, "train", fake_train)
    monkeypatch.setattr(grpo, "final_evaluation", lambda *args: {"pass@1": 0.0})
    initial, tok = tiny_model(2)
    assert grpo.run_method(initial, tok, loop_args(tmp_path), "grpo", [], "cpu")["final_kl"] == 4.0


def test_final_evaluation_uses_the_same_draws_before_and_after_with_every_k(monkeypatch, tmp_path):
    calls = []

    def fake_evaluate(policy, tokenizer, problems, samples, max_new_tokens, generator, device, ks=(1,)):
        calls.append((problems, samples, max_new_tokens, ks, generator.get_state()))
        return {}

    monkeypatch.setattr(grpo, "evaluate", fake_evaluate)
    args = loop_args(tmp_path, final_samples=8)
    for _ in range(2):
        grpo.final_evaluation(None, None, args, ["held"], "cpu")
    assert calls[0][:4] == (["held"], 8, args.max_new_tokens, (1, 4, 8))
    assert torch.equal(calls[0][4], calls[1][4])


# ------------------------------------------------------------------------------ claims
CLAIM_KEYS = {"appendix A": "R = [0, 1, 0, 1]: centred", "appendix A RLOO": "R = [0, 1, 0, 1]: RLOO", "GAE": "GAE is the default", "per token": "every token of a "
              "completion", "flattens": "normalisation flattens", "0/0": "without ε: 0 / 0",
              "tiny differences": "tiny differences made full-size"}


def verdicts(claims):
    found = {}
    for c in claims:
        (name,) = [n for n, key in CLAIM_KEYS.items() if key in c["claim"]]
        found[name] = c["holds"]
    return found


def test_claim_verdicts_on_the_chapters_estimators():
    """The chapter's claims are exact: the arithmetic decides them, no run needed (the claims
    that need training decide over seeds in studies/05_seeds.py)."""
    claims = grpo.check_claims(grpo.Args(group_size=4))
    assert verdicts(claims) == {"appendix A": True, "appendix A RLOO": True, "GAE": False, "per token": True,
                                "flattens": True, "0/0": True, "tiny differences": True}
    assert [c["source"] for c in claims] == ["whole-game App. A", "whole-game App. A", "survey §4.1.1",
                                             "whole-game §4; over-long-generations, GRPO"] + ["whole-game §7.8"] * 3
    assert [c["measured"] for c in claims[:2]] == ["[-0.5, 0.5, -0.5, 0.5]", "0.6667"]
    assert claims[4]["measured"] == "all-equal group of G=4: max |A| = 0" and "A = nan" in claims[5]["measured"]
    # a lone right answer: 1 / std = 2 per unit (std 0.5); one score 0.001 below: 1 / (std + ε), std = 0.0005
    assert "1,667 per unit of reward gap" in claims[6]["measured"] and "2.00 per unit" in claims[6]["measured"]
    # the wrong completion 3 of 2 tokens: GRPO's -0.5 / (sqrt(1/3) + ε) on both
    assert "2 tokens of the wrong completion 3: [-0.866, -0.866]" in claims[3]["measured"]


def per_token_estimate(monkeypatch):
    """A per-token estimate in place of the shared A_i (A_i scaled along the completion, as a
    critic would give)."""
    shared = grpo.token_advantages

    def scaled(rewards, method, completion_mask):
        return shared(rewards, method, completion_mask) * torch.linspace(1, 2, completion_mask.shape[1])

    monkeypatch.setattr(grpo, "token_advantages", scaled)


def test_the_gae_and_per_token_verdicts_read_the_advantages_the_loop_hands_to_the_loss(monkeypatch):
    """GRPO's verdict is "no GAE" and "one A_i on every token" because every token of a
    completion gets the same A_i; a per-token estimate flips both."""
    per_token_estimate(monkeypatch)
    found = verdicts(grpo.check_claims(grpo.Args()))
    assert found["GAE"] is True and found["per token"] is False


def test_the_per_token_verdict_fails_when_padding_keeps_an_advantage(monkeypatch):
    """Every token gets A_i, padding none: an advantage left on the padding is no match (and GAE's
    verdict, which reads the completion's own tokens only, stays no)."""
    monkeypatch.setattr(grpo, "token_advantages",
                        lambda rewards, method, mask: grpo.group_advantages(rewards, method).T.expand(mask.shape))
    found = verdicts(grpo.check_claims(grpo.Args()))
    assert found["per token"] is False and found["GAE"] is False


def test_the_appendix_a_verdict_fails_when_rloo_is_off(monkeypatch):
    """The hand case must hold to the digit: an RLOO advantage of 0.5 instead of 2/3 is no match."""
    shared = grpo.group_advantages

    def rloo_off(rewards, method, eps=1e-4):
        return shared(rewards, method, eps) * (0.75 if method == "rloo" else 1.0)

    monkeypatch.setattr(grpo, "group_advantages", rloo_off)
    found = verdicts(grpo.check_claims(grpo.Args()))
    assert found["appendix A RLOO"] is False and found["appendix A"] is True


@pytest.mark.parametrize("advantage,expected", [
    (lambda r, m, eps=1e-4: (r - r.mean(1, keepdim=True)) / r.std(1, keepdim=True), (False, True, True)),  # ε ignored
    (lambda r, m, eps=1e-4: r - r.mean(1, keepdim=True), (True, False, False)),  # centred only: no division at all
    (lambda r, m, eps=1e-4: r - 0.5, (False, False, False)),  # an all-equal group keeps a non-zero advantage
])
def test_the_homogeneous_group_verdicts_follow_the_normalisation(monkeypatch, advantage, expected):
    monkeypatch.setattr(grpo, "group_advantages", advantage)
    found = verdicts(grpo.check_claims(grpo.Args()))
    assert (found["flattens"], found["0/0"], found["tiny differences"]) == expected


def test_token_advantages_give_each_completion_its_own_group_advantage_on_its_tokens_only():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False], [True, True, True], [False, False, False]])
    per_token = grpo.token_advantages(rewards, "dr_grpo", mask)
    assert per_token.tolist() == [[0.5, 0.5, 0.0], [-0.5, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


def test_lengths_by_outcome_split_right_from_wrong_completions():
    lengths, rewards = torch.tensor([4, 20, 30, 6]), torch.tensor([0.0, 1.0, 1.0, 0.0])
    assert grpo.lengths_by_outcome(lengths, rewards) == {"length_right": 25.0, "length_wrong": 5.0}
    assert math.isnan(grpo.lengths_by_outcome(lengths, torch.zeros(4))["length_right"])


# ------------------------------------------------------------------ CLI and smoke runs
@pytest.mark.parametrize("flag,value,message", [
    ("--group-size", "1", "--group-size must be at least 2"),
    ("--methods", "grpo,a2c", "argument --methods: 'a2c' is not one of reinforce"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("05_grpo_rloo.py", flag, value)


def smoke_args(tmp_path, **changes):
    return dataclasses.replace(grpo.Args(smoke=True, device="cpu", out=str(tmp_path / "out"),
                                         cache=str(tmp_path / "cache")), **changes)


def without_timing(metrics: dict) -> dict:
    """The metrics without their wall-clock times: the keys that hold one, and the tables' seconds columns."""
    kept = {k: v for k, v in metrics.items() if "wall_clock" not in k and k != "tables"}
    for name, table in metrics.get("tables", {}).items():
        columns = [i for i, h in enumerate(table["header"]) if h != "seconds"]
        kept[f"table {name}"] = [[row[i] for i in columns] for row in table["rows"]]
    return kept


def test_the_final_table_holds_each_policys_held_out_numbers():
    """The printed table (the docs' table) reads each run's own numbers: Δ in points against the
    cold start, pass@1 and pass@k, late KL, length, the mean zero-spread share and the seconds."""
    args = grpo.Args(final_samples=4)
    before = {"pass@1": 0.25, "pass@4": 0.5, "length": 13.0}

    def run(p1, spreads):
        return {"final": {"pass@1": p1, "pass@4": 0.75, "length": 20.0}, "final_kl": 0.03, "wall_clock_s": 9.0,
                "history": [{"zero_spread": z, "length_right": 1.0, "length_wrong": 2.0} for z in spreads]}
    table = grpo.collect_metrics(args, {"rloo": run(0.5, [0.25, 0.75]), "grpo": run(0.125, [0.0, 0.5])},
                                 before)["tables"]["results"]
    assert table["header"] == ["policy", "Δ pass@1 (points)", "pass@1", "pass@4", "KL", "length", "zero-spread",
                               "seconds"]
    assert table["rows"] == [["cold start", "-", 0.25, 0.5, 0.0, 13.0, "-", "-"],
                             ["RLOO", "+25.0", 0.5, 0.75, 0.03, 20.0, "50%", 9.0],
                             ["GRPO", "-12.5", 0.125, 0.75, 0.03, 20.0, "25%", 9.0]]


def test_smoke_run_writes_results_and_figures_and_repeats_exactly(tmp_path, read_results):
    first = grpo.main(smoke_args(tmp_path))
    data = read_results(tmp_path / "out" / "results.json")
    for name in ("learning_curves.png", "training.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    # a smoke cold start never succeeds: no right length
    undefined = ("late_length_right",)
    assert data["metrics"] == common.json_ready(first["metrics"])  # NaN is written as null
    assert all(np.isfinite(v) for k, v in first["metrics"].items() if k != "tables" and not any(u in k for u in undefined))
    table = data["metrics"]["tables"]["results"]
    assert [row[0] for row in table["rows"]] == ["cold start", *grpo.NAMES.values()]
    assert all(len(row) == len(table["header"]) for row in table["rows"])
    history = data["runs"]["grpo"]["history"]
    assert {"reward", "kl", "entropy", "length", "zero_spread", "clip_fraction", "grad_norm"} <= set(history[0])
    again = grpo.main(smoke_args(tmp_path))  # the cold start now comes from the cache
    assert common.json_ready(without_timing(again["metrics"])) == common.json_ready(without_timing(first["metrics"]))
    rerun = read_results(tmp_path / "out" / "results.json")["runs"]["grpo"]["history"]
    assert rerun == history


def test_model_flag_loads_a_saved_causal_lm(tmp_path):
    torch.manual_seed(0)
    tok = lm_world.make_char_tokenizer()
    lm_world.make_tiny_lm(tok, 16, 1, 2).save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    result = grpo.main(smoke_args(tmp_path, model=str(tmp_path / "tiny"), methods="rloo"))
    assert "rloo_pass@1" in result["metrics"]
