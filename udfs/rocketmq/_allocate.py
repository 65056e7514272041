"""Consumer queue allocation strategies (``consumer/rebalance/AllocateMessageQueueAveragely``
and ``AllocateMessageQueueAveragelyByCircle``, every profile). ``RebalanceImpl`` sorts ``mq_all``
(by topic, broker, queue id) and ``cid_all`` before calling them; these functions do not.

Both refuse an empty consumer id, queue list or consumer list (``IllegalArgumentException``) and
give nothing to a consumer that is not in the list. *Averagely*: with ``n`` queues, ``m``
consumers and ``mod = n % m``, consumer ``idx`` takes ``n // m + 1`` consecutive queues if
``idx < mod``, else ``n // m`` (one each when ``n <= m``), starting after those of the consumers
before it: 10 queues over 4 consumers gives 3, 3, 2, 2. *By circle*: consumer ``idx`` takes
queues ``idx, idx + m, idx + 2m, ...``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from udfs.rocketmq._errors import AllocationError

Q = TypeVar("Q")


def _index_of(current_cid: str, mq_all: Sequence[Q], cid_all: Sequence[str]) -> int | None:
    if not current_cid:
        raise AllocationError("currentCID is empty")
    if not mq_all:
        raise AllocationError("mqAll is null or mqAll empty")
    if not cid_all:
        raise AllocationError("cidAll is null or cidAll empty")
    if current_cid not in cid_all:
        return None  # RocketMQ logs and allocates nothing
    return list(cid_all).index(current_cid)


def allocate_averagely(current_cid: str, mq_all: Sequence[Q], cid_all: Sequence[str]) -> list[Q]:
    """``AllocateMessageQueueAveragely``: consecutive blocks, the first ``n % m`` one larger.

    >>> [allocate_averagely(c, list(range(10)), "abcd") for c in "abcd"]
    [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    """
    index = _index_of(current_cid, mq_all, cid_all)
    if index is None:
        return []
    n, m = len(mq_all), len(cid_all)
    mod = n % m
    larger = mod > 0 and index < mod
    size = 1 if n <= m else n // m + (1 if larger else 0)
    start = index * size if larger else index * size + mod
    return [mq_all[start + i] for i in range(min(size, n - start))]


def allocate_by_circle(current_cid: str, mq_all: Sequence[Q], cid_all: Sequence[str]) -> list[Q]:
    """``AllocateMessageQueueAveragelyByCircle``: every m-th queue from the consumer's index.

    >>> [allocate_by_circle(c, list(range(10)), "abcd") for c in "abcd"]
    [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    """
    index = _index_of(current_cid, mq_all, cid_all)
    if index is None:
        return []
    return [mq_all[i] for i in range(index, len(mq_all), len(cid_all))]
