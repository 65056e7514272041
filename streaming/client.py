"""What a producer embeds: :class:`Reporter` to report its sends and consumes, and the clients
that follow faultline's decisions.

A producer reports after each send attempt and each consume through a :class:`Reporter`
(:class:`KafkaReporter` publishes to the send-results topic): in full what can change a
decision, the rest in summaries (docs/producers/summaries.md).

faultline publishes the cluster scope's decisions to a compacted topic (``faultline.decisions``):
key ``broker/<cluster>/<broker>``, the latest decision about that broker's FaultItem, with
``state`` (``ISOLATED``, ``AVAILABLE`` or ``PROBING``) and ``available_from``; key
``broker-route/<cluster>/<broker>``, whether the NameServer's route has the broker
(``OUT_OF_ROUTE`` or ``AVAILABLE``): the two are independent, and a broker is available only when
neither holds it (:func:`decision_key`); key ``transaction/<cluster>/<id>``, a transactional
message its producer must act on.
:class:`DecisionView` holds them and answers :meth:`~DecisionView.is_available`; :func:`pick`
chooses a queue the way a RocketMQ ``MessageQueueSelector`` would, from the queues the producer
has, skipping the brokers faultline isolates. Neither touches Kafka: :class:`DecisionClient`
keeps a view up to date from the topic with confluent-kafka, in a thread of its own.

    client = DecisionClient("kafka:9092", "faultline.decisions").start()
    queue = pick(queues, start=counter, usable=lambda b: client.is_available("Cluster", b),
                 last_broker=previous_broker)

Times are epoch milliseconds. A producer that has not heard of a broker treats it as available:
faultline only ever narrows the choice, and when it would leave nothing, :func:`pick` falls
back to the queue the producer's own strategy would use.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from udfs.rocketmq import PROFILES, FaultTable, Outcome, SendMode, attempt_effect
from udfs.vocabulary import Decision, ProducerState

Q = TypeVar("Q")


_GOLDEN = 0.6180339887498949


class DecisionView:
    """The decisions a producer has read, per (cluster, broker) and per key
    (:func:`decision_key`: the FaultItem's, the route's), each from the time it was read
    (``seen_at``): :meth:`is_available` at ``now`` uses those read by ``now``.

    An isolation holds until its ``available_from``, and at least for its whole duration
    (``available_from - effective_at``) from when it was read, as a RocketMQ producer isolates a
    broker for the duration from when it sees the failure itself. A decision read late (the
    decision delay, a consumer that lagged) is therefore not over before it is used: a 2 s
    isolation read 2 s after it began would otherwise never keep a send away. A broker on
    probation (``PROBE``, recovery probing) takes the message's ``share`` of the sends, for the
    probation's duration from when it was read."""

    def __init__(self) -> None:
        # per (cluster, broker) and per kind of key (the FaultItem's, the route's): when each
        # message was read, and what it holds
        self._seen: dict[tuple[str, str, str], list[int]] = {}
        self._held: dict[tuple[str, str, str], list[tuple[str, int, float]]] = {}
        self._calls = 0

    def apply(self, decision: dict[str, Any], seen_at: int) -> None:
        """One message of the decision topic (a ``broker_decisions`` row with ``state``), read
        at ``seen_at``. Messages of one broker must come in the order they were read."""
        if decision.get("scope", "cluster") != "cluster" or not decision.get("broker_name"):
            return
        key = (_kind(decision), *_broker(decision))
        state = decision.get("state") or decision_state(str(decision["decision"]))
        held = state in (ProducerState.ISOLATED, ProducerState.PROBING)
        until = held_until(decision, seen_at) if held else 0
        share = float(decision.get("share") or 1.0) if state == ProducerState.PROBING else 1.0
        self._seen.setdefault(key, []).append(seen_at)
        self._held.setdefault(key, []).append((state, until, share))

    def _at(self, kind: str, cluster: str, broker: str, now: int) -> tuple[str, int, float] | None:
        seen = self._seen.get((kind, cluster, broker))
        i = bisect.bisect_right(seen, now) - 1 if seen else -1
        return self._held[(kind, cluster, broker)][i] if i >= 0 else None

    def is_available(
        self, cluster: str, broker: str, now: int | None = None, ticket: int | None = None
    ) -> bool:
        """Whether faultline lets ``broker`` take a send at ``now`` (default: the wall clock):
        not while the route's latest word has it out, nor while its FaultItem's isolates it.
        While the broker is on probation, ``ticket`` (an integer that varies from send to send,
        such as a counter) decides which sends it takes; without one, the calls are counted."""
        now = int(time.time() * 1000) if now is None else now
        route = self._at(ROUTE_KEYS, cluster, broker, now)
        if route is not None and route[0] == ProducerState.OUT_OF_ROUTE:
            return False
        held = self._at(BROKER_KEYS, cluster, broker, now)
        if held is None:
            return True
        state, until, share = held
        if state == ProducerState.ISOLATED and now < until:
            return False
        if state == ProducerState.PROBING and now < until:
            if ticket is None:
                self._calls += 1
                ticket = self._calls
            return (ticket * _GOLDEN) % 1.0 < share  # consecutive tickets spread evenly
        return True


BROKER_KEYS = "broker"
ROUTE_KEYS = "broker-route"
ROUTE_DECISIONS = frozenset((Decision.ROUTE_EXPIRED, Decision.ROUTE_RESTORED))
"""The decisions about a broker's place in the NameServer's route, not about its FaultItem."""


def decision_key(row: dict[str, Any]) -> str:
    """A broker decision's key on the decision topic: ``broker-route/<cluster>/<broker>`` for
    :data:`ROUTE_DECISIONS`, ``broker/<cluster>/<broker>`` for the FaultItem's (RocketMQ's and the
    policies'). Each key's latest message is one of a broker's two independent states: a
    ``ROUTE_RESTORED`` does not end an isolation, nor a ``PROBE`` the broker's absence from the
    route."""
    return "/".join((_kind(row), *_broker(row)))


def _kind(row: dict[str, Any]) -> str:
    return ROUTE_KEYS if row["decision"] in ROUTE_DECISIONS else BROKER_KEYS


def _broker(row: dict[str, Any]) -> tuple[str, str]:
    return str(row["cluster"]), str(row["broker_name"])


def held_until(decision: dict[str, Any], seen_at: int) -> int:
    """Until when a producer that read an isolating (or probing) ``decision`` at ``seen_at``
    keeps to it: its ``available_from``, and at least its duration from ``seen_at``."""
    until = int(decision["available_from"])
    return max(until, seen_at + until - int(decision["effective_at"]))


POLICY_STATES: dict[str, ProducerState] = {
    Decision.OUTLIER: ProducerState.ISOLATED,
    Decision.HOLD: ProducerState.ISOLATED,
    Decision.PANIC: ProducerState.AVAILABLE,
    Decision.PROBE: ProducerState.PROBING,
    Decision.RELEASE: ProducerState.AVAILABLE,
}
"""The decisions of faultline's own policies (``udfs.engine._policies``) and their states."""
_STATES: dict[str, ProducerState] = {
    Decision.ISOLATE: ProducerState.ISOLATED,
    Decision.EXTEND: ProducerState.ISOLATED,
    Decision.SHORTEN: ProducerState.ISOLATED,
    Decision.RESTORE: ProducerState.AVAILABLE,
    Decision.ROUTE_EXPIRED: ProducerState.OUT_OF_ROUTE,
    Decision.ROUTE_RESTORED: ProducerState.AVAILABLE,
    **POLICY_STATES,
}
"""Every decision about a broker and its state; ``QUEUE_SWAP`` and ``EVICTED`` concern a
producer, not a broker."""


def decision_state(decision: str) -> ProducerState:
    """What a ``broker_decisions`` row about a broker means to a producer: ``ISOLATED``,
    ``AVAILABLE``, ``PROBING`` (takes a share of the sends) or ``OUT_OF_ROUTE``. Any other
    decision is a ``ValueError``, never a guess."""
    state = _STATES.get(decision)
    if state is None:
        what = "is no decision about a broker" if decision in set(Decision) else "is unknown"
        raise ValueError(f"decision '{decision}' {what}: expected one of {', '.join(_STATES)}")
    return state


def message(row: dict[str, Any], probe_share: float | None) -> dict[str, Any]:
    """A ``broker_decisions`` row as the decision topic carries it: with its ``state``, and for
    a probation the share of the sends the broker takes."""
    state = decision_state(str(row["decision"]))
    share = {"share": probe_share} if state == ProducerState.PROBING else {}
    return {**row, "state": state, **share}


_RANKS = {
    d: 0 if d in (Decision.RESTORE, Decision.ROUTE_RESTORED) else 1 + (d in POLICY_STATES)
    for d in Decision
}


def publish_order(row: dict[str, Any]) -> tuple[int, int]:
    """The order of the decision topic: by ``effective_at``; at one instant the restorations
    first, then RocketMQ's own decisions, then the policies' (which have the last word)."""
    return int(row["effective_at"]), _RANKS[Decision(row["decision"])]


def pick(
    queues: Sequence[Q],
    start: int,
    usable: Callable[[str], bool],
    last_broker: str | None = None,
    broker_of: Callable[[Q], str] = lambda q: q.broker_name,  # type: ignore[attr-defined]
) -> Q:
    """A queue, round robin from ``start``: the first whose broker is ``usable`` and not the
    broker the previous attempt failed on, else the first usable one, else ``queues[start]``
    (what the producer would have sent to anyway).

    >>> from udfs.rocketmq import MessageQueue
    >>> qs = [MessageQueue("a", 0), MessageQueue("b", 0), MessageQueue("c", 0)]
    >>> pick(qs, 0, usable=lambda b: b != "a").broker_name
    'b'
    >>> pick(qs, 1, usable=lambda b: b != "a", last_broker="b").broker_name
    'c'
    >>> pick(qs, 2, usable=lambda b: False).broker_name
    'c'
    """
    n = len(queues)
    if n == 0:
        raise ValueError("no queue to pick from")
    order = [queues[(start + i) % n] for i in range(n)]
    ok = [q for q in order if usable(broker_of(q))]
    for q in ok:
        if broker_of(q) != last_broker:
            return q
    return ok[0] if ok else order[0]


class DecisionClient:
    """A :class:`DecisionView` kept up to date from the decision topic, read from its start
    (it is compacted: the latest decision per broker is kept) by a background thread."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        options: dict[str, str] | None = None,
        on_transaction: Callable[[dict[str, Any]], None] | None = None,
    ):
        """``on_transaction`` gets each ``transactions`` row the topic carries (key
        ``transaction/<cluster>/<id>``): an end likely lost, a message discarded, and what
        settled it later; it runs on the client's thread."""
        from confluent_kafka import Consumer

        self.on_transaction = on_transaction

        self.view = DecisionView()
        self.topic = topic
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"faultline-client-{id(self)}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **(options or {}),
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True, name="faultline-client")

    def start(self) -> DecisionClient:
        self._consumer.subscribe([self.topic])
        self._thread.start()
        return self

    def poll_once(self, timeout: float = 1.0) -> int:
        """Read what is there now (or within ``timeout``); returns the messages applied."""
        applied = 0
        for message in self._consumer.consume(num_messages=1000, timeout=timeout):
            value = message.value()
            key = (message.key() or b"").decode()
            if message.error() is not None or value is None:
                continue
            if key.startswith("transaction/") and self.on_transaction is not None:
                self.on_transaction(json.loads(value))
                applied += 1
            if not key.startswith("broker/"):
                continue
            with self._lock:
                self.view.apply(json.loads(value), int(time.time() * 1000))
            applied += 1
        return applied

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once(0.5)

    def is_available(self, cluster: str, broker: str, ticket: int | None = None) -> bool:
        with self._lock:
            return self.view.is_available(cluster, broker, ticket=ticket)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._consumer.close()


# --- reporting send results -------------------------------------------------------------------

WINDOW_MS = 10_000
"""A summary's window of event time, aligned to the epoch: the latency-outlier window (10 s by
default; the job's ``latency_outlier_window`` must be a multiple of it), so no summary straddles
one. It is also no longer than the 5.x isolation a broker exception causes (10 s), within which
another producer's summary that began before the exception sets the broker reachable again in
the ``cluster`` scope (docs/producers/summaries.md). At 100 messages a second over 12
brokers a window holds about 80 sends per broker, against 8 in a window of 1 s."""
BUFFER = 10_000
"""Records a reporter holds while Kafka cannot take them; a full buffer drops summaries first."""


def serialize(record: dict[str, Any]) -> bytes:
    """A reporter's record as it goes on the wire (one Kafka message): JSON with its keys
    sorted, no whitespace, every character outside printable ASCII (U+0020 to U+007E) escaped
    as ``\\uXXXX`` (lowercase hex, UTF-16 code units), but for the short escapes ``\\"``,
    ``\\\\``, ``\\n``, ``\\r``, ``\\t``, ``\\b`` and ``\\f``. A record has no nulls (a field
    without a value is left out) and no fractions: its values are strings, integers, booleans
    and lists of integers. Any implementation of the reporter writes these bytes
    (``tests/vectors/reporter``).

    >>> serialize({"kind": "send_result", "broker_name": "b\u00e9", "attempt": 0, "x": [1, 2]})
    b'{"attempt":0,"broker_name":"b\\\\u00e9","kind":"send_result","x":[1,2]}'
    """
    return json.dumps(record, separators=(",", ":"), sort_keys=True, allow_nan=False).encode()


class Reporter:
    """What a producer calls after each send attempt (:meth:`send`) and each consume
    (:meth:`consume`), and at shutdown (:meth:`close`): it reports in full every send that can
    change a decision, and summarizes the rest per (topic, broker, mode) over windows of
    ``window_ms`` of event time. A send is reported in full when it

    - is not ``SEND_OK`` (a failure, a timeout, a store that is not OK);
    - is a retry (``attempt`` > 0: its routing decision is made from it);
    - took a latency in an isolating band of its profile (550 ms and more in every shipped one);
    - went to a broker that the producer's own FaultTable holds not yet available at its event
      time (RocketMQ 4.x overwrites an isolation with the next answer), with the latency fault
      switch on; the reporter keeps that table itself, from the sends it is given, as the job's
      ``producer`` scope does;
    - is delayed (``delay_level``), redelivered (``redelivery_count``) or transactional.

    Every other send is a SEND_OK first attempt whose only effect is the broker's latest
    latency (and 5.x's reachable flag): a summary carries the first and the last of its window,
    which is all a FaultTable keeps of them, and their count, sum, maximum and histogram for the
    latency-outlier windows. A consume that asks for a retry is reported in full; successful
    ones are counted per (group, topic).

    A summary goes out when its window closes (at the first call at or after its end, or at
    :meth:`flush`), before a full event of its broker (so the job applies them in order), before
    any failed send of a 4.x producer with the switch on (its retry may call ``pickOneAtLeast``,
    which orders the whole table by each broker's latest latency), when the producer's queue
    index goes back (a 5.x retry resets it, a new route redraws it), and at :meth:`close`.
    Nothing blocks: records wait in a buffer of ``buffer`` records for ``sink`` (a callable
    taking a record and returning whether it was taken); a full buffer drops its oldest summary
    for a full event, drops a new summary before anything else, and drops a full
    event only when it holds nothing else. What it dropped is counted (:attr:`dropped`) and
    told in the next summary's ``dropped``.

    Each send is a ``send_result`` event (docs/events.md) as a dict; ``event_id``
    may be left out (the reporter numbers its events), and ``queue_index``, the producer's
    ``sendWhichQueue`` after the send, is carried into summaries only.
    """

    def __init__(
        self,
        producer_id: str,
        sink: Callable[[dict[str, Any]], bool],
        *,
        cluster: str = "default",
        producer_group: str | None = None,
        client_profile: str = "rocketmq-4.9",
        latency_fault_enable: bool = True,
        window_ms: int = WINDOW_MS,
        buffer: int = BUFFER,
    ) -> None:
        if window_ms <= 0 or buffer <= 0:
            raise ValueError(f"window_ms {window_ms} and buffer {buffer} must be positive")
        self.profile = PROFILES[client_profile]
        self.base = {
            "cluster": cluster,
            "producer_id": producer_id,
            "producer_group": producer_group,
            "client_profile": client_profile,
            "latency_fault_enable": latency_fault_enable,
        }
        self.sink, self.window_ms, self.buffer = sink, window_ms, buffer
        self.isolating = self.profile.isolating_ms
        self.bounds = list(self.profile.latency_max)
        self.table = FaultTable(self.profile) if latency_fault_enable else None
        self.windows: dict[tuple[str, ...], dict[str, Any]] = {}
        self.pending: list[dict[str, Any]] = []
        self.dropped = 0
        """Records dropped for a full buffer, all told."""
        self._untold = 0
        self._index: dict[str, int] = {}
        """Each topic's last ``queue_index``: a summary covers sends over which it only grew."""
        self._seq = 0
        self.full = self.summarized = self.summaries = 0
        """Sends (and consumes) reported in full, summarized, and the summaries sent."""

    def send(self, event: dict[str, Any]) -> None:
        """One send attempt's result (a ``send_result`` event's fields)."""
        e = {**self.base, "kind": "send_result", "mode": "SYNC", **event}
        index = e.pop("queue_index", None)
        e.setdefault("event_id", self._id())
        t, broker, topic = int(e["event_time"]), str(e["broker_name"]), str(e["topic"])
        self._close_windows(t)
        if index is not None:
            if index < self._index.get(topic, index):  # reset (5.x retry, a new route)
                self._out([k for k in self.windows if k[:2] == ("send", topic)])
            self._index[topic] = index
        if self._in_full(e, t, broker):
            self.full += 1
            # what came before it goes first: of its broker, or of every broker before a 4.x
            # failure, whose retry may order the whole table by latency (pickOneAtLeast)
            every = (
                self.table is not None and self.profile.line != "5" and e["outcome"] != "SEND_OK"
            )
            mine = ("send",) if every else ("send", topic, broker)
            self._out([k for k in self.windows if k[: len(mine)] == mine])
            self._emit(e)
        else:
            self.summarized += 1
            self._add(e, t, broker, index)
        self._learn(e, t, broker)

    def consume(self, event: dict[str, Any]) -> None:
        """One consume's result (a ``consume_result`` event's fields)."""
        e = {"cluster": self.base["cluster"], "kind": "consume_result", **event}
        e.setdefault("event_id", self._id())
        t = int(e["event_time"])
        self._close_windows(t)
        if e.get("status") != "CONSUME_SUCCESS":
            self.full += 1
            self._emit(e)
            return
        self.summarized += 1
        key = ("consume", str(e["consumer_group"]), str(e["topic"]))
        w = self.windows.get(key)
        if w is None:
            start = t // self.window_ms * self.window_ms
            w = self.windows[key] = {
                "cluster": e["cluster"],
                "kind": "consume_summary",
                "consumer_group": key[1],
                "topic": key[2],
                "messages": 0,
                "window_start": start,
                "window_end": start + self.window_ms,
            }
        w["messages"] += 1
        w["event_id"], w["event_time"] = str(e["event_id"]), t

    def flush(self, now: int | None = None) -> None:
        """Send the summaries whose window ended by ``now`` (event time; all of them without),
        and hand the buffer to the sink."""
        if now is None:
            self._out(list(self.windows))
        else:
            self._close_windows(now)
        self._drain()

    def close(self) -> None:
        """At shutdown: every open summary goes out."""
        self.flush()

    # -- the rule ----------------------------------------------------------------------------

    def _in_full(self, e: dict[str, Any], t: int, broker: str) -> bool:
        return (
            e.get("outcome") != "SEND_OK"
            or int(e.get("attempt") or 0) > 0
            or int(e["latency_ms"]) >= self.isolating
            or bool(e.get("delay_level"))
            or bool(e.get("redelivery_count"))
            or e.get("transaction") is not None
            or (self.table is not None and not self.table.is_available(broker, t))
        )

    def _learn(self, e: dict[str, Any], t: int, broker: str) -> None:
        """The producer's own FaultTable after the send, as the job's producer scope keeps it
        (every update at the event's time)."""
        if self.table is None:
            return
        effect = attempt_effect(
            self.profile,
            Outcome(e["outcome"]),
            int(e["latency_ms"]),
            mode=SendMode(e.get("mode") or "SYNC"),
            attempt=int(e.get("attempt") or 0),
            response_code=e.get("response_code"),
        )
        for r in effect.reports:
            latency = 0 if r.phase == "dispatch" else int(e["latency_ms"])
            self.table.report(broker, latency, r.isolation, t, r.reachable)

    # -- summaries ---------------------------------------------------------------------------

    def _add(self, e: dict[str, Any], t: int, broker: str, index: int | None) -> None:
        key = ("send", str(e["topic"]), broker, str(e.get("mode") or "SYNC"))
        w = self.windows.get(key)
        latency = int(e["latency_ms"])
        if w is None:
            start = t // self.window_ms * self.window_ms
            w = self.windows[key] = {
                **self.base,
                "kind": "send_summary",
                "topic": key[1],
                "broker_name": broker,
                "mode": key[3],
                "outcome": "SEND_OK",
                "messages": 0,
                "window_start": start,
                "window_end": start + self.window_ms,
                "first_time": t,
                "first_latency_ms": latency,
                "first_event_id": str(e["event_id"]),
                "latency_total": 0,
                "latency_max": 0,
                "histogram": [0] * (len(self.bounds) + 1),
            }
            if index is not None:
                w["queue_index_start"] = index
        w["messages"] += 1
        w["latency_total"] += latency
        w["latency_max"] = max(w["latency_max"], latency)
        w["histogram"][bisect.bisect_right(self.bounds, latency)] += 1
        w["event_id"], w["event_time"], w["latency_ms"] = str(e["event_id"]), t, latency
        if index is not None:
            w["queue_index_end"] = index

    def _out(self, keys: list[tuple[str, ...]]) -> None:
        """Send these windows' summaries."""
        for key in keys:
            self._emit(self.windows.pop(key))

    def _close_windows(self, t: int) -> None:
        self._out([k for k, w in self.windows.items() if w["window_end"] <= t])

    def _id(self) -> str:
        self._seq += 1
        return f"{self.base['producer_id']}-r{self._seq:09d}"

    # -- the buffer --------------------------------------------------------------------------

    def _emit(self, record: dict[str, Any]) -> None:
        summary = str(record["kind"]).endswith("_summary")
        if len(self.pending) >= self.buffer:
            self._drain()
        if len(self.pending) >= self.buffer:
            oldest = next(
                (i for i, r in enumerate(self.pending) if str(r["kind"]).endswith("_summary")),
                None,
            )
            self.dropped += 1
            self._untold += 1
            if summary or oldest is None:
                return
            evicted = self.pending.pop(oldest)
            self._untold += int(evicted["dropped"])  # what it would have told
            self.summaries -= 1
        if summary:
            record["dropped"], self._untold = self._untold, 0
            self.summaries += 1
        self.pending.append({k: v for k, v in record.items() if v is not None})
        self._drain()

    def _drain(self) -> None:
        taken = 0
        for record in self.pending:
            if not self.sink(record):
                break
            taken += 1
        del self.pending[:taken]


class KafkaReporter(Reporter):
    """A :class:`Reporter` that publishes to the send-results topic with confluent-kafka (value:
    the record's :func:`serialize` bytes; key: the producer id, so one producer's records keep
    their order in one partition). It never waits: a record Kafka's client cannot queue stays
    in the reporter's buffer."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        producer_id: str,
        options: dict[str, str] | None = None,
        **settings: Any,
    ) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": "50", **(options or {})}
        )
        super().__init__(producer_id, self._produce, **settings)

    def _produce(self, record: dict[str, Any]) -> bool:
        try:
            self._producer.produce(
                self.topic,
                serialize(record),
                key=str(record.get("producer_id") or record.get("consumer_group")).encode(),
            )
        except BufferError:
            self._producer.poll(0)
            return False
        self._producer.poll(0)
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Send every open summary and wait up to ``timeout`` seconds for Kafka to take it."""
        super().close()
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            self._producer.flush(0.1)
            self._drain()
        self._producer.flush(max(0.0, deadline - time.monotonic()))
