"""Kafka going away while the job runs: every Kafka client of the job waits for it to come back
(forever, or ``kafka_outage_timeout``), and the job's driver says so, once per
``kafka_outage_log_interval``.

Who waits where: Spark's Kafka source retries until Kafka answers (its planning on the driver,
its read tasks on the executors); the publisher (the driver, inside a batch) waits until every
message is delivered. None of them prints. The driver's :class:`Watch` asks Kafka for its
metadata a few times per interval, prints the lines, and gives up after
``kafka_outage_timeout`` (the job then stops its query).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from udfs.errors import FaultlineError

if TYPE_CHECKING:
    from streaming.job.metrics import Metrics

PREFIX = "faultline kafka:"
"""Starts every error the Kafka clients raise, so the job can pick it out of a Spark error."""

Clock = Callable[[], float]


class KafkaIOError(FaultlineError):
    """Kafka could not be reached, read or written; the message starts with :data:`PREFIX`."""


class KafkaUnreachable(KafkaIOError):
    """No broker answered in time: worth waiting for."""


def quiet(conf: Mapping[str, str]) -> dict[str, Any]:
    """Client settings whose connection errors are not logged: each would print a line per
    reconnection attempt. Errors reach the clients' own checks; ``log_level`` in ``conf`` wins."""
    return {"log_level": 2, "error_cb": lambda _: None, **conf}


class Patience:
    """How long one client keeps waiting for Kafka: forever (``timeout_s`` None) or
    ``timeout_s`` from the first failure after the last success."""

    def __init__(self, server: str, timeout_s: float | None, clock: Clock = time.time) -> None:
        self.server = server
        self.timeout_s = timeout_s
        self.clock = clock
        self.since: float | None = None

    def failed(self, doing: str) -> None:
        """Kafka did not answer; raises :class:`KafkaIOError` once the wait exceeds the timeout."""
        now = self.clock()
        if self.since is None:
            self.since = now
        if self.timeout_s is not None and now - self.since >= self.timeout_s:
            raise KafkaIOError(
                f"{PREFIX} {doing}: kafka at {self.server} unreachable for "
                f"{now - self.since:.0f} s (kafka_outage_timeout {self.timeout_s:g} s): giving up"
            )

    def ok(self) -> None:
        self.since = None


class OutageLog:
    """The driver's lines about an outage: one when Kafka stops answering, one per ``interval_s``
    while it stays away, one when it is back; none while it answers.

    >>> now = [0.0]
    >>> log = OutageLog("k:9092", 30, clock=lambda: now[0], local=lambda t: "10:01:02")
    >>> log.unreachable()
    'faultline: kafka at k:9092 unreachable since 10:01:02 (0 s): waiting'
    >>> now[0] = 29.0; log.unreachable() is None
    True
    >>> now[0] = 47.0; log.reachable(lambda: 7)
    'faultline: kafka at k:9092 reachable again after 47 s; resuming at batch 7'
    """

    def __init__(
        self,
        server: str,
        interval_s: float,
        clock: Clock = time.time,
        local: Callable[[float], str] = lambda t: time.strftime("%H:%M:%S", time.localtime(t)),
    ) -> None:
        self.server = server
        self.interval_s = interval_s
        self.clock = clock
        self.local = local
        self.since: float | None = None
        self.said = 0.0

    def unreachable(self) -> str | None:
        now = self.clock()
        if self.since is None:
            self.since = now
        elif now - self.said < self.interval_s:
            return None
        self.said = now
        return (
            f"faultline: kafka at {self.server} unreachable since {self.local(self.since)} "
            f"({now - self.since:.0f} s): waiting"
        )

    def reachable(self, next_batch: Callable[[], int]) -> str | None:
        if self.since is None:
            return None
        down = self.clock() - self.since
        self.since = None
        return (
            f"faultline: kafka at {self.server} reachable again after {down:.0f} s; "
            f"resuming at batch {next_batch()}"
        )


def next_batch(checkpoint: Path) -> int:
    """The batch the query runs next: the last one whose offsets Spark logged, unless Spark
    committed it too."""

    def last(folder: str) -> int:
        names = (p.name for p in (checkpoint / folder).glob("*"))
        return max((int(n) for n in names if n.isdigit()), default=-1)

    planned, done = last("offsets"), last("commits")
    return planned if planned > done else done + 1


class Watch:
    """Driver side: asks Kafka for its metadata every half of ``interval_s`` (at most 5 s) and
    prints :class:`OutageLog`'s lines to ``out``. With ``timeout_s``, it gives up once Kafka has
    not answered for that long: :attr:`gave_up` then holds the reason, and the job stops its
    query (Spark's Kafka source itself waits for ever)."""

    def __init__(
        self,
        conf: Mapping[str, str],
        interval_s: float,
        checkpoint: Path,
        out: TextIO,
        metrics: Metrics | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.conf = dict(conf)
        self.metrics = metrics
        self.log = OutageLog(self.conf["bootstrap.servers"], interval_s)
        self.patience = Patience(self.conf["bootstrap.servers"], timeout_s)
        self.gave_up: str | None = None
        self.tick = min(interval_s, 10.0) / 2
        self.checkpoint = checkpoint
        self.out = out
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="faultline-kafka-watch", daemon=True)

    def start(self) -> Watch:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()

    def _run(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(quiet(self.conf))
        while not self.stopped.is_set():
            began = time.time()
            try:
                admin.list_topics(timeout=max(self.tick, 1.0))
                line = self.log.reachable(lambda: next_batch(self.checkpoint))
                reachable = True
                self.patience.ok()
            except KafkaException:
                line = self.log.unreachable()
                reachable = False
                try:
                    self.patience.failed("reading")
                except KafkaIOError as exc:
                    self.gave_up = str(exc)
                    return
            if self.metrics is not None:
                self.metrics.kafka(reachable, self.log.since)
            if line is not None:
                print(line, file=self.out, flush=True)
            self.stopped.wait(max(0.0, self.tick - (time.time() - began)))
