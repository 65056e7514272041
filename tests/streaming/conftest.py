"""Helpers for the end-to-end runs: the real ``faultline`` command, the real Spark, the real
Delta tables.

Two ways to run a command. :func:`faultline` starts the ``faultline`` process, for what only a
process shows: a signal, a crash, an exit before Spark starts, a standalone cluster, the wheel.
The ``job`` fixture runs the same command line in this process, on the worker's one Spark session
(the ``spark`` fixture), for every test that checks what a run writes or prints: it saves the
15-25 s of a JVM start per run. The named runs below (``installed``, ``default_run``,
``reference``, ``one_batch``, ``retained``) are made once per test session (:func:`shared`) and
read by every test that needs them."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

import pandas as pd
import pytest
from deltalake import DeltaTable

from streaming import cli, jars
from streaming.config import load_job_config
from streaming.jars import SPARK_SETS
from streaming.job.progress import PROGRESS_COLUMNS
from streaming.job.session import spark_session
from streaming.sim.kafka_broker import KafkaBroker, kafka_broker

ROOT = Path(__file__).resolve().parents[2]
FAULTLINE = [sys.executable, "-m", "streaming.cli"]
DECISION_TABLES = ("broker_decisions", "routing_decisions", "routing_table")
OUTPUT_TABLES = (
    "fault_items",
    *DECISION_TABLES,
    "routes",
    "heartbeats",
    "quarantine",
    "late_events",
    "schedule_entries",
    "redeliveries",
    "transactions",
)


def faultline(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*FAULTLINE, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Job(Protocol):
    def __call__(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]: ...


SESSION = {
    # Spark's background maintenance of the state store (snapshots, deleting old files) every
    # 200 ms instead of every minute, a snapshot every 2 batches: test_state_store.py sees the
    # bound within seconds; no table's rows depend on either
    "spark.sql.streaming.stateStore.maintenanceInterval": "200ms",
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """This worker's Spark session, made as ``faultline run`` makes its own, with Spark's Kafka
    source and Delta Lake: every in-process run (``job``) and every test that needs Spark itself
    shares it. A test that changes a setting puts it back (:func:`settings`)."""
    config = load_job_config(None, {"sink": "delta-spark"})
    extra = [jar for name in SPARK_SETS for jar in jars.find(name, "the tests")]
    session = spark_session(config, tmp_path_factory.mktemp("spark"), extra)
    for key, value in SESSION.items():
        session.conf.set(key, value)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """This worker's Apache Kafka broker (``streaming.sim.kafka_broker``): one JVM serves every
    test of the worker that needs a Kafka it does not stop, each naming topics of its own. A test
    that stops or kills a broker starts its own."""
    with kafka_broker(tmp_path_factory.mktemp("kafka")) as started:
        yield started


@pytest.fixture(scope="session")
def kafka(broker: KafkaBroker) -> str:
    """The worker's broker's bootstrap servers (PLAINTEXT)."""
    return broker.bootstrap


@contextlib.contextmanager
def settings(spark: Any, **values: str) -> Iterator[None]:
    """Spark SQL settings (dots written as ``__``) for the block, put back after it."""
    keys = {key.replace("__", "."): value for key, value in values.items()}
    before = {key: spark.conf.get(key, None) for key in keys}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@pytest.fixture(scope="session")
def job(spark: Any) -> Job:
    """``faultline ARGS`` in this process, on the worker's Spark session (the ``spark``
    fixture), from the folder ``cwd``: its exit code and what it printed, as :func:`faultline`
    returns them. The job leaves the session running (``streaming.job.run.run``)."""

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        parsed = cli._parser().parse_args(args)
        out, err = io.StringIO(), io.StringIO()
        with (
            contextlib.chdir(cwd),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            code = cli._main(parsed)
        return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())

    return run


def start(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*FAULTLINE, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def batches_committed(output: Path) -> int:
    try:
        return len(DeltaTable(str(output / "batches")).to_pyarrow_table(columns=["batch_id"]))
    except Exception:  # not created yet
        return 0


def interrupt_after(
    proc: subprocess.Popen[str], output: Path, batches: int, sig: int, limit: float = 300
) -> int:
    """Send ``sig`` once ``batches`` batches are committed; returns the exit code."""
    deadline = time.time() + limit
    while time.time() < deadline and proc.poll() is None and batches_committed(output) < batches:
        time.sleep(0.05)
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.communicate(timeout=limit)
    return proc.returncode


def table(output: Path, name: str) -> pd.DataFrame:
    return DeltaTable(str(output / name)).to_pandas()


def canonical(output: Path, name: str) -> list[tuple[Any, ...]]:
    """A table's rows as a sorted list, without ``batch_id``: equal lists mean equal tables."""
    frame = table(output, name).drop(columns="batch_id")
    rows = [tuple(_plain(v) for v in row) for row in frame.itertuples(index=False)]
    return sorted(rows, key=repr)


def batch_rows(frame: pd.DataFrame) -> list[tuple[str, ...]]:
    """A table's rows with their ``batch_id``, sorted: equal lists mean the same rows in the same
    batches."""
    return sorted(tuple(map(repr, r)) for r in frame.itertuples(index=False))


def same_tables(a: Path, b: Path, names: tuple[str, ...] = OUTPUT_TABLES) -> None:
    for name in names:
        assert canonical(a, name) == canonical(b, name), name


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        return repr(list(value))
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


KILL = signal.SIGKILL
INT = signal.SIGINT


def quick_run(job: Job, cwd: Path, name: str, *extra: str) -> Path:
    """The quick scenario into ``cwd/name`` (``out`` and ``ck``, and its ``stdout.log``), in
    this process; its tables' folder."""
    result = job(
        "run",
        "--scenario",
        "quick",
        "--output",
        str(cwd / name / "out"),
        "--checkpoint",
        str(cwd / name / "ck"),
        *extra,
        cwd=cwd,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (cwd / name / "stdout.log").write_text(result.stdout)
    return cwd / name / "out"


def call(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command``, which must succeed, without this checkout on the Python path."""
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@dataclass(frozen=True)
class Installed:
    """faultline's wheel, installed in a virtual environment of its own."""

    wheel: Path
    python: Path
    site: Path
    """The environment's site-packages."""


def shared(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """The folder of a named run, made once for the whole test session by ``make(folder)`` in
    the first worker that asks for it; a worker that asks meanwhile waits for it. A run's
    fixture is the one place that says how it is made; tests only read it (copy it to change
    it)."""
    root = factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:  # the workers' folders share a parent
        root = root.parent
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with (root / f"shared-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel built from this checkout (``pip wheel``), installed in a fresh environment that
    borrows the dependencies installed here: a plain path in a .pth file, so that the .pth files
    here (faultline's editable install) are not read."""

    def make(folder: Path) -> None:
        pip = (sys.executable, "-m", "pip")
        call(*pip, "wheel", "--no-deps", "-w", folder / "dist", ROOT, cwd=folder)
        (wheel,) = (folder / "dist").glob("faultline-*.whl")
        venv = folder / "venv"
        call(sys.executable, "-m", "venv", "--without-pip", venv, cwd=folder)
        call(*pip, "--python", venv / "bin" / "python", "install", "--no-deps", wheel, cwd=folder)
        where = "import sysconfig; print(sysconfig.get_path('purelib'))"
        site = call(venv / "bin" / "python", "-c", where, cwd=folder).stdout.strip()
        (Path(site) / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
        (folder / "site").write_text(site)

    folder = shared(tmp_path_factory, "wheel", make)
    (wheel,) = (folder / "dist").glob("faultline-*.whl")
    site = Path((folder / "site").read_text())
    return Installed(wheel, folder / "venv" / "bin" / "python", site)


@dataclass(frozen=True)
class DefaultRun:
    output: Path
    stdout: str
    stderr: str
    cwd: Path
    """The empty folder it ran in."""


@pytest.fixture(scope="session")
def default_run(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> DefaultRun:
    """The README's first command as a user meets it: ``faultline run`` on its built-in default
    (the simulator's default scenario), installed from the wheel, in its own process, from an
    empty folder (its tables and checkpoint in folders of their own). Every test of the default
    scenario's run reads this one."""

    def make(folder: Path) -> None:
        (folder / "empty").mkdir()
        faultline = installed.python.parent / "faultline"
        ran = call(faultline, "run", "--output", folder / "output", "--checkpoint", folder / "ck",
                   cwd=folder / "empty")  # fmt: skip
        (folder / "stdout").write_text(ran.stdout)
        (folder / "stderr").write_text(ran.stderr)

    folder = shared(tmp_path_factory, "default", make)
    stdout, stderr = ((folder / name).read_text() for name in ("stdout", "stderr"))
    return DefaultRun(folder / "output", stdout, stderr, folder / "empty")


@pytest.fixture(scope="session")
def reference(job: Job, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick scenario, uninterrupted, in micro-batches of 200 records, its tables maintained
    every 3 batches (every other run here is not: equal tables show that maintenance changes no
    row)."""

    def make(folder: Path) -> None:
        config = folder / "maintained.yaml"
        config.write_text("maintenance:\n  every: 3\n  min_files: 2\n")
        quick_run(job, folder, "ref", "--max-records-per-batch", "200", "--config", str(config))

    return shared(tmp_path_factory, "reference", make) / "ref" / "out"


@pytest.fixture(scope="session")
def one_batch(job: Job, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick scenario, uninterrupted, in one micro-batch (``out`` and ``ck`` under it)."""

    def make(folder: Path) -> None:
        quick_run(job, folder, "", "--max-records-per-batch", "1000000")

    return shared(tmp_path_factory, "one-batch", make)


RETAIN = 2
"""``min_batches_to_retain`` of the ``retained`` run."""


@pytest.fixture(scope="session")
def retained(job: Job, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick scenario in batches of 200 with Spark's default state store (hdfs), its
    checkpoint keeping the last :data:`RETAIN` batches (``min_batches_to_retain``) (``out`` and
    ``ck`` under it)."""

    def make(folder: Path) -> None:
        (folder / "job.yaml").write_text(f"min_batches_to_retain: {RETAIN}\n")
        quick_run(
            job, folder, "", "--config", str(folder / "job.yaml"), "--max-records-per-batch", "200"
        )

    return shared(tmp_path_factory, "retained", make)


BATCH_TIMINGS = (
    "write_ms",
    "commit_ms",
    "receive_ms",
    "parse_ms",
    "engine_ms",
    "files_ms",
    "state_ms",
    "publish_ms",
)
BATCH_TIMINGS += ("slowest_task_ms", "committed_at", "committed_at_ts", *PROGRESS_COLUMNS)


def same_batches(a: Path, b: Path) -> None:
    """Both outputs have the same micro-batches with the same counts (timings aside)."""
    frames = [table(out, "batches").drop(columns=list(BATCH_TIMINGS)) for out in (a, b)]
    rows = [sorted(frame.itertuples(index=False)) for frame in frames]
    assert rows[0] == rows[1]


def no_stray_files(output: Path) -> None:
    """Every Parquet file in a table's folder is one a commit added: referenced now, or replaced
    later (a rewritten ``batches`` row, a compaction) and kept for older readers until VACUUM."""
    for name in (*OUTPUT_TABLES, "batches"):
        added = set()
        for log in (output / name / "_delta_log").glob("*.json"):
            for line in log.read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    added.add(output / name / unquote(action["add"]["path"]))
        present = {p for p in (output / name).rglob("*.parquet") if "_delta_log" not in p.parts}
        assert present <= added, (name, sorted(p.name for p in present - added))
        for uri in DeltaTable(str(output / name)).file_uris():
            assert Path(unquote(uri.removeprefix("file://"))).exists(), uri
