"""Kafka end to end through Spark's own Kafka source, against an Apache Kafka broker
(``streaming.sim.kafka_broker``): the worker's shared broker (the ``kafka`` fixture), or one of the
test's own where the test stops or kills it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from streaming.client import decision_key
from streaming.config import load_scenario
from streaming.sim.kafka_broker import SASL_USER, KafkaBroker
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
    for r in decisions.sort_values(["effective_at"], kind="stable").to_dict("records"):
        expected[decision_key(r)] = (r["decision"], r["available_from"])
    assert {
        k: (v["decision"], v["available_from"])
        for k, v in latest.items()
        if k.startswith(("broker/", "broker-route/"))
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


def test_a_kafka_with_a_sasl_login_is_read_and_written_with_the_same_kafka_options(
    job: Job, broker: KafkaBroker, tmp_path: Path
) -> None:
    """One set of librdkafka settings (``kafka_options``) logs every client in: ``faultline
    simulate``, Spark's Kafka source (the Java client, told in its own words), the outputs and the
    outage watch; the wrong password stops the job before it starts. The options' secret is never
    printed."""
    user, password = SASL_USER

    def config(secret: str) -> Path:
        path = tmp_path / f"sasl-{secret}.yaml"
        path.write_text(
            "kafka_options: {security.protocol: SASL_PLAINTEXT, sasl.mechanism: PLAIN, "
            f"sasl.username: {user}, sasl.password: {secret}}}\n"
            "decisions_topic: sasl-decisions\n"
        )
        return path

    args = ("--kafka-bootstrap", broker.sasl_bootstrap, "--topic", "sasl-events")
    published = faultline(
        "simulate", "--scenario", "quick", "--config", str(config(password)), *args, cwd=tmp_path
    )
    assert published.returncode == 0, published.stderr[-2000:]
    result = job(
        "run", "--source", "kafka", "--config", str(config(password)), *args, "--once",
        "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert password not in result.stdout + result.stderr
    events = len(simulate(load_scenario("quick")))
    assert table(tmp_path / "out", "batches")["input"].sum() == events
    decisions = table(tmp_path / "out", "broker_decisions").query("scope == 'cluster'")
    assert len(_read_all(broker.bootstrap, "sasl-decisions", 1)) >= 1 and len(decisions) > 0
    refused = job(
        "run", "--source", "kafka", "--config", str(config("wrong")), *args, "--once",
        "--output", str(tmp_path / "out2"), "--checkpoint", str(tmp_path / "ck2"), cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"faultline: faultline kafka: cannot reach {broker.sasl_bootstrap}: "
        f"sasl_plaintext://{broker.sasl_bootstrap}/bootstrap: SASL authentication error: "
        "Authentication failed: Invalid username or password"
    ), last
    assert "wrong" not in refused.stdout + refused.stderr


def test_topics_that_appear_while_running_are_read(kafka: str, tmp_path: Path) -> None:
    events = simulate(load_scenario("quick"))
    half = len(events) // 2
    # idempotent: a plain producer retries the first sends to a new topic behind later ones
    producer = Producer({"bootstrap.servers": kafka, "enable.idempotence": True})
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


def _retained(bootstrap: str, topic: str, records: int, kept: int) -> int:
    """``records`` of 1 kB on partition 0 of a new topic whose retention (2 s) deletes them all,
    then, with retention off, ``kept`` more; the offset Kafka keeps from."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = {"retention.ms": "2000", "segment.bytes": "1048576"}
    admin.create_topics([NewTopic(topic, 1, config=settings)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def produce(n: int) -> None:
        for _ in range(n):
            producer.produce(topic, b"x" * 1000, partition=0)
            producer.poll(0)
        assert producer.flush(60) == 0

    produce(records - kept)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check"})
    deadline = time.time() + 60
    low = 0
    while low < records - kept and time.time() < deadline:  # retention is checked every second
        time.sleep(0.5)
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert low == records - kept
    entry = ConfigEntry("retention.ms", "-1", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)
    produce(kept)
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (low, records)
    consumer.close()
    return int(low)


def test_offsets_lost_to_retention_fail_or_are_skipped_and_counted(
    job: Job, kafka: str, tmp_path: Path
) -> None:
    """A job that starts at offset 0 of a partition whose first offsets retention deleted: with
    ``fail_on_data_loss`` (the default) it stops at once with Spark's reason; without, it reads
    what is left and its ``batches`` rows count the offsets it could not read."""
    low = _retained(kafka, "lossy", 12_000, 1_000)
    start_at = ("--starting-offsets", json.dumps({"lossy": {"0": 0}}))
    failing = job(*_args(tmp_path, kafka, "lossy", "--once", *start_at), cwd=tmp_path)
    assert failing.returncode == 1
    last = failing.stderr.strip().splitlines()[-1]
    assert last == (
        "faultline: failed: faultline kafka: Could not read records in offset [0, 200) for "
        "topic partition lossy-0: deleted by retention before the job read them "
        "(fail_on_data_loss: false skips and counts them)"
    ), failing.stderr[-3000:]
    assert batches_committed(tmp_path / "out") == 0

    skipping = tmp_path / "skip"
    skipping.mkdir()
    args = _args(skipping, kafka, "lossy", "--once", *start_at)
    (skipping / "job.yaml").write_text("fail_on_data_loss: false\ndecisions_topic: ''\n")
    result = job(*args, "--max-offsets-per-trigger", "20000", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    batches = table(skipping / "out", "batches")
    assert batches["input"].sum() == 12_000 - low
    assert batches["skipped"].sum() == low
    assert f"{low} offsets skipped" in result.stdout
    quarantine = table(skipping / "out", "quarantine")
    assert (quarantine["reason_code"] == "MALFORMED_JSON").sum() == 12_000 - low
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


def _committed_input(output: Path) -> int:
    try:
        return int(table(output, "batches")["input"].sum())
    except Exception:  # not created yet
        return 0
