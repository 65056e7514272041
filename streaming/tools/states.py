"""One vocabulary for what a broker is at an instant, in the cluster scope, as a producer that
reads every decision in order holds it: ``isolated`` (RocketMQ's rule, or the isolation cap's
``HOLD``), ``outlier`` (the latency outlier policy), ``panic-kept`` (an isolation the cap keeps in
the route), ``probing`` (recovery probing: a share of the sends), ``out of route`` (the
NameServer dropped it) or ``available``. The run summary, ``faultline explain`` and
``faultline status`` all say it with these words."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from itertools import groupby
from typing import Any

from streaming.client import ROUTE_DECISIONS, publish_order
from udfs.vocabulary import Decision


class BrokerState(StrEnum):
    ISOLATED = "isolated"
    OUTLIER = "outlier"
    PANIC_KEPT = "panic-kept"
    PROBING = "probing"
    OUT_OF_ROUTE = "out of route"
    AVAILABLE = "available"

    @property
    def takes_sends(self) -> bool:
        """Whether the broker takes sends (on probation, a share of them)."""
        return self in (BrokerState.PANIC_KEPT, BrokerState.PROBING, BrokerState.AVAILABLE)


WORDS: dict[str, BrokerState] = {
    Decision.ISOLATE: BrokerState.ISOLATED,
    Decision.EXTEND: BrokerState.ISOLATED,
    Decision.SHORTEN: BrokerState.ISOLATED,
    Decision.HOLD: BrokerState.ISOLATED,
    Decision.OUTLIER: BrokerState.OUTLIER,
    Decision.PANIC: BrokerState.PANIC_KEPT,
    Decision.PROBE: BrokerState.PROBING,
    Decision.RESTORE: BrokerState.AVAILABLE,
    Decision.RELEASE: BrokerState.AVAILABLE,
}
"""The FaultItem's decisions (RocketMQ's and the policies'), each as the word for the state it
leaves the broker in; the route's own two are ``out of route`` and back."""


@dataclass(frozen=True)
class Said:
    """A broker's state after the decisions of one instant."""

    cluster: str
    broker: str
    at: int
    state: BrokerState
    row: dict[str, Any]
    """The decision that leaves it in that state (the last of the instant that counts)."""

    @property
    def until(self) -> int | None:
        """Until when it holds, when the state has an end (isolated, outlier, probing)."""
        timed = self.state in (BrokerState.ISOLATED, BrokerState.OUTLIER, BrokerState.PROBING)
        return int(self.row["available_from"]) if timed else None


def timeline(decisions: Iterable[dict[str, Any]]) -> list[Said]:
    """The cluster scope's ``broker_decisions`` rows, per (cluster, broker) and instant, as the
    state after every row of that instant in the decision topic's order (the policies' last):
    out of the route whatever the FaultItem says, else the FaultItem's word."""
    out: list[Said] = []
    rows = sorted(
        (r for r in decisions if r["scope"] == "cluster" and r["broker_name"]),
        key=lambda r: (r["cluster"], r["broker_name"], *publish_order(r)),
    )
    for (cluster, broker), mine in groupby(rows, key=lambda r: (r["cluster"], r["broker_name"])):
        fault: tuple[BrokerState, dict[str, Any] | None] = (BrokerState.AVAILABLE, None)
        route: dict[str, Any] | None = None
        for at, now in groupby(mine, key=lambda r: int(r["effective_at"])):
            for r in now:
                if r["decision"] in ROUTE_DECISIONS:
                    route = r
                elif r["decision"] in WORDS:
                    fault = (WORDS[r["decision"]], r)
            if route is not None and route["decision"] == Decision.ROUTE_EXPIRED:
                out.append(Said(cluster, broker, at, BrokerState.OUT_OF_ROUTE, route))
            else:
                state, row = fault
                out.append(Said(cluster, broker, at, state, row or route or {}))
    return out


def state_at(moments: list[Said], cluster: str, broker: str, at: int) -> Said | None:
    """What holds for ``broker`` at ``at`` (None before its first decision: available)."""
    mine = [s for s in moments if (s.cluster, s.broker) == (cluster, broker) and s.at <= at]
    return mine[-1] if mine else None


@dataclass(frozen=True)
class Span:
    """A run of one state: an isolation extended many times is one span."""

    cluster: str
    broker: str
    state: BrokerState
    start: int
    end: int | None
    """When another state began; None: it still holds at the tables' end."""


def spans(moments: list[Said]) -> list[Span]:
    """:func:`timeline` as runs of one state per (cluster, broker), in time order."""
    out: list[Span] = []
    for (cluster, broker), mine in groupby(moments, key=lambda s: (s.cluster, s.broker)):
        current: Span | None = None
        for s in mine:
            if current is not None and current.state == s.state:
                continue
            if current is not None:
                out.append(Span(cluster, broker, current.state, current.start, s.at))
            current = Span(cluster, broker, s.state, s.at, None)
        if current is not None:
            out.append(current)
    return out
