"""Shared test helpers."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cli_error():
    """Run a script with bad flags; check it stops with exit code 2 and a single stderr line."""
    def run(script: str, *argv: str) -> str:
        result = subprocess.run([sys.executable, script, *argv], cwd=ROOT, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr
        return lines[0]
    return run


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """The tests' tensors are tiny: on a busy 2-core CPU a second torch thread costs far more
    than it saves (03 and 04 make the same choice when run)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
