"""The streaming job: source -> one stateful operator (parse, engine, files) -> Delta, with live
progress and a summary at the end."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import uuid
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from streaming.client import decision_state, publish_order
from streaming.config import JobConfig, load_scenario, masked, scenario_path
from streaming.listener import PROGRESS_EVERY_S, BatchProgress
from streaming.maintain import maintain, print_reports, table_properties
from streaming.replay import record_run
from streaming.storage import from_failure
from udfs import engine
from udfs.errors import ConfigError
from udfs.rocketmq import DelayLevels
from udfs.schedule import DelayPolicy
from udfs.schema import TABLES

PROJECT = Path(__file__).resolve().parents[1]
QUERY_NAME = "faultline"
LISTENER_WAIT_S = 10.0


@dataclass
class Progress:
    """What the sink reports back to the driver's progress display."""

    batches: int = 0
    rows: int = 0
    last: dict[str, Any] = field(default_factory=dict)
    isolated: dict[tuple[str, str], int] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    error: str | None = None
    """The one-line reason a batch failed, read from the full error where Spark still has it."""


def engine_config(config: JobConfig) -> engine.EngineConfig:
    rules, tx = config.policies, config.transactions
    routes = {
        topic: tuple((b.broker_name, b.write_queue_nums, b.perm) for b in brokers)
        for topic, brokers in config.static_routes.items()
    }
    return engine.EngineConfig(
        scopes=config.scopes,
        cluster_profile=config.cluster_profile,
        default_client_profile=config.default_client_profile,
        default_latency_fault_enable=config.default_latency_fault_enable,
        allowed_lateness_ms=config.allowed_lateness,
        max_future_skew_ms=config.max_future_skew,
        evict_after_ms=config.evict_silent_producers_after,
        static_routes=routes,
        seed=config.seed,
        delays=DelayPolicy(DelayLevels.parse(config.delay_levels), config.max_redeliveries),
        send_msg_timeout_ms=config.send_msg_timeout,
        ignore_spent_budget=config.ignore_spent_budget,
        policies=engine.Policies()  # RocketMQ's rules alone
        if not rules.enabled
        else engine.Policies(
            isolation_cap=rules.isolation_cap,
            outlier_factor=rules.latency_outlier_factor,
            outlier_window_ms=rules.latency_outlier_window,
            outlier_min_sends=rules.latency_outlier_min_sends,
            outlier_min_latency_ms=rules.latency_outlier_min_latency,
            outlier_isolation_ms=rules.latency_outlier_isolation,
            probe_share=rules.recovery_probe_share,
            probe_max_ms=rules.recovery_probe_max,
            fault_aware_release=rules.fault_aware_release,
            report_queue_swaps=rules.report_queue_swaps,
        ),
        transactions=engine.BrokerTransactions(
            timeout_ms=tx.transaction_timeout,
            check_max=tx.check_max,
            check_interval_ms=tx.check_interval,
            file_reserved_ms=tx.file_reserved_time,
        ),
    )


def simulator_folder(config: JobConfig, output: Path) -> Path:
    """The scenario's events as JSON-lines under the output root, generated once: the same
    scenario file gives the same folder and the same events."""
    from streaming.simulator import simulate, write_jsonl

    scenario = load_scenario(config.scenario)
    digest = hashlib.sha256(scenario_path(config.scenario).read_bytes()).hexdigest()[:12]
    folder = output / "_simulator" / f"{scenario.name}-{digest}"
    if not (folder / "_SUCCESS").exists():
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        write_jsonl(simulate(scenario), tmp)
        (tmp / "_SUCCESS").touch()
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    return folder


PROVIDER_CLASS = "spark.sql.streaming.stateStore.providerClass"
STATE_STORES = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
"""Spark's state store provider of each ``state_store``."""


def state_store_conf(config: JobConfig) -> dict[str, str]:
    """Spark's settings for the job's ``state_store``. With changelog checkpointing RocksDB
    writes only the keys a batch changed (as hdfs's delta files do), and a snapshot every
    ``spark.sql.streaming.stateStore.minDeltasForSnapshot`` batches (10), uploaded by the
    background maintenance (every ``spark.sql.streaming.stateStore.maintenanceInterval``, 60 s),
    which then deletes the files older than ``min_batches_to_retain`` batches, as for hdfs."""
    conf = {PROVIDER_CLASS: STATE_STORES[config.state_store]}
    if config.state_store == "rocksdb":
        conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] = "true"
    return conf


def _spark(config: JobConfig, output: Path) -> Any:
    from pyspark.sql import SparkSession

    from streaming import failpoints

    local = config.master.startswith("local")
    python_env(local)
    builder = (
        SparkSession.builder.master(config.master)
        .appName("faultline")
        .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
        .config("spark.sql.streaming.minBatchesToRetain", str(config.min_batches_to_retain))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        # the parser's validation is one large expression; constraint propagation over it
        # (after filters are pushed through it) runs out of memory
        .config("spark.sql.constraintPropagation.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={_log4j(output)}")
    )
    if config.sink == "delta-spark":
        from streaming.sink_spark import SESSION

        for key, value in {**SESSION, "spark.sql.session.timeZone": "UTC"}.items():
            builder = builder.config(key, value)
    for name, value in failpoints.executor_env().items():
        builder = builder.config(f"spark.executorEnv.{name}", value)
    bundle = None if local else _bundle(output)
    if bundle is not None:
        # the driver's own Python helpers (the streaming source's planner) run in processes the
        # JVM starts from this environment
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(bundle), os.environ.get("PYTHONPATH")])
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if bundle is not None:
        spark.sparkContext.addPyFile(str(bundle))  # executors share no Python path with us
    return spark


SPARK_LOG = "spark.log"
SPARK_LOG_MB = 10
SPARK_LOG_FILES = 5


def _log4j(output: Path) -> Path:
    """Spark's own log goes to ``<output>/_job/spark.log`` (at most :data:`SPARK_LOG_FILES`
    files of :data:`SPARK_LOG_MB` MB), not to the console: the console is faultline's, and a
    job that runs for months must not fill a disk with its log."""
    folder = output / "_job"
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / SPARK_LOG
    conf = folder / "log4j2.properties"
    conf.write_text(
        "rootLogger.level = warn\n"
        "rootLogger.appenderRef.file.ref = file\n"
        "appender.file.type = RollingFile\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {log}\n"
        f"appender.file.filePattern = {log}.%i\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n"
        "appender.file.policies.type = Policies\n"
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy\n"
        f"appender.file.policies.size.size = {SPARK_LOG_MB}MB\n"
        "appender.file.strategy.type = DefaultRolloverStrategy\n"
        f"appender.file.strategy.max = {SPARK_LOG_FILES - 1}\n"
    )
    return conf


def python_env(local: bool) -> None:
    """The environment Spark's Python workers need: on a local master, this interpreter and the
    loopback address."""
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # PySpark warns once per process that pandas 3 is new to it; results are the same (see README)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")


def _bundle(output: Path) -> Path:
    """The job's code as a zip under the output root, for processes that cannot import it."""
    bundle = output / "_job" / "faultline.zip"
    bundle.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(bundle, "w") as zf:
        for package in ("udfs", "streaming"):
            for path in (PROJECT / package).rglob("*.py"):
                zf.write(path, path.relative_to(PROJECT))
    return bundle


SLOT = "slot"
SLOT_TRIES = 64


def _slots(shards: int, partitions: int) -> Any:
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
) -> Any:
    """The job's streaming query, started. ``publisher`` (a :class:`streaming.kafka.Publisher`)
    receives the decisions and redeliveries of each batch; None publishes nothing. ``operator``
    replaces the stateful function (the benchmark's floor). ``listener``'s progress rows are
    written into ``batches`` as they come."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.streaming.state import GroupStateTimeout

    from streaming import failpoints, sink
    from streaming.stateful import RECORDS, STATE_SCHEMA, Publish, state_function

    app_id = checkpoint_app_id(checkpoint)
    flat = sink.flat_tables(output)
    committer: sink.Committer = sink.DeltaRs(output, app_id)
    files_root = output  # where the tasks write the tables' files
    if config.sink == "delta-spark":
        from streaming.sink_spark import DeltaSpark

        committer = DeltaSpark(spark, output, app_id, flat)
        files_root = committer.staging
    for name, setting in state_store_conf(config).items():  # a session may run several queries
        spark.conf.set(name, setting)
    raw = _source(spark, config, folder)
    lost = F.col("lost") if "lost" in raw.columns else F.lit(None).cast("bigint")
    # only the raw records cross the shuffle, keyed by their cluster; the operator parses them.
    # faultline's sources read the key; for Spark's Kafka reader the JVM does (a record without
    # a readable cluster is keyed "default", as the parser defaults it)
    key = (
        F.col("key")
        if "key" in raw.columns
        else F.coalesce(F.get_json_object("value", "$.cluster"), F.lit("default"))
    )
    records = raw.select(
        key.alias("key"),
        "value",
        "origin",
        "ingest_ms",
        lost.alias("lost"),
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
            SLOT, _slots(config.stateful_shards, config.shuffle_partitions)
        ).select("key", SLOT, *RECORDS)
        grouping.append(SLOT)
    files = records.groupBy(*grouping).applyInPandasWithState(
        operator
        or state_function(
            engine_config(config), str(files_root), app_id, config.stateful_shards, flat, early
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
            progress.error = _reason(str(exc))
            raise

    def commit(df: Any, batch_id: int) -> None:
        started = time.time()
        metas = [r.asDict() for r in df.collect()]  # file metadata and counters only
        # what the driver publishes, and broker_decisions for the progress line
        wanted = sink.PUBLISHED if early is None else ("broker_decisions", *sink.DRIVER_PUBLISHED)
        rows = sink.read_rows(files_root, metas, wanted if publisher else ("broker_decisions",))
        if publisher is not None:  # at least once onto Kafka, before the tables commit
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
        write_ms = int((time.time() - started) * 1000)
        result = sink.commit_batch(output, batch_id, metas, app_id, write_ms, committer)
        _track_isolation(rows["broker_decisions"], progress)
        progress.batches += 1
        progress.rows += result["input"]
        progress.last = {**result, "seconds": time.time() - started}
        if on_batch is not None:
            on_batch(progress.last)
        if listener is not None:  # the progress of the batches before, now and then
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


def _source(spark: Any, config: JobConfig, folder: Path | None) -> Any:
    """The raw records: ``value``, ``origin``, ``ingest_ms`` (and ``lost`` from Kafka)."""
    if config.source != "kafka":
        from streaming.sources import FilesSource

        spark.dataSource.register(FilesSource)
        return (
            spark.readStream.format("faultline-files")
            .option("path", str(folder))
            .option("maxRecordsPerTrigger", str(config.max_records_per_batch))
            .load()
        )
    options = {
        "kafka.bootstrap.servers": str(config.kafka_bootstrap),
        "startingOffsets": config.starting_offsets,
        "maxOffsetsPerTrigger": str(config.max_offsets_per_trigger or config.max_records_per_batch),
        "failOnDataLoss": str(config.fail_on_data_loss).lower(),
        **{f"kafka.{k}": v for k, v in config.kafka_options.items()},
    }
    if config.topic:
        options["subscribe"] = config.topic
    else:
        options["subscribePattern"] = str(config.subscribe_pattern)
    if config.kafka_reader == "spark":  # Spark's JVM connector, where a cluster has it
        from pyspark.errors import AnalysisException
        from pyspark.sql import functions as F

        try:
            loaded = spark.readStream.format("kafka").options(**options).load()
        except AnalysisException as exc:
            if exc.getCondition() != "KAFKA_DATA_SOURCE_NOT_ENABLED":
                raise
            raise ConfigError(
                "kafka_reader = 'spark': this Spark has no Kafka connector (add "
                f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark.version} to spark.jars."
                "packages), or use kafka_reader: python, faultline's own reader"
            ) from None
        return loaded.select(
            F.col("value").cast("string").alias("value"),
            F.concat_ws("/", "topic", "partition", "offset").alias("origin"),
            F.unix_millis("timestamp").alias("ingest_ms"),
        )
    from streaming.kafka import KafkaSource

    options["maxReadTasks"] = str(spark.sparkContext.defaultParallelism)  # one per core
    if config.kafka_outage_timeout is not None:
        options["outageTimeout"] = str(config.kafka_outage_timeout)
    spark.dataSource.register(KafkaSource)
    return spark.readStream.format("faultline-kafka").options(**options).load()


def _track_isolation(decisions: list[dict[str, Any]], progress: Progress) -> None:
    for r in sorted(decisions, key=publish_order):
        key = (r["scope_key"], r["broker_name"])
        if r["scope"] != "cluster" or r["decision"].startswith("ROUTE"):
            continue
        if decision_state(r["decision"]) == "ISOLATED":
            progress.isolated[key] = r["available_from"]
        else:
            progress.isolated.pop(key, None)


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def run(
    config: JobConfig, out: TextIO = sys.stdout, operator: Callable[..., Any] | None = None
) -> int:
    """Run the job; print progress and a summary. Returns the exit code. A folder that cannot be
    written (a full disk, a read-only mount) stops it with a :class:`StorageError` naming it.
    ``operator`` replaces the stateful function (a benchmark's floor)."""
    roots = (Path(config.output).resolve(), Path(config.checkpoint).resolve())
    try:
        return _run(config, out, operator)
    except Exception as exc:
        fault = from_failure(exc, roots)
        if fault is None:
            raise
        raise fault from exc


def _run(config: JobConfig, out: TextIO, operator: Callable[..., Any] | None) -> int:
    from streaming import sink

    checkpoint = Path(config.checkpoint).resolve() / QUERY_NAME
    _check_source(config, checkpoint)
    if config.kafka_bootstrap and (config.source == "kafka" or config.kafka_outputs):
        from streaming.kafka import check_reachable

        check_reachable(config.kafka_conf())
    output = Path(config.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    folder: Path | None = None
    if config.source == "simulator":
        folder = simulator_folder(config, output)
    elif config.source == "files":
        folder = Path(str(config.path))
    sink.create_tables(output, table_properties(config.maintenance))
    _check_source(config, checkpoint, record=True)
    record_run(config, checkpoint)
    spark = _spark(config, output)
    if config.sink == "delta-spark":
        from streaming.sink_spark import check_delta

        check_delta(spark, output / "batches")
    progress = Progress()
    if config.source == "kafka":
        topics = config.topic or f"pattern {config.subscribe_pattern}"
        settings = masked(config.kafka_options)
        print(
            f"faultline: kafka source {topics} at {config.kafka_bootstrap}"
            + (f" with {settings}" if settings else ""),
            file=out,
        )
    else:
        print(f"faultline: {config.source} source {folder}", file=out)
    print(f"faultline: tables under {output}, checkpoint {checkpoint}", file=out)
    publisher = watch = None
    if config.kafka_bootstrap and (config.source == "kafka" or config.kafka_outputs):
        from streaming.outage import Watch

        interval = config.kafka_outage_log_interval / 1000
        watch = Watch(config.kafka_conf(), interval, checkpoint, out).start()
    if config.kafka_bootstrap and config.kafka_outputs:
        from streaming.kafka import Publisher

        timeout = config.kafka_outage_timeout
        publisher = Publisher(config.kafka_conf(), None if timeout is None else timeout / 1000)
    listener = BatchProgress(out)
    spark.streams.addListener(listener)
    query = build_query(
        spark,
        config,
        folder,
        output,
        checkpoint,
        progress,
        publisher=publisher,
        operator=operator,
        listener=listener,
    )
    shown = -1
    try:
        while query.isActive:
            try:
                query.awaitTermination(config.progress_interval / 1000)
            except Exception:  # the query failed: its reason is read below
                break
            if progress.batches != shown and progress.last:
                shown = progress.batches
                _print_progress(progress, out)
        if query.exception() is not None:
            failure = from_failure(query.exception(), (output, checkpoint))
            raise failure or RuntimeError(progress.error or _reason(str(query.exception())))
    except KeyboardInterrupt:
        if publisher is not None:  # a batch waiting for Kafka gives up; the restart redoes it
            publisher.cancel()
        query.stop()
        print("faultline: stopped", file=out)
    finally:
        listener.terminated.wait(LISTENER_WAIT_S)  # Spark's last progress comes before this
        try:
            sink.record_progress(output, listener.take())
        except Exception as exc:  # the run's own outcome matters more
            print(f"faultline: Spark's progress of the last batches not written: {exc}", file=out)
        spark.stop()
        if watch is not None:
            watch.stop()
        if publisher is not None:
            publisher.close()
    _print_summary(output, progress, out)
    return 0


SOURCE_MARK = "faultline-source.json"
LAYOUT_MARK = "faultline-layout.json"
APP_ID_FILE = "faultline-app-id"


def checkpoint_app_id(checkpoint: Path) -> str:
    """The job's id in the app transactions of its Delta commits: made once, when the checkpoint
    is, and kept in it, so a checkpoint that is moved, copied or mounted elsewhere resumes as the
    same job and commits nothing twice."""
    path = checkpoint / APP_ID_FILE
    if path.exists():
        return path.read_text().strip()
    if (checkpoint / "commits").is_dir():  # older faultline derived the id from the path
        made = "faultline-" + hashlib.sha256(str(checkpoint.resolve()).encode()).hexdigest()[:16]
    else:
        made = f"faultline-{uuid.uuid4().hex[:16]}"
    checkpoint.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(made + "\n")
    os.replace(tmp, path)
    return made


def _check_source(config: JobConfig, checkpoint: Path, record: bool = False) -> None:
    """A checkpoint holds one source's offsets: refuse to resume it with another source, which
    Spark would either reject with a long error or misread. ``record`` writes the mark."""
    if config.source == "kafka":
        mine = {"source": "kafka", "topics": config.topic or f"pattern {config.subscribe_pattern}"}
    elif config.source == "files":
        mine = {"source": "files", "path": str(Path(str(config.path)).resolve())}
    else:
        mine = {"source": "simulator", "scenario": config.scenario}
    mark = checkpoint / SOURCE_MARK
    if mark.exists():
        theirs = json.loads(mark.read_text())
        if theirs != mine:
            raise ConfigError(
                f"checkpoint {checkpoint} belongs to {theirs}, not to {mine}: give this source "
                "its own --checkpoint (and --output), or delete that checkpoint to start over"
            )
    elif record:
        checkpoint.mkdir(parents=True, exist_ok=True)
        mark.write_text(json.dumps(mine))
    _check_layout(config, checkpoint, record)


def _check_layout(config: JobConfig, checkpoint: Path, record: bool) -> None:
    """The stateful operator's state is stored per key and per task: a checkpoint keeps the
    ``stateful_shards`` it was made with, and with shards its ``shuffle_partitions`` (the slots
    are chosen for them), and its ``state_store``. A checkpoint made before the mark existed had
    one shard; one made before the mark held the state store used the one Spark's offsets log
    names."""
    mark = checkpoint / LAYOUT_MARK
    mine: dict[str, Any] = {
        "stateful_shards": config.stateful_shards,
        "state_store": config.state_store,
    }
    if config.stateful_shards > 1:
        mine["shuffle_partitions"] = config.shuffle_partitions
    if mark.exists():
        theirs = json.loads(mark.read_text())
    elif (checkpoint / "offsets").is_dir():
        theirs = {"stateful_shards": 1}
    else:
        if record:
            checkpoint.mkdir(parents=True, exist_ok=True)
            mark.write_text(json.dumps(mine))
        return
    theirs.setdefault("state_store", _logged_state_store(checkpoint))
    for key, value in theirs.items():
        if getattr(config, key) != value:
            raise ConfigError(
                f"{key}: the checkpoint {checkpoint} was made with {key}={value}, this run has "
                f"{getattr(config, key)}; its state cannot be read another way: keep {value}, "
                "or give this job a new --checkpoint (and --output)"
            )


def _logged_state_store(checkpoint: Path) -> str:
    """The state store Spark's offsets log names for the newest batch (each entry records the
    provider class), ``hdfs`` before the first batch."""
    logged = [int(p.name) for p in (checkpoint / "offsets").glob("*") if p.name.isdigit()]
    if not logged:
        return "hdfs"
    meta = json.loads((checkpoint / "offsets" / str(max(logged))).read_text().splitlines()[1])
    provider = str(meta.get("conf", {}).get(PROVIDER_CLASS, STATE_STORES["hdfs"]))
    return {v: k for k, v in STATE_STORES.items()}.get(provider, provider)


def _reason(error: str) -> str:
    """One line out of a Spark error: faultline's own message when there is one."""
    from streaming.outage import PREFIX

    lines = error.strip().splitlines() or ["unknown error"]
    ours = [line[line.index(PREFIX) :] for line in lines if PREFIX in line]
    return ours[0] if ours else lines[0]


def _print_progress(progress: Progress, out: TextIO) -> None:
    last = progress.last
    rate = last["input"] / last["seconds"] if last["seconds"] > 0 else 0.0
    isolated = ", ".join(f"{b} until {_iso(u)}" for (_, b), u in sorted(progress.isolated.items()))
    print(
        f"batch {last['batch_id']}: {last['input']} records ({rate:,.0f}/s), "
        f"{last['quarantined']} quarantined, {last['late']} late; clock {_iso(last['clock'])}; "
        f"isolated now: {isolated or 'none'}",
        file=out,
        flush=True,
    )


def table_counts(output: Path) -> dict[str, int]:
    from deltalake import DeltaTable

    counts = {}
    for name in [*TABLES, "batches"]:  # from the Delta log's file statistics, not the rows
        files = pa.table(DeltaTable(str(output / name)).get_add_actions(flatten=True))
        counts[name] = int(pc.sum(files["num_records"]).as_py() or 0)
    return counts


def isolation_windows(output: Path) -> list[dict[str, Any]]:
    """ISOLATE..RESTORE windows per (scope, scope_key, broker), from ``broker_decisions``."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(output / "broker_decisions")).to_pyarrow_table().to_pylist()
    rows = [r for r in rows if r["decision"] in ("ISOLATE", "RESTORE")]
    rows.sort(
        key=lambda r: (
            r["scope"],
            r["scope_key"],
            r["broker_name"],
            r["effective_at"],
            r["decision"] != "RESTORE",
        )
    )
    windows: list[dict[str, Any]] = []
    open_: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["scope"], r["scope_key"], r["broker_name"])
        if r["decision"] == "ISOLATE":
            open_[key] = {
                "scope": key[0],
                "scope_key": key[1],
                "broker_name": key[2],
                "start": r["effective_at"],
                "end": None,
                "cause": r["cause_event_id"],
            }
        elif r["decision"] == "RESTORE" and key in open_:
            window = open_.pop(key)
            window["end"] = r["effective_at"]
            windows.append(window)
    windows.extend(open_.values())
    return windows


def delay_queues(output: Path) -> pd.DataFrame:
    """Per delay level: messages scheduled, released, released into the DLQ and still waiting;
    level 0 counts the messages that went to the DLQ at once. From the tables, so it covers every
    run into this output."""
    from deltalake import DeltaTable

    entries = DeltaTable(str(output / "schedule_entries")).to_pandas(columns=["delay_level"])
    out = DeltaTable(str(output / "redeliveries")).to_pandas(columns=["delay_level", "dlq"])
    counts = pd.DataFrame(
        {
            "scheduled": entries.groupby("delay_level").size(),
            "released": out[~out["dlq"]].groupby("delay_level").size(),
            "dlq": out[out["dlq"]].groupby("delay_level").size(),
        }
    )
    counts = counts.fillna(0).astype("int64")
    counts["waiting"] = (
        counts["scheduled"] - counts["released"] - counts["dlq"].where(counts.index > 0, 0)
    )
    return counts.sort_index()


def _print_delay_queues(output: Path, out: TextIO) -> None:
    counts = delay_queues(output)
    print(
        "\ndelay queues (SCHEDULE_TOPIC_XXXX): level, scheduled, released, waiting, to DLQ",
        file=out,
    )
    for level, row in counts.iterrows():
        name = "DLQ at once" if level == 0 else f"level {level}"
        print(
            f"  {name:<12} {row['scheduled']:>8} {row['released']:>8} {row['waiting']:>8} "
            f"{row['dlq']:>8}",
            file=out,
        )
    if counts.empty:
        print("  none", file=out)


def transaction_states(output: Path) -> dict[str, int]:
    """Rows per state of ``transactions``, and ``WAITING``: transactions whose latest row leaves
    them waiting for an end or a check."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(output / "transactions")).to_pandas(
        columns=["cluster", "transaction_id", "state", "effective_at", "next_check_at"]
    )
    counts = {str(k): int(v) for k, v in rows["state"].value_counts().sort_index().items()}
    settled = rows["next_check_at"].isna().rename("settled")
    latest = rows.assign(settled=settled).sort_values(["effective_at", "settled"], kind="stable")
    latest = latest.groupby(["cluster", "transaction_id"]).tail(1)
    if len(rows):
        counts["WAITING"] = int(latest["next_check_at"].notna().sum())
    return counts


def _print_summary(output: Path, progress: Progress, out: TextIO) -> None:
    elapsed = time.time() - progress.started
    windows = isolation_windows(output)
    print(
        f"\nfaultline: {progress.rows} records in {progress.batches} batches, {elapsed:.1f} s",
        file=out,
    )
    print("\nisolations (cluster scope): broker, count, isolated time", file=out)
    per_broker: dict[str, list[int]] = {}
    for w in windows:
        if w["scope"] == "cluster":
            stats = per_broker.setdefault(w["broker_name"], [0, 0])
            stats[0] += 1
            stats[1] += (w["end"] or w["start"]) - w["start"]
    for broker, (count, total) in sorted(per_broker.items()):
        print(f"  {broker:<20} {count:>4} {total / 1000:>10.1f} s", file=out)
    if not per_broker:
        print("  none", file=out)
    _print_delay_queues(output, out)
    print("\ntransactions: rows per state (WAITING: transactions not settled)", file=out)
    states = transaction_states(output)
    for state, count in states.items():
        print(f"  {state:<26} {count:>8}", file=out)
    if not states:
        print("  none", file=out)
    print("\nrows per table:", file=out)
    for name, count in table_counts(output).items():
        print(f"  {name:<20} {count:>9}  {output / name}", file=out)
