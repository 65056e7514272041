"""RocketMQ producer fault isolation, queue selection and delay-level rescheduling, bug for bug
per client profile (4.7.1, 4.9.7, 5.x), as a pure library: no Spark, no Kafka, no clock.

Every "now" is a caller-supplied event time in ms (where RocketMQ reads
``System.currentTimeMillis()``); every random draw comes from a caller-supplied seeded
:class:`random.Random` (where RocketMQ draws one: an index's first value, the 5.x index reset,
the shuffles of ``pickOneAtLeast``), so a replay repeats.

Profiles (:data:`PROFILES`) and the Apache RocketMQ sources each one follows:

============== ========= =================================================================
profile        version   source read
============== ========= =================================================================
rocketmq-4.7   4.7.1     tag ``rocketmq-all-4.7.1``
rocketmq-4.9   4.9.7     tag ``rocketmq-all-4.9.7``
rocketmq-5     5.x       the development branch at commit ``8fc57f1`` (2025-09-19), whose
                         fault-tolerance classes equal tag ``rocketmq-all-5.3.3``; only the
                         group name limit of 120 in ``Validators`` is newer than that tag
============== ========= =================================================================

The brokers' transactions follow the same sources by default; a cluster of released 5.x
brokers names its release (:func:`transaction_config`'s ``release``, the job's
``transactions.broker_release``): develop waits for its first check while ``age <= timeout``
(apache/rocketmq #9487, after 5.3.3), releases 5.0.0 to 5.3.3 check at ``age == timeout`` as
4.x does, and 5.0.0 and 5.1.0 also keep 4.x's 60 s check interval and accept a late
first-phase end (the 30 s interval and ``rejectCommitOrRollback`` came in 5.1.1). Citations of
a release name its tag: ``@rocketmq-all-5.1.0``.

Citations in this package's docstrings name the Java class and method, then the release and line,
as ``MQFaultStrategy.updateFaultItem`` (@4.7.1:97, @HEAD:167): ``@4.7.1`` and ``@4.9.7`` are the
tags above and ``@HEAD`` the 5.x commit. Client classes live under
``client/src/main/java/org/apache/rocketmq/client/`` (``latency/MQFaultStrategy.java``,
``latency/LatencyFaultToleranceImpl.java``, ``common/ThreadLocalIndex.java``,
``impl/producer/TopicPublishInfo.java``, ``impl/producer/DefaultMQProducerImpl.java``,
``impl/MQClientAPIImpl.java``, ``Validators.java``, ``consumer/rebalance/``); broker and store
classes are named with their module (``store``'s ``CommitLog``, ``broker``'s
``SendMessageProcessor``). A rule marked *derived* was read from the code, not seen running.

Where each rule is written down, with its sources:

* :mod:`~udfs.rocketmq._profiles`: the constants (latency bands, isolation durations, the
  latency substitute for an isolation, retry codes, topic sets) and
  ``computeNotAvailableDuration``;
* :mod:`~udfs.rocketmq._fault`: ``FaultItem`` and ``LatencyFaultToleranceImpl`` (update rule,
  ``isAvailable``, ``isReachable``, ordering, ``pickOneAtLeast``);
* :mod:`~udfs.rocketmq._index`: ``ThreadLocalIndex``, the round-robin counter and its overflow;
* :mod:`~udfs.rocketmq._route`: ``TopicPublishInfo`` and ``MQFaultStrategy.selectOneMessageQueue``;
* :mod:`~udfs.rocketmq._send`: ``DefaultMQProducerImpl.sendDefaultImpl`` and the async callbacks:
  attempts, the timeout budget, what each outcome reports to the fault table;
* :mod:`~udfs.rocketmq._validate`: ``Validators`` and ``TopicValidator``;
* :mod:`~udfs.rocketmq._delay`: delay levels, ``SCHEDULE_TOPIC_XXXX``, consumer send-back, retry
  and DLQ topics;
* :mod:`~udfs.rocketmq._transaction`: half messages, their end and the broker's check-back;
* :mod:`~udfs.rocketmq._allocate`: the consumer's queue allocation strategies.

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
    DEVELOP,
    HALF_TOPIC,
    LocalTransactionState,
    Pass,
    TransactionConfig,
    after_half_send,
    broker_release,
    check_pass,
    end_rejected,
    immunity_ms,
    next_check,
    next_wake,
    transaction_config,
)
from udfs.rocketmq._validate import validate_group, validate_message, validate_topic

__all__ = [
    "CHECK_MAX_TIME_TOPIC",
    "DEFAULT_DELAY_LEVELS",
    "DEFAULT_MAX_RECONSUME_TIMES",
    "DEVELOP",
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
    "broker_release",
    "check_pass",
    "delay_level_to_queue_id",
    "dlq_topic",
    "end_rejected",
    "immunity_ms",
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
