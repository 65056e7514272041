"""A real RocketMQ cluster on 127.0.0.1 for the tests and local trials: RocketMQ's own NameServer
and brokers from the ``rocketmq-server`` jars of ``conf/jars/pom.xml``, each in a JVM of its own,
and real producers of each client version (``java/probe``) that record what they did.

``python -m streaming.sim.rocketmq [--brokers 3] [--data DIR]`` starts a NameServer and the brokers,
prints the NameServer's address and each broker's, and serves until Ctrl-C or SIGTERM.

Every broker is reached through a proxy of the testbed's own, so that faults are real traffic
faults:

* the broker listens on 127.0.0.1 (``bindAddress``) and announces ``127.0.0.<n+2>``
  (``brokerIP1``) on the same ports, where the testbed's proxy listens: producers reach it only
  through that proxy, which can hold each answer back (:meth:`Broker.slow`);
* the broker reaches the NameServer through a proxy of its own, which sees every registration
  (each one a ``heartbeat`` event, :attr:`Testbed.heartbeats`) and can stop passing them
  (:meth:`Broker.stop_heartbeats`) without touching the broker or its producers;
* the broker's JVM itself can be frozen (SIGSTOP, :meth:`Broker.freeze`), thawed, killed and
  started again on its store;
* producers' connections to it can be reset and refused (:meth:`Broker.unreachable`).

The brokers run with ``enableSlaveActingMaster``, so that they send the NameServer a heartbeat
every second and the NameServer keeps each :data:`HEARTBEAT_TIMEOUT_MS` after its last (RocketMQ's
default: 120 s). A broker whose NameServer requests go unanswered closes the connection after one
times out, and the NameServer drops a broker whose connection closed at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streaming import jars
from streaming.jars import note_jvm_start
from streaming.sim.kafka_broker import _with_parent, free_ports

SERVER = "rocketmq-server"
CLIENTS = ("rocketmq-4.7", "rocketmq-4.9", "rocketmq-5")
"""The client profiles the testbed runs producers of: each is also the name of its jar set."""
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
PROBE_MAIN = "org.faultline.probe.Probe"
CONSUMER_MAIN = "org.faultline.probe.Consumer"
PROBE_POM = Path(__file__).resolve().parents[2] / "java" / "probe" / "pom.xml"
CLUSTER = "DefaultCluster"
TOPIC = "faultline-probe"
TX_TOPIC = "faultline-tx"
"""The transactional producers' and the consumer's topic."""
QUEUES = 4
HEARTBEAT_TIMEOUT_MS = 10_000
"""How long the NameServer keeps a broker after its last heartbeat (RocketMQ's default: 120 s)."""
SCAN_INTERVAL_MS = 5_000
"""How often the NameServer looks for brokers to drop (5.x's ``scanNotActiveBrokerInterval``)."""
READY_S = 60.0
ROUTE_POLL_S = 0.5
TRANSACTION_TIMEOUT_MS = 2_000
TRANSACTION_CHECK_INTERVAL_MS = 2_000
TRANSACTION_CHECK_MAX = 3
"""The brokers' transaction checks (``transactionTimeOut``, ``transactionCheckInterval``,
``transactionCheckMax``; RocketMQ's defaults are 6 s, 30 s and 15): a message no end settles is
checked within seconds and discarded after three checks."""
DELAY_LEVELS = " ".join(f"{n}s" for n in range(1, 19))
"""The brokers' ``messageDelayLevel``: level n waits n seconds (RocketMQ's default waits 10 s for
a first consumer retry, 30 s for the second)."""
JVM = [
    "-Xms128m",
    "-Xmx256m",
    "-XX:+UseG1GC",
    "-XX:MaxDirectMemorySize=256m",
    # RocketMQ 4.x and the Netty it brings reach into the JDK's internals, which Java 17 closes
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
]
BROKER_SETTINGS = {
    "brokerClusterName": CLUSTER,
    "brokerId": "0",
    "brokerRole": "ASYNC_MASTER",
    "flushDiskType": "ASYNC_FLUSH",
    "bindAddress": "127.0.0.1",
    "mappedFileSizeCommitLog": str(64 * 1024 * 1024),
    "mappedFileSizeConsumeQueue": str(30_000 * 20),
    "maxIndexNum": "1000",
    "maxHashSlotNum": "4000",
    "diskMaxUsedSpaceRatio": "95",
    "timerWheelEnable": "false",
    "autoCreateTopicEnable": "false",
    "enableSlaveActingMaster": "true",
    "skipPreOnline": "true",
    "brokerNotActiveTimeoutMillis": str(HEARTBEAT_TIMEOUT_MS),
    "registerNameServerPeriod": "10000",
    "transactionTimeOut": str(TRANSACTION_TIMEOUT_MS),
    "transactionCheckInterval": str(TRANSACTION_CHECK_INTERVAL_MS),
    "transactionCheckMax": str(TRANSACTION_CHECK_MAX),
    # the ends reach the op queue within 100 ms (3 s by default, shorter than the default
    # transactionTimeOut of 6 s but not than the testbed's 2 s: a check would find no end yet)
    "transactionOpBatchInterval": "100",
    "messageDelayLevel": DELAY_LEVELS,
}
"""A small broker for tests: 64 MB commit-log files, a small index, no timer wheel, and checks
and delays of seconds."""
REGISTER_CODES = {103: "register", 322: "heartbeat", 904: "heartbeat"}
"""The NameServer requests that keep a broker alive: REGISTER_BROKER, QUERY_DATA_VERSION (what
a 5.x broker sends every second when it talks to a NameServer of any version) and
BROKER_HEARTBEAT."""


def _java(classpath: Sequence[Path], home: Path, main: str, *args: str) -> list[str]:
    """A RocketMQ JVM: its home (which every start class insists on) and its logs under
    ``home``."""
    return [
        "java",
        *JVM,
        "-Djava.awt.headless=true",
        f"-Drocketmq.home.dir={home}",
        f"-Duser.home={home}",
        "-Drocketmq.client.logRoot=" + str(home / "logs"),
        "-cp",
        os.pathsep.join(map(str, classpath)),
        main,
        *args,
    ]


# --- the proxy ---------------------------------------------------------------------------------


class Link:
    """One listening address forwarded to a target. ``delay_ms`` holds back every byte coming
    from the target (a broker that answers slowly); ``cut`` stops passing bytes either way while
    keeping the connections open (the peer hears nothing); :meth:`Proxy.refuse` resets them and
    stops listening; ``on_request`` is called with each RocketMQ request code the client sends."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.listen = listen
        self.target = target
        self.delay_ms = 0
        self.cut = False
        self.on_request: Callable[[int], None] | None = None
        self.open: set[asyncio.StreamWriter] = set()
        self.server: asyncio.base_events.Server | None = None


class Proxy:
    """A TCP proxy for many :class:`Link` s, run by an asyncio loop in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="proxy")
        self._thread.start()
        self._links: list[Link] = []

    def add(self, link: Link) -> Link:
        self._links.append(link)
        asyncio.run_coroutine_threadsafe(self._listen(link), self.loop).result(10)
        return link

    async def _listen(self, link: Link) -> None:
        link.server = await asyncio.start_server(
            lambda r, w: self._connect(link, r, w), *link.listen, reuse_address=True
        )

    async def _connect(
        self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*link.target)
        except OSError:
            writer.close()
            return
        link.open.add(writer)
        await asyncio.gather(
            self._pipe(link, reader, up_writer, upstream=True),
            self._pipe(link, up_reader, writer, upstream=False),
            return_exceptions=True,
        )
        link.open.discard(writer)

    async def _pipe(
        self,
        link: Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream: bool,
    ) -> None:
        frames = _Frames() if upstream else None
        loop = asyncio.get_running_loop()
        last_due = 0.0  # a later chunk never overtakes an earlier one when the delay changes
        try:
            while chunk := await reader.read(65536):
                if link.cut:
                    continue  # dropped: the peer sees silence, not a closed connection
                if frames is not None and link.on_request is not None:
                    for code in frames.feed(chunk):
                        link.on_request(code)
                if upstream or (not link.delay_ms and last_due <= loop.time()):
                    writer.write(chunk)
                    await writer.drain()
                else:
                    last_due = max(loop.time() + link.delay_ms / 1000, last_due)
                    loop.call_at(last_due, _write, writer, chunk)
        except (ConnectionError, OSError):
            pass
        finally:
            if last_due > loop.time():
                await asyncio.sleep(last_due - loop.time())
            writer.close()

    def refuse(self, link: Link, refused: bool) -> None:
        """Reset the link's connections and stop listening (or listen again)."""

        async def apply() -> None:
            if refused and link.server is not None:
                link.server.close()
                link.server = None
                for writer in list(link.open):
                    writer.transport.abort()
            elif not refused and link.server is None:
                await self._listen(link)

        asyncio.run_coroutine_threadsafe(apply(), self.loop).result(10)

    def close(self) -> None:
        async def stop() -> None:
            for link in self._links:
                if link.server is not None:
                    link.server.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


def _write(writer: asyncio.StreamWriter, chunk: bytes) -> None:
    if not writer.is_closing():
        writer.write(chunk)


class _Frames:
    """RocketMQ's remoting frames in a byte stream: a 4-byte length, then a 4-byte header length
    whose first byte is the serialization (0 JSON, 1 RocketMQ's own, whose header starts with the
    code as 2 bytes), the header, the body."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[int]:
        self._buffer += chunk
        codes = []
        while len(self._buffer) >= 8:
            length = int.from_bytes(self._buffer[:4], "big")
            if len(self._buffer) < 4 + length:
                break
            frame = bytes(self._buffer[4 : 4 + length])
            del self._buffer[: 4 + length]
            kind, size = frame[0], int.from_bytes(frame[1:4], "big")
            header = frame[4 : 4 + size]
            if kind == 1:
                codes.append(int.from_bytes(header[:2], "big", signed=True))
            else:
                with contextlib.suppress(ValueError):
                    codes.append(int(json.loads(header)["code"]))
        return codes


# --- the NameServer's routes ------------------------------------------------------------------

GET_ROUTEINFO_BY_TOPIC = 105
_LONG_KEYS = re.compile(r"([{,])\s*(-?\d+)\s*:")


def route_of(namesrv: tuple[str, int], topic: str, timeout: float = 3.0) -> list[dict[str, object]]:
    """The topic's route as the NameServer gives it to producers (one ``GET_ROUTEINFO_BY_TOPIC``
    request in RocketMQ's remoting protocol, JSON): each broker with a master address and its
    write queues and permission, by name, as ``topicRouteData2TopicPublishInfo`` keeps them; []
    when the NameServer knows no broker of the topic. Raises ``OSError`` when it does not answer."""
    header = json.dumps(
        {
            "code": GET_ROUTEINFO_BY_TOPIC,
            "language": "PYTHON",
            "version": 0,
            "opaque": 1,
            "flag": 0,
            "extFields": {"topic": topic},
        }
    ).encode()
    with socket.create_connection(namesrv, timeout=timeout) as conn:
        conn.sendall((4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header)
        length = int.from_bytes(_read(conn, 4), "big")
        frame = _read(conn, length)
    size = int.from_bytes(frame[1:4], "big")
    answer = json.loads(frame[4 : 4 + size])
    if answer["code"] != 0:  # TOPIC_NOT_EXIST: no broker holds it now
        return []
    # fastjson writes a map's number keys bare ({0:"127.0.0.2:10911"}): quote them
    data = json.loads(_LONG_KEYS.sub(r'\1"\2":', frame[4 + size :].decode()))
    masters = {b["brokerName"] for b in data["brokerDatas"] if "0" in b.get("brokerAddrs", {})}
    return [
        {"broker_name": q["brokerName"], "write_queue_nums": q["writeQueueNums"], "perm": q["perm"]}
        for q in sorted(data["queueDatas"], key=lambda q: q["brokerName"])
        if q["brokerName"] in masters
    ]


def _read(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the NameServer closed the connection")
        data += chunk
    return data


# --- the cluster -------------------------------------------------------------------------------


def _free_block(hosts: Sequence[str]) -> int:
    """A port P with P-2, P and P+1 free on every host (a broker takes P-2 for its fast channel,
    P+1 for replication)."""
    for _ in range(200):
        (port,) = free_ports(1)
        if port < 1026 or port > 65000:
            continue
        with contextlib.ExitStack() as held:
            try:
                for host in hosts:
                    for p in (port - 2, port, port + 1):
                        s = held.enter_context(socket.socket())
                        s.bind((host, p))
            except OSError:
                continue
            return port
    raise RuntimeError("no block of three free ports found on 127.0.0.1")


@dataclass
class Broker:
    """One broker of the testbed, named ``broker-<letter>``."""

    testbed: Testbed
    index: int
    port: int
    heartbeat_link: Link
    client_links: list[Link]
    proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return f"broker-{chr(ord('a') + self.index)}"

    @property
    def host(self) -> str:
        """The address producers reach it on (the proxy's)."""
        return f"127.0.0.{self.index + 2}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def home(self) -> Path:
        return self.testbed.data / self.name

    def start(self) -> None:
        home = self.home
        store = home / "store"
        (store / "config").mkdir(parents=True, exist_ok=True)
        topics = store / "config" / "topics.json"
        if not topics.exists():
            topics.write_text(json.dumps(_topics(self.testbed.topics)))
        settings = {
            **BROKER_SETTINGS,
            **self.testbed.settings,
            "brokerName": self.name,
            "brokerIP1": self.host,
            "listenPort": str(self.port),
            "storePathRootDir": str(store),
            "storePathCommitLog": str(store / "commitlog"),
        }
        conf = home / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        classpath = jars.find(SERVER, "the RocketMQ testbed")
        note_jvm_start(f"rocketmq {self.name}")
        self.proc = subprocess.Popen(
            _with_parent(
                _java(classpath, home, BROKER_MAIN, "-c", str(conf), "-n", self._namesrv())
            ),
            stdin=subprocess.DEVNULL,
            stdout=open(home / "stdout.log", "ab"),  # noqa: SIM115 (the child keeps it)
            stderr=subprocess.STDOUT,
        )

    def _namesrv(self) -> str:
        return "{}:{}".format(*self.heartbeat_link.listen)

    def wait_ready(self, limit: float = READY_S) -> None:
        """Until the broker answers on its address and the NameServer has it."""
        deadline = time.monotonic() + limit
        while self.name not in self.testbed.live():
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"RocketMQ broker {self.name} exited with {self.proc.returncode}; see "
                    f"{self.home / 'stdout.log'} and {self.home / 'logs'}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {self.name} did not register within {limit:.0f} s")
            time.sleep(0.1)

    # faults

    def freeze(self) -> None:
        """SIGSTOP: the JVM stops; its connections stay open, nothing answers."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
            self.proc.wait(timeout=30)
            self.proc = None

    def slow(self, delay_ms: int) -> None:
        """Every answer of the broker reaches its producers ``delay_ms`` late (0: on time)."""
        for link in self.client_links:
            link.delay_ms = delay_ms

    def unreachable(self, refused: bool = True) -> None:
        """Producers' connections to the broker are reset and new ones refused (or taken again:
        a connection refused fails at once, where RocketMQ waits out a reset one);
        the broker itself and its heartbeats are untouched: a partition between producers and
        broker."""
        for link in self.client_links:
            self.testbed.proxy.refuse(link, refused)

    def stop_heartbeats(self, stopped: bool = True) -> None:
        """The broker's registrations and heartbeats stop reaching the NameServer (or pass again);
        the broker itself and its producers' traffic are untouched."""
        self.heartbeat_link.cut = stopped


def _topics(topics: dict[str, int]) -> dict[str, object]:
    """A broker's ``config/topics.json`` with ``topics`` (name: queues), read and write, on every
    broker."""
    return {
        "topicConfigTable": {
            name: {
                "topicName": name,
                "readQueueNums": queues,
                "writeQueueNums": queues,
                "perm": 6,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
                "order": False,
            }
            for name, queues in topics.items()
        },
        "dataVersion": {"counter": 1, "timestamp": 0},
    }


@dataclass
class Testbed:
    """A NameServer and ``brokers`` brokers in :attr:`data`; :meth:`start` starts them all."""

    data: Path
    brokers_wanted: int = 3
    settings: dict[str, str] = field(default_factory=dict)
    """Broker settings over :data:`BROKER_SETTINGS`."""
    topics: dict[str, int] = field(default_factory=lambda: {TOPIC: QUEUES, TX_TOPIC: QUEUES})
    brokers: list[Broker] = field(default_factory=list)
    heartbeats: list[dict[str, object]] = field(default_factory=list)
    """One faultline ``heartbeat`` event per registration or heartbeat the NameServer received."""
    routes: list[dict[str, object]] = field(default_factory=list)
    """One faultline ``route`` event each time the NameServer's route of a topic changed (asked
    every :data:`ROUTE_POLL_S`, twice as often as the producers ask)."""

    def __post_init__(self) -> None:
        self.proxy = Proxy()
        self.namesrv_port, *heartbeat_ports = free_ports(1 + self.brokers_wanted)
        self.namesrv: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._watch_routes, daemon=True, name="routes")
        self._lock = threading.Lock()
        self._live_at: dict[str, float] = {}
        for i, hb_port in enumerate(heartbeat_ports):
            host = f"127.0.0.{i + 2}"
            port = _free_block(["127.0.0.1", host])
            hb = self.proxy.add(Link(("127.0.0.1", hb_port), ("127.0.0.1", self.namesrv_port)))
            clients = [self.proxy.add(Link((host, p), ("127.0.0.1", p))) for p in (port, port - 2)]
            broker = Broker(self, i, port, hb, clients)
            hb.on_request = self._heard(broker.name)
            self.brokers.append(broker)

    @property
    def namesrv_address(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def _heard(self, name: str) -> Callable[[int], None]:
        def heard(code: int) -> None:
            if code in REGISTER_CODES:
                now = time.time()
                with self._lock:
                    self._live_at[name] = now
                    self.heartbeats.append(
                        {
                            "kind": "heartbeat",
                            "cluster": CLUSTER,
                            "event_id": f"hb-{name}-{len(self.heartbeats):06d}",
                            "event_time": int(now * 1000),
                            "broker_name": name,
                            "via": REGISTER_CODES[code],
                        }
                    )

        return heard

    def live(self) -> set[str]:
        """The brokers whose last heartbeat is younger than the NameServer's timeout."""
        now = time.time()
        with self._lock:
            return {n for n, t in self._live_at.items() if now - t < HEARTBEAT_TIMEOUT_MS / 1000}

    def start(self) -> None:
        home = self.data / "namesrv"
        home.mkdir(parents=True, exist_ok=True)
        conf = home / "namesrv.properties"
        conf.write_text(
            f"listenPort={self.namesrv_port}\nbindAddress=127.0.0.1\n"
            f"scanNotActiveBrokerInterval={SCAN_INTERVAL_MS}\n"
        )
        classpath = jars.find(SERVER, "the RocketMQ testbed")
        note_jvm_start("rocketmq namesrv")
        self.namesrv = subprocess.Popen(
            _with_parent(_java(classpath, home, NAMESRV_MAIN, "-c", str(conf))),
            stdin=subprocess.DEVNULL,
            stdout=open(home / "stdout.log", "ab"),  # noqa: SIM115 (the child keeps it)
            stderr=subprocess.STDOUT,
        )
        _wait_port("127.0.0.1", self.namesrv_port, self.namesrv, home)
        for broker in self.brokers:
            broker.start()
        for broker in self.brokers:
            broker.wait_ready()
        self._watch.start()

    def _watch_routes(self) -> None:
        known: dict[str, list[dict[str, object]]] = {}
        while not self._stop.wait(ROUTE_POLL_S):
            for topic in self.topics:
                try:
                    route = route_of(("127.0.0.1", self.namesrv_port), topic)
                except (OSError, ValueError):
                    continue  # a producer keeps the route it had, too
                if route and route != known.get(topic):
                    known[topic] = route
                    self.routes.append(
                        {
                            "kind": "route",
                            "cluster": CLUSTER,
                            "event_id": f"route-{topic}-{len(self.routes):04d}",
                            "event_time": int(time.time() * 1000),
                            "topic": topic,
                            "brokers": route,
                        }
                    )

    def close(self) -> None:
        self._stop.set()
        for broker in self.brokers:
            broker.kill()
        if self.namesrv is not None:
            self.namesrv.kill()
            self.namesrv.wait(timeout=30)
            self.namesrv = None
        self.proxy.close()

    def broker(self, name: str) -> Broker:
        return next(b for b in self.brokers if b.name == name)


def _wait_port(host: str, port: int, proc: subprocess.Popen[bytes], home: Path) -> None:
    deadline = time.monotonic() + READY_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"RocketMQ's NameServer exited with {proc.returncode}; see {home / 'stdout.log'}"
            )
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"RocketMQ's NameServer did not listen within {READY_S:.0f} s")
        time.sleep(0.1)


@contextlib.contextmanager
def testbed(
    data: Path | None = None, brokers: int = 3, settings: dict[str, str] | None = None
) -> Iterator[Testbed]:
    """A started testbed on ``data`` (default: a temporary folder), its brokers with ``settings``
    over :data:`BROKER_SETTINGS`; killed at the end."""
    with tempfile.TemporaryDirectory(prefix="faultline-rocketmq-") as tmp:
        bed = Testbed(data or Path(tmp), brokers, settings=dict(settings or {}))
        try:
            bed.start()
            yield bed
        finally:
            bed.close()


# --- producers ---------------------------------------------------------------------------------


def probe_jar() -> Path:
    """The producers' jar (``java/probe``), built by Maven into the jar cache when its sources
    changed."""

    def keep(build: Path, out: Path) -> None:
        os.replace(next(build.glob("faultline-probe-*.jar")), out / "faultline-probe.jar")

    folder = jars.maven_built("probe", PROBE_POM, "probe.build", ["package"], keep)
    return folder / "faultline-probe.jar"


@dataclass
class Producer:
    """A real producer of ``profile`` (one of :data:`CLIENTS`) running in a JVM of its own; its
    records are in :attr:`out` once :meth:`wait` returned (``streaming.tools.judge.Record``)."""

    proc: subprocess.Popen[bytes]
    out: Path
    producer_id: str

    def wait(self, limit: float = 300.0) -> None:
        code = self.proc.wait(timeout=limit)
        if code != 0:
            log = (self.out / "stdout.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"producer {self.producer_id} exited with {code}:\n{log}")


def producer(
    bed: Testbed,
    profile: str,
    producer_id: str,
    out: Path,
    *,
    mode: str = "SYNC",
    latency_fault: bool = True,
    rate: float = 20.0,
    duration_ms: int = 10_000,
    timeout_ms: int = 3_000,
    topic: str = TOPIC,
    transactions: bool = False,
    linger_ms: int = 0,
    group: str = "faultline-probe",
) -> Producer:
    """Start a producer of ``profile`` sending to ``topic`` for ``duration_ms``; transactional,
    it stays ``linger_ms`` more to answer the broker's checks (a broker checks any producer of
    the message's ``group``: give each transactional producer a group of its own)."""
    args = {
        "namesrv": bed.namesrv_address,
        "topic": topic,
        "id": producer_id,
        "profile": profile,
        "out": str(out),
        "mode": mode,
        "latency-fault": str(latency_fault).lower(),
        "rate": str(rate),
        "duration-ms": str(duration_ms),
        "timeout-ms": str(timeout_ms),
        "cluster": CLUSTER,
        "transactions": str(transactions).lower(),
        "linger-ms": str(linger_ms),
        "group": group,
    }
    return Producer(_probe(PROBE_MAIN, profile, out, args), out, producer_id)


def consumer(
    bed: Testbed,
    profile: str,
    group: str,
    out: Path,
    *,
    max_reconsume: int = 2,
    duration_ms: int = 30_000,
    topic: str = TOPIC,
) -> Producer:
    """Start a push consumer of ``profile`` in ``group`` that asks for retries
    (``org.faultline.probe.Consumer``: its rule is in its docstring) for ``duration_ms``, then
    reads the group's DLQ."""
    args = {
        "namesrv": bed.namesrv_address,
        "topic": topic,
        "group": group,
        "out": str(out),
        "max-reconsume": str(max_reconsume),
        "duration-ms": str(duration_ms),
        "cluster": CLUSTER,
    }
    return Producer(_probe(CONSUMER_MAIN, profile, out, args), out, group)


def _probe(main: str, profile: str, out: Path, args: dict[str, str]) -> subprocess.Popen[bytes]:
    out.mkdir(parents=True, exist_ok=True)
    classpath = [probe_jar(), *jars.find(profile, f"a {profile} client")]
    flat = [x for k, v in args.items() for x in (f"--{k}", v)]
    note_jvm_start(f"rocketmq {main.rsplit('.', 1)[1].lower()} {profile}")
    return subprocess.Popen(
        _with_parent(_java(classpath, out, main, *flat)),
        stdin=subprocess.DEVNULL,
        stdout=open(out / "stdout.log", "ab"),
        stderr=subprocess.STDOUT,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m streaming.sim.rocketmq", description=__doc__)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--data", type=Path, help="the testbed's folder (default: temporary)")
    args = parser.parse_args()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with testbed(args.data, args.brokers) as bed:
        print(f"namesrv {bed.namesrv_address}", flush=True)
        for b in bed.brokers:
            print(f"{b.name} {b.address} (topic {TOPIC}, {QUEUES} queues)", flush=True)
        stop.wait()
    sys.exit(0)


if __name__ == "__main__":
    main()
