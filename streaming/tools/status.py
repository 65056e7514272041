"""``faultline status``: a job's state now, from its output folder alone: running, stalled or
stopped (by the job's liveness mark and its recorded end; ``silent`` for an output written before
the mark), its last batch and how old it is, how far its clock is behind, and the brokers its
cluster scope holds out."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from streaming.job.alive import read_alive
from streaming.job.summary import RUNS
from streaming.tools import OUTPUT_HINT
from streaming.tools.explain import iso
from streaming.tools.states import BrokerState, state_at, timeline
from streaming.tools.units import duration
from udfs.errors import ConfigError
from udfs.vocabulary import TableName

LIVE_S = 60.0
"""A job whose liveness mark (``streaming.job.alive.Alive``) is older than this, and that
recorded no end, is stalled: killed, failed or stuck. A running driver beats the mark every
``progress_interval`` (2 s by default) and at every progress and idle event of its query (idle
events every ``spark.sql.streaming.noDataProgressEventInterval``, 10 s by default), so a fresh mark
says the job runs even when no record comes and Spark runs no batch. For an output without a
mark (a job older than it), a last batch older than this with no end recorded is ``silent``:
stalled, killed, or running with no new records (the tables alone cannot tell these apart)."""


def liveness(output: Path, committed_ms: int | None, now: float | None = None) -> dict[str, Any]:
    """Whether the job that writes ``output`` runs at ``now`` (epoch seconds; default: the wall
    clock), given its last batch's commit time (epoch ms; None: no batch yet): ``state`` is
    ``running`` (a fresh liveness mark), ``stalled`` (a stale mark and no end recorded after
    it), ``stopped`` (the last run recorded its end, ``stopped_at``) or, for an output without a
    mark, ``silent`` (no end recorded and no batch for :data:`LIVE_S`); ``age_s``: the last
    commit's age; ``seen_s``: the mark's age (None: no mark)."""
    now = time.time() if now is None else now
    runs = sorted((output / RUNS).glob("*.json"))
    ended = json.loads(runs[-1].read_text())["ended"] if runs else None
    mark = read_alive(output)
    age = None if committed_ms is None else round(now - committed_ms / 1000, 1)
    last_sign = (
        mark["at"] if mark is not None else None if committed_ms is None else committed_ms / 1000
    )
    if ended is not None and (last_sign is None or _epoch(ended) >= last_sign):
        state = "stopped"
    elif mark is not None:
        state = "running" if now - mark["at"] <= LIVE_S else "stalled"
    elif age is None:
        state = "no batch yet"
    else:
        state = "running" if age <= LIVE_S else "silent"
    return {
        "state": state,
        "age_s": age,
        "seen_s": None if mark is None else round(now - mark["at"], 1),
        "pid": None if mark is None else mark.get("pid"),
        "stopped_at": ended if state == "stopped" else None,
    }


def headline(live: dict[str, Any]) -> str:
    """:func:`liveness` in a few words, as ``faultline status`` and the dashboard's badge say it.

    >>> headline({"state": "running", "age_s": 3.2})
    'live · last commit 3.2 s ago'
    >>> headline({"state": "stalled", "age_s": 250})
    'stalled · last commit 4 min 10 s ago'
    >>> headline({"state": "stopped", "age_s": 9, "stopped_at": "2026-11-21T10:02:00.000Z"})
    'stopped at 2026-11-21T10:02:00.000Z'
    >>> headline({"state": "running", "age_s": None})
    'live · no batch yet'
    """
    if live["state"] == "stopped":
        return f"stopped at {live['stopped_at']}"
    word = {"running": "live"}.get(live["state"], live["state"])
    commit = (
        "no batch yet" if live["age_s"] is None else f"last commit {duration(live['age_s'])} ago"
    )
    return f"{word} · {commit}"


def status(output: Path, now: float | None = None) -> dict[str, Any]:
    """The job's state at ``now`` (epoch seconds; default: the wall clock): :func:`liveness`,
    its last batch, how far its event time is behind the commit, and the brokers held out."""
    from deltalake import DeltaTable

    now = time.time() if now is None else now
    if not (output / TableName.BATCHES / "_delta_log").is_dir():
        raise ConfigError(f"--output {output}: no faultline tables here; {OUTPUT_HINT}")
    batches = DeltaTable(str(output / TableName.BATCHES)).to_pandas(
        columns=["batch_id", "clock", "committed_at"]
    )
    if batches.empty:
        return {**liveness(output, None, now), "output": str(output)}
    last = batches.sort_values("committed_at").iloc[-1]
    live = liveness(output, int(last["committed_at"]), now)
    clock = None if pd.isna(last["clock"]) else int(last["clock"])
    return {
        **live,
        "output": str(output),
        "last_batch": int(last["batch_id"]),
        "committed_at": int(last["committed_at"]),
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
    print(f"{answer['output']}: {headline(answer)}", file=out)
    if answer["state"] == "stalled":
        print(
            f"  no sign of the job for {duration(answer['seen_s'])} (pid {answer['pid']}) and no "
            "end recorded: killed, failed or stuck",
            file=out,
        )
    elif answer["state"] == "silent":
        print(
            f"  no batch for {duration(answer['age_s'])} and no end recorded (stalled, killed, or "
            "no new records; this job writes no liveness mark)",
            file=out,
        )
    if "last_batch" not in answer:
        return
    print(
        f"  last batch {answer['last_batch']} committed {iso(answer['committed_at'])} "
        f"({duration(answer['age_s'])} ago)",
        file=out,
    )
    if answer["clock"] is not None:
        print(
            f"  event time {iso(answer['clock'])}, {duration(answer['behind_s'])} behind the "
            "commit",
            file=out,
        )
    print(
        f"  brokers other than available at that event time: {len(answer['held']) or 'none'}",
        file=out,
    )
    for h in answer["held"]:
        until = f" until {iso(h['until'])}" if h["until"] else ""
        print(f"    {h['cluster']}/{h['broker']}: {h['state']}{until}: {h['reason']}", file=out)


def status_command(args: Any, out: TextIO) -> int:
    answer = status(Path(args.output))
    if args.json:
        print(json.dumps(answer, indent=1), file=out)
    else:
        print_status(answer, out)
    return 0
