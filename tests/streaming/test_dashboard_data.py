"""The dashboard's data layer on real Delta tables, without Spark or a browser: what it reads at
each refresh, and that its rollups equal the tables' own rows."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from streaming.job.sink import create_tables, own_schema, record_progress, stored, table_schema
from streaming.job.summary import delay_queues, isolation_windows, transaction_states
from streaming.tools import status
from streaming.tools.dashboard import data
from streaming.tools.dashboard.app import _transactions
from streaming.tools.dashboard.data import MINUTE, Model, TablesError, check_output
from udfs.vocabulary import TableName

T0 = 1_795_255_200_000  # 2026-11-21 10:00:00 UTC
CLUSTER = "C1"


def _append(out: Path, name: str, rows: list[dict[str, Any]], batch_id: int) -> None:
    schema = own_schema(name)
    rows = rows if name == "batches" else [{**r, "batch_id": batch_id} for r in rows]
    full = [{f: r.get(f) for f in schema.names} for r in rows]
    data = pa.Table.from_pylist(full, schema=schema)
    write_deltalake(str(out / name), stored(name, data), mode="append")


def _send(
    t: int, broker: str, latency: int, outcome: str = "SEND_OK", n: int = 0
) -> dict[str, Any]:
    return {
        "scope": "cluster",
        "scope_key": CLUSTER,
        "cluster": CLUSTER,
        "broker_name": broker,
        "event_id": f"e-{t}-{broker}-{n}",
        "event_time": t,
        "latency_ms": latency,
        "outcome": outcome,
        "phase": "result",
    }


def _decision(t: int, broker: str, decision: str, until: int, reason: str = "") -> dict[str, Any]:
    return {
        "scope": "cluster",
        "scope_key": CLUSTER,
        "cluster": CLUSTER,
        "broker_name": broker,
        "decision": decision,
        "effective_at": t,
        "available_from": until,
        "reason": reason,
        "cause_event_id": f"e-{t}",
        "profile": "rocketmq-5",
    }


def _batch(batch_id: int, clock: int) -> dict[str, Any]:
    return {"batch_id": batch_id, "input": 1, "clock": clock, "write_ms": 5, "commit_ms": 1}


@pytest.fixture
def out(tmp_path: Path) -> Path:
    create_tables(tmp_path)
    return tmp_path


def test_percentiles_per_minute_match_the_exact_ones(out: Path) -> None:
    rng = np.random.default_rng(7)
    latencies = np.concatenate([rng.integers(1, 60, 900), rng.integers(400, 4_000, 100)])
    rows = [
        _send(T0 + int(i) * 50, "b-1", int(v), "SEND_OK" if v < 3_000 else "REMOTING_EXCEPTION")
        for i, v in enumerate(latencies)
    ]
    _append(out, "fault_items", rows, 0)
    _append(out, "batches", [_batch(0, rows[-1]["event_time"])], 0)
    model = Model(out)
    model.refresh()
    lat = model.latency(CLUSTER)
    frame = pd.DataFrame(rows)
    frame["minute"] = frame["event_time"] // MINUTE * MINUTE
    for minute, part in frame.groupby("minute"):
        got = lat[lat["minute"] == minute].iloc[0]
        values = part["latency_ms"].to_numpy()
        assert got["sends"] == len(values)
        assert got["failures"] == int((part["outcome"] != "SEND_OK").sum())
        for q in (0.5, 0.99):
            exact = float(np.percentile(values, q * 100, method="inverted_cdf"))
            shown = got[f"p{round(q * 100)}"]
            if exact <= data.EXACT:
                assert shown == exact
            else:
                assert abs(shown - exact) <= 0.01 * exact + 0.05, (q, shown, exact)


def test_a_refresh_reads_only_the_new_files_and_adds_up_to_a_fresh_read(out: Path) -> None:
    rng = random.Random(3)
    model = Model(out)
    feed = model.feeds["fault_items"]
    for batch in range(6):
        start = T0 + batch * 40_000
        rows = [
            _send(start + i * 100, f"b-{rng.randint(1, 3)}", rng.randint(1, 900), n=batch)
            for i in range(400)
        ]
        _append(out, "fault_items", rows, batch)
        _append(out, "batches", [_batch(batch, start + 39_900)], batch)
        if batch:  # Spark's progress of the batch before rewrites that batch's row
            progress = {"batch_id": batch - 1, "processed_rows_per_second": 100.0 + batch}
            record_progress(out, [progress])
        before = model.feeds["fault_items"].reads
        model.refresh()
        assert model.feeds["fault_items"] is feed  # not read again from the start
        assert feed.reads == before + 1  # the batch's file, nothing older
    model.refresh()  # nothing new: nothing read
    assert model.feeds["fault_items"].reads == 6
    assert model.batches["batch_id"].tolist() == list(range(6))
    assert model.batches["processed_rows_per_second"].tolist()[:5] == [101, 102, 103, 104, 105]
    fresh = Model(out)
    fresh.refresh()
    pd.testing.assert_frame_equal(model.latency(CLUSTER), fresh.latency(CLUSTER))
    # minutes that straddle two batches add up exactly
    assert model.latency(CLUSTER)["sends"].sum() == 2_400


def test_compaction_makes_it_read_the_table_again_with_the_same_result(out: Path) -> None:
    for batch in range(3):
        rows = [_send(T0 + batch * 30_000 + i, "b-1", 10 + i) for i in range(50)]
        _append(out, "fault_items", rows, batch)
        _append(out, "batches", [_batch(batch, T0 + batch * 30_000 + 49)], batch)
    model = Model(out)
    model.refresh()
    before = model.latency(CLUSTER)
    DeltaTable(str(out / "fault_items")).optimize.compact()
    model.refresh()
    pd.testing.assert_frame_equal(model.latency(CLUSTER), before)


def test_files_before_the_window_are_not_opened(out: Path) -> None:
    hour = 3_600_000
    for batch in range(4):  # one file per hour of event time
        rows = [_send(T0 + batch * hour + i * 1_000, "b-1", 5) for i in range(10)]
        _append(out, "fault_items", rows, batch)
        _append(out, "batches", [_batch(batch, T0 + batch * hour + 9_000)], batch)
    model = Model(out, window_ms=90 * 60_000)
    model.refresh()
    assert model.feeds["fault_items"].reads == 2  # the last two hours' files
    assert model.latency(CLUSTER)["minute"].min() == T0 + 2 * hour


def test_isolation_windows_and_now(out: Path) -> None:
    reason = "REMOTING_EXCEPTION after 3 ms (isolation): not available for 10000 ms"
    decisions = [
        _decision(T0 + 1_000, "b-1", "ISOLATE", T0 + 11_000, reason),
        *[
            _decision(T0 + 1_000 + i * 500, "b-1", "EXTEND", T0 + 11_000 + i * 500)
            for i in range(1, 90)
        ],
        _decision(T0 + 60_000, "b-1", "RESTORE", T0 + 60_000, "isolation ended"),
        _decision(
            T0 + 70_000,
            "b-2",
            "ISOLATE",
            T0 + 72_000,
            "SEND_OK after 879 ms: not available for 2000 ms",
        ),
        _decision(T0 + 71_000, "b-2", "EXTEND", T0 + 90_000),
        {**_decision(T0 + 50_000, "b-3", "ROUTE_EXPIRED", T0 + 50_000, "no heartbeat")},
    ]
    _append(out, "broker_decisions", decisions, 0)
    _append(out, "batches", [_batch(0, T0 + 80_000)], 0)
    model = Model(out)
    model.refresh()
    w = model.windows(CLUSTER)
    first = w[w["broker_name"] == "b-1"].iloc[0]
    assert (first["start"], first["end"], first["extends"]) == (T0 + 1_000, T0 + 60_000, 89)
    assert first["band"] == (
        "latency 10000 ms >= 5000 ms (isolation: the profile's substitute latency 10000 ms)"
    )
    assert len(model.decisions) < 20  # the EXTENDs are kept one per broker and minute
    now = model.now(CLUSTER)
    assert sorted(zip(now["broker_name"], now["state"], strict=True)) == [
        ("b-2", "isolated"),
        ("b-3", "out of route"),
    ]
    assert now[now["broker_name"] == "b-2"].iloc[0]["until"] == T0 + 90_000
    assert now[now["broker_name"] == "b-2"].iloc[0]["band"] == "latency 879 ms >= 550 ms"
    closed = isolation_windows(out)  # the job's summary reads the same windows
    assert [(x["broker_name"], x["start"], x["end"]) for x in closed] == [
        (r["broker_name"], r["start"], None if pd.isna(r["end"]) else r["end"])
        for r in w[w["state"] == "isolated"].to_dict("records")
    ]


def _since(t: Any) -> int | None:
    return None if pd.isna(t) else int(t) - T0


def test_the_policies_rows_open_and_end_windows_of_the_states_they_mean(out: Path) -> None:
    """OUTLIER, PANIC, ISOLATE (and HOLD) and PROBE each begin a window of their own state, in
    the words of ``streaming.tools.states`` (README, "States"), as ``faultline status`` says."""
    outlier = "latency outlier: mean 300 ms over 80 sends of topic T ..."
    decisions = [
        _decision(T0 + 10_000, "b-1", "OUTLIER", T0 + 40_000, outlier),  # no FaultTable row
        _decision(T0 + 40_000, "b-1", "RELEASE", T0 + 40_000, "latency outlier isolation ended"),
        _decision(T0 + 1_000, "b-2", "ISOLATE", T0 + 31_000, "failed"),
        _decision(T0 + 1_000, "b-2", "PANIC", T0 + 1_000, "isolation cap 50%: ..."),
        _decision(T0 + 5_000, "b-2", "HOLD", T0 + 31_000, "the FaultTable's isolation holds"),
        _decision(T0 + 31_000, "b-2", "RESTORE", T0 + 31_000, "isolation ended"),
        _decision(T0 + 31_000, "b-2", "PROBE", T0 + 61_000, "recovery probing: ..."),
        {**_decision(T0 + 2, "b-3", "QUEUE_SWAP", T0 + 2), "scope": "producer", "scope_key": "p"},
    ]
    _append(out, "broker_decisions", decisions, 0)
    _append(out, "batches", [_batch(0, T0 + 80_000)], 0)
    model = Model(out)
    model.refresh()
    w = model.windows(CLUSTER).to_dict("records")
    assert [
        (r["broker_name"], r["state"], r["start"] - T0, _since(r["end"]), r["reason"]) for r in w
    ] == [
        ("b-1", "outlier", 10_000, 40_000, outlier),
        ("b-2", "panic-kept", 1_000, 5_000, "isolation cap 50%: ..."),  # the cap kept it at once
        ("b-2", "isolated", 5_000, 31_000, "the FaultTable's isolation holds"),  # ... until room
        ("b-2", "probing", 31_000, None, "recovery probing: ..."),
    ]  # fmt: skip
    now = model.now(CLUSTER)  # as `faultline status` holds it at the clock
    assert [(r["broker_name"], r["state"], r["until"] - T0) for _, r in now.iterrows()] == [
        ("b-2", "probing", 61_000)
    ]
    assert status.held_out(out, T0 + 80_000) == [
        {
            "cluster": CLUSTER,
            "broker": "b-2",
            "state": "probing",
            "until": T0 + 61_000,
            "reason": "recovery probing: ...",
        }
    ]


def test_delay_levels_equal_the_job_summary(out: Path) -> None:
    rng = random.Random(5)
    entries, released = [], []
    for i in range(300):
        level = rng.randint(1, 18)
        entry = {
            "cluster": CLUSTER,
            "message_id": f"m{i}",
            "delay_level": level,
            "store_time": T0 + i,
        }
        entries.append(entry)
        if rng.random() < 0.7:
            released.append({**entry, "deliver_at": T0 + i + 1_000, "dlq": rng.random() < 0.1})
    released += [
        {"cluster": CLUSTER, "message_id": "d", "delay_level": 0, "deliver_at": T0, "dlq": True}
    ]
    for batch in range(3):
        _append(out, "schedule_entries", entries[batch::3], batch)
        _append(out, "redeliveries", released[batch::3], batch)
    _append(out, "batches", [_batch(0, T0 + 2_000)], 0)
    model = Model(out)
    model.refresh()
    expected = delay_queues(out).rename_axis("delay_level").reset_index()
    got = model.delay_levels(CLUSTER)
    pd.testing.assert_frame_equal(got[expected.columns], expected, check_names=False)
    per_minute = model.delay_minutes(CLUSTER)
    assert per_minute["messages"].sum() == len(entries) + len(released)


def _tx(
    tx: str,
    state: str,
    t: int,
    broker: str,
    born: int,
    next_check: int | None,
    cluster: str = CLUSTER,
) -> dict[str, Any]:
    """A ``transactions`` row at ``T0 + t`` (``born`` and ``next_check`` after T0 too)."""
    return {
        "cluster": cluster,
        "transaction_id": tx,
        "broker_name": broker,
        "state": state,
        "effective_at": T0 + t,
        "born_at": T0 + born,
        "next_check_at": None if next_check is None else T0 + next_check,
        "check_times": 0,
        "reason": "r",
    }


def test_half_messages_waiting_per_broker_and_transaction_rows_per_minute(out: Path) -> None:
    """A transaction waits while its latest row has a next check (at one instant, the row that
    settles it is the latest); the page keeps the waiting ones across refreshes, and counts
    checks, discards and skips, ends to an unavailable broker and rejected ends per minute."""
    _append(out, "transactions", [
        _tx("tx-1", "PREPARED", 1_000, "b-1", 990, 30_000),
        _tx("tx-2", "PREPARED", 5_000, "b-1", 4_990, 30_000),
        _tx("tx-3", "PREPARED", 20_000, "b-1", 19_995, 30_000),
        _tx("tx-3", "END_TO_UNAVAILABLE_BROKER", 21_000, "b-1", 19_995, 30_000),
        _tx("tx-4", "PREPARED", 2_000, "b-2", 1_990, 30_000),
        _tx("tx-1", "CHECK", 30_000, "b-1", 990, 60_000),
        _tx("tx-3", "CHECK", 30_000, "b-1", 19_995, 60_000),
        _tx("tx-4", "CHECK", 30_000, "b-2", 1_990, 60_000),
        _tx("tx-9", "PREPARED", 10_000, "x-1", 9_990, 30_000, cluster="C2"),
    ], 0)  # fmt: skip
    _append(out, "batches", [_batch(0, T0 + 30_000)], 0)
    model = Model(out)
    model.refresh()
    waiting = model.transactions_waiting(CLUSTER)
    assert waiting.to_dict("records") == [
        {"broker_name": "b-1", "waiting": 3, "born_at": T0 + 990, "next_check_at": T0 + 30_000,
         "age": 29_010},
        {"broker_name": "b-2", "waiting": 1, "born_at": T0 + 1_990, "next_check_at": T0 + 60_000,
         "age": 28_010},
    ]  # fmt: skip

    _append(out, "transactions", [
        _tx("tx-2", "COMMIT", 31_000, "b-1", 4_990, None),
        _tx("tx-1", "CHECK", 60_000, "b-1", 990, 90_000),
        _tx("tx-1", "UNKNOWN", 60_010, "b-1", 990, 90_000),
        _tx("tx-3", "COMMIT", 60_000, "b-1", 19_995, None),  # the answer at the check's instant
        _tx("tx-3", "CHECK", 60_000, "b-1", 19_995, 90_000),
        _tx("tx-4", "DISCARDED", 60_000, "b-2", 1_990, None),
        _tx("tx-5", "PREPARED", 70_000, "b-2", 69_990, 90_000),
        _tx("tx-5", "END_REJECTED", 130_000, "b-2", 69_990, 150_000),
        _tx("tx-6", "PREPARED", 75_000, "b-2", 74_990, 90_000),
        _tx("tx-6", "SKIPPED", 120_000, "b-2", 74_990, None),
    ], 1)  # fmt: skip
    _append(out, "fault_items", [_send(T0 + 150_000, "b-1", 5)], 1)  # the clock: 150 s
    _append(out, "batches", [_batch(1, T0 + 150_000)], 1)
    model.refresh()
    assert model.clock(CLUSTER) == T0 + 150_000
    waiting = model.transactions_waiting(CLUSTER)
    assert waiting.to_dict("records") == [
        {"broker_name": "b-1", "waiting": 1, "born_at": T0 + 990, "next_check_at": T0 + 90_000,
         "age": 149_010},
        {"broker_name": "b-2", "waiting": 1, "born_at": T0 + 69_990,
         "next_check_at": T0 + 150_000, "age": 80_010},
    ]  # fmt: skip
    assert model.transactions_waiting("C2")["waiting"].tolist() == [1]
    assert transaction_states(out)["WAITING"] == 3  # the job's summary counts the same ones

    per_minute = model.transaction_minutes(CLUSTER)
    assert [(r["what"], r["minute"] - T0, r["rows"]) for r in per_minute.to_dict("records")] == [
        ("checks", 0, 3),
        ("checks", MINUTE, 2),
        ("discarded or skipped", MINUTE, 1),
        ("discarded or skipped", 2 * MINUTE, 1),
        ("ends rejected", 2 * MINUTE, 1),
        ("ends to an unavailable broker", 0, 1),
    ]
    assert model.transaction_totals(CLUSTER) == {
        "checks": 5,
        "discarded or skipped": 2,
        "ends to an unavailable broker": 1,
        "ends rejected": 1,
        "all": 18,
    }
    fresh = Model(out)  # read at once, the same
    fresh.refresh()
    pd.testing.assert_frame_equal(fresh.transactions_waiting(CLUSTER), waiting)


def test_a_cluster_without_transactions_says_so(out: Path) -> None:
    _append(out, "fault_items", [_send(T0, "b-1", 5)], 0)
    _append(out, "batches", [_batch(0, T0)], 0)
    model = Model(out)
    model.refresh()
    assert model.transactions_waiting(CLUSTER).empty
    assert model.transaction_minutes(CLUSTER).empty
    assert set(model.transaction_totals(CLUSTER).values()) == {0}
    assert _transactions(model, CLUSTER).children == "No transactional messages."


def test_quarantine_keeps_counts_and_a_few_examples(out: Path) -> None:
    rows = [
        {"raw": "x" * 1_000 if i == 0 else f"bad {i}", "origin": f"f:{i}", "reason_code": code,
         "reason": "r", "seen_at": T0}
        for i, code in enumerate(["MALFORMED_JSON"] * 7 + ["WRONG_TYPE"] * 2)
    ]  # fmt: skip
    _append(out, "quarantine", rows, 0)
    model = Model(out)
    model.refresh()
    counts = dict(zip(model.quarantined["reason_code"], model.quarantined["records"], strict=True))
    assert counts == {"MALFORMED_JSON": 7, "WRONG_TYPE": 2}
    examples = model.quarantine_examples["MALFORMED_JSON"]
    assert len(examples) == data.EXAMPLES
    assert len(examples[0]["raw"]) == 303  # cut to 300 characters and "..."


def test_a_folder_without_tables_or_with_newer_ones_is_named(tmp_path: Path) -> None:
    with pytest.raises(TablesError, match="no faultline tables here"):
        check_output(tmp_path / "nothing")
    DeltaTable.create(
        str(tmp_path / "fault_items"),
        schema=table_schema("fault_items"),
        description="faultline table format 99",
    )
    with pytest.raises(TablesError) as missing:
        check_output(tmp_path)
    every = [n for n in TableName if n != "fault_items"]  # the 11 others, each named
    assert len(every) == 11
    assert f"tables missing: {', '.join(every)}. " in str(missing.value)
    create_tables(tmp_path)  # the others; fault_items keeps its format
    with pytest.raises(TablesError, match=r"newer faultline \(table format 99; this one reads"):
        check_output(tmp_path)


def test_failed_send_marks_coarsen_to_stay_few_and_keep_every_failure(out: Path) -> None:
    rows = [_send(T0 + i * 7_000, "b-1", 3, "REMOTING_EXCEPTION", n=i) for i in range(1_500)]
    _append(out, "fault_items", rows, 0)  # one failure every 7 s for about 3 hours
    _append(out, "batches", [_batch(0, rows[-1]["event_time"])], 0)
    model = Model(out)
    model.refresh()
    fine = model.failed_sends(CLUSTER)
    assert (fine["span"] == 1_000).all() and len(fine) == 1_500
    coarse = model.failed_sends(CLUSTER, most=100)
    assert (coarse["span"] == 10 * MINUTE).all() and len(coarse) <= 100
    assert coarse["failures"].sum() == 1_500


def test_the_first_load_and_a_refresh_open_only_the_days_of_the_window(tmp_path: Path) -> None:
    """Tables written without file statistics (``delta.dataSkippingNumIndexedCols`` 0): the
    ``event_date`` partitions alone keep the days before the window unopened, so a page over 12
    days of tables opens what it opens over 10."""
    create_tables(tmp_path, {"delta.dataSkippingNumIndexedCols": "0"})
    day, hour = 86_400_000, 3_600_000

    def write_day(d: int) -> None:
        for h in (1, 23):  # two files a day
            t = T0 - 10 * hour + d * day + h * hour  # 00:00 UTC of day d, then h hours
            _append(tmp_path, "fault_items", [_send(t + i, "b-1", 5 + d) for i in range(3)], d)
        _append(tmp_path, "batches", [_batch(d, T0 - 10 * hour + d * day + 23 * hour)], d)

    for d in range(10):
        write_day(d)
    actions = DeltaTable(str(tmp_path / "fault_items")).get_add_actions(flatten=True)
    assert "max.event_time" not in pa.table(actions).column_names  # no statistics to skip by
    window = 2 * day  # from 23:00 two days before the last: three days' folders
    model = Model(tmp_path, window_ms=window)
    model.refresh()
    assert model.feeds["fault_items"].reads == 6  # of 20 files
    assert model.latency(CLUSTER)["minute"].min() == T0 - 10 * hour + 7 * day + 23 * hour
    for d in (10, 11):
        write_day(d)
    model.refresh()
    assert model.feeds["fault_items"].reads == 6 + 4  # the new days' files, nothing older
    fresh = Model(tmp_path, window_ms=window)
    fresh.refresh()
    assert fresh.feeds["fault_items"].reads == 6  # of 24: the first load does not grow
    pd.testing.assert_frame_equal(fresh.latency(CLUSTER), model.latency(CLUSTER))


def test_the_delay_queues_are_read_from_a_day_before_the_window_and_wait_as_in_the_summary(
    tmp_path: Path,
) -> None:
    """Ten days of delay queues, without file statistics: a two-hour window opens the day
    folders from a day before it (``LOOKBACK_MS``), no more, and still says what waits at the
    end as the run summary does over the whole tables; scheduled and released count the
    window."""
    create_tables(tmp_path, {"delta.dataSkippingNumIndexedCols": "0"})
    day, hour = 86_400_000, 3_600_000
    for d in range(10):
        for h in (1, 23):  # two files a day
            t = T0 - 10 * hour + d * day + h * hour
            entries = [
                {"cluster": CLUSTER, "message_id": f"m{d}-{h}-{i}", "delay_level": 3,
                 "store_time": t + i, "deliver_at": t + i + 10_000, "dlq": False}
                for i in range(3)
            ]  # fmt: skip
            _append(tmp_path, "schedule_entries", entries, d)
            last = (d, h) == (9, 23)
            _append(tmp_path, "redeliveries", entries[:2] if last else entries, d)
    clock = T0 - 10 * hour + 9 * day + 23 * hour + MINUTE
    _append(tmp_path, "batches", [_batch(0, clock)], 0)
    model = Model(tmp_path, window_ms=2 * hour)
    model.refresh()
    assert model.feeds["schedule_entries"].reads == 4  # days 8 and 9, of 20 files
    assert model.feeds["redeliveries"].reads == 4
    got = model.delay_levels(CLUSTER).set_index("delay_level")
    summary = delay_queues(tmp_path)
    assert got.loc[3, "waiting"] == summary.loc[3, "waiting"] == 1
    assert (got.loc[3, "scheduled"], got.loc[3, "released"]) == (3, 2)  # the window's: 23:00
    whole = Model(tmp_path, window_ms=None)
    whole.refresh()
    expected = summary.rename_axis("delay_level").reset_index()
    got = whole.delay_levels(CLUSTER)
    pd.testing.assert_frame_equal(got[expected.columns], expected, check_names=False)


def test_batches_before_the_window_are_not_opened(out: Path) -> None:
    """The window's start comes from the newest clock in the ``batches`` log's statistics, so
    the batches before it are skipped unopened, as the other tables' files are."""
    hour = 3_600_000
    for b in range(10):  # a batch an hour, a file each
        _append(out, "batches", [_batch(b, T0 + b * hour)], b)
    model = Model(out, window_ms=2 * hour)
    model.refresh()
    assert model.since == T0 + 7 * hour
    assert model.feeds["batches"].reads == 3
    assert model.batches["batch_id"].tolist() == [7, 8, 9]


def test_the_slowest_brokers_by_p99_over_the_window(out: Path) -> None:
    p99s = {"b-1": 40, "b-2": 900, "b-3": 120, "b-4": 7}
    rows = [
        _send(T0 + minute * MINUTE + i, broker, p99 if i == 0 else 3, n=minute)
        for broker, p99 in p99s.items()
        for minute in range(3)
        for i in range(50)  # 3 sends in 150 at the high latency: the p99 (nearest rank)
        if not (broker == "b-2" and minute > 0 and i == 0)  # b-2: 1 in 148, the first minute's
    ]
    _append(out, "fault_items", rows, 0)
    _append(out, "batches", [_batch(0, T0 + 3 * MINUTE)], 0)
    model = Model(out)
    model.refresh()
    assert model.latency(CLUSTER).groupby("broker_name")["p99"].max()["b-2"] > 800
    assert model.slowest(CLUSTER) == ["b-3", "b-1", "b-4", "b-2"]  # b-2's p99 is 3 ms
