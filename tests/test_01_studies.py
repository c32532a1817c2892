"""01's studies: the gradient's variance against rally length (per-point gradients, tr Cov per
length bin, the claims, the tables), state blindness (the frame-only runs, the claim, the table)
and Atari Pong (Karpathy's preprocessing, the emulator behind Pong's interface); a smoke run of each."""

import copy
import dataclasses
import importlib
import math

import numpy as np
import pytest
import torch
from test_01_reinforce_pong import numbered_window, replay, tiny_args, tiny_policy

import common

pong = importlib.import_module("01_reinforce_pong")
grad_var = importlib.import_module("studies.01_gradient_variance")
blindness = importlib.import_module("studies.01_state_blindness")
atari = importlib.import_module("studies.01_atari_pong")


# ------------------------------------------------------------------------- gradient variance
def hand_points(lengths, gamma=0.8, seed=0):
    """Recorded points of the given lengths: random frames and actions, every third point lost."""
    g = torch.Generator().manual_seed(seed)
    points = []
    for i, length in enumerate(lengths):
        outcome = -1.0 if i % 3 == 0 else 1.0
        points.append({"inputs": torch.randint(-1, 2, (length, 2, 4, 4), generator=g).to(torch.int8),
                       "actions": torch.randint(0, 2, (length,), generator=g),
                       "flat": torch.full((length,), outcome),
                       "rtg": outcome * gamma ** torch.arange(length - 1, -1, -1.0)})
    return points


def autograd_point_gradient(policy, point, psi):
    """g = Σ_t Ψ_t ∇ log π(a_t|s_t) for one point, by backward on its own surrogate."""
    policy.zero_grad()
    logp = pong.log_prob(policy(point["inputs"].float()), point["actions"])
    (logp * psi).sum().backward()
    return torch.cat([p.grad.flatten() for p in policy.parameters()])


def test_per_point_gradients_match_a_loop_of_autograd():
    policy = tiny_policy()
    points = hand_points([2, 5, 3])
    psi = [pt["rtg"] - 0.3 for pt in points]
    got = grad_var.per_point_gradients(policy, points, psi)
    assert got.shape == (3, sum(p.numel() for p in policy.parameters()))
    for i, pt in enumerate(points):
        torch.testing.assert_close(got[i], autograd_point_gradient(policy, pt, psi[i]), rtol=1e-5, atol=1e-6)


# each estimator's Ψ_t - b by its definition, frame by frame: (Ψ, with the baseline)
VARIANCE_SETUPS = {"flat, no baseline": ("flat", False), "flat - mean": ("flat", True),
                   "rtg, no baseline": ("rtg", False), "rtg - mean": ("rtg", True)}


def test_estimator_gradients_are_each_credits_gradient_by_its_definition():
    """Two backward passes (the score sum and the reward-to-go's) give all four: against a
    backward on Σ_t (Ψ_t - b) log π per point, for flat credit won and lost."""
    policy, points, baselines = tiny_policy(), hand_points([2, 5, 3, 1]), {"flat": 0.4, "rtg": -0.2}
    got = grad_var.estimator_gradients(policy, points, baselines)
    assert set(got) == set(grad_var.VARIANCE_ESTIMATORS) == set(VARIANCE_SETUPS)
    for name, (key, with_baseline) in VARIANCE_SETUPS.items():
        for i, pt in enumerate(points):
            expected = autograd_point_gradient(policy, pt, pt[key] - (baselines[key] if with_baseline else 0.0))
            torch.testing.assert_close(got[name][i], expected, rtol=1e-5, atol=1e-6, msg=name)


def test_grouped_variance_is_the_trace_of_the_covariance_and_keeps_the_mean():
    g = torch.randn(50, 4, generator=torch.Generator().manual_seed(1)) + 3.0
    group = torch.arange(50) % 3
    variance = grad_var.GroupedVariance(3, 4)
    variance.add(g[:20], group[:20])  # added in two chunks, as the study does
    variance.add(g[20:], group[20:])
    # each chunk is summed in float32: the bound float32 sums over 30 vectors allow
    for k, got in enumerate(variance.per_group()):
        expected = np.trace(np.cov(g[group == k].numpy(), rowvar=False))
        assert math.isclose(got, expected, rel_tol=1e-5)
    assert math.isclose(variance.overall(), np.trace(np.cov(g.numpy(), rowvar=False)), rel_tol=1e-5)
    torch.testing.assert_close(variance.mean(), g.double().mean(0))
    assert variance.count.tolist() == [17, 17, 16]


def test_grouped_variance_keeps_its_sums_on_the_device_it_was_made_for():
    # "meta" stands in for a second device (a GPU) on a CPU-only machine: the per-point gradients
    # arrive there while the bins come from numpy, on the CPU
    variance = grad_var.GroupedVariance(3, 4, device="meta")
    variance.add(torch.empty(5, 4, device="meta"), torch.tensor([0, 1, 2, 0, 1]))
    assert variance.total.device.type == "meta" and variance.count.device.type == "meta"


def test_recorded_points_cut_a_window_into_complete_points_shortest_first(monkeypatch):
    # game 0 wins at frame 2, loses at frame 4 and is mid-point at the end; game 1 wins at frame 5
    window = numbered_window([[0, 0], [0, 0], [1, 0], [0, 0], [-1, 0], [0, 1]])
    made = replay(monkeypatch, window)
    args, policy = tiny_args(gamma=0.5), tiny_policy(16, 8)
    points = grad_var.recorded_points(args, policy, 21, 17, torch.device("cpu"))
    assert made[0].policy is policy and made[0].steps == 17 and made[0].env.generator.initial_seed() == 21
    expected = [(0, [3, 4], [-1.0, -1.0], [-0.5, -1.0]),
                (0, [0, 1, 2], [1.0, 1.0, 1.0], [0.25, 0.5, 1.0]),
                (1, [0, 1, 2, 3, 4, 5], [1.0] * 6, [0.5**k for k in range(5, -1, -1)])]
    assert len(points) == len(expected)
    for point, (game, frames, flat, rtg) in zip(points, expected):
        stamps = [10 * t + game for t in frames]
        assert point["actions"].tolist() == stamps
        assert point["inputs"][:, 0, 0, 0].tolist() == stamps and point["inputs"].shape[1:] == (2, 1, 1)
        torch.testing.assert_close(point["flat"], torch.tensor(flat))
        torch.testing.assert_close(point["rtg"], torch.tensor(rtg))


def test_length_bins_are_quantile_bins_numbered_densely():
    assert grad_var.length_bins(np.arange(1, 13), 4).tolist() == [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3]
    # equal quantiles merge: fewer bins than asked
    assert grad_var.length_bins(np.array([5] * 6 + [7] * 3 + [30]), 4).tolist() == [0] * 6 + [1] * 4
    # a quantile bin left empty (edges 1, 2, 7, 11, 12: nothing in [7, 11)) is not numbered
    assert grad_var.length_bins(np.array([1, 2, 3, 11, 11, 12]), 4).tolist() == [0, 1, 1, 2, 2, 2]
    # lengths need not come sorted
    assert grad_var.length_bins(np.array([12, 1, 6, 3]), 2).tolist() == [1, 0, 1, 0]


LENGTHS = [1, 1, 2, 2, 3, 3, 4, 4, 6, 6, 8, 8, 11, 11, 15, 15, 20, 20]


@pytest.mark.parametrize("baselines", [None, {"flat": 0.5, "rtg": -0.1}])
def test_gradient_variance_study_against_a_loop_over_points(monkeypatch, baselines):
    """Each estimator's per-point gradients (its Ψ, less the baseline where it has one: the one
    given, else the batch's mean Ψ over all frames), binned by rally length into 8 quantile bins,
    tr Cov per bin and overall, and the mean gradient."""
    points = hand_points(LENGTHS)
    asked = []

    def fake_recorded_points(args, policy, seed, frames, device):
        asked.append((args, policy, seed, frames, device))
        return points

    monkeypatch.setattr(grad_var, "recorded_points", fake_recorded_points)
    args, policy = tiny_args(), tiny_policy()
    study, means = grad_var.gradient_variance_study(args, policy, 9, 17, torch.device("cpu"), baselines, chunk=5)
    assert asked == [(args, policy, 9, 17, torch.device("cpu"))]
    bins = grad_var.length_bins(np.array(LENGTHS), 8).numpy()
    assert bins.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 7, 7]
    bin_mean = [np.mean(np.array(LENGTHS)[bins == k]) for k in range(8)]
    assert study["points"] == 18 and math.isclose(study["mean_length"], np.mean(LENGTHS))
    np.testing.assert_allclose(study["bin_mean_length"], bin_mean)
    own = {key: float(torch.cat([pt[key] for pt in points]).mean()) for key in ("flat", "rtg")}
    assert study["baseline"] == (baselines or own)
    for name, (key, with_baseline) in VARIANCE_SETUPS.items():
        b = study["baseline"][key] if with_baseline else 0.0
        grads = torch.stack([autograd_point_gradient(policy, pt, pt[key] - b) for pt in points]).double().numpy()
        by_length = [np.trace(np.cov(grads[bins == k], rowvar=False)) for k in range(8)]
        np.testing.assert_allclose(study[name]["by_length"], by_length, rtol=1e-4, err_msg=name)
        assert math.isclose(study[name]["total"], np.trace(np.cov(grads, rowvar=False)), rel_tol=1e-4), name
        assert math.isclose(study[name]["slope"], common.loglog_slope(bin_mean, by_length), rel_tol=1e-3, abs_tol=1e-6), name
        np.testing.assert_allclose(means[name].numpy(), grads.mean(0), rtol=1e-4, atol=1e-7, err_msg=name)
    assert study["flat - mean"]["total"] != study["flat, no baseline"]["total"]


def test_gradient_variance_study_needs_two_points(monkeypatch):
    monkeypatch.setattr(grad_var, "recorded_points", lambda *_: hand_points([3, 5]))
    study, means = grad_var.gradient_variance_study(tiny_args(), tiny_policy(), 0, 17, torch.device("cpu"))
    assert study["points"] == 2 and study["bin_mean_length"] == [3.0, 5.0]
    assert all(math.isfinite(study[name]["total"]) and means[name].isfinite().all() for name in VARIANCE_SETUPS)
    monkeypatch.setattr(grad_var, "recorded_points", lambda *_: hand_points([4]))
    study, means = grad_var.gradient_variance_study(tiny_args(), tiny_policy(), 0, 17, torch.device("cpu"))
    assert study["points"] == 1 and study["bin_mean_length"] == [] and math.isnan(study["mean_length"])
    for name in VARIANCE_SETUPS:
        assert math.isnan(study[name]["total"]) and study[name]["by_length"] == [] and math.isnan(study[name]["slope"])
        assert means[name].isnan().all() and len(means[name]) == sum(p.numel() for p in tiny_policy().parameters())


def test_batches_study_measures_each_batch_with_the_reference_baselines_along_its_gradient(monkeypatch):
    """The reference batch (seed + 20,000) sets the baselines and, per Ψ, the unit direction of its
    mean gradient without them; each measured batch (its own seed) uses both."""
    reference_means = {"flat, no baseline": torch.tensor([3.0, 4.0]), "flat - mean": torch.tensor([9.0, 9.0]),
                       "rtg, no baseline": torch.tensor([0.0, -2.0]), "rtg - mean": torch.tensor([9.0, 9.0])}
    calls = []

    def fake_study(setting, policy, seed, frames, device, baselines=None):
        calls.append((seed, frames, baselines))
        if baselines is None:
            return {"baseline": {"flat": 0.25, "rtg": 0.5}}, reference_means
        k = seed - 20_003
        return {"seed": seed}, {name: torch.tensor([k, 2.0 * k + i]) for i, name in enumerate(VARIANCE_SETUPS)}

    monkeypatch.setattr(grad_var, "gradient_variance_study", fake_study)
    args = grad_var.Args(seed=3, batches=2, variance_frames=11)
    study = grad_var.batches_study(args, "setting", "policy", "cpu")
    assert calls == [(20_003, 11, None), (20_004, 11, {"flat": 0.25, "rtg": 0.5}),
                     (20_005, 11, {"flat": 0.25, "rtg": 0.5})]
    assert study["reference"] == {"baseline": {"flat": 0.25, "rtg": 0.5}}
    for k, batch in enumerate(study["batches"], start=1):
        assert batch["seed"] == 20_003 + k
        # flat along (3, 4) / 5; rtg along (0, -1)
        expected = {"flat, no baseline": (3 * k + 4 * 2 * k) / 5, "flat - mean": (3 * k + 4 * (2 * k + 1)) / 5,
                    "rtg, no baseline": -(2 * k + 2), "rtg - mean": -(2 * k + 3)}
        assert batch["along_gradient"] == pytest.approx(expected)


def batch_of(slope=1.0, drop=(1.0, 0.5), bias=(0.0, 0.0), along=(1.0, 1.0), bins=4):
    """A hand-made measured batch: flat's slope, each Ψ's drop in tr Cov with the baseline, its
    mean gradient along the reference direction without the baseline and the change with it."""
    batch = {"bin_mean_length": [10.0 * (k + 1) for k in range(bins)], "points": 100, "mean_length": 20.0,
             "along_gradient": {}, "baseline": {"flat": 0.5, "rtg": 0.25}}
    for family, d, b, a in zip(("flat", "rtg"), drop, bias, along):
        without, with_ = grad_var.PAIRS[family]
        batch[without] = {"total": 10.0 + d, "slope": slope if family == "flat" else 0.2, "by_length": [1.0] * bins}
        batch[with_] = {"total": 10.0, "slope": 0.5, "by_length": [2.0] * bins}
        batch["along_gradient"] |= {without: a, with_: a + b}
    return batch


def batches_of(values, **fixed):
    """One batch per value of the one varied field (its name, its values)."""
    [(name, per_batch)] = values.items()
    return [batch_of(**{name: v}, **fixed) for v in per_batch]


def identities(flat=True, rtg=True):
    """score_identity's result per Ψ: zero (True), not (False) or not measured (None)."""
    return {family: {"states": 10, "largest_relative": 0.0 if zero else 0.5, "zero": zero}
            for family, zero in (("flat", flat), ("rtg", rtg))}


def verdicts(batches):
    return [c["holds"] for c in grad_var.variance_claims(batches, identities())]


def test_variance_claims_name_their_sources_and_show_the_intervals():
    claims = grad_var.variance_claims(batches_of({"slope": [0.9, 1.0, 1.1]}), identities())
    assert [c["source"] for c in claims] == ["over-long-generations, Why long generations make credit assignment hard",
                                             "whole-game §3", "whole-game §3"]
    assert claims[0]["claim"].startswith("with one terminal reward (Ψ_t = R on every frame), the policy gradient's")
    assert claims[1]["claim"].startswith("a baseline that does not depend on the action lowers the variance")
    assert claims[2]["claim"].startswith("a baseline that does not depend on the action adds no bias")
    half = common.t_quantile(2) * 0.1 / math.sqrt(3)
    assert f"1.00 [{1 - half:.2f}, {1 + half:.2f}]" in claims[0]["measured"]
    assert "over 3 batches" in claims[0]["measured"]
    assert "flat 11 -> 10, without minus with +1 [+1, +1]" in claims[1]["measured"]


@pytest.mark.parametrize("slopes,holds", [
    ([0.9, 1.0, 1.1], True),  # nearer linear than no growth or quadratic growth
    ([0.85, 0.9, 0.95], True),  # excludes 1, but roughly linear is what the statement says
    ([0.2, 0.25, 0.3], False),  # nearer no growth
    ([1.8, 1.9, 2.0], False),  # nearer quadratic
    ([-0.5, 0.5, 1.5], None),  # reaches across the band: cannot tell
    ([0.95, 1.0], True),
    ([1.0], None),  # no interval
    ([0.9, math.nan, 1.1], None),
])
def test_slope_claim_holds_where_the_interval_over_batches_is_roughly_linear(slopes, holds):
    assert verdicts(batches_of({"slope": slopes}))[0] is holds


def test_slope_claim_needs_three_length_bins_in_every_batch():
    batches = batches_of({"slope": [0.9, 1.0, 1.1]})
    batches[1] = batch_of(slope=1.0, bins=2)
    claim = grad_var.slope_claim(batches)
    assert claim["holds"] is None and "premise not met: a batch has fewer than 3 length bins" in claim["measured"]


@pytest.mark.parametrize("drops,holds", [
    ([(1.0, 0.5), (1.2, 0.6), (0.9, 0.4)], True),  # both Ψ: above 0
    ([(1.0, -0.5), (1.2, -0.6), (0.9, -0.4)], False),  # rtg's: the baseline raises it
    ([(1.0, 2.0), (1.2, -2.0), (0.9, 0.1)], None),  # rtg's cannot tell
    ([(1.0, 0.0), (1.2, -0.02), (0.9, -0.01)], None),  # rtg's: about 0, and no named size to rule out
])
def test_baseline_variance_claim_holds_if_the_baseline_lowers_both_variances(drops, holds):
    assert verdicts(batches_of({"drop": drops}))[1] is holds


@pytest.mark.parametrize("zeros,holds", [((True, True), True), ((True, False), False), ((None, True), None)])
def test_baseline_bias_claim_is_the_exact_identity_at_every_state(zeros, holds):
    """The verdict is score_identity's, whatever the batches' empirical comparison says."""
    batches = [batch_of(bias=(0.5 + k, 0.5), along=(a, a)) for k, a in enumerate((1.0, 1.2, 0.8))]
    claim = grad_var.baseline_bias_claim(batches, identities(*zeros))
    assert claim["holds"] is holds
    assert "flat (b = 0.5): largest ||Σ_a π b ∇log π|| / max_a ||b ∇log π|| over 10 states" in claim["measured"]


@pytest.mark.parametrize("along,blind", [((1.0, 1.2, 0.8), False), ((0.1, 1.2, -0.8), True)])
def test_baseline_bias_claim_says_where_the_empirical_test_cannot_detect_a_bias_of_the_gradients_size(along, blind):
    # along 1, 1.2, 0.8: half-width t·0.2/√3 = 0.50 below the mean 1; along 0.1, 1.2, -0.8: 2.5 above 0.17
    claim = grad_var.baseline_bias_claim([batch_of(along=(a, a)) for a in along], identities())
    assert ("cannot detect a bias of the gradient's size" in claim["measured"]) is blind


def full_score_sum(policy, inputs, baseline):
    """Σ_a π(a|s) b(s,a) ∇_θ log π(a|s) per state and max_a ||b ∇_θ log π(a|s)||, by backward over
    every parameter of a float64 copy of the policy (pong.log_prob), one state and action at a time."""
    policy = copy.deepcopy(policy).double()
    sums, sizes = [], []
    for s, x in enumerate(inputs.double()):
        terms = []
        for a in (0, 1):
            policy.zero_grad()
            pong.log_prob(policy(x[None]), torch.tensor([a])).sum().backward()
            score = torch.cat([p.grad.flatten() for p in policy.parameters()]).double()
            z = policy(x[None]).detach()[0]
            terms.append((torch.sigmoid(z if a else -z), baseline[s, a] * score))
        sums.append(sum(pi * t for pi, t in terms).norm())
        sizes.append(max(t.norm() for _, t in terms))
    return torch.stack(sums), torch.stack(sizes)


def tiny_states(count=12):
    policy = tiny_policy()
    with torch.no_grad():  # a policy far from 50/50, so that the two actions' terms differ
        policy.net[-1].weight.normal_(0, 3.0, generator=torch.Generator().manual_seed(1))
    inputs = torch.cat([pt["inputs"] for pt in hand_points([count // 2, count - count // 2])])
    return policy, inputs


@pytest.mark.parametrize("kind", ["constant", "state-dependent"])
def test_score_identity_is_zero_for_a_baseline_that_does_not_depend_on_the_action(kind):
    policy, inputs = tiny_states()
    logits = grad_var.state_logits(policy, [{"inputs": inputs}])
    b = 0.7 if kind == "constant" else torch.linspace(-2, 3, len(inputs))[:, None]
    identity = grad_var.score_identity(logits, b)
    assert identity["zero"] is True and identity["states"] == len(inputs)
    assert identity["largest_relative"] <= 4 * torch.finfo(torch.float64).eps  # float64 rounding only
    sums, sizes = full_score_sum(policy, inputs, torch.as_tensor(b, dtype=torch.float64).expand(len(inputs), 2))
    assert (sums / sizes).max() <= 1e-12  # the same over every parameter, by plain backward


def test_score_identity_is_not_zero_for_a_baseline_that_depends_on_the_action():
    """b(s, up) = 1, b(s, down) = 0: Σ_a π b ∇log π = π(up) ∇log π(up), π(up) times its term; the
    reduction to the logit gives the full gradient's relative size."""
    policy, inputs = tiny_states()
    logits = grad_var.state_logits(policy, [{"inputs": inputs}])
    b = torch.tensor([[0.0, 1.0]]).expand(len(inputs), 2)
    identity = grad_var.score_identity(logits, b)
    assert identity["zero"] is False
    sums, sizes = full_score_sum(policy, inputs, b.double())
    assert identity["largest_relative"] == pytest.approx(float((sums / sizes).max()), rel=1e-6)
    assert identity["largest_relative"] == pytest.approx(float(torch.sigmoid(logits.double()).max()), rel=1e-6)


def test_score_identity_is_not_measured_without_a_baseline():
    identity = grad_var.score_identity(torch.tensor([0.5, -1.0]), math.nan)
    assert identity["zero"] is None


def test_all_hold_is_yes_only_if_each_holds_and_no_if_one_fails():
    assert grad_var.all_hold([True, True]) is True
    assert grad_var.all_hold([True, None]) is None
    assert grad_var.all_hold([None, False]) is False
    assert grad_var.all_hold([]) is True


def test_the_measured_policy_has_the_chapters_hyperparameters_and_the_studys_budget():
    setting = grad_var.chapter_args(grad_var.Args(frames=123, seed=7))
    assert setting.frames == 123 and setting.seed == 7 and setting.num_envs == pong.Args().num_envs
    assert setting.gamma == pong.Args().gamma  # the chapter's γ by default: its numbers are unchanged
    assert grad_var.chapter_args(grad_var.Args(gamma=0.99)).gamma == 0.99
    smoke = grad_var.chapter_args(common.apply_smoke(grad_var.Args(smoke=True)))
    assert smoke.frames == grad_var.Args.SMOKE["frames"] and smoke.num_envs == pong.Args.SMOKE["num_envs"]


def test_gradient_variance_smoke_run(tmp_path, read_results):
    """The smoke run: strict JSON, finite numbers, the reference's baselines in every batch,
    ordered length bins, and the metrics, tables and verdicts its own batches give."""
    grad_var.main(grad_var.Args(smoke=True, device="cpu", out=str(tmp_path)))
    data = read_results(tmp_path / "results.json")
    assert (tmp_path / "gradient_variance.png").stat().st_size > 1000
    reference, batches = data["variance_study"]["reference"], data["variance_study"]["batches"]
    assert len(batches) == grad_var.Args.SMOKE["batches"]
    metrics = common.json_ready(grad_var.study_metrics(batches))
    assert data["metrics"] == metrics and all(math.isfinite(v) for k, v in metrics.items() if k != "tables")
    for batch in batches:
        bins = batch["bin_mean_length"]
        assert batch["baseline"] == reference["baseline"] and set(batch["along_gradient"]) == set(VARIANCE_SETUPS)
        assert batch["points"] >= 2 and 2 <= len(bins) <= 8 and all(a < b for a, b in zip(bins, bins[1:]))
        assert bins[0] < batch["mean_length"] < bins[-1]
        assert all(len(batch[name]["by_length"]) == len(bins) for name in VARIANCE_SETUPS)
    assert all(identity["zero"] for identity in data["score_identity"].values())
    assert data["claims"] == common.json_ready(grad_var.variance_claims(batches, data["score_identity"]))


def test_variance_tables_show_each_estimator_over_the_batches_and_the_first_batch_per_length_bin():
    batches = [batch_of(drop=(1224.5, 0.5)), batch_of(drop=(1244.5, 0.5))]
    batches[0] |= {"points": 12, "mean_length": 30.4, "bin_mean_length": [10.0, 50.0]}
    for k, name in enumerate(grad_var.VARIANCE_ESTIMATORS):
        batches[0][name]["by_length"] = [1.0 + k, 2.0 + k]
    tables = grad_var.variance_tables(batches)
    assert tables["estimators"]["header"][0] == "estimator (2 batches of 56 points, mean rally 25 frames)"
    half = common.t_quantile(1) * np.std([1234.5, 1254.5], ddof=1) / math.sqrt(2)
    assert tables["estimators"]["rows"][0] == [
        "flat, no baseline", "Ψ_t = R", f"1,244 [{1244.5 - half:,.0f}, {1244.5 + half:,.0f}]", "1.00 [1.00, 1.00]"]
    assert tables["estimators"]["rows"][1][:3] == ["flat - mean", "Ψ_t = R - b", "10 [10, 10]"]
    assert tables["by_length"]["header"] == ["rally length (bin mean, batch 1, 12 points)", *grad_var.VARIANCE_ESTIMATORS]
    assert tables["by_length"]["rows"] == [[10.0, "1", "2", "3", "4"], [50.0, "2", "3", "4", "5"]]
    assert [grad_var.variance_cell(v) for v in (0.01234, 999.4, 999.6, 1530.2)] == ["0.0123", "999", "1,000", "1,530"]


# --------------------------------------------------------------------------- state blindness
def blindness_claim(sighted, blind_rates):
    runs = {"win_rates_per_seed": {"rtg_baseline": sighted},
            "frames_to_70pct_per_seed": {"rtg_baseline": [1e6] * len(sighted)}}
    blind = {"win_rates": blind_rates, "frames_to_70pct": [3e6] + [math.nan] * (len(blind_rates) - 1)}
    [claim] = blindness.blindness_claims(runs, blind)
    return claim


@pytest.mark.parametrize("sighted,blind_rates,holds", [
    ([0.80, 0.75, 0.78], [0.70, 0.66, 0.69], True),  # the gap, per seed, 0.10, 0.09, 0.09: above 0
    ([0.80, 0.75, 0.78], [0.81, 0.76, 0.78], None),  # -0.01, -0.01, 0: the interval reaches above 0
    ([0.80, 0.75, 0.78], [0.70, 0.80, 0.70], None),  # 0.10, -0.05, 0.08: cannot tell
    ([0.80, 0.75, 0.78], [0.85, 0.80, 0.83], False),  # the frame alone does better
    ([0.80], [0.70], None),  # one seed: no interval
])
def test_blindness_claim_decides_on_the_gap_per_seed(sighted, blind_rates, holds):
    claim = blindness_claim(sighted, blind_rates)
    assert claim["holds"] is holds and claim["source"] == "whole-game §7.1"
    assert common.seed_verdict(np.subtract(sighted, blind_rates))[1] in claim["measured"]


def test_blindness_claim_shows_the_detectable_gap_and_every_seed():
    claim = blindness_claim([0.80, 0.75, 0.78], [0.70, 0.66, 0.69])
    half = common.t_quantile(2) * np.std([0.10, 0.09, 0.09], ddof=1) / math.sqrt(3)
    assert f"smallest gap the seeds can detect {half:.3f}" in claim["measured"]
    assert "over 3 seeds" in claim["measured"] and "frame only 0.700, 0.660, 0.690" in claim["measured"]
    assert "with the difference 0.800, 0.750, 0.780" in claim["measured"]
    assert "frame only 3,000,000, never (in budget)" in claim["measured"]


def test_state_blindness_study_trains_each_seed_on_its_budget():
    args = dataclasses.replace(common.apply_smoke(pong.Args(smoke=True, device="cpu")), seeds=2)
    blind = blindness.state_blindness_study(args, torch.device("cpu"))
    per_update = args.num_envs * args.window_len
    assert [c["frames"][-1] for c in blind["curves"]] == [args.frames // per_update * per_update] * 2
    assert len(blind["win_rates"]) == 2 and all(0 <= r <= 1 for r in blind["win_rates"])
    assert blind["final"] == {"win_rate": np.mean(blind["win_rates"]), "worst_seed": min(blind["win_rates"]),
                              "frames_to_70pct": pytest.approx(np.median(blind["frames_to_70pct"]), nan_ok=True)}


def test_state_blindness_smoke_run(tmp_path, read_results):
    """The smoke run: strict JSON, finite numbers, both inputs trained, and its own verdict."""
    blindness.main(blindness.Args(smoke=True, device="cpu", out=str(tmp_path)))
    data = read_results(tmp_path / "results.json")
    assert (tmp_path / "learning_curves.png").stat().st_size > 1000
    for key in ("rtg_baseline_win_rate", "rtg_baseline_worst_seed", "rtg_baseline_frame_only_win_rate"):
        assert math.isfinite(data["metrics"][key]), key
    [verdict] = data["claims"]
    def unwritten(frames):  # JSON's null back to NaN: never reached 70%
        return [math.nan if f is None else f for f in frames]

    runs = {"win_rates_per_seed": data["win_rates_per_seed"],
            "frames_to_70pct_per_seed": {"rtg_baseline": unwritten(data["frames_to_70pct_per_seed"]["rtg_baseline"])}}
    blind = dict(data["state_blindness"], frames_to_70pct=unwritten(data["state_blindness"]["frames_to_70pct"]))
    assert verdict == common.json_ready(blindness.blindness_claims(runs, blind)[0])
    metrics = data["metrics"]
    assert metrics["tables"]["inputs"]["rows"] == [
        [name, metrics[f"{key}_win_rate"], metrics[f"{key}_worst_seed"],
         pong.frames_text(math.nan if metrics[f"{key}_frames_to_70pct"] is None else metrics[f"{key}_frames_to_70pct"])]
        for name, key in (("[frame, difference]", "rtg_baseline"), ("[frame, 0]", "rtg_baseline_frame_only"))]


# -------------------------------------------------------------------------------- Atari Pong
def synthetic_atari_frame():
    frame = np.zeros((210, 160, 3), dtype=np.uint8)
    frame[..., 0] = 144  # background
    frame[24:34, :, 0] = 236  # the top border, cropped away
    frame[100:116, 140:144, 0] = 92  # the agent's paddle
    frame[60:64, 80:82, 0] = 236  # the ball
    frame[120:124, 20:22, 0] = 109  # second background colour
    return frame


def test_preprocess_atari_crops_downsamples_and_binarises():
    x = atari.preprocess_atari(synthetic_atari_frame()[None])
    assert x.shape == (1, 80, 80) and x.dtype == torch.float32
    expected = torch.zeros(80, 80)
    # output pixel (i, j) is input (35 + 2i, 2j)
    expected[33:41, 70:72] = 1  # paddle rows 101, 103, ..., 115 and columns 140, 142
    expected[13:15, 40] = 1  # ball rows 61, 63 and column 80
    torch.testing.assert_close(x[0], expected)


def test_ale_pong_plays_karpathys_two_actions_and_reports_points():
    pytest.importorskip("ale_py")
    pytest.importorskip("gymnasium")
    env = atari.AtariPong(2, seed=0)
    assert env.size == 80 and env.envs.metadata["autoreset_mode"].name == "SAME_STEP"  # like Pong's resets

    def agent_paddle_row(frame):  # the agent's paddle: columns 140-143 of 160
        return torch.nonzero(frame[:, 70:72].any(1)).float().mean().item()

    def play(steps):
        obs, _ = env.reset()
        seen = [obs]
        for t in range(steps):
            obs, reward, terminated, truncated, info = env.step(torch.tensor([t % 3 == 0, t % 2 == 0]).long())
            assert reward.dtype == torch.float32 and torch.equal(info["point_over"], reward != 0)
            assert terminated.dtype == truncated.dtype == torch.bool and not (terminated | truncated).any()
            seen.append(obs)
        return torch.stack(seen)

    first = play(30)
    assert first.shape == (31, 2, 80, 80) and set(first.unique().tolist()) == {0.0, 1.0}
    assert torch.equal(play(30), first)  # reset() replays the seed it was made with
    env.reset()
    for t in range(100):
        obs, reward, *_ = env.step(torch.tensor([1, 0]))  # game 0 always up, game 1 always down
        if t == 20:
            assert agent_paddle_row(obs[0]) < 20 and agent_paddle_row(obs[1]) > 60
        if reward.any():
            break
    assert reward.tolist() == [-1.0, -1.0]  # a paddle parked at the edge loses the serve's point


def test_atari_study_takes_the_chapters_flags_but_not_the_torch_pongs():
    assert issubclass(atari.Args, pong.Args) and atari.Args().out == "runs/studies/01_atari_pong"
    for changes in ({"size": 40}, {"opponent_speed": 0.5}):
        with pytest.raises(ValueError, match="the torch Pong"):
            atari.Args(**changes)


@pytest.mark.filterwarnings("ignore:std")  # a smoke window may end a single point: nothing to standardise
def test_atari_smoke_run(tmp_path, read_results):
    """The chapter's run, every game on the emulator: strict JSON, both figures, and the verdict
    its own curves give."""
    pytest.importorskip("ale_py")
    pytest.importorskip("gymnasium")
    atari.main(atari.Args(smoke=True, device="cpu", out=str(tmp_path)))
    data = read_results(tmp_path / "results.json")
    assert data["args"]["num_envs"] == 2 and set(data["curves"]) == set(pong.VARIANTS)
    for name in ("learning_curves.png", "who_gets_the_score.png"):
        assert (tmp_path / name).stat().st_size > 1000
    per_seed = {v: [math.nan if f is None else f for f in frames] for v, frames in data["frames_to_70pct_per_seed"].items()}
    assert data["claims"] == common.json_ready(pong.check_claims(per_seed))
