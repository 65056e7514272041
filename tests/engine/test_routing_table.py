"""The compact routing table (table format 3): the ``producer`` scope's rows refer to a route of
the ``routes`` table instead of listing its queues, and give back, read with
:func:`streaming.tools.routing_tables.whole`, exactly the rows the format-2 writer wrote
(:mod:`tests.engine.legacy_routing_table`, run beside the engine on the same state)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from typing import Any

import pyarrow as pa
import pytest

from streaming.config import engine_config, load_job_config, load_scenario
from streaming.sim.simulator import simulate
from streaming.tools.routing_tables import RoutingTableError, whole
from tests.engine.conftest import T0, beat, frame, route, run, send
from tests.engine.legacy_routing_table import Legacy, beside
from tests.engine.legacy_state import version_6
from udfs import engine
from udfs.parse import parse
from udfs.schema import TABLES

COMPARED = ("scope", "scope_key", "cluster", "topic", "effective_at", "cause_event_id", "isolated")
CHUNK = 5_000
"""Rows made whole at a time (a batch of ``fleet-1000`` lists 35 million queues)."""


@functools.cache
def _events(name: str) -> list[dict[str, Any]]:
    """A scenario's events, simulated once per test session."""
    return simulate(load_scenario(name))


def _parsed(events: list[dict[str, Any]]) -> Any:
    """Events as the job's operator parses them (``streaming.job.stateful.run_key``)."""
    values = [json.dumps(e) for e in events]
    times = [e["event_time"] for e in events]
    return parse(values, ["test"] * len(values), times, [None] * len(values)).to_pandas()


Latest = dict[tuple[str, str], dict[str, Any]]
"""Each producer's last compact row per topic, over the batches so far."""


def _same_rows(got: pa.Table | None, legacy: Legacy, routes: list[pa.Table], latest: Latest) -> int:
    """The engine's rows are the format-2 writer's, in the same order, but for a producer's
    rows at a change of a route that left the brokers it isolates as they were; and every list
    the format-2 writer wrote comes back, at its instant, from the producer's last compact row
    and the route in force then. Returns how many rows the engine wrote."""
    expected = legacy.take()
    written = [] if got is None else got.select([*COMPARED, "route"]).to_pylist()
    if got is not None:
        producer = got.filter(pa.compute.equal(got["scope"], engine.PRODUCER))
        assert producer["selectable"].null_count == len(producer)  # no queue listed
        assert got["selectable"].null_count == len(producer)  # the cluster scope lists them all
    at = 0
    listed: list[tuple[int, dict[str, Any]]] = []  # the cluster scope's rows, and the engine's
    rebuilt: list[tuple[dict[str, Any], dict[str, Any]]] = []  # a producer's: legacy, compact
    for row in expected:
        if at < len(written) and all(written[at][c] == row[c] for c in (*COMPARED, "route")):
            if row["scope"] == engine.CLUSTER:
                listed.append((at, row))
            else:
                latest[row["scope_key"], row["topic"]] = written[at]
            at += 1
        else:  # left out: the producer's last row, with the route in force now, stands for it
            assert row["scope"] == engine.PRODUCER, row
        if row["scope"] == engine.PRODUCER:
            last = latest[row["scope_key"], row["topic"]]
            rebuilt.append((row, {**last, "route": row["route"], "selectable": None}))
    assert at == len(written)  # every row the engine wrote is one the format-2 writer wrote
    if listed:
        rows = got.take(pa.array([i for i, _ in listed]))  # type: ignore[union-attr]
        assert rows["selectable"].combine_chunks().equals(legacy.selectable([r for _, r in listed]))
    recorded = pa.concat_tables(routes) if routes else None
    brokers = (
        {}
        if recorded is None
        else {
            r: {b["broker_name"] for b in bs}
            for r, bs in zip(
                recorded["route"].to_pylist(), recorded["brokers"].to_pylist(), strict=True
            )
        }
    )
    for start in range(0, len(rebuilt), CHUNK):
        part = rebuilt[start : start + CHUNK]
        compact = pa.Table.from_pylist([c for _, c in part], schema=TABLES["routing_table"])
        made = whole(compact, recorded)
        assert made["selectable"].combine_chunks().equals(legacy.selectable([r for r, _ in part]))
        for row, compact in part:  # what the last row isolates in the route in force
            held = brokers.get(row["route"], set())
            assert sorted(tuple(i.values()) for i in row["isolated"]) == sorted(
                tuple(i.values()) for i in compact["isolated"] if i["broker_name"] in held
            )
    return len(written)


@pytest.mark.parametrize(("scenario", "batch"), [("default", 5_000), ("fleet-1000", 50_000)])
def test_the_whole_lists_come_back_from_the_compact_rows_and_the_routes(
    scenario: str, batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scenario in batches as the job runs it; each batch's routing-table rows, made whole
    with the ``routes`` rows of this batch and the ones before, are the format-2 rows."""
    events = _events(scenario)
    config = engine_config(load_job_config())
    state: engine.State | None = None
    routes: list[pa.Table] = []
    latest: Latest = {}
    producer_rows = 0
    with beside(monkeypatch) as legacy:
        for start in range(0, len(events), batch):
            step = engine.advance(
                events[0]["cluster"], state, _parsed(events[start : start + batch]), config
            )
            state = engine.loads(engine.dumps(step.state))  # as Spark stores it
            if "routes" in step.tables:
                routes.append(step.tables["routes"])
            got = step.tables.get("routing_table")
            _same_rows(got, legacy, routes, latest)
            if got is not None:
                producer_rows += got["selectable"].null_count
    assert producer_rows > 100  # producers isolated brokers, and their rows were compared
    recorded = pa.concat_tables(routes)
    # every change of a route is recorded once: the route events' topics and the brokers the
    # NameServer dropped and took back
    assert recorded["route"].null_count == 0
    per_topic: dict[str, list[str]] = {}
    for topic, digest in zip(
        recorded["topic"].to_pylist(), recorded["route"].to_pylist(), strict=True
    ):
        per_topic.setdefault(topic, []).append(digest)
    assert all(a != b for digests in per_topic.values() for a, b in itertools.pairwise(digests))


def test_two_shards_refer_to_the_routes_the_lead_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """With two shards, only the lead writes ``routes``; the other shard's producers refer to
    them."""
    events = _events("default")
    config = engine_config(load_job_config())
    states: list[engine.State | None] = [None, None]
    routes: list[pa.Table] = []
    written = [0, 0]
    latest: Latest = {}
    with beside(monkeypatch) as legacy:
        for start in range(0, len(events), 10_000):
            parsed = _parsed(events[start : start + 10_000])
            for i in (0, 1):
                step = engine.advance("c", states[i], parsed, config, engine.Shard(i, 2))
                states[i] = engine.loads(engine.dumps(step.state))
                assert i == 0 or "routes" not in step.tables
                routes += [step.tables["routes"]] if "routes" in step.tables else []
                written[i] += _same_rows(step.tables.get("routing_table"), legacy, routes, latest)
    assert all(written)


def _dropped(config: engine.EngineConfig) -> tuple[engine.Step, Legacy]:
    """Topic T's only broker stops heartbeating while the producer isolates it: the NameServer
    drops it at +130 s, and T's route has no broker left."""
    with pytest.MonkeyPatch.context() as patch, beside(patch) as legacy:
        step = engine.advance(
            "c",
            None,
            frame(
                [
                    beat("h1", 0, "a"),
                    send("s1", 1_000, "a", "REMOTING_EXCEPTION", 0),  # 4.9: 600 s
                    beat("h2", 5_000, "b"),
                    beat("h3", 200_000, "b"),
                ]
            ),
            config,
        )
    return step, legacy


def test_static_routes_are_recorded_at_the_first_event_and_an_empty_route_is_no_route() -> None:
    config = dataclasses.replace(
        engine.EngineConfig(scopes=(engine.PRODUCER,)), static_routes={"T": (("a", 2, 6),)}
    )
    step, legacy = _dropped(config)
    recorded = step.tables["routes"].to_pylist()
    assert [(r["topic"], r["effective_at"] - T0, r["cause_event_id"]) for r in recorded] == [
        ("T", 0, "h1"),  # the static route, at the cluster's first event
        ("T", 130_000, "h1"),  # a dropped: no broker left (the scan's cause: a's last beat)
    ]
    assert recorded[0]["brokers"] == [{"broker_name": "a", "write_queue_nums": 2, "perm": 6}]
    assert [q["queue_id"] for q in recorded[0]["writable"]] == [0, 1]
    assert (recorded[1]["brokers"], recorded[1]["writable"]) == ([], [])
    rows = step.tables["routing_table"]
    assert [(r["effective_at"] - T0, r["route"]) for r in rows.to_pylist()] == [
        (1_000, recorded[0]["route"]),  # p's first send, which isolates a
        (130_000, None),  # no broker in the route: nothing to refer to
    ]
    assert whole(rows, step.tables["routes"])["selectable"].to_pylist() == [[], []]
    assert [r["selectable"] for r in legacy.take()] == [[], []]


def test_a_state_from_before_the_routes_table_records_the_route_in_force() -> None:
    """A state that recorded no route (one of state version 4, from before table format 3)
    records the routes in force at the next batch's first event, once."""
    first = run([route("r", 0, "a", "b"), beat("h", 1_000, "a")])
    assert [r["effective_at"] - T0 for r in first.tables["routes"].to_pylist()] == [0]
    resumed = dataclasses.replace(first.state, recorded={})
    second = run([send("s", 2_000, "a"), send("t", 3_000, "b")], state=resumed)
    (row,) = second.tables["routes"].to_pylist()
    assert (row["effective_at"] - T0, row["cause_event_id"]) == (2_000, "s")
    assert row["route"] == first.tables["routes"]["route"][0].as_py()
    third = run([send("u", 4_000, "a")], state=second.state)
    assert "routes" not in third.tables


def test_a_row_whose_route_is_not_recorded_is_refused() -> None:
    rows = pa.Table.from_pylist(
        [{"topic": "T", "route": "nowhere", "isolated": []}], schema=TABLES["routing_table"]
    )
    with pytest.raises(RoutingTableError, match=r"\(the first: nowhere, of topic T\)"):
        whole(rows, TABLES["routes"].empty_table())
    given = rows.set_column(
        rows.schema.get_field_index("selectable"),
        "selectable",
        pa.array([[{"broker_name": "x", "queue_id": 3}]], TABLES["routing_table"][6].type),
    )
    assert whole(given, None).equals(given)  # a listed queue wins: nothing to look up


def test_a_state_of_version_5_resumes_with_the_whole_tables_it_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A version 5 state may keep a producer's digest of the whole table (table format 2): read
    again, such a digest is marked and still recognised, so the state resumes with the rows a
    run from the start gives. The same digests in a version 6 state are the isolated brokers'
    alone, and would write rows the format-2 writer had already written."""
    events = _events("default")
    config = engine_config(load_job_config())
    cluster, cut = events[0]["cluster"], len(events) // 2
    # a route that takes in a read-only broker: every producer of the topic meets a change of
    # its route, and the whole table (the writable queues) stays as it was published
    declared = [e for e in events[:cut] if e["kind"] == "route"][-1]
    brokers = [*declared["brokers"], {"broker_name": "broker-z", "write_queue_nums": 4, "perm": 4}]
    taken_in = {**declared, "event_id": "route-read-only", "brokers": brokers}
    taken_in["event_time"] = events[cut]["event_time"]
    legacy, published = Legacy(), {}
    real = engine.publish

    def both(seg: Any, opened: Any, changes: Any, routes: Any) -> None:
        # the format-2 writer, on its own digests from the start
        shadow = dataclasses.replace(seg.state, published=published)
        legacy.publish(seg.cluster, shadow, opened, changes, routes, seg.first_event, seg.config)
        real(seg, opened, changes, routes)

    with monkeypatch.context() as patch:
        patch.setattr(engine, "publish", both)
        first = engine.advance(cluster, None, _parsed(events[:cut]), config).state
    rest = _parsed([taken_in, *events[cut:]])
    ours = engine.advance(cluster, engine.loads(engine.dumps(first)), rest, config)
    old = dataclasses.replace(first, published=published)
    resumed = engine.advance(cluster, engine.loads(version_6(old, version=5)), rest, config)
    for name, table in ours.tables.items():
        assert resumed.tables[name].equals(table), name
    unmarked = engine.advance(cluster, engine.loads(version_6(old)), rest, config)
    assert unmarked.tables["routing_table"].num_rows > ours.tables["routing_table"].num_rows
