"""The parser: typed events or a reason code for each record, in the order given, whichever path
(bulk or lenient) reads it."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pytest

import udfs.parse
from udfs.parse import cluster_keys, parse

T = 1_795_255_200_000
SEND = {"event_id": "s", "event_time": T, "producer_id": "p", "topic": "t", "broker_name": "b",
        "outcome": "SEND_OK", "latency_ms": 5}  # fmt: skip
ROUTE = {"kind": "route", "event_id": "r", "event_time": T, "topic": "t",
         "brokers": [{"broker_name": "a", "write_queue_nums": 2, "perm": 6}]}  # fmt: skip

CASES = [
    (json.dumps({**SEND, "extra": "x", "n": {"deep": [1]}}), None),
    (json.dumps({**SEND, "event_time": "2026-11-21T10:00:00Z", "latency_ms": " 7 "}), None),
    (json.dumps({"kind": "heartbeat", "event_id": "h", "event_time": T, "broker_name": "b"}), None),
    (json.dumps(ROUTE), None),
    (json.dumps({**SEND, "topic": 5, "latency_fault_enable": "TRUE"}), None),
    (json.dumps(SEND, indent=2), None),  # a record over several lines
    ("not json", "MALFORMED_JSON"),
    ("[1, 2]", "MALFORMED_JSON"),
    ("  ", "MALFORMED_JSON"),
    (None, "MALFORMED_JSON"),
    (json.dumps(SEND) + " " + json.dumps(SEND), "MALFORMED_JSON"),  # two objects on a line
    ('{"event_id": "a", "event_id": "b"}', "MALFORMED_JSON"),  # a field twice
    (json.dumps({**SEND, "latency_ms": "fast"}), "WRONG_TYPE"),
    (json.dumps({**SEND, "latency_ms": 1.5}), "WRONG_TYPE"),
    (json.dumps({**SEND, "event_id": {"a": 1}}), "WRONG_TYPE"),
    (json.dumps({**SEND, "latency_fault_enable": "maybe"}), "WRONG_TYPE"),
    (json.dumps({**SEND, "queue_id": 2**31}), "WRONG_TYPE"),  # queue_id holds 32 bits
    (json.dumps({**SEND, "event_time": "yesterday"}), "WRONG_TYPE"),
    (json.dumps({**ROUTE, "brokers": {"broker_name": "a"}}), "WRONG_TYPE"),
    (json.dumps({k: v for k, v in SEND.items() if k != "event_id"}), "MISSING_FIELD"),
    (json.dumps({k: v for k, v in SEND.items() if k != "outcome"}), "MISSING_FIELD"),
    (json.dumps({**SEND, "kind": "gossip"}), "UNKNOWN_KIND"),
    (json.dumps({**SEND, "event_time": 99_999_999_999_999}), "EVENT_TIME_OUT_OF_RANGE"),
    (json.dumps({**SEND, "latency_ms": -1}), "NEGATIVE_LATENCY"),
    (json.dumps({**SEND, "outcome": "MAYBE"}), "UNKNOWN_OUTCOME"),
    (json.dumps({**SEND, "client_profile": "rocketmq-3"}), "UNKNOWN_PROFILE"),
    (json.dumps({**SEND, "mode": "BATCH"}), "UNKNOWN_MODE"),
    (json.dumps({"kind": "consume_result", "event_id": "c", "event_time": T, "consumer_group": "g",
                 "topic": "t", "message_id": "m", "status": "MAYBE"}), "UNKNOWN_STATUS"),
    (json.dumps({**SEND, "attempt": 3, "max_attempts": 3}), "INVALID_VALUE"),
    (json.dumps({**ROUTE, "brokers": [{"write_queue_nums": 2}]}), "INVALID_ROUTE"),
]  # fmt: skip


@pytest.mark.parametrize("padding", [0, 3000], ids=["alone", "among-good-records"])
def test_each_record_is_typed_or_gets_a_reason(padding: int) -> None:
    """``padding`` good records around each case make the bulk reader fail on a large chunk, so
    the case is found and read on its own; the order of the records is kept."""
    good = [json.dumps({**SEND, "event_id": f"g{i}"}) for i in range(padding)]
    values = [v for text, _ in CASES for v in (*good[: padding // len(CASES)], text)]
    rows = parse(values, [f"o{i}" for i in range(len(values))], [0] * len(values)).to_pylist()
    assert [r["raw"] for r in rows] == values
    cases = [r for r in rows if not (r["raw"] or "").startswith('{"event_id": "g')]
    for (text, code), row in zip(CASES, cases, strict=True):
        assert row["reason_code"] == code, (text, row["reason"])
        assert (row["reason"] is None) == (code is None)
    assert all(r["reason_code"] is None for r in rows if r not in cases)
    first, iso, _, route, texts, lines = cases[:6]
    assert (first["kind"], first["cluster"], first["latency_ms"]) == ("send_result", "default", 5)
    assert (iso["event_time"], iso["latency_ms"]) == (T, 7)
    assert json.loads(route["brokers_json"]) == ROUTE["brokers"]
    assert (texts["topic"], texts["latency_fault_enable"]) == ("5", True)
    assert lines["event_id"] == "s"


def test_reasons_name_the_fields_and_values() -> None:
    values = [
        json.dumps({**SEND, "latency_ms": "x", "queue_id": [1], "attempt": "1.5"}),
        json.dumps({"kind": "send_result", "event_id": "m"}),
        json.dumps({**SEND, "outcome": "MAYBE"}),
    ]
    reasons = parse(values, ["a", "b", "c"], [0, 0, 0]).column("reason").to_pylist()
    assert reasons == [
        "wrong type for queue_id, latency_ms, attempt",
        "missing event_time, producer_id, topic, broker_name, outcome, latency_ms",
        "outcome MAYBE is not a RocketMQ send outcome",
    ]


def test_records_deleted_before_they_were_read_are_data_loss() -> None:
    table = parse([float("nan"), json.dumps(SEND)], ["t/0/5", "t/0/9"], [0, 0], lost=[4, None])
    assert table.column("reason_code").to_pylist() == ["DATA_LOSS", None]
    assert table.column("reason").to_pylist()[0] == (
        "4 records at t/0/5 were deleted (retention) before they were read; failOnDataLoss=false"
    )


def test_pandas_columns_of_several_chunks_read_as_lists_do() -> None:
    """The operator hands over Spark's record batches as pandas columns concatenated, each of
    several Arrow chunks: the parser reads them in Arrow, to the same rows as from lists."""
    values = [text for text, _ in CASES]
    origins = [f"o{i}" for i in range(len(values))]
    ingest = [0] * len(values)
    half = len(values) // 2
    frames = [
        pd.DataFrame({"value": values[a:b], "origin": origins[a:b], "ingest_ms": ingest[a:b]})
        for a, b in ((0, half), (half, len(values)))
    ]
    raw = pd.concat(frames, ignore_index=True)
    assert isinstance(pa.array(raw["value"]), pa.ChunkedArray)
    expected = parse(values, origins, ingest).to_pylist()
    assert parse(raw["value"], raw["origin"], raw["ingest_ms"]).to_pylist() == expected


# --- found by fuzzing (streaming/fuzz.py): each case alone (bulk) and beside a malformed record
# (lenient), with the same reason on both paths

FUZZED = [
    ("null", "MALFORMED_JSON"),  # Arrow's reader crashed the process on a bare null
    (" null", "MALFORMED_JSON"),
    ('""', "MALFORMED_JSON"),
    (json.dumps({**SEND, "x": 1})[:-1] + ', "x": 2}', None),  # an ignored field twice
    (json.dumps({**SEND, "x": {"a": 1}})[:-2] + ', "a": 2}}', None),  # twice, nested
    (json.dumps({**SEND, "x": 1})[:-1] + ', "topic": "u"}', "MALFORMED_JSON"),  # typed twice
    (json.dumps({**SEND})[:-1] + ', "x": ' + "[" * 5000 + "]" * 5000 + "}", None),  # deep
    (json.dumps({**SEND})[:-1] + ', "x": ' + '{"a":' * 3000 + "1" + "}" * 3001, None),
    (json.dumps({**SEND, "topic": 1})[:-2] + "[" * 5000 + "]" * 5000 + "}", "MALFORMED_JSON"),
    (json.dumps({**SEND, "queue_id": 1})[:-2] + "9" * 5000 + "}", "WRONG_TYPE"),
    (json.dumps({**SEND, "event_time": 1})[:-2] + "1" * 5000 + "}", "WRONG_TYPE"),
    (json.dumps({**SEND, "event_id": "\ud800"}), "MALFORMED_JSON"),  # a lone surrogate
    (json.dumps({**SEND, "\ud800": "\udfff"}), None),  # ... in an ignored field
    (json.dumps({**ROUTE, "brokers": [None]}), "WRONG_TYPE"),
    (json.dumps({**ROUTE, "brokers": [{"broker_name": "\udc00", "write_queue_nums": 1}]}),
     "WRONG_TYPE"),
    (json.dumps({**ROUTE, "brokers": [{"broker_name": "a", "write_queue_nums": "9" * 5000}]}),
     "WRONG_TYPE"),
    (json.dumps({**SEND, "event_id": ""}), "MISSING_FIELD"),  # an empty id names no event
    (json.dumps({**SEND, "broker_name": ""}), "MISSING_FIELD"),
    (json.dumps({**SEND, "producer_group": ""}), None),  # optional: empty is a value
]  # fmt: skip


@pytest.mark.parametrize(("text", "code"), FUZZED, ids=range(len(FUZZED)))
@pytest.mark.parametrize("neighbour", [None, "{"], ids=["bulk", "lenient"])
def test_fuzzed_records_get_the_same_reason_on_both_paths(
    text: str, code: str | None, neighbour: str | None
) -> None:
    values = [text] if neighbour is None else [text, neighbour]
    rows = parse(values, ["o"] * len(values), [0] * len(values)).to_pylist()
    assert rows[0]["reason_code"] == code, rows[0]["reason"]


def test_a_batch_of_mostly_bad_records_reads_its_good_ones_in_bulk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every chunk of this batch holds records the bulk reader refuses; the good records are
    still read in bulk (the lenient path costs ten times as much per record), and every record
    gets the row, and the shuffle key, it gets alone."""
    others = [text for text, _ in (*CASES, *FUZZED) if text is not None]
    values = []
    for i in range(3 * len(others)):
        values += [json.dumps({**SEND, "event_id": f"g{i}"}), others[i % len(others)]]
    read_alone = udfs.parse._read_one
    lenient: list[str | None] = []
    monkeypatch.setattr(udfs.parse, "_read_one", lambda t: lenient.append(t) or read_alone(t))
    rows = parse(values, ["o"] * len(values), [0] * len(values)).to_pylist()
    assert not [t for t in lenient if t is not None and t.startswith('{"event_id": "g')]
    assert all(r["reason_code"] is None for r in rows[::2])
    alone = {t: parse([t], ["o"], [0]).to_pylist()[0] for t in others}
    assert rows[1::2] == [alone[t] for t in values[1::2]]

    key_alone = udfs.parse._cluster_of
    lenient.clear()
    monkeypatch.setattr(udfs.parse, "_cluster_of", lambda t: lenient.append(t) or key_alone(t))
    keys = cluster_keys(values).to_pylist()
    assert not [t for t in lenient if t.startswith('{"event_id": "g')]
    assert keys == [cluster_keys([t]).to_pylist()[0] for t in values]
