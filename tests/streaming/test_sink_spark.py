"""``sink: delta-spark`` through Delta Lake's own jars (the ``delta`` set of conf/jars/pom.xml):
its crash matrix, and the tables of either sink read by Delta Lake's readers: every table, time
travel to a batch's version, ``DESCRIBE HISTORY``, ``VACUUM`` on a table faultline maintained."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from streaming.job import sink
from streaming.job.sink_spark import STAGING, DeltaSpark
from tests.streaming.conftest import (
    OUTPUT_TABLES,
    Job,
    canonical,
    same_tables,
    settings,
    table,
)
from tests.streaming.test_sink_crash import APP, batches, crash_matrix

pytestmark = pytest.mark.jvm

__all__ = ["batches"]  # the crash matrix's fixture, shared with test_sink_crash.py

MIDNIGHT = 1_795_305_600_000  # 2026-11-22 00:00:00 UTC


@pytest.fixture
def utc(spark: Any) -> Iterator[Any]:
    """The worker's session in UTC, as the job sets it for this sink."""
    with settings(spark, spark__sql__session__timeZone="UTC"):
        yield spark


def test_staged_files_are_appended_per_table_and_day_and_leave_the_staging_folder(
    utc: Any, tmp_path: Path
) -> None:
    spark = utc
    rows = [
        {"cluster": "C", "broker_name": "b", "event_id": f"e{i}", "event_time": MIDNIGHT + t}
        for i, t in enumerate((-2_000, -1, 0, 5_000))
    ]
    frame = pa.Table.from_pylist(rows, schema=sink.TABLES["heartbeats"])
    sink.create_tables(tmp_path)
    committer = DeltaSpark(spark, tmp_path, "app")
    metas = sink.write_file(committer.staging, "heartbeats", frame, 7, "app")
    assert len(metas) == 2  # one file per day

    done = sink.commit_batch(tmp_path, 7, metas, "app", write_ms=3, committer=committer)

    assert done["committed"] == {"heartbeats": 4}
    assert done["new"]
    written = spark.read.format("delta").load(str(tmp_path / "heartbeats")).toPandas()
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
    assert DeltaTable(str(tmp_path / "heartbeats")).transaction_version("app") == 7
    batch = spark.read.format("delta").load(str(tmp_path / "batches")).toPandas()
    assert batch[["batch_id", "write_ms", "rows_written"]].values.tolist() == [[7, 3, 4]]
    # the batch again, as after a crash before Spark's commit log: nothing twice, and not new
    metas = sink.write_file(committer.staging, "heartbeats", frame, 7, "app")
    again = sink.commit_batch(tmp_path, 7, metas, "app", write_ms=3, committer=committer)
    assert again["committed"] == {} and not again["new"]
    assert len(table(tmp_path, "heartbeats")) == 4 and len(table(tmp_path, "batches")) == 1
    assert not list((tmp_path / STAGING).rglob("*.parquet"))


def test_a_crash_at_every_commit_point_through_delta_lake_commits_each_batch_once(
    utc: Any, batches: list[dict[str, pa.Table]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """test_sink_crash.py's matrix, in the middle batch (each Delta Lake commit is a Spark job of
    about a second; the first and last batches are crashed in through delta-rs there and through
    the whole query in test_crash.py): the same rows as delta-rs commits, each batch once."""
    crash_matrix(
        batches,
        tmp_path,
        monkeypatch,
        1,
        lambda root: DeltaSpark(utc, root, APP),
        lambda root: root / STAGING,
    )
    assert not list((tmp_path / "crashed" / STAGING).rglob("*.parquet"))


@pytest.fixture(scope="module")
def delta_spark_run(job: Job, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick scenario through ``sink: delta-spark``, in two batches."""
    folder = tmp_path_factory.mktemp("delta-spark")
    (folder / "job.yaml").write_text("sink: delta-spark\n")
    result = job(
        "run", "--scenario", "quick", "--config", str(folder / "job.yaml"),
        "--max-records-per-batch", "1000",
        "--output", str(folder / "out"), "--checkpoint", str(folder / "ck"), cwd=folder,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return folder / "out"


def test_the_job_through_delta_lake_writes_the_tables_of_the_default_sink(
    delta_spark_run: Path, job: Job, tmp_path: Path
) -> None:
    """The same rows as the same run through delta-rs."""
    folder = tmp_path / "rs"
    result = job(
        "run", "--scenario", "quick", "--max-records-per-batch", "1000",
        "--output", str(folder / "out"), "--checkpoint", str(folder / "ck"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    same_tables(folder / "out", delta_spark_run)
    assert sorted(table(delta_spark_run, "batches")["batch_id"]) == [0, 1]


@pytest.mark.parametrize("sink_name", ["delta-rs", "delta-spark"])
def test_delta_lake_reads_every_table_travels_in_time_and_shows_history(
    spark: Any, delta_spark_run: Path, retained: Path, sink_name: str
) -> None:
    """Every table either sink wrote, read through ``spark.read.format("delta")``: the rows
    delta-rs reads; each table as of the version that committed batch 1; its history names the
    writer."""
    out = delta_spark_run if sink_name == "delta-spark" else retained / "out"
    for name in (*OUTPUT_TABLES, "batches"):
        path = str(out / name)
        read = spark.read.format("delta").load(path)
        assert read.count() == len(table(out, name)), name
        history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").toPandas()
        writes = history[history["operation"].isin(["WRITE", "STREAMING UPDATE", "CREATE TABLE"])]
        assert len(writes) >= 1, (name, history["operation"].tolist())
    batches = spark.read.format("delta").load(str(out / "batches")).toPandas()
    assert sorted(batches["batch_id"]) == list(range(len(batches)))
    # time travel: the first version of fault_items that has batch 1 has batches 0 and 1 only
    path = str(out / "fault_items")
    for version in sorted(h["version"] for h in DeltaTable(path).history()):
        then = spark.read.format("delta").option("versionAsOf", version).load(path).toPandas()
        if 1 in set(then["batch_id"]):
            break
    assert set(then["batch_id"]) == {0, 1}
    assert len(then) == (table(out, "fault_items")["batch_id"] <= 1).sum()


def test_vacuum_by_delta_lake_on_a_table_faultline_maintained(
    spark: Any, job: Job, retained: Path, tmp_path: Path
) -> None:
    """``faultline maintain`` compacts a table's small files and keeps the replaced ones for
    older readers; Delta Lake's own VACUUM then deletes exactly those, and the rows stay."""
    out = tmp_path / "out"
    shutil.copytree(retained / "out", out)
    (tmp_path / "job.yaml").write_text("maintenance: {min_files: 2}\n")
    maintained = job(
        "maintain", "--output", str(out), "--config", str(tmp_path / "job.yaml"), cwd=tmp_path
    )
    assert maintained.returncode == 0, maintained.stderr[-2000:]
    path = out / "fault_items"
    before = canonical(out, "fault_items")
    present = {p for p in path.rglob("*.parquet") if "_delta_log" not in p.parts}
    uris = DeltaTable(str(path)).file_uris()
    referenced = {Path(unquote(u.removeprefix("file://"))) for u in uris}
    assert present > referenced  # compaction left the files it replaced
    with settings(spark, spark__databricks__delta__retentionDurationCheck__enabled="false"):
        spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS")
    assert canonical(out, "fault_items") == before
    assert {p for p in path.rglob("*.parquet") if "_delta_log" not in p.parts} == referenced
