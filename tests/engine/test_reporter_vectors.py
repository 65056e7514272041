"""The reporter's shared test vectors (``tests/vectors/reporter``, described in its README): each
file is a reporter's settings, the calls a producer makes, and the exact bytes of every record
the reporter hands its sink, in order. Any implementation of :class:`streaming.client.Reporter`
(the Java port's tests read the same files) must replay each file to the same bytes.

The cases are written here (:data:`CASES`); ``python -m tests.engine.test_reporter_vectors``
writes the files from them through the Python reporter. The tests replay the files, not the
cases, and check that the files are those the cases make today."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streaming.client import Reporter, serialize
from udfs.parse import parse

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "reporter"
T0 = 1_795_255_200_000
"""2026-11-21 10:00:00 UTC, on a window boundary."""

Call = dict[str, Any]


def _send(t: int, broker: str, n: int, **kw: Any) -> Call:
    """A send attempt's result ``t`` ms after T0, message ``n`` (no ``event_id``: the reporter
    numbers its events)."""
    event = {
        "event_time": T0 + t,
        "topic": "orders",
        "broker_name": broker,
        "queue_id": n % 4,
        "message_id": f"m{n:04d}",
        "latency_ms": 5,
        "outcome": "SEND_OK",
        "attempt": 0,
        **kw,
    }
    return {"send": event}


def _consume(t: int, n: int, status: str = "CONSUME_SUCCESS", **kw: Any) -> Call:
    event = {
        "event_time": T0 + t,
        "consumer_group": "cg-orders",
        "topic": "orders",
        "broker_name": "broker-a",
        "message_id": f"m{n:04d}",
        "status": status,
        **kw,
    }
    return {"consume": event}


def _sync_49() -> list[Call]:
    return [
        _send(0, "broker-a", 0, latency_ms=4),
        _send(10, "broker-b", 1, latency_ms=7),
        _send(20, "broker-c", 2, latency_ms=12),
        _send(30, "broker-a", 3, latency_ms=9),
        # an isolating latency (4.x: 30 s): in full, after broker-b's summary
        _send(640, "broker-b", 4, latency_ms=600),
        _send(650, "broker-c", 5, latency_ms=3),
        # a failure of a 4.x producer with the switch on: every summary goes before it (its
        # retry may call pickOneAtLeast, which orders the whole table by latency)
        _send(3_060, "broker-a", 6, latency_ms=3_000, outcome="REMOTING_EXCEPTION"),
        _send(3_070, "broker-c", 6, latency_ms=6, attempt=1),  # the retry: in full
        _send(3_100, "broker-c", 7, latency_ms=8),
        # broker-a and broker-b are isolated in the producer's own table: in full
        _send(3_110, "broker-a", 8, latency_ms=5),
        _send(3_120, "broker-b", 9, latency_ms=6),
        _send(3_130, "broker-d", 10, latency_ms=7, delay_level=3),  # delayed: in full
        _send(3_140, "broker-d", 11, latency_ms=7, redelivery_count=1),  # redelivered
        _send(3_150, "broker-d", 12, latency_ms=7, transaction="PREPARED", transaction_id="m0012"),
        _send(3_160, "broker-c", 13, latency_ms=10),
        _send(3_170, "broker-d", 14, latency_ms=11),
        _send(5_000, "broker-d", 15, latency_ms=2, outcome="FLUSH_DISK_TIMEOUT"),  # not OK
        _send(6_000, "broker-c", 16, latency_ms=6),
        # the first call at or after the window's end sends the summaries of the window
        _send(10_000, "broker-c", 17, latency_ms=4),
        {"close": None},  # every open summary
    ]


def _async() -> list[Call]:
    def sent(t: int, broker: str, n: int, mode: str = "ASYNC", **kw: Any) -> Call:
        return _send(t, broker, n, mode=mode, **kw)

    return [
        sent(0, "broker-a", 0, latency_ms=3),
        sent(5, "broker-a", 1, "SYNC", latency_ms=9),
        sent(10, "broker-b", 2, latency_ms=4),
        sent(15, "broker-a", 3, latency_ms=6),
        sent(20, "broker-b", 4, latency_ms=2),
        sent(25, "broker-a", 5, "SYNC", latency_ms=8),
        # a 5.x ASYNC failure (no response): only its broker's summaries go first, both modes
        sent(3_030, "broker-b", 6, latency_ms=3_000, outcome="REMOTING_EXCEPTION"),
        # its callback's retry onto broker-a: in full, after broker-a's summaries
        sent(3_040, "broker-a", 6, latency_ms=7, attempt=1),
        sent(3_050, "broker-c", 7, latency_ms=5),
        sent(3_060, "broker-b", 8, latency_ms=5),  # broker-b isolated (5.x: 10 s): in full
        sent(9_000, "broker-c", 9, latency_ms=6),
        {"flush": T0 + 9_999},  # a timer: the window is still open
        {"flush": T0 + 10_000},  # it ended: its summaries go
        {"close": None},
    ]


def _queue_index_5() -> list[Call]:
    def sent(t: int, broker: str, n: int, index: int, **kw: Any) -> Call:
        return _send(t, broker, n, queue_index=index, **kw)

    return [
        sent(0, "broker-a", 0, 7),
        sent(100, "broker-b", 1, 8, latency_ms=6),
        sent(200, "broker-c", 2, 9, latency_ms=4),
        sent(300, "broker-a", 3, 10, latency_ms=2),
        _send(350, "broker-b", 4, topic="audit", queue_index=3),  # another topic's index
        # a 5.x failure: only broker-b's summary goes first (5.x never calls pickOneAtLeast)
        sent(400, "broker-b", 5, 11, latency_ms=40, outcome="BROKER_EXCEPTION", response_code=14),
        # the retry resets the index (resetIndex): every summary of the topic goes first
        sent(410, "broker-c", 5, 2, attempt=1, latency_ms=9),
        sent(500, "broker-c", 6, 3, latency_ms=3),
        sent(600, "broker-a", 7, 4, latency_ms=5),
        sent(700, "broker-a", 8, 1),  # a new route's index: back again
        sent(800, "broker-c", 9, 2, latency_ms=8),
        sent(1_500, "broker-a", 10, 3, latency_ms=1),  # the first window (1 s here) ended
        {"flush": T0 + 1_999},  # a timer: the second window is still open
        {"flush": T0 + 2_000},  # it ended: its summary goes
        sent(2_100, "broker-c", 11, 4, latency_ms=2),
        {"close": None},
    ]


def _switch_off() -> list[Call]:
    return [
        _send(0, "broker-a", 0, latency_ms=4),
        _send(10, "broker-b", 1, latency_ms=5),
        _send(20, "broker-a", 2, latency_ms=6),
        # without the switch no FaultTable: a failure sends only its broker's summary first
        _send(3_020, "broker-a", 3, latency_ms=3_000, outcome="REMOTING_EXCEPTION"),
        _send(3_030, "broker-b", 3, latency_ms=7, attempt=1),  # the retry, after b's summary
        _send(3_040, "broker-a", 4, latency_ms=3),  # summarized again: nothing isolates it
        _send(3_050, "broker-a", 5, latency_ms=700),  # isolating: in full all the same
        _send(3_060, "broker-a", 6, latency_ms=2),
        {"close": None},
    ]


def _consumes() -> list[Call]:
    return [
        _consume(0, 0),
        _consume(5, 1),
        _consume(10, 2, topic="audit"),
        _consume(15, 3, "RECONSUME_LATER", reconsume_times=0),  # in full at once
        _consume(20, 4),
        _consume(10_000, 5),  # the next window: the first one's summaries go
        _consume(10_010, 3, reconsume_times=1),  # the redelivered message, consumed
        {"flush": None},  # every open summary, now
        _consume(10_500, 6),
        {"close": None},
    ]


def _buffer_full() -> list[Call]:
    return [
        {"sink": False},  # Kafka takes nothing: records wait in the buffer (3)
        _send(0, "broker-a", 0),
        _send(1_000, "broker-a", 1),  # each send closes the window before it: a summary
        _send(2_000, "broker-a", 2),
        _send(3_000, "broker-a", 3),  # the buffer is full: three summaries
        # a failure (4.x, switch on): window 3's open summary goes first and is dropped (a new
        # summary into a full buffer); the failure evicts the oldest summary, window 0's
        _send(3_001, "broker-b", 4, latency_ms=3_000, outcome="REMOTING_EXCEPTION"),
        _send(3_010, "broker-c", 4, attempt=1),  # evicts window 1's summary
        _send(3_020, "broker-c", 5, latency_ms=900),  # evicts window 2's summary
        # nothing but full events: the new one is dropped
        _send(3_030, "broker-b", 6, latency_ms=3_000, outcome="REMOTING_EXCEPTION"),
        {"sink": True},  # Kafka is back: the buffer goes with the next record sent
        _send(4_000, "broker-d", 7),  # summarized: nothing is sent
        {"close": None},  # the buffer, then broker-d's summary, telling the 5 records dropped
    ]


CASES: dict[str, tuple[str, dict[str, Any], Callable[[], list[Call]]]] = {
    "sync-49-switch-on": (
        "A 4.9.7 SYNC producer with the latency fault switch on: healthy sends summarized per "
        "broker; an isolating latency, a failure and its retry, sends to brokers its own table "
        "isolates, delayed, redelivered and transactional sends, a store that is not OK, in full; "
        "a window that closes on the next send, and close().",
        {
            "producer_id": "p-49",
            "cluster": "VectorCluster",
            "producer_group": "pg-orders",
            "client_profile": "rocketmq-4.9",
            "latency_fault_enable": True,
        },
        _sync_49,
    ),
    "async-5": (
        "A 5.x producer sending ASYNC and SYNC: one summary per (topic, broker, mode); an ASYNC "
        "failure sends only its broker's summaries first (5.x), its retry goes after the "
        "summaries of the broker it goes to; flush(now) before and at the window's end.",
        {
            "producer_id": "p-5",
            "cluster": "VectorCluster",
            "client_profile": "rocketmq-5",
            "latency_fault_enable": True,
        },
        _async,
    ),
    "queue-index-5": (
        "A 5.x SYNC producer reporting its queue index, with windows of 1 s (window_ms): a "
        "failure sends its broker's summary first; the retry's reset index, and a new route's, "
        "send every summary of the topic (not another topic's); summaries carry the first and "
        "last index; flush(now) sends the windows that ended.",
        {
            "producer_id": "p-5q",
            "cluster": "VectorCluster",
            "client_profile": "rocketmq-5",
            "latency_fault_enable": True,
            "window_ms": 1_000,
        },
        _queue_index_5,
    ),
    "switch-off-49": (
        "A 4.9.7 producer with the latency fault switch off: a failure sends only its broker's "
        "summary first, and the failed broker's next healthy sends are summarized again; an "
        "isolating latency still goes in full.",
        {
            "producer_id": "p-49-off",
            "cluster": "VectorCluster",
            "client_profile": "rocketmq-4.9",
            "latency_fault_enable": False,
        },
        _switch_off,
    ),
    "consumes": (
        "A consumer group's reporter: successful consumes summarized per (group, topic) and "
        "window, a consume that asks for a retry in full at once; flush() sends every open "
        "summary.",
        {"producer_id": "consumer-cg-orders", "cluster": "VectorCluster"},
        _consumes,
    ),
    "buffer-full": (
        "A buffer of 3 records (windows of 1 s) while the sink takes nothing: a new summary "
        "into a full buffer is dropped, a full event evicts the oldest summary, a full event is "
        "dropped when the buffer holds nothing else; once the sink takes records again, the "
        "buffer goes first and the next summary tells how many were dropped.",
        {
            "producer_id": "p-buf",
            "cluster": "VectorCluster",
            "client_profile": "rocketmq-4.9",
            "latency_fault_enable": True,
            "window_ms": 1_000,
            "buffer": 3,
        },
        _buffer_full,
    ),
}


def replay(settings: dict[str, Any], calls: list[Call]) -> tuple[list[str], Reporter]:
    """The records (as the bytes :func:`~streaming.client.serialize` writes, decoded) that a
    reporter with ``settings`` hands a sink over ``calls``, in order, and the reporter. The sink
    takes every record until a ``{"sink": false}`` call, and none until ``{"sink": true}``."""
    taking = [True]
    taken: list[str] = []

    def sink(record: dict[str, Any]) -> bool:
        if taking[0]:
            taken.append(serialize(record).decode("ascii"))
        return taking[0]

    options = {k: v for k, v in settings.items() if k != "producer_id"}
    reporter = Reporter(settings["producer_id"], sink, **options)
    for call in calls:
        [(name, arg)] = call.items()
        if name == "send":
            reporter.send(dict(arg))
        elif name == "consume":
            reporter.consume(dict(arg))
        elif name == "flush":
            reporter.flush(arg)
        elif name == "close":
            reporter.close()
        elif name == "sink":
            taking[0] = bool(arg)
        else:
            raise ValueError(f"unknown call {name!r}")
    return taken, reporter


def vector(name: str) -> dict[str, Any]:
    """The case's vector, as its file holds it."""
    description, settings, calls = CASES[name]
    made = calls()
    records, reporter = replay(settings, made)
    counters = {
        "full": reporter.full,
        "summarized": reporter.summarized,
        "summaries": reporter.summaries,
        "dropped": reporter.dropped,
    }
    return {
        "description": description,
        "settings": settings,
        "calls": made,
        "records": records,
        "counters": counters,
    }


def text(data: dict[str, Any]) -> str:
    """A vector file's text: one call or record a line."""
    lines = ["{"]
    lines.append(f'  "description": {json.dumps(data["description"])},')
    lines.append(f'  "settings": {json.dumps(data["settings"])},')
    for key in ("calls", "records"):
        items = [f"    {json.dumps(x)}" for x in data[key]]
        lines.append(f'  "{key}": [\n' + ",\n".join(items) + "\n  ],")
    lines.append(f'  "counters": {json.dumps(data["counters"])}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def generate() -> list[Path]:
    """Write every case's file (and remove files of cases that are gone)."""
    VECTORS.mkdir(parents=True, exist_ok=True)
    for stale in set(VECTORS.glob("*.json")) - {VECTORS / f"{n}.json" for n in CASES}:
        stale.unlink()
    written = []
    for name in CASES:
        path = VECTORS / f"{name}.json"
        path.write_text(text(vector(name)))
        written.append(path)
    return written


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text())
    return data


def test_every_case_has_its_file_and_each_file_is_what_its_case_makes() -> None:
    """The files are the cases' (``python -m tests.engine.test_reporter_vectors`` rewrites them)."""
    assert sorted(p.stem for p in VECTORS.glob("*.json")) == sorted(CASES)
    for name in CASES:
        assert (VECTORS / f"{name}.json").read_text() == text(vector(name)), name


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_reporter_replays_each_vector_to_the_same_bytes(name: str) -> None:
    """Each file's calls through the Python reporter give its records, byte for byte, and its
    counters; every record is a valid event for the job's parser."""
    data = _load(name)
    records, reporter = replay(data["settings"], data["calls"])
    assert [r.encode() for r in records] == [r.encode() for r in data["records"]]
    assert {
        "full": reporter.full,
        "summarized": reporter.summarized,
        "summaries": reporter.summaries,
        "dropped": reporter.dropped,
    } == data["counters"]
    parsed = parse(records, ["vector"] * len(records), [None] * len(records))
    assert parsed.column("reason_code").null_count == len(records)


if __name__ == "__main__":
    for path in generate():
        print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
    sys.exit(0)
