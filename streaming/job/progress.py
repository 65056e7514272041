"""Each micro-batch's progress: a ``StreamingQueryListener`` that prints one line per batch, the
job's figures of the batch beside Spark's, and hands Spark's figures to the sink, which writes
them into that batch's ``batches`` row (:func:`streaming.job.sink.record_progress`), for the
dashboard and for alerting.

Spark reports a batch's progress after the batch has finished, on its listener thread; the
figures wait here until the job's own thread writes them, at most every
:data:`PROGRESS_EVERY_S` seconds after a batch and at the end, so every write to ``batches``
comes from one thread and a batch pays for a Delta merge only now and then.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

from pyspark.sql.streaming.listener import StreamingQueryListener

from streaming.client import decision_state, publish_order
from streaming.job.alive import Alive
from streaming.job.outage import PREFIX
from udfs.vocabulary import ProducerState

if TYPE_CHECKING:
    from streaming.job.metrics import Metrics

PROGRESS_COLUMNS = (
    "input_rows_per_second",
    "processed_rows_per_second",
    "batch_ms",
    "add_batch_ms",
    "state_rows",
    "state_memory_bytes",
)
"""The ``batches`` columns filled from Spark's progress (null for a batch whose progress the job
did not see before it stopped)."""
PROGRESS_EVERY_S = 10.0
"""How often the running job merges Spark's figures into ``batches``: a merge rewrites a file of
the table and costs about 0.1 s, too much for every micro-batch of a job that aims at decisions
within a second."""


def progress_row(progress: dict[str, Any]) -> dict[str, Any]:
    """The ``batches`` figures of one ``StreamingQueryProgress`` (as JSON): Spark's input and
    processing rates, the batch's duration and its ``addBatch`` part (the query and the sink),
    and the stateful operator's rows and memory."""
    operators = progress.get("stateOperators") or []
    durations = progress.get("durationMs") or {}
    return {
        "batch_id": int(progress["batchId"]),
        "input_rows_per_second": _rate(progress.get("inputRowsPerSecond")),
        "processed_rows_per_second": _rate(progress.get("processedRowsPerSecond")),
        "batch_ms": progress.get("batchDuration"),
        "add_batch_ms": durations.get("addBatch"),
        "state_rows": sum(int(op.get("numRowsTotal") or 0) for op in operators),
        "state_memory_bytes": sum(int(op.get("memoryUsedBytes") or 0) for op in operators),
    }


def _rate(value: Any) -> float | None:
    """Spark writes an unknown rate as NaN (JSON ``"NaN"``) or leaves it out."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(rate) else rate


def progress_line(row: dict[str, Any], job: dict[str, Any] | None) -> str:
    """The line of one batch: Spark's figures (``row``, from :func:`progress_row`) and the job's
    (``job``, from :func:`job_figures`; None when the job has none for the batch). The rate is
    Spark's processed rate: the records over the whole batch's time.

    >>> spark = {"batch_id": 7, "processed_rows_per_second": 12402.0, "batch_ms": 1612,
    ...          "add_batch_ms": 1430, "state_rows": 1, "state_memory_bytes": 680_000}
    >>> job = {"records": 20000, "quarantined": 0, "late": 2, "clock": 1_795_255_345_000,
    ...        "isolated": "broker-c until 2026-11-21 10:02:28"}
    >>> print(progress_line(spark, job))
    batch 7: 20000 records in 1.61 s (12,402/s, addBatch 1.43 s), 0 quarantined, 2 late;
    state 1 rows, 0.68 MB; clock 2026-11-21 10:02:25;
    isolated now: broker-c until 2026-11-21 10:02:28
    """
    rate = row["processed_rows_per_second"]
    seconds = [(row[k] or 0) / 1000 for k in ("batch_ms", "add_batch_ms")]
    spark = (
        f"{seconds[0]:.2f} s ({'-' if rate is None else f'{rate:,.0f}'}/s, "
        f"addBatch {seconds[1]:.2f} s)"
    )
    state = f"state {row['state_rows']} rows, {row['state_memory_bytes'] / 1e6:.2f} MB"
    if job is None:
        return f"batch {row['batch_id']}: {spark}; {state}"
    skipped = f", {job['skipped']} offsets skipped" if job.get("skipped") else ""
    return (
        f"batch {row['batch_id']}: {job['records']} records in {spark}, "
        f"{job['quarantined']} quarantined, {job['late']} late{skipped}; {state}; "
        f"clock {iso(job['clock'])}; isolated now: {job['isolated']}"
    )


class BatchProgress(StreamingQueryListener):
    """Prints each batch's line to ``out`` and keeps Spark's figures for :meth:`take`; with an
    ``alive`` mark, beats it at every event."""

    def __init__(
        self, out: TextIO, metrics: Metrics | None = None, alive: Alive | None = None
    ) -> None:
        self.out = out
        self.metrics = metrics
        self.alive = alive or Alive(None)
        self._rows: list[dict[str, Any]] = []
        self._jobs: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._taken = time.monotonic()
        self.terminated = threading.Event()

    def committed(self, batch_id: int, job: dict[str, Any]) -> None:
        """The job's figures of a batch it committed, for the batch's line."""
        self._jobs[batch_id] = job

    def onQueryStarted(self, event: Any) -> None:
        self.terminated.clear()  # a query started again after one that failed (run.py)
        self.alive.beat()

    def onQueryProgress(self, event: Any) -> None:
        row = progress_row(json.loads(event.progress.json))
        self.alive.beat(row["batch_id"])
        print(progress_line(row, self._jobs.pop(row["batch_id"], None)), file=self.out, flush=True)
        with self._lock:
            self._rows.append(row)
        if self.metrics is not None:
            self.metrics.progress(row)

    def onQueryIdle(self, event: Any) -> None:
        self.alive.beat()
        if self.metrics is not None:
            self.metrics.progress(None)

    def onQueryTerminated(self, event: Any) -> None:
        self.terminated.set()

    def take(self, every: float = 0.0) -> list[dict[str, Any]]:
        """The rows reported since the last call; none while that was less than ``every``
        seconds ago."""
        with self._lock:
            if time.monotonic() - self._taken < every:
                return []
            self._taken = time.monotonic()
            rows, self._rows = self._rows, []
        return rows


@dataclass
class Progress:
    """What the sink reports back to the driver's progress display."""

    batches: int = 0
    rows: int = 0
    messages: int = 0
    """What the valid records stood for (a summary its ``messages``)."""
    last: dict[str, Any] = field(default_factory=dict)
    isolated: dict[tuple[str, str], int] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    error: str | None = None
    """The one-line reason a batch failed, read from the full error where Spark still has it."""


def track_isolation(decisions: list[dict[str, Any]], progress: Progress) -> None:
    for r in sorted(decisions, key=publish_order):
        key = (r["scope_key"], r["broker_name"])
        if r["scope"] != "cluster" or r["decision"].startswith("ROUTE"):
            continue
        if decision_state(r["decision"]) == ProducerState.ISOLATED:
            progress.isolated[key] = r["available_from"]
        else:
            progress.isolated.pop(key, None)


DATA_LOSS = "Some data may have been lost because they are not available in Kafka any more"
"""How Spark's Kafka source begins the error of offsets it cannot read (``failOnDataLoss``)."""


def reason(error: str) -> str:
    """One line out of a Spark error: faultline's own message when there is one, or what Spark's
    Kafka source says of offsets it could not read.

    >>> spark = (f"An error occurred while calling o1.collect.\\n: SparkException: {DATA_LOSS};\\n"
    ...          "Reason: Could not read records in offset [0, 3001) for topic partition t-0")
    >>> print(reason(spark)[:83])
    faultline kafka: Could not read records in offset [0, 3001) for topic partition t-0
    """
    lines = error.strip().splitlines() or ["unknown error"]
    ours = [line[line.index(PREFIX) :] for line in lines if PREFIX in line]
    if ours:
        return ours[0]
    raised = _python_exception(lines)
    if raised is not None:
        return raised
    if DATA_LOSS in error:
        said = [
            line.strip()[len("Reason:") :].strip()
            for line in lines
            if line.strip().startswith("Reason:")
        ]
        return (
            f"{PREFIX} {said[0] if said else DATA_LOSS}: deleted by retention before the job read "
            "them (fail_on_data_loss: false skips and counts them)"
        )
    return lines[0]


TRACEBACK = "Traceback (most recent call last):"


def _python_exception(lines: list[str]) -> str | None:
    """The exception line of the last Python traceback in Spark's error (a data source's or a
    UDF's): ``Type: message`` (faultline's own errors: the message alone), before Spark's own
    stack and SQLSTATE.

    >>> print(_python_exception([
    ...     "SparkException: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python "
    ...     "streaming data source perform prepare: Traceback (most recent call last):",
    ...     '  File "files.py", line 54, in count_records',
    ...     "    return int(pq.read_metadata(path).num_rows)",
    ...     "pyarrow.lib.ArrowInvalid: Parquet magic bytes not found in footer.",
    ...     " SQLSTATE: 38000",
    ...     "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.python(X.scala:1881)"]))
    ArrowInvalid: Parquet magic bytes not found in footer.
    """
    starts = [i for i, line in enumerate(lines) if line.endswith(TRACEBACK)]
    if not starts:
        return None
    said = None
    for line in lines[starts[-1] + 1 :]:
        if line.startswith(("\tat ", " SQLSTATE", "JVM stacktrace")):
            break
        if line and not line[0].isspace():
            said = line
    if said is None:
        return None
    kind, _, message = said.partition(": ")
    if message and kind.startswith(("udfs.", "streaming.")):
        return message
    return f"{kind.rsplit('.', 1)[-1]}: {message}" if message else kind.rsplit(".", 1)[-1]


def job_figures(progress: Progress) -> dict[str, Any]:
    """The job's figures of its last batch, for the batch's line."""
    last = progress.last
    isolated = ", ".join(f"{b} until {iso(u)}" for (_, b), u in sorted(progress.isolated.items()))
    return {
        "records": last["input"],
        "quarantined": last["quarantined"],
        "late": last["late"],
        "clock": last["clock"],
        "isolated": isolated or "none",
        "skipped": last.get("skipped") or 0,
    }


def iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
