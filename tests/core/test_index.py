"""``udfs.rocketmq._index``: the ThreadLocalIndex per profile."""

from __future__ import annotations

import random

import pytest

from tests.core.conftest import FixedRandom
from udfs.rocketmq._index import advance, reset

MAX = 2**31 - 1
MIN = -(2**31)


def _sequence(line, state, count):  # type: ignore[no-untyped-def]
    values = []
    for _ in range(count):
        state, value = advance(line, state, None)
        values.append(value)
    return state, values


def test_4_7_returns_max_then_zero_at_the_wrap() -> None:
    state, values = _sequence("4.7", MAX - 2, 4)
    assert values == [MAX - 1, MAX, 0, 1]
    assert state == 1


@pytest.mark.parametrize("line", ["4.9", "5"])
def test_4_9_and_5_mask_at_the_wrap_and_the_state_goes_negative(line: str) -> None:
    state, values = _sequence(line, MAX - 2, 4)
    assert values == [MAX - 1, MAX, 0, 1]
    assert state == MIN + 1


def test_5_negative_state_returns_masked_values() -> None:
    assert _sequence("5", -5, 2)[1] == [2147483644, 2147483645]


@pytest.mark.parametrize(
    ("line", "draw", "state_after_first", "first_value"),
    [
        ("4.7", MIN, 1, 1),  # abs(MIN) is negative -> 0, then 1
        ("4.9", MIN, MIN + 1, 1),  # abs(MIN) stays MIN
        ("5", MIN, MIN + 1, 1),
        ("4.7", -5, 6, 6),  # abs
        ("4.9", -5, 6, 6),
        ("5", -5, -4, 2147483644),  # any sign
    ],
)
def test_first_use_draws_from_the_generator(line, draw, state_after_first, first_value) -> None:  # type: ignore[no-untyped-def]
    assert advance(line, None, FixedRandom(draw)) == (state_after_first, first_value)


def test_first_use_without_a_generator_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"seeded random\.Random"):
        advance("4.9", None, None)


@pytest.mark.parametrize("line", ["4.7", "4.9", "5"])
def test_values_are_never_negative(line: str) -> None:
    rng = random.Random(5)
    for start in [MIN, MIN + 1, -1, 0, MAX - 1, MAX, *(rng.randint(MIN, MAX) for _ in range(50))]:
        assert all(v >= 0 for v in _sequence(line, start, 3)[1])


def test_reset_draws_in_range() -> None:
    rng = random.Random(9)
    assert all(0 <= reset(rng) <= MAX - 1 for _ in range(1000))
    with pytest.raises(ValueError):
        reset(None)
