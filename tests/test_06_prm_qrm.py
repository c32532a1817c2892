"""06_prm_qrm: Math-Shepherd labels, the PRM and Q-RM losses, process advantages, credit
localisation, the experiment's wiring (on a fake sampler and fake reward models), the RL loop pinned
to 05's, the claims, the CLI and a smoke run. tests/test_06_studies.py imports the helpers here."""

import copy
import dataclasses
import importlib
import json
import math

import numpy as np
import pytest
import torch

import common
import lm_pins
import lm_world
from lm_pins import hand_completions

prm = importlib.import_module("06_prm_qrm")
PROBLEM = lm_world.ChainProblem(12, (("+", 7), ("*", 3), ("-", 5)))  # 12+7=19, 19*3=57, 57-5=52
SMALL = lm_world.ChainProblem(3, (("+", 1),))  # 3+1=4
RIGHT, SLIP = PROBLEM.solution, "12+7=19\n19*3=56\n56-5=51\n#51"  # SLIP goes wrong at step 1
SMALL_RIGHT, SMALL_SLIP = SMALL.solution, "3+1=5\n#5"  # SMALL_SLIP goes wrong at step 0
TOK = lm_world.make_char_tokenizer()


def step_ends_by_hand(text: str) -> list[int]:
    """Where each line of a completion ends with one token a character: its newline, or EOS."""
    return [i for i, c in enumerate(text) if c == "\n"] + [len(text)]


POLICY = "the policy"  # what the studies are given as their policy, checked where it is passed on


def fake_sampler(monkeypatch, answers: dict[str, list], max_new_tokens: int = 48, modules: tuple = (prm,)) -> list[list[str]]:
    """The sampler of each of `modules` replaced: each prompt gets its next (text, cut) from
    answers[prompt], in order of appearance. Returns the prompts of each call."""
    queues = {prompt: list(texts) for prompt, texts in answers.items()}
    calls = []

    def sample(policy, tokenizer, prompts, budget, generator, device, chunk=512):
        assert (policy, tokenizer, budget) == (POLICY, TOK, max_new_tokens)
        calls.append(list(prompts))
        drawn = [queues[p].pop(0) for p in prompts]
        texts = [t for t, _ in drawn]
        return hand_completions(list(prompts), texts, [c for _, c in drawn]), texts

    for module in modules:
        monkeypatch.setattr(module, "sample", sample)
    return calls


class HandTask:
    """A task whose training draws and held-out set are the given problems, in order."""

    def __init__(self, problems):
        self.problems = list(problems)

    def sample(self, n, rng, steps=None, exclude=frozenset()):
        return self.problems[:n]

    def held_out(self, n=None):
        return self.problems[:n]


@dataclasses.dataclass
class HandArgs(prm.Args):
    """The script's flags, on a hand-picked list of problems."""

    hand_problems: tuple = ()

    @property
    def task(self):
        return HandTask(self.hand_problems)


# ----------------------------------------------------------------------- Math-Shepherd labels
def test_step_prefixes_and_gold_labels_by_hand():
    text = "12+7=19\n19*3=56\n56-5=51\n#51"  # the slip is at step 1
    assert prm.step_prefixes(PROBLEM, text) == ["12+7*3-5\n12+7=19\n", "12+7*3-5\n12+7=19\n19*3=56\n",
                                                "12+7*3-5\n12+7=19\n19*3=56\n56-5=51\n"]
    assert prm.gold_step_labels(PROBLEM, text) == [True, False, False, False]
    assert prm.gold_step_labels(PROBLEM, PROBLEM.solution) == [True] * 4
    assert prm.step_prefixes(PROBLEM, "#52") == [] and prm.gold_step_labels(PROBLEM, "#52") == [False]


def test_hard_labels_from_rollout_outcomes():
    outcomes = np.array([[1, 1, 0, 0, 1], [0, 0, 0, 0, 1], [0, 0, 0, 0, 0]], dtype=bool)
    assert prm.math_shepherd_labels(outcomes, final=0.0, n=4) == [1.0, 0.0, 0.0, 0.0]  # only the first 4 count
    assert prm.math_shepherd_labels(outcomes, final=1.0, n=5) == [1.0, 1.0, 0.0, 1.0]


def test_rollouts_continue_each_solution_from_exactly_its_first_k_steps(monkeypatch):
    p0, p1 = PROBLEM.prompt + "12+7=19\n", PROBLEM.prompt + "12+7=19\n19*3=56\n"
    p2, q0 = p1 + "56-5=51\n", SMALL.prompt + "3+1=4\n"
    right, wrong, lucky_but_cut = ("#52", False), ("#0", False), ("#52", True)
    calls = fake_sampler(monkeypatch, {
        p0: [right, wrong, lucky_but_cut], p1: [wrong, right, wrong], p2: [wrong, wrong, right],
        q0: [("#4", False), ("#4", False), ("#52", False)]})  # "#52" is right for PROBLEM, not for SMALL
    checked = []

    def verifier_spy(problems, texts, truncated):
        checked.append((list(problems), list(texts)))
        return lm_world.verifier_rewards(problems, texts, truncated)

    monkeypatch.setattr(prm, "verifier_rewards", verifier_spy)
    outcomes = prm.rollout_outcomes(POLICY, TOK, [PROBLEM, SMALL, SMALL], [SLIP, SMALL_RIGHT, "#4"], rollouts=3,
                                    max_new_tokens=48, generator=None, device="cpu")
    assert calls == [[p0] * 3 + [p1] * 3 + [p2] * 3 + [q0] * 3]  # N rollouts of each prefix, in order
    assert checked[0][0] == [PROBLEM] * 9 + [SMALL] * 3  # each rollout verified against its own problem
    assert checked[0][1][:4] == ["12+7=19\n#52", "12+7=19\n#0", "12+7=19\n#52", "12+7=19\n19*3=56\n#0"]
    assert [o.tolist() for o in outcomes] == [[[True, False, False], [False, True, False], [False, False, True]],
                                              [[True, True, False]], []]
    assert outcomes[2].shape == (0, 3)  # a one-line solution has nothing to roll out
    nothing = prm.rollout_outcomes(POLICY, TOK, [SMALL], ["#4"], 3, 48, None, "cpu")
    assert len(calls) == 1 and len(nothing) == 1 and nothing[0].shape == (0, 3)  # and no sampling


# ------------------------------------------------------------------------- reward model losses
def test_prm_loss_reads_only_step_end_tokens():
    tok = lm_world.make_char_tokenizer()
    ids = torch.tensor([tok("12+7=19\n#19", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]])
    mask = torch.ones_like(ids, dtype=torch.bool)
    ends = lm_world.step_end_mask(lm_world.token_step_ids(tok, ids, mask))
    assert ends[0].nonzero().squeeze(1).tolist() == [7, 11]  # the newline and EOS
    end_tokens = lm_world.step_end_tokens(tok, ids, mask)
    assert end_tokens.tolist() == [[7, 11]]
    targets = prm.step_targets(end_tokens, [[1.0, 0.0]], ids.shape[1])
    assert targets[0, 7] == 1.0 and targets[0].sum() == 1.0
    scores = torch.randn(1, 12, requires_grad=True)
    loss = prm.step_bce(scores, targets, ends)
    loss.backward()
    assert (scores.grad[~ends] == 0).all() and (scores.grad[ends] != 0).all()
    expected = -(torch.log(torch.sigmoid(scores[0, 7])) + torch.log(1 - torch.sigmoid(scores[0, 11]))) / 2
    assert torch.isclose(loss, expected)
    noise = torch.where(ends, 0.0, 100 * torch.randn(1, 12))  # anything between steps changes nothing
    assert torch.isclose(prm.step_bce(scores + noise, targets, ends), loss)


LABELLED = [RIGHT, SLIP, "12+7=19\n#19", SMALL_RIGHT, SMALL_SLIP]


def labelled_data() -> dict:
    """label_study's output for five hand solutions (one right and two wrong of one problem, one
    right and one wrong of another): three (right, wrong) pairs."""
    problems = [PROBLEM, PROBLEM, PROBLEM, SMALL, SMALL]
    return {"problems": problems, "completions": hand_completions([p.prompt for p in problems], LABELLED),
            "texts": LABELLED, "rewards": torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0]),
            "labels": [[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]}


def test_scorer_is_a_one_output_head_on_the_policys_body():
    policy, _ = lm_pins.tiny_model(0)
    scorer = prm.make_scorer(policy)
    assert scorer.config.num_labels == 1
    for (name, a), b in zip(policy.base_model.state_dict().items(), scorer.base_model.state_dict().values()):
        assert torch.equal(a, b), name
    r = hand_completions([SMALL.prompt], [SMALL_RIGHT])
    assert prm.scorer_logits(scorer, r.sequences, r.attention_mask, r.prompt_length).shape == r.completion_mask.shape


def test_reward_models_train_on_their_own_targets_and_masks(monkeypatch):
    """A spy on each loss: the PRM gets the step labels on the tokens where steps end, Q-RM the
    (right, wrong) pairs of one problem; each scorer is trained on its own loss, in order."""
    data = labelled_data()
    fits, bce, pairwise = {}, [], []
    real_bce, real_qrm = prm.step_bce, prm.qrm_loss

    def fit_once(scorer, loss, n_items, args, rng, desc):
        fits[desc] = (scorer, n_items)
        scorer.eval()  # no dropout: the scores seen can be recomputed below
        return [loss(scorer, torch.arange(n_items)).item()]

    def bce_spy(scores, targets, ends):
        bce.append((scores.detach(), targets, ends))
        return real_bce(scores, targets, ends)

    def qrm_spy(z_w, mask_w, z_l, mask_l, beta, gamma):
        pairwise.append((z_w.detach(), mask_w, z_l.detach(), mask_l, beta, gamma))
        return real_qrm(z_w, mask_w, z_l, mask_l, beta, gamma)

    monkeypatch.setattr(prm, "fit_scorer", fit_once)
    monkeypatch.setattr(prm, "step_bce", bce_spy)
    monkeypatch.setattr(prm, "qrm_loss", qrm_spy)
    policy, _ = lm_pins.tiny_model(0)
    args = prm.Args(qrm_beta=0.3, qrm_gamma=1.5)
    models = prm.train_reward_models(policy, prm.reward_model_losses(TOK, data, args), args)
    assert list(fits) == ["prm", "qrm"] == list(models["losses"]) and [fits[k][1] for k in fits] == [5, 3]
    assert [fits[k][0] for k in fits] == [models["prm"], models["qrm"]]
    r, mask = data["completions"], data["completions"].completion_mask
    targets, ends = torch.zeros(mask.shape), torch.zeros(mask.shape, dtype=torch.bool)
    for row, (text, labels) in enumerate(zip(LABELLED, data["labels"])):
        targets[row, step_ends_by_hand(text)] = torch.tensor(labels)
        ends[row, step_ends_by_hand(text)] = True
    ((scores, targets_seen, ends_seen),) = bce
    assert torch.equal(targets_seen, targets) and torch.equal(ends_seen, ends)
    full = prm.scorer_logits(models["prm"], r.sequences, r.attention_mask, r.prompt_length).detach()
    torch.testing.assert_close(scores[mask], full[mask])  # the PRM's own scores
    ((z_w, mask_w, z_l, mask_l, beta, gamma),) = pairwise
    winners, losers = [0, 0, 3], [1, 2, 4]
    assert torch.equal(mask_w, mask[winners]) and torch.equal(mask_l, mask[losers]) and (beta, gamma) == (0.3, 1.5)
    z = prm.scorer_logits(models["qrm"], r.sequences, r.attention_mask, r.prompt_length).detach()
    torch.testing.assert_close(z_w[mask_w], z[winners][mask_w])
    torch.testing.assert_close(z_l[mask_l], z[losers][mask_l])


def test_qrm_loss_on_a_hand_case_ignores_padding():
    z_w, mask_w = torch.tensor([[1.0, 2.0, 3.0, 99.0]]), torch.tensor([[1, 1, 1, 0]])  # mean 2
    z_l, mask_l = torch.tensor([[0.0, -1.0, 77.0, 77.0]]), torch.tensor([[1, 1, 0, 0]])  # mean -0.5
    loss = prm.qrm_loss(z_w, mask_w, z_l, mask_l, beta=0.2, gamma=2.0)
    assert math.isclose(loss.item(), math.log1p(math.exp(-(0.2 * 2.5 - 2.0))), rel_tol=1e-6)
    assert prm.qrm_loss(z_l, mask_l, z_w, mask_w, 0.2, 2.0) > loss  # the wrong order costs more


def test_preference_pairs_stay_within_a_problem():
    a, b = PROBLEM, lm_world.ChainProblem(3, (("+", 1),))
    pairs = prm.preference_pairs([a, a, a, b, b], torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0]))
    assert pairs == [(0, 1), (0, 2)]


# ------------------------------------------------------------------------------- best-of-N
def test_the_example_is_the_first_failure_with_a_right_step_before_and_a_step_after_its_slip():
    texts = ["3+1=4\n#5", SMALL_SLIP, SLIP, "12+7=19\n#19"]
    # first wrong steps: the answer line (nothing after it), step 0 (nothing right before), step 1 of 4
    assert prm.pick_example(texts, [0, 1, 2, 3], [1, 0, 1, 1]) == 2
    assert prm.pick_example(texts, [1, 0], [0, 1]) == 1  # none fits: the first failure
    assert prm.pick_example(texts, [], []) is None


def test_reward_model_logits_in_chunks_equal_one_pass():
    scorer = prm.make_scorer(lm_pins.tiny_model(0)[0]).eval()
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 3, [SMALL_RIGHT, SMALL_SLIP, SLIP, RIGHT, "#52"])
    whole = prm.scorer_logits(scorer, r.sequences, r.attention_mask, r.prompt_length)
    torch.testing.assert_close(prm.reward_model_logits(scorer, r, chunk=2), whole)


def test_step_means_average_each_steps_tokens_and_an_empty_step_takes_its_end_token():
    values = torch.tensor([1.0, 3.0, 5.0, 7.0, 9.0])
    step_ids = torch.tensor([0, 0, 2, 2, 2])  # line 1 begins and ends inside token 1 (a "\n\n" token)
    assert prm.step_means(values, step_ids, torch.tensor([1, 1, 4]), 3).tolist() == [2.0, 3.0, 7.0]


# ------------------------------------------------------------------------- dense advantages
def test_step_rewards_broadcast_to_their_step_and_every_earlier_token():
    # two completions of one prompt: steps of lengths 2, 2 (+ pad) and 3, 1
    ends = torch.tensor([[False, True, False, True, False], [False, False, True, True, False]])
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]])
    A = prm.process_advantages(rewards, ends, group_size=2, eps=0.0)
    r = torch.tensor([1.0, 0.0, 1.0, 0.0])  # the four step rewards of the group
    n = (r - r.mean()) / r.std()
    expected = torch.tensor([[n[0] + n[1], n[0] + n[1], n[1], n[1], 0.0],
                             [n[2] + n[3], n[2] + n[3], n[2] + n[3], n[3], 0.0]])
    assert torch.allclose(A, expected)


def test_a_group_with_no_rewarded_position_gets_zero_advantages_not_nan():
    rewards = torch.tensor([[1.0, 0.0], [0.5, 0.0], [1.0, 1.0], [0.0, 1.0]])
    rewarded = torch.tensor([[False, False], [False, False], [True, False], [True, True]])
    A = prm.process_advantages(rewards, rewarded, group_size=2)
    assert torch.isfinite(A).all() and torch.equal(A[:2], torch.zeros(2, 2)) and A[2:].abs().sum() > 0


GROUPED = [SMALL_RIGHT, SMALL_SLIP, SLIP, RIGHT]  # two prompts, G = 2 completions each
GROUPED_REWARDS = torch.tensor([[1.0, 0.0], [0.0, 1.0]])


def fake_reward_models(monkeypatch, last_logits: dict | None = None) -> dict:
    """reward_model_logits replaced: the "model" is a name, its logits fixed random numbers per
    name (the same for the same completions), but last_logits[name] on each row's last token
    where given (values, or a function of the completions); returns the logits it gave, by name."""
    given = {}

    def logits(model, completions, chunk=1024):
        seed = {"PRM": 1, "ORM": 2, "QRM": 3}[model]
        given[model] = torch.randn(completions.completion_mask.shape, generator=torch.Generator().manual_seed(seed))
        if model in (last_logits or {}):
            last = completions.completion_mask.sum(1) - 1
            value = last_logits[model]  # a list, or a function of the completions
            given[model][torch.arange(len(last)), last] = torch.tensor(value(completions) if callable(value) else value)
        return given[model]

    monkeypatch.setattr(prm, "reward_model_logits", logits)
    return given


@pytest.mark.parametrize("with_outcome", [False, True])
def test_prm_advantages_reward_each_step_end_and_the_verifier_takes_the_last(monkeypatch, with_outcome):
    given = fake_reward_models(monkeypatch)
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    A = prm.prm_advantage_fn("PRM", TOK, 2, with_outcome)(r, GROUPED_REWARDS, [SMALL, PROBLEM])
    ends, step_rewards = torch.zeros(r.completion_mask.shape, dtype=torch.bool), torch.zeros(r.completion_mask.shape)
    p = torch.sigmoid(given["PRM"])
    for row, text in enumerate(GROUPED):
        ends[row, step_ends_by_hand(text)] = True
        step_rewards[row, step_ends_by_hand(text)] = p[row, step_ends_by_hand(text)]
        if with_outcome:  # the answer step: the verifier's verdict instead of the PRM's
            step_rewards[row, len(text)] = GROUPED_REWARDS.flatten()[row]
    torch.testing.assert_close(A, prm.process_advantages(step_rewards, ends, 2))


def test_rl_study_runs_each_method_from_a_copy_of_the_cold_start_with_its_own_advantages(monkeypatch):
    fake_reward_models(monkeypatch)
    r = hand_completions([SMALL.prompt] * 2 + [PROBLEM.prompt] * 2, GROUPED)
    initial, _ = lm_pins.tiny_model(0)
    seen = {}

    def train_spy(policy, reference, tokenizer, args, advantage_fn, held_out, device, desc="RL"):
        assert policy is not initial and reference is not initial and not any(q.requires_grad for q in reference.parameters())
        for a, b, c in zip(policy.parameters(), reference.parameters(), initial.parameters()):
            assert torch.equal(a, c) and torch.equal(b, c)
        with torch.no_grad():
            next(policy.parameters()).add_(1.0)  # training moves this copy only
        seen[desc] = (advantage_fn(r, GROUPED_REWARDS, [SMALL, PROBLEM]), held_out, args.group_size)
        return {"history": [], "evals": [{"step": 0, "pass@1": 0.0}]}

    monkeypatch.setattr(prm, "train", train_spy)
    args = HandArgs(hand_problems=(PROBLEM, SMALL, PROBLEM), eval_problems=2, group_size=2)
    runs = prm.rl_study(initial, TOK, {"prm": "PRM", "qrm": "QRM"}, args, "cpu")
    assert list(runs) == list(prm.RL_METHODS) and list(seen) == [f"RL {m}" for m in prm.RL_METHODS]
    expected = {"outcome": prm.outcome_advantage_fn(r, GROUPED_REWARDS, None),
                "prm": prm.prm_advantage_fn("PRM", TOK, 2)(r, GROUPED_REWARDS, None),
                "prm_outcome": prm.prm_advantage_fn("PRM", TOK, 2, with_outcome=True)(r, GROUPED_REWARDS, None)}
    for method in prm.RL_METHODS:
        advantages, held_out, group_size = seen[f"RL {method}"]
        torch.testing.assert_close(advantages, expected[method])
        assert held_out == [PROBLEM, SMALL] and group_size == 2
    assert not torch.equal(expected["prm"], expected["prm_outcome"])


# -------------------------------------------------- the RL loop restated from 05, pinned to it
def test_grpo_advantage_and_k3_are_05s():
    lm_pins.assert_advantage_and_kl_match_05(prm)


def test_policy_gradient_step_is_05s_with_one_inner_iteration():
    lm_pins.assert_step_matches_05(prm)


def test_rl_loop_is_05s(monkeypatch, tmp_path):
    lm_pins.assert_loop_matches_05(prm, prm.outcome_advantage_fn, monkeypatch, tmp_path)


def test_fit_scorer_is_adamw_on_random_minibatches_and_leaves_the_scorer_in_eval_mode():
    """Against AdamW written out: the same minibatches (distinct items, rm_batch of them, or all
    when fewer), the same updates, one loss per step."""
    target = torch.arange(6.0)
    batches = []

    def squared_error(model, rows):
        batches.append(rows.tolist())
        return ((model.weight[0, rows] - target[rows]) ** 2).sum()

    scorer = torch.nn.Linear(6, 1)
    reference = copy.deepcopy(scorer)
    args = prm.Args(rm_steps=5, rm_batch=4, rm_lr=0.1)
    losses = prm.fit_scorer(scorer, squared_error, 6, args, np.random.default_rng(0), "test")
    assert not scorer.training and len(losses) == 5 and len(batches) == 5
    rng = np.random.default_rng(0)
    optimizer = torch.optim.AdamW(reference.parameters(), lr=0.1, weight_decay=0.0)
    for rows, loss in zip(batches, losses):
        assert rows == rng.choice(6, 4, replace=False).tolist()
        expected = ((reference.weight[0, rows] - target[rows]) ** 2).sum()
        assert loss == pytest.approx(expected.item())
        optimizer.zero_grad()
        expected.backward()
        optimizer.step()
    torch.testing.assert_close(scorer.weight, reference.weight)
    assert losses[-1] < losses[0]
    batches.clear()  # fewer items than a batch: each step takes them all
    prm.fit_scorer(scorer, squared_error, 3, prm.Args(rm_steps=1, rm_batch=4), np.random.default_rng(0), "all")
    assert sorted(batches[0]) == [0, 1, 2]


def test_an_all_padding_batch_gives_zero_statistics_not_nan():
    model, _ = lm_pins.tiny_model(0)
    r = hand_completions([SMALL.prompt], [SMALL_RIGHT])
    r.completion_mask = torch.zeros_like(r.completion_mask)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    stats = prm.policy_gradient_step(model, optimizer, r, torch.ones(r.completion_mask.shape),
                                     torch.zeros(r.completion_mask.shape), beta=0.1, max_grad_norm=1.0)
    assert stats == {"kl": 0.0, "entropy": 0.0, "grad_norm": 0.0}



# ------------------------------------------------------------------------------------ claims
def localised(drop: float, qrm: float, solutions: int = 7) -> dict:
    """One seed's credit_study results with the PRM drop's and Q-RM's AUROC."""
    return {"solutions": solutions, "results": {
        "outcome only (flat)": {"auroc": 0.5, "top1": 0.25}, "PRM step score": {"auroc": 0.6, "top1": 0.3},
        "PRM drop (score - previous)": {"auroc": drop, "top1": 0.5}, "Q-RM (mean Z of the step)": {"auroc": qrm, "top1": 0.5}}}


@pytest.mark.parametrize("drops,qrms,expected", [
    ((0.70, 0.72, 0.71), (0.60, 0.62, 0.61), [True, True]),  # both above chance on every seed
    ((0.70, 0.72, 0.71), (0.45, 0.46, 0.44), [True, False]),  # Q-RM below chance
    ((0.52, 0.50, 0.51), (0.90, 0.10, 0.60), [None, None]),  # an interval too wide to tell
])
def test_credit_verdicts_decide_the_auroc_minus_chance_over_seeds(drops, qrms, expected):
    claims = prm.credit_claims(*(localised(d, q) for d, q in zip(drops, qrms)))
    assert [c["holds"] for c in claims] == expected and "7/7/7 failed" in claims[0]["measured"]
    for c, aurocs in zip(claims, (drops, qrms)):  # the measured text is the interval of AUROC - 0.5
        assert common.seed_verdict(np.subtract(aurocs, 0.5))[1] in c["measured"]
    assert prm.credit_claims({"solutions": 0, "results": {}}) == []  # no failed solution: nothing to localise


def test_one_seed_gives_no_verdict():
    (drop, qrm) = prm.credit_claims(localised(0.9, 0.9))
    assert drop["holds"] is None is qrm["holds"] and "one seed" in drop["measured"]
    assert all(c["holds"] is None for c in prm.rl_claims(prm.Args(), rl_seed(0.3, (0.25, 0.6, 0.4))))


def rl_seed(outcome_final: float, prm_golds: tuple, verified_final: float | None = None) -> dict:
    """One seed's RL runs: outcome GRPO rising to outcome_final, the PRM alone along prm_golds."""
    runs = {"outcome": {"evals": [{"step": 0, "pass@1": 0.25}, {"step": 36, "pass@1": outcome_final}]},
            "prm": {"evals": [{"step": s, "pass@1": g} for s, g in zip((0, 18, 36), prm_golds)]}}
    if verified_final is not None:
        runs["prm_outcome"] = {"evals": [{"step": 0, "pass@1": 0.25}, {"step": 36, "pass@1": verified_final}]}
    return runs


HOLDING = [(0.30, (0.25, 0.60, 0.40), 0.35), (0.31, (0.25, 0.62, 0.41), 0.37), (0.29, (0.25, 0.61, 0.43), 0.36)]


@pytest.mark.parametrize("change,expected", [
    ({}, [True, True, False, False]),  # the PRM ends ahead, after a fall; the verifier runs end behind it
    ({"prm_golds": [(0.25, 0.6, 0.2), (0.25, 0.62, 0.21), (0.25, 0.61, 0.19)]}, [False, True, True, True]),
    # no fall on any seed: an interval of width 0 at 0 cannot tell (common.seed_verdict)
    ({"prm_golds": [(0.25, 0.4, 0.4), (0.25, 0.41, 0.41), (0.25, 0.42, 0.43)]}, [True, None, False, False]),
])
def test_rl_verdicts_decide_each_paired_difference_over_seeds(change, expected):
    golds = change.get("prm_golds", [g for _, g, _ in HOLDING])
    runs = [rl_seed(o, g, v) for (o, _, v), g in zip(HOLDING, golds)]
    claims = prm.rl_claims(prm.Args(rl_steps=36), *runs)
    assert [c["holds"] for c in claims] == expected and "after 36 updates" in claims[0]["measured"]
    assert "second proxy" in claims[1]["claim"] and "prefer a verifiable check" in claims[2]["claim"]
    falls = [(max(g) - g[-1]) - (o - o) for (o, _, _), g in zip(HOLDING, golds)]  # outcome GRPO peaks at its end
    assert common.seed_verdict(falls)[1] in claims[1]["measured"]
    assert common.seed_verdict([v - g[-1] for (_, _, v), g in zip(HOLDING, golds)])[1] in claims[3]["measured"]


def test_the_peaks_noise_is_taken_off_the_prms_fall():
    """Outcome GRPO falling from its own peak a little more than the PRM does: no over-optimisation to see."""
    runs = [rl_seed(o, g) for o, g, _ in HOLDING]
    for run, (_, g, _) in zip(runs, HOLDING):
        peak = run["outcome"]["evals"][-1]["pass@1"] + max(g) - g[-1] + 0.01
        run["outcome"]["evals"].insert(1, {"step": 18, "pass@1": peak})
    assert prm.rl_claims(prm.Args(rl_steps=36), *runs)[1]["holds"] is False
    assert len(prm.rl_claims(prm.Args(), *runs)) == 3  # no run with the verifier on the answer step
    assert prm.rl_claims(prm.Args(), {"outcome": runs[0]["outcome"]}) == []  # no PRM run: nothing to compare


# ------------------------------------------------------------------------------ CLI and smoke
@pytest.mark.parametrize("flag,value,message", [
    ("--label-n", "9", "--label-n must be in 1..--rollouts-per-prefix"),
    ("--label-samples", "1", "--label-samples must be at least 2"),
    ("--rm-steps", "0", "--rm-steps must be positive"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("06_prm_qrm.py", flag, value)


def without_timing(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if "wall_clock" not in k}


def record_samples(monkeypatch) -> list:
    """Every call of the chapter's `sample` from now on, as (prompts, texts), in order."""
    sampled, real_sample = [], prm.sample

    def sample_spy(policy, tokenizer, prompts, *rest, **options):
        completions, texts = real_sample(policy, tokenizer, prompts, *rest, **options)
        sampled.append((list(prompts), texts))
        return completions, texts

    monkeypatch.setattr(prm, "sample", sample_spy)
    return sampled


def test_smoke_run_writes_results_and_figures_and_repeats_exactly(tmp_path, read_results, monkeypatch):
    sampled = record_samples(monkeypatch)
    args = prm.Args(smoke=True, device="cpu", out=str(tmp_path / "out"), cache=str(tmp_path / "cache"))
    first = prm.main(args)
    data = read_results(tmp_path / "out" / "results.json")
    assert {"label_solutions", "localisation_auroc[PRM drop (score - previous)]", "rl[prm]_pass@1_final",
            "rl[prm_outcome]_pass@1_start"} <= set(first["metrics"])
    assert data["metrics"] == common.json_ready(first["metrics"])
    assert (tmp_path / "out" / "credit.png").stat().st_size > 1000
    # the labels' rollouts: 4 (--rollouts-per-prefix) from each step prefix of each sampled solution
    (solution_prompts, solutions), (rollout_prompts, _) = sampled[:2]
    assert len(solutions) == 16 == first["metrics"]["label_solutions"]
    prefixes = [prompt + "\n".join(text.split("\n")[:k + 1]) + "\n"
                for prompt, text in zip(solution_prompts, solutions) for k in range(text.count("\n"))]
    assert prefixes and rollout_prompts == [prefix for prefix in prefixes for _ in range(4)]
    # the gold verifier's credit (-1 on the first wrong step, 0 elsewhere) localises every failure exactly
    metrics = first["metrics"]
    assert metrics["localisation_auroc[gold verifier]"] == 1.0 and metrics["localisation_top1[gold verifier]"] == 1.0
    # the tables it prints and the docs show hold the same numbers as its metrics
    tables = data["metrics"]["tables"]
    assert tables["localisation"]["rows"][-1] == ["gold verifier", 1.0, 1.0]
    for row, method in zip(tables["rl"]["rows"], prm.RL_METHODS):
        assert row[0] == prm.RL_METHODS[method] and row[1] == metrics[f"rl[{method}]_pass@1_start"]
        assert row[-1] == metrics[f"rl[{method}]_pass@1_final"] and len(row) == 1 + 3  # updates 0, 1, 2
    again = prm.main(dataclasses.replace(args))
    assert json.dumps(without_timing(again["metrics"])) == json.dumps(without_timing(first["metrics"]))
