"""The engine alone: what a key's step costs without Spark, one process, no contention.

Simulates a scenario (``--repeat`` copies one after another, played ``--speed`` times as fast, as
:mod:`streaming.bench.throughput` does), parses it in batches of ``--batch`` records, and runs each
batch through the state codec and :func:`udfs.engine.advance`, as the operator does: first as one
key doing all of the cluster's work, then as ``--shards`` keys splitting it (``stateful_shards``).
Each figure is the least CPU time over ``--runs`` runs (the machine is noisy; the least is the
cost the work itself sets). Prints, per batch: the events, the whole step's seconds (of which
the state's decoding and encoding), the state's bytes, then each shard's seconds and the slowest
shard's share of the whole; then the steady figures (every batch but the first, and but a last
batch smaller than the first); then the lead shard owning no producer (the cluster-wide work,
which no split of the producers takes off it: the least the slowest shard can cost); last, the
largest steady state by part (:func:`udfs.engine.footprint`).

    python -m streaming.bench.engine [--scenario fleet-1000] [--repeat 1] [--speed 1]
                                     [--batch 50000] [--shards 2] [--runs 3]

Parsing is left out: every shard parses every record (the Spark benchmark shows its cost)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from streaming.bench import counting
from streaming.bench import throughput as bench
from streaming.config import engine_config, load_job_config
from streaming.job.sources.files import list_files
from udfs import engine
from udfs.engine import _output
from udfs.parse import parse

STAGES = (
    "quarantine", "admit", "expand", "segments", "sends_of", "touch", "spent_budget",
    "next_steps", "follow", "record", "open_tables", "decide", "settle", "govern",
    "release_router", "publish", "schedule_batch", "transact", "remember_answers", "evict",
)  # fmt: skip
"""The stages :func:`udfs.engine.advance` calls by these names from its own module."""


def _batches(
    scenario: str, repeat: int, speed: int, size: int, reporting: str | None = None
) -> tuple[str, list[pd.DataFrame]]:
    """The scenario's cluster and its parsed events in batches of ``size`` (``reporting``: as
    :func:`streaming.bench.throughput._events`)."""
    with tempfile.TemporaryDirectory(prefix="faultline-bench-engine-") as folder:
        bench._events(scenario, repeat, Path(folder), speed, reporting=reporting)
        lines = [line for p in list_files(Path(folder)) for line in p.read_text().splitlines()]
    batches = []
    for at in range(0, len(lines), size):
        chunk = lines[at : at + size]
        n = len(chunk)
        batches.append(parse(chunk, [f"bench:{i}" for i in range(n)], [None] * n, [None] * n))
    cluster = str(batches[0]["cluster"][0].as_py()) if batches else ""
    return cluster, [b.to_pandas() for b in batches]


@dataclass(frozen=True)
class _LeadAlone(engine.Shard):
    """The lead shard owning no producer: the cluster-wide work alone, which no split of the
    producers takes off the lead (the least the slowest shard can cost)."""

    def owns(self, producer_id: str) -> bool:
        return False

    def mask(self, producer_ids: np.ndarray | pd.Series) -> np.ndarray:
        return np.zeros(len(producer_ids), dtype=bool)


def _shards(count: int) -> list[engine.Shard]:
    return [engine.Shard(i, count) for i in range(count)] if count > 1 else [engine.WHOLE]


@contextlib.contextmanager
def staged(clock: counting.Seconds, costs: dict[str, float]) -> Iterator[None]:
    """While open, each stage of the engine (:data:`STAGES`, and the output's tables made at
    the end, ``frames``) adds what it costs on ``clock`` to ``costs``: its function is wrapped in
    the engine's module, and put back on leaving."""

    def timed(name: str, stage: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            started = clock.read()
            try:
                return stage(*args, **kwargs)
            finally:
                costs[name] = costs.get(name, 0.0) + clock.read() - started

        return run

    kept = {name: getattr(engine, name) for name in STAGES}
    frames = _output.Out.frames
    try:
        for name, stage in kept.items():
            setattr(engine, name, timed(name, stage))
        _output.Out.frames = timed("frames", frames)  # type: ignore[method-assign]
        yield
    finally:
        for name, stage in kept.items():
            setattr(engine, name, stage)
        _output.Out.frames = frames  # type: ignore[method-assign]


def _run(
    cluster: str,
    batches: list[pd.DataFrame],
    config: engine.EngineConfig,
    shards: list[engine.Shard],
    parts: list[dict[str, int]] | None = None,
    clock: counting.Seconds = counting.CPU_TIME,
    rows: list[dict[str, int]] | None = None,
    stages: list[dict[str, float]] | None = None,
) -> list[list[tuple[float, float, int]]]:
    """Per batch, per shard: (seconds, of which the state's, state bytes); or what ``clock``
    reads instead of seconds. ``parts`` receives the first shard's state by part after each
    batch (:func:`udfs.engine.footprint`), ``rows`` its rows per table, ``stages`` its cost by
    stage (:func:`staged`; the state's decoding and encoding as ``loads`` and ``dumps``, and
    what no stage takes as ``other``)."""
    saved: dict[int, str] = {}
    figures = []
    for events in batches:
        row = []
        for index, shard in enumerate(shards):
            costs: dict[str, float] = {}
            gc.disable()  # as the operator runs a step
            started = clock.read()
            state = engine.loads(saved[index]) if index in saved else None
            loaded = clock.read()
            timing = stages is not None and index == 0
            with staged(clock, costs) if timing else contextlib.nullcontext():
                step = engine.advance(cluster, state, events, config, shard)
            stepped = clock.read()
            saved[index] = engine.dumps(step.state)
            done = clock.read()
            gc.enable()
            row.append((done - started, loaded - started + done - stepped, len(saved[index])))
            if parts is not None and index == 0:
                parts.append(engine.footprint(step.state))
            if rows is not None and index == 0:
                rows.append({name: len(table) for name, table in step.tables.items()})
            if timing:
                assert stages is not None
                costs["other"] = stepped - loaded - sum(costs.values())
                costs.update(loads=loaded - started, dumps=done - stepped)
                stages.append(costs)
        figures.append(row)
    clock.pause()
    return figures


def _least(
    runs: list[list[list[tuple[float, float, int]]]],
) -> list[list[tuple[float, float, int]]]:
    return [
        [min((r[b][s] for r in runs), key=lambda f: f[0]) for s in range(len(runs[0][b]))]
        for b in range(len(runs[0]))
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="fleet-1000")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--speed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    config = engine_config(load_job_config(None, {"source": "files", "path": "."}))
    cluster, batches = _batches(args.scenario, args.repeat, args.speed, args.batch)
    gc.collect()
    gc.freeze()  # the parsed batches stay: no collection walks them
    parts: list[dict[str, int]] = []
    whole = _least(
        [
            _run(cluster, batches, config, _shards(1), parts if r == 0 else None)
            for r in range(args.runs)
        ]
    )
    split = _least([_run(cluster, batches, config, _shards(args.shards)) for _ in range(args.runs)])
    lead: list[engine.Shard] = [_LeadAlone(0, max(args.shards, 2))]
    alone = _least([_run(cluster, batches, config, lead) for _ in range(args.runs)])
    print(
        f"engine alone, scenario {args.scenario} x{args.repeat}"
        f"{f' at {args.speed}x speed' if args.speed > 1 else ''}: "
        f"{sum(len(b) for b in batches)} events in batches of at most {args.batch}, "
        f"least CPU time of {args.runs} runs; one key, then {args.shards} shards"
    )
    print("per batch: events; whole step s (state s), state bytes; each shard's s; slowest share")
    for b, events in enumerate(batches):
        (seconds, state, size), shards = whole[b][0], split[b]
        slowest = max(s for s, _, _ in shards)
        print(
            f"  batch {b:>3}: {len(events):>7}; {seconds:>5.2f} ({state:.2f}), {size:>10,} B; "
            + " ".join(f"{s:.2f}" for s, _, _ in shards)
            + f"; {slowest / max(seconds, 1e-9):.2f}"
        )
    # every batch but the first, and but a last one smaller than the others (a scenario's tail)
    steady = [b for b in range(1, len(batches)) if len(batches[b]) == len(batches[0])]
    steady = steady or list(range(len(batches)))
    one = [whole[b][0][0] for b in steady]
    worst = [max(s for s, _, _ in split[b]) for b in steady]
    written = [whole[b][0][2] for b in steady]
    print(
        f"steady: whole {sum(one) / len(one):.3f} s per batch (first {one[0]:.3f}, last "
        f"{one[-1]:.3f}), state {sum(written) / len(written):,.0f} B per batch (largest "
        f"{max(written):,}); slowest of {args.shards} shards: {sum(worst) / sum(one):.2f} of the "
        "whole"
    )
    least = sum(alone[b][0][0] for b in steady)
    print(
        f"the lead alone (the cluster-wide work, owning no producer): {least / len(steady):.2f} s "
        f"per batch, {least / sum(one):.2f} of the whole: the least the slowest shard can cost"
    )
    largest = max(steady, key=lambda b: whole[b][0][2])
    kept = sorted(parts[largest].items(), key=lambda p: -p[1])
    print(
        f"state of batch {largest} by part (compressed apart, as text): "
        + ", ".join(f"{name} {size:,} B" for name, size in kept[:4])
        + f", the rest {sum(size for _, size in kept[4:]):,} B"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
