"""Vectorized forms of the per-update rules, for whole columns of updates at once. Each function
matches its scalar counterpart in this package (the tests check them against each other)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from udfs.rocketmq._profiles import Profile

I64 = npt.NDArray[np.int64]
BOOL = npt.NDArray[np.bool_]


def not_available_durations(profile: Profile, latency_ms: I64, isolation: BOOL) -> I64:
    """:func:`not_available_duration` over arrays."""
    latency = np.where(isolation, profile.isolation_latency, latency_ms)
    bounds = np.asarray(profile.latency_max, dtype=np.int64)
    durations = np.asarray((0, *profile.not_available_duration), dtype=np.int64)
    # the number of bounds <= latency picks the band; 0 (below every bound) gives 0
    return durations[np.searchsorted(bounds, latency, side="right")]


def start_timestamps(
    profile: Profile, group_start: BOOL, initial_start: I64, now_ms: I64, durations: I64
) -> I64:
    """``startTimestamp`` after each update of runs of updates to one broker each.

    Rows are grouped by broker (``group_start`` marks each run's first row, whose item held
    ``initial_start`` before it: 0 for a new item). 4.x overwrites (``now + duration``); 5.x
    extends only, so within a run the value is a running maximum.
    """
    if profile.line != "5":
        return now_ms + durations
    none = np.iinfo(np.int64).min  # no new window from this update
    candidate = np.where(durations > 0, now_ms + durations, none)
    candidate = np.where(group_start, np.maximum(candidate, initial_start), candidate)
    real = candidate != none
    if not real.any():
        return candidate
    # a running maximum per run, as one running maximum: each run is lifted above the one before
    # (the sentinel of "no new window" is below every value its run starts with)
    run = np.cumsum(group_start) - 1
    low = int(candidate[real].min()) - 1  # stands for the sentinel
    span = int(candidate.max()) - low + 1
    if span * (int(run[-1]) + 1) >= 2**62:  # too wide to lift: one call per run
        out = np.empty_like(candidate)
        starts = np.flatnonzero(group_start)
        ends = np.append(starts[1:], len(candidate)).astype(np.int64)
        for begin, end in zip(starts, ends, strict=True):
            out[begin:end] = np.maximum.accumulate(candidate[begin:end])
        return out
    lifted = run * span + (np.where(real, candidate, low) - low)
    out = np.maximum.accumulate(lifted) - run * span + low
    return np.asarray(np.where(out == low, none, out), dtype=np.int64)
