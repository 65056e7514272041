"""faultline against real RocketMQ: a NameServer and three brokers from RocketMQ's jars
(``streaming.sim.rocketmq``), real producers of the 4.7.1, 4.9.7 and 5.3.3 clients through every
kind of fault, and the real clients' own fault tables as the judge (``streaming.tools.judge``).

One run serves every test: seven producers send for about 50 s through five faults, then two
transactional producers and a consumer that asks for retries run on the quiet cluster; faultline
reads what they recorded (with the routes and the brokers' heartbeats) in one ``--once`` run on
the worker's Spark session."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streaming import jars
from streaming.sim import rocketmq
from streaming.tools import judge
from tests.streaming.conftest import Job

pytestmark = pytest.mark.jvm
SUITE = (
    ("rocketmq-4.7", "SYNC", True),
    ("rocketmq-4.7", "SYNC", False),
    ("rocketmq-4.9", "SYNC", True),
    ("rocketmq-4.9", "ASYNC", True),
    ("rocketmq-4.9", "SYNC", False),
    ("rocketmq-5", "SYNC", True),
    ("rocketmq-5", "ASYNC", True),
)
"""The producers of the suite's run: each version SYNC, ASYNC where it differs (4.9.7, 5.3.3), and
4.7.1 and 4.9.7 without latency fault. A 4.x producer with it isolates a broker for 10 minutes
at its first failure, so it retries about once a run, and not at all when that failure is a
timeout (a request in flight when the connection went); without it, a 4.x producer retries at
every failure, and 5.3.3 isolates for seconds: every version has retries to judge in every run."""


@dataclass
class Judged:
    run: judge.Run
    tables: judge.Tables
    verdicts: list[judge.Verdict]
    heartbeats: list[dict[str, Any]]

    def events(self, kind: str = "send_result") -> list[dict[str, Any]]:
        return [
            e
            for folder in self.run.producers
            for e in judge.Record.load(folder).events
            if e["kind"] == kind
        ]

    def window(self, kind: str) -> tuple[int, int]:
        return next(t for f, t in self.run.faults.items() if f.kind == kind)

    def verdict(self, profile: str, mode: str = "SYNC", on: bool = True) -> judge.Verdict:
        return next(
            v for v in self.verdicts if (v.profile, v.mode, v.latency_fault) == (profile, mode, on)
        )


@pytest.fixture(scope="module")
def judged(job: Job, tmp_path_factory: pytest.TempPathFactory) -> Judged:
    folder = tmp_path_factory.mktemp("rocketmq")
    with rocketmq.testbed(folder / "testbed") as bed:
        # seven of the judge's nine producers, at half its rate: the testbed's JVMs slow what the
        # other worker runs (its Kafka outage tests timed out beside all nine)
        run = judge.record_run(bed, folder, producers=SUITE, rate=10.0)
        heartbeats = list(bed.heartbeats)
    out = folder / "faultline"
    result = job(
        "run", "--source", "files", "--path", str(run.inputs), "--once",
        "--output", str(out / "out"), "--checkpoint", str(out / "ck"), *judge.JOB_FLAGS,
        cwd=folder,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    tables = judge.Tables.read(out / "out")
    routes = judge.routes(run.inputs)
    verdicts = [judge.judge(judge.Record.load(f), tables, routes) for f in run.producers]
    print(judge.table(verdicts, judge.cluster_isolations(verdicts, tables)))
    return Judged(run, tables, verdicts, heartbeats)


def _during(events: list[dict[str, Any]], window: tuple[int, int], **match: Any) -> list[Any]:
    start, end = window
    return [
        e
        for e in events
        if start <= e["event_time"] <= end and all(e.get(k) == v for k, v in match.items())
    ]


def test_a_slow_broker_answers_as_late_as_asked(judged: Judged) -> None:
    start, end = judged.window("slow")
    sends = _during(judged.events(), (start, end), broker_name="broker-b")
    latencies = [
        e["latency_ms"]
        for e in sends
        if e["outcome"] == "SEND_OK" and e["event_time"] - e["latency_ms"] >= start  # sent in it
    ]
    assert latencies, "no producer sent to the slow broker"
    assert min(latencies) >= judge.SLOW_MS
    assert statistics.median(latencies) < judge.SLOW_MS + 100


def test_a_frozen_broker_times_sends_out(judged: Judged) -> None:
    start, end = judged.window("freeze")
    sends = _during(judged.events(), (start, end + 3_500), broker_name="broker-c")
    timeouts = [e for e in sends if e["outcome"] == "REMOTING_EXCEPTION"]
    assert timeouts
    assert all(e["latency_ms"] >= 2_900 for e in timeouts if "Timeout" in e["exception"])


def test_an_unreachable_broker_fails_at_once_and_the_send_is_retried(judged: Judged) -> None:
    sends = _during(judged.events(), judged.window("unreachable"))
    failed = [e for e in sends if e["broker_name"] == "broker-a" and e["outcome"] != "SEND_OK"]
    refused = [e for e in failed if e["mode"] == "SYNC" and e["latency_ms"] < 1_000]
    assert refused  # a request already sent when the connection was reset waits out its timeout
    retried = {e["message_id"] for e in sends if e["attempt"] > 0 and e["outcome"] == "SEND_OK"}
    assert retried & {e["message_id"] for e in refused}


def test_the_nameserver_drops_a_killed_broker_and_takes_it_back(judged: Judged) -> None:
    """The broker is out from the kill until it registers again, a JVM start after ``end``
    (when the restart began): on busy cores the NameServer may drop it only after that."""
    start, end = judged.window("kill")
    routes = judge.routes(judged.run.inputs)
    brokers = [({b["broker_name"] for b in r["brokers"]}, r["event_time"]) for r in routes]
    dropped = [t for names, t in brokers if "broker-a" not in names and t >= start]
    assert dropped and min(dropped) < start + rocketmq.HEARTBEAT_TIMEOUT_MS
    assert any("broker-a" in names and t > max(end, min(dropped)) for names, t in brokers)


def test_a_broker_without_heartbeats_leaves_the_route_and_faultline_sees_it(
    judged: Judged,
) -> None:
    """The broker's requests to the NameServer go unanswered; the broker closes the connection
    after a timed-out one, and the NameServer drops a broker whose connection closed at once,
    without waiting out ``heartbeat_timeout``."""
    start, end = judged.window("heartbeat")
    beats = [h["event_time"] for h in judged.heartbeats if h["broker_name"] == "broker-b"]
    assert not [t for t in beats if start + 1_000 < t < end]
    routes = judge.routes(judged.run.inputs)
    gone = [
        r["event_time"]
        for r in routes
        if start <= r["event_time"] <= end
        and "broker-b" not in {b["broker_name"] for b in r["brokers"]}
    ]
    assert gone
    expired = [
        r
        for r in judged.tables.broker_decisions
        if r["decision"] == "ROUTE_EXPIRED" and r["broker_name"] == "broker-b"
    ]
    assert expired and start <= min(int(r["effective_at"]) for r in expired) <= end


@pytest.mark.parametrize("profile", rocketmq.CLIENTS)
def test_faultline_holds_the_fault_table_each_sync_producer_held(
    judged: Judged, profile: str
) -> None:
    verdict = judged.verdict(profile)
    assert verdict.items > 750  # reads of the client's table, each broker compared
    assert verdict.unexplained() == []
    assert verdict.largest_gap_ms <= judge.TOLERANCE_MS
    if profile == "rocketmq-5":
        assert {d.kind for d in verdict.item_differences} <= {"first-send", "clock-bracket"}


def test_a_producer_without_latency_fault_holds_nothing_and_neither_does_faultline(
    judged: Judged,
) -> None:
    verdict = judged.verdict("rocketmq-4.9", on=False)
    assert verdict.attempts > 250 and verdict.items == 0


@pytest.mark.parametrize("profile", ["rocketmq-4.9", "rocketmq-5"])
def test_async_producers_differ_only_where_no_hook_sees(judged: Judged, profile: str) -> None:
    """An ASYNC producer's table differs from faultline's where its callback retried unseen,
    where a send was out, or in a latency only (the judge's ``async-*`` kinds,
    docs/real-rocketmq.md)."""
    verdict = judged.verdict(profile, mode="ASYNC")
    assert verdict.attempts > 250 and verdict.items > 750
    assert verdict.unexplained() == []
    assert {d.kind for d in verdict.item_differences} <= {
        "first-send", "clock-bracket", "4.x-selection", "async-retry", "async-dispatch",
        "async-order",
    }  # fmt: skip


def test_every_retry_went_where_faultline_or_the_round_robin_said(judged: Judged) -> None:
    """A retry goes to faultline's broker, or to the one RocketMQ's round-robin gives from the
    failed queue where faultline's own index points elsewhere (``index``, docs/real-rocketmq.md)."""
    sync = [v for v in judged.verdicts if v.mode == "SYNC"]
    assert {v.profile for v in sync if v.retries} == set(rocketmq.CLIENTS)
    assert [r for v in sync for r in v.retry_differences] == []
    assert judged.verdict("rocketmq-4.9", on=False).retries >= 3


def test_the_cluster_isolates_no_later_than_the_first_real_producer(judged: Judged) -> None:
    isolations = judge.cluster_isolations(judged.verdicts, judged.tables)
    assert {broker for broker, _, _ in isolations} == {"broker-a", "broker-b", "broker-c"}
    assert [(b, real) for b, real, mine in isolations if mine is None] == []


@pytest.mark.parametrize("profile", judge.TRANSACTIONAL)
def test_the_brokers_check_backs_are_faultlines_checks(judged: Judged, profile: str) -> None:
    folder = judged.run.folder / f"tx-{profile.removeprefix('rocketmq-')}"
    checks = judge.judge_checks(judge.Record.load(folder), judged.tables)
    assert checks.transactions >= 20 and checks.checks >= checks.transactions // 2
    assert checks.differences == []
    assert {"COMMIT", "ROLLBACK", "DISCARDED"} <= set(checks.ends)


def test_the_brokers_retries_and_dlq_are_faultlines_redeliveries(judged: Judged) -> None:
    retries = judge.judge_retries(judged.run.consumer, judged.tables)
    assert retries.asked >= 10 and retries.redelivered >= 5
    # in SCHEDULE_TOPIC_XXXX, queue level - 1; a retry due after faultline's last event waits
    assert retries.parked == retries.redelivered + retries.waiting
    assert set(retries.levels) == {3, 4}  # 3 + reconsumeTimes, the broker's rule
    assert retries.to_dlq == retries.in_dlq >= 2
    assert retries.differences == []


def test_the_probe_jar_is_built_by_maven_into_the_cache() -> None:
    jar = rocketmq.probe_jar()
    assert jar.is_file() and jar.parent.parent == jars.cache()
    assert not (Path(rocketmq.PROBE_POM).parent / "target").exists()
