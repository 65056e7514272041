"""The per-cluster state machine behind the streaming job, free of Spark.

:func:`advance` takes one cluster's state and a batch of its valid events (a pandas frame, rows in
any order) and returns the new state and the rows for each output table. The Spark layer only
converts; every decision is made here with :mod:`udfs.rocketmq`.

Time. Each cluster has its own event-time clock: the largest accepted event time. Deadlines
(an isolation ending, a NameServer scan dropping a broker) fire when the clock reaches them, before
any event at the same time, so the same events give the same rows however they are split into
batches. An event older than ``clock - allowed_lateness`` is late: it is kept in ``late_events``
and changes nothing. An event more than ``max_future_skew`` after its record's ingest time (the
Kafka timestamp, the file's time) is from the future and quarantined: judged per record, so a
cluster that was silent for hours is not locked out when it sends again. An event whose
``event_id`` was already applied is a duplicate: counted, and changes nothing. The ids of the
events within the allowed lateness are kept for that; older ones would be late anyway.

Stages, each a module, composed in :func:`_apply` (one segment of a batch) in this order:

1. ``_admission``: quarantine, late, future and repeated events; the clock; what each producer
   did after each attempt; ``_summaries``: each send summary as the sends that make its effect;
2. ``_producers``: each producer's last send, the segments cut at eviction deadlines, evictions;
3. ``_nameserver``: heartbeats, scans and routes, giving the routes at any instant
   (``RouteTimeline``); each change of a topic's route is recorded once (``_routing_table``'s
   ``record``: the ``routes`` table);
4. ``_faults`` (over ``_tables``): every FaultItem update of a scope at once, with numpy;
5. ``_routing``: at each retried attempt, the real :func:`select_queue` on the FaultTable and
   the routes of that instant;
6. ``_faults`` again: the isolation decisions and ``fault_items``, the tables stored back;
7. ``_policies``: faultline's own rules over the cluster scope's decisions (each off by
   default: isolation cap, latency outliers, recovery probing);
8. ``_routing_table``: each change of a topic's selectable queues per scope key (``_queues``
   lays out each route once per segment; the ``producer`` scope's rows refer to the recorded
   route instead of listing its queues);
9. ``_delays``: messages into the delay queues and the due ones out;
10. ``_transactions``: half messages, their ends and the brokers' check-backs.

Each stage reads the segment's :class:`~udfs.engine._segment.Segment` (the cluster, its state and
config, the segment's events and clock, the output) and the named records earlier stages gave
(``RouteTimeline``, ``Opened``, ``Change``). ``_shards`` splits the work of a cluster over keys;
``_output`` types the rows; ``_state`` is the typed, versioned state and its codec. Python runs
per *decision point* only (a failed attempt that will be retried, a route change, a heartbeat).

Delay queues. Failed sends, consumer send-backs and delayed sends enter the delay queues of
:mod:`udfs.schedule`, which wait in the state and are released on the same clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from udfs._frames import equal, isin, memo, objects, where
from udfs.engine._admission import (
    admit,
    arrival_order,
    next_steps,
    quarantine,
    sends_of,
)
from udfs.engine._config import (
    CLUSTER,
    PRODUCER,
    SCOPES,
    BrokerTransactions,
    EngineConfig,
    Policies,
)
from udfs.engine._delays import schedule_batch
from udfs.engine._faults import open_tables, settle
from udfs.engine._gauges import gauges
from udfs.engine._nameserver import follow
from udfs.engine._output import DECISIONS, Out
from udfs.engine._policies import govern, release_router
from udfs.engine._producers import evict, segments, spent_budget, touch
from udfs.engine._routing import decide
from udfs.engine._routing_table import publish, record
from udfs.engine._segment import EventAt, Segment
from udfs.engine._shards import WHOLE, Shard
from udfs.engine._state import (
    STATE_VERSION,
    Isolation,
    State,
    dumps,
    footprint,
    isolations,
    loads,
    new_state,
)
from udfs.engine._summaries import expand
from udfs.engine._tables import Change
from udfs.engine._transactions import remember_answers, transact
from udfs.rocketmq import Next
from udfs.vocabulary import EventKind

__all__ = [
    "CLUSTER",
    "DECISIONS",
    "PRODUCER",
    "SCOPES",
    "STATE_VERSION",
    "WHOLE",
    "BrokerTransactions",
    "EngineConfig",
    "Isolation",
    "Policies",
    "Shard",
    "State",
    "Step",
    "advance",
    "dumps",
    "footprint",
    "gauges",
    "isolations",
    "loads",
    "new_state",
]


@dataclass
class Step:
    state: State
    tables: dict[str, pa.Table]
    """Each output table's rows (only tables that got some), typed by ``udfs.schema.TABLES``."""
    stats: dict[str, int]


def advance(
    cluster: str,
    state: State | None,
    events: pd.DataFrame,
    config: EngineConfig,
    shard: Shard = WHOLE,
    decided: Callable[[dict[str, pa.Table]], None] | None = None,
) -> Step:
    """Apply one batch of a cluster's events. ``events`` has the parsed event columns (see
    ``udfs.schema.EVENTS``) and may be empty (nothing changes then). ``shard`` says which part of
    the cluster's work this call does (:mod:`udfs.engine._shards`); by default, all of it.
    ``decided`` is handed the cluster scope's rows of the :data:`DECISIONS` tables as soon as
    that scope is settled, while the later stages run (a caller can publish them meanwhile);
    the step's tables hold those rows as well. On a shard that does not decide for the cluster
    scope, or for a batch of no valid event, it is not called: there are no such rows."""
    with memo():  # each text column of the batch made Python objects once
        return _advance(cluster, state, events, config, shard, Out(decided))


def _advance(
    cluster: str,
    state: State | None,
    events: pd.DataFrame,
    config: EngineConfig,
    shard: Shard,
    out: Out,
) -> Step:
    state = state if state is not None else new_state()
    # every shard admits every record alike; only the lead files and counts them
    admission = out if shard.lead else Out()
    admission.stats["input"] = len(events)
    events = quarantine(events, admission)
    first_batch = state.clock is None
    events = admit(cluster, state, events, arrival_order(events), config, admission)
    admission.stats["valid"] += len(events)
    events = expand(events, admission)
    if len(events) == 0:
        return Step(state, out.frames(), out.stats)
    first = EventAt(int(events["event_time"].iloc[0]), str(events["event_id"].iloc[0]))
    if not shard.lead:  # its clock moved with every event: its deadlines fire all the same
        events = _owned(events, shard)
    parts = segments(state, events, config)
    for n, part in enumerate(parts):
        seg = Segment(
            cluster=cluster,
            state=state,
            config=config,
            shard=shard,
            out=out,
            events=part.events,
            sends=sends_of(part.events, config),
            clock_end=part.clock_end,
            first_event=first if first_batch else None,
        )
        _apply(seg, final=n == len(parts) - 1)
        evict(seg)
        first_batch = False
    return Step(state, out.frames(), out.stats)


def _owned(events: pd.DataFrame, shard: Shard) -> pd.DataFrame:
    """What a shard other than the lead applies: the NameServer's events and its producers'
    sends."""
    keep = isin(events["kind"], (EventKind.HEARTBEAT, EventKind.ROUTE))
    sends = np.flatnonzero(equal(events["kind"], EventKind.SEND_RESULT))
    keep[sends] = shard.mask(objects(events["producer_id"])[sends])
    return events[keep].reset_index(drop=True)


def _apply(seg: Segment, final: bool) -> None:
    """The stages, for the segment's admitted events in event-time order, up to its clock;
    ``final``: the batch's last segment."""
    state, sends, config, shard = seg.state, seg.sends, seg.config, seg.shard
    touch(state, sends)
    spent = spent_budget(state, sends, config) if config.ignore_spent_budget else None
    after = next_steps(sends, config)
    mine = where(sends, shard.mask(sends["producer_id"]))
    routes = follow(seg)
    if shard.lead:
        record(seg, routes)
    counted = None if spent is None else ~spent  # what the cluster scope counts
    opened = {
        s: open_tables(seg, s, sends, counted) if s == CLUSTER else open_tables(seg, s, mine)
        for s in seg.scopes
    }
    retries = np.flatnonzero(after == Next.RETRY)
    tables = {s: o.tables for s, o in opened.items() if o.tables is not None}
    decide(seg, retries, tables, routes)
    route = None
    isolated: dict[str, int] = {}
    cluster_changes: list[Change] = []
    for o in opened.values():
        changes = settle(seg, o)
        if o.scope == CLUSTER:
            key = changes.get(seg.cluster, [])
            changes[seg.cluster] = govern(seg, o, key, sends, counted, routes)
            if config.policies.fault_aware_release:
                route = release_router(seg.cluster, o, changes[seg.cluster], routes)
            isolated, cluster_changes = o.isolated(seg.cluster), changes[seg.cluster]
        publish(seg, o, changes, routes)
        if final and o.scope == CLUSTER:
            seg.out.decide(CLUSTER)  # no later stage decides in the cluster scope
    if shard.lead:
        schedule_batch(seg, after, route)
        transact(seg, isolated, cluster_changes, routes)
        remember_answers(state, sends)
