"""Shared test helpers."""

import importlib
import json
from pathlib import Path

import pytest
import torch

import common

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cli_error(capsys):
    """Parse a script's flags in this process; check that they stop it with exit code 2 and a
    single stderr line (the whole CLI path through `common.parse_args`, without a new Python)."""
    def run(script: str, *argv: str) -> str:
        module = importlib.import_module(script.removesuffix(".py"))
        with pytest.raises(SystemExit) as stop:
            common.parse_args(module.Args, list(argv))
        assert stop.value.code == 2
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err
        return lines[0]
    return run


def _no_constant(name: str):
    raise ValueError(f"results.json is not strict JSON: it holds {name}")


@pytest.fixture
def read_results():
    """Read a results.json as strict JSON (NaN or Infinity there fails the test)."""
    def read(path: Path) -> dict:
        return json.loads(Path(path).read_text(), parse_constant=_no_constant)
    return read


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The tests' tensors are tiny: on a busy 2-core CPU a second torch thread costs far more
    than it saves (03 and 04 make the same choice when run)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
