"""A route's queues, worked out once per segment however many producers and scope keys use them:
its digest, a fresh ``TopicPublishInfo``'s queues, and the routing table of each set of isolated
brokers."""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from udfs.engine._config import Route
from udfs.engine._output import Picked
from udfs.engine._state import digest, text_hasher
from udfs.rocketmq import MessageQueue, TopicPublishInfo
from udfs.schema import TABLES
from udfs.vocabulary import TableName

_SELECTABLE = TABLES[TableName.ROUTING_TABLE].field("selectable").type


class Facts(NamedTuple):
    """What a producer's fresh ``TopicPublishInfo`` for a route starts from."""

    route: Route
    """Kept, so that its id is not reused while the facts are cached."""
    digest: str
    queues: list[list[Any]]
    """The queues, as ``[broker, queue_id]``."""
    write_queue_nums: dict[str, int] | None
    where: dict[tuple[str, int], list[int]]
    """Each queue's places in :attr:`queues` (a broker named twice has two)."""


class Queues:
    """Caches keyed by the route object (the NameServer stage keeps one object per route)."""

    def __init__(self) -> None:
        self._facts: dict[int, Facts] = {}
        self._digests: dict[int, tuple[Route, str]] = {}
        self._queues: dict[tuple[int, str], list[MessageQueue]] = {}
        self._layouts: dict[int, Layout] = {}

    def facts(self, route: Route) -> Facts:
        facts = self._facts.get(id(route))
        if facts is None:
            fresh = TopicPublishInfo.from_route(route)
            queues = [[q.broker_name, q.queue_id] for q in fresh.queues]
            where: dict[tuple[str, int], list[int]] = {}
            for i, q in enumerate(fresh.queues):
                where.setdefault((q.broker_name, q.queue_id), []).append(i)
            facts = Facts(route, self.digest(route), queues, fresh.write_queue_nums, where)
            self._facts[id(route)] = facts
        return facts

    def digest(self, route: Route) -> str:
        """A route's digest: what the state keeps of it, and its name in the ``routes`` table."""
        made = self._digests.get(id(route))
        if made is None:
            made = self._digests[id(route)] = (route, digest([list(e) for e in route]))
        return made[1]  # the route is kept beside it: its id stays

    def message_queues(self, route: Route, topic: str) -> list[MessageQueue]:
        """A fresh TopicPublishInfo's queues for ``route`` (shared: a queue is immutable)."""
        made = self._queues.get((id(route), topic))
        if made is None:
            made = [MessageQueue(b, q, topic) for b, q in self.facts(route).queues]
            self._queues[(id(route), topic)] = made
        return made

    def layout(self, route: Route) -> Layout:
        made = self._layouts.get(id(route))
        if made is None:
            made = self._layouts[id(route)] = Layout(route)
        return made

    def reference(self, route: Route) -> str | None:
        """What a routing-table row says of its route: the route's digest (as the ``routes``
        table records it), or None when the route has no broker."""
        return self.digest(route) if route else None


_json = functools.lru_cache(maxsize=1 << 16)(json.dumps)
"""A broker name's JSON text."""


def isolated_json(isolated: tuple[tuple[str, int], ...]) -> str:
    """``json.dumps`` of ``[[broker, until], ...]`` in compact form, each broker's JSON made
    once."""
    return "[" + ",".join(f"[{_json(b)},{u}]" for b, u in isolated) + "]"


@functools.lru_cache(maxsize=1 << 14)
def _queues_text(broker: str, writable: int) -> str:
    """A broker's ``writable`` queues as JSON text, ``[broker,queue]`` apart by commas: made once
    per broker, however many routes (one per change of the routes) list it."""
    name = _json(broker)
    return ",".join(f"[{name},{q}]" for q in range(writable))


class Layout:
    """A route's queues: each broker's place, its writable queues as JSON text (for the digest)
    and as Arrow rows (for the table). Its routing tables are worked out once per set of
    isolated brokers, however many scope keys have that set."""

    def __init__(self, route: Route) -> None:
        self.route = route  # kept, so that its id is not reused while the layout is cached
        self.at = {b: i for i, (b, _, _) in enumerate(route)}
        self._writable = [(b, w) for b, w, perm in route if perm & 2 and w > 0]
        ends = np.cumsum([w for _, w in self._writable], dtype=np.int64)
        self.span = {
            b: (int(e) - w, int(e)) for (b, w), e in zip(self._writable, ends, strict=True)
        }
        self._prefixes: dict[tuple[str, ...], hashlib.blake2b] = {}
        self._digests: dict[tuple[tuple[str, int], ...], str] = {}
        self._selectable: dict[tuple[str, ...], Picked] = {}
        self._last_out: tuple[tuple[tuple[str, int], ...] | None, tuple[str, ...]] = (None, ())

    @functools.cached_property
    def text(self) -> tuple[bytes, dict[str, tuple[int, int]]]:
        """The writable queues as JSON text, ``[broker,queue]`` apart by commas, and where each
        broker's queues start and end in it (ASCII: ``json.dumps`` escapes the rest)."""
        parts = [(b, _queues_text(b, w)) for b, w in self._writable]
        places, at = {}, 0
        for b, part in parts:
            places[b] = (at, at + len(part))
            at += len(part) + 1
        return ",".join(part for _, part in parts).encode(), places

    @functools.cached_property
    def queues(self) -> pa.StructArray:
        """The writable queues as Arrow rows."""
        counts = np.array([w for _, w in self._writable], dtype=np.int64)
        firsts = np.repeat(np.cumsum(counts) - counts, counts)  # each queue's broker's first
        brokers = pa.array([b for b, _ in self._writable], pa.string())
        return pa.StructArray.from_arrays(
            [
                brokers.take(np.repeat(np.arange(len(counts)), counts)),
                pa.array(np.arange(len(firsts)) - firsts, pa.int32()),
            ],
            fields=list(_SELECTABLE.value_type),
        )

    def _out(self, isolated: tuple[tuple[str, int], ...]) -> tuple[str, ...]:
        """The isolated brokers that have writable queues here: all the selectable list
        depends on."""
        if self._last_out[0] is not isolated:  # a row's digest and list ask for the same
            self._last_out = (isolated, tuple(b for b, _ in isolated if b in self.span))
        return self._last_out[1]

    def digest(self, isolated: tuple[tuple[str, int], ...]) -> str:
        """``digest([selectable, isolated])`` of the routing table with ``isolated`` brokers
        (``selectable``: the writable queues of the brokers not isolated, as ``[broker,
        queue]``), from the JSON made once per route and the hash of its start made once per
        set of isolated brokers."""
        made = self._digests.get(isolated)
        if made is None:
            out = self._out(isolated)
            prefix = self._prefixes.get(out)
            if prefix is None:
                prefix = self._prefixes[out] = self._selectable_hasher(out)
            hasher = prefix.copy()
            hasher.update(f"{isolated_json(isolated)}]".encode())
            made = self._digests[isolated] = hasher.hexdigest()
        return made

    def _selectable_hasher(self, out: tuple[str, ...]) -> hashlib.blake2b:
        """The hash of ``[[selectable],`` without the queues of the brokers ``out``: the route's
        text fed a stretch at a time around theirs, as the text joined without them would be."""
        text, places = self.text
        hasher = text_hasher("[[")
        at, sep = 0, b""
        view = memoryview(text)
        for start, end in sorted(places[b] for b in out):
            if start > at:
                hasher.update(sep)
                hasher.update(view[at : start - 1])  # up to the comma before it
                sep = b","
            at = end + 1
        if at < len(text):
            hasher.update(sep)
            hasher.update(view[at:])
        hasher.update(b"],")
        return hasher

    def selectable(self, isolated: tuple[tuple[str, int], ...]) -> Picked:
        """The routing table's ``selectable`` list with ``isolated`` brokers: the route's
        writable queues but theirs."""
        out = self._out(isolated)
        made = self._selectable.get(out)
        if made is None:
            keep = np.ones(len(self.queues), dtype=bool)
            for b in out:
                keep[slice(*self.span[b])] = False
            made = self._selectable[out] = Picked(self.queues, np.flatnonzero(keep))
        return made
