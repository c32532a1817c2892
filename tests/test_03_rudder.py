"""03_rudder: return-equivalent redistribution, the predictor's loss, credit on a toy, smoke run."""

import importlib
import json
import math

import torch

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
    assert state.shape == change.shape == (3, 7 + 2)
    assert state[1, 3] == 1 and state[0, 0] == 1 and state[0, 7 + 1] == 1  # state and action one-hots
    assert change[0, 0] == -1 and change[0, 3] == 1 and change[1, 3] == -1 and change[1, 5] == 1


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


def test_smoke_run_writes_results_and_figure(tmp_path):
    result = rudder.main(rudder.Args(smoke=True, device="cpu", out=str(tmp_path)))
    data = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "redistribution.png").stat().st_size > 1000
    assert data["metrics"] == result["metrics"]
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


def test_average_step_averages_repeated_visits():
    Q = torch.zeros(2, 2)
    rudder.average_step(Q, torch.tensor([1, 1, 0]), torch.tensor([0, 0, 1]),
                        torch.tensor([1.0, 3.0, -1.0]), alpha=0.5)
    torch.testing.assert_close(Q, torch.tensor([[0.0, -0.5], [1.0, 0.0]]))
