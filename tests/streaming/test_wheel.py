"""faultline installed from its wheel: ``faultline run`` from an empty folder finds the
configuration and scenarios the wheel ships."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.streaming.conftest import OUTPUT_TABLES

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _call(*command: str | Path, cwd: Path) -> str:
    """``command``'s stdout; without this checkout on the Python path."""
    done = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_the_wheel_runs_the_default_job_from_an_empty_folder(tmp_path: Path) -> None:
    pip = (sys.executable, "-m", "pip")
    _call(*pip, "wheel", "--no-deps", "-w", tmp_path / "dist", ROOT, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("faultline-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for conf in ROOT.joinpath("conf").rglob("*.yaml"):
        assert f"streaming/conf/{conf.relative_to(ROOT / 'conf').as_posix()}" in shipped
    for module in [*ROOT.glob("udfs/**/*.py"), *ROOT.glob("streaming/**/*.py")]:
        assert module.relative_to(ROOT).as_posix() in shipped

    # a fresh environment that borrows the dependencies installed here: a plain path in a .pth
    # file, so that the .pth files here (faultline's editable install) are not read
    venv = tmp_path / "venv"
    _call(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(_call(python, "-c", where, cwd=tmp_path).strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _call(*pip, "--python", python, "install", "--no-deps", wheel, cwd=tmp_path)

    empty = tmp_path / "empty"
    empty.mkdir()
    imported = _call(python, "-c", "import streaming; print(streaming.__file__)", cwd=empty)
    assert Path(imported.strip()).is_relative_to(site / "streaming")
    # the other configuration and a scenario, by name or by their place in the repository
    read = (
        "from streaming.config import load_job_config, load_scenario;"
        "load_job_config('conf/rocketmq-only.yaml');"
        "load_scenario('quick'); load_scenario('conf/scenarios/quick.yaml')"
    )
    _call(python, "-c", read, cwd=empty)

    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    faultline = venv / "bin" / "faultline"
    stdout = _call(faultline, "run", "--output", out, "--checkpoint", checkpoint, cwd=empty)
    assert "isolations (cluster scope)" in stdout and "rows per table:" in stdout
    for name in (*OUTPUT_TABLES, "batches"):
        assert str(out / name) in stdout
    assert not any(empty.iterdir())
