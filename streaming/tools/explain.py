"""``faultline explain``: why a broker was (un)available at an instant, a message's path, and a
transactional message's changes, in plain text or JSON, from a job's (or a replay's) Delta
tables."""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import pyarrow.compute as pc

from streaming.client import POLICY_STATES, publish_order
from streaming.tools import OUTPUT_HINT, routing_tables
from streaming.tools.states import BrokerState, state_at, timeline
from udfs.errors import FaultlineError
from udfs.rocketmq import PROFILES, LocalTransactionState
from udfs.vocabulary import Decision, ProducerState, TableName, TransactionState

AROUND = 3
"""Decision rows shown before and after the instant."""
ANSWERED = re.compile(r"^answer to (?:a )?check(?: \d+ from (\S+?)(?::|$| \())?")
"""The reason of a ``transactions`` row that a producer's answer to a check made
(``udfs.engine._transactions``), with the broker that checked (when faultline held the message)."""
ANSWERS = {
    TransactionState.COMMIT: LocalTransactionState.COMMIT_MESSAGE,
    TransactionState.ROLLBACK: LocalTransactionState.ROLLBACK_MESSAGE,
    TransactionState.UNKNOWN: LocalTransactionState.UNKNOW,
}
"""The answer (RocketMQ's ``LocalTransactionState``) that leaves a transaction in a state."""


class ExplainError(FaultlineError):
    """The question cannot be answered from these tables; the message says what there is."""


def _table(output: Path, name: str, **equal: Any) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    path = output / name
    if not (path / "_delta_log").is_dir():
        raise ExplainError(f"{output}: no {name} table here (--output is a job's output folder)")
    import pyarrow.dataset as ds

    match = None
    for column, value in equal.items():  # pushed down: only matching row groups are read
        term = ds.field(column) == value
        match = term if match is None else match & term
    rows: list[dict[str, Any]] = (
        DeltaTable(str(path)).to_pyarrow_dataset().to_table(filter=match).to_pylist()
    )
    return rows


def _first_event(output: Path) -> int | None:
    from deltalake import DeltaTable

    times = DeltaTable(str(output / TableName.FAULT_ITEMS)).to_pyarrow_table(columns=["event_time"])
    first = pc.min(times["event_time"]).as_py()
    return None if first is None else int(first)


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 date and time (UTC unless it says)."""
    if text.strip().isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.strip().replace(" ", "T", 1))
    except ValueError:
        raise ExplainError(
            f"--at {text!r}: give a time like 2026-11-21T10:02:28 (UTC) or epoch milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def iso(ms: int | None) -> str:
    """An event time (epoch ms) as UTC text, to the millisecond."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def broker_at(
    output: Path, broker: str, at: int, cluster: str | None, scope: str
) -> dict[str, Any]:
    """The answer for a broker at an instant, in one scope (``cluster`` or ``producer:ID``)."""
    kind, _, producer = scope.partition(":")
    if kind not in ("cluster", "producer") or (kind == "producer") != bool(producer):
        raise ExplainError(f"--scope {scope!r}: give cluster or producer:PRODUCER_ID")
    clocks = [b["clock"] for b in _table(output, TableName.BATCHES) if b["clock"] is not None]
    begin = _first_event(output)
    if not clocks or begin is None or not begin <= at <= max(clocks):
        seen = f"{iso(begin)} .. {iso(max(clocks))}" if clocks else "no batch yet"
        raise ExplainError(f"--at {iso(at)} is outside every batch of {output}: they cover {seen}")
    items = _table(output, TableName.FAULT_ITEMS, broker_name=broker)
    decisions = _table(output, TableName.BROKER_DECISIONS, broker_name=broker)
    if not items and not decisions:
        known = sorted(
            {r["broker_name"] for r in _table(output, TableName.FAULT_ITEMS) if r["broker_name"]}
            | {
                r["broker_name"]
                for r in _table(output, TableName.BROKER_DECISIONS)
                if r["broker_name"]
            }
        )
        raise ExplainError(f"--broker {broker}: not in {output}; brokers there: {', '.join(known)}")
    clusters = sorted({r["cluster"] for r in items + decisions})
    if cluster is None:
        if len(clusters) > 1:
            raise ExplainError(f"{broker} is in clusters {', '.join(clusters)}: give --cluster")
        cluster = clusters[0]
    elif cluster not in clusters:
        raise ExplainError(
            f"--cluster {cluster}: {broker} is not in it; it is in {', '.join(clusters)}"
        )
    key = cluster if kind == "cluster" else producer
    if kind == "producer":
        producers = sorted(
            {r["scope_key"] for r in items if r["cluster"] == cluster and r["scope"] == "producer"}
        )
        if producer not in producers:
            shown = ", ".join(producers[:10]) + (
                f" and {len(producers) - 10} more" if len(producers) > 10 else ""
            )
            raise ExplainError(
                f"--scope producer:{producer}: no such producer sent to {broker} in {cluster}; "
                f"producers that did: {shown or 'none'}"
            )
    mine = sorted(
        (
            r
            for r in items
            if r["cluster"] == cluster and r["scope"] == kind and r["scope_key"] == key
        ),
        key=lambda r: (r["event_time"], r["event_id"], r["phase"] != "dispatch"),
    )
    before = [r for r in mine if r["event_time"] <= at]
    answer: dict[str, Any] = {
        "broker": broker,
        "cluster": cluster,
        "scope": kind,
        "scope_key": key,
        "at": at,
        "available": True,
        "fault_item": None,
        "set_by": None,
    }
    if before:
        item = before[-1]
        answer["available"] = at >= item["available_from"]
        answer["fault_item"] = {
            "latency_ms": item["latency_ms"],
            "available_from": item["available_from"],
            "updated_by": item["event_id"],
            "updated_at": item["event_time"],
            "profile": item["profile"],
        }
        setter = [
            r
            for r in before
            if r["not_available_ms"] > 0
            and r["event_time"] + r["not_available_ms"] == item["available_from"]
        ]
        if setter:
            answer["set_by"] = _setter(setter[-1], mine)
    route = [
        r
        for r in decisions
        if r["cluster"] == cluster and r["decision"].startswith("ROUTE") and r["effective_at"] <= at
    ]
    route.sort(key=lambda r: r["effective_at"])
    answer["nameserver"] = (
        {"in_route": True, "since": None, "cause_event_id": None}
        if not route
        else {
            "in_route": route[-1]["decision"] == Decision.ROUTE_RESTORED,
            "since": route[-1]["effective_at"],
            "cause_event_id": route[-1]["cause_event_id"],
        }
    )
    beats = [
        r["event_time"]
        for r in _table(output, TableName.HEARTBEATS, broker_name=broker)
        if r["cluster"] == cluster and r["event_time"] <= at
    ]
    answer["nameserver"]["last_heartbeat"] = max(beats, default=None)
    if answer["nameserver"]["in_route"] is False:
        answer["available"] = False
    near = sorted(
        (r for r in decisions if r["cluster"] == cluster and r["scope_key"] in (key, cluster)
         and (r["scope"] == kind or r["decision"].startswith("ROUTE"))),
        key=lambda r: (r["effective_at"], r["decision"]),
    )  # fmt: skip
    # faultline's own policies have the last word in the cluster scope (udfs.engine._policies)
    said = [r for r in sorted(near, key=publish_order) if r["effective_at"] <= at]
    said = [r for r in said if r["scope"] == kind and not r["decision"].startswith("ROUTE")]
    answer["policy"] = None
    if said and said[-1]["decision"] in POLICY_STATES:
        last = said[-1]
        answer["policy"] = {
            k: last[k] for k in ("decision", "effective_at", "available_from", "reason")
        }
        held = (
            POLICY_STATES[last["decision"]] == ProducerState.ISOLATED
            and at < last["available_from"]
        )
        answer["available"] = answer["nameserver"]["in_route"] is not False and not held
    split = sum(1 for r in near if r["effective_at"] <= at)
    answer["decisions"] = [
        {
            k: r[k]
            for k in ("decision", "effective_at", "available_from", "reason", "cause_event_id")
        }
        for r in near[max(0, split - AROUND) : split + AROUND]
    ]
    if kind == "producer":
        answer["routing_tables"] = _routing_tables(output, broker, at, cluster, producer)
    else:  # in the words the summary and status use
        now = state_at(timeline(decisions), cluster, broker, at)
        answer["state"] = BrokerState.AVAILABLE if now is None else now.state
        answer["state_until"] = None if now is None else now.until
    return answer


def _routing_tables(
    output: Path, broker: str, at: int, cluster: str, producer: str
) -> list[dict[str, Any]]:
    """The producer's routing table at ``at`` of each topic whose table names the broker
    (selectable or isolated; of every topic when none does): the queues it may select."""
    tables = [
        {k: r[k] for k in ("topic", "effective_at", "cause_event_id", "selectable", "isolated")}
        for r in routing_tables.in_force(output, at, "producer", producer)
        if r["cluster"] == cluster
    ]
    named = [
        t
        for t in tables
        if any(q["broker_name"] == broker for q in [*t["selectable"], *t["isolated"]])
    ]
    return named or tables


def band(profile: str, latency_ms: int, isolation: bool) -> str:
    """The latency band that gives an update's isolation duration under ``profile``."""
    p = PROFILES[profile]
    latency = p.isolation_latency if isolation else latency_ms
    index = sum(1 for bound in p.latency_max if latency >= bound) - 1
    text = f"latency {latency} ms >= {p.latency_max[index]} ms"
    return text + (
        f" (isolation: the profile's substitute latency {latency} ms)" if isolation else ""
    )


def _setter(row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The update that set the isolation in force, with the rule that made its duration."""
    profile = PROFILES[row["profile"]]
    earlier = [
        r
        for r in rows
        if r["event_time"] < row["event_time"] and r["available_from"] > row["event_time"]
    ]
    if profile.line == "5":
        rule = "5.x extends only: the later of the running isolation's end and now + duration"
    else:
        rule = "4.x overwrites: now + duration, whatever was running"
    return {
        "event_id": row["event_id"],
        "event_time": row["event_time"],
        "producer_id": row["producer_id"],
        "outcome": row["outcome"],
        "latency_ms": row["latency_ms"],
        "attempt": row.get("attempt"),
        "isolation": row["isolation"],
        "band": band(profile.name, row["latency_ms"], row["isolation"]),
        "not_available_ms": row["not_available_ms"],
        "profile": profile.name,
        "rule": rule,
        "while_isolated": bool(earlier),
    }


def message_path(output: Path, message_id: str) -> list[dict[str, Any]]:
    """A message's attempts with their routing decisions, its delay-queue entries and where it
    went, in time order."""
    steps = []
    for r in _table(output, TableName.FAULT_ITEMS, message_id=message_id):
        if r["scope"] == "cluster" and r["phase"] == "result":  # one per attempt
            steps.append(
                {
                    "at": r["event_time"],
                    "what": "attempt",
                    "text": f"attempt {r['attempt']} by {r['producer_id']} to {r['broker_name']}: "
                    f"{r['outcome']} after {r['latency_ms']} ms ({r['event_id']})",
                }
            )
    for r in _table(output, TableName.ROUTING_DECISIONS, message_id=message_id):
        steps.append(
            {
                "at": r["decided_at"],
                "what": "routing decision",
                "text": f"attempt {r['attempt']} failed on {r['failed_broker']}; {r['scope']} "
                f"scope ({r['scope_key']}) picks {r['selected_broker']}/{r['selected_queue_id']} "
                f"by rule {r['rule']}",
            }
        )
    for r in _table(output, TableName.SCHEDULE_ENTRIES, message_id=message_id):
        steps.append(
            {
                "at": r["store_time"],
                "what": "delay queue",
                "text": f"{r['source']}: into SCHEDULE_TOPIC_XXXX level {r['delay_level']} "
                f"(queue {r['schedule_queue_id']}) for {r['real_topic']}, "
                f"due {iso(r['deliver_at'])}",
            }
        )
    for r in _table(output, TableName.REDELIVERIES, message_id=message_id):
        where = "the DLQ" if r["dlq"] else "its topic"
        steps.append(
            {
                "at": r["deliver_at"],
                "what": "redelivery",
                "text": f"released to {where}: {r['target_topic']} (Kafka {r['kafka_topic']})",
            }
        )
    if not steps:
        raise ExplainError(
            f"--message-id {message_id}: no attempt, delay entry or redelivery in {output}"
        )
    order = {"attempt": 0, "routing decision": 1, "delay queue": 2, "redelivery": 3}
    return sorted(steps, key=lambda s: (s["at"], order[s["what"]]))


def transaction(output: Path, transaction_id: str, cluster: str | None) -> dict[str, Any]:
    """Every change of a transactional message, in the order the job made them: the state, the
    rule that made it (``reason``), the broker, the checks so far, the next check and, for a
    producer's answer to a check, the answer and the broker that asked."""
    rows = _table(output, TableName.TRANSACTIONS, transaction_id=transaction_id)
    if not rows:
        raise ExplainError(
            f"--transaction {transaction_id}: no such transaction in {output} (give a "
            "transaction_id of the transactions table, or the message_id of a half message sent "
            "without one)"
        )
    clusters = sorted({r["cluster"] for r in rows})
    if cluster is None:
        if len(clusters) > 1:
            raise ExplainError(
                f"transaction {transaction_id} is in clusters {', '.join(clusters)}: give --cluster"
            )
        cluster = clusters[0]
    elif cluster not in clusters:
        raise ExplainError(
            f"--transaction {transaction_id}: not in cluster {cluster}; it is in "
            f"{', '.join(clusters)}"
        )
    mine = sorted((r for r in rows if r["cluster"] == cluster), key=_change_order)
    first, last = mine[0], mine[-1]
    changes = []
    for r in mine:
        answered = ANSWERED.match(r["reason"] or "")
        changes.append(
            {
                "at": r["effective_at"],
                "state": r["state"],
                "broker": r["broker_name"],
                "check_times": r["check_times"],
                "next_check_at": r["next_check_at"],
                "reason": r["reason"],
                "answer": str(ANSWERS[r["state"]]) if answered and r["state"] in ANSWERS else None,
                "asked_by": answered.group(1) if answered else None,
                "cause_event_id": r["cause_event_id"],
                "notify": r["notify"],
            }
        )
    return {
        "transaction_id": transaction_id,
        "cluster": cluster,
        **{k: first[k] for k in ("message_id", "producer_id", "producer_group", "topic")},
        "broker": first["broker_name"],
        "born_at": first["born_at"],
        "profile": first["profile"],
        "state": last["state"],
        "waiting": last["next_check_at"] is not None,
        "changes": changes,
    }


def _change_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """The order the engine makes a transaction's changes at one instant
    (``udfs.engine._transactions.transact``): the broker's wake (no cause event) before the events
    at its time, a half message's send before its end, in event order; the row that settles it
    last."""
    return (
        row["effective_at"],
        row["cause_event_id"] is not None,
        row["state"] != TransactionState.PREPARED,
        row["cause_event_id"] or "",
        row["next_check_at"] is None,
    )


def print_transaction(answer: dict[str, Any], out: TextIO) -> None:
    print(
        f"transaction {answer['transaction_id']} of {answer['cluster']}: message "
        f"{answer['message_id']} from {answer['producer_id']} ({answer['producer_group']}) to "
        f"{answer['topic']} on {answer['broker']}, born {iso(answer['born_at'])} "
        f"({answer['profile']})",
        file=out,
    )
    for c in answer["changes"]:
        upcoming = (
            f"next check {iso(c['next_check_at'])}" if c["next_check_at"] is not None else "settled"
        )
        said = f", answered {c['answer']}" if c["answer"] else ""
        cause = f" ({c['cause_event_id']})" if c["cause_event_id"] else ""
        print(
            f"  {iso(c['at'])} {c['state']:<25} on {c['broker']}, checks {c['check_times']}"
            f"{said}, {upcoming}: {c['reason']}{cause}",
            file=out,
        )
    last = answer["changes"][-1]
    if answer["waiting"]:
        print(f"  waiting: the broker checks it next at {iso(last['next_check_at'])}", file=out)
    else:
        print(f"  settled: {answer['state']} at {iso(last['at'])}", file=out)


def print_broker(answer: dict[str, Any], out: TextIO) -> None:
    scope = answer["scope"] if answer["scope"] == "cluster" else f"producer {answer['scope_key']}"
    state = "AVAILABLE" if answer["available"] else "NOT AVAILABLE"
    if "state" in answer:
        until = f" until {iso(answer['state_until'])}" if answer["state_until"] else ""
        state += f" ({answer['state']}{until})"
    print(
        f"{answer['broker']} at {iso(answer['at'])}, {scope} scope of {answer['cluster']}: {state}",
        file=out,
    )
    item = answer["fault_item"]
    if item is None:
        print("  no FaultItem for it by then: never reported in this scope", file=out)
    else:
        held = item["available_from"] > item["updated_at"]  # else its last update isolated none
        print(
            f"  FaultItem: latency {item['latency_ms']} ms, "
            + (f"not available until {iso(item['available_from'])}" if held else "no isolation")
            + f" (last updated by event {item['updated_by']} at {iso(item['updated_at'])}, "
            f"{item['profile']})",
            file=out,
        )
    setter = answer["set_by"]
    if setter is not None:
        print(
            f"  set by {setter['event_id']} from {setter['producer_id']} at "
            f"{iso(setter['event_time'])}: "
            f"{setter['outcome']} after {setter['latency_ms']} ms (attempt {setter['attempt']}); "
            f"{setter['band']} -> not "
            f"available for {setter['not_available_ms']} ms ({setter['profile']}); {setter['rule']}"
            + ("; it came while an isolation was running" if setter["while_isolated"] else ""),
            file=out,
        )
    policy = answer.get("policy")
    if policy is not None:
        print(
            f"  policy: {policy['decision']} at {iso(policy['effective_at'])}{_until(policy)}: "
            f"{policy['reason']}",
            file=out,
        )
    ns = answer["nameserver"]
    beat = f"last heartbeat {iso(ns['last_heartbeat'])}"
    if ns["since"] is None:
        print(f"  NameServer: in the route (never dropped by then); {beat}", file=out)
    else:
        state = "back in the route" if ns["in_route"] else "dropped from the route"
        print(
            f"  NameServer: {state} since {iso(ns['since'])} (cause {ns['cause_event_id']}); "
            f"{beat}",
            file=out,
        )
    print("  decisions around it:", file=out)
    for d in answer["decisions"]:
        mark = "<=" if d["effective_at"] <= answer["at"] else "> "
        print(
            f"   {mark} {iso(d['effective_at'])} {d['decision']:<15} {d['reason']}{_until(d)}",
            file=out,
        )
    for t in answer.get("routing_tables", ()):
        print(
            f"  routing table of {t['topic']} since {iso(t['effective_at'])} "
            f"(cause {t['cause_event_id']}): {len(t['selectable'])} queues selectable",
            file=out,
        )
        print(f"    selectable: {queues_text(t['selectable']) or 'none'}", file=out)
        isolated = ", ".join(f"{i['broker_name']} until {iso(i['until'])}" for i in t["isolated"])
        print(f"    isolated: {isolated or 'none'}", file=out)


def _until(decision: dict[str, Any]) -> str:
    """`` until T`` for a decision that holds a broker out (isolated, outlier, probing) until T."""
    end = decision.get("available_from")
    return f" until {iso(end)}" if end is not None and end > decision["effective_at"] else ""


def queues_text(queues: list[dict[str, Any]]) -> str:
    """Queues as ``broker ids`` per broker, in their order, a run of ids as ``first-last``.

    >>> queues_text([{"broker_name": "a", "queue_id": q} for q in (0, 1, 2, 5)])
    'a 0-2,5'
    """
    parts: list[tuple[str, list[list[int]]]] = []
    for q in queues:
        broker, queue = q["broker_name"], int(q["queue_id"])
        if not parts or parts[-1][0] != broker:
            parts.append((broker, []))
        runs = parts[-1][1]
        if runs and runs[-1][1] == queue - 1:
            runs[-1][1] = queue
        else:
            runs.append([queue, queue])
    return ", ".join(
        f"{b} " + ",".join(f"{a}-{z}" if z > a else f"{a}" for a, z in runs) for b, runs in parts
    )


def explain_command(args: Any, out: TextIO = sys.stdout) -> int:
    output = Path(args.output)
    if not output.is_dir():
        raise ExplainError(f"--output {output}: no such folder; {OUTPUT_HINT}")
    if args.transaction:
        changes = transaction(output, args.transaction, args.cluster)
        if args.json:
            print(json.dumps(changes, indent=2), file=out)
        else:
            print_transaction(changes, out)
        return 0
    if args.message_id:
        steps = message_path(output, args.message_id)
        if args.json:
            print(json.dumps(steps, indent=2), file=out)
        else:
            print(f"message {args.message_id}:", file=out)
            for s in steps:
                print(f"  {iso(s['at'])} {s['what']}: {s['text']}", file=out)
        return 0
    if not args.broker or not args.at:
        raise ExplainError("give --broker B --at TIME, --message-id ID or --transaction ID")
    answer = broker_at(output, args.broker, parse_time(args.at), args.cluster, args.scope)
    if args.json:
        print(json.dumps(answer, indent=2), file=out)
    else:
        print_broker(answer, out)
    return 0
