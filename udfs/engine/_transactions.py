"""Transactional messages: half messages waiting for their end, the broker's check-backs on the
cluster's clock, and ends sent to a broker that cannot take them (:mod:`udfs.rocketmq` has the
rules).

A ``send_result`` with ``transaction: PREPARED`` that stored its message (``SEND_OK``, or a
status that rolls back at once) leaves a half message on its broker. It waits in the state until
a ``transaction_end`` commits or rolls it back, a check's answer does, or the broker discards it
(checked ``transactionCheckMax`` times) or skips it (older than ``fileReservedTime``): a waiting
half message is one small entry, and each ends in one of those ways, so the state stays bounded.
The check service's wakes fire when the clock reaches them, before any event at their time, like
an isolation's end.

An end is sent one-way to the broker that stored the half message, so it cannot be routed
around an isolation. One sent while the broker is out of the topic's route, or while the cluster
scope isolates it after a send that got no answer from it (``REMOTING_EXCEPTION``,
``CLIENT_EXCEPTION``: not a slow broker, which still takes the end), is likely lost
(``END_TO_UNAVAILABLE_BROKER``) and the message waits for a check. The first check the producer
reports confirms it; if none comes in :data:`UNCONFIRMED` checks' time, the end reached the broker
after all and settles the message. A ``transaction_check`` reports a check the producer got and
its answer; its ``check_times`` (the message's ``TRANSACTION_CHECK_TIMES``) corrects faultline's
count. A broker the NameServer dropped (no heartbeat for ``heartbeat_timeout``) is taken for
down: its check service does not wake, so its messages are neither checked nor counted until its
next heartbeat. Before the drop (up to the heartbeat timeout and a scan after its last
heartbeat) faultline still counts the checks a stopped broker does not make.
"""

from __future__ import annotations

import heapq
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from udfs._frames import distinct, equal, isin, objects, tuples
from udfs.engine._nameserver import RouteTimeline
from udfs.engine._segment import Segment
from udfs.engine._state import Half, State
from udfs.engine._tables import Change
from udfs.rocketmq import (
    CHECK_MAX_TIME_TOPIC,
    LocalTransactionState,
    Outcome,
    Pass,
    Profile,
    TransactionConfig,
    check_pass,
    end_rejected,
    immunity_ms,
    next_check,
    next_wake,
)
from udfs.schedule import DEFAULT_PRODUCER_GROUP
from udfs.vocabulary import Decision, EventKind, TableName, TransactionState

PREPARED, CHECK = TransactionState.PREPARED, TransactionState.CHECK
COMMIT, ROLLBACK, UNKNOWN = (
    TransactionState.COMMIT,
    TransactionState.ROLLBACK,
    TransactionState.UNKNOWN,
)
DISCARDED, SKIPPED = TransactionState.DISCARDED, TransactionState.SKIPPED
END_TO_UNAVAILABLE_BROKER = TransactionState.END_TO_UNAVAILABLE_BROKER
END_REJECTED = TransactionState.END_REJECTED
NOTIFIED = frozenset({END_TO_UNAVAILABLE_BROKER, END_REJECTED, DISCARDED, SKIPPED})
"""The states a producer must act on: they go to the decision topic (and so does the state that
later settles such a transaction)."""
_ANSWER = {
    LocalTransactionState.COMMIT_MESSAGE: COMMIT,
    LocalTransactionState.ROLLBACK_MESSAGE: ROLLBACK,
    LocalTransactionState.UNKNOW: UNKNOWN,
}
_STORED = frozenset(o.value for o in Outcome if o.returned)
"""The outcomes after which the broker holds the half message."""
NO_ANSWER = frozenset({Outcome.REMOTING_EXCEPTION.value, Outcome.CLIENT_EXCEPTION.value})
"""A send that ended so got nothing from the broker: the broker may be unreachable."""
UNCONFIRMED = 2
"""Predicted checks after a likely lost end without a reported check: then it was not lost."""


def prepared(sends: pd.DataFrame) -> np.ndarray:
    """Which sends are of a transactional half message (stored or not)."""
    return equal(sends["transaction"], "PREPARED")


def transact(
    seg: Segment, isolated: dict[str, int], changes: list[Change], routes: RouteTimeline
) -> None:
    """The segment's transaction rows, in event-time order, and the wakes up to its clock.
    ``isolated`` and ``changes`` are the cluster scope's isolations at the segment's start and
    its availability changes during it (empty without the cluster scope)."""
    state, events, sends, clock_end = seg.state, seg.events, seg.sends, seg.clock_end
    store = state.transactions
    is_end = isin(events["kind"], (EventKind.TRANSACTION_END, EventKind.TRANSACTION_CHECK))
    is_half = prepared(sends) & isin(sends["outcome"], _STORED)
    due = state.transactions_due
    if not is_end.any() and not is_half.any() and (due is None or due > clock_end):
        return
    reach = _Reach(isolated, changes, routes, state.answered, sends)
    run = _Run(seg, reach)
    items = [(int(t), str(e), 0, r) for t, e, r in _rows(sends, np.flatnonzero(is_half))]
    items += [(int(t), str(e), 1, r) for t, e, r in _rows(events, np.flatnonzero(is_end))]
    items.sort(key=lambda x: (x[0], x[2], x[1]))  # at one instant, a send before any end
    for t, eid, what, row in items:
        run.wakes(t)
        run.apply_end(t, eid, row) if what else run.prepare(t, eid, row)
    run.wakes(clock_end)
    run.save()
    state.transactions_due = min((h.wake for h in store.values()), default=None)


class _Reach:
    """Whether an end sent to a broker at an instant can reach it: the cluster scope's
    isolations (at the segment's start, and its changes), the routes, and whether the last send
    to the broker before then got an answer from it (``answered``, each broker's last outcome
    before the segment, and the segment's sends)."""

    def __init__(
        self,
        isolated: dict[str, int],
        changes: list[Change],
        routes: RouteTimeline,
        answered: dict[str, str],
        sends: pd.DataFrame,
    ) -> None:
        self.isolated, self.routes, self.last, self.sends = isolated, routes, answered, sends
        self.changes = sorted(changes, key=lambda c: (c.time, c.order, c.event_id or ""))
        self.applied = 0
        self._by: dict[Any, tuple[np.ndarray, np.ndarray]] | None = None
        self.times = sends["event_time"].to_numpy(np.int64)
        self.ids = objects(sends["event_id"])
        self.outcomes = objects(sends["outcome"])

    def why_not(self, broker: str, topic: str, t: int, eid: str) -> str | None:
        """Why an end sent to ``broker`` at ``(t, eid)`` likely does not reach it, or None."""
        while self.applied < len(self.changes):
            c = self.changes[self.applied]
            if (c.time, c.order, c.event_id or "") >= (t, 1, eid):
                break
            if c.decision == Decision.RESTORE or c.until is None:
                self.isolated.pop(c.broker, None)
            else:
                self.isolated[c.broker] = c.until
            self.applied += 1
        until = self.isolated.get(broker)
        last = self._outcome(broker, t, eid)
        if until is not None and until > t and last in NO_ANSWER:
            return f"which the cluster isolates until {_iso(until)} after a {last}"
        route = self.routes.at(t, eid).get(topic)
        if route is not None and all(b != broker for b, _, _ in route):
            return f"which is not in {topic}'s route (no address: the end goes to a NameServer)"
        return None

    def _outcome(self, broker: str, t: int, eid: str) -> str | None:
        if self._by is None:  # each broker's sends, in event order
            groups = self.sends.groupby("broker_name", sort=False).indices
            self._by = {b: (self.times[rows], np.asarray(rows)) for b, rows in groups.items()}
        times, rows = self._by.get(broker, (self.times[:0], self.times[:0]))
        i = int(np.searchsorted(times, t, side="left"))
        while i < len(rows) and times[i] == t and self.ids[rows[i]] < eid:
            i += 1  # a send at the same instant, before it in event order
        return str(self.outcomes[rows[i - 1]]) if i else self.last.get(broker)


def remember_answers(state: State, sends: pd.DataFrame) -> None:
    """Each broker's last send outcome, for :class:`_Answers` in later segments (sends are in
    event order)."""
    # each broker's last outcome, brokers new to the state in the order the sends meet them
    first, last = distinct(sends["broker_name"]), distinct(sends["broker_name"], keep="last")
    brokers = objects(sends["broker_name"])
    outcomes = dict(
        zip(brokers[last].tolist(), objects(sends["outcome"])[last].tolist(), strict=True)
    )
    state.answered.update((b, outcomes[b]) for b in brokers[first].tolist())


_FIELDS = ("event_time", "event_id", "kind", "broker_name", "topic", "producer_id",
           "producer_group", "client_profile", "message_id", "transaction_id", "outcome",
           "latency_ms", "check_immunity_s", "check_immunity", "local_state",
           "check_times")  # fmt: skip
"""The event fields this stage reads."""


def _rows(frame: pd.DataFrame, at: np.ndarray) -> list[tuple[Any, Any, Any]]:
    """(event time, event id, the fields read) of the rows at the positions ``at``."""
    return [(r.event_time, r.event_id, r) for r in tuples(frame, _FIELDS, at)]


class _Run:
    """One segment's transactions: the half messages touched, and the wakes due, in a heap."""

    def __init__(self, seg: Segment, reach: _Reach) -> None:
        self.cluster, self.config, self.out = seg.cluster, seg.config, seg.out
        self.store, self.reach = seg.state.transactions, reach
        self.configs: dict[str, TransactionConfig] = {}
        self.heap = [(h.wake, h.stored, tx) for tx, h in self.store.items()]
        heapq.heapify(self.heap)
        self.stopped: dict[str, int] = {}
        """Per broker, the wake whose scan of its half queue stopped at a message that waits."""
        self.rows: list[dict[str, Any]] = []

    def half(self, tx: str) -> Half | None:
        return self.store.get(tx)

    def settings(self, h: Half) -> TransactionConfig:
        return self.settings_of(self.config.profile(h.profile))

    def settings_of(self, profile: Profile) -> TransactionConfig:
        if profile.name not in self.configs:
            self.configs[profile.name] = self.config.transaction_config(profile)
        return self.configs[profile.name]

    def save(self) -> None:
        self.out.rows(TableName.TRANSACTIONS, self.rows)

    def wakes(self, until: int) -> None:
        """Every wake up to ``until`` (inclusive: a wake comes before the events at its time).

        A broker's wake scans its half queue in order (TMSI.check's ``while (true)``,
        @4.7.1:161-239, @rocketmq-all-5.3.3:201-331, the same at HEAD) and stops the round at the
        first message that must wait ("New arrived": younger than the timeout, without an
        immunity), so every message behind it waits too, however old. The queue's order is the
        order of the messages' store times, a check's or an immunity's copy taking the time of
        the wake that re-appended it: the heap's (wake, stored) order, per broker."""
        while self.heap and self.heap[0][0] <= until:
            wake, _, tx = heapq.heappop(self.heap)
            h = self.half(tx)
            if h is None or h.wake != wake:
                continue  # ended, or its wake moved
            c = self.settings(h)
            if self.reach.routes.dropped(h.broker, wake):  # down: its check service is too
                h.wake = wake + c.check_interval_ms
                heapq.heappush(self.heap, (h.wake, h.stored, tx))
                continue
            if h.lost is not None and h.doubt >= UNCONFIRMED:
                self.row(
                    tx, h, h.lost, wake, None,
                    f"no check reported after {h.doubt} predicted: the {h.lost} sent while "
                    f"{h.broker} seemed unavailable reached it after all",
                    done=True,
                )  # fmt: skip
                self.drop(tx)
                continue
            if self.stopped.get(h.broker) == wake:  # behind a message that waits
                done = Pass.NOT_YET
            else:
                done = check_pass(c, wake, h.born, h.stored, h.checks, h.immunity_ms)
                if done is Pass.NOT_YET:
                    self.stopped[h.broker] = wake
            if done in (Pass.DISCARD, Pass.SKIP):
                why = (
                    f"checked {h.checks} times (transactionCheckMax {c.check_max}): discarded to "
                    f"{CHECK_MAX_TIME_TOPIC}, never committed"
                    if done is Pass.DISCARD
                    else f"older than the store's fileReservedTime ({c.file_reserved_ms} ms): "
                    "skipped without a check, never committed"
                )
                self.row(tx, h, DISCARDED if done is Pass.DISCARD else SKIPPED, wake, None, why)
                self.drop(tx)
                continue
            if done is not Pass.NOT_YET:  # re-appended: the copy is stored at the wake
                h.checks += 1
                h.stored = wake
            h.wake = wake + c.check_interval_ms
            heapq.heappush(self.heap, (h.wake, h.stored, tx))
            if done is Pass.CHECK:
                h.copied = True
                h.doubt += h.lost is not None
                self.row(
                    tx, h, CHECK, wake, None,
                    f"no end {wake - h.born} ms after its birth (transactionTimeOut "
                    f"{c.timeout_ms} ms): check {h.checks} of {c.checks()}",
                )  # fmt: skip

    def prepare(self, t: int, eid: str, r: Any) -> None:
        tx = _text(r.transaction_id) or str(r.message_id)
        profile = self.config.broker_profile(r.client_profile)
        c = self.settings_of(profile)
        immunity = immunity_ms(_immunity_text(r), c.timeout_ms)
        h = Half(
            str(r.broker_name),
            str(r.topic),
            _text(r.producer_group) or DEFAULT_PRODUCER_GROUP,
            str(r.producer_id),
            _text(r.message_id) or tx,
            t - int(r.latency_ms),
            t,
            profile.name,
            immunity,
        )
        h.wake = next_wake(c, t)
        self.store[tx] = h
        heapq.heappush(self.heap, (h.wake, h.stored, tx))
        why = f"half message stored on {h.broker}: waits for its end"
        if r.outcome != Outcome.SEND_OK:
            why += (
                f"; after {r.outcome} the producer rolls back without running its local transaction"
            )
        self.row(tx, h, PREPARED, t, eid, why)

    def apply_end(self, t: int, eid: str, r: Any) -> None:
        tx = str(r.transaction_id)
        answer = _ANSWER[LocalTransactionState(r.local_state)]
        h = self.half(tx)
        broker = str(r.broker_name)
        if r.kind == EventKind.TRANSACTION_CHECK:
            self.answer(tx, h, answer, broker, t, eid, r)
            return
        if h is None:
            h = self.orphan(r, broker, t)
            self.row(tx, h, answer, t, eid, "end of a half message faultline does not hold",
                     done=True)  # fmt: skip
            return
        away = self.reach.why_not(broker, h.topic, t, eid)
        c = self.settings(h)
        if away is not None and answer != UNKNOWN:
            h.lost, h.doubt = answer, 0
            self.row(
                tx, h, END_TO_UNAVAILABLE_BROKER, t, eid,
                f"{answer} sent one-way to {broker}, {away}: likely lost; the broker checks back",
            )  # fmt: skip
        elif answer != UNKNOWN and end_rejected(c, t, h.born, h.immunity_ms):
            self.row(
                tx, h, END_REJECTED, t, eid,
                f"{answer} {t - h.born} ms after its birth, later than its check immunity: "
                "refused (604, rejectCommitOrRollback); the broker checks back",
            )  # fmt: skip
        elif answer == UNKNOWN:
            self.row(
                tx, h, UNKNOWN, t, eid, "UNKNOW: the broker ignores it (NOT_TYPE) and checks back"
            )
        elif h.copied and c.copy_checked_after_end:
            h.ended = answer
            self.row(
                tx, h, answer, t, eid,
                f"{answer} reaches the half message, not the copy check {h.checks} re-appended: "
                "the copy is checked again (answering COMMIT stores the message twice)",
            )  # fmt: skip
        else:
            self.row(tx, h, answer, t, eid, f"{answer} by the producer's end", done=True)
            self.drop(tx)

    def answer(
        self, tx: str, h: Half | None, answer: str, broker: str, t: int, eid: str, r: Any
    ) -> None:
        """A producer's answer to a check: one-way to the broker that asked, whose address it
        has from the request, so it is not routed; COMMIT and ROLLBACK end the message."""
        if h is None:
            h = self.orphan(r, broker, t)
            h.checks = 0 if pd.isna(r.check_times) else int(r.check_times)
            why = "answer to a check of a half message faultline does not hold (stored "
            self.row(tx, h, answer, t, eid, why + "before its window, or ended)", done=True)
            return
        if not pd.isna(r.check_times):
            h.checks = int(r.check_times)
        h.lost = None  # a check came: an end sent while the broker was unavailable was lost
        why = f"answer to check {h.checks} from {broker}"
        if answer == UNKNOWN:
            self.row(tx, h, UNKNOWN, t, eid, why + ": UNKNOW, checked again")
            return
        if h.ended is not None and answer == COMMIT:
            stored = "stored twice" if h.ended == COMMIT else "stored after all"
            why += f" (its first-phase {h.ended} reached the original already: {stored})"
        self.row(tx, h, answer, t, eid, why, done=True)
        self.drop(tx)

    def orphan(self, r: Any, broker: str, t: int) -> Half:
        profile = self.config.broker_profile(r.client_profile).name
        return Half(broker, _text(r.topic), _text(r.producer_group), _text(r.producer_id),
                    _text(r.message_id), t, t, profile, None)  # fmt: skip

    def drop(self, tx: str) -> None:
        self.store.pop(tx, None)

    def row(
        self,
        tx: str,
        h: Half,
        what: str,
        at: int,
        eid: str | None,
        why: str,
        done: bool = False,
    ) -> None:
        """One ``transactions`` row; the predicted next check unless the message is done."""
        settled = done or what in (DISCARDED, SKIPPED)
        notify = what in NOTIFIED or (settled and h.notified)
        h.notified = h.notified or notify
        upcoming = None
        if not settled:
            c = self.settings(h)
            upcoming = next_check(c, at, h.born, h.stored, h.checks, h.immunity_ms)[0]
        self.rows.append(
            {
                "cluster": self.cluster,
                "transaction_id": tx,
                "message_id": h.message_id,
                "producer_id": h.producer,
                "producer_group": h.group,
                "topic": h.topic,
                "broker_name": h.broker,
                "state": what,
                "check_times": h.checks,
                "effective_at": at,
                "born_at": h.born,
                "next_check_at": upcoming,
                "cause_event_id": eid,
                "reason": why,
                "profile": h.profile,
                "notify": notify,
            }
        )


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _immunity_text(r: Any) -> str | None:
    """A half message's ``CHECK_IMMUNITY_TIME_IN_SECONDS`` as its text: the event's
    ``check_immunity`` as sent, or its ``check_immunity_s``; None when it has neither."""
    if isinstance(r.check_immunity, str):
        return r.check_immunity
    return None if pd.isna(r.check_immunity_s) else str(int(r.check_immunity_s))


def _text(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)
