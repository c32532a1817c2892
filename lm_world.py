"""The small-LM world of 05-07, and nothing they teach.

The arithmetic-chain task with its verifier and gold step labels, a character tokenizer, a tiny
Llama and its cached cold start, any causal LM in its place, sampling with masks and log-probs,
pass@k and the LM scripts' shared flags. No estimator, loss, learning rule or training loop of a
method lives here: each is in the script that teaches it. Tested in tests/test_lm_world.py.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from common import RunArgs, apply_smoke, arg, fail, require, require_positive, start_run

if TYPE_CHECKING:  # transformers is imported where a model is built (it takes seconds)
    from transformers import PreTrainedModel, PreTrainedTokenizerBase, PreTrainedTokenizerFast

LMArgsT = TypeVar("LMArgsT", bound="LMArgs")


# ------------------------------------------------- the arithmetic-chain task and its verifier
HELD_OUT_SEED = 2**31 - 1  # one held-out set for every LM script, whatever --seed is
HELD_OUT_SIZE = 512  # never trained on (SFT and RL skip these prompts); evaluations use a prefix


@dataclasses.dataclass(frozen=True)
class ChainProblem:
    """A chain of operations applied left to right: start, then (op, operand) pairs.

    Question "12+7*3-5\\n"; worked solution, one step per line, then the answer line:
    "12+7=19\\n19*3=57\\n57-5=52\\n#52" (the model ends it with its end-of-sequence token). The
    model sees the question put into `prompt_format` at "{prompt}" (bare by default, as a base
    model sees it; a chat template for an instruct model).
    """

    start: int
    ops: tuple[tuple[str, int], ...]
    prompt_format: str = "{prompt}"
    slip: int = 0  # a demonstration's error: its multiplication off by this much, the chain going on from it

    @property
    def question(self) -> str:
        return f"{self.start}" + "".join(f"{op}{b}" for op, b in self.ops) + "\n"

    @property
    def prompt(self) -> str:
        return self.prompt_format.replace("{prompt}", self.question)

    @property
    def values(self) -> list[int]:
        """The running value after each step, starting value first."""
        values = [self.start]
        for op, b in self.ops:
            v = values[-1]
            values.append(v + b if op == "+" else v - b if op == "-" else v * b + self.slip)
        return values

    @property
    def answer(self) -> int:
        return self.values[-1]

    @property
    def lines(self) -> list[str]:
        """The gold lines of the solution: one per step, then the answer line."""
        v = self.values
        return [f"{v[i]}{op}{b}={v[i + 1]}" for i, (op, b) in enumerate(self.ops)] + [f"#{self.answer}"]

    @property
    def solution(self) -> str:
        return "\n".join(self.lines)


@dataclasses.dataclass(frozen=True)
class ChainTask:
    """Problems of `min_steps`..`max_steps` operations, operands 1..max_operand, every value within
    0..max_value. one_hard_step: one multiplication (the hard step) at a random place, the other
    steps additions and subtractions, so the length grows while what is hard stays one step."""

    min_steps: int = 1
    max_steps: int = 4
    max_value: int = 99
    max_operand: int = 9
    prompt_format: str = "{prompt}"
    one_hard_step: bool = False

    @property
    def longest_prompt(self) -> int:
        """Characters in the longest question: the start, each (op, operand), the newline."""
        return len(str(self.max_value)) + self.max_steps * (1 + len(str(self.max_operand))) + 1

    @property
    def longest_solution(self) -> int:
        """Characters in the longest worked solution ("a op b=c" and a newline per step, then
        "#answer"), plus EOS: a one-token-per-character model's budget."""
        digits, operand = len(str(self.max_value)), len(str(self.max_operand))
        return self.max_steps * (2 * digits + operand + 3) + 1 + digits + 1

    def _next_op(self, value: int, rng: np.random.Generator, allowed: str) -> tuple[str, int] | None:
        """A random op among `allowed` and a random operand that keeps the value in range; None if none does."""
        valid = {"+": [b for b in range(1, self.max_operand + 1) if value + b <= self.max_value],
                 "-": [b for b in range(1, self.max_operand + 1) if value - b >= 0],
                 "*": [b for b in range(2, self.max_operand + 1) if value * b <= self.max_value]}
        ops = [op for op, operands in valid.items() if operands and op in allowed]
        if not ops:
            return None
        op = ops[rng.integers(len(ops))]
        return op, int(valid[op][rng.integers(len(valid[op]))])

    def sample_one(self, rng: np.random.Generator, steps: int | None = None) -> ChainProblem:
        steps = steps if steps is not None else int(rng.integers(self.min_steps, self.max_steps + 1))
        hard = int(rng.integers(steps)) if self.one_hard_step else -1  # the position of the one multiplication
        while True:  # a chain whose value is too large to multiply at the hard step starts again
            value, ops = int(rng.integers(1, self.max_value + 1)), []
            start = value
            for i in range(steps):
                step = self._next_op(value, rng, "*" if i == hard else "+-" if hard >= 0 else "+-*")
                if step is None:
                    break
                ops.append(step)
                value = ChainProblem(value, (step,)).answer
            if len(ops) == steps:
                return ChainProblem(start, tuple(ops), self.prompt_format)

    def demonstration(self, problem: ChainProblem, accuracy: float, rng: np.random.Generator) -> ChainProblem:
        """A one-hard-step problem as a noisy demonstration shows it: the multiplication right with
        probability `accuracy`, else off by a random amount that keeps the rest of the chain in range."""
        if rng.random() < accuracy:
            return problem
        hard = next(i for i, (op, _) in enumerate(problem.ops) if op == "*")
        later = problem.values[hard + 1:]
        slips = [d for d in range(-min(later), self.max_value - max(later) + 1) if d != 0]
        return dataclasses.replace(problem, slip=int(rng.choice(slips))) if slips else problem

    def sample(self, n: int, rng: np.random.Generator, steps: int | None = None,
               exclude: frozenset[str] = frozenset()) -> list[ChainProblem]:
        """n problems (of `steps` steps if given), none whose prompt is in `exclude`."""
        problems = []
        while len(problems) < n:
            problem = self.sample_one(rng, steps)
            if problem.prompt not in exclude:
                problems.append(problem)
        return problems

    def held_out(self, n: int = HELD_OUT_SIZE) -> list[ChainProblem]:
        """The first n problems of the fixed evaluation set (its own seed, whatever the run's)."""
        require(n <= HELD_OUT_SIZE, f"the held-out set has {HELD_OUT_SIZE} problems, asked for {n}")
        return self.sample(n, np.random.default_rng(HELD_OUT_SEED))


STEP_LINE, ANSWER_LINE = re.compile(r"\d+[-+*]\d+=\d+"), re.compile(r"#\d+")


def well_formed(text: str) -> bool:
    """The shape of a solution, right or wrong: every line but the last a step "a op b=c", the
    last "#answer" (a bare answer is well formed too)."""
    lines = text.split("\n")
    return all(STEP_LINE.fullmatch(line) for line in lines[:-1]) and bool(ANSWER_LINE.fullmatch(lines[-1]))


def sample_shape(texts: list[str], per_problem: int) -> dict:
    """Samples grouped `per_problem` at a time: the share that is well-formed, and the mean share
    of distinct completions within a problem's group."""
    groups = [texts[i:i + per_problem] for i in range(0, len(texts), per_problem)]
    return {"distinct": float(np.mean([len(set(g)) / len(g) for g in groups])),
            "well_formed": float(np.mean([well_formed(t) for t in texts]))}


def verify(problem: ChainProblem, completion: str) -> float:
    """The outcome reward: 1 if the completion's last line is exactly "#<answer>", else 0."""
    return float(completion.split("\n")[-1] == f"#{problem.answer}")


def steps_right(problem: ChainProblem, completion: str) -> list[bool]:
    """Each line's own correctness: step i is "a op b=c" with the problem's op i, a the value the line
    before reached (or the start) and c = a op b; then "#value". A line past the answer is wrong."""
    lines, right, value = completion.split("\n"), [], str(problem.start)
    for i, line in enumerate(lines):
        if i < len(problem.ops):
            op, b = problem.ops[i]
            a, _, c = line.partition("=")
            ok = a == f"{value}{op}{b}" and value.isdigit() and c == str(ChainProblem(int(value), ((op, b),)).answer)
            right.append(ok)
            value = c
        else:
            right.append(i == len(problem.ops) and line == f"#{value}")
    return right


def first_wrong_step(problem: ChainProblem, completion: str) -> int | None:
    """Gold step label: the first line that differs from the worked solution (malformed, missing or
    extra lines count; the answer line is index n_steps), None if none; right answers get one too."""
    lines, gold = completion.split("\n"), problem.lines
    for i, line in enumerate(gold):
        if i >= len(lines) or lines[i] != line:
            return i
    return len(gold) if len(lines) > len(gold) else None


def make_char_tokenizer() -> PreTrainedTokenizerFast:
    """A PreTrainedTokenizerFast with one token per character of the task, built locally (nothing
    to download). Specials: <pad> 0, <eos> 1, <unk> 2."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<unk>", *"0123456789+-*=#\n"])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every char
    core.decoder = decoders.Fuse()  # join the characters back without spaces
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>", padding_side="left")


def make_tiny_lm(tokenizer: PreTrainedTokenizerBase, hidden: int, layers: int, heads: int,
                 context: int = 128) -> PreTrainedModel:
    """A small Llama-architecture causal LM, randomly initialised (tied input/output embeddings)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, max_position_embeddings=context, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None))


# ------------------------------------------------------------------ batches, masks, sampling
def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: list[str] | list[list[int]],
                   device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and attention mask (B, P): generation continues every row at P."""
    rows = [tokenizer(p, add_special_tokens=False)["input_ids"] if isinstance(p, str) else list(p)
            for p in prompts]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(r)) + r for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return ids.to(device), mask.to(device)


def head_width(model: PreTrainedModel) -> int:
    """The width the LM head reads, which a head on the trunk must take (OPT's can differ from hidden_size)."""
    return model.get_output_embeddings().in_features


class TrunkScorer(torch.nn.Module):
    """A token classifier for a family transformers has none for (OPT, GPT-J): trunk, dropout, linear."""

    def __init__(self, policy: PreTrainedModel):
        super().__init__()
        self.body = copy.deepcopy(policy.base_model)
        self.dropout = torch.nn.Dropout(0.1)  # the token-classification classes' default
        self.score = torch.nn.Linear(head_width(policy), 1)

    def forward(self, **inputs: torch.Tensor) -> Any:
        from transformers.modeling_outputs import TokenClassifierOutput

        return TokenClassifierOutput(logits=self.score(self.dropout(self.body(**inputs).last_hidden_state)))


def make_scorer(policy: PreTrainedModel) -> torch.nn.Module:
    """A token classifier of the policy's family, one output per token (a reward model), body copied."""
    from transformers import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING, AutoModelForTokenClassification

    config = copy.deepcopy(policy.config)
    config.num_labels = 1
    if type(config) not in MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING:
        return TrunkScorer(policy)
    scorer = AutoModelForTokenClassification.from_config(config).to(policy.device)
    scorer.base_model.load_state_dict(policy.base_model.state_dict())
    return scorer


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip the left padding: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(1) - 1).clamp(min=0)


@dataclasses.dataclass
class Completions:
    """One sampled completion per row: prompt columns 0..P-1 (left-padded), completion P..P+T-1.
    completion_mask (B, T): the generated tokens up to and including EOS; attention_mask (B, P+T):
    real prompt tokens and completion_mask; logprobs (B, T): log π of each sampled token under the
    sampling policy (0 where masked); truncated (B,): no EOS within the budget (cut)."""

    sequences: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    logprobs: torch.Tensor
    truncated: torch.Tensor
    prompt_length: int

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.sequences[:, self.prompt_length:]

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(1)

    @staticmethod
    def stack(parts: list[Completions], width: int, pad_id: int) -> Completions:
        """Batches of one prompt width, one after another, their completion columns right-padded
        (masked) to `width`."""
        def joined(name: str, pad: float) -> torch.Tensor:
            return torch.cat([F.pad(getattr(p, name), (0, width - p.completion_mask.shape[1]), value=pad)
                              for p in parts])

        return dataclasses.replace(parts[0], sequences=joined("sequences", pad_id),
                                   attention_mask=joined("attention_mask", 0),
                                   completion_mask=joined("completion_mask", False),
                                   logprobs=joined("logprobs", 0.0), truncated=torch.cat([p.truncated for p in parts]))


@torch.no_grad()
def sample_completions(model: PreTrainedModel, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                       max_new_tokens: int, eos_id: int, pad_id: int,
                       generator: torch.Generator | None = None, temperature: float = 1.0) -> Completions:
    """Sample one completion per row with a KV cache: each step feeds only the new token (as
    model.generate, which is no faster here and records no log-probs: studies/05_bench.py). A row
    that has ended gets <pad> with attention 0 and leaves the batch and its KV cache, so long
    completions do not make short ones pay. Temperature 0 is greedy decoding (log π = 0)."""
    if temperature < 0:
        raise ValueError(f"temperature must be ≥ 0, got {temperature}")
    was_training = model.training
    model.eval()
    attention = prompt_mask.long()
    positions = positions_from_mask(attention)
    out = model(input_ids=prompt_ids, attention_mask=attention, position_ids=positions, use_cache=True)
    next_position = positions[:, -1:] + 1
    alive = torch.ones(len(prompt_ids), dtype=torch.bool, device=prompt_ids.device)
    live = torch.arange(len(prompt_ids), device=prompt_ids.device)  # the rows the model and its cache still hold
    # on a GPU each look at `alive` waits for the device: look every 8 tokens, trim the surplus below
    check_every = 1 if prompt_ids.device.type == "cpu" else 8
    tokens, logprobs, masks = [prompt_ids[:, :0]], [prompt_ids[:, :0].float()], [alive[:, None][:, :0]]  # none yet
    for step in range(max_new_tokens):
        logits = out.logits[:, -1].float()
        if temperature > 0:
            logp = torch.log_softmax(logits / temperature, dim=-1)
            # torch.multinomial(p, 1) on CPU is argmax(p / q), q ~ Exp(1) drawn for every row: drawing q for
            # the whole batch keeps the samples of a loop that feeds its ended rows too
            q = torch.empty(len(alive), logits.shape[1], device=logits.device).exponential_(generator=generator)
            picked = (logp.exp() / q[live]).argmax(-1)
            picked_logp = logp.gather(1, picked[:, None]).squeeze(1)
        else:
            picked, picked_logp = logits.argmax(-1), torch.zeros_like(logits[:, 0])
        token = torch.full(alive.shape, pad_id, device=alive.device).index_copy(0, live, picked)
        token_logp = torch.zeros(alive.shape, device=alive.device).index_copy(0, live, picked_logp)
        token = torch.where(alive, token, pad_id)
        tokens.append(token[:, None])
        logprobs.append(torch.where(alive, token_logp, 0.0)[:, None])
        masks.append(alive[:, None])
        alive = alive & (token != eos_id)
        if step == max_new_tokens - 1 or ((step + 1) % check_every == 0 and not alive.any()):
            break
        attention = torch.cat([attention, alive[:, None].long()], dim=1)
        if (step + 1) % check_every == 0:  # ended rows leave the batch and the KV cache: no compute on them
            kept = alive[live].nonzero().squeeze(1)
            if len(kept) < len(live):
                out.cache.batch_select_indices(kept)
                live = live[kept]
        out = model(input_ids=token[live, None], attention_mask=attention[live], position_ids=next_position[live],
                    cache=out.cache, use_cache=True)
        next_position = next_position + 1
    model.train(was_training)
    completion_mask = torch.cat(masks, 1)
    width = int(completion_mask.any(0).sum())  # the columns up to the step where the last row ended
    completion_mask = completion_mask[:, :width]
    return Completions(sequences=torch.cat([prompt_ids, torch.cat(tokens, 1)[:, :width]], 1),
                       attention_mask=torch.cat([prompt_mask.long(), completion_mask.long()], 1),
                       completion_mask=completion_mask, logprobs=torch.cat(logprobs, 1)[:, :width],
                       truncated=alive, prompt_length=prompt_ids.shape[1])


def completion_texts(tokenizer: PreTrainedTokenizerBase, completions: Completions) -> list[str]:
    """The completions as text, without EOS and padding."""
    ids = completions.completion_ids.masked_fill(~completions.completion_mask, tokenizer.pad_token_id)
    return tokenizer.batch_decode(ids.tolist(), skip_special_tokens=True)


def sample(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: list[str], max_new_tokens: int,
           generator: torch.Generator | None, device: torch.device | str,
           chunk: int = 512, temperature: float = 1.0) -> tuple[Completions, list[str]]:
    """One completion per prompt, and its text: the one way every script samples. Prompts go through
    the model `chunk` rows at a time (memory), chunks padded to max_new_tokens to stack."""
    ids, mask = encode_prompts(tokenizer, prompts, device)
    parts = [sample_completions(model, ids[i:i + chunk], mask[i:i + chunk], max_new_tokens,
                                tokenizer.eos_token_id, tokenizer.pad_token_id, generator, temperature)
             for i in range(0, len(prompts), chunk)]
    completions = parts[0] if len(parts) == 1 else Completions.stack(parts, max_new_tokens, tokenizer.pad_token_id)
    return completions, completion_texts(tokenizer, completions)


def verifier_rewards(problems: list[ChainProblem], texts: list[str], truncated: torch.Tensor) -> torch.Tensor:
    """Outcome rewards (B,) on the CPU: the verifier on each text; a truncated completion scores 0."""
    rewards = torch.tensor([verify(p, t) for p, t in zip(problems, texts)])
    return rewards * (~truncated.cpu()).float()


def token_logprobs(model: PreTrainedModel, sequences: torch.Tensor, attention_mask: torch.Tensor,
                   prompt_length: int, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(y_t | x, y_<t) of every completion token in one forward pass, (B, T); and the
    entropy of π at each of those positions when asked. The logits at position t predict t+1."""
    logits = model(input_ids=sequences, attention_mask=attention_mask,
                   position_ids=positions_from_mask(attention_mask)).logits
    logp_all = torch.log_softmax(logits[:, prompt_length - 1:-1].float(), dim=-1)
    logp = logp_all.gather(2, sequences[:, prompt_length:, None]).squeeze(2)
    return logp, -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None


# Steps are the lines of a completion's decoded text. A token may hold several characters, a
# newline among them ("\n#5" in a byte-level BPE) or several newlines ("\n\n"): the newlines are
# counted in each token's own text, so lines map back to tokens whatever the tokenizer.
def newline_counts(tokenizer: PreTrainedTokenizerBase, completion_ids: torch.Tensor,
                   completion_mask: torch.Tensor) -> torch.Tensor:
    """The number of newlines in each completion token's text, (B, T); 0 where masked."""
    newline_count = {i: tokenizer.decode([i]).count("\n") for i in completion_ids.unique().tolist()}
    # apply_ works in place: on a copy, or it would overwrite the caller's ids (on CPU, .cpu() is no copy)
    counts = completion_ids.to("cpu", copy=True).apply_(newline_count.__getitem__).to(completion_ids.device)
    return counts * completion_mask


def token_step_ids(tokenizer: PreTrainedTokenizerBase, completion_ids: torch.Tensor,
                   completion_mask: torch.Tensor) -> torch.Tensor:
    """For each completion token, the line (step) its text begins in, (B, T); -1 where masked. A
    token holding a newline ends its step; EOS joins the last line. A line that begins and ends
    inside one token (the empty line of "\n\n") has no token of its own: see `step_end_tokens`."""
    counts = newline_counts(tokenizer, completion_ids, completion_mask)
    before = counts.cumsum(1) - counts  # newlines strictly before each token
    return torch.where(completion_mask, before, -1)


def step_end_tokens(tokenizer: PreTrainedTokenizerBase, completion_ids: torch.Tensor,
                    completion_mask: torch.Tensor) -> torch.Tensor:
    """For each line (step) k of each completion, the token where it ends, (B, S): the token that
    holds its newline, or the last token (EOS) for the last line; -1 beyond a row's lines. Every
    line has one, also a line that begins and ends inside one token (several lines then end at the
    same token), so line k of the text is step k here: step labels and rewards stay aligned."""
    through = newline_counts(tokenizer, completion_ids, completion_mask).cumsum(1)  # newlines up to each token
    lines = through[:, -1] + 1
    k = torch.arange(int(lines.max()), device=completion_ids.device).expand(len(lines), -1)
    ends = torch.searchsorted(through.contiguous(), (k + 1).contiguous())  # the first token that holds newline k+1
    ends = torch.where(k == lines[:, None] - 1, completion_mask.long().sum(1, keepdim=True) - 1, ends)
    return torch.where(k < lines[:, None], ends, -1)


def step_end_mask(step_ids: torch.Tensor) -> torch.Tensor:
    """True on the last token of each step (where a process reward is read), (B, T); a token
    where several lines end is marked once."""
    following = torch.cat([step_ids[:, 1:], torch.full_like(step_ids[:, :1], -1)], 1)
    return (step_ids >= 0) & (following != step_ids)


# ---------------------------------------------------------------------- the cold-start policy
@dataclasses.dataclass(frozen=True)
class ColdStart:
    """Everything that determines the cold-start model; its hash names the cache folder."""

    min_steps: int = 1
    max_steps: int = 4
    max_value: int = 99
    max_operand: int = 9
    hidden: int = 64
    layers: int = 3
    heads: int = 4
    sft_steps: int = 1000
    sft_batch: int = 64
    sft_lr: float = 3e-3
    shortcut_prob: float = 0.5
    seed: int = 0
    one_hard_step: bool = False
    hard_step_accuracy: float = 1.0  # the share of demonstrations whose hard step is right

    @property
    def task(self) -> ChainTask:
        return ChainTask(self.min_steps, self.max_steps, self.max_value, self.max_operand,
                         one_hard_step=self.one_hard_step)

    @property
    def record(self) -> dict:
        """The config as its cache records it: the one-hard-step fields only when set (old names stay)."""
        fields = dataclasses.asdict(self)
        return {k: v for k, v in fields.items()
                if k not in ("one_hard_step", "hard_step_accuracy") or v != ColdStart.__dataclass_fields__[k].default}

    @property
    def key(self) -> str:
        return hashlib.sha1(json.dumps(self.record, sort_keys=True).encode()).hexdigest()[:10]


def text_batch(tokenizer: PreTrainedTokenizerBase, prompts: list[str], targets: list[str],
               device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Teacher forcing: prompt + target + EOS per row, right-padded. Returns ids, attention mask
    and the loss mask (true on the tokens the model must predict: the target and EOS)."""
    rows, predicted = [], []
    for prompt_text, target in zip(prompts, targets):
        prompt = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        answer = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(prompt + answer)
        predicted.append([False] * len(prompt) + [True] * len(answer))
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    loss_mask = torch.tensor([t + [False] * (width - len(t)) for t in predicted])
    return ids.to(device), attention.to(device), loss_mask.to(device)


def sft_batch(tokenizer: PreTrainedTokenizerBase, problems: list[ChainProblem], shortcuts: list[bool],
              device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`text_batch` of demonstrations: the worked solution or, where `shortcuts` says, the bare answer."""
    targets = [p.lines[-1] if shortcut else p.solution for p, shortcut in zip(problems, shortcuts)]
    return text_batch(tokenizer, [p.prompt for p in problems], targets, device)


def target_nll(model: PreTrainedModel, ids: torch.Tensor, attention: torch.Tensor,
               loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the target tokens of a `text_batch` (the prompt is masked out)."""
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
    nll = F.cross_entropy(logits.transpose(1, 2).float(), ids[:, 1:], reduction="none")
    return (nll * loss_mask[:, 1:]).sum() / loss_mask[:, 1:].sum()


def supervised_finetune(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: ColdStart,
                        device: torch.device | str, progress: bool = True) -> list[float]:
    """The cold start's SFT on demonstrations, none of the held-out set: cross-entropy on the
    target tokens, AdamW with a linear decay to 0. A share `shortcut_prob` of the demonstrations
    are bare answers with no worked steps (as in mixed web data). Returns the loss per step."""
    rng, exclude = np.random.default_rng(config.seed), frozenset(p.prompt for p in config.task.held_out())
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.sft_lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 1 - i / config.sft_steps)
    model.train()
    losses = []
    for _ in tqdm(range(config.sft_steps), desc="cold start (SFT)", leave=False, disable=not progress):
        shortcuts = (rng.random(config.sft_batch) < config.shortcut_prob).tolist()
        problems = config.task.sample(config.sft_batch, rng, exclude=exclude)
        if config.hard_step_accuracy < 1:  # noisy demonstrations: some hard steps come out wrong
            problems = [config.task.demonstration(p, config.hard_step_accuracy, rng) for p in problems]
        loss = target_nll(model, *sft_batch(tokenizer, problems, shortcuts, device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No progress bars from transformers (loading or writing a one-shard tiny model: noise)."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()


def load_cold_start(folder: Path, config: ColdStart,
                    device: torch.device | str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, dict]:
    """The cached cold start in `folder`, checked: its record names this config, its tokenizer pads and ends."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info = json.loads((folder / "cold_start.json").read_text())
    if info["config"] != config.record:
        raise ValueError("its cold_start.json records another config")
    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(folder).to(device)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token_id is None or tokenizer.eos_token_id is None:
        raise ValueError("its tokenizer has lost its padding or end-of-sequence token")
    return model, tokenizer, {**info, "trained_now": False}


def cold_start_policy(config: ColdStart, device: torch.device | str, cache_root: str | Path = "runs/cold_start",
                      progress: bool = True) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, dict]:
    """(model, tokenizer, info): loaded from cache_root/<config hash>/, or trained by SFT and saved
    there with save_pretrained; a cache that does not load (missing, truncated or garbled files) is
    said so in one line and rebuilt. info says where, and whether it was trained now."""
    folder = Path(cache_root) / config.key
    if folder.exists():
        try:
            return load_cold_start(folder, config, device)
        except Exception as error:  # whatever the damage, the cure is the same: train it again
            reason = str(error).strip().split("\n")[0][:120]
            print(f"cold start cache {folder} does not load ({type(error).__name__}: {reason}); rebuilding it",
                  file=sys.stderr)
    start = time.time()
    torch.manual_seed(config.seed)
    tokenizer = make_char_tokenizer()
    context = max(128, config.task.longest_prompt + config.task.longest_solution)
    model = make_tiny_lm(tokenizer, config.hidden, config.layers, config.heads, context).to(device)
    losses = supervised_finetune(model, tokenizer, config, device, progress)
    info = {"config": config.record, "path": str(folder), "sft_losses": losses,
            "parameters": sum(p.numel() for p in model.parameters()), "sft_wall_clock_s": time.time() - start}
    save_whole(folder, model, tokenizer, info)
    return model, tokenizer, {**info, "trained_now": True}


def save_whole(folder: Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, info: dict) -> None:
    """save_pretrained into a temporary folder beside `folder`, then rename it: never half a cache."""
    building = folder.with_name(f".{folder.name}.partial-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    try:
        with quiet_transformers():
            model.save_pretrained(building)
            tokenizer.save_pretrained(building)
        (building / "cold_start.json").write_text(json.dumps(info))
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(building, folder)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers at all (one quick try, no retries)."""
    from huggingface_hub import constants

    try:
        socket.create_connection((constants.ENDPOINT.split("://")[-1].split("/")[0], 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def load_pretrained(name_or_path: str,
                    device: torch.device | str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Any causal LM and its tokenizer (a folder or a hub name), left-padded, with a pad token. What
    cannot load stops with one line at once: no folder, no causal LM in it, a hub name neither
    cached here nor reachable (no retries)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(name_or_path).expanduser()
    is_folder = path.exists() or name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1
    if is_folder and not (path / "config.json").exists():
        fail(f"--model {name_or_path}: " + ("no model in that folder (no config.json); save one there with "
                                            "save_pretrained" if path.is_dir() else "no such folder"))
    offline = not is_folder and not _hub_reachable()
    source = str(path) if is_folder else name_or_path
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(source, padding_side="left", local_files_only=offline)
            model = AutoModelForCausalLM.from_pretrained(source, local_files_only=offline).to(device)
    except Exception as error:  # a CLI boundary: any failure to load is the same answer for the user
        reason = str(error).strip().split("\n")[0][:160]
        hint = (" The hub cannot be reached from here: save the model with save_pretrained on a machine that can, "
                "and pass its folder." if offline else "")
        fail(f"--model {name_or_path}: cannot load a causal LM and its tokenizer ({reason}).{hint}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    embedded = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > embedded:  # an id past the table would index out of range mid-run
        fail(f"--model {name_or_path}: the tokenizer has {len(tokenizer)} tokens but the model embeds only {embedded}")
    return model, tokenizer


# --------------------------------------------------------------------------------- evaluation
def auroc(positives: np.ndarray, negatives: np.ndarray) -> float:
    """P(a positive outranks a negative), ties counted half (the Mann-Whitney statistic)."""
    if len(positives) == 0 or len(negatives) == 0:
        return math.nan
    diff = np.asarray(positives)[:, None] - np.asarray(negatives)[None, :]
    return float((diff > 0).mean() + 0.5 * (diff == 0).mean())


def localisation(credits: list[np.ndarray], first_wrong: list[int]) -> dict:
    """How well low credit points at the first wrong step, one credit per step of each failed
    solution: the AUROC of -credit for "this is the first wrong step" (all steps pooled), and
    top-1, the chance that the lowest-credit step is the first wrong one (ties split evenly). A
    solution with no step credit counts for nothing; none left: both NaN."""
    pairs = [(np.asarray(c), w) for c, w in zip(credits, first_wrong) if len(c)]
    if not pairs:
        return {"auroc": math.nan, "top1": math.nan}
    positives, negatives, top1 = [], [], []
    for credit, wrong in pairs:
        is_wrong = np.arange(len(credit)) == wrong
        positives.append(-credit[is_wrong])
        negatives.append(-credit[~is_wrong])
        lowest = credit == credit.min()
        top1.append(float(lowest[wrong]) / lowest.sum())
    return {"auroc": auroc(np.concatenate(positives), np.concatenate(negatives)), "top1": float(np.mean(top1))}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are right (Chen et al., 2021): 1 - C(n-c, k) /
    C(n, k), the chance that k of the n, drawn without replacement, are not all wrong."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 ≤ c ≤ n and 1 ≤ k ≤ n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def evaluate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, problems: list[ChainProblem],
             samples: int, max_new_tokens: int, generator: torch.Generator | None, device: torch.device | str,
             ks: tuple[int, ...] = (1,)) -> dict:
    """Held-out pass@k (temperature 1, the unbiased estimator over `samples` per problem, k ≤
    samples), the mean completion length, the share of well-formed completions (right or wrong),
    and the right count per problem."""
    repeated = [p for p in problems for _ in range(samples)]
    completions, texts = sample(model, tokenizer, [p.prompt for p in repeated], max_new_tokens, generator, device)
    correct = verifier_rewards(repeated, texts, completions.truncated).view(len(problems), samples).sum(1)
    result = {f"pass@{k}": float(np.mean([pass_at_k(samples, int(c), k) for c in correct])) for k in ks}
    return {**result, "length": float(completions.lengths.float().mean()),
            "well_formed": float(np.mean([well_formed(t) for t in texts])), "correct": correct.long().tolist()}


# ------------------------------------------------------------------------ the LM scripts' flags
@dataclasses.dataclass
class LMArgs(RunArgs):
    """Flags shared by the LM scripts: the model, the task, the cold start, sampling, evaluation.
    Each script adds its method's own flags (the RL knobs among them)."""

    model: str = arg("", "a causal LM (hub name or folder) to use instead of the cold-start model")
    cache: str = arg("runs/cold_start", "folder of cached cold-start models, one per config")
    threads: int = arg(1, "torch CPU threads (one is fastest for tensors this small)")
    min_steps: int = arg(1, "task: fewest operations in a problem")
    max_steps: int = arg(4, "task: most operations in a problem (the difficulty)")
    max_value: int = arg(99, "task: every intermediate value stays within 0..max-value")
    max_operand: int = arg(9, "task: operands are 1..max-operand")
    hidden: int = arg(64, "cold-start model width")
    layers: int = arg(3, "cold-start model layers")
    heads: int = arg(4, "cold-start model attention heads")
    sft_steps: int = arg(1000, "cold start: SFT steps on demonstrations")
    sft_batch: int = arg(64, "cold start: problems per SFT step")
    sft_lr: float = arg(3e-3, "cold start: AdamW learning rate")
    shortcut_prob: float = arg(0.5, "cold start: share of demonstrations that give the bare answer, no steps")
    max_new_tokens: int = arg(0, "completion budget in tokens; a longer completion is cut and scores 0 (TRL: "
                                 "max_completion_length); 0: the longest worked solution + 12 (48 at 4 steps)")
    prompt_format: str = arg("{prompt}", "how a problem is put to the model, {prompt} standing for its text "
                                         "(e.g. 'Question: {prompt}Answer:\\n'); bare by default, as a base model sees it")
    chat_template: bool = arg(False, "put each problem to the model as a user turn of its tokenizer's chat template "
                                     "(instruct models; replaces --prompt-format)")
    eval_problems: int = arg(128, "held-out problems")
    eval_samples: int = arg(4, "samples per held-out problem during training (pass@1 estimate)")

    SMOKE_LM = dict(hidden=16, layers=1, heads=2, sft_steps=5, sft_batch=8, max_new_tokens=16, eval_problems=4,
                    eval_samples=2)

    def __post_init__(self):
        require_positive(self, "threads", "min_steps", "max_steps", "max_value", "max_operand", "hidden",
                         "layers", "heads", "sft_steps", "sft_batch", "sft_lr", "eval_problems", "eval_samples")
        require(self.max_new_tokens >= 0, "--max-new-tokens must be non-negative (0: as long as the longest solution)")
        require(self.eval_problems <= HELD_OUT_SIZE, f"--eval-problems must be at most {HELD_OUT_SIZE}")
        require(self.min_steps <= self.max_steps, "--min-steps must be at most --max-steps")
        require(self.max_operand < self.max_value, "--max-operand must be below --max-value")
        require(0 <= self.shortcut_prob <= 1, "--shortcut-prob must be in [0, 1]")
        require("{prompt}" in self.prompt_format, "--prompt-format must contain {prompt}")
        if self.max_new_tokens == 0:  # room for every step of the longest problem, and a wrong line or two
            self.max_new_tokens = self.cold_start.task.longest_solution + 12

    @property
    def cold_start(self) -> ColdStart:
        return ColdStart(self.min_steps, self.max_steps, self.max_value, self.max_operand, self.hidden,
                         self.layers, self.heads, self.sft_steps, self.sft_batch, self.sft_lr,
                         self.shortcut_prob)

    @property
    def task(self) -> ChainTask:
        return dataclasses.replace(self.cold_start.task, prompt_format=self.prompt_format)


def chapter_lm_args(args_class: type[LMArgsT], args: LMArgs, **values: Any) -> LMArgsT:
    """A chapter's Args (smoke values under --smoke) on a study's model, task, cold start and seed, plus `values`."""
    shared = {f.name: getattr(args, f.name) for f in dataclasses.fields(LMArgs)}
    return apply_smoke(args_class(**shared, **values))


def chat_prompt_format(tokenizer: PreTrainedTokenizerBase) -> str:
    """The tokenizer's chat template around one user turn, up to the assistant, {prompt} for the problem."""
    if not getattr(tokenizer, "chat_template", None):
        fail("--chat-template: this model's tokenizer has no chat template (leave the flag off for a base model)")
    marker = "\x00problem\x00"
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": marker}], add_generation_prompt=True,
                                             tokenize=False)
    return rendered.replace(marker, "{prompt}")


def start_lm_run(args: LMArgsT) -> tuple[LMArgsT, torch.device, Path, PreTrainedModel,
                                          PreTrainedTokenizerBase, dict]:
    """`start_run`, then the policy: (args, device, out, policy, tokenizer, info)."""
    args, device, out = start_run(args)
    torch.set_num_threads(args.threads)
    if args.model:
        policy, tokenizer = load_pretrained(args.model, device)
        info = {"path": args.model, "trained_now": False}
    else:
        policy, tokenizer, info = cold_start_policy(args.cold_start, device, args.cache)
    if args.chat_template:
        args = dataclasses.replace(args, prompt_format=chat_prompt_format(tokenizer))
    return args, device, out, policy, tokenizer, info


def frozen_copy(model: PreTrainedModel) -> PreTrainedModel:
    """A copy that never trains (the KL reference, the model that rolls out labels)."""
    reference = copy.deepcopy(model).eval()
    reference.requires_grad_(False)
    return reference
