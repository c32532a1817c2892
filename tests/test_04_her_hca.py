"""04_her_hca: bit-flip dynamics, hindsight relabelling, the TD target and the target network, the
DQN(+HER) loop as recorded by spies, return HCA and the baseline against loops and autograd, the
learned hindsight distribution, the variance measurement as recorded by spies, the chapter's claim
checkers on hand-made summaries, the copy of 01's reward-to-go, CLI and a smoke run. State HCA,
the learning loop (and its copy of 03's running mean), the exact model, the other tasks and the
studies are tested in test_04_studies.py."""

import copy
import importlib
import math

import numpy as np
import pytest
import torch

import common

hind = importlib.import_module("04_her_hca")
tasks = importlib.import_module("studies.04_hca_tasks")  # the shortcut chain: episodes that end early
pong = importlib.import_module("01_reinforce_pong")


def skewed_policy(task, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(task.num_states, task.P.shape[1], generator=g), 1)


# --------------------------------------------------------------------------------------------
# HER: environment and relabelling
# --------------------------------------------------------------------------------------------
def test_goal_reward_is_zero_exactly_where_the_achieved_bits_are_the_goal():
    achieved = torch.tensor([[[1, 0, 1], [1, 0, 0]], [[0, 0, 0], [1, 1, 1]]])
    goal = torch.tensor([[1, 0, 1], [0, 0, 0]])  # one goal per row of the batch
    assert hind.goal_reward(achieved, goal[:, None]).tolist() == [[0.0, -1.0], [0.0, -1.0]]


def filled_buffer(episodes=64, bits=6, seed=0):
    """Random-policy episodes in a buffer, with goals that some of them reach."""
    played = hind.play_bitflip(hind.QNetwork(bits, 8), episodes, bits, 1.0, torch.Generator().manual_seed(seed))
    buffer = hind.EpisodeBuffer(episodes, bits, "cpu")
    buffer.add(played)
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


def test_episode_relabelling_uses_any_achieved_state_of_the_same_episode():
    buffer, played = filled_buffer(seed=4)
    k = 4
    batch = buffer.sample(20_000, "episode", k, torch.Generator().manual_seed(5))
    relabelled = batch["goal_step"] >= 0
    assert abs(relabelled.float().mean().item() - k / (k + 1)) < 0.01
    assert torch.equal(batch["goal_episode"], batch["episode"])
    # transition by transition: a state the same episode achieved at any of its steps, else its own goal
    for i in range(0, 20_000, 37):
        e, t, g = batch["episode"][i].item(), batch["step"][i].item(), batch["goal_step"][i].item()
        assert 0 <= t < played["lengths"][e]
        expected = played["states"][e, g + 1] if g >= 0 else played["goals"][e]
        assert g < played["lengths"][e] and torch.equal(batch["goal"][i], expected.float())
    # unlike "future", states achieved before the transition are goals too
    assert (batch["goal_step"][relabelled] < batch["step"][relabelled]).any()
    reached = (batch["next_state"] == batch["goal"]).all(1)
    assert torch.equal(batch["reward"] == 0, reached) and torch.equal(batch["done"] == 1, reached)


def test_episode_and_random_goal_steps_are_uniform_over_the_whole_episode_whatever_the_step():
    n = 40_000
    step, length = torch.full((n,), 4), torch.full((n,), 6)
    for strategy in ("episode", "random"):
        goal_step = hind.hindsight_goal_steps(step, length, strategy, 1, torch.Generator().manual_seed(2))
        relabelled = goal_step[goal_step >= 0]
        assert ((goal_step == -1) | (goal_step >= 0)).all() and abs(len(relabelled) / n - 0.5) < 0.01
        share = torch.bincount(relabelled, minlength=6).float() / len(relabelled)
        torch.testing.assert_close(share, torch.full((6,), 1 / 6), atol=0.015, rtol=0)


def test_random_relabelling_uses_a_state_achieved_in_any_stored_episode():
    bits, k = 3, 4
    buffer = hind.EpisodeBuffer(5, bits, "cpu")
    buffer.add(numbered_episodes(0, 5, bits))  # states[e, t] = 10 e + t; lengths 1, 2, 3, 1, 2
    batch = buffer.sample(50_000, "random", k, torch.Generator().manual_seed(6))
    relabelled = batch["goal_step"] >= 0
    assert abs(relabelled.float().mean().item() - k / (k + 1)) < 0.01
    episode, goal_episode, goal_step = batch["episode"], batch["goal_episode"], batch["goal_step"]
    # the goal's episode: uniform over the stored ones, whichever episode the transition is from
    pairs = torch.bincount(5 * episode + goal_episode, minlength=25).float() / len(episode)
    torch.testing.assert_close(pairs, torch.full((25,), 1 / 25), atol=0.006, rtol=0)
    # the goal is what that episode achieved at step t' < its length, so every achieved state is drawn
    code = batch["goal"][:, 0].long()
    assert torch.equal(code[relabelled], 10 * goal_episode[relabelled] + goal_step[relabelled] + 1)
    assert (goal_step[relabelled] < buffer.lengths[goal_episode[relabelled]]).all()
    drawn = set(zip(goal_episode[relabelled].tolist(), goal_step[relabelled].tolist()))
    assert drawn == {(e, t) for e in range(5) for t in range(int(buffer.lengths[e]))}
    assert torch.equal(code[~relabelled], episode[~relabelled])  # its own goal (the episode's number)
    reached = (batch["next_state"] == batch["goal"]).all(1)
    assert torch.equal(batch["reward"] == 0, reached)


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


def test_future_goals_are_uniform_over_the_achieved_states_after_the_transition():
    n = 40_000
    for k in (1, 4):
        step, length = torch.full((n,), 2), torch.full((n,), 6)
        goal_step = hind.hindsight_goal_steps(step, length, "future", k, torch.Generator().manual_seed(k))
        relabelled = goal_step[goal_step >= 0]
        assert ((goal_step == -1) | (goal_step >= 0)).all()
        assert abs(len(relabelled) / n - k / (k + 1)) < 0.01  # replaced with probability k / (k + 1)
        # t' uniform over t .. T - 1: the goals s_{t+1} .. s_T, from the next state to the last one
        share = torch.bincount(relabelled, minlength=6).float() / len(relabelled)
        torch.testing.assert_close(share, torch.tensor([0.0, 0.0, 0.25, 0.25, 0.25, 0.25]), atol=0.015, rtol=0)
    # the last step of an episode can only be relabelled with its own achieved state
    last = hind.hindsight_goal_steps(torch.tensor([0, 4, 9]), torch.tensor([1, 5, 10]), "future", 10**6,
                                     torch.Generator().manual_seed(0))
    assert last.tolist() == [0, 4, 9]


def numbered_episodes(first: int, count: int, bits: int) -> dict:
    """Episodes whose every entry says which episode and step it is: states[e, t] = 10 e + t."""
    ids = torch.arange(first, first + count)
    code = 10 * ids[:, None] + torch.arange(bits + 1)
    return {"states": code[:, :, None].expand(count, bits + 1, bits), "actions": code[:, :bits],
            "goals": ids[:, None].expand(count, bits), "lengths": 1 + ids % bits}


def test_episode_buffer_overwrites_the_oldest_and_samples_stored_steps_uniformly():
    bits = 3
    buffer = hind.EpisodeBuffer(5, bits, "cpu")
    buffer.add(numbered_episodes(0, 3, bits))
    assert (buffer.size, buffer.next) == (3, 3)
    batch = buffer.sample(3000, "none", 4, torch.Generator().manual_seed(0))
    assert set(batch["episode"].tolist()) == {0, 1, 2}  # only the stored episodes, not the empty slots
    buffer.add(numbered_episodes(3, 4, bits))  # 7 episodes in 5 slots: 5 and 6 overwrite 0 and 1
    assert (buffer.size, buffer.next) == (5, 2)
    assert (buffer.states[:, 0, 0] // 10).tolist() == [5, 6, 2, 3, 4]
    assert buffer.lengths.tolist() == [3, 1, 3, 1, 2]
    batch = buffer.sample(20_000, "none", 4, torch.Generator().manual_seed(1))
    episode, step = batch["episode"], batch["step"]
    torch.testing.assert_close(torch.bincount(episode, minlength=5).float() / 20_000, torch.full((5,), 0.2),
                               atol=0.015, rtol=0)
    for slot in (0, 4):  # lengths 3 and 2: a step uniformly among its steps
        steps = step[episode == slot]
        share = torch.bincount(steps, minlength=3).float() / len(steps)
        expected = torch.full((3,), 1 / 3) if slot == 0 else torch.tensor([0.5, 0.5, 0.0])
        torch.testing.assert_close(share, expected, atol=0.03, rtol=0)
    # the transition (s_t, a_t, s_{t+1}) of that episode and step, with that episode's goal
    code = 10 * buffer.goals[episode, 0].long() + step
    assert torch.equal(batch["state"][:, 0], code.float()) and torch.equal(batch["action"], code)
    assert torch.equal(batch["next_state"][:, 0], (code + 1).float())
    assert torch.equal(batch["goal"], buffer.goals[episode].float())


def perfect_q_net(bits: int) -> hind.QNetwork:
    """Q(s, g, a) = |s_a - g_a| + 0.1 s_a: its greedy action flips a bit that differs from the goal,
    a 1 before a 0 (so that swapping the state and the goal changes the action)."""
    q_net = hind.QNetwork(bits, 3 * bits)
    eye, zero = torch.eye(bits), torch.zeros(bits, bits)
    with torch.no_grad():
        q_net.net[0].weight.copy_(torch.cat([torch.cat([eye, -eye], 1), torch.cat([-eye, eye], 1),
                                             torch.cat([eye, zero], 1)]))
        q_net.net[2].weight.copy_(torch.cat([eye, eye, 0.1 * eye], 1))
        q_net.net[0].bias.zero_()
        q_net.net[2].bias.zero_()
    return q_net


@pytest.mark.parametrize("epsilon", [0.0, 0.5, 1.0])
def test_play_bitflip_records_each_episode_as_its_actions_made_it(epsilon):
    bits, num = 5, 200
    q_net = perfect_q_net(bits)
    played = hind.play_bitflip(q_net, num, bits, epsilon, torch.Generator().manual_seed(4))
    greedy_taken = 0
    for e in range(num):
        state, goal = played["states"][e, 0].clone(), played["goals"][e]
        length, success = bits, False
        for t in range(bits):
            if not success:
                greedy = q_net(state.float(), goal.float()).argmax()
                greedy_taken += int(played["actions"][e, t] == greedy)
                state[played["actions"][e, t]] ^= 1
                if torch.equal(state, goal):
                    length, success = t + 1, True
            assert torch.equal(played["states"][e, t + 1], state)  # after the end the state stays
        assert played["lengths"][e] == length and played["success"][e] == success
    steps = played["lengths"].sum().item()
    # ε-greedy: the greedy action, or one of the n uniformly at random with probability ε
    assert abs(greedy_taken / steps - (1 - epsilon + epsilon / bits)) < 0.05
    if epsilon == 0:  # the perfect greedy policy reaches every goal by the shortest path
        distance = (played["states"][:, 0] != played["goals"]).sum(1)
        assert played["success"].all() and torch.equal(played["lengths"][distance > 0], distance[distance > 0])


def test_greedy_success_is_the_success_rate_without_exploration():
    bits = 8
    assert hind.greedy_success(perfect_q_net(bits), 128, bits, torch.Generator().manual_seed(5)) == 1.0
    # a Q-network that prefers the bits already right never gets there
    contrary = perfect_q_net(bits)
    with torch.no_grad():
        contrary.net[2].weight.neg_()
    assert hind.greedy_success(contrary, 128, bits, torch.Generator().manual_seed(5)) < 0.05


def test_td_loss_bootstraps_from_the_target_network_but_not_after_the_end():
    bits, gamma = 3, 0.9
    torch.manual_seed(0)
    q_net, target_net = hind.QNetwork(bits, 8), hind.QNetwork(bits, 8)
    with torch.no_grad():
        target_net.net[-1].bias.fill_(-3.0)  # target values near -3, inside the clip range [-10, 0]
        target_net.net[-1].bias[0] = -30.0  # and one action's far below it
    g = torch.Generator().manual_seed(1)
    batch = {"state": torch.randint(0, 2, (6, bits), generator=g).float(),
             "next_state": torch.randint(0, 2, (6, bits), generator=g).float(),
             "goal": torch.randint(0, 2, (6, bits), generator=g).float(), "action": torch.tensor([0, 1, 2, 2, 1, 0]),
             "reward": torch.tensor([-1.0, 0.0, -1.0, 0.0, -1.0, -1.0]), "done": torch.tensor([0.0, 1, 0, 1, 0, 0])}
    with torch.no_grad():
        expected = []
        for i in range(6):
            y = batch["reward"][i]
            if not batch["done"][i]:  # after the end there is nothing to bootstrap from
                y = y + gamma * target_net(batch["next_state"][i], batch["goal"][i]).max()
            y = y.clamp(-1 / (1 - gamma), 0.0)
            expected.append((q_net(batch["state"][i], batch["goal"][i])[batch["action"][i]] - y) ** 2)
    loss = hind.td_loss(q_net, target_net, batch, gamma)
    assert math.isclose(loss.item(), torch.stack(expected).mean().item(), rel_tol=1e-6)
    loss.backward()  # only the Q-network learns; the target is a constant
    assert all(p.grad is None for p in target_net.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in q_net.parameters())


def test_td_target_is_clipped_below_at_the_worst_possible_value():
    bits, gamma = 4, 0.9
    q_net, target_net = hind.QNetwork(bits, 8), hind.QNetwork(bits, 8)
    with torch.no_grad():
        for p in target_net.parameters():
            p.zero_()
        target_net.net[-1].bias.fill_(-100.0)  # an absurdly pessimistic target
    zeros = torch.zeros(1, bits)
    batch = {"state": zeros, "next_state": zeros, "goal": zeros, "action": torch.tensor([2]),
             "reward": torch.tensor([-1.0]), "done": torch.tensor([0.0])}
    q = q_net(zeros, zeros)[0, 2].item()
    # y = -1 - 0.9 * 100 is clipped to -1 / (1 - 0.9) = -10: never worse than -1 at every step forever
    assert math.isclose(hind.td_loss(q_net, target_net, batch, gamma).item(), (q + 10) ** 2, rel_tol=1e-5)


def test_polyak_update_moves_the_target_network_a_little_toward_the_q_network():
    torch.manual_seed(0)
    q_net, target_net = hind.QNetwork(3, 4), hind.QNetwork(3, 4)
    q_before = [p.clone() for p in q_net.parameters()]
    target_before = [p.clone() for p in target_net.parameters()]
    hind.polyak_update(target_net, q_net, 0.8)
    for q, q_old, target, target_old in zip(q_net.parameters(), q_before, target_net.parameters(), target_before):
        assert torch.equal(q, q_old)  # the Q-network does not move
        torch.testing.assert_close(target, 0.8 * target_old + 0.2 * q_old)


def test_train_bitflip_wires_q_target_replay_and_greedy_evaluation(monkeypatch):
    """A recorded run: the Q-network learns by Adam on fresh TD gradients from replayed batches of
    the chosen strategy; the target network starts as its copy and trails it once per cycle; the
    curve and the final success are greedy evaluations on episodes of their own."""
    args = hind.Args(envs=4, cycles=7, updates=3, batch=8, hidden=8, eval_episodes=6, buffer_episodes=128,
                     relabel_k=3, polyak=0.7, gamma=0.9, epsilon=0.3, lr=0.01)
    bits, cycles = 3, 21
    events = []
    real_td, real_polyak = hind.td_loss, hind.polyak_update
    real_sample, real_play = hind.EpisodeBuffer.sample, hind.play_bitflip

    def parameters(net):
        return [p.detach().clone() for p in net.parameters()]

    def td_spy(q_net, target_net, batch, gamma):
        loss = real_td(q_net, target_net, batch, gamma)
        fresh = torch.autograd.grad(loss, list(q_net.parameters()), retain_graph=True)
        held = [None if p.grad is None else p.grad.clone() for p in q_net.parameters()]
        events.append(("td", q_net, target_net, gamma, parameters(q_net), parameters(target_net), held, fresh))
        return loss

    def polyak_spy(target_net, q_net, polyak):
        events.append(("polyak", target_net, q_net, polyak, parameters(q_net)))
        real_polyak(target_net, q_net, polyak)

    def sample_spy(self, batch, strategy, k, generator):
        replayed = real_sample(self, batch, strategy, k, generator)
        events.append(("sample", batch, strategy, k, float((replayed["reward"] == 0).float().mean()), self.size,
                       replayed))
        return replayed

    def play_spy(q_net, num, bits_, epsilon, generator):
        played = real_play(q_net, num, bits_, epsilon, generator)
        events.append(("play", generator, epsilon, float(played["success"].float().mean()), played, num, q_net))
        return played

    monkeypatch.setattr(hind, "td_loss", td_spy)
    monkeypatch.setattr(hind, "polyak_update", polyak_spy)
    monkeypatch.setattr(hind.EpisodeBuffer, "sample", sample_spy)
    monkeypatch.setattr(hind, "play_bitflip", play_spy)
    result = hind.train_bitflip(args, bits, "future", seed=3, device="cpu")

    td = [e for e in events if e[0] == "td"]
    q_net, target_net = td[0][1], td[0][2]
    assert len(td) == cycles * args.updates and q_net is not target_net
    assert all(e[1] is q_net and e[2] is target_net and e[3] == 0.9 for e in td)
    # each update steps on the gradient of the last TD loss alone (zeroed in between), by Adam at lr
    for before, after in zip(td, td[1:]):
        for held, fresh in zip(after[6], before[7]):
            torch.testing.assert_close(held, fresh)
    step = [after - before for before, after in zip(td[0][4], td[1][4])]
    assert all((s * g <= 0).all() for s, g in zip(step, td[0][7]))  # descent, not ascent
    assert math.isclose(max(s.abs().max().item() for s in step), args.lr, rel_tol=1e-3)
    # the target starts as a copy of the Q-network, stays put within a cycle, and after each cycle's
    # updates moves once toward the Q-network: θ' ← 0.7 θ' + 0.3 θ
    kinds = [e[0] for e in events if e[0] in ("td", "polyak")]
    assert kinds == (["td"] * args.updates + ["polyak"]) * cycles
    assert all(torch.equal(q, t) for q, t in zip(td[0][4], td[0][5]))
    target = td[0][5]
    for e in events:
        if e[0] == "td":
            assert all(torch.allclose(t, expected) for t, expected in zip(e[5], target))
        elif e[0] == "polyak":
            assert e[1] is target_net and e[2] is q_net
            target = [0.7 * t + 0.3 * q for t, q in zip(target, e[4])]
    # replay: the chosen strategy and k, minibatches, then one large batch to measure the reward share
    samples = [e for e in events if e[0] == "sample"]
    assert [e[1:4] for e in samples] == [(8, "future", 3)] * (cycles * args.updates) + [(4096, "future", 3)]
    assert result["reward_share"] == samples[-1][4]
    # each cycle's episodes enter the buffer before its updates replay them
    assert [e[5] for e in samples] == [4 * c for c in range(1, cycles + 1) for _ in range(args.updates)] + [84]
    first = next(e[4] for e in events if e[0] == "play")
    for e in samples[:args.updates]:
        replayed = e[6]
        assert torch.equal(replayed["state"], first["states"][replayed["episode"], replayed["step"]].float())
        assert torch.equal(replayed["action"], first["actions"][replayed["episode"], replayed["step"]])
    # collection is ε-greedy on the training episodes; every evaluation is greedy, on episodes of its own,
    # every tenth of training (after cycles 2, 4, .., 20) and at the end
    plays = [e for e in events if e[0] == "play"]
    train, evaluation = [e for e in plays if e[2] != 0.0], [e for e in plays if e[2] == 0.0]
    assert len(train) == cycles and all(e[2] == 0.3 and e[5] == 4 and e[1] is train[0][1] for e in train)
    assert all(e[5] == 6 and e[1] is evaluation[0][1] for e in evaluation)  # the same test goals all run long
    assert train[0][1].initial_seed() == 3 and evaluation[0][1].initial_seed() == 10_003
    assert all(e[6] is q_net for e in plays)
    assert result["curve"] == [e[3] for e in evaluation[:-1]] and result["final_success"] == evaluation[-1][3]
    assert result["by_distance"] == [hind.success_by_distance(e[4]) for e in evaluation[:-1]]  # the curve's episodes
    assert result["episodes"] == cycles * args.envs
    evaluated_after, cycle = [], 0
    for e in events:
        cycle += e[0] == "polyak"
        if e[0] == "play" and e[2] == 0.0:
            evaluated_after.append(cycle)
    assert evaluated_after == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 21]


def test_success_by_distance_counts_episodes_and_successes_per_bits_to_flip():
    bits = 5
    played = hind.play_bitflip(hind.QNetwork(bits, 8), 300, bits, 0.5, torch.Generator().manual_seed(8))
    counts = hind.success_by_distance(played)
    episodes, successes = [0] * (bits + 1), [0] * (bits + 1)
    for e in range(300):
        d = sum(int(played["states"][e, 0, i] != played["goals"][e, i]) for i in range(bits))
        episodes[d] += 1
        successes[d] += int(played["success"][e])
    assert counts == {"episodes": episodes, "successes": successes}
    assert sum(counts["successes"]) == int(played["success"].sum()) and 0 < sum(counts["successes"]) < 300


def test_bit_flipping_starts_and_goals_are_independent_uniform_bits():
    played = hind.play_bitflip(hind.QNetwork(6, 8), 4000, 6, 1.0, torch.Generator().manual_seed(1))
    state, goal = played["states"][:, 0], played["goals"]
    assert set(state.unique().tolist()) == {0, 1} and set(goal.unique().tolist()) == {0, 1}
    assert abs(state.float().mean() - 0.5) < 0.02 and abs(goal.float().mean() - 0.5) < 0.02
    assert abs((state == goal).float().mean() - 0.5) < 0.02  # the goal does not copy the state


def test_train_bitflip_is_reproducible_from_its_seed():
    args = hind.Args(envs=4, cycles=2, updates=2, batch=8, hidden=8, eval_episodes=8, buffer_episodes=32)
    runs = [hind.train_bitflip(args, 3, "future", seed=5, device="cpu") for _ in range(2)]
    torch.manual_seed(123)  # whatever the global generator did before
    runs.append(hind.train_bitflip(args, 3, "future", seed=5, device="cpu"))
    assert runs[0] == runs[1] == runs[2]


# --------------------------------------------------------------------------------------------
# HCA: the returns, and the script that teaches them
# --------------------------------------------------------------------------------------------
def test_returns_to_go_sums_the_rewards_from_each_step_on():
    rewards = torch.tensor([[1.0, 0.0], [2.0, -1.0], [4.0, 3.0]])
    assert torch.equal(hind.returns_to_go(rewards), torch.tensor([[7.0, 2.0], [6.0, 2.0], [4.0, 3.0]]))


def test_returns_to_go_is_01s_reward_to_go_without_discount_or_ends():
    rewards = torch.randn(12, 500, generator=torch.Generator().manual_seed(0)) * 3
    no_ends = torch.zeros(12, 500, dtype=torch.bool)
    assert torch.equal(hind.returns_to_go(rewards), pong.reward_to_go(rewards, no_ends, 1.0))


# --------------------------------------------------------------------------------------------
# HCA: the estimators, against autograd and loops over (t, n)
# --------------------------------------------------------------------------------------------
def chain_episodes(num=6, seed=0):
    """A few episodes of the shortcut chain under a skewed policy (they end at different steps)."""
    task = tasks.shortcut_chain(4, 1.0)
    policy = skewed_policy(task, seed)
    episodes = hind.sample_episodes(task, policy, num, torch.Generator().manual_seed(seed))
    assert not episodes["alive"].all()  # some episodes end early: the alive mask matters
    return task, policy, episodes


def test_score_rows_summed_per_episode_match_autograd():
    task = tasks.shortcut_chain(4, 1.0)
    logits = torch.randn(task.num_states, 2, generator=torch.Generator().manual_seed(2))
    policy = torch.softmax(logits, 1)
    episodes = hind.sample_episodes(task, policy, 3, torch.Generator().manual_seed(0))
    psi = torch.randn_like(episodes["returns"])
    score = hind.per_episode_gradients(episodes, hind.score_rows(episodes, policy, psi), task.num_states)
    for n in range(3):
        theta = logits.clone().requires_grad_()
        pi = torch.softmax(theta, 1)[episodes["states"][:, n]]  # (T, A)
        alive = episodes["alive"][:, n].float()
        logp = torch.log(pi.gather(1, episodes["actions"][:, n:n + 1])).squeeze(1)
        surrogate = (alive * psi[:, n] * logp).sum()  # Σ_t Ψ_t log π(A_t|X_t)
        torch.testing.assert_close(score[n], torch.autograd.grad(surrogate, theta)[0])


def test_return_hca_gives_no_credit_when_the_return_says_nothing():
    episodes = {"states": torch.zeros(2, 3, dtype=torch.long), "actions": torch.tensor([[0, 1, 1], [1, 0, 0]]),
                "returns": torch.tensor([[5.0, -3.0, 100.0], [1.0, 2.0, 3.0]])}
    policy = torch.tensor([[0.3, 0.7]])
    psi = hind.return_hca_psi(episodes, policy, policy[episodes["states"]], h_min=0.01)  # h = π
    assert torch.equal(psi, torch.zeros(2, 3))


def test_return_hca_psi_is_one_minus_pi_over_clipped_h_times_the_return():
    task, policy, episodes = chain_episodes()
    T, N = episodes["actions"].shape
    h = torch.rand(T, N, 2, generator=torch.Generator().manual_seed(1))
    h[0, :, :] = 0.001  # below h_min: clipped
    psi = hind.return_hca_psi(episodes, policy, h, h_min=0.05)
    for t in range(T):
        for n in range(N):
            x, a = episodes["states"][t, n], episodes["actions"][t, n]
            ratio = policy[x, a] / max(h[t, n, a].item(), 0.05)
            assert math.isclose(psi[t, n].item(), (1 - ratio) * episodes["returns"][t, n].item(), rel_tol=1e-5,
                                abs_tol=1e-6)


# --------------------------------------------------------------------------------------------
# HCA: the learned hindsight distribution h(a | x, z)
# --------------------------------------------------------------------------------------------
def test_return_examples_are_every_step_that_happened_with_its_return():
    _, _, episodes = chain_episodes()
    s, a, alive, Z = episodes["states"], episodes["actions"], episodes["alive"], episodes["returns"]
    T, N = s.shape
    x, z, action = hind.return_examples(episodes)
    expected = sorted((s[t, n].item(), Z[t, n].item(), a[t, n].item()) for t in range(T) for n in range(N)
                      if alive[t, n])
    assert sorted(zip(x.tolist(), z.tolist(), action.tolist())) == expected


def test_hindsight_model_reads_a_one_hot_state_and_the_return_scaled_to_its_typical_size():
    torch.manual_seed(0)
    task = hind.delayed_effect(2, 0.5)  # 9 states, returns of size 1 + σ √horizon = 2
    model = hind.Hindsight(task, 8)
    x, z = torch.tensor([0, 3, 4]), torch.tensor([-2.0, 0.5, 8.0])
    inputs = torch.cat([torch.nn.functional.one_hot(x, 9).float(), (z / 2.0)[:, None]], -1)
    torch.testing.assert_close(model(x, z), model.net(inputs))
    assert math.isclose(model.return_scale, 1 + 0.5 * math.sqrt(4))


def test_learned_return_hindsight_finds_the_decisive_action_on_the_delayed_effect():
    torch.manual_seed(0)
    task = hind.delayed_effect(2, 0.1)
    policy = torch.full((task.num_states, 2), 0.5)
    episodes = hind.sample_episodes(task, policy, 512, torch.Generator().manual_seed(0))
    learner = hind.HindsightLearner(hind.Args(hca_hidden=16, hca_batch=128), hind.Hindsight(task, 16), "cpu")
    learner.fit(hind.return_examples(episodes), 300)
    # from the start, a return near 1 reveals action 1 (the key), one near 0 action 0
    h_start = learner.probabilities(torch.tensor([0, 0]), torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(h_start, torch.eye(2).flip(0), atol=0.1, rtol=0)
    # in the corridor (states 2 to 5: two positions, without and with the key) the action changes
    # nothing that follows: h ≈ π
    h_corridor = learner.probabilities(torch.tensor([2, 3, 4, 5]), torch.tensor([0.0, 1.0, 0.0, 1.0]))
    torch.testing.assert_close(h_corridor, torch.full((4, 2), 0.5), atol=0.15, rtol=0)


def test_hindsight_fit_takes_adam_steps_on_seeded_minibatches_of_its_examples():
    """fit, replayed by hand: minibatches drawn by the learner's generator (seeded by --seed) from
    the examples, one cross-entropy Adam step each at --hca-lr, gradients zeroed in between."""
    torch.manual_seed(0)
    task, _, episodes = chain_episodes(num=20)
    args = hind.Args(hca_hidden=8, hca_batch=16, hca_lr=0.05, seed=7)
    learner = hind.HindsightLearner(args, hind.Hindsight(task, 8), "cpu")
    model = copy.deepcopy(learner.model)
    learner.fit(hind.return_examples(episodes), 3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(7)
    x, z, action = hind.return_examples(episodes)
    for _ in range(3):
        pick = torch.randint(0, len(x), (16,), generator=generator)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x[pick], z[pick]), action[pick]).backward()
        optimizer.step()
    for mine, theirs in zip(model.parameters(), learner.model.parameters()):
        torch.testing.assert_close(theirs, mine)


# --------------------------------------------------------------------------------------------
# HCA's world and its sampler
# --------------------------------------------------------------------------------------------
def test_sample_episodes_follow_the_model_and_add_noise_of_std_sigma():
    task = hind.delayed_effect(2, 0.5)
    policy = skewed_policy(task, seed=4)
    episodes = hind.sample_episodes(task, policy, 20_000, torch.Generator().manual_seed(5))
    s, a, r, alive = episodes["states"], episodes["actions"], episodes["rewards"], episodes["alive"]
    assert s.shape == (task.horizon, 20_000) and (s[0] == 0).all() and alive.all()  # every episode lasts 4 steps
    assert torch.equal(s[1:], task.P[s[:-1], a[:-1]].argmax(-1))  # deterministic moves, as P says
    for t in range(task.horizon):  # actions drawn from π at each state, rewards = R + N(0, σ²)
        for x in s[t].unique().tolist():
            at = s[t] == x
            assert abs(a[t][at].float().mean() - policy[x, 1]) < 0.05
            noise = r[t][at] - task.R[x, a[t][at]]
            assert abs(noise.mean()) < 0.05 and abs(noise.std() - 0.5) < 0.05
    assert torch.equal(episodes["returns"], hind.returns_to_go(r))
    # on the shortcut episodes end early: after the end, no reward and not alive
    chain = tasks.shortcut_chain(4, 0.5)
    ended = hind.sample_episodes(chain, skewed_policy(chain), 200, torch.Generator().manual_seed(6))
    terminal = ended["states"] == chain.num_states - 1
    assert terminal.any() and torch.equal(ended["alive"], ~terminal) and (ended["rewards"][terminal] == 0).all()


# --------------------------------------------------------------------------------------------
# The variance measurement, recorded, and the chapter's claim checkers on hand-made summaries
# --------------------------------------------------------------------------------------------
def test_gradient_variances_is_the_trace_covariance_of_each_estimators_gradient(monkeypatch):
    """Recorded: one task of the given σ, the uniform policy, the exact V, h fitted on the first
    batch, both estimators' rows on the second; tr Cov of their per-episode sums."""
    args = hind.Args(corridor=2, hindsight_episodes=30, measure_episodes=50, hindsight_steps=2, hca_hidden=8,
                     h_min=0.04)
    sampled, fits = [], []
    real_sample, real_fit = hind.sample_episodes, hind.HindsightLearner.fit

    def sample_spy(task, policy, num, generator):
        sampled.append((task.noise, policy.clone(), num, real_sample(task, policy, num, generator)))
        return sampled[-1][3]

    def fit_spy(self, examples, steps):
        fits.append((self, examples, steps))
        real_fit(self, examples, steps)

    monkeypatch.setattr(hind, "sample_episodes", sample_spy)
    monkeypatch.setattr(hind.HindsightLearner, "fit", fit_spy)
    variances = hind.gradient_variances(args, 1.5, "cpu")
    assert [(noise, num) for noise, _, num, _ in sampled] == [(1.5, 30), (1.5, 50)]
    policy = torch.full((9, 2), 0.5)
    assert all(torch.equal(p, policy) for _, p, _, _ in sampled)
    train, test = sampled[0][3], sampled[1][3]
    (learner, examples, steps), = fits  # one classifier, fitted on the first batch
    assert steps == 2 and all(torch.equal(e, f) for e, f in zip(examples, hind.return_examples(train)))
    task = hind.delayed_effect(2, 1.5)
    V, _ = hind.evaluate_policy(task.P.double(), task.R.double(), policy.double(), 1.0)
    h = learner.probabilities(test["states"], test["returns"])
    psi = {"PG + V baseline": test["returns"] - V.float()[test["states"]],
           "return HCA (learned h)": hind.return_hca_psi(test, policy, h, 0.04)}
    assert set(variances) == set(hind.ESTIMATORS) == set(psi)
    for method, credit in psi.items():
        grads = hind.per_episode_gradients(test, hind.score_rows(test, policy, credit), 9)
        assert math.isclose(variances[method], ((grads - grads.mean(0)) ** 2).sum((1, 2)).mean().item(), rel_tol=1e-6)


def test_her_claims_hold_only_when_dqn_fails_and_her_solves_with_dense_reward():
    good, shares = {"DQN": 0.05, "DQN+HER": 0.9}, {"DQN": 0.004, "DQN+HER": 0.2}
    assert [c["holds"] for c in hind.her_claims(20, good, shares)] == [True, True, True]
    claims = hind.her_claims(20, good, shares)
    assert claims[0]["measured"] == "n = 20: DQN's final success 0.05" and "DQN+HER 0.200" in claims[2]["measured"]
    assert [c["holds"] for c in hind.her_claims(20, {"DQN": 0.1, "DQN+HER": 0.89}, shares)] == [False, False, True]
    assert hind.her_claims(20, good, {"DQN": 0.02, "DQN+HER": 0.2})[2]["holds"] is False  # 10x is not enough
    assert hind.her_claims(14, good, shares)[0]["holds"] is None  # below the paper's threshold: not tested


def test_variance_claims_need_a_lower_variance_at_every_sigma_and_a_growing_edge():
    def verdicts(ratios: list) -> list:
        return [c["holds"] for c in hind.variance_claims(dict(zip((0.5, 2.0, 8.0), ratios)))]

    assert verdicts([2.0, 3.0, 10.0]) == [True, True]
    assert verdicts([2.0, 30.0, 2.0]) == [True, False]  # the same edge at the smallest and largest σ
    assert verdicts([0.8, 1.5, 3.0]) == [False, True]  # not lower at σ = 0.5
    claims = hind.variance_claims({0.5: 4.0, 2.0: 8.0})
    assert claims[0]["claim"] == "delayed effect: HCA's gradient has a lower variance than PG with a value baseline"
    assert claims[0]["measured"].endswith("return HCA (learned h): 4x at σ = 0.5, 8x at σ = 2")


def test_summary_tables_are_the_metrics_they_print():
    run = {"curve": [0.0], "episodes": 1}
    her = {"DQN": [{**run, "final_success": 0.0, "reward_share": 0.0}, {**run, "final_success": 0.1, "reward_share": 0.01}],
           "DQN+HER": [{**run, "final_success": 1.0, "reward_share": 0.3}, {**run, "final_success": 0.9, "reward_share": 0.1}]}
    variances = {0.5: {"PG + V baseline": 4.0, "return HCA (learned h)": 2.0},
                 2.0: {"PG + V baseline": 40.0, "return HCA (learned h)": 0.5}}
    metrics, claims = hind.summary(hind.Args(bits=20, her_seeds=2), her, variances)
    her_table, variance_table = metrics["tables"]["her"], metrics["tables"]["variance"]
    assert her_table["rows"] == [["DQN", pytest.approx(0.05), "0, 0.1", pytest.approx(0.005)],
                                 ["DQN+HER", pytest.approx(0.95), "1, 0.9", pytest.approx(0.2)]]
    assert metrics["bits20_success[DQN+HER]"] == pytest.approx(0.95)
    assert variance_table["rows"] == [["0.5", 4.0, 2.0, "2x"], ["2", 40.0, 0.5, "80x"]]
    assert metrics["delayed effect_sigma2_variance[return HCA (learned h)]"] == 0.5
    assert [c["holds"] for c in claims] == [True, True, True, True, True]


# --------------------------------------------------------------------------------------------
# CLI and a smoke run
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag,value,message", [
    ("--sigmas", "0,1", "--sigmas must be positive"),
    ("--bits", "0", "--bits must be positive"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("04_her_hca.py", flag, value)


def test_smoke_run_writes_results_and_figures(tmp_path, read_results):
    args = hind.Args(smoke=True, device="cpu", out=str(tmp_path))
    result = hind.main(args)
    data = read_results(tmp_path / "results.json")
    assert (tmp_path / "hindsight.png").stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"]) and len(data["claims"]) == 5
    assert all(np.isfinite(v) for k, v in data["metrics"].items() if k != "tables")
    assert set(data["metrics"]["tables"]) == {"her", "variance"}
    # what even a tiny run must show: relabelling makes reward-0 transitions common
    verdicts = {c["claim"]: c["holds"] for c in data["claims"]}
    assert verdicts["HER turns failed episodes into useful signal (reward density)"] is True
    her, dqn = data["her"]["DQN+HER"][0], data["her"]["DQN"][0]
    assert her["reward_share"] > 5 * dqn["reward_share"] and her["episodes"] == 32 * 6
    assert set(data["hca_variances"]) == {"0.5", "2.0"}
    assert all(set(v) == set(hind.ESTIMATORS) for v in data["hca_variances"].values())
