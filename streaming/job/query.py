"""The job's streaming query, in the order a record travels: the source's raw records, keyed by
cluster (and shard), through the one stateful operator, into the sink's commit of each
micro-batch."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa

from streaming.config import JobConfig, engine_config
from streaming.job import failpoints, sink
from streaming.job.checkpoint import checkpoint_app_id, planned
from streaming.job.kafka_options import spark_source_options
from streaming.job.maintain import maintain, print_reports
from streaming.job.metrics import Metrics
from streaming.job.progress import (
    PROGRESS_EVERY_S,
    BatchProgress,
    Progress,
    job_figures,
    reason,
    track_isolation,
)
from streaming.job.session import state_store_conf
from streaming.job.sink_spark import DeltaSpark
from streaming.job.sources.files import RAW_SCHEMA, FilesSource
from streaming.job.stateful import RECORDS, STATE_SCHEMA, Publish, state_function
from udfs.errors import ConfigError
from udfs.parse import cluster_keys
from udfs.vocabulary import TableName

QUERY_NAME = "faultline"

WORKER_LATE = "Python worker failed to connect back"
"""Spark's error when a Python process it started has not connected to it within 10 s, a limit no
setting changes. The Python sources (simulator, files) start one such process per query, their
runner, and on a busy machine (two cores, other JVMs starting) the interpreter's start alone can
take that long."""
WORKER_LATE_TEXT = (
    "Spark's Python worker for the source did not connect back within Spark's 10 s (a busy "
    "machine); starting the query again from its checkpoint"
)
START_ATTEMPTS = 3
"""How often the job starts its query while the source's Python worker is late
(:data:`WORKER_LATE`); a start resumes from the checkpoint, so each batch is still written once."""


def again(query: Any, attempt: int, out: TextIO) -> bool:
    """Whether to start the query again after its ``attempt``-th start ended: it failed because its
    source's Python worker was late (:data:`WORKER_LATE`) and starts remain; says so on ``out``."""
    failure = query.exception()
    if attempt >= START_ATTEMPTS or failure is None or WORKER_LATE not in str(failure):
        return False
    print(f"faultline: {WORKER_LATE_TEXT} ({attempt + 1} of {START_ATTEMPTS})", file=out)
    return True


def run_to_end(start: Callable[[], Any], out: TextIO = sys.stdout) -> Any:
    """The query ``start`` starts, once it ended, started :func:`again` as often as needed. Its
    failure, if any, is raised."""
    for attempt in range(1, START_ATTEMPTS + 1):
        query = start()
        with contextlib.suppress(Exception):  # read by again(), raised below
            query.awaitTermination()
        if not again(query, attempt, out):
            break
    query.awaitTermination()
    return query


SLOT = "slot"
SLOT_TRIES = 64


def slots(shards: int, partitions: int) -> Any:
    """Each record's copies, one per shard: the ``slot`` column, exploded. Shard ``i`` of a
    cluster gets the slot ``i + k * shards`` (the smallest such ``k``) that Spark's hash
    partitioning puts into task ``hash(cluster) + i`` (modulo the partitions), so a cluster's
    shards run in different tasks, not wherever the hash of ``(cluster, i)`` happens to fall. The
    state is stored by the same partitioning; that is why ``shuffle_partitions`` is fixed for a
    checkpoint. The engine reads the shard back as ``slot % shards``."""
    from pyspark.sql import functions as F

    return F.explode(
        F.expr(
            f"transform(sequence(0, {shards - 1}), i -> coalesce(array_min(filter("
            f"transform(sequence(0, {SLOT_TRIES - 1}), k -> i + k * {shards}), "
            f"s -> pmod(hash(key, s), {partitions}) = pmod(hash(key) + i, {partitions}))), i))"
        )
    )


def build_query(
    spark: Any,
    config: JobConfig,
    folder: Path | None,
    output: Path,
    checkpoint: Path,
    progress: Progress,
    on_batch: Callable[[dict[str, Any]], None] | None = None,
    publisher: Any = None,
    operator: Callable[..., Any] | None = None,
    listener: BatchProgress | None = None,
    metrics: Metrics | None = None,
) -> Any:
    """The job's streaming query, started. ``publisher`` (a :class:`streaming.kafka.Publisher`)
    receives the decisions and redeliveries of each batch; None publishes nothing. ``operator``
    replaces the stateful function (the benchmark's floor). ``listener``'s progress rows are
    written into ``batches`` as they come; ``metrics`` counts each committed batch."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.state import GroupStateTimeout

    app_id = checkpoint_app_id(checkpoint)
    flat = sink.flat_tables(output)
    committer: sink.Committer = sink.DeltaRs(output, app_id)
    files_root = output  # where the tasks write the tables' files
    if config.sink == "delta-spark":
        committer = DeltaSpark(spark, output, app_id, flat)
        files_root = committer.staging
    for name, setting in state_store_conf(config).items():  # a session may run several queries
        spark.conf.set(name, setting)
    raw = raw_records(spark, config, folder)
    # only the raw records cross the shuffle, keyed by their cluster as the parser reads it
    # (udfs.parse.cluster_keys: any other reading of the JSON would split a cluster's records
    # whose cluster it reads otherwise, such as a record naming two); the operator parses them
    records = raw.select(
        "key", "value", "origin", "ingest_ms", F.lit(None).cast("bigint").alias("lost")
    )
    early = None  # the operator's tasks publish the decisions as soon as they make them
    if publisher is not None and config.decisions_topic:
        timeout = config.kafka_outage_timeout
        early = Publish(
            tuple(sorted(config.kafka_conf().items())),
            config.decisions_topic,
            config.policies.recovery_probe_share,
            None if timeout is None else timeout / 1000,
        )
    grouping = ["key"]
    if config.stateful_shards > 1:  # every shard of a cluster gets every record of it
        records = records.withColumn(
            SLOT, slots(config.stateful_shards, config.shuffle_partitions)
        ).select("key", SLOT, *RECORDS)
        grouping.append(SLOT)
    files = records.groupBy(*grouping).applyInPandasWithState(
        operator
        or state_function(
            engine_config(config),
            str(files_root),
            app_id,
            config.stateful_shards,
            flat,
            early,
            measure=metrics is not None,
        ),
        from_arrow_schema(sink.META),
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.NoTimeout,
    )
    assert records.columns == [*grouping, *RECORDS]

    def write_batch(df: Any, batch_id: int) -> None:
        try:
            commit(df, batch_id)
        except Exception as exc:  # keep the reason while the whole error is at hand
            progress.error = reason(str(exc))
            raise

    def commit(df: Any, batch_id: int) -> None:
        started = time.time()
        metas = [r.asDict() for r in df.collect()]  # file metadata and counters only
        # what the driver publishes, and broker_decisions for the progress line
        wanted = (
            sink.PUBLISHED
            if early is None
            else (TableName.BROKER_DECISIONS, *sink.DRIVER_PUBLISHED)
        )
        rows = sink.read_rows(
            files_root, metas, wanted if publisher else (TableName.BROKER_DECISIONS,)
        )
        if publisher is not None:  # at least once onto Kafka, before the tables commit
            failed = publisher.failed
            failpoints.reach("before-publish", batch_id)
            sink.publish_batch(
                output,
                batch_id,
                rows,
                app_id,
                publisher,
                config.decisions_topic,
                config.policies.recovery_probe_share,
                decisions=early is None,
            )
            failpoints.reach("after-publish", batch_id)
            if metrics is not None:
                metrics.publish_failures.inc(publisher.failed - failed)
        write_ms = int((time.time() - started) * 1000)
        offsets = planned(checkpoint, batch_id) if config.source == "kafka" else None
        result = sink.commit_batch(output, batch_id, metas, app_id, write_ms, committer, offsets)
        if metrics is not None:
            metrics.committed(metas, result["new"])
            if result["new"] and result["skipped"]:
                metrics.skipped.inc(result["skipped"])
        track_isolation(rows[TableName.BROKER_DECISIONS], progress)
        progress.batches += 1
        progress.rows += result["input"]
        progress.messages += result["messages"]
        progress.last = {**result, "seconds": time.time() - started}
        if on_batch is not None:
            on_batch(progress.last)
        if listener is not None:  # the progress of the batches before, now and then
            listener.committed(batch_id, job_figures(progress))
            sink.record_progress(output, listener.take(PROGRESS_EVERY_S))
        every = config.maintenance.every
        if every and (batch_id + 1) % every == 0:
            print_reports(
                maintain(output, config.maintenance),
                sys.stdout,
                f"maintenance after batch {batch_id}",
            )

    writer = (
        files.writeStream.queryName(QUERY_NAME)
        .foreachBatch(write_batch)
        .option("checkpointLocation", str(checkpoint))
    )
    if config.once or config.source == "simulator":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.trigger_interval} milliseconds")
    return writer.start()


FETCH_MAX_WAIT_MS = 20
"""The Kafka source's ``kafka.fetch.max.wait.ms``: measured with ``streaming.bench.latency``
at 2,000 events/s, decision latency p50 1,927 ms with Kafka's 500, 1,427 ms with 20."""


def raw_records(spark: Any, config: JobConfig, folder: Path | None) -> Any:
    """The raw records: ``value``, ``origin``, ``ingest_ms`` (and ``key`` from the files)."""
    if config.source != "kafka":
        spark.dataSource.register(FilesSource)
        return (
            spark.readStream.format("faultline-files")
            .option("path", str(folder))
            .option("maxRecordsPerTrigger", str(config.max_records_per_batch))
            .load()
        )
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    options = {
        **spark_source_options(config.kafka_options),
        "kafka.bootstrap.servers": str(config.kafka_bootstrap),
        "startingOffsets": config.starting_offsets,
        "maxOffsetsPerTrigger": str(config.max_offsets_per_trigger or config.max_records_per_batch),
        "failOnDataLoss": str(config.fail_on_data_loss).lower(),
        # a read task's last fetch, at the end of the batch's range, finds no record and waits
        # this long for one (Kafka's default 500 ms): each batch's latency paid it
        "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
        **config.kafka_source_options,
    }
    if config.topic:
        options["subscribe"] = config.topic
    else:
        options["subscribePattern"] = str(config.subscribe_pattern)
    try:
        loaded = spark.readStream.format("kafka").options(**options).load()
    except AnalysisException as exc:
        if exc.getCondition() != "KAFKA_DATA_SOURCE_NOT_ENABLED":
            raise
        raise ConfigError(
            "source: kafka: this Spark session has no Kafka source; make it with the jars of "
            "`faultline jars fetch spark-kafka` (spark.jars)"
        ) from None
    return loaded.select(
        # any bytes: invalid UTF-8 becomes U+FFFD, and the parser's quarantine says why
        F.make_valid_utf8(F.col("value").cast("string")).alias("value"),
        F.concat_ws("/", "topic", "partition", "offset").alias("origin"),
        F.unix_millis("timestamp").alias("ingest_ms"),
    ).mapInArrow(with_keys, RAW_SCHEMA)


def with_keys(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each Kafka record with its cluster as the shuffle key (``udfs.parse.cluster_keys``, as
    the files sources key theirs)."""
    for batch in batches:
        yield batch.append_column("key", cluster_keys(batch.column("value")))
