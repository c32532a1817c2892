"""04's studies: the exact model (the return identity, the exact hindsight distributions, the exact
gradient) and the estimators with it, the two extra tasks, state-conditional HCA against loops
and autograd, the gradient study as recorded by spies and its agreement with the chapter, the
learning loop as recorded by spies (and its copy of 03's running mean), the claim checkers on
hand-made summaries, CLI and a smoke run of each study."""

import dataclasses
import importlib
import math

import numpy as np
import pytest
import torch
from test_04_her_hca import chain_episodes, skewed_policy

import common

hind = importlib.import_module("04_her_hca")
sweep = importlib.import_module("studies.04_her_sweep")
tasks = importlib.import_module("studies.04_hca_tasks")
rudder = importlib.import_module("03_rudder")


# --------------------------------------------------------------------------------------------
# HCA: the exact truth
# --------------------------------------------------------------------------------------------
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
    numeric = (tasks.exact_return(task, bumped) - tasks.exact_return(task, logits)) / eps
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
    rows = tasks.estimator_rows(method, episodes, policy, V.float(), task.R, h, h_min=1e-9)
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
        learner = hind.HindsightLearner(args, hind.Hindsight(task, 32), "cpu")
        sampled = hind.sample_episodes(task, policy, episodes, torch.Generator().manual_seed(1))
        learner.fit(hind.return_examples(sampled), steps)
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
    # signed: h/π - 1 itself, so a lowered ratio (step 1, episode 0: 0.5 / 0.75) counts against a raised one
    signed = tasks.ratio_profile(episodes, policy, {"return HCA (x)": h_return}, signed=True)
    assert signed["return HCA (x)"] == pytest.approx([(0.5 + 0) / 2, (-1 / 3 + 0) / 2, 0.0])


def test_study_one_measures_every_estimator_on_fresh_episodes_against_the_exact_gradient(monkeypatch):
    args = hind.Args(hindsight_episodes=40, measure_episodes=300, hindsight_steps=3, hca_hidden=8, seed=2, h_min=0.03)
    task = tasks.shortcut_chain(4, 0.5)
    sampled, fitted, rows_seen = [], [], {}
    real_sample, real_fitted, real_rows = hind.sample_episodes, tasks.fitted, tasks.estimator_rows

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
    monkeypatch.setattr(tasks, "fitted", fitted_spy)
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
               "state HCA (learned h)": tasks.learned_state_pairs(learners["state"], test)}
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
# State-conditional HCA, against autograd and loops over (t, k, n, b)
# --------------------------------------------------------------------------------------------
def test_all_action_rows_summed_per_episode_match_autograd():
    task = tasks.shortcut_chain(4, 1.0)
    logits = torch.randn(task.num_states, 2, generator=torch.Generator().manual_seed(2))
    policy = torch.softmax(logits, 1)
    episodes = hind.sample_episodes(task, policy, 3, torch.Generator().manual_seed(0))
    q_hat = torch.randn(*episodes["returns"].shape, 2)
    all_action = hind.per_episode_gradients(episodes, tasks.all_action_rows(episodes, policy, q_hat), task.num_states)
    for n in range(3):
        theta = logits.clone().requires_grad_()
        pi = torch.softmax(theta, 1)[episodes["states"][:, n]]  # (T, A)
        alive = episodes["alive"][:, n].float()
        surrogate = (alive * (pi * q_hat[:, n]).sum(1)).sum()  # Σ_t Σ_b π(b|X_t) Q̂_t(b)
        torch.testing.assert_close(all_action[n], torch.autograd.grad(surrogate, theta)[0])


def test_state_hca_credits_each_later_reward_by_the_hindsight_ratio_of_every_action():
    task, policy, episodes = chain_episodes()
    T, N = episodes["actions"].shape
    g = torch.Generator().manual_seed(2)
    h_pairs = torch.softmax(torch.randn(T, T, N, 2, generator=g), -1)
    r_hat = torch.randn(task.num_states, 2, generator=g)
    q = tasks.state_hca_q(episodes, policy, h_pairs, r_hat)
    for t in range(T):
        for n in range(N):
            x = episodes["states"][t, n]
            for b in range(2):
                later = sum(h_pairs[t, k, n, b] / policy[x, b] * episodes["rewards"][k, n] for k in range(t + 1, T))
                assert math.isclose(q[t, n, b].item(), (r_hat[x, b] + later).item(), rel_tol=1e-5, abs_tol=1e-6)


def test_estimator_rows_route_each_method_to_its_own_credit():
    task, policy, episodes = chain_episodes()
    T, N = episodes["actions"].shape
    g = torch.Generator().manual_seed(3)
    V, r_hat = torch.randn(task.num_states, generator=g), torch.randn(task.num_states, 2, generator=g)
    h = torch.softmax(torch.randn(T, N, 2, generator=g), -1)
    h_pairs = torch.softmax(torch.randn(T, T, N, 2, generator=g), -1)
    rows = {m: tasks.estimator_rows(m, episodes, policy, V, r_hat, h_pairs if m.startswith("state") else h, 0.02)
            for m in ("REINFORCE (no baseline)", "PG + V baseline", "return HCA (learned h)", "state HCA (exact h)")}
    Z = episodes["returns"]
    torch.testing.assert_close(rows["REINFORCE (no baseline)"], hind.score_rows(episodes, policy, Z))
    torch.testing.assert_close(rows["PG + V baseline"], hind.score_rows(episodes, policy, Z - V[episodes["states"]]))
    torch.testing.assert_close(rows["return HCA (learned h)"],
                               hind.score_rows(episodes, policy, hind.return_hca_psi(episodes, policy, h, 0.02)))
    torch.testing.assert_close(rows["state HCA (exact h)"],
                               tasks.all_action_rows(episodes, policy, tasks.state_hca_q(episodes, policy, h_pairs, r_hat)))


def test_hindsight_examples_pair_each_step_with_its_return_or_each_later_state():
    _, _, episodes = chain_episodes()
    s, a, alive = episodes["states"], episodes["actions"], episodes["alive"]
    T, N = s.shape
    assert all(torch.equal(mine, theirs) for mine, theirs in zip(tasks.hindsight_examples(episodes, "return"),
                                                                hind.return_examples(episodes)))
    x, later, action = tasks.hindsight_examples(episodes, "state")
    # the action at t, predicted from X_t and a state X_k that followed it (k > t, before the end)
    expected = sorted((s[t, n].item(), s[k, n].item(), a[t, n].item()) for t in range(T) for k in range(t + 1, T)
                      for n in range(N) if alive[k, n])
    assert sorted(zip(x.tolist(), later.tolist(), action.tolist())) == expected


def test_state_hindsight_reads_one_hot_states_with_the_chapters_layers():
    torch.manual_seed(0)
    task = tasks.shortcut_chain(4, 0.5)  # 5 states
    model = tasks.StateHindsight(task, 8)
    x, y = torch.tensor([0, 3, 4]), torch.tensor([1, 1, 2])
    inputs = torch.cat([torch.nn.functional.one_hot(x, 5), torch.nn.functional.one_hot(y, 5)], -1).float()
    torch.testing.assert_close(model(x, y), model.net(inputs))
    chapter = hind.Hindsight(task, 8)  # the same layers, one input wider where the chapter's has the return
    assert [p.shape[0] for p in model.parameters()] == [p.shape[0] for p in chapter.parameters()]
    assert model.net[0].in_features == chapter.net[0].in_features + 4
    learner = tasks.hindsight_learner(hind.Args(hca_hidden=8), task, "state", "cpu")
    assert isinstance(learner.model, tasks.StateHindsight)
    assert isinstance(tasks.hindsight_learner(hind.Args(hca_hidden=8), task, "return", "cpu").model, hind.Hindsight)


def test_learned_state_pairs_condition_on_the_step_and_each_later_state():
    torch.manual_seed(0)
    task, _, episodes = chain_episodes()
    learner = tasks.hindsight_learner(hind.Args(hca_hidden=8), task, "state", "cpu")
    pairs = tasks.learned_state_pairs(learner, episodes)
    s = episodes["states"]
    T, N = s.shape
    for t in range(T):
        for k in range(T):
            torch.testing.assert_close(pairs[t, k], learner.probabilities(s[t], s[k]))
    assert torch.equal(tasks.learned_h(learner, "state", episodes), pairs)


def test_learned_state_hindsight_finds_the_decisive_action_on_the_delayed_effect():
    torch.manual_seed(0)
    task = hind.delayed_effect(2, 0.5)
    policy = torch.full((task.num_states, 2), 0.5)
    episodes = hind.sample_episodes(task, policy, 256, torch.Generator().manual_seed(0))
    learner = tasks.hindsight_learner(hind.Args(hca_hidden=16, hca_batch=128), task, "state", "cpu")
    learner.fit(tasks.hindsight_examples(episodes, "state"), 150)
    # from the start, a later state with the key reveals action 1, one without it action 0
    h_start = learner.probabilities(torch.tensor([0, 0]), torch.tensor([2 + 1, 2 * 2]))
    torch.testing.assert_close(h_start, torch.eye(2).flip(0), atol=0.1, rtol=0)
    # in the corridor, the action changes nothing that follows: h ≈ π
    h_corridor = learner.probabilities(torch.tensor([2, 3]), torch.tensor([4, 5]))
    torch.testing.assert_close(h_corridor, torch.full((2, 2), 0.5), atol=0.15, rtol=0)


# --------------------------------------------------------------------------------------------
# The learning study: the loop as recorded by spies, and its copy of 03's running mean
# --------------------------------------------------------------------------------------------
def test_running_mean_moves_visited_entries_toward_their_batch_mean():
    table = torch.zeros(2, 2)
    # entry (1, 0) is visited twice (targets 1 and 3: mean 2), entry (0, 1) once, the rest never
    tasks.running_mean(table, torch.tensor([2, 2, 1]), torch.tensor([1.0, 3.0, -1.0]), rate=0.5)
    torch.testing.assert_close(table, torch.tensor([[0.0, -0.5], [1.0, 0.0]]))
    per_entry = torch.tensor([1.0, 1.0, 0.25, 0.25])  # a rate per entry, as for learners sharing a table
    tasks.running_mean(table, torch.tensor([1, 2]), torch.tensor([0.5, 3.0]), rate=per_entry)
    torch.testing.assert_close(table, torch.tensor([[0.0, 0.5], [1.5, 0.0]]))


@pytest.mark.parametrize("per_entry_rate", [False, True])
def test_running_mean_is_a_copy_of_03s(per_entry_rate):
    g = torch.Generator().manual_seed(int(per_entry_rate))
    for _ in range(20):
        table = torch.randn(6, 3, generator=g)
        index = torch.randint(0, 12, (30,), generator=g)  # repeats, and entries 12 .. 17 never visited
        targets = torch.randn(30, generator=g) * 5
        rate = torch.rand(18, generator=g) if per_entry_rate else float(torch.rand(1, generator=g))
        ours, theirs = table.clone(), table.clone()
        tasks.running_mean(ours, index, targets, rate)
        rudder.running_mean(theirs, index, targets, rate)
        assert torch.equal(ours, theirs)
        assert torch.equal(ours.view(-1)[12:], table.view(-1)[12:]) and not torch.equal(ours, table)


def test_optimal_return_is_the_best_policys_exact_return():
    chain, delayed, bandit = tasks.make_tasks(tasks.Args(chain=5, corridor=3, crossover=0.2), 0.3)
    assert tasks.optimal_return(chain) == pytest.approx(-2)  # the shortcut at once
    assert tasks.optimal_return(delayed) == pytest.approx(1)  # take the key
    assert tasks.optimal_return(bandit) == pytest.approx(0.8)  # arm 1, which pays 1 with probability 0.8
    best = torch.zeros(delayed.num_states, 2)
    best[0, 1] = 50.0  # take the key, then anything
    assert tasks.exact_return(delayed, best) == pytest.approx(tasks.optimal_return(delayed))


def test_learn_is_reproducible_from_its_seed():
    args = tasks.Args(smoke=True, learn_iters=2, learn_batch=4, refit_steps=2)
    task = hind.delayed_effect(2, 1.0)
    first = tasks.learn(args, task, "return HCA (learned h)", seed=1, device="cpu")
    torch.manual_seed(99)  # whatever the global generator did before
    assert tasks.learn(args, task, "return HCA (learned h)", seed=1, device="cpu") == first


def naive_running_mean(table: torch.Tensor, keys: list, targets: list, rate: float) -> torch.Tensor:
    """Each visited entry moves by `rate` toward the mean of its targets; a loop over entries."""
    table = table.clone()
    flat = table.view(-1)
    for key in set(keys):
        mine = [target for k, target in zip(keys, targets) if k == key]
        flat[key] += rate * (sum(mine) / len(mine) - flat[key])
    return table


@pytest.mark.parametrize("method", tasks.LEARNERS)
def test_learn_ascends_the_estimated_gradient_and_refits_h_on_the_recent_batches(monkeypatch, method):
    args = tasks.Args(smoke=True, learn_iters=3, learn_batch=5, hindsight_batches=2, refit_steps=2, pg_lr=0.7,
                      value_rate=0.3)
    h_min = tasks.chapter_args(args).h_min
    task = hind.delayed_effect(2, 0.5)
    S, A = task.num_states, task.num_actions
    sampled, fits, rows_seen = [], [], []
    real_sample, real_fit, real_rows = hind.sample_episodes, hind.HindsightLearner.fit, tasks.estimator_rows

    def sample_spy(task_, policy, num, generator):
        episodes = real_sample(task_, policy, num, generator)
        sampled.append((policy.clone(), num, episodes))
        return episodes

    def fit_spy(self, examples, steps):
        fits.append((self, examples, steps))
        real_fit(self, examples, steps)

    def rows_spy(method_, episodes, policy, V, r_hat, h, h_min_):
        expected_h = None
        if fits:  # what the classifier just refitted says about these episodes
            learner = fits[-1][0]
            expected_h = (learner.probabilities(episodes["states"], episodes["returns"]) if method_.startswith("return")
                          else tasks.learned_state_pairs(learner, episodes))
        rows = real_rows(method_, episodes, policy, V, r_hat, h, h_min_)
        rows_seen.append((method_, episodes, policy.clone(), V.clone(), r_hat.clone(), h, expected_h, h_min_, rows))
        return rows

    monkeypatch.setattr(hind, "sample_episodes", sample_spy)
    monkeypatch.setattr(hind.HindsightLearner, "fit", fit_spy)
    monkeypatch.setattr(tasks, "estimator_rows", rows_spy)
    curve = tasks.learn(args, task, method, seed=3, device="cpu")

    logits, V, r_hat = torch.zeros(S, A), torch.zeros(S), torch.zeros(S, A)
    assert len(curve) == 4 and curve[0] == tasks.exact_return(task, logits)
    assert len(fits) == (3 if "HCA" in method else 0)
    condition = "state" if method.startswith("state") else "return"
    for i in range(3):
        policy = torch.softmax(logits, 1)
        sampled_policy, num, episodes = sampled[i]
        torch.testing.assert_close(sampled_policy, policy)
        assert num == 5
        method_, rows_episodes, rows_policy, rows_V, rows_r_hat, h, expected_h, h_min_, rows = rows_seen[i]
        assert method_ == method and rows_episodes is episodes and h_min_ == h_min
        torch.testing.assert_close(rows_policy, policy)
        torch.testing.assert_close(rows_V, V)
        torch.testing.assert_close(rows_r_hat, r_hat)
        if "HCA" in method:
            learner, fitted_on, steps = fits[i]
            assert learner is fits[0][0] and steps == 2  # one classifier, refitted after each batch
            recent = [e for _, _, e in sampled[max(0, i - 1):i + 1]]  # on the last 2 batches
            merged = {key: torch.cat([e[key] for e in recent], 1) for key in episodes}
            assert all(torch.equal(a, b) for a, b in zip(fitted_on, tasks.hindsight_examples(merged, condition)))
            torch.testing.assert_close(h, expected_h)
        else:
            assert h is None
        # gradient ascent on J; V and r̂ follow the returns and rewards of the steps that happened
        logits = logits + 0.7 * hind.per_episode_gradients(episodes, rows, S).mean(0)
        alive = episodes["alive"]
        states, actions = episodes["states"][alive].tolist(), episodes["actions"][alive].tolist()
        V = naive_running_mean(V, states, episodes["returns"][alive].tolist(), 0.3)
        r_hat = naive_running_mean(r_hat, [x * A + a for x, a in zip(states, actions)],
                                   episodes["rewards"][alive].tolist(), 0.3)
        assert math.isclose(curve[i + 1], tasks.exact_return(task, logits), rel_tol=1e-5, abs_tol=1e-6)


def test_learning_with_a_baseline_improves_the_policy_on_the_shortcut():
    args = tasks.Args(learn_iters=15, learn_batch=16)
    curve = tasks.learn(args, tasks.shortcut_chain(4, 0.3), "PG + V baseline", seed=0, device="cpu")
    assert curve[-1] > curve[0] + 0.4  # from -2.75 (uniform) toward -2 (the shortcut)


# --------------------------------------------------------------------------------------------
# HER: the exact references (a random policy's success, which episodes relabelling rewards)
# --------------------------------------------------------------------------------------------
def test_random_success_is_exact_for_one_and_two_bits_and_matches_sampled_random_play():
    # one bit: success iff the start differs from the goal (1/2); two bits, by the start distance d
    # (1/4, 1/2, 1/4 for d = 0, 1, 2): d = 0 and 2 reach the goal at the 2nd flip with probability 1/2,
    # d = 1 at the 1st flip with probability 1/2 (else it is at d = 2 after the 1st flip and at 1 after the 2nd)
    assert sweep.random_success(1) == 0.5
    assert sweep.random_success(2) == pytest.approx(0.25 * 0.5 + 0.5 * 0.5 + 0.25 * 0.5)
    for n in (4, 5):
        played = hind.play_bitflip(hind.QNetwork(n, 4), 100_000, n, 1.0, torch.Generator().manual_seed(n))
        p = sweep.random_success(n)
        assert abs(played["success"].float().mean().item() - p) < 4 * math.sqrt(p * (1 - p) / 100_000)
    assert sweep.random_success(20) < 1e-4  # the sparse regime: a random walk almost never meets its goal


def test_goal_support_holds_exactly_the_goal_steps_the_chapter_draws():
    bits, generator = 5, torch.Generator().manual_seed(0)
    length = torch.randint(1, bits + 1, (20_000,), generator=generator)
    step = (torch.rand(20_000, generator=generator) * length).long()
    for strategy in sweep.STRATEGIES:  # "random"'s draws within its own episode: the length is the episode's
        goal = hind.hindsight_goal_steps(step, length, strategy, 4, generator)
        drawn = goal >= 0
        support = sweep.goal_support(length, bits, strategy)
        assert support[torch.arange(20_000)[drawn], step[drawn], goal[drawn]].all()  # every draw is allowed
        # and every allowed (length, t, t') is drawn: compare the sets
        seen = set(zip(length[drawn].tolist(), step[drawn].tolist(), goal[drawn].tolist()))
        allowed = {(L, t, g) for L in range(1, bits + 1) for t in range(L) for g in range(bits)
                   if sweep.goal_support(torch.tensor([L]), bits, strategy)[0, t, g]}
        assert seen == allowed
    assert not sweep.goal_support(length, bits, "none").any()


def bitflip_episode(start: list, goal: list, flips: list) -> dict:
    """One episode in play_bitflip's layout (batch of one): the state stays after the goal."""
    bits, states, done = len(start), [torch.tensor(start)], False
    for i in flips:
        state = states[-1].clone()
        if not done:
            state[i] ^= 1
            done = bool((state == torch.tensor(goal)).all())
        states.append(state)
    states += [states[-1]] * (bits + 1 - len(states))
    length = next((t + 1 for t in range(len(flips)) if (states[t + 1] == torch.tensor(goal)).all()), len(flips))
    return {"states": torch.stack(states)[None], "goals": torch.tensor([goal]), "lengths": torch.tensor([length]),
            "actions": torch.tensor([flips + [0] * (bits - len(flips))])}


def test_rewarded_episodes_turn_a_failure_into_a_success_only_with_relabelling():
    failed = bitflip_episode([0, 0, 0], [1, 1, 1], [0, 1, 0])  # 100, 110, 010: never 111
    succeeded = bitflip_episode([0, 0, 0], [1, 0, 0], [0])  # 100 = the goal after one flip
    for strategy, expected in (("none", False), ("future", True), ("final", True), ("episode", True),
                               ("random", True)):
        assert sweep.rewarded_episodes(failed, strategy).tolist() == [expected]
        assert sweep.rewarded_episodes(succeeded, strategy).tolist() == [True]
    # "final" relabels with the last state only: a transition reaching an earlier state does not count
    # unless it is the last; here the first transition (to 100) is rewarded for "future" alone
    assert sweep.goal_support(failed["lengths"], 3, "final")[0, 0].tolist() == [False, False, True]


def test_random_policy_measures_as_the_learners_are_and_relabelling_rewards_every_episode():
    args = sweep.Args(smoke=True, bits="3,8", her_seeds=3, seed=5)  # the chapter's smoke values: 16 episodes
    random = sweep.random_policy(args, "cpu")
    chapter = sweep.chapter_args(args)
    for n in (3, 8):
        replay = [hind.play_bitflip(hind.QNetwork(n, 4), chapter.eval_episodes, n, 1.0,
                                    torch.Generator().manual_seed(seed + 10_000))["success"].float().mean().item()
                  for seed in (5, 6, 7)]  # the evaluation's generator of each seed
        assert random[n]["success"] == pytest.approx(replay)
        shares = random[n]["rewarded"]
        assert shares["DQN"] == pytest.approx(np.mean(replay))  # its own goal only: the successes
        assert shares["DQN+HER"] == shares["DQN+HER (final)"] == 1.0
    assert random[8]["rewarded"]["DQN"] < 1  # failures to turn into signal




# --------------------------------------------------------------------------------------------
# The claim checkers, on hand-made summaries: each verdict both ways
# --------------------------------------------------------------------------------------------
def bit_runs(success: dict, reached: int = 2) -> dict:
    """{n: [one run per seed]} from each seed's final success; the curve reaches it at the
    `reached`-th of 10 evaluations, at every distance of the goal alike."""
    def run(n: int, s: float) -> dict:
        curve = [0.0] * (reached - 1) + [s] * (11 - reached)
        return {"final_success": s, "reward_share": 0.2, "curve": curve,
                "by_distance": [{"episodes": [100] * (n + 1), "successes": [round(100 * c)] * (n + 1)} for c in curve]}

    return {n: [run(n, s) for s in seeds] for n, seeds in success.items()}


GOOD_DQN = {5: [1.0, 1.0, 1.0], 20: [0.0, 0.0, 0.0], 30: [0.0, 0.0, 0.0]}
GOOD_HER = {5: [1.0, 1.0, 1.0], 20: [1.0, 1.0, 1.0], 30: [0.99, 0.98, 1.0]}
CHANCE = {5: [0.13, 0.14, 0.12], 20: [0.0, 0.0, 0.0], 30: [0.0, 0.0, 0.0]}


def her_claims(dqn=GOOD_DQN, her=GOOD_HER, final=None, chance=CHANCE, rewarded=None, final_reached=2) -> list:
    """her_claims on runs with these final successes (final: the "final" arm, absent if None)."""
    runs = {"DQN": bit_runs(dqn), "DQN+HER": bit_runs(her)}
    if final is not None:
        runs["DQN+HER (final)"] = bit_runs(final, final_reached)
    args = sweep.Args(bits=",".join(map(str, dqn)), her_seeds=3, strategies=",".join(
        ["future"] + (["final"] if final is not None else [])))
    rewarded = rewarded or {name: (1.0 if name != "DQN" else 0.0) for name in runs}
    random = {n: {"success": chance[n], "rewarded": rewarded} for n in dqn}
    return sweep.her_claims(args, runs, random)


def her_verdicts(**kwargs) -> list:
    return [c["holds"] for c in her_claims(**kwargs)]


def test_her_claims_follow_the_seeds_both_ways():
    # DQN fails beyond 15 bits, HER up to 50 (not run), density, "future" (one strategy), DQN fails where sparse, HER
    # is the ingredient (a tie at n = 5, yes at 20 and 30), the curriculum (near and far goals alike: ties)
    assert her_verdicts() == [True, None, True, None, True, True, *[None] * len(GOOD_DQN)]
    claims = her_claims()
    assert "n = 50 not run" in claims[1]["measured"]
    assert "premise not met: 1 of the 4 strategies run" in claims[3]["measured"]
    assert "n=20 +0 [+0, +0] (random 0, exactly 1.8e-05" in claims[4]["measured"]
    assert "DQN is no better than random from n = 20 on" in claims[0]["measured"]
    # DQN above the random policy at n = 20 on every seed: it does not fail there
    learning = {**GOOD_DQN, 20: [0.1, 0.12, 0.11]}
    assert her_verdicts(dqn=learning)[0:5:4] == [False, False]
    # too noisy to tell: the interval holds 0 but reaches past DQN+HER's gain over random
    noisy = {**GOOD_DQN, 30: [0.0, 0.3, 0.0]}
    assert her_verdicts(dqn=noisy)[0:5:4] == [True, True]  # DQN+HER's gain ≈ 0.99 bounds the interval
    assert her_verdicts(dqn=noisy, her={**GOOD_HER, 30: [0.4, 0.4, 0.4]})[0:5:4] == [None, None]
    # HER the ingredient: only where DQN fails (n = 5, where it learns, drops out), both halves at each n
    assert "Not at n = 5, where DQN learns" in claims[5]["measured"]
    assert her_verdicts(her={**GOOD_HER, 5: [0.5, 0.4, 0.6]})[5] is True  # HER worse where DQN learns: not said
    at_chance, chance = {**GOOD_DQN, 20: [0.02, 0.03, 0.025]}, {**CHANCE, 20: [0.02, 0.03, 0.025]}
    worse = {**GOOD_HER, 20: [0.0, 0.0, 0.0]}  # below DQN where DQN is at chance: no there, yes at 30: mixed
    assert her_verdicts(dqn=at_chance, her=worse, chance=chance)[5] is None
    assert her_verdicts(dqn=at_chance, her={**worse, 30: [0.0] * 3}, chance=chance)[5] is False
    learning = {**GOOD_DQN, 20: [0.5, 0.6, 0.55], 30: [0.5, 0.6, 0.55]}  # DQN learns at every n: premise not met
    premise = her_claims(dqn=learning)[5]
    assert premise["holds"] is None and premise["measured"].startswith("premise not met")
    # n = 50 run: "up to 50" is DQN+HER against DQN there
    at_50 = {"dqn": {5: [1.0] * 3, 50: [0.0] * 3}, "chance": {5: [0.1] * 3, 50: [0.0] * 3}}
    assert her_verdicts(her={5: [1.0] * 3, 50: [0.9, 0.8, 0.95]}, **at_50)[1] is True
    assert her_verdicts(her={5: [1.0] * 3, 50: [0.0] * 3}, **at_50)[1] is None


def test_sparse_claim_speaks_of_every_n_where_random_exploration_almost_never_reaches_the_goal():
    # the premise per n: a random policy's success a zero (interval holds 0, below DQN+HER's success);
    # n = 5 (random 0.13) is outside it, so DQN learning there says nothing; DQN fails at 20 and 30
    claims = her_claims()
    sparse = claims[4]
    assert sparse["holds"] is True and "n=5 +0.13 [" in sparse["measured"]
    assert "minus a random policy's at n = 20, 30," in sparse["measured"]
    assert sparse["measured"].endswith("DQN is no better than random from n = 20 on")
    # random play never reaching the goal at n = 5 puts it inside: there DQN learns, so no
    assert her_verdicts(chance={**CHANCE, 5: [0.0] * 3})[4] is False
    # random play reaching the goal measurably at n = 20: out of the premise, DQN's success there not asked
    reached = {**CHANCE, 20: [0.01, 0.012, 0.011]}
    assert her_verdicts(dqn={**GOOD_DQN, 20: [0.3] * 3}, chance=reached)[4] is True
    assert "minus a random policy's at n = 30," in her_claims(chance=reached)[4]["measured"]
    # the interval holds 0 but reaches past DQN+HER's success: not shown, n = 30 drops out
    unclear = her_claims(her={**GOOD_HER, 30: [0.2] * 3}, chance={**CHANCE, 30: [0.0, 0.3, 0.0]})[4]
    assert "minus a random policy's at n = 20," in unclear["measured"]
    # random play reaching the goal at every n: premise not met
    everywhere = her_claims(chance={n: [0.1, 0.12, 0.11] for n in CHANCE})[4]
    assert everywhere["holds"] is None and everywhere["measured"].startswith("premise not met")


def test_density_claim_is_exact_every_relabelled_episode_must_hold_a_reward():
    assert her_verdicts(rewarded={"DQN": 0.0, "DQN+HER": 1.0})[2] is True
    assert her_verdicts(rewarded={"DQN": 0.0, "DQN+HER": 0.999})[2] is False
    premise = her_claims(rewarded={"DQN": 1.0, "DQN+HER": 1.0})[2]  # no failed episode to turn
    assert premise["holds"] is None and premise["measured"].startswith("premise not met")


def strategy_claim(success: dict) -> dict:
    """strategy_claim on {n: {strategy: each seed's final success}}, all four strategies run."""
    bits = list(success)
    her = {sweep.arm_name(s): {n: [{"final_success": v} for v in success[n][s]] for n in bits} for s in sweep.STRATEGIES}
    args = sweep.Args(bits=",".join(map(str, bits)), her_seeds=3, strategies="random,episode,final,future")
    return sweep.strategy_claim(args, her)


def test_strategy_claim_puts_future_against_each_other_strategy_seed_by_seed():
    ahead = {"future": [0.3, 0.35, 0.32], "final": [0.1, 0.12, 0.09], "episode": [0.2, 0.25, 0.22],
             "random": [0.0, 0.0, 0.0]}
    claim = strategy_claim({40: ahead})
    assert claim["holds"] is True
    each = ", ".join(f"minus {s} " + common.seed_verdict(np.subtract(ahead["future"], ahead[s]))[1]
                     for s in ("final", "episode", "random"))
    assert f"n=40 {each} (mean final success: future 0.323, final 0.103, episode 0.223, random 0.000)" in claim["measured"]
    # a different strategy leads on each seed, none on every seed: against each one, none rules "future" out
    # (against the per-seed maximum of the others, -0.1, -0.05, +0.32, the comparison would lean against it)
    split = {**ahead, "final": [0.4, 0.0, 0.0], "episode": [0.0, 0.4, 0.0]}
    claim = strategy_claim({40: split})
    assert claim["holds"] is None and "minus final " + common.seed_verdict([-0.1, 0.35, 0.32])[1] in claim["measured"]
    # "future" above two but not clearly above the third: not yet "best"
    behind_one = {**ahead, "final": [0.35, 0.3, 0.32]}
    assert strategy_claim({40: behind_one})["holds"] is None
    # "episode" ahead on every seed: no; ties (all at the floor) tell nothing, and a tendency is kept
    assert strategy_claim({40: {**ahead, "episode": [0.5, 0.55, 0.6]}})["holds"] is False
    floor = dict.fromkeys(sweep.STRATEGIES, [0.0, 0.0, 0.0])
    assert strategy_claim({50: floor})["holds"] is None
    assert strategy_claim({40: ahead, 50: floor})["holds"] is True
    # fewer than the four strategies: premise not met
    assert her_verdicts(final=GOOD_HER)[3] is None
    assert "premise not met: 2 of the 4 strategies run" in her_claims(final=GOOD_HER)[3]["measured"]


def distance_run(near: list, far: list, n: int = 4) -> dict:
    """A run whose evaluations split as given: near goals' success (d < n/2) and far goals' (d > n/2),
    100 goals at each distance; the median distance d = n/2 (even n) succeeds every time, to be left out."""
    return {"by_distance": [{"episodes": [100] * (n + 1), "successes": [
        round(100 * a) if d < n / 2 else round(100 * b) if d > n / 2 else 100 for d in range(n + 1)]}
        for a, b in zip(near, far)]}


def test_near_far_curves_pool_the_distances_on_either_side_of_n_over_2():
    curves = sweep.near_far_curves(distance_run([0.1, 0.5], [0.0, 0.3]))
    np.testing.assert_allclose(curves["near"], [0.1, 0.5])
    np.testing.assert_allclose(curves["far"], [0.0, 0.3])
    # odd n and unequal counts: a pooled rate over d < 2.5 and d > 2.5, against a loop
    rng = np.random.default_rng(0)
    episodes = rng.integers(0, 30, (3, 6))
    successes = rng.integers(0, episodes + 1)
    run = {"by_distance": [{"episodes": e.tolist(), "successes": s.tolist()} for e, s in zip(episodes, successes)]}
    curves = sweep.near_far_curves(run)
    for i in range(3):
        assert curves["near"][i] == pytest.approx(sum(successes[i, :3]) / sum(episodes[i, :3]))
        assert curves["far"][i] == pytest.approx(sum(successes[i, 3:]) / sum(episodes[i, 3:]))
    empty = {"by_distance": [{"episodes": [5, 0, 0, 0, 0], "successes": [5, 0, 0, 0, 0]}]}
    assert np.isnan(sweep.near_far_curves(empty)["far"]).all()  # no far goal drawn


def test_half_time_interpolates_to_half_the_final_success():
    # half of 0.8 is 0.4: between 0.2 (half the budget) and 0.6 (three quarters), halfway
    assert sweep.half_time(np.array([0.0, 0.2, 0.6, 0.8])) == pytest.approx(0.625)
    assert sweep.half_time(np.array([0.9, 1.0])) == 0.5  # there at the first evaluation
    assert sweep.half_time(np.array([0.0, 1.0, 0.5])) == pytest.approx(1 / 3 + 0.25 / 3)  # the first crossing
    assert np.isnan(sweep.half_time(np.array([0.0, 0.0])))  # nothing learned
    assert np.isnan(sweep.half_time(np.array([np.nan, 1.0])))


def test_curriculum_claims_ask_at_each_n_whether_near_goals_are_learned_before_far_ones():
    args = sweep.Args(bits="4,6", her_seeds=3)
    early = [0.0, 0.6, 1.0, 1.0]
    late = {0: [0.0, 0.1, 0.9, 1.0], 1: [0.0, 0.2, 0.8, 1.0], 2: [0.0, 0.0, 0.7, 1.0]}

    def claims(near: dict, far: dict, far_at_6: dict | None = None) -> list[dict]:
        """Each seed's near and far curves at n = 4, and at n = 6 (far_at_6 replacing far there)."""
        far_at = {4: far, 6: far_at_6 or far}
        runs = {n: [distance_run(near[s], far_at[n][s], n) for s in range(3)] for n in (4, 6)}
        return sweep.curriculum_claims(args, {"DQN+HER": runs})

    first = dict.fromkeys(range(3), early)
    near_first = claims(first, late)
    assert [c["holds"] for c in near_first] == [True, True]
    assert [c["claim"][-8:] for c in near_first] == ["at n = 4", "at n = 6"] and "n=4 +" in near_first[0]["measured"]
    gaps = [sweep.half_time(np.array(late[s])) - sweep.half_time(np.array(early)) for s in range(3)]
    assert "n=4 " + common.seed_verdict(gaps)[1] in near_first[0]["measured"]
    assert [c["holds"] for c in claims(late, first)] == [False, False]
    # far goals never learned at n = 6: premise not met there, n = 4 decided
    never = dict.fromkeys(range(3), [0.0, 0.0, 0.0, 0.0])
    partly = claims(first, late, far_at_6=never)
    assert [c["holds"] for c in partly] == [True, None] and partly[1]["measured"].startswith("premise not met")


def hca_run(pg: float, state: float | None, ret: float, profile=None, start=(1.0, 4.0, 0.9, 1.0),
            revealed: float = 1.0, gap: float = 0.2) -> dict:
    """study_one's result: the variances of PG + V and the learned HCAs; `start`: REINFORCE's and
    state HCA's (exact h) variance at the first action and in all (first, total, first, total);
    `gap`: first_action_gap."""
    estimators = {"PG + V baseline": {"variance": pg}, "return HCA (learned h)": {"variance": ret, "start_state_variance": 0.0},
                  "REINFORCE (no baseline)": {"start_state_variance": start[0], "variance": start[1]},
                  "state HCA (exact h)": {"start_state_variance": start[2], "variance": start[3]}}
    if state is not None:
        estimators["state HCA (learned h)"] = {"variance": state}
    profile = profile or {"state HCA (learned h)": [1.0, 0.0, 0.0, 5.0],  # the corridor's elevation 0
                          "return HCA (learned h)": [0.5, 0.0, 0.0, 5.0], "return HCA (exact h)": [0.6, 0.0, 0.0, 5.0]}
    return {"estimators": estimators, "hindsight_ratio": profile, "hindsight_elevation": profile,
            "first_action_revealed": revealed, "first_action_gap": gap}


def seeds_of(*runs: tuple) -> list[dict]:
    return [hca_run(*r) for r in runs]


def variance_verdicts(low: list, high: list) -> list:
    """The two variance claims of one task from (PG, state, return) per seed at σ = 0.5 and 2."""
    by_sigma = tasks.variances({0.5: seeds_of(*low), 2.0: seeds_of(*high)})
    return [c["holds"] for c in tasks.variance_claims("delayed effect", by_sigma)]


def test_variance_claims_decide_the_ratio_to_pg_over_the_seeds():
    low = [(4.0, 2.0, 2.0), (4.2, 2.0, 2.1), (3.8, 2.0, 1.9)]  # 2x
    high = [(40.0, 4.0, 5.0), (42.0, 4.1, 5.0), (38.0, 4.0, 4.9)]  # 8-10x
    assert variance_verdicts(low, high) == [True, True]
    assert variance_verdicts(low, low) == [True, None]  # the same ratio at both σ: no growth the seeds can see
    below = [(4.0, 5.0, 5.0), (4.0, 5.1, 5.0), (4.0, 4.9, 5.2)]  # 0.8x at σ = 0.5
    assert variance_verdicts(below, high)[0] is False
    assert variance_verdicts(high, low)[1] is False  # the edge shrinks
    spread = [(4.0, 2.0, 2.0), (4.0, 8.0, 8.0), (4.0, 1.0, 1.0)]  # 2x, 0.5x, 4x: the interval holds 1
    assert variance_verdicts(spread, high)[0] is None
    claims = tasks.variance_claims("delayed effect", tasks.variances({0.5: seeds_of(*low), 2.0: seeds_of(*high)}))
    assert claims[0]["claim"] == "delayed effect: HCA's gradient has a lower variance than PG with a value baseline"
    assert "state HCA: σ=0.5 2x [" in claims[0]["measured"] and "over 3 seeds" in claims[0]["measured"]


def test_conditioning_claim_needs_return_hca_lower_at_every_sigma():
    def verdict(low: list, high: list) -> bool | None:
        by_sigma = tasks.variances({0.5: seeds_of(*low), 2.0: seeds_of(*high)})
        return tasks.conditioning_claim("delayed effect", by_sigma)["holds"]

    lower = [(4.0, 2.0, 1.0), (4.0, 2.1, 1.0), (4.0, 1.9, 1.1)]
    higher = [(4.0, 1.0, 2.0), (4.0, 1.0, 2.1), (4.0, 1.1, 1.9)]
    noisy = [(4.0, 1.0, 2.0), (4.0, 3.0, 1.0), (4.0, 2.0, 1.0)]
    assert verdict(lower, lower) is True
    assert verdict(lower, higher) is False and verdict(higher, higher) is False
    assert verdict(lower, noisy) is None
    claim = tasks.conditioning_claim("shortcut", tasks.variances({0.5: seeds_of(*lower), 2.0: seeds_of(*lower)}))
    assert claim["claim"] == "shortcut: return-conditional HCA is preferable to state-conditional HCA"
    assert "σ=0.5 1.03 vs 2, +0.967 [" in claim["measured"]


def test_decisive_claim_compares_the_first_action_with_the_corridor_per_seed():
    def verdict(*profiles: dict) -> bool | None:
        return tasks.decisive_claim([hca_run(1.0, 1.0, 1.0, profile=p) for p in profiles], 0.25)["holds"]

    sharp = {"state HCA (learned h)": [1.0, 0.01, -0.01, 9.0], "return HCA (learned h)": [0.5, 0.02, -0.01, 9.0],
             "state HCA (exact h)": [0.0, 1.0, 1.0, 0.0]}  # the exact h is not judged; the last step is not corridor
    sharp2 = {**sharp, "return HCA (learned h)": [0.45, -0.01, 0.0, 0.0]}
    sharp3 = {**sharp, "return HCA (learned h)": [0.48, 0.0, -0.01, 0.0]}
    assert verdict(sharp, sharp2, sharp3) is True
    flat = {**sharp, "return HCA (learned h)": [0.05, 0.1, 0.1, 9.0]}  # below the corridor on every seed
    assert verdict(flat, flat, flat) is False
    lowered = {**sharp, "return HCA (learned h)": [-0.5, -0.9, -0.8, 9.0]}  # above the corridor, but below 1
    assert verdict(lowered, lowered, lowered) is False
    assert verdict(sharp, flat, sharp2) is None
    # the irrelevant actions elevated too, if far less than the decisive one: their ratio is not near 1
    raised = {**sharp, "return HCA (learned h)": [0.5, 0.05, 0.1, 9.0]}
    raised2 = {**sharp, "return HCA (learned h)": [0.5, 0.06, 0.1, 9.0]}
    assert verdict(raised, raised2, raised) is False
    # the corridor's interval holds 0 but reaches past the decisive action's elevation: cannot tell
    wide = [{**sharp, "return HCA (learned h)": [0.1, c, c, 9.0]} for c in (0.3, -0.3, 0.02)]
    assert verdict(*wide) is None
    measured = tasks.decisive_claim([hca_run(1.0, 1.0, 1.0, profile=p) for p in (sharp, sharp2, sharp3)],
                                    0.25)["measured"]
    first, above, corridor = (common.seed_verdict(v)[1] for v in
                              ([0.5, 0.45, 0.48], [0.495, 0.455, 0.485], [0.005, -0.005, -0.005]))
    assert f"return HCA (learned h) {first}, {above}, corridor {corridor}" in measured


def test_first_action_shares_split_the_trace_between_the_first_state_and_the_rest():
    run = hca_run(1.0, 1.0, 1.0, start=(2.0, 10.0, 1.5, 2.3))
    assert tasks.first_action_shares(run) == pytest.approx((0.75, 0.8 / 8.0))


def test_degrades_claim_holds_where_state_hcas_first_action_term_is_reinforces_in_every_episode():
    def claim(gaps: list, revealed=1.0, starts=((1.0, 10.0, 0.95, 1.0),) * 3) -> dict:
        runs = [hca_run(1.0, 1.0, 1.0, start=s, revealed=revealed, gap=g) for s, g in zip(starts, gaps)]
        return tasks.degrades_claim({0.5: runs, 2.0: runs})

    same = claim([0.1, 0.3, 0.02])  # within float32 rounding on every seed
    assert same["holds"] is True
    assert same["claim"] == "when the later state reveals the action, state HCA degrades toward REINFORCE"
    assert "σ=0.5 0.3, σ=2 0.3" in same["measured"] and "σ=0.5 0.95 vs 0.0" in same["measured"]  # shares beside
    # one episode of one seed beyond rounding: the terms differ, whatever the shares say
    assert claim([0.1, 3.0, 0.02])["holds"] is False
    premise = claim([0.1, 0.3, 0.02], revealed=0.5)
    assert premise["holds"] is None and premise["measured"].startswith("premise not met")


def test_first_action_gap_is_zero_in_rounding_units_where_the_later_state_reveals_the_action():
    task = hind.delayed_effect(4, 0.5)
    policy = torch.full((task.num_states, 2), 0.5)
    episodes = hind.sample_episodes(task, policy, 64, torch.Generator().manual_seed(3))
    revealing = tasks.exact_state_pairs(tasks.exact_state_hindsight(task, policy), episodes)
    assert tasks.revealed_share(revealing, episodes) == 1.0
    assert tasks.first_action_gap(episodes, policy, revealing) <= 1
    # h = π says nothing about the action: state HCA's term is 0, REINFORCE's is not
    assert tasks.first_action_gap(episodes, policy, torch.full_like(revealing, 0.5)) > 1e3


def test_revealed_share_counts_one_hot_hindsight_at_the_first_step_over_the_later_steps_alive():
    h = torch.full((3, 3, 2, 2), 0.5)  # (t, k, episode, action)
    h[0, 1, 0] = torch.tensor([0.0, 1.0])
    h[0, 2, 0] = torch.tensor([1.0, 0.0])
    h[0, 1, 1] = torch.tensor([0.0, 1.0])  # episode 1 ends after step 1: step 2 is not alive
    alive = torch.tensor([[True, True], [True, True], [True, False]])
    assert tasks.revealed_share(h, {"alive": alive}) == 1.0
    h[0, 2, 0] = torch.tensor([0.3, 0.7])
    assert tasks.revealed_share(h, {"alive": alive}) == pytest.approx(2 / 3)


def test_pooled_averages_every_number_over_the_seeds():
    runs = [hca_run(2.0, 1.0, 3.0), hca_run(4.0, 3.0, 5.0)]
    for run, scale in zip(runs, (1.0, 3.0)):
        run["exact_gradient_norm2"] = 0.5
        run["hindsight_ratio"] = {"return HCA (learned h)": [scale, 2 * scale]}
    mean = tasks.pooled(runs)
    assert mean["estimators"]["PG + V baseline"] == {"variance": 3.0}
    assert mean["estimators"]["REINFORCE (no baseline)"] == {"start_state_variance": 1.0, "variance": 4.0}
    assert mean["hindsight_ratio"] == {"return HCA (learned h)": [2.0, 4.0]} and mean["exact_gradient_norm2"] == 0.5


def test_hca_claims_in_order_one_conditioning_claim_per_task_with_state_hca():
    good = [(4.0, 2.0, 1.0), (4.2, 2.1, 1.0), (3.8, 2.0, 1.1)]  # return HCA's the lowest variance, on every seed
    study = {name: {0.5: seeds_of(*good), 2.0: seeds_of(*good)} for name in ("shortcut", "delayed effect")}
    study["ambiguous bandit"] = {s: seeds_of(*[(pg, None, ret) for pg, _, ret in good]) for s in (0.5, 2.0)}
    distance = {3: seeds_of(*good), 30: seeds_of(*good)}
    claims = tasks.hca_claims(tasks.Args(sigmas="2,0.5"), study, {"shortcut": 1e-9, "delayed effect": 2e-4}, distance)
    assert [c["claim"] for c in claims[6:]] == [
        "shortcut: return-conditional HCA is preferable to state-conditional HCA",
        "delayed effect: return-conditional HCA is preferable to state-conditional HCA",
        "only the decisive action gets a significantly elevated hindsight ratio: h/π - 1 of the action taken, under "
        "what followed, lies above 0 at the decisive action and above that of the irrelevant actions, whose mean "
        "h/π - 1 is zero (their ratio stays near 1)", tasks.distance_claim(distance, 0.5)["claim"], tasks.spurious_claim(distance[3], 0.5)["claim"],
        "Q(x, a) = E_z[h(a|x,z)/π(a|x) · z]", tasks.DEGRADES, tasks.backward_search_claim(3)["claim"],
        tasks.bitflip_search_claim(3)["claim"]]
    # per task: lower than PG + V (yes), growing with σ (the same ratio at both: None); then return vs state HCA
    assert [c["holds"] for c in claims] == [True, None, True, None, True, None, True, True, True, True, True, True,
                                            True, True, False]
    assert "σ = 0.5" in claims[8]["measured"]  # the decisive action at the smallest σ


# --------------------------------------------------------------------------------------------
# The studies agree with the chapter where they measure the same thing
# --------------------------------------------------------------------------------------------
def test_study_one_on_the_delayed_effect_is_the_chapters_gradient_variances():
    """Both seed themselves from --seed: the study's variances on the delayed effect are the
    chapter's numbers, whatever ran before either."""
    args = hind.Args(corridor=3, hindsight_episodes=40, measure_episodes=200, hindsight_steps=5, hca_hidden=8, seed=4)
    chapter = hind.gradient_variances(args, 0.7, "cpu")
    torch.manual_seed(123)  # whatever the global generator did before
    run = tasks.study_one(args, hind.delayed_effect(3, 0.7), "cpu")
    study = run["estimators"]
    assert set(chapter) == set(hind.ESTIMATORS) and chapter == {m: study[m]["variance"] for m in chapter}
    assert tasks.variances({0.7: [run]})[0.7] == [{m: e["variance"] for m, e in study.items()}]
    assert run["first_action_revealed"] == 1.0  # the key's state gives the first action away


def test_gradient_study_runs_each_task_and_sigma_once_per_seed_from_the_chapters(monkeypatch):
    calls = []
    monkeypatch.setattr(tasks, "study_one", lambda args, task, device: calls.append((args, task.name)) or args.seed)
    args = tasks.Args(sigmas="0.5,2", seeds=3, seed=7)
    study = tasks.gradient_study(args, "cpu")
    names = ("shortcut", "delayed effect", "ambiguous bandit")
    assert study == {name: {0.5: [7, 8, 9], 2.0: [7, 8, 9]} for name in names}
    chapter = tasks.chapter_args(args)
    assert all(dataclasses.replace(a, seed=chapter.seed) == chapter for a, _ in calls)  # only the seed differs


def test_her_sweep_trains_every_learner_at_each_n_with_the_chapters_loop(monkeypatch):
    calls = []

    def train_spy(args, bits, strategy, seed, device):
        calls.append((args.cycles, bits, strategy, seed))
        return {"n": bits, "strategy": strategy, "seed": seed}

    monkeypatch.setattr(hind, "train_bitflip", train_spy)
    her = sweep.her_sweep(sweep.Args(bits="3,7", her_seeds=2, cycles=5, seed=9), "cpu")
    assert list(her) == ["DQN", "DQN+HER", "DQN+HER (final)"]
    assert her["DQN+HER (final)"][7] == [{"n": 7, "strategy": "final", "seed": s} for s in (9, 10)]
    assert sorted(calls) == sorted((5, n, s, seed) for n in (3, 7) for s in ("none", "future", "final")
                                   for seed in (9, 10))
    assert list(sweep.her_sweep(sweep.Args(bits="3", her_seeds=1, strategies="future"), "cpu")) == ["DQN", "DQN+HER"]
    smoke = sweep.chapter_args(common.apply_smoke(sweep.Args(smoke=True, her_seeds=4)))  # the chapter's smoke values
    assert (smoke.cycles, smoke.hidden, smoke.her_seeds) == (hind.Args.SMOKE["cycles"], hind.Args.SMOKE["hidden"], 4)


def test_success_table_reports_each_seed_and_when_the_mean_success_first_reached_90_percent():
    def run(success: float, curve: list) -> dict:
        return {"final_success": success, "reward_share": 0.1, "curve": curve}

    her = {"DQN": {5: [run(0.0, [0.0, 0.0, 0.0, 0.0]), run(0.2, [0.0, 0.0, 0.1, 0.2])]},
           "DQN+HER": {5: [run(1.0, [0.5, 0.9, 1.0, 1.0]), run(0.9, [0.5, 1.0, 0.8, 0.9])]}}
    rows = sweep.success_table(sweep.Args(bits="5"), her)["rows"]
    assert rows == [[5, "DQN", pytest.approx(0.1), "0, 0.2", pytest.approx(0.1), "–"],  # never reached
                    [5, "DQN+HER", pytest.approx(0.95), "1, 0.9", pytest.approx(0.1), "50%"]]  # 0.95 after 2 of 4


# --------------------------------------------------------------------------------------------
# CLI and a smoke run of each study
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("script,flag,value,message", [
    ("studies.04_hca_tasks", "--crossover", "0.7", "--crossover must be in (0, 0.5)"),
    ("studies.04_hca_tasks", "--sigmas", "0,1", "--sigmas must be positive"),
    ("studies.04_hca_tasks", "--chain", "1", "--chain must be at least 2"),
    ("studies.04_hca_tasks", "--value-rate", "1.5", "--value-rate must be in (0, 1]"),
    ("studies.04_hca_tasks", "--learn-seeds", "0", "--learn-seeds must be positive"),
    ("studies.04_hca_tasks", "--seeds", "0", "--seeds must be positive"),
    ("studies.04_hca_tasks", "--search-bits", "11", "--search-bits must be in [1, 10]"),
    ("studies.04_her_sweep", "--bits", "4,0", "--bits must be positive integers"),
    ("studies.04_her_sweep", "--her-seeds", "0", "--her-seeds must be positive"),
    ("studies.04_her_sweep", "--strategies", "final", "--strategies must hold future"),
    ("studies.04_her_sweep", "--strategies", "future,best", "'best' is not one of future, final, episode, random"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, script, flag, value, message):
    assert message in cli_error(script, flag, value)


def test_her_sweep_smoke_run_writes_results_and_figures(tmp_path, read_results):
    result = sweep.main(sweep.Args(smoke=True, device="cpu", out=str(tmp_path)))
    data = read_results(tmp_path / "results.json")
    assert (tmp_path / "her_success_vs_bits.png").stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"]) and len(data["claims"]) == 6 + 2  # a curriculum claim at each n: 4, 6
    assert all(np.isfinite(v) for k, v in data["metrics"].items() if k != "tables")
    rows = data["metrics"]["tables"]["success"]["rows"]  # the table is the metrics, n by n
    learners = ("DQN", "DQN+HER", "DQN+HER (final)", "DQN+HER (episode)", "DQN+HER (random)")  # the smoke run: all four
    assert [(n, name, mean) for n, name, mean, *_ in rows] == [
        (n, name, data["metrics"][f"bits{n}_success[{name}]"]) for n in (4, 6) for name in learners]
    verdicts = {c["claim"]: c["holds"] for c in data["claims"]}
    # relabelling gives every episode a rewarded transition, at every n, whichever strategy
    assert verdicts["HER turns failed episodes into signal: after relabelling, every episode is a success for some "
                    "goal"] is True
    assert all(data["random_policy"][str(n)]["rewarded"][name] == 1.0 for n in (4, 6) for name in learners[1:])
    for n in (4, 6):
        her, dqn = data["her"]["DQN+HER"][str(n)][0], data["her"]["DQN"][str(n)][0]
        assert her["reward_share"] > dqn["reward_share"] and her["episodes"] == 32 * n
        assert len(data["her"]["DQN+HER (random)"][str(n)]) == 2  # the smoke run's seeds
        # each evaluation split by the goal's distance: the chapter's smoke evaluation episodes, n + 1 distances
        by_distance = her["by_distance"]
        assert len(by_distance) == len(her["curve"]) and len(by_distance[0]["episodes"]) == n + 1
        assert [sum(e["successes"]) / sum(e["episodes"]) for e in by_distance] == pytest.approx(her["curve"])
    # the strategy claim compares all four; the curriculum claim is measured or says why not
    strategy = next(c for c in data["claims"] if "tends to work best" in c["claim"])
    assert "future" in strategy["measured"] and "random" in strategy["measured"] and "premise" not in strategy["measured"]
    curriculum = [c for c in data["claims"] if "implicit curriculum" in c["claim"]]
    assert len(curriculum) == 2
    assert all("n=" in c["measured"] or c["measured"].startswith("premise not met") for c in curriculum)
    # --reanalyse: the same claims again from what the run stored, nothing trained
    assert sweep.main(sweep.Args(reanalyse=str(tmp_path / "results.json")))["claims"] == data["claims"]


def test_hca_tasks_smoke_run_writes_results_and_figures(tmp_path, read_results):
    args = tasks.Args(smoke=True, device="cpu", out=str(tmp_path))
    result = tasks.main(args)
    data = read_results(tmp_path / "results.json")
    for name in ("hca_variance_vs_sigma.png", "hca_hindsight_ratio.png", "hca_learning_curves.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"]) and len(data["claims"]) == 15
    assert all(np.isfinite(v) for k, v in data["metrics"].items() if k != "tables")
    tables = data["metrics"]["tables"]  # the tables are the metrics: the mean of the seeds
    variance = {(row[0], row[1]): row for row in tables["variance"]["rows"]}
    runs = data["hca_gradient_study"]["delayed effect"]["2.0"]
    assert len(runs) == 2 and variance[("delayed effect", 2.0)][3] == pytest.approx(
        np.mean([r["estimators"]["PG + V baseline"]["variance"] for r in runs]))
    assert variance[("delayed effect", 2.0)][3] == data["metrics"]["delayed effect_sigma2_variance[PG + V baseline]"]
    assert variance[("ambiguous bandit", 0.5)][4] == "–"  # no state HCA without later states
    learning = {row[0]: row for row in tables["learning"]["rows"]}
    assert learning["shortcut"][1] == -2 and learning["ambiguous bandit"][3] == "–"
    # the identity Q = E_z[h/π z] holds to integration accuracy even in a tiny run
    verdicts = {c["claim"]: c["holds"] for c in data["claims"]}
    assert verdicts["Q(x, a) = E_z[h(a|x,z)/π(a|x) · z]"] is True
    # the one-step bandit has no later state: no state HCA there
    assert set(data["hca_learning"]["ambiguous bandit"]) == {"PG + V baseline", "return HCA (learned h)"}
    assert not any(m.startswith("state") for run in data["hca_gradient_study"]["ambiguous bandit"]["0.5"]
                   for m in run["estimators"])
    # every learning curve starts at the exact return of the uniform policy
    uniform = {task.name: tasks.exact_return(task, torch.zeros(task.num_states, 2))
               for task in tasks.make_tasks(common.apply_smoke(args), 1.0)}
    for name, by_method in data["hca_learning"].items():
        assert all(math.isclose(curve[0], uniform[name], rel_tol=1e-6) for curves in by_method.values()
                   for curve in curves)


def test_frontier_sizes_count_the_states_first_reached_at_each_depth():
    P = torch.zeros(4, 2, 4)  # 0 -> {1, 2} (one per action), 1 -> 3, 2 -> 3, 3 -> 3
    P[0, 0, 1] = P[0, 1, 2] = P[1, :, 3] = P[2, :, 3] = P[3, :, 3] = 1.0
    assert tasks.frontier_sizes(P, 0, 3) == [2, 1, 0]
    assert tasks.frontier_sizes(P, 3, 2, backward=True) == [2, 1]  # 1 and 2 precede 3 (3 itself is the start); then 0


@pytest.mark.parametrize("corridor", [1, 5])
def test_backward_search_on_key_to_door_reaches_one_state_per_depth_forward_two(corridor):
    claim = tasks.backward_search_claim(corridor)
    depth = corridor + 1
    assert claim["holds"] is True and f"[{', '.join(['2'] * depth)}]" in claim["measured"]
    # backward: one state per depth, but the key room with the key (never visited) at the last
    assert f"[{', '.join(['1'] * (depth - 1) + ['2'])}]" in claim["measured"]


def test_bitflip_model_flips_one_bit_per_action_and_ends_at_the_goal():
    P = tasks.bitflip_model(3)
    assert P.shape == (9, 3, 9) and torch.equal(P.sum(-1), torch.ones(9, 3))
    assert P[0b010, 0, 0b011] == 1 and P[0b010, 2, 0b110] == 1
    assert P[0b111, :, 8].tolist() == [1.0] * 3 and P[8, :, 8].tolist() == [1.0] * 3  # the goal, then the terminal


@pytest.mark.parametrize("bits", [3, 5])
def test_backward_search_on_bit_flipping_reaches_as_many_states_as_forward(bits):
    claim = tasks.bitflip_search_claim(bits)
    layers = [math.comb(bits, d) for d in range(1, bits + 1)]  # the hypercube's distance layers, from either end
    assert claim["holds"] is False and f"forward from the start {layers}, backward from the goal {layers}" in \
        claim["measured"]
    assert claim["claim"] == tasks.backward_search_claim(3)["claim"] + " (bit flipping)"


def test_the_distance_claim_needs_return_hcas_decisive_action_elevated_at_every_distance_and_not_fading():
    sharp = {"return HCA (learned h)": [0.5, 0.0, 0.0, 9.0], "return HCA (exact h)": [0.6, 0.0, 0.0, 9.0],
             "state HCA (learned h)": [1.0, 0.0, 0.0, 9.0]}
    flat = {**sharp, "return HCA (learned h)": [0.05, 0.1, 0.1, 9.0]}  # below its corridor on every seed
    near = [hca_run(1.0, 1.0, 1.0, profile=sharp) for _ in range(3)]
    far = [hca_run(1.0, 1.0, 1.0, profile=flat) for _ in range(3)]
    assert tasks.distance_claim({3: near, 30: near}, 0.25)["holds"] is True
    claim = tasks.distance_claim({3: near, 30: far}, 0.25)
    assert claim["holds"] is False and "by corridor: 3: +0.5 [" in claim["measured"] and " | 30: " in claim["measured"]
    assert claim["claim"] == tasks.DISTANCE and "the return's noise sd σ = 0.25 at every corridor" in claim["measured"]
    assert "the exact h's h/π - 1 at the first action: 3: 0.6 [0.6, 0.6], 30: 0.6 [0.6, 0.6]" in claim["measured"]

    def at(*firsts: float, state: float = 1.0) -> list[dict]:
        return [hca_run(1.0, 1.0, 1.0, profile={**sharp, "return HCA (learned h)": [f, 0.0, 0.0, 9.0],
                                                "state HCA (learned h)": [state, 0.0, 0.0, 9.0]}) for f in firsts]

    # still elevated at 30, but fading (0.5 -> 0.1 on every seed): no
    claim = tasks.distance_claim({3: at(0.5, 0.48, 0.46), 10: at(0.3, 0.28, 0.26), 30: at(0.1, 0.09, 0.11)}, 0.25)
    fall, precision = common.seed_verdict([0.4, 0.39, 0.35])[1], (lambda m, lo, hi: (hi - lo) / 2)(
        *common.mean_interval([0.5, 0.48, 0.46]))
    assert claim["holds"] is False and f"the first's at 3 minus at 30 (> 0: fades with distance; no fade where its " \
        f"interval's top stays within the first's own precision at 3): {fall}, against the elevation's own precision " \
        f"at 3, ±{precision:.3g} (no)" in claim["measured"]
    # state HCA is not judged: its fading would not turn a yes into a no
    assert tasks.distance_claim({3: at(0.5, 0.49, 0.51), 30: at(0.5, 0.49, 0.51, state=0.0)}, 0.25)["holds"] is True
    # a rise is no fade; a fall that holds 0 but may exceed the elevation's own precision, or one the seeds cannot
    # tell from 0: inconclusive
    assert tasks.distance_claim({3: at(0.3, 0.28, 0.26), 30: at(0.5, 0.48, 0.46)}, 0.25)["holds"] is True
    assert tasks.distance_claim({3: at(0.5, 0.5, 0.5), 30: at(0.5, 0.49, 0.51)}, 0.25)["holds"] is None
    assert tasks.distance_claim({3: at(0.5, 0.48, 0.46), 30: at(0.9, 0.05, 0.5)}, 0.25)["holds"] is None
    # one distance: nothing to compare
    one = tasks.distance_claim({3: near}, 0.25)
    assert one["holds"] is None and "one distance only" in one["measured"]


def test_distance_study_holds_the_returns_noise_at_sigma_whatever_the_corridor(monkeypatch):
    seen = []
    monkeypatch.setattr(tasks, "study_one", lambda args, task, device: seen.append((args.corridor, task)) or args.seed)
    study = tasks.distance_study(tasks.Args(sigmas="0.5,0.25", distances="3,30", seeds=2, seed=4), "cpu")
    assert study == {3: [4, 5], 30: [4, 5]}
    for corridor, task in seen:  # corridor + 2 noisy rewards, each σ/√(corridor + 2): Var(return) = σ²
        assert task.horizon == corridor + 2 and task.noise**2 * task.horizon == pytest.approx(0.25**2)
        assert task.P.shape[0] == tasks.hindsight.delayed_effect(corridor, 1.0).P.shape[0]


def test_spurious_credit_is_reinforces_variance_off_the_first_state():
    runs = [hca_run(1.0, 1.0, 1.0, start=(1.0, 4.0 + k, 0.9, 1.0)) for k in (0.0, 0.1, -0.1)]
    for run in runs:
        run["estimators"]["return HCA (learned h)"].update(start_state_variance=0.5)
    claim = tasks.spurious_claim(runs, 0.25)
    assert claim["holds"] is True and "REINFORCE +3 [" in claim["measured"]  # 4 ± 0.1 in all, 1 at the first state
    flat = [hca_run(1.0, 1.0, 1.0, start=(1.0, 1.0 + k, 0.9, 1.0)) for k in (0.0, 0.01, -0.01)]
    for run in flat:
        run["estimators"]["return HCA (learned h)"].update(start_state_variance=0.5)
    assert tasks.spurious_claim(flat, 0.25)["holds"] is None  # nothing off the first state the seeds can tell
