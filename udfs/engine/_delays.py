"""Delay queues: messages into ``SCHEDULE_TOPIC_XXXX`` and the due ones out
(:mod:`udfs.schedule`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from udfs._frames import equal
from udfs.engine._segment import Segment
from udfs.engine._transactions import prepared
from udfs.rocketmq import Next
from udfs.schedule import Schedule
from udfs.vocabulary import EventKind, TableName


def schedule_batch(
    seg: Segment,
    after: np.ndarray,
    route: Callable[[dict[str, Any]], str | None] | None = None,
) -> None:
    """Messages into the delay queues (``after`` says what each send's producer did next), and
    the due ones out, at the segment's clock (onto the broker ``route`` names, with fault-aware
    release)."""
    config, events, sends, out = seg.config, seg.events, seg.sends, seg.out
    schedule = Schedule(seg.cluster, seg.state.schedule, config.delays, config.broker_profile)
    # a half message is never delayed (the client clears DELAY) nor redelivered: a failed one
    # ends sendMessageInTransaction before its local transaction runs
    half = prepared(sends)
    schedule.send_failures(sends, np.flatnonzero((after == Next.FAIL) & ~half))
    delayed = (after == Next.RETURN) & ~half & (sends["delay_level"].fillna(0).to_numpy() > 0)
    schedule.delayed_sends(sends, np.flatnonzero(delayed))
    retry = equal(events["kind"], EventKind.CONSUME_RESULT) & equal(
        events["status"], "RECONSUME_LATER"
    )
    schedule.consume_retries(events, np.flatnonzero(retry))
    schedule.release(seg.clock_end, route)
    out.rows(TableName.SCHEDULE_ENTRIES, schedule.entries)
    out.rows(TableName.REDELIVERIES, schedule.redeliveries)
