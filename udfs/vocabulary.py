"""faultline's closed vocabulary, each word defined once: the decisions of ``broker_decisions``,
what a decision means to a producer, the states of a transactional half message, the
quarantine's reason codes, the event kinds the parser accepts and the tables the job writes.

Each is a :class:`~enum.StrEnum`: a member is the very text the tables store and the records
carry, so it compares equal to that text and writes as it (``Decision.RESTORE == "RESTORE"``).
Only the standard library is imported here, so a producer embedding :mod:`streaming.client`
imports no more than it did.

>>> Decision("RESTORE") is Decision.RESTORE
True
>>> f"{TableName.BROKER_DECISIONS}/_delta_log"
'broker_decisions/_delta_log'
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Decision", "EventKind", "ProducerState", "ReasonCode", "TableName", "TransactionState"]


class Decision(StrEnum):
    """A ``broker_decisions.decision``: RocketMQ's own, then those of faultline's policies."""

    ISOLATE = "ISOLATE"
    EXTEND = "EXTEND"
    SHORTEN = "SHORTEN"
    """RocketMQ 4.x overwrote an isolation with a shorter one."""
    RESTORE = "RESTORE"
    ROUTE_EXPIRED = "ROUTE_EXPIRED"
    ROUTE_RESTORED = "ROUTE_RESTORED"
    OUTLIER = "OUTLIER"
    HOLD = "HOLD"
    PANIC = "PANIC"
    PROBE = "PROBE"
    RELEASE = "RELEASE"
    QUEUE_SWAP = "QUEUE_SWAP"
    """A report on a producer's own queues (``producer`` scope), not a broker's state."""
    EVICTED = "EVICTED"
    """A silent producer left the state (``producer`` scope, no broker)."""


class ProducerState(StrEnum):
    """What a broker decision means to a producer, as the decision topic's ``state`` says."""

    ISOLATED = "ISOLATED"
    AVAILABLE = "AVAILABLE"
    PROBING = "PROBING"
    """Takes a share of the sends (recovery probing)."""
    OUT_OF_ROUTE = "OUT_OF_ROUTE"


class TransactionState(StrEnum):
    """A ``transactions.state``: a change of a transactional half message (docs/transactions.md
    says when each comes)."""

    PREPARED = "PREPARED"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"
    CHECK = "CHECK"
    DISCARDED = "DISCARDED"
    """Checked ``transactionCheckMax`` times: moved to ``TRANS_CHECK_MAX_TIME_TOPIC``."""
    SKIPPED = "SKIPPED"
    """Older than the store's ``fileReservedTime`` at a wake: dropped without a check."""
    END_TO_UNAVAILABLE_BROKER = "END_TO_UNAVAILABLE_BROKER"
    """An end sent to a broker that likely could not take it: the message waits for a check."""
    END_REJECTED = "END_REJECTED"
    """5.x refused a first-phase end later than the message's immunity (604)."""


class ReasonCode(StrEnum):
    """Why a record went to ``quarantine`` (its ``reason_code``)."""

    DATA_LOSS = "DATA_LOSS"
    MALFORMED_JSON = "MALFORMED_JSON"
    WRONG_TYPE = "WRONG_TYPE"
    MISSING_FIELD = "MISSING_FIELD"
    UNKNOWN_KIND = "UNKNOWN_KIND"
    EVENT_TIME_OUT_OF_RANGE = "EVENT_TIME_OUT_OF_RANGE"
    NEGATIVE_LATENCY = "NEGATIVE_LATENCY"
    UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"
    UNKNOWN_PROFILE = "UNKNOWN_PROFILE"
    UNKNOWN_MODE = "UNKNOWN_MODE"
    UNKNOWN_STATUS = "UNKNOWN_STATUS"
    INVALID_VALUE = "INVALID_VALUE"
    INVALID_ROUTE = "INVALID_ROUTE"
    UNKNOWN_TRANSACTION = "UNKNOWN_TRANSACTION"
    UNKNOWN_LOCAL_STATE = "UNKNOWN_LOCAL_STATE"
    INVALID_TRANSACTION = "INVALID_TRANSACTION"
    INVALID_SUMMARY = "INVALID_SUMMARY"
    """A summary that contradicts itself or summarizes a send the rule reports in full."""
    FUTURE_EVENT_TIME = "FUTURE_EVENT_TIME"
    """Found by the engine, not the parser: an event too far ahead of its record's ingest time."""


class EventKind(StrEnum):
    """An event's ``kind``: the records the parser accepts."""

    SEND_RESULT = "send_result"
    CONSUME_RESULT = "consume_result"
    ROUTE = "route"
    HEARTBEAT = "heartbeat"
    TRANSACTION_END = "transaction_end"
    TRANSACTION_CHECK = "transaction_check"
    SEND_SUMMARY = "send_summary"
    CONSUME_SUMMARY = "consume_summary"


class TableName(StrEnum):
    """A Delta table the job writes, each in the output folder of its name."""

    FAULT_ITEMS = "fault_items"
    BROKER_DECISIONS = "broker_decisions"
    ROUTING_DECISIONS = "routing_decisions"
    ROUTING_TABLE = "routing_table"
    ROUTES = "routes"
    QUARANTINE = "quarantine"
    HEARTBEATS = "heartbeats"
    LATE_EVENTS = "late_events"
    SCHEDULE_ENTRIES = "schedule_entries"
    REDELIVERIES = "redeliveries"
    TRANSACTIONS = "transactions"
    BATCHES = "batches"
    """One row per micro-batch, written by the sink's commit, not by the stateful step."""
