"""``faultline evaluate``: the same seeded incidents, once per way of picking queues.

Every producer of the scenario is run under each strategy in turn (same seed, same faults):

- ``off``: its own profile with the latency fault switch off (RocketMQ 4.x's default);
- ``own``: as the scenario configures it;
- ``own (rocketmq-4.9)``: RocketMQ 4.9.7 with the switch on;
- ``faultline``: as ``own``, also avoiding what the cluster scope's decisions isolate, read
  ``decision_delay`` after each decision's event time from the engine running on the events as
  they happen (:class:`streaming.simulator.Loop`). It is never worse off than ``own``: the gain
  comes from the producers that have not failed on a sick broker themselves yet;
- ``faultline + <policy>``: as ``faultline`` with the policies off but one
  (:data:`POLICIES`; ``udfs.engine._policies``), and ``faultline + all`` with all of them;
- ``own + release``: ``own``, re-sending each failed message where faultline's fault-aware
  release routes it (:data:`RELAY`).

``faultline`` runs the configuration as given: with the shipped one every policy is off, with
``conf/policies.yaml`` every one is on.

What counts: a *sick-broker send* is an attempt that starts while the scenario's faults make its
broker fail or answer slowly (an outage, the down half of a flap, a slow spell, a latency spike);
*healthy isolated* is the time, per producer and during the traffic, that a broker was kept
unavailable to it (by its own FaultTable, and for ``faultline`` by the decisions it read too) by
an isolation that a send to the broker *while it was healthy* caused: a wrong isolation, such as
RocketMQ's on a retry that inherited too little of the send's timeout. An isolation's tail after
a sick broker recovers is not counted: it is the price of any isolation.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import numpy as np
import pyarrow.compute as pc

from streaming.client import decision_state, held_until, publish_order
from streaming.config import ProducerSpec, Scenario
from streaming.simulator import Loop, Record, simulate
from udfs import engine
from udfs.parse import parse
from udfs.rocketmq import Outcome

Interval = tuple[int, int]

STRATEGIES: dict[str, Callable[[ProducerSpec], ProducerSpec]] = {
    "off": lambda p: p.model_copy(update={"strategy": "off"}),
    "own": lambda p: p.model_copy(update={"strategy": "own"}),
    "own (rocketmq-4.9)": lambda p: p.model_copy(
        update={"strategy": "own", "profile": "rocketmq-4.9", "latency_fault_enable": True}
    ),
    "faultline": lambda p: p.model_copy(update={"strategy": "faultline"}),
}
POLICIES = {
    "probing": {"probe_share": 0.05},
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
        rows.setdefault(d["broker_name"], []).append(d)
    spans = {}
    for b, mine in rows.items():
        nexts = [r["effective_at"] for r in mine[1:]] + [2**62]
        spans[b] = _union(
            (r["effective_at"], min(r["available_from"], n))
            for r, n in zip(mine, nexts, strict=True)
            if decision_state(r["decision"]) == "ISOLATED"
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
    if d["decision"] == "OUTLIER":
        for a, b in sick.get(d["broker_name"], []):
            if a < t and b > t - width:
                return max(a, t - width)
    return t - 1


def measure(
    scenario: Scenario, events: list[dict[str, Any]], record: Record, loop: Loop | None
) -> Figures:
    sick = sick_intervals(scenario)
    sends = [
        e for e in events if e["kind"] == "send_result" and e["outcome"] != Outcome.CALL_TIMEOUT
    ]
    sick_sends = sum(
        _inside(sick.get(e["broker_name"], []), e["event_time"] - e["latency_ms"]) for e in sends
    )
    failed = sum(not Outcome(e["outcome"]).returned for e in sends)
    retries = sum(e["attempt"] > 0 for e in sends)
    calls: dict[tuple[str, str, int], int] = {}
    for e in events:
        if e["kind"] == "send_result":
            key = (e["producer_id"], e["message_id"], e.get("redelivery_count", 0))
            calls[key] = calls.get(key, 0) + int(e["latency_ms"])
    times = np.array(list(calls.values()) or [0])
    traffic = (scenario.start, scenario.start + scenario.duration)
    sent_at = {e["event_id"]: e["event_time"] - e["latency_ms"] for e in sends}
    decided: dict[str, list[tuple[int, int, int]]] = {}
    read: dict[str, list[tuple[int, int, int]]] = {}
    width = loop.config.policies.outlier_window_ms if loop is not None else 0
    for d in loop.decisions if loop is not None else []:
        sent = _judged_at(d, sent_at, sick, width)
        if decision_state(d["decision"]) == "ISOLATED" and sent is not None:
            b, t = d["broker_name"], d["effective_at"]
            decided.setdefault(b, []).append((sent, t, d["available_from"]))
            seen = t + loop.delay  # type: ignore[union-attr]
            read.setdefault(b, []).append((sent, seen, held_until(d, seen)))

    def clipped(spans: list[Interval]) -> int:
        return _length(_union((max(a, traffic[0]), min(c, traffic[1])) for a, c in spans))

    producers = [p for spec in scenario.producers for p in spec.expand()]
    owns: dict[str, dict[str, list[tuple[int, int, int]]]] = {}
    for (pid, b), updates in record.own.items():
        owns.setdefault(pid, {})[b] = updates
    isolated = 0
    for p in producers:
        own = owns.get(p.id, {})
        for b in set(own) | (set(read) if p.strategy == "faultline" else set()):
            spans = _wrong(own.get(b, []), sick.get(b, []))
            if p.strategy == "faultline":
                spans = _union([*spans, *_wrong(read.get(b, []), sick.get(b, []))])
            isolated += clipped(spans)
    wrongly: float | None = None
    empty: float | None = None
    if loop is not None:
        wrongly = sum(clipped(_wrong(s, sick.get(b, []))) for b, s in decided.items()) / 1000
        held = _isolated_spans(loop.decisions)
        empty = (
            sum(clipped(_common([held.get(b, []) for b in t.brokers])) for t in scenario.topics)
            / 1000
        )
    return Figures(
        decided_healthy_isolated_s=wrongly,
        route_empty_s=empty,
        queue_swaps=record.swaps,
        sick_sends=sick_sends,
        sends=len(sends),
        failed=failed,
        retries=retries,
        dlq=record.dlq,
        p50_ms=float(np.percentile(times, 50, method="inverted_cdf")),
        p99_ms=float(np.percentile(times, 99, method="inverted_cdf")),
        healthy_isolated_s=isolated / 1000 / max(len(producers), 1),
    )


def evaluate(
    scenario: Scenario, delay_ms: int, config: engine.EngineConfig | None = None
) -> dict[str, Figures]:
    """Each strategy's figures on the scenario."""
    config = config or engine.EngineConfig(scopes=(engine.CLUSTER,))
    base = _policies(config, {k: None for setting in POLICIES.values() for k in setting})
    runs: list[tuple[str, str, engine.EngineConfig]] = [(n, n, config) for n in STRATEGIES]
    turned: dict[str, Any] = {}
    for name, setting in POLICIES.items():
        on = {k: getattr(config.policies, k) or v for k, v in setting.items()}
        turned |= on
        runs.append((f"faultline + {name}", "faultline", _policies(base, on)))
    runs.append(("faultline + all", "faultline", _policies(base, turned)))
    runs.append((RELAY, "own", _policies(base, {"fault_aware_release": True})))
    results = {}
    for name, strategy, chosen in runs:
        change = STRATEGIES[strategy]
        changed = scenario.model_copy(
            update={
                "producers": [change(p) for p in scenario.producers],
                "decision_delay": delay_ms,
            }
        )
        record = Record()
        follows = strategy == "faultline" or name == RELAY
        loop = Loop(changed.cluster, delay_ms, chosen) if follows else None
        events = simulate(changed, record=record, loop=loop)
        results[name] = measure(changed, events, record, loop)
        if name == "own":
            results[name].swaps_reported = _reported_swaps(changed.cluster, events, base)
    return results


def _reported_swaps(cluster: str, events: list[dict[str, Any]], config: engine.EngineConfig) -> int:
    """The ``QUEUE_SWAP`` rows of the producers' own scopes over ``events``, in one batch."""
    config = _policies(
        dataclasses.replace(config, scopes=(engine.PRODUCER,)), {"report_queue_swaps": True}
    )
    values = [json.dumps(e) for e in events]
    frame = parse(values, ["evaluate"] * len(values), [e["event_time"] for e in events])
    rows = engine.advance(cluster, None, frame.to_pandas(), config).tables.get("broker_decisions")
    return 0 if rows is None else int(pc.sum(pc.equal(rows["decision"], "QUEUE_SWAP")).as_py() or 0)


def _policies(config: engine.EngineConfig, on: dict[str, Any]) -> engine.EngineConfig:
    return dataclasses.replace(config, policies=dataclasses.replace(config.policies, **on))


def _change(ours: int, theirs: int) -> str:
    if theirs == 0:
        return "n/a (no sick-broker sends to compare with)"
    return f"{round(100 * (ours - theirs) / theirs):+d}%"


def report(scenario: Scenario, delay_ms: int, results: dict[str, Figures], out: TextIO) -> None:
    print(
        f"scenario {scenario.name}: {len([p for s in scenario.producers for p in s.expand()])} "
        f"producers, decisions read {delay_ms} ms after their event time",
        file=out,
    )
    header = (
        f"{'strategy':<22} {'sick-broker sends':>17} {'sends':>8} {'failed':>7} "
        f"{'retries':>7} {'DLQ':>5} {'p50 ms':>7} {'p99 ms':>7} {'healthy isolated s':>18} "
        f"{'route empty s':>13} {'queue swaps':>11}"
    )
    print(header, file=out)
    for name, f in results.items():
        print(
            f"{name:<22} {f.sick_sends:>17} {f.sends:>8} {f.failed:>7} {f.retries:>7} "
            f"{f.dlq:>5} {f.p50_ms:>7.0f} {f.p99_ms:>7.0f} {f.healthy_isolated_s:>18.1f} "
            f"{'-' if f.route_empty_s is None else f'{f.route_empty_s:.1f}':>13} "
            f"{f.queue_swaps:>11}",
            file=out,
        )
    own = results["own"]
    print(
        f"queue swaps of RocketMQ 4.x (apache/rocketmq #7779) under own: {own.queue_swaps} in "
        f"the producers, {own.swaps_reported} reported by faultline (report_queue_swaps)",
        file=out,
    )
    decided = results["faultline"].decided_healthy_isolated_s
    print(
        f"healthy brokers isolated by faultline's own decisions: {decided or 0:.1f} s",
        file=out,
    )
    ours = results["faultline"].sick_sends
    print(
        f"sick-broker sends, faultline vs off: {_change(ours, results['off'].sick_sends)}", file=out
    )
    theirs = results["own (rocketmq-4.9)"].sick_sends
    print(f"sick-broker sends, faultline vs own (rocketmq-4.9): {_change(ours, theirs)}", file=out)


def evaluate_command(args: Any, out: TextIO = sys.stdout) -> int:
    from streaming.config import duration_flag, load_job_config, load_scenario
    from streaming.job import engine_config

    scenario = load_scenario(args.scenario)
    delay = duration_flag("--delay", args.delay) if args.delay else scenario.decision_delay
    config = dataclasses.replace(engine_config(load_job_config(args.config)), scopes=("cluster",))
    report(scenario, delay, evaluate(scenario, delay, config), out)
    return 0
