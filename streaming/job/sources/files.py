"""Sources as Spark Python Data Sources. Each yields raw records, unparsed:

``value`` (the event's JSON text), ``origin`` (where it came from: ``file:line`` or
``topic/partition/offset``) and ``ingest_ms`` (the file's modification time or the Kafka message
timestamp: an ingest column, not used for any decision).

Offsets are positions in an immutable, ordered log, so a restart re-reads exactly the ranges
Spark logged: reads are a pure function of (start, end).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from udfs.errors import FaultlineError
from udfs.parse import cluster_keys

RAW_SCHEMA = "value string, origin string, ingest_ms bigint, key string"
_RAW_ARROW = pa.schema(
    [("value", pa.string()), ("origin", pa.string()), ("ingest_ms", pa.int64()),
     ("key", pa.string())]
)  # fmt: skip
"""``key``: the record's cluster (:func:`udfs.parse.cluster_keys`), read here, where the records
are Python strings anyway, rather than by Spark in the JVM."""


def list_files(folder: Path) -> list[Path]:
    """The log's files in order: visible ``.jsonl``/``.json``/``.parquet`` files by name."""
    return sorted(
        p
        for p in folder.iterdir()
        if p.is_file()
        and not p.name.startswith((".", "_"))
        and p.suffix in (".jsonl", ".json", ".parquet")
    )


def count_records(path: Path) -> int:
    if path.suffix == ".parquet":
        try:
            return int(pq.read_metadata(path).num_rows)
        except pa.ArrowInvalid as exc:  # the whole file, not a record: nothing to quarantine
            raise FaultlineError(
                f"files source: {path} cannot be read as Parquet ({exc}); move it out of the "
                "folder, then start the job again"
            ) from None
    with path.open("rb") as fh:
        data = fh.read()
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


@dataclass(frozen=True)
class FileSlice(InputPartition):
    path: str
    begin: int
    end: int


def read_slice(path: Path, begin: int, end: int) -> pa.RecordBatch:
    """Records ``[begin, end)`` of one file as raw rows."""
    mtime = os.stat(path).st_mtime_ns // 1_000_000
    if path.suffix == ".parquet":
        table = pq.read_table(path).slice(begin, end - begin)
        values = pa.array([_row_json(r) for r in table.to_pylist()], pa.string())
    else:
        lines = path.read_bytes().split(b"\n")[begin:end]
        try:
            values = pa.array(lines, pa.binary()).cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8: keep what can be read, the parser rejects it
            values = pa.array([ln.decode("utf-8", "replace") for ln in lines], pa.string())
    numbers = pa.array(range(begin + 1, begin + 1 + len(values)), pa.int64())
    origins = pc.binary_join_element_wise(pa.scalar(path.name), pc.cast(numbers, pa.string()), ":")
    ingest = pa.array([mtime] * len(values), pa.int64())
    keys = cluster_keys(values)
    return pa.RecordBatch.from_arrays([values, origins, ingest, keys], schema=_RAW_ARROW)


def _row_json(row: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in row.items() if v is not None}, default=str)


class FilesReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A folder of JSON-lines or Parquet files read as a stream, record by record.

    Offset ``{"file": name, "line": n}``: every record of files sorting before ``name`` and the
    first ``n`` records of ``name`` are read. Files are read in name order and must not change
    once visible; new files must sort after the ones already read (``faultline simulate`` writes
    ``part-00000.jsonl``, ``part-00001.jsonl``, ...). A file that breaks this stops the query
    with a message naming it, rather than being skipped.
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.folder = Path(options["path"])
        limit = options.get("maxrecordspertrigger")
        self.limit = int(limit) if limit else None
        self.counts: dict[str, int] = {}
        self.frozen: list[tuple[str, int]] | None = None

    def prepareForTriggerAvailableNow(self) -> None:
        """``--once``: read what is there now, then stop."""
        self.frozen = self._files()

    def _files(self) -> list[tuple[str, int]]:
        if self.frozen is not None:
            return self.frozen
        if not self.folder.is_dir():
            raise FileNotFoundError(f"files source: {self.folder} is not a folder")
        out = []
        for path in list_files(self.folder):
            if path.name not in self.counts:
                later = [n for n in self.counts if n > path.name]
                if later:
                    raise ValueError(
                        f"files source: {path} appeared after {max(later)} was listed; new files "
                        "must sort after the files already in the folder (name them in order)"
                    )
                self.counts[path.name] = count_records(path)
            out.append((path.name, self.counts[path.name]))
        return out

    def initialOffset(self) -> dict[str, Any]:
        return {"file": "", "line": 0}

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
        budget = self.limit
        if getattr(limit, "max_rows", None) is not None:
            rows = int(limit.max_rows)
            budget = rows if budget is None else min(budget, rows)
        position = dict(start)
        for name, count in self._files():
            if name < position["file"]:
                continue  # read already
            have = position["line"] if name == position["file"] else 0
            take = count - have if budget is None else min(count - have, budget)
            if take <= 0:
                continue
            position = {"file": name, "line": have + take}
            if budget is not None:
                budget -= take
                if budget == 0:
                    break
        return position

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[FileSlice]:
        slices = []
        for name, count in self._files():
            if name < start["file"] or name > end["file"]:
                continue
            begin = start["line"] if name == start["file"] else 0
            stop = end["line"] if name == end["file"] else count
            if stop > begin:
                slices.append(FileSlice(str(self.folder / name), begin, stop))
        return slices

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileSlice)
        yield read_slice(Path(partition.path), partition.begin, partition.end)

    def commit(self, end: dict[str, Any]) -> None:
        pass


class FilesSource(DataSource):
    """``spark.readStream.format("faultline-files").option("path", DIR)``."""

    @classmethod
    def name(cls) -> str:
        return "faultline-files"

    def schema(self) -> str:
        return RAW_SCHEMA

    def streamReader(self, schema: Any) -> FilesReader:
        return FilesReader(dict(self.options))
