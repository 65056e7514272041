"""Fuzzed records mixed into the quick scenario, through the real job: it never stops, every
record is counted once (applied, late, a duplicate or quarantined with a reason code), and the
valid events alone decide the tables (see ``streaming/fuzz.py`` for why no mutant can be
applied)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable
from hypothesis import HealthCheck, Phase, given, seed, settings

from streaming.config import engine_config, load_job_config, load_scenario
from streaming.job.sources.files import count_records
from streaming.sim.fuzz import MUTATIONS, Palette, mixed_stream
from streaming.sim.simulator import simulate
from tests.fuzzing import palettes
from tests.streaming.conftest import Job, faultline, table
from udfs import engine
from udfs.schema import TABLES
from udfs.vocabulary import ReasonCode

pytestmark = pytest.mark.jvm

SCENARIO = load_scenario("quick")
VALID = simulate(SCENARIO)
WRITTEN_AT = VALID[-1]["event_time"]
"""The records' ingest time (the file's time, the Kafka timestamp): when the scenario ended."""
DECIDED = ("fault_items", "broker_decisions", "routing_decisions", "routing_table",
           "heartbeats", "schedule_entries", "redeliveries", "transactions")  # fmt: skip
FUZZ = settings(
    max_examples=1,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def _rows(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted((k, v) for k, v in r.items() if k != "batch_id")) for r in rows)


def _check(out: Path, records: int, seen: tuple[str, ...]) -> None:
    """Every batch's counts add up, every record is counted, each quarantined one has a
    documented reason, and the tables are those of the valid events alone; the counts named in
    ``seen`` are not all zero."""
    batches = table(out, "batches")
    assert (
        batches["input"]
        == batches["valid"] + batches["quarantined"] + batches["late"] + batches["duplicates"]
    ).all(), batches
    assert batches["input"].sum() == records
    assert batches["valid"].sum() == len(VALID), batches.sort_values("batch_id").to_string()
    assert min(batches[list(seen)].sum()) > 0
    quarantine = table(out, "quarantine")
    assert len(quarantine) == batches["quarantined"].sum()
    assert set(quarantine["reason_code"]) <= set(ReasonCode)
    assert quarantine["reason"].str.len().min() > 0
    assert len(table(out, "late_events")) == batches["late"].sum()
    rules = engine_config(load_job_config())  # conf/faultline.yaml, as the job ran
    alone = engine.advance(SCENARIO.cluster, None, _frame(VALID), rules)
    for name in DECIDED:
        got = DeltaTable(str(out / name)).to_pyarrow_table(columns=TABLES[name].names).to_pylist()
        assert _rows(got) == _rows(alone.tables[name].to_pylist()), name


def _frame(events: list[dict[str, Any]]) -> Any:
    from tests.engine.conftest import frame

    return frame([{**e, "ingest_ms": WRITTEN_AT} for e in events])


@seed(20261123)
@FUZZ
@given(palette=palettes())
def test_100000_fuzzed_records_in_a_files_stream(
    job: Job, palette: Palette, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """100,000 fuzzed records among the quick scenario's 1,813 events, one JSON-lines file read
    in batches of 20,000. A record is one line: the generator writes no ``\\n`` inside one (JSON
    text escapes it; garbage has it replaced), so the records the source counts are exactly the
    lines written; bytes that are not UTF-8 reach the parser as replacement characters."""
    tmp = tmp_path_factory.mktemp("fuzz-files")
    batch = 20_000
    records, labels = mixed_stream(VALID, 100_000, palette, batch)
    assert set(labels) == {"", *MUTATIONS}
    folder = tmp / "in"
    folder.mkdir()
    path = folder / "part-00000.jsonl"
    path.write_bytes(b"\n".join(records) + b"\n")
    os.utime(path, ns=(WRITTEN_AT * 1_000_000,) * 2)
    assert count_records(path) == len(records)
    result = job(
        "run", "--source", "files", "--path", str(folder), "--once",
        "--output", str(tmp / "out"), "--checkpoint", str(tmp / "ck"),
        "--max-records-per-batch", str(batch), cwd=tmp,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _check(tmp / "out", len(records), ("quarantined", "late", "duplicates"))


@seed(20261124)
@FUZZ
@given(palette=palettes())
def test_fuzzed_kafka_values_tombstones_and_bytes_are_each_counted(
    kafka: str, palette: Palette, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The Kafka source gets any bytes: 5,000 fuzzed values (newlines inside, not UTF-8),
    empty values and tombstones (no value) among the quick scenario's events, on one partition
    read in batches of 2,000."""
    tmp = tmp_path_factory.mktemp("fuzz-kafka")
    batch = 2_000
    records, _ = mixed_stream(VALID, 5_000, palette, batch, newlines=True)
    values: list[bytes | None] = [None if r == b"" and i % 2 else r for i, r in enumerate(records)]
    assert None in values and b"" in values and any(v and b"\n" in v for v in values)
    config = tmp / "job.yaml"
    config.write_text("decisions_topic: ''\n")
    topic = tmp.name  # each example a topic of its own on the worker's broker
    # idempotent, so that the log keeps the order sent: the topic is made by the first produce,
    # whose first batches fail and are retried, and a plain producer may then put them behind
    # later ones (the job's second batch of offsets held the scenario's last events, and it
    # counted 1,309 of 1,813 events valid, the rest late: twice in process, once in a process
    # of its own)
    producer = Producer({"bootstrap.servers": kafka, "enable.idempotence": True})
    for v in values:
        producer.produce(topic, value=v, partition=0, timestamp=WRITTEN_AT)
    assert producer.flush(60) == 0
    result = faultline(
        "run", "--source", "kafka", "--kafka-bootstrap", kafka, "--topic", topic,
        "--config", str(config), "--max-offsets-per-trigger", str(batch), "--once",
        "--output", str(tmp / "out"), "--checkpoint", str(tmp / "ck"), cwd=tmp,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _check(tmp / "out", len(values), ("quarantined", "duplicates"))
    origins = set(table(tmp / "out", "quarantine")["origin"])
    assert {f"{topic}/0/{i}" for i, v in enumerate(values) if not v} <= origins
