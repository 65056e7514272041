"""Configuration: one validated, frozen object per file kind (job settings, scenarios).

Unknown keys are errors. Every error names the file (or the command-line flag), the dotted key,
the value and what is allowed, and stops the job before Spark starts.

A job setting is a field of :class:`JobConfig` (or of one of its blocks) with its description
below it. From the field come its key in the YAML, its flag of ``faultline run``
(:func:`add_setting_flags`) and, when the engine has a field of that name, the engine's setting
(:func:`engine_config`).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import types
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from udfs.errors import ConfigError
from udfs.rocketmq import (
    DEFAULT_DELAY_LEVELS,
    PROFILES,
    DelayLevelError,
    DelayLevels,
    transaction_config,
)

if TYPE_CHECKING:
    from udfs import engine

_PACKAGE = Path(__file__).resolve().parent
CONF_DIR = _PACKAGE / "conf" if (_PACKAGE / "conf").is_dir() else _PACKAGE.parent / "conf"
"""faultline's configuration and scenarios: ``conf/`` at the top of a source checkout, which an
installed wheel holds inside the package (``streaming/conf``)."""
DEFAULT_CONFIG = CONF_DIR / "faultline.yaml"
SCENARIO_DIR = CONF_DIR / "scenarios"

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def _duration(value: Any) -> Any:
    """A duration in ms: ``500ms``, ``0.5s``, ``2m``, or a whole number of ms."""
    if isinstance(value, str):
        match = _DURATION.fullmatch(value.strip())
        ms = Decimal(match.group(1)) * _UNITS[match.group(2)] if match else None
        if ms is None or ms != ms.to_integral_value():
            raise ValueError(
                "a duration is a whole number of ms, or a number with ms, s, m, h or d "
                "that makes whole ms"
            )
        return int(ms)
    return value


def duration_flag(flag: str, value: str) -> int:
    """A command-line duration (``5s``, ``500ms``, ``24h``) in ms, or a :class:`ConfigError`
    naming the flag."""
    try:
        return int(_duration(value))
    except ValueError as exc:
        raise ConfigError(f"{flag} {value!r}: {exc}") from None


def _epoch_ms(value: Any) -> Any:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, str):
        try:
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            raise ValueError("a time is ms since the epoch or an ISO-8601 string") from None
    return value


Duration = Annotated[NonNegativeInt, BeforeValidator(_duration)]
EpochMs = Annotated[int, BeforeValidator(_epoch_ms)]
ProfileName = Literal["rocketmq-4.7", "rocketmq-4.9", "rocketmq-5"]
Outcome = Literal[
    "FLUSH_DISK_TIMEOUT",
    "FLUSH_SLAVE_TIMEOUT",
    "SLAVE_NOT_AVAILABLE",
    "REMOTING_EXCEPTION",
    "CLIENT_EXCEPTION",
    "BROKER_EXCEPTION",
]


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )


# --- scenarios --------------------------------------------------------------------------------


class BrokerSpec(_Strict):
    name: str
    write_queues: PositiveInt = 4
    perm: int = 6
    latency_ms: tuple[NonNegativeInt, NonNegativeInt] = (5, 30)


class TopicSpec(_Strict):
    name: str
    brokers: list[str]


def _span(value: Any) -> Any:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return (value, value)
    return value


Span = Annotated[tuple[Duration, Duration], BeforeValidator(_span)]
"""A duration, or ``[low, high]``: drawn uniformly, in whole ms, each time."""
Fraction = Annotated[float, Field(ge=0, le=1)]
SHORTEST_CHECK_INTERVAL = min(transaction_config(p).check_interval_ms for p in PROFILES.values())
"""The shortest default ``transactionCheckInterval`` (5.x brokers': 30 s)."""


class TransactionSpec(_Strict):
    """A transactional producer (``sendMessageInTransaction``): each message is a half message,
    its local transaction decides the end, and it answers the brokers' check-backs."""

    commit: Fraction = 1.0
    """Share of local transactions that return ``COMMIT_MESSAGE``."""
    rollback: Fraction = 0.0
    """... ``ROLLBACK_MESSAGE``."""
    unknown: Fraction = 0.0
    """... ``UNKNOW``: the end leaves the half message waiting for a check."""
    local_ms: Span = (10, 100)
    """How long the local transaction runs (the send call waits for it)."""
    unknown_answers: NonNegativeInt = 1
    """A message whose local transaction returned ``UNKNOW`` is answered ``UNKNOW`` this many
    times, then ``COMMIT_MESSAGE``."""
    never_every: NonNegativeInt = 0
    """Every n-th such message is answered ``UNKNOW`` for ever (the broker discards it); 0:
    none."""
    answer_ms: Span = (1, 20)
    """From a check's wake to the producer's answer at the broker."""

    @model_validator(mode="after")
    def _consistent(self) -> TransactionSpec:
        total = self.commit + self.rollback + self.unknown
        if abs(total - 1) > 1e-9:
            raise ValueError(
                f"commit + rollback + unknown must add up to 1, not {total:g} "
                f"({self.commit:g} + {self.rollback:g} + {self.unknown:g})"
            )
        for key in ("local_ms", "answer_ms"):
            low, high = getattr(self, key)
            if low > high:
                raise ValueError(f"{key}: [low, high] with low <= high, not [{low}, {high}]")
        if self.answer_ms[1] >= SHORTEST_CHECK_INTERVAL:
            raise ValueError(
                f"answer_ms: an answer must come before the next check "
                f"({SHORTEST_CHECK_INTERVAL} ms on 5.x brokers), not up to {self.answer_ms[1]} ms"
            )
        return self


class ProducerSpec(_Strict):
    id: str
    group: str
    profile: ProfileName
    latency_fault_enable: bool = True
    topic: str
    transactions: TransactionSpec | None = None
    """A transactional producer: SYNC only, without delay levels (a half message is never
    delayed)."""
    mode: Literal["SYNC", "ASYNC"] = "SYNC"
    interval: Duration = 100
    body_size: PositiveInt = 512
    delay_every: NonNegativeInt = 0
    """Every n-th message asks for ``delay_level``; 0: none."""
    delay_level: int = 0
    strategy: Literal["own", "off", "faultline"] = "own"
    """How the producer picks queues: ``own``, its profile's strategy with its latency fault
    switch; ``off``, the switch off; ``faultline``, its own strategy, also avoiding the brokers
    the cluster scope's decisions isolate, as read from the decision topic (the simulator runs
    the engine alongside and shows the producer each decision ``decision_delay`` after it)."""
    instances: PositiveInt = 1
    """This many producers alike, ``<id>-0000`` onwards (each with its own random stream)."""
    reporting: Literal["full", "summary"] | None = None
    """How the producer reports its sends (:class:`streaming.client.Reporter`): ``full``, one
    ``send_result`` per attempt; ``summary``, in full only what can change a decision and the
    rest in summaries; None follows the scenario's ``reporting``."""

    @field_validator("mode")
    @classmethod
    def _transactional_is_sync(cls, value: str, info: ValidationInfo) -> str:
        if value != "SYNC" and info.data.get("transactions") is not None:
            raise ValueError(
                "a transactional producer sends SYNC (sendMessageInTransaction): mode SYNC"
            )
        return value

    @field_validator("delay_every")
    @classmethod
    def _transactional_is_not_delayed(cls, value: int, info: ValidationInfo) -> int:
        if value and info.data.get("transactions") is not None:
            raise ValueError(
                "a transactional producer's half messages are never delayed (the client clears "
                "DELAY): delay_every 0"
            )
        return value

    def expand(self) -> list[ProducerSpec]:
        if self.instances == 1:
            return [self]
        return [
            self.model_copy(update={"id": f"{self.id}-{i:04d}", "instances": 1})
            for i in range(self.instances)
        ]


class ConsumerSpec(_Strict):
    group: str
    topic: str
    lag: Duration = 50
    """Time from a message's storage to its consumption."""
    fail_every: NonNegativeInt = 0
    """Every n-th message fails (RECONSUME_LATER); 0: none."""
    fail_times: NonNegativeInt = 1
    """How many consumptions of such a message fail before one succeeds."""


class FaultSpec(_Strict):
    type: Literal["latency_spike", "outage", "flapping", "slow", "heartbeat_stop"]
    broker: str
    at: Duration
    duration: Duration = Field(alias="for")
    latency_ms: tuple[NonNegativeInt, NonNegativeInt] | None = None
    outcome: Outcome = "REMOTING_EXCEPTION"
    response_code: int | None = None
    period: Duration = 10_000

    @model_validator(mode="after")
    def _needs_latency(self) -> FaultSpec:
        if self.type in ("latency_spike", "slow") and self.latency_ms is None:
            raise ValueError(f"a {self.type} fault needs latency_ms: [low, high]")
        return self


class Scenario(_Strict):
    name: str
    description: str = ""
    seed: int = 0
    start: EpochMs
    duration: Duration
    tail: Duration = 0
    """Heartbeats go on this long after the traffic stops, so every isolation can end."""
    cluster: str = "DefaultCluster"
    heartbeat_interval: Duration = 30_000
    brokers: list[BrokerSpec]
    topics: list[TopicSpec]
    producers: list[ProducerSpec]
    consumers: list[ConsumerSpec] = []
    faults: list[FaultSpec] = []
    reporting: Literal["full", "summary"] = "full"
    """How producers (unless they say otherwise) and consumers report: one event per send or
    consume, or summaries of what cannot change a decision."""
    decision_delay: Duration = 2_000
    """For ``faultline`` producers: from a decision's event time to when they act on it (the
    job's trigger interval plus its batch time; measured at 1.3 to 3.3 s)."""

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        brokers = {b.name for b in self.brokers}
        topics = {t.name for t in self.topics}
        for i, topic in enumerate(self.topics):
            for b in topic.brokers:
                if b not in brokers:
                    raise ValueError(
                        f"topics[{i}].brokers: {b!r} is not one of the brokers {sorted(brokers)}"
                    )
        users = [("producers", i, p.topic) for i, p in enumerate(self.producers)]
        users += [("consumers", i, c.topic) for i, c in enumerate(self.consumers)]
        for kind, i, used in users:
            if used not in topics:
                raise ValueError(f"{kind}[{i}].topic: {used!r} is not one of {sorted(topics)}")
        for i, fault in enumerate(self.faults):
            if fault.broker not in brokers:
                raise ValueError(
                    f"faults[{i}].broker: {fault.broker!r} is not one of {sorted(brokers)}"
                )
        return self


# --- the job ----------------------------------------------------------------------------------


class RouteBroker(_Strict):
    broker_name: str
    write_queue_nums: PositiveInt
    perm: int = 6


Share = Annotated[float, Field(gt=0, lt=1)]


class PoliciesConfig(_Strict):
    """faultline's own rules over the cluster scope's decisions (``udfs.engine._policies``): on
    by default, each off while its first key is null, and all of them off with ``enabled:
    false`` (RocketMQ's rules alone)."""

    enabled: bool = True
    """False: every policy below is off, whatever its value: the decisions are RocketMQ's."""
    isolation_cap: Share | None = 0.5
    """At most this share of a topic's writable brokers isolated at once (0.5: half)."""
    latency_outlier_factor: Annotated[float, Field(gt=1)] | None = 3.0
    """Isolate a broker whose mean latency over a window is this many times its topic's median."""
    latency_outlier_window: Duration = 10_000
    """The windows of event time over which a broker's mean latency is measured: a multiple of
    the producers' summary window (``streaming.client.WINDOW_MS``, 10 s), or a summary that
    straddles two outlier windows counts in the one of its last send."""
    latency_outlier_min_sends: PositiveInt = 5
    """Answered sends a broker needs in a window for its mean to count."""
    latency_outlier_min_latency: Duration = 100
    """A mean below this is never an outlier, however far above the median."""
    latency_outlier_isolation: Duration = 30_000
    """How long an outlier is isolated (``OUTLIER``)."""
    recovery_probe_share: Share | None = 0.25
    """A broker whose isolation ends takes this share of the sends for as long as it was
    isolated (at most ``recovery_probe_max``), then all of them."""
    recovery_probe_max: Duration = 10_000
    """The longest a broker whose isolation ends takes only its share of the sends."""
    fault_aware_release: bool = True
    """A message leaving a delay queue goes onto a broker the cluster scope does not isolate
    then (``redeliveries.broker_name``)."""
    report_queue_swaps: bool = False
    """A ``QUEUE_SWAP`` row each time RocketMQ 4.x rewrites a producer's queue to another broker
    (apache/rocketmq #7779)."""

    @field_validator("latency_outlier_window")
    @classmethod
    def _window_positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("the window must be more than 0 ms, e.g. 10s")
        return value


class MaintenanceConfig(_Strict):
    """Keeping the Delta tables fast over months (``streaming.job.maintain``)."""

    every: NonNegativeInt = 100
    """The job maintains its tables after every this many micro-batches (0: only
    ``faultline maintain`` does)."""
    min_files: Annotated[int, Field(ge=2)] = 20
    """A day of a table (or an unpartitioned table) is compacted once it holds this many files
    smaller than ``target_file_size``."""
    target_file_size: Annotated[int, Field(ge=1 << 20)] = 64 << 20
    """Bytes: compaction writes files up to this size."""
    checkpoint_interval: PositiveInt = 100
    """Commits between Delta log checkpoints (``delta.checkpointInterval``)."""
    vacuum_retention: Duration = 7 * 86_400_000
    """Files that compaction replaced stay this long for readers of older versions, then VACUUM
    deletes them (``delta.deletedFileRetentionDuration``)."""
    log_commits: PositiveInt = 300
    """About how many commits of Delta log a table keeps: at each log checkpoint, the entries
    older than this many triggers (``trigger_interval``) go (``delta.logRetentionDuration``),
    so time travel reaches that far back. Every commit lists the log, so its time grows with
    the log's length, not with its age (a month at the default trigger is 5 million
    entries)."""
    keep: Annotated[int, Field(ge=86_400_000), BeforeValidator(_duration)] | None = 90 * 86_400_000
    """Event time: a table keeps the days of rows that end within this of its latest day (a
    partition, ``event_date``; ``batches``: its rows by ``clock``); older days are deleted.
    Null: every row is kept for ever."""

    @field_validator("vacuum_retention")
    @classmethod
    def _at_least_an_hour(cls, value: int) -> int:
        if value < 3_600_000:
            raise ValueError(
                "must be 1h or more: a reader or a batch in flight must not lose its files"
            )
        return value


class TransactionsConfig(_Strict):
    """The brokers' transaction settings (``BrokerConfig``), where they differ from their
    version's defaults (null: the default of the profile: 6 s, 15 checks, every 60 s in 4.x and
    30 s in 5.x, 72 h)."""

    broker_release: str | None = None
    """The brokers' RocketMQ release (``5.3.3``, ``5.1.0``, ``4.9.7``, or ``develop``), where it
    is not the one each message's client profile follows (``5.3.3`` for ``rocketmq-5``)."""
    transaction_timeout: Duration | None = None
    """``transactionTimeOut``: a half message younger than this is not checked."""
    check_max: NonNegativeInt | None = None
    """``transactionCheckMax``: checks before the broker discards a half message."""
    check_interval: Annotated[int, Field(ge=1), BeforeValidator(_duration)] | None = None
    """``transactionCheckInterval``: how often the broker's check service wakes."""
    file_reserved_time: Duration | None = None
    """``fileReservedTime``: an older half message is skipped, never checked."""

    @field_validator("broker_release")
    @classmethod
    def _known_release(cls, value: str | None) -> str | None:
        from udfs.rocketmq import broker_release

        if value is not None:
            broker_release(value)  # a ValueError names the releases it knows
        return value


class MetricsConfig(_Strict):
    """The job's Prometheus endpoint (``streaming.job.metrics``), off unless ``port`` is set."""

    port: Annotated[int, Field(ge=0, le=65535)] | None = None
    """Serve ``/metrics`` on this port (0: any free port, printed at start); null: no endpoint."""
    host: str = "127.0.0.1"
    """The address to listen on: ``0.0.0.0`` for a Prometheus on another machine."""
    linger: Duration = 0
    """After a run that ends (the simulator, ``once``), keep serving this long, so that a last
    scrape sees its end."""


class JobConfig(_Strict):
    source: Literal["simulator", "files", "kafka"] = "simulator"
    """Where the send results come from: the simulator's scenario, a folder of files, or Kafka."""
    path: str | None = None
    """The files source: a folder of JSON-lines or Parquet files."""
    scenario: str = "default"
    """The simulator's scenario: ``conf/scenarios/NAME.yaml``, or a path."""
    reporting: Literal["full", "summary"] | None = None
    """How the simulator's producers and consumers report, for the whole scenario: one record
    per send (``full``) or summaries of what cannot change a decision (``summary``); None
    keeps the scenario's own."""
    output: str = "output"
    """The root of the Delta tables."""
    checkpoint: str = "checkpoints"
    """The root of Spark's checkpoint; it belongs to one source and one scenario."""
    once: bool = False
    """Process what is there, then stop."""
    scope: Literal["cluster", "producer", "both"] = "both"
    """Whose decisions: the cluster's shared view, each producer's own, or both."""
    master: str = "local[*]"
    """Spark's master URL."""
    max_records_per_batch: PositiveInt = 20_000
    """Records per micro-batch at most."""
    shuffle_partitions: PositiveInt = 2
    """Tasks of the stateful stage. Fixed for a checkpoint."""
    min_batches_to_retain: PositiveInt = 100
    """Spark's ``minBatchesToRetain``: the checkpoint keeps the state after this many recent
    batches, so ``faultline replay`` can start that far back."""
    stateful_shards: PositiveInt = 1
    """Keys of the stateful operator per RocketMQ cluster: its producers' own scope is split
    over them (see ``udfs.engine._shards``), so one cluster's work runs in that many tasks.
    Fixed for a checkpoint, as is ``shuffle_partitions``."""
    state_store: Literal["hdfs", "rocksdb"] = "hdfs"
    """Where Spark keeps the operator state: ``hdfs``, Spark's default (every key's state in the
    executors' memory, a file of changed keys per batch); ``rocksdb``, RocksDB on the executors'
    disks with changelog checkpointing. Fixed for a checkpoint."""
    cluster_profile: ProfileName = "rocketmq-5"
    """The profile of the cluster scope's shared view (5.x extends isolations)."""
    default_client_profile: ProfileName = "rocketmq-4.9"
    """The profile of events without ``client_profile``."""
    default_latency_fault_enable: bool = True
    """The latency fault switch of events without ``latency_fault_enable``."""
    allowed_lateness: Duration = 60_000
    """An event older than the cluster's clock minus this goes to ``late_events``."""
    max_future_skew: Duration = 3_600_000
    """An event later than its record's ingest time plus this goes to ``quarantine``."""
    send_msg_timeout: Duration = 3_000
    """The producers' ``sendMsgTimeout``: the budget of a whole send, all attempts together."""
    heartbeat_timeout: Duration = 120_000
    """The NameServer drops a broker this long after its last heartbeat (RocketMQ's default 120 s;
    a broker with ``enableSlaveActingMaster`` sets its own, ``brokerNotActiveTimeoutMillis``)."""
    scan_interval: Duration = 10_000
    """How often the NameServer looks for brokers to drop (4.x: 10 s; 5.x:
    ``scanNotActiveBrokerInterval``, 5 s)."""
    ignore_spent_budget: bool = True
    """The cluster scope does not isolate a broker for a retry that failed only because the
    send's budget ran out (RocketMQ does, and so does the producer scope)."""
    policies: PoliciesConfig = PoliciesConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    transactions: TransactionsConfig = TransactionsConfig()
    metrics: MetricsConfig = MetricsConfig()
    sink: Literal["delta-rs", "delta-spark"] = "delta-rs"
    """Who commits to the Delta tables: faultline's own writer (delta-rs, no jars), or Spark's
    Delta Lake data source, on a cluster that has its jars (``streaming.job.sink_spark``)."""
    seed: int = 0
    """The seed of the engine's random draws (each draw is also seeded by its event)."""
    static_routes: dict[str, list[RouteBroker]] = {}
    """Topics' routes before their first route event: ``{topic: [{broker_name,
    write_queue_nums, perm}]}``; route events override them."""
    progress_interval: Duration = 2_000
    """How often the progress line may be printed."""
    trigger_interval: Duration = 500
    """How often the running job (Kafka or files, without ``once``) starts a micro-batch: Spark's
    processing-time trigger. The simulator and ``once`` read what is there and stop."""

    @field_validator("trigger_interval")
    @classmethod
    def _trigger_interval_positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("the trigger interval must be more than 0 ms, e.g. 500ms or 1s")
        return value

    evict_silent_producers_after: Duration = 3_600_000
    """A producer instance (a ``producer_id``: one per process) that sends nothing for this long,
    in event time, is forgotten, with an ``EVICTED`` row; if it sends again it starts afresh."""

    @field_validator("evict_silent_producers_after")
    @classmethod
    def _outlasts_every_isolation(cls, value: int) -> int:
        longest = max(max(p.not_available_duration) for p in PROFILES.values())
        if value <= longest:
            raise ValueError(
                f"must be longer than the longest isolation ({longest} ms), so that no producer "
                "is forgotten while one of its isolations lasts; e.g. 1h"
            )
        return value

    delay_levels: str = DEFAULT_DELAY_LEVELS
    """RocketMQ's ``messageDelayLevel``: level n is the n-th space-separated delay."""
    max_redeliveries: NonNegativeInt = 16
    """A message whose send failed is rescheduled this many times, then goes to the DLQ."""

    @field_validator("delay_levels")
    @classmethod
    def _delay_levels_parse(cls, value: str) -> str:
        try:
            DelayLevels.parse(value)
        except DelayLevelError as exc:
            raise ValueError(str(exc)) from None
        return value

    kafka_bootstrap: str | None = None
    """Kafka's ``bootstrap.servers``: the source's cluster, and where the outputs go."""
    topic: str | None = None
    """The Kafka source's topics (``subscribe``: comma-separated)."""
    subscribe_pattern: str | None = None
    """The Kafka source's topics as a pattern (``subscribePattern``), instead of ``topic``."""
    starting_offsets: str = "earliest"
    """Where the Kafka source starts without a checkpoint: ``earliest``, ``latest`` or JSON
    ``{"topic": {"0": 42}}``."""
    max_offsets_per_trigger: PositiveInt | None = None
    """Records per micro-batch from Kafka (default: ``max_records_per_batch``)."""
    fail_on_data_loss: bool = True
    """Offsets that retention deleted before they were read fail the query; false: each lost
    range is one ``quarantine`` row."""
    kafka_options: dict[str, str] = {}
    """librdkafka settings for every Kafka client (security: ``security.protocol``,
    ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``, ...); Spark's
    Kafka source gets them in the Java client's words (``streaming.job.kafka_options``)."""
    kafka_source_options: dict[str, str] = {}
    """Options of Spark's Kafka source, verbatim, over those made from ``kafka_options``
    (``kafka.ssl.keystore.location``, ``kafka.sasl.jaas.config``, ``minPartitions``, ...)."""
    decisions_topic: str = "faultline.decisions"
    """Compacted topic for the broker states and routing tables ("" for none)."""
    kafka_outputs: bool = True
    """With ``kafka_bootstrap``: publish decisions and redeliveries to Kafka."""
    kafka_outage_log_interval: Duration = 30_000
    """While Kafka does not answer, the job waits and says so once per this interval."""
    kafka_outage_timeout: Duration | None = None
    """Give up (fail the job) after waiting this long for Kafka; null: wait for ever."""

    @field_validator("kafka_outage_log_interval", "kafka_outage_timeout")
    @classmethod
    def _outage_positive(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError("must be more than 0 ms, e.g. 30s")
        return value

    @model_validator(mode="after")
    def _sources_need_their_settings(self) -> JobConfig:
        if self.source == "files" and not self.path:
            raise ValueError(
                "source files needs path (--path DIR): the folder of JSON-lines or Parquet files"
            )
        if self.source == "kafka":
            if not self.kafka_bootstrap:
                raise ValueError("source kafka needs kafka_bootstrap (--kafka-bootstrap HOST:PORT)")
            if bool(self.topic) == bool(self.subscribe_pattern):
                raise ValueError(
                    "source kafka needs exactly one of topic (--topic) and subscribe_pattern "
                    "(--subscribe-pattern)"
                )
        return self

    def kafka_conf(self) -> dict[str, str]:
        """librdkafka settings for every client: ``kafka_options`` plus the bootstrap servers."""
        return {**self.kafka_options, "bootstrap.servers": str(self.kafka_bootstrap)}

    @property
    def scopes(self) -> tuple[str, ...]:
        return ("cluster", "producer") if self.scope == "both" else (self.scope,)


ENGINE_NAMES = {
    "allowed_lateness": "allowed_lateness_ms",
    "max_future_skew": "max_future_skew_ms",
    "evict_silent_producers_after": "evict_after_ms",
    "send_msg_timeout": "send_msg_timeout_ms",
    "heartbeat_timeout": "heartbeat_timeout_ms",
    "scan_interval": "scan_interval_ms",
    "policies.latency_outlier_factor": "outlier_factor",
    "policies.latency_outlier_window": "outlier_window_ms",
    "policies.latency_outlier_min_sends": "outlier_min_sends",
    "policies.latency_outlier_min_latency": "outlier_min_latency_ms",
    "policies.latency_outlier_isolation": "outlier_isolation_ms",
    "policies.recovery_probe_share": "probe_share",
    "policies.recovery_probe_max": "probe_max_ms",
    "transactions.transaction_timeout": "timeout_ms",
    "transactions.check_interval": "check_interval_ms",
    "transactions.file_reserved_time": "file_reserved_ms",
}
"""The engine's name for a setting, where it is not the setting's key (the engine's durations end
in ``_ms``). Every other setting reaches the engine's field of its own name, if there is one."""


def engine_config(config: JobConfig) -> engine.EngineConfig:
    """What the engine needs of the job's settings: each setting the engine has a field for, under
    its engine name, and the few built from others."""
    from udfs import engine  # with pandas, which `faultline --help` must not wait for
    from udfs.schedule import DelayPolicy

    rules = config.policies
    policies = engine.Policies(**_for_engine(rules, engine.Policies, "policies."))
    return engine.EngineConfig(
        **_for_engine(
            config,
            engine.EngineConfig,
            scopes=config.scopes,
            static_routes={
                topic: tuple((b.broker_name, b.write_queue_nums, b.perm) for b in brokers)
                for topic, brokers in config.static_routes.items()
            },
            delays=DelayPolicy(DelayLevels.parse(config.delay_levels), config.max_redeliveries),
            policies=policies if rules.enabled else engine.Policies(),  # RocketMQ's rules alone
            transactions=engine.BrokerTransactions(
                **_for_engine(config.transactions, engine.BrokerTransactions, "transactions.")
            ),
        )
    )


def _for_engine(settings: BaseModel, target: Any, block: str = "", **built: Any) -> dict[str, Any]:
    """The arguments of ``target`` (a dataclass of the engine): ``built``, and each of the
    ``settings`` it has a field for, under the engine's name."""
    fields = {f.name for f in dataclasses.fields(target)}
    named = {ENGINE_NAMES.get(block + key, key): key for key in type(settings).model_fields}
    same = {name: getattr(settings, key) for name, key in named.items() if name in fields}
    return {**same, **built}


# --- flags ------------------------------------------------------------------------------------


def setting_fields(
    model: type[BaseModel] = JobConfig, block: str = ""
) -> Iterator[tuple[str, FieldInfo]]:
    """Each setting of ``model`` by its dotted key (``policies.isolation_cap``), with its field."""
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from setting_fields(field.annotation, f"{block}{name}.")
        else:
            yield block + name, field


def add_setting_flags(parser: argparse.ArgumentParser, model: type[BaseModel] = JobConfig) -> None:
    """A flag for each setting of ``model``, made from its field: ``--max-records-per-batch``
    sets ``max_records_per_batch``, ``--policies.isolation-cap`` sets ``policies.isolation_cap``,
    ``--once`` and ``--no-once`` set a yes/no setting. The help is the field's description; the
    text is left to the field's own validation (``5s`` for a duration, whose whole numbers are
    ms), or read as YAML for a mapping or a list. The settings given end up in
    ``args.settings``, by key."""
    parser.set_defaults(settings={})
    groups: dict[str, Any] = {}
    for key, field in setting_fields(model):
        parts = [*_parts(field.annotation), *field.metadata]
        yes_no, metavar = bool in parts, _metavar(parts)
        head, dot, name = key.rpartition(".")
        names = [f"--{key}"] + ([f"--{head}{dot}no-{name}"] if yes_no else [])
        if head not in groups:  # a group per block of the YAML, as conf/faultline.yaml has them
            block = model.model_fields[head].annotation if head else None
            groups[head] = parser.add_argument_group(
                f"{head} settings" if head else "settings",
                (block.__doc__ or "").split("\n\n")[0].replace("``", "").replace("%", "%%")
                if head
                else None,
            )
        default = _shown_default(field, metavar, yes_no)
        groups[head].add_argument(
            *(n.replace("_", "-") for n in names),
            action=_Setting,
            key=key,
            dest=key.partition(".")[0],  # the key of the YAML's top level that it sets
            default=argparse.SUPPRESS,
            nargs=0 if yes_no else None,
            metavar=None if yes_no else metavar,
            type={"DURATION": _ms, "YAML": _yaml}.get(metavar, str),
            help=(field.description or "").replace("``", "").replace("%", "%%") + default,
        )


def _shown_default(field: FieldInfo, metavar: str, yes_no: bool) -> str:
    """`` (default: 30s)`` for a flag's help: a duration in its largest whole unit, a switch on
    or off; nothing for a setting that has none."""
    value = field.get_default(call_default_factory=True)
    if value is None or value in ({}, []):
        return ""
    if yes_no:
        text = "on" if value else "off"
    elif metavar == "DURATION" and isinstance(value, int):
        text = next(
            (f"{value // ms}{unit}" for ms, unit in _LARGEST_FIRST if value and value % ms == 0),
            f"{value}ms",
        )
    else:
        text = str(value)
    return f" (default: {text})".replace("%", "%%")


_LARGEST_FIRST = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s"))


class _Setting(argparse.Action):
    """Keeps a flag's value in ``args.settings`` under its key (a yes/no flag takes none)."""

    def __init__(self, *args: Any, key: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key = key

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        value = option_string == self.option_strings[0] if self.nargs == 0 else values
        namespace.settings = {**namespace.settings, self.key: value}


def _parts(annotation: Any) -> Iterator[Any]:
    """The types and markers a type is made of: ``Duration | None`` gives int, its bound, the
    duration parser and None."""
    if get_origin(annotation) is Annotated:
        inner, *markers = get_args(annotation)
        yield from _parts(inner)
        yield from markers
    elif get_origin(annotation) in (Union, types.UnionType):
        for arg in get_args(annotation):
            yield from _parts(arg)
    else:
        yield annotation


def _metavar(parts: list[Any]) -> str:
    """How a flag's value is shown in ``--help``: its choices, DURATION, YAML, or its type."""
    for part in parts:
        if get_origin(part) is Literal:
            return "{" + ",".join(get_args(part)) + "}"
        if isinstance(part, BeforeValidator) and part.func is _duration:
            return "DURATION"
        if get_origin(part) in (dict, list):
            return "YAML"
    return next(part.__name__.upper() for part in parts if isinstance(part, type))


def _ms(text: str) -> int | str:
    """A duration flag's text: a whole number is ms, as in the YAML; ``5s`` is left to the field."""
    return int(text) if text.isdigit() else text


def _yaml(text: str) -> Any:
    """A mapping or list flag's text, read as YAML."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"not YAML: {exc}") from None


# --- loading ----------------------------------------------------------------------------------


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    return data


_SECRET = re.compile(r"password|secret|jaas|token|credential|key$", re.IGNORECASE)


SECRET_SETTINGS = ("kafka_options", "kafka_source_options")
"""Settings whose values may hold secrets (masked wherever the job prints or records them)."""


def masked(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Client settings fit to print: secrets replaced by ``***``.

    >>> masked({"sasl.password": "hunter2", "bootstrap.servers": "k:9092"})
    {'sasl.password': '***', 'bootstrap.servers': 'k:9092'}
    """
    return {k: "***" if _SECRET.search(str(k)) else v for k, v in conf.items()}


_WORDS: dict[str, str] = {
    "greater_than": "must be more than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "literal_error": "must be {expected}",
    "enum": "must be {expected}",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text",
    "missing": "is required",
    "dict_type": "must be a mapping of keys to values",
    "list_type": "must be a list",
}
"""pydantic's error types in the project's words (the rest keep pydantic's message)."""


def _words(item: Any, model: type[BaseModel]) -> str:
    """What is wrong with one setting, in the project's words: a rule of ours as it says it, an
    unknown key with the known key it most resembles."""
    kind = item["type"]
    if kind == "value_error":
        return str(item["ctx"]["error"])
    if kind == "extra_forbidden":
        known = _keys_at(model, [str(p) for p in item["loc"][:-1]])
        close = difflib.get_close_matches(str(item["loc"][-1]), known, n=1, cutoff=0.6)
        return "unknown key" + (f"; did you mean {close[0]}?" if close else "")
    words = _WORDS.get(kind)
    try:
        return words.format(**item.get("ctx", {})) if words else str(item["msg"])
    except (KeyError, IndexError):
        return str(item["msg"])


def _keys_at(model: type[BaseModel], path: list[str]) -> list[str]:
    """The keys a block at ``path`` of ``model`` takes (none when the path leads elsewhere than
    a block: a list, a mapping)."""
    for key in path:
        field = model.model_fields.get(key)
        block = getattr(field, "annotation", None)
        if not (isinstance(block, type) and issubclass(block, BaseModel)):
            return []
        model = block
    return list(model.model_fields)


def _explain(
    error: ValidationError, where: Mapping[str, str], default: str, model: type[BaseModel]
) -> ConfigError:
    lines = []
    for item in error.errors():
        keys = [str(p) for p in item["loc"]]
        loc = ".".join(keys)
        origin = where.get(".".join(keys[:2])) or where.get(".".join(keys[:1]), default)
        value = item.get("input")
        if item["loc"] and item["loc"][0] in SECRET_SETTINGS:  # never echo their secrets
            if len(item["loc"]) > 1:
                value = masked({str(item["loc"][1]): value}).popitem()[1]
            else:
                value = masked(value) if isinstance(value, Mapping) else "***"
        shown = "(missing)" if item["type"] == "missing" else repr(value)
        message = _words(item, model)
        if not keys:  # a rule over several settings: its value would be the whole configuration
            origins = [o for k, o in where.items() if k in message] or [default]
            lines.append(f"{', '.join(origins)}: {message}")
            continue
        lines.append(f"{origin}: {loc} = {shown}: {message}")
    return ConfigError("\n".join(lines))


def load_job_config(
    path: str | Path | None = None, overrides: Mapping[str, Any] | None = None
) -> JobConfig:
    """Read the job's YAML (``conf/faultline.yaml`` when ``path`` is None) and apply the
    command-line ``overrides`` (key -> value; a dotted key, ``policies.isolation_cap``, sets one
    key of its block); raises :class:`ConfigError`."""
    file = shipped(Path(path)) if path is not None else DEFAULT_CONFIG
    data = _read_yaml(file)
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    where = {k: f"command line --{k.replace('_', '-')}" for k in overrides}
    blocks = {key.partition(".")[0] for key, _ in setting_fields() if "." in key}
    for key, value in overrides.items():
        block, _, name = key.partition(".")
        if block in blocks and name and isinstance(data.get(block, {}), dict):
            data[block] = {**data.get(block, {}), name: value}
        else:
            data[key] = value
    try:
        return JobConfig.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc, where, str(file), JobConfig) from None


def shipped(path: Path) -> Path:
    """``path``; but ``conf/...`` that the working folder does not have is faultline's own copy
    (:data:`CONF_DIR`), so ``--config conf/rocketmq-only.yaml`` works from any folder."""
    if path.exists() or path.is_absolute() or path.parts[:1] != ("conf",):
        return path
    return CONF_DIR.joinpath(*path.parts[1:])


def scenario_path(name: str) -> Path:
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        return shipped(candidate)
    return SCENARIO_DIR / f"{name}.yaml"


def load_scenario(name: str) -> Scenario:
    """A scenario by name (``conf/scenarios/NAME.yaml``) or path."""
    path = scenario_path(name)
    if not path.exists():
        known = sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))
        raise ConfigError(f"scenario {name!r}: no file {path}; known scenarios: {', '.join(known)}")
    try:
        return Scenario.model_validate(_read_yaml(path))
    except ValidationError as exc:
        raise _explain(exc, {}, str(path), Scenario) from None
