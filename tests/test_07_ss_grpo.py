"""07_ss_grpo: the step-value estimator, the article's targets and loss, per-step advantages,
the gold process advantages, the restated GRPO pieces pinned to 05 and 06; the wiring of each
method's credit (which advantage each completion gets, what the estimator trains on); the figure
of who gets the credit (PPO's token GAE pinned to 02's, each shaded token the advantage the loss
receives); CLI checks and a smoke run. The probe of w(s), the signed weight, the diagnostics, costs, claims and sweeps of
studies/07_credit.py are tested in test_07_studies.py."""

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

ss = importlib.import_module("07_ss_grpo")
prm = importlib.import_module("06_prm_qrm")

TOK = lm_world.make_char_tokenizer()


def step_ids_of(r: lm_world.Completions) -> torch.Tensor:
    return lm_world.token_step_ids(TOK, r.completion_ids, r.completion_mask)


def end_tokens_of(r: lm_world.Completions) -> torch.Tensor:
    return lm_world.step_end_tokens(TOK, r.completion_ids, r.completion_mask)


def estimator(seed: int = 0, **sizes) -> ss.StepValueEstimator:
    torch.manual_seed(seed)
    shape = {"hidden": 32, "layers": 2, "heads": 4, "ffn": 64} | sizes
    return ss.StepValueEstimator(len(TOK), **shape)


def credit_of(method: str, args: ss.Args) -> ss.Credit:
    """A method's credit: a small fresh estimator for SS-GRPO."""
    model = estimator(hidden=16, layers=1, heads=2, ffn=32) if method.startswith("ss_") else None
    return ss.Credit(method, TOK, args, model, seed=0)


def test_estimator_output_in_unit_interval_and_blind_to_padding():
    model = estimator()
    torch.manual_seed(1)
    ids = torch.randint(3, len(TOK), (6, 9))
    attention = torch.arange(9)[None] < torch.tensor([9, 7, 5, 9, 3, 8])[:, None]
    pool = attention & (torch.arange(9)[None] >= 2)
    w = model(ids, attention, pool)
    assert w.shape == (6,) and ((w > 0) & (w < 1)).all()
    # anything written in the padding, and any number of extra padding columns, changes nothing
    garbage = torch.where(attention, ids, torch.randint(0, len(TOK), ids.shape))

    def wider(x: torch.Tensor, fill) -> torch.Tensor:
        return torch.cat([x, torch.full((6, 5), fill, dtype=x.dtype)], 1)

    assert torch.allclose(model(garbage, attention, pool), w, atol=1e-6)
    assert torch.allclose(model(wider(ids, 7), wider(attention, False), wider(pool, False)), w, atol=1e-6)
    # a saturated head still stays in [0, 1]
    with torch.no_grad():
        model.head.bias.fill_(1e4)
    assert (model(ids, attention, pool) <= 1).all()


def test_step_batch_rows_are_prompt_plus_each_step_and_long_steps_are_windowed():
    r = hand_completions(["12+7*3\n", "5+1\n"], ["12+7=19\n19*3=57\n#57", "#6"])
    step_ids = step_ids_of(r)
    batch = ss.step_batch(r, step_ids, end_tokens_of(r), chunk=512, pad_id=TOK.pad_token_id)
    rows = [TOK.decode(row[a].tolist()) for row, a in zip(batch.ids, batch.attention)]
    assert rows == ["12+7*3\n12+7=19\n", "12+7*3\n19*3=57\n", "12+7*3\n#57<eos>", "5+1\n#6<eos>"]
    pooled = [TOK.decode(row[p].tolist()) for row, p in zip(batch.ids, batch.pool)]
    assert pooled == ["12+7=19\n", "19*3=57\n", "#57<eos>", "#6<eos>"]
    assert batch.step_completion.tolist() == [0, 0, 0, 1] and batch.step_index.tolist() == [0, 1, 2, 0]
    # chunk = 3: "12+7=19\n" (8 tokens) becomes 3 windows; its weight is their mean
    chunked = ss.step_batch(r, step_ids, end_tokens_of(r), chunk=3, pad_id=TOK.pad_token_id)
    assert [TOK.decode(row[p].tolist()) for row, p in zip(chunked.ids, chunked.pool)][:3] == ["12+", "7=1", "9\n"]
    model = estimator()
    with torch.no_grad():
        windows = model(chunked.ids, chunked.attention, chunked.pool)
        steps = model.step_weights(chunked)
    assert len(steps) == 4 and math.isclose(float(steps[0]), float(windows[:3].mean()), rel_tol=1e-6)


def test_per_step_values_reach_exactly_their_steps_tokens():
    step_ids = torch.tensor([[0, 0, 0, 1, 1, 2, -1, -1], [0, 1, 1, 1, -1, -1, -1, -1]])
    grid = torch.tensor([[0.2, 1.0, 1.8], [-0.25, -0.75, 9.0]])  # completion 1 has no step 2
    expected = torch.tensor([[0.2, 0.2, 0.2, 1.0, 1.0, 1.8, 0, 0], [-0.25, -0.75, -0.75, -0.75, 0, 0, 0, 0]])
    assert torch.equal(ss.broadcast_to_tokens(grid, step_ids), expected)


def test_article_targets_on_a_hand_made_group():
    rewards = torch.tensor([[0.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.5, 1.0, 1.0]])
    targets = ss.minmax_targets(rewards)
    assert torch.isfinite(targets).all()
    assert torch.allclose(targets[0], torch.tensor([0.0, 1.0, 0.0, 1.0]), atol=1e-6)
    assert torch.equal(targets[1], torch.zeros(4))  # all right: 0/(0 + eps) = 0, as the article writes it
    assert torch.equal(targets[2], torch.zeros(4))
    assert torch.allclose(targets[3], torch.tensor([0.0, 0.5, 1.0, 1.0]), atol=1e-6)


def test_estimator_loss_is_the_articles_per_rollout_mse_and_training_follows_the_target():
    r = hand_completions(["3+4\n"] * 4, ["3+4=7\n#7", "3+4=8\n#8", "#7", "3+4=7\n7+1=8\n#8"])
    batch = ss.step_batch(r, step_ids_of(r), end_tokens_of(r), chunk=512, pad_id=TOK.pad_token_id)
    targets = ss.minmax_targets(torch.tensor([[1.0, 0.0, 1.0, 0.0]])).flatten()
    model = estimator()
    w = model.step_weights(batch).detach()
    naive = np.mean([np.mean([(float(w[k]) - float(targets[i])) ** 2 for k in range(len(w))
                              if batch.step_completion[k] == i]) for i in range(4)])  # the article's loop
    assert math.isclose(float(ss.estimator_loss(w, batch, targets)), naive, rel_tol=1e-5)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(60):
        loss = ss.estimator_loss(model.step_weights(batch), batch, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        grid = ss.step_grid(model.step_weights(batch), batch)
    assert grid[0, 1] > 0.9 and grid[2, 0] > 0.9  # "#7": only in right rollouts
    assert grid[1, 0] < 0.1 and grid[1, 1] < 0.1  # "3+4=8", "#8": only in failed ones
    # "3+4=7" is right, but also opens failed rollout 3: w fits the outcome, each rollout's steps
    # weighted 1/steps: (1·1/2 + 0·1/3) / (1/2 + 1/3) = 0.6, the same in both rollouts
    assert abs(grid[0, 0] - 0.6) < 0.05 and abs(grid[3, 0] - grid[0, 0]) < 1e-6


def assert_zero_spread_groups_get_zero(credit_of, methods, tmp_path) -> None:
    """Every method gives a group whose rewards are all equal zero advantage, and no NaN anywhere."""
    args = common.apply_smoke(ss.Args(smoke=True, device="cpu", out=str(tmp_path)))
    args = dataclasses.replace(args, group_size=4, prompts=2)
    problem = lm_world.ChainTask().sample(1, np.random.default_rng(0))[0]
    r = hand_completions([problem.prompt] * 8, [problem.solution] * 4 + ["#1", "1+1=2\n#2", problem.solution, "#0"])
    rewards = lm_world.verifier_rewards([problem] * 8, lm_world.completion_texts(TOK, r), r.truncated).view(2, 4)
    assert rewards[0].tolist() == [1.0] * 4 and len(set(rewards[1].tolist())) == 2
    for method in methods:
        advantages = credit_of(method, args)(r, rewards, [problem, problem])
        assert torch.isfinite(advantages).all()
        assert torch.equal(advantages[:4], torch.zeros_like(advantages[:4])), method
        assert advantages[4:].abs().sum() > 0, method
        assert torch.equal(advantages[~r.completion_mask], torch.zeros_like(advantages[~r.completion_mask]))


def test_zero_spread_group_gives_zero_advantage_and_no_nan(tmp_path):
    assert_zero_spread_groups_get_zero(credit_of, ss.NAMES, tmp_path)


def test_gold_process_advantages_by_hand():
    rewards, valid = ss.gold_step_rewards([None, 1], torch.tensor([2, 3]))
    assert rewards.tolist() == [[1, 1, 0], [1, 0, 0]] and valid.tolist() == [[True, True, False], [True] * 3]
    adv = ss.process_advantages(rewards, valid, group_size=2)
    r = torch.tensor([1.0, 1, 1, 0, 0])
    z = (r - r.mean()) / (r.std() + 1e-4)  # normalised over the 5 steps of the group
    assert torch.allclose(adv, torch.tensor([[z[0] + z[1], z[1], 0], [z[2] + z[3] + z[4], z[3] + z[4], z[4]]]))
    same, valid = ss.gold_step_rewards([None, None], torch.tensor([2, 2]))
    assert torch.equal(ss.process_advantages(same, valid, 2), torch.zeros(2, 2))


def test_a_step_with_no_token_of_its_own_reads_the_token_it_ends_in():
    """As if the newline token of "12+7=19\n" had held two newlines (as "\n\n" is one token in a
    byte-level BPE): line 1 is empty and ends in that token, so its row is prompt + that token."""
    r = hand_completions(["12+7\n"], ["12+7=19\n#19"])
    step_ids = torch.where(step_ids_of(r) == 1, 2, step_ids_of(r))
    end_tokens = torch.tensor([[7, 7, 11]])
    batch = ss.step_batch(r, step_ids, end_tokens, chunk=512, pad_id=TOK.pad_token_id)
    assert batch.step_index.tolist() == [0, 1, 2]
    pooled = [TOK.decode(row[p].tolist()) for row, p in zip(batch.ids, batch.pool)]
    assert pooled == ["12+7=19\n", "\n", "#19<eos>"]
    with torch.no_grad():
        grid = ss.step_grid(estimator().step_weights(batch), batch)
    assert torch.isfinite(grid).all() and (grid[0] > 0).all()


def test_process_advantages_are_06s():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(6, 5, generator=g)
    rewarded = torch.rand(6, 5, generator=g) > 0.4
    for group_size in (2, 3):
        assert torch.equal(ss.process_advantages(rewards, rewarded, group_size),
                           prm.process_advantages(rewards, rewarded, group_size))


# -------------------------------------------------- the RL loop restated from 05, pinned to it


def test_grpo_advantage_and_k3_are_05s():
    lm_pins.assert_advantage_and_kl_match_05(ss)


def test_policy_gradient_step_is_05s_with_one_inner_iteration():
    lm_pins.assert_step_matches_05(ss)


def test_rl_loop_is_05s(monkeypatch, tmp_path):
    def grpo_credit(completions, rewards, problems):
        return ss.grpo_advantages(rewards).flatten()[:, None] * completions.completion_mask.float()

    lm_pins.assert_loop_matches_05(ss, grpo_credit, monkeypatch, tmp_path)


@pytest.mark.parametrize("flag,value,message", [
    ("--group-size", "1", "--group-size (K) must be at least 2"),
    ("--est-heads", "3", "--est-hidden must be a multiple of --est-heads"),
    ("--est-iters", "0", "--est-iters must be positive"),
])


def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("07_ss_grpo.py", flag, value)


def without_timing(metrics: dict) -> dict:
    """The metrics that must repeat exactly: all but the wall-clock ones (the seconds, the ratio and
    share computed from them, and the table of seconds), which say so in their name."""
    tables = {k: v for k, v in metrics.get("tables", {}).items() if k != "seconds"}
    return {k: v for k, v in metrics.items() if not k.endswith(("wall_clock_s", "wall_clock_vs_grpo", "wall_clock_share"))
            } | ({"tables": tables} if tables else {})


def test_smoke_run_writes_results_and_figure_and_repeats_exactly(tmp_path, read_results):
    args = ss.Args(smoke=True, device="cpu", out=str(tmp_path / "out"), cache=str(tmp_path / "cache"))
    first = ss.main(args)
    data = read_results(tmp_path / "out" / "results.json")
    assert (tmp_path / "out" / "who_gets_the_credit.png").stat().st_size > 1000
    assert set(data["runs"]) == set(ss.NAMES) and len(data["claims"]) == 2
    table = data["metrics"].pop("tables")["methods"]
    assert [row[:2] for row in table["rows"]] == [["cold start", data["metrics"]["cold_start_pass@1"]]] + [
        [ss.NAMES[m], data["metrics"][f"{m}_pass@1"]] for m in ss.NAMES]
    assert all(math.isfinite(v) for v in data["metrics"].values())
    assert all({"credit_s"} <= set(e) for run in data["runs"].values() for e in run["credit"])
    timing = set(first["metrics"]) - set(without_timing(first["metrics"]))
    assert timing == {f"{m}_train_wall_clock_s" for m in ss.NAMES} | {"credit_figure_wall_clock_s"}
    log = data["runs"]["ss_grpo"]["credit"]
    assert len(log) == common.apply_smoke(args).rl_steps and all(e["estimator_loss"] >= 0 for e in log)
    again = ss.main(args)
    assert json.dumps(without_timing(again["metrics"])) == json.dumps(without_timing(first["metrics"]))


# -------------------------------------------------- the wiring of the credit: pairing, targets, costs


PROBLEMS = [lm_world.ChainProblem(47, (("-", 7), ("*", 2))), lm_world.ChainProblem(4, (("+", 8), ("*", 3))),
            lm_world.ChainProblem(31, (("*", 2), ("+", 8)))]


TEXTS = ["47-7=40\n40*2=80\n#80", "47-7=41\n41*2=82\n#82", "47-7=40\n40*2=81\n#81", "#80",
         "4+8=12\n12*3=36\n#36", "4+8=12\n#36", "4+8=12\n12*3=36\n#37", "4+8=13\n#39",
         "31*2=62\n62+8=70\n#70", "31*2=62\n62+8=70\n#70", "31*2=62\n#70", "1\n2\n3\n#4"]
# not 0/1, and different in every group, so that a completion paired with another's reward shows


REWARDS = torch.tensor([[0.9, 0.1, 0.3, 0.6], [0.0, 0.5, 1.0, 0.2], [0.4, 0.4, 0.8, 0.0]])


def credit_args(tmp_path, **changes) -> ss.Args:
    args = common.apply_smoke(ss.Args(smoke=True, device="cpu", out=str(tmp_path)))
    return dataclasses.replace(args, **({"prompts": 3, "group_size": 4} | changes))


def naive_group_z(rewards: torch.Tensor) -> list[float]:
    """GRPO's advantage of completion g·G + i: its reward's z-score within group g (sample std)."""
    out = []
    for group in rewards.tolist():
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / (len(group) - 1))
        out += [(r - mean) / (std + 1e-4) for r in group]
    return out


def naive_gold_process(step_ids: torch.Tensor, G: int) -> torch.Tensor:
    """06's process advantage with the gold step labels, one completion and one step at a time:
    each completion is judged against its own group's problem."""
    steps = (step_ids.max(1).values + 1).tolist()
    labels = []
    for b, n in enumerate(steps):
        wrong = lm_world.first_wrong_step(PROBLEMS[b // G], TEXTS[b])
        labels.append([1.0 if wrong is None or k < wrong else 0.0 for k in range(n)])
    out = torch.zeros(step_ids.shape)
    for g in range(len(steps) // G):
        pooled = [r for b in range(g * G, (g + 1) * G) for r in labels[b]]
        mean = sum(pooled) / len(pooled)
        std = math.sqrt(sum((r - mean) ** 2 for r in pooled) / (len(pooled) - 1))
        for b in range(g * G, (g + 1) * G):
            z = [(r - mean) / (std + 1e-4) for r in labels[b]]
            for t, k in enumerate(step_ids[b].tolist()):
                out[b, t] = sum(z[k:]) if k >= 0 else 0.0
    return out


def test_each_method_scales_its_own_completions_group_advantage(tmp_path):
    """GRPO: every token of completion g·G + i carries the z-score of reward[g, i]; SS-GRPO: that
    advantage times the (post-training) estimator's w of the token's step; PRM-GRPO: 06's process
    advantage of the gold labels against the completion's own problem."""
    r = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    step_ids = step_ids_of(r)
    A = naive_group_z(REWARDS)
    args = credit_args(tmp_path, est_iters=3)
    for method in ss.NAMES:
        credit = credit_of(method, args)
        model = credit.estimator
        got = credit(r, REWARDS, PROBLEMS)
        if method == "prm_grpo":
            torch.testing.assert_close(got, naive_gold_process(step_ids, 4), rtol=1e-5, atol=1e-5)
            continue
        if model is not None:
            batch = ss.step_batch(r, step_ids, end_tokens_of(r), 512, TOK.pad_token_id)
            with torch.no_grad():
                w = ss.step_grid(model.step_weights(batch), batch).tolist()
        expected = torch.zeros(step_ids.shape)
        for b, row in enumerate(step_ids.tolist()):
            for t, k in enumerate(row):
                if k < 0:
                    continue
                expected[b, t] = A[b] * (1.0 if model is None else w[b][k])
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=method)


def tagged_update(u: int, G: int = 4, groups: int = 3) -> lm_world.Completions:
    """Update u's completions; completion (g, i) opens with the line "ugi" (its name)."""
    texts = [f"{u}{g}{i}\n" + "1+1=2\n" * ((u + g + i) % 3) + "#2" for g in range(groups) for i in range(G)]
    return hand_completions([PROBLEMS[g].prompt for g in range(groups) for _ in range(G)], texts)


def names_of(part: ss.StepBatch) -> list[str]:
    """The name (first line) of each completion of a batch, in its order."""
    names = []
    for c in range(part.num_completions):
        first = int(((part.step_completion == c) & (part.step_index == 0)).nonzero()[0, 0])
        row = int((part.window_step == first).nonzero()[0, 0])
        names.append(TOK.decode(part.ids[row][part.pool[row]].tolist()).strip())
    return names


def test_estimator_trains_every_n_updates_on_whole_groups_of_recent_updates_toward_their_own_targets(
        tmp_path, monkeypatch):
    """Each of est_iters Adam steps of a retraining (updates 0, N, 2N, ...) sees est_groups whole
    groups of one of the last N updates, each completion with the min-max target of its own
    group's rewards in that update; the logged loss is the mean of those steps' losses."""
    calls = []

    def spy(weights, part, targets):
        loss = original(weights, part, targets)
        calls.append((names_of(part), targets.tolist(), loss.item()))
        return loss

    original = ss.estimator_loss
    monkeypatch.setattr(ss, "estimator_loss", spy)
    G, N, iters = 4, 2, 6
    rewards = [torch.tensor([[0.0, 1.0, 0.5, 0.25], [1.0, 1.0, 1.0, 1.0], [0.2, 0.6, 0.6, 1.0]]),
               torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.3, 0.9, 0.1, 0.5], [0.0, 0.0, 0.0, 0.0]]),
               torch.tensor([[0.5, 0.0, 1.0, 0.5], [0.0, 0.25, 0.75, 1.0], [0.4, 0.8, 0.2, 0.0]])]
    targets = {}
    for u, rw in enumerate(rewards):  # the article's r̂, one completion at a time
        for g, group in enumerate(rw.tolist()):
            for i, x in enumerate(group):
                targets[f"{u}{g}{i}"] = (x - min(group)) / (max(group) - min(group) + 1e-8)
    for est_groups in (2, 5):  # 5 > 3 groups: every group
        calls.clear()
        args = credit_args(tmp_path, est_iters=iters, est_groups=est_groups, retrain_every=N, est_lr=1e-2)
        credit = ss.Credit("ss_grpo", TOK, args, estimator(hidden=16, layers=1, heads=2, ffn=32), seed=0)
        seen = []
        for u, rw in enumerate(rewards):
            before = len(calls)
            credit(tagged_update(u), rw, PROBLEMS)
            entry_loss = credit.log[-1].get("estimator_loss")
            now = calls[before:]
            assert len(now) == (iters if u % N == 0 else 0), (u, len(now))
            if now:
                assert math.isclose(entry_loss, float(np.mean([loss for *_, loss in now])), rel_tol=1e-6)
            else:
                assert entry_loss is None
            for names, got, _ in now:
                assert len(names) == G * min(est_groups, 3)
                updates = {n[0] for n in names}
                assert len(updates) == 1 and int(names[0][0]) in range(max(0, u - N + 1), u + 1)  # one recent update
                groups = [names[k:k + G] for k in range(0, len(names), G)]
                assert all(grp == [grp[0][:2] + str(i) for i in range(G)] for grp in groups)  # whole groups, in order
                assert len({grp[0][1] for grp in groups}) == len(groups)  # distinct groups
                assert np.allclose(got, [targets[n] for n in names], atol=1e-6)
                seen.append((names[0][0], tuple(grp[0][1] for grp in groups)))
        # the draws are random: more than one choice of groups, and both stored updates at update 2
        assert len({s for s in seen if s[0] != "0"}) > 1 and {s[0] for s in seen[iters:]} == {"1", "2"}


def test_selecting_completions_equals_building_the_batch_of_those_completions():
    r = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    batch = ss.step_batch(r, step_ids_of(r), end_tokens_of(r), chunk=4, pad_id=TOK.pad_token_id)
    for kept in ([1, 3], [0, 4, 5, 6, 7, 11], [8, 9, 10, 11]):
        keep = torch.zeros(12, dtype=torch.bool)
        keep[kept] = True
        sub = hand_completions([PROBLEMS[b // 4].prompt for b in kept], [TEXTS[b] for b in kept])
        direct = ss.step_batch(sub, step_ids_of(sub), end_tokens_of(sub), chunk=4, pad_id=TOK.pad_token_id)
        selected = batch.select(keep)
        assert selected.num_completions == len(kept) == direct.num_completions
        for field in ("ids", "attention", "pool", "window_step", "step_completion", "step_index"):
            assert torch.equal(getattr(selected, field), getattr(direct, field)), (kept, field)


def assert_credit_stays_on_the_device_of_its_inputs(credit_of, methods, tmp_path) -> None:
    """With factory functions defaulting to another device ("meta"), the credit of CPU inputs
    still runs and stays on the CPU: each tensor it builds says which device it goes on."""
    r = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    args = credit_args(tmp_path, est_groups=2)
    keep = torch.arange(12) % 3 == 0
    for method in methods:
        credit = credit_of(method, args)
        with torch.device("meta"):
            advantages = credit(r, REWARDS, PROBLEMS)
            batch = ss.step_batch(r, step_ids_of(r), end_tokens_of(r), chunk=4, pad_id=TOK.pad_token_id)
            selected = batch.select(keep)
        assert advantages.device.type == "cpu" and torch.isfinite(advantages).all(), method
        for part in (batch, selected):
            for value in dataclasses.astuple(part):
                assert not isinstance(value, torch.Tensor) or value.device.type == "cpu"


def test_the_credit_keeps_every_tensor_on_the_device_of_its_inputs(tmp_path):
    assert_credit_stays_on_the_device_of_its_inputs(credit_of, ss.NAMES, tmp_path)


def test_each_estimator_step_is_one_adam_step_on_the_chosen_groups_loss(tmp_path, monkeypatch):
    """Replaying the losses the estimator was trained on, one Adam step (lr = est_lr) each from
    fresh gradients, gives the trained estimator's parameters."""
    parts = []

    def spy(weights, part, targets):
        parts.append((part, targets))
        return original(weights, part, targets)

    original = ss.estimator_loss
    monkeypatch.setattr(ss, "estimator_loss", spy)
    args = credit_args(tmp_path, est_iters=4, est_groups=2, est_lr=3e-2)
    model = estimator(hidden=16, layers=1, heads=2, ffn=32)
    replica = copy.deepcopy(model)
    ss.Credit("ss_grpo", TOK, args, model, seed=0)(tagged_update(0), REWARDS, PROBLEMS)
    assert len(parts) == 4
    optimizer = torch.optim.Adam(replica.parameters(), lr=3e-2)
    for part, targets in parts:
        optimizer.zero_grad()
        original(replica.step_weights(part), part, targets).backward()
        optimizer.step()
    start = estimator(hidden=16, layers=1, heads=2, ffn=32)
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), start.parameters()))
    for a, b in zip(model.parameters(), replica.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


# -------------------------------------------------- who gets the credit: the figure reads what the loss receives
gae_script = importlib.import_module("02_gae")
critic_study = importlib.import_module("studies.05_critic")


def test_token_gae_is_02s_gae_on_each_completion_and_05_critics_copy():
    """The figure's PPO restates token GAE: completion by completion laid out as 02's (time, batch)
    episodes (the reward on the last token, V = 0 after it) it gives 02's GAE, and studies/05_critic.py's."""
    g = torch.Generator().manual_seed(0)
    lengths = [5, 1, 3, 5]
    mask = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]
    values, rewards = torch.randn(4, 5, generator=g), torch.tensor([1.0, 0.0, 1.0, 0.5])
    for gamma, lam in [(1.0, ss.GAE_LAMBDA), (1.0, 1.0), (0.9, 0.5), (1.0, 0.0)]:
        advantages = ss.token_gae(values, rewards, mask, gamma, lam)
        for i, T in enumerate(lengths):
            r = torch.zeros(T, 1)
            r[-1] = rewards[i]
            v_next = torch.cat([values[i, 1:T], torch.zeros(1)])[:, None]
            ends = torch.arange(T)[:, None] == T - 1
            expected = gae_script.gae(r, values[i, :T, None], v_next, ends, gamma, lam)[:, 0]
            torch.testing.assert_close(advantages[i, :T], expected)
        assert not advantages[~mask].any()
        torch.testing.assert_close(advantages, critic_study.token_gae(values, rewards, mask, gamma, lam)[0])


def test_the_figure_shades_each_token_with_the_advantage_its_loss_receives(tmp_path, monkeypatch):
    """who_gets_the_credit.png, on hand-made samples of three held-out problems: the rule shows the first group's
    first right and first wrong completion, boxes the first wrong line (gold labels), and every row is, token for
    token, what policy_gradient_step receives when 07's loop runs that row's advantage_fn (the very object the
    figure called) on the same batch. The trained credits are read as they stand: SS-GRPO's estimator is not
    refitted and the runs' logs stay as they were. PPO's row is whitened token GAE(γ = 1, λ = 0.95) on a value head
    fitted to the outcomes; the image drawn holds exactly these values."""
    args = credit_args(tmp_path, rl_steps=1, warmup=1, retrain_every=3)
    policy, _ = lm_pins.tiny_model(5)
    batch = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    monkeypatch.setattr(ss, "sample", lambda model, tok, prompts, *rest: (batch, TEXTS))
    runs = {}
    for method in ss.NAMES:
        credit = credit_of(method, args)
        credit(batch, REWARDS, PROBLEMS)  # a training update: SS-GRPO's estimator fits at its first
        runs[method] = {"credit": credit.log, "trained": (policy, credit)}
    model = runs["ss_grpo"]["trained"][1].estimator
    trained_weights = [p.detach().clone() for p in model.parameters()]
    called = {}  # each advantage_fn the figure calls, by the row it fills
    original_ppo, original_copy = ss.ppo_credit, copy.copy
    with monkeypatch.context() as patch:  # copy.copy is the copy module's: spied only while the figure reads
        patch.setattr(ss, "ppo_credit", lambda *a: called.setdefault("ppo", original_ppo(*a)))
        patch.setattr(ss.copy, "copy", lambda c: called.setdefault(c.method, original_copy(c)))
        example = ss.credit_example(runs, TOK, args, PROBLEMS, "cpu")
    assert not any("trained" in run for run in runs.values()) and set(called) == set(ss.ROWS)
    assert all(len(run["credit"]) == 1 for run in runs.values())  # the runs' logs: one entry, as trained
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), trained_weights))  # no refit
    # the rule: group 0 holds right (0, 3) and wrong (1, 2) samples; shown, its first right one and its first wrong one
    rewards = lm_world.verifier_rewards([p for p in PROBLEMS for _ in range(4)], TEXTS, batch.truncated)
    assert rewards[:4].tolist() == [1.0, 0.0, 0.0, 1.0]
    right, wrong = example["panels"]
    assert "".join(right["tokens"]) == TEXTS[0] + "■" and "".join(wrong["tokens"]) == TEXTS[1] + "■"
    assert not right["box"].any() and "".join(np.array(wrong["tokens"])[wrong["box"]]) == "47-7=41\n"  # line 0
    # replay 07's loop on the same batch, one row's advantage_fn at a time
    monkeypatch.setattr(lm_world.ChainTask, "sample", lambda self, n, rng, exclude=frozenset(): PROBLEMS)
    monkeypatch.setattr(ss, "evaluate", lambda *a, **k: {"pass@1": 0.0, "length": 0.0})
    received = {}
    original_step = ss.policy_gradient_step

    def spy(policy, optimizer, completions, advantages, *rest):
        received[row] = advantages.detach().clone()
        return original_step(policy, optimizer, completions, advantages, *rest)

    monkeypatch.setattr(ss, "policy_gradient_step", spy)
    for method, row in ss.ROWS.items():
        ss.train(copy.deepcopy(policy), lm_world.frozen_copy(policy), TOK, args, called[method], [], "cpu")
        for panel, i in zip(example["panels"], (0, 1)):
            np.testing.assert_array_equal(panel["rows"][row], received[row][i, :len(panel["tokens"])].numpy())
    loss_A = received[ss.ROWS["grpo"]]  # GRPO: one number on every token, the group's z-score
    assert torch.allclose(loss_A[0, :19], torch.full((19,), naive_group_z(rewards.view(3, 4))[0]), atol=1e-5)
    ppo = received[ss.ROWS["ppo"]][batch.completion_mask]  # whitened over the batch's tokens
    assert abs(float(ppo.mean())) < 1e-5 and abs(float(ppo.std()) - 1) < 1e-5
    drawn = []
    monkeypatch.setattr(common, "save_figure", lambda fig, path: drawn.append(fig))
    common.token_grid(tmp_path / "credit.png", **example)
    images = [ax.images[0].get_array() for ax in drawn[0].axes if ax.images]
    for image, panel in zip(images, example["panels"]):
        np.testing.assert_array_equal(image, np.stack(list(panel["rows"].values())))


def test_ppo_credit_keeps_every_tensor_on_the_device_of_its_inputs():
    """With factory functions defaulting to another device ("meta"), PPO's critic fit and advantages on CPU
    inputs run and stay on the CPU: each tensor it builds says which device it goes on."""
    policy, _ = lm_pins.tiny_model(5)
    batch = hand_completions([p.prompt for p in PROBLEMS for _ in range(4)], TEXTS)
    rewards = lm_world.verifier_rewards([p for p in PROBLEMS for _ in range(4)], TEXTS, batch.truncated)
    with torch.device("meta"):
        advantages = ss.ppo_credit(policy, batch, rewards)(batch, rewards.view(3, 4), PROBLEMS)
    assert advantages.device.type == "cpu" and torch.isfinite(advantages).all()
    assert torch.equal(advantages[~batch.completion_mask], torch.zeros_like(advantages[~batch.completion_mask]))


@pytest.mark.parametrize("accuracy,share", [
    ({"ss_grpo": 0.45, "grpo": 0.40, "prm_grpo": 0.50}, "50% of a +10.0-point gain of the gold PRM-GRPO"),
    ({"ss_grpo": 0.45, "grpo": 0.50, "prm_grpo": 0.48}, "the gold PRM-GRPO does not beat GRPO here (0.480 against 0.500)"),
])
def test_the_chapters_one_seed_claims_give_their_numbers_and_no_verdict(accuracy, share):
    beats, recovers = ss.check_claims(accuracy)
    assert beats["holds"] is None and recovers["holds"] is None
    assert f"SS-GRPO {accuracy['ss_grpo']:.3f} against GRPO {accuracy['grpo']:.3f}" in beats["measured"]
    assert recovers["measured"].startswith(share) and "one seed: no interval" in recovers["measured"]
