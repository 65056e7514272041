"""Producers and their lifetime: what the state keeps per producer instance, and when it is
forgotten.

A producer instance (RocketMQ's ``clientId``: one per process) that sends nothing for
``evict_after_ms`` of event time is gone: a restarted process is a new instance. Its producer-scope
FaultTable, its ``TopicPublishInfo`` in each scope and its routing tables are dropped at
``last send + evict_after_ms``, a deadline like any other, and one ``EVICTED`` row in
``broker_decisions`` says so. If it sends again, it starts afresh, as a new instance would.

The deadline may fall inside a batch that also holds the instance's next send. Such a batch is
applied in segments cut at those deadlines, each ending with its deadline as the clock, so the
rows are those of any other split into batches.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa

from udfs._frames import codes, distinct, equal, objects, tuples
from udfs.engine._config import PRODUCER, EngineConfig
from udfs.engine._segment import Segment
from udfs.engine._state import FirstAttempt, Producer, State
from udfs.rocketmq import Outcome
from udfs.vocabulary import Decision, EventKind, TableName


class Piece(NamedTuple):
    """Admitted events (in event-time order) and the clock at their end."""

    events: pd.DataFrame
    clock_end: int


def segments(state: State, events: pd.DataFrame, config: EngineConfig) -> list[Piece]:
    """The admitted events (in event-time order) in pieces, cut at each deadline that evicts a
    producer which then sends again in this batch."""
    assert state.clock is not None, "segments of admitted events"
    end = int(state.clock)
    horizon = config.evict_after_ms
    sends = equal(events["kind"], EventKind.SEND_RESULT)
    if horizon is None or not sends.any():
        return [Piece(events, end)]
    # the sends' producers numbered by Arrow, not by hashing Python texts
    coded, names = codes(pa.array(events["producer_id"].array).filter(pa.array(sends)))
    t = events["event_time"].to_numpy(np.int64)[sends]
    order = np.lexsort((t, coded))  # per producer, in time
    coded, t = coded[order], t[order]
    first = np.r_[True, coded[1:] != coded[:-1]]
    previous = np.r_[np.int64(0), t[:-1]]
    known = state.producers
    last = np.array([known[p].last if p in known else np.inf for p in names])  # new: no gap
    previous = np.where(first, last[coded], previous)
    returns = t - previous >= horizon
    if not returns.any():
        return [Piece(events, end)]
    cuts = np.unique((previous[returns] + horizon).astype(np.int64))
    times = events["event_time"].to_numpy(np.int64)
    bounds = [0, *np.searchsorted(times, cuts, side="left").tolist(), len(events)]
    ends = [*cuts.tolist(), end]
    return [
        Piece(events.iloc[a:b].reset_index(drop=True), int(e))
        for a, b, e in zip(bounds[:-1], bounds[1:], ends, strict=True)
    ]


def touch(state: State, sends: pd.DataFrame) -> None:
    """Each producer's latest send (its time and event id) in this segment."""
    if not len(sends):
        return
    latest = distinct(sends["producer_id"], keep="last")
    known = state.producers
    for pid, t, eid in tuples(sends, ("producer_id", "event_time", "event_id"), latest):
        producer = known.get(pid)
        if producer is None:
            known[pid] = Producer(t, eid)
        elif t >= producer.last:
            producer.last, producer.eid = t, eid


def spent_budget(state: State, sends: pd.DataFrame, config: EngineConfig) -> np.ndarray:
    """Which sends are retries that failed only because the send's budget ran out: a timeout
    or connection failure (any outcome but a broker's answer) on attempt > 0 that lasted at least
    what was left of ``send_msg_timeout_ms`` when it started (the time since the send's first
    attempt started). RocketMQ isolates the broker of such a retry, which is healthy as far as
    anyone knows: the earlier attempts spent the time (a latency spike longer than the timeout
    makes every send's retry fail this way). Each producer's latest first attempt is kept in the
    state, so a retry in a later batch than its first attempt is judged alike."""
    out = np.zeros(len(sends), dtype=bool)
    if not len(sends):
        return out
    attempt = sends["attempt"].to_numpy(np.int64)
    pids = objects(sends["producer_id"])
    producers, _ = codes(sends["producer_id"])  # compared as numbers, not as texts
    latency = sends["latency_ms"].to_numpy(np.int64)
    start = sends["event_time"].to_numpy(np.int64) - latency
    summarized = sends["messages"].notna().to_numpy(bool)  # a summary's sends: no message
    firsts = np.flatnonzero((attempt == 0) & ~summarized)
    failed = np.flatnonzero((attempt > 0) & ~sends["outcome"].isin(RETURNED).to_numpy(bool))
    messages = objects(sends["message_id"])
    redelivered = sends["redelivery_count"].fillna(0).to_numpy().astype(np.int64)

    def key(i: int) -> Any:
        return _send_key(messages[i], redelivered[i])

    known = state.producers
    if len(failed):
        began_at = {  # each message's last first attempt in the segment, whenever it came
            (pids[i], key(i)): start[i]
            for i in firsts[np.isin(producers[firsts], producers[failed])].tolist()
        }
        began = np.array(
            [began_at.get((pids[i], key(i)), np.nan) for i in failed.tolist()], dtype=np.float64
        )
        for j in np.flatnonzero(np.isnan(began)):  # its first attempt came in an earlier batch
            producer = known.get(str(pids[failed[j]]))
            send = None if producer is None else producer.send
            if send is not None and send.key == key(failed[j]):
                began[j] = send.start
        left = config.send_msg_timeout_ms - (start[failed] - began)
        with np.errstate(invalid="ignore"):
            spent = (left < config.send_msg_timeout_ms) & (latency[failed] >= left)
        out[failed] = spent
    latest = firsts[distinct(producers[firsts], keep="last")]  # each one's latest first attempt
    for pid, m, r, t in zip(
        pids[latest].tolist(),
        messages[latest].tolist(),
        redelivered[latest].tolist(),
        start[latest].tolist(),
        strict=True,
    ):
        known[pid].send = FirstAttempt(_send_key(m, r), t)
    return out


def _send_key(message_id: Any, redelivery: int) -> Any:
    """A message's send: its id and redelivery (NaN without an id, as pandas made it)."""
    return f"{message_id}|{redelivery}" if isinstance(message_id, str) else np.nan


RETURNED = tuple(o.value for o in Outcome if o.returned)
"""Outcomes where the broker answered."""


def evict(seg: Segment) -> None:
    """Forget the producers whose last send is ``evict_after_ms`` or more before the segment's
    clock; the shard that owns a producer says so."""
    horizon = seg.config.evict_after_ms
    if horizon is None:
        return
    state = seg.state
    limit = seg.clock_end - horizon
    known = state.producers
    gone = [pid for pid, p in known.items() if p.last <= limit]
    if not gone:
        return
    tables = state.tables[PRODUCER]
    rows = []
    for pid in sorted(gone):
        producer = known.pop(pid)
        table = tables.pop(pid, None)
        state.published.pop(f"{PRODUCER}|{pid}", None)
        if not seg.shard.owns(pid):
            continue  # the lead's copy, for the cluster scope: the owner writes the row
        at = producer.last + horizon
        rows.append(
            {
                "scope": PRODUCER,
                "scope_key": pid,
                "cluster": seg.cluster,
                "broker_name": None,
                "decision": Decision.EVICTED,
                "effective_at": at,
                "available_from": at,
                "reason": f"no send result for {horizon} ms: the producer's state is forgotten",
                "cause_event_id": producer.eid,
                "profile": table.profile if table else "",
            }
        )
    seg.out.rows(TableName.BROKER_DECISIONS, rows)
