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
import json
import random
from collections.abc import Iterable, Mapping
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

STATE_VERSION = 2
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
    if state.get("v") != STATE_VERSION:
        raise ValueError(
            f"state schema version {state.get('v')} is not {STATE_VERSION}: this checkpoint was "
            "written by another faultline version; start from a new checkpoint"
        )
    return state


def _rng(seed: int, *parts: object) -> random.Random:
    digest = hashlib.blake2b("\x1f".join(map(str, (seed, *parts))).encode(), digest_size=8)
    return random.Random(int.from_bytes(digest.digest(), "big"))


# --- the step ---------------------------------------------------------------------------------


@dataclass
class Step:
    state: dict[str, Any]
    tables: dict[str, pd.DataFrame]
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


_NULLABLE = {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype()}


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
        """Rows made one decision at a time; they become one frame at the end."""
        self.records.setdefault(table, []).extend(rows)

    def frames(self) -> dict[str, pd.DataFrame]:
        for table, rows in self.records.items():
            if rows:  # typed by the table's schema, so a column's type never depends on the rows
                typed = pa.Table.from_pylist(rows, schema=TABLES[table])
                self.add(table, typed.to_pandas(types_mapper=_NULLABLE.get))
        self.records = {}
        return {k: pd.concat(v, ignore_index=True) for k, v in self.parts.items()}


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


_ROW_DTYPES = {
    "time": "int64",
    "event_id": "str",
    "phase": "int8",
    "broker": "str",
    "latency": "int64",
    "isolation": "bool",
    "reachable": "bool",
    "outcome": "str",
    "profile": "str",
    "producer_id": "str",
}


# --- one fault table ------------------------------------------------------------------------------


class _Table:
    """One scope key's FaultTable during a batch: vectorized rows plus sequential snapshots."""

    def __init__(
        self, scope: str, key: str, profile: Profile, tstate: dict[str, Any], rows: pd.DataFrame
    ) -> None:
        self.scope, self.key, self.profile, self.tstate = scope, key, profile, tstate
        self.init = {item[0]: item for item in tstate["items"]}
        updated = rows["broker"].map({b: it[4] for b, it in self.init.items()}).fillna(NO_ITEM)
        stale = rows["time"].to_numpy(np.int64) < updated.to_numpy(np.int64)
        self.stale = int(stale.sum())
        rows = rows[~stale].reset_index(drop=True)
        rows["pos"] = np.arange(len(rows))
        self.rows = rows
        rows["dur"] = not_available_durations(
            profile, rows["latency"].to_numpy(np.int64), rows["isolation"].to_numpy(bool)
        )
        by = rows.sort_values(["broker", "pos"], kind="stable")
        first = ~by["broker"].duplicated().to_numpy()
        init_start = by["broker"].map({b: it[2] for b, it in self.init.items()}).fillna(0)
        by_start = start_timestamps(
            profile,
            first,
            init_start.to_numpy(np.int64),
            by["time"].to_numpy(np.int64),
            by["dur"].to_numpy(np.int64),
        )
        start = np.empty(len(rows), dtype=np.int64)
        start[by["pos"].to_numpy()] = by_start
        rows["start"] = start
        self.by_broker: dict[str, np.ndarray] = {
            str(b): g for b, g in rows.groupby("broker", sort=False)["pos"].agg(np.asarray).items()
        }
        self.order = _ConcurrentHashMapOrder(tstate["cap"], [it[0] for it in tstate["items"]])
        firsts = [(int(p[0]), b) for b, p in self.by_broker.items() if b not in self.init]
        self.insertions = sorted(firsts)
        self.removals: list[tuple[str, int, int, str]] = []  # broker, pos, time, event_id
        self.removed_after: dict[str, int] = {}
        self.worst = tstate["worst"]
        self._columns = {
            "latency": rows["latency"].to_numpy(np.int64),
            "start": rows["start"].to_numpy(np.int64),
            "reachable": rows["reachable"].to_numpy(bool),
            "time": rows["time"].to_numpy(np.int64),
        }
        self._results: dict[str, int] | None = None

    def position_of(self, event_id: str) -> int:
        """The position of the event's result row (its own update comes before its decision)."""
        if self._results is None:
            results = self.rows["phase"].to_numpy() == 1
            self._results = dict(
                zip(
                    self.rows["event_id"].to_numpy(object)[results].tolist(),
                    self.rows["pos"].to_numpy()[results].tolist(),
                    strict=True,
                )
            )
        return self._results.get(event_id, -1)

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
        c = self._columns
        return FaultItem(
            broker,
            int(c["latency"][row]),
            int(c["start"][row]),
            bool(c["reachable"][row]),
            int(c["time"][row]),
        )

    def _apply_insertions(self, pos: int) -> None:
        while self.insertions and self.insertions[0][0] <= pos:
            _, broker = self.insertions.pop(0)
            self.order.add(broker, sum(1 for _ in self.order) + 1)

    def snapshot(self, pos: int, rng: random.Random) -> FaultTable:
        self._apply_insertions(pos)
        items = [item for b in self.order if (item := self._present(b, pos)) is not None]
        return FaultTable(
            self.profile, worst_index=self.worst, rng=rng, items=items, capacity=self.order.capacity
        )

    def remove(self, broker: str, pos: int, time: int, event_id: str) -> None:
        """pickOneAtLeast's broker had no write queues: RocketMQ removed it from the table."""
        self.removals.append((broker, pos, time, event_id))
        self.removed_after[broker] = pos + 1
        self.order.remove(broker)
        positions = self.by_broker.get(broker)
        if positions is not None:
            later = positions[positions > pos]
            if len(later):
                self.insertions.append((int(later[0]), broker))
                self.insertions.sort()

    def finish(
        self, cluster: str, clock_end: int, out: _Out
    ) -> list[tuple[int, int, str, str, str, int | None]]:
        """Emit fault_items and broker_decisions; store the table; return its availability
        changes as (time, order, event_id, broker, decision, until) for the routing table."""
        self._apply_insertions(len(self.rows))
        rows = self.rows
        base = {"scope": self.scope, "scope_key": self.key, "cluster": cluster}
        out.add(
            "fault_items",
            pd.DataFrame(
                {
                    **base,
                    "broker_name": rows["broker"].to_numpy(),
                    "event_id": rows["event_id"].to_numpy(),
                    "event_time": rows["time"].to_numpy(np.int64),
                    "latency_ms": rows["latency"].to_numpy(np.int64),
                    "isolation": rows["isolation"].to_numpy(bool),
                    "reachable": rows["reachable"].to_numpy(bool)
                    if self.profile.line == "5"
                    else np.ones(len(rows), dtype=bool),
                    "not_available_ms": rows["dur"].to_numpy(np.int64),
                    "available_from": rows["start"].to_numpy(np.int64),
                    "profile": self.profile.name,
                    "outcome": rows["outcome"].to_numpy(),
                    "phase": np.where(rows["phase"].to_numpy() == 0, "dispatch", "result"),
                    "producer_id": rows["producer_id"].to_numpy(),
                }
            ),
        )
        seq = rows[
            [
                "time",
                "event_id",
                "phase",
                "broker",
                "start",
                "latency",
                "isolation",
                "reachable",
                "dur",
                "outcome",
            ]
        ]
        seq = seq.assign(removal=False, order=rows["pos"].to_numpy(np.float64))
        if self.removals:
            extra = pd.DataFrame(
                [
                    {
                        "time": t,
                        "event_id": e,
                        "phase": 2,
                        "broker": b,
                        "start": NO_ITEM,
                        "latency": 0,
                        "isolation": False,
                        "reachable": True,
                        "dur": 0,
                        "outcome": "",
                        "removal": True,
                        "order": p + 0.5,
                    }
                    for b, p, t, e in self.removals
                ]
            )
            seq = pd.concat([seq, extra], ignore_index=True)
        decisions, last = _decide(seq, self.init, clock_end)
        changes: list[tuple[int, int, str, str, str, int | None]] = []
        # brokers without updates in this batch whose isolation ran out on the clock
        items = []
        for b in self.order:
            if b in last:
                items.append(last[b])
                continue
            it = list(self.init[b])
            if it[5] and it[2] <= clock_end:
                decisions.append((b, "RESTORE", it[2], it[2], "isolation ended", it[6], 0))
                it[5] = False
            items.append(it)
        for b, decision, at, until, _reason, cause, order in decisions:
            changes.append(
                (at, order, cause, b, decision, None if decision == "RESTORE" else until)
            )
        if decisions:
            d = pd.DataFrame(
                decisions,
                columns=[
                    "broker_name",
                    "decision",
                    "effective_at",
                    "available_from",
                    "reason",
                    "cause_event_id",
                    "_order",
                ],
            ).drop(columns="_order")
            out.add("broker_decisions", d.assign(**base, profile=self.profile.name))
        self.tstate["items"] = items
        self.tstate["cap"] = self.order.capacity
        self.tstate["worst"] = self.worst
        return changes


def _decide(
    seq: pd.DataFrame, init: Mapping[str, list[Any]], clock_end: int
) -> tuple[list[tuple[str, str, int, int, str, str, int]], dict[str, list[Any]]]:
    """Availability changes per broker from its sequence of starts (vectorized), and each
    broker's final item ``[name, latency, start, reachable, updated_at, pending, cause]``."""
    if len(seq) == 0:
        return [], {}
    seq = seq.sort_values(["broker", "order"], kind="stable", ignore_index=True)
    b = seq["broker"].to_numpy()
    t = seq["time"].to_numpy(np.int64)
    start = seq["start"].to_numpy(np.int64)
    eid = seq["event_id"].to_numpy(object)
    first = np.ones(len(seq), dtype=bool)
    first[1:] = b[1:] != b[:-1]
    init_start = np.array([init[x][2] if x in init else NO_ITEM for x in b[first]], dtype=np.int64)
    init_pending = np.array(
        [bool(init[x][5]) if x in init else False for x in b[first]], dtype=bool
    )
    init_cause = np.array([init[x][6] if x in init else "" for x in b[first]], dtype=object)
    group = np.cumsum(first) - 1
    iso = start > t
    prev_start = np.where(first, init_start[group], np.roll(start, 1))
    prev_iso = np.where(first, init_pending[group], np.roll(iso, 1))
    changed = first & (start != init_start[group]) | ~first & (start != np.roll(start, 1))
    changed |= seq["removal"].to_numpy(bool)
    cause = pd.Series(np.where(changed, eid, np.array(None, dtype=object)), dtype="object")
    cause_filled = cause.groupby(group).ffill()
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
    removal = seq["removal"].to_numpy(bool)
    latency = seq["latency"].to_numpy(np.int64)
    reachable = seq["reachable"].to_numpy(bool)
    outcome = seq["outcome"].to_numpy(object)
    isolation = seq["isolation"].to_numpy(bool)
    duration = seq["dur"].to_numpy(np.int64)

    def why(i: int) -> str:
        what = f"{outcome[i]} after {latency[i]} ms"
        if isolation[i]:
            what += " (isolation)"
        return f"{what}: not available for {duration[i]} ms"

    decisions: list[tuple[str, str, int, int, str, str, int]] = []
    for i in np.flatnonzero(expired):
        decisions.append(
            (
                b[i],
                "RESTORE",
                int(prev_start[i]),
                int(prev_start[i]),
                "isolation ended",
                prev_cause[i],
                0,
            )
        )
    for mask, name in ((isolate, "ISOLATE"), (extend, "EXTEND"), (shorten, "SHORTEN")):
        for i in np.flatnonzero(mask):
            decisions.append((b[i], name, int(t[i]), int(start[i]), why(int(i)), eid[i], 1))
    for i in np.flatnonzero(cleared):
        reason = (
            "removed from the fault table: pickOneAtLeast's broker has no write queues in the route"
            if removal[i]
            else "a later update ended the isolation at once (4.x overwrite)"
        )
        decisions.append((b[i], "RESTORE", int(t[i]), int(t[i]), reason, eid[i], 1))
    last: dict[str, list[Any]] = {}
    ends = np.append(np.flatnonzero(first)[1:], len(seq)) - 1
    for i in ends:
        if removal[i]:
            continue  # the broker left the table; a later update re-adds it
        pending = bool(iso[i])
        if pending and start[i] <= clock_end:
            decisions.append(
                (b[i], "RESTORE", int(start[i]), int(start[i]), "isolation ended", cause_arr[i], 0)
            )
            pending = False
        last[b[i]] = [
            b[i],
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
        self.tables: dict[tuple[str, str], _Table] = {}
        self.changes: dict[tuple[str, str], list[tuple[int, int, str, str, str, int | None]]] = {}
        self.initial_isolated: dict[tuple[str, str], dict[str, int]] = {}
        self.route_changes: list[tuple[int, int, str, str]] = []  # time, order, event_id, topic
        self.route_history: list[tuple[int, int, str, dict[str, Route]]] = []
        self.routes_at_start = self._effective_routes()
        self.new_topics: dict[str, dict[str, tuple[int, str]]] = {}
        self.first_event: tuple[int, str] | None = None

    # tables

    def prepare_tables(self, scope: str, sends: pd.DataFrame) -> None:
        config = self.config
        if scope == CLUSTER:
            # the cluster's table exists from its first event, so that its routing table is
            # published from the first route on, whichever batch the first send falls in
            self._tstate(scope, self.cluster, config.cluster_profile)["profile"] = (
                config.cluster_profile
            )
            profiles = pd.Series(config.cluster_profile, index=sends.index)
            chosen = sends
            keys = pd.Series(self.cluster, index=sends.index)
        else:
            chosen = sends[sends["latency_fault_enable"].to_numpy(bool)]
            profiles = chosen["client_profile"]
            keys = chosen["producer_id"]
            firsts = chosen.drop_duplicates(["producer_id", "topic"])
            for pid, topic, t, eid in firsts[
                ["producer_id", "topic", "event_time", "event_id"]
            ].itertuples(index=False):
                tstate = self._tstate(scope, str(pid), None)
                if topic not in tstate["topics"]:
                    tstate["topics"] = sorted([*tstate["topics"], topic])
                    self.new_topics.setdefault(str(pid), {})[topic] = (int(t), str(eid))
        if len(chosen) == 0:
            return
        rows = _report_rows(chosen, profiles, config)
        rows["key"] = keys.to_numpy()[0] if scope == CLUSTER else rows["producer_id"]
        for key, group in rows.groupby("key", sort=True):
            # a producer's table follows the profile of its latest event
            profile = config.profile(str(group["profile"].iloc[-1]))
            tstate = self._tstate(scope, str(key), profile.name)
            tstate["profile"] = profile.name
            table = _Table(
                scope, str(key), profile, tstate, group.drop(columns="key").reset_index(drop=True)
            )
            self.out.stats["stale"] += table.stale
            self.tables[(scope, str(key))] = table

    def _tstate(self, scope: str, key: str, profile: str | None) -> dict[str, Any]:
        tables = self.state["tables"][scope]
        if key not in tables:
            tables[key] = {"profile": profile, "items": [], "cap": 32, "worst": None, "topics": []}
        tstate: dict[str, Any] = tables[key]
        if (scope, key) not in self.initial_isolated:
            self.initial_isolated[(scope, key)] = {it[0]: it[2] for it in tstate["items"] if it[5]}
        return tstate

    def finish_tables(self, scope: str) -> None:
        for (s, key), tstate in list(self._all_tables(scope)):
            table = self.tables.get((s, key))
            if table is None:
                # no updates this batch: isolations may still run out on the clock
                profile = self.config.profile(tstate["profile"] or self.config.cluster_profile)
                empty = pd.DataFrame({c: pd.Series(dtype=d) for c, d in _ROW_DTYPES.items()})
                self._tstate(s, key, profile.name)
                table = _Table(s, key, profile, tstate, empty)
            self.changes[(s, key)] = table.finish(self.cluster, self.clock_end, self.out)

    def _all_tables(self, scope: str) -> Iterable[tuple[tuple[str, str], dict[str, Any]]]:
        for key, tstate in self.state["tables"][scope].items():
            if tstate["profile"] is not None:
                yield (scope, key), tstate

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
        timeout, interval = self.config.heartbeat_timeout_ms, self.config.scan_interval_ms
        for broker, hb in sorted(self.state["heartbeats"].items()):
            if hb["expired"]:
                continue
            scan = ((hb["last"] + timeout) // interval + 1) * interval
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

    def _heartbeat(self, row: Any) -> None:
        hb = self.state["heartbeats"].get(row.broker_name)
        at = int(row.event_time)
        self.state["heartbeats"][row.broker_name] = {
            "last": at,
            "expired": False,
            "eid": row.event_id,
        }
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
        self.route_history.append((t, order, eid, self._effective_routes()))

    def _declared_routes(self) -> dict[str, list[list[Any]]]:
        routes = {tp: [list(e) for e in r] for tp, r in self.config.static_routes.items()}
        routes.update(self.state["routes"])
        return routes

    def _effective_routes(self) -> dict[str, Route]:
        expired = {b for b, hb in self.state["heartbeats"].items() if hb["expired"]}
        return {
            tp: tuple((e[0], int(e[1]), int(e[2])) for e in sorted(r) if e[0] not in expired)
            for tp, r in self._declared_routes().items()
        }

    def _routing_decision(self, scope: str, row: Any) -> None:
        config = self.config
        producer = str(row.producer_id)
        if scope == CLUSTER:
            key, profile, enable = self.cluster, config.profile(config.cluster_profile), True
        else:
            key = producer
            profile = config.profile(row.client_profile)
            enable = bool(row.latency_fault_enable)
        table = self.tables.get((scope, key))
        route = self._effective_routes().get(row.topic, ())
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
        signature = [list(e) for e in route]
        if pub is None or pub["route"] != signature:
            fresh = TopicPublishInfo.from_route(route, topic=row.topic)
            pub = {
                "route": signature,
                "queues": [[q.broker_name, q.queue_id] for q in fresh.queues],
                "wqn": fresh.write_queue_nums,
                "index": None,
                "seed": f"{row.event_time}|{row.event_id}",
            }
            self.state["pubinfo"][pkey] = pub
        info = TopicPublishInfo(
            [MessageQueue(b, q, row.topic) for b, q in pub["queues"]],
            pub["wqn"],
            pub["index"],
            _rng(config.seed, pkey, pub["seed"], row.event_id),
        )
        if table is not None:
            pos = table.position_of(row.event_id)
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
        pub["queues"] = [[q.broker_name, q.queue_id] for q in info.queues]
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

    def routing_table(self) -> None:
        for scope in self.config.scopes:
            for (s, key), tstate in list(self._all_tables(scope)):
                self._routing_table_for(s, key, tstate)

    def _routing_table_for(self, scope: str, key: str, tstate: dict[str, Any]) -> None:
        last = self.state["routing_table"].setdefault(f"{scope}|{key}", {})
        known = set(last)
        isolated = dict(self.initial_isolated.get((scope, key), {}))
        routes = self.routes_at_start
        # (time, order, event_id, kind, payload): 0 route snapshot, 1 availability, 2 new topic
        points: list[tuple[int, int, str, int, Any]] = [
            (t, o, e, 0, snapshot) for t, o, e, snapshot in self.route_history
        ]
        points += [
            (t, o, e, 1, (b, d, u)) for t, o, e, b, d, u in self.changes.get((scope, key), [])
        ]
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
                routes = payload
            elif what == 1:
                broker, decision, until = payload
                if decision == "RESTORE":
                    isolated.pop(broker, None)
                else:
                    isolated[broker] = until
            else:
                known.add(payload)
            for topic in sorted(known):
                route = routes.get(topic, ())
                selectable = [
                    [b, q]
                    for b, w, perm in route
                    if perm & 2 and b not in isolated
                    for q in range(w)
                ]
                signature = [selectable, [[b, isolated[b]] for b, _, _ in route if b in isolated]]
                if last.get(topic) == signature:
                    continue
                last[topic] = signature
                rows.append(
                    {
                        "scope": scope,
                        "scope_key": key,
                        "cluster": self.cluster,
                        "topic": topic,
                        "effective_at": int(t),
                        "cause_event_id": eid,
                        "selectable": [{"broker_name": b, "queue_id": q} for b, q in selectable],
                        "isolated": [{"broker_name": b, "until": u} for b, u in signature[1]],
                    }
                )
        self.out.rows("routing_table", rows)
