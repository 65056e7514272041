"""The routing table: each change of a topic's selectable queues, per scope key. A key's table
changes when a route changes, when one of its brokers is isolated or restored, and when it
sends to a topic for the first time; a row is written only when the table differs from the
last one published (the state keeps each published table's digest)."""

from __future__ import annotations

from typing import Any

from udfs.engine._config import CLUSTER, EngineConfig
from udfs.engine._faults import Opened
from udfs.engine._nameserver import RouteTimeline
from udfs.engine._output import Out
from udfs.engine._queues import Queues
from udfs.engine._state import State
from udfs.engine._tables import Change


def publish(
    cluster: str,
    state: State,
    opened: Opened,
    changes: dict[str, list[Change]],
    routes: RouteTimeline,
    queues: Queues,
    first_event: tuple[int, str] | None,
    config: EngineConfig,
    out: Out,
) -> None:
    """The scope's ``routing_table`` rows for the segment. ``first_event`` is the cluster's
    first event ever, when it falls in this segment: the static routes are published then."""
    scope = opened.scope
    quiet = not routes.history
    for key, tstate in state.tables[scope].items():
        if tstate.profile is None:
            continue
        if quiet and key not in changes and key not in opened.new_topics and scope != CLUSTER:
            continue  # nothing that a routing table is made of changed
        # (time, order, event_id, kind, payload): 0 route snapshot, 1 availability, 2 new topic
        points: list[tuple[int, int, str, int, Any]] = [
            (t, o, e, 0, snapshot) for t, o, e, snapshot in routes.history
        ]
        points += [(t, o, e, 1, (b, d, u)) for t, o, e, b, d, u in changes.get(key, [])]
        if scope == CLUSTER:
            points += [(t, o, e, 2, tp) for t, o, e, tp in routes.topics]
            if first_event is not None:
                t0, e0 = first_event
                points += [(t0, 1, e0, 2, tp) for tp in config.static_routes]
        else:
            points += [(t, 1, e, 2, tp) for tp, (t, e) in opened.new_topics.get(key, {}).items()]
        points.sort(key=lambda p: (p[0], p[1], p[2], p[3]))
        isolated = opened.isolated(key)
        out.rows(
            "routing_table",
            _rows(cluster, state, scope, key, points, isolated, routes.at_start, queues),
        )


def _rows(
    cluster: str,
    state: State,
    scope: str,
    key: str,
    points: list[tuple[int, int, str, int, Any]],
    isolated: dict[str, int],
    routes: dict[str, Any],
    queues: Queues,
) -> list[dict[str, Any]]:
    last = state.published.setdefault(f"{scope}|{key}", {})
    known = set(last)
    rows = []
    for t, _, eid, what, payload in points:
        if what == 0:
            changed = [tp for tp in known if payload.get(tp) is not routes.get(tp)]
            routes = payload
        elif what == 1:
            broker, decision, until = payload
            if decision == "RESTORE":
                isolated.pop(broker, None)
            else:
                isolated[broker] = until
            changed = [tp for tp in known if broker in queues.layout(routes.get(tp, ())).at]
        else:
            known.add(payload)
            changed = [payload]
        for topic in sorted(changed):
            route = routes.get(topic, ())
            positions = queues.layout(route).at
            isolated_here = tuple(
                (b, u) for _, b, u in sorted(
                    (positions[b], b, u) for b, u in isolated.items() if b in positions
                )
            )  # fmt: skip
            digest, selectable, isolated_rows = queues.table(route, isolated_here)
            if last.get(topic) == digest:
                continue
            last[topic] = digest
            rows.append(
                {
                    "scope": scope,
                    "scope_key": key,
                    "cluster": cluster,
                    "topic": topic,
                    "effective_at": int(t),
                    "cause_event_id": eid,
                    "selectable": selectable,
                    "isolated": isolated_rows,
                }
            )
    return rows
