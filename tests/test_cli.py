"""Every script's command line at its edges: each bad input ends with one line on stderr and exit
code 2, whatever the script; a Ctrl-C ends with one line and leaves nothing half-written."""

import dataclasses
import importlib
import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import common

ROOT = Path(__file__).resolve().parents[1]

CHAPTERS = ["01_reinforce_pong", "02_gae", "03_rudder", "04_her_hca", "05_grpo_rloo", "06_prm_qrm", "07_ss_grpo"]
STUDIES = sorted(f"studies.{path.stem}" for path in (ROOT / "studies").glob("0*.py"))
SCRIPTS = CHAPTERS + STUDIES
MODULES = {name: importlib.import_module(name) for name in SCRIPTS}


def path_of(script: str) -> Path:
    return ROOT / (script.replace(".", "/") + ".py")


def is_lm(script: str) -> bool:
    """A chapter or study of 05-07: it takes the cold-start cache."""
    return script.rpartition(".")[2] >= "05"


def flags(script: str, keep) -> list[tuple[str, dataclasses.Field]]:
    return [("--" + f.name.replace("_", "-"), f) for f in dataclasses.fields(MODULES[script].Args) if keep(f)]


def is_list(f: dataclasses.Field) -> bool:
    return f.metadata.get("item") is not None


def is_float(f: dataclasses.Field) -> bool:
    return isinstance(f.default, float) and not is_list(f)


def all_cases() -> list[tuple[str, list[str], str]]:
    """(script, argv, what stderr must say) for every script: every float flag given a
    non-finite number, every list flag given an empty or malformed list, the seed out of range."""
    cases = []
    for script in SCRIPTS:
        for flag, _ in flags(script, is_float):
            cases += [(script, [f"{flag}={value}"], "must be a finite number") for value in ("inf", "-inf", "nan")]
        for flag, f in flags(script, is_list):
            if not f.metadata["empty"]:
                cases.append((script, [flag, ""], "expected a comma-separated list"))
            bad = "x" if f.metadata["item"] is not str else "no_such_name"
            first = f.default.split(",")[0]  # a good item first, where the default has one
            cases.append((script, [flag, f"{first},{bad}" if first else bad], repr(bad)))
        cases += [(script, ["--seed", "-1"], "must be in 0..4294967295"),
                  (script, ["--seed", str(2**32)], "must be in 0..4294967295")]
    return cases


@pytest.mark.parametrize("script,argv,message", all_cases(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_every_bad_number_list_and_seed_of_every_script_stops_in_one_line(cli_error, script, argv, message):
    assert message in cli_error(script, *argv)


def test_the_generic_checks_reach_every_script():
    scripts = {case[0] for case in all_cases()}
    assert scripts == set(SCRIPTS) and len(STUDIES) > 0
    for script in CHAPTERS:  # each chapter has a float flag the checks cover
        assert flags(script, is_float), script
    assert sum(bool(flags(script, is_list)) for script in CHAPTERS) >= 5  # and most a list flag


@pytest.mark.parametrize("script,argv,message", [
    ("01_reinforce_pong", ["--variants", ",rtg"], "'' is not one of"),
    ("03_rudder", ["--sweep=-2"], "--sweep: corridor lengths must be positive"),
    ("studies.05_bench", ["--bench-steps", "0"], "--bench-steps must be positive"),
    ("05_grpo_rloo", ["--final-samples", "-1"], "--final-samples must be positive"),
    ("studies.06_overoptimisation", ["--rl-methods", ""], "argument --rl-methods: expected a comma-separated list"),
])
def test_flag_specific_checks_name_the_right_flag(cli_error, script, argv, message):
    assert message in cli_error(script, *argv)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_missing_device_or_an_unusable_out_folder_ends_the_run_in_one_line(tmp_path, capsys, script):
    """In this process, through the script's own main (a new Python per case would cost seconds)."""
    (tmp_path / "a_file").write_text("x")
    cache = ["--cache", str(tmp_path / "cache")] if is_lm(script) else []
    for argv, message in ((["--device", "meta", "--out", str(tmp_path / "out")], "--device meta: this machine cannot "
                                                                                  "run on it"),
                          (["--out", str(tmp_path / "a_file")], "cannot make a folder there")):
        with pytest.raises(SystemExit) as stop:
            MODULES[script].main(common.parse_args(MODULES[script].Args, ["--smoke", *cache, *argv]))
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert stop.value.code == 2 and len(lines) == 1 and message in lines[0], err


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_prints_its_help(capsys, script):
    with pytest.raises(SystemExit) as stop:
        common.parse_args(MODULES[script].Args, ["--help"])
    assert stop.value.code == 0 and "--seed" in capsys.readouterr().out


def test_ctrl_c_ends_in_one_line_and_leaves_no_half_written_cache(tmp_path):
    # an SFT cold start of 100,000 steps: the interrupt surely lands while it trains
    run = subprocess.Popen([sys.executable, "05_grpo_rloo.py", "--smoke", "--sft-steps", "100000", "--out",
                            str(tmp_path / "out"), "--cache", str(tmp_path / "cache")], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           # as at a terminal: a job started in the background inherits Ctrl-C ignored
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.set_blocking(run.stderr.fileno(), False)
    seen, deadline = b"", time.time() + 120
    while b"cold start (SFT)" not in seen and time.time() < deadline:  # wait until it trains
        seen += run.stderr.read() or b""
        time.sleep(0.2)
    run.send_signal(signal.SIGINT)
    os.set_blocking(run.stderr.fileno(), True)
    _, rest = run.communicate(timeout=60)
    err = (seen + rest).decode()
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert run.returncode == 130 and "Traceback" not in err and "interrupted" in lines[-1]
    assert not (tmp_path / "out" / "results.json").exists()
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_runs_its_main_through_run_script(monkeypatch, script):
    """Run as a program, each script hands its main and Args to common.run_script, which turns a
    Ctrl-C into one line (the test above interrupts one script; this pins the others' entry)."""
    entries = []
    monkeypatch.setattr(common, "run_script", lambda main, args_class: entries.append((main, args_class)))
    namespace = runpy.run_path(str(path_of(script)), run_name="__main__")
    assert entries == [(namespace["main"], namespace["Args"])]


def test_smoke_keeps_the_flags_you_pass():
    args = common.apply_smoke(common.parse_args(MODULES["05_grpo_rloo"].Args, ["--smoke", "--rl-steps", "3"]))
    assert args.rl_steps == 3 and args.prompts == MODULES["05_grpo_rloo"].Args.SMOKE["prompts"]
