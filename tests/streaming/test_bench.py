"""The benchmark runs end to end and prints what docs/ says it prints (it is not timed)."""

from __future__ import annotations

import re

import pytest

from streaming.bench import throughput as bench

pytestmark = pytest.mark.jvm


def test_bench_prints_steady_figures_a_breakdown_per_batch_and_the_ratio_last(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench.main(["--scenario", "quick", "--repeat", "1", "--batch", "700"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"steady ratio \(full job / pass-through\): \d+\.\d\d", lines[-1])
    for name in ("pass-through", "full job"):
        assert any(re.match(rf"\s*{name}: 3 batches, .* steady .* records/s", x) for x in lines)
    # quick has 1,813 events: batches of 700, 700 and 413, each with its six parts
    rows = [x for x in lines if re.match(r"\s+batch\s+\d+:", x)]
    assert [int(x.split()[2]) for x in rows] == [700, 700, 413]
    for row in rows:
        total, parts = row.split("=")[0].split()[-1], row.split("=")[1].split(";")[0]
        # six parts rounded to 0.01 s, and the total timed by the bench, not summed from them:
        # it also holds the commit of the batch's own `batches` row (20-60 ms, up to 110 ms seen
        # on a busy machine), so the parts come to the total less that commit at most
        rest = float(total) - sum(float(p) for p in parts.split("+"))
        assert -0.03 <= rest < max(0.15, 0.25 * float(total)), row
    # each batch's rows per table, on the line after it, largest first
    written = [lines[lines.index(row) + 1] for row in rows]
    for line in written:
        counts = re.fullmatch(r"\s+rows: ((\w+ [\d,]+)(, \w+ [\d,]+)*)", line)
        assert counts, line
        numbers = [int(c.split()[1].replace(",", "")) for c in counts.group(1).split(", ")]
        assert numbers == sorted(numbers, reverse=True) and numbers[0] > 0
        assert " fault_items " in f" {counts.group(1)} "
    # the quick scenario's one route, recorded once
    assert re.search(r"(rows: |, )routes 1(,|$)", written[0])
    assert re.fullmatch(r"busiest task's operator time, steady: \d+\.\d\d s per batch", lines[-2])
    assert re.fullmatch(
        r"state store hdfs: commit \d+\.\d\d s per batch steady, \d+\.\d MB in memory; "
        r"checkpoint \d+\.\d\d MB on disk after the run \(its state \d+\.\d\d MB\)",
        lines[-3],
    )


def test_the_floor_runs_the_same_query_with_an_operator_that_only_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--floor read``: the operator reads the records with Arrow's JSON reader and does
    nothing else (plain ``--floor`` skips the read; ``streaming.bench.latency --floor`` runs it)."""
    argv = ["--scenario", "quick", "--repeat", "1", "--batch", "700", "--floor", "read"]
    assert bench.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"steady ratio \(floor read / pass-through\): \d+\.\d\d", lines[-1])
    assert any(re.match(r"\s*floor read: 3 batches, .* steady .* records/s", x) for x in lines)
    rows = [x for x in lines if re.match(r"\s+batch\s+\d+:", x)]
    assert [int(x.split()[2]) for x in rows] == [700, 700, 413]  # every record reached it
    # it read them and did nothing else: no engine, files, commits or state
    assert all(
        re.search(r"\+  0\.00 \+  0\.00 \+  0\.00; +[0-9.]+; +0 in 0\.00 s$", x) for x in rows
    )


def test_fuzzed_input_is_measured_against_the_clean_events_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--fuzzed 0.6``: three fuzzed records to every two of the scenario's, then the same
    events without them; the last line is the ratio of the two steady rates."""
    assert bench.main(["--scenario", "quick", "--repeat", "1", "--batch", "1500",
                       "--fuzzed", "0.6"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"steady ratio \(fuzzed / clean\): \d+\.\d\d", lines[-1])
    # quick has 1,813 events: with 2,719 fuzzed records, 4,532 in batches of 1,500
    assert any("4532 records, 60% of them fuzzed" in x for x in lines)
    rows = [int(x.split()[2]) for x in lines if re.match(r"\s+batch\s+\d+:", x)]
    assert rows == [1500, 1500, 1500, 32]
    assert re.fullmatch(
        r"full job on the clean events alone: 2 batches, steady [\d,]+ records/s", lines[-2]
    )
    with pytest.raises(SystemExit):
        bench.main(["--fuzzed", "1"])


class _State:
    def update(self, value: tuple[str]) -> None:
        self.value = value


@pytest.mark.parametrize("read", [False, True], ids=["spark", "read"])
def test_the_floor_operator_reads_the_records_only_when_asked(read: bool) -> None:
    """The floor's function on its own: with ``read`` a record Arrow's reader cannot type fails
    it, so the read did happen; without, it only counts."""
    import pandas as pd

    good = '{"type": "heartbeat", "broker_name": "b", "event_time": 1}'
    frames = [pd.DataFrame({"value": [good, good.replace("1}", '"soon"}')]})]
    run = bench.floor(read=read)
    if read:
        with pytest.raises(ValueError, match="cannot type"):
            list(run(("c",), iter(frames), _State()))
    else:
        (frame,) = run(("c",), iter(frames), _State())
        assert frame["input"].tolist() == [2]
