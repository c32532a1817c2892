"""Shared test helpers."""

import subprocess
import sys
from pathlib import Path

import pytest

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
