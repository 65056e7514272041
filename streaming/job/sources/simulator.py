"""The ``simulator`` source: a scenario's events written once as JSON-lines files, then read by
the files source."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from streaming.config import JobConfig, load_scenario, scenario_path
from streaming.sim.simulator import simulate, write_jsonl


def simulator_folder(config: JobConfig, output: Path) -> Path:
    """The scenario's events as JSON-lines under the output root, generated once: the same
    scenario file gives the same folder and the same events."""
    scenario = load_scenario(config.scenario)
    digest = hashlib.sha256(scenario_path(config.scenario).read_bytes()).hexdigest()[:12]
    folder = output / "_simulator" / f"{scenario.name}-{digest}"
    if config.reporting is not None and config.reporting != scenario.reporting:
        scenario = scenario.model_copy(update={"reporting": config.reporting})
        folder = folder.with_name(f"{folder.name}-{config.reporting}")
    if not (folder / "_SUCCESS").exists():
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        write_jsonl(simulate(scenario), tmp)
        (tmp / "_SUCCESS").touch()
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    return folder
