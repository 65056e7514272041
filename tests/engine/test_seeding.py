"""A decision's random numbers: seeded at the first draw, they are the numbers seeding at once
gives, which the rows of every earlier version were drawn from."""

from __future__ import annotations

import hashlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.engine._state import rng
from udfs.rocketmq._java import next_int

_DRAWS = st.lists(st.sampled_from(["bits", "below", "shuffle", "random", "int"]), max_size=8)


def _at_once(seed: int, *parts: object) -> random.Random:
    text = "\x1f".join(map(str, (seed, *parts))).encode()
    return random.Random(int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big"))


def _draw(r: random.Random, what: str) -> object:
    if what == "bits":
        return r.getrandbits(32)
    if what == "below":
        return r.randrange(2**31 - 1)
    if what == "shuffle":
        items = list(range(7))
        r.shuffle(items)
        return items
    if what == "int":
        return next_int(r)
    return r.random()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**31), st.text(max_size=12), st.integers(-5, 5), _DRAWS)
def test_the_draws_are_those_of_a_generator_seeded_at_once(
    seed: int, key: str, n: int, draws: list[str]
) -> None:
    lazy, eager = rng(seed, "cluster", key, n), _at_once(seed, "cluster", key, n)
    assert [_draw(lazy, d) for d in draws] == [_draw(eager, d) for d in draws]
