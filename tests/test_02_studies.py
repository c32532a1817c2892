"""02's studies: the dilemmas, the essays' arithmetic and Diagram 4; the tabular actor-critic; and a
smoke run of each."""

import importlib
import math

import numpy as np
import pytest
import torch
from test_02_gae import DISTRACTOR, P_DISTRACTOR, exact_values, naive_gae, uniform_episodes

import common

gae_script = importlib.import_module("02_gae")
dilemma_script = importlib.import_module("studies.02_dilemmas")
learning_script = importlib.import_module("studies.02_learning")


def dilemma_args(**changes):
    return dilemma_script.Args(**{"distractor_prob": P_DISTRACTOR, "distractor": DISTRACTOR, **changes})


def learning_args(**changes):
    return learning_script.Args(**{"distractor_prob": P_DISTRACTOR, "distractor": DISTRACTOR, **changes})


@pytest.mark.parametrize("script,flag,value,message", [
    ("studies.02_learning", "--actor-lr", "-1", "--actor-lr must be positive"),
    ("studies.02_learning", "--success", "1", "--success must be in (0, 1)"),
    ("studies.02_dilemmas", "--gae-lambda", "2", "--gae-lambda must be in [0, 1]"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, script, flag, value, message):
    assert message in cli_error(script, flag, value)


# --------------------------------------------------------------------------------------------
# The dilemmas and Diagram 4
# --------------------------------------------------------------------------------------------
def test_discount_dilemma_credit_is_gamma_to_the_delay_and_dilution_is_measured_on_the_return():
    args = dilemma_args(lengths="2,5", episodes=400, seed=1, seeds=3)
    got = dilemma_script.dilemmas(args, "cpu")
    assert got["lengths"] == [2, 5]
    assert list(got["relative_credit"]) == list(dilemma_script.DISCOUNTS)
    for gamma, credit in got["relative_credit"].items():
        # the door's 1 is L + 1 steps after the key step
        np.testing.assert_allclose(credit, [gamma ** (L + 1) for L in (2, 5)], rtol=1e-5)
    for i, L in enumerate((2, 5)):
        _, episode = uniform_episodes(args, L, args.episodes)
        R, took = episode["rewards"].sum(0), episode["actions"][0] == 1
        signal = float(R[took].mean() - R[~took].mean())
        variance = float((R[took].var() + R[~took].var()) / 2)
        assert math.isclose(got["key_var"][i], variance, rel_tol=1e-5)
        assert math.isclose(got["snr"][i], signal**2 / variance, rel_tol=1e-4)
        # and it is what it means: the distractors' variance L p (1 - p) d², a signal near 1
        assert math.isclose(variance, L * P_DISTRACTOR * (1 - P_DISTRACTOR) * DISTRACTOR**2, rel_tol=0.35)
        assert math.isclose(signal, 1.0, abs_tol=0.1)
        # and on each of the seeds: the episodes in --seeds consecutive batches
        assert len(got["seeds_var"][i]) == len(got["seeds_snr"][i]) == args.seeds
        for k, part in enumerate(torch.arange(args.episodes).chunk(args.seeds)):
            r, t = R[part], took[part]
            seed_var = float((r[t].var() + r[~t].var()) / 2)
            assert math.isclose(got["seeds_var"][i][k], seed_var, rel_tol=1e-5)
            assert math.isclose(got["seeds_snr"][i][k], float(r[t].mean() - r[~t].mean()) ** 2 / seed_var, rel_tol=1e-4)



def test_lambda_dial_is_02_gaes_study_at_the_longest_length_one_row_per_seed():
    args = dilemma_args(lengths="2,4", episodes=300, seeds=3, seed=5, noise=0.2)
    got = dilemma_script.lambda_dial(args, "cpu")
    settings = gae_script.Args(seed=5, lengths="4", distractor_prob=P_DISTRACTOR, distractor=DISTRACTOR, noise=0.2,
                               episodes=300, critics=1, seeds=3, nsteps="1")
    seeds = gae_script.exact_truth_study(settings, "cpu")[4]["seeds"]
    assert got["L"] == 4 and got["lambdas"] == settings.lambda_list and got["value_noise"] == settings.value_noise
    assert len(got["key_var"]) == len(got["key_bias2_net"]) == 3
    for metric in ("key_bias2_net", "key_var"):
        assert got[metric] == [[seed[gae_script.gae_name(lam)][metric] for lam in settings.lambda_list]
                               for seed in seeds]


@pytest.mark.parametrize("lengths,L", [("3,5", 5), ("4", 4)])
def test_diagram4_draws_the_first_key_taking_trajectory_of_the_second_length(lengths, L):
    args = dilemma_args(lengths=lengths, gae_lambda=0.8, seed=2, noise=0.1)  # no two trajectories alike
    got = dilemma_script.diagram4(args, "cpu")
    env, episode = uniform_episodes(args, L, 64)
    n = int(torch.nonzero(episode["actions"][0] == 1)[0])
    V = exact_values(env).float()
    r, ends = episode["rewards"][:, n:n + 1], episode["ends"][:, n:n + 1]
    v, v_next = V[episode["states"][:, n:n + 1]], V[episode["next_states"][:, n:n + 1]]
    flat, per_step = got.values()
    assert "flat" in list(got)[0] and "λ=0.8" in list(got)[1]
    start_value = 0.5 + L * P_DISTRACTOR * DISTRACTOR  # V(s_0) under the uniform policy
    np.testing.assert_allclose(flat, [float(r.sum()) - start_value] * (L + 2), rtol=1e-5)
    np.testing.assert_allclose(per_step, naive_gae(r, v, v_next, ends, 1.0, 0.8)[:, 0].tolist(), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# The actor-critic: a recorded spy of every update, replayed by hand
# --------------------------------------------------------------------------------------------
def record_actor_critic(monkeypatch, args, L, lam, seed):
    """Run actor_critic, recording for each update the policy that played, the episodes, and
    what the advantage estimator was given."""
    updates = []
    play, estimate = common.play_episodes, gae_script.gae

    def recording_play(env, policy):
        episode = play(env, policy)
        updates.append({"env": env, "policy": policy.detach().clone(), "episode": episode})
        return episode

    def recording_gae(rewards, values, next_values, ends, gamma, lam):
        updates[-1]["gae"] = {"rewards": rewards, "values": values.clone(), "next_values": next_values.clone(),
                              "ends": ends, "gamma": gamma, "lam": lam}
        return estimate(rewards, values, next_values, ends, gamma, lam)

    monkeypatch.setattr(common, "play_episodes", recording_play)  # the study plays through common
    monkeypatch.setattr(gae_script, "gae", recording_gae)  # and estimates with the chapter's GAE
    return learning_script.actor_critic(args, L, lam, seed, "cpu"), updates


def replay_by_hand(args, lam, updates):
    """The tabular actor-critic, step by step in float64 on the recorded episodes. Checks that each
    update's policy and critic are the ones the previous updates lead to; returns π(take | key room)
    after each update."""
    num_states = updates[0]["policy"].shape[0]
    logits = torch.zeros(num_states, 2, dtype=torch.float64)
    V = torch.zeros(num_states, dtype=torch.float64)
    take_probs = []
    for k, update in enumerate(updates):
        episode, seen = update["episode"], update["gae"]
        s, a, r, ends = episode["states"], episode["actions"], episode["rewards"].double(), episode["ends"]
        policy = torch.softmax(logits, 1)
        torch.testing.assert_close(update["policy"].double(), policy, atol=1e-5, rtol=0, msg=f"policy, update {k}")
        torch.testing.assert_close(seen["values"].double(), V[s], atol=1e-5, rtol=0, msg=f"V(s_t), update {k}")
        torch.testing.assert_close(seen["next_values"].double(), V[episode["next_states"]], atol=1e-5, rtol=0)
        assert (seen["gamma"], seen["lam"]) == (1.0, lam) and seen["rewards"] is episode["rewards"]
        assert seen["ends"] is episode["ends"]
        advantages = naive_gae(r, V[s], V[episode["next_states"]], ends, 1.0, lam)
        T, N = s.shape
        step_logits, step_V = torch.zeros_like(logits), torch.zeros_like(V)
        visits = torch.zeros_like(V)
        for t in range(T):
            for n in range(N):
                state, action, psi = s[t, n], a[t, n], advantages[t, n]
                # ascent on Σ_t Ψ_t log π(a_t | s_t), averaged over the batch's episodes
                step_logits[state] += psi * (torch.nn.functional.one_hot(action, 2) - policy[state]) / N
                step_V[state] += psi  # the critic moves toward Ψ + V, the λ-return
                visits[state] += 1
        logits += args.actor_lr * step_logits
        V += args.critic_lr * step_V / visits.clamp(min=1)
        take_probs.append(float(torch.softmax(logits[0], 0)[1]))
    return take_probs


@pytest.mark.parametrize("lam", [0.5, 1.0])
def test_actor_critic_updates_actor_and_critic_as_the_equations_say_and_stops_when_solved(monkeypatch, lam):
    args = learning_args(batch=8, max_episodes=400, actor_lr=0.5, critic_lr=0.3, success=0.7, noise=0.1)
    result, updates = record_actor_critic(monkeypatch, args, 3, lam, seed=6)
    take_probs = replay_by_hand(args, lam, updates)
    assert 3 <= len(updates) < 50  # it learns, after a few updates
    assert all(p < args.success for p in take_probs[:-1]) and take_probs[-1] >= args.success
    assert result == len(updates) * args.batch


def test_actor_critic_plays_its_own_seeded_world_and_returns_the_budget_when_unsolved(monkeypatch):
    args = learning_args(batch=6, max_episodes=24, actor_lr=0.1, critic_lr=0.5, success=0.99, seed=0)
    result, updates = record_actor_critic(monkeypatch, args, 4, 0.0, seed=9)
    replay_by_hand(args, 0.0, updates)
    assert result == args.max_episodes and len(updates) == args.max_episodes // args.batch
    env = updates[0]["env"]
    assert (env.corridor, env.num_envs, env.distractor_prob, env.distractor) == (4, 6, P_DISTRACTOR, DISTRACTOR)
    _, first = uniform_episodes(learning_args(seed=9), 4, 6)  # seeded with the run's seed, not args.seed
    for key in first:
        assert torch.equal(updates[0]["episode"][key], first[key]), key


def test_actor_critic_counts_as_solved_on_reaching_the_success_level_not_only_on_passing_it(monkeypatch):
    """TD(0)'s first update cannot move the key room's logits: V = 0 and the key step pays 0, so
    every δ_0 is 0 and π(take | key room) stays exactly 1/2, which reaches --success 0.5."""
    args = learning_args(batch=4, max_episodes=40, success=0.5)
    result, updates = record_actor_critic(monkeypatch, args, 2, 0.0, seed=1)
    assert replay_by_hand(args, 0.0, updates) == [0.5] and result == args.batch


def test_actor_critic_started_exactly_bootstraps_from_v_pi_of_the_uniform_policy(monkeypatch):
    args = learning_args(batch=6, max_episodes=12, seed=0)
    _, updates = record_actor_critic_from_exact(monkeypatch, args)
    env, episode, seen = updates[0]["env"], updates[0]["episode"], updates[0]["gae"]
    V = exact_values(env).float()
    torch.testing.assert_close(seen["values"], V[episode["states"]], atol=1e-5, rtol=0)
    torch.testing.assert_close(seen["next_values"], V[episode["next_states"]], atol=1e-5, rtol=0)
    assert torch.equal(learning_script.start_values(env, "zero", 0), torch.zeros(env.num_states + 1))


def test_the_shuffled_start_permutes_v_pi_over_the_states_by_its_seed_and_keeps_the_terminal_value():
    env = learning_script.gae.make_env(learning_args(), 6, 4, 0, "cpu")
    exact = learning_script.start_values(env, "exact", 3)
    shuffled = learning_script.start_values(env, "shuffled", 3)
    n = env.num_states
    assert torch.equal(shuffled[n:], exact[n:]) and not torch.equal(shuffled, exact)
    assert torch.equal(torch.sort(shuffled[:n]).values, torch.sort(exact[:n]).values)
    assert torch.equal(learning_script.start_values(env, "shuffled", 3), shuffled)
    assert not torch.equal(learning_script.start_values(env, "shuffled", 4), shuffled)


def record_actor_critic_from_exact(monkeypatch, args):
    """record_actor_critic's spy on TD(0) at L = 4, seed 9, its critic started at the exact V^π."""
    run = learning_script.actor_critic
    monkeypatch.setattr(learning_script, "actor_critic", lambda *a: run(*a, start="exact"))
    return record_actor_critic(monkeypatch, args, 4, 0.0, seed=9)


def test_start_study_runs_td0_from_v_pi_and_from_v_pi_shuffled_for_every_length_and_seed(monkeypatch):
    def fake_actor_critic(args, L, lam, seed, device, start="zero"):
        return (L, lam, seed, start)

    monkeypatch.setattr(learning_script, "actor_critic", fake_actor_critic)
    got = learning_script.start_study(learning_args(lengths="3,7", learn_seeds=2, seed=5), "cpu")
    assert got == {start: {L: [(L, 0.0, 5, start), (L, 0.0, 6, start)] for L in (3, 7)}
                   for start in ("exact", "shuffled")}


def test_learning_study_runs_each_learner_at_its_lambda_for_every_length_and_seed(monkeypatch):
    def fake_actor_critic(args, L, lam, seed, device):
        return (L, lam, seed)

    monkeypatch.setattr(learning_script, "actor_critic", fake_actor_critic)
    args = learning_args(lengths="3,7", learn_seeds=2, gae_lambda=0.8, seed=5)
    got = learning_script.learning_study(args, "cpu")
    assert got == {name: {L: [(L, lam, 5), (L, lam, 6)] for L in (3, 7)}
                   for name, lam in (("MC (λ=1)", 1.0), ("GAE (λ=0.8)", 0.8), ("TD(0) (λ=0)", 0.0))}
    assert list(got) == ["MC (λ=1)", "GAE (λ=0.8)", "TD(0) (λ=0)"]


# --------------------------------------------------------------------------------------------
# The claim checkers: every verdict computed from the numbers, both ways
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,stated,holds", [(0.00657, "0.0066", True), (0.00649, "0.0066", False),
                                               (4.32e-5, "0.00004", True), (3.4e-5, "0.00004", False),
                                               (0.368, "0.00043", False)])
def test_an_essays_figure_is_met_to_the_precision_it_is_written_with(value, stated, holds):
    assert dilemma_script.as_stated(value, stated) is holds


def test_claims_the_discount_arithmetic_is_checked_and_each_claim_names_its_source():
    claims = dilemma_script.arithmetic_claims()
    assert [c["holds"] for c in claims] == [True, False, True, True, True, True]  # 0.999^999 is 0.37, not 0.00043
    assert [c["source"] for c in claims] == ["survey §2.1", "survey §3", "over-long-generations",
                                             "whole-game §3 (and App. A)", "whole-game §3",
                                             "over-long-generations (Why)"]
    assert "0.99^500" in claims[0]["claim"] and "0.99^500 = 0.0066" in claims[0]["measured"]
    assert "7,748 steps at γ = 0.999" in claims[1]["measured"] and "771 at γ = 0.99" in claims[1]["measured"]
    assert "[1.0, 1.0, 1.0, 1.0, 1.0]" in claims[3]["measured"]
    assert "[-1.0, -1.0, -1.0, -1.0, -1.0]" in claims[5]["measured"]  # a failure's -1 on every step


def test_decay_steps_inverts_the_discount():
    for gamma, fraction in ((0.999, 0.00043), (0.99, 0.0066), (0.5, 0.25)):
        assert math.isclose(gamma ** dilemma_script.decay_steps(gamma, fraction), fraction, rel_tol=1e-9)
    assert dilemma_script.decay_steps(0.5, 0.25) == pytest.approx(2.0)
    assert round(dilemma_script.decay_steps(0.999, 0.00043)) == 7748  # the essay's number needs 7,748 steps


def test_toy_reward_to_go_sums_the_rest_of_the_episode():
    assert dilemma_script.toy_reward_to_go([0, 0, 0, 0, 1]) == [1.0] * 5
    assert dilemma_script.toy_reward_to_go([0, 1, 0, 2]) == [3.0, 3.0, 2.0, 2.0]
    assert dilemma_script.toy_reward_to_go([0.5]) == [0.5]


def fake_dilemma(lengths=(5, 20, 80), credit_factor=1.0, credit_at_one=1.0, var_power=1.0, snr=None,
                 spread=(0.97, 1.0, 1.03)):
    """A dilemma result as `dilemmas` returns it, with each claim's ingredient adjustable: the
    seeds' values are the whole batch's times each factor of `spread`."""
    lengths = list(lengths)
    credit = {g: [credit_factor * g ** (L + 1) for L in lengths] for g in dilemma_script.DISCOUNTS if g < 1}
    credit[1.0] = [credit_at_one] * len(lengths)
    var = [0.01 * L**var_power for L in lengths]
    snr = snr if snr is not None else [1 / v for v in var]
    return {"lengths": lengths, "relative_credit": credit, "key_var": var, "snr": snr,
            "seeds_var": [[v * f for f in spread] for v in var], "seeds_snr": [[r * f for f in spread] for r in snr]}


@pytest.mark.parametrize("dilemma,verdicts", [
    (fake_dilemma(), [True, True, True, True]),
    (fake_dilemma(credit_factor=1.01), [False, True, True, True]),  # credit off γ^(L+1) by 1%
    (fake_dilemma(credit_at_one=0.9), [False, False, True, True]),  # γ = 1 loses signal (and is not 1^d)
    (fake_dilemma(var_power=-1.0), [True, True, False, False]),  # variance falls
    (fake_dilemma(snr=[2.0, 3.0, 1.0]), [True, True, False, True]),  # the signal does not wash out steadily
    (dict(fake_dilemma(), seeds_var=[[0.05, 0.07, 0.03], [0.06, 0.04, 0.065], [0.8, 0.78, 0.82]]),
     [True, True, None, True]),  # one step's rise within the seeds' spread: the dilution cannot tell
    (dict(fake_dilemma(), seeds_var=[[0.05, 0.07, 0.03], [0.02, 0.01, 0.065], [0.8, 0.78, 0.82]]),
     [True, True, None, True]),  # one step's mean falls, but its interval reaches above 0: cannot tell
    (dict(fake_dilemma(), seeds_var=[[0.05, 0.07, 0.03], [0.01, 0.02, 0.005], [0.8, 0.78, 0.82]]),
     [True, True, False, True]),  # one step falls on every seed: the interval lies below 0
    (fake_dilemma(spread=(1.0,)), [True, True, None, None]),  # one seed: no interval
    (fake_dilemma(lengths=(5,)), [True, True, None, None]),  # one length: no trend
])
def test_dilemma_claims_verdicts_follow_the_numbers(dilemma, verdicts):
    claims = dilemma_script.dilemma_claims(dilemma)
    assert [c["holds"] for c in claims] == verdicts
    assert [c["source"] for c in claims] == ["survey §2.1", "survey §3", "survey §3", "survey §5"]


def test_dilemma_claims_report_the_means_the_steps_and_the_slope_over_the_seeds():
    claims = dilemma_script.dilemma_claims(fake_dilemma())
    assert "3 seeds" in claims[2]["measured"] and "5: 0.05 and 20; 20: 0.2 and 5; 80: 0.8 and 1.25" in claims[2]["measured"]
    rise = np.subtract([0.2 * f for f in (0.97, 1.0, 1.03)], [0.05 * f for f in (0.97, 1.0, 1.03)])
    mean, low, high = common.mean_interval(rise)
    assert f"variance's rise {mean:+.3g} [{low:+.3g}, {high:+.3g}];" in claims[2]["measured"]
    assert "per seed, mean [95% interval] +1 [+1, +1]" in claims[3]["measured"]  # every seed's slope is 1


def fake_dial(bias2=(0.05, 0.01, 0.004, 0.0), var=(0.0, 0.01, 0.1, 0.8), seeds=4, lambdas=(0, 0.5, 0.9, 1)):
    """A λ dial as `lambda_dial` returns it: each seed the same curves, a little noise added."""
    noise = [[0.0001 * ((k + i) % 3 - 1) for i in range(len(lambdas))] for k in range(seeds)]
    return {"L": 80, "lambdas": list(lambdas), "value_noise": 0.2,
            "key_bias2_net": [list(np.add(bias2, n)) for n in noise], "key_var": [list(np.add(var, n)) for n in noise]}


@pytest.mark.parametrize("dial,verdicts", [
    (fake_dial(), [True, True]),
    (fake_dial(bias2=(0.0, 0.004, 0.01, 0.05)), [False, False]),  # bias² rises with λ
    (fake_dial(var=(0.8, 0.1, 0.01, 0.0)), [True, False]),  # variance falls with λ
    (fake_dial(seeds=1), [None, None]),  # one seed: no interval
    (dict(fake_dial(), key_bias2_net=[[4, 3, 2, 1], [1, 2, 3, 4], [4, 3, 2, 1], [4, 3, 1, 2]]),
     [None, None]),  # one seed's bias² rises: a falling mean within the seeds' spread
    (fake_dial(lambdas=(0, 1), bias2=(0.05, 0.0), var=(0.0, 0.8)), [None, None]),  # two λ: no trend
])
def test_dial_claims_decide_on_the_rank_trends_over_the_seeds(dial, verdicts):
    claims = dilemma_script.dial_claims(dial)
    assert [c["holds"] for c in claims] == verdicts
    assert [c["source"] for c in claims] == ["survey §4.1.1", "whole-game §5"]


def test_rank_trend_is_spearmans_correlation():
    assert dilemma_script.rank_trend([0, 0.5, 0.9, 1], [5.0, 1.0, 0.3, 0.2]) == pytest.approx(-1.0)
    assert dilemma_script.rank_trend([0, 0.5, 0.9, 1], [0.0, 1.0, 5.0, 9.0]) == pytest.approx(1.0)
    assert dilemma_script.rank_trend([1, 2, 3, 4], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(0.8)


def fake_learning(td=(1536, 7536), mc=(1008, 992), gae=(1056, 1808), spread=(0.95, 1.0, 1.05)):
    """Episodes to solve per learner at L = 5 and 80, one per seed: the pair times each factor of `spread`
    (at the longest L only, so that each seed's growth differs)."""
    return {name: {5: [a] * len(spread), 80: [min(b * f, 20_000) for f in spread]}
            for name, (a, b) in (("MC (λ=1)", mc), ("GAE (λ=0.9)", gae), ("TD(0) (λ=0)", td))}


@pytest.mark.parametrize("learning,holds", [
    (fake_learning(), True),  # TD 4.9x, MC 1.0x on every seed
    (fake_learning(td=(1000, 900)), False),  # TD's cost does not grow: its growth is below MC's
    (fake_learning(td=(1000, 1000), mc=(1000, 1000), spread=(0.7, 1.0, 1.4)), None),  # within the spread
    (fake_learning(spread=(1.0,)), None),  # one seed: no interval
    (fake_learning(td=(1000, 20_000)), True),  # never solved at the longest L: a lower bound, still above
    (fake_learning(td=(18_000, 20_000), mc=(1000, 1100)), None),  # TD censored, no wider than MC: cannot tell
    (fake_learning(td=(20_000, 20_000)), None),  # TD never solved: nothing measured
    (fake_learning(mc=(1000, 20_000)), False),  # MC censored: a lower bound, already above TD's growth
    ({"MC (λ=1)": {5: [1000, 1000, 10_000], 80: [1100, 1200, 20_000]}, "TD(0) (λ=0)": {5: [1000] * 3, 80: [
        5000, 5100, 5050]}}, None),  # TD's growth ahead on every seed, but MC's censored on one: cannot tell
])
def test_learning_claim_decides_td_growth_minus_mc_growth_over_the_seeds(learning, holds):
    claims = learning_script.learning_claims(learning, [5, 80], budget=20_000)
    assert len(claims) == 1 and claims[0]["holds"] is holds and claims[0]["source"] == "survey §2.1"


def test_learning_claim_reports_growth_the_interval_and_marks_a_censored_one():
    measured = learning_script.learning_claims(fake_learning(td=(1000, 20_000)), [5, 80], 20_000)[0]["measured"]
    assert "TD(0) (λ=0) 1,000 → 20,000 (≥ 20.0x)" in measured and "(a run at the budget: censored)" in measured
    assert "MC (λ=1) 1,008 → 992 (1.0x)" in measured
    gaps = np.array([19_000 / 1000, 20_000 / 1000, 20_000 / 1000]) - np.array([942.4, 992, 1041.6]) / 1008
    mean, low, high = common.mean_interval(gaps)
    assert f"mean [95% interval over 3 seeds]: {mean:+.3g} [{low:+.3g}, {high:+.3g}]" in measured
    assert learning_script.learning_claims(fake_learning(), [5], 20_000)[0]["holds"] is None


def test_dilemma_table_puts_each_lengths_credit_per_discount_beside_the_dilution():
    dilemma = {"lengths": [5, 80], "relative_credit": {0.9: [0.5, 0.1], 0.99: [0.9, 0.4], 0.999: [0.99, 0.9],
                                                        1.0: [1.0, 1.0]}, "key_var": [0.05, 0.8], "snr": [20.0, 1.3]}
    table = dilemma_script.dilemma_table(dilemma)
    assert table["header"] == ["L", "credit γ=0.9", "credit γ=0.99", "credit γ=0.999", "credit γ=1", "Var R (γ=1)",
                               "signal²/Var"]
    assert table["rows"] == [[5, 0.5, 0.9, 0.99, 1.0, 0.05, 20.0], [80, 0.1, 0.4, 0.9, 1.0, 0.8, 1.3]]


def test_learning_table_gives_each_learners_median_and_the_seeds_range():
    learning = {"MC (λ=1)": {5: [1104, 1008, 976], 80: [992, 992, 992]}, "TD(0) (λ=0)": {5: [1584, 1520, 1488],
                                                                                       80: [7616, 7440, 7536]}}
    table = learning_script.learning_table(learning, [5, 80])
    assert table["header"] == ["L", "MC (λ=1)", "TD(0) (λ=0)"]
    assert table["rows"] == [[5, "1,008 (976-1,104)", "1,520 (1,488-1,584)"], [80, "992", "7,536 (7,440-7,616)"]]


# --------------------------------------------------------------------------------------------
# The whole runs
# --------------------------------------------------------------------------------------------
def test_dilemmas_smoke_run_writes_results_and_figures(tmp_path, read_results):
    args = dilemma_script.Args(smoke=True, device="cpu", out=str(tmp_path))
    result = dilemma_script.main(args)
    data = read_results(tmp_path / "results.json")
    for name in ("dilemmas.png", "diagram4.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"]) and len(data["claims"]) == 12
    metrics = data["metrics"]
    table = metrics.pop("tables")["dilemmas"]
    assert all(np.isfinite(v) for v in metrics.values())
    lengths = common.apply_smoke(args).length_list
    assert [row[0] for row in table["rows"]] == lengths
    assert [row[2] for row in table["rows"]] == [metrics[f"L{L}_credit_gamma0.99"] for L in lengths]
    assert [row[5] for row in table["rows"]] == [metrics[f"L{L}_key_return_var_gamma1"] for L in lengths]
    for L in lengths:
        # the discount dilemma, exactly: the door's credit reaches the key as γ^(L+1)
        assert math.isclose(metrics[f"L{L}_credit_gamma0.99"], 0.99 ** (L + 1), rel_tol=1e-5)
    # and the dilution dilemma: the return's variance at the key grows with the corridor
    assert metrics[f"L{max(lengths)}_key_return_var_gamma1"] > metrics[f"L{min(lengths)}_key_return_var_gamma1"]


def test_learning_smoke_run_writes_results_and_figures(tmp_path, read_results):
    args = learning_script.Args(smoke=True, device="cpu", out=str(tmp_path))
    result = learning_script.main(args)
    data = read_results(tmp_path / "results.json")
    assert (tmp_path / "episodes_to_solve.png").stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"]) and len(data["claims"]) == 6
    assert [c["source"] for c in data["claims"]] == ["survey §2.1", "survey §2.1", "survey §2.3", "survey §2.3", "survey §2.3",
                                                        "survey §5 (RUDDER paper's theorem)"]
    metrics = data["metrics"]
    table = metrics.pop("tables")["episodes_to_solve"]
    assert all(np.isfinite(v) for v in metrics.values())
    smoke = common.apply_smoke(args)
    assert table["header"] == ["L", "MC (λ=1)", "GAE (λ=0.9)", "TD(0) (λ=0)"]
    assert [row[0] for row in table["rows"]] == smoke.length_list
    for L in smoke.length_list:
        for name in ("MC (λ=1)", "TD(0) (λ=0)"):
            solved = metrics[f"L{L}_episodes_to_solve[{name}]"]
            assert solved % smoke.batch == 0 and smoke.batch <= solved <= smoke.max_episodes


def test_policy_evaluation_starts_at_the_exact_value_plus_a_small_error():
    """No update (fewer episodes than a batch): the key room's error is the small error it started with."""
    args = learning_script.Args(batch=64, eval_episodes=32, initial_error=0.5)
    first = torch.randn(8, generator=torch.Generator().manual_seed(3))[0].item()
    assert learning_script.evaluation_error(args, 2, 0.0, 3, "cpu") == pytest.approx((0.5 * first) ** 2)
    exact = learning_script.Args(batch=64, eval_episodes=32, initial_error=0.0)
    assert learning_script.evaluation_error(exact, 2, 1.0, 3, "cpu") == 0.0


def fake_errors(td=(0.01, 5.0), exact=(0.01, 0.02), mc=(0.01, 0.02), spread=(1.0, 1.1, 0.9)):
    """Policy evaluation's squared errors at L = 5 and 80, one per seed: TD(0) from V^π plus the small
    error, from V^π exactly, and MC; each pair times each factor of `spread`."""
    return {name: {5: [a * k for k in spread], 80: [b * k for k in spread]}
            for name, (a, b) in (("MC (λ=1)", mc), ("TD(0) (λ=0)", td), (learning_script.TD_EXACT, exact))}


def test_evaluation_study_starts_one_td0_arm_exactly_on_the_same_seeds(monkeypatch):
    monkeypatch.setattr(learning_script, "evaluation_error",
                        lambda args, L, lam, seed, device: (args.initial_error, L, lam, seed))
    got = learning_script.evaluation_study(learning_args(lengths="3,7", learn_seeds=2, seed=5), "cpu")
    assert got == {name: {L: [(error, L, lam, 5), (error, L, lam, 6)] for L in (3, 7)} for name, error, lam in (
        ("MC (λ=1)", 0.1, 1.0), ("TD(0) (λ=0)", 0.1, 0.0), (learning_script.TD_EXACT, 0.0, 0.0))}


@pytest.mark.parametrize("errors,holds", [
    (fake_errors(), True),  # the small errors' part of TD(0)'s error grows with L
    (fake_errors(td=(0.01, 5.0), exact=(0.0, 5.0)), False),  # the growth is all TD(0)'s own noise: the part shrinks
    (fake_errors(td=(0.02, 0.03), exact=(0.01, 0.02)), None),  # the part stays the same: no named size ruled out
    (fake_errors(td=(0.01, 0.5), mc=(0.01, 5.0)), True),  # MC's faster growth is context, not the verdict
])
def test_the_compounding_claim_reads_the_growth_of_what_the_small_errors_add_to_tds_error(errors, holds):
    claim = learning_script.compounding_claim(errors, [5, 80], 800)
    assert claim["holds"] is holds and "after 800 episodes" in claim["measured"]


def test_the_compounding_claim_reports_each_arm_and_the_small_errors_part():
    measured = learning_script.compounding_claim(fake_errors(), [5, 80], 800)["measured"]
    mean, low, high = common.mean_interval(np.multiply([4.98], [1.0, 1.1, 0.9]))
    assert "MC (λ=1) 0.01 → 0.02" in measured and "TD(0) (λ=0) 0.01 → 5" in measured
    assert "(TD(0) minus TD(0) from V^π exactly) 0 → 4.98" in measured
    assert f"over 3 seeds]: {mean:+.3g} [{low:+.3g}, {high:+.3g}]" in measured


def fake_starts(zero=(1536, 7536), exact=(1000, 1100), shuffled=(1000, 1100), spread=(0.95, 1.0, 1.05)):
    """TD(0)'s episodes to solve at L = 5 and 80 from V = 0, and {start: ...} from V^π and V^π
    shuffled, one per seed."""
    by_L = [{5: [a * k for k in spread], 80: [min(b * k, 20_000) for k in spread]} for a, b in (zero, exact, shuffled)]
    return by_L[0], {"exact": by_L[1], "shuffled": by_L[2]}


@pytest.mark.parametrize("starts,holds", [
    (fake_starts(), (True, True)),  # the zeros cost episodes on every seed, against both starts
    (fake_starts(shuffled=(3000, 9000)), (True, False)),  # wrong non-zero values cost more: not the zeros
    (fake_starts(zero=(1000, 1100), exact=(1536, 7536)), (False, None)),  # the exact start is the slower one
    (fake_starts(zero=(1000, 1100), exact=(1000, 1100)), (None, None)),  # alike: no named size ruled out
    (fake_starts(zero=(1000, 20_000)), (True, True)),  # never solved from V = 0: a lower bound, still above
    (fake_starts(zero=(1000, 1100), exact=(1000, 20_000)), (False, None)),  # V^π never solves: still slower
    (fake_starts(zero=(1000, 20_000), exact=(1000, 20_000)), (None, True)),  # neither solved: nothing measured
])
def test_the_near_zero_claims_decide_from_zero_minus_each_other_start_at_the_longest_length(starts, holds):
    than_exact, than_shuffled, _ = learning_script.near_zero_claims(*starts, [5, 80], 20_000)
    assert (than_exact["holds"], than_shuffled["holds"]) == holds
    assert than_exact["source"] == than_shuffled["source"] == "survey §2.3"
    assert "struggles" in than_exact["claim"] and "shuffled" not in than_exact["claim"]
    assert "nothing meaningful to bootstrap from" in than_shuffled["claim"]


def test_the_near_zero_claim_reports_the_three_starts_at_every_length():
    claims = learning_script.near_zero_claims(*fake_starts(zero=(1000, 20_000)), [5, 80], 20_000)[:2]
    for claim in claims:
        measured = claim["measured"]
        assert "L = 5: from V = 0 1,000 (950-1,050), from V^π 1,000 (950-1,050), from V^π shuffled 1,000" in measured
        assert "L = 80: from V = 0 20,000 (19,000-20,000), from V^π 1,100 (1,045-1,155)" in measured
        assert "(a run at the budget: censored)" in measured
    assert "from V = 0 minus from V^π +" in claims[0]["measured"]
    assert "from V = 0 minus from V^π shuffled" in claims[1]["measured"]


@pytest.mark.parametrize("zero,holds", [
    ((1536, 7536), False),  # every run solves within the budget
    ((1536, 20_000), None),  # some seeds at the budget (1.0 and 1.05 times 20,000 cap there), one not
    ((20_000, 20_000), None),  # ... at the longest L, though not every seed
])
def test_the_outright_failure_claim_counts_runs_unsolved_at_the_budget(zero, holds):
    claim = learning_script.near_zero_claims(*fake_starts(zero=zero), [5, 80], 20_000)[2]
    assert claim["holds"] is holds and "fails outright" in claim["claim"]
    assert "runs from V = 0 unsolved at the budget, by L: 5: " in claim["measured"]


def test_the_outright_failure_claim_holds_when_every_seed_ends_unsolved_at_the_longest_length():
    zero, starts = fake_starts()
    zero[80] = [20_000] * 3
    claim = learning_script.near_zero_claims(zero, starts, [5, 80], 20_000)[2]
    assert claim["holds"] is True and "80: 3 of 3" in claim["measured"]


# --------------------------------------------------------------------------------------------
# 02_learning: the time TD(0) needs to halve its bias, and whether it grows exponentially
# --------------------------------------------------------------------------------------------
def test_bias_removal_time_is_the_first_update_at_which_tds_bias_at_the_key_room_is_halved():
    args = learning_args(batch=4, max_episodes=4000, critic_lr=0.3)
    got = learning_script.bias_removal_time(args, 3, 2, "cpu")
    common.seed_everything(2)
    env = learning_script.gae.make_env(args, 3, args.batch, 2, "cpu")
    policy = learning_script.gae.uniform_policy(env)
    truth = float(learning_script.gae.exact_truth(env, policy, 1.0)[0][0])
    V, episodes = torch.zeros(env.num_states + 1), 0
    while abs(float(V[0]) - truth) > abs(truth) / 2:  # the same loop by hand: TD(0)'s λ-return target
        episode = common.play_episodes(env, policy)
        s, r, ends = episode["states"], episode["rewards"], episode["ends"]
        target = r + V[episode["next_states"]] * (~ends).float()
        learning_script.critic_step(V, s, target - V[s], args.critic_lr)
        episodes += args.batch
    assert got == episodes < args.max_episodes


def test_bias_removal_time_returns_the_budget_when_the_bias_is_never_halved():
    args = learning_args(batch=4, max_episodes=8, critic_lr=1e-6)
    assert learning_script.bias_removal_time(args, 5, 0, "cpu") == 8


@pytest.mark.parametrize("law,holds", [
    (lambda L: 30 * 1.08 ** L, True),  # exponential in L
    (lambda L: 100 + 40 * L, False),  # linear with an offset: a power law fits better
])
def test_the_exponential_time_claim_fits_each_seed_as_03s_delay_claims_do(law, holds):
    lengths = [5, 10, 20, 40, 80]
    times = {L: [law(L) * k for k in (0.95, 1.0, 1.05)] for L in lengths}
    claim = learning_script.exponential_time_claim(times, lengths, 10**9, branching=2)
    assert claim["holds"] is holds and claim["source"] == "survey §5 (RUDDER paper's theorem)"
    assert common.exponential_growth(lengths, times, 0)[1] in claim["measured"]


def test_the_exponential_time_claim_is_undecided_with_a_run_at_the_budget():
    lengths = [5, 10, 20]
    times = {5: [10, 11, 12], 10: [20, 21, 22], 20: [40, 41, 50]}
    claim = learning_script.exponential_time_claim(times, lengths, 50, branching=2)
    assert claim["holds"] is None and "1 runs at the budget: censored" in claim["measured"]


def test_the_exponential_time_claim_finds_its_premise_missing_on_a_delay_of_one_path():
    lengths = [5, 10, 20, 40, 80]
    times = {L: [100 + 40 * L * k for k in (0.95, 1.0, 1.05)] for L in lengths}  # a power law: "no" if it could tell
    claim = learning_script.exponential_time_claim(times, lengths, 10**9, branching=1)
    assert claim["holds"] is None and claim["measured"].startswith(
        "premise not met: past the key room every state leads to one next state")
    assert learning_script.exponential_time_claim(times, lengths, 10**9, branching=2)["holds"] is False


def test_key_to_door_is_one_path_past_the_key_room_and_two_at_it():
    args = learning_args()
    assert learning_script.delay_branching(args, 6, "cpu") == 1
    P, _ = learning_script.gae.make_env(args, 6, 1, 0, "cpu").model()
    assert int((P[0] > 0).any(0).sum()) == 2  # the key room: take the key or leave it
