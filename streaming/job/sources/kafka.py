"""The Kafka source: a Spark Python Data Source reading with confluent-kafka (librdkafka),
``format("faultline-kafka")``, with the option names of Spark's own Kafka source:
``kafka.bootstrap.servers``, ``subscribe`` or ``subscribePattern``,
``startingOffsets`` (``earliest``, ``latest`` or JSON ``{"topic": {"0": 42}}`` with -2 for
earliest and -1 for latest), ``maxOffsetsPerTrigger``, ``failOnDataLoss``, and ``kafka.*`` handed
to the client (SASL/SSL settings, under librdkafka's names). The offset is
``{topic: {partition: next offset}}``; each Kafka partition's range is read by a consumer
assigned at its start offset, so a restart re-reads exactly the logged ranges. ``maxReadTasks``
(default: one per partition) groups the ranges into at most that many read tasks.
``outageTimeout`` (ms; default none: forever) bounds how long the reader waits for a Kafka that
stops answering (:mod:`streaming.job.outage`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from streaming.job.outage import PREFIX, KafkaIOError, KafkaUnreachable, Patience, quiet
from streaming.job.publish import METADATA_TIMEOUT_S, RETRY_S, check_reachable, client_conf
from udfs.parse import cluster_keys

RAW_SCHEMA = "value string, origin string, ingest_ms bigint, lost bigint, key string"
_RAW_ARROW = pa.schema(
    [
        ("value", pa.string()),
        ("origin", pa.string()),
        ("ingest_ms", pa.int64()),
        ("lost", pa.int64()),
        ("key", pa.string()),  # the record's cluster (udfs.parse.cluster_keys)
    ]
)
EARLIEST, LATEST = -2, -1


@dataclass(frozen=True)
class KafkaSlice(InputPartition):
    topic: str
    partition: int
    begin: int
    end: int
    conf: tuple[tuple[str, str], ...]
    fail_on_data_loss: bool
    outage_timeout_s: float | None = None


@dataclass(frozen=True)
class KafkaTask(InputPartition):
    """The slices one read task reads, one after the other."""

    slices: tuple[KafkaSlice, ...]


def tasks(slices: Iterable[KafkaSlice], most: int | None) -> list[KafkaTask]:
    """The slices as at most ``most`` read tasks (one per slice when None) of about as many
    offsets each: the largest slice first, onto the task with the fewest so far. Every task of
    a micro-batch costs Spark a Python worker's start and end, more than reading a few thousand
    records, so a batch reads in as many tasks as it has cores, not as Kafka has partitions.

    >>> s = [KafkaSlice("t", p, 0, n, (), True) for p, n in enumerate([50, 300, 100, 200])]
    >>> [[x.partition for x in t.slices] for t in tasks(s, 2)]
    [[1, 0], [3, 2]]
    >>> len(tasks(s, None)), len(tasks(s[:1], 2))
    (4, 1)
    """
    slices = list(slices)
    if most is None or len(slices) <= most:
        return [KafkaTask((s,)) for s in slices]
    groups: list[list[KafkaSlice]] = [[] for _ in range(most)]
    loads = [0] * most
    for s in sorted(slices, key=lambda s: (-(s.end - s.begin), s.topic, s.partition)):
        i = loads.index(min(loads))
        groups[i].append(s)
        loads[i] += s.end - s.begin
    return [KafkaTask(tuple(g)) for g in groups]


def _origin(topic: str, partition: int, offset: int) -> str:
    return f"{topic}/{partition}/{offset}"


def read_slice(part: KafkaSlice, chunk: int = 10_000) -> Iterator[pa.RecordBatch]:
    """Offsets ``[begin, end)`` of one partition as raw rows. Offsets that retention deleted
    fail the read, or with ``failOnDataLoss=false`` become one row whose ``lost`` says how many
    (the parser sends it to quarantine as ``DATA_LOSS``). While no message comes, the read waits
    for Kafka, at most ``outage_timeout_s`` (then it fails); the range it reads stays the same."""
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, TopicPartition
    from confluent_kafka import KafkaError as Error

    consumer = Consumer(
        {
            **quiet(dict(part.conf)),
            "group.id": "faultline-reader",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
        }
    )
    try:
        position = part.begin
        consumer.assign([TopicPartition(part.topic, part.partition, position)])
        patience = Patience(dict(part.conf)["bootstrap.servers"], part.outage_timeout_s)
        while position < part.end:
            messages = consumer.consume(min(chunk, part.end - position), timeout=RETRY_S)
            if messages:
                patience.ok()
            else:
                patience.failed(
                    f"{part.topic}/{part.partition}: reading offsets {position}..{part.end - 1}"
                )
            values, origins, stamps = [], [], []
            for m in messages:
                error = m.error()
                if error is not None:
                    if _is_eof(error):
                        continue
                    if error.code() != Error._AUTO_OFFSET_RESET:
                        raise KafkaIOError(f"{PREFIX} {part.topic}/{part.partition}: {error}")
                    low, _ = consumer.get_watermark_offsets(
                        TopicPartition(part.topic, part.partition), timeout=METADATA_TIMEOUT_S
                    )
                    resume = min(max(low, position), part.end)
                    if resume == position:
                        raise KafkaIOError(f"{PREFIX} {part.topic}/{part.partition}: {error}")
                    if part.fail_on_data_loss:
                        raise KafkaIOError(
                            f"{PREFIX} offsets {position}..{resume - 1} of {part.topic}/"
                            f"{part.partition} were deleted (retention) before they were read; "
                            "set failOnDataLoss=false to skip and count them"
                        )
                    yield _lost(part, position, resume)
                    position = resume
                    consumer.assign([TopicPartition(part.topic, part.partition, position)])
                    break
                offset = m.offset()
                if offset is None or offset >= part.end:
                    continue
                value = m.value()
                values.append(None if value is None else value.decode("utf-8", "replace"))
                origins.append(_origin(part.topic, part.partition, offset))
                kind, stamp = m.timestamp()
                stamps.append(None if kind == TIMESTAMP_NOT_AVAILABLE else stamp)
                position = offset + 1
            if values:
                text = pa.array(values, pa.string())
                yield pa.RecordBatch.from_arrays(
                    [
                        text,
                        pa.array(origins, pa.string()),
                        pa.array(stamps, pa.int64()),
                        pa.nulls(len(values), pa.int64()),
                        cluster_keys(text),
                    ],
                    schema=_RAW_ARROW,
                )
            elif messages and all(_is_eof(m.error()) for m in messages):
                break  # the rest of the range is gone (compaction, aborted transactions)
    finally:
        consumer.close()


def _is_eof(error: Any) -> bool:
    from confluent_kafka import KafkaError as Error

    return error is not None and error.code() == Error._PARTITION_EOF


def _lost(part: KafkaSlice, begin: int, end: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([None], pa.string()),
            pa.array([f"{part.topic}/{part.partition}/{begin}-{end - 1}"], pa.string()),
            pa.array([None], pa.int64()),
            pa.array([end - begin], pa.int64()),
            pa.array(["default"], pa.string()),
        ],
        schema=_RAW_ARROW,
    )


Offsets = dict[str, dict[str, int]]


class KafkaReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Planning runs in a Python process on the driver; :func:`read_slice` on the executors.

    While Kafka does not answer, :meth:`latestOffset` plans no new batch (it returns ``start``,
    and Spark asks again at the next trigger), so nothing blocks a stop; ``initialOffset`` and
    ``prepareForTriggerAvailableNow``, which cannot do without Kafka, wait for it."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.conf = client_conf(options)
        self.subscribe = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
        pattern = options.get("subscribepattern")
        self.pattern = re.compile(pattern) if pattern else None
        if bool(self.subscribe) == bool(self.pattern):
            raise KafkaIOError(
                f"{PREFIX} give exactly one of the options subscribe, subscribePattern"
            )
        self.starting = options.get("startingoffsets", "latest").strip()
        limit = options.get("maxoffsetspertrigger")
        self.limit = int(limit) if limit else None
        self.fail_on_data_loss = options.get("failondataloss", "true").lower() != "false"
        most = options.get("maxreadtasks")
        self.max_read_tasks = int(most) if most else None
        timeout = options.get("outagetimeout")
        self.outage_timeout_s = int(timeout) / 1000 if timeout else None
        self.patience = Patience(self.conf["bootstrap.servers"], self.outage_timeout_s)
        self.frozen: Offsets | None = None
        self._client: Any = None

    def _consumer(self) -> Any:
        if self._client is None:
            from confluent_kafka import Consumer

            check_reachable(self.conf)
            self._client = Consumer(
                {**quiet(self.conf), "group.id": "faultline-planner", "enable.auto.commit": False}
            )
        return self._client

    def _watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Each partition's low and high offsets; :class:`KafkaUnreachable` when Kafka does not
        answer."""
        from confluent_kafka import KafkaException

        try:
            return self._ask_watermarks()
        except KafkaException as exc:
            raise KafkaUnreachable(f"{PREFIX} {exc.args[0]}") from None

    def _waiting(self) -> dict[tuple[str, int], tuple[int, int]]:
        """:meth:`_watermarks`, waiting for Kafka as long as :attr:`patience` allows."""
        while True:
            try:
                marks = self._watermarks()
            except KafkaUnreachable:
                self.patience.failed("planning")
                time.sleep(RETRY_S)
                continue
            self.patience.ok()
            return marks

    def _ask_watermarks(self) -> dict[tuple[str, int], tuple[int, int]]:
        from confluent_kafka import TopicPartition

        consumer = self._consumer()
        topics = consumer.list_topics(timeout=METADATA_TIMEOUT_S).topics
        names = sorted(
            t
            for t, meta in topics.items()
            if meta.error is None
            and not t.startswith("__")
            and (t in self.subscribe if self.subscribe else self.pattern.fullmatch(t))  # type: ignore[union-attr]
        )
        marks = {}
        for topic in names:
            for p in sorted(topics[topic].partitions):
                marks[(topic, p)] = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=METADATA_TIMEOUT_S
                )
        return marks

    def initialOffset(self) -> Offsets:
        marks = self._waiting()
        if self.starting in ("earliest", "latest"):
            side = 0 if self.starting == "earliest" else 1
            return _nest({tp: m[side] for tp, m in marks.items()})
        try:
            given = json.loads(self.starting)
            wanted = {(t, int(p)): int(o) for t, parts in given.items() for p, o in parts.items()}
        except (ValueError, AttributeError, TypeError):
            raise KafkaIOError(
                f"{PREFIX} startingOffsets {self.starting!r} is not earliest, latest or JSON like "
                '{"topic": {"0": 23, "1": -2}}'
            ) from None
        start = {}
        for tp, (low, high) in marks.items():
            offset = wanted.get(tp, EARLIEST)
            start[tp] = low if offset == EARLIEST else high if offset == LATEST else offset
        return _nest(start)

    def prepareForTriggerAvailableNow(self) -> None:
        """``--once``: read up to the offsets there are now, then stop."""
        self.frozen = _nest({tp: m[1] for tp, m in self._waiting().items()})

    def latestOffset(self, start: Offsets, limit: Any = None) -> Offsets:
        budget = self.limit
        if getattr(limit, "max_rows", None) is not None:
            rows = int(limit.max_rows)
            budget = rows if budget is None else min(budget, rows)
        begin = _flat(start)
        if self.frozen is not None:
            high = _flat(self.frozen)
        else:
            try:
                marks = self._watermarks()
            except KafkaUnreachable:
                self.patience.failed("planning")
                return start  # no new batch now; Spark asks again at the next trigger
            self.patience.ok()
            high = {tp: m[1] for tp, m in marks.items()}
        # a partition that appeared since is read from its beginning
        ends = {tp: max(h, begin.get(tp, 0)) for tp, h in high.items()}
        ends.update({tp: o for tp, o in begin.items() if tp not in ends})
        return _nest(_admit({tp: begin.get(tp, 0) for tp in ends}, ends, budget))

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaTask]:
        return tasks(self.slices(start, end), self.max_read_tasks)

    def slices(self, start: Offsets, end: Offsets) -> list[KafkaSlice]:
        """The offsets ``[start, end)`` of each partition that has any."""
        begin, stop = _flat(start), _flat(end)
        conf = tuple(sorted(self.conf.items()))
        return [
            KafkaSlice(
                t, p, begin.get((t, p), 0), o, conf, self.fail_on_data_loss, self.outage_timeout_s
            )
            for (t, p), o in sorted(stop.items())
            if o > begin.get((t, p), 0)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaTask)
        for part in partition.slices:
            yield from read_slice(part)

    def commit(self, end: Offsets) -> None:
        pass

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _nest(flat: Mapping[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, partition), offset in sorted(flat.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def _flat(nested: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in nested.items() for p, o in parts.items()}


def _admit(
    begin: Mapping[tuple[str, int], int], end: Mapping[tuple[str, int], int], budget: int | None
) -> dict[tuple[str, int], int]:
    """At most ``budget`` offsets in all, shared in proportion to what each partition has
    waiting (as Spark's ``maxOffsetsPerTrigger``); leftovers go to the largest remainders.

    >>> _admit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 300, ("t", 1): 100}, 200)
    {('t', 0): 150, ('t', 1): 50}
    """
    waiting = {tp: end[tp] - begin[tp] for tp in end}
    total = sum(waiting.values())
    if budget is None or total <= budget:
        return dict(end)
    shares = {tp: budget * w // total for tp, w in waiting.items()}
    left = budget - sum(shares.values())
    by_remainder = sorted(waiting, key=lambda tp: (-(budget * waiting[tp] % total), tp))
    for tp in by_remainder[:left]:
        shares[tp] += 1
    return {tp: begin[tp] + shares[tp] for tp in end}


class KafkaSource(DataSource):
    """``spark.readStream.format("faultline-kafka")`` with Spark's Kafka option names."""

    @classmethod
    def name(cls) -> str:
        return "faultline-kafka"

    def schema(self) -> str:
        return RAW_SCHEMA

    def streamReader(self, schema: Any) -> KafkaReader:
        return KafkaReader(dict(self.options))


# --- publishing -----------------------------------------------------------------------------------
