"""Kafka going away while the job runs, without Spark: the driver's lines (an injected clock), how
long a client waits, and the publisher waiting through a Kafka broker frozen with SIGSTOP (its
connections hang, as behind a network partition; its data survives)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming.config import load_job_config
from streaming.job.outage import KafkaIOError, OutageLog, Patience, next_batch
from streaming.sim.kafka_broker import KafkaBroker, kafka_broker
from udfs.errors import ConfigError


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_the_driver_says_it_once_per_interval_not_once_per_probe() -> None:
    clock = Clock()
    log = OutageLog("k:9092", 30, clock=clock, local=lambda t: f"t{t - 1_000:g}")
    assert log.reachable(lambda: 0) is None  # nothing to say while Kafka answers
    lines = []
    for _ in range(100):  # a failed probe every 2.5 s for 250 s
        line = log.unreachable()
        if line is not None:
            lines.append(line)
        clock.now += 2.5
    assert lines == [
        f"faultline: kafka at k:9092 unreachable since t0 ({s} s): waiting"
        for s in (0, 30, 60, 90, 120, 150, 180, 210, 240)
    ]
    asked = []
    back = log.reachable(lambda: asked.append(1) or 12)
    assert back == "faultline: kafka at k:9092 reachable again after 250 s; resuming at batch 12"
    assert log.reachable(lambda: asked.append(1) or 12) is None
    assert asked == [1]  # the checkpoint is read once, when Kafka is back
    clock.now += 100  # the next outage is a new one
    assert log.unreachable() == "faultline: kafka at k:9092 unreachable since t350 (0 s): waiting"


def test_a_client_waits_for_ever_or_until_the_timeout_after_its_last_success() -> None:
    clock = Clock()
    forever = Patience("k:9092", None, clock=clock)
    for _ in range(1000):
        forever.failed("planning")
        clock.now += 3600
    bounded = Patience("k:9092", 60, clock=clock)
    bounded.failed("publishing")
    clock.now += 59
    bounded.failed("publishing")
    bounded.ok()  # Kafka answered: the next failure starts a new wait
    clock.now += 30
    bounded.failed("publishing")
    clock.now += 59
    bounded.failed("publishing")
    clock.now += 1
    with pytest.raises(KafkaIOError) as caught:
        bounded.failed("publishing")
    assert str(caught.value) == (
        "faultline kafka: publishing: kafka at k:9092 unreachable for 60 s "
        "(kafka_outage_timeout 60 s): giving up"
    )


def test_the_batch_resumed_is_the_one_planned_or_the_next(tmp_path: Path) -> None:
    assert next_batch(tmp_path) == 0
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    for name in ("0", "1", "2", ".2.crc"):
        (tmp_path / "offsets" / name).touch()
    for name in ("0", "1"):
        (tmp_path / "commits" / name).touch()
    assert next_batch(tmp_path) == 2  # planned, not committed: it is read again
    (tmp_path / "commits" / "2").touch()
    assert next_batch(tmp_path) == 3


def test_outage_settings_are_validated_naming_the_key(tmp_path: Path) -> None:
    config = load_job_config()
    assert config.kafka_outage_log_interval == 30_000 and config.kafka_outage_timeout is None
    file = tmp_path / "job.yaml"
    file.write_text("kafka_outage_log_interval: 5s\nkafka_outage_timeout: 10m\n")
    config = load_job_config(file)
    assert (config.kafka_outage_log_interval, config.kafka_outage_timeout) == (5_000, 600_000)
    for text, key in (
        ("kafka_outage_log_interval: 0s\n", "kafka_outage_log_interval = '0s'"),
        ("kafka_outage_timeout: soon\n", "kafka_outage_timeout = 'soon'"),
    ):
        file.write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_job_config(file)
        assert str(caught.value).startswith(f"{file}: {key}: "), caught.value


@pytest.fixture(scope="module")
def stoppable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A broker of this module's own, which its tests freeze."""
    with kafka_broker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


def _stop(broker: KafkaBroker) -> None:
    """Freeze the broker, and wait until every thread of it has stopped: the signal reaches
    them one by one, and under load a thread can answer one more request after the signal (a
    test saw 50 messages acknowledged 0.6 ms after it)."""
    assert broker.proc is not None
    broker.signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while not all(_stopped(task) for task in Path(f"/proc/{broker.proc.pid}/task").iterdir()):
        assert time.monotonic() < deadline, "the broker did not stop"
        time.sleep(0.001)


def _stop_for(broker: KafkaBroker, seconds: float) -> threading.Thread:
    _stop(broker)

    def resume() -> None:
        time.sleep(seconds)
        broker.signal(signal.SIGCONT)

    thread = threading.Thread(target=resume)
    thread.start()
    return thread


def _stopped(task: Path) -> bool:
    """Whether a thread is stopped (``T`` in its ``stat``: after the name, which may hold
    spaces, in parentheses)."""
    try:
        return (task / "stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except FileNotFoundError:  # the thread ended
        return True


@pytest.mark.jvm
def test_the_publisher_waits_for_kafka_and_delivers_everything(stoppable: KafkaBroker) -> None:
    from streaming.job.publish import Publisher

    bootstrap, proc = stoppable.bootstrap, stoppable
    # messages time out while Kafka is away: they are sent again, and the last per key stays last
    publisher = Publisher({"bootstrap.servers": bootstrap, "message.timeout.ms": "1000"})
    assert publisher.deliver([("p", "before", "k")]) == 1
    assert publisher.failed == 0
    resume = _stop_for(proc, 2.5)
    began = time.time()
    assert publisher.deliver([("p", f"v{i}", "k") for i in range(50)]) == 50
    waited = time.time() - began
    resume.join()
    publisher.close()
    assert waited >= 2
    assert publisher.failed >= 50  # what faultline_kafka_publish_failures_total counts
    values = _values(bootstrap, "p")
    assert values[0] == "before" and values[-1] == "v49"
    assert {f"v{i}" for i in range(50)} <= set(values)


@pytest.mark.jvm
def test_the_publisher_gives_up_after_the_outage_timeout(stoppable: KafkaBroker) -> None:
    from streaming.job.publish import Publisher

    bootstrap, proc = stoppable.bootstrap, stoppable
    publisher = Publisher({"bootstrap.servers": bootstrap}, outage_timeout_s=1)
    assert publisher.deliver([("q", "before", "k")]) == 1
    _stop(proc)
    began = time.time()
    try:
        with pytest.raises(KafkaIOError) as caught:
            publisher.deliver([("q", "lost", "k")])
    finally:
        proc.signal(signal.SIGCONT)
    assert 1 <= time.time() - began < 5
    assert f"publishing: kafka at {bootstrap} unreachable for 1 s" in str(caught.value)
    publisher.close()  # what was not delivered is dropped: close does not wait for it


def _values(bootstrap: str, topic: str, limit: float = 30) -> list[str]:
    """Every value of a topic, partition by partition, in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}"})
    values: list[str] = []
    deadline = time.time() + limit
    for p in sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        consumer.assign([TopicPartition(topic, p, low)])
        got = 0
        while got < high - low and time.time() < deadline:
            for m in consumer.consume(high - low - got, timeout=1.0):
                if m.error() is None:
                    values.append(m.value().decode())
                    got += 1
    consumer.close()
    return values
