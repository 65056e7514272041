"""The closed loop on a real RocketMQ, short (``streaming.bench.closed_loop`` with one fault): real
5.3.3 producers report every attempt through faultline's Java hook to the worker's Kafka, the job
(a ``faultline run --source kafka`` subprocess) reads them through Spark's Kafka source and
publishes its decisions, half of the producers follow them, and broker-b of a two-broker testbed
answers 700 ms late for 20 s. What users see is checked, never how fast: the job's tables hold the
producers' reports, a decision about the slow broker reached the topic and every follower's table,
the followers sent fewer messages to the slow broker than the producers alone, and what the bench
prints is what the run recorded.

The producers are 5.3.3's and the fault a slow broker: RocketMQ 5.x isolates a broker for 2 s after
an answer of 700 ms, so a producer alone goes back to it every few seconds, and a follower only
where faultline's decisions let it. A 4.x producer isolates it for 30 s (and a frozen broker for 10
minutes) by itself, and would hide whether the loop works; on a frozen broker, 5.x producers that
follow leak through a probation the job publishes while the broker is out of the route (the
closed loop's page, docs/closed-loop.md), and the relation would be a matter of luck."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable

from streaming.bench import closed_loop
from streaming.bench.closed_loop import Run

pytestmark = pytest.mark.jvm
SICK = "broker-b"
KEEP_AWAY = ("ISOLATED", "PROBING", "OUT_OF_ROUTE")


@pytest.fixture(scope="module")
def loop(kafka: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, Path]]:
    folder = tmp_path_factory.mktemp("closed-loop")
    tag = uuid.uuid4().hex[:8]
    run = closed_loop.run(
        folder,
        per_version=3,
        rate=5.0,
        many=0,
        faults=("slow",),
        fault_s=20.0,
        gap_s=5.0,
        warmup_s=8.0,
        groups=("5.3.3",),
        brokers=2,
        kafka=kafka,
        topics=(f"loop-events-{tag}", f"loop-decisions-{tag}"),
    )
    yield run, folder / "job" / "out"


def _table(out: Path, name: str) -> pd.DataFrame:
    return DeltaTable(str(out / name)).to_pandas()


def test_the_job_read_every_producers_reports_from_kafka(loop: tuple[Run, Path]) -> None:
    run, out = loop
    batches = _table(out, "batches")
    assert batches["input"].sum() == run.job["records_on_topic"] > 0
    items = _table(out, "fault_items")
    reported = set(items["producer_id"].dropna())
    assert {m.producer_id for m in run.members} <= reported
    # the slow answers, as the Java hook reported them, isolated broker-b in the cluster scope
    decisions = _table(out, "broker_decisions")
    slow = decisions[
        (decisions["scope"] == "cluster")
        & (decisions["broker_name"] == SICK)
        & decisions["decision"].isin(["ISOLATE", "EXTEND"])
        & (decisions["effective_at"] >= run.faults[0].start_ms)
    ]
    assert len(slow) > 0
    assert slow["reason"].str.match(r"SEND_OK after [7-9]\d\d ms").any()


def test_a_decision_about_the_slow_broker_reached_the_topic_and_every_follower(
    loop: tuple[Run, Path],
) -> None:
    run, _ = loop
    fault = run.faults[0]
    on_topic = [
        d
        for d in run.decisions
        if d["key"].endswith(f"/{SICK}")
        and d["value"]["state"] in KEEP_AWAY
        and fault.start_ms <= d["value"]["effective_at"] < fault.end_ms
    ]
    assert on_topic
    followers = {m.producer_id for m in run.members if m.follows}
    applied = {
        r["id"]
        for r in run.records
        if r["k"] == "applied"
        and r["broker"] == SICK
        and r["until"] > r["at"]
        and fault.start_ms <= (r["effective_at"] or 0) < fault.end_ms
    }
    assert applied == followers
    # and each follower's own table held broker-b during the fault
    held = {
        r["id"]
        for r in run.records
        if r["k"] == "held" and SICK in r["brokers"] and fault.start_ms <= r["at"] < fault.end_ms
    }
    assert followers <= held
    # the producers alone were told nothing
    alone = {m.producer_id for m in run.members if not m.follows}
    assert not alone & {r["id"] for r in run.records if r["k"] == "applied"}


def test_followers_sent_fewer_messages_to_the_slow_broker(loop: tuple[Run, Path]) -> None:
    run, _ = loop
    rows = {r.follows: r for r in closed_loop.rows(run)}
    assert rows[True].producers == rows[False].producers == 3
    assert rows[True].sick_sends < rows[False].sick_sends


def test_the_printed_numbers_come_from_the_run(loop: tuple[Run, Path]) -> None:
    run, _ = loop
    fault = run.faults[0]
    printed = closed_loop.report(run)
    cells = []
    for follows in (True, False):
        crew = {m.producer_id for m in run.members if m.follows == follows}
        sick = sum(
            1
            for r in run.records
            if r["k"] == "attempt"
            and r["id"] in crew
            and r["broker"] == SICK
            and fault.start_ms <= r["start"] < fault.end_ms
        )
        sends = [
            r
            for r in run.records
            if r["k"] == "send"
            and r["id"] in crew
            and fault.start_ms <= r["start"] < fault.span_end_ms
        ]
        cells.append((len(sends), sick, sum(1 for r in sends if not r["ok"])))
    (fs, fsick, ffailed), (as_, asick, afailed) = cells
    row = f"| slow | 5.3.3 | 3 / 3 | {fs} / {as_} | {fsick} / {asick} | {ffailed} / {afailed} |"
    assert row in printed, printed
    first = min(
        (
            d
            for d in run.decisions
            if d["key"].endswith(f"/{SICK}")
            and d["value"]["state"] in KEEP_AWAY
            and d["value"]["effective_at"] >= fault.start_ms
        ),
        key=lambda d: d["ts"],
    )
    delay = re.search(r"\| slow \| broker-b \| [\d.]+ s \| ([\d.]+) s \((\w+)\)", printed)
    assert delay is not None, printed
    assert delay.group(1) == f"{(first['ts'] - fault.start_ms) / 1000:.2f}"
    assert delay.group(2) == first["value"]["decision"]
