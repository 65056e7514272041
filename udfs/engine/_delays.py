"""Delay queues: messages into ``SCHEDULE_TOPIC_XXXX`` and the due ones out
(:mod:`udfs.schedule`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from udfs.engine._config import EngineConfig
from udfs.engine._output import Out
from udfs.engine._state import State
from udfs.engine._transactions import prepared
from udfs.rocketmq import Next
from udfs.schedule import Schedule
from udfs.vocabulary import EventKind, TableName


def schedule_batch(
    cluster: str,
    state: State,
    events: pd.DataFrame,
    sends: pd.DataFrame,
    after: np.ndarray,
    config: EngineConfig,
    out: Out,
    clock_end: int,
    route: Callable[[dict[str, Any]], str | None] | None = None,
) -> None:
    """Messages into the delay queues, and the due ones out, at ``clock_end`` (onto the broker
    ``route`` names, with fault-aware release)."""
    schedule = Schedule(cluster, state.schedule, config.delays, config.broker_profile)
    # a half message is never delayed (the client clears DELAY) nor redelivered: a failed one
    # ends sendMessageInTransaction before its local transaction runs
    half = prepared(sends)
    schedule.send_failures(sends[(after == Next.FAIL) & ~half])
    delayed = (after == Next.RETURN) & ~half & (sends["delay_level"].fillna(0).to_numpy() > 0)
    schedule.delayed_sends(sends[delayed])
    retry = (events["kind"] == EventKind.CONSUME_RESULT) & (events["status"] == "RECONSUME_LATER")
    schedule.consume_retries(events[retry])
    schedule.release(clock_end, route)
    out.rows(TableName.SCHEDULE_ENTRIES, schedule.entries)
    out.rows(TableName.REDELIVERIES, schedule.redeliveries)
