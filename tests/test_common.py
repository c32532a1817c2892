"""common.py: each helper against a naive loop or a hand-computed case."""

import dataclasses
import json
import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import common


@dataclasses.dataclass
class ToyArgs:
    seed: int = common.arg(0, "random seed")
    learning_rate: float = common.arg(0.1, "step size")
    name: str = common.arg("a", "which one", choices=("a", "b"))
    smoke: bool = common.arg(False, "tiny run")

    SMOKE = dict(learning_rate=0.5)

    def __post_init__(self):
        common.require(self.learning_rate > 0, f"--learning-rate must be positive, got {self.learning_rate}")


def test_cli_uses_dashes_types_and_defaults():
    args = common.parse_args(ToyArgs, ["--learning-rate", "0.25", "--name", "b", "--smoke"])
    assert args == ToyArgs(seed=0, learning_rate=0.25, name="b", smoke=True)
    assert common.parse_args(ToyArgs, []) == ToyArgs()
    assert common.parse_args(ToyArgs, ["--no-smoke"]).smoke is False


def test_cli_help_lists_each_field_with_its_help(capsys):
    with pytest.raises(SystemExit) as stop:
        common.parse_args(ToyArgs, ["--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    for flag, help_text in [("--learning-rate", "step size"), ("--seed", "random seed"),
                            ("--smoke", "tiny run")]:
        assert flag in text and help_text in text


def test_cli_rejects_bad_value_with_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        common.parse_args(ToyArgs, ["--learning-rate", "-1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--learning-rate must be positive, got -1.0" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv,message", [
    (["--name", "c"], "invalid choice: 'c'"),
    (["--seed", "1.5"], "argument --seed: expected an integer, got '1.5'"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_cli_rejects_bad_flags_with_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        common.parse_args(ToyArgs, argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err


def test_require_positive_names_the_flag():
    common.require_positive(ToyArgs(), "learning_rate")
    bad = ToyArgs()
    bad.learning_rate = 0.0
    with pytest.raises(ValueError, match="--learning-rate must be positive, got 0.0"):
        common.require_positive(bad, "learning_rate")


def test_apply_smoke_only_when_asked_and_never_over_a_flag_you_passed():
    assert common.apply_smoke(ToyArgs()) == ToyArgs()
    assert common.apply_smoke(ToyArgs(smoke=True)).learning_rate == 0.5
    assert common.apply_smoke(ToyArgs(smoke=True, learning_rate=0.25)).learning_rate == 0.25
    parsed = common.parse_args(ToyArgs, ["--smoke", "--learning-rate", "0.3"])
    assert common.apply_smoke(parsed).learning_rate == 0.3


@dataclasses.dataclass
class ListArgs:
    sizes: str = common.arg("1,2", "sizes", item=int)
    rates: str = common.arg("0.5", "rates", item=float, bounds=None)
    names: str = common.arg("a,b", "names", ("a", "b", "c"), item=str)
    extra: str = common.arg("", "optional extras", item=float, empty=True)
    scale: float = common.arg(1.0, "a float")
    seed: int = common.arg(0, "seed", bounds=common.SEED_BOUNDS)


@pytest.mark.parametrize("argv,message", [
    (["--sizes", ""], "argument --sizes: expected a comma-separated list of integers, got ''"),
    (["--sizes", "1,,2"], "argument --sizes: expected an integer, got ''"),
    (["--sizes", "1,x"], "argument --sizes: expected an integer, got 'x'"),
    (["--rates", "0.1,nan"], "argument --rates: must be a finite number, got 'nan'"),
    (["--names", "a,d"], "argument --names: 'd' is not one of a, b, c"),
    (["--scale", "inf"], "argument --scale: must be a finite number, got 'inf'"),
    (["--scale=-inf"], "argument --scale: must be a finite number"),
    (["--scale", "nan"], "argument --scale: must be a finite number"),
    (["--seed", "-1"], "argument --seed: must be in 0..4294967295, got '-1'"),
    (["--seed", str(2**32)], "argument --seed: must be in 0..4294967295"),
])
def test_list_float_and_bounded_flags_are_checked_in_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        common.parse_args(ListArgs, argv)
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and err.count("\n") == 0 and message in err


def test_list_flags_parse_and_may_be_empty_where_allowed():
    args = common.parse_args(ListArgs, ["--sizes", " 3, 4", "--extra", "", "--seed", str(2**32 - 1)])
    assert common.as_list(args.sizes, int) == [3, 4] and common.as_list(args.extra, float) == []
    assert common.as_list(args.names, str) == ["a", "b"] and args.seed == 2**32 - 1
    common.seed_everything(args.seed + 5)  # derived seeds past 2^32 - 1 still seed every generator


def test_seed_everything_repeats_all_three_generators():
    def draw():
        import random
        return random.random(), np.random.rand(), torch.rand(1).item()

    common.seed_everything(3)
    first = draw()
    common.seed_everything(3)
    assert draw() == first
    common.seed_everything(4)
    assert draw() != first


def test_resolve_device():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert common.resolve_device("auto").type == expected
    assert common.resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("name,message", [
    ("gpu-please", "is not a torch device"), ("tpu", "is not a torch device"), ("meta", "cannot run on it"),
    ("mps", "cannot run on it"), ("xpu", "cannot run on it"), ("cuda:99", "cannot run on it"),
])
def test_a_device_this_machine_lacks_stops_in_one_line(capsys, name, message):
    if name in ("mps", "xpu") and common._available(torch.device(name)):
        pytest.skip(f"this machine has {name}")
    with pytest.raises(SystemExit) as stop:
        common.resolve_device(name)
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and err.count("\n") == 0 and message in err


def test_an_out_folder_that_cannot_be_made_stops_in_one_line(tmp_path, capsys):
    (tmp_path / "a_file").write_text("x")
    for bad in (tmp_path / "a_file", tmp_path / "a_file" / "below"):
        with pytest.raises(SystemExit) as stop:
            common.make_out_dir(bad)
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and err.count("\n") == 0 and "cannot make a folder there" in err


def test_make_out_dir_and_write_results(tmp_path):
    out = common.make_out_dir(tmp_path / "a" / "b")
    assert out.is_dir()
    claims = [common.claim("essay §1", "x is small", "x = 0.1", True)]
    metrics = {"np_float": np.float32(0.5), "tensor": torch.tensor(2.0), "array": np.arange(2)}
    path = common.write_results(out, ToyArgs(), 1.5, metrics, claims, curve=[1, 2])
    data = json.loads(path.read_text())
    assert data["args"] == dataclasses.asdict(ToyArgs())
    assert data["wall_clock_s"] == 1.5
    assert data["metrics"] == {"np_float": 0.5, "tensor": 2.0, "array": [0, 1]}
    assert data["claims"] == [{"source": "essay §1", "claim": "x is small", "measured": "x = 0.1",
                               "holds": True}]
    assert data["curve"] == [1, 2]


def test_results_are_strict_json_with_null_for_undefined_numbers(tmp_path, read_results):
    metrics = {"nan": float("nan"), "inf": np.float64("inf"), "tensor_nan": torch.tensor(float("nan")),
               "nested": {np.int64(3): [1.0, float("-inf")]}, "fine": 0.25}
    path = common.write_results(tmp_path, ToyArgs(), 1.0, metrics, [])
    data = read_results(path)  # fails on a bare NaN or Infinity
    assert data["metrics"] == {"nan": None, "inf": None, "tensor_nan": None, "nested": {"3": [1.0, None]},
                               "fine": 0.25}
    with pytest.raises(TypeError, match="cannot write object"):
        common.write_results(tmp_path, ToyArgs(), 1.0, {"x": object()}, [])
    assert read_results(path) == data  # a failed write leaves the last whole file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_write_atomically_leaves_the_old_file_or_the_new_one(tmp_path):
    path = tmp_path / "f.txt"
    common.write_atomically(path, lambda temporary: temporary.write_text("old"))

    def stopped_half_way(temporary):
        temporary.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        common.write_atomically(path, stopped_half_way)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_format_table_aligns_columns():
    text = common.format_table([["a", 0.123456], ["long name", 12.0]], ["name", "value"])
    lines = text.splitlines()
    assert lines[0].startswith("name ") and set(lines[1]) <= {"-", " "}
    assert "0.123" in lines[2] and "0.1234" not in lines[2]
    assert lines[2].index("0.123") == lines[3].index("12")


def test_a_wide_table_is_split_into_parts_that_fit_and_each_repeats_the_key():
    header = ["name", *[f"column{i}" for i in range(30)]]
    rows = [["first", *range(30)], ["second", *range(30, 60)]]
    parts = common.format_table(rows, header).split("\n\n")
    assert len(parts) > 1 and all(len(line) <= 100 for line in "\n".join(parts).splitlines())
    cells = [part.splitlines() for part in parts]
    assert all([line.split()[0] for line in lines[::2]] == ["name", "first"] for lines in cells)
    assert [c for lines in cells for c in lines[0].split()[1:]] == header[1:]  # every column once, in order
    assert [c for lines in cells for c in lines[3].split()[1:]] == [str(v) for v in range(30, 60)]
    assert "\n\n" not in common.format_table(rows, header, width=10_000)


def test_format_claims_shows_verdicts():
    claims = [common.claim("s", "c", "m", True), common.claim("s", "c", "m", False), common.claim("s", "c", "m", None),
              common.claim("s", "c", "premise not met: no spread", None)]
    headers = [line for line in common.format_claims(claims).splitlines() if line.startswith("[")]
    assert headers == ["[yes] s", "[no] s", "[inconclusive] s", "[premise not met] s"]


def test_claims_wrap_to_the_terminal_and_keep_every_word():
    statement, measured = "the claim says " + "word " * 60, "we measured " + "0.123 " * 60
    text = common.format_claims([common.claim("survey §3", statement, measured, True)])
    lines = text.splitlines()
    assert lines[0] == "[yes] survey §3" and all(len(line) <= 100 for line in lines)
    assert text.split() == ["[yes]", "survey", "§3", *statement.split(), "measured:", *measured.split()]


def test_plot_curves_draws_the_mean_and_the_min_max_band(tmp_path):
    fig, ax = plt.subplots()
    ys = np.array([[0.0, 1.0, 5.0], [2.0, 3.0, 4.0]])
    common.plot_curves(ax, np.arange(3), {"run": ys})
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [1.0, 2.0, 4.5])
    vertices = ax.collections[0].get_paths()[0].vertices
    assert np.isclose(vertices[:, 1].min(), 0.0) and np.isclose(vertices[:, 1].max(), 5.0)
    assert common.save_figure(fig, tmp_path / "f.png").stat().st_size > 0


def test_token_grid_shades_each_token_by_its_value_on_one_scale_centred_at_zero(tmp_path, monkeypatch):
    """One panel per sequence, one row per label, each cell its token (a newline as ⏎) over its value's shade; one
    norm from -max|v| to +max|v| for every panel and its colorbar; the box around the marked columns, every row."""
    panels = [{"title": "a", "tokens": ["1", "\n", "#"], "rows": {"x": [1.0, -2.0, 0.0], "y": [0.5, 0.0, 4.0]},
               "box": np.array([False, True, True])},
              {"title": "b", "tokens": ["7", "■"], "rows": {"x": [-1.0, 0.0], "y": [0.0, 0.0]}, "box": None}]
    drawn = []
    monkeypatch.setattr(common, "save_figure", lambda fig, path: drawn.append(fig) or path)
    assert common.token_grid(tmp_path / "g.png", panels, "title", "A_t") == tmp_path / "g.png"
    grids = [ax for ax in drawn[0].axes if ax.images]
    colorbar = next(ax for ax in drawn[0].axes if not ax.images)
    assert [ax.get_title(loc="left") for ax in grids] == ["a", "b"] and colorbar.get_ylabel() == "A_t"
    for ax, panel in zip(grids, panels):
        image = ax.images[0]
        np.testing.assert_array_equal(image.get_array(), np.array(list(panel["rows"].values())))
        assert (image.norm.vmin, image.norm.vmax) == (-4.0, 4.0) and image.get_cmap().name == "RdBu"
        assert [t.get_text() for t in ax.texts] == [c.replace("\n", "⏎") for _ in panel["rows"] for c in panel["tokens"]]
        assert [label.get_text() for label in ax.get_yticklabels()] == list(panel["rows"])
        assert ax.get_xlim() == (-0.5, 2.5)  # every panel as wide as the longest: one cell, one width
    (box,) = grids[0].patches
    assert (box.get_x(), box.get_width(), box.get_height()) == (0.5, 2, 2) and not grids[1].patches
    assert common.token_grid(tmp_path / "zero.png", [{"title": "", "tokens": ["a"], "rows": {"x": [0.0]}, "box": None}],
                             "", "") == tmp_path / "zero.png"  # all zero: a scale of ±1, not a division by 0


def test_moving_average_is_a_trailing_mean():
    x = [1.0, 3.0, 5.0, 7.0]
    np.testing.assert_allclose(common.moving_average(x, 2), [1.0, 2.0, 4.0, 6.0])
    np.testing.assert_allclose(common.moving_average(x, 10), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(common.moving_average(x, 1), x)


def test_moving_average_skips_nan():
    x = [1.0, float("nan"), 5.0, float("nan"), float("nan"), float("nan")]
    np.testing.assert_allclose(common.moving_average(x, 2), [1.0, 1.0, 5.0, 5.0, np.nan, np.nan])


# ------------------------------------------------------------------------------- key-to-door
def run_episode(env, actions):
    rewards, states = [], []
    for a in actions:
        state, reward, terminated, truncated, _ = env.step(torch.tensor([a]))
        rewards.append(reward.item())
        states.append(state.item())
    return rewards, states, terminated.item()


def test_key_to_door_rewards_the_key_at_the_door_only():
    env = common.KeyToDoor(1, corridor=3)
    assert env.reset()[0].tolist() == [0]
    rewards, states, done = run_episode(env, [1, 0, 0, 0, 0])
    assert rewards == [0, 0, 0, 0, 1.0] and done
    assert states[:4] == [3, 5, 7, 9]  # 2 * position + has_key, carrying the key
    assert states[4] == 0  # reset in the same step
    rewards, _, done = run_episode(env, [0, 1, 1, 1, 1])  # corridor actions change nothing
    assert rewards == [0, 0, 0, 0, 0] and done


def test_key_to_door_episode_length_is_corridor_plus_two():
    env = common.KeyToDoor(4, corridor=6)
    env.reset()
    for t in range(8):
        *_, terminated, _, _ = env.step(torch.ones(4, dtype=torch.long))
        assert terminated.all() == (t == 7)


def test_key_to_door_distractors_fall_in_the_corridor_at_their_rate():
    env = common.KeyToDoor(4000, corridor=5, distractor_prob=0.3, distractor=0.2, seed=1)
    env.reset()
    rewards = torch.stack([env.step(torch.zeros(4000, dtype=torch.long))[1] for _ in range(7)])
    assert torch.all(rewards[0] == 0) and torch.all(rewards[6] == 0)  # key room, door without key
    assert torch.all((rewards[1:6] == 0) | (rewards[1:6] == 0.2))
    assert abs((rewards[1:6] > 0).float().mean().item() - 0.3) < 0.02


def test_key_to_door_model_matches_the_simulator():
    env = common.KeyToDoor(1, corridor=2, distractor_prob=0.5, distractor=0.1)
    P, R = env.model()
    assert torch.allclose(P.sum(-1), torch.ones(P.shape[:2], dtype=P.dtype))
    env.reset()
    for a in [1, 0, 1, 0]:
        s = env.state.item()
        s_next = env.step(torch.tensor([a]))[0].item()
        expected_next = P[s, a].argmax().item()
        terminal = expected_next == env.num_states
        assert s_next == (0 if terminal else expected_next)  # the simulator resets at the end
    assert R[0].tolist() == [0.0, 0.0] and R[2].tolist() == [0.05, 0.05] and R[2 * 3 + 1].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_evaluate_policy_satisfies_the_bellman_equation(gamma):
    env = common.KeyToDoor(1, corridor=4, distractor_prob=0.3, distractor=0.5)
    P, R = env.model()
    policy = torch.softmax(torch.randn(P.shape[0], 2, generator=torch.Generator().manual_seed(0),
                                       dtype=torch.float64), dim=1)
    V, Q = common.evaluate_policy(P, R, policy, gamma)
    # V(s) = Σ_a π(a|s) [R(s,a) + γ Σ_s' P(s'|s,a) V(s')], the terminal state worth 0
    bellman = (policy * (R + gamma * torch.einsum("sat,t->sa", P, V))).sum(1)
    torch.testing.assert_close(V[:-1], bellman[:-1])
    assert V[-1] == 0
    torch.testing.assert_close(V, (policy * Q).sum(1))
    # by hand: from the key room, p(key) * γ^(L+1) + distractors γ^1 .. γ^L
    expected = policy[0, 1] * gamma ** 5 + sum(0.15 * gamma ** k for k in range(1, 5))
    assert math.isclose(V[0].item(), expected.item(), rel_tol=1e-9)


def test_start_run_applies_smoke_seeds_and_makes_the_out_folder(tmp_path):
    @dataclasses.dataclass
    class RunArgs:
        seed: int = 5
        device: str = "cpu"
        out: str = str(tmp_path / "run")
        smoke: bool = True
        size: int = 100
        SMOKE = dict(size=2)

    args, device, out = common.start_run(RunArgs())
    assert args.size == 2 and device == torch.device("cpu") and out.is_dir()
    first = torch.rand(1).item()
    common.seed_everything(5)
    assert torch.rand(1).item() == first


def test_run_args_gives_every_script_the_four_flags_first():
    @dataclasses.dataclass
    class ScriptArgs(common.RunArgs):
        out: str = common.arg("runs/99_demo", "output folder")
        width: int = common.arg(3, "a script's own flag")

    names = [f.name for f in dataclasses.fields(ScriptArgs)]
    assert names == ["seed", "device", "out", "smoke", "width"]
    args = common.parse_args(ScriptArgs, ["--seed", "4", "--smoke", "--width", "5"])
    assert (args.seed, args.device, args.out, args.smoke, args.width) == (4, "auto", "runs/99_demo", True, 5)


def test_play_episodes_follows_the_policy_and_ends_in_the_terminal_state():
    env = common.KeyToDoor(500, corridor=3, seed=2)
    policy = torch.zeros(env.num_states + 1, 2)
    policy[:, 0] = 1.0
    policy[0] = torch.tensor([0.25, 0.75])  # take the key 3 times in 4, then always action 0
    episode = common.play_episodes(env, policy)
    assert episode["states"].shape == (5, 500) and episode["ends"][-1].all() and not episode["ends"][:-1].any()
    assert torch.all(episode["actions"][1:] == 0)
    assert abs(episode["actions"][0].float().mean().item() - 0.75) < 0.06
    torch.testing.assert_close(episode["rewards"][-1], episode["actions"][0].float())  # the door pays the key
    assert torch.equal(episode["next_states"][:-1], episode["states"][1:])
    assert torch.all(episode["next_states"][-1] == env.num_states)


def test_mean_or_nan_skips_non_finite_values():
    assert common.mean_or_nan([1.0, float("nan"), 3.0]) == 2.0
    assert common.mean_or_nan(np.array([[1.0], [2.0]])) == 1.5
    assert math.isnan(common.mean_or_nan([])) and math.isnan(common.mean_or_nan([float("nan")]))


def test_loglog_slope_is_the_power_of_the_law_over_the_positive_points():
    x = [10.0, 20.0, 40.0, 80.0]
    assert math.isclose(common.loglog_slope(x, [3 * v**1.5 for v in x]), 1.5, rel_tol=1e-6)
    assert common.loglog_slope(x, [7.0] * 4) == pytest.approx(0.0, abs=1e-12)
    assert math.isclose(common.loglog_slope(x, [3 * x[0], 0.0, 3 * x[2], -1.0]), 1.0, rel_tol=1e-9)
    assert math.isnan(common.loglog_slope([1.0], [1.0])) and math.isnan(common.loglog_slope(x, [0.0] * 4))


def test_pearson_is_r_and_nan_where_undefined():
    x, y = [1.0, 2.0, 3.0, 5.0], [2.0, 1.0, 4.0, 3.0]
    assert common.pearson(x, y) == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert common.pearson(x, [2 * v + 1 for v in x]) == pytest.approx(1.0)
    assert math.isnan(common.pearson([1.0, 1.0], [1.0, 2.0])) and math.isnan(common.pearson([1.0], [2.0]))


def test_t_quantile_is_students_and_its_tail_joins_the_table():
    assert common.t_quantile(2) == 4.303 and common.t_quantile(30) == 2.042
    assert common.t_quantile(31) == pytest.approx(2.040, abs=0.005) and common.t_quantile(1000) == pytest.approx(1.962, abs=1e-3)
    assert math.isnan(common.t_quantile(0))


def test_mean_interval_is_the_mean_plus_minus_t_times_the_standard_error():
    mean, low, high = common.mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and high - mean == pytest.approx(4.303 / math.sqrt(3)) and mean - low == pytest.approx(high - mean)
    assert common.mean_interval([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)
    assert math.isnan(common.mean_interval([1.0])[2]) and math.isnan(common.mean_interval([])[0])


@pytest.mark.parametrize("values,claimed,holds", [
    ([-0.3, 0.1, -0.2], None, None),  # a negative mean is no "no": the interval reaches above 0
    ([-0.3, 0.1, -0.2], 0.05, None),  # and it cannot rule out the 5 points the statement claims
    ([-0.3, 0.1, -0.2], 0.5, False),  # it rules out an effect of 0.5
    ([-0.01, 0.01, 0.0], None, None),  # a tight interval round 0 rules out no named size
    ([-0.01, 0.01, 0.0], 0.05, False),  # but it rules out 5 points
    ([-0.30, -0.31, -0.29], None, False),  # the reverse, shown
    ([0.30, 0.31, 0.29], 0.05, True),
])
def test_a_no_must_rule_out_the_effect_the_statement_claims(values, claimed, holds):
    assert common.seed_verdict(values, claimed=claimed)[0] is holds


@pytest.mark.parametrize("slopes,holds", [
    ([0.93, 0.90, 0.96], True),  # nearer linear than no growth or quadratic growth
    ([0.20, 0.30, 0.25], False),  # nearer no growth
    ([1.90, 2.00, 2.10], False),  # nearer quadratic
    ([0.27, -0.20, 0.80], None),  # the interval reaches across the band's edge
    ([1.0], None),  # one seed: no interval
])
def test_roughly_linear_reads_the_slopes_interval_against_the_halfway_exponents(slopes, holds):
    verdict, text = common.slope_verdict(slopes)
    assert verdict is holds and text.startswith(f"{np.mean(slopes):.2f}")


def test_stored_numbers_restores_number_keys_and_reads_null_as_nan():
    tree = {8: {0.95: [1, {"2": "x"}]}, "name": 1}
    assert common.stored_numbers(json.loads(json.dumps(tree))) == {8: {0.95: [1, {2: "x"}]}, "name": 1}
    back = common.stored_numbers(json.loads(json.dumps(common.json_ready({"a": [math.nan, 1.0]}))))
    assert math.isnan(back["a"][0]) and back["a"][1] == 1.0


def test_reanalyse_rewrites_only_the_claims_from_the_stored_measurements(tmp_path, capsys):
    @dataclasses.dataclass
    class Args(common.RunArgs):
        threshold: float = 0.0
        reanalyse: str = ""

    path = tmp_path / "results.json"
    common.write_results(tmp_path, Args(threshold=2.0), 12.5, {"m": 1}, [], values={"1": 3.0})
    claims = common.reanalyse(Args(reanalyse=str(path)), lambda run, stored: [common.claim(
        "s", "above the run's threshold", "3", stored["values"][1] > run.threshold)])
    stored = json.loads(path.read_text())
    assert claims == stored["claims"] and claims[0]["holds"] is True  # the run's threshold 2, not the default 0
    assert stored["args"]["threshold"] == 2.0 and stored["wall_clock_s"] == 12.5 and stored["metrics"] == {"m": 1}
    with pytest.raises(SystemExit) as stop:
        common.reanalyse(Args(reanalyse=str(tmp_path / "missing.json")), lambda run, stored: [])
    assert stop.value.code == 2


@pytest.mark.parametrize("verdicts,all_parts,tends", [
    ((True, True), True, True), ((True, None), None, True), ((True, False), False, None),
    ((None, None), None, None), ((False, None), False, False), ((False, False), False, False),
    ((), None, None), ((np.True_, np.True_), True, True), ((np.True_, np.False_), False, None)])
def test_all_parts_needs_every_part_and_tends_needs_one_without_a_contrary(verdicts, all_parts, tends):
    assert common.all_parts(*verdicts) is all_parts and common.tends(*verdicts) is tends
