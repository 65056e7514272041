"""Durations as a person reads them, the one way every tool prints an age, a lag or a length."""

from __future__ import annotations


def duration(seconds: float) -> str:
    """``seconds`` in the two largest units that matter; below a minute, to the tenth.

    >>> [duration(s) for s in (0.4, 75, 7_300, 200_000, 489_920.2, -3)]
    ['0.4 s', '1 min 15 s', '2 h 1 min', '2 d 7 h', '5 d 16 h', '-3.0 s']
    """
    if seconds < 0:
        return "-" + duration(-seconds)
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
