"""The simulator on fleets of any size (no Spark): every broker heartbeats within the first
interval, a broker that never heartbeats breaks nothing, and the two fleet scenarios are alike in
size so that their cost per event can be compared."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from streaming.config import Scenario, load_scenario
from streaming.simulator import HEARTBEAT_TIMEOUT_MS, SCAN_INTERVAL_MS, simulate

START = 1_795_000_000_000


def _scenario(brokers: int, **fields: Any) -> Scenario:
    names = [f"broker-{i:04d}" for i in range(brokers)]
    return Scenario.model_validate(
        {
            "name": "test",
            "seed": 1,
            "start": START,
            "duration": "5m",
            "brokers": [{"name": n} for n in names],
            "topics": [{"name": "orders", "brokers": names}],
            "producers": [
                {"id": "p-47", "group": "pg", "profile": "rocketmq-4.7", "topic": "orders"},
                {"id": "p-5", "group": "pg", "profile": "rocketmq-5", "topic": "orders"},
            ],
            **fields,
        }
    )


def _first_heartbeats(events: list[dict[str, Any]]) -> dict[str, int]:
    first: dict[str, int] = {}
    for e in events:
        if e["kind"] == "heartbeat":
            first.setdefault(e["broker_name"], e["event_time"])
    return first


def _routes(events: list[dict[str, Any]]) -> list[tuple[int, list[str]]]:
    return [
        (e["event_time"], [b["broker_name"] for b in e["brokers"]])
        for e in events
        if e["kind"] == "route"
    ]


def test_a_fleet_of_1000_brokers_heartbeats_within_the_first_interval() -> None:
    scenario = _scenario(1000, producers=[], duration="2m", tail="3m")
    events = simulate(scenario)
    first = _first_heartbeats(events)
    assert set(first) == {b.name for b in scenario.brokers}
    assert all(START <= t < START + scenario.heartbeat_interval for t in first.values())
    assert len(set(first.values())) == 1000  # spread, no two at once
    # so no broker ever misses the NameServer's 120 s: one route, the whole fleet, throughout
    assert _routes(events) == [(START, [b.name for b in scenario.brokers])]


def test_a_fleet_of_1000_brokers_takes_sends() -> None:
    events = simulate(_scenario(1000, duration="1m"))
    assert len(_first_heartbeats(events)) == 1000
    sends = [e for e in events if e["kind"] == "send_result"]
    assert {e["outcome"] for e in sends} == {"SEND_OK"}
    assert len({e["broker_name"] for e in sends}) > 100


def test_a_small_fleet_keeps_its_heartbeats_one_second_apart() -> None:
    """Six brokers fit in 30 s a second apart, as the shipped scenarios have always had them."""
    scenario = load_scenario("default")
    first = _first_heartbeats(simulate(scenario.model_copy(update={"producers": []})))
    assert [first[b.name] - scenario.start for b in scenario.brokers] == [
        0,
        1000,
        2000,
        3000,
        4000,
        5000,
    ]


def test_a_broker_that_never_heartbeats_drops_out_of_the_route() -> None:
    """Heartbeats stopped from the start to the end: the broker is in the route at the start, the
    NameServer drops it at the first scan more than 120 s later, and it never comes back."""
    scenario = _scenario(
        3,
        tail="2m",
        faults=[{"type": "heartbeat_stop", "broker": "broker-0002", "at": 0, "for": "7m"}],
    )
    events = simulate(scenario)
    assert set(_first_heartbeats(events)) == {"broker-0000", "broker-0001"}
    drop = ((START + HEARTBEAT_TIMEOUT_MS) // SCAN_INTERVAL_MS + 1) * SCAN_INTERVAL_MS
    assert _routes(events) == [
        (START, ["broker-0000", "broker-0001", "broker-0002"]),
        (drop, ["broker-0000", "broker-0001"]),
    ]
    sent = [e for e in events if e["kind"] == "send_result"]
    late = [e for e in sent if e["event_time"] - e["latency_ms"] >= drop]
    assert late and all(e["broker_name"] != "broker-0002" for e in late)
    assert any(e["broker_name"] == "broker-0002" for e in sent)


def test_a_broker_whose_first_heartbeat_is_after_the_end_stays_in_the_route() -> None:
    """A scenario shorter than the heartbeat spread: broker 2 would first heartbeat at 2 s."""
    scenario = _scenario(3, duration="1500ms")
    events = simulate(scenario)
    assert set(_first_heartbeats(events)) == {"broker-0000", "broker-0001"}
    assert _routes(events) == [(START, ["broker-0000", "broker-0001", "broker-0002"])]
    assert any(e["kind"] == "send_result" for e in events)


@pytest.fixture(scope="module")
def fleets() -> dict[str, tuple[Scenario, list[dict[str, Any]]]]:
    out = {}
    for name in ("fleet-16", "fleet-1000"):
        scenario = load_scenario(name)
        out[name] = (scenario, simulate(scenario))
    return out


@pytest.mark.parametrize(
    ("name", "brokers", "producers"), [("fleet-16", 16, 20), ("fleet-1000", 1000, 5000)]
)
def test_the_fleet_scenarios_have_their_brokers_and_producers(
    fleets: dict[str, tuple[Scenario, list[dict[str, Any]]]],
    name: str,
    brokers: int,
    producers: int,
) -> None:
    scenario, events = fleets[name]
    assert 150_000 <= len(events) <= 250_000
    heartbeats = {e["broker_name"] for e in events if e["kind"] == "heartbeat"}
    sends = [e for e in events if e["kind"] == "send_result"]
    assert len(heartbeats) == brokers
    assert len({e["producer_id"] for e in sends}) == producers
    assert {e["client_profile"] for e in sends} == {"rocketmq-4.7", "rocketmq-4.9", "rocketmq-5"}
    first = _first_heartbeats(events)
    stopped = {f.broker for f in scenario.faults if f.type == "heartbeat_stop"}
    assert all(
        t < scenario.start + scenario.heartbeat_interval
        for b, t in first.items()
        if b not in stopped
    )
    # one broker in five fails, with every kind of fault there is
    failing = {f.broker for f in scenario.faults}
    assert len(failing) == round(brokers / 5)
    assert {f.type for f in scenario.faults} == {
        "slow",
        "latency_spike",
        "outage",
        "flapping",
        "heartbeat_stop",
    }
    # the topics' routes cover the fleet
    assert {b for t in scenario.topics for b in t.brokers} == {b.name for b in scenario.brokers}


def test_the_fleet_scenarios_have_as_many_events(
    fleets: dict[str, tuple[Scenario, list[dict[str, Any]]]],
) -> None:
    small, large = (len(fleets[n][1]) for n in ("fleet-16", "fleet-1000"))
    assert abs(small - large) <= 0.05 * min(small, large), (small, large)
    kinds = Counter(e["kind"] for e in fleets["fleet-1000"][1])
    assert kinds["route"] > 1  # brokers whose heartbeats stop leave the route and come back
