"""The send path: what each attempt's outcome reports to the fault table, and whether
``sendDefaultImpl`` (SYNC, ONEWAY) or the async callback (ASYNC) tries again.

Sources: ``impl/producer/DefaultMQProducerImpl.sendDefaultImpl`` (@4.7.1:563-690,
@4.9.7:555-675, @HEAD:756-900) and the callbacks of ``impl/MQClientAPIImpl`` (``sendMessageAsync``,
``onExceptionImpl``); defaults from ``producer/DefaultMQProducer`` (``sendMsgTimeout`` 3000 ms,
``retryTimesWhenSendFailed`` and ``retryTimesWhenSendAsyncFailed`` 2,
``retryAnotherBrokerWhenNotStoreOK`` false).

**Attempts.** SYNC makes up to 1 + 2 attempts in the ``sendDefaultImpl`` loop; ASYNC makes one
there and its callback retries up to 2 more; ONEWAY makes one. A send to an explicit queue or
through a ``MessageQueueSelector`` (``sendSelectImpl``) bypasses the fault strategy: one attempt,
no report. ``sendMsgTimeout`` is a *total* budget: before each attempt the loop stops with a
call timeout if the time since the first attempt exceeds it (``CALL_TIMEOUT``), and each attempt
gets what is left (5.x caps it at ``sendMsgMaxTimeoutPerRequest`` when set). A retry picks its
queue avoiding the broker that just failed, in 5.x with ``resetIndex``
(:mod:`udfs.rocketmq._route`).

**Outcome table** (SYNC loop): the ``isolation`` argument of ``updateFaultItem(broker,
elapsed, isolation[, reachable])`` in 4.7.1 / 4.9.7 / 5.x (with 5.x's ``reachable``), then what
the loop does next.

* returned (``SEND_OK`` or one of the three non-OK store statuses): false / false / false,
  reachable; return [1];
* ``REMOTING_EXCEPTION``: true / true / true, reachable = ``not startDetectorEnable``; retry;
* ``CLIENT_EXCEPTION`` (e.g. no broker address): true / true / false, reachable; retry;
* ``BROKER_EXCEPTION`` (an error response code): true / true / true, unreachable; retry [2];
* ``INTERRUPTED``: false / false / false, reachable; fail.

[1] A non-OK store status is retried only with ``retryAnotherBrokerWhenNotStoreOK``.
[2] Only for a code of the profile's retry set; otherwise the earlier non-OK result is returned
if there is one, else the send fails. When the attempts run out, the last result is returned if
any, else ``MQClientException("Send [N] times, still failed")`` with the response code of the
last exception (the broker's, or 10001 connect, 10002 timeout, 10003 client).

**ASYNC.** ``sendDefaultImpl`` reports the dispatch itself, with a near-zero latency and no
isolation; the callback then reports the result: a success without isolation, a broker error
response with isolation and *no* retry, no response (send failure, timeout) with isolation and a
retry while attempts remain (5.x: also while budget remains). A retry re-sends the same request
to the broker the strategy picks. *Derived*: in 4.x the dispatch report overwrites the item, so
it clears any running isolation of the chosen broker at once; 5.x's extend-only rule does not.

**Transactional** half messages go SYNC through this path; ``sendMessageInTransaction`` clears a
non-zero ``DELAY`` first (@4.7.1:1210, @4.9.7:1230, @HEAD:1439); see
:mod:`udfs.rocketmq._transaction`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from udfs.rocketmq._profiles import Profile

SEND_MSG_TIMEOUT_MS = 3000
RETRY_TIMES_WHEN_SEND_FAILED = 2
RETRY_TIMES_WHEN_SEND_ASYNC_FAILED = 2

# ClientErrorCode values MQClientException carries after the last failed attempt.
CONNECT_BROKER_EXCEPTION = 10001
ACCESS_BROKER_TIMEOUT = 10002
BROKER_NOT_EXIST_EXCEPTION = 10003


class Outcome(StrEnum):
    """How one send attempt ended, as producers report it."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    REMOTING_EXCEPTION = "REMOTING_EXCEPTION"
    CLIENT_EXCEPTION = "CLIENT_EXCEPTION"
    BROKER_EXCEPTION = "BROKER_EXCEPTION"
    INTERRUPTED = "INTERRUPTED"
    CALL_TIMEOUT = "CALL_TIMEOUT"
    """The total ``sendMsgTimeout`` budget ran out before this attempt was sent."""

    @property
    def returned(self) -> bool:
        """The broker answered with a status: the message is stored (maybe not flushed)."""
        return self in _RETURNED


_RETURNED = frozenset(
    {
        Outcome.SEND_OK,
        Outcome.FLUSH_DISK_TIMEOUT,
        Outcome.FLUSH_SLAVE_TIMEOUT,
        Outcome.SLAVE_NOT_AVAILABLE,
    }
)


class SendMode(StrEnum):
    SYNC = "SYNC"
    ASYNC = "ASYNC"
    ONEWAY = "ONEWAY"


class Next(StrEnum):
    """What the producer does after an attempt."""

    RETURN = "RETURN"
    """The caller gets a ``SendResult`` (SEND_OK or a non-OK store status)."""
    RETRY = "RETRY"
    """Another attempt follows, to the queue :func:`select_queue` picks."""
    FAIL = "FAIL"
    """The caller gets an exception: the message was not sent."""


@dataclass(frozen=True)
class FaultReport:
    """One ``updateFaultItem(broker, latency, isolation[, reachable])`` call.

    ``phase`` is ``dispatch`` for the report ``sendDefaultImpl`` makes when an ASYNC send has
    only been handed to the network (latency taken as 0, at ``event_time - latency``), and
    ``result`` for the report of the attempt's outcome.
    """

    latency_ms: int
    isolation: bool
    reachable: bool
    phase: Literal["dispatch", "result"] = "result"


@dataclass(frozen=True)
class AttemptEffect:
    """What one attempt causes: the fault reports in order, and what happens next."""

    reports: tuple[FaultReport, ...]
    next: Next
    error_code: int | None = None
    """With ``FAIL``: the ``responseCode`` of the exception the caller gets."""


def max_attempts(
    mode: SendMode,
    retry_times_when_send_failed: int = RETRY_TIMES_WHEN_SEND_FAILED,
    retry_times_when_send_async_failed: int = RETRY_TIMES_WHEN_SEND_ASYNC_FAILED,
) -> int:
    """Attempts in total: SYNC ``1 + retryTimesWhenSendFailed``, ASYNC
    ``1 + retryTimesWhenSendAsyncFailed`` (the callback's retries), ONEWAY 1.

    >>> max_attempts(SendMode.SYNC), max_attempts(SendMode.ONEWAY)
    (3, 1)
    """
    if mode is SendMode.SYNC:
        return 1 + retry_times_when_send_failed
    if mode is SendMode.ASYNC:
        return 1 + retry_times_when_send_async_failed
    return 1


def attempt_timeout(
    profile: Profile,
    timeout_ms: int,
    cost_ms: int,
    more_attempts: bool,
    max_timeout_per_request_ms: int = -1,
) -> int | None:
    """The time an attempt may take, or None when the loop stops with ``callTimeout``
    (``timeout < costTime``, strict; ``costTime`` is counted from the first attempt).

    5.x caps the remaining budget at ``sendMsgMaxTimeoutPerRequest`` when that is above -1 and
    more attempts remain.

    >>> from udfs.rocketmq import PROFILES
    >>> p = PROFILES["rocketmq-5"]
    >>> attempt_timeout(p, 3000, 3000, True), attempt_timeout(p, 3000, 3001, True)
    (0, None)
    >>> attempt_timeout(p, 3000, 500, True, max_timeout_per_request_ms=1000)
    1000
    """
    if timeout_ms < cost_ms:
        return None
    remaining = timeout_ms - cost_ms
    if profile.line == "5" and max_timeout_per_request_ms > -1 and more_attempts:
        return min(remaining, max_timeout_per_request_ms)
    return remaining


def attempt_effect(
    profile: Profile,
    outcome: Outcome,
    latency_ms: int,
    *,
    mode: SendMode = SendMode.SYNC,
    attempt: int = 0,
    attempts_total: int | None = None,
    response_code: int | None = None,
    remaining_timeout_ms: int | None = None,
    start_detector_enable: bool = False,
    retry_another_broker_when_not_store_ok: bool = False,
    earlier_result: bool = False,
) -> AttemptEffect:
    """The outcome table of the module docstring for one attempt (``attempt`` 0 is the first).

    ``attempts_total`` defaults to :func:`max_attempts` of ``mode``; ``remaining_timeout_ms`` is the
    budget left after this attempt (5.x async retries need it above 0; None: not checked);
    ``earlier_result`` says an earlier attempt returned a non-OK status (a non-retryable broker
    error then returns that result instead of throwing).

    >>> from udfs.rocketmq import PROFILES
    >>> p = PROFILES["rocketmq-4.9"]
    >>> e = attempt_effect(p, Outcome.REMOTING_EXCEPTION, 120)
    >>> e.reports[0].isolation, e.next
    (True, <Next.RETRY: 'RETRY'>)
    >>> attempt_effect(p, Outcome.BROKER_EXCEPTION, 5, response_code=2).next  # SYSTEM_BUSY
    <Next.FAIL: 'FAIL'>
    >>> attempt_effect(PROFILES["rocketmq-5"], Outcome.BROKER_EXCEPTION, 5, response_code=2).next
    <Next.RETRY: 'RETRY'>
    """
    total = attempts_total if attempts_total is not None else max_attempts(mode)
    has_more = attempt + 1 < total
    five = profile.line == "5"

    if outcome is Outcome.CALL_TIMEOUT:
        # The loop breaks before sending: no fault update, RemotingTooMuchRequestException
        # "sendDefaultImpl call timeout" unless an earlier attempt returned a result.
        return AttemptEffect((), Next.RETURN if earlier_result else Next.FAIL, None)

    if mode is SendMode.ASYNC:
        return _async_effect(
            profile, outcome, latency_ms, has_more, response_code, remaining_timeout_ms
        )

    if outcome.returned:
        report = FaultReport(latency_ms, False, True)
        retry = (
            mode is SendMode.SYNC
            and outcome is not Outcome.SEND_OK
            and retry_another_broker_when_not_store_ok
            and has_more
        )
        return AttemptEffect((report,), Next.RETRY if retry else Next.RETURN)

    if outcome is Outcome.INTERRUPTED:
        return AttemptEffect((FaultReport(latency_ms, False, True),), Next.FAIL, None)

    if outcome is Outcome.REMOTING_EXCEPTION:
        report = FaultReport(latency_ms, True, not start_detector_enable if five else True)
        code = ACCESS_BROKER_TIMEOUT
    elif outcome is Outcome.CLIENT_EXCEPTION:
        report = FaultReport(latency_ms, not five, True)
        code = BROKER_NOT_EXIST_EXCEPTION
    else:  # BROKER_EXCEPTION
        report = FaultReport(latency_ms, True, not five)
        code = response_code if response_code is not None else -1
        if response_code not in profile.retry_response_codes:
            return AttemptEffect((report,), Next.RETURN if earlier_result else Next.FAIL, code)
    if has_more:
        return AttemptEffect((report,), Next.RETRY)
    return AttemptEffect((report,), Next.RETURN if earlier_result else Next.FAIL, code)


def _async_effect(
    profile: Profile,
    outcome: Outcome,
    latency_ms: int,
    has_more: bool,
    response_code: int | None,
    remaining_timeout_ms: int | None,
) -> AttemptEffect:
    """ASYNC: ``sendDefaultImpl`` reports the dispatch itself (about 0 ms, no isolation), then
    ``MQClientAPIImpl``'s callback reports the result and decides the retry."""
    five = profile.line == "5"
    dispatch = FaultReport(0, False, True, "dispatch")
    if outcome.returned:
        return AttemptEffect((dispatch, FaultReport(latency_ms, False, True)), Next.RETURN)
    if outcome is Outcome.INTERRUPTED:
        return AttemptEffect((FaultReport(latency_ms, False, True),), Next.FAIL)
    if outcome is Outcome.CLIENT_EXCEPTION:
        # Thrown before dispatch (e.g. no broker address): sendDefaultImpl's own catch, and
        # ASYNC's timesTotal of 1 there ends the send.
        report = FaultReport(latency_ms, not five, True)
        return AttemptEffect((report,), Next.FAIL, BROKER_NOT_EXIST_EXCEPTION)
    if outcome is Outcome.BROKER_EXCEPTION:
        # An error response: isolation (reachable stays true in 5.x), never retried.
        report = FaultReport(latency_ms, True, True)
        code = response_code if response_code is not None else -1
        return AttemptEffect((dispatch, report), Next.FAIL, code)
    # No response: send failed, timed out, unknown cause.
    report = FaultReport(latency_ms, True, True)
    retry = has_more and (not five or remaining_timeout_ms is None or remaining_timeout_ms > 0)
    return AttemptEffect(
        (dispatch, report),
        Next.RETRY if retry else Next.FAIL,
        None if retry else ACCESS_BROKER_TIMEOUT,
    )
