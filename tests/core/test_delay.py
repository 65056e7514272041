"""``udfs.rocketmq._delay``: parseDelayLevel, the redirect to SCHEDULE_TOPIC_XXXX and deliver
times."""

from __future__ import annotations

import pytest

from udfs.rocketmq import (
    DelayLevelError,
    DelayLevels,
    delay_level_to_queue_id,
    queue_id_to_delay_level,
    schedule_redirect,
)

DEFAULT_MS = [
    1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000, 480000,
    540000, 600000, 1200000, 1800000, 3600000, 7200000,
]  # fmt: skip


def test_default_table() -> None:
    levels = DelayLevels.parse()
    assert levels.max_level == 18
    assert [levels.delay_ms(level) for level in range(1, 19)] == DEFAULT_MS


@pytest.mark.parametrize(
    ("spec", "table"),
    [
        ("1s 5s ", {1: 1000, 2: 5000}),  # trailing empty tokens are dropped
        ("1s 5s   ", {1: 1000, 2: 5000}),
        ("-1s", {1: -1000}),  # Long.parseLong accepts a sign
        ("+5s 1d", {1: 5000, 2: 86_400_000}),
        ("0s", {1: 0}),
        ("9223372036854775807d", {1: -86_400_000}),  # the long product wraps
    ],
)
def test_parse_accepts_what_rocketmq_accepts(spec: str, table: dict[int, int]) -> None:
    assert dict(DelayLevels.parse(spec).table) == table


@pytest.mark.parametrize(
    "spec",
    ["", " 1s", "1s  5s", "1s\t5s", "1S", "1ms", "1.5s", "s", "10", "1x", "9223372036854775808s"],
)
def test_parse_rejects_what_rocketmq_rejects(spec: str) -> None:
    with pytest.raises(DelayLevelError, match="messageDelayLevel"):
        DelayLevels.parse(spec)


def test_parse_error_names_the_level_and_token() -> None:
    with pytest.raises(DelayLevelError, match=r"level 3 is '10M'"):
        DelayLevels.parse("1s 5s 10M")


@pytest.mark.parametrize("level", range(1, 19))
def test_every_level_redirects_to_its_queue(level: int) -> None:
    levels = DelayLevels.parse()
    redirect = schedule_redirect(level, levels)
    assert (redirect.delayed, redirect.delay_level, redirect.topic, redirect.queue_id) == (
        True,
        level,
        "SCHEDULE_TOPIC_XXXX",
        level - 1,
    )
    assert levels.deliver_at(level, 1_700_000_000_000) == 1_700_000_000_000 + DEFAULT_MS[level - 1]


@pytest.mark.parametrize("level", [19, 100])
def test_levels_above_the_maximum_clamp(level: int) -> None:
    redirect = schedule_redirect(level, DelayLevels.parse())
    assert (redirect.delay_level, redirect.queue_id) == (18, 17)


@pytest.mark.parametrize("level", [0, -1, -100, None])
def test_level_zero_and_negative_are_not_delayed(level: int | None) -> None:
    redirect = schedule_redirect(level, DelayLevels.parse())
    assert not redirect.delayed and redirect.topic is None and redirect.queue_id is None


@pytest.mark.parametrize(
    ("transaction_type", "delayed"),
    [("NOT_TYPE", True), ("COMMIT_TYPE", True), ("PREPARED_TYPE", False), ("ROLLBACK_TYPE", False)],
)
def test_only_normal_and_commit_messages_are_redirected(transaction_type, delayed) -> None:  # type: ignore[no-untyped-def]
    assert schedule_redirect(3, DelayLevels.parse(), transaction_type).delayed is delayed


def test_custom_table_clamps_to_its_own_maximum() -> None:
    levels = DelayLevels.parse("1s 2s 3s")
    assert schedule_redirect(7, levels).queue_id == 2


def test_queue_id_helpers_have_no_range_check() -> None:
    assert queue_id_to_delay_level(2) == 3
    assert delay_level_to_queue_id(0) == -1
    assert delay_level_to_queue_id(19) == 18


def test_deliver_at_for_a_missing_level_adds_one_second() -> None:
    assert DelayLevels.parse().deliver_at(999, 0) == 1000
    assert DelayLevels.parse().deliver_at(0, 5) == 1005


def test_delay_ms_of_a_missing_level_is_an_error() -> None:
    with pytest.raises(DelayLevelError, match=r"levels 1\.\.18"):
        DelayLevels.parse().delay_ms(19)


def test_correct_deliver_at_guards_against_a_clock_moving_back() -> None:
    levels = DelayLevels.parse()
    # level 3 = 10 s: a deliver time more than 10 s ahead of now is due now
    assert levels.correct_deliver_at(3, 1000, 11_000) == 11_000
    assert levels.correct_deliver_at(3, 1000, 11_001) == 1000


def test_due_is_inclusive() -> None:
    assert DelayLevels.is_due(5000, 5000)
    assert not DelayLevels.is_due(5001, 5000)
