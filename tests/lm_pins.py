"""Pins for what 06 and 07 restate from 05 (the GRPO advantage, k3, the RL step and loop): each copy
must give 05's numbers; and the small LM fixtures the LM tests share (a tiny model, completions
built from text)."""

import copy
import dataclasses
import importlib

import torch

import common
import lm_world

grpo = importlib.import_module("05_grpo_rloo")


def tiny_model(seed: int = 0):
    torch.manual_seed(seed)
    tok = lm_world.make_char_tokenizer()
    return lm_world.make_tiny_lm(tok, hidden=16, layers=2, heads=2), tok


def hand_completions(prompts: list[str], texts: list[str], cut: list[bool] | None = None) -> lm_world.Completions:
    """Completions built from text with the one-character-a-token tokenizer: left-padded prompts,
    each text + EOS (none where cut by the budget), right-padded."""
    tok = lm_world.make_char_tokenizer()
    cut = cut or [False] * len(texts)
    ids, mask = lm_world.encode_prompts(tok, prompts)
    rows = [tok(t, add_special_tokens=False)["input_ids"] + ([] if c else [tok.eos_token_id]) for t, c in zip(texts, cut)]
    width = max(len(r) for r in rows)
    completion = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    completion_mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows])
    return lm_world.Completions(sequences=torch.cat([ids, completion], 1),
                              attention_mask=torch.cat([mask, completion_mask.long()], 1),
                              completion_mask=completion_mask, logprobs=torch.zeros(completion.shape),
                              truncated=torch.tensor(cut), prompt_length=ids.shape[1])


def assert_advantage_and_kl_match_05(module) -> None:
    g = torch.Generator().manual_seed(0)
    rewards = torch.cat([torch.rand(5, 6, generator=g), torch.ones(1, 6), (torch.rand(2, 6, generator=g) > 0.5).float()])
    assert torch.equal(module.grpo_advantages(rewards), grpo.group_advantages(rewards, "grpo"))
    logp, ref = torch.randn(3, 7, generator=g), torch.randn(3, 7, generator=g)
    assert torch.equal(module.kl_k3(logp, ref), grpo.kl_k3(logp, ref))


def assert_step_matches_05(module) -> None:
    """One step of the copy on random advantages leaves the same parameters and statistics as 05's
    step with one inner iteration (μ = 1) and the per-sequence normalisation."""
    model, tok = tiny_model(3)
    reference = lm_world.frozen_copy(tiny_model(4)[0])  # another model: the KL term is not zero
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n", "45*2\n", "7\n", "9-1\n"])
    completions = lm_world.sample_completions(model, ids, mask, 10, tok.eos_token_id, tok.pad_token_id,
                                            torch.Generator().manual_seed(0))
    advantages = torch.randn(completions.completion_mask.shape, generator=torch.Generator().manual_seed(1))
    advantages = advantages * completions.completion_mask
    with torch.no_grad():
        ref_logp, _ = lm_world.token_logprobs(reference, completions.sequences, completions.attention_mask,
                                            completions.prompt_length)
    policies, stats = [], []
    for original in (True, False):
        policy = copy.deepcopy(model)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
        if original:
            settings = grpo.Args(clip_eps=0.2, beta=0.3, inner_iters=1, loss_norm="sequence", max_new_tokens=10,
                                 max_grad_norm=0.5)
            stats.append(grpo.policy_gradient_step(policy, optimizer, completions, advantages, ref_logp, settings))
        else:
            stats.append(module.policy_gradient_step(policy, optimizer, completions, advantages, ref_logp, beta=0.3,
                                                     max_grad_norm=0.5))
        policies.append(policy)
    for a, b in zip(policies[0].parameters(), policies[1].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), policies[1].parameters()))
    for key in ("kl", "entropy", "grad_norm"):
        assert stats[1][key] == stats[0][key], key
    assert stats[0]["kl"] > 0 and stats[0]["grad_norm"] > 0.5  # the KL pulls, and the clip acts


def assert_loop_matches_05(module, advantage_fn, monkeypatch, tmp_path) -> None:
    """The copy of 05's loop, given 05's GRPO advantage, trains exactly as 05's loop with μ = 1:
    the same samples, rewards, held-out evaluations and final parameters. The verifier is
    replaced by a reward that depends on the problem and on the text (the parity of the text's
    length plus the problem's first number), so that the groups have a spread even for a random
    model, and a completion scored against another problem would show."""
    def parity_reward(problems, texts, truncated):
        return torch.tensor([float((len(t) + p.start) % 2) for p, t in zip(problems, texts)]) * (~truncated).float()

    monkeypatch.setattr(grpo, "verifier_rewards", parity_reward)
    monkeypatch.setattr(module, "verifier_rewards", parity_reward)
    # a small task space (one step, values up to 30) that the held-out prompts mostly cover: a copy
    # that trained on them would draw other problems than 05
    shared = dict(rl_steps=3, prompts=2, group_size=4, eval_every=2, beta=0.1, lr=1e-2, warmup=2,
                  max_grad_norm=0.5, min_steps=1, max_steps=1, max_value=30, max_operand=3)
    runs, policies = [], []
    for name, script in (("05", grpo), ("copy", module)):
        args = common.apply_smoke(script.Args(smoke=True, device="cpu", out=str(tmp_path / name)))
        args = dataclasses.replace(args, **shared)
        model, tok = tiny_model(5)
        policy, reference = copy.deepcopy(model), lm_world.frozen_copy(model)
        held_out = args.task.held_out(args.eval_problems)
        if script is grpo:
            args = dataclasses.replace(args, inner_iters=1, loss_norm="sequence")
            runs.append(grpo.train(policy, reference, tok, args, "grpo", held_out, "cpu"))
        else:
            runs.append(module.train(policy, reference, tok, args, advantage_fn, held_out, "cpu"))
        policies.append(policy)
    assert runs[1]["evals"] == runs[0]["evals"] and len(runs[0]["evals"]) == 3
    assert any(0 < h["reward"] < 1 for h in runs[0]["history"])
    for original, restated in zip(runs[0]["history"], runs[1]["history"]):
        for key in ("reward", "length", "kl", "entropy", "grad_norm"):
            assert restated[key] == original[key], key
    for a, b in zip(policies[0].parameters(), policies[1].parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
