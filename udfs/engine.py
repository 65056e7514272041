"""The per-cluster state machine behind the streaming job, free of Spark.

:func:`advance` takes one cluster's state and a batch of its valid events (a pandas frame, rows in
any order) and returns the new state and the rows for each output table. The Spark layer only
converts; every decision is made here with :mod:`udfs.rocketmq`.

Time. Each cluster has its own event-time clock: the largest accepted event time. Deadlines
(an isolation ending, a NameServer scan dropping a broker) fire when the clock reaches them, before
any event at the same time, so the same events give the same rows however they are split into
batches. An event older than ``clock - allowed_lateness`` is late: it is kept in ``late_events``
and changes nothing. An event more than ``max_future_skew`` after its record's ingest time (the
Kafka timestamp, the file's time) is from the future and quarantined: judged per record, so a
cluster that was silent for hours is not locked out when it sends again. An event whose
``event_id`` was already applied is a duplicate: counted, and changes nothing. The ids of the
events within the allowed lateness are kept for that; older ones would be late anyway.

Hot path. FaultItem updates, isolation windows and decisions are computed per broker with numpy
(:mod:`udfs.rocketmq._vector`); Python runs per *decision point* only (a failed attempt that will
be retried, a route change, a heartbeat), where the real :func:`select_queue` is called on a
:class:`FaultTable` rebuilt for that moment.

Delay queues. Failed sends, consumer send-backs and delayed sends enter the delay queues of
:mod:`udfs.schedule`, which wait in the state and are released on the same clock.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from udfs.rocketmq import (
    PROFILES,
    FaultItem,
    FaultTable,
    MessageQueue,
    Next,
    Outcome,
    Profile,
    SendMode,
    TopicPublishInfo,
    attempt_effect,
    select_queue,
)
from udfs.rocketmq._fault import _ConcurrentHashMapOrder
from udfs.rocketmq._vector import not_available_durations, start_timestamps
from udfs.schedule import DelayPolicy, Schedule
from udfs.schema import TABLES

STATE_VERSION = 3
CLUSTER = "cluster"
PRODUCER = "producer"
SCOPES = (CLUSTER, PRODUCER)
NO_ITEM = -(2**62)
"""``start`` of a broker removed from a table: available, not isolated."""

Route = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class EngineConfig:
    """What the state machine needs to know besides the events."""

    scopes: tuple[str, ...] = SCOPES
    cluster_profile: str = "rocketmq-5"
    """The profile of the shared cluster-wide view (5.x extends isolations; 4.x would let any
    fast success from any producer clear them)."""
    default_client_profile: str = "rocketmq-4.9"
    default_latency_fault_enable: bool = True
    allowed_lateness_ms: int = 60_000
    max_future_skew_ms: int = 3_600_000
    heartbeat_timeout_ms: int = 120_000
    scan_interval_ms: int = 10_000
    static_routes: Mapping[str, Route] = field(default_factory=dict)
    profiles: Mapping[str, Profile] = field(default_factory=lambda: dict(PROFILES))
    seed: int = 0
    delays: DelayPolicy = field(default_factory=DelayPolicy)

    def profile(self, name: str) -> Profile:
        return self.profiles[name]

    def broker_profile(self, name: Any) -> Profile:
        """The profile of the brokers a consumer sends back to: the event's ``client_profile``
        (the version of the cluster it talks to) or else ``cluster_profile``."""
        return self.profiles[name if isinstance(name, str) and name else self.cluster_profile]


def new_state() -> dict[str, Any]:
    return {
        "v": STATE_VERSION,
        "clock": None,
        "tables": {CLUSTER: {}, PRODUCER: {}},
        "pubinfo": {},
        "routes": {},
        "heartbeats": {},
        "routing_table": {},
        "schedule": {},
        "seen": {},
    }


def dumps(state: Mapping[str, Any]) -> str:
    return json.dumps(state, separators=(",", ":"), sort_keys=True)


def loads(text: str) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(text)
    if state.get("v") == 1:  # version 1 kept no event ids: nothing applied before is known
        state = {**state, "v": 2, "seen": {}}
    if state.get("v") == 2:  # version 2 kept whole routes where version 3 keeps their digests
        state = {
            **state,
            "v": 3,
            "pubinfo": {k: _compact_pubinfo(p) for k, p in state["pubinfo"].items()},
            "routing_table": {
                k: {topic: _digest(sig) for topic, sig in sigs.items()}
                for k, sigs in state["routing_table"].items()
            },
        }
    if state.get("v") != STATE_VERSION:
        raise ValueError(
            f"state schema version {state.get('v')} is not {STATE_VERSION}: this checkpoint was "
            "written by another faultline version; start from a new checkpoint"
        )
    return state


def _digest(value: Any) -> str:
    """A short fingerprint of a JSON value: what the state keeps of a route or a routing table."""
    text = json.dumps(value, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _queues(route: Route) -> list[list[Any]]:
    """The queues of a fresh TopicPublishInfo for ``route``."""
    return [[q.broker_name, q.queue_id] for q in TopicPublishInfo.from_route(route).queues]


def _compact_pubinfo(pub: dict[str, Any]) -> dict[str, Any]:
    """A version 2 publish info (whole route and queues) as version 3 keeps it: the route's
    digest, and the queues only where they differ from the route's own."""
    route = tuple((b, int(w), int(p)) for b, w, p in pub["route"])
    queues = pub["queues"] if pub["queues"] != _queues(route) else None
    return {"route": _digest(pub["route"]), "queues": queues, "index": pub["index"],
            "seed": pub["seed"]}  # fmt: skip


def _rng(seed: int, *parts: object) -> random.Random:
    digest = hashlib.blake2b("\x1f".join(map(str, (seed, *parts))).encode(), digest_size=8)
    return random.Random(int.from_bytes(digest.digest(), "big"))


# --- the step ---------------------------------------------------------------------------------


@dataclass
class Step:
    state: dict[str, Any]
    tables: dict[str, pa.Table]
    """Each output table's rows (only tables that got some), typed by ``udfs.schema.TABLES``."""
    stats: dict[str, int]


def advance(
    cluster: str, state: dict[str, Any] | None, events: pd.DataFrame, config: EngineConfig
) -> Step:
    """Apply one batch of a cluster's events. ``events`` has the parsed event columns (see
    ``streaming.schema.EVENT_COLUMNS``) and may be empty (nothing changes then)."""
    state = state if state is not None else new_state()
    out = _Out()
    out.stats["input"] = len(events)
    events = _quarantine(events, out)
    first_batch = state["clock"] is None
    events = _admit(cluster, state, events, _arrival_order(events), config, out)
    if len(events) == 0:
        return Step(state, out.frames(), out.stats)
    clock_end = int(state["clock"])
    sends = _with_defaults(events[events["kind"] == "send_result"], config)
    after = _next_steps(sends, config)
    run = _Run(cluster, state, config, out, clock_end)
    if first_batch:
        run.first_event = (int(events["event_time"].iloc[0]), str(events["event_id"].iloc[0]))
    for scope in config.scopes:
        run.prepare_tables(scope, sends)
    run.timeline(events, sends[after == Next.RETRY].assign(kind="decision"))
    for scope in config.scopes:
        run.finish_tables(scope)
    run.routing_table()
    _schedule(cluster, state, events, sends, after, config, out)
    out.stats["valid"] += len(events)
    return Step(state, out.frames(), out.stats)


def _next_steps(sends: pd.DataFrame, config: EngineConfig) -> np.ndarray:
    """What each producer did after each attempt (:class:`Next`): a failed attempt with attempts
    left is a routing decision; one after which it gave up is a failed message."""
    after = np.full(len(sends), Next.RETURN, dtype=object)
    failed = np.flatnonzero(sends["outcome"].to_numpy() != "SEND_OK")
    r: Any
    for i, r in zip(failed, sends.iloc[failed].itertuples(index=False), strict=True):
        effect = attempt_effect(
            config.profile(r.client_profile),
            Outcome(r.outcome),
            int(r.latency_ms),
            mode=SendMode(r.mode),
            attempt=int(r.attempt),
            attempts_total=None if pd.isna(r.max_attempts) else int(r.max_attempts),
            response_code=None if pd.isna(r.response_code) else int(r.response_code),
        )
        after[i] = effect.next
    return after


def _schedule(
    cluster: str,
    state: dict[str, Any],
    events: pd.DataFrame,
    sends: pd.DataFrame,
    after: np.ndarray,
    config: EngineConfig,
    out: _Out,
) -> None:
    """Messages into the delay queues, and the due ones out, at the batch's clock."""
    schedule = Schedule(
        cluster, state.setdefault("schedule", {}), config.delays, config.broker_profile
    )
    schedule.send_failures(sends[after == Next.FAIL])
    delayed = (after == Next.RETURN) & (sends["delay_level"].fillna(0).to_numpy() > 0)
    schedule.delayed_sends(sends[delayed])
    retry = (events["kind"] == "consume_result") & (events["status"] == "RECONSUME_LATER")
    schedule.consume_retries(events[retry])
    schedule.release(int(state["clock"]))
    out.rows("schedule_entries", schedule.entries)
    out.rows("redeliveries", schedule.redeliveries)


def _with_defaults(sends: pd.DataFrame, config: EngineConfig) -> pd.DataFrame:
    return sends.assign(
        client_profile=sends["client_profile"].fillna(config.default_client_profile),
        latency_fault_enable=sends["latency_fault_enable"]
        .fillna(config.default_latency_fault_enable)
        .astype(bool),
        mode=sends["mode"].fillna("SYNC"),
        attempt=sends["attempt"].fillna(0).astype(np.int64),
        latency_ms=sends["latency_ms"].fillna(0).astype(np.int64),
    )


class _Out:
    """Rows per output table, collected as lists of frames."""

    def __init__(self) -> None:
        self.parts: dict[str, list[pd.DataFrame]] = {}
        self.records: dict[str, list[dict[str, Any]]] = {}
        self.stats = {
            "input": 0,
            "valid": 0,
            "late": 0,
            "quarantined": 0,
            "duplicates": 0,
            "stale": 0,
        }

    def add(self, table: str, frame: pd.DataFrame) -> None:
        if len(frame):
            self.parts.setdefault(table, []).append(frame)

    def rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Rows made one decision at a time; they become one table at the end."""
        self.records.setdefault(table, []).extend(rows)

    def frames(self) -> dict[str, pa.Table]:
        """Each table's rows, typed by its schema, so a column's type never depends on the
        rows. Nested lists already made as Arrow arrays (a routing table shared by many scope
        keys) are joined as they are."""
        tables = {}
        for name in [*self.parts, *(n for n in self.records if n not in self.parts)]:
            schema = TABLES[name]
            pieces = [
                pa.Table.from_pandas(f, schema=schema, preserve_index=False)
                for f in self.parts.get(name, [])
            ]
            rows = self.records.get(name)
            if rows:
                pieces.append(_from_rows(rows, schema))
            if pieces:
                tables[name] = pa.concat_tables(pieces)
        self.records = {}
        return tables


def _from_rows(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    columns = {}
    for column in schema:
        values = [r[column.name] for r in rows]
        if isinstance(values[0], pa.Array):
            columns[column.name] = pa.concat_arrays(values).cast(column.type)
        else:
            columns[column.name] = pa.array(values, type=column.type)
    return pa.table(columns, schema=schema)


def _quarantine_rows(records: pd.DataFrame, code: Any, reason: Any) -> pd.DataFrame:
    """``quarantine`` rows for records, keeping each one's raw text and origin."""
    return pd.DataFrame(
        {
            "raw": records["raw"].to_numpy(),
            "origin": records["origin"].to_numpy(),
            "reason_code": np.asarray(code, dtype=object) if not isinstance(code, str) else code,
            "reason": np.asarray(reason, dtype=object),
            "seen_at": records["ingest_ms"].to_numpy(np.int64),
        }
    )


def _quarantine(events: pd.DataFrame, out: _Out) -> pd.DataFrame:
    """Records the parser rejected go to quarantine as they are."""
    bad = events["reason_code"].notna().to_numpy()
    if bad.any():
        rejected = events[bad]
        out.add(
            "quarantine", _quarantine_rows(rejected, rejected["reason_code"], rejected["reason"])
        )
        out.stats["quarantined"] += int(bad.sum())
        events = events[~bad]
    return events


def _arrival_order(events: pd.DataFrame) -> np.ndarray:
    """Positions of the events by (event_time, event_id); the raw text breaks ties between
    records that repeat an event id, so which one is applied does not depend on the order in
    which Spark hands them over."""
    t = events["event_time"].to_numpy(np.int64)
    ids, _ = pd.factorize(events["event_id"], sort=True)
    order = np.lexsort((ids, t))
    same = (np.diff(t[order]) == 0) & (np.diff(ids[order]) == 0)
    if same.any():
        raw, _ = pd.factorize(events["raw"], sort=True)
        order = np.lexsort((raw, ids, t))
    return order


_RECORD_COLUMNS = ("raw", "origin", "reason_code", "reason")
"""What only quarantine and late_events keep of a record; the rest of the engine goes without."""


def _admit(
    cluster: str,
    state: dict[str, Any],
    events: pd.DataFrame,
    order: np.ndarray,
    config: EngineConfig,
    out: _Out,
) -> pd.DataFrame:
    """Split off late events, events from the future and repeated events; advance the clock and
    remember the ids of the events within the allowed lateness. Returns the admitted events in
    ``order``, without the record's own columns."""
    t = events["event_time"].to_numpy(np.int64)[order]
    clock = state["clock"]
    late = np.zeros(len(t), dtype=bool) if clock is None else t < clock - config.allowed_lateness_ms
    ingest = events["ingest_ms"].to_numpy(np.float64, na_value=np.nan)[order]
    future = ~late & ~np.isnan(ingest) & (t > np.nan_to_num(ingest) + config.max_future_skew_ms)
    seen: dict[str, int] = state["seen"]
    candidates = ~late & ~future
    ids = events["event_id"].to_numpy(object)[order]
    repeated = np.zeros(len(t), dtype=bool)
    if candidates.any():
        chosen = pd.Series(ids[candidates], dtype=object)
        repeated[candidates] = (chosen.duplicated() | chosen.isin(seen)).to_numpy(bool)
    if late.any():
        lf = events.iloc[order[late]]
        out.add(
            "late_events",
            pd.DataFrame(
                {
                    "cluster": cluster,
                    "event_id": lf["event_id"].to_numpy(),
                    "kind": lf["kind"].to_numpy(),
                    "event_time": lf["event_time"].to_numpy(np.int64),
                    "clock": np.int64(clock),
                    "raw": lf["raw"].to_numpy(),
                    "origin": lf["origin"].to_numpy(),
                }
            ),
        )
        out.stats["late"] += int(late.sum())
    if future.any():
        ff = events.iloc[order[future]]
        reasons = [
            f"event_time {v} is more than {config.max_future_skew_ms} ms after the record's "
            f"ingest time {int(i)} (its Kafka timestamp or its file's time)"
            for v, i in zip(ff["event_time"], ff["ingest_ms"], strict=True)
        ]
        out.add("quarantine", _quarantine_rows(ff, "FUTURE_EVENT_TIME", reasons))
        out.stats["quarantined"] += int(future.sum())
    out.stats["duplicates"] += int(repeated.sum())
    keep = candidates & ~repeated
    columns = [c for c in events.columns if c not in _RECORD_COLUMNS]
    admitted = events[columns].take(order[keep]).reset_index(drop=True)
    if len(admitted):
        admitted_t = t[keep]
        latest = int(admitted_t.max())
        state["clock"] = latest if clock is None else max(int(clock), latest)
        horizon = state["clock"] - config.allowed_lateness_ms
        fresh = admitted_t >= horizon
        kept = {k: v for k, v in seen.items() if v >= horizon}
        kept.update(zip(ids[keep][fresh].tolist(), admitted_t[fresh].tolist(), strict=True))
        state["seen"] = kept
    return admitted


# --- report rows --------------------------------------------------------------------------------

_FLAG_CACHE: dict[tuple[str, str, str], tuple[tuple[int, bool, bool], ...]] = {}


def _report_flags(profile: Profile, outcome: str, mode: str) -> tuple[tuple[int, bool, bool], ...]:
    """(phase, isolation, reachable) of each updateFaultItem call the outcome makes; phase 0 is
    the ASYNC dispatch report, 1 the result."""
    key = (profile.name, outcome, mode)
    if key not in _FLAG_CACHE:
        effect = attempt_effect(profile, Outcome(outcome), 0, mode=SendMode(mode))
        _FLAG_CACHE[key] = tuple(
            (0 if r.phase == "dispatch" else 1, r.isolation, r.reachable) for r in effect.reports
        )
    return _FLAG_CACHE[key]


def _report_rows(
    sends: pd.DataFrame, profile_names: pd.Series, config: EngineConfig
) -> pd.DataFrame:
    """One row per updateFaultItem call, sorted by (time, event_id, phase)."""
    profile = profile_names.to_numpy(object)
    outcome = sends["outcome"].to_numpy(object)
    mode = sends["mode"].to_numpy(object)
    combo, combos = pd.factorize(
        pd.Series(profile + "|" + outcome + "|" + mode, dtype=object), sort=False
    )
    flags = [_report_flags(config.profile(p), o, m) for p, o, m in (c.split("|") for c in combos)]
    counts = np.array([len(f) for f in flags], dtype=np.int64)[combo]
    first = np.concatenate([[0], np.cumsum([len(f) for f in flags])])
    table = np.array([x for f in flags for x in f], dtype=np.int64).reshape(-1, 3)
    row = np.repeat(np.arange(len(sends)), counts)
    nth = np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts)
    phase, isolation, reachable = table[first[combo[row]] + nth].T
    latency = sends["latency_ms"].to_numpy(np.int64)[row]
    t = sends["event_time"].to_numpy(np.int64)[row]
    event_id = sends["event_id"].to_numpy(object)[row]
    ids, _ = pd.factorize(pd.Series(event_id, dtype=object), sort=True)
    order = np.lexsort((phase, ids, t))
    row, phase = row[order], phase[order]
    return pd.DataFrame(
        {
            # the dispatch report is applied at the event's own time, just before its result: one
            # stamped earlier than its event could land behind updates written in an earlier
            # batch, and the tables would then depend on where batches are cut
            "time": t[order],
            "event_id": pd.Series(event_id[order], dtype=object),
            "phase": phase.astype(np.int8),
            "broker": pd.Series(sends["broker_name"].to_numpy(object)[row], dtype=object),
            "latency": np.where(phase == 0, 0, latency[order]),
            "isolation": isolation[order].astype(bool),
            "reachable": reachable[order].astype(bool),
            "outcome": pd.Series(outcome[row], dtype=object),
            "profile": pd.Series(profile[row], dtype=object),
            "producer_id": pd.Series(sends["producer_id"].to_numpy(object)[row], dtype=object),
        }
    )


# --- one fault table ------------------------------------------------------------------------------


class _Table:
    """One scope key's FaultTable during a batch, for its routing decisions: the rows of the key
    (global positions into the scope's rows) replayed in order into snapshots."""

    def __init__(self, scope: _ScopeTables, key: str, positions: np.ndarray) -> None:
        self.scope, self.key, self.positions = scope, key, positions
        self.tstate = scope.tstates[key]
        self.profile = scope.profiles[key]
        self.init = scope.init[key]
        brokers = scope.broker[positions]
        by: dict[str, list[int]] = {}
        for b, p in zip(brokers.tolist(), positions.tolist(), strict=True):
            by.setdefault(b, []).append(p)
        self.by_broker = {b: np.asarray(p, dtype=np.int64) for b, p in by.items()}
        self.order = _ConcurrentHashMapOrder(
            self.tstate["cap"], [it[0] for it in self.tstate["items"]]
        )
        self.insertions = sorted(
            (int(p[0]), b) for b, p in self.by_broker.items() if b not in self.init
        )
        self.removals: list[tuple[str, int, int, str]] = []  # broker, pos, time, event_id
        self.removed_after: dict[str, int] = {}
        self.worst = self.tstate["worst"]
        self._size = len(self.tstate["items"])
        self._current = {b: FaultItem(*it[:5]) for b, it in self.init.items()}
        self._cursor = -1
        """``_current`` holds each broker's item as of row ``_cursor``: snapshots are taken in
        the order of the rows, so each row is applied once."""

    def _item(self, row: int) -> FaultItem:
        s = self.scope
        return FaultItem(
            str(s.broker[row]),
            int(s.latency[row]),
            int(s.start[row]),
            bool(s.reachable[row]),
            int(s.time[row]),
        )

    def _present(self, broker: str, pos: int) -> FaultItem | None:
        positions = self.by_broker.get(broker)
        idx = -1 if positions is None else int(np.searchsorted(positions, pos, side="right")) - 1
        removed = self.removed_after.get(broker)
        if idx < 0:
            if removed is not None:
                return None
            it = self.init.get(broker)
            return None if it is None else FaultItem(it[0], it[1], it[2], it[3], it[4])
        assert positions is not None
        row = int(positions[idx])
        if removed is not None and row < removed:
            return None
        return self._item(row)

    def _apply_insertions(self, pos: int) -> None:
        while self.insertions and self.insertions[0][0] <= pos:
            _, broker = self.insertions.pop(0)
            self._size += 1
            self.order.add(broker, self._size)

    def _advance(self, pos: int) -> None:
        """Apply this key's rows after ``_cursor`` up to ``pos``: the last one of each broker."""
        lo = int(np.searchsorted(self.positions, self._cursor, side="right"))
        hi = int(np.searchsorted(self.positions, pos, side="right"))
        rows = self.positions[lo:hi]
        _, last = np.unique(self.scope.broker[rows][::-1], return_index=True)
        for row in rows[len(rows) - 1 - last].tolist():
            item = self._item(row)
            self._current[item.name] = item
        self._cursor = pos

    def snapshot(self, pos: int, rng: random.Random) -> FaultTable:
        self._apply_insertions(pos)
        if pos >= self._cursor:
            self._advance(pos)
            current = self._current
            items = [item for b in self.order if (item := current.get(b)) is not None]
        else:  # a decision whose own update was stale: the table as it was at that row
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
            self._current.pop(broker, None)  # no later row of it is applied yet
        if positions is not None:
            later = positions[positions > pos]
            if len(later):
                self.insertions.append((int(later[0]), broker))
                self.insertions.sort()

    def final_order(self) -> _ConcurrentHashMapOrder:
        self._apply_insertions(2**62)
        return self.order


Change = tuple[int, int, str, str, str, int | None]
"""An availability change for the routing table: (time, order, event_id, broker, decision,
until)."""


class _ScopeTables:
    """Every FaultTable of one scope during a batch, updated together: the rows of all keys are
    one set of arrays, so the cost is per row, not per key."""

    def __init__(
        self,
        scope: str,
        tstates: dict[str, dict[str, Any]],
        profiles: dict[str, Profile],
        rows: pd.DataFrame,
    ) -> None:
        """``rows`` (from :func:`_report_rows`, with a ``key`` column) are sorted by (time,
        event_id, phase); ``profiles`` gives each key's profile for this batch."""
        self.scope, self.tstates, self.profiles = scope, tstates, profiles
        keys = rows["key"].to_numpy(object)
        self.init: dict[str, dict[str, list[Any]]] = {
            k: {it[0]: it for it in tstates[k]["items"]} for k in pd.unique(keys)
        }
        brokers = rows["broker"].to_numpy(object)
        updated = np.fromiter(
            (
                it[4] if (it := self.init[k].get(b)) is not None else NO_ITEM
                for k, b in zip(keys.tolist(), brokers.tolist(), strict=True)
            ),
            dtype=np.int64,
            count=len(keys),
        )
        t = rows["time"].to_numpy(np.int64)
        fresh = t >= updated
        self.stale = int((~fresh).sum())
        self.key = keys[fresh]
        self.broker = brokers[fresh]
        self.time = t[fresh]
        self.event_id = rows["event_id"].to_numpy(object)[fresh]
        self.phase = rows["phase"].to_numpy(np.int8)[fresh]
        self.latency = rows["latency"].to_numpy(np.int64)[fresh]
        self.isolation = rows["isolation"].to_numpy(bool)[fresh]
        self.reachable = rows["reachable"].to_numpy(bool)[fresh]
        self.outcome = rows["outcome"].to_numpy(object)[fresh]
        self.producer_id = rows["producer_id"].to_numpy(object)[fresh]
        n = len(self.key)
        self.profile_name = np.array([profiles[k].name for k in self.key.tolist()], dtype=object)
        self.pair, pairs = pd.factorize(pd.Series(self.key + "\x1f" + self.broker, dtype=object))
        self.pairs = [p.split("\x1f", 1) for p in pairs]
        init_items = [self.init[k].get(b) for k, b in self.pairs]
        self.init_start = np.array(
            [it[2] if it is not None else NO_ITEM for it in init_items], dtype=np.int64
        )
        self.init_pending = np.array(
            [bool(it[5]) if it is not None else False for it in init_items], dtype=bool
        )
        self.init_cause = np.array(
            [it[6] if it is not None else "" for it in init_items], dtype=object
        )
        self.dur = np.zeros(n, dtype=np.int64)
        self.start = np.zeros(n, dtype=np.int64)
        by_pair = np.lexsort((np.arange(n), self.pair))
        first = np.ones(n, dtype=bool)
        first[1:] = self.pair[by_pair][1:] != self.pair[by_pair][:-1]
        for name in pd.unique(self.profile_name):
            profile = next(p for p in profiles.values() if p.name == name)
            mine = self.profile_name == name
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
        self._positions: dict[str, np.ndarray] | None = None
        self.views: dict[str, _Table] = {}
        self._results: dict[str, int] | None = None

    def positions(self, key: str) -> np.ndarray:
        if self._positions is None:
            order = np.argsort(self.key, kind="stable")
            keys = self.key[order]
            cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
            bounds = [0, *cuts.tolist(), len(keys)]
            self._positions = {
                str(keys[a]): np.sort(order[a:b]) for a, b in itertools.pairwise(bounds) if b > a
            }
        return self._positions.get(key, np.zeros(0, dtype=np.int64))

    def view(self, key: str) -> _Table | None:
        """The key's table for routing decisions; None when the key has no rows this batch."""
        if key not in self.init:
            return None
        if key not in self.views:
            self.views[key] = _Table(self, key, self.positions(key))
        return self.views[key]

    def position_of(self, event_id: str) -> int:
        """The position of the event's result row (its own update comes before its decision)."""
        if self._results is None:
            results = self.phase == 1
            self._results = dict(
                zip(
                    self.event_id[results].tolist(),
                    np.flatnonzero(results).tolist(),
                    strict=True,
                )
            )
        return self._results.get(event_id, -1)

    def finish(self, cluster: str, clock_end: int, out: _Out) -> dict[str, list[Change]]:
        """Emit fault_items and broker_decisions; store the tables; return each key's
        availability changes for the routing table."""
        line5 = np.array([n.startswith("rocketmq-5") for n in self.profile_name], dtype=bool)
        out.add(
            "fault_items",
            pd.DataFrame(
                {
                    "scope": self.scope,
                    "scope_key": pd.Series(self.key, dtype=object),
                    "cluster": cluster,
                    "broker_name": pd.Series(self.broker, dtype=object),
                    "event_id": pd.Series(self.event_id, dtype=object),
                    "event_time": self.time,
                    "latency_ms": self.latency,
                    "isolation": self.isolation,
                    "reachable": np.where(line5, self.reachable, True),
                    "not_available_ms": self.dur,
                    "available_from": self.start,
                    "profile": pd.Series(self.profile_name, dtype=object),
                    "outcome": pd.Series(self.outcome, dtype=object),
                    "phase": np.where(self.phase == 0, "dispatch", "result"),
                    "producer_id": pd.Series(self.producer_id, dtype=object),
                }
            ),
        )
        n = len(self.key)
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
                    self.init_start = np.append(self.init_start, it[2] if it else NO_ITEM)
                    self.init_pending = np.append(self.init_pending, bool(it[5]) if it else False)
                    self.init_cause = np.append(self.init_cause, it[6] if it else "")
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
        by_key: dict[str, dict[str, list[Any]]] = {}
        for p, item in last.items():
            k, b = self.pairs[p]
            item[0] = b
            by_key.setdefault(k, {})[b] = item
        keyed = [
            (*self.pairs[p], d, at, until, why, cause, o)
            for p, d, at, until, why, cause, o in decisions
        ]
        for key in self.init:
            self._store(key, by_key.get(key, {}), clock_end, keyed)
        return _emit(self.scope, cluster, self.profiles.__getitem__, keyed, out)

    def _store(
        self, key: str, last: dict[str, list[Any]], clock_end: int, decisions: list[Any]
    ) -> None:
        """The key's items after the batch, in the table's iteration order; isolations of
        brokers without updates that ran out on the clock end."""
        tstate = self.tstates[key]
        view = self.views.get(key)
        init = self.init[key]
        if view is not None:
            names = list(view.final_order())
            tstate["cap"] = view.order.capacity
            tstate["worst"] = view.worst
        elif all(b in init for b in last):
            names = [it[0] for it in tstate["items"]]
        else:
            firsts = sorted(
                (int(self.positions(key)[self.broker[self.positions(key)] == b][0]), b)
                for b in last
                if b not in init
            )
            hashmap = _ConcurrentHashMapOrder(tstate["cap"], [it[0] for it in tstate["items"]])
            size = len(tstate["items"])
            for _, b in firsts:
                size += 1
                hashmap.add(b, size)
            names = list(hashmap)
            tstate["cap"] = hashmap.capacity
        tstate["items"] = _settle(key, names, last, init, clock_end, decisions)
        tstate["due"] = min((it[2] for it in tstate["items"] if it[5]), default=None)


def _settle(
    key: str,
    names: list[str],
    last: dict[str, list[Any]],
    init: dict[str, list[Any]],
    clock_end: int,
    decisions: list[Any],
) -> list[list[Any]]:
    items = []
    for b in names:
        if b in last:
            items.append(last[b])
            continue
        it = list(init[b])
        if it[5] and it[2] <= clock_end:
            decisions.append((key, b, "RESTORE", it[2], it[2], "isolation ended", it[6], 0))
            it[5] = False
        items.append(it)
    return items


def _expire_idle(key: str, tstate: dict[str, Any], clock_end: int, decisions: list[Any]) -> None:
    """A table without rows this batch: isolations that ran out on the clock end."""
    due = tstate.get("due", -(2**63))
    if due is None or due > clock_end:
        return
    init = {it[0]: it for it in tstate["items"]}
    tstate["items"] = _settle(
        key, [it[0] for it in tstate["items"]], {}, init, clock_end, decisions
    )
    tstate["due"] = min((it[2] for it in tstate["items"] if it[5]), default=None)


def _emit(
    scope: str,
    cluster: str,
    profile_of: Callable[[str], Profile],
    decisions: list[Any],
    out: _Out,
) -> dict[str, list[Change]]:
    """broker_decisions rows; each key's availability changes for the routing table."""
    changes: dict[str, list[Change]] = {}
    for k, b, decision, at, until, _why, cause, o in decisions:
        changes.setdefault(k, []).append(
            (at, o, cause, b, decision, None if decision == "RESTORE" else until)
        )
    if decisions:
        d = pd.DataFrame(
            decisions,
            columns=[
                "scope_key",
                "broker_name",
                "decision",
                "effective_at",
                "available_from",
                "reason",
                "cause_event_id",
                "_order",
            ],
        ).drop(columns="_order")
        d["profile"] = [profile_of(k).name for k in d["scope_key"]]
        out.add("broker_decisions", d.assign(scope=scope, cluster=cluster))
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
) -> tuple[list[tuple[int, str, int, int, str, str, int]], dict[int, list[Any]]]:
    """Availability changes per (key, broker) pair from its sequence of starts (vectorized), and
    each pair's final item ``[name, latency, start, reachable, updated_at, pending, cause]``.
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
    cause = pd.Series(np.where(changed, eid, np.array(None, dtype=object)), dtype="object")
    cause_filled = cause.groupby(run).ffill()
    cause_filled = cause_filled.where(
        cause_filled.notna(), pd.Series(init_cause[group], dtype="object")
    )
    cause_arr = cause_filled.to_numpy(object)
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
            (int(p[i]), "RESTORE", int(prev_start[i]), int(prev_start[i]), "isolation ended",
             prev_cause[i], 0)
        )  # fmt: skip
    for mask, name in ((isolate, "ISOLATE"), (extend, "EXTEND"), (shorten, "SHORTEN")):
        for i in np.flatnonzero(mask).tolist():
            decisions.append((int(p[i]), name, int(t[i]), int(start[i]), why(i), eid[i], 1))
    for i in np.flatnonzero(cleared).tolist():
        reason = (
            "removed from the fault table: pickOneAtLeast's broker has no write queues in the route"
            if removal[i]
            else "a later update ended the isolation at once (4.x overwrite)"
        )
        decisions.append((int(p[i]), "RESTORE", int(t[i]), int(t[i]), reason, eid[i], 1))
    last: dict[int, list[Any]] = {}
    ends = np.append(np.flatnonzero(first)[1:], len(p)) - 1
    for i in ends.tolist():
        if removal[i]:
            continue  # the broker left the table; a later update re-adds it
        pending = bool(iso[i])
        if pending and start[i] <= clock_end:
            decisions.append(
                (int(p[i]), "RESTORE", int(start[i]), int(start[i]), "isolation ended",
                 cause_arr[i], 0)
            )  # fmt: skip
            pending = False
        last[int(p[i])] = [
            None,  # the broker's name: filled in by the caller
            int(latency[i]),
            int(start[i]),
            bool(reachable[i]),
            int(t[i]),
            pending,
            cause_arr[i] or "",
        ]
    return decisions, last


# --- one batch of one cluster -----------------------------------------------------------------


class _Run:
    def __init__(
        self, cluster: str, state: dict[str, Any], config: EngineConfig, out: _Out, clock_end: int
    ) -> None:
        self.cluster, self.state, self.config, self.out, self.clock_end = (
            cluster,
            state,
            config,
            out,
            clock_end,
        )
        self.tables: dict[str, _ScopeTables] = {}
        self.changes: dict[str, dict[str, list[Change]]] = {}
        self.items_at_start: dict[str, dict[str, list[list[Any]]]] = {}
        self.route_changes: list[tuple[int, int, str, str]] = []  # time, order, event_id, topic
        self.route_history: list[tuple[int, int, str, dict[str, Route]]] = []
        self.routes_at_start = self._effective_routes({})
        self._routes_now = self.routes_at_start
        self._route_facts: dict[int, tuple[Route, str, list[list[Any]], Any]] = {}
        self._route_brokers: dict[int, tuple[Route, frozenset[str]]] = {}
        self._tables_made: dict[tuple[int, Any], tuple[str, pa.Array, pa.Array]] = {}
        self._queues_made: dict[tuple[int, str], list[MessageQueue]] = {}
        self._route_positions: dict[int, tuple[Route, dict[str, int]]] = {}
        self.new_topics: dict[str, dict[str, tuple[int, str]]] = {}
        self.first_event: tuple[int, str] | None = None
        self._next_scan = -(2**63)
        """No NameServer scan can drop a broker before this time (the first call finds out)."""

    # tables

    def prepare_tables(self, scope: str, sends: pd.DataFrame) -> None:
        config = self.config
        self.items_at_start[scope] = {k: t["items"] for k, t in self.state["tables"][scope].items()}
        if scope == CLUSTER:
            # the cluster's table exists from its first event, so that its routing table is
            # published from the first route on, whichever batch the first send falls in
            self._tstate(scope, self.cluster)["profile"] = config.cluster_profile
            profiles = pd.Series(config.cluster_profile, index=sends.index)
            chosen = sends
        else:
            chosen = sends[sends["latency_fault_enable"].to_numpy(bool)]
            profiles = chosen["client_profile"]
            firsts = chosen.drop_duplicates(["producer_id", "topic"])
            for pid, topic, t, eid in firsts[
                ["producer_id", "topic", "event_time", "event_id"]
            ].itertuples(index=False):
                tstate = self._tstate(scope, str(pid))
                if topic not in tstate["topics"]:
                    tstate["topics"] = sorted([*tstate["topics"], topic])
                    self.new_topics.setdefault(str(pid), {})[topic] = (int(t), str(eid))
        if len(chosen) == 0:
            return
        rows = _report_rows(chosen, profiles, config)
        rows["key"] = self.cluster if scope == CLUSTER else rows["producer_id"]
        # a producer's table follows the profile of its latest event
        latest = rows.groupby("key", sort=False)["profile"].last()
        key_profiles = {str(k): config.profile(str(p)) for k, p in latest.items()}
        tstates = {}
        for key, profile in key_profiles.items():
            tstates[key] = self._tstate(scope, key)
            tstates[key]["profile"] = profile.name
        tables = _ScopeTables(scope, tstates, key_profiles, rows)
        self.out.stats["stale"] += tables.stale
        self.tables[scope] = tables

    def _tstate(self, scope: str, key: str) -> dict[str, Any]:
        tables = self.state["tables"][scope]
        if key not in tables:
            tables[key] = {"profile": None, "items": [], "cap": 32, "worst": None, "topics": []}
        tstate: dict[str, Any] = tables[key]
        return tstate

    def finish_tables(self, scope: str) -> None:
        tables = self.tables.get(scope)
        changes = tables.finish(self.cluster, self.clock_end, self.out) if tables else {}
        expired: list[Any] = []
        for key, tstate in self.state["tables"][scope].items():
            if tstate["profile"] is not None and (tables is None or key not in tables.init):
                _expire_idle(key, tstate, self.clock_end, expired)
        profiles = self.state["tables"][scope]
        for key, more in _emit(
            scope, self.cluster, lambda k: self.config.profile(profiles[k]["profile"]), expired,
            self.out,
        ).items():  # fmt: skip
            changes.setdefault(key, []).extend(more)
        self.changes[scope] = changes

    def _isolated_at_start(self, scope: str, key: str) -> dict[str, int]:
        return {it[0]: it[2] for it in self.items_at_start[scope].get(key, ()) if it[5]}

    # the sequential timeline: NameServer, routes and routing decisions

    def timeline(self, events: pd.DataFrame, decide: pd.DataFrame) -> None:
        ticks = events[events["kind"].isin(["heartbeat", "route"])]
        items = pd.concat(
            [ticks[["event_time", "event_id", "kind"]], decide[["event_time", "event_id", "kind"]]]
        ).sort_values(["event_time", "event_id"], kind="stable")
        by_id = {}
        if len(ticks):
            by_id.update(
                {
                    e: r
                    for e, r in zip(ticks["event_id"], ticks.itertuples(index=False), strict=True)
                }
            )
        if len(decide):
            by_id.update(
                {
                    e: r
                    for e, r in zip(decide["event_id"], decide.itertuples(index=False), strict=True)
                }
            )
        for t, eid, kind in items.itertuples(index=False):
            self._scans_until(int(t))
            row = by_id[eid]
            if kind == "heartbeat":
                self._heartbeat(row)
            elif kind == "route":
                self._route(row)
            else:
                for scope in self.config.scopes:
                    self._routing_decision(scope, row)
        self._scans_until(self.clock_end)

    def _scans_until(self, now: int) -> None:
        if now < self._next_scan:
            return
        timeout = self.config.heartbeat_timeout_ms
        self._next_scan = 2**63
        for broker, hb in sorted(self.state["heartbeats"].items()):
            if hb["expired"]:
                continue
            scan = self._scan_after(hb["last"])
            if scan <= now:
                hb["expired"] = True
                self.out.rows(
                    "broker_decisions",
                    [
                        self._route_decision(
                            broker,
                            "ROUTE_EXPIRED",
                            scan,
                            hb["eid"],
                            f"no heartbeat for more than {timeout} ms at the NameServer scan",
                        )
                    ],
                )
                self._route_changed(scan, 0, hb["eid"], broker=broker)
            else:
                self._next_scan = min(self._next_scan, scan)

    def _scan_after(self, heartbeat: int) -> int:
        """The NameServer scan that drops a broker whose last heartbeat was at ``heartbeat``."""
        interval = self.config.scan_interval_ms
        return ((heartbeat + self.config.heartbeat_timeout_ms) // interval + 1) * interval

    def _heartbeat(self, row: Any) -> None:
        hb = self.state["heartbeats"].get(row.broker_name)
        at = int(row.event_time)
        self.state["heartbeats"][row.broker_name] = {
            "last": at,
            "expired": False,
            "eid": row.event_id,
        }
        self._next_scan = min(self._next_scan, self._scan_after(at))
        if hb is not None and hb["expired"]:
            self.out.rows(
                "broker_decisions",
                [
                    self._route_decision(
                        row.broker_name,
                        "ROUTE_RESTORED",
                        int(row.event_time),
                        row.event_id,
                        "heartbeat received: the broker is back in the route",
                    )
                ],
            )
            self._route_changed(at, 1, row.event_id, broker=row.broker_name)

    def _route_decision(
        self, broker: str, decision: str, at: int, cause: str, reason: str
    ) -> dict[str, Any]:
        return {
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

    def _route(self, row: Any) -> None:
        brokers = [
            [b["broker_name"], int(b["write_queue_nums"]), int(b.get("perm", 6))]
            for b in json.loads(row.brokers_json)
        ]
        self.state["routes"][row.topic] = sorted(brokers)
        self._route_changed(int(row.event_time), 1, row.event_id, topic=row.topic)

    def _route_changed(
        self, t: int, order: int, eid: str, *, topic: str | None = None, broker: str | None = None
    ) -> None:
        routes = self._declared_routes()
        topics = (
            [topic] if topic else [tp for tp, r in routes.items() if any(e[0] == broker for e in r)]
        )
        for tp in topics:
            self.route_changes.append((t, order, eid, tp))
        self._routes_now = self._effective_routes(self._routes_now)
        self.route_history.append((t, order, eid, self._routes_now))

    def _declared_routes(self) -> dict[str, list[list[Any]]]:
        routes = {tp: [list(e) for e in r] for tp, r in self.config.static_routes.items()}
        routes.update(self.state["routes"])
        return routes

    def _effective_routes(self, before: dict[str, Route]) -> dict[str, Route]:
        """The routes without the brokers the NameServer dropped; a topic whose route did not
        change keeps the same object as in ``before``."""
        expired = {b for b, hb in self.state["heartbeats"].items() if hb["expired"]}
        routes = {}
        for tp, r in self._declared_routes().items():
            route = tuple((e[0], int(e[1]), int(e[2])) for e in sorted(r) if e[0] not in expired)
            routes[tp] = before[tp] if before.get(tp) == route else route
        return routes

    def _message_queues(self, route: Route, topic: str) -> list[MessageQueue]:
        """A fresh TopicPublishInfo's queues for ``route`` (shared: a queue is immutable)."""
        made = self._queues_made.get((id(route), topic))
        if made is None:
            made = [MessageQueue(b, q, topic) for b, q in self._facts(route)[2]]
            self._queues_made[(id(route), topic)] = made
        return made

    def _facts(self, route: Route) -> tuple[Route, str, list[list[Any]], Any]:
        """A route's digest, fresh queues and write queue numbers, worked out once per batch."""
        facts = self._route_facts.get(id(route))
        if facts is None:
            fresh = TopicPublishInfo.from_route(route)
            queues = [[q.broker_name, q.queue_id] for q in fresh.queues]
            facts = (route, _digest([list(e) for e in route]), queues, fresh.write_queue_nums)
            self._route_facts[id(route)] = facts  # the route is kept in facts: its id stays
        return facts

    def _routing_decision(self, scope: str, row: Any) -> None:
        config = self.config
        producer = str(row.producer_id)
        if scope == CLUSTER:
            key, profile, enable = self.cluster, config.profile(config.cluster_profile), True
        else:
            key = producer
            profile = config.profile(row.client_profile)
            enable = bool(row.latency_fault_enable)
        tables = self.tables.get(scope)
        table = tables.view(key) if tables is not None else None
        route = self._routes_now.get(row.topic, ())
        base = {
            "event_id": row.event_id,
            "scope": scope,
            "scope_key": key,
            "cluster": self.cluster,
            "producer_id": producer,
            "topic": row.topic,
            "message_id": row.message_id,
            "failed_broker": row.broker_name,
            "attempt": int(row.attempt),
            "profile": profile.name,
            "decided_at": int(row.event_time),
        }
        if not route:
            self.out.rows(
                "routing_decisions",
                [
                    {
                        **base,
                        "selected_broker": None,
                        "selected_queue_id": None,
                        "rule": "no-route-info",
                        "rewritten": False,
                        "removed_broker": None,
                        "swallowed": None,
                    }
                ],
            )
            return
        pkey = f"{scope}|{key}|{producer}|{row.topic}"
        pub = self.state["pubinfo"].get(pkey)
        _, digest, fresh_queues, wqn = self._facts(route)
        if pub is None or pub["route"] != digest:
            pub = {
                "route": digest,
                "queues": None,  # the route's own
                "index": None,
                "seed": f"{row.event_time}|{row.event_id}",
            }
            self.state["pubinfo"][pkey] = pub
        queues = (
            [MessageQueue(b, q, row.topic) for b, q in pub["queues"]]
            if pub["queues"] is not None
            else list(self._message_queues(route, row.topic))
        )
        info = TopicPublishInfo(
            queues,
            wqn,
            pub["index"],
            _rng(config.seed, pkey, pub["seed"], row.event_id),
        )
        if table is not None:
            assert tables is not None
            pos = tables.position_of(row.event_id)
            fault = table.snapshot(pos, _rng(config.seed, scope, key, row.event_id))
        else:
            pos, fault = -1, FaultTable(profile, rng=_rng(config.seed, scope, key, row.event_id))
        reset = profile.line == "5" and row.mode == SendMode.SYNC
        sel = select_queue(
            profile, info, fault, row.broker_name, int(row.event_time), enable, reset_index=reset
        )
        if table is not None:
            table.worst = fault.worst_index
            if sel.removed is not None:
                table.remove(sel.removed, pos, int(row.event_time), row.event_id)
        after = [[q.broker_name, q.queue_id] for q in info.queues]
        pub["queues"] = None if after == fresh_queues else after
        pub["index"] = info.index
        self.out.rows(
            "routing_decisions",
            [
                {
                    **base,
                    "selected_broker": sel.queue.broker_name,
                    "selected_queue_id": sel.queue.queue_id,
                    "rule": sel.rule.value,
                    "rewritten": sel.rewritten,
                    "removed_broker": sel.removed,
                    "swallowed": sel.swallowed,
                }
            ],
        )

    # the routing table: each change of a topic's selectable queues, per scope key

    def _positions_in(self, route: Route) -> dict[str, int]:
        """Each broker's place in the route."""
        made = self._route_positions.get(id(route))
        if made is None:
            made = self._route_positions[id(route)] = (
                route, {b: i for i, (b, _, _) in enumerate(route)}
            )  # fmt: skip
        return made[1]

    def _brokers_of(self, route: Route) -> frozenset[str]:
        brokers = self._route_brokers.get(id(route))
        if brokers is None:
            brokers = self._route_brokers[id(route)] = (route, frozenset(b for b, _, _ in route))
        return brokers[1]

    def routing_table(self) -> None:
        for scope in self.config.scopes:
            for key, tstate in self.state["tables"][scope].items():
                if tstate["profile"] is not None:
                    self._routing_table_for(scope, key)

    def _table_of(
        self, route: Route, isolated: tuple[tuple[str, int], ...]
    ) -> tuple[str, pa.Array, pa.Array]:
        """A topic's routing table for a route and its isolated brokers: its digest and its
        rows' two lists (as one-row Arrow arrays), made once per batch however many scope keys
        share them."""
        cache_key = (id(route), isolated)
        made = self._tables_made.get(cache_key)
        if made is None:
            out = {b for b, _ in isolated}
            selectable = [
                [b, q] for b, w, perm in route if perm & 2 and b not in out for q in range(w)
            ]
            made = (
                _digest([selectable, [list(x) for x in isolated]]),
                pa.array(
                    [[{"broker_name": b, "queue_id": q} for b, q in selectable]],
                    TABLES["routing_table"].field("selectable").type,
                ),
                pa.array(
                    [[{"broker_name": b, "until": u} for b, u in isolated]],
                    TABLES["routing_table"].field("isolated").type,
                ),
            )
            self._tables_made[cache_key] = made
            self._route_brokers.setdefault(id(route), (route, frozenset(b for b, _, _ in route)))
        return made

    def _routing_table_for(self, scope: str, key: str) -> None:
        last = self.state["routing_table"].setdefault(f"{scope}|{key}", {})
        known = set(last)
        isolated = self._isolated_at_start(scope, key)
        routes = self.routes_at_start
        # (time, order, event_id, kind, payload): 0 route snapshot, 1 availability, 2 new topic
        points: list[tuple[int, int, str, int, Any]] = [
            (t, o, e, 0, snapshot) for t, o, e, snapshot in self.route_history
        ]
        points += [(t, o, e, 1, (b, d, u)) for t, o, e, b, d, u in self.changes[scope].get(key, [])]
        if scope == CLUSTER:
            points += [(t, o, e, 2, tp) for t, o, e, tp in self.route_changes]
            if self.first_event is not None:
                t0, e0 = self.first_event
                points += [(t0, 1, e0, 2, tp) for tp in self.config.static_routes]
        else:
            points += [(t, 1, e, 2, tp) for tp, (t, e) in self.new_topics.get(key, {}).items()]
        points.sort(key=lambda p: (p[0], p[1], p[2], p[3]))
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
                changed = [tp for tp in known if broker in self._brokers_of(routes.get(tp, ()))]
            else:
                known.add(payload)
                changed = [payload]
            for topic in sorted(changed):
                route = routes.get(topic, ())
                positions = self._positions_in(route)
                isolated_here = tuple(
                    (b, u) for _, b, u in sorted(
                        (positions[b], b, u) for b, u in isolated.items() if b in positions
                    )
                )  # fmt: skip
                digest, selectable, isolated_rows = self._table_of(route, isolated_here)
                if last.get(topic) == digest:
                    continue
                last[topic] = digest
                rows.append(
                    {
                        "scope": scope,
                        "scope_key": key,
                        "cluster": self.cluster,
                        "topic": topic,
                        "effective_at": int(t),
                        "cause_event_id": eid,
                        "selectable": selectable,
                        "isolated": isolated_rows,
                    }
                )
        self.out.rows("routing_table", rows)
