"""One vocabulary for a broker's state (``streaming.tools.states``): the rows of one instant
together, the policies' last; the route's state over the FaultItem's; an isolation extended is
one span."""

from __future__ import annotations

from typing import Any

from streaming.tools.states import BrokerState, spans, state_at, timeline


def _row(decision: str, at: int, until: int | None = None, broker: str = "b") -> dict[str, Any]:
    return {"scope": "cluster", "cluster": "C", "broker_name": broker, "decision": decision,
            "effective_at": at, "available_from": at if until is None else until,
            "reason": decision.lower()}  # fmt: skip


ROWS = [
    _row("ISOLATE", 1_000, 11_000),
    _row("PANIC", 1_000),  # the same instant: the cap has the last word
    _row("HOLD", 2_000, 11_000),
    _row("EXTEND", 3_000, 13_000),
    _row("ROUTE_EXPIRED", 4_000),
    _row("PROBE", 5_000, 9_000),  # a probation does not bring back a broker out of the route
    _row("ROUTE_RESTORED", 6_000),
    _row("RELEASE", 9_000),
    _row("OUTLIER", 20_000, 50_000),
    _row("ISOLATE", 500, 10_500, broker="a"),
]


def test_each_instant_is_read_whole_and_the_route_comes_first() -> None:
    moments = timeline(ROWS)
    words = [(m.broker, m.at, m.state, m.until) for m in moments]
    assert words == [
        ("a", 500, BrokerState.ISOLATED, 10_500),
        ("b", 1_000, BrokerState.PANIC_KEPT, None),
        ("b", 2_000, BrokerState.ISOLATED, 11_000),
        ("b", 3_000, BrokerState.ISOLATED, 13_000),
        ("b", 4_000, BrokerState.OUT_OF_ROUTE, None),
        ("b", 5_000, BrokerState.OUT_OF_ROUTE, None),
        ("b", 6_000, BrokerState.PROBING, 9_000),
        ("b", 9_000, BrokerState.AVAILABLE, None),
        ("b", 20_000, BrokerState.OUTLIER, 50_000),
    ]
    assert state_at(moments, "C", "b", 999) is None  # before anything: available
    now = state_at(moments, "C", "b", 3_500)
    assert now is not None and (now.state, now.until, now.row["reason"]) == (
        "isolated",
        13_000,
        "extend",
    )
    assert [m.state.takes_sends for m in moments] == [
        False, True, False, False, False, False, True, True, False,
    ]  # fmt: skip


def test_an_isolation_extended_is_one_span() -> None:
    got = [(s.broker, s.state, s.start, s.end) for s in spans(timeline(ROWS))]
    assert got == [
        ("a", BrokerState.ISOLATED, 500, None),
        ("b", BrokerState.PANIC_KEPT, 1_000, 2_000),
        ("b", BrokerState.ISOLATED, 2_000, 4_000),
        ("b", BrokerState.OUT_OF_ROUTE, 4_000, 6_000),
        ("b", BrokerState.PROBING, 6_000, 9_000),
        ("b", BrokerState.AVAILABLE, 9_000, 20_000),
        ("b", BrokerState.OUTLIER, 20_000, None),
    ]
