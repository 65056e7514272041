"""faultline's Java client (``java/client``, ``io.faultline:faultline-rocketmq``) for the tests:
its jars, built by Maven into the jar cache (never into the repository), and its test harness's
producers, real RocketMQ producers that follow faultline, each client version in a JVM of its own,
driven by commands.

A :class:`Driver` is one JVM of ``io.faultline.rocketmq.harness.Driver`` (its Javadoc lists the
commands): :meth:`Driver.ask` sends one command and returns its answer. :func:`driver` starts one
for a client version of the testbed (``rocketmq-4.7``, ``rocketmq-4.9``, ``rocketmq-5``);
:func:`spring_driver` starts a rocketmq-spring-boot-starter application
(``io.faultline.rocketmq.harness.spring.SpringDriver``) with faultline's one property set.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from streaming import jars
from streaming.jars import note_jvm_start
from streaming.sim import rocketmq
from streaming.sim.kafka_broker import _with_parent

CLIENT_POM = Path(__file__).resolve().parents[2] / "java" / "client" / "pom.xml"
DRIVER_MAIN = "io.faultline.rocketmq.harness.Driver"
SPRING_MAIN = "io.faultline.rocketmq.harness.spring.SpringDriver"
SPRING_SET = "rocketmq-spring"
"""The jar set of a rocketmq-spring-boot-starter application (``conf/jars/pom.xml``)."""
ANSWER = "faultline-harness "
"""The prefix of the harness's answers on its standard output (the clients may print too)."""


def client_jars() -> list[Path]:
    """The client's jar, the harness's (its test classes) and their runtime dependencies
    (``kafka-clients``, ``jackson-core``, ...), built with ``mvn -Pharness package`` (which runs
    the module's JUnit tests) when the module's sources changed."""

    def keep(build: Path, out: Path) -> None:
        for jar in build.glob("faultline-rocketmq-*.jar"):
            os.replace(jar, out / ("harness.jar" if jar.stem.endswith("-tests") else "client.jar"))
        os.replace(build / "lib", out / "lib")

    folder = jars.maven_built(
        "faultline-rocketmq", CLIENT_POM, "client.build", ["-Pharness", "package"], keep
    )
    return [folder / "client.jar", folder / "harness.jar", *sorted((folder / "lib").glob("*.jar"))]


class Driver:
    """One harness JVM, which answers one command at a time (:meth:`ask` from any thread)."""

    def __init__(self, proc: subprocess.Popen[str], out: Path, name: str) -> None:
        self.proc, self.out, self.name = proc, out, name
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._log = open(out / "stdout.log", "a", encoding="utf-8")  # noqa: SIM115 (closed in close)
        self._asking = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"harness-{name}")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(ANSWER):
                self._answers.put(json.loads(line[len(ANSWER) :]))
            else:
                self._log.write(line)
                self._log.flush()
        self._answers.put(None)

    def _next(self, timeout: float) -> dict[str, Any]:
        try:
            answer = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{self.name}: no answer within {timeout:g} s") from None
        if answer is None:
            raise RuntimeError(f"{self.name} exited with {self.proc.wait()}:\n{self.tail()}")
        return answer

    def wait_ready(self, timeout: float = 120.0) -> None:
        if not self._next(timeout).get("ready"):
            raise RuntimeError(f"{self.name}: no ready line:\n{self.tail()}")

    def ask(self, op: str, timeout: float = 60.0, **args: Any) -> dict[str, Any]:
        """Send the command ``op`` with ``args``; its answer (a ``RuntimeError`` for an error)."""
        assert self.proc.stdin is not None
        with self._asking:
            self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
            self.proc.stdin.flush()
            answer = self._next(timeout)
        if "error" in answer:
            raise RuntimeError(f"{self.name} {op} {args}: {answer['error']}")
        return answer

    def tail(self, chars: int = 3000) -> str:
        text = ""
        for name in ("stdout.log", "stderr.log"):
            path = self.out / name
            if path.exists():
                text += path.read_text(errors="replace")[-chars:]
        return text

    def close(self) -> None:
        """``quit``, and a kill if the JVM has not gone within 20 s."""
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
            self.proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._reader.join(timeout=5)
        self._log.close()


def _start(name: str, classpath: list[Path], out: Path, main: str, *args: str) -> Driver:
    out.mkdir(parents=True, exist_ok=True)
    note_jvm_start(f"java client {name}")
    stderr: IO[bytes] = open(out / "stderr.log", "ab")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen(
        _with_parent(rocketmq._java(classpath, out, main, *args)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        bufsize=1,
    )
    stderr.close()
    return Driver(proc, out, name)


def driver(
    bed: rocketmq.Testbed,
    profile: str,
    out: Path,
    decisions_topic: str,
    topic: str = rocketmq.TOPIC,
    *,
    events_topic: str | None = None,
    record: Path | None = None,
) -> Driver:
    """A harness JVM with the client of ``profile`` (a jar set of ``conf/jars/pom.xml``), whose
    producers send to ``topic`` on ``bed`` and follow ``decisions_topic``; not yet ready
    (:meth:`Driver.wait_ready`). Producers started with ``report`` report their attempts to
    ``events_topic``; with ``record`` the harness writes what its producers did into that file
    (``io.faultline.rocketmq.harness.Recorder``: sends, attempts, fault tables, the follower's
    writes)."""
    classpath = [*client_jars(), *jars.find(profile, f"a {profile} client")]
    args = {
        "namesrv": bed.namesrv_address,
        "topic": topic,
        "decisions": decisions_topic,
        "cluster": rocketmq.CLUSTER,
    }
    if events_topic is not None:
        args["events"] = events_topic
    if record is not None:
        args["record"] = str(record)
    flat = [x for k, v in args.items() for x in (f"--{k}", v)]
    return _start(profile, classpath, out, DRIVER_MAIN, *flat)


def spring_driver(
    bed: rocketmq.Testbed,
    out: Path,
    properties: dict[str, str],
    topic: str = rocketmq.TOPIC,
) -> Driver:
    """A rocketmq-spring-boot-starter application (Spring Boot 2.7, the starter's own client)
    against ``bed``, with the Spring ``properties`` given as its arguments (as in
    ``application.properties``: ``faultline.kafka.bootstrap-servers`` turns faultline on); its
    producer is the driver's ``spring``."""
    spring = jars.find(SPRING_SET, "a Spring Boot application")
    have = {jars._artifact(j.name) for j in spring}
    client, harness, *lib = client_jars()
    # the application's own versions first, as Maven resolves them in an application that
    # declares faultline-rocketmq: the client adds what it has not got (kafka-clients)
    classpath = [client, harness, *spring, *(j for j in lib if jars._artifact(j.name) not in have)]
    settings = {
        "rocketmq.name-server": bed.namesrv_address,
        "rocketmq.producer.group": "faultline-spring",
        "logging.level.root": "WARN",
        **properties,
    }
    args = ["--topic=" + topic, *(f"--{k}={v}" for k, v in settings.items())]
    return _start("spring", classpath, out, SPRING_MAIN, *args)
