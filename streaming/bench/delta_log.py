"""What a Delta commit costs as a table's log grows: one faultline table whose ``_delta_log``
holds ``--entries`` commits (a month at the default 500 ms trigger is 5,184,000), then
``--commits`` batches committed to it as the job commits them, timed, beside the same on a
fresh table. Prints each sink's median commit time for both, and the log's entries.

    python -m streaming.bench.delta_log [--entries 5184000] [--commits 20] [--sink delta-rs]

The entries are built, not committed (a month of real commits would take a month): the table's
first commits are real, each later one is a commit that changed nothing (its ``commitInfo``
only, one file hard-linked under 60,000 versions' names, so a million entries cost a million
directory entries and 17 inodes), and a checkpoint at the last one (a copy of a real checkpoint:
the table's state is the same), as ``delta.checkpointInterval`` would leave it. A reader or writer
then reads the checkpoint and the commits after it, and lists the log's folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from streaming.job import sink
from udfs.schema import TABLES

NAME = "heartbeats"
APP = "delta-log-bench"
T0 = 1_795_255_200_000
LINKS = 60_000
"""Names per built commit file (ext4 allows a file 65,000)."""
Maker = Callable[[Path], Callable[[int], None]]
"""A sink's committer for a root: it commits batch N of the benchmark's table."""


def _rows(batch: int, n: int = 200) -> pa.Table:
    rows = [
        {"cluster": "C", "broker_name": f"b{i % 6}", "event_id": f"e{batch}-{i}",
         "event_time": T0 + batch * 500 + i}
        for i in range(n)
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=TABLES[NAME])


def grow(root: Path, entries: int) -> int:
    """Make the table's log ``entries`` commits long (see the module's docstring); the number
    of files in ``_delta_log`` after."""
    log = root / NAME / "_delta_log"
    table = DeltaTable(str(root / NAME))
    table.create_checkpoint()
    last = table.version()
    marker = json.loads((log / "_last_checkpoint").read_text())
    checkpoint = log / f"{last:020d}.checkpoint.parquet"
    info = {"timestamp": int(time.time() * 1000), "operation": "WRITE",
            "operationParameters": {"mode": "Append"}, "isBlindAppend": True}  # fmt: skip
    bases = []
    for version in range(last + 1, entries):
        if (version - last - 1) % LINKS == 0:  # a file takes at most 65,000 names on ext4
            bases.append(log / f".empty-{version}.json")
            bases[-1].write_text(json.dumps({"commitInfo": info}) + "\n")
        os.link(bases[-1], log / f"{version:020d}.json")
    top = entries - 1
    shutil.copyfile(checkpoint, log / f"{top:020d}.checkpoint.parquet")
    marker["version"] = top
    marker.pop("checksum", None)
    (log / "_last_checkpoint").write_text(json.dumps(marker))
    for base in bases:
        base.unlink()
    return sum(1 for _ in os.scandir(log))


def _delta_rs(root: Path) -> Callable[[int], None]:
    committer = sink.DeltaRs(root, APP)

    def commit(batch: int) -> None:
        metas = sink.write_file(root, NAME, _rows(batch), batch, APP)
        committer.files(NAME, metas, batch, int(time.time() * 1000))

    return commit


def _delta_spark(spark: Any) -> Maker:
    def make(root: Path) -> Callable[[int], None]:
        from streaming.job.sink_spark import DeltaSpark

        committer = DeltaSpark(spark, root, APP)

        def commit(batch: int) -> None:
            metas = sink.write_file(committer.staging, NAME, _rows(batch), batch, APP)
            committer.files(NAME, metas, batch, int(time.time() * 1000))

        return commit

    return make


def measure(root: Path, make: Maker, first: int, n: int) -> list[float]:
    """Seconds per commit of ``n`` batches from batch ``first`` (a new committer: the first
    commit also opens the table, as a restarted job's does)."""
    commit = make(root)
    times = []
    for batch in range(first, first + n):
        started = time.perf_counter()
        commit(batch)
        times.append(time.perf_counter() - started)
    return times


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streaming.bench.delta_log", description=__doc__
    )
    parser.add_argument("--entries", type=int, default=5_184_000)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--sink", choices=("delta-rs", "delta-spark"), default="delta-rs")
    parser.add_argument("--dir", type=Path, help="where to build the tables (default: temporary)")
    args = parser.parse_args(argv)
    makers: dict[str, Maker] = {"delta-rs": _delta_rs}
    if args.sink == "delta-spark":
        from streaming.config import load_job_config
        from streaming.job.session import spark_jars, spark_session

        config = load_job_config(None, {"sink": "delta-spark"})
        work = Path(tempfile.mkdtemp(prefix="faultline-delta-log-"))
        makers["delta-spark"] = _delta_spark(spark_session(config, work, spark_jars(config)))
    make = makers[args.sink]
    base = args.dir or Path(tempfile.mkdtemp(prefix="faultline-delta-log-"))
    try:
        results = {}
        for label, entries in (("fresh", 0), ("grown", args.entries)):
            root = base / label
            sink.create_tables(root)
            measure(root, make, 0, 2)  # two real commits
            files = (
                grow(root, entries)
                if entries
                else sum(1 for _ in os.scandir(root / NAME / "_delta_log"))
            )
            times = measure(root, make, 2, args.commits)
            results[label] = (files, times)
            print(
                f"{args.sink}, {label}: {files:,} files in _delta_log; commit median "
                f"{statistics.median(times) * 1000:,.1f} ms, first (opening the table) "
                f"{times[0] * 1000:,.1f} ms, max {max(times) * 1000:,.1f} ms",
                flush=True,
            )
            shutil.rmtree(root, ignore_errors=True)
        fresh, grown = (statistics.median(results[k][1]) for k in ("fresh", "grown"))
        print(f"grown / fresh commit median: {grown / fresh:.2f}")
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
