from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pyarrow as pa

from udfs import engine
from udfs.schema import EVENTS, TABLES

T0 = 1_795_255_200_000  # 2026-11-21 10:00:00 UTC


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Events as the stateful step receives them from Spark."""
    full = []
    for row in rows:
        r = {
            "cluster": "c",
            "raw": json.dumps(row),
            "origin": "test",
            "ingest_ms": row["event_time"],  # as if published the moment it happened
            **row,
        }
        if "brokers" in r:
            r["brokers_json"] = json.dumps(r.pop("brokers"))
        full.append(r)
    return pa.Table.from_pylist(full, schema=EVENTS).to_pandas()


def send(
    eid: str, t: int, broker: str, outcome: str = "SEND_OK", latency: int = 10, **kw: Any
) -> dict[str, Any]:
    return {
        "kind": "send_result",
        "event_id": eid,
        "event_time": T0 + t,
        "producer_id": "p",
        "client_profile": "rocketmq-4.9",
        "topic": "T",
        "broker_name": broker,
        "queue_id": 0,
        "latency_ms": latency,
        "outcome": outcome,
        "attempt": 0,
        "max_attempts": 3,
        "mode": "SYNC",
        "message_id": f"m-{eid}",
        **kw,
    }


def beat(eid: str, t: int, broker: str) -> dict[str, Any]:
    return {"kind": "heartbeat", "event_id": eid, "event_time": T0 + t, "broker_name": broker}


def consume(eid: str, t: int, times: int, **kw: Any) -> dict[str, Any]:
    return {
        "kind": "consume_result",
        "event_id": eid,
        "event_time": T0 + t,
        "consumer_group": "cg",
        "topic": "T",
        "message_id": f"m-{eid}",
        "broker_name": "a",
        "queue_id": 1,
        "reconsume_times": times,
        "status": "RECONSUME_LATER",
        "delay_level": 0,
        **kw,
    }


def failed(eid: str, t: int, redelivery: int, **kw: Any) -> dict[str, Any]:
    """The last attempt of a message, after which the producer gives up."""
    return send(
        eid,
        t,
        "a",
        "REMOTING_EXCEPTION",
        attempt=2,
        redelivery_count=redelivery,
        producer_group="pg",
        **kw,
    )


def beats(until: int) -> list[dict[str, Any]]:
    """Heartbeats every 30 s up to ``until``: a quiet stream's clock moves with them."""
    return [beat(f"hb{t}", t, "a") for t in range(30_000, until, 30_000)] + [
        beat("hb-last", until, "a")
    ]


def route(eid: str, t: int, *brokers: str, queues: int = 2) -> dict[str, Any]:
    return {
        "kind": "route",
        "event_id": eid,
        "event_time": T0 + t,
        "topic": "T",
        "brokers": [{"broker_name": b, "write_queue_nums": queues, "perm": 6} for b in brokers],
    }


def run(
    rows: list[dict[str, Any]], config: engine.EngineConfig | None = None, state: Any = None
) -> engine.Step:
    return engine.advance("c", state, frame(rows), config or engine.EngineConfig())


NULLABLE = {pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype()}


def table(step: engine.Step, name: str) -> pd.DataFrame:
    """A table's rows of the step as pandas (nullable integers stay integers): empty, with the
    table's columns, when it got none."""
    rows = step.tables[name] if name in step.tables else TABLES[name].empty_table()
    return rows.to_pandas(types_mapper=NULLABLE.get)


def decisions(step: engine.Step, scope: str | None = None) -> list[tuple[str, str, str, int, int]]:
    if "broker_decisions" not in step.tables:
        return []
    d = table(step, "broker_decisions")
    if scope is not None:
        d = d[d["scope"] == scope]
    return sorted(
        (
            (
                r.scope_key,
                r.broker_name if isinstance(r.broker_name, str) else None,
                r.decision,
                r.effective_at - T0,
                r.available_from - T0,
            )
            for r in d.itertuples()
        ),
        key=lambda r: (r[0], r[1] or "", *r[2:]),  # an EVICTED row has no broker
    )
