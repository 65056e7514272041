"""Shards: one cluster's work split over several keys of the stateful operator.

Every shard receives every record of its cluster and admits them the same way, so each has the
same clock, the same late events and the same repeats. What they split is the work after that:

- the *lead* shard (index 0) keeps the ``cluster`` scope (which every producer feeds), the
  NameServer's decisions, the delay queues, quarantine, late events and the batch's counters;
- each producer instance belongs to one shard (a stable hash of its ``producer_id``), which keeps
  its ``producer`` scope: its own FaultTable, its routing decisions and routing tables, and its
  ``EVICTED`` row.

Each shard still follows the NameServer (heartbeats and routes are few), because a producer's
routing decisions need the routes of that instant. The rows of all shards together are the rows
of one shard doing everything: the parts they split never read each other's state.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Shard:
    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} of {self.count}")

    @property
    def lead(self) -> bool:
        """The shard of the cluster-wide work."""
        return self.index == 0

    def owns(self, producer_id: str) -> bool:
        return self.count == 1 or owner(producer_id, self.count) == self.index

    def mask(self, producer_ids: np.ndarray | pd.Series) -> np.ndarray:
        """Which of these producers this shard owns."""
        if self.count == 1:
            return np.ones(len(producer_ids), dtype=bool)
        codes, uniques = pd.factorize(producer_ids, use_na_sentinel=False)
        mine = np.array([self.owns(str(p)) for p in uniques], dtype=bool)
        return mine[codes]


WHOLE = Shard()
"""One shard doing all of a cluster's work."""


def owner(producer_id: str, count: int) -> int:
    """The shard of a producer instance: the same on every machine and in every process."""
    return zlib.crc32(producer_id.encode()) % count
