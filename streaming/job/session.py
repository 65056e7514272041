"""The job's Spark session: its settings, the state store, Spark's own log, and the Python
environment its workers need."""

from __future__ import annotations

import os
import sys
import threading
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from streaming import jars
from streaming.config import JobConfig
from streaming.jars import note_jvm_start
from streaming.job import failpoints
from streaming.job.sink_spark import RUNTIME, SESSION

PACKAGES = Path(__file__).resolve().parents[2]
"""The folder that holds ``udfs`` and ``streaming``: a source checkout, or site-packages."""


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


def has_session() -> bool:
    """Whether this process has a running Spark session, which :func:`spark_session` then
    returns with the job's settings applied."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


RETAINED = 100
"""Jobs, stages and SQL executions Spark keeps the status of (1,000 each by default). The job
runs with Spark's UI off, so nothing reads them; a few hundred batches would otherwise fill the
driver's heap toward those thousands before it stops growing (``streaming.bench.soak``)."""


def jar_sets(config: JobConfig) -> dict[str, str]:
    """The jar sets (``conf/jars/pom.xml``) the job's settings need, each with the setting that
    needs it."""
    sets = {}
    if config.source == "kafka":
        sets["spark-kafka"] = "source: kafka"
    if config.sink == "delta-spark":
        sets["delta"] = "sink: delta-spark"
    return sets


def spark_jars(config: JobConfig) -> list[Path]:
    """The jars of :func:`jar_sets`, from the cache; a :class:`ConfigError` naming the command
    that fetches a set not there. None are needed in a process that has a session already: it
    has the jars it was given (the job then checks for what it needs)."""
    if has_session():
        return []
    return [jar for name, why in jar_sets(config).items() for jar in jars.find(name, why)]


def spark_session(config: JobConfig, output: Path, extra: list[Path] | None = None) -> Any:
    """The job's session, made with the jars ``extra`` (:func:`spark_jars`), or the one this
    process has, with the job's settings applied."""
    from pyspark.sql import SparkSession

    local = config.master.startswith("local")
    python_env(local)
    builder = (
        SparkSession.builder.master(config.master)
        .appName("faultline")
        .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
        .config("spark.sql.streaming.minBatchesToRetain", str(config.min_batches_to_retain))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.retainedJobs", str(RETAINED))
        .config("spark.ui.retainedStages", str(RETAINED))
        .config("spark.sql.ui.retainedExecutions", str(RETAINED))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        # the parser's validation is one large expression; constraint propagation over it
        # (after filters are pushed through it) runs out of memory
        .config("spark.sql.constraintPropagation.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={_log4j(output)}")
    )
    existing = has_session()
    if config.sink == "delta-spark":
        # a session made elsewhere keeps its own catalog: it has Delta Lake or not (check_delta)
        delta = RUNTIME if existing else {**SESSION, **RUNTIME}
        for key, value in {**delta, "spark.sql.session.timeZone": "UTC"}.items():
            builder = builder.config(key, value)
    if extra:
        builder = builder.config("spark.jars", ",".join(map(str, extra)))
    for name, value in failpoints.executor_env().items():
        builder = builder.config(f"spark.executorEnv.{name}", value)
    bundle = None if local else _bundle(output)
    if bundle is not None:
        # the driver's own Python helpers (the streaming source's planner) run in processes the
        # JVM starts from this environment
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(bundle), os.environ.get("PYTHONPATH")])
        )
    if not existing:
        note_jvm_start()
    with _jvm_stderr():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if bundle is not None:
        spark.sparkContext.addPyFile(str(bundle))  # executors share no Python path with us
    return spark


JVM_NOTICE = b"WARNING: Using incubator modules: jdk.incubator.vector"
"""What the JVM prints as it starts, since Spark's launcher always adds that module; no option of
the JVM or of Spark turns the line off."""


@contextmanager
def _jvm_stderr() -> Iterator[None]:
    """A JVM started within writes its stderr through a pipe that passes every line on to this
    process's stderr but :data:`JVM_NOTICE`."""
    read, write = os.pipe()
    stderr = os.dup(2)
    threading.Thread(target=_pass_on, args=(read, stderr), daemon=True).start()
    sys.stderr.flush()
    os.dup2(write, 2)
    os.close(write)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(stderr, 2)  # the JVM keeps the pipe; with none started it closes here


def _pass_on(read: int, stderr: int) -> None:
    with open(read, "rb") as lines, open(stderr, "wb", buffering=0) as out:
        for line in lines:
            if not line.startswith(JVM_NOTICE):
                out.write(line)


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
    pattern = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"
    conf.write_text(jars.rolling_log(log, "warn", pattern, SPARK_LOG_MB, SPARK_LOG_FILES))
    return conf


def python_env(local: bool) -> None:
    """The environment Spark's Python workers need: on a local master, this interpreter and the
    loopback address."""
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # PySpark warns once per process that pandas 3 is new to it; results are the same
    # (docs/development.md)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")


def _bundle(output: Path) -> Path:
    """The job's code as a zip under the output root, for processes that cannot import it."""
    bundle = output / "_job" / "faultline.zip"
    bundle.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(bundle, "w") as zf:
        for package in ("udfs", "streaming"):
            for path in (PACKAGES / package).rglob("*.py"):
                zf.write(path, path.relative_to(PACKAGES))
    return bundle
