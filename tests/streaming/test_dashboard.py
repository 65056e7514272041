"""``faultline dashboard`` as a person uses it: the real job writes the tables while the page is
open in headless Chromium (Debian's ``chromium``, driven by Playwright)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from streaming.config import CONF_DIR
from streaming.job.sink import create_tables, table_schema
from streaming.job.summary import delay_queues, isolation_windows
from streaming.tools.dashboard.app import iso
from tests.streaming.conftest import faultline, start

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


@pytest.mark.spark
def test_the_page_follows_a_running_job_and_shows_what_the_tables_hold(
    browser: Any, tmp_path: Path
) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    server, url = _serve(out, tmp_path)  # before the job: no tables yet
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        _text(page, "#problem", "no faultline tables here")

        job = start("run", "--scenario", "quick", "--output", str(out), "--checkpoint", str(ck),
                    "--max-records-per-batch", "200",
                    "--config", str(CONF_DIR / "rocketmq-only.yaml"), cwd=tmp_path)  # fmt: skip
        seen_while_running = set()
        while job.poll() is None:  # the page, never reloaded, follows the batches
            status = page.inner_text("#status")
            if "last batch" in status:
                seen_while_running.add(status.split("last batch ")[1].split()[0])
            time.sleep(0.3)
        assert job.returncode == 0, job.communicate()[0][-3000:]
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
        for broker in ("broker-a", "broker-b", "broker-c"):
            assert any(
                r[0] == broker and iso(OUTAGE[0]) <= r[3] < iso(OUTAGE[1]) for r in cluster_windows
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

        # clicking broker-a's isolation shows what `faultline explain` says
        bars = page.evaluate("document.getElementById('timeline').querySelector('.js-plotly-plot')"
                             ".data.find(t => t.name === 'isolated').customdata")  # fmt: skip
        index = next(i for i, (b, _, at) in enumerate(bars) if b == "broker-a" and at >= OUTAGE[0])
        bar = page.locator("#timeline g.trace.bars").first.locator("g.point").nth(index)
        box = bar.bounding_box()  # a person clicks where the bar is drawn
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        explained = _text(page, "#explain", "broker-a at")
        at = page.input_value("#explain-at")
        cli = faultline("explain", "--output", str(out), "--broker", "broker-a", "--at", at,
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
