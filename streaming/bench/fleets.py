"""Any bad day at fleet scale: the engine's cost per event on a large fleet against a small one
with the same bad day in proportion, as a ratio of their speeds and of the state they write.

For each bad day, a small fleet (16 brokers, 20 producers) and a large one (1,000 brokers, 5,000
producers) that send about as many events (the producers' interval grows with their number):

- ``shipped``: the shipped ``fleet-16`` and ``fleet-1000`` scenarios (every fifth broker has a
  fault of its own, one after another);
- ``tenth-down``: one broker in ten down (REMOTING_EXCEPTION) for the whole traffic;
- ``fiftieth-slow``: one broker in fifty slow (600 to 900 ms) for the whole traffic;
- ``rolling``: a fifth of the brokers down for 30 s each, one after another across the traffic.

Each fleet's events are parsed in batches of ``--batch`` and run through the engine alone, one
key, as :mod:`streaming.bench.engine` does (the least CPU time of ``--runs`` runs; the first
batch and a last smaller one are left out as not steady; the two fleets take turns, run after
run, so that a slow minute of the machine falls on both). Prints per fleet its events, its
steady seconds per batch, events per second, state bytes per batch and decisions per 1,000
events (rows of ``broker_decisions``, ``routing_decisions`` and ``routing_table``), then per bad
day the large fleet's speed per event and state per batch over the small one's, and its decisions
per event over the small one's: each producer learns of each broker's fault alone, so a fleet of
5,000 producers decides far more often per event than one of 20. That line also gives what each
decision beyond the small fleet's costs, if those decisions make all the large fleet's extra
cost, and what each may cost for the large fleet to run at 0.8x the small one's speed per event.

    python -m streaming.bench.fleets [--days all | shipped,tenth-down,fiftieth-slow,rolling]
                                     [--batch 50000] [--runs 2] [--small 16x20] [--large 1000x5000]
                                     [--minutes 5] [--count] [--stages]

``--count`` counts instructions instead (:mod:`streaming.bench.counting`): the ratios come out
the same from run to run, whatever else the machine runs. ``--stages`` adds a line per bad day:
each stage's cost per steady batch in both fleets (the engine's stages by name, the state's
decoding and encoding as ``loads`` and ``dumps``, the output's tables as ``frames``, the rest as
``other``), the stages where the large fleet pays most beyond the small one first. Under
``--count`` each stage's reading has callgrind write out its counts, about forty times a batch:
the run takes well over twice as long.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from streaming.bench import counting
from streaming.bench import engine as bench_engine
from streaming.config import Scenario, engine_config, load_job_config
from udfs import engine
from udfs.vocabulary import TableName

DAYS = ("shipped", "tenth-down", "fiftieth-slow", "rolling")
SENDS_PER_S = 370
"""The fleet's sends per second, whatever its size (fleet-16's 20 producers every 54 ms)."""
PROFILES = ("rocketmq-4.7", "rocketmq-4.9", "rocketmq-5")
DECISIONS = (TableName.BROKER_DECISIONS, TableName.ROUTING_DECISIONS, TableName.ROUTING_TABLE)
"""The tables whose rows are decisions: a change of a broker's availability in a table, a
retry's queue, a change of a routing table."""
GOAL = 0.8
"""The large fleet's speed per event over the small one's that issue 50 asks for."""


class Measured(NamedTuple):
    events: int
    cost: float
    """Per steady batch, in the clock's unit."""
    state: float
    """Bytes per steady batch."""
    decisions: float
    """Rows of :data:`DECISIONS` per steady batch."""
    stages: dict[str, float]
    """Per steady batch, each stage's cost in the clock's unit, in its first run
    (:func:`streaming.bench.engine.staged`); empty unless asked for."""


def spread(count: int, share: int) -> list[int]:
    """``count // share`` (at least one) indexes of ``count`` brokers, spread evenly.

    >>> spread(16, 10), spread(1000, 50)[:3], spread(16, 50)
    ([4, 12], [25, 75, 125], [8])
    """
    k = max(1, round(count / share))
    return [int((j + 0.5) * count / k) for j in range(k)]


def fleet(day: str, brokers: int, producers: int, minutes: int) -> dict[str, Any]:
    """A scenario (as its YAML's mapping) of ``brokers`` and ``producers`` with ``day``'s faults
    in proportion; topics of at most 200 brokers, one consumer group each."""
    width = len(str(brokers - 1))
    names = [f"broker-{i:0{width}d}" for i in range(brokers)]
    per = min(200, max(4, brokers // 4))
    topics = [
        {"name": f"t-{t}", "brokers": names[at : at + per]}
        for t, at in enumerate(range(0, brokers, per))
    ]
    interval = max(1, round(producers * 1000 / SENDS_PER_S))
    senders = []
    for i in range(producers):
        p: dict[str, Any] = {
            "id": f"p-{i:04d}",
            "group": f"pg-{topics[i % len(topics)]['name']}",
            "profile": PROFILES[i % 3],
            "topic": topics[i % len(topics)]["name"],
            "interval": f"{interval}ms",
        }
        if i % 10 == 4:
            p["mode"] = "ASYNC"
        if i % 10 == 7:
            p["latency_fault_enable"] = False
        if i % 10 == 2:
            p.update(delay_every=25, delay_level=4)
        senders.append(p)
    traffic = minutes * 60
    faults: list[dict[str, Any]] = []
    if day == "tenth-down":
        faults = [
            {"type": "outage", "broker": names[i], "at": "0s", "for": f"{traffic}s"}
            for i in spread(brokers, 10)
        ]
    elif day == "fiftieth-slow":
        faults = [
            {"type": "slow", "broker": names[i], "at": "0s", "for": f"{traffic}s",
             "latency_ms": [600, 900]}
            for i in spread(brokers, 50)
        ]  # fmt: skip
    elif day == "rolling":
        down = spread(brokers, 5)
        step = (traffic - 30) / len(down)
        faults = [
            {"type": "outage", "broker": names[i], "at": f"{round(j * step * 1000)}ms",
             "for": "30s"}
            for j, i in enumerate(down)
        ]  # fmt: skip
    consumers = [
        {"group": f"cg-{t['name']}", "topic": t["name"], "lag": "40ms", "fail_every": 50,
         "fail_times": 2}
        for t in topics
    ]  # fmt: skip
    return {
        "name": f"{day}-{brokers}",
        "seed": brokers,
        "start": "2026-11-21T10:00:00Z",
        "duration": f"{minutes}m",
        "tail": "2m",
        "cluster": "FleetCluster",
        "brokers": [{"name": n, "write_queues": 4, "latency_ms": [3, 30]} for n in names],
        "topics": topics,
        "producers": senders,
        "consumers": consumers,
        "faults": faults,
    }


def measure(
    scenarios: list[str], batch: int, runs: int, clock: counting.Seconds, stages: bool = False
) -> list[Measured]:
    """Each scenario's (name or path) events, and its steady seconds (or what ``clock`` reads),
    state bytes and decisions per batch, and with ``stages`` its cost by stage. The scenarios
    take turns run after run, so that a slow minute of the machine falls on each, and each
    batch's time is the least of its ``runs``."""
    config = engine_config(load_job_config(None, {"source": "files", "path": "."}))
    parsed = [bench_engine._batches(scenario, 1, 1, batch) for scenario in scenarios]
    figures: list[list[Any]] = [[] for _ in scenarios]
    rows: list[list[dict[str, int]]] = [[] for _ in scenarios]
    costs: list[list[dict[str, float]]] = [[] for _ in scenarios]
    gc.collect()
    gc.freeze()  # the parsed batches stay: no collection walks them
    try:
        for run in range(runs):
            for (cluster, batches), runs_of, rows_of, costs_of in zip(
                parsed, figures, rows, costs, strict=True
            ):
                runs_of.append(
                    bench_engine._run(
                        cluster,
                        batches,
                        config,
                        [engine.WHOLE],
                        clock=clock,
                        rows=rows_of if run == 0 else None,
                        stages=costs_of if run == 0 and stages else None,
                    )
                )
    finally:
        gc.unfreeze()
    measured = []
    for (_, batches), runs_of, rows_of, costs_of in zip(parsed, figures, rows, costs, strict=True):
        whole = bench_engine._least(runs_of)
        steady = [b for b in range(1, len(batches)) if len(batches[b]) == len(batches[0])]
        steady = steady or list(range(len(batches)))
        by_stage: dict[str, float] = {}
        for b in steady if costs_of else ():
            for name, cost in costs_of[b].items():
                by_stage[name] = by_stage.get(name, 0.0) + cost
        measured.append(
            Measured(
                sum(len(b) for b in batches),
                sum(whole[b][0][0] for b in steady) / len(steady),
                sum(whole[b][0][2] for b in steady) / len(steady),
                sum(rows_of[b].get(t, 0) for b in steady for t in DECISIONS) / len(steady),
                {name: cost / len(steady) for name, cost in by_stage.items()},
            )
        )
    return measured


def _per_decision(small: Measured, large: Measured, clock: counting.Seconds) -> str:
    """What the large fleet's decisions beyond the small one's cost each, if they make all of
    its extra cost, and what each may cost for the large fleet to run at :data:`GOAL` of the
    small one's speed per event (the same events per batch)."""
    more = large.decisions - small.decisions
    ratio = large.decisions / small.decisions if small.decisions else float("inf")
    said = f"the large fleet makes {ratio:.1f}x the small one's decisions per event"
    if more <= 0:
        return f"{said}: its extra cost is not theirs"
    return (
        f"{said}; each decision more costs {clock.each((large.cost - small.cost) / more)} "
        f"if they make all its extra cost, and may cost "
        f"{clock.each(small.cost * (1 / GOAL - 1) / more)} for {GOAL}x"
    )


def _size(text: str) -> tuple[int, int]:
    brokers, _, producers = text.partition("x")
    return int(brokers), int(producers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", default="all", help=f"all, or some of {','.join(DAYS)}")
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--small", default="16x20", help="brokers x producers")
    parser.add_argument("--large", default="1000x5000", help="brokers x producers")
    parser.add_argument("--minutes", type=int, default=5, help="of traffic (made fleets)")
    parser.add_argument("--count", action="store_true", help="count instructions (callgrind)")
    parser.add_argument("--stages", action="store_true", help="also each stage's cost")
    args = parser.parse_args(argv)
    if args.count and not counting.inside():
        return counting.rerun("streaming.bench.fleets", sys.argv[1:] if argv is None else argv)
    clock = counting.clock()
    days = DAYS if args.days == "all" else tuple(args.days.split(","))
    unknown = sorted(set(days) - set(DAYS))
    if unknown:
        parser.error(f"unknown bad day {', '.join(unknown)}; the days are {', '.join(DAYS)}")
    print(
        f"engine alone, batches of {args.batch}, least {clock.name} of {args.runs} runs taken "
        "in turns; per fleet: events; steady cost per batch, events per cost, state B per batch"
    )
    with tempfile.TemporaryDirectory(prefix="faultline-bench-fleets-") as folder:
        for day in days:
            names = []
            for size in (args.small, args.large):
                brokers, producers = _size(size)
                if day == "shipped":
                    names.append("fleet-16" if brokers < 100 else "fleet-1000")
                    continue
                spec = fleet(day, brokers, producers, args.minutes)
                Scenario.model_validate(spec)  # a fleet this makes is a valid scenario
                path = Path(folder) / f"{spec['name']}.yaml"
                path.write_text(yaml.safe_dump(spec, sort_keys=False))
                names.append(str(path))
            measured = measure(names, args.batch, args.runs, clock, args.stages)
            for size, m in zip((args.small, args.large), measured, strict=True):
                print(
                    f"  {day:<13} {size:>10}: {m.events:>8,} events; {clock.span(m.cost)}, "
                    f"{clock.rate(args.batch, m.cost):>8}, {m.state:>12,.0f} B, "
                    f"{m.decisions * 1000 / args.batch:.1f} decisions per 1,000 events"
                )
            small, large = measured
            print(
                f"{day}: the large fleet runs at {small.cost / large.cost:.2f}x the small one's "
                f"speed per event, and writes {large.state / small.state:.2f}x its state per batch"
            )
            print(f"{day}: {_per_decision(small, large, clock)}")
            if args.stages:
                print(f"{day}: {_by_stage(small, large, clock)}")
    return 0


def _by_stage(small: Measured, large: Measured, clock: counting.Seconds) -> str:
    """Each stage's cost per steady batch in both fleets, the large fleet's extra first."""
    before = small.stages.get
    names = sorted(large.stages, key=lambda n: before(n, 0) - large.stages[n])
    both = [f"{n} {clock.short(before(n, 0))} / {clock.short(large.stages[n])}" for n in names]
    return f"by stage, small / large per steady batch in {clock.unit}: " + ", ".join(both)


if __name__ == "__main__":
    sys.exit(main())
