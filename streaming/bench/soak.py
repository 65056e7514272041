"""Soak benchmark: weeks of accelerated event time through the job, thousands of micro-batches,
with every resource a months-long run holds printed as it goes.

The scenario (:func:`soak_events`) is built from hourly episodes of one RocketMQ cluster, each
simulated by :mod:`streaming.sim.simulator`: a daily traffic cycle (a producer sends every
100 ms at the day's peak, five times less often at night), six of a rotating set of brokers (one
is retired and a new one joins every three days, so routes change), producers that restart once
a day under a new instance id, a transactional producer, a producer of delayed messages, a
consumer group that asks for retries, and three incidents a day (outages, slow brokers, latency
spikes, flapping brokers, brokers that stop heartbeating). Between episodes the cluster is quiet.

The job runs over it with the files source, maintenance on, and prints every ``--every``
batches: the checkpoint's bytes on disk by part (offsets, commits, state, the rest), the state's
bytes (written by the last batch; Spark's memory figure), the tables' files and bytes on disk,
their Delta logs' entries and checkpoints, the resident memory of the driver (the Python process
and the JVM) and of the Python workers, batch time p50/p99 since the last line, and the time to
read one hour of ``broker_decisions``. It ends with the goals: over the run's second half every
figure stays within 10% of its mid-run value (or under its bound), and batch time does not grow.

The retention of replaced files is wall-clock (a reader that opened an older version keeps it
``vacuum_retention``), and this run compresses weeks of event time into under an hour of wall
time; it compresses that retention too (``--vacuum-retention``: minutes here, days in
production, where the job refuses less than an hour), so its saw shows within the run. The Delta
log's retention counts commits (``--log-commits``, ``maintenance.log_commits``), which the run
does not compress.

    python -m streaming.bench.soak [--batches 3000] [--days 28] [--every 100]
                                   [--state-store hdfs rocksdb] [--keep 7d]
"""

from __future__ import annotations

import argparse
import math
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from streaming.bench.tables import read_hour
from streaming.config import Scenario, duration_flag, load_job_config
from streaming.job import sink
from streaming.job.maintain import table_properties
from streaming.job.progress import Progress
from streaming.job.query import build_query, run_to_end
from streaming.job.session import spark_session
from streaming.job.sources.files import count_records, list_files
from streaming.sim.simulator import simulate, write_jsonl
from udfs.schema import TABLES
from udfs.vocabulary import TableName

DAY = 86_400_000
HOUR = 3_600_000
START = 1_795_219_200_000  # 2026-11-21 00:00:00 UTC
CLUSTER = "SoakCluster"
BROKERS = 6
ROTATE_DAYS = 3
PEAK_INTERVAL = 100
TRAFFIC = 40_000
"""Each hour's traffic lasts this long; heartbeats go on for ``TAIL`` after it."""
TAIL = 17 * 60_000
"""Long enough for 4.x's ten-minute isolations to end and for the broker to check and discard
a half message that is answered UNKNOW for ever (15 checks, every 30 to 60 s)."""
INCIDENTS = ("outage", "slow", "latency_spike", "flapping", "heartbeat_stop")
PRODUCERS: tuple[
    tuple[str, str, int, dict[str, Any]], ...
] = (  # id, profile, the hour it restarts, and what else it does
    ("p-47", "rocketmq-4.7", 3, {}),
    ("p-49", "rocketmq-4.9", 9, {"delay_every": 25, "delay_level": 3}),
    ("p-5", "rocketmq-5", 15, {"mode": "ASYNC"}),
    ("p-tx", "rocketmq-5", 21, {}),
)
ID_FIELDS = ("event_id", "message_id", "origin_message_id", "transaction_id")
PARTS = ("offsets", "commits", "state")
ROCKSDB = "spark.sql.streaming.stateStore.rocksdb"


def load(hour: int) -> float:
    """The day's traffic cycle: the share of the peak rate at ``hour`` (UTC), 0.2 at night and
    1.0 at 14:00."""
    if not 6 <= hour < 22:
        return 0.2
    return 0.2 + 0.8 * math.sin(math.pi * (hour - 6) / 16)


def episode(day: int, hour: int, seed: int) -> Scenario:
    """Hour ``hour`` of day ``day``: its brokers, its producers' instances, its traffic and, on
    three hours a day, an incident."""
    rng = random.Random(seed * 1_000_003 + day * 24 + hour)
    first = day // ROTATE_DAYS
    brokers = [f"broker-{n:03d}" for n in range(first, first + BROKERS)]
    interval = round(PEAK_INTERVAL / load(hour))
    producers = []
    for name, profile, restart, extra in PRODUCERS:
        generation = day if hour >= restart else day - 1
        spec: dict[str, Any] = {
            "id": f"{name}@{generation}",
            "group": f"pg-{name}",
            "profile": profile,
            "topic": "orders",
            "interval": interval,
            **extra,
        }
        if name == "p-tx":
            spec["interval"] = 4 * interval
            spec["transactions"] = {
                "commit": 0.8,
                "rollback": 0.1,
                "unknown": 0.1,
                "local_ms": [20, 2000],
                "unknown_answers": 2,
                "never_every": 5,
            }
        producers.append(spec)
    faults = []
    if hour in _incident_hours(day, seed):
        kind = rng.choice(INCIDENTS)
        fault: dict[str, Any] = {
            "type": kind,
            "broker": rng.choice(brokers),
            "at": rng.randrange(3_000, 15_000),
            "for": 180_000 if kind == "heartbeat_stop" else rng.randrange(10_000, 25_000),
        }
        if kind in ("slow", "latency_spike"):
            fault["latency_ms"] = [600, 900] if kind == "slow" else [1500, 2800]
        if kind == "flapping":
            fault["period"] = 5_000
        faults.append(fault)
    return Scenario.model_validate(
        {
            "name": f"soak-{day}-{hour:02d}",
            "seed": rng.randrange(1 << 30),
            "start": START + day * DAY + hour * HOUR,
            "duration": TRAFFIC,
            "tail": TAIL,
            "cluster": CLUSTER,
            "brokers": [{"name": b, "write_queues": 4, "latency_ms": [3, 30]} for b in brokers],
            "topics": [{"name": "orders", "brokers": brokers}],
            "producers": producers,
            "consumers": [{"group": "cg-orders", "topic": "orders", "fail_every": 50}],
            "faults": faults,
        }
    )


def _incident_hours(day: int, seed: int) -> set[int]:
    return set(random.Random(seed * 7_919 + day).sample(range(24), 3))


def soak_events(days: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """The soak's events in event-time order, hour by hour; every id is unique over the run."""
    for day in range(days):
        for hour in range(24):
            tag = f"{day:03d}{hour:02d}."
            for event in simulate(episode(day, hour, seed)):
                for key in ID_FIELDS:
                    if key in event:
                        event[key] = tag + event[key]
                yield event


def write_events(days: int, folder: Path, seed: int = 0, per_file: int = 20_000) -> None:
    """:func:`soak_events` as JSON-lines files in ``folder``."""
    chunk: list[dict[str, Any]] = []
    part = 0
    for event in soak_events(days, seed):
        chunk.append(event)
        if len(chunk) == per_file:
            write_jsonl(chunk, folder, per_file, first_part=part)
            part, chunk = part + 1, []
    write_jsonl(chunk, folder, per_file, first_part=part)


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _memory() -> dict[str, int]:
    """Resident bytes of this (the driver's Python) process, of the JVM it started, and of the
    Python workers the JVM runs."""
    me = psutil.Process()
    out = {"driver python RSS": me.memory_info().rss, "driver JVM RSS": 0, "workers RSS": 0}
    for child in me.children(recursive=True):
        try:
            name, rss = child.name(), child.memory_info().rss
        except psutil.Error:  # a worker that ended meanwhile
            continue
        if name == "java":
            out["driver JVM RSS"] += rss
        elif name.startswith("python"):
            out["workers RSS"] += rss
    return out


def table_figures(path: Path) -> dict[str, int]:
    """A table's data files and bytes on disk (referenced or not), and its Delta log's commit
    entries and checkpoints."""
    log = path / "_delta_log"
    data = [p for p in path.rglob("*.parquet") if log not in p.parents]
    names = [p.name for p in log.iterdir()]
    return {
        f"{path.name} files": len(data),
        f"{path.name} bytes": sum(p.stat().st_size for p in data),
        f"{path.name} log entries": sum(n.endswith(".json") for n in names),
        f"{path.name} log checkpoints": sum(".checkpoint." in n for n in names),
    }


TABLE_NAMES = [*TABLES, TableName.BATCHES]
TIMES = ("batch time p50", "read one hour")
"""The figures that are times: their goal compares medians, not peaks."""
SETTLED = ("driver JVM heap live",)
"""The figures measured once a line after a full collection, not peaks of a saw: the JVM's live
heap holds what the job keeps, so a leak raises even its least value, where noise (what a
collection happens to find still referenced) raises single lines. The resident memories (RSS)
are not among them, only held to the tolerance: they are peaks of what the processes took and
have not given back, as the collector and the allocator decide (the JVM's grows toward its heap
limit without a leak), and a leak in the JVM shows in its live heap first."""


@dataclass
class Sample:
    """One line: the figures' peaks over the batches since the line before (each figure is
    measured after every batch, so no peak of a saw falls between lines), those batches' times,
    and the time to read one hour of ``broker_decisions`` at the end."""

    batch: int
    clock: int
    peaks: dict[str, float]
    batch_seconds: list[float]
    read_hour: float

    def total(self, suffix: str) -> float:
        """The sum over the tables of one of :func:`table_figures`' figures."""
        return sum(self.peaks[f"{n} {suffix}"] for n in TABLE_NAMES)


@dataclass
class Sampler:
    """Called after every committed batch: measures every figure and keeps its peak; every
    ``every`` batches it prints a :class:`Sample`. The time it takes is left out of the batch
    times."""

    output: Path
    checkpoint: Path
    every: int
    spark: Any = None
    query: Any = None
    samples: list[Sample] = field(default_factory=list)
    _peaks: dict[str, float] = field(default_factory=dict)
    _times: list[float] = field(default_factory=list)
    _last: float | None = None

    def __call__(self, batch: dict[str, Any]) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self._times.append(now - self._last)
        for name, value in self.measure(batch).items():
            self._peaks[name] = max(value, self._peaks.get(name, value))
        if (int(batch["batch_id"]) + 1) % self.every == 0:
            decisions, clock = self.output / TableName.BROKER_DECISIONS, int(batch["clock"] or 0)
            reads = [read_hour(decisions, clock)[0] for _ in range(3)]
            self._peaks["driver JVM heap live"] = self.live_heap()
            sample = Sample(
                int(batch["batch_id"]),
                clock,
                self._peaks,
                self._times,
                statistics.median(reads),
            )
            self.samples.append(sample)
            self._peaks, self._times = {}, []
            print(self.line(sample), flush=True)
        self._last = time.perf_counter()  # the measuring is not the next batch's time

    def live_heap(self) -> int:
        """The JVM heap's bytes in use after a full collection: what it holds, where its
        resident memory also counts the room its collector took and has not given back."""
        if self.spark is None:
            return 0
        jvm = self.spark.sparkContext._jvm
        jvm.java.lang.System.gc()
        runtime = jvm.java.lang.Runtime.getRuntime()
        return int(runtime.totalMemory() - runtime.freeMemory())

    def jvm_limit(self) -> int:
        """The JVM's heap limit and what it has committed outside the heap."""
        if self.spark is None:
            return 0
        jvm = self.spark.sparkContext._jvm
        outside = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
        committed = outside.getNonHeapMemoryUsage().getCommitted()
        return int(jvm.java.lang.Runtime.getRuntime().maxMemory() + committed)

    def measure(self, batch: dict[str, Any]) -> dict[str, float]:
        """Every figure but the times, now."""
        parts = {f"checkpoint {p}": _bytes(self.checkpoint / p) for p in PARTS}
        parts["checkpoint other"] = _bytes(self.checkpoint) - sum(parts.values())
        progress = self.query.lastProgress if self.query is not None else None
        operators = (progress or {}).get("stateOperators") or [{}]
        out: dict[str, float] = {
            **parts,
            "state written": int(batch["state_bytes"]),
            "state memory": int(operators[0].get("memoryUsedBytes", 0)),
            **_memory(),
        }
        for name in TABLE_NAMES:
            out.update(table_figures(self.output / name))
        return out

    @staticmethod
    def header() -> str:
        return (
            f"{'batch':>6} {'day':>5}  checkpoint MB: {'offsets':>7} {'commits':>7} {'state':>6} "
            f"{'other':>5} | state KB: {'written':>7} {'memory':>7} | tables: {'files':>5} "
            f"{'MB':>6} {'log':>5} {'ckpts':>5} | RSS MB: {'python':>6} {'JVM':>5} "
            f"{'workers':>7}, JVM heap live MB | batch s: {'p50':>4} {'p99':>4} | read 1 h s"
        )

    @staticmethod
    def line(s: Sample) -> str:
        mb, kb = 1 / 1e6, 1 / 1e3
        p = s.peaks
        return (
            f"{s.batch + 1:>6} {(s.clock - START) / DAY:>5.1f}  {'':>14} "
            f"{p['checkpoint offsets'] * mb:>7.2f} {p['checkpoint commits'] * mb:>7.2f} "
            f"{p['checkpoint state'] * mb:>6.2f} {p['checkpoint other'] * mb:>5.2f} | {'':>9} "
            f"{p['state written'] * kb:>7.0f} {p['state memory'] * kb:>7.0f} | {'':>7} "
            f"{s.total('files'):>5.0f} {s.total('bytes') * mb:>6.1f} "
            f"{s.total('log entries'):>5.0f} {s.total('log checkpoints'):>5.0f} | {'':>7} "
            f"{p['driver python RSS'] * mb:>6.0f} {p['driver JVM RSS'] * mb:>5.0f} "
            f"{p['workers RSS'] * mb:>7.0f}, {p['driver JVM heap live'] * mb:>16.0f} | {'':>8} "
            f"{_quantile(s.batch_seconds, 0.5):>4.2f} "
            f"{_quantile(s.batch_seconds, 0.99):>4.2f} | {s.read_hour:.3f}"
        )

    def print_tables(self) -> None:
        """Each table's peaks at mid-run and over the last line."""
        if len(self.samples) < 2:
            return
        mid, last = self.samples[len(self.samples) // 2 - 1], self.samples[-1]
        print(
            f"\nper table, at batch {mid.batch + 1} (mid-run) and {last.batch + 1}: files, MB, "
            "log entries, log checkpoints"
        )
        for name in TABLE_NAMES:
            cells = []
            for s in (mid, last):
                f = [s.peaks[f"{name} {k}"] for k in ("files", "bytes", "log entries")]
                f.append(s.peaks[f"{name} log checkpoints"])
                cells.append(f"{f[0]:>5.0f} {f[1] / 1e6:>7.2f} {f[2]:>5.0f} {f[3]:>3.0f}")
            print(f"  {name:<18} {cells[0]}   {cells[1]}")


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def run(
    events: Path, work: Path, state_store: str, args: argparse.Namespace, records: int
) -> Sampler:
    """The job over ``events`` with ``state_store``, sampled every ``args.every`` batches."""
    per_batch = math.ceil(records / args.batches)
    config = load_job_config(
        None,
        {
            "source": "files",
            "path": str(events),
            "output": str(work / "out"),
            "checkpoint": str(work / "ck"),
            "max_records_per_batch": per_batch,
            "state_store": state_store,
            "min_batches_to_retain": args.retain,
            "once": True,
            "maintenance": {
                "every": args.maintain_every,
                "keep": args.keep,
                "checkpoint_interval": args.checkpoint_interval,
            },
        },
    )
    # the wall-clock retention, compressed as event time is (the job itself refuses < 1 h)
    maintenance = config.maintenance.model_copy(
        update={"vacuum_retention": args.vacuum_retention, "log_commits": args.log_commits}
    )
    config = config.model_copy(update={"maintenance": maintenance})
    spark = spark_session(config, work / "out")
    sink.create_tables(work / "out", table_properties(config.maintenance, config.trigger_interval))
    sampler = Sampler(work / "out", work / "ck", args.every, spark)
    print(
        f"\n{state_store}: {records:,} records in micro-batches of {per_batch}, maintenance every "
        f"{args.maintain_every} batches, keep {args.keep}, vacuum retention "
        f"{args.vacuum_retention // 1000} s, log kept {args.log_commits} commits, "
        f"log checkpoints every {args.checkpoint_interval} commits, "
        f"min_batches_to_retain {args.retain}\n{Sampler.header()}",
        flush=True,
    )

    def start() -> Any:
        sampler.query = build_query(
            spark, config, events, work / "out", work / "ck", Progress(), on_batch=sampler
        )
        return sampler.query

    run_to_end(start)
    return sampler


@dataclass(frozen=True)
class Verdict:
    name: str
    mid: float
    worst: float
    ok: bool
    bound: float | None = None


def verdicts(
    samples: list[Sample], limits: dict[str, float] | None = None, tolerance: float = 0.10
) -> list[Verdict]:
    """Each figure's peak over the run's second half against its mid-run value: its peak over
    the quarter of the run before the middle (figures saw, between maintenance runs, state
    snapshots, over the day); for the times, the medians of the same spans. A figure is within
    the goal when it stays under ``1 + tolerance`` times its mid-run value, under a floor below
    which a change is no growth (two files or log entries, 64 KB, 20 ms), or under its bound in
    ``limits`` (:func:`bounds`). A :data:`SETTLED` figure (the JVM's live heap) must also come
    back, at least once over the run's last quarter, within half the tolerance of its mid-run
    value (a collection's noise is a few percent): one that keeps growing, even slower than
    ``tolerance`` over the second half, does not."""
    if len(samples) < 4:
        return []
    limits = limits or {}
    half, part = len(samples) // 2, max(1, len(samples) // 4)
    quarter, second, last = samples[half - part : half], samples[half:], samples[-part:]
    out = []
    for name in second[0].peaks:
        mid = max(s.peaks[name] for s in quarter)
        worst = max(s.peaks[name] for s in second)
        bound = limits.get(name)
        ok = worst <= max(mid * (1 + tolerance), mid + _floor(name), bound or 0)
        if name in SETTLED:
            settled = max(mid * (1 + tolerance / 2), mid + _floor(name))
            ok = ok and min(s.peaks[name] for s in last) <= settled
        out.append(Verdict(name, mid, worst, ok, bound))
    batch_times = [[t for s in span for t in s.batch_seconds] for span in (quarter, second)]
    reads = [[s.read_hour for s in span] for span in (quarter, second)]
    for name, spans in (("batch time p50", batch_times), ("read one hour", reads)):
        mid, worst = statistics.median(spans[0]), statistics.median(spans[1])
        out.append(Verdict(name, mid, worst, worst <= mid * (1 + tolerance) + _floor(name)))
    return out


def bounds(checkpoint_interval: int, jvm: int, rocksdb_cache: int | None) -> dict[str, float]:
    """The figures' bounds by design. A table whose log keeps fewer than
    ``checkpoint_interval`` commits (``log_commits``) keeps its log entries from its log
    checkpoint but one: up to twice ``checkpoint_interval``, whichever half of the run it
    reaches them in. The JVM's resident memory stays under ``jvm``: its heap's limit (Spark's
    ``spark.driver.memory``) and what it committed outside the heap; its collector grows the
    heap towards the limit only as it needs, so its live heap is the figure that shows a leak.
    RocksDB's memory is its block cache, which keeps the blocks it read until it holds
    ``rocksdb_cache`` bytes, and its memtables, which a snapshot flushes (a MB is ample for the
    few batches between two)."""
    out: dict[str, float] = {f"{n} log entries": 2 * checkpoint_interval + 2 for n in TABLE_NAMES}
    out["driver JVM RSS"] = jvm
    if rocksdb_cache is not None:
        out["state memory"] = rocksdb_cache + (1 << 20)
    return out


def _floor(name: str) -> float:
    if name.endswith(("files", "entries", "checkpoints")):
        return 2
    if name in TIMES:
        return 0.02
    return 64_000


def print_verdicts(found: list[Verdict]) -> int:
    """The figures that missed the goal first; returns how many did."""
    missed = [v for v in found if not v.ok]
    print(
        f"\ngoals: {len(found) - len(missed)} of {len(found)} figures within 10% of mid-run over "
        "the second half, or under their bound (mid-run value -> largest after it)"
    )
    for v in sorted(found, key=lambda v: (v.ok, v.name)):
        bound = "" if v.bound is None else f" (bound {v.bound:,.0f})"
        print(
            f"  {'ok  ' if v.ok else 'GREW'} {v.name:<40} {v.mid:>14,.3f} -> {v.worst:>14,.3f}"
            f"{bound}"
        )
    return len(missed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=3000)
    parser.add_argument("--days", type=int, default=28, help="days of event time")
    parser.add_argument("--every", type=int, default=100, help="print figures every N batches")
    parser.add_argument("--state-store", nargs="+", choices=("hdfs", "rocksdb"),
                        default=["hdfs", "rocksdb"])  # fmt: skip
    parser.add_argument("--retain", type=int, default=100, help="min_batches_to_retain")
    parser.add_argument("--maintain-every", type=int, default=100, help="maintenance.every")
    parser.add_argument("--keep", default="7d", help="maintenance.keep (event time)")
    parser.add_argument("--checkpoint-interval", type=int, default=100,
                        help="maintenance.checkpoint_interval")  # fmt: skip
    parser.add_argument("--vacuum-retention", default="5m")
    parser.add_argument(
        "--log-commits", type=int, default=10, help="maintenance.log_commits (of 500 ms each)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--events", type=Path, help=argparse.SUPPRESS)  # written already
    args = parser.parse_args(argv)
    args.vacuum_retention = duration_flag("--vacuum-retention", args.vacuum_retention)

    work = Path(tempfile.mkdtemp(prefix="faultline-soak-"))
    try:
        events = args.events or work / "events"
        if args.events is None:
            started = time.perf_counter()
            write_events(args.days, events, args.seed)
            print(
                f"soak scenario: {args.days} days of event time, written in "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
        if len(args.state_store) > 1:  # each store in a process of its own: its own memory
            failed = 0
            for store in args.state_store:  # the last --state-store given is the one it takes
                command = [sys.executable, "-m", "streaming.bench.soak"]
                command += [*(sys.argv[1:] if argv is None else argv)]
                command += ["--state-store", store, "--events", str(events)]
                failed += subprocess.run(command, check=False).returncode != 0
            return 1 if failed else 0
        records = sum(count_records(p) for p in list_files(events))
        started = time.perf_counter()
        sampler = run(events, work / "job", args.state_store[0], args, records)
        print(f"{args.state_store[0]}: {time.perf_counter() - started:.0f} s")
        sampler.print_tables()
        cache = None
        if args.state_store[0] == "rocksdb":  # Spark's default: 8 MB
            cache = int(sampler.spark.conf.get(f"{ROCKSDB}.blockCacheSizeMB", "8")) << 20
        limits = bounds(args.checkpoint_interval, sampler.jvm_limit(), cache)
        found = verdicts(sampler.samples, limits)
        return 1 if print_verdicts(found) else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
