"""What every stage of a segment reads: the cluster, its state and config, the segment's events
and clock, and where the rows go (:class:`Segment`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import pandas as pd

from udfs.engine._config import PRODUCER, EngineConfig
from udfs.engine._output import Out
from udfs.engine._queues import Queues
from udfs.engine._shards import Shard
from udfs.engine._state import State


class EventAt(NamedTuple):
    """An event by its place in the cluster's time."""

    time: int
    event_id: str


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment of a batch (:func:`udfs.engine._producers.segments`), as the stages see it.
    The stages change ``state`` and write to ``out``; the rest stays as it is."""

    cluster: str
    state: State
    config: EngineConfig
    shard: Shard
    out: Out
    events: pd.DataFrame
    """The admitted events, in event-time order."""
    sends: pd.DataFrame
    """Their send results, with the defaults filled in."""
    clock_end: int
    """The cluster's clock at the segment's end: deadlines up to it fire."""
    first_event: EventAt | None
    """The cluster's first event ever, when it falls in this segment."""
    queues: Queues = field(default_factory=Queues)
    """Each route's queues, worked out once for the segment."""

    @property
    def scopes(self) -> list[str]:
        """The scopes this shard decides in: the producer scope on every shard, the others on
        the lead."""
        return [s for s in self.config.scopes if s == PRODUCER or self.shard.lead]
