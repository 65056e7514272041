"""Invariants of the engine: batch boundaries change nothing; vectorized rules equal scalar ones."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.config import load_scenario
from streaming.sim.simulator import simulate
from tests.engine.conftest import T0, decisions, frame, run, send
from tests.engine.legacy_state import version_6
from udfs import engine
from udfs.engine import _state as engine_state
from udfs.engine._config import NO_ITEM
from udfs.engine._queues import Layout
from udfs.rocketmq import PROFILES, FaultTable, not_available_duration
from udfs.rocketmq._vector import not_available_durations, start_timestamps

EVENTS = simulate(load_scenario("quick"))
ROWS = [{**{k: v for k, v in e.items() if k != "cluster"}, "cluster": "c"} for e in EVENTS]


def _run_in_batches(cuts: list[int]) -> dict[str, list[str]]:
    state: engine.State | None = None
    tables: dict[str, list[str]] = {}
    bounds = [0, *sorted(set(cuts)), len(ROWS)]
    for begin, end in itertools.pairwise(bounds):
        if begin == end:
            continue
        step = engine.advance("c", state, frame(ROWS[begin:end]), engine.EngineConfig())
        state = engine.loads(engine.dumps(step.state))  # as Spark stores it
        for name, rows in step.tables.items():
            tables.setdefault(name, []).extend(
                json.dumps(r, sort_keys=True, default=str) for r in rows.to_pylist()
            )
    return {k: sorted(v) for k, v in tables.items()}


WHOLE = _run_in_batches([])


@settings(max_examples=8, deadline=None)
@given(st.lists(st.integers(1, len(ROWS) - 1), min_size=1, max_size=12))
def test_any_split_into_batches_gives_the_same_rows(cuts: list[int]) -> None:
    assert _run_in_batches(cuts) == WHOLE


def _cluster_windows_by_hand() -> set[tuple[str, str, int]]:
    """The cluster scope's isolations, folded from the input by the 5.x rules of
    ``udfs.rocketmq._profiles`` and ``_fault``: a send of 550-1799 ms makes its broker unavailable
    for 2 s, a failed one (isolation) for 10 s, and an item is only ever extended. (ISOLATE,
    RESTORE) times per broker."""
    ends: dict[str, int] = {}
    expected = set()
    for e in EVENTS:
        if e["kind"] != "send_result":
            continue
        assert e["mode"] == "SYNC" and (e["outcome"] != "SEND_OK" or e["latency_ms"] < 1800)
        failed, latency = e["outcome"] != "SEND_OK", e["latency_ms"]
        duration = 10_000 if failed else 2_000 if latency >= 550 else 0
        if not duration:
            continue
        broker, t = e["broker_name"], e["event_time"]
        end = ends.get(broker)
        if end is None or t >= end:
            if end is not None:
                expected.add((broker, "RESTORE", end))
            expected.add((broker, "ISOLATE", t))
            ends[broker] = t + duration
        else:
            ends[broker] = max(end, t + duration)
    return expected | {(broker, "RESTORE", end) for broker, end in ends.items()}


def test_the_quick_scenarios_isolations_are_those_of_the_5x_rules() -> None:
    decisions = [json.loads(r) for r in WHOLE["broker_decisions"]]
    got = {
        (d["broker_name"], d["decision"], d["effective_at"])
        for d in decisions
        if d["scope"] == "cluster" and d["decision"] in ("ISOLATE", "RESTORE")
    }
    expected = _cluster_windows_by_hand()
    # the slow broker-b, then all three brokers down together
    assert {b for b, d, _ in expected if d == "ISOLATE"} == {"broker-a", "broker-b", "broker-c"}
    assert got == expected


updates = st.lists(
    st.tuples(st.integers(-100, 40_000), st.booleans(), st.integers(0, 3_000)), max_size=30
)


@given(st.sampled_from(list(PROFILES.values())), updates, st.integers(0, 10**6))
def test_vectorized_updates_equal_the_scalar_fault_table(profile, steps, initial) -> None:  # type: ignore[no-untyped-def]
    table = FaultTable(profile)
    if profile.line == "5":
        table.update("b", 0, initial, now_ms=0)
    expected, now, times = [], 0, []
    for latency, isolation, gap in steps:
        now += gap
        times.append(now)
        expected.append(table.report("b", latency, isolation, now).start_timestamp)  # type: ignore[union-attr]
    latency = np.array([s[0] for s in steps], dtype=np.int64)
    isolation = np.array([s[1] for s in steps], dtype=bool)
    durations = not_available_durations(profile, latency, isolation)
    assert durations.tolist() == [not_available_duration(profile, s[0], s[1]) for s in steps]
    first = np.zeros(len(steps), dtype=bool)
    first[:1] = True
    init = np.full(len(steps), initial if profile.line == "5" else 0, dtype=np.int64)
    starts = start_timestamps(profile, first, init, np.array(times, dtype=np.int64), durations)
    assert starts.tolist() == expected


@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(-(10**13), 10**13), st.integers(0, 3_000)),
        min_size=1,
        max_size=60,
    ),
    st.integers(-(10**13), 10**13),
)
def test_5x_running_maxima_of_many_brokers_at_once_equal_one_broker_at_a_time(
    rows: list[tuple[bool, int, int]], initial: int
) -> None:
    """Many runs (one per table and broker) in one call give what each run gives alone."""
    profile = PROFILES["rocketmq-5"]
    first = np.array([i == 0 or new for i, (new, _, _) in enumerate(rows)], dtype=bool)
    now = np.array([t for _, t, _ in rows], dtype=np.int64)
    durations = np.array([d for _, _, d in rows], dtype=np.int64)
    init = np.full(len(rows), initial, dtype=np.int64)
    together = start_timestamps(profile, first, init, now, durations)
    bounds = [*np.flatnonzero(first).tolist(), len(rows)]
    alone = np.concatenate(
        [
            start_timestamps(profile, first[a:b], init[a:b], now[a:b], durations[a:b])
            for a, b in itertools.pairwise(bounds)
        ]
    )
    assert together.tolist() == alone.tolist()


DATA = Path(__file__).parent / "data"


def _routes(pub: dict[str, Any]) -> dict[str, str]:
    return {key: info.route for key, info in pub.items()}


def _publishing(state: Any, old: Any) -> Any:
    """``state`` with the producers' queue lists and round-robin indexes of ``old``: the index a
    retry takes is, since the real clients judged faultline, that of the queue that failed, so a
    run from the start holds other indexes (and 4.x's rewrites that follow them) than the ones an
    old version saved; both must resume the same from the same."""
    for pid, producer in state.producers.items():
        producer.pub = copy.deepcopy(old.producers[pid].pub)
    return state


def test_a_version_2_checkpoint_resumes_as_if_this_version_had_written_it() -> None:
    """``quick-900-v2.json``: the state faultline's version 2 engine (commit 066e226) left after
    the quick scenario's first 900 events. Read now, it is converted (routes become digests, publish
    infos move under their producer), and the rest of the scenario gives exactly the rows a run
    from the start gives; only, as it recorded no route, it records the route in force once, at
    the first event after it."""
    config = engine.EngineConfig()
    quick = load_scenario("quick")  # as it was then: without its transactional producer
    quick = quick.model_copy(update={"producers": [p for p in quick.producers if p.id != "p-tx"]})
    rows = [{**e, "cluster": "c"} for e in simulate(quick)]
    converted = engine.loads((DATA / "quick-900-v2.json").read_text())
    ours = engine.advance("c", None, frame(rows[:900]), config).state
    assert converted.producers.keys() == ours.producers.keys() == {"p-5", "p-47", "p-49"}
    for pid, producer in converted.producers.items():
        assert all(len(p.route) == 24 for p in producer.pub.values())  # a digest
        assert _routes(producer.pub) == _routes(ours.producers[pid].pub)
        # the last send is not known before version 4: the upgrade's clock stands in for it
        assert converted.clock is not None
        assert producer.last == converted.clock >= ours.producers[pid].last
    # the producer scope's digests name the route too before table format 4: the writer
    # still recognises them, so the rows below are the same
    assert converted.published["cluster|c"] == ours.published["cluster|c"]
    assert {k: v.keys() for k, v in converted.published.items()} == {
        k: v.keys() for k, v in ours.published.items()
    }
    assert converted.recorded == {} != ours.recorded
    rest = frame(rows[900:])
    resumed = _publishing(engine.loads(engine.dumps(ours)), converted)
    after_v2 = engine.advance("c", converted, rest, config)
    after_v3 = engine.advance("c", resumed, rest, config)
    recorded = after_v2.tables.pop("routes").to_pylist()
    first = rest.sort_values(["event_time", "event_id"]).iloc[0]
    assert [(r["topic"], r["route"], r["effective_at"], r["cause_event_id"]) for r in recorded] == [
        (topic, route, first["event_time"], first["event_id"])
        for topic, route in sorted(ours.recorded.items())
    ]
    assert after_v2.state.recorded == after_v3.state.recorded
    assert after_v2.tables.keys() == after_v3.tables.keys()
    for name, rows in after_v3.tables.items():
        assert after_v2.tables[name].equals(rows), name


def test_a_version_6_checkpoint_resumes_as_if_this_version_had_written_it() -> None:
    """``quick-900-v6.txt`` is the state faultline wrote (state version 6: each FaultItem's update
    time as it was, the publish infos as rows) after the quick scenario's first 900 events with
    every policy on. Read now, the rest of the scenario gives exactly the rows a run from the
    start gives; and ``legacy_state`` writes that text to the byte, so the tests that make
    older states with it make what that version wrote."""
    config = engine.EngineConfig(
        policies=engine.Policies(isolation_cap=0.5, outlier_factor=3.0, probe_share=0.1)
    )
    rows = [{**e, "cluster": "c"} for e in simulate(load_scenario("quick"))]
    text = (DATA / "quick-900-v6.txt").read_text().strip()
    assert text.startswith("6:")
    converted = engine.loads(text)
    assert version_6(converted) == text
    ours = engine.advance("c", None, frame(rows[:900]), config).state
    rest = frame(rows[900:])
    resumed = engine.advance("c", converted, rest, config)
    whole = engine.advance("c", engine.loads(engine.dumps(ours)), rest, config)
    assert resumed.tables.keys() == whole.tables.keys()
    for name, got in whole.tables.items():
        assert resumed.tables[name].equals(got), name


def test_the_cluster_scopes_decisions_are_handed_over_before_the_later_stages_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``advance``'s ``decided`` gets the cluster scope's decisions as soon as that scope is
    settled, before the delay queues run (the job publishes them meanwhile), with every such
    row the step returns."""
    order: list[str] = []
    delays = engine.schedule_batch

    def schedule_batch(*args: Any) -> None:
        order.append("delays")
        delays(*args)

    monkeypatch.setattr(engine, "schedule_batch", schedule_batch)
    decisions: dict[str, Any] = {}

    def decided(tables: dict[str, Any]) -> None:
        order.append("decisions")
        decisions.update(tables)

    step = engine.advance("c", None, frame(ROWS), engine.EngineConfig(), decided=decided)
    assert order.count("decisions") == 1 and order[-2:] == ["decisions", "delays"]
    assert decisions.keys() == set(engine.DECISIONS)
    for name, rows in decisions.items():
        whole = step.tables[name]
        assert rows.equals(whole.filter(pc.equal(whole["scope"], "cluster"))), name
        assert 0 < rows.num_rows < whole.num_rows  # the producer scope's rows come later


def test_a_late_event_meets_the_same_update_times_in_a_stored_state() -> None:
    """Events up to the allowed lateness late, after the state was stored: one older than its
    broker's last update is stale either way, one newer than an update the stored state forgot
    is applied either way. The state read back gives the rows of the state kept in memory."""
    first = [send("b1", 100_000, "b"), send("c1", 190_000, "c"), send("d1", 200_000, "d")]
    late = [
        send("b2", 150_000, "b", "REMOTING_EXCEPTION"),  # after b's update the state forgot
        send("c2", 170_000, "c", "REMOTING_EXCEPTION"),  # before c's update, 20 s before the clock
    ]
    stored = run(first).state
    assert stored.seen.horizon == T0 + 140_000
    kept = run(late, state=copy.deepcopy(stored))
    read = run(late, state=engine.loads(engine.dumps(stored)))
    assert read.stats == kept.stats and kept.stats["stale"] > 0
    assert read.tables.keys() == kept.tables.keys()
    for name, rows in kept.tables.items():
        assert read.tables[name].equals(rows), name
    isolated = {b for _, b, d, _, _ in decisions(kept) if d == "ISOLATE"}
    assert isolated == {"b"}


def test_an_update_time_older_than_any_event_admitted_is_forgotten() -> None:
    """A FaultItem's update time only tells a later update that is older from a newer one. Once
    it is before the oldest event still admitted (the clock less the allowed lateness), the
    stored state keeps it no more: it reads back as older than any event, its isolation's end
    and cause unchanged. A late event within the lateness still meets the times it must."""
    lateness = 640_000  # quick's FaultItems were last updated 630 to 660 s before its clock
    config = engine.EngineConfig(allowed_lateness_ms=lateness)
    first = engine.advance("c", None, frame(ROWS), config).state
    clock = first.clock
    assert clock is not None and first.seen.horizon == clock - lateness
    state = engine.loads(engine.dumps(first))
    for scope, tables in first.tables.items():
        for key, table in tables.items():
            for was, now in zip(table.items, state.tables[scope][key].items, strict=True):
                forgotten = was.updated_at < clock - lateness
                assert now.updated_at == (NO_ITEM if forgotten else was.updated_at)
                assert (now.broker, now.latency, now.start, now.pending) == (
                    was.broker, was.latency, was.start, was.pending
                )  # fmt: skip
                assert now.cause == (was.cause if was.start > was.updated_at else "")
    items = [it for tables in state.tables.values() for t in tables.values() for it in t.items]
    assert any(it.updated_at == NO_ITEM for it in items)
    assert any(it.updated_at != NO_ITEM for it in items)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", 'd"', "é"]),
            st.integers(0, 3),
            st.sampled_from([2, 4, 6]),
        ),
        min_size=1,
        max_size=5,
        unique_by=lambda e: e[0],
    ),
    st.data(),
)
def test_a_routing_tables_digest_is_that_of_its_json(route: list[Any], data: Any) -> None:
    """Routing-table digests in the state are ``digest([selectable, isolated])``: the layout made
    once per route writes the same JSON text (and hashes its start once per set of isolated
    brokers), so checkpoints stay comparable."""
    brokers = [b for b, _, _ in route]
    layout = Layout(tuple(route))
    for until in (7, 8, 7):  # the same brokers again, and other ones: nothing cached leaks
        drawn = data.draw(st.lists(st.sampled_from(brokers), unique=True))
        isolated = tuple((b, until) for b in sorted(drawn, key=brokers.index))
        selectable = [
            [b, q] for b, w, perm in route if perm & 2 and b not in dict(isolated) for q in range(w)
        ]
        made = layout.digest(isolated)
        assert made == engine_state.digest([selectable, [list(x) for x in isolated]])
        picked = layout.selectable(isolated)
        queues = picked.items.take(picked.at).to_pylist()
        assert [[q["broker_name"], q["queue_id"]] for q in queues] == selectable


@pytest.mark.parametrize(
    "out", [(), ("a",), ("b",), ("d",), ("a", "b"), ("b", "d"), ("a", "c", "d"), ("a", "b", "d")]
)
def test_a_routing_tables_digest_leaves_out_the_isolated_brokers_queues(out: tuple[str]) -> None:
    """The digest's text is fed around the isolated brokers' queues, wherever they stand: first,
    last, side by side or apart (c has no write permission: its queues were never in it)."""
    route = (("a", 2, 6), ("b", 1, 6), ("c", 3, 4), ("d", 2, 6))
    isolated = tuple((b, 9) for b in out)
    selectable = [[b, q] for b, w, perm in route if perm & 2 and b not in out for q in range(w)]
    assert Layout(route).digest(isolated) == engine_state.digest(
        [selectable, [list(x) for x in isolated]]
    )


def test_a_version_4_checkpoint_resumes_as_if_this_version_had_written_it() -> None:
    """``quick-900-v4.json`` is the JSON state faultline wrote (state version 4, with its lists
    read by position) after the quick scenario's first 900 events with every policy on. Read
    now, it becomes the typed state, and the rest of the scenario gives exactly the rows a run
    from the start gives."""
    config = engine.EngineConfig(
        policies=engine.Policies(isolation_cap=0.5, outlier_factor=3.0, probe_share=0.1)
    )
    rows = [{**e, "cluster": "c"} for e in simulate(load_scenario("quick"))]
    text = (DATA / "quick-900-v4.json").read_text()
    old = json.loads(text)
    converted = engine.loads(text)
    ours = engine.advance("c", None, frame(rows[:900]), config).state
    assert old["v"] == 4 and engine.STATE_VERSION == 7
    # each part by name, as version 4 kept it by position
    assert converted.policies.outlier["broker-b"].until == old["policies"]["outlier"]["broker-b"][0]
    assert converted.policies.shown["broker-b"].state == "ISOLATED"
    assert len(converted.seen) == sum(map(len, old["seen"].values())) == len(ours.seen)
    assert converted.transactions == ours.transactions and len(converted.transactions) == 4
    assert converted.schedule == ours.schedule
    assert converted.tables == ours.tables
    assert _publishing(engine.loads(engine.dumps(ours)), converted).producers == converted.producers
    rest = frame(rows[900:])
    resumed = _publishing(engine.loads(engine.dumps(ours)), converted)
    after_v4 = engine.advance("c", converted, rest, config)
    after_v5 = engine.advance("c", resumed, rest, config)
    # version 4 recorded no route: the routes in force are recorded at the first event after
    assert {r["topic"] for r in after_v4.tables.pop("routes").to_pylist()} == set(ours.recorded)
    assert after_v4.state.recorded == after_v5.state.recorded
    assert after_v4.tables.keys() == after_v5.tables.keys()
    for name, got in after_v5.tables.items():
        assert after_v4.tables[name].equals(got), name
    assert after_v4.stats == after_v5.stats
