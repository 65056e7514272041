"""Client profiles: RocketMQ's constants for 4.7.1, 4.9.7 and 5.x.

Latency bands (``MQFaultStrategy.latencyMax`` and ``notAvailableDuration``, @4.7.1:31-32,
@4.9.7:31-32, @HEAD:29-30), in ms:

* 4.x: latencies 50, 100, 550, 1000, 2000, 3000, 15000 map to isolations 0, 0, 30000, 60000,
  120000, 180000, 600000;
* 5.x: latencies 50, 100, 550, 1800, 3000, 5000, 15000 map to 0, 0, 2000, 5000, 6000, 10000,
  30000.

``computeNotAvailableDuration`` walks the bands from the last down and returns the isolation of
the first band whose bound the latency reaches (bounds are inclusive); below 50 ms, negative
latencies included, it returns 0. When an attempt is reported with ``isolation`` true,
``MQFaultStrategy.updateFaultItem`` looks the duration up with a substitute latency, 30000 in 4.x
(so 10 minutes; @4.7.1:97, @4.9.7:95) and 10000 in 5.x (so 10 s; @HEAD:167), while the
``FaultItem`` keeps the measured latency. The strategy does nothing while
``sendLatencyFaultEnable`` is off, its default in every profile (5.x reads it from the system
property ``com.rocketmq.sendLatencyEnable``, ``ClientConfig``@HEAD:99).

Broker response codes a SYNC send retries (``DefaultMQProducerImpl.sendDefaultImpl``@4.7.1:624,
then the set ``DefaultMQProducer.retryResponseCodes``, configurable since 4.9.2, @4.9.7:68,
@HEAD:77): 17 TOPIC_NOT_EXIST, 14 SERVICE_NOT_AVAILABLE, 1 SYSTEM_ERROR, 16 NO_PERMISSION,
204 NO_BUYER_ID, 205 NOT_IN_CURRENT_UNIT; 5.x adds 2 SYSTEM_BUSY (5.3.0, ISSUE #5838) and 1500
GO_AWAY (5.3.1, ISSUE #8599).

Names (``TopicValidator`` in ``common``, ``Validators`` before it): the system topics, to which 5.x
adds ``CHECKPOINT_TOPIC`` (any name starting ``rmq_sys_`` is one too); the topics a client may
not send to, only ``SCHEDULE_TOPIC_XXXX`` in 4.7.1 and six in 4.9.7 and 5.x; the group name
limit, 255 characters, 120 in 5.x (the development branch only: 5.3.3 still has 255).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Line = Literal["4.7", "4.9", "5"]
"""The behaviour family of a profile: ``4.7`` (4.7.1), ``4.9`` (4.9.7) or ``5`` (5.x)."""

_LATENCY_MAX_4 = (50, 100, 550, 1000, 2000, 3000, 15000)
_NOT_AVAILABLE_4 = (0, 0, 30000, 60000, 120000, 180000, 600000)
_LATENCY_MAX_5 = (50, 100, 550, 1800, 3000, 5000, 15000)
_NOT_AVAILABLE_5 = (0, 0, 2000, 5000, 6000, 10000, 30000)

# TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, NO_PERMISSION, NO_BUYER_ID,
# NOT_IN_CURRENT_UNIT; 5.x adds SYSTEM_BUSY and GO_AWAY.
_RETRY_CODES_4 = frozenset({17, 14, 1, 16, 204, 205})
_RETRY_CODES_5 = _RETRY_CODES_4 | {2, 1500}

_SYSTEM_TOPICS_4 = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
_NOT_ALLOWED_SEND_49 = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)


@dataclass(frozen=True)
class Profile:
    """One RocketMQ client/broker version's constants.

    Build a variant with custom latency bands through :meth:`with_latency_table`.

    >>> PROFILES["rocketmq-5"].isolation_latency
    10000
    """

    name: str
    line: Line
    version: str
    latency_max: tuple[int, ...]
    not_available_duration: tuple[int, ...]
    isolation_latency: int
    """The latency looked up instead of the measured one when ``isolation`` is true."""
    retry_response_codes: frozenset[int]
    group_max_length: int
    system_topics: frozenset[str]
    not_allowed_send_topics: frozenset[str]

    def __post_init__(self) -> None:
        if not self.latency_max or len(self.latency_max) != len(self.not_available_duration):
            raise ValueError(
                f"profile {self.name}: latency_max {list(self.latency_max)} and "
                f"not_available_duration {list(self.not_available_duration)} must be non-empty "
                "and of the same length"
            )

    @property
    def isolating_ms(self) -> int:
        """The lowest latency that isolates a broker (a band with a non-zero duration): a send
        this slow changes a decision, so a reporter sends it in full.

        >>> PROFILES["rocketmq-4.9"].isolating_ms, PROFILES["rocketmq-5"].isolating_ms
        (550, 550)
        """
        bands = zip(self.latency_max, self.not_available_duration, strict=True)
        return min((bound for bound, ms in bands if ms > 0), default=2**63 - 1)

    def with_latency_table(
        self,
        latency_max: Iterable[int],
        not_available_duration: Iterable[int],
        *,
        name: str | None = None,
    ) -> Profile:
        """The same profile with other latency bands (``MQFaultStrategy.setLatencyMax`` and
        ``setNotAvailableDuration``).

        >>> p = PROFILES["rocketmq-4.9"].with_latency_table([100], [5000])
        >>> p.name, p.not_available_duration
        ('rocketmq-4.9-custom', (5000,))
        """
        return dataclasses.replace(
            self,
            name=name or f"{self.name}-custom",
            latency_max=tuple(int(v) for v in latency_max),
            not_available_duration=tuple(int(v) for v in not_available_duration),
        )

    def is_system_topic(self, topic: str) -> bool:
        """``TopicValidator.isSystemTopic``."""
        return topic in self.system_topics or topic.startswith("rmq_sys_")


PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        "rocketmq-4.7": Profile(
            name="rocketmq-4.7",
            line="4.7",
            version="4.7.1",
            latency_max=_LATENCY_MAX_4,
            not_available_duration=_NOT_AVAILABLE_4,
            isolation_latency=30000,
            retry_response_codes=_RETRY_CODES_4,
            group_max_length=255,
            system_topics=_SYSTEM_TOPICS_4,
            not_allowed_send_topics=frozenset({"SCHEDULE_TOPIC_XXXX"}),
        ),
        "rocketmq-4.9": Profile(
            name="rocketmq-4.9",
            line="4.9",
            version="4.9.7",
            latency_max=_LATENCY_MAX_4,
            not_available_duration=_NOT_AVAILABLE_4,
            isolation_latency=30000,
            retry_response_codes=_RETRY_CODES_4,
            group_max_length=255,
            system_topics=_SYSTEM_TOPICS_4,
            not_allowed_send_topics=_NOT_ALLOWED_SEND_49,
        ),
        "rocketmq-5": Profile(
            name="rocketmq-5",
            line="5",
            version="5.x",
            latency_max=_LATENCY_MAX_5,
            not_available_duration=_NOT_AVAILABLE_5,
            isolation_latency=10000,
            retry_response_codes=_RETRY_CODES_5,
            group_max_length=120,
            system_topics=_SYSTEM_TOPICS_4 | {"CHECKPOINT_TOPIC"},
            not_allowed_send_topics=_NOT_ALLOWED_SEND_49,
        ),
    }
)
"""The three profiles by name."""


def not_available_duration(profile: Profile, latency_ms: int, isolation: bool = False) -> int:
    """``MQFaultStrategy.computeNotAvailableDuration`` (module docstring): the isolation in ms for a
    latency. With ``isolation`` the profile's substitute latency is looked up instead.

    >>> p = PROFILES["rocketmq-4.9"]
    >>> not_available_duration(p, 549), not_available_duration(p, 550)
    (0, 30000)
    >>> not_available_duration(p, 12, isolation=True)
    600000
    >>> not_available_duration(PROFILES["rocketmq-5"], 12, isolation=True)
    10000
    """
    latency = profile.isolation_latency if isolation else latency_ms
    for bound, duration in zip(
        reversed(profile.latency_max), reversed(profile.not_available_duration), strict=True
    ):
        if latency >= bound:
            return duration
    return 0
