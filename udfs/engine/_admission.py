"""Admission: which records are applied (valid), which are quarantined, late or repeated; the
cluster's clock; and what each producer did after each attempt."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from udfs._frames import equal, objects, tuples, where
from udfs.engine._config import EngineConfig
from udfs.engine._output import Out, quarantine_rows
from udfs.engine._state import State, id_hashes
from udfs.rocketmq import Next, Outcome, SendMode, attempt_effect
from udfs.schema import EVENTS
from udfs.vocabulary import EventKind, ReasonCode, TableName


def next_steps(sends: pd.DataFrame, config: EngineConfig) -> np.ndarray:
    """What each producer did after each attempt (:class:`Next`): a failed attempt with attempts
    left is a routing decision; one after which it gave up is a failed message."""
    after = np.full(len(sends), Next.RETURN, dtype=object)
    failed = np.flatnonzero(~equal(sends["outcome"], "SEND_OK"))
    r: Any
    columns = ("client_profile", "outcome", "latency_ms", "mode", "attempt", "max_attempts",
               "response_code")  # fmt: skip
    for i, r in zip(failed, tuples(sends, columns, failed), strict=True):
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


def sends_of(events: pd.DataFrame, config: EngineConfig) -> pd.DataFrame:
    """The send results among the admitted ``events``, with the columns a send carries through
    the stages and the defaults of its optional fields. A batch's frames are copied a column at
    a time (a tenth of a millisecond each, however few the rows), so a column is filled only
    when it lacks a value or has another type."""
    sends = where(events[SEND_COLUMNS], equal(events["kind"], EventKind.SEND_RESULT))
    filled: dict[str, pd.Series] = {}
    for name, value in (("client_profile", config.default_client_profile), ("mode", "SYNC")):
        if sends[name].hasnans:
            filled[name] = sends[name].fillna(value)
    enable = sends["latency_fault_enable"]
    if enable.dtype != np.bool_:
        filled["latency_fault_enable"] = enable.fillna(config.default_latency_fault_enable).astype(
            bool
        )
    for name in ("attempt", "latency_ms"):
        if sends[name].dtype != np.int64:
            filled[name] = sends[name].fillna(0).astype(np.int64)
    return sends.assign(**filled) if filled else sends


def quarantine(events: pd.DataFrame, out: Out) -> pd.DataFrame:
    """Records the parser rejected go to quarantine as they are."""
    bad = events["reason_code"].notna().to_numpy()
    if bad.any():
        rejected = events[bad]
        out.add(
            TableName.QUARANTINE,
            quarantine_rows(rejected, rejected["reason_code"], rejected["reason"]),
        )
        out.stats["quarantined"] += int(bad.sum())
        events = events[~bad]
    return events


def arrival_order(events: pd.DataFrame) -> np.ndarray:
    """Positions of the events by (event_time, event_id); the raw text breaks ties between
    records that repeat an event id, so which one is applied does not depend on the order in
    which Spark hands them over. Arrow sorts the texts, in a quarter of the time pandas takes to
    number them in order; missing texts come first, and its sort is stable."""
    t = pa.array(events["event_time"].to_numpy(np.int64))
    ids = pa.array(events["event_id"], pa.large_string(), from_pandas=True)
    keys = [("t", "ascending", "at_start"), ("id", "ascending", "at_start")]
    columns = {"t": t, "id": ids}
    order = pc.sort_indices(pa.table(columns), sort_keys=keys)
    n = len(order)
    if n > 1:
        a, b = order.slice(0, n - 1), order.slice(1)
        same = pc.and_(
            pc.equal(t.take(a), t.take(b)),
            pc.equal(ids.take(a), ids.take(b)).fill_null(True),  # a tie on missing ids too
        )
        if pc.any(same).as_py():
            columns["raw"] = pa.array(events["raw"], pa.large_string(), from_pandas=True)
            keys.append(("raw", "ascending", "at_start"))
            order = pc.sort_indices(pa.table(columns), sort_keys=keys)
    positions: np.ndarray = order.to_numpy().astype(np.int64)
    return positions


RECORD_COLUMNS = ("raw", "origin", "reason_code", "reason")
"""What only quarantine and late_events keep of a record."""
ADMITTED = [
    f.name
    for f in EVENTS
    if f.name not in RECORD_COLUMNS
    and f.name
    not in ("ingest_ms", "body_size", "window_start", "window_end", "latency_max",
            "queue_index_start", "queue_index_end")
]  # fmt: skip
"""The columns of the admitted events: what the stages read (a summary's window and a send's
body size are checked by the parser and read by no stage)."""
SEND_COLUMNS = [
    c
    for c in ADMITTED
    if c
    not in ("consumer_group", "origin_message_id", "reconsume_times", "status",
            "max_reconsume_times", "brokers_json", "first_time", "first_latency_ms",
            "first_event_id", "dropped")
]  # fmt: skip
"""What a send carries through the stages: every column of another kind's event left out makes
each of their filters cheaper."""


def admit(
    cluster: str,
    state: State,
    events: pd.DataFrame,
    order: np.ndarray,
    config: EngineConfig,
    out: Out,
) -> pd.DataFrame:
    """Split off late events, events from the future and repeated events; advance the clock and
    remember the ids of the events within the allowed lateness. Returns the admitted events in
    ``order``, without the record's own columns."""
    t = events["event_time"].to_numpy(np.int64)[order]
    clock = state.clock
    late = np.zeros(len(t), dtype=bool) if clock is None else t < clock - config.allowed_lateness_ms
    ingest = events["ingest_ms"].to_numpy(np.float64, na_value=np.nan)[order]
    future = ~late & ~np.isnan(ingest) & (t > np.nan_to_num(ingest) + config.max_future_skew_ms)
    candidates = ~late & ~future
    hashes = id_hashes(objects(events["event_id"])[order])
    repeated = np.zeros(len(t), dtype=bool)
    if candidates.any():
        chosen = hashes[candidates]
        repeated[candidates] = pd.Series(chosen).duplicated().to_numpy(bool) | state.seen.contains(
            chosen
        )
    if late.any():
        lf = events.iloc[order[late]]
        out.add(
            TableName.LATE_EVENTS,
            pd.DataFrame(
                {
                    "cluster": cluster,
                    "event_id": lf["event_id"].to_numpy(),
                    "kind": lf["kind"].to_numpy(),
                    "event_time": lf["event_time"].to_numpy(np.int64),
                    "clock": np.int64(clock or 0),  # late: there is a clock
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
        out.add(TableName.QUARANTINE, quarantine_rows(ff, ReasonCode.FUTURE_EVENT_TIME, reasons))
        out.stats["quarantined"] += int(future.sum())
    out.stats["duplicates"] += int(repeated.sum())
    keep = candidates & ~repeated
    admitted = _integers(events[ADMITTED].take(order[keep]).reset_index(drop=True))
    if len(admitted):
        admitted_t = t[keep]
        latest = int(admitted_t.max())
        state.clock = latest if clock is None else max(int(clock), latest)
        state.seen = state.seen.remember(
            hashes[keep], admitted_t, state.clock - config.allowed_lateness_ms
        )
    return admitted


_INTEGERS = {
    f.name: f.type.to_pandas_dtype()
    for f in EVENTS
    if pa.types.is_integer(f.type) and f.name in ADMITTED
}


def _integers(events: pd.DataFrame) -> pd.DataFrame:
    """The integer columns as the admitted events alone would have them: a null in a rejected,
    late or repeated record made pandas read its column as floats, and a float's text (an
    event time in a seed) would differ from the integer's."""
    floats = {}
    for name, integer in _INTEGERS.items():
        values = events[name].to_numpy()
        if values.dtype.kind == "f" and not np.isnan(values).any():
            floats[name] = values.astype(integer)
    return events.assign(**floats) if floats else events
