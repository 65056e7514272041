"""The Delta sink: exactly once per micro-batch across every table, with delta-rs.

The stateful operator's tasks write each table's rows to Parquet files under the table's folder
and return only the files' metadata; the driver then commits each table's new files as one Delta
commit carrying an app transaction ``(app_id, batch_id)``. A replayed batch whose commit already
happened (``transaction_version(app_id) >= batch_id``) is skipped and its new files deleted, so a
crash anywhere gives no duplicate and no missing row. The ``batches`` table is committed last.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from streaming.client import decision_key, message, publish_order
from streaming.job import failpoints
from streaming.job.storage import writing
from udfs.engine import DECISIONS
from udfs.schema import (
    BATCHES,
    MILLIS,
    PARTITION,
    TABLE_FORMAT,
    TABLES,
    TIME_COLUMNS,
    TIMESTAMP,
    timestamp_name,
)
from udfs.vocabulary import TableName

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
        ("messages", pa.int64()),
        ("dropped", pa.int64()),
        ("clock", pa.int64()),
        ("receive_ms", pa.int64()),
        ("parse_ms", pa.int64()),
        ("engine_ms", pa.int64()),
        ("files_ms", pa.int64()),
        ("state_bytes", pa.int64()),
        ("state_ms", pa.int64()),
        ("publish_ms", pa.int64()),
        ("task", pa.int64()),
        ("stats", pa.string()),
        ("partition", pa.string()),
        ("figures", pa.string()),
    ]
)
"""What a task reports to the driver: a file it wrote (``table``, ``path``, ``size``,
``records``, ``stats``: its Delta statistics, ``partition``: its day, or null in an
unpartitioned table), or with ``table`` null, its counters and timings
for one cluster, and in ``figures`` (JSON) what the job's metrics need of it
(:func:`streaming.job.stateful.figures`)."""


def own_schema(name: str) -> pa.Schema:
    """The columns a table's writer provides: the engine's (or the batch's) and ``batch_id``."""
    return (
        BATCHES
        if name == TableName.BATCHES
        else TABLES[name].append(pa.field("batch_id", pa.int64()))
    )


def table_schema(name: str) -> pa.Schema:
    """A table's Delta schema: :func:`own_schema`, a timestamp twin of each time column and, but
    for ``batches``, the partition column."""
    schema = own_schema(name)
    for column in MILLIS[name]:
        schema = schema.append(pa.field(timestamp_name(column), TIMESTAMP))
    if name in TIME_COLUMNS:
        schema = schema.append(pa.field(PARTITION, pa.date32()))
    return schema


DESCRIPTION = f"faultline table format {TABLE_FORMAT}"
"""Each table's description: what wrote it, for readers that must know the layout."""
_FORMAT = re.compile(r"faultline table format (\d+)")


def table_format(table: DeltaTable) -> int | None:
    """The table format a table's description names (None: not a faultline table)."""
    match = _FORMAT.search(table.metadata().description or "")
    return int(match.group(1)) if match else None


def create_tables(root: Path, properties: dict[str, str] | None = None) -> None:
    """Create every table (empty) so that dashboards find them from the start; a table made by
    an older faultline takes on the columns added since (one metadata commit, no data) and the
    current format in its description (rows of this format go into it from now on, so an older
    faultline refuses it), and ``properties`` (Delta table properties) where they differ."""
    for name in [*TABLES, TableName.BATCHES]:
        with writing(root / name):
            _create_table(root / name, table_schema(name), properties)


def _create_table(path: Path, schema: pa.Schema, properties: dict[str, str] | None) -> None:
    table = DeltaTable.create(
        str(path),
        schema=schema,
        mode="ignore",
        partition_by=[PARTITION] if path.name in TIME_COLUMNS else None,
        description=DESCRIPTION,
        configuration=properties,
    )
    have = {f.name for f in table.schema().fields}
    missing = [f for f in schema if f.name not in have and f.name != PARTITION]
    if missing:
        write_deltalake(
            table,
            pa.schema(f for f in schema if f.name in have or f in missing).empty_table(),
            mode="append",
            schema_mode="merge",
        )
    described = table_format(table)
    if described is not None and described < TABLE_FORMAT:
        table.alter.set_table_description(DESCRIPTION)
    config = table.metadata().configuration
    changed = {k: v for k, v in (properties or {}).items() if config.get(k) != v}
    if changed:
        table.alter.set_table_properties(changed)


def flat_tables(root: Path) -> frozenset[str]:
    """The tables under ``root`` that are not partitioned by :data:`PARTITION`: made before
    table format 2, they keep their layout."""
    return frozenset(
        name
        for name in TIME_COLUMNS
        if PARTITION not in DeltaTable(str(root / name)).metadata().partition_columns
    )


def with_timestamps(name: str, data: pa.Table) -> pa.Table:
    """``data`` with the timestamp twin of each of its table's time columns."""
    for column in MILLIS[name]:
        values = data[column].cast(pa.timestamp("ms")).cast(TIMESTAMP)
        data = data.append_column(pa.field(timestamp_name(column), TIMESTAMP), values)
    return data


def stored(name: str, data: pa.Table) -> pa.Table:
    """Rows of a table's own columns (and ``batch_id``) as the table stores them, for writers
    other than the job's (``write_deltalake``): with their timestamps and partition column."""
    data = with_timestamps(name, data)
    if name in TIME_COLUMNS:
        data = data.append_column(PARTITION, _days(name, data))
    return data.select(table_schema(name).names)


def _days(name: str, data: pa.Table) -> pa.ChunkedArray:
    """The partition value of each row: the UTC date of the table's time column."""
    return data[TIME_COLUMNS[name]].cast(pa.timestamp("ms")).cast(pa.date32())


def write_file(
    root: Path, name: str, data: pa.Table, batch_id: int, app_id: str, partitioned: bool = True
) -> list[dict[str, Any]]:
    """Executor side: one table's rows of one task as Parquet files in the table's folder, one
    per day of its time column when the table is ``partitioned``; returns their metadata for
    the driver's commit."""
    data = data.append_column("batch_id", pa.array(np.full(len(data), batch_id, dtype=np.int64)))
    data = with_timestamps(name, data)
    parts: list[tuple[str | None, pa.Table]] = [(None, data)]
    if partitioned and name in TIME_COLUMNS:
        days = _days(name, data)
        parts = [
            (str(day) if day.is_valid else NULL_PART, data.filter(_same_day(days, day)))
            for day in pc.unique(days)
        ]
    metas = []
    for day, rows in parts:
        folder = f"{PARTITION}={day}/" if day else ""
        relative = f"{folder}{file_prefix(app_id, batch_id)}{uuid.uuid4().hex}.parquet"
        path = root / name / relative
        with writing(root / name):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                pq.write_table(rows, path)
            except FileNotFoundError:  # maintenance removed the day's empty folder meanwhile
                path.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(rows, path)
        metas.append(
            {
                "table": name,
                "path": relative,
                "size": path.stat().st_size,
                "records": len(rows),
                "stats": file_stats(rows),
                "partition": day,
            }
        )
    return metas


NULL_PART = "__HIVE_DEFAULT_PARTITION__"
"""The folder of rows whose partition value is null (a quarantined record without an ingest
time), as Hive and Delta name it."""


def _same_day(days: pa.ChunkedArray, day: pa.Scalar) -> pa.ChunkedArray:
    if not day.is_valid:
        return pc.is_null(days)
    return pc.fill_null(pc.equal(days, day), False)


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
        plain = pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_string(kind)
        if plain or pa.types.is_timestamp(kind):
            bounds = pc.min_max(values)
            if bounds["min"].is_valid:
                if pa.types.is_timestamp(kind):  # as Delta writes them: ISO 8601, ms, UTC
                    bounds = pc.strftime(
                        pa.array([bounds["min"], bounds["max"]]).cast(pa.timestamp("ms", "UTC")),
                        "%Y-%m-%dT%H:%M:%SZ",  # %S has the milliseconds,
                    ).to_pylist()
                    low[column], high[column] = bounds
                else:
                    found = bounds.as_py()
                    low[column], high[column] = _bound(found["min"], 0), _bound(found["max"], 1)
    stats = {"numRecords": len(data), "minValues": low, "maxValues": high, "nullCount": nulls}
    return json.dumps(stats)


def _bound(value: Any, upper: int) -> Any:
    """A long text's bound by its first :data:`STAT_CHARS` characters: the prefix is still a
    lower bound, and the prefix followed by the largest character an upper one."""
    if isinstance(value, str) and len(value) > STAT_CHARS:
        return value[:STAT_CHARS] + ("\U0010ffff" if upper else "")
    return value


STAT_CHARS = 64


def _partition(meta: dict[str, Any]) -> dict[str, str | None]:
    """A file's partition values, as its add action carries them."""
    day = meta.get("partition")
    if day is None:
        return {}
    return {PARTITION: None if day == NULL_PART else day}


def file_prefix(app_id: str, batch_id: int) -> str:
    """Files of one batch of one job: another job writing into the same folder has its own."""
    return f"part-{batch_id:08d}-{app_id}-"


COUNTERS = (
    "input",
    "valid",
    "late",
    "quarantined",
    "duplicates",
    "stale",
    "messages",
    "dropped",
    "receive_ms",
    "parse_ms",
    "engine_ms",
    "files_ms",
    "state_bytes",
    "state_ms",
    "publish_ms",
)


TASK_PARTS = ("receive_ms", "parse_ms", "engine_ms", "files_ms")
"""The operator's timings of a key, which add up to its time in the task (``publish_ms`` runs
beside the engine and the files)."""


def is_committed(table: DeltaTable, app_id: str, batch_id: int) -> bool:
    """Whether the job ``app_id`` has committed ``batch_id`` (or a later batch) to the table."""
    version = table.transaction_version(app_id)
    return version is not None and version >= batch_id


class Committer(Protocol):
    """How a batch's files and its ``batches`` row reach the tables, each at most once per
    ``(app_id, batch_id)``."""

    def files(self, name: str, entries: list[dict[str, Any]], batch_id: int, now_ms: int) -> bool:
        """Commit one table's files of the batch; False when the table has the batch already."""
        ...

    def row(self, row: dict[str, Any], batch_id: int) -> bool:
        """Commit the batch's ``batches`` row, last; False when the table has it already."""
        ...


@dataclass(frozen=True)
class DeltaRs:
    """The job's own committer: the files the tasks wrote into the tables' folders become add
    actions of one delta-rs commit per table."""

    root: Path
    app_id: str
    opened: dict[str, DeltaTable] = field(default_factory=dict, compare=False, repr=False)
    """Each table as the last batch left it: the next reads only the commits made since (its
    own, maintenance's), not the whole log since the last checkpoint (up to 40 ms a table)."""

    def table(self, name: str) -> DeltaTable:
        table = self.opened.get(name)
        if table is None:
            table = self.opened[name] = DeltaTable(str(self.root / name))
        else:
            table.update_incremental()
        return table

    def files(self, name: str, entries: list[dict[str, Any]], batch_id: int, now_ms: int) -> bool:
        path = self.root / name
        return commit_table(path, entries, self.app_id, batch_id, now_ms, self.table(name))

    def row(self, row: dict[str, Any], batch_id: int) -> bool:
        batches = self.table(TableName.BATCHES)
        if is_committed(batches, self.app_id, batch_id):
            return False
        failpoints.reach("before-commit-batches", batch_id)
        with writing(self.root / TableName.BATCHES):
            write_deltalake(
                batches,
                with_timestamps(TableName.BATCHES, pa.Table.from_pylist([row], schema=BATCHES)),
                mode="append",
                schema_mode="merge",  # tables made before a column was added take it on
                commit_properties=CommitProperties(
                    app_transactions=[Transaction(self.app_id, batch_id)]
                ),
            )
        failpoints.reach("after-commit-batches", batch_id)
        return True


def commit_batch(
    root: Path,
    batch_id: int,
    metas: list[dict[str, Any]],
    app_id: str,
    write_ms: int,
    committer: Committer | None = None,
    planned: int | None = None,
) -> dict[str, Any]:
    """Driver side: commit each table's new files once (with ``committer``, by default
    :class:`DeltaRs`), then the batch's row; return the batch's counts, with ``new``: whether
    this call committed the row (False for a batch replayed after its commit). ``planned``, the
    Kafka offsets the batch covers, makes ``skipped``: those of them the source did not read
    (without, 0: the files sources read every record of a batch's range)."""
    committer = committer or DeltaRs(root, app_id)
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
        busy = sum(int(m[k] or 0) for k in TASK_PARTS)
        tasks[m["task"]] = tasks.get(m["task"], 0) + busy
    now_ms = int(time.time() * 1000)
    committed: dict[str, int] = {}
    for name in TABLES:
        entries = files.get(name)
        if not entries:
            continue
        if committer.files(name, entries, batch_id, now_ms):
            committed[name] = sum(int(e["records"]) for e in entries)
    counts = {
        "batch_id": batch_id,
        **stats,
        "clock": max(clocks) if clocks else None,
        "slowest_task_ms": max(tasks.values(), default=0),
        "rows_written": sum(int(e["records"]) for es in files.values() for e in es),
        "skipped": 0 if planned is None else planned - stats["input"],
    }
    row = {
        **counts,
        "write_ms": write_ms,
        "commit_ms": int((time.time() - started) * 1000),
        "committed_at": int(time.time() * 1000),
    }
    new = committer.row(row, batch_id)
    return {**row, "committed": committed, "new": new}


def record_progress(root: Path, rows: list[dict[str, Any]]) -> None:
    """Spark's progress of committed batches into their ``batches`` rows (one commit; a batch
    not in the table, such as one Spark ran but the job did not commit, is left out)."""
    if not rows:
        return
    columns = [f for f in BATCHES if f.name == "batch_id" or f.name in rows[0]]
    source = pa.Table.from_pylist(rows, schema=pa.schema(columns))
    updates = {f.name: f"s.{f.name}" for f in columns if f.name != "batch_id"}
    (
        DeltaTable(str(root / TableName.BATCHES))
        .merge(source, "t.batch_id = s.batch_id", source_alias="s", target_alias="t")
        .when_matched_update(updates)
        .execute()
    )


def commit_table(
    path: Path,
    entries: list[dict[str, Any]],
    app_id: str,
    batch_id: int,
    now_ms: int,
    table: DeltaTable | None = None,
) -> bool:
    """One table's new files of a batch as one Delta commit (``table``: the table at ``path``,
    up to date); False when the table has the batch already (then the files are spare and
    deleted)."""
    table = DeltaTable(str(path)) if table is None else table
    keep = {e["path"] for e in entries}
    if is_committed(table, app_id, batch_id):
        for relative in keep:
            (path / relative).unlink(missing_ok=True)
        return False
    for folder in {Path(p).parent for p in keep}:
        for stray in (path / folder).glob(f"{file_prefix(app_id, batch_id)}*.parquet"):
            if str(folder / stray.name) not in keep:  # left by a failed attempt
                stray.unlink(missing_ok=True)
    actions: list[AddAction | RemoveAction] = [
        AddAction(e["path"], int(e["size"]), _partition(e), now_ms, True, e["stats"])
        for e in entries
    ]
    failpoints.reach(f"before-commit-{path.name}", batch_id)
    with writing(path):
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]),
        )
    failpoints.reach(f"after-commit-{path.name}", batch_id)
    return True


def read_rows(
    root: Path, metas: list[dict[str, Any]], tables: tuple[str, ...]
) -> dict[str, list[dict[str, Any]]]:
    """Driver side, before :func:`commit_batch` (which deletes the files of a replayed batch that a
    table holds already): the rows the batch wrote to ``tables``, in their own columns (the
    timestamps and the partition derive from them)."""
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in tables}
    for meta in metas:
        name = meta["table"]
        if name in rows:
            path = root / name / meta["path"]
            rows[name].extend(pq.read_table(path, columns=own_schema(name).names).to_pylist())
    return rows


DRIVER_PUBLISHED = (TableName.REDELIVERIES, TableName.TRANSACTIONS)
"""What :func:`publish_batch` sends besides the decisions (:data:`udfs.engine.DECISIONS`, whose
rows :func:`decision_messages` sends: the ones decision latency is about)."""
PUBLISHED = (*DECISIONS, *DRIVER_PUBLISHED)
"""The tables whose rows :func:`publish_batch` sends."""


def decision_messages(
    rows: dict[str, list[dict[str, Any]]], topic: str, probe_share: float | None = None
) -> list[tuple[str, str, str]]:
    """The cluster scope's broker decisions and routing tables of one batch as messages of the
    decision topic (compacted; keys :func:`streaming.client.decision_key` and
    ``route/<cluster>/<topic>``, so the latest message per key is the current state): per key the
    one that took effect last (publishing an earlier one would only show a state the batch has
    left, and a replay of the batch would show it again, after the last), in the order they took
    effect. A probation's
    message carries ``probe_share`` (recovery probing)."""
    latest: dict[str, tuple[str, str, str]] = {}
    decisions = [r for r in rows[TableName.BROKER_DECISIONS] if r["scope"] == "cluster"]
    for r in sorted(decisions, key=publish_order):
        key = decision_key(r)
        latest.pop(key, None)
        latest[key] = (topic, json.dumps(message(r, probe_share)), key)
    tables = [r for r in rows[TableName.ROUTING_TABLE] if r["scope"] == "cluster"]
    for r in sorted(tables, key=lambda r: r["effective_at"]):
        key = f"route/{r['cluster']}/{r['topic']}"
        latest.pop(key, None)
        latest[key] = (topic, json.dumps(r), key)
    return list(latest.values())


def publish_batch(
    root: Path,
    batch_id: int,
    rows: dict[str, list[dict[str, Any]]],
    app_id: str,
    publisher: Any,
    decisions_topic: str | None,
    probe_share: float | None = None,
    decisions: bool = True,
) -> int:
    """Driver side, before :func:`commit_batch`: the :func:`decision_messages` (unless
    ``decisions`` is False: the tasks sent them, :class:`streaming.job.stateful.Publish`) and the
    transactions a producer must act on (``notify``; key ``transaction/<cluster>/<id>``) to
    ``decisions_topic``, and the redeliveries onto their ``kafka_topic`` (key: the message id).
    Waits while Kafka does not answer (:meth:`streaming.kafka.Publisher.deliver`); raises when a
    message cannot be delivered, so the batch fails and is retried. A batch already committed is
    not sent again. Returns the number of messages sent."""
    if is_committed(DeltaTable(str(root / TableName.BATCHES)), app_id, batch_id):
        return 0
    messages: list[tuple[str, str, str]] = []
    if decisions_topic:
        if decisions:
            messages += decision_messages(rows, decisions_topic, probe_share)
        for r in sorted(rows[TableName.TRANSACTIONS], key=lambda r: r["effective_at"]):
            if r["notify"]:
                key = f"transaction/{r['cluster']}/{r['transaction_id']}"
                messages.append((decisions_topic, json.dumps(r), key))
    for r in rows[TableName.REDELIVERIES]:
        messages.append((r["kafka_topic"], json.dumps(r), r["message_id"]))
    return int(publisher.deliver(messages))
