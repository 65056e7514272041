"""The Delta sink: exactly once per micro-batch across every table, with delta-rs.

The stateful operator's tasks write each table's rows to Parquet files under the table's folder
and return only the files' metadata; the driver then commits each table's new files as one Delta
commit carrying an app transaction ``(app_id, batch_id)``. A replayed batch whose commit already
happened (``transaction_version(app_id) >= batch_id``) is skipped and its new files deleted, so a
crash anywhere gives no duplicate and no missing row. The ``batches`` table is committed last.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from streaming import failpoints
from streaming.client import message, publish_order
from udfs.schema import BATCHES, TABLE_FORMAT, TABLES

META = pa.schema(
    [
        ("table", pa.string()),
        ("path", pa.string()),
        ("size", pa.int64()),
        ("records", pa.int64()),
        ("input", pa.int64()),
        ("valid", pa.int64()),
        ("late", pa.int64()),
        ("quarantined", pa.int64()),
        ("duplicates", pa.int64()),
        ("stale", pa.int64()),
        ("clock", pa.int64()),
        ("receive_ms", pa.int64()),
        ("parse_ms", pa.int64()),
        ("engine_ms", pa.int64()),
        ("files_ms", pa.int64()),
        ("state_bytes", pa.int64()),
        ("task", pa.int64()),
        ("stats", pa.string()),
    ]
)
"""What a task reports to the driver: a file it wrote (``table``, ``path``, ``size``,
``records``, ``stats``: its Delta statistics), or with ``table`` null, its counters and timings
for one cluster."""


def table_schema(name: str) -> pa.Schema:
    """A table's Delta schema: its columns plus ``batch_id``."""
    return TABLES[name].append(pa.field("batch_id", pa.int64()))


DESCRIPTION = f"faultline table format {TABLE_FORMAT}"
"""Each table's description: what wrote it, for readers that must know the layout."""


def create_tables(root: Path) -> None:
    """Create every table (empty) so that dashboards find them from the start; a table made by
    an older faultline takes on the columns added since (one metadata commit, no data)."""
    for name in [*TABLES, "batches"]:
        schema = BATCHES if name == "batches" else table_schema(name)
        table = DeltaTable.create(
            str(root / name), schema=schema, mode="ignore", description=DESCRIPTION
        )
        have = {f.name for f in table.schema().fields}
        if any(f.name not in have for f in schema):
            write_deltalake(table, schema.empty_table(), mode="append", schema_mode="merge")


def write_file(root: Path, name: str, data: pa.Table, batch_id: int, app_id: str) -> dict[str, Any]:
    """Executor side: one table's rows of one task as a Parquet file in the table's folder;
    returns its metadata for the driver's commit."""
    data = data.append_column("batch_id", pa.array(np.full(len(data), batch_id, dtype=np.int64)))
    relative = f"{_prefix(app_id, batch_id)}{uuid.uuid4().hex}.parquet"
    path = root / name / relative
    pq.write_table(data, path)
    return {
        "table": name,
        "path": relative,
        "size": path.stat().st_size,
        "records": len(data),
        "stats": file_stats(data),
    }


def file_stats(data: pa.Table) -> str:
    """A file's Delta statistics, as delta-rs's own writer makes them: rows, and per column of a
    plain type its nulls, minimum and maximum. Readers skip files by them (a time range in the
    dashboard, a broker or a message id in ``faultline explain``); a column left out would read
    as "no value here" to delta-rs, which would then skip every file for a filter on it."""
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for column in data.column_names:
        values = data[column]
        nulls[column] = values.null_count
        kind = values.type
        if pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_string(kind):
            bounds = pc.min_max(values).as_py()
            if bounds["min"] is not None:
                low[column], high[column] = _bound(bounds["min"], 0), _bound(bounds["max"], 1)
    stats = {"numRecords": len(data), "minValues": low, "maxValues": high, "nullCount": nulls}
    return json.dumps(stats)


def _bound(value: Any, upper: int) -> Any:
    """A long text's bound by its first :data:`STAT_CHARS` characters: the prefix is still a
    lower bound, and the prefix followed by the largest character an upper one."""
    if isinstance(value, str) and len(value) > STAT_CHARS:
        return value[:STAT_CHARS] + ("\U0010ffff" if upper else "")
    return value


STAT_CHARS = 64


def _prefix(app_id: str, batch_id: int) -> str:
    """Files of one batch of one job: another job writing into the same folder has its own."""
    return f"part-{batch_id:08d}-{app_id}-"


COUNTERS = (
    "input",
    "valid",
    "late",
    "quarantined",
    "duplicates",
    "stale",
    "receive_ms",
    "parse_ms",
    "engine_ms",
    "files_ms",
    "state_bytes",
)


def is_committed(table: DeltaTable, app_id: str, batch_id: int) -> bool:
    """Whether the job ``app_id`` has committed ``batch_id`` (or a later batch) to the table."""
    version = table.transaction_version(app_id)
    return version is not None and version >= batch_id


def commit_batch(
    root: Path, batch_id: int, metas: list[dict[str, Any]], app_id: str, write_ms: int
) -> dict[str, Any]:
    """Driver side: commit each table's new files once; return the batch's counts."""
    started = time.time()
    files: dict[str, list[dict[str, Any]]] = {}
    for meta in metas:
        if meta["table"] is not None:
            files.setdefault(meta["table"], []).append(meta)
    counters = [m for m in metas if m["table"] is None]
    stats = {k: sum(int(m[k] or 0) for m in counters) for k in COUNTERS}
    clocks = [m["clock"] for m in counters if m["clock"] is not None]
    tasks: dict[int, int] = {}
    for m in counters:
        busy = sum(int(m[k] or 0) for k in ("receive_ms", "parse_ms", "engine_ms", "files_ms"))
        tasks[m["task"]] = tasks.get(m["task"], 0) + busy
    now_ms = int(time.time() * 1000)
    committed: dict[str, int] = {}
    for name in TABLES:
        entries = files.get(name)
        if not entries:
            continue
        table = DeltaTable(str(root / name))
        keep = {e["path"] for e in entries}
        if is_committed(table, app_id, batch_id):  # in the table already: these files are spare
            for path in keep:
                (root / name / path).unlink(missing_ok=True)
            continue
        for stray in (root / name).glob(f"{_prefix(app_id, batch_id)}*.parquet"):
            if stray.name not in keep:  # left by a failed attempt of this batch
                stray.unlink(missing_ok=True)
        actions: list[AddAction | RemoveAction] = [
            AddAction(
                e["path"],
                int(e["size"]),
                {},
                now_ms,
                True,
                e["stats"],
            )
            for e in entries
        ]
        failpoints.reach(f"before-commit-{name}", batch_id)
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]),
        )
        committed[name] = sum(int(e["records"]) for e in entries)
        failpoints.reach(f"after-commit-{name}", batch_id)
    counts = {
        "batch_id": batch_id,
        **stats,
        "clock": max(clocks) if clocks else None,
        "slowest_task_ms": max(tasks.values(), default=0),
        "rows_written": sum(int(e["records"]) for es in files.values() for e in es),
    }
    row = {
        **counts,
        "write_ms": write_ms,
        "commit_ms": int((time.time() - started) * 1000),
        "committed_at": int(time.time() * 1000),
    }
    batches = DeltaTable(str(root / "batches"))
    if not is_committed(batches, app_id, batch_id):
        failpoints.reach("before-commit-batches", batch_id)
        write_deltalake(
            batches,
            pa.Table.from_pylist([row], schema=BATCHES),
            mode="append",
            schema_mode="merge",  # tables made before a column was added take it on
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]),
        )
        failpoints.reach("after-commit-batches", batch_id)
    return {**row, "committed": committed}


def read_rows(
    root: Path, metas: list[dict[str, Any]], tables: tuple[str, ...]
) -> dict[str, list[dict[str, Any]]]:
    """Driver side, before :func:`commit_batch` (which deletes the files of a replayed batch that a
    table holds already): the rows the batch wrote to ``tables``."""
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in tables}
    for meta in metas:
        if meta["table"] in rows:
            rows[meta["table"]].extend(
                pq.read_table(root / meta["table"] / meta["path"]).to_pylist()
            )
    return rows


PUBLISHED = ("broker_decisions", "routing_table", "redeliveries")
"""The tables whose rows :func:`publish_batch` sends."""


def publish_batch(
    root: Path,
    batch_id: int,
    rows: dict[str, list[dict[str, Any]]],
    app_id: str,
    publisher: Any,
    decisions_topic: str | None,
    probe_share: float | None = None,
) -> int:
    """Driver side, before :func:`commit_batch`: the cluster scope's broker decisions and routing
    tables to ``decisions_topic`` (compacted; keys ``broker/<cluster>/<broker>`` and
    ``route/<cluster>/<topic>``, so the latest message per key is the current state), and the
    redeliveries onto their ``kafka_topic`` (key: the message id). A probation's message carries
    ``probe_share`` (recovery probing). Waits while Kafka does not answer
    (:meth:`streaming.kafka.Publisher.deliver`); raises when a message cannot be delivered, so the
    batch fails and is retried. A batch already committed is not sent again. Returns the number
    of messages sent."""
    if is_committed(DeltaTable(str(root / "batches")), app_id, batch_id):
        return 0
    messages: list[tuple[str, str, str]] = []
    if decisions_topic:
        decisions = [r for r in rows["broker_decisions"] if r["scope"] == "cluster"]
        decisions.sort(key=publish_order)
        for r in decisions:
            key = f"broker/{r['cluster']}/{r['broker_name']}"
            messages.append((decisions_topic, json.dumps(message(r, probe_share)), key))
        tables = [r for r in rows["routing_table"] if r["scope"] == "cluster"]
        for r in sorted(tables, key=lambda r: r["effective_at"]):
            messages.append((decisions_topic, json.dumps(r), f"route/{r['cluster']}/{r['topic']}"))
    for r in rows["redeliveries"]:
        messages.append((r["kafka_topic"], json.dumps(r), r["message_id"]))
    return int(publisher.deliver(messages))
