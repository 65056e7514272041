"""What the job's metrics (:mod:`streaming.job.metrics`) are made from, without Spark: an idle
trigger's progress, which keeps ``FaultlineStalled`` quiet on a job that has nothing to read,
and each key's figures, which the task makes only while the endpoint is on."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from streaming.config import CONF_DIR, JobConfig, load_job_config
from streaming.job import run
from streaming.job.metrics import Metrics
from streaming.job.progress import BatchProgress
from streaming.job.stateful import run_key
from udfs import engine

T0 = 1_795_255_200_000  # 2026-11-21 10:00:00 UTC
STARTED = 1_800_000_000.0
"""The wall clock (Unix seconds) when the job started."""


class _Progress:
    """A ``QueryProgressEvent`` as PySpark hands it to the listener: its progress as JSON."""

    def __init__(self, progress: dict[str, Any]) -> None:
        self.progress = type("StreamingQueryProgress", (), {"json": json.dumps(progress)})()


def _stalled_after() -> float:
    """The seconds without progress after which the shipped ``FaultlineStalled`` fires (its
    ``for`` aside)."""
    rules = yaml.safe_load((CONF_DIR / "prometheus" / "alerts.yaml").read_text())
    stalled = next(
        r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "FaultlineStalled"
    )
    expr = stalled["expr"].strip()
    prefix = "time() - faultline_last_progress_timestamp_seconds > "
    assert expr.startswith(prefix), expr
    return float(expr.removeprefix(prefix))


def test_an_idle_trigger_is_progress_that_keeps_the_stalled_alert_quiet() -> None:
    """Spark calls ``onQueryIdle`` on each trigger that finds nothing to read: the listener
    hands it on as ``Metrics.progress(None)``, which moves the last progress timestamp and
    observes no batch. A job idle for 200 s with idle triggers is not stalled; without them it
    would be (120 s)."""
    now = [STARTED]
    metrics = Metrics(clock=lambda: now[0])
    listener = BatchProgress(io.StringIO(), metrics)
    value = metrics.registry.get_sample_value
    assert value("faultline_last_progress_timestamp_seconds") == STARTED
    assert _stalled_after() == 120

    now[0] = STARTED + 5  # a batch of 2,000 records in 1.5 s
    listener.onQueryProgress(
        _Progress({"batchId": 0, "inputRowsPerSecond": 400.0, "batchDuration": 1_500})
    )
    assert value("faultline_last_progress_timestamp_seconds") == STARTED + 5
    assert value("faultline_batch_duration_seconds_count") == 1
    assert value("faultline_batch_duration_seconds_sum") == 1.5
    assert value("faultline_input_records_per_second") == 400.0

    for idle in (90, 180):  # nothing to read: idle triggers
        now[0] = STARTED + idle
        listener.onQueryIdle(object())
    assert value("faultline_last_progress_timestamp_seconds") == STARTED + 180
    assert value("faultline_batch_duration_seconds_count") == 1  # no batch observed
    assert value("faultline_batch_duration_seconds_sum") == 1.5
    last = value("faultline_last_progress_timestamp_seconds")
    assert last is not None and STARTED + 200 - last == 20  # at 200 s: 20 s < 120 s, quiet


def _raw(records: list[dict[str, Any] | str]) -> pd.DataFrame:
    """Records as the operator receives them (:data:`streaming.job.stateful.RECORDS`)."""
    values = [r if isinstance(r, str) else json.dumps({"cluster": "c", **r}) for r in records]
    n = len(values)
    return pd.DataFrame(
        {"value": values, "origin": ["t"] * n, "ingest_ms": [T0 + 3_000] * n, "lost": [None] * n}
    )


def _send(eid: str, t: int, outcome: str, latency: int) -> dict[str, Any]:
    return {"kind": "send_result", "event_id": eid, "event_time": T0 + t, "producer_id": "p",
            "client_profile": "rocketmq-4.9", "topic": "T", "broker_name": "a", "queue_id": 0,
            "latency_ms": latency, "outcome": outcome, "attempt": 0, "mode": "SYNC",
            "message_id": f"m-{eid}"}  # fmt: skip


RECORDS: list[dict[str, Any] | str] = [
    {"kind": "route", "event_id": "r0", "event_time": T0, "topic": "T",
     "brokers": [{"broker_name": b, "write_queue_nums": 2, "perm": 6} for b in "ab"]},
    _send("e1", 1_000, "SEND_OK", 5),
    _send("e2", 2_000, "REMOTING_EXCEPTION", 3_000),
    "{not json",
]  # fmt: skip
"""Brokers a and b in topic T's route; a 4.9 producer's failed send isolates a, in its own
FaultTable and in the cluster's (5.x); a record that is not JSON."""


def _counters(tmp_path: Path, measure: bool) -> dict[str, Any]:
    _, metas = run_key("c", engine.WHOLE, None, _raw(RECORDS), engine.EngineConfig(), tmp_path,
                       7, "app", measure=measure)  # fmt: skip
    (row,) = [m for m in metas if m["table"] is None]
    return row


def test_a_task_makes_its_figures_only_while_the_endpoint_is_on(tmp_path: Path) -> None:
    """Without the endpoint a key's counter row has no figures (the gauges are not computed);
    with it, the gauges of the state the batch left and the rows it counted, which the metrics
    then serve: broker a isolated in both scopes, one of topic T's two writable brokers
    isolated, a record quarantined as malformed JSON."""
    off = _counters(tmp_path / "off", measure=False)
    assert off["figures"] is None
    on = _counters(tmp_path / "on", measure=True)
    assert {k: on[k] for k in ("valid", "quarantined", "clock")} == {
        "valid": 3,
        "quarantined": 1,
        "clock": T0 + 2_000,
    }
    assert json.loads(on["figures"]) == {
        "cluster": "c",
        "shard": 0,
        "held": [["cluster", "ISOLATE", 1], ["producer", "ISOLATE", 1]],
        "brokers": {"a": "ISOLATE"},
        "topics": {"T": [2, 1]},
        "delayed": {},
        "halves": 0,
        "broker_decisions": [["cluster", "ISOLATE", 1], ["producer", "ISOLATE", 1]],
        "quarantine": [["MALFORMED_JSON", 1]],
        "publish_failures": 0,
    }
    metrics = Metrics(clock=lambda: STARTED)
    metrics.committed([on], new=True)
    value = metrics.registry.get_sample_value
    c = {"cluster": "c"}
    assert value("faultline_broker_isolated", {**c, "broker": "a", "decision": "ISOLATE"}) == 1
    assert value("faultline_topic_writable_brokers", {**c, "topic": "T"}) == 2
    assert value("faultline_topic_isolated_brokers", {**c, "topic": "T"}) == 1
    decisions = {**c, "scope": "cluster", "decision": "ISOLATE"}
    assert value("faultline_decisions_total", decisions) == 1
    assert value("faultline_quarantined_records_total", {**c, "reason": "MALFORMED_JSON"}) == 1
    assert value("faultline_records_total", {**c, "outcome": "valid"}) == 3
    assert value("faultline_event_time_seconds", c) == (T0 + 2_000) / 1000


@pytest.mark.parametrize(("port", "served"), [(None, False), (0, True)])
def test_the_job_gets_metrics_only_with_a_metrics_port(
    port: int | None, served: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``metrics.port`` unset: the job runs without :class:`Metrics` (so its tasks make no
    figures); set (0: any free port), it gets the served one."""
    given: list[Metrics | None] = []

    def job(config: JobConfig, out: Any, operator: Any, metrics: Metrics | None) -> int:
        given.append(metrics)
        return 0

    monkeypatch.setattr(run, "_job", job)
    out = io.StringIO()
    config = load_job_config(None, {"metrics": {"port": port}})
    assert run._run(config, out, None) == 0
    assert len(given) == 1 and isinstance(given[0], Metrics) is served
    assert ("faultline: metrics at http://127.0.0.1:" in out.getvalue()) is served
