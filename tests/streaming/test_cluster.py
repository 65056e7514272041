"""``--master``: the job on a Spark standalone cluster (master and worker from the pyspark
package, on 127.0.0.1) whose executors run a Python that cannot import faultline."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from streaming.jars import note_jvm_start
from streaming.job.failpoints import TASK_ENV
from tests.streaming.conftest import (
    no_stray_files,
    same_batches,
    same_tables,
    start,
)

pytestmark = pytest.mark.jvm


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _daemon(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    note_jvm_start(args[0].rsplit(".", 1)[-1])
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip


def _wait_for(log: Path, text: str, limit: float = 90) -> None:
    deadline = time.time() + limit
    while time.time() < deadline:
        if text in log.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise TimeoutError(f"{text!r} did not appear in {log}:\n{log.read_text()[-2000:]}")


@dataclass
class Cluster:
    """A standalone master with one worker (2 cores), and a Python for executors."""

    url: str
    python: Path
    work: Path
    env: dict[str, str]
    worker: subprocess.Popen[bytes] | None = None

    def start_worker(self) -> None:
        log = self.work / f"worker-{time.monotonic_ns()}.log"
        self.worker = _daemon(
            ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1", "--cores",
             "2", "--memory", "2g", "--webui-port", str(_free_port())], log, self.env,
        )  # fmt: skip
        _wait_for(log, "Successfully registered with master")

    def kill_worker(self) -> None:
        """SIGKILL the worker and everything it started (its executors and their Python), as
        when its machine dies."""
        assert self.worker is not None
        for pid in [*_descendants(self.worker.pid), self.worker.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.worker.wait(timeout=60)
        self.worker = None


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("cluster")
    # the daemons (and so the executors) do not inherit a PYTHONPATH that shows faultline
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
           "SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(work / "worker")}  # fmt: skip
    port = _free_port()
    master = _daemon(
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(_free_port())], work / "master.log", env,
    )  # fmt: skip
    # executors get a Python with the virtualenv's libraries but no site processing, so
    # the editable install of faultline is invisible to them
    python = work / "python-isolated"
    python.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{sysconfig.get_paths()["purelib"]}" '
        f'exec {os.path.realpath(sys.executable)} -S "$@"\n'
    )
    python.chmod(0o755)
    probe = subprocess.run(
        [str(python), "-c", "import udfs"], cwd=work, env=env, capture_output=True, check=False
    )
    assert probe.returncode != 0, "the isolated Python must not see faultline"
    running = Cluster(f"spark://127.0.0.1:{port}", python, work, env)
    try:
        _wait_for(work / "master.log", "Successfully started service 'sparkMaster'")
        running.start_worker()
        yield running
    finally:
        for proc in (running.worker, master):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)


def test_the_job_runs_on_a_standalone_cluster_and_decides_as_locally_when_a_worker_is_killed(
    cluster: Cluster, reference: Path, tmp_path: Path
) -> None:
    """The job on a standalone cluster writes every table as the local reference run does, also
    when batch 1's stateful task waits, its files written, until the test SIGKILLs the worker,
    its executor and their Python; a new worker comes up, Spark runs the batch again there."""
    out = tmp_path / "out"
    job = start(
        "run", "--scenario", "quick", "--max-records-per-batch", "200", "--master", cluster.url,
        "--output", str(out), "--checkpoint", str(tmp_path / "ck"), cwd=tmp_path,
        env={"PYSPARK_PYTHON": str(cluster.python), TASK_ENV: f"after-files:1:{tmp_path}"},
    )  # fmt: skip
    held = tmp_path / "held"
    deadline = time.time() + 300
    while not held.exists() and job.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert held.exists(), job.communicate(timeout=60)[0][-3000:]
    time.sleep(0.2)  # the process id is written just after the file is made
    assert cluster.worker is not None
    assert int(held.read_text()) in _descendants(cluster.worker.pid)
    killed = list(out.glob("*/*/part-00000001-*.parquet"))  # table/day/file
    assert killed, "the held task has written its files"
    cluster.kill_worker()
    cluster.start_worker()
    log = job.communicate(timeout=600)[0]
    assert job.returncode == 0, log[-3000:]
    same_tables(reference, out)
    same_batches(reference, out)
    no_stray_files(out)
    assert not any(p.exists() for p in killed)
