"""What a producer embeds to follow faultline's decisions.

faultline publishes the cluster scope's decisions to a compacted topic (``faultline.decisions``):
key ``broker/<cluster>/<broker>``, the latest decision for that broker, with ``state``
(``ISOLATED``, ``AVAILABLE``, ``PROBING`` or ``OUT_OF_ROUTE``) and ``available_from``; key
``transaction/<cluster>/<id>``, a transactional message its producer must act on.
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

from udfs.vocabulary import Decision, ProducerState

Q = TypeVar("Q")


_GOLDEN = 0.6180339887498949


class DecisionView:
    """The decisions a producer has read, per (cluster, broker), each from the time it was
    read (``seen_at``): :meth:`is_available` at ``now`` uses those read by ``now``.

    An isolation holds until its ``available_from``, and at least for its whole duration
    (``available_from - effective_at``) from when it was read, as a RocketMQ producer isolates a
    broker for the duration from when it sees the failure itself. A decision read late (the
    decision delay, a consumer that lagged) is therefore not over before it is used: a 2 s
    isolation read 2 s after it began would otherwise never keep a send away. A broker on
    probation (``PROBE``, recovery probing) takes the message's ``share`` of the sends, for the
    probation's duration from when it was read."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], list[int]] = {}
        self._held: dict[tuple[str, str], list[tuple[str, int, float]]] = {}
        self._calls = 0

    def apply(self, decision: dict[str, Any], seen_at: int) -> None:
        """One message of the decision topic (a ``broker_decisions`` row with ``state``), read
        at ``seen_at``. Messages of one broker must come in the order they were read."""
        if decision.get("scope", "cluster") != "cluster" or not decision.get("broker_name"):
            return
        key = (str(decision["cluster"]), str(decision["broker_name"]))
        state = decision.get("state") or decision_state(str(decision["decision"]))
        held = state in (ProducerState.ISOLATED, ProducerState.PROBING)
        until = held_until(decision, seen_at) if held else 0
        share = float(decision.get("share") or 1.0) if state == ProducerState.PROBING else 1.0
        self._seen.setdefault(key, []).append(seen_at)
        self._held.setdefault(key, []).append((state, until, share))

    def is_available(
        self, cluster: str, broker: str, now: int | None = None, ticket: int | None = None
    ) -> bool:
        """Whether faultline lets ``broker`` take a send at ``now`` (default: the wall clock).
        While the broker is on probation, ``ticket`` (an integer that varies from send to send,
        such as a counter) decides which sends it takes; without one, the calls are counted."""
        now = int(time.time() * 1000) if now is None else now
        seen = self._seen.get((cluster, broker))
        i = bisect.bisect_right(seen, now) - 1 if seen else -1
        if i < 0:
            return True
        state, until, share = self._held[(cluster, broker)][i]
        if state == ProducerState.OUT_OF_ROUTE or (state == ProducerState.ISOLATED and now < until):
            return False
        if state == ProducerState.PROBING and now < until:
            if ticket is None:
                self._calls += 1
                ticket = self._calls
            return (ticket * _GOLDEN) % 1.0 < share  # consecutive tickets spread evenly
        return True


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
