"""The parser on the real Spark (batch mode): typed events or a reason code for each record."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from streaming.parse import parse_events

pytestmark = pytest.mark.spark

T = 1_795_255_200_000
SEND = {"event_id": "s", "event_time": T, "producer_id": "p", "topic": "t", "broker_name": "b",
        "outcome": "SEND_OK", "latency_ms": 5}  # fmt: skip


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
        .config("spark.sql.constraintPropagation.enabled", "false").getOrCreate()
    )  # fmt: skip
    yield session
    session.stop()


CASES = [
    (json.dumps({**SEND, "extra": "x", "n": 3}), None),
    (json.dumps({**SEND, "event_time": "2026-11-21T10:00:00Z", "latency_ms": "7"}), None),
    (json.dumps({"kind": "heartbeat", "event_id": "h", "event_time": T, "broker_name": "b"}), None),
    (json.dumps({"kind": "route", "event_id": "r", "event_time": T, "topic": "t",
                 "brokers": [{"broker_name": "a", "write_queue_nums": 2, "perm": 6}]}), None),
    ("not json", "MALFORMED_JSON"),
    ("[1, 2]", "MALFORMED_JSON"),
    ("  ", "MALFORMED_JSON"),
    (json.dumps({**SEND, "latency_ms": "fast"}), "WRONG_TYPE"),
    (json.dumps({**SEND, "latency_ms": 1.5}), "WRONG_TYPE"),
    (json.dumps({**SEND, "event_id": {"a": 1}}), "WRONG_TYPE"),
    (json.dumps({**SEND, "latency_fault_enable": "maybe"}), "WRONG_TYPE"),
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
    (json.dumps({"kind": "route", "event_id": "r", "event_time": T, "topic": "t",
                 "brokers": [{"write_queue_nums": 2}]}), "INVALID_ROUTE"),
]  # fmt: skip


def test_each_record_is_typed_or_gets_a_reason(spark: Any) -> None:
    raw = spark.createDataFrame(
        [(text, f"f:{i}", 0) for i, (text, _) in enumerate(CASES)],
        "value string, origin string, ingest_ms bigint",
    )
    rows = {r["origin"]: r for r in parse_events(raw, properties=True).collect()}
    for i, (text, code) in enumerate(CASES):
        row = rows[f"f:{i}"]
        assert row["reason_code"] == code, (text, row["reason"])
        assert row["raw"] == text
        assert (row["reason"] is None) == (code is None)
    first, iso = rows["f:0"], rows["f:1"]
    assert (first["kind"], first["cluster"], first["latency_ms"]) == ("send_result", "default", 5)
    assert dict(first["properties"]) == {"extra": "x"}  # unknown string fields only
    assert (iso["event_time"], iso["latency_ms"]) == (T, 7)
    assert json.loads(rows["f:3"]["brokers_json"])[0]["broker_name"] == "a"
