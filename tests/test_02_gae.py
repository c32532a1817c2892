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
    out = torch.zeros_like(delta)
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
    # key step: errors [1, 5] when taking (mean 3, var 8), [0, 2] when leaving (mean 1, var 2);
    # the corridor row counts its error against a nonzero truth; the door row (last) is left out
    estimate = torch.tensor([[1.0, 5.0, 1.0, 3.0], [1.0, -0.5, 0.5, -0.5], [9.0, 9.0, 9.0, 9.0]])
    truth = torch.tensor([[0.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    actions = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]])
    got = gae_script.bias_and_variance(estimate, truth, actions)
    # net of the contrast's sampling variance, Var(e | take) / 2 + Var(e | leave) / 2 = 4 + 1
    assert got == {"key_bias2": (3.0 - 1.0) ** 2, "key_bias2_net": 4.0 - (8.0 / 2 + 2.0 / 2),
                   "key_var": (8.0 + 2.0) / 2, "corridor_mse": 0.75 / 4}


def test_cli_rejects_bad_values_with_one_line(cli_error):
    assert "--lambdas must be in [0, 1]" in cli_error("02_gae.py", "--lambdas", "0,1.5")


# --------------------------------------------------------------------------------------------
# Small helpers: the world, its episodes and its exact values, built without the script
# --------------------------------------------------------------------------------------------
P_DISTRACTOR, DISTRACTOR = 0.5, 0.2


def small_args(**changes):
    return gae_script.Args(**{"distractor_prob": P_DISTRACTOR, "distractor": DISTRACTOR, **changes})


def uniform_episodes(args, L, num_envs):
    """The episodes a uniform policy plays on a fresh key-to-door world seeded with args.seed."""
    env = common.KeyToDoor(num_envs, corridor=L, distractor_prob=args.distractor_prob,
                           distractor=args.distractor, noise=args.noise, seed=args.seed)
    return env, common.play_episodes(env, torch.full((env.num_states + 1, 2), 0.5))


def exact_values(env, gamma=1.0):
    P, R = env.model()
    V, _ = common.evaluate_policy(P, R, torch.full((env.num_states + 1, 2), 0.5, dtype=torch.float64), gamma)
    return V


def gae_by_weights(rewards, values, next_values, ends, lam):
    """GAE(γ = 1, λ) on one whole episode per column, as a matrix: A_t = Σ_{t' ≥ t} λ^(t'-t) δ_t'."""
    delta = rewards + next_values * ~ends - values
    lag = torch.arange(len(rewards))[None, :] - torch.arange(len(rewards))[:, None]
    weights = torch.where(lag >= 0, float(lam) ** lag.clamp(min=0).double(), 0.0)
    return (weights @ delta.double()).float()


def key_metrics(error, took):
    """bias² of the take-vs-leave contrast and the mean within-action variance of a key-step error."""
    return ((error[took].mean() - error[~took].mean()) ** 2).item(), \
        ((error[took].var() + error[~took].var()) / 2).item()


def test_make_env_and_uniform_policy_carry_the_arguments():
    args = small_args(distractor_prob=0.3, distractor=0.7, noise=0.1)
    env = gae_script.make_env(args, 4, 9, seed=5, device="cpu")
    assert (env.corridor, env.num_envs, env.distractor_prob, env.distractor, env.noise) == (4, 9, 0.3, 0.7, 0.1)
    assert torch.equal(env.generator.get_state(), torch.Generator().manual_seed(5).get_state())
    torch.testing.assert_close(gae_script.uniform_policy(env), torch.full((env.num_states + 1, 2), 0.5))


def test_all_estimates_names_each_estimator_after_its_own_parameter():
    args = small_args(noise=0.3)
    env, episode = uniform_episodes(args, 3, 7)
    V = torch.randn(env.num_states + 1, generator=torch.Generator().manual_seed(0))
    r, ends = episode["rewards"], episode["ends"]
    v, v_next = V[episode["states"]], V[episode["next_states"]]
    got = gae_script.all_estimates(episode, V, 0.8, [0.0, 0.6], [2, 3])
    assert set(got) == {"GAE λ=0", "GAE λ=0.6", "2-step", "3-step", "MC", "flat"}
    want = {"GAE λ=0": naive_gae(r, v, v_next, ends, 0.8, 0.0), "GAE λ=0.6": naive_gae(r, v, v_next, ends, 0.8, 0.6),
            "2-step": naive_nstep(r, v, v_next, ends, 0.8, 2), "3-step": naive_nstep(r, v, v_next, ends, 0.8, 3),
            "MC": gae_script.reward_to_go(r, ends, 0.8) - v,
            "flat": (r.sum(0) - v[0]).expand_as(r)}  # one episode per column
    for name, psi in want.items():
        torch.testing.assert_close(got[name], psi, msg=name)


# --------------------------------------------------------------------------------------------
# The exact-truth study: the episodes, the critics and the truth each estimator is measured with
# --------------------------------------------------------------------------------------------
STUDY_ARGS = dict(lengths="2,4", episodes=600, critics=3, seeds=4, lambdas="0,0.5,1", nsteps="1,100",
                  value_noise=0.3, seed=4)


@pytest.fixture(scope="module")
def study():
    return gae_script.exact_truth_study(small_args(**STUDY_ARGS), "cpu")


def noisy_critic_errors(args, L, seeds=False):
    """The critics' errors ε, one per draw, as the study draws them (seeded once per L): the
    averaged critics', or (seeds) the seeds' drawn after them."""
    generator = torch.Generator().manual_seed(args.seed)
    errors = [args.value_noise * torch.randn(2 * (L + 2) + 1, generator=generator)
              for _ in range(args.critics + args.seeds)]
    return errors[args.critics:] if seeds else errors[:args.critics]


def test_study_measures_every_estimator_at_every_length_with_both_critics(study):
    names = {"GAE λ=0", "GAE λ=0.5", "GAE λ=1", "1-step", "100-step", "MC", "flat"}
    assert set(study) == {2, 4}
    for L in study:
        assert set(study[L]) == {"exact V", "noisy V", "seeds"}
        assert all(set(study[L][critic]) == names for critic in ("exact V", "noisy V"))
        # the seeds, at the longest L only, each its noisy critic: GAE, MC, flat, n-step for n = 1 only
        assert len(study[L]["seeds"]) == (STUDY_ARGS["seeds"] if L == 4 else 0)
        assert all(set(seed) == names - {"100-step"} for seed in study[L]["seeds"])


@pytest.mark.parametrize("L", [2, 4])
def test_study_mc_error_at_the_key_is_the_distractors_noise_on_the_studys_episodes(study, L):
    """G - V(s_0) - A(s_0, a) = (sum of distractors) - L p d on both actions: its contrast and
    variance, on the episodes the study must have played (args.episodes, args.seed), with either
    critic (an error in V(s_0) is shared by both actions, so it cannot move bias² or variance)."""
    args = small_args(**STUDY_ARGS)
    _, episode = uniform_episodes(args, L, args.episodes)
    took = episode["actions"][0] == 1
    error = episode["rewards"].sum(0) - took.float() - L * P_DISTRACTOR * DISTRACTOR
    bias2, var = key_metrics(error, took)
    assert bias2 > 1e-6 and var > 0.01  # a finite sample: neither is zero
    for critic in ("exact V", "noisy V"):
        for name in ("MC", "GAE λ=1", "100-step", "flat"):  # flat is G - V(s_0) at the key step too
            got = study[L][critic][name]
            assert math.isclose(got["key_bias2"], bias2, rel_tol=1e-3, abs_tol=1e-9), (critic, name)
            assert math.isclose(got["key_var"], var, rel_tol=1e-4), (critic, name)


@pytest.mark.parametrize("L", [2, 4])
def test_study_corridor_mse_of_mc_against_its_own_definition(study, L):
    args = small_args(**STUDY_ARGS)
    _, episode = uniform_episodes(args, L, args.episodes)
    r = episode["rewards"]
    # rows 1..L are the corridor: G_t - V(s_t) = Σ_{u ≥ t} r_u - (L - t + 1) p d (the door is worth
    # the key on both sides); the door row is not part of it
    errors = torch.stack([r[t:L + 1].sum(0) - (L - t + 1) * P_DISTRACTOR * DISTRACTOR for t in range(1, L + 1)])
    want = float((errors**2).mean())
    assert math.isclose(study[L]["exact V"]["MC"]["corridor_mse"], want, rel_tol=1e-4)


@pytest.mark.parametrize("L", [2, 4])
def test_study_td_with_the_exact_critic_is_exact_at_the_key_and_the_noisy_critics_bias_is_theirs(study, L):
    """δ_0 = V(s_1) - V(s_0) = A(s_0, a) exactly when V is exact: no bias, no variance. With V + ε
    the key error is ε(s_1) - ε(s_0): bias² (ε(key, 1) - ε(no key, 1))², averaged over the critics.
    In the corridor, with p = 1/2, every exact δ_t = r_t - p d is ±d/2."""
    args = small_args(**STUDY_ARGS)
    for name in ("GAE λ=0", "1-step"):
        exact, noisy = study[L]["exact V"][name], study[L]["noisy V"][name]
        assert exact["key_bias2"] < 1e-10 and exact["key_var"] < 1e-10, name
        assert math.isclose(exact["corridor_mse"], (DISTRACTOR / 2) ** 2, rel_tol=1e-4), name
        want = np.mean([float(eps[3] - eps[2]) ** 2 for eps in noisy_critic_errors(args, L)])
        assert math.isclose(noisy["key_bias2"], want, rel_tol=1e-4), name
        assert noisy["key_var"] < 1e-10, name


def test_study_gae_between_td_and_mc_weighs_the_corridor_by_lambda(study):
    """With the exact V, GAE(λ=1/2)'s key error is Σ_{l=1..L} (1/2)^l (r_l - p d)."""
    args = small_args(**STUDY_ARGS)
    L = 4
    _, episode = uniform_episodes(args, L, args.episodes)
    weights = torch.tensor([0.5**lag for lag in range(1, L + 1)])[:, None]
    error = (weights * (episode["rewards"][1:L + 1] - P_DISTRACTOR * DISTRACTOR)).sum(0)
    bias2, var = key_metrics(error, episode["actions"][0] == 1)
    got = study[L]["exact V"]["GAE λ=0.5"]
    assert math.isclose(got["key_bias2"], bias2, rel_tol=1e-3, abs_tol=1e-9)
    assert math.isclose(got["key_var"], var, rel_tol=1e-4)


def test_study_noisy_critic_is_the_exact_v_plus_each_drawn_error_averaged_over_draws(study):
    """GAE(λ=1/2) fed V + ε, for each of the study's draws of ε, measured against the exact A."""
    args = small_args(**STUDY_ARGS)
    L = 2
    env, episode = uniform_episodes(args, L, args.episodes)
    V = exact_values(env).float()
    s, a, took = episode["states"], episode["actions"][0], episode["actions"][0] == 1
    truth_at_key = torch.where(took, 0.5, -0.5)  # A(s_0, take) = 1 - 1/2, A(s_0, leave) = -1/2
    draws = []
    for eps in noisy_critic_errors(args, L):
        table = V + eps
        psi = gae_by_weights(episode["rewards"], table[s], table[episode["next_states"]], episode["ends"], 0.5)
        draws.append(key_metrics(psi[0] - truth_at_key, a == 1))
    bias2, var = np.mean(draws, axis=0)
    got = study[L]["noisy V"]["GAE λ=0.5"]
    assert math.isclose(got["key_bias2"], bias2, rel_tol=1e-3)
    assert math.isclose(got["key_var"], var, rel_tol=1e-4)


def test_study_seeds_are_each_critic_on_its_own_slice_of_the_episodes(study):
    """Seed k: the k-th critic drawn after the averaged ones, measured on episodes k·n .. (k+1)·n - 1
    only (n = episodes / seeds), against the exact A."""
    args = small_args(**STUDY_ARGS)
    L, size = 4, STUDY_ARGS["episodes"] // STUDY_ARGS["seeds"]
    env, episode = uniform_episodes(args, L, args.episodes)
    V = exact_values(env).float()
    for k, eps in enumerate(noisy_critic_errors(args, L, seeds=True)):
        part = {key: value[:, k * size:(k + 1) * size] for key, value in episode.items()}
        took = part["actions"][0] == 1
        truth_at_key = torch.where(took, 0.5, -0.5)
        table = V + eps
        psi = gae_by_weights(part["rewards"], table[part["states"]], table[part["next_states"]], part["ends"], 0.5)
        error = psi[0] - truth_at_key
        bias2, var = key_metrics(error, took)
        net = bias2 - (error[took].var() / took.sum() + error[~took].var() / (~took).sum()).item()
        got = study[L]["seeds"][k]["GAE λ=0.5"]
        assert math.isclose(got["key_bias2"], bias2, rel_tol=1e-3, abs_tol=1e-9), k
        assert math.isclose(got["key_bias2_net"], net, rel_tol=1e-3, abs_tol=1e-7), k
        assert math.isclose(got["key_var"], var, rel_tol=1e-4), k


# --------------------------------------------------------------------------------------------
# The γ = 1 gaps
# --------------------------------------------------------------------------------------------
def test_gae_vs_mc_gaps_on_the_first_length_against_the_naive_definition():
    args = small_args(lengths="3,8", seed=2, noise=0.1)
    got = gae_script.gae_vs_mc_at_gamma_one(args, "cpu")
    env, episode = uniform_episodes(args, 3, 256)
    r, ends = episode["rewards"], episode["ends"]
    assert list(got) == ["exact V", "V = 0"]
    for critic, table in (("exact V", exact_values(env).float()), ("V = 0", torch.zeros(env.num_states + 1))):
        v, v_next = table[episode["states"]], table[episode["next_states"]]
        mc = r.flip(0).cumsum(0).flip(0) - v  # one episode per column, γ = 1
        assert list(got[critic]) == [0.0, 0.5, 0.9, 0.99, 1.0]
        for lam, gap in got[critic].items():
            want = float((gae_by_weights(r, v, v_next, ends, lam) - mc).abs().max())
            assert math.isclose(gap, want, rel_tol=1e-4, abs_tol=1e-5), (critic, lam)
    assert got["exact V"][1.0] < 1e-5 and got["exact V"][0.0] > 0.05 and got["V = 0"][0.9] > 0.05



# --------------------------------------------------------------------------------------------
# The claim checker: every verdict computed from the numbers, both ways
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values,holds", [
    ([1.0, 1.2, 0.9], True),  # the interval lies above 0
    ([1.0, -0.9, 0.5], None),  # a positive mean, an interval that holds 0
    ([-0.1, 0.05, -0.2], None),  # a negative mean, but the interval reaches above 0: no size is ruled out
    ([-0.5, -0.4, -0.6], False),  # the interval lies below 0: the seeds show the reverse
    ([0.0, 0.0, 0.0], None),  # no effect and no spread: cannot tell
    ([2.0], None),  # one seed: no interval
])
def test_seed_verdict_on_an_effect(values, holds):
    verdict, text = common.seed_verdict(values)
    assert verdict is holds
    mean, low, high = common.mean_interval(values)
    assert text == f"{mean:+.3g} [{low:+.3g}, {high:+.3g}]"


@pytest.mark.parametrize("values,zero_below,holds", [
    ([0.01, -0.02, 0.005], 0.5, True),  # holds 0, and far below the size it has where the statement fails
    ([0.01, -0.02, 0.005], 0.005, None),  # holds 0, but the interval reaches that size: cannot tell
    ([0.1, 0.12, 0.09], 0.5, False),  # excludes 0
    ([-0.1, -0.12, -0.09], 0.5, False),
    ([0.0], 0.5, None),  # one seed
])
def test_seed_verdict_on_a_zero(values, zero_below, holds):
    assert common.seed_verdict(values, zero_below=zero_below)[0] is holds


def seeded_study(td_bias2, mc_bias2, td_var=(0.0,) * 4, mc_var=(0.8, 0.79, 0.81, 0.8)):
    """A hand-made study at L = 10 whose seeds carry these per-seed numbers of the noisy critic
    (bias² net of sampling noise); the averaged critics say the opposite, so only the seeds can
    decide."""
    def cell(bias2, var):
        return {"key_bias2": bias2 + 0.001, "key_bias2_net": bias2, "key_var": var}

    seeds = [{gae_script.gae_name(0): cell(tb, tv), gae_script.gae_name(1): cell(mb, mv)}
             for tb, mb, tv, mv in zip(td_bias2, mc_bias2, td_var, mc_var)]
    exact = {gae_script.gae_name(0): cell(0.0, 0.0), gae_script.gae_name(1): cell(0.0, 0.8)}
    noisy = {gae_script.gae_name(0): cell(0.0, 0.9), gae_script.gae_name(1): cell(0.5, 0.0)}
    return {10: {"exact V": exact, "noisy V": noisy, "seeds": seeds}}


TD_BIASED = (0.05, 0.07, 0.04, 0.06)
MC_UNBIASED = (0.001, -0.002, 0.0005, 0.0)
CLAIM_ARGS = gae_script.Args(lambdas="0,0.5,1", episodes=400, seeds=4)


def gaps_with(**changes):
    gaps = {"exact V": {0.0: 1e-6, 0.5: 2e-6, 0.9: 1e-6, 1.0: 1e-7}, "V = 0": {0.0: 1e-6, 0.9: 3e-5, 1.0: 0.0}}
    for key, value in changes.items():
        critic, lam = key.split("_")
        gaps["exact V" if critic == "exact" else "V = 0"][float(lam) / 10] = value
    return gaps


@pytest.mark.parametrize("study,holds", [
    (seeded_study(TD_BIASED, MC_UNBIASED), True),
    (seeded_study(MC_UNBIASED, TD_BIASED), False),  # TD's bias² below MC's (and MC biased)
    (seeded_study(TD_BIASED, (0.01, 0.012, 0.011, 0.009)), False),  # MC's bias² excludes 0
    (seeded_study(TD_BIASED, MC_UNBIASED, td_var=(0.9, 0.95, 0.92, 0.9)), False),  # TD's variance above MC's
    (seeded_study(TD_BIASED, (0.03, -0.03, 0.02, -0.02)), None),  # MC's interval holds 0 but reaches TD's bias²
    (seeded_study((0.05, -0.04, 0.06, -0.03), MC_UNBIASED), None),  # TD's bias² no clearer than its spread
    (seeded_study(TD_BIASED[:1], MC_UNBIASED[:1]), None),  # one seed: no interval
])
def test_claims_td_vs_mc_is_decided_over_the_seeds_at_the_longest_length(study, holds):
    claims = gae_script.estimator_claims(CLAIM_ARGS, study, gaps_with())
    assert len(claims) == 3 and claims[0]["holds"] is holds
    assert "L=10" in claims[0]["measured"] and "100 episodes" in claims[0]["measured"]


@pytest.mark.parametrize("study,holds", [
    (seeded_study(TD_BIASED, MC_UNBIASED), True),
    (seeded_study(TD_BIASED, (0.01, 0.012, 0.011, 0.009)), False),  # MC biased
    (seeded_study(TD_BIASED, MC_UNBIASED, td_var=(0.9, 0.95, 0.92, 0.9)), False),  # MC no noisier than TD
    (seeded_study((0.08, 0.02, 0.09, 0.01), MC_UNBIASED), True),  # TD's bias unclear: the pair says nothing, MC yes
])
def test_the_monte_carlo_half_is_decided_on_its_own_numbers(study, holds):
    claims = gae_script.estimator_claims(CLAIM_ARGS, study, gaps_with())
    assert "honest but noisy" in claims[1]["claim"] and claims[1]["holds"] is holds


def test_claims_td_vs_mc_reports_each_part_with_its_interval():
    measured = gae_script.estimator_claims(CLAIM_ARGS, seeded_study(TD_BIASED, MC_UNBIASED), gaps_with())[0]["measured"]
    gap = np.subtract(TD_BIASED, MC_UNBIASED)
    mean, low, high = common.mean_interval(gap)
    assert f"bias² λ=0 minus λ=1 {mean:+.3g} [{low:+.3g}, {high:+.3g}]" in measured
    assert "over 4 seeds" in measured and "λ=0 has bias² 0.001:" in measured  # the exact critic's, raw


def test_claims_td_vs_mc_is_skipped_without_both_estimators():
    args = gae_script.Args(lambdas="0,0.5")  # no λ = 1
    claims = gae_script.estimator_claims(args, seeded_study(TD_BIASED, MC_UNBIASED), gaps_with())
    assert len(claims) == 1 and "reduces to the Monte Carlo" in claims[0]["claim"]


@pytest.mark.parametrize("changes,holds", [
    ({}, True),  # every gap below 1e-4: GAE would be MC for every λ
    ({"exact_5": 0.3}, False),  # λ < 1 keeps bootstrapping on the exact critic
    ({"zero_9": 2e-4}, False),  # without a critic λ discounts
    ({"exact_10": 1e-3}, False),  # even λ = 1 off
])
def test_claims_gae_reduces_to_mc_verdict_is_computed_from_the_gaps(changes, holds):
    claim = gae_script.estimator_claims(CLAIM_ARGS, seeded_study(TD_BIASED, MC_UNBIASED), gaps_with(**changes))[-1]
    assert "reduces to the Monte Carlo" in claim["claim"] and claim["holds"] is holds


def test_claims_gae_vs_mc_reports_the_largest_gap_below_lambda_one():
    gaps = {"exact V": {0.0: 0.3, 0.5: 0.25, 1.0: 0.7}, "V = 0": {0.9: 0.46, 1.0: 0.0}}
    measured = gae_script.estimator_claims(CLAIM_ARGS, seeded_study(TD_BIASED, MC_UNBIASED), gaps)[-1]["measured"]
    assert "λ=1 7.0e-01" in measured and "λ<1 up to 0.30" in measured and "λ=0.9: 0.46" in measured


def test_estimator_table_has_a_row_per_estimator_with_both_critics_and_the_corridor_noise():
    at_L = {critic: {name: {"key_bias2": 1.0 + shift + i, "key_var": 2.0 + shift + i, "corridor_mse": 3.0 + shift + i}
                     for i, name in enumerate(("GAE λ=0", "2-step", "MC", "flat"))}
            for critic, shift in (("exact V", 0.0), ("noisy V", 10.0))}
    table = gae_script.estimator_table(at_L)
    assert table["header"] == ["estimator", "bias² exact V", "var exact V", "bias² noisy V", "var noisy V",
                               "corridor E[Ψ²]"]
    # in the study's order; the corridor column is the exact critic's
    assert table["rows"] == [["GAE λ=0", 1.0, 2.0, 11.0, 12.0, 3.0], ["2-step", 2.0, 3.0, 12.0, 13.0, 4.0],
                             ["MC", 3.0, 4.0, 13.0, 14.0, 5.0], ["flat", 4.0, 5.0, 14.0, 15.0, 6.0]]


# --------------------------------------------------------------------------------------------
# The whole run
# --------------------------------------------------------------------------------------------
def test_smoke_run_writes_results_and_figures(tmp_path, read_results):
    args = gae_script.Args(smoke=True, device="cpu", out=str(tmp_path))
    result = gae_script.main(args)
    data = read_results(tmp_path / "results.json")
    for name in ("bias_variance_lambda.png", "bias_variance_nstep.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert data["metrics"] == common.json_ready(result["metrics"]) and len(data["claims"]) == 3
    metrics = data["metrics"]
    tables = metrics.pop("tables")
    assert all(np.isfinite(v) for v in metrics.values())
    # with the exact critic TD(0) is exact at the key step; the noisy critic biases it
    L_min, L_max = min(common.apply_smoke(args).length_list), max(common.apply_smoke(args).length_list)
    assert set(tables) == {f"L{L_min}", f"L{L_max}"}  # the docs' tables, the longest L's as printed
    td = next(row for row in tables[f"L{L_max}"]["rows"] if row[0] == "GAE λ=0")
    assert td[1:5] == [metrics[f"L{L_max}[{critic}][GAE λ=0]_{metric}"]
                       for critic in ("exact V", "noisy V") for metric in ("key_bias2", "key_var")]
    assert metrics[f"L{L_max}[exact V][GAE λ=0]_key_bias2"] < 1e-10
    assert metrics[f"L{L_max}[exact V][GAE λ=0]_key_var"] < 1e-10
    assert metrics[f"L{L_max}[noisy V][GAE λ=0]_key_bias2"] > 1e-4
    verdict = {c["claim"]: c["holds"] for c in data["claims"]}
    assert verdict["with γ = 1, GAE with any λ reduces to the Monte Carlo return"] is False
