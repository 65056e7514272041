"""Table maintenance for a job that runs for months: compaction, Delta log checkpoints and
VACUUM, run by the job between micro-batches (``maintenance.every``) or by ``faultline
maintain``.

The job writes one small file per task, table and batch; after 10,000 batches a reader would
list and open 10,000 files. Maintenance keeps each table to a few files per day:

- **compaction**: a day (partition) holding ``min_files`` files smaller than
  ``target_file_size`` is rewritten into files of up to that size (delta-rs ``optimize``, one
  commit per table; the rewritten files carry full statistics, so readers still skip by them);
- **VACUUM** deletes files that compaction replaced once they are ``vacuum_retention`` old, so
  a reader (a dashboard, ``faultline explain``) that loaded an older version keeps reading it,
  and files that no version references (left by a task attempt that failed) as old;
- **expiry** (``keep``, event time): the days of a table older than ``keep`` before its
  latest day are deleted, a whole partition at a time (a metadata-only Delta commit; VACUUM
  deletes their files later); ``batches``, which has no days, loses its batches up to the last
  one whose clock is that old;
- **log checkpoints** every ``checkpoint_interval`` commits (the table property
  ``delta.checkpointInterval``, applied by delta-rs and Delta Lake at each commit), and at each
  the log entries older than ``log_commits`` triggers removed (by delta-rs itself as it commits,
  and here by ``cleanup_metadata`` with the ``.crc`` files of the commits it removed: Delta
  Lake's own cleanup truncates its cut-off to the day, so it alone would keep a day of entries).
  A commit lists the log, so the log's length, not its age, is what must stay bounded.

Every step is a Delta commit of its own or a deletion of unreferenced files, so a crash in the
middle loses nothing; maintenance changes no table metadata, so the job's appends, which only
add files, do not conflict with it (``faultline maintain`` may run beside the job; its expiry
gives way, until its next run, to an append into a day it deletes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from streaming.config import MaintenanceConfig
from udfs.schema import PARTITION, TABLES
from udfs.vocabulary import TableName


def table_properties(settings: MaintenanceConfig, trigger_interval: int) -> dict[str, str]:
    """The Delta table properties that carry ``settings`` for a job that commits every
    ``trigger_interval`` ms (readers and writers other than faultline, such as Delta Lake's own,
    honour them too): the log keeps ``log_commits`` triggers' worth of entries, and both
    delta-rs and Delta Lake drop older ones at each log checkpoint.

    >>> table_properties(MaintenanceConfig(), 500)["delta.logRetentionDuration"]
    'interval 150 seconds'
    """
    return {
        "delta.checkpointInterval": str(settings.checkpoint_interval),
        "delta.deletedFileRetentionDuration": _interval(settings.vacuum_retention),
        "delta.logRetentionDuration": _interval(max(settings.log_commits * trigger_interval, 1000)),
        "delta.enableExpiredLogCleanup": "true",
    }


def _interval(ms: int) -> str:
    return f"interval {ms // 1000} seconds"


@dataclass(frozen=True)
class TableReport:
    """What maintenance did to one table."""

    name: str
    files_before: int
    files_after: int
    compacted: int
    """Files rewritten by compaction."""
    vacuumed: int
    """Files deleted by VACUUM."""
    expired: int
    """Rows deleted because they were older than ``keep``."""
    seconds: float


def maintain_table(path: Path, settings: MaintenanceConfig) -> TableReport:
    """Delete the days of one table older than ``keep``, compact its days that hold
    ``min_files`` small files, then vacuum it and drop expired log entries."""
    started = time.perf_counter()
    table = DeltaTable(str(path))
    files = pa.table(table.get_add_actions(flatten=True))
    before = files.num_rows
    expired = 0
    if settings.keep is not None:
        expired = _expire(table, files, settings.keep)
        if expired:
            files = pa.table(table.get_add_actions(flatten=True))
    small = files.filter(pc.less(files["size_bytes"], settings.target_file_size))
    compacted = 0
    column = f"partition.{PARTITION}"
    if column in small.column_names:
        counts = small.group_by(column).aggregate([("path", "count")])
        days = counts.filter(pc.greater_equal(counts["path_count"], settings.min_files))[column]
        days = pc.drop_null(days)  # rows without a time are few: left alone
        if len(days):
            done = table.optimize.compact(
                partition_filters=[(PARTITION, "in", [str(d) for d in days.to_pylist()])],
                target_size=settings.target_file_size,
            )
            compacted = int(done["numFilesRemoved"])
    elif small.num_rows >= settings.min_files:
        done = table.optimize.compact(target_size=settings.target_file_size)
        compacted = int(done["numFilesRemoved"])
    vacuumed = table.vacuum(  # after the table's delta.deletedFileRetentionDuration
        dry_run=False,
        enforce_retention_duration=False,  # the setting's own check: 1h at least
        full=True,
    )
    table.cleanup_metadata()
    _remove_orphan_checksums(path / "_delta_log")
    _remove_empty_days(path)
    after = len(table.file_uris())
    return TableReport(
        path.name, before, after, compacted, len(vacuumed), expired, time.perf_counter() - started
    )


DAY = 86_400_000


def _expire(table: DeltaTable, files: pa.Table, keep: int) -> int:
    """Delete what is older than ``keep`` before the table's latest day (whole days: the first
    day kept is the latest one minus ``keep`` rounded up to days); returns the rows deleted."""
    days = -(-keep // DAY)
    column = f"partition.{PARTITION}"
    if column in files.column_names:
        present = pc.drop_null(files[column])
        if not len(present):
            return 0
        latest = date.fromisoformat(str(pc.max(present)))
        first = (latest - timedelta(days=days)).isoformat()
        if str(pc.min(present)) >= first:
            return 0
        return _delete(table, f"{PARTITION} < '{first}'")
    if "max.clock" not in files.column_names or not files.num_rows:
        return 0  # batches: by clock
    latest = pc.max(files["max.clock"]).as_py()
    if latest is None:
        return 0
    first_ms = (latest // DAY - days) * DAY
    if pc.min(files["min.clock"]).as_py() >= first_ms:
        return 0
    old = table.to_pyarrow_table(columns=["batch_id"], filters=[("clock", "<", first_ms)])
    if not old.num_rows:
        return 0
    last = pc.max(old["batch_id"]).as_py()
    return _delete(table, f"batch_id <= {last}")


def _remove_orphan_checksums(log: Path) -> None:
    """The ``.crc`` files (Delta Lake writes one beside each commit) of commits that
    ``cleanup_metadata`` removed: delta-rs leaves them, and every commit lists them too."""
    versions = [int(p.name[:20]) for p in log.glob("*.json") if p.name[:20].isdigit()]
    if not versions:
        return
    oldest = min(versions)
    for crc in log.glob("*.crc"):
        if crc.name[:20].isdigit() and int(crc.name[:20]) < oldest:
            crc.unlink(missing_ok=True)


def _remove_empty_days(path: Path) -> None:
    """The folders of days whose files VACUUM deleted (expired, or compacted away): a folder a
    day would otherwise stay for ever. A writer recreates its day's folder as it writes."""
    for folder in path.glob(f"{PARTITION}=*"):
        try:
            folder.rmdir()
        except OSError:  # not empty
            continue


def _delete(table: DeltaTable, predicate: str) -> int:
    """The rows deleted, or 0 when a commit beside it (``faultline maintain`` beside the job,
    appending into an old day) came first: the next run deletes them."""
    try:
        return int(table.delete(predicate)["num_deleted_rows"])
    except CommitFailedError:
        return 0


def maintain(root: Path, settings: MaintenanceConfig) -> list[TableReport]:
    """Maintain every faultline table under ``root``, whose table properties carry
    ``settings``' retentions (:func:`table_properties`, applied as the job starts)."""
    return [maintain_table(root / name, settings) for name in [*TABLES, TableName.BATCHES]]


def print_reports(reports: list[TableReport], out: TextIO, heading: str) -> None:
    """One line for the whole run, then a line per table that changed."""
    compacted = sum(r.compacted for r in reports)
    after = sum(r.files_after for r in reports)
    vacuumed = sum(r.vacuumed for r in reports)
    expired = sum(r.expired for r in reports)
    seconds = sum(r.seconds for r in reports)
    print(
        f"{heading}: {compacted} files compacted, {vacuumed} vacuumed, {expired} rows expired, "
        f"{after} files in {len(reports)} tables, {seconds:.1f} s",
        file=out,
        flush=True,
    )
