"""The engine-alone benchmark runs the operator's step without Spark and prints its figures (it
is not timed)."""

from __future__ import annotations

import re

import pytest

from streaming.bench import engine as bench_engine


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
        r"steady: whole \d+\.\d\d s per batch \(first \d+\.\d\d, last \d+\.\d\d\), state "
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
