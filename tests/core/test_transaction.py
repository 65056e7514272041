"""Transactional messages in the core, against literal values from the sources (citations as
in ``udfs.rocketmq``: @4.7.1, @4.9.7, @HEAD). TMSI = broker TransactionalMessageServiceImpl."""

from __future__ import annotations

import pytest

from udfs.rocketmq import (
    PROFILES,
    LocalTransactionState,
    Outcome,
    Pass,
    TransactionConfig,
    after_half_send,
    broker_release,
    check_pass,
    end_rejected,
    immunity_ms,
    next_check,
    transaction_config,
)

H = 3_600_000


@pytest.mark.parametrize(
    ("profile", "interval", "five"),
    [
        ("rocketmq-4.7", 60_000, False),
        ("rocketmq-4.9", 60_000, False),
        ("rocketmq-5", 30_000, True),  # 5.3.3, the newest release faultline knows
    ],
)
def test_broker_defaults_per_profile(profile: str, interval: int, five: bool) -> None:
    # BrokerConfig transactionTimeOut / transactionCheckMax / transactionCheckInterval
    # (@4.7.1:166-178, @4.9.7:168-180, @HEAD:278-290) and MessageStoreConfig.fileReservedTime
    c = transaction_config(PROFILES[profile])
    assert (c.timeout_ms, c.check_max, c.check_interval_ms, c.file_reserved_ms) == (
        6_000,
        15,
        interval,
        72 * H,
    )
    assert (c.wait_at_timeout, c.rejects_late_end, c.copy_checked_after_end) == (False, five, True)
    develop = transaction_config(PROFILES[profile], release="develop")
    assert develop.wait_at_timeout  # apache/rocketmq #9487, after 5.3.3


def test_overrides_keep_the_versions_behaviour() -> None:
    c = transaction_config(
        PROFILES["rocketmq-5"], release="develop", check_interval_ms=5_000, check_max=3
    )
    assert (c.check_interval_ms, c.check_max, c.timeout_ms, c.wait_at_timeout) == (
        5_000,
        3,
        6_000,
        True,
    )


@pytest.mark.parametrize(
    ("outcome", "state"),
    [
        (Outcome.SEND_OK, None),  # the local transaction runs
        (Outcome.FLUSH_DISK_TIMEOUT, LocalTransactionState.ROLLBACK_MESSAGE),
        (Outcome.FLUSH_SLAVE_TIMEOUT, LocalTransactionState.ROLLBACK_MESSAGE),
        (Outcome.SLAVE_NOT_AVAILABLE, LocalTransactionState.ROLLBACK_MESSAGE),
    ],
)
def test_after_the_half_send(outcome: Outcome, state: LocalTransactionState | None) -> None:
    # DefaultMQProducerImpl.sendMessageInTransaction @4.7.1:1226-1266
    assert after_half_send(outcome) == state


@pytest.mark.parametrize(
    "outcome",
    [o for o in Outcome if not o.returned],
)
def test_a_send_that_throws_stores_no_half_message(outcome: Outcome) -> None:
    with pytest.raises(ValueError, match="sendMessageInTransaction throws"):
        after_half_send(outcome)


FOUR = transaction_config(PROFILES["rocketmq-4.9"])
FIVE = transaction_config(PROFILES["rocketmq-5"], release="develop")
"""RocketMQ's develop branch, where the 5.x check service changed (apache/rocketmq #9487)."""


@pytest.mark.parametrize(
    ("config", "age", "expected"),
    [
        # 4.x breaks while 0 <= age < T (TMSI@4.7.1:215) and checks at equality (the loop spins
        # a millisecond); 5.x HEAD breaks while age <= T (TMSI@HEAD:288)
        (FOUR, 5_999, Pass.NOT_YET),
        (FOUR, 6_000, Pass.CHECK),
        (FIVE, 6_000, Pass.NOT_YET),
        (FIVE, 6_001, Pass.CHECK),
        (FOUR, 0, Pass.NOT_YET),
        (FOUR, -1, Pass.CHECK),  # born after the wake: checked at once (age <= -1)
    ],
)
def test_the_timeout_boundary(config: TransactionConfig, age: int, expected: Pass) -> None:
    wake = 600_000
    assert check_pass(config, wake, wake - age, wake - 10_000, 0) is expected


@pytest.mark.parametrize("config", [FOUR, FIVE])
def test_fifteen_checks_then_the_discard(config: TransactionConfig) -> None:
    # needDiscard (TMSI@4.7.1:73-86): the count is set to 1 on the first pass; a message with
    # count >= transactionCheckMax is discarded, so 15 checks are sent, never a 16th
    assert check_pass(config, 600_000, 0, 10, 14) is Pass.CHECK
    assert check_pass(config, 600_000, 0, 10, 15) is Pass.DISCARD
    one = TransactionConfig(check_max=0)
    assert one.checks() == 1
    assert [check_pass(one, 600_000, 0, 10, n) for n in (0, 1)] == [Pass.CHECK, Pass.DISCARD]


def test_skip_after_the_file_reserved_time_and_discard_first() -> None:
    # needSkip (TMSI@4.7.1:88-98): now - born > fileReservedTime * 3600 * 1000, strict; it is
    # asked only when needDiscard said no
    assert check_pass(FOUR, 72 * H, 0, 10, 3) is Pass.CHECK
    assert check_pass(FOUR, 72 * H + 1, 0, 10, 3) is Pass.SKIP
    assert check_pass(FOUR, 72 * H + 1, 0, 10, 15) is Pass.DISCARD


def test_a_message_stored_after_the_round_began_waits() -> None:
    # "Fresh stored": storeTimestamp >= the round's start time breaks the round
    assert check_pass(FOUR, 600_000, 500_000, 600_000, 0) is Pass.NOT_YET
    assert check_pass(FOUR, 600_000, 500_000, 599_999, 0) is Pass.CHECK


@pytest.mark.parametrize(
    ("config", "age", "expected"),
    [
        (FOUR, 59_999, Pass.IMMUNE),
        (FOUR, 60_000, Pass.CHECK),
        (FIVE, 60_000, Pass.IMMUNE),
        (FIVE, 60_001, Pass.CHECK),
    ],
)
def test_check_immunity(config: TransactionConfig, age: int, expected: Pass) -> None:
    # CHECK_IMMUNITY_TIME_IN_SECONDS = 60: TMSI's own getImmunityTime (prop * 1000, no max with
    # the timeout) and the same boundary as the timeout's
    assert check_pass(config, 600_000, 600_000 - age, 500_000, 0, 60_000) is expected


def test_an_immunity_shorter_than_the_timeout_is_checked_earlier() -> None:
    assert check_pass(FOUR, 600_000, 597_000, 597_000, 0, 2_000) is Pass.CHECK
    assert check_pass(FOUR, 600_000, 597_000, 597_000, 0) is Pass.NOT_YET


def test_the_check_schedule_in_4x_and_5x() -> None:
    born, stored = 54_000, 54_010  # stored 54.01 s after the epoch's minute 0
    wake, what = next_check(FOUR, stored, born, stored, 0)
    assert (wake, what) == (60_000, Pass.CHECK)  # age 6000 = T: 4.x checks
    wake, what = next_check(FIVE, stored, born, stored, 0)
    assert (wake, what) == (90_000, Pass.CHECK)  # 5.x waits at 6000, next wake 30 s later
    checks, times = 0, list[tuple[int, Pass]]()
    while True:
        wake, what = next_check(FIVE, wake if times else stored, born, stored, checks)
        times.append((wake, what))
        if what is not Pass.CHECK:
            break
        checks += 1
    assert times == [(90_000 + 30_000 * k, Pass.CHECK) for k in range(15)] + [
        (90_000 + 30_000 * 15, Pass.DISCARD)
    ]


def test_immune_wakes_count_without_a_check() -> None:
    # the immunity copy is written back with the count needDiscard raised: a message immune for
    # 20 wakes passes 15 of them (counts 1..15) and is discarded at the 16th without a check
    immune = 20 * 60_000
    assert next_check(FOUR, 10, 0, 10, 0, immune) == (16 * 60_000, Pass.DISCARD)
    assert next_check(FOUR, 10, 0, 10, 0, 90_000) == (120_000, Pass.CHECK)


def test_5x_refuses_a_late_first_phase_end_with_immunity() -> None:
    # EndTransactionProcessor.rejectCommitOrRollback @HEAD:199-213 with
    # TransactionalMessageUtil.getImmunityTime: max(prop * 1000, transactionTimeOut)
    assert end_rejected(FIVE, 70_001, 10_000, 60_000)
    assert not end_rejected(FIVE, 70_000, 10_000, 60_000)
    assert end_rejected(FIVE, 16_001, 10_000, 2_000)  # 2 s < T: the timeout counts
    assert not end_rejected(FIVE, 15_999, 10_000, 2_000)
    assert not end_rejected(FIVE, 10**9, 10_000, None)  # no immunity: never refused
    assert not end_rejected(FOUR, 10**9, 10_000, 60_000)  # 4.x has no such rule


@pytest.mark.parametrize(
    ("release", "interval", "wait", "rejects"),
    [
        # BrokerConfig.transactionCheckInterval (@4.9.7:180, @rocketmq-all-5.0.0:251,
        # @rocketmq-all-5.1.0:266: 60 s; @rocketmq-all-5.1.1:263, @rocketmq-all-5.3.3:288: 30 s);
        # EndTransactionProcessor.rejectCommitOrRollback from @rocketmq-all-5.1.1:181;
        # TMSI's `age <= timeout` only at HEAD:280,288 (`<` @rocketmq-all-5.3.3:280,288)
        ("4.9.7", 60_000, False, False),
        ("5.0.0", 60_000, False, False),
        ("5.1.0", 60_000, False, False),
        ("5.1.1", 30_000, False, True),
        ("5.3.3", 30_000, False, True),
        ("develop", 30_000, True, True),
    ],
)
def test_each_broker_release_has_its_own_boundaries(
    release: str, interval: int, wait: bool, rejects: bool
) -> None:
    c = transaction_config(PROFILES["rocketmq-5"], release=release)
    assert (c.check_interval_ms, c.wait_at_timeout, c.rejects_late_end) == (
        interval,
        wait,
        rejects,
    )
    # born 6 s before the wake: the age equals the timeout
    expected = Pass.NOT_YET if wait else Pass.CHECK
    assert check_pass(c, 600_000, 594_000, 594_000, 0) is expected


def test_the_profiles_follow_their_own_release_unless_told() -> None:
    assert transaction_config(PROFILES["rocketmq-5"]) == transaction_config(
        PROFILES["rocketmq-4.9"], release="5.3.3"
    )
    assert transaction_config(PROFILES["rocketmq-4.7"]) == transaction_config(
        PROFILES["rocketmq-5"], release="4.7.1"
    )
    for unknown in ("5.4.0", "3.9.0", "5.3", "latest"):
        with pytest.raises(ValueError, match=f"broker release '{unknown}' is unknown"):
            broker_release(unknown)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("60", 60_000),
        ("+5", 5_000),
        ("0", 0),
        ("-5", -5_000),  # a negative immunity: checked at its first wake
        ("-1", 6_000),  # getLong's "no value": transactionTimeOut
        ("1 min", 6_000),  # Long.parseLong refuses: -1
        (" 60", 6_000),
        ("", 6_000),
        ("9223372036854775808", 6_000),  # past Long.MAX_VALUE
        (None, None),  # no property: the "New arrived" branch
    ],
)
def test_the_immunity_property_as_the_check_service_reads_it(
    text: str | None, expected: int | None
) -> None:
    # TMSI.getImmunityTime / getLong (@4.7.1:255-265,393-402, @rocketmq-all-5.3.3:356-366,521-530)
    assert immunity_ms(text, 6_000) == expected
