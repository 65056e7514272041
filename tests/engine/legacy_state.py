"""The state's text as faultline wrote it in versions 5 and 6 (``udfs.engine._state`` at commit
dd5dc94): a FaultItem's ``updated_at`` as it was and its ``start`` as the distance from it, 32-bit
broker codes, a table's fields and the publish infos as rows, the seen ids without their
horizon. Kept to check that such checkpoints still resume; the test of the fixture
``quick-900-v6.txt`` checks that this writes that version's text to the byte."""

from __future__ import annotations

import base64
from typing import Any

import msgpack
import numpy as np

from udfs.engine import _state
from udfs.engine._state import Producer, State, Table


def version_6(state: State, version: int = 6) -> str:
    """``state`` as a version 6 text (or, the same but for its first digit, a version 5 one)."""
    parts = _state._encode(state)
    parts[1] = {scope: _tables(tables) for scope, tables in sorted(state.tables.items())}
    parts[2] = _producers(state.producers)
    parts[-1] = parts[-1][:3]
    raw = msgpack.packb(parts, use_bin_type=True)
    packed = _state._ZSTD.compress(raw, asbytes=True)
    return f"{version}:{len(raw)}:{base64.b64encode(packed).decode('ascii')}"


def _tables(tables: dict[str, Table]) -> list[Any]:
    keys = sorted(tables)
    chosen = [tables[k] for k in keys]
    items = [it for t in chosen for it in t.items]
    brokers, latency, start, reachable, updated, pending, cause = (
        zip(*items, strict=True) if items else ((),) * len(_state.Item._fields)
    )
    names = sorted(set(brokers))
    code = {b: i for i, b in enumerate(names)}
    after = np.array(start, np.int64) - np.array(updated, np.int64)
    return [
        keys,
        [[t.profile, t.cap, t.worst, t.topics, t.due, len(t.items)] for t in chosen],
        names,
        np.array([code[b] for b in brokers], np.uint32).tobytes(),
        latency,
        after.tolist(),
        reachable,
        updated,
        pending,
        [c if d > 0 else "" for c, d in zip(cause, after.tolist(), strict=True)],
    ]


def _producers(producers: dict[str, Producer]) -> list[Any]:
    columns = _state._encode_producers(producers)
    counts, keys, routes, rewrites, indexes, seeds = columns[-1]
    owners = [n for n, count in enumerate(counts) for _ in range(count)]
    columns[-1] = [
        list(p) for p in zip(owners, keys, routes, rewrites, indexes, seeds, strict=True)
    ]
    return columns
