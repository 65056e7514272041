"""The Delta tables' schemas over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from streaming.job import sink


def test_a_table_made_before_a_column_was_added_takes_it_on(tmp_path: Path) -> None:
    """fault_items got ``attempt`` and ``message_id``: a job resuming on older tables adds
    them, once."""
    added = ("attempt", "message_id")
    older = pa.schema([f for f in sink.table_schema("fault_items") if f.name not in added])
    DeltaTable.create(str(tmp_path / "fault_items"), schema=older)
    sink.create_tables(tmp_path)
    table = DeltaTable(str(tmp_path / "fault_items"))
    assert set(added) <= {f.name for f in table.schema().fields}
    version = table.version()
    sink.create_tables(tmp_path)
    assert DeltaTable(str(tmp_path / "fault_items")).version() == version  # nothing more to do


def test_filters_on_any_column_find_the_rows_of_committed_files(tmp_path: Path) -> None:
    """delta-rs reads a column missing from a file's statistics as "no value here" and skips
    the file for a filter on it: every plain column must have its bounds."""
    import pyarrow.dataset as ds

    sink.create_tables(tmp_path)
    rows = [
        {"cluster": "C", "event_id": f"e{i}", "message_id": f"m{i}", "source": "send_failure",
         "delay_level": 3 + i % 2, "store_time": 1_000 + i, "dlq": i == 1,
         "real_topic": "t" * (200 if i == 2 else 1)}
        for i in range(3)
    ]  # fmt: skip
    frame = pa.Table.from_pylist(rows, schema=sink.TABLES["schedule_entries"])
    metas = sink.write_file(tmp_path, "schedule_entries", frame, 0, "app")
    sink.commit_batch(tmp_path, 0, metas, "app", write_ms=0)
    dataset = DeltaTable(str(tmp_path / "schedule_entries")).to_pyarrow_dataset()
    for column, value, expected in [
        ("message_id", "m1", 1),
        ("delay_level", 4, 1),
        ("store_time", 1_002, 1),
        ("store_time_ts", pa.scalar(1_002, pa.timestamp("ms")).cast(sink.TIMESTAMP), 1),
        (sink.PARTITION, pa.scalar(0, pa.date32()), 3),
        ("dlq", True, 1),
        ("real_topic", "t" * 200, 1),  # its bounds are cut to 64 characters and still hold it
        ("real_queue_id", 0, 0),  # null in every row
        ("cluster", "C", 3),
    ]:
        assert dataset.to_table(filter=ds.field(column) == value).num_rows == expected, column


def test_rows_without_a_time_go_to_the_null_partition_and_read_back(tmp_path: Path) -> None:
    """A quarantined record without an ingest time (a lost Kafka range) has no day."""
    sink.create_tables(tmp_path)
    rows = [
        {"raw": None, "origin": "t/0/0-9", "reason_code": "DATA_LOSS", "seen_at": None},
        {"raw": "x", "origin": "f:1", "reason_code": "MALFORMED_JSON", "seen_at": 86_400_000},
    ]
    frame = pa.Table.from_pylist(rows, schema=sink.TABLES["quarantine"])
    metas = sink.write_file(tmp_path, "quarantine", frame, 0, "app")
    assert sorted(m["partition"] for m in metas) == ["1970-01-02", sink.NULL_PART]
    sink.commit_batch(tmp_path, 0, metas, "app", write_ms=0)
    got = DeltaTable(str(tmp_path / "quarantine")).to_pyarrow_table()
    days = dict(zip(got["origin"].to_pylist(), got[sink.PARTITION].to_pylist(), strict=True))
    assert {k: str(v) for k, v in days.items()} == {"t/0/0-9": "None", "f:1": "1970-01-02"}


def test_a_format_2_routing_table_takes_on_format_3_and_both_kinds_of_row_read_whole(
    tmp_path: Path,
) -> None:
    """A job resuming on format-2 tables: ``routing_table`` takes on the ``route`` column and
    the current format in its description (an older faultline then refuses it), ``routes`` is
    made, and the rows of both formats read with their whole lists."""
    from deltalake import write_deltalake

    from streaming.tools import routing_tables

    def queues(*brokers: str) -> list[dict[str, Any]]:
        return [{"broker_name": b, "queue_id": q} for b in brokers for q in (0, 1)]

    row = {"scope": "producer", "scope_key": "p", "cluster": "c", "topic": "T",
           "effective_at": 1_000, "cause_event_id": "e1", "selectable": queues("a", "b"),
           "isolated": [], "batch_id": 0}  # fmt: skip
    older = sink.stored(
        "routing_table", pa.Table.from_pylist([row], sink.own_schema("routing_table"))
    )
    older = older.drop_columns("route")
    made = DeltaTable.create(
        str(tmp_path / "routing_table"),
        schema=older.schema,
        partition_by=[sink.PARTITION],
        description="faultline table format 2",
    )
    write_deltalake(made, older, mode="append")
    sink.create_tables(tmp_path)
    table = DeltaTable(str(tmp_path / "routing_table"))
    assert "route" in {f.name for f in table.schema().fields}
    assert sink.table_format(table) == sink.TABLE_FORMAT == 4
    assert sink.table_format(DeltaTable(str(tmp_path / "routes"))) == 4
    compact = {**row, "effective_at": 2_000, "cause_event_id": "e2", "selectable": None,
               "isolated": [{"broker_name": "b", "until": 9_000}], "route": "r1"}  # fmt: skip
    route = {"cluster": "c", "topic": "T", "route": "r1", "effective_at": 1_500,
             "cause_event_id": "e0", "writable": queues("a", "b", "c")}  # fmt: skip
    metas = []
    for name, new in (("routing_table", compact), ("routes", route)):
        data = pa.Table.from_pylist([new], schema=sink.TABLES[name])
        metas += sink.write_file(tmp_path, name, data, 1, "app")
    sink.commit_batch(tmp_path, 1, metas, "app", write_ms=0)
    rows = sorted(routing_tables.read(tmp_path).to_pylist(), key=lambda r: r["effective_at"])
    assert [(r["route"], r["selectable"]) for r in rows] == [
        (None, queues("a", "b")),  # format 2: as written
        ("r1", queues("a", "c")),  # format 3: the route's queues without b
    ]
    (found,) = routing_tables.in_force(tmp_path, 1_999, "producer", "p")
    assert found["cause_event_id"] == "e1"
    # format 4: the route changes and the producer's isolations do not, so no row of its own
    moved = {**route, "route": "r2", "effective_at": 3_000, "writable": queues("b", "d")}
    metas = sink.write_file(
        tmp_path, "routes", pa.Table.from_pylist([moved], schema=sink.TABLES["routes"]), 2, "app"
    )
    sink.commit_batch(tmp_path, 2, metas, "app", write_ms=0)
    lists = {t: routing_tables.in_force(tmp_path, t, "producer", "p") for t in (2_999, 3_000)}
    assert [(r["cause_event_id"], r["route"], r["selectable"]) for r in lists[2_999]] == [
        ("e2", "r1", queues("a", "c"))
    ]
    assert [(r["cause_event_id"], r["route"], r["selectable"]) for r in lists[3_000]] == [
        ("e2", "r2", queues("d"))  # its last row, with the route in force then
    ]
