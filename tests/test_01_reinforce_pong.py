"""01_reinforce_pong: reward-to-go, the loss, Pong dynamics, Karpathy's preprocessing, credit,
per-point gradients, runs."""

import importlib
import math

import numpy as np
import pytest
import torch

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
    whole = pong.standardize(torch.tensor([5.0, 7.0]))
    np.testing.assert_allclose(whole.numpy(), [-1.0, 1.0], rtol=1e-5)


def test_standardize_constant_input_gives_zeros_not_nan():
    got = pong.standardize(torch.ones(5))
    assert torch.equal(got, torch.zeros(5))


def test_policy_gradient_loss_matches_analytic_gradient():
    # Bernoulli policy with logits z: d log π(a) / dz = a - σ(z), so the loss gradient is
    # -Ψ (a - σ(z)) / n on the unmasked entries and 0 on the masked one.
    z = torch.tensor([0.3, -1.2, 2.0, 0.5], requires_grad=True)
    a = torch.tensor([1.0, 0.0, 0.0, 1.0])
    psi = torch.tensor([2.0, -1.0, 0.5, 7.0])
    mask = torch.tensor([True, True, True, False])
    logp = -torch.nn.functional.binary_cross_entropy_with_logits(z, a, reduction="none")
    pong.policy_gradient_loss(logp, psi, mask).backward()
    expected = -psi * (a - torch.sigmoid(z.detach())) * mask / mask.sum()
    torch.testing.assert_close(z.grad, expected)


def test_policy_gradient_loss_does_not_backprop_into_advantages():
    logp = torch.tensor([-0.5, -0.1], requires_grad=True)
    psi = torch.tensor([1.0, 2.0], requires_grad=True)
    pong.policy_gradient_loss(logp, psi).backward()
    assert psi.grad is None
    torch.testing.assert_close(logp.grad, torch.tensor([-0.5, -1.0]))
    assert math.isclose(pong.policy_gradient_loss(logp.detach(), psi.detach()).item(), (0.5 + 0.2) / 2, rel_tol=1e-6)


# ------------------------------------------------------------------------------------ dynamics
def make_pong(n=2, **kw):
    env = pong.Pong(n, seed=0, **kw)
    env.reset()
    return env


def place_ball(env, i, x, y, vx, vy):
    env.ball_x[i], env.ball_y[i], env.vel_x[i], env.vel_y[i] = x, y, vx, vy


def test_ball_bounces_off_the_top_wall():
    env = make_pong(1)
    place_ball(env, 0, 16.0, 1.5, 1.0, -1.0)
    env.step(torch.tensor([1]))
    assert env.vel_y[0] == 1.0  # reflected
    assert math.isclose(env.ball_y[0].item(), 1.5, abs_tol=1e-6)  # 1.5 - 1 = 0.5, mirrored at 1.0


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
    place_ball(env, 1, 20.0, 10.0, -1.0, 0.5)
    before = (env.ball_x.clone(), env.ball_y.clone(), env.vel_x.clone(), env.vel_y.clone())
    env._serve(torch.tensor([True, False, True]))
    for state, old in zip((env.ball_x, env.ball_y, env.vel_x, env.vel_y), before):
        assert state[1] == old[1]  # game 1 was not served
    assert env.ball_x[[0, 2]].tolist() == [16.0, 16.0] and torch.all(env.vel_x[[0, 2]] > 0)
    assert torch.all((env.ball_y[[0, 2]] >= 8) & (env.ball_y[[0, 2]] <= 24))


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


def test_frame_difference_is_zero_at_a_new_game():
    first = torch.zeros(2, 4, 4)
    diff = pong.FrameDifference(first)
    frame = torch.ones(2, 4, 4)
    x = diff(frame, new_game=torch.tensor([True, False]))
    assert x.dtype == torch.int8 and x.shape == (2, 2, 4, 4)
    assert torch.all(x[0, 1] == 0) and torch.all(x[1, 1] == 1) and torch.all(x[:, 0] == 1)


def test_random_policy_wins_few_points_and_tracking_wins_most():
    env = pong.Pong(64, seed=1)

    def points(policy_up):
        env.reset()
        won = lost = 0
        for _ in range(400):
            _, reward, *_ = env.step(policy_up())
            won, lost = won + int((reward > 0).sum()), lost + int((reward < 0).sum())
        return won / (won + lost)

    assert points(lambda: (torch.rand(64) < 0.5).long()) < 0.3
    assert points(lambda: (env.ball_y < env.agent_y).long()) > 0.95


# ------------------------------------------------------------------------------- preprocessing
def synthetic_atari_frame():
    frame = np.zeros((210, 160, 3), dtype=np.uint8)
    frame[..., 0] = 144  # background
    frame[24:34, :, 0] = 236  # the top border, cropped away
    frame[100:116, 140:144, 0] = 92  # the agent's paddle
    frame[60:64, 80:82, 0] = 236  # the ball
    frame[120:124, 20:22, 0] = 109  # second background colour
    return frame


def test_preprocess_atari_crops_downsamples_and_binarises():
    x = pong.preprocess_atari(synthetic_atari_frame()[None])
    assert x.shape == (1, 80, 80) and x.dtype == torch.float32
    expected = torch.zeros(80, 80)
    # output pixel (i, j) is input (35 + 2i, 2j)
    expected[33:41, 70:72] = 1  # paddle rows 101, 103, ..., 115 and columns 140, 142
    expected[13:15, 40] = 1  # ball rows 61, 63 and column 80
    torch.testing.assert_close(x[0], expected)


def test_ale_pong_runs_a_short_episode():
    pytest.importorskip("ale_py")
    pytest.importorskip("gymnasium")
    env = pong.AtariPong(2, seed=0)
    obs, _ = env.reset()
    assert obs.shape == (2, 80, 80)
    for _ in range(20):
        obs, reward, terminated, truncated, info = env.step(torch.tensor([1, 0]))
    assert obs.shape == (2, 80, 80) and set(obs.unique().tolist()) <= {0.0, 1.0}
    assert reward.shape == (2,) and info["point_over"].dtype == torch.bool


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
    assert buffer.dropped == 0 and len(buffer.waiting) == 4  # game 1 waits from frame 2 on
    assert buffer.trained == 2 + 5 and buffer.dropped_fraction() == 0


def test_point_buffer_drops_and_counts_frames_beyond_its_cap():
    buffer = pong.PointBuffer(max_frames=3)
    buffer.add(window_of([[0], [0]]))
    buffer.add(window_of([[0], [0]]))
    assert buffer.dropped == 1 and len(buffer.waiting) == 3
    assert buffer.trained == 0 and buffer.dropped_fraction() == 1


# ------------------------------------------------------------------------- gradient variance
def test_per_point_gradients_match_a_loop_of_autograd():
    torch.manual_seed(0)
    policy = pong.PixelPolicy(4, 3)
    torch.nn.init.normal_(policy.net[-1].weight)
    points = []
    for length in (2, 5, 3):
        points.append({"inputs": torch.randint(-1, 2, (length, 2, 4, 4), dtype=torch.int8),
                       "actions": torch.randint(0, 2, (length,)), "rtg": torch.randn(length)})
    got = pong.per_point_gradients(policy, points, "rtg", baseline=0.3)
    for i, pt in enumerate(points):
        policy.zero_grad()
        logp = pong.log_prob(policy(pt["inputs"].float()), pt["actions"])
        (logp * (pt["rtg"] - 0.3)).sum().backward()
        expected = torch.cat([p.grad.flatten() for p in policy.parameters()])
        torch.testing.assert_close(got[i], expected, rtol=1e-5, atol=1e-6)


def test_grouped_variance_is_the_trace_of_the_covariance():
    g = torch.randn(50, 4, generator=torch.Generator().manual_seed(1)) + 3.0
    group = torch.arange(50) % 3
    variance = pong.GroupedVariance(3, 4)
    variance.add(g[:20], group[:20])  # added in two chunks, as the study does
    variance.add(g[20:], group[20:])
    for k, got in enumerate(variance.per_group()):
        expected = np.trace(np.cov(g[group == k].numpy(), rowvar=False))
        assert math.isclose(got, expected, rel_tol=1e-6)
    assert math.isclose(variance.overall(), np.trace(np.cov(g.numpy(), rowvar=False)), rel_tol=1e-6)


def test_grouped_variance_keeps_its_sums_on_the_device_it_was_made_for():
    # "meta" stands in for a second device (a GPU) on a CPU-only machine: the per-point gradients
    # arrive there while the bins come from numpy, on the CPU
    variance = pong.GroupedVariance(3, 4, device="meta")
    variance.add(torch.empty(5, 4, device="meta"), torch.tensor([0, 1, 2, 0, 1]))
    assert variance.total.device.type == "meta" and variance.count.device.type == "meta"


def test_point_spans_keep_complete_points_with_an_outcome():
    window = window_of([[0, 0], [1, 0], [0, -1], [-1, 0], [0, 0]])
    window.segment_ends[4, 1] = True  # game 1: a game cut by the frame limit, no outcome
    assert pong.point_spans(window) == [(0, 0, 1), (0, 2, 3), (1, 0, 2)]


def test_loglog_slope_recovers_a_power_law():
    x = [10.0, 20.0, 40.0, 80.0]
    assert math.isclose(pong.loglog_slope(x, [3 * v**1.5 for v in x]), 1.5, rel_tol=1e-6)
    assert math.isnan(pong.loglog_slope([1.0], [1.0]))


# ----------------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("flag,value,message", [
    ("--lr", "-0.1", "--lr must be positive"),
    ("--gamma", "1.5", "--gamma must be in (0, 1]"),
    ("--variants", "flat,magic", "argument --variants: 'magic' is not one of flat, rtg, rtg_baseline"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("01_reinforce_pong.py", flag, value)


# ------------------------------------------------------------------------------ smoke runs
@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    outs = [tmp_path_factory.mktemp(f"run{i}") for i in range(2)]
    return [pong.main(pong.Args(smoke=True, device="cpu", out=str(o))) for o in outs], outs


def test_smoke_run_writes_results_and_figures(smoke_runs, read_results):
    _, outs = smoke_runs
    data = read_results(outs[0] / "results.json")
    assert {"args", "wall_clock_s", "metrics", "claims", "curves", "variance_study"} <= data.keys()
    for name in ("learning_curves.png", "gradient_variance.png", "who_gets_the_score.png"):
        assert (outs[0] / name).stat().st_size > 1000
    for key in ("random_policy_win_rate", "training_frames_per_second", "rtg_baseline_win_rate",
                "grad_var[flat, no baseline]", "grad_var[rtg - mean]"):
        assert math.isfinite(data["metrics"][key]), key
    assert all({"source", "claim", "measured", "holds"} == c.keys() for c in data["claims"])
    assert set(data["curves"]) == set(pong.VARIANTS)


def test_same_seed_gives_the_same_numbers(smoke_runs):
    (first, second), _ = smoke_runs
    assert first["metrics"].keys() == second["metrics"].keys()
    for key, value in first["metrics"].items():
        if key != "training_frames_per_second":
            assert value == second["metrics"][key] or (math.isnan(value) and math.isnan(second["metrics"][key])), key
