"""Which events the engine applies: late ones, ones from the future, repeated ones, and a
cluster that comes back after hours of silence."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from tests.engine.conftest import T0, beat, decisions, frame, route, run, send
from udfs import engine

HOUR = 3_600_000
CONFIG = engine.EngineConfig(allowed_lateness_ms=60_000, max_future_skew_ms=HOUR)


def _rows(step: engine.Step, table: str) -> list[dict[str, Any]]:
    return step.tables[table].to_pylist() if table in step.tables else []


def test_late_events_are_kept_apart_and_change_nothing() -> None:
    first = run([beat("h1", 100_000, "a")], CONFIG)
    second = run([beat("late", 39_999, "a"), beat("ok", 40_000, "a")], CONFIG, first.state)
    assert second.stats == {
        "input": 2,
        "valid": 1,
        "late": 1,
        "quarantined": 0,
        "duplicates": 0,
        "stale": 0,
        "messages": 1,
        "dropped": 0,
    }
    assert list(second.tables["late_events"].column("event_id").to_pylist()) == ["late"]
    assert second.state.clock == T0 + 100_000


def test_an_event_later_than_its_ingest_time_plus_the_skew_is_from_the_future() -> None:
    ingest = T0 + 100_000
    step = run(
        [
            {**beat("on-time", 100_000, "a"), "ingest_ms": ingest},
            {**beat("ahead", 100_000 + HOUR, "a"), "ingest_ms": ingest},  # exactly the skew
            {**beat("future", 100_001 + HOUR, "a"), "ingest_ms": ingest},
            {**beat("no-ingest-time", 100_000 + 5 * HOUR, "a"), "ingest_ms": None},
        ],
        CONFIG,
    )
    quarantine = step.tables["quarantine"].to_pandas()
    assert [json.loads(r)["event_id"] for r in quarantine["raw"]] == ["future"]
    assert list(quarantine["reason_code"]) == ["FUTURE_EVENT_TIME"]
    assert quarantine["reason"].iloc[0] == (
        f"event_time {T0 + 100_001 + HOUR} is more than {HOUR} ms after the record's ingest time "
        f"{ingest} (its Kafka timestamp or its file's time)"
    )
    # a record without an ingest time (a Kafka message without timestamp) cannot be judged
    assert step.stats["valid"] == 3 and step.state.clock == T0 + 100_000 + 5 * HOUR


def _before_the_gap() -> list[dict[str, Any]]:
    """Brokers a and b serve topic T; producer p (4.9) fails on a at +10 s (isolated for
    10 min in its own table, 10 s in the cluster's), parks a message for 2 h (level 18) at
    +20 s, and gives up on one at +25 s (level 3: 10 s). Then the whole cluster goes quiet."""
    return [
        route("r", 0, "a", "b"),
        beat("ha", 1000, "a"),
        beat("hb", 2000, "b"),
        send("s1", 10_000, "a", "REMOTING_EXCEPTION", 0),
        send("s2", 20_000, "b", delay_level=18),
        send("s3", 25_000, "b", "REMOTING_EXCEPTION", 0, attempt=2, producer_group="pg"),
        beat("hb2", 30_000, "b"),
    ]


def _after_the_gap(gap: int) -> list[dict[str, Any]]:
    return [beat("ha-back", gap, "a"), beat("hb-back", gap, "b"), send("s4", gap + 1, "a")]


def test_a_cluster_silent_for_six_hours_is_accepted_again_and_catches_up() -> None:
    gap = 6 * HOUR
    first = run(_before_the_gap(), CONFIG)
    state = engine.loads(engine.dumps(first.state))
    second = run(_after_the_gap(gap), CONFIG, state)
    assert second.stats["quarantined"] == 0 and second.stats["valid"] == 3
    assert second.state.clock == T0 + gap + 1
    # isolations that ran out during the silence end at their own time, and the brokers that
    # stopped heartbeating left the route at the NameServer's scan and came back with the first
    # heartbeat after it
    assert decisions(second) == [
        ("c", "a", "ROUTE_EXPIRED", 130_000, 130_000),  # last heartbeat +1 s: scan at +130 s
        ("c", "a", "ROUTE_RESTORED", gap, gap),
        ("c", "b", "RESTORE", 35_000, 35_000),  # the cluster's 5.x isolation: 10 s
        ("c", "b", "ROUTE_EXPIRED", 160_000, 160_000),  # last heartbeat +30 s
        ("c", "b", "ROUTE_RESTORED", gap, gap),
        ("p", None, "EVICTED", 25_000 + HOUR, 25_000 + HOUR),  # an hour after its last send
        ("p", "a", "RESTORE", 610_000, 610_000),  # p's own 4.9 isolation: 10 min
        ("p", "b", "RESTORE", 625_000, 625_000),
    ]
    released = {(r["message_id"], r["deliver_at"] - T0) for r in _rows(second, "redeliveries")}
    assert released == {("m-s2", 20_000 + 2 * HOUR), ("m-s3", 25_000 + 10_000)}
    assert second.state.schedule == {}
    # the same events in one batch give the same rows
    whole = run(_before_the_gap() + _after_the_gap(gap), CONFIG)
    assert Counter(decisions(whole)) == Counter(decisions(first) + decisions(second))


def test_a_repeated_event_is_counted_and_changes_nothing() -> None:
    events = [
        beat("h0", 0, "a"),
        send("s1", 1000, "b", "REMOTING_EXCEPTION", 0, client_profile="rocketmq-5"),
        send("s2", 2000, "b"),
    ]
    once = run(events, CONFIG)
    # the same record twice in one batch, and once more in the next batch
    twice = run([*events, events[1]], CONFIG)
    again = run([events[1], beat("h1", 3000, "a")], CONFIG, engine.loads(engine.dumps(twice.state)))
    assert twice.stats["duplicates"] == 1 and twice.stats["valid"] == 3
    assert twice.stats["input"] == 4
    for table in ("fault_items", "broker_decisions", "routing_decisions", "routing_table"):
        assert _rows(twice, table) == _rows(once, table), table
    assert again.stats == {
        "input": 2,
        "valid": 1,
        "late": 0,
        "quarantined": 0,
        "duplicates": 1,
        "stale": 0,
        "messages": 1,
        "dropped": 0,
    }
    assert "fault_items" not in again.tables and decisions(again) == []


def test_which_of_two_records_with_one_event_id_counts_does_not_depend_on_their_order() -> None:
    a = send("s1", 1000, "b", "REMOTING_EXCEPTION", 0)
    b = send("s1", 1000, "b", "SEND_OK", 5)
    first, second = run([a, b], CONFIG), run([b, a], CONFIG)
    assert first.stats["duplicates"] == second.stats["duplicates"] == 1
    assert _rows(first, "fault_items") == _rows(second, "fault_items")


def test_event_ids_are_kept_only_within_the_allowed_lateness() -> None:
    state: engine.State | None = None
    sizes = []
    for second in range(0, 600, 10):  # ten minutes, ten events a second, in batches of 10 s
        batch = [beat(f"h{second}-{i}", second * 1000 + i * 100, "a") for i in range(100)]
        step = engine.advance("c", state, frame(batch), CONFIG)
        state = engine.loads(engine.dumps(step.state))
        sizes.append(len(state.seen))
    assert state is not None and state.clock is not None
    horizon = state.clock - CONFIG.allowed_lateness_ms
    assert state.seen.seconds.min() == horizon // 1000  # whole seconds of event time
    assert state.seen.counts.sum() == len(state.seen.hashes)
    assert max(sizes) <= 710  # 60 s of lateness at 10 events/s, plus the batch's own 10 s
    # an id that was forgotten is older than the lateness: it comes back late, not applied
    old = run([beat("h0-0", 0, "a")], CONFIG, state)
    assert old.stats["late"] == 1 and old.stats["duplicates"] == 0


def test_a_state_of_version_1_is_read_as_knowing_no_event_ids() -> None:
    # version 1 to 3 kept one map of publish infos; version 1 no event ids
    tables = {"cluster": {}, "producer": {}}
    v1 = {"v": 1, "clock": None, "tables": tables, "pubinfo": {}, "routes": {}, "heartbeats": {},
          "routing_table": {}, "schedule": {}}  # fmt: skip
    assert len(engine.loads(json.dumps(v1)).seen) == 0


def test_a_rejected_record_without_an_ingest_time_is_seen_at_no_time() -> None:
    """A lost Kafka range has no ingest time: its row's ``seen_at`` is null, not the smallest
    integer (which no timestamp or partition can hold)."""
    from udfs.parse import parse

    records = parse(["not json", "{}"], ["t/0/5", "t/0/6"], [None, 1_000]).to_pandas()
    step = engine.advance("c", None, records, engine.EngineConfig())
    rows = step.tables["quarantine"].to_pylist()
    assert [(r["origin"], r["seen_at"]) for r in rows] == [("t/0/5", None), ("t/0/6", 1_000)]


def test_the_kept_ids_are_found_whatever_their_hashes() -> None:
    """A repeat is found among the kept hashes at either end of their order, and nothing else is."""
    import numpy as np

    from udfs.engine._state import Seen

    kept = np.array([7, 2**64 - 1, 0, 12], np.uint64)
    seen = Seen(np.array([1], np.int64), np.array([4], np.int64), kept)
    asked = np.array([0, 2**64 - 1, 12, 7, 1, 2**64 - 2, 13], np.uint64)
    assert seen.contains(asked).tolist() == [True] * 4 + [False] * 3
    assert not Seen().contains(asked).any()
