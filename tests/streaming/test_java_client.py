"""faultline's Java client (``java/client``, ``io.faultline:faultline-rocketmq``) on a real RocketMQ
and a real Kafka: real producers of the 4.7.1, 4.9.7 and 5.3.3 clients (one JVM each, the test
harness's ``Driver``) and a rocketmq-spring-boot-starter application follow the decisions this
test publishes to a decisions topic, as the job publishes them (``streaming.job.sink
.decision_messages``). What each producer's own fault table holds (read by reflection) and where
its sends go are the judges.

Each harness JVM has four producers, all with ``sendLatencyFaultEnable`` on: ``follow`` follows
the topic, ``plain`` does not, ``absent`` follows a Kafka that is not there, ``own`` follows the
topic and is isolated by its own strategy in one test. One testbed (a NameServer and two brokers)
and one decisions topic serve every test."""

from __future__ import annotations

import json
import signal
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer

from streaming.job.publish import Publisher, ensure_decisions_topic
from streaming.job.sink import decision_messages
from streaming.sim import java_client, rocketmq
from streaming.sim.java_client import Driver
from streaming.sim.kafka_broker import KafkaBroker, free_port
from udfs.parse import parse
from udfs.vocabulary import TableName

pytestmark = pytest.mark.jvm
PROFILES = ("rocketmq-4.7", "rocketmq-4.9", "rocketmq-5")
A, B = "broker-a", "broker-b"
CLUSTER = rocketmq.CLUSTER
ROUND = 16
"""Sends that reach every queue twice (two brokers of four queues) when nothing is held."""
PATIENT = {"waitTimeMillsInSendQueue": "3000", "osPageCacheBusyTimeOutMills": "3000"}
"""The testbed's brokers take a send that waited up to 3 s in their queue (RocketMQ's default:
200 ms, then ``[TIMEOUT_CLEAN_QUEUE]broker busy``, which a SYNC send does not retry): these tests
are about where sends go, and share two cores with the rest of the suite."""
T = TypeVar("T")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Rig:
    bed: rocketmq.Testbed
    kafka: KafkaBroker
    topic: str
    publisher: Publisher
    drivers: dict[str, Driver]
    spring: Driver
    standing: dict[str, int] = field(default_factory=dict)
    """What the fixture published before the producers started: each broker's ``available_from``."""
    measured: dict[str, Any] = field(default_factory=dict)

    def publish(
        self,
        broker: str,
        decision: str,
        effective_at: int | None = None,
        available_from: int | None = None,
        share: float | None = None,
        cluster: str = CLUSTER,
    ) -> dict[str, Any]:
        """One ``broker_decisions`` row of the cluster scope onto the topic, as the job sends it."""
        at = now_ms() if effective_at is None else effective_at
        row: dict[str, Any] = {
            "scope": "cluster",
            "scope_key": cluster,
            "cluster": cluster,
            "broker_name": broker,
            "decision": decision,
            "effective_at": at,
            "available_from": at if available_from is None else available_from,
            "reason": "test_java_client",
            "cause_event_id": f"e-{uuid.uuid4().hex[:8]}",
            "profile": "rocketmq-5",
        }
        rows: dict[str, list[dict[str, Any]]] = {
            TableName.BROKER_DECISIONS: [row],
            TableName.ROUTING_TABLE: [],
        }
        self.publisher.deliver(decision_messages(rows, self.topic, share))
        return row

    def followers(self, spring: bool = False) -> dict[str, tuple[Driver, str]]:
        """Each JVM's following producer: name -> (driver, producer id)."""
        out = {p: (self.drivers[p], "follow") for p in PROFILES}
        if spring:
            out["spring"] = (self.spring, "spring")
        return out

    def release(self, *names: str) -> None:
        """Restore the brokers ``names`` and wait until no follower holds them (the ``own``
        producers may still hold them themselves)."""
        for broker in names:
            self.publish(broker, "RESTORE")
        targets = self.followers(spring=True)
        for broker in names:
            for name, (d, pid) in targets.items():
                let_go = f"{name} lets {broker} go"
                wait(partial(available, d, pid, broker), let_go)

    def owners(self) -> dict[str, tuple[Driver, str]]:
        return {f"{p} own": (self.drivers[p], "own") for p in PROFILES}


def each(targets: dict[str, tuple[Driver, str]], fn: Callable[[Driver, str], T]) -> dict[str, T]:
    """``fn(driver, producer id)`` for every target at once, a thread each (a JVM answers its
    targets one command at a time)."""
    with ThreadPoolExecutor(len(targets)) as pool:
        futures = {name: pool.submit(fn, d, pid) for name, (d, pid) in targets.items()}
        return {name: f.result() for name, f in futures.items()}


def wait(condition: Callable[[], bool], what: str, limit: float = 20.0) -> float:
    """Until ``condition``; the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > limit:
            raise AssertionError(f"not within {limit:g} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def table(d: Driver, pid: str) -> dict[str, int]:
    """The producer's own fault table: broker -> the time its item is available again."""
    return {b: int(i["available_from"]) for b, i in d.ask("table", id=pid)["items"].items()}


def held_until(d: Driver, pid: str, broker: str) -> int:
    """When the producer's table has ``broker`` back (0 when available now)."""
    answer = d.ask("table", id=pid)
    start = answer["items"].get(broker, {}).get("available_from", 0)
    return int(start) if start > answer["now"] else 0


def available(d: Driver, pid: str, broker: str) -> bool:
    return held_until(d, pid, broker) == 0


def holds_exactly(d: Driver, pid: str, broker: str, until: int) -> bool:
    return table(d, pid).get(broker) == until


def decided_over(d: Driver, pid: str, broker: str) -> bool:
    """The follower's decision about ``broker`` holds nothing any more, nor does the table."""
    held = int(d.ask("view", id=pid)["decisions"][broker]["held_until"])
    return held < now_ms() and available(d, pid, broker)


def caught_up(d: Driver, pid: str) -> bool:
    return bool(d.ask("view", id=pid)["caught_up"])


def sends(d: Driver, pid: str, count: int = ROUND, interval_ms: int = 0) -> dict[str, Any]:
    answer = d.ask("send", id=pid, count=count, interval_ms=interval_ms, timeout=120)
    assert answer["errors"] == [None] * count, answer["errors"]
    return answer


def warm_up(d: Driver, pid: str, rounds: int = 5) -> int:
    """Rounds of 20 sends until one has no error; the sends that failed before it. A producer's
    first send also loads the client's classes, fetches the route and connects, and on a busy
    machine that can outlast RocketMQ's 3 s send timeout (``sendDefaultImpl call timeout``):
    not what these tests are about."""
    failed = 0
    for _ in range(rounds):
        errors = d.ask("send", id=pid, count=20, timeout=120)["errors"]
        if not any(errors):
            return failed
        failed += sum(e is not None for e in errors)
    raise AssertionError(f"{d.name} {pid}: {failed} of {20 * rounds} warm-up sends failed")


def brokers(d: Driver, pid: str, count: int = ROUND, interval_ms: int = 0) -> list[str]:
    return list(sends(d, pid, count, interval_ms)["brokers"])


def takes_sends_again(
    routed: dict[str, list[str]],
    broker: str,
    rig: Rig,
    own: dict[str, tuple[Driver, str]] | None = None,
) -> None:
    """Every producer sent ``broker`` at least a quarter of its sends: round robin over both
    brokers' queues sends it half when neither is held and the route stays (a broker the
    NameServer dropped for a moment, on a busy machine, takes fewer); the fault tables, if not.
    Producers that do not follow faultline (``own``) may hold the broker themselves: one that
    timed out on a busy machine isolates it by its own rule, which is not faultline's."""
    few = {n: "".join(b[-1] for b in sent) for n, sent in routed.items()}
    few = {n: seq for n, seq in few.items() if seq.count(broker[-1]) < len(seq) // 4}
    targets = own or rig.followers(spring=True)
    tables = {n: targets[n][0].ask("table", id=targets[n][1]) for n in few if n in targets}
    if own is not None:  # the producer's own isolation explains it
        few = {
            n: seq for n, seq in few.items()
            if tables[n]["items"].get(broker, {}).get("available_from", 0) <= tables[n]["now"]
        }  # fmt: skip
    if few:
        raise AssertionError(f"too few sends to {broker}: {few}; tables {tables}")


def ms(latencies_us: list[int], q: float) -> float:
    ordered = sorted(latencies_us)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


@pytest.fixture(scope="module")
def rig(broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    folder = tmp_path_factory.mktemp("java-client")
    started = time.monotonic()
    java_client.client_jars()  # mvn -Pharness package (with the module's JUnit tests), once
    built = time.monotonic() - started
    topic = f"faultline.decisions.java-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": broker.bootstrap}
    ensure_decisions_topic(conf, topic)
    publisher = Publisher(conf)
    with rocketmq.testbed(folder / "testbed", brokers=2, settings=PATIENT) as bed:
        drivers: dict[str, Driver] = {}
        spring: Driver | None = None
        rig = Rig(bed, broker, topic, publisher, drivers, None)  # type: ignore[arg-type]
        try:
            # the topic's state before any producer starts: broker-a isolated for two minutes,
            # an isolation of broker-b that ended while no one read (no RESTORE followed), and
            # another cluster's broker-b isolated
            now = now_ms()
            rig.standing[A] = rig.publish(A, "ISOLATE", now - 1_000, now + 120_000)[
                "available_from"
            ]
            rig.standing[B] = rig.publish(B, "ISOLATE", now - 60_000, now - 50_000)[
                "available_from"
            ]
            rig.publish(B, "ISOLATE", now - 1_000, now + 120_000, cluster="OtherCluster")
            for profile in PROFILES:
                drivers[profile] = java_client.driver(bed, profile, folder / profile, topic)
            spring = java_client.spring_driver(
                bed,
                folder / "spring",
                {
                    "faultline.kafka.bootstrap-servers": broker.bootstrap,
                    "faultline.decisions-topic": topic,
                    "faultline.cluster": CLUSTER,
                    "faultline.report.topic": f"{topic}-results",
                },
            )
            rig.spring = spring
            absent = f"127.0.0.1:{free_port()}"
            for d in [*drivers.values(), spring]:
                d.wait_ready()
            for d in drivers.values():
                d.ask("start", id="follow", kafka=broker.bootstrap)
                d.ask("start", id="plain")
                rig.measured[f"{d.name} absent start us"] = d.ask(
                    "start", id="absent", kafka=absent
                )["follower_start_us"]
                d.ask("start", id="own", kafka=broker.bootstrap)
            # every producer learns its route and loads its classes before anything is measured
            targets = {
                f"{d.name} {pid}": (d, pid)
                for d in drivers.values()
                for pid in ("follow", "plain", "absent", "own")
            }
            targets["spring"] = (spring, "spring")
            failed = {n: f for n, f in each(targets, warm_up).items() if f}
            rig.measured["warm-up sends failed"] = failed
            for d in {targets[n][0].name: targets[n][0] for n in failed}.values():
                d.ask("clear")  # what the failed sends left in the tables (followers hold again)
            for name, (d, pid) in {**rig.followers(spring=True), **rig.owners()}.items():
                wait(partial(caught_up, d, pid), f"{name} catches up")
            rig.measured["build s"] = round(built, 1)
            rig.measured["setup s"] = round(time.monotonic() - started, 1)
            yield rig
        finally:
            for d in [*drivers.values(), *([spring] if spring else [])]:
                d.close()
            publisher.close()
            (folder / "measured.json").write_text(json.dumps(rig.measured, indent=1))
            print("java client:", json.dumps(rig.measured))


def test_a_follower_starts_from_the_topic_latest_state(rig: Rig) -> None:
    """What the topic held before the producers started: an isolation in force is held until its
    own end, exactly (read while catching up, it is not lengthened); one that ended is not
    revived; another cluster's is not this cluster's."""
    targets = {**rig.followers(spring=True), **rig.owners()}
    for name, (d, pid) in targets.items():
        wait(partial(holds_exactly, d, pid, A, rig.standing[A]), f"{name} holds {A}")
        assert available(d, pid, B), name
        view = d.ask("view", id=pid)["decisions"]
        assert view[A]["live"] is False and view[A]["held_until"] == rig.standing[A]
        assert view[B]["available"] is True and view[B]["held_until"] == rig.standing[B]
    routed = each(targets, brokers)
    assert all(A not in sent for sent in routed.values()), routed
    alone = {p: (rig.drivers[p], "plain") for p in PROFILES}
    takes_sends_again(each(alone, brokers), A, rig, alone)  # broker-a itself is fine
    rig.release(A)


def test_an_isolated_broker_gets_no_sends_until_faultline_restores_it(rig: Rig) -> None:
    rig.release(A, B)
    followers = rig.followers()
    until = rig.publish(B, "ISOLATE", available_from=now_ms() + 60_000)["available_from"]
    took = each(followers, lambda d, pid: wait(lambda: held_until(d, pid, B) >= until, "held"))
    rig.measured["isolation applied s"] = {k: round(v, 2) for k, v in took.items()}
    assert all(held_until(d, pid, B) <= until + 2_000 for d, pid in followers.values())
    routed = each(followers, brokers)
    assert all(sent == [A] * ROUND for sent in routed.values()), routed
    plain = each({p: (rig.drivers[p], "plain") for p in PROFILES}, brokers)
    assert all(B in sent for sent in plain.values()), plain  # the testbed's broker-b is fine

    rig.publish(B, "RESTORE")
    took = each(followers, lambda d, pid: wait(lambda: available(d, pid, B), "restored"))
    rig.measured["restore applied s"] = {k: round(v, 2) for k, v in took.items()}
    routed = each(followers, brokers)
    takes_sends_again(routed, B, rig)


def test_an_isolation_not_heard_of_again_ends_when_it_said(rig: Rig) -> None:
    """No RESTORE comes: the isolation holds until its end (an EXTEND renews it), then the
    producer has the broker back."""
    rig.release(A, B)
    followers = rig.followers()
    start = now_ms()
    rig.publish(A, "ISOLATE", start, start + 2_500)
    each(followers, lambda d, pid: wait(lambda: held_until(d, pid, A) >= start + 2_500, "held"))
    time.sleep(max(0.0, (start + 1_000 - now_ms()) / 1000))
    extended = rig.publish(A, "EXTEND", start + 1_000, start + 4_000)["available_from"]
    each(followers, lambda d, pid: wait(lambda: held_until(d, pid, A) >= extended, "extended"))
    time.sleep(max(0.0, (start + 2_800 - now_ms()) / 1000))  # past the first end
    routed = each(followers, brokers)
    assert all(A not in sent for sent in routed.values()), routed
    # read live, an isolation lasts at least its duration from when it was read
    each(followers, lambda d, pid: wait(lambda: available(d, pid, A), "expired", limit=10))
    assert now_ms() < extended + 2_000
    routed = each(followers, brokers)
    takes_sends_again(routed, A, rig)


def test_a_broker_on_probation_takes_about_its_share_of_the_sends(rig: Rig) -> None:
    """``PROBE`` with a share of 0.25: the follower opens the broker for a quarter of each second
    and holds it for the rest, so it takes about a quarter of what it would (half the sends)."""
    rig.release(A, B)
    followers = rig.followers()
    start = now_ms()
    rig.publish(A, "PROBE", start, start + 5_000, share=0.25)

    def probation(d: Driver, pid: str) -> tuple[int, int]:
        wait(lambda: d.ask("view", id=pid)["decisions"][A]["state"] == "PROBING", "read")
        decision = d.ask("view", id=pid)["decisions"][A]
        return int(decision["seen_at"]), int(decision["held_until"])

    windows = each(followers, probation)
    answers = each(followers, lambda d, pid: sends(d, pid, 200, interval_ms=10))
    shares = {}
    for name, answer in answers.items():
        seen, until = windows[name]
        sent = zip(answer["brokers"], answer["at_ms"], strict=True)
        during = [b for b, at in sent if seen <= at < until]
        assert len(during) >= 40, (name, len(during))  # (a busy machine sends slowly)
        shares[name] = during.count(A) / len(during)
    rig.measured["probing share of sends"] = {k: round(v, 3) for k, v in shares.items()}
    # a busy machine wakes the follower late at each closing: the open part stretches a little
    assert all(0.03 <= s <= 0.35 for s in shares.values()), shares
    # (the table shows the broker available in each open part: wait for the probation's end)
    each(followers, lambda d, pid: wait(lambda: decided_over(d, pid, A), "probation over", 10))
    routed = each(followers, brokers)
    takes_sends_again(routed, A, rig)


def test_the_producers_own_isolation_outlasts_faultlines_restore(rig: Rig) -> None:
    """Own + faultline: the producer's own isolation of a broker (4.x: 10 minutes, 5.x: 10 s
    after a failure) is neither shortened by faultline's shorter one nor ended by its RESTORE."""
    rig.release(A, B)
    owners = rig.owners()
    own = each(
        owners, lambda d, pid: int(d.ask("own", id=pid, broker=B)["items"][B]["available_from"])
    )
    rig.publish(B, "ISOLATE", available_from=now_ms() + 2_000)
    rig.publish(B, "RESTORE")
    each(
        owners,
        lambda d, pid: wait(
            lambda: d.ask("view", id=pid)["decisions"][B]["state"] == "AVAILABLE", "read"
        ),
    )
    time.sleep(0.3)  # a few of the follower's rounds
    assert each(owners, lambda d, pid: table(d, pid)[B]) == own
    routed = each(owners, brokers)
    assert all(B not in sent for sent in routed.values()), routed


def test_a_dead_kafka_leaves_the_producer_as_it_would_be_without_faultline(rig: Rig) -> None:
    """Kafka frozen: sends take as long as with Kafka up and never fail, the isolation read before
    ends when it said and the producer then sends to that broker as one without faultline does;
    a follower whose Kafka was never there changes nothing; once Kafka is back the follower
    reads on."""
    rig.release(A, B)
    followers = rig.followers()

    def timing(d: Driver, pid: str) -> dict[str, list[int]]:
        """200 sends of each producer of the JVM, 50 at a time in turn (none goes first)."""
        runs: dict[str, list[int]] = {"follow": [], "plain": [], "absent": []}
        for _ in range(4):
            for p, taken in runs.items():
                taken.extend(sends(d, p, 50)["latency_us"])
        return runs

    alive = each(followers, timing)
    start = now_ms()
    until = rig.publish(A, "ISOLATE", start, start + 5_000)["available_from"]
    each(followers, lambda d, pid: wait(lambda: held_until(d, pid, A) >= until, "held"))
    rig.kafka.signal(signal.SIGSTOP)
    try:
        during = each(followers, brokers)
        assert now_ms() < until
        assert all(A not in sent for sent in during.values()), during
        frozen = each(followers, timing)
        each(followers, lambda d, pid: wait(lambda: available(d, pid, A), "expired", limit=10))
        after = each(followers, brokers)
        takes_sends_again(after, A, rig)
    finally:
        rig.kafka.signal(signal.SIGCONT)
    figures = {}
    for name in followers:
        figures[name] = {
            f"{when} {pid} p50/p99 ms": (ms(runs[name][pid], 0.5), ms(runs[name][pid], 0.99))
            for when, runs in (("alive", alive), ("frozen", frozen))
            for pid in ("follow", "plain", "absent")
        }
        for when, runs in (("alive", alive), ("frozen", frozen)):
            plain = statistics.median(runs[name]["plain"]) / 1000
            for pid in ("follow", "absent"):
                mine = runs[name][pid]
                assert statistics.median(mine) / 1000 <= 2 * plain + 1.0, (name, when, pid, figures)
                assert max(mine) < 1_000_000, (name, when, pid, max(mine))  # never blocked
    rig.measured["send latency"] = figures
    assert all(rig.measured[f"{p} absent start us"] < 200_000 for p in PROFILES), rig.measured
    # back: the followers read on
    until = rig.publish(B, "ISOLATE", available_from=now_ms() + 60_000)["available_from"]
    took = each(
        followers, lambda d, pid: wait(lambda: held_until(d, pid, B) >= until, "read on", 60)
    )
    rig.measured["after the outage, applied s"] = {k: round(v, 2) for k, v in took.items()}
    rig.release(B)


def test_a_spring_boot_application_follows_with_one_property(rig: Rig) -> None:
    """rocketmq-spring-boot-starter's producer, sending through RocketMQTemplate, with
    ``faultline.kafka.bootstrap-servers`` set: the auto-configuration turned its latency fault
    switch on, registered the application's SendMessageHook bean, the producer follows, and its
    sends are reported to the job's topic (``faultline.report.topic``), every one covered, in
    records the job's parser takes."""
    rig.release(A, B)
    d = rig.spring
    assert d.ask("table", id="spring")["latency_fault"] is True
    until = rig.publish(B, "ISOLATE", available_from=now_ms() + 60_000)["available_from"]
    wait(lambda: held_until(d, "spring", B) >= until, "the Spring producer holds broker-b")
    assert brokers(d, "spring") == [A] * ROUND
    hooks = d.ask("hooks", id="spring")
    assert hooks["producer_is_the_bean"] is True
    assert hooks["after"] >= ROUND
    rig.publish(B, "RESTORE")
    wait(lambda: available(d, "spring", B), "the Spring producer has broker-b back")
    takes_sends_again({"spring": brokers(d, "spring")}, B, rig)
    # and its sends reach the job: every attempt, in full or in the summaries of its 10 s windows
    sent = d.ask("hooks", id="spring")["after"]
    values: list[bytes] = []
    consumer = Consumer({"bootstrap.servers": rig.kafka.bootstrap, "group.id": "spring-results",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([f"{rig.topic}-results"])

    def covered() -> int:
        for m in consumer.consume(1000, 0.5):
            if m.error() is None and (value := m.value()) is not None:
                values.append(value)
        return sum(json.loads(v).get("messages", 1) for v in values)

    try:
        wait(lambda: covered() >= sent, f"the Spring producer's {sent} sends reported", 40)
    finally:
        consumer.close()
    events = parse(values, ["spring"] * len(values), [None] * len(values)).to_pandas()
    assert events["reason_code"].isna().all(), events["reason"].dropna().tolist()[:3]
    assert set(events["producer_group"]) == {"faultline-spring"}
    assert set(events["client_profile"]) == {"rocketmq-5"}  # the starter's client, 5.3.2
    assert set(events["kind"]) <= {"send_result", "send_summary"}
