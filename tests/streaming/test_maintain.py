"""Table maintenance: compaction, log checkpoints and VACUUM keep the tables few files and
their rows intact, also for readers of older versions and beside a running job's commits."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable

from streaming.config import MaintenanceConfig
from streaming.job import sink
from streaming.job.maintain import maintain, maintain_table, table_properties
from tests.streaming.conftest import faultline

T0 = 1_795_305_000_000  # 2026-11-21 23:50:00 UTC: the batches below cross midnight
DAY = 86_400_000
SETTINGS = MaintenanceConfig(min_files=5, checkpoint_interval=10)


def _decisions(batch: int) -> pa.Table:
    rows = [
        {
            "scope": "cluster",
            "scope_key": "C",
            "cluster": "C",
            "broker_name": f"broker-{i}",
            "decision": "ISOLATE" if i % 2 else "RESTORE",
            "effective_at": T0 + batch * 60_000 + i,
            "available_from": T0 + batch * 60_000 + 10_000,
            "reason": "r" * (100 if i == 2 else 3),
            "cause_event_id": f"e-{batch}-{i}",
            "profile": "rocketmq-5",
        }
        for i in range(3)
    ]
    return pa.Table.from_pylist(rows, schema=sink.TABLES["broker_decisions"])


def _commit(root: Path, first: int, last: int, app_id: str = "app") -> None:
    for batch in range(first, last):
        metas = sink.write_file(root, "broker_decisions", _decisions(batch), batch, app_id)
        sink.commit_batch(root, batch, metas, app_id, write_ms=0)


def _rows(table: DeltaTable | Path) -> list[dict[str, Any]]:
    dt = table if isinstance(table, DeltaTable) else DeltaTable(str(table))
    rows = dt.to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: (r["effective_at"], r["broker_name"]))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    sink.create_tables(tmp_path, table_properties(SETTINGS))
    return tmp_path


def test_compaction_leaves_a_file_per_day_with_the_same_rows_and_statistics(root: Path) -> None:
    _commit(root, 0, 30)  # 10 minutes before midnight, 20 after
    path = root / "broker_decisions"
    before = _rows(path)
    older = DeltaTable(str(path))  # a reader that loaded the table before maintenance
    assert len(older.file_uris()) == 30

    report = maintain_table(path, SETTINGS)

    assert (report.files_before, report.files_after, report.compacted) == (30, 2, 30)
    days = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    assert sorted(days[f"partition.{sink.PARTITION}"].to_pylist()) == [
        pa.scalar(T0, pa.timestamp("ms")).cast(pa.date32()).as_py(),
        pa.scalar(T0 + DAY, pa.timestamp("ms")).cast(pa.date32()).as_py(),
    ]
    assert _rows(path) == before
    assert _rows(older) == before  # its files stay for vacuum_retention
    dataset = DeltaTable(str(path)).to_pyarrow_dataset()
    for column, value, expected in [
        ("effective_at", T0 + 25 * 60_000 + 1, 1),
        ("effective_at_ts", pa.scalar(T0 + 60_000, pa.timestamp("ms")).cast(sink.TIMESTAMP), 1),
        ("broker_name", "broker-2", 30),
        ("cause_event_id", "e-7-1", 1),
        ("reason", "r" * 100, 30),
        (sink.PARTITION, pa.scalar(T0 + DAY, pa.timestamp("ms")).cast(pa.date32()), 60),
    ]:
        assert dataset.to_table(filter=ds.field(column) == value).num_rows == expected, column


def test_a_day_with_few_small_files_is_left_alone(root: Path) -> None:
    _commit(root, 0, 4)  # 4 files before midnight: fewer than min_files
    report = maintain_table(root / "broker_decisions", SETTINGS)
    assert (report.compacted, report.files_after) == (0, 4)


def test_the_log_is_checkpointed_every_interval_and_vacuum_deletes_replaced_files(
    root: Path,
) -> None:
    _commit(root, 0, 25)
    log = root / "broker_decisions" / "_delta_log"
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet")) == [
        "00000000000000000009.checkpoint.parquet",
        "00000000000000000019.checkpoint.parquet",
    ]  # every 10th commit, counting the table's creation (version 0)
    files = {p.name for p in (root / "broker_decisions").glob("*/part-*.parquet")}
    assert len(files) == 25
    right_away = MaintenanceConfig.model_construct(
        **{**SETTINGS.model_dump(), "vacuum_retention": 0}
    )
    report = maintain_table(root / "broker_decisions", right_away)
    assert (report.compacted, report.vacuumed, report.files_after) == (25, 25, 2)
    left = {p.name for p in (root / "broker_decisions").glob("*/part-*.parquet")}
    assert len(left) == 2 and not left & files


def test_maintenance_beside_the_jobs_commits_loses_nothing(root: Path) -> None:
    """``faultline maintain`` may run while the job commits: compaction only rewrites files the
    job does not touch again, and the job only adds files."""
    stop = threading.Event()
    runs: list[int] = []

    def maintaining() -> None:
        while not stop.is_set():
            runs.append(maintain_table(root / "broker_decisions", SETTINGS).compacted)

    worker = threading.Thread(target=maintaining)
    worker.start()
    try:
        _commit(root, 0, 60)
    finally:
        stop.set()
        worker.join()
    assert len(runs) > 1 and sum(runs) > 0, runs
    rows = _rows(root / "broker_decisions")
    assert len(rows) == 60 * 3
    assert len({r["cause_event_id"] for r in rows}) == 60 * 3


def test_every_table_is_maintained_and_the_command_reports_it(root: Path) -> None:
    _commit(root, 0, 12)
    reports = {r.name: r for r in maintain(root, SETTINGS)}
    assert set(reports) == {*sink.TABLES, "batches"}
    assert reports["batches"].compacted == 12  # unpartitioned: compacted as a whole
    _commit(root, 12, 14)
    done = faultline("maintain", "--output", str(root), cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert "broker_decisions" in done.stdout and "files compacted" in done.stdout
    missing = faultline("maintain", "--output", str(root / "nothing"), cwd=root)
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        == f"faultline: --output {root / 'nothing'}: no faultline tables here"
    )
