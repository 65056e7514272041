"""A route's queues, worked out once per batch however many producers and scope keys use them:
its digest, a fresh ``TopicPublishInfo``'s queues, and the routing table of each set of isolated
brokers."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from udfs.engine._config import Route
from udfs.engine._state import digest, text_digest
from udfs.rocketmq import MessageQueue, TopicPublishInfo
from udfs.schema import TABLES

_SELECTABLE = TABLES["routing_table"].field("selectable").type
_ISOLATED = TABLES["routing_table"].field("isolated").type


class Queues:
    """Caches keyed by the route object (the NameServer stage keeps one object per route)."""

    def __init__(self) -> None:
        self._facts: dict[int, tuple[Route, str, list[list[Any]], Any]] = {}
        self._queues: dict[tuple[int, str], list[MessageQueue]] = {}
        self._layouts: dict[int, Layout] = {}
        self._tables: dict[tuple[int, Any], tuple[str, pa.Array, pa.Array]] = {}

    def facts(self, route: Route) -> tuple[Route, str, list[list[Any]], Any]:
        """A route's digest, fresh queues and write queue numbers."""
        facts = self._facts.get(id(route))
        if facts is None:
            fresh = TopicPublishInfo.from_route(route)
            queues = [[q.broker_name, q.queue_id] for q in fresh.queues]
            facts = (route, digest([list(e) for e in route]), queues, fresh.write_queue_nums)
            self._facts[id(route)] = facts  # the route is kept in facts: its id stays
        return facts

    def message_queues(self, route: Route, topic: str) -> list[MessageQueue]:
        """A fresh TopicPublishInfo's queues for ``route`` (shared: a queue is immutable)."""
        made = self._queues.get((id(route), topic))
        if made is None:
            made = [MessageQueue(b, q, topic) for b, q in self.facts(route)[2]]
            self._queues[(id(route), topic)] = made
        return made

    def layout(self, route: Route) -> Layout:
        made = self._layouts.get(id(route))
        if made is None:
            made = self._layouts[id(route)] = Layout(route)
        return made

    def table(
        self, route: Route, isolated: tuple[tuple[str, int], ...]
    ) -> tuple[str, pa.Array, pa.Array]:
        """A topic's routing table for a route and its isolated brokers: its digest and its
        rows' two lists (as one-row Arrow arrays)."""
        cache_key = (id(route), isolated)
        made = self._tables.get(cache_key)
        if made is None:
            made = self._tables[cache_key] = self.layout(route).table(isolated)
        return made


class Layout:
    """A route's queues: each broker's place, its writable queues as JSON text (for the digest)
    and as Arrow rows (for the table)."""

    def __init__(self, route: Route) -> None:
        self.route = route  # kept, so that its id is not reused while the layout is cached
        self.at = {b: i for i, (b, _, _) in enumerate(route)}
        writable = [(b, w) for b, w, perm in route if perm & 2 and w > 0]
        self.text = [(b, ",".join(f"[{json.dumps(b)},{q}]" for q in range(w))) for b, w in writable]
        ends = np.cumsum([w for _, w in writable], dtype=np.int64)
        self.span = {b: (int(e) - w, int(e)) for (b, w), e in zip(writable, ends, strict=True)}
        self.queues = pa.array(
            [{"broker_name": b, "queue_id": q} for b, w in writable for q in range(w)],
            _SELECTABLE.value_type,
        )

    def table(self, isolated: tuple[tuple[str, int], ...]) -> tuple[str, pa.Array, pa.Array]:
        """``digest([selectable, isolated])`` (``selectable``: the writable queues of the brokers
        not isolated, as ``[broker, queue]``), written from the JSON made once per route, and the
        row's two lists."""
        out = {b for b, _ in isolated}
        selectable = "[" + ",".join(t for b, t in self.text if b not in out) + "]"
        iso = json.dumps([list(x) for x in isolated], separators=(",", ":"))
        queues = self.queues
        if out:
            keep = np.ones(len(queues), dtype=bool)
            for b in out & self.span.keys():
                keep[slice(*self.span[b])] = False
            queues = queues.filter(pa.array(keep))
        return (
            text_digest(f"[{selectable},{iso}]"),
            pa.ListArray.from_arrays(pa.array([0, len(queues)], pa.int32()), queues, _SELECTABLE),
            pa.array([[{"broker_name": b, "until": u} for b, u in isolated]], _ISOLATED),
        )
