"""The job's Prometheus metrics: ``/metrics`` in Prometheus' text format, served by
``prometheus_client`` while the job runs (``metrics.port``; off unless set).

Everything comes from what the job has at commit time: each key's counters and its ``figures``
(:func:`streaming.job.stateful.figures`, made in the task from the state it holds anyway, only
while the endpoint is on),
Spark's progress of each batch, the publisher's failed deliveries and the outage watch. Nothing
is read back from the tables, and a scrape only formats what the last commit left.

Counters count what this run committed and start at 0 when the job starts, as Prometheus
expects of a restarted process (``rate`` and ``increase`` see the reset); a batch replayed after
its commit counts once. Gauges are each cluster's state as its last batch left it: after a
restart, a cluster's gauges appear with its first batch.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from udfs.engine import CLUSTER, PRODUCER
from udfs.errors import ConfigError
from udfs.vocabulary import Decision, TableName

OUTCOMES = {
    "valid": "valid",
    "quarantined": "quarantined",
    "late": "late",
    "duplicates": "duplicate",
}
"""``batches`` counter -> the ``outcome`` label of ``faultline_records_total``: every record that
reached the operator is exactly one of them."""
HELD = {
    CLUSTER: (Decision.ISOLATE, Decision.OUTLIER, Decision.PANIC, Decision.PROBE),
    PRODUCER: (Decision.ISOLATE,),
}
"""The ``decision`` labels of ``faultline_brokers_isolated`` per scope, each always exported."""
BATCH_BUCKETS = (0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)
"""Seconds: a micro-batch takes about 0.5-2 s on two cores at the default size."""


class Metrics:
    """The job's metrics, in a registry of their own."""

    def __init__(self, clock: Any = time.time) -> None:
        self.clock = clock
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)  # process_start_time_seconds tells a restart
        self.records = Counter(
            "faultline_records",
            "Records that reached the job, by outcome (valid, quarantined, late, duplicate)",
            ["cluster", "outcome"],
            registry=r,
        )
        self.quarantined = Counter(
            "faultline_quarantined_records",
            "Records put in quarantine, by reason code",
            ["cluster", "reason"],
            registry=r,
        )
        self.messages = Counter(
            "faultline_messages",
            "Messages the valid records stand for (a summary its messages, any other record 1)",
            ["cluster"],
            registry=r,
        )
        self.dropped = Counter(
            "faultline_dropped_summaries",
            "Summaries the producers' reporters dropped with a full buffer, as they reported",
            ["cluster"],
            registry=r,
        )
        self.decisions = Counter(
            "faultline_decisions",
            "Rows written to broker_decisions, by scope and decision",
            ["cluster", "scope", "decision"],
            registry=r,
        )
        self.skipped = Counter(
            "faultline_kafka_offsets_skipped",
            "Offsets of the batches' Kafka ranges not read (deleted by retention, compacted away)",
            registry=r,
        )
        self.batches = Counter("faultline_batches", "Micro-batches committed", registry=r)
        self.batch_seconds = Histogram(
            "faultline_batch_duration_seconds",
            "Each micro-batch's duration, from Spark's progress",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.input_rate = Gauge(
            "faultline_input_records_per_second",
            "Spark's input rate over the last micro-batch",
            registry=r,
        )
        self.last_progress = Gauge(
            "faultline_last_progress_timestamp_seconds",
            "When Spark last reported progress (a batch, or an idle trigger), or the job started",
            registry=r,
        )
        self.last_progress.set(clock())  # a job that hangs before its first batch is stalled
        self.publish_failures = Counter(
            "faultline_kafka_publish_failures",
            "Messages Kafka did not take when the job published them (each is sent again)",
            registry=r,
        )
        self.outage_seconds = Counter(
            "faultline_kafka_outage_seconds",
            "Seconds Kafka did not answer the job's outage watch",
            registry=r,
        )
        self.unreachable = Gauge(
            "faultline_kafka_unreachable_seconds",
            "How long Kafka has not answered now (0 while it answers)",
            registry=r,
        )
        self._lock = threading.Lock()
        self._shards: dict[tuple[str, int], dict[str, Any]] = {}
        self._kafka_seen: float | None = None
        r.register(_State(self))

    def committed(self, metas: Iterable[dict[str, Any]], new: bool) -> None:
        """A batch's counter rows (:data:`streaming.job.sink.META`, ``table`` null) after its
        commit: ``new`` when this commit wrote it (a replayed batch counts once)."""
        for meta in metas:
            if meta["table"] is not None or not meta.get("figures"):
                continue
            figures = json.loads(meta["figures"])
            cluster = figures["cluster"]
            with self._lock:
                self._shards[cluster, figures["shard"]] = {
                    **figures,
                    "clock": meta["clock"],
                    "state_bytes": meta["state_bytes"],
                }
            if not new:
                continue
            for column, outcome in OUTCOMES.items():
                if meta[column]:
                    self.records.labels(cluster, outcome).inc(meta[column])
            if meta.get("messages"):
                self.messages.labels(cluster).inc(meta["messages"])
            if meta.get("dropped"):
                self.dropped.labels(cluster).inc(meta["dropped"])
            for scope, decision, rows in figures.get(TableName.BROKER_DECISIONS, []):
                self.decisions.labels(cluster, scope, decision).inc(rows)
            for reason, rows in figures.get(TableName.QUARANTINE, []):
                self.quarantined.labels(cluster, reason).inc(rows)
            if figures["publish_failures"]:
                self.publish_failures.inc(figures["publish_failures"])
        if new:
            self.batches.inc()

    def progress(self, row: dict[str, Any] | None) -> None:
        """Spark's progress of a batch (:func:`streaming.job.progress.progress_row`), or None
        for an idle trigger."""
        self.last_progress.set(self.clock())
        if row is None:
            return
        if row["batch_ms"] is not None:
            self.batch_seconds.observe(row["batch_ms"] / 1000)
        if row["input_rows_per_second"] is not None:
            self.input_rate.set(row["input_rows_per_second"])

    def kafka(self, reachable: bool, since: float | None) -> None:
        """The outage watch's answer: Kafka ``reachable`` or not, unreachable ``since``."""
        now = self.clock()
        if self._kafka_seen is not None:  # down at the last answer: the time since counts
            self.outage_seconds.inc(max(0.0, now - self._kafka_seen))
        self._kafka_seen = None if reachable else now
        self.unreachable.set(0 if reachable or since is None else now - since)

    def clusters(self) -> dict[str, list[dict[str, Any]]]:
        """Each cluster's latest figures, per shard."""
        with self._lock:
            shards = sorted(self._shards.items())
        out: dict[str, list[dict[str, Any]]] = {}
        for (cluster, _), figures in shards:
            out.setdefault(cluster, []).append(figures)
        return out

    def serve(self, host: str, port: int) -> Server:
        """Start serving ``/metrics``; a port that cannot be had is a :class:`ConfigError`."""
        try:
            server, thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                f"metrics.port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None
        return Server(server, thread, host, server.server_port)


class Server:
    """The running endpoint."""

    def __init__(self, server: Any, thread: threading.Thread, host: str, port: int) -> None:
        self.server, self.thread, self.host, self.port = server, thread, host, port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class _State(Collector):
    """The gauges of the clusters' state, made at each scrape from the last figures (series of
    what is no longer held out disappear)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        def family(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"faultline_{name}", doc, labels=labels)

        held = family(
            "brokers_isolated",
            "(scope key, broker) pairs held out now, by the decision that holds them: ISOLATE "
            "(the FaultTable), OUTLIER, PANIC (an isolation the cap waived), PROBE",
            ["cluster", "scope", "decision"],
        )
        broker = family(
            "broker_isolated",
            "1 for each broker the cluster scope holds out now, with the decision",
            ["cluster", "broker", "decision"],
        )
        writable = family(
            "topic_writable_brokers", "A topic's writable brokers", ["cluster", "topic"]
        )
        sick = family(
            "topic_isolated_brokers",
            "A topic's writable brokers the cluster scope isolates (ISOLATE, OUTLIER) or keeps "
            "only by the isolation cap (PANIC)",
            ["cluster", "topic"],
        )
        delayed = family(
            "delay_queue_messages",
            "Messages waiting in a SCHEDULE_TOPIC_XXXX delay level",
            ["cluster", "level"],
        )
        halves = family("half_messages_waiting", "Transactional half messages waiting", ["cluster"])
        state = family("state_bytes", "The cluster's operator state, encoded", ["cluster"])
        clock = family(
            "event_time_seconds", "The cluster's event-time clock (Unix seconds)", ["cluster"]
        )
        lag = family(
            "event_time_lag_seconds",
            "The wall clock minus the cluster's event-time clock, at the scrape",
            ["cluster"],
        )
        now = self.metrics.clock()
        for cluster, shards in self.metrics.clusters().items():
            pairs: dict[tuple[str, str], int] = {
                (scope, d): 0 for scope, ds in HELD.items() for d in ds
            }
            levels: dict[str, int] = {}
            for figures in shards:
                for scope, decision, n in figures["held"]:
                    pairs[scope, decision] = pairs.get((scope, decision), 0) + n
                for b, decision in figures.get("brokers", {}).items():
                    broker.add_metric([cluster, b, decision], 1)
                for topic, (w, s) in figures.get("topics", {}).items():
                    writable.add_metric([cluster, topic], w)
                    sick.add_metric([cluster, topic], s)
                for level, n in figures.get("delayed", {}).items():
                    levels[level] = levels.get(level, 0) + n
            for (scope, decision), n in sorted(pairs.items()):
                held.add_metric([cluster, scope, decision], n)
            for level, n in sorted(levels.items(), key=lambda x: int(x[0])):
                delayed.add_metric([cluster, level], n)
            halves.add_metric([cluster], sum(f.get("halves", 0) for f in shards))
            state.add_metric([cluster], sum(f["state_bytes"] or 0 for f in shards))
            clocks = [f["clock"] for f in shards if f["clock"] is not None]
            if clocks:
                clock.add_metric([cluster], max(clocks) / 1000)
                lag.add_metric([cluster], now - max(clocks) / 1000)
        yield from (held, broker, writable, sick, delayed, halves, state, clock, lag)
