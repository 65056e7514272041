"""The Delta tables' schemas over time."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from streaming import sink


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
