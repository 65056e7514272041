"""The rows a batch produces, collected per output table and typed by its schema."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from udfs.schema import TABLES
from udfs.vocabulary import TableName

DECISIONS = (TableName.BROKER_DECISIONS, TableName.ROUTING_TABLE)
"""The tables whose rows are decisions producers act on: a broker's availability in a scope
key's table, and a topic's selectable queues."""


class Picked(NamedTuple):
    """A row's value of a list column: the items of ``items`` at the positions ``at``. The
    rows' picks are taken together when the table is made (a routing table's queues: hundreds
    per row, thousands of rows, a few routes)."""

    items: pa.Array
    at: np.ndarray


class Out:
    """Rows per output table, collected as lists of frames. While the batch goes on,
    ``decided`` is handed a scope's rows of the :data:`DECISIONS` tables once they are all made
    (:meth:`decide`)."""

    def __init__(self, decided: Callable[[dict[str, pa.Table]], None] | None = None) -> None:
        self.decided = decided
        self.parts: dict[str, list[pd.DataFrame | pa.Table]] = {}
        self.records: dict[str, list[dict[str, Any]]] = {}
        self.stats = {
            "input": 0,
            "valid": 0,
            "late": 0,
            "quarantined": 0,
            "duplicates": 0,
            "stale": 0,
            "messages": 0,
            "dropped": 0,
        }

    def add(self, table: str, frame: pd.DataFrame | pa.Table) -> None:
        """Rows as a frame, or as a table already typed by the table's schema."""
        if len(frame):
            self.parts.setdefault(table, []).append(frame)

    def decide(self, scope: str) -> None:
        """No stage adds a row of ``scope`` to a :data:`DECISIONS` table any more in this
        batch: its rows so far go to ``decided``, by table (the tables without one left out)."""
        if self.decided is None:
            return
        tables: dict[str, pa.Table] = {}
        for name in DECISIONS:
            made = self._made(name)
            if made is not None and len(ours := made.filter(pc.equal(made["scope"], scope))):
                tables[name] = ours
        self.decided(tables)

    def rows(self, table: str, rows: list[dict[str, Any]]) -> None:
        """Rows made one decision at a time; they become one table at the end."""
        self.records.setdefault(table, []).extend(rows)

    def frames(self) -> dict[str, pa.Table]:
        """Each table's rows, typed by its schema, so a column's type never depends on the
        rows. A list column given as :class:`Picked` items is taken at once for all rows."""
        tables = {}
        for name in [*self.parts, *(n for n in self.records if n not in self.parts)]:
            made = self._made(name)
            if made is not None:
                tables[name] = made
        self.records = {}
        return tables

    def _made(self, name: str) -> pa.Table | None:
        schema = TABLES[name]
        pieces = [
            f
            if isinstance(f, pa.Table)
            else pa.Table.from_pandas(f, schema=schema, preserve_index=False)
            for f in self.parts.get(name, [])
        ]
        rows = self.records.get(name)
        if rows:
            pieces.append(_from_rows(rows, schema))
        return pa.concat_tables(pieces) if pieces else None


def _from_rows(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    columns = {}
    for column in schema:
        name, kind = column.name, column.type  # read once: a field's attributes are slow
        values = [r[name] for r in rows]
        nested = pa.types.is_list(kind)  # only a list can come picked
        if nested and any(isinstance(v, Picked) for v in values):
            columns[name] = _picked(values, kind)
        else:
            # from_pandas: a missing optional field reaches here as NaN from pandas: null
            columns[name] = pa.array(values, type=kind, from_pandas=True)
    return pa.table(columns, schema=schema)


def _picked(values: list[Picked | None], kind: pa.ListType) -> pa.Array:
    """Rows of a list column given as :class:`Picked` items (None: null) as one array: the
    items of every row taken at once."""
    starts: dict[int, int] = {}  # each items array's place among those joined
    joined: list[pa.Array] = []
    size = 0
    positions = []
    lengths = np.zeros(len(values), np.int64)
    for i, v in enumerate(values):
        if v is None:
            continue
        start = starts.get(id(v.items))
        if start is None:
            start = starts[id(v.items)] = size
            joined.append(v.items)
            size += len(v.items)
        positions.append(v.at + start)
        lengths[i] = len(v.at)
    items = pa.concat_arrays(joined).take(np.concatenate(positions))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    nulls = np.array([v is None for v in values], dtype=bool)
    return pa.ListArray.from_arrays(
        pa.array(offsets), items.cast(kind.value_type), type=kind, mask=pa.array(nulls)
    )


def quarantine_rows(records: pd.DataFrame, code: Any, reason: Any) -> pd.DataFrame:
    """``quarantine`` rows for records, keeping each one's raw text and origin."""
    return pd.DataFrame(
        {
            "raw": records["raw"].to_numpy(),
            "origin": records["origin"].to_numpy(),
            "reason_code": np.asarray(code, dtype=object) if not isinstance(code, str) else code,
            "reason": np.asarray(reason, dtype=object),
            # nullable: a record without an ingest time (a lost Kafka range) has none
            "seen_at": records["ingest_ms"].astype("Int64"),
        }
    )
