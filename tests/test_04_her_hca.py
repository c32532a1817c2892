"""04_her_hca: bit-flip dynamics, hindsight relabelling, the HCA identities and estimators against
the exact gradient, the learned hindsight distribution against Bayes' rule, the copies of 01's
reward-to-go and 03's running mean, CLI and a smoke run."""

import importlib
import math

import numpy as np
import pytest
import torch

import common

hind = importlib.import_module("04_her_hca")
pong = importlib.import_module("01_reinforce_pong")
rudder = importlib.import_module("03_rudder")


# --------------------------------------------------------------------------------------------
# HER: environment and relabelling
# --------------------------------------------------------------------------------------------
def test_bitflip_flips_one_bit_and_ends_at_the_goal():
    env = hind.BitFlip(num_envs=2, bits=3)
    env.reset()
    env.state = torch.tensor([[0, 0, 0], [1, 1, 1]])
    env.goal = torch.tensor([[1, 0, 0], [0, 0, 0]])
    obs, reward, terminated, truncated, _ = env.step(torch.tensor([0, 2]))
    assert obs["observation"].tolist() == [[1, 0, 0], [1, 1, 0]]
    assert reward.tolist() == [0.0, -1.0] and terminated.tolist() == [True, False]
    obs, reward, terminated, truncated, _ = env.step(torch.tensor([1, 1]))  # the first episode is over
    assert obs["observation"].tolist() == [[1, 0, 0], [1, 0, 0]]
    assert terminated.tolist() == [False, False] and truncated.tolist() == [False, False]
    _, reward, terminated, truncated, _ = env.step(torch.tensor([1, 1]))  # step n = 3: time is up
    assert truncated.tolist() == [False, True] and reward[1] == -1


def filled_buffer(episodes=64, bits=6, seed=0):
    """Random-policy episodes in a buffer, with goals that some of them reach."""
    env = hind.BitFlip(episodes, bits, seed=seed)
    q_net = hind.QNetwork(bits, 8)
    played = hind.play_bitflip(env, q_net, epsilon=1.0)
    buffer = hind.EpisodeBuffer(episodes, bits, "cpu")
    buffer.add(played["states"], played["actions"], played["goals"], played["lengths"])
    return buffer, played


def test_future_relabelling_uses_a_later_achieved_state_and_recomputes_the_reward():
    buffer, played = filled_buffer()
    k = 4
    batch = buffer.sample(20_000, "future", k, torch.Generator().manual_seed(1))
    relabelled = batch["goal_step"] >= 0
    assert abs(relabelled.float().mean().item() - k / (k + 1)) < 0.01
    episode, step, goal_step = batch["episode"], batch["step"], batch["goal_step"]
    # the goal is what the same episode achieved at step t' (states[t' + 1]) with t <= t' < T
    assert (goal_step[relabelled] >= step[relabelled]).all()
    assert (goal_step[relabelled] < played["lengths"][episode[relabelled]]).all()
    achieved = played["states"][episode[relabelled], goal_step[relabelled] + 1].float()
    assert torch.equal(batch["goal"][relabelled], achieved)
    # original goals stay; reward 0 exactly when the next state is the goal
    assert torch.equal(batch["goal"][~relabelled], played["goals"][episode[~relabelled]].float())
    reached = (batch["next_state"] == batch["goal"]).all(1)
    assert torch.equal(batch["reward"] == 0, reached) and torch.equal(batch["done"] == 1, reached)
    assert (batch["reward"][relabelled & (goal_step == step)] == 0).all()  # its own achieved state


def test_final_relabelling_uses_the_last_state_half_the_time_and_none_keeps_the_goal():
    buffer, played = filled_buffer(seed=2)
    generator = torch.Generator().manual_seed(3)
    batch = buffer.sample(20_000, "final", 4, generator)
    relabelled = batch["goal_step"] >= 0
    assert abs(relabelled.float().mean().item() - 0.5) < 0.02
    last = played["lengths"][batch["episode"]] - 1
    assert torch.equal(batch["goal_step"][relabelled], last[relabelled])
    plain = buffer.sample(1000, "none", 4, generator)
    assert (plain["goal_step"] == -1).all()
    assert torch.equal(plain["goal"], played["goals"][plain["episode"]].float())


def test_td_target_is_clipped_to_the_range_of_possible_values():
    bits, gamma = 4, 0.9
    q_net, target_net = hind.QNetwork(bits, 8), hind.QNetwork(bits, 8)
    torch.nn.init.constant_(target_net.net[-1].bias, 100.0)  # an absurdly optimistic target
    zeros = torch.zeros(2, bits)
    batch = {"state": zeros, "next_state": zeros, "goal": zeros, "action": torch.tensor([0, 1]),
             "reward": torch.tensor([-1.0, -1.0]), "done": torch.tensor([0.0, 0.0])}
    with torch.no_grad():
        q = q_net(zeros, zeros)[[0, 1], [0, 1]]
    # y = -1 + 0.9 * 100 is clipped to 0, the largest possible value
    assert math.isclose(hind.td_loss(q_net, target_net, batch, gamma).item(), (q**2).mean().item(), rel_tol=1e-5)


# --------------------------------------------------------------------------------------------
# HCA: the returns and the running means, and the scripts that teach them
# --------------------------------------------------------------------------------------------
def test_returns_to_go_sums_the_rewards_from_each_step_on():
    rewards = torch.tensor([[1.0, 0.0], [2.0, -1.0], [4.0, 3.0]])
    assert torch.equal(hind.returns_to_go(rewards), torch.tensor([[7.0, 2.0], [6.0, 2.0], [4.0, 3.0]]))


def test_returns_to_go_is_01s_reward_to_go_without_discount_or_ends():
    rewards = torch.randn(12, 500, generator=torch.Generator().manual_seed(0)) * 3
    no_ends = torch.zeros(12, 500, dtype=torch.bool)
    assert torch.equal(hind.returns_to_go(rewards), pong.reward_to_go(rewards, no_ends, 1.0))


def test_running_mean_moves_visited_entries_toward_their_batch_mean():
    table = torch.zeros(2, 2)
    # entry (1, 0) is visited twice (targets 1 and 3: mean 2), entry (0, 1) once, the rest never
    hind.running_mean(table, torch.tensor([2, 2, 1]), torch.tensor([1.0, 3.0, -1.0]), rate=0.5)
    torch.testing.assert_close(table, torch.tensor([[0.0, -0.5], [1.0, 0.0]]))
    per_entry = torch.tensor([1.0, 1.0, 0.25, 0.25])  # a rate per entry, as for learners sharing a table
    hind.running_mean(table, torch.tensor([1, 2]), torch.tensor([0.5, 3.0]), rate=per_entry)
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
        hind.running_mean(ours, index, targets, rate)
        rudder.running_mean(theirs, index, targets, rate)
        assert torch.equal(ours, theirs)
        assert torch.equal(ours.view(-1)[12:], table.view(-1)[12:]) and not torch.equal(ours, table)


# --------------------------------------------------------------------------------------------
# HCA: the exact truth
# --------------------------------------------------------------------------------------------
def skewed_policy(task, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(task.num_states, task.P.shape[1], generator=g), 1)


@pytest.mark.parametrize("make", [lambda: hind.delayed_effect(4, 0.7), lambda: hind.shortcut_chain(5, 0.7),
                                  lambda: hind.ambiguous_bandit(0.7, 0.2)])
def test_return_identity_q_equals_expected_hindsight_weighted_return(make):
    task = make()
    policy = skewed_policy(task)
    assert hind.hindsight_identity_gap(task, policy) < 1e-6
    # without the hindsight ratio (h = π), E[z] is V(x), not Q(x, a): the identity is not trivial
    V, Q = hind.evaluate_policy(task.P.double(), task.R.double(), policy.double(), 1.0)
    assert (Q[0] - V[0]).abs().max() > 0.05


def test_return_identity_by_monte_carlo_on_the_delayed_effect():
    task = hind.delayed_effect(3, 0.5)
    policy = skewed_policy(task, seed=1)
    episodes = hind.sample_episodes(task, policy, 40_000, torch.Generator().manual_seed(0))
    z = episodes["returns"][0]
    h = hind.exact_return_hindsight(task, policy, episodes["states"][0], z)
    _, Q = hind.evaluate_policy(task.P.double(), task.R.double(), policy.double(), 1.0)
    for a in (0, 1):  # E_z[h(a|x,z)/π(a|x) z], over episodes whatever their first action
        assert math.isclose((h[:, a] / policy[0, a] * z).mean().item(), Q[0, a].item(), abs_tol=0.03)


def test_exact_state_hindsight_on_the_delayed_effect():
    task = hind.delayed_effect(3, 1.0)
    policy = skewed_policy(task)
    h = hind.exact_state_hindsight(task, policy)
    with_key, without_key = 2 * 2 + 1, 2 * 2  # position 2, with and without the key
    assert torch.allclose(h[0, with_key], torch.tensor([0.0, 1.0]))  # the later state reveals the first action
    assert torch.allclose(h[0, without_key], torch.tensor([1.0, 0.0]))
    assert torch.allclose(h[3, 7], policy[3])  # a corridor action changes nothing: h = π


def test_exact_gradient_matches_finite_differences():
    task = hind.shortcut_chain(4, 1.0)
    logits = torch.randn(task.num_states, 2, generator=torch.Generator().manual_seed(0)).double()
    grad = hind.exact_gradient(task, logits).double()
    eps, i, j = 1e-5, 1, 1
    bumped = logits.clone()
    bumped[i, j] += eps
    numeric = (hind.exact_return(task, bumped) - hind.exact_return(task, logits)) / eps
    assert math.isclose(grad[i, j].item(), numeric, rel_tol=1e-3)


# --------------------------------------------------------------------------------------------
# HCA: the estimators
# --------------------------------------------------------------------------------------------
def test_gradient_rows_match_autograd_per_episode():
    task = hind.shortcut_chain(4, 1.0)
    logits = torch.randn(task.num_states, 2, generator=torch.Generator().manual_seed(2))
    policy = torch.softmax(logits, 1)
    episodes = hind.sample_episodes(task, policy, 3, torch.Generator().manual_seed(0))
    psi = torch.randn_like(episodes["returns"])
    q_hat = torch.randn(*psi.shape, 2)
    score = hind.per_episode_gradients(episodes, hind.score_rows(episodes, policy, psi), task.num_states)
    all_action = hind.per_episode_gradients(episodes, hind.all_action_rows(episodes, policy, q_hat), task.num_states)
    for n in range(3):
        theta = logits.clone().requires_grad_()
        pi = torch.softmax(theta, 1)[episodes["states"][:, n]]  # (T, A)
        alive = episodes["alive"][:, n].float()
        logp = torch.log(pi.gather(1, episodes["actions"][:, n:n + 1])).squeeze(1)
        score_surrogate = (alive * psi[:, n] * logp).sum()  # Σ_t Ψ_t log π(A_t|X_t)
        all_action_surrogate = (alive * (pi * q_hat[:, n]).sum(1)).sum()  # Σ_t Σ_b π(b|X_t) Q̂_t(b)
        torch.testing.assert_close(score[n], torch.autograd.grad(score_surrogate, theta, retain_graph=True)[0])
        torch.testing.assert_close(all_action[n], torch.autograd.grad(all_action_surrogate, theta)[0])


@pytest.mark.parametrize("method", ["PG + V baseline", "return HCA (exact h)", "state HCA (exact h)"])
def test_estimators_with_exact_h_are_unbiased(method):
    task = hind.shortcut_chain(4, 0.5)
    logits = torch.randn(task.num_states, 2, generator=torch.Generator().manual_seed(3))
    policy = torch.softmax(logits, 1)
    truth = hind.exact_gradient(task, logits)
    V, _ = hind.evaluate_policy(task.P.double(), task.R.double(), policy.double(), 1.0)
    episodes = hind.sample_episodes(task, policy, 20_000, torch.Generator().manual_seed(4))
    h = (hind.exact_return_hindsight(task, policy, episodes["states"], episodes["returns"])
         if method.startswith("return") else hind.exact_state_pairs(hind.exact_state_hindsight(task, policy), episodes))
    rows = hind.gradient_rows(method, episodes, policy, V.float(), task.R, h, h_min=1e-9)
    grads = hind.per_episode_gradients(episodes, rows, task.num_states)
    floor = ((grads - grads.mean(0)) ** 2).sum((1, 2)).mean() / len(grads)  # E|mean - truth|² if unbiased
    assert ((grads.mean(0) - truth) ** 2).sum() < 5 * floor


def test_return_hca_gives_no_credit_when_the_return_says_nothing():
    episodes = {"states": torch.zeros(2, 3, dtype=torch.long), "actions": torch.tensor([[0, 1, 1], [1, 0, 0]]),
                "returns": torch.tensor([[5.0, -3.0, 100.0], [1.0, 2.0, 3.0]])}
    policy = torch.tensor([[0.3, 0.7]])
    psi = hind.return_hca_psi(episodes, policy, policy[episodes["states"]], h_min=0.01)  # h = π
    assert torch.equal(psi, torch.zeros(2, 3))


def test_learned_hindsight_approaches_the_bayes_posterior_on_the_ambiguous_bandit():
    torch.manual_seed(0)
    task = hind.ambiguous_bandit(noise=0.5, crossover=0.2)
    policy = torch.tensor([[0.3, 0.7], [0.5, 0.5]])
    args = hind.Args(hca_hidden=32, hca_batch=512)
    z = torch.linspace(-0.5, 1.5, 41)
    exact = hind.exact_return_hindsight(task, policy, torch.zeros(41, dtype=torch.long), z)
    errors = []
    for episodes, steps in ((4000, 0), (4000, 600)):
        learner = hind.HindsightLearner(args, task, "return", "cpu")
        learner.fit(hind.sample_episodes(task, policy, episodes, torch.Generator().manual_seed(1)), steps)
        learned = learner.probabilities(torch.zeros(41, dtype=torch.long), z)
        errors.append((learned - exact).abs().max().item())
    assert errors[1] < 0.05 < errors[0]
    # and the posterior is really ambiguous here: no return is certain of its arm
    assert exact[:, 1].min() > 0.1 and exact[:, 1].max() < 0.99


# --------------------------------------------------------------------------------------------
# CLI and a smoke run
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag,value,message", [
    ("--crossover", "0.7", "--crossover must be in (0, 0.5)"),
    ("--sigmas", "0,1", "--sigmas must be positive"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("04_her_hca.py", flag, value)


def test_smoke_run_writes_results_and_figures(tmp_path, read_results):
    result = hind.main(hind.Args(smoke=True, device="cpu", out=str(tmp_path)))
    data = read_results(tmp_path / "results.json")
    for name in ("her_success_vs_bits.png", "hca_variance_vs_sigma.png", "hca_hindsight_ratio.png",
                 "hca_learning_curves.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"]) and len(data["claims"]) == 8  # n = 30 is not in the smoke run
    assert all(np.isfinite(v) for v in data["metrics"].values())
