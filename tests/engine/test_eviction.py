"""Producer instances that went silent are forgotten, at a time that depends only on the events."""

from __future__ import annotations

import itertools
import json
from dataclasses import fields
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.engine.conftest import T0, beat, decisions, route, run, send, table
from udfs import engine

MINUTE = 60_000
HORIZON = 30 * MINUTE
CONFIG = engine.EngineConfig(evict_after_ms=HORIZON)


def _gone(eid: str, t: int, broker: str, outcome: str = "SEND_OK", **kw: Any) -> dict[str, Any]:
    return send(eid, t, broker, outcome, producer_id="p-gone", **kw)


def _stays(eid: str, t: int) -> dict[str, Any]:
    return send(eid, t, "b", producer_id="p-stays")


def _events() -> list[dict[str, Any]]:
    """Brokers a and b; ``p-stays`` sends every 5 min for two hours. ``p-gone`` fails on a at
    +10 s (10 min in its own table), sends its last at +60 s, is silent for 90 min and comes
    back at +91 min, failing on a again with attempts left (a routing decision)."""
    rows = [route("r", 0, "a", "b")]
    rows += [beat(f"h{t}", t, b) for t in range(0, 120 * MINUTE, 30_000) for b in "ab"]
    rows += [_stays(f"s{t}", t) for t in range(5_000, 120 * MINUTE, 5 * MINUTE)]
    rows += [
        _gone("g1", 10_000, "a", "REMOTING_EXCEPTION"),
        _gone("g2", 30_000, "b"),
        _gone("g3", 60_000, "b"),
        _gone("back1", 91 * MINUTE, "a", "REMOTING_EXCEPTION"),
        _gone("back2", 91 * MINUTE + 5, "b", attempt=1),
    ]
    return sorted(rows, key=lambda r: (r["event_time"], r["event_id"]))


EVENTS = _events()
EVICTED_AT = T0 + 60_000 + HORIZON


def _in_batches(cuts: list[int]) -> tuple[dict[str, list[str]], list[dict[str, Any]]]:
    state: engine.State | None = None
    rows: dict[str, list[str]] = {}
    states = []
    for begin, end in itertools.pairwise([0, *sorted(set(cuts)), len(EVENTS)]):
        if begin == end:
            continue
        step = run(EVENTS[begin:end], CONFIG, state)
        state = engine.loads(engine.dumps(step.state))
        states.append(state)
        for name, t in step.tables.items():
            rows.setdefault(name, []).extend(
                json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist()
            )
    return {k: sorted(v) for k, v in rows.items()}, states


WHOLE, _ = _in_batches([])


def test_a_silent_producer_is_evicted_once_with_a_decision_row() -> None:
    step = run(EVENTS, CONFIG)
    evicted = [d for d in decisions(step) if d[2] == "EVICTED"]
    assert evicted == [("p-gone", None, "EVICTED", EVICTED_AT - T0, EVICTED_AT - T0)]
    row = table(step, "broker_decisions").query("decision == 'EVICTED'").iloc[0]
    assert row["scope"] == "producer" and row["cause_event_id"] == "g3"
    assert row["reason"] == f"no send result for {HORIZON} ms: the producer's state is forgotten"
    # its own isolation of a ended (10 min) before it was forgotten
    restores = [d for d in decisions(step, "producer") if d[:3] == ("p-gone", "a", "RESTORE")]
    assert restores[0][3] == 10_000 + 600_000 < EVICTED_AT - T0


def test_nothing_of_an_evicted_producer_stays_in_the_state() -> None:
    before_return = [e for e in EVENTS if e["event_time"] < T0 + 91 * MINUTE]
    state = run(before_return, CONFIG).state
    kept = repr({f.name: getattr(state, f.name) for f in fields(state) if f.name != "seen"})
    assert "p-gone" not in kept
    assert "p-stays" in state.producers and "p-stays" in state.tables["producer"]


def test_a_producer_that_comes_back_starts_afresh() -> None:
    """After its return, ``p-gone``'s own rows are those of a producer that never sent before."""
    fresh = [e for e in EVENTS if e["event_id"] not in ("g1", "g2", "g3")]
    again, new = run(EVENTS, CONFIG), run(fresh, CONFIG)

    def own(step: engine.Step, name: str) -> list[dict[str, Any]]:
        at = "decided_at" if name == "routing_decisions" else "effective_at"
        return [
            r
            for r in step.tables[name].to_pylist()
            if (r["scope"], r["scope_key"]) == ("producer", "p-gone") and r[at] > EVICTED_AT
        ]

    for name in ("broker_decisions", "routing_decisions", "routing_table"):
        assert own(again, name) == own(new, name), name
    assert own(again, "routing_decisions")  # the returning failure was routed


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(1, len(EVENTS) - 1), min_size=1, max_size=6))
def test_any_split_into_batches_gives_the_same_rows(cuts: list[int]) -> None:
    assert _in_batches(cuts)[0] == WHOLE


def test_a_split_at_the_eviction_deadline_gives_the_same_rows() -> None:
    at = next(i for i, e in enumerate(EVENTS) if e["event_time"] >= EVICTED_AT)
    for cut in (at - 1, at, at + 1):
        assert _in_batches([cut])[0] == WHOLE, cut


def test_the_state_stays_bounded_while_instances_come_and_go() -> None:
    """Every 2 minutes a new producer instance (a restarted process) replaces the last one. Over
    10 hours 300 instances send; the state holds only those of the last horizon."""
    rows = [route("r", 0, "a", "b")]
    for i in range(300):
        rows += [
            send(f"i{i}-{k}", i * 2 * MINUTE + k * 20_000, "ab"[k % 2], producer_id=f"inst-{i}")
            for k in range(5)
        ]
    state: engine.State | None = None
    sizes, evicted = [], 0
    for begin in range(0, len(rows), 100):
        step = run(rows[begin : begin + 100], CONFIG, state)
        state = step.state
        sizes.append((len(state.producers), len(state.tables["producer"])))
        evicted += sum(d[2] == "EVICTED" for d in decisions(step))
    assert max(sizes) <= (HORIZON // (2 * MINUTE) + 2,) * 2
    assert evicted == 300 - sizes[-1][0] > 250
