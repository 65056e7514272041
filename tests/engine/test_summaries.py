"""Summaries decide as per-send reporting does: every shipped scenario, simulated with each
producer and consumer reporting in full and through :class:`streaming.client.Reporter`, goes
through the engine (the shipped configuration: every policy on) in batches of 20,000 records, and
every table but ``fault_items`` (one row per update, so fewer with summaries) is compared row
for row, the producer scope's routing decisions apart, and every FaultItem ends the same (see
:func:`test_every_table_is_the_same_and_every_fault_item_ends_the_same`). SYNC and ASYNC sends
summarized side by side, and a producer with its latency fault switch off, are checked on
literal rows. The parser's reason codes for a summary that contradicts itself, and a repeated
summary, are checked on records of their own."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from streaming.client import Reporter
from streaming.config import SCENARIO_DIR, engine_config, load_job_config, load_scenario
from streaming.sim.simulator import simulate
from tests.engine.conftest import T0, beat, send
from udfs import engine
from udfs.engine._output import Out
from udfs.engine._summaries import expand
from udfs.parse import parse
from udfs.vocabulary import ReasonCode, TableName

SCENARIOS = sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))
BATCH = 20_000
Items = dict[tuple[str, str, str], dict[str, Any]]
"""The last ``fault_items`` row of each (scope, scope key, broker): the FaultItem as the run left
it."""


def _run(events: list[dict[str, Any]]) -> tuple[dict[str, Counter[str]], dict[str, int], Items]:
    """Each table's rows (per scope where it has one) as a multiset of JSON texts, and the
    counters, from the engine over ``events`` in batches; and each FaultItem's last row."""
    config = engine_config(load_job_config(None))
    state = None
    rows: dict[str, Counter[str]] = {}
    stats: Counter[str] = Counter()
    items: Items = {}
    for i in range(0, len(events), BATCH):
        part = events[i : i + BATCH]
        values = [json.dumps(e) for e in part]
        parsed = parse(values, ["sim"] * len(part), [None] * len(part)).to_pandas()
        step = engine.advance(part[0]["cluster"], state, parsed, config)
        state = step.state
        stats.update(step.stats)
        for name, table in step.tables.items():
            if name == TableName.FAULT_ITEMS:  # one row per update: fewer with summaries
                for r in table.to_pylist():
                    key = (r["scope"], r["scope_key"], r["broker_name"])
                    if key not in items or r["event_time"] >= items[key]["event_time"]:
                        items[key] = r  # the latest update; at one instant, the last written
                continue
            for r in table.to_pylist():
                text = json.dumps(r, sort_keys=True)
                rows.setdefault(f"{name}/{r.get('scope', '')}", Counter())[text] += 1
    return rows, dict(stats), items


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_table_is_the_same_and_every_fault_item_ends_the_same(name: str) -> None:
    """Identical rows, to the last column, in every table but ``fault_items``, both scopes;
    the messages the summaries stand for add up to the records of per-send reporting. The one
    exception is the producer scope's routing decisions of 4.x producers whose retry runs
    ``pickOneAtLeast`` (which orders the whole table by each broker's latest latency): the
    reporter sends every summary before such a producer's failure, so they are the same too
    on every shipped scenario, as is everything they lead to. ``fault_items`` has fewer rows,
    but each (scope, key, broker)'s last is the same update, to the last column but
    ``message_id``, which a summary does not carry."""
    scenario = load_scenario(name)
    full = simulate(scenario.model_copy(update={"reporting": "full"}))
    summaries = simulate(scenario.model_copy(update={"reporting": "summary"}))
    assert len(summaries) < len(full)
    rows_full, stats_full, items_full = _run(full)
    rows_summary, stats_summary, items_summary = _run(summaries)
    assert stats_summary["quarantined"] == 0
    assert stats_summary["messages"] == stats_full["messages"] == len(full)
    tables = sorted(set(rows_full) | set(rows_summary))
    assert "broker_decisions/cluster" in tables
    for table in tables:
        got, want = rows_summary.get(table, Counter()), rows_full.get(table, Counter())
        assert got == want, (table, list((got - want).items())[:2], list((want - got).items())[:2])
    assert sorted(items_summary) == sorted(items_full)
    assert {scope for scope, _, _ in items_full} == {"cluster", "producer"}
    for key, sent in items_full.items():
        summarized = items_summary[key]
        assert summarized["message_id"] in (None, sent["message_id"]), key
        assert {**summarized, "message_id": None} == {**sent, "message_id": None}, key


BASE = ("kind", "producer_id", "client_profile", "latency_fault_enable")
"""What the reporter itself puts into each record."""


def _summarized(sends: list[dict[str, Any]], **settings: Any) -> list[dict[str, Any]]:
    """The records a :class:`Reporter` of producer ``p`` sends for ``sends``, closed after."""
    out: list[dict[str, Any]] = []

    def take(record: dict[str, Any]) -> bool:
        out.append(record)
        return True

    reporter = Reporter("p", take, cluster="c", **settings)
    for e in sends:
        reporter.send({k: v for k, v in e.items() if k not in BASE})
    reporter.close()
    return out


def _tables(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows from the engine (the default configuration) over ``records``."""
    values = [json.dumps({"cluster": "c", **r}) for r in records]
    parsed = parse(values, ["t"] * len(values), [None] * len(values)).to_pandas()
    step = engine.advance("c", None, parsed, engine.EngineConfig())
    assert step.stats["quarantined"] == 0
    return {name: table.to_pylist() for name, table in step.tables.items()}


def _items(tables: dict[str, list[dict[str, Any]]]) -> list[tuple[Any, ...]]:
    """``fault_items`` as (scope, event id, event time - T0, latency, phase, isolation,
    available_from) in the order of the updates."""
    columns = ("scope", "event_id", "event_time", "latency_ms", "phase", "isolation")
    return [
        (*(r[c] - T0 if c == "event_time" else r[c] for c in columns), r["available_from"])
        for r in tables[TableName.FAULT_ITEMS]
    ]


def test_async_sends_summarized_beside_sync_ones_leave_each_fault_item_as_its_sends_do() -> None:
    """A 4.9 producer's SYNC and ASYNC sends to one broker in one window: a summary per mode,
    applied as its first and last send. An ASYNC send updates the item twice, for its dispatch
    (0 ms) and for its result (MQClientAPIImpl's callback); 4.9's item is available from the
    send itself (no isolation below 550 ms), the 5.x cluster scope's never moved (extend-only).
    The summaries make the rows of the first and last send of each mode, the FaultItem ends on
    the last send's result, and every other table is the same."""
    modes = [("SYNC", 10), ("ASYNC", 7), ("SYNC", 6), ("ASYNC", 9), ("SYNC", 4), ("ASYNC", 3)]
    sends = [
        send(f"e{i}", 100 * (i + 1), "b", latency=latency, mode=mode)
        for i, (mode, latency) in enumerate(modes)
    ]
    summaries = _summarized(sends)
    assert [(r["kind"], r["mode"], r["messages"]) for r in summaries] == [
        ("send_summary", "SYNC", 3),
        ("send_summary", "ASYNC", 3),
    ]
    full, summarized = _tables(sends), _tables(summaries)

    def updates(scope: str, available: int | None) -> list[tuple[Any, ...]]:
        def at(t: int) -> int:
            return T0 + t if available is None else available

        return [
            (scope, "e0", 100, 10, "result", False, at(100)),
            (scope, "e1", 200, 0, "dispatch", False, at(200)),
            (scope, "e1", 200, 7, "result", False, at(200)),
            (scope, "e2", 300, 6, "result", False, at(300)),
            (scope, "e3", 400, 0, "dispatch", False, at(400)),
            (scope, "e3", 400, 9, "result", False, at(400)),
            (scope, "e4", 500, 4, "result", False, at(500)),
            (scope, "e5", 600, 0, "dispatch", False, at(600)),
            (scope, "e5", 600, 3, "result", False, at(600)),
        ]

    every = updates("cluster", 0) + updates("producer", None)
    assert _items(full) == every
    assert _items(summarized) == [u for u in every if u[1] not in ("e2", "e3")]
    assert {k: v for k, v in summarized.items() if k != TableName.FAULT_ITEMS} == {
        k: v for k, v in full.items() if k != TableName.FAULT_ITEMS
    }


def test_a_producer_with_the_latency_fault_switch_off_updates_the_cluster_scope_only() -> None:
    """``sendLatencyFaultEnable`` false: RocketMQ's ``updateFaultItem`` does nothing, so the
    producer scope has no FaultItem, and its retry only avoids the broker that failed
    (``not-last-broker``); the cluster scope (5.x) isolates broker a for 10 s after the
    failure, and a's healthy sends after it, summarized, do not move that. The same rows, and
    the summaries' FaultItems end as the sends' do."""
    listed = [{"broker_name": b, "write_queue_nums": 2, "perm": 6} for b in "ab"]
    route = {"kind": "route", "event_id": "r0", "event_time": T0 - 1_000, "topic": "T",
             "brokers": listed}  # fmt: skip
    sends = [
        send(f"e{i}", i, broker, outcome, latency, latency_fault_enable=False, attempt=attempt)
        for i, (broker, outcome, latency, attempt) in enumerate(
            [
                ("a", "SEND_OK", 5, 0),
                ("b", "SEND_OK", 5, 0),
                ("a", "REMOTING_EXCEPTION", 3000, 0),
                ("b", "SEND_OK", 5, 1),  # the retry
                ("a", "SEND_OK", 5, 0),
                ("a", "SEND_OK", 6, 0),
                ("a", "SEND_OK", 7, 0),
            ]
        )
    ]
    summaries = _summarized(sends, latency_fault_enable=False)
    assert [(r["kind"], r["broker_name"], r["event_id"]) for r in summaries] == [
        ("send_summary", "a", "e0"),
        ("send_result", "a", "e2"),
        ("send_summary", "b", "e1"),  # goes before its broker's retry, not before the failure
        ("send_result", "b", "e3"),
        ("send_summary", "a", "e6"),
    ]
    full, summarized = _tables([route, *sends]), _tables([route, *summaries])
    until = T0 + 10_002
    assert _items(full) == [
        ("cluster", "e0", 0, 5, "result", False, 0),
        ("cluster", "e1", 1, 5, "result", False, 0),
        ("cluster", "e2", 2, 3000, "result", True, until),
        ("cluster", "e3", 3, 5, "result", False, 0),
        ("cluster", "e4", 4, 5, "result", False, until),
        ("cluster", "e5", 5, 6, "result", False, until),
        ("cluster", "e6", 6, 7, "result", False, until),
    ]
    assert _items(summarized) == [u for u in _items(full) if u[1] != "e5"]
    decisions = [(r["scope"], r["broker_name"], r["decision"], r["effective_at"],
                  r["available_from"]) for r in full[TableName.BROKER_DECISIONS]]  # fmt: skip
    assert decisions == [("cluster", "a", "ISOLATE", T0 + 2, until)]
    routing = [(r["scope"], r["failed_broker"], r["selected_broker"], r["rule"])
               for r in full[TableName.ROUTING_DECISIONS]]  # fmt: skip
    assert routing == [
        ("cluster", "a", "b", "available-not-last"),
        ("producer", "a", "b", "not-last-broker"),
    ]
    assert {k: v for k, v in summarized.items() if k != TableName.FAULT_ITEMS} == {
        k: v for k, v in full.items() if k != TableName.FAULT_ITEMS
    }


def _summary(**kw: Any) -> dict[str, Any]:
    return {
        "kind": "send_summary",
        "event_id": "s",
        "event_time": T0 + 900,
        "producer_id": "p",
        "client_profile": "rocketmq-5",
        "topic": "T",
        "broker_name": "b",
        "messages": 3,
        "window_start": T0,
        "window_end": T0 + 1_000,
        "first_time": T0 + 100,
        "first_latency_ms": 4,
        "latency_ms": 6,
        "latency_total": 15,
        "latency_max": 6,
        "histogram": [3, 0, 0, 0, 0, 0, 0, 0],
        "queue_index_start": 10,
        "queue_index_end": 15,
        "dropped": 0,
        **kw,
    }


def _reasons(*records: dict[str, Any]) -> list[tuple[str | None, str | None]]:
    table = parse([json.dumps(r) for r in records], ["t"] * len(records), [None] * len(records))
    codes, reasons = table.column("reason_code").to_pylist(), table.column("reason").to_pylist()
    return list(zip(codes, reasons, strict=True))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"messages": 0}, "messages 0: a summary stands for at least one message"),
        ({"window_end": T0}, "is not after window_start"),
        ({"event_time": T0 + 1_000}, "is outside its window"),
        ({"first_time": T0 + 950}, "first_time"),
        ({"outcome": "REMOTING_EXCEPTION"}, "counts SEND_OK sends only"),
        ({"attempt": 1}, "is reported in full, never summarized"),
        ({"delay_level": 3}, "is reported in full, never summarized"),
        ({"histogram": [3, 0, 0]}, "histogram has 3 buckets; the latency bands of rocketmq-5"),
        ({"histogram": [2, 0, 0, 0, 0, 0, 0, 0]}, "histogram counts 2 sends, messages says 3"),
        ({"latency_total": 5}, "latencies do not add up"),
        ({"latency_max": 5}, "latencies do not add up"),
        ({"latency_max": 600, "latency_total": 610}, "is in an isolating band of rocketmq-5"),
        ({"queue_index_end": 9}, "queue_index_end 9 is before queue_index_start 10"),
        ({"dropped": -1}, "dropped -1 is negative"),
    ],
)
def test_a_summary_that_contradicts_itself_is_quarantined(
    change: dict[str, Any], reason: str
) -> None:
    assert _reasons(_summary()) == [(None, None)]
    [(code, text)] = _reasons(_summary(**change))
    assert code == ReasonCode.INVALID_SUMMARY
    assert text is not None and reason in text


def test_a_consume_summary_is_checked_and_a_bad_histogram_is_a_wrong_type() -> None:
    consume = {
        "kind": "consume_summary",
        "event_id": "c",
        "event_time": T0 + 10,
        "consumer_group": "g",
        "topic": "T",
        "messages": 7,
        "window_start": T0,
        "window_end": T0 + 1_000,
    }
    assert _reasons(consume, {**consume, "window_start": T0 + 20}) == [
        (None, None),
        (ReasonCode.INVALID_SUMMARY, f"event_time {T0 + 10} is outside its window "
         f"[{T0 + 20}, {T0 + 1000})"),
    ]  # fmt: skip
    assert _reasons({**consume, "kind": "send_summary"})[0][0] == ReasonCode.MISSING_FIELD
    assert _reasons(_summary(histogram="3"))[0] == (
        ReasonCode.WRONG_TYPE,
        "wrong type for histogram",
    )
    assert _reasons(_summary(histogram=[1.5]))[0][0] == ReasonCode.WRONG_TYPE


def test_a_repeated_summary_is_a_duplicate_and_counts_once() -> None:
    config = engine.EngineConfig()
    record = json.dumps(_summary(dropped=2))
    step = engine.advance("c", None, parse([record, record], ["t", "t"], [None, None]).to_pandas(),
                          config)  # fmt: skip
    assert step.stats["duplicates"] == 1 and step.stats["valid"] == 1
    assert step.stats["messages"] == 3 and step.stats["dropped"] == 2
    items = step.tables["fault_items"].to_pylist()
    assert [(r["event_time"] - T0, r["latency_ms"]) for r in items if r["scope"] == "cluster"] == [
        (100, 4),
        (900, 6),
    ]  # the first send and the last: a FaultItem keeps no more of a run of them


def test_a_first_send_at_the_instant_of_other_records_goes_in_event_id_order() -> None:
    """A summary's first send goes where per-send reporting's send would: by event time, then
    by event id; at the same key as a record, after it, but before a summary's last send of
    that key (as a stable sort of the records, the first sends and the last sends would)."""
    at = T0 + 100
    records = [
        beat("b", 100, "x"),
        _summary(event_id="s1", first_event_id="a", first_time=at),  # before b
        _summary(event_id="s2", first_event_id="c", first_time=at),  # after b
        _summary(event_id="s3", first_event_id="b", first_time=at),  # b's key: after b
        _summary(event_id="s4", first_time=at, first_event_id=None),  # s4/first: after c
        _summary(event_id="s5", event_time=T0 + 905, first_event_id="s1", first_time=T0 + 900),
    ]
    records = [{k: v for k, v in r.items() if v is not None} for r in records]
    parsed = parse([json.dumps(r) for r in records], ["t"] * len(records), [None] * len(records))
    events = parsed.to_pandas().sort_values(["event_time", "event_id"], ignore_index=True)
    expanded = expand(events, Out())
    assert list(zip(expanded["event_time"] - T0, expanded["event_id"], strict=True)) == [
        (100, "a"),
        (100, "b"),
        (100, "b"),
        (100, "c"),
        (100, "s4/first"),
        (900, "s1"),  # s5's first send: s1's key, before s1's last send
        (900, "s1"),
        (900, "s2"),
        (900, "s3"),
        (900, "s4"),
        (905, "s5"),
    ]
    assert list(expanded["kind"]) == ["send_result", "heartbeat", *["send_result"] * 9]
    assert list(expanded["messages"].fillna(-1)) == [0, -1, 0, 0, 0, 0, 3, 3, 3, 3, 3]
