"""faultline's own policies over the cluster scope (``udfs.engine._policies``): latency outliers,
the isolation cap with its panic, recovery probing; each a row with its reason, each on the
cluster's clock whatever the batches."""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streaming.client import DecisionView, decision_state, message, publish_order
from streaming.config import load_scenario
from streaming.job.sink import decision_messages
from streaming.sim.simulator import simulate
from tests.engine.conftest import T0, frame, send
from udfs import engine
from udfs.engine import _policies
from udfs.vocabulary import Decision, ProducerState

CLUSTER_ONLY = engine.EngineConfig(scopes=(engine.CLUSTER,))
ROUTE = {"T": tuple((b, 4, 6) for b in "abcd")}


def _with(**policies: Any) -> engine.EngineConfig:
    return dataclasses.replace(
        CLUSTER_ONLY, static_routes=ROUTE, policies=engine.Policies(**policies)
    )


def _run(batches: list[list[dict[str, Any]]], config: engine.EngineConfig) -> dict[str, list[Any]]:
    return _run_with_state(batches, config)[0]


def _run_with_state(
    batches: list[list[dict[str, Any]]], config: engine.EngineConfig
) -> tuple[dict[str, list[Any]], list[str]]:
    """The rows of every table, and the state after each batch (stored as Spark stores it)."""
    state: engine.State | None = None
    tables: dict[str, list[Any]] = {}
    states = []
    for events in batches:
        step = engine.advance("c", state, frame(events), config)
        states.append(engine.dumps(step.state))
        state = engine.loads(states[-1])
        for name, rows in step.tables.items():
            tables.setdefault(name, []).extend(rows.to_pylist())
    return tables, states


def _decisions(tables: dict[str, list[Any]]) -> list[tuple[str, str, int, int]]:
    return [
        (r["broker_name"], r["decision"], r["effective_at"] - T0, r["available_from"] - T0)
        for r in sorted(tables.get("broker_decisions", []), key=publish_order)
        if r["scope"] == "cluster"
    ]


def _steady(until_s: int, slow: str = "d", slow_ms: int = 200) -> list[dict[str, Any]]:
    """Every 100 ms one answered send to each of a, b, c, d: 10-13 ms, ``slow`` at
    ``slow_ms`` for the first 10 s."""
    events = []
    for i, b in itertools.product(range(until_s * 10), "abcd"):
        latency = slow_ms if b == slow and i < 100 else 10 + "abcd".index(b)
        events.append(send(f"{b}{i:05d}", i * 100 + latency, b, latency=latency))
    return events


def test_a_broker_slow_against_its_peers_is_isolated_though_no_send_reaches_the_band() -> None:
    events = _steady(45)
    assert _decisions(_run([events], CLUSTER_ONLY)) == []  # 200 ms: RocketMQ isolates nothing
    tables = _run([events], _with(outlier_factor=3.0))
    assert _decisions(tables) == [
        ("d", "OUTLIER", 10_000, 40_000),  # the window [0, 10 s) closes at 10 s
        ("d", "RELEASE", 40_000, 40_000),
    ]
    outlier, release = tables["broker_decisions"]
    assert outlier["reason"] == (
        "latency outlier: mean 200 ms over 98 sends of topic T in the 10000 ms window, 17.4x its "
        "4 brokers' median 12 ms (factor 3)"  # sends before 10 s; the median is 11.5 ms
    )
    assert release["reason"] == "latency outlier isolation ended"
    isolated = [(r["effective_at"] - T0, r["isolated"]) for r in tables["routing_table"]]
    assert (10_000, [{"broker_name": "d", "until": T0 + 40_000}]) in isolated
    assert isolated[-1] == (40_000, [])


def test_no_outlier_below_the_minimum_latency_or_with_too_few_brokers() -> None:
    assert _decisions(_run([_steady(15, slow_ms=90)], _with(outlier_factor=3.0))) == []
    two = [e for e in _steady(15) if e["broker_name"] in "cd"]
    assert _decisions(_run([two], _with(outlier_factor=3.0))) == []


def _failure(eid: str, t: int, broker: str) -> dict[str, Any]:
    return send(eid, t, broker, "REMOTING_EXCEPTION", latency=5)


def test_the_cap_keeps_brokers_in_the_route_while_more_are_sick() -> None:
    events = [_failure(f"f{b}", 1_000 * (i + 1), b) for i, b in enumerate("abc")]
    events.append(send("late", 400_000, "d"))  # the clock moves past every isolation
    tables = _run([events], _with(isolation_cap=0.5))
    rows = sorted(tables["broker_decisions"], key=publish_order)
    base = _decisions(_run([events], CLUSTER_ONLY))
    duration = base[0][3] - base[0][2]  # the cluster profile's isolation for a failure
    assert _decisions(tables) == [
        ("a", "ISOLATE", 1_000, 1_000 + duration),
        ("b", "ISOLATE", 2_000, 2_000 + duration),
        ("c", "ISOLATE", 3_000, 3_000 + duration),  # RocketMQ's rule, as always ...
        ("c", "PANIC", 3_000, 3_000),  # ... and the cap's last word: 2 of 4 may be isolated
        ("a", "RESTORE", 1_000 + duration, 1_000 + duration),
        ("c", "HOLD", 1_000 + duration, 3_000 + duration),  # room again
        ("b", "RESTORE", 2_000 + duration, 2_000 + duration),
        ("c", "RESTORE", 3_000 + duration, 3_000 + duration),
    ]
    assert rows[3]["reason"] == (
        "isolation cap 50%: 3 of topic T's 4 writable brokers are isolated or sick, at most 2 "
        "may be isolated; kept in the route (panic)"
    )
    assert rows[3]["cause_event_id"] == "fc"
    assert rows[5]["reason"] == "the FaultTable's isolation holds: the isolation cap has room again"
    at_panic = [r for r in tables["routing_table"] if r["effective_at"] == T0 + 3_000]
    assert [i["broker_name"] for i in at_panic[-1]["isolated"]] == ["a", "b"]
    assert {q["broker_name"] for q in at_panic[-1]["selectable"]} == {"c", "d"}


def test_the_cap_keeps_a_failing_broker_out_before_one_only_a_latency_window_holds() -> None:
    """d was slow for 10 s and is isolated as an outlier for 30 s; then a and b fail: of four
    brokers two may be isolated, and a slow broker is the better last resort."""
    steady = [e for e in _steady(45) if e["broker_name"] in "cd" or e["event_time"] < T0 + 11_000]
    events = sorted([*steady, _failure("fa", 12_000, "a"), _failure("fb", 13_000, "b")],
                    key=lambda e: e["event_time"])  # fmt: skip
    tables = _run([events], _with(outlier_factor=3.0, isolation_cap=0.5))
    assert _decisions(tables) == [
        ("d", "OUTLIER", 10_000, 40_000),
        ("a", "ISOLATE", 12_000, 22_000),
        ("b", "ISOLATE", 13_000, 23_000),
        ("d", "PANIC", 13_000, 13_000),  # not b: it fails, d only answers late
        ("a", "RESTORE", 22_000, 22_000),
        ("d", "OUTLIER", 22_000, 40_000),  # room again
        ("b", "RESTORE", 23_000, 23_000),
        ("d", "RELEASE", 40_000, 40_000),
    ]


def test_a_broker_whose_isolation_ends_is_on_probation_for_as_long_first() -> None:
    events = [_failure("fa", 1_000, "a"), send("late", 900_000, "b")]
    base = _decisions(_run([events], CLUSTER_ONLY))
    end = base[0][3]
    probation = end - 1_000  # as long as the isolation: under probe_max_ms
    tables = _run([events], _with(probe_share=0.05, probe_max_ms=60_000))
    assert _decisions(tables) == [
        ("a", "ISOLATE", 1_000, end),
        ("a", "RESTORE", end, end),
        ("a", "PROBE", end, end + probation),
        ("a", "RELEASE", end + probation, end + probation),
    ]
    capped = _run([events], _with(probe_share=0.05, probe_max_ms=4_000))
    assert ("a", "PROBE", end, end + 4_000) in _decisions(capped)
    probe, passed = sorted(tables["broker_decisions"], key=publish_order)[2:]
    assert probe["reason"] == (
        f"recovery probing: takes 5% of the sends for {probation} ms after its isolation ended"
    )
    assert passed["reason"] == "probation passed"
    # a producer that reads these rows sends 1 in 20 to a while it is on probation
    view = DecisionView()
    for r in sorted(tables["broker_decisions"], key=publish_order):
        view.apply(message(r, 0.05), r["effective_at"])
    on_probation = [view.is_available("c", "a", T0 + end + 10, ticket=i) for i in range(1_000)]
    assert abs(sum(on_probation) - 50) <= 2  # spread over the sends, not the first 50 of them
    assert abs(sum(on_probation[:100]) - 5) <= 1
    assert view.is_available("c", "a", T0 + end + probation, ticket=1)
    assert not view.is_available("c", "a", T0 + end - 1)


def test_a_failure_on_probation_isolates_again_and_ends_the_probation() -> None:
    events = [_failure("fa", 1_000, "a"), send("late", 900_000, "b")]
    end = _decisions(_run([events], CLUSTER_ONLY))[0][3]
    events.insert(1, _failure("fa2", end + 5_000, "a"))
    decisions = _decisions(_run([events], _with(probe_share=0.05)))
    assert [d[:3] for d in decisions[:4]] == [
        ("a", "ISOLATE", 1_000),
        ("a", "RESTORE", end),
        ("a", "PROBE", end),
        ("a", "ISOLATE", end + 5_000),
    ]
    # the first probation never passes: the second isolation's own probation does
    assert [d[1] for d in decisions[4:]] == ["RESTORE", "PROBE", "RELEASE"]


def test_every_policy_decision_means_what_the_client_reads() -> None:
    assert {d: decision_state(d) for d in ("OUTLIER", "HOLD", "PANIC", "PROBE", "RELEASE")} == {
        "OUTLIER": "ISOLATED",
        "HOLD": "ISOLATED",
        "PANIC": "AVAILABLE",
        "PROBE": "PROBING",
        "RELEASE": "AVAILABLE",
    }
    at = {"effective_at": 5}
    rows = [{**at, "decision": d} for d in ("PANIC", "ISOLATE", "RESTORE")]
    assert [r["decision"] for r in sorted(rows, key=publish_order)] == [
        "RESTORE",
        "ISOLATE",
        "PANIC",
    ]


def test_every_decision_about_a_broker_has_a_state_and_no_other_decision_does() -> None:
    reports = {Decision.QUEUE_SWAP, Decision.EVICTED}  # about a producer, not a broker
    for d in set(Decision) - reports:
        assert decision_state(d) in set(ProducerState)
    for d in reports:
        with pytest.raises(ValueError, match=f"decision '{d}' is no decision about a broker"):
            decision_state(d)


def test_an_unknown_decision_is_an_error_not_an_isolation() -> None:
    with pytest.raises(ValueError, match="decision 'QUARANTINE' is unknown: expected one of"):
        decision_state("QUARANTINE")
    row = {"decision": "QUARANTINE", "effective_at": 5, "available_from": 9}
    with pytest.raises(ValueError, match="'QUARANTINE'"):
        message(row, None)
    with pytest.raises(ValueError, match="'QUARANTINE'"):
        publish_order(row)
    read = {**row, "scope": "cluster", "cluster": "c", "broker_name": "a"}
    with pytest.raises(ValueError, match="'QUARANTINE'"):
        DecisionView().apply(read, 5)


def test_the_route_and_the_faultitem_are_two_keys_and_neither_ends_the_other() -> None:
    """A broker back in the route is still isolated; one on probation is still out of the route;
    and a batch that decides both leaves both on the compacted topic."""

    def row(decision: str, at: int, until: int) -> dict[str, object]:
        return {"scope": "cluster", "cluster": "c", "broker_name": "b", "decision": decision,
                "effective_at": at, "available_from": until}  # fmt: skip

    batch = [row("EXTEND", 1_000, 11_000), row("ROUTE_RESTORED", 2_000, 2_000)]
    messages = decision_messages({"broker_decisions": batch, "routing_table": []}, "t", 0.5)
    assert [key for _, _, key in messages] == ["broker/c/b", "broker-route/c/b"]
    view = DecisionView()
    for _, value, _ in messages:
        view.apply(json.loads(value), 2_000)
    assert not view.is_available("c", "b", 5_000)
    view.apply(message(row("ROUTE_EXPIRED", 12_000, 12_000), 0.5), 12_000)
    view.apply(message(row("PROBE", 13_000, 23_000), 0.5), 13_000)
    assert not any(view.is_available("c", "b", 14_000, ticket=i) for i in range(100))
    view.apply(message(row("ROUTE_RESTORED", 15_000, 15_000), 0.5), 15_000)
    assert 40 <= sum(view.is_available("c", "b", 16_000, ticket=i) for i in range(100)) <= 60


ALL = dataclasses.replace(
    engine.EngineConfig(),
    policies=engine.Policies(
        isolation_cap=0.5, outlier_factor=3.0, outlier_min_latency_ms=20, probe_share=0.1
    ),
)
QUICK = [{**e, "cluster": "c"} for e in simulate(load_scenario("quick"))]


def _quick_in_batches(cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(set(cuts)), len(QUICK)]
    tables = _run([QUICK[a:b] for a, b in itertools.pairwise(bounds) if b > a], ALL)
    return sorted(
        json.dumps(r, sort_keys=True)
        for name in ("broker_decisions", "routing_table")
        for r in tables[name]
    )


QUICK_WHOLE = _quick_in_batches([])


def test_the_quick_scenario_meets_every_policy() -> None:
    decisions = {json.loads(r).get("decision") for r in QUICK_WHOLE}
    assert {"OUTLIER", "PANIC", "PROBE", "RELEASE"} <= decisions  # HOLD: in the cap test


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(1, len(QUICK) - 1), min_size=1, max_size=10))
@example(cuts=[662])  # between two events of one millisecond, in the middle of a panic
def test_any_split_into_batches_gives_the_same_policy_rows(cuts: list[int]) -> None:
    assert _quick_in_batches(cuts) == QUICK_WHOLE


def _delayed(n: int) -> list[dict[str, Any]]:
    """``n`` sends stored with delay level 1 (1 s): due from 1,000 ms on."""
    return [send(f"d{i:02d}", i, "a", delay_level=1, message_id=f"m{i:02d}") for i in range(n)]


def _released(tables: dict[str, list[Any]]) -> list[Any]:
    return [r["broker_name"] for r in tables["redeliveries"]]


def test_a_released_message_goes_onto_a_broker_not_isolated_then() -> None:
    down = [_failure("fa", 500, "a"), _failure("fb", 600, "b")]  # isolated past 1 s
    events = [*_delayed(20), *down, send("tick", 2_000, "c")]
    assert set(_released(_run([events], _with()))) == {None}  # off: the producer's choice
    whole = _released(_run([events], _with(fault_aware_release=True)))
    assert len(whole) == 20 and set(whole) == {"c", "d"}  # spread by message id
    split = _run([events[:21], events[21:]], _with(fault_aware_release=True))
    assert _released(split) == whole
    # isolations that end before the messages are due leave every broker to them
    early = [*_delayed(20), send("ok", 900_000, "c")]
    assert set(_released(_run([early], _with(fault_aware_release=True)))) == set("abcd")


def test_a_4x_queue_rewritten_to_another_broker_is_reported() -> None:
    events = QUICK
    config = dataclasses.replace(engine.EngineConfig(), policies=engine.Policies())
    assert not [
        r for r in _run([events], config)["broker_decisions"] if r["decision"] == "QUEUE_SWAP"
    ]
    on = dataclasses.replace(config, policies=engine.Policies(report_queue_swaps=True))
    tables = _run([events], on)
    swaps = [r for r in tables["broker_decisions"] if r["decision"] == "QUEUE_SWAP"]
    assert swaps and {r["scope_key"] for r in swaps} == {"p-47", "p-49"}  # 5.x never rewrites
    rewritten = {
        r["event_id"]
        for r in tables["routing_decisions"]
        if r["scope"] == "producer" and r["rewritten"]
    }
    assert {r["cause_event_id"] for r in swaps} <= rewritten
    first = swaps[0]
    assert first["reason"].startswith("RocketMQ 4.x rewrote queue broker-")
    assert first["reason"].endswith("until the route changes (apache/rocketmq #7779)")


def test_the_policies_add_rows_after_rocketmqs_own_and_change_none_of_them() -> None:
    """The shipped configuration (every policy on) against RocketMQ's rules alone, over the quick
    scenario: RocketMQ's own decisions and FaultItems are the same rows; the policies' rows come
    on top."""
    from streaming.config import engine_config, load_job_config

    shipped = engine_config(load_job_config(None))
    assert shipped.policies.decisions
    rules_only = dataclasses.replace(shipped, policies=engine.Policies())
    tables = {c: _run([QUICK], config) for c, config in (("on", shipped), ("off", rules_only))}
    policy = {"OUTLIER", "HOLD", "PANIC", "PROBE", "RELEASE", "QUEUE_SWAP"}

    def own(name: str, on: str) -> list[str]:
        rows = tables[on][name]
        return sorted(
            json.dumps(r, sort_keys=True) for r in rows if r.get("decision") not in policy
        )

    assert own("broker_decisions", "on") == own("broker_decisions", "off")
    assert own("fault_items", "on") == own("fault_items", "off")
    added = {r["decision"] for r in tables["on"]["broker_decisions"]} - {
        r["decision"] for r in tables["off"]["broker_decisions"]
    }
    assert {"PANIC", "PROBE", "RELEASE"} <= added


SIX = {"T": tuple((b, 4, 6) for b in "abcdef")}
"""Six brokers: the cap (half) lets three be isolated at once."""

_OUTLIER_FAILS = [
    *((100 if b == "a" and i else 0, b, "SEND_OK", 150 if b == "f" else 5)
      for i in range(22) for b in "abcdef"),
    (100, "f", "REMOTING_EXCEPTION", 5),
    (100, "a", "SEND_OK", 5),
]  # fmt: skip
"""``f`` slow for its peers: a latency outlier from the window's close at 2 s, which then fails
(a FaultTable isolation that ends before the outlier's)."""


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 300),  # ms after the last event
            st.sampled_from("abcdef"),
            st.sampled_from(["SEND_OK"] * 6 + ["REMOTING_EXCEPTION", "FLUSH_DISK_TIMEOUT"]),
            st.sampled_from([5, 5, 12, 12, 150, 700, 4_000]),  # ms: fast, slow to peers, bands
        ),
        min_size=1,
        max_size=120,
    ),
    st.integers(1, 6),
    st.sampled_from([0.25, None]),  # without probation a restored broker shows available
    st.sampled_from(["rocketmq-4.9", "rocketmq-5"]),  # 4.x: a fast answer ends an isolation
)
@example(_OUTLIER_FAILS, 1, None, "rocketmq-5")
@example(  # a fast answer ends the isolation at once (4.x), and no probation follows
    [(0, "a", "REMOTING_EXCEPTION", 5), (100, "a", "SEND_OK", 5)], 1, None, "rocketmq-4.9"
)
def test_a_point_judged_by_its_own_brokers_writes_what_the_whole_walk_writes(
    sends: list[tuple[int, str, str, int]], pieces: int, probe_share: float | None, profile: str
) -> None:
    """At most points only the brokers of their changes can want something new
    (``_Governor._local``): judging those alone must give the rows and the state that judging
    every broker gives, with every policy on, however the events are cut into batches."""
    events, t = [], 0
    for i, (gap, broker, outcome, latency) in enumerate(sends):
        t += gap
        events.append(send(f"e{i:03d}", t, broker, outcome=outcome, latency=latency))
    config = dataclasses.replace(
        CLUSTER_ONLY,
        static_routes=SIX,
        cluster_profile=profile,
        policies=engine.Policies(
            isolation_cap=0.5,
            outlier_factor=3.0,
            outlier_window_ms=2_000,
            probe_share=probe_share,
            probe_max_ms=1_000,
        ),
    )
    cut = len(events) // pieces + 1
    batches = [events[at : at + cut] for at in range(0, len(events), cut)]
    judged_alone = _run_with_state(batches, config)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_policies._Governor, "_local", lambda *_: None)
        assert _run_with_state(batches, config) == judged_alone
