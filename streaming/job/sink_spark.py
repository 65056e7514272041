"""``sink: delta-spark``: the tables written through Spark's Delta Lake data source, for clusters
that have Delta Lake's jars and want every commit made by Delta Lake itself.

The stateful operator's tasks write each table's rows as Parquet files into a staging folder
(``<output>/_staging/<table>``) instead of the tables' folders; the driver then appends each
table's staged files with ``df.write.format("delta")`` and Delta's idempotent-write options
``txnAppId`` (the job's app id) and ``txnVersion`` (the batch id), so a replayed batch is
skipped by Delta Lake, as the default sink skips it with delta-rs; then the staged files go.
The ``batches`` row is written last, the same way.

These machines cannot install Delta Lake's jars (Maven Central is out of reach), so this path is
tested here with Spark's Parquet data source in Delta's place (everything but Delta's own commit)
and with the error a Spark without Delta Lake gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from streaming.job.sink import table_schema, with_timestamps
from udfs.errors import ConfigError
from udfs.schema import BATCHES, PARTITION, TIME_COLUMNS
from udfs.vocabulary import TableName

STAGING = "_staging"

SESSION = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""The session settings Delta Lake needs."""


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
            "sink = 'delta-spark': this Spark has no Delta Lake (add "
            "io.delta:delta-spark_2.13:<the version for this Spark> to spark.jars.packages, or "
            "its jars to spark.jars), or use sink: delta-rs, faultline's own writer"
        ) from None


@dataclass(frozen=True)
class DeltaSpark:
    """A :class:`streaming.job.sink.Committer` through Spark's ``format`` (``delta``; the tests use
    ``parquet``)."""

    spark: Any
    root: Path
    app_id: str
    flat: frozenset[str] = frozenset()
    """Tables made before they were partitioned (:func:`streaming.job.sink.flat_tables`)."""
    format: str = "delta"

    @property
    def staging(self) -> Path:
        return self.root / STAGING

    def files(self, name: str, entries: list[dict[str, Any]], batch_id: int, now_ms: int) -> bool:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        paths = [self.staging / name / e["path"] for e in entries]
        schema = table_schema(name)
        stored = pa.schema([f for f in schema if f.name != PARTITION])
        frame = self.spark.read.schema(from_arrow_schema(stored)).parquet(*map(str, paths))
        writer = frame.write
        if name in TIME_COLUMNS and name not in self.flat:
            day = F.to_date(F.timestamp_millis(F.col(TIME_COLUMNS[name])))  # the session is UTC
            writer = frame.withColumn(PARTITION, day).write.partitionBy(PARTITION)
        self._append(writer, name, batch_id)
        for path in paths:
            path.unlink(missing_ok=True)
        return True  # Delta Lake skips a batch it has by itself, without saying so

    def row(self, row: dict[str, Any], batch_id: int) -> bool:
        """Delta's own writer skips a batch it has (``txnVersion``) without saying so: True."""
        from pyspark.sql.pandas.types import from_arrow_schema

        data = with_timestamps(TableName.BATCHES, pa.Table.from_pylist([row], schema=BATCHES))
        frame = self.spark.createDataFrame(data.to_pylist(), from_arrow_schema(data.schema))
        self._append(frame.write, TableName.BATCHES, batch_id)
        return True

    def _append(self, writer: Any, name: str, batch_id: int) -> None:
        (
            writer.format(self.format)
            .mode("append")
            .option("txnAppId", self.app_id)
            .option("txnVersion", str(batch_id))
            .option("mergeSchema", "true")
            .save(str(self.root / name))
        )
