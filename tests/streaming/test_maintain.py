"""Table maintenance: compaction, log checkpoints and VACUUM keep the tables few files and
their rows intact, also for readers of older versions and beside a running job's commits."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable

from streaming.config import MaintenanceConfig
from streaming.job import maintain as maintain_mod
from streaming.job import sink
from streaming.job.maintain import maintain, maintain_table, table_properties
from streaming.tools import OUTPUT_HINT
from tests.streaming.conftest import faultline

T0 = 1_795_305_000_000  # 2026-11-21 23:50:00 UTC: the batches below cross midnight
DAY = 86_400_000
SETTINGS = MaintenanceConfig(min_files=5, checkpoint_interval=10)
TRIGGER = 500


def _decisions(batch: int, at: int | None = None) -> pa.Table:
    at = T0 + batch * 60_000 if at is None else at
    rows = [
        {
            "scope": "cluster",
            "scope_key": "C",
            "cluster": "C",
            "broker_name": f"broker-{i}",
            "decision": "ISOLATE" if i % 2 else "RESTORE",
            "effective_at": at + i,
            "available_from": at + 10_000,
            "reason": "r" * (100 if i == 2 else 3),
            "cause_event_id": f"e-{batch}-{i}",
            "profile": "rocketmq-5",
        }
        for i in range(3)
    ]
    return pa.Table.from_pylist(rows, schema=sink.TABLES["broker_decisions"])


def _right_away(settings: MaintenanceConfig) -> MaintenanceConfig:
    """``settings`` with VACUUM deleting replaced files at once (the job refuses it)."""
    return MaintenanceConfig.model_construct(**{**settings.model_dump(), "vacuum_retention": 0})


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
    sink.create_tables(tmp_path, table_properties(SETTINGS, TRIGGER))
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
    right_away = _right_away(SETTINGS)
    report = maintain_table(root / "broker_decisions", right_away)
    assert (report.compacted, report.vacuumed) == (25, 0)  # the table says 7 days
    sink.create_tables(root, table_properties(right_away, TRIGGER))  # as the job starts
    _commit(root, 25, 50)
    report = maintain_table(root / "broker_decisions", right_away)
    assert (report.compacted, report.vacuumed, report.files_after) == (26, 51, 2)
    left = {p.name for p in (root / "broker_decisions").glob("*/part-*.parquet")}
    assert len(left) == 2 and not left & files


HOURS_6 = 6 * 3_600_000


def _commit_days(root: Path, batches: int) -> None:
    """A batch every 6 hours from 2026-11-21 23:50, with its clock in ``batches``."""
    for batch in range(batches):
        at = T0 + batch * HOURS_6
        metas = sink.write_file(root, "broker_decisions", _decisions(batch, at), batch, "app")
        counter = dict.fromkeys(sink.META.names) | {"table": None, "task": 0, "clock": at}
        sink.commit_batch(root, batch, [*metas, counter], "app", write_ms=0)


def test_days_older_than_keep_go_whole_and_batches_go_by_their_clock(root: Path) -> None:
    _commit_days(root, 12)  # 11-21 (batch 0), 11-22 (1 to 4), 11-23 (5 to 8), 11-24 (9 to 11)
    decisions, batches = root / "broker_decisions", root / "batches"
    kept = [r for r in _rows(decisions) if r["effective_at"] >= T0 + 5 * HOURS_6]
    unchanged = maintain(root, SETTINGS)  # keep: 90 days
    assert sum(r.expired for r in unchanged) == 0 and len(_rows(decisions)) == 36

    one_day = SETTINGS.model_copy(update={"keep": DAY})
    reports = {r.name: r for r in maintain(root, one_day)}

    assert reports["broker_decisions"].expired == 15  # 11-21 and 11-22: 5 batches of 3 rows
    assert _rows(decisions) == kept
    days = {p[sink.PARTITION] for p in DeltaTable(str(decisions)).partitions()}
    assert days == {"2026-11-23", "2026-11-24"}
    assert reports["batches"].expired == 5
    left = DeltaTable(str(batches)).to_pyarrow_table(columns=["batch_id"])
    assert sorted(left["batch_id"].to_pylist()) == list(range(5, 12))
    again = maintain(root, one_day)
    assert sum(r.expired for r in again) == 0
    folders = {p.name for p in decisions.glob(f"{sink.PARTITION}=*")}
    assert len(folders) == 4  # their files stay for readers of older versions
    sink.create_tables(root, table_properties(_right_away(one_day), TRIGGER))
    maintain(root, one_day)
    folders = {p.name for p in decisions.glob(f"{sink.PARTITION}=*")}
    assert folders == {f"{sink.PARTITION}=2026-11-23", f"{sink.PARTITION}=2026-11-24"}


def test_expiry_gives_way_to_an_append_into_a_day_it_deletes(root: Path) -> None:
    """``faultline maintain`` beside the job: the job's append into an old day commits first,
    so the delete, planned on the version before it, is given up; the next run deletes it."""
    _commit_days(root, 12)
    path = root / "broker_decisions"
    planned = DeltaTable(str(path))
    files = pa.table(planned.get_add_actions(flatten=True))
    metas = sink.write_file(root, "broker_decisions", _decisions(12, T0), 12, "app")
    sink.commit_batch(root, 12, metas, "app", write_ms=0)  # 2026-11-21, meanwhile
    assert maintain_mod._expire(planned, files, DAY) == 0
    assert len(_rows(path)) == 13 * 3
    assert maintain_table(path, SETTINGS.model_copy(update={"keep": DAY})).expired == 18


def test_a_task_writes_into_a_day_whose_empty_folder_maintenance_removes_as_it_writes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = sink.pq.write_table
    removed: list[Path] = []

    def after_removal(rows: pa.Table, path: Path) -> None:
        if not removed:  # maintenance's rmdir between the task's mkdir and its write
            path.parent.rmdir()
            removed.append(path.parent)
        write(rows, path)

    monkeypatch.setattr(sink.pq, "write_table", after_removal)
    _commit(root, 0, 1)
    assert removed and removed[0].is_dir()
    assert len(_rows(root / "broker_decisions")) == 3


def test_keep_is_a_day_at_least_or_null() -> None:
    assert MaintenanceConfig(keep=None).keep is None
    assert MaintenanceConfig(keep="2d").keep == 2 * DAY
    with pytest.raises(ValueError, match="greater than or equal to 86400000"):
        MaintenanceConfig(keep="12h")


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
        == f"faultline: --output {root / 'nothing'}: no faultline tables here; {OUTPUT_HINT}"
    )


def test_the_log_keeps_about_log_commits_entries_however_long_the_job_runs(tmp_path: Path) -> None:
    """Every commit lists the table's log, so the log must not grow with the job's age: with
    ``log_commits`` 20 of a 50 ms trigger and a log checkpoint every 10 commits, 100 batches
    (one per trigger at most) leave the entries of about the last 20 commits, removed by the
    writer itself at its log checkpoints, and every row."""
    settings = MaintenanceConfig(checkpoint_interval=10, log_commits=20)
    sink.create_tables(tmp_path, table_properties(settings, 50))
    log = tmp_path / "broker_decisions" / "_delta_log"
    most = 0
    for batch in range(100):
        started = time.monotonic()
        _commit(tmp_path, batch, batch + 1)
        time.sleep(max(0.0, 0.05 - (time.monotonic() - started)))
        most = max(most, len(list(log.glob("*.json"))))
    assert most <= settings.log_commits + 2 * settings.checkpoint_interval, most
    assert len(_rows(tmp_path / "broker_decisions")) == 100 * 3
    assert DeltaTable(str(tmp_path / "broker_decisions")).version() == 100


def test_maintenance_bounds_a_log_that_delta_lake_wrote(tmp_path: Path) -> None:
    """Delta Lake writes a ``.crc`` beside each commit and cleans its log only up to the start of
    the day: maintenance (delta-rs's ``cleanup_metadata``) removes the older commits and their
    checksums alike, and the table reads the same."""
    settings = MaintenanceConfig(checkpoint_interval=10, log_commits=1)
    sink.create_tables(tmp_path, table_properties(_right_away(settings), 1000))
    path = tmp_path / "broker_decisions"
    log = path / "_delta_log"
    _commit(tmp_path, 0, 25)
    for commit in log.glob("*.json"):  # as Delta Lake leaves them
        commit.with_suffix(".crc").write_text("{}")
    time.sleep(1.1)  # older than the retention: a second
    before = _rows(path)
    maintain_table(path, _right_away(settings))
    left = sorted(int(p.name[:20]) for p in log.glob("*.json"))
    assert left[0] >= 19, left  # back to the latest log checkpoint (version 20)
    checksums = sorted(int(p.name[:20]) for p in log.glob("*.crc"))
    assert checksums == [v for v in range(26) if v >= left[0]], checksums
    assert _rows(path) == before
