"""The Kafka tools around the job, without Spark, on a real Apache Kafka broker: the broker as a
background service, ``faultline simulate`` publishing with the job's Kafka settings, and the
embeddable client reading the compacted decision topic."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

from streaming.config import load_scenario
from streaming.sim.kafka_broker import free_port
from streaming.sim.simulator import simulate
from tests.streaming.conftest import Installed, faultline
from tests.streaming.test_kafka import _read_all

pytestmark = pytest.mark.jvm


def _count(bootstrap: str, topic: str, expected: int, limit: float = 60, group: str = "") -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"n-{topic}{group}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen, deadline = 0, time.time() + limit
    try:
        while seen < expected and time.time() < deadline:
            seen += sum(m.error() is None for m in consumer.consume(1000, timeout=0.5))
    finally:
        consumer.close()
    return seen


def test_the_broker_runs_in_the_background_until_it_is_told_to_stop(tmp_path: Path) -> None:
    """As docs/kafka.md starts it: no terminal, its input at end of file from the start; stopped
    and started again on its folder, it has its messages."""

    def serve() -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streaming.sim.kafka_broker", "--port", str(port),
             "--data", str(tmp_path / "kafka")],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("bootstrap "), line + (proc.stderr.read() if proc.stderr else "")
        return proc, line.split()[1]

    port = free_port()
    proc, bootstrap = serve()
    try:
        assert bootstrap == f"127.0.0.1:{port}"
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("background", b"hello")
        assert producer.flush(30) == 0
        assert _count(bootstrap, "background", 1) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert "shut down completely" in (tmp_path / "kafka" / "server.log").read_text()
    proc, _ = serve()
    try:
        assert _count(bootstrap, "background", 1, group="again") == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_simulate_takes_kafka_settings_from_the_configuration(kafka: str, tmp_path: Path) -> None:
    events = simulate(load_scenario("quick"))
    config = tmp_path / "job.yaml"
    config.write_text(f"kafka_bootstrap: {kafka}\ntopic: from-config\n")
    done = faultline("simulate", "--scenario", "quick", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    published = f"faultline: {len(events)} events of quick published to from-config"
    assert done.stdout.strip() == published
    assert _count(kafka, "from-config", len(events)) == len(events)
    # kafka_options reach the client: librdkafka refuses a value it does not know
    config.write_text(f"kafka_bootstrap: {kafka}\nkafka_options: {{acks: banana}}\n")
    refused = faultline(
        "simulate", "--scenario", "quick", "--config", str(config), "--topic", "refused",
        cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 1
    assert (
        'Invalid value for configuration property "request.required.acks"'
        in (refused.stderr.strip().splitlines()[-1])
    )


def test_the_embeddable_client_reads_the_decision_topic(kafka: str, tmp_path: Path) -> None:
    """What a producer embeds: the compacted decision topic, as the job publishes it (the sink's
    own publisher and message shape), read back into ``is_available``."""
    from streaming.client import DecisionClient
    from streaming.job.publish import Publisher, ensure_decisions_topic
    from streaming.job.sink import create_tables, publish_batch

    now = int(time.time() * 1000)
    decision = {
        "scope": "cluster",
        "scope_key": "C",
        "cluster": "C",
        "broker_name": "broker-x",
        "decision": "ISOLATE",
        "effective_at": now,
        "available_from": now + 600_000,
        "reason": "REMOTING_EXCEPTION after 3 ms (isolation): not available for 600000 ms",
        "cause_event_id": "e1",
        "profile": "rocketmq-4.9",
    }
    restored = {**decision, "broker_name": "broker-y", "decision": "RESTORE", "available_from": now}
    # recovery probing: broker-z's isolation ended, it takes a tenth of the sends for 10 minutes
    ended = {**restored, "broker_name": "broker-z"}
    probe = {**ended, "decision": "PROBE", "available_from": now + 600_000, "reason": "probing"}
    lost = {"cluster": "C", "transaction_id": "tx-1", "state": "END_TO_UNAVAILABLE_BROKER",
            "broker_name": "broker-x", "effective_at": now, "notify": True}  # fmt: skip
    rows = {
        "broker_decisions": [probe, decision, ended, restored],  # as the tasks hand them over
        "routing_table": [],
        "redeliveries": [],
        # a producer must act on the first only
        "transactions": [lost, {**lost, "transaction_id": "tx-2", "notify": False}],
    }
    create_tables(tmp_path)  # the batch is not committed yet: it is published
    ensure_decisions_topic({"bootstrap.servers": kafka}, "dec")
    publisher = Publisher({"bootstrap.servers": kafka})
    sent = publish_batch(tmp_path, 0, rows, "app", publisher, "dec", probe_share=0.1)
    assert sent == 4  # broker-z's restoration is followed by its probation in the same batch
    notices: list[dict[str, Any]] = []
    client = DecisionClient(kafka, "dec", on_transaction=notices.append).start()
    try:
        # its thread reads in the background, the five messages in any order across partitions
        def settled() -> bool:
            probing = not all(client.is_available("C", "broker-z", ticket=i) for i in range(20))
            return not client.is_available("C", "broker-x") and probing and bool(notices)

        deadline = time.time() + 60
        while not settled() and time.time() < deadline:
            time.sleep(0.1)
        assert not client.is_available("C", "broker-x")
        assert client.is_available("C", "broker-y")
        assert client.is_available("C", "broker-never-heard-of")
        taken = [client.is_available("C", "broker-z", ticket=i) for i in range(1_000)]
        assert abs(sum(taken) - 100) <= 2  # the PROBE came after the RESTORE of its instant
        assert [(n["transaction_id"], n["state"]) for n in notices] == [
            ("tx-1", "END_TO_UNAVAILABLE_BROKER")
        ]
    finally:
        client.close()


def test_the_decision_topic_is_made_compacted_and_a_late_reader_sees_each_keys_latest_only(
    kafka: str,
) -> None:
    """faultline makes its decisions topic compacted; after many decisions per broker, a reader
    that starts late reads each broker's latest decision and nothing older (the broker compacts
    closed segments: this test closes them within a second instead of faultline's minute). A
    topic that exists without compaction stops the job, naming the fix."""
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    from streaming.job.publish import ensure_decisions_topic
    from udfs.errors import ConfigError

    conf = {"bootstrap.servers": kafka}
    ensure_decisions_topic(conf, "compacted")
    ensure_decisions_topic(conf, "compacted")  # there already: accepted as it is
    admin = AdminClient(conf)
    topic = ConfigResource("topic", "compacted")
    found = admin.describe_configs([topic])[topic].result(30)
    assert found["cleanup.policy"].value == "compact"
    assert found["min.cleanable.dirty.ratio"].value == "0.1"
    admin.incremental_alter_configs(
        [ConfigResource("topic", "compacted", incremental_configs=[
            ConfigEntry("segment.ms", "500", incremental_operation=AlterConfigOpType.SET)])]
    )[topic].result(30)  # fmt: skip
    producer = Producer(conf)
    brokers = [f"broker/C/b{i}" for i in range(10)]
    for n in range(50):
        for key in brokers:
            producer.produce("compacted", json.dumps({"round": n}), key=key)
        producer.flush(30)
        time.sleep(0.05)
    time.sleep(0.6)
    producer.produce("compacted", b"{}", key="roll")  # closes the segment the last round is in
    producer.flush(30)

    def late_reader() -> list[tuple[str, int]]:
        group = {"group.id": f"late-{time.time()}", "auto.offset.reset": "earliest"}
        consumer = Consumer({**conf, **group, "enable.auto.commit": False})
        consumer.subscribe(["compacted"])
        seen: list[tuple[str, int]] = []
        deadline = time.time() + 10
        while time.time() < deadline and not any(k == "roll" for k, _ in seen):
            for m in consumer.consume(1000, timeout=0.5):
                if m.error() is None:
                    seen.append((m.key().decode(), json.loads(m.value()).get("round", -1)))
        consumer.close()
        return seen

    deadline = time.time() + 90
    while len(seen := late_reader()) > len(brokers) + 1 and time.time() < deadline:
        time.sleep(1)
    assert sorted(seen) == sorted([*((k, 49) for k in brokers), ("roll", -1)]), len(seen)

    admin.create_topics([NewTopic("deleting", 1)])["deleting"].result(30)
    with pytest.raises(ConfigError) as refused:
        ensure_decisions_topic(conf, "deleting")
    assert str(refused.value).startswith(
        "decisions_topic: 'deleting' has cleanup.policy=delete; faultline's decisions need a "
        "compacted topic"
    )


def test_a_kafka_slow_to_answer_for_the_decision_topic_is_asked_again_then_named(
    kafka: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Kafka just back from an outage may leave a metadata request unanswered: the job asks
    again, and only after ``patience_s`` stops, with one line that says what it asked (it once
    stopped with a bare ``faultline: failed: TimeoutError``)."""
    from streaming.job import publish
    from streaming.job.outage import KafkaUnreachable

    real = publish._decisions_topic_policy
    calls: list[str] = []

    def slow_twice(admin: object, topic: str) -> str | None:
        calls.append(topic)
        if len(calls) <= 2:
            raise TimeoutError
        return real(admin, topic)

    monkeypatch.setattr(publish, "_decisions_topic_policy", slow_twice)
    publish.ensure_decisions_topic({"bootstrap.servers": kafka}, "slow", patience_s=5)
    assert calls == ["slow"] * 3
    calls.clear()
    with pytest.raises(KafkaUnreachable) as stopped:
        publish.ensure_decisions_topic({"bootstrap.servers": kafka}, "slower", patience_s=0)
    assert str(stopped.value) == (
        f"faultline kafka: kafka at {kafka} did not create or describe the decisions topic "
        "'slower' within 0 s (asked every 10 s)"
    )


SLIM = """
import json, sys, time
from streaming.client import DecisionClient, KafkaReporter

bootstrap, results, decisions = sys.argv[1:]
reporter = KafkaReporter(bootstrap, results, "slim-1", cluster="C")
reporter.send({"topic": "orders", "broker_name": "broker-x", "queue_id": 1, "outcome":
               "REMOTING_EXCEPTION", "latency_ms": 3, "event_time": 1_000, "attempt": 0})
reporter.close()
client = DecisionClient(bootstrap, decisions).start()
deadline = time.time() + 60
while client.is_available("C", "broker-x") and time.time() < deadline:
    time.sleep(0.1)
print(json.dumps({"available": client.is_available("C", "broker-x"),
                  "modules": sorted(m.split(".")[0] for m in sys.modules)}))
client.close()
"""


def test_a_python_producer_installs_the_client_without_the_job(
    installed: Installed, kafka: str, tmp_path: Path
) -> None:
    """``pip install faultline`` (no extra) is what a Python producer needs: its reporter
    publishes to Kafka and its decision client follows, without Spark, pandas, Dash or pydantic
    installed; the job's commands then say which extra they need."""
    venv = tmp_path / "slim"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    pip = subprocess.run(
        [python, "-m", "pip", "install", "-q", installed.wheel],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"faultline", "confluent-kafka"} <= names
    assert not names & {"pyspark", "pandas", "numpy", "dash", "pydantic", "pyyaml", "deltalake"}
    now = int(time.time() * 1000)
    isolate = {"scope": "cluster", "cluster": "C", "broker_name": "broker-x",
               "state": "ISOLATED", "decision": "ISOLATE", "effective_at": now,
               "available_from": now + 600_000}  # fmt: skip
    producer = Producer({"bootstrap.servers": kafka})
    producer.produce("slim-decisions", json.dumps(isolate), key="broker/C/broker-x")
    assert producer.flush(30) == 0
    ran = subprocess.run(
        [python, "-c", SLIM, kafka, "slim-results", "slim-decisions"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout)
    assert seen["available"] is False
    assert not {"pyspark", "pandas", "numpy", "pyarrow"} & set(seen["modules"])
    (record,) = [json.loads(m.value()) for m in _read_all(kafka, "slim-results", 1)]
    assert (record["producer_id"], record["broker_name"], record["outcome"]) == (
        "slim-1", "broker-x", "REMOTING_EXCEPTION",
    )  # fmt: skip
    job = subprocess.run(
        [venv / "bin" / "faultline", "run"], capture_output=True, text=True, timeout=60,
        cwd=tmp_path, check=False,
    )  # fmt: skip
    assert job.returncode == 2
    assert job.stderr == (
        "faultline: the job's commands need its dependencies (yaml is not installed): "
        "pip install 'faultline[job]'\n"
    )
