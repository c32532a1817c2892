"""03_rudder: return-equivalent redistribution, the predictor's loss, credit on a toy, TRT, the tabular
updates, the pocket watch, smoke run."""

import importlib
import math

import torch

import common

rudder = importlib.import_module("03_rudder")


def test_redistributed_rewards_sum_to_the_return_on_random_episodes():
    g = torch.Generator().manual_seed(0)
    predictions = torch.randn(17, 9, generator=g)
    returns = torch.randn(9, generator=g)
    redistributed = rudder.redistribute(predictions, returns)
    torch.testing.assert_close(redistributed.sum(0), returns)


def test_redistribution_of_a_perfect_predictor_is_its_differences():
    predictions = torch.tensor([[0.0], [0.0], [1.0], [1.0]])  # jumps at step 2 to the return 1
    got = rudder.redistribute(predictions, torch.tensor([1.0]))[:, 0]
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, 1.0, 0.0]))


def test_encode_shows_a_persisting_fact_only_where_it_changes():
    # key taken at step 0: state 0 -> 3 (has_key), then 3 -> 5 -> terminal (6 = num_states)
    episode = {"states": torch.tensor([[0], [3], [5]]), "actions": torch.tensor([[1], [0], [0]]),
               "next_states": torch.tensor([[3], [5], [6]])}
    state = rudder.encode(episode, num_states=6, inputs="state")[:, 0]
    change = rudder.encode(episode, num_states=6, inputs="difference")[:, 0]
    assert state.shape == (3, rudder.encoded_size(6, "state")) == (3, 7 + 2)
    assert change.shape == (3, rudder.encoded_size(6, "difference")) == (3, 3 + 1 + 2)
    assert state[1, 3] == 1 and state[0, 0] == 1 and state[0, 7 + 1] == 1  # state and action one-hots
    torch.testing.assert_close(change[:, :3], torch.eye(3))  # where: positions 0, 1, 2
    torch.testing.assert_close(change[:, 3], torch.tensor([1.0, 0.0, 0.0]))  # the key, once; not at the end
    torch.testing.assert_close(change[:, 4:], torch.tensor([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]))


def test_credit_share_ignores_what_every_episode_gets():
    redistributed = torch.tensor([[0.5, 0.5, 0.5], [1.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(rudder.credit_share(redistributed), torch.tensor([0.0, 1.0, 0.0]))


def test_predictor_loss_on_a_hand_case():
    predictions = torch.tensor([[0.0, 1.0], [2.0, 1.0]])  # T = 2, N = 2
    returns = torch.tensor([1.0, 3.0])
    # main: last step errors 1 and -2 -> mean 2.5; auxiliary: errors (-1, -2, 1, -2) -> mean 2.5
    loss = rudder.predictor_loss(predictions, returns, aux_weight=0.5)
    assert math.isclose(loss.item(), 2.5 + 0.5 * 2.5, rel_tol=1e-6)


def test_predictor_puts_the_credit_on_the_deciding_step():
    # 8 steps, states count time, actions are coin flips, and only the action at step 5 decides
    torch.manual_seed(0)
    T, N, k = 8, 512, 5
    states = torch.arange(T)[:, None].expand(T, N)
    actions = torch.randint(0, 2, (T, N))
    returns = actions[k].float()
    args = rudder.Args(steps=300, batch=64, hidden=16, lr=1e-2)
    x = torch.cat([torch.nn.functional.one_hot(states, T), torch.nn.functional.one_hot(actions, 2)], -1).float()
    predictor, _ = rudder.train_predictor(args, x, returns, device="cpu")
    with torch.no_grad():
        redistributed = rudder.redistribute(predictor(x), returns)
    assert rudder.credit_share(redistributed)[k] > 0.8


def test_smoke_run_writes_results_and_figure(tmp_path, read_results):
    result = rudder.main(rudder.Args(smoke=True, device="cpu", out=str(tmp_path)))
    data = read_results(tmp_path / "results.json")
    assert (tmp_path / "redistribution.png").stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"])
    assert data["metrics"]["max_abs_sum_minus_return"] < 1e-4
    assert all(math.isfinite(v) for v in data["metrics"].values())


def test_growth_law_tells_exponential_from_power():
    L = [5, 10, 20, 40]
    power = rudder.growth_law(L, [0.5 * x**0.9 for x in L])
    assert math.isclose(power["power"], 0.9, rel_tol=1e-6)
    assert power["power_residual"] < power["exponential_residual"]
    exponential = rudder.growth_law(L, [2 * 1.1**x for x in L])
    assert exponential["exponential_residual"] < exponential["power_residual"]


def test_growth_verdict_needs_a_clear_winner():
    assert rudder.growth_verdict({"exponential_residual": 0.01, "power_residual": 0.05}) is True
    assert rudder.growth_verdict({"exponential_residual": 0.05, "power_residual": 0.01}) is False
    assert rudder.growth_verdict({"exponential_residual": 0.019, "power_residual": 0.026}) is None


def test_running_mean_moves_visited_entries_toward_their_batch_mean():
    table = torch.zeros(2, 2)
    # entry (1, 0) is visited twice (targets 1 and 3: mean 2), entry (0, 1) once, the rest never
    rudder.running_mean(table, torch.tensor([2, 2, 1]), torch.tensor([1.0, 3.0, -1.0]), rate=0.5)
    torch.testing.assert_close(table, torch.tensor([[0.0, -0.5], [1.0, 0.0]]))
    per_entry = torch.tensor([1.0, 1.0, 0.25, 0.25])  # a rate per entry, as for learners sharing a table
    rudder.running_mean(table, torch.tensor([1, 2]), torch.tensor([0.5, 3.0]), rate=per_entry)
    torch.testing.assert_close(table, torch.tensor([[0.0, 0.5], [1.5, 0.0]]))


def test_q_learning_discounts_the_bootstrap():
    episode = {"states": torch.tensor([[0]]), "actions": torch.tensor([[1]]), "next_states": torch.tensor([[2]])}
    Q = torch.zeros(3, 2)
    Q[2] = torch.tensor([1.0, 3.0])
    rudder.q_learning_update(Q, episode, torch.tensor([[0.5]]), alpha=1.0, gamma=0.9)
    assert math.isclose(Q[0, 1].item(), 0.5 + 0.9 * 3.0, rel_tol=1e-6)


def test_q_learning_and_mc_updates_on_a_hand_episode():
    # one episode of 3 steps: s = 0, 2, 4 with actions 1, 0, 0, reward 1 at the end
    episode = {"states": torch.tensor([[0], [2], [4]]), "actions": torch.tensor([[1], [0], [0]]),
               "rewards": torch.tensor([[0.0], [0.0], [1.0]]), "next_states": torch.tensor([[2], [4], [6]])}
    Q = torch.zeros(7, 2)
    Q[2, 1] = 0.4  # a better action elsewhere: the max in the TD target
    rudder.q_learning_update(Q, episode, episode["rewards"], alpha=0.5)
    assert Q[0, 1] == 0.5 * 0.4 and Q[2, 0] == 0.0 and Q[4, 0] == 0.5
    Q = torch.zeros(7, 2)
    rudder.mc_update(Q, episode, alpha=0.5)
    assert Q[0, 1] == 0.5 and Q[2, 0] == 0.5 and Q[4, 0] == 0.5


def test_epsilon_greedy_policy_table():
    Q = torch.tensor([[0.0, 1.0], [2.0, -1.0]])
    torch.testing.assert_close(rudder.epsilon_greedy(Q, 0.2), torch.tensor([[0.1, 0.9], [0.9, 0.1]]))
    torch.testing.assert_close(rudder.epsilon_greedy(Q, 1.0), torch.full((2, 2), 0.5))


# --------------------------------------------------------------------------------------------
# TRT
# --------------------------------------------------------------------------------------------
def test_transport_leaves_episodes_without_important_steps_unchanged():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(12, 5, generator=g)
    ordinary = torch.ones(12, 5)  # every step gets the uniform share of attention
    torch.testing.assert_close(rudder.transport(rewards, ordinary, horizon=3, focus=2.0, scale=1.0), rewards)


def test_transport_adds_the_rewards_beyond_the_horizon_at_important_steps_only():
    rewards = torch.tensor([[0.0], [0.1], [0.0], [0.2], [1.0]])
    weights = torch.tensor([[5.0], [0.5], [0.5], [0.5], [3.5]])  # steps 0 and 4 are important
    got = rudder.transport(rewards, weights, horizon=3, focus=3.0, scale=0.5)[:, 0]
    # step 0 gets 0.5 (r_3 + r_4) = 0.6; step 4 has nothing beyond 4 + 3 steps
    torch.testing.assert_close(got, torch.tensor([0.6, 0.1, 0.0, 0.2, 1.0]))


def test_importance_is_one_under_uniform_attention_and_counts_what_each_step_receives():
    T = 4
    uniform = torch.full((2, T, T), 1 / T)
    torch.testing.assert_close(rudder.importance(uniform), torch.ones(T, 2))
    focused = torch.zeros(1, T, T)
    focused[..., 0] = 1.0  # every step looks at step 0
    torch.testing.assert_close(rudder.importance(focused)[:, 0], torch.tensor([4.0, 0.0, 0.0, 0.0]))


def test_attention_classifier_shapes_and_attention_rows_sum_to_one():
    model = rudder.AttentionClassifier(features=6, width=8)
    logits, attention = model(torch.randn(7, 3, 6))
    assert logits.shape == (3,) and attention.shape == (3, 7, 7)
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 7))


def test_a_learner_that_never_explores_never_solves():
    args = rudder.Args(max_episodes=64, learn_batch=16, stable=2)
    assert rudder.solve(args, "Q-learning (TD)", corridor=3, seed=0, device="cpu", epsilon=0.0) == 64
    assert rudder.solve(args, "Monte Carlo", corridor=3, seed=0, device="cpu", epsilon=1.0) < 64


# --------------------------------------------------------------------------------------------
# Pocket watch
# --------------------------------------------------------------------------------------------
def test_pocket_watch_optimal_decisions_are_sell_repair_repair_sell():
    env = rudder.PocketWatch(1)
    assert env.expected_returns().argmax(1).tolist() == [0, 1, 1, 0]
    # repaired: price - repair - delivery = 16.5, 21.5, 21.5, 16.5 against 19 unrepaired
    gaps = env.expected_returns()[:, 1] - env.expected_returns()[:, 0]
    torch.testing.assert_close(gaps, torch.tensor([-2.5, 2.5, 2.5, -2.5]))


def test_pocket_watch_episodes_match_the_expected_returns_and_pay_the_sale_at_the_end():
    env = rudder.PocketWatch(200_000, steps=10, seed=1)
    _, info = env.reset()
    repair = torch.arange(env.num_envs) % 2
    episode = env.finish(repair)
    returns = episode["rewards"].sum(0)
    expected = env.expected_returns()[info["brand"], repair]
    for brand in range(4):
        for action in (0, 1):
            pick = (info["brand"] == brand) & (repair == action)
            assert abs(returns[pick].mean() - expected[pick][0]) < 0.1
    middle = episode["rewards"][1:-1].unique()  # only the costs on the way before the sale
    assert torch.isclose(middle[:, None], torch.tensor([0.0, -0.1, -7.0])).any(1).all()
    assert (episode["rewards"][0][repair == 0] == 0).all()  # selling as it is costs nothing now
    assert (episode["actions"][1:] == 0).all()
    assert (episode["next_states"][:-1] == episode["states"][1:]).all()
    assert (episode["next_states"][-1] == env.num_states).all()


def test_pocket_watch_states_and_q_table():
    env = rudder.PocketWatch(1, steps=5)
    assert env.state(3, 1, 4) == env.num_states - 1
    Q = env.q_table(learners=2)
    assert Q.shape == (2 * (env.num_states + 1), 2)
    decisions = (Q[:, 1] == 0).nonzero().flatten().tolist()  # the only states with a second action
    rows = env.num_states + 1
    assert decisions == [b * 2 * 5 + k * rows for k in (0, 1) for b in range(4)]


def test_watch_features_show_the_decision_only_at_the_first_step():
    env = rudder.PocketWatch(4, steps=6, seed=0)
    env.reset()
    episode = env.finish(torch.tensor([0, 1, 1, 0]))
    x = rudder.watch_features(episode, steps=6)
    assert x.shape == (6, 4, 8)
    assert (x[1:, :, 5:7] == 0).all() and (x[0, :, 5:7].sum(-1) == 1).all()
    torch.testing.assert_close(x[-1, :, 4], torch.tensor([0.0, 1.0, 1.0, 0.0]))  # repaired flag
