"""The routing table: each change of a topic's selectable queues, per scope key, and the routes
its rows refer to.

A key's table changes when a route changes, when one of its brokers is isolated or restored, and
when it sends to a topic for the first time; a row is written only when the table differs from
the last one published (the state keeps each published table's digest). A row names the route in
force (``route``, the route's digest) and the brokers the key isolates. The ``cluster`` scope's
rows (few; producers read them from Kafka) also list every selectable queue, and follow every
change of a route. The ``producer`` scope's rows do neither (thousands of producers, hundreds of
queues each): a producer's list at an instant is the writable queues of the route in force then
without the brokers its last row isolates, so a row is written only when those brokers change
(an isolation, a restore, a route that takes in or drops a broker the producer isolates), not
at every change of a route. Each route is recorded once per change in the ``routes`` table
(:func:`record`, by the lead shard)."""

from __future__ import annotations

import bisect
from typing import Any

from udfs.engine._config import CLUSTER
from udfs.engine._faults import Opened
from udfs.engine._nameserver import RouteTimeline
from udfs.engine._queues import Layout, isolated_json
from udfs.engine._segment import Segment
from udfs.engine._state import LEGACY, text_digest
from udfs.engine._tables import Change
from udfs.vocabulary import Decision, TableName


def publish(
    seg: Segment, opened: Opened, changes: dict[str, list[Change]], routes: RouteTimeline
) -> None:
    """The scope's ``routing_table`` rows for the segment, after each key's availability
    ``changes``. The static routes are published at the cluster's first event ever."""
    state, config, scope = seg.state, seg.config, opened.scope
    quiet = not routes.history
    moves = _moves(routes)
    for key, tstate in state.tables[scope].items():
        if tstate.profile is None:
            continue
        if (
            scope != CLUSTER
            and key not in changes
            and key not in opened.new_topics
            and (quiet or not opened.isolated(key))
        ):
            continue  # its rows follow its isolations, and none of them can change
        # (time, order, event_id, kind, payload): 0 route snapshot, 1 availability, 2 new topic;
        # the route snapshots that concern the key are added by _rows
        points: list[tuple[int, int, str, int, Any]] = [
            (c.time, c.order, c.event_id, 1, (c.broker, c.decision, c.until))
            for c in changes.get(key, [])
        ]
        if scope == CLUSTER:
            points += [(c.time, c.order, c.event_id, 2, c.topic) for c in routes.topics]
            if (first := seg.first_event) is not None:
                points += [(first.time, 1, first.event_id, 2, tp) for tp in config.static_routes]
        else:
            points += [
                (at.time, 1, at.event_id, 2, tp)
                for tp, at in opened.new_topics.get(key, {}).items()
            ]
        isolated = opened.isolated(key)
        seg.out.rows(
            TableName.ROUTING_TABLE, _rows(seg, scope, key, points, isolated, routes, moves)
        )


def _moves(routes: RouteTimeline) -> dict[str, list[int]]:
    """Per topic, the route snapshots (their places in ``routes.history``) that change its
    route: the only ones that can change a routing table of the topic."""
    moves: dict[str, list[int]] = {}
    before = routes.at_start
    for i, change in enumerate(routes.history):
        for topic, route in change.routes.items():
            if route is not before.get(topic):
                moves.setdefault(topic, []).append(i)
        before = change.routes
    return moves


def _rows(
    seg: Segment,
    scope: str,
    key: str,
    points: list[tuple[int, int, str, int, Any]],
    isolated: dict[str, int],
    timeline: RouteTimeline,
    moves: dict[str, list[int]],
) -> list[dict[str, Any]]:
    """A scope key's rows at its ``points`` (time, order, event_id, kind, payload): 0 a route
    snapshot (added here, for the topics the key knows), 1 an availability change of a broker
    it ``isolated`` at the segment's start, 2 a topic it starts to know."""
    queues = seg.queues
    last = seg.state.published.setdefault(f"{scope}|{key}", {})
    known = set(last)
    topics = known.union(p[4] for p in points if p[3] == 2)
    for i in sorted({i for topic in topics for i in moves.get(topic, ())}):
        c = timeline.history[i]
        points.append((c.time, c.order, c.event_id, 0, c.routes))
    points.sort(key=lambda p: (p[0], p[1], p[2], p[3]))
    routes = timeline.at_start
    whole = scope == CLUSTER  # rows that list every selectable queue
    rows = []
    # per topic, its layout and the brokers of it isolated, as (place in the route, broker,
    # until) in that order: kept up to date at each change instead of sorted at each row
    held: dict[str, tuple[Layout, list[tuple[int, str, int]]]] = {}
    # per topic, the isolated brokers of the table last published in this call: a producer's
    # table stands for them alone, so a change of route that leaves them is no new table
    isolating: dict[str, tuple[tuple[str, int], ...]] = {}
    # per topic, the table published last in this call, by what it stands for: its digest, for
    # the state, is made once, at the end
    made: dict[str, tuple[Layout, tuple[tuple[str, int], ...]]] = {}
    for t, _, eid, what, payload in points:
        if what == 0:
            changed = [tp for tp in known if payload.get(tp) is not routes.get(tp)]
            routes = payload
        elif what == 1:
            broker, decision, until = payload
            if decision == Decision.RESTORE:
                isolated.pop(broker, None)
            else:
                isolated[broker] = until
            changed = [tp for tp in known if broker in queues.layout(routes.get(tp, ())).at]
            for topic in changed:
                if (kept := held.get(topic)) is not None:
                    _move(kept[1], kept[0].at[broker], broker, isolated.get(broker))
        else:
            known.add(payload)
            changed = [payload]
        for topic in sorted(changed):
            route = routes.get(topic, ())
            layout = queues.layout(route)
            kept = held.get(topic)
            if kept is None or kept[0] is not layout:
                positions = layout.at
                kept = held[topic] = (
                    layout,
                    sorted((positions[b], b, u) for b, u in isolated.items() if b in positions),
                )
            isolated_here = tuple((b, u) for _, b, u in kept[1])
            if not whole and isolating.get(topic) == isolated_here:
                continue
            isolating[topic] = isolated_here
            mine = made.get(topic)
            made[topic] = (layout, isolated_here)
            if mine is None:  # the table last published is the one the state keeps
                same = _published(last.get(topic), layout, isolated_here, whole)
            elif mine[0] is layout or not whole:
                # the one this call published last: on one route, the same isolated brokers
                # make the same table and other ones another, without a digest of either
                same = mine[1] == isolated_here
            else:  # another route may list the same queues
                same = _digest(*mine, whole) == _digest(layout, isolated_here, whole)
            if same:
                continue
            rows.append(
                {
                    "scope": scope,
                    "scope_key": key,
                    "cluster": seg.cluster,
                    "topic": topic,
                    "effective_at": int(t),
                    "cause_event_id": eid,
                    # a producer's own queue list is never rewritten here: the route's holds
                    "selectable": layout.selectable(isolated_here) if whole else None,
                    "isolated": [{"broker_name": b, "until": u} for b, u in isolated_here],
                    "route": queues.reference(route),
                }
            )
    for topic, (layout, isolated_here) in made.items():
        last[topic] = _digest(layout, isolated_here, whole)
    return rows


def _digest(layout: Layout, isolated: tuple[tuple[str, int], ...], whole: bool) -> str:
    """What the state keeps of a published table: the digest of the whole table, or (a
    producer's) of the brokers it isolates."""
    return layout.digest(isolated) if whole else _isolating(isolated)


def _published(
    published: str | None, layout: Layout, isolated: tuple[tuple[str, int], ...], whole: bool
) -> bool:
    """Whether the table is the one the state says was published last (``published``)."""
    table = _digest(layout, isolated, whole)
    # a digest an older state kept may be format 2's, of the whole table
    old = published[1:] if published and published.startswith(LEGACY) else None
    return published == table or bool(old and old in (table, layout.digest(isolated)))


def _move(entries: list[tuple[int, str, int]], at: int, broker: str, until: int | None) -> None:
    """``entries`` (in order) with ``broker``, at ``at`` in its route, held ``until`` (None: no
    longer held)."""
    i = bisect.bisect_left(entries, (at, broker))
    if i < len(entries) and entries[i][:2] == (at, broker):
        del entries[i]
    if until is not None:
        bisect.insort(entries, (at, broker, until))


def _isolating(isolated: tuple[tuple[str, int], ...]) -> str:
    """What a ``producer`` scope row stands for: the brokers it isolates, whatever the route
    (:func:`~udfs.engine._state.digest` of ``[[broker, until], ...]``)."""
    return text_digest(isolated_json(isolated))


def record(seg: Segment, routes: RouteTimeline) -> None:
    """The segment's ``routes`` rows: each topic's effective route, whenever it differs from the
    one recorded last (the state keeps its digest per topic). A route in force at the segment's
    start that was never recorded (the static routes before the cluster's first event, a route
    of a state from before this table) is recorded at the segment's first event."""
    events, queues = seg.events, seg.queues
    recorded = seg.state.recorded
    start: tuple[int, str | None]
    if len(events):
        start = (int(events["event_time"].iloc[0]), str(events["event_id"].iloc[0]))
    else:
        start = (seg.clock_end, None)
    points = [(*start, routes.at_start), *((c.time, c.event_id, c.routes) for c in routes.history)]
    rows = []
    for t, eid, after in points:
        for topic in sorted(after):
            route = after[topic]
            name = queues.digest(route)
            if recorded.get(topic) == name:
                continue
            recorded[topic] = name
            rows.append(
                {
                    "cluster": seg.cluster,
                    "topic": topic,
                    "route": name,
                    "effective_at": int(t),
                    "cause_event_id": eid,
                    "brokers": [
                        {"broker_name": b, "write_queue_nums": w, "perm": p} for b, w, p in route
                    ],
                    "writable": queues.layout(route).selectable(()),
                }
            )
    seg.out.rows(TableName.ROUTES, rows)
