"""The reporter a producer embeds (:class:`streaming.client.Reporter`): which sends go out in
full, when summaries go out, what a full buffer drops; and :class:`KafkaReporter` publishing to
a real Kafka-protocol server, whose records the parser takes as valid events."""

from __future__ import annotations

import json
import time
from typing import Any

from streaming.client import KafkaReporter, Reporter
from streaming.sim.mock_kafka import mock_cluster
from udfs.parse import parse

T0 = 1_795_255_200_000


def _reporter(**kw: Any) -> tuple[Reporter, list[dict[str, Any]]]:
    out: list[dict[str, Any]] = []
    settings = {"client_profile": "rocketmq-4.9", **kw}
    return Reporter("p", lambda r: out.append(r) is None, **settings), out


def _send(t: int, broker: str = "a", **kw: Any) -> dict[str, Any]:
    return {"event_time": T0 + t, "topic": "T", "broker_name": broker, "latency_ms": 5,
            "outcome": "SEND_OK", "attempt": 0, "queue_id": 0, **kw}  # fmt: skip


def _kinds(out: list[dict[str, Any]]) -> list[tuple[str, str | None, int]]:
    return [(r["kind"], r.get("broker_name"), r.get("messages", 1)) for r in out]


def test_healthy_sends_go_out_as_one_summary_per_broker_and_window() -> None:
    reporter, out = _reporter()
    for t in range(0, 1_000, 10):
        reporter.send(_send(t, "a" if t % 20 else "b", latency_ms=t % 7, queue_index=t // 10))
    assert out == []  # the window is open
    reporter.send(_send(1_000, "a"))  # the next window: the first one's summaries go
    assert _kinds(out) == [("send_summary", "b", 50), ("send_summary", "a", 50)]
    a = out[1]
    assert (a["window_start"], a["window_end"]) == (T0, T0 + 1_000)
    assert (a["first_time"], a["event_time"]) == (T0 + 10, T0 + 990)
    assert a["latency_total"] == sum(t % 7 for t in range(10, 1_000, 20))
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
    taken: list[dict[str, Any]] = []
    open_ = [False]
    reporter = Reporter("p", lambda r: open_[0] and taken.append(r) is None, buffer=3)
    for w in range(3):  # three summaries fill the buffer
        reporter.send(_send(w * 1_000, "a"))
    reporter.send(_send(3_000, "a"))  # a fourth: dropped
    reporter.send(_send(3_001, "b", outcome="REMOTING_EXCEPTION"))  # evicts the oldest summary
    assert [r["kind"] for r in reporter.pending] == ["send_summary", "send_summary", "send_result"]
    assert reporter.dropped == 2
    open_[0] = True
    reporter.send(_send(5_000, "c"))
    reporter.close()
    assert reporter.pending == []
    told = [r["dropped"] for r in taken if r["kind"] == "send_summary"]
    assert sum(told) == 2 and told[-1] == 2


def test_the_kafka_reporter_publishes_what_the_job_reads() -> None:
    from confluent_kafka import Consumer

    with mock_cluster() as bootstrap:
        reporter = KafkaReporter(bootstrap, "faultline.events", "p-1", cluster="c")
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
        del reporter  # its Kafka client, before the cluster stops
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "t", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(["faultline.events"])
        values: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(values) < full + summaries:
            for m in consumer.consume(100, timeout=0.5):
                if m.error() is None:
                    values.append(m.value().decode())
        consumer.close()
    # 6 failures, and the sends to each failed broker while the producer's table isolates it
    assert full > 6 and summaries > 0 and dropped == 0
    assert len(values) == full + summaries
    parsed = parse(values, ["kafka"] * len(values), [None] * len(values))
    assert parsed.column("reason_code").null_count == len(values)
    messages = [m or 1 for m in parsed.column("messages").to_pylist()]
    assert sum(messages) == 1_500
