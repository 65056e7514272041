"""Benchmark: how long a reader takes to read one hour of ``broker_decisions`` after many small
commits, with and without the job's table maintenance.

Each commit is one micro-batch's file, written and committed by the sink's own functions (a
file per batch, ``--rows`` decisions over 6 s of event time), so 10,000 commits cover about 17
hours over two days. A read is what a dashboard or a SQL user does on arrival: open the table
(read its Delta log), then read the rows of the last hour, filtered on ``effective_at`` (the
files' statistics and the ``event_date`` partitions let it skip the rest). Prints, per row, the
commits, the files the table holds, the seconds to build it and the median seconds of a read.

    python -m streaming.bench.tables --commits 100 10000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from streaming.config import JobConfig, MaintenanceConfig
from streaming.job import sink
from streaming.job.maintain import maintain_table, table_properties
from udfs.schema import TABLES
from udfs.vocabulary import Decision, TableName

T0 = 1_795_305_000_000  # 2026-11-21 23:50:00 UTC
SPAN = 6_000
HOUR = 3_600_000


def _decisions(batch: int, rows: int) -> pa.Table:
    start = T0 + batch * SPAN
    return pa.Table.from_pylist(
        [
            {
                "scope": "cluster",
                "scope_key": "BenchCluster",
                "cluster": "BenchCluster",
                "broker_name": f"broker-{i % 16:02d}",
                "decision": (Decision.ISOLATE, Decision.EXTEND, Decision.RESTORE)[i % 3],
                "effective_at": start + i * SPAN // rows,
                "available_from": start + 10_000,
                "reason": "REMOTING_EXCEPTION after 3 ms (attempt 0): not available for 10000 ms",
                "cause_event_id": f"e-{batch}-{i}",
                "profile": "rocketmq-5",
            }
            for i in range(rows)
        ],
        schema=TABLES[TableName.BROKER_DECISIONS],
    )


def build(root: Path, commits: int, rows: int, every: int) -> float:
    """``commits`` batches into ``root/broker_decisions``, maintained every ``every`` batches
    (0: never); returns the seconds it took."""
    settings = MaintenanceConfig()
    sink.create_tables(root, table_properties(settings, JobConfig().trigger_interval))
    path = root / TableName.BROKER_DECISIONS
    started = time.perf_counter()
    for batch in range(commits):
        entries = sink.write_file(
            root, TableName.BROKER_DECISIONS, _decisions(batch, rows), batch, "b"
        )
        sink.commit_table(path, entries, "bench", batch, int(time.time() * 1000))
        if every and (batch + 1) % every == 0:
            maintain_table(path, settings)
    return time.perf_counter() - started


def read_hour(path: Path, end: int) -> tuple[float, int]:
    """One reader's seconds to open the table and read the hour before ``end``, and its rows."""
    started = time.perf_counter()
    rows = DeltaTable(str(path)).to_pyarrow_table(
        filters=[("effective_at", ">=", end - HOUR), ("effective_at", "<", end)]
    )
    return time.perf_counter() - started, rows.num_rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, nargs="+", default=[100, 10_000])
    parser.add_argument("--rows", type=int, default=20, help="decisions per commit")
    parser.add_argument("--reads", type=int, default=5, help="reads per figure (median)")
    parser.add_argument("--every", type=int, default=MaintenanceConfig().every)
    args = parser.parse_args(argv)
    print("commits  maintenance  files  build s  read s (median)  rows read")
    for commits in args.commits:
        for every in (0, args.every):
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp)
                built = build(root, commits, args.rows, every)
                path = root / TableName.BROKER_DECISIONS
                files = len(DeltaTable(str(path)).file_uris())
                end = T0 + commits * SPAN
                reads = [read_hour(path, end) for _ in range(args.reads)]
                seconds = statistics.median(r[0] for r in reads)
                label = f"every {every}" if every else "none"
                print(
                    f"{commits:>7}  {label:<11}  {files:>5}  {built:>7.1f}  {seconds:>15.3f}  "
                    f"{reads[0][1]:>9}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
