"""One cluster's state between batches: a versioned JSON document, and its migrations."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from typing import Any, NamedTuple

from udfs.engine._config import CLUSTER, PRODUCER, Route
from udfs.rocketmq import TopicPublishInfo

STATE_VERSION = 4


def new_state() -> dict[str, Any]:
    return {
        "v": STATE_VERSION,
        "clock": None,
        "tables": {CLUSTER: {}, PRODUCER: {}},
        "producers": {},
        "routes": {},
        "heartbeats": {},
        "routing_table": {},
        "recorded_routes": {},
        "schedule": {},
        "seen": {},
    }


class Isolation(NamedTuple):
    """An isolation a stored FaultTable holds: ``key``'s table isolates ``broker`` until
    ``until``, set by the event ``cause``."""

    key: str
    broker: str
    until: int
    cause: str


def isolations(state: Mapping[str, Any], scope: str) -> list[Isolation]:
    """The isolations in a scope's stored tables (an item is ``[broker, latency, start,
    reachable, updated_at, isolating, cause]``), ended ones included: compare ``until`` with the
    clock."""
    return sorted(
        Isolation(key, it[0], int(it[2]), str(it[6]))
        for key, table in state["tables"][scope].items()
        for it in table["items"]
        if it[5]
    )


def dumps(state: Mapping[str, Any]) -> str:
    return json.dumps(state, separators=(",", ":"), sort_keys=True)


def loads(text: str) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(text)
    if state.get("v") == 1:  # version 1 kept no event ids: nothing applied before is known
        state = {**state, "v": 2, "seen": {}}
    if state.get("v") == 2:  # version 2 kept whole routes where version 3 keeps their digests
        state = {
            **state,
            "v": 3,
            "pubinfo": {k: _compact_pubinfo(p) for k, p in state["pubinfo"].items()},
            "routing_table": {
                k: {topic: digest(sig) for topic, sig in sigs.items()}
                for k, sigs in state["routing_table"].items()
            },
        }
    if state.get("v") == 3:  # version 3 kept publish infos in one map, not per producer
        state = _per_producer(state)
    if state.get("v") != STATE_VERSION:
        raise ValueError(
            f"state schema version {state.get('v')} is not {STATE_VERSION}: this checkpoint was "
            "written by another faultline version; start from a new checkpoint"
        )
    # added to version 4 with table format 3: a state from before has recorded no route yet
    state.setdefault("recorded_routes", {})
    return state


def digest(value: Any) -> str:
    """A short fingerprint of a JSON value: what the state keeps of a route or a routing table."""
    return text_digest(json.dumps(value, separators=(",", ":")))


def text_digest(text: str) -> str:
    """:func:`digest` of a value already written as compact JSON."""
    return text_hasher(text).hexdigest()


def text_hasher(text: str) -> hashlib.blake2b:
    """The hash of :func:`text_digest` fed with ``text``: a value's JSON text that starts with
    it can be digested from a copy, feeding only the rest."""
    return hashlib.blake2b(text.encode(), digest_size=12)


def _queues(route: Route) -> list[list[Any]]:
    """The queues of a fresh TopicPublishInfo for ``route``."""
    return [[q.broker_name, q.queue_id] for q in TopicPublishInfo.from_route(route).queues]


def _compact_pubinfo(pub: dict[str, Any]) -> dict[str, Any]:
    """A version 2 publish info (whole route and queues) as version 3 keeps it: the route's
    digest, and the queues only where they differ from the route's own."""
    route = tuple((b, int(w), int(p)) for b, w, p in pub["route"])
    queues = pub["queues"] if pub["queues"] != _queues(route) else None
    return {"route": digest(pub["route"]), "queues": queues, "index": pub["index"],
            "seed": pub["seed"]}  # fmt: skip


def rng(seed: int, *parts: object) -> random.Random:
    digest = hashlib.blake2b("\x1f".join(map(str, (seed, *parts))).encode(), digest_size=8)
    return random.Random(int.from_bytes(digest.digest(), "big"))


def _per_producer(state: dict[str, Any]) -> dict[str, Any]:
    """A version 3 state as version 4 keeps it: event ids in lists per second (not each with its
    time), and each producer's publish infos under the producer,
    with its last send taken as the state's clock (it is forgotten that long after the upgrade
    unless it sends again). Version 3 joined scope, scope key, producer and topic with ``|``;
    a producer id is told apart from the rest by the producers the state knows."""
    clusters = list(state["tables"][CLUSTER])
    known = set(state["tables"][PRODUCER])
    known |= {k.split("|")[1] for k in state["pubinfo"] if k.startswith(f"{PRODUCER}|")}
    producers: dict[str, dict[str, Any]] = {
        p: {"last": state["clock"], "eid": None, "pub": {}} for p in known
    }
    for pkey, pub in state["pubinfo"].items():
        scope, rest = pkey.split("|", 1)
        key = clusters[0] if scope == CLUSTER and clusters else rest.split("|", 1)[0]
        rest = rest[len(key) + 1 :]
        pid = max((p for p in known if rest.startswith(f"{p}|")), key=len, default=None)
        pid = pid if pid is not None else rest.split("|", 1)[0]
        topic = rest[len(pid) + 1 :]
        producers.setdefault(pid, {"last": state["clock"], "eid": None, "pub": {}})
        producers[pid]["pub"][f"{scope}|{topic}"] = pub
    seen: dict[str, list[str]] = {}
    for eid, t in sorted(state["seen"].items(), key=lambda e: e[1]):
        seen.setdefault(str(t // 1000), []).append(eid)
    state = {**state, "v": 4, "producers": producers, "seen": seen}
    del state["pubinfo"]
    return state
