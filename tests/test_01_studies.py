"""01's studies: the gradient's variance against rally length (per-point gradients, tr Cov per
length bin, the claims, the tables), state blindness (the frame-only runs, the claim, the table)
and Atari Pong (Karpathy's preprocessing, the emulator behind Pong's interface); a smoke run of each."""

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


def autograd_point_gradient(policy, point, psi_key, baseline):
    """g = Σ_t (Ψ_t - b) ∇ log π(a_t|s_t) for one point, by backward on its own surrogate."""
    policy.zero_grad()
    logp = pong.log_prob(policy(point["inputs"].float()), point["actions"])
    (logp * (point[psi_key] - baseline)).sum().backward()
    return torch.cat([p.grad.flatten() for p in policy.parameters()])


def test_per_point_gradients_match_a_loop_of_autograd():
    policy = tiny_policy()
    points = hand_points([2, 5, 3])
    got = grad_var.per_point_gradients(policy, points, "rtg", baseline=0.3)
    assert got.shape == (3, sum(p.numel() for p in policy.parameters()))
    for i, pt in enumerate(points):
        torch.testing.assert_close(got[i], autograd_point_gradient(policy, pt, "rtg", 0.3), rtol=1e-5, atol=1e-6)


def test_grouped_variance_is_the_trace_of_the_covariance():
    g = torch.randn(50, 4, generator=torch.Generator().manual_seed(1)) + 3.0
    group = torch.arange(50) % 3
    variance = grad_var.GroupedVariance(3, 4)
    variance.add(g[:20], group[:20])  # added in two chunks, as the study does
    variance.add(g[20:], group[20:])
    for k, got in enumerate(variance.per_group()):
        expected = np.trace(np.cov(g[group == k].numpy(), rowvar=False))
        assert math.isclose(got, expected, rel_tol=1e-6)
    assert math.isclose(variance.overall(), np.trace(np.cov(g.numpy(), rowvar=False)), rel_tol=1e-6)


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


VARIANCE_SETUPS = {"flat, no baseline": ("flat", False), "flat - mean": ("flat", True),
                   "rtg, no baseline": ("rtg", False), "rtg - mean": ("rtg", True)}


def test_gradient_variance_study_against_a_loop_over_points(monkeypatch):
    """Each estimator's per-point gradients (its Ψ, less the mean Ψ over all frames where it has a
    baseline), binned by rally length into 8 quantile bins, tr Cov per bin and overall."""
    lengths = [1, 1, 2, 2, 3, 3, 4, 4, 6, 6, 8, 8, 11, 11, 15, 15, 20, 20]
    points = hand_points(lengths)
    asked = []

    def fake_recorded_points(args, policy, seed, frames, device):
        asked.append((args, policy, seed, frames, device))
        return points

    monkeypatch.setattr(grad_var, "recorded_points", fake_recorded_points)
    args, policy = tiny_args(), tiny_policy()
    study = grad_var.gradient_variance_study(args, policy, 9, 17, torch.device("cpu"), chunk=5)
    assert asked == [(args, policy, 9, 17, torch.device("cpu"))]
    bins = grad_var.length_bins(np.array(lengths), 8).numpy()
    assert bins.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 7, 7]
    bin_mean = [np.mean(np.array(lengths)[bins == k]) for k in range(8)]
    assert study["points"] == 18 and math.isclose(study["mean_length"], np.mean(lengths))
    np.testing.assert_allclose(study["bin_mean_length"], bin_mean)
    for name, (key, with_baseline) in VARIANCE_SETUPS.items():
        baseline = float(torch.cat([pt[key] for pt in points]).mean()) if with_baseline else 0.0
        grads = torch.stack([autograd_point_gradient(policy, pt, key, baseline) for pt in points]).double().numpy()
        by_length = [np.trace(np.cov(grads[bins == k], rowvar=False)) for k in range(8)]
        np.testing.assert_allclose(study[name]["by_length"], by_length, rtol=1e-4, err_msg=name)
        assert math.isclose(study[name]["total"], np.trace(np.cov(grads, rowvar=False)), rel_tol=1e-4), name
        assert math.isclose(study[name]["slope"], common.loglog_slope(bin_mean, by_length), rel_tol=1e-3, abs_tol=1e-6), name
    assert study["flat - mean"]["total"] != study["flat, no baseline"]["total"]


def test_gradient_variance_study_needs_two_points(monkeypatch):
    monkeypatch.setattr(grad_var, "recorded_points", lambda *_: hand_points([3, 5]))
    study = grad_var.gradient_variance_study(tiny_args(), tiny_policy(), 0, 17, torch.device("cpu"))
    assert study["points"] == 2 and study["bin_mean_length"] == [3.0, 5.0]
    assert all(math.isfinite(study[name]["total"]) for name in VARIANCE_SETUPS)
    monkeypatch.setattr(grad_var, "recorded_points", lambda *_: hand_points([4]))
    study = grad_var.gradient_variance_study(tiny_args(), tiny_policy(), 0, 17, torch.device("cpu"))
    assert study["points"] == 1 and study["bin_mean_length"] == [] and math.isnan(study["mean_length"])
    for name in VARIANCE_SETUPS:
        assert math.isnan(study[name]["total"]) and study[name]["by_length"] == [] and math.isnan(study[name]["slope"])


def study_of(slope=1.0, flat=(2.0, 1.0), rtg=(1.0, 0.5)):
    """A hand-made variance study: the flat-credit slope, and each (tr Cov without, with) the mean."""
    return {"flat, no baseline": {"total": flat[0], "slope": slope},
            "flat - mean": {"total": flat[1], "slope": 0.5},
            "rtg, no baseline": {"total": rtg[0], "slope": 0.2},
            "rtg - mean": {"total": rtg[1], "slope": 0.1}}


def verdicts(study):
    return [c["holds"] for c in grad_var.variance_claims(study)]


def test_variance_claims_name_their_sources():
    claims = grad_var.variance_claims(study_of())
    assert [c["source"] for c in claims] == ["over-long-generations, gradient variance", "whole-game §3"]
    assert claims[0]["claim"].startswith("variance of the terminal-reward estimator grows")
    assert claims[1]["claim"] == "a baseline reduces the variance of the policy gradient"
    assert "log-log slope 1.00" in claims[0]["measured"] and "2 -> 1" in claims[1]["measured"]


@pytest.mark.parametrize("slope,holds", [(1.0, True), (0.7, True), (1.3, True), (0.69, False), (1.31, False),
                                         (2.0, False), (math.nan, None)])
def test_variance_grows_linearly_claim_holds_only_for_a_slope_near_one(slope, holds):
    assert verdicts(study_of(slope=slope))[0] is holds


@pytest.mark.parametrize("flat,rtg,holds", [((2.0, 1.0), (1.0, 0.5), True), ((2.0, 2.0), (1.0, 0.5), False),
                                            ((2.0, 1.0), (1.0, 1.5), False), ((1.0, 3.0), (1.0, 0.5), False)])
def test_baseline_claim_holds_only_if_the_mean_lowers_both_variances(flat, rtg, holds):
    assert verdicts(study_of(flat=flat, rtg=rtg))[1] is holds


def test_the_measured_policy_has_the_chapters_hyperparameters_and_the_studys_budget():
    setting = grad_var.chapter_args(grad_var.Args(frames=123, seed=7))
    assert setting.frames == 123 and setting.seed == 7 and setting.num_envs == pong.Args().num_envs
    assert setting.gamma == pong.Args().gamma  # the chapter's γ by default: its numbers are unchanged
    assert grad_var.chapter_args(grad_var.Args(gamma=0.99)).gamma == 0.99
    smoke = grad_var.chapter_args(common.apply_smoke(grad_var.Args(smoke=True)))
    assert smoke.frames == grad_var.Args.SMOKE["frames"] and smoke.num_envs == pong.Args.SMOKE["num_envs"]


def test_gradient_variance_smoke_run(tmp_path, read_results):
    """The smoke run: strict JSON, finite numbers, ordered length bins, and the metrics and
    verdicts its own study gives."""
    grad_var.main(grad_var.Args(smoke=True, device="cpu", out=str(tmp_path)))
    data = read_results(tmp_path / "results.json")
    assert (tmp_path / "gradient_variance.png").stat().st_size > 1000
    tables = data["metrics"].pop("tables")
    assert all(math.isfinite(value) for value in data["metrics"].values())
    study = data["variance_study"]
    assert tables == common.json_ready(grad_var.variance_tables(study))
    bins = study["bin_mean_length"]
    assert study["points"] >= 2 and 2 <= len(bins) <= 8 and all(a < b for a, b in zip(bins, bins[1:]))
    assert bins[0] < study["mean_length"] < bins[-1]
    for name in grad_var.VARIANCE_ESTIMATORS:
        assert data["metrics"][f"grad_var[{name}]"] == study[name]["total"]
        assert len(study[name]["by_length"]) == len(bins)
    assert [c["holds"] for c in data["claims"]] == [c["holds"] for c in grad_var.variance_claims(study)]


def test_variance_tables_show_each_estimator_overall_and_per_length_bin():
    study = study_of(flat=(1234.5, 1.0)) | {"points": 12, "mean_length": 30.4, "bin_mean_length": [10.0, 50.0]}
    for k, name in enumerate(grad_var.VARIANCE_ESTIMATORS):
        study[name]["by_length"] = [1.0 + k, 2.0 + k]
    tables = grad_var.variance_tables(study)
    assert tables["estimators"]["header"][0] == "estimator (12 points, mean rally 30 frames)"
    assert tables["estimators"]["rows"][:2] == [["flat, no baseline", "Ψ_t = R", "1,234", 1.0],
                                                ["flat - mean", "Ψ_t = R - mean(R)", "1", 0.5]]
    assert tables["by_length"]["header"] == ["rally length (bin mean)", *grad_var.VARIANCE_ESTIMATORS]
    assert tables["by_length"]["rows"] == [[10.0, "1", "2", "3", "4"], [50.0, "2", "3", "4", "5"]]
    assert [grad_var.variance_cell(v) for v in (0.01234, 999.4, 999.6, 1530.2)] == ["0.0123", "999", "1,000", "1,530"]


# --------------------------------------------------------------------------- state blindness
def test_blindness_claim_holds_only_when_every_blind_seed_ends_below_every_sighted_one():
    runs = {"win_rates_per_seed": {"rtg_baseline": [0.80, 0.75]}, "frames_to_70pct_per_seed": {"rtg_baseline": [1e6, 2e6]}}
    blind = {"win_rates": [0.70, 0.74], "frames_to_70pct": [3e6, math.nan]}
    [verdict] = blindness.blindness_claims(runs, blind)
    assert verdict["holds"] is True and "0.740" in verdict["measured"] and "never" in verdict["measured"]
    assert blindness.blindness_claims(runs, {**blind, "win_rates": [0.70, 0.76]})[0]["holds"] is False


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
    blind_rates, sighted = data["state_blindness"]["win_rates"], data["win_rates_per_seed"]["rtg_baseline"]
    assert verdict["holds"] == (max(blind_rates) < min(sighted))
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
