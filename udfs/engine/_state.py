"""One cluster's state between batches: its one declared shape (:class:`State` and the types it
holds), the codec Spark stores it with, and the migrations from older versions.

Every part of the state is declared here, with its fields named; the stages read and change
these objects and add no keys of their own. The codec writes each object as the list of its
fields in declaration order (``msgpack``), compresses the whole with zstd and stores it as
base64 text, since Spark's state column is a string: ``7:<raw length>:<base64>``. The ids of the
events within the allowed lateness, most of a busy cluster's state, are 64-bit hashes in NumPy
arrays (:class:`Seen`). Versions 1 to 4 were JSON documents; :func:`loads` converts them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgpack
import numpy as np
import pandas as pd
import pyarrow as pa

from udfs.engine._config import CLUSTER, NO_ITEM, PRODUCER, Route
from udfs.rocketmq import TopicPublishInfo
from udfs.schedule import Waiting

STATE_VERSION = 7
"""Version 7 keeps a FaultItem's update time as its age, and forgets it once no event that old
is admitted (:func:`_encode_tables`); version 6 marks the producer-scope digests of the states
it reads from older versions (:data:`LEGACY`), and its texts are version 5's otherwise."""

LEGACY = "~"
"""Before a producer-scope digest of ``published``: one kept by a state of version 5 or older,
which may stand for the whole routing table (table format 2) rather than for its isolated
brokers alone. Only such a digest is ever compared with the whole table's."""


class Item(NamedTuple):
    """A FaultItem as a stored FaultTable keeps it, with the isolation it stands for."""

    broker: str
    latency: int
    start: int
    reachable: bool
    updated_at: int
    pending: bool
    """Isolated until ``start``, and no ``RESTORE`` written yet."""
    cause: str
    """The event that set ``start``."""


@dataclass
class Table:
    """One scope key's FaultTable (RocketMQ's ``LatencyFaultToleranceImpl``)."""

    profile: str | None = None
    """The profile of its latest event; None until the cluster scope's table is first used."""
    items: list[Item] = field(default_factory=list)
    """In the table's iteration order (a ``ConcurrentHashMap``'s)."""
    cap: int = 32
    """The map's capacity, which decides that order."""
    worst: int | None = None
    """``whichItemWorst``: None until drawn."""
    topics: list[str] = field(default_factory=list)
    """The topics the producer sent to (producer scope), sorted."""
    due: int | None = None
    """The earliest end of a pending isolation."""


class Queue(NamedTuple):
    broker: str
    queue_id: int


@dataclass
class PublishInfo:
    """A producer's ``TopicPublishInfo`` for a topic in a scope: its route's digest, the queues
    RocketMQ 4.x rewrote in place and its ``sendWhichQueue`` index."""

    route: str
    rewrites: dict[int, Queue]
    """The queues that differ from the route's own list, by their place in it (a rewrite never
    changes the list's length): a handful, not the topic's hundreds of queues."""
    index: int | None
    seed: str
    """Where its random index start is drawn from."""


class FirstAttempt(NamedTuple):
    """A producer's latest first attempt: which send (``message_id|redelivery_count``) and when
    it started."""

    key: str
    start: int


@dataclass
class Producer:
    """A producer instance (RocketMQ's ``clientId``)."""

    last: int
    """Its latest send's time."""
    eid: str | None
    """Its latest send's event id."""
    pub: dict[str, PublishInfo] = field(default_factory=dict)
    """Per ``scope|topic``."""
    send: FirstAttempt | None = None


@dataclass
class Heartbeat:
    """The NameServer's view of a broker: its last heartbeat, and whether a scan dropped it."""

    last: int
    expired: bool
    eid: str


@dataclass
class Half:
    """A transactional half message waiting on its broker."""

    broker: str
    topic: str
    group: str
    producer: str
    message_id: str
    born: int
    stored: int
    profile: str
    immunity_ms: int | None
    checks: int = 0
    """``TRANSACTION_CHECK_TIMES``: wakes that checked it or re-appended it under its immunity."""
    copied: bool = False
    """A check re-appended a copy, which a late first-phase end does not reach."""
    ended: str | None = None
    """A first-phase end the broker applied to the original while a check's copy waits."""
    notified: bool = False
    lost: str | None = None
    """The end it was sent while its broker was unavailable, until a check confirms it lost."""
    doubt: int = 0
    """Checks predicted since that end, none of them reported."""
    wake: int = 0
    """Its next wake."""


class Shown(NamedTuple):
    """What the policies' rows so far tell a reader of a broker."""

    state: str
    until: int
    waived: bool
    """Kept in the route by the isolation cap."""


class Isolated(NamedTuple):
    until: int
    cause: str | None


@dataclass
class Window:
    """The first latency window still open: per topic, per broker, (sends, latency sum)."""

    index: int
    sums: dict[str, dict[str, list[int]]]


@dataclass
class PolicyState:
    """faultline's own policies over the cluster scope (:mod:`udfs.engine._policies`)."""

    base: dict[str, Isolated] = field(default_factory=dict)
    """The FaultTable's isolations and their causes."""
    outlier: dict[str, Isolated] = field(default_factory=dict)
    """Latency outliers' isolations, with the reason as cause."""
    since: dict[str, int] = field(default_factory=dict)
    """When each broker isolated now became so."""
    probe: dict[str, int] = field(default_factory=dict)
    """Probations' ends."""
    shown: dict[str, Shown] = field(default_factory=dict)
    window: Window | None = None


@dataclass
class Seen:
    """The ids of the events within the allowed lateness, to recognise a repeated record: the
    64-bit SipHash-2-4 of each id (:func:`id_hashes`), grouped by second of event time, so that a
    second is dropped at once. A new id whose hash equals one kept counts as a repeat: with
    ``n`` ids kept, a chance of ``n / 2**64`` (about 3e-15 at 50,000 ids)."""

    seconds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """The seconds kept, ascending."""
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """How many ids each of them holds."""
    hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    """The ids' hashes, second by second."""
    horizon: int | None = None
    """The oldest event time admitted when they were last remembered (the clock less the
    allowed lateness): nothing older is applied again."""

    def __len__(self) -> int:
        return len(self.hashes)

    def contains(self, hashes: np.ndarray) -> np.ndarray:
        """Whether each hash is kept: a binary search in the sorted hashes (numpy's ``isin``
        hashes both arrays, 40 times slower at 300,000 ids)."""
        kept = np.sort(self.hashes)
        if not len(kept):
            return np.zeros(len(hashes), bool)
        found: np.ndarray = kept[np.searchsorted(kept, hashes).clip(max=len(kept) - 1)] == hashes
        return found

    def remember(self, hashes: np.ndarray, times: np.ndarray, horizon: int) -> Seen:
        """The ids to keep: those kept and these (``times`` in ms) of events at or after
        ``horizon`` (an older one is late anyway)."""
        first = horizon // 1000
        keep = self.seconds >= first
        old_seconds = np.repeat(self.seconds, self.counts)
        fresh = times >= horizon
        seconds = np.concatenate([old_seconds[np.repeat(keep, self.counts)], times[fresh] // 1000])
        ids = np.concatenate([self.hashes[np.repeat(keep, self.counts)], hashes[fresh]])
        order = np.argsort(seconds, kind="stable")
        unique, counts = np.unique(seconds[order], return_counts=True)
        return Seen(unique.astype(np.int64), counts.astype(np.int64), ids[order], horizon)


HASH_KEY = "0123456789123456"
"""SipHash's key for :func:`id_hashes` (pandas' default, named so that it never changes)."""


def id_hashes(ids: Iterable[str] | np.ndarray) -> np.ndarray:
    """64-bit SipHash-2-4 of each event id's UTF-8 bytes."""
    values = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids), dtype=object)
    hashed: np.ndarray = pd.util.hash_array(
        values, encoding="utf8", hash_key=HASH_KEY, categorize=False
    )
    return hashed


@dataclass
class State:
    """One cluster's state (or one shard's part of it: :mod:`udfs.engine._shards`)."""

    clock: int | None = None
    """The largest accepted event time."""
    tables: dict[str, dict[str, Table]] = field(default_factory=lambda: {CLUSTER: {}, PRODUCER: {}})
    """Per scope, per scope key (the cluster, or a producer id)."""
    producers: dict[str, Producer] = field(default_factory=dict)
    routes: dict[str, list[list[Any]]] = field(default_factory=dict)
    """The declared routes: per topic, ``[broker, write_queue_nums, perm]`` sorted."""
    heartbeats: dict[str, Heartbeat] = field(default_factory=dict)
    published: dict[str, dict[str, str]] = field(default_factory=dict)
    """The digest of the last routing table published, per ``scope|key``, per topic."""
    recorded: dict[str, str] = field(default_factory=dict)
    """The digest of the last route recorded in the ``routes`` table, per topic."""
    schedule: dict[str, list[Waiting]] = field(default_factory=dict)
    """The delay queues: per level, in delivery order."""
    transactions: dict[str, Half] = field(default_factory=dict)
    """Half messages waiting, per transaction id."""
    transactions_due: int | None = None
    """The earliest wake of a half message."""
    answered: dict[str, str] = field(default_factory=dict)
    """Per broker, the outcome of the last send it answered or did not."""
    policies: PolicyState = field(default_factory=PolicyState)
    seen: Seen = field(default_factory=Seen)


def new_state() -> State:
    return State()


class Isolation(NamedTuple):
    """An isolation a stored FaultTable holds: ``key``'s table isolates ``broker`` until
    ``until``, set by the event ``cause``."""

    key: str
    broker: str
    until: int
    cause: str


def isolations(state: State, scope: str) -> list[Isolation]:
    """The isolations in a scope's stored tables, ended ones included: compare ``until`` with
    the clock."""
    return sorted(
        Isolation(key, it.broker, it.start, it.cause)
        for key, table in state.tables[scope].items()
        for it in table.items
        if it.pending
    )


# --- the codec ------------------------------------------------------------------------------------


_ZSTD = pa.Codec("zstd", compression_level=3)
"""zstd's own default level: 5% fewer bytes than Arrow's default (1) on a 5,000-producer fleet's
state, for 2 ms more per batch; higher levels save under 2% more at 4 to 20 times the time."""


def dumps(state: State) -> str:
    raw = msgpack.packb(_encode(state), use_bin_type=True)
    packed = _ZSTD.compress(raw, asbytes=True)
    return f"{STATE_VERSION}:{len(raw)}:{base64.b64encode(packed).decode('ascii')}"


def loads(text: str) -> State:
    if text.startswith("{"):
        return _from_json(json.loads(text))
    version, size, body = text.split(":", 2)
    if int(version) not in (5, 6, STATE_VERSION):
        raise ValueError(
            f"state schema version {version} is not {STATE_VERSION}: this checkpoint was "
            "written by a newer faultline version; start from a new checkpoint"
        )
    raw = pa.decompress(base64.b64decode(body), int(size), codec="zstd", asbytes=True)
    parts = msgpack.unpackb(raw, raw=False, strict_map_key=False, use_list=True)
    state = _decode(parts, current=int(version) == STATE_VERSION)
    return state if int(version) > 5 else _legacy_published(state)


def _legacy_published(state: State) -> State:
    """A state of version 5 or older, its producer-scope digests marked :data:`LEGACY`."""
    for key, topics in state.published.items():
        if key.startswith(f"{PRODUCER}|"):
            state.published[key] = {topic: LEGACY + d for topic, d in topics.items()}
    return state


_PARTS = tuple(State.__dataclass_fields__)
"""The state's parts, in the codec's order."""


def footprint(state: State) -> dict[str, int]:
    """Roughly what each part of the state adds to :func:`dumps`'s text: its bytes compressed
    on their own, as base64 text (together, the parts compress a little better)."""
    return {
        name: len(_ZSTD.compress(msgpack.packb(value, use_bin_type=True), asbytes=True)) * 4 // 3
        for name, value in zip(_PARTS, _encode(state), strict=True)
    }


def _encode(s: State) -> list[Any]:
    """Every map in key order, as versions 1 to 4 wrote them (JSON with sorted keys): the next
    batch meets the keys in the same order however the state came about."""
    p = s.policies
    return [
        s.clock,
        {
            scope: _encode_tables(tables, s.clock or 0, s.seen.horizon)
            for scope, tables in sorted(s.tables.items())
        },
        _encode_producers(s.producers),
        _sorted(s.routes),
        {b: [h.last, h.expired, h.eid] for b, h in sorted(s.heartbeats.items())},
        {key: dict(sorted(topics.items())) for key, topics in sorted(s.published.items())},
        _sorted(s.recorded),
        _sorted(s.schedule),
        {tx: list(vars(h).values()) for tx, h in sorted(s.transactions.items())},
        s.transactions_due,
        _sorted(s.answered),
        [
            _sorted(p.base),
            _sorted(p.outlier),
            _sorted(p.since),
            _sorted(p.probe),
            _sorted(p.shown),
            None if p.window is None else [p.window.index, _sorted(p.window.sums)],
        ],
        [
            s.seen.seconds.tobytes(),
            s.seen.counts.tobytes(),
            s.seen.hashes.tobytes(),
            s.seen.horizon,
        ],
    ]


def _encode_tables(tables: dict[str, Table], clock: int, horizon: int | None) -> list[Any]:
    """A scope's tables as columns: one list per field of the tables, one per field of all
    their items (they compress far better than rows).

    An item's ``updated_at`` only decides whether a later update is older than it, and is
    dropped: so it is kept as its age at the clock while events as old as it may still be
    admitted, and as None once it is before ``horizon`` (any event admitted later is newer: it
    reads back as :data:`NO_ITEM`). Its ``start`` is kept as its distance from ``updated_at``
    (from the clock once that is dropped), and as None when 0 (a 5.x item that never isolated).
    Its ``cause`` is kept only where ``start`` is after ``updated_at``: otherwise the item never
    isolated since that update, and its cause cannot show in any row."""
    keys = sorted(tables)
    chosen = [tables[k] for k in keys]
    items = [it for t in chosen for it in t.items]
    brokers, latency, start, reachable, updated, pending, cause = (
        zip(*items, strict=True) if items else ((),) * len(Item._fields)
    )
    names = sorted(set(brokers))
    code = {b: i for i, b in enumerate(names)}
    starts, times = np.array(start, np.int64), np.array(updated, np.int64)
    old = times < (NO_ITEM + 1 if horizon is None else horizon)
    ages = [None if o else a for o, a in zip(old.tolist(), (clock - times).tolist(), strict=True)]
    after = (starts - np.where(old, clock, times)).tolist()
    isolating = (starts > times).tolist()
    return [
        keys,
        [
            [t.profile for t in chosen],
            [t.cap for t in chosen],
            [t.worst for t in chosen],
            [t.topics for t in chosen],
            [t.due for t in chosen],
            [len(t.items) for t in chosen],
        ],
        names,
        np.array([code[b] for b in brokers], _code_type(len(names))).tobytes(),
        latency,
        [None if z else d for d, z in zip(after, (starts == 0).tolist(), strict=True)],
        reachable,
        ages,
        pending,
        [c if i else "" for c, i in zip(cause, isolating, strict=True)],
    ]


def _code_type(names: int) -> type[np.unsignedinteger[Any]]:
    return np.uint16 if names <= 1 << 16 else np.uint32


item_of = functools.partial(tuple.__new__, Item)
"""An :class:`Item` from a tuple of its fields, without a Python call."""


def _decode_tables(columns: list[Any], clock: int) -> dict[str, Table]:
    keys, meta, names, codes, latency, after, reachable, ages, pending, cause = columns
    brokers = [names[c] for c in np.frombuffer(codes, _code_type(len(names))).tolist()]
    updated = [NO_ITEM if a is None else clock - a for a in ages]
    base = [clock if a is None else t for a, t in zip(ages, updated, strict=True)]
    starts = [0 if d is None else t + d for d, t in zip(after, base, strict=True)]
    fields = (brokers, latency, starts, reachable, updated, pending, cause)
    return _tables_of(keys, zip(*meta, strict=True), *fields)


def _decode_tables_6(columns: list[Any], clock: int) -> dict[str, Table]:
    """Versions 5 and 6: ``updated_at`` as it was, ``start`` as its distance from it, broker
    codes of 32 bits."""
    keys, meta, names, codes, latency, start, reachable, updated, pending, cause = columns
    brokers = [names[c] for c in np.frombuffer(codes, np.uint32).tolist()]
    starts = (np.array(updated, np.int64) + np.array(start, np.int64)).tolist()
    return _tables_of(keys, meta, brokers, latency, starts, reachable, updated, pending, cause)


def _tables_of(keys: list[str], meta: Iterable[Any], *fields: list[Any]) -> dict[str, Table]:
    items = list(map(item_of, zip(*fields, strict=True)))
    tables, at = {}, 0
    for key, (profile, cap, worst, topics, due, n) in zip(keys, meta, strict=True):
        tables[key] = Table(profile, items[at : at + n], cap, worst, topics, due)
        at += n
    return tables


def _encode_producers(producers: dict[str, Producer]) -> list[Any]:
    """The producers as columns, their publish infos as columns too (a route's digest once):
    how many each producer has, then each field of them all, in producer and key order."""
    ids = sorted(producers)
    chosen = [producers[p] for p in ids]
    pubs = [(k, i) for pr in chosen for k, i in sorted(pr.pub.items())]
    routes = sorted({i.route for _, i in pubs})
    route = {r: n for n, r in enumerate(routes)}
    return [
        ids,
        [pr.last for pr in chosen],
        [pr.eid for pr in chosen],
        [None if pr.send is None else pr.send.key for pr in chosen],
        [None if pr.send is None else pr.send.start - pr.last for pr in chosen],
        routes,
        [
            [len(pr.pub) for pr in chosen],
            [k for k, _ in pubs],
            [route[i.route] for _, i in pubs],
            [_rewrites(i) for _, i in pubs],
            [i.index for _, i in pubs],
            [i.seed for _, i in pubs],
        ],
    ]


def _rewrites(pub: PublishInfo) -> list[list[Any]]:
    return [[at, *q] for at, q in sorted(pub.rewrites.items())]


def _decode_producers(columns: list[Any]) -> dict[str, Producer]:
    *own, (counts, *fields) = columns
    owners = [n for n, count in enumerate(counts) for _ in range(count)]
    return _producers_of(own, zip(owners, *fields, strict=True))


def _decode_producers_6(columns: list[Any]) -> dict[str, Producer]:
    """Versions 5 and 6: the publish infos as rows."""
    *own, pubs = columns
    return _producers_of(own, pubs)


def _producers_of(columns: list[Any], pubs: Iterable[Any]) -> dict[str, Producer]:
    """The producers of their own columns, and their publish infos as rows ``[producer's
    place, key, route's place, rewrites, index, seed]``."""
    ids, last, eids, keys, starts, routes = columns
    producers = {
        pid: Producer(t, eid, {}, None if key is None else FirstAttempt(key, t + start))
        for pid, t, eid, key, start in zip(ids, last, eids, keys, starts, strict=True)
    }
    chosen = list(producers.values())
    for n, k, r, rewrites, index, seed in pubs:
        kept = {at: Queue(b, q) for at, b, q in rewrites}
        chosen[n].pub[k] = PublishInfo(routes[r], kept, index, seed)
    return producers


def _sorted(value: Any) -> Any:
    """A map (and the maps in it) in key order."""
    if isinstance(value, dict):
        return {k: _sorted(v) for k, v in sorted(value.items())}
    return value


def _decode(v: list[Any], current: bool) -> State:
    """A state of this version, or (not ``current``) of version 5 or 6."""
    (clock, tables, producers, routes, heartbeats, published, recorded, schedule, transactions,
     due, answered, policies, seen) = v  # fmt: skip
    base, outlier, since, probe, shown, window = policies
    waiting, isolated = Waiting._make, Isolated._make
    return State(
        clock=clock,
        tables={
            scope: (_decode_tables if current else _decode_tables_6)(columns, clock or 0)
            for scope, columns in tables.items()
        },
        producers=(_decode_producers if current else _decode_producers_6)(producers),
        routes=routes,
        heartbeats={b: Heartbeat(*h) for b, h in heartbeats.items()},
        published=published,
        recorded=recorded,
        schedule={level: [waiting(x) for x in q] for level, q in schedule.items()},
        transactions={tx: Half(*h) for tx, h in transactions.items()},
        transactions_due=due,
        answered=answered,
        policies=PolicyState(
            {b: isolated(x) for b, x in base.items()},
            {b: isolated(x) for b, x in outlier.items()},
            since,
            probe,
            {b: Shown._make(x) for b, x in shown.items()},
            None if window is None else Window(window[0], window[1]),
        ),
        seen=Seen(
            np.frombuffer(seen[0], np.int64).copy(),
            np.frombuffer(seen[1], np.int64).copy(),
            np.frombuffer(seen[2], np.uint64).copy(),
            seen[3] if len(seen) > 3 else None,
        ),
    )


# --- versions 1 to 4: JSON documents --------------------------------------------------------------


def _from_json(state: dict[str, Any]) -> State:
    """A version 1 to 4 state (JSON), converted."""
    if state.get("v") == 1:  # version 1 kept no event ids: nothing applied before is known
        state = {**state, "v": 2, "seen": {}}
    if state.get("v") == 2:  # version 2 kept whole routes where version 3 keeps their digests
        state = {
            **state,
            "v": 3,
            "pubinfo": {k: _compact_pubinfo(p) for k, p in state["pubinfo"].items()},
            "routing_table": {
                k: {topic: digest(sig) for topic, sig in sigs.items()}
                for k, sigs in state["routing_table"].items()
            },
        }
    if state.get("v") == 3:  # version 3 kept publish infos in one map, not per producer
        state = _per_producer(state)
    if state.get("v") != 4:
        raise ValueError(
            f"state schema version {state.get('v')} is not {STATE_VERSION}: this checkpoint was "
            "written by another faultline version; start from a new checkpoint"
        )
    return _legacy_published(_typed(state))


def _typed(v4: dict[str, Any]) -> State:
    """A version 4 state (JSON, with lists read by position) in version 5's types."""
    p = v4.get("policies") or {}
    window = p.get("window")
    seconds = sorted(v4["seen"], key=int)
    ids = [eid for s in seconds for eid in v4["seen"][s]]
    own = _own_queues(v4)
    return State(
        clock=v4["clock"],
        tables={
            scope: {
                k: Table(
                    t["profile"],
                    [Item(*it) for it in t["items"]],
                    t["cap"],
                    t["worst"],
                    t["topics"],
                    t.get("due", min((it[2] for it in t["items"] if it[5]), default=None)),
                )
                for k, t in v4["tables"][scope].items()
            }
            for scope in (CLUSTER, PRODUCER)
        },
        producers={
            pid: Producer(
                pr["last"],
                pr["eid"],
                {
                    k: PublishInfo(
                        i["route"],
                        _rewrites_of(i["queues"], own.get(i["route"])),
                        i["index"],
                        i["seed"],
                    )
                    for k, i in pr["pub"].items()
                },
                None if pr.get("send") is None else FirstAttempt(*pr["send"]),
            )
            for pid, pr in v4["producers"].items()
        },
        routes=v4["routes"],
        heartbeats={
            b: Heartbeat(h["last"], h["expired"], h["eid"]) for b, h in v4["heartbeats"].items()
        },
        published=v4["routing_table"],
        recorded={},  # version 4 recorded no route: the routes in force are recorded next
        schedule={level: [Waiting(*e) for e in q] for level, q in v4.get("schedule", {}).items()},
        transactions={tx: Half(*h) for tx, h in v4.get("transactions", {}).items()},
        transactions_due=v4.get("transactions_due"),
        answered=v4.get("answered", {}),
        policies=PolicyState(
            {b: Isolated(*x) for b, x in p.get("base", {}).items()},
            {b: Isolated(*x) for b, x in p.get("outlier", {}).items()},
            p.get("since", {}),
            p.get("probe", {}),
            {b: Shown(*x) for b, x in p.get("shown", {}).items()},
            None if window is None else Window(window[0], window[1]),
        ),
        seen=Seen(
            np.array([int(s) for s in seconds], np.int64),
            np.array([len(v4["seen"][s]) for s in seconds], np.int64),
            id_hashes(ids) if ids else np.zeros(0, np.uint64),
        ),
    )


def _own_queues(v4: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """The queues of a fresh TopicPublishInfo of each route the state's NameServer view gives
    (declared, without the brokers it dropped), by the route's digest."""
    expired = {b for b, h in v4["heartbeats"].items() if h["expired"]}
    own = {}
    for declared in v4["routes"].values():
        route = tuple((b, int(w), int(p)) for b, w, p in sorted(declared) if b not in expired)
        own[digest([list(e) for e in route])] = _queues(route)
    return own


def _rewrites_of(queues: list[list[Any]] | None, own: list[list[Any]] | None) -> dict[int, Queue]:
    """A version 4 publish info's queue list (None: the route's own) as the places where it
    differs from its route's own list; every place when that list is unknown (a static route):
    the route's own list has the same length, and the first rewrite keeps only the
    differences."""
    return {at: Queue(*q) for at, q in enumerate(queues or ()) if own is None or list(q) != own[at]}


def digest(value: Any) -> str:
    """A short fingerprint of a JSON value: what the state keeps of a route or a routing table."""
    return text_digest(json.dumps(value, separators=(",", ":")))


def text_digest(text: str) -> str:
    """:func:`digest` of a value already written as compact JSON."""
    return text_hasher(text).hexdigest()


def text_hasher(text: str) -> hashlib.blake2b:
    """The hash of :func:`text_digest` fed with ``text``: a value's JSON text that starts with
    it can be digested from a copy, feeding only the rest."""
    return hashlib.blake2b(text.encode(), digest_size=12)


def _queues(route: Route) -> list[list[Any]]:
    """The queues of a fresh TopicPublishInfo for ``route``."""
    return [[q.broker_name, q.queue_id] for q in TopicPublishInfo.from_route(route).queues]


def _compact_pubinfo(pub: dict[str, Any]) -> dict[str, Any]:
    """A version 2 publish info (whole route and queues) as version 3 keeps it: the route's
    digest, and the queues only where they differ from the route's own."""
    route = tuple((b, int(w), int(p)) for b, w, p in pub["route"])
    queues = pub["queues"] if pub["queues"] != _queues(route) else None
    return {"route": digest(pub["route"]), "queues": queues, "index": pub["index"],
            "seed": pub["seed"]}  # fmt: skip


def rng(seed: int, *parts: object) -> random.Random:
    """The random numbers a decision draws, seeded by ``seed`` and ``parts``: the seeding
    (a hash and the generator's state) waits for the first draw, which most decisions never
    make, and gives the same numbers as seeding at once."""
    return _Seeded((seed, *parts))


class _Seeded(random.Random):
    """A :class:`random.Random` that seeds itself at its first draw. Every draw goes through
    ``getrandbits`` or ``random`` (``randrange`` and ``shuffle`` too), so both are wrapped."""

    def __init__(self, parts: tuple[object, ...]) -> None:  # no super().__init__: no seeding
        self._parts: tuple[object, ...] | None = parts

    def _seeded(self) -> None:
        if self._parts is not None:
            text = "\x1f".join(map(str, self._parts)).encode()
            self.seed(int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big"))
            self._parts = None

    def getrandbits(self, k: int, /) -> int:
        self._seeded()
        return super().getrandbits(k)

    def random(self) -> float:
        self._seeded()
        return super().random()


def _per_producer(state: dict[str, Any]) -> dict[str, Any]:
    """A version 3 state as version 4 keeps it: event ids in lists per second (not each with its
    time), and each producer's publish infos under the producer,
    with its last send taken as the state's clock (it is forgotten that long after the upgrade
    unless it sends again). Version 3 joined scope, scope key, producer and topic with ``|``;
    a producer id is told apart from the rest by the producers the state knows."""
    clusters = list(state["tables"][CLUSTER])
    known = set(state["tables"][PRODUCER])
    known |= {k.split("|")[1] for k in state["pubinfo"] if k.startswith(f"{PRODUCER}|")}
    producers: dict[str, dict[str, Any]] = {
        p: {"last": state["clock"], "eid": None, "pub": {}} for p in known
    }
    for pkey, pub in state["pubinfo"].items():
        scope, rest = pkey.split("|", 1)
        key = clusters[0] if scope == CLUSTER and clusters else rest.split("|", 1)[0]
        rest = rest[len(key) + 1 :]
        pid = max((p for p in known if rest.startswith(f"{p}|")), key=len, default=None)
        pid = pid if pid is not None else rest.split("|", 1)[0]
        topic = rest[len(pid) + 1 :]
        producers.setdefault(pid, {"last": state["clock"], "eid": None, "pub": {}})
        producers[pid]["pub"][f"{scope}|{topic}"] = pub
    seen: dict[str, list[str]] = {}
    for eid, t in sorted(state["seen"].items(), key=lambda e: e[1]):
        seen.setdefault(str(t // 1000), []).append(eid)
    state = {**state, "v": 4, "producers": producers, "seen": seen}
    del state["pubinfo"]
    return state
