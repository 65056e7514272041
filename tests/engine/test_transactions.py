"""Transactional messages in the engine: half messages, ends, check-backs on the cluster's clock
(4.9 brokers: a wake every 60 s on the epoch's minute grid; T0 is on it)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from tests.engine.conftest import T0, beat, frame, send
from udfs import engine
from udfs.parse import parse

MIN = 60_000


def half(eid: str, t: int, broker: str, **kw: Any) -> dict[str, Any]:
    return send(eid, t, broker, transaction="PREPARED", producer_group="pg", **kw)


def end(eid: str, t: int, tx: str, broker: str, state: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "transaction_end", "event_id": eid, "event_time": T0 + t,
            "transaction_id": tx, "broker_name": broker, "local_state": state, "topic": "T",
            **kw}  # fmt: skip


def check(eid: str, t: int, tx: str, broker: str, state: str, times: int) -> dict[str, Any]:
    return {**end(eid, t, tx, broker, state), "kind": "transaction_check", "check_times": times}


def route(eid: str, t: int, *brokers: str) -> dict[str, Any]:
    listed = [{"broker_name": b, "write_queue_nums": 2, "perm": 6} for b in brokers]
    return {"kind": "route", "event_id": eid, "event_time": T0 + t, "topic": "T", "brokers": listed}


def run(batches: list[list[dict[str, Any]]], **config: Any) -> list[dict[str, Any]]:
    """The ``transactions`` rows of the batches, each applied after a JSON round trip of the
    state, as Spark stores it."""
    state = None
    rows: list[dict[str, Any]] = []
    for batch in batches:
        step = engine.advance("c", state, frame(batch), engine.EngineConfig(**config))
        state = engine.loads(engine.dumps(step.state))
        if "transactions" in step.tables:
            rows += step.tables["transactions"].to_pylist()
    return rows


def states(rows: list[dict[str, Any]]) -> list[tuple[str, str, int, int]]:
    """(transaction, state, check_times, effective_at - T0)."""
    return [(r["transaction_id"], r["state"], r["check_times"], r["effective_at"] - T0)
            for r in rows]  # fmt: skip


def test_unknow_end_is_checked_fifteen_times_then_discarded_whatever_the_batches() -> None:
    events = [
        half("s1", 1_000, "a", latency=5),
        end("e1", 1_100, "m-s1", "a", "UNKNOW"),
        half("s2", 2_000, "b"),
        end("e2", 2_050, "m-s2", "b", "COMMIT_MESSAGE"),
        beat("hb", 20 * MIN, "a"),
    ]
    rows = run([events])
    assert states(rows) == [
        ("m-s1", "PREPARED", 0, 1_000),
        ("m-s1", "UNKNOWN", 0, 1_100),
        ("m-s2", "PREPARED", 0, 2_000),
        ("m-s2", "COMMIT", 0, 2_050),
        *(("m-s1", "CHECK", k, k * MIN) for k in range(1, 16)),
        ("m-s1", "DISCARDED", 15, 16 * MIN),
    ]
    first = rows[0]
    assert (first["born_at"], first["next_check_at"], first["producer_group"]) == (
        T0 + 995,
        T0 + MIN,
        "pg",
    )
    assert rows[-1]["next_check_at"] is None and rows[-1]["notify"]
    assert not any(r["notify"] for r in rows[:-1])
    # one event per batch, and batches that end between and on the wakes: the same rows
    single = [[e] for e in events[:-1]] + [
        [beat("hb-a", 3 * MIN, "z")],  # another broker's: a's own would say a was down
        [beat("hb-b", 7 * MIN + 1, "z")],
        [events[-1]],
    ]
    assert [r for r in run(single) if r["state"] != "HEARTBEAT"] == rows


def test_the_state_forgets_settled_and_discarded_half_messages() -> None:
    events = [half("s1", 1_000, "a"), end("e1", 1_100, "m-s1", "a", "UNKNOW"),
              half("s2", 2_000, "b")]  # fmt: skip
    step = engine.advance("c", None, frame(events), engine.EngineConfig())
    assert sorted(step.state.transactions) == ["m-s1", "m-s2"]
    later = frame([beat("hb", 17 * MIN, "a"), end("e2", 17 * MIN, "m-s3", "a", "COMMIT_MESSAGE")])
    step = engine.advance("c", step.state, later, engine.EngineConfig())
    assert step.state.transactions == {} and step.state.transactions_due is None
    assert len(engine.dumps(step.state)) < 2_000


def test_an_end_to_an_isolated_broker_is_likely_lost_and_the_check_settles_it() -> None:
    rows = run(
        [
            [
                half("s1", 1_000, "a"),
                send("f1", 1_500, "a", "REMOTING_EXCEPTION", latency=3_000),  # isolates a
                end("e1", 1_600, "m-s1", "a", "COMMIT_MESSAGE"),
                check("k1", MIN + 5, "m-s1", "a", "COMMIT_MESSAGE", 1),
                beat("hb", 3 * MIN, "a"),
            ]
        ]
    )
    assert states(rows) == [
        ("m-s1", "PREPARED", 0, 1_000),
        ("m-s1", "END_TO_UNAVAILABLE_BROKER", 0, 1_600),
        ("m-s1", "CHECK", 1, MIN),
        ("m-s1", "COMMIT", 1, MIN + 5),
    ]
    lost = rows[1]
    assert "isolates until" in lost["reason"] and lost["next_check_at"] == T0 + MIN
    assert [r["notify"] for r in rows] == [False, True, False, True]


def test_an_end_to_a_slow_broker_reaches_it() -> None:
    # isolated for its latency, broker a still answers: the end is not flagged
    rows = run(
        [
            [
                half("s1", 1_000, "a"),
                send("f1", 1_500, "a", latency=2_500),  # SEND_OK after 2.5 s: isolated
                end("e1", 1_600, "m-s1", "a", "COMMIT_MESSAGE"),
                beat("hb", 3 * MIN, "a"),
            ]
        ]
    )
    assert states(rows) == [("m-s1", "PREPARED", 0, 1_000), ("m-s1", "COMMIT", 0, 1_600)]


def test_a_likely_lost_end_that_no_check_confirms_reached_the_broker() -> None:
    rows = run(
        [
            [
                half("s1", 1_000, "a"),
                send("f1", 1_500, "a", "REMOTING_EXCEPTION", latency=3_000),
                end("e1", 1_600, "m-s1", "a", "ROLLBACK_MESSAGE"),
                beat("hb", 5 * MIN, "a"),
            ]
        ]
    )
    assert states(rows) == [
        ("m-s1", "PREPARED", 0, 1_000),
        ("m-s1", "END_TO_UNAVAILABLE_BROKER", 0, 1_600),
        ("m-s1", "CHECK", 1, MIN),
        ("m-s1", "CHECK", 2, 2 * MIN),
        ("m-s1", "ROLLBACK", 2, 3 * MIN),
    ]
    assert "reached it after all" in rows[-1]["reason"] and rows[-1]["notify"]


def test_an_end_before_the_isolation_reaches_the_broker() -> None:
    rows = run(
        [
            [
                half("s1", 1_000, "a"),
                end("e1", 1_400, "m-s1", "a", "COMMIT_MESSAGE"),
                send("f1", 1_500, "a", "REMOTING_EXCEPTION", latency=3_000),
                beat("hb", 3 * MIN, "a"),
            ]
        ]
    )
    assert states(rows) == [("m-s1", "PREPARED", 0, 1_000), ("m-s1", "COMMIT", 0, 1_400)]


def test_an_end_to_a_broker_out_of_the_route_is_likely_lost() -> None:
    rows = run(
        [
            [
                route("r0", 0, "a", "b"),
                half("s1", 1_000, "a"),
                route("r1", 1_200, "b"),
                end("e1", 1_300, "m-s1", "a", "ROLLBACK_MESSAGE"),
                beat("hb", MIN + 1, "b"),
            ]
        ]
    )
    assert [r["state"] for r in rows] == ["PREPARED", "END_TO_UNAVAILABLE_BROKER", "CHECK"]
    assert "not in T's route" in rows[1]["reason"]


def test_a_late_end_leaves_the_checks_copy_and_a_commit_answer_stores_it_twice() -> None:
    rows = run(
        [
            [half("s1", 1_000, "a"), beat("hb", MIN + 1, "a")],
            [end("e1", MIN + 10, "m-s1", "a", "COMMIT_MESSAGE"), beat("hb2", 2 * MIN, "a")],
            [check("k2", 2 * MIN + 5, "m-s1", "a", "COMMIT_MESSAGE", 2)],
        ]
    )
    assert states(rows) == [
        ("m-s1", "PREPARED", 0, 1_000),
        ("m-s1", "CHECK", 1, MIN),
        ("m-s1", "COMMIT", 1, MIN + 10),
        ("m-s1", "CHECK", 2, 2 * MIN),
        ("m-s1", "COMMIT", 2, 2 * MIN + 5),
    ]
    assert "the copy is checked again" in rows[2]["reason"]
    assert "stored twice" in rows[4]["reason"] and rows[4]["next_check_at"] is None


def test_a_checks_count_corrects_faultlines() -> None:
    # the broker was down at faultline's first wake: its first check carries 1, at minute 2
    rows = run(
        [
            [
                half("s1", 1_000, "a"),
                beat("hb", 2 * MIN, "a"),
                check("k1", 2 * MIN + 5, "m-s1", "a", "UNKNOW", 1),
                beat("hb2", 3 * MIN, "a"),
            ]
        ]
    )
    assert states(rows)[1:] == [
        ("m-s1", "CHECK", 1, MIN),
        ("m-s1", "CHECK", 2, 2 * MIN),
        ("m-s1", "UNKNOWN", 1, 2 * MIN + 5),
        ("m-s1", "CHECK", 2, 3 * MIN),
    ]


def test_5x_refuses_an_end_later_than_the_messages_immunity() -> None:
    five = {"client_profile": "rocketmq-5"}
    rows = run(
        [
            [
                half("s1", 1_000, "a", check_immunity_s=10, **five),
                end("e1", 11_100, "m-s1", "a", "COMMIT_MESSAGE"),
                half("s2", 1_000, "b", check_immunity_s=10, **five),
                end("e2", 10_900, "m-s2", "b", "COMMIT_MESSAGE"),
                beat("hb", 45_000, "a"),
            ]
        ]
    )
    assert [(r["transaction_id"], r["state"]) for r in rows] == [
        ("m-s1", "PREPARED"),
        ("m-s2", "PREPARED"),
        ("m-s2", "COMMIT"),
        ("m-s1", "END_REJECTED"),
        ("m-s1", "CHECK"),  # 5.x: a wake every 30 s; at 30 s its age is past the immunity
    ]
    assert rows[-1]["effective_at"] == T0 + 30_000 and rows[-1]["profile"] == "rocketmq-5"


def test_a_flush_timeout_half_message_waits_for_the_rollback() -> None:
    rows = run(
        [
            [
                half("s1", 1_000, "a", outcome="FLUSH_DISK_TIMEOUT"),
                end("e1", 1_000, "m-s1", "a", "ROLLBACK_MESSAGE"),
            ]
        ]
    )
    assert [r["state"] for r in rows] == ["PREPARED", "ROLLBACK"]
    assert "rolls back without running its local transaction" in rows[0]["reason"]


def test_half_messages_are_never_delayed_nor_redelivered() -> None:
    events = [
        half("s1", 1_000, "a", delay_level=3),
        half("s2", 2_000, "a", outcome="REMOTING_EXCEPTION", attempt=2),  # its last attempt
        send("s3", 3_000, "a", outcome="REMOTING_EXCEPTION", attempt=2),  # a normal message
    ]
    step = engine.advance("c", None, frame(events), engine.EngineConfig())
    assert step.tables["schedule_entries"].column("message_id").to_pylist() == ["m-s3"]
    assert step.tables["transactions"].column("transaction_id").to_pylist() == ["m-s1"]


@pytest.mark.parametrize(
    ("record", "code"),
    [
        ('{"kind":"send_result","transaction":"PREPARED","mode":"ASYNC"}', "INVALID_TRANSACTION"),
        ('{"kind":"send_result","transaction":"COMMIT"}', "UNKNOWN_TRANSACTION"),
        (
            '{"kind":"transaction_end","transaction_id":"x","local_state":"OK"}',
            "UNKNOWN_LOCAL_STATE",
        ),
        ('{"kind":"transaction_check","local_state":"UNKNOW"}', "MISSING_FIELD"),
        (
            '{"kind":"transaction_check","transaction_id":"x","local_state":"UNKNOW",'
            '"check_times":-1}',
            "INVALID_VALUE",
        ),
        (
            '{"kind":"send_result","transaction":"PREPARED","check_immunity":"60",'
            '"check_immunity_s":60}',
            "INVALID_TRANSACTION",
        ),
        # the property as the broker reads it, however odd: never quarantined
        ('{"kind":"send_result","transaction":"PREPARED","check_immunity_s":-1}', None),
        ('{"kind":"send_result","transaction":"PREPARED","check_immunity":"1 min"}', None),
    ],
)
def test_bad_transaction_records_are_quarantined(record: str, code: str | None) -> None:
    base = (
        '"event_id":"x","event_time":1795255200000,"producer_id":"p","topic":"T",'
        '"broker_name":"a","outcome":"SEND_OK","latency_ms":1,"message_id":"m",'
    )
    text = "{" + base + record[1:]
    parsed = parse([text], ["test"], [T0]).to_pylist()
    assert [r["reason_code"] for r in parsed] == [code], parsed[0]["reason"]


def test_a_check_of_a_half_message_faultline_does_not_hold() -> None:
    rows = run([[check("k1", 1_000, "old", "a", "COMMIT_MESSAGE", 4)]])
    assert states(rows) == [("old", "COMMIT", 4, 1_000)]
    assert "does not hold" in rows[0]["reason"] and rows[0]["next_check_at"] is None


def test_the_transactions_rows_are_typed_by_the_schema() -> None:
    step = engine.advance("c", None, frame([half("s1", 1_000, "a")]), engine.EngineConfig())
    table = step.tables["transactions"]
    assert pd.isna(table.to_pandas()["cause_event_id"]).tolist() == [False]
    assert table.schema.field("check_times").type.bit_width == 32


def test_an_immunity_of_minus_one_or_that_does_not_parse_is_the_transaction_timeout() -> None:
    """TMSI.getImmunityTime (@4.7.1:255-265): ``-1``, and a text ``getLong`` refuses, stand for
    ``transactionTimeOut``; the message still takes the immunity's branch: a wake before the
    timeout re-appends it and counts (``IMMUNE``), where a message without the property waits
    ("New arrived")."""
    rows = run(
        [
            [
                half("s1", 55_000, "a", latency=5, check_immunity="-1"),
                half("s2", 55_000, "b", latency=5, check_immunity="1 min"),
                half("s3", 55_000, "c", latency=5, check_immunity_s=-1),
                half("s4", 55_000, "d", latency=5),
                beat("hb", 2 * MIN + 1, "a"),
            ]
        ]
    )
    checks = sorted((tx, times, t) for tx, state, times, t in states(rows) if state == "CHECK")
    assert checks == [
        ("m-s1", 2, 2 * MIN),  # at MIN, 5.005 s old: IMMUNE (count 1); at 2 MIN checked
        ("m-s2", 2, 2 * MIN),
        ("m-s3", 2, 2 * MIN),
        ("m-s4", 1, 2 * MIN),  # at MIN: younger than the timeout, not yet
    ]


REJECTED = [
    ("m-s2", "END_REJECTED", 0, 11_100),  # refused (604): the message waits for its checks
    *(("m-s2", "CHECK", k, k * 30_000) for k in range(1, 5)),  # 30 s wakes, 29 s old at the first
]
"""The late end to a broker that refuses it, and the checks of the half message it leaves."""


@pytest.mark.parametrize(
    ("release", "first_check", "ended"),
    [
        ("develop", 90_000, REJECTED),  # waits at age == timeout; refuses the late end
        ("5.3.3", 60_000, REJECTED),  # checks at age == timeout, as 4.x
        ("5.1.0", 60_000, [("m-s2", "COMMIT", 0, 11_100)]),  # no rejectCommitOrRollback yet
    ],
)
def test_a_released_5x_broker_has_its_releases_boundaries(
    release: str, first_check: int, ended: list[tuple[str, str, int, int]]
) -> None:
    five = {"client_profile": "rocketmq-5", "latency": 0}
    rows = run(
        [
            [
                half("s1", 54_000, "a", **five),  # born 54 s: 6 s old at the wake of 60 s
                half("s2", 1_000, "b", check_immunity_s=10, **five),
                end("e2", 11_100, "m-s2", "b", "COMMIT_MESSAGE"),  # 10.1 s after its birth
                beat("hb", 2 * MIN, "a"),
            ]
        ],
        transactions=engine.BrokerTransactions(broker_release=release),
    )
    got = states(rows)
    assert next(t for tx, s, _, t in got if tx == "m-s1" and s == "CHECK") == first_check
    assert [row for row in got if row[0] == "m-s2"] == [("m-s2", "PREPARED", 0, 1_000), *ended]


def test_a_wake_stops_scanning_a_half_queue_at_the_first_message_that_waits() -> None:
    """TMSI.check (@4.7.1:161-239): the round breaks at "New arrived", so an older message stored
    behind a young one waits a round too; another broker's queue is scanned on its own, and a
    message under its immunity is re-appended without stopping the round."""
    rows = run(
        [
            [
                half("young", 55_000, "a", latency=10),  # 4.99 s old at the wake of 60 s: waits
                half("slow", 55_500, "a", latency=3_000),  # born 52.5 s: old enough, behind it
                half("other", 55_500, "b", latency=3_000),  # the same, alone on broker b
                half("immune", 54_000, "c", latency=10, check_immunity_s=100),
                half("behind", 55_500, "c", latency=3_000),
                beat("hb", 2 * MIN + 1, "a"),
            ]
        ]
    )
    first: dict[str, tuple[int, int]] = {}
    for tx, state, times, t in states(rows):
        if state == "CHECK":
            first.setdefault(tx, (t, times))
    assert first == {
        "m-slow": (2 * MIN, 1),  # a round later than its own age says
        "m-other": (MIN, 1),
        "m-young": (2 * MIN, 1),
        "m-behind": (MIN, 1),
        # "immune": re-appended at MIN and 2 MIN (count 2), first checked at 100 s of age
    }


def test_a_broker_without_heartbeats_checks_nothing_until_it_is_back() -> None:
    """A broker the NameServer dropped (heartbeat_timeout 120 s, scans every 10 s) is down: its
    check service does not wake. Dropped at 4:10 (last heartbeat at 2:00), back at 7:30, it
    checks again at its wake of 8:00, its count where it stopped."""
    rows = run(
        [
            [
                beat("hb0", 0, "a"),
                half("s1", 1_000, "a", latency=5),
                beat("hb1", 2 * MIN, "a"),
                beat("hb2", 7 * MIN + 30_000, "a"),
                beat("hb3", 9 * MIN + 1, "a"),
            ]
        ]
    )
    checks = [(times, t) for _, state, times, t in states(rows) if state == "CHECK"]
    assert checks == [(k, k * MIN) for k in range(1, 5)] + [(5, 8 * MIN), (6, 9 * MIN)]


def test_a_half_message_older_than_the_file_reserved_time_is_skipped_without_a_check() -> None:
    """TransactionalMessageServiceImpl's ``needSkip``: a wake that finds a half message born more
    than ``fileReservedTime`` (72 h) before it drops it unchecked, and faultline tells the
    producer. Here its broker stops heartbeating after two checks (dropped from the route at
    2:10, so its check service is down) and comes back after 72 h: its first wake then skips."""
    hours = 3_600_000
    rows = run(
        [
            [
                beat("hb0", 0, "a"),
                half("s1", 1_000, "a", latency=5),  # born at 0.995 s
                beat("hb1", 72 * hours + 30_000, "a"),  # back; its next wake is at 72 h 1 min
                beat("hb2", 72 * hours + 2 * MIN, "a"),
            ]
        ]
    )
    assert states(rows) == [
        ("m-s1", "PREPARED", 0, 1_000),
        ("m-s1", "CHECK", 1, MIN),
        ("m-s1", "CHECK", 2, 2 * MIN),
        ("m-s1", "SKIPPED", 2, 72 * hours + MIN),
    ]
    skipped = rows[-1]
    assert skipped["born_at"] == T0 + 995
    assert (skipped["next_check_at"], skipped["notify"]) == (None, True)
    assert skipped["reason"] == (
        "older than the store's fileReservedTime (259200000 ms): skipped without a check, "
        "never committed"
    )
    assert not any(r["notify"] for r in rows[:-1])
