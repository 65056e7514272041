"""The whole suite runs on two pytest-xdist workers (``-n 2``, pyproject's ``addopts``), each
with at most one Spark session of its own (``tests/streaming/conftest.py``), within the budget
of ``tests/budget.py``.

Each module of tests that start a JVM (marker ``jvm``) is an xdist group that one worker runs
whole, the longest first (:data:`HEAVIEST`); the other tests fill in beside them. The fast tier,
``pytest -m "not jvm"``, is every test that needs no JVM."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator

import pytest

from streaming import jars
from streaming.jars import JVM_LOG
from tests import budget
from udfs.errors import ConfigError

SERIAL = ("test_outage.py", "test_kafka_clients.py")
"""Modules that time a frozen Kafka broker to the second: one group, never beside each other."""
TESTBEDS = ("test_rocketmq.py", "test_java_client.py", "test_closed_loop_rocketmq.py")
"""Modules that run a RocketMQ testbed and its producers' JVMs: one group, never beside each other
(the judge compares the clients' clocks to 5 ms, which another testbed's load beside it broke)."""

HEAVIEST = (
    "test_kafka_outages.py",
    "test_kafka.py",
    "test_sink_spark.py",
    "test_rocketmq.py",  # after the Kafka outages: its 13 JVMs slow what runs beside it
    "test_java_client.py",  # then, in the same group (TESTBEDS): about a minute, seven JVMs
    "test_closed_loop_rocketmq.py",  # then (TESTBEDS): the loop through the job, five JVMs
    "test_job.py",
    "test_soak.py",
    "test_state_store.py",
    "test_crash.py",
    "test_storage.py",
    "test_dashboard.py",
    "test_cluster.py",
)
"""The JVM modules that take longest (``--durations``), longest first: each worker takes the next
group when it is free, so the long ones start first and the short ones fill in at the end."""

SLOW = ("test_closed_loop.py", "test_summaries.py", "test_routing_table.py")
"""Modules without a JVM whose tests take 15-80 s each (whole scenarios through the engine): they
start before the other tests of their kind, so that the fast tier does not end on one of them."""


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller: the workers inherit the variable
        os.environ.setdefault(JVM_LOG, os.path.join(tempfile.mkdtemp(), "jvm-starts.log"))
        config.stash[_STARTED] = time.monotonic()
        if "not jvm" not in (config.option.markexpr or ""):
            _fetch_jars(config)


def _fetch_jars(config: pytest.Config) -> None:
    """The jars of ``conf/jars/pom.xml`` that the JVM tests run (Spark's Kafka source, Delta
    Lake, the Kafka broker, RocketMQ's servers and clients), fetched once into the cache
    (``faultline jars fetch``)."""
    missing = [name for name in jars.sets() if not jars.folder(name).is_dir()]
    if missing:
        print(f"fetching the jar sets {', '.join(missing)} (faultline jars fetch)", flush=True)
    try:
        jars.fetch()
    except ConfigError as exc:
        pytest.exit(f"the JVM tests need their jars: {exc}", returncode=3)


_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each JVM module is a group that one worker runs whole (its module fixtures made once),
    and the groups come first, the longest first, so that both workers are busy with a JVM from
    the start; the other tests fill in beside them."""
    for item in items:
        if item.path.name in SERIAL:
            item.add_marker(pytest.mark.xdist_group("serial"))
        elif item.path.name in TESTBEDS:
            item.add_marker(pytest.mark.xdist_group("rocketmq"))
        elif item.get_closest_marker("jvm") is not None:
            item.add_marker(pytest.mark.xdist_group(item.path.name))
    items.sort(key=_order)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a worker, a grouped test fails unless its group is in its node id, as pytest-xdist's
    loadgroup schedules by it: the groups would otherwise be ignored without a word (pytest 9.2
    with pytest-xdist 3.8 did that)."""
    loadgroup = getattr(item.config.option, "loadgroup", False)
    if loadgroup and item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
        pytest.fail(
            f"pytest-xdist ignored the group of {item.nodeid}: this pytest and pytest-xdist do "
            "not work together (see the pin of pytest in pyproject.toml)",
            pytrace=False,
        )


def _order(item: pytest.Item) -> int:
    """Where a test's group starts: the heaviest JVM modules in their order, then the other JVM
    modules and the serial group, then the slow tests without a JVM, then the rest."""
    if item.get_closest_marker("xdist_group") is None:
        return len(HEAVIEST) + (1 if item.path.name in SLOW else 2)
    return HEAVIEST.index(item.path.name) if item.path.name in HEAVIEST else len(HEAVIEST)


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
        over.append(f"{took / 60:.1f} minutes, over the bound of {budget.WALL_S / 60:g}")
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
        f"(goal {budget.GOAL_S / 60:g}, bound {budget.WALL_S / 60:g})"
    )
    for line in over:
        terminalreporter.write_line(f"FAILED: {line}", red=True)
