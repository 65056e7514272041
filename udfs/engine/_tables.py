"""The FaultTables of a scope during a batch: every table updated together with numpy (cost per
row, not per table), availability decisions, and the per-table views routing decisions use."""

from __future__ import annotations

import functools
import itertools
import operator
import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from udfs._frames import codes, objects
from udfs.engine._config import CLUSTER, NO_ITEM, EngineConfig
from udfs.engine._output import Out
from udfs.engine._state import Item, Table, item_of
from udfs.rocketmq import FaultItem, FaultTable, Outcome, Profile, SendMode, attempt_effect
from udfs.rocketmq._fault import _ConcurrentHashMapOrder
from udfs.rocketmq._vector import not_available_durations, start_timestamps
from udfs.schema import TABLES
from udfs.vocabulary import Decision, TableName

_FLAG_CACHE: dict[tuple[str, str, str], tuple[tuple[int, bool, bool], ...]] = {}


def _report_flags(profile: Profile, outcome: str, mode: str) -> tuple[tuple[int, bool, bool], ...]:
    """(phase, isolation, reachable) of each updateFaultItem call the outcome makes; phase 0 is
    the ASYNC dispatch report, 1 the result."""
    key = (profile.name, outcome, mode)
    if key not in _FLAG_CACHE:
        effect = attempt_effect(profile, Outcome(outcome), 0, mode=SendMode(mode))
        _FLAG_CACHE[key] = tuple(
            sorted(  # by phase, stably
                ((0 if r.phase == "dispatch" else 1, r.isolation, r.reachable)
                 for r in effect.reports),
                key=lambda f: f[0],
            )
        )  # fmt: skip
    return _FLAG_CACHE[key]


def report_rows(
    sends: pd.DataFrame, profile: str | None, config: EngineConfig, at: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """One row per updateFaultItem call, as columns, sorted by (time, event_id, phase), for the
    sends at the positions ``at`` (default: all): ``sends`` are admitted events, in that order
    already (:func:`udfs.engine._admission.admit`). Each send follows ``profile``, or its own
    ``client_profile`` with None. ``row`` is the send's position in ``sends``; ``broker_code``
    numbers each row's broker as in ``broker_names``. Taking the positions of a few columns
    costs far less than a copy of the frame with the sends counted."""
    chosen = np.arange(len(sends)) if at is None else at

    def numbered(column: str) -> tuple[np.ndarray, list[Any]]:
        values = pa.array(sends[column], from_pandas=True)
        return codes(values if at is None else values.take(at))

    times = sends["event_time"].to_numpy(np.int64)[chosen]
    assert (np.diff(times) >= 0).all(), "sends in event-time order"
    if profile is None:
        profiles = numbered("client_profile")
    else:
        profiles = (np.zeros(len(chosen), dtype=np.int64), [profile])
    outcomes, modes = numbered("outcome"), numbered("mode")
    brokers, broker_names = numbered("broker_name")
    coded = (profiles[0], outcomes[0], modes[0])
    names = (profiles[1], outcomes[1], modes[1])
    width = np.array([len(n) for n in names], dtype=np.int64)
    combo, combos = pd.factorize((coded[0] * width[1] + coded[1]) * width[2] + coded[2])
    flags = [
        _report_flags(
            config.profile(names[0][c // (width[1] * width[2])]),
            names[1][c // width[2] % width[1]],
            names[2][c % width[2]],
        )
        for c in combos.tolist()
    ]
    counts = np.array([len(f) for f in flags], dtype=np.int64)[combo]
    first = np.concatenate([[0], np.cumsum([len(f) for f in flags])])
    table = np.array([x for f in flags for x in f], dtype=np.int64).reshape(-1, 3)
    nth = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    among = np.repeat(np.arange(len(chosen)), counts)  # each row's send, among those at ``at``
    row = chosen[among]
    phase, isolation, reachable = table[first[combo[among]] + nth].T
    # the dispatch report is applied at the event's own time, just before its result: one
    # stamped earlier than its event could land behind updates written in an earlier batch, and
    # the tables would then depend on where batches are cut
    return {
        "time": times[among],
        "event_id": objects(sends["event_id"])[row],
        "phase": phase.astype(np.int8),
        "broker": objects(sends["broker_name"])[row],
        "broker_code": brokers[among],
        "broker_names": np.array(broker_names, dtype=object),  # each broker_code's name
        "latency": np.where(phase == 0, 0, sends["latency_ms"].to_numpy(np.int64)[row]),
        "isolation": isolation.astype(bool),
        "reachable": reachable.astype(bool),
        "outcome": np.array(names[1], dtype=object)[coded[1][among]],
        "profile": np.array(names[0], dtype=object)[coded[0][among]],
        "row": row,
    }


_FEW = 64
"""Up to this many rows, :meth:`ScopeTables.each_broker` groups them with a dict."""

_NO_ITEM = Item("", 0, NO_ITEM, True, NO_ITEM, False, "")
"""What a pair without a FaultItem before the batch starts from."""

_broker = operator.itemgetter(0)


def _by_broker(items: list[Item]) -> dict[str, Item]:
    """A table's items by broker, in the table's order."""
    return dict(zip(map(_broker, items), items, strict=True))


# --- one fault table ------------------------------------------------------------------------------


class _Items(Mapping[str, FaultItem]):
    """A key's FaultItems by broker as of a row, made when a decision reads them: most rows a
    decision replays are of brokers its selection never looks up (the cluster's table of a
    1,000-broker fleet meets most of them between two decisions). ``_later`` holds each such
    broker's latest row (or its item from before the batch), newer than what ``_made`` holds."""

    def __init__(self, scope: ScopeTables, init: dict[str, Item]) -> None:
        self._item = scope.item
        self._made: dict[str, FaultItem] = {}
        self._later: dict[str, int | Item] = dict(init)

    def update(self, rows: dict[str, int]) -> None:
        """Each broker's item is now that of its row in ``rows``."""
        self._later.update(rows)

    def _make(self, broker: str, later: int | Item) -> FaultItem:
        made = self._item(later) if isinstance(later, int) else _fault_item(later)
        self._made[broker] = made
        return made

    def get(self, broker: str, default: Any = None) -> Any:
        later = self._later.pop(broker, None)
        if later is not None:
            return self._make(broker, later)
        return self._made.get(broker, default)

    def __getitem__(self, broker: str) -> FaultItem:
        later = self._later.pop(broker, None)
        return self._made[broker] if later is None else self._make(broker, later)

    def __contains__(self, broker: object) -> bool:
        return broker in self._later or broker in self._made

    def _all(self) -> dict[str, FaultItem]:
        for broker, later in self._later.items():
            self._make(broker, later)
        self._later.clear()
        return self._made

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def pop(self, broker: str) -> None:
        self._later.pop(broker, None)
        self._made.pop(broker, None)


class _Table:
    """One scope key's FaultTable during a batch, for its routing decisions: the rows of the key
    (global positions into the scope's rows) replayed in order into snapshots."""

    def __init__(self, scope: ScopeTables, key: str, positions: np.ndarray) -> None:
        self.scope, self.key, self.positions = scope, key, positions
        self.tstate = scope.tstates[key]
        self.profile = scope.profiles[key]
        self.init = scope.init[key]
        self.order = _ConcurrentHashMapOrder(
            self.tstate.cap, [it.broker for it in self.tstate.items]
        )
        firsts = scope.each_broker(positions, last=False)
        self.insertions = sorted((p, b) for b, p in firsts.items() if b not in self.init)
        self.removals: list[tuple[str, int, int, str]] = []  # broker, pos, time, event_id
        self.removed_after: dict[str, int] = {}
        self.worst = self.tstate.worst
        self._size = len(self.tstate.items)
        self._current = _Items(scope, self.init)
        self._cursor = -1
        """``_current`` holds each broker's item as of row ``_cursor``: snapshots are taken in
        the order of the rows, so each row is applied once."""

    @functools.cached_property
    def by_broker(self) -> dict[str, np.ndarray]:
        """Each broker's rows, in order (only a stale decision or a removal reads them)."""
        positions = self.positions
        return _grouped(self.scope.broker_codes[positions], self.scope.broker_code_names, positions)

    def _present(self, broker: str, pos: int) -> FaultItem | None:
        positions = self.by_broker.get(broker)
        idx = -1 if positions is None else int(np.searchsorted(positions, pos, side="right")) - 1
        removed = self.removed_after.get(broker)
        if idx < 0:
            if removed is not None:
                return None
            it = self.init.get(broker)
            return None if it is None else _fault_item(it)
        assert positions is not None
        row = int(positions[idx])
        if removed is not None and row < removed:
            return None
        return self.scope.item(row)

    def _apply_insertions(self, pos: int) -> None:
        while self.insertions and self.insertions[0][0] <= pos:
            _, broker = self.insertions.pop(0)
            self._size += 1
            self.order.add(broker, self._size)

    def _advance(self, pos: int) -> None:
        """Apply this key's rows after ``_cursor`` up to ``pos``: the last one of each broker."""
        lo = int(np.searchsorted(self.positions, self._cursor, side="right"))
        hi = int(np.searchsorted(self.positions, pos, side="right"))
        self._current.update(self.scope.each_broker(self.positions[lo:hi], last=True))
        self._cursor = pos

    def snapshot(self, pos: int, rng: random.Random) -> FaultTable:
        self._apply_insertions(pos)
        if pos >= self._cursor:  # the table as it stands, read in place
            self._advance(pos)
            return FaultTable.over(
                self.profile, self._current, self.order, worst_index=self.worst, rng=rng
            )
        # a decision whose own update was stale: the table as it was at that row
        items = [item for b in self.order if (item := self._present(b, pos)) is not None]
        return FaultTable(
            self.profile, worst_index=self.worst, rng=rng, items=items, capacity=self.order.capacity
        )

    def remove(self, broker: str, pos: int, time: int, event_id: str) -> None:
        """pickOneAtLeast's broker had no write queues: RocketMQ removed it from the table."""
        self.removals.append((broker, pos, time, event_id))
        self.removed_after[broker] = pos + 1
        self.order.remove(broker)
        self._size -= 1
        positions = self.by_broker.get(broker)
        if positions is None or not ((positions > pos) & (positions <= self._cursor)).any():
            self._current.pop(broker)  # no later row of it is applied yet
        if positions is not None:
            later = positions[positions > pos]
            if len(later):
                self.insertions.append((int(later[0]), broker))
                self.insertions.sort()

    def final_order(self) -> _ConcurrentHashMapOrder:
        self._apply_insertions(2**62)
        return self.order


def _grouped(codes: np.ndarray, names: Any, positions: np.ndarray) -> dict[str, np.ndarray]:
    """The ``positions`` of each name, in order: ``codes`` gives each position's name."""
    order = np.argsort(codes, kind="stable")
    codes = codes[order]
    bounds = [0, *(np.flatnonzero(codes[1:] != codes[:-1]) + 1).tolist(), len(codes)]
    return {
        str(names[codes[a]]): positions[order[a:b]]
        for a, b in itertools.pairwise(bounds)
        if b > a  # none: no codes
    }


class Change(NamedTuple):
    """An availability change of a broker in a scope key's table, at the instant ``(time, order,
    event_id)`` (``order`` 0 for a deadline, 1 for an event): ``until`` is None for a
    ``RESTORE``."""

    time: int
    order: int
    event_id: str
    broker: str
    decision: str
    until: int | None


class DecisionRow(NamedTuple):
    """A ``broker_decisions`` row of a scope key's FaultTable, and its ``order`` at its instant
    (as :class:`Change`'s)."""

    key: str
    broker: str
    decision: str
    effective_at: int
    available_from: int
    reason: str
    cause: str
    order: int


class ScopeTables:
    """Every FaultTable of one scope during a batch, updated together: the rows of all keys are
    one set of arrays, so the cost is per row, not per key."""

    def __init__(
        self,
        scope: str,
        tstates: dict[str, Table],
        profiles: dict[str, Profile],
        rows: dict[str, np.ndarray],
        sends: pd.DataFrame,
    ) -> None:
        """``rows`` (from :func:`report_rows` over ``sends``, with a ``key`` column: each row's
        key by its place in ``profiles``) are sorted by (time, event_id, phase); ``profiles``
        gives each key's profile for this batch."""
        self.scope, self.tstates, self.profiles = scope, tstates, profiles
        key_codes, key_names = rows["key"], list(profiles)  # numbered in the profiles' order
        self.init: dict[str, dict[str, Item]] = {k: _by_broker(tstates[k].items) for k in key_names}
        brokers = rows["broker"]
        broker_codes, broker_names = rows["broker_code"], rows["broker_names"]
        width = max(len(broker_names), 1)
        # (key, broker) pairs, from each side's codes: any character may be in either name
        pair, pairs = pd.factorize(key_codes.astype(np.int64) * width + broker_codes)
        named = zip(
            np.array(key_names, dtype=object)[pairs // width].tolist(),
            broker_names[pairs % width].tolist(),
            strict=True,
        )
        self.pairs = [[k, b] for k, b in named]
        # each (key, broker) pair's FaultItem before the batch, looked up once per pair
        init_items = [self.init[k].get(b, _NO_ITEM) for k, b in self.pairs]
        updated = np.array([it.updated_at for it in init_items], dtype=np.int64)[pair]
        t = rows["time"]
        fresh = t >= updated
        self.stale = int((~fresh).sum())
        if self.stale:  # the pairs numbered again, in the order the fresh rows meet them
            pair, kept = pd.factorize(pair[fresh])
            self.pairs = [self.pairs[i] for i in kept.tolist()]
            init_items = [init_items[i] for i in kept.tolist()]
            key_codes = key_codes[fresh]
        self.pair = pair
        self._key_codes, self._key_names = key_codes, key_names
        self.broker = brokers[fresh]
        self.broker_codes = broker_codes[fresh]
        self.broker_code_names: list[str] = broker_names.tolist()
        self.time = t[fresh]
        self.event_id = rows["event_id"][fresh]
        self.phase = rows["phase"][fresh]
        self.latency = rows["latency"][fresh]
        self.isolation = rows["isolation"][fresh]
        self.reachable = rows["reachable"][fresh]
        self.outcome = rows["outcome"][fresh]
        self.sends, self.row = sends, rows["row"][fresh]
        n = len(self.time)
        by_name = {p.name: p for p in profiles.values()}
        self.profile_names = list(by_name)
        number = {name: i for i, name in enumerate(self.profile_names)}
        key_profile = np.array([number[profiles[k].name] for k in key_names], dtype=np.int64)
        self.profile_code = key_profile[key_codes]
        """Each row's profile, numbered as in ``profile_names``."""
        _, _, start, _, _, pending, cause = list(zip(*init_items, strict=True)) or [()] * 7
        self.init_start = np.array(start, dtype=np.int64)
        self.init_pending = np.array(pending, dtype=bool)
        self.init_cause = np.array(cause, dtype=object)
        self.dur = np.zeros(n, dtype=np.int64)
        self.start = np.zeros(n, dtype=np.int64)
        by_pair = np.lexsort((np.arange(n), self.pair))
        first = np.ones(n, dtype=bool)
        first[1:] = self.pair[by_pair][1:] != self.pair[by_pair][:-1]
        for code, profile in enumerate(by_name.values()):
            mine = self.profile_code == code
            self.dur[mine] = not_available_durations(
                profile, self.latency[mine], self.isolation[mine]
            )
            sel = by_pair[mine[by_pair]]
            initial = self.init_start[self.pair[sel]]
            self.start[sel] = start_timestamps(
                profile,
                first[mine[by_pair]],
                np.where(initial == NO_ITEM, 0, initial),
                self.time[sel],
                self.dur[sel],
            )
        self._by_key: tuple[dict[str, int], np.ndarray, np.ndarray] | None = None
        self._fields: list[list[Any]] | None = None
        self.views: dict[str, _Table] = {}
        self._results: dict[str, int] | None = None

    def positions(self, key: str) -> np.ndarray:
        """The key's rows, in order."""
        if self._by_key is None:  # the rows sorted by key once; a key's are a slice of them
            names = {name: code for code, name in enumerate(self._key_names)}
            ends = np.cumsum(np.bincount(self._key_codes, minlength=len(names)))
            self._by_key = (names, np.argsort(self._key_codes, kind="stable"), ends)
        names, order, ends = self._by_key
        code = names.get(key)
        if code is None:
            return np.zeros(0, dtype=np.int64)
        return order[(int(ends[code - 1]) if code else 0) : int(ends[code])]

    def item(self, row: int) -> FaultItem:
        """The FaultItem row ``row`` leaves."""
        if self._fields is None:
            columns = (self.broker, self.latency, self.start, self.reachable, self.time)
            self._fields = [c.tolist() for c in columns]
        broker, latency, start, reachable, time = self._fields
        return FaultItem(broker[row], latency[row], start[row], reachable[row], time[row])

    def view(self, key: str) -> _Table | None:
        """The key's table for routing decisions; None when the key has no rows this batch."""
        if key not in self.init:
            return None
        if key not in self.views:
            self.views[key] = _Table(self, key, self.positions(key))
        return self.views[key]

    def each_broker(self, rows: np.ndarray, last: bool) -> dict[str, int]:
        """The brokers of ``rows`` (positions, in order), each with its first row there, or
        with ``last`` its last, in the order the brokers first appear."""
        if len(rows) <= _FEW:  # a dict is quicker than numpy for a few rows
            brokers, at = self.broker[rows].tolist(), rows.tolist()
            if last:
                return dict(zip(brokers, at, strict=True))
            firsts = dict(zip(reversed(brokers), reversed(at), strict=True))
            return dict(reversed(firsts.items()))
        codes, at, n = self.broker_codes[rows], np.arange(len(rows)), len(rows)
        first = np.full(len(self.broker_code_names), n)
        np.minimum.at(first, codes, at)
        met = np.flatnonzero(first < n)
        met = met[np.argsort(first[met])]
        if last:
            ends = np.zeros(len(first), dtype=np.int64)
            np.maximum.at(ends, codes, at)
            chosen = ends[met]
        else:
            chosen = first[met]
        names = self.broker_code_names
        return dict(zip([names[c] for c in met.tolist()], rows[chosen].tolist(), strict=True))

    def position_of(self, event_id: str) -> int:
        """The position of the result row of a retried send (its own update comes before its
        decision): only a send that was not ``SEND_OK`` is retried."""
        if self._results is None:
            results = (self.phase == 1) & (self.outcome != Outcome.SEND_OK.value)
            self._results = dict(
                zip(
                    self.event_id[results].tolist(),
                    np.flatnonzero(results).tolist(),
                    strict=True,
                )
            )
        return self._results.get(event_id, -1)

    def finish(self, cluster: str, clock_end: int, out: Out) -> dict[str, list[Change]]:
        """Emit fault_items and broker_decisions; store the tables; return each key's
        availability changes for the routing table."""
        out.add(TableName.FAULT_ITEMS, self._fault_items(cluster))
        n = len(self.time)
        pair = self.pair
        order = np.arange(n, dtype=np.float64)
        removal = np.zeros(n, dtype=bool)
        cols = {
            "time": self.time,
            "event_id": self.event_id,
            "start": self.start,
            "latency": self.latency,
            "isolation": self.isolation,
            "reachable": self.reachable,
            "dur": self.dur,
            "outcome": self.outcome,
        }
        removals = [(k, r) for k, v in self.views.items() for r in v.removals]
        if removals:
            index = {tuple(p): i for i, p in enumerate(self.pairs)}
            extra_pair = []
            for k, (b, _p, _t, _e) in removals:
                if (k, b) not in index:
                    index[(k, b)] = len(self.pairs)
                    self.pairs.append([k, b])
                    it = self.init[k].get(b)
                    self.init_start = np.append(self.init_start, it.start if it else NO_ITEM)
                    self.init_pending = np.append(self.init_pending, it.pending if it else False)
                    self.init_cause = np.append(self.init_cause, it.cause if it else "")
                extra_pair.append(index[(k, b)])
            pair = np.append(pair, extra_pair)
            order = np.append(order, [p + 0.5 for _, (_b, p, _t, _e) in removals])
            removal = np.append(removal, np.ones(len(removals), dtype=bool))
            extras = {
                "time": [t for _, (_b, _p, t, _e) in removals],
                "event_id": [e for _, (_b, _p, _t, e) in removals],
                "start": [NO_ITEM] * len(removals),
                "latency": [0] * len(removals),
                "isolation": [False] * len(removals),
                "reachable": [True] * len(removals),
                "dur": [0] * len(removals),
                "outcome": [""] * len(removals),
            }
            cols = {c: np.append(v, np.asarray(extras[c], dtype=v.dtype)) for c, v in cols.items()}
        decisions, last = _decide(
            pair,
            order,
            removal,
            cols,
            self.init_start,
            self.init_pending,
            self.init_cause,
            clock_end,
        )
        by_key: dict[str, dict[str, Item]] = {}
        for p, values in last.items():
            k, b = self.pairs[p]
            by_key.setdefault(k, {})[b] = item_of((b, *values))
        keyed = []
        for p, d, at, until, why, cause, o in decisions:
            k, b = self.pairs[p]
            keyed.append(DecisionRow(k, b, d, at, until, why, cause, o))
        for key in self.init:
            self._store(key, by_key.get(key, {}), clock_end, keyed)
        return emit(self.scope, cluster, self.profiles.__getitem__, keyed, out)

    def _fault_items(self, cluster: str) -> pa.Table:
        """A row per update, the sends' own texts taken from their Arrow columns."""
        n, row = len(self.time), pa.array(self.row)
        lines = {p.name: p.line for p in self.profiles.values()}
        names = self.profile_names
        line5 = np.array([lines[name] == "5" for name in names], dtype=bool)[self.profile_code]

        def sent(column: str) -> pa.Array:
            return pa.array(self.sends[column], pa.large_string(), from_pandas=True).take(row)

        def constant(value: str) -> pa.Array:
            return pa.nulls(n, pa.string()).fill_null(value)

        def texts(codes: np.ndarray, names: Any) -> pa.Array:
            return pa.DictionaryArray.from_arrays(codes.astype(np.int32), list(names)).cast(
                pa.string()
            )

        columns = {
            "scope": constant(self.scope),
            "scope_key": constant(cluster) if self.scope == CLUSTER else sent("producer_id"),
            "cluster": constant(cluster),
            "broker_name": sent("broker_name"),
            "event_id": sent("event_id"),
            "event_time": self.time,
            "latency_ms": self.latency,
            "isolation": self.isolation,
            "reachable": np.where(line5, self.reachable, True),
            "not_available_ms": self.dur,
            "available_from": self.start,
            "profile": texts(self.profile_code, names),
            "outcome": sent("outcome"),
            "phase": texts(self.phase, ["dispatch", "result"]),
            "producer_id": sent("producer_id"),
            "attempt": self.sends["attempt"].to_numpy(np.int64)[self.row],
            "message_id": sent("message_id"),
        }
        schema = TABLES[TableName.FAULT_ITEMS]
        return pa.table([pa.array(columns[f.name]).cast(f.type) for f in schema], schema=schema)

    def _store(
        self,
        key: str,
        last: dict[str, Item],
        clock_end: int,
        decisions: list[DecisionRow],
    ) -> None:
        """The key's items after the batch, in the table's iteration order; isolations of
        brokers without updates that ran out on the clock end. ``last``: the item each broker
        of its rows left, in the order of the (key, broker) pairs, which is the order the rows
        meet them."""
        tstate = self.tstates[key]
        init = self.init[key]
        view = self.views.get(key)
        if view is not None:
            names = list(view.final_order())
            tstate.cap = view.order.capacity
            tstate.worst = view.worst
        else:  # no routing decision read it: the brokers it meets for the first time join it
            names = list(init)  # where they first appear (as _Table)
            new = [b for b in last if b not in init]  # no view: no broker left the table
            if new:
                names, tstate.cap = _ConcurrentHashMapOrder.joined(tstate.cap, names, new)
        if tstate.due is None or tstate.due > clock_end:  # no isolation it kept ran out
            tstate.items = list(map((init | last).__getitem__, names))
        else:
            tstate.items = _settle(key, names, last, init, clock_end, decisions)
        tstate.due = _due(tstate.items)


def _settle(
    key: str,
    names: list[str],
    last: dict[str, Item],
    init: dict[str, Item],
    clock_end: int,
    decisions: list[DecisionRow],
) -> list[Item]:
    items = []
    for b in names:
        if b in last:
            items.append(last[b])
            continue
        it = init[b]
        if it.pending and it.start <= clock_end:
            why = "isolation ended"
            decisions.append(
                DecisionRow(key, b, Decision.RESTORE, it.start, it.start, why, it.cause, 0)
            )
            it = it._replace(pending=False)
        items.append(it)
    return items


def _due(items: list[Item]) -> int | None:
    return min((it.start for it in items if it.pending), default=None)


def _fault_item(it: Item) -> FaultItem:
    return FaultItem(it.broker, it.latency, it.start, it.reachable, it.updated_at)


def expire_idle(key: str, tstate: Table, clock_end: int, decisions: list[DecisionRow]) -> None:
    """A table without rows this batch: isolations that ran out on the clock end."""
    if tstate.due is None or tstate.due > clock_end:
        return
    init = _by_broker(tstate.items)
    tstate.items = _settle(key, list(init), {}, init, clock_end, decisions)
    tstate.due = _due(tstate.items)


def emit(
    scope: str,
    cluster: str,
    profile_of: Callable[[str], Profile],
    decisions: list[DecisionRow],
    out: Out,
) -> dict[str, list[Change]]:
    """broker_decisions rows; each key's availability changes for the routing table."""
    changes: dict[str, list[Change]] = {}
    for x in decisions:
        until = None if x.decision == Decision.RESTORE else x.available_from
        changes.setdefault(x.key, []).append(
            Change(x.effective_at, x.order, x.cause, x.broker, x.decision, until)
        )
    if decisions:
        keys, brokers, kinds, at, since, reasons, causes, _ = zip(*decisions, strict=True)
        n = len(decisions)
        columns = {
            "scope": [scope] * n,
            "scope_key": keys,
            "cluster": [cluster] * n,
            "broker_name": brokers,
            "decision": kinds,
            "effective_at": at,
            "available_from": since,
            "reason": reasons,
            "cause_event_id": causes,
            "profile": [profile_of(k).name for k in keys],
        }
        schema = TABLES[TableName.BROKER_DECISIONS]
        out.add(
            TableName.BROKER_DECISIONS,
            pa.table([pa.array(columns[f.name], f.type) for f in schema], schema=schema),
        )
    return changes


def _decide(
    pair: np.ndarray,
    order: np.ndarray,
    removal: np.ndarray,
    cols: dict[str, np.ndarray],
    init_start: np.ndarray,
    init_pending: np.ndarray,
    init_cause: np.ndarray,
    clock_end: int,
) -> tuple[list[tuple[int, str, int, int, str, str, int]], dict[int, tuple[Any, ...]]]:
    """Availability changes per (key, broker) pair from its sequence of starts (vectorized), and
    each pair's final item but its broker (:class:`Item`'s other fields).
    Decisions are ``(pair, decision, effective_at, available_from, reason, cause, order)``."""
    if len(pair) == 0:
        return [], {}
    by = np.lexsort((order, pair))
    p = pair[by]
    t = cols["time"][by]
    start = cols["start"][by]
    eid = cols["event_id"][by]
    removal = removal[by]
    first = np.ones(len(p), dtype=bool)
    first[1:] = p[1:] != p[:-1]
    group = p  # each row's pair: its initial values are indexed by it
    iso = start > t
    prev_start = np.where(first, init_start[group], np.roll(start, 1))
    prev_iso = np.where(first, init_pending[group], np.roll(iso, 1))
    changed = first & (start != init_start[group]) | ~first & (start != np.roll(start, 1))
    changed |= removal
    run = np.cumsum(first) - 1
    # each row's cause: the event of the latest change of its pair's run so far, else the
    # pair's own from before the batch
    latest = np.maximum.accumulate(np.where(changed, np.arange(len(p)), -1))
    run_start = np.flatnonzero(first)[run]
    cause_arr = np.where(latest >= run_start, eid[np.maximum(latest, 0)], init_cause[group])
    prev_cause = np.where(first, init_cause[group], np.roll(cause_arr, 1))
    still = prev_iso & (prev_start > t)
    expired = prev_iso & (prev_start <= t)
    isolate = ~still & iso
    extend = still & iso & (start > prev_start)
    shorten = still & iso & (start < prev_start)
    cleared = still & ~iso
    latency = cols["latency"][by]
    reachable = cols["reachable"][by]
    outcome = cols["outcome"][by]
    isolation = cols["isolation"][by]
    duration = cols["dur"][by]

    def why(i: int) -> str:
        what = f"{outcome[i]} after {latency[i]} ms"
        if isolation[i]:
            what += " (isolation)"
        return f"{what}: not available for {duration[i]} ms"

    decisions: list[tuple[int, str, int, int, str, str, int]] = []
    for i in np.flatnonzero(expired).tolist():
        decisions.append(
            (int(p[i]), Decision.RESTORE, int(prev_start[i]), int(prev_start[i]), "isolation ended",
             prev_cause[i], 0)
        )  # fmt: skip
    for mask, name in (
        (isolate, Decision.ISOLATE),
        (extend, Decision.EXTEND),
        (shorten, Decision.SHORTEN),
    ):
        for i in np.flatnonzero(mask).tolist():
            decisions.append((int(p[i]), name, int(t[i]), int(start[i]), why(i), eid[i], 1))
    for i in np.flatnonzero(cleared).tolist():
        reason = (
            "removed from the fault table: pickOneAtLeast's broker has no write queues in the route"
            if removal[i]
            else "a later update ended the isolation at once (4.x overwrite)"
        )
        decisions.append((int(p[i]), Decision.RESTORE, int(t[i]), int(t[i]), reason, eid[i], 1))
    ends = np.append(np.flatnonzero(first)[1:], len(p)) - 1
    ends = ends[~removal[ends]]  # a broker that left the table: a later update re-adds it
    pending = iso[ends]
    ran_out = pending & (start[ends] <= clock_end)
    for i in ends[ran_out].tolist():
        decisions.append(
            (int(p[i]), Decision.RESTORE, int(start[i]), int(start[i]), "isolation ended",
             cause_arr[i], 0)
        )  # fmt: skip
    last = dict(
        zip(
            p[ends].tolist(),
            zip(
                latency[ends].tolist(),
                start[ends].tolist(),
                reachable[ends].tolist(),
                t[ends].tolist(),
                (pending & ~ran_out).tolist(),
                [c or "" for c in cause_arr[ends].tolist()],
                strict=True,
            ),
            strict=True,
        )
    )
    return decisions, last
