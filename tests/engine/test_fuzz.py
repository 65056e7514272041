"""Fuzzed records mixed into a valid stream never stop the engine: every record is applied, late,
a duplicate or quarantined, and each batch's counts add up."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from streaming.config import load_scenario
from streaming.sim.simulator import simulate
from udfs import engine
from udfs.parse import parse

VALID = simulate(load_scenario("quick"))
KEYS = sorted({k for e in VALID for k in e})
WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.just("x" * 100_000),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
KINDS = ("set", "set", "drop", "extra", "repeat", "truncate", "garbage", "many")


def _mutated(event: dict[str, Any], rng: random.Random, weird: list[Any]) -> str:
    e = dict(event)
    kind = rng.choice(KINDS)
    if kind == "set":
        e[rng.choice(KEYS)] = rng.choice(weird)
    elif kind == "drop":
        e.pop(rng.choice(KEYS), None)
    elif kind == "extra":
        e[f"extra_{rng.randrange(4)}"] = rng.choice(weird)
    elif kind == "repeat":  # another event's id: a duplicate, with other content
        e["event_id"] = rng.choice(VALID)["event_id"]
    elif kind == "truncate":
        text = json.dumps(e)
        return text[: rng.randrange(len(text))]
    elif kind == "garbage":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(40))).decode("latin-1")
    else:
        for key in rng.sample(KEYS, 3):
            e[key] = rng.choice(weird)
    return json.dumps(e, allow_nan=True)


@seed(20261122)
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.integers(0, 2**32), st.lists(WEIRD, min_size=1, max_size=20))
def test_fuzzed_records_are_each_accounted_for_and_never_stop_the_engine(
    mutations_seed: int, weird: list[Any]
) -> None:
    """About one fuzzed record for each valid one: random mutations of valid events (wrong
    types, missing and extra fields, huge strings and numbers, NaN and infinities, repeated ids,
    truncated JSON, binary garbage), with values that hypothesis draws."""
    rng = random.Random(mutations_seed)
    values = []
    for e in VALID:
        values.append(json.dumps(e))
        if rng.random() < 0.5:
            values.append(_mutated(e, rng, weird))
    state: engine.State | None = None
    counted = 0
    for begin in range(0, len(values), 700):
        chunk = values[begin : begin + 700]
        ingest = [VALID[min(begin // 2, len(VALID) - 1)]["event_time"]] * len(chunk)
        frame = parse(chunk, ["fuzz"] * len(chunk), ingest).to_pandas()
        step = engine.advance("QuickCluster", state, frame, engine.EngineConfig())
        state = engine.loads(engine.dumps(step.state))  # as Spark stores it
        s = step.stats
        assert s["input"] == len(chunk)
        assert s["input"] == s["valid"] + s["quarantined"] + s["late"] + s["duplicates"], s
        quarantined = step.tables.get("quarantine")
        assert (0 if quarantined is None else len(quarantined)) == s["quarantined"]
        counted += s["input"]
    assert counted == len(values)


def test_any_character_in_a_producer_or_broker_name() -> None:
    """Found by the test above: names were joined with a separator character to pair them."""
    from tests.engine.conftest import frame, send

    events = [
        send("e1", 1_000, "b\x1fx", "REMOTING_EXCEPTION", producer_id="p\x1fq"),
        send("e2", 2_000, "\x1f", producer_id="\x1f"),
    ]
    step = engine.advance("c", None, frame(events), engine.EngineConfig())
    items = step.tables["fault_items"].to_pylist()
    assert {(r["scope_key"], r["broker_name"]) for r in items if r["scope"] == "producer"} == {
        ("p\x1fq", "b\x1fx"),
        ("\x1f", "\x1f"),
    }


def _outcome(*batches: list[dict[str, Any]]) -> tuple[list[dict[str, int]], dict[str, list[Any]]]:
    """Each batch's counts, and the rows of every table, over ``batches`` applied in turn."""
    from tests.engine.conftest import frame

    state: engine.State | None = None
    stats: list[dict[str, int]] = []
    rows: dict[str, list[Any]] = {}
    for events in batches:
        step = engine.advance("c", state, frame(events), engine.EngineConfig())
        state = engine.loads(engine.dumps(step.state))
        stats.append({k: step.stats[k] for k in ("valid", "duplicates", "late", "quarantined")})
        for name, t in step.tables.items():
            rows.setdefault(name, []).extend(t.to_pylist())
    return stats, rows


def test_a_repeated_event_id_with_other_content_is_a_duplicate_wherever_it_comes() -> None:
    """A record that reuses an applied event's ``event_id`` with another kind or other fields:
    the first by (event_time, event_id, record text) is applied, the other is a duplicate, in
    one batch or across two, before or after the original, in either order."""
    from tests.engine.conftest import beat, send

    failure = send("e1", 1_000, "a", "REMOTING_EXCEPTION", latency=20)
    later = beat("e1", 2_000, "b")  # same id, another kind, later
    earlier = {**send("e1", 500, "b", latency=7), "producer_id": "q"}  # same id, earlier
    same_time = {**failure, "broker_name": "b", "outcome": "SEND_OK"}  # same id and time
    one = {"valid": 1, "duplicates": 1, "late": 0, "quarantined": 0}
    single = {"valid": 1, "duplicates": 0, "late": 0, "quarantined": 0}
    dup = {"valid": 0, "duplicates": 1, "late": 0, "quarantined": 0}

    stats, rows = _outcome([failure, later])
    assert stats == [one] and "heartbeats" not in rows
    assert {r["broker_name"] for r in rows["fault_items"]} == {"a"}
    for batches in ([[later, failure]], [[failure], [later]]):
        assert _outcome(*batches)[1] == rows
    stats, after = _outcome([failure], [later])
    assert "heartbeats" not in after
    assert stats == [single, dup]

    stats, rows = _outcome([failure, earlier])  # the earlier one is applied, in any order
    assert stats == [one]
    assert {(r["scope_key"], r["broker_name"]) for r in rows["fault_items"]} == {
        ("c", "b"),
        ("q", "b"),
    }
    assert _outcome([earlier, failure])[1] == rows
    stats, _ = _outcome([earlier], [failure])
    assert stats == [single, dup]
    stats, before = _outcome([failure], [earlier])  # came second: a duplicate though earlier
    assert stats == [single, dup] and {r["broker_name"] for r in before["fault_items"]} == {"a"}

    stats, rows = _outcome([failure, same_time])  # same time: the record text decides
    assert stats == [one] and _outcome([same_time, failure])[1] == rows
    assert len({r["broker_name"] for r in rows["fault_items"]}) == 1


def test_a_rejected_record_with_a_null_number_changes_no_decision() -> None:
    """Found by the job's fuzz test: a quarantined record without an ``event_time`` made pandas
    read the batch's times as floats, and the seed of a producer's queue index, which names
    the event's time, changed with it."""
    from tests.engine.conftest import T0, frame, route, send

    events = [
        route("r", 0, "a", "b", "c"),
        send("s1", 1_000, "a", "REMOTING_EXCEPTION", latency=20),
        send("s2", 2_000, "b", "REMOTING_EXCEPTION", latency=20),
    ]
    rejected = {"event_id": "bad", "event_time": None, "queue_id": None,
                "reason_code": "MISSING_FIELD", "reason": "missing event_time"}  # fmt: skip
    alone = engine.advance("c", None, frame(events), engine.EngineConfig())
    mixed = engine.advance("c", None, frame([*events, rejected]), engine.EngineConfig())
    assert mixed.stats["quarantined"] == 1 and mixed.stats["valid"] == alone.stats["valid"] == 3
    decided = alone.tables["routing_decisions"].to_pylist()
    assert len(decided) == 4 and {r["decided_at"] for r in decided} == {T0 + 1_000, T0 + 2_000}
    assert mixed.tables["routing_decisions"].to_pylist() == decided
