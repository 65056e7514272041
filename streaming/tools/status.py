"""``faultline status``: a job's state now, from its output folder alone: running, stopped or
silent, its last batch and how old it is, how far its clock is behind, and the brokers its
cluster scope holds out."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from streaming.job.summary import RUNS
from streaming.tools.explain import iso
from streaming.tools.states import BrokerState, state_at, timeline
from udfs.errors import ConfigError
from udfs.vocabulary import TableName

SILENT_S = 60.0
"""A job whose last batch is older than this, and that did not record an end, is silent: stalled,
killed, or running with no new records (Spark runs no micro-batch for a trigger that finds none,
so the tables alone cannot tell these apart; records flowing, a batch commits every trigger,
500 ms by default)."""


def status(output: Path, now: float | None = None) -> dict[str, Any]:
    """The job's state at ``now`` (epoch seconds; default: the wall clock)."""
    from deltalake import DeltaTable

    now = time.time() if now is None else now
    if not (output / TableName.BATCHES / "_delta_log").is_dir():
        raise ConfigError(f"--output {output}: no faultline tables here")
    batches = DeltaTable(str(output / TableName.BATCHES)).to_pandas(
        columns=["batch_id", "clock", "committed_at"]
    )
    if batches.empty:
        return {"state": "no batch yet", "output": str(output)}
    last = batches.sort_values("committed_at").iloc[-1]
    committed = int(last["committed_at"]) / 1000
    runs = sorted((output / RUNS).glob("*.json"))
    ended = json.loads(runs[-1].read_text())["ended"] if runs else None
    stopped = ended is not None and _epoch(ended) >= committed
    age = now - committed
    state = "stopped" if stopped else "running" if age <= SILENT_S else "silent"
    clock = None if pd.isna(last["clock"]) else int(last["clock"])
    return {
        "state": state,
        "output": str(output),
        "last_batch": int(last["batch_id"]),
        "committed_at": int(last["committed_at"]),
        "age_s": round(age, 1),
        "stopped_at": ended if stopped else None,
        "clock": clock,
        "behind_s": None if clock is None else round((int(last["committed_at"]) - clock) / 1000, 1),
        "held": held_out(output, clock),
    }


def _epoch(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def held_out(output: Path, clock: int | None) -> list[dict[str, Any]]:
    """The brokers that are not simply available at ``clock``, in the words of
    :mod:`streaming.tools.states`: isolated, outlier, panic-kept, probing or out of route."""
    from deltalake import DeltaTable

    if clock is None:
        return []
    rows = DeltaTable(str(output / TableName.BROKER_DECISIONS)).to_pyarrow_table().to_pylist()
    moments = timeline(rows)
    out = []
    for cluster, broker in sorted({(m.cluster, m.broker) for m in moments}):
        now = state_at(moments, cluster, broker, clock)
        if now is not None and now.state != BrokerState.AVAILABLE:
            out.append(
                {
                    "cluster": cluster,
                    "broker": broker,
                    "state": str(now.state),
                    "until": now.until,
                    "reason": now.row.get("reason"),
                }
            )
    return out


def print_status(answer: dict[str, Any], out: TextIO) -> None:
    if "last_batch" not in answer:
        print(f"{answer['output']}: {answer['state']}", file=out)
        return
    state = {
        "stopped": f"stopped at {answer['stopped_at']}",
        "running": "running",
        "silent": f"silent: no batch for {_ago(answer['age_s'])} and no end recorded (stalled, "
        "killed, or no new records)",
    }[answer["state"]]
    print(f"{answer['output']}: {state}", file=out)
    print(
        f"  last batch {answer['last_batch']} committed {iso(answer['committed_at'])} "
        f"({_ago(answer['age_s'])} ago)",
        file=out,
    )
    if answer["clock"] is not None:
        print(
            f"  event time {iso(answer['clock'])}, {_ago(answer['behind_s'])} behind the commit",
            file=out,
        )
    print(
        f"  brokers other than available at that event time: {len(answer['held']) or 'none'}",
        file=out,
    )
    for h in answer["held"]:
        until = f" until {iso(h['until'])}" if h["until"] else ""
        print(f"    {h['cluster']}/{h['broker']}: {h['state']}{until}: {h['reason']}", file=out)


def _ago(seconds: float) -> str:
    """
    >>> [_ago(s) for s in (0.4, 75, 7_300, 200_000)]
    ['0.4 s', '1 min 15 s', '2 h 1 min', '2 d 7 h']
    """
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def status_command(args: Any, out: TextIO) -> int:
    answer = status(Path(args.output))
    if args.json:
        print(json.dumps(answer, indent=1), file=out)
    else:
        print_status(answer, out)
    return 0
