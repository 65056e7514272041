"""Raw records to typed events (SPEC §3), in Spark SQL: parsing and validation run in the JVM,
vectorized, with no Python per row. Every record gets either the event columns or a
``reason_code`` and ``reason`` for the quarantine table."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from udfs.rocketmq import PROFILES, Outcome, SendMode

MIN_EVENT_TIME = 946_684_800_000  # 2000-01-01
MAX_EVENT_TIME = 4_102_444_800_000  # 2100-01-01

STRING_FIELDS = (
    "kind",
    "event_id",
    "cluster",
    "producer_id",
    "producer_group",
    "client_profile",
    "topic",
    "broker_name",
    "outcome",
    "mode",
    "message_id",
    "consumer_group",
    "origin_message_id",
    "status",
)
INT_FIELDS = {
    "queue_id": "int",
    "latency_ms": "bigint",
    "response_code": "int",
    "attempt": "int",
    "max_attempts": "int",
    "body_size": "bigint",
    "delay_level": "int",
    "redelivery_count": "int",
    "reconsume_times": "int",
    "max_reconsume_times": "int",
}
KNOWN_FIELDS = (*STRING_FIELDS, *INT_FIELDS, "event_time", "brokers", "latency_fault_enable")

REQUIRED = {
    "send_result": ("producer_id", "topic", "broker_name", "outcome", "latency_ms"),
    "consume_result": ("consumer_group", "topic", "message_id", "status"),
    "route": ("topic", "brokers"),
    "heartbeat": ("broker_name",),
}
_ROUTE_TYPE = "array<struct<broker_name:string,write_queue_nums:int,perm:int>>"


_ALL_FIELDS = (*STRING_FIELDS, *INT_FIELDS, "event_time", "brokers", "latency_fault_enable")
_AS_STRINGS = "struct<" + ",".join(f"`{f}`:string" for f in (*_ALL_FIELDS, "_corrupt")) + ">"
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}


def _is_container(text: Column) -> Column:
    """A JSON object or array (Spark's parser hands their text to a string field)."""
    first = F.substring(text, 1, 1)
    return (first == "{") & F.json_object_keys(text).isNotNull() | (
        first == "["
    ) & F.json_array_length(text).isNotNull()


def parse_events(raw: DataFrame, properties: bool = False) -> DataFrame:
    """``raw`` (value, origin, ingest_ms, and optionally ``lost``: a range of offsets the source
    could not read) to the event columns plus ``reason_code`` and
    ``reason`` (null for a valid event). With ``properties``, also the event's unknown string
    fields as a map (SPEC §3); it costs a second JSON parse per record, and no table keeps
    whole events yet, so the job leaves it out.

    One ``from_json`` reads every known field as text (Spark's JSON parser keeps a number's or a
    nested value's text), then each field is typed with ``try_cast``: integers accept whole
    numbers and strings holding one, ``event_time`` also ISO-8601, ``brokers`` a list of
    ``{broker_name, write_queue_nums, perm}``.
    """
    lost = F.col("lost") if "lost" in raw.columns else F.lit(None).cast("bigint")
    df = raw.select(
        "value",
        "origin",
        "ingest_ms",
        lost.alias("_lost"),
        F.from_json("value", _AS_STRINGS, _JSON_OPTIONS).alias("j"),
    )
    # not a JSON object: malformed, an array or a scalar (the parser's corrupt record), blank, or
    # no value at all (a Kafka tombstone)
    malformed = F.col("j._corrupt").isNotNull() | (F.trim("value") == "") | F.col("value").isNull()
    cols: dict[str, Column] = {}
    wrong: dict[str, Column] = {}
    for name in STRING_FIELDS:
        text = F.col(f"j.{name}")
        cols[name] = text
        wrong[name] = text.isNotNull() & _is_container(text)
    for name, sql_type in INT_FIELDS.items():
        text = F.col(f"j.{name}")
        cols[name] = F.expr(f"try_cast(trim(j.`{name}`) as {sql_type})")
        wrong[name] = text.isNotNull() & cols[name].isNull()
    et = F.col("j.event_time")
    cols["event_time"] = F.coalesce(
        F.expr("try_cast(trim(j.event_time) as bigint)"),
        F.expr("unix_millis(try_to_timestamp(j.event_time))"),
    )
    wrong["event_time"] = et.isNotNull() & cols["event_time"].isNull()
    flag = F.lower(F.trim("j.latency_fault_enable"))
    cols["latency_fault_enable"] = F.when(flag == "true", True).when(flag == "false", False)
    wrong["latency_fault_enable"] = (
        F.col("j.latency_fault_enable").isNotNull() & cols["latency_fault_enable"].isNull()
    )
    brokers = F.from_json("j.brokers", _ROUTE_TYPE)
    cols["brokers_json"] = F.when(brokers.isNotNull(), F.col("j.brokers"))
    wrong["brokers"] = F.col("j.brokers").isNotNull() & brokers.isNull()
    if properties:
        known = "array(" + ", ".join(f"'{f}'" for f in KNOWN_FIELDS) + ")"
        cols["properties"] = F.expr(
            "map_filter(from_json(value, 'map<string,string>'), (k, x) -> NOT array_contains("
            f"{known}, k) AND NOT (x RLIKE '^(-?[0-9.eE+-]+|true|false|null)$' OR "
            "substr(x, 1, 1) IN ('{', '[')))"
        )
    df = df.select(
        "value",
        "origin",
        "ingest_ms",
        "_lost",
        malformed.alias("_malformed"),
        *(c.alias(n) for n, c in cols.items()),
        F.array_compact(F.array(*(F.when(w, F.lit(n)) for n, w in wrong.items()))).alias("_wrong"),
    )
    df = df.withColumn("kind", F.coalesce("kind", F.lit("send_result")))
    df = df.withColumn("cluster", F.coalesce("cluster", F.lit("default")))
    return (
        df.withColumns(_reason(df))
        .drop("_malformed", "_wrong", "_lost")
        .withColumnRenamed("value", "raw")
    )


def _reason(df: DataFrame) -> dict[str, Column]:
    kind = F.col("kind")
    missing = [
        F.when(F.col(f).isNull() & (F.lit(True) if k is None else (kind == k)), F.lit(f))
        for k, fields in [(None, ("event_id", "event_time")), *REQUIRED.items()]
        for f in fields
        if f != "brokers"
    ] + [F.when((kind == "route") & F.col("brokers_json").isNull(), F.lit("brokers"))]
    missing_list = F.array_compact(F.array(*missing))
    bad_route = F.expr(
        "exists(from_json(brokers_json, 'array<struct<broker_name:string,write_queue_nums:int>>'),"
        " b -> b.broker_name IS NULL OR coalesce(b.write_queue_nums, 0) <= 0)"
    )

    def one_of(col: str, allowed: tuple[str, ...]) -> Column:
        return F.col(col).isNotNull() & ~F.col(col).isin(*allowed)

    checks: list[tuple[Column, str, Column]] = [
        (
            F.col("_lost").isNotNull(),
            "DATA_LOSS",
            F.concat(
                F.col("_lost").cast("string"),
                F.lit(" records at "),
                F.col("origin"),
                F.lit(" were deleted (retention) before they were read; failOnDataLoss=false"),
            ),
        ),
        (F.col("_malformed"), "MALFORMED_JSON", F.lit("the record is not a JSON object")),
        (
            F.size("_wrong") > 0,
            "WRONG_TYPE",
            F.concat(F.lit("wrong type for "), F.array_join("_wrong", ", ")),
        ),
        (
            ~kind.isin(*REQUIRED),
            "UNKNOWN_KIND",
            F.concat(F.lit("kind "), kind, F.lit(f" is not one of {', '.join(REQUIRED)}")),
        ),
        (
            F.size(missing_list) > 0,
            "MISSING_FIELD",
            F.concat(F.lit("missing "), F.array_join(missing_list, ", ")),
        ),
        (
            (F.col("event_time") < MIN_EVENT_TIME) | (F.col("event_time") >= MAX_EVENT_TIME),
            "EVENT_TIME_OUT_OF_RANGE",
            F.concat(
                F.lit("event_time "),
                F.col("event_time").cast("string"),
                F.lit(" is not between 2000-01-01 and 2100-01-01"),
            ),
        ),
        (
            F.col("latency_ms") < 0,
            "NEGATIVE_LATENCY",
            F.concat(
                F.lit("latency_ms "), F.col("latency_ms").cast("string"), F.lit(" is negative")
            ),
        ),
        (
            (kind == "send_result") & one_of("outcome", tuple(o.value for o in Outcome)),
            "UNKNOWN_OUTCOME",
            F.concat(F.lit("outcome "), F.col("outcome"), F.lit(" is not a RocketMQ send outcome")),
        ),
        (
            one_of("client_profile", tuple(PROFILES)),
            "UNKNOWN_PROFILE",
            F.concat(
                F.lit("client_profile "),
                F.col("client_profile"),
                F.lit(f" is not one of {', '.join(PROFILES)}"),
            ),
        ),
        (
            one_of("mode", tuple(m.value for m in SendMode)),
            "UNKNOWN_MODE",
            F.concat(F.lit("mode "), F.col("mode"), F.lit(" is not SYNC, ASYNC or ONEWAY")),
        ),
        (
            (kind == "consume_result") & one_of("status", ("CONSUME_SUCCESS", "RECONSUME_LATER")),
            "UNKNOWN_STATUS",
            F.concat(
                F.lit("status "),
                F.col("status"),
                F.lit(" is not CONSUME_SUCCESS or RECONSUME_LATER"),
            ),
        ),
        (
            (F.col("attempt") < 0)
            | (F.col("max_attempts") < 1)
            | (F.col("attempt") >= F.col("max_attempts"))
            | (F.col("queue_id") < 0)
            | (F.col("reconsume_times") < 0)
            | (F.col("redelivery_count") < 0),
            "INVALID_VALUE",
            F.lit(
                "attempt, max_attempts, queue_id, reconsume_times or redelivery_count out of range"
            ),
        ),
        (
            (kind == "route") & bad_route,
            "INVALID_ROUTE",
            F.lit("a route broker needs broker_name and write_queue_nums > 0"),
        ),
    ]
    code: Column = F.lit(None).cast("string")
    reason: Column = F.lit(None).cast("string")
    for condition, name, text in reversed(checks):
        code = F.when(condition, F.lit(name)).otherwise(code)
        reason = F.when(condition, text).otherwise(reason)
    return {"reason_code": code, "reason": reason}
