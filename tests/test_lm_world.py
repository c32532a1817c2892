"""lm_world.py: the task and its verifier, tokenizer, sampling with masks and
log-probs, step segmentation, the cold-start cache, evaluation."""

import copy
import dataclasses
import importlib
import itertools
import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import lm_world


# ------------------------------------------------------------------------------------ task
def test_problem_prompt_solution_and_answer_by_hand():
    p = lm_world.ChainProblem(12, (("+", 7), ("*", 3), ("-", 5)))
    assert p.prompt == "12+7*3-5\n"
    assert p.lines == ["12+7=19", "19*3=57", "57-5=52", "#52"]
    assert p.solution == "12+7=19\n19*3=57\n57-5=52\n#52" and p.answer == 52


def test_sampled_problems_respect_the_difficulty_knobs():
    task = lm_world.ChainTask(min_steps=2, max_steps=3, max_value=30, max_operand=5)
    problems = task.sample(300, np.random.default_rng(0))
    assert {len(p.ops) for p in problems} == {2, 3}
    assert all(0 <= v <= 30 for p in problems for v in p.values)
    assert all(1 <= b <= 5 for p in problems for _, b in p.ops)
    assert all(len(p.ops) == 4 for p in task.sample(5, np.random.default_rng(0), steps=4))


def test_held_out_is_fixed_and_excluded_from_training_samples():
    task = lm_world.ChainTask(max_steps=1, max_value=12, max_operand=3)  # few distinct problems
    held = task.held_out(20)
    assert [p.prompt for p in held] == [p.prompt for p in task.held_out(20)]
    assert [p.prompt for p in held[:5]] == [p.prompt for p in task.held_out(5)]  # a prefix
    exclude = frozenset(p.prompt for p in held)
    assert not exclude & {p.prompt for p in task.sample(500, np.random.default_rng(1), exclude=exclude)}


@pytest.mark.parametrize("completion,reward,label", [
    ("12+7=19\n19*3=57\n57-5=52\n#52", 1.0, None),
    ("12+7=19\n19*3=56\n56-5=51\n#51", 0.0, 1),       # arithmetic slip at step 1
    ("12+7=19\n19*3=57\n57-5=52\n#53", 0.0, 3),       # the answer line is step n_steps
    ("12+7=19\n19*3=5", 0.0, 1),                      # cut mid-line
    ("12+7=19\nxx\n57-5=52\n#52", 1.0, 1),            # malformed line, right answer anyway
    ("#52", 1.0, 0),                                  # the bare answer skips step 0
    ("12+7=19\n19*3=57\n57-5=52\n#52\n#52", 1.0, 4),  # an extra line
    ("", 0.0, 0),
])
def test_verifier_and_gold_first_wrong_step(completion, reward, label):
    p = lm_world.ChainProblem(12, (("+", 7), ("*", 3), ("-", 5)))
    assert lm_world.verify(p, completion) == reward
    assert lm_world.first_wrong_step(p, completion) == label


LONG = lm_world.ChainProblem(50, (("+", 9), ("-", 4), ("-", 7), ("*", 2), ("-", 9), ("-", 8), ("+", 3), ("-", 6),
                                ("+", 5), ("-", 9), ("-", 2), ("+", 8), ("-", 9), ("-", 5), ("+", 1), ("-", 3)))


def test_a_sixteen_step_chain_by_hand():
    assert LONG.values == [50, 59, 55, 48, 96, 87, 79, 82, 76, 81, 72, 70, 78, 69, 64, 65, 62]
    assert LONG.prompt == "50+9-4-7*2-9-8+3-6+5-9-2+8-9-5+1-3\n"
    assert LONG.lines[:4] == ["50+9=59", "59-4=55", "55-7=48", "48*2=96"] and LONG.lines[-1] == "#62"
    assert len(LONG.lines) == 17 and len(LONG.solution) == 16 * 8 + 3  # 7 characters and a newline a step


@pytest.mark.parametrize("change,reward,label", [
    (None, 1.0, None),
    ((15, "65-3=63"), 1.0, 15),     # a slip at the last step, the right answer anyway
    ((9, "81-9=71"), 1.0, 9),       # a slip in the middle: the verifier sees only the answer line
    ((16, "#63"), 0.0, 16),         # the answer line of a 16-step chain is step 16
    ((0, "50+9=58"), 1.0, 0),
])
def test_the_verifier_and_gold_labels_on_a_sixteen_step_chain(change, reward, label):
    lines = list(LONG.lines)
    if change is not None:
        lines[change[0]] = change[1]
    completion = "\n".join(lines)
    assert lm_world.verify(LONG, completion) == reward
    assert lm_world.first_wrong_step(LONG, completion) == label
    assert lm_world.first_wrong_step(LONG, "\n".join(LONG.lines[:12])) == 12  # cut after 12 steps
    assert lm_world.first_wrong_step(LONG, "\n".join(LONG.lines + ["#62"])) == 17  # one line too many


@pytest.mark.parametrize("max_steps", [1, 4, 8, 16])
def test_the_longest_prompt_and_solution_are_reached_and_never_passed(max_steps):
    task = lm_world.ChainTask(max_steps=max_steps)
    problems = task.sample(3000, np.random.default_rng(0), steps=max_steps)
    assert max(len(p.question) for p in problems) == task.longest_prompt
    assert max(len(p.solution) + 1 for p in problems) == task.longest_solution  # + EOS


def test_the_completion_budget_follows_the_chain_length_unless_given():
    assert lm_world.LMArgs().max_new_tokens == 48
    assert lm_world.LMArgs(max_steps=16).max_new_tokens == 16 * 8 + 4 + 12
    assert lm_world.LMArgs(max_steps=16, max_new_tokens=20).max_new_tokens == 20


def test_a_long_chain_cold_start_gets_the_context_it_needs(tmp_path):
    config = lm_world.ColdStart(max_steps=16, hidden=16, layers=1, heads=2, sft_steps=1, sft_batch=2)
    model, _, _ = lm_world.cold_start_policy(config, "cpu", tmp_path, progress=False)
    assert model.config.max_position_embeddings == 35 + 132
    short = lm_world.ColdStart(hidden=16, layers=1, heads=2, sft_steps=1, sft_batch=2)
    assert lm_world.cold_start_policy(short, "cpu", tmp_path, progress=False)[0].config.max_position_embeddings == 128


# ------------------------------------------------------------------- tokenizer and batches
def test_char_tokenizer_round_trip_and_left_padding():
    tok = lm_world.make_char_tokenizer()
    text = "12+7=19\n#19"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text) and tok.decode(ids) == text
    ids, mask = lm_world.encode_prompts(tok, ["1\n", "123\n"])
    assert mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]] and ids[0, 0] == tok.pad_token_id
    assert lm_world.positions_from_mask(mask).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]


class ScriptCache:
    """The rows (of the first batch) a ScriptedLM still holds; the sampler drops rows that ended."""

    def __init__(self, rows: int):
        self.rows = list(range(rows))

    def batch_select_indices(self, kept: torch.Tensor) -> None:
        self.rows = [self.rows[i] for i in kept.tolist()]


class ScriptedLM(torch.nn.Module):
    """A stand-in LM that emits, in row i, the tokens of script[i] one by one (then <eos>); it
    records the batch size of each call."""

    def __init__(self, scripts: list[list[int]], vocab: int, eos: int):
        super().__init__()
        self.scripts, self.vocab, self.eos, self.step, self.batch_sizes = scripts, vocab, eos, 0, []

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=False):
        if cache is None:
            self.step, cache = 0, ScriptCache(len(input_ids))
        assert len(input_ids) == len(cache.rows) == len(attention_mask) == len(position_ids)
        self.batch_sizes.append(len(input_ids))
        logits = torch.full((len(input_ids), input_ids.shape[1], self.vocab), -1e4)
        for position, row in enumerate(cache.rows):
            script = self.scripts[row]
            logits[position, -1, script[self.step] if self.step < len(script) else self.eos] = 0.0
        self.step += 1
        return SimpleNamespace(logits=logits, cache=cache)


def test_sampling_masks_prompt_padding_and_after_eos():
    tok = lm_world.make_char_tokenizer()
    eos, pad = tok.eos_token_id, tok.pad_token_id
    digit = tok.convert_tokens_to_ids("7")
    model = ScriptedLM([[digit, eos], [digit] * 3, [eos]], len(tok), eos)
    ids, mask = lm_world.encode_prompts(tok, ["1\n", "12\n", "123\n"])
    r = lm_world.sample_completions(model, ids, mask, max_new_tokens=3, eos_id=eos, pad_id=pad)
    assert r.prompt_length == 4
    assert r.completion_ids.tolist() == [[digit, eos, pad], [digit] * 3, [eos, pad, pad]]
    assert r.completion_mask.tolist() == [[True, True, False], [True] * 3, [True, False, False]]
    assert r.truncated.tolist() == [False, True, False]  # row 1 never ended
    assert r.attention_mask[:, :4].tolist() == mask.tolist()
    assert torch.equal(r.attention_mask[:, 4:].bool(), r.completion_mask)
    assert torch.all(r.logprobs[~r.completion_mask] == 0) and r.lengths.tolist() == [2, 3, 1]
    texts = lm_world.completion_texts(tok, r)
    assert texts == ["7", "777", ""]
    assert model.batch_sizes == [3, 2, 1]  # a row that has ended leaves the batch: no compute on it


def test_sampling_draws_what_multinomial_over_the_whole_batch_draws():
    """The sampler drops ended rows but keeps the random stream of a loop that feeds every row to
    the model and draws with torch.multinomial: the same tokens and log-probs as that naive loop."""
    model, tok = tiny_model()
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n", "45*2-1\n", "7\n", "12-3+4\n"] * 4)
    r = lm_world.sample_completions(model, ids, mask, 12, tok.eos_token_id, tok.pad_token_id,
                                  torch.Generator().manual_seed(3))
    generator, sequence, alive = torch.Generator().manual_seed(3), ids, torch.ones(len(ids), dtype=torch.bool)
    for _ in range(r.completion_mask.shape[1]):  # no cache, every row, every step
        attention = torch.cat([mask, r.attention_mask[:, ids.shape[1]:sequence.shape[1]]], 1)
        logits = model(input_ids=sequence, attention_mask=attention,
                       position_ids=lm_world.positions_from_mask(attention)).logits[:, -1]
        token = torch.multinomial(torch.log_softmax(logits.float(), -1).exp(), 1, generator=generator).squeeze(1)
        token = torch.where(alive, token, tok.pad_token_id)
        alive = alive & (token != tok.eos_token_id)
        sequence = torch.cat([sequence, token[:, None]], 1)
    assert torch.equal(sequence, r.sequences) and r.lengths.min() < r.lengths.max()


def tiny_model(seed=0):
    torch.manual_seed(seed)
    tok = lm_world.make_char_tokenizer()
    return lm_world.make_tiny_lm(tok, hidden=16, layers=2, heads=2), tok


def test_sampled_logprobs_match_a_direct_forward_pass_without_padding():
    model, tok = tiny_model()
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n", "45*2-1\n", "7\n"])
    r = lm_world.sample_completions(model, ids, mask, 12, tok.eos_token_id, tok.pad_token_id,
                                  torch.Generator().manual_seed(0))
    batched, entropy = lm_world.token_logprobs(model, r.sequences, r.attention_mask, r.prompt_length, with_entropy=True)
    m = r.completion_mask
    torch.testing.assert_close(batched[m], r.logprobs[m], atol=1e-4, rtol=1e-4)
    assert torch.all(entropy[m] > 0) and torch.all(entropy[m] <= math.log(len(tok)) + 1e-5)
    for i in range(len(ids)):  # one row, no padding at all, plain positions
        row = torch.cat([ids[i][mask[i].bool()], r.completion_ids[i][m[i]]])[None]
        logits = model(input_ids=row).logits[0].float()
        n_prompt = int(mask[i].sum())
        direct = torch.log_softmax(logits[n_prompt - 1:-1], -1).gather(1, row[0, n_prompt:, None]).squeeze(1)
        torch.testing.assert_close(direct, r.logprobs[i][m[i]], atol=1e-4, rtol=1e-4)


def test_same_generator_seed_gives_the_same_samples():
    model, tok = tiny_model()
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n"] * 4)
    draws = [lm_world.sample_completions(model, ids, mask, 8, tok.eos_token_id, tok.pad_token_id,
                                       torch.Generator().manual_seed(3)).sequences for _ in range(2)]
    assert torch.equal(*draws)


def test_sample_in_chunks_stacks_into_one_batch_padded_to_the_budget():
    model, tok = tiny_model()
    prompts = ["1+2\n", "45*2-1\n", "7\n", "3*3\n", "9-4\n"]
    whole, texts = lm_world.sample(model, tok, prompts, 6, torch.Generator().manual_seed(0), "cpu")
    direct = lm_world.sample_completions(model, *lm_world.encode_prompts(tok, prompts), 6, tok.eos_token_id,
                                       tok.pad_token_id, torch.Generator().manual_seed(0))
    assert torch.equal(whole.sequences, direct.sequences) and texts == lm_world.completion_texts(tok, direct)
    chunked, chunk_texts = lm_world.sample(model, tok, prompts, 6, torch.Generator().manual_seed(0), "cpu", chunk=2)
    assert chunked.sequences.shape == (5, whole.prompt_length + 6) and chunked.prompt_length == whole.prompt_length
    assert chunk_texts == lm_world.completion_texts(tok, chunked) and chunked.truncated.shape == (5,)
    assert torch.equal(chunked.attention_mask[:, chunked.prompt_length:].bool(), chunked.completion_mask)
    assert torch.all(chunked.logprobs[~chunked.completion_mask] == 0)
    first, _ = lm_world.sample(model, tok, prompts[:2], 6, torch.Generator().manual_seed(0), "cpu")
    width = first.completion_mask.shape[1]  # the first chunk is the same draw, right-padded to the budget
    assert torch.equal(chunked.sequences[:2, :first.sequences.shape[1]], first.sequences)
    assert not chunked.completion_mask[:2, width:].any()


def test_stack_pads_every_part_to_the_width_and_masks_the_padding():
    model, tok = tiny_model()
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n", "45\n"])
    parts = [lm_world.sample_completions(model, ids, mask, budget, tok.eos_token_id, tok.pad_token_id,
                                       torch.Generator().manual_seed(1)) for budget in (4, 2)]
    both = lm_world.Completions.stack(parts, 9, tok.pad_token_id)
    assert both.completion_mask.shape == (4, 9) and both.sequences.shape == (4, parts[0].prompt_length + 9)
    assert torch.equal(both.lengths, torch.cat([p.lengths for p in parts]))
    assert torch.all(both.completion_ids[:, 4:] == tok.pad_token_id) and not both.completion_mask[:, 4:].any()
    assert torch.all(both.logprobs[:, 4:] == 0) and torch.equal(both.attention_mask[:, both.prompt_length:].bool(),
                                                                 both.completion_mask)
    assert torch.equal(both.truncated, torch.cat([p.truncated for p in parts]))


def test_verifier_rewards_score_zero_for_a_truncated_completion():
    p = lm_world.ChainProblem(3, (("+", 4),))
    rewards = lm_world.verifier_rewards([p, p, p], ["3+4=7\n#7", "3+4=7\n#7", "#8"], torch.tensor([False, True, False]))
    assert rewards.tolist() == [1.0, 0.0, 0.0]


def test_a_completion_cut_at_the_budget_scores_zero_even_when_its_text_is_right():
    """Sampled end to end: row 0 writes the full worked solution (8 tokens) and is cut before its
    EOS, so its text "3+4=7\n#7" is right but it scores 0; row 1 answers "#5" and ends."""
    tok = lm_world.make_char_tokenizer()
    problems = [lm_world.ChainProblem(3, (("+", 4),)), lm_world.ChainProblem(2, (("+", 3),))]
    scripts = [tok(text, add_special_tokens=False)["input_ids"] for text in ("3+4=7\n#7", "#5")]
    model = ScriptedLM(scripts, len(tok), tok.eos_token_id)
    completions, texts = lm_world.sample(model, tok, [p.prompt for p in problems], 8, None, "cpu")
    assert texts == ["3+4=7\n#7", "#5"] and completions.truncated.tolist() == [True, False]
    assert [lm_world.verify(p, t) for p, t in zip(problems, texts)] == [1.0, 1.0]
    assert lm_world.verifier_rewards(problems, texts, completions.truncated).tolist() == [0.0, 1.0]
    result = lm_world.evaluate(model, tok, problems, samples=1, max_new_tokens=8, generator=None, device="cpu")
    assert result["correct"] == [0, 1]


def test_evaluate_pairs_each_sample_with_its_own_problem():
    tok = lm_world.make_char_tokenizer()
    problems = [lm_world.ChainProblem(3, (("+", 4),)), lm_world.ChainProblem(5, (("*", 2),))]
    # rows: problem 0 twice, then problem 1 twice; only problem 1's second sample is right
    scripts = [tok(text, add_special_tokens=False)["input_ids"] for text in ("#8", "#6", "#9", "#10")]
    model = ScriptedLM(scripts, len(tok), tok.eos_token_id)
    result = lm_world.evaluate(model, tok, problems, samples=2, max_new_tokens=5, generator=None, device="cpu",
                             ks=(1, 2))
    assert result["correct"] == [0, 1] and result["pass@1"] == 0.25 and result["pass@2"] == 0.5
    assert result["length"] == pytest.approx((3 + 3 + 3 + 4) / 4)  # the tokens and EOS


def test_a_budget_of_zero_tokens_samples_nothing():
    model, tok = tiny_model()
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n", "45\n"])
    r = lm_world.sample_completions(model, ids, mask, 0, tok.eos_token_id, tok.pad_token_id)
    assert r.completion_mask.shape == (2, 0) and r.logprobs.shape == (2, 0) and torch.equal(r.sequences, ids)
    assert r.truncated.tolist() == [True, True] and lm_world.completion_texts(tok, r) == ["", ""]


def test_temperature_zero_is_greedy():
    model, tok = tiny_model()
    ids, mask = lm_world.encode_prompts(tok, ["1+2\n", "45*2-1\n"])
    first = lm_world.sample_completions(model, ids, mask, 6, tok.eos_token_id, tok.pad_token_id, temperature=0)
    again = lm_world.sample_completions(model, ids, mask, 6, tok.eos_token_id, tok.pad_token_id, temperature=0)
    assert torch.equal(first.sequences, again.sequences) and torch.all(first.logprobs == 0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=lm_world.positions_from_mask(mask)).logits
    assert torch.equal(first.completion_ids[:, 0], logits[:, -1].argmax(-1))  # the most likely first token
    with pytest.raises(ValueError, match="temperature must be"):
        lm_world.sample_completions(model, ids, mask, 6, tok.eos_token_id, tok.pad_token_id, temperature=-1)


def test_token_step_ids_and_step_ends():
    tok = lm_world.make_char_tokenizer()
    ids = torch.tensor([tok("1+2=3\n#3", add_special_tokens=False)["input_ids"] + [tok.eos_token_id, 0]])
    mask = torch.tensor([[True] * 9 + [False]])
    original = ids.clone()
    steps = lm_world.token_step_ids(tok, ids, mask)
    assert steps.tolist() == [[0, 0, 0, 0, 0, 0, 1, 1, 1, -1]]  # "\n" ends step 0; EOS joins the last
    assert torch.equal(ids, original)  # the caller's ids (often a view of the rollouts) stay as they were
    assert lm_world.step_end_mask(steps).tolist() == [[False] * 5 + [True, False, False, True, False]]


# ----------------------------------------------------------------------------- evaluation
def test_pass_at_k_matches_enumeration_and_refuses_k_beyond_n():
    for n, c, k in [(5, 2, 1), (5, 2, 3), (6, 0, 2), (6, 6, 4), (7, 3, 5)]:
        outcomes = [1] * c + [0] * (n - c)
        subsets = list(itertools.combinations(outcomes, k))
        assert math.isclose(lm_world.pass_at_k(n, c, k), np.mean([any(s) for s in subsets]))
    for n, c, k in [(2, 0, 3), (2, 3, 1), (2, 1, 0)]:
        with pytest.raises(ValueError, match="pass@k needs"):
            lm_world.pass_at_k(n, c, k)


# --------------------------------------------------------------- cold start and --model
def test_sft_batch_marks_the_target_and_eos_and_pads_on_the_right():
    tok = lm_world.make_char_tokenizer()
    p = lm_world.ChainProblem(3, (("+", 4),))  # prompt "3+4\n", solution "3+4=7\n#7"
    ids, attention, loss_mask = lm_world.sft_batch(tok, [p, p], [False, True], "cpu")
    eos, pad = tok.eos_token_id, tok.pad_token_id
    assert tok.decode(ids[0, :12].tolist()) == "3+4\n3+4=7\n#7" and ids[0, 12] == eos
    assert tok.decode(ids[1, :6].tolist()) == "3+4\n#7" and ids[1, 6] == eos and torch.all(ids[1, 7:] == pad)
    assert loss_mask.tolist() == [[False] * 4 + [True] * 9, [False] * 4 + [True] * 3 + [False] * 6]
    assert attention.tolist() == [[1] * 13, [1] * 7 + [0] * 6]


def test_sft_loss_is_the_mean_nll_of_exactly_the_target_tokens_and_eos(monkeypatch):
    """The first step's loss against each row alone, without padding: the mean over every
    target token and EOS of -log π(token | what precedes it); the prompt is never a target."""
    model, tok = tiny_model(3)
    before = copy.deepcopy(model)
    batches = []

    def recorded_sft_batch(*args):
        batches.append(real_sft_batch(*args))
        return batches[-1]

    real_sft_batch = lm_world.sft_batch
    monkeypatch.setattr(lm_world, "sft_batch", recorded_sft_batch)
    config = lm_world.ColdStart(max_steps=3, sft_steps=2, sft_batch=6, sft_lr=1e-2, shortcut_prob=0.5, seed=1)
    losses = lm_world.supervised_finetune(model, tok, config, device="cpu", progress=False)
    ids, attention, _ = batches[0]
    newline = tok.convert_tokens_to_ids("\n")
    nll, targets = [], set()
    for row, real in zip(ids, attention.bool()):
        tokens = row[real]
        start = int((tokens == newline).nonzero()[0]) + 1  # the prompt ends at its newline
        targets.add(tok.decode(tokens[start:].tolist(), skip_special_tokens=True).startswith("#"))
        logp = torch.log_softmax(before(input_ids=tokens[None]).logits[0], -1)
        nll += [-logp[j - 1, tokens[j]].item() for j in range(start, len(tokens))]
        assert tokens[-1] == tok.eos_token_id
    assert targets == {True, False}  # bare answers and worked solutions, of different lengths
    assert abs(losses[0] - float(np.mean(nll))) < 1e-5
    assert len(losses) == 2 and losses[1] != losses[0]  # the second batch, after a step


def test_cold_start_is_trained_once_then_loaded_from_its_cache(tmp_path):
    config = lm_world.ColdStart(hidden=16, layers=1, heads=2, sft_steps=3, sft_batch=4)
    model, tok, info = lm_world.cold_start_policy(config, "cpu", tmp_path, progress=False)
    assert info["trained_now"] and len(info["sft_losses"]) == 3
    again, tok2, info2 = lm_world.cold_start_policy(config, "cpu", tmp_path, progress=False)
    assert not info2["trained_now"] and info2["path"] == str(tmp_path / config.key)
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)
    assert config.key != lm_world.ColdStart(hidden=16, layers=1, heads=2, sft_steps=4, sft_batch=4).key


def tiny_cache(tmp_path):
    config = lm_world.ColdStart(hidden=16, layers=1, heads=2, sft_steps=3, sft_batch=4)
    lm_world.cold_start_policy(config, "cpu", tmp_path, progress=False)
    return config, tmp_path / config.key


def truncate(path):
    path.write_bytes(path.read_bytes()[:100])


@pytest.mark.parametrize("damage", [
    lambda folder: truncate(folder / "model.safetensors"),
    lambda folder: (folder / "model.safetensors").unlink(),
    lambda folder: (folder / "config.json").unlink(),
    lambda folder: (folder / "tokenizer.json").unlink(),
    lambda folder: (folder / "tokenizer_config.json").unlink(),
    lambda folder: (folder / "cold_start.json").unlink(),
    lambda folder: (folder / "cold_start.json").write_text("{not json"),
    lambda folder: (folder / "cold_start.json").write_text('{"config": {"hidden": 99}}'),
], ids=["truncated weights", "no weights", "no config", "no tokenizer", "no tokenizer config", "no record",
        "garbled record", "record of another config"])
def test_a_damaged_cache_says_so_in_one_line_and_rebuilds(tmp_path, capsys, damage):
    config, folder = tiny_cache(tmp_path)
    capsys.readouterr()
    damage(folder)
    model, tok, info = lm_world.cold_start_policy(config, "cpu", tmp_path, progress=False)
    err = capsys.readouterr().err.strip().splitlines()
    assert info["trained_now"] and len(err) == 1 and "does not load" in err[0] and "rebuilding" in err[0]
    again, _, info = lm_world.cold_start_policy(config, "cpu", tmp_path, progress=False)
    assert not info["trained_now"] and not capsys.readouterr().err  # healed: it loads, silently
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    assert sorted(p.name for p in tmp_path.iterdir()) == [config.key]  # no half-written folder left


def test_load_pretrained_reads_any_saved_causal_lm(tmp_path):
    model, tok = tiny_model(2)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, loaded_tok = lm_world.load_pretrained(str(tmp_path), "cpu")
    assert loaded_tok.padding_side == "left" and loaded_tok.pad_token_id is not None
    ids, mask = lm_world.encode_prompts(loaded_tok, ["3*3\n"])
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


@pytest.mark.parametrize("name,message", [
    ("{tmp}/no_such_folder", "no such folder"),
    ("{tmp}/empty", "no model in that folder"),
    ("{tmp}/not_a_model", "cannot load a causal LM and its tokenizer"),
    ("no-such-org/no-such-model", "cannot load a causal LM and its tokenizer"),
])
def test_a_model_that_cannot_be_loaded_stops_in_one_line_and_fast(tmp_path, capsys, name, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "not_a_model").mkdir()
    (tmp_path / "not_a_model" / "config.json").write_text('{"model_type": "no-such-family"}')
    start = time.time()
    with pytest.raises(SystemExit) as stop:
        lm_world.load_pretrained(name.format(tmp=tmp_path), "cpu")
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and err.count("\n") == 0 and message in err
    assert time.time() - start < 20  # no retry loop against an unreachable hub


# -------------------------------------------------------------------- credit localisation
def test_auroc_and_localisation_by_hand():
    assert lm_world.auroc(np.array([3.0, 2.0]), np.array([1.0, 2.0])) == 0.875
    assert math.isnan(lm_world.auroc(np.array([]), np.array([1.0])))
    assert math.isnan(lm_world.localisation([], [])["auroc"])
    credits = [np.array([0.0, -1.0, 0.0]), np.array([0.0, 0.0]), np.array([-1.0, 0.0])]
    result = lm_world.localisation(credits, [1, 0, 1])  # right, a tie, wrong
    assert result["top1"] == pytest.approx((1 + 0.5 + 0) / 3)
    # pooled: positives -credit [1, 0, 0] against negatives [0, 0, 0, 1]: (3.5 + 1.5 + 1.5) / 12
    assert result["auroc"] == pytest.approx(6.5 / 12)
    flat = lm_world.localisation([np.zeros(3), np.zeros(2)], [2, 0])
    assert flat["auroc"] == 0.5
    # a solution with no step credit counts for nothing; with none left, both are NaN
    assert lm_world.localisation(credits + [np.array([])], [1, 0, 1, 0]) == result
    assert all(math.isnan(v) for v in lm_world.localisation([np.array([])], [0]).values())


def test_a_study_runs_its_chapters_settings_on_its_own_model_task_and_seed():
    grpo = importlib.import_module("05_grpo_rloo")

    @dataclasses.dataclass
    class StudyArgs(lm_world.LMArgs):
        out: str = "runs/studies/x"

    study = StudyArgs(seed=7, max_steps=3, sft_steps=11)
    settings = lm_world.chapter_lm_args(grpo.Args, study, final_samples=5)
    assert type(settings) is grpo.Args and (settings.seed, settings.max_steps, settings.sft_steps) == (7, 3, 11)
    assert settings.final_samples == 5 and settings.rl_steps == grpo.Args().rl_steps
    smoke = lm_world.chapter_lm_args(grpo.Args, dataclasses.replace(study, smoke=True))
    assert smoke.rl_steps == grpo.Args.SMOKE["rl_steps"] and smoke.seed == 7


@pytest.mark.parametrize("text,ok", [("12+7=19\n19*3=57\n#57", True), ("#57", True), ("12+7=19\n#5x", False),
                                     ("12+7=19\n19*3=\n#57", False), ("12+7=19", False), ("", False),
                                     ("12-7=5\n\n#5", False), ("12+7=19\n#19\n", False)])
def test_well_formed_reads_the_format_not_the_arithmetic(text, ok):
    assert lm_world.well_formed(text) is ok
    assert lm_world.well_formed("1+1=3\n#9")  # wrong, but well formed


def test_steps_right_judges_each_line_from_the_value_the_line_before_reached():
    problem = lm_world.ChainProblem(5, (("+", 2), ("*", 3), ("-", 1)))
    assert lm_world.steps_right(problem, problem.solution) == [True] * 4
    # a slip at the multiplication: the lines after it are right on their own, from the wrong value
    assert lm_world.steps_right(problem, "5+2=7\n7*3=22\n22-1=21\n#21") == [True, False, True, True]
    assert lm_world.steps_right(problem, "5+2=7\n7*3=21\n21-2=19\n#19") == [True, True, False, True]
    assert lm_world.steps_right(problem, "5-2=3\n3*3=9") == [False, True]  # wrong op, then right from its value
    assert lm_world.steps_right(problem, "5+2=7\n7*3=21\n21-1=20\n#20\n#20") == [True] * 4 + [False]
    assert lm_world.steps_right(problem, "#20") == [False]
    assert lm_world.steps_right(problem, "5+2=7\n=3*3=9\n") == [True, False, False]


def test_one_hard_step_chains_hold_one_multiplication_at_a_random_place_and_stay_in_range():
    task = lm_world.ChainTask(2, 16, one_hard_step=True)
    problems = task.sample(4000, np.random.default_rng(0))
    assert all([op for op, _ in p.ops].count("*") == 1 for p in problems)
    assert all(0 <= v <= task.max_value for p in problems for v in p.values)
    places = [next(i for i, (op, _) in enumerate(p.ops) if op == "*") / len(p.ops) for p in problems]
    uniform = np.mean([(len(p.ops) - 1) / (2 * len(p.ops)) for p in problems])  # the mean place if uniform on 0..L-1
    assert np.mean(places) == pytest.approx(uniform, abs=0.015)  # 3 standard errors
    assert {len(p.ops) for p in problems} == set(range(2, 17))


def test_the_default_task_draws_what_it_drew_before_the_one_hard_step_option():
    # the first problems of seed 0, as every cached cold start and committed run drew them
    problems = lm_world.ChainTask().sample(3, np.random.default_rng(0))
    assert [p.question for p in problems] == ['64-3+1+1+8\n', '91-6-7-5\n', '93+5-1+2\n']
    assert lm_world.ColdStart().key == "c75078e898"  # the default cold start's cache keeps its name
    assert "one_hard_step" not in lm_world.ColdStart().record
    hard = lm_world.ColdStart(one_hard_step=True, hard_step_accuracy=0.4)
    assert hard.record["hard_step_accuracy"] == 0.4 and hard.key != lm_world.ColdStart().key


def test_a_noisy_demonstration_slips_only_at_the_hard_step_and_goes_on_from_the_wrong_value():
    task = lm_world.ChainTask(2, 8, one_hard_step=True)
    rng = np.random.default_rng(1)
    problems = task.sample(200, rng)
    assert all(task.demonstration(p, 1.0, rng) == p for p in problems[:20])
    for problem in problems:
        shown = task.demonstration(problem, 0.0, rng)
        if shown.slip == 0:  # no wrong value keeps the rest of this chain in range
            continue
        hard = next(i for i, (op, _) in enumerate(problem.ops) if op == "*")
        right = lm_world.steps_right(problem, shown.solution)
        assert right == [i != hard for i in range(len(problem.lines))]
        assert shown.prompt == problem.prompt and all(0 <= v <= task.max_value for v in shown.values)
    slipped = sum(task.demonstration(p, 0.4, np.random.default_rng(i)).slip != 0 for i, p in enumerate(problems))
    assert 0.5 < slipped / len(problems) < 0.7


def test_sample_shape_reads_well_formed_and_distinct_shares_per_problem():
    texts = ["1+2=3\n#3", "1+2=3\n#3", "#3", "oops"]  # two problems of two samples
    assert lm_world.sample_shape(texts, 2) == {"distinct": 0.75, "well_formed": 0.75}
