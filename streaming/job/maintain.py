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
- **log checkpoints** every ``checkpoint_interval`` commits (the table property
  ``delta.checkpointInterval``, applied by delta-rs at each commit) and the log entries older
  than ``log_retention`` removed (``cleanup_metadata``).

Every step is a Delta commit of its own or a deletion of unreferenced files, so a crash in the
middle loses nothing; maintenance changes no table metadata, so the job's appends, which only
add files, do not conflict with it (``faultline maintain`` may run beside the job).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from streaming.config import MaintenanceConfig
from udfs.schema import PARTITION, TABLES
from udfs.vocabulary import TableName


def table_properties(settings: MaintenanceConfig) -> dict[str, str]:
    """The Delta table properties that carry ``settings`` (readers other than faultline, such
    as Spark's VACUUM, honour them too)."""
    return {
        "delta.checkpointInterval": str(settings.checkpoint_interval),
        "delta.deletedFileRetentionDuration": _interval(settings.vacuum_retention),
        "delta.logRetentionDuration": _interval(settings.log_retention),
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
    seconds: float


def maintain_table(path: Path, settings: MaintenanceConfig) -> TableReport:
    """Compact the days of one table that hold ``min_files`` small files, then vacuum it and
    drop expired log entries."""
    started = time.perf_counter()
    table = DeltaTable(str(path))
    files = pa.table(table.get_add_actions(flatten=True))
    before = files.num_rows
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
    vacuumed = table.vacuum(
        retention_hours=settings.vacuum_retention // 3_600_000,
        dry_run=False,
        enforce_retention_duration=False,  # the setting's own check: 1h at least
        full=True,
    )
    table.cleanup_metadata()
    after = len(table.file_uris())
    return TableReport(
        path.name, before, after, compacted, len(vacuumed), time.perf_counter() - started
    )


def maintain(root: Path, settings: MaintenanceConfig) -> list[TableReport]:
    """Maintain every faultline table under ``root``."""
    return [maintain_table(root / name, settings) for name in [*TABLES, TableName.BATCHES]]


def print_reports(reports: list[TableReport], out: TextIO, heading: str) -> None:
    """One line for the whole run, then a line per table that changed."""
    compacted = sum(r.compacted for r in reports)
    after = sum(r.files_after for r in reports)
    vacuumed = sum(r.vacuumed for r in reports)
    seconds = sum(r.seconds for r in reports)
    print(
        f"{heading}: {compacted} files compacted, {vacuumed} vacuumed, {after} files in "
        f"{len(reports)} tables, {seconds:.1f} s",
        file=out,
        flush=True,
    )
