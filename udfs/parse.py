"""Raw records to typed events, free of Spark: every record gets either the event columns of
:data:`udfs.schema.EVENTS` or a ``reason_code`` and ``reason`` for the quarantine table.

The input contract: one JSON object per Kafka message value or per line of a JSON-lines file (or
a row of a Parquet file); times are integer ms since the epoch, or an ISO-8601 text. Every event
has ``event_id`` (required, unique: a repeat is counted as a duplicate) and ``event_time``
(required), ``kind`` (one of :data:`udfs.schema.EVENT_KINDS`, default ``send_result``) and
``cluster`` (default ``default``); :data:`REQUIRED` lists each kind's required fields, and
docs/events.md every field. Fields the parser does not type are ignored. The checks run
in a fixed order and the first that fails names the record's reason code: ``DATA_LOSS``,
``MALFORMED_JSON``, ``WRONG_TYPE``, ``UNKNOWN_KIND``, ``MISSING_FIELD`` (an empty required text
counts as missing), ``EVENT_TIME_OUT_OF_RANGE`` (outside 2000-2100), ``NEGATIVE_LATENCY``,
``UNKNOWN_OUTCOME``, ``UNKNOWN_PROFILE``, ``UNKNOWN_MODE``, ``UNKNOWN_STATUS``,
``UNKNOWN_TRANSACTION``, ``UNKNOWN_LOCAL_STATE``, ``INVALID_VALUE``, ``INVALID_TRANSACTION``,
``INVALID_ROUTE``. The engine adds ``FUTURE_EVENT_TIME`` (an event time too far past its
record's ingest time) when it admits the events.

Fast path: the records of a batch are read together by Arrow's JSON reader with the expected
types. A record it cannot read that way (a number given as a string, an ISO-8601 time, a nested
value where text belongs, a malformed line) is found by halving the failing chunk, and is read on
its own by the lenient path: :func:`json.loads` with every number kept as its text, then the same
conversions Spark's ``try_cast`` makes. Both paths end in one vectorized validation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from udfs._frames import codes
from udfs.rocketmq import PROFILES, LocalTransactionState, Outcome, SendMode
from udfs.schema import EVENTS
from udfs.vocabulary import EventKind, ReasonCode

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
    "transaction",
    "transaction_id",
    "check_immunity",
    "local_state",
    "first_event_id",
)
INT_FIELDS = tuple(
    name
    for name, kind in zip(EVENTS.names, EVENTS.types, strict=True)
    if pa.types.is_integer(kind) and name not in ("event_time", "ingest_ms")
)
REQUIRED = {
    EventKind.SEND_RESULT: ("producer_id", "topic", "broker_name", "outcome", "latency_ms"),
    EventKind.CONSUME_RESULT: ("consumer_group", "topic", "message_id", "status"),
    EventKind.ROUTE: ("topic", "brokers"),
    EventKind.HEARTBEAT: ("broker_name",),
    EventKind.TRANSACTION_END: ("transaction_id", "broker_name", "local_state"),
    EventKind.TRANSACTION_CHECK: ("transaction_id", "broker_name", "local_state"),
    EventKind.SEND_SUMMARY: (
        "producer_id", "topic", "broker_name", "latency_ms", "messages", "window_start",
        "window_end", "latency_total", "latency_max", "histogram",
    ),
    EventKind.CONSUME_SUMMARY: (
        "consumer_group", "topic", "messages", "window_start", "window_end",
    ),
}  # fmt: skip
TYPED_FIELDS = (
    *STRING_FIELDS, *INT_FIELDS, "event_time", "latency_fault_enable", "brokers", "histogram"
)  # fmt: skip
"""Every field the parser types, in the order a ``WRONG_TYPE`` reason names them."""

_BROKER = pa.struct(
    [("broker_name", pa.string()), ("write_queue_nums", pa.int64()), ("perm", pa.int64())]
)
_READ = pa.schema(
    [
        *((f, pa.string()) for f in STRING_FIELDS),
        *((f, pa.int64()) for f in INT_FIELDS),
        ("event_time", pa.int64()),
        ("latency_fault_enable", pa.bool_()),
        ("brokers", pa.list_(_BROKER)),
        ("histogram", pa.list_(pa.int64())),
    ]
)
"""What a record is read as; ``_wrong`` lists the fields it had of another type."""
_PARSE = pj.ParseOptions(explicit_schema=_READ, unexpected_field_behavior="ignore")
_KEY = pj.ParseOptions(
    explicit_schema=pa.schema([("cluster", pa.string())]), unexpected_field_behavior="ignore"
)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT_RANGE = {
    f: (-(2**31), 2**31 - 1) if EVENTS.field(f).type == pa.int32() else (-(2**63), 2**63 - 1)
    for f in INT_FIELDS
}


Texts: TypeAlias = Sequence[str | None] | pa.Array | pa.ChunkedArray
"""A column of records or origins: Python strings, an Arrow array, or a pandas column."""


def parse(
    values: Texts,
    origins: Texts,
    ingest_ms: Iterable[Any],
    lost: Iterable[Any] | None = None,
) -> pa.Table:
    """The records of one batch as a table with the columns of :data:`udfs.schema.EVENTS`, in the
    order given. ``lost`` (from the Kafka source) is a count of records deleted before they were
    read, or null. The records stay in Arrow's buffers: only those the lenient path reads become
    Python strings."""
    text = _strings(values)
    n = len(text)
    malformed, lenient, bulk = _classify(text)
    parts: list[tuple[np.ndarray, pa.Table]] = []
    lenient = sorted(lenient + _read_bulk(text, bulk, parts, _PARSE))
    if lenient:
        rows = [_read_one(text[i].as_py()) for i in lenient]
        malformed[[i for i, r in zip(lenient, rows, strict=True) if r is None]] = True
        good = [(i, r) for i, r in zip(lenient, rows, strict=True) if r is not None]
        if good:
            table = _table([r for _, r in good], _READ.append(_WRONG))
            parts.append((np.array([i for i, _ in good], np.int64), table))
    return _validate(n, parts, malformed, text, _strings(origins), ingest_ms, lost)


def read_typed(values: Texts) -> pa.Table | None:
    """The records read in one go by Arrow's JSON reader as the typed columns :func:`parse`
    reads them into, or None when one of them does not fit: the parser's fast path alone,
    without checks, defaults or reasons (``streaming.bench.throughput --floor read`` measures it).

    >>> read_typed(['{"type": "heartbeat", "broker_name": "b"}']).column("broker_name")[0]
    <pyarrow.StringScalar: 'b'>
    >>> read_typed(['{"type": "heartbeat", "event_time": "soon"}']) is None
    True
    """
    return _read_json(_strings(values), _PARSE)


def _table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """``pa.Table.from_pylist``, a column at a time from the fields each row has (a lenient
    row has a few of the many columns): a twentieth of the time on 40,000 rows."""
    columns: dict[str, list[Any]] = {name: [None] * len(rows) for name in schema.names}
    for i, row in enumerate(rows):
        for name, value in row.items():
            columns[name][i] = value
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in schema}, schema=schema)


def _strings(values: Texts) -> pa.StringArray:
    """``values`` as one Arrow string array (a pandas column of Arrow strings without a copy)."""
    if not isinstance(values, pa.Array | pa.ChunkedArray):
        values = pa.array(values, from_pandas=True) if len(values) else pa.array([], pa.string())
    if isinstance(values, pa.ChunkedArray):  # a pandas column made of several
        values = values.combine_chunks()
    if values.type != pa.string():
        values = values.cast(pa.string())
    return values


def cluster_keys(values: Texts) -> pa.Array:
    """Each record's ``cluster`` as the parser will read it (``default`` when it has none or
    cannot be read): the key the records are shuffled by. Only that field is typed, so it costs
    a fraction of :func:`parse`.

    >>> cluster_keys(['{"cluster": "a", "x": {"cluster": "b"}}', '{"cluster": 7}', "{", None])
    ... # doctest: +ELLIPSIS
    <pyarrow.lib.StringArray object at ...>
    [
      "a",
      "7",
      "default",
      "default"
    ]
    """
    text = _strings(values)
    keys = np.full(len(text), "default", dtype=object)
    _, lenient, bulk = _classify(text)
    parts: list[tuple[np.ndarray, pa.Table]] = []
    lenient += _read_bulk(text, bulk, parts, _KEY)
    for idx, table in parts:
        keys[idx] = pc.fill_null(table.column("cluster"), "default").to_numpy(zero_copy_only=False)
    for i in lenient:
        keys[i] = _cluster_of(str(text[i].as_py()))
    return pa.array(keys, pa.string())


def _classify(text: pa.StringArray) -> tuple[np.ndarray, list[int], np.ndarray]:
    """Records that are null (a Kafka tombstone), blank or no JSON object (they do not start
    with ``{``: Arrow's reader must not see a bare ``null``, which crashes it); those over
    several lines, for the lenient path; and the rest, for the bulk reader."""
    opens = _np(pc.starts_with(pc.utf8_ltrim(text, _SPACE), "{"), False)
    lines = _breaks(text)
    return ~opens, np.flatnonzero(opens & lines).tolist(), np.flatnonzero(opens & ~lines)


def _buffers(text: pa.StringArray) -> tuple[np.ndarray, np.ndarray]:
    """The array's offsets, from 0, and the bytes they point into."""
    ends = np.frombuffer(text.buffers()[1], np.int32)[text.offset : text.offset + len(text) + 1]
    data = np.frombuffer(text.buffers()[2] or b"", np.uint8)[ends[0] : ends[-1]]
    return ends - ends[0], data


def _breaks(text: pa.StringArray) -> np.ndarray:
    """Which records hold a line break, read off the array's own buffers (a tenth of the time
    of Arrow's substring search)."""
    ends, data = _buffers(text)
    at = np.flatnonzero(data < 14)  # one comparison, then the few control bytes sorted out
    at = at[(data[at] == 10) | (data[at] == 13)]
    found = np.zeros(len(text), dtype=bool)
    found[np.searchsorted(ends, at, side="right") - 1] = True
    return found


_NUMBER_FIELDS = (*INT_FIELDS, "event_time", *_BROKER.names[1:])
_TEXTS, _NUMBERS_NAMED = "|".join(STRING_FIELDS), "|".join(_NUMBER_FIELDS)
_SUSPECT = "|".join(
    (
        rf'"(?:{_TEXTS})"\s*:\s*(?:[^"n\s]|n[^u])',  # a text field holding no text (or null)
        rf'"(?:{_NUMBERS_NAMED})"\s*:\s*(?:[^-0-9n\s]|-?[0-9]+[.eE])',  # ... no whole number
        r'"latency_fault_enable"\s*:\s*[^tfn\s]',
        r'"brokers"\s*:\s*(?:[^\[n\s]|\[\s*[^{\]\s])',  # not a list of objects
        r'"histogram"\s*:\s*(?:[^\[n\s]|\[[^\]]*[^-0-9,\]\s])',  # not a list of whole numbers
        r"[0-9]{19}|NaN|Infinity|[0-9][eE][-+]?[0-9]{3}",  # numbers Arrow cannot hold
        r"\\u[dD][89a-fA-F]",  # an escaped surrogate, which may stand alone
        r'"\s+:',  # a name apart from its colon, which _twice_named does not see
        r"[^}\s]\s*$",  # cut short
    )
)
"""What marks a record the bulk reader may refuse: a typed field holding a value of another
type, a number out of its range, a lone surrogate, a truncated object. A pattern for Arrow's
regular expressions (RE2), one pass over the batch."""


def _suspects(text: pa.StringArray) -> np.ndarray:
    """Records the bulk reader would likely refuse, found without reading them: the rest of a
    batch of mostly bad records can be read in bulk. A record missed costs a failed bulk read
    (the batch then goes chunk by chunk); one wrongly suspected costs a lenient read. Either
    way each record gets the same row."""
    found: np.ndarray = _np(pc.match_substring_regex(text, _SUSPECT), True) | _twice_named(text)
    return found


def _name_keys(first: np.ndarray, size: np.ndarray) -> np.ndarray:
    """A number per field name, from its first 8 bytes (little-endian, zero beyond the name)
    and its length: the typed fields' names all differ by these."""
    mixed: np.ndarray = first * np.uint64(0x9E3779B97F4A7C15) ^ size.astype(np.uint64)
    return mixed


_FIRST = np.array(TYPED_FIELDS, dtype="S8").view("<u8")
_NAME_KEYS = np.sort(_name_keys(_FIRST, np.array([len(n) for n in TYPED_FIELDS])))
assert len(np.unique(_NAME_KEYS)) == len(TYPED_FIELDS)
_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)


def _twice_named(text: pa.StringArray) -> np.ndarray:
    """Records that name a typed field twice (``"kind": ..., "kind": ...``, which Arrow's reader
    refuses), found on the array's bytes: every ``"name":`` whose length and first 8 bytes are
    a typed field's, by record. A name nested in a value counts too (a route's brokers name
    ``broker_name`` once each), as does another name that starts alike: those records are only
    read leniently."""
    ends, data = _buffers(text)
    if len(data) < 8:
        return np.zeros(len(text), dtype=bool)
    quotes = np.flatnonzero(data == ord('"'))
    named = np.flatnonzero(data[quotes[:-1] + 1] == ord(":"))  # quotes that close a name
    opening, closing = quotes[named - 1] + 1, quotes[named]
    size = np.clip(closing - opening, 0, 8)
    words = np.ndarray((len(data) - 7,), "<u8", data, strides=(1,))  # 8 bytes from every byte
    first = words[np.minimum(opening, len(data) - 8)] & _LOW_BYTES[size]
    keys = _name_keys(first, closing - opening)
    at = np.minimum(np.searchsorted(_NAME_KEYS, keys), len(_NAME_KEYS) - 1)
    typed = np.flatnonzero(_NAME_KEYS[at] == keys)
    record = np.searchsorted(ends, closing[typed], side="right") - 1
    pairs = np.sort(record * len(_NAME_KEYS) + at[typed])
    found = np.zeros(len(text), dtype=bool)
    found[pairs[1:][pairs[1:] == pairs[:-1]] // len(_NAME_KEYS)] = True
    return found


_SPACE = " \t\n\r"
"""JSON's whitespace."""
_WRONG = pa.field("_wrong", pa.list_(pa.string()))
_CHUNK = 256
_GIVE_UP = 8
"""Chunks in a row that fail the bulk reader, after which a batch is mostly bad records: the
rest of its records go to the lenient path without trying (each try costs as much as reading
a fifth of the chunk leniently)."""


def _read_bulk(
    text: pa.StringArray, idx: np.ndarray, parts: list[Any], options: pj.ParseOptions
) -> list[int]:
    """Read the records ``idx`` in one go; if that fails, those that are not :func:`_suspects`
    in one go; if that fails too, in chunks, until :data:`_GIVE_UP` chunks in a row have
    failed. Returns the records suspected, and those of the chunks that failed or were not
    tried, for the lenient path (which reads a record as the bulk reader would, only slower)."""
    table = _read_json(text if len(idx) == len(text) else text.take(idx), options)
    if table is not None:
        parts.append((idx, table))
        return []
    suspect = _suspects(text)[idx]
    lenient: list[int] = idx[suspect].tolist()
    idx = idx[~suspect]
    table = _read_json(text.take(idx), options)
    if table is not None:
        parts.append((idx, table))
        return lenient
    failed = 0
    for start in range(0, len(idx), _CHUNK):
        chunk = idx[start : start + _CHUNK]
        table = None if failed >= _GIVE_UP else _read_json(text.take(chunk), options)
        if table is None:
            lenient.extend(chunk.tolist())
            failed += 1
        else:
            parts.append((chunk, table))
            failed = 0
    return lenient


def _read_json(lines: pa.StringArray, parse_options: pj.ParseOptions) -> pa.Table | None:
    """Records of one line each as a table of the expected types, or None when one of them does
    not fit. Arrow joins them into its reader's input, without Python strings."""
    if not len(lines):
        return None
    whole = pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines)
    data = pc.binary_join(whole, "\n")[0].as_buffer()
    big = len(lines) > 4 * _CHUNK
    options = pj.ReadOptions(use_threads=big, block_size=data.size // (2 if big else 1) + 1)
    try:
        table = pj.read_json(
            pa.BufferReader(data), read_options=options, parse_options=parse_options
        )
    except pa.ArrowInvalid:
        return None
    if table.num_rows != len(lines):  # two objects on one line read as two records
        return None
    return table.append_column(_WRONG, pa.nulls(len(lines), _WRONG.type))


class _Object(dict[str, Any]):
    """A JSON object, and the names it gives more than once (the last value stands)."""

    twice: frozenset[str] = frozenset()


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object: a plain dict, or an :class:`_Object` when it gives a name twice."""
    plain = dict(pairs)
    if len(plain) == len(pairs):
        return plain
    record = _Object(pairs)
    seen: set[str] = set()
    record.twice = frozenset(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    return record


def _twice(record: Any, names: frozenset[str]) -> bool:
    """Whether ``record`` gives one of ``names`` twice, which Arrow's reader refuses; other
    names given twice are ignored, as the fields are."""
    return isinstance(record, _Object) and not record.twice.isdisjoint(names)


def _text(value: str) -> bool:
    """Whether ``value`` is Unicode text (not a lone surrogate, which ``\\ud800`` reads as)."""
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


_STRING = frozenset(STRING_FIELDS)
_TYPED = frozenset(TYPED_FIELDS)
_BROKER_FIELDS = frozenset(_BROKER.names)


_LENIENT = json.JSONDecoder(
    parse_int=str, parse_float=str, parse_constant=str, object_pairs_hook=_pairs
)
"""json.loads's decoder with these settings, made once (each call would make its own)."""


def _object(text: str) -> dict[str, Any] | None:
    """The JSON object a record holds; None when it holds none, or names a typed field twice
    (Arrow's reader refuses both). Raises ``RecursionError`` when it is nested too deeply for
    Python."""
    if text.startswith("\ufeff"):  # as json.loads refuses it
        return None
    try:
        record = _LENIENT.decode(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or _twice(record, _TYPED):
        return None
    return record


def _read_one(text: str | None) -> dict[str, Any] | None:
    """One record read leniently, as Spark's JSON reader with text fields and ``try_cast`` would:
    None when it is not a JSON object (or names a field twice)."""
    try:
        record = _object(str(text))
    except RecursionError:  # nested too deeply for Python; Arrow's reader takes any depth
        return _read_deep(str(text))
    if record is None:
        return None
    row: dict[str, Any] = {}
    wrong: list[str] = []
    for name, value in record.items():  # the common cases first, then _convert
        if value is None or name not in _TYPED:
            continue
        if type(value) is str and name in _STRING:
            if not value.isascii() and not _text(value):
                return None
            row[name] = value
            continue
        if type(value) is str and name in _NUMBERS and value.isdigit() and value.isascii():
            # a plain whole number; under 10 digits, every int field holds it
            typed = int(value) if len(value) < 10 else _whole(name, value)
        else:
            typed = _convert(name, value)
        if typed is None:
            wrong.append(name)
        else:
            row[name] = typed
    row["_wrong"] = sorted(wrong, key=TYPED_FIELDS.index) if wrong else []
    return row


def _cluster_of(text: str) -> str:
    """The ``cluster`` :func:`_read_one` reads from a record (``default`` when it reads none),
    without typing the other fields."""
    try:
        record = _object(text)
    except RecursionError:
        deep = _read_deep(text)
        cluster = None if deep is None else deep.get("cluster")
        return "default" if cluster is None else str(cluster)
    if record is None:
        return "default"
    if any(type(v) is str and not _text(v) for k, v in record.items() if k in _STRING):
        return "default"  # what _read_one does not read at all
    value = record.get("cluster")
    if value is None:
        return "default"
    typed = value if type(value) is str else _convert("cluster", value)
    return "default" if typed is None else str(typed)


_NUMBERS = frozenset((*INT_FIELDS, "event_time"))


def _convert(name: str, value: Any) -> Any:
    if isinstance(value, bool):  # JSON true/false, which Spark reads as their text
        value = "true" if value else "false"
    if name == "brokers":
        return _brokers(value)
    if name == "histogram":
        return _counts(value)
    if isinstance(value, dict | list):
        return None
    if name in STRING_FIELDS:
        return value
    text = value.strip()
    if name == "latency_fault_enable":
        return {"true": True, "false": False}.get(text.lower())
    if _INTEGER.fullmatch(text):
        return _whole(name, text)
    if name == "event_time":
        try:
            when = datetime.fromisoformat(text)
            when = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
            return int(when.timestamp() * 1000)
        except (ValueError, OverflowError):  # not a time, or one Python cannot place (year 0)
            return None
    return None


def _whole(name: str, text: str) -> int | None:
    """The whole number ``text`` holds, when the field ``name`` takes it (int64, or its range)."""
    number = _int(text)
    low, high = _INT_RANGE.get(name, (-(2**63), 2**63 - 1))
    return number if number is not None and low <= number <= high else None


def _int(text: str) -> int | None:
    """A whole number of at most 20 digits (any longer is outside int64, and Python refuses to
    read one of over 4,300)."""
    return int(text) if len(text.lstrip("+-0")) <= 20 else None


def _read_deep(text: str) -> dict[str, Any] | None:
    """A record nested deeper than Python's parser goes, read by Arrow's alone: the row, or None
    when Arrow cannot read it with the expected types either."""
    table = (
        _read_json(pa.array([text], pa.string()), _PARSE)
        if "\n" not in text and "\r" not in text
        else None
    )
    return None if table is None else table.to_pylist()[0]


def _brokers(value: Any) -> list[dict[str, Any]] | None:
    if not isinstance(value, list) or not all(isinstance(b, dict) for b in value):
        return None
    out = []
    for b in value:
        name = b.get("broker_name")
        broker: dict[str, Any] = {"broker_name": None if name is None else str(name)}
        if isinstance(name, dict | list) or _twice(b, _BROKER_FIELDS):
            return None
        if broker["broker_name"] is not None and not _text(broker["broker_name"]):
            return None
        for key in ("write_queue_nums", "perm"):
            raw = b.get(key)
            if raw is None:
                broker[key] = None
            elif isinstance(raw, str) and _INTEGER.fullmatch(raw.strip()):
                broker[key] = _int(raw.strip())
                if broker[key] is None or not -(2**63) <= broker[key] < 2**63:
                    return None
            else:
                return None
        out.append(broker)
    return out


_SUMMARY_PROFILE = "rocketmq-4.9"
"""The profile a send summary without ``client_profile`` is checked against (the engine's
default client profile; every shipped profile has the same bands)."""


def _summary_faults(
    t: pa.Table, columns: dict[str, Any], kind: _Kinds, et: np.ndarray, n: int
) -> list[tuple[np.ndarray, Any]]:
    """The ways a summary contradicts itself or summarizes what the reporting rule sends in
    full, in the order they are judged: each a mask of the records and the reason's text."""
    sends, consumes = kind.of(EventKind.SEND_SUMMARY), kind.of(EventKind.CONSUME_SUMMARY)
    summaries = sends | consumes
    if not summaries.any():
        return []

    def ints(name: str, fill: int) -> np.ndarray:
        return _np(columns[name], fill).astype(np.int64)

    messages, start, end = ints("messages", 1), ints("window_start", 0), ints("window_end", 1)
    first = np.where(_np(columns["first_time"].is_valid(), False), ints("first_time", 0), et)
    last_ms, first_ms = ints("latency_ms", 0), ints("first_latency_ms", 0)
    first_ms = np.where(_np(columns["first_latency_ms"].is_valid(), False), first_ms, last_ms)
    total, most = ints("latency_total", 0), ints("latency_max", 0)
    q0, q1 = ints("queue_index_start", 0), ints("queue_index_end", 0)
    profiles = _np(pc.fill_null(t.column("client_profile"), _SUMMARY_PROFILE), _SUMMARY_PROFILE)
    known = np.isin(profiles, list(PROFILES))
    bands = np.array([len(PROFILES[p].latency_max) + 1 if p in PROFILES else 0 for p in profiles])
    isolating = np.array([PROFILES[p].isolating_ms if p in PROFILES else 0 for p in profiles])
    histograms = np.flatnonzero(sends & _np(t.column("histogram").is_valid(), False))
    length = np.zeros(n, dtype=np.int64)
    counted = np.zeros(n, dtype=np.int64)
    if len(histograms):
        lists = t.column("histogram").take(histograms)
        length[histograms] = _np(pc.list_value_length(lists), 0)
        counted[histograms] = [sum(x or 0 for x in h) for h in lists.to_pylist()]
    negative = np.zeros(n, dtype=bool)
    for name in ("first_latency_ms", "latency_total", "latency_max"):
        negative |= _np(columns[name], 0) < 0
    outcome = t.column("outcome")
    full = (
        (_np(columns["attempt"], 0) > 0)
        | (_np(columns["delay_level"], 0) > 0)
        | (_np(columns["redelivery_count"], 0) > 0)
        | _np(t.column("transaction").is_valid(), False)
    )
    return [
        (
            summaries & (messages < 1),
            lambda i: f"messages {messages[i]}: a summary stands for at least one message",
        ),
        (
            summaries & (end <= start),
            lambda i: f"window_end {end[i]} is not after window_start {start[i]}",
        ),
        (
            summaries & ((et < start) | (et >= end)),
            lambda i: f"event_time {et[i]} is outside its window [{start[i]}, {end[i]})",
        ),
        (
            sends & ((first < start) | (first > et) | (messages == 1) & (first != et)),
            lambda i: (
                f"first_time {first[i]} is not between window_start {start[i]} and the last "
                f"send's event_time {et[i]} (or differs from it with one message)"
            ),
        ),
        (
            sends & _np(pc.not_equal(outcome, "SEND_OK"), False),
            lambda i: (
                f"outcome {outcome[i].as_py()}: a send summary counts SEND_OK sends only, the "
                "others are reported in full"
            ),
        ),
        (
            sends & full,
            "a retry, a delayed, redelivered or transactional send is reported in full, never "
            "summarized",
        ),
        (
            sends & known & (length != bands),
            lambda i: (
                f"histogram has {length[i]} buckets; the latency bands of {profiles[i]} make "
                f"{bands[i]}"
            ),
        ),
        (
            sends & (counted != messages),
            lambda i: f"histogram counts {counted[i]} sends, messages says {messages[i]}",
        ),
        (
            sends
            & (
                negative
                | (most < np.maximum(last_ms, first_ms))
                | (total < most)
                | (messages > 1) & (total < last_ms + first_ms)
                | (total > most * messages)
            ),
            lambda i: (
                f"latencies do not add up: latency_total {total[i]}, latency_max {most[i]}, "
                f"first {first_ms[i]} and last {last_ms[i]} ms over {messages[i]} sends"
            ),
        ),
        (
            sends & known & (most >= isolating),
            lambda i: (
                f"latency_max {most[i]} ms is in an isolating band of {profiles[i]} (from "
                f"{isolating[i]} ms): such a send is reported in full"
            ),
        ),
        (
            sends & (q1 < q0),
            lambda i: f"queue_index_end {q1[i]} is before queue_index_start {q0[i]}",
        ),
        (
            summaries & (_np(columns["dropped"], 0) < 0),
            lambda i: f"dropped {columns['dropped'][i]} is negative",
        ),
    ]


def _counts(value: Any) -> list[int] | None:
    """A list of whole numbers (read as their texts), or None."""
    if not isinstance(value, list) or not all(
        isinstance(v, str) and _INTEGER.fullmatch(v.strip()) for v in value
    ):
        return None
    counts = [_int(v.strip()) for v in value]
    if any(c is None or not -(2**63) <= c < 2**63 for c in counts):
        return None
    return counts  # type: ignore[return-value]


def _combine(n: int, parts: list[tuple[np.ndarray, pa.Table]]) -> pa.Table:
    """The parts as one table in record order; records no part has (malformed) are all null."""
    read = _READ.append(_WRONG)
    tables = [t for _, t in parts]
    order = [idx for idx, _ in parts]
    read_at = np.zeros(n, dtype=bool)
    for idx in order:
        read_at[idx] = True
    missing = np.flatnonzero(~read_at)
    if len(missing):
        tables.append(read.empty_table().take(pa.nulls(len(missing), pa.int64())))
        order.append(missing)
    combined = pa.concat_tables(tables).combine_chunks() if tables else read.empty_table()
    if len(tables) == 1 and not len(missing):
        return combined  # one read of every record, in order
    return combined.take(np.argsort(np.concatenate(order).astype(np.int64), kind="stable"))


def _np(array: Any, fill: Any) -> np.ndarray:
    out: np.ndarray = pc.fill_null(array, fill).to_numpy(zero_copy_only=False)
    return out


class _Kinds:
    """Each record's kind, by code (:func:`udfs._frames.codes`)."""

    def __init__(self, kinds: pa.ChunkedArray) -> None:
        self.codes, self.names = codes(kinds)

    def of(self, *kinds: str) -> np.ndarray:
        """Which records are of one of these kinds."""
        return np.isin(self.codes, [self.names.index(k) for k in kinds if k in self.names])

    def name(self, i: int) -> str:
        return str(self.names[self.codes[i]])


def _validate(
    n: int,
    parts: list[tuple[np.ndarray, pa.Table]],
    malformed: np.ndarray,
    records: pa.StringArray,
    origins: pa.StringArray,
    ingest_ms: Iterable[Any],
    lost: Iterable[Any] | None,
) -> pa.Table:
    t = _combine(n, parts)
    named = np.flatnonzero(_np(pc.list_value_length(t.column("_wrong")), 0))
    wrong: dict[int, list[str]] = dict(
        zip(named.tolist(), t.column("_wrong").take(named).to_pylist(), strict=True)
    )
    columns: dict[str, Any] = {}
    for name in INT_FIELDS:  # the bulk reader reads int64; Spark's int fields hold 32 bits
        column = t.column(name)
        low, high = _INT_RANGE[name]
        outside = _np(pc.or_(pc.less(column, low), pc.greater(column, high)), False)
        if outside.any():
            for i in np.flatnonzero(outside).tolist():
                wrong[i] = sorted([*wrong.get(i, []), name], key=TYPED_FIELDS.index)
            column = pc.if_else(pa.array(outside), pa.nulls(n, pa.int64()), column)
        columns[name] = column
    present = {name: _np(t.column(name).is_valid(), False) for name in _READ.names}
    routes = np.flatnonzero(present["brokers"])
    route_lists = t.column("brokers").take(routes).to_pylist() if len(routes) else []
    for i, b in zip(routes.tolist(), route_lists, strict=True):
        if None in b:  # [null]: not a broker, as the lenient path finds too
            wrong[i] = sorted([*wrong.get(i, []), "brokers"], key=TYPED_FIELDS.index)
    kinds = pc.fill_null(t.column("kind"), EventKind.SEND_RESULT)
    kind = _Kinds(kinds)
    sent = kind.of(EventKind.SEND_RESULT)
    code = np.full(n, None, dtype=object)
    reason = np.full(n, None, dtype=object)
    unjudged = np.ones(n, dtype=bool)

    def check(mask: np.ndarray, name: ReasonCode, text: Any) -> None:
        """Give the records in ``mask`` that have no reason yet this one (checks run in order)."""
        hit = mask & unjudged
        if hit.any():
            unjudged[hit] = False
            code[hit] = name
            for i in np.flatnonzero(hit):
                reason[i] = text(int(i)) if callable(text) else text

    if lost is not None:
        lost_arr = pa.array(lost, pa.int64(), from_pandas=True)
        check(
            _np(lost_arr.is_valid(), False),
            ReasonCode.DATA_LOSS,
            lambda i: (
                f"{lost_arr[i].as_py()} records at {origins[i].as_py()} were deleted "
                "(retention) before they were read; failOnDataLoss=false"
            ),
        )
    check(malformed, ReasonCode.MALFORMED_JSON, "the record is not a JSON object")
    typed_wrong = np.zeros(n, dtype=bool)
    typed_wrong[[i for i, w in wrong.items() if w]] = True
    check(typed_wrong, ReasonCode.WRONG_TYPE, lambda i: "wrong type for " + ", ".join(wrong[i]))
    check(
        ~kind.of(*REQUIRED),
        ReasonCode.UNKNOWN_KIND,
        lambda i: f"kind {kind.name(i)} is not one of {', '.join(REQUIRED)}",
    )
    given = {  # a required text that is empty is missing: an event_id "" names no event
        f: present[f] & _np(pc.not_equal(t.column(f), ""), True) if f in _STRING else present[f]
        for f in {"event_id", "event_time", *(f for fs in REQUIRED.values() for f in fs)}
    }
    need = {f: ~given[f] for f in ("event_id", "event_time")}
    for k, fields in REQUIRED.items():
        of_kind = kind.of(k)
        for f in fields:
            need[f] = need.get(f, np.zeros(n, dtype=bool)) | of_kind & ~given[f]
    check(
        np.logical_or.reduce(list(need.values())),
        ReasonCode.MISSING_FIELD,
        lambda i: "missing " + ", ".join(f for f, m in need.items() if m[i]),
    )
    et = _np(t.column("event_time"), MIN_EVENT_TIME)
    check(
        (et < MIN_EVENT_TIME) | (et >= MAX_EVENT_TIME),
        ReasonCode.EVENT_TIME_OUT_OF_RANGE,
        lambda i: f"event_time {et[i]} is not between 2000-01-01 and 2100-01-01",
    )
    latency = _np(columns["latency_ms"], 0)
    check(
        latency < 0, ReasonCode.NEGATIVE_LATENCY, lambda i: f"latency_ms {latency[i]} is negative"
    )
    for field, code_name, allowed, applies, text in (
        (
            "outcome",
            ReasonCode.UNKNOWN_OUTCOME,
            [o.value for o in Outcome],
            sent,
            "is not a RocketMQ send outcome",
        ),
        (
            "client_profile",
            ReasonCode.UNKNOWN_PROFILE,
            list(PROFILES),
            True,
            f"is not one of {', '.join(PROFILES)}",
        ),
        (
            "mode",
            ReasonCode.UNKNOWN_MODE,
            [m.value for m in SendMode],
            True,
            "is not SYNC, ASYNC or ONEWAY",
        ),
        (
            "status",
            ReasonCode.UNKNOWN_STATUS,
            ["CONSUME_SUCCESS", "RECONSUME_LATER"],
            kind.of(EventKind.CONSUME_RESULT),
            "is not CONSUME_SUCCESS or RECONSUME_LATER",
        ),
        (
            "transaction",
            ReasonCode.UNKNOWN_TRANSACTION,
            ["PREPARED"],
            sent,
            "is not PREPARED (a transactional half message)",
        ),
        (
            "local_state",
            ReasonCode.UNKNOWN_LOCAL_STATE,
            [s.value for s in LocalTransactionState],
            kind.of(EventKind.TRANSACTION_END, EventKind.TRANSACTION_CHECK),
            f"is not one of {', '.join(s.value for s in LocalTransactionState)}",
        ),
    ):
        column = t.column(field)
        known = _np(pc.is_in(column, value_set=pa.array(allowed)), True)
        check(
            present[field] & applies & ~known,
            code_name,
            lambda i, f=field, c=column, x=text: f"{f} {c[i].as_py()} {x}",
        )
    attempt, max_attempts = _np(columns["attempt"], 0), _np(columns["max_attempts"], 1)
    check(
        (attempt < 0)
        | (max_attempts < 1)
        | _np(columns["attempt"].is_valid(), False)
        & _np(columns["max_attempts"].is_valid(), False)
        & (attempt >= max_attempts)
        | (_np(columns["queue_id"], 0) < 0)
        | (_np(columns["reconsume_times"], 0) < 0)
        | (_np(columns["redelivery_count"], 0) < 0)
        | (_np(columns["check_times"], 0) < 0),
        ReasonCode.INVALID_VALUE,
        "attempt, max_attempts, queue_id, reconsume_times, redelivery_count or check_times out "
        "of range",
    )
    prepared = sent & _np(pc.equal(t.column("transaction"), "PREPARED"), False)
    mode = pc.fill_null(t.column("mode"), "SYNC")
    check(
        prepared & _np(pc.not_equal(mode, "SYNC"), False),
        ReasonCode.INVALID_TRANSACTION,
        lambda i: (
            "a transactional half message is sent SYNC (sendMessageInTransaction), not "
            f"{mode[i].as_py()}"
        ),
    )
    check(
        prepared & ~present["transaction_id"] & ~present["message_id"],
        ReasonCode.INVALID_TRANSACTION,
        "a transactional half message needs a transaction_id or a message_id",
    )
    check(
        present["check_immunity"] & present["check_immunity_s"],
        ReasonCode.INVALID_TRANSACTION,
        "check_immunity (the property's text) and check_immunity_s (its seconds) are both set: "
        "send one",
    )
    brokers_json = np.full(n, None, dtype=object)
    invalid_route = np.zeros(n, dtype=bool)
    for i, b in zip(routes.tolist(), route_lists, strict=True):
        if None in b:
            continue
        brokers_json[i] = json.dumps(
            [{k: v for k, v in x.items() if v is not None} for x in b], separators=(",", ":")
        )
        invalid_route[i] = kind.name(i) == EventKind.ROUTE and any(
            x["broker_name"] is None or (x["write_queue_nums"] or 0) <= 0 for x in b
        )
    check(
        invalid_route,
        ReasonCode.INVALID_ROUTE,
        "a route broker needs broker_name and write_queue_nums > 0",
    )
    for mask, text in _summary_faults(t, columns, kind, et, n):
        check(mask, ReasonCode.INVALID_SUMMARY, text)
    columns.update(
        {name: t.column(name) for name in (*STRING_FIELDS, "event_time", "latency_fault_enable")}
    )
    columns.update(
        kind=kinds,
        cluster=pc.fill_null(t.column("cluster"), "default"),
        brokers_json=brokers_json,
        raw=records,
        origin=origins,
        ingest_ms=ingest_ms,
        reason_code=code,
        reason=reason,
    )
    return pa.table(
        {
            name: pa.array(columns[name], type=field.type, from_pandas=True)
            if not isinstance(columns[name], pa.ChunkedArray | pa.Array)
            else columns[name].cast(field.type)
            for name, field in zip(EVENTS.names, EVENTS, strict=True)
        }
    )
