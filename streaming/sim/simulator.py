"""A deterministic RocketMQ cluster on a simulated clock.

Producers run the real :mod:`udfs.rocketmq` selection and retry loop under their own client
profile and latency fault switch against brokers whose behaviour follows the scenario's faults;
brokers heartbeat to a NameServer that drops them from the route after 120 s of silence; a
consumer group reports what it consumed. The same scenario and seed always give the same events,
in (event_time, event_id) order. No Spark here: ``faultline simulate`` runs without it.
"""

from __future__ import annotations

import bisect
import heapq
import json
import os
import random
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streaming.client import DecisionView, Reporter, pick, publish_order
from streaming.client import message as decision_message
from streaming.config import FaultSpec, ProducerSpec, Scenario, TransactionSpec
from udfs import engine
from udfs.parse import parse
from udfs.rocketmq import (
    PROFILES,
    EmptyRouteError,
    FaultTable,
    LocalTransactionState,
    MessageQueue,
    Next,
    Outcome,
    Pass,
    SendMode,
    TopicPublishInfo,
    after_half_send,
    attempt_effect,
    attempt_timeout,
    check_pass,
    max_attempts,
    next_wake,
    schedule_redirect,
    select_queue,
    transaction_config,
)
from udfs.rocketmq._send import SEND_MSG_TIMEOUT_MS
from udfs.schedule import DelayPolicy
from udfs.vocabulary import TableName

HEARTBEAT_TIMEOUT_MS = 120_000
SCAN_INTERVAL_MS = 10_000
DELAYS = DelayPolicy()
"""The default delay table and redelivery limit, which the simulated clients assume."""

Route = list[tuple[str, int, int]]
"""A topic's route: (broker_name, write_queue_nums, perm) of the brokers the NameServer has."""
TRIGGER_MS = 500
"""The closed loop's micro-batches: the job's default trigger interval, in event time."""


@dataclass(frozen=True)
class _Wait:
    """A ``faultline`` producer is about to pick a queue at ``at``: every event before that
    happens first, so the decisions it reads are those of the whole cluster."""

    at: int


@dataclass
class Record:
    """What the simulated producers did besides their events, for ``faultline evaluate``."""

    own: dict[tuple[str, str], list[tuple[int, int, int]]] = field(default_factory=dict)
    """(producer, broker) -> each update of the producer's own FaultTable, in order: (when the
    attempt started, the update's time, the time the broker is available from after it)."""
    dlq: int = 0
    """Messages that faultline sent to the DLQ after their last redelivery failed."""
    swaps: int = 0
    """Queues that RocketMQ 4.x's pickOneAtLeast rewrote in place to another broker in a
    producer's list (apache/rocketmq #7779)."""


@dataclass(frozen=True)
class _Half:
    """A half message a transactional producer stored, and what its producer will say of it."""

    spec: ProducerSpec
    tx: TransactionSpec
    message_id: str
    broker: str
    queue_id: int
    born: int
    stored: int
    end_at: int
    """When the producer sends its end: after its local transaction, or at once."""
    local: LocalTransactionState
    """The end: the local transaction's outcome, or ROLLBACK after a store that is not OK."""
    never: bool
    """An UNKNOW the producer answers UNKNOW for ever."""


class Loop:
    """faultline alongside the simulated cluster: the engine (cluster scope) runs on the events
    as they happen, in micro-batches of :data:`TRIGGER_MS` of event time, and each of its
    decisions reaches the ``faultline`` producers ``delay`` after its event time, as they would
    read it from the compacted decision topic (:class:`~streaming.client.DecisionView`)."""

    def __init__(
        self,
        cluster: str,
        delay: int,
        config: engine.EngineConfig | None = None,
    ):
        if delay <= 0:
            raise ValueError("the decision delay must be positive")
        self.cluster = cluster
        self.delay = delay
        self.trigger = min(TRIGGER_MS, delay)
        self.config = config or engine.EngineConfig(scopes=(engine.CLUSTER,))
        self.state: engine.State | None = None
        self.pending: list[dict[str, Any]] = []
        self.done = -(2**63)
        self.view = DecisionView()
        self.decisions: list[dict[str, Any]] = []
        """Every cluster-scope decision, in event-time order."""
        self.released: dict[tuple[str, int], str] = {}
        """With fault-aware release, the broker each redelivery goes onto, by (message id,
        redelivery count)."""

    def catch_up(self, at: int) -> None:
        """Run the engine on the batches that end by ``at - delay`` (rounded up to the batch
        grid, which is at most ``at``: every event before ``at`` has happened)."""
        need = at - self.delay
        if need <= self.done:
            return
        self.done = -(-need // self.trigger) * self.trigger
        cut = bisect.bisect_right(self.pending, self.done, key=lambda e: e["event_time"])
        batch, self.pending = self.pending[:cut], self.pending[cut:]
        if not batch:
            return
        values = [json.dumps(e) for e in batch]
        events = parse(values, ["closed-loop"] * len(batch), [e["event_time"] for e in batch])
        step = engine.advance(self.cluster, self.state, events.to_pandas(), self.config)
        self.state = step.state
        rows = step.tables.get(TableName.BROKER_DECISIONS)
        share = self.config.policies.probe_share
        for r in sorted(rows.to_pylist() if rows is not None else [], key=publish_order):
            if r["scope"] == engine.CLUSTER:
                self.view.apply(decision_message(r, share), r["effective_at"] + self.delay)
                self.decisions.append(r)
        released = step.tables.get(TableName.REDELIVERIES)
        for r in released.to_pylist() if released is not None else []:
            if r["broker_name"] is not None:
                self.released[(r["message_id"], r["attempt_count"])] = r["broker_name"]


def heartbeat_offset(index: int, brokers: int, interval: int) -> int:
    """When broker ``index`` of ``brokers`` first heartbeats, in ms after the start: one second
    after the one before it while the whole fleet fits in one heartbeat interval that way, else
    spread evenly over the interval, so that every broker heartbeats within the first interval.

    >>> [heartbeat_offset(i, 6, 30_000) for i in range(6)]
    [0, 1000, 2000, 3000, 4000, 5000]
    >>> [heartbeat_offset(i, 1000, 30_000) for i in (0, 1, 2, 999)]
    [0, 30, 60, 29970]
    """
    if 1000 * (brokers - 1) < interval:
        return 1000 * index
    return index * interval // brokers


@dataclass(frozen=True)
class _Response:
    outcome: Outcome
    latency: int
    response_code: int | None = None


class _Cluster:
    """Brokers' behaviour and the NameServer's view over simulated time."""

    def __init__(self, scenario: Scenario) -> None:
        self.s = scenario
        self.brokers = {b.name: b for b in scenario.brokers}
        self.faults: dict[str, list[FaultSpec]] = {}
        for fault in scenario.faults:
            self.faults.setdefault(fault.broker, []).append(fault)
        self.end = scenario.start + scenario.duration + scenario.tail
        self.heartbeats = self._heartbeats()
        self.route_changes = self._route_changes()
        self._timelines: dict[tuple[str, ...], tuple[list[int], list[Route]]] = {}

    def _active(self, broker: str, now: int, kinds: tuple[str, ...]) -> FaultSpec | None:
        rel = now - self.s.start
        for fault in self.faults.get(broker, []):
            if fault.type in kinds and fault.at <= rel < fault.at + fault.duration:
                if (
                    fault.type == "flapping"
                    and (rel - fault.at) % fault.period >= fault.period // 2
                ):
                    continue  # the up half of each period
                return fault
        return None

    def respond(self, broker: str, now: int, budget: int, rng: random.Random) -> _Response:
        spec = self.brokers[broker]
        fault = self._active(broker, now, ("outage", "flapping", "latency_spike", "slow"))
        if fault is not None and fault.type in ("outage", "flapping"):
            outcome = Outcome(fault.outcome)
            code = fault.response_code or (14 if outcome is Outcome.BROKER_EXCEPTION else None)
            return _Response(outcome, min(rng.randint(1, 5), budget), code)
        low, high = fault.latency_ms if fault is not None and fault.latency_ms else spec.latency_ms
        latency = rng.randint(low, high)
        if latency > budget:  # the request timed out on the client
            return _Response(Outcome.REMOTING_EXCEPTION, budget)
        return _Response(Outcome.SEND_OK, latency)

    def down(self, broker: str, now: int) -> bool:
        """Whether ``broker`` answers no client at ``now``: an outage, or flapping's down half.
        It still heartbeats and runs its own services (the transaction check)."""
        return self._active(broker, now, ("outage", "flapping")) is not None

    def _heartbeats(self) -> dict[str, list[int]]:
        beats: dict[str, list[int]] = {}
        for i, broker in enumerate(self.s.brokers):
            t = self.s.start + heartbeat_offset(i, len(self.s.brokers), self.s.heartbeat_interval)
            times = []
            while t < self.end:
                if self._active(broker.name, t, ("heartbeat_stop",)) is None:
                    times.append(t)
                t += self.s.heartbeat_interval
            beats[broker.name] = times
        return beats

    def _route_changes(self) -> list[tuple[int, str, bool]]:
        """(time, broker, alive) as the NameServer sees it: dropped at the first 10 s scan more
        than 120 s after its last heartbeat, back at its next heartbeat. Every broker is in the
        route at the start, as if it had just heartbeated: one whose heartbeats stop from the
        start, or never come inside the scenario, drops out 120 s (and a scan) later."""
        changes = []
        for broker, times in self.heartbeats.items():
            known = [self.s.start, *times]
            for last, nxt in zip(known, [*known[1:], None], strict=True):
                scan = ((last + HEARTBEAT_TIMEOUT_MS) // SCAN_INTERVAL_MS + 1) * SCAN_INTERVAL_MS
                if scan < self.end and (nxt is None or scan <= nxt):
                    changes.append((scan, broker, False))
                    if nxt is not None:
                        changes.append((nxt, broker, True))
        return sorted(changes)

    def timeline(self, topic_brokers: list[str]) -> tuple[list[int], list[Route]]:
        """The topic's route over time: from ``times[i]`` on (up to the next time) it is
        ``routes[i]``; ``times[0]`` is before any time. Made once per list of brokers; callers
        must not change the routes."""
        key = tuple(topic_brokers)
        known = self._timelines.get(key)
        if known is None:
            entry = {b: (b, self.brokers[b].write_queues, self.brokers[b].perm) for b in key}
            alive = dict.fromkeys(key, True)
            times, routes = [-(2**63)], [[entry[b] for b in key]]
            for t, broker, up in self.route_changes:  # sorted: the last change at a time wins
                if broker not in alive:
                    continue
                alive[broker] = up
                route = [entry[b] for b in key if alive[b]]
                if times[-1] == t:
                    routes[-1] = route
                else:
                    times.append(t)
                    routes.append(route)
            known = self._timelines[key] = (times, routes)
        return known

    def route_at(self, topic_brokers: list[str], now: int) -> Route:
        """The topic's route at ``now``: every change up to and including ``now`` applied."""
        times, routes = self.timeline(topic_brokers)
        return routes[bisect.bisect_right(times, now) - 1]


def simulate(
    scenario: Scenario,
    config: engine.EngineConfig | None = None,
    record: Record | None = None,
    loop: Loop | None = None,
) -> list[dict[str, Any]]:
    """Every event of the scenario, sorted by (event_time, event_id). When a producer follows
    faultline's decisions, the engine runs alongside (``config``, the cluster scope by default),
    in a :class:`Loop` (made here unless given); ``record`` collects what
    ``faultline evaluate`` needs besides the events."""
    cluster = _Cluster(scenario)
    events: list[dict[str, Any]] = []
    base = {"cluster": scenario.cluster}
    for broker, times in cluster.heartbeats.items():
        for n, t in enumerate(times):
            events.append(
                {
                    **base,
                    "kind": "heartbeat",
                    "event_id": f"hb-{broker}-{n:05d}",
                    "event_time": t,
                    "broker_name": broker,
                }
            )
    topics = {t.name: t.brokers for t in scenario.topics}
    change_times = sorted({scenario.start} | {t for t, _, _ in cluster.route_changes})
    for topic, brokers in topics.items():
        previous = None
        for n, t in enumerate(change_times):
            route = cluster.route_at(brokers, t)
            if route != previous:
                events.append(
                    {
                        **base,
                        "kind": "route",
                        "event_id": f"route-{topic}-{n:04d}",
                        "event_time": t,
                        "topic": topic,
                        "brokers": [
                            {"broker_name": b, "write_queue_nums": w, "perm": p}
                            for b, w, p in route
                        ],
                    }
                )
                previous = route
    stored: list[tuple[int, dict[str, Any]]] = []
    halves: list[_Half] = []
    publish_infos: dict[tuple[str, tuple[tuple[str, int, int], ...]], TopicPublishInfo] = {}
    producers = [p for spec in scenario.producers for p in spec.expand()]
    if loop is None and any(p.strategy == "faultline" for p in producers):
        loop = Loop(scenario.cluster, scenario.decision_delay, config)
    runs = [
        _reported(
            scenario,
            p,
            _produce(
                scenario, cluster, p, topics[p.topic], stored, halves, publish_infos, loop, record
            ),
        )
        for p in producers
    ]
    if loop is None:  # no producer reads decisions: each runs on its own
        for run in runs:
            events.extend(e for e in run if not isinstance(e, _Wait))
    else:
        events = _merged(events, runs, loop)
    events.extend(_transactions(scenario, cluster, halves, topics, stored))
    stored.sort(key=lambda m: (m[0], m[1]["message_id"]))
    for consumer in scenario.consumers:
        consumed = list(_consume(scenario, consumer, stored))
        if scenario.reporting == "summary":
            consumed = _summarized_consumes(scenario, consumer.group, consumed)
        events.extend(consumed)
    events.sort(key=lambda e: (e["event_time"], e["event_id"]))
    return events


def _merged(
    static: list[dict[str, Any]], runs: list[Iterator[dict[str, Any] | _Wait]], loop: Loop
) -> list[dict[str, Any]]:
    """The heartbeats, routes and producers' events in time order, each handed to the loop as
    it happens; a producer's :class:`_Wait` at ``t`` is served after every event before ``t``."""
    static.sort(key=lambda e: (e["event_time"], e["event_id"]))
    sources: list[Iterator[dict[str, Any] | _Wait]] = [iter(static), *runs]
    heap: list[tuple[int, int, int, int, dict[str, Any] | _Wait]] = []
    counter = 0

    def advance(i: int) -> None:
        nonlocal counter
        item = next(sources[i], None)
        if item is not None:
            at, kind = (item.at, 1) if isinstance(item, _Wait) else (item["event_time"], 0)
            heapq.heappush(heap, (at, kind, counter, i, item))
            counter += 1

    for i in range(len(sources)):
        advance(i)
    out: list[dict[str, Any]] = []
    while heap:
        at, _, _, i, item = heapq.heappop(heap)
        if isinstance(item, _Wait):
            loop.catch_up(at)
        else:
            out.append(item)
            if loop.pending and item["event_time"] < loop.pending[-1]["event_time"]:
                # a summary goes out after the sends that follow what it summarizes
                bisect.insort(loop.pending, item, key=lambda e: e["event_time"])
            else:
                loop.pending.append(item)
        advance(i)
    return out


def _reported(
    scenario: Scenario, spec: ProducerSpec, run: Iterator[dict[str, Any] | _Wait]
) -> Iterator[dict[str, Any] | _Wait]:
    """The producer's events as its reporting sends them: each send in full, or through a
    :class:`~streaming.client.Reporter` (its records come out when it sends them)."""
    if not _summarizing(scenario, spec):
        yield from run
        return
    sent: list[dict[str, Any]] = []
    reporter = Reporter(
        spec.id,
        _into(sent),
        cluster=scenario.cluster,
        producer_group=spec.group,
        client_profile=spec.profile,
        latency_fault_enable=spec.latency_fault_enable and spec.strategy != "off",
    )
    for item in run:
        if isinstance(item, _Wait):
            yield item
            continue
        reporter.send(item)
        yield from sent
        sent.clear()
    reporter.close()
    yield from sent


def _summarizing(scenario: Scenario, spec: ProducerSpec) -> bool:
    """Whether the producer reports in summaries (its own setting, else its scenario's)."""
    return (spec.reporting or scenario.reporting) == "summary"


def _into(records: list[dict[str, Any]]) -> Callable[[dict[str, Any]], bool]:
    """A reporter's sink that keeps what it is given (it never refuses)."""

    def take(record: dict[str, Any]) -> bool:
        records.append(record)
        return True

    return take


def _summarized_consumes(
    scenario: Scenario, group: str, consumed: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A consumer group's events as a :class:`~streaming.client.Reporter` sends them."""
    sent: list[dict[str, Any]] = []
    reporter = Reporter(f"consumer-{group}", _into(sent), cluster=scenario.cluster)
    for event in sorted(consumed, key=lambda e: (e["event_time"], e["event_id"])):
        reporter.consume(event)
    reporter.close()
    return sent


def _produce(
    scenario: Scenario,
    cluster: _Cluster,
    spec: ProducerSpec,
    brokers: list[str],
    stored: list[tuple[int, dict[str, Any]]],
    halves: list[_Half],
    publish_infos: dict[tuple[str, tuple[tuple[str, int, int], ...]], TopicPublishInfo],
    loop: Loop | None = None,
    record: Record | None = None,
) -> Iterator[dict[str, Any] | _Wait]:
    """The producer's sends. A message whose attempts all fail is sent again when faultline
    releases it (the producer reads ``redeliveries``), with ``redelivery_count`` one higher, until
    faultline sends it to the DLQ; resends go on after the traffic stops. A ``faultline``
    producer yields a :class:`_Wait` before each pick and then avoids what ``loop``'s view
    isolates at that instant. With fault-aware release in ``loop``'s configuration, a message is
    sent again only once faultline has released it, onto the broker the release names unless the
    producer's own FaultTable (its switch on) isolates that broker then.

    A transactional producer's message is a half message: one that fails is not sent again (the
    call throws), one the broker stored goes to ``halves`` with its end, after the local
    transaction (drawn from the producer's stream), and the producer's next send waits for it."""
    rng = random.Random(f"{scenario.seed}/{spec.id}")
    tx = spec.transactions
    unknowns = 0
    follow = loop is not None and spec.strategy == "faultline"
    relay = loop is not None and loop.config.policies.fault_aware_release
    switch = spec.latency_fault_enable and spec.strategy != "off"
    summarizing = _summarizing(scenario, spec)
    profile = PROFILES[spec.profile]
    mode = SendMode(spec.mode)
    total = max_attempts(mode)
    table = FaultTable(profile, rng=rng)
    route: Route | None = None
    info = TopicPublishInfo([])
    times, routes = cluster.timeline(brokers)
    traffic_end = scenario.start + scenario.duration
    now = scenario.start + rng.randint(0, spec.interval)
    resends: list[tuple[int, str, int]] = []  # (due, message_id, redelivery_count), a heap
    seq = 0
    number = 0
    base = {
        "cluster": scenario.cluster,
        "kind": "send_result",
        "producer_id": spec.id,
        "producer_group": spec.group,
        "client_profile": spec.profile,
        "latency_fault_enable": switch,
        "topic": spec.topic,
        "mode": spec.mode,
        "max_attempts": total,
        "body_size": spec.body_size,
    }
    while True:
        onto: str | None = None
        if resends and (resends[0][0] <= now or now >= traffic_end):
            due, message_id, redelivery = heapq.heappop(resends)
            now = max(now, due)
            extra: dict[str, Any] = {"redelivery_count": redelivery}
            fresh = False
            if now >= cluster.end:
                return
            if relay and loop is not None:
                # fault-aware release: the producer re-sends what faultline's redeliveries say,
                # onto the broker they name, once it has read them (the decision delay after
                # faultline's clock reached the message's time)
                yield _Wait(now)
                onto = loop.released.get((message_id, redelivery))
                if onto is None:
                    heapq.heappush(resends, (now + TRIGGER_MS, message_id, redelivery))
                    continue
        elif now < traffic_end:
            message_id, redelivery = f"{spec.id}-m{number:06d}", 0
            delayed = spec.delay_every and number % spec.delay_every == 0
            extra = {"delay_level": spec.delay_level} if delayed else {}
            if tx is not None:
                extra = {"transaction": "PREPARED", "transaction_id": message_id}
            number += 1
            fresh = True
        else:
            return
        current = routes[bisect.bisect_right(times, now) - 1]
        if current != route:  # the producer polls the NameServer and rebuilds its publish info
            route = current
            info = _publish_info(publish_infos, spec.topic, current, rng)
        last: str | None = None
        cost = 0
        for attempt in range(total):
            at = now + cost
            if follow:
                yield _Wait(at)
            before = (
                info.queues[:] if record is not None and switch and profile.line != "5" else None
            )
            try:
                selection = select_queue(
                    profile,
                    info,
                    table,
                    last,
                    at,
                    switch,
                    reset_index=profile.line == "5" and mode is SendMode.SYNC and attempt > 0,
                )
            except EmptyRouteError:
                break
            queue = selection.queue
            if before is not None and selection.rewritten is not None and record is not None:
                record.swaps += sum(
                    a.broker_name != b.broker_name for a, b in zip(before, info.queues, strict=True)
                )
            named = [q for q in info.queues if q.broker_name == onto] if attempt == 0 else []
            if named and (not switch or table.is_available(str(onto), at)):
                # fault-aware release's broker, unless the producer's own table isolates it
                queue = named[seq % len(named)]
            elif follow and loop is not None:
                ticket = zlib.crc32(f"{spec.id}/{seq}".encode())
                queue = _avoid(
                    loop, scenario.cluster, info.queues, queue, table, switch, at, last, ticket
                )
            budget = attempt_timeout(profile, SEND_MSG_TIMEOUT_MS, cost, attempt + 1 < total)
            event = {
                **base,
                **extra,
                "event_id": f"{spec.id}-{seq:06d}",
                "broker_name": queue.broker_name,
                "queue_id": queue.queue_id,
                "attempt": attempt,
                "message_id": message_id,
            }
            seq += 1
            if summarizing:  # the reporter carries the producer's queue index in summaries
                event["queue_index"] = info.index
            if budget is None:
                yield {**event, "event_time": at, "latency_ms": 0, "outcome": "CALL_TIMEOUT"}
                if tx is None:
                    _resend(resends, at, message_id, redelivery, record)
                break
            response = cluster.respond(queue.broker_name, at, budget, rng)
            done_at = at + response.latency
            event.update(
                event_time=done_at, latency_ms=response.latency, outcome=response.outcome.value
            )
            if response.response_code is not None:
                event["response_code"] = response.response_code
            yield event
            effect = attempt_effect(
                profile,
                response.outcome,
                response.latency,
                mode=mode,
                attempt=attempt,
                response_code=response.response_code,
                remaining_timeout_ms=budget - response.latency,
            )
            if switch:
                for report in effect.reports:
                    when = at if report.phase == "dispatch" else done_at
                    item = table.report(
                        queue.broker_name,
                        report.latency_ms,
                        report.isolation,
                        when,
                        report.reachable,
                    )
                    if record is not None and item is not None:
                        key = (spec.id, queue.broker_name)
                        record.own.setdefault(key, []).append((at, when, item.start_timestamp))
            cost += response.latency
            if effect.next is Next.FAIL and tx is None:
                _resend(resends, done_at, message_id, redelivery, record)
            if effect.next is not Next.RETRY:
                if tx is not None:
                    if effect.next is Next.RETURN and response.outcome.returned:
                        end = after_half_send(response.outcome)
                        local = 0
                        if end is None:
                            local = rng.randint(*tx.local_ms)
                            end = _local_outcome(tx, rng.random())
                        unknowns += end is LocalTransactionState.UNKNOW
                        never = (
                            end is LocalTransactionState.UNKNOW
                            and tx.never_every > 0
                            and unknowns % tx.never_every == 0
                        )
                        halves.append(
                            _Half(spec, tx, message_id, queue.broker_name, queue.queue_id, at,
                                  done_at, done_at + local, end, never)
                        )  # fmt: skip
                        cost += local
                elif response.outcome is Outcome.SEND_OK:
                    level = schedule_redirect(extra.get("delay_level"), DELAYS.levels).delay_level
                    visible = done_at + (DELAYS.levels.delay_ms(level) if level else 0)
                    stored.append(
                        (
                            visible,
                            {
                                "message_id": message_id,
                                "topic": spec.topic,
                                "broker_name": queue.broker_name,
                                "queue_id": queue.queue_id,
                            },
                        )
                    )
                break
            last = queue.broker_name
        if fresh:
            now = max(now + cost, now + spec.interval + rng.randint(0, spec.interval // 4))
        else:
            now += cost


def _local_outcome(tx: TransactionSpec, draw: float) -> LocalTransactionState:
    """The local transaction's outcome for a uniform ``draw`` in [0, 1)."""
    if draw < tx.commit:
        return LocalTransactionState.COMMIT_MESSAGE
    if draw < tx.commit + tx.rollback:
        return LocalTransactionState.ROLLBACK_MESSAGE
    return LocalTransactionState.UNKNOW


def _transactions(
    scenario: Scenario,
    cluster: _Cluster,
    halves: list[_Half],
    topics: dict[str, list[str]],
    stored: list[tuple[int, dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Each half message's end and the check-backs of its broker, under the rules of the
    producer's profile (:mod:`udfs.rocketmq`): a message the broker commits joins ``stored``
    then. Each producer draws its answer delays from a stream of its own."""
    rngs: dict[str, random.Random] = {}
    events: list[dict[str, Any]] = []
    for h in halves:
        rng = rngs.setdefault(h.spec.id, random.Random(f"{scenario.seed}/{h.spec.id}/checks"))
        events.extend(_settle(cluster, h, topics[h.spec.topic], stored, rng))
    return events


def _settle(
    cluster: _Cluster,
    h: _Half,
    brokers: list[str],
    stored: list[tuple[int, dict[str, Any]]],
    rng: random.Random,
) -> Iterator[dict[str, Any]]:
    """The half message's end and checks, before the scenario's end. The end goes one-way to
    its broker: lost while the broker is down or out of the topic's route. A wake decides by
    :func:`~udfs.rocketmq.check_pass` (a wake at the end's time comes first); a check counts
    even when the broker is down and its request never reaches the producer (no event). The
    producer answers each check it gets with its local transaction's state (an ``UNKNOW`` one:
    ``unknown_answers`` times UNKNOW, then COMMIT, or UNKNOW for ever); an answer that arrives
    while the broker is down is lost. A first-phase end after a check leaves the check's copy,
    which is checked again (a COMMIT answer then stores the message twice)."""
    spec, tx = h.spec, h.tx
    c = transaction_config(PROFILES[spec.profile])
    base = {
        "cluster": cluster.s.cluster,
        "producer_id": spec.id,
        "producer_group": spec.group,
        "client_profile": spec.profile,
        "topic": spec.topic,
        "message_id": h.message_id,
        "transaction_id": h.message_id,
        "broker_name": h.broker,
    }
    visible = {
        "message_id": h.message_id,
        "topic": spec.topic,
        "broker_name": h.broker,
        "queue_id": h.queue_id,
    }
    unknown = h.local is LocalTransactionState.UNKNOW
    answers = checks = 0
    copied = False
    end_at = h.end_at if h.end_at < cluster.end else None
    wake = next_wake(c, h.stored)
    while True:
        if end_at is not None and end_at < wake:
            yield {
                **base,
                "kind": "transaction_end",
                "event_id": f"{h.message_id}-end",
                "event_time": end_at,
                "local_state": h.local.value,
            }
            route = cluster.route_at(brokers, end_at)
            received = not cluster.down(h.broker, end_at) and any(
                b == h.broker for b, _, _ in route
            )
            if received and not unknown:
                if h.local is LocalTransactionState.COMMIT_MESSAGE:
                    stored.append((end_at, visible))
                if not (copied and c.copy_checked_after_end):
                    return
            end_at = None
            continue
        if wake >= cluster.end:
            return
        done = check_pass(c, wake, h.born, h.stored, checks)
        if done in (Pass.DISCARD, Pass.SKIP):
            return
        checks += done is not Pass.NOT_YET
        copied = copied or done is Pass.CHECK
        if done is Pass.CHECK and not cluster.down(h.broker, wake):
            at = wake + rng.randint(*tx.answer_ms)
            if at >= cluster.end:
                return
            answer = h.local
            if unknown:
                still = h.never or answers < tx.unknown_answers
                answer = (
                    LocalTransactionState.UNKNOW if still else LocalTransactionState.COMMIT_MESSAGE
                )
            answers += 1
            yield {
                **base,
                "kind": "transaction_check",
                "event_id": f"{h.message_id}-check-{checks:02d}",
                "event_time": at,
                "check_times": checks,
                "local_state": answer.value,
            }
            if answer is not LocalTransactionState.UNKNOW and not cluster.down(h.broker, at):
                if answer is LocalTransactionState.COMMIT_MESSAGE:
                    stored.append((at, visible))
                return
        wake += c.check_interval_ms


def _publish_info(
    made: dict[tuple[str, tuple[tuple[str, int, int], ...]], TopicPublishInfo],
    topic: str,
    route: Route,
    rng: random.Random,
) -> TopicPublishInfo:
    """``TopicPublishInfo.from_route(route, topic=topic, rng=rng)``, the queues made once per
    topic and route for all producers (the info copies the list and the dict; a queue is
    immutable)."""
    key = (topic, tuple(route))
    template = made.get(key)
    if template is None:
        template = made[key] = TopicPublishInfo.from_route(route, topic=topic)
    return TopicPublishInfo(template.queues, template.write_queue_nums, None, rng)


def _resend(
    resends: list[tuple[int, str, int]],
    failed_at: int,
    message_id: str,
    n: int,
    record: Record | None,
) -> None:
    """Faultline's redelivery of a failed message, as the producer will see it, or the DLQ."""
    level = DELAYS.redelivery_level(n)
    if level is not None:
        due = DELAYS.levels.deliver_at(level, failed_at)
        heapq.heappush(resends, (due, message_id, n + 1))
    elif record is not None:
        record.dlq += 1


def _avoid(
    loop: Loop,
    cluster: str,
    queues: list[MessageQueue],
    chosen: MessageQueue,
    table: FaultTable,
    switch: bool,
    at: int,
    last: str | None,
    ticket: int,
) -> MessageQueue:
    """A ``faultline`` producer's queue: its own strategy's, unless faultline isolates that
    broker at ``at``; then the next queue round robin whose broker neither faultline nor (with
    the switch on) its own table isolates, preferring another broker than the last attempt's."""
    if loop.view.is_available(cluster, chosen.broker_name, at, ticket):
        return chosen

    def usable(broker: str) -> bool:
        own = not switch or table.is_available(broker, at)
        return own and loop.view.is_available(cluster, broker, at, ticket)

    start = queues.index(chosen) if chosen in queues else 0
    return pick(queues, start, usable, last)


def _consume(
    scenario: Scenario, spec: Any, stored: list[tuple[int, dict[str, Any]]]
) -> Iterator[dict[str, Any]]:
    """The group's consumptions of the ``stored`` messages, which are in (time, id) order."""
    seq = 0
    for n, (stored_at, message) in enumerate(stored):
        if message["topic"] != spec.topic:
            continue
        failing = spec.fail_every and n % spec.fail_every == 0
        at = stored_at + spec.lag
        for times in range(spec.fail_times + 1 if failing else 1):
            ok = not failing or times == spec.fail_times
            yield {
                "cluster": scenario.cluster,
                "kind": "consume_result",
                "event_id": f"{spec.group}-{seq:07d}",
                "event_time": at,
                "consumer_group": spec.group,
                "topic": message["topic"],
                "message_id": message["message_id"],
                "origin_message_id": message["message_id"],
                "broker_name": message["broker_name"],
                "queue_id": message["queue_id"],
                "reconsume_times": times,
                "delay_level": 0,
                "max_reconsume_times": 16,
                "status": "CONSUME_SUCCESS" if ok else "RECONSUME_LATER",
            }
            seq += 1
            at += DELAYS.levels.delay_ms(DELAYS.levels.clamp(3 + times)) + spec.lag


def write_jsonl(
    events: list[dict[str, Any]], out: Path, per_file: int = 10_000, first_part: int = 0
) -> list[Path]:
    """Write events as ``part-NNNNN.jsonl`` files numbered from ``first_part`` (each written
    whole, then renamed into place).
    A file's time is its last event's: the files source takes it as the records' ingest time, as
    if each file had been written as its events happened, so nothing depends on when it ran."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for part, begin in enumerate(range(0, max(len(events), 1), per_file)):
        path = out / f"part-{first_part + part:05d}.jsonl"
        tmp = out / f".{path.name}.tmp"
        chunk = events[begin : begin + per_file]
        with tmp.open("w") as fh:
            for event in chunk:
                fh.write(json.dumps(event, separators=(",", ":")))
                fh.write("\n")
        if chunk:
            at = max(int(e["event_time"]) for e in chunk) * 1_000_000
            os.utime(tmp, ns=(at, at))
        os.replace(tmp, path)
        paths.append(path)
    return paths
