"""``faultline evaluate``: the same seeded incidents, once per way of picking queues.

Every producer of the scenario is run under each strategy in turn (same seed, same faults):

- ``off``: its own profile with the latency fault switch off (RocketMQ 4.x's default);
- ``own``: as the scenario configures it;
- ``own (rocketmq-4.9)``: RocketMQ 4.9.7 with the switch on;
- ``faultline``: as ``own``, also avoiding what the cluster scope's decisions isolate, read
  ``decision_delay`` after each decision's event time from the engine running on the events as
  they happen (:class:`streaming.simulator.Loop`). It is never worse off than ``own``: the gain
  comes from the producers that have not failed on a sick broker themselves yet.

What counts: a *sick-broker send* is an attempt that starts while the scenario's faults make its
broker fail or answer slowly (an outage, the down half of a flap, a slow spell, a latency spike);
*healthy isolated* is the time, per producer, that a broker was unavailable to it (its own
FaultTable, and for ``faultline`` the decisions it read too) while the broker was not sick,
during the traffic.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import numpy as np

from streaming.client import decision_state
from streaming.config import ProducerSpec, Scenario
from streaming.simulator import Loop, Record, simulate
from udfs import engine
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
    """``faultline`` only: the time the cluster scope's decisions isolated a healthy broker."""


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


def _minus(spans: list[Interval], holes: list[Interval]) -> int:
    """The length of ``spans`` outside ``holes`` (both unions)."""
    overlap = 0
    for a, b in spans:
        for c, d in holes:
            overlap += max(0, min(b, d) - max(a, c))
    return _length(spans) - overlap


def _unavailable(updates: list[tuple[int, int]]) -> list[Interval]:
    """The spans a table's successive updates ``(time, available_from)`` of one broker made it
    unavailable: each holds until the next update replaces it."""
    updates = sorted(updates)
    spans = []
    for i, (t, until) in enumerate(updates):
        end = updates[i + 1][0] if i + 1 < len(updates) else until
        spans.append((t, min(until, end)))
    return _union(spans)


def _decided(loop: Loop) -> dict[str, list[tuple[int, int]]]:
    """The cluster scope's own isolations per broker, as updates ``(time, available_from)``."""
    out: dict[str, list[tuple[int, int]]] = {}
    for d in loop.decisions:
        if not d["decision"].startswith("ROUTE"):
            t = int(d["effective_at"])
            until = int(d["available_from"]) if decision_state(d["decision"]) == "ISOLATED" else t
            out.setdefault(str(d["broker_name"]), []).append((t, until))
    return out


def measure(
    scenario: Scenario, events: list[dict[str, Any]], record: Record, loop: Loop | None
) -> Figures:
    sick = sick_intervals(scenario)
    sends = [
        e for e in events if e["kind"] == "send_result" and e["outcome"] != Outcome.CALL_TIMEOUT
    ]
    sick_sends = 0
    for e in sends:
        start = e["event_time"] - e["latency_ms"]
        sick_sends += any(a <= start < b for a, b in sick.get(e["broker_name"], ()))
    failed = sum(not Outcome(e["outcome"]).returned for e in sends)
    retries = sum(e["attempt"] > 0 for e in sends)
    calls: dict[tuple[str, str, int], int] = {}
    for e in events:
        if e["kind"] == "send_result":
            key = (e["producer_id"], e["message_id"], e.get("redelivery_count", 0))
            calls[key] = calls.get(key, 0) + int(e["latency_ms"])
    times = np.array(list(calls.values()) or [0])
    traffic = (scenario.start, scenario.start + scenario.duration)
    view = loop.view.isolations(scenario.cluster) if loop is not None else {}
    producers = [p for spec in scenario.producers for p in spec.expand()]
    isolated = 0
    for p in producers:
        brokers = {b for (pid, b) in record.own if pid == p.id}
        if p.strategy == "faultline":
            brokers |= set(view)
        for b in brokers:
            spans = _unavailable(record.own.get((p.id, b), []))
            if p.strategy == "faultline":
                spans = _union([*spans, *_unavailable(view.get(b, []))])
            clipped = _union((max(a, traffic[0]), min(c, traffic[1])) for a, c in spans)
            isolated += _minus(clipped, sick.get(b, []))
    decided = None
    if loop is not None:
        decided = sum(
            _minus(_union((max(a, traffic[0]), min(c, traffic[1])) for a, c in
                          _unavailable(updates)), sick.get(b, []))
            for b, updates in _decided(loop).items()
        ) / 1000  # fmt: skip
    return Figures(
        decided_healthy_isolated_s=decided,
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
    results = {}
    for name, change in STRATEGIES.items():
        changed = scenario.model_copy(
            update={
                "producers": [change(p) for p in scenario.producers],
                "decision_delay": delay_ms,
            }
        )
        record = Record()
        loop = Loop(changed.cluster, delay_ms, config) if name == "faultline" else None
        events = simulate(changed, record=record, loop=loop)
        results[name] = measure(changed, events, record, loop)
    return results


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
        f"{'strategy':<20} {'sick-broker sends':>17} {'sends':>8} {'failed':>7} "
        f"{'retries':>7} {'DLQ':>5} {'p50 ms':>7} {'p99 ms':>7} {'healthy isolated s':>18}"
    )
    print(header, file=out)
    for name, f in results.items():
        print(
            f"{name:<20} {f.sick_sends:>17} {f.sends:>8} {f.failed:>7} {f.retries:>7} "
            f"{f.dlq:>5} {f.p50_ms:>7.0f} {f.p99_ms:>7.0f} {f.healthy_isolated_s:>18.1f}",
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
