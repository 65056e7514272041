"""Transactional messages: the half message, its end and the broker's check-back, per profile.

Client (``DefaultMQProducerImpl.sendMessageInTransaction``, @4.7.1:1202-1282, @4.9.7:1222-1302,
@HEAD:1431-1511). Without a listener the call throws ``MQClientException("tranExecutor is
null")``; a non-zero ``DELAY`` is cleared (a half message is never delayed); the message is
validated, marked ``TRAN_MSG=true`` with its ``PGROUP`` and sent SYNC through the normal send path
(queue selection, 3 attempts, ``FaultItem`` updates). A send that throws ends the call: no half
message, no end. After ``SEND_OK`` the local transaction runs (null and a thrown exception give
``UNKNOW``); ``FLUSH_DISK_TIMEOUT``, ``FLUSH_SLAVE_TIMEOUT`` and ``SLAVE_NOT_AVAILABLE`` roll back
without running it (:func:`after_half_send`). The end goes one-way, 3 s, to the master address of
the broker that stored the half message: no retry, no other broker, errors only logged
(@4.7.1:1292-1327). A broker name without an address sends it to a NameServer instead.

Broker (``TransactionalMessageServiceImpl.check``, @4.7.1:126-253, @HEAD:161-354): the check
service wakes every ``transactionCheckInterval`` (``waitForRunning``, first wake one interval
after start, only on a master). Each wake reads the half queue; for each message without an op
(end) it decides one :class:`Pass` (:func:`check_pass`). ``TRANSACTION_CHECK_TIMES`` goes up
and the message is re-appended, born time kept, *before* the check is sent one-way to a producer
of the group, so a check counts even when no producer gets it; at ``transactionCheckMax`` the
next pass discards it to ``TRANS_CHECK_MAX_TIME_TOPIC`` (every profile: since 4.5.2). A
first-phase end marks the offset the send returned: once a check has re-appended a copy, a late
end leaves the copy, which is checked again (:attr:`TransactionConfig.copy_checked_after_end`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from udfs.rocketmq._profiles import Profile
from udfs.rocketmq._send import Outcome

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"


class LocalTransactionState(StrEnum):
    """What a producer's local transaction (or its answer to a check) returned."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"
    """RocketMQ's spelling. Sent as ``TRANSACTION_NOT_TYPE``, which the broker ignores
    (``EndTransactionProcessor`` returns null): the half message waits for a check."""


class Pass(StrEnum):
    """What one wake of the check service does with a waiting half message."""

    NOT_YET = "NOT_YET"
    """Younger than the timeout ("New arrived", the round breaks) or stored after the round
    began ("Fresh stored"): nothing changes."""
    IMMUNE = "IMMUNE"
    """Younger than its ``CHECK_IMMUNITY_TIME_IN_SECONDS``: re-appended without a check, and
    ``TRANSACTION_CHECK_TIMES`` still goes up (the in-memory count is written back)."""
    CHECK = "CHECK"
    DISCARD = "DISCARD"
    """Checked ``transactionCheckMax`` times: to ``TRANS_CHECK_MAX_TIME_TOPIC``, never ended."""
    SKIP = "SKIP"
    """Older than the store's ``fileReservedTime``: dropped like a discard, without a check."""


@dataclass(frozen=True)
class TransactionConfig:
    """A broker's transaction settings (``BrokerConfig``, ``MessageStoreConfig``) and the
    behaviour of its version. Build one with :func:`transaction_config`."""

    timeout_ms: int = 6_000
    """``transactionTimeOut`` (@4.7.1:166, @4.9.7:168, @HEAD:278)."""
    check_max: int = 15
    """``transactionCheckMax`` (@4.7.1:172, @4.9.7:174, @HEAD:284)."""
    check_interval_ms: int = 60_000
    """``transactionCheckInterval``: 60 s in 4.x (@4.7.1:178, @4.9.7:180), 5.0.0 and 5.1.0
    (BrokerConfig@rocketmq-all-5.1.0:266), 30 s since 5.1.1 (@rocketmq-all-5.1.1:263,
    @HEAD:290)."""
    file_reserved_ms: int = 72 * 3_600_000
    """``fileReservedTime`` (72 h) in ms: an older half message is skipped."""
    wait_at_timeout: bool = False
    """develop waits while ``age <= timeout`` (TMSI@HEAD:280,288, apache/rocketmq #9487, after
    5.3.3); every release, 4.x and 5.0.0 to 5.3.3, while ``age < timeout`` (TMSI@4.7.1:207,215,
    TMSI@rocketmq-all-5.3.3:280,288) and checks at equality."""
    rejects_late_end: bool = False
    """5.x since 5.1.1 (``rejectCommitOrRollback``, EndTransactionProcessor@rocketmq-all-5.1.1:
    181, not in 5.1.0): a first-phase end of a message with ``CHECK_IMMUNITY_TIME_IN_SECONDS``
    that comes later than ``max(immunity, timeout)`` after its birth is refused (604); the
    message waits for a check."""
    copy_checked_after_end: bool = True
    """A first-phase end marks the half message's own queue offset; a copy a check re-appended
    before it stays and is checked again (TMSI@4.7.1:165-168, op keys; every profile)."""

    def checks(self) -> int:
        """How many checks a message gets before the discard: ``max(transactionCheckMax, 1)``
        (``needDiscard`` sets the count to 1 on the first pass and discards at
        ``count >= max``)."""
        return max(self.check_max, 1)


DEVELOP = "develop"
"""RocketMQ's develop branch (``@HEAD``), newer than any release: a broker built from it is
named so."""
LAST_RELEASE = (5, 3, 3)
"""The newest release faultline knows the transactions of."""
NEWEST = ".".join(map(str, LAST_RELEASE))
"""The broker release of the ``rocketmq-5`` profile: :data:`LAST_RELEASE`, the one its users run
(the develop branch changed the first check after it, apache/rocketmq #9487)."""
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def broker_release(release: str) -> tuple[int, int, int] | None:
    """A broker release as faultline reads it: ``"4.9.7"`` -> ``(4, 9, 7)``; ``develop`` -> None.
    Raises ``ValueError`` for a name it does not know.

    >>> broker_release("5.1.0"), broker_release("develop")
    ((5, 1, 0), None)
    """
    if release == DEVELOP:
        return None
    match = _RELEASE.fullmatch(release)
    version = (int(match[1]), int(match[2]), int(match[3])) if match else None
    if version is None or not (4, 0, 0) <= version <= LAST_RELEASE:
        last = ".".join(map(str, LAST_RELEASE))
        raise ValueError(
            f"broker release {release!r} is unknown: give 4.x.y, 5.0.0 to {last}, or {DEVELOP}"
        )
    return version


def transaction_config(
    profile: Profile,
    *,
    release: str | None = None,
    timeout_ms: int | None = None,
    check_max: int | None = None,
    check_interval_ms: int | None = None,
    file_reserved_ms: int | None = None,
) -> TransactionConfig:
    """The broker defaults of a release (``release``: ``"5.3.3"``, ``"4.9.7"``, ``develop``; by
    default :data:`NEWEST` for the 5.x profile, and 4.x's for the others), with any of them
    overridden.

    >>> from udfs.rocketmq import PROFILES
    >>> transaction_config(PROFILES["rocketmq-4.7"]).check_interval_ms
    60000
    >>> transaction_config(PROFILES["rocketmq-5"]).check_interval_ms
    30000
    >>> c = transaction_config(PROFILES["rocketmq-5"], release="5.1.0")
    >>> c.check_interval_ms, c.wait_at_timeout, c.rejects_late_end
    (60000, False, False)
    """
    if release is None:
        release = NEWEST if profile.line == "5" else "4.9.7"
    version = broker_release(release)
    newer = version is None or version >= (5, 1, 1)  # #6401: the 30 s interval, late ends refused
    base = TransactionConfig(
        check_interval_ms=30_000 if newer else 60_000,
        wait_at_timeout=version is None,
        rejects_late_end=newer,
    )
    return TransactionConfig(
        timeout_ms=base.timeout_ms if timeout_ms is None else timeout_ms,
        check_max=base.check_max if check_max is None else check_max,
        check_interval_ms=base.check_interval_ms
        if check_interval_ms is None
        else check_interval_ms,
        file_reserved_ms=base.file_reserved_ms if file_reserved_ms is None else file_reserved_ms,
        wait_at_timeout=base.wait_at_timeout,
        rejects_late_end=base.rejects_late_end,
        copy_checked_after_end=base.copy_checked_after_end,
    )


_JAVA_LONG = re.compile(r"[+-]?[0-9]+")


def immunity_ms(value: str | None, timeout_ms: int) -> int | None:
    """How the check service reads a half message's ``CHECK_IMMUNITY_TIME_IN_SECONDS`` (its
    text, None when the message has none): ``getImmunityTime`` (TMSI@4.7.1:255-265,
    TMSI@rocketmq-all-5.3.3:356-366, the same at HEAD) takes ``getLong`` of it, which is -1 for a
    text ``Long.parseLong`` refuses; -1 stands for the ``transactionTimeOut``, any other value is
    seconds.

    >>> immunity_ms("60", 6_000), immunity_ms("-1", 6_000), immunity_ms("1 min", 6_000)
    (60000, 6000, 6000)
    >>> immunity_ms(None, 6_000) is None
    True

    An empty text is there too: read as -1 by the check service, it gives the timeout. 5.x's
    ``rejectCommitOrRollback`` skips an empty one (``StringUtils.isNotEmpty``), where faultline
    takes the timeout too: a first-phase end of such a message later than the timeout is
    refused here and not by the broker.
    """
    if value is None:
        return None
    seconds = int(value) if _JAVA_LONG.fullmatch(value) else -1
    if not -(2**63) <= seconds < 2**63:  # Long.parseLong: out of range
        seconds = -1
    return timeout_ms if seconds == -1 else seconds * 1000


def after_half_send(outcome: Outcome) -> LocalTransactionState | None:
    """What ``sendMessageInTransaction`` does after the half message's send returned
    ``outcome``: None after ``SEND_OK`` (the local transaction runs and decides);
    ``ROLLBACK_MESSAGE`` for a stored but unflushed or unreplicated message, without running it.
    An exception (any other outcome) ends the call before: raises ``ValueError``.

    >>> after_half_send(Outcome.SEND_OK) is None
    True
    >>> after_half_send(Outcome.FLUSH_SLAVE_TIMEOUT)
    <LocalTransactionState.ROLLBACK_MESSAGE: 'ROLLBACK_MESSAGE'>
    """
    if outcome is Outcome.SEND_OK:
        return None
    if outcome.returned:
        return LocalTransactionState.ROLLBACK_MESSAGE
    raise ValueError(f"{outcome} stores no half message: sendMessageInTransaction throws")


def next_wake(config: TransactionConfig, after: int) -> int:
    """The check service's first wake strictly after ``after`` (ms). Wakes are taken on the
    interval's grid from the epoch: a broker's real wakes are shifted by when it started, which
    the send results do not tell (a round's own duration, ~0 for a small backlog, is left out).

    >>> next_wake(TransactionConfig(), 120_000), next_wake(TransactionConfig(), 120_001)
    (180000, 180000)
    """
    return (after // config.check_interval_ms + 1) * config.check_interval_ms


def check_pass(
    config: TransactionConfig,
    wake: int,
    born: int,
    stored: int,
    checks: int,
    immunity_ms: int | None = None,
) -> Pass:
    """What the wake at ``wake`` does with a half message born at ``born``, stored at
    ``stored``, that carries ``TRANSACTION_CHECK_TIMES = checks`` (0: not yet set) and no end.
    ``immunity_ms``: its ``CHECK_IMMUNITY_TIME_IN_SECONDS`` in ms, if it has one. A pass other
    than :attr:`Pass.NOT_YET`, :attr:`Pass.DISCARD` and :attr:`Pass.SKIP` adds 1 to ``checks``.

    >>> c = TransactionConfig()                   # 4.x: timeout 6 s
    >>> check_pass(c, 60_000, 54_000, 54_010, 0), check_pass(c, 60_000, 54_001, 54_010, 0)
    (<Pass.CHECK: 'CHECK'>, <Pass.NOT_YET: 'NOT_YET'>)
    >>> check_pass(c, 120_000, 54_000, 54_010, 14), check_pass(c, 120_000, 54_000, 54_010, 15)
    (<Pass.CHECK: 'CHECK'>, <Pass.DISCARD: 'DISCARD'>)
    """
    if checks >= config.checks():  # needDiscard comes first (TMSI@4.7.1:73-86, 190)
        return Pass.DISCARD
    if wake - born > config.file_reserved_ms:  # needSkip: strict, on the born time
        return Pass.SKIP
    if stored >= wake:  # "Fresh stored": stored after the round began
        return Pass.NOT_YET
    age = wake - born
    if immunity_ms is not None:
        if age < immunity_ms or (config.wait_at_timeout and age == immunity_ms):
            return Pass.IMMUNE
        return Pass.CHECK
    if 0 <= age < config.timeout_ms or (config.wait_at_timeout and age == config.timeout_ms):
        return Pass.NOT_YET
    return Pass.CHECK  # a message born after the wake (age <= -1) is checked at once


def next_check(
    config: TransactionConfig,
    after: int,
    born: int,
    stored: int,
    checks: int,
    immunity_ms: int | None = None,
) -> tuple[int, Pass]:
    """The first wake after ``after`` that checks, discards or skips the message (wakes that
    only wait, or re-append it under its immunity, pass by), and what it does then: what to
    tell a reader waiting for the broker. The message is as in :func:`check_pass`.

    >>> next_check(TransactionConfig(), 54_010, 54_001, 54_010, 0)
    (120000, <Pass.CHECK: 'CHECK'>)
    >>> next_check(TransactionConfig(), 54_010, 54_000, 54_010, 15)
    (60000, <Pass.DISCARD: 'DISCARD'>)
    """
    wake = next_wake(config, after)
    while True:
        done = check_pass(config, wake, born, stored, checks, immunity_ms)
        if done not in (Pass.NOT_YET, Pass.IMMUNE):
            return wake, done
        checks += done is Pass.IMMUNE
        wake += config.check_interval_ms


def end_rejected(config: TransactionConfig, at: int, born: int, immunity_ms: int | None) -> bool:
    """Whether the broker refuses a first-phase end sent at ``at`` (5.x
    ``rejectCommitOrRollback``, EndTransactionProcessor@HEAD:199-213: code 604, the message
    waits for a check). Only a message with ``CHECK_IMMUNITY_TIME_IN_SECONDS``, later than
    ``max(immunity, timeout)`` after its birth.

    >>> five = TransactionConfig(rejects_late_end=True)
    >>> end_rejected(five, 70_001, 10_000, 60_000), end_rejected(five, 70_000, 10_000, 60_000)
    (True, False)
    """
    if not config.rejects_late_end or immunity_ms is None:
        return False
    return at - born > max(immunity_ms, config.timeout_ms)
