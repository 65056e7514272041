"""Incident review from a checkpoint: re-run a window of a job's batches, and read its state.

A checkpoint holds everything a batch is a function of: the operator's state after every
retained batch (Spark's state data source reads it), the source range of every batch (the
offsets log), and, since faultline records them, the settings each run started with
(:data:`RUNS`). ``replay`` takes the state after batch N-1, reads the records of batches N..M
from the source exactly as logged, and runs the same per-key step as the job
(:func:`streaming.job.stateful.run_key`) into tables of its own. It only reads the checkpoint, so a
read-only copy moved to another machine will do.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
import pyarrow as pa

from streaming.config import JobConfig, engine_config, load_job_config
from streaming.jars import note_jvm_start
from streaming.job import sink
from streaming.job.checkpoint import batch_ids, check_source, logged_offsets, read_runs
from streaming.job.progress import iso
from streaming.job.query import QUERY_NAME
from streaming.job.session import has_session, python_env
from streaming.job.sources.files import FilesReader
from streaming.job.sources.files import read_slice as read_file
from streaming.job.sources.simulator import simulator_folder
from streaming.job.stateful import run_key
from streaming.job.summary import isolation_windows
from streaming.tools import kafka_log
from udfs import engine
from udfs.errors import FaultlineError
from udfs.vocabulary import TableName

FIXED = (
    "source",
    "path",
    "scenario",
    "topic",
    "subscribe_pattern",
    "stateful_shards",
    "shuffle_partitions",
)
"""What a what-if cannot change: where the records come from and how the state is keyed."""
CONNECTION = ("kafka_bootstrap", "kafka_options", "kafka_source_options")


class ReplayError(FaultlineError):
    """A replay cannot be done as asked; the message says what is missing and what there is."""


# --- a checkpoint, read-only ----------------------------------------------------------------------


@dataclass
class Checkpoint:
    path: Path
    """The query's folder (``<checkpoint root>/faultline``)."""
    committed: list[int]
    runs: list[tuple[int, dict[str, Any]]]

    @classmethod
    def open(cls, given: str | Path) -> Checkpoint:

        path = Path(given)
        if (path / QUERY_NAME).is_dir():
            path = path / QUERY_NAME
        if not (path / "offsets").is_dir():
            raise ReplayError(
                f"--checkpoint {given}: not a faultline checkpoint (no offsets log in it); give "
                "the folder the job ran with --checkpoint (checkpoints by default)"
            )
        committed = batch_ids(path / "commits")
        if not committed:
            raise ReplayError(f"{given}: the checkpoint has no committed batch yet")
        return cls(path, committed, read_runs(path))

    @property
    def last(self) -> int:
        return self.committed[-1]

    def offsets(self, batch: int) -> Any:
        """The source offset at the end of ``batch``, as logged."""
        lines = (self.path / "offsets" / str(batch)).read_text().splitlines()
        return json.loads(lines[-1])

    def settings(self, batch: int) -> dict[str, Any] | None:
        """The settings the job ran ``batch`` with, when the checkpoint recorded them."""
        found = [s for first, s in self.runs if first <= batch]
        return found[-1] if found else None


def check_window(ck: Checkpoint, first: int, last: int | None) -> tuple[int, int]:
    last = ck.last if last is None else last
    if not 0 <= first <= last <= ck.last:
        raise ReplayError(
            f"batches {first}..{last} are not in the checkpoint {ck.path}: it has batches "
            f"{ck.committed[0]}..{ck.last}"
        )
    return first, last


# --- the state --------------------------------------------------------------------------------


def read_states(spark: Any, ck: Checkpoint, batch: int) -> dict[tuple[Any, ...], str]:
    """Each key's state (JSON text) after ``batch``, read with Spark's state data source."""
    meta = spark.read.format("state-metadata").load(str(ck.path)).collect()
    if not meta:
        raise ReplayError(f"{ck.path}: no operator state in the checkpoint")
    low, high = int(meta[0]["minBatchId"]), int(meta[0]["maxBatchId"])
    if not low <= batch <= high:
        raise ReplayError(
            f"the state after batch {batch} is no longer in {ck.path}: it keeps the state after "
            f"batches {low}..{high} (retain more with the key min_batches_to_retain)"
        )
    rows = spark.read.format("statestore").option("batchId", batch).load(str(ck.path)).collect()
    states = {tuple(r["key"]): r["value"]["groupState"]["state"] for r in rows if r["value"]}

    for text in states.values():
        try:
            engine.loads(text)
        except ValueError as exc:  # a state this faultline cannot read
            raise ReplayError(f"{ck.path}: {exc}") from None
    return states


# --- the records of a batch -------------------------------------------------------------------


def batch_records(
    ck: Checkpoint, config: JobConfig, batch: int, folder: Path | None
) -> pd.DataFrame:
    """The raw records of ``batch`` (``key``, ``value``, ``origin``, ``ingest_ms``, ``lost``),
    read from the source range the checkpoint logged for it."""
    end = ck.offsets(batch)
    if config.source == "kafka":
        conf = config.kafka_conf()
        found = kafka_log.ranges(logged_offsets(ck.path, batch - 1), end)
        marks = kafka_log.watermarks(conf, found)
        for part in found:
            low, high = marks[(part.topic, part.partition)]
            if part.begin < low or part.end > high:
                raise ReplayError(
                    f"batch {batch} needs offsets {part.begin}..{part.end - 1} of "
                    f"{part.topic}/{part.partition}; Kafka has {low}..{high - 1} of it now "
                    "(retention deleted the rest): replay a later window"
                )
        parts: Iterator[pa.RecordBatch] = (b for p in found for b in kafka_log.read(conf, p))
    else:
        assert folder is not None
        reader_f = FilesReader({"path": str(folder)})
        start = ck.offsets(batch - 1) if batch > 0 else reader_f.initialOffset()
        parts = (read_file(Path(s.path), s.begin, s.end) for s in reader_f.partitions(start, end))
    frames = [b.to_pandas() for b in parts]
    if not frames:
        return pd.DataFrame(columns=["key", "value", "origin", "ingest_ms", "lost"])
    raw: pd.DataFrame = pd.concat(frames, ignore_index=True)
    if "lost" not in raw.columns:
        raw["lost"] = None
    return raw


# --- replay -------------------------------------------------------------------------------------


def replay(
    ck: Checkpoint,
    config: JobConfig,
    output: Path,
    first: int,
    last: int,
    spark: Callable[[], Any],
    folder: Path | None,
) -> list[dict[str, Any]]:
    """Batches ``first..last`` into tables under ``output``; returns each batch's counts.
    ``spark`` makes the session that reads the state (not needed from batch 0)."""
    shards = config.stateful_shards
    states = read_states(spark(), ck, first - 1) if first > 0 else {}
    app_id = f"faultline-replay-{os.getpid()}-{int(time.time())}"
    sink.create_tables(output)
    settings = engine_config(config)
    done = []
    for batch in range(first, last + 1):
        started = time.time()
        raw = batch_records(ck, config, batch, folder)
        metas: list[dict[str, Any]] = []
        for cluster, records in raw.groupby("key", sort=True):
            for key, shard in _keys(states, str(cluster), shards):
                states[key], produced = run_key(
                    str(cluster),
                    shard,
                    states.get(key),
                    records.reset_index(drop=True),
                    settings,
                    output,
                    batch,
                    app_id,
                )
                metas += produced
        write_ms = int((time.time() - started) * 1000)
        done.append(sink.commit_batch(output, batch, metas, app_id, write_ms))
    return done


def _keys(
    states: Mapping[tuple[Any, ...], str], cluster: str, shards: int
) -> list[tuple[tuple[Any, ...], Any]]:
    """The operator's keys of a cluster, with the shard each one is: the slots of the state
    where the cluster has one, else the shard numbers themselves."""
    if shards == 1:
        return [((cluster,), engine.WHOLE)]
    slots = {int(k[1]) % shards: k for k in states if k[0] == cluster}
    return [(slots.get(i, (cluster, i)), engine.Shard(i, shards)) for i in range(shards)]


# --- the state, readable ----------------------------------------------------------------------


def describe(states: Mapping[tuple[Any, ...], str], batch: int, out: TextIO) -> None:
    """The operator state after ``batch``, per cluster: the clock, the brokers isolated in each
    scope and until when, the messages waiting per delay level, the routes and heartbeats."""
    merged: dict[str, list[engine.State]] = {}
    for key, text in sorted(states.items()):
        merged.setdefault(str(key[0]), []).append(engine.loads(text))
    print(f"state after batch {batch}", file=out)
    for cluster, parts in merged.items():
        lead = parts[0]  # every shard has the same clock, routes and heartbeats
        clock = lead.clock
        print(f"\ncluster {cluster}: clock {iso(clock)} ({clock})", file=out)
        for scope in ("cluster", "producer"):
            isolated = sorted(
                i
                for part in parts
                for i in engine.isolations(part, scope)
                if clock is not None and i.until > clock
            )
            print(f"  isolated, {scope} scope: {len(isolated) or 'none'}", file=out)
            for i in isolated:
                who = "" if scope == "cluster" else f"{i.key}: "
                print(f"    {who}{i.broker} until {iso(i.until)} (cause {i.cause})", file=out)
        waiting = {
            int(level): len(queue)
            for part in parts
            for level, queue in part.schedule.items()
            if queue
        }
        shown = ", ".join(f"level {k}: {v}" for k, v in sorted(waiting.items()))
        print(f"  delay queues, messages waiting: {shown or 'none'}", file=out)
        for topic, route in sorted(lead.routes.items()):
            brokers = ", ".join(f"{b} ({w} queues)" for b, w, _ in route)
            print(f"  route {topic}: {brokers}", file=out)
        for broker, hb in sorted(lead.heartbeats.items()):
            state = "dropped from the route" if hb.expired else "in the route"
            print(f"  heartbeat {broker}: last {iso(hb.last)}, {state}", file=out)
        known = set().union(*(part.producers for part in parts))
        print(f"  producers known: {len(known)}", file=out)


def spark_session() -> Any:
    """A local session to read the state with (the state data source needs no executors)."""
    from pyspark.sql import SparkSession

    python_env(local=True)
    if not has_session():
        note_jvm_start()
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("faultline-replay")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# --- the commands -------------------------------------------------------------------------------


def state_command(args: Any, out: TextIO = sys.stdout) -> int:
    ck = Checkpoint.open(args.checkpoint)
    batch = ck.last if args.batch is None else args.batch
    check_window(ck, batch, batch)
    describe(read_states(spark_session(), ck, batch), batch, out)
    return 0


def replay_command(args: Any, out: TextIO = sys.stdout) -> int:
    ck = Checkpoint.open(args.checkpoint)
    first, last = check_window(ck, args.from_batch, args.to_batch)
    output = Path(args.output).resolve()
    if output.exists() and any(output.iterdir()):
        raise ReplayError(f"--output {output} is not empty: give the replay a folder of its own")
    recorded = ck.settings(first)
    if recorded is None:  # a checkpoint of an older faultline: the settings given are the job's
        print(
            f"faultline: {ck.path} does not record the job's settings; replaying with "
            f"{args.config or 'conf/faultline.yaml'}",
            file=out,
        )
        base, whatif = load_job_config(args.config, _sets(args.set)), None

        check_source(base, ck.path)  # the settings name this checkpoint's source and keys
    else:
        changes = {**_yaml(args.config), **_sets(args.set)}
        fixed = sorted(k for k in FIXED if k in changes and changes[k] != recorded.get(k))
        if fixed:
            raise ReplayError(
                f"a replay reads the checkpoint's own source and keys: {', '.join(fixed)} cannot "
                f"change (the job ran with {', '.join(f'{k}={recorded.get(k)!r}' for k in fixed)})"
            )
        # where Kafka is and its secrets (recorded masked) are not a what-if
        reach = {k: changes.pop(k) for k in CONNECTION if k in changes}
        base = _config_from(recorded, reach)
        whatif = _config_from(recorded, {**reach, **changes}) if changes else None
    folder = _source_folder(ck, base, args.source_path, output)
    print(f"faultline: replaying batches {first}..{last} of {ck.path} into {output}", file=out)
    if whatif is None:
        counts = replay(ck, base, output, first, last, spark_session, folder)
        _print_counts(counts, out)
        return 0
    with tempfile.TemporaryDirectory(prefix="faultline-baseline-") as tmp:
        replay(ck, base, Path(tmp), first, last, spark_session, folder)
        counts = replay(ck, whatif, output, first, last, spark_session, folder)
        _print_counts(counts, out)
        print_difference(Path(tmp), output, base, whatif, out)
    return 0


def _yaml(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    import yaml

    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict):
        raise ReplayError(f"{path}: not a mapping of settings")
    return data


def _sets(pairs: list[str]) -> dict[str, Any]:
    import yaml

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ReplayError(
                f"--set {pair!r}: expected KEY=VALUE, e.g. cluster_profile=rocketmq-4.9"
            )
        out[key.strip()] = yaml.safe_load(value) if value.strip() else value
    return out


def _config_from(recorded: Mapping[str, Any], changes: Mapping[str, Any]) -> JobConfig:
    """The recorded settings with ``changes`` applied, validated as the job validates them."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "recorded.yaml"
        path.write_text(json.dumps(dict(recorded)))  # JSON is YAML
        return load_job_config(path, dict(changes))


def _source_folder(
    ck: Checkpoint, config: JobConfig, given: str | None, output: Path
) -> Path | None:
    if config.source == "kafka":
        return None
    if given is not None:
        folder = Path(given)
    elif config.source == "files":
        folder = Path(str(config.path))
    else:
        folder = simulator_folder(config, output / "_simulator_source")
    if not folder.is_dir():
        raise ReplayError(
            f"the source files of {ck.path} are not at {folder}: give --source-path where they "
            "are now"
        )
    return folder


def _print_counts(counts: list[dict[str, Any]], out: TextIO) -> None:
    for c in counts:
        print(
            f"batch {c['batch_id']}: {c['input']} records, {c['valid']} valid, "
            f"{c['quarantined']} quarantined, {c['late']} late, {c['rows_written']} rows written",
            file=out,
        )


# --- what-if ------------------------------------------------------------------------------------

_DECISION_KEY = ("scope", "scope_key", "broker_name", "cause_event_id")


def print_difference(
    before: Path, after: Path, base: JobConfig, whatif: JobConfig, out: TextIO
) -> None:
    """Decisions added, removed and changed per broker and scope, and isolated time per broker,
    between the replay with the job's settings and the one with the what-if settings."""
    changed = {
        k: (v, getattr(whatif, k))
        for k, v in base.model_dump().items()
        if getattr(whatif, k) != v and k != "output"
    }
    print(
        "\nwhat-if: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items()), file=out
    )
    old, new = _decisions(before), _decisions(after)
    tally: dict[tuple[str, str], list[int]] = {}
    for key in old.keys() | new.keys():
        broker_scope = (str(key[2]), str(key[0]))
        counts = tally.setdefault(broker_scope, [0, 0, 0])
        if key not in old:
            counts[0] += 1
        elif key not in new:
            counts[1] += 1
        elif old[key] != new[key]:
            counts[2] += 1
    print("decisions per broker and scope: added, removed, changed", file=out)
    for (broker, scope), (added, removed, diff) in sorted(tally.items()):
        if added or removed or diff:
            print(f"  {broker:<14} {scope:<8} +{added} -{removed} ~{diff}", file=out)
    if not any(sum(c) for c in tally.values()):
        print("  none: the same decisions", file=out)
    print("isolated time per broker, cluster scope (s): before -> after", file=out)
    totals: dict[str, dict[str, int]] = {}
    for name, folder in (("before", before), ("after", after)):
        clock = _last_clock(folder)  # an isolation still running counts up to the last clock
        for w in isolation_windows(folder):
            if w["scope"] == "cluster":
                end = clock if w["end"] is None else w["end"]
                key = w["broker_name"]
                totals.setdefault(key, {"before": 0, "after": 0})[name] += end - w["start"]
    for broker, t in sorted(totals.items()):
        print(f"  {broker:<14} {t['before'] / 1000:>9.1f} -> {t['after'] / 1000:>9.1f}", file=out)


def _last_clock(output: Path) -> int:
    from deltalake import DeltaTable

    batches = DeltaTable(str(output / TableName.BATCHES))
    clocks = batches.to_pyarrow_table(columns=["clock"]).column(0)
    return max((c for c in clocks.to_pylist() if c is not None), default=0)


def _decisions(output: Path) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Each decision row by (scope, scope_key, broker, cause): its (decision, effective_at,
    available_from); a cause with several rows keeps them in time order."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(output / TableName.BROKER_DECISIONS)).to_pyarrow_table().to_pylist()
    found: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for r in sorted(rows, key=lambda r: (r["effective_at"], str(r["decision"]))):
        key = tuple(r[k] for k in _DECISION_KEY)
        value = (r["decision"], r["effective_at"], r["available_from"])
        found[key] = found.get(key, ()) + value
    return found
