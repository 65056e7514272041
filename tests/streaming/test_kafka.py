"""Kafka end to end through Spark's own Kafka source, against an Apache Kafka broker
(``streaming.sim.kafka_broker``): the worker's shared broker (the ``kafka`` fixture), or one of the
test's own where the test stops or kills it."""

from __future__ import annotations

import itertools
import json
import signal
import threading
import time
from collections.abc import Callable
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

from streaming.config import load_scenario
from streaming.sim.kafka_broker import SASL_USER, KafkaBroker, kafka_broker
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
        f"faultline: faultline kafka: cannot reach {broker.sasl_bootstrap} within 10 s: "
        f"sasl_plaintext://{broker.sasl_bootstrap}/bootstrap: SASL authentication error: "
        "Authentication failed: Invalid username or password"
    ), last
    assert "wrong" not in refused.stdout + refused.stderr


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


def test_a_delivery_failure_fails_the_batch_and_the_restart_retries_it(
    job: Job, reference: Path, tmp_path: Path
) -> None:
    """Files in, outputs to a Kafka that goes away (killed) for longer than
    ``kafka_outage_timeout``: the batch being published fails and the ``faultline`` process exits,
    having committed nothing of it; the restart (in this process), once Kafka is back, publishes
    it and commits it once."""
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
    with kafka_broker(tmp_path / "kafka") as broker:
        proc = start(*args(broker.bootstrap), cwd=tmp_path)
        deadline = time.time() + 240
        while batches_committed(out) < 2 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        broker.kill()  # the next batch cannot be delivered
        stdout, _ = proc.communicate(timeout=240)
        assert proc.returncode == 1
        assert (
            f"faultline: failed: faultline kafka: publishing: kafka at {broker.bootstrap} "
            "unreachable for"
        ) in stdout
        assert "(kafka_outage_timeout 3 s): giving up" in stdout
        committed = table(out, "batches")
        assert 2 <= len(committed) < len(table(reference, "batches"))
        for name in OUTPUT_TABLES:  # nothing of the failed batch reached a table
            assert set(table(out, name)["batch_id"]) <= set(committed["batch_id"]), name
        broker.start()
        result = job(*args(broker.bootstrap, "--once"), cwd=tmp_path)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        redeliveries = table(out, "redeliveries")
        done = set(committed["batch_id"])
        retried = redeliveries[~redeliveries["batch_id"].isin(done)]
        for target, group in retried.groupby("target_topic"):
            got = _read_all(broker.bootstrap, kafka_topic(str(target)), len(group))
            assert {m.key().decode() for m in got} >= set(group["message_id"]), target
    same_tables(reference, out)


def test_kafka_unreachable_while_running_is_waited_out_and_nothing_is_lost_or_repeated(
    reference: Path, tmp_path: Path
) -> None:
    """The broker frozen (SIGSTOP: connections hang, as behind a network partition) during a
    batch, then thawed; later, while the job waits for records, killed (SIGKILL) and started
    again on its data: each time the job waits, says so once per interval, and it ends with the
    tables of an uninterrupted run."""
    events = simulate(load_scenario("quick"))
    topic, first = "events-outage", 1200
    with kafka_broker(tmp_path / "kafka") as broker:
        bootstrap = broker.bootstrap
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
            broker.signal(signal.SIGSTOP)
            stopped = time.time()
            wait_for(lambda: len(said("unreachable since")) >= 4, 30)  # about 6 s
            broker.signal(signal.SIGCONT)
            resumed = time.time()
            wait_for(lambda: bool(said("reachable again")), 60)
            during_a_batch = said("unreachable since")
            # again while the job waits for new records, for longer than the 10 s a planner's
            # question to Kafka may take: a broker that crashed, then restarted on its data
            wait_for(lambda: _committed_input(tmp_path / "out") == first)
            idle = batches_committed(tmp_path / "out")
            broker.kill()
            wait_for(lambda: len(said("unreachable since")) >= len(during_a_batch) + 7, 40)
            broker.start()
            wait_for(lambda: len(said("reachable again")) == 2, 60)
            publish(events[first:])
            wait_for(lambda: _committed_input(tmp_path / "out") == len(events))
        finally:
            if broker.proc is not None:
                broker.signal(signal.SIGCONT)
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
        assert not said("WARN") and not said("ERROR"), said("WARN") + said("ERROR")
        _check_kafka_run(reference, tmp_path, bootstrap)
        assert batches["input"].sum() == len(events)


def test_a_kafka_away_for_longer_than_the_outage_timeout_stops_the_job(
    tmp_path: Path,
) -> None:
    """Spark's Kafka source waits for Kafka for ever; with ``kafka_outage_timeout`` the job gives
    up after that long, with one line, and the restart reads on from where it stopped."""
    events = simulate(load_scenario("quick"))
    with kafka_broker(tmp_path / "kafka") as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for e in events:
            producer.produce("events-timeout", json.dumps(e), key=e["cluster"])
        assert producer.flush(30) == 0
        args = _args(tmp_path, broker.bootstrap, "events-timeout")
        with (tmp_path / "job.yaml").open("a") as config:
            config.write("kafka_outage_timeout: 5s\nkafka_outage_log_interval: 1s\n")
        proc = start(*args, cwd=tmp_path)
        deadline = time.time() + 240
        while batches_committed(tmp_path / "out") < 2 and time.time() < deadline:
            time.sleep(0.05)
        broker.signal(signal.SIGSTOP)
        stopped = time.time()
        try:
            stdout, _ = proc.communicate(timeout=120)
        finally:
            broker.signal(signal.SIGCONT)
        assert proc.returncode == 1, stdout[-3000:]
        assert 5 <= time.time() - stopped < 60
        last = stdout.strip().splitlines()[-1]
        assert last.startswith(
            f"faultline: failed: faultline kafka: reading: kafka at {broker.bootstrap} "
            "unreachable for "
        ), stdout[-3000:]
        assert last.endswith("s (kafka_outage_timeout 5 s): giving up"), last
        committed = _committed_input(tmp_path / "out")
        assert 0 < committed < len(events)
        again = start(*args, "--once", cwd=tmp_path)
        stdout, _ = again.communicate(timeout=300)
        assert again.returncode == 0, stdout[-3000:]
        assert _committed_input(tmp_path / "out") == len(events)


def _committed_input(output: Path) -> int:
    try:
        return int(table(output, "batches")["input"].sum())
    except Exception:  # not created yet
        return 0
