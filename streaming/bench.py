"""Throughput benchmark: the full job against a stateless pass-through over the same source and
sink, on the same events. Prints records/s and micro-batch times for both.

    python -m streaming.bench [--source files|kafka] [--scenario default] [--repeat 4]
                              [--batch 50000]

The pass-through reads the same records with the same source and writes every raw record to a
Delta table through an executor-side Parquet writer and a driver-side commit, as the job's sink
does. ``--source kafka`` publishes the events to librdkafka's mock cluster (a real Kafka-protocol
server on 127.0.0.1, in a process of its own), spread over 8 topics of 4 partitions, and reads
them with the job's Kafka source.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import zlib
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

KAFKA_TOPICS = 8
"""The mock cluster keeps about 5 MB per partition and makes 4 per topic: spread the load."""


def _publish(folder: Path, bootstrap: str) -> None:
    import json

    from streaming.kafka import Publisher
    from streaming.sources import list_files

    publisher = Publisher({"bootstrap.servers": bootstrap})
    for path in list_files(folder):
        for line in path.read_text().splitlines():
            event_id = json.loads(line)["event_id"]
            topic = f"bench-{zlib.crc32(event_id.encode()) % KAFKA_TOPICS}"
            publisher.send(topic, line, key=event_id)
    publisher.flush()


def _events(scenario: str, repeat: int, folder: Path) -> int:
    """The scenario's events, repeated with shifted ids, as JSON-lines files."""
    from streaming.config import load_scenario
    from streaming.simulator import simulate, write_jsonl

    events = simulate(load_scenario(scenario))
    span = events[-1]["event_time"] - events[0]["event_time"] + 1000
    out = []
    for r in range(repeat):
        for e in events:
            out.append(
                {**e, "event_id": f"{r}-{e['event_id']}", "event_time": e["event_time"] + r * span}
            )
    write_jsonl(out, folder)
    return len(out)


def _passthrough(spark: Any, raw: Any, output: Path) -> list[float]:
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
    times: list[float] = []

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
        times.append(time.time() - started)

    query = (
        raw.select("value", "origin", "ingest_ms")
        .writeStream.foreachBatch(sink)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(output / "_ck_passthrough"))
        .start()
    )
    query.awaitTermination()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", choices=("files", "kafka"), default="files")
    parser.add_argument("--scenario", default="default")
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--batch", type=int, default=50_000)
    args = parser.parse_args(argv)

    from streaming import job
    from streaming.config import load_job_config

    work = Path(tempfile.mkdtemp(prefix="faultline-bench-"))
    cluster = ExitStack()
    try:
        folder = work / "events"
        total = _events(args.scenario, args.repeat, folder)
        settings: dict[str, Any] = {"source": "files", "path": str(folder)}
        if args.source == "kafka":
            from streaming.mock_kafka import mock_cluster

            bootstrap = cluster.enter_context(mock_cluster())
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
                "once": True,
            },
        )
        spark = job._spark(config, work / "job")
        results = {}
        started = time.time()
        pt = _passthrough(spark, job._source(spark, config, folder), work / "pt")
        results["pass-through"] = (time.time() - started, pt)
        from streaming import sink

        (work / "job").mkdir(parents=True, exist_ok=True)
        sink.create_tables(work / "job")
        progress = job.Progress()
        times: list[float] = []
        started = time.time()
        query = job.build_query(
            spark,
            config,
            folder,
            work / "job",
            work / "ck",
            progress,
            on_batch=times.append,
        )
        query.awaitTermination()
        results["full job"] = (time.time() - started, times)
        print(
            f"{args.source} source: {total} records, micro-batches of at most {args.batch}, "
            f"{spark.sparkContext.master}"
        )
        for name, (elapsed, batch_times) in results.items():
            steady = batch_times[1:] or batch_times
            print(
                f"{name:>13}: {total / elapsed:>9,.0f} records/s overall ({elapsed:.1f} s), "
                f"{len(batch_times)} batches, median batch {statistics.median(steady):.2f} s "
                f"(first {batch_times[0]:.2f} s), "
                f"steady {args.batch / statistics.median(steady):,.0f} records/s"
            )
        ratio = results["pass-through"][0] / results["full job"][0]
        print(f"full job / pass-through throughput: {ratio:.2f}")
    finally:
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
