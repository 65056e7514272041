"""End to end: ``faultline run`` on the real Spark, read back from the real Delta tables."""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import time
from datetime import datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pandas.testing import assert_frame_equal

from streaming.client import POLICY_STATES
from streaming.config import load_scenario
from streaming.job import failpoints, summary
from streaming.job.progress import Progress
from streaming.sim.simulator import HEARTBEAT_TIMEOUT_MS, SCAN_INTERVAL_MS, simulate
from streaming.tools import OUTPUT_HINT, status
from streaming.tools.explain import iso
from tests.streaming.conftest import (
    DECISION_TABLES,
    INT,
    OUTPUT_TABLES,
    DefaultRun,
    Job,
    faultline,
    interrupt_after,
    quick_run,
    same_tables,
    start,
    table,
)
from udfs import engine
from udfs.parse import parse
from udfs.rocketmq import PROFILES, not_available_duration

pytestmark = pytest.mark.jvm


# --- the default run, exactly as the README has it (tests/streaming/conftest.py) ---------------


def test_default_run_prints_progress_and_a_summary(default_run: DefaultRun) -> None:
    output, stdout = default_run.output, default_run.stdout
    assert "brokers held out (cluster scope)" in stdout and "rows per table:" in stdout
    for name in (*OUTPUT_TABLES, "batches"):
        assert str(output / name) in stdout
    events = simulate(load_scenario("default"))
    batches = table(output, "batches").sort_values("batch_id")
    # one progress line per batch, and not a warning from the JVM
    lines = re.findall(r"^batch (\d+): (\d+) records in .*; isolated now: ", stdout, re.M)
    assert lines == [(str(b.batch_id), str(b.input)) for b in batches.itertuples()]
    stderr = default_run.stderr
    assert not re.search(r"\bWARN(ING)?\b", stdout + stderr), stderr
    # the simulator's events, read 20,000 per micro-batch (conf/faultline.yaml), all valid
    sizes = [min(20_000, len(events) - n) for n in range(0, len(events), 20_000)]
    assert batches["input"].tolist() == sizes
    assert batches["valid"].tolist() == sizes
    assert batches[["quarantined", "late", "duplicates"]].sum().tolist() == [0, 0, 0]
    # where each batch's time went, and the state it wrote: while traffic flows it holds the ids
    # of thousands of events within the allowed lateness; the last batch is the quiet tail
    # (heartbeats only), whose older ids have been dropped
    assert (batches[["parse_ms", "engine_ms", "write_ms"]] > 0).all().all()
    first, second, tail = batches["state_bytes"].tolist()
    assert min(first, second) > 100_000 and tail < 20_000
    # delay queues: p-5's delayed messages (level 4) and the consumer group's retries (level 3)
    entries = table(output, "schedule_entries")
    assert set(zip(entries["source"], entries["delay_level"], strict=True)) == {
        ("delayed_send", 4),
        ("consume_retry", 3),
        ("consume_retry", 4),
    }
    released = table(output, "redeliveries")
    assert len(released) == len(entries) and not released["dlq"].any()
    for level in (3, 4):
        n = int((entries["delay_level"] == level).sum())
        assert f"  level {level:<6} {n:>8} {n:>8} {0:>8} {0:>8}" in stdout
    # the summary is kept, as printed and as JSON
    (text,) = (output / "_job" / "runs").glob("*.txt")
    assert stdout.endswith("\n" + text.read_text())
    kept = json.loads(text.with_suffix(".json").read_text())
    assert kept["records"] == int(batches["input"].sum()) and kept["batches"] == len(batches)
    assert kept["tables"]["batches"] == len(batches)


def test_status_tells_a_stopped_job_from_a_running_and_a_stalled_one(
    default_run: DefaultRun, tmp_path: Path
) -> None:
    output = default_run.output
    said = faultline("status", "--output", str(output), cwd=tmp_path)
    (kept,) = (output / "_job" / "runs").glob("*.json")
    ended = json.loads(kept.read_text())["ended"]
    last = table(output, "batches").sort_values("committed_at").iloc[-1]
    lines = said.stdout.splitlines()
    assert said.returncode == 0, said.stderr
    assert lines[0] == f"{output}: stopped at {ended}"
    assert lines[1].startswith(
        f"  last batch {last['batch_id']} committed {iso(int(last['committed_at']))} ("
    )
    # the job beat its liveness mark to its end, after its last batch and before its summary
    mark = json.loads((output / "_job" / "alive.json").read_text())
    committed = int(last["committed_at"]) / 1000
    assert committed <= mark["at"] <= datetime.fromisoformat(ended).timestamp()
    assert 0 <= mark["batch_id"] <= last["batch_id"]  # Spark reports a batch after its commit

    copy = tmp_path / "output"
    shutil.copytree(output, copy)
    shutil.rmtree(copy / "_job" / "runs")  # killed: no end recorded
    seen = mark["at"]
    assert status.status(copy, now=seen + 1)["state"] == "running"
    # no batch for 10 minutes, but a fresh mark: an idle job, not a stalled one
    (copy / "_job" / "alive.json").write_text(json.dumps({**mark, "at": committed + 600}))
    idle = status.status(copy, now=committed + 605)
    assert (idle["state"], idle["age_s"], status.headline(idle)) == (
        "running",
        605.0,
        "live · last commit 10 min 5 s ago",
    )
    (copy / "_job" / "alive.json").write_text(json.dumps(mark))
    stalled = status.status(copy, now=seen + status.LIVE_S + 1)
    assert stalled["state"] == "stalled"
    killed = {**mark, "at": time.time() - 300}  # the job's last sign 5 minutes ago
    (copy / "_job" / "alive.json").write_text(json.dumps(killed))
    said = faultline("status", "--output", str(copy), cwd=tmp_path).stdout.splitlines()
    assert said[0].startswith(f"{copy}: stalled · last commit ")
    assert said[1].startswith("  no sign of the job for 5 min ")
    assert said[1].endswith(f" (pid {mark['pid']}) and no end recorded: killed, failed or stuck")
    (copy / "_job" / "alive.json").unlink()  # a job older than the mark: the commit's age only
    assert status.status(copy, now=committed + 1)["state"] == "running"
    assert status.status(copy, now=committed + status.LIVE_S + 1)["state"] == "silent"
    missing = faultline("status", "--output", str(tmp_path / "none"), cwd=tmp_path)
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        == f"faultline: --output {tmp_path / 'none'}: no faultline tables here; {OUTPUT_HINT}"
    )


def test_the_last_runs_summaries_are_kept_and_no_more(
    default_run: DefaultRun, tmp_path: Path
) -> None:
    output = tmp_path / "output"
    shutil.copytree(default_run.output, output)
    runs = output / "_job" / "runs"
    for n in range(summary.RUNS_KEPT + 5):  # older runs
        (runs / f"2000{n:04d}.json").write_text("{}")
        (runs / f"2000{n:04d}.txt").write_text("")
    summary.print_summary(output, Progress(), io.StringIO())
    kept = sorted(runs.glob("*.json"))
    assert len(kept) == len(list(runs.glob("*.txt"))) == summary.RUNS_KEPT
    # 107: the fakes, the default run's own, this one; the 7 oldest went
    assert kept[0].name == "20000007.json" and not kept[-1].name.startswith("2000")
    assert json.loads(kept[-1].read_text())["tables"]["batches"] > 0


def _expected_durations(profile: str, broker: str) -> set[int]:
    """The isolation durations of ``udfs.rocketmq._profiles`` for the default scenario's faults."""
    p = PROFILES[profile]
    if broker == "broker-e":  # slow but successful: 600-900 ms
        return {not_available_duration(p, latency) for latency in (600, 900)}
    if broker == "broker-b":  # latency spike, successful: 1500-2800 ms
        return {not_available_duration(p, latency) for latency in range(1500, 2801, 100)}
    # outage and flapping: REMOTING_EXCEPTION, the isolation substitute
    return {not_available_duration(p, 0, isolation=True)}


def test_injected_faults_isolate_for_the_durations_of_each_profile(
    default_run: DefaultRun,
) -> None:
    output = default_run.output
    decisions = table(output, "broker_decisions")
    isolating = decisions[decisions["decision"].isin(["ISOLATE", "EXTEND", "SHORTEN"])]
    seen: dict[tuple[str, str], set[int]] = {}
    for row in isolating.itertuples():
        seen.setdefault((row.profile, row.broker_name), set()).add(
            row.available_from - row.effective_at
        )
    for (profile, broker), durations in seen.items():
        assert durations <= _expected_durations(profile, broker), (profile, broker, durations)
    # every fault shows under every profile, with the profile's own numbers
    for broker in ("broker-b", "broker-c", "broker-d", "broker-e"):
        for profile in ("rocketmq-4.9", "rocketmq-5"):
            assert (profile, broker) in seen, (profile, broker)
    assert seen[("rocketmq-4.9", "broker-c")] == {600_000}
    assert seen[("rocketmq-5", "broker-c")] == {10_000}
    assert seen[("rocketmq-4.9", "broker-e")] == {30_000}
    assert seen[("rocketmq-5", "broker-e")] == {2_000}


def test_healthy_broker_is_never_isolated_and_every_isolation_ends(
    default_run: DefaultRun,
) -> None:
    output = default_run.output
    decisions = table(output, "broker_decisions")
    assert decisions[decisions["broker_name"] == "broker-a"].empty
    for (scope, key, broker), group in decisions.groupby(["scope", "scope_key", "broker_name"]):
        kinds = list(group.sort_values(["effective_at", "decision"])["decision"])
        # RocketMQ's own decisions; the policies' rows (on by default) come after them
        fault_kinds = [k for k in kinds if not k.startswith("ROUTE") and k not in POLICY_STATES]
        if fault_kinds:
            assert fault_kinds[-1] == "RESTORE", (scope, key, broker, kinds)
            assert fault_kinds.count("ISOLATE") == fault_kinds.count("RESTORE"), (
                scope,
                key,
                broker,
            )
    producers = set(table(output, "fault_items").query("scope == 'producer'")["scope_key"])
    # p-49-off runs with the switch off
    assert producers == {"p-47", "p-49", "p-5", "p-5-async", "p-5-tx"}


def test_a_silent_broker_drops_out_of_the_route_and_comes_back(
    default_run: DefaultRun,
) -> None:
    output = default_run.output
    decisions = table(output, "broker_decisions")
    route = decisions[decisions["decision"].str.startswith("ROUTE")].sort_values("effective_at")
    assert list(zip(route["broker_name"], route["decision"], strict=True)) == [
        ("broker-f", "ROUTE_EXPIRED"),
        ("broker-f", "ROUTE_RESTORED"),
    ]
    beats = sorted(
        e["event_time"]
        for e in simulate(load_scenario("default"))
        if e["kind"] == "heartbeat" and e["broker_name"] == "broker-f"
    )
    expired, restored = route["effective_at"].tolist()
    last = max(t for t in beats if t < expired)
    assert expired == ((last + HEARTBEAT_TIMEOUT_MS) // SCAN_INTERVAL_MS + 1) * SCAN_INTERVAL_MS
    assert restored == min(t for t in beats if t > expired)
    rows = table(output, "routing_table").query("scope == 'cluster'").sort_values("effective_at")
    during = rows[(rows["effective_at"] >= expired) & (rows["effective_at"] < restored)]
    assert all("broker-f" not in {q["broker_name"] for q in s} for s in during["selectable"])


def test_the_default_run_follows_its_transactions(default_run: DefaultRun) -> None:
    """p-5-tx's half messages in the job's table are the engine's over the same events (one
    batch, no Spark), the end lost in broker-c's outage among them; the summary counts them."""
    output, stdout = default_run.output, default_run.stdout
    scenario = load_scenario("default")
    events = simulate(scenario)
    parsed = parse([json.dumps(e) for e in events], ["t"] * len(events),
                   [e["event_time"] for e in events])  # fmt: skip
    step = engine.advance(scenario.cluster, None, parsed.to_pandas(), engine.EngineConfig())
    expected = step.tables["transactions"].to_pandas()
    got = table(output, "transactions")[list(expected.columns)]
    order = ["transaction_id", "effective_at", "state", "check_times"]
    assert_frame_equal(
        got.sort_values(order, ignore_index=True),
        expected.sort_values(order, ignore_index=True),
        check_dtype=False,
    )
    counts = got["state"].value_counts()
    assert counts["END_TO_UNAVAILABLE_BROKER"] == 1 and counts["DISCARDED"] >= 1
    lost = got[got["state"] == "END_TO_UNAVAILABLE_BROKER"].iloc[0]
    assert lost["broker_name"] == "broker-c" and lost["notify"]
    assert 110_000 <= lost["effective_at"] - scenario.start < 140_000
    assert "transactions: rows per state" in stdout
    assert re.search(r"^  END_TO_UNAVAILABLE_BROKER +1$", stdout, re.M)
    assert re.search(rf"^  DISCARDED +{counts['DISCARDED']}$", stdout, re.M)


def test_routing_decisions_follow_each_profile(default_run: DefaultRun) -> None:
    output = default_run.output
    decisions = table(output, "routing_decisions")
    # one decision per scope for every failed attempt that the producer retried: the input
    # shows which ones, by the attempt that followed it
    sends = [e for e in simulate(load_scenario("default")) if e["kind"] == "send_result"]
    attempts = {(e["producer_id"], e["message_id"], e["attempt"]) for e in sends}
    retried = {
        e["event_id"]
        for e in sends
        if (e["producer_id"], e["message_id"], e["attempt"] + 1) in attempts
    }
    assert len(retried) > 10
    for scope in ("cluster", "producer"):
        chosen = decisions[decisions["scope"] == scope]
        assert sorted(chosen["event_id"]) == sorted(retried), scope
    producer = decisions[decisions["scope"] == "producer"]
    # 4.9.7 and 5.x with the switch on never send the retry to the broker that just failed
    # while another is available
    switched_on = producer[producer["producer_id"].isin(["p-49", "p-5", "p-5-async"])]
    assert set(switched_on["profile"]) == {"rocketmq-4.9", "rocketmq-5"}
    assert (switched_on["selected_broker"] != switched_on["failed_broker"]).all()
    assert set(producer["rule"]) <= {
        "available",
        "available-last-broker",
        "pick-one-at-least",
        "available-not-last",
        "reachable-not-last",
        "not-last-broker",
        "fallback-plain",
        "removed-then-plain",
        "exception-then-plain",
        "plain",
    }


def test_repeated_records_are_counted_and_change_no_table(
    default_run: DefaultRun, job: Job, tmp_path: Path
) -> None:
    """At-least-once delivery: 5% of the default scenario's records arrive twice, the copy up to
    2,500 records (about 15 s of events) after the original, in the same micro-batch or in a
    later one within the allowed lateness. The tables are those of the run without repeats."""
    output = default_run.output
    lines = [json.dumps(e) for e in simulate(load_scenario("default"))]
    rng = random.Random(9)
    repeated = sorted(rng.sample(range(len(lines)), len(lines) // 20))
    placed = [(i, 0, line) for i, line in enumerate(lines)]
    placed += [(min(i + rng.randint(0, 2_500), len(lines)), 1, lines[i]) for i in repeated]
    stream = [line for _, _, line in sorted(placed)]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "part-00000.jsonl").write_text("\n".join(stream) + "\n")
    batch = 10_000
    position = {line: n for n, line in reversed(list(enumerate(stream)))}  # first occurrence
    later = [n for n, line in enumerate(stream) if position[line] != n]
    same_batch = sum(position[stream[n]] // batch == n // batch for n in later)
    assert 0 < same_batch < len(later) == len(repeated)  # both kinds of repeat are there
    result = job(
        "run", "--source", "files", "--path", str(folder), "--once",
        "--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"),
        "--max-records-per-batch", str(batch), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    same_tables(output, tmp_path / "out")
    batches = table(tmp_path / "out", "batches")
    assert batches["input"].sum() == len(stream)
    assert batches["duplicates"].sum() == len(repeated)
    assert batches["valid"].sum() == len(lines)
    assert batches[["late", "quarantined"]].sum().tolist() == [0, 0]


# --- restarts, crashes and batch sizes, on the quick scenario ---------------------------------


def test_one_batch_and_many_small_batches_give_the_same_decisions(
    reference: Path, one_batch: Path
) -> None:
    one = one_batch / "out"
    assert len(table(one, "batches")) == 1 and len(table(reference, "batches")) > 3
    same_tables(
        reference, one, ("fault_items", *DECISION_TABLES, "schedule_entries", "redeliveries")
    )


def test_summaries_through_the_job_write_what_per_send_reporting_writes(
    reference: Path, job: Job, tmp_path: Path
) -> None:
    """``--reporting summary``: the quick scenario's producers and consumers report through
    :class:`streaming.client.Reporter`, in batches of 200 records as the reference run. Every
    table but ``fault_items`` holds the reference's rows; ``batches`` counts fewer records
    standing for as many messages, as the run's summary line says."""
    out = quick_run(
        job, tmp_path, "summary", "--max-records-per-batch", "200", "--reporting", "summary"
    )
    same_tables(
        reference,
        out,
        (*DECISION_TABLES, "routes", "heartbeats", "schedule_entries", "redeliveries",
         "transactions"),
    )  # fmt: skip
    mine, theirs = table(out, "batches"), table(reference, "batches")
    assert mine["input"].sum() < 0.7 * theirs["input"].sum()
    assert mine["messages"].sum() == theirs["messages"].sum() == theirs["valid"].sum() == 1_813
    assert mine["dropped"].sum() == 0 and mine["quarantined"].sum() == 0
    log = (tmp_path / "summary" / "stdout.log").read_text()
    assert f"faultline: {mine['input'].sum()} records standing for 1813 messages in " in log


def test_the_job_maintains_its_tables_and_logs_sparks_progress(reference: Path) -> None:
    """The reference run maintains its tables after every 3rd batch; each batch's progress is one
    line of the log, and Spark's figures fill the batch's row."""
    log = (reference.parent / "stdout.log").read_text()
    batches = table(reference, "batches").sort_values("batch_id")
    n = len(batches)
    assert n == 10  # 1,813 records in batches of 200
    assert [line.split(":")[0] for line in log.splitlines() if "maintenance" in line] == [
        "maintenance after batch 2",
        "maintenance after batch 5",
        "maintenance after batch 8",
    ]
    assert len(DeltaTable(str(reference / "fault_items")).file_uris()) == 1  # one day, compacted
    assert [line.split(":")[0] for line in log.splitlines() if line.startswith("batch ")] == [
        f"batch {b}" for b in range(n)
    ]
    assert (batches["processed_rows_per_second"] > 0).all()
    assert (batches["input_rows_per_second"].iloc[1:] > 0).all()  # Spark has no rate for the first
    assert (batches["state_rows"] == 1).all()  # one key: the quick scenario's one cluster
    assert (batches["state_memory_bytes"] > 0).all()
    assert (batches["batch_ms"] >= batches["add_batch_ms"]).all()
    assert (batches["add_batch_ms"] > 0).all()


def test_explain_shows_a_producers_selectable_queues_at_the_instant(
    reference: Path, job: Job
) -> None:
    """In the producer scope, ``faultline explain`` lists the queues the producer may select
    then (its routing table, kept compact in the tables): the quick scenario's topic ``orders``
    has two queues on each of broker-a, broker-b and broker-c, less the brokers the producer's
    own decisions isolate at that instant."""
    decisions = table(reference, "broker_decisions").sort_values("effective_at", kind="stable")
    own = decisions[decisions["scope"] == "producer"]
    first = own[own["decision"] == "ISOLATE"].iloc[0]
    producer, broker = first["scope_key"], first["broker_name"]
    at = int(first["effective_at"]) + 1
    assert not decisions["decision"].str.startswith("ROUTE").any()  # every broker in the route
    isolated = {}
    mine = own[(own["scope_key"] == producer) & own["broker_name"].notna()]
    for r in mine[mine["effective_at"] <= at].itertuples():
        isolated[r.broker_name] = r.available_from if r.decision != "RESTORE" else None
    isolated = {b: until for b, until in isolated.items() if until is not None and until > at}
    assert broker in isolated
    explained = job(
        "explain", "--output", str(reference), "--broker", broker, "--at", str(at),
        "--scope", f"producer:{producer}", "--json", cwd=reference.parent,
    )  # fmt: skip
    assert explained.returncode == 0, explained.stderr
    (routing,) = json.loads(explained.stdout)["routing_tables"]
    assert routing["topic"] == "orders" and routing["effective_at"] <= at
    assert [(q["broker_name"], q["queue_id"]) for q in routing["selectable"]] == [
        (b, q) for b in ("broker-a", "broker-b", "broker-c") if b not in isolated for q in (0, 1)
    ]
    assert {i["broker_name"]: i["until"] for i in routing["isolated"]} == isolated
    text = job(
        "explain", "--output", str(reference), "--broker", broker, "--at", str(at),
        "--scope", f"producer:{producer}", cwd=reference.parent,
    ).stdout  # fmt: skip
    kept = ", ".join(f"{b} 0-1" for b in ("broker-a", "broker-b", "broker-c") if b not in isolated)
    assert "\n  routing table of orders since " in text
    assert f"\n    selectable: {kept}\n" in text
    assert f"\n    isolated: {broker} until " in text


def _quick_args(folder: Path, batch: int = 200) -> tuple[str, ...]:
    """The quick scenario in batches of ``batch`` (200: like the reference run), into
    ``folder``."""
    out, ck = str(folder / "out"), str(folder / "ck")
    return ("run", "--scenario", "quick", "--output", out, "--checkpoint", ck,
            "--max-records-per-batch", str(batch))  # fmt: skip


def test_stopped_and_restarted_equals_uninterrupted(
    reference: Path, job: Job, tmp_path: Path
) -> None:
    """Ctrl-C to the ``faultline`` process after two batches, then a restart. (Kills:
    test_crash.py at every point of a batch, test_kafka.py at any moment.)"""
    args = _quick_args(tmp_path)
    proc = start(*args, cwd=tmp_path)
    code = interrupt_after(proc, tmp_path / "out", 2, INT)
    assert code == 0
    done = len(table(tmp_path / "out", "batches"))
    assert 2 <= done < len(table(reference, "batches"))
    result = job(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    same_tables(reference, tmp_path / "out")
    # each batch committed once, with the records of the same batch of the uninterrupted run
    columns = ["batch_id", "input", "valid", "clock"]
    restarted = table(tmp_path / "out", "batches").sort_values("batch_id")[columns]
    expected = table(reference, "batches").sort_values("batch_id")[columns]
    assert restarted.values.tolist() == expected.values.tolist()


def test_a_cluster_split_over_two_tasks_writes_the_same_rows(
    reference: Path, job: Job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stateful_shards: 2``: the quick scenario's one cluster runs in two tasks, crashed after
    two batches (a failpoint) and resumed; every table equals the one-task run's. The checkpoint
    keeps its shards: a restart with one is refused before Spark starts."""
    args = (*_quick_args(tmp_path), "--stateful-shards", "2")
    monkeypatch.setenv(failpoints.ENV, "after-commit-batches:1")
    monkeypatch.setenv(failpoints.ACTION_ENV, "raise")
    crashed = job(*args, cwd=tmp_path)
    assert crashed.returncode == 1 and "failpoint after-commit-batches:1" in crashed.stderr
    assert sorted(table(tmp_path / "out", "batches")["batch_id"]) == [0, 1]
    monkeypatch.delenv(failpoints.ENV)
    refused = job(*args[:-1], "1", cwd=tmp_path)
    assert refused.returncode == 2
    assert "stateful_shards: the checkpoint" in refused.stderr
    assert "was made with stateful_shards=2, this run has 1" in refused.stderr
    result = job(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    same_tables(reference, tmp_path / "out")
    columns = ["batch_id", "input", "valid", "duplicates", "stale", "clock"]
    sharded = table(tmp_path / "out", "batches").sort_values("batch_id")
    expected = table(reference, "batches").sort_values("batch_id")[columns]
    assert sharded[columns].values.tolist() == expected.values.tolist()
    # two tasks shared each batch's operator time: the busiest did less than all of it
    busy = sharded[["receive_ms", "parse_ms", "engine_ms", "files_ms"]].sum(axis=1)
    assert (sharded["slowest_task_ms"] < busy).all()


# --- bad input ---------------------------------------------------------------------------------


def test_salted_stream_counts_in_equal_counts_out(job: Job, tmp_path: Path) -> None:
    events = simulate(load_scenario("quick"))
    lines = [json.dumps(e) for e in events]
    t0, cluster = events[0]["event_time"], events[0]["cluster"]
    salt = [
        "{not json",
        "[1, 2, 3]",
        json.dumps({**events[5], "event_id": "wrong-type", "latency_ms": "slow"}),
        json.dumps({"kind": "heartbeat", "broker_name": "broker-a", "event_time": t0}),  # no id
        json.dumps(
            {
                **events[5],
                "event_id": "negative",
                "kind": "send_result",
                "producer_id": "p",
                "topic": "orders",
                "broker_name": "broker-a",
                "outcome": "SEND_OK",
                "latency_ms": -5,
            }
        ),
        json.dumps(
            {
                **events[5],
                "event_id": "unknown-outcome",
                "kind": "send_result",
                "producer_id": "p",
                "topic": "orders",
                "broker_name": "broker-a",
                "outcome": "MAYBE",
                "latency_ms": 5,
            }
        ),
        json.dumps(
            {
                "kind": "heartbeat",
                "event_id": "year-3000",
                "broker_name": "broker-a",
                "event_time": "3000-01-01T00:00:00Z",
            }
        ),
        json.dumps(
            {
                "kind": "heartbeat",
                "event_id": "two-hours-ahead",
                "broker_name": "broker-a",
                "cluster": cluster,
                "event_time": events[300]["event_time"] + 7_200_000,
            }
        ),
        "",
    ]
    late = [
        json.dumps(
            {
                "kind": "heartbeat",
                "event_id": f"late-{i}",
                "broker_name": "broker-a",
                "cluster": cluster,
                "event_time": t0 + i,
            }
        )
        for i in range(3)
    ]
    body = lines[:300] + salt + lines[300:]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "part-00000.jsonl").write_text("\n".join(body) + "\n")
    # written as the scenario ran: its time (the records' ingest time) is the last event's, so
    # "two-hours-ahead" is more than max_future_skew (1 h) after it
    written = events[-1]["event_time"] * 1_000_000
    os.utime(folder / "part-00000.jsonl", ns=(written, written))
    args = (
        "run",
        "--source",
        "files",
        "--path",
        str(folder),
        "--once",
        "--output",
        str(tmp_path / "out"),
        "--checkpoint",
        str(tmp_path / "ck"),
        "--max-records-per-batch",
        "400",
    )
    first = job(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    # a file that arrives later, with events older than the clock minus the allowed lateness
    (folder / "part-00001.jsonl").write_text("\n".join(late) + "\n")
    second = job(*args, cwd=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    body += late
    out = tmp_path / "out"
    batches = table(out, "batches")
    assert batches["input"].sum() == len(body)
    assert batches["quarantined"].sum() == len(salt)
    assert batches["late"].sum() == len(late)
    assert batches["valid"].sum() == len(lines)
    assert batches["duplicates"].sum() == 0
    quarantine = table(out, "quarantine")
    assert sorted(quarantine["reason_code"]) == sorted(
        [
            "MALFORMED_JSON",
            "MALFORMED_JSON",
            "WRONG_TYPE",
            "MISSING_FIELD",
            "NEGATIVE_LATENCY",
            "UNKNOWN_OUTCOME",
            "EVENT_TIME_OUT_OF_RANGE",
            "FUTURE_EVENT_TIME",
            "MALFORMED_JSON",
        ]
    )
    assert set(quarantine["origin"]) >= {"part-00000.jsonl:301", "part-00000.jsonl:302"}
    assert sorted(table(out, "late_events")["event_id"]) == ["late-0", "late-1", "late-2"]


def test_a_failure_inside_spark_ends_the_run_with_its_own_line(job: Job, tmp_path: Path) -> None:
    """The files source fails inside Spark's Python data source runner: the run ends with the
    Python exception's own message, naming the file and what to do, not Spark's wrapper. The
    folder is given relative to where the job starts (Spark's Python workers have a folder of
    their own)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.parquet").write_bytes(b"not parquet")
    args = ("--source", "files", "--path", "in", "--once", "--output", "O", "--checkpoint", "C")
    result = job("run", *args, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"faultline: failed: files source: {tmp_path}/in/a.parquet cannot be read as Parquet "
        "(Parquet magic "
        "bytes not found in footer. Either the file is corrupted or this is not a parquet file.); "
        "move it out of the folder, then start the job again"
    ]


def test_the_policies_run_in_the_job_as_in_the_engine(job: Job, tmp_path: Path) -> None:
    """Every policy on, the quick scenario in batches of 600: the policies' rows in Delta are the
    engine's over the same events in one batch, and released messages name their broker."""
    from streaming.config import engine_config, load_job_config
    from tests.engine.conftest import frame
    from udfs import engine

    config = tmp_path / "policies.yaml"
    config.write_text(
        "policies:\n  isolation_cap: 0.5\n  latency_outlier_factor: 3\n"
        "  latency_outlier_min_latency: 20ms\n  recovery_probe_share: 0.1\n"
        "  fault_aware_release: true\n  report_queue_swaps: true\n"
    )
    result = job(*_quick_args(tmp_path, 600), "--config", str(config), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "out"
    policy = ["OUTLIER", "HOLD", "PANIC", "PROBE", "RELEASE", "QUEUE_SWAP"]
    columns = ["scope_key", "broker_name", "decision", "effective_at", "available_from", "reason"]
    decisions = table(out, "broker_decisions")
    written = decisions[decisions["decision"].isin(policy)][columns]
    scenario = load_scenario("quick")
    rules = engine_config(load_job_config(config))
    step = engine.advance(scenario.cluster, None, frame(simulate(scenario)), rules)
    expected = step.tables["broker_decisions"].to_pandas()
    expected = expected[expected["decision"].isin(policy)][columns]
    key = sorted(map(tuple, expected.values.tolist()))
    assert sorted(map(tuple, written.values.tolist())) == key
    assert {"PANIC", "PROBE", "RELEASE", "QUEUE_SWAP"} <= set(written["decision"])
    released = table(out, "redeliveries")
    routed = released["target_topic"] == "orders"  # %RETRY% topics have no route here
    assert routed.sum() and released.loc[routed, "broker_name"].notna().all()
    assert released.loc[~routed, "broker_name"].isna().all()
    # faultline explain tells the policies' word: a broker the cap kept in the route is available
    panic = decisions[decisions["decision"] == "PANIC"].iloc[0]
    broker, at = panic["broker_name"], str(int(panic["effective_at"]))
    explained = job("explain", "--output", str(out), "--broker", broker, "--at", at, cwd=tmp_path)
    assert explained.returncode == 0, explained.stderr
    first, *rest = explained.stdout.splitlines()
    assert first.endswith(": AVAILABLE (panic-kept)")
    assert "  policy: PANIC at " in explained.stdout and "isolation cap 50%" in explained.stdout
    assert any("FaultItem" in line for line in rest)  # RocketMQ's own view is still shown
