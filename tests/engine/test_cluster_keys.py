"""The key records are shuffled by: each record's cluster exactly as the parser reads it."""

from __future__ import annotations

import json

from udfs.parse import cluster_keys, parse

T = 1_795_255_200_000
RECORDS = [
    json.dumps({"cluster": "east", "event_id": "a", "event_time": T}),
    json.dumps({"meta": {"cluster": "nested"}, "event_id": "b", "event_time": T}),  # no cluster
    json.dumps({"event_id": "c", "cluster": "w\u00e9st", "topic": "cluster"}),  # escaped text
    json.dumps({"cluster": 12, "event_id": "d"}),  # a number, read as its text
    json.dumps({"cluster": "east", "event_id": "e"}, indent=2),  # over several lines
    '{"cluster": "a", "cluster": "b"}',  # a field twice: not readable
    "not json",
    "",
    None,
]


def test_each_record_is_keyed_by_the_cluster_the_parser_reads() -> None:
    keys = cluster_keys(RECORDS).to_pylist()
    assert keys == ["east", "default", "wést", "12", "east", "default", "default", "default",
                    "default"]  # fmt: skip
    parsed = parse(RECORDS, [str(i) for i in range(len(RECORDS))], [0] * len(RECORDS))
    assert parsed.column("cluster").to_pylist()[:5] == keys[:5]


def test_a_batch_with_unreadable_records_keys_the_rest_in_bulk() -> None:
    good = [json.dumps({"cluster": f"c{i % 3}", "event_id": str(i)}) for i in range(2000)]
    values = [*good[:1000], "{broken", *good[1000:]]
    keys = cluster_keys(values).to_pylist()
    assert keys[1000] == "default"
    assert keys[:1000] + keys[1001:] == [f"c{i % 3}" for i in range(2000)]


def test_fuzzed_records_are_keyed_by_the_cluster_the_parser_reads() -> None:
    """Mutants of every kind, most of them read one by one: the key never differs from the
    parser's ``cluster`` (``default`` for a record it cannot read)."""
    from streaming.config import load_scenario
    from streaming.sim.fuzz import CORE, mixed_stream
    from streaming.sim.simulator import simulate

    records, labels = mixed_stream(simulate(load_scenario("quick")), 6000, CORE, 1000)
    assert len(set(labels)) > 10
    values = [r.decode("utf-8", "replace") for r in records]
    parsed = parse(values, [str(i) for i in range(len(values))], [0] * len(values))
    assert cluster_keys(values).to_pylist() == parsed.column("cluster").to_pylist()
