"""``FaultItem`` and ``LatencyFaultToleranceImpl``: the producer's fault table.

Sources: ``latency/LatencyFaultToleranceImpl.java`` (@4.7.1:33-90, @4.9.7:33-85,
@HEAD:59-262), with ``FaultItem`` its inner class.

The table maps a broker name to an item: the measured ``currentLatency`` and ``startTimestamp``,
the moment the broker becomes usable again; 5.x adds ``reachableFlag`` and ``checkStamp``. A
broker without an item is available (and, in 5.x, reachable).

* **Update.** 4.x overwrites: every update sets the latency and ``startTimestamp = now +
  duration``, so a later fast success clears a 10-minute isolation at once. 5.x extends only
  (``updateNotAvailableDuration``, @HEAD:207): latency and reachable flag are overwritten, but
  ``startTimestamp`` moves only to a later ``now + duration`` and never for a duration of 0.
* **isAvailable**: ``now >= startTimestamp``, inclusive in every profile. 5.1.4 also required
  the reachable flag; 5.2.0 dropped that (ISSUE #7812). **isReachable** (5.x) is the flag.
* **compareTo** (every profile): available before unavailable, then lower latency, then earlier
  ``startTimestamp``, judged at the time of the sort.
* **remove(name)** deletes the item (4.x selection calls it, see :mod:`udfs.rocketmq._route`).
* **pickOneAtLeast**: 4.7.1 shuffles the items, sorts them (stable) and returns, round-robin by
  ``whichItemWorst``, one of the better half (the only item when there is one); 4.9.7 does the
  same without the shuffle (ISSUE #3985, 4.9.4), so equal items keep ``ConcurrentHashMap``
  order; 5.x shuffles and returns the first reachable item, ignoring latency and availability
  (and its ``MQFaultStrategy`` no longer calls it). An empty table gives none.
* **5.x detector** (``detectByOneRound``, @HEAD:59; off unless ``startDetectorEnable``): an item
  whose ``checkStamp`` has passed is probed (``checkStamp = now + detectInterval``, 2000 ms), or
  removed when its broker has no known address; a successful probe sets the flag back to
  reachable. Only an update sets it to unreachable.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import NamedTuple, cast

from udfs.rocketmq import _index
from udfs.rocketmq._java import string_hash
from udfs.rocketmq._profiles import Profile, not_available_duration

DETECT_INTERVAL_MS = 2000
"""5.x ``detectInterval``: how long the detector waits before probing an item again."""


class FaultItem(NamedTuple):
    """One broker's entry in the fault table (immutable; a tuple, made at a third of a frozen
    dataclass's cost: a batch makes tens of thousands).

    ``start_timestamp`` is the moment the broker becomes usable again; ``updated_at`` is the
    event time of the update this item reflects; ``check_stamp`` is the 5.x detector's next
    probe time.
    """

    name: str
    current_latency: int
    start_timestamp: int
    reachable: bool = True
    updated_at: int = 0
    check_stamp: int = 0

    def is_available(self, now_ms: int) -> bool:
        """``FaultItem.isAvailable``: inclusive at ``start_timestamp`` in every profile (5.2.0+
        ignores the reachable flag)."""
        return now_ms >= self.start_timestamp

    def sort_key(self, now_ms: int) -> tuple[bool, int, int]:
        """``FaultItem.compareTo`` as a key: available first, then lower latency, then earlier
        ``start_timestamp``."""
        return (not self.is_available(now_ms), self.current_latency, self.start_timestamp)


class _Bins(dict[str, int]):
    """Each name's bin in a ``ConcurrentHashMap`` of one capacity, worked out at its first
    lookup (``String.hashCode``, spread as ``ConcurrentHashMap.spread`` does): a dict's own
    lookup, so a sort can take it as its key."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.mask = capacity - 1

    def __missing__(self, name: str) -> int:
        if len(self) >= _BINS_KEPT:
            self.clear()  # names come from the events: the cache stays bounded whatever they are
        h = string_hash(name)
        self[name] = at = ((h ^ ((h & 0xFFFFFFFF) >> 16)) & 0x7FFFFFFF) & self.mask
        return at


_BINS_KEPT = 1 << 14
"""The names whose bins are kept per capacity (a table of 16,384 brokers or more, far larger
than any fleet, would work its bins out again)."""


@functools.lru_cache(maxsize=32)
def _bins(capacity: int) -> _Bins:
    return _Bins(capacity)


class _ConcurrentHashMapOrder:
    """The iteration order of ``new ConcurrentHashMap<String, FaultItem>(16)``.

    Java iterates bins in index order and each bin in list order; a new key goes to the tail of
    its bin; the table (32 bins) doubles when it holds 3/4 of its capacity, and a resize keeps the
    tail run of each bin and reverses the rest. That order decides ties in 4.9.7
    ``pickOneAtLeast`` and feeds the 4.7.1 / 5.x shuffles. Tree bins (8 or more colliding names
    in a table of 64 or more) are not reproduced.
    """

    def __init__(self, capacity: int = 32, names: Iterable[str] = ()) -> None:
        self.capacity = capacity
        self._bins: dict[int, list[str]] = {}
        self._names: list[str] | None = None
        """The iteration order, until the next change."""
        for name in names:
            self._bins.setdefault(self._bin(name, capacity), []).append(name)

    @staticmethod
    def _bin(name: str, capacity: int) -> int:
        return _bins(capacity)[name]

    def add(self, name: str, size_after: int) -> None:
        self._names = None
        self._bins.setdefault(self._bin(name, self.capacity), []).append(name)
        if size_after >= self.capacity - (self.capacity >> 2):
            self._resize()

    @classmethod
    def joined(cls, capacity: int, names: list[str], new: list[str]) -> tuple[list[str], int]:
        """The order, and the capacity, of a map iterated as ``names`` once ``new`` names
        (none of them in it) were put in it one after another."""
        size = len(names) + len(new)
        if size < capacity - (capacity >> 2):  # no resize: each new name at its bin's tail
            # ``names`` are in bin order already, so a stable sort by bin puts each new name
            # after the names of its bin
            return sorted(names + new, key=_bins(capacity).__getitem__), capacity
        order = cls(capacity, names)
        for at, name in enumerate(new, start=len(names) + 1):
            order.add(name, at)
        return list(order), order.capacity

    def copy(self) -> _ConcurrentHashMapOrder:
        made = _ConcurrentHashMapOrder(self.capacity)
        made._bins = {index: list(bucket) for index, bucket in self._bins.items()}
        made._names = self._names  # replaced on a change, never changed in place
        return made

    def remove(self, name: str) -> None:
        self._names = None
        bucket = self._bins[self._bin(name, self.capacity)]
        bucket.remove(name)

    def _resize(self) -> None:
        n = self.capacity
        bins: dict[int, list[str]] = {}
        for index, bucket in self._bins.items():
            bits = [self._bin(name, 2 * n) >= n for name in bucket]
            run = len(bucket) - 1
            while run > 0 and bits[run - 1] == bits[-1]:
                run -= 1
            low = [name for name, hi in zip(bucket[:run], bits, strict=False) if not hi][::-1]
            high = [name for name, hi in zip(bucket[:run], bits, strict=False) if hi][::-1]
            (high if bits and bits[-1] else low).extend(bucket[run:])
            if low:
                bins[index] = low
            if high:
                bins[index + n] = high
        self._bins = bins
        self.capacity = 2 * n

    def __iter__(self) -> Iterator[str]:
        if self._names is None:
            self._names = [name for index in sorted(self._bins) for name in self._bins[index]]
        return iter(self._names)


class FaultTable:
    """``LatencyFaultToleranceImpl`` plus ``MQFaultStrategy.updateFaultItem`` for one profile.

    ``worst_index`` is the ``whichItemWorst`` round-robin state (None: drawn from ``rng`` on
    first use). ``rng`` also drives the 4.7.1 and 5.x shuffles in :meth:`pick_one_at_least`.

    Every ``now_ms`` is an event time. An update older than the item it would replace is ignored
    (faultline's last-writer-wins rule; RocketMQ's own clock never runs backwards).

    >>> from udfs.rocketmq import PROFILES
    >>> t = FaultTable(PROFILES["rocketmq-4.9"], worst_index=0)
    >>> t.report("broker-a", 600, isolation=False, now_ms=1_000).start_timestamp
    31000
    >>> t.is_available("broker-a", 30_999), t.is_available("broker-a", 31_000)
    (False, True)
    >>> t.report("broker-a", 20, isolation=False, now_ms=2_000).start_timestamp  # 4.x overwrites
    2000
    """

    def __init__(
        self,
        profile: Profile,
        *,
        worst_index: int | None = None,
        rng: random.Random | None = None,
        items: Iterable[FaultItem] = (),
        capacity: int = 32,
    ) -> None:
        self.profile = profile
        self.worst_index = worst_index
        self.rng = rng
        self._items: dict[str, FaultItem] = {item.name: item for item in items}
        self._capacity = capacity
        self._made: _ConcurrentHashMapOrder | None = None
        self._shared = False
        """Whether ``_items`` and ``_made`` are another's, to be copied before a change."""

    @classmethod
    def over(
        cls,
        profile: Profile,
        items: Mapping[str, FaultItem],
        order: _ConcurrentHashMapOrder,
        *,
        worst_index: int | None = None,
        rng: random.Random | None = None,
    ) -> FaultTable:
        """A table of ``items`` (by broker) in ``order``, without copying them: they are copied
        into a dict on the table's first change, so reading a table kept elsewhere costs
        nothing (and ``items`` may be any mapping that makes its items as they are read)."""
        table = cls(profile, worst_index=worst_index, rng=rng, capacity=order.capacity)
        table._items = cast(dict[str, FaultItem], items)  # only read until _own copies it
        table._made, table._shared = order, True
        return table

    def _own(self) -> None:
        if self._shared:
            self._items = dict(self._items)
            self._made = self._made.copy() if self._made is not None else None
            self._shared = False

    @property
    def _order(self) -> _ConcurrentHashMapOrder:
        """The iteration order, worked out when first needed: most queue selections only look
        items up."""
        if self._made is None:
            self._made = _ConcurrentHashMapOrder(self._capacity, self._items)
        return self._made

    @property
    def capacity(self) -> int:
        """The simulated ``ConcurrentHashMap`` table size; pass it back to restore the order."""
        return self._capacity if self._made is None else self._made.capacity

    def __iter__(self) -> Iterator[FaultItem]:
        """The items in ``ConcurrentHashMap`` iteration order."""
        return (self._items[name] for name in self._order)

    def __len__(self) -> int:
        return len(self._items)

    def get(self, broker: str) -> FaultItem | None:
        return self._items.get(broker)

    def update(
        self,
        broker: str,
        latency_ms: int,
        not_available_ms: int,
        now_ms: int,
        reachable: bool = True,
    ) -> FaultItem | None:
        """``LatencyFaultTolerance.updateFaultItem``: overwrite (4.x) or extend-only (5.x).

        Returns the new item, or None when the update is older than the item's ``updated_at``.
        4.x has no reachable flag: its items are always reachable.
        """
        old = self._items.get(broker)
        if old is not None and now_ms < old.updated_at:
            return None
        self._own()
        if self.profile.line == "5":
            start = old.start_timestamp if old is not None else 0
            if not_available_ms > 0 and now_ms + not_available_ms > start:
                start = now_ms + not_available_ms
            item = FaultItem(
                broker,
                latency_ms,
                start,
                reachable,
                now_ms,
                old.check_stamp if old is not None else 0,
            )
        else:
            item = FaultItem(broker, latency_ms, now_ms + not_available_ms, True, now_ms)
        if old is None:
            self._order.add(broker, len(self._items) + 1)  # the order before it joins
        self._items[broker] = item
        return item

    def report(
        self,
        broker: str,
        latency_ms: int,
        isolation: bool,
        now_ms: int,
        reachable: bool = True,
    ) -> FaultItem | None:
        """``MQFaultStrategy.updateFaultItem`` with the latency fault switch on: the duration is
        looked up for the measured latency, or for the profile's substitute when ``isolation``;
        the item keeps the measured latency."""
        duration = not_available_duration(self.profile, latency_ms, isolation)
        return self.update(broker, latency_ms, duration, now_ms, reachable)

    def is_available(self, broker: str, now_ms: int) -> bool:
        """Brokers without an entry are available."""
        item = self._items.get(broker)
        return item is None or item.is_available(now_ms)

    def is_reachable(self, broker: str) -> bool:
        """5.x ``isReachable``: the flag, true for brokers without an entry."""
        item = self._items.get(broker)
        return item is None or item.reachable

    def remove(self, broker: str | None) -> None:
        """``remove(name)``; None raises like ``ConcurrentHashMap.remove(null)``."""
        if broker is None:
            raise TypeError("NullPointerException: ConcurrentHashMap.remove(null)")
        if broker in self._items:
            self._own()
            self._order.remove(broker)  # the order before it leaves
            del self._items[broker]

    def pick_one_at_least(self, now_ms: int) -> str | None:
        """``pickOneAtLeast`` per profile (module docstring); None for an empty table (5.x: when no
        item is reachable)."""
        items = list(self)
        if not items:
            return None
        line = self.profile.line
        if line != "4.9":
            self._shuffle(items)
        if line == "5":
            return next((item.name for item in items if item.reachable), None)
        items.sort(key=lambda item: item.sort_key(now_ms))
        half = len(items) // 2
        if half <= 0:
            return items[0].name
        self.worst_index, value = _index.advance(line, self.worst_index, self.rng)
        return items[value % half].name

    def detect_round(self, now_ms: int, probe: Callable[[str], bool | None]) -> None:
        """One 5.x detector round: every item whose ``check_stamp`` has passed is probed.
        ``probe(broker)`` answers None when the address is unknown (the item is removed), True
        when the broker answered (the item becomes reachable) or False. The detector never marks
        an item unreachable."""
        self._own()
        for item in list(self):
            if now_ms < item.check_stamp:
                continue
            stamped = item._replace(check_stamp=now_ms + DETECT_INTERVAL_MS)
            self._items[item.name] = stamped
            answer = probe(item.name)
            if answer is None:
                self.remove(item.name)
            elif answer:
                self._items[item.name] = stamped._replace(reachable=True)

    def _shuffle(self, items: list[FaultItem]) -> None:
        if len(items) < 2:
            return
        if self.rng is None:
            raise ValueError("pickOneAtLeast shuffles here: give the FaultTable a seeded rng")
        self.rng.shuffle(items)
