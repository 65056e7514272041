"""Instructions instead of seconds: ``--count`` for the engine's benchmarks, whose goals are ratios
of two costs that a busy minute of this machine moves by a fifth or more.

Under ``--count`` a benchmark runs itself again under valgrind's callgrind, with instrumentation
off (``--instr-atstart=no``): its imports and its simulated events run at about an eighth of their
speed and are not counted. Only what the benchmark measures is: its clock
(:class:`Instructions`) switches instrumentation on at a reading and, at the next, off, and has
callgrind write out what it counted (through a small C library, ``counting.c``, built once
with gcc into the user's cache), which it reads back and deletes. The figures are the
instructions executed, which do not depend on what else the machine runs; Python's string
hashes are seeded alike (``PYTHONHASHSEED=0``), so that a set is walked in the same order each
run. A counted region runs about fifty times slower than natively.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FOLDER = "FAULTLINE_COUNT_FOLDER"
"""Set in the counted run: where callgrind writes what it counted."""
SOURCE = Path(__file__).with_name("counting.c")
_TOTALS = re.compile(r"^totals: (\d+)$", re.MULTILINE)


class Seconds:
    """A benchmark's clock by default: the process's CPU time."""

    name = "CPU time"

    def read(self) -> float:
        return time.process_time()

    def pause(self) -> None:
        """Nothing to stop: CPU time is always read."""

    unit = "ms"
    """What :meth:`short` gives a value in."""

    def short(self, value: float) -> str:
        return f"{value * 1000:,.0f}"

    def span(self, value: float) -> str:
        return f"{value:.2f} s"

    def each(self, value: float) -> str:
        return f"{value * 1e6:.1f} us"

    def rate(self, count: float, value: float) -> str:
        return f"{count / value:,.0f}/s"


CPU_TIME = Seconds()


class Instructions(Seconds):
    """The instructions executed since the first reading, counted by callgrind from each
    reading to the next or to :meth:`pause`. A reading stops the count, reads what callgrind
    wrote out and starts again, so that reading the file is not counted."""

    name = "instructions counted by callgrind"

    def __init__(self, folder: Path, library: Path) -> None:
        self._lib = ctypes.CDLL(str(library))
        self._folder, self._dumps, self._total, self._on = folder, 0, 0, False

    def read(self) -> float:
        self.pause()
        self._lib.faultline_count_start()
        self._on = True
        return float(self._total)

    def pause(self) -> None:
        if self._on:
            self._lib.faultline_count_stop()
            self._on = False
            self._dumps += 1
            dump = self._folder / f"callgrind.{self._dumps}"
            found = _TOTALS.search(dump.read_text())
            dump.unlink()
            if found is None:
                raise RuntimeError(f"callgrind wrote no totals in {dump}")
            self._total += int(found.group(1))

    unit = "M instructions"

    def short(self, value: float) -> str:
        return f"{value / 1e6:,.0f}"

    def span(self, value: float) -> str:
        return f"{value / 1e9:.3f} G instructions"

    def each(self, value: float) -> str:
        return f"{value:,.0f} instructions"

    def rate(self, count: float, value: float) -> str:
        return f"{count / value * 1e9:,.0f}/G instructions"


def inside() -> bool:
    """Whether this is the counted run (:func:`rerun`'s)."""
    return FOLDER in os.environ


def clock() -> Seconds:
    """The clock of this run: :class:`Instructions` in a counted run, else CPU time."""
    return Instructions(Path(os.environ[FOLDER]), library()) if inside() else CPU_TIME


def library() -> Path:
    """``counting.c`` built into a shared library in the user's cache (once per source)."""
    source = SOURCE.read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "faultline"
    built = cache / f"counting-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if not built.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = built.with_suffix(f".{os.getpid()}.tmp")
        done = subprocess.run(
            ["gcc", "-O2", "-shared", "-fPIC", "-o", str(partial), str(SOURCE)],
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(
                f"--count: gcc could not build {SOURCE} (it needs valgrind's headers, Debian's "
                f"valgrind package):\n{done.stderr.strip()}"
            )
        partial.replace(built)
    return built


def rerun(module: str, argv: list[str]) -> int:
    """Run ``python -m module argv`` under callgrind, counting what its clock measures; print
    what it prints and return its exit code."""
    missing = [tool for tool in ("valgrind", "gcc") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(
            f"--count needs {' and '.join(missing)} on the PATH (Debian's valgrind and gcc "
            "packages)"
        )
    library()  # built here, so that its errors are this process's
    with tempfile.TemporaryDirectory(prefix="faultline-count-") as folder:
        valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-line=no",
                    f"--callgrind-out-file={folder}/callgrind"]  # fmt: skip
        done = subprocess.run(
            [*valgrind, sys.executable, "-m", module, *argv],
            check=False,
            env={**os.environ, FOLDER: folder, "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
        )
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
    return done.returncode
