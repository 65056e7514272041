"""What the job keeps in its checkpoint beside Spark's own files: the job's id in its Delta
commits, the source and layout the checkpoint was made with, and the settings of every start
(read back by ``faultline replay``)."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

from streaming.config import SECRET_SETTINGS, JobConfig, masked
from streaming.job.session import PROVIDER_CLASS, STATE_STORES
from udfs.errors import ConfigError

SOURCE_MARK = "faultline-source.json"
LAYOUT_MARK = "faultline-layout.json"
APP_ID_FILE = "faultline-app-id"


def checkpoint_app_id(checkpoint: Path) -> str:
    """The job's id in the app transactions of its Delta commits: made once, when the checkpoint
    is, and kept in it, so a checkpoint that is moved, copied or mounted elsewhere resumes as the
    same job and commits nothing twice."""
    path = checkpoint / APP_ID_FILE
    if path.exists():
        return path.read_text().strip()
    if (checkpoint / "commits").is_dir():  # older faultline derived the id from the path
        made = "faultline-" + hashlib.sha256(str(checkpoint.resolve()).encode()).hexdigest()[:16]
    else:
        made = f"faultline-{uuid.uuid4().hex[:16]}"
    checkpoint.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(made + "\n")
    os.replace(tmp, path)
    return made


def check_source(config: JobConfig, checkpoint: Path, record: bool = False) -> None:
    """A checkpoint holds one source's offsets: refuse to resume it with another source, which
    Spark would either reject with a long error or misread. ``record`` writes the mark."""
    if config.source == "kafka":
        mine = {"source": "kafka", "topics": config.topic or f"pattern {config.subscribe_pattern}"}
    elif config.source == "files":
        mine = {"source": "files", "path": str(Path(str(config.path)).resolve())}
    else:
        mine = {"source": "simulator", "scenario": config.scenario}
        if config.reporting is not None:  # other events than the scenario's own reporting
            mine["reporting"] = config.reporting
    mark = checkpoint / SOURCE_MARK
    if mark.exists():
        theirs = json.loads(mark.read_text())
        if theirs != mine:
            raise ConfigError(
                f"checkpoint {checkpoint} belongs to {theirs}, not to {mine}: give this source "
                "its own --checkpoint (and --output), or delete that checkpoint to start over"
            )
    elif record:
        checkpoint.mkdir(parents=True, exist_ok=True)
        mark.write_text(json.dumps(mine))
    check_layout(config, checkpoint, record)


def check_layout(config: JobConfig, checkpoint: Path, record: bool) -> None:
    """The stateful operator's state is stored per key and per task: a checkpoint keeps the
    ``stateful_shards`` it was made with, and with shards its ``shuffle_partitions`` (the slots
    are chosen for them), and its ``state_store``. A checkpoint made before the mark existed had
    one shard; one made before the mark held the state store used the one Spark's offsets log
    names."""
    mark = checkpoint / LAYOUT_MARK
    mine: dict[str, Any] = {
        "stateful_shards": config.stateful_shards,
        "state_store": config.state_store,
    }
    if config.stateful_shards > 1:
        mine["shuffle_partitions"] = config.shuffle_partitions
    if mark.exists():
        theirs = json.loads(mark.read_text())
    elif (checkpoint / "offsets").is_dir():
        theirs = {"stateful_shards": 1}
    else:
        if record:
            checkpoint.mkdir(parents=True, exist_ok=True)
            mark.write_text(json.dumps(mine))
        return
    theirs.setdefault("state_store", _logged_state_store(checkpoint))
    for key, value in theirs.items():
        if getattr(config, key) != value:
            raise ConfigError(
                f"{key}: the checkpoint {checkpoint} was made with {key}={value}, this run has "
                f"{getattr(config, key)}; its state cannot be read another way: keep {value}, "
                "or give this job a new --checkpoint (and --output)"
            )


def _logged_state_store(checkpoint: Path) -> str:
    """The state store Spark's offsets log names for the newest batch (each entry records the
    provider class), ``hdfs`` before the first batch."""
    logged = [int(p.name) for p in (checkpoint / "offsets").glob("*") if p.name.isdigit()]
    if not logged:
        return "hdfs"
    meta = json.loads((checkpoint / "offsets" / str(max(logged))).read_text().splitlines()[1])
    provider = str(meta.get("conf", {}).get(PROVIDER_CLASS, STATE_STORES["hdfs"]))
    return {v: k for k, v in STATE_STORES.items()}.get(provider, provider)


RUNS = "faultline-runs.jsonl"
"""One line per start of the job whose settings differ from the previous start's:
``{"from_batch": N, "settings": {...}}`` (Kafka secrets masked)."""


def record_run(config: JobConfig, checkpoint: Path) -> None:
    """Append the settings of this start to the checkpoint's :data:`RUNS`, from the next batch on
    (unchanged settings add nothing)."""
    settings = _settings(config)
    runs = read_runs(checkpoint)
    if runs and runs[-1][1] == settings:
        return
    committed = batch_ids(checkpoint / "commits")
    line = {"from_batch": max(committed, default=-1) + 1, "settings": settings}
    checkpoint.mkdir(parents=True, exist_ok=True)
    with (checkpoint / RUNS).open("a") as fh:
        fh.write(json.dumps(line, sort_keys=True) + "\n")


def _settings(config: JobConfig) -> dict[str, Any]:
    data = config.model_dump(mode="json")
    for key in SECRET_SETTINGS:
        data[key] = masked(data[key])
    return data


def read_runs(checkpoint: Path) -> list[tuple[int, dict[str, Any]]]:
    path = checkpoint / RUNS
    if not path.exists():
        return []
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [(int(x["from_batch"]), x["settings"]) for x in lines]


def batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


Offsets = dict[str, dict[str, int]]
"""Spark's Kafka source offsets: ``{topic: {partition: next offset}}``."""


def logged_offsets(checkpoint: Path, batch: int) -> Offsets:
    """The source offsets at the end of ``batch``, as Spark logged them; at the end of batch -1,
    where the query began (the offsets Spark's Kafka source resolved ``startingOffsets`` to)."""
    if batch < 0:
        text = (checkpoint / "sources" / "0" / "0").read_text().lstrip("\0")
    else:
        text = (checkpoint / "offsets" / str(batch)).read_text()
    return dict(json.loads(text.strip().splitlines()[-1]))


def planned(checkpoint: Path, batch: int) -> int:
    """The Kafka offsets the batch covers (from the partitions' offsets after the batch before,
    0 for a partition that appeared since)."""
    start, end = logged_offsets(checkpoint, batch - 1), logged_offsets(checkpoint, batch)
    return sum(
        int(offset) - int(start.get(topic, {}).get(partition, 0))
        for topic, partitions in end.items()
        for partition, offset in partitions.items()
    )
