"""What the engine needs to know besides the events, and the names it gives its scopes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from udfs.rocketmq import PROFILES, Profile, TransactionConfig, transaction_config
from udfs.schedule import DelayPolicy

CLUSTER = "cluster"
PRODUCER = "producer"
SCOPES = (CLUSTER, PRODUCER)
NO_ITEM = -(2**62)
"""``start`` of a broker removed from a table: available, not isolated."""

Route = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class Policies:
    """faultline's own rules over the cluster scope's decisions, beyond RocketMQ's strategy; each
    is off by default (see :mod:`udfs.engine._policies`)."""

    isolation_cap: float | None = None
    """At most this share of a topic's writable brokers isolated at once; the brokers isolated
    last while more are sick stay in the route (``PANIC``)."""
    outlier_factor: float | None = None
    """Isolate a broker whose mean latency over a window is at least this many times the median
    of its topic's brokers (``OUTLIER``)."""
    outlier_window_ms: int = 10_000
    outlier_min_sends: int = 5
    """Sends a broker needs in a window for its mean to count; a topic needs 3 such brokers."""
    outlier_min_latency_ms: int = 100
    """A mean below this is never an outlier, however far above the median."""
    outlier_isolation_ms: int = 30_000
    probe_share: float | None = None
    """Recovery probing: a broker whose isolation ends takes this share of the sends (``PROBE``)
    for as long as it was isolated, at most :attr:`probe_max_ms`, before it takes all of them."""
    probe_max_ms: int = 60_000
    fault_aware_release: bool = False
    """A message leaving a delay queue goes onto a broker of its topic that the cluster scope
    does not isolate at that instant (``redeliveries.broker_name``)."""
    report_queue_swaps: bool = False
    """A ``QUEUE_SWAP`` row (producer scope) each time RocketMQ 4.x rewrites a producer's queue
    to another broker in place (apache/rocketmq #7779)."""

    @property
    def decisions(self) -> bool:
        """Whether a policy changes the cluster scope's decisions."""
        return (self.isolation_cap, self.outlier_factor, self.probe_share) != (None, None, None)


@dataclass(frozen=True)
class BrokerTransactions:
    """The brokers' transaction settings where they differ from their version's defaults
    (:func:`udfs.rocketmq.transaction_config`); None keeps the default."""

    broker_release: str | None = None
    """The brokers' release (``"5.3.3"``, ``develop``): None follows each message's profile."""
    timeout_ms: int | None = None
    check_max: int | None = None
    check_interval_ms: int | None = None
    file_reserved_ms: int | None = None


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
    policies: Policies = field(default_factory=Policies)
    transactions: BrokerTransactions = field(default_factory=BrokerTransactions)

    def profile(self, name: str) -> Profile:
        return self.profiles[name]

    def broker_profile(self, name: Any) -> Profile:
        """The profile of the brokers a consumer sends back to: the event's ``client_profile``
        (the version of the cluster it talks to) or else ``cluster_profile``."""
        return self.profiles[name if isinstance(name, str) and name else self.cluster_profile]

    def transaction_config(self, profile: Profile) -> TransactionConfig:
        """The transaction settings of the brokers of ``profile``'s version, or of the release
        the brokers run."""
        t = self.transactions
        return transaction_config(
            profile,
            release=t.broker_release,
            timeout_ms=t.timeout_ms,
            check_max=t.check_max,
            check_interval_ms=t.check_interval_ms,
            file_reserved_ms=t.file_reserved_ms,
        )
