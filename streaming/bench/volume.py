"""What reporting in summaries saves: the records a scenario's producers and consumers send the
job, against the messages they stand for, over the whole run and outside its incidents.

    python -m streaming.bench.volume [--scenario volume] [--reporting summary]

Prints the messages sent (send attempts, as each producer made them), the records by kind, the
share of records to messages over the whole traffic and over the seconds of event time in which
no fault of the scenario is active ("outside incidents"), and the same for the seconds inside
them. A record counts inside when a fault is active in any second from its first send to its last
(a summary's span within its window; a full record's is its ``event_time``), with the messages
it stands for. The goals for ``--scenario volume``: at most 2% outside incidents, at most 10%
overall; for ``--scenario fleet-50``, at most 10% overall.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass

from streaming.config import Scenario, load_scenario
from streaming.sim.simulator import simulate
from udfs.vocabulary import EventKind

SENDS = (EventKind.SEND_RESULT, EventKind.SEND_SUMMARY)


@dataclass(frozen=True)
class Volume:
    """Records and the messages sent, over the traffic and split by incidents."""

    messages: int
    records: int
    kinds: dict[str, int]
    outside: tuple[int, int]
    """(records, messages sent) of the records whose seconds no fault is active in."""
    inside: tuple[int, int]

    @staticmethod
    def share(part: tuple[int, int]) -> float:
        return part[0] / max(part[1], 1)


def volume(scenario: Scenario) -> Volume:
    """The scenario's records and messages sent, during its traffic."""
    events = simulate(scenario)
    end = scenario.start + scenario.duration
    faults = [(scenario.start + f.at, scenario.start + f.at + f.duration) for f in scenario.faults]

    def incident(first: int, last: int) -> bool:
        """Whether a fault is active in a second from ``first`` to ``last``."""
        lo, hi = first // 1000 * 1000, last // 1000 * 1000 + 1000
        return any(lo < b and hi > a for a, b in faults)

    kinds: Counter[str] = Counter()
    counts = {True: [0, 0], False: [0, 0]}
    for e in events:
        t = int(e["event_time"])
        if t >= end:
            continue  # the tail: heartbeats and what the traffic left to settle
        kinds[e["kind"]] += 1
        first = int(e.get("first_time", e.get("window_start", t)))
        side = counts[incident(first, t)]
        side[0] += 1
        if e["kind"] in SENDS:
            side[1] += int(e.get("messages", 1))
    return Volume(
        messages=counts[True][1] + counts[False][1],
        records=counts[True][0] + counts[False][0],
        kinds=dict(kinds),
        outside=(counts[False][0], counts[False][1]),
        inside=(counts[True][0], counts[True][1]),
    )


def _line(name: str, part: tuple[int, int]) -> str:
    return f"{name}: {part[0]:,} records for {part[1]:,} messages sent, {Volume.share(part):.2%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scenario", default="volume")
    parser.add_argument("--reporting", choices=("full", "summary"))
    args = parser.parse_args(argv)
    scenario = load_scenario(args.scenario)
    if args.reporting is not None:
        scenario = scenario.model_copy(update={"reporting": args.reporting})
    v = volume(scenario)
    kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(v.kinds.items(), key=lambda e: -e[1]))
    print(f"scenario {args.scenario}, reporting {scenario.reporting}: {kinds}")
    print(_line("whole traffic", (v.records, v.messages)))
    print(_line("outside incidents", v.outside))
    print(_line("inside incidents", v.inside))
    return 0


if __name__ == "__main__":
    sys.exit(main())
