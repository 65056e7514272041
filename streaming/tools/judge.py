"""The real RocketMQ client as faultline's judge: what real producers did and held during real
faults on the testbed (``streaming.sim.rocketmq``), held against what faultline wrote from their
send results.

For every producer (one client version, SYNC or ASYNC, ``sendLatencyFaultEnable`` on or off):

* **fault table**: before every send the producer's own fault table was read (``tables.jsonl``);
  faultline's producer scope at that instant (its last ``fault_items`` row per broker with an
  ``event_time`` not after the read) must hold the same brokers, the same latency and the same
  not-available-until, within :data:`TOLERANCE_MS`;
* **retries**: each retry the hook saw went to the broker faultline's ``routing_decisions`` chose
  for the attempt before it;
* **queue swaps**: the positions of the producer's own queue list that RocketMQ 4.x rewrote to
  another broker, against faultline's ``QUEUE_SWAP`` rows (``report_queue_swaps``);
* **cluster isolations**: every broker a real producer isolated is isolated by faultline's
  cluster scope no later than the first producer did.

Then, on the quiet cluster, transactional producers and a push consumer that asks for retries:
each half message's checks and end against faultline's ``transactions`` (:func:`judge_checks`),
each retry the broker delivered to ``%RETRY%`` and each message in its ``%DLQ%`` against
``redeliveries`` (:func:`judge_retries`).

``python -m streaming.tools.judge --data DIR`` runs the whole matrix on a fresh testbed (a
producer of every client version and mode through every kind of fault) and prints the table of
docs/real-rocketmq.md.
"""

from __future__ import annotations

import argparse
import bisect
import json
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streaming.sim import rocketmq

POLL_MS = 1_000
"""How often the producers ask the NameServer for routes (``pollNameServerInterval``): a producer
may hold a route up to this long before or after the run's route events show it."""
TOLERANCE_MS = 15
"""How far apart faultline's times and the real client's may be. faultline takes an attempt's time
from the hook's After; the client reads its own clock once more, after the hook, when it updates
its fault table (``updateFaultItem``), and measures the latency from just before the hook's Before
to just after its After: both reads are the same millisecond clock a few statements apart, so they
differ by 0-1 ms, more only when the JVM is paused between them (a GC, the scheduler on 2 busy
cores: 6 ms once, with the whole suite running). A larger gap is reported, not hidden; a latency
that crosses one of RocketMQ's steps shows as a gap of seconds in ``available_from``."""


@dataclass
class Record:
    """What one producer recorded (``java/probe``)."""

    producer_id: str
    events: list[dict[str, Any]]
    tables: list[dict[str, Any]]
    sends: list[dict[str, Any]]

    @classmethod
    def load(cls, folder: Path) -> Record:
        def lines(name: str) -> list[dict[str, Any]]:
            path = folder / f"{name}.jsonl"
            return [json.loads(x) for x in path.read_text().splitlines() if x]

        tables = lines("tables")
        return cls(tables[0]["producer_id"], lines("events"), tables, lines("sends"))

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == "send_result"]

    def setting(self, key: str) -> Any:
        return next((e[key] for e in self.attempts if key in e), None)


EXPLAINED = {
    "first-send": "the JVM's first send to a broker: RocketMQ's clock starts before the hook's "
    "Before, and the client loads classes in between (tens of ms, once)",
    "index": "a retry that went on round-robin from the queue that failed while faultline's index "
    "pointed elsewhere (the failed queue was not one place in the producer's list)",
    "route-change": "the route changed during the send (a broker left or came back): the "
    "failed queue is not where faultline's list has it, so no index follows from it",
    "5.x-reset": "5.x draws a SYNC retry's index afresh at random (resetIndex): the client's "
    "broker passed the same filter as faultline's seeded draw (available, not the one that "
    "failed)",
    "clock-bracket": "the client's latency is the longer, and the time it is available again later "
    "by no more than that, in the same band: its clock reads bracket the hook's, so a pause of its "
    "JVM between them (GC, JIT, the scheduler on 2 busy cores) lengthens only its own",
    "async-order": "ASYNC, the isolation the same, another latency: the client times a request "
    "from its own start to its answer (the hook from the send's dispatch to the callback), and "
    "the callbacks of sends in flight together update the table in their own order, after the "
    "hook that gave faultline the event",
    "4.x-selection": "RocketMQ 4.x's selection removed the broker from the fault table "
    "(pickOneAtLeast picked it while every broker was isolated, and the route no longer had it); "
    "faultline runs the selection only for retries",
    "async-dispatch": "an ASYNC send to the broker was out: the client updated its table when the "
    "send left (its dispatch report, latency about 0); faultline applies that report at the "
    "send's result, just before it: stamped earlier, it could land behind rows an earlier batch "
    "wrote, and the tables would depend on where batches are cut",
    "async-retry": "an ASYNC send that failed and was retried inside the client's callback: "
    "the client updated its table for each attempt, no hook saw the retries, and the callback's "
    "hook reports the first attempt's queue with the whole send's time",
}
"""Each kind of difference that has a cause outside faultline's rules, and that cause."""


@dataclass
class Difference:
    """Consecutive reads of one broker that disagree the same way."""

    kind: str  # a key of EXPLAINED, or "unexplained"
    broker: str
    first_at: int
    last_at: int
    reads: int
    example: str

    def __str__(self) -> str:
        span = (
            f"{_when(self.first_at)}-{_when(self.last_at)}"
            if self.reads > 1
            else _when(self.first_at)
        )
        return f"{span} {self.broker} ({self.reads} reads, {self.kind}): {self.example}"


@dataclass
class Verdict:
    """One producer's comparison."""

    producer_id: str
    profile: str
    mode: str
    latency_fault: bool
    sends: int = 0
    attempts: int = 0
    items: int = 0
    item_differences: list[Difference] = field(default_factory=list)
    largest_gap_ms: int = 0
    """The largest gap within the tolerance."""
    retries: int = 0
    retry_differences: list[str] = field(default_factory=list)
    retry_explained: list[str] = field(default_factory=list)
    """Retries to another broker than faultline's, each to the one RocketMQ's round-robin gives
    from the failed queue (``index`` of :data:`EXPLAINED`)."""
    swaps: int = 0
    swaps_reported: int = 0
    isolated: dict[str, int] = field(default_factory=dict)
    """Broker: when this producer first isolated it (the time of the attempt that did)."""

    def unexplained(self) -> list[str]:
        return [str(d) for d in self.item_differences if d.kind == "unexplained"] + list(
            self.retry_differences
        )


@dataclass
class Tables:
    """faultline's rows, as read from its Delta tables."""

    fault_items: list[dict[str, Any]]
    routing_decisions: list[dict[str, Any]]
    broker_decisions: list[dict[str, Any]]
    transactions: list[dict[str, Any]]
    schedule_entries: list[dict[str, Any]]
    redeliveries: list[dict[str, Any]]
    clock: int
    """faultline's clock at the end of the run: its latest event."""

    @classmethod
    def read(cls, output: Path) -> Tables:
        from deltalake import DeltaTable

        def rows(name: str) -> list[dict[str, Any]]:
            return DeltaTable(str(output / name)).to_pandas().to_dict("records")  # type: ignore[return-value]

        return cls(
            rows("fault_items"),
            rows("routing_decisions"),
            rows("broker_decisions"),
            rows("transactions"),
            rows("schedule_entries"),
            rows("redeliveries"),
            max(int(r["clock"]) for r in rows("batches")),
        )


def judge(record: Record, tables: Tables, routes: list[dict[str, Any]]) -> Verdict:
    """``record`` against faultline's ``tables``; ``routes`` are the run's route events."""
    attempts = record.attempts
    verdict = Verdict(
        record.producer_id,
        str(record.setting("client_profile")),
        str(record.setting("mode")),
        bool(record.setting("latency_fault_enable")),
        sends=len(record.sends),
        attempts=len(attempts),
    )
    _fault_tables(record, tables, routes, verdict)
    _retries(record, tables, routes, verdict)
    _swaps(record, tables, verdict)
    return verdict


def _fault_tables(
    record: Record, tables: Tables, routes: list[dict[str, Any]], verdict: Verdict
) -> None:
    rows = sorted(
        (
            r
            for r in tables.fault_items
            if r["scope"] == "producer" and r["scope_key"] == record.producer_id
        ),
        key=lambda r: (r["event_time"], r["event_id"]),
    )
    times = [int(r["event_time"]) for r in rows]
    first_attempt: dict[str, str] = {}
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    by_broker: dict[str, list[int]] = defaultdict(list)
    for e in record.attempts:
        first_attempt.setdefault(e["broker_name"], e["event_id"])
        by_broker[e["broker_name"]].append(int(e["event_time"]))
        spans[e["broker_name"]].append(
            (int(e["event_time"]) - int(e["latency_ms"]), int(e["event_time"]))
        )
    route_times = [int(r["event_time"]) for r in routes]
    open_: dict[str, Difference] = {}
    bracketed: dict[str, tuple[int, int]] = {}  # broker: the times a clock-bracket explained
    for snapshot in record.tables:
        at = int(snapshot["at"])
        held: dict[str, dict[str, Any]] = {}
        for r in rows[: bisect.bisect_right(times, at)]:
            held[r["broker_name"]] = r
        real = {i["broker_name"]: i for i in snapshot["items"]}
        # a producer holds a route up to POLL_MS before or after the route events show it
        in_route = set.intersection(
            *(_in_route(routes, route_times, t) for t in (at - POLL_MS, at, at + POLL_MS))
        )
        for broker in sorted(set(real) | set(held)):
            verdict.items += 1
            mine, theirs = held.get(broker), real.get(broker)
            kind, example = "", ""
            if mine is None or theirs is None:
                example = (
                    f"the client {'holds' if theirs else 'lacks'} an item, faultline "
                    f"{'holds' if mine else 'lacks'} one"
                )
                gone = theirs is None and broker not in in_route
                if gone and verdict.profile != "rocketmq-5":
                    kind = "4.x-selection"
                elif mine is None and verdict.mode == "ASYNC":
                    flying = _in_flight(spans[broker], at)
                    kind = "async-dispatch" if flying else "async-retry"
                else:
                    kind = "unexplained"
            else:
                gaps = (
                    abs(int(mine["latency_ms"]) - int(theirs["latency_ms"])),
                    abs(int(mine["available_from"]) - int(theirs["available_from"])),
                )
                if max(gaps) <= TOLERANCE_MS:
                    verdict.largest_gap_ms = max(verdict.largest_gap_ms, *gaps)
                else:
                    example = (
                        f"client {theirs['latency_ms']} ms, available from "
                        f"{_when(theirs['available_from'])}; faultline {mine['latency_ms']} ms, "
                        f"{_when(mine['available_from'])} (event {mine['event_id']})"
                    )
                    if mine["event_id"] == first_attempt.get(broker):
                        kind = "first-send"
                    elif verdict.mode == "ASYNC":
                        kind = _async_kind(theirs, mine, at, _in_flight(spans[broker], at))
                    elif _bracketed(theirs, mine) or _kept(bracketed.get(broker), theirs, mine):
                        kind = "clock-bracket"
                        bracketed[broker] = _available(theirs, mine)
                    else:
                        kind = "unexplained"
            previous = open_.get(broker)
            if kind and previous is not None and previous.kind == kind:
                previous.last_at, previous.reads = at, previous.reads + 1
            elif kind:
                open_[broker] = Difference(kind, broker, at, at, 1, example)
                verdict.item_differences.append(open_[broker])
            else:
                open_.pop(broker, None)
            if (
                theirs is not None
                and int(theirs["available_from"]) > at
                and (broker not in verdict.isolated)
            ):
                cause = [t for t in by_broker[broker] if t <= at]
                verdict.isolated[broker] = max(cause) if cause else at


def _async_kind(theirs: dict[str, Any], mine: dict[str, Any], at: int, flying: bool) -> str:
    """Why an ASYNC producer's item differs from faultline's (:data:`EXPLAINED`)."""
    if int(theirs["available_from"]) > max(int(mine["available_from"]), at):
        return "async-retry"  # an isolation the client made for an attempt no hook reported
    if int(mine["available_from"]) > max(int(theirs["available_from"]), at):
        return "async-retry"  # a failure's hook named the first attempt's broker, not the last
    if flying:
        return "async-dispatch"  # a send to the broker had left and not come back
    if abs(int(theirs["available_from"]) - int(mine["available_from"])) <= TOLERANCE_MS:
        return "async-order"
    if int(theirs["available_from"]) > int(mine["available_from"]) or mine["outcome"] != "SEND_OK":
        return "async-retry"  # the client updated the broker later than any attempt reported
    if int(mine["available_from"]) > int(theirs["available_from"]):
        return "async-retry"  # an isolation of the first attempt's broker, long over (5.x keeps it)
    return "unexplained"


def _in_flight(spans: list[tuple[int, int]], at: int) -> bool:
    """Whether a send recorded on these (dispatch, result) spans was out at ``at``, or its
    callback still running: the client updates its table after the hook that timed the result
    and after the application's ``onSuccess`` (:data:`CALLBACK_MS`)."""
    return any(start <= at <= end + CALLBACK_MS for start, end in spans)


CALLBACK_MS = 50
"""How long after an ASYNC result's hook the client's update of its table may come: the callback
runs the hook, then the application's ``onSuccess``, then ``updateFaultItem`` (a JVM's first
callbacks are the slowest)."""


def _available(theirs: dict[str, Any], mine: dict[str, Any]) -> tuple[int, int]:
    return int(theirs["available_from"]), int(mine["available_from"])


def _kept(explained: tuple[int, int] | None, theirs: dict[str, Any], mine: dict[str, Any]) -> bool:
    """Both tables still hold times available again that a clock-bracket explained, and the
    latencies agree or the client's is the longer: 5.x changes the time only to extend it
    (``updateNotAvailableDuration``), so a later send below 550 ms (no isolation) replaces the
    latency alone, as when the first send after an isolation ends."""
    longer = int(theirs["latency_ms"]) - int(mine["latency_ms"])
    return explained == _available(theirs, mine) and (abs(longer) <= TOLERANCE_MS or longer > 0)


def _bracketed(theirs: dict[str, Any], mine: dict[str, Any]) -> bool:
    """The client's reads of its clock bracket the hook's: its latency is longer by the pauses
    before the hook's Before and after its After, and its update (hence the time it is available
    again) later by the pause after the After alone, in the same latency band."""
    longer = int(theirs["latency_ms"]) - int(mine["latency_ms"])
    later = int(theirs["available_from"]) - int(mine["available_from"])
    return longer > 0 and -1 <= later <= longer + 1


def _in_route(routes: list[dict[str, Any]], times: list[int], at: int) -> set[str]:
    i = bisect.bisect_right(times, at) - 1
    return {b["broker_name"] for b in routes[i]["brokers"]} if i >= 0 else set()


def _retries(
    record: Record, tables: Tables, routes: list[dict[str, Any]], verdict: Verdict
) -> None:
    chosen = {
        r["event_id"]: r for r in tables.routing_decisions if r["scope_key"] == record.producer_id
    }
    reads = [int(t["at"]) for t in record.tables]
    route_times = [int(r["event_time"]) for r in routes]
    attempts = {e["event_id"]: e for e in record.attempts}
    for e in record.attempts:
        if e["attempt"] == 0 or e["outcome"] == "CALL_TIMEOUT" or e["mode"] != "SYNC":
            continue
        verdict.retries += 1
        before = f"{e['message_id']}-{e['attempt'] - 1}"
        row = chosen.get(before)
        picked = (e["broker_name"], e["queue_id"])
        if row is None:
            verdict.retry_differences.append(
                f"{_when(e['event_time'])} retry {e['event_id']} to {picked[0]}:{picked[1]}: "
                f"faultline made no routing decision for {before}"
            )
        elif row["selected_broker"] != picked[0]:
            read = record.tables[max(0, bisect.bisect_right(reads, int(e["event_time"])) - 1)]
            onward = _round_robin(read, attempts[before], verdict.latency_fault)
            text = (
                f"{_when(e['event_time'])} retry {e['event_id']}: the client sent to "
                f"{picked[0]}:{picked[1]}, faultline chose "
                f"{row['selected_broker']}:{row['selected_queue_id']} ({row['rule']})"
            )
            if onward == f"{picked[0]}:{picked[1]}":
                verdict.retry_explained.append(f"{text} (index)")
            elif e["broker_name"] not in _in_route(routes, route_times, int(e["event_time"])) or (
                attempts[before]["broker_name"]
                not in _in_route(routes, route_times, int(e["event_time"]))
            ):
                verdict.retry_explained.append(f"{text} (route-change)")
            elif verdict.profile == "rocketmq-5" and _passes_5(read, attempts[before], picked[0]):
                verdict.retry_explained.append(f"{text} (5.x-reset)")
            else:
                verdict.retry_differences.append(text)


def _passes_5(read: dict[str, Any], failed: dict[str, Any], broker: str) -> bool:
    """5.x starts a SYNC retry's index afresh at random (``resetIndex``): any queue of another
    broker that the producer's table holds available is RocketMQ's choice as much as any other."""
    held = {i["broker_name"]: int(i["available_from"]) for i in read["items"]}
    return broker != failed["broker_name"] and held.get(broker, 0) <= int(failed["event_time"])


def _round_robin(read: dict[str, Any], failed: dict[str, Any], latency_fault: bool) -> str | None:
    """The queue RocketMQ's round-robin takes after ``failed``: the next of the producer's list
    (as read before the send) on another broker, and one its table holds available when the
    latency fault is on."""
    queues = read.get("queues") or []
    here = f"{failed['broker_name']}:{failed['queue_id']}"
    if here not in queues:
        return None
    now = int(failed["event_time"])
    held = {i["broker_name"]: int(i["available_from"]) for i in read["items"]}
    start = queues.index(here)
    for k in range(1, len(queues) + 1):
        queue = queues[(start + k) % len(queues)]
        broker = queue.split(":")[0]
        if broker != failed["broker_name"] and (not latency_fault or held.get(broker, 0) <= now):
            return str(queue)
    return None


def _swaps(record: Record, tables: Tables, verdict: Verdict) -> None:
    """Real swaps: positions of the producer's queue list whose broker changed between two reads
    while the route stayed the same (a route change rebuilds the list)."""
    previous: list[str] | None = None
    for snapshot in record.tables:
        queues = snapshot.get("queues")
        if queues is None:
            continue
        if previous is not None and len(previous) == len(queues):
            before = sorted({q.split(":")[0] for q in previous})
            after = sorted({q.split(":")[0] for q in queues})
            pristine = all(q == p for q, p in zip(queues, _pristine(queues), strict=True))
            if not pristine or before == after:
                verdict.swaps += sum(
                    1
                    for a, b in zip(previous, queues, strict=True)
                    if a.split(":")[0] != b.split(":")[0]
                    and b != _pristine(queues)[queues.index(b)]
                )
        previous = queues
    verdict.swaps_reported = sum(
        1
        for r in tables.broker_decisions
        if r["decision"] == "QUEUE_SWAP" and r["scope_key"] == record.producer_id
    )


def _pristine(queues: Sequence[str]) -> list[str]:
    """The list a route gives: each broker's write queues 0..n-1, brokers in name order (the
    counts taken from ``queues`` itself, which a swap does not change in length)."""
    per_broker: dict[str, int] = defaultdict(int)
    for q in queues:
        per_broker[q.split(":")[0]] += 1
    return [f"{b}:{i}" for b in sorted(per_broker) for i in range(per_broker[b])]


# --- transactions and consumer retries ---------------------------------------------------------


@dataclass
class Checks:
    """A transactional producer's half messages: the checks its broker sent it against the
    ``CHECK`` rows faultline wrote, and how each message ended."""

    producer_id: str
    profile: str
    transactions: int = 0
    checks: int = 0
    """Checks the producer got (the broker's check-backs)."""
    predicted: int = 0
    """faultline's ``CHECK`` rows for the same messages."""
    largest_gap_ms: int = 0
    ends: dict[str, int] = field(default_factory=dict)
    """faultline's last state of each message, counted."""
    differences: list[str] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)
    """A check more than the broker made, counted at faultline's wake before the answer to the
    last real one reached it (the wake's phase and the rounds' second, :func:`check_drift_ms`)."""


def judge_checks(record: Record, tables: Tables) -> Checks:
    """Each half message's checks and end against faultline's ``transactions`` rows: the same
    end, the same number of checks (the highest ``TRANSACTION_CHECK_TIMES``), and each check
    within :func:`check_drift_ms` of faultline's row for it."""
    verdict = Checks(record.producer_id, str(record.setting("client_profile")))
    real: dict[str, list[tuple[int, int]]] = defaultdict(list)
    ends: dict[str, str] = {}
    for e in record.events:
        if e["kind"] == "transaction_check":
            real[e["transaction_id"]].append((int(e["check_times"]), int(e["event_time"])))
        if e["kind"] in ("transaction_check", "transaction_end") and e["local_state"] != "UNKNOW":
            ends[e["transaction_id"]] = e["local_state"].removesuffix("_MESSAGE")
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in tables.transactions:
        rows[r["transaction_id"]].append(r)
    for e in record.attempts:
        if e.get("transaction") != "PREPARED" or e["outcome"] != "SEND_OK":
            continue
        tx = e["transaction_id"]
        verdict.transactions += 1
        mine = sorted(rows[tx], key=lambda r: (r["effective_at"], r["check_times"]))
        theirs = sorted(real[tx])
        verdict.checks += len(theirs)
        verdict.predicted += sum(1 for r in mine if r["state"] == "CHECK")
        counted = max((int(r["check_times"]) for r in mine), default=0)
        checked = max((k for k, _ in theirs), default=0)
        if counted != checked:
            text = f"{tx}: the broker checked it {checked} times, faultline counts {counted}"
            answered = theirs[-1][1] if theirs else None
            early = [r for r in mine if int(r["check_times"]) > checked]
            if answered is not None and all(int(r["effective_at"]) <= answered for r in early):
                verdict.explained.append(f"{text} (its wake came before the answer)")
            else:
                verdict.differences.append(text)
        for k, at in theirs:
            first = next((r for r in mine if int(r["check_times"]) >= k), None)
            if first is None:
                continue
            gap = at - int(first["effective_at"])
            verdict.largest_gap_ms = max(verdict.largest_gap_ms, abs(gap))
            if abs(gap) > check_drift_ms(k):
                verdict.differences.append(
                    f"{tx}: check {k} reached the producer at {_when(at)}, faultline's row for "
                    f"it is at {_when(first['effective_at'])}"
                )
        settled = [r["state"] for r in mine if r["state"] in SETTLED]
        final = settled[-1] if settled else mine[-1]["state"] if mine else "none"
        verdict.ends[final] = verdict.ends.get(final, 0) + 1
        expected = ends.get(
            tx, "DISCARDED" if len(theirs) >= rocketmq.TRANSACTION_CHECK_MAX else ""
        )
        if final != expected:
            verdict.differences.append(
                f"{tx}: ended {expected or 'unsettled'}, faultline says {final}"
            )
    return verdict


SETTLED = ("COMMIT", "ROLLBACK", "DISCARDED", "SKIPPED")
"""The ``transactions`` states that end a half message (an answer faultline reads after it ended
is a row too)."""
SLEEP_WHILE_NO_OP_MS = 1_000
"""A 5.3.3 broker's check round sleeps this long when a half message's op is not in the op queue
yet (``SLEEP_WHILE_NO_OP``), and its next round begins ``transactionCheckInterval`` after the
round ends: with a message waiting, its checks come every interval plus a second."""


def check_drift_ms(k: int) -> int:
    """How far the producer may get check ``k`` from faultline's row for it. faultline takes the
    check service's wakes on the interval's grid from the epoch; the broker's first wake is set by
    when it started (up to an interval off), each round that finds a missing op lasts a second
    more, and the check then travels to the producer."""
    return rocketmq.TRANSACTION_CHECK_INTERVAL_MS + k * SLEEP_WHILE_NO_OP_MS + 500


@dataclass
class Retries:
    """A push consumer's retries: each message it asked to consume later, where faultline said it
    would come back (``redeliveries``) against when the broker redelivered it or moved it to the
    group's DLQ."""

    group: str
    asked: int = 0
    parked: int = 0
    """Retries found in the broker's ``SCHEDULE_TOPIC_XXXX`` in the queue of faultline's level."""
    redelivered: int = 0
    waiting: int = 0
    """Retries still in faultline's delay queue at its clock's end (due after its last event)."""
    to_dlq: int = 0
    in_dlq: int = 0
    """Messages the broker's ``%DLQ%`` topic holds."""
    largest_gap_ms: int = 0
    levels: dict[int, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)


def judge_retries(folder: Path, tables: Tables) -> Retries:
    """The consumer of ``folder`` (``org.faultline.probe.Consumer``) against faultline's
    ``schedule_entries`` and ``redeliveries``: each retry parked in the broker's
    ``SCHEDULE_TOPIC_XXXX`` in the queue of faultline's level (level - 1), delivered to the
    group's ``%RETRY%`` topic within :data:`REDELIVERY_JITTER_MS` of faultline's ``deliver_at``,
    and each message faultline sends to the DLQ in the broker's ``%DLQ%`` topic, and no other."""

    def lines(name: str) -> list[dict[str, Any]]:
        return [json.loads(x) for x in (folder / f"{name}.jsonl").read_text().splitlines() if x]

    events = [e for e in lines("events") if "key" in e]  # the producers' warm-up has no key
    stored = {(r["key"], int(r["reconsume_times"])): int(r["store_time"]) for r in lines("retry")}
    parked = {
        (r["key"], int(r["reconsume_times"])): int(r["queue_id"])
        for r in lines("schedule")
        if r.get("real_topic") == f"%RETRY%{events[0]['consumer_group'] if events else ''}"
    }
    scheduled = {(r["message_id"], int(r["attempt_count"])): r for r in tables.schedule_entries}
    dlq = {r["key"] for r in lines("dlq")}
    verdict = Retries(str(events[0]["consumer_group"]) if events else "", in_dlq=len(dlq))
    rows = {(r["message_id"], int(r["attempt_count"])): r for r in tables.redeliveries}
    predicted_dlq = set()
    for e in events:
        if e["status"] != "RECONSUME_LATER":
            continue
        verdict.asked += 1
        key, times = e["key"], int(e["reconsume_times"])
        row = rows.get((e["message_id"], times + 1))
        entry = scheduled.get((e["message_id"], times + 1))
        if row is None and entry is not None and int(entry["deliver_at"]) > tables.clock:
            verdict.waiting += 1  # due after faultline's last event: the run ended first
            _parked(verdict, key, times, int(entry["delay_level"]), entry, parked)
        elif row is None:
            verdict.differences.append(f"{key} (retry {times}): faultline redelivers nothing")
        elif row["dlq"]:
            verdict.to_dlq += 1
            predicted_dlq.add(key)
        else:
            verdict.redelivered += 1
            level = int(row["delay_level"])
            verdict.levels[level] = verdict.levels.get(level, 0) + 1
            _parked(verdict, key, times, level, entry, parked)
            at = stored.get((key, times + 1))
            if at is None:
                verdict.differences.append(f"{key} (retry {times}): not in the broker's %RETRY%")
                continue
            gap = at - int(row["deliver_at"])
            verdict.largest_gap_ms = max(verdict.largest_gap_ms, abs(gap))
            if not -REDELIVERY_JITTER_MS <= gap <= REDELIVERY_JITTER_MS:
                verdict.differences.append(
                    f"{key} (retry {times}): the broker delivered it at {_when(at)}, faultline "
                    f"said {_when(row['deliver_at'])} (level {level})"
                )
    for key in sorted(predicted_dlq ^ dlq):
        where = "the broker's DLQ" if key in dlq else "faultline's"
        verdict.differences.append(f"{key}: only in {where}")
    return verdict


def _parked(
    verdict: Retries,
    key: str,
    times: int,
    level: int,
    entry: dict[str, Any] | None,
    parked: dict[tuple[str, int], int],
) -> None:
    """Whether faultline's schedule entry for retry ``times`` of ``key`` and the broker's
    ``SCHEDULE_TOPIC_XXXX`` both hold it in the queue of ``level`` (level - 1)."""
    queue = parked.get((key, times + 1))
    if entry is None or int(entry["schedule_queue_id"]) != level - 1:
        verdict.differences.append(f"{key} (retry {times}): no schedule entry at {level}")
    elif queue != level - 1:
        verdict.differences.append(
            f"{key} (retry {times}): the broker parked it in SCHEDULE_TOPIC_XXXX queue {queue}, "
            f"faultline at level {level}"
        )
    else:
        verdict.parked += 1


REDELIVERY_JITTER_MS = 1_000
"""How far the broker may deliver a retry from faultline's ``deliver_at``: its delay service
scans each level every 100 ms, and faultline takes the retry's store time from the consumer's own
result, which reaches the broker a little later (``sendMessageBack``); 2 busy cores add their
own. (The consumer itself may see a first retry much later: it takes the new ``%RETRY%`` topic's
queues at its next rebalance, every 20 s.)"""


def cluster_isolations(
    verdicts: Iterable[Verdict], tables: Tables
) -> list[tuple[str, int, int | None]]:
    """(broker, when a real SYNC producer first isolated it, when faultline's cluster scope
    isolated it at or before that: None if it did not). ASYNC producers also isolate brokers for
    attempts no hook saw (``async-retry``)."""
    first: dict[str, int] = {}
    for v in verdicts:
        if v.mode != "SYNC":
            continue
        for broker, at in v.isolated.items():
            first[broker] = min(at, first.get(broker, at))
    isolations = defaultdict(list)
    for r in tables.broker_decisions:
        if r["scope"] == "cluster" and r["decision"] in ("ISOLATE", "EXTEND"):
            isolations[r["broker_name"]].append(int(r["effective_at"]))
    out = []
    for broker, at in sorted(first.items()):
        mine = [t for t in isolations[broker] if t <= at]
        out.append((broker, at, max(mine) if mine else None))
    return out


def _when(ms: Any) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(int(ms) / 1000)) + f".{int(ms) % 1000:03d}"


# --- the matrix --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """A fault on one broker between ``start_s`` and ``end_s`` of the producers' run."""

    kind: str  # slow | freeze | kill | unreachable | heartbeat
    broker: str
    start_s: float
    end_s: float


FAULTS = (
    Fault("unreachable", "broker-a", 2, 6),
    Fault("slow", "broker-b", 8, 13),
    Fault("freeze", "broker-c", 15, 19),
    Fault("kill", "broker-a", 21, 26),
    Fault("heartbeat", "broker-b", 28, 46),
)
"""One run's faults, one after the other. A 4.x producer isolates a broker for minutes after its
first fault (600 s after a failure), so each broker's first fault is one a 4.x producer meets;
from 15 s every broker is isolated by them, which exercises 4.x's last-resort selection. 5.x
producers (seconds) and the producer without latency fault meet every fault."""
PRODUCERS = (
    ("rocketmq-4.7", "SYNC", True),
    ("rocketmq-4.7", "ASYNC", True),
    ("rocketmq-4.7", "SYNC", False),
    ("rocketmq-4.9", "SYNC", True),
    ("rocketmq-4.9", "ASYNC", True),
    ("rocketmq-4.9", "SYNC", False),
    ("rocketmq-5", "SYNC", True),
    ("rocketmq-5", "ASYNC", True),
    ("rocketmq-5", "SYNC", False),
)
"""(client profile, mode, sendLatencyFaultEnable) of each producer of a run: each version SYNC
and ASYNC with its latency fault on, and SYNC with it off (ASYNC off holds no table either)."""
SLOW_MS = 700
"""The slow broker's extra latency: above the 550 ms band (4.x: 30 s, 5.x: 2 s)."""


@dataclass
class Run:
    """What :func:`record_run` recorded: each producer's folder, and each fault's start and end
    (epoch ms)."""

    folder: Path
    producers: list[Path]
    faults: dict[Fault, tuple[int, int]]
    transactional: list[Path] = field(default_factory=list)
    """The transactional producers' folders (:data:`TRANSACTIONAL`)."""

    @property
    def consumer(self) -> Path:
        """The consumer's folder (:data:`CONSUMER`)."""
        return self.folder / "consumer"

    @property
    def inputs(self) -> Path:
        """Every event faultline gets: the send results, the routes, the heartbeats."""
        return self.folder / "input"


TRANSACTIONAL = ("rocketmq-4.9", "rocketmq-5")
"""The client versions of the transactional producers (``Transactions`` in ``java/probe``: every
fourth message commits, the next rolls back, the next commits at its first check, the last is
never settled)."""
CONSUMER = ("rocketmq-4.9", "faultline-retry")
"""(client version, group) of the push consumer that asks for retries (``Consumer`` in
``java/probe``)."""


def _record_quiet(bed: Any, run: Run) -> None:
    """Transactional producers and a consumer of their topic, once the faults are over: the
    broker's check-backs, its ``%RETRY%``, ``SCHEDULE_TOPIC_XXXX`` and ``%DLQ%`` traffic."""
    profile, group = CONSUMER
    consumer = rocketmq.consumer(
        bed, profile, group, run.consumer, duration_ms=32_000, topic=rocketmq.TX_TOPIC
    )
    _wait_for(run.consumer / "stdout.log", b"started", consumer.proc)
    time.sleep(2.0)  # its first rebalance takes the topic's queues
    started = []
    for profile in TRANSACTIONAL:
        pid = f"tx-{profile.removeprefix('rocketmq-')}"
        run.transactional.append(run.folder / pid)
        started.append(
            rocketmq.producer(
                bed,
                profile,
                pid,
                run.folder / pid,
                rate=4,
                duration_ms=6_000,
                topic=rocketmq.TX_TOPIC,
                transactions=True,
                linger_ms=12_000,
                group=pid.replace(".", "_") + "-group",  # a group name takes no dot
            )
        )
    for p in [*started, consumer]:
        p.wait()


def _wait_for(log: Path, text: bytes, proc: Any, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not (log.exists() and text in log.read_bytes()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{log.parent.name} did not start; see {log}")
        time.sleep(0.1)


def run_faults(
    bed: Any, faults: Sequence[Fault], start: float, log: Callable[[str], None]
) -> dict[Fault, tuple[int, int]]:
    """Inject ``faults`` on the testbed ``bed``, timed from ``start`` (``time.monotonic``); when
    each began and ended (epoch ms): when its injection and its undoing began, since both can
    take a while (a killed JVM's exit, a restarted broker's start) and what they cause starts
    at once."""
    applied: dict[Fault, list[int]] = defaultdict(list)
    steps: list[tuple[float, str, Fault]] = []
    for f in faults:
        steps += [(f.start_s, "on", f), (f.end_s, "off", f)]
    for at, what, f in sorted(steps, key=lambda s: s[0]):
        time.sleep(max(0.0, start + at - time.monotonic()))
        broker = bed.broker(f.broker)
        log(f"{time.monotonic() - start:6.1f}s {f.kind} {f.broker} {what}")
        applied[f].append(int(time.time() * 1000))
        if f.kind == "slow":
            broker.slow(SLOW_MS if what == "on" else 0)
        elif f.kind == "freeze":
            (broker.freeze if what == "on" else broker.thaw)()
        elif f.kind == "kill":
            (broker.kill if what == "on" else broker.start)()
        elif f.kind == "unreachable":
            broker.unreachable(what == "on")
        elif f.kind == "heartbeat":
            broker.stop_heartbeats(what == "on")
    return {f: (t[0], t[1]) for f, t in applied.items()}


def record_run(
    bed: Any,
    folder: Path,
    producers: Sequence[tuple[str, str, bool]] = PRODUCERS,
    faults: Sequence[Fault] = FAULTS,
    rate: float = 20.0,
    log: Callable[[str], None] = lambda _: None,
) -> Run:
    """Producers sending through ``faults`` on ``bed``."""
    duration_ms = int((max(f.end_s for f in faults) + 4) * 1000)
    folders, started = [], []
    for n, (profile, mode, on) in enumerate(producers):
        pid = f"p{n}-{profile.removeprefix('rocketmq-')}-{mode.lower()}{'' if on else '-off'}"
        folders.append(folder / pid)
        started.append(
            rocketmq.producer(
                bed,
                profile,
                pid,
                folders[-1],
                mode=mode,
                latency_fault=on,
                rate=rate,
                duration_ms=duration_ms,
            )
        )
    deadline = time.monotonic() + 120
    while not all(
        (f / "tables.jsonl").exists() and (f / "tables.jsonl").stat().st_size for f in folders
    ):
        if time.monotonic() > deadline or any(p.proc.poll() is not None for p in started):
            for p in started:
                p.proc.kill()
            raise RuntimeError(f"the producers did not start sending; see {folder}/*/stdout.log")
        time.sleep(0.1)  # the JVMs start, warm up and send before the first fault
    run = Run(folder, folders, run_faults(bed, faults, time.monotonic(), log))
    for p in started:
        p.wait()
    log("transactions and consumer retries, on the quiet cluster")
    _record_quiet(bed, run)
    run.inputs.mkdir(parents=True, exist_ok=True)
    for f in [*folders, *run.transactional, run.consumer]:
        shutil.copy(f / "events.jsonl", run.inputs / f"{f.name}.jsonl")
    for name, events in (("heartbeats", bed.heartbeats), ("routes", bed.routes)):
        with open(run.inputs / f"{name}.jsonl", "w", encoding="utf-8") as out:
            out.writelines(json.dumps(e) + "\n" for e in list(events))
    return run


JOB_FLAGS = (
    "--policies.no-enabled",  # RocketMQ's rules alone: the judge is RocketMQ's own client
    "--heartbeat-timeout",
    f"{rocketmq.HEARTBEAT_TIMEOUT_MS}ms",
    "--scan-interval",
    f"{rocketmq.SCAN_INTERVAL_MS}ms",
    "--policies.report-queue-swaps",
    "--delay-levels",
    rocketmq.DELAY_LEVELS,
    "--transactions.broker-release",
    "5.3.3",
    "--transactions.transaction-timeout",
    f"{rocketmq.TRANSACTION_TIMEOUT_MS}ms",
    "--transactions.check-interval",
    f"{rocketmq.TRANSACTION_CHECK_INTERVAL_MS}ms",
    "--transactions.check-max",
    str(rocketmq.TRANSACTION_CHECK_MAX),
)


def routes(inputs: Path) -> list[dict[str, Any]]:
    """The route events among a run's inputs, in time order."""
    found = [
        e
        for f in sorted(inputs.glob("*.jsonl"))
        for e in map(json.loads, f.read_text().splitlines())
        if e.get("kind") == "route"
    ]
    return sorted(found, key=lambda e: (e["event_time"], e["event_id"]))


def table(verdicts: Sequence[Verdict], isolations: Sequence[tuple[str, int, int | None]]) -> str:
    lines = [
        "| producer | client | mode | latency fault | sends | attempts | table reads compared | "
        "differences | largest gap | retries | retries elsewhere, explained | unexplained | "
        "queue swaps (real / reported) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        lines.append(
            f"| {v.producer_id} | {v.profile} | {v.mode} | {'on' if v.latency_fault else 'off'} "
            f"| {v.sends} | {v.attempts} | {v.items} | {sum(d.reads for d in v.item_differences)} "
            f"| {v.largest_gap_ms} ms | {v.retries} | {len(v.retry_explained)} "
            f"| {len(v.unexplained())} "
            f"| {v.swaps} / {v.swaps_reported} |"
        )
    lines.append("")
    kinds: dict[str, int] = defaultdict(int)
    for v in verdicts:
        for d in v.item_differences:
            kinds[d.kind] += d.reads
    for kind, reads in sorted(kinds.items()):
        lines.append(f"- {kind}: {reads} reads: {EXPLAINED.get(kind, 'not explained')}")
    for broker, real, mine in isolations:
        lead = "not isolated" if mine is None else f"isolated {real - mine} ms before"
        lines.append(
            f"- {broker}: first isolated by a real producer at {_when(real)}; "
            f"faultline's cluster scope {lead}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m streaming.tools.judge", description=__doc__)
    parser.add_argument("--data", type=Path, required=True, help="a folder for the whole run")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument(
        "--recorded", action="store_true", help="judge what an earlier run recorded in --data"
    )
    args = parser.parse_args()
    if args.recorded:
        folders = sorted(f.parent for f in args.data.glob("*/tables.jsonl"))
    else:
        with rocketmq.testbed(args.data / "testbed") as bed:
            run = record_run(bed, args.data, rate=args.rate, log=print)
        folders = [*run.producers, *run.transactional]
    out = args.data / "faultline"
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-m", "streaming.cli", "run", "--source", "files", "--path",
         str(args.data / "input"), "--once", "--output", str(out / "out"), "--checkpoint",
         str(out / "ck"), *JOB_FLAGS],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"faultline run failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    tables = Tables.read(out / "out")
    faulted = [f for f in folders if not f.name.startswith("tx-")]
    verdicts = [judge(Record.load(f), tables, routes(args.data / "input")) for f in faulted]
    print(table(verdicts, cluster_isolations(verdicts, tables)))
    checks = [judge_checks(Record.load(f), tables) for f in folders if f.name.startswith("tx-")]
    retries = judge_retries(args.data / "consumer", tables)
    print(quiet_table(checks, retries))
    for v in verdicts:
        for d in v.item_differences:
            print(f"{v.producer_id}: {d}")
        for r in v.retry_differences + v.retry_explained:
            print(f"{v.producer_id}: {r}")
    for c in checks:
        for text in c.differences:
            print(f"{c.producer_id}: {text}")
    for text in retries.differences:
        print(f"{retries.group}: {text}")


def quiet_table(checks: Sequence[Checks], retries: Retries) -> str:
    lines = [
        "| transactional producer | half messages | checks (broker / faultline) | largest gap "
        "| faultline's ends | a check more, before the answer | differences |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        ends = ", ".join(f"{state} {n}" for state, n in sorted(c.ends.items()))
        lines.append(
            f"| {c.producer_id} ({c.profile}) | {c.transactions} | {c.checks} / {c.predicted} "
            f"| {c.largest_gap_ms} ms | {ends} | {len(c.explained)} | {len(c.differences)} |"
        )
    levels = ", ".join(f"level {k}: {n}" for k, n in sorted(retries.levels.items()))
    lines += [
        "",
        f"- consumer {retries.group}: {retries.asked} consumes asked for a retry; "
        f"{retries.parked} parked in SCHEDULE_TOPIC_XXXX at faultline's level; "
        f"{retries.redelivered} redelivered ({levels}), largest gap {retries.largest_gap_ms} ms; "
        f"{retries.waiting} still waiting at faultline's last event; "
        f"{retries.to_dlq} to the DLQ by faultline, {retries.in_dlq} in the broker's; "
        f"{len(retries.differences)} differences",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
