"""RocketMQ producer fault isolation, queue selection and delay-level rescheduling, bug for bug
per client profile (4.7.1, 4.9.7, 5.x), as a pure library: no Spark, no Kafka, no clock.

Every "now" is a caller-supplied event time in ms; every random draw comes from a caller-supplied
seeded :class:`random.Random`. The behaviour reproduced is specified in ``ROCKETMQ.md``.

>>> import random
>>> from udfs.rocketmq import PROFILES, FaultTable, TopicPublishInfo, select_queue
>>> p = PROFILES["rocketmq-5"]
>>> table = FaultTable(p, rng=random.Random(7))
>>> info = TopicPublishInfo.from_route([("broker-a", 2, 6), ("broker-b", 2, 6)], index=0)
>>> _ = table.report("broker-a", 80, isolation=True, now_ms=1_000)   # isolated for 10 s
>>> select_queue(p, info, table, "broker-b", 2_000, latency_fault_enable=True).rule
<Rule.REACHABLE_NOT_LAST: 'reachable-not-last'>
"""

from udfs.rocketmq._allocate import allocate_averagely, allocate_by_circle
from udfs.rocketmq._delay import (
    DEFAULT_DELAY_LEVELS,
    DEFAULT_MAX_RECONSUME_TIMES,
    DLQ_PREFIX,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    DelayLevels,
    Redirect,
    SendBack,
    delay_level_to_queue_id,
    dlq_topic,
    queue_id_to_delay_level,
    retry_topic,
    schedule_redirect,
    send_back,
)
from udfs.rocketmq._errors import (
    AllocationError,
    DelayLevelError,
    EmptyRouteError,
    MessageValidationError,
    RocketMQError,
)
from udfs.rocketmq._fault import FaultItem, FaultTable
from udfs.rocketmq._profiles import PROFILES, Line, Profile, not_available_duration
from udfs.rocketmq._route import MessageQueue, Rule, Selection, TopicPublishInfo, select_queue
from udfs.rocketmq._send import (
    AttemptEffect,
    FaultReport,
    Next,
    Outcome,
    SendMode,
    attempt_effect,
    attempt_timeout,
    max_attempts,
)
from udfs.rocketmq._transaction import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    LocalTransactionState,
    Pass,
    TransactionConfig,
    after_half_send,
    check_pass,
    end_rejected,
    next_check,
    next_wake,
    transaction_config,
)
from udfs.rocketmq._validate import validate_group, validate_message, validate_topic

__all__ = [
    "CHECK_MAX_TIME_TOPIC",
    "DEFAULT_DELAY_LEVELS",
    "DEFAULT_MAX_RECONSUME_TIMES",
    "DLQ_PREFIX",
    "HALF_TOPIC",
    "PROFILES",
    "RETRY_PREFIX",
    "SCHEDULE_TOPIC",
    "AllocationError",
    "AttemptEffect",
    "DelayLevelError",
    "DelayLevels",
    "EmptyRouteError",
    "FaultItem",
    "FaultReport",
    "FaultTable",
    "Line",
    "LocalTransactionState",
    "MessageQueue",
    "MessageValidationError",
    "Next",
    "Outcome",
    "Pass",
    "Profile",
    "Redirect",
    "RocketMQError",
    "Rule",
    "Selection",
    "SendBack",
    "SendMode",
    "TopicPublishInfo",
    "TransactionConfig",
    "after_half_send",
    "allocate_averagely",
    "allocate_by_circle",
    "attempt_effect",
    "attempt_timeout",
    "check_pass",
    "delay_level_to_queue_id",
    "dlq_topic",
    "end_rejected",
    "max_attempts",
    "next_check",
    "next_wake",
    "not_available_duration",
    "queue_id_to_delay_level",
    "retry_topic",
    "schedule_redirect",
    "select_queue",
    "send_back",
    "transaction_config",
    "validate_group",
    "validate_message",
    "validate_topic",
]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type):
        _obj.__module__ = __name__  # documented, and shown in tracebacks, under the public path
del _name, _obj
