"""faultline's own rules over the cluster scope's decisions, beyond RocketMQ's strategy (each off
by default, each set in :class:`~udfs.engine._config.Policies`):

- **isolation cap**: at most ``isolation_cap`` of a topic's writable brokers isolated at once, as
  Envoy's ``max_ejection_percent``. While more are sick the cluster is in panic: the brokers
  isolated last stay in the route (``PANIC``) until there is room again (``HOLD``), those only
  a latency outlier window holds first, so a fleet-wide slowdown never empties a route;
- **latency outliers**: at the end of each window of ``outlier_window_ms`` (event time, aligned
  to the epoch), a broker whose mean latency over its answered sends is at least
  ``outlier_factor`` times the median of its topic's brokers is isolated for
  ``outlier_isolation_ms`` (``OUTLIER``), even when no single send reaches RocketMQ's 550 ms band;
- **recovery probing**: a broker whose isolation ends takes ``probe_share`` of the sends
  (``PROBE``) for as long as it was isolated (at most ``probe_max_ms``), then all of them
  (``RELEASE``); failing on probation isolates it again through the FaultTable as always;
- **fault-aware release** (:func:`release_router`): a message leaving a delay queue goes onto a
  broker of its topic that is not isolated at the instant it is due.

The FaultTable's own rows are written as before: they are what RocketMQ's strategy decides. The
policies add rows after them, at the same instant, wherever what a reader of every row in order
holds differs from what the policies decide, so a producer that reads the compacted decision
topic always ends on the policies' answer. Every policy row says why in ``reason``; the state
that a decision means is :func:`streaming.client.decision_state`'s.

Time is the cluster's clock, as for every deadline of the engine: windows close, outlier
isolations and probations end when the clock reaches them, whatever the batches.
"""

from __future__ import annotations

import bisect
import itertools
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from udfs._frames import isin, objects
from udfs.engine._config import Policies
from udfs.engine._faults import Opened
from udfs.engine._nameserver import RouteTimeline
from udfs.engine._segment import Segment
from udfs.engine._state import Isolated, PolicyState, Shown, Window
from udfs.engine._tables import Change
from udfs.rocketmq import Outcome
from udfs.vocabulary import Decision, ProducerState, TableName

_ANSWERED = [o.value for o in Outcome if o.returned]

_RELEASED: dict[str, str] = {
    ProducerState.PROBING: "probation passed",
    ProducerState.ISOLATED: "latency outlier isolation ended",
}
"""Why a ``RELEASE`` ends what the policies showed before."""

Key = tuple[int, int, str]
"""A point in the cluster's time: (time, 0 for a deadline or 1 for an event, event_id)."""


def govern(
    seg: Segment,
    opened: Opened,
    changes: list[Change],
    sends: pd.DataFrame,
    counted: np.ndarray | None,
    routes: RouteTimeline,
) -> list[Change]:
    """Apply the policies to the segment's cluster-scope availability ``changes`` (the
    FaultTable's) and ``sends`` (those ``counted``, default all); write their
    ``broker_decisions`` rows. Returns the availability changes with the policies' own, for the
    routing table, which starts from the policies' view (``opened.isolated_at_start``)."""
    policies, clock_end = seg.config.policies, seg.clock_end
    if not policies.decisions:
        return changes
    g = _Governor(seg, routes)
    opened.isolated_at_start[seg.cluster] = {
        b: s.until for b, s in g.p.shown.items() if s.state == ProducerState.ISOLATED
    }
    closes = _windows(g.p, sends, counted, policies, clock_end) if policies.outlier_factor else {}
    # each instant the FaultTable or the routes changed at, as (time, order, event_id): one
    # event's changes are judged together, before the next event's, whatever the batches
    base: dict[Key, list[Change]] = {}
    for c in changes:
        base.setdefault((c.time, c.order, c.event_id), []).append(c)
    points = set(base) | {(t, 0, "") for t in closes}
    if policies.isolation_cap is not None:
        points |= {(c.time, c.order, c.event_id if c.order else "") for c in routes.history}
    todo = sorted(points)
    i = 0
    while True:  # the points in time order, with the deadlines they set on the way
        due = g.deadline(clock_end)
        key = min([*todo[i : i + 1], *([] if due is None else [(due, 0, "")])], default=None)
        if key is None:
            break
        i += int(i < len(todo) and todo[i] == key)
        g.at(key, base.get(key, []), closes.get(key[0]) if key[1:] == (0, "") else None)
    seg.out.rows(TableName.BROKER_DECISIONS, g.rows)
    return changes + g.effective


def _plain_available(shown: Shown) -> bool:
    """What no reader needs kept: available, and not because the cap waived an isolation."""
    return shown.state == ProducerState.AVAILABLE and not shown.waived


class _Governor:
    def __init__(self, seg: Segment, routes: RouteTimeline) -> None:
        self.cluster, self.policies, self.routes = seg.cluster, seg.config.policies, routes
        self.profile = seg.config.cluster_profile
        self.p = seg.state.policies
        self.rows: list[dict[str, Any]] = []
        self.effective: list[Change] = []
        self.done: Key = (-(2**63), 0, "")
        self._last: tuple[dict[str, int], dict[str, str], Any] | None = None
        """The last point's brokers held out (their ends), the cap's waivers and the routes it
        judged them on: what a point that only moves ends keeps (:meth:`_ends_only`)."""

    def deadline(self, clock_end: int) -> int | None:
        """The first end of an outlier isolation or a probation by ``clock_end`` not yet
        applied: after the last point's time (a deadline's point, ``(u, 0, "")``, comes before
        any other point at its time ``u``)."""
        done = self.done[0]
        ends = [o.until for o in self.p.outlier.values()]
        ends += self.p.probe.values()
        return min((u for u in ends if done < u <= clock_end), default=None)

    def at(self, key: Key, base: list[Change], close: dict[str, Any] | None) -> None:
        """Everything at one point: an event's (or a deadline's) FaultTable rows, a window's
        close, the deadlines due then."""
        t, p = key[0], self.p
        routes = self.routes.after(key) if self.policies.isolation_cap is not None else None
        if self._ends_only(t, base, close, routes):
            self._move_ends(key, base, routes)
            return
        local = self._local(key, base, close, routes)
        self.done = key
        before = {c.broker: p.shown.get(c.broker) for c in base}  # the rest: p.shown's
        causes: dict[str, str] = {}
        for c in base:
            if c.decision == Decision.RESTORE:
                p.base.pop(c.broker, None)
                p.shown[c.broker] = Shown(ProducerState.AVAILABLE, t, False)
            else:
                assert c.until is not None
                # the FaultTable's isolation and its cause
                p.base[c.broker] = Isolated(c.until, c.event_id)
                p.shown[c.broker] = Shown(ProducerState.ISOLATED, c.until, False)
            causes[c.broker] = c.event_id
        walk: set[str]
        if local is not None:  # only the brokers of its changes can change: they alone are judged
            raw, waived, walk = local, {}, set(causes)
            for b in walk & raw.keys():
                p.since.setdefault(b, t)
        else:
            p.outlier = {b: v for b, v in p.outlier.items() if v.until > t}
            ended = {b for b, u in p.probe.items() if u <= t}
            p.probe = {b: u for b, u in p.probe.items() if u > t}
            if close is not None:
                self._outliers(t, close)
            raw = {b: i.until for b, i in p.base.items() if i.until > t}  # as _until, over t
            for b, i in p.outlier.items():
                if i.until > raw.get(b, t):
                    raw[b] = i.until
            for b in raw:
                p.since.setdefault(b, t)
            waived = self._cap(key, raw) if self.policies.isolation_cap is not None else {}
            walk = self._walk({*causes, *ended}, raw, waived)
        for b in sorted(walk):
            if b in raw and b not in waived:
                p.probe.pop(b, None)
                want = Shown(ProducerState.ISOLATED, raw[b], False)
            elif b in raw:
                want = Shown(ProducerState.AVAILABLE, t, True)
            else:
                since = p.since.pop(b, None)
                was = before[b] if b in before else p.shown.get(b)
                if since is not None and was is not None and was.state == ProducerState.ISOLATED:
                    self._probation(b, t, t - since)
                probe = p.probe.get(b)
                want = (
                    Shown(ProducerState.AVAILABLE, t, False)
                    if probe is None
                    else Shown(ProducerState.PROBING, probe, False)
                )
            self._show(b, key, want, causes.get(b), waived.get(b))
        if local is not None:  # what it judged alone can have left the brokers held out
            for b in walk:
                if (shown := p.shown.get(b)) is not None and _plain_available(shown):
                    del p.shown[b]
        else:
            for b in [b for b in p.since if b not in raw]:
                del p.since[b]
            p.shown = {b: s for b, s in p.shown.items() if not _plain_available(s)}
        self._last = (raw, waived, routes)

    def _local(
        self, key: Key, base: list[Change], close: dict[str, Any] | None, routes: Any
    ) -> dict[str, int] | None:
        """The brokers held out after the point at ``key`` when only the brokers of its changes
        can want something else than they show, else None. That is so when no window closes,
        the routes are the last point's, no isolation but of a broker it changes, no outlier
        window and no probation ends by its time, no change ends before it, and the isolation
        cap waives no broker, at the last point or with the brokers held out after this one:
        then every other broker is held out until the same time as at the last point, and its
        since and shown stay."""
        last, p, t = self._last, self.p, key[0]
        if last is None or close is not None or last[2] is not routes or last[1]:
            return None
        held, changed = last[0], {c.broker for c in base}
        ends = [*(o.until for o in p.outlier.values()), *p.probe.values()]
        if min(held.values(), default=t + 1) <= t:  # else none of them ends by t
            ends += [u for b, u in held.items() if b not in changed]  # a change replaces its end
        if min(ends, default=t + 1) <= t:
            return None
        raw = dict(held)
        for c in base:
            until = None if c.decision == Decision.RESTORE else c.until
            if c.decision != Decision.RESTORE and (until is None or until <= t):
                return None
            outlier = p.outlier.get(c.broker)
            if outlier is not None:  # as at: the FaultTable's end, or its outlier's if later
                until = max(t if until is None else until, outlier.until)
            if until is None:
                raw.pop(c.broker, None)
            else:
                raw[c.broker] = until
        cap = self.policies.isolation_cap
        room = {} if cap is None else self.routes.room_after(key, cap)
        if len(raw) > min(room.values(), default=len(raw)):
            return None  # the cap may waive some broker: every broker is judged
        return raw

    def _walk(self, touched: set[str], raw: dict[str, int], waived: dict[str, str]) -> set[str]:
        """The brokers :meth:`at` must judge: at the segment's first point, every broker held
        out, shown or probing; after that, those ``touched`` (a FaultTable row came, a
        probation ended) and those whose end or waiver differs from the last point's. Any other
        broker wants what it shows already."""
        p = self.p
        if self._last is None:
            return {*raw, *p.shown, *p.probe}
        held, was_waived, _ = self._last
        walk = set(touched)
        walk.update(b for b, u in raw.items() if held.get(b) != u)
        walk.update(b for b in held if b not in raw)
        walk.update(b for b in {*waived, *was_waived} if waived.get(b) != was_waived.get(b))
        return walk

    def _ends_only(
        self, t: int, base: list[Change], close: dict[str, Any] | None, routes: Any
    ) -> bool:
        """Whether the point at ``t`` only moves the ends of FaultTable isolations in force (a
        failing broker's sends extending its isolation, the common case of a bad day): no
        window closes, the routes are the last point's, no isolation, outlier window or
        probation ends by ``t``, and each change is to a broker the FaultTable isolates
        already, to a later time than ``t``. Then the brokers held out, the order the cap
        takes them in and so its waivers are the last point's."""
        last, p = self._last, self.p
        if last is None or close is not None or last[2] is not routes:
            return False
        held = last[0]
        for c in base:
            item = p.base.get(c.broker)
            if (
                c.decision == Decision.RESTORE
                or c.broker not in held
                or item is None
                or item.until <= t
                or c.until is None
                or c.until <= t
            ):
                return False
        ends = (*held.values(), *(o.until for o in p.outlier.values()), *p.probe.values())
        return min(ends, default=t + 1) > t

    def _move_ends(self, key: Key, base: list[Change], routes: Any) -> None:
        """:meth:`at` for a point that :meth:`_ends_only`: the changed brokers' rows alone, as
        the whole walk would write them (every other broker's want is what it shows)."""
        assert self._last is not None
        self.done = key
        t, p = key[0], self.p
        held, waived, _ = self._last
        causes: dict[str, str] = {}
        for c in base:
            assert c.until is not None
            p.base[c.broker] = Isolated(c.until, c.event_id)
            p.shown[c.broker] = Shown(ProducerState.ISOLATED, c.until, False)
            causes[c.broker] = c.event_id
        held = {**held, **{b: self._until(b, t) for b in causes}}
        for b in sorted(causes):
            if b in waived:
                want = Shown(ProducerState.AVAILABLE, t, True)
            else:
                p.probe.pop(b, None)
                want = Shown(ProducerState.ISOLATED, held[b], False)
            self._show(b, key, want, causes[b], waived.get(b))
        self._last = (held, waived, routes)

    def _until(self, broker: str, t: int) -> int:
        base, outlier = self.p.base.get(broker), self.p.outlier.get(broker)
        return max(t if base is None else base.until, t if outlier is None else outlier.until)

    def _probation(self, broker: str, t: int, isolated_for: int) -> None:
        if self.policies.probe_share is not None and isolated_for > 0:
            self.p.probe[broker] = t + min(isolated_for, self.policies.probe_max_ms)

    def _cap(self, key: Key, raw: dict[str, int]) -> dict[str, str]:
        """The isolated brokers the cap keeps in the route, each with why: those the FaultTable
        isolates (RocketMQ's own rule: a failure, an answer in its bands) before those only a
        latency outlier window holds, a slow broker being a better last resort than a failing
        one; among each, the first isolated keep their isolation while every topic they serve
        has room."""
        cap = self.policies.isolation_cap
        assert cap is not None
        room = self.routes.room_after(key, cap)
        if len(raw) <= min(room.values(), default=len(raw)):
            return {}  # no topic can be full before a broker of it is judged: none is waived
        topics, serving = self.routes.writable_after(key), self.routes.serving_after(key)
        used = dict.fromkeys(topics, 0)
        waived = {}

        def outlier_only(b: str) -> bool:
            base = self.p.base.get(b)
            return base is None or base.until <= key[0]

        for b in sorted(raw, key=lambda b: (outlier_only(b), self.p.since[b], b)):
            mine = serving.get(b, ())
            full = [tp for tp in mine if used[tp] >= room[tp]]
            if full:
                tp = full[0]
                sick = sum(1 for x in raw if x in topics[tp])
                waived[b] = (
                    f"isolation cap {cap:.0%}: {sick} of topic {tp}'s {len(topics[tp])} writable "
                    f"brokers are isolated or sick, at most {room[tp]} may be isolated; kept in "
                    "the route (panic)"
                )
                continue
            for tp in mine:
                used[tp] += 1
        return waived

    def _outliers(self, end: int, stats: dict[str, Any]) -> None:
        """A window closed at ``end``: its outliers are isolated from then."""
        pol = self.policies
        assert pol.outlier_factor is not None
        found: dict[str, str] = {}
        for topic, brokers in stats.items():
            means = {b: s / n for b, (n, s) in brokers.items() if n >= pol.outlier_min_sends}
            if len(means) < 3:
                continue
            median = float(np.median(list(means.values())))
            for b, mean in sorted(means.items()):
                if mean >= pol.outlier_min_latency_ms and mean >= pol.outlier_factor * median:
                    found.setdefault(
                        b,
                        f"latency outlier: mean {mean:.0f} ms over {brokers[b][0]} sends of "
                        f"topic {topic} in the {pol.outlier_window_ms} ms window, "
                        f"{mean / max(median, 1e-9):.1f}x its {len(means)} brokers' median "
                        f"{median:.0f} ms (factor {pol.outlier_factor:g})",
                    )
        for b, why in found.items():
            self.p.outlier[b] = Isolated(end + pol.outlier_isolation_ms, why)

    def _show(
        self, broker: str, key: Key, want: Shown, cause: str | None, waived: str | None
    ) -> None:
        """Write a row where the rows so far tell a reader something else than ``want``."""
        t = key[0]
        shown = self.p.shown.get(broker)
        now = Shown(ProducerState.AVAILABLE, t, False) if shown is None else shown
        same = now.state == want.state and now.waived == want.waived
        if same and (want.state == ProducerState.AVAILABLE or now.until == want.until):
            return
        self.p.shown[broker] = want
        state, until, _ = want
        base = self.p.base.get(broker)
        cause = cause or (None if base is None else base.cause)
        outlier = self.p.outlier.get(broker)
        if state == ProducerState.ISOLATED and outlier is not None and outlier.until == until:
            decision, why = Decision.OUTLIER, str(outlier.cause)
        elif state == ProducerState.ISOLATED:
            decision = Decision.HOLD
            why = "the FaultTable's isolation holds" + (
                ": the isolation cap has room again" if now.waived else ""
            )
        elif state == ProducerState.PROBING:
            decision = Decision.PROBE
            why = (
                f"recovery probing: takes {self.policies.probe_share:.0%} of the sends "
                f"for {until - t} ms after its isolation ended"
            )
        elif waived is not None:
            decision, why = Decision.PANIC, waived
        else:
            decision = Decision.RELEASE
            why = _RELEASED.get(now.state, "panic over: no isolation left to waive")
        self.rows.append(
            {
                "scope": "cluster",
                "scope_key": self.cluster,
                "cluster": self.cluster,
                "broker_name": broker,
                "decision": decision,
                "effective_at": t,
                "available_from": until,
                "reason": why,
                "cause_event_id": cause,
                "profile": self.profile,
            }
        )
        available = state != ProducerState.ISOLATED
        self.effective.append(
            Change(
                t,
                key[1],
                key[2],
                broker,
                Decision.RESTORE if available else Decision.ISOLATE,
                until,
            )
        )


def _windows(
    p: PolicyState,
    sends: pd.DataFrame,
    counted: np.ndarray | None,
    policies: Policies,
    clock_end: int,
) -> dict[int, dict[str, Any]]:
    """Add the segment's answered sends (those ``counted``, default all) to their windows'
    per-topic, per-broker (count, latency sum; a send summary's last send counts its messages
    and their latencies); return the windows that close by ``clock_end``, by their end. The open
    window is kept in the state; a send to a window that closed already is not counted."""
    width = policies.outlier_window_ms
    kept = p.window
    answers = isin(sends["outcome"], _ANSWERED)
    answered = np.flatnonzero(answers if counted is None else answers & counted)
    w = sends["event_time"].to_numpy(np.int64)[answered] // width
    n = sends["messages"].fillna(1).to_numpy(np.int64)[answered]
    latency = sends["latency_total"].fillna(sends["latency_ms"]).to_numpy(np.int64)[answered]
    topic, topics = pd.factorize(objects(sends["topic"])[answered], sort=True)
    broker, brokers = pd.factorize(objects(sends["broker_name"])[answered], sort=True)
    summed = (topic >= 0) & (broker >= 0)
    windows: dict[int, dict[str, Any]] = {}
    if kept is not None:
        summed &= w >= kept.index
        windows[kept.index] = kept.sums
    # the sums per (window, topic, broker), in that order
    w, topic, broker = w[summed], topic[summed], broker[summed]
    low, across = (int(w.min()) if len(w) else 0), len(brokers)
    wide = len(topics) * across
    slots, at = np.unique((w - low) * wide + topic * across + broker, return_inverse=True)
    sums = np.zeros((len(slots), 2), dtype=np.int64)
    np.add.at(sums, at, np.stack([n[summed], latency[summed]], axis=1))
    # the slots a (window, topic) at a time: a new topic's sums made at once, others added to
    names, pairs = np.asarray(brokers, dtype=object)[slots % across], sums.tolist()
    groups = slots // across
    bounds = [0, *(np.flatnonzero(groups[1:] != groups[:-1]) + 1).tolist(), len(slots)]
    for a, b in itertools.pairwise(bounds if len(slots) else ()):
        window = windows.setdefault(low + int(slots[a]) // wide, {})
        topic_name = topics[int(slots[a]) % wide // across]
        at_topic = window.get(topic_name)
        if at_topic is None:
            window[topic_name] = dict(zip(names[a:b].tolist(), pairs[a:b], strict=True))
            continue
        for name, (count, total) in zip(names[a:b].tolist(), pairs[a:b], strict=True):
            pair = at_topic.setdefault(name, [0, 0])
            pair[0] += count
            pair[1] += total
    first_open = clock_end // width
    p.window = Window(first_open, windows.pop(first_open, {}))
    return {(w + 1) * width: stats for w, stats in sorted(windows.items()) if w < first_open}


def release_router(
    cluster: str, opened: Opened, changes: list[Change], routes: RouteTimeline
) -> Callable[[dict[str, Any]], str | None]:
    """Fault-aware release: the broker a message due at ``deliver_at`` goes onto. Of its real
    topic's writable brokers at that instant, those the cluster scope does not isolate then
    (every one when all are), one chosen by the message id so that messages spread over them;
    None without a route."""
    start = opened.isolated_at_start.get(cluster)
    if start is None:
        start = {it.broker: it.start for it in opened.items_at_start.get(cluster, ()) if it.pending}
    timeline: dict[str, list[tuple[Key, int | None]]] = {}
    for c in sorted(changes, key=lambda c: c[:3]):
        until = None if c.decision == Decision.RESTORE else c.until
        timeline.setdefault(c.broker, []).append(((c.time, c.order, c.event_id), until))

    def isolated(broker: str, at: Key) -> bool:
        steps = timeline.get(broker, [])
        i = bisect.bisect_left(steps, (at,)) - 1  # the changes before the release
        until = steps[i][1] if i >= 0 else start.get(broker)
        return until is not None and until > at[0]

    def route(entry: dict[str, Any]) -> str | None:
        at: Key = (int(entry["deliver_at"]), 1, "")  # a deadline: after the changes at its time
        brokers = sorted(routes.writable_after(at).get(str(entry["real_topic"]), ()))
        usable = [b for b in brokers if not isolated(b, at)] or brokers
        if not usable:
            return None
        return usable[zlib.crc32(str(entry["message_id"]).encode()) % len(usable)]

    return route
