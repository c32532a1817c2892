"""`--model` with another causal-LM family: a tiny GPT-2 with a byte-level BPE tokenizer, both built
here offline, whose tokens hold several characters, newlines among them ("\\n#8"), and steps
found in the decoded text whatever the tokenizer (a token may also hold two newlines); a tiny OPT,
a family transformers has no token-classification class for (06 builds its reward models from
the trunk)."""

import dataclasses
import importlib
import math

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2ForTokenClassification,
    GPT2LMHeadModel,
    OPTConfig,
    OPTForCausalLM,
    PreTrainedTokenizerFast,
)

import common
import lm_world

grpo = importlib.import_module("05_grpo_rloo")
critic = importlib.import_module("studies.05_critic")
prm = importlib.import_module("06_prm_qrm")
prm_study = importlib.import_module("studies.06_overoptimisation")
ss = importlib.import_module("07_ss_grpo")


def byte_level_bpe(vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on the task's own text, without GPT-2's split at whitespace, so
    that merges cross newlines ("\\n#8", "9\\n99")."""
    problems = lm_world.ChainTask().sample(2000, np.random.default_rng(0))
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator([p.question + p.solution for p in problems], trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", padding_side="left")


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    """A 2-layer GPT2LMHeadModel and its byte-level BPE tokenizer, saved with save_pretrained."""
    folder = tmp_path_factory.mktemp("tiny_gpt2")
    tok = byte_level_bpe()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=32, n_layer=2, n_head=2,
                        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)
    GPT2LMHeadModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_opt(tmp_path_factory):
    """A 2-layer OPTForCausalLM (its trunk projects 32 wide states to 16 for the LM head) and the
    byte-level BPE, saved with save_pretrained."""
    folder = tmp_path_factory.mktemp("tiny_opt")
    tok = byte_level_bpe()
    torch.manual_seed(0)
    config = OPTConfig(vocab_size=len(tok), hidden_size=32, word_embed_proj_dim=16, ffn_dim=64, num_hidden_layers=2,
                       num_attention_heads=2, max_position_embeddings=256, pad_token_id=tok.pad_token_id,
                       eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id)
    OPTForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def word_tokenizer(tokens: list[str]) -> PreTrainedTokenizerFast:
    """A tokenizer whose tokens are exactly `tokens` (to write completions token by token)."""
    core = Tokenizer(models.WordLevel({t: i for i, t in enumerate(["<pad>", "<eos>", *tokens])}, unk_token="<pad>"))
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


def completion(tok, pieces: list[str], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = [tok.convert_tokens_to_ids(p) for p in pieces] + [tok.eos_token_id]
    mask = [True] * len(ids) + [False] * (width - len(ids))
    return torch.tensor([ids + [tok.pad_token_id] * (width - len(ids))]), torch.tensor([mask])


# ------------------------------------------------------------------ steps from the decoded text
def test_steps_follow_the_text_when_a_token_holds_a_newline_and_more():
    tok = word_tokenizer(["12", "+7", "=19", "\n#", "19", "\n\n", "#", "5", "\n"])
    ids, mask = completion(tok, ["12", "+7", "=19", "\n#", "19"], 7)  # "12+7=19\n#19"
    assert lm_world.token_step_ids(tok, ids, mask).tolist() == [[0, 0, 0, 0, 1, 1, -1]]  # EOS joins the last line
    assert lm_world.step_end_tokens(tok, ids, mask).tolist() == [[3, 5]]  # line 0 ends in "\n#", line 1 at EOS


def test_a_token_with_two_newlines_ends_two_lines_and_no_line_disappears():
    tok = word_tokenizer(["12", "+7", "=19", "\n#", "19", "\n\n", "#", "5", "\n"])
    ids, mask = completion(tok, ["12", "+7", "=19", "\n\n", "#", "5"], 8)  # "12+7=19\n\n#5": 3 lines
    assert lm_world.token_step_ids(tok, ids, mask).tolist() == [[0, 0, 0, 0, 2, 2, 2, -1]]
    ends = lm_world.step_end_tokens(tok, ids, mask)
    assert ends.tolist() == [[3, 3, 6]]  # the empty line begins and ends inside "\n\n"
    assert len(ends[0]) == len(tok.decode(ids[0][mask[0]], skip_special_tokens=True).split("\n"))
    # 06: both lines' labels reach that token (their mean); every line has a PRM score and a Q-RM mean
    targets = prm.step_targets(ends, [[1.0, 0.0, 1.0]], 8)
    assert targets[0, 3] == 0.5 and targets[0, 6] == 1.0 and targets[0].sum() == 1.5
    probs = torch.tensor([[0.9, 0.9, 0.9, 0.4, 0.7, 0.7, 0.8, 0.0]])
    assert math.isclose(float(prm_study.prm_product(probs, ends)), 0.4 * 0.4 * 0.8, rel_tol=1e-6)
    step_ids = lm_world.token_step_ids(tok, ids, mask)[0]
    assert prm.step_means(probs[0], step_ids, ends[0], 3).tolist() == pytest.approx([0.775, 0.4, 0.7333333])
    # 07: every line becomes an estimator row, the empty one reading the token it ends in
    prompt_ids, prompt_mask = lm_world.encode_prompts(tok, ["12"])
    batch = ss.step_batch(lm_world.Completions(torch.cat([prompt_ids, ids], 1), torch.cat([prompt_mask, mask.long()], 1),
                                             mask, torch.zeros(ids.shape), torch.tensor([False]), 1),
                          lm_world.token_step_ids(tok, ids, mask), ends, chunk=512, pad_id=tok.pad_token_id)
    assert batch.step_index.tolist() == [0, 1, 2]
    assert [tok.decode(row[p]) for row, p in zip(batch.ids, batch.pool)] == ["12+7=19\n\n", "\n\n", "#5<eos>"]


# ---------------------------------------------------------------- a GPT-2 with a byte-level BPE
def test_the_bpe_merges_newlines_with_text_and_steps_match_the_decoded_lines(tiny_gpt2):
    model, tok = lm_world.load_pretrained(str(tiny_gpt2), "cpu")
    assert type(model).__name__ == "GPT2LMHeadModel"
    merged = [t for t in tok.get_vocab() if "Ċ" in t and len(t) > 1]  # "Ċ" is the byte-level newline
    assert merged, "the BPE should hold tokens that merge a newline with other text"
    problems = lm_world.ChainTask().sample(8, np.random.default_rng(1))
    r, texts = lm_world.sample(model, tok, [p.prompt for p in problems], 24, torch.Generator().manual_seed(0), "cpu")
    ends = lm_world.step_end_tokens(tok, r.completion_ids, r.completion_mask)
    for row, text in zip(ends, texts):
        assert int((row >= 0).sum()) == len(text.split("\n"))  # one step per line of the decoded text


@pytest.mark.parametrize("family", ["tiny_gpt2", "tiny_opt"])
@pytest.mark.parametrize("script", [grpo, critic, prm, ss], ids=["05", "05 critic", "06", "07"])
def test_every_lm_script_runs_on_each_family(family, request, tmp_path, read_results, script):
    folder = request.getfixturevalue(family)
    args = script.Args(smoke=True, device="cpu", model=str(folder), out=str(tmp_path / "out"))
    if script is grpo:
        args = dataclasses.replace(args, methods="grpo,rloo")
    result = script.main(args)
    data = read_results(tmp_path / "out" / "results.json")  # strict JSON: no NaN anywhere
    assert data["metrics"] == common.json_ready(result["metrics"])
    defined = [v for v in data["metrics"].values() if v is not None]
    assert defined and all(math.isfinite(v) for v in defined if isinstance(v, float))
    pass_at_1 = [v for k, v in data["metrics"].items() if "pass@1" in k]
    assert pass_at_1 and all(v is not None and 0 <= v <= 1 for v in pass_at_1)


# ------------------------------------------------- 06's reward models without a class of their own
def test_the_trunk_scorer_is_the_token_classifier_of_a_family_that_has_one(tiny_gpt2):
    policy, _ = lm_world.load_pretrained(str(tiny_gpt2), "cpu")
    trunk = lm_world.TrunkScorer(policy)
    config = GPT2Config.from_dict({**policy.config.to_dict(), "num_labels": 1})
    reference = GPT2ForTokenClassification(config)
    reference.transformer.load_state_dict(trunk.body.state_dict())
    reference.classifier.load_state_dict(trunk.score.state_dict())
    ids = torch.randint(2, policy.config.vocab_size, (3, 9), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # a left-padded row
    trunk.eval(), reference.eval()
    position_ids = lm_world.positions_from_mask(mask)
    torch.testing.assert_close(prm.scorer_logits(trunk, ids, mask, 2),
                               reference(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits[:, 2:, 0])


def test_opt_reward_models_start_from_the_policy_trunk_and_train_apart_from_it(tiny_opt):
    policy, _ = lm_world.load_pretrained(str(tiny_opt), "cpu")
    scorer = prm.make_scorer(policy)
    assert isinstance(scorer, lm_world.TrunkScorer) and scorer.score.in_features == 16  # the projected width
    before = {k: v.clone() for k, v in policy.base_model.state_dict().items()}
    for k, v in scorer.body.state_dict().items():
        assert torch.equal(v, before[k])
    ids = torch.randint(2, policy.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(1))
    loss = prm.scorer_logits(scorer, ids, torch.ones_like(ids), 0).square().mean()
    loss.backward()
    assert scorer.body.get_input_embeddings().weight.grad is not None
    torch.optim.SGD(scorer.parameters(), lr=1.0).step()
    assert all(torch.equal(v, before[k]) for k, v in policy.base_model.state_dict().items())  # the policy stays


def test_a_tokenizer_larger_than_the_embedding_stops_with_one_line(tiny_gpt2, tmp_path, capsys):
    model, tok = lm_world.load_pretrained(str(tiny_gpt2), "cpu")
    model.resize_token_embeddings(len(tok) - 5)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    capsys.readouterr()  # the save's own progress bar
    with pytest.raises(SystemExit) as stop:
        lm_world.load_pretrained(str(tmp_path), "cpu")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert f"the tokenizer has {len(tok)} tokens but the model embeds only {len(tok) - 5}" in err


# ------------------------------------------------------------------------ prompts and chat
def test_the_prompt_format_wraps_the_question_and_the_cold_start_keeps_it_bare():
    args = lm_world.LMArgs(prompt_format="Q: {prompt}A:\n")
    problem = args.task.sample(1, np.random.default_rng(0))[0]
    assert problem.prompt == f"Q: {problem.question}A:\n" and problem.question.endswith("\n")
    assert args.cold_start.task.sample(1, np.random.default_rng(0))[0].prompt == problem.question
    assert {p.prompt for p in args.task.held_out(5)} == {f"Q: {p.question}A:\n" for p in lm_world.ChainTask().held_out(5)}
    with pytest.raises(ValueError, match="--prompt-format must contain"):
        lm_world.LMArgs(prompt_format="no placeholder")


def test_chat_template_puts_the_problem_in_a_user_turn(tiny_gpt2, tmp_path, capsys):
    model, tok = lm_world.load_pretrained(str(tiny_gpt2), "cpu")
    with pytest.raises(SystemExit) as stop:  # a base model has no chat template
        lm_world.chat_prompt_format(tok)
    assert stop.value.code == 2 and "has no chat template" in capsys.readouterr().err
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    model.save_pretrained(tmp_path / "chat")
    tok.save_pretrained(tmp_path / "chat")
    args = grpo.Args(smoke=True, device="cpu", model=str(tmp_path / "chat"), chat_template=True, out=str(tmp_path))
    args, *_ = lm_world.start_lm_run(args)
    assert args.prompt_format == "<|user|>{prompt}<|assistant|>"
    problem = args.task.sample(1, np.random.default_rng(0))[0]
    assert problem.prompt == f"<|user|>{problem.question}<|assistant|>"
