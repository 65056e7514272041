"""Invariants of the core, checked with hypothesis."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.rocketmq import (
    PROFILES,
    DelayLevels,
    FaultTable,
    MessageQueue,
    Rule,
    TopicPublishInfo,
    allocate_averagely,
    allocate_by_circle,
    select_queue,
)
from udfs.rocketmq._index import advance

profiles = st.sampled_from(list(PROFILES.values()))
brokers = st.sampled_from(["a", "b", "c", "d", "e"])
latencies = st.integers(-10_000, 100_000)
reports = st.lists(
    st.tuples(brokers, latencies, st.booleans(), st.integers(0, 5_000), st.booleans()),
    max_size=12,
)
routes = st.lists(
    st.tuples(brokers, st.integers(1, 4)), min_size=1, max_size=4, unique_by=lambda t: t[0]
)


def _apply(table: FaultTable, steps: list[tuple[str, int, bool, int, bool]]) -> int:
    now = 0
    for broker, latency, isolation, gap, reachable in steps:
        now += gap
        table.report(broker, latency, isolation, now, reachable)
    return now


@given(reports)
def test_5_isolation_never_shortens(steps: list[tuple[str, int, bool, int, bool]]) -> None:
    table = FaultTable(PROFILES["rocketmq-5"])
    ends: dict[str, int] = {}
    now = 0
    for broker, latency, isolation, gap, reachable in steps:
        now += gap
        item = table.report(broker, latency, isolation, now, reachable)
        assert item is not None
        assert item.start_timestamp >= ends.get(broker, 0)
        ends[broker] = item.start_timestamp


@settings(max_examples=300)
@given(
    profiles,
    routes,
    reports,
    st.one_of(st.none(), brokers),
    st.booleans(),
    st.integers(0, 2**31 - 1_000),
    st.integers(0, 2**31 - 1_000),
    st.integers(0, 10_000),
    st.booleans(),
)
def test_selection_returns_a_route_queue_unless_4x_rewrote_one(
    profile, route, steps, last, enable, index, worst, later, reset
) -> None:  # type: ignore[no-untyped-def]
    info = TopicPublishInfo.from_route(
        [(b, n, 6) for b, n in route], index=index, rng=random.Random(index)
    )
    table = FaultTable(profile, worst_index=worst, rng=random.Random(worst))
    now = _apply(table, steps) + later
    before = list(info.queues)
    sel = select_queue(profile, info, table, last, now, enable, reset_index=reset)
    if sel.rewritten is not None:
        assert profile.line != "5" and sel.rule is Rule.PICK_ONE_AT_LEAST
        assert info.queues[sel.rewritten] is sel.queue
        assert all(a is b for i, (a, b) in enumerate(zip(before, info.queues, strict=True))
                   if i != sel.rewritten)  # fmt: skip
    else:
        assert sel.queue in before and info.queues == before
    # no profile picks an unavailable broker while an available one that is not the last broker
    # exists, with the switch on -- except 4.7.1 after a failure (the equals quirk). Indexes stay
    # clear of the int overflow, where ``udfs.rocketmq._index`` says positions are skipped.
    healthy_other = any(
        table.is_available(q.broker_name, now) and q.broker_name != last for q in before
    )
    if enable and healthy_other and not (profile.line == "4.7" and last is not None):
        assert table.is_available(sel.queue.broker_name, now)
    if enable and healthy_other and profile.line == "5":
        assert sel.queue.broker_name != last


@given(st.sampled_from(["4.7", "4.9", "5"]), st.integers(-(2**31), 2**31 - 1))
def test_index_values_are_never_negative(line: str, state: int) -> None:
    for _ in range(3):
        state, value = advance(line, state, None)  # type: ignore[arg-type]
        assert 0 <= value <= 2**31 - 1


@given(
    st.integers(1, 40),
    st.integers(1, 12),
    st.sampled_from([allocate_averagely, allocate_by_circle]),
)
def test_allocation_partitions_the_queues(n: int, m: int, strategy) -> None:  # type: ignore[no-untyped-def]
    queues = [MessageQueue("b", i, "t") for i in range(n)]
    cids = [f"c{i}" for i in range(m)]
    parts = [strategy(c, queues, cids) for c in cids]
    flat = [q for part in parts for q in part]
    assert sorted(flat, key=MessageQueue.sort_key) == queues
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


delays = st.lists(
    st.tuples(st.integers(0, 10_000), st.sampled_from("smhd")), min_size=1, max_size=20
)


@given(delays, st.integers(0, 2**41))
def test_parsed_levels_round_trip_and_deliver_exactly(levels, store: int) -> None:  # type: ignore[no-untyped-def]
    spec = " ".join(f"{n}{u}" for n, u in levels)
    parsed = DelayLevels.parse(spec)
    unit = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    assert parsed.max_level == len(levels)
    for level, (n, u) in enumerate(levels, start=1):
        assert parsed.delay_ms(level) == n * unit[u]
        assert parsed.deliver_at(level, store) - store == n * unit[u]
