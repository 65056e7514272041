"""A cluster's work split over shards gives the rows of one shard doing everything, however the
events are batched."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.config import load_scenario
from streaming.sim.simulator import simulate
from tests.engine import test_eviction
from tests.engine.conftest import frame
from udfs import engine
from udfs.engine import CLUSTER, PRODUCER, Shard
from udfs.engine._shards import owner

QUICK = [{**e, "cluster": "c"} for e in simulate(load_scenario("quick"))]
DEFAULT_SCENARIO = [{**e, "cluster": "c"} for e in simulate(load_scenario("default"))]
EVICTION = test_eviction.EVENTS


def _sharded(
    rows: list[dict[str, Any]], count: int, cuts: list[int], config: engine.EngineConfig
) -> tuple[dict[str, list[str]], Counter[str], list[engine.State]]:
    """Every table's rows (as sorted JSON), the summed counters and each shard's last state."""
    states: list[Any] = [None] * count
    tables: dict[str, list[str]] = {}
    stats: Counter[str] = Counter()
    for begin, end in itertools.pairwise([0, *sorted(set(cuts)), len(rows)]):
        if begin == end:
            continue
        events = frame(rows[begin:end])
        for i in range(count):
            step = engine.advance("c", states[i], events, config, Shard(i, count))
            states[i] = engine.loads(engine.dumps(step.state))  # as Spark stores it
            stats.update(step.stats)
            for name, t in step.tables.items():
                tables.setdefault(name, []).extend(
                    json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist()
                )
    return {k: sorted(v) for k, v in tables.items()}, stats, states


DEFAULT = engine.EngineConfig()
WHOLE = _sharded(QUICK, 1, [], DEFAULT)
EVICTION_WHOLE = _sharded(EVICTION, 1, [], test_eviction.CONFIG)


def test_the_scenario_spreads_its_producers_over_the_shards() -> None:
    for rows in (QUICK, DEFAULT_SCENARIO):
        producers = {e["producer_id"] for e in rows if e["kind"] == "send_result"}
        assert {owner(p, 2) for p in producers} == {0, 1}
    assert {owner(p, 2) for p in ("p-gone", "p-stays")} == {0, 1}
    assert owner("p-gone", 3) != 0  # evicted by a shard that is not the lead


def test_every_table_and_counter_of_two_shards_is_that_of_one() -> None:
    """The default scenario: six producers, ASYNC and transactional sends, one without the
    latency fault switch, consumer send-backs, delay queues and half messages."""
    whole_rows, whole_stats, _ = _sharded(DEFAULT_SCENARIO, 1, [], DEFAULT)
    rows, stats, _ = _sharded(DEFAULT_SCENARIO, 2, [], DEFAULT)
    assert rows.keys() == whole_rows.keys()
    for name in rows:
        assert rows[name] == whole_rows[name], name
    assert stats == whole_stats


@settings(max_examples=6, deadline=None)
@given(
    st.sampled_from([2, 3]),
    st.lists(st.integers(1, len(QUICK) - 1), min_size=1, max_size=8),
)
def test_any_shard_count_and_split_into_batches_gives_the_same_rows(
    count: int, cuts: list[int]
) -> None:
    rows, stats, _ = _sharded(QUICK, count, cuts, DEFAULT)
    assert rows == WHOLE[0]
    assert stats == WHOLE[1]


@settings(max_examples=8, deadline=None)
@given(st.sampled_from([2, 3]), st.lists(st.integers(1, len(EVICTION) - 1), max_size=6))
def test_evictions_are_written_once_by_the_producers_shard(count: int, cuts: list[int]) -> None:
    rows, stats, _ = _sharded(EVICTION, count, cuts, test_eviction.CONFIG)
    assert rows == EVICTION_WHOLE[0]
    assert stats == EVICTION_WHOLE[1]


def test_each_shard_keeps_only_its_part_of_the_state() -> None:
    _, _, (lead, other) = _sharded(QUICK, 2, [], DEFAULT)
    assert lead.tables[CLUSTER] and not other.tables[CLUSTER]
    assert not other.schedule  # the delay queues are the lead's
    for i, state in enumerate((lead, other)):
        assert state.tables[PRODUCER]
        assert {owner(p, 2) for p in state.tables[PRODUCER]} == {i}
        assert state.clock == WHOLE[2][0].clock
    # the lead keeps every producer's publish info of the cluster scope
    assert lead.producers.keys() == WHOLE[2][0].producers.keys()
