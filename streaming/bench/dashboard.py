"""How long the dashboard takes to read and draw a large output.

    python -m streaming.bench.dashboard [--rows 10000000] [--hours 24] [--brokers 16]

Writes a synthetic output folder (``fault_items`` with ``--rows`` rows in files of 50,000, half of
them in the cluster scope, spread over ``--hours`` of event time; decisions, routing decisions
and delay-queue rows in proportion), then prints: the first read of it, a refresh with nothing
new, a refresh after one more batch, and drawing every section of the page.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import plotly
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from streaming.job.sink import create_tables, own_schema, stored
from streaming.tools.dashboard.app import Page, View, sections
from udfs.schema import BATCHES
from udfs.vocabulary import Decision, TableName

T0 = 1_795_255_200_000
FILE_ROWS = 50_000


def _append(out: Path, name: str, columns: Mapping[str, Any], batch_id: int) -> None:
    schema = own_schema(name)
    n = len(next(iter(columns.values())))
    data = {f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in schema}
    data["batch_id"] = np.full(n, batch_id, dtype=np.int64)
    write_deltalake(str(out / name), stored(name, pa.table(data, schema=schema)), mode="append")


def write_batch(out: Path, batch_id: int, start: int, span: int, brokers: int, seed: int) -> int:
    """One batch's files: ``FILE_ROWS`` fault items between ``start`` and ``start + span``;
    returns the batch's clock."""
    rng = np.random.default_rng(seed)
    n = FILE_ROWS
    times = np.sort(rng.integers(start, start + span, n))
    broker = np.array([f"broker-{i:04d}" for i in range(brokers)])[rng.integers(0, brokers, n)]
    failed = rng.random(n) < 0.02
    latency = np.where(failed, 3_000, rng.lognormal(2.5, 0.8, n).astype(np.int64))
    outcome = np.where(failed, "REMOTING_EXCEPTION", "SEND_OK")
    scope = np.where(np.arange(n) % 2 == 0, "cluster", "producer")
    items = {
        "scope": scope,
        "scope_key": np.where(scope == "cluster", "BenchCluster", "p-1"),
        "cluster": np.full(n, "BenchCluster"),
        "broker_name": broker,
        "event_id": np.char.add("e", np.arange(n).astype(str)),
        "event_time": times,
        "latency_ms": latency,
        "outcome": outcome,
        "phase": np.full(n, "result"),
        "available_from": times,
        "not_available_ms": np.zeros(n, dtype=np.int64),
        "profile": np.full(n, "rocketmq-5"),
    }
    _append(out, TableName.FAULT_ITEMS, items, batch_id)
    f = np.flatnonzero(failed)
    decisions = {
        "scope": np.full(len(f), "cluster"),
        "scope_key": np.full(len(f), "BenchCluster"),
        "cluster": np.full(len(f), "BenchCluster"),
        "broker_name": broker[f],
        "decision": np.where(np.arange(len(f)) % 20 == 0, Decision.ISOLATE, Decision.EXTEND),
        "effective_at": times[f],
        "available_from": times[f] + 10_000,
        "reason": np.full(len(f), "REMOTING_EXCEPTION after 3 ms (isolation): not available"),
        "profile": np.full(len(f), "rocketmq-5"),
    }
    _append(out, TableName.BROKER_DECISIONS, decisions, batch_id)
    routing = {
        "scope": np.full(len(f), "cluster"),
        "cluster": np.full(len(f), "BenchCluster"),
        "decided_at": times[f],
        "failed_broker": broker[f],
        "selected_broker": broker[::-1][f],
        "rule": np.full(len(f), "available-not-last"),
    }
    _append(out, TableName.ROUTING_DECISIONS, routing, batch_id)
    entries = {
        "cluster": np.full(len(f), "BenchCluster"),
        "delay_level": np.full(len(f), 3, dtype=np.int32),
        "store_time": times[f],
        "deliver_at": times[f] + 10_000,
        "dlq": np.zeros(len(f), dtype=bool),
    }
    for name in (TableName.SCHEDULE_ENTRIES, TableName.REDELIVERIES):
        _append(out, name, entries, batch_id)
    clock = int(times[-1])
    row = {"batch_id": batch_id, "input": n, "clock": clock, "write_ms": 0, "commit_ms": 0}
    batch = pa.Table.from_pylist([row], schema=BATCHES)
    write_deltalake(str(out / TableName.BATCHES), stored(TableName.BATCHES, batch), mode="append")
    return clock


def _draw(page: Page, cluster: str) -> None:
    """Every section, serialized as Dash sends it to the browser."""
    json.dumps(sections(page, cluster, View()), cls=plotly.utils.PlotlyJSONEncoder)


def _timed(what: str, action: object) -> float:
    started = time.perf_counter()
    action()  # type: ignore[operator]
    seconds = time.perf_counter() - started
    print(f"{what:<45} {seconds:8.3f} s", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="fault_items rows")
    parser.add_argument("--hours", type=float, default=24.0, help="event time they cover")
    parser.add_argument("--brokers", type=int, default=16)
    parser.add_argument(
        "--out", help="write the folder here and keep it; one made before is used as it is"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        batches = max(args.rows // FILE_ROWS, 1)
        span = int(args.hours * 3_600_000 / batches)
        started = time.perf_counter()
        if not (out / TableName.BATCHES).is_dir():
            create_tables(out)
            for b in range(batches):
                write_batch(out, b, T0 + b * span, span, args.brokers, seed=b)
        batches = len(
            DeltaTable(str(out / TableName.BATCHES)).to_pyarrow_table(columns=["batch_id"])
        )
        print(
            f"wrote {batches * FILE_ROWS:,} fault_items rows in {batches} batches over "
            f"{args.hours:g} h, {args.brokers} brokers, in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        page = Page(out, window_ms=None)
        _timed("first read (starting the dashboard)", page.refresh)
        if page.problem:
            raise SystemExit(page.problem)
        cluster = page.model.clusters()[0]
        draw = _timed("drawing every section, as JSON", lambda: _draw(page, cluster))
        idle = _timed("refresh, nothing new", page.refresh)
        write_batch(out, batches, T0 + batches * span, span, args.brokers, seed=batches)
        new = _timed("refresh after one more 50,000-row batch", page.refresh)
        draw = _timed("drawing every section, as JSON", lambda: _draw(page, cluster))
        print(f"refresh with nothing new, read and drawn: {idle + draw:.3f} s")
        print(f"refresh after a new batch, read and drawn: {new + draw:.3f} s")


if __name__ == "__main__":
    main()
