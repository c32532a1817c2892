"""04's studies: the exact model (the return identity, the exact hindsight distributions, the exact
gradient) and the estimators with it, the two extra tasks, the gradient study as recorded by
spies and its agreement with the chapter, the claim checkers on hand-made summaries, CLI and a
smoke run of each study."""

import importlib
import math

import numpy as np
import pytest
import torch

import common

hind = importlib.import_module("04_her_hca")
sweep = importlib.import_module("studies.04_her_sweep")
tasks = importlib.import_module("studies.04_hca_tasks")


# --------------------------------------------------------------------------------------------
# HCA: the exact truth
# --------------------------------------------------------------------------------------------
def skewed_policy(task, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(task.num_states, task.P.shape[1], generator=g), 1)


@pytest.mark.parametrize("make", [lambda: hind.delayed_effect(4, 0.7), lambda: tasks.shortcut_chain(5, 0.7),
                                  lambda: tasks.ambiguous_bandit(0.7, 0.2)])
def test_return_identity_q_equals_expected_hindsight_weighted_return(make):
    task = make()
    policy = skewed_policy(task)
    assert tasks.hindsight_identity_gap(task, policy) < 1e-6
    # without the hindsight ratio (h = π), E[z] is V(x), not Q(x, a): the identity is not trivial
    V, Q = hind.evaluate_policy(task.P.double(), task.R.double(), policy.double(), 1.0)
    assert (Q[0] - V[0]).abs().max() > 0.05


def test_return_identity_by_monte_carlo_on_the_delayed_effect():
    task = hind.delayed_effect(3, 0.5)
    policy = skewed_policy(task, seed=1)
    episodes = hind.sample_episodes(task, policy, 40_000, torch.Generator().manual_seed(0))
    z = episodes["returns"][0]
    h = tasks.exact_return_hindsight(task, policy, episodes["states"][0], z)
    _, Q = hind.evaluate_policy(task.P.double(), task.R.double(), policy.double(), 1.0)
    for a in (0, 1):  # E_z[h(a|x,z)/π(a|x) z], over episodes whatever their first action
        assert math.isclose((h[:, a] / policy[0, a] * z).mean().item(), Q[0, a].item(), abs_tol=0.03)


def test_exact_state_hindsight_on_the_delayed_effect():
    task = hind.delayed_effect(3, 1.0)
    policy = skewed_policy(task)
    h = tasks.exact_state_hindsight(task, policy)
    with_key, without_key = 2 * 2 + 1, 2 * 2  # position 2, with and without the key
    assert torch.allclose(h[0, with_key], torch.tensor([0.0, 1.0]))  # the later state reveals the first action
    assert torch.allclose(h[0, without_key], torch.tensor([1.0, 0.0]))
    assert torch.allclose(h[3, 7], policy[3])  # a corridor action changes nothing: h = π


def test_exact_gradient_matches_finite_differences():
    task = tasks.shortcut_chain(4, 1.0)
    logits = torch.randn(task.num_states, 2, generator=torch.Generator().manual_seed(0)).double()
    grad = tasks.exact_gradient(task, logits).double()
    eps, i, j = 1e-5, 1, 1
    bumped = logits.clone()
    bumped[i, j] += eps
    numeric = (hind.exact_return(task, bumped) - hind.exact_return(task, logits)) / eps
    assert math.isclose(grad[i, j].item(), numeric, rel_tol=1e-3)


@pytest.mark.parametrize("method", ["PG + V baseline", "return HCA (exact h)", "state HCA (exact h)"])
def test_estimators_with_exact_h_are_unbiased(method):
    task = tasks.shortcut_chain(4, 0.5)
    logits = torch.randn(task.num_states, 2, generator=torch.Generator().manual_seed(3))
    policy = torch.softmax(logits, 1)
    truth = tasks.exact_gradient(task, logits)
    V, _ = hind.evaluate_policy(task.P.double(), task.R.double(), policy.double(), 1.0)
    episodes = hind.sample_episodes(task, policy, 20_000, torch.Generator().manual_seed(4))
    h = (tasks.exact_return_hindsight(task, policy, episodes["states"], episodes["returns"])
         if method.startswith("return") else tasks.exact_state_pairs(tasks.exact_state_hindsight(task, policy), episodes))
    rows = hind.gradient_rows(method, episodes, policy, V.float(), task.R, h, h_min=1e-9)
    grads = hind.per_episode_gradients(episodes, rows, task.num_states)
    floor = ((grads - grads.mean(0)) ** 2).sum((1, 2)).mean() / len(grads)  # E|mean - truth|² if unbiased
    assert ((grads.mean(0) - truth) ** 2).sum() < 5 * floor


def test_learned_hindsight_approaches_the_bayes_posterior_on_the_ambiguous_bandit():
    torch.manual_seed(0)
    task = tasks.ambiguous_bandit(noise=0.5, crossover=0.2)
    policy = torch.tensor([[0.3, 0.7], [0.5, 0.5]])
    args = hind.Args(hca_hidden=32, hca_batch=512)
    z = torch.linspace(-0.5, 1.5, 41)
    exact = tasks.exact_return_hindsight(task, policy, torch.zeros(41, dtype=torch.long), z)
    errors = []
    for episodes, steps in ((4000, 0), (4000, 600)):
        learner = hind.HindsightLearner(args, task, "return", "cpu")
        learner.fit(hind.sample_episodes(task, policy, episodes, torch.Generator().manual_seed(1)), steps)
        learned = learner.probabilities(torch.zeros(41, dtype=torch.long), z)
        errors.append((learned - exact).abs().max().item())
    assert errors[1] < 0.05 < errors[0]
    # and the posterior is really ambiguous here: no return is certain of its arm
    assert exact[:, 1].min() > 0.1 and exact[:, 1].max() < 0.99


def test_tasks_are_the_documented_worlds():
    def values(task, policy):
        return hind.evaluate_policy(task.P.double(), task.R.double(), policy.double(), 1.0)

    for task in (tasks.shortcut_chain(5, 0.3), hind.delayed_effect(3, 0.3), tasks.ambiguous_bandit(0.3, 0.2)):
        S = task.num_states
        torch.testing.assert_close(task.P.sum(-1), torch.ones(S, 2))  # a distribution over next states
        assert (task.P[S - 1, :, S - 1] == 1).all() and (task.R[S - 1] == 0).all()  # absorbing, earns nothing
        torch.testing.assert_close(task.probs.sum(-1), torch.ones(S, 2))
        assert task.noise == 0.3
    chain = tasks.shortcut_chain(5, 0.3)
    walk, jump = torch.tensor([1.0, 0.0]).expand(6, 2), torch.tensor([0.0, 1.0]).expand(6, 2)
    assert math.isclose(values(chain, walk)[0][0], -5) and math.isclose(values(chain, jump)[0][0], -2)
    assert chain.horizon == 5
    delayed = hind.delayed_effect(3, 0.3)
    _, Q = values(delayed, torch.full((delayed.num_states, 2), 0.5))
    assert delayed.horizon == 5 and delayed.num_states == 2 * 5 + 1
    torch.testing.assert_close(Q[0], torch.tensor([0.0, 1.0], dtype=Q.dtype))  # only the first action matters, by 1
    assert torch.equal(Q[2:-1, 0], Q[2:-1, 1])  # nothing after it does
    bandit = tasks.ambiguous_bandit(0.3, 0.2)
    assert bandit.horizon == 1 and torch.allclose(bandit.R[0], torch.tensor([0.2, 0.8]))
    pays = {a: tasks.return_components(bandit, torch.full((2, 2), 0.5), 0, a) for a in (0, 1)}
    assert pays[0] == pytest.approx({(0.0, 1): 0.8, (1.0, 1): 0.2}) and pays[1] == pytest.approx(
        {(1.0, 1): 0.8, (0.0, 1): 0.2})
    # make_tasks passes each option to its task
    shortcut, delayed, bandit = tasks.make_tasks(tasks.Args(chain=6, corridor=2, crossover=0.3), 0.7)
    assert (shortcut.num_states, delayed.horizon, bandit.noise) == (7, 4, 0.7)
    assert shortcut.noise == delayed.noise == 0.7 and math.isclose(bandit.R[0, 0].item(), 0.3, rel_tol=1e-6)


def test_estimator_errors_are_bias_squared_and_trace_covariance():
    grads = torch.tensor([[[1.0, 2.0], [0.0, 0.0]], [[3.0, 0.0], [1.0, 1.0]], [[2.0, 1.0], [2.0, -1.0]]])
    truth = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    errors = tasks.estimator_errors(grads, truth)
    # mean [[2, 1], [1, 0]]; deviations² summed per episode: 1 + 1 + 1 + 0 = 3, 1 + 1 + 0 + 1 = 3, 0 + 0 + 1 + 1 = 2
    expected = {"bias2": 1 + 0 + 1 + 1, "variance": 8 / 3, "bias2_noise_floor": 8 / 9,
                "start_state_variance": (2 + 2 + 0) / 3}  # the last: state 0's entries only
    assert errors == pytest.approx(expected, rel=1e-6)


def test_ratio_profile_measures_how_far_h_is_from_pi_at_each_step():
    # two episodes: the first lives 3 steps, the second 2
    episodes = {"states": torch.tensor([[0, 1], [1, 0], [0, 2]]), "actions": torch.tensor([[0, 1], [1, 1], [0, 0]]),
                "alive": torch.tensor([[True, True], [True, True], [True, False]])}
    policy = torch.tensor([[0.5, 0.5], [0.25, 0.75], [0.5, 0.5]])
    h_return = torch.tensor([[[0.75, 0.25], [0.0, 0.75]], [[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.9, 0.1]]])
    h_state = torch.full((3, 3, 2, 2), 0.5)
    h_state[0, 2, 0] = torch.tensor([0.25, 0.75])  # episode 0, step 0, given its last state (step 2)
    h_state[0, 1, 1] = torch.tensor([0.5, 0.25])  # episode 1, step 0, given its last state (step 1)
    h_state[1, 2, 0] = torch.tensor([0.0, 1.0])  # episode 0, step 1, given its last state
    h_state[0, 1, 0] = torch.tensor([1.0, 0.0])  # not the last state: ignored
    profile = tasks.ratio_profile(episodes, policy, {"return HCA (x)": h_return, "state HCA (x)": h_state})
    # return: |h/π - 1| of the action taken, mean over the episodes alive at t
    assert profile["return HCA (x)"] == pytest.approx([(0.5 + 0) / 2, (0 + 1 / 3) / 2, 0.0])
    # state: given each episode's last state, over the steps before it
    assert profile["state HCA (x)"] == pytest.approx([(0.5 + 2 / 3) / 2, 1 / 3, 0.0])


def test_study_one_measures_every_estimator_on_fresh_episodes_against_the_exact_gradient(monkeypatch):
    args = hind.Args(hindsight_episodes=40, measure_episodes=300, hindsight_steps=3, hca_hidden=8, seed=2, h_min=0.03)
    task = tasks.shortcut_chain(4, 0.5)
    sampled, fitted, rows_seen = [], [], {}
    real_sample, real_fitted, real_rows = hind.sample_episodes, hind.fitted, tasks.estimator_rows

    def sample_spy(task_, policy, num, generator):
        sampled.append((policy.clone(), num, real_sample(task_, policy, num, generator)))
        return sampled[-1][2]

    def fitted_spy(args_, task_, condition, episodes, device):
        fitted.append((condition, episodes, real_fitted(args_, task_, condition, episodes, device)))
        return fitted[-1][2]

    def rows_spy(method, episodes, policy, V, r_hat, h, h_min):
        rows_seen[method] = (episodes, V, r_hat, h, h_min)
        return real_rows(method, episodes, policy, V, r_hat, h, h_min)

    monkeypatch.setattr(hind, "sample_episodes", sample_spy)
    monkeypatch.setattr(hind, "fitted", fitted_spy)
    monkeypatch.setattr(tasks, "estimator_rows", rows_spy)
    result = tasks.study_one(args, task, "cpu")

    uniform_policy = torch.full((task.num_states, 2), 0.5)
    (train_policy, train_num, train), (test_policy, test_num, test) = sampled
    assert (train_num, test_num) == (40, 300)
    assert torch.equal(train_policy, uniform_policy) and torch.equal(test_policy, uniform_policy)
    # the classifiers learn on one batch; every estimator is measured on another
    assert [(c, e is train) for c, e, _ in fitted] == [("return", True), ("state", True)]
    learners = {c: learner for c, _, learner in fitted}
    V, _ = hind.evaluate_policy(task.P.double(), task.R.double(), uniform_policy.double(), 1.0)
    exact_h = {"return HCA (exact h)": tasks.exact_return_hindsight(task, uniform_policy, test["states"],
                                                                   test["returns"]),
               "state HCA (exact h)": tasks.exact_state_pairs(tasks.exact_state_hindsight(task, uniform_policy), test),
               "return HCA (learned h)": learners["return"].probabilities(test["states"], test["returns"]),
               "state HCA (learned h)": hind.learned_state_pairs(learners["state"], test)}
    truth = tasks.exact_gradient(task, torch.zeros(task.num_states, 2))
    assert set(rows_seen) == set(tasks.study_methods(task)) == set(result["estimators"])
    for method, (episodes, V_used, r_hat, h, h_min) in rows_seen.items():
        assert episodes is test and h_min == 0.03
        torch.testing.assert_close(V_used, V.float())  # the baseline and r̂ are exact: only h is learned
        torch.testing.assert_close(r_hat, task.R)
        if method in exact_h:
            torch.testing.assert_close(h, exact_h[method])
        else:
            assert h is None
        rows = real_rows(method, test, uniform_policy, V.float(), task.R, h, 0.03)
        expected = tasks.estimator_errors(hind.per_episode_gradients(test, rows, task.num_states), truth)
        assert result["estimators"][method] == pytest.approx(expected, rel=1e-6)
    assert math.isclose(result["exact_gradient_norm2"], (truth**2).sum().item(), rel_tol=1e-6)
    expected_ratio = tasks.ratio_profile(test, uniform_policy, exact_h)
    assert result["hindsight_ratio"].keys() == expected_ratio.keys()
    for method, profile in expected_ratio.items():  # one profile (a list over steps) per method
        assert result["hindsight_ratio"][method] == pytest.approx(profile)


# --------------------------------------------------------------------------------------------
# The claim checkers, on hand-made summaries: each verdict both ways
# --------------------------------------------------------------------------------------------
def her_summary(dqn: dict, her: dict, dqn_share=0.04, her_share=0.5) -> dict:
    """{method: {n: [one run per seed]}} from the final success of each seed; the reward share at
    the largest n is given, at the others it is the opposite (only the largest n counts)."""
    def runs(success: dict, share: float, other: float) -> dict:
        top = max(success)
        return {n: [{"final_success": s, "reward_share": share if n == top else other} for s in seeds]
                for n, seeds in success.items()}
    return {"DQN": runs(dqn, dqn_share, 0.9), "DQN+HER": runs(her, her_share, 0.0)}


def her_verdicts(bits: str, dqn: dict, her: dict, **shares) -> list:
    return [c["holds"] for c in sweep.her_claims(sweep.Args(bits=bits, her_seeds=2), her_summary(dqn, her, **shares))]


def test_her_claims_hold_only_when_dqn_fails_and_her_solves():
    good_dqn = {5: [1.0, 0.6], 20: [0.0, 0.12], 30: [0.0, 0.0]}  # mean 0.06 at n = 20: fails
    good_her = {5: [1.0, 1.0], 20: [0.9, 0.9], 30: [1.0, 0.8]}  # mean exactly 0.9 at n = 30
    # DQN fails beyond 15 bits, HER up to 50 (not run: n = 50 is not here), density, "future" (not compared),
    # HER at n = 30, DQN from n = 20
    assert her_verdicts("5,20,30", good_dqn, good_her) == [True, None, True, None, True, True]
    claims = sweep.her_claims(sweep.Args(bits="5,20,30", her_seeds=2), her_summary(good_dqn, good_her))
    assert claims[4]["measured"] == "DQN+HER at n=30: 0.90" and claims[5]["measured"] == "DQN at n ≥ 20: n=20 0.06, n=30 0.00"
    assert "DQN is below 10% from n = 20 on" in claims[0]["measured"] and "n = 50 not run" in claims[1]["measured"]
    assert "success in the −1/0 convention" in claims[2]["measured"]
    assert her_verdicts("5,20,30", {**good_dqn, 20: [0.1, 0.1]}, good_her) == [False, None, True, None, True, False]
    assert her_verdicts("5,20,30", {**good_dqn, 30: [0.2, 0.0]}, good_her) == [False, None, True, None, True, False]
    # a failure of HER at any n up to 50 refutes "solves up to 50" without running n = 50
    assert her_verdicts("5,20,30", good_dqn, {**good_her, 5: [1.0, 0.7]}) == [True, False, True, None, True, True]
    assert her_verdicts("5,20,30", good_dqn, {**good_her, 30: [0.9, 0.8]}) == [True, False, True, None, False, True]
    # reward density: HER's share of reward-0 transitions at the largest n must be > 10x DQN's
    assert her_verdicts("5,20,30", good_dqn, good_her, dqn_share=0.06)[2] is False
    assert her_verdicts("5,20,30", good_dqn, good_her, dqn_share=0.05)[2] is False  # 10x is not enough
    # without n ≥ 15 the first claim is not tested, and the n ≥ 20 and n = 30 ones are absent
    assert her_verdicts("5,10", {5: [0.9, 0.9], 10: [0.5, 0.5]}, {5: [1.0, 1.0], 10: [1.0, 1.0]}) == [None, None, True, None]
    assert her_verdicts("5,20", {5: [0.9, 0.9], 20: [0.0, 0.0]}, {5: [1.0, 1.0], 20: [1.0, 1.0]}) == [True, None, True, None, True]
    # with n = 50 run and solved, "up to 50" holds
    assert her_verdicts("5,20,50", {5: [0.9, 0.9], 20: [0.0, 0.0], 50: [0.0, 0.0]},
                        {5: [1.0, 1.0], 20: [1.0, 1.0], 50: [0.95, 0.95]})[1] is True


def variance_entry(pg: float, state: float | None, ret: float, start=(1.0, 1.0)) -> dict:
    estimators = {"PG + V baseline": {"variance": pg}, "return HCA (learned h)": {"variance": ret},
                  "REINFORCE (no baseline)": {"variance": 1.0, "start_state_variance": start[0]},
                  "state HCA (exact h)": {"variance": 1.0, "start_state_variance": start[1]}}
    if state is not None:
        estimators["state HCA (learned h)"] = {"variance": state}
    return {"estimators": estimators}


def hca_summary(low: tuple, high: tuple, profile_low: dict, profile_high: dict, start_low=(1.0, 1.1),
                start_high=(1.0, 3.0)) -> dict:
    """The delayed effect at σ = 0.5 and σ = 2 (variances of PG, state HCA, return HCA as given),
    beside a shortcut whose variance claim holds."""
    delayed = {0.5: variance_entry(*low, start=start_low), 2.0: variance_entry(*high, start=start_high)}
    delayed[0.5]["hindsight_ratio"], delayed[2.0]["hindsight_ratio"] = profile_low, profile_high
    shortcut = {0.5: variance_entry(4.0, 2.0, 2.0), 2.0: variance_entry(40.0, 4.0, 5.0)}
    return {"shortcut": shortcut, "delayed effect": delayed}


def hca_verdicts(study: dict, identity: dict | None = None) -> list:
    identity = identity or {"shortcut": 1e-9, "delayed effect": 2e-4}
    return [c["holds"] for c in tasks.hca_claims(tasks.Args(sigmas="2,0.5"), study, identity)]


def delayed_variance(low: tuple, high: tuple, profile: dict) -> list:
    """The delayed effect's two variance verdicts: lower than PG + V at every σ, and an edge that grows."""
    return hca_verdicts(hca_summary(low, high, profile, profile))[2:4]


def test_hca_claims_follow_the_measurements_both_ways():
    decisive = {"state HCA (learned h)": [1.0, 0.1, 0.1, 50.0], "return HCA (learned h)": [0.6, 0.05, 0.15, 9.0],
                "state HCA (exact h)": [0.0, 1.0, 1.0, 1.0]}  # exact h is not judged
    vague = {m: [0.9, 0.2, 0.2, 0.0] for m in decisive}
    good = hca_summary((4.0, 2.0, 2.0), (40.0, 4.0, 5.0), decisive, vague)
    # per task (shortcut, delayed effect): lower variance, growing edge; then per task return vs state HCA
    # (return HCA is not lower at either σ here), the decisive action, the identity, COCOA
    assert hca_verdicts(good) == [True, True, True, True, False, False, True, True, True]
    # variance: PG / HCA > 1 at every σ, and growing from the smallest σ to the largest, for every variant
    assert delayed_variance((4.0, 2.0, 2.0), (40.0, 4.0, 20.0), decisive) == [True, False]  # return HCA: 2x at both
    assert delayed_variance((4.0, 5.0, 5.0), (4.0, 4.5, 4.5), decisive) == [False, True]  # 0.8x → 0.89x
    assert delayed_variance((4.0, 1.0, 2.0), (40.0, 12.0, 5.0), decisive) == [True, False]  # state HCA 4x → 3.3x
    assert delayed_variance((4.0, 2.0, 2.0), (40.0, 20.0, 5.0), decisive) == [True, False]
    assert delayed_variance((4.0, 8.0, 8.0), (6.0, 4.0, 4.0), decisive) == [False, True]  # 0.5x → 1.5x
    without_state = hca_summary((4.0, None, 2.0), (40.0, None, 5.0), decisive, vague)
    verdicts = hca_verdicts(without_state)
    assert verdicts[2:4] == [True, True] and len(verdicts) == 8  # no return-vs-state claim without state HCA
    # return vs state HCA: return HCA's variance lower at more than half of the σ
    better_return = hca_summary((4.0, 2.0, 2.0), (40.0, 8.0, 5.0), decisive, vague)
    assert hca_verdicts(better_return)[4:6] == [False, False]  # delayed: 5 < 8 at σ = 2 only: 1 of 2 is not more than half
    both = hca_summary((4.0, 3.0, 2.0), (40.0, 8.0, 5.0), decisive, vague)
    assert hca_verdicts(both)[4:6] == [False, True]
    # the decisive action: |h/π - 1| at step 0 must exceed 5x its mean over the corridor (not the last
    # step), for every learned h, at the smallest σ
    weak = {**decisive, "return HCA (learned h)": [0.45, 0.05, 0.15, 0.0]}
    assert hca_verdicts(hca_summary((4.0, 2.0, 2.0), (40.0, 4.0, 5.0), weak, decisive))[-3] is False
    # the identity: the largest gap must be below 1e-3
    assert hca_verdicts(good, {"shortcut": 1e-9, "delayed effect": 2e-3})[-3:] == [True, False, True]
    # COCOA: state HCA's variance at the first action within 20% of REINFORCE's, at the smallest σ
    far = hca_summary((4.0, 2.0, 2.0), (40.0, 4.0, 5.0), decisive, vague, start_low=(1.0, 1.3),
                      start_high=(1.0, 1.0))
    assert hca_verdicts(far)[-3:] == [True, True, False]


def test_hca_claims_report_every_sigma_and_the_count_where_return_hca_is_lower():
    decisive = {"state HCA (learned h)": [1.0, 0.1, 0.1, 5.0], "return HCA (learned h)": [1.0, 0.1, 0.1, 5.0]}
    claims = tasks.hca_claims(tasks.Args(sigmas="2,0.5"), hca_summary((4.0, 2.0, 1.0), (40.0, 8.0, 5.0), decisive, decisive),
                             {"shortcut": 0.0, "delayed effect": 0.0})
    assert "at σ = 0.5, 2: state HCA: 2x, 5x; return HCA: 4x, 8x" in claims[2]["measured"]
    assert claims[5]["claim"] == "delayed effect: return-conditional HCA is preferable to state-conditional HCA"
    assert "σ=0.5 1 vs 2, σ=2 5 vs 8; return HCA lower at 2 of 2" in claims[5]["measured"] and claims[5]["holds"] is True


# --------------------------------------------------------------------------------------------
# The studies agree with the chapter where they measure the same thing
# --------------------------------------------------------------------------------------------
def test_study_one_on_the_delayed_effect_is_the_chapters_gradient_variances():
    """Both seed themselves from --seed: the study's variances on the delayed effect are the
    chapter's numbers, whatever ran before either."""
    args = hind.Args(corridor=3, hindsight_episodes=40, measure_episodes=200, hindsight_steps=5, hca_hidden=8, seed=4)
    chapter = hind.gradient_variances(args, 0.7, "cpu")
    torch.manual_seed(123)  # whatever the global generator did before
    study = tasks.study_one(args, hind.delayed_effect(3, 0.7), "cpu")["estimators"]
    assert set(chapter) == set(hind.ESTIMATORS) and chapter == {m: study[m]["variance"] for m in chapter}
    assert tasks.variances({0.7: {"estimators": study}})[0.7] == {m: e["variance"] for m, e in study.items()}


def test_her_sweep_runs_the_chapters_runs_at_each_n(monkeypatch):
    calls = []

    def runs_spy(args, bits, device):
        calls.append((args.her_seeds, args.strategy, args.seed, args.cycles, bits))
        return {name: [{"n": bits, "name": name}] for name in hind.HER_METHODS}

    monkeypatch.setattr(hind, "her_runs", runs_spy)
    her = sweep.her_sweep(sweep.Args(bits="3,7", her_seeds=4, cycles=5, strategy="final", seed=9), "cpu")
    assert calls == [(4, "final", 9, 5, 3), (4, "final", 9, 5, 7)]
    assert her == {name: {n: [{"n": n, "name": name}] for n in (3, 7)} for name in hind.HER_METHODS}
    smoke = sweep.chapter_args(common.apply_smoke(sweep.Args(smoke=True, her_seeds=3)))  # the chapter's smoke values
    assert (smoke.cycles, smoke.hidden, smoke.her_seeds) == (hind.Args.SMOKE["cycles"], hind.Args.SMOKE["hidden"], 3)


# --------------------------------------------------------------------------------------------
# CLI and a smoke run of each study
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("script,flag,value,message", [
    ("studies.04_hca_tasks", "--crossover", "0.7", "--crossover must be in (0, 0.5)"),
    ("studies.04_hca_tasks", "--sigmas", "0,1", "--sigmas must be positive"),
    ("studies.04_hca_tasks", "--chain", "1", "--chain must be at least 2"),
    ("studies.04_her_sweep", "--bits", "4,0", "--bits must be positive integers"),
    ("studies.04_her_sweep", "--her-seeds", "0", "--her-seeds must be positive"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, script, flag, value, message):
    assert message in cli_error(script, flag, value)


def test_her_sweep_smoke_run_writes_results_and_figures(tmp_path, read_results):
    result = sweep.main(sweep.Args(smoke=True, device="cpu", out=str(tmp_path)))
    data = read_results(tmp_path / "results.json")
    assert (tmp_path / "her_success_vs_bits.png").stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"]) and len(data["claims"]) == 4  # n ≥ 20 is not run
    assert all(np.isfinite(v) for v in data["metrics"].values())
    # relabelling makes reward-0 transitions common, at every n
    verdicts = {c["claim"]: c["holds"] for c in data["claims"]}
    assert verdicts["HER turns failed episodes into useful signal (reward density)"] is True
    for n in (4, 6):
        her, dqn = data["her"]["DQN+HER"][str(n)][0], data["her"]["DQN"][str(n)][0]
        assert her["reward_share"] > 5 * dqn["reward_share"] and her["episodes"] == 32 * n


def test_hca_tasks_smoke_run_writes_results_and_figures(tmp_path, read_results):
    args = tasks.Args(smoke=True, device="cpu", out=str(tmp_path))
    result = tasks.main(args)
    data = read_results(tmp_path / "results.json")
    for name in ("hca_variance_vs_sigma.png", "hca_hindsight_ratio.png", "hca_learning_curves.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"]) and len(data["claims"]) == 11
    assert all(np.isfinite(v) for v in data["metrics"].values())
    # the identity Q = E_z[h/π z] holds to integration accuracy even in a tiny run
    verdicts = {c["claim"]: c["holds"] for c in data["claims"]}
    assert verdicts["Q(x, a) = E_z[h(a|x,z)/π(a|x) · z]"] is True
    # the one-step bandit has no later state: no state HCA there
    assert set(data["hca_learning"]["ambiguous bandit"]) == {"PG + V baseline", "return HCA (learned h)"}
    assert not any(m.startswith("state") for m in data["hca_gradient_study"]["ambiguous bandit"]["0.5"]["estimators"])
    # every learning curve starts at the exact return of the uniform policy
    uniform = {task.name: hind.exact_return(task, torch.zeros(task.num_states, 2))
               for task in tasks.make_tasks(common.apply_smoke(args), 1.0)}
    for name, by_method in data["hca_learning"].items():
        assert all(math.isclose(curve[0], uniform[name], rel_tol=1e-6) for curves in by_method.values()
                   for curve in curves)
