"""``--count``: a benchmark's regions counted in instructions by callgrind, from inside the process
it counts; what runs outside them is not counted."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from streaming.bench import counting

LOOPS = """
from streaming.bench import counting

clock = counting.clock()


def spin(n):
    total = 0
    for i in range(n):
        total += i


spin(2_000_000)  # before the first reading: not counted
a = clock.read()
spin(100_000)
b = clock.read()
spin(200_000)
c = clock.read()
clock.pause()
spin(2_000_000)  # paused: not counted
d = clock.read()
clock.pause()
print(type(clock).__name__, int(b - a), int(c - b), int(d - c))
"""


@pytest.fixture
def loops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "counted_loops.py").write_text(textwrap.dedent(LOOPS))
    paths = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    return "counted_loops"


def _counted(module: str, capsys: pytest.CaptureFixture[str]) -> list[int]:
    assert counting.rerun(module, []) == 0
    found = re.fullmatch(r"Instructions (\d+) (\d+) (\d+)\n", capsys.readouterr().out)
    assert found is not None
    return [int(n) for n in found.groups()]


def test_a_region_is_counted_alone_and_alike_from_run_to_run(
    loops: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _counted(loops, capsys)
    once, twice, paused = first
    assert once > 100_000  # a Python loop's step is many instructions
    assert 1.9 < twice / once < 2.1  # twice the loop, twice the count
    # the loop between the pause and the reading after it is left out: the empty region
    # counts only the reading itself
    assert paused < once / 100
    again = _counted(loops, capsys)
    assert all(abs(x - y) < x / 1000 for x, y in zip(first[:2], again[:2], strict=True))


def test_without_the_tools_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SystemExit, match=r"--count needs valgrind and gcc on the PATH"):
        counting.rerun("counted_loops", [])


def test_outside_a_counted_run_the_clock_is_cpu_time() -> None:
    clock = counting.clock()
    assert type(clock) is counting.Seconds and clock.span(0.5) == "0.50 s"
