"""The engine-alone benchmark runs the operator's step without Spark and prints its figures (it
is not timed)."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from streaming.bench import counting, evaluate, fleets, summaries
from streaming.bench import engine as bench_engine
from streaming.config import engine_config, load_job_config
from udfs import engine
from udfs.engine._output import Out
from udfs.engine._routing import decide
from udfs.vocabulary import EventKind

frames = Out.frames


def test_it_prints_each_batch_whole_and_sharded_then_the_steady_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--scenario", "quick", "--batch", "700", "--runs", "1", "--shards", "3"]
    assert bench_engine.main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("engine alone, scenario quick x1: 1813 events in batches of at")
    rows = [x for x in lines if re.match(r"\s+batch\s+\d+:", x)]
    # quick has 1,813 events: batches of 700, 700 and 413, each with three shards' times
    assert [int(x.split()[2].rstrip(";")) for x in rows] == [700, 700, 413]
    for row in rows:
        assert re.fullmatch(
            r"\s+batch\s+\d: +\d+; +\d+\.\d\d \(\d+\.\d\d\), +[\d,]+ B; (\d+\.\d\d ){2}\d+\.\d\d; "
            r"\d+\.\d\d",
            row,
        ), row
    assert re.fullmatch(
        r"steady: whole \d+\.\d{3} s per batch \(first \d+\.\d{3}, last \d+\.\d{3}\), state "
        r"[\d,]+ B per batch \(largest [\d,]+\); slowest of 3 shards: \d+\.\d\d of the whole",
        lines[-3],
    )
    assert re.fullmatch(
        r"the lead alone \(the cluster-wide work, owning no producer\): \d+\.\d\d s per batch, "
        r"\d+\.\d\d of the whole: the least the slowest shard can cost",
        lines[-2],
    )
    # the state by part, largest first: quick's repeat ids are most of it
    parts = re.fullmatch(
        r"state of batch \d by part \(compressed apart, as text\): (.*)", lines[-1]
    )
    assert parts is not None, lines[-1]
    *named, rest = parts.group(1).split(", ")
    found = [re.fullmatch(r"(\w+) ([\d,]+) B", p) for p in named]
    assert all(found) and re.fullmatch(r"the rest [\d,]+ B", rest), parts.group(1)
    assert found[0].group(1) == "seen"  # type: ignore[union-attr]
    sizes = [int(m.group(2).replace(",", "")) for m in found]  # type: ignore[union-attr]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 0


def test_the_fleets_bad_days_are_measured_small_against_large(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Made fleets of a few brokers, each bad day in proportion: a line per fleet, then the
    large fleet's speed per event and state per batch over the small one's."""
    args = ["--days", "tenth-down,rolling", "--small", "8x10", "--large", "40x50",
            "--batch", "2000", "--runs", "1", "--minutes", "1"]  # fmt: skip
    assert fleets.main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    expected = []
    for day in ("tenth-down", "rolling"):
        for size in ("8x10", "40x50"):
            expected.append(
                rf"  {day} +{size}: +[\d,]+ events; \d+\.\d\d s, +[\d,]+/s, +[\d,]+ B, "
                r"\d+\.\d decisions per 1,000 events"
            )
        expected.append(
            rf"{day}: the large fleet runs at \d+\.\d\dx the small one's speed per event, and "
            r"writes \d+\.\d\dx its state per batch"
        )
        expected.append(
            rf"{day}: the large fleet makes \d+\.\dx the small one's decisions per event; each "
            r"decision more costs -?\d+\.\d us if they make all its extra cost, and may cost "
            r"\d+\.\d us for 0\.8x"
        )
    assert len(lines) == 1 + len(expected)
    for line, pattern in zip(lines[1:], expected, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)


def test_each_stage_of_a_step_is_priced_and_the_stages_add_up_to_the_step() -> None:
    cluster, batches = bench_engine._batches("quick", 1, 1, 700)
    config = engine_config(load_job_config(None, {"source": "files", "path": "."}))
    costs: list[dict[str, float]] = []
    figures = bench_engine._run(cluster, batches, config, [engine.WHOLE], stages=costs)
    assert len(costs) == len(figures) == 3
    named = {*bench_engine.STAGES, "frames", "loads", "dumps", "other"}
    for ((whole, _, _),), parts in zip(figures, costs, strict=True):
        assert {"admit", "open_tables", "decide", "settle", "publish", "frames"} <= parts.keys()
        assert parts.keys() <= named and {"loads", "dumps", "other"} <= parts.keys()
        assert min(parts.values()) >= -1e-9 and parts["open_tables"] > 0
        assert sum(parts.values()) == pytest.approx(whole)
    # the engine's own stages are put back: a step after it is not priced
    assert engine.decide is decide and Out.frames is frames


def test_the_fleets_stages_are_printed_the_large_fleets_extra_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--days", "tenth-down", "--small", "8x10", "--large", "40x50", "--batch", "2000",
            "--runs", "1", "--minutes", "1", "--stages"]  # fmt: skip
    assert fleets.main(args) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    found = re.fullmatch(r"tenth-down: by stage, small / large per steady batch in ms: (.*)", last)
    assert found is not None, last
    stages = [re.fullmatch(r"(\w+) ([\d,]+) / ([\d,]+)", part) for part in found[1].split(", ")]
    assert all(stages), found[1]
    names = [m[1] for m in stages if m is not None]
    assert {"decide", "open_tables", "loads", "dumps", "other"} <= set(names)
    extra = [int(m[3].replace(",", "")) - int(m[2].replace(",", "")) for m in stages if m]
    # the large fleet's largest extra first: each figure is rounded to 1 ms, its extra to 2
    assert extra[0] >= max(extra) - 2


def test_a_made_fleet_has_its_bad_day_in_proportion() -> None:
    small = fleets.fleet("tenth-down", 16, 20, 5)
    large = fleets.fleet("tenth-down", 1000, 5000, 5)
    assert (len(small["faults"]), len(large["faults"])) == (2, 100)
    assert [len(t["brokers"]) for t in large["topics"]] == [200] * 5
    assert small["producers"][0]["interval"] == "54ms"
    rolling = fleets.fleet("rolling", 1000, 5000, 5)["faults"]
    assert len(rolling) == 200 and rolling[-1]["at"] == "268650ms"  # the last ends by 5 min


def test_a_summary_is_priced_against_the_sends_it_stands_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--scenario", "quick", "--repeat", "2", "--summary-repeat", "2", "--batch", "1000",
            "--runs", "1"]  # fmt: skip
    assert summaries.main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == (
        "engine alone, scenario quick x2 in full and x2 in summaries, batches of 1000, least CPU "
        "time of 1 runs"
    )
    sends = re.fullmatch(
        r"  a send \(SEND_OK, first attempt\): -?\d+\.\d us, over ([\d,]+) of them", lines[1]
    )
    summarized = re.fullmatch(r"  a send summary: -?\d+\.\d us, over ([\d,]+) of them", lines[2])
    assert sends is not None and summarized is not None, lines
    # the summaries stand for fewer records than the sends they replace, and some of them
    assert 0 < int(summarized.group(1).replace(",", "")) < int(sends.group(1).replace(",", ""))
    assert re.fullmatch(r"a summary costs -?\d+\.\d\dx a send", lines[3])


def test_a_summarys_cost_by_stage_adds_up_to_its_cost(capsys: pytest.CaptureFixture[str]) -> None:
    _, batches = bench_engine._batches("quick", 1, 1, 1000, "summary")
    kinds = [b["kind"] == EventKind.SEND_SUMMARY for b in batches]
    stages: dict[str, float] = {}
    count, each = summaries.marginal(batches, kinds, 1, counting.CPU_TIME, stages)
    assert count > 0 and {"expand", "open_tables", "settle", "other"} <= set(stages)
    assert sum(stages.values()) == pytest.approx(each)
    args = ["--scenario", "quick", "--repeat", "1", "--summary-repeat", "1", "--batch", "1000",
            "--runs", "1", "--stages"]  # fmt: skip
    assert summaries.main(args) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    found = re.fullmatch(r"by stage, a send / a summary \(the summary's extra first\): (.*)", last)
    assert found is not None, last
    each_stage = r"(\w+) -?[\d.]+ us / -?[\d.]+ us"
    parts = [re.fullmatch(each_stage, part) for part in found[1].split(", ")]
    assert all(parts) and {"expand", "decide"} <= {m[1] for m in parts if m}, found[1]


def test_counted_a_summary_costs_more_than_a_send_and_less_than_three(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In instructions (``--count``), which the machine's load does not move: a summary is
    applied as two sends, its first and its last, so it costs more than one send; what a record
    costs once (its admission, its share of the batch) keeps it under three."""
    args = ["--scenario", "quick", "--repeat", "1", "--summary-repeat", "1", "--batch", "2000",
            "--runs", "1", "--count"]  # fmt: skip
    assert summaries.main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == (
        "engine alone, scenario quick x1 in full and x1 in summaries, batches of 2000, least "
        "instructions counted by callgrind of 1 runs"
    )
    send = re.fullmatch(
        r"  a send \(SEND_OK, first attempt\): ([\d,]+) instructions, over 541 of them", lines[1]
    )
    summary = re.fullmatch(r"  a send summary: ([\d,]+) instructions, over 78 of them", lines[2])
    assert send is not None and summary is not None, lines
    each, summarized = (int(m.group(1).replace(",", "")) for m in (send, summary))
    assert 10_000 < each < summarized < 3 * each
    assert lines[3] == f"a summary costs {summarized / each:.2f}x a send"


def test_the_sends_a_summary_stands_for_are_the_first_attempts_that_succeeded() -> None:
    events = pd.DataFrame(
        {
            "kind": ["send_result", "send_result", "send_result", "heartbeat"],
            "outcome": ["SEND_OK", "SEND_OK", "REMOTING_EXCEPTION", None],
            "attempt": [0, 1, 0, None],
        }
    )
    assert summaries.replaced(events).tolist() == [True, False, False, False]


def test_each_evaluate_row_is_timed_and_the_slowest_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert evaluate.main(["--scenarios", "quick", "--rows", "own,faultline"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "quick: 4 producers, decision delay 2000 ms"
    took = [re.fullmatch(rf"  {re.escape(row)} +(\d+\.\d) s", line)
            for row, line in zip(("own", "faultline"), lines[1:3], strict=True)]  # fmt: skip
    assert all(took), lines
    seconds = {
        row: float(m.group(1)) for row, m in zip(("own", "faultline"), took, strict=True) if m
    }
    worst = max(seconds, key=lambda row: seconds[row])
    assert lines[3] == f"  slowest: {worst}, {seconds[worst]:.1f} s"
    assert lines[4] == f"slowest row of all: quick / {worst}, {seconds[worst]:.1f} s (goal: 300 s)"
