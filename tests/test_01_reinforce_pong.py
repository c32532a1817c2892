"""01_reinforce_pong: reward-to-go, the loss, Pong dynamics, the input, credit, the training loop,
the recorded rally, the claim, runs."""

import importlib
import math

import numpy as np
import pytest
import torch

import common

pong = importlib.import_module("01_reinforce_pong")


# ------------------------------------------------------------------------------------ method
def naive_returns(rewards, ends, gamma):
    """G_t by the definition: sum forward until the episode's end, one step at a time."""
    T, N = rewards.shape
    out = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            g, discount = 0.0, 1.0
            for k in range(t, T):
                g += discount * rewards[k, n]
                discount *= gamma
                if ends[k, n]:
                    break
            out[t, n] = g
    return out


def test_reward_to_go_karpathy_example():
    # Karpathy's discount_rewards resets the sum at each nonzero reward (a point in Pong)
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0, -1.0])
    ends = rewards != 0
    got = pong.reward_to_go(rewards, ends, gamma=0.99)
    expected = [0.9801, 0.99, 1.0, -0.9801, -0.99, -1.0]
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)


def test_reward_to_go_matches_naive_loop_with_episode_ends():
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(13, 4, generator=g)
    ends = torch.rand(13, 4, generator=g) < 0.2
    got = pong.reward_to_go(rewards, ends, gamma=0.9)
    np.testing.assert_allclose(got.numpy(), naive_returns(rewards.numpy(), ends.numpy(), 0.9),
                               rtol=1e-5, atol=1e-6)


def test_standardize_uses_only_masked_entries():
    x = torch.tensor([1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([True, True, True, False])
    got = pong.standardize(x, mask)
    values = np.array([1.0, 2.0, 3.0])
    expected = (values - values.mean()) / values.std()
    np.testing.assert_allclose(got[:3].numpy(), expected, rtol=1e-5)
    assert got[3] == 0


def test_standardize_constant_input_gives_zeros_not_nan():
    got = pong.standardize(torch.ones(5), torch.ones(5, dtype=torch.bool))
    assert torch.equal(got, torch.zeros(5))


def test_policy_gradient_loss_matches_analytic_gradient():
    # Bernoulli policy with logits z: d log π(a) / dz = a - σ(z), so the loss gradient is
    # -Ψ (a - σ(z)) / n
    z = torch.tensor([0.3, -1.2, 2.0, 0.5], requires_grad=True)
    a = torch.tensor([1.0, 0.0, 0.0, 1.0])
    psi = torch.tensor([2.0, -1.0, 0.5, 7.0])
    logp = pong.log_prob(z, a)
    pong.policy_gradient_loss(logp, psi).backward()
    torch.testing.assert_close(z.grad, -psi * (a - torch.sigmoid(z.detach())) / 4)


def test_policy_gradient_loss_does_not_backprop_into_advantages():
    logp = torch.tensor([-0.5, -0.1], requires_grad=True)
    psi = torch.tensor([1.0, 2.0], requires_grad=True)
    pong.policy_gradient_loss(logp, psi).backward()
    assert psi.grad is None
    torch.testing.assert_close(logp.grad, torch.tensor([-0.5, -1.0]))
    assert math.isclose(pong.policy_gradient_loss(logp.detach(), psi.detach()).item(), (0.5 + 0.2) / 2, rel_tol=1e-6)


def tiny_policy(size=4, hidden=3, seed=0):
    """A PixelPolicy whose output layer is not zero (P(up) differs between frames)."""
    with torch.random.fork_rng():  # the same weights every time, and the global generator untouched
        torch.manual_seed(seed)
        policy = pong.PixelPolicy(size, hidden)
        torch.nn.init.normal_(policy.net[-1].weight)
    return policy


def hand_batch():
    """Two games, six frames. Game 0 wins a point at frame 2, then plays an unfinished point;
    game 1 loses a point at frame 4 whose first frame was trained on in an earlier update."""
    g = torch.Generator().manual_seed(3)
    rewards = torch.tensor([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, -1.0], [0.0, 0.0]])
    used = torch.zeros(6, 2, dtype=torch.bool)
    used[0, 1] = True
    batch = pong.Window(inputs=torch.randint(-1, 2, (6, 2, 2, 4, 4), generator=g).to(torch.int8),
                        actions=torch.randint(0, 2, (6, 2), generator=g), rewards=rewards,
                        segment_ends=rewards != 0, used=used)
    ready = pong.finished_segment_mask(batch.segment_ends) & ~used
    return batch, ready


@pytest.mark.parametrize("variant", pong.VARIANTS)
def test_reinforce_step_trains_on_the_ready_frames_only_and_standardises_over_them(variant):
    batch, ready = hand_batch()
    assert ready.sum() == 3 + 4  # game 0: frames 0-2; game 1: frames 1-4 (frame 0 was used)
    gamma = 0.5
    # Ψ by hand, from the naive returns: flat = the point's outcome, rtg = γ^(T-t) R, and the
    # standardisation over the seven ready frames only (not the unfinished point, not the used frame)
    returns = torch.tensor(naive_returns(batch.rewards.numpy(), batch.segment_ends.numpy(),
                                         1.0 if variant == "flat" else gamma), dtype=torch.float32)
    psi = returns[ready]
    if variant == "rtg_baseline":
        psi = (psi - psi.mean()) / psi.std(unbiased=False)
    reference = tiny_policy()
    logp = pong.log_prob(reference(batch.inputs[ready].float()), batch.actions[ready])
    (-(psi * logp).mean()).backward()

    policy = tiny_policy()
    for p in policy.parameters():
        p.grad = torch.full_like(p, 100.0)  # a stale gradient the step must clear first
    before = [p.detach().clone() for p in policy.parameters()]
    optimizer = torch.optim.SGD(policy.parameters(), lr=1.0)
    pong.reinforce_step(policy, optimizer, variant, batch, ready, gamma)
    for p, p0, q in zip(policy.parameters(), before, reference.parameters()):
        torch.testing.assert_close(p0 - p.detach(), q.grad, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------------ dynamics
def make_pong(n=2, **kw):
    env = common.Pong(n, seed=0, **kw)
    env.reset()
    return env


def place_ball(env, i, x, y, vx, vy):
    env.ball_x[i], env.ball_y[i], env.vel_x[i], env.vel_y[i] = x, y, vx, vy


def test_ball_bounces_off_the_top_and_bottom_walls():
    env = make_pong(3)
    place_ball(env, 0, 16.0, 1.5, 1.0, -1.0)
    place_ball(env, 1, 16.0, 30.5, 1.0, 1.0)
    place_ball(env, 2, 16.0, 2.0, 1.0, -1.0)  # lands just touching the top wall: not yet reflected
    env.step(torch.tensor([1, 1, 1]))
    assert env.vel_y.tolist() == [1.0, -1.0, -1.0]
    # 1.5 - 1 = 0.5, mirrored at 1.0; 30.5 + 1 = 31.5, mirrored at 31.0
    torch.testing.assert_close(env.ball_y, torch.tensor([1.5, 30.5, 1.0]))
    assert env.ball_x.tolist() == [17.0, 17.0, 17.0]


def test_agent_paddle_returns_the_ball_with_an_angle_set_by_the_contact_point():
    env = make_pong(2)
    env.agent_y[:] = 16.0
    place_ball(env, 0, 29.5, 16.0, 1.0, 0.0)  # centre of the paddle: flat return
    place_ball(env, 1, 29.5, 19.0, 1.0, 0.0)  # near the bottom edge: steep return, downwards
    env.agent_y[:] = 14.0  # the action (up, 2 px) brings the paddle to 16 before the ball moves
    obs, reward, *_ , info = env.step(torch.tensor([0, 0]))  # down: 14 -> 16
    assert torch.equal(info["agent_hit"], torch.tensor([True, True]))
    assert torch.all(env.vel_x < 0) and torch.all(reward == 0)
    assert env.vel_y[0] == 0.0
    assert env.vel_y[1] > 0 and math.isclose(env.vel_y[1].item(), 3 / 4 * env.max_vy, rel_tol=1e-6)
    assert math.isclose(env.vel_x[0].item(), -1.05, rel_tol=1e-6)  # a little faster after a return


def test_a_return_reflects_the_ball_off_the_paddle_face_and_caps_its_speed():
    env = make_pong(4)
    env.agent_y[:], env.opponent_y[:] = 16.0, 16.0
    place_ball(env, 0, 28.5, 16.0, 1.95, 0.0)  # 30.45: 1.45 past the agent's face at 29
    place_ball(env, 1, 27.0, 20.0, 2.0, 0.0)  # lands exactly on the face, at the paddle's edge
    place_ball(env, 2, 5.0, 16.0, -2.0, 0.0)  # lands exactly on the opponent's face at 3
    place_ball(env, 3, 27.0, 20.1, 2.0, 0.0)  # just past the paddle's edge: a miss
    env.agent_y[:] = 18.0  # the action (up, 2 px) brings the paddle to 16 before the ball moves
    _, reward, *_, info = env.step(torch.tensor([1, 1, 1, 1]))
    assert info["agent_hit"].tolist() == [True, True, False, False] and reward.tolist() == [0.0, 0.0, 0.0, -1.0]
    torch.testing.assert_close(env.ball_x[:3], torch.tensor([27.55, 29.0, 3.0]))
    torch.testing.assert_close(env.vel_x[:3], torch.tensor([-2.0, -2.0, 2.0]))  # 1.95 * 1.05 capped at 2
    torch.testing.assert_close(env.vel_y[:2], torch.tensor([0.0, 1.5]))  # the edge: the steepest angle


def test_the_opponent_chases_only_a_ball_coming_into_its_half_at_its_top_speed():
    env = make_pong(5)
    env.opponent_y[:] = torch.tensor([16.0, 10.0, 10.0, 16.1, 10.0])
    place_ball(env, 0, 15.0, 5.0, -1.0, 0.0)  # coming, in its half: chase (up)
    place_ball(env, 1, 10.0, 5.0, 1.0, 0.0)  # in its half but going away: back to the centre
    place_ball(env, 2, 20.0, 5.0, -1.0, 0.0)  # coming but still in the agent's half: centre
    place_ball(env, 3, 15.0, 16.0, -1.0, 0.0)  # coming, 0.1 away: no overshoot
    place_ball(env, 4, 16.0, 5.0, -1.0, 0.0)  # coming, on the centre line: not in its half yet
    env.step(torch.tensor([1, 1, 1, 1, 1]))
    torch.testing.assert_close(env.opponent_y, torch.tensor([15.8, 10.2, 10.2, 16.0, 10.2]))


def test_geometry_and_speeds_scale_with_the_court_size():
    env = make_pong(1, size=64, opponent_speed=0.2)  # u = 2 pixels per unit of the 32-pixel court
    env.agent_y[:], env.opponent_y[:] = 32.0, 20.0
    place_ball(env, 0, 20.0, 40.0, -1.0, 0.0)
    env.step(torch.tensor([1]))
    assert env.agent_y[0] == 28.0 and math.isclose(env.opponent_y[0].item(), 20.4, rel_tol=1e-6)
    frame = env.render()[0]
    assert frame[:, 62].sum() == 12 and frame[:, 1].sum() == 12  # paddles 6 units tall, in columns 62 and 1
    assert frame[:, 2:62].sum() == 4 * 4  # the ball: 2 units square
    env._serve(torch.tensor([True]))
    assert env.ball_x[0] == 32.0 and env.vel_x[0] == 2.0 and abs(env.vel_y[0]) <= 1.5


def test_serves_spread_height_and_angle_independently_and_follow_the_seed():
    env = make_pong(2000)
    with torch.random.fork_rng():
        torch.manual_seed(123)  # the global generator plays no part
        twin = make_pong(2000)
    assert torch.equal(env.ball_y, twin.ball_y) and torch.equal(env.vel_y, twin.vel_y)
    y, vy = env.ball_y.numpy(), env.vel_y.numpy()
    assert 8.0 <= y.min() < 8.5 and 23.5 < y.max() <= 24.0  # the middle half of the court
    assert -0.75 <= vy.min() < -0.7 and 0.7 < vy.max() <= 0.75  # up to half the steepest angle, both ways
    assert abs(np.corrcoef(y, vy)[0, 1]) < 0.1 and torch.all(env.vel_x == 1.0) and torch.all(env.ball_x == 16.0)
    first = env.ball_y.clone()
    env.reset()
    assert not torch.equal(env.ball_y, first)  # a reset serves anew, from the games' own generator
    seeded, same_seed = common.Pong(2000, seed=4), common.Pong(2000, seed=4)
    assert torch.equal(seeded.reset()[0], same_seed.reset()[0]) and not torch.equal(seeded.ball_y, first)


def test_a_game_is_cut_at_its_frame_limit_and_started_again():
    env = make_pong(2, max_game_frames=3)
    env.score_agent[:] = 2.0
    for frame in range(3):
        place_ball(env, 0, 16.0, 16.0, 1.0, 0.0)
        place_ball(env, 1, 16.0, 16.0, 1.0, 0.0)
        _, _, terminated, truncated, _ = env.step(torch.tensor([1, 0]))
        assert not terminated.any() and truncated.tolist() == [frame == 2] * 2
    assert env.game_frames.tolist() == [0.0, 0.0] and env.score_agent.tolist() == [0.0, 0.0]
    assert env.agent_y.tolist() == [16.0, 16.0]


def test_points_are_scored_and_the_ball_is_served_again():
    env = make_pong(2)
    env.agent_y[:] = 5.0
    env.opponent_y[:] = 5.0
    place_ball(env, 0, 29.5, 25.0, 1.0, 0.0)  # passes the agent's paddle: opponent scores
    place_ball(env, 1, 2.5, 25.0, -1.0, 0.0)  # passes the opponent's paddle: agent scores
    _, reward, terminated, truncated, info = env.step(torch.tensor([1, 1]))
    assert reward.tolist() == [-1.0, 1.0]
    assert info["point_over"].tolist() == [True, True]
    assert env.score_opponent.tolist() == [1.0, 0.0] and env.score_agent.tolist() == [0.0, 1.0]
    assert torch.all(env.ball_x == 16.0)  # served from the centre line
    assert not terminated.any() and not truncated.any()


def test_a_serve_moves_only_the_balls_of_the_games_it_serves():
    env = make_pong(3)
    for game in range(3):
        place_ball(env, game, 20.0, 30.0, -1.0, 5.0)
    env._serve(torch.tensor([True, False, True]))
    assert env.ball_x.tolist() == [16.0, 20.0, 16.0] and env.vel_x.tolist() == [1.0, -1.0, 1.0]
    assert env.ball_y[1] == 30.0 and env.vel_y[1] == 5.0  # game 1 was not served
    assert torch.all((env.ball_y[[0, 2]] >= 8) & (env.ball_y[[0, 2]] <= 24))
    assert torch.all(env.vel_y[[0, 2]].abs() <= 0.75)


def test_only_finished_games_are_reset():
    env = make_pong(2, points_per_game=3)
    env.score_agent[:] = 2.0
    env.score_opponent[:] = 1.0
    env.agent_y[:] = 5.0
    env.opponent_y[:] = 5.0
    place_ball(env, 0, 2.5, 25.0, -1.0, 0.0)  # game 0: agent wins its third point
    place_ball(env, 1, 16.0, 16.0, 1.0, 0.0)  # game 1: the rally goes on
    _, reward, terminated, _, _ = env.step(torch.tensor([1, 1]))
    assert terminated.tolist() == [True, False] and reward.tolist() == [1.0, 0.0]
    assert env.score_agent.tolist() == [0.0, 2.0] and env.score_opponent.tolist() == [0.0, 1.0]
    assert env.agent_y[0] == 16.0 and env.agent_y[1] == 3.0  # game 1's paddle kept moving up


def test_render_draws_paddles_and_ball():
    env = make_pong(1)
    env.agent_y[:], env.opponent_y[:] = 10.0, 20.0
    place_ball(env, 0, 16.0, 16.0, 1.0, 0.0)
    frame = env.render()[0]
    assert frame[7:13, env.agent_x].all() and frame[17:23, env.opponent_x].all()
    assert frame[15:17, 15:17].all()
    assert frame.sum() == 6 + 6 + 4
    place_ball(env, 0, 20.5, 16.5, 1.0, 0.0)  # centred on a pixel: the 2-pixel ball covers only it
    frame = env.render()[0]
    assert frame[16, 20] == 1 and frame.sum() == 6 + 6 + 1


def test_player_without_motion_feeds_the_policy_no_difference():
    for motion in (False, True):
        env = common.Pong(4, seed=0)
        window, _ = pong.Player(env, pong.PixelPolicy(env.size, 4), motion=motion).play(20)
        moving = bool(window.inputs[:, :, 1].any())
        assert moving == motion and window.inputs[:, :, 0].any()


def test_random_policy_wins_few_points_and_tracking_wins_most():
    env = common.Pong(64, seed=1)

    def points(policy_up):
        env.reset()
        won = lost = 0
        for _ in range(400):
            _, reward, *_ = env.step(policy_up())
            won, lost = won + int((reward > 0).sum()), lost + int((reward < 0).sum())
        return won / (won + lost)

    assert points(lambda: (torch.rand(64) < 0.5).long()) < 0.3
    assert points(lambda: (env.ball_y < env.agent_y).long()) > 0.95


# ------------------------------------------------------------------------------------ credit
def test_credit_variants_on_one_won_and_one_lost_point():
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0, -1.0])[:, None]
    ends = rewards != 0
    mask = torch.ones_like(ends)
    flat = pong.credit("flat", rewards, ends, 0.9, mask)[:, 0]
    rtg = pong.credit("rtg", rewards, ends, 0.9, mask)[:, 0]
    base = pong.credit("rtg_baseline", rewards, ends, 0.9, mask)[:, 0]
    torch.testing.assert_close(flat, torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0]))
    torch.testing.assert_close(rtg, torch.tensor([0.81, 0.9, 1.0, -0.9, -1.0]))
    torch.testing.assert_close(base, (rtg - rtg.mean()) / rtg.std(unbiased=False))


def test_finished_segment_mask():
    ends = torch.tensor([[False, False], [True, False], [False, True], [False, False]])
    got = pong.finished_segment_mask(ends)
    assert got.tolist() == [[True, True], [True, True], [False, True], [False, False]]


def window_of(rewards):
    rewards = torch.tensor(rewards, dtype=torch.float32)
    T, N = rewards.shape
    return pong.Window(inputs=torch.zeros(T, N, 2, 1, 1, dtype=torch.int8),
                        actions=torch.zeros(T, N, dtype=torch.long), rewards=rewards,
                        segment_ends=rewards != 0, used=torch.zeros(T, N, dtype=torch.bool))


def test_point_buffer_trains_every_frame_once_after_its_point_ends():
    buffer = pong.PointBuffer(max_frames=100)
    # game 0: a point over frames 0..4 (ends in window 2); game 1: points end at 1 and at 5
    batch, ready = buffer.add(window_of([[0, 0], [0, 1], [0, 0]]))
    assert ready.tolist() == [[False, True], [False, True], [False, False]]
    batch, ready = buffer.add(window_of([[0, 0], [1, 0], [0, 0]]))
    assert len(batch) == 6  # game 0's whole point is still held
    assert ready.tolist() == [[True, False], [True, False], [True, False], [True, False],
                              [True, False], [False, False]]
    assert len(buffer.waiting) == 4  # game 1 waits from frame 2 on


def test_point_buffer_holds_at_most_its_cap():
    buffer = pong.PointBuffer(max_frames=3)
    buffer.add(window_of([[0], [0]]))
    batch, ready = buffer.add(window_of([[0], [0]]))
    assert len(batch) == 4 and not ready.any()  # a point not over yet: nothing to train on
    assert len(buffer.waiting) == 3 and torch.equal(buffer.waiting.rewards, batch.rewards[1:])  # the oldest dropped
    batch, ready = buffer.add(window_of([[1]]))
    assert len(batch) == 4 and ready[:, 0].tolist() == [True] * 4  # what is held trains once the point ends


# ---------------------------------------------------------------------------- the training loop
class ScriptedEnv:
    """Two games whose frames, rewards and ends are given in advance; records the actions."""

    def __init__(self, frames, rewards, terminated, truncated, point_over, agent_hit=None):
        self.frames, self.rewards, self.agent_hit = frames, rewards, agent_hit
        self.terminated, self.truncated, self.point_over = terminated, truncated, point_over
        self.actions = []

    def reset(self):
        return self.frames[0], {}

    def step(self, action):
        t = len(self.actions)
        self.actions.append(action)
        info = {"point_over": self.point_over[t]}
        if self.agent_hit is not None:
            info["agent_hit"] = self.agent_hit[t]
        return self.frames[t + 1], self.rewards[t], self.terminated[t], self.truncated[t], info


def always_up_in_game_0(x):
    """The logits of a policy for two games: P(up) = σ(30) in game 0, σ(-30) in game 1."""
    assert x.shape[0] == 2
    return torch.tensor([30.0, -30.0])


@pytest.mark.parametrize("with_hits", [True, False])
def test_player_records_inputs_actions_and_point_ends(with_hits):
    g = torch.Generator().manual_seed(0)
    frames = (torch.rand(5, 2, 3, 3, generator=g) < 0.5).float()
    rewards = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    terminated = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    truncated = torch.tensor([[False, False], [False, False], [False, True], [False, False]])
    point_over = rewards != 0
    hits = torch.tensor([[True, False], [False, False], [False, True], [False, False]])
    env = ScriptedEnv(frames, rewards, terminated, truncated, point_over, hits if with_hits else None)
    window, agent_hit = pong.Player(env, always_up_in_game_0).play(4)
    assert [a.tolist() for a in env.actions] == [[1, 0]] * 4
    assert window.actions.tolist() == [[1, 0]] * 4
    torch.testing.assert_close(window.rewards, rewards)
    # a point is over at a reward, and a game is over (terminated or truncated) without one
    assert window.segment_ends.tolist() == [[False, False], [True, False], [False, True], [False, False]]
    assert not window.used.any()
    assert torch.equal(agent_hit, hits if with_hits else torch.zeros(4, 2, dtype=torch.bool))
    # the input at step t is [frame t, frame t - frame t-1], the difference zero at a game's first frame
    for t in range(4):
        for n in range(2):
            new_game = t == 0 or bool(terminated[t - 1, n] | truncated[t - 1, n])
            difference = torch.zeros(3, 3) if new_game else frames[t, n] - frames[t - 1, n]
            torch.testing.assert_close(window.inputs[t, n].float(), torch.stack([frames[t, n], difference]))


def tiny_args(**changes):
    return pong.Args(**{"num_envs": 8, "window_len": 2, "frames": 8 * 2 * 40, "size": 16, "hidden": 8,
                        "lr": 0.05, "gamma": 0.8, **changes})


def naive_training_schedule(segment_ends, window_len, max_frames):
    """By the definition, frame by frame: the update (0, 1, ...) that trains each frame, or -1 if
    none does; and how many frames are dropped. A frame is trained in the update whose window
    holds the end of its point, unless it was dropped before: at an update that ends at row B
    while its point goes on, it is dropped if it lies more than `max_frames` rows before B."""
    T, N = segment_ends.shape
    trained_in = np.full((T, N), -1)
    dropped = 0
    for n in range(N):
        for t in range(T):
            end = next((k for k in range(t, T) if segment_ends[k, n]), None)
            last_unfinished_update_end = window_len * (end // window_len) if end is not None else T
            if t < last_unfinished_update_end - max_frames:
                dropped += 1
            elif end is not None:
                trained_in[t, n] = end // window_len
    return trained_in, dropped


@pytest.fixture(scope="module")
def spied_training():
    """A short training run with a spy on each window played and each update made."""
    args = tiny_args()
    seen = {"windows": [], "steps": [], "params_after": []}
    real_play, real_step = pong.Player.play, pong.reinforce_step

    def play(self, steps):
        window, agent_hit = real_play(self, steps)
        seen["windows"].append(pong.Window(*(x.clone() for x in vars(window).values())))
        return window, agent_hit

    def step(policy, optimizer, variant, batch, ready, gamma):
        seen["steps"].append({"policy": policy, "optimizer": optimizer, "variant": variant, "gamma": gamma,
                              "batch": pong.Window(*(x.clone() for x in vars(batch).values())),
                              "ready": ready.clone()})
        real_step(policy, optimizer, variant, batch, ready, gamma)
        seen["params_after"].append([p.detach().clone() for p in policy.parameters()])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pong.Player, "play", play)
        patch.setattr(pong, "reinforce_step", step)
        curve, policy = pong.train(args, "rtg", 5, torch.device("cpu"))
    return args, seen, curve, policy


def test_training_trains_every_frame_once_in_the_update_after_its_point_ends(spied_training):
    args, seen, curve, _ = spied_training
    updates = args.frames // (args.num_envs * args.window_len)
    assert len(seen["windows"]) == len(seen["steps"]) == updates
    stream = pong.Window(*(torch.cat(parts) for parts in zip(*(vars(w).values() for w in seen["windows"]))))
    trained_in, dropped = naive_training_schedule(stream.segment_ends.numpy(), args.window_len,
                                                  8 * args.window_len)
    assert dropped > 0 and (trained_in >= 0).sum() > 0  # the run exercises the cap on held frames
    for k, step in enumerate(seen["steps"]):
        end = (k + 1) * args.window_len  # the batch is the tail of what has been played so far
        batch, start = step["batch"], end - len(step["batch"])
        assert start >= 0
        for held, played in zip(vars(batch).values(), vars(stream).values()):
            if held is not batch.used:
                assert torch.equal(held, played[start:end])
        expected = np.zeros((len(batch), args.num_envs), dtype=bool)
        expected[trained_in[start:end] == k] = True
        assert np.array_equal(step["ready"].numpy(), expected), f"update {k}"


def test_training_passes_its_policy_optimizer_variant_and_gamma_to_each_update(spied_training):
    args, seen, _, policy = spied_training
    for step in seen["steps"]:
        assert step["policy"] is policy and step["variant"] == "rtg" and step["gamma"] == args.gamma
        group = step["optimizer"].param_groups[0]
        assert group["lr"] == args.lr and [id(p) for p in group["params"]] == [id(p) for p in policy.parameters()]


def test_training_curve_counts_the_points_of_each_window_played(spied_training):
    args, seen, curve, _ = spied_training
    per_update = args.num_envs * args.window_len
    assert curve["frames"] == [(k + 1) * per_update for k in range(len(seen["windows"]))]
    won = [int((w.rewards > 0).sum()) for w in seen["windows"]]
    lost = [int((w.rewards < 0).sum()) for w in seen["windows"]]
    assert curve["win_rate"] == [a / max(1, a + b) for a, b in zip(won, lost)]
    assert 0 in [a + b for a, b in zip(won, lost)] and sum(won) > 0  # windows without a point, and points won


def test_training_returns_the_policy_after_its_last_update(spied_training):
    _, seen, _, policy = spied_training
    for p, q in zip(policy.parameters(), seen["params_after"][-1]):
        assert torch.equal(p.detach(), q)


@pytest.mark.filterwarnings("ignore:std")  # the first update has no point over yet: nothing to standardise
def test_training_repeats_exactly_for_a_seed_and_trains_once_below_one_update():
    args = tiny_args(frames=8 * 2 * 3)
    first, second = (pong.train(args, "rtg_baseline", 2, torch.device("cpu")) for _ in range(2))
    assert first[0] == second[0]
    for p, q in zip(first[1].parameters(), second[1].parameters()):
        assert torch.equal(p, q)
    curve, _ = pong.train(tiny_args(frames=1), "flat", 2, torch.device("cpu"))
    assert curve["frames"] == [8 * 2]


def test_run_variants_trains_each_variant_on_the_same_seeds_and_aggregates(monkeypatch):
    """run_variants with a stand-in for training: seeds, evaluation seeds, the means, minima and
    medians over seeds, the frame count, and which run's policy plays the rally."""
    climbs = {3: [0.0, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9], 4: [0.0, 0.0, 0.2, 0.6, 0.9, 1.0, 1.0, 1.0, 1.0],
              5: [0.0, 0.0, 0.0, 0.0, 0.3, 0.9, 0.9, 0.9, 0.9]}  # rtg_baseline's are 0.05 higher
    rates = {("flat", 3): 0.3, ("flat", 4): 0.5, ("flat", 5): 0.1,
             ("rtg_baseline", 3): 0.9, ("rtg_baseline", 4): 0.7, ("rtg_baseline", 5): 0.8}
    trained, evaluated = [], []

    def fake_train(args, variant, seed, device):
        trained.append((variant, seed))
        shift = 0.05 if variant == "rtg_baseline" else 0.0
        curve = {"frames": [100 * (k + 1) for k in range(9)], "win_rate": [r + shift for r in climbs[seed]]}
        return curve, ("final", variant, seed)

    def fake_win_rate(args, policy, seed, device):
        evaluated.append((policy, seed))
        return rates.get(policy[1:], 0.5)

    monkeypatch.setattr(pong, "train", fake_train)
    monkeypatch.setattr(pong, "win_rate", fake_win_rate)
    runs = pong.run_variants(pong.Args(variants="flat,rtg_baseline", seeds=3, seed=3), torch.device("cpu"))
    assert trained == [(v, s) for v in ("flat", "rtg_baseline") for s in (3, 4, 5)]
    assert evaluated == [(("final", v, s), s + 10_000) for v, s in trained]
    assert 0 <= runs["seconds"] < 0.5  # the training time, for the frames per second
    assert runs["final_policy"] == ("final", "rtg_baseline", 3)
    for variant in ("flat", "rtg_baseline"):
        final, curves = runs["final"][variant], runs["curves"][variant]
        assert [c["win_rate"][0] for c in curves] == [0.0 + (variant == "rtg_baseline") * 0.05] * 3
        mine = [rates[variant, s] for s in (3, 4, 5)]
        assert math.isclose(final["win_rate"], sum(mine) / 3) and final["worst_seed"] == min(mine)
        for level in (50, 70, 80):  # the median over seeds (a seed that never gets there makes it nan)
            per_seed = [pong.frames_to_reach(c, level / 100) for c in curves]
            np.testing.assert_equal(final[f"frames_to_{level}pct"], float(np.median(per_seed)))
        assert runs["frames_to_70pct_per_seed"][variant] == [600.0, 700.0, 900.0]
    # without rtg_baseline, the first variant's first seed is the one the rally uses
    runs = pong.run_variants(pong.Args(variants="rtg,flat", seeds=2, seed=4), torch.device("cpu"))
    assert runs["final_policy"] == ("final", "rtg", 4)


def test_frames_to_reach_is_the_first_frame_the_moving_average_reaches_a_level():
    curve = {"frames": [10 * (k + 1) for k in range(11)], "win_rate": [0.0] * 5 + [1.0] * 6}
    assert pong.frames_to_reach(curve, 1.0) == 100  # the default window is 5: full from frame 100
    assert pong.frames_to_reach(curve, 0.6) == 80  # 3 of the last 5
    assert pong.frames_to_reach(curve, 0.5, smooth=2) == 60
    assert math.isnan(pong.frames_to_reach(curve, 1.01))


def replay(monkeypatch, window, agent_hit=None):
    """Stand in for Player: its play returns `window` (and `agent_hit`); records what it was given."""
    made = []

    class FakePlayer:
        def __init__(self, env, policy, motion=True):
            self.env, self.policy, self.motion = env, policy, motion
            made.append(self)

        def play(self, steps):
            self.steps = steps
            return window, agent_hit

    monkeypatch.setattr(pong, "Player", FakePlayer)
    return made


def numbered_window(rewards):
    """window_of, with every frame's input and action telling its (frame, game)."""
    window = window_of(rewards)
    T, N = window.rewards.shape
    stamp = torch.arange(T)[:, None] * 10 + torch.arange(N)[None]
    window.inputs = stamp[:, :, None, None, None].expand(T, N, 2, 1, 1).to(torch.int8).clone()
    window.actions = stamp.clone()
    return window


def test_win_rate_counts_the_points_of_fresh_games(monkeypatch):
    made = replay(monkeypatch, window_of([[1, 0], [0, -1], [1, 1], [0, 0]]))
    args = tiny_args(eval_frames=13)
    policy = tiny_policy(16, 8)
    assert pong.win_rate(args, policy, 7, torch.device("cpu")) == 3 / 4
    player = made[-1]
    assert player.policy is policy and player.steps == 13 and player.motion is True
    pong.win_rate(args, policy, 7, torch.device("cpu"), motion=False)
    assert made[-1].motion is False  # a frame-only policy is evaluated on the frame alone
    assert isinstance(player.env, common.Pong) and player.env.size == 16 and player.env.generator.initial_seed() == 7
    pong.win_rate(args, None, 7, torch.device("cpu"))  # a coin flip: P(up) = 0.5 on every frame
    torch.testing.assert_close(made[-1].policy(torch.randn(3, 2, 16, 16)), torch.zeros(3))
    replay(monkeypatch, window_of([[0, 0], [0, 0]]))
    assert pong.win_rate(args, policy, 7, torch.device("cpu")) == 0.0  # no point: 0, not a division by 0


def test_make_env_passes_size_opponent_speed_and_seed():
    env = tiny_args(size=64, opponent_speed=0.5, num_envs=3).make_env(11, torch.device("cpu"))
    assert isinstance(env, common.Pong) and env.num_envs == 3 and env.size == 64
    assert env.opponent_speed == 0.5 * 2 and env.generator.initial_seed() == 11


def test_point_spans_keep_complete_points_with_an_outcome():
    window = window_of([[0, 0], [1, 0], [0, -1], [-1, 0], [0, 0]])
    window.segment_ends[4, 1] = True  # game 1: a game cut by the frame limit, no outcome
    assert pong.point_spans(window) == [(0, 0, 1), (0, 2, 3), (1, 0, 2)]


def test_span_length_is_last_minus_first_frame():
    assert pong.span_length((5, 3, 7)) == 4 and pong.span_length((0, 2, 2)) == 0


# ------------------------------------------------------------------------- the recorded rally
def rally_window():
    """Game 0: won 0-1 (returned at 0), lost 2-6 (returned at 3), mid-point at 7.
    Game 1: won 0-2 (returned at 1), won 3-7 without a return."""
    window = numbered_window([[0, 0], [1, 0], [0, 1], [0, 0], [0, 0], [0, 0], [-1, 0], [0, 1]])
    hits = torch.zeros(8, 2, dtype=torch.bool)
    hits[0, 0] = hits[3, 0] = hits[1, 1] = True
    return window, hits


def test_record_rally_keeps_the_longest_won_point_with_a_return(monkeypatch):
    window, hits = rally_window()
    replay(monkeypatch, window, hits)
    rally = pong.record_rally(tiny_args(gamma=0.8), tiny_policy(16, 8), 0, torch.device("cpu"))
    assert rally["frames"].shape == (3, 1, 1) and rally["frames"].dtype == torch.float32
    assert rally["frames"][:, 0, 0].tolist() == [1.0, 11.0, 21.0]  # game 1, frames 0-2
    assert rally["outcome"] == 1.0 and rally["agent_hit"].tolist() == [False, True, False]
    torch.testing.assert_close(rally["credit"]["flat"], torch.tensor([1.0, 1.0, 1.0]))
    torch.testing.assert_close(rally["credit"]["rtg"], torch.tensor([0.64, 0.8, 1.0]))
    # standardised over every frame whose point is over in the window (not game 0's frame 7)
    returns = naive_returns(window.rewards.numpy(), window.segment_ends.numpy(), 0.8)
    finished = np.ones((8, 2), dtype=bool)
    finished[7, 0] = False
    z = (returns[:3, 1] - returns[finished].mean()) / returns[finished].std()
    np.testing.assert_allclose(rally["credit"]["rtg_baseline"].numpy(), z, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:std")  # a window without a point over: nothing to standardise
def test_record_rally_falls_back_to_the_longest_point_then_to_the_window(monkeypatch):
    window, _ = rally_window()
    replay(monkeypatch, window, torch.zeros(8, 2, dtype=torch.bool))  # no return anywhere
    rally = pong.record_rally(tiny_args(), tiny_policy(16, 8), 0, torch.device("cpu"))
    assert rally["frames"][:, 0, 0].tolist() == [20.0, 30.0, 40.0, 50.0, 60.0] and rally["outcome"] == -1.0
    window = numbered_window([[0, 0]] * 4)  # no point over
    replay(monkeypatch, window, torch.zeros(4, 2, dtype=torch.bool))
    rally = pong.record_rally(tiny_args(), tiny_policy(16, 8), 0, torch.device("cpu"))
    assert rally["frames"][:, 0, 0].tolist() == [0.0, 10.0, 20.0, 30.0] and rally["outcome"] == 0.0


# ------------------------------------------------------------------------------------ claims
def verdicts(per_seed):
    return [c["holds"] for c in pong.check_claims(per_seed)]


def test_claim_names_its_source():
    [claim] = pong.check_claims({"flat": [2.0], "rtg_baseline": [1.0]})
    assert claim["source"] == "whole-game §3 and Karpathy"
    assert claim["claim"].startswith("flat broadcast of the outcome")


@pytest.mark.parametrize("flat,base,holds", [
    ([300.0, 400.0], [100.0, 200.0], True),
    ([300.0, math.nan], [100.0, 200.0], True),  # a flat seed that never gets there is slower still
    ([300.0, 200.0], [100.0, 200.0], False),  # a tie is not slower
    ([300.0, 150.0], [100.0, 200.0], False),  # one flat seed faster than one rtg_baseline seed
    ([300.0, 400.0], [100.0, math.nan], None),  # an rtg_baseline seed never got there: no verdict
])
def test_flat_learns_slower_claim_compares_every_seed(flat, base, holds):
    assert verdicts({"flat": flat, "rtg_baseline": base}) == [holds]


def test_flat_learns_slower_claim_needs_both_variants():
    assert verdicts({"flat": [1.0], "rtg": [2.0]}) == []
    assert verdicts({"rtg_baseline": [1.0]}) == []


# ----------------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("flag,value,message", [
    ("--lr", "-0.1", "--lr must be positive"),
    ("--gamma", "1.5", "--gamma must be in (0, 1]"),
    ("--variants", "flat,magic", "argument --variants: 'magic' is not one of flat, rtg, rtg_baseline"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("01_reinforce_pong.py", flag, value)


# ------------------------------------------------------------------------------ smoke runs
def no_figure(*_):
    """Stands in for a figure in the twin run: only its numbers are compared."""


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """The smoke run, and a cheaper twin for the repeat: rtg_baseline alone, no figures."""
    outs = [tmp_path_factory.mktemp(f"run{i}") for i in range(2)]
    full = pong.main(pong.Args(smoke=True, device="cpu", out=str(outs[0])))
    with pytest.MonkeyPatch.context() as patch:
        for figure in ("plot_learning", "plot_rally"):
            patch.setattr(pong, figure, no_figure)
        alone = pong.main(pong.Args(smoke=True, device="cpu", out=str(outs[1]), variants="rtg_baseline"))
    return [full, alone], outs


def test_smoke_run_writes_results_and_figures(smoke_runs, read_results):
    _, outs = smoke_runs
    data = read_results(outs[0] / "results.json")
    assert {"args", "wall_clock_s", "metrics", "claims", "curves"} <= data.keys()
    for name in ("learning_curves.png", "who_gets_the_score.png"):
        assert (outs[0] / name).stat().st_size > 1000
    for key in ("random_policy_win_rate", "training_frames_per_second", "rtg_baseline_win_rate"):
        assert math.isfinite(data["metrics"][key]), key
    assert all({"source", "claim", "measured", "holds"} == c.keys() for c in data["claims"])
    assert set(data["curves"]) == set(pong.VARIANTS)


def test_smoke_run_trains_its_budget_and_measures_what_it_reports(smoke_runs, read_results):
    """Properties the run must have: every variant trains the whole frame budget, a coin flip wins
    few points (every serve goes to the agent), and the verdicts are the ones its own curves give."""
    _, outs = smoke_runs
    data = read_results(outs[0] / "results.json")
    args = data["args"]
    per_update = args["num_envs"] * args["window_len"]
    assert args["frames"] >= 2 * per_update
    for variant, curves in data["curves"].items():
        assert [c["frames"] for c in curves] == [list(range(per_update, args["frames"] + 1, per_update))], variant
    assert data["metrics"]["random_policy_win_rate"] < 0.3
    per_seed = {v: [math.nan if f is None else f for f in frames] for v, frames in data["frames_to_70pct_per_seed"].items()}
    for v, frames in per_seed.items():
        np.testing.assert_equal(frames, [pong.frames_to_reach(c, 0.7) for c in data["curves"][v]])
    assert [c["holds"] for c in data["claims"]] == [c["holds"] for c in pong.check_claims(per_seed)]


def test_same_seed_gives_the_same_numbers(smoke_runs):
    """rtg_baseline run alone repeats every number the full run gave for it and the coin flip's:
    each run starts from its seed, whatever ran before it."""
    (full, alone), _ = smoke_runs
    expected = {k for k in full["metrics"] if not k.startswith(("flat_", "rtg_")) or k.startswith("rtg_baseline_")}
    assert alone["metrics"].keys() == expected and len(expected) < len(full["metrics"])
    for key in expected - {"training_frames_per_second", "tables"}:
        np.testing.assert_equal(alone["metrics"][key], full["metrics"][key], err_msg=key)
    rows = [{row[0]: row for row in run["metrics"]["tables"]["variants"]["rows"]} for run in (full, alone)]
    assert rows[1].keys() == {"rtg_baseline", "random policy"} and rows[1] == {k: rows[0][k] for k in rows[1]}


def test_the_final_table_shows_the_metrics(smoke_runs, read_results):
    """Each variant's row: its points won, worst seed and frames to 50/70/80% (never where nan);
    the coin flip's last. The docs show this table as the run wrote it."""
    _, outs = smoke_runs
    metrics = read_results(outs[0] / "results.json")["metrics"]
    table = metrics.pop("tables")["variants"]
    assert table["header"] == ["variant", "points won", "worst seed", "frames to 50%", "to 70%", "to 80%"]
    for variant, row in zip(pong.VARIANTS, table["rows"]):
        frames = [metrics[f"{variant}_frames_to_{level}pct"] for level in (50, 70, 80)]
        assert row == [variant, metrics[f"{variant}_win_rate"], metrics[f"{variant}_worst_seed"],
                       *(pong.frames_text(math.nan if f is None else f) for f in frames)]
    assert table["rows"][-1] == ["random policy", metrics["random_policy_win_rate"], "-", "-", "-", "-"]
    assert len(table["rows"]) == len(pong.VARIANTS) + 1


def test_frames_text_writes_a_count_or_never():
    assert pong.frames_text(1_073_152.0) == "1,073,152" and pong.frames_text(math.nan) == "never (in budget)"
