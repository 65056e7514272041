"""``udfs.rocketmq._route``: TopicPublishInfo helpers and MQFaultStrategy.selectOneMessageQueue."""

from __future__ import annotations

import random

import pytest

from tests.core.conftest import P5, P47, P49
from udfs.rocketmq import (
    EmptyRouteError,
    FaultTable,
    MessageQueue,
    Profile,
    Rule,
    TopicPublishInfo,
    select_queue,
)

MAX = 2**31 - 1


def _info(brokers: str, index: int | None = 0, **kwargs: object) -> TopicPublishInfo:
    """``"aabb"`` -> queues a0 a1 b0 b1, write queue nums from the counts."""
    counts: dict[str, int] = {}
    queues = []
    for b in brokers:
        queues.append(MessageQueue(b, counts.get(b, 0)))
        counts[b] = counts.get(b, 0) + 1
    return TopicPublishInfo(queues, counts, index, **kwargs)  # type: ignore[arg-type]


def _q(sel_or_queue) -> str:  # type: ignore[no-untyped-def]
    q = getattr(sel_or_queue, "queue", sel_or_queue)
    return f"{q.broker_name}{q.queue_id}"


def _isolated(p: Profile, *brokers: str, until: int = 60_000, **kwargs: object) -> FaultTable:
    t = FaultTable(p, **kwargs)  # type: ignore[arg-type]
    for b in brokers:
        t.update(b, 100, until, now_ms=0)
    return t


# --- switch off -------------------------------------------------------------------------------


def test_no_last_broker_is_a_plain_pick(profile: Profile) -> None:
    info = _info("aabb", index=0)
    sel = select_queue(profile, info, FaultTable(profile), None, 0, False)
    assert (_q(sel), sel.rule, info.index) == ("a1", Rule.PLAIN, 1)


@pytest.mark.parametrize(("p", "index_after"), [(P47, 1), (P49, 2), (P5, 2)])
def test_switch_off_walk_moves_the_index_once_in_4_7_and_per_probe_later(
    p: Profile, index_after: int
) -> None:
    info = _info("aabb", index=0)
    sel = select_queue(p, info, FaultTable(p), "a", 0, False)
    assert (_q(sel), sel.rule) == ("b0", Rule.NOT_LAST_BROKER)
    assert info.index == index_after


@pytest.mark.parametrize(("p", "expected", "index_after"), [(P47, "x0", 0), (P49, "y0", 2)])
def test_4_7_local_overflow_skips_a_position(p: Profile, expected: str, index_after: int) -> None:
    # queues x0 x1 y0, last broker x, first value MAX: 4.7.1 probes positions 1, 0, 1 and never
    # sees y0, then its fallback pick lands on x0. 4.9.7 advances per probe (1, 0, 1 as well, as
    # MAX wraps to 0) and its fallback lands on position 2.
    info = _info("xxy", index=MAX - 1)
    sel = select_queue(p, info, FaultTable(p), "x", 0, False)
    assert (_q(sel), sel.rule, info.index & 0x7FFFFFFF) == (
        expected,
        Rule.FALLBACK_PLAIN,
        index_after,
    )


def test_all_queues_on_the_last_broker_falls_back(profile: Profile) -> None:
    info = _info("aa", index=0)
    sel = select_queue(profile, info, FaultTable(profile), "a", 0, False)
    assert sel.rule is Rule.FALLBACK_PLAIN and sel.queue.broker_name == "a"


# --- switch on: 4.x ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "expected", "rule"),
    [
        (P47, "a0", Rule.AVAILABLE_LAST_BROKER),  # the equals quirk: only the failed broker
        (P49, "a0", Rule.AVAILABLE),  # last broker ignored: the first available queue
        (P5, "b0", Rule.AVAILABLE_NOT_LAST),
    ],
)
def test_after_a_failure_with_everything_available(p: Profile, expected: str, rule: Rule) -> None:
    info = _info("ab", index=1)  # next value 2 -> position 0 (a0) first
    sel = select_queue(p, info, FaultTable(p), "a", 0, True)
    assert (_q(sel), sel.rule) == (expected, rule)


def test_4_7_equals_quirk_rejects_a_healthy_other_broker() -> None:
    # a just failed and is isolated; b is healthy. 4.7.1 accepts only a, which is unavailable,
    # so pickOneAtLeast (only a in the table) rewrites a shared queue of the route to a.
    info = _info("ab", index=1)
    table = _isolated(P47, "a")
    sel = select_queue(P47, info, table, "a", 1000, True)
    assert sel.rule is Rule.PICK_ONE_AT_LEAST and sel.rewritten == 1
    assert sel.queue == MessageQueue("a", 0)
    # value 2 was the walk (positions 0, 1), value 3 the plain pick (position 1, b0, rewritten),
    # value 4 the queue id (4 % 1)
    assert info.index == 4
    assert info.queues == [MessageQueue("a", 0), MessageQueue("a", 0)]  # b0 is gone


@pytest.mark.parametrize(("p", "rule"), [(P49, Rule.AVAILABLE), (P5, Rule.AVAILABLE_NOT_LAST)])
def test_later_profiles_take_the_healthy_broker(p: Profile, rule: Rule) -> None:
    info = _info("ab", index=0)
    sel = select_queue(p, info, _isolated(p, "a"), "a", 1000, True)
    assert (_q(sel), sel.rule) == ("b0", rule)
    assert info.queues == [MessageQueue("a", 0), MessageQueue("b", 0)]


def test_4_9_rewrites_a_queue_when_every_broker_is_isolated() -> None:
    info = _info("aabb", index=0)
    table = FaultTable(P49, worst_index=0)
    table.update("a", 300, 60_000, 0)
    table.update("b", 100, 60_000, 0)
    sel = select_queue(P49, info, table, None, 1000, True)
    # walk: values 1.. positions 1,2,3,0 all unavailable; pickOneAtLeast: sorted b, a; half 1 -> b
    # plain pick: value 2 -> position 2; queue id: value 3 % 2 = 1
    assert sel.rule is Rule.PICK_ONE_AT_LEAST
    assert sel.queue == MessageQueue("b", 1)
    assert info.queues[2] == MessageQueue("b", 1)
    assert info.index == 3 and table.worst_index == 1


def test_4x_removal_of_a_broker_outside_the_route() -> None:
    for p in (P47, P49):
        info = _info("ab", index=0)
        table = FaultTable(p, worst_index=0, rng=random.Random(0))
        table.update("a", 500, 60_000, 0)
        table.update("b", 500, 60_000, 0)
        table.update("gone", 1, 60_000, 0)
        # three items: half 1, always the best: "gone" (lowest latency), unknown to the route
        sel = select_queue(p, info, table, None, 1000, True)
        assert sel.rule is Rule.REMOVED_THEN_PLAIN and sel.removed == "gone"
        assert table.get("gone") is None and table.get("a") is not None
        assert sel.queue in info.queues


def test_5_never_removes_or_rewrites() -> None:
    info = _info("ab", index=0)
    table = FaultTable(P5)
    for b in ("a", "b", "gone"):
        table.update(b, 500, 60_000, 0, reachable=False)
    sel = select_queue(P5, info, table, None, 1000, True)
    assert sel.rule is Rule.FALLBACK_PLAIN and sel.rewritten is None and sel.removed is None
    assert len(table) == 3 and info.queues == [MessageQueue("a", 0), MessageQueue("b", 0)]


def test_4x_swallows_missing_route_data_and_falls_back() -> None:
    for p in (P47, P49):
        info = TopicPublishInfo([MessageQueue("a", 0)], None, index=0)
        sel = select_queue(p, info, _isolated(p, "a", worst_index=0), None, 1000, True)
        assert sel.rule is Rule.EXCEPTION_THEN_PLAIN
        assert sel.swallowed is not None and "topicRouteData" in sel.swallowed
        assert _q(sel) == "a0"


def test_4_7_last_broker_outside_the_route_swallows_remove_null() -> None:
    # Everything is available but nothing equals the last broker "z", and the table is empty:
    # pickOneAtLeast gives null, remove(null) throws NPE, which is logged; then a plain pick.
    info = _info("ab", index=0)
    sel = select_queue(P47, info, FaultTable(P47), "z", 0, True)
    assert sel.rule is Rule.EXCEPTION_THEN_PLAIN
    assert "remove(null)" in (sel.swallowed or "")
    assert select_queue(P49, _info("ab", index=0), FaultTable(P49), "z", 0, True).rule is (
        Rule.AVAILABLE
    )


# --- switch on: 5.x ---------------------------------------------------------------------------


def test_5_reachable_pass_after_the_available_pass() -> None:
    info = _info("abc", index=0)
    table = FaultTable(P5)
    table.report("a", 10, True, 0, reachable=True)  # isolated, reachable
    table.report("b", 10, True, 0, reachable=False)  # isolated, unreachable
    sel = select_queue(P5, info, table, "c", 1000, True)
    assert (_q(sel), sel.rule) == ("a0", Rule.REACHABLE_NOT_LAST)


def test_5_only_broker_is_the_last_broker_costs_2n_plus_1_steps() -> None:
    for p, steps, rule in [
        (P5, 5, Rule.FALLBACK_PLAIN),
        (P49, 1, Rule.AVAILABLE),
        (P47, 1, Rule.AVAILABLE_LAST_BROKER),
    ]:
        info = _info("aa", index=0)
        sel = select_queue(p, info, FaultTable(p), "a", 0, True)
        assert (sel.queue.broker_name, sel.rule, info.index) == ("a", rule, steps), p.name


def test_5_reset_index_only_when_asked_and_switch_on() -> None:
    def run(reset: bool, enable: bool) -> int | None:
        info = _info("aabb", index=0, rng=random.Random(42))
        select_queue(P5, info, FaultTable(P5), None, 0, enable, reset_index=reset)
        return info.index

    expected_reset = random.Random(42).randrange(2**31 - 1) + 1
    assert run(True, True) == expected_reset
    assert run(False, True) == 1
    assert run(True, False) == 1


@pytest.mark.parametrize("profile", [P47, P49], ids=lambda p: p.name)
def test_4x_ignores_reset_index(profile: Profile) -> None:
    info = _info("aabb", index=0, rng=random.Random(42))
    select_queue(profile, info, FaultTable(profile), None, 0, True, reset_index=True)
    assert info.index == 1


# --- empty routes and from_route ---------------------------------------------------------------


@pytest.mark.parametrize("enable", [False, True])
@pytest.mark.parametrize("last", [None, "a"])
def test_empty_queue_list_throws_in_every_profile(profile: Profile, enable: bool, last) -> None:  # type: ignore[no-untyped-def]
    info = TopicPublishInfo([], {}, index=0, rng=random.Random(1))
    table = FaultTable(profile, worst_index=0, rng=random.Random(1))
    table.update("a", 10, 60_000, 0)
    with pytest.raises(EmptyRouteError, match="/ by zero"):
        select_queue(profile, info, table, last, 0, enable)
    assert not info.ok()


def test_from_route_skips_unwritable_brokers_but_keeps_their_queue_numbers() -> None:
    info = TopicPublishInfo.from_route([("b", 2, 6), ("a", 1, 2), ("ro", 4, 4)], topic="t")
    assert [_q(q) for q in info.queues] == ["a0", "b0", "b1"]
    assert {q.topic for q in info.queues} == {"t"}
    assert info.write_queue_nums_of("ro") == 4
    assert info.write_queue_nums_of("unknown") == -1
