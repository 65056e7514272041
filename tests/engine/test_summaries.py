"""Summaries decide as per-send reporting does: every shipped scenario, simulated with each
producer and consumer reporting in full and through :class:`streaming.client.Reporter`, goes
through the engine (the shipped configuration: every policy on) in batches of 20,000 records, and
every table but ``fault_items`` (one row per update, so fewer with summaries) is compared row
for row, the producer scope's routing decisions apart (see
:func:`test_every_table_but_fault_items_is_the_same`). The parser's reason codes for a summary
that contradicts itself, and a repeated summary, are checked on records of their own."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from streaming.config import SCENARIO_DIR, engine_config, load_job_config, load_scenario
from streaming.sim.simulator import simulate
from tests.engine.conftest import T0
from udfs import engine
from udfs.parse import parse
from udfs.vocabulary import ReasonCode, TableName

SCENARIOS = sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))
BATCH = 20_000


def _run(events: list[dict[str, Any]]) -> tuple[dict[str, Counter[str]], dict[str, int]]:
    """Each table's rows (per scope where it has one) as a multiset of JSON texts, and the
    counters, from the engine over ``events`` in batches."""
    config = engine_config(load_job_config(None))
    state, rows, stats = None, {}, Counter()
    for i in range(0, len(events), BATCH):
        part = events[i : i + BATCH]
        values = [json.dumps(e) for e in part]
        parsed = parse(values, ["sim"] * len(part), [None] * len(part)).to_pandas()
        step = engine.advance(part[0]["cluster"], state, parsed, config)
        state = step.state
        stats.update(step.stats)
        for name, table in step.tables.items():
            if name == TableName.FAULT_ITEMS:
                continue  # one row per update: fewer with summaries
            for r in table.to_pylist():
                text = json.dumps(r, sort_keys=True)
                rows.setdefault(f"{name}/{r.get('scope', '')}", Counter())[text] += 1
    return rows, dict(stats)


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_table_but_fault_items_is_the_same(name: str) -> None:
    """Identical rows, to the last column, in every table but ``fault_items``, both scopes;
    the messages the summaries stand for add up to the records of per-send reporting. The one
    exception is the producer scope's routing decisions of 4.x producers whose retry runs
    ``pickOneAtLeast`` (which orders the whole table by each broker's latest latency): the
    reporter sends every summary before such a producer's failure, so they are the same too
    on every shipped scenario, as is everything they lead to."""
    scenario = load_scenario(name)
    full = simulate(scenario.model_copy(update={"reporting": "full"}))
    summaries = simulate(scenario.model_copy(update={"reporting": "summary"}))
    assert len(summaries) < len(full)
    rows_full, stats_full = _run(full)
    rows_summary, stats_summary = _run(summaries)
    assert stats_summary["quarantined"] == 0
    assert stats_summary["messages"] == stats_full["messages"] == len(full)
    tables = sorted(set(rows_full) | set(rows_summary))
    assert "broker_decisions/cluster" in tables
    for table in tables:
        got, want = rows_summary.get(table, Counter()), rows_full.get(table, Counter())
        assert got == want, (table, list((got - want).items())[:2], list((want - got).items())[:2])


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
