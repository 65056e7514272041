"""``sink: delta-spark``: the tables written through Spark's Delta Lake data source, for clusters
that have Delta Lake's jars and want every commit made by Delta Lake itself.

The stateful operator's tasks write each table's rows as Parquet files into a staging folder
(``<output>/_staging/<table>``) instead of the tables' folders; the driver then appends each
table's staged files with ``df.write.format("delta")`` and Delta's idempotent-write options
``txnAppId`` (the job's app id) and ``txnVersion`` (the batch id), so that Delta Lake itself
refuses a batch twice; then the batch's staged files go. The ``batches`` row is written last, the
same way. A table that has the batch already (a batch replayed after a crash) is skipped before
anything is read, and says so, so that the job counts a replayed batch once.

Delta Lake's jars are the ``delta`` set of ``conf/jars/pom.xml`` (``faultline jars fetch``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from streaming.job import failpoints
from streaming.job.sink import file_prefix, is_committed, table_schema, with_timestamps
from udfs.errors import ConfigError
from udfs.schema import BATCHES, PARTITION, TIME_COLUMNS
from udfs.vocabulary import TableName

STAGING = "_staging"

SESSION = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""The session settings Delta Lake needs."""

RUNTIME = {
    # a table's state is rebuilt from its log in this many tasks (Delta's default 50): measured
    # on 2 cores, a batch's commit into one table took 4.5 s in 50 and 0.8 s in 1 (faultline's
    # tables hold few files: maintenance compacts them)
    "spark.databricks.delta.snapshotPartitions": "1",
}
"""Delta Lake's settings for the job's commits, set on any session the job runs on."""


def check_delta(spark: Any, table: Path) -> None:
    """Stop with a :class:`ConfigError` when this Spark cannot read ``table`` as Delta: its
    data source is not found, or the session's Delta classes (:data:`SESSION`) are not."""
    try:
        spark.read.format("delta").load(str(table)).limit(0).collect()
    except Exception as exc:
        text = str(exc)
        missing = "ClassNotFoundException" in text and "delta" in text
        if not missing and "DATA_SOURCE_NOT_FOUND" not in text:
            raise
        raise ConfigError(
            "sink = 'delta-spark': this Spark session has no Delta Lake; make it with Delta "
            "Lake's jars (`faultline jars fetch delta`: spark.jars, and the settings of "
            "streaming.job.sink_spark.SESSION), or use sink: delta-rs, faultline's own writer"
        ) from None


@dataclass(frozen=True)
class DeltaSpark:
    """A :class:`streaming.job.sink.Committer` through Delta Lake's own writer."""

    spark: Any
    root: Path
    app_id: str
    flat: frozenset[str] = frozenset()
    """Tables made before they were partitioned (:func:`streaming.job.sink.flat_tables`)."""

    @property
    def staging(self) -> Path:
        return self.root / STAGING

    def files(self, name: str, entries: list[dict[str, Any]], batch_id: int, now_ms: int) -> bool:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        path = self.root / name
        if is_committed(DeltaTable(str(path)), self.app_id, batch_id):  # a replayed batch
            self._unstage(name, batch_id)
            return False
        staged = [str(self.staging / name / e["path"]) for e in entries]
        schema = table_schema(name)
        stored = pa.schema([f for f in schema if f.name != PARTITION])
        frame = self.spark.read.schema(from_arrow_schema(stored)).parquet(*staged)
        writer = frame.write
        if name in TIME_COLUMNS and name not in self.flat:
            day = F.to_date(F.timestamp_millis(F.col(TIME_COLUMNS[name])))  # the session is UTC
            writer = frame.withColumn(PARTITION, day).write.partitionBy(PARTITION)
        failpoints.reach(f"before-commit-{name}", batch_id)
        self._append(writer, name, batch_id)
        failpoints.reach(f"after-commit-{name}", batch_id)
        self._unstage(name, batch_id)
        return True

    def _unstage(self, name: str, batch_id: int) -> None:
        """The batch's staged files of the table, this attempt's and any an earlier attempt of
        the batch left behind."""
        for path in (self.staging / name).rglob(f"{file_prefix(self.app_id, batch_id)}*"):
            path.unlink(missing_ok=True)

    def row(self, row: dict[str, Any], batch_id: int) -> bool:
        from pyspark.sql.pandas.types import from_arrow_schema

        if is_committed(DeltaTable(str(self.root / TableName.BATCHES)), self.app_id, batch_id):
            return False
        data = with_timestamps(TableName.BATCHES, pa.Table.from_pylist([row], schema=BATCHES))
        frame = self.spark.createDataFrame(data.to_pylist(), from_arrow_schema(data.schema))
        frame = frame.coalesce(1)  # one file: Delta Lake leaves an empty task's file out of the log
        failpoints.reach("before-commit-batches", batch_id)
        self._append(frame.write, TableName.BATCHES, batch_id)
        failpoints.reach("after-commit-batches", batch_id)
        return True

    def _append(self, writer: Any, name: str, batch_id: int) -> None:
        (
            writer.format("delta")
            .mode("append")
            .option("txnAppId", self.app_id)
            .option("txnVersion", str(batch_id))
            .option("mergeSchema", "true")
            .save(str(self.root / name))
        )
