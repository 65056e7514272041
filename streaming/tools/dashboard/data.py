"""What the dashboard shows, folded from the tables' new files at each refresh.

Each table is read through a :class:`Feed`: at a refresh it loads the Delta log's new versions
and reads only the files added since the last one, and only the columns the page needs. The
rows are folded into per-minute rollups (sends, failures and a latency histogram per broker and
minute; routing decisions, delay-queue traffic, transaction changes and late events per minute),
into the decision rows that bound isolation windows and into the half messages still waiting, so
a refresh costs what the job wrote since the previous one, not what the tables hold. Files whose
event times all fall before the window (``window_ms`` before the latest batch's clock) are
skipped unopened: those of the ``event_date`` partitions (day folders) before the window's first
day, and, within those days, by the time range the job writes into each file's Delta statistics;
so neither the first load nor a refresh grows with the days the tables keep. A table
whose files were removed (compaction, a rewrite) is read again from the start.

Latency percentiles come from histogram buckets (:func:`latency_bucket`), so two minutes' or two
batches' histograms add up exactly; a percentile is exact up to 100 ms and within 1% above (the
bucket's midpoint).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from streaming.client import ROUTE_DECISIONS, publish_order
from streaming.job.sink import table_format, table_schema
from streaming.tools import explain
from streaming.tools.states import WORDS, BrokerState
from udfs.errors import FaultlineError
from udfs.rocketmq import PROFILES, Outcome
from udfs.schema import BATCHES, PARTITION, TABLE_FORMAT, TABLES, TIME_COLUMNS
from udfs.vocabulary import Decision, TableName, TransactionState

log = logging.getLogger("faultline.dashboard")

MINUTE = 60_000
EXACT = 100
"""Latencies up to this many ms have a histogram bucket each."""
GAMMA = 1.02
"""Above :data:`EXACT`, the ratio between a bucket's bounds: its midpoint is within 1% of any
latency in it."""
MARK_SPANS = (1_000, MINUTE, 10 * MINUTE, 60 * MINUTE)
"""The spans the timeline's failed-send marks are counted over, finest first."""
EXAMPLES = 3
"""Example records kept per quarantine reason and per late-event kind."""
BATCH_ROWS = 2_000
"""The most recent batches the job-health panel keeps."""
RETURNED = tuple(o.value for o in Outcome if o.returned)
"""Outcomes where the broker answered: any other is a failed send."""
_REASON = re.compile(r"after (\d+) ms( \(isolation\))?")
TRANSACTION_KINDS = {
    TransactionState.CHECK: "checks",
    TransactionState.DISCARDED: "discarded or skipped",
    TransactionState.SKIPPED: "discarded or skipped",
    TransactionState.END_TO_UNAVAILABLE_BROKER: "ends to an unavailable broker",
    TransactionState.END_REJECTED: "ends rejected",
}
"""The ``transactions`` states the page counts over time, by what it calls them."""

COLUMNS = {
    TableName.FAULT_ITEMS: [
        "scope",
        "cluster",
        "broker_name",
        "event_time",
        "latency_ms",
        "outcome",
    ],
    TableName.BROKER_DECISIONS: list(TABLES[TableName.BROKER_DECISIONS].names),
    TableName.ROUTING_DECISIONS: [
        "cluster",
        "scope",
        "decided_at",
        "failed_broker",
        "selected_broker",
        "rule",
    ],
    TableName.HEARTBEATS: ["cluster", "event_time"],
    TableName.SCHEDULE_ENTRIES: ["cluster", "delay_level", "store_time"],
    TableName.REDELIVERIES: ["cluster", "delay_level", "store_time", "deliver_at", "dlq"],
    TableName.QUARANTINE: ["reason_code", "reason", "raw", "origin", "seen_at"],
    TableName.LATE_EVENTS: ["cluster", "kind", "event_time", "clock", "raw", "origin"],
    TableName.TRANSACTIONS: [
        "cluster",
        "transaction_id",
        "broker_name",
        "state",
        "effective_at",
        "born_at",
        "next_check_at",
    ],
    TableName.BATCHES: list(BATCHES.names),
}
"""The tables the page reads and, of each, the columns it needs."""
WHERE = {TableName.FAULT_ITEMS: ds.field("scope") == "cluster"}
"""Rows the page needs, read as such: the cluster scope has one fault item per send result."""
LOOKBACK_MS = 86_400_000
"""How far before the window the page reads the tables whose rows still matter after their time:
a message waits in a delay queue at most its level's delay (2 h at RocketMQ's level 18), a half
message at most its checks (15 of 60 s by RocketMQ's defaults); both end well within a day."""
BEFORE_WINDOW: dict[str, int] = {
    TableName.SCHEDULE_ENTRIES: LOOKBACK_MS,
    TableName.REDELIVERIES: LOOKBACK_MS,
    TableName.TRANSACTIONS: LOOKBACK_MS,
}
"""The tables read from :data:`LOOKBACK_MS` before the window: what is still waiting at the
clock (a delay queue's messages, a half message) began no earlier."""
READ_BY = {**TIME_COLUMNS, TableName.BATCHES: "clock"}
"""The column by which a window skips each table's files: its event time, the batch's clock."""
WINDOWED = (
    TableName.BATCHES,
    TableName.FAULT_ITEMS,
    TableName.BROKER_DECISIONS,
    TableName.ROUTING_DECISIONS,
    TableName.HEARTBEATS,
    *BEFORE_WINDOW,
)
"""Tables read only from the window's start (or :data:`BEFORE_WINDOW`'s), so the first load and
a refresh do not grow with the days the tables keep. ``quarantine`` and ``late_events`` are read
whole: their days are those of the records' own times (a late event's may be long before it
came), and both are few and expire with the tables' retention (``maintenance``)."""


class TablesError(FaultlineError):
    """The folder holds no faultline tables this version can read; the message says why."""


def check_output(output: Path) -> None:
    """Raise :class:`TablesError` unless ``output`` holds every table the job writes (each of
    :class:`~udfs.vocabulary.TableName`, also those the page does not read: a folder without
    them is not a whole faultline output), in a format this reads."""
    names = list(TableName)
    missing = [n for n in names if not (output / n / "_delta_log").is_dir()]
    if len(missing) == len(names):
        raise TablesError(
            f"{output}: no faultline tables here (expected {', '.join(names)}). Give the "
            "--output folder of a faultline job, or start the job first: the tables appear "
            "when it starts"
        )
    if missing:
        raise TablesError(
            f"{output}: tables missing: {', '.join(missing)}. Is this a faultline job's "
            "--output folder, made by this version?"
        )
    from deltalake import DeltaTable

    for name in names:
        described = table_format(DeltaTable(str(output / name)))
        if described is not None and described > TABLE_FORMAT:
            raise TablesError(
                f"{output / name} was written by a newer faultline (table format "
                f"{described}; this one reads format {TABLE_FORMAT} and older): upgrade "
                "faultline to see it"
            )


class Feed:
    """One table's rows added since the previous :meth:`poll`, read by Delta version."""

    def __init__(
        self,
        path: Path,
        schema: pa.Schema,
        columns: list[str],
        time: str | None,
        where: ds.Expression | None = None,
    ):
        self.path = path
        self.schema = schema
        self.columns = columns
        self.where = where
        self.time = time
        self.table: Any = None
        self.version = -1
        self.seen: set[str] = set()
        self.reads = 0
        """Files read so far (the benchmark and tests look at it)."""

    def latest(self, column: str) -> int | None:
        """The largest ``column`` in the table's files, from the Delta log's statistics alone
        (None: no file has them)."""
        actions = pa.table(self._load().get_add_actions(flatten=True))
        name = f"max.{column}"
        top = pc.max(actions[name]).as_py() if name in actions.column_names else None
        return None if top is None else int(top)

    def _load(self) -> Any:
        from deltalake import DeltaTable

        if self.table is None:
            self.table = DeltaTable(str(self.path))
        else:
            self.table.update_incremental()
        return self.table

    def poll(self, since: int | None) -> tuple[bool, pa.Table | None]:
        """``(removed, rows)``: whether files read before are gone from the table (then the
        rows are the whole table again), and the rows of the new files, or None. With ``since``,
        files whose event times all fall before it are skipped."""
        version = self._load().version()
        if version == self.version:
            return False, None
        self.version = version
        actions = pa.table(self.table.get_add_actions(flatten=True))
        paths = actions["path"].to_pylist()
        removed = bool(self.seen.difference(paths))
        if removed:
            self.seen = set()
        fresh = np.array([p not in self.seen for p in paths], dtype=bool)
        self.seen.update(paths)
        wanted = fresh
        if since is not None and self.time is not None:
            wanted = wanted & ~self._before(actions, since)
        chosen = [str(self.path / p) for p, keep in zip(paths, wanted, strict=True) if keep]
        if not chosen:
            return removed, None
        self.reads += len(chosen)
        dataset = ds.dataset(chosen, schema=self.schema, format="parquet")
        return removed, dataset.to_table(columns=self.columns, filter=self.where)

    def _before(self, actions: pa.Table, since: int) -> np.ndarray:
        """The files whose rows all fall before ``since``: those of an ``event_date`` partition
        (a day folder) before the day of ``since``, and, within the days kept, those whose
        time column's maximum in the Delta log is before it (a file without statistics is
        read)."""
        before = np.zeros(len(actions), dtype=bool)
        day = f"partition.{PARTITION}"
        if day in actions.column_names:
            first = pa.scalar(since, pa.timestamp("ms")).cast(pa.date32())
            days = pc.fill_null(pc.less(actions[day], first), False)
            before |= days.to_numpy(zero_copy_only=False)
        last = f"max.{self.time}"
        if last in actions.column_names:
            ends = pc.fill_null(pc.less(actions[last], since), False)
            before |= ends.to_numpy(zero_copy_only=False)
        return before


def latency_bucket(latency_ms: np.ndarray) -> np.ndarray:
    """The histogram bucket of each latency: the latency itself up to :data:`EXACT` ms, then
    log-spaced, ``EXACT + ceil(log_GAMMA(ms / EXACT))``."""
    ms = np.clip(np.asarray(latency_ms, dtype=np.float64), 0.0, None)
    above = ms > EXACT
    out = np.rint(ms).astype(np.int64)
    out[above] = EXACT + np.ceil(np.log(ms[above] / EXACT) / math.log(GAMMA)).astype(np.int64)
    return out


def bucket_value(bucket: np.ndarray) -> np.ndarray:
    """A bucket's latency: itself up to :data:`EXACT`, then the midpoint of its range
    ``(EXACT * GAMMA**(i-1), EXACT * GAMMA**i]`` (``i = bucket - EXACT``), within 1% of any
    value in it."""
    b = np.asarray(bucket, dtype=np.float64)
    log_spaced = EXACT * 2 * np.power(GAMMA, b - EXACT) / (1 + GAMMA)
    return np.where(b > EXACT, log_spaced, b)


def percentiles(hist: pd.DataFrame, keys: list[str], qs: Iterable[float]) -> pd.DataFrame:
    """Per group of ``keys``, the nearest-rank percentile ``q`` of a histogram given as rows of
    ``keys`` + ``bucket`` + ``sends``; columns ``p<100q>`` (e.g. ``p50``, ``p99``)."""
    hist = hist[hist["sends"] > 0].sort_values([*keys, "bucket"])
    groups = hist.groupby(keys, sort=False)["sends"]
    cumulative = groups.cumsum().to_numpy()
    total = groups.transform("sum").to_numpy()
    out = hist[keys].drop_duplicates().set_index(keys)
    for q in qs:
        reached = hist[cumulative >= np.ceil(q * total)]
        first = reached.groupby(keys, sort=False)["bucket"].first()
        out[f"p{round(q * 100)}"] = (
            np.round(bucket_value(first.to_numpy()), 1) if len(first) else []
        )
    return out.reset_index()


class MinuteStore:
    """Sums per key and minute. A refresh regroups only the rows of the minutes it touches, in
    one vectorized pass; minutes before the window are dropped."""

    def __init__(self, keys: list[str], values: list[str]):
        self.keys = [*keys, "minute"]
        self.values = values
        self.rows = pd.DataFrame(columns=[*self.keys, *values])

    def add(self, frame: pd.DataFrame) -> np.ndarray:
        """Fold rows of the keys, ``minute`` and the values in; returns the minutes touched."""
        touched = frame["minute"].unique()
        hit = self.rows["minute"].isin(touched)
        new = frame[self.rows.columns]
        both = pd.concat([self.rows[hit], new], ignore_index=True) if hit.any() else new
        merged = both.groupby(self.keys, as_index=False, sort=False)[self.values].sum()
        kept = self.rows[~hit]
        self.rows = pd.concat([kept, merged], ignore_index=True) if len(kept) else merged
        return np.asarray(touched)

    def drop_before(self, since: int) -> None:
        self.rows = self.rows[self.rows["minute"] + MINUTE > since]

    def frame(self) -> pd.DataFrame:
        return self.rows


def _minute(times: Any) -> np.ndarray:
    t = np.asarray(times, dtype=np.int64)
    return t - t % MINUTE


@dataclass
class Model:
    """Everything the page shows, kept up to date by :meth:`refresh`."""

    output: Path
    window_ms: int | None = 24 * 3_600_000
    """How much event time before the latest clock the page reads (None: everything)."""
    feeds: dict[str, Feed] = field(default_factory=dict)
    since: int | None = None
    refreshed: int = 0

    def __post_init__(self) -> None:
        self._start()

    def _start(self) -> None:
        self.feeds = {
            name: Feed(
                self.output / name,
                BATCHES if name == TableName.BATCHES else table_schema(name),
                columns,
                READ_BY.get(name) if name in WINDOWED else None,
                WHERE.get(name),
            )
            for name, columns in COLUMNS.items()
        }
        self.since = None
        self.sends = MinuteStore(["cluster", "broker_name", "bucket"], ["sends", "failures"])
        self.summary = pd.DataFrame(
            columns=["cluster", "broker_name", "minute", "sends", "failures", "p50", "p99"]
        )
        self.failures = MinuteStore(["cluster", "broker_name", "second"], ["failures"])
        self.routing = MinuteStore(
            ["cluster", "scope", "failed_broker", "selected_broker", "rule"], ["decisions"]
        )
        self.scheduled = MinuteStore(["cluster", "delay_level"], ["messages"])
        self.released = MinuteStore(["cluster", "delay_level", "dlq"], ["messages"])
        self.queued = MinuteStore(["cluster", "delay_level"], ["entries", "releases"])
        """Per minute of ``store_time``: messages that entered a delay queue, and of them the
        ones released (or sent to the DLQ): the difference is what still waits."""
        self.transacted = MinuteStore(["cluster", "state"], ["rows"])
        self.waiting = pd.DataFrame(columns=WAITING)
        """Per transaction still waiting for an end or a check, its latest row."""
        self.decisions = pd.DataFrame(columns=[*COLUMNS[TableName.BROKER_DECISIONS], "extends"])
        self.clocks: dict[str, int] = {}
        self.drawn: dict[tuple[str, tuple[str, ...]], pd.DataFrame] = {}
        """:meth:`windows` per (cluster, producers), until the decisions change."""
        self.quarantined = pd.DataFrame(columns=["reason_code", "records"])
        self.quarantine_examples: dict[str, list[dict[str, Any]]] = {}
        self.late_total = pd.DataFrame(columns=["cluster", "kind", "events"])
        self.late_examples: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.batches = pd.DataFrame(columns=COLUMNS[TableName.BATCHES])

    def refresh(self) -> None:
        """Read what the tables got since the last refresh. Raises :class:`TablesError` when
        the folder is not (or no longer) a readable faultline output."""
        if self.refreshed == 0:
            check_output(self.output)
        batches = self.feeds[TableName.BATCHES]
        if self.window_ms is not None:  # from the log: batches before the window stay unopened
            latest = batches.latest("clock")
            if latest is not None:
                self.since = latest - self.window_ms
        removed, rows = batches.poll(self.since)
        if removed:  # Spark's progress rewrites a batch's row: the rows are all of them again
            self.batches = self.batches.iloc[0:0]
        if rows is not None:
            self._fold_batches(rows)
        if self.window_ms is not None and len(self.batches):
            clock = self.batches["clock"].max()
            if pd.notna(clock):
                self.since = int(clock) - self.window_ms
        for name in COLUMNS:
            if name == TableName.BATCHES:
                continue
            removed, rows = self.feeds[name].poll(self._read_from(name))
            if removed:
                log.info("%s: files were removed (compaction?): reading it again", name)
                self._start()
                return self.refresh()
            if rows is not None and len(rows):
                getattr(self, f"_fold_{name}")(rows)
        if self.since is not None:
            stores = (self.sends, self.failures, self.routing, self.scheduled, self.released)
            for store in (*stores, self.transacted):
                store.drop_before(self.since)
            self.queued.drop_before(cast(int, self._read_from(TableName.SCHEDULE_ENTRIES)))
            self.summary = self.summary[self.summary["minute"] + MINUTE > self.since]
        self.refreshed += 1
        return None

    def _read_from(self, name: str) -> int | None:
        """Where the read of ``name`` starts: the window's start, or as far before it as
        :data:`BEFORE_WINDOW` says, on a whole minute (a message's entry into a delay queue and
        its release, which cannot come before it, are then kept or dropped together)."""
        if self.since is None:
            return None
        start = int(self.since) - BEFORE_WINDOW.get(name, 0)
        return start - start % MINUTE

    # -- folding each table's new rows ----------------------------------------------------

    def _fold_batches(self, rows: pa.Table) -> None:
        new = rows.to_pandas()
        both = pd.concat([self.batches, new], ignore_index=True) if len(self.batches) else new
        self.batches = both.sort_values("batch_id").tail(BATCH_ROWS).reset_index(drop=True)

    def _clock(self, clusters: pa.Array, times: pa.Array) -> None:
        if not len(clusters):
            return
        maxima = pa.table({"c": clusters, "t": times}).group_by("c").aggregate([("t", "max")])
        for c, t in zip(maxima["c"].to_pylist(), maxima["t_max"].to_pylist(), strict=True):
            if c is not None and t is not None:
                self.clocks[c] = max(self.clocks.get(c, t), t)

    def _fold_fault_items(self, rows: pa.Table) -> None:
        self._clock(rows["cluster"], rows["event_time"])
        times = rows["event_time"].to_numpy()
        failed = ~pc.is_in(rows["outcome"], value_set=pa.array(RETURNED)).to_numpy(
            zero_copy_only=False
        )
        keyed = pa.table(
            {
                "cluster": rows["cluster"],
                "broker_name": rows["broker_name"],
                "minute": _minute(times),
                "bucket": latency_bucket(rows["latency_ms"].to_numpy(zero_copy_only=False)),
                "sends": np.ones(len(times), dtype=np.int64),
                "failures": failed.astype(np.int64),
            }
        )
        grouped = keyed.group_by(["cluster", "broker_name", "minute", "bucket"]).aggregate(
            [("sends", "sum"), ("failures", "sum")]
        )
        frame = grouped.to_pandas().rename(
            columns={"sends_sum": "sends", "failures_sum": "failures"}
        )
        touched = self.sends.add(frame)
        hist = self.sends.rows[self.sends.rows["minute"].isin(touched)]
        keys = ["cluster", "broker_name", "minute"]
        totals = hist.groupby(keys, as_index=False, sort=False)[["sends", "failures"]].sum()
        fresh = totals.merge(percentiles(hist, keys, (0.5, 0.99)), on=keys)
        kept = self.summary[~self.summary["minute"].isin(touched)]
        self.summary = pd.concat([kept, fresh], ignore_index=True) if len(kept) else fresh
        if failed.any():
            seconds = (
                pa.table(
                    {
                        "cluster": rows["cluster"].filter(failed),
                        "broker_name": rows["broker_name"].filter(failed),
                        "second": times[failed] - times[failed] % 1000,
                        "failures": np.ones(int(failed.sum()), dtype=np.int64),
                    }
                )
                .group_by(["cluster", "broker_name", "second"])
                .aggregate([("failures", "sum")])
            )
            per_second = seconds.to_pandas().rename(columns={"failures_sum": "failures"})
            per_second["minute"] = _minute(per_second["second"])
            self.failures.add(per_second)

    def _fold_broker_decisions(self, rows: pa.Table) -> None:
        self._clock(rows["cluster"], rows["effective_at"])
        new = rows.to_pandas()
        new["extends"] = (new["decision"] == Decision.EXTEND).astype("int64")
        both = pd.concat([self.decisions, new], ignore_index=True) if len(self.decisions) else new
        extend = both["decision"] == Decision.EXTEND
        keys = ["cluster", "scope", "scope_key", "broker_name"]
        extends = both[extend].assign(minute=_minute(both.loc[extend, "effective_at"]))
        extends = extends.sort_values("effective_at")
        last = extends.groupby([*keys, "minute"], sort=False).tail(1).drop(columns="extends")
        counts = extends.groupby([*keys, "minute"], as_index=False)["extends"].sum()
        compact = last.merge(counts, on=[*keys, "minute"]).drop(columns="minute")
        self.decisions = pd.concat([both[~extend], compact], ignore_index=True)
        self.drawn = {}

    def _fold_routing_decisions(self, rows: pa.Table) -> None:
        frame = rows.to_pandas()
        frame["minute"] = _minute(frame["decided_at"])
        frame["decisions"] = 1
        frame = frame.fillna({"failed_broker": "-", "selected_broker": "-", "rule": "-"})
        self.routing.add(frame)

    def _fold_heartbeats(self, rows: pa.Table) -> None:
        self._clock(rows["cluster"], rows["event_time"])

    def _fold_schedule_entries(self, rows: pa.Table) -> None:
        frame = rows.to_pandas()
        frame["minute"] = _minute(frame["store_time"])
        frame["messages"] = 1
        self.scheduled.add(frame)
        self.queued.add(frame.assign(entries=1, releases=0))

    def _fold_redeliveries(self, rows: pa.Table) -> None:
        frame = rows.to_pandas()
        frame["minute"] = _minute(frame["deliver_at"])
        frame["messages"] = 1
        self.released.add(frame)
        queued = frame[frame["delay_level"] > 0]  # level 0: to the DLQ at once, never queued
        self.queued.add(queued.assign(minute=_minute(queued["store_time"]), entries=0, releases=1))

    def _fold_transactions(self, rows: pa.Table) -> None:
        self._clock(rows["cluster"], rows["effective_at"])
        frame = rows.to_pandas()
        frame["minute"] = _minute(frame["effective_at"])
        frame["rows"] = 1
        self.transacted.add(frame)
        # the latest row of each transaction, as ``streaming.job.summary.transaction_states``
        # reads it: a settled one (no next check) leaves the page's memory
        new = frame[WAITING]
        both = pd.concat([self.waiting, new], ignore_index=True) if len(self.waiting) else new
        both = both.assign(settled=both["next_check_at"].isna())
        latest = both.sort_values(["effective_at", "settled"], kind="stable")
        latest = latest.groupby(["cluster", "transaction_id"], sort=False).tail(1)
        self.waiting = latest[~latest["settled"]][WAITING].reset_index(drop=True)

    def _fold_quarantine(self, rows: pa.Table) -> None:
        frame = rows.to_pandas()
        new = (
            frame.groupby("reason_code", as_index=False).size().rename(columns={"size": "records"})
        )
        both = pd.concat([self.quarantined, new], ignore_index=True)
        self.quarantined = both.groupby("reason_code", as_index=False)[["records"]].sum()
        for code, part in frame.groupby("reason_code"):
            kept = self.quarantine_examples.setdefault(str(code), [])
            kept.extend(_examples(part, EXAMPLES - len(kept)))

    def _fold_late_events(self, rows: pa.Table) -> None:
        frame = rows.to_pandas()
        frame["events"] = 1
        new = frame.groupby(["cluster", "kind"], as_index=False)[["events"]].sum()
        both = pd.concat([self.late_total, new], ignore_index=True)
        self.late_total = both.groupby(["cluster", "kind"], as_index=False)[["events"]].sum()
        for (cluster, kind), part in frame.groupby(["cluster", "kind"]):
            kept = self.late_examples.setdefault((str(cluster), str(kind)), [])
            kept.extend(_examples(part, EXAMPLES - len(kept)))

    # -- what the page asks ----------------------------------------------------------------

    def clusters(self) -> list[str]:
        return sorted(self.clocks)

    def clock(self, cluster: str) -> int | None:
        return self.clocks.get(cluster)

    def producers(self, cluster: str) -> list[str]:
        d = self.decisions
        mine = d[(d["cluster"] == cluster) & (d["scope"] == "producer")]
        return sorted(mine["scope_key"].dropna().unique().tolist())

    def windows(self, cluster: str, producers: Iterable[str] = ()) -> pd.DataFrame:
        """The windows of each state other than available (in the words of
        :mod:`streaming.tools.states`) of the cluster scope, and of ``producers``' own scopes:
        ``scope``, ``scope_key``, ``broker_name``, ``state`` (isolated, outlier, panic-kept,
        probing, out of route), ``start``, ``end`` (None: still holds), ``until`` (the latest
        ``available_from``), ``reason`` (the decision that began it), ``band``, ``profile``,
        ``extends``. The route's windows (out of route) are drawn beside the FaultItem's, which
        they may overlap."""
        key = (cluster, tuple(sorted(set(producers))))
        if key not in self.drawn:
            self.drawn[key] = self._windows(cluster, set(key[1]))
        return self.drawn[key]

    def _windows(self, cluster: str, wanted: set[str]) -> pd.DataFrame:
        d = self.decisions
        mine = d[
            (d["cluster"] == cluster)
            & d["broker_name"].notna()
            & d["decision"].isin([*WORDS, *ROUTE_DECISIONS])  # not QUEUE_SWAP: not a state
            & ((d["scope"] == "cluster") | d["scope_key"].isin(wanted))
        ]
        rows = cast(list[dict[str, Any]], mine.to_dict("records"))
        rows.sort(key=lambda r: (*_track(r), *publish_order(r)))
        out: list[dict[str, Any]] = []
        running: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        # per track and instant, in the decision topic's order, the state after the instant's
        # last row, as streaming.tools.states.timeline reads it (an ISOLATE the isolation cap
        # answers with PANIC at once is panic-kept, not a window of no length)
        for (key, at), instant in groupby(rows, key=lambda r: (_track(r), int(r["effective_at"]))):
            mine_now = list(instant)
            state = _state(mine_now[-1])
            extends = sum(int(r["extends"] or 0) for r in mine_now)
            now = running.get(key)
            if now is not None and now["state"] == state:
                now["until"] = int(mine_now[-1]["available_from"])
                now["extends"] += extends
                continue
            if now is not None:  # another state begins: this one ends
                window = running.pop(key)
                window["end"] = at
                out.append(window)
            if state != BrokerState.AVAILABLE:
                r = next(r for r in mine_now if _state(r) == state)  # what began it
                running[key] = {
                    "scope": r["scope"],
                    "scope_key": r["scope_key"],
                    "broker_name": r["broker_name"],
                    "state": str(state),
                    "start": at,
                    "end": None,
                    "until": int(mine_now[-1]["available_from"]),
                    "reason": r["reason"],
                    "band": "" if key[3] == "route" else band(r["profile"], r["reason"]),
                    "profile": r["profile"],
                    "cause_event_id": r["cause_event_id"],
                    "extends": extends,
                }
        out.extend(running.values())
        columns = ["scope", "scope_key", "broker_name", "state", "start", "end", "until"]
        frame = pd.DataFrame(out, columns=[*columns, "reason", "band", "profile", "extends"])
        return frame.sort_values(["broker_name", "start"], ignore_index=True, kind="stable")

    def now(self, cluster: str) -> pd.DataFrame:
        """The windows that still hold at the cluster's clock."""
        w = self.windows(cluster, self.producers(cluster))
        return w[w["end"].isna()].reset_index(drop=True)

    def slowest(self, cluster: str) -> list[str]:
        """The cluster's brokers by their send latency's p99 over the window, highest first
        (from the per-minute histograms added up, so exact as :func:`percentiles` is)."""
        h = self.sends.frame()
        mine = h[h["cluster"] == cluster]
        if mine.empty:
            return []
        per = mine.groupby(["broker_name", "bucket"], as_index=False)[["sends"]].sum()
        p99 = percentiles(per, ["broker_name"], (0.99,))
        return p99.sort_values(["p99", "broker_name"], ascending=[False, True])[
            "broker_name"
        ].tolist()

    def latency(self, cluster: str) -> pd.DataFrame:
        """Per broker and minute: ``sends``, ``failures``, ``p50``, ``p99`` (ms)."""
        mine = self.summary[self.summary["cluster"] == cluster].drop(columns="cluster")
        return mine.sort_values(["broker_name", "minute"], ignore_index=True)

    def failed_sends(self, cluster: str, most: int = 2_000) -> pd.DataFrame:
        """Failed sends per broker and second (``at``, ``failures``), or per minute, 10 minutes
        or hour (``span``, ms), the finest that gives at most ``most`` marks."""
        f = self.failures.frame()
        mine = f[f["cluster"] == cluster]
        for span in MARK_SPANS:
            at = mine["second"] - mine["second"] % span
            if at.nunique() * mine["broker_name"].nunique() <= most or span == MARK_SPANS[-1]:
                break
        marks = mine.assign(at=at).groupby(["broker_name", "at"], as_index=False)[["failures"]]
        return marks.sum().assign(span=span)

    def routing_minutes(self, cluster: str, scope: str = "cluster") -> pd.DataFrame:
        r = self.routing.frame()
        return r[(r["cluster"] == cluster) & (r["scope"] == scope)].reset_index(drop=True)

    def delay_levels(self, cluster: str) -> pd.DataFrame:
        """Per level: messages scheduled, released and sent to the DLQ in the window (level 0:
        to the DLQ at once), and still waiting at the end of what the tables hold. Over a
        window that covers the tables (``--window all``), the run summary's counts."""
        s = self.scheduled.frame()
        r = self.released.frame()
        r = r[r["cluster"] == cluster]
        dlq = r["dlq"].astype(bool)
        q = self.queued.frame()
        q = q[q["cluster"] == cluster].groupby("delay_level")[["entries", "releases"]].sum()
        counts = pd.DataFrame(
            {
                "scheduled": s[s["cluster"] == cluster].groupby("delay_level")["messages"].sum(),
                "released": r[~dlq].groupby("delay_level")["messages"].sum(),
                "dlq": r[dlq].groupby("delay_level")["messages"].sum(),
                "waiting": q["entries"] - q["releases"],
            }
        )
        counts = counts.fillna(0).astype("int64")
        return counts.sort_index().rename_axis("delay_level").reset_index()

    def delay_minutes(self, cluster: str) -> pd.DataFrame:
        """Per level and minute: messages ``scheduled``, ``released`` and to the ``dlq``."""
        s = self.scheduled.frame()
        s = s[s["cluster"] == cluster].assign(what="scheduled")
        r = self.released.frame()
        r = r[r["cluster"] == cluster]
        r = r.assign(what=np.where(r["dlq"].astype(bool), "dlq", "released"))
        both = pd.concat([s, r], ignore_index=True)
        return both.groupby(["delay_level", "minute", "what"], as_index=False)[["messages"]].sum()

    def transactions_waiting(self, cluster: str) -> pd.DataFrame:
        """Per broker, the half messages waiting for an end or a check at the cluster's clock:
        ``waiting``, the oldest one's ``born_at`` and ``age`` (ms, at the clock), the earliest
        ``next_check_at``."""
        w = self.waiting[self.waiting["cluster"] == cluster]
        per = w.groupby("broker_name", as_index=False).agg(
            waiting=("transaction_id", "size"),
            born_at=("born_at", "min"),
            next_check_at=("next_check_at", "min"),
        )
        clock = self.clock(cluster)
        per["age"] = None if clock is None else clock - per["born_at"]
        return per.sort_values("broker_name", ignore_index=True)

    def transaction_minutes(self, cluster: str) -> pd.DataFrame:
        """Per minute, the rows of each of :data:`TRANSACTION_KINDS` (``what``, ``minute``,
        ``rows``); a minute without any has no row."""
        t = self.transacted.frame()
        mine = t[(t["cluster"] == cluster) & t["state"].isin(list(TRANSACTION_KINDS))]
        mine = mine.assign(what=mine["state"].map(TRANSACTION_KINDS))
        per = mine.groupby(["what", "minute"], as_index=False)[["rows"]].sum()
        return per.sort_values(["what", "minute"], ignore_index=True)

    def transaction_totals(self, cluster: str) -> dict[str, int]:
        """The rows of each of :data:`TRANSACTION_KINDS` in the window (0 for none), and of
        every state under ``"all"``."""
        t = self.transacted.frame()
        mine = t[t["cluster"] == cluster]
        kinds = mine["state"].map(TRANSACTION_KINDS)
        totals = {what: 0 for what in TRANSACTION_KINDS.values()}
        totals.update({str(k): int(v) for k, v in mine.groupby(kinds)["rows"].sum().items()})
        totals["all"] = int(mine["rows"].sum())
        return totals


def _track(row: dict[str, Any]) -> tuple[str, str, str, str]:
    """A decision's track: the route's or the FaultItem's, per scope and broker."""
    route = "route" if row["decision"] in ROUTE_DECISIONS else "fault"
    return row["scope"], row["scope_key"], row["broker_name"], route


def _state(row: dict[str, Any]) -> BrokerState:
    """The state a decision leaves its track in (:data:`~streaming.tools.states.WORDS`)."""
    if row["decision"] == Decision.ROUTE_EXPIRED:
        return BrokerState.OUT_OF_ROUTE
    if row["decision"] == Decision.ROUTE_RESTORED:
        return BrokerState.AVAILABLE
    return WORDS[row["decision"]]


WAITING = ["cluster", "transaction_id", "broker_name", "born_at", "effective_at", "next_check_at"]
"""What the page keeps of a waiting half message: its latest row's columns."""


def band(profile: str | None, reason: str | None) -> str:
    """The latency band of an isolation, from its decision's reason (``OUTCOME after N ms
    (isolation): ...``), as ``faultline explain`` words it."""
    match = _REASON.search(reason or "")
    if profile is None or profile not in PROFILES or not match:
        return ""
    return explain.band(profile, int(match.group(1)), bool(match.group(2)))


def _examples(part: pd.DataFrame, n: int) -> list[dict[str, Any]]:
    if n <= 0:
        return []
    rows = cast(list[dict[str, Any]], part.head(n).to_dict("records"))
    for r in rows:
        if isinstance(r.get("raw"), str) and len(r["raw"]) > 300:
            r["raw"] = r["raw"][:300] + "..."
    return rows
