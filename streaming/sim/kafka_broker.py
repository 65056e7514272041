"""An Apache Kafka broker on 127.0.0.1 for tests, benchmarks and local trials: one KRaft node
(broker and controller in one JVM) from the ``kafka-broker`` jars of ``conf/jars/pom.xml``.

``python -m streaming.sim.kafka_broker [--port 9092] [--data DIR]`` formats ``DIR`` on first use
(default: a temporary folder, dropped at the end), prints ``bootstrap 127.0.0.1:PORT`` once the
broker answers, and serves until Ctrl-C or SIGTERM. Its log is ``DIR/server.log``.
:func:`kafka_broker` starts one for tests; the returned :class:`KafkaBroker` can also be
stopped, killed, frozen (SIGSTOP) and thawed (SIGCONT), and started again on its data.

The broker is set up for tests: a PLAINTEXT listener, and a SASL_PLAINTEXT one that takes the login
:data:`SASL_USER` (PLAIN); topics are created on first use with 4 partitions, one replica;
the log cleaner and the retention check run every second, so that a compacted topic is compacted,
and deleted offsets are deleted, within seconds of the topic's own ``segment.ms``. Records carry
their events' times, which may be any days old (a scenario's), so age deletes nothing unless a
topic sets its own ``retention.ms``; size does: a partition keeps its last GiB or so (Kafka
deletes whole segments, of a GiB each).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from streaming import jars
from streaming.jars import note_jvm_start

MAIN = "kafka.Kafka"
FORMAT = "kafka.tools.StorageTool"
HEAP = "-Xmx512m"
READY_S = 60.0
SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": (
        "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
    ),
    "sasl.enabled.mechanisms": "PLAIN",
    "inter.broker.listener.name": "PLAINTEXT",
    "num.partitions": "4",
    "auto.create.topics.enable": "true",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.retention.ms": "-1",
    "log.retention.bytes": str(1 << 30),
    "log.retention.check.interval.ms": "1000",
    "log.cleaner.backoff.ms": "1000",
    "log.initial.task.delay.ms": "0",
}
"""The broker's ``server.properties`` beside its listeners and folder."""
SASL_USER = ("faultline", "faultline-secret")
"""The one login of the broker's SASL listener (mechanism PLAIN)."""


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now (held open together while they are picked: one
    at a time, the kernel may hand out the same port twice)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(n)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


def free_port() -> int:
    return free_ports(1)[0]


def _with_parent(command: list[str]) -> list[str]:
    """``command`` run so that the kernel kills it when the process that started it ends,
    however that ended (``setpriv --pdeathsig``, util-linux), where ``setpriv`` is at hand."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *command] if setpriv else command


class KafkaBroker:
    """One broker on its folder; :meth:`start` formats the folder on first use."""

    def __init__(
        self, data: Path, port: int = 0, settings: Mapping[str, str] | None = None
    ) -> None:
        self.data = data
        picked = free_ports(3)
        self.port = port or picked[0]
        self.sasl_port, self.controller_port = [p for p in picked if p != self.port][:2]
        self.settings = dict(settings or {})
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """The listener that takes SASL_PLAINTEXT logins (:data:`SASL_USER`)."""
        return f"127.0.0.1:{self.sasl_port}"

    def _java(self, main: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(map(str, jars.find("kafka-broker", "a Kafka broker")))
        return [
            "java",
            HEAP,
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data / 'log4j2.properties'}",
            "-cp",
            classpath,
            main,
            *args,
        ]

    def _write_settings(self) -> Path:
        self.data.mkdir(parents=True, exist_ok=True)
        user, password = SASL_USER
        props = {
            **SETTINGS,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'user_{user}="{password}";'
            ),
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "log.dirs": str(self.data / "log"),
            **self.settings,
        }
        path = self.data / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log = self.data / "server.log"
        (self.data / "log4j2.properties").write_text(
            jars.rolling_log(log, "info", "[%d] %p %m (%c)%n", 10, 3)
        )
        return path

    def start(self) -> None:
        props = self._write_settings()
        if not (self.data / "log" / "meta.properties").exists():
            shutil.copytree(self._formatted(), self.data / "log", dirs_exist_ok=True)
        note_jvm_start("kafka broker")
        self.proc = subprocess.Popen(
            _with_parent(self._java(MAIN, str(props))),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.data / "stderr.log", "ab"),  # noqa: SIM115 (the child keeps it)
        )
        self.wait_ready()

    def _formatted(self) -> Path:
        """Storage formatted for a one-node cluster (Kafka's ``StorageTool format``: its
        ``meta.properties`` and ``bootstrap.checkpoint``), made once per Kafka version in
        faultline's cache and copied for every broker: a format is a JVM start of its own."""
        template = jars.cache() / f"kafka-storage-{jars.version('kafka')}"
        if template.is_dir():
            return template
        template.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=template.parent, prefix=".kafka-storage-") as tmp:
            props = Path(tmp) / "server.properties"
            text = self._write_settings().read_text()
            props.write_text(text.replace(f"log.dirs={self.data / 'log'}", f"log.dirs={tmp}/log"))
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            note_jvm_start("kafka storage format")
            done = subprocess.run(
                self._java(FORMAT, "format", "-t", cluster, "-c", str(props)),
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"formatting Kafka's storage failed: {done.stderr.strip()}")
            with contextlib.suppress(OSError):  # made meanwhile by another process
                os.replace(Path(tmp) / "log", template)
        return template

    def wait_ready(self, limit: float = READY_S) -> None:
        """Until the broker answers a metadata request with itself in it."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + limit
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"the Kafka broker exited with {self.proc.returncode}; see "
                    f"{self.data / 'server.log'} and {self.data / 'stderr.log'}"
                )
            try:
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Kafka broker did not answer within {limit:.0f} s")
            time.sleep(0.2)

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL, as a crash: what it had not flushed stays in the page cache."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None

    def stop(self) -> None:
        """SIGTERM: an orderly shutdown; a kill if it takes more than 30 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        self.kill()


@contextlib.contextmanager
def kafka_broker(
    data: Path | None = None, port: int = 0, settings: Mapping[str, str] | None = None
) -> Iterator[KafkaBroker]:
    """A started broker on ``data`` (default: a temporary folder); killed at the end."""
    with tempfile.TemporaryDirectory(prefix="faultline-kafka-") as tmp:
        broker = KafkaBroker(data or Path(tmp), port, settings)
        try:
            broker.start()
            yield broker
        finally:
            broker.kill()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m streaming.sim.kafka_broker", description=__doc__
    )
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--data", type=Path, help="the broker's folder (default: temporary)")
    args = parser.parse_args()
    stop = False

    def ask_stop(*_: object) -> None:
        nonlocal stop
        stop = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, ask_stop)
    with kafka_broker(args.data, args.port) as broker:
        print(f"bootstrap {broker.bootstrap}", flush=True)
        while not stop and broker.proc is not None and broker.proc.poll() is None:
            time.sleep(0.5)
        broker.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
