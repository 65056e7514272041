"""The sequential part of a batch, in event-time order: the NameServer's view (heartbeats, scans,
routes), routing decisions with the real ``select_queue``, and the routing table per scope key."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from udfs.engine._config import CLUSTER, EngineConfig, Route
from udfs.engine._output import Out
from udfs.engine._shards import Shard
from udfs.engine._state import digest, rng, text_digest
from udfs.engine._tables import Change, ScopeTables, emit, expire_idle, report_rows
from udfs.rocketmq import FaultTable, MessageQueue, SendMode, TopicPublishInfo, select_queue
from udfs.schema import TABLES


class Run:
    def __init__(
        self,
        cluster: str,
        state: dict[str, Any],
        config: EngineConfig,
        out: Out,
        clock_end: int,
        shard: Shard,
    ) -> None:
        self.cluster, self.state, self.config, self.out, self.clock_end = (
            cluster,
            state,
            config,
            out,
            clock_end,
        )
        self.shard = shard
        self.tables: dict[str, ScopeTables] = {}
        self.changes: dict[str, dict[str, list[Change]]] = {}
        self.items_at_start: dict[str, dict[str, list[list[Any]]]] = {}
        self.route_changes: list[tuple[int, int, str, str]] = []  # time, order, event_id, topic
        self.route_history: list[tuple[int, int, str, dict[str, Route]]] = []
        self.routes_at_start = self._effective_routes({})
        self._routes_now = self.routes_at_start
        self._route_facts: dict[int, tuple[Route, str, list[list[Any]], Any]] = {}
        self._tables_made: dict[tuple[int, Any], tuple[str, pa.Array, pa.Array]] = {}
        self._queues_made: dict[tuple[int, str], list[MessageQueue]] = {}
        self._layouts: dict[int, _Layout] = {}
        self.new_topics: dict[str, dict[str, tuple[int, str]]] = {}
        self.first_event: tuple[int, str] | None = None
        self._next_scan = -(2**63)
        """No NameServer scan can drop a broker before this time (the first call finds out)."""

    # tables

    def prepare_tables(self, scope: str, sends: pd.DataFrame) -> None:
        config = self.config
        self.items_at_start[scope] = {k: t["items"] for k, t in self.state["tables"][scope].items()}
        if scope == CLUSTER:
            # the cluster's table exists from its first event, so that its routing table is
            # published from the first route on, whichever batch the first send falls in
            self._tstate(scope, self.cluster)["profile"] = config.cluster_profile
            profiles = pd.Series(config.cluster_profile, index=sends.index)
            chosen = sends
        else:
            chosen = sends[sends["latency_fault_enable"].to_numpy(bool)]
            profiles = chosen["client_profile"]
            firsts = chosen.drop_duplicates(["producer_id", "topic"])
            for pid, topic, t, eid in firsts[
                ["producer_id", "topic", "event_time", "event_id"]
            ].itertuples(index=False):
                tstate = self._tstate(scope, str(pid))
                if topic not in tstate["topics"]:
                    tstate["topics"] = sorted([*tstate["topics"], topic])
                    self.new_topics.setdefault(str(pid), {})[topic] = (int(t), str(eid))
        if len(chosen) == 0:
            return
        rows = report_rows(chosen, profiles, config)
        rows["key"] = self.cluster if scope == CLUSTER else rows["producer_id"]
        # a producer's table follows the profile of its latest event
        latest = rows.groupby("key", sort=False)["profile"].last()
        key_profiles = {str(k): config.profile(str(p)) for k, p in latest.items()}
        tstates = {}
        for key, profile in key_profiles.items():
            tstates[key] = self._tstate(scope, key)
            tstates[key]["profile"] = profile.name
        tables = ScopeTables(scope, tstates, key_profiles, rows)
        self.out.stats["stale"] += tables.stale
        self.tables[scope] = tables

    def _tstate(self, scope: str, key: str) -> dict[str, Any]:
        tables = self.state["tables"][scope]
        if key not in tables:
            tables[key] = {"profile": None, "items": [], "cap": 32, "worst": None, "topics": []}
        tstate: dict[str, Any] = tables[key]
        return tstate

    def finish_tables(self, scope: str) -> None:
        tables = self.tables.get(scope)
        changes = tables.finish(self.cluster, self.clock_end, self.out) if tables else {}
        expired: list[Any] = []
        for key, tstate in self.state["tables"][scope].items():
            if tstate["profile"] is not None and (tables is None or key not in tables.init):
                expire_idle(key, tstate, self.clock_end, expired)
        profiles = self.state["tables"][scope]
        for key, more in emit(
            scope, self.cluster, lambda k: self.config.profile(profiles[k]["profile"]), expired,
            self.out,
        ).items():  # fmt: skip
            changes.setdefault(key, []).extend(more)
        self.changes[scope] = changes

    def _isolated_at_start(self, scope: str, key: str) -> dict[str, int]:
        return {it[0]: it[2] for it in self.items_at_start[scope].get(key, ()) if it[5]}

    # the sequential timeline: NameServer, routes and routing decisions

    def timeline(self, events: pd.DataFrame, decide: pd.DataFrame, scopes: list[str]) -> None:
        ticks = events[events["kind"].isin(["heartbeat", "route"])]
        items = pd.concat(
            [ticks[["event_time", "event_id", "kind"]], decide[["event_time", "event_id", "kind"]]]
        ).sort_values(["event_time", "event_id"], kind="stable")
        by_id = {}
        if len(ticks):
            by_id.update(
                {
                    e: r
                    for e, r in zip(ticks["event_id"], ticks.itertuples(index=False), strict=True)
                }
            )
        if len(decide):
            by_id.update(
                {
                    e: r
                    for e, r in zip(decide["event_id"], decide.itertuples(index=False), strict=True)
                }
            )
        for t, eid, kind in items.itertuples(index=False):
            self._scans_until(int(t))
            row = by_id[eid]
            if kind == "heartbeat":
                self._heartbeat(row)
            elif kind == "route":
                self._route(row)
            else:
                for scope in scopes:
                    if scope == CLUSTER or self.shard.owns(str(row.producer_id)):
                        self._routing_decision(scope, row)
        self._scans_until(self.clock_end)

    def _scans_until(self, now: int) -> None:
        if now < self._next_scan:
            return
        timeout = self.config.heartbeat_timeout_ms
        self._next_scan = 2**63
        for broker, hb in sorted(self.state["heartbeats"].items()):
            if hb["expired"]:
                continue
            scan = self._scan_after(hb["last"])
            if scan <= now:
                hb["expired"] = True
                self._route_rows(
                    [
                        self._route_decision(
                            broker,
                            "ROUTE_EXPIRED",
                            scan,
                            hb["eid"],
                            f"no heartbeat for more than {timeout} ms at the NameServer scan",
                        )
                    ],
                )
                self._route_changed(scan, 0, hb["eid"], broker=broker)
            else:
                self._next_scan = min(self._next_scan, scan)

    def _scan_after(self, heartbeat: int) -> int:
        """The NameServer scan that drops a broker whose last heartbeat was at ``heartbeat``."""
        interval = self.config.scan_interval_ms
        return ((heartbeat + self.config.heartbeat_timeout_ms) // interval + 1) * interval

    def _heartbeat(self, row: Any) -> None:
        hb = self.state["heartbeats"].get(row.broker_name)
        at = int(row.event_time)
        self.state["heartbeats"][row.broker_name] = {
            "last": at,
            "expired": False,
            "eid": row.event_id,
        }
        self._next_scan = min(self._next_scan, self._scan_after(at))
        if hb is not None and hb["expired"]:
            self._route_rows(
                [
                    self._route_decision(
                        row.broker_name,
                        "ROUTE_RESTORED",
                        int(row.event_time),
                        row.event_id,
                        "heartbeat received: the broker is back in the route",
                    )
                ],
            )
            self._route_changed(at, 1, row.event_id, broker=row.broker_name)

    def _route_rows(self, rows: list[dict[str, Any]]) -> None:
        """The NameServer's decisions: every shard follows the NameServer, the lead says so."""
        if self.shard.lead:
            self.out.rows("broker_decisions", rows)

    def _route_decision(
        self, broker: str, decision: str, at: int, cause: str, reason: str
    ) -> dict[str, Any]:
        return {
            "scope": CLUSTER,
            "scope_key": self.cluster,
            "cluster": self.cluster,
            "broker_name": broker,
            "decision": decision,
            "effective_at": at,
            "available_from": at,
            "reason": reason,
            "cause_event_id": cause,
            "profile": "",
        }

    def _route(self, row: Any) -> None:
        brokers = [
            [b["broker_name"], int(b["write_queue_nums"]), int(b.get("perm", 6))]
            for b in json.loads(row.brokers_json)
        ]
        self.state["routes"][row.topic] = sorted(brokers)
        self._route_changed(int(row.event_time), 1, row.event_id, topic=row.topic)

    def _route_changed(
        self, t: int, order: int, eid: str, *, topic: str | None = None, broker: str | None = None
    ) -> None:
        routes = self._declared_routes()
        topics = (
            [topic] if topic else [tp for tp, r in routes.items() if any(e[0] == broker for e in r)]
        )
        for tp in topics:
            self.route_changes.append((t, order, eid, tp))
        self._routes_now = self._effective_routes(self._routes_now)
        self.route_history.append((t, order, eid, self._routes_now))

    def _declared_routes(self) -> dict[str, list[list[Any]]]:
        routes = {tp: [list(e) for e in r] for tp, r in self.config.static_routes.items()}
        routes.update(self.state["routes"])
        return routes

    def _effective_routes(self, before: dict[str, Route]) -> dict[str, Route]:
        """The routes without the brokers the NameServer dropped; a topic whose route did not
        change keeps the same object as in ``before``."""
        expired = {b for b, hb in self.state["heartbeats"].items() if hb["expired"]}
        routes = {}
        for tp, r in self._declared_routes().items():
            route = tuple((e[0], int(e[1]), int(e[2])) for e in sorted(r) if e[0] not in expired)
            routes[tp] = before[tp] if before.get(tp) == route else route
        return routes

    def _message_queues(self, route: Route, topic: str) -> list[MessageQueue]:
        """A fresh TopicPublishInfo's queues for ``route`` (shared: a queue is immutable)."""
        made = self._queues_made.get((id(route), topic))
        if made is None:
            made = [MessageQueue(b, q, topic) for b, q in self._facts(route)[2]]
            self._queues_made[(id(route), topic)] = made
        return made

    def _facts(self, route: Route) -> tuple[Route, str, list[list[Any]], Any]:
        """A route's digest, fresh queues and write queue numbers, worked out once per batch."""
        facts = self._route_facts.get(id(route))
        if facts is None:
            fresh = TopicPublishInfo.from_route(route)
            queues = [[q.broker_name, q.queue_id] for q in fresh.queues]
            facts = (route, digest([list(e) for e in route]), queues, fresh.write_queue_nums)
            self._route_facts[id(route)] = facts  # the route is kept in facts: its id stays
        return facts

    def _routing_decision(self, scope: str, row: Any) -> None:
        config = self.config
        producer = str(row.producer_id)
        if scope == CLUSTER:
            key, profile, enable = self.cluster, config.profile(config.cluster_profile), True
        else:
            key = producer
            profile = config.profile(row.client_profile)
            enable = bool(row.latency_fault_enable)
        tables = self.tables.get(scope)
        table = tables.view(key) if tables is not None else None
        route = self._routes_now.get(row.topic, ())
        base = {
            "event_id": row.event_id,
            "scope": scope,
            "scope_key": key,
            "cluster": self.cluster,
            "producer_id": producer,
            "topic": row.topic,
            "message_id": row.message_id,
            "failed_broker": row.broker_name,
            "attempt": int(row.attempt),
            "profile": profile.name,
            "decided_at": int(row.event_time),
        }
        if not route:
            self.out.rows(
                "routing_decisions",
                [
                    {
                        **base,
                        "selected_broker": None,
                        "selected_queue_id": None,
                        "rule": "no-route-info",
                        "rewritten": False,
                        "removed_broker": None,
                        "swallowed": None,
                    }
                ],
            )
            return
        pkey = f"{scope}|{key}|{producer}|{row.topic}"
        pubs = self.state["producers"][producer]["pub"]
        pub = pubs.get(f"{scope}|{row.topic}")
        _, digest, fresh_queues, wqn = self._facts(route)
        if pub is None or pub["route"] != digest:
            pub = {
                "route": digest,
                "queues": None,  # the route's own
                "index": None,
                "seed": f"{row.event_time}|{row.event_id}",
            }
            pubs[f"{scope}|{row.topic}"] = pub
        queues = (
            [MessageQueue(b, q, row.topic) for b, q in pub["queues"]]
            if pub["queues"] is not None
            else list(self._message_queues(route, row.topic))
        )
        info = TopicPublishInfo(
            queues,
            wqn,
            pub["index"],
            rng(config.seed, pkey, pub["seed"], row.event_id),
        )
        if table is not None:
            assert tables is not None
            pos = tables.position_of(row.event_id)
            fault = table.snapshot(pos, rng(config.seed, scope, key, row.event_id))
        else:
            pos, fault = -1, FaultTable(profile, rng=rng(config.seed, scope, key, row.event_id))
        reset = profile.line == "5" and row.mode == SendMode.SYNC
        sel = select_queue(
            profile, info, fault, row.broker_name, int(row.event_time), enable, reset_index=reset
        )
        if table is not None:
            table.worst = fault.worst_index
            if sel.removed is not None:
                table.remove(sel.removed, pos, int(row.event_time), row.event_id)
        after = [[q.broker_name, q.queue_id] for q in info.queues]
        pub["queues"] = None if after == fresh_queues else after
        pub["index"] = info.index
        self.out.rows(
            "routing_decisions",
            [
                {
                    **base,
                    "selected_broker": sel.queue.broker_name,
                    "selected_queue_id": sel.queue.queue_id,
                    "rule": sel.rule.value,
                    "rewritten": sel.rewritten,
                    "removed_broker": sel.removed,
                    "swallowed": sel.swallowed,
                }
            ],
        )

    # the routing table: each change of a topic's selectable queues, per scope key

    def _layout(self, route: Route) -> _Layout:
        made = self._layouts.get(id(route))
        if made is None:
            made = self._layouts[id(route)] = _Layout(route)
        return made

    def routing_table(self, scopes: list[str]) -> None:
        quiet = not self.route_history
        for scope in scopes:
            changes = self.changes[scope]
            for key, tstate in self.state["tables"][scope].items():
                if tstate["profile"] is None:
                    continue
                if quiet and key not in changes and key not in self.new_topics and scope != CLUSTER:
                    continue  # nothing that a routing table is made of changed
                self._routing_table_for(scope, key)

    def _table_of(
        self, route: Route, isolated: tuple[tuple[str, int], ...]
    ) -> tuple[str, pa.Array, pa.Array]:
        """A topic's routing table for a route and its isolated brokers: its digest and its
        rows' two lists (as one-row Arrow arrays), made once per batch however many scope keys
        share them."""
        cache_key = (id(route), isolated)
        made = self._tables_made.get(cache_key)
        if made is None:
            made = self._tables_made[cache_key] = self._layout(route).table(isolated)
        return made

    def _routing_table_for(self, scope: str, key: str) -> None:
        last = self.state["routing_table"].setdefault(f"{scope}|{key}", {})
        known = set(last)
        isolated = self._isolated_at_start(scope, key)
        routes = self.routes_at_start
        # (time, order, event_id, kind, payload): 0 route snapshot, 1 availability, 2 new topic
        points: list[tuple[int, int, str, int, Any]] = [
            (t, o, e, 0, snapshot) for t, o, e, snapshot in self.route_history
        ]
        points += [(t, o, e, 1, (b, d, u)) for t, o, e, b, d, u in self.changes[scope].get(key, [])]
        if scope == CLUSTER:
            points += [(t, o, e, 2, tp) for t, o, e, tp in self.route_changes]
            if self.first_event is not None:
                t0, e0 = self.first_event
                points += [(t0, 1, e0, 2, tp) for tp in self.config.static_routes]
        else:
            points += [(t, 1, e, 2, tp) for tp, (t, e) in self.new_topics.get(key, {}).items()]
        points.sort(key=lambda p: (p[0], p[1], p[2], p[3]))
        rows = []
        for t, _, eid, what, payload in points:
            if what == 0:
                changed = [tp for tp in known if payload.get(tp) is not routes.get(tp)]
                routes = payload
            elif what == 1:
                broker, decision, until = payload
                if decision == "RESTORE":
                    isolated.pop(broker, None)
                else:
                    isolated[broker] = until
                changed = [tp for tp in known if broker in self._layout(routes.get(tp, ())).at]
            else:
                known.add(payload)
                changed = [payload]
            for topic in sorted(changed):
                route = routes.get(topic, ())
                positions = self._layout(route).at
                isolated_here = tuple(
                    (b, u) for _, b, u in sorted(
                        (positions[b], b, u) for b, u in isolated.items() if b in positions
                    )
                )  # fmt: skip
                digest, selectable, isolated_rows = self._table_of(route, isolated_here)
                if last.get(topic) == digest:
                    continue
                last[topic] = digest
                rows.append(
                    {
                        "scope": scope,
                        "scope_key": key,
                        "cluster": self.cluster,
                        "topic": topic,
                        "effective_at": int(t),
                        "cause_event_id": eid,
                        "selectable": selectable,
                        "isolated": isolated_rows,
                    }
                )
        self.out.rows("routing_table", rows)


_SELECTABLE = TABLES["routing_table"].field("selectable").type
_ISOLATED = TABLES["routing_table"].field("isolated").type


class _Layout:
    """A route's queues, worked out once per batch: each broker's place, its writable queues as
    JSON text (for the digest) and as Arrow rows (for the table)."""

    def __init__(self, route: Route) -> None:
        self.route = route  # kept, so that its id is not reused while the layout is cached
        self.at = {b: i for i, (b, _, _) in enumerate(route)}
        writable = [(b, w) for b, w, perm in route if perm & 2 and w > 0]
        self.text = [(b, ",".join(f"[{json.dumps(b)},{q}]" for q in range(w))) for b, w in writable]
        ends = np.cumsum([w for _, w in writable], dtype=np.int64)
        self.span = {b: (int(e) - w, int(e)) for (b, w), e in zip(writable, ends, strict=True)}
        self.queues = pa.array(
            [{"broker_name": b, "queue_id": q} for b, w in writable for q in range(w)],
            _SELECTABLE.value_type,
        )

    def table(self, isolated: tuple[tuple[str, int], ...]) -> tuple[str, pa.Array, pa.Array]:
        """``digest([selectable, isolated])`` (``selectable``: the writable queues of the brokers
        not isolated, as ``[broker, queue]``), written from the JSON made once per route, and the
        row's two lists."""
        out = {b for b, _ in isolated}
        selectable = "[" + ",".join(t for b, t in self.text if b not in out) + "]"
        iso = json.dumps([list(x) for x in isolated], separators=(",", ":"))
        queues = self.queues
        if out:
            keep = np.ones(len(queues), dtype=bool)
            for b in out & self.span.keys():
                keep[slice(*self.span[b])] = False
            queues = queues.filter(pa.array(keep))
        return (
            text_digest(f"[{selectable},{iso}]"),
            pa.ListArray.from_arrays(pa.array([0, len(queues)], pa.int32()), queues, _SELECTABLE),
            pa.array([[{"broker_name": b, "until": u} for b, u in isolated]], _ISOLATED),
        )
