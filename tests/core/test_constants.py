"""``udfs.rocketmq._profiles``: latency bands, the isolation substitute, retry codes, names."""

from __future__ import annotations

import pytest

from tests.core.conftest import P5, P47, P49
from udfs.rocketmq import PROFILES, not_available_duration


@pytest.mark.parametrize(
    ("latency", "expected_4x", "expected_5"),
    [
        (-1_000_000, 0, 0),
        (-1, 0, 0),
        (0, 0, 0),
        (49, 0, 0),
        (50, 0, 0),
        (100, 0, 0),
        (549, 0, 0),
        (550, 30000, 2000),
        (999, 30000, 2000),
        (1000, 60000, 2000),
        (1799, 60000, 2000),
        (1800, 60000, 5000),
        (1999, 60000, 5000),
        (2000, 120000, 5000),
        (2999, 120000, 5000),
        (3000, 180000, 6000),
        (4999, 180000, 6000),
        (5000, 180000, 10000),
        (14999, 180000, 10000),
        (15000, 600000, 30000),
        (10**15, 600000, 30000),
    ],
)
def test_latency_bands_are_inclusive_at_each_bound(
    latency: int, expected_4x: int, expected_5: int
) -> None:
    assert not_available_duration(P47, latency) == expected_4x
    assert not_available_duration(P49, latency) == expected_4x
    assert not_available_duration(P5, latency) == expected_5


@pytest.mark.parametrize(("p", "expected"), [(P47, 600000), (P49, 600000), (P5, 10000)])
@pytest.mark.parametrize("measured", [-5, 0, 20, 550, 99_999])
def test_isolation_looks_up_the_substitute_latency(p, expected, measured) -> None:
    assert not_available_duration(p, measured, isolation=True) == expected


def test_custom_latency_table() -> None:
    custom = P5.with_latency_table([10, 20], [100, 200], name="tight")
    assert custom.name == "tight" and custom.line == "5"
    assert [not_available_duration(custom, v) for v in (9, 10, 19, 20, 10_000)] == [
        0,
        100,
        100,
        200,
        200,
    ]
    # the isolation substitute (10000 in 5.x) is looked up in the custom bands too
    assert not_available_duration(custom, 0, isolation=True) == 200


def test_custom_latency_table_must_have_matching_lengths() -> None:
    with pytest.raises(ValueError, match="same length"):
        P49.with_latency_table([1, 2], [3])
    with pytest.raises(ValueError, match="non-empty"):
        P49.with_latency_table([], [])


@pytest.mark.parametrize(
    ("code", "retried_in"),
    [
        (17, {"4.7", "4.9", "5"}),
        (14, {"4.7", "4.9", "5"}),
        (1, {"4.7", "4.9", "5"}),
        (16, {"4.7", "4.9", "5"}),
        (204, {"4.7", "4.9", "5"}),
        (205, {"4.7", "4.9", "5"}),
        (2, {"5"}),  # SYSTEM_BUSY, 5.3.0
        (1500, {"5"}),  # GO_AWAY, 5.3.1
        (25, set()),
    ],
)
def test_retry_response_codes(code: int, retried_in: set[str]) -> None:
    for p in PROFILES.values():
        assert (code in p.retry_response_codes) == (p.line in retried_in), p.name


def test_system_topics() -> None:
    assert not P49.is_system_topic("CHECKPOINT_TOPIC")
    assert P5.is_system_topic("CHECKPOINT_TOPIC")
    for p in (P47, P49, P5):
        assert p.is_system_topic("TBW102")
        assert p.is_system_topic("rmq_sys_anything")
        assert not p.is_system_topic("orders")


def test_profiles_name_their_versions() -> None:
    assert [(p.name, p.version) for p in PROFILES.values()] == [
        ("rocketmq-4.7", "4.7.1"),
        ("rocketmq-4.9", "4.9.7"),
        ("rocketmq-5", "5.x"),
    ]
