"""What a cluster's state holds now, for the job's metrics (``streaming.job.metrics``): which
brokers each scope holds out of its routes and why, how many of each topic's writable brokers
that is, and what waits in the delay queues and the half queues.

Read after :func:`udfs.engine.advance`, when every deadline up to the clock has fired: a
FaultTable item still ``pending`` isolates its broker (its ``RESTORE`` is not written yet), and
the policies' ``shown`` is what a reader of every ``broker_decisions`` row so far holds. A
producer's items are read only while its table isolates something (``Table.due``), so past one
check per producer the cost grows with what is held out and with the routes.
"""

from __future__ import annotations

from typing import Any

from udfs.engine._config import CLUSTER, PRODUCER, EngineConfig
from udfs.engine._shards import Shard
from udfs.engine._state import State
from udfs.vocabulary import Decision, ProducerState

SICK = (Decision.ISOLATE, Decision.OUTLIER, Decision.PANIC)
"""What counts against a topic's writable brokers: isolated, or kept in its route only by the
isolation cap."""


def gauges(cluster: str, state: State, config: EngineConfig, shard: Shard) -> dict[str, Any]:
    """One shard's part of a cluster's gauges, as plain JSON values:

    - ``held``: ``[scope, decision, pairs]``: the (scope key, broker) pairs held out now, by the
      decision that holds them (``ISOLATE``: the FaultTable, or ``OUTLIER``, ``PANIC``: an
      isolation the cap waived, ``PROBE``: on probation);
    - ``brokers``: the cluster scope's, ``{broker: decision}``;
    - ``topics``: per topic of the route, ``[writable brokers, of them ISOLATE/OUTLIER/PANIC]``;
    - ``delayed``: per delay level, the messages waiting; ``halves``: half messages waiting.

    The lead shard has the cluster scope, the routes' topics and the queues; every shard has its
    producers' isolations, so a cluster's gauges are the sum of its shards'.
    """
    held: dict[tuple[str, str], int] = {}
    pairs = 0
    for table in state.tables[PRODUCER].values():
        if table.due is not None:
            pairs += sum(1 for it in table.items if it.pending)
    if pairs:
        held[PRODUCER, Decision.ISOLATE] = pairs
    if not shard.lead:
        return {"held": [[*k, n] for k, n in held.items()]}
    brokers = cluster_scope(cluster, state)
    for decision in brokers.values():
        held[CLUSTER, decision] = held.get((CLUSTER, decision), 0) + 1
    expired = {b for b, hb in state.heartbeats.items() if hb.expired}
    topics = {}
    for topic, route in {**config.static_routes, **state.routes}.items():
        writable = {e[0] for e in route if e[0] not in expired and int(e[2]) & 2 and int(e[1]) > 0}
        topics[topic] = [len(writable), sum(1 for b in writable if brokers.get(b) in SICK)]
    return {
        "held": [[*k, n] for k, n in sorted(held.items())],
        "brokers": brokers,
        "topics": topics,
        "delayed": {str(level): len(q) for level, q in state.schedule.items() if q},
        "halves": len(state.transactions),
    }


def cluster_scope(cluster: str, state: State) -> dict[str, str]:
    """The cluster scope's brokers held out now, each by its decision: the policies' last word
    where they have one, else the FaultTable's isolation."""
    brokers: dict[str, str] = {}
    p = state.policies
    for b, shown in p.shown.items():
        if shown.state == ProducerState.ISOLATED:
            outlier = p.outlier.get(b)
            isolated = outlier is not None and outlier.until == shown.until
            brokers[b] = Decision.OUTLIER if isolated else Decision.ISOLATE
        elif shown.state == ProducerState.PROBING:
            brokers[b] = Decision.PROBE
        elif shown.waived:
            brokers[b] = Decision.PANIC
    table = state.tables[CLUSTER].get(cluster)
    for it in table.items if table is not None else ():
        if it.pending:
            brokers.setdefault(it.broker, Decision.ISOLATE)
    return dict(sorted(brokers.items()))
