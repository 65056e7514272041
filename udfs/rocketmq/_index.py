"""``ThreadLocalIndex`` per profile: the round-robin counter behind
``TopicPublishInfo.sendWhichQueue`` and ``LatencyFaultToleranceImpl.whichItemWorst``. The state
is the ``Integer`` the calling thread stored; ``None`` means the thread has not used it yet.

Source: ``common/ThreadLocalIndex.java`` (@4.7.1:26, @4.9.7:27-35, @HEAD:27-39).

* 4.7.1 ``getAndIncrement()`` (it returns the new value despite its name): the first use stores
  the absolute value of a random int (``MIN_VALUE`` becomes 0); each step stores ``abs(state +
  1)``, a negative result becoming 0, and returns it, so the sequence runs ..., 2147483647, 0, 1.
* 4.9.7 ``incrementAndGet()`` (renamed in 4.9.0, ISSUE #2652; mask since 4.9.4, ISSUE #4349):
  the first use stores ``abs`` of a random int; each step stores ``state + 1`` (wrapping) and
  returns ``state & 0x7FFFFFFF``: ..., 2147483647, 0, 1, with a negative state stored.
* 5.x: as 4.9.7, but the first state is any random int, and ``reset()`` stores a random value in
  [0, 2^31 - 2].

The value returned is never negative. The *local* ``index++`` that 4.x ``MQFaultStrategy`` and
4.7.1 ``TopicPublishInfo`` run on top of it can still overflow: ``abs(MIN_VALUE)`` is negative,
its remainder is clamped to position 0, so from index ``MAX_VALUE`` over 3 queues the positions
probed are 1, 0, 1 and queue 2 is skipped.
"""

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
