"""``faultline dashboard`` as a person uses it: the real job writes the tables while the page is
open in headless Chromium (Debian's ``chromium``, driven by Playwright); the dashboard runs in a
process of its own, the job in this one (``job``, tests/streaming/conftest.py)."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from deltalake import DeltaTable

from streaming.config import CONF_DIR, SCENARIO_DIR
from streaming.job.sink import create_tables, table_schema
from streaming.job.summary import delay_queues, isolation_windows, transaction_states
from streaming.sim.kafka_broker import free_port
from streaming.tools.dashboard.app import SLOWEST, iso
from streaming.tools.dashboard.screenshot import CHROMIUM, FLAGS
from streaming.tools.explain import parse_time
from streaming.tools.units import duration
from tests.streaming.conftest import Job, faultline, start
from tests.streaming.test_dashboard_data import _append, _decision, _send

T0 = 1_795_255_200_000  # the quick scenario's start, 2026-11-21 10:00:00 UTC
COUNTED = {
    "checks": ("CHECK",),
    "discarded or skipped": ("DISCARDED", "SKIPPED"),
    "ends to an unavailable broker": ("END_TO_UNAVAILABLE_BROKER",),
    "ends rejected": ("END_REJECTED",),
}
"""The transactions panel's counts over time, and the states each counts (docs/transactions.md,
"States")."""
OUTAGE = (T0 + 20_000, T0 + 32_000)  # quick.yaml: broker-a, -b and -c down at 20 s for 12 s


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[dev]'")
    if not shutil.which(CHROMIUM):
        pytest.fail(
            f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install -y chromium), "
            "or set FAULTLINE_CHROMIUM to a Chromium binary"
        )
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


def _serve(output: Path, cwd: Path) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = start("dashboard", "--output", str(output), "--port", str(port), "--refresh", "500ms",
                 cwd=cwd)  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return proc, url
        except OSError:
            assert proc.poll() is None, proc.communicate()[0]
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"the dashboard did not answer at {url}: {proc.communicate()[0]}")


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    return proc.communicate(timeout=30)[0]


def _rows(page: Any, selector: str) -> list[list[str]]:
    rows: list[list[str]] = page.eval_on_selector_all(
        f"{selector} tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.innerText))"
    )
    return rows


def _header(page: Any, selector: str) -> list[str]:
    cells: list[str] = page.eval_on_selector_all(
        f"{selector} th", "cells => cells.map(c => c.innerText)"
    )
    return cells


def _text(page: Any, selector: str, contains: str, timeout: float = 60_000) -> str:
    page.wait_for_function(
        "([s, t]) => (document.querySelector(s)?.innerText || '').includes(t)",
        arg=[selector, contains],
        timeout=timeout,
    )
    text: str = page.inner_text(selector)
    return text


def _transactions_shown(page: Any, out: Path) -> int:
    """Check the transactions panel against the ``transactions`` table: per broker, the half
    messages whose latest row waits for a next check, the oldest one's birth and age at the
    clock the page shows, the earliest next check; the rows of each counted state, in all and per
    minute of ``effective_at`` (the chart). Returns the half messages shown waiting."""
    rows = DeltaTable(str(out / "transactions")).to_pandas()
    latest: dict[str, dict[str, Any]] = {}
    for r in rows.sort_values("effective_at", kind="stable").to_dict("records"):
        settled = pd.isna(r["next_check_at"])
        kept = latest.get(r["transaction_id"])  # at one instant, the row that settles it is last
        if kept is None or (r["effective_at"], settled) >= (kept["effective_at"], kept["settled"]):
            latest[r["transaction_id"]] = {**r, "settled": settled}
    waiting: dict[str, list[dict[str, Any]]] = {}
    for r in latest.values():
        if not r["settled"]:
            waiting.setdefault(r["broker_name"], []).append(r)
    assert sum(map(len, waiting.values())) == transaction_states(out).get("WAITING", 0)
    clock_text = page.inner_text("#status").split("clock ")[1].split(" UTC")[0]
    clock = parse_time(clock_text)
    assert T0 < clock <= int(DeltaTable(str(out / "batches")).to_pandas()["clock"].max())
    expected = [
        [
            broker,
            str(len(mine)),
            iso(min(r["born_at"] for r in mine)),
            duration((clock - min(r["born_at"] for r in mine)) / 1000),
            iso(min(r["next_check_at"] for r in mine)),
        ]
        for broker, mine in sorted(waiting.items())
    ]
    if expected:
        assert f"at the clock, {clock_text}:" in page.inner_text("#transactions")
        assert _rows(page, "#transactions-waiting-table") == expected
    else:
        _text(page, "#transactions-waiting", f"No half message waiting at {clock_text}.")
    header = page.eval_on_selector_all(
        "#transactions-totals-table th", "cells => cells.map(c => c.innerText)"
    )
    assert header == list(COUNTED)
    totals = [str(int(rows["state"].isin(states).sum())) for states in COUNTED.values()]
    assert _rows(page, "#transactions-totals-table") == [totals]
    traces = page.evaluate(
        "[...document.getElementById('transaction-chart').querySelector('.js-plotly-plot')"
        "._fullData].map(t => [t.name, Array.from(t.x), Array.from(t.y)])"
    )
    drawn = {
        (name, int(pd.Timestamp(x).value // 1_000_000), int(y))
        for name, xs, ys in traces
        for x, y in zip(xs, ys, strict=True)
    }
    minutes = rows.assign(minute=rows["effective_at"] // 60_000 * 60_000)
    assert drawn == {
        (what, int(minute), int(n))
        for what, states in COUNTED.items()
        for minute, n in minutes[minutes["state"].isin(states)].groupby("minute").size().items()
    }
    return sum(map(len, waiting.values()))


@pytest.mark.jvm
def test_the_page_follows_a_running_job_and_shows_what_the_tables_hold(
    job: Job, browser: Any, tmp_path: Path
) -> None:
    """The job runs in this process, beside the page (the dashboard's own process)."""
    out, ck = tmp_path / "out", tmp_path / "ck"
    server, url = _serve(out, tmp_path)  # before the job: no tables yet
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        _text(page, "#problem", "no faultline tables here")

        ran: list[subprocess.CompletedProcess[str]] = []
        args = ("run", "--scenario", "quick", "--output", str(out), "--checkpoint", str(ck),
                "--max-records-per-batch", "100",
                "--config", str(CONF_DIR / "rocketmq-only.yaml"))  # fmt: skip
        running = threading.Thread(target=lambda: ran.append(job(*args, cwd=tmp_path)))
        running.start()
        seen_while_running, badges = set(), set()
        while running.is_alive():  # the page, never reloaded, follows the batches
            status = page.inner_text("#status")
            if "last batch" in status:
                seen_while_running.add(status.split("last batch ")[1].split()[0])
                badges.add(page.inner_text("#badge"))
            time.sleep(0.3)
        running.join()
        assert ran[0].returncode == 0, ran[0].stdout[-3000:] + ran[0].stderr[-3000:]
        last = max(DeltaTable(str(out / "batches")).to_pandas()["batch_id"])
        _text(page, "#status", f"last batch {last} committed")
        assert len(seen_while_running) >= 2, seen_while_running
        # the badge said the job was live while it ran, and says when it stopped once it has
        assert any(re.fullmatch(r"live · last commit [\d.]+ s ago", b) for b in badges), badges
        (kept,) = (out / "_job" / "runs").glob("*.json")
        _text(page, "#badge", f"stopped at {json.loads(kept.read_text())['ended']}")
        # the lag in days and hours (the scenario's clock is days behind the wall clock)
        lag = _text(page, "#health-text", "behind wall time")
        assert re.search(r"the clock is \d+ d \d+ h behind wall time", lag), lag
        # nothing wider than the page at 1,400 px: the reasons wrap
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
        assert _width(page, "#windows-table") <= 1400

        # the outage's brokers are isolated from within the outage, as the tables say
        shown = _rows(page, "#windows-table")
        assert _header(page, "#windows-table") == [
            "broker", "scope", "state", "from", "to", "length", "extended", "first reason"
        ]  # fmt: skip
        cluster_windows = [r for r in shown if r[1] == "cluster" and r[2] == "isolated"]
        expected = [
            [w["broker_name"], iso(w["start"]), iso(w["end"]) if w["end"] else "running"]
            for w in isolation_windows(out)
            if w["scope"] == "cluster"
        ]
        assert sorted([r[0], r[3], r[4]] for r in cluster_windows) == sorted(expected)
        for broker in ("broker-a", "broker-b", "broker-c"):  # quick.yaml: down at 20 s for 12 s
            assert any(
                r[0] == broker and "2026-11-21 10:00:20.000" <= r[3] < "2026-11-21 10:00:32.000"
                for r in cluster_windows
            ), (broker, cluster_windows)

        # the delay levels' counts are the tables' counts, in the run summary's order
        levels = delay_queues(out)
        assert _header(page, "#delay-table") == ["level", "scheduled", "released", "waiting",
                                                 "to DLQ"]  # fmt: skip
        assert "level, scheduled, released, waiting, to DLQ" in ran[0].stdout
        assert _rows(page, "#delay-table") == [
            [
                "DLQ at once" if level == 0 else f"level {level}",
                *(str(row[c]) for c in ("scheduled", "released", "waiting", "dlq")),
            ]
            for level, row in levels.iterrows()
        ]

        # the transactions: every one settled by the end, after checks, discards and a lost end
        assert _transactions_shown(page, out) == 0

        # clicking broker-a's isolation shows what `faultline explain` says
        bars = page.evaluate("document.getElementById('timeline').querySelector('.js-plotly-plot')"
                             ".data.find(t => t.name === 'isolated').customdata")  # fmt: skip
        index = next(i for i, (b, _, at) in enumerate(bars) if b == "broker-a" and at >= OUTAGE[0])
        bar = page.locator("#timeline g.trace.bars").first.locator("g.point").nth(index)
        box = bar.bounding_box()  # a person clicks where the bar is drawn
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        explained = _text(page, "#explain", "broker-a at")
        at = page.input_value("#explain-at")
        cli = job("explain", "--output", str(out), "--broker", "broker-a", "--at", at,
                  cwd=tmp_path)  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        assert explained.strip() == cli.stdout.strip()
        assert "cluster scope of QuickCluster: NOT AVAILABLE" in explained

        picture = tmp_path / "dashboard.png"
        page.screenshot(path=str(picture), full_page=True)
        assert picture.stat().st_size > 50_000
    finally:
        log = _stop(server)
    assert log.count("no faultline tables here") == 1, log  # said once, not at every refresh


@pytest.mark.jvm
def test_the_transactions_panel_shows_the_half_messages_waiting_and_their_age(
    job: Job, browser: Any, tmp_path: Path
) -> None:
    """The quick scenario cut 20 s after its traffic: the half messages answered UNKNOW and the
    one whose end went to a broker in the outage still wait for a check when the job ends."""
    quick = (SCENARIO_DIR / "quick.yaml").read_text()
    assert "\ntail: 11m\n" in quick
    scenario = tmp_path / "quick-cut.yaml"
    scenario.write_text(quick.replace("\ntail: 11m\n", "\ntail: 20s\n"))
    out = tmp_path / "out"
    ran = job("run", "--scenario", str(scenario), "--output", str(out),
              "--checkpoint", str(tmp_path / "ck"), "--max-records-per-batch", "1000000",
              "--config", str(CONF_DIR / "rocketmq-only.yaml"), cwd=tmp_path)  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    server, url = _serve(out, tmp_path)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        _text(page, "#transactions", "Half messages waiting for an end or a check")
        assert _transactions_shown(page, out) >= 2
        (kept,) = (out / "_job" / "runs").glob("*.json")
        _text(page, "#badge", f"stopped at {json.loads(kept.read_text())['ended']}")
        # the job killed mid-run leaves no end and a liveness mark that no one beats any more
        mark = json.loads((out / "_job" / "alive.json").read_text())
        shutil.rmtree(out / "_job" / "runs")
        (out / "_job" / "alive.json").write_text(json.dumps({**mark, "at": time.time() - 120}))
        badge = _text(page, "#badge", "stalled")
        assert re.fullmatch(r"stalled · last commit (\d+ min \d+ s|[\d.]+ s) ago", badge), badge
        assert page.get_attribute("#badge-text", "title").startswith("the job's last sign 2 min ")
    finally:
        _stop(server)
    # `faultline explain` says when the broker checks a waiting one next
    rows = DeltaTable(str(out / "transactions")).to_pandas()
    rows["settled"] = rows["next_check_at"].isna()
    last = rows.sort_values(["effective_at", "settled"], kind="stable").groupby("transaction_id")
    waiting = last.tail(1).query("not settled").iloc[0]
    cli = job("explain", "--output", str(out), "--transaction",
              waiting["transaction_id"], cwd=tmp_path)  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.splitlines()[-1] == (
        f"  waiting: the broker checks it next at {iso(waiting['next_check_at'])}"
    )


def _latency_brokers(page: Any) -> set[str]:
    names = page.evaluate(
        "[...document.getElementById('latency').querySelector('.js-plotly-plot')._fullData]"
        ".map(t => t.name)"
    )
    return {n.rsplit(" ", 1)[0] for n in names}


def test_states_told_apart_reasons_wrapped_and_the_slowest_brokers_drawn(
    browser: Any, tmp_path: Path
) -> None:
    """Tables written here (no Spark): seven brokers, one in each state other than available,
    reasons longer than the page is wide, a live job's mark."""
    out = tmp_path / "out"
    create_tables(out)
    t0 = T0
    p99 = {f"b-{i}": 10 * (i + 1) for i in range(7)}  # b-6 the slowest, b-0 the fastest
    sends = [
        _send(t0 + m * 60_000 + i, broker, ms if i == 0 else 2, n=m)
        for broker, ms in p99.items()
        for m in range(3)
        for i in range(20)
    ]
    long = "REMOTING_EXCEPTION after 3 ms (isolation): " + "connect to 10.0.0.1:10911 failed; " * 12
    decisions = [
        _decision(t0 + 1_000, "b-0", "ISOLATE", t0 + 200_000, long),
        _decision(t0 + 2_000, "b-1", "OUTLIER", t0 + 200_000, "latency outlier: mean 300 ms"),
        _decision(t0 + 3_000, "b-2", "ISOLATE", t0 + 200_000, "failed"),
        _decision(t0 + 3_000, "b-2", "PANIC", t0 + 3_000, "isolation cap 50%: kept"),
        _decision(t0 + 4_000, "b-3", "PROBE", t0 + 200_000, "recovery probing: 10%"),
        {**_decision(t0 + 5_000, "b-4", "ROUTE_EXPIRED", t0 + 5_000), "reason": "no heartbeat"},
    ]
    _append(out, "fault_items", sends, 0)
    _append(out, "broker_decisions", decisions, 0)
    now_ms = int(time.time() * 1000)
    batch = {"batch_id": 0, "input": 1, "valid": 1, "clock": t0 + 180_000, "write_ms": 5,
             "commit_ms": 1, "committed_at": now_ms}  # fmt: skip
    _append(out, "batches", [batch], 0)
    (out / "_job").mkdir()
    (out / "_job" / "alive.json").write_text(json.dumps({"at": time.time(), "batch_id": 0}))
    server, url = _serve(out, tmp_path)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        _text(page, "#now", "b-4")
        assert re.fullmatch(r"live · last commit [\d.]+ s ago", page.inner_text("#badge"))
        assert [r[:3] for r in _rows(page, "#windows-table")] == [
            ["b-0", "cluster", "isolated"],
            ["b-1", "cluster", "outlier"],
            ["b-2", "cluster", "panic-kept"],  # isolated and kept by the cap in one instant
            ["b-3", "cluster", "probing"],
            ["b-4", "cluster", "out of route"],
        ]
        assert [r[2] for r in _rows(page, "#now-table")] == [
            "isolated", "outlier", "panic-kept", "probing", "out of route"
        ]  # fmt: skip
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
        assert _width(page, "#windows-table") <= 1400
        # the five slowest brokers by p99, the rest on request
        slowest = {f"b-{i}" for i in range(7 - SLOWEST, 7)}
        assert _latency_brokers(page) == slowest
        assert "the 5 of 7 brokers with the highest p99" in page.inner_text("#latency-shown")
        page.get_by_label("every broker").check()
        page.wait_for_function(
            "document.getElementById('latency').querySelector('.js-plotly-plot')"
            "._fullData.length === 14"
        )
        assert _latency_brokers(page) == set(p99)
    finally:
        _stop(server)


@pytest.mark.jvm
def test_the_screenshot_script_pictures_a_real_run_at_1400_px(
    one_batch: Path, tmp_path: Path
) -> None:
    """As a person runs it (its own process: Playwright's sync API runs one per process)."""
    picture = tmp_path / "figures" / "dashboard.png"
    done = subprocess.run(
        [sys.executable, "-m", "streaming.tools.dashboard.screenshot",
         "--output", str(one_batch / "out"), "--to", str(picture)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(f"saved as {picture}")
    head = picture.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert width == 1400 and height > 2000, (width, height)  # the whole page


def test_tables_of_a_newer_faultline_get_a_page_that_says_so(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "out"
    DeltaTable.create(
        str(out / "fault_items"),
        schema=table_schema("fault_items"),
        description="faultline table format 99",
    )
    create_tables(out)
    server, url = _serve(out, tmp_path)
    try:
        page = browser.new_page()
        page.goto(url)
        text = _text(page, "#problem", "written by a newer faultline")
        assert "table format 99; this one reads format 4" in text
        assert "Traceback" not in page.content()
    finally:
        log = _stop(server)
    assert "written by a newer faultline (table format 99" in log


def test_a_bad_flag_stops_it_before_it_serves(tmp_path: Path) -> None:
    result = faultline("dashboard", "--output", str(tmp_path), "--refresh", "5x", cwd=tmp_path)
    assert result.returncode == 2
    assert "--refresh '5x': a duration is a whole number of ms" in result.stderr


def _width(page: Any, selector: str) -> float:
    """The element's drawn width, read from the live element once it has one (at most 5 s):
    the page draws its tables again at every refresh, and a box taken between two drawings is
    none."""
    drawn = page.wait_for_function(
        """s => {
            const e = document.querySelector(s);
            const width = e ? e.getBoundingClientRect().width : 0;
            return width > 0 ? width : null;
        }""",
        arg=selector,
        timeout=5_000,
    )
    return float(drawn.json_value())
