"""Producers that follow faultline's decisions, in the simulator, and ``faultline evaluate``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from streaming.client import DecisionView
from streaming.config import load_scenario
from streaming.evaluate import POLICIES, RELAY, STRATEGIES, evaluate, sick_intervals
from streaming.simulator import Loop, simulate
from tests.streaming.conftest import faultline
from udfs import engine
from udfs.parse import parse

RELEASE = engine.EngineConfig(
    scopes=(engine.CLUSTER,), policies=engine.Policies(fault_aware_release=True)
)

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


def test_evaluate_prints_every_strategy_and_ends_with_the_two_comparisons(tmp_path: Path) -> None:
    result = faultline("evaluate", "--scenario", "quick", "--delay", "2s", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert re.fullmatch(r"sick-broker sends, faultline vs off: [-+]\d+%", lines[-2])
    assert re.fullmatch(
        r"sick-broker sends, faultline vs own \(rocketmq-4\.9\): [-+]\d+%", lines[-1]
    )
    for name in [*STRATEGIES, *(f"faultline + {p}" for p in POLICIES), "faultline + all", RELAY]:
        assert any(line.startswith(f"{name} ") for line in lines), name
    # every broker down at once: 4.x producers rewrite queues to other brokers, and say so
    swaps = next(line for line in lines if line.startswith("queue swaps of RocketMQ 4.x"))
    made, reported = map(int, re.findall(r": (\d+) in the producers, (\d+) reported", swaps)[0])
    assert made > 50 and reported > 0.8 * made, swaps


def test_the_policies_catch_what_no_send_result_shows() -> None:
    """slow-peers: a broker 10x slower than its peers but under RocketMQ's band, then every
    broker slow at once."""
    results = evaluate(load_scenario("slow-peers"), 2_000)
    plain, outliers = results["faultline"], results["faultline + outliers"]
    assert plain.sick_sends == results["own"].sick_sends  # RocketMQ's rules see nothing
    assert outliers.sick_sends < 0.6 * plain.sick_sends
    assert plain.route_empty_s and plain.route_empty_s > 10  # all six isolated at once ...
    assert results["faultline + cap"].route_empty_s == 0  # ... never with the cap
    assert all(f.decided_healthy_isolated_s == 0 for n, f in results.items() if "+" in n)


@pytest.mark.parametrize("name", ["default", "spike-timeout"])
def test_following_faultline_is_never_worse_than_the_producers_own_strategy(name: str) -> None:
    results = evaluate(load_scenario(name), 2_000)
    assert results["faultline"].sick_sends <= results["own"].sick_sends
    assert results["faultline"].sick_sends < results["off"].sick_sends


def test_released_messages_go_around_the_brokers_faultline_isolates() -> None:
    """quick: all three brokers down for 12 s, messages fail and are sent again. Re-sent where
    fault-aware release routes them, none of them starts on a sick broker."""
    scenario = load_scenario("quick")
    sick = sick_intervals(scenario)
    runs = {}
    for name, config in [("own", None), (RELAY, RELEASE)]:
        changed = scenario.model_copy(
            update={"producers": [STRATEGIES["own"](p) for p in scenario.producers]}
        )
        loop = Loop(changed.cluster, 2_000, config) if config else None
        events = simulate(changed, loop=loop)
        resent = [e for e in events if e.get("redelivery_count") and e["attempt"] == 0]
        if loop is not None:  # each onto the broker faultline's redelivery names
            named = [loop.released.get((e["message_id"], e["redelivery_count"])) for e in resent]
            assert [e["broker_name"] for e in resent] == named
        runs[name] = [
            any(a <= e["event_time"] - e["latency_ms"] < b for a, b in sick[e["broker_name"]])
            for e in resent
        ]
    assert sum(runs["own"]) > 10  # the producers' own pick sends many of them into the outage
    assert runs[RELAY] and sum(runs[RELAY]) == 0
