"""The routing table as faultline wrote it up to table format 2: every row with its whole
``selectable`` list, in both scopes, and a producer's row at every change of a route. A faithful
copy of that writer (``udfs.engine._routing_table`` and ``udfs.engine._queues.Layout.table`` at
commit e08ff61; its rows also name the route in force, for the comparison), kept to check that
the compact producer-scope rows of format 4, with the ``routes`` table, give back every list it
wrote, at its instant.

It runs beside the engine's own stage (:func:`beside`): each call starts from the same state
("the last table published" per scope key and topic) as the engine's, on a copy of it."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest

import udfs.engine
from udfs.engine import _state as engine_state
from udfs.engine._config import CLUSTER
from udfs.schema import TABLES

_SELECTABLE = TABLES["routing_table"].field("selectable").type


class Legacy:
    """The rows the format-2 writer gives, in the order it gives them, and the state it leaves
    (which must be the engine's: the digest of a published table did not change)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._tables: dict[tuple[Any, ...], tuple[str, list[list[Any]]]] = {}
        self.arrays: dict[int, pa.Array] = {}
        """One-row ``selectable`` arrays, per list object (many rows share a list)."""

    def take(self) -> list[dict[str, Any]]:
        rows, self.rows = self.rows, []
        return rows

    def selectable(self, rows: list[dict[str, Any]]) -> pa.Array:
        """The rows' ``selectable`` column, typed as the table's."""
        pieces = []
        for r in rows:
            made = self.arrays.get(id(r["selectable"]))
            if made is None:
                flat = [{"broker_name": b, "queue_id": q} for b, q in r["selectable"]]
                values = pa.array(flat, _SELECTABLE.value_type)
                made = pa.ListArray.from_arrays(pa.array([0, len(flat)], pa.int32()), values)
                self.arrays[id(r["selectable"])] = made.cast(_SELECTABLE)
            pieces.append(made)
        return pa.concat_arrays(pieces) if pieces else pa.array([], _SELECTABLE)

    def publish(
        self,
        cluster: str,
        state: engine_state.State,
        opened: Any,
        changes: dict[str, list[Any]],
        routes: Any,
        first_event: tuple[int, str] | None,
        config: Any,
    ) -> None:
        scope = opened.scope
        quiet = not routes.history
        for key, tstate in state.tables[scope].items():
            if tstate.profile is None:
                continue
            if quiet and key not in changes and key not in opened.new_topics and scope != CLUSTER:
                continue
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
                points += [
                    (t, 1, e, 2, tp) for tp, (t, e) in opened.new_topics.get(key, {}).items()
                ]
            points.sort(key=lambda p: (p[0], p[1], p[2], p[3]))
            self._rows(cluster, state, scope, key, points, opened.isolated(key), routes.at_start)

    def _rows(
        self,
        cluster: str,
        state: engine_state.State,
        scope: str,
        key: str,
        points: list[tuple[int, int, str, int, Any]],
        isolated: dict[str, int],
        routes: dict[str, Any],
    ) -> None:
        last = state.published.setdefault(f"{scope}|{key}", {})
        known = set(last)
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
                changed = [tp for tp in known if broker in _positions(routes.get(tp, ()))]
            else:
                known.add(payload)
                changed = [payload]
            for topic in sorted(changed):
                route = routes.get(topic, ())
                positions = _positions(route)
                isolated_here = tuple(
                    (b, u) for _, b, u in sorted(
                        (positions[b], b, u) for b, u in isolated.items() if b in positions
                    )
                )  # fmt: skip
                digest, selectable = self._table(route, isolated_here)
                if last.get(topic) == digest:
                    continue
                last[topic] = digest
                self.rows.append(
                    {
                        "scope": scope,
                        "scope_key": key,
                        "cluster": cluster,
                        "topic": topic,
                        "effective_at": int(t),
                        "cause_event_id": eid,
                        "selectable": selectable,
                        "isolated": [{"broker_name": b, "until": u} for b, u in isolated_here],
                        # not a format-2 column: the route in force, to compare with format 4
                        "route": engine_state.digest([list(e) for e in route]) if route else None,
                    }
                )

    def _table(
        self, route: Any, isolated: tuple[tuple[str, int], ...]
    ) -> tuple[str, list[list[Any]]]:
        """``digest([selectable, isolated])``: the writable queues of the brokers not isolated,
        as ``[broker, queue]``, and the isolated brokers as ``[broker, until]``."""
        made = self._tables.get((route, isolated))
        if made is None:
            out = {b for b, _ in isolated}
            selectable = [
                [b, q] for b, w, perm in route if perm & 2 and w > 0 and b not in out
                for q in range(w)
            ]  # fmt: skip
            digest = engine_state.text_digest(
                json.dumps([selectable, [list(x) for x in isolated]], separators=(",", ":"))
            )
            made = self._tables[(route, isolated)] = (digest, selectable)
        return made


def _positions(route: Any) -> dict[str, int]:
    return {b: i for i, (b, _, _) in enumerate(route)}


@contextmanager
def beside(monkeypatch: pytest.MonkeyPatch) -> Iterator[Legacy]:
    """The engine with the format-2 writer running beside its routing-table stage, on a copy
    of the same state; after each call, the copy's published digests of the ``cluster`` scope
    must equal the engine's, and both must know the same topics of each producer (since table
    format 4, a producer's digest stands for its isolated brokers alone)."""
    legacy = Legacy()
    real: Callable[..., None] = udfs.engine.publish

    def both(seg: Any, opened: Any, changes: dict[str, list[Any]], routes: Any) -> None:
        state = seg.state
        shadow = dataclasses.replace(state, published=copy.deepcopy(state.published))
        legacy.publish(seg.cluster, shadow, opened, changes, routes, seg.first_event, seg.config)
        real(seg, opened, changes, routes)
        assert {k: v.keys() for k, v in shadow.published.items()} == {
            k: v.keys() for k, v in state.published.items()
        }
        assert all(
            shadow.published[k] == v
            for k, v in state.published.items()
            if k.startswith(f"{CLUSTER}|")
        )

    with monkeypatch.context() as patch:
        patch.setattr(udfs.engine, "publish", both)
        yield legacy
