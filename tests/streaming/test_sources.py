"""The files source's offsets and reads, and ``faultline simulate``, without Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming.config import load_scenario
from streaming.job.sources.files import FilesReader
from streaming.sim.simulator import simulate
from tests.streaming.conftest import faultline
from udfs.vocabulary import EventKind


class Limit:
    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"x": 1}\n{"x": 2}\n{"x": 3}\n')
    (folder / "b.jsonl").write_text('{"x": 4}\nnot json')  # no final newline
    (folder / ".hidden.jsonl").write_text("ignored\n")
    pq.write_table(pa.table({"x": [5, 6]}), folder / "c.parquet")
    return folder


def _read(reader: FilesReader, start: dict, end: dict) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    rows = []
    for part in reader.partitions(start, end):
        batch = next(reader.read(part))
        rows += list(
            zip(batch.column("value").to_pylist(), batch.column("origin").to_pylist(), strict=True)
        )
    return rows


def test_offsets_walk_files_in_name_order_with_a_record_limit(tmp_path: Path) -> None:
    reader = FilesReader({"path": str(_folder(tmp_path)), "maxrecordspertrigger": "2"})
    start = reader.initialOffset()
    ends = []
    for _ in range(5):
        end = reader.latestOffset(start, Limit(10))
        ends.append(end)
        start = end
    assert ends == [
        {"file": "a.jsonl", "line": 2},
        {"file": "b.jsonl", "line": 1},
        {"file": "c.parquet", "line": 1},
        {"file": "c.parquet", "line": 2},
        {"file": "c.parquet", "line": 2},
    ]


def test_reads_are_a_pure_function_of_the_range(tmp_path: Path) -> None:
    reader = FilesReader({"path": str(_folder(tmp_path))})
    everything = reader.latestOffset(reader.initialOffset(), None)
    rows = _read(reader, reader.initialOffset(), everything)
    assert [o for _, o in rows] == [
        "a.jsonl:1",
        "a.jsonl:2",
        "a.jsonl:3",
        "b.jsonl:1",
        "b.jsonl:2",
        "c.parquet:1",
        "c.parquet:2",
    ]
    assert rows[4][0] == "not json" and json.loads(rows[5][0]) == {"x": 5}
    again = FilesReader({"path": str(tmp_path / "in")})
    middle = {"file": "b.jsonl", "line": 1}
    assert _read(again, {"file": "a.jsonl", "line": 2}, middle) == rows[2:4]


def test_a_new_file_sorting_before_read_ones_is_an_error(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    reader = FilesReader({"path": str(folder)})
    reader.latestOffset(reader.initialOffset(), None)
    (folder / "0-late.jsonl").write_text('{"x": 0}\n')
    with pytest.raises(ValueError, match=r"0-late\.jsonl appeared after c\.parquet"):
        reader.latestOffset(reader.initialOffset(), None)


def test_available_now_reads_only_what_was_there(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    reader = FilesReader({"path": str(folder)})
    reader.prepareForTriggerAvailableNow()
    (folder / "d.jsonl").write_text('{"x": 7}\n')
    assert reader.latestOffset(reader.initialOffset(), None) == {"file": "c.parquet", "line": 2}


def test_simulate_writes_the_same_events_every_time(tmp_path: Path) -> None:
    for name in ("one", "two"):
        result = faultline(
            "simulate", "--scenario", "quick", "--out", str(tmp_path / name), cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr
    one = sorted((tmp_path / "one").glob("part-*.jsonl"))
    two = sorted((tmp_path / "two").glob("part-*.jsonl"))
    assert [p.read_bytes() for p in one] == [p.read_bytes() for p in two]
    lines = [json.loads(line) for p in one for line in p.read_text().splitlines()]
    assert len(lines) == len(simulate(load_scenario("quick")))
    assert lines == sorted(lines, key=lambda e: (e["event_time"], e["event_id"]))
    kinds = {e["kind"] for e in lines}
    summaries = {EventKind.SEND_SUMMARY, EventKind.CONSUME_SUMMARY}
    assert kinds == set(EventKind) - summaries
    result = faultline(
        "simulate", "--scenario", "quick", "--reporting", "summary", "--out", str(tmp_path / "s"),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summarized = [json.loads(line) for p in (tmp_path / "s").glob("*.jsonl") for line in
                  p.read_text().splitlines()]  # fmt: skip
    assert summaries <= {e["kind"] for e in summarized} and len(summarized) < len(lines)


def test_a_bad_scenario_names_the_file_and_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: bad\nstart: 0\nduration: 10s\nbrokers: [{name: a}]\n"
        "topics: [{name: t, brokers: [a, zz]}]\n"
        "producers: [{id: p, group: g, profile: rocketmq-9, topic: t}]\n"
    )
    result = faultline(
        "simulate", "--scenario", str(bad), "--out", str(tmp_path / "o"), cwd=tmp_path
    )
    assert result.returncode == 2
    assert f"{bad}: producers.0.profile = 'rocketmq-9'" in result.stderr
