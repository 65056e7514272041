"""The delay queues of a cluster: what enters ``SCHEDULE_TOPIC_XXXX``, when it leaves, where to.

Three kinds of event put a message into the delay queue of its level (``schedule_queue_id`` =
level - 1, ``deliver_at`` = store time + the level's delay), with RocketMQ's rules for delay
levels and send-back as :mod:`udfs.rocketmq._delay` states them (docs/delay-queues.md says
what faultline adds):

* ``send_failure``: a ``send_result`` after which the producer gives up (:attr:`Next.FAIL`). The
  message goes back to its topic at level ``3 + redelivery_count`` (clamped to the maximum), or to
  ``%DLQ%<producer_group>`` at once after ``max_redeliveries`` redeliveries;
* ``consume_retry``: a ``consume_result`` with ``RECONSUME_LATER``, sent back the broker's way
  (:func:`send_back`), to ``%RETRY%<group>`` or the DLQ;
* ``delayed_send``: a stored ``send_result`` that asked for a ``delay_level``
  (:func:`schedule_redirect`).

A queue releases its entries in order once the cluster's event-time clock reaches their
``deliver_at``. Entries wait in the state between batches; each ends in exactly one
``redeliveries`` row.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from udfs._frames import tuples
from udfs.rocketmq import DelayLevels, Profile, dlq_topic, schedule_redirect, send_back

SEND_FAILURE, CONSUME_RETRY, DELAYED_SEND = "send_failure", "consume_retry", "delayed_send"
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
"""RocketMQ's default producer group, for a ``send_result`` without ``producer_group``."""

KAFKA_TOPIC_MAX = 249
_KAFKA_SAFE = re.compile(r"[A-Za-z0-9_-]")


@functools.lru_cache(maxsize=4096)
def kafka_topic(name: str) -> str:
    """The Kafka topic a RocketMQ topic is written to: one name for one name, never two.

    Kafka allows ``[A-Za-z0-9._-]``, at most 249 characters. RocketMQ names never contain
    ``.``, so ``.`` is the escape: every other character outside Kafka's set (``%`` and ``|``
    in legal RocketMQ names) becomes ``.`` plus the two hex digits of each of its UTF-8 bytes,
    as in URL encoding. Names without ``%`` or ``|`` keep their name. A result longer than 249
    characters keeps its first 231 and ends in ``..`` plus 16 hex digits of its BLAKE2b hash
    (``..`` occurs in no other result).

    >>> kafka_topic("orders"), kafka_topic("%RETRY%cg-orders"), kafka_topic("%DLQ%cg")
    ('orders', '.25RETRY.25cg-orders', '.25DLQ.25cg')
    >>> kafka_topic("a|b")
    'a.7Cb'
    >>> len(kafka_topic("%DLQ%" + "g" * 255))
    249
    """
    encoded = "".join(
        c if _KAFKA_SAFE.fullmatch(c) else "".join(f".{b:02X}" for b in c.encode()) for c in name
    )
    if len(encoded) <= KAFKA_TOPIC_MAX:
        return encoded
    digest = hashlib.blake2b(name.encode(), digest_size=8).hexdigest()
    return f"{encoded[: KAFKA_TOPIC_MAX - 18]}..{digest}"


@dataclass(frozen=True)
class DelayPolicy:
    """The delay-level table and how often faultline reschedules a message whose send failed."""

    levels: DelayLevels = field(default_factory=DelayLevels.parse)
    max_redeliveries: int = 16

    def redelivery_level(self, redelivery_count: int) -> int | None:
        """The level of a failed message's next redelivery, or None: its redeliveries are used
        up and it goes to the DLQ. Escalates like a consumer's retries: 3, 4, ... clamped.

        >>> policy = DelayPolicy()
        >>> policy.redelivery_level(0), policy.redelivery_level(15), policy.redelivery_level(16)
        (3, 18, None)
        """
        if redelivery_count >= self.max_redeliveries:
            return None
        return self.levels.clamp(3 + redelivery_count)


class Waiting(NamedTuple):
    """A message in a delay queue as the state keeps it, ordered by its first three fields."""

    deliver_at: int
    store_time: int
    event_id: str
    message_id: str
    origin_message_id: str
    source: str
    group: str
    real_topic: str
    real_queue_id: int | None
    delay_level: int
    schedule_queue_id: int
    attempt_count: int
    dlq: bool
    profile: str


def _order(w: Waiting) -> tuple[int, int, str]:
    return w.deliver_at, w.store_time, w.event_id


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and pd.isna(value)) and value != ""


def _text(value: Any, default: str) -> str:
    return str(value) if _present(value) else default


def _int(value: Any, default: int) -> int:
    return int(value) if _present(value) else default


class Schedule:
    """One batch of one cluster's delay queues. ``waiting`` is the state's
    ``{level: [entry, ...]}`` and is updated in place."""

    def __init__(
        self,
        cluster: str,
        waiting: dict[str, list[Waiting]],
        policy: DelayPolicy,
        profile_of: Callable[[Any], Profile],
    ) -> None:
        self.cluster, self.waiting, self.policy, self.profile_of = (
            cluster,
            waiting,
            policy,
            profile_of,
        )
        self.entries: list[dict[str, Any]] = []
        self.redeliveries: list[dict[str, Any]] = []

    # entering

    def send_failures(self, sends: pd.DataFrame, failed: np.ndarray) -> None:
        """The sends at the positions ``failed``, after which the producer gave up."""
        r: Any
        columns = ("redelivery_count", "producer_group", "message_id", "event_id", "event_time",
                   "client_profile", "topic")  # fmt: skip
        for r in tuples(sends, columns, failed):
            count = _int(r.redelivery_count, 0)
            group = _text(r.producer_group, DEFAULT_PRODUCER_GROUP)
            message_id = _text(r.message_id, str(r.event_id))
            level = self.policy.redelivery_level(count)
            entry = {
                "store_time": int(r.event_time),
                "event_id": r.event_id,
                "message_id": message_id,
                "origin_message_id": message_id,
                "source": SEND_FAILURE,
                "group": group,
                "attempt_count": count + 1,
                "profile": str(r.client_profile),
            }
            if level is None:
                self._dlq_now(entry, dlq_topic(group))
            else:
                self._enter(entry, str(r.topic), None, level)

    def delayed_sends(self, sends: pd.DataFrame, stored: np.ndarray) -> None:
        """The stored sends at the positions ``stored``, which asked for a delay level: the
        store redirects them."""
        r: Any
        columns = ("delay_level", "message_id", "event_id", "event_time", "producer_group",
                   "client_profile", "topic", "queue_id")  # fmt: skip
        for r in tuples(sends, columns, stored):
            redirect = schedule_redirect(int(r.delay_level), self.policy.levels)
            if not redirect.delayed:
                continue
            message_id = _text(r.message_id, str(r.event_id))
            entry = {
                "store_time": int(r.event_time),
                "event_id": r.event_id,
                "message_id": message_id,
                "origin_message_id": message_id,
                "source": DELAYED_SEND,
                "group": _text(r.producer_group, DEFAULT_PRODUCER_GROUP),
                "attempt_count": 0,
                "profile": str(r.client_profile),
            }
            self._enter(entry, str(r.topic), _int(r.queue_id, 0), redirect.delay_level)

    def consume_retries(self, events: pd.DataFrame, retries: np.ndarray) -> None:
        """The ``RECONSUME_LATER`` results at the positions ``retries``: the consumer's
        send-back, the broker's way."""
        r: Any
        backs: dict[tuple[Any, ...], Any] = {}  # many messages share their send-back's inputs
        columns = ("client_profile", "consumer_group", "reconsume_times", "delay_level",
                   "max_reconsume_times", "event_time", "event_id", "message_id",
                   "origin_message_id")  # fmt: skip
        for r in tuples(events, columns, retries):
            profile = self.profile_of(r.client_profile)
            group = str(r.consumer_group)
            args = (
                _int(r.reconsume_times, 0),
                _int(r.delay_level, 0),
                _int(r.max_reconsume_times, 16),
            )
            back = backs.get((profile.name, group, *args))
            if back is None:
                back = send_back(profile, group, *args, levels=self.policy.levels)
                backs[(profile.name, group, *args)] = back
            if back.topic is None:  # retryQueueNums <= 0: the broker drops it (not by default)
                continue
            entry = {
                "store_time": int(r.event_time),
                "event_id": r.event_id,
                "message_id": str(r.message_id),
                "origin_message_id": _text(r.origin_message_id, str(r.message_id)),
                "source": CONSUME_RETRY,
                "group": group,
                "attempt_count": back.reconsume_times,
                "profile": profile.name,
            }
            if back.parked_in is None:
                self._dlq_now(entry, back.topic)
            else:
                level = back.parked_in[1] + 1
                self._enter(entry, back.topic, back.queue_id, level, dlq=back.dlq)

    def _enter(
        self,
        entry: dict[str, Any],
        real_topic: str,
        real_queue_id: int | None,
        level: int,
        *,
        dlq: bool = False,
    ) -> None:
        entry.update(
            real_topic=real_topic,
            real_queue_id=real_queue_id,
            delay_level=level,
            schedule_queue_id=level - 1,
            deliver_at=self.policy.levels.deliver_at(level, entry["store_time"]),
            dlq=dlq,
        )
        self.entries.append({"cluster": self.cluster, **entry})
        queue = self.waiting.setdefault(str(level), [])
        bisect.insort(queue, Waiting(**{f: entry[f] for f in Waiting._fields}), key=_order)

    def _dlq_now(self, entry: dict[str, Any], topic: str) -> None:
        entry.update(
            real_topic=topic,
            real_queue_id=0,
            delay_level=0,
            schedule_queue_id=None,
            deliver_at=entry["store_time"],
            dlq=True,
        )
        self._redeliver(entry)

    def _redeliver(self, entry: dict[str, Any]) -> None:
        self.redeliveries.append(
            {
                "cluster": self.cluster,
                **{k: v for k, v in entry.items() if k not in ("real_topic", "profile")},
                "target_topic": entry["real_topic"],
                "kafka_topic": kafka_topic(entry["real_topic"]),
                "broker_name": entry.get("broker_name"),
            }
        )

    # leaving

    def release(
        self, clock: int, route: Callable[[dict[str, Any]], str | None] | None = None
    ) -> None:
        """Each queue hands over its entries in order while the head is due. ``route`` (fault-
        aware release) names the broker each entry goes onto."""
        for level in sorted(self.waiting, key=int):
            queue = self.waiting[level]
            due = 0
            while due < len(queue) and queue[due].deliver_at - clock <= 0:
                due += 1
            for values in queue[:due]:
                entry = values._asdict()
                if route is not None:
                    entry["broker_name"] = route(entry)
                self._redeliver(entry)
            del queue[:due]
            if not queue:
                del self.waiting[level]
