"""Incident review: ``faultline replay`` and ``faultline state`` on a real checkpoint, read-only."""

from __future__ import annotations

import json
import re
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from streaming.client import decision_state
from streaming.job import summary
from streaming.tools import explain, status
from streaming.tools.dashboard.data import Model
from streaming.tools.explain import iso
from streaming.tools.states import BrokerState, spans, state_at, timeline
from tests.streaming.conftest import OUTPUT_TABLES, Job, batch_rows, canonical, table

pytestmark = pytest.mark.jvm


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
    }


@pytest.fixture(scope="module")
def moved(reference: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The reference run's checkpoint copied elsewhere and made read-only; nothing in it may
    change (as root, the permissions alone would not stop a write)."""
    copy = tmp_path_factory.mktemp("moved") / "ck"
    shutil.copytree(reference.parent / "ck", copy)
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    before = _tree(copy)
    yield copy
    assert _tree(copy) == before
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _replay(job: Job, *args: str, cwd: Path) -> tuple[int, str, str]:
    result = job("replay", *args, cwd=cwd)
    return result.returncode, result.stdout, result.stderr


def test_a_replayed_window_writes_the_rows_of_the_original_batches(
    job: Job, reference: Path, moved: Path, tmp_path: Path
) -> None:
    last = int(table(reference, "batches")["batch_id"].max())
    code, out, err = _replay(
        job, "--checkpoint", str(moved), "--output", str(tmp_path / "rep"), "--from-batch", "3",
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err[-3000:]
    assert f"replaying batches 3..{last}" in out
    replayed = tmp_path / "rep"
    for name in OUTPUT_TABLES:
        original = table(reference, name)
        expected = batch_rows(original[original["batch_id"] >= 3])
        assert batch_rows(table(replayed, name)) == expected, name
    columns = ["batch_id", "input", "valid", "duplicates", "stale", "clock"]
    original = table(reference, "batches")
    original = original[original["batch_id"] >= 3].sort_values("batch_id")[columns]
    mine = table(replayed, "batches").sort_values("batch_id")[columns]
    assert mine.values.tolist() == original.values.tolist()


def test_what_if_prints_the_difference_and_writes_its_own_tables(
    job: Job, reference: Path, moved: Path, tmp_path: Path
) -> None:
    code, out, err = _replay(
        job, "--checkpoint", str(moved), "--output", str(tmp_path / "whatif"), "--from-batch", "2",
        "--to-batch", "5", "--set", "cluster_profile=rocketmq-4.9", cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err[-3000:]
    assert "what-if: cluster_profile 'rocketmq-5' -> 'rocketmq-4.9'" in out
    assert re.search(r"broker-\w+\s+cluster\s+\+\d+ -\d+ ~[1-9]\d*", out), out
    times = re.findall(r"(broker-\w+)\s+([\d.]+) ->\s+([\d.]+)", out)
    assert times and any(before != after for _, before, after in times), out
    whatif = table(tmp_path / "whatif", "broker_decisions")
    assert set(whatif["batch_id"]) <= {2, 3, 4, 5}
    assert set(whatif[whatif["scope"] == "cluster"]["profile"]) == {"rocketmq-4.9"}
    assert canonical(reference, "broker_decisions") != canonical(
        tmp_path / "whatif", "broker_decisions"
    )


def test_state_prints_the_clock_isolations_and_delay_queues(
    job: Job, moved: Path, tmp_path: Path
) -> None:
    result = job("state", "--checkpoint", str(moved), "--batch", "4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert out.startswith("state after batch 4\n")
    assert re.search(r"cluster QuickCluster: clock \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d+\)", out)
    assert "isolated, cluster scope:" in out and "isolated, producer scope:" in out
    assert re.search(r"delay queues, messages waiting: (level \d+: \d+|none)", out)
    assert "route orders: broker-a (2 queues), broker-b (2 queues), broker-c (2 queues)" in out
    assert re.search(r"heartbeat broker-a: last .*, in the route", out)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--from-batch", "99"),
            r"batches 99\.\.\d+ are not in the checkpoint .*: it has batches 0\.\.\d+",
        ),
        (
            ("--from-batch", "1", "--set", "cluster_profile"),
            r"--set 'cluster_profile': expected KEY=VALUE",
        ),
        (
            ("--from-batch", "1", "--set", "cluster_profile=rocketmq-9"),
            r"cluster_profile = 'rocketmq-9'",
        ),
    ],
)
def test_a_replay_that_cannot_be_done_says_why_in_one_line(
    job: Job, moved: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    code, _, err = _replay(
        job, "--checkpoint", str(moved), "--output", str(tmp_path / "rep"), *args, cwd=tmp_path
    )
    assert code == 2
    assert re.search(message, err), err
    assert len(err.strip().splitlines()) == 1, err


def test_a_missing_checkpoint_or_a_used_output_folder_is_refused(
    job: Job, moved: Path, tmp_path: Path
) -> None:
    code, _, err = _replay(
        job, "--checkpoint", str(tmp_path / "nothing"), "--output", str(tmp_path / "r"),
        "--from-batch", "0", cwd=tmp_path,
    )  # fmt: skip
    assert code == 2 and "not a faultline checkpoint" in err
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("")
    code, _, err = _replay(
        job, "--checkpoint", str(moved), "--output", str(tmp_path / "used"), "--from-batch", "0",
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 2 and "is not empty" in err


# --- explain -------------------------------------------------------------------------------------


def _explain(job: Job, *args: str, cwd: Path) -> tuple[int, str, str]:
    result = job("explain", *args, cwd=cwd)
    return result.returncode, result.stdout, result.stderr


def test_explain_names_the_send_that_isolated_a_broker_and_the_rule(
    job: Job, reference: Path, tmp_path: Path
) -> None:
    decisions = table(reference, "broker_decisions")
    cluster = decisions[decisions["scope"] == "cluster"].sort_values("effective_at")
    first = cluster[cluster["decision"] == "ISOLATE"].iloc[0]
    broker, at = first["broker_name"], int(first["effective_at"]) + 1
    code, out, err = _explain(
        job, "--output", str(reference), "--broker", broker, "--at", str(at), "--json", cwd=tmp_path
    )
    assert code == 0, err
    answer = json.loads(out)
    assert answer["available"] is False
    causes = set(
        cluster[(cluster["broker_name"] == broker) & (cluster["effective_at"] <= at)][
            "cause_event_id"
        ]
    )
    assert answer["set_by"]["event_id"] in causes
    assert answer["set_by"]["profile"] == "rocketmq-5"
    assert answer["fault_item"]["available_from"] > at
    assert any(d["decision"] == "ISOLATE" for d in answer["decisions"])
    assert 0 <= at - answer["nameserver"]["last_heartbeat"] <= 30_000  # brokers beat every 30 s
    assert answer["set_by"]["attempt"] is not None
    (tmp_path / "output").symlink_to(reference)  # --output: the job's default, output
    code, text, _ = _explain(job, "--broker", broker, "--at", str(at), cwd=tmp_path)
    assert code == 0
    assert text.startswith(f"{broker} at ") and ": NOT AVAILABLE" in text.splitlines()[0]
    assert f"set by {answer['set_by']['event_id']} from " in text
    assert "5.x extends only" in text
    # each decision that holds the broker out says until when
    until = iso(int(first["available_from"]))
    assert f" {'ISOLATE':<15} {first['reason']} until {until}\n" in text
    assert "NameServer: in the route (never dropped by then); last heartbeat 2026-" in text
    item = answer["fault_item"]
    assert f"not available until {iso(item['available_from'])} (last updated by event " in text
    items = table(reference, "fault_items").query("scope == 'cluster' and broker_name == @broker")
    healthy = items[items["available_from"] <= items["event_time"]]
    healthy = healthy[~healthy["event_time"].duplicated(keep=False)].iloc[-1]
    code, text, _ = _explain(
        job, "--output", str(reference), "--broker", broker,
        "--at", str(healthy["event_time"]), cwd=tmp_path,
    )  # fmt: skip
    assert code == 0 and "1970" not in text
    assert f"no isolation (last updated by event {healthy['event_id']} at " in text
    restore = cluster[(cluster["broker_name"] == broker) & (cluster["decision"] == "RESTORE")]
    after = int(restore.iloc[0]["effective_at"])
    code, out, _ = _explain(
        job,
        "--output",
        str(reference),
        "--broker",
        broker,
        "--at",
        str(after),
        "--json",
        cwd=tmp_path,
    )
    assert json.loads(out)["available"] is (
        not any(
            (cluster["broker_name"] == broker)
            & (cluster["effective_at"] <= after)
            & (cluster["decision"].map(decision_state) == "ISOLATED")  # PROBE: available
            & (cluster["available_from"] > after)
        )
    )


def test_explain_prints_a_messages_path(job: Job, reference: Path, tmp_path: Path) -> None:
    entries = table(reference, "schedule_entries")
    out_rows = table(reference, "redeliveries")
    retried = table(reference, "routing_decisions")
    message = sorted(
        set(entries["message_id"]) & set(out_rows["message_id"]) & set(retried["message_id"])
    )[0]
    code, out, err = _explain(
        job, "--output", str(reference), "--message-id", message, cwd=tmp_path
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"message {message}:"
    kinds = [re.sub(r"^\s+\S+ \S+ ", "", x).split(":")[0] for x in lines[1:]]
    assert kinds[0] == "attempt"
    assert {"routing decision", "delay queue", "redelivery"} <= set(kinds)
    # a round of attempts 0, 1, ... ends in the delay queue; the redelivery starts a new one
    for i, kind in enumerate(kinds):
        if kind == "delay queue":
            assert kinds[i - 1] == "attempt" and kinds[i + 1] == "redelivery"
        if kind == "redelivery" and i + 1 < len(kinds):
            assert re.search(r" attempt: attempt 0 by ", lines[1 + i + 1])
    rounds = [int(m) for m in re.findall(r" attempt: attempt (\d+) by ", out)]
    assert rounds[:3] == [0, 1, 2]
    assert lines[1:] == sorted(lines[1:], key=lambda x: x.split()[0] + x.split()[1])


_CHANGE = re.compile(
    r"^  (\S+ \S+) (\S+) +on (\S+), checks (\d+)(?:, answered (\S+))?, "
    r"(?:next check (\S+ \S+)|settled): (.*)$"
)
"""A line of ``explain --transaction``: time, state, broker, checks, the answer to a check, the
next check, the rule (and the event that caused it)."""


def test_explain_follows_a_transaction_through_its_checks_and_answers(
    job: Job, reference: Path, tmp_path: Path
) -> None:
    """Every row of a transaction, in order, with its rule, the broker, the checks and the answers
    to the checks: one discarded after 15 checks answered UNKNOW, and one whose end was UNKNOW,
    then checked and answered COMMIT."""
    rows = table(reference, "transactions")
    discarded = rows[rows["state"] == "DISCARDED"]["transaction_id"].iloc[0]
    checked = rows["reason"].str.startswith("answer to check") & (rows["state"] == "COMMIT")
    committed = rows[checked]["transaction_id"].iloc[0]
    answer = {"COMMIT": "COMMIT_MESSAGE", "ROLLBACK": "ROLLBACK_MESSAGE", "UNKNOWN": "UNKNOW"}
    for tx in (discarded, committed):
        code, out, err = _explain(
            job, "--output", str(reference), "--transaction", tx, cwd=tmp_path
        )
        assert code == 0, err
        head, *lines, tail = out.splitlines()
        mine = rows[rows["transaction_id"] == tx].sort_values("effective_at", kind="stable")
        first = mine.iloc[0]
        assert head == (
            f"transaction {tx} of QuickCluster: message {first['message_id']} from "
            f"{first['producer_id']} ({first['producer_group']}) to {first['topic']} on "
            f"{first['broker_name']}, born {iso(first['born_at'])} ({first['profile']})"
        )
        shown = [_CHANGE.match(line) for line in lines]
        assert all(shown), lines
        expected = [
            (
                iso(r["effective_at"]),
                r["state"],
                r["broker_name"],
                str(r["check_times"]),
                answer[r["state"]] if r["reason"].startswith("answer to check") else None,
                None if pd.isna(r["next_check_at"]) else iso(r["next_check_at"]),
                r["reason"]
                + (f" ({r['cause_event_id']})" if pd.notna(r["cause_event_id"]) else ""),
            )
            for r in mine.to_dict("records")
        ]
        got = [m.groups() for m in shown if m]
        assert sorted(got, key=repr) == sorted(expected, key=repr)  # every row, once
        assert [g[0] for g in got] == sorted(g[0] for g in got)  # in time order
        assert tail == f"  settled: {got[-1][1]} at {got[-1][0]}"
        states = [g[1] for g in got]
        assert states[0] == "PREPARED"
        if tx == discarded:
            assert [int(g[3]) for g in got if g[1] == "CHECK"] == list(range(1, 16))
            assert {g[4] for g in got if g[1] == "UNKNOWN" and g[4]} == {"UNKNOW"}
            assert states[-1] == "DISCARDED"
            # 5.x checks every 30 s from 10:00:30; the wake after the 15th (10:07:30) discards
            assert tail == "  settled: DISCARDED at 2026-11-21 10:08:00.000"
        else:
            assert states[1] == "UNKNOWN" and "CHECK" in states
            assert (states[-1], got[-1][4]) == ("COMMIT", "COMMIT_MESSAGE")
    code, out, _ = _explain(
        job, "--output", str(reference), "--transaction", committed, "--json", cwd=tmp_path
    )
    assert code == 0
    assert [c["state"] for c in json.loads(out)["changes"]] == states


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--transaction", "nobody"), r"--transaction nobody: no such transaction in "),
        (
            ("--transaction", "p-tx-m000000", "--cluster", "Elsewhere"),
            r"--transaction p-tx-m000000: not in cluster Elsewhere; it is in QuickCluster",
        ),
        (
            ("--broker", "broker-z", "--at", "2026-11-21T10:00:30"),
            r"--broker broker-z: not in .*; brokers there: broker-a, broker-b, broker-c",
        ),
        (
            ("--broker", "broker-a", "--at", "2030-01-01T00:00:00"),
            r"is outside every batch of .*: they cover 2026-",
        ),
        (
            ("--broker", "broker-a", "--at", "2020-01-01T00:00:00"),
            r"is outside every batch of .*: they cover 2026-",
        ),
        (("--broker", "broker-a", "--at", "yesterday"), r"--at 'yesterday': give a time like"),
        (
            ("--broker", "broker-a", "--at", "2026-11-21T10:00:30", "--cluster", "Foo"),
            r"^faultline: --cluster Foo: broker-a is not in it; it is in QuickCluster$",
        ),
        (
            ("--broker", "broker-a", "--at", "2026-11-21T10:00:30", "--scope", "producer:p-99"),
            r"--scope producer:p-99: no such producer sent to broker-a in QuickCluster; "
            r"producers that did: p-\S+, ",
        ),
        (("--message-id", "nobody"), r"--message-id nobody: no attempt, delay entry"),
    ],
)
def test_explain_refuses_what_the_tables_cannot_answer(
    job: Job, reference: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    code, _, err = _explain(job, "--output", str(reference), *args, cwd=tmp_path)
    assert code == 2
    assert re.search(message, err), err
    assert len(err.strip().splitlines()) == 1
    code, _, err = _explain(job, "--output", str(tmp_path / "none"), *args, cwd=tmp_path)
    assert code == 2 and "no such folder" in err


def test_a_window_older_than_the_retained_batches_is_refused(
    job: Job, retained: Path, tmp_path: Path
) -> None:
    """``min_batches_to_retain: 2``: Spark keeps the logs of the last batches only."""
    code, _, err = _replay(
        job, "--checkpoint", str(retained / "ck"), "--output", str(tmp_path / "rep"),
        "--from-batch", "1", cwd=tmp_path,
    )  # fmt: skip
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(
        r"faultline: the state after batch 0 is no longer in .*/ck/faultline: it keeps the state "
        r"after batches [1-9]\.\.9 \(retain more with the key min_batches_to_retain\)",
        last,
    ), err


@pytest.mark.parametrize("run", ["quick", "default"])
def test_explain_the_summary_the_dashboard_and_status_say_the_same_of_every_broker(
    run: str, request: pytest.FixtureRequest
) -> None:
    """At every instant of a cluster-scope decision, for every broker: explain's state is the
    vocabulary's (``streaming.tools.states``), and whether it takes sends, which explain works out
    from the FaultItem's rows, the policies' last word and the route, is what the state means;
    the dashboard's windows (worked out on their own, the route's beside the FaultItem's) hold
    the same state then; the summary's time per state and status's brokers at the end come from
    the same words."""
    output = (
        request.getfixturevalue("reference")
        if run == "quick"
        else request.getfixturevalue("default_run").output
    )
    rows = table(output, "broker_decisions").query("scope == 'cluster'").to_dict("records")
    moments = timeline(rows)
    assert {m.state for m in moments} >= {BrokerState.ISOLATED, BrokerState.AVAILABLE}
    page = Model(output, window_ms=None)
    page.refresh()
    windows = {c: page.windows(c) for c in page.clusters()}
    for m in moments:
        answer = explain.broker_at(output, m.broker, m.at, m.cluster, "cluster")
        now = state_at(moments, m.cluster, m.broker, m.at)
        assert now is not None and answer["state"] == now.state, (m.broker, m.at)
        assert answer["available"] == now.state.takes_sends, (m.broker, m.at, now.state)
        shown = _dashboard_state(windows[m.cluster], m.broker, m.at)
        assert shown == now.state, (m.broker, m.at)
    held = summary.time_per_state(output)
    for s in spans(moments):
        if s.state != BrokerState.AVAILABLE:
            assert held[s.broker][s.state]["count"] >= 1
    clock = int(table(output, "batches")["clock"].max())
    at_end = {(m["broker"], m["state"]) for m in status.held_out(output, clock)}
    assert at_end == {
        (b, now.state)
        for b in {m.broker for m in moments}
        if (now := state_at(moments, moments[0].cluster, b, clock)) and now.state != "available"
    }


def _dashboard_state(windows: pd.DataFrame, broker: str, at: int) -> str:
    """The state the dashboard's cluster-scope windows show for ``broker`` at ``at``: out of
    the route whatever the FaultItem's track says, else that track's window, else available."""
    w = windows[(windows["scope"] == "cluster") & (windows["broker_name"] == broker)]
    holds = w[(w["start"] <= at) & (w["end"].isna() | (w["end"] > at))]["state"].tolist()
    if BrokerState.OUT_OF_ROUTE in holds:
        return BrokerState.OUT_OF_ROUTE
    return holds[-1] if holds else BrokerState.AVAILABLE
