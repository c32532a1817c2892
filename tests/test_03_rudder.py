"""03_rudder: return-equivalent redistribution, the predictor's loss, credit on a toy, TRT, the tabular
updates, the learners' loop and the shapers' refits (recorded with stand-ins), the delay sweep's
claim checkers on hand-made summaries, smoke run. The studies' tests: tests/test_03_studies.py."""

import copy
import importlib
import math

import pytest
import torch

import common

rudder = importlib.import_module("03_rudder")

TD, MC = "Q-learning (TD)", "Monte Carlo"


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
    fitter = rudder.return_predictor(args, x.shape[-1], device="cpu")
    fitter.fit(x, returns, args.steps)
    with torch.no_grad():
        redistributed = rudder.redistribute(fitter.model(x), returns)
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
    args = rudder.Args(sweep="3,5", sweep_seeds=2, seed=10)
    assert rudder.delay_study(args, "cpu") == {m: {3: [310, 311], 5: [510, 511]} for m in rudder.SWEEP_METHODS}
    assert all(kwargs == {} for _, kwargs in calls) and len(calls) == 3 * 2 * 2
    # the transport study's sweep (other settings passed through): tests/test_03_studies.py


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


# --------------------------------------------------------------------------------------------
# The default experiment, with the model fit recorded
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


class FakeFitter:
    """Stands in for return_predictor's Fitter: `build` records what it was built for and returns
    it; `fit` records what it was fit on and returns the given losses, leaving the model as it is."""

    def __init__(self, model, losses):
        self.model, self.losses, self.built, self.calls = model, losses, [], []

    def build(self, args, features, device, seed=None):
        self.built.append((args, features))
        return self

    def fit(self, x, targets, steps, progress=False):
        self.calls.append((x, targets, steps))
        return self.losses


def test_predictor_study_reports_what_its_trained_predictor_does(monkeypatch):
    args = rudder.Args(corridor=3, episodes=32, distractor_prob=0.5, inputs="state", seed=4)
    torch.manual_seed(0)
    model = rudder.ReturnPredictor(rudder.encoded_size(10, "state"), 4)
    fitter = FakeFitter(model, [2.0, 1.0])
    monkeypatch.setattr(rudder, "return_predictor", fitter.build)
    study = rudder.predictor_study(args, "cpu")
    _, episode = rudder.uniform_episodes(args, 0.5, "cpu")
    returns = episode["rewards"].sum(0)
    assert fitter.built == [(args, rudder.encoded_size(10, "state"))]
    x, targets, steps = fitter.calls[0]
    torch.testing.assert_close(x, rudder.encode(episode, 10, "state"))
    torch.testing.assert_close(targets, returns)
    assert steps == args.steps and len(fitter.calls) == 1
    with torch.no_grad():
        predictions = model(x)
    redistributed = rudder.redistribute(predictions, returns)
    torch.testing.assert_close(study["episode"]["rewards"], episode["rewards"])
    torch.testing.assert_close(study["redistributed"], redistributed)
    assert study["losses"] == [2.0, 1.0]
    assert study["predictor_final_mse"] == pytest.approx(float(((predictions[-1] - returns) ** 2).mean()))
    assert study["credit_share_at_key"] == pytest.approx(float(rudder.credit_share(redistributed)[0]))
    assert study["max_abs_sum_minus_return"] == pytest.approx(float((redistributed.sum(0) - returns).abs().max()), abs=1e-7)
    assert study["max_abs_sum_minus_return"] < 1e-5
    gaps = (redistributed.sum(0) - returns).abs()
    bound = len(redistributed) * 2.0**-23 * (redistributed.abs().sum(0) + returns.abs())
    assert study["gap_over_rounding"] == pytest.approx(float((gaps / bound).max()))
    assert study["gap_over_rounding"] <= 1  # the sum is exact up to float32 rounding
    assert (study["env"].num_envs, study["env"].corridor, study["env"].distractor_prob) == (32, 3, 0.5)
    # the survey's properties of this redistribution: tests/test_03_studies.py (03_redistribution)


# --------------------------------------------------------------------------------------------
# Claims: each verdict computed from hand-made summaries, both ways
# --------------------------------------------------------------------------------------------
def test_growth_law_tells_exponential_from_power():
    L = [5, 10, 20, 40]
    power = common.growth_law(L, [0.5 * x**0.9 for x in L])
    assert math.isclose(power["power"], 0.9, rel_tol=1e-6)
    assert power["power_residual"] < power["exponential_residual"]
    exponential = common.growth_law(L, [2 * 1.1**x for x in L])
    assert math.isclose(exponential["exponential"], math.log(1.1), rel_tol=1e-6)
    assert exponential["exponential_residual"] < 1e-12 < exponential["power_residual"]
    assert common.growth_law([5, 10], [3.0, 9.0])["power_residual"] == 0.0  # two points: any line fits


LENGTHS = (5, 10, 20, 40)


def per_seed(values, spread=(0.97, 1.0, 1.03)):
    """{L: [one value per seed]}: each length's value times each factor of `spread`."""
    return {L: [v * f for f in spread] for L, v in zip(LENGTHS, values)}


def test_growth_gaps_are_per_seed_residual_differences():
    runs = {5: [10.0, 20.0], 10: [20.0, 40.0], 20: [40.0, 160.0]}
    gaps = common.growth_gaps([5, 10, 20], runs)
    for seed, gap in enumerate(gaps):
        fit = common.growth_law([5, 10, 20], [runs[L][seed] for L in (5, 10, 20)])
        assert gap == pytest.approx(fit["power_residual"] - fit["exponential_residual"])
    assert gaps[0] < 0 < gaps[1]  # 10, 20, 40: a power law; 20, 40, 160: closer to exponential


EXPONENTIAL, POWER = [20 * 1.1**L for L in LENGTHS], [3 * L**1.5 for L in LENGTHS]  # above the floor of 16


@pytest.mark.parametrize("runs,censored,holds", [
    (per_seed(EXPONENTIAL), 0, True),
    (per_seed(POWER), 0, False),  # a power law fits better on every seed
    (per_seed([100 * 0.99**L for L in LENGTHS]), 0, False),  # exponential, but it shrinks
    ({L: [2 * 1.1**L * f, 3 * L**1.5 * f, 2 * 1.1**L * f] for L, f in zip(LENGTHS, (1, 1.01, 0.99, 1))},
     0, None),  # the seeds disagree: the gap's interval holds 0
    (per_seed(EXPONENTIAL, spread=(1.0,)), 0, None),  # one seed: no interval
    (per_seed(EXPONENTIAL), 2, None),  # runs at the floor or the budget: their growth unseen
    ({L: v for L, v in per_seed(EXPONENTIAL).items() if L < 20}, 0, None),  # two lengths: any line fits
])
def test_exponential_growth_is_decided_over_the_seeds(runs, censored, holds):
    verdict, text = common.exponential_growth(sorted(runs), runs, censored)
    assert verdict is holds
    assert "per seed, the power law's residual minus the exponential's" in text


def delay_summary(td, gap=1e-6, mc=None, ru=None, spread=(0.97, 1.0, 1.03), rounding=0.05):
    args = rudder.Args(sweep=",".join(str(L) for L in LENGTHS[:len(td)]))
    mc, ru = mc or [50.0] * len(td), ru or [20.0] * len(td)
    results = {TD: per_seed(td, spread), MC: per_seed(mc, spread), "RUDDER": per_seed(ru, (1.0,) * len(spread))}
    return rudder.delay_claims(args, results, {"max_abs_sum_minus_return": gap, "gap_over_rounding": rounding})


def test_delay_claims_follow_the_growth_law_per_seed_and_the_return_gap():
    metrics, claims = delay_summary(EXPONENTIAL, mc=[2 * v for v in EXPONENTIAL])
    assert [c["holds"] for c in claims] == [None, True, True, None, True]
    assert "not the time until its bias |Q - Q*| is removed" in claims[0]["measured"]
    assert "L = 5: 1.6x, 10: 2.6x, 20: 6.7x, 40: 45.3x;" in claims[1]["measured"]  # TD / RUDDER (20 episodes)
    assert [c["source"] for c in claims] == ["survey §5 (RUDDER paper's theorem)"] + ["survey §5 (RUDDER paper)"] * 3 + [
        "survey §5"]
    assert "exponential in the delay" in claims[0]["claim"] and "sum to the original return" in claims[4]["claim"]
    assert "Monte Carlo tree search" in claims[3]["claim"] and "no tree search" in claims[3]["measured"]
    assert "mean [95% interval over 3 seeds]" in claims[0]["measured"]
    assert metrics["L20_episodes_to_solve[Q-learning (TD)]"] == pytest.approx(20 * 1.1**20)
    assert metrics["L40_episodes_to_solve[RUDDER]"] == 20.0
    power = delay_summary(POWER, rounding=1.5, mc=[2 * v for v in POWER])[1]  # every lead grows as a power of L
    assert [c["holds"] for c in power] == [None, False, False, None, False]
    assert delay_summary(EXPONENTIAL[:2])[1][1]["holds"] is None  # two lengths cannot tell the laws apart
    assert delay_summary(EXPONENTIAL[:3])[1][1]["holds"] is True
    assert delay_summary(EXPONENTIAL, spread=(1.0,))[1][1]["holds"] is None  # one seed


def test_delay_claims_rudder_at_the_floor_cannot_show_its_growth():
    """RUDDER in one batch (16 episodes) at every L: its lead over TD is TD's growth over a
    constant it cannot go below, and a tie with MC at the floor says nothing: inconclusive."""
    _, claims = delay_summary(EXPONENTIAL, mc=[16.0] * 4, ru=[16.0] * 4)
    assert claims[1]["holds"] is None and claims[2]["holds"] is None
    assert "RUDDER at the floor (16 episodes, one batch) or the budget in 12 of 12 runs" in claims[1]["measured"]
    assert "Monte Carlo at the floor" in claims[2]["measured"] and "1.0x" in claims[2]["measured"]
    # off the floor, RUDDER's lead over MC is decided: exponential while RUDDER itself grows too
    ru = [20 + L for L in LENGTHS]
    assert delay_summary(EXPONENTIAL, mc=[r * 1.05**L for r, L in zip(ru, LENGTHS)], ru=ru)[1][2]["holds"] is True
    assert delay_summary(EXPONENTIAL, mc=[r * L for r, L in zip(ru, LENGTHS)], ru=ru)[1][2]["holds"] is False
    # and TD at its budget: censored too
    assert delay_summary([100, 200, 400, 10_000])[1][1]["holds"] is None


def test_seed_spread_is_the_median_with_the_range_only_where_seeds_differ():
    assert rudder.seed_spread([16, 16, 16]) == "16"
    assert rudder.seed_spread([1744, 1488, 1520]) == "1,520 (1,488-1,744)"
    assert rudder.seed_spread([16, 64, 16, 32]) == "24 (16-64)"  # an even count: the middle two's mean


def test_final_tables_show_the_predictors_metrics_and_each_methods_episodes_per_length():
    metrics = {"predictor_final_mse": 1e-6, "credit_share_at_key": 0.99, "max_abs_sum_minus_return": 2e-7, "other": 5}
    delay = {"Q-learning (TD)": {5: [160, 128, 128], 80: [1744, 1488, 1520]}, "RUDDER": {5: [16] * 3, 80: [32, 16, 16]}}
    tables = rudder.final_tables(metrics, delay, [5, 80])
    assert tables["predictor"]["rows"] == [["predictor_final_mse", 1e-6], ["credit_share_at_key", 0.99],
                                           ["max_abs_sum_minus_return", 2e-7]]
    assert tables["delay_sweep"]["header"] == ["corridor L", "Q-learning (TD)", "RUDDER"]
    assert tables["delay_sweep"]["rows"] == [[5, "128 (128-160)", "16"], [80, "1,520 (1,488-1,744)", "16 (16-32)"]]


# --------------------------------------------------------------------------------------------
# Smoke run
# --------------------------------------------------------------------------------------------
def test_smoke_run_writes_results_and_figure(tmp_path, read_results):
    args = rudder.Args(smoke=True, device="cpu", out=str(tmp_path))
    result = rudder.main(args)
    data = read_results(tmp_path / "results.json")
    assert (tmp_path / "redistribution.png").stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"])
    tables = data["metrics"].pop("tables")
    assert data["metrics"]["max_abs_sum_minus_return"] < 1e-4
    assert all(math.isfinite(v) for v in data["metrics"].values())
    # the tables the docs show are the run's own numbers: its predictor metrics, its sweep's medians
    assert tables["predictor"]["rows"] == [[k, data["metrics"][k]] for k in rudder.PREDICTOR_METRICS]
    assert tables["delay_sweep"]["rows"] == [[3, *(f"{data['metrics'][f'L3_episodes_to_solve[{m}]']:,.0f}"
                                                   for m in rudder.SWEEP_METHODS)]]  # one seed: no range
    assert (tmp_path / "delay_sweep.png").stat().st_size > 1000
    # the property the run must have: r̃ sums to G, and the checker says so
    assert [c["holds"] for c in data["claims"] if "sum to the original return" in c["claim"]] == [True]
    # 5 here; the studies check more (pocket watch, redistribution, transport)
    assert len(data["claims"]) == 5 and all(c["holds"] in (True, False, None) for c in data["claims"])
    # each sweep's result is a whole number of learner updates within the budget (8 episodes each, 32 in all)
    sweeps = [e for by_L in data["delay_sweep"].values() for runs in by_L.values() for e in runs]
    assert len(sweeps) == 3 and all(e % 8 == 0 and 8 <= e <= 32 for e in sweeps)
