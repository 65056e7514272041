"""The job's Kafka producer, with confluent-kafka (librdkafka): the sink's commit publishes the
cluster scope's broker states and routing tables to compacted topics, keyed by broker and by
topic, and the redeliveries to their ``kafka_topic``, with an idempotent producer, before the
batch's Delta commits; it waits for a Kafka that stops answering as the source does.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from streaming.job.outage import PREFIX, KafkaIOError, KafkaUnreachable, Patience
from udfs.errors import ConfigError

METADATA_TIMEOUT_S = 10.0
RETRY_S = 1.0
"""Pause between two attempts to reach a Kafka that did not answer."""


class _Lines(logging.Handler):
    """Keeps the messages logged to it."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


REACH_TIMEOUT_S = 4.0
"""How long the job waits, before it starts, for a Kafka that neither answers nor refuses."""


def check_reachable(conf: Mapping[str, str], timeout: float = REACH_TIMEOUT_S) -> None:
    """Fail fast, with one line, when no broker answers: at once when every bootstrap server
    refuses the connection, else after ``timeout``."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    # errors reach us through error_cb, librdkafka's log lines through a logger of our own (a
    # refused login is only logged), and neither is printed
    said = _Lines()
    logger = logging.getLogger("faultline.kafka.reachable")
    logger.propagate = False
    logger.handlers = [said]
    settings: dict[str, Any] = {**conf, "error_cb": errors.append, "logger": logger}
    admin = AdminClient(settings)
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=min(0.5, max(deadline - time.monotonic(), 0.05)))
            return
        except KafkaException as exc:
            admin.poll(0)  # hands over the errors and the log lines
            down = any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors)
            if not down and time.monotonic() < deadline:
                continue
            # a refused login says more than the transport failure that follows it
            refused = [
                line.rsplit("]: ", 1)[-1] for line in said.lines if "authentication" in line.lower()
            ]
            transport = [e.str() for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
            seen = (refused or transport or [exc.args[0].str()])[-1]
            raise KafkaUnreachable(
                f"{PREFIX} cannot reach {conf.get('bootstrap.servers')}"
                + ("" if down else f" within {timeout:g} s")
                + f": {seen}; is Kafka running there, and are --kafka-bootstrap and the "
                "kafka_options right?"
            ) from None


DECISIONS_TOPIC = {
    "cleanup.policy": "compact",
    # a reader that starts late reads little more than each key's latest decision: the log is
    # compacted once a tenth of it is superseded, within about a minute of the active segment
    "min.cleanable.dirty.ratio": "0.1",
    "segment.ms": "60000",
}
"""How faultline creates the decisions topic when Kafka does not have it."""


def ensure_decisions_topic(
    conf: Mapping[str, str], topic: str, patience_s: float = 6 * METADATA_TIMEOUT_S
) -> None:
    """Create ``topic`` compacted (:data:`DECISIONS_TOPIC`, one partition, the cluster's
    replication) if Kafka does not have it; stop with a :class:`ConfigError` if it has it with
    another cleanup policy: retention would delete a broker's latest decision, so a producer
    that starts late would not learn of an isolation that still holds.

    A Kafka that answers slowly (one just back from an outage) is asked again, for up to
    ``patience_s``; then the job stops with a :class:`KafkaUnreachable` that says what it asked."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**conf, "log_level": 2})
    server = conf.get("bootstrap.servers")
    deadline = time.monotonic() + patience_s
    while True:
        try:
            policy = _decisions_topic_policy(admin, topic)
            break
        except TimeoutError:
            if time.monotonic() >= deadline:
                raise KafkaUnreachable(
                    f"{PREFIX} kafka at {server} did not create or describe the decisions topic "
                    f"{topic!r} within {patience_s:g} s (asked every {METADATA_TIMEOUT_S:g} s)"
                ) from None
    if policy is not None and "compact" not in policy.split(","):
        raise ConfigError(
            f"decisions_topic: {topic!r} has cleanup.policy={policy}; faultline's decisions need "
            "a compacted topic (cleanup.policy=compact), so that retention never deletes a "
            "broker's latest decision: alter it (kafka-configs.sh --alter --entity-type topics "
            f"--entity-name {topic} --add-config cleanup.policy=compact) or name another topic"
        )


def _decisions_topic_policy(admin: Any, topic: str) -> str | None:
    """The topic's ``cleanup.policy``, or None when it was just created as faultline creates it;
    raises TimeoutError when Kafka does not answer within :data:`METADATA_TIMEOUT_S`."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, NewTopic  # type: ignore[attr-defined]

    try:
        listed = admin.list_topics(timeout=METADATA_TIMEOUT_S).topics
    except KafkaException as exc:
        if exc.args[0].code() == exc.args[0]._TIMED_OUT:
            raise TimeoutError from None
        raise
    if topic not in listed:
        created = admin.create_topics([NewTopic(topic, 1, config=DECISIONS_TOPIC)])[topic]
        try:
            created.result(timeout=METADATA_TIMEOUT_S)
            return None
        except KafkaException as exc:  # made by another job meanwhile: checked below
            if exc.args[0].code() != exc.args[0].TOPIC_ALREADY_EXISTS:
                raise
    resource = ConfigResource("topic", topic)
    found = admin.describe_configs([resource])[resource].result(timeout=METADATA_TIMEOUT_S)
    return str(found["cleanup.policy"].value)


Message = tuple[str, bytes | str, str | None]
"""topic, value, key"""


class Publisher:
    """An idempotent producer. :meth:`deliver` waits for a Kafka that does not answer (at most
    ``outage_timeout_s``); :meth:`flush` raises when any message was not delivered."""

    def __init__(self, conf: Mapping[str, str], outage_timeout_s: float | None = None) -> None:
        from confluent_kafka import Producer

        self.server = str(conf.get("bootstrap.servers"))
        self.outage_timeout_s = outage_timeout_s
        self.failures: list[str] = []
        self.transient = True
        """Whether every failure since the last :meth:`deliver` attempt is worth waiting out."""
        self.delivered = 0
        self.failed = 0
        """Messages Kafka did not take, each time (a resent message may count again)."""
        self.cancelled = threading.Event()
        self.producer = Producer(
            {
                "linger.ms": 20,
                "message.timeout.ms": 30_000,
                "compression.type": "lz4",  # JSON shrinks about fivefold
                "log_level": 2,  # a lost connection is the outage watch's to report, once
                **conf,
                "enable.idempotence": True,
                "error_cb": self._error,
            }
        )

    def _error(self, error: Any) -> None:
        if error.fatal():
            self.failed += 1
            self.failures.append(str(error))
            self.transient = False

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.delivered += 1
            return
        self.failed += 1
        self.failures.append(f"{message.topic()}: {error}")
        self.transient = self.transient and _transient(error)

    def deliver(self, messages: Iterable[Message]) -> int:
        """Send ``messages`` and wait until Kafka has every one. While Kafka does not answer this
        waits, at most ``outage_timeout_s``; when some failed for a reason worth waiting out (a
        timeout, a lost connection), all are sent again, in order, so the last message per key
        stays the latest (a message may then be on Kafka twice: at least once). Raises
        :class:`KafkaIOError` on any other failure, at the timeout, or once :meth:`cancel` is
        called; what is not delivered then is dropped. Returns the number of messages."""
        batch = list(messages)
        patience = Patience(self.server, self.outage_timeout_s)
        try:
            while True:
                self.failures.clear()
                self.transient = True
                for topic, value, key in batch:
                    self.send(topic, value, key)
                done = self.delivered
                while self.producer.flush(RETRY_S) > 0:
                    self._check_cancelled()
                    if self.delivered == done:
                        patience.failed("publishing")
                    else:
                        patience.ok()
                        done = self.delivered
                if not self.failures:
                    return len(batch)
                if not self.transient:
                    raise KafkaIOError(f"{PREFIX} publishing failed: {self.failures[0]}")
                self._check_cancelled()
                patience.failed("publishing")
                self.cancelled.wait(RETRY_S)
        except KafkaIOError:
            self.producer.purge()
            self.producer.flush(0)
            raise

    def _check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise KafkaIOError(f"{PREFIX} publishing stopped: the job is stopping")

    def cancel(self) -> None:
        """Make a :meth:`deliver` that waits for Kafka give up (the job is being stopped)."""
        self.cancelled.set()

    def send(self, topic: str, value: bytes | str, key: str | None = None) -> None:
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, on_delivery=self._delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.1)
        self.producer.poll(0)

    def close(self) -> None:
        """Deliver what is queued, then stop the client's threads and connections."""
        self.producer.close()

    def flush(self, timeout: float = 60.0) -> None:
        left = self.producer.flush(timeout)
        if left or self.failures:
            reason = self.failures[0] if self.failures else f"{left} messages not delivered"
            raise KafkaIOError(f"{PREFIX} publishing failed: {reason}")


def _transient(error: Any) -> bool:
    from confluent_kafka import KafkaError as Error

    waits = (Error._MSG_TIMED_OUT, Error._TIMED_OUT, Error._TRANSPORT, Error._ALL_BROKERS_DOWN)
    return bool(error.retriable()) or error.code() in waits


def publish_events(events: Iterable[Mapping[str, Any]], conf: Mapping[str, str], topic: str) -> int:
    """``faultline simulate --kafka-bootstrap``: each event as JSON, keyed by its cluster, so a
    cluster's events keep their order in one partition."""
    publisher = Publisher(conf)
    count = 0
    for event in events:
        value = json.dumps(event, separators=(",", ":"))
        publisher.send(topic, value, key=str(event.get("cluster", "default")))
        count += 1
    publisher.flush()
    return count
