"""Kafka going away while the job runs, end to end through Spark's Kafka source on an Apache
Kafka broker of each test's own, which the test freezes (SIGSTOP) or kills and starts again: the
job waits, says so, gives up after ``kafka_outage_timeout``, and loses or repeats nothing."""

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
from confluent_kafka import Producer

from streaming.config import load_scenario
from streaming.sim.kafka_broker import kafka_broker
from streaming.sim.simulator import simulate
from tests.streaming.conftest import (
    INT,
    OUTPUT_TABLES,
    Job,
    batches_committed,
    faultline,
    same_tables,
    start,
    table,
)
from tests.streaming.test_kafka import _args, _check_kafka_run, _committed_input, _read_all
from udfs.schedule import kafka_topic

pytestmark = pytest.mark.jvm


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
        # idempotent: a plain producer retries the first sends to a new topic behind later ones
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

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
    job: Job, tmp_path: Path
) -> None:
    """Spark's Kafka source waits for Kafka for ever; with ``kafka_outage_timeout`` the job gives
    up after that long, with one line, and the restart reads on from where it stopped."""
    events = simulate(load_scenario("quick"))
    with kafka_broker(tmp_path / "kafka") as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
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
        again = job(*args, "--once", cwd=tmp_path)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert _committed_input(tmp_path / "out") == len(events)
