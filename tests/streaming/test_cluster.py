"""``--master``: the job on a Spark standalone cluster (master and worker from the pyspark
package, on 127.0.0.1) whose executors run a Python that cannot import faultline."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from tests.streaming.conftest import DECISION_TABLES, canonical, faultline

pytestmark = pytest.mark.spark


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _daemon(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    work = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent),
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(work / "worker")}  # fmt: skip
    port = _free_port()
    master = _daemon(
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(_free_port())], work / "master.log", env,
    )  # fmt: skip
    worker = None
    try:
        _wait_for(work / "master.log", "Successfully started service 'sparkMaster'")
        url = f"spark://127.0.0.1:{port}"
        worker = _daemon(
            ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "2",
             "--memory", "2g", "--webui-port", str(_free_port())], work / "worker.log", env,
        )  # fmt: skip
        _wait_for(work / "worker.log", "Successfully registered with master")
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
            [str(python), "-c", "import udfs"], cwd=work, capture_output=True, check=False
        )
        assert probe.returncode != 0, "the isolated Python must not see faultline"
        yield url, python
    finally:
        for proc in (worker, master):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)


def test_the_job_runs_on_a_standalone_cluster_and_decides_as_locally(
    cluster: tuple[str, Path], reference: Path, tmp_path: Path
) -> None:
    url, python = cluster
    result = faultline(
        "run", "--scenario", "quick", "--master", url, "--output", str(tmp_path / "out"),
        "--checkpoint", str(tmp_path / "ck"), cwd=tmp_path, env={"PYSPARK_PYTHON": str(python)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    for name in ("fault_items", *DECISION_TABLES):
        assert canonical(tmp_path / "out", name) == canonical(reference, name), name
