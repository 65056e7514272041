"""``sink: delta-spark``. Delta Lake's jars cannot be installed here, so the committer runs with
Spark's Parquet data source in Delta's place: staged files in, one append per table and batch,
the partition column, the ``batches`` row, the staging folder emptied. What Delta itself adds (the
``txnAppId``/``txnVersion`` skip of a replayed batch) is Delta Lake's, documented, not tested
here; the error a Spark without Delta Lake gives is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from streaming.job import sink
from streaming.job.sink_spark import STAGING, DeltaSpark
from tests.streaming.conftest import Job, batches_committed, settings

pytestmark = pytest.mark.jvm

MIDNIGHT = 1_795_305_600_000  # 2026-11-22 00:00:00 UTC


@pytest.fixture
def utc(spark: Any) -> Iterator[Any]:
    """The worker's session in UTC, as the job sets it for this sink."""
    with settings(spark, spark__sql__session__timeZone="UTC"):
        yield spark


def test_staged_files_are_appended_per_table_and_leave_the_staging_folder(
    utc: Any, tmp_path: Path
) -> None:
    spark = utc
    rows = [
        {"cluster": "C", "broker_name": "b", "event_id": f"e{i}", "event_time": MIDNIGHT + t}
        for i, t in enumerate((-2_000, -1, 0, 5_000))
    ]
    frame = pa.Table.from_pylist(rows, schema=sink.TABLES["heartbeats"])
    committer = DeltaSpark(spark, tmp_path, "app", format="parquet")
    metas = sink.write_file(committer.staging, "heartbeats", frame, 7, "app")
    assert len(metas) == 2  # one file per day

    done = sink.commit_batch(tmp_path, 7, metas, "app", write_ms=3, committer=committer)

    assert done["committed"] == {"heartbeats": 4}
    written = spark.read.parquet(str(tmp_path / "heartbeats")).toPandas()
    got = sorted(
        (r.event_id, str(r.event_date), r.event_time_ts.isoformat(), r.batch_id)
        for r in written.itertuples()
    )
    assert got == [
        ("e0", "2026-11-21", "2026-11-21T23:59:58", 7),  # in the session's time zone: UTC
        ("e1", "2026-11-21", "2026-11-21T23:59:59.999000", 7),
        ("e2", "2026-11-22", "2026-11-22T00:00:00", 7),
        ("e3", "2026-11-22", "2026-11-22T00:00:05", 7),
    ]
    assert not list((tmp_path / STAGING).rglob("*.parquet"))
    batch = spark.read.parquet(str(tmp_path / "batches")).toPandas()
    assert batch[["batch_id", "write_ms", "rows_written"]].values.tolist() == [[7, 3, 4]]


def test_without_delta_lakes_jars_the_job_stops_before_it_starts(job: Job, tmp_path: Path) -> None:
    config = tmp_path / "delta-spark.yaml"
    config.write_text("sink: delta-spark\n")
    out = tmp_path / "out"
    result = job(
        "run", "--scenario", "quick", "--config", str(config), "--output", str(out),
        "--checkpoint", str(tmp_path / "ck"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("faultline: sink = 'delta-spark': this Spark has no Delta Lake"), last
    assert batches_committed(out) == 0
