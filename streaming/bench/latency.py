"""Decision latency: from a broker's first failing send result reaching Kafka to its isolation
on the decisions topic, with the real job running continuously.

    python -m streaming.bench.latency [--rate 20000] [--seconds 30] [--brokers 8] [--trigger 500ms]
                                [--every 3] [--incidents N] [--set KEY=VALUE ...] [--floor]

It starts an Apache Kafka broker (:func:`streaming.sim.kafka_broker.kafka_broker`) and the job in a
process of its own (``python -m streaming.cli run --config job.yaml``, its settings in that file
under a temporary folder: the Kafka source, ``trigger_interval`` and any ``--set``), waits for
the job's first committed micro-batch, then publishes send results at ``--rate`` events per
second for ``--seconds``: healthy producers sending to healthy brokers (``SEND_OK``, 1-30 ms),
and every ``--every`` seconds one broker fails for ``--fail-for`` seconds
(``REMOTING_EXCEPTION``, each retried on another broker). Under the cluster profile
``rocketmq-5`` a failed attempt isolates its broker for 10 s, so each such incident must isolate
that broker at the cluster scope: the topic carries each broker's last decision of a
micro-batch, an ``ISOLATE``, or an ``EXTEND`` when the batch that isolated the broker also
extended it (the message's ``state`` is ``ISOLATED`` either way). Its latency is the time from
handing the broker's first failing send result to the producer
(:class:`streaming.kafka.Publisher`) to reading that isolation from the decisions topic; both
times are taken in this process, on one monotonic clock.

Prints one line per incident, where the job's batches spent their time (:func:`breakdown`, from
its ``batches`` table), and a summary: the count, p50 and p99 (nearest rank) in ms and the
publish rate achieved. Exit code 0 when every incident got its isolation, 1 otherwise. Every
wait is bounded, and the job is stopped however this ends. A measurement, not a test: the
numbers depend on the machine, which runs the job, the broker and the publisher at once.

``--floor`` measures the least latency the machine allows: the same job, query, publisher and
cluster, with a stateful function that only publishes each broker a send failed on as isolated
(:func:`streaming.bench.throughput.floor`: no parsing, no RocketMQ rules, no files).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from streaming.bench.throughput import floor
from streaming.config import load_job_config
from streaming.job.publish import Publisher
from streaming.job.run import run
from streaming.sim.kafka_broker import kafka_broker
from udfs.errors import ConfigError
from udfs.vocabulary import ProducerState, TableName

CLUSTER = "LatencyCluster"
EVENTS_TOPIC = "faultline.events"
SEND_TOPIC = "orders"
"""The RocketMQ topic the simulated producers send to."""
ISOLATION_MS = 10_000
"""How long ``rocketmq-5`` isolates a broker after a failed attempt (``udfs.rocketmq._profiles``:
the substitute latency 10000 ms)."""
REUSE_MARGIN_S = 2.0
"""A broker fails again only this long after its isolation has ended, so it is isolated anew
(5.x extends a running isolation: that would be an ``EXTEND``, not an ``ISOLATE``)."""
STOP_TIMEOUT_S = 30.0


@dataclass
class Incident:
    number: int
    broker: str
    at: float
    """Seconds after the start of publishing."""
    event_id: str = ""
    event_time: int = 0
    sent: float | None = None
    """``time.monotonic()`` when its first failing send result was handed to the producer."""
    isolated: float | None = None
    """``time.monotonic()`` when its isolation was read from the decisions topic."""
    decision: dict[str, Any] = field(default_factory=dict)

    @property
    def latency_ms(self) -> float | None:
        if self.sent is None or self.isolated is None:
            return None
        return (self.isolated - self.sent) * 1000


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``p`` percent at or below it.

    >>> percentile([5, 1, 4, 2, 3], 50), percentile([5, 1, 4, 2, 3], 99)
    (3.0, 5.0)
    """
    return float(np.percentile(values, p, method="inverted_cdf"))


class DecisionWatch:
    """Reads the decisions topic from its beginning in a thread of its own and notes, with the
    time it arrived, every cluster-scope decision of ``cluster`` that leaves a broker
    ``ISOLATED``."""

    def __init__(self, bootstrap: str, topic: str, cluster: str) -> None:
        self.bootstrap, self.topic, self.cluster = bootstrap, topic, cluster
        self.isolates: list[tuple[float, dict[str, Any]]] = []
        self.messages = 0
        self.error: str | None = None
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="decision-watch", daemon=True)

    def __enter__(self) -> DecisionWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"faultline-latency-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
                "log_level": 2,
            }
        )
        try:
            # the job makes the topic when it first publishes: wait for its partitions
            while not self.stop.is_set():
                try:
                    meta = consumer.list_topics(self.topic, timeout=2).topics.get(self.topic)
                except KafkaException:  # no answer yet: ask again
                    continue
                if meta is not None and meta.error is None and meta.partitions:
                    consumer.assign(
                        [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in meta.partitions]
                    )
                    break
                self.stop.wait(0.2)
            prefix = f"broker/{self.cluster}/"
            while not self.stop.is_set():
                messages = consumer.consume(1000, timeout=0.05)
                arrived = time.monotonic()
                for m in messages:
                    if m.error() is not None:
                        continue
                    self.messages += 1
                    key = (m.key() or b"").decode()
                    if not key.startswith(prefix):
                        continue
                    row = json.loads(m.value() or b"{}")
                    if row.get("state") == ProducerState.ISOLATED and row.get("scope") == "cluster":
                        with self.lock:
                            self.isolates.append((arrived, row))
        except Exception as exc:  # reported by the main thread
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            consumer.close()

    def find(self, incident: Incident) -> tuple[float, dict[str, Any]] | None:
        """The first isolation of the incident's broker at or after its first failure."""
        with self.lock:
            for arrived, row in self.isolates:
                if (
                    row.get("broker_name") == incident.broker
                    and int(row.get("effective_at") or 0) >= incident.event_time
                ):
                    return arrived, row
        return None


class Traffic:
    """Send results of healthy producers and brokers, with the brokers of running incidents
    failing; each event is handed to the publisher as it is made."""

    def __init__(
        self, publisher: Any, brokers: int, producers: int, seed: int, run_id: str
    ) -> None:
        self.publisher = publisher
        self.brokers = [f"broker-{i}" for i in range(brokers)]
        self.producers = [f"producer-{i}" for i in range(producers)]
        self.rng = random.Random(seed)
        self.run_id = run_id
        self.seq = 0
        self.sent = 0
        self.failing: set[str] = set()

    def route(self) -> None:
        brokers = [{"broker_name": b, "write_queue_nums": 4, "perm": 6} for b in self.brokers]
        event = {
            "kind": "route",
            "cluster": CLUSTER,
            "event_id": f"{self.run_id}-route",
            "event_time": _now_ms(),
            "topic": SEND_TOPIC,
            "brokers": brokers,
        }
        self._send(event, key=CLUSTER)

    def one(self) -> None:
        """One send result of a random producer to a random broker."""
        producer = self.producers[self.rng.randrange(len(self.producers))]
        self.send_to(self.brokers[self.rng.randrange(len(self.brokers))], producer)

    def send_to(self, broker: str, producer: str) -> tuple[str, int]:
        """A send result to ``broker`` (with its retry elsewhere when the broker is failing);
        returns the first event's id and event time."""
        self.seq += 1
        message_id = f"{self.run_id}-m{self.seq}"
        now = _now_ms()
        first = self._result(producer, broker, message_id, 0, now)
        if broker in self.failing:
            healthy = [b for b in self.brokers if b not in self.failing]
            if healthy:  # RocketMQ retries on another broker (``udfs.rocketmq._send``)
                retry = healthy[self.rng.randrange(len(healthy))]
                self._result(producer, retry, message_id, 1, now + 3)
        return first

    def _result(
        self, producer: str, broker: str, message_id: str, attempt: int, now: int
    ) -> tuple[str, int]:
        failing = broker in self.failing and attempt == 0
        event_id = f"{message_id}-{attempt}"
        event = {
            "kind": "send_result",
            "cluster": CLUSTER,
            "event_id": event_id,
            "event_time": now,
            "producer_id": producer,
            "producer_group": "latency",
            "client_profile": "rocketmq-5",
            "latency_fault_enable": True,
            "topic": SEND_TOPIC,
            "broker_name": broker,
            "queue_id": self.rng.randrange(4),
            "latency_ms": 3 if failing else self.rng.randint(1, 30),
            "outcome": "REMOTING_EXCEPTION" if failing else "SEND_OK",
            "attempt": attempt,
            "max_attempts": 3,
            "mode": "SYNC",
            "message_id": message_id,
            "body_size": 512,
        }
        self._send(event, key=producer)
        return event_id, now

    def _send(self, event: dict[str, Any], key: str) -> None:
        self.publisher.send(EVENTS_TOPIC, json.dumps(event, separators=(",", ":")), key=key)
        self.sent += 1


def _now_ms() -> int:
    return int(time.time() * 1000)


def _clock(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%H:%M:%S.%f")[:-3]


def _plan(args: argparse.Namespace, brokers: list[str]) -> list[Incident]:
    """Incidents every ``every`` seconds from ``every`` seconds on, while they end within the
    publishing time, on the brokers in turn."""
    plan: list[Incident] = []
    at = args.every
    while at + args.fail_for <= args.seconds and len(plan) < (args.incidents or sys.maxsize):
        plan.append(Incident(len(plan) + 1, brokers[len(plan) % len(brokers)], at))
        at += args.every
    return plan


def breakdown(batches: Sequence[dict[str, Any]]) -> str | None:
    """Where a batch's time goes, from the ``batches`` rows: the median of each part in ms over
    the batches Spark reported (it reports a batch after the next has begun, so the last may
    have no figures). Spark's batch (``batch_ms``) is its sink (``add_batch_ms``) and what it
    does around it; the sink runs the query (``write_ms``, with publishing; of which the
    operator's busiest task, ``slowest_task_ms``, is shown apart, its publishing after a
    semicolon: it runs beside the engine's last stages and the files) and the Delta commits
    (``commit_ms``). Medians, so the parts need not add up to the batch's median.

    >>> row = {"batch_ms": 2000, "add_batch_ms": 1700, "write_ms": 1400, "commit_ms": 200,
    ...        "slowest_task_ms": 600, "receive_ms": 50, "parse_ms": 150, "engine_ms": 330,
    ...        "publish_ms": 20, "files_ms": 50}
    >>> print(breakdown([row]))
    batch time, median of 1 batches: 2,000 ms
      Spark around the sink: 300 ms (offsets, planning, its logs, the state store's commit)
      the query but the operator: 800 ms (source, shuffle, tasks, rows read back, publishing)
      the operator's busiest task: 600 ms (receive 50, parse 150, engine 330, files 50; publish 20)
      Delta commits: 200 ms
      the rest of the sink: 100 ms (the batches row, now and then Spark's progress)
    """
    seen = [b for b in batches if b.get("batch_ms") is not None]
    if not seen:
        return None

    def median(column: Any) -> int:
        return round(percentile([column(b) for b in seen], 50))

    def part(name: str) -> int:
        return median(lambda b: b.get(f"{name}_ms") or 0)

    task = ", ".join(f"{name} {part(name):,}" for name in ("receive", "parse", "engine", "files"))
    task += f"; publish {part('publish'):,}"  # beside the engine's last stages and the files
    parts = [
        ("Spark around the sink", lambda b: b["batch_ms"] - b["add_batch_ms"],
         "offsets, planning, its logs, the state store's commit"),
        ("the query but the operator", lambda b: b["write_ms"] - (b["slowest_task_ms"] or 0),
         "source, shuffle, tasks, rows read back, publishing"),
        ("the operator's busiest task", lambda b: b["slowest_task_ms"] or 0, task),
        ("Delta commits", lambda b: b["commit_ms"], ""),
        ("the rest of the sink", lambda b: b["add_batch_ms"] - b["write_ms"] - b["commit_ms"],
         "the batches row, now and then Spark's progress"),
    ]  # fmt: skip
    lines = [f"batch time, median of {len(seen)} batches: {median(lambda b: b['batch_ms']):,} ms"]
    for name, column, what in parts:
        lines.append(f"  {name}: {median(column):,} ms" + (f" ({what})" if what else ""))
    return "\n".join(lines)


def _committed_batches(output: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    try:
        table = DeltaTable(str(output / TableName.BATCHES)).to_pyarrow_table()
    except Exception:  # not created yet
        return []
    return sorted(table.to_pylist(), key=lambda r: r["batch_id"])


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Ctrl-C for the job (it stops its query and Spark), then SIGKILL for what is left of its
    process group (its JVM), each after a bounded wait."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_TIMEOUT_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_TIMEOUT_S)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m streaming.bench.latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rate", type=int, default=20_000, help="events per second")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to publish")
    parser.add_argument("--brokers", type=int, default=8)
    parser.add_argument("--producers", type=int, default=32)
    parser.add_argument(
        "--trigger", default="500ms", help="the job's trigger_interval (500ms, 1s, ...)"
    )
    parser.add_argument("--every", type=float, default=3.0, help="seconds between incidents")
    parser.add_argument(
        "--fail-for", type=float, default=1.0, help="seconds each incident's broker fails"
    )
    parser.add_argument("--incidents", type=int, help="at most this many incidents")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another job setting (a key of conf/faultline.yaml, the value in YAML)",
    )
    parser.add_argument(
        "--ready-timeout", type=float, default=300.0, help="seconds to wait for the first batch"
    )
    parser.add_argument(
        "--wait", type=float, default=60.0, help="seconds to wait for isolations after publishing"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--floor",
        action="store_true",
        help="run the job's query with a stateful function that only isolates the brokers a "
        "send failed on (streaming.bench.throughput.floor): the least latency this machine allows",
    )
    parser.add_argument("--floor-job", help=argparse.SUPPRESS)  # the floor's job process
    return parser


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The job's YAML settings; raises ConfigError naming the key when one is wrong."""
    settings: dict[str, Any] = {"trigger_interval": yaml.safe_load(args.trigger)}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"latency: --set {item!r}: expected KEY=VALUE")
        settings[key.strip()] = yaml.safe_load(value)
    fixed = {"source", "kafka_bootstrap", "topic", "output", "checkpoint", "once"}
    if fixed & settings.keys():
        raise SystemExit(f"latency: --set cannot change {sorted(fixed & settings.keys())}")
    settings.setdefault("kafka_outputs", True)
    load_job_config(None, settings)  # fail here, before anything starts
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.floor_job:
        return _floor_job(args.floor_job)
    if args.rate <= 0 or args.seconds <= 0 or args.brokers < 2 or args.producers < 1:
        raise SystemExit(
            "latency: needs --rate > 0, --seconds > 0, --brokers >= 2, --producers >= 1"
        )
    if args.every <= args.fail_for:
        raise SystemExit("latency: --every must be longer than --fail-for")

    try:
        settings = _settings(args)
    except ConfigError as exc:
        message = str(exc).replace("command line --trigger-interval", "--trigger")
        print(f"latency: {message.replace('command line --', '--set ')}", file=sys.stderr)
        return 2
    brokers = [f"broker-{i}" for i in range(args.brokers)]
    plan = _plan(args, brokers)
    if not plan:
        raise SystemExit("latency: no incident fits: --seconds must exceed --every + --fail-for")
    if len(plan) > len(brokers) and args.brokers * args.every < (
        args.fail_for + ISOLATION_MS / 1000 + REUSE_MARGIN_S
    ):
        raise SystemExit(
            f"latency: a broker would fail again while still isolated ({ISOLATION_MS} ms after "
            "its last failure): raise --brokers or --every, or lower --incidents"
        )

    work = Path(tempfile.mkdtemp(prefix="faultline-latency-"))
    try:
        with kafka_broker() as broker:
            return _measure(args, settings, plan, broker.bootstrap, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _floor_job(path: str) -> int:
    """The job of ``--floor``, in a process of its own, as ``faultline run`` would run it but
    with :func:`streaming.bench.throughput.floor` as its stateful function."""
    config = load_job_config(path)
    isolate = (tuple(sorted(config.kafka_conf().items())), config.decisions_topic)
    return run(config, operator=floor(isolate))


def _measure(
    args: argparse.Namespace,
    settings: dict[str, Any],
    plan: list[Incident],
    bootstrap: str,
    work: Path,
) -> int:

    decisions_topic = str(settings.get("decisions_topic", "faultline.decisions"))
    if not decisions_topic:
        raise SystemExit("latency: the decisions topic is off (decisions_topic: '')")
    config = work / "job.yaml"
    output, log_path = work / "out", work / "job.log"
    where = {"source": "kafka", "kafka_bootstrap": bootstrap, "topic": EVENTS_TOPIC}
    where |= {"output": str(output), "checkpoint": str(work / "ck")}
    config.write_text(yaml.safe_dump({**settings, **where}))
    publisher = Publisher({"bootstrap.servers": bootstrap})
    traffic = Traffic(publisher, args.brokers, args.producers, args.seed, uuid.uuid4().hex[:8])
    traffic.route()  # also makes the events topic, so the job reads it from its first offset
    publisher.flush()
    command = [sys.executable, "-m", "streaming.cli", "run", "--config", str(config)]
    if args.floor:
        command = [sys.executable, "-m", "streaming.bench.latency", "--floor-job", str(config)]
    floor = "; the floor: the job's query with an operator that only isolates"
    print(
        f"latency: Kafka at {bootstrap}; job settings {settings}; job log {log_path}"
        + (floor if args.floor else ""),
        flush=True,
    )
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=work,
            start_new_session=True,
        )
    try:
        with DecisionWatch(bootstrap, decisions_topic, CLUSTER) as watch:
            started = time.monotonic()
            if not _wait_ready(traffic, publisher, proc, output, args.ready_timeout):
                print(
                    f"latency: the job did not commit a batch within {args.ready_timeout:g} s"
                    f" (exit code {proc.poll()}); its log ends:\n{_tail(log_path)}",
                    flush=True,
                )
                return 1
            print(
                f"latency: job ready after {time.monotonic() - started:.1f} s; publishing "
                f"{args.rate:,} events/s for {args.seconds:g} s to {EVENTS_TOPIC} "
                f"({args.brokers} brokers, {args.producers} producers), {len(plan)} incidents: "
                f"a broker fails for {args.fail_for:g} s every {args.every:g} s",
                flush=True,
            )
            before = traffic.sent
            elapsed = _publish(traffic, publisher, plan, args, proc)
            published = traffic.sent - before
            _collect(watch, plan, proc, args.wait)
            if watch.error:
                print(f"latency: reading {decisions_topic} failed: {watch.error}", flush=True)
        ended = proc.poll() is not None
        _stop(proc)  # as it stops, the job writes Spark's figures of its last batches
        code = _report(plan, published, elapsed, args, output, ended)
        if ended:
            print(
                f"latency: the job ended early (exit code {proc.returncode}); its log ends:\n"
                f"{_tail(log_path)}",
                flush=True,
            )
            code = 1
        return code
    finally:
        _stop(proc)
        publisher.close()


def _wait_ready(
    traffic: Traffic, publisher: Any, proc: subprocess.Popen[bytes], output: Path, limit: float
) -> bool:
    """A few healthy send results every half second until the job has committed a batch."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        for _ in range(10):
            traffic.one()
        publisher.flush()
        if _committed_batches(output):
            return True
        time.sleep(0.5)
    return False


def _publish(
    traffic: Traffic,
    publisher: Any,
    plan: list[Incident],
    args: argparse.Namespace,
    proc: subprocess.Popen[bytes],
) -> float:
    """Publish at the rate for the time given, starting and ending incidents on schedule;
    returns the seconds it took."""
    pending = list(plan)
    running: list[Incident] = []
    begin = time.monotonic()
    before = traffic.sent
    burst = max(1, args.rate // 100)  # look at the clock at least every 1/100 s of events
    while (elapsed := time.monotonic() - begin) < args.seconds and proc.poll() is None:
        for incident in [i for i in running if elapsed >= i.at + args.fail_for]:
            running.remove(incident)
            traffic.failing.discard(incident.broker)
        while pending and elapsed >= pending[0].at:
            incident = pending.pop(0)
            traffic.failing.add(incident.broker)
            running.append(incident)
            producer = traffic.producers[incident.number % len(traffic.producers)]
            sent = time.monotonic()
            incident.event_id, incident.event_time = traffic.send_to(incident.broker, producer)
            incident.sent = sent
        budget = int(args.rate * elapsed) - (traffic.sent - before)
        for _ in range(min(budget, burst)):
            traffic.one()
        if budget <= burst:
            time.sleep(0.002)
    traffic.failing.clear()
    elapsed = time.monotonic() - begin
    publisher.flush()
    return elapsed


def _collect(
    watch: DecisionWatch, plan: list[Incident], proc: subprocess.Popen[bytes], limit: float
) -> None:
    """Match each incident with its isolation, waiting at most ``limit`` s for the last."""
    deadline = time.monotonic() + limit
    while True:
        for incident in plan:
            if incident.isolated is None and incident.sent is not None:
                found = watch.find(incident)
                if found is not None:
                    incident.isolated, incident.decision = found
        waiting = [i for i in plan if i.isolated is None]
        if not waiting or time.monotonic() > deadline or proc.poll() is not None:
            return
        time.sleep(0.05)


def _report(
    plan: list[Incident],
    published: int,
    elapsed: float,
    args: argparse.Namespace,
    output: Path,
    job_ended: bool,
) -> int:
    missing = "not isolated " + ("(the job ended)" if job_ended else f"within {args.wait:g} s")
    latencies = []
    for i in plan:
        start = f"{i.broker} failing from {_clock(i.event_time)} (event {i.event_id})"
        if i.sent is None:
            print(f"incident {i.number}: {i.broker}: not started (publishing stopped)")
            continue
        latency = i.latency_ms
        if latency is None:
            print(f"incident {i.number}: {start}: {missing}")
            continue
        latencies.append(latency)
        cause = i.decision.get("cause_event_id")
        print(
            f"incident {i.number}: {start}: isolated after {latency:,.0f} ms "
            f"({i.decision['decision']} effective {_clock(int(i.decision['effective_at']))}, "
            f"cause {cause})"
        )
    batches = _committed_batches(output)
    if batches:
        seconds = sorted((b["write_ms"] + b["commit_ms"]) / 1000 for b in batches[1:] or batches)
        print(
            f"job: {len(batches)} batches, {sum(b['input'] for b in batches):,} records, "
            f"{sum(b['quarantined'] + b['late'] for b in batches)} quarantined or late; "
            f"batch time after the first: median {percentile(seconds, 50):.2f} s, "
            f"max {seconds[-1]:.2f} s"
        )
        # the steady batches if Spark reported one of them, else the first
        line = breakdown(batches[1:]) or breakdown(batches)
        if line:
            print(line)
    rate = published / elapsed if elapsed > 0 else 0.0
    summary = f"summary: {len(plan)} incidents, {len(latencies)} isolated"
    if latencies:
        summary += (
            f"; latency p50 {percentile(latencies, 50):,.0f} ms, "
            f"p99 {percentile(latencies, 99):,.0f} ms, max {max(latencies):,.0f} ms"
        )
    summary += (
        f"; published {published:,} events in {elapsed:.1f} s ({rate:,.0f}/s of "
        f"{args.rate:,}/s); trigger {args.trigger}"
    )
    print(summary, flush=True)
    return 0 if len(latencies) == len(plan) else 1


if __name__ == "__main__":
    sys.exit(main())
