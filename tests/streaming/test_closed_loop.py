"""Producers that follow faultline's decisions, in the simulator, and ``faultline evaluate``."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from streaming.client import DecisionView
from streaming.config import engine_config, load_job_config, load_scenario
from streaming.sim.simulator import Loop, Record, simulate
from streaming.tools.evaluate import (
    POLICIES,
    RELAY,
    RULES_ONLY,
    STRATEGIES,
    evaluate,
    measure,
    report,
    sick_intervals,
)
from tests.streaming.conftest import faultline
from udfs import engine
from udfs.parse import parse

RELEASE = engine.EngineConfig(
    scopes=(engine.CLUSTER,), policies=engine.Policies(fault_aware_release=True)
)

SHIPPED = dataclasses.replace(engine_config(load_job_config(None)), scopes=(engine.CLUSTER,))
"""The shipped configuration, for the cluster scope (as ``faultline evaluate`` runs it)."""

T = 1_795_255_200_000


def _decision(kind: str, broker: str, at: int, until: int) -> dict[str, Any]:
    return {"scope": "cluster", "cluster": "C", "broker_name": broker, "decision": kind,
            "effective_at": at, "available_from": until}  # fmt: skip


def test_a_decision_read_late_still_isolates_for_its_whole_duration() -> None:
    view = DecisionView()
    view.apply(_decision("ISOLATE", "b", T, T + 2_000), seen_at=T + 2_000)  # read 2 s late
    assert view.is_available("C", "b", T + 1_999)  # not read yet
    assert not view.is_available("C", "b", T + 2_000)
    assert not view.is_available("C", "b", T + 3_999)
    assert view.is_available("C", "b", T + 4_000)  # 2 s from when it was read
    view.apply(_decision("ISOLATE", "b", T + 10_000, T + 70_000), seen_at=T + 10_500)
    view.apply(_decision("RESTORE", "b", T + 20_000, T + 20_000), seen_at=T + 22_000)
    assert not view.is_available("C", "b", T + 21_999)
    assert view.is_available("C", "b", T + 22_000)
    view.apply(_decision("ROUTE_EXPIRED", "b", T + 30_000, T + 30_000), seen_at=T + 30_000)
    assert not view.is_available("C", "b", T + 31_000)
    view.apply({**_decision("ISOLATE", "x", T, T + 9_000), "scope": "producer"}, seen_at=T)
    assert view.is_available("C", "x", T + 1)  # a producer's own scope is not for others
    assert view.is_available("C", "never-seen", T)


def test_a_broker_on_probation_takes_its_share_of_the_sends() -> None:
    view = DecisionView()
    view.apply(_decision("ISOLATE", "b", T, T + 10_000), seen_at=T)
    probe = {**_decision("PROBE", "b", T + 10_000, T + 20_000), "share": 0.25}
    view.apply(probe, seen_at=T + 10_500)  # read late: the probation lasts its 10 s from then
    assert not any(view.is_available("C", "b", T + 5_000, ticket) for ticket in range(100))
    during = [view.is_available("C", "b", T + 15_000, ticket) for ticket in range(10_000)]
    assert abs(sum(during) - 2_500) <= 2  # a quarter of the sends, spread over them
    assert abs(sum(during[:20]) - 5) <= 1
    assert not all(view.is_available("C", "b", T + 20_400, ticket) for ticket in range(100))
    assert all(view.is_available("C", "b", T + 20_500, ticket) for ticket in range(100))


def _faultline(name: str) -> Any:
    scenario = load_scenario(name)
    return scenario.model_copy(
        update={"producers": [STRATEGIES["faultline"](p) for p in scenario.producers]}
    )


def test_the_loop_runs_the_real_engine_on_the_events_as_they_happen() -> None:
    """The decisions the producers read are those the engine makes from the same events in one
    batch afterwards (the engine gives the same rows however the events are batched)."""
    scenario = _faultline("quick")
    loop = Loop(scenario.cluster, 2_000)
    events = simulate(scenario, loop=loop)
    assert simulate(scenario, loop=Loop(scenario.cluster, 2_000)) == events  # deterministic
    fed = [e for e in events if e["kind"] in ("send_result", "heartbeat", "route")]

    frame = parse([json.dumps(e) for e in fed], ["x"] * len(fed), [e["event_time"] for e in fed])
    config = engine.EngineConfig(scopes=(engine.CLUSTER,))
    step = engine.advance(scenario.cluster, None, frame.to_pandas(), config)
    once = [r for r in step.tables["broker_decisions"].to_pylist() if r["scope"] == "cluster"]
    key = lambda r: (r["effective_at"], r["broker_name"], r["decision"])  # noqa: E731
    # the loop ran up to its last batch; every decision of that span is the same
    last = loop.done
    assert sorted(loop.decisions, key=key) == sorted(
        [r for r in once if r["effective_at"] <= last], key=key
    )
    assert any(r["decision"] == "ISOLATE" for r in loop.decisions)


def test_faultline_producers_send_nowhere_their_view_isolates_unless_all_are() -> None:
    scenario = _faultline("default")
    loop = Loop(scenario.cluster, 2_000)
    events = simulate(scenario, loop=loop)
    brokers = [b.name for b in scenario.brokers]
    avoided = violations = 0
    for e in events:
        if e["kind"] != "send_result" or e["outcome"] == "CALL_TIMEOUT":
            continue
        start = e["event_time"] - e["latency_ms"]
        if loop.view.is_available(scenario.cluster, e["broker_name"], start):
            continue
        others = [b for b in brokers if loop.view.is_available(scenario.cluster, b, start)]
        violations += bool(others)
        avoided += 1
    assert violations == 0
    without = simulate(load_scenario("default"))
    sick = sick_intervals(scenario)

    def sick_sends(evs: list[dict[str, Any]]) -> int:
        return sum(
            any(
                a <= e["event_time"] - e["latency_ms"] < b
                for a, b in sick.get(e["broker_name"], ())
            )
            for e in evs
            if e["kind"] == "send_result" and e["outcome"] != "CALL_TIMEOUT"
        )

    assert sick_sends(events) < sick_sends(without)


def test_a_decision_costs_capacity_only_to_the_producers_of_its_brokers_topic() -> None:
    """``fleet-16`` has four topics of four brokers and five producers each: a healthy broker of
    topic t-0 isolated for 10 s costs those five producers 10 s each, and the other fifteen
    nothing (they never send there), so 2.5 broker-seconds per producer, for the producers and
    for the decisions alone."""
    scenario = _faultline("fleet-16")
    loop = Loop(scenario.cluster, 1_000)
    at = scenario.start + 60_000  # broker-00 has no fault
    loop.decisions = [{**_decision("ISOLATE", "broker-00", at, at + 10_000), "cause_event_id": "e"}]
    figures = measure(scenario, [], Record(), loop)
    assert (figures.capacity_lost_s, figures.decided_capacity_lost_s) == (2.5, 2.5)
    assert figures.healthy_isolated_s == 0


def test_evaluate_sweeps_the_decision_delay_and_draws_it(tmp_path: Path) -> None:
    """``--delay 0.5s,2s --plot``: a row per strategy, a column per delay (sick-broker sends /
    capacity lost), the comparisons at each delay last, and the same figures as a PNG."""
    png = tmp_path / "sweep.png"
    argv = ["--scenario", "quick", "--delay", "2s,0.5s", "--plot", str(png)]
    result = faultline("evaluate", *argv, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == f"plot: {png}"
    header = next(i for i, line in enumerate(lines) if line.startswith("strategy "))
    assert lines[header].split() == ["strategy", "500", "ms", "2", "s"]
    rows = {line[:24].strip(): line[24:].split() for line in lines[header + 1 : -6]}
    assert set(rows) == {*STRATEGIES, RULES_ONLY, *(f"faultline + {p}" for p in POLICIES), RELAY}
    cell = r"\d+ / \d+\.\d"
    assert all(re.fullmatch(f"{cell} {cell}", " ".join(cells)) for cells in rows.values())
    assert rows["off"][:3] == rows["off"][3:]  # reads no decision: the same at every delay
    share = r"[-+]\d+%"
    assert re.fullmatch(
        rf"sick-broker sends, faultline vs off: {share} at 500 ms, {share} at 2 s", lines[-2]
    )
    assert lines[-1].startswith("sick-broker sends, faultline vs own (rocketmq-4.9): ")
    assert re.fullmatch(
        r"healthy capacity lost \(broker-seconds per producer\), faultline's decisions: "
        r"\d+\.\d at 500 ms, \d+\.\d at 2 s; own \(rocketmq-4\.9\): \d+\.\d",
        lines[-4],
    )
    wrong = r"healthy brokers isolated by faultline's own decisions: \d+\.\d s at 500 ms, "
    assert re.fullmatch(rf"{wrong}\d+\.\d s at 2 s", lines[-5])
    # every broker down at once: 4.x producers rewrite queues to other brokers, and say so
    swaps = next(line for line in lines if line.startswith("queue swaps of RocketMQ 4.x"))
    made, reported = map(int, re.findall(r": (\d+) in the producers, (\d+) reported", swaps)[0])
    assert made > 50 and reported > 0.8 * made, swaps
    with Image.open(png) as image:
        assert image.size == (1200, 480)
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 100  # lines, labels and legend, not blank
    bad = faultline("evaluate", "--scenario", "quick", "--delay", "1s,0s", cwd=tmp_path)
    assert (
        bad.returncode == 2 and "--delay '1s,0s': a decision delay is more than 0 ms" in bad.stderr
    )


def test_the_policies_catch_what_no_send_result_shows() -> None:
    """slow-peers: a broker 10x slower than its peers but under RocketMQ's band, then every
    broker slow at once."""
    scenario = load_scenario("slow-peers")
    rows = [*STRATEGIES, *(f"faultline + {p}" for p in POLICIES)]  # the sweep test has the rest
    results = evaluate(scenario, 2_000, rows=rows)
    plain, outliers = results["faultline"], results["faultline + outliers"]
    assert plain.sick_sends == results["own"].sick_sends  # RocketMQ's rules see nothing
    assert outliers.sick_sends < 0.6 * plain.sick_sends
    assert plain.route_empty_s and plain.route_empty_s > 10  # all six isolated at once ...
    assert results["faultline + cap"].route_empty_s == 0  # ... never with the cap
    assert all(f.decided_healthy_isolated_s == 0 for n, f in results.items() if "+" in n)
    # the report: a row per strategy, and the comparisons last, the goals' two at the end
    out = io.StringIO()
    report(scenario, 2_000, results, out)
    lines = out.getvalue().strip().splitlines()
    assert [line.split("  ")[0] for line in lines[2 : 2 + len(rows)]] == list(results) == rows
    share, s49 = r"[-+]\d+%", r"own \(rocketmq-4\.9\)"
    assert re.fullmatch(
        r"healthy capacity lost \(broker-seconds per producer\), faultline's decisions: "
        rf"\d+\.\d, {s49}: \d+\.\d",
        lines[-4],
    )
    assert lines[-5] == "healthy brokers isolated by faultline's own decisions: 0.0 s"
    assert re.fullmatch(
        rf"sick-broker sends, own \(4\.9\) \+ faultline vs {s49}: {share}", lines[-3]
    )
    assert re.fullmatch(rf"sick-broker sends, faultline vs off: {share}", lines[-2])
    assert re.fullmatch(rf"sick-broker sends, faultline vs {s49}: {share}", lines[-1])


@pytest.mark.parametrize("name", ["default", "spike-timeout"])
def test_following_faultline_is_never_worse_than_the_producers_own_strategy(name: str) -> None:
    """With the shipped configuration (its policies on), at a decision delay of 1 s (the rows
    compared only)."""
    rows = ("faultline", "own", "off", "own (4.9) + faultline", "own (rocketmq-4.9)")
    results = evaluate(load_scenario(name), 1_000, SHIPPED, rows=rows)
    assert set(results) == set(rows)
    assert results["faultline"].sick_sends <= results["own"].sick_sends
    assert results["faultline"].sick_sends < results["off"].sick_sends
    assert results["own (4.9) + faultline"].sick_sends <= results["own (rocketmq-4.9)"].sick_sends
    # the cluster scope's decisions keep healthy brokers away less than RocketMQ 4.9 does
    decided = results["faultline"].decided_capacity_lost_s
    assert decided is not None and decided < results["own (rocketmq-4.9)"].capacity_lost_s
    assert results["faultline"].decided_healthy_isolated_s == 0


def test_released_messages_go_around_the_brokers_faultline_isolates() -> None:
    """quick: all three brokers down for 12 s, messages fail and are sent again. Re-sent where
    fault-aware release routes them (unless the producer's own FaultTable isolates that broker
    then), none of them starts on a sick broker."""
    scenario = load_scenario("quick")
    sick = sick_intervals(scenario)
    runs = {}
    for name, config in [("own", None), (RELAY, RELEASE)]:
        changed = scenario.model_copy(
            update={"producers": [STRATEGIES["own"](p) for p in scenario.producers]}
        )
        loop = Loop(changed.cluster, 2_000, config) if config else None
        record = Record()
        events = simulate(changed, record=record, loop=loop)
        resent = [e for e in events if e.get("redelivery_count") and e["attempt"] == 0]
        if loop is not None:  # each onto the broker faultline's redelivery names ...

            def own_isolates(e: dict[str, Any], broker: str, record: Record = record) -> bool:
                start = e["event_time"] - e["latency_ms"]
                updates = [
                    u for u in record.own.get((e["producer_id"], broker), []) if u[1] <= start
                ]
                return bool(updates) and updates[-1][2] > start

            named = [loop.released[(e["message_id"], e["redelivery_count"])] for e in resent]
            onto = [e["broker_name"] == b for e, b in zip(resent, named, strict=True)]
            # ... unless the producer's own table isolates it
            assert all(o or own_isolates(e, b) for o, e, b in zip(onto, resent, named, strict=True))
            assert sum(onto) > len(onto) / 2
        runs[name] = [
            any(a <= e["event_time"] - e["latency_ms"] < b for a, b in sick[e["broker_name"]])
            for e in resent
        ]
    assert sum(runs["own"]) > 10  # the producers' own pick sends many of them into the outage
    assert runs[RELAY] and sum(runs[RELAY]) == 0
