"""The crash tests' failpoints: off unless named, a real SIGKILL by default, an exception on
request."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from streaming.job import failpoints

REACH = "from streaming.job import failpoints; failpoints.reach('after-commit-batches', 3)"


def _reach(env: dict[str, str]) -> int:
    run = subprocess.run([sys.executable, "-c", REACH], env={**os.environ, **env}, check=False)
    return run.returncode


def test_a_failpoint_kills_the_process_only_at_its_point_and_batch() -> None:
    assert _reach({failpoints.ENV: "after-commit-batches:3"}) == -signal.SIGKILL
    assert _reach({failpoints.ENV: "after-commit-batches:2"}) == 0
    assert _reach({failpoints.ENV: "before-commit-batches:3"}) == 0
    assert _reach({}) == 0


def test_a_failpoint_raises_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(failpoints.ENV, "before-publish:0")
    monkeypatch.setenv(failpoints.ACTION_ENV, "raise")
    failpoints.reach("before-publish", 1)
    with pytest.raises(failpoints.Crash, match=r"^failpoint before-publish:0$"):
        failpoints.reach("before-publish", 0)
