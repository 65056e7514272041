"""``ThreadLocalIndex`` per profile (ROCKETMQ.md §3): the round-robin counter behind
``sendWhichQueue`` and ``whichItemWorst``. The state is the stored ``Integer``; ``None`` means
the thread has not used it yet."""

from __future__ import annotations

import random

from udfs.rocketmq._java import INT_MIN, abs32, i32, next_int
from udfs.rocketmq._profiles import Line


def _first_state(line: Line, rng: random.Random | None) -> int:
    if rng is None:
        raise ValueError(
            "the round-robin index has no start yet and no random generator was given: "
            "pass an explicit index or a seeded random.Random as rng"
        )
    drawn = next_int(rng)
    if line == "5":
        return drawn
    state = abs32(drawn)
    if line == "4.7" and state < 0:
        return 0
    return state


def advance(line: Line, state: int | None, rng: random.Random | None) -> tuple[int, int]:
    """One ``getAndIncrement()`` (4.7.1) or ``incrementAndGet()`` (4.9.7, 5.x).

    Returns ``(new_state, value)``; the value is never negative.

    >>> advance("4.7", 2147483647, None)
    (0, 0)
    >>> advance("4.9", 2147483647, None)
    (-2147483648, 0)
    >>> advance("5", -5, None)
    (-4, 2147483644)
    """
    if state is None:
        state = _first_state(line, rng)
    if line == "4.7":
        state = max(abs32(i32(state + 1)), 0)
        return state, state
    state = i32(state + 1)
    return state, state & 0x7FFFFFFF


def reset(rng: random.Random | None) -> int:
    """5.x ``ThreadLocalIndex.reset()``: a random state in [0, 2^31 - 2]."""
    if rng is None:
        raise ValueError("resetting the index needs a seeded random.Random as rng")
    return rng.randrange(-INT_MIN - 1)
