"""Queue selection: ``TopicPublishInfo`` and ``MQFaultStrategy.selectOneMessageQueue``, bug for
bug per profile, over the round-robin index of :mod:`udfs.rocketmq._index`.

Sources: ``impl/producer/TopicPublishInfo.java`` (@4.7.1:69-84, @4.9.7:69-84, @HEAD:75-121) and
``latency/MQFaultStrategy.java`` (@4.7.1:58-89, @4.9.7:58-87, @HEAD:137-162).

``TopicPublishInfo``: the plain pick takes the queue at ``next() % n`` (4.x with ``abs`` and a
negative position clamped to 0); an empty list throws ``ArithmeticException``. Avoiding the last
broker, 4.7.1 reads the index once and walks on from it locally, while 4.9.7 and 5.x call
``next()`` for every probe (ISSUE #2223, 4.8.0); after ``n`` probes on the last broker, one plain
pick. 5.x filters (``selectOneMessageQueue(QueueFilter...)``) make up to ``n`` probes and return
the first queue that passes every filter, or none. ``getQueueIdByBroker`` (4.x) and
``getWriteQueueNumsByBroker`` (5.x) give the broker's write queue count, -1 without one.

``MQFaultStrategy.selectOneMessageQueue`` with the latency fault switch off avoids the last
broker as above (5.x: one filtered pass, then one plain pick). With it on:

* **4.7.1**: (1) read the index once; probe the ``n`` positions; take a queue whose broker is
  available *and* is the last broker (or there is no last broker): the ``equals`` quirk accepts
  only the broker that just failed. (2) Otherwise ask ``pickOneAtLeast`` for a broker; (3) if it
  has write queues, take the next plain pick's queue object, the one shared with the route's
  list, and rewrite it in place to that broker and ``next() % writeQueueNums``: the list stays
  wrong until the route is rebuilt (apache/rocketmq #3548, #4154, #7779). (4) Otherwise remove
  that broker from the fault table; an empty table gives ``remove(null)``, a
  ``NullPointerException``. (5) Any exception in (1)-(4) (route data missing too) is logged and
  swallowed, and a plain pick decides.
* **4.9.7**: the same, except step (1) ignores the last broker (4.8.0, ISSUE #1576, PR #1607).
* **5.x**: (0) on a retry of a sync send (``resetIndex``) the index restarts at random; (1) a
  filtered pick, available and not the last broker; (2) a filtered pick, reachable and not the
  last broker; (3) a plain pick. No rewrite, no ``pickOneAtLeast``, no removal.

An empty queue list ends in ``ArithmeticException`` in every profile (``sendDefaultImpl`` checks
``TopicPublishInfo.ok()`` first); here it is :class:`EmptyRouteError`. :class:`Rule` names the
step that chose the queue.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from udfs.rocketmq import _index
from udfs.rocketmq._errors import EmptyRouteError
from udfs.rocketmq._fault import FaultTable
from udfs.rocketmq._java import abs32, i32, rem
from udfs.rocketmq._profiles import Line, Profile

PERM_WRITE = 0x2
"""``PermName.PERM_WRITE``: a broker whose route ``perm`` lacks it gets no write queues."""


@dataclass(frozen=True)
class MessageQueue:
    """A queue of a topic on a broker. ``topic`` is optional: selection only needs the broker."""

    broker_name: str
    queue_id: int
    topic: str = ""

    def sort_key(self) -> tuple[str, str, int]:
        """``MessageQueue.compareTo``: topic, then broker name, then queue id."""
        return (self.topic, self.broker_name, self.queue_id)


class Rule(StrEnum):
    """Which step of the profile's selection chose the queue."""

    PLAIN = "plain"
    """Round-robin pick with no last broker to avoid."""
    NOT_LAST_BROKER = "not-last-broker"
    """Switch off: the walk found a queue on another broker than the one that just failed."""
    FALLBACK_PLAIN = "fallback-plain"
    """Every filtered probe failed (all queues on the last broker, or no 5.x pass matched):
    one plain pick."""
    AVAILABLE = "available"
    """4.x switch on: the first queue on an available broker."""
    AVAILABLE_LAST_BROKER = "available-last-broker"
    """4.7.1 switch on, the ``equals`` quirk: only the broker that just failed is accepted."""
    PICK_ONE_AT_LEAST = "pick-one-at-least"
    """4.x: no queue was acceptable, so a shared queue object was rewritten to
    ``pickOneAtLeast``'s broker."""
    REMOVED_THEN_PLAIN = "removed-then-plain"
    """4.x: ``pickOneAtLeast``'s broker has no write queues in the route; it was removed from
    the fault table, then one plain pick."""
    EXCEPTION_THEN_PLAIN = "exception-then-plain"
    """4.x: an exception was logged and swallowed (no route data, empty fault table), then one
    plain pick."""
    AVAILABLE_NOT_LAST = "available-not-last"
    """5.x pass 1: available and not the last broker."""
    REACHABLE_NOT_LAST = "reachable-not-last"
    """5.x pass 2: reachable and not the last broker."""


@dataclass(frozen=True)
class Selection:
    """The chosen queue, the rule that chose it, and what the selection did on the side."""

    queue: MessageQueue
    rule: Rule
    rewritten: int | None = None
    """4.x: ``queue`` rewrote the route's queue at this place in ``info.queues``, in place."""
    removed: str | None = None
    """4.x: the broker removed from the fault table."""
    swallowed: str | None = None
    """4.x: the exception RocketMQ logged and swallowed."""


class _NullPointer(Exception):
    """A Java ``NullPointerException`` that RocketMQ catches and logs."""


class TopicPublishInfo:
    """A topic's route as a producer holds it, plus the ``sendWhichQueue`` index state.

    ``queues`` is the ``messageQueueList`` (4.x selection may rewrite an entry in place);
    ``write_queue_nums`` maps broker to ``writeQueueNums`` from the route data (None when the
    route data is missing); ``index`` is the round-robin state (None: drawn from ``rng``).
    """

    def __init__(
        self,
        queues: Iterable[MessageQueue],
        write_queue_nums: Mapping[str, int] | None = None,
        index: int | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.queues = list(queues)
        self.write_queue_nums = dict(write_queue_nums) if write_queue_nums is not None else None
        self.index = index
        self.rng = rng

    @classmethod
    def from_route(
        cls,
        brokers: Iterable[tuple[str, int, int]],
        *,
        topic: str = "",
        index: int | None = None,
        rng: random.Random | None = None,
    ) -> TopicPublishInfo:
        """``topicRouteData2TopicPublishInfo`` for ``(broker_name, write_queue_nums, perm)``
        entries: brokers sorted by name, queues 0..n-1 of each writeable one.

        >>> info = TopicPublishInfo.from_route([("b", 2, 6), ("a", 1, 6), ("c", 4, 4)])
        >>> [(q.broker_name, q.queue_id) for q in info.queues]
        [('a', 0), ('b', 0), ('b', 1)]
        """
        entries = sorted(brokers, key=lambda entry: entry[0])
        queues = [
            MessageQueue(name, queue_id, topic)
            for name, nums, perm in entries
            if perm & PERM_WRITE
            for queue_id in range(nums)
        ]
        return cls(queues, {name: nums for name, nums, _ in entries}, index, rng)

    def ok(self) -> bool:
        """``TopicPublishInfo.ok()``: the route has queues (``sendDefaultImpl`` checks this)."""
        return bool(self.queues)

    def write_queue_nums_of(self, broker: str | None) -> int:
        """``getQueueIdByBroker`` / ``getWriteQueueNumsByBroker``: -1 for an unknown broker."""
        if self.write_queue_nums is None:
            raise _NullPointer("topicRouteData is null")
        if broker is None:
            return -1
        return self.write_queue_nums.get(broker, -1)

    def _next(self, line: Line) -> int:
        self.index, value = _index.advance(line, self.index, self.rng)
        return value

    def _position(self, value: int) -> int:
        """``Math.abs(value) % n`` with a negative result clamped to 0 (4.x; harmless in 5.x,
        whose values are never negative)."""
        if not self.queues:
            raise EmptyRouteError("/ by zero: the topic route has no queues")
        return max(rem(abs32(value), len(self.queues)), 0)

    def _plain(self, line: Line) -> int:
        return self._position(self._next(line))

    def _walk_4_7(self, last_broker: str) -> int | None:
        """4.7.1: one index read, then a local ``index++`` walk (which can overflow)."""
        local = self._next("4.7")
        for _ in range(len(self.queues)):
            pos = self._position(local)
            local = i32(local + 1)
            if self.queues[pos].broker_name != last_broker:
                return pos
        return None

    def _filtered(self, line: Line, *accept: Callable[[MessageQueue], bool]) -> int | None:
        """4.9.7 / 5.x: ``next()`` for every probe, up to n probes; None if none passes."""
        for _ in range(len(self.queues)):
            pos = self._plain(line)
            if all(check(self.queues[pos]) for check in accept):
                return pos
        return None


def select_queue(
    profile: Profile,
    info: TopicPublishInfo,
    table: FaultTable,
    last_broker: str | None,
    now_ms: int,
    latency_fault_enable: bool,
    reset_index: bool = False,
) -> Selection:
    """``MQFaultStrategy.selectOneMessageQueue`` for ``profile`` (module docstring).

    Advances ``info.index`` and ``table.worst_index`` as RocketMQ does; 4.x may rewrite a queue of
    ``info.queues`` in place or remove a broker from ``table``. An empty queue list raises
    :class:`EmptyRouteError` in every profile. ``reset_index`` (5.x, switch on) is true for every
    retry of a sync send.

    >>> from udfs.rocketmq import PROFILES, FaultTable
    >>> p = PROFILES["rocketmq-4.7"]
    >>> info = TopicPublishInfo([MessageQueue("a", 0), MessageQueue("b", 0)], index=0)
    >>> select_queue(p, info, FaultTable(p), "a", 0, latency_fault_enable=True).queue
    MessageQueue(broker_name='a', queue_id=0, topic='')
    """
    line = profile.line
    if line == "5":
        return _select_5(info, table, last_broker, now_ms, latency_fault_enable, reset_index)
    if not latency_fault_enable:
        return _select_by_last_broker_4(line, info, last_broker)
    return _select_latency_4(line, info, table, last_broker, now_ms)


def _select_by_last_broker_4(line: Line, info: TopicPublishInfo, last: str | None) -> Selection:
    if last is None:
        return Selection(info.queues[info._plain(line)], Rule.PLAIN)
    if line == "4.7":
        pos = info._walk_4_7(last)
    else:
        pos = info._filtered(line, lambda mq: mq.broker_name != last)
    if pos is not None:
        return Selection(info.queues[pos], Rule.NOT_LAST_BROKER)
    return Selection(info.queues[info._plain(line)], Rule.FALLBACK_PLAIN)


def _select_latency_4(
    line: Line, info: TopicPublishInfo, table: FaultTable, last: str | None, now_ms: int
) -> Selection:
    removed = swallowed = None
    try:
        local = info._next(line)
        # 4.7.1 takes only the last broker's queues, and only when it is available: a retry
        # after its failure, which usually isolated it, walks every queue for nothing
        # (isAvailable only reads the table, so the walk's outcome is known without it)
        hopeless = line == "4.7" and last is not None and not table.is_available(last, now_ms)
        for _ in range(0 if hopeless else len(info.queues)):
            pos = info._position(local)
            local = i32(local + 1)
            mq = info.queues[pos]
            if table.is_available(mq.broker_name, now_ms):
                if line == "4.9" or last is None:
                    return Selection(mq, Rule.AVAILABLE)
                if mq.broker_name == last:  # the 4.7.1 equals quirk
                    return Selection(mq, Rule.AVAILABLE_LAST_BROKER)
        not_best = table.pick_one_at_least(now_ms)
        write_queues = info.write_queue_nums_of(not_best)
        if write_queues > 0 and not_best is not None:
            pos = info._plain(line)
            mq = MessageQueue(not_best, info._next(line) % write_queues, info.queues[pos].topic)
            info.queues[pos] = mq
            return Selection(mq, Rule.PICK_ONE_AT_LEAST, rewritten=pos)
        if not_best is None:
            raise _NullPointer("latencyFaultTolerance.remove(null)")
        table.remove(not_best)
        removed = not_best
    except (_NullPointer, EmptyRouteError) as exc:
        swallowed = f"{type(exc).__name__}: {exc}"
    rule = Rule.REMOVED_THEN_PLAIN if swallowed is None else Rule.EXCEPTION_THEN_PLAIN
    pos = info._plain(line)
    return Selection(info.queues[pos], rule, removed=removed, swallowed=swallowed)


def _select_5(
    info: TopicPublishInfo,
    table: FaultTable,
    last: str | None,
    now_ms: int,
    latency_fault_enable: bool,
    reset_index: bool,
) -> Selection:
    def not_last(mq: MessageQueue) -> bool:
        return last is None or mq.broker_name != last

    if latency_fault_enable:
        if reset_index:
            info.index = _index.reset(info.rng)
        passes: tuple[tuple[Rule, Callable[[MessageQueue], bool]], ...] = (
            (Rule.AVAILABLE_NOT_LAST, lambda mq: table.is_available(mq.broker_name, now_ms)),
            (Rule.REACHABLE_NOT_LAST, lambda mq: table.is_reachable(mq.broker_name)),
        )
        for rule, check in passes:
            pos = info._filtered("5", check, not_last)
            if pos is not None:
                return Selection(info.queues[pos], rule)
    else:
        pos = info._filtered("5", not_last)
        if pos is not None:
            return Selection(info.queues[pos], Rule.PLAIN if last is None else Rule.NOT_LAST_BROKER)
    return Selection(info.queues[info._plain("5")], Rule.FALLBACK_PLAIN)
