"""faultline installed from its wheel: the wheel ships the configuration, the scenarios and every
module, and ``faultline run`` from an empty folder finds them (the ``installed`` and
``default_run`` fixtures, tests/streaming/conftest.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.streaming.conftest import OUTPUT_TABLES, ROOT, DefaultRun, Installed, call

pytestmark = pytest.mark.jvm


def test_the_wheel_runs_the_default_job_from_an_empty_folder(
    installed: Installed, default_run: DefaultRun
) -> None:
    shipped = set(zipfile.ZipFile(installed.wheel).namelist())
    for conf in ROOT.joinpath("conf").rglob("*.yaml"):
        assert f"streaming/conf/{conf.relative_to(ROOT / 'conf').as_posix()}" in shipped
    for module in [*ROOT.glob("udfs/**/*.py"), *ROOT.glob("streaming/**/*.py")]:
        assert module.relative_to(ROOT).as_posix() in shipped

    empty, python = default_run.cwd, installed.python
    imported = call(python, "-c", "import streaming; print(streaming.__file__)", cwd=empty)
    assert Path(imported.stdout.strip()).is_relative_to(installed.site / "streaming")
    # the other configuration and a scenario, by name or by their place in the repository
    read = (
        "from streaming.config import load_job_config, load_scenario;"
        "load_job_config('conf/rocketmq-only.yaml');"
        "load_scenario('quick'); load_scenario('conf/scenarios/quick.yaml')"
    )
    call(python, "-c", read, cwd=empty)

    assert "brokers held out (cluster scope)" in default_run.stdout
    assert "rows per table:" in default_run.stdout
    for name in (*OUTPUT_TABLES, "batches"):
        assert str(default_run.output / name) in default_run.stdout
    assert not any(empty.iterdir())
