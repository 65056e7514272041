"""A Kafka-protocol cluster on 127.0.0.1 for tests, benchmarks and demos without Docker:
librdkafka's mock cluster from the confluent-kafka wheel, hosted in a process of its own.

``python -m streaming.sim.mock_kafka [BROKERS]`` prints ``bootstrap HOST:PORT,...`` and serves until
it gets SIGINT (Ctrl-C) or SIGTERM, so it can run in the background (``... &``, then ``kill``).
Topics are created on first use with 4 partitions; it keeps only about 5 MB per partition, then
drops the oldest offsets. :func:`mock_cluster` starts it for tests with ``--until-stdin-closes``:
it then also stops when its parent goes away, however the parent ended.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Producer


def serve(brokers: int = 1, until_stdin_closes: bool = False) -> None:
    owner = Producer({"test.mock.num.brokers": brokers, "bootstrap.servers": "unused:1"})
    metadata = owner.list_topics(timeout=10)
    servers = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    print(f"bootstrap {servers}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if until_stdin_closes:

        def watch() -> None:
            sys.stdin.read()  # returns when the parent closes our input or goes away
            stop.set()

        threading.Thread(target=watch, daemon=True).start()
    while not stop.wait(1.0):
        pass
    os._exit(0)  # the mock cluster's threads would hold a normal exit for about a minute


@contextmanager
def mock_cluster(brokers: int = 1) -> Iterator[str]:
    """Start a mock cluster in a child process; yields its bootstrap servers."""
    with mock_cluster_process(brokers) as (bootstrap, _):
        yield bootstrap


@contextmanager
def mock_cluster_process(brokers: int = 1) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """:func:`mock_cluster`, also yielding its process (``SIGSTOP`` it to make Kafka hang, as
    behind a network partition, and ``SIGCONT`` to bring it back with its data)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streaming.sim.mock_kafka", str(brokers), "--until-stdin-closes"],
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
        yield line[1], proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m streaming.sim.mock_kafka", description=__doc__)
    parser.add_argument("brokers", nargs="?", type=int, default=1)
    parser.add_argument("--until-stdin-closes", action="store_true")
    args = parser.parse_args()
    serve(args.brokers, args.until_stdin_closes)


if __name__ == "__main__":
    main()
