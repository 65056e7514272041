"""A Kafka-protocol cluster on 127.0.0.1 for tests, benchmarks and demos without Docker:
librdkafka's mock cluster from the confluent-kafka wheel, hosted in a process of its own.

``python -m streaming.mock_kafka [BROKERS]`` prints ``bootstrap HOST:PORT,...`` and serves until
its standard input closes or it is killed. Topics are created on first use with 4 partitions;
it keeps only about 5 MB per partition, then drops the oldest offsets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Producer


def serve(brokers: int = 1) -> None:
    owner = Producer({"test.mock.num.brokers": brokers, "bootstrap.servers": "unused:1"})
    metadata = owner.list_topics(timeout=10)
    servers = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    print(f"bootstrap {servers}", flush=True)
    sys.stdin.read()  # until the parent closes our input
    os._exit(0)  # the mock cluster's threads would hold a normal exit for about a minute


@contextmanager
def mock_cluster(brokers: int = 1) -> Iterator[str]:
    """Start a mock cluster in a child process; yields its bootstrap servers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streaming.mock_kafka", str(brokers)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "bootstrap":
            raise RuntimeError("the mock Kafka cluster did not start")
        yield line[1]
    finally:
        proc.kill()
        proc.wait(timeout=30)


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
