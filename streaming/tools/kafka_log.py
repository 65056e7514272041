"""A logged range of Kafka offsets read back, for ``faultline replay``: the records a batch of the
job read through Spark's Kafka source, from the offsets its checkpoint logged, with
confluent-kafka (librdkafka) and without Spark. Each record comes as the job's query hands it to
the operator: its value, ``topic/partition/offset`` as its origin, the broker's timestamp, and
its cluster as the shuffle key."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from streaming.job.publish import METADATA_TIMEOUT_S, RETRY_S
from udfs.errors import FaultlineError
from udfs.parse import cluster_keys

RECORDS = pa.schema(
    [
        ("value", pa.string()),
        ("origin", pa.string()),
        ("ingest_ms", pa.int64()),
        ("key", pa.string()),
    ]
)
READ_LIMIT_S = 60.0
"""How long a range's next message may take before the read gives up."""


@dataclass(frozen=True)
class Range:
    """Offsets ``[begin, end)`` of one partition."""

    topic: str
    partition: int
    begin: int
    end: int


def ranges(
    start: Mapping[str, Mapping[str, int]], end: Mapping[str, Mapping[str, int]]
) -> list[Range]:
    """The ranges between two logged offsets (``{topic: {partition: next offset}}``); a partition
    missing from ``start`` is read from 0.

    >>> ranges({"t": {"0": 5}}, {"t": {"0": 9, "1": 2}, "u": {"0": 0}})
    [Range(topic='t', partition=0, begin=5, end=9), Range(topic='t', partition=1, begin=0, end=2)]
    """
    found = []
    for topic, partitions in sorted(end.items()):
        for partition, offset in sorted(partitions.items(), key=lambda p: int(p[0])):
            begin = int(start.get(topic, {}).get(partition, 0))
            if int(offset) > begin:
                found.append(Range(topic, int(partition), begin, int(offset)))
    return found


def watermarks(
    conf: Mapping[str, str], found: list[Range]
) -> dict[tuple[str, int], tuple[int, int]]:
    """Each range's partition's first and next offsets, as Kafka has them now."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": "faultline-replay", "log_level": 2})
    try:
        return {
            (r.topic, r.partition): consumer.get_watermark_offsets(
                TopicPartition(r.topic, r.partition), timeout=METADATA_TIMEOUT_S
            )
            for r in found
        }
    finally:
        consumer.close()


def read(conf: Mapping[str, str], part: Range, chunk: int = 10_000) -> Iterator[pa.RecordBatch]:
    """The records of ``part``, in offset order (offsets that compaction removed are not there)."""
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **conf,
            "group.id": "faultline-replay",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
            "log_level": 2,
        }
    )
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.begin)])
        position, waited = part.begin, 0.0
        while position < part.end:
            messages = consumer.consume(min(chunk, part.end - position), timeout=RETRY_S)
            waited = 0.0 if messages else waited + RETRY_S
            if waited >= READ_LIMIT_S:
                raise FaultlineError(
                    f"{part.topic}/{part.partition}: no answer from Kafka for {waited:.0f} s at "
                    f"offset {position}"
                )
            values, origins, stamps = [], [], []
            ended = False
            for m in messages:
                error = m.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise FaultlineError(f"{part.topic}/{part.partition}: {error}")
                    ended = True
                    continue
                offset = m.offset()
                if offset is None or offset >= part.end:
                    position = part.end  # every offset of the range before it is read
                    continue
                value = m.value()
                values.append(None if value is None else value.decode("utf-8", "replace"))
                origins.append(f"{part.topic}/{part.partition}/{offset}")
                kind, stamp = m.timestamp()
                stamps.append(None if kind == TIMESTAMP_NOT_AVAILABLE else stamp)
                position = offset + 1
            if values:
                text = pa.array(values, pa.string())
                columns = [
                    text,
                    pa.array(origins),
                    pa.array(stamps, pa.int64()),
                    cluster_keys(text),
                ]
                yield pa.RecordBatch.from_arrays(columns, schema=RECORDS)
            elif ended:
                break  # the rest of the range is gone (compaction, transaction markers)
    finally:
        consumer.close()
