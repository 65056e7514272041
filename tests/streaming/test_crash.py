"""Exactly once at the crash points of a batch in the real query: the job is stopped before and
after publishing to Kafka, after its first table's Delta commit and after the ``batches`` row
(before Spark's commit log), in the first, a middle and the last batch, then restarted on the
same checkpoint. (Every table's commit point, before and after, is crashed at without Spark in
test_sink_crash.py.) Its tables must equal an uninterrupted run's, every file a Delta log
references must exist, no file may be left over, and what went to the Kafka decision topic must
be exactly what the tables hold.

The matrix runs the job's own query (``streaming.job.query.build_query``) in this process, on
the worker's Spark session, with the failpoint raising inside the batch: Spark then fails the
query with the batch's offsets logged and its commit not, the state a crash leaves, and the next
query replays the batch. The tests after it run ``faultline run`` (in this process) on a
checkpoint whose last commit log entry was removed, as a crash right before Spark writes it
leaves it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from deltalake import DeltaTable

from streaming.client import publish_order
from streaming.config import JobConfig, load_job_config, load_scenario
from streaming.job import failpoints, sink
from streaming.job.progress import Progress
from streaming.job.publish import Publisher
from streaming.job.query import QUERY_NAME, build_query, run_to_end
from streaming.sim.simulator import simulate, write_jsonl
from tests.streaming.conftest import Job, faultline, no_stray_files, same_tables, table
from udfs.schema import TABLES

pytestmark = pytest.mark.jvm

BATCH = 700
"""Records per micro-batch: the quick scenario in three batches, first, middle and last."""


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("events")
    write_jsonl(simulate(load_scenario("quick")), folder)
    return folder


def _config(folder: Path, events: Path, bootstrap: str) -> JobConfig:
    return load_job_config(
        None,
        {
            "source": "files",
            "path": str(events),
            "output": str(folder / "out"),
            "checkpoint": str(folder / "ck"),
            "once": True,
            "max_records_per_batch": BATCH,
            "kafka_bootstrap": bootstrap,
            "decisions_topic": f"decisions-{folder.name}",
        },
    )


@pytest.fixture(scope="module")
def publisher(kafka: str) -> Iterator[Publisher]:
    """The job's Kafka outputs, one client for every start of the job in this module."""
    client = Publisher({"bootstrap.servers": kafka})
    yield client
    client.close()


def _run_query(spark: Any, config: JobConfig, publisher: Publisher) -> str | None:
    """The job's query on its checkpoint, to the end of the input or to a failure (started again
    only while its source's worker is late, as the job does); returns the failure's one-line
    reason."""
    output, checkpoint = Path(config.output), Path(config.checkpoint) / QUERY_NAME
    progress, events = Progress(), Path(str(config.path))
    with contextlib.suppress(Exception):  # a failure's reason is in progress.error
        run_to_end(
            lambda: build_query(
                spark, config, events, output, checkpoint, progress, publisher=publisher
            )
        )
    return progress.error


def _files_are_whole(output: Path, *, no_leftovers: bool) -> None:
    """Every file of every table's Delta log exists; with ``no_leftovers``, no data file lies in
    a table's folder that no commit added."""
    if no_leftovers:
        no_stray_files(output)
        return
    for name in (*TABLES, "batches"):
        uris = DeltaTable(str(output / name)).file_uris()
        missing = [uri for uri in uris if not Path(unquote(uri.removeprefix("file://"))).exists()]
        assert not missing, (name, missing)


def _published(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every message of the decision topic, as the rows they carry (without ``batch_id``)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.partition.eof": True}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        if metadata.error is not None:  # never created: nothing was published
            return []
        partitions = [TopicPartition(topic, p, 0) for p in metadata.partitions]
        consumer.assign(partitions)
        rows, ended = [], set()
        for _ in range(600):  # at most a minute
            for m in consumer.consume(1000, timeout=0.1):
                if m.error() is not None:
                    ended.add(m.partition())
                    continue
                row, key = json.loads(m.value()), m.key().decode()
                row.pop("batch_id")
                if key.startswith(("broker/", "broker-route/")):
                    row.pop("state")  # what the sink adds to a broker decision
                rows.append({"key": key, **row})
            if len(ended) == len(partitions):
                return rows
        raise AssertionError(f"{topic}: not read to its end within a minute")
    finally:
        consumer.close()


def _as_seen(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """What a producer reading the topic sees, key by key: each key's messages in order, a
    message that repeats the one before it (a replayed batch published it again) left out."""
    seen: dict[str, list[str]] = {}
    for row in rows:
        text = json.dumps(row, sort_keys=True)
        messages = seen.setdefault(row["key"], [])
        if not messages or messages[-1] != text:
            messages.append(text)
    return seen


def _held(output: Path) -> list[dict[str, Any]]:
    """What the tables hold for the decision topic, keyed as the sink keys them: the cluster
    scope's broker decisions and routing tables (of each batch, the last per key), and the
    transactions a producer must act on."""
    rows = []
    for name, key, column, keep, order in (
        ("broker_decisions", "broker", "broker_name", "scope == 'cluster'", publish_order),
        ("routing_table", "route", "topic", "scope == 'cluster'", lambda r: r["effective_at"]),
        ("transactions", "transaction", "transaction_id", "notify", None),
    ):
        frame = table(output, name).query(keep)[[*TABLES[name].names, "batch_id"]]
        integers = [f.name for f in TABLES[name] if pa.types.is_integer(f.type)]
        frame = frame.astype(dict.fromkeys(integers, "Int64"))  # a null made pandas use floats
        latest: dict[tuple[Any, ...], dict[str, Any]] = {}
        held = json.loads(frame.to_json(orient="records"))
        for i, found in enumerate(sorted(held, key=order) if order else held):
            row = {"key": f"{key}/{found['cluster']}/{found[column]}", **found}
            batch = row.pop("batch_id")
            latest[(batch, row["key"]) if order else (i,)] = row
        rows += latest.values()
    assert any(r["key"].startswith("transaction/") for r in rows)
    return rows


def _canonical(rows: list[dict[str, Any]]) -> set[str]:
    return {json.dumps(r, sort_keys=True) for r in rows}


def _points(reference_batches: dict[str, set[int]], batch: int) -> list[str]:
    """The points of ``batch`` where the query crashes: before and after publishing, after the
    first table's commit (the tables half committed), after the ``batches`` commit (before
    Spark's commit log)."""
    first = next(name for name in TABLES if batch in reference_batches[name])
    return ["before-publish", "after-publish", f"after-commit-{first}", "after-commit-batches"]


@pytest.fixture(scope="module")
def uninterrupted(
    spark: Any,
    events: Path,
    kafka: str,
    publisher: Publisher,
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    folder = tmp_path_factory.mktemp("uninterrupted")
    config = _config(folder, events, kafka)
    sink.create_tables(Path(config.output))
    assert _run_query(spark, config, publisher) is None
    return Path(config.output)


def _batches_of(output: Path) -> dict[str, set[int]]:
    return {name: set(table(output, name)["batch_id"]) for name in TABLES}


@contextlib.contextmanager
def _failpoint(point: str, batch: int) -> Iterator[None]:
    os.environ[failpoints.ENV] = f"{point}:{batch}"
    os.environ[failpoints.ACTION_ENV] = "raise"
    try:
        yield
    finally:
        del os.environ[failpoints.ENV], os.environ[failpoints.ACTION_ENV]


@pytest.mark.parametrize("batch", [0, 1, 2], ids=["first", "middle", "last"])
def test_a_crash_at_every_point_of_a_batch_then_a_restart_gives_the_uninterrupted_tables(
    spark: Any,
    events: Path,
    kafka: str,
    publisher: Publisher,
    reference: Path,
    uninterrupted: Path,
    tmp_path: Path,
    batch: int,
) -> None:
    """The job crashes at the first point of the batch; each restart replays the batch and
    crashes at the next point, so every point is crashed at and recovered from (and recovery
    from a recovery is tested too); the last restart runs to the end."""
    assert sorted(table(uninterrupted, "batches")["batch_id"]) == [0, 1, 2]
    points = _points(_batches_of(uninterrupted), batch)
    config = _config(tmp_path, events, kafka)
    output = Path(config.output)
    sink.create_tables(output)
    for point in points:
        with _failpoint(point, batch):
            assert _run_query(spark, config, publisher) == f"failpoint {point}:{batch}"
        # what a reader sees meanwhile: whole tables, and the batch's row once all of it is in
        _files_are_whole(output, no_leftovers=False)
        committed = set(table(output, "batches")["batch_id"])
        assert committed == set(range(batch + (point == "after-commit-batches"))), point
    assert _run_query(spark, config, publisher) is None
    same_tables(reference, output)
    assert sorted(table(output, "batches")["batch_id"]) == [0, 1, 2]
    _files_are_whole(output, no_leftovers=True)
    published = _published(str(config.kafka_bootstrap), config.decisions_topic)
    assert _canonical(published) == _canonical(_held(output))
    # the tasks publish the decisions before the batch commits, so a replay sends them again:
    # a producer sees the uninterrupted run's messages, key by key in the same order, some twice
    uninterrupted_topic = _config(uninterrupted.parent, events, kafka).decisions_topic
    assert _as_seen(published) == _as_seen(_published(kafka, uninterrupted_topic))


# --- the whole job, after a crash right before Spark's commit log ---------------------------


def _quick_args(folder: Path, *extra: str) -> tuple[str, ...]:
    return ("run", "--scenario", "quick", "--output", str(folder / "out"),
            "--checkpoint", str(folder / "ck"), *extra)  # fmt: skip


def _last_commit_removed(folder: Path) -> int:
    """Remove the newest entry of Spark's commit log (and its checksum file); its batch id."""
    log = folder / "ck" / "faultline" / "commits"
    last = max(int(p.name) for p in log.iterdir() if p.name.isdigit())
    (log / str(last)).unlink()
    (log / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_a_batch_committed_to_delta_but_not_to_sparks_log_is_not_committed_again(
    reference: Path, one_batch: Path, job: Job, tmp_path: Path
) -> None:
    """Batch 0, the whole input in one batch: killed after its Delta commits and before Spark's
    commit log (its entry removed), then restarted."""
    shutil.copytree(one_batch, tmp_path / "one")
    one = tmp_path / "one" / "out"
    assert _last_commit_removed(one.parent) == 0
    result = job(*_quick_args(one.parent, "--max-records-per-batch", "1000000"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    same_tables(reference, one)
    assert list(table(one, "batches")["batch_id"]) == [0]
    _files_are_whole(one, no_leftovers=True)


def test_a_copied_checkpoint_resumes_as_the_same_job(
    reference: Path, job: Job, tmp_path: Path
) -> None:
    """The reference run, its last batch's Spark commit removed, moved with its tables to another
    folder (an incident copy, a new mount point): the restart replays that batch and commits
    nothing twice."""
    moved = tmp_path / "elsewhere"
    shutil.copytree(reference.parent, moved)
    last = _last_commit_removed(moved)
    assert last > 0
    result = job(*_quick_args(moved, "--max-records-per-batch", "200"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    same_tables(reference, moved / "out")
    assert sorted(table(moved / "out", "batches")["batch_id"]) == list(range(last + 1))
    _files_are_whole(moved / "out", no_leftovers=True)


LATE = """import os, time
from pathlib import Path
marker = Path(__file__).with_name("late")
if "PYTHON_WORKER_FACTORY_PORT" in os.environ and marker.exists():  # a worker Spark waits for
    marker.unlink()
    time.sleep(12)
"""
"""A ``sitecustomize`` that holds the first Python worker Spark starts and waits for (the
source's runner) 12 s before it connects back: Spark waits 10 s."""


def test_a_source_worker_late_to_connect_back_starts_the_query_again(
    reference: Path, tmp_path: Path
) -> None:
    """A busy machine: the Python source's runner connects back after Spark gave up on it, and the
    query fails before its first batch. The job starts it again from its checkpoint, says so, and
    writes the uninterrupted run's tables (a JVM of its own: the runner's environment is the
    JVM's)."""
    late = tmp_path / "late"
    late.mkdir()
    (late / "sitecustomize.py").write_text(LATE)
    (late / "late").touch()
    result = faultline(*_quick_args(tmp_path), cwd=tmp_path, env={"PYTHONPATH": str(late)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not (late / "late").exists()
    assert (
        "faultline: Spark's Python worker for the source did not connect back within Spark's "
        "10 s (a busy machine); starting the query again from its checkpoint (2 of 3)"
    ) in result.stdout.splitlines()
    same_tables(reference, tmp_path / "out")
    _files_are_whole(tmp_path / "out", no_leftovers=True)
