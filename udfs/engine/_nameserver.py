"""The NameServer's view: heartbeats, its scans and the declared routes, in event-time order.

A broker whose last heartbeat is older than ``heartbeat_timeout_ms`` is dropped at the next scan
(on the ``scan_interval_ms`` grid) and comes back with its next heartbeat. A scan fires before
any event at its time. The stage returns the routes as they were after each change, so that the
routing decisions and the routing tables that follow can ask what the routes were at any
instant of the segment."""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from udfs._frames import equal, objects, tuples
from udfs.engine._config import CLUSTER, EngineConfig, Route
from udfs.engine._output import Out
from udfs.engine._segment import Segment
from udfs.engine._state import Heartbeat, State
from udfs.vocabulary import Decision, EventKind, TableName

Routes = dict[str, Route]
"""Each topic's effective route: its declared brokers without those the NameServer dropped."""


class RouteChange(NamedTuple):
    """The routes after a change: ``order`` 0 for a scan (before any event at its time), 1 for
    an event."""

    time: int
    order: int
    event_id: str
    routes: Routes


class TopicChange(NamedTuple):
    """A change of a topic's route (``order`` as :class:`RouteChange`'s)."""

    time: int
    order: int
    event_id: str
    topic: str


@dataclass
class RouteTimeline:
    """The routes at the segment's start and after each change, in the order they happened."""

    at_start: Routes
    history: list[RouteChange] = field(default_factory=list)
    topics: list[TopicChange] = field(default_factory=list)
    """Each topic whose route changed, at each change."""
    dropped_at_start: frozenset[str] = frozenset()
    """The brokers the NameServer had dropped (no heartbeat) at the segment's start."""
    drops: list[tuple[int, int, str, bool]] = field(default_factory=list)
    """Each broker the NameServer dropped (True, at a scan: ``order`` 0) or took back (False,
    at its heartbeat: 1), in order."""

    _keys: list[tuple[int, int, str]] | None = field(default=None, init=False, repr=False)
    _writable: dict[int, dict[str, frozenset[str]]] = field(
        default_factory=dict, init=False, repr=False
    )
    _writable_route: dict[int, tuple[Route, frozenset[str]]] = field(
        default_factory=dict, init=False, repr=False
    )
    _serving: dict[int, dict[str, tuple[str, ...]]] = field(
        default_factory=dict, init=False, repr=False
    )
    _room: dict[tuple[int, float], dict[str, int]] = field(
        default_factory=dict, init=False, repr=False
    )

    def at(self, time: int, event_id: str) -> Routes:
        """The routes an event at ``(time, event_id)`` sees: every change before it (the history
        is in that order: scans fire in time order, before the events at their time)."""
        return self._routes((time, 1, event_id), bisect.bisect_left)

    def dropped(self, broker: str, time: int) -> bool:
        """Whether the NameServer had dropped ``broker`` at ``time``, after its scan there and
        before its events: a broker without heartbeats, down or cut off."""
        down = broker in self.dropped_at_start
        for t, order, b, dropped in self.drops:
            if (t, order) > (time, 0):
                break
            if b == broker:
                down = dropped
        return down

    def after(self, key: tuple[int, int, str]) -> Routes:
        """The routes after every change up to ``key`` (time, order, event_id; "" for a scan),
        that one included."""
        return self._routes(key, bisect.bisect_right)

    def writable_after(self, key: tuple[int, int, str]) -> dict[str, frozenset[str]]:
        """Each topic's writable brokers (write permission and write queues) in the routes
        :meth:`after` ``key``, worked out once per routes: every routes object the timeline
        holds lives as long as it does, so its ``id`` names it."""
        routes = self.after(key)
        found = self._writable.get(id(routes))
        if found is None:
            found = self._writable[id(routes)] = {
                tp: self._writable_of(route) for tp, route in routes.items()
            }
        return found

    def _writable_of(self, route: Route) -> frozenset[str]:
        """A route's writable brokers, worked out once per route: a change of the routes makes
        a new route for the topics it changes alone (:func:`follow`)."""
        made = self._writable_route.get(id(route))
        if made is None:
            brokers = frozenset(b for b, w, perm in route if perm & 2 and w > 0)
            made = self._writable_route[id(route)] = (route, brokers)  # the route kept: its id
        return made[1]

    def serving_after(self, key: tuple[int, int, str]) -> dict[str, tuple[str, ...]]:
        """Each broker's topics of :meth:`writable_after` ``key``, in that mapping's order."""
        routes = self.after(key)
        found = self._serving.get(id(routes))
        if found is None:
            serving: dict[str, list[str]] = {}
            for tp, brokers in self.writable_after(key).items():
                for b in brokers:
                    serving.setdefault(b, []).append(tp)
            found = self._serving[id(routes)] = {b: tuple(tps) for b, tps in serving.items()}
        return found

    def room_after(self, key: tuple[int, int, str], cap: float) -> dict[str, int]:
        """Each topic's most brokers an isolation ``cap`` lets be isolated at once, of its
        :meth:`writable_after` ``key``."""
        routes = self.after(key)
        found = self._room.get((id(routes), cap))
        if found is None:
            found = {tp: int(cap * len(b)) for tp, b in self.writable_after(key).items()}
            self._room[id(routes), cap] = found
        return found

    def _routes(self, key: tuple[int, int, str], cut: Any) -> Routes:
        if self._keys is None or len(self._keys) != len(self.history):
            self._keys = [(c.time, c.order, c.event_id if c.order else "") for c in self.history]
        i = cut(self._keys, key)
        return self.history[i - 1].routes if i else self.at_start


def follow(seg: Segment) -> RouteTimeline:
    """Apply the segment's heartbeats and routes and the scans up to its clock to the state. The
    lead writes the ``ROUTE_EXPIRED`` and ``ROUTE_RESTORED`` rows; another shard follows
    silently."""
    out = seg.out if seg.shard.lead else None
    cluster, events = seg.cluster, seg.events
    view = _View(cluster, seg.state, seg.config, out)
    beating = equal(events["kind"], EventKind.HEARTBEAT)
    ticks = np.flatnonzero(beating | equal(events["kind"], EventKind.ROUTE))
    if out is not None:  # the NameServer's view at any instant, for incident review
        beats = ticks[beating[ticks]]
        out.add(
            TableName.HEARTBEATS,
            pd.DataFrame(
                {
                    "cluster": cluster,
                    "broker_name": objects(events["broker_name"])[beats],
                    "event_id": objects(events["event_id"])[beats],
                    "event_time": events["event_time"].to_numpy("int64")[beats],
                }
            ),
        )
    beats = np.flatnonzero(beating)
    ticks = np.setdiff1d(ticks, beats[view.quiet(events, beats, seg.clock_end)])
    row: Any
    columns = ("event_time", "event_id", "kind", "broker_name", "topic", "brokers_json")
    for row in tuples(events, columns, ticks):  # in (event_time, event_id) order
        view.scans_until(int(row.event_time))
        if row.kind == EventKind.HEARTBEAT:
            view.heartbeat(row)
        else:
            view.route(row)
    view.scans_until(seg.clock_end)
    return view.timeline


class _View:
    def __init__(self, cluster: str, state: State, config: EngineConfig, out: Out | None) -> None:
        self.cluster, self.state, self.config, self.out = cluster, state, config, out
        self._sorted: dict[str, tuple[Any, Route, frozenset[str]]] = {}
        """Per topic: its declared route (kept: its id is not reused), sorted and typed, and
        its brokers."""
        self.routes = self._effective({})
        expired = frozenset(b for b, hb in state.heartbeats.items() if hb.expired)
        self.timeline = RouteTimeline(self.routes, dropped_at_start=expired)
        self._next_scan = -(2**63)
        """No scan can drop a broker before this time (the first call finds out)."""

    def scans_until(self, now: int) -> None:
        """The scans up to ``now``, in time order."""
        if now < self._next_scan:
            return
        due = []
        self._next_scan = 2**63
        for broker, hb in self.state.heartbeats.items():
            if hb.expired:
                continue
            scan = self._scan_after(hb.last)
            if scan <= now:
                due.append((scan, broker))
            else:
                self._next_scan = min(self._next_scan, scan)
        timeout = self.config.heartbeat_timeout_ms
        for scan, broker in sorted(due):
            hb = self.state.heartbeats[broker]
            hb.expired = True
            self.timeline.drops.append((scan, 0, broker, True))
            self._decision(
                broker,
                Decision.ROUTE_EXPIRED,
                scan,
                hb.eid,
                f"no heartbeat for more than {timeout} ms at the NameServer scan",
            )
            self._changed(scan, 0, hb.eid, broker=broker)

    def quiet(self, events: pd.DataFrame, beats: np.ndarray, clock_end: int) -> np.ndarray:
        """Which of the heartbeats at the positions ``beats`` (in order) are of a quiet broker,
        applied here at once: a broker that no scan up to ``clock_end`` drops and that is not
        dropped already. Its heartbeats change only its last heartbeat, which is all that is
        kept, and no scan or route reads more of it. A broker is quiet when each of its
        heartbeats (the one the state holds first) comes before the scan the one before it would
        meet, and the clock's end before its last one's."""
        if not len(beats):
            return np.zeros(0, bool)
        times = events["event_time"].to_numpy("int64")[beats]
        codes, names = pd.factorize(objects(events["broker_name"])[beats])
        order = np.argsort(codes, kind="stable")  # each broker's heartbeats, in time order
        ordered, times = codes[order], times[order]
        ends = np.flatnonzero(np.append(ordered[1:] != ordered[:-1], True))  # each one's last
        following = np.append(times[1:], 0)  # the next heartbeat of the same broker
        following[ends] = clock_end
        late = np.bincount(ordered, self._scan_after(times) <= following, len(names)) > 0
        firsts = times[np.append(0, ends[:-1] + 1)].tolist()
        heartbeats, quiet = self.state.heartbeats, ~late
        for code, (name, first) in enumerate(zip(names, firsts, strict=True)):
            hb = heartbeats.get(name)
            if hb is not None and (hb.expired or self._scan_after(hb.last) <= first):
                quiet[code] = False
        ids = objects(events["event_id"])[beats][order]
        for code in np.flatnonzero(quiet).tolist():
            end = int(ends[code])
            heartbeats[names[code]] = Heartbeat(int(times[end]), False, ids[end])
        applied: np.ndarray = quiet[codes]
        return applied

    def _scan_after(self, heartbeat: Any) -> Any:
        """The scan that drops a broker whose last heartbeat was at ``heartbeat`` (a time, or
        an array of times)."""
        interval = self.config.scan_interval_ms
        return ((heartbeat + self.config.heartbeat_timeout_ms) // interval + 1) * interval

    def heartbeat(self, row: Any) -> None:
        hb = self.state.heartbeats.get(row.broker_name)
        at = int(row.event_time)
        self.state.heartbeats[row.broker_name] = Heartbeat(at, False, row.event_id)
        self._next_scan = min(self._next_scan, self._scan_after(at))
        if hb is not None and hb.expired:
            self.timeline.drops.append((at, 1, row.broker_name, False))
            self._decision(
                row.broker_name,
                Decision.ROUTE_RESTORED,
                at,
                row.event_id,
                "heartbeat received: the broker is back in the route",
            )
            self._changed(at, 1, row.event_id, broker=row.broker_name)

    def route(self, row: Any) -> None:
        brokers = [
            [b["broker_name"], int(b["write_queue_nums"]), int(b.get("perm", 6))]
            for b in json.loads(row.brokers_json)
        ]
        self.state.routes[row.topic] = sorted(brokers)
        self._changed(int(row.event_time), 1, row.event_id, topic=row.topic)

    def _decision(self, broker: str, decision: str, at: int, cause: str, reason: str) -> None:
        if self.out is None:
            return
        self.out.rows(
            TableName.BROKER_DECISIONS,
            [
                {
                    "scope": CLUSTER,
                    "scope_key": self.cluster,
                    "cluster": self.cluster,
                    "broker_name": broker,
                    "decision": decision,
                    "effective_at": at,
                    "available_from": at,
                    "reason": reason,
                    "cause_event_id": cause,
                    "profile": "",
                }
            ],
        )

    def _changed(
        self, t: int, order: int, eid: str, *, topic: str | None = None, broker: str | None = None
    ) -> None:
        topics = (
            [topic]
            if topic
            else [tp for tp, (_, _, names) in self._declared().items() if broker in names]
        )
        for tp in topics:
            self.timeline.topics.append(TopicChange(t, order, eid, tp))
        self.routes = self._effective(self.routes)
        self.timeline.history.append(RouteChange(t, order, eid, self.routes))

    def _declared(self) -> dict[str, tuple[Any, Route, frozenset[str]]]:
        """Each topic's declared route (a route event's overriding the static one), sorted and
        typed, and its brokers; worked out once per declared route."""
        declared: dict[str, Any] = {**self.config.static_routes, **self.state.routes}
        for tp, r in declared.items():
            made = self._sorted.get(tp)
            if made is None or made[0] is not r:
                route = tuple((e[0], int(e[1]), int(e[2])) for e in sorted(r))
                self._sorted[tp] = (r, route, frozenset(e[0] for e in route))
        return {tp: self._sorted[tp] for tp in declared}

    def _effective(self, before: Routes) -> Routes:
        """The routes without the brokers the NameServer dropped; a topic whose route did not
        change keeps the same object as in ``before``."""
        expired = {b for b, hb in self.state.heartbeats.items() if hb.expired}
        routes = {}
        for tp, (_, declared, names) in self._declared().items():
            route = (
                declared
                if expired.isdisjoint(names)
                else tuple(e for e in declared if e[0] not in expired)
            )
            routes[tp] = before[tp] if before.get(tp) == route else route
        return routes
