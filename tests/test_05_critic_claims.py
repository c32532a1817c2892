"""studies/05_critic.py's measures and claims: the update's relative variance against a naive loop
and its known truth, the critic's errors and the step credit it hands out on hand cases (net of
the rollouts' noise: 0 for a perfect V), each claim's verdict over seeds on constructed values,
both ways and with its premise unmet, the tables, CLI checks and a --smoke run."""

import importlib
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import common
import lm_world
from lm_pins import hand_completions

ROOT = Path(__file__).resolve().parents[1]
grpo = importlib.import_module("05_grpo_rloo")
ppo = importlib.import_module("studies.05_critic")

NO_BASELINE, SCORE = "Ψ = R (no baseline)", "Ψ = 1 (the score alone)"
BASELINES = ("REINFORCE (batch mean)", "RLOO", "GRPO")
STAGES = ("cold start", "cold start, value head", "after PPO λ=0.95", "after PPO, value head")


# ------------------------------------------------------------------ measures
def naive_relative_variance(gradients: torch.Tensor, group_size: int) -> float:
    """tr Cov over prompts of each group's mean gradient, over the mean of h_p · h_q for p ≠ q."""
    h = [gradients[i:i + group_size].double().mean(0) for i in range(0, len(gradients), group_size)]
    mean = sum(h) / len(h)
    spread = sum(float((x - mean).square().sum()) for x in h) / (len(h) - 1)
    pairs = [float(a @ b) for i, a in enumerate(h) for j, b in enumerate(h) if i != j]
    return spread / (sum(pairs) / len(pairs))


def test_relative_variance_matches_a_loop_and_its_truth():
    g = torch.Generator().manual_seed(0)
    gradients = torch.randn(12, 3, generator=g) + torch.tensor([1.0, -2.0, 0.5])
    assert ppo.relative_variance(gradients, 3) == pytest.approx(naive_relative_variance(gradients, 3))
    # completions N(μ, I) in groups of G: h ~ N(μ, I/G), so the truth is 3 / (G ||μ||²); the plain
    # ||mean h||² in the denominator would read high by tr Cov(h) / P
    mu = torch.tensor([0.3, 0.0, -0.4])  # ||μ||² = 0.25
    gradients = torch.randn(40000, 3, generator=g) + mu
    assert ppo.relative_variance(gradients, 2) == pytest.approx(3 / (2 * 0.25), rel=0.05)
    # no signal: the estimate of ||E h||² is ≤ 0
    assert math.isnan(ppo.relative_variance(torch.tensor([[1.0, 2.0], [-1.0, -2.0]]), 1))


def test_one_token_marks_one_of_each_completions_tokens_uniformly():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]] * 2000)
    picked = ppo.one_token(mask, torch.Generator().manual_seed(0))
    assert picked.sum(1).tolist() == [1, 1, 0, 1] * 2000 and not (picked * (1 - mask)).any()
    share = picked.view(-1, 4, 4).float().mean(0)  # each row's choice, over its 2000 copies
    torch.testing.assert_close(share[0], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0]), atol=0.03, rtol=0)
    torch.testing.assert_close(share[3], torch.full((4,), 0.25), atol=0.03, rtol=0)


def test_every_over_one_matches_a_loop_and_is_t_where_the_terms_are_uncorrelated():
    """R_i Σ_{t < T_i} z_t against R_i z_τ, z ~ N(0, I_4) per token, R_i ∈ {0, 1} with P(R = 1) = 0.1 + T/100:
    Ψ = R's tr Cov, P(R = 1) · 4T, grows faster than T; over the one token's, P(R = 1) · 4, it is T."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 65, 6000)
    scores = rng.normal(size=(len(lengths), 64, 4)) * (np.arange(64)[None, :] < lengths[:, None])[..., None]
    rewards = (rng.random(len(lengths)) < 0.1 + lengths / 100).astype(float)[:, None]
    mask = torch.from_numpy(scores[..., 0] != 0).long()
    picked = ppo.one_token(mask, torch.Generator().manual_seed(0)).numpy()
    every, one = rewards * scores.sum(1), rewards * (picked[..., None] * scores).sum(1)
    variance = {name: ppo.variance_by_length(torch.from_numpy(g), mask.sum(1), 4)
                for name, g in ((ppo.BARE, every), (ppo.ONE_TOKEN, one))}
    naive = []
    for rows in ppo.length_bins(mask.sum(1), 4)[0]:
        e, o = every[rows.numpy()], one[rows.numpy()]
        naive.append(sum(((x - e.mean(0)) ** 2).sum() for x in e) / sum(((x - o.mean(0)) ** 2).sum() for x in o))
    ratio = ppo.every_over_one(variance)
    assert ratio == pytest.approx(naive)
    # 1 up to the noise of one token's variance over the few successes of the short bins (±0.15 over data seeds)
    assert common.loglog_slope(variance[ppo.BARE]["length"], ratio) == pytest.approx(1.0, abs=0.15)
    assert variance[ppo.BARE]["slope"] > 1.4
    # a bin where no completion scores has no ratio
    variance[ppo.ONE_TOKEN]["variance"][0] = 0.0
    assert math.isnan(ppo.every_over_one(variance)[0])


def test_net_error_is_zero_for_a_perfect_estimate_on_average():
    """Rollout estimates p̂ of K draws around a known p: the perfect V's net error averages to 0
    (its mean |error| minus the floor would not, near p = 0 or 1), a V off by 0.2 nets 0.04."""
    rng = np.random.default_rng(0)
    K, p = 16, np.tile([0.05, 0.3, 0.5, 0.9], 5000)
    measured = rng.binomial(K, p) / K
    noise = measured * (1 - measured) / (K - 1)
    assert ppo.net_error(p, measured, noise) == pytest.approx(0.0, abs=2e-4)
    assert ppo.net_error(p + 0.2, measured, noise) == pytest.approx(0.04, abs=5e-4)
    assert math.isnan(ppo.net_error(np.array([]), np.array([]), np.array([])))


def test_accuracy_and_step_credit_on_a_hand_case():
    """Completion 0: the prompt, then one step boundary, outcome 1; completion 1: the prompt alone,
    outcome 0. Step credit: V after minus V before, the outcome after the last step."""
    values, truth = np.array([0.5, 0.8, 0.3]), np.array([0.4, 1.0, 0.0])
    first, which, outcomes = np.array([True, False, True]), np.array([0, 0, 1]), np.array([1.0, 0.0])
    spread = np.array([0.24, 0.0, 0.0])
    measured = ppo.accuracy(values, truth, first, spread)
    assert measured["error_first_token"] == pytest.approx(0.2) and measured["error_boundaries"] == pytest.approx(0.2)
    assert measured["noise_floor"] == 0.0 and measured["net_error"] == pytest.approx(0.04)
    assert measured["bias"] == pytest.approx(0.2 / 3)
    credit = ppo.step_credit(values, truth, spread, which, outcomes)
    # by the critic [0.3, 0.2, -0.3], by the rollouts [0.6, 0.0, 0.0]; the first difference's noise 0.24
    assert credit["credit_error"] == pytest.approx(0.8 / 3)
    assert credit["credit_net_error"] == pytest.approx((0.09 - 0.24 + 0.04 + 0.09) / 3)


def test_the_rollouts_own_error_and_the_steps_per_completion_on_a_hand_case():
    """Noise at the boundaries only: p̂(1 - p̂)/(K - 1) at 16 rollouts, 0.1875/15 and 0; lines:
    the prefixes of each completion (3 and 1 on one seed, 2 and 2 on the other)."""
    row = {"truth": [0.5, 0.25, 1.0], "first_token": [True, False, False]}
    assert ppo.boundary_noise(ppo.Args(), row) == pytest.approx(0.1875 / 15 / 2)
    assert math.isnan(ppo.boundary_noise(ppo.Args(), {"truth": [0.5], "first_token": [True]}))
    per_seed = [{"critic_truth": {"cold start": {"completion": which}}} for which in ([0, 0, 0, 1], [0, 0, 1, 1])]
    assert ppo.steps_per_completion(per_seed, "cold start") == 2.0


# ------------------------------------------------------------------ verdicts over seeds
@pytest.mark.parametrize("slopes,holds", [
    ([1.0, 1.1, 0.9], True),  # nearer linear than no growth or quadratic growth
    ([0.44, 1.5, 2.55], None),  # the interval reaches across the band
    ([1.9, 2.0, 2.1], False),  # nearer quadratic
])
def test_the_roughly_linear_claims_read_each_seeds_slope_against_the_band(slopes, holds):
    names = ["Ψ = 1 (the score alone)", "Ψ = R (no baseline)"] + [ppo.grpo.NAMES[m] for m in ("reinforce", "rloo", "grpo")]
    per_seed = [{"gradient_variance": {name: {"slope": k, "length": [4.0, 30.0], "variance": [1.0, 1.0],
                                              "psi_square": [1.0, 1.0]} for name in names}} for k in slopes]
    score, bare, *_ = ppo.length_claims(per_seed)
    assert score["holds"] is holds and bare["holds"] is holds and "roughly linear: within 0.5-1.5" in score["measured"]


@pytest.mark.parametrize("slope,holds", [(1.0, True), (0.0, None), (-1.0, False)])
def test_the_baselines_claims_read_each_baselines_raw_slope_and_its_slope_per_unit_of_a_squared(slope, holds):
    """Each group baseline's own log-log slope of tr Cov on length decides the first (one seed jitter of
    0.01: a slope of 0 cannot be told from 0); the slope with the advantage's mean square divided out of
    each bin decides the second (here the mean square quadruples while tr Cov doubles: slope -1)."""
    found = verdicts(seeds(slopes={name: slope for name in BASELINES},
                           psi_square={name: [1.0, 4.0] for name in BASELINES}))
    raw, scaled = found["baselines"], found["baselines scaled"]
    assert raw["holds"] is holds and f"GRPO {common.seed_verdict(slope + np.array([-0.01, 0, 0.01]))[1]}" in raw["measured"]
    assert scaled["holds"] is False and "GRPO -1 [-1, -1]" in scaled["measured"]


def test_any_over_verdicts():
    assert ppo.any_of([None, True, False]) is True and ppo.any_of([False, False]) is False
    assert ppo.any_of([None, False]) is None and ppo.any_of([]) is None


def fake_seed(i: int, pass_at_1: dict | None = None, net: dict | None = None, slopes: dict | None = None,
              relative: dict | None = None, every_over_one: list | None = None, lines: int = 2,
              psi_square: dict | None = None, value_loss: tuple = (0.05, 0.045, 0.04, 0.035)) -> dict:
    """One seed's results as run_seed returns them, with a small seed-to-seed jitter: by default
    the critics are wrong and feed wrong credit, GRPO is ahead of both PPOs, every slope near 1,
    GRPO's relative variance below Ψ = R's, λ = 0.95's below λ = 1's; the truth study's two
    completions of `lines` lines each, every rollout estimate 0.5 (noise 0.25 / 15 at 16 rollouts);
    each PPO critic's loss over four updates `value_loss` (falling: its learning stable)."""
    jitter = 0.01 * (i - 1)
    pass_at_1 = {"grpo": 0.5, "ppo": 0.45, "ppo_head": 0.46} | (pass_at_1 or {})
    net = {stage: 0.1 for stage in STAGES} | (net or {})
    names = [SCORE, NO_BASELINE, *BASELINES, "critic GAE λ=1", "critic GAE λ=0.95"]
    slopes = {name: 1.0 for name in names} | (slopes or {})
    relative = dict(zip(names, [500.0, 100.0, 130.0, 130.0, 80.0, 250.0, 150.0])) | (relative or {})

    def run(method: str, p: float) -> dict:
        p += jitter if method == "grpo" else -jitter  # GRPO minus PPO: the default gap ± 0.02
        record = {"zero_spread": 0.25, "kl": 0.04, "length": 22.0, "length_right": 20.0, "length_wrong": 25.0}
        losses = [{"value_loss": loss * (1 + jitter)} for loss in value_loss] if method != "grpo" else [{}] * 4
        return {"final": {"pass@1": p, "pass@4": 0.8, "pass@16": 0.9, "length": 20.0}, "final_kl": 0.04,
                "history": [record | loss for loss in losses],
                "evals": [{"samples": 0, "pass@1": 0.4}, {"samples": 128, "pass@1": p}],
                "state_bytes": 2**21 if method == "ppo" else 2**20, "wall_clock_s": 10.0, "peak_memory_bytes": None}

    runs = {m: run(m, p) for m, p in pass_at_1.items()}
    truth = {stage: {"error_first_token": 0.2, "error_boundaries": 0.35, "noise_floor": 0.05, "net_error": n + jitter,
                     "credit_error": 0.3, "credit_net_error": n + jitter, "bias": 0.0, "correlation": 0.3,
                     "values": [0.5] * 2 * lines, "truth": [0.5] * 2 * lines,
                     "first_token": ([True] + [False] * (lines - 1)) * 2, "completion": [0] * lines + [1] * lines}
             for stage, n in net.items()}
    # Ψ's mean square per bin: 1 in both unless `psi_square` says otherwise (tr Cov over it: slope 1)
    square = {name: [1.0, 1.0] for name in names} | (psi_square or {})
    variance = {name: {"length": [5.0, 10.0], "variance": [1.0, 2.0], "count": [8, 8],
                       "slope": slopes[name] + jitter, "relative": relative[name] * (1 + jitter),
                       "psi_square": square[name]} for name in names}
    # R on one token: Ψ = R's tr Cov over it, 5 then 10 per bin (slope 1) unless `every_over_one` says otherwise
    ratio = np.array(every_over_one or [5.0, 10.0]) * (1 + jitter * np.array([0.0, 1.0]))
    variance[ppo.ONE_TOKEN] = {"length": [5.0, 10.0], "variance": list(np.array([1.0, 2.0]) / ratio), "count": [8, 8],
                               "slope": 0.0, "relative": 300.0}
    return {"seed": i, "rl": grpo.Args(), "cold_start": {"pass@1": 0.4, "pass@4": 0.7, "pass@16": 0.85},
            "runs": runs, "by_lambda": {0.95: runs["ppo"]}, "gradient_variance": variance, "critic_truth": truth,
            "token_credit": {"ppo_spread": {"mean": 0.3, "share_unequal": 1.0, "completions": 64},
                             "grpo_signal": {"length": [5.0, 10.0, 20.0], "snr": [0.04, 0.02, 0.01],
                                             "slope": -1.0 + jitter, "pooled": 0.02},
                             "focused_signal": {"length": [5.0, 10.0, 20.0], "snr": [0.08, 0.04, 0.02],
                                                "slope": -1.0, "pooled": 0.04 * (1 + jitter), "token_share": 0.4,
                                                "failed_token_share": 0.3},
                             "few_signal": {"length": [5.0, 10.0, 20.0], "snr": [0.06, 0.03, 0.015],
                                            "slope": -1.0, "pooled": 0.03 * (1 + jitter), "token_share": 0.3,
                                            "failed_token_share": 0.1}}}


def seeds(**changes) -> list[dict]:
    return [fake_seed(i, **changes) for i in range(3)]


def verdicts(per_seed: list[dict]) -> dict:
    claims = ppo.all_claims(ppo.Args(), per_seed)
    keys = {"the score alone (Ψ = 1) is a sum": "score", "with a terminal reward": "terminal",
            "because the same scalar R multiplies": "cause", "broadcast to every token gives high-variance": "broadcast",
            "even with baselines: under each group baseline the gradient's variance grows": "baselines",
            "read per unit of the advantage's size": "baselines scaled", "normalising within the group": "normalising",
            "bias-variance dial": "lambda", "memory footprint": "memory", "systematic lies": "lies",
            "prefer GAE": "prefer", "wrong, group baselines do at least as well as PPO with that critic: GRPO's held-out "
            "pass@1 is not below that of PPO (critic": "fallback critic", "wrong, group baselines do at least as well as "
            "PPO with that critic: GRPO's held-out pass@1 is not below that of PPO (value head": "fallback head",
            "loss grows over training, GRPO's held-out pass@1 is not below that of PPO (critic": "unstable critic",
            "loss grows over training, GRPO's held-out pass@1 is not below that of PPO (value head": "unstable head",
            "only a few actually matter": "few matter",
            "with PPO and a terminal reward, too": "same advantage", "the credit is diluted": "dilution",
            "the same advantage on the tokens that mattered": "focus", "the signal of the tokens that mattered (the decisive": "few",
            "the gradients are noisy": "noisy"}
    found = {key: c for c in claims for text, key in keys.items() if text in c["claim"]}
    assert len(found) == len(claims) == len(keys)
    return found


def test_each_claim_on_its_default_values():
    found = verdicts(seeds())
    assert {key: c["holds"] for key, c in found.items()} == {
        "score": True, "terminal": True, "cause": True, "broadcast": True, "baselines": True, "normalising": True, "lambda": True, "memory": True,
        "lies": True, "prefer": None, "fallback critic": True, "fallback head": None, "same advantage": False,
        "dilution": True, "focus": True, "few": True, "noisy": True, "baselines scaled": True, "unstable critic": None,
        "unstable head": None, "few matter": None}
    for key in ("unstable critic", "unstable head"):  # the critics' losses fall: stable, not the advice's case
        assert found[key]["measured"].startswith("premise not met: the critic's loss falls over training")
    assert found["few matter"]["measured"].startswith("premise not met: our completions are at most 48 tokens")
    assert "10%, 10%, 10% by seed" in found["few matter"]["measured"]
    assert found["prefer"]["measured"].startswith("premise not met: the critic is not one to trust (its error at "
                                                  "step boundaries, net of the rollouts' noise, is not 0); the "
                                                  "episodes are neither long nor semi-dense; PPO (critic")
    assert "cold start +0.1 [+0.0752, +0.125] (the rollouts' own error 0.0167)" in found["prefer"]["measured"]
    assert "cold start 2.00, after PPO λ=0.95 2.00 steps per completion on average" in found["prefer"]["measured"]
    gap = common.seed_verdict([0.03, 0.05, 0.07])[1]  # GRPO minus PPO, seed by seed
    assert f"GRPO's held-out pass@1 minus that of PPO (critic, GAE) at the same samples, mean [95% interval over 3 " \
           f"seeds]: {gap}" in found["fallback critic"]["measured"]


def test_the_length_claims_flip_with_their_slopes_and_relative_variances():
    found = verdicts(seeds(slopes={SCORE: 2.0, NO_BASELINE: 1.7, "RLOO": -1.0},
                           relative={"GRPO": 150.0, "critic GAE λ=0.95": 300.0}, every_over_one=[5.0, 5.0]))
    assert {key: found[key]["holds"] for key in ("score", "terminal", "cause", "baselines", "normalising", "lambda")} == {
        "score": False, "terminal": False, "cause": False, "baselines": False, "normalising": False, "lambda": False}
    assert verdicts(seeds(relative={"RLOO": 0.5}))["noisy"]["holds"] is False  # one baseline's signal outweighs its noise
    # one baseline that cannot tell leaves the claim open; with no signal, no verdict; no ratio on a seed, no verdict
    found = verdicts(seeds(slopes={"RLOO": 0.0}, relative={"GRPO": math.nan}, every_over_one=[math.nan, 5.0]))
    assert found["baselines"]["holds"] is None and found["normalising"]["holds"] is None
    assert found["cause"]["holds"] is None


def test_the_cause_claim_shows_the_first_seeds_bins_and_both_slopes():
    measured = verdicts(seeds(slopes={NO_BASELINE: 1.5}))["cause"]["measured"]
    assert "(seed 0: 5 tokens 5, 10 tokens 9.9)" in measured  # seed 0's jitter: the second ratio 1% low
    assert "mean [95% interval over 3 seeds]: 1.00 [0.96, 1.04] (roughly linear" in measured
    assert measured.endswith("the two slopes apart: Ψ = R 1.50 [1.48, 1.52], R on one token 0.00 [0.00, 0.00]")


def near_zero(per_seed: list[dict], errors: list[float]) -> list[dict]:
    """The PPO critic's net error at both of its stages, seed by seed."""
    for seed, error in zip(per_seed, errors):
        for stage in ("cold start", "after PPO λ=0.95"):
            seed["critic_truth"][stage]["net_error"] = error
    return per_seed


def test_a_trusted_critic_on_long_episodes_lets_the_gae_branch_decide():
    """Trusted: the net error's interval holds 0 and stays below the rollouts' own 0.0167; long:
    more lines than the essay's five."""
    found = verdicts(near_zero(seeds(pass_at_1={"ppo": 0.55}, lines=6), [-0.001, 0.0, 0.001]))
    assert found["prefer"]["holds"] is True and found["prefer"]["measured"].startswith("PPO (critic")
    assert "6.00 steps per completion" in found["prefer"]["measured"]
    assert verdicts(near_zero(seeds(lines=6), [-0.001, 0.0, 0.001]))["prefer"]["holds"] is False  # PPO behind: no


def test_a_trusted_critic_on_short_episodes_still_lacks_the_second_premise():
    found = verdicts(near_zero(seeds(pass_at_1={"ppo": 0.55}, lines=5), [-0.001, 0.0, 0.001]))
    assert found["prefer"]["holds"] is None
    assert found["prefer"]["measured"].startswith("premise not met: the episodes are neither long nor semi-dense; ")


def test_a_critic_shown_right_leaves_the_fallback_without_its_premise():
    found = verdicts(seeds(net={stage: -0.05 for stage in STAGES}))  # every interval below 0
    assert found["lies"]["holds"] is False
    assert found["fallback critic"]["holds"] is None
    assert found["fallback critic"]["measured"].startswith("premise not met: this critic's error is within")


def test_the_fallback_is_no_where_ppo_with_a_wrong_critic_leads():
    found = verdicts(seeds(pass_at_1={"ppo": 0.6, "ppo_head": 0.52}))
    assert found["fallback critic"]["holds"] is False
    assert found["fallback head"]["holds"] is None  # slightly ahead of GRPO: the seeds cannot tell


def test_a_critic_whose_loss_grows_is_unstable_and_then_the_fallback_decides():
    """The loss's last quarter against its first (one update each here): growing on every seed is
    the premise; then GRPO ahead of that PPO is yes, behind it no."""
    found = verdicts(seeds(value_loss=(0.03, 0.035, 0.04, 0.05)))
    assert found["unstable critic"]["holds"] is True and found["unstable critic"]["measured"].startswith("the critic's loss")
    assert "+0.667 [+0.667, +0.667]" in found["unstable critic"]["measured"]  # 0.05 / 0.03 - 1 on every seed
    behind = verdicts(seeds(value_loss=(0.03, 0.035, 0.04, 0.05), pass_at_1={"ppo": 0.6}))
    assert behind["unstable critic"]["holds"] is False
    unsure = verdicts(seeds(value_loss=(0.04, 0.05, 0.03, 0.04)))  # no change: whether it grows cannot be told
    assert unsure["unstable head"]["holds"] is None and unsure["unstable head"]["measured"].startswith("inconclusive")


def test_chains_as_long_as_the_essays_meet_the_few_tokens_premise_but_few_names_no_share():
    claim = ppo.few_matter_claim(ppo.Args(max_new_tokens=1000), seeds())
    assert claim["holds"] is None and "premise not met" not in claim["measured"]
    assert claim["measured"].endswith("'few' names no share to test it against")


def test_a_critic_that_cannot_be_told_right_or_wrong_leaves_both_branches_open():
    # the interval holds 0 and reaches past the rollouts' 0.0167
    found = verdicts(near_zero(seeds(lines=6), [-0.01, 0.02, 0.0]))
    assert found["prefer"]["holds"] is None and found["prefer"]["measured"].startswith("inconclusive")
    assert found["fallback critic"]["holds"] is None and found["fallback head"]["holds"] is None


def test_lies_need_both_a_wrong_v_and_wrong_credit_at_one_stage():
    per_seed = seeds()
    for seed in per_seed:
        for row in seed["critic_truth"].values():
            row["credit_net_error"] = -0.05  # the credit is right wherever V is wrong
    assert verdicts(per_seed)["lies"]["holds"] is False


# ------------------------------------------------------------------ metrics and tables
def test_the_metrics_are_the_mean_of_the_seeds():
    metrics = ppo.collect_metrics(seeds())
    assert metrics["grpo_pass@1"] == pytest.approx(0.5) and metrics["ppo_lambda0.95_pass@1"] == pytest.approx(0.45)
    assert metrics["critic[cold start]_net_error"] == pytest.approx(0.1)
    assert metrics["variance_slope[GRPO]"] == pytest.approx(1.0)
    assert metrics["variance_slope[R on one token only]"] == pytest.approx(0.0)


def test_the_tables_read_each_policy_each_psi_and_each_critic_over_the_seeds():
    per_seed = seeds()
    args = ppo.Args(gae_lambda=0.95)
    table = ppo.runs_table(args, per_seed)
    assert [row[0] for row in table["rows"]] == ["cold start", "GRPO", "PPO, critic, λ=0.95", "PPO, value head, λ=0.95"]
    assert table["rows"][1][:3] == ["GRPO", "+10.0", "0.500 [0.475, 0.525]"]
    assert table["rows"][2][3:] == [pytest.approx(0.9), pytest.approx(0.04), "25%", 2.0, 10.0]
    table = ppo.variance_table(per_seed)
    assert table["header"][-1] == "seed 0: tr Cov at mean length 5 / 10"
    assert table["rows"][1] == [NO_BASELINE, "1.00 [0.98, 1.02]", "100", "1 / 2"]
    table = ppo.truth_table(per_seed)
    assert [row[0] for row in table["rows"]] == list(STAGES)
    assert table["rows"][0][1:5] == [pytest.approx(0.2), pytest.approx(0.35), pytest.approx(0.05), "0.100 [0.075, 0.125]"]
    per_seed[0]["gradient_variance"] = {name: row | {"length": [], "variance": []}
                                        for name, row in per_seed[0]["gradient_variance"].items()}
    assert ppo.variance_table(per_seed)["header"][-1] == "tr Cov (no length bin)"
    assert ppo.three_digits(math.nan) == "-" and ppo.three_digits(20441.4) == "20,400"


# ------------------------------------------------------------------ CLI and a smoke run
@pytest.mark.parametrize("flag,value,message", [
    ("--truth-rollouts", "1", "--truth-rollouts must be at least 2"),
    ("--variance-prompts", "1", "--variance-prompts must be at least 2"),
    ("--seeds", "0", "--seeds must be positive"),
])
def test_cli_rejects_bad_values_with_one_line(cli_error, flag, value, message):
    assert message in cli_error("studies.05_critic", flag, value)


def test_the_critic_study_runs_with_smoke(tmp_path, read_results):
    out = tmp_path / "05_critic"
    run = subprocess.run([sys.executable, "studies/05_critic.py", "--smoke", "--cache", str(tmp_path / "cache"),
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    data = read_results(out / "results.json")
    tables = data["metrics"].pop("tables")
    for table in tables.values():
        assert all(len(row) == len(table["header"]) for row in table["rows"])
    # a smoke cold start never succeeds and writes no step: no slope, relative variance, critic error at a
    # boundary, correlation or right length
    undefined = ("variance_slope", "variance_relative", "correlation", "late_length_right", "error_boundaries",
                 "noise_floor", "]_net_error")
    assert all(v is not None for k, v in data["metrics"].items() if not any(u in k for u in undefined))
    assert [s["seed"] for s in data["per_seed"]] == [0, 1]
    assert set(data["per_seed"][0]["runs"]) == {"grpo", "ppo", "ppo_head", "ppo_lambda0.95"}
    assert "value_loss" in data["per_seed"][0]["runs"]["ppo"]["history"][0]
    assert [row[0] for row in tables["critic_truth"]["rows"]] == list(data["per_seed"][0]["critic_truth"])
    assert tables["runs"]["rows"][1][2].startswith(f"{data['metrics']['grpo_pass@1']:.3f} [")
    assert len(data["claims"]) == 21
    # --reanalyse: the same claims again from what the run stored, nothing trained
    assert ppo.main(ppo.Args(reanalyse=str(out / "results.json")))["claims"] == data["claims"]
    variance = data["per_seed"][0]["gradient_variance"]
    assert variance[ppo.ONE_TOKEN]["length"] == variance[NO_BASELINE]["length"]
    for name in ("learning_curves.png", "gradient_variance.png", "critic_truth.png"):
        assert (out / name).stat().st_size > 1000


def test_advantage_spread_is_each_completions_largest_minus_smallest_over_its_tokens():
    advantages = torch.tensor([[0.5, 0.5, 0.5, 9.0], [0.1, -0.3, 0.0, 0.0], [7.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])  # the padding's 9 and 7 are not tokens
    torch.testing.assert_close(ppo.advantage_spread(advantages, mask), torch.tensor([0.0, 0.4, 0.0]))


def test_same_advantage_under_ppo_is_no_where_any_completions_tokens_differ():
    per_seed = seeds()
    assert verdicts(per_seed)["same advantage"]["holds"] is False
    for seed in per_seed:
        seed["token_credit"]["ppo_spread"] = {"mean": 0.0, "share_unequal": 0.0, "completions": 64}
    assert verdicts(per_seed)["same advantage"]["holds"] is True


def test_signal_by_length_projects_on_the_other_halfs_direction():
    """Two prompts of two completions: each half's projection is on the other half's mean gradient."""
    gradients = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [0.0, 2.0]] * 4)  # prompts 0..7, G = 2
    lengths = torch.tensor([4, 4, 4, 4] * 2 + [16, 16, 16, 16] * 2)
    found = ppo.signal_by_length(gradients, lengths, group_size=2, bins=2)
    # halves: even prompts hold rows [1,0],[3,0]; odd prompts [0,2],[0,2]; directions (2,0) and (0,2)
    # even rows project on (0,1): 0, so no signal (NaN); odd rows on (1,0): 0 as well
    assert found["length"] == [4.0, 16.0] and all(math.isnan(r) for r in found["snr"])
    aligned = torch.tensor([[1.0, 1.0], [3.0, 3.0]] * 8)
    found = ppo.signal_by_length(aligned, lengths, group_size=2, bins=2)
    # a bin's 8 projections alternate c and 3c: mean 2c, variance 8c²/7 (n - 1), so the ratio is 4 / (8/7);
    # all 16 together: variance 16c²/15, so 4 / (16/15)
    assert found["snr"] == pytest.approx([3.5, 3.5]) and found["pooled"] == pytest.approx(3.75)


@pytest.mark.parametrize("slopes,holds", [((-1.0, -0.9, -1.1), True), ((0.5, 0.6, 0.4), False), ((-1.0, 1.0, 0.0), None)])
def test_the_dilution_claim_reads_each_seeds_slope(slopes, holds):
    per_seed = seeds()
    for seed, slope in zip(per_seed, slopes):
        seed["token_credit"]["grpo_signal"]["slope"] = slope
    assert verdicts(per_seed)["dilution"]["holds"] is holds


@pytest.mark.parametrize("mask,expected", [
    # right (every token, EOS too); wrong in line 1; a bare wrong answer (line 0); stopped short after a right
    # first line (its last line); cut off mid-line (that line)
    ("mattered", ["3+4=7\n7*2=14\n#14<eos>", "7*2=15\n", "#9<eos>", "3+4=7<eos>", "7*"]),
    # the same, narrowed in a failed completion to its result (after the line's "="); lines without "=" whole
    ("decisive", ["3+4=7\n7*2=14\n#14<eos>", "15\n", "#9<eos>", "7<eos>", "7*"]),
])
def test_the_tokens_that_mattered_in_each_completion(mask, expected):
    """Gold "3+4=7\n7*2=14\n#14", the first text right, the others failed."""
    texts = ["3+4=7\n7*2=14\n#14", "3+4=7\n7*2=15\n#15", "#9", "3+4=7", "3+4=7\n7*"]
    problem = lm_world.ChainProblem(3, (("+", 4), ("*", 2)))
    completions = hand_completions([problem.prompt] * 5, texts, cut=[False] * 4 + [True])
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])
    focus = getattr(ppo, mask)(lm_world.make_char_tokenizer(), completions, [problem] * 5, rewards)
    chars = [[*t] + ["<eos>"] * (i < 4) for i, t in enumerate(texts)]
    marked = ["".join(c for c, f in zip(row, focus[i].tolist()) if f) for i, row in enumerate(chars)]
    assert marked == expected
    assert not (focus * ~completions.completion_mask).any()


@pytest.mark.parametrize("ratios,holds", [((5.0, 10.0), True), ((0.2, 0.5), False), ((0.5, 2.0), None)])
def test_the_broadcast_claim_reads_the_mean_log_of_every_over_one(ratios, holds):
    found = verdicts(seeds(every_over_one=list(ratios)))["broadcast"]
    assert found["holds"] is holds
    # each seed's mean log over its two bins (`fake_seed`'s jitter moves the second ratio by -1%, 0, +1%)
    logs = [np.log(np.array(ratios) * [1.0, 1.0 + j]).mean() for j in (-0.01, 0.0, 0.01)]
    assert "per seed " + ", ".join(f"{x:+.3g}" for x in logs) + ", mean" in found["measured"]


@pytest.mark.parametrize("pooled,holds", [((0.03, 0.031, 0.029), True), ((0.01, 0.011, 0.009), False),
                                          ((0.01, 0.03, 0.02), None), ((math.nan, 0.03, 0.03), None)])
def test_the_focus_claim_reads_each_seeds_log_of_focused_over_broadcast(pooled, holds):
    """Broadcast 0.02 on every seed, focused as given (NaN: no signal on that seed)."""
    per_seed = seeds()
    for seed, value in zip(per_seed, pooled):
        seed["token_credit"]["focused_signal"]["pooled"] = value
    found = verdicts(per_seed)["focus"]
    assert found["holds"] is holds and "40%, 40%, 40% of the tokens, 30%, 30%, 30% of a failed" in found["measured"]


@pytest.mark.parametrize("pooled,holds", [((0.03, 0.031, 0.029), True), ((0.01, 0.011, 0.009), False),
                                          ((0.01, 0.03, 0.02), None)])
def test_few_tokens_compares_credit_on_the_decisive_tokens_with_the_broadcast(pooled, holds):
    """Broadcast 0.02 on every seed; A_i on the decisive tokens as given (the focus claim's set is not read)."""
    per_seed = seeds()
    for seed, value in zip(per_seed, pooled):
        seed["token_credit"]["few_signal"]["pooled"] = value
        seed["token_credit"]["focused_signal"]["pooled"] = 1.0
    found = verdicts(per_seed)["few"]
    assert found["holds"] is holds and "the tokens after its '='" in found["measured"]
    assert "30%, 30%, 30% of the tokens, 10%, 10%, 10% of a failed completion's, by seed" in found["measured"]
