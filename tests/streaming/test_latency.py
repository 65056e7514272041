"""The decision-latency measurement end to end: the real job on a Kafka broker, a low rate,
two incidents, each of which must bring its broker's isolation onto the decisions topic."""

from __future__ import annotations

import re
import time

import pytest

from streaming.bench import latency

pytestmark = pytest.mark.jvm

INCIDENT = re.compile(r"^incident (\d+): (broker-\d+) failing from .*: isolated after ([\d,]+) ms")


@pytest.mark.parametrize("floor", [False, True], ids=["job", "floor"])
def test_each_incident_gets_its_isolate_and_a_measured_latency(
    floor: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """Also with ``--floor``: the job's query with an operator that only isolates."""
    started = time.monotonic()
    code = latency.main(
        ["--rate", "500", "--seconds", "4", "--every", "1.5", "--fail-for", "0.5",
         "--incidents", "2", "--wait", "30", "--ready-timeout", "180"]
        + ["--floor"] * floor
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    measured = [m.groups() for m in map(INCIDENT.match, out.splitlines()) if m]
    assert [(n, b) for n, b, _ in measured] == [("1", "broker-0"), ("2", "broker-1")], out
    for _, _, ms in measured:
        assert 0 < int(ms.replace(",", "")) < 30_000, out
    # the floor's operator neither parses nor runs the engine; its decisions come all the same
    assert ("; the floor: " in out) is floor, out
    assert ("(receive 0, parse 0, engine 0, files 0; publish 0)" in out) is floor, out
    summary = [line for line in out.splitlines() if line.startswith("summary: ")]
    assert len(summary) == 1, out
    assert summary[0].startswith("summary: 2 incidents, 2 isolated; latency p50 "), out
    assert " p99 " in summary[0] and "published " in summary[0], out
    # where a batch's time goes, part by part, from the batches table
    lines = out.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("batch time, median of ")]
    parts = [re.match(r"  ([^:]+): ([\d,]+) ms", line) for line in lines[at + 1 : at + 6]]
    assert [m.group(1) for m in parts if m] == [
        "Spark around the sink",
        "the query but the operator",
        "the operator's busiest task",
        "Delta commits",
        "the rest of the sink",
    ], out
    assert time.monotonic() - started < 240
