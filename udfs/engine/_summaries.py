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

from udfs.engine._output import Out
from udfs.vocabulary import EventKind


def expand(events: pd.DataFrame, out: Out) -> pd.DataFrame:
    """The admitted ``events`` (in (event_time, event_id) order) with each send summary as its
    first and last send and without consume summaries, in the same order; counts in ``out``
    the messages the events stand for and the summaries the producers dropped."""
    kind = events["kind"].to_numpy(object)
    sends = kind == EventKind.SEND_SUMMARY
    summary = sends | (kind == EventKind.CONSUME_SUMMARY)
    out.stats["messages"] += len(events)
    if not summary.any():
        if events["messages"].notna().any() or events["latency_total"].notna().any():
            cleared: pd.DataFrame = events.assign(messages=np.nan, latency_total=np.nan)
            return cleared  # the fields of a summary, on records that are none
        return events
    counted = events["messages"].to_numpy(np.float64, na_value=0.0)[summary]
    out.stats["messages"] += int(counted.sum()) - int(summary.sum())
    out.stats["dropped"] += int(events["dropped"].to_numpy(np.float64, na_value=0.0)[summary].sum())
    rest: pd.DataFrame = events[~summary].assign(messages=np.nan, latency_total=np.nan)
    if not sends.any():
        return rest.reset_index(drop=True)
    last = events[sends].assign(kind=EventKind.SEND_RESULT, outcome="SEND_OK", attempt=0)
    first_time = last["first_time"].fillna(last["event_time"]).astype(np.int64)
    earlier = (first_time < last["event_time"]).to_numpy(bool)
    first = last[earlier].assign(
        event_time=first_time[earlier],
        latency_ms=last["first_latency_ms"].fillna(last["latency_ms"])[earlier],
        event_id=last["first_event_id"].fillna(last["event_id"] + "/first")[earlier],
        messages=0,
        latency_total=0,
    )
    merged = pd.concat([rest, first, last], ignore_index=True)
    texts = {
        c: t for c, t in events.dtypes.items() if t.kind == "O" or isinstance(t, pd.ArrowDtype)
    }
    merged = merged.astype({c: t for c, t in texts.items() if merged[c].dtype != t})
    ordered: pd.DataFrame = merged.sort_values(["event_time", "event_id"], kind="stable")
    return ordered.reset_index(drop=True)
