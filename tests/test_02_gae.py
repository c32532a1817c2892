"""02_gae: every estimator against its definition, the exact truth, and a smoke run."""

import importlib
import math

import numpy as np
import pytest
import torch

import common

pong = importlib.import_module("01_reinforce_pong")
gae_script = importlib.import_module("02_gae")


def random_batch(T=12, N=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, N, generator=g)
    values = torch.randn(T, N, generator=g)
    next_values = torch.cat([values[1:], torch.randn(1, N, generator=g)])
    ends = torch.rand(T, N, generator=g) < 0.25  # episode ends inside the batch
    return rewards, values, next_values, ends


def naive_gae(rewards, values, next_values, ends, gamma, lam):
    """The O(T²) definition: A_t = Σ_l (γλ)^l δ_{t+l}, stopping after an episode's end."""
    T, N = rewards.shape
    delta = rewards + gamma * next_values * (~ends) - values
    out = torch.zeros(T, N)
    for n in range(N):
        for t in range(T):
            for lag in range(T - t):
                out[t, n] += (gamma * lam) ** lag * delta[t + lag, n]
                if ends[t + lag, n]:
                    break
    return out


def naive_nstep(rewards, values, next_values, ends, gamma, n_steps):
    T, N = rewards.shape
    out = torch.zeros(T, N)
    for n in range(N):
        for t in range(T):
            total, k = 0.0, 0
            while True:
                total += gamma**k * rewards[t + k, n]
                if ends[t + k, n]:
                    break
                if k + 1 == n_steps or t + k + 1 == T:
                    total += gamma ** (k + 1) * next_values[t + k, n]
                    break
                k += 1
            out[t, n] = total - values[t, n]
    return out


@pytest.mark.parametrize("seed", range(4))
def test_reward_to_go_is_a_copy_of_the_one_01_teaches(seed):
    g = torch.Generator().manual_seed(seed)
    T, N = torch.randint(1, 40, (2,), generator=g).tolist()
    rewards = torch.randn(T, N, generator=g)
    ends = torch.rand(T, N, generator=g) < torch.rand(1, generator=g)  # from no end to an end on every step
    gamma = 1.0 if seed == 0 else float(torch.rand(1, generator=g))
    torch.testing.assert_close(gae_script.reward_to_go(rewards, ends, gamma),
                               pong.reward_to_go(rewards, ends, gamma), rtol=0, atol=0)


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (1.0, 0.5), (0.9, 0.0), (1.0, 1.0)])
def test_gae_matches_the_naive_definition(gamma, lam):
    batch = random_batch()
    torch.testing.assert_close(gae_script.gae(*batch, gamma, lam), naive_gae(*batch, gamma, lam))


def test_gae_lambda_one_is_mc_minus_v_and_lambda_zero_is_the_td_residual():
    rewards, values, next_values, ends = random_batch(seed=1)
    ends[-1] = True  # every episode complete, so the Monte Carlo return is defined
    torch.testing.assert_close(gae_script.gae(rewards, values, next_values, ends, 0.97, 1.0),
                               gae_script.mc_advantage(rewards, values, ends, 0.97))
    torch.testing.assert_close(gae_script.gae(rewards, values, next_values, ends, 0.97, 0.0),
                               gae_script.td_residuals(rewards, values, next_values, ends, 0.97))


@pytest.mark.parametrize("n", [1, 3, 50])
def test_nstep_matches_a_naive_loop(n):
    batch = random_batch(seed=2)
    torch.testing.assert_close(gae_script.nstep_advantage(*batch, 0.9, n),
                               naive_nstep(*batch, 0.9, n))


def test_nstep_limits_are_td_and_mc():
    rewards, values, next_values, ends = random_batch(seed=3)
    ends[-1] = True
    torch.testing.assert_close(gae_script.nstep_advantage(rewards, values, next_values, ends, 0.9, 1),
                               gae_script.td_residuals(rewards, values, next_values, ends, 0.9))
    torch.testing.assert_close(gae_script.nstep_advantage(rewards, values, next_values, ends, 0.9, 100),
                               gae_script.mc_advantage(rewards, values, ends, 0.9))


def test_flat_broadcast_copies_return_minus_start_value():
    rewards = torch.tensor([[0.0], [0.5], [1.0], [0.0], [2.0]])
    ends = torch.tensor([[False], [False], [True], [False], [True]])
    values = torch.tensor([[0.25], [9.0], [9.0], [1.0], [9.0]])
    got = gae_script.flat_broadcast(rewards, values, ends)[:, 0]
    torch.testing.assert_close(got, torch.tensor([1.25, 1.25, 1.25, 1.0, 1.0]))


def test_gae_with_gamma_one_and_no_critic_discounts_by_lambda():
    # V = 0 and a terminal reward R only: GAE_λ(t) = λ^(T-1-t) R, not R
    rewards = torch.tensor([[0.0], [0.0], [0.0], [1.0]])
    ends = torch.tensor([[False], [False], [False], [True]])
    zeros = torch.zeros(4, 1)
    got = gae_script.gae(rewards, zeros, zeros, ends, 1.0, 0.5)[:, 0]
    torch.testing.assert_close(got, torch.tensor([0.125, 0.25, 0.5, 1.0]))


def test_sampled_mc_advantage_is_unbiased_against_the_exact_one():
    args = gae_script.Args(distractor_prob=0.5, distractor=0.2)
    env = gae_script.make_env(args, 6, 20_000, seed=0, device="cpu")
    policy = torch.full((env.num_states + 1, 2), 0.5)
    policy[0] = torch.tensor([0.3, 0.7])
    V, A = gae_script.exact_truth(env, policy, gamma=1.0)
    episode = common.play_episodes(env, policy)
    mc = gae_script.mc_advantage(episode["rewards"], V[episode["states"]], episode["ends"], 1.0)
    took = episode["actions"][0] == 1
    assert math.isclose(mc[0][took].mean().item(), A[0, 1].item(), abs_tol=0.01)
    assert math.isclose(mc[0][~took].mean().item(), A[0, 0].item(), abs_tol=0.01)
    assert math.isclose(A[0, 1].item(), 0.3, abs_tol=1e-6)  # 1 - π(take) = 0.3


def test_bias_and_variance_on_a_hand_case():
    estimate = torch.tensor([[1.0, 3.0, 0.0, 2.0], [0.5, -0.5, 0.5, -0.5], [0.0, 0.0, 0.0, 0.0]])
    truth = torch.zeros(3, 4)
    actions = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    got = gae_script.bias_and_variance(estimate, truth, actions)
    assert got["key_bias2"] == (2.0 - 1.0) ** 2
    assert got["key_var"] == 2.0  # sample variances 2 and 2
    assert got["corridor_mse"] == 0.25


@pytest.mark.parametrize("flag,value,message", [
    ("--actor-lr", "-1", "--actor-lr must be positive"),
    ("--lambdas", "0,1.5", "--lambdas must be in [0, 1]"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("02_gae.py", flag, value)


def test_smoke_run_writes_results_and_figures(tmp_path, read_results):
    result = gae_script.main(gae_script.Args(smoke=True, device="cpu", out=str(tmp_path)))
    data = read_results(tmp_path / "results.json")
    for name in ("bias_variance_lambda.png", "bias_variance_nstep.png", "dilemmas.png",
                 "episodes_to_solve.png", "diagram4.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"]) and len(data["claims"]) == 5
    assert all(np.isfinite(v) for v in data["metrics"].values())
