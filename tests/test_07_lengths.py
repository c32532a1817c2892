"""studies/07_lengths.py: the arms' credit against naive loops and their originals (07's SS-GRPO,
studies/07_credit.py's signed weight, studies/05_critic.py's critic and token GAE), the pairing
of gains by seed, the verdict rule both ways, the variance claim, CLI checks and a smoke run."""

import dataclasses
import importlib
import json
import math

import numpy as np
import pytest
import torch

import common
import lm_world
from lm_pins import hand_completions, tiny_model

ss = importlib.import_module("07_ss_grpo")
lab = importlib.import_module("studies.07_lengths")
signed_lab = importlib.import_module("studies.07_credit")
critic_lab = importlib.import_module("studies.05_critic")

TOK = lm_world.make_char_tokenizer()
# two groups of two: the hard step (the multiplication) right, wrong, and wrong again with a wrong easy step after it
PROBLEMS = [lm_world.ChainProblem(5, (("+", 2), ("*", 3), ("-", 1))), lm_world.ChainProblem(9, (("*", 2), ("+", 4)))]
TEXTS = ["5+2=7\n7*3=21\n21-1=20\n#20", "5+2=7\n7*3=22\n22-1=21\n#21",
         "9*2=18\n18+4=22\n#22", "9*2=19\n19+4=24\n#24"]


def smoke_args(tmp_path, **values) -> lab.Args:
    return common.apply_smoke(lab.Args(smoke=True, device="cpu", out=str(tmp_path / "out"),
                                       cache=str(tmp_path / "cache"), **values))


def completions_of(texts=TEXTS, problems=PROBLEMS):
    return hand_completions([p.prompt for p in problems for _ in range(2)], texts)


def test_own_step_credit_is_each_steps_own_correctness_normalised_over_its_group():
    completions = completions_of()
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    args = dataclasses.replace(lab.Args(smoke=True), group_size=2)
    advantages = lab.own_credit(TOK, args)(completions, rewards, PROBLEMS)
    step_ids = lm_world.token_step_ids(TOK, completions.completion_ids, completions.completion_mask)
    for g in range(2):  # naive: every step of the group's completions, right (1) or not, standardised
        rows = range(2 * g, 2 * g + 2)
        right = {b: lm_world.steps_right(PROBLEMS[g], TEXTS[b]) for b in rows}
        pooled = torch.tensor([float(r) for b in rows for r in right[b]])
        mean, std = pooled.mean(), pooled.std()
        for b in rows:
            for t in range(completions.completion_mask.shape[1]):
                s = int(step_ids[b, t])
                expected = 0.0 if s < 0 else (float(right[b][s]) - mean) / (std + 1e-4)
                assert advantages[b, t].item() == pytest.approx(float(expected), abs=1e-5)
    # the wrong hard step is blamed and the easy step after it, right on its own, is not
    wrong_row = step_ids[1]
    assert advantages[1][wrong_row == 1].max() < 0 < advantages[1][wrong_row == 2].min()


def test_own_credit_gives_nothing_to_the_empty_line_of_a_cut_completion():
    completions = hand_completions([PROBLEMS[1].prompt] * 2, ["9*2=18\n", "9*2=19\n18"], cut=[True, True])
    args = dataclasses.replace(lab.Args(smoke=True), group_size=2)
    advantages = lab.own_credit(TOK, args)(completions, torch.zeros(1, 2), PROBLEMS[1:])
    assert advantages.shape == completions.completion_mask.shape and torch.isfinite(advantages).all()


def test_signed_credit_is_07_credits_signed_weight_on_the_chapters_estimator():
    args = dataclasses.replace(lab.Args(smoke=True), group_size=2)
    completions, rewards = completions_of(), torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    credit = lab.make_arm("ss_signed", None, TOK, args, "cpu")
    advantages = credit(completions, rewards, PROBLEMS)
    repeated = [p for p in PROBLEMS for _ in range(2)]
    step_ids, end_tokens, _ = ss.read_steps(TOK, completions, repeated)
    batch = ss.step_batch(completions, step_ids, end_tokens, ss.CHUNK, TOK.pad_token_id)
    with torch.no_grad():  # the estimator as the call left it: it weighed these steps after its fit
        w = ss.step_grid(credit.estimator.step_weights(batch), batch)
    expected = ss.broadcast_to_tokens(signed_lab.signed_advantages(ss.grpo_advantages(rewards).flatten(), w), step_ids)
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert (advantages[1][completions.completion_mask[1]] < 0).all()  # the failed completion's steps are blamed


def test_the_restated_critic_is_05_critics_separate_critic():
    policy, _ = tiny_model(1)
    ours, theirs = lab.TokenCritic(policy), critic_lab.TokenCritic(policy, "separate")
    for module in (ours, theirs):
        torch.manual_seed(5)
        torch.nn.init.normal_(module.head.weight)
    completions = completions_of()
    assert torch.allclose(ours(completions), theirs(completions), atol=1e-6)


def test_critic_credit_is_05s_whitened_token_gae_and_steps_toward_its_targets():
    policy, _ = tiny_model(2)
    args = dataclasses.replace(lab.Args(smoke=True), group_size=2)
    credit = lab.CriticCredit(policy, args, 0.95)
    torch.nn.init.normal_(credit.critic.head.weight, std=0.1)
    completions, rewards = completions_of(), torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    mask = completions.completion_mask
    with torch.no_grad():
        values = credit.critic(completions)
    expected, targets = critic_lab.token_gae(values, rewards.flatten(), mask, 1.0, 0.95)
    before = critic_lab.value_loss(values, targets, mask)
    advantages = credit(completions, rewards, PROBLEMS)
    assert torch.allclose(advantages, critic_lab.whiten(expected, mask), atol=1e-5)
    with torch.no_grad():
        assert critic_lab.value_loss(credit.critic(completions), targets, mask) < before


@pytest.mark.parametrize("arm", lab.ARMS)
def test_every_arm_gives_a_finite_advantage_on_every_token_and_zero_off_them(arm):
    policy, _ = tiny_model(3)
    args = dataclasses.replace(lab.Args(smoke=True), group_size=2, critic_warmup=0)
    completions = completions_of()
    advantages = lab.make_arm(arm, policy, TOK, args, "cpu")(completions, torch.tensor([[1.0, 0.0], [1.0, 0.0]]),
                                                             PROBLEMS)
    assert torch.isfinite(advantages).all() and (advantages[~completions.completion_mask] == 0).all()


def run(arm: str, seed: int, steps: int, value: float) -> dict:
    return {"arm": arm, "seed": seed, "steps": steps, "final": {"pass@1": value}}


def test_gains_pair_each_arm_with_flat_grpo_on_the_same_seed():
    runs = [run("grpo", 0, 2, 0.2), run("grpo", 1, 2, 0.5), run("own", 1, 2, 0.6), run("own", 0, 2, 0.4),
            run("own", 0, 4, 0.9)]
    assert sorted(lab.gains(runs, "own", 2)) == pytest.approx([0.1, 0.2])


def test_samples_to_target_is_the_first_evaluation_that_reaches_it():
    evals = [{"samples": 0, "pass@1": 0.1}, {"samples": 64, "pass@1": 0.3}, {"samples": 128, "pass@1": 0.2}]
    assert lab.samples_to_target(evals, 0.3) == 64 and lab.samples_to_target(evals, 0.1) == 0
    assert math.isnan(lab.samples_to_target(evals, 0.31))


def interval(mean: float, half: float) -> dict:
    return {"mean": mean, "low": mean - half, "high": mean + half}


@pytest.mark.parametrize("growth,long,holds", [
    (interval(0.2, 0.1), interval(0.2, 0.1), True),  # grows seed by seed, and the longest lies above 0
    (interval(0.2, 0.3), interval(0.2, 0.1), None),  # above 0 at the longest, but its growth is within the noise
    (interval(0.2, 0.1), interval(0.1, 0.15), None),  # grows, but the longest holds 0
    (interval(0.0, 0.05), interval(0.0, 0.05), None),  # a tight interval round 0 rules out no named size
    (interval(-0.2, 0.1), interval(0.0, 0.05), False),  # the gain shrinks with length, seed by seed
    (interval(0.0, 0.05), interval(-0.2, 0.1), False),  # the arm loses to flat at the longest chain
])
def test_the_verdict_rule_says_yes_no_and_inconclusive(growth, long, holds):
    assert lab.verdict({2: interval(0.0, 0.05), 16: long}, growth) is holds


def test_growth_is_each_seeds_gain_at_the_longest_minus_at_the_shortest(tmp_path):
    args = smoke_args(tmp_path, arms="grpo,own")  # lengths 2, 3
    finals = {("grpo", 2): (0.1, 0.2), ("own", 2): (0.2, 0.2), ("grpo", 3): (0.1, 0.1), ("own", 3): (0.4, 0.3)}
    runs = [{"arm": a, "steps": n, "seed": s, "final": {"pass@1": v[s]}, "evals": []} for (a, n), v in finals.items()
            for s in (0, 1)]
    growth = lab.analyse(args, runs, cold(0, {2: 1.0, 3: 1.0}) + cold(1, {2: 1.0, 3: 1.0}))["growth"]["own"]
    assert growth["mean"] == pytest.approx(np.mean([(0.4 - 0.1) - (0.2 - 0.1), (0.3 - 0.1) - (0.2 - 0.2)]))


SPARSE = (True, "most groups lack spread")


@pytest.mark.parametrize("longest,inside,sparse,holds", [
    (interval(0.2, 0.1), True, SPARSE, True),  # the interval at the longest chain lies above 0
    (interval(-0.2, 0.1), True, SPARSE, False),  # below 0
    (interval(0.0, 0.05), True, SPARSE, None),  # round 0: no size is ruled out
    (interval(0.1, 0.15), True, SPARSE, None),  # holds 0
    (interval(0.2, 0.1), False, SPARSE, None),  # the cold start outside its window: premise not met
    (interval(0.2, 0.1), True, (None, "half the groups lack spread"), None),  # the reward not shown sparse
    (interval(0.2, 0.1), True, (False, "few groups lack spread"), None),  # shown not sparse: premise not met
])
def test_the_mitigation_claim_reads_the_longest_chains_interval(tmp_path, longest, inside, sparse, holds):
    args = dataclasses.replace(smoke_args(tmp_path), detectable_gap=0.1)
    found = lab.mitigation_claim(args, "own", {2: interval(0.5, 0.01), 3: longest}, inside, sparse)
    assert found["holds"] is holds and "at 3 steps" in found["measured"] and sparse[1] in found["measured"]
    assert ("premise not met" in found["measured"]) is (not inside or sparse[0] is False)
    assert ("is not shown" in found["measured"]) is (sparse[0] is None)


@pytest.mark.parametrize("shares,sparse", [
    ((0.7, 0.75, 0.72), True),  # more than half of the groups without spread on every seed
    ((0.2, 0.25, 0.22), False),  # fewer than half: the premise is shown absent
    ((0.2, 0.9, 0.5), None),  # the seeds disagree
    ((math.nan,) * 3, None),  # not recorded
])
def test_the_sparse_premise_is_flat_grpos_sampled_zero_spread_share_minus_a_half(tmp_path, shares, sparse):
    args = smoke_args(tmp_path)  # lengths 2, 3
    met, text = lab.sparse_premise(args, dict(enumerate(shares)))
    assert met is sparse and ", ".join(f"{v:.3f}" for v in shares) in text and "at 3 steps" in text
    assert common.seed_verdict(np.subtract(shares, 0.5))[1] in text


def test_the_analysis_reads_flat_grpos_zero_spread_at_the_longest_chain_only(tmp_path):
    args = smoke_args(tmp_path, arms="grpo,own")  # lengths 2, 3
    runs = [{"arm": a, "steps": n, "seed": s, "final": {"pass@1": 0.3}, "evals": [], "zero_spread": [z, z + 0.5]}
            for a, z in (("grpo", 0.1), ("own", 0.3)) for n in (2, 3) for s in (0, 1)]
    runs[2]["zero_spread"] = [0.0, 0.2]  # flat at 3 steps, seed 0
    records = cold(0, {2: 1.0, 3: 1.0}) + cold(1, {2: 1.0, 3: 1.0})
    assert lab.analyse(args, runs, records)["flat_zero_spread_by_seed"] == pytest.approx({0: 0.1, 1: 0.35})


def test_the_recorded_share_is_the_groups_whose_rewards_are_all_equal():
    shares, given = [], torch.ones(4, 3)
    credit = lab.recording_spread(lambda completions, rewards, problems: given, shares)
    assert credit(None, torch.tensor([[1.0, 1.0], [0.0, 1.0]]), []) is given
    credit(None, torch.tensor([[0.0, 0.0], [1.0, 1.0]]), [])
    assert shares == [0.5, 1.0]


def stored_run(seed: int, pass1: float, **extra) -> dict:
    return {"arm": "grpo", "steps": 3, "seed": seed, "evals": [{"step": 0, "pass@1": pass1}],
            "final": {"pass@1": pass1}} | extra


def test_spread_from_copies_the_reruns_shares_onto_the_same_runs(tmp_path):
    path = tmp_path / "rerun.json"
    path.write_text(json.dumps({"runs": [stored_run(1, 0.4, zero_spread=[0.5, 0.25])]}))
    runs = [stored_run(0, 0.3), stored_run(1, 0.4)]
    found = lab.with_spread(runs, str(path))
    assert "zero_spread" not in found[0] and found[1]["zero_spread"] == [0.5, 0.25] and "zero_spread" not in runs[1]


@pytest.mark.parametrize("rerun", [stored_run(1, 0.41, zero_spread=[0.5]),  # its evaluations differ: another run
                                   stored_run(2, 0.4, zero_spread=[0.5]),  # no such run here
                                   stored_run(1, 0.4)])  # recorded no share
def test_spread_from_stops_on_a_run_that_is_not_a_rerun(tmp_path, capsys, rerun):
    path = tmp_path / "rerun.json"
    path.write_text(json.dumps({"runs": [rerun]}))
    with pytest.raises(SystemExit) as stop:
        lab.with_spread([stored_run(0, 0.3), stored_run(1, 0.4)], str(path))
    assert stop.value.code == 2 and "is not a re-run" in capsys.readouterr().err


def cold(seed: int, variance: dict) -> list[dict]:
    return [{"steps": n, "seed": seed, "pass@1": 0.3, "hard": 0.4, "easy": 0.9, "right_prefix": 1.0,
             "outcome_variance": v, "gradient_noise": {"grpo": 1.0}} for n, v in variance.items()]


@pytest.mark.parametrize("powers,holds", [((1.0, 1.1, 0.9), True), ((2.0, 2.1, 1.9), False), ((0.0, 2.0, 1.0), None),
                                          ((0.2, 0.3, 0.25), False)])
def test_the_variance_claim_reads_the_slopes_interval_over_seeds(powers, holds):
    records = [r for s, k in enumerate(powers) for r in cold(s, {n: 3.0 * n**k for n in (2, 4, 8, 16)})]
    assert lab.variance_claim(records)["holds"] is holds


def test_a_cold_start_outside_the_window_makes_every_length_claim_premise_not_met(tmp_path):
    args = smoke_args(tmp_path, arms="grpo,own")
    analysis = {"gain": {"own": {2: interval(0.0, 0.01), 3: interval(0.3, 0.01)}}, "growth": {"own": interval(0.3, 0.01)},
                "pass@1_by_seed": {"own": {3: {0: 0.6, 1: 0.62}}, "grpo": {3: {0: 0.3, 1: 0.3}}},
                "flat_zero_spread_by_seed": {0: 0.2, 1: 0.3}}
    records = cold(0, {2: 1.0, 3: 2.0, 4: 3.0}) + cold(1, {2: 1.0, 3: 2.0, 4: 3.0})
    inside = lab.check_claims(args, analysis, records)
    records[0]["pass@1"] = records[3]["pass@1"] = 0.05  # length 2 below the window on both seeds
    outside = lab.check_claims(args, analysis, records)
    assert inside[0]["holds"] is True and inside[1]["holds"] is True
    assert outside[0]["holds"] is False and outside[1]["holds"] is None and "premise not met" in outside[1]["measured"]
    assert inside[2]["holds"] is True and outside[2]["holds"] is None and "premise not met" in outside[2]["measured"]


@pytest.mark.parametrize("own,holds", [
    ((0.5, 0.52, 0.49), True),  # own credit above flat on every seed, the interval above 0
    ((0.1, 0.12, 0.09), False),  # below flat: the interval below 0
    ((0.5, 0.1, 0.3), None),  # the seeds disagree
])
def test_the_waste_claim_is_own_credits_gain_at_the_longest_chain_seed_by_seed(tmp_path, own, holds):
    args = smoke_args(tmp_path)  # lengths 2, 3
    flat = (0.3, 0.31, 0.29)
    by_seed = {"own": {2: {0: 0.9, 1: 0.9, 2: 0.9}, 3: dict(enumerate(own))},
               "grpo": {2: {0: 0.0, 1: 0.0, 2: 0.0}, 3: dict(enumerate(flat))}}  # the shortest chain plays no part
    found = lab.waste_claim(args, by_seed, True)
    expected, text = common.seed_verdict(np.subtract(own, flat))
    assert found["holds"] is holds is expected and text in found["measured"] and "at 3 steps" in found["measured"]
    assert found["claim"].endswith("at the longest chain (3 steps)") and "sparse" not in found["claim"]
    assert lab.waste_claim(args, by_seed, False)["holds"] is None


def test_a_run_at_a_length_draws_one_hard_step_problems_of_that_length_within_its_budget():
    args = lab.Args()
    at = lab.at_length(args, 8, seed=3)
    assert at.seed == 3 and at.max_new_tokens == at.task.longest_solution + 12
    problems = at.task.sample(20, np.random.default_rng(0))
    assert all(len(p.ops) == 8 and [op for op, _ in p.ops].count("*") == 1 for p in problems)
    assert args.cold_start.one_hard_step and args.cold_start.hard_step_accuracy == args.hard_accuracy
    assert (args.cold_start.min_steps, args.cold_start.max_steps) == (2, 16)  # the runs' policy learned every length


def test_smoke_run_writes_results_a_figure_and_a_claim_per_arm(tmp_path, read_results):
    args = lab.Args(smoke=True, device="cpu", out=str(tmp_path / "out"), cache=str(tmp_path / "cache"),
                    arms="grpo,own,ppo_1")
    lab.main(args)
    data = read_results(tmp_path / "out" / "results.json")
    assert (tmp_path / "out" / "gain_by_length.png").stat().st_size > 1000
    for r in data["runs"]:  # each update's share recorded
        assert len(r["zero_spread"]) == data["args"]["rl_steps"] and all(0 <= z <= 1 for z in r["zero_spread"])
    assert {r["arm"] for r in data["runs"]} == {"grpo", "own", "ppo_1"} and len(data["runs"]) == 3 * 2 * 2
    assert [c["source"] for c in data["claims"]][0] == "design (this study)" and len(data["claims"]) == 6
    rows = data["metrics"]["tables"]["lengths"]["rows"]
    assert [row[:2] for row in rows[:4]] == [[2, "cold start"], [2, "flat GRPO"], [2, lab.NAMES["own"]],
                                            [2, lab.NAMES["ppo_1"]]]
    again = lab.main(lab.Args(reanalyse=str(tmp_path / "out" / "results.json")))  # the same, from its own numbers
    assert common.json_ready(again) == {"claims": data["claims"], "metrics": data["metrics"]}
    assert read_results(tmp_path / "out" / "results.json")["wall_clock_s"] == data["wall_clock_s"]


@pytest.mark.parametrize("argv,message", [
    (("--arms", "grpo,nope"), "is not one of"),
    (("--lengths", "2,20"), "--lengths must be within --min-steps..--max-steps"),
    (("--hard-accuracy", "0"), "--hard-accuracy must be in (0, 1]"),
    (("--detectable-gap", "0"), "--detectable-gap must be positive"),
    (("--critic-warmup", "-1"), "--critic-warmup must be non-negative"),
])
def test_bad_flags_stop_with_one_line(cli_error, argv, message):
    assert message in cli_error("studies.07_lengths", *argv)


def test_t_interval_is_not_computed_from_one_seed():
    assert math.isnan(common.mean_interval([0.3])[1])


@pytest.mark.parametrize("per_token_mean", [False, True])
def test_batch_gradients_are_the_weighted_score_summed_or_averaged_over_each_completion(per_token_mean):
    policy, tok = tiny_model(4)
    args = lab.at_length(dataclasses.replace(lab.Args(smoke=True), variance_batches=2, prompts=2, group_size=2,
                                             hidden=16, layers=2, heads=2), 2, seed=0)
    weights = torch.tensor([0.7, -1.3, 0.4, 2.0])  # one per completion: a test the rewards of a random model (0) cannot pass

    def weighted(completions, rewards, problems):
        return weights[:, None] * completions.completion_mask

    g = lab.batch_gradients(policy, tok, args, "cpu", weighted, per_token_mean)
    rng, generator = np.random.default_rng(args.seed + 21), torch.Generator().manual_seed(args.seed + 21)
    for b in range(2):  # naive: each batch's gradient, one completion at a time
        completions, _, _ = lab.sample_batch(policy, tok, args, rng, generator, "cpu")
        policy.zero_grad()
        for n in range(4):
            logp, _ = lm_world.token_logprobs(policy, completions.sequences[n:n + 1],
                                              completions.attention_mask[n:n + 1], completions.prompt_length)
            tokens = logp[0][completions.completion_mask[n]]
            (-weights[n] * (tokens.mean() if per_token_mean else tokens.sum()) / 4).backward()
        naive = torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None]).double()
        assert torch.allclose(g[b], naive, atol=1e-6) and naive.abs().sum() > 0
