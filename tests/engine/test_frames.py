"""The engine's frame helpers give what the pandas calls they replace give."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs._frames import distinct, equal, isin, memo, objects, tuples

_TEXT = st.one_of(st.none(), st.sampled_from(["a", "b", "a|0", ""]))


def _frame(
    rows: list[tuple[str | None, str | None, int, float | None, bool | None]],
) -> pd.DataFrame:
    """Columns of the kinds the engine's events have: texts held by Arrow (with missing ones),
    integers, floats with NaN, and an object column of booleans with None."""
    texts, others, ints, floats, flags = zip(*rows, strict=True) if rows else ([],) * 5
    return pd.DataFrame(
        {
            "text": pd.Series(list(texts), dtype="str"),
            "other": pd.Series(list(others), dtype="str"),
            "int": np.array(ints, dtype=np.int64),
            "float": np.array([np.nan if f is None else f for f in floats], dtype=np.float64),
            "flag": pd.Series(list(flags), dtype=object),
        }
    )


_ROWS = st.lists(
    st.tuples(_TEXT, _TEXT, st.integers(-3, 3), st.one_of(st.none(), st.floats(-2, 2)),
              st.one_of(st.none(), st.booleans())),
    max_size=40,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(_ROWS, st.sampled_from(["first", "last"]))
def test_distinct_keeps_the_rows_drop_duplicates_keeps(rows, keep) -> None:
    frame = _frame(rows)
    for columns in (["text"], ["text", "other"], ["other", "int"]):
        expected = np.flatnonzero(~frame.duplicated(columns, keep=keep).to_numpy())
        got = distinct(*(frame[c] for c in columns), keep=keep)
        assert got.tolist() == expected.tolist()


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and (a == b or bool(pd.isna(a) and pd.isna(b)))


@settings(max_examples=200, deadline=None)
@given(_ROWS, st.data())
def test_tuples_at_rows_read_what_tuples_of_the_filtered_frame_read(rows, data) -> None:
    frame = _frame(rows)
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows))))
    expected = list(tuples(frame[mask] if len(rows) else frame))
    with memo():  # the texts of a column another stage made are read from them
        objects(frame["other"])
        remembered = list(tuples(frame, None, np.flatnonzero(mask)))
    for got in (list(tuples(frame, None, np.flatnonzero(mask))), remembered):
        assert len(got) == len(expected)
        for row, want in zip(got, expected, strict=True):
            assert row._fields == want._fields
            assert all(_same(a, b) for a, b in zip(row, want, strict=True)), (row, want)


@settings(max_examples=200, deadline=None)
@given(_ROWS, st.lists(_TEXT.filter(lambda t: t is not None), max_size=3))
def test_isin_and_objects_give_what_the_python_texts_give(
    rows: list[tuple[str | None, str | None, int, float | None, bool | None]], values: list[str]
) -> None:
    """``isin`` and ``equal`` compare Arrow's texts by Arrow, a missing text matching nothing;
    ``objects`` gives ``to_numpy(object)``, made once per column within ``memo``."""
    frame = _frame(rows)
    texts = frame["text"].to_numpy(object)
    assert isin(frame["text"], values).tolist() == np.isin(texts, values).tolist()
    for value in values:
        assert equal(frame["text"], value).tolist() == (texts == value).tolist()
    assert isin(frame["flag"], ["a"]).tolist() == [False] * len(rows)  # not a text column
    fresh = objects(frame["text"])
    assert fresh.flags.writeable and objects(frame["text"]) is not fresh
    with memo():
        made = objects(frame["text"])
        assert made is objects(frame["text"]) and not made.flags.writeable
        assert objects(frame["other"]) is not made
    assert pd.Series(made, dtype=object).equals(pd.Series(texts, dtype=object))
