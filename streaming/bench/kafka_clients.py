"""Which Kafka library a Python producer's reporter should use: confluent-kafka (librdkafka) or
kafka-python (pure Python), on an Apache Kafka broker of its own (``streaming.sim.kafka_broker``).

    python -m streaming.bench.kafka_clients [--records 100000] [--rate 1000] [--seconds 10]

For each library that is installed, with the reporter's settings (``linger.ms`` 50, every
replica acknowledging), prints

- the publish rate: ``--records`` reporter records (a ``send_result`` of about 330 bytes),
  produced as fast as the library takes them, until the last is acknowledged (records/s);
- the latency at ``--rate`` records/s for ``--seconds``: from the call that produced a record to
  its acknowledgement (p50 and p99, ms);
- the cost to the caller at that rate: the time spent in the produce call (p50 and p99, µs);
- the install size: the library's files, its bundled native libraries included (MB).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streaming.sim.kafka_broker import kafka_broker

LINGER_MS = 50
RECORD = {
    "cluster": "DefaultCluster",
    "producer_id": "orders-api-7f9c-0001",
    "producer_group": "pg-orders",
    "client_profile": "rocketmq-4.9",
    "latency_fault_enable": True,
    "kind": "send_result",
    "mode": "SYNC",
    "topic": "orders",
    "broker_name": "broker-a",
    "queue_id": 3,
    "outcome": "SEND_OK",
    "latency_ms": 4,
    "attempt": 0,
    "message_id": "7F0000010B3C18B4AAC2",
}


@dataclass(frozen=True)
class Result:
    library: str
    version: str
    rate: float
    latency_ms: tuple[float, float]
    call_us: tuple[float, float]
    size_mb: float


class Client:
    """One library's producer: :meth:`send` returns at once, ``acked`` is called per record."""

    def __init__(self, bootstrap: str, acked: Callable[[int], None]) -> None:
        self.acked = acked

    def send(self, topic: str, n: int, value: bytes) -> None:
        raise NotImplementedError

    def poll(self) -> None:
        """Serve acknowledgements (where the library needs the caller to)."""

    def flush(self) -> None:
        raise NotImplementedError


class Confluent(Client):
    def __init__(self, bootstrap: str, acked: Callable[[int], None]) -> None:
        from confluent_kafka import Producer

        super().__init__(bootstrap, acked)
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": LINGER_MS, "acks": "all"}
        )

    def send(self, topic: str, n: int, value: bytes) -> None:
        while True:
            try:
                self.producer.produce(
                    topic, value, key=b"p", on_delivery=lambda err, _msg: self.acked(n)
                )
                break
            except BufferError:
                self.producer.poll(0.01)
        self.producer.poll(0)

    def poll(self) -> None:
        self.producer.poll(0)

    def flush(self) -> None:
        self.producer.flush(60)


class KafkaPython(Client):
    def __init__(self, bootstrap: str, acked: Callable[[int], None]) -> None:
        from kafka import KafkaProducer  # type: ignore[import-not-found, unused-ignore]

        super().__init__(bootstrap, acked)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=LINGER_MS, acks="all")

    def send(self, topic: str, n: int, value: bytes) -> None:
        future = self.producer.send(topic, value, key=b"p")
        future.add_callback(lambda _meta: self.acked(n))

    def flush(self) -> None:
        self.producer.flush(60)


LIBRARIES: dict[str, tuple[str, type[Client]]] = {
    "confluent-kafka": ("confluent_kafka", Confluent),
    "kafka-python": ("kafka", KafkaPython),
}


def install_mb(distribution: str) -> float:
    files = importlib.metadata.distribution(distribution).files or []
    return sum(Path(str(f.locate())).stat().st_size for f in files) / 1e6


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, len(ordered) * 99 // 100)]


def measure(
    library: str, make: type[Client], bootstrap: str, records: int, rate: int, seconds: float
) -> Result:
    value = json.dumps(RECORD, separators=(",", ":")).encode()
    acked_at: dict[int, float] = {}
    client = make(bootstrap, lambda n: acked_at.__setitem__(n, time.perf_counter()))
    client.send(f"warm-{library}", -1, value)
    client.flush()
    began = time.perf_counter()
    for n in range(records):
        client.send(f"rate-{library}", n, value)
    client.flush()
    publish_rate = records / (time.perf_counter() - began)
    acked_at.clear()
    sent_at: dict[int, float] = {}
    calls: list[float] = []
    start = time.perf_counter()
    for n in range(int(rate * seconds)):
        due = start + n / rate
        while (now := time.perf_counter()) < due:
            client.poll()
            time.sleep(min(0.0005, due - now))
        sent_at[n] = time.perf_counter()
        client.send(f"latency-{library}", n, value)
        calls.append((time.perf_counter() - sent_at[n]) * 1e6)
    client.flush()
    latencies = [(acked_at[n] - sent_at[n]) * 1000 for n in sent_at]
    return Result(
        library,
        importlib.metadata.version(library),
        publish_rate,
        percentiles(latencies),
        percentiles(calls),
        install_mb(library),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streaming.bench.kafka_clients", description=__doc__
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=1_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    found: dict[str, tuple[str, type[Client]]] = {}
    for library, (module, make) in LIBRARIES.items():
        try:
            __import__(module)
            found[library] = (module, make)
        except ImportError:
            print(f"{library}: not installed (pip install {library})")
    with kafka_broker() as broker:
        for library, (_, make) in found.items():
            r = measure(library, make, broker.bootstrap, args.records, args.rate, args.seconds)
            print(
                f"{r.library} {r.version}: publish {r.rate:,.0f} records/s; at {args.rate:,}/s "
                f"latency p50 {r.latency_ms[0]:.1f} ms, p99 {r.latency_ms[1]:.1f} ms; "
                f"produce call p50 {r.call_us[0]:.0f} µs, p99 {r.call_us[1]:.0f} µs; "
                f"installed {r.size_mb:.1f} MB",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
