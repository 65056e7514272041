"""Rows of a pandas frame for the few Python loops of the engine."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd


def tuples(frame: pd.DataFrame, columns: Sequence[str] | None = None) -> Iterable[Any]:
    """``frame.itertuples(index=False)`` over ``columns`` (default: all). pandas' itertuples costs
    a fixed time per column, even for an empty frame, and most frames of a small micro-batch are
    empty (no failed send, no retry): an empty frame gives nothing at once, and a loop names
    the columns it reads."""
    if not len(frame):
        return ()
    return (frame if columns is None else frame[list(columns)]).itertuples(index=False)
