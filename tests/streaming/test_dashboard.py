"""``faultline dashboard`` as a person uses it: the real job writes the tables while the page is
open in headless Chromium (Debian's ``chromium``, driven by Playwright); the dashboard runs in a
process of its own, the job in this one (``job``, tests/streaming/conftest.py)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
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
from streaming.tools.dashboard.app import iso
from streaming.tools.explain import parse_time
from tests.streaming.conftest import Job, faultline, start

CHROMIUM = os.environ.get("FAULTLINE_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
"""Without the background-networking flags Chromium keeps dialling Google on a closed network."""
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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
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
            f"{(clock - min(r['born_at'] for r in mine)) / 1000:,.1f} s",
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
                "--max-records-per-batch", "200",
                "--config", str(CONF_DIR / "rocketmq-only.yaml"))  # fmt: skip
        running = threading.Thread(target=lambda: ran.append(job(*args, cwd=tmp_path)))
        running.start()
        seen_while_running = set()
        while running.is_alive():  # the page, never reloaded, follows the batches
            status = page.inner_text("#status")
            if "last batch" in status:
                seen_while_running.add(status.split("last batch ")[1].split()[0])
            time.sleep(0.3)
        running.join()
        assert ran[0].returncode == 0, ran[0].stdout[-3000:] + ran[0].stderr[-3000:]
        last = max(DeltaTable(str(out / "batches")).to_pandas()["batch_id"])
        _text(page, "#status", f"last batch {last} committed")
        assert len(seen_while_running) >= 2, seen_while_running

        # the outage's brokers are isolated from within the outage, as the tables say
        shown = _rows(page, "#windows-table")
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

        # the delay levels' counts are the tables' counts
        levels = delay_queues(out)
        assert _rows(page, "#delay-table") == [
            [
                "DLQ at once" if level == 0 else f"level {level}",
                *(str(row[c]) for c in ("scheduled", "waiting", "released", "dlq")),
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
