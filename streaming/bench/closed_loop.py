"""The closed loop on a real RocketMQ: real producers of each client version report every attempt
through faultline's Java hook to a real Kafka, the job reads them through Spark's Kafka source and
publishes its decisions, and half of the producers follow them; faults happen, and the producers
that follow are compared with those that do not, in the same run.

    python -m streaming.bench.closed_loop [--producers-per-version 2] [--rate 10]
        [--many 30] [--many-rate 1] [--brokers 3] [--fault-s 20] [--gap-s 20] [--data DIR]
        [--json FILE]
    python -m streaming.bench.closed_loop --judge DIR      # the run saved in DIR, reported again

Starts an Apache Kafka broker (``streaming.sim.kafka_broker``), the RocketMQ testbed
(``streaming.sim.rocketmq``: a NameServer and ``--brokers`` brokers of RocketMQ 5.3.3), the job as a
``faultline run --source kafka`` subprocess with the shipped configuration (``conf/faultline.yaml``:
the ``rocketmq-5`` cluster profile and every default policy) and the testbed NameServer's own
heartbeat settings, and one harness JVM per client version
(``io.faultline.rocketmq.harness.Driver``: 4.7.1; 4.9.7 with the latency fault switch on, with it
off, and the many-producers case; 5.3.3). Per version, ``--producers-per-version`` producers follow
faultline and as many do not; every one reports each attempt through ``FaultlineReporting`` (the
Java ``SendMessageHook``) and sends ``--rate`` SYNC messages a second, each period within 10% of
``1/rate``. The many-producers case is ``--many`` 4.9.7 producer instances (in the 4.9.7 JVM) at
``--many-rate`` each, half following. Every producer is a client instance of its own (producers
sharing one share its queue list, and 4.x's ``pickOneAtLeast`` rewrites it in place); those that
follow share their JVM's one ``FaultlineFollower``, as an application's producers do. The
producers keep RocketMQ's defaults (``sendMsgTimeout`` 3 s, two retries, a route poll every 30 s);
following turns the switch on (the follower writes into the fault table the selection reads only
with it, as the Spring Boot auto-configuration does).
The testbed's NameServer heartbeats and routes reach the job as ``heartbeat`` and ``route`` events
on the same topic, as a NameServer watcher would report them.

After a warm-up (20 s, and the job three batches further) every fault table is emptied: a JVM's
first sends are slow, and 4.x isolates a broker for 30 s after one answer of 550 ms. Then, with
``--gap-s`` of quiet before each: broker-a frozen (SIGSTOP) for ``--fault-s``; broker-b
answering 700 ms late for ``--fault-s``; broker-c killed (SIGKILL) and started again on its store
``--fault-s`` later. Each harness records every send, attempt, its producers' fault tables (every
50 ms) and its follower's writes (``harness/Recorder``); a consumer reads the decisions topic with
each message's Kafka timestamp. Printed, per fault and per group (version and switch, following or
alone), from those records:

- **sick sends**: attempts (retries included) that started on the fault's broker while it was sick
  (frozen; slow; killed until it was back in the NameServer's route);
- **failed**: sends the application saw throw, started from the fault's start to the next fault's;
- **p99**: the application's send time over the same sends (ms);
- **capacity kept away**: of the time each healthy broker spent healthy over the same span, the
  share during which a producer's own fault table held it not available (what its selection
  reads with the switch on), the mean over the group's producers;
- **the decision delay**: from the fault to the first attempt that showed it (a failure, or an
  answer at the isolating 550 ms), to the first decision about the broker on the topic that keeps
  it away (its Kafka timestamp), to when each following producer's table held it from then on
  (the follower's write, or the producer's own isolation already there; p50 and max);
- where the followers' sick sends got through: the topic's last word on the broker when each
  started (:func:`leaks`).

Then the many-producers case: sick sends per fault, following against alone, the most following
could save (:func:`within_reach`), and the goals:
following never worse than alone (sick sends, failures, beyond chance: :func:`chance`; p99 and
capacity are shown), and at least 50% fewer sick sends when following in the many-producers case.
``--json FILE`` writes the whole result; ``--data DIR`` keeps the run (``run.json`` and each
harness's records) for ``--judge``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from streaming.client import BROKER_KEYS, ROUTE_KEYS
from streaming.sim import java_client, rocketmq
from streaming.sim.kafka_broker import kafka_broker

ROOT = Path(__file__).resolve().parents[2]
EVENTS = "faultline.events"
DECISIONS = "faultline.decisions"
ISOLATING_MS = 550
"""An answer this slow isolates its broker in every shipped profile (and goes out in full)."""
SLOW_MS = 700
JOB_FLAGS = (
    # the testbed NameServer's own: it keeps a broker 10 s after its last heartbeat, scans every 5 s
    "--heartbeat-timeout",
    f"{rocketmq.HEARTBEAT_TIMEOUT_MS}ms",
    "--scan-interval",
    f"{rocketmq.SCAN_INTERVAL_MS}ms",
)
BROKER_SETTINGS = {"waitTimeMillsInSendQueue": "3000"}
"""A send may wait 3 s in a broker's queue before 'broker busy' (RocketMQ's default 200 ms): on 2
busy cores the default fails sends to healthy brokers, which is not what this bench measures."""
ROUTE_POLL_MS = 30_000
"""The producers' route poll: RocketMQ's default ``pollNameServerInterval``."""


@dataclass(frozen=True)
class Group:
    """Producers of one client version and switch."""

    name: str
    profile: str
    latency_fault: bool
    many: bool = False


GROUPS = (
    Group("4.7.1", "rocketmq-4.7", True),
    Group("4.9.7", "rocketmq-4.9", True),
    Group("4.9.7 switch off", "rocketmq-4.9", False),
    Group("5.3.3", "rocketmq-5", True),
)
GROUP_NAMES = tuple(g.name for g in GROUPS)
MANY = Group("4.9.7 many", "rocketmq-4.9", True, many=True)


@dataclass(frozen=True)
class Member:
    producer_id: str
    group: str
    follows: bool
    rate: float


@dataclass
class Fault:
    kind: str
    broker: str
    start_ms: int
    end_ms: int = 0
    """When the broker was healthy again (thawed, fast, back in the NameServer's route)."""
    span_end_ms: int = 0
    """The next fault's start, or the end of the sends: what failures, p99 and capacity count."""


@dataclass
class Run:
    """What a run recorded: each harness's records, the decisions topic, the faults."""

    members: list[Member]
    faults: list[Fault]
    brokers: list[str]
    records: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    """Each message of the decisions topic: ``ts`` (its Kafka timestamp), ``key``, ``value``."""
    started_ms: int
    ended_ms: int
    job: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    """What the run was asked: the producers, their rates, the faults' and gaps' lengths."""

    RECORDS = "record.jsonl"

    def save(self, data: Path) -> None:
        """Into ``data/run.json`` (the records stay in each harness's ``record.jsonl``)."""
        plain = {k: v for k, v in asdict(self).items() if k != "records"}
        (data / "run.json").write_text(json.dumps(plain))

    @staticmethod
    def load(data: Path) -> Run:
        """A run :meth:`save` d in ``data`` (``--judge DIR``)."""
        plain = json.loads((data / "run.json").read_text())
        records = [
            json.loads(line)
            for f in sorted(data.glob(f"*/{Run.RECORDS}"))
            for line in f.read_text().splitlines()
            if line.strip()
        ]
        return Run(
            [Member(**m) for m in plain.pop("members")],
            [Fault(**f) for f in plain.pop("faults")],
            plain.pop("brokers"),
            records,
            **plain,
        )


# --- running -----------------------------------------------------------------------------------


def members(
    per_version: int,
    rate: float,
    many: int,
    many_rate: float,
    groups: Sequence[str] = GROUP_NAMES,
) -> list[Member]:
    """Per group of ``groups``, ``per_version`` producers following and as many alone; then the
    many-producers case's ``many`` (half following)."""
    out = []
    for g in (g for g in GROUPS if g.name in groups):
        tag = g.name.replace(".", "").replace(" switch off", "off")
        for i in range(per_version):
            out.append(Member(f"v{tag}-f{i}", g.name, True, rate))
            out.append(Member(f"v{tag}-a{i}", g.name, False, rate))
    for i in range(many // 2):
        out.append(Member(f"many-f{i:02d}", MANY.name, True, many_rate))
        out.append(Member(f"many-a{i:02d}", MANY.name, False, many_rate))
    return out


def group(name: str) -> Group:
    return next(g for g in (*GROUPS, MANY) if g.name == name)


class Forwarder:
    """The testbed's heartbeat and route events onto the events topic, every 200 ms."""

    def __init__(self, bed: rocketmq.Testbed, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.bed, self.topic = bed, topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
        self.sent = {"heartbeats": 0, "routes": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="forwarder")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._once()
        self._once()
        self.producer.flush(10)

    def _once(self) -> None:
        for name, events in (("heartbeats", self.bed.heartbeats), ("routes", self.bed.routes)):
            new = events[self.sent[name] :]
            for e in new:
                self.producer.produce(self.topic, json.dumps(e), key=rocketmq.CLUSTER)
            self.sent[name] += len(new)
        self.producer.poll(0)

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(15)


class DecisionReader:
    """Every message of the decisions topic, with its Kafka timestamp, from its start."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.messages: list[dict[str, Any]] = []
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"closed-loop-{time.time_ns()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        self._consumer.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="decisions")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._consumer.consume(100, timeout=0.2):
                value = m.value()
                if m.error() is None and value is not None:
                    key = m.key()
                    self.messages.append(
                        {
                            "ts": m.timestamp()[1],
                            "read_at": int(time.time() * 1000),
                            "key": key.decode() if isinstance(key, bytes) else str(key),
                            "value": json.loads(value),
                        }
                    )

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def _events_topic(bootstrap: str, name: str) -> None:
    """The send-results topic as ``docker compose`` makes it: the broker stamps each record."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, 4, 1, config={"message.timestamp.type": "LogAppendTime"})
    admin.create_topics([topic])[name].result(30)


def _topic_exists(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    found = admin.list_topics(topic, timeout=5).topics.get(topic)
    return found is not None and found.error is None


def _end_offsets(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "closed-loop-offsets"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts
        )
    finally:
        consumer.close()


def _batches(output: Path) -> Any:
    from deltalake import DeltaTable

    try:
        return DeltaTable(str(output / "batches")).to_pandas(
            columns=["batch_id", "input", "batch_ms", "publish_ms", "committed_at"]
        )
    except Exception:  # not written yet
        return None


def _batch_count(output: Path) -> int:
    b = _batches(output)
    return 0 if b is None else len(b)


@contextlib.contextmanager
def _job(
    bootstrap: str, topics: tuple[str, str], folder: Path, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``faultline run --source kafka`` from this worktree, stopped with SIGINT (Ctrl-C)."""
    cmd = [
        sys.executable, "-m", "streaming.cli", "run", "--source", "kafka",
        "--kafka-bootstrap", bootstrap, "--topic", topics[0], "--decisions-topic", topics[1],
        "--output", str(folder / "out"), "--checkpoint", str(folder / "ck"), *JOB_FLAGS,
    ]  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def _wait(what: str, ok: Any, limit: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + limit
    while not ok():
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the job exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {limit:.0f} s")
        time.sleep(0.5)


def _now() -> int:
    return int(time.time() * 1000)


def _say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def run(
    data: Path,
    *,
    per_version: int = 2,
    rate: float = 10.0,
    many: int = 30,
    many_rate: float = 1.0,
    faults: Sequence[str] = ("frozen", "slow", "killed"),
    fault_s: float = 20.0,
    gap_s: float = 20.0,
    warmup_s: float = 20.0,
    groups: Sequence[str] = GROUP_NAMES,
    brokers: int = 3,
    kafka: str | None = None,
    topics: tuple[str, str] = (EVENTS, DECISIONS),
    follow: bool = True,
) -> Run:
    """One closed-loop run in ``data``, on a Kafka of its own or the one at ``kafka`` (``topics``:
    the send results', which must not exist yet, and the decisions'); ``follow=False`` starts no
    follower (the producers that would follow are alone too: the comparison then needs none)."""
    data.mkdir(parents=True, exist_ok=True)
    crew = members(per_version, rate, many, many_rate, groups)
    names = [f"broker-{chr(ord('a') + i)}" for i in range(brokers)]
    targets = {"frozen": names[0], "slow": names[1 % brokers], "killed": names[2 % brokers]}
    events, decisions = topics
    with contextlib.ExitStack() as stack:
        if kafka is None:
            _say("starting Kafka")
            kafka = stack.enter_context(kafka_broker(data / "kafka")).bootstrap
        _events_topic(kafka, events)
        java_client.client_jars()  # built before the JVMs start, when its sources changed
        _say("starting the job and the RocketMQ testbed")
        job = stack.enter_context(_job(kafka, topics, data / "job", data / "job.log"))
        out = data / "job" / "out"
        bed = stack.enter_context(rocketmq.testbed(data / "rocketmq", brokers, BROKER_SETTINGS))
        forwarder = Forwarder(bed, kafka, events)
        stack.callback(forwarder.close)
        profiles = sorted({group(m.group).profile for m in crew})
        drivers = {}
        for profile in profiles:
            drivers[profile] = java_client.driver(
                bed, profile, data / profile, decisions,
                events_topic=events, record=data / profile / Run.RECORDS,
            )  # fmt: skip
            stack.callback(drivers[profile].close)
        for d in drivers.values():
            d.wait_ready()
        for m in crew:
            g = group(m.group)
            args: dict[str, Any] = {
                "id": m.producer_id,
                "latency_fault": g.latency_fault,
                "report": kafka,
                "poll_ms": ROUTE_POLL_MS,
            }
            if m.follows and follow:
                args |= {"kafka": kafka, "shared": True}
            drivers[g.profile].ask("start", **args)
        _say("waiting for the job's first batch")
        _wait(
            "the job's first batch and its decisions topic",
            lambda: _batches(data / "job" / "out") is not None and _topic_exists(kafka, decisions),
            240,
            job,
        )
        reader = DecisionReader(kafka, decisions)
        stack.callback(reader.close)
        _say(f"{len(crew)} producers sending")
        for m in crew:
            drivers[group(m.group).profile].ask("run", id=m.producer_id, rate=m.rate)
        # the warm-up: the job past its first batches of sends (Spark's first is slow), then
        # every fault table emptied (a JVM's first sends are slow: 4.x isolates for 30 s after one)
        first = _batch_count(out)
        time.sleep(warmup_s)
        _wait("the job's batches of the first sends", lambda: _batch_count(out) >= first + 3, 120)
        for d in drivers.values():
            d.ask("clear")
        started = _now()
        _say("warmed up: fault tables emptied")
        done: list[Fault] = []
        for kind in faults:
            time.sleep(gap_s)
            broker = bed.broker(targets[kind])
            fault = Fault(kind, broker.name, _now())
            if done:
                done[-1].span_end_ms = fault.start_ms
            _say(f"{kind}: {broker.name}")
            if kind == "frozen":
                broker.freeze()
                time.sleep(fault_s)
                broker.thaw()
            elif kind == "slow":
                broker.slow(SLOW_MS)
                time.sleep(fault_s)
                broker.slow(0)
            else:
                broker.kill()
                time.sleep(fault_s)
                broker.start()
                broker.wait_ready()
            fault.end_ms = _now()
            done.append(fault)
        time.sleep(gap_s)
        for d in drivers.values():
            d.ask("halt", timeout=30)
        ended = _now()
        if done:
            done[-1].span_end_ms = ended
        _say("sends stopped; the job reads the rest")
        for d in drivers.values():
            d.close()  # every reporter's open summary goes out
        forwarder.close()
        total = _end_offsets(kafka, events)

        def drained() -> bool:
            b = _batches(data / "job" / "out")
            return b is not None and int(b["input"].sum()) >= total

        with contextlib.suppress(TimeoutError):
            _wait("the job reading every record", drained, 90, job)
        time.sleep(2)  # its last decisions onto the topic
        reader.close()
        records = [
            json.loads(line)
            for profile in profiles
            for line in (data / profile / Run.RECORDS).read_text().splitlines()
            if line.strip()
        ]
        batches = _batches(data / "job" / "out")
        job_summary: dict[str, Any] = {
            "records_on_topic": total,
            "heartbeats": forwarder.sent["heartbeats"],
            "routes": forwarder.sent["routes"],
        }
        if batches is not None:
            measured = batches[batches["committed_at"] >= started]
            job_summary |= {
                "batches": len(batches),
                "records_read": int(batches["input"].sum()),
                "batch_ms_p50": float(measured["batch_ms"].median()),
                "batch_ms_max": int(measured["batch_ms"].max()),
            }
        params = {
            "per_version": per_version,
            "rate": rate,
            "many": many,
            "many_rate": many_rate,
            "fault_s": fault_s,
            "gap_s": gap_s,
            "brokers": brokers,
        }
        result = Run(
            crew, done, names, records, reader.messages, started, ended, job_summary, params
        )
        result.save(data)
        return result


# --- judging -----------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` percentile (0-100), nearest rank; NaN for none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def sick_intervals(run: Run) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for f in run.faults:
        out[f.broker].append((f.start_ms, f.end_ms))
    return out


def healthy_ms(run: Run, broker: str, span: tuple[int, int]) -> int:
    """The time of ``span`` in which ``broker`` was healthy."""
    return (span[1] - span[0]) - sum(_overlap(s, span) for s in sick_intervals(run)[broker])


def held_intervals(run: Run) -> dict[str, list[tuple[int, int, frozenset[str]]]]:
    """Per producer, the brokers its fault table held, from its samples: each set from its sample
    to the next (none before the first)."""
    samples: dict[str, list[tuple[int, frozenset[str]]]] = defaultdict(list)
    for r in run.records:
        if r["k"] == "held":
            samples[r["id"]].append((r["at"], frozenset(r["brokers"])))
    out: dict[str, list[tuple[int, int, frozenset[str]]]] = {}
    for pid, rows in samples.items():
        rows.sort(key=lambda x: x[0])
        ends = [at for at, _ in rows[1:]] + [max(rows[-1][0], run.ended_ms)]
        out[pid] = [(at, end, s) for (at, s), end in zip(rows, ends, strict=True) if s]
    return out


def kept_away(
    run: Run,
    held: list[tuple[int, int, frozenset[str]]],
    span: tuple[int, int],
) -> float:
    """Of the healthy broker-time in ``span``, the share a producer's table (``held``, its
    :func:`held_intervals`) held away."""
    sick = sick_intervals(run)
    healthy = sum(healthy_ms(run, b, span) for b in run.brokers)
    away = 0
    for start, end, brokers in held:
        piece = (max(start, span[0]), min(end, span[1]))
        if piece[1] <= piece[0]:
            continue
        for b in brokers:
            away += (piece[1] - piece[0]) - sum(_overlap(s, piece) for s in sick[b])
    return away / healthy if healthy else 0.0


@dataclass(frozen=True)
class Row:
    fault: str
    group: str
    follows: bool
    producers: int
    sends: int
    sick_sends: int
    failed: int
    p99_ms: float
    kept_away: float
    """The mean share of healthy broker-time the group's producers' tables held away."""
    held_at_start: int
    """Producers whose own table held the fault's broker already when the fault began."""


@dataclass(frozen=True)
class Delay:
    fault: str
    broker: str
    evidence_s: float | None
    """Fault to the first attempt that showed it (its end)."""
    on_topic_s: float | None
    """Fault to the first decision about the broker that keeps it away and took effect after
    the fault began: its Kafka timestamp."""
    decision: str | None
    applied_p50_s: float | None
    """Fault to when each following producer's table held the broker, from the decision on:
    the follower's write, or the producer's own isolation already there (p50 and max)."""
    applied_max_s: float | None
    applied_producers: int


def rows(run: Run) -> list[Row]:
    held = held_intervals(run)
    sends: dict[str, list[dict[str, Any]]] = defaultdict(list)
    attempts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in run.records:
        if r["k"] == "send":
            sends[r["id"]].append(r)
        elif r["k"] == "attempt":
            attempts[r["id"]].append(r)
    out = []
    for f in run.faults:
        span = (f.start_ms, f.span_end_ms)
        for g in (*GROUPS, MANY):
            for follows in (True, False):
                crew = [
                    m.producer_id for m in run.members if m.group == g.name and m.follows == follows
                ]
                if not crew:
                    continue
                in_span = [s for p in crew for s in sends[p] if span[0] <= s["start"] < span[1]]
                sick = sum(
                    1
                    for p in crew
                    for a in attempts[p]
                    if a["broker"] == f.broker and f.start_ms <= a["start"] < f.end_ms
                )
                out.append(
                    Row(
                        f.kind,
                        g.name,
                        follows,
                        len(crew),
                        len(in_span),
                        sick,
                        sum(1 for s in in_span if not s["ok"]),
                        percentile([s["us"] / 1000 for s in in_span], 99),
                        sum(kept_away(run, held.get(p, []), span) for p in crew) / len(crew),
                        sum(
                            1
                            for p in crew
                            if any(
                                a <= f.start_ms < b and f.broker in bs
                                for a, b, bs in held.get(p, [])
                            )
                        ),
                    )
                )
    return out


def delays(run: Run) -> list[Delay]:
    following = {m.producer_id for m in run.members if m.follows}
    held = held_intervals(run)
    out = []
    for f in run.faults:
        evidence = min(
            (
                r["end"]
                for r in run.records
                if r["k"] == "attempt"
                and r["broker"] == f.broker
                and f.start_ms <= r["start"] < f.end_ms
                and (not r["ok"] or r["end"] - r["start"] >= ISOLATING_MS)
            ),
            default=None,
        )
        keys = _keys(f.broker)
        first = min(
            (
                d
                for d in run.decisions
                if d["key"] in keys
                and d["value"].get("effective_at", 0) >= f.start_ms
                and d["value"].get("state") in ("ISOLATED", "PROBING", "OUT_OF_ROUTE")
            ),
            key=lambda d: d["ts"],
            default=None,
        )
        applied: dict[str, int] = {}
        if first is not None:
            for r in run.records:
                if (
                    r["k"] == "applied"
                    and r["id"] in following
                    and r["broker"] == f.broker
                    and (r["effective_at"] or 0) >= f.start_ms
                    and r["until"] > r["at"]
                    and r["at"] < applied.get(r["id"], f.end_ms)
                ):
                    applied[r["id"]] = r["at"]
            # a table that held the broker already (the producer's own isolation, as long or
            # longer: the follower leaves it) has the decision in effect once it is on the topic
            for pid in following:
                for start, end, brokers in held.get(pid, []):
                    if f.broker in brokers and end > first["ts"] and start < f.end_ms:
                        at = max(start, first["ts"])
                        applied[pid] = min(at, applied.get(pid, at))
                        break
        after = [(at - f.start_ms) / 1000 for at in applied.values()]
        out.append(
            Delay(
                f.kind,
                f.broker,
                None if evidence is None else (evidence - f.start_ms) / 1000,
                None if first is None else (first["ts"] - f.start_ms) / 1000,
                None if first is None else first["value"].get("decision"),
                percentile(after, 50) if after else None,
                max(after) if after else None,
                len(applied),
            )
        )
    return out


def within_reach(
    run: Run, measured: Sequence[Delay]
) -> dict[str, tuple[int, int | None, int | None]]:
    """Per fault, the many producers alone's sick sends: all of them, those that started after
    the fault's first evidence, and after faultline's decision reached the topic (``measured``:
    the run's :func:`delays`). Following can save only what starts after the decision: the last
    is the most the job's measured delay leaves within reach, the second what a job without
    delay would, the rest no follower can save (the broker had not shown itself to anyone)."""
    alone = {m.producer_id for m in run.members if m.group == MANY.name and not m.follows}
    out = {}
    for f, d in zip(run.faults, measured, strict=True):
        starts = [
            r["start"]
            for r in run.records
            if r["k"] == "attempt"
            and r["id"] in alone
            and r["broker"] == f.broker
            and f.start_ms <= r["start"] < f.end_ms
        ]
        after = [
            None if s is None else sum(t >= f.start_ms + s * 1000 for t in starts)
            for s in (d.evidence_s, d.on_topic_s)
        ]
        out[f.kind] = (len(starts), after[0], after[1])
    return out


def _keys(broker: str) -> list[str]:
    """The decision topic's keys about ``broker``: its FaultItem's, its place in the route."""
    return [f"{kind}/{rocketmq.CLUSTER}/{broker}" for kind in (BROKER_KEYS, ROUTE_KEYS)]


STATES = ("held", "on probation", "hold ended", "let go", "no decision yet")
"""What the decisions meant to a follower's send, the one that holds most first."""
OUT_OF_ROUTE_HOLD_MS = 30_000
"""The follower's ``out-of-route-hold`` (its default)."""


def _word(value: dict[str, Any], ts: int, at: int) -> str:
    """What a decision read at ``ts`` (its Kafka timestamp) meant to a follower at ``at``."""
    state = value.get("state", "")
    if state == "AVAILABLE":
        return "let go"
    start, end = int(value["effective_at"]), int(value["available_from"])
    if state == "OUT_OF_ROUTE":
        until = max(start, ts) + OUT_OF_ROUTE_HOLD_MS
    else:  # as the follower holds a decision read live: at least its duration from the read
        until = max(end, ts + end - start)
    if at >= until:
        return "hold ended"
    return "on probation" if state == "PROBING" else "held"


def leaks(run: Run) -> dict[str, dict[str, int]]:
    """Per fault, the following producers' sick sends by what the decisions topic's latest message
    about the broker (by Kafka timestamp, since the fault began) meant when each started: where
    the loop lets sends through. ``no decision yet``: the decision delay; ``on probation``: a
    probation's share; ``hold ended``: an isolation over before the next one came (RocketMQ 5.x
    isolates for 2 s after a slow answer, and the next decision is a delay away); ``let go``: a
    restore; ``held``: the producer's own selection went around a hold (RocketMQ 4.x's
    ``pickOneAtLeast`` when every broker is held, or its own answer between two rounds)."""
    following = {m.producer_id for m in run.members if m.follows}
    out = {}
    for f in run.faults:
        said = [
            sorted(
                (d["ts"], i)
                for i, d in enumerate(run.decisions)
                if d["key"] == key and d["ts"] >= f.start_ms
            )
            for key in _keys(f.broker)
        ]
        counts = dict.fromkeys(STATES, 0)
        for r in run.records:
            if (
                r["k"] == "attempt"
                and r["id"] in following
                and r["broker"] == f.broker
                and f.start_ms <= r["start"] < f.end_ms
            ):
                words = []  # each key's latest word: the one that holds most counts
                for key in said:
                    before = [(ts, i) for ts, i in key if ts <= r["start"]]
                    if before:
                        ts, i = before[-1]
                        words.append(_word(run.decisions[i]["value"], ts, r["start"]))
                counts[min(words, key=STATES.index, default="no decision yet")] += 1
        out[f.kind] = counts
    return out


@dataclass(frozen=True)
class Goals:
    worse: list[str]
    """Where following did worse than alone, per group: fault, group, measure, both figures."""
    worse_overall: list[str]
    """The same over every group but the many producers' together, per fault."""
    many_sick: tuple[int, int]
    """The many-producers case's sick sends over every fault: following, alone."""

    @property
    def many_reduction(self) -> float:
        following, alone = self.many_sick
        return 1 - following / alone if alone else math.nan

    @property
    def never_worse(self) -> bool:
        """No group did worse following, beyond chance (:data:`SIGNIFICANT`)."""
        return not significant(self.worse)

    @property
    def many_met(self) -> bool:
        return self.many_reduction >= 0.5


SIGNIFICANT = 0.05
"""A difference counts as worse when chance explains it this rarely (:func:`chance`)."""


def chance(following: int, alone: int, share: float) -> float:
    """How likely ``following`` or more of ``following + alone`` events land on the producers that
    follow if following changed nothing and they hold ``share`` of the producers: the one-sided
    binomial tail (two equal Poisson rates, given their sum)."""
    n = following + alone
    return sum(math.comb(n, i) * share**i * (1 - share) ** (n - i) for i in range(following, n + 1))


def _worse(label: str, following: Sequence[Row], alone: Sequence[Row]) -> list[str]:
    """Where the rows ``following`` did worse than ``alone``, sick sends and failures per
    producer: each with how likely chance alone makes it (:func:`chance`)."""
    out: list[str] = []
    fp, ap = sum(r.producers for r in following), sum(r.producers for r in alone)
    if not fp or not ap:
        return out
    for what, mine, theirs in (
        ("sick sends", sum(r.sick_sends for r in following), sum(r.sick_sends for r in alone)),
        ("failed", sum(r.failed for r in following), sum(r.failed for r in alone)),
    ):
        if mine / fp > theirs / ap:
            p = chance(mine, theirs, fp / (fp + ap))
            out.append(f"{label}: {what} {mine}/{fp} > {theirs}/{ap} producers (chance {p:.2f})")
    return out


def significant(worse: Sequence[str]) -> list[str]:
    """The differences of :func:`_worse` that chance explains less often than
    :data:`SIGNIFICANT`."""
    return [w for w in worse if float(w.rsplit("chance ", 1)[1][:-1]) < SIGNIFICANT]


def goals(table: Sequence[Row]) -> Goals:
    worse, overall = [], []
    for fault in dict.fromkeys(r.fault for r in table):
        here = [r for r in table if r.fault == fault]
        for name in dict.fromkeys(r.group for r in here):
            pair = [r for r in here if r.group == name]
            worse += _worse(
                f"{fault}, {name}",
                [r for r in pair if r.follows],
                [r for r in pair if not r.follows],
            )
        few = [r for r in here if r.group != MANY.name]
        overall += _worse(
            f"{fault}, every version",
            [r for r in few if r.follows],
            [r for r in few if not r.follows],
        )
    many = [r for r in table if r.group == MANY.name]
    return Goals(
        worse,
        overall,
        (
            sum(r.sick_sends for r in many if r.follows),
            sum(r.sick_sends for r in many if not r.follows),
        ),
    )


# --- printing ----------------------------------------------------------------------------------


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def report(run: Run) -> str:
    table = rows(run)
    lines = [
        "closed loop: "
        + ", ".join(
            f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in run.params.items()
        )
        + f"; {len(run.members)} producers, {len(run.faults)} faults, "
        f"{(run.ended_ms - run.started_ms) / 1000:.0f} s of sends; the job: "
        + ", ".join(
            f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in run.job.items()
        ),
        "",
        "Each cell: the producers following faultline / those alone.",
        "",
        "| fault | group | producers | sends | sick sends | failed | p99 (ms) "
        "| capacity kept away | held at the start |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    pairs: dict[tuple[str, str], dict[bool, Row]] = defaultdict(dict)
    for r in table:
        pairs[(r.fault, r.group)][r.follows] = r
    for (fault, name), pair in pairs.items():
        fol, alo = pair.get(True), pair.get(False)

        def both(cell: Any, fol: Row | None = fol, alo: Row | None = alo) -> str:
            return " / ".join("-" if r is None else cell(r) for r in (fol, alo))

        lines.append(
            f"| {fault} | {name} | {both(lambda r: str(r.producers))} "
            f"| {both(lambda r: str(r.sends))} | {both(lambda r: str(r.sick_sends))} "
            f"| {both(lambda r: str(r.failed))} | {both(lambda r: f'{r.p99_ms:.0f}')} "
            f"| {both(lambda r: f'{100 * r.kept_away:.1f}%')} "
            f"| {both(lambda r: str(r.held_at_start))} |"
        )
    lines += [
        "",
        "| fault | broker | first evidence | decision on the topic | in the followers' tables, "
        "p50 / max (producers) |",
        "|---|---|---|---|---|",
    ]
    measured = delays(run)
    for d in measured:
        lines.append(
            f"| {d.fault} | {d.broker} | {_s(d.evidence_s)} s | {_s(d.on_topic_s)} s "
            f"({d.decision or 'none'}) | {_s(d.applied_p50_s)} / {_s(d.applied_max_s)} s "
            f"({d.applied_producers}) |"
        )
    lines += [
        "",
        "The followers' sick sends, by the decisions topic's last word on the broker when each "
        "started:",
        "",
        "| fault | " + " | ".join(STATES) + " |",
        "|---|" + "---|" * len(STATES),
    ]
    for fault, counts in leaks(run).items():
        lines.append(f"| {fault} | " + " | ".join(str(counts[s]) for s in STATES) + " |")
    g = goals(table)
    many = [r for r in table if r.group == MANY.name]
    if many:
        lines += ["", "| many producers (4.9.7) | following | alone | fewer |", "|---|---|---|---|"]
        for fault in dict.fromkeys(r.fault for r in many):
            f = next(r.sick_sends for r in many if r.fault == fault and r.follows)
            a = next(r.sick_sends for r in many if r.fault == fault and not r.follows)
            lines.append(f"| {fault}: sick sends | {f} | {a} | {_pct(f, a)} |")
        f, a = g.many_sick
        lines.append(f"| every fault | {f} | {a} | {_pct(f, a)} |")
        reach = within_reach(run, measured)
        lines += [
            "",
            "| the many producers alone's sick sends | all | started after the first evidence "
            "| after the decision was on the topic |",
            "|---|---|---|---|",
        ]
        for fault, (every, evidence, decided) in reach.items():
            lines.append(f"| {fault} | {every} | {_n(evidence)} | {_n(decided)} |")
        total = [sum(x or 0 for x in column) for column in zip(*reach.values(), strict=True)]
        lines.append(f"| every fault | {total[0]} | {total[1]} | {total[2]} |")
        lines.append(
            f"the most following could save: {_share(total[2], total[0])} at the measured "
            f"decision delay, {_share(total[1], total[0])} with none"
        )
    lines += [
        "",
        "goal, following never worse than alone (sick sends, failed, per producer, beyond "
        f"chance {SIGNIFICANT}), per group: "
        + ("met" if g.never_worse else "NOT met: " + "; ".join(significant(g.worse))),
        "... every version together, per fault: "
        + (
            "met"
            if not significant(g.worse_overall)
            else "NOT met: " + "; ".join(significant(g.worse_overall))
        ),
        "worse by any count: " + ("none" if not g.worse + g.worse_overall else ""),
        *(f"- {w}" for w in g.worse + g.worse_overall),
    ]
    if many:
        lines.append(
            "goal, many producers: at least 50% fewer sick sends following: "
            + ("met" if g.many_met else "NOT met")
            + f" ({_pct(*g.many_sick)})"
        )
    return "\n".join(lines)


def _n(x: int | None) -> str:
    return "-" if x is None else str(x)


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def _pct(following: int, alone: int) -> str:
    return f"{100 * (1 - following / alone):.0f}%" if alone else "-"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streaming.bench.closed_loop",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--producers-per-version", type=int, default=2)
    parser.add_argument("--rate", type=float, default=10.0, help="messages/s per producer")
    parser.add_argument("--many", type=int, default=30, help="many-producers instances (0: none)")
    parser.add_argument("--many-rate", type=float, default=1.0)
    parser.add_argument(
        "--brokers", type=int, default=3, help="the testbed's brokers (the faults take the first 3)"
    )
    parser.add_argument("--fault-s", type=float, default=20.0)
    parser.add_argument("--gap-s", type=float, default=20.0)
    parser.add_argument(
        "--faults", default="frozen,slow,killed", help="in order: frozen, slow, killed"
    )
    parser.add_argument("--data", type=Path, help="the run's folder (default: temporary)")
    parser.add_argument("--json", type=Path, help="write the run's result here")
    parser.add_argument("--judge", type=Path, help="report the run saved in this folder again")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        data = args.data or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        result = (
            Run.load(args.judge)
            if args.judge
            else run(
                data,
                per_version=args.producers_per_version,
                rate=args.rate,
                many=args.many,
                many_rate=args.many_rate,
                faults=[f for f in args.faults.split(",") if f],
                fault_s=args.fault_s,
                gap_s=args.gap_s,
                brokers=args.brokers,
            )
        )
        print(report(result))
        if args.json:
            table = rows(result)
            g = goals(table)
            args.json.write_text(
                json.dumps(
                    {
                        "rows": [asdict(r) for r in table],
                        "delays": [asdict(d) for d in delays(result)],
                        "goals": {
                            "worse": g.worse,
                            "worse_overall": g.worse_overall,
                            "many_sick": g.many_sick,
                            "many_reduction": g.many_reduction,
                        },
                        "job": result.job,
                        "faults": [asdict(f) for f in result.faults],
                    },
                    indent=1,
                )
            )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
