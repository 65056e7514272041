"""Configuration: one validated, frozen object per file kind (job settings, scenarios).

Unknown keys are errors. Every error names the file (or the command-line flag), the dotted key,
the value and what is allowed, and stops the job before Spark starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

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

from udfs import engine
from udfs.errors import ConfigError
from udfs.rocketmq import (
    DEFAULT_DELAY_LEVELS,
    PROFILES,
    DelayLevelError,
    DelayLevels,
    transaction_config,
)
from udfs.schedule import DelayPolicy

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
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


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
    latency_outlier_min_sends: PositiveInt = 5
    latency_outlier_min_latency: Duration = 100
    latency_outlier_isolation: Duration = 30_000
    recovery_probe_share: Share | None = 0.25
    """A broker whose isolation ends takes this share of the sends for as long as it was
    isolated (at most ``recovery_probe_max``), then all of them."""
    recovery_probe_max: Duration = 10_000
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
    log_retention: Duration = 30 * 86_400_000
    """Delta log entries older than this go at a checkpoint (``delta.logRetentionDuration``):
    how far back time travel reaches."""

    @field_validator("vacuum_retention", "log_retention")
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

    transaction_timeout: Duration | None = None
    """``transactionTimeOut``: a half message younger than this is not checked."""
    check_max: NonNegativeInt | None = None
    """``transactionCheckMax``: checks before the broker discards a half message."""
    check_interval: Annotated[int, Field(ge=1), BeforeValidator(_duration)] | None = None
    """``transactionCheckInterval``: how often the broker's check service wakes."""
    file_reserved_time: Duration | None = None
    """``fileReservedTime``: an older half message is skipped, never checked."""


class JobConfig(_Strict):
    source: Literal["simulator", "files", "kafka"] = "simulator"
    path: str | None = None
    scenario: str = "default"
    output: str = "output"
    checkpoint: str = "checkpoints"
    once: bool = False
    scope: Literal["cluster", "producer", "both"] = "both"
    master: str = "local[*]"
    max_records_per_batch: PositiveInt = 20_000
    shuffle_partitions: PositiveInt = 2
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
    default_client_profile: ProfileName = "rocketmq-4.9"
    default_latency_fault_enable: bool = True
    allowed_lateness: Duration = 60_000
    max_future_skew: Duration = 3_600_000
    send_msg_timeout: Duration = 3_000
    """The producers' ``sendMsgTimeout``: the budget of a whole send, all attempts together."""
    ignore_spent_budget: bool = True
    """The cluster scope does not isolate a broker for a retry that failed only because the
    send's budget ran out (RocketMQ does, and so does the producer scope)."""
    policies: PoliciesConfig = PoliciesConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    transactions: TransactionsConfig = TransactionsConfig()
    sink: Literal["delta-rs", "delta-spark"] = "delta-rs"
    """Who commits to the Delta tables: faultline's own writer (delta-rs, no jars), or Spark's
    Delta Lake data source, on a cluster that has its jars (``streaming.job.sink_spark``)."""
    seed: int = 0
    static_routes: dict[str, list[RouteBroker]] = {}
    progress_interval: Duration = 2_000
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
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: PositiveInt | None = None
    """Records per micro-batch from Kafka (default: ``max_records_per_batch``)."""
    fail_on_data_loss: bool = True
    kafka_options: dict[str, str] = {}
    """librdkafka settings for every Kafka client (security: ``security.protocol``,
    ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``, ...)."""
    kafka_reader: Literal["python", "spark"] = "python"
    """``spark``: Spark's own ``format("kafka")``, where its JVM connector is installed."""
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
            raise ValueError("source files needs path: the folder of JSON-lines or Parquet files")
        if self.source == "kafka":
            if not self.kafka_bootstrap:
                raise ValueError("source kafka needs kafka_bootstrap (--kafka-bootstrap)")
            if bool(self.topic) == bool(self.subscribe_pattern):
                raise ValueError("source kafka needs exactly one of topic, subscribe_pattern")
        return self

    def kafka_conf(self) -> dict[str, str]:
        """librdkafka settings for every client: ``kafka_options`` plus the bootstrap servers."""
        return {**self.kafka_options, "bootstrap.servers": str(self.kafka_bootstrap)}

    @property
    def scopes(self) -> tuple[str, ...]:
        return ("cluster", "producer") if self.scope == "both" else (self.scope,)


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


def masked(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Client settings fit to print: secrets replaced by ``***``.

    >>> masked({"sasl.password": "hunter2", "bootstrap.servers": "k:9092"})
    {'sasl.password': '***', 'bootstrap.servers': 'k:9092'}
    """
    return {k: "***" if _SECRET.search(str(k)) else v for k, v in conf.items()}


def _explain(error: ValidationError, where: Mapping[str, str], default: str) -> ConfigError:
    lines = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item["loc"])
        origin = where.get(str(item["loc"][0]) if item["loc"] else "", default)
        value = item.get("input")
        if item["loc"] and item["loc"][0] == "kafka_options":  # may hold secrets: never echo them
            if len(item["loc"]) > 1:
                value = masked({str(item["loc"][1]): value}).popitem()[1]
            else:
                value = masked(value) if isinstance(value, Mapping) else "***"
        shown = "(missing)" if item["type"] == "missing" else repr(value)
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{origin}: {loc or '(top level)'} = {shown}: {message}")
    return ConfigError("\n".join(lines))


def load_job_config(
    path: str | Path | None = None, overrides: Mapping[str, Any] | None = None
) -> JobConfig:
    """Read the job's YAML (``conf/faultline.yaml`` when ``path`` is None) and apply the
    command-line ``overrides`` (flag name -> value); raises :class:`ConfigError`."""
    file = shipped(Path(path)) if path is not None else DEFAULT_CONFIG
    data = _read_yaml(file)
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    where = {k: f"command line --{k.replace('_', '-')}" for k in overrides}
    try:
        return JobConfig.model_validate({**data, **overrides})
    except ValidationError as exc:
        raise _explain(exc, where, str(file)) from None


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
        raise _explain(exc, {}, str(path)) from None


def engine_config(config: JobConfig) -> engine.EngineConfig:
    rules, tx = config.policies, config.transactions
    routes = {
        topic: tuple((b.broker_name, b.write_queue_nums, b.perm) for b in brokers)
        for topic, brokers in config.static_routes.items()
    }
    return engine.EngineConfig(
        scopes=config.scopes,
        cluster_profile=config.cluster_profile,
        default_client_profile=config.default_client_profile,
        default_latency_fault_enable=config.default_latency_fault_enable,
        allowed_lateness_ms=config.allowed_lateness,
        max_future_skew_ms=config.max_future_skew,
        evict_after_ms=config.evict_silent_producers_after,
        static_routes=routes,
        seed=config.seed,
        delays=DelayPolicy(DelayLevels.parse(config.delay_levels), config.max_redeliveries),
        send_msg_timeout_ms=config.send_msg_timeout,
        ignore_spent_budget=config.ignore_spent_budget,
        policies=engine.Policies()  # RocketMQ's rules alone
        if not rules.enabled
        else engine.Policies(
            isolation_cap=rules.isolation_cap,
            outlier_factor=rules.latency_outlier_factor,
            outlier_window_ms=rules.latency_outlier_window,
            outlier_min_sends=rules.latency_outlier_min_sends,
            outlier_min_latency_ms=rules.latency_outlier_min_latency,
            outlier_isolation_ms=rules.latency_outlier_isolation,
            probe_share=rules.recovery_probe_share,
            probe_max_ms=rules.recovery_probe_max,
            fault_aware_release=rules.fault_aware_release,
            report_queue_swaps=rules.report_queue_swaps,
        ),
        transactions=engine.BrokerTransactions(
            timeout_ms=tx.transaction_timeout,
            check_max=tx.check_max,
            check_interval_ms=tx.check_interval,
            file_reserved_ms=tx.file_reserved_time,
        ),
    )
