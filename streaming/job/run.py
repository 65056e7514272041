"""``faultline run``: check the checkpoint, start the query, print one line per micro-batch and a
summary at the end."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from streaming.config import JobConfig, load_scenario, masked
from streaming.job import sink
from streaming.job.alive import Alive
from streaming.job.checkpoint import check_source, record_run
from streaming.job.maintain import table_properties
from streaming.job.metrics import Metrics, Server
from streaming.job.outage import Watch
from streaming.job.progress import BatchProgress, Progress, reason
from streaming.job.publish import Publisher, check_reachable, ensure_decisions_topic
from streaming.job.query import QUERY_NAME, START_ATTEMPTS, again, build_query
from streaming.job.session import has_session, spark_jars, spark_session
from streaming.job.sink_spark import check_delta
from streaming.job.sources.simulator import simulator_folder
from streaming.job.storage import from_failure
from streaming.job.summary import print_summary
from udfs.errors import ConfigError
from udfs.vocabulary import TableName

LISTENER_WAIT_S = 10.0
STOP_WAIT_S = 10.0
"""How long a job that gives up on Kafka waits for its query to stop: a batch waiting for Kafka
may not notice for a minute (the Kafka clients' own timeouts)."""


@contextmanager
def _interrupts() -> Iterator[threading.Event]:
    """Ctrl-C (SIGINT) sets the event instead of raising where it lands: in the main thread a
    KeyboardInterrupt would cut a call to the JVM in half (py4j then logs its own tracebacks),
    and PySpark's own handler cancels Spark's jobs through the same connection. The job's loop
    looks at the event between its calls. Elsewhere than in the main thread, nothing changes."""
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    before = signal.signal(signal.SIGINT, lambda *_: event.set())
    try:
        yield event
    finally:
        signal.signal(signal.SIGINT, before)


def _stop_within(query: Any, seconds: float) -> None:
    """Stop the query, waiting at most ``seconds`` for it (the rest goes on in the background)."""
    stopping = threading.Thread(target=query.stop, name="faultline-stop", daemon=True)
    stopping.start()
    stopping.join(seconds)


def run(
    config: JobConfig, out: TextIO = sys.stdout, operator: Callable[..., Any] | None = None
) -> int:
    """Run the job; print progress and a summary. Returns the exit code. A folder that cannot be
    written (a full disk, a read-only mount) stops it with a :class:`StorageError` naming it.
    ``operator`` replaces the stateful function (a benchmark's floor). In a process that has a
    Spark session already (a notebook, a test worker), the job runs on it and leaves it running;
    otherwise it starts its own and stops it at the end."""
    roots = (Path(config.output).resolve(), Path(config.checkpoint).resolve())
    try:
        return _run(config, out, operator)
    except Exception as exc:
        fault = from_failure(exc, roots)
        if fault is None:
            raise
        raise fault from exc


def _run(config: JobConfig, out: TextIO, operator: Callable[..., Any] | None) -> int:
    if config.metrics.port is None:
        return _job(config, out, operator, None)
    metrics = Metrics()  # a port taken stops the job before it starts
    server = metrics.serve(config.metrics.host, config.metrics.port)
    print(f"faultline: metrics at {server.url}", file=out, flush=True)
    try:
        code = _job(config, out, operator, metrics)
    except BaseException:
        server.stop()
        raise
    linger(server, config.metrics.linger / 1000, out)
    return code


def linger(server: Server, seconds: float, out: TextIO) -> None:
    """Serve the last figures ``seconds`` more (a scrape after the end; Ctrl-C cuts it short),
    then stop."""
    try:
        if seconds > 0:
            print(f"faultline: serving {server.url} for {seconds:g} s more", file=out, flush=True)
            time.sleep(seconds)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def check_input(config: JobConfig) -> None:
    """What the source reads is there: the files source's folder, the simulator's scenario (Spark
    would find out after it started, and the job after it made its tables)."""
    if config.source == "files" and not Path(str(config.path)).is_dir():
        raise ConfigError(
            f"path {config.path}: no such folder; the files source reads the JSON-lines or "
            "Parquet files of a folder (--path DIR)"
        )
    if config.source == "simulator":
        load_scenario(config.scenario)


def _job(
    config: JobConfig,
    out: TextIO,
    operator: Callable[..., Any] | None,
    metrics: Metrics | None,
) -> int:
    checkpoint = Path(config.checkpoint).resolve() / QUERY_NAME
    extra = spark_jars(config)  # before anything is written or started
    check_input(config)
    check_source(config, checkpoint)
    if config.kafka_bootstrap and (config.source == "kafka" or config.kafka_outputs):
        check_reachable(config.kafka_conf())
    if config.kafka_bootstrap and config.kafka_outputs and config.decisions_topic:
        ensure_decisions_topic(config.kafka_conf(), config.decisions_topic)
    output = Path(config.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    folder: Path | None = None
    if config.source == "simulator":
        folder = simulator_folder(config, output)
    elif config.source == "files":
        folder = Path(str(config.path)).resolve()  # Spark's Python workers have a cwd of their own
    sink.create_tables(output, table_properties(config.maintenance, config.trigger_interval))
    check_source(config, checkpoint, record=True)
    record_run(config, checkpoint)
    own = not has_session()
    spark = spark_session(config, output, extra)
    if config.sink == "delta-spark":
        check_delta(spark, output / TableName.BATCHES)
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
    timeout = None if config.kafka_outage_timeout is None else config.kafka_outage_timeout / 1000
    if config.kafka_bootstrap and config.kafka_outputs:
        publisher = Publisher(config.kafka_conf(), timeout)
    if config.kafka_bootstrap and (config.source == "kafka" or config.kafka_outputs):
        interval = config.kafka_outage_log_interval / 1000
        reading = timeout if config.source == "kafka" else None  # publishing has its own
        watch = Watch(config.kafka_conf(), interval, checkpoint, out, metrics, reading).start()
    alive = Alive(output)
    alive.beat()
    listener = BatchProgress(out, metrics, alive)
    spark.streams.addListener(listener)

    def start() -> Any:
        return build_query(
            spark,
            config,
            folder,
            output,
            checkpoint,
            progress,
            publisher=publisher,
            operator=operator,
            listener=listener,
            metrics=metrics,
        )

    query = start()
    try:
        with _interrupts() as interrupted:
            for attempt in range(1, START_ATTEMPTS + 1):
                while query.isActive:  # the listener prints each batch's line
                    alive.beat()
                    if interrupted.is_set():
                        raise KeyboardInterrupt
                    if watch is not None and watch.gave_up is not None:  # Spark's source waits
                        if publisher is not None:
                            publisher.cancel()
                        _stop_within(query, STOP_WAIT_S)
                        raise RuntimeError(watch.gave_up)
                    try:
                        query.awaitTermination(config.progress_interval / 1000)
                    except Exception:  # the query failed: its reason is read below
                        break
                if not again(query, attempt, out):
                    break
                query = start()
        if query.exception() is not None:
            failure = from_failure(query.exception(), (output, checkpoint))
            raise failure or RuntimeError(progress.error or reason(str(query.exception())))
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
        spark.streams.removeListener(listener)
        if own:
            spark.stop()
        if watch is not None:
            watch.stop()
        if publisher is not None:
            publisher.close()
    print_summary(output, progress, out)
    return 0
