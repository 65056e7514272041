"""How long ``faultline evaluate`` takes per row: each scenario's rows run one at a time, in
one process, at the scenario's decision delay, timed on the wall clock (the limit a user
waits for; the goal is 5 minutes a row on these 2 cores). Prints per scenario its producers and
decision delay, each row's seconds, and the slowest row; last, the slowest row of all.

    python -m streaming.bench.evaluate [--scenarios all | quick,fleet-16,...] [--rows all | own,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from streaming.config import SCENARIO_DIR, engine_config, load_job_config, load_scenario
from streaming.tools import evaluate
from udfs import engine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="all")
    parser.add_argument("--rows", default="all")
    parser.add_argument("--config", default=None)
    args = parser.parse_args(argv)
    names = (
        sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))
        if args.scenarios == "all"
        else args.scenarios.split(",")
    )
    config = dataclasses.replace(
        engine_config(load_job_config(args.config)), scopes=(engine.CLUSTER,)
    )
    rows = [r[0] for r in evaluate._runs(config)] if args.rows == "all" else args.rows.split(",")
    slowest: tuple[float, str] = (0.0, "")
    for name in names:
        scenario = load_scenario(name)
        producers = sum(1 for spec in scenario.producers for _ in spec.expand())
        print(f"{name}: {producers:,} producers, decision delay {scenario.decision_delay} ms")
        took = []
        for row in rows:
            started = time.perf_counter()
            evaluate.evaluate(scenario, scenario.decision_delay, config, rows=[row])
            took.append((time.perf_counter() - started, row))
            print(f"  {row:<28} {took[-1][0]:>7.1f} s", flush=True)
        worst = max(took)
        print(f"  slowest: {worst[1]}, {worst[0]:.1f} s")
        slowest = max(slowest, (worst[0], f"{name} / {worst[1]}"))
    print(f"slowest row of all: {slowest[1]}, {slowest[0]:.1f} s (goal: 300 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
