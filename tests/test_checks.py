"""The project's static checks, run with the tests so CI enforces them. Alone: -m check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.check


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "--no-fix", "."],
        ["ruff", "format", "--check", "."],
        ["mypy"],
    ],
    ids=lambda c: " ".join(c[:2]),
)
def test_static_check(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", *command],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
