"""The whole suite runs on two pytest-xdist workers (``-n 2``, pyproject's ``addopts``), each
with at most one Spark session of its own (``tests/streaming/conftest.py``), within the budget
of ``tests/budget.py``.

The tests that start a JVM (marker ``jvm``) run in two xdist groups, one per worker, balanced by
the time their modules took (:data:`GROUPS`); the other tests fill in beside them. The fast tier,
``pytest -m "not jvm"``, is every test that needs no JVM."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator

import pytest

from streaming.job.session import JVM_LOG
from tests import budget

SERIAL = ("test_outage.py", "test_kafka_clients.py")
"""Modules that time a stopped mock Kafka to the second: they run in a JVM group, never beside
another Kafka test (one run beside them once saw a message delivered to a stopped cluster)."""

GROUPS = {
    "test_job.py": "jvm-1",
    "test_kafka.py": "jvm-1",
}
"""The JVM modules' group; a module not named here is in ``jvm-2``. Balance by the modules'
times (``--durations``) when adding one: each worker runs one group, one test after another."""


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller: the workers inherit the variable
        os.environ.setdefault(JVM_LOG, os.path.join(tempfile.mkdtemp(), "jvm-starts.log"))
        config.stash[_STARTED] = time.monotonic()


_STARTED = pytest.StashKey[float]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The JVM tests go in their groups and first, so that each worker takes one group before
    the rest: both JVMs are busy from the start."""
    for item in items:
        if item.get_closest_marker("jvm") is not None or item.path.name in SERIAL:
            group = GROUPS.get(item.path.name, "jvm-2")
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_order)


def _order(item: pytest.Item) -> int:
    marker = item.get_closest_marker("xdist_group")
    return {"jvm-1": 0, "jvm-2": 1}.get(marker.args[0] if marker else "", 2)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    """A test without the ``jvm`` marker that started a JVM fails (at teardown), naming it."""
    report: pytest.TestReport = yield
    if report.when == "teardown" and item.get_closest_marker("jvm") is None:
        started = [what for test, what in budget.starts(os.environ[JVM_LOG]) if test == item.nodeid]
        if started:
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} started a JVM ({', '.join(started)}) without the jvm marker: "
                "mark it, so that the fast tier (-m 'not jvm') starts none"
            )
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A full run (no paths, no -m, no -k) that passed the budget fails."""
    config = session.config
    if hasattr(config, "workerinput"):
        return
    took = time.monotonic() - config.stash[_STARTED]
    starts = budget.starts(os.environ[JVM_LOG])
    full = (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not config.option.markexpr
        and not config.option.keyword
    )
    over = []
    if full and len(starts) > budget.JVM_STARTS:
        over.append(f"{len(starts)} JVM starts, over the budget of {budget.JVM_STARTS}")
    if full and took > budget.WALL_S:
        over.append(f"{took / 60:.1f} minutes, over the budget of {budget.WALL_S / 60:g}")
    config.stash[_REPORT] = (took, starts, over)
    if over and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_REPORT = pytest.StashKey[tuple[float, list[tuple[str, str]], list[str]]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _REPORT not in terminalreporter.config.stash:
        return
    took, starts, over = terminalreporter.config.stash[_REPORT]
    write = terminalreporter.write_line
    terminalreporter.section("budget (tests/budget.py)")
    per_test: dict[str, list[str]] = {}
    for test, what in starts:
        per_test.setdefault(test, []).append(what)
    for test, what in sorted(per_test.items()):
        write(f"{len(what):3} {test}: {', '.join(sorted(set(what)))}")
    write(
        f"{len(starts)} JVM starts (budget {budget.JVM_STARTS}), {took / 60:.1f} minutes "
        f"(budget {budget.WALL_S / 60:g})"
    )
    for line in over:
        terminalreporter.write_line(f"FAILED: {line}", red=True)
