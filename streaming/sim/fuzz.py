"""Fuzzed records, for the tests and for ``streaming.bench.throughput --fuzzed``: random
mutations of valid events, mixed into a valid stream.

A :class:`Palette` (odd values, odd texts, a seed; the tests have hypothesis draw it, the
benchmark uses :data:`CORE`) is expanded by :func:`mixed_stream` with a seeded
:class:`random.Random` into as many records as needed (100,000 in a second or two), each made by
one of :data:`MUTATIONS`.

Which fuzzed record can be applied? A mutant of a valid event ``E`` keeps ``E``'s identity (its
``cluster``, ``event_id`` and ``event_time``) unless the mutation makes that field unreadable
(missing, null, empty, nested, of a type that cannot be read as it, out of range), and it is
placed in a later micro-batch than ``E`` (and than the event whose id it repeats). So when it
reaches the job it is quarantined, late (``E`` is older than the clock minus the allowed
lateness) or a duplicate (``E``'s id is still remembered): never applied. The valid events
alone decide every table; the fuzzed ones only add to ``quarantine``, ``late_events`` and the
counts.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MUTATIONS = (
    "wrong_type",
    "missing",
    "extra",
    "huge_string",
    "huge_number",
    "unicode",
    "nesting",
    "nan_infinity",
    "duplicate_key",
    "truncated",
    "garbage",
    "empty_string",
    "null",
    "empty_line",
    "repeated_id",
    "other_kind",
    "several",
)
"""Every kind of mutation; each record is made by one of them, drawn uniformly."""

IDENTITY = ("cluster", "event_id", "event_time")
FIELDS = (
    "kind", "event_id", "event_time", "cluster", "producer_id", "producer_group",
    "client_profile", "topic", "broker_name", "queue_id", "latency_ms", "outcome",
    "response_code", "attempt", "max_attempts", "mode", "message_id", "body_size",
    "delay_level", "redelivery_count", "latency_fault_enable", "consumer_group",
    "origin_message_id", "reconsume_times", "status", "max_reconsume_times", "brokers",
)  # fmt: skip
"""Every field the parser reads, and so every field a mutation may hit."""
KINDS = ("send_result", "consume_result", "route", "heartbeat")


@dataclass(frozen=True)
class Palette:
    """What a stream's mutants are made of: odd JSON values, odd texts (any Unicode, lone surrogates
    included) and the seed of the expansion."""

    values: list[Any]
    texts: list[str]
    seed: int


CORE_VALUES = [None, True, 0, -1, 2**63, 1.5, math.nan, "", "x", [], [1], {}, {"a": [None]}]
CORE_TEXTS = ["é", "\u2028", "\x00", "\ud800", "\U0001f642", "\u202e", "\ufeff", "\uffff"]
"""Always in a palette, so that even hypothesis's simplest draw has every kind of odd value."""


CORE = Palette(CORE_VALUES, CORE_TEXTS, 20261125)
"""The palette of the benchmark: the odd values and texts that are always in one."""


def _unreadable(value: Any, field: str) -> bool:
    """Whether ``value`` in ``field`` is certain to be rejected (so the mutant cannot take a
    new identity): nested values, and for the two required ones, also null and empty text."""
    if isinstance(value, list | dict):
        return True
    if field == "cluster":
        return False  # null or any text is a cluster (null: the default one)
    if value is None or value == "":
        return True
    if field == "event_time":  # text or a number outside 2000..2100 (or not whole)
        return not isinstance(value, int) or not 946_684_800_000 <= value < 4_102_444_800_000
    return False


class _Mutator:
    def __init__(self, palette: Palette, rng: random.Random) -> None:
        self.rng = rng
        self.values = palette.values
        self.texts = palette.texts
        self.raw: dict[str, str] = {}

    def text_of(self, event: dict[str, Any]) -> str:
        """``event`` as JSON; values wrapped by :meth:`verbatim` go in as given."""
        text = json.dumps(event, allow_nan=True, ensure_ascii=self.rng.random() < 0.5)
        for token, raw in self.raw.items():
            text = text.replace(json.dumps(token), raw)
        self.raw.clear()
        return text

    def verbatim(self, raw: str) -> str:
        token = f"\x00raw{len(self.raw)}\x00"
        self.raw[token] = raw
        return token

    def field(self, event: dict[str, Any], identity: bool = True) -> str:
        names = [f for f in event if identity or f not in IDENTITY]
        return self.rng.choice(names) if names else "topic"

    def put(self, event: dict[str, Any], name: str, value: Any) -> None:
        """Set a field, unless that would give the mutant a new identity."""
        if name in IDENTITY and not _unreadable(value, name):
            name = f"x_{name}"
        event[name] = value

    def value(self) -> Any:
        return self.rng.choice(self.values)

    def huge_number(self) -> str:
        return self.rng.choice(
            [
                str(2**63),
                str(-(2**63) - 1),
                str(2**31),
                "1e308",
                "-1e999",
                "9" * self.rng.choice([30, 400, 5_000]),
                "0." + "0" * 500 + "1",
            ]
        )

    def nested(self) -> str:
        depth = self.rng.choice([2, 30, 200, 1_100, 1_100, 3_000]) if self.rng.random() < 0.3 else 3
        if self.rng.random() < 0.5:
            return "[" * depth + "1" + "]" * depth
        return '{"a":' * depth + "1" + "}" * depth


_FIELD_LEVEL = ("wrong_type", "missing", "extra", "unicode", "null", "empty_string")


def _change(e: dict[str, Any], how: str, m: _Mutator) -> None:
    """A mutation of one field of ``e``, in place."""
    rng = m.rng
    if how == "wrong_type":
        name = m.field(e)
        choices = [v for v in m.values if type(v) is not type(e.get(name))] or [[1]]
        m.put(e, name, rng.choice(choices))
    elif how == "missing":
        name = m.field(e)
        if name != "cluster":
            del e[name]
    elif how == "extra":
        e[rng.choice(["x", "extra", "properties", "\U0001f642", ""])] = m.value()
    elif how == "huge_string":
        size = 100_000 if rng.random() < 0.003 else rng.choice([300, 1_000, 3_000])
        m.put(e, m.field(e, identity=False) if rng.random() < 0.7 else "x", "x" * size)
    elif how == "huge_number":
        m.put(e, m.field(e), m.verbatim(m.huge_number()))
    elif how == "unicode":
        m.put(e, m.field(e, identity=False), rng.choice(m.texts))
    elif how == "nesting":
        m.put(e, m.field(e) if rng.random() < 0.5 else "x", m.verbatim(m.nested()))
    elif how == "nan_infinity":
        m.put(e, m.field(e), rng.choice([math.nan, math.inf, -math.inf]))
    elif how == "empty_string":
        m.put(e, m.field(e), "")
    elif how == "null":
        m.put(e, m.field(e), None)
    elif how == "other_kind":
        e["kind"] = rng.choice([*(k for k in KINDS if k != e.get("kind")), "", "SEND_RESULT"])
    else:  # several
        for _ in range(3):
            _change(e, rng.choice(_FIELD_LEVEL), m)


def mutate(
    event: dict[str, Any],
    other: dict[str, Any],
    how: str,
    mutator: _Mutator,
    newlines: bool = False,
) -> bytes:
    """One fuzzed record made from ``event`` by the mutation ``how`` (``other``: the valid event
    whose id ``repeated_id`` takes). Without ``newlines``, the record holds no ``\\n`` byte
    (JSON text never does: a newline in a value is written as its escape)."""
    m, rng = mutator, mutator.rng
    e = dict(event)
    if how == "duplicate_key":  # {"a": 1, "a": 2}
        name = rng.choice([*e, "x"])
        again = json.dumps(m.value() if rng.random() < 0.5 else e.get(name), allow_nan=True)
        return (m.text_of(e)[:-1] + f", {json.dumps(name)}: {again}}}").encode()
    if how == "truncated":
        text = m.text_of(e).encode("utf-8", "surrogatepass")
        return text[: rng.randrange(len(text))]
    if how == "garbage":
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 120)))
        return data if newlines else data.replace(b"\n", b"\r")
    if how == "empty_line":
        return rng.choice([b"", b" ", b"\t", b"{}", b"null", b"[]", b'""'])
    if how == "repeated_id":  # the same id as another event, with this one's content
        e["event_id"] = other["event_id"]
    else:
        _change(e, how, m)
    # a lone surrogate is written as it is in memory: bytes that are not UTF-8
    return m.text_of(e).encode("utf-8", "surrogatepass")


def mixed_stream(
    valid: Sequence[dict[str, Any]],
    fuzzed: int,
    palette: Palette,
    batch: int,
    *,
    newlines: bool = False,
) -> tuple[list[bytes], list[str]]:
    """The valid events in order, with ``fuzzed`` mutants spread among them, as raw records
    (bytes, no trailing newline), and the mutation of each record (``""`` for a valid one).
    A mutant is placed in a later batch of ``batch`` records than its event and than the event
    whose id it repeats; in the first batch, where no event precedes, only mutations that can
    never be read as an event (garbage, truncated JSON, blank lines) are placed."""
    rng = random.Random(palette.seed)
    mutator = _Mutator(palette, rng)
    total = len(valid) + fuzzed
    is_valid = [False] * total
    for k in range(len(valid)):
        is_valid[k * total // len(valid)] = True
    records: list[bytes] = []
    labels: list[str] = []
    done = 0  # valid events in earlier batches
    taken = 0
    for position in range(total):
        if position % batch == 0:
            done = taken
        if is_valid[position]:
            records.append(json.dumps(valid[taken]).encode())
            labels.append("")
            taken += 1
            continue
        if done == 0:
            how = rng.choice(["garbage", "truncated", "empty_line"])
            records.append(mutate(valid[0], valid[0], how, mutator, newlines))
        else:
            how = rng.choice(MUTATIONS)
            low = max(0, done - 400)  # mostly recent events: duplicates more than late ones
            a, b = sorted((rng.randrange(low, done), rng.randrange(low, done)))
            event, other = (valid[a], valid[b]) if how == "repeated_id" else (valid[b], valid[b])
            if other["event_time"] < event["event_time"]:
                event, other = other, event
            records.append(mutate(event, other, how, mutator, newlines))
        labels.append(how)
    return records, labels
