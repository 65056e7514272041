"""What a job's tables hold, summed up: the summary printed at the end of a run, also read by
``faultline replay`` and the tests."""

from __future__ import annotations

import io
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from streaming.job.progress import Progress
from udfs.schema import TABLES
from udfs.vocabulary import Decision, TableName


def table_counts(output: Path) -> dict[str, int]:
    from deltalake import DeltaTable

    counts = {}
    for name in [*TABLES, TableName.BATCHES]:  # from the Delta log's file statistics, not the rows
        files = pa.table(DeltaTable(str(output / name)).get_add_actions(flatten=True))
        counts[name] = int(pc.sum(files["num_records"]).as_py() or 0)
    return counts


def isolation_windows(output: Path) -> list[dict[str, Any]]:
    """ISOLATE..RESTORE windows per (scope, scope_key, broker), from ``broker_decisions``."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(output / TableName.BROKER_DECISIONS)).to_pyarrow_table().to_pylist()
    rows = [r for r in rows if r["decision"] in (Decision.ISOLATE, Decision.RESTORE)]
    rows.sort(
        key=lambda r: (
            r["scope"],
            r["scope_key"],
            r["broker_name"],
            r["effective_at"],
            r["decision"] != Decision.RESTORE,
        )
    )
    windows: list[dict[str, Any]] = []
    open_: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["scope"], r["scope_key"], r["broker_name"])
        if r["decision"] == Decision.ISOLATE:
            open_[key] = {
                "scope": key[0],
                "scope_key": key[1],
                "broker_name": key[2],
                "start": r["effective_at"],
                "end": None,
                "cause": r["cause_event_id"],
            }
        elif r["decision"] == Decision.RESTORE and key in open_:
            window = open_.pop(key)
            window["end"] = r["effective_at"]
            windows.append(window)
    windows.extend(open_.values())
    return windows


def delay_queues(output: Path) -> pd.DataFrame:
    """Per delay level: messages scheduled, released, released into the DLQ and still waiting;
    level 0 counts the messages that went to the DLQ at once. From the tables, so it covers every
    run into this output."""
    from deltalake import DeltaTable

    entries = DeltaTable(str(output / TableName.SCHEDULE_ENTRIES)).to_pandas(
        columns=["delay_level"]
    )
    out = DeltaTable(str(output / TableName.REDELIVERIES)).to_pandas(columns=["delay_level", "dlq"])
    counts = pd.DataFrame(
        {
            "scheduled": entries.groupby("delay_level").size(),
            "released": out[~out["dlq"]].groupby("delay_level").size(),
            "dlq": out[out["dlq"]].groupby("delay_level").size(),
        }
    )
    counts = counts.fillna(0).astype("int64")
    counts["waiting"] = (
        counts["scheduled"] - counts["released"] - counts["dlq"].where(counts.index > 0, 0)
    )
    return counts.sort_index()


def transaction_states(output: Path) -> dict[str, int]:
    """Rows per state of ``transactions``, and ``WAITING``: transactions whose latest row leaves
    them waiting for an end or a check."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(output / TableName.TRANSACTIONS)).to_pandas(
        columns=["cluster", "transaction_id", "state", "effective_at", "next_check_at"]
    )
    counts = {str(k): int(v) for k, v in rows["state"].value_counts().sort_index().items()}
    settled = rows["next_check_at"].isna().rename("settled")
    latest = rows.assign(settled=settled).sort_values(["effective_at", "settled"], kind="stable")
    latest = latest.groupby(["cluster", "transaction_id"]).tail(1)
    if len(rows):
        counts["WAITING"] = int(latest["next_check_at"].notna().sum())
    return counts


RUNS = Path("_job") / "runs"
"""Where, under the output, each run's summary is kept (text and JSON)."""
RUNS_KEPT = 100
"""The runs whose summaries are kept; the oldest go first."""


def time_per_state(output: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Per broker of the cluster scope and per state other than available (its words:
    :mod:`streaming.tools.states`), how many times and for how long, up to the last batch's
    clock for a state that still holds."""
    from deltalake import DeltaTable

    from streaming.tools.states import BrokerState, spans, timeline

    rows = DeltaTable(str(output / TableName.BROKER_DECISIONS)).to_pyarrow_table().to_pylist()
    batches = DeltaTable(str(output / TableName.BATCHES)).to_pyarrow_table(columns=["clock"])
    clock = pc.max(batches["clock"]).as_py() or 0
    out: dict[str, dict[str, dict[str, float]]] = {}
    for s in spans(timeline(rows)):
        if s.state == BrokerState.AVAILABLE:
            continue
        stats = out.setdefault(s.broker, {}).setdefault(s.state, {"count": 0, "seconds": 0.0})
        stats["count"] += 1
        stats["seconds"] = round(stats["seconds"] + ((s.end or clock) - s.start) / 1000, 3)
    return dict(sorted(out.items()))


def summary(output: Path, progress: Progress) -> dict[str, Any]:
    """A run's summary: what it read, and what the tables hold at its end."""
    ended = time.time()
    return {
        "started": _utc(progress.started),
        "ended": _utc(ended),
        "seconds": round(ended - progress.started, 1),
        "records": progress.rows,
        "messages": progress.messages,
        "batches": progress.batches,
        "held": time_per_state(output),
        "delay_queues": {
            str(level): {k: int(v) for k, v in row.items()}
            for level, row in delay_queues(output).iterrows()
        },
        "transactions": transaction_states(output),
        "tables": table_counts(output),
    }


def _utc(seconds: float) -> str:
    """Epoch seconds as UTC text, to the millisecond.

    >>> _utc(1795255200.5)
    '2026-11-21T10:00:00.500Z'
    """
    moment = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


def summary_text(facts: dict[str, Any], output: Path) -> str:
    """:func:`summary` as the run prints it."""
    out = io.StringIO()
    covered = (
        f" standing for {facts['messages']} messages"  # producers that report in summaries
        if facts["messages"] > facts["records"]
        else ""
    )
    print(
        f"\nfaultline: {facts['records']} records{covered} in {facts['batches']} batches, "
        f"{facts['seconds']:.1f} s",
        file=out,
    )
    print(
        "\nbrokers held out (cluster scope): broker, state, times, total time",
        file=out,
    )
    for broker, states in facts["held"].items():
        for state, stats in states.items():
            print(
                f"  {broker:<20} {state:<13} {stats['count']:>4} {stats['seconds']:>10.1f} s",
                file=out,
            )
    if not facts["held"]:
        print("  none", file=out)
    print(
        "\ndelay queues (SCHEDULE_TOPIC_XXXX): level, scheduled, released, waiting, to DLQ",
        file=out,
    )
    for level, row in facts["delay_queues"].items():
        name = "DLQ at once" if level == "0" else f"level {level}"
        print(
            f"  {name:<12} {row['scheduled']:>8} {row['released']:>8} {row['waiting']:>8} "
            f"{row['dlq']:>8}",
            file=out,
        )
    if not facts["delay_queues"]:
        print("  none", file=out)
    print("\ntransactions: rows per state (WAITING: transactions not settled)", file=out)
    for state, count in facts["transactions"].items():
        print(f"  {state:<26} {count:>8}", file=out)
    if not facts["transactions"]:
        print("  none", file=out)
    print("\nrows per table:", file=out)
    for name, count in facts["tables"].items():
        print(f"  {name:<20} {count:>9}  {output / name}", file=out)
    return out.getvalue()


def print_summary(output: Path, progress: Progress, out: TextIO) -> None:
    """Print the run's summary and keep it under ``output/_job/runs/`` (text and JSON, named
    by when the run started; the last :data:`RUNS_KEPT` runs)."""
    facts = summary(output, progress)
    text = summary_text(facts, output)
    out.write(text)
    out.flush()
    folder = output / RUNS
    folder.mkdir(parents=True, exist_ok=True)
    name = facts["started"].replace(":", "").replace("-", "").replace(".", "")
    (folder / f"{name}.txt").write_text(text.lstrip("\n"), encoding="utf-8")
    (folder / f"{name}.json").write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
    for old in sorted(folder.glob("*.json"))[:-RUNS_KEPT]:
        old.unlink()
        old.with_suffix(".txt").unlink(missing_ok=True)
