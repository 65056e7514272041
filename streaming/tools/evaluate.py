"""``faultline evaluate``: the same seeded incidents, once per way of picking queues.

Every producer of the scenario is run under each strategy in turn (same seed, same faults):

- ``off``: its own profile with the latency fault switch off (RocketMQ 4.x's default);
- ``own``: as the scenario configures it;
- ``own (rocketmq-4.9)``: RocketMQ 4.9.7 with the switch on;
- ``faultline``: as ``own``, also avoiding what the cluster scope's decisions isolate, read
  ``decision_delay`` after each decision's event time from the engine running on the events as
  they happen (:class:`streaming.sim.simulator.Loop`). It is never worse off than ``own``: the gain
  comes from the producers that have not failed on a sick broker themselves yet;
- ``own (4.9) + faultline``: RocketMQ 4.9.7 with the switch on, also following faultline (the
  deployment a user of 4.9 would choose);
- ``faultline, no policies``: ``faultline`` with RocketMQ's rules alone, and ``faultline +
  <policy>`` with the policies off but one (:data:`POLICIES`; ``udfs.engine._policies``);
- ``own + release``: ``own``, re-sending each failed message where faultline's fault-aware
  release routes it (:data:`RELAY`).

``faultline`` runs the configuration as given: with the shipped one its policies are on, with
``policies: {enabled: false}`` it is RocketMQ's rules alone.

What counts: a *sick-broker send* is an attempt that starts while the scenario's faults make its
broker fail or answer slowly (an outage, the down half of a flap, a slow spell, a latency spike).
*Capacity lost* is the other cost: the broker-seconds, per producer and during the traffic, in
which a producer kept away from a broker that was healthy, whatever the cause (its own
FaultTable, and for a producer following faultline the decisions it read too; a broker on
probation counts for the share of the sends it does not take). An isolation that outlasts its
fault counts there (RocketMQ 4.x keeps a broker away for up to 10 minutes after one failure).
*Healthy isolated* is the part of it that a send to the broker *while it was healthy* caused: a
wrong isolation, such as RocketMQ's on a retry that inherited too little of the send's timeout.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import multiprocessing
import sys
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow.compute as pc

from streaming.client import ROUTE_DECISIONS, decision_state, held_until, publish_order
from streaming.config import (
    ProducerSpec,
    Scenario,
    duration_flag,
    engine_config,
    load_job_config,
    load_scenario,
)
from streaming.sim.simulator import Loop, Record, simulate
from udfs import engine
from udfs.errors import ConfigError
from udfs.parse import parse
from udfs.rocketmq import Outcome
from udfs.vocabulary import Decision, EventKind, ProducerState, TableName

Interval = tuple[int, int]

STRATEGIES: dict[str, Callable[[ProducerSpec], ProducerSpec]] = {
    "off": lambda p: p.model_copy(update={"strategy": "off"}),
    "own": lambda p: p.model_copy(update={"strategy": "own"}),
    "own (rocketmq-4.9)": lambda p: p.model_copy(
        update={"strategy": "own", "profile": "rocketmq-4.9", "latency_fault_enable": True}
    ),
    "faultline": lambda p: p.model_copy(update={"strategy": "faultline"}),
    "own (4.9) + faultline": lambda p: p.model_copy(
        update={"strategy": "faultline", "profile": "rocketmq-4.9", "latency_fault_enable": True}
    ),
}
FOLLOWING = ("faultline", "own (4.9) + faultline")
"""The strategies that follow faultline's decisions as configured."""
RULES_ONLY = "faultline, no policies"
COMPARED = (
    ("own (4.9) + faultline", "own (rocketmq-4.9)"),
    ("faultline", "off"),
    ("faultline", "own (rocketmq-4.9)"),
)
"""The comparisons that end the report, the goals last."""
POLICIES = {
    "probing": {"probe_share": 0.25},
    "outliers": {"outlier_factor": 3.0},
    "cap": {"isolation_cap": 0.5},
}
"""The policy each ``faultline + <policy>`` row turns on, with this setting unless the
configuration sets one (its other settings come from the configuration)."""
RELAY = "own + release"
"""Producers with their own strategy that re-send faultline's redeliveries where fault-aware
release sends them (``redeliveries.broker_name``), read ``decision_delay`` after they are due."""
SICK = ("outage", "flapping", "slow", "latency_spike")


@dataclasses.dataclass
class Figures:
    sick_sends: int
    sends: int
    failed: int
    retries: int
    dlq: int
    p50_ms: float
    p99_ms: float
    healthy_isolated_s: float
    capacity_lost_s: float
    """Broker-seconds per producer in which a producer kept away from a healthy broker."""
    decided_capacity_lost_s: float | None = None
    """With faultline alongside: the same, of faultline's decisions alone."""
    decided_healthy_isolated_s: float | None = None
    """With faultline alongside (not for ``off`` and ``own``): the time the cluster scope's
    decisions isolated a healthy broker."""
    queue_swaps: int = 0
    """Queues RocketMQ 4.x rewrote to another broker in the producers' lists (#7779)."""
    swaps_reported: int | None = None
    """``own`` only: the ``QUEUE_SWAP`` rows faultline writes over the run's events with
    ``report_queue_swaps``."""
    route_empty_s: float | None = None
    """With faultline alongside: the time the cluster scope's decisions isolated every broker of
    a topic at once (what the isolation cap prevents)."""


def sick_intervals(scenario: Scenario) -> dict[str, list[Interval]]:
    """Per broker, when the scenario's faults make it fail or answer slowly."""
    out: dict[str, list[Interval]] = {}
    for f in scenario.faults:
        if f.type not in SICK:
            continue
        begin, end = scenario.start + f.at, scenario.start + f.at + f.duration
        if f.type == "flapping":  # down in the first half of every period
            spans = [(t, min(t + f.period // 2, end)) for t in range(begin, end, f.period)]
        else:
            spans = [(begin, end)]
        out.setdefault(f.broker, []).extend(spans)
    return {b: _union(spans) for b, spans in out.items()}


def _union(spans: Iterable[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _length(spans: list[Interval]) -> int:
    return sum(b - a for a, b in spans)


def _inside(spans: list[Interval], t: int) -> bool:
    return any(a <= t < b for a, b in spans)


def _wrong(isolations: Iterable[tuple[int, int, int]], sick: list[Interval]) -> list[Interval]:
    """Of isolations ``(sent_at, from, until)``, those a send to a healthy broker caused."""
    return _union((t, until) for sent, t, until in isolations if not _inside(sick, sent))


def _isolated_spans(decisions: list[dict[str, Any]]) -> dict[str, list[Interval]]:
    """Per broker, when the decisions (in the order the topic carries them) hold it isolated:
    from an isolating row to its ``available_from`` or the broker's next row."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for d in sorted(decisions, key=publish_order):
        if d["decision"] not in ROUTE_DECISIONS:  # the route's own key: it holds no isolation
            rows.setdefault(d["broker_name"], []).append(d)
    spans = {}
    for b, mine in rows.items():
        nexts = [r["effective_at"] for r in mine[1:]] + [2**62]
        spans[b] = _union(
            (r["effective_at"], min(r["available_from"], n))
            for r, n in zip(mine, nexts, strict=True)
            if decision_state(r["decision"]) == ProducerState.ISOLATED
        )
    return spans


def _common(spans: list[list[Interval]]) -> list[Interval]:
    """The times inside one span of every list."""
    if not spans:
        return []
    out = spans[0]
    for other in spans[1:]:
        out = [(max(a, c), min(b, d)) for a, b in out for c, d in other if max(a, c) < min(b, d)]
    return out


def _judged_at(
    d: dict[str, Any], sent_at: dict[str, int], sick: dict[str, list[Interval]], width: int
) -> int | None:
    """The instant an isolating decision judged its broker by: its cause's send; for a latency
    outlier, the window that ended when it was found (a sick moment in it, else its end), as
    an isolation that a slow send caused is judged by that send."""
    cause, t = d["cause_event_id"], int(d["effective_at"])
    if cause:
        return sent_at.get(cause)
    if d["decision"] == Decision.OUTLIER:
        for a, b in sick.get(d["broker_name"], []):
            if a < t and b > t - width:
                return max(a, t - width)
    return t - 1


def _own_spans(updates: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """When a producer's own FaultTable kept a broker away, from each of its updates ``(sent,
    at, available_from)``: from the update to the time it gives or the next update, whichever
    comes first, with the send that caused it."""
    ordered = sorted(updates, key=lambda u: u[1])
    ends = [u[1] for u in ordered[1:]] + [2**62]
    return [
        (sent, at, min(until, end))
        for (sent, at, until), end in zip(ordered, ends, strict=True)
        if min(until, end) > at
    ]


def _read_spans(
    decisions: list[dict[str, Any]],
    delay: int,
    share: float | None,
    judge: Callable[[dict[str, Any]], int | None],
) -> dict[str, list[tuple[int | None, int, int, float]]]:
    """Per broker, how a producer that reads the decisions ``delay`` after their event time
    holds it (as :class:`streaming.client.DecisionView` does): from reading a decision to its
    end or to the broker's next decision, the share of the sends kept away (all while
    isolated, ``1 - share`` on probation) and, for an isolation, the send it is judged by."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for d in sorted(decisions, key=publish_order):
        if d["decision"] not in ROUTE_DECISIONS:  # the route's own key: it holds no isolation
            rows.setdefault(d["broker_name"], []).append(d)
    out: dict[str, list[tuple[int | None, int, int, float]]] = {}
    for b, mine in rows.items():
        seen = [int(d["effective_at"]) + delay for d in mine]
        for d, at, following in zip(mine, seen, [*seen[1:], 2**62], strict=True):
            state = decision_state(d["decision"])
            until = min(held_until(d, at), following)
            if state in (ProducerState.ISOLATED, ProducerState.PROBING) and until > at:
                isolated = state == ProducerState.ISOLATED
                weight = 1.0 if isolated else 1.0 - (share or 0.0)
                out.setdefault(b, []).append((judge(d) if isolated else None, at, until, weight))
    return out


def _fallback(
    read: dict[str, list[tuple[int | None, int, int, float]]], scenario: Scenario
) -> dict[str, list[Interval]]:
    """Per broker, when every broker of a topic it serves was isolated in the decisions read:
    then a following producer sends where its own strategy would (:func:`streaming.client.pick`),
    and the decisions keep it from nothing."""
    out: dict[str, list[Interval]] = {}
    for topic in scenario.topics:
        spans = [[(a, c) for _, a, c, w in read.get(b, []) if w == 1.0] for b in topic.brokers]
        common = _common([_union(s) for s in spans])
        for b in topic.brokers:
            out[b] = _union([*out.get(b, []), *common])
    return out


def _without(
    spans: list[tuple[int | None, int, int, float]], gaps: list[Interval]
) -> list[tuple[int | None, int, int, float]]:
    """``spans`` with the times in ``gaps`` (merged and in order) cut out."""
    out = []
    for sent, a, c, w in spans:
        at = a
        for x, y in gaps:
            if y > at and x < c:
                if x > at:
                    out.append((sent, at, x, w))
                at = max(at, y)
        if at < c:
            out.append((sent, at, c, w))
    return out


def _lost(spans: Iterable[tuple[int, int, float]], sick: list[Interval], window: Interval) -> float:
    """The ms of ``window`` outside ``sick`` that ``spans`` ``(from, until, share)`` cover, each
    instant by the largest share that covers it."""
    spans = [(a, b, w) for a, b, w in spans if b > window[0] and a < window[1]]
    if not spans:
        return 0.0
    bounds = {*window, *(x for a, b, _ in spans for x in (a, b)), *(x for s in sick for x in s)}
    total = 0.0
    for a, b in itertools.pairwise(sorted(x for x in bounds if window[0] <= x <= window[1])):
        if not _inside(sick, a):
            total += (b - a) * max((w for x, y, w in spans if x <= a < y), default=0.0)
    return total


def measure(
    scenario: Scenario, events: list[dict[str, Any]], record: Record, loop: Loop | None
) -> Figures:
    sick = sick_intervals(scenario)
    sends = [
        e
        for e in events
        if e["kind"] == EventKind.SEND_RESULT and e["outcome"] != Outcome.CALL_TIMEOUT
    ]
    sick_sends = sum(
        _inside(sick.get(e["broker_name"], []), e["event_time"] - e["latency_ms"]) for e in sends
    )
    failed = sum(not Outcome(e["outcome"]).returned for e in sends)
    retries = sum(e["attempt"] > 0 for e in sends)
    calls: dict[tuple[str, str, int], int] = {}
    for e in events:
        if e["kind"] == EventKind.SEND_RESULT:
            key = (e["producer_id"], e["message_id"], e.get("redelivery_count", 0))
            calls[key] = calls.get(key, 0) + int(e["latency_ms"])
    times = np.array(list(calls.values()) or [0])
    traffic = (scenario.start, scenario.start + scenario.duration)
    sent_at = {e["event_id"]: e["event_time"] - e["latency_ms"] for e in sends}
    decided: dict[str, list[tuple[int, int, int]]] = {}
    read: dict[str, list[tuple[int | None, int, int, float]]] = {}
    if loop is not None:
        width = loop.config.policies.outlier_window_ms
        for d in loop.decisions:
            sent = _judged_at(d, sent_at, sick, width)
            if decision_state(d["decision"]) == ProducerState.ISOLATED and sent is not None:
                decided.setdefault(d["broker_name"], []).append(
                    (sent, d["effective_at"], d["available_from"])
                )
        read = _read_spans(
            loop.decisions,
            loop.delay,
            loop.config.policies.probe_share,
            lambda d: _judged_at(d, sent_at, sick, width),
        )
        fallback = _fallback(read, scenario)
        read = {b: _without(spans, fallback.get(b, [])) for b, spans in read.items()}

    def clipped(spans: list[Interval]) -> int:
        return _length(_union((max(a, traffic[0]), min(c, traffic[1])) for a, c in spans))

    producers = [p for spec in scenario.producers for p in spec.expand()]
    count = max(len(producers), 1)
    serves = {t.name: set(t.brokers) for t in scenario.topics}
    owns: dict[str, dict[str, list[tuple[int, int, int]]]] = {}
    for (pid, b), updates in record.own.items():
        owns.setdefault(pid, {})[b] = _own_spans(updates)
    isolated = lost = 0.0
    for p in producers:
        own = owns.get(p.id, {})
        # a decision keeps a producer away only from the brokers of its own topic
        follows = serves[p.topic] & set(read) if p.strategy == "faultline" else set()
        for b in set(own) | follows:
            mine = own.get(b, [])
            theirs = read.get(b, []) if b in follows else []
            wrong = [*mine, *((sent, a, c) for sent, a, c, _ in theirs if sent is not None)]
            isolated += clipped(_wrong(wrong, sick.get(b, [])))
            kept = [*((a, c, 1.0) for _, a, c in mine), *((a, c, w) for _, a, c, w in theirs)]
            lost += _lost(kept, sick.get(b, []), traffic)
    wrongly: float | None = None
    empty: float | None = None
    decided_lost: float | None = None
    if loop is not None:
        wrongly = sum(clipped(_wrong(s, sick.get(b, []))) for b, s in decided.items()) / 1000
        held = _isolated_spans(loop.decisions)
        empty = (
            sum(clipped(_common([held.get(b, []) for b in t.brokers])) for t in scenario.topics)
            / 1000
        )
        # as if every producer followed them: a broker counts for the producers of its topics
        users = {b: sum(b in serves[p.topic] for p in producers) for b in read}
        decided_lost = (
            sum(
                _lost(((a, c, w) for _, a, c, w in spans), sick.get(b, []), traffic) * users[b]
                for b, spans in read.items()
            )
            / 1000
            / count
        )
    return Figures(
        decided_healthy_isolated_s=wrongly,
        decided_capacity_lost_s=decided_lost,
        route_empty_s=empty,
        queue_swaps=record.swaps,
        sick_sends=sick_sends,
        sends=len(sends),
        failed=failed,
        retries=retries,
        dlq=record.dlq,
        p50_ms=float(np.percentile(times, 50, method="inverted_cdf")),
        p99_ms=float(np.percentile(times, 99, method="inverted_cdf")),
        healthy_isolated_s=isolated / 1000 / count,
        capacity_lost_s=lost / 1000 / count,
    )


Run = tuple[str, str, engine.EngineConfig]
"""A row of the report: its name, the strategy of :data:`STRATEGIES` its producers take, and
faultline's configuration."""


def _runs(config: engine.EngineConfig) -> list[Run]:
    base = _policies(config, {k: None for setting in POLICIES.values() for k in setting})
    runs: list[Run] = [(n, n, config) for n in STRATEGIES]
    runs.append((RULES_ONLY, "faultline", base))
    for name, setting in POLICIES.items():
        on = {k: getattr(config.policies, k) or v for k, v in setting.items()}
        runs.append((f"faultline + {name}", "faultline", _policies(base, on)))
    runs.append((RELAY, "own", _policies(base, {"fault_aware_release": True})))
    return runs


def _reads(run: Run) -> bool:
    """Whether the row's producers read faultline's decisions (else the delay changes nothing)."""
    return run[1] in FOLLOWING or run[0] == RELAY


def _run(scenario: Scenario, run: Run, delay_ms: int) -> Figures:
    name, strategy, config = run
    change = STRATEGIES[strategy]
    changed = scenario.model_copy(
        update={"producers": [change(p) for p in scenario.producers], "decision_delay": delay_ms}
    )
    record = Record()
    loop = Loop(changed.cluster, delay_ms, config) if _reads(run) else None
    events = simulate(changed, record=record, loop=loop)
    figures = measure(changed, events, record, loop)
    if name == "own":
        figures.swaps_reported = _reported_swaps(changed.cluster, events, config)
    return figures


_WORK: dict[str, Any] = {}
"""A worker's scenario and tasks (:func:`sweep`)."""


def _given(scenario: Scenario, tasks: list[tuple[Run, int]]) -> None:
    _WORK.update(scenario=scenario, tasks=tasks)


def _task(index: int) -> Figures:
    return _run(_WORK["scenario"], *_WORK["tasks"][index])


def sweep(
    scenario: Scenario,
    delays: list[int],
    config: engine.EngineConfig | None = None,
    jobs: int = 1,
    rows: Collection[str] | None = None,
) -> dict[int, dict[str, Figures]]:
    """Each row's figures on the scenario at each decision delay, the rows that read no
    decision once; ``jobs`` runs go side by side, each in a process of its own. ``rows`` names
    the rows to run (default: every one, as :func:`report` needs them)."""
    runs = _runs(config or engine.EngineConfig(scopes=(engine.CLUSTER,)))
    if rows is not None:
        unknown = set(rows) - {r[0] for r in runs}
        if unknown:
            raise ValueError(f"no such rows: {sorted(unknown)}")
        runs = [r for r in runs if r[0] in rows]
    tasks = [(r, d) for d in delays for r in runs if d == delays[0] or _reads(r)]
    if jobs > 1 and len(tasks) > 1:
        # forked workers: they take the scenario and the configurations over without pickling
        fork = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(
            min(jobs, len(tasks)), fork, initializer=_given, initargs=(scenario, tasks)
        ) as pool:
            done = list(pool.map(_task, range(len(tasks))))
    else:
        done = [_run(scenario, r, d) for r, d in tasks]
    figures = {(r[0], d): f for (r, d), f in zip(tasks, done, strict=True)}
    return {
        d: {r[0]: figures.get((r[0], d)) or figures[(r[0], delays[0])] for r in runs}
        for d in delays
    }


def evaluate(
    scenario: Scenario,
    delay_ms: int,
    config: engine.EngineConfig | None = None,
    jobs: int = 1,
    rows: Collection[str] | None = None,
) -> dict[str, Figures]:
    """Each row's figures on the scenario (:func:`sweep` at one delay)."""
    return sweep(scenario, [delay_ms], config, jobs, rows)[delay_ms]


def _reported_swaps(cluster: str, events: list[dict[str, Any]], config: engine.EngineConfig) -> int:
    """The ``QUEUE_SWAP`` rows of the producers' own scopes over ``events``, in one batch."""
    config = _policies(
        dataclasses.replace(config, scopes=(engine.PRODUCER,)), {"report_queue_swaps": True}
    )
    values = [json.dumps(e) for e in events]
    frame = parse(values, ["evaluate"] * len(values), [e["event_time"] for e in events])
    tables = engine.advance(cluster, None, frame.to_pandas(), config).tables
    rows = tables.get(TableName.BROKER_DECISIONS)
    if rows is None:
        return 0
    return int(pc.sum(pc.equal(rows["decision"], Decision.QUEUE_SWAP)).as_py() or 0)


def _policies(config: engine.EngineConfig, on: dict[str, Any]) -> engine.EngineConfig:
    return dataclasses.replace(config, policies=dataclasses.replace(config.policies, **on))


def _change(ours: int, theirs: int) -> str:
    if theirs == 0:
        return "n/a (no sick-broker sends to compare with)"
    return f"{round(100 * (ours - theirs) / theirs):+d}%"


def _delay(ms: int) -> str:
    return f"{ms // 1000} s" if ms >= 1000 and ms % 1000 == 0 else f"{ms} ms"


def report(scenario: Scenario, delay_ms: int, results: dict[str, Figures], out: TextIO) -> None:
    print(
        f"scenario {scenario.name}: {len([p for s in scenario.producers for p in s.expand()])} "
        f"producers, decisions read {delay_ms} ms after their event time",
        file=out,
    )
    header = (
        f"{'strategy':<24} {'sick-broker sends':>17} {'sends':>8} {'failed':>7} "
        f"{'retries':>7} {'DLQ':>5} {'p50 ms':>7} {'p99 ms':>7} {'capacity lost s':>15} "
        f"{'healthy isolated s':>18} {'route empty s':>13} {'queue swaps':>11}"
    )
    print(header, file=out)
    for name, f in results.items():
        print(
            f"{name:<24} {f.sick_sends:>17} {f.sends:>8} {f.failed:>7} {f.retries:>7} "
            f"{f.dlq:>5} {f.p50_ms:>7.0f} {f.p99_ms:>7.0f} {f.capacity_lost_s:>15.1f} "
            f"{f.healthy_isolated_s:>18.1f} "
            f"{'-' if f.route_empty_s is None else f'{f.route_empty_s:.1f}':>13} "
            f"{f.queue_swaps:>11}",
            file=out,
        )
    _print_swaps(results["own"], out)
    ours, theirs = results["faultline"], results["own (rocketmq-4.9)"]
    print(
        "healthy brokers isolated by faultline's own decisions: "
        f"{ours.decided_healthy_isolated_s or 0:.1f} s",
        file=out,
    )
    print(
        "healthy capacity lost (broker-seconds per producer), faultline's decisions: "
        f"{ours.decided_capacity_lost_s or 0:.1f}, own (rocketmq-4.9): "
        f"{theirs.capacity_lost_s:.1f}",
        file=out,
    )
    for mine, other in COMPARED:
        change = _change(results[mine].sick_sends, results[other].sick_sends)
        print(f"sick-broker sends, {mine} vs {other}: {change}", file=out)


def _print_swaps(own: Figures, out: TextIO) -> None:
    print(
        f"queue swaps of RocketMQ 4.x (apache/rocketmq #7779) under own: {own.queue_swaps} in "
        f"the producers, {own.swaps_reported} reported by faultline (report_queue_swaps)",
        file=out,
    )


def report_sweep(scenario: Scenario, results: dict[int, dict[str, Figures]], out: TextIO) -> None:
    """The strategies against the decision delay: sick-broker sends and capacity lost."""
    delays = sorted(results)
    print(
        f"scenario {scenario.name}: {len([p for s in scenario.producers for p in s.expand()])} "
        "producers; sick-broker sends / healthy capacity lost (broker-seconds per producer), "
        "by the delay from a decision to producers reading it",
        file=out,
    )
    print(f"{'strategy':<24}" + "".join(f"{_delay(d):>16}" for d in delays), file=out)
    for name in results[delays[0]]:
        cells = "".join(
            f"{f'{f.sick_sends} / {f.capacity_lost_s:.1f}':>16}"
            for f in (results[d][name] for d in delays)
        )
        print(f"{name:<24}{cells}", file=out)
    _print_swaps(results[delays[0]]["own"], out)
    wrong = ", ".join(
        f"{results[d]['faultline'].decided_healthy_isolated_s or 0:.1f} s at {_delay(d)}"
        for d in delays
    )
    print(f"healthy brokers isolated by faultline's own decisions: {wrong}", file=out)
    decided = ", ".join(
        f"{results[d]['faultline'].decided_capacity_lost_s or 0:.1f} at {_delay(d)}" for d in delays
    )
    print(
        f"healthy capacity lost (broker-seconds per producer), faultline's decisions: {decided}; "
        f"own (rocketmq-4.9): {results[delays[0]]['own (rocketmq-4.9)'].capacity_lost_s:.1f}",
        file=out,
    )
    for mine, other in COMPARED:
        changes = ", ".join(
            f"{_change(results[d][mine].sick_sends, results[d][other].sick_sends)} at {_delay(d)}"
            for d in delays
        )
        print(f"sick-broker sends, {mine} vs {other}: {changes}", file=out)


_PLOTTED: tuple[Callable[[Figures], float], ...] = (
    lambda f: f.sick_sends,
    lambda f: f.capacity_lost_s,
)


def plot(path: Path, scenario: Scenario, results: dict[int, dict[str, Figures]]) -> None:
    """Sick-broker sends and healthy capacity lost against the decision delay, per strategy,
    as a PNG: solid lines for the strategies that read faultline's decisions, dashed for those
    that do not (the same at every delay)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    delays = sorted(results)
    seconds = [d / 1000 for d in delays]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8), layout="constrained")
    reads = {run[0] for run in _runs(engine.EngineConfig()) if _reads(run)}
    for name in results[delays[0]]:
        style = "-o" if name in reads else "--"
        for ax, value in zip(axes, _PLOTTED, strict=True):
            ax.plot(seconds, [value(results[d][name]) for d in delays], style, label=name)
    axes[0].set(title="sends to sick brokers", xlabel="decision delay (s)", ylabel="sends")
    axes[1].set(
        title="healthy capacity lost",
        xlabel="decision delay (s)",
        ylabel="broker-seconds per producer",
    )
    axes[1].legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1))
    figure.suptitle(f"faultline evaluate: scenario {scenario.name}")
    figure.savefig(path, dpi=100)
    plt.close(figure)


def evaluate_command(args: Any, out: TextIO = sys.stdout) -> int:

    scenario = load_scenario(args.scenario)
    delays = sorted(
        {duration_flag("--delay", d) for d in args.delay.split(",")}
        if args.delay
        else {scenario.decision_delay}
    )
    if delays[0] <= 0:
        raise ConfigError(f"--delay {args.delay!r}: a decision delay is more than 0 ms")
    config = dataclasses.replace(engine_config(load_job_config(args.config)), scopes=("cluster",))
    results = sweep(scenario, delays, config, args.jobs)
    if args.plot:
        plot(Path(args.plot), scenario, results)
        print(f"plot: {args.plot}", file=out)
    if len(delays) == 1:
        report(scenario, delays[0], results[delays[0]], out)
    else:
        report_sweep(scenario, results, out)
    return 0
