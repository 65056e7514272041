"""The per-cluster state machine, without Spark."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.engine.conftest import T0, beat, decisions, route, run, send, table
from udfs import engine
from udfs.engine._nameserver import _View
from udfs.rocketmq import PROFILES, FaultTable

CLUSTER_5 = engine.EngineConfig(scopes=("cluster",))
PRODUCER = engine.EngineConfig(scopes=("producer",))


@pytest.mark.parametrize(
    ("profile", "until"),
    [("rocketmq-4.7", 601_000), ("rocketmq-4.9", 601_000), ("rocketmq-5", 11_000)],
)
def test_remoting_exception_isolates_for_the_profile_and_restores_on_the_clock(
    profile: str, until: int
) -> None:
    step = run(
        [
            send("s1", 1000, "b", "REMOTING_EXCEPTION", 0, client_profile=profile),
            beat("h1", 700_000, "a"),
        ],
        PRODUCER,
    )
    assert decisions(step) == [
        ("p", "b", "ISOLATE", 1000, until),
        ("p", "b", "RESTORE", until, until),
    ]


def test_restore_waits_for_the_clock_across_batches() -> None:
    first = run(
        [send("s1", 1000, "b", "REMOTING_EXCEPTION", 0, client_profile="rocketmq-5")], PRODUCER
    )
    assert decisions(first) == [("p", "b", "ISOLATE", 1000, 11_000)]
    second = run([beat("h1", 10_999, "a")], PRODUCER, first.state)
    assert decisions(second) == []
    third = run([beat("h2", 11_000, "a")], PRODUCER, second.state)
    assert decisions(third) == [("p", "b", "RESTORE", 11_000, 11_000)]


def test_4x_fast_success_clears_the_isolation_at_once_but_5x_keeps_it() -> None:
    rows = [send("s1", 1000, "b", latency=600), send("s2", 2000, "b", latency=10)]
    four = run(rows, PRODUCER)
    assert decisions(four) == [
        ("p", "b", "ISOLATE", 1000, 31_000),
        ("p", "b", "RESTORE", 2000, 2000),
    ]
    five = run(
        [{**r, "client_profile": "rocketmq-5"} for r in rows] + [beat("h", 9000, "a")], PRODUCER
    )
    assert decisions(five) == [("p", "b", "ISOLATE", 1000, 3000), ("p", "b", "RESTORE", 3000, 3000)]


def test_5x_extends_and_4x_shortens() -> None:
    rows = [send("s1", 1000, "b", latency=3000), send("s2", 2000, "b", latency=600)]
    four = decisions(run(rows, PRODUCER))
    assert ("p", "b", "SHORTEN", 2000, 32_000) in four
    rows5 = [
        send("s1", 1000, "b", latency=600, client_profile="rocketmq-5"),
        send("s2", 2000, "b", latency=3000, client_profile="rocketmq-5"),
    ]
    assert ("p", "b", "EXTEND", 2000, 8000) in decisions(run(rows5, PRODUCER))


def test_switch_off_producers_have_no_table_but_feed_the_cluster_view() -> None:
    step = run([send("s1", 1000, "b", "REMOTING_EXCEPTION", 0, latency_fault_enable=False)])
    assert decisions(step, "producer") == []
    assert decisions(step, "cluster") == [("c", "b", "ISOLATE", 1000, 11_000)]


def test_fault_items_one_row_per_update_per_scope() -> None:
    step = run([send("s1", 1000, "a"), send("s2", 1001, "b", "REMOTING_EXCEPTION", 0)])
    items = table(step, "fault_items")
    assert sorted(
        zip(items["scope"], items["event_id"], items["not_available_ms"], strict=True)
    ) == [
        ("cluster", "s1", 0),
        ("cluster", "s2", 10_000),
        ("producer", "s1", 0),
        ("producer", "s2", 600_000),
    ]


def test_async_reports_the_dispatch_first() -> None:
    step = run([send("s1", 1000, "b", latency=250, mode="ASYNC")], PRODUCER)
    items = table(step, "fault_items").sort_values("event_time")
    assert list(
        zip(items["phase"], items["event_time"] - T0, items["latency_ms"], strict=True)
    ) == [
        ("dispatch", 1000, 0),
        ("result", 1000, 250),
    ]


def test_an_older_update_is_stale_and_ignored() -> None:
    first = run([send("s2", 5000, "b", "REMOTING_EXCEPTION", 0)], PRODUCER)
    second = run([send("s1", 4000, "b")], PRODUCER, first.state)
    assert second.stats["stale"] == 1
    assert "fault_items" not in second.tables
    assert second.stats["valid"] == 1  # a valid event, just older than what the table holds


def test_route_expiry_follows_the_nameserver_scan() -> None:
    # last heartbeat at +1 s: expired at the first 10 s scan after +121 s, i.e. +130 s
    step = run(
        [
            beat("h1", 1000, "x"),
            beat("h2", 125_000, "y"),
            beat("h3", 131_000, "y"),
            beat("h4", 140_000, "x"),
        ],
        CLUSTER_5,
    )
    assert decisions(step) == [
        ("c", "x", "ROUTE_EXPIRED", 130_000, 130_000),
        ("c", "x", "ROUTE_RESTORED", 140_000, 140_000),
    ]


def test_scans_due_together_drop_their_brokers_in_time_order() -> None:
    """y's scan (+130 s) is due before x's (+150 s) though x sorts first, and one event (+200 s)
    brings both: the routing table drops y at +130 s, then x at +150 s."""
    step = run(
        [
            route("r", 0, "x", "y", "z"),
            beat("hy", 0, "y"),
            beat("hz1", 0, "z"),
            beat("hx", 20_000, "x"),
            beat("hz2", 100_000, "z"),
            beat("hz3", 200_000, "z"),
        ],
        CLUSTER_5,
    )
    rows = table(step, "routing_table")
    brokers = [
        (r.effective_at - T0, sorted({q["broker_name"] for q in r.selectable}))
        for r in rows.sort_values("effective_at").itertuples()
    ]
    assert brokers == [(0, ["x", "y", "z"]), (130_000, ["x", "z"]), (150_000, ["z"])]


def test_routing_decisions_only_for_failed_attempts_with_attempts_left() -> None:
    step = run(
        [
            route("r", 0, "a", "b"),
            send("s1", 1000, "a", "REMOTING_EXCEPTION", 0, attempt=0),
            send("s2", 1001, "a", "REMOTING_EXCEPTION", 0, attempt=2),
            send("s3", 1002, "a", "BROKER_EXCEPTION", 0, response_code=25),
            send("s4", 1003, "a"),
        ]
    )
    rows = table(step, "routing_decisions")
    assert sorted(
        zip(rows["event_id"], rows["scope"], rows["selected_broker"], rows["rule"], strict=True)
    ) == [
        ("s1", "cluster", "b", "available-not-last"),
        ("s1", "producer", "b", "available"),
    ]


def test_4_7_equals_quirk_shows_in_routing_decisions() -> None:
    step = run(
        [
            route("r", 0, "a", "b"),
            send("s1", 1000, "a", "REMOTING_EXCEPTION", 0, client_profile="rocketmq-4.7"),
        ],
        PRODUCER,
    )
    row = table(step, "routing_decisions").iloc[0]
    # a is isolated and is the last broker; 4.7.1 accepts only the last broker, so it ends up
    # rewriting a queue to a via pickOneAtLeast
    assert (row["selected_broker"], row["rule"], row["rewritten"]) == (
        "a",
        "pick-one-at-least",
        True,
    )


def test_routing_table_changes() -> None:
    step = run(
        [
            route("r", 0, "a", "b", queues=1),
            send("s1", 1000, "a", "REMOTING_EXCEPTION", 0),
            beat("h", 20_000, "b"),
        ],
        CLUSTER_5,
    )
    rows = table(step, "routing_table").sort_values("effective_at")
    assert [
        (t - T0, [q["broker_name"] for q in s], [i["broker_name"] for i in iso])
        for t, s, iso in zip(
            rows["effective_at"], rows["selectable"], rows["isolated"], strict=True
        )
    ] == [
        (0, ["a", "b"], []),
        (1000, ["b"], ["a"]),
        (11_000, ["a", "b"], []),
    ]


def test_rejected_records_go_to_quarantine_untouched() -> None:
    step = run(
        [
            {**beat("h", 0, "a"), "reason_code": "WRONG_TYPE", "reason": "wrong type for x"},
            beat("h2", 1, "a"),
        ]
    )
    q = table(step, "quarantine")
    assert list(q["reason_code"]) == ["WRONG_TYPE"] and step.stats["quarantined"] == 1
    assert step.stats["valid"] == 1


def test_state_from_another_version_is_refused() -> None:
    with pytest.raises(ValueError, match="state schema version"):
        engine.loads('{"v": 0}')


def test_the_stored_isolations_are_named_with_their_end_and_cause() -> None:
    step = run([send("s1", 1000, "b", "REMOTING_EXCEPTION", 0)])
    assert engine.isolations(step.state, "cluster") == [
        engine.Isolation("c", "b", T0 + 1000 + 10_000, "s1")
    ]
    assert engine.isolations(step.state, "producer") == [
        engine.Isolation("p", "b", T0 + 1000 + 600_000, "s1")  # 4.9: 600 s for an exception
    ]


def test_every_applied_heartbeat_is_a_row() -> None:
    step = run([beat("h1", 1000, "x"), beat("h2", 2000, "y"), beat("h1", 1000, "x")], CLUSTER_5)
    rows = table(step, "heartbeats")
    assert sorted(zip(rows["broker_name"], rows["event_time"] - T0, strict=True)) == [
        ("x", 1000),
        ("y", 2000),
    ]  # the repeated one is a duplicate


def test_a_late_heartbeat_brings_a_dropped_broker_back() -> None:
    """x is dropped at the +130 s scan; a heartbeat of it from +129.5 s arrives in the next
    batch: within the allowed lateness, it brings x back."""
    first = run(
        [beat("x1", 1000, "x"), *(beat(f"y{t}", t, "y") for t in (60_000, 135_000))], CLUSTER_5
    )
    assert decisions(first) == [("c", "x", "ROUTE_EXPIRED", 130_000, 130_000)]
    second = run([beat("x2", 129_500, "x"), beat("y2", 140_000, "y")], CLUSTER_5, first.state)
    assert decisions(second) == [("c", "x", "ROUTE_RESTORED", 129_500, 129_500)]


@pytest.mark.parametrize("seed", range(6))
def test_heartbeats_applied_at_once_give_what_one_at_a_time_gives(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeats of a broker that no scan drops in a batch are applied at once
    (``_View.quiet``): the same rows and state as one at a time, batch after batch, on brokers
    that beat every few seconds, some with gaps past the timeout, in batches that end before,
    across and after their scans, some heartbeats after later ones."""
    rng = random.Random(seed)
    events, gaps = [], {"a": 30_000, "b": 45_000, "c": 100_000, "d": 200_000}
    for broker, gap in gaps.items():
        t = rng.randrange(0, 20_000)
        while t < 900_000:
            events.append(beat(f"{broker}{t}", t, broker))
            t += rng.randrange(gap // 2, gap * 3 // 2)
    events.sort(key=lambda e: e["event_time"] + rng.randrange(0, 40_000))  # some arrive late
    cuts = sorted(rng.sample(range(1, len(events)), 6))
    batches = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]
    config = engine.EngineConfig(scopes=("cluster",))

    def replayed() -> tuple[list[dict[str, list[object]]], str]:
        state, rows = None, []
        for batch in batches:
            step = run(batch, config, state)
            rows.append({name: t.to_pylist() for name, t in sorted(step.tables.items())})
            state = engine.loads(engine.dumps(step.state))
        return rows, engine.dumps(state)

    quiet, original = [], _View.quiet
    monkeypatch.setattr(_View, "quiet", lambda *a: quiet.append(original(*a)) or quiet[-1])
    at_once = replayed()
    monkeypatch.setattr(_View, "quiet", lambda view, events, beats, end: np.zeros(len(beats), bool))
    assert replayed() == at_once
    applied = np.concatenate(quiet)
    assert applied.any() and not applied.all()  # some heartbeats were applied at once, some not


@pytest.mark.parametrize("retry", [False, True])
def test_brokers_join_a_table_in_the_order_rocketmq_iterates_it(retry: bool) -> None:
    """30 brokers met for the first time in one batch (the map resizes at 24) are stored in the
    iteration order of RocketMQ's ConcurrentHashMap after the same updates, whether or not a
    routing decision read the table in the batch."""
    brokers = [f"b-{i * 7 % 30:02d}" for i in range(30)]
    rows = [send(f"e{i:02d}", 1000 * i, b) for i, b in enumerate(brokers)]
    if retry:  # a failed attempt with attempts left: the decision reads the table
        rows[3] = send("e03", 3000, brokers[3], "REMOTING_EXCEPTION", attempt=0, max_attempts=3)
    state = run(rows).state
    core = FaultTable(PROFILES["rocketmq-4.9"], rng=random.Random(0))
    for i, b in enumerate(brokers):
        core.update(b, 10, 0, T0 + 1000 * i)
    stored = state.tables[engine.PRODUCER]["p"]
    assert [it.broker for it in stored.items] == [it.name for it in core]
    assert [it.broker for it in stored.items] != sorted(brokers) != brokers
    assert stored.cap == 64
