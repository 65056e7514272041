"""A job that keeps running: micro-batches with nothing to write, triggers with no data, and a
cluster that is silent for six hours, on the real ``faultline run`` without ``--once``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from streaming.config import CONF_DIR
from tests.engine.conftest import T0, beat, consume, route, send
from tests.streaming.conftest import INT, batches_committed, start, table

pytestmark = pytest.mark.jvm

HOUR = 3_600_000

RULES_ONLY = CONF_DIR / "rocketmq-only.yaml"
"""RocketMQ's rules alone: the test reads RocketMQ's exact decisions."""


def _write(folder: Path, name: str, events: list[dict[str, Any]]) -> None:
    """A file appears whole, as the files source requires."""
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({**e, "cluster": "c"}) + "\n" for e in events))
    os.replace(tmp, folder / name)


def _wait_for(output: Path, batches: int, proc: Any, limit: float = 180) -> None:
    deadline = time.time() + limit
    while batches_committed(output) < batches:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.time() < deadline, f"batch {batches - 1} not committed in {limit} s"
        time.sleep(0.1)


def test_quiet_batches_empty_triggers_and_six_hours_of_silence(tmp_path: Path) -> None:
    folder, output = tmp_path / "in", tmp_path / "out"
    folder.mkdir()
    proc = start(
        "run",
        "--source",
        "files",
        "--path",
        str(folder),
        "--output",
        str(output),
        "--checkpoint",
        str(tmp_path / "ck"),
        "--config",
        str(RULES_ONLY),
        cwd=tmp_path,
    )  # fmt: skip  RocketMQ's exact decisions: its rules alone
    try:
        # 1. traffic: p (4.9) fails on broker a (the cluster's 5.x view isolates it for 10 s, p's
        # own table for 10 min) and parks a message for 10 s (level 3) and one for 2 h (18)
        _write(
            folder,
            "part-00001.jsonl",
            [
                route("r", 0, "a", "b"),
                beat("ha0", 0, "a"),
                beat("hb0", 0, "b"),
                send("s1", 1000, "a", "REMOTING_EXCEPTION", 0),
                send("s2", 2000, "b", delay_level=3),
                send("s3", 3000, "b", delay_level=18),
            ],
        )
        _wait_for(output, 1, proc)
        # 2. a batch of heartbeats only: the clock passes the cluster's isolation and the delay
        _write(folder, "part-00002.jsonl", [beat("ha1", 30_000, "a"), beat("hb1", 30_000, "b")])
        _wait_for(output, 2, proc)
        # 3. a batch of consume successes only
        _write(
            folder,
            "part-00003.jsonl",
            [consume(f"c{n}", 31_000 + n, 0, status="CONSUME_SUCCESS") for n in range(3)],
        )
        _wait_for(output, 3, proc)
        # 4. nothing at all for a few triggers (one a second)
        time.sleep(4)
        assert proc.poll() is None and batches_committed(output) == 3
        # 5. six hours later the cluster is back
        _write(
            folder,
            "part-00004.jsonl",
            [beat("ha2", 6 * HOUR, "a"), beat("hb2", 6 * HOUR, "b"), send("s4", 6 * HOUR, "b")],
        )
        _wait_for(output, 4, proc)
    finally:
        proc.send_signal(INT)
        stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout[-3000:]
    assert "faultline: stopped" in stdout

    batches = table(output, "batches").sort_values("batch_id")
    assert batches["input"].tolist() == [6, 2, 3, 3]
    assert batches["valid"].tolist() == [6, 2, 3, 3]
    assert batches[["quarantined", "late", "duplicates"]].sum().tolist() == [0, 0, 0]
    decided = table(output, "broker_decisions")
    rows = sorted(
        (r.batch_id, r.scope, r.broker_name or "-", r.decision, r.effective_at - T0)
        for r in decided.fillna({"broker_name": ""}).itertuples()
    )
    assert rows == [
        (0, "cluster", "a", "ISOLATE", 1000),
        (0, "producer", "a", "ISOLATE", 1000),
        (1, "cluster", "a", "RESTORE", 11_000),
        # silence: both brokers leave the route at the first NameServer scan 120 s after their
        # last heartbeat (at +30 s), p's own isolation ends, and the first heartbeat returns them
        (3, "cluster", "a", "ROUTE_EXPIRED", 160_000),
        (3, "cluster", "a", "ROUTE_RESTORED", 6 * HOUR),
        (3, "cluster", "b", "ROUTE_EXPIRED", 160_000),
        (3, "cluster", "b", "ROUTE_RESTORED", 6 * HOUR),
        (3, "producer", "-", "EVICTED", 3000 + HOUR),  # an hour after p's last send
        (3, "producer", "a", "RESTORE", 601_000),
    ]
    released = table(output, "redeliveries")
    assert sorted((r.batch_id, r.message_id, r.deliver_at - T0) for r in released.itertuples()) == [
        (1, "m-s2", 12_000),
        (3, "m-s3", 3000 + 2 * HOUR),  # due during the silence, released when it ends
    ]
