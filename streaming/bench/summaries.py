"""What a send summary costs the engine, against the sends it stands for: the marginal CPU time
per record of each, in the same scenario and the same batches.

The scenario is simulated twice, its producers reporting in full (``--repeat`` copies) and in
summaries (``--summary-repeat``: a summarized stream has about a fourteenth of the records, so
more copies give it more summaries and a steadier difference), parsed in batches of
``--batch``, and run through the engine alone, one key, as :mod:`streaming.bench.engine` does
(the least CPU time of ``--runs`` runs per batch). Each stream is run whole and again without
the records in question, in the same batches, the two in turn: the sends a summary replaces
(``SEND_OK`` first attempts) from the full stream, the ``send_summary`` records from the other.
The difference over the records left out is what one of them costs; the last line is a
summary's cost over a send's.

    python -m streaming.bench.summaries [--scenario default] [--repeat 20] [--summary-repeat 100]
                                        [--batch 50000] [--runs 3] [--count] [--stages]

``--count`` counts instructions instead (:mod:`streaming.bench.counting`), which the machine's
load does not move: a summary's cost over a send's comes out the same from run to run.
``--stages`` adds a line: a send's and a summary's cost by stage (as ``fleets --stages``), the
stages where a summary costs most beyond a send first.
"""

from __future__ import annotations

import argparse
import gc
import sys

import pandas as pd

from streaming.bench import counting
from streaming.bench import engine as bench_engine
from streaming.config import engine_config, load_job_config
from udfs import engine
from udfs.vocabulary import EventKind


def replaced(events: pd.DataFrame) -> pd.Series:
    """The sends a summary stands for: ``SEND_OK`` first attempts."""
    return (
        (events["kind"] == EventKind.SEND_RESULT)
        & (events["outcome"] == "SEND_OK")
        & (events["attempt"] == 0)
    )


def marginal(
    batches: list[pd.DataFrame],
    out: list[pd.Series],
    runs: int,
    clock: counting.Seconds,
    stages: dict[str, float] | None = None,
) -> tuple[int, float]:
    """How many records ``out`` names in ``batches``, and what each costs: the engine's time
    with them less its time without them, in the same batches, per record. The runs with and
    without them alternate, so that a slow minute of the machine falls on both, and each
    batch's time (or what ``clock`` reads) is the least of its ``runs``. ``stages`` receives
    the same difference per record by stage (:func:`streaming.bench.engine.staged`), each the
    least of the runs' sums over the batches."""
    left = [b[~o].reset_index(drop=True) for b, o in zip(batches, out, strict=True)]
    count = sum(int(o.sum()) for o in out)
    config = engine_config(load_job_config(None, {"source": "files", "path": "."}))
    cluster = str(batches[0]["cluster"].iloc[0])
    figures: dict[int, list[list[list[tuple[float, float, int]]]]] = {0: [], 1: []}
    staged: dict[int, list[dict[str, float]]] = {0: [], 1: []}
    gc.collect()
    gc.freeze()  # the parsed batches stay: no collection walks them
    try:
        for _ in range(runs):
            for which, stream in enumerate((batches, left)):
                costs: list[dict[str, float]] | None = [] if stages is not None else None
                figures[which].append(
                    bench_engine._run(
                        cluster, stream, config, [engine.WHOLE], clock=clock, stages=costs
                    )
                )
                if costs is not None:
                    summed: dict[str, float] = {}
                    for batch in costs:
                        for name, cost in batch.items():
                            summed[name] = summed.get(name, 0.0) + cost
                    staged[which].append(summed)
    finally:
        gc.unfreeze()
    whole, without = (sum(b[0][0] for b in bench_engine._least(figures[w])) for w in (0, 1))
    if stages is not None:
        least = [{n: min(r.get(n, 0.0) for r in staged[w]) for n in staged[w][0]} for w in (0, 1)]
        for name in least[0]:
            stages[name] = (least[0][name] - least[1].get(name, 0.0)) / max(count, 1)
    return count, (whole - without) / max(count, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="default")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--summary-repeat",
        type=int,
        default=100,
        help="copies for the summarized stream: about 1 record in 14 of the full one",
    )
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", action="store_true", help="count instructions (callgrind)")
    parser.add_argument("--stages", action="store_true", help="also each stage's share")
    args = parser.parse_args(argv)
    if args.count and not counting.inside():
        return counting.rerun("streaming.bench.summaries", sys.argv[1:] if argv is None else argv)
    clock = counting.clock()
    _, full = bench_engine._batches(args.scenario, args.repeat, 1, args.batch, "full")
    send_by: dict[str, float] | None = {} if args.stages else None
    summary_by: dict[str, float] | None = {} if args.stages else None
    sends, send_s = marginal(full, [replaced(b) for b in full], args.runs, clock, send_by)
    _, summarized = bench_engine._batches(
        args.scenario, args.summary_repeat, 1, args.batch, "summary"
    )
    kinds = [b["kind"] == EventKind.SEND_SUMMARY for b in summarized]
    summaries, summary_s = marginal(summarized, kinds, args.runs, clock, summary_by)
    print(
        f"engine alone, scenario {args.scenario} x{args.repeat} in full and "
        f"x{args.summary_repeat} in summaries, batches of {args.batch}, least {clock.name} of "
        f"{args.runs} runs"
    )
    print(f"  a send (SEND_OK, first attempt): {clock.each(send_s)}, over {sends:,} of them")
    print(f"  a send summary: {clock.each(summary_s)}, over {summaries:,} of them")
    print(f"a summary costs {summary_s / send_s:.2f}x a send")
    if send_by is not None and summary_by is not None:
        names = sorted(summary_by, key=lambda n: send_by.get(n, 0.0) - summary_by[n])
        both = [
            f"{n} {clock.each(send_by.get(n, 0.0))} / {clock.each(summary_by[n])}" for n in names
        ]
        print("by stage, a send / a summary (the summary's extra first): " + ", ".join(both))
    return 0


if __name__ == "__main__":
    sys.exit(main())
