"""``udfs.rocketmq._allocate``: AllocateMessageQueueAveragely and ...ByCircle."""

from __future__ import annotations

import pytest

from udfs.rocketmq import AllocationError, MessageQueue, allocate_averagely, allocate_by_circle


def _all(fn, n: int, m: int) -> list[list[int]]:  # type: ignore[no-untyped-def]
    cids = [f"c{i}" for i in range(m)]
    return [fn(c, list(range(n)), cids) for c in cids]


def test_averagely_examples() -> None:
    assert _all(allocate_averagely, 10, 4) == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert _all(allocate_averagely, 8, 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert _all(allocate_averagely, 2, 4) == [[0], [1], [], []]
    assert _all(allocate_averagely, 4, 4) == [[0], [1], [2], [3]]


def test_by_circle_examples() -> None:
    assert _all(allocate_by_circle, 10, 4) == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    assert _all(allocate_by_circle, 2, 4) == [[0], [1], [], []]


@pytest.mark.parametrize("fn", [allocate_averagely, allocate_by_circle])
def test_errors_and_unknown_consumer(fn) -> None:  # type: ignore[no-untyped-def]
    mqs = [MessageQueue("a", 0)]
    with pytest.raises(AllocationError, match="currentCID is empty"):
        fn("", mqs, ["c"])
    with pytest.raises(AllocationError, match="mqAll is null or mqAll empty"):
        fn("c", [], ["c"])
    with pytest.raises(AllocationError, match="cidAll is null or cidAll empty"):
        fn("c", mqs, [])
    assert fn("stranger", mqs, ["c"]) == []
