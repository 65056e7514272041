"""Delay queues end to end: events from files, the real Spark job, the Delta tables it writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.engine.conftest import T0, beat, beats, consume, failed, send
from tests.streaming.conftest import Job, table
from udfs.rocketmq import DelayLevels

pytestmark = pytest.mark.jvm

LEVELS = DelayLevels.parse()
FIRST_CLOCK = 60_000


def _write(folder: Path, name: str, events: list[dict[str, Any]]) -> None:
    folder.mkdir(exist_ok=True)
    lines = [json.dumps({**e, "cluster": "c"}) for e in events]
    (folder / name).write_text("\n".join(lines) + "\n")


def _stored(eid: str, t: int, level: int) -> dict[str, Any]:
    return send(eid, t, "broker-a", delay_level=level, queue_id=1)


def test_messages_wait_for_event_time_and_a_quiet_stream_releases_them(
    job: Job, tmp_path: Path
) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("max_redeliveries: 2\ncluster_profile: rocketmq-4.9\n")
    delayed = [_stored(f"d{level:03d}", level, level) for level in (*range(-1, 20), 100)]
    retries = [consume(f"c{times:02d}", 100 + times, times) for times in (0, 15, 16)]
    retries.append(consume("c16-47", 120, 16, client_profile="rocketmq-4.7"))
    chain = [failed(f"f{n}", 200 + n, n, message_id="m-failing") for n in range(3)]
    busy = [*delayed, *retries, *chain, beat("hb-first", FIRST_CLOCK, "broker-a")]
    folder = tmp_path / "in"
    _write(folder, "part-00000.jsonl", busy)
    args = ("run", "--source", "files", "--path", str(folder), "--once", "--config", str(config),
            "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"))  # fmt: skip
    first = job(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]

    out = tmp_path / "out"
    entries = table(out, "schedule_entries").set_index("event_id")
    released = table(out, "redeliveries").set_index("event_id")
    # delayed sends: levels 1..18 wait exactly their delay; above 18 clamp; 0 and -1 do not wait
    assert {f"d{level:03d}" for level in range(1, 20)} | {"d100"} <= set(entries.index)
    assert not {"d000", "d-01"} & set(entries.index)
    for eid, r in entries.iterrows():
        assert r["schedule_queue_id"] == r["delay_level"] - 1
        assert r["deliver_at"] == r["store_time"] + LEVELS.delay_ms(r["delay_level"]), eid
    assert entries.loc["d019", "delay_level"] == entries.loc["d100", "delay_level"] == 18
    # send-back: 0 -> level 3 (10 s), 15 -> level 18 (2 h), 16 -> DLQ at once (4.9), parked (4.7)
    assert entries.loc["c00", ["real_topic", "delay_level"]].tolist() == ["%RETRY%cg", 3]
    assert entries.loc["c15", ["real_topic", "delay_level"]].tolist() == ["%RETRY%cg", 18]
    assert entries.loc["c16-47", ["real_topic", "delay_level", "dlq"]].tolist() == [
        "%DLQ%cg",
        18,
        True,
    ]
    assert "c16" not in entries.index
    assert released.loc["c16", ["target_topic", "kafka_topic", "dlq"]].tolist() == [
        "%DLQ%cg",
        ".25DLQ.25cg",
        True,
    ]
    # a failing message: level 3, then 4, then the DLQ after the configured 2 redeliveries
    assert entries.loc[["f0", "f1"], "delay_level"].tolist() == [3, 4]
    assert released.loc["f2", ["target_topic", "dlq"]].tolist() == ["%DLQ%pg", True]
    # nothing leaves before the clock (the latest event time) reaches its deliver_at
    clock = T0 + FIRST_CLOCK
    from_queues = released[released["schedule_queue_id"].notna()]
    assert set(from_queues.index) == set(entries.index[entries["deliver_at"] <= clock])
    assert (from_queues["deliver_at"] <= clock).all()

    # then the stream goes quiet: only heartbeats, every 30 s, for a little over two hours
    _write(folder, "part-00001.jsonl", beats(LEVELS.delay_ms(18) + 300_000))
    second = job(*args, cwd=tmp_path)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    released = table(out, "redeliveries").set_index("event_id")
    assert released.index.is_unique
    from_queues = released[released["schedule_queue_id"].notna()]
    assert set(from_queues.index) == set(entries.index)  # every entry left its queue, once
    for eid, r in from_queues.iterrows():
        assert r["deliver_at"] == entries.loc[eid, "deliver_at"]
        assert r["target_topic"] == entries.loc[eid, "real_topic"]
    assert released.loc["c16-47", ["target_topic", "dlq"]].tolist() == ["%DLQ%cg", True]
    # the summary: per level, scheduled / released / waiting / to DLQ
    lines = second.stdout.splitlines()
    assert "delay queues (SCHEDULE_TOPIC_XXXX): level, scheduled, released, waiting, to DLQ" in (
        second.stdout
    )
    assert any(line.split() == ["level", "18", "5", "4", "0", "1"] for line in lines), lines
    assert any(line.split() == ["DLQ", "at", "once", "0", "0", "0", "2"] for line in lines), lines
