"""The FaultTables of a scope over one segment: opened before the routing decisions (which read
them at each decision point) and settled after them, when their rows and availability
decisions are written and they are stored back."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from udfs._frames import codes, distinct, objects, tuples
from udfs.engine._config import CLUSTER
from udfs.engine._segment import EventAt, Segment
from udfs.engine._state import Item, State, Table
from udfs.engine._tables import Change, DecisionRow, ScopeTables, emit, expire_idle, report_rows


@dataclass
class Opened:
    """A scope's tables during a segment."""

    scope: str
    tables: ScopeTables | None
    """None when no send of the segment updates a table of the scope."""
    items_at_start: dict[str, list[Item]]
    new_topics: dict[str, dict[str, EventAt]] = field(default_factory=dict)
    """Per producer, the topics it sent to for the first time, and that send."""
    isolated_at_start: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per key, the brokers isolated (until when) at the segment's start, where the policies
    (``_policies``) decide that rather than the FaultTable's pending items."""

    def isolated(self, key: str) -> dict[str, int]:
        """The brokers ``key``'s table isolates at the segment's start, until when (a new
        dict)."""
        isolated = self.isolated_at_start.get(key)
        if isolated is not None:
            return dict(isolated)
        return {it.broker: it.start for it in self.items_at_start.get(key, ()) if it.pending}


def open_tables(
    seg: Segment, scope: str, sends: pd.DataFrame, counted: np.ndarray | None = None
) -> Opened:
    """Compute every FaultItem update of the segment's ``sends`` that the scope counts: those
    ``counted`` (default: all), in the cluster's own table or in each producer's with its latency
    fault switch on. The tables read the sends at their positions, not a copy of those counted."""
    cluster, state, config = seg.cluster, seg.state, seg.config
    opened = Opened(scope, None, {k: t.items for k, t in state.tables[scope].items()})
    counts = np.ones(len(sends), dtype=bool) if counted is None else counted
    if scope == CLUSTER:
        # the cluster's table exists from its first event, so that its routing table is
        # published from the first route on, whichever batch the first send falls in
        _tstate(state, scope, cluster).profile = config.cluster_profile
        followed: str | None = config.cluster_profile
    else:
        counts = counts & sends["latency_fault_enable"].to_numpy(bool)
        followed = None  # each producer's own
    at = None if counts.all() else np.flatnonzero(counts)
    if scope != CLUSTER:
        firsts = np.arange(len(sends)) if at is None else at
        firsts = firsts[distinct(*(objects(sends[c])[firsts] for c in ("producer_id", "topic")))]
        columns = ("producer_id", "topic", "event_time", "event_id")
        for pid, topic, t, eid in tuples(sends, columns, firsts):
            tstate = _tstate(state, scope, str(pid))
            if topic not in tstate.topics:
                tstate.topics = sorted([*tstate.topics, topic])
                opened.new_topics.setdefault(str(pid), {})[topic] = EventAt(int(t), str(eid))
    if not counts.any():
        return opened
    rows = report_rows(sends, followed, config, at)
    # each row's scope key, numbered in order of appearance
    if scope == CLUSTER:
        key_codes = np.zeros(len(rows["row"]), dtype=np.int64)
        keys = [cluster] if len(key_codes) else []
    else:
        producers, names = codes(sends["producer_id"])  # numbered by Arrow, not by hashing
        key_codes, met = pd.factorize(producers[rows["row"]])  # in the order rows meet them
        keys = [names[i] for i in met.tolist()]
    rows["key"] = key_codes
    # a producer's table follows the profile of its latest event
    latest = np.zeros(len(keys), dtype=np.int64)
    np.maximum.at(latest, key_codes, np.arange(len(key_codes)))
    key_profiles = {
        str(k): config.profile(str(p))
        for k, p in zip(keys, rows["profile"][latest].tolist(), strict=True)
    }
    tstates = {}
    for key, profile in key_profiles.items():
        tstates[key] = _tstate(state, scope, key)
        tstates[key].profile = profile.name
    opened.tables = ScopeTables(scope, tstates, key_profiles, rows, sends)
    return opened


def _tstate(state: State, scope: str, key: str) -> Table:
    tables = state.tables[scope]
    if key not in tables:
        tables[key] = Table()
    return tables[key]


def settle(seg: Segment, opened: Opened) -> dict[str, list[Change]]:
    """Write the scope's ``fault_items`` and ``broker_decisions`` (isolations that ended by the
    segment's clock included, in tables the segment did not touch too) and store the tables.
    Returns each key's availability changes, in time order."""
    cluster, config, out, clock_end = seg.cluster, seg.config, seg.out, seg.clock_end
    scope, tables = opened.scope, opened.tables
    changes = tables.finish(cluster, clock_end, out) if tables else {}
    out.stats["stale"] += tables.stale if tables else 0
    expired: list[DecisionRow] = []
    stored = seg.state.tables[scope]
    for key, tstate in stored.items():
        if tstate.profile is not None and (tables is None or key not in tables.init):
            expire_idle(key, tstate, clock_end, expired)
    for key, more in emit(
        scope, cluster, lambda k: config.profile(str(stored[k].profile)), expired, out
    ).items():
        changes.setdefault(key, []).extend(more)
    return changes
