"""Rows of a pandas frame for the few Python loops of the engine, and columns as codes."""

from __future__ import annotations

import contextlib
import functools
from collections import namedtuple
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc


def tuples(
    frame: pd.DataFrame, columns: Sequence[str] | None = None, rows: np.ndarray | None = None
) -> Iterable[Any]:
    """The rows of ``frame`` (those at the positions ``rows``, default: all) over ``columns``
    (default: all) as named tuples, with the values ``frame.itertuples(index=False)`` gives.
    They are read a column at a time (``tolist``): pandas' itertuples reads its string columns,
    which Arrow holds, one value at a time, and costs a fixed time per column even for an empty
    frame (most frames of a small micro-batch are). Taking ``rows`` of the columns read, rather
    than filtering the frame first, leaves the other columns alone. A loop names the columns it
    reads."""
    if not len(frame) or (rows is not None and not len(rows)):
        return ()
    names = tuple(frame.columns if columns is None else columns)
    values = (_column(frame[c], rows) for c in names)
    return map(_row(names)._make, zip(*values, strict=True))


def _column(column: pd.Series, rows: np.ndarray | None) -> list[Any]:
    """The values ``column.tolist()`` gives, at ``rows``."""
    values: list[Any]
    if rows is None:
        values = column.tolist()
    elif (made := _made(column)) is not None:  # texts another stage made already
        values = made[rows].tolist()
    elif isinstance(column.dtype, pd.StringDtype):  # Arrow's texts: taken by Arrow itself
        taken = pa.array(column.array).take(rows)
        values = taken.to_pylist()
        if taken.null_count:  # a missing text is NaN in pandas
            values = [np.nan if v is None else v for v in values]
    else:
        values = column.to_numpy()[rows].tolist()
    return values


def isin(column: pd.Series, values: Collection[str]) -> np.ndarray:
    """Which of the column's texts are among ``values`` (a missing text is not), compared by
    Arrow: no Python object is made for each text."""
    if isinstance(column.dtype, pd.StringDtype):
        held = column.array.__arrow_array__()
        found = pc.is_in(held, value_set=pa.array(list(values), held.type))
        return np.asarray(found.to_numpy(zero_copy_only=False), dtype=bool)
    return np.isin(column.to_numpy(object), list(values))


def equal(column: pd.Series, value: str) -> np.ndarray:
    """Which of the column's texts are ``value`` (as :func:`isin`; a comparison costs half a
    lookup in a set)."""
    if not isinstance(column.dtype, pd.StringDtype):
        return isin(column, (value,))
    found = pc.equal(column.array.__arrow_array__(), value)
    if found.null_count:
        found = found.fill_null(False)
    return np.asarray(found.to_numpy(zero_copy_only=False), dtype=bool)


_MEMOS: list[dict[int, tuple[pa.ChunkedArray, np.ndarray]]] = []
"""Each open :func:`memo`'s texts, the innermost last."""


@contextlib.contextmanager
def memo() -> Iterator[None]:
    """Within it, :func:`objects` makes the Python texts of each Arrow column once: a batch's
    stages read the same columns (event ids, producers, brokers) again and again. The texts
    are held until it ends."""
    _MEMOS.append({})
    try:
        yield
    finally:
        _MEMOS.pop()


def objects(column: pd.Series) -> np.ndarray:
    """``column.to_numpy(object)``: within :func:`memo`, made once per Arrow column and
    read-only."""
    if not _MEMOS or not isinstance(column.dtype, pd.StringDtype):
        return column.to_numpy(object)
    made = _made(column)
    if made is None:
        held = column.array.__arrow_array__()
        made = column.to_numpy(object)
        made.flags.writeable = False
        _MEMOS[-1][id(held)] = (held, made)  # held beside it: its id is not reused
    return made


def _made(column: pd.Series) -> np.ndarray | None:
    """The texts :func:`objects` made of an Arrow column within the open :func:`memo`, if any."""
    if not _MEMOS or not isinstance(column.dtype, pd.StringDtype):
        return None
    made = _MEMOS[-1].get(id(column.array.__arrow_array__()))
    return None if made is None else made[1]


def where(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """``frame[mask]``, or the frame itself when the mask keeps every row: a filter copies
    every column, at a few milliseconds each for Arrow's texts in a large batch."""
    return frame if mask.all() else frame[mask]


def codes(values: pd.Series | pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[Any]]:
    """Each value's code and the distinct values, by Arrow's dictionary encoding: comparing and
    grouping codes costs a tenth of doing it on the texts."""
    if not isinstance(values, pa.Array | pa.ChunkedArray):
        values = pa.array(values, from_pandas=True)  # chunked for a column pandas joined
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    encoded = values.dictionary_encode()
    indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return indices, encoded.dictionary.to_pylist()


def distinct(*columns: np.ndarray | pd.Series, keep: str = "first") -> np.ndarray:
    """The positions ``drop_duplicates`` keeps over ``columns`` (one value of each, missing
    values alike), in row order: a frame's ``drop_duplicates`` costs a millisecond even on a
    small batch, and copies every column. Numbered by hashing, in the order of the rows (or of
    the rows from the last, for ``keep="last"``), a value's first row is the one where its
    number first exceeds all before it: no sort."""
    n = len(columns[0])
    key = np.zeros(n, dtype=np.int64)
    for column in columns:
        coded, uniques = pd.factorize(column)  # a column Arrow holds: numbered by Arrow
        key = key * (len(uniques) + 1) + np.where(coded < 0, len(uniques), coded)
    numbers, _ = pd.factorize(key[::-1] if keep == "last" else key)
    highest = np.maximum.accumulate(numbers)
    first = np.flatnonzero(numbers > np.concatenate([[-1], highest[:-1]]))
    return (n - 1 - first)[::-1] if keep == "last" else first


@functools.lru_cache(maxsize=64)
def _row(names: tuple[str, ...]) -> Any:
    return namedtuple("Row", names)
