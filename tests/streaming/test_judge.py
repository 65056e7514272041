"""The judge's reading of a real 5.x producer's fault table, on a record made by hand: what the
client held at each read against faultline's rows (docs/real-rocketmq.md)."""

from __future__ import annotations

from typing import Any

from streaming.tools import judge

PRODUCER = "p5-sync"
ROUTES = [{"event_time": 0, "brokers": [{"broker_name": "broker-a"}, {"broker_name": "broker-b"}]}]


def attempt(event_id: str, broker: str, at: int, latency: int, outcome: str) -> dict[str, Any]:
    return {
        "kind": "send_result",
        "event_id": event_id,
        "message_id": event_id,
        "attempt": 0,
        "broker_name": broker,
        "queue_id": 0,
        "event_time": at,
        "latency_ms": latency,
        "outcome": outcome,
        "mode": "SYNC",
        "client_profile": "rocketmq-5",
        "latency_fault_enable": True,
    }


def item(broker: str, latency: int, available_from: int, **row: Any) -> dict[str, Any]:
    return {"broker_name": broker, "latency_ms": latency, "available_from": available_from, **row}


def row(event_id: str, at: int, broker: str, latency: int, available_from: int) -> dict[str, Any]:
    return item(
        broker,
        latency,
        available_from,
        scope="producer",
        scope_key=PRODUCER,
        event_id=event_id,
        event_time=at,
        outcome="SEND_OK",
    )


def verdict(
    reads: list[tuple[int, list[dict[str, Any]]]], rows: list[dict[str, Any]]
) -> judge.Verdict:
    events = [
        attempt("m0", "broker-a", 1_000, 20, "SEND_OK"),
        attempt("m1", "broker-a", 2_000, 40, "SEND_FAILED"),
        attempt("m2", "broker-a", 12_050, 18, "SEND_OK"),
    ]
    tables = [{"producer_id": PRODUCER, "at": at, "items": items} for at, items in reads]
    record = judge.Record(PRODUCER, events, tables, sends=[])
    faultline = judge.Tables(rows, [], [], [], [], [], clock=12_050)
    return judge.judge(record, faultline, ROUTES)


FAULTLINE = [
    row("m0", 1_000, "broker-a", 20, 0),
    row("m1", 2_000, "broker-a", 40, 12_000),  # isolated 10 s from the hook's After
    row("m2", 12_050, "broker-a", 18, 12_000),  # 5.x: a fast send keeps the time
]


def test_an_isolation_whose_clock_bracket_was_read_stays_explained_after_the_next_send() -> None:
    """The client paused 30 ms after the hook of the failed send: its latency is 30 ms longer and
    its isolation ends 30 ms later. The first send after the isolation brings the latencies
    together, and 5.x keeps both times: the difference is the same bracket, read on."""
    reads = [
        (1_500, [item("broker-a", 20, 0)]),
        (2_500, [item("broker-a", 70, 12_030)]),
        (12_100, [item("broker-a", 18, 12_030)]),
    ]
    found = verdict(reads, FAULTLINE)
    assert found.unexplained() == []
    assert [(d.kind, d.first_at, d.last_at, d.reads) for d in found.item_differences] == [
        ("clock-bracket", 2_500, 12_100, 2)
    ]


def test_a_time_no_clock_bracket_explained_is_reported() -> None:
    """The same tables without the read during the isolation: nothing explained the 30 ms."""
    reads = [(1_500, [item("broker-a", 20, 0)]), (12_100, [item("broker-a", 18, 12_030)])]
    found = verdict(reads, FAULTLINE)
    assert found.unexplained() == [
        "00:00:12.100 broker-a (1 reads, unexplained): client 18 ms, available from "
        "00:00:12.030; faultline 18 ms, 00:00:12.000 (event m2)"
    ]


def test_a_later_latency_outside_the_tolerance_and_shorter_than_faultlines_is_reported() -> None:
    """A kept time explains the time alone: a client latency shorter than faultline's by more
    than the tolerance is still a difference."""
    reads = [
        (2_500, [item("broker-a", 70, 12_030)]),
        (12_100, [item("broker-a", 1, 12_030)]),
    ]
    found = verdict(reads, FAULTLINE)
    assert [d.kind for d in found.item_differences] == ["clock-bracket", "unexplained"]
