"""Exactly once at every commit point of a batch, without Spark: the driver's side of the sink
(``streaming.job.sink.commit_batch``) crashes before and after each table's Delta commit and after
the ``batches`` row, in the first, a middle and the last batch; each replay writes the batch's
files again, as Spark's retried tasks do, and crashes at the next point. The tables must hold the
rows of batches committed once each, every file a Delta log references must exist meanwhile, and
no file may be left over.

The same failpoints in the real query, with Spark replaying the batch and the operator's state,
are in test_crash.py (publishing, one table, the ``batches`` row)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from streaming.config import load_scenario
from streaming.job import failpoints, sink
from streaming.sim.simulator import simulate
from tests.streaming.conftest import canonical, no_stray_files, table
from udfs import engine
from udfs.parse import parse
from udfs.schema import TABLES

APP = "sink-crash"


@pytest.fixture(scope="module")
def batches() -> list[dict[str, pa.Table]]:
    """The engine's tables of the quick scenario in three batches, as the operator makes them."""
    scenario = load_scenario("quick")
    events = simulate(scenario)
    third = len(events) // 3 + 1
    state, made = None, []
    for n in range(3):
        part = events[n * third : (n + 1) * third]
        lines = [json.dumps(e) for e in part]
        parsed = parse(lines, ["t"] * len(part), [e["event_time"] for e in part]).to_pandas()
        step = engine.advance(scenario.cluster, state, parsed, engine.EngineConfig())
        state = step.state
        made.append(step.tables)
    return made


def _write(root: Path, tables: dict[str, pa.Table], batch_id: int) -> list[dict[str, Any]]:
    """What the batch's tasks hand the driver: each table's files, written now, and the counts."""
    metas = [
        m for name, rows in tables.items() for m in sink.write_file(root, name, rows, batch_id, APP)
    ]
    counts = dict.fromkeys(sink.COUNTERS, 0)
    rows = sum(len(t) for t in tables.values())
    return [*metas, {"table": None, **counts, "input": rows, "clock": batch_id, "task": 0}]


def _points(tables: dict[str, pa.Table]) -> list[str]:
    """Every point of a batch where a crash leaves something different behind."""
    written = [name for name in TABLES if name in tables]
    return [
        *(f"{when}-commit-{name}" for name in written for when in ("before", "after")),
        "after-commit-batches",
    ]


def _whole(root: Path) -> None:
    """Every file a table's Delta log references exists."""
    for name in (*TABLES, "batches"):
        for uri in DeltaTable(str(root / name)).file_uris():
            assert Path(unquote(uri.removeprefix("file://"))).exists(), uri


@pytest.mark.parametrize("crashed", [0, 1, 2], ids=["first", "middle", "last"])
def test_a_crash_at_every_commit_point_then_a_replay_commits_each_batch_once(
    batches: list[dict[str, pa.Table]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    crashed: int,
) -> None:
    crash_matrix(batches, tmp_path, monkeypatch, crashed, lambda root: sink.DeltaRs(root, APP))


def crash_matrix(
    batches: list[dict[str, pa.Table]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    crashed: int,
    committer: Callable[[Path], sink.Committer],
    staging: Callable[[Path], Path] = lambda root: root,
) -> None:
    """The crash matrix through ``committer(root)``, whose tasks write into ``staging(root)``
    (test_sink_spark.py runs it through Delta Lake's own writer), against an uninterrupted run
    through delta-rs."""
    uninterrupted, root = tmp_path / "uninterrupted", tmp_path / "crashed"

    def commit(batch_id: int, tables: dict[str, pa.Table]) -> dict[str, Any]:
        metas = _write(staging(root), tables, batch_id)
        return sink.commit_batch(root, batch_id, metas, APP, 0, committer(root))

    for folder in (uninterrupted, root):
        sink.create_tables(folder)
    for batch_id, tables in enumerate(batches):
        metas = _write(uninterrupted, tables, batch_id)
        assert sink.commit_batch(uninterrupted, batch_id, metas, APP, 0)["new"]
    points = _points(batches[crashed])
    assert len(points) >= 9  # before and after at least four tables, and the batches row
    monkeypatch.setenv(failpoints.ACTION_ENV, "raise")
    for batch_id, tables in enumerate(batches):
        for point in points if batch_id == crashed else []:
            monkeypatch.setenv(failpoints.ENV, f"{point}:{batch_id}")
            with pytest.raises(failpoints.Crash, match=f"failpoint {point}:{batch_id}"):
                commit(batch_id, tables)
            _whole(root)
            committed = set(table(root, "batches")["batch_id"])
            assert committed == set(range(batch_id + (point == "after-commit-batches"))), point
        monkeypatch.delenv(failpoints.ENV, raising=False)
        done = commit(batch_id, tables)
        assert done["new"] == (batch_id != crashed)  # the last crash came after the row
    for name in TABLES:
        assert canonical(root, name) == canonical(uninterrupted, name), name
        assert sorted(table(root, name)["batch_id"]) == sorted(
            table(uninterrupted, name)["batch_id"]
        )
    assert sorted(table(root, "batches")["batch_id"]) == [0, 1, 2]
    no_stray_files(root)
