"""``udfs.rocketmq._fault``: FaultItem, the update rules, isAvailable/isReachable, compareTo,
pickOneAtLeast, remove and the 5.x detector."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.core.conftest import P5, P47, P49, FixedRandom
from udfs.rocketmq import FaultItem, FaultTable, Profile, _fault
from udfs.rocketmq._fault import _ConcurrentHashMapOrder
from udfs.rocketmq._java import string_hash


def test_4x_overwrites_so_a_fast_success_clears_an_isolation() -> None:
    for p in (P47, P49):
        t = FaultTable(p)
        assert t.report("a", 600, False, now_ms=1000).start_timestamp == 31000
        item = t.report("a", 20, False, now_ms=2000)
        assert (item.current_latency, item.start_timestamp) == (20, 2000)
        assert t.is_available("a", 2000)


def test_5_extends_only_so_a_fast_success_keeps_the_isolation() -> None:
    t = FaultTable(P5)
    assert t.report("a", 600, False, now_ms=1000).start_timestamp == 3000  # 550..1799 -> 2 s
    item = t.report("a", 20, False, now_ms=2000)
    assert (item.current_latency, item.start_timestamp) == (20, 3000)
    assert not t.is_available("a", 2999)
    assert t.is_available("a", 3000)


@pytest.mark.parametrize(("p", "expected_start"), [(P47, 31000), (P49, 31000), (P5, 10000)])
def test_a_shorter_duration_shortens_only_in_4x(p: Profile, expected_start: int) -> None:
    t = FaultTable(p)
    t.report("a", 5, isolation=True, now_ms=0)  # 600 s in 4.x, 10 s in 5.x
    assert t.report("a", 600, False, now_ms=1000).start_timestamp == expected_start


@pytest.mark.parametrize(("p", "expected_start"), [(P47, 7000), (P49, 7000), (P5, 0)])
def test_new_item_with_zero_duration(p: Profile, expected_start: int) -> None:
    t = FaultTable(p)
    item = t.report("a", 10, False, now_ms=7000)
    assert item.start_timestamp == expected_start
    assert item.current_latency == 10 and item.updated_at == 7000


def test_5_extends_when_the_new_end_is_later() -> None:
    t = FaultTable(P5)
    t.report("a", 600, False, now_ms=0)  # until 2000
    assert t.report("a", 600, False, now_ms=1500).start_timestamp == 3500
    assert t.report("a", 3000, False, now_ms=1600).start_timestamp == 7600


def test_isolation_stores_the_measured_latency(profile: Profile) -> None:
    item = FaultTable(profile).report("a", 37, isolation=True, now_ms=100)
    assert item.current_latency == 37


@pytest.mark.parametrize("p", [P47, P49, P5], ids=lambda p: p.name)
def test_is_available_is_inclusive_at_the_boundary(p: Profile) -> None:
    t = FaultTable(p)
    end = t.report("a", 20000, False, now_ms=1000).start_timestamp
    assert not t.is_available("a", end - 1)
    assert t.is_available("a", end)
    assert t.is_available("unknown", 0)


def test_5_availability_ignores_the_reachable_flag() -> None:
    t = FaultTable(P5)
    t.report("a", 10, False, now_ms=0, reachable=False)
    assert t.is_available("a", 0)
    assert not t.is_reachable("a")
    assert t.is_reachable("unknown")


@pytest.mark.parametrize(("p", "reachable"), [(P47, True), (P49, True), (P5, False)])
def test_only_5_keeps_a_reachable_flag(p: Profile, reachable: bool) -> None:
    t = FaultTable(p)
    t.report("a", 10, True, now_ms=0, reachable=False)
    assert t.is_reachable("a") is reachable


def test_an_older_update_never_overwrites_a_newer_one(profile: Profile) -> None:
    t = FaultTable(profile)
    t.report("a", 5, isolation=True, now_ms=5000)
    before = t.get("a")
    assert t.report("a", 1, isolation=False, now_ms=4999) is None
    assert t.get("a") == before
    assert t.report("a", 1, isolation=False, now_ms=5000) is not None  # same time applies


def test_compare_to_orders_available_then_latency_then_start() -> None:
    now = 1000
    items = [
        FaultItem("late-unavailable", 1, 5000),
        FaultItem("slow", 300, 0),
        FaultItem("fast-later", 10, 900),
        FaultItem("fast-earlier", 10, 100),
        FaultItem("early-unavailable", 1, 2000),
    ]
    ordered = sorted(items, key=lambda i: i.sort_key(now))
    assert [i.name for i in ordered] == [
        "fast-earlier",
        "fast-later",
        "slow",
        "early-unavailable",
        "late-unavailable",
    ]


def test_remove_null_raises_like_concurrent_hash_map() -> None:
    t = FaultTable(P49)
    with pytest.raises(TypeError, match="NullPointerException"):
        t.remove(None)
    t.report("a", 1, False, 0)
    t.remove("a")
    t.remove("a")  # removing an absent key is fine
    assert t.get("a") is None and len(t) == 0


# --- ConcurrentHashMap iteration order -------------------------------------------------------
# Java: "a".hashCode() == 97 (bin 1 of 32), "b" 98 (bin 2), "A" 65 (bin 1 too).


def test_iteration_follows_hash_bins_not_insertion() -> None:
    t = FaultTable(P49)
    for name in ["c", "b", "a"]:
        t.report(name, 1, False, 0)
    assert [i.name for i in t] == ["a", "b", "c"]


def test_a_bin_keeps_insertion_order_and_a_reinserted_key_goes_last() -> None:
    t = FaultTable(P49)
    for name in ["a", "A"]:
        t.report(name, 1, False, 0)
    assert [i.name for i in t] == ["a", "A"]
    t.remove("a")
    t.report("a", 1, False, 0)
    assert [i.name for i in t] == ["A", "a"]


def test_resize_at_24_entries_splits_bins_as_java_transfer_does() -> None:
    # Bin 1 of 32 holds "A" (65), "\x81" (129), "a" (97), "!" (33) in that order. In a table of 64,
    # 65 and 129 stay in bin 1 and 97 and 33 move to bin 33. Java keeps the tail run ("a", "!")
    # and reverses the nodes before it, so bin 1 becomes "\x81", "A".
    t = FaultTable(P49)
    names = ["A", "\x81", "a", "!"]
    fillers = [chr(c) for c in range(ord("b"), ord("b") + 19)]  # bins 2..20
    for name in names + fillers:
        t.report(name, 1, False, 0)
    assert t.capacity == 32 and len(t) == 23
    assert [i.name for i in t][:4] == names
    t.report("zz", 1, False, 0)
    assert t.capacity == 64
    order = [i.name for i in t]
    # "zz" hashes to 3904: bin 0; the fillers move to bins 34..52, after bin 33
    assert order == ["zz", "\x81", "A", "a", "!", *fillers]
    restored = FaultTable(P49, items=list(t), capacity=t.capacity)
    assert [i.name for i in restored] == order


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text("aAbB!\x81zZ", min_size=1, max_size=3), unique=True, max_size=60), st.data()
)
def test_names_joined_at_once_keep_the_order_of_names_put_one_by_one(
    names: list[str], data: st.DataObject
) -> None:
    """``_ConcurrentHashMapOrder.joined`` (a stable sort by bin when no resize is due) gives the
    order and capacity of a table the new names were reported into one after another."""
    split = data.draw(st.integers(0, len(names)))
    _assert_joined_as_put(names, split)


@pytest.mark.parametrize("size", [23, 24, 25, 47, 48, 49])
def test_names_joined_up_to_a_resize_keep_the_order_of_names_put_one_by_one(size: int) -> None:
    names = [chr(c) for c in range(ord("!"), ord("!") + size)]
    for split in (0, size // 2, size - 1):
        _assert_joined_as_put(names, split)


def _assert_joined_as_put(names: list[str], split: int) -> None:
    table = FaultTable(P49)
    for name in names[:split]:
        table.report(name, 1, False, 0)
    before, capacity = [i.name for i in table], table.capacity
    for name in names[split:]:
        table.report(name, 1, False, 0)
    joined = _ConcurrentHashMapOrder.joined(capacity, before, names[split:])
    assert joined == ([i.name for i in table], table.capacity)


def test_the_bins_kept_per_capacity_stay_bounded_and_right(monkeypatch: pytest.MonkeyPatch) -> None:
    """Broker names come from the events: the cache of their bins forgets what it holds once
    it holds ``_BINS_KEPT`` names, and a name's bin is the same whether it was kept or not."""
    monkeypatch.setattr(_fault, "_BINS_KEPT", 8)
    bins = _fault._bins(1 << 20)  # a capacity no other test uses: its cache starts empty
    names = [f"broker-{i}" for i in range(20)]
    first = [bins[n] for n in names]
    assert 0 < len(bins) <= 8
    assert [bins[n] for n in reversed(names)] == first[::-1]
    assert len(bins) <= 8
    # String.hashCode spread as ConcurrentHashMap.spread, masked by the capacity
    h = string_hash("broker-0")
    assert first[0] == ((h ^ ((h & 0xFFFFFFFF) >> 16)) & 0x7FFFFFFF) & ((1 << 20) - 1)


def test_a_table_over_another_reads_it_in_place_and_copies_it_on_a_change() -> None:
    """``FaultTable.over``: a snapshot that shares another table's items and order until it
    changes, when it takes copies; the other table is never touched."""
    source = FaultTable(P49)
    for name in ["A", "a", "b"]:
        source.report(name, 1, False, 0)
    items = {i.name: i for i in source}
    order = source._order
    view = FaultTable.over(P49, items, order, worst_index=0)
    assert [i.name for i in view] == ["A", "a", "b"] and view.capacity == 32
    view.remove("A")
    view.report("c", 5, False, 10)
    view.report("a", 700, False, 10)
    assert [i.name for i in view] == ["a", "b", "c"] and not view.is_available("a", 11)
    assert list(items) == ["A", "a", "b"] and items["a"].current_latency == 1
    assert [n for n in order] == ["A", "a", "b"]
    # a change that RocketMQ ignores (older than the item) takes no copy
    kept = FaultTable.over(P49, items, order)
    assert kept.update("a", 1, 0, now_ms=-1) is None and kept._items is items


# --- pickOneAtLeast ---------------------------------------------------------------------------


def _table(p: Profile, latencies: dict[str, int], **kwargs: object) -> FaultTable:
    t = FaultTable(p, **kwargs)  # type: ignore[arg-type]
    for name, latency in latencies.items():
        t.update(name, latency, 60_000, now_ms=0)  # all unavailable until 60 s
    return t


def test_empty_table_picks_nothing(profile: Profile) -> None:
    assert FaultTable(profile, worst_index=0, rng=random.Random(1)).pick_one_at_least(0) is None


def test_4x_round_robins_over_the_better_half() -> None:
    for p in (P47, P49):
        t = _table(p, {"w": 400, "x": 100, "y": 300, "z": 200}, worst_index=0, rng=random.Random(3))
        picks = [t.pick_one_at_least(1000) for _ in range(4)]
        assert picks == ["z", "x", "z", "x"]  # half = 2: values 1, 2, 3, 4 -> positions 1, 0, 1, 0
        assert t.worst_index == 4


def test_4x_single_item_does_not_touch_the_index() -> None:
    for p in (P47, P49):
        t = _table(p, {"only": 100}, worst_index=7)
        assert t.pick_one_at_least(0) == "only"
        assert t.worst_index == 7


def test_available_items_sort_first() -> None:
    t = _table(P49, {"slow-but-up": 900, "fast-but-down": 1}, worst_index=0)
    t.update("slow-but-up", 900, 0, now_ms=0)
    t.update("c", 5, 60_000, now_ms=0)
    t.update("d", 6, 60_000, now_ms=0)
    # sorted: slow-but-up (available), fast-but-down, c, d; half = 2
    assert [t.pick_one_at_least(10) for _ in range(2)] == ["fast-but-down", "slow-but-up"]


def test_4_9_breaks_ties_by_hash_map_order_whatever_the_generator() -> None:
    for seed in range(20):
        t = _table(P49, {"b": 100, "a": 100}, worst_index=0, rng=random.Random(seed))
        assert t.pick_one_at_least(0) == "a"


def test_4_7_shuffles_before_sorting_so_ties_go_either_way() -> None:
    picks = {
        _table(P47, {"b": 100, "a": 100}, worst_index=0, rng=random.Random(s)).pick_one_at_least(0)
        for s in range(20)
    }
    assert picks == {"a", "b"}


def test_5_picks_a_random_reachable_item_ignoring_latency_and_availability() -> None:
    t = FaultTable(P5, rng=random.Random(0))
    t.report("best", 1, False, 0, reachable=False)
    t.report("worst", 99999, True, 0, reachable=True)
    t.report("mid", 500, True, 0, reachable=False)
    assert {t.pick_one_at_least(0) for _ in range(10)} == {"worst"}
    t.report("worst", 1, True, 1, reachable=False)
    assert t.pick_one_at_least(1) is None


def test_5_random_choice_among_reachable() -> None:
    t = FaultTable(P5, rng=random.Random(11))
    for name in "abcd":
        t.report(name, 1, False, 0)
    assert {t.pick_one_at_least(0) for _ in range(40)} == set("abcd")


def test_4_7_draws_the_index_start_from_the_generator() -> None:
    t = _table(P47, {"x": 1, "y": 2, "z": 3, "w": 4}, rng=FixedRandom(-5))
    # first use: abs(-5) = 5, then 6: 6 % 2 = 0 -> the best item
    assert t.pick_one_at_least(0) == "x"
    assert t.worst_index == 6


def test_shuffling_profiles_need_a_generator() -> None:
    t = _table(P47, {"x": 1, "y": 2}, worst_index=0)
    with pytest.raises(ValueError, match="seeded rng"):
        t.pick_one_at_least(0)


# --- 5.x detector -----------------------------------------------------------------------------


def test_detector_probes_due_items_marks_reachable_and_removes_unknown() -> None:
    t = FaultTable(P5)
    t.report("up", 10, True, 0, reachable=False)
    t.report("down", 10, True, 0, reachable=False)
    t.report("gone", 10, True, 0, reachable=False)
    answers = {"up": True, "down": False, "gone": None}
    probed: list[str] = []

    def probe(broker: str) -> bool | None:
        probed.append(broker)
        return answers[broker]

    t.detect_round(1000, probe)
    assert sorted(probed) == ["down", "gone", "up"]
    assert t.is_reachable("up") and not t.is_reachable("down") and t.get("gone") is None
    assert t.get("up").check_stamp == 3000  # type: ignore[union-attr]
    probed.clear()
    t.detect_round(2999, probe)
    assert probed == []
    t.detect_round(3000, probe)
    assert sorted(probed) == ["down", "up"]
