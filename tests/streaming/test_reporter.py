"""The reporter a producer embeds (:class:`streaming.client.Reporter`): which sends go out in
full, when summaries go out, what a full buffer drops; and :class:`KafkaReporter` publishing to
a real Kafka-protocol server, whose records the parser takes as valid events."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from streaming.client import WINDOW_MS, KafkaReporter, Reporter
from udfs.parse import parse

T0 = 1_795_255_200_000


def _sink(
    out: list[dict[str, Any]], open_: list[bool] | None = None
) -> Callable[[dict[str, Any]], bool]:
    """A sink that takes every record into ``out``, or none while ``open_[0]`` is false."""

    def take(record: dict[str, Any]) -> bool:
        if open_ is not None and not open_[0]:
            return False
        out.append(record)
        return True

    return take


def _reporter(**kw: Any) -> tuple[Reporter, list[dict[str, Any]]]:
    out: list[dict[str, Any]] = []
    settings = {"client_profile": "rocketmq-4.9", **kw}
    return Reporter("p", _sink(out), **settings), out


def _send(t: int, broker: str = "a", **kw: Any) -> dict[str, Any]:
    return {"event_time": T0 + t, "topic": "T", "broker_name": broker, "latency_ms": 5,
            "outcome": "SEND_OK", "attempt": 0, "queue_id": 0, **kw}  # fmt: skip


def _kinds(out: list[dict[str, Any]]) -> list[tuple[str, str | None, int]]:
    return [(r["kind"], r.get("broker_name"), r.get("messages", 1)) for r in out]


def test_healthy_sends_go_out_as_one_summary_per_broker_and_window() -> None:
    reporter, out = _reporter()
    step = WINDOW_MS // 100  # 100 sends a window, to a and b in turn
    for t in range(0, WINDOW_MS, step):
        reporter.send(_send(t, "a" if t % (2 * step) else "b", latency_ms=t % 7,
                            queue_index=t // step))  # fmt: skip
    assert out == []  # the window is open
    reporter.send(_send(WINDOW_MS, "a"))  # the next window: the first one's summaries go
    assert _kinds(out) == [("send_summary", "b", 50), ("send_summary", "a", 50)]
    a = out[1]
    assert (a["window_start"], a["window_end"]) == (T0, T0 + WINDOW_MS)
    assert (a["first_time"], a["event_time"]) == (T0 + step, T0 + WINDOW_MS - step)
    assert a["latency_total"] == sum(t % 7 for t in range(step, WINDOW_MS, 2 * step))
    assert a["histogram"][0] == 50 and len(a["histogram"]) == 8
    assert (a["queue_index_start"], a["queue_index_end"]) == (1, 99)
    reporter.close()
    assert _kinds(out)[-1] == ("send_summary", "a", 1)
    values = [json.dumps(r) for r in out]
    parsed = parse(values, ["t"] * len(values), [None] * len(values))
    assert parsed.column("reason_code").null_count == len(values)


def test_what_can_change_a_decision_goes_out_in_full_after_its_brokers_summary() -> None:
    reporter, out = _reporter()
    reporter.send(_send(0, "a"))
    reporter.send(_send(1, "b"))
    reporter.send(_send(2, "a", outcome="REMOTING_EXCEPTION", latency_ms=3000))
    # 4.9 with the switch on: before a failure every summary goes (pickOneAtLeast)
    assert _kinds(out) == [
        ("send_summary", "a", 1),
        ("send_summary", "b", 1),
        ("send_result", "a", 1),
    ]
    out.clear()
    reporter.send(_send(3, "b", attempt=1))  # a retry
    reporter.send(_send(4, "c", latency_ms=550))  # an isolating latency
    reporter.send(_send(5, "d", delay_level=3))
    reporter.send(_send(6, "d", redelivery_count=1))
    reporter.send(_send(7, "d", transaction="PREPARED", transaction_id="x"))
    reporter.send(_send(8, "a"))  # a is isolated in the producer's own table: 4.x overwrites
    reporter.send(_send(9, "e"))
    assert [r["kind"] for r in out] == ["send_result"] * 6
    reporter.send(_send(10, "e", outcome="FLUSH_DISK_TIMEOUT"))
    assert _kinds(out)[-2:] == [("send_summary", "e", 1), ("send_result", "e", 1)]


def test_5x_keeps_other_brokers_summaries_and_a_queue_index_reset_closes_them() -> None:
    reporter, out = _reporter(client_profile="rocketmq-5")
    reporter.send(_send(0, "a", queue_index=7))
    reporter.send(_send(1, "b", queue_index=8))
    reporter.send(_send(2, "a", outcome="REMOTING_EXCEPTION", queue_index=9))
    assert _kinds(out) == [("send_summary", "a", 1), ("send_result", "a", 1)]
    reporter.send(_send(3, "c", attempt=1, queue_index=4_000))  # resetIndex: a random index
    reporter.send(_send(4, "c", queue_index=3))  # a new route's index
    assert _kinds(out)[2:] == [("send_result", "c", 1), ("send_summary", "b", 1)]


def test_consumes_are_summarized_per_group_and_topic_and_retries_go_in_full() -> None:
    reporter, out = _reporter()
    consume = {"consumer_group": "g", "topic": "T", "message_id": "m", "broker_name": "a"}
    for t in range(5):
        reporter.consume({**consume, "event_time": T0 + t, "status": "CONSUME_SUCCESS"})
    reporter.consume({**consume, "event_time": T0 + 6, "status": "RECONSUME_LATER"})
    reporter.close()
    assert _kinds(out) == [("consume_result", "a", 1), ("consume_summary", None, 5)]


def test_a_full_buffer_drops_summaries_first_and_the_next_summary_tells() -> None:
    """A buffer of three while Kafka takes nothing: a new summary is dropped when the buffer is
    full, a full event evicts the oldest summary, and the next summary Kafka takes tells both."""
    taken: list[dict[str, Any]] = []
    open_ = [False]
    reporter = Reporter("p", _sink(taken, open_), window_ms=1_000, buffer=3)
    for w in range(4):  # each send closes the window before it: three summaries fill the buffer
        reporter.send(_send(w * 1_000, "a"))
    assert [(r["event_id"], r["window_start"]) for r in reporter.pending] == [
        ("p-r000000001", T0),
        ("p-r000000002", T0 + 1_000),
        ("p-r000000003", T0 + 2_000),
    ]
    assert reporter.dropped == 0
    # a 4.9 failure with the switch on: the open summary of window 3 goes first, into the full
    # buffer: dropped; then the failure evicts the oldest summary, window 0's
    reporter.send(_send(3_001, "b", outcome="REMOTING_EXCEPTION"))
    assert [(r["kind"], r["event_id"]) for r in reporter.pending] == [
        ("send_summary", "p-r000000002"),
        ("send_summary", "p-r000000003"),
        ("send_result", "p-r000000005"),
    ]
    assert reporter.dropped == 2
    open_[0] = True
    reporter.send(_send(5_000, "c"))
    reporter.close()
    assert reporter.pending == []
    assert [(r["kind"], r["broker_name"], r["event_id"], r.get("dropped")) for r in taken] == [
        ("send_summary", "a", "p-r000000002", 0),
        ("send_summary", "a", "p-r000000003", 0),
        ("send_result", "b", "p-r000000005", None),
        ("send_summary", "c", "p-r000000006", 2),  # windows 3 and 0 of broker a
    ]


def test_sync_and_async_sends_to_one_broker_are_summarized_apart() -> None:
    """A summary is per (topic, broker, mode): a 4.9 producer's SYNC and ASYNC sends to one broker
    in one window make one summary each, with the first and last send of its own mode."""
    reporter, out = _reporter()
    for i, (mode, latency) in enumerate([("SYNC", 10), ("ASYNC", 7), ("SYNC", 6), ("ASYNC", 9),
                                         ("SYNC", 4), ("ASYNC", 3)]):  # fmt: skip
        reporter.send(_send(100 * (i + 1), "b", mode=mode, latency_ms=latency, event_id=f"e{i}"))
    reporter.send(_send(WINDOW_MS, "c", event_id="c0"))  # the next window: both summaries go
    fields = ("mode", "messages", "first_event_id", "first_time", "first_latency_ms", "event_id",
              "event_time", "latency_ms", "latency_total", "latency_max")  # fmt: skip
    assert [tuple(r[f] for f in fields) for r in out] == [
        ("SYNC", 3, "e0", T0 + 100, 10, "e4", T0 + 500, 4, 20, 10),
        ("ASYNC", 3, "e1", T0 + 200, 7, "e5", T0 + 600, 3, 19, 9),
    ]
    out.clear()
    # an ASYNC failure of a 4.9 producer: its callback retries, and the retry may order the
    # whole table by latency, so every summary goes before it, whatever its mode
    reporter.send(_send(WINDOW_MS + 100, "c", mode="ASYNC", latency_ms=5, event_id="e6"))
    failure = {"mode": "ASYNC", "latency_ms": 3000, "outcome": "REMOTING_EXCEPTION"}
    reporter.send(_send(WINDOW_MS + 200, "b", event_id="e7", **failure))
    assert [(r["kind"], r["broker_name"], r["mode"], r["event_id"]) for r in out] == [
        ("send_summary", "c", "SYNC", "c0"),
        ("send_summary", "c", "ASYNC", "e6"),
        ("send_result", "b", "ASYNC", "e7"),
    ]


def test_with_the_latency_fault_switch_off_a_failure_sends_only_its_brokers_summary() -> None:
    """Without ``sendLatencyFaultEnable`` a RocketMQ producer keeps no FaultTable (its
    ``updateFaultItem`` does nothing) and its retry only avoids the broker that failed: the other
    brokers' summaries stay open, and a send to the broker that failed is summarized again."""
    reporter, out = _reporter(latency_fault_enable=False)
    reporter.send(_send(0, "a", event_id="e0"))
    reporter.send(_send(1, "b", event_id="e1"))
    reporter.send(_send(2, "a", outcome="REMOTING_EXCEPTION", latency_ms=3000, event_id="e2"))
    assert [(r["kind"], r["broker_name"], r["event_id"]) for r in out] == [
        ("send_summary", "a", "e0"),
        ("send_result", "a", "e2"),
    ]
    reporter.send(_send(3, "a", event_id="e3"))  # with the switch on: in full (a is isolated)
    reporter.close()
    assert [(r["kind"], r["broker_name"], r["event_id"], r["messages"]) for r in out[2:]] == [
        ("send_summary", "b", "e1", 1),
        ("send_summary", "a", "e3", 1),
    ]
    assert [r["latency_fault_enable"] for r in out] == [False] * 4
    assert (reporter.full, reporter.summarized, reporter.summaries) == (1, 3, 3)


class _KafkaClient:
    """confluent-kafka's ``Producer`` as the reporter uses it: a local queue of ``capacity``
    messages (``queue.buffering.max.messages``), full until ``poll`` or ``flush`` serves the
    delivery reports of what the broker took; the broker takes nothing while it is down."""

    capacity = 2

    def __init__(self) -> None:
        self.queue: list[tuple[str, bytes, str]] = []
        self.delivered: list[tuple[str, bytes, str]] = []
        self.up = False

    def produce(self, topic: str, value: bytes, key: bytes) -> None:
        if len(self.queue) >= self.capacity:
            raise BufferError("Local: Queue full")
        self.queue.append((topic, key, json.loads(value)["event_id"]))

    def poll(self, timeout: float) -> int:
        if not self.up:
            return 0
        served, self.queue = self.queue, []
        self.delivered += served
        return len(served)

    def flush(self, timeout: float) -> int:
        self.poll(timeout)
        return len(self.queue)


def test_the_kafka_reporter_keeps_what_kafka_cannot_queue_and_sends_it_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Back-pressure: a record Kafka's client cannot queue (``BufferError``) stays in the
    reporter's buffer, in order, and nothing is dropped; the reporter polls so that the delivery
    reports free the client's queue, and sends the rest when Kafka takes records again."""
    import confluent_kafka

    kafka = _KafkaClient()
    monkeypatch.setattr(confluent_kafka, "Producer", lambda config: kafka)
    reporter = KafkaReporter("k:9092", "faultline.events", "p-1", buffer=5)
    for i, broker in enumerate("abcd"):  # failures: each goes out in full at once
        reporter.send(_send(i, broker, outcome="REMOTING_EXCEPTION", event_id=f"f{i}"))
    assert [eid for _, _, eid in kafka.queue] == ["f0", "f1"]
    assert [r["event_id"] for r in reporter.pending] == ["f2", "f3"]
    assert (kafka.delivered, reporter.dropped) == ([], 0)
    kafka.up = True  # the broker answers again: the next record's poll serves f0 and f1
    reporter.send(_send(4, "e", outcome="REMOTING_EXCEPTION", event_id="f4"))
    assert [eid for _, _, eid in kafka.delivered] == ["f0", "f1"]
    assert [r["event_id"] for r in reporter.pending] == ["f2", "f3", "f4"]
    reporter.close(timeout=1.0)
    assert reporter.pending == []
    assert kafka.delivered == [("faultline.events", b"p-1", f"f{i}") for i in range(5)]
    assert (reporter.full, reporter.dropped) == (5, 0)


@pytest.mark.jvm
def test_the_kafka_reporter_publishes_what_the_job_reads(kafka: str) -> None:
    """On the worker's Kafka broker."""
    from confluent_kafka import Consumer

    reporter = KafkaReporter(kafka, "reporter-events", "p-1", cluster="c")
    for t in range(0, 3_000, 2):
        failed = t % 500 == 0
        reporter.send(
            _send(
                t,
                f"b{t % 3}",
                outcome="REMOTING_EXCEPTION" if failed else "SEND_OK",
                latency_ms=3000 if failed else 4,
            )
        )
    reporter.close()
    full, summaries, dropped = reporter.full, reporter.summaries, reporter.dropped
    del reporter  # its Kafka client
    consumer = Consumer(
        {"bootstrap.servers": kafka, "group.id": "t", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["reporter-events"])
    values: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(values) < full + summaries:
        for m in consumer.consume(100, timeout=0.5):
            value = m.value()
            if m.error() is None and value is not None:
                values.append(value.decode())
    consumer.close()
    # 6 failures, and the sends to each failed broker while the producer's table isolates it
    assert full > 6 and summaries > 0 and dropped == 0
    assert len(values) == full + summaries
    parsed = parse(values, ["kafka"] * len(values), [None] * len(values))
    assert parsed.column("reason_code").null_count == len(values)
    messages = [m or 1 for m in parsed.column("messages").to_pylist()]
    assert sum(messages) == 1_500
