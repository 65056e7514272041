"""``udfs.rocketmq._send``: attempts, the timeout budget and the outcome table."""

from __future__ import annotations

import pytest

from tests.core.conftest import P5, P47, P49
from udfs.rocketmq import (
    FaultTable,
    Next,
    Outcome,
    Profile,
    SendMode,
    attempt_effect,
    attempt_timeout,
    max_attempts,
)


def test_attempts_per_mode() -> None:
    assert max_attempts(SendMode.SYNC) == 3
    assert max_attempts(SendMode.ASYNC) == 3
    assert max_attempts(SendMode.ONEWAY) == 1
    assert max_attempts(SendMode.SYNC, retry_times_when_send_failed=5) == 6


def test_timeout_is_a_total_budget_with_a_strict_check(profile: Profile) -> None:
    assert attempt_timeout(profile, 3000, 0, True) == 3000
    assert attempt_timeout(profile, 3000, 2999, True) == 1
    assert attempt_timeout(profile, 3000, 3000, True) == 0  # timeout < cost is strict
    assert attempt_timeout(profile, 3000, 3001, True) is None


@pytest.mark.parametrize(("p", "expected"), [(P47, 2500), (P49, 2500), (P5, 800)])
def test_per_request_cap_is_5_only_and_only_with_attempts_left(p: Profile, expected: int) -> None:
    assert attempt_timeout(p, 3000, 500, True, max_timeout_per_request_ms=800) == expected
    assert attempt_timeout(p, 3000, 500, False, max_timeout_per_request_ms=800) == 2500


# (outcome, profile) -> (isolation, reachable, next) for a first SYNC attempt of three
SYNC_TABLE = [
    (Outcome.SEND_OK, P47, False, True, Next.RETURN),
    (Outcome.SEND_OK, P5, False, True, Next.RETURN),
    (Outcome.FLUSH_DISK_TIMEOUT, P49, False, True, Next.RETURN),
    (Outcome.REMOTING_EXCEPTION, P47, True, True, Next.RETRY),
    (Outcome.REMOTING_EXCEPTION, P49, True, True, Next.RETRY),
    (Outcome.REMOTING_EXCEPTION, P5, True, True, Next.RETRY),  # reachable = !startDetectorEnable
    (Outcome.CLIENT_EXCEPTION, P47, True, True, Next.RETRY),
    (Outcome.CLIENT_EXCEPTION, P49, True, True, Next.RETRY),
    (Outcome.CLIENT_EXCEPTION, P5, False, True, Next.RETRY),
    (Outcome.INTERRUPTED, P47, False, True, Next.FAIL),
    (Outcome.INTERRUPTED, P5, False, True, Next.FAIL),
]


@pytest.mark.parametrize(("outcome", "p", "isolation", "reachable", "nxt"), SYNC_TABLE)
def test_sync_outcome_table(outcome, p, isolation, reachable, nxt) -> None:  # type: ignore[no-untyped-def]
    effect = attempt_effect(p, outcome, 321)
    assert [(r.latency_ms, r.isolation, r.reachable, r.phase) for r in effect.reports] == [
        (321, isolation, reachable, "result")
    ]
    assert effect.next is nxt


@pytest.mark.parametrize(
    ("p", "isolation", "reachable", "retried_code_2"),
    [(P47, True, True, False), (P49, True, True, False), (P5, True, False, True)],
)
def test_broker_exception(
    p: Profile, isolation: bool, reachable: bool, retried_code_2: bool
) -> None:
    effect = attempt_effect(p, Outcome.BROKER_EXCEPTION, 40, response_code=17)
    assert (effect.reports[0].isolation, effect.reports[0].reachable) == (isolation, reachable)
    assert effect.next is Next.RETRY
    busy = attempt_effect(p, Outcome.BROKER_EXCEPTION, 40, response_code=2)
    assert busy.next is (Next.RETRY if retried_code_2 else Next.FAIL)
    not_retried = attempt_effect(p, Outcome.BROKER_EXCEPTION, 40, response_code=25)
    assert (not_retried.next, not_retried.error_code) == (Next.FAIL, 25)
    assert attempt_effect(
        p, Outcome.BROKER_EXCEPTION, 40, response_code=25, earlier_result=True
    ).next is (Next.RETURN)


def test_5_remoting_reachable_follows_the_detector_switch() -> None:
    on = attempt_effect(P5, Outcome.REMOTING_EXCEPTION, 1, start_detector_enable=True)
    assert on.reports[0].reachable is False
    for p in (P47, P49):
        assert (
            attempt_effect(p, Outcome.REMOTING_EXCEPTION, 1, start_detector_enable=True)
            .reports[0]
            .reachable
        )


def test_last_attempt_fails_with_the_client_error_code(profile: Profile) -> None:
    remoting = attempt_effect(profile, Outcome.REMOTING_EXCEPTION, 1, attempt=2)
    assert (remoting.next, remoting.error_code) == (Next.FAIL, 10002)
    client = attempt_effect(profile, Outcome.CLIENT_EXCEPTION, 1, attempt=2)
    assert (client.next, client.error_code) == (Next.FAIL, 10003)
    broker = attempt_effect(profile, Outcome.BROKER_EXCEPTION, 1, attempt=2, response_code=14)
    assert (broker.next, broker.error_code) == (Next.FAIL, 14)


def test_non_ok_status_is_retried_only_with_retry_another_broker(profile: Profile) -> None:
    for outcome in (
        Outcome.FLUSH_DISK_TIMEOUT,
        Outcome.FLUSH_SLAVE_TIMEOUT,
        Outcome.SLAVE_NOT_AVAILABLE,
    ):
        assert attempt_effect(profile, outcome, 5).next is Next.RETURN
        assert (
            attempt_effect(profile, outcome, 5, retry_another_broker_when_not_store_ok=True).next
            is Next.RETRY
        )
        assert (
            attempt_effect(
                profile, outcome, 5, attempt=2, retry_another_broker_when_not_store_ok=True
            ).next
            is Next.RETURN
        )
    assert (
        attempt_effect(
            profile, Outcome.SEND_OK, 5, retry_another_broker_when_not_store_ok=True
        ).next
        is Next.RETURN
    )


def test_call_timeout_reports_nothing_and_ends_the_send(profile: Profile) -> None:
    effect = attempt_effect(profile, Outcome.CALL_TIMEOUT, 3100, attempt=1)
    assert effect.reports == () and effect.next is Next.FAIL
    assert (
        attempt_effect(profile, Outcome.CALL_TIMEOUT, 3100, earlier_result=True).next is Next.RETURN
    )


def test_oneway_is_never_retried(profile: Profile) -> None:
    effect = attempt_effect(profile, Outcome.REMOTING_EXCEPTION, 7, mode=SendMode.ONEWAY)
    assert effect.next is Next.FAIL and effect.reports[0].isolation


# --- ASYNC ------------------------------------------------------------------------------------


def test_async_reports_the_dispatch_then_the_result(profile: Profile) -> None:
    effect = attempt_effect(profile, Outcome.SEND_OK, 250, mode=SendMode.ASYNC)
    assert [(r.phase, r.latency_ms, r.isolation) for r in effect.reports] == [
        ("dispatch", 0, False),
        ("result", 250, False),
    ]
    assert effect.next is Next.RETURN


def test_async_broker_error_is_isolated_but_not_retried(profile: Profile) -> None:
    effect = attempt_effect(
        profile, Outcome.BROKER_EXCEPTION, 9, mode=SendMode.ASYNC, response_code=17
    )
    assert effect.next is Next.FAIL and effect.reports[-1].isolation
    assert effect.reports[-1].reachable  # the async callback reports reachable in 5.x too


def test_async_no_response_is_retried_twice(profile: Profile) -> None:
    nexts = [
        attempt_effect(profile, Outcome.REMOTING_EXCEPTION, 9, mode=SendMode.ASYNC, attempt=a).next
        for a in range(3)
    ]
    assert nexts == [Next.RETRY, Next.RETRY, Next.FAIL]


@pytest.mark.parametrize(("p", "nxt"), [(P47, Next.RETRY), (P49, Next.RETRY), (P5, Next.FAIL)])
def test_5_async_retry_needs_time_left(p: Profile, nxt: Next) -> None:
    effect = attempt_effect(
        p, Outcome.REMOTING_EXCEPTION, 3000, mode=SendMode.ASYNC, remaining_timeout_ms=0
    )
    assert effect.next is nxt


@pytest.mark.parametrize(("p", "available_after_dispatch"), [(P47, True), (P49, True), (P5, False)])
def test_4x_async_dispatch_clears_an_isolation(p: Profile, available_after_dispatch: bool) -> None:
    """``udfs.rocketmq._send``, ASYNC: a 4.x ASYNC dispatch report overwrites the isolation."""
    table = FaultTable(p)
    table.report("a", 500, isolation=True, now_ms=0)
    dispatch = attempt_effect(p, Outcome.SEND_OK, 200, mode=SendMode.ASYNC).reports[0]
    table.report("a", dispatch.latency_ms, dispatch.isolation, now_ms=1000)
    assert table.is_available("a", 1000) is available_after_dispatch
