"""05_grpo_rloo: the group advantages, k3, the clip, the loss normalisations and the step (against
a token-by-token update); the RL loop's wiring (recorded with spies), the studies, the gradient by
reward spread, the claim checker's verdicts both ways, CLI checks, smoke runs."""

import dataclasses
import importlib
import itertools
import math
import time

import numpy as np
import pytest
import torch

import common
from lm_pins import hand_completions, tiny_model

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
    reference = common.frozen_copy(tiny_model(2)[0])
    ids, mask = common.encode_prompts(tok, ["1+2\n"] * 8)
    r = common.sample_completions(model, ids, mask, 10, tok.eos_token_id, tok.pad_token_id,
                                  torch.Generator().manual_seed(0))
    advantages = torch.tensor([1.0, -1.0] * 4)[:, None] * r.completion_mask
    before, _ = common.token_logprobs(model, r.sequences, r.attention_mask, r.prompt_length)
    with torch.no_grad():
        ref, _ = common.token_logprobs(reference, r.sequences, r.attention_mask, r.prompt_length)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    stats = grpo.policy_gradient_step(model, optimizer, r, advantages, ref, clip_eps=0.2, beta=0.1,
                                      inner_iters=3, loss_norm="sequence", max_new_tokens=10, max_grad_norm=100.0)
    after, _ = common.token_logprobs(model, r.sequences, r.attention_mask, r.prompt_length)
    change = ((after - before) * r.completion_mask).sum(1).detach()
    assert change[0::2].mean() > 0 > change[1::2].mean()
    log_ratio = (ref - before.detach())[r.completion_mask]
    assert stats["kl"] == pytest.approx(float((log_ratio.exp() - log_ratio - 1).mean()), rel=1e-5)
    assert stats["kl"] > 0 and stats["grad_norm"] > 0 and stats["clip_fraction"] > 0
    assert set(stats) == {"loss", "kl", "entropy", "clip_fraction", "grad_norm"}


@pytest.mark.parametrize("norm", grpo.LOSS_NORMS)
def test_the_step_on_an_all_padding_batch_reports_zeros_not_nan(norm):
    model, tok = tiny_model(1)
    ids, mask = common.encode_prompts(tok, ["1+2\n"] * 2)
    r = common.sample_completions(model, ids, mask, 4, tok.eos_token_id, tok.pad_token_id,
                                  torch.Generator().manual_seed(0))
    r.completion_mask[:] = False
    before = [p.clone() for p in model.parameters()]
    stats = grpo.policy_gradient_step(model, torch.optim.SGD(model.parameters(), lr=0.1), r,
                                      torch.ones(r.completion_mask.shape), torch.zeros(r.completion_mask.shape),
                                      clip_eps=0.2, beta=0.1, inner_iters=1, loss_norm=norm, max_new_tokens=4,
                                      max_grad_norm=1.0)
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


def table_completions(mask: torch.Tensor) -> common.Completions:
    B, T = mask.shape
    return common.Completions(sequences=torch.zeros(B, 2 + T, dtype=torch.long),
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
                                      advantages, ref, **settings)
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

    def step(policy, optimizer, completions, advantages, ref_logp, *rest):
        calls["steps"].append(dict(policy=policy, lr=optimizer.param_groups[0]["lr"], completions=completions,
                                   advantages=advantages, ref_logp=ref_logp, rest=rest))
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
    reference = common.frozen_copy(tiny_model(7)[0])
    held_out = args.task.held_out(args.eval_problems)
    start = time.time()
    result = grpo.train(policy, reference, tok, args, method, held_out, "cpu")
    calls["seconds"] = time.time() - start
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
        texts = common.completion_texts(tok, completions)
        rewards = text_reward(problems, texts, completions.truncated).view(N, G)
        spreads += int((~grpo.zero_spread(rewards)).sum())
        expected = grpo.group_advantages(rewards, method).flatten()[:, None] * completions.completion_mask
        assert torch.equal(step["advantages"], expected)
        with torch.no_grad():
            ref_logp, _ = common.token_logprobs(reference, completions.sequences, completions.attention_mask,
                                                completions.prompt_length)
        torch.testing.assert_close(step["ref_logp"], ref_logp)
        assert step["policy"] is policy
        norm = "constant" if method == "dr_grpo" else "token"
        assert step["rest"] == (args.clip_eps, args.beta, args.inner_iters, norm, args.max_new_tokens,
                                args.max_grad_norm, None)  # on-policy: no behaviour log-probs
        assert record["reward"] == pytest.approx(float(rewards.mean()))
        assert record["zero_spread"] == pytest.approx(float(grpo.zero_spread(rewards).float().mean()))
        assert record["length"] == pytest.approx(float(completions.completion_mask.sum(1).float().mean()))
        assert record["truncated"] == pytest.approx(float(completions.truncated.float().mean()))
        assert 0 < record["generate_s"] and 0 < record["update_s"] and record["generate_s"] + record["update_s"] < calls["seconds"]
    assert spreads > 0  # some groups have a spread: their advantages are not all zero
    assert [h["kl"] for h in result["history"]] == [1.0, 2.0, 3.0]  # the step's statistics, in order
    assert [s["lr"] for s in calls["steps"]] == pytest.approx([args.lr / 3, 2 * args.lr / 3, args.lr])  # warmup
    assert result["evals"] == [{"step": s, "samples": s * N * G, "pass@1": (i + 1) / 10, "length": 3.0}
                               for i, s in enumerate([0, 2, 3])]
    assert all(e == (held_out, args.eval_samples, args.max_new_tokens) for e in calls["evals"])
    (train_draws,), (eval_draws,) = calls["generators"], calls["eval_generators"]  # one stream each
    assert train_draws.initial_seed() != eval_draws.initial_seed()


# ---------------------------------------------------------------- optimiser and studies
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

    def fake_train(policy, reference, tokenizer, args, method, held_out, device, desc="", critic=None):
        seen.update(policy=policy, reference=reference, beta=args.beta, method=method, held_out=held_out)
        assert policy is not initial and not any(p.requires_grad for p in reference.parameters())
        assert all(torch.equal(a, b) for a, b in zip(reference.parameters(), snapshot))
        with torch.no_grad():
            next(policy.parameters()).add_(1.0)
        return {"history": [{"kl": float(i), "generate_s": 1.0, "update_s": 2.0} for i in range(30)],
                "evals": [{"pass@1": 0.0}], "state_bytes": 8}

    def fake_final(policy, tokenizer, args, held_out, device):
        seen["evaluated"] = policy
        return {"pass@1": 0.25}

    monkeypatch.setattr(grpo, "train", fake_train)
    monkeypatch.setattr(grpo, "final_evaluation", fake_final)
    args = loop_args(tmp_path, beta=0.04)
    start = time.time()
    result = grpo.run_method(initial, tok, args, "rloo", ["held"], "cpu", beta=0.5)
    assert 0 < result["wall_clock_s"] < time.time() - start
    assert seen["beta"] == 0.5 and seen["method"] == "rloo" and seen["held_out"] == ["held"]
    assert result["policy"] is seen["policy"] is seen["evaluated"] and result["final"] == {"pass@1": 0.25}
    assert result["seconds_per_update"] == 3.0 and result["state_bytes"] == 8 and result["critic"] is None
    assert result["final_kl"] == pytest.approx((27 + 28 + 29) / 3)  # the last 3 of 30 updates
    assert all(torch.equal(a, b) for a, b in zip(initial.parameters(), snapshot))
    assert not torch.equal(next(result["policy"].parameters()), snapshot[0])


def test_a_short_run_reports_the_kl_of_its_last_update(monkeypatch, tmp_path):
    def fake_train(policy, reference, tokenizer, args, method, held_out, device, desc="", critic=None):
        return {"history": [{"kl": float(i), "generate_s": 0.0, "update_s": 0.0} for i in range(5)],
                "evals": [{"pass@1": 0.0}], "state_bytes": 8}

    monkeypatch.setattr(grpo, "train", fake_train)
    monkeypatch.setattr(grpo, "final_evaluation", lambda *args: {"pass@1": 0.0})
    initial, tok = tiny_model(2)
    assert grpo.run_method(initial, tok, loop_args(tmp_path), "grpo", [], "cpu", beta=0.1)["final_kl"] == 4.0


def test_every_estimator_runs_at_the_default_beta_and_the_sweep_reuses_the_grpo_run(monkeypatch, tmp_path):
    calls = []

    def fake_run_method(initial, tokenizer, args, method, held_out, device, beta, critic=None):
        calls.append((method, beta))
        return {"method": method, "beta": beta}

    monkeypatch.setattr(grpo, "run_method", fake_run_method)
    args = loop_args(tmp_path, methods="rloo,grpo", beta=0.04, betas="0,0.04,0.5")
    runs = grpo.compare_estimators(None, None, args, [], "cpu", None)
    assert runs == {"rloo": {"method": "rloo", "beta": 0.04}, "grpo": {"method": "grpo", "beta": 0.04}}
    sweep = grpo.beta_sweep(None, None, args, [], "cpu", runs)
    assert sweep == {0.04: runs["grpo"], 0.0: {"method": "grpo", "beta": 0.0}, 0.5: {"method": "grpo", "beta": 0.5}}
    assert calls[2:] == [("grpo", 0.0), ("grpo", 0.5)]  # the default β is not trained twice
    assert grpo.beta_sweep(None, None, args, [], "cpu", {"rloo": runs["rloo"]}) == {
        b: {"method": "grpo", "beta": b} for b in (0.0, 0.04, 0.5)}


def test_zero_spread_study_reads_each_policy_counts_by_difficulty():
    args = grpo.Args(final_samples=4, group_sizes="2,4")
    held_out = [common.ChainProblem(1, (("+", 1),)), common.ChainProblem(2, (("+", 1), ("+", 1))),
                common.ChainProblem(3, (("+", 1),))]
    before, after = {"correct": [0, 2, 4]}, {"correct": [1, 4, 3]}
    tables = grpo.zero_spread_study(args, held_out, before, {"grpo": {"final": after}})
    assert tables == {"cold start": grpo.zero_spread_table([0, 2, 4], [1, 2, 1], 4, [2, 4]),
                      "after GRPO": grpo.zero_spread_table([1, 4, 3], [1, 2, 1], 4, [2, 4])}
    assert list(grpo.zero_spread_study(args, held_out, before, {})) == ["cold start"]


def test_final_evaluation_uses_the_same_draws_before_and_after_with_every_k(monkeypatch, tmp_path):
    calls = []

    def fake_evaluate(policy, tokenizer, problems, samples, max_new_tokens, generator, device, ks=(1,)):
        calls.append((problems, samples, max_new_tokens, ks, generator.get_state()))
        return {}

    monkeypatch.setattr(grpo, "evaluate", fake_evaluate)
    args = loop_args(tmp_path, final_samples=8, group_sizes="2,4")
    for _ in range(2):
        grpo.final_evaluation(None, None, args, ["held"], "cpu")
    assert calls[0][:4] == (["held"], 8, args.max_new_tokens, (1, 4, 8))
    assert torch.equal(calls[0][4], calls[1][4])
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
    reference = common.frozen_copy(tiny_model(9)[0])
    norms = grpo.gradient_by_spread(policy, reference, tok, args, "cpu")
    (completions, rewards), = sampled
    G = args.group_size
    flat = [len(set(group.tolist())) == 1 for group in rewards]
    assert {group[0].item() for group, same in zip(rewards, flat) if same} == {0.0, 1.0} and not all(flat)
    same = torch.tensor([flat[i // G] for i in range(len(flat) * G)])
    advantages = grpo.group_advantages(rewards, "grpo").flatten()
    batch = (completions.sequences, completions.attention_mask, completions.prompt_length)
    with torch.no_grad():
        ref_logp, _ = common.token_logprobs(reference, *batch)
    expected = {"zero-spread share": sum(flat) / len(flat)}
    for part, rows in (("zero-spread", same), ("mixed", ~same)):
        mask = completions.completion_mask & rows[:, None]
        for term in ("pg", "kl"):
            policy.zero_grad()
            logp, _ = common.token_logprobs(policy, *batch)
            log_ratio = ref_logp - logp
            per_token = -advantages[:, None] * logp if term == "pg" else args.beta * (log_ratio.exp() - log_ratio - 1)
            (per_token[mask].sum() / mask.sum()).backward()
            expected[f"{part} {term}"] = math.sqrt(sum(float((p.grad ** 2).sum()) for p in policy.parameters()
                                                       if p.grad is not None))
    assert norms["zero-spread pg"] == 0.0 and norms["zero-spread kl"] > 0 and norms["mixed pg"] > 0
    assert norms == pytest.approx(expected, rel=1e-4)


def test_gradient_by_spread_leaves_no_gradient_behind(tmp_path):
    model, tok = tiny_model(8)
    grpo.gradient_by_spread(model, common.frozen_copy(tiny_model(9)[0]), tok, loop_args(tmp_path), "cpu")
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_with_only_all_wrong_groups_the_mixed_part_reads_zero(tmp_path):
    """A random model never answers right: every group is all-wrong, the mixed part is empty and
    reads 0 (not NaN), and with the policy as its own reference the KL term is 0 too."""
    model, tok = tiny_model(10)
    norms = grpo.gradient_by_spread(model, common.frozen_copy(model), tok, loop_args(tmp_path), "cpu")
    assert norms == {"zero-spread share": 1.0, "zero-spread pg": 0.0, "zero-spread kl": 0.0, "mixed pg": 0.0,
                     "mixed kl": 0.0}


# ------------------------------------------------------------------------------ claims
CLAIM_KEYS = {"appendix A": "R = [0, 1, 0, 1]", "GAE": "GAE is the default", "homogeneous": "homogeneous",
              "vanishes": "the gradient vanishes", "medium": "medium-difficulty", "GRPO learns": "GRPO on the sparse",
              "RLOO learns": "RLOO on the sparse", "pass@1": "GRPO on groups improves pass@1",
              "beta": "small β allows"}


def claim_summary(**changes):
    """A hand-made summary of a run in which every computed verdict holds: at G = 4 the
    difficulty with pass@1 nearest 0.5 (2 steps) has the most groups with a signal (at G = 2 it
    would be 3 steps); GRPO gains 0.2 (RLOO 0.15, the threshold); β = 0 drifts furthest."""
    summary = dict(
        args=grpo.Args(group_size=4, group_sizes="2,4", final_samples=8, beta=0.04),
        runs={"grpo": {"final": {"pass@1": 0.5, "pass@8": 0.75}}, "rloo": {"final": {"pass@1": 0.45, "pass@8": 0.5}}},
        sweep={0.0: {"final_kl": 0.5, "final": {"pass@1": 0.5}}, 0.04: {"final_kl": 0.5, "final": {"pass@1": 0.5}},
               0.5: {"final_kl": 0.125, "final": {"pass@1": 0.25}}},
        before={"pass@1": 0.3, "pass@8": 0.5},
        tables={"cold start": {1: {"pass@1": 0.875, 2: 0.75, 4: 0.625}, 2: {"pass@1": 0.375, 2: 0.5, 4: 0.25},
                               3: {"pass@1": 0.0625, 2: 0.375, 4: 0.875}}},
        grads={"zero-spread share": 0.5, "zero-spread pg": 0.0, "mixed pg": 1.5, "zero-spread kl": 0.25})
    return summary | changes


def verdicts(claims):
    found = {}
    for c in claims:
        (name,) = [n for n, key in CLAIM_KEYS.items() if key in c["claim"]]
        found[name] = c["holds"]
    return found


def test_claim_verdicts_on_a_hand_made_summary():
    claims = grpo.check_claims(**claim_summary())
    assert verdicts(claims) == {"appendix A": True, "GAE": False, "homogeneous": True, "vanishes": True,
                                "medium": True, "GRPO learns": True, "RLOO learns": True, "pass@1": True,
                                "beta": True}
    assert [c["source"] for c in claims] == ["whole-game App. A", "survey §4.1.1", "whole-game §7.8",
                                             "over-long-generations", "over-long-generations",
                                             "whole-game §2, §8", "whole-game §2, §8", "whole-game §8",
                                             "over-long-generations"]
    assert claims[0]["measured"] == "[-0.5, 0.5, -0.5, 0.5]; RLOO 0.6667"
    assert "A = 0 " in claims[2]["measured"] and "1.50 at G=4" in claims[2]["measured"]  # (G-1)/√G
    assert claims[4]["measured"] == ("share of G=4 groups with a signal, cold start, by steps: 1: 0.38 (pass@1 0.88), "
                                     "2: 0.75 (pass@1 0.38), 3: 0.12 (pass@1 0.06)")


def with_runs(grpo_after=0.5, rloo_after=0.45, before=0.3):
    summary = claim_summary()
    summary["runs"]["grpo"]["final"]["pass@1"] = grpo_after
    summary["runs"]["rloo"]["final"]["pass@1"] = rloo_after
    summary["before"]["pass@1"] = before
    return summary


def with_table(steps, column, value):
    summary = claim_summary()
    summary["tables"]["cold start"][steps][column] = value
    return summary


def with_kl(beta, kl):
    summary = claim_summary()
    summary["sweep"][beta]["final_kl"] = kl
    return summary


@pytest.mark.parametrize("summary,flipped", [
    (claim_summary(grads={"zero-spread share": 0.5, "zero-spread pg": 1e-9, "mixed pg": 1.5, "zero-spread kl": 0.25}),
     {"vanishes": False}),
    (with_table(1, 4, 0.125), {"medium": False}),  # 1 step now has the most signal at G = 4
    (with_table(3, "pass@1", 0.5), {"medium": False}),  # 3 steps is now the medium difficulty
    (with_table(1, "pass@1", 0.45), {"medium": None}),  # every stratum below 0.5: none is easy, no verdict
    (claim_summary(args=grpo.Args(group_size=2, group_sizes="2,4", final_samples=8, beta=0.04)), {"medium": False}),
    (claim_summary(args=grpo.Args(group_size=8, group_sizes="2,4", final_samples=8, beta=0.04)), {"medium": True}),
    (with_runs(before=0.0, grpo_after=0.15, rloo_after=0.1499), {"RLOO learns": False}),  # 0.15 exactly holds
    (with_runs(grpo_after=0.4499), {"GRPO learns": False}),
    (with_runs(grpo_after=0.3), {"GRPO learns": False, "pass@1": False}),
    (with_runs(grpo_after=0.3001), {"GRPO learns": False, "pass@1": True}),
    (with_kl(0.5, 0.5001), {"beta": False}),  # a larger β drifted further than β = 0
    (with_kl(0.04, 0.6), {"beta": False}),
])
def test_each_claim_verdict_flips_with_its_measurement(summary, flipped):
    baseline = verdicts(grpo.check_claims(**claim_summary()))
    assert verdicts(grpo.check_claims(**summary)) == baseline | flipped


def test_the_gae_verdict_reads_the_advantages_the_loop_hands_to_the_loss(monkeypatch):
    """GRPO's verdict is "no GAE" because every token of a completion gets the same A_i; a per-token
    estimate (here A_i scaled along the completion, as a critic would give) flips it."""
    shared = grpo.token_advantages

    def per_token_estimate(rewards, method, completion_mask):
        return shared(rewards, method, completion_mask) * torch.linspace(1, 2, completion_mask.shape[1])

    monkeypatch.setattr(grpo, "token_advantages", per_token_estimate)
    assert verdicts(grpo.check_claims(**claim_summary()))["GAE"] is True


def test_the_appendix_a_verdict_fails_when_rloo_is_off(monkeypatch):
    """The hand case must hold to the digit: an RLOO advantage of 0.5 instead of 2/3 is no match."""
    shared = grpo.group_advantages

    def rloo_off(rewards, method):
        return shared(rewards, method) * (0.75 if method == "rloo" else 1.0)

    monkeypatch.setattr(grpo, "group_advantages", rloo_off)
    assert verdicts(grpo.check_claims(**claim_summary()))["appendix A"] is False


@pytest.mark.parametrize("advantage,holds", [
    (lambda r, m: (r - r.mean(1, keepdim=True)) / r.std(1, keepdim=True), True),  # no ε: 0/0 blows up
    (lambda r, m: r - 0.5, False),  # an all-equal group keeps a non-zero advantage: neither
])
def test_the_homogeneous_group_verdict_follows_the_all_equal_groups_advantage(monkeypatch, advantage, holds):
    monkeypatch.setattr(grpo, "group_advantages", advantage)
    claims = [c for c in grpo.check_claims(**claim_summary(grads=None)) if CLAIM_KEYS["homogeneous"] in c["claim"]]
    assert claims[0]["holds"] is holds


def test_token_advantages_give_each_completion_its_own_group_advantage_on_its_tokens_only():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False], [True, True, True], [False, False, False]])
    per_token = grpo.token_advantages(rewards, "dr_grpo", mask)
    assert per_token.tolist() == [[0.5, 0.5, 0.0], [-0.5, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


def test_claims_that_need_a_run_are_left_out_without_it():
    summary = claim_summary(grads=None, runs={"rloo": claim_summary()["runs"]["rloo"]},
                            sweep={0.0: claim_summary()["sweep"][0.0]})
    assert set(verdicts(grpo.check_claims(**summary))) == {"appendix A", "GAE", "homogeneous", "medium", "RLOO learns"}
    no_free = claim_summary(sweep={b: r for b, r in claim_summary()["sweep"].items() if b > 0})
    assert "beta" not in verdicts(grpo.check_claims(**no_free))


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
        advantages, targets = grpo.token_gae(values, rewards, mask, gamma, lam)
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
    advantages, targets = grpo.token_gae(values, torch.tensor([1.0]), mask, 1.0, 1.0)
    torch.testing.assert_close(advantages, torch.tensor([[0.8, 0.6, 0.3, 0.0]]))
    torch.testing.assert_close(targets, torch.tensor([[1.0, 1.0, 1.0, 0.0]]))
    td, _ = grpo.token_gae(values, torch.tensor([1.0]), mask, 1.0, 0.0)
    torch.testing.assert_close(td, torch.tensor([[0.2, 0.3, 0.3, 0.0]]))


def test_value_loss_on_a_hand_case():
    values = torch.tensor([[1.0, 2.0, float("nan")], [0.0, 0.0, 0.0]])
    targets = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    # ½ (1 + 4 + 1) / 3 tokens; the NaN in a padding cell stays out
    assert grpo.value_loss(values, targets, mask).item() == pytest.approx(1.0)
    assert grpo.value_loss(values, targets, torch.zeros_like(mask)).item() == 0.0


def test_whiten_puts_the_completion_tokens_at_mean_zero_std_one_and_leaves_padding_zero():
    advantages = torch.tensor([[1.0, 2.0, 7.0], [3.0, 5.0, 5.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    white = grpo.whiten(advantages, mask)
    assert white[mask].mean().abs() < 1e-6 and white[mask].std().item() == pytest.approx(1.0, abs=1e-6)
    assert white[~mask].tolist() == [0.0, 0.0, 0.0]


def test_the_critic_reads_each_token_from_the_prefix_before_it():
    """V(s_t) sees x and y_<t only: changing token t changes V from t+1 on, not before."""
    policy, _ = tiny_model(5)
    critic = grpo.TokenCritic(policy)
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
    critic = grpo.TokenCritic(policy, "head")
    assert critic.trunk is policy.base_model
    assert critic.trained_parameters() == list(critic.head.parameters())
    torch.nn.init.normal_(critic.head.weight, generator=torch.Generator().manual_seed(0))
    c = hand_completions(["12+3\n"], ["12+3=15\n#15"])
    critic(c).sum().backward()  # no gradient reaches the policy: its step is unchanged
    assert all(p.grad is None for p in policy.parameters()) and critic.head.weight.grad is not None
    moved = critic.for_policy(other := tiny_model(6)[0])
    assert moved.trunk is other.base_model and torch.equal(moved.head.weight, critic.head.weight)
    separate = grpo.TokenCritic(policy)
    assert separate.for_policy(other).trunk is not other.base_model  # a separate critic is copied whole
    # the training state counts the shared trunk once
    assert grpo.state_bytes(policy, critic) == grpo.state_bytes(policy) + grpo.state_bytes(critic.head)


def test_a_fresh_critic_says_zero_and_the_warm_up_fits_it_toward_the_outcome(monkeypatch, tmp_path):
    policy, tok = tiny_model(6)
    critic = grpo.TokenCritic(policy)
    c = hand_completions(["1+1\n"], ["1+1=2\n#2"])
    assert not critic(c).any()
    monkeypatch.setattr(grpo, "verifier_rewards", lambda problems, texts, truncated: torch.ones(len(texts)))
    args = loop_args(tmp_path, critic_warmup=30, critic_lr=1e-2)
    losses = grpo.warm_up_critic(critic, policy, tok, args, "cpu")
    assert len(losses) == 30 and losses[-1] < 0.1 * losses[0]
    assert critic(c).mean().item() == pytest.approx(1.0, abs=0.2)  # every completion scores 1


def test_ppo_hands_whitened_gae_advantages_to_the_step_and_trains_the_critic(monkeypatch, tmp_path):
    """In the loop, PPO's advantages are the critic's GAE over tokens (whitened), not a group
    advantage; the critic then takes a step toward its targets."""
    policy, tok = tiny_model(7)
    critic = grpo.TokenCritic(policy)
    seen = {}
    step = grpo.policy_gradient_step

    def spy_step(policy, optimizer, completions, advantages, *rest):
        seen["advantages"], seen["completions"] = advantages.clone(), completions
        with torch.no_grad():
            seen["values"] = critic(completions).clone()
        return step(policy, optimizer, completions, advantages, *rest)

    monkeypatch.setattr(grpo, "policy_gradient_step", spy_step)
    monkeypatch.setattr(grpo, "verifier_rewards", lambda problems, texts, truncated: torch.arange(len(texts)) % 2.0)
    args = loop_args(tmp_path, rl_steps=1, gae_lambda=0.9, critic_lr=1e-2)
    held_out = args.task.held_out(args.eval_problems)
    result = grpo.train(policy, common.frozen_copy(policy), tok, args, "ppo", held_out, "cpu", critic=critic)
    c = seen["completions"]
    rewards = torch.arange(len(c.sequences)) % 2.0
    expected, targets = grpo.token_gae(seen["values"], rewards, c.completion_mask, 1.0, 0.9)
    torch.testing.assert_close(seen["advantages"], grpo.whiten(expected, c.completion_mask))
    assert "value_loss" in result["history"][0]
    with torch.no_grad():
        after = grpo.value_loss(critic(c), targets, c.completion_mask)
    assert after < grpo.value_loss(seen["values"], targets, c.completion_mask)


def test_state_bytes_counts_parameters_gradients_and_adam_moments():
    layer = torch.nn.Linear(3, 2)  # 8 parameters
    assert grpo.state_bytes(layer) == 8 * 4
    optimizer = torch.optim.AdamW(layer.parameters())
    layer(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    # parameters, gradients, two moments: 4 x 8 floats; and Adam's step counter, one per tensor
    steps = sum(s["step"].numel() * s["step"].element_size() for s in optimizer.state.values())
    assert grpo.state_bytes(layer, optimizer) == 4 * 8 * 4 + steps


# ------------------------------------------------------------------ gradient variance by length
def test_per_completion_gradients_match_a_backward_pass_per_completion():
    policy, tok = tiny_model(8)
    c = hand_completions(["12+3\n", "7\n", "45*2\n"], ["12+3=15\n#15", "#7", "45*2=90"], cut=[False, False, True])
    weights = torch.randn(c.completion_mask.shape, generator=torch.Generator().manual_seed(0)) * c.completion_mask
    grads = grpo.per_completion_gradients(policy, c, weights, chunk=2)
    for i in range(3):
        policy.zero_grad()
        logp, _ = common.token_logprobs(policy, c.sequences[i:i + 1], c.attention_mask[i:i + 1], c.prompt_length)
        (weights[i:i + 1] * logp).sum().backward()
        expected = torch.cat([p.grad.flatten() for p in policy.parameters()])
        torch.testing.assert_close(grads[i], expected, atol=1e-5, rtol=1e-4)


def test_variance_by_length_bins_in_log_length_and_fits_the_slope():
    lengths = torch.tensor([10, 10, 11, 20, 20, 21, 40, 40, 40, 80])
    # per bin gradients ±a (and a zero when the bin has three): tr Cov ∝ a² ∝ length
    a = torch.sqrt(lengths.float())
    sign = torch.tensor([1.0, -1.0, 0.0, 1.0, -1.0, 0.0, 1.0, -1.0, 0.0, 1.0])
    gradients = torch.stack([sign * a, torch.zeros(10)], 1)
    study = grpo.variance_by_length(gradients, lengths, 4, min_count=3)  # edges 10, 18.9, 35.7, 67.5, 81
    assert study["count"] == [3, 3, 3]  # the 80 alone is dropped
    assert study["length"] == pytest.approx([31 / 3, 61 / 3, 40.0])
    assert study["variance"] == pytest.approx([(10 + 10) / 2, (20 + 20) / 2, (40 + 40) / 2])
    slope = np.polyfit(np.log([31 / 3, 61 / 3, 40.0]), np.log([10.0, 20.0, 40.0]), 1)[0]
    assert study["slope"] == pytest.approx(slope)
    assert math.isnan(grpo.variance_by_length(torch.zeros(10, 2), lengths, 4, min_count=3)["slope"])


def test_step_prefixes_are_the_prompt_then_each_complete_line_but_the_last():
    problem = common.ChainProblem(12, (("+", 3), ("*", 2)))
    assert grpo.step_prefixes(problem, "12+3=15\n15*2=30\n#30") == [
        "12+3*2\n", "12+3*2\n12+3=15\n", "12+3*2\n12+3=15\n15*2=30\n"]
    assert grpo.step_prefixes(problem, "#30") == ["12+3*2\n"]


# ------------------------------------------------------------------ failure mode: length bias
def test_lengths_by_outcome_split_right_from_wrong_completions():
    lengths, rewards = torch.tensor([4, 20, 30, 6]), torch.tensor([0.0, 1.0, 1.0, 0.0])
    assert grpo.lengths_by_outcome(lengths, rewards) == {"length_right": 25.0, "length_wrong": 5.0}
    assert math.isnan(grpo.lengths_by_outcome(lengths, torch.zeros(4))["length_right"])


def length_run(wrong: list[float]) -> dict:
    return {"history": [{"length_wrong": w, "length_right": 20.0} for w in wrong]}


@pytest.mark.parametrize("grpo_wrong,dr_wrong,holds", [([30, 30, 12, float("nan")], [30, 30, 10, 10], True),
                                                       ([10, 10, 10, 10], [5, 5, 10, 12], False)])
def test_the_length_bias_verdict_reads_the_second_half_of_training(grpo_wrong, dr_wrong, holds):
    (found,) = grpo.length_bias_claims({"grpo": length_run(grpo_wrong), "dr_grpo": length_run(dr_wrong)})
    assert found["holds"] is holds
    assert grpo.length_bias_claims({"grpo": length_run(grpo_wrong)}) == []


# -------------------------------------------- failure modes: KL both sides, train/serve skew, blindness

def test_the_skew_study_serves_each_problem_three_ways(monkeypatch):
    seen = {}

    def fake_final(policy, tokenizer, args, problems, device):
        seen[len(seen)] = [p.prompt for p in problems]
        return {"pass@1": 0.5 / len(seen)}

    monkeypatch.setattr(grpo, "final_evaluation", fake_final)
    problems = [common.ChainProblem(12, (("+", 7), ("*", 3))), common.ChainProblem(5, (("-", 2),))]
    skew = grpo.skew_study(None, None, grpo.Args(), problems, "cpu")
    assert seen == {0: ["12+7*3\n", "5-2\n"], 1: ["Q: 12+7*3\nA:\n", "Q: 5-2\nA:\n"], 2: ["12+7\n", "5\n"]}
    assert skew == {"as trained": 0.5, "another template": 0.25, "last operation missing": 0.5 / 3}
    assert [c["holds"] for c in grpo.skew_claims(skew)] == [True, True]
    assert [c["holds"] for c in grpo.skew_claims({"as trained": 0.5, "another template": 0.46,
                                                   "last operation missing": 0.26})] == [False, False]


def test_sample_quality_counts_distinct_well_formed_and_step_writing_samples(monkeypatch):
    texts = ["#5", "#5", "1+4=5\n#5", "junk", "#7", "#8", "#9", "#9"]
    monkeypatch.setattr(grpo, "sample", lambda *a, **k: (None, texts))
    args = grpo.Args(final_samples=4, group_sizes="2,4")
    quality = grpo.sample_quality(None, None, args, [common.ChainProblem(1, (("+", 4),))] * 2, "cpu")
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
    claims = grpo.kl_claims(args, {"pass@1": 0.3}, kl)
    assert [c["holds"] for c in claims] == holds
    assert grpo.kl_claims(args, {"pass@1": 0.3}, {0.04: kl_row(0.03, 0.5)}) == []


# ------------------------------------------------------------------ failure mode: async staleness
def test_a_stale_ratio_is_taken_against_the_policy_that_sampled():
    """With the behaviour policy's log-probs, ρ = π_θ / π_behaviour from the first iteration: a
    policy that already doubled a token's probability is clipped there (A > 0), and that token
    gives no gradient; without them the first iteration's ratio is 1 and nothing is clipped."""
    model, tok = tiny_model(1)
    ids, mask = common.encode_prompts(tok, ["1+2\n"] * 4)
    r = common.sample_completions(model, ids, mask, 6, tok.eos_token_id, tok.pad_token_id,
                                  torch.Generator().manual_seed(0))
    advantages = r.completion_mask.float()
    with torch.no_grad():
        now, _ = common.token_logprobs(model, r.sequences, r.attention_mask, r.prompt_length)
    kwargs = dict(ref_logp=now, clip_eps=0.2, beta=0.0, inner_iters=1, loss_norm="token", max_new_tokens=6,
                  max_grad_norm=100.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    doubled = grpo.policy_gradient_step(model, optimizer, r, advantages, behaviour_logp=now - math.log(2), **kwargs)
    assert doubled["clip_fraction"] == 1.0 and doubled["grad_norm"] == 0.0
    fresh = grpo.policy_gradient_step(model, optimizer, r, advantages, **kwargs)
    assert fresh["clip_fraction"] == 0.0 and fresh["grad_norm"] > 0


def test_the_rollout_worker_runs_the_weights_of_lag_updates_ago():
    policy, _ = tiny_model(2)
    assert grpo.RolloutWorker(policy, 0).model() is policy
    worker = grpo.RolloutWorker(policy, 2)
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
    real_sample_groups, real_step = grpo.sample_groups, grpo.policy_gradient_step

    def spy_sample_groups(model, *rest):
        sampled_with.append(next(model.parameters()).detach().clone())
        return real_sample_groups(model, *rest)

    def spy_step(policy, optimizer, completions, advantages, *rest):
        behaviours.append((rest[-1], completions.logprobs))
        return real_step(policy, optimizer, completions, advantages, *rest)

    monkeypatch.setattr(grpo, "sample_groups", spy_sample_groups)
    monkeypatch.setattr(grpo, "policy_gradient_step", spy_step)
    monkeypatch.setattr(grpo, "verifier_rewards", lambda problems, texts, truncated: torch.arange(len(texts)) % 2.0)
    args = loop_args(tmp_path, rl_steps=4, staleness=2, stale_ratio=ratio, lr=0.05, warmup=1, inner_iters=1)
    history = grpo.train(policy, common.frozen_copy(policy), tok, args, "grpo", args.task.held_out(4), "cpu")["history"]
    assert [h["policy_age"] for h in history] == [0, 1, 2, 2]
    assert torch.equal(sampled_with[0], sampled_with[1]) and torch.equal(sampled_with[1], sampled_with[2])
    assert not torch.equal(sampled_with[3], sampled_with[0])  # the policy after the first update, two late
    for given, logprobs in behaviours:
        assert (given is logprobs) if ratio == "importance" else given is None
    assert history[0]["policy_drift"] < 1e-5 < history[2]["policy_drift"]


def test_worst_regression_is_the_largest_drop_below_the_best_so_far():
    run = {"evals": [{"pass@1": p} for p in (0.2, 0.5, 0.3, 0.6, 0.55)]}
    assert grpo.worst_regression(run) == pytest.approx(0.2)
    assert grpo.worst_regression({"evals": [{"pass@1": p} for p in (0.1, 0.2)]}) == 0.0


def stale_run(final: float) -> dict:
    return {"final": {"pass@1": final}, "evals": [{"pass@1": final}],
            "history": [{"clip_fraction": 0.1, "policy_drift": 0.2}]}


@pytest.mark.parametrize("fresh,ignored,weighted,holds", [
    (0.5, 0.45, 0.49, [True, True]),
    (0.5, 0.48, 0.49, [False, False]),
    (0.5, 0.4, 0.42, [True, False]),
])
def test_the_staleness_verdicts_compare_the_oldest_rollouts_with_on_policy_and_each_other(fresh, ignored, weighted, holds):
    args = grpo.Args(stale_lags="2,8")
    stale = {"on-policy": stale_run(fresh), "age 2, ignore": stale_run(0.0), "age 2, importance": stale_run(0.0),
             "age 8, ignore": stale_run(ignored), "age 8, importance": stale_run(weighted)}
    claims = grpo.staleness_claims(args, stale)
    assert [c["holds"] for c in claims] == holds and "8 updates old" in claims[0]["claim"]
    assert grpo.staleness_claims(args, {}) == []


def test_a_reference_reset_re_anchors_the_kl_to_the_current_policy(monkeypatch, tmp_path):
    monkeypatch.setattr(grpo, "verifier_rewards", lambda problems, texts, truncated: torch.arange(len(texts)) % 2.0)
    kls = {}
    for reset in (0, 1):
        policy, tok = tiny_model(6)
        args = loop_args(tmp_path, rl_steps=3, ref_reset=reset, inner_iters=1, lr=0.05, warmup=1)
        history = grpo.train(policy, common.frozen_copy(policy), tok, args, "grpo", args.task.held_out(4), "cpu")["history"]
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
    monkeypatch.setattr(grpo, "sample", fake_sampler(lambda i: "right" if right_every and i % right_every == 0 else "wrong"))
    monkeypatch.setattr(grpo, "verify", lambda problem, text: text == "right")
    args = loop_args(tmp_path, rft_rounds=2, rft_n=4, rft_sft_steps=2, rft_lr=0.01, sft_batch=4)
    rounds = grpo.rejection_sampling_sft(policy, tok, args, 40, "cpu")
    problems = 40 // (2 * 4)
    # one kept pair per problem (its two right samples are the same text); the buffer grows by round
    kept = int(problems * kept_share)
    assert rounds == [{"sampled": problems * 4, "kept": kept, "buffer": kept * (r + 1), "solved": kept_share}
                      for r in range(2)]
    moved = any(not torch.equal(w, p) for w, p in zip(weights, policy.parameters()))
    assert moved == bool(right_every)


def test_unsolved_counts_the_problems_with_no_right_sample_and_which_stay_so():
    before, after = {"correct": [0, 0, 3, 0, 1]}, {"correct": [0, 2, 0, 0, 1]}
    assert grpo.unsolved(before) == pytest.approx(0.6) and grpo.unsolved(after) == pytest.approx(0.6)
    assert grpo.still_unsolved(before, after) == pytest.approx(2 / 3)
    assert math.isnan(grpo.still_unsolved({"correct": [1]}, {"correct": [0]}))


def pass_run(pass1: float, correct: list[int], zero_spread: float = 0.5, **extra) -> dict:
    return {"final": {"pass@1": pass1, "pass@16": pass1, "correct": correct},
            "history": [{"zero_spread": zero_spread}], "evals": [], **extra}


@pytest.mark.parametrize("grpo_final,spread,both_final,holds", [
    (0.02, 0.9, 0.10, [True, True, True, True]),
    (0.10, 0.9, 0.11, [False, False, False, False]),
    (0.02, 0.5, 0.04, [False, True, False, True]),
])
def test_the_sparse_reward_verdicts(grpo_final, spread, both_final, holds):
    args = grpo.Args()
    weak = {"final": {"pass@1": 0.01, "pass@16": 0.1, "correct": [0] * 9 + [1]}}
    after = [0] * 9 + [2] if grpo_final < 0.05 else [1] * 10  # GRPO solves none, or all, of the unsolved
    sparse = {"weak cold start": weak, "GRPO": pass_run(grpo_final, after, spread),
              "rejection sampling": {"final": {"pass@1": 0.05}, "rounds": [{"kept": 3, "sampled": 64}]},
              "rejection sampling, then GRPO": pass_run(both_final, [1] * 10)}
    before, runs = {"pass@1": 0.2}, {"grpo": pass_run(0.3, [])}  # the default cold start gains 10 points
    claims = grpo.sparse_claims(args, sparse, before, runs)
    assert [c["holds"] for c in claims] == holds and "3 of 64" in claims[2]["measured"]
    assert grpo.sparse_claims(args, {}, before, runs) == [] == grpo.sparse_claims(args, sparse, before, {})


@pytest.mark.parametrize("good,bad,reset,holds", [
    (0.40, 0.30, 0.38, [True, True]), (0.40, 0.39, 0.45, [False, True]), (0.40, 0.30, 0.31, [True, False])])
def test_the_poor_reference_verdicts(good, bad, reset, holds):
    poor = {"poor reference itself": {"final": {"pass@1": 0.07}, "writes_steps": 0.1},
            "cold start as reference": pass_run(good, [], writes_steps=0.8, final_kl=0.02),
            "poor reference": pass_run(bad, [], writes_steps=0.2, final_kl=0.3),
            "poor reference, reset": pass_run(reset, [], writes_steps=0.6, final_kl=0.01)}
    claims = grpo.poor_reference_claims(grpo.Args(), poor)
    assert [c["holds"] for c in claims] == holds and "writes steps 0.80" in claims[0]["measured"]
    assert "β = 0.5" in claims[0]["claim"] and grpo.poor_reference_claims(grpo.Args(), {}) == []


# ------------------------------------------------------------------ CLI and smoke runs
@pytest.mark.parametrize("flag,value,message", [
    ("--group-size", "1", "--group-size must be at least 2"),
    ("--methods", "grpo,a2c", "argument --methods: 'a2c' is not one of reinforce"),
    ("--gae-lambda", "1.5", "--gae-lambda and --critic-lambdas must be in [0, 1]"),
    ("--critic-lambdas", "0.9,-1", "--gae-lambda and --critic-lambdas must be in [0, 1]"),
    ("--truth-problems", "600", "--truth-problems must be at most 512"),
    ("--staleness", "-1", "--critic-warmup, --staleness and --ref-reset must be non-negative"),
    ("--ref-reset", "-2", "--critic-warmup, --staleness and --ref-reset must be non-negative"),
    ("--poor-shortcut-prob", "1.5", "--poor-shortcut-prob must be in [0, 1]"),
    ("--rft-n", "0", "--rft-n must be positive"),
    ("--stale-lags", "0,4", "--stale-lags must be positive"),
    ("--group-sizes", "1,4", "--group-sizes must be in 2..--final-samples"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("05_grpo_rloo.py", flag, value)


def smoke_args(tmp_path, **changes):
    return dataclasses.replace(grpo.Args(smoke=True, device="cpu", out=str(tmp_path / "out"),
                                         cache=str(tmp_path / "cache")), **changes)


def without_timing(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if "wall_clock" not in k and "seconds_per_update" not in k}


def test_smoke_run_writes_results_and_figures_and_repeats_exactly(tmp_path, read_results):
    first = grpo.main(smoke_args(tmp_path))
    data = read_results(tmp_path / "out" / "results.json")
    for name in ("learning_curves.png", "training.png", "reward_kl.png", "zero_spread.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    # a smoke cold start never succeeds: no variance slope, critic correlation or right length
    undefined = ("variance_slope", "correlation", "late_length_right")
    assert data["metrics"] == common.json_ready(first["metrics"])  # NaN is written as null
    assert all(np.isfinite(v) for k, v in first["metrics"].items() if not any(u in k for u in undefined))
    for name in ("gradient_variance.png", "critic_truth.png"):
        assert (tmp_path / "out" / name).stat().st_size > 1000
    history = data["runs"]["grpo beta=0.04"]["history"]
    assert {"reward", "kl", "entropy", "length", "zero_spread", "clip_fraction", "grad_norm"} <= set(history[0])
    again = grpo.main(smoke_args(tmp_path))  # the cold start now comes from the cache
    assert common.json_ready(without_timing(again["metrics"])) == common.json_ready(without_timing(first["metrics"]))
    rerun = read_results(tmp_path / "out" / "results.json")["runs"]["grpo beta=0.04"]["history"]
    timing = ("generate_s", "update_s")
    assert [{k: v for k, v in h.items() if k not in timing} for h in rerun] == \
        [{k: v for k, v in h.items() if k not in timing} for h in history]


def test_a_smoke_run_with_the_failure_modes_writes_the_staleness_study(tmp_path, read_results):
    result = grpo.main(smoke_args(tmp_path, failure_modes=True, stale_lags="1", methods="grpo", betas=""))
    data = read_results(tmp_path / "out" / "results.json")
    assert set(data["staleness"]) == {"on-policy", "age 1, ignore", "age 1, importance"}
    assert result["metrics"]["staleness[age 1, importance]_policy_age"] == 0.5  # ages 0, 1 over two updates
    assert (tmp_path / "out" / "staleness.png").stat().st_size > 1000
    assert set(data["served"]) == {"as trained", "another template", "last operation missing"}
    assert set(data["kl_study"]) == {"0.04"}  # the sweep had only the default β here
    assert set(data["sparse_reward"]) == {"weak cold start", "GRPO", "rejection sampling",
                                          "rejection sampling, then GRPO"}
    assert list(data["poor_reference"]) == ["poor reference itself", "cold start as reference", "poor reference",
                                            "poor reference, reset"]
    assert data["poor_reference"]["poor reference, reset"]["history"][1]["kl"] == 0.0  # reset before update 1
    assert (tmp_path / "out" / "support_and_anchor.png").stat().st_size > 1000
    sources = [c["source"] for c in result["claims"]]
    assert sources.count("whole-game §7.9") == 2 and {"whole-game §7.10", "whole-game §7.1"} <= set(sources)
    assert sources.count("whole-game §7.5") == 2 and "whole-game §7.3, §8" in sources


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
