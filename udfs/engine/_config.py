"""What the engine needs to know besides the events, and the names it gives its scopes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from udfs.rocketmq import PROFILES, Profile
from udfs.schedule import DelayPolicy

CLUSTER = "cluster"
PRODUCER = "producer"
SCOPES = (CLUSTER, PRODUCER)
NO_ITEM = -(2**62)
"""``start`` of a broker removed from a table: available, not isolated."""

Route = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class EngineConfig:
    """What the state machine needs to know besides the events."""

    scopes: tuple[str, ...] = SCOPES
    cluster_profile: str = "rocketmq-5"
    """The profile of the shared cluster-wide view (5.x extends isolations; 4.x would let any
    fast success from any producer clear them)."""
    default_client_profile: str = "rocketmq-4.9"
    default_latency_fault_enable: bool = True
    allowed_lateness_ms: int = 60_000
    max_future_skew_ms: int = 3_600_000
    heartbeat_timeout_ms: int = 120_000
    scan_interval_ms: int = 10_000
    evict_after_ms: int | None = 3_600_000
    """A producer instance that sends nothing for this long (event time) is forgotten; ``None``
    keeps every producer for ever."""
    static_routes: Mapping[str, Route] = field(default_factory=dict)
    profiles: Mapping[str, Profile] = field(default_factory=lambda: dict(PROFILES))
    seed: int = 0
    delays: DelayPolicy = field(default_factory=DelayPolicy)
    send_msg_timeout_ms: int = 3_000
    """The producers' ``sendMsgTimeout``: the budget of a whole send, all attempts together."""
    ignore_spent_budget: bool = True
    """The cluster scope does not take a retry's failure that the send's spent budget explains
    (see :func:`udfs.engine._producers.spent_budget`); the producer scope does, as RocketMQ."""

    def profile(self, name: str) -> Profile:
        return self.profiles[name]

    def broker_profile(self, name: Any) -> Profile:
        """The profile of the brokers a consumer sends back to: the event's ``client_profile``
        (the version of the cluster it talks to) or else ``cluster_profile``."""
        return self.profiles[name if isinstance(name, str) and name else self.cluster_profile]
