"""Column names and types of the parsed events and of every output table, as pyarrow schemas:
the contract that producers, dashboards and replays rely on (docs/events.md and docs/tables.md
say the same for users; docs/hooks.py writes the reference pages from these). The Spark layer
and the Delta sink derive their schemas from these. Columns may be added; the names here are
never renamed.

Input (:data:`EVENTS`), one kind per event (:data:`EVENT_KINDS`):

* ``send_result``: one attempt of a producer's send, as the producer saw it: ``producer_id`` (the
  client instance), ``producer_group``, ``client_profile`` (a key of
  :data:`udfs.rocketmq.PROFILES`), ``latency_fault_enable``, ``topic``, ``broker_name``,
  ``queue_id``, ``latency_ms`` (this attempt's elapsed time), ``outcome``
  (:class:`udfs.rocketmq.Outcome`), ``response_code`` (of a ``BROKER_EXCEPTION``), ``attempt``
  (0 = first) of ``max_attempts``, ``mode`` (``SYNC``, ``ASYNC``, ``ONEWAY``), ``message_id``,
  ``body_size``, ``delay_level`` (asked for), ``redelivery_count`` (how many times faultline
  redelivered the message already), and for a transactional half message ``transaction``
  (``PREPARED``), ``transaction_id`` and ``check_immunity_s``;
* ``consume_result``: ``consumer_group``, ``topic``, ``message_id``, ``origin_message_id``,
  ``broker_name``, ``queue_id``, ``reconsume_times``, ``status`` (``CONSUME_SUCCESS`` or
  ``RECONSUME_LATER``), ``delay_level`` (0: the broker decides), ``max_reconsume_times``
  (default 16);
* ``route``: ``topic`` and ``brokers``, a list of ``{broker_name, write_queue_nums, perm}``: the
  topic's route as producers get it from the NameServer;
* ``heartbeat``: ``broker_name`` is alive (the NameServer drops a broker 120 s after its last
  heartbeat, scanning every 10 s);
* ``transaction_end`` and ``transaction_check``: ``transaction_id``, ``broker_name``,
  ``local_state`` (:class:`udfs.rocketmq.LocalTransactionState`), and for a check
  ``check_times``;
* ``send_summary``: the sends of one producer to one broker and topic over a window of event
  time (``window_start`` to ``window_end``) that could not change a decision
  (:mod:`streaming.client`'s reporting rule): ``messages`` of them, all ``SEND_OK`` first
  attempts; ``event_time`` and ``latency_ms`` are the last one's, ``first_time``,
  ``first_latency_ms`` and ``first_event_id`` the first one's; ``latency_total``,
  ``latency_max`` and a ``histogram`` in the profile's latency bands (read and checked by the
  parser, not carried on); ``queue_index_start`` and ``queue_index_end``, the producer's
  ``sendWhichQueue`` before the first and after the last; ``dropped``, the summaries the
  producer's reporter dropped since its last one;
* ``consume_summary``: a consumer group's successful consumes of a topic over a window
  (``messages``, ``window_start``, ``window_end``, ``dropped``).

Output: :data:`TABLES` and :data:`BATCHES`, each row with ``batch_id``. Scopes: ``cluster`` is
one fault table fed by every producer (the shared view producers read back); ``producer`` is the
table each producer instance would hold itself under its own profile (for replay and review).
"""

from __future__ import annotations

import pyarrow as pa

from udfs.vocabulary import TableName

EVENTS = pa.schema(
    [
        ("kind", pa.string()),
        ("event_id", pa.string()),
        ("event_time", pa.int64()),
        ("cluster", pa.string()),
        ("producer_id", pa.string()),
        ("producer_group", pa.string()),
        ("client_profile", pa.string()),
        ("latency_fault_enable", pa.bool_()),
        ("topic", pa.string()),
        ("broker_name", pa.string()),
        ("queue_id", pa.int32()),
        ("latency_ms", pa.int64()),
        ("outcome", pa.string()),
        ("response_code", pa.int32()),
        ("attempt", pa.int32()),
        ("max_attempts", pa.int32()),
        ("mode", pa.string()),
        ("message_id", pa.string()),
        ("body_size", pa.int64()),
        ("delay_level", pa.int32()),
        ("redelivery_count", pa.int32()),
        ("consumer_group", pa.string()),
        ("origin_message_id", pa.string()),
        ("reconsume_times", pa.int32()),
        ("status", pa.string()),
        ("max_reconsume_times", pa.int32()),
        ("transaction", pa.string()),
        ("transaction_id", pa.string()),
        ("check_immunity_s", pa.int32()),
        ("check_immunity", pa.string()),
        ("local_state", pa.string()),
        ("check_times", pa.int32()),
        ("messages", pa.int64()),
        ("window_start", pa.int64()),
        ("window_end", pa.int64()),
        ("first_time", pa.int64()),
        ("first_latency_ms", pa.int64()),
        ("first_event_id", pa.string()),
        ("latency_total", pa.int64()),
        ("latency_max", pa.int64()),
        ("queue_index_start", pa.int64()),
        ("queue_index_end", pa.int64()),
        ("dropped", pa.int64()),
        ("brokers_json", pa.string()),
        ("raw", pa.string()),
        ("origin", pa.string()),
        ("ingest_ms", pa.int64()),
        ("reason_code", pa.string()),
        ("reason", pa.string()),
    ]
)
"""A parsed record as the stateful step receives it (``brokers_json``: a route's brokers).
A record with a ``reason_code`` failed validation and goes to ``quarantine``."""

_QUEUE = pa.struct([("broker_name", pa.string()), ("queue_id", pa.int32())])
_ISOLATED = pa.struct([("broker_name", pa.string()), ("until", pa.int64())])
_BROKER = pa.struct(
    [("broker_name", pa.string()), ("write_queue_nums", pa.int32()), ("perm", pa.int32())]
)

_MESSAGE = [
    ("cluster", pa.string()),
    ("event_id", pa.string()),
    ("message_id", pa.string()),
    ("origin_message_id", pa.string()),
    ("source", pa.string()),
    ("group", pa.string()),
]
_QUEUED = [
    ("delay_level", pa.int32()),
    ("schedule_queue_id", pa.int32()),
    ("store_time", pa.int64()),
    ("deliver_at", pa.int64()),
    ("attempt_count", pa.int32()),
    ("dlq", pa.bool_()),
]
"""The columns ``schedule_entries`` and ``redeliveries`` share: the message and its queue."""

TABLES: dict[str, pa.Schema] = {
    TableName.FAULT_ITEMS: pa.schema(
        [
            ("scope", pa.string()),
            ("scope_key", pa.string()),
            ("cluster", pa.string()),
            ("broker_name", pa.string()),
            ("event_id", pa.string()),
            ("event_time", pa.int64()),
            ("latency_ms", pa.int64()),
            ("isolation", pa.bool_()),
            ("reachable", pa.bool_()),
            ("not_available_ms", pa.int64()),
            ("available_from", pa.int64()),
            ("profile", pa.string()),
            ("outcome", pa.string()),
            ("phase", pa.string()),
            ("producer_id", pa.string()),
            ("attempt", pa.int32()),
            ("message_id", pa.string()),
        ]
    ),
    TableName.BROKER_DECISIONS: pa.schema(
        [
            ("scope", pa.string()),
            ("scope_key", pa.string()),
            ("cluster", pa.string()),
            ("broker_name", pa.string()),
            ("decision", pa.string()),
            ("effective_at", pa.int64()),
            ("available_from", pa.int64()),
            ("reason", pa.string()),
            ("cause_event_id", pa.string()),
            ("profile", pa.string()),
        ]
    ),
    TableName.ROUTING_DECISIONS: pa.schema(
        [
            ("event_id", pa.string()),
            ("scope", pa.string()),
            ("scope_key", pa.string()),
            ("cluster", pa.string()),
            ("producer_id", pa.string()),
            ("topic", pa.string()),
            ("message_id", pa.string()),
            ("failed_broker", pa.string()),
            ("attempt", pa.int32()),
            ("selected_broker", pa.string()),
            ("selected_queue_id", pa.int32()),
            ("rule", pa.string()),
            ("profile", pa.string()),
            ("decided_at", pa.int64()),
            ("rewritten", pa.bool_()),
            ("removed_broker", pa.string()),
            ("swallowed", pa.string()),
        ]
    ),
    TableName.ROUTING_TABLE: pa.schema(
        [
            ("scope", pa.string()),
            ("scope_key", pa.string()),
            ("cluster", pa.string()),
            ("topic", pa.string()),
            ("effective_at", pa.int64()),
            ("cause_event_id", pa.string()),
            ("selectable", pa.list_(_QUEUE)),
            ("isolated", pa.list_(_ISOLATED)),
            ("route", pa.string()),
        ]
    ),
    TableName.ROUTES: pa.schema(
        [
            ("cluster", pa.string()),
            ("topic", pa.string()),
            ("route", pa.string()),
            ("effective_at", pa.int64()),
            ("cause_event_id", pa.string()),
            ("brokers", pa.list_(_BROKER)),
            ("writable", pa.list_(_QUEUE)),
        ]
    ),
    TableName.QUARANTINE: pa.schema(
        [
            ("raw", pa.string()),
            ("origin", pa.string()),
            ("reason_code", pa.string()),
            ("reason", pa.string()),
            ("seen_at", pa.int64()),
        ]
    ),
    TableName.HEARTBEATS: pa.schema(
        [
            ("cluster", pa.string()),
            ("broker_name", pa.string()),
            ("event_id", pa.string()),
            ("event_time", pa.int64()),
        ]
    ),
    TableName.LATE_EVENTS: pa.schema(
        [
            ("cluster", pa.string()),
            ("event_id", pa.string()),
            ("kind", pa.string()),
            ("event_time", pa.int64()),
            ("clock", pa.int64()),
            ("raw", pa.string()),
            ("origin", pa.string()),
        ]
    ),
    TableName.SCHEDULE_ENTRIES: pa.schema(
        [
            *_MESSAGE,
            ("real_topic", pa.string()),
            ("real_queue_id", pa.int32()),
            *_QUEUED,
            ("profile", pa.string()),
        ]
    ),
    TableName.REDELIVERIES: pa.schema(
        [
            *_MESSAGE,
            ("target_topic", pa.string()),
            ("kafka_topic", pa.string()),
            ("broker_name", pa.string()),
            ("real_queue_id", pa.int32()),
            *_QUEUED,
        ]
    ),
    TableName.TRANSACTIONS: pa.schema(
        [
            ("cluster", pa.string()),
            ("transaction_id", pa.string()),
            ("message_id", pa.string()),
            ("producer_id", pa.string()),
            ("producer_group", pa.string()),
            ("topic", pa.string()),
            ("broker_name", pa.string()),
            ("state", pa.string()),
            ("check_times", pa.int32()),
            ("effective_at", pa.int64()),
            ("born_at", pa.int64()),
            ("next_check_at", pa.int64()),
            ("cause_event_id", pa.string()),
            ("reason", pa.string()),
            ("profile", pa.string()),
            ("notify", pa.bool_()),
        ]
    ),
}
"""Every table the stateful step and the parser write; each also gets ``batch_id``.

``schedule_entries``: a message entering a delay queue. ``event_id`` is the event that put it
there; ``real_topic`` is where it goes when released (``%DLQ%group`` for a 4.7.1 DLQ copy that is
parked first, then ``dlq`` is true); ``real_queue_id`` is null for a failed send (the producer
picks the queue again); ``attempt_count`` counts the deliveries that failed before: the
redelivery number for ``send_failure``, the stored ``reconsumeTimes`` for ``consume_retry``, 0
for ``delayed_send``.

``routing_table``: a change of a topic's selectable queues, per scope key. ``route`` is the
route in force (its ``routes.route``; null when the topic has no broker in its route);
``isolated`` the brokers of that route the key isolates, until when. ``selectable`` is the whole
list in the ``cluster`` scope; in the ``producer`` scope it is null unless the producer's own
queues differ from what the route gives, and the list is then the route's ``writable`` queues
without the isolated brokers (``streaming.tools.routing_tables`` reads them so).

``routes``: a change of a topic's effective route (its declared brokers without those the
NameServer dropped), recorded once per change by the lead shard: ``route`` (a digest of the
brokers, the reference ``routing_table.route`` holds), ``brokers`` with their write queue numbers
and permissions, and ``writable``, the queues a producer may select when nothing is isolated, in
the order of ``routing_table.selectable``. A route in force that was never recorded (the static
routes, a state from before this table) is recorded at the first event that finds it.

``redeliveries``: a message leaving a delay queue, or going to the DLQ at once
(``schedule_queue_id`` null, ``delay_level`` 0, ``deliver_at`` = ``store_time``). A producer
resending a failed message sets ``redelivery_count`` to ``attempt_count``.

``transactions``: a change of a transactional half message (``udfs.engine._transactions``):
``state`` is ``PREPARED``, ``COMMIT``, ``ROLLBACK``, ``UNKNOWN``, ``CHECK`` (``check_times``
counts them), ``DISCARDED``, ``SKIPPED``, ``END_TO_UNAVAILABLE_BROKER`` or ``END_REJECTED``;
``next_check_at`` is when the broker checks it next (null once it is settled); ``notify`` marks
the rows the decision topic carries."""

TIME_COLUMNS: dict[str, str] = {
    TableName.FAULT_ITEMS: "event_time",
    TableName.BROKER_DECISIONS: "effective_at",
    TableName.ROUTING_DECISIONS: "decided_at",
    TableName.ROUTING_TABLE: "effective_at",
    TableName.ROUTES: "effective_at",
    TableName.QUARANTINE: "seen_at",
    TableName.HEARTBEATS: "event_time",
    TableName.LATE_EVENTS: "event_time",
    TableName.SCHEDULE_ENTRIES: "store_time",
    TableName.REDELIVERIES: "deliver_at",
    TableName.TRANSACTIONS: "effective_at",
}
"""Each table's event-time column (epoch ms). Every file the job writes carries its minimum and
maximum in the Delta log, so a reader of a time range skips the other files unopened."""

MILLIS: dict[str, tuple[str, ...]] = {
    TableName.FAULT_ITEMS: ("event_time", "available_from"),
    TableName.BROKER_DECISIONS: ("effective_at", "available_from"),
    TableName.ROUTING_DECISIONS: ("decided_at",),
    TableName.ROUTING_TABLE: ("effective_at",),
    TableName.ROUTES: ("effective_at",),
    TableName.QUARANTINE: ("seen_at",),
    TableName.HEARTBEATS: ("event_time",),
    TableName.LATE_EVENTS: ("event_time", "clock"),
    TableName.SCHEDULE_ENTRIES: ("store_time", "deliver_at"),
    TableName.REDELIVERIES: ("store_time", "deliver_at"),
    TableName.TRANSACTIONS: ("effective_at", "born_at", "next_check_at"),
    TableName.BATCHES: ("clock", "committed_at"),
}
"""Each table's time columns (epoch ms). Each is also stored as ``<column>_ts``, a Delta
``timestamp`` (UTC), for SQL and dashboard readers."""

TIMESTAMP = pa.timestamp("us", tz="UTC")
PARTITION = "event_date"
"""The partition column of every table but ``batches``: the UTC date of its
:data:`TIME_COLUMNS` column, so a reader of a time range opens only those days' folders."""


def timestamp_name(column: str) -> str:
    """The name of a time column's timestamp twin."""
    return f"{column}_ts"


TABLE_FORMAT = 4
"""The layout of the tables this faultline writes, kept in each table's description
(``faultline table format N``): a reader refuses a format newer than its own. Format 2 added
the ``*_ts`` timestamps and the ``event_date`` partitions; format-1 tables (unpartitioned) are
still written, and take on the timestamp columns. Format 3 made the ``producer`` scope's
``routing_table`` rows compact (``selectable`` null, ``route`` a reference into the new
``routes`` table); a format-2 ``routing_table`` takes on the ``route`` column, and its rows
keep their whole lists. Format 4 writes no ``producer`` scope row at a change of a route that
leaves the producer's isolated brokers as they were: a reader takes the route in force at the
instant it asks about (``streaming.tools.routing_tables.in_force``)."""

BATCHES = pa.schema(
    [
        ("batch_id", pa.int64()),
        ("input", pa.int64()),
        ("valid", pa.int64()),
        ("quarantined", pa.int64()),
        ("late", pa.int64()),
        ("stale", pa.int64()),
        ("clock", pa.int64()),
        ("rows_written", pa.int64()),
        ("duplicates", pa.int64()),
        ("write_ms", pa.int64()),
        ("commit_ms", pa.int64()),
        ("receive_ms", pa.int64()),
        ("parse_ms", pa.int64()),
        ("engine_ms", pa.int64()),
        ("files_ms", pa.int64()),
        ("state_bytes", pa.int64()),
        ("slowest_task_ms", pa.int64()),
        ("committed_at", pa.int64()),
        ("input_rows_per_second", pa.float64()),
        ("processed_rows_per_second", pa.float64()),
        ("batch_ms", pa.int64()),
        ("add_batch_ms", pa.int64()),
        ("state_rows", pa.int64()),
        ("state_memory_bytes", pa.int64()),
        ("state_ms", pa.int64()),
        ("publish_ms", pa.int64()),
        ("messages", pa.int64()),
        ("dropped", pa.int64()),
        ("skipped", pa.int64()),
    ]
)
"""One row per micro-batch, written by the sink's commit. ``input`` counts the records that
reached the stateful operator; each of them is ``valid`` (applied), ``quarantined``, ``late`` or
one of the ``duplicates`` (an event id applied before), so ``input`` is their sum. ``stale``
counts valid updates older than the FaultItem they would replace. ``messages`` counts the
messages the valid events stand for (a summary its ``messages``, any other event 1), and
``dropped`` the summaries the producers' reporters dropped (their ``dropped`` fields), so the
sends a full buffer lost are counted though they never arrived. With the Kafka source,
``skipped`` counts the offsets of the batch's range that were not read: deleted by retention
before the job read them (with ``fail_on_data_loss: false``; with true the job stops instead),
compacted away, or transaction markers.

Timings: ``write_ms`` is the batch's run in Spark (read, shuffle, the operator) plus publishing,
``commit_ms`` the Delta commits; of the operator, summed over its clusters, ``receive_ms``
taking the records over from Spark, ``parse_ms`` parsing,
``engine_ms`` the state machine (with loading and saving its state), ``files_ms`` writing the
Parquet files, and beside them ``publish_ms``, sending its decisions to Kafka (when the job
publishes them) from the moment the state machine has made the cluster scope's.
``state_bytes`` is the size of the state written in this batch, ``state_ms``
the part of ``engine_ms`` spent reading and writing it (its codec).
``slowest_task_ms`` is the operator's time in its busiest task (its keys' four timings summed):
the stateful stage's share of the batch when its tasks run side by side. ``committed_at`` is the
wall-clock time (epoch ms) of the batch's commit: against ``clock``, how far the job is behind.

From Spark's own progress of the batch (``StreamingQueryListener``, written after the batch):
``input_rows_per_second`` and ``processed_rows_per_second``, ``batch_ms`` (the whole batch,
Spark's bookkeeping included) and ``add_batch_ms`` (the query and the sink), ``state_rows`` and
``state_memory_bytes`` (the stateful operator's keys and the memory its state store holds)."""
