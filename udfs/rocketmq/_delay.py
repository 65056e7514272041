"""Delay levels, ``SCHEDULE_TOPIC_XXXX`` and consumer send-back.

**Delay levels** (``parseDelayLevel`` in ``store``'s ``schedule/ScheduleMessageService``,
@4.7.1:192, @4.9.7:276; ``broker``'s copy @HEAD:300; the default ``messageDelayLevel`` of
``MessageStoreConfig``). The spec is split on single spaces; token *i* is level *i + 1*; the
last character is the unit (``s m h d``) and the rest a Java ``long`` (a sign is accepted). Any
other token makes the broker refuse to start. There is no level 0.

**Redirect at store time** (``CommitLog.putMessage``, @4.7.1:576-592, @4.9.7:634-650; 5.x
``broker``'s ``util/HookUtils``, @HEAD:129-160). Only ``NOT_TYPE`` and ``COMMIT_TYPE``
messages; the level is the ``DELAY`` property, 0 when absent. A level of 0 or less is not
delayed; a level above the maximum is clamped to it; a delayed message keeps its topic and queue
in ``REAL_TOPIC`` and ``REAL_QID`` and is stored in ``SCHEDULE_TOPIC_XXXX``, queue ``level - 1``
(``delayLevel2QueueId``; ``queueId2DelayLevel`` is ``q + 1``). It is due at store time plus the
level's delay (store time + 1000 ms for a level missing from the table), and
``correctDeliverTimestamp`` makes a due time further ahead than that delay due now (@4.7.1:250,
@4.9.7:366, @HEAD:388). On delivery ``DELAY`` is cleared and the real topic and queue restored
(*derived*: the copy's serialized properties still show ``DELAY``).

**Send-back** (``consumerSendMsgBack``: ``broker``'s ``processor/SendMessageProcessor``,
@4.7.1:112-243, @4.9.7:116-265; ``AbstractSendMessageProcessor``, @HEAD:92-280). With no retry
queues the broker drops the message. The maximum is the request's ``maxReconsumeTimes``, else the
group's ``retryMaxTimes`` (16). A message with ``reconsumeTimes >= max`` or a negative level goes
to ``%DLQ%<group>``, queue 0: 4.9.7 and 5.x store it with ``DELAY=0``, while 4.7.1 keeps its old
level, so a message that came through the retry topic waits in ``SCHEDULE_TOPIC_XXXX`` before
reaching the DLQ (ISSUE #2724, fixed in 4.9.2; *derived*). Otherwise it goes to
``%RETRY%<group>`` at level ``3 + reconsumeTimes`` when the consumer asked for 0, or the level it
asked for, with ``reconsumeTimes + 1`` and its ``ORIGIN_MESSAGE_ID``. With the defaults: 10 s
after the first failure, 2 h after the 16th, then the DLQ: at most 1 + 16 deliveries.

The client's fallback when send-back fails (``DefaultMQPushConsumerImpl.sendMessageBack``)
publishes to ``%RETRY%<group>`` with ``RECONSUME_TIME = reconsumeTimes + 1`` and ``DELAY = 3 +
reconsumeTimes``; the broker (``handleRetryAndDLQ``, @4.7.1:339, @4.9.7:364, @HEAD:209) sends it
to the DLQ when ``RECONSUME_TIME >= max`` in 4.x (one attempt earlier) or ``> max`` in 5.x, which
writes ``DELAY=-1`` so the DLQ copy is not delayed.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from udfs.rocketmq._errors import DelayLevelError
from udfs.rocketmq._java import LONG_MAX, LONG_MIN, i64
from udfs.rocketmq._profiles import Profile

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DEFAULT_MAX_RECONSUME_TIMES = 16
"""``retryMaxTimes`` of a subscription group, and a concurrent consumer's default."""

_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LONG = re.compile(r"[+-]?\d+")  # Long.parseLong: optional sign, decimal digits (any script)

TransactionType = Literal["NOT_TYPE", "PREPARED_TYPE", "COMMIT_TYPE", "ROLLBACK_TYPE"]


def _java_split_space(text: str) -> list[str]:
    """``String.split(" ")``: trailing empty tokens are dropped, others kept."""
    tokens = text.split(" ")
    while len(tokens) > 1 and tokens[-1] == "":
        tokens.pop()
    return tokens


@dataclass(frozen=True)
class DelayLevels:
    """A parsed ``messageDelayLevel`` table: level (1-based) to delay in ms.

    >>> levels = DelayLevels.parse()
    >>> levels.max_level, levels.delay_ms(3), levels.delay_ms(18)
    (18, 10000, 7200000)
    >>> levels.deliver_at(3, 1_000)
    11000
    """

    spec: str
    table: Mapping[int, int]

    @classmethod
    def parse(cls, spec: str = DEFAULT_DELAY_LEVELS) -> DelayLevels:
        """``parseDelayLevel``: split on single spaces; each token is a whole number (a sign is
        accepted) followed by one unit of ``s m h d``. Raises :class:`DelayLevelError` naming
        the token where RocketMQ's parser fails (the broker would refuse to start).

        >>> DelayLevels.parse("-1s 1d").table[1]
        -1000
        >>> DelayLevels.parse("1s  5s")
        Traceback (most recent call last):
        ...
        udfs.rocketmq.DelayLevelError: messageDelayLevel '1s  5s': level 2 is '' ...
        """
        table: dict[int, int] = {}
        for level, token in enumerate(_java_split_space(spec), start=1):
            unit = _UNITS.get(token[-1:]) if token else None
            digits = token[:-1]
            if unit is None or not _LONG.fullmatch(digits):
                raise DelayLevelError(
                    f"messageDelayLevel {spec!r}: level {level} is {token!r} ... each level must "
                    "be a whole number followed by one unit of s, m, h or d (like 10s or 2h), "
                    "levels separated by single spaces"
                )
            number = int(digits)
            if not LONG_MIN <= number <= LONG_MAX:
                raise DelayLevelError(
                    f"messageDelayLevel {spec!r}: level {level} is {token!r} ... the number does "
                    "not fit a Java long"
                )
            table[level] = i64(unit * number)  # Java's long product wraps silently
        return cls(spec, MappingProxyType(table))

    @property
    def max_level(self) -> int:
        return max(self.table)

    def delay_ms(self, level: int) -> int:
        """The delay of ``level``; a level outside the table raises :class:`DelayLevelError`."""
        try:
            return self.table[level]
        except KeyError:
            raise DelayLevelError(
                f"delay level {level} is not in the table (levels 1..{self.max_level})"
            ) from None

    def clamp(self, level: int) -> int:
        """The store's clamp: a level above the maximum becomes the maximum."""
        return min(level, self.max_level)

    def deliver_at(self, level: int, store_ms: int) -> int:
        """``computeDeliverTimestamp``: ``store_ms + delay(level)``, or ``store_ms + 1000`` for a
        level the table lacks (the caller clamps first, as the commit log does).

        >>> DelayLevels.parse().deliver_at(999, 0)
        1000
        """
        delay = self.table.get(level)
        return store_ms + (delay if delay is not None else 1000)

    def correct_deliver_at(self, level: int, now_ms: int, deliver_at: int) -> int:
        """``correctDeliverTimestamp``: a deliver time further away than ``now + delay(level)``
        (the clock went backwards) is due now; otherwise it is kept."""
        return now_ms if deliver_at > now_ms + self.delay_ms(level) else deliver_at

    @staticmethod
    def is_due(deliver_at: int, now_ms: int) -> bool:
        """The delivery loop's test: ``deliver_at - now <= 0``."""
        return deliver_at - now_ms <= 0


def delay_level_to_queue_id(level: int) -> int:
    """``delayLevel2QueueId``: ``level - 1``, no range check."""
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    """``queueId2DelayLevel``: ``queue_id + 1``, no range check."""
    return queue_id + 1


@dataclass(frozen=True)
class Redirect:
    """Where the store puts a message carrying ``DELAY``."""

    delayed: bool
    delay_level: int
    """The level after clamping (0 when not delayed)."""
    topic: str | None
    """``SCHEDULE_TOPIC_XXXX`` when delayed."""
    queue_id: int | None
    """``level - 1`` when delayed."""


def schedule_redirect(
    level: int | None, levels: DelayLevels, transaction_type: TransactionType = "NOT_TYPE"
) -> Redirect:
    """The commit log's redirect at store time (module docstring). Only NOT_TYPE and COMMIT_TYPE
    messages are redirected; a missing level reads as 0; level <= 0 is not delayed.

    >>> schedule_redirect(19, DelayLevels.parse())
    Redirect(delayed=True, delay_level=18, topic='SCHEDULE_TOPIC_XXXX', queue_id=17)
    >>> schedule_redirect(3, DelayLevels.parse(), "PREPARED_TYPE").delayed
    False
    """
    level = level or 0
    if transaction_type not in ("NOT_TYPE", "COMMIT_TYPE") or level <= 0:
        return Redirect(False, 0, None, None)
    effective = levels.clamp(level)
    return Redirect(True, effective, SCHEDULE_TOPIC, delay_level_to_queue_id(effective))


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


@dataclass(frozen=True)
class SendBack:
    """Where a consumer's failed message goes (send-back, module docstring)."""

    topic: str | None
    """``%RETRY%group`` or ``%DLQ%group``; None when the broker dropped the message."""
    queue_id: int | None
    delay_level: int | None
    """The ``DELAY`` property handed to the store; None when absent."""
    reconsume_times: int
    """The stored copy's ``reconsumeTimes`` (``RECONSUME_TIME`` on the client path)."""
    parked_in: tuple[str, int] | None
    """``(SCHEDULE_TOPIC_XXXX, queue id)`` the copy waits in first, or None."""

    @property
    def dlq(self) -> bool:
        return self.topic is not None and self.topic.startswith(DLQ_PREFIX)

    @property
    def dropped(self) -> bool:
        return self.topic is None


def send_back(
    profile: Profile,
    group: str,
    reconsume_times: int,
    delay_level: int,
    max_reconsume_times: int | None = DEFAULT_MAX_RECONSUME_TIMES,
    *,
    path: Literal["broker", "client"] = "broker",
    levels: DelayLevels | None = None,
    retry_queue_nums: int = 1,
    stored_delay_level: int | None = None,
    orderly_locked: bool = False,
    rng: random.Random | None = None,
) -> SendBack:
    """Consumer send-back for a message consumed ``reconsume_times`` times before.

    ``path="broker"`` is ``consumerSendMsgBack``; ``path="client"`` is the consumer's own
    fallback publish to the retry topic. ``max_reconsume_times`` None falls back to the group's
    ``retryMaxTimes`` (16). ``stored_delay_level`` is the ``DELAY`` the looked-up message still
    carries, which a 4.7.1 DLQ copy keeps (default: the level of its previous send-back,
    ``2 + reconsume_times``, when it was consumed before). ``retry_queue_nums`` above 1 draws the
    retry queue from ``rng``.

    >>> from udfs.rocketmq import PROFILES
    >>> p = PROFILES["rocketmq-4.9"]
    >>> back = send_back(p, "g", 0, 0)
    >>> back.topic, back.delay_level, back.reconsume_times, back.parked_in
    ('%RETRY%g', 3, 1, ('SCHEDULE_TOPIC_XXXX', 2))
    >>> send_back(p, "g", 16, 0).topic
    '%DLQ%g'
    >>> send_back(p, "g", 15, 0, path="client").topic  # 4.x client path: one attempt earlier
    '%DLQ%g'
    """
    levels = levels or DelayLevels.parse()
    max_times = max_reconsume_times if max_reconsume_times is not None else 16
    if path == "client":
        return _client_send_back(profile, group, reconsume_times, max_times, levels, orderly_locked)

    if retry_queue_nums <= 0:
        return SendBack(None, None, None, reconsume_times, None)
    if reconsume_times >= max_times or delay_level < 0:
        if profile.line == "4.7":
            kept = stored_delay_level
            if kept is None and reconsume_times > 0:
                kept = 2 + reconsume_times
            return _stored(dlq_topic(group), 0, kept, reconsume_times + 1, levels)
        return _stored(dlq_topic(group), 0, 0, reconsume_times + 1, levels)
    if retry_queue_nums == 1:
        queue_id = 0
    elif rng is None:
        raise ValueError("retry_queue_nums > 1 draws the retry queue: pass a seeded rng")
    else:
        queue_id = rng.randrange(retry_queue_nums)
    level = 3 + reconsume_times if delay_level == 0 else delay_level
    return _stored(retry_topic(group), queue_id, level, reconsume_times + 1, levels)


def _client_send_back(
    profile: Profile,
    group: str,
    reconsume_times: int,
    max_times: int,
    levels: DelayLevels,
    orderly_locked: bool,
) -> SendBack:
    stored_times = reconsume_times + 1
    level = 3 + reconsume_times
    if profile.line == "5":
        to_dlq = stored_times > max_times or orderly_locked
        if to_dlq:
            return _stored(dlq_topic(group), 0, -1, stored_times, levels)
    elif stored_times >= max_times:
        # 4.x: setDelayTimeLevel(0) is overwritten by the request's properties, so the DLQ
        # copy keeps DELAY (derived from the code, not run).
        return _stored(dlq_topic(group), 0, level, stored_times, levels)
    return _stored(retry_topic(group), 0, level, stored_times, levels)


def _stored(
    topic: str, queue_id: int, level: int | None, reconsume_times: int, levels: DelayLevels
) -> SendBack:
    redirect = schedule_redirect(level, levels)
    parked = (SCHEDULE_TOPIC, redirect.queue_id) if redirect.queue_id is not None else None
    return SendBack(topic, queue_id, level, reconsume_times, parked)
