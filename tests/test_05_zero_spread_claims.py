"""studies/05_zero_spread.py: the expected share of groups with no reward spread against
enumeration, the difficulty bins, the gradient of each part of a batch against a direct
computation, each claim's verdict on constructed seeds (yes, no, inconclusive, premise not
met), the CLI and a --smoke run."""

import importlib
import itertools
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import common
import lm_world
from lm_pins import tiny_model

ROOT = Path(__file__).resolve().parents[1]
grpo = importlib.import_module("05_grpo_rloo")
zs = importlib.import_module("studies.05_zero_spread")


def loop_args(tmp_path, **changes):
    """The chapter's settings on a small task space (one step, values up to 30)."""
    settings = dict(rl_steps=3, prompts=4, group_size=4, eval_every=2, max_new_tokens=8, eval_problems=4,
                    eval_samples=2, min_steps=1, max_steps=1, max_value=30, max_operand=3, clip_eps=0.3, beta=0.07,
                    inner_iters=2, max_grad_norm=0.9, warmup=3, lr=0.01, loss_norm="token", seed=5)
    return grpo.Args(device="cpu", out=str(tmp_path / "out"), **settings | changes)


# ------------------------------------------------------------------------ the share, the bins
@pytest.mark.parametrize("n,c,G", [(8, 3, 2), (8, 0, 4), (8, 8, 8), (6, 2, 3)])
def test_zero_spread_probability_matches_enumeration(n, c, G):
    outcomes = [1] * c + [0] * (n - c)
    groups = list(itertools.combinations(outcomes, G))
    expected = np.mean([len(set(g)) == 1 for g in groups])
    assert math.isclose(zs.zero_spread_probability(n, c, G), expected)


def test_zero_spread_share_is_the_share_of_completions_with_a_zero_advantage():
    """Every way of cutting each problem's n samples into groups of G, enumerated: the share of
    completions whose GRPO advantage is 0."""
    correct, n, G = [0, 2, 3], 4, 2

    def zero_advantages(c: int) -> float:
        orders = set(itertools.permutations([1.0] * c + [0.0] * (n - c)))
        return np.mean([float((grpo.group_advantages(torch.tensor(o).view(n // G, G), "grpo") == 0).float().mean())
                        for o in orders])

    assert math.isclose(zs.zero_spread_share(correct, n, G), np.mean([zero_advantages(c) for c in correct]))


def test_zero_spread_table_by_difficulty():
    table = zs.zero_spread_table([0, 4, 2, 4], [1, 1, 2, 2], samples=4, group_sizes=[2, 4])
    assert table[1] == {"pass@1": 0.5, 2: 1.0, 4: 1.0}  # all wrong and all right: never a signal
    assert table[2]["pass@1"] == 0.75 and table[2][4] == 0.5 and math.isclose(table[2][2], (2 / 6 + 1) / 2)


@pytest.mark.parametrize("c,n,expected", [(0, 3, "hard"), (1, 3, "medium"), (2, 3, "medium"), (3, 3, "easy"),
                                          (10, 32, "hard"), (11, 32, "medium"), (21, 32, "medium"), (22, 32, "easy")])
def test_a_problem_is_binned_by_its_own_pass_rate_in_thirds(c, n, expected):
    assert zs.difficulty(c, n) == expected


def test_each_bin_reads_its_signal_from_the_other_samples():
    """The bin comes from bin_correct; the signal from correct, the other draw: a problem binned
    easy that then splits 2/2 gives the easy bin a signal."""
    args = zs.Args(group_sizes="2", samples=4, bin_samples=3)
    found = zs.signal_by_bin({"bin_correct": [0, 3, 1, 2], "correct": [0, 2, 4, 1]}, args, 2)
    assert found["hard"] == {"problems": 1, "signal": 0.0}
    assert found["easy"] == {"problems": 1, "signal": 1 - zs.zero_spread_probability(4, 2, 2)}
    assert found["medium"]["problems"] == 2
    assert math.isclose(found["medium"]["signal"], 1 - zs.zero_spread_share([4, 1], 4, 2))
    assert math.isnan(zs.signal_by_bin({"bin_correct": [0], "correct": [1]}, args, 2)["easy"]["signal"])


def test_the_tables_pool_the_seeds_problems():
    args = zs.Args(group_sizes="2,4", samples=4)
    seeds = [{"steps": [1, 2], **{p: {"correct": [0, 2 + i]} for i, p in enumerate(zs.POLICIES)}},
             {"steps": [1, 1], **{p: {"correct": [4, i]} for i, p in enumerate(zs.POLICIES)}}]
    tables = zs.pooled_tables(args, seeds)
    assert tables["weak cold start"] == zs.zero_spread_table([0, 3, 4, 1], [1, 2, 1, 1], 4, [2, 4])
    assert list(tables) == list(zs.POLICIES)


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
    part's tokens. Zero-spread rows give no policy gradient, but their KL term still pulls, on
    every token where the policy and the reference differ."""
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
    reference = lm_world.frozen_copy(tiny_model(9)[0])
    norms = zs.gradient_by_spread(policy, reference, tok, args, "cpu")
    (completions, rewards), = sampled
    G = args.group_size
    flat = [len(set(group.tolist())) == 1 for group in rewards]
    assert {group[0].item() for group, same in zip(rewards, flat) if same} == {0.0, 1.0} and not all(flat)
    same = torch.tensor([flat[i // G] for i in range(len(flat) * G)])
    advantages = grpo.group_advantages(rewards, "grpo").flatten()
    batch = (completions.sequences, completions.attention_mask, completions.prompt_length)
    with torch.no_grad():
        ref_logp, _ = lm_world.token_logprobs(reference, *batch)
    expected = {"zero-spread share": sum(flat) / len(flat)}
    for part, rows in (("zero-spread", same), ("mixed", ~same)):
        mask = completions.completion_mask & rows[:, None]
        for term in ("pg", "kl"):
            policy.zero_grad()
            logp, _ = lm_world.token_logprobs(policy, *batch)
            log_ratio = ref_logp - logp
            per_token = -advantages[:, None] * logp if term == "pg" else args.beta * (log_ratio.exp() - log_ratio - 1)
            (per_token[mask].sum() / mask.sum()).backward()
            expected[f"{part} {term}"] = math.sqrt(sum(float((p.grad ** 2).sum()) for p in policy.parameters()
                                                       if p.grad is not None))
        expected[f"{part} kl tokens"] = 1.0  # two different random models: they differ on every token
    assert norms["zero-spread pg"] == 0.0 and norms["zero-spread kl"] > 0 and norms["mixed pg"] > 0
    assert norms == pytest.approx(expected, rel=1e-4)


def test_gradient_by_spread_leaves_no_gradient_behind(tmp_path):
    model, tok = tiny_model(8)
    zs.gradient_by_spread(model, lm_world.frozen_copy(tiny_model(9)[0]), tok, loop_args(tmp_path), "cpu")
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_with_only_all_wrong_groups_the_mixed_part_reads_nan(tmp_path):
    """A random model never answers right: every group is all-wrong, the mixed part is empty and
    has nothing to measure (NaN, so that a mean over seeds skips it), and with the policy as its
    own reference the KL term is 0 on every token."""
    model, tok = tiny_model(10)
    norms = zs.gradient_by_spread(model, lm_world.frozen_copy(model), tok, loop_args(tmp_path), "cpu")
    assert all(math.isnan(norms.pop(f"mixed {k}")) for k in ("pg", "kl", "kl tokens"))
    assert norms == {"zero-spread share": 1.0, "zero-spread pg": 0.0, "zero-spread kl": 0.0,
                     "zero-spread kl tokens": 0.0}


# ------------------------------------------------------------------------ claims on made-up seeds
RL = grpo.Args(group_size=4, beta=0.04)
ARGS = zs.Args(group_sizes="2,4,8", samples=8, bin_samples=3)
GRADS = {"zero-spread share": 0.25, "zero-spread pg": 0.0, "zero-spread kl": 0.07, "mixed pg": 0.7, "mixed kl": 0.03,
         "zero-spread kl tokens": 1.0, "mixed kl tokens": 1.0}


def made_seeds(counts: dict, bins: dict | None = None, grads: dict | None = None) -> list[dict]:
    """Seeds from right counts (of 8) per policy and seed; bin counts (of 3) the same for every
    policy; the same gradient record on every seed unless `grads` gives one per seed."""
    n = len(next(iter(counts.values())))
    return [{"seed": i, "steps": [1] * len(counts["cold start"][i]),
             **{p: {"correct": counts[p][i], "bin_correct": (bins or {}).get(p, [[0] * len(counts[p][i])] * n)[i]}
                for p in counts}, "gradient": (grads or {}).get(i, GRADS)} for i in range(n)]


MIXED = [[4, 3, 5, 0], [5, 3, 4, 0], [3, 4, 2, 0]]  # mostly groups with a spread
SPARSE = [[0, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0]]  # mostly all-wrong groups


def counts(default=MIXED, weak=SPARSE, after=MIXED) -> dict:
    return {"cold start": default, "weak cold start": weak, "after GRPO": after}


def by_claim(claims: list[dict], text: str) -> list[dict]:
    return [c for c in claims if text in c["claim"]]


def test_the_vanishing_claims_are_exact_on_every_seeds_batch():
    claims = zs.vanish_claims(RL, made_seeds(counts()))
    assert [c["holds"] for c in claims] == [True, False, True]  # the KL term pulls: the whole gradient stays
    assert "0.0e+00, 0.0e+00, 0.0e+00" in claims[0]["measured"] and claims[0]["measured"] == claims[2]["measured"]


@pytest.mark.parametrize("change,rl,expected", [
    ({"zero-spread pg": 1e-9}, RL, [False, False, False]),  # one seed's zero-spread groups still push
    ({"zero-spread kl": 0.0}, RL, [True, False, False]),  # the policy moved, yet no pull on that seed's
    ({"zero-spread kl tokens": 0.0, "mixed kl tokens": 0.0, "zero-spread kl": 0.0}, RL, [True, False, None]),  # at ref
    ({}, grpo.Args(group_size=4, beta=0.0), [True, False, None]),  # no KL term
])
def test_each_vanishing_verdict_turns_with_its_own_measurement(change, rl, expected):
    claims = zs.vanish_claims(rl, made_seeds(counts(), grads={1: GRADS | change}))
    assert [c["holds"] for c in claims] == expected
    assert all("premise not met" in c["measured"] for c in claims if c["holds"] is None)


def test_the_whole_gradient_vanishes_only_where_no_batch_has_a_kl_pull():
    still = GRADS | {"zero-spread kl": 0.0}
    claims = zs.vanish_claims(grpo.Args(group_size=4, beta=0.0), made_seeds(counts(), grads=dict.fromkeys(range(3), still)))
    assert claims[1]["holds"] is True and "the whole GRPO gradient" in claims[1]["claim"]


def test_the_vanishing_claims_read_only_the_batches_with_zero_spread_groups():
    """A batch with no zero-spread group says nothing about them (its norms are 0 by
    construction); with none anywhere, the premise is not met."""
    none = GRADS | dict.fromkeys(("zero-spread kl", "zero-spread pg", "zero-spread kl tokens"), math.nan) | {
        "zero-spread share": 0.0}
    claims = zs.vanish_claims(RL, made_seeds(counts(), grads={1: none}))
    assert [c["holds"] for c in claims] == [True, False, True] and "the 2 of 3 batches" in claims[0]["measured"]
    claims = zs.vanish_claims(RL, made_seeds(counts(), grads=dict.fromkeys(range(3), none)))
    assert [c["holds"] for c in claims] == [None, None, None]
    assert all("premise not met: no batch had a zero-spread group" in c["measured"] for c in claims)


@pytest.mark.parametrize("default,expected", [(SPARSE, True), (MIXED, False),
                                              ([[0, 0, 0, 0], [4, 4, 4, 4], [0, 4, 0, 4]], None)])
def test_most_trajectories_teach_nothing_where_more_than_half_sit_in_zero_spread_groups(default, expected):
    claim = zs.most_claims(RL, ARGS, made_seeds(counts(default=default)))[2]
    shares = [zs.zero_spread_share(c, 8, 4) for c in default]
    mean, low, high = common.mean_interval(shares)
    assert claim["holds"] is expected and "default cold start" in claim["claim"]
    assert f"{mean:.3f} [{low:.3f}, {high:.3f}]" in claim["measured"]
    assert common.seed_verdict(np.subtract(shares, 0.5))[1] in claim["measured"]


def test_the_weak_start_has_its_own_claim():
    default, weak = zs.most_claims(RL, ARGS, made_seeds(counts()))[2:]
    assert (default["holds"], weak["holds"]) == (False, True) and "weak cold start (60 SFT steps)" in weak["claim"]


@pytest.mark.parametrize("default,expected", [
    (SPARSE, True),  # 1 of 8 right at most: most completions earn 0
    ([[6, 5, 7, 8], [7, 6, 5, 8], [5, 6, 7, 8]], False),  # mostly right
    ([[4, 4, 4, 4], [3, 5, 4, 4], [5, 3, 4, 4]], None),  # half right: cannot tell
])
def test_most_trajectories_teach_nothing_without_a_baseline_where_more_than_half_earn_reward_0(default, expected):
    claim, weak = zs.most_claims(RL, ARGS, made_seeds(counts(default=default)))[:2]
    failed = [1 - np.mean(c) / 8 for c in default]
    mean, low, high = common.mean_interval(failed)
    assert claim["holds"] is expected and "earn reward 0" in claim["claim"] and "default cold start" in claim["claim"]
    assert f"{mean:.3f} [{low:.3f}, {high:.3f}]" in claim["measured"]
    assert weak["holds"] is True and "weak cold start" in weak["claim"]


def test_larger_groups_claims_hold_where_every_step_up_in_G_loses_zero_spread_groups():
    larger, checklist, small = zs.group_size_claims(ARGS, made_seeds(counts()))
    assert larger["holds"] is True and checklist["holds"] is True and small["holds"] is True
    assert "G = 2 → 4" in larger["measured"] and "G = 4 → 8" in larger["measured"]
    for claim, pair in ((checklist, (4, 8)), (small, (2, 4))):
        falls = np.subtract(*[[zs.zero_spread_share(c, 8, G) for c in MIXED] for G in pair])
        assert common.seed_verdict(falls)[1] in claim["measured"] and f"at G = {pair[0]} minus at G = {pair[1]}" in claim["measured"]
    assert small["source"] == "SS-GRPO article (Trade-offs)" and "K = 2 than at K = 4" in small["claim"]


def test_a_start_that_never_succeeds_leaves_the_larger_groups_claim_open():
    """Every group is all wrong at every G: no fall, nothing for the seeds to tell."""
    larger, checklist, small = zs.group_size_claims(ARGS, made_seeds(counts(weak=[[0] * 4] * 3)))
    assert larger["holds"] is None and checklist["holds"] is True and small["holds"] is True


def test_the_group_size_claims_need_their_group_sizes():
    one = zs.Args(group_sizes="4", samples=8)
    larger, = zs.group_size_claims(one, made_seeds(counts()))
    assert larger["holds"] is None and "premise not met" in larger["measured"]
    assert [c["source"] for c in zs.group_size_claims(zs.Args(group_sizes="2,4", samples=8), made_seeds(counts()))] == [
        "whole-game §7.3, §7.8", "SS-GRPO article (Trade-offs)"]


# medium problems (1 or 2 of 3 right in the bin draw) split 4/4 in the other draw; hard and easy ones do not
BINS = [[0, 1, 2, 3], [0, 2, 1, 3], [0, 1, 1, 3]]
MEDIUM_WINS = [[0, 4, 4, 8], [1, 4, 3, 8], [0, 5, 4, 7]]


@pytest.mark.parametrize("after,bins,expected,premise", [
    (MEDIUM_WINS, BINS, True, False),
    ([[4, 0, 0, 8], [4, 1, 0, 8], [3, 0, 1, 8]], BINS, False, False),  # the hard bin has the signal
    ([[0, 4, 4, 4], [1, 4, 3, 3], [0, 5, 4, 5]], BINS, None, False),  # easy as good as medium: only hard's half
    (MEDIUM_WINS, [[0, 1, 2, 3], [0, 2, 1, 2], [0, 1, 1, 3]], None, True),  # no easy problem on seed 1
])
def test_the_medium_difficulty_claim_compares_medium_with_hard_and_with_easy(after, bins, expected, premise):
    claim = zs.medium_claim(RL, ARGS, made_seeds(counts(after=after), bins={"after GRPO": bins}), "after GRPO")
    assert claim["holds"] is expected and "own pass rate after GRPO" in claim["claim"]
    assert ("premise not met: the easy bin is empty on 1 of 3 seeds" in claim["measured"]) is premise
    assert ("medium minus easy" in claim["measured"]) is not premise and "medium minus hard" in claim["measured"]


def test_baseline_errors_are_unbiased_for_the_spread_of_difficulties_and_the_groups_noise():
    """Exact expectation over every draw of c ~ Binomial(n, p) for three problems."""
    p, n, G = np.array([0.1, 0.5, 0.8]), 4, 3
    spread, group = 0.0, 0.0
    for draw in itertools.product(range(n + 1), repeat=len(p)):
        chance = np.prod([math.comb(n, c) * q**c * (1 - q) ** (n - c) for c, q in zip(draw, p)])
        every, mine = zs.baseline_errors(list(draw), n, G)
        spread, group = spread + chance * every, group + chance * mine
    assert spread == pytest.approx(np.var(p, ddof=1)) and group == pytest.approx(np.mean(p * (1 - p)) / (G - 1))


@pytest.mark.parametrize("correct,holds", [
    ([[0, 8, 1, 7], [0, 8, 0, 8], [1, 7, 0, 8]], True),  # hard and easy problems: one baseline for all misses both
    ([[4, 4, 4, 4], [4, 5, 4, 3], [3, 4, 4, 5]], False),  # every problem at 1/2: the mean reward is the best guess
])
def test_the_difficulty_claim_compares_the_group_baseline_with_one_for_all(correct, holds):
    claim = zs.difficulty_claim(RL, ARGS, made_seeds(counts(default=correct, after=correct)), "after GRPO")
    assert claim["holds"] is holds and "difficulty for free" in claim["claim"] and "(here: after GRPO)" in claim["claim"]
    assert "the mean of the other 3 in a group of G = 4" in claim["measured"]


def test_each_policy_gets_its_own_difficulty_verdict():
    """Hard and easy problems at the cold start, every problem at 1/2 after GRPO: one claim says
    yes, the other no, each from its own policy's counts."""
    seeds = made_seeds(counts(default=[[0, 8, 1, 7], [0, 8, 0, 8], [1, 7, 0, 8]],
                              after=[[4, 4, 4, 4], [4, 5, 4, 3], [3, 4, 4, 5]]))
    cold, after = (zs.difficulty_claim(RL, ARGS, seeds, policy) for policy in zs.WHEN)
    assert (cold["holds"], after["holds"]) == (True, False)
    assert "(here: at the cold start)" in cold["claim"] and "success rate at the cold start" in cold["measured"]


def test_check_claims_gives_every_claim_once():
    seeds = with_temperatures(made_seeds(counts(), bins={"cold start": BINS, "after GRPO": BINS}),
                              {0.25: (0.9, 0.2), 1.0: (0.9, 0.5), 2.0: (0.5, 0.9)})
    claims = zs.check_claims(RL, ARGS, seeds)
    assert len(claims) == 18 and len({c["claim"] for c in claims}) == 18
    assert [c["source"] for c in by_claim(claims, "medium-difficulty")] == ["over-long-generations"] * 4
    assert [c["source"] for c in by_claim(claims, "difficulty for free")] == ["whole-game §5"] * 2


# ------------------------------------------------------------------ CLI and smoke run
def test_cli_rejects_a_group_larger_than_the_samples(cli_error):
    assert "--group-sizes must be in 2..--samples" in cli_error("studies.05_zero_spread", "--group-sizes", "2,32")


@pytest.mark.parametrize("temperatures", ["0.5,2", "0,1"])
def test_cli_rejects_temperatures_without_1_or_not_positive(cli_error, temperatures):
    assert "--temperatures must be positive and hold 1" in cli_error("studies.05_zero_spread", "--temperatures",
                                                                      temperatures)


def test_the_zero_spread_study_runs_with_smoke(tmp_path, read_results):
    out = tmp_path / "05_zero_spread"
    run = subprocess.run([sys.executable, "studies/05_zero_spread.py", "--smoke", "--cache", str(tmp_path / "cache"),
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    data = read_results(out / "results.json")
    table = data["metrics"].pop("tables")["zero_spread"]
    assert len(data["claims"]) == 16 and len(data["seeds"]) == 2  # one G: no G = 8 against 4
    assert set(data["zero_spread"]) == set(zs.POLICIES)
    assert table["rows"] == [[name, int(steps), row["pass@1"], f"{row['2']:.0%}"]
                             for name, strata in data["zero_spread"].items() for steps, row in strata.items()]
    assert (out / "zero_spread.png").stat().st_size > 1000


def with_temperatures(seeds: list[dict], levels: dict) -> list[dict]:
    """Each seed's cold-start samples at each temperature: {T: (well-formed, distinct)}, with a small spread."""
    return [s | {"temperature": {T: {"well_formed": w + 0.01 * i, "distinct": d - 0.01 * i} for T, (w, d) in levels.items()}}
            for i, s in enumerate(seeds)]


@pytest.mark.parametrize("levels,holds", [
    ({0.25: (0.95, 0.1), 1.0: (0.95, 0.5), 2.0: (0.4, 0.9)}, (True, True)),  # incoherent when hot, narrow when cold
    ({0.25: (0.95, 0.1), 1.0: (0.95, 0.5), 2.0: (0.95, 0.9)}, (None, True)),  # hot but as well-formed: cannot tell
    ({0.25: (0.95, 0.8), 1.0: (0.95, 0.5), 2.0: (0.4, 0.9)}, (True, False)),  # cold but more distinct
])
def test_the_entropy_claims_read_each_end_against_temperature_1(levels, holds):
    args = zs.Args(temperatures="0.25,1,2", samples=8, group_sizes="2,4,8")
    hot, cold = zs.entropy_claims(args, with_temperatures(made_seeds(counts()), levels))
    assert (hot["holds"], cold["holds"]) == holds
    assert "T = 1 minus T = 2" in hot["measured"] and "T = 1 minus T = 0.25" in cold["measured"]
    assert "incoherent" in hot["claim"] and "narrows" in cold["claim"] and "1 of 8" in cold["claim"]
    assert "T = 0.25: well-formed 0.960, distinct" in hot["measured"]


def test_each_entropy_claim_needs_a_temperature_on_its_side_of_1():
    args = zs.Args(temperatures="1,2", samples=8, group_sizes="2,4,8")
    hot, cold = zs.entropy_claims(args, with_temperatures(made_seeds(counts()), {1.0: (0.9, 0.5), 2.0: (0.4, 0.9)}))
    assert hot["holds"] is True and "premise not met" not in hot["measured"]
    assert cold["holds"] is None and "premise not met: --temperatures needs one below 1" in cold["measured"]


@pytest.mark.parametrize("correct,bin_correct,holds", [
    ([0, 8, 4, 3, 5, 4], [0, 3, 1, 2, 1, 2], True),  # the extremes have no spread, the rest do
    ([4, 4, 0, 8, 0, 8], [0, 3, 1, 2, 1, 2], False),  # the extremes have the spread, the rest none
    ([0, 8, 4, 3, 5, 4], [1, 2, 1, 2, 1, 2], None),  # no prompt is impossible or easy: premise not met
])
def test_the_extremes_claim_bins_by_none_or_all_right_and_reads_both_halves(correct, bin_correct, holds):
    seeds = [{"cold start": {"correct": [c + (i and k == 2) for k, c in enumerate(correct)],
                             "bin_correct": bin_correct}} for i in range(3)]
    claim = zs.extremes_claim(RL, ARGS, seeds, "cold start")
    assert claim["holds"] is holds
    assert ("premise not met" in claim["measured"]) is (holds is None)
    found = zs.extremes(seeds[0]["cold start"], ARGS, 4)
    assert found["extreme"]["problems"] == sum(b in (0, 3) for b in bin_correct)
