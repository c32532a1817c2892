"""03_rudder: return-equivalent redistribution, the predictor's loss, credit on a toy, TRT, the tabular
updates, the learners' loops and the shapers' refits (recorded with stand-ins), the pocket watch, the
claim checkers on hand-made summaries, smoke run."""

import copy
import importlib
import math

import numpy as np
import pytest
import torch

import common

rudder = importlib.import_module("03_rudder")

TD, MC = "Q-learning (TD)", "Monte Carlo"
OPTIMAL = (0, 1, 1, 0)  # the pocket watch's best decision per brand: sell, repair, repair, sell
WORST = (1, 0, 0, 1)


def key_to_door_episodes(num_envs, corridor=3, distractor_prob=0.0, seed=0):
    env = common.KeyToDoor(num_envs, corridor=corridor, distractor_prob=distractor_prob, seed=seed)
    return env, common.play_episodes(env, torch.full((env.num_states + 1, 2), 0.5))


# --------------------------------------------------------------------------------------------
# RUDDER: the redistribution and the predictor
# --------------------------------------------------------------------------------------------
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


def test_redistribution_spreads_each_episodes_last_error_evenly_over_its_steps():
    # episode 0: ĝ = 1, 1, 3 but G = 6 (error 3: +1 per step); episode 1: ĝ = 0, 2, 2, G = -1 (-1 per step)
    predictions = torch.tensor([[1.0, 0.0], [1.0, 2.0], [3.0, 2.0]])
    got = rudder.redistribute(predictions, torch.tensor([6.0, -1.0]))
    torch.testing.assert_close(got, torch.tensor([[2.0, -1.0], [1.0, 1.0], [3.0, -1.0]]))


def test_return_predictor_gives_one_prediction_per_step_and_episode():
    predictions = rudder.ReturnPredictor(features=3, hidden=4)(torch.randn(5, 2, 3))
    assert predictions.shape == (5, 2)


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


def test_encode_of_a_batch_marks_the_key_only_in_the_episode_that_took_it():
    _, episode = key_to_door_episodes(64, corridor=2)
    x = rudder.encode(episode, num_states=8, inputs="difference")
    took = episode["actions"][0] == 1
    assert took.any() and (~took).any()
    assert x.shape == (4, 64, 4 + 1 + 2)
    torch.testing.assert_close(x[0, :, 4], took.float())  # the change of has_key, at the key room only
    assert (x[1:, :, 4] == 0).all()
    torch.testing.assert_close(x[:, :, :4], torch.eye(4)[:, None].expand(4, 64, 4))  # where, step by step
    state = rudder.encode(episode, num_states=8, inputs="state")
    torch.testing.assert_close(state[:, :, :9].argmax(-1), episode["states"])
    torch.testing.assert_close(state[:, :, 9:].argmax(-1), episode["actions"])


def test_credit_share_ignores_what_every_episode_gets():
    redistributed = torch.tensor([[0.5, 0.5, 0.5], [1.0, -1.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(rudder.credit_share(redistributed), torch.tensor([0.0, 1.0, 0.0]))


def test_future_rewards_is_what_is_still_to_come_after_each_step():
    rewards = torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, 5.0]])
    torch.testing.assert_close(rudder.future_rewards(rewards), torch.tensor([[5.0, 6.0], [3.0, 5.0], [0.0, 0.0]]))


def test_pair_means_and_conditional_variance_against_a_loop():
    g = torch.Generator().manual_seed(3)
    episode = {"states": torch.randint(0, 4, (6, 50), generator=g), "actions": torch.randint(0, 2, (6, 50), generator=g)}
    values = torch.randn(6, 50, generator=g)
    pairs = rudder.pair_index(episode)
    assert torch.equal(pairs, 2 * episode["states"] + episode["actions"])
    means, counts = rudder.pair_means(values, pairs, 10)
    squares = 0.0
    for p in range(10):
        visits = values[pairs == p]
        assert counts[p] == len(visits)
        assert float(means[p]) == pytest.approx(float(visits.mean()) if len(visits) else 0.0, abs=1e-6)
        squares += float(((visits - visits.mean()) ** 2).sum()) if len(visits) else 0.0
    assert counts[8:].sum() == 0  # states 4 never visited: their means stay 0
    assert rudder.conditional_variance(values, pairs, 10) == pytest.approx(squares / values.numel(), rel=1e-5)


def hand_chain():
    """s0: action 0 goes to s1 (reward 0), action 1 ends (0.5); s1: action 0 ends with 1, action 1
    with 0; state 2 is terminal."""
    P, R = torch.zeros(3, 2, 3, dtype=torch.float64), torch.zeros(3, 2, dtype=torch.float64)
    P[0, 0, 1] = P[0, 1, 2] = P[1, :, 2] = P[2, :, 2] = 1.0
    R[0, 1], R[1, 0] = 0.5, 1.0
    return P, R


def test_optimal_q_on_a_hand_chain():
    P, R = hand_chain()
    torch.testing.assert_close(rudder.optimal_q(P, R), torch.tensor([[1.0, 0.5], [1.0, 0.0], [0.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(rudder.optimal_q(P, R, gamma=0.4)[0], torch.tensor([0.4, 0.5], dtype=torch.float64))


def test_potential_shaping_adds_the_expected_change_of_potential():
    P, R = hand_chain()
    potential = torch.tensor([2.0, -1.0, 0.0], dtype=torch.float64)
    shaped = rudder.potential_shaping(P, R, potential)
    # s0, a0: 0 + Φ(s1) - Φ(s0) = -3; s0, a1: 0.5 + 0 - 2; s1: r + 0 + 1
    torch.testing.assert_close(shaped, torch.tensor([[-3.0, -1.5], [2.0, 1.0], [0.0, 0.0]], dtype=torch.float64))
    # Ng et al.: Q*' = Q* - Φ(s), so the argmax stays
    torch.testing.assert_close(rudder.optimal_q(P, shaped), rudder.optimal_q(P, R) - potential[:, None])


def test_shaping_study_keeps_the_argmax_and_a_value_potential_leaves_no_future_reward():
    study = rudder.shaping_study(rudder.Args(corridor=4, distractor_prob=0.5), seed=1)
    assert study["decisive_states"] == 2  # the key room (and its unreachable twin with the key)
    assert study["argmax_kept"] is True and study["identity_gap"] < 1e-12
    assert study["value_potential_future_max"] < 1e-12
    # without shaping, the future reward expected after the key room is the door's 1 and the distractors
    env = common.KeyToDoor(1, corridor=4, distractor_prob=0.5)
    P, R = env.model()
    uniform = torch.full_like(R, 0.5)
    _, Q = common.evaluate_policy(P, R, uniform, 1.0)
    assert float((Q - R)[0, 1]) == pytest.approx(1 + 4 * 0.5 * env.distractor)


def test_redistribution_properties_of_the_optimal_redistribution_and_of_none():
    env, episode = key_to_door_episodes(4000, corridor=3, distractor_prob=0.5, seed=2)
    rewards, expected = episode["rewards"], 0.5 * env.distractor  # E[a distractor step's reward]
    # the optimal r̃: E[G | a_0] at the key step, each distractor's surprise as it comes, 0 at the door
    optimal = torch.zeros_like(rewards)
    optimal[0] = episode["actions"][0] + 3 * expected
    optimal[1:-1] = rewards[1:-1] - expected
    torch.testing.assert_close(optimal.sum(0), rewards.sum(0))
    got = rudder.redistribution_properties(env, episode, optimal)
    assert got["expected_future_max[redistributed]"] < 0.02
    assert got["expected_future_max[original]"] == pytest.approx(1 + 3 * expected, abs=0.02)
    assert got["mc_variance_at_key[redistributed]"] == pytest.approx(got["mc_variance_at_key[original]"], rel=1e-5)
    # the distractors still to come are as noisy after redistribution as before
    assert got["mc_variance_all_steps[redistributed]"] == pytest.approx(got["mc_variance_all_steps[original]"], rel=0.05)
    assert got["optimal_key_action[redistributed]"] == got["optimal_key_action[original]"] == 1
    assert got["optimal_start_value[original]"] == pytest.approx(1 + 3 * expected)
    assert got["optimal_start_value[redistributed]"] == pytest.approx(1 + 3 * expected, abs=0.02)
    unchanged = rudder.redistribution_properties(env, episode, rewards)
    assert unchanged["expected_future_max[redistributed]"] == pytest.approx(unchanged["expected_future_max[original]"])
    backwards = torch.zeros_like(rewards)
    backwards[-1] = rewards.sum(0)  # everything at the door: the most delayed redistribution
    assert rudder.redistribution_properties(env, episode, backwards)["expected_future_max[redistributed]"] > 1


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


def last_step_mse(predictions, returns):
    return ((predictions[-1] - returns) ** 2).mean()


def test_fitter_takes_adam_steps_on_batches_drawn_from_its_own_generator():
    torch.manual_seed(0)
    x, targets = torch.randn(3, 10, 2), torch.randn(10)
    for batch in (4, 16):  # 16 > 10 episodes: every step takes a batch of all 10 (drawn with replacement)
        model = rudder.ReturnPredictor(2, 4)
        twin = copy.deepcopy(model)
        losses = rudder.Fitter(model, last_step_mse, lr=0.05, batch=batch, seed=3).fit(x, targets, steps=4)
        generator, optimizer, expected = torch.Generator().manual_seed(3), torch.optim.Adam(twin.parameters(), lr=0.05), []
        for _ in range(4):
            pick = torch.randint(0, 10, (min(batch, 10),), generator=generator)
            loss = last_step_mse(twin(x[:, pick]), targets[pick])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            expected.append(loss.item())
        assert losses == pytest.approx(expected, rel=1e-5)
        assert expected[-1] < expected[0]
        for mine, theirs in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(mine, theirs)


def test_return_predictor_and_classifier_are_built_from_the_arguments():
    args = rudder.Args(hidden=5, trt_width=6, lr=0.02, batch=7, aux_weight=0.3, seed=4)
    fitter = rudder.return_predictor(args, features=3, device="cpu")
    assert fitter.model.lstm.hidden_size == 5 and fitter.model.lstm.input_size == 3 and fitter.batch == 7
    assert fitter.optimizer.param_groups[0]["lr"] == 0.02
    assert torch.equal(fitter.generator.get_state(), torch.Generator().manual_seed(4).get_state())
    predictions, returns = torch.randn(4, 3), torch.randn(3)
    torch.testing.assert_close(fitter.loss(predictions, returns), rudder.predictor_loss(predictions, returns, 0.3))
    classifier = rudder.transport_classifier(args, features=3, device="cpu", seed=9)
    assert classifier.model.embed.in_features == 3 and classifier.model.embed.out_features == 6
    assert classifier.batch == 7 and classifier.optimizer.param_groups[0]["lr"] == 0.02
    assert torch.equal(classifier.generator.get_state(), torch.Generator().manual_seed(9).get_state())


# --------------------------------------------------------------------------------------------
# TRT
# --------------------------------------------------------------------------------------------
def test_transport_leaves_episodes_without_important_steps_unchanged():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(12, 5, generator=g)
    ordinary = torch.ones(12, 5)  # every step gets the uniform share of attention
    torch.testing.assert_close(rudder.transport(rewards, ordinary, horizon=3, focus=2.0, scale=1.0), rewards)


def test_transport_adds_the_rewards_beyond_the_horizon_at_important_steps_only():
    # two episodes; in episode 0 steps 0 and 4 are important, in episode 1 step 1 (exactly at the
    # focus: not above it, so unchanged) and step 0
    rewards = torch.tensor([[0.0, 1.0], [0.1, 0.0], [0.0, 2.0], [0.2, 0.0], [1.0, 4.0]])
    weights = torch.tensor([[5.0, 4.0], [0.5, 3.0], [0.5, 0.5], [0.5, 0.5], [3.5, 0.5]])
    got = rudder.transport(rewards, weights, horizon=3, focus=3.0, scale=0.5)
    # step 0 gets 0.5 (r_3 + r_4): 0.6 in episode 0, 2 in episode 1; step 4 has nothing beyond 4 + 3 steps
    torch.testing.assert_close(got, torch.tensor([[0.6, 3.0], [0.1, 0.0], [0.0, 2.0], [0.2, 0.0], [1.0, 4.0]]))


def test_importance_is_one_under_uniform_attention_and_counts_what_each_step_receives():
    T = 4
    uniform = torch.full((2, T, T), 1 / T)
    torch.testing.assert_close(rudder.importance(uniform), torch.ones(T, 2))
    focused = torch.zeros(1, T, T)
    focused[..., 0] = 1.0  # every step looks at step 0
    torch.testing.assert_close(rudder.importance(focused)[:, 0], torch.tensor([4.0, 0.0, 0.0, 0.0]))
    half = torch.zeros(1, T, T)
    half[0, :2, 1] = 1.0  # steps 0 and 1 look at step 1, steps 2 and 3 at step 3
    half[0, 2:, 3] = 1.0
    torch.testing.assert_close(rudder.importance(half)[:, 0], torch.tensor([0.0, 2.0, 0.0, 2.0]))


def test_attention_classifier_shapes_and_attention_rows_sum_to_one():
    model = rudder.AttentionClassifier(features=6, width=8)
    logits, attention = model(torch.randn(7, 3, 6))
    assert logits.shape == (3,) and attention.shape == (3, 7, 7)
    torch.testing.assert_close(attention.sum(-1), torch.ones(3, 7))


def test_attention_classifier_matches_scaled_dot_product_attention_step_by_step():
    torch.manual_seed(0)
    model, x = rudder.AttentionClassifier(features=3, width=4), torch.randn(5, 2, 3)
    logits, attention = model(x)
    with torch.no_grad():
        for n in range(2):
            h = torch.relu(model.embed(x[:, n]))  # (T, width)
            q, k, v = model.query(h), model.key(h), model.value(h)
            A = torch.stack([torch.softmax(torch.stack([q[i] @ k[j] / 2.0 for j in range(5)]), 0) for i in range(5)])
            torch.testing.assert_close(attention[n], A)
            pooled = sum(A[i] @ v for i in range(5)) / 5
            torch.testing.assert_close(logits[n], model.head(pooled)[0])


def test_classifier_loss_is_the_cross_entropy_of_the_logits_alone():
    logits, labels = torch.tensor([0.0, 2.0]), torch.tensor([1.0, 0.0])
    loss = rudder.classifier_loss((logits, torch.full((2, 3, 3), 9.0)), labels)
    assert math.isclose(loss.item(), (math.log(2) + math.log(1 + math.exp(2))) / 2, rel_tol=1e-6)


def test_discount_horizon_and_key_threshold_on_hand_cases():
    assert [rudder.discount_horizon(g) for g in (0.9, 0.75, 0.5)] == [10, 4, 2]
    env = common.KeyToDoor(1, corridor=4, distractor_prob=0.3, distractor=0.1)
    assert math.isclose(rudder.key_threshold(env), 0.5 + 0.3 * 0.1 * 4)  # halfway: 0.12 without the key, 1.12 with


# --------------------------------------------------------------------------------------------
# The tabular updates
# --------------------------------------------------------------------------------------------
def test_running_mean_moves_visited_entries_toward_their_batch_mean():
    table = torch.zeros(2, 2)
    # entry (1, 0) is visited twice (targets 1 and 3: mean 2), entry (0, 1) once, the rest never
    rudder.running_mean(table, torch.tensor([2, 2, 1]), torch.tensor([1.0, 3.0, -1.0]), rate=0.5)
    torch.testing.assert_close(table, torch.tensor([[0.0, -0.5], [1.0, 0.0]]))
    per_entry = torch.tensor([1.0, 1.0, 0.25, 0.25])  # a rate per entry, as for learners sharing a table
    rudder.running_mean(table, torch.tensor([1, 2]), torch.tensor([0.5, 3.0]), rate=per_entry)
    torch.testing.assert_close(table, torch.tensor([[0.0, 0.5], [1.5, 0.0]]))


def test_running_mean_leaves_entries_it_does_not_visit_where_they_are():
    table = torch.tensor([[4.0, -2.0], [1.0, 7.0]])
    rudder.running_mean(table, torch.tensor([1]), torch.tensor([0.0]), rate=1.0)
    torch.testing.assert_close(table, torch.tensor([[4.0, 0.0], [1.0, 7.0]]))


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


def test_mc_update_learns_each_steps_return_to_go_in_a_batch():
    # two episodes through different states: rewards 1, 2, 4 (returns 7, 6, 4) and 8, 0, 16 (24, 16, 16)
    episode = {"states": torch.tensor([[0, 1], [2, 3], [4, 5]]), "actions": torch.zeros(3, 2, dtype=torch.long),
               "rewards": torch.tensor([[1.0, 8.0], [2.0, 0.0], [4.0, 16.0]])}
    Q = torch.zeros(6, 2)
    rudder.mc_update(Q, episode, alpha=1.0)
    torch.testing.assert_close(Q[:, 0], torch.tensor([7.0, 24.0, 6.0, 16.0, 4.0, 16.0]))


def test_epsilon_greedy_policy_table():
    Q = torch.tensor([[0.0, 1.0], [2.0, -1.0]])
    torch.testing.assert_close(rudder.epsilon_greedy(Q, 0.2), torch.tensor([[0.1, 0.9], [0.9, 0.1]]))
    torch.testing.assert_close(rudder.epsilon_greedy(Q, 1.0), torch.full((2, 2), 0.5))


# --------------------------------------------------------------------------------------------
# The key-to-door learner's loop, with its update, its world and its shaper replaced by recorders
# --------------------------------------------------------------------------------------------
class ScriptedUpdate:
    """Stands in for a learner's update: records its arguments, then sets the key room's values so
    that the greedy policy prefers the key (True), leaves it (False) or ties (None), in turn."""

    values = {True: [0.0, 1.0], False: [1.0, 0.0], None: [0.5, 0.5]}

    def __init__(self, preferences):
        self.preferences, self.calls = list(preferences), []

    def __call__(self, Q, episode, *rest):
        self.calls.append((Q, episode, rest))
        Q[0] = torch.tensor(self.values[self.preferences[min(len(self.calls), len(self.preferences)) - 1]])


def test_solve_reports_the_episodes_at_which_the_lasting_streak_began(monkeypatch):
    args = rudder.Args(learn_batch=4, max_episodes=400, stable=3)
    # after updates 1..7: leave, key, key, tie, key, key, key -> the streak of 3 began at update 5
    update = ScriptedUpdate([False, True, True, None, True, True, True, False])
    monkeypatch.setattr(rudder, "q_learning_update", update)
    assert rudder.solve(args, TD, corridor=2, seed=0, device="cpu") == 5 * 4
    assert len(update.calls) == 7  # and it stops there


def test_solve_that_never_settles_reports_the_budget_after_spending_it(monkeypatch):
    args = rudder.Args(learn_batch=4, max_episodes=40, stable=2)
    update = ScriptedUpdate([True, False])  # key, then never again
    monkeypatch.setattr(rudder, "mc_update", update)
    assert rudder.solve(args, MC, corridor=2, seed=0, device="cpu") == 40
    assert len(update.calls) == 10


class StandInShaper:
    """Stands in for RUDDER's or TRT's rewriter: records what it is given, returns recognisable rewards."""

    def __init__(self):
        self.calls, self.outputs = [], []

    def __call__(self, episode, num_states):
        self.calls.append((episode, num_states))
        self.outputs.append(torch.full_like(episode["rewards"], 7.0 + len(self.calls)))
        return self.outputs[-1]


@pytest.mark.parametrize("method", [TD, MC, "RUDDER", "TRT"])
def test_solve_trains_each_learner_on_its_own_reward_from_epsilon_greedy_episodes(monkeypatch, method):
    made, played, shaper = [], [], StandInShaper()

    def make_shaper(args, method, env, gamma, seed, device):
        made.append(dict(method=method, env=env, gamma=gamma, seed=seed, global_seed=torch.initial_seed()))
        return shaper if method in ("RUDDER", "TRT") else None

    def play(env, policy):
        played.append((env, policy.clone(), common.play_episodes(env, policy)))
        return played[-1][2]

    td, mc = ScriptedUpdate([True]), ScriptedUpdate([True])
    for name, value in (("make_shaper", make_shaper), ("play_episodes", play), ("q_learning_update", td),
                        ("mc_update", mc)):
        monkeypatch.setattr(rudder, name, value)
    args = rudder.Args(learn_batch=4, max_episodes=12, alpha=0.25, epsilon=0.3, distractor_prob=0.4)
    assert rudder.solve(args, method, corridor=3, seed=5, device="cpu", gamma=0.8) == 12
    env = made[0]["env"]
    assert made == [dict(method=method, env=env, gamma=0.8, seed=5, global_seed=5)]
    assert (env.num_envs, env.corridor, env.distractor_prob, env.generator.initial_seed()) == (4, 3, 0.4, 5)
    Q = torch.zeros(env.num_states + 1, 2)
    for i, (played_env, policy, _) in enumerate(played):  # the first from Q = 0, the rest after the key room's update
        Q[0] = torch.tensor([0.0, 1.0 if i else 0.0])
        assert played_env is env
        torch.testing.assert_close(policy, rudder.epsilon_greedy(Q, 0.3))
    episodes = [episode for *_, episode in played]
    used, unused = (mc, td) if method == MC else (td, mc)
    assert len(played) == len(used.calls) == 3 and not unused.calls
    for episode, (_, seen, _) in zip(episodes, used.calls):
        assert seen is episode
    if method == MC:
        assert all(rest == (0.25,) for *_, rest in mc.calls)
        return
    wanted = shaper.outputs if method in ("RUDDER", "TRT") else [e["rewards"] for e in episodes]
    assert all(rest[0] is reward and rest[1:] == (0.25, 0.8) for (*_, rest), reward in zip(td.calls, wanted))
    if method in ("RUDDER", "TRT"):
        assert [(e, n) for e, n in shaper.calls] == [(e, 10) for e in episodes]  # 10 states: corridor 3


def test_solve_takes_its_exploration_and_distractors_from_the_call_when_given(monkeypatch):
    envs, policies = [], []

    def play(env, policy):
        envs.append(env)
        policies.append(policy.clone())
        return common.play_episodes(env, policy)

    update = ScriptedUpdate([True])  # the key room prefers the key after every update
    monkeypatch.setattr(rudder, "play_episodes", play)
    monkeypatch.setattr(rudder, "q_learning_update", update)
    args = rudder.Args(learn_batch=2, max_episodes=4, epsilon=0.3, distractor_prob=0.4, alpha=0.5)
    rudder.solve(args, TD, corridor=3, seed=1, device="cpu", distractor_prob=0.1, epsilon=0.6)
    assert envs[0].distractor_prob == 0.1
    torch.testing.assert_close(policies[1][0], torch.tensor([0.3, 0.7]))  # ε = 0.6
    rudder.solve(args, TD, corridor=3, seed=1, device="cpu")
    assert len(policies) == 4 and envs[2].distractor_prob == 0.4
    torch.testing.assert_close(policies[3][0], torch.tensor([0.15, 0.85]))  # ε = 0.3, the learners' default
    assert update.calls[-1][2][1:] == (0.5, 1.0)  # and no discount unless asked


def test_a_learner_that_never_explores_never_solves():
    args = rudder.Args(max_episodes=64, learn_batch=16, stable=2)
    assert rudder.solve(args, TD, corridor=3, seed=0, device="cpu", epsilon=0.0) == 64
    assert rudder.solve(args, MC, corridor=3, seed=0, device="cpu", epsilon=1.0) < 64


def test_sweeps_run_every_method_length_and_seed_with_their_settings(monkeypatch):
    calls = []

    def solve(args, method, corridor, seed, device, **kwargs):
        calls.append((method, kwargs))
        return 100 * corridor + seed

    monkeypatch.setattr(rudder, "solve", solve)
    args = rudder.Args(sweep="3,5", trt_sweep="4", sweep_seeds=2, seed=10, trt_gamma=0.8,
                       trt_distractor_prob=0.3, trt_epsilon=0.7)
    assert rudder.delay_study(args, "cpu") == {m: {3: [310, 311], 5: [510, 511]} for m in rudder.SWEEP_METHODS}
    assert all(kwargs == {} for _, kwargs in calls) and len(calls) == 3 * 2 * 2
    calls.clear()
    assert rudder.transport_study(args, "cpu") == {m: {4: [410, 411]} for m in rudder.TRANSPORT_METHODS}
    assert [m for m, _ in calls] == [m for m in rudder.TRANSPORT_METHODS for _ in range(2)]
    assert all(kwargs == dict(gamma=0.8, distractor_prob=0.3, epsilon=0.7) for _, kwargs in calls)


# --------------------------------------------------------------------------------------------
# The shapers: what they refit on, and the reward they return from the refit model
# --------------------------------------------------------------------------------------------
class FitRecorder:
    """Stands in for Fitter.fit: records (x, targets, steps) and nudges the model's last bias, so
    that a reward computed before the fit would differ from one computed after it."""

    def __init__(self, bias: torch.Tensor):
        self.bias, self.calls = bias, []

    def __call__(self, x, targets, steps, progress=False):
        self.calls.append((x.clone(), targets.clone(), steps))
        with torch.no_grad():
            self.bias += 0.5


def test_rudder_shaper_refits_on_its_latest_batches_then_redistributes_with_the_refit_model():
    args = rudder.Args(buffer_batches=2, refit_steps=3, inputs="state", hidden=4)
    batches = [key_to_door_episodes(n, corridor=2, seed=n)[1] for n in (3, 4, 5)]
    fitter = rudder.return_predictor(args, rudder.encoded_size(8, "state"), "cpu", seed=0)
    fitter.fit = recorder = FitRecorder(fitter.model.head.bias)
    shaper = rudder.Redistribution(args, fitter)
    xs, returns = [rudder.encode(b, 8, "state") for b in batches], [b["rewards"].sum(0) for b in batches]
    for x, G, episode in zip(xs, returns, batches):
        got = shaper(episode, 8)
        with torch.no_grad():
            torch.testing.assert_close(got, rudder.redistribute(fitter.model(x), G))
    kept = [[0], [0, 1], [1, 2]]  # the latest two batches
    assert len(recorder.calls) == 3
    for (x, targets, steps), k in zip(recorder.calls, kept):
        torch.testing.assert_close(x, torch.cat([xs[i] for i in k], dim=1))
        torch.testing.assert_close(targets, torch.cat([returns[i] for i in k]))
        assert steps == 3


def test_trt_shaper_refits_on_return_above_threshold_then_transports_with_the_refit_attention():
    args = rudder.Args(buffer_batches=1, refit_steps=2, trt_focus=0.9, trt_scale=0.5, trt_width=4)
    env, _ = key_to_door_episodes(1, corridor=5, distractor_prob=0.5)
    batches = [key_to_door_episodes(16, corridor=5, distractor_prob=0.5, seed=s)[1] for s in (1, 2)]
    threshold = batches[0]["rewards"].sum(0).median().item()  # some episodes return exactly this: not above it
    fitter = rudder.transport_classifier(args, rudder.encoded_size(env.num_states, "difference"), "cpu", seed=0)
    fitter.fit = recorder = FitRecorder(fitter.model.head.bias)
    shaper = rudder.Transport(args, fitter, threshold, horizon=2)
    for episode in batches:
        got = shaper(episode, env.num_states)
        x = rudder.encode(episode, env.num_states, "difference")
        with torch.no_grad():
            weights = rudder.importance(fitter.model(x)[1])
        torch.testing.assert_close(got, rudder.transport(episode["rewards"], weights, 2, 0.9, 0.5))
        assert (got != episode["rewards"]).any() and (got == episode["rewards"]).any()
        x_fit, labels, steps = recorder.calls[-1]
        torch.testing.assert_close(x_fit, x)  # one batch kept
        torch.testing.assert_close(labels, (episode["rewards"].sum(0) > threshold).float())
        assert steps == 2 and 0 < labels.mean() < 1


def test_make_shaper_builds_each_methods_model_on_its_inputs():
    args = rudder.Args(inputs="state", hidden=4, trt_width=4)
    env = common.KeyToDoor(2, corridor=3, distractor_prob=0.5)
    redistribution = rudder.make_shaper(args, "RUDDER", env, 1.0, seed=5, device="cpu")
    assert isinstance(redistribution, rudder.Redistribution) and redistribution.args is args
    assert redistribution.fitter.model.lstm.input_size == rudder.encoded_size(env.num_states, "state")
    assert torch.equal(redistribution.fitter.generator.get_state(), torch.Generator().manual_seed(5).get_state())
    transporter = rudder.make_shaper(args, "TRT", env, 0.75, seed=6, device="cpu")
    assert isinstance(transporter, rudder.Transport)
    assert transporter.fitter.model.embed.in_features == rudder.encoded_size(env.num_states, "difference")
    assert transporter.threshold == rudder.key_threshold(env) and transporter.horizon == 4
    assert torch.equal(transporter.fitter.generator.get_state(), torch.Generator().manual_seed(6).get_state())
    assert rudder.make_shaper(args, TD, env, 1.0, 5, "cpu") is None and rudder.make_shaper(args, MC, env, 1.0, 5, "cpu") is None


def test_watch_redistribution_refits_each_learners_predictor_on_its_latest_episodes():
    args = rudder.Args(watch_steps=4, watch_buffer=3, watch_refit_every=2, watch_refit_steps=7, hidden=4, seed=2)
    shaper = rudder.WatchRedistribution(args, learners=2, device="cpu")
    recorders = []
    for i, fitter in enumerate(shaper.fitters):
        assert torch.equal(fitter.generator.get_state(), torch.Generator().manual_seed(2 + i).get_state())
        fitter.fit = FitRecorder(fitter.model.head.bias)
        recorders.append(fitter.fit)
    env, features, returns = rudder.PocketWatch(2, steps=4, seed=0), [], []
    for _ in range(5):
        env.reset()
        episode = env.finish(torch.tensor([0, 1]))
        features.append(rudder.watch_features(episode, 4))
        returns.append(episode["rewards"].sum(0))
        got = shaper(episode)
        with torch.no_grad():
            predictions = torch.cat([f.model(features[-1][:, i:i + 1]) for i, f in enumerate(shaper.fitters)], 1)
        torch.testing.assert_close(got, rudder.redistribute(predictions, returns[-1]))
    # refits after episodes 2 and 4, on what is stored: episodes 1, 2, then (4 in 1's slot), 2, 3
    for i, recorder in enumerate(recorders):
        assert [steps for *_, steps in recorder.calls] == [7, 7]
        for (x, targets, _), stored in zip(recorder.calls, ([0, 1], [3, 1, 2])):
            torch.testing.assert_close(x, torch.stack([features[e][:, i] for e in stored], 1))
            torch.testing.assert_close(targets, torch.stack([returns[e][i] for e in stored]))


# --------------------------------------------------------------------------------------------
# The studies, with the model fits recorded
# --------------------------------------------------------------------------------------------
def test_uniform_episodes_are_a_seeded_coin_flip_at_the_key():
    args = rudder.Args(episodes=2000, corridor=3, seed=7)
    env, episode = rudder.uniform_episodes(args, 0.3, "cpu")
    assert (env.num_envs, env.corridor, env.distractor_prob) == (2000, 3, 0.3)
    _, twin = key_to_door_episodes(2000, corridor=3, distractor_prob=0.3, seed=7)
    for key in twin:
        assert torch.equal(episode[key], twin[key])
    assert abs(episode["actions"].float().mean() - 0.5) < 0.03
    assert abs((episode["rewards"][1:-1] > 0).float().mean() - 0.3) < 0.03


def test_predictor_study_reports_what_its_trained_predictor_does(monkeypatch):
    args = rudder.Args(corridor=3, episodes=32, distractor_prob=0.5, inputs="state", seed=4)
    torch.manual_seed(0)
    model, seen = rudder.ReturnPredictor(rudder.encoded_size(10, "state"), 4), []

    def train(args_, x, returns, device):
        seen.append((args_, x, returns))
        return model, [2.0, 1.0]

    monkeypatch.setattr(rudder, "train_predictor", train)
    study = rudder.predictor_study(args, "cpu")
    _, episode = rudder.uniform_episodes(args, 0.5, "cpu")
    returns = episode["rewards"].sum(0)
    assert seen[0][0] is args
    torch.testing.assert_close(seen[0][1], rudder.encode(episode, 10, "state"))
    torch.testing.assert_close(seen[0][2], returns)
    with torch.no_grad():
        predictions = model(seen[0][1])
    redistributed = rudder.redistribute(predictions, returns)
    torch.testing.assert_close(study["episode"]["rewards"], episode["rewards"])
    torch.testing.assert_close(study["redistributed"], redistributed)
    assert study["losses"] == [2.0, 1.0]
    assert study["predictor_final_mse"] == pytest.approx(float(((predictions[-1] - returns) ** 2).mean()))
    assert study["credit_share_at_key"] == pytest.approx(float(rudder.credit_share(redistributed)[0]))
    assert study["max_abs_sum_minus_return"] == pytest.approx(float((redistributed.sum(0) - returns).abs().max()), abs=1e-7)
    assert study["max_abs_sum_minus_return"] < 1e-5
    env, _ = rudder.uniform_episodes(args, 0.5, "cpu")
    for key, value in rudder.redistribution_properties(env, episode, redistributed).items():
        assert study[key] == pytest.approx(value), key


def test_transport_demo_marks_the_steps_its_classifier_attends_to(monkeypatch):
    args = rudder.Args(corridor=6, episodes=32, trt_distractor_prob=0.5, steps=9, trt_gamma=0.75, trt_focus=0.9,
                       trt_scale=0.5, trt_width=4, seed=1)
    made = []

    def classifier(args_, features, device):
        torch.manual_seed(0)
        made.append(rudder.Fitter(rudder.AttentionClassifier(features, 4), rudder.classifier_loss, 0.01, 8, 0))
        made[-1].fit = FitRecorder(made[-1].model.head.bias)
        return made[-1]

    monkeypatch.setattr(rudder, "transport_classifier", classifier)
    demo = rudder.transport_demo(args, "cpu")
    env, episode = rudder.uniform_episodes(args, 0.5, "cpu")
    x = rudder.encode(episode, env.num_states, "difference")
    (x_fit, labels, steps), = made[0].fit.calls
    torch.testing.assert_close(x_fit, x)
    torch.testing.assert_close(labels, (episode["rewards"].sum(0) > rudder.key_threshold(env)).float())
    assert steps == 3 and demo["horizon"] == 4
    with torch.no_grad():
        weights = rudder.importance(made[0].model(x)[1])
    transported = rudder.transport(episode["rewards"], weights, 4, 0.9, 0.5)
    torch.testing.assert_close(demo["weights"], weights)
    torch.testing.assert_close(demo["transported"], transported)
    changed = (transported != episode["rewards"]).float()
    assert demo["share_of_steps_changed"] == pytest.approx(float(changed.mean()))
    assert 0 < demo["share_of_steps_changed"] < 1
    assert demo["share_changed_at_key"] == pytest.approx(float(changed[0].mean()))


# --------------------------------------------------------------------------------------------
# Pocket watch: the world
# --------------------------------------------------------------------------------------------
def test_pocket_watch_optimal_decisions_are_sell_repair_repair_sell():
    env = rudder.PocketWatch(1)  # the sale 50 steps after the decision: 49 steps of costs on the way
    assert env.expected_returns().argmax(1).tolist() == list(OPTIMAL)
    torch.testing.assert_close(env.expected_returns()[:, 0], torch.full((4,), 19 - 49 * 0.36))
    # repaired: price - repair - delivery = 16.5, 21.5, 21.5, 16.5 against 19 unrepaired
    gaps = env.expected_returns()[:, 1] - env.expected_returns()[:, 0]
    torch.testing.assert_close(gaps, torch.tensor([-2.5, 2.5, 2.5, -2.5]))


def test_pocket_watch_expected_returns_on_a_hand_case():
    env = rudder.PocketWatch(1, steps=3, unrepaired=18.0)
    on_the_way = 2 * (0.1 * 0.1 + 0.05 * 7)  # two steps between the decision and the sale
    expected = torch.tensor([[18.0, 16.5], [18.0, 21.5], [18.0, 21.5], [18.0, 16.5]]) - on_the_way
    torch.testing.assert_close(env.expected_returns(), expected)


@pytest.fixture(scope="module")
def many_shops():
    env = rudder.PocketWatch(200_000, steps=10, seed=1)
    first, info = env.reset()
    repair = torch.arange(env.num_envs) % 2
    return env, first, info["brand"], repair, env.finish(repair)


def test_pocket_watch_episodes_match_the_expected_returns_and_pay_the_sale_at_the_end(many_shops):
    env, _, brand, repair, episode = many_shops
    returns = episode["rewards"].sum(0)
    expected = env.expected_returns()[brand, repair]
    for b in range(4):
        for action in (0, 1):
            pick = (brand == b) & (repair == action)
            assert abs(returns[pick].mean() - expected[pick][0]) < 0.1
    middle = episode["rewards"][1:-1].unique()  # only the costs on the way before the sale
    assert torch.isclose(middle[:, None], torch.tensor([0.0, -0.1, -7.0])).any(1).all()
    assert (episode["rewards"][0][repair == 0] == 0).all()  # selling as it is costs nothing now
    assert (episode["actions"][1:] == 0).all()
    assert (episode["next_states"][:-1] == episode["states"][1:]).all()
    assert (episode["next_states"][-1] == env.num_states).all()


def test_pocket_watch_costs_arrive_at_their_rates_and_the_noise_has_its_variance(many_shops):
    env, first, brand, repair, episode = many_shops
    counts = torch.bincount(brand, minlength=4) / env.num_envs
    torch.testing.assert_close(counts, torch.full((4,), 0.25), atol=0.01, rtol=0)  # brands drawn uniformly
    assert torch.equal(first, 2 * brand * 10)
    middle = episode["rewards"][1:-1]
    assert abs((middle == -7.0).float().mean() - 0.05) < 0.002  # flat tyres
    assert abs(torch.isclose(middle, torch.tensor(-0.1)).float().mean() - 0.1) < 0.002  # traffic jams
    unrepaired_sale = episode["rewards"][-1][repair == 0] - 19.0  # the sale, and the last step's cost
    assert torch.isclose(unrepaired_sale[:, None], torch.tensor([0.0, -0.1, -7.0])).any(1).all()
    cost_variance = 0.05 * 49 + 0.1 * 0.01 - (0.05 * 7 + 0.1 * 0.1) ** 2
    for b in range(4):
        paid = -episode["rewards"][0][(brand == b) & (repair == 1)]
        assert abs(paid.mean() - env.repair_mean[b]) < 0.05 and abs(paid.var() - env.repair_var[b]) < 0.1
        sold = episode["rewards"][-1][(brand == b) & (repair == 1)]
        assert abs(sold.mean() - (env.price[b] - env.delivery_mean[b] - 0.36)) < 0.06
        assert abs(sold.var() - (1.5 + cost_variance)) < 0.25


def test_pocket_watch_states_record_the_brand_the_repair_and_the_time(many_shops):
    env, _, brand, repair, episode = many_shops
    t = torch.arange(10)[:, None]
    torch.testing.assert_close(episode["states"], (2 * brand + repair * (t > 0)) * 10 + t)
    torch.testing.assert_close(episode["actions"][0], repair)
    assert torch.equal(episode["brand"], brand)


def test_pocket_watch_is_reproducible_from_its_seed():
    runs = []
    for seed in (3, 3, 4, 0, None):
        env = rudder.PocketWatch(50, steps=5, seed=seed) if seed is not None else rudder.PocketWatch(50, steps=5)
        env.reset()
        runs.append(env.finish(torch.ones(50, dtype=torch.long))["rewards"])
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])
    assert torch.equal(runs[3], runs[4])  # seed 0 unless told


def test_pocket_watch_states_and_q_table():
    env = rudder.PocketWatch(1, steps=5)
    assert env.state(3, 1, 4) == env.num_states - 1
    Q = env.q_table(learners=2)
    assert Q.shape == (2 * (env.num_states + 1), 2)
    assert (Q[:, 0] == 0).all()
    decisions = (Q[:, 1] == 0).nonzero().flatten().tolist()  # the only states with a second action
    rows = env.num_states + 1
    assert decisions == [b * 2 * 5 + k * rows for k in (0, 1) for b in range(4)]
    assert (Q[:, 1] == -math.inf).sum() == 2 * (rows - 4)  # every other action is never the max


def test_watch_features_show_the_decision_only_at_the_first_step():
    env = rudder.PocketWatch(4, steps=6, seed=0)
    env.reset()
    episode = env.finish(torch.tensor([0, 1, 1, 0]))
    x = rudder.watch_features(episode, steps=6)
    assert x.shape == (6, 4, 8)
    assert (x[1:, :, 5:7] == 0).all()
    torch.testing.assert_close(x[0, :, 5:7], torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]]))
    torch.testing.assert_close(x[:, :, 4], torch.tensor([0.0, 1.0, 1.0, 0.0]).expand(6, 4) * (torch.arange(6) > 0)[:, None])
    torch.testing.assert_close(x[:, :, :4], torch.eye(4)[episode["brand"]].expand(6, 4, 4))
    torch.testing.assert_close(x[:, :, 7], episode["rewards"] / 10)


# --------------------------------------------------------------------------------------------
# Pocket watch: the learners' loop, with its world's decisions scripted and its updates recorded
# --------------------------------------------------------------------------------------------
def set_decisions(Q, env, choices):
    """Make learner k's greedy decision for brand b be choices[k][b]."""
    rows = env.num_states + 1
    for k, decide in enumerate(choices):
        for b in range(4):
            Q[k * rows + env.state(b, 0, 0)] = torch.tensor([1.0, 0.0]) if decide[b] == 0 else torch.tensor([0.0, 1.0])


class WatchSpy:
    """Replaces the pocket watch by one that records how it was built and the decisions it was
    given, and the tabular updates by recorders; `choices(n)` says each learner's greedy
    decisions after n updates (it sets them in the shared Q table)."""

    def __init__(self, monkeypatch, choices, shaper=None):
        spy = self
        self.envs, self.repairs, self.episodes, self.td, self.mc, self.shaper = [], [], [], [], [], shaper

        class Watch(rudder.PocketWatch):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                spy.envs.append(self)

            def q_table(self, learners):
                Q = super().q_table(learners)
                set_decisions(Q, self, choices(0))
                return Q

            def finish(self, repair):
                spy.repairs.append(repair.clone())
                spy.episodes.append(super().finish(repair))
                return spy.episodes[-1]

        def recorder(calls):
            def update(Q, episode, *rest):
                calls.append((episode, rest))
                set_decisions(Q, spy.envs[0], choices(len(spy.td) + len(spy.mc)))
            return update

        monkeypatch.setattr(rudder, "PocketWatch", Watch)
        monkeypatch.setattr(rudder, "q_learning_update", recorder(self.td))
        monkeypatch.setattr(rudder, "mc_update", recorder(self.mc))
        if shaper is not None:
            monkeypatch.setattr(rudder, "WatchRedistribution", shaper)


def watch_args(**changes):
    settings = dict(watch_seeds=3, watch_alphas="0.1,0.3", watch_window=20, watch_target=1.0, watch_epsilon=0.0,
                    watch_max_episodes=300, watch_rudder_max_episodes=200, watch_steps=4)
    return rudder.Args(**{**settings, **changes})


def test_watch_learners_are_solved_at_the_first_check_whose_whole_window_was_optimal(monkeypatch):
    # six learners (step sizes 0.1 and 0.3, three seeds each) decide optimally from the start, except learner 2
    # from episode 30 on (window 30-49: solved at the check after episode 50), learner 3 from episode 31 on
    # (solved at the check after episode 100), and learner 4 errs at episode 49 alone (solved after 100 too)
    def choices(n):
        return [OPTIMAL, OPTIMAL, OPTIMAL if n >= 30 else WORST, OPTIMAL if n >= 31 else WORST,
                WORST if n == 49 else OPTIMAL, OPTIMAL]

    spy = WatchSpy(monkeypatch, choices)
    result = rudder.watch_learn(watch_args(), TD, [0.1, 0.3], "cpu")
    assert result["episodes"].tolist() == [[50, 50, 50], [100, 100, 50]] and result["budget"] == 300
    assert result["correct"].shape == (100, 2, 3) and len(spy.td) == 100 and not spy.mc  # all solved: it stops
    episode = np.arange(100)
    np.testing.assert_array_equal(result["correct"][:, 0, :2], 1.0)
    np.testing.assert_array_equal(result["correct"][:, 1, 2], 1.0)
    np.testing.assert_array_equal(result["correct"][:, 0, 2], (episode >= 30).astype(float))
    np.testing.assert_array_equal(result["correct"][:, 1, 0], (episode >= 31).astype(float))
    np.testing.assert_array_equal(result["correct"][:, 1, 1], (episode != 49).astype(float))


def test_watch_learners_that_never_meet_the_target_count_as_their_methods_budget(monkeypatch):
    def choices(n):
        return [OPTIMAL, OPTIMAL, OPTIMAL, WORST, (0, 0, 0, 0), WORST]  # (0, 0, 0, 0): right for half the brands

    for method, budget in ((TD, 150), (MC, 150), ("RUDDER", 100)):
        spy = WatchSpy(monkeypatch, choices, shaper=lambda args, learners, device: StandInWatchShaper())
        args = watch_args(watch_window=50, watch_max_episodes=150, watch_rudder_max_episodes=100)
        result = rudder.watch_learn(args, method, [0.1, 0.3], "cpu")
        assert result["episodes"].tolist() == [[50, 50, 50], [budget] * 3] and result["budget"] == budget
        assert result["correct"].shape == (budget, 2, 3) and len(spy.td) + len(spy.mc) == budget


class StandInWatchShaper:
    def __init__(self):
        self.calls = []

    def __call__(self, episode):
        self.calls.append(episode)
        return torch.full_like(episode["rewards"], 5.0 + len(self.calls))


@pytest.mark.parametrize("method", [TD, MC, "RUDDER"])
def test_watch_learners_update_their_own_block_of_the_shared_table_with_their_step_size(monkeypatch, method):
    made = []

    def shaper(args, learners, device):
        made.append((args, learners, StandInWatchShaper()))
        return made[-1][2]

    spy = WatchSpy(monkeypatch, lambda n: [OPTIMAL] * 6, shaper=shaper)
    args = watch_args(seed=3, watch_steps=5, unrepaired=18.0, watch_window=50)
    rudder.watch_learn(args, method, [0.1, 0.3], "cpu")
    env = spy.envs[0]
    assert (len(spy.envs), env.num_envs, env.steps, env.unrepaired, env.generator.initial_seed()) == (1, 6, 5, 18.0, 3)
    rows = env.num_states + 1
    offset = torch.arange(6) * rows
    calls = spy.mc if method == MC else spy.td
    assert len(calls) == len(spy.episodes) == 50 and not (spy.td if method == MC else spy.mc)
    for episode, (table, rest) in zip(spy.episodes, calls):
        torch.testing.assert_close(table["states"], episode["states"] + offset)
        torch.testing.assert_close(table["next_states"], episode["next_states"] + offset)
        torch.testing.assert_close(table["actions"], episode["actions"])
        alpha = rest[-1].view(6, rows, 2)
        assert len(rest) == (1 if method == MC else 2)
        torch.testing.assert_close(alpha, torch.tensor([0.1] * 3 + [0.3] * 3)[:, None, None].expand(6, rows, 2))
    if method == TD:
        assert all(rest[0] is episode["rewards"] for episode, (_, rest) in zip(spy.episodes, calls))
    if method == "RUDDER":
        assert made[0][:2] == (args, 6)
        assert made[0][2].calls == spy.episodes  # the shaper sees each learner's episode in its own rows
        torch.testing.assert_close(calls[-1][1][0], torch.full_like(spy.episodes[-1]["rewards"], 55.0))
    else:
        assert not made


def test_watch_learners_explore_with_a_coin_flip_and_are_judged_by_their_greedy_decision(monkeypatch):
    choices = [OPTIMAL, WORST] * 3
    spy = WatchSpy(monkeypatch, lambda n: choices)
    rudder.watch_learn(watch_args(watch_max_episodes=100), TD, [0.1, 0.3], "cpu")
    greedy = torch.tensor([[choices[k][b] for k, b in enumerate(e["brand"].tolist())] for e in spy.episodes])
    assert torch.equal(torch.stack(spy.repairs), greedy)  # ε = 0: the greedy decision
    runs = {}
    for epsilon, share, global_seed in ((1.0, 0.5, 0), (0.5, 0.75, 0), (0.5, 0.75, 1)):
        spy = WatchSpy(monkeypatch, lambda n: [OPTIMAL] * 6)
        torch.manual_seed(global_seed)
        result = rudder.watch_learn(watch_args(watch_epsilon=epsilon, watch_window=150), TD, [0.1, 0.3], "cpu")
        assert (result["episodes"] == 150).all()  # every greedy decision optimal, whatever was done
        repairs = runs[epsilon, global_seed] = torch.stack(spy.repairs)
        greedy = torch.tensor(OPTIMAL)[torch.stack([e["brand"] for e in spy.episodes])]
        assert set(repairs.unique().tolist()) == {0, 1}
        assert abs((repairs == greedy).float().mean() - share) < 0.05
        assert abs(repairs.float().mean() - 0.5) < 0.05
    assert torch.equal(runs[0.5, 0], runs[0.5, 1])  # the draws come from the world's seed alone


def test_watch_study_runs_every_method_on_every_step_size(monkeypatch):
    calls = []
    monkeypatch.setattr(rudder, "watch_learn", lambda args, method, alphas, device: calls.append((method, alphas)) or method)
    study = rudder.watch_study(rudder.Args(watch_alphas="0.2,0.4"), "cpu")
    assert study == {m: m for m in rudder.WATCH_METHODS} and calls == [(m, [0.2, 0.4]) for m in rudder.WATCH_METHODS]


# --------------------------------------------------------------------------------------------
# Claims: each verdict computed from hand-made summaries, both ways
# --------------------------------------------------------------------------------------------
def test_growth_law_tells_exponential_from_power():
    L = [5, 10, 20, 40]
    power = rudder.growth_law(L, [0.5 * x**0.9 for x in L])
    assert math.isclose(power["power"], 0.9, rel_tol=1e-6)
    assert power["power_residual"] < power["exponential_residual"]
    exponential = rudder.growth_law(L, [2 * 1.1**x for x in L])
    assert math.isclose(exponential["exponential"], math.log(1.1), rel_tol=1e-6)
    assert exponential["exponential_residual"] < 1e-12 < exponential["power_residual"]
    assert rudder.growth_law([5, 10], [3.0, 9.0])["power_residual"] == 0.0  # two points: any line fits


def test_growth_verdict_needs_a_clear_winner():
    assert rudder.growth_verdict({"exponential_residual": 0.01, "power_residual": 0.05}) is True
    assert rudder.growth_verdict({"exponential_residual": 0.05, "power_residual": 0.01}) is False
    assert rudder.growth_verdict({"exponential_residual": 0.019, "power_residual": 0.026}) is None
    assert rudder.growth_verdict({"exponential_residual": 0.2, "power_residual": 0.5}) is True
    assert rudder.growth_verdict({"exponential_residual": 0.5, "power_residual": 0.2}) is False
    # exactly half is not "under half"
    assert rudder.growth_verdict({"exponential_residual": 0.25, "power_residual": 0.5}) is None
    assert rudder.growth_verdict({"exponential_residual": 0.5, "power_residual": 0.25}) is None


def test_best_step_size_is_the_lowest_median():
    assert rudder.best_alpha({"episodes": np.array([[1, 9, 9], [5, 5, 5]])}) == 1


def watch_summary(td, ru, mc=((900,) * 3, (800,) * 3), seconds=(0.001, 0.001, 0.01)):
    """Episodes to solve at step sizes (0.1, 0.3) over three seeds, by row, and seconds per episode
    (TD, MC, RUDDER)."""
    return {TD: {"episodes": np.array(td), "budget": 5000, "seconds_per_episode": seconds[0]},
            MC: {"episodes": np.array(mc), "budget": 5000, "seconds_per_episode": seconds[1]},
            "RUDDER": {"episodes": np.array(ru), "budget": 500, "seconds_per_episode": seconds[2]}}


def test_watch_claim_holds_only_when_rudder_needs_ten_times_fewer_episodes():
    args = rudder.Args(watch_alphas="0.1,0.3")
    td = [[4000, 4000, 5000], [1000, 900, 1100]]  # best at 0.3: median 1000
    metrics, claims = rudder.watch_claims(args, watch_summary(td, [[90, 100, 500], [300, 300, 300]]))  # 100 at 0.1
    claims = claims[:4]  # the authors' numbers and ratio; RUDDER vs MC and the overhead are tested below
    assert metrics["watch_ratio_Q_over_RUDDER"] == 10.0 and claims[-1]["holds"] is True
    assert metrics["watch_best_alpha[Q-learning (TD)]"] == 0.3 and metrics["watch_best_alpha[RUDDER]"] == 0.1
    assert metrics["watch_episodes_to_solve[RUDDER, α=0.3]"] == 300.0
    assert metrics["watch_episodes_to_solve[RUDDER]"] == 100.0 and metrics["watch_episodes_to_solve[Monte Carlo]"] == 800.0
    assert [c["source"] for c in claims] == ["RUDDER authors, pocket watch"] * 3 + ["RUDDER authors, pocket watch (ratio 19-38x)"]
    assert claims[0]["measured"] == "ours: median 1,000 (range 900-1,100) at α=0.3"
    assert [c["holds"] for c in claims[:-1]] == [None, None, None]
    assert claims[2]["measured"] == "ours: median 100 (range 90-500) at α=0.1, 1 of 3 seeds unsolved in 500"
    assert "10.0x, each at its best step size; at equal step sizes α=0.1: 40.0x, α=0.3: 3.3x" in claims[-1]["measured"]
    metrics, claims = rudder.watch_claims(args, watch_summary(td, [[90, 101, 500], [300, 300, 300]]))
    assert metrics["watch_ratio_Q_over_RUDDER"] == pytest.approx(1000 / 101) and claims[3]["holds"] is False


@pytest.mark.parametrize("ru,mc,holds", [
    ([[90, 100, 500], [300] * 3], [[900] * 3, [800] * 3], True),  # 100 vs 800
    ([[450] * 3, [480] * 3], [[900] * 3, [400] * 3], False),  # RUDDER needs more: 450 vs 400
    ([[500] * 3, [500] * 3], [[900] * 3, [400] * 3], False),  # RUDDER never solves, MC solved within 500
    ([[500] * 3, [500] * 3], [[900] * 3, [800] * 3], None),  # RUDDER never solves, MC only after 500
    ([[100] * 3, [300] * 3], [[5000] * 3, [5000] * 3], True),  # MC never solves
])
def test_watch_claim_rudder_against_monte_carlo_minds_the_budgets(ru, mc, holds):
    args = rudder.Args(watch_alphas="0.1,0.3")
    _, claims = rudder.watch_claims(args, watch_summary([[4000] * 3, [1000] * 3], ru, mc=mc))
    versus = claims[4]
    assert versus["claim"] == "RUDDER needs fewer episodes than Monte Carlo" and versus["holds"] is holds


def test_watch_claim_overhead_compares_rudders_seconds_per_episode_with_q_learning():
    args = rudder.Args(watch_alphas="0.1,0.3", watch_seeds=3)
    summary = dict(td=[[4000] * 3, [1000] * 3], ru=[[100] * 3, [300] * 3])
    metrics, claims = rudder.watch_claims(args, watch_summary(**summary, seconds=(0.002, 0.001, 0.03)))
    assert claims[5]["holds"] is True and claims[5]["source"] == "survey §5"
    assert "all 6 learners at once" in claims[5]["measured"] and "RUDDER / Q-learning 15x" in claims[5]["measured"]
    assert metrics["watch_seconds_per_episode[RUDDER]"] == 0.03
    _, claims = rudder.watch_claims(args, watch_summary(**summary, seconds=(0.002, 0.001, 0.002)))
    assert claims[5]["holds"] is False


@pytest.mark.parametrize("args_,holds", [
    ((100, 500, 200, 5000), True), ((300, 500, 200, 5000), False),
    ((500, 500, 400, 5000), False), ((500, 500, 600, 5000), None), ((500, 500, 5000, 5000), None),
    ((400, 500, 5000, 5000), True), ((400, 500, 300, 300), None),
])
def test_fewer_episodes_reads_a_median_at_the_budget_as_unsolved(args_, holds):
    assert rudder.fewer_episodes(*args_) is holds


def delay_summary(td, credit=0.6, gap=1e-6, mc=None, ru=None):
    args = rudder.Args(sweep=",".join(str(L) for L in (5, 10, 20, 40)[:len(td)]))
    mc, ru = mc or [50.0] * len(td), ru or [10.0] * len(td)
    results = {TD: {L: [v, v, v] for L, v in zip(args.sweep_list, td)},
               MC: {L: [v] * 3 for L, v in zip(args.sweep_list, mc)}, "RUDDER": {L: [v] * 3 for L, v in zip(args.sweep_list, ru)}}
    return rudder.delay_claims(args, results, {"credit_share_at_key": credit, "max_abs_sum_minus_return": gap})


def test_delay_claims_follow_the_growth_law_the_credit_share_and_the_return_gap():
    exponential, power = [2 * 1.1**L for L in (5, 10, 20, 40)], [3 * L**1.5 for L in (5, 10, 20, 40)]
    metrics, claims = delay_summary(exponential, mc=[10 * v for v in exponential])
    assert [c["holds"] for c in claims] == [True, True, True, None, True, True]
    assert "L = 5: 0.3x, 10: 0.5x, 20: 1.3x, 40: 9.1x;" in claims[1]["measured"]  # TD / RUDDER (10 episodes)
    assert "RUDDER needs 10 at every L" in claims[1]["measured"]  # not "within 10-10"
    assert [c["source"] for c in claims] == ["survey §5 (RUDDER paper's theorem)"] + ["survey §5 (RUDDER paper)"] * 3 + [
        "survey §5", "survey §5"]
    assert "exponential in the delay" in claims[0]["claim"] and "sum to the original return" in claims[5]["claim"]
    assert "Monte Carlo tree search" in claims[3]["claim"] and "no tree search" in claims[3]["measured"]
    assert metrics["L20_episodes_to_solve[Q-learning (TD)]"] == pytest.approx(2 * 1.1**20)
    assert metrics["L40_episodes_to_solve[RUDDER]"] == 10.0
    assert [c["holds"] for c in delay_summary(power, credit=0.5, gap=1e-4)[1]] == [False, False, False, None, False, False]
    assert [c["holds"] for c in delay_summary(power, credit=0.4, gap=1e-3)[1]] == [False, False, False, None, False, False]
    assert delay_summary(exponential[:2])[1][0]["holds"] is None  # two lengths cannot tell the laws apart
    assert delay_summary(exponential[:3])[1][0]["holds"] is True


def test_delay_claims_rudder_against_monte_carlo_is_its_lead_not_mcs_own_growth():
    td = [2 * 1.1**L for L in (5, 10, 20, 40)]
    tie = delay_summary(td, mc=[16.0] * 4, ru=[16.0] * 4)[1][2]
    assert tie["holds"] is False and "1.0x" in tie["measured"] and "MC needs 16 at every L, RUDDER 16 at every L" in tie["measured"]
    # RUDDER's lead over MC grows exponentially while RUDDER itself grows too
    ru = [10 + L for L in (5, 10, 20, 40)]
    assert delay_summary(td, mc=[r * 1.2**L for r, L in zip(ru, (5, 10, 20, 40))], ru=ru)[1][2]["holds"] is True
    assert "RUDDER 15 to 50" in delay_summary(td, ru=ru)[1][2]["measured"]


@pytest.mark.parametrize("ratios,holds", [
    ([1.0, 1.0, 1.0], False),  # never faster
    ([0.5, 0.8, 1.0], False),  # not faster anywhere
    ([3.0, 3.0, 3.0], False),  # faster, but the lead does not grow
    ([4.0, 3.0, 2.0], False),  # the lead shrinks
    ([1.1**5, 1.1**10, 1.1**20], True),  # exponential lead
    ([5**1.5, 10**1.5, 20**1.5], False),  # power-law lead
    ([2.0, 4.0], None),  # two lengths: cannot tell
])
def test_speedup_verdict(ratios, holds):
    assert rudder.speedup_verdict([5, 10, 20][:len(ratios)], ratios) is holds


def test_range_text():
    assert rudder.range_text([16.0, 16.0]) == "16 at every L"
    assert rudder.range_text([128.0, 32.0, 1520.0]) == "32 to 1,520"


def transport_summary(gains, changed=0.1, lengths=(3, 5, 9, 20), horizon=10):
    args = rudder.Args(trt_sweep=",".join(map(str, lengths)))
    results = {TD: {L: [100.0 * g] for L, g in zip(lengths, gains)}, "TRT": {L: [100.0] for L in lengths},
               "RUDDER": {L: [7.0] for L in lengths}}
    return rudder.transport_claims(args, results, {"horizon": horizon, "share_of_steps_changed": changed,
                                                   "share_changed_at_key": 0.25})


def test_transport_claims_compare_the_gains_on_either_side_of_the_horizon():
    # L = 9: L + 1 = τ_γ = 10 steps from the key to the door, so it counts as beyond the horizon
    metrics, claims = transport_summary([1.0, 2.0, 3.0, 1.0])
    assert [c["holds"] for c in claims] == [True, True, False]  # TRT's 100 episodes against RUDDER's 7
    assert claims[0]["measured"].endswith("L = 3: 1.0x, 5: 2.0x, 9: 3.0x, 20: 1.0x")
    assert [c["source"] for c in claims] == ["survey §6", "survey §4.1.4", "survey §4.1.5"]
    assert "L = 3: 100 vs 7, 5: 100 vs 7" in claims[2]["measured"] and "fewer at 0 of 4" in claims[2]["measured"]
    assert metrics["trt_L9_episodes_to_solve[Q-learning (TD)]"] == 300.0
    assert metrics["trt_share_changed_at_key"] == 0.25 and metrics["trt_share_of_steps_changed"] == 0.1
    assert [c["holds"] for c in transport_summary([1.0, 3.5, 3.0, 1.0], changed=0.2)[1]] == [False, False, False]
    assert transport_summary([1.0, 3.0, 3.0, 1.0])[1][0]["holds"] is False  # a tie is not "largest"
    assert transport_summary([1.0, 2.0, 3.0, 1.0], horizon=11)[1][0]["holds"] is False  # now L = 9 is below
    assert transport_summary([2.0, 3.0], lengths=(5, 8))[1][0]["holds"] is None  # nothing beyond τ_γ
    assert transport_summary([2.0, 3.0], lengths=(10, 20))[1][0]["holds"] is None  # nothing below


@pytest.mark.parametrize("trt,holds", [([5.0, 5.0, 50.0], True), ([5.0, 50.0, 50.0], False), ([7.0, 7.0, 7.0], False)])
def test_transport_claim_trt_against_rudder_counts_the_lengths_where_trt_needs_fewer(trt, holds):
    args = rudder.Args(trt_sweep="3,5,9")
    results = {TD: {L: [100.0] for L in (3, 5, 9)}, "TRT": {L: [v] for L, v in zip((3, 5, 9), trt)},
               "RUDDER": {L: [7.0] for L in (3, 5, 9)}}
    _, claims = rudder.transport_claims(args, results, {"horizon": 4, "share_of_steps_changed": 0.1,
                                                         "share_changed_at_key": 0.2})
    assert claims[2]["holds"] is holds


def sweeps_for_distractors(with_distractors, without, lengths=(5, 10, 20)):
    args = rudder.Args(sweep="5,10,20,80", trt_sweep=",".join(map(str, lengths)))
    delay = {TD: {L: [100.0] for L in args.sweep_list}, "RUDDER": {L: [v] for L, v in zip(args.sweep_list, without)}}
    transport_sweep = {TD: {L: [300.0] for L in lengths}, "RUDDER": {L: [v] for L, v in zip(lengths, with_distractors)}}
    return rudder.distractor_claim(args, delay, transport_sweep)


def test_distractor_claim_asks_whether_rudder_needs_more_episodes_with_distractor_rewards():
    tie = sweeps_for_distractors([16.0] * 3, [16.0] * 4)
    assert tie["holds"] is False and tie["source"] == "survey §5"
    assert "L = 5: 16 vs 16, 10: 16 vs 16, 20: 16 vs 16" in tie["measured"] and "18.8x vs 6.2x" in tie["measured"]
    assert sweeps_for_distractors([32.0, 32.0, 16.0], [16.0] * 4)["holds"] is True  # slower at 2 of 3
    assert sweeps_for_distractors([32.0, 16.0, 16.0], [16.0] * 4)["holds"] is False  # 1 of 3
    assert sweeps_for_distractors([32.0], [16.0] * 4, lengths=(7,))["holds"] is None  # no common length


def properties(future=0.01, future_r=1.0, steps=0.0, steps_r=0.0, action=1, value=1.0):
    return {"expected_future_max[redistributed]": future, "expected_future_max[original]": future_r,
            "mc_variance_at_key[redistributed]": 0.0, "mc_variance_at_key[original]": 0.0,
            "mc_variance_all_steps[redistributed]": steps, "mc_variance_all_steps[original]": steps_r,
            "optimal_key_action[redistributed]": action, "optimal_key_action[original]": 1,
            "optimal_start_value[redistributed]": value, "optimal_start_value[original]": 1.0}


SHAPING = {"decisive_states": 2, "argmax_kept": True, "identity_gap": 1e-16, "value_potential_future_max": 0.0}


@pytest.mark.parametrize("study,shaping,verdicts", [
    (properties(), SHAPING, [True, True, None, True, True, False]),
    (properties(future=0.06), SHAPING, [False, False, None, True, True, False]),
    (properties(steps=0.1, steps_r=0.2), SHAPING, [True, True, True, True, True, False]),
    (properties(steps=0.3, steps_r=0.2), SHAPING, [True, True, False, True, True, False]),
    (properties(action=0), SHAPING, [True, True, None, False, True, False]),
    (properties(value=1.06), SHAPING, [True, True, None, False, True, False]),
    (properties(), dict(SHAPING, argmax_kept=False), [True, True, None, True, False, False]),
    (properties(), dict(SHAPING, identity_gap=1e-6), [True, True, None, True, False, False]),
    (properties(), dict(SHAPING, value_potential_future_max=0.5), [True, True, None, True, True, True]),
])
def test_redistribution_claims_verdicts_follow_the_numbers(study, shaping, verdicts):
    metrics, claims = rudder.redistribution_claims(dict(study, losses=[1.0]), shaping)
    assert [c["holds"] for c in claims] == verdicts
    assert "losses" not in metrics and metrics["shaping_identity_gap"] == shaping["identity_gap"]
    assert metrics["expected_future_max[original]"] == study["expected_future_max[original]"]


def test_redistribution_claim_on_mc_variance_says_why_it_cannot_be_tested_in_a_deterministic_world():
    _, claims = rudder.redistribution_claims(properties(), SHAPING)
    assert "not testable here" in claims[2]["measured"] and "deterministic" in claims[2]["measured"]
    _, claims = rudder.redistribution_claims(properties(steps=0.1, steps_r=0.2), SHAPING)
    assert "not testable" not in claims[2]["measured"] and "all steps 0.1 vs 0.2" in claims[2]["measured"]


# --------------------------------------------------------------------------------------------
# Smoke run
# --------------------------------------------------------------------------------------------
def test_smoke_run_writes_results_and_figure(tmp_path, read_results):
    args = rudder.Args(smoke=True, device="cpu", out=str(tmp_path))
    result = rudder.main(args)
    data = read_results(tmp_path / "results.json")
    assert (tmp_path / "redistribution.png").stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"])
    assert data["metrics"]["max_abs_sum_minus_return"] < 1e-4
    assert all(math.isfinite(v) for v in data["metrics"].values())
    # the property the run must have: r̃ sums to G, and the checker says so
    assert [c["holds"] for c in data["claims"] if "sum to the original return" in c["claim"]] == [True]
    assert [c["holds"] for c in data["claims"] if "preserves the optimal policy" in c["claim"]] == [True]
    assert len(data["claims"]) == 22 and all(c["holds"] in (True, False, None) for c in data["claims"])
    # the watch learners are judged every 50 episodes once a window is full, or count as the budget (60)
    watch = [e for m in rudder.WATCH_METHODS for row in data["pocket_watch"][m] for e in row]
    assert len(watch) == 3 and set(watch) <= {50, 60}
    # each sweep's result is a whole number of learner updates within the budget (8 episodes each, 32 in all)
    sweeps = [e for key in ("delay_sweep", "transport_sweep") for by_L in data[key].values() for runs in by_L.values()
              for e in runs]
    assert len(sweeps) == 6 and all(e % 8 == 0 and 8 <= e <= 32 for e in sweeps)
