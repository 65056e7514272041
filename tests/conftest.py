"""The whole suite runs on two pytest-xdist workers (``-n 2``, pyproject's ``addopts``)."""

from __future__ import annotations

import pytest

SERIAL = ("test_outage.py", "test_kafka_clients.py")
"""Modules that time a stopped mock Kafka to the second: they run with the Spark tests, never
beside another Kafka test (one run beside them once saw a message delivered to a stopped
cluster)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Spark tests run one after another on one worker: they share the session's reference
    runs, and two Spark jobs at once would only fight over the two cores. The other tests (the
    core, the engine, the closed loop) run beside them on the other worker."""
    for item in items:
        if item.get_closest_marker("spark") is not None or item.path.name in SERIAL:
            item.add_marker(pytest.mark.xdist_group("spark"))
