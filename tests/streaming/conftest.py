"""Helpers for the end-to-end runs: the real ``faultline`` command, the real Spark, the real
Delta tables."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pandas as pd
import pytest
from deltalake import DeltaTable

from streaming.job.progress import PROGRESS_COLUMNS

FAULTLINE = [sys.executable, "-m", "streaming.cli"]
DECISION_TABLES = ("broker_decisions", "routing_decisions", "routing_table")
OUTPUT_TABLES = (
    "fault_items",
    *DECISION_TABLES,
    "routes",
    "heartbeats",
    "quarantine",
    "late_events",
    "schedule_entries",
    "redeliveries",
    "transactions",
)


def faultline(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FAULTLINE, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*FAULTLINE, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def batches_committed(output: Path) -> int:
    try:
        return len(DeltaTable(str(output / "batches")).to_pyarrow_table(columns=["batch_id"]))
    except Exception:  # not created yet
        return 0


def interrupt_after(
    proc: subprocess.Popen[str], output: Path, batches: int, sig: int, limit: float = 300
) -> int:
    """Send ``sig`` once ``batches`` batches are committed; returns the exit code."""
    deadline = time.time() + limit
    while time.time() < deadline and proc.poll() is None and batches_committed(output) < batches:
        time.sleep(0.05)
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.communicate(timeout=limit)
    return proc.returncode


def table(output: Path, name: str) -> pd.DataFrame:
    return DeltaTable(str(output / name)).to_pandas()


def canonical(output: Path, name: str) -> list[tuple[Any, ...]]:
    """A table's rows as a sorted list, without ``batch_id``: equal lists mean equal tables."""
    frame = table(output, name).drop(columns="batch_id")
    rows = [tuple(_plain(v) for v in row) for row in frame.itertuples(index=False)]
    return sorted(rows, key=repr)


def batch_rows(frame: pd.DataFrame) -> list[tuple[str, ...]]:
    """A table's rows with their ``batch_id``, sorted: equal lists mean the same rows in the same
    batches."""
    return sorted(tuple(map(repr, r)) for r in frame.itertuples(index=False))


def same_tables(a: Path, b: Path, names: tuple[str, ...] = OUTPUT_TABLES) -> None:
    for name in names:
        assert canonical(a, name) == canonical(b, name), name


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        return repr(list(value))
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


KILL = signal.SIGKILL
INT = signal.SIGINT


def quick_run(cwd: Path, name: str, *extra: str, env: dict[str, str] | None = None) -> Path:
    result = faultline(
        "run",
        "--scenario",
        "quick",
        "--output",
        str(cwd / name / "out"),
        "--checkpoint",
        str(cwd / name / "ck"),
        *extra,
        cwd=cwd,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (cwd / name / "stdout.log").write_text(result.stdout)
    return cwd / name / "out"


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick scenario, uninterrupted, in micro-batches of 200 records, its tables maintained
    every 3 batches (every other run here is not: equal tables show that maintenance changes no
    row)."""
    folder = tmp_path_factory.mktemp("reference")
    config = folder / "maintained.yaml"
    config.write_text("maintenance:\n  every: 3\n  min_files: 2\n")
    return quick_run(folder, "ref", "--max-records-per-batch", "200", "--config", str(config))


@pytest.fixture(scope="session")
def one_batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick scenario, uninterrupted, in one micro-batch (``out`` and ``ck`` under it)."""
    folder = tmp_path_factory.mktemp("one-batch")
    return quick_run(folder, "one", "--max-records-per-batch", "1000000").parent


BATCH_TIMINGS = (
    "write_ms",
    "commit_ms",
    "receive_ms",
    "parse_ms",
    "engine_ms",
    "files_ms",
    "state_ms",
    "publish_ms",
)
BATCH_TIMINGS += ("slowest_task_ms", "committed_at", "committed_at_ts", *PROGRESS_COLUMNS)


def same_batches(a: Path, b: Path) -> None:
    """Both outputs have the same micro-batches with the same counts (timings aside)."""
    frames = [table(out, "batches").drop(columns=list(BATCH_TIMINGS)) for out in (a, b)]
    rows = [sorted(frame.itertuples(index=False)) for frame in frames]
    assert rows[0] == rows[1]


def no_stray_files(output: Path) -> None:
    """Every Parquet file in a table's folder is one a commit added: referenced now, or replaced
    later (a rewritten ``batches`` row, a compaction) and kept for older readers until VACUUM."""
    for name in (*OUTPUT_TABLES, "batches"):
        added = set()
        for log in (output / name / "_delta_log").glob("*.json"):
            for line in log.read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    added.add(output / name / unquote(action["add"]["path"]))
        present = {p for p in (output / name).rglob("*.parquet") if "_delta_log" not in p.parts}
        assert present <= added, (name, sorted(p.name for p in present - added))
        for uri in DeltaTable(str(output / name)).file_uris():
            assert Path(unquote(uri.removeprefix("file://"))).exists(), uri
