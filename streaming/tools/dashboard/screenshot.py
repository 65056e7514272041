"""The dashboard's picture for the README and the docs, taken from a real job output in headless
Chromium: ``python -m streaming.tools.dashboard.screenshot --output OUT --to
docs/figures/dashboard.png``. It serves the page over ``OUT`` on a free port (``faultline
dashboard``, a process of its own), opens it at :data:`WIDTH` px, waits until the page shows the
last batch and its charts are drawn, and saves the whole page as PNG.

Chromium is Debian's ``chromium`` (or ``FAULTLINE_CHROMIUM``), driven by Playwright
(``pip install -e '.[dev]'``)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from streaming.sim.kafka_broker import free_port
from udfs.errors import ConfigError

WIDTH = 1_400
"""The page's width in the picture (px), the width the page is laid out for."""
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
CHARTS = ("timeline", "latency", "health")
"""The charts that must be drawn before the picture is taken."""


def serve(output: Path, port: int, timeout: float = 60) -> subprocess.Popen[str]:
    """``faultline dashboard`` over ``output`` on ``port``, once it answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streaming.cli", "dashboard", "--output", str(output),
         "--port", str(port), "--refresh", "1s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise ConfigError(f"the dashboard stopped: {proc.communicate()[0]}") from None
            time.sleep(0.2)
    proc.kill()
    raise ConfigError(f"the dashboard did not answer at {url} within {timeout:.0f} s")


def screenshot(output: Path, to: Path, width: int = WIDTH, timeout: float = 60) -> Path:
    """Save the page over ``output`` as the PNG ``to``, ``width`` px wide; returns ``to``."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise ConfigError("playwright is not installed: pip install -e '.[dev]'") from None
    if not Path(CHROMIUM).exists():
        raise ConfigError(
            f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install -y "
            "chromium), or set FAULTLINE_CHROMIUM to a Chromium binary"
        )
    if not (output / "batches" / "_delta_log").is_dir():
        raise ConfigError(f"--output {output}: no faultline tables here")
    port = free_port()
    server = serve(output, port, timeout)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                page = browser.new_page(viewport={"width": width, "height": 1000})
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_function(
                    "(ids) => (document.getElementById('status')?.innerText || '')"
                    ".includes('last batch') && ids.every(id => document.getElementById(id)"
                    "?.querySelector('.js-plotly-plot')?._fullData?.length)",
                    arg=list(CHARTS),
                    timeout=timeout * 1000,
                )
                page.wait_for_timeout(500)  # the charts' transitions
                to.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(to), full_page=True)
            finally:
                browser.close()
    finally:
        server.terminate()
        server.communicate(timeout=30)
    return to


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streaming.tools.dashboard.screenshot",
        description="Save the dashboard over a job's output as a PNG, in headless Chromium.",
    )
    parser.add_argument("--output", required=True, type=Path, help="a faultline job's --output")
    parser.add_argument("--to", required=True, type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"px (default {WIDTH})")
    args = parser.parse_args(argv)
    try:
        saved = screenshot(args.output, args.to, args.width)
    except ConfigError as exc:
        print(f"faultline: {exc}", file=sys.stderr)
        return 2
    print(f"faultline: the dashboard over {args.output} saved as {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
