"""What :func:`udfs.engine.gauges` says is held out now is what a reader of every
``broker_decisions`` row so far holds, after every batch, with and without the policies, on one
shard or two."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from streaming.client import publish_order
from streaming.config import JobConfig, engine_config
from tests.engine.conftest import frame
from tests.engine.test_shards import DEFAULT_SCENARIO
from udfs import engine
from udfs.engine import CLUSTER, PRODUCER, Shard
from udfs.vocabulary import Decision

LABEL = {
    Decision.ISOLATE: Decision.ISOLATE,
    Decision.EXTEND: Decision.ISOLATE,
    Decision.SHORTEN: Decision.ISOLATE,
    Decision.HOLD: Decision.ISOLATE,
    Decision.OUTLIER: Decision.OUTLIER,
    Decision.PANIC: Decision.PANIC,
    Decision.PROBE: Decision.PROBE,
}
"""A decision row -> the label of what it holds the broker by (others hold it by nothing)."""


def read(rows: list[dict[str, Any]]) -> tuple[dict[str, str], int]:
    """The cluster scope's brokers held out and the producer scope's (producer, broker) pairs,
    as a reader of ``rows`` in the decision topic's order holds them."""
    latest: dict[tuple[str, str, str], str] = {}
    for r in sorted(rows, key=publish_order):  # stable: a batch's rows keep their order
        if r["decision"] == Decision.EVICTED:  # the producer's table leaves with it
            latest = {k: d for k, d in latest.items() if k[:2] != (PRODUCER, r["scope_key"])}
        elif r["decision"] not in (
            Decision.QUEUE_SWAP,
            Decision.ROUTE_EXPIRED,
            Decision.ROUTE_RESTORED,
        ):
            latest[r["scope"], r["scope_key"], r["broker_name"]] = r["decision"]
    brokers = {
        b: LABEL[d] for (scope, _, b), d in latest.items() if scope == CLUSTER and d in LABEL
    }
    pairs = sum(1 for (scope, _, _), d in latest.items() if scope == PRODUCER and d in LABEL)
    return dict(sorted(brokers.items())), pairs


def summed(parts: list[dict[str, Any]]) -> tuple[dict[str, str], int, dict[str, list[int]]]:
    brokers: dict[str, str] = {}
    pairs = 0
    for part in parts:
        brokers.update(part.get("brokers", {}))
        pairs += sum(n for scope, _, n in part["held"] if scope == PRODUCER)
        held = {d: n for scope, d, n in part["held"] if scope == CLUSTER}
        mine = list(part.get("brokers", {}).values())
        assert held == {d: mine.count(d) for d in set(mine)}
    return brokers, pairs, parts[0]["topics"]


@pytest.mark.parametrize("shards", [1, 2])
@pytest.mark.parametrize("policies", [True, False], ids=["policies", "rocketmq-only"])
def test_what_is_held_out_now_is_what_the_rows_so_far_say(shards: int, policies: bool) -> None:
    config = engine_config(JobConfig(policies={"enabled": policies}))
    states: list[Any] = [None] * shards
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    held_pairs = 0
    for begin in range(0, len(DEFAULT_SCENARIO), 1500):
        events = frame(DEFAULT_SCENARIO[begin : begin + 1500])
        parts = []
        for i in range(shards):
            step = engine.advance("c", states[i], events, config, Shard(i, shards))
            states[i] = step.state
            if "broker_decisions" in step.tables:
                rows += step.tables["broker_decisions"].to_pylist()
            parts.append(engine.gauges("c", step.state, config, Shard(i, shards)))
        brokers, pairs, topics = summed(parts)
        assert (brokers, pairs) == read(rows), f"after event {begin + 1500}"
        seen.update(brokers.values())
        held_pairs = max(held_pairs, pairs)
        writable, sick = topics["orders"]
        assert sick == sum(1 for d in brokers.values() if d != Decision.PROBE)
        assert writable in (5, 6)  # broker-f leaves the route while it stops heartbeating
    # the scenario isolates through each rule the profile has, in both scopes
    assert seen >= ({"ISOLATE", "OUTLIER", "PROBE"} if policies else {"ISOLATE"})
    assert held_pairs > 0


def test_what_waits_is_what_the_rows_so_far_leave_waiting() -> None:
    """The delay queues: messages scheduled at a level less those released from it (into the
    DLQ or not); the half messages: transactions whose latest row waits for a check."""
    config = engine_config(JobConfig())
    state = None
    rows: dict[str, list[dict[str, Any]]] = {"schedule_entries": [], "redeliveries": []}
    latest: dict[str, Any] = {}
    seen = [0, 0]
    for begin in range(0, len(DEFAULT_SCENARIO), 4000):
        step = engine.advance("c", state, frame(DEFAULT_SCENARIO[begin : begin + 4000]), config)
        state = step.state
        for name in rows:
            rows[name] += step.tables[name].to_pylist() if name in step.tables else []
        if "transactions" in step.tables:
            for r in step.tables["transactions"].to_pylist():
                latest[r["transaction_id"]] = r["next_check_at"]
        now = engine.gauges("c", state, config, engine.WHOLE)
        levels = Counter(r["delay_level"] for r in rows["schedule_entries"])
        levels.subtract(r["delay_level"] for r in rows["redeliveries"] if r["delay_level"])
        assert now["delayed"] == {str(k): n for k, n in sorted(levels.items()) if n}
        assert now["halves"] == sum(1 for t in latest.values() if t is not None)
        seen = [max(seen[0], sum(levels.values())), max(seen[1], now["halves"])]
    assert min(seen) > 0
