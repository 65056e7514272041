"""The one stateful operator: ``applyInPandasWithState`` keyed by cluster (with
``stateful_shards``, by cluster and slot). Its per-key step, :func:`run_key`, parses the raw
records (:func:`udfs.parse.parse`), calls :func:`udfs.engine.advance`, then hands each table's
rows to the sink's file writer; ``faultline replay`` runs the same step. What goes back to Spark
is only the files' metadata and the counters, so rows never travel back to the JVM or to the
driver."""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from streaming.job import failpoints
from streaming.job.publish import Publisher
from streaming.job.sink import META, decision_messages, own_schema, write_file
from udfs import engine
from udfs.parse import parse
from udfs.vocabulary import TableName

STATE_SCHEMA = "state string"
RECORDS = ("value", "origin", "ingest_ms", "lost")
"""The columns each record brings into the operator, besides the key."""
BATCH_ID = "streaming.sql.batchId"
"""The local property Spark sets on every task of a micro-batch."""


@dataclass(frozen=True)
class Publish:
    """Where a task publishes the decisions it makes (:func:`streaming.job.sink.decision_messages`)
    as soon as the engine has made them, before it writes its files: a decision then reaches the
    producers without waiting for the files, the state store, the end of the batch's other tasks
    and the driver's commits. A batch that is replayed (after a crash, or a failed task) makes the
    same decisions from the same records and state, so it publishes the same messages under the
    same keys of the compacted topic again: nothing a producer could act on differently."""

    conf: tuple[tuple[str, str], ...]
    topic: str
    probe_share: float | None = None
    outage_timeout_s: float | None = None

    def send(self, tables: dict[str, pa.Table], batch_id: int) -> tuple[int, float]:
        """Publish the cluster scope's rows of ``tables``; returns the deliveries that failed
        meanwhile (and were sent again) and the seconds it took."""
        started = time.perf_counter()
        before = self.publisher().failed
        rows: dict[str, list[dict[str, Any]]] = {}
        for name in engine.DECISIONS:
            data = tables.get(name)
            if data is None:
                rows[name] = []
                continue
            data = data.filter(pc.equal(data["scope"], "cluster"))  # what the topic carries
            ids = pa.array(np.full(len(data), batch_id, dtype=np.int64))
            own = data.append_column("batch_id", ids).select(own_schema(name).names)
            rows[name] = own.to_pylist()
        messages = decision_messages(rows, self.topic, self.probe_share)
        if messages:
            self.publisher().deliver(messages)
        return self.publisher().failed - before, time.perf_counter() - started

    def publisher(self) -> Publisher:
        return worker_publisher(self.conf, self.outage_timeout_s)


_PUBLISHERS: dict[tuple[Any, ...], Publisher] = {}


def worker_publisher(
    conf: tuple[tuple[str, str], ...], outage_timeout_s: float | None
) -> Publisher:
    """One Kafka producer per worker process and setting, kept for the worker's later tasks."""
    key = (conf, outage_timeout_s)
    if key not in _PUBLISHERS:
        _PUBLISHERS[key] = Publisher(dict(conf), outage_timeout_s)
    return _PUBLISHERS[key]


def state_function(
    config: engine.EngineConfig,
    output: str,
    app_id: str,
    shards: int = 1,
    flat: frozenset[str] = frozenset(),
    publish: Publish | None = None,
    measure: bool = False,
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The function handed to Spark. Spark's contract: it is called once per key that has
    records in the micro-batch (:data:`RECORDS`), in no particular order (the engine sorts); the
    state is one JSON string; there are no timeouts (the engine's clock is event time). A key is
    a cluster, or with ``shards`` > 1 a cluster and a slot (its shard is ``slot % shards``).
    ``flat`` names the tables made before they were partitioned
    (:func:`streaming.job.sink.flat_tables`); ``publish``, where the decisions go at once;
    ``measure``: each key's counter row carries its :func:`figures` (the job serves metrics)."""
    root = Path(output)

    def advance(
        key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        context = TaskContext.get()
        assert context is not None, "called outside a Spark task"
        arrow_on_every_core()
        started = time.perf_counter()
        parts = list(frames)  # Spark hands the records over while this runs
        raw = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=RECORDS)
        shard = engine.Shard(int(key[1]) % shards, shards) if shards > 1 else engine.WHOLE
        previous = state.get[0] if state.exists else None
        batch_id = int(str(context.getLocalProperty(BATCH_ID)))
        saved, metas = run_key(
            str(key[0]),
            shard,
            previous,
            raw,
            config,
            root,
            batch_id,
            app_id,
            received=time.perf_counter() - started,
            flat=flat,
            publish=publish,
            measure=measure,
        )
        failpoints.hold("after-files", batch_id)
        state.update((saved,))
        for meta in metas:
            meta["task"] = context.partitionId()
        # every column, also when no table got a row (a batch of heartbeats, say)
        yield pd.DataFrame(metas, columns=META.names)

    return advance


def arrow_on_every_core() -> None:
    """Arrow's thread pool as large as the worker's cores. Spark sets OMP_NUM_THREADS to the
    task's one core, and Arrow sizes its pool by it; a stage of one key leaves the other cores
    idle, and Arrow's JSON reader and Parquet writer can use them (a 50,000-record batch's JSON
    read in the job: 0.31 -> 0.17-0.23 s)."""
    pa.set_cpu_count(len(os.sched_getaffinity(0)))


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def run_key(
    cluster: str,
    shard: engine.Shard,
    state: str | None,
    raw: pd.DataFrame,
    config: engine.EngineConfig,
    root: Path,
    batch_id: int,
    app_id: str,
    received: float = 0.0,
    flat: frozenset[str] = frozenset(),
    publish: Publish | None = None,
    measure: bool = False,
) -> tuple[str, list[dict[str, Any]]]:
    """One key's work in one batch, in Spark or in a replay: parse the raw records
    (:data:`RECORDS`), advance the state (its text, None for a new key), publish the decisions
    (with ``publish``), write each table's rows as a file under ``root``. Returns the new state
    and the metadata rows (:data:`META`), the counters' with the key's :func:`figures` when
    ``measure``."""
    with _collector_paused():
        started = time.perf_counter()
        events = parse(raw["value"], raw["origin"], raw["ingest_ms"], raw["lost"]).to_pandas()
        parsed = time.perf_counter()
        previous = engine.loads(state) if state is not None else None
        loaded = time.perf_counter()

        def write(table: tuple[str, pa.Table]) -> list[dict[str, Any]]:
            name, rows = table
            return write_file(root, name, rows, batch_id, app_id, name not in flat)

        # the decisions are published while the engine's later stages run; the files are
        # written two at a time: Arrow's Parquet writer lets go of the GIL, and a stage of one
        # key leaves the other core idle (a 50,000-event batch's files: 0.10-0.14 s -> 0.06-0.10)
        with ThreadPoolExecutor(2) as pool:
            sent: list[Future[tuple[int, float]]] = []

            def decided(tables: dict[str, pa.Table]) -> None:
                assert publish is not None
                sent.append(pool.submit(publish.send, tables, batch_id))

            # without a publisher, the engine makes no early copy of the decisions
            hand = decided if publish is not None else None
            step = engine.advance(cluster, previous, events, config, shard, hand)
            stepped = time.perf_counter()
            saved = engine.dumps(step.state)
            advanced = time.perf_counter()
            metas = [meta for files in pool.map(write, step.tables.items()) for meta in files]
            failed, publishing = sent[0].result() if sent else (0, 0.0)
        metas.append(
            {
                "table": None,
                **step.stats,
                "clock": step.state.clock,
                "receive_ms": _ms(received),
                "parse_ms": _ms(parsed - started),
                "engine_ms": _ms(advanced - parsed),
                "publish_ms": _ms(publishing),
                "files_ms": _ms(time.perf_counter() - advanced),
                "state_bytes": len(saved.encode()),
                "state_ms": _ms(loaded - parsed + advanced - stepped),
                "task": 0,
                "figures": figures(cluster, shard, step, config, failed) if measure else None,
            }
        )
        return saved, metas


COUNTED = {
    TableName.BROKER_DECISIONS: ["scope", "decision"],
    TableName.QUARANTINE: ["reason_code"],
}
"""The rows of a batch the metrics count, by these columns."""


def figures(
    cluster: str,
    shard: engine.Shard,
    step: engine.Step,
    config: engine.EngineConfig,
    publish_failures: int = 0,
) -> str:
    """What the job's metrics (:mod:`streaming.job.metrics`) need of one key's batch, as JSON:
    its cluster and shard, the gauges of its state (:func:`udfs.engine.gauges`), the rows it
    wrote to the :data:`COUNTED` tables by those columns (``[*values, rows]``, in order), and
    the Kafka deliveries that failed while it published its decisions."""
    counts = {}
    for name, columns in COUNTED.items():
        data = step.tables.get(name)
        if data is not None and len(data):
            grouped = data.group_by(columns).aggregate([([], "count_all")]).to_pylist()
            # in order of their values: Arrow's groups come in no set order
            counts[name] = sorted([*(r[c] for c in columns), r["count_all"]] for r in grouped)
    gauges = engine.gauges(cluster, step.state, config, shard)
    return json.dumps(
        {
            "cluster": cluster,
            "shard": shard.index,
            **gauges,
            **counts,
            "publish_failures": publish_failures,
        },
        separators=(",", ":"),
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused: a step makes and keeps hundreds of thousands of
    objects on a large fleet, and each of the full collections they would set off walks every
    object the worker holds (0.6 s of a 50,000-event batch at 5,000 producers). It resumes
    after the step, and collects the step's garbage as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
