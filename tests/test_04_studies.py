"""04's studies: the exact model (the return identity, the exact hindsight distributions, the exact
gradient) and the estimators with it, the two extra tasks, state-conditional HCA against loops
and autograd, the gradient study as recorded by spies and its agreement with the chapter, the
learning loop as recorded by spies (and its copy of 03's running mean), the claim checkers on
hand-made summaries, CLI and a smoke run of each study."""

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


def test_variance_claims_need_a_lower_variance_at_every_sigma_and_a_growing_edge():
    def verdicts(low: tuple, high: tuple) -> list:
        by_sigma = {s: {"PG + V baseline": pg, "state HCA (learned h)": state, "return HCA (learned h)": ret}
                    for s, (pg, state, ret) in ((2.0, high), (0.5, low))}
        return [c["holds"] for c in tasks.variance_claims("delayed effect", by_sigma)]

    assert verdicts((4.0, 2.0, 2.0), (40.0, 4.0, 5.0)) == [True, True]
    assert verdicts((4.0, 2.0, 2.0), (40.0, 4.0, 20.0)) == [True, False]  # return HCA: 2x at both
    assert verdicts((4.0, 5.0, 5.0), (4.0, 4.5, 4.5)) == [False, True]  # 0.8x → 0.89x
    claims = tasks.variance_claims("delayed effect", {0.5: {"PG + V baseline": 4.0, "return HCA (learned h)": 1.0},
                                                      2.0: {"PG + V baseline": 40.0, "return HCA (learned h)": 5.0}})
    assert claims[0]["claim"] == "delayed effect: HCA's gradient has a lower variance than PG with a value baseline"
    assert "at σ = 0.5, 2: return HCA: 4x, 8x" in claims[0]["measured"]  # without state HCA, its ratio is absent


def test_variance_ratio_is_pg_over_the_method():
    variances = {"PG + V baseline": 6.0, "return HCA (learned h)": 1.5}
    assert tasks.variance_ratio(variances, "return HCA (learned h)") == 4.0


def test_success_table_reports_each_seed_and_when_the_mean_success_first_reached_90_percent():
    def run(success: float, curve: list) -> dict:
        return {"final_success": success, "reward_share": 0.1, "curve": curve}

    her = {"DQN": {5: [run(0.0, [0.0, 0.0, 0.0, 0.0]), run(0.2, [0.0, 0.0, 0.1, 0.2])]},
           "DQN+HER": {5: [run(1.0, [0.5, 0.9, 1.0, 1.0]), run(0.9, [0.5, 1.0, 0.8, 0.9])]}}
    rows = sweep.success_table(sweep.Args(bits="5"), her)["rows"]
    assert rows == [[5, "DQN", pytest.approx(0.1), "0, 0.2", pytest.approx(0.1), "–"],  # never reached
                    [5, "DQN+HER", pytest.approx(0.95), "1, 0.9", pytest.approx(0.1), "50%"]]  # 0.95 after 2 of 4


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
    ("studies.04_hca_tasks", "--value-rate", "1.5", "--value-rate must be in (0, 1]"),
    ("studies.04_hca_tasks", "--learn-seeds", "0", "--learn-seeds must be positive"),
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
    assert all(np.isfinite(v) for k, v in data["metrics"].items() if k != "tables")
    rows = data["metrics"]["tables"]["success"]["rows"]  # the table is the metrics, n by n
    assert [(n, name, mean) for n, name, mean, *_ in rows] == [
        (n, name, data["metrics"][f"bits{n}_success[{name}]"]) for n in (4, 6) for name in hind.HER_METHODS]
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
    assert all(np.isfinite(v) for k, v in data["metrics"].items() if k != "tables")
    tables = data["metrics"]["tables"]  # the tables are the metrics
    variance = {(row[0], row[1]): row for row in tables["variance"]["rows"]}
    assert variance[("delayed effect", 2.0)][3] == data["metrics"]["delayed effect_sigma2_variance[PG + V baseline]"]
    assert variance[("ambiguous bandit", 0.5)][4] == "–"  # no state HCA without later states
    learning = {row[0]: row for row in tables["learning"]["rows"]}
    assert learning["shortcut"][1] == -2 and learning["ambiguous bandit"][3] == "–"
    # the identity Q = E_z[h/π z] holds to integration accuracy even in a tiny run
    verdicts = {c["claim"]: c["holds"] for c in data["claims"]}
    assert verdicts["Q(x, a) = E_z[h(a|x,z)/π(a|x) · z]"] is True
    # the one-step bandit has no later state: no state HCA there
    assert set(data["hca_learning"]["ambiguous bandit"]) == {"PG + V baseline", "return HCA (learned h)"}
    assert not any(m.startswith("state") for m in data["hca_gradient_study"]["ambiguous bandit"]["0.5"]["estimators"])
    # every learning curve starts at the exact return of the uniform policy
    uniform = {task.name: tasks.exact_return(task, torch.zeros(task.num_states, 2))
               for task in tasks.make_tasks(common.apply_smoke(args), 1.0)}
    for name, by_method in data["hca_learning"].items():
        assert all(math.isclose(curve[0], uniform[name], rel_tol=1e-6) for curves in by_method.values()
                   for curve in curves)
