"""Routing decisions: at each failed attempt that will be retried, the queue the producer picks
next, by the real :func:`select_queue`, in each scope, on the FaultTable and the routes of that
instant. RocketMQ 4.x's side effects (a rewritten queue list, a broker removed from the table)
flow back into the state."""

from __future__ import annotations

from typing import Any

import numpy as np

from udfs._frames import tuples
from udfs.engine._config import CLUSTER, PRODUCER
from udfs.engine._nameserver import Routes, RouteTimeline
from udfs.engine._segment import Segment
from udfs.engine._state import PublishInfo, Queue, rng
from udfs.engine._tables import ScopeTables
from udfs.rocketmq import FaultTable, MessageQueue, SendMode, TopicPublishInfo, select_queue
from udfs.vocabulary import Decision, TableName

_READ = ("event_time", "event_id", "producer_id", "client_profile", "latency_fault_enable",
         "topic", "message_id", "broker_name", "attempt", "mode", "queue_id")  # fmt: skip
"""The fields of a retried send a decision reads."""


def decide(
    seg: Segment, retries: np.ndarray, tables: dict[str, ScopeTables], routes: RouteTimeline
) -> None:
    """One ``routing_decisions`` row per retried attempt (the segment's sends at the positions
    ``retries``, in event-time order) and scope of the shard, on the scope's ``tables``; a
    producer's own scope only on the shard that owns it."""
    row: Any
    scopes = seg.scopes
    for row in tuples(seg.sends, _READ, retries):
        now = routes.at(int(row.event_time), row.event_id)
        for scope in scopes:
            if scope == CLUSTER or seg.shard.owns(str(row.producer_id)):
                _decide(seg, scope, row, tables.get(scope), now)


def _decide(seg: Segment, scope: str, row: Any, tables: ScopeTables | None, routes: Routes) -> None:
    cluster, config, out, queues = seg.cluster, seg.config, seg.out, seg.queues
    producer = str(row.producer_id)
    if scope == CLUSTER:
        key, profile, enable = cluster, config.profile(config.cluster_profile), True
    else:
        key = producer
        profile = config.profile(row.client_profile)
        enable = bool(row.latency_fault_enable)
    table = tables.view(key) if tables is not None else None
    route = routes.get(row.topic, ())
    base = {
        "event_id": row.event_id,
        "scope": scope,
        "scope_key": key,
        "cluster": cluster,
        "producer_id": producer,
        "topic": row.topic,
        "message_id": row.message_id,
        "failed_broker": row.broker_name,
        "attempt": int(row.attempt),
        "profile": profile.name,
        "decided_at": int(row.event_time),
    }
    if not route:
        out.rows(
            TableName.ROUTING_DECISIONS,
            [
                {
                    **base,
                    "selected_broker": None,
                    "selected_queue_id": None,
                    "rule": "no-route-info",
                    "rewritten": False,
                    "removed_broker": None,
                    "swallowed": None,
                }
            ],
        )
        return
    pkey = f"{scope}|{key}|{producer}|{row.topic}"
    pubs = seg.state.producers[producer].pub
    pub = pubs.get(f"{scope}|{row.topic}")
    facts = queues.facts(route)
    if pub is None or pub.route != facts.digest:
        # the route's own queues, its index drawn at this send
        pub = PublishInfo(facts.digest, {}, None, f"{row.event_time}|{row.event_id}")
        pubs[f"{scope}|{row.topic}"] = pub
    mqs = queues.message_queues(route, row.topic)  # TopicPublishInfo holds a copy of its own
    if pub.rewrites:
        mqs = list(mqs)
        for at, q in pub.rewrites.items():
            mqs[at] = MessageQueue(q.broker, q.queue_id, row.topic)
    sent = (row.broker_name, row.queue_id)  # the queue the failed attempt took
    failed = [i for i in facts.where.get(sent, ()) if i not in pub.rewrites]
    failed += [at for at, q in pub.rewrites.items() if (q.broker, q.queue_id) == sent]
    if len(failed) == 1:
        # the attempt that failed took the queue at the index's position: the producer's index
        # stands there, wherever it started (RocketMQ goes on round-robin from the failed queue)
        pub.index = failed[0]
    info = TopicPublishInfo(
        mqs, facts.write_queue_nums, pub.index, rng(config.seed, pkey, pub.seed, row.event_id)
    )
    if table is not None:
        assert tables is not None
        pos = tables.position_of(row.event_id)
        fault = table.snapshot(pos, rng(config.seed, scope, key, row.event_id))
    else:
        pos, fault = -1, FaultTable(profile, rng=rng(config.seed, scope, key, row.event_id))
    reset = profile.line == "5" and row.mode == SendMode.SYNC
    swaps = scope != CLUSTER and config.policies.report_queue_swaps
    before = list(info.queues) if swaps else []
    sel = select_queue(
        profile, info, fault, row.broker_name, int(row.event_time), enable, reset_index=reset
    )
    if table is not None:
        table.worst = fault.worst_index
        if sel.removed is not None:
            table.remove(sel.removed, pos, int(row.event_time), row.event_id)
    if (spot := sel.rewritten) is not None:  # RocketMQ 4.x rewrote a queue of the list in place
        mq = info.queues[spot]
        rewrites = {k: v for k, v in pub.rewrites.items() if k != spot}
        if [mq.broker_name, mq.queue_id] != facts.queues[spot]:
            rewrites[spot] = Queue(mq.broker_name, mq.queue_id)
        pub.rewrites = dict(sorted(rewrites.items()))
        if swaps:
            _report_swap(seg, key, row, profile.name, before, info)
    pub.index = info.index
    out.rows(
        TableName.ROUTING_DECISIONS,
        [
            {
                **base,
                "selected_broker": sel.queue.broker_name,
                "selected_queue_id": sel.queue.queue_id,
                "rule": sel.rule.value,
                "rewritten": sel.rewritten is not None,
                "removed_broker": sel.removed,
                "swallowed": sel.swallowed,
            }
        ],
    )


def _report_swap(
    seg: Segment,
    producer: str,
    row: Any,
    profile: str,
    before: list[MessageQueue],
    info: TopicPublishInfo,
) -> None:
    """A ``QUEUE_SWAP`` row: RocketMQ 4.x's pickOneAtLeast rewrote a queue of the producer's
    shared list in place (``before`` it, the queues ``info`` holds now), so a broker lost a
    queue to another until the route changes (apache/rocketmq #3548, #4154, #7779)."""
    after, write_queues = info.queues, info.write_queue_nums or {}
    for old, new in zip(before, after, strict=True):
        if old.broker_name == new.broker_name:
            continue  # the queue id changed, not the broker: every broker keeps its share
        kept = sum(1 for q in after if q.broker_name == old.broker_name)
        reason = (
            f"RocketMQ 4.x rewrote queue {old.broker_name}:{old.queue_id} of topic {row.topic} "
            f"in place to {new.broker_name}:{new.queue_id} (pickOneAtLeast): the producer's "
            f"list holds {kept} of {old.broker_name}'s {write_queues.get(old.broker_name, 0)} "
            "write queues until the route changes (apache/rocketmq #7779)"
        )
        seg.out.rows(
            TableName.BROKER_DECISIONS,
            [
                {
                    "scope": PRODUCER,
                    "scope_key": producer,
                    "cluster": seg.cluster,
                    "broker_name": old.broker_name,
                    "decision": Decision.QUEUE_SWAP,
                    "effective_at": int(row.event_time),
                    "available_from": int(row.event_time),
                    "reason": reason,
                    "cause_event_id": row.event_id,
                    "profile": profile,
                }
            ],
        )
