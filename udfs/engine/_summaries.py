"""Summaries: what a producer's sends that could not change a decision do to the state.

A ``send_summary`` stands for ``messages`` SEND_OK first attempts of one producer to one broker
and topic (:mod:`streaming.client`'s reporting rule keeps every other send in full). Such a send
only sets its broker's ``currentLatency`` (and 5.x's ``reachableFlag``; in 4.x also
``startTimestamp``, to the send itself: available), so the FaultItem after a run of them is
what its last one leaves, and the first one is when the run began. A summary is therefore
applied as two sends: its first (``first_time``, ``first_latency_ms``, ``first_event_id``) and
its last (``event_time``, ``latency_ms``, its own ``event_id``), or one when they are the same
instant. The last carries the summary's ``messages`` and ``latency_total`` for the
latency-outlier windows; the first carries none. A ``consume_summary`` (successful consumes,
which change nothing) is counted and dropped.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from udfs._frames import equal
from udfs.engine._output import Out
from udfs.vocabulary import EventKind


def expand(events: pd.DataFrame, out: Out) -> pd.DataFrame:
    """The admitted ``events`` (in (event_time, event_id) order, no key twice) with each send
    summary as its first and last send and without consume summaries, in the same order;
    counts in ``out`` the messages the events stand for and the summaries the producers
    dropped."""
    sends = equal(events["kind"], EventKind.SEND_SUMMARY)
    summary = sends | equal(events["kind"], EventKind.CONSUME_SUMMARY)
    out.stats["messages"] += len(events)
    if not summary.any():
        if events["messages"].notna().any() or events["latency_total"].notna().any():
            cleared: pd.DataFrame = events.assign(messages=np.nan, latency_total=np.nan)
            return cleared  # the fields of a summary, on records that are none
        return events
    counted = events["messages"].to_numpy(np.float64, na_value=0.0)[summary]
    out.stats["messages"] += int(counted.sum()) - int(summary.sum())
    out.stats["dropped"] += int(events["dropped"].to_numpy(np.float64, na_value=0.0)[summary].sum())
    kept = np.flatnonzero(~summary | sends)
    times = events["event_time"].to_numpy(np.int64)
    first_time = events["first_time"].to_numpy(np.float64, na_value=np.nan)
    summaries = np.flatnonzero(sends)
    earlier = summaries[first_time[summaries] < times[summaries]]
    first_times = first_time[earlier].astype(np.int64)
    # a first send's id: the summary's first_event_id, else the summary's own id and "/first"
    ids = pa.array(events["event_id"].array)
    named = pa.array(events["first_event_id"].array).take(earlier).cast(ids.type)
    suffix = pa.scalar("/first", ids.type)
    own = pc.binary_join_element_wise(ids.take(earlier), suffix, pa.scalar("", ids.type))
    first_ids = pc.coalesce(named, own)
    # in (time, id) order: Arrow orders texts by their UTF-8 bytes, which is Python's order
    order = pc.sort_indices(
        pa.table({"t": first_times, "id": first_ids}), [("t", "ascending"), ("id", "ascending")]
    ).to_numpy()
    earlier, first_times, first_ids = earlier[order], first_times[order], first_ids.take(order)
    lasts = sends[kept]
    places = _places(times[kept], events["event_id"], kept, lasts, first_times, first_ids)
    firsts = places + np.arange(len(places))  # the first sends' rows in the result
    rows = np.empty(len(kept) + len(earlier), np.int64)
    is_first = np.zeros(len(rows), bool)
    is_first[firsts] = True
    rows[~is_first] = kept
    rows[firsts] = earlier
    result = events.take(rows).reset_index(drop=True)
    last = np.zeros(len(rows), bool)
    last[~is_first] = lasts
    summarized = last | is_first
    result["kind"] = _texts(result["kind"], summarized, EventKind.SEND_RESULT.value)
    result["outcome"] = _texts(result["outcome"], summarized, "SEND_OK")
    result["attempt"] = result["attempt"].mask(summarized, 0.0)
    event_time = result["event_time"].to_numpy(copy=True)
    event_time[firsts] = first_times
    result["event_time"] = event_time
    result["event_id"] = _texts(result["event_id"], is_first, first_ids)
    latency = result["latency_ms"].to_numpy(np.float64, na_value=np.nan, copy=True)
    first_latency = result["first_latency_ms"].to_numpy(np.float64, na_value=np.nan)[firsts]
    latency[firsts] = np.where(np.isnan(first_latency), latency[firsts], first_latency)
    result["latency_ms"] = latency
    for counts in ("messages", "latency_total"):
        values = np.where(last, result[counts].to_numpy(np.float64, na_value=np.nan), np.nan)
        values[firsts] = 0.0
        result[counts] = values
    return result


def _texts(column: pd.Series, where: np.ndarray, values: str | pa.Array) -> pd.Series:
    """A text column with ``values`` (one text, or one per place) where the mask ``where`` is
    set, replaced by Arrow: no Python object is made for each text."""
    held = pa.array(column.array)
    mask = pa.array(where)
    if isinstance(values, str):
        changed = pc.if_else(mask, pa.scalar(values, held.type), held)
    else:
        changed = pc.replace_with_mask(held, mask, values.cast(held.type))
    return pd.Series(changed, dtype=column.dtype)


def _places(
    times: np.ndarray,
    ids: pd.Series,
    kept: np.ndarray,
    lasts: np.ndarray,
    at: np.ndarray,
    at_ids: pa.Array,
) -> np.ndarray:
    """Where each first send (at ``at``, ``at_ids``, in that order) goes among the records kept
    (at ``times``; the ``ids`` at the places ``kept``, in that order; ``lasts`` marks the
    summaries' last sends): by event time, then by event id; after a record of its own key but
    before a last send of it, as a stable sort of the records, the first sends and the last
    sends would put them."""
    places = np.searchsorted(times, at, "left")
    tied = np.flatnonzero(places < np.searchsorted(times, at, "right"))
    if len(tied):  # records at the same time as a first send: their ids decide
        held = pa.array(ids.array)
        for j in tied.tolist():
            key = (at[j], at_ids[j].as_py(), True)
            while (
                places[j] < len(times)
                and (times[places[j]], held[kept[places[j]]].as_py(), lasts[places[j]]) < key
            ):
                places[j] += 1
    return places
