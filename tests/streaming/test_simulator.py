"""The simulator on fleets of any size (no Spark): every broker heartbeats within the first
interval, a broker that never heartbeats breaks nothing, and the two fleet scenarios are alike in
size so that their cost per event can be compared. Transactional producers: half messages, their
ends and the brokers' check-backs, and the engine on them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from streaming.config import ProducerSpec, Scenario, load_scenario, scenario_path
from streaming.sim.simulator import HEARTBEAT_TIMEOUT_MS, SCAN_INTERVAL_MS, _Cluster, simulate
from udfs import engine
from udfs.errors import ConfigError
from udfs.parse import parse

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


# --- transactional producers ------------------------------------------------------------------

TX = "p-5-tx"


@pytest.fixture(scope="module")
def default() -> tuple[Scenario, list[dict[str, Any]]]:
    scenario = load_scenario("default")
    return scenario, simulate(scenario)


def _of(events: list[dict[str, Any]], kind: str, tx: str | None = None) -> list[dict[str, Any]]:
    return [
        e for e in events if e["kind"] == kind and (tx is None or e.get("transaction_id") == tx)
    ]


def test_the_end_sent_into_broker_c_outage_is_lost_and_a_check_commits_it(
    default: tuple[Scenario, list[dict[str, Any]]],
) -> None:
    """broker-c is down from 110 s to 140 s: the end of the half message it stored just before
    is lost, the wake at 120 s checks it while the broker cannot reach the producer (no event,
    the count rises), and the first check after the outage, at 150 s, gets COMMIT: consumers
    see the message then."""
    scenario, events = default
    start = scenario.start
    lost = [
        e
        for e in _of(events, "transaction_end")
        if e["broker_name"] == "broker-c" and start + 110_000 <= e["event_time"] < start + 140_000
    ]
    assert lost and {e["local_state"] for e in lost} == {"COMMIT_MESSAGE"}
    for end in lost:
        checks = _of(events, "transaction_check", end["transaction_id"])
        assert checks and all(c["broker_name"] == "broker-c" for c in checks)
        assert all(c["event_time"] >= start + 140_000 for c in checks)
        assert checks[0]["check_times"] == 2  # check 1, at 120 s, never reached the producer
        assert checks[-1]["local_state"] == "COMMIT_MESSAGE"
        consumed = [
            e for e in _of(events, "consume_result") if e["message_id"] == end["message_id"]
        ]
        assert consumed and all(e["event_time"] > checks[-1]["event_time"] for e in consumed)


def test_a_transaction_answered_unknow_for_ever_is_checked_15_times(
    default: tuple[Scenario, list[dict[str, Any]]],
) -> None:
    """Every fifth UNKNOW of p-5-tx is answered UNKNOW for ever: its broker checks it every 30 s
    (5.x) with TRANSACTION_CHECK_TIMES 1 to 15, then discards it. A check while its broker is
    down never reaches the producer: that count has no event."""
    scenario, events = default
    cluster = _Cluster(scenario)
    checks: dict[str, list[dict[str, Any]]] = {}
    for e in _of(events, "transaction_check"):
        checks.setdefault(e["transaction_id"], []).append(e)
    never = {
        tx: got
        for tx, got in checks.items()
        if {c["local_state"] for c in got} == {"UNKNOW"} and got[-1]["check_times"] == 15
    }
    assert len(never) >= 3
    missing = 0
    for tx, got in never.items():
        counts = [c["check_times"] for c in got]
        assert counts == sorted(set(counts)) and counts[-1] == 15
        first_wake = got[0]["event_time"] // 30_000 * 30_000 - (counts[0] - 1) * 30_000
        for k in range(1, 16):  # the k-th check at the k-th wake; lost ones while it was down
            wake = first_wake + (k - 1) * 30_000
            assert (k not in counts) == cluster.down(got[0]["broker_name"], wake), (tx, k)
        missing += 15 - len(counts)
        assert not [e for e in _of(events, "consume_result") if e["message_id"] == tx]
    assert missing >= 1  # the default scenario has such a lost check


def test_prepared_sends_are_sync_half_messages_with_their_transaction_ids(
    default: tuple[Scenario, list[dict[str, Any]]],
) -> None:
    _, events = default
    sends = _of(events, "send_result")
    half = [e for e in sends if e["producer_id"] == TX]
    assert len(half) > 200
    assert {e["transaction"] for e in half} == {"PREPARED"}
    assert all(e["transaction_id"] == e["message_id"] for e in half)
    assert {e["mode"] for e in half} == {"SYNC"}
    assert not any("delay_level" in e or "redelivery_count" in e for e in half)
    assert not any("transaction" in e for e in sends if e["producer_id"] != TX)
    # one end per stored half message, at the earliest when it was stored, to its broker
    stored = {e["message_id"]: e for e in half if e["outcome"] == "SEND_OK"}
    ends = _of(events, "transaction_end")
    assert sorted(e["transaction_id"] for e in ends) == sorted(stored)
    for end in ends:
        send = stored[end["transaction_id"]]
        assert end["broker_name"] == send["broker_name"]
        assert send["event_time"] <= end["event_time"] <= send["event_time"] + 2_000
    assert Counter(e["local_state"] for e in ends).keys() == {
        "COMMIT_MESSAGE",
        "ROLLBACK_MESSAGE",
        "UNKNOW",
    }


def test_the_transactional_producer_changes_no_other_producer_s_sends(
    default: tuple[Scenario, list[dict[str, Any]]],
) -> None:
    """Each producer draws from its own random stream; and the run is deterministic, its event
    ids unique."""
    scenario, events = default
    assert len({e["event_id"] for e in events}) == len(events)
    without = scenario.model_copy(
        update={"producers": [p for p in scenario.producers if p.id != TX]}
    )
    sends = [e for e in _of(events, "send_result") if e["producer_id"] != TX]
    assert _of(simulate(without), "send_result") == sends
    assert simulate(scenario) == events


def test_a_half_message_whose_sends_all_fail_has_no_end() -> None:
    """quick: every broker down from 20 s to 32 s. sendMessageInTransaction throws: no end, no
    check, no redelivery, nothing to consume."""
    scenario = load_scenario("quick")
    producer = ProducerSpec.model_validate(
        {"id": "tx", "group": "pg", "profile": "rocketmq-5", "topic": "orders",
         "interval": "200ms", "transactions": {"commit": 1}}
    )  # fmt: skip
    events = simulate(scenario.model_copy(update={"producers": [producer]}))
    attempts: dict[str, list[dict[str, Any]]] = {}
    for e in _of(events, "send_result"):
        attempts.setdefault(e["message_id"], []).append(e)
    failed = {m for m, a in attempts.items() if all(e["outcome"] != "SEND_OK" for e in a)}
    assert len(failed) > 5
    assert all(len(attempts[m]) == 1 or len(attempts[m]) == 3 for m in failed)
    assert all("redelivery_count" not in e for a in attempts.values() for e in a)
    ended = {e["transaction_id"] for e in _of(events, "transaction_end")}
    assert ended == set(attempts) - failed
    assert not ended & {e["transaction_id"] for e in _of(events, "transaction_check")}
    consumed = {e["message_id"] for e in _of(events, "consume_result")}
    assert consumed == ended  # every local transaction commits, every end arrives


def _transactions(
    scenario: Scenario, events: list[dict[str, Any]], cuts: list[int]
) -> list[dict[str, Any]]:
    state, rows = None, []
    for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True):
        batch = events[a:b]
        frame = parse([json.dumps(e) for e in batch], ["t"] * len(batch),
                      [e["event_time"] for e in batch])  # fmt: skip
        step = engine.advance(scenario.cluster, state, frame.to_pandas(), engine.EngineConfig())
        state = step.state
        table = step.tables.get("transactions")
        rows += table.to_pylist() if table is not None else []
    return rows


def test_the_engine_follows_the_default_scenario_s_transactions(
    default: tuple[Scenario, list[dict[str, Any]]],
) -> None:
    """The simulated events through the engine (no Spark), in one batch and in five: the same
    transactions rows, in every state the scenario has, and the end lost in broker-c's outage
    flagged, then committed by the answer to a check."""
    scenario, events = default
    one = _transactions(scenario, events, [])
    n = len(events)
    five = _transactions(scenario, events, [n // 5, n // 3, n // 2, 3 * n // 4])

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["effective_at"], r["transaction_id"], r["state"], r["check_times"])

    assert sorted(one, key=key) == sorted(five, key=key)
    assert {r["state"] for r in one} >= {
        "PREPARED",
        "COMMIT",
        "ROLLBACK",
        "UNKNOWN",
        "CHECK",
        "DISCARDED",
        "END_TO_UNAVAILABLE_BROKER",
    }
    start = scenario.start
    lost = next(
        e
        for e in _of(events, "transaction_end")
        if e["broker_name"] == "broker-c" and start + 110_000 <= e["event_time"] < start + 140_000
    )
    rows = [r for r in one if r["transaction_id"] == lost["transaction_id"]]
    assert [r["state"] for r in rows] == [
        "PREPARED", "END_TO_UNAVAILABLE_BROKER", "CHECK", "CHECK", "COMMIT"
    ]  # fmt: skip
    assert rows[1]["notify"] and "isolates" in rows[1]["reason"]
    # the slow broker-e and broker-b's spike are isolated too, but they answer: only the end
    # lost in the outage is flagged, and only the transactions answered UNKNOW for ever (their
    # 15th check reported, or lost in a broker's down time) are discarded
    flagged = {r["transaction_id"] for r in one if r["state"] == "END_TO_UNAVAILABLE_BROKER"}
    assert flagged == {lost["transaction_id"]}
    last_answer: dict[str, str] = {}
    for e in _of(events, "transaction_check"):
        last_answer[e["transaction_id"]] = e["local_state"]
    never = {t for t, a in last_answer.items() if a == "UNKNOW"}
    assert {r["transaction_id"] for r in one if r["state"] == "DISCARDED"} == never


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"mode": "ASYNC"},
            "producers.5.mode = 'ASYNC': a transactional producer sends SYNC",
        ),
        (
            {"transactions": {"commit": 0.5, "rollback": 0.2}},
            "producers.5.transactions = {'commit': 0.5, 'rollback': 0.2}: "
            "commit + rollback + unknown must add up to 1, not 0.7 (0.5 + 0.2 + 0)",
        ),
        (
            {"delay_every": 3},
            "producers.5.delay_every = 3: a transactional producer's half messages "
            "are never delayed",
        ),
        (
            {"transactions": {"local_ms": ["2s", "1s"]}},
            "local_ms: [low, high] with low <= high, not [2000, 1000]",
        ),
    ],
)
def test_a_transactional_producer_that_cannot_be_is_a_config_error(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    data = yaml.safe_load(scenario_path("default").read_text())
    assert data["producers"][5]["id"] == TX
    data["producers"][5] = {**data["producers"][5], **change}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as error:
        load_scenario(str(path))
    assert str(error.value).startswith(f"{path}: producers.5.")
    assert message in str(error.value)
