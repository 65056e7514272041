from __future__ import annotations

import random

import pytest

from udfs.rocketmq import PROFILES, Profile

P47 = PROFILES["rocketmq-4.7"]
P49 = PROFILES["rocketmq-4.9"]
P5 = PROFILES["rocketmq-5"]
ALL = [P47, P49, P5]


class FixedRandom(random.Random):
    """A ``random.Random`` whose 32-bit draws are given in advance (Java's ``nextInt``)."""

    def __init__(self, *draws: int) -> None:
        super().__init__(0)
        self._draws = [d & 0xFFFFFFFF for d in draws]

    def getrandbits(self, k: int) -> int:
        if k == 32 and self._draws:
            return self._draws.pop(0)
        return super().getrandbits(k)


@pytest.fixture(params=ALL, ids=lambda p: p.name)
def profile(request: pytest.FixtureRequest) -> Profile:
    return request.param
