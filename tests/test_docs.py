"""The documentation: a README that is a front door, and a site under ``docs/`` that builds with
``mkdocs build --strict`` (no broken link or anchor, no page left out of the navigation) without
the network, and whose pages say what the code does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from streaming.job.publish import DECISIONS_TOPIC

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
COMMANDS = (
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[job]' && .venv/bin/faultline run",
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && .venv/bin/python -m pytest",
)
"""The README's two commands for a fresh clone: the job on its default, and the tests (CI runs
the second, ``.ci/run``)."""


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    assert len(README.splitlines()) <= 300
    first = re.search(r"^```sh\n(.*?)^```", README, re.S | re.M)
    assert first is not None
    commands = [line for line in first.group(1).splitlines() if not line.startswith("#")]
    assert tuple(commands) == COMMANDS
    assert README.index("```sh") < README.index("\n## ")  # above every section
    assert COMMANDS[1] in (ROOT / ".ci" / "run").read_text()


def test_the_readme_links_to_pages_that_exist() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert (ROOT / link).is_file(), link


def test_the_site_builds_strictly_without_the_network(tmp_path: Path) -> None:
    nowhere = "http://127.0.0.1:9"  # a fetch at build time fails instead of reaching out
    env = {
        **os.environ,
        "NO_MKDOCS_2_WARNING": "1",
        **{name: nowhere for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")},
    }
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    for page in ("reference/tables", "reference/events", "reference/settings"):
        assert (tmp_path / "site" / page / "index.html").is_file(), page


def test_every_alert_has_its_runbook_page() -> None:
    rules = yaml.safe_load((ROOT / "conf" / "prometheus" / "alerts.yaml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.stem for p in (ROOT / "docs" / "runbook").glob("Faultline*.md")}
    assert pages == {alert["alert"] for alert in alerts}
    for alert in alerts:
        page = f"docs/runbook/{alert['alert']}.md"
        assert alert["annotations"]["runbook"].startswith(f"{page}: "), alert["alert"]
        assert f"runbook/{alert['alert']}.md" in nav
        text = (ROOT / page).read_text()
        assert text.startswith(f"# {alert['alert']}\n"), page
        assert f"**Severity:** {alert['labels']['severity']}." in text, page


def test_the_kafka_page_creates_the_decisions_topic_as_the_job_does() -> None:
    page = (ROOT / "docs" / "kafka.md").read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```", page, re.S | re.M)
    (create,) = [b for b in blocks if "--create" in b and "--topic faultline.decisions " in b]
    assert "--partitions 1 " in create
    for key, value in DECISIONS_TOPIC.items():
        assert f"--config {key}={value}" in create, key
    (events,) = [b for b in blocks if "--create" in b and "--topic faultline.events " in b]
    assert "--config message.timestamp.type=LogAppendTime" in events
    compose = " ".join((ROOT / "docker-compose.yml").read_text().split())  # its topics too
    for key, value in DECISIONS_TOPIC.items():
        assert f"--config {key}={value}" in compose, key
