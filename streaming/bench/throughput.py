"""Throughput benchmark: the full job against a stateless pass-through over the same source and
sink, on the same events. Prints, for both, records/s over all batches and over the steady state
(every batch but the first, which pays for Spark's and Python's warm-up), then the full job's
batches one by one: where the time went (source and shuffle, handing the records to the
operator, parse, stateful engine, file writes, Delta commit), the bytes of state written and the
rows written per table (a regression in either shows there). The last line is the steady ratio.

    python -m streaming.bench.throughput [--source files|kafka] [--scenario default] [--repeat 4]
                              [--speed 1] [--batch 50000] [--shards 1] [--floor [read]]
                              [--state-store hdfs|rocksdb] [--retain N] [--fuzzed SHARE]
                              [--reporting full|summary]

The pass-through reads the same records with the same source and writes every raw record to a
Delta table through an executor-side Parquet writer and a driver-side commit, as the job's sink
does. ``--source kafka`` publishes the events to an Apache Kafka broker it starts
(:mod:`streaming.sim.kafka_broker`), spread over 8 topics of 4 partitions, and reads them with the
job's Kafka source (Spark's own). ``--scenario`` takes any scenario in ``conf/scenarios`` (for
example ``fleet-16`` and ``fleet-1000``, the same number of events from 16 and from 1,000
brokers). ``--speed 10`` plays the scenario ten times as fast (its events at a tenth of their
distance in event time: ten times the rate, so ten times the event ids a cluster keeps to
recognise a repeat). ``--shards 2`` runs the job with ``stateful_shards: 2``: each cluster's
work split over two tasks; the breakdown then also shows the busiest task's operator time, which
is what the stateful stage costs the batch when the tasks run side by side. ``--floor`` runs, in
place of the full job, the same query with a stateful function that only takes the records over
and reports their count: what Spark's source, shuffle, operator and sink cost before any parsing
or RocketMQ logic, the ceiling of the steady ratio on this machine; ``--floor read`` has it also
read the records with Arrow's JSON reader into the parser's typed columns, without checks: the
ceiling for any job that parses them. ``--state-store rocksdb`` runs the job with
``state_store: rocksdb``, and ``--retain N`` with ``min_batches_to_retain: N``; the line before
the last two gives Spark's state store commit time, the state's memory and the checkpoint's size
on disk after the run (and every 10 batches, from 20 batches on).
``--fuzzed 0.6`` makes that share of the records fuzzed (:mod:`streaming.sim.fuzz`, mutants of the
scenario's events mixed among them), runs the pass-through and the full job on them, then the
full job once more on the clean events alone, and ends with the steady ratio of the full job's
records/s on the fuzzed input to that on the clean.
``--reporting summary`` has the scenario's producers report in summaries
(:class:`streaming.client.Reporter`), ``full`` one record per send: the full job's line is then
followed by the messages its records stand for per second ("messages covered"), the figure that
compares the two (``--scenario volume``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import zlib
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from streaming.config import load_job_config, load_scenario
from streaming.job import sink
from streaming.job.progress import Progress
from streaming.job.publish import Publisher
from streaming.job.query import build_query, raw_records, run_to_end
from streaming.job.session import spark_jars, spark_session
from streaming.job.sink import META
from streaming.job.sources.files import list_files
from streaming.job.stateful import arrow_on_every_core, worker_publisher
from streaming.sim.fuzz import CORE, mixed_stream
from streaming.sim.kafka_broker import kafka_broker
from streaming.sim.simulator import simulate, write_jsonl
from udfs.parse import read_typed
from udfs.vocabulary import Decision, ProducerState

KAFKA_TOPICS = 8
"""Topics the events are spread over (4 partitions each), as a fleet's are."""


def _publish(folder: Path, bootstrap: str) -> None:

    publisher = Publisher({"bootstrap.servers": bootstrap})
    for path in list_files(folder):
        for line in path.read_bytes().splitlines():
            key = f"{zlib.crc32(line):08x}"
            publisher.send(f"bench-{zlib.crc32(line) % KAFKA_TOPICS}", line, key=key)
    publisher.flush()


def _events(
    scenario: str,
    repeat: int,
    folder: Path,
    speed: int = 1,
    fuzzed: float = 0.0,
    batch: int = 1,
    reporting: str | None = None,
) -> int:
    """The scenario's events, repeated with shifted ids and played ``speed`` times as fast, as
    JSON-lines files; with ``fuzzed`` that share of the records are mutants of them (placed as
    :func:`streaming.sim.fuzz.mixed_stream` does for micro-batches of ``batch``), in one file;
    ``reporting`` overrides the scenario's (``full`` or ``summary``)."""
    spec = load_scenario(scenario)
    if reporting is not None:
        spec = spec.model_copy(update={"reporting": reporting})
    events = simulate(spec)
    t0 = events[0]["event_time"]
    span = (events[-1]["event_time"] - t0) // speed + 1000
    out = []
    for r in range(repeat):
        for e in events:
            t = t0 + (e["event_time"] - t0) // speed + r * span
            shifted = {**e, "event_id": f"{r}-{e['event_id']}", "event_time": t}
            if "window_start" in e:  # a summary: its window and first send move alike
                start = t0 + (e["window_start"] - t0) // speed + r * span
                shifted.update(
                    window_start=start,
                    window_end=max(start + (e["window_end"] - e["window_start"]) // speed, t + 1),
                )
            if "first_event_id" in e:
                shifted.update(
                    first_event_id=f"{r}-{e['first_event_id']}",
                    first_time=t0 + (e["first_time"] - t0) // speed + r * span,
                )
            out.append(shifted)
    if not fuzzed:
        write_jsonl(out, folder)
        return len(out)

    records, _ = mixed_stream(out, round(len(out) * fuzzed / (1 - fuzzed)), CORE, batch)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part-00000.jsonl").write_bytes(b"\n".join(records) + b"\n")
    return len(records)


def _passthrough(spark: Any, raw: Any, output: Path) -> list[tuple[float, int]]:
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake.transaction import AddAction

    schema = pa.schema(
        [
            ("value", pa.string()),
            ("origin", pa.string()),
            ("ingest_ms", pa.int64()),
            ("batch_id", pa.int64()),
        ]
    )
    table = output / "passthrough"
    DeltaTable.create(str(table), schema=schema, mode="ignore")
    times: list[tuple[float, int]] = []

    def write(batches: Any, batch_id: int) -> Any:
        import uuid

        data = pa.Table.from_batches(list(batches))
        data = data.append_column("batch_id", pa.array([batch_id] * len(data), pa.int64()))
        name = f"part-{batch_id:08d}-{uuid.uuid4().hex}.parquet"
        pq.write_table(data, table / name)
        yield pa.RecordBatch.from_pylist(
            [{"path": name, "size": (table / name).stat().st_size, "records": len(data)}]
        )

    def sink(df: Any, batch_id: int) -> None:
        started = time.time()
        metas = df.mapInArrow(
            lambda it: write(it, batch_id), "path string, size bigint, records bigint"
        ).collect()
        dt = DeltaTable(str(table))
        actions: list[Any] = [
            AddAction(
                m.path, m.size, {}, int(time.time() * 1000), True, f'{{"numRecords":{m.records}}}'
            )
            for m in metas
        ]
        dt.create_write_transaction(
            actions,
            mode="append",
            schema=dt.schema(),
            commit_properties=CommitProperties(app_transactions=[Transaction("bench", batch_id)]),
        )
        times.append((time.time() - started, sum(int(m.records) for m in metas)))

    query = (
        raw.select("value", "origin", "ingest_ms")
        .writeStream.foreachBatch(sink)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(output / "_ck_passthrough"))
        .start()
    )
    query.awaitTermination()
    return times


def floor(
    isolate: tuple[tuple[tuple[str, str], ...], str] | None = None, read: bool = False
) -> Any:
    """A stateful function that takes the records over, reports their count and does nothing
    else; with ``read`` it also reads them with Arrow's JSON reader as the parser's typed
    columns (:func:`udfs.parse.read_typed`, the least a parse costs); with ``isolate`` (the
    Kafka settings and the decisions topic) it also publishes the least a decision takes: each
    broker a send failed on (``REMOTING_EXCEPTION``) as isolated at the cluster scope, one
    message per broker, found by a substring search and read with ``json`` (the floor of
    :mod:`streaming.bench.latency`)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    def nothing(key: Any, frames: Any, state: Any) -> Any:
        arrow_on_every_core()  # as the job's operator does
        parts = list(frames)
        count = sum(len(f) for f in parts)
        started = time.perf_counter()
        if read and count and read_typed(pd.concat([f["value"] for f in parts])) is None:
            raise ValueError("a record Arrow's JSON reader cannot type: the floor reads clean ones")
        parsed = round((time.perf_counter() - started) * 1000)
        if isolate is not None and count:
            conf, topic = isolate
            values = pa.array(pd.concat([f["value"] for f in parts]), pa.string())
            failed = values.filter(pc.match_substring(values, '"outcome":"REMOTING_EXCEPTION"'))
            latest: dict[str, tuple[str, str, str]] = {}
            for text in failed.to_pylist():
                event = json.loads(text)
                name = f"broker/{event['cluster']}/{event['broker_name']}"
                decision = {
                    "scope": "cluster",
                    "cluster": event["cluster"],
                    "broker_name": event["broker_name"],
                    "decision": Decision.ISOLATE,
                    "state": ProducerState.ISOLATED,
                    "effective_at": event["event_time"],
                    "cause_event_id": event["event_id"],
                }
                latest[name] = (topic, json.dumps(decision), name)
            if latest:
                worker_publisher(conf, None).deliver(list(latest.values()))
        text = ("table", "path", "stats", "partition", "figures")
        row = dict.fromkeys(META.names, 0) | dict.fromkeys(text)
        row |= {"input": count, "valid": count, "task": 0, "clock": None, "parse_ms": parsed}
        state.update(("",))
        yield pd.DataFrame([row], columns=META.names)

    return nothing


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _print_state_store(name: str, query: Any, checkpoint: Path, sizes: dict[int, int]) -> None:
    """Spark's state store commit time and memory (from the query's progress, steady batches)
    and the checkpoint's size on disk."""
    progress = [p.stateOperators[0] for p in query.recentProgress if p.stateOperators]
    steady = progress[1:] or progress
    commit = sum(p.commitTimeMs for p in steady) / max(len(steady), 1) / 1000
    memory = max((p.memoryUsedBytes for p in progress), default=0)
    mb = 1 / 1_000_000
    print(
        f"state store {name}: commit {commit:.2f} s per batch steady, {memory * mb:.1f} MB in "
        f"memory; checkpoint {_bytes(checkpoint) * mb:.2f} MB on disk after the run (its state "
        f"{_bytes(checkpoint / 'state') * mb:.2f} MB)"
    )
    if len(sizes) >= 20:
        every = ", ".join(f"{b + 1}: {n * mb:.2f}" for b, n in sorted(sizes.items()) if b % 10 == 9)
        print(f"checkpoint on disk (MB) after batches {every}")


def _table_rows(committed: dict[str, int]) -> str:
    """Rows written per table, largest first."""
    return ", ".join(f"{n} {rows:,}" for n, rows in sorted(committed.items(), key=lambda e: -e[1]))


def _rate(runs: list[tuple[float, int]]) -> float:
    """Records per second over the given batches."""
    return sum(n for _, n in runs) / max(sum(t for t, _ in runs), 1e-9)


def _job(
    spark: Any,
    config: Any,
    folder: Path,
    output: Path,
    checkpoint: Path,
    at_floor: str | None,
) -> tuple[list[dict[str, Any]], Any, dict[int, int]]:
    """The job (or ``at_floor`` its query with a stateful function that does nothing, or with
    ``read`` only reads the records) run to the end of ``folder``: each batch's figures, the
    query, the checkpoint's size per batch."""
    output.mkdir(parents=True, exist_ok=True)
    sink.create_tables(output)
    batches: list[dict[str, Any]] = []
    sizes: dict[int, int] = {}

    def on_batch(batch: dict[str, Any]) -> None:
        batches.append(batch)
        sizes[int(batch["batch_id"])] = _bytes(checkpoint)

    query = run_to_end(
        lambda: build_query(
            spark,
            config,
            folder,
            output,
            checkpoint,
            Progress(),
            on_batch=on_batch,
            operator=floor(read=at_floor == "read") if at_floor else None,
        )
    )
    return batches, query, sizes


def _print_batches(batches: list[dict[str, Any]]) -> None:
    print(
        "\nfull job per batch (s): records, total = source+shuffle + receive + parse + "
        "stateful + write + commit (operator times summed over tasks); busiest task; "
        "state bytes written and the time to read and write them; then the rows written per "
        "table"
    )
    for b in batches:
        operator = b["slowest_task_ms"] / 1000  # tasks run side by side
        print(
            f"  batch {b['batch_id']:>3}: {b['input']:>7} {b['seconds']:>6.2f} = "
            f"{b['write_ms'] / 1000 - operator:>5.2f} + {b['receive_ms'] / 1000:>5.2f} + "
            f"{b['parse_ms'] / 1000:>5.2f} + "
            f"{b['engine_ms'] / 1000:>5.2f} + {b['files_ms'] / 1000:>5.2f} + "
            f"{b['commit_ms'] / 1000:>5.2f}; {b['slowest_task_ms'] / 1000:>5.2f}; "
            f"{b['state_bytes']:>11,} in {(b.get('state_ms') or 0) / 1000:.2f} s"
        )
        if b.get("committed"):
            print(f"{'':>13} rows: {_table_rows(b['committed'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", choices=("files", "kafka"), default="files")
    parser.add_argument("--scenario", default="default")
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--speed", type=int, default=1, help="play the scenario N times as fast")
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--shards", type=int, default=1, help="stateful_shards of the job")
    parser.add_argument("--state-store", choices=("hdfs", "rocksdb"), default="hdfs")
    parser.add_argument(
        "--sink",
        choices=("delta-rs", "delta-spark"),
        default="delta-rs",
        help="the job's sink: faultline's commits through delta-rs, or Delta Lake's own writer",
    )
    parser.add_argument("--retain", type=int, help="min_batches_to_retain of the job")
    parser.add_argument(
        "--floor",
        nargs="?",
        const="spark",
        choices=("spark", "read"),
        help="the job's query with a stateful function that does nothing (spark), or that only "
        "reads the records with Arrow's JSON reader (read)",
    )
    parser.add_argument(
        "--fuzzed", type=float, default=0.0, help="this share of the records fuzzed (0 to 0.99)"
    )
    parser.add_argument(
        "--reporting",
        choices=("full", "summary"),
        help="how the scenario's producers report (default: the scenario's own)",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.fuzzed < 1:
        parser.error("--fuzzed takes a share from 0 up to (not including) 1")
    if args.fuzzed and args.floor == "read":
        parser.error("--floor read reads clean records only: a fuzzed one fails the read")
    if args.fuzzed and args.source != "files":
        parser.error("--fuzzed compares against the clean events with --source files only")

    work = Path(tempfile.mkdtemp(prefix="faultline-bench-"))
    cluster = ExitStack()
    try:
        folder = work / "events"
        total = _events(
            args.scenario, args.repeat, folder, args.speed, args.fuzzed, args.batch, args.reporting
        )
        settings: dict[str, Any] = {"source": "files", "path": str(folder)}
        if args.source == "kafka":
            bootstrap = cluster.enter_context(kafka_broker()).bootstrap
            _publish(folder, bootstrap)
            settings = {"source": "kafka", "kafka_bootstrap": bootstrap, "topic": None}
            settings["subscribe_pattern"] = "bench-.*"
            settings["kafka_outputs"] = False
        config = load_job_config(
            None,
            {
                **settings,
                "output": str(work / "job"),
                "checkpoint": str(work / "ck"),
                "max_records_per_batch": args.batch,
                "stateful_shards": args.shards,
                "state_store": args.state_store,
                "sink": args.sink,
                "min_batches_to_retain": args.retain,
                "once": True,
            },
        )
        spark = spark_session(config, work / "job", spark_jars(config))
        passthrough = _passthrough(spark, raw_records(spark, config, folder), work / "pt")
        batches, query, sizes = _job(spark, config, folder, work / "job", work / "ck", args.floor)
        full = [(b["seconds"], int(b["input"])) for b in batches]
        fuzzed = f", {args.fuzzed:.0%} of them fuzzed" if args.fuzzed else ""
        print(
            f"{args.source} source, scenario {args.scenario} x{args.repeat}"
            f"{f' at {args.speed}x speed' if args.speed > 1 else ''}: {total} records{fuzzed}, "
            f"micro-batches of at most {args.batch}, {spark.sparkContext.master}, "
            f"{args.shards} shard(s) per cluster"
        )
        job_name = {None: "full job", "spark": "floor", "read": "floor read"}[args.floor]
        steady = {}
        for name, runs in (("pass-through", passthrough), (job_name, full)):
            steady[name] = _rate(runs[1:] or runs)
            print(
                f"{name:>13}: {len(runs)} batches, {_rate(runs):>8,.0f} records/s overall, "
                f"steady {steady[name]:>8,.0f} records/s (first batch {runs[0][0]:.2f} s)"
            )
        if args.floor is None:
            covered = [(b["seconds"], int(b["messages"] or 0)) for b in batches]
            print(
                f"{'':>13}  messages covered (what the records stand for): "
                f"{_rate(covered):>8,.0f} messages/s overall, steady "
                f"{_rate(covered[1:] or covered):>8,.0f} messages/s, "
                f"{sum(n for _, n in covered) / max(total, 1):.1f} per record"
            )
        _print_batches(batches)
        _print_state_store(args.state_store, query, work / "ck", sizes)
        busiest = [b["slowest_task_ms"] / 1000 for b in batches[1:] or batches]
        print(
            f"busiest task's operator time, steady: {sum(busiest) / len(busiest):.2f} s per batch"
        )
        ratio = steady[job_name] / steady["pass-through"]
        print(f"steady ratio ({job_name} / pass-through): {ratio:.2f}")
        if args.fuzzed:
            clean_folder = work / "clean"
            _events(args.scenario, args.repeat, clean_folder, args.speed)
            clean_config = config.model_copy(update={"path": str(clean_folder)})
            ran, _, _ = _job(
                spark, clean_config, clean_folder, work / "clean-job", work / "clean-ck", args.floor
            )
            runs = [(b["seconds"], int(b["input"])) for b in ran]
            clean = _rate(runs[1:] or runs)
            print(
                f"{job_name} on the clean events alone: {len(runs)} batches, steady "
                f"{clean:,.0f} records/s\nsteady ratio (fuzzed / clean): "
                f"{steady[job_name] / clean:.2f}"
            )
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
