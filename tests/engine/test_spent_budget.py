"""The cluster scope does not isolate a healthy broker for a retry that the send's spent timeout
failed (a latency spike longer than ``sendMsgTimeout``); the producer scope does, as RocketMQ."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.engine.conftest import frame, send
from udfs import engine

CONFIG = engine.EngineConfig()


def _spike_send(n: int, t: int, retry_latency: int) -> list[dict[str, Any]]:
    """Attempt 0 times out on sick broker b after the whole 3 s budget; attempt 1 goes to
    healthy broker c with ``3000 - 3000 = 0`` ms left (or fails for real after a few ms)."""
    mid = {"message_id": f"m{n}"}
    return [
        send(f"s{n}-0", t + 3_000, "b", "REMOTING_EXCEPTION", latency=3_000, **mid),
        send(f"s{n}-1", t + 3_000 + retry_latency, "c", "REMOTING_EXCEPTION",
             latency=retry_latency, attempt=1, **mid),
    ]  # fmt: skip


def _isolated(rows: list[dict[str, Any]], scope: str) -> set[str]:
    return {
        r["broker_name"]
        for r in rows
        if r["scope"] == scope and r["decision"] in ("ISOLATE", "EXTEND")
    }


def _run(batches: list[list[dict[str, Any]]], config: engine.EngineConfig) -> list[dict[str, Any]]:
    state, rows = None, []
    for events in batches:
        step = engine.advance("c", state, frame(events), config)
        state = step.state
        if "broker_decisions" in step.tables:
            rows += step.tables["broker_decisions"].to_pylist()
    return rows


@pytest.mark.parametrize("split", [False, True])
def test_a_retry_that_inherited_no_budget_isolates_no_healthy_broker(split: bool) -> None:
    events = _spike_send(1, 0, retry_latency=0)
    batches = [events[:1], events[1:]] if split else [events]  # the retry in the next batch
    rows = _run(batches, CONFIG)
    assert _isolated(rows, "cluster") == {"b"}
    assert _isolated(rows, "producer") == {"b", "c"}  # RocketMQ's own rule, reproduced


def test_a_retry_that_fails_with_budget_left_isolates_its_broker() -> None:
    first = send("s-0", 1_000, "b", "REMOTING_EXCEPTION", latency=1_000, message_id="m")
    retry = send("s-1", 1_005, "c", "REMOTING_EXCEPTION", latency=5, attempt=1, message_id="m")
    assert _isolated(_run([[first, retry]], CONFIG), "cluster") == {"b", "c"}


def test_the_rule_can_be_turned_off() -> None:
    rows = _run(
        [_spike_send(1, 0, retry_latency=0)], dataclasses.replace(CONFIG, ignore_spent_budget=False)
    )
    assert _isolated(rows, "cluster") == {"b", "c"}
