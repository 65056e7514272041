"""Kafka end to end, against a real Kafka-protocol server (librdkafka's mock cluster in a process
of its own), or against a real Kafka when ``KAFKA_BOOTSTRAP_SERVERS`` is set."""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest
from confluent_kafka import Consumer, Producer

from streaming.config import load_scenario
from streaming.sim.mock_kafka import mock_cluster, mock_cluster_process
from streaming.sim.simulator import simulate
from tests.streaming.conftest import (
    INT,
    KILL,
    OUTPUT_TABLES,
    Job,
    batch_rows,
    batches_committed,
    faultline,
    interrupt_after,
    same_tables,
    start,
    table,
)
from udfs.schedule import kafka_topic

pytestmark = pytest.mark.jvm


@pytest.fixture(scope="module")
def kafka() -> Iterator[str]:
    with mock_cluster() as bootstrap:
        yield bootstrap


def _publish(bootstrap: str, topic: str, cwd: Path, scenario: str = "quick") -> None:
    done = faultline(
        "simulate", "--scenario", scenario, "--kafka-bootstrap", bootstrap, "--topic", topic,
        cwd=cwd, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def _args(folder: Path, bootstrap: str, topic: str, *extra: str) -> tuple[str, ...]:
    config = folder / "job.yaml"
    config.write_text(f"decisions_topic: {folder.name}-decisions\n")
    return ("run", "--source", "kafka", "--kafka-bootstrap", bootstrap, "--topic", topic,
            "--config", str(config), "--max-offsets-per-trigger", "200",
            "--output", str(folder / "out"), "--checkpoint", str(folder / "ck"),
            *extra)  # fmt: skip


def _read_all(bootstrap: str, topic: str, expected: int, limit: float = 60) -> list[Any]:
    """Every message of a topic, from the beginning (bounded wait)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}-{time.time()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    messages: list[Any] = []
    deadline = time.time() + limit
    try:
        while len(messages) < expected and time.time() < deadline:
            for m in consumer.consume(1000, timeout=1.0):
                if m.error() is None:
                    messages.append(m)
    finally:
        consumer.close()
    return messages


def _check_kafka_run(reference: Path, folder: Path, bootstrap: str) -> None:
    """The Kafka run's tables equal the files run's; what producers read back from Kafka is the
    latest state per broker and topic; every redelivery is on its topic."""
    out = folder / "out"
    same_tables(reference, out)
    batches = table(out, "batches")
    assert (batches["input"] <= 200).all() and len(batches) >= 8  # admission control
    decisions = table(out, "broker_decisions").query("scope == 'cluster'")
    routes = table(out, "routing_table").query("scope == 'cluster'")
    notified = table(out, "transactions").query("notify")
    sent = _read_all(
        bootstrap, f"{folder.name}-decisions", len(decisions) + len(routes) + len(notified)
    )
    latest = {m.key().decode(): json.loads(m.value()) for m in sent}
    # a transaction a producer must act on: its latest row (the lost end, then what settled it)
    last_notice = notified.sort_values("effective_at", kind="stable").groupby("transaction_id")
    assert (
        {k.rsplit("/", 1)[1]: v["state"] for k, v in latest.items() if k.startswith("transaction/")}
        == last_notice["state"].last().to_dict()
        != {}
    )
    expected = {}
    for r in decisions.sort_values(["effective_at"], kind="stable").itertuples():
        expected[f"broker/{r.cluster}/{r.broker_name}"] = (r.decision, r.available_from)
    assert {
        k: (v["decision"], v["available_from"]) for k, v in latest.items() if "broker/" in k
    } == (expected)
    last_route = routes.sort_values("effective_at", kind="stable").groupby("topic").last()
    for topic, r in last_route.iterrows():
        got = latest[f"route/{r['cluster']}/{topic}"]
        assert [q["broker_name"] for q in got["selectable"]] == [
            q["broker_name"] for q in r["selectable"]
        ]
    redeliveries = table(out, "redeliveries")
    for target, group in redeliveries.groupby("target_topic"):
        on_kafka = _read_all(bootstrap, kafka_topic(str(target)), len(group))
        assert {m.key().decode() for m in on_kafka} == set(group["message_id"]), target


def test_kafka_run_equals_the_files_run_and_publishes_for_producers(
    job: Job, kafka: str, reference: Path, tmp_path: Path
) -> None:
    _publish(kafka, "quick-events", tmp_path)
    result = job(*_args(tmp_path, kafka, "quick-events", "--once"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"kafka source quick-events at {kafka}" in result.stdout
    _check_kafka_run(reference, tmp_path, kafka)
    # incident review: batches 3.. re-read from Kafka by their logged offsets give the same rows
    replayed = job(
        "replay", "--checkpoint", str(tmp_path / "ck"), "--output", str(tmp_path / "replay"),
        "--from-batch", "3", cwd=tmp_path,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    for name in OUTPUT_TABLES:
        original = table(tmp_path / "out", name)
        original = original[original["batch_id"] >= 3]
        assert batch_rows(table(tmp_path / "replay", name)) == batch_rows(original), name


@pytest.mark.parametrize(("how", "sig"), [("stop", INT), ("kill", KILL)])
def test_kafka_run_stopped_or_killed_and_restarted_loses_and_duplicates_nothing(
    job: Job, kafka: str, reference: Path, tmp_path: Path, how: str, sig: int
) -> None:
    """The ``faultline`` process stopped (Ctrl-C) or killed after two batches; the restart runs
    in this process."""
    topic = f"events-{how}"
    _publish(kafka, topic, tmp_path)
    proc = start(*_args(tmp_path, kafka, topic), cwd=tmp_path)
    code = interrupt_after(proc, tmp_path / "out", 2, sig)
    assert code == (0 if how == "stop" else -9)
    assert 2 <= len(table(tmp_path / "out", "batches")) < len(table(reference, "batches"))
    result = job(*_args(tmp_path, kafka, topic, "--once"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    same_tables(reference, tmp_path / "out")
    assert table(tmp_path / "out", "batches")["input"].sum() == len(
        simulate(load_scenario("quick"))
    )


def test_topics_that_appear_while_running_are_read(kafka: str, tmp_path: Path) -> None:
    events = simulate(load_scenario("quick"))
    half = len(events) // 2
    producer = Producer({"bootstrap.servers": kafka})
    for e in events[:half]:
        producer.produce("grow-a", json.dumps(e), key=e["cluster"])
    producer.flush(30)
    config = tmp_path / "job.yaml"
    config.write_text("subscribe_pattern: grow-.*\ndecisions_topic: ''\n")
    args = ("run", "--source", "kafka", "--kafka-bootstrap", kafka, "--config", str(config),
            "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"))  # fmt: skip
    proc = start(*args, cwd=tmp_path)
    try:
        deadline = time.time() + 240
        while batches_committed(tmp_path / "out") < 1 and time.time() < deadline:
            time.sleep(0.2)
        for e in events[half:]:
            producer.produce("grow-b", json.dumps(e), key=e["cluster"])
        producer.flush(30)

        def read() -> int:
            try:
                return int(table(tmp_path / "out", "batches")["input"].sum())
            except Exception:
                return 0

        while read() < len(events) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.5)
    finally:
        code = interrupt_after(proc, tmp_path / "out", 0, INT)
    assert code == 0
    batches = table(tmp_path / "out", "batches")
    assert batches["input"].sum() == batches["valid"].sum() == len(events)


def test_offsets_lost_to_retention_fail_or_are_skipped_and_counted(
    job: Job, kafka: str, tmp_path: Path
) -> None:
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 5})
    for _ in range(12_000):  # about 12 MB: the mock cluster keeps about 5 MB per partition
        producer.produce("lossy", b"x" * 1000, partition=0)
        producer.poll(0)
    producer.flush(60)
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "lossy-check"})
    from confluent_kafka import TopicPartition

    low, high = consumer.get_watermark_offsets(TopicPartition("lossy", 0), timeout=10)
    consumer.close()
    assert 0 < low < high == 12_000
    start_at = ("--starting-offsets", json.dumps({"lossy": {"0": 0}}))
    failing = job(*_args(tmp_path, kafka, "lossy", "--once", *start_at), cwd=tmp_path)
    assert failing.returncode == 1
    assert "faultline: failed: faultline kafka: offsets 0.." in failing.stderr
    assert "of lossy/0 were deleted (retention) before they were read" in failing.stderr
    assert len(failing.stderr.strip().splitlines()[-1]) < 300

    skipping = tmp_path / "skip"
    skipping.mkdir()
    args = _args(skipping, kafka, "lossy", "--once", *start_at)
    (skipping / "job.yaml").write_text("fail_on_data_loss: false\ndecisions_topic: ''\n")
    result = job(*args, "--max-offsets-per-trigger", "20000", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    quarantine = table(skipping / "out", "quarantine")
    lost = quarantine[quarantine["reason_code"] == "DATA_LOSS"]
    assert list(lost["origin"]) == [f"lossy/0/0-{low - 1}"]
    assert lost["reason"].iloc[0].startswith(f"{low} records at lossy/0/0-{low - 1} were deleted")
    assert (quarantine["reason_code"] == "MALFORMED_JSON").sum() == high - low
    assert "lossy/0/11999" in set(quarantine["origin"])
    # a replay of that window stops at once, naming what is gone and what Kafka still has
    replay = job(
        "replay", "--checkpoint", str(skipping / "ck"), "--output", str(skipping / "replay"),
        "--from-batch", "0", cwd=tmp_path,
    )  # fmt: skip
    assert replay.returncode == 2
    assert replay.stderr.strip().splitlines()[-1] == (
        f"faultline: batch 0 needs offsets 0..11999 of lossy/0; Kafka has {low}..11999 of it "
        "now (retention deleted the rest): replay a later window"
    )


def test_spark_kafka_connector_switch_uses_format_kafka(
    job: Job, kafka: str, tmp_path: Path
) -> None:
    """``kafka_reader: spark`` hands the same options to Spark's own connector, which these
    machines cannot install: the job must say that it is missing, not fall back silently."""
    (tmp_path / "job.yaml").write_text("kafka_reader: spark\n")
    result = job(
        "run", "--source", "kafka", "--kafka-bootstrap", kafka, "--topic", "t", "--once",
        "--config", str(tmp_path / "job.yaml"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "faultline: kafka_reader = 'spark': this Spark has no Kafka connector (add "
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__} to spark.jars."
        "packages), or use "
        "kafka_reader: python, faultline's own reader"
    )


def test_against_a_real_kafka(job: Job, reference: Path, tmp_path: Path) -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        pytest.skip(
            "KAFKA_BOOTSTRAP_SERVERS is not set: no real Kafka here (docker compose up -d, "
            "then KAFKA_BOOTSTRAP_SERVERS=localhost:9092); the mock-cluster tests above ran"
        )
    topic = f"faultline-test-{int(time.time())}"
    _publish(bootstrap, topic, tmp_path)
    result = job(*_args(tmp_path, bootstrap, topic, "--once"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _check_kafka_run(reference, tmp_path, bootstrap)


def test_a_delivery_failure_fails_the_batch_and_the_restart_retries_it(
    job: Job, reference: Path, tmp_path: Path
) -> None:
    """Files in, outputs to a Kafka that goes away for longer than ``kafka_outage_timeout``: the
    batch being published fails and the ``faultline`` process exits, having committed nothing of
    it; the restart (in this process) publishes it to the Kafka that is there now and commits it
    once."""
    events = tmp_path / "in"
    assert (
        faultline("simulate", "--scenario", "quick", "--out", str(events), cwd=tmp_path).returncode
        == 0
    )
    config = tmp_path / "job.yaml"
    config.write_text("kafka_options: {message.timeout.ms: '1000'}\nkafka_outage_timeout: 3s\n")

    def args(bootstrap: str, *extra: str) -> tuple[str, ...]:
        return ("run", "--source", "files", "--path", str(events), "--config", str(config),
                "--kafka-bootstrap", bootstrap, "--max-records-per-batch", "200",
                "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"),
                *extra)  # fmt: skip

    out = tmp_path / "out"
    with mock_cluster() as first:
        proc = start(*args(first), cwd=tmp_path)
        deadline = time.time() + 240
        while batches_committed(out) < 2 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
    # the first cluster is gone now: the next batch cannot be delivered
    stdout, _ = proc.communicate(timeout=240)
    assert proc.returncode == 1
    assert f"faultline: failed: faultline kafka: publishing: kafka at {first} unreachable for" in (
        stdout
    )
    assert "(kafka_outage_timeout 3 s): giving up" in stdout
    committed = table(out, "batches")
    assert 2 <= len(committed) < len(table(reference, "batches"))
    for name in OUTPUT_TABLES:  # nothing of the failed batch reached a table
        assert set(table(out, name)["batch_id"]) <= set(committed["batch_id"]), name
    with mock_cluster() as second:
        result = job(*args(second, "--once"), cwd=tmp_path)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        redeliveries = table(out, "redeliveries")
        done = set(committed["batch_id"])
        retried = redeliveries[~redeliveries["batch_id"].isin(done)]
        for target, group in retried.groupby("target_topic"):
            got = _read_all(second, kafka_topic(str(target)), len(group))
            assert {m.key().decode() for m in got} >= set(group["message_id"]), target
    same_tables(reference, out)


def test_kafka_unreachable_while_running_is_waited_out_and_nothing_is_lost_or_repeated(
    reference: Path, tmp_path: Path
) -> None:
    """The mock cluster stopped (SIGSTOP: connections hang, as behind a network partition; the
    data survives) while the job runs, then resumed: the job waits, says so once per interval,
    and ends with the tables of an uninterrupted run."""
    events = simulate(load_scenario("quick"))
    topic, first = "events-outage", 1200
    with mock_cluster_process() as (bootstrap, cluster):
        producer = Producer({"bootstrap.servers": bootstrap})

        def publish(part: list[dict[str, Any]]) -> None:
            for e in part:
                producer.produce(topic, json.dumps(e), key=e["cluster"])
            assert producer.flush(30) == 0

        publish(events[:first])
        args = _args(tmp_path, bootstrap, topic)
        with (tmp_path / "job.yaml").open("a") as config:
            config.write("kafka_outage_log_interval: 2s\n")
        proc = start(*args, cwd=tmp_path)
        lines: list[str] = []
        assert proc.stdout is not None
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
        reader.start()

        def wait_for(done: Callable[[], bool], limit: float = 120) -> None:
            deadline = time.time() + limit
            while not done() and time.time() < deadline and proc.poll() is None:
                time.sleep(0.1)
            assert done(), "".join(lines)[-3000:]

        def said(text: str) -> list[str]:
            return [line for line in list(lines) if text in line]

        try:
            wait_for(lambda: batches_committed(tmp_path / "out") >= 2)
            os.kill(cluster.pid, signal.SIGSTOP)
            stopped = time.time()
            wait_for(lambda: len(said("unreachable since")) >= 4, 30)  # about 6 s
            os.kill(cluster.pid, signal.SIGCONT)
            resumed = time.time()
            wait_for(lambda: bool(said("reachable again")), 30)
            during_a_batch = said("unreachable since")
            # again while the job waits for new records, for longer than the 10 s a planner's
            # question to Kafka may take: the planner is the one that waits
            wait_for(lambda: _committed_input(tmp_path / "out") == first)
            idle = batches_committed(tmp_path / "out")
            os.kill(cluster.pid, signal.SIGSTOP)
            wait_for(lambda: len(said("unreachable since")) >= len(during_a_batch) + 7, 40)
            os.kill(cluster.pid, signal.SIGCONT)
            wait_for(lambda: len(said("reachable again")) == 2, 30)
            publish(events[first:])
            wait_for(lambda: _committed_input(tmp_path / "out") == len(events))
        finally:
            os.kill(cluster.pid, signal.SIGCONT)
            if proc.poll() is None:
                proc.send_signal(INT)
            proc.wait(timeout=120)
            reader.join(timeout=10)
        assert proc.returncode == 0, "".join(lines)[-3000:]
        down = said("unreachable since")
        assert all(f"faultline: kafka at {bootstrap} unreachable since " in d for d in down)
        for outage in (during_a_batch, down[len(during_a_batch) :]):
            waited = [int(d.rsplit("(", 1)[1].split(" s)")[0]) for d in outage]
            assert waited[0] <= 2, outage  # once per interval, not once per retry:
            assert all(b - a >= 2 for a, b in itertools.pairwise(waited)), outage
        assert len(during_a_batch) <= (resumed - stopped) / 2 + 1, during_a_batch
        back, back_idle = said("reachable again")
        batches = table(tmp_path / "out", "batches")
        after = batches[batches["committed_at"] > resumed * 1000]["batch_id"].min()
        assert back.startswith(f"faultline: kafka at {bootstrap} reachable again after ")
        assert int(back.rsplit(" ", 1)[1]) in (after, after + 1), (back, after)
        assert back_idle.endswith(f"; resuming at batch {idle}\n"), back_idle
        assert not said("rdkafka"), said("rdkafka")  # the clients' own retries are not printed
        _check_kafka_run(reference, tmp_path, bootstrap)
        assert batches["input"].sum() == len(events)


def _committed_input(output: Path) -> int:
    try:
        return int(table(output, "batches")["input"].sum())
    except Exception:  # not created yet
        return 0
