"""The state store (``state_store: hdfs | rocksdb``): RocksDB writes the tables of Spark's default
provider, through a crash and a restart; ``faultline state`` and ``faultline replay`` read its
checkpoint; a checkpoint keeps its provider; and with a small ``min_batches_to_retain`` the
state's files on disk stop growing, with either provider.

Two runs of the quick scenario in small batches: the shared ``retained`` run with hdfs
(tests/streaming/conftest.py), and one with RocksDB, killed (the ``faultline`` process, SIGKILL) in
the middle and resumed in this process. Spark's background maintenance, which snapshots and
deletes old state files, runs every minute; the runs make it run every 200 ms (and snapshot every
2 batches), so the bound shows within seconds."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from streaming import cli
from streaming.job.checkpoint import LAYOUT_MARK, check_layout
from streaming.job.session import PROVIDER_CLASS, STATE_STORES
from streaming.tools import replay
from tests.streaming.conftest import (
    OUTPUT_TABLES,
    RETAIN,
    SESSION,
    Job,
    batch_rows,
    faultline,
    settings,
    table,
)

pytestmark = pytest.mark.jvm

BATCHES = 10
"""The quick scenario (1,813 records) in batches of 200."""
SNAPSHOT_EVERY = int(SESSION["spark.sql.streaming.stateStore.minDeltasForSnapshot"])
CRASH = BATCHES - RETAIN
"""The RocksDB run is killed after this batch's Delta commits, before Spark's commit log: late
enough that a replay can still start there."""
SPARK = {
    "PYSPARK_SUBMIT_ARGS": " ".join(f"--conf {k}={v}" for k, v in SESSION.items())
    + " pyspark-shell"
}
"""The killed process's Spark, set as the worker's session is (``SESSION``)."""


def _args(folder: Path, *extra: str) -> tuple[str, ...]:
    config = folder / "job.yaml"
    config.write_text(f"min_batches_to_retain: {RETAIN}\n")
    out, ck = str(folder / "out"), str(folder / "ck")
    return ("run", "--scenario", "quick", "--config", str(config), "--output", out,
            "--checkpoint", ck, "--max-records-per-batch", "200", *extra)  # fmt: skip


@pytest.fixture(scope="module")
def hdfs(retained: Path) -> Path:
    """The run with Spark's default provider (``out`` and ``ck`` under it)."""
    return retained


@pytest.fixture(scope="module")
def rocksdb(job: Job, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run with ``--state-store rocksdb``, killed (SIGKILL) after batch :data:`CRASH`'s Delta
    commits and before Spark's commit log, then started again in this process."""
    folder = tmp_path_factory.mktemp("rocksdb")
    args = _args(folder, "--state-store", "rocksdb")
    failpoint = {"FAULTLINE_FAILPOINT": f"after-commit-batches:{CRASH}"}
    crashed = faultline(*args, cwd=folder, env={**SPARK, **failpoint})
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert sorted(table(folder / "out", "batches")["batch_id"]) == list(range(CRASH + 1))
    result = job(*args, cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder


def _state_files(ck: Path) -> dict[str, set[int]]:
    """The batches whose state files the checkpoint holds, per kind of file (``delta`` and
    ``snapshot`` for hdfs; ``changelog`` and ``zip`` for RocksDB, whose snapshots' data files
    are under ``SSTs``)."""
    kinds: dict[str, set[int]] = {}
    for path in (ck / "faultline" / "state" / "0").glob("[0-9]*/*"):
        found = re.fullmatch(r"(\d+)\.(\w+)", path.name)
        if found:
            kinds.setdefault(found.group(2), set()).add(int(found.group(1)))
    return kinds


def test_rocksdb_killed_and_resumed_writes_the_rows_of_the_default_provider(
    hdfs: Path, rocksdb: Path
) -> None:
    """Every table holds the same rows in the same batches as the hdfs run: nothing lost or
    repeated by the crash. The state was RocksDB's: changelog files, and Spark's offsets log
    names the provider."""
    for name in (*OUTPUT_TABLES, "batches"):
        hdfs_rows, rocksdb_rows = table(hdfs / "out", name), table(rocksdb / "out", name)
        if name == "batches":  # timings differ
            columns = ["batch_id", "input", "valid", "quarantined", "late", "duplicates", "clock"]
            hdfs_rows, rocksdb_rows = hdfs_rows[columns], rocksdb_rows[columns]
        assert batch_rows(rocksdb_rows) == batch_rows(hdfs_rows), name
    assert sorted(table(rocksdb / "out", "batches")["batch_id"]) == list(range(BATCHES))
    assert "changelog" in _state_files(rocksdb / "ck") and "delta" not in _state_files(
        rocksdb / "ck"
    )
    assert "delta" in _state_files(hdfs / "ck")
    logged = json.loads(
        (rocksdb / "ck" / "faultline" / "offsets" / str(BATCHES - 1)).read_text().splitlines()[1]
    )
    assert logged["conf"][PROVIDER_CLASS] == STATE_STORES["rocksdb"]


@pytest.mark.parametrize("provider", ["hdfs", "rocksdb"])
def test_the_state_files_on_disk_stop_growing(hdfs: Path, rocksdb: Path, provider: str) -> None:
    """After 9 batches the checkpoint holds the state of the last few only: those Spark must
    keep (``min_batches_to_retain``), back to the snapshot they start from."""
    ck = {"hdfs": hdfs, "rocksdb": rocksdb}[provider] / "ck"
    kept = set().union(*_state_files(ck).values())
    assert max(kept) == BATCHES  # state version N is the state after batch N - 1
    assert min(kept) >= BATCHES - RETAIN - 2 * SNAPSHOT_EVERY, sorted(kept)
    logs = [p for p in (ck / "faultline" / "offsets").iterdir() if p.name.isdigit()]
    assert len(logs) <= RETAIN + 1


@pytest.fixture
def session(spark: Any) -> Iterator[None]:
    """The worker's session with Spark's default state store, as ``faultline state`` and
    ``replay`` make their own."""
    with settings(spark, **{PROVIDER_CLASS.replace(".", "__"): STATE_STORES["hdfs"]}):
        assert replay.spark_session().conf.get(PROVIDER_CLASS) == STATE_STORES["hdfs"]
        yield


def _command(*argv: str) -> str:
    args = cli._parser().parse_args(argv)
    out = io.StringIO()
    run = replay.state_command if args.command == "state" else replay.replay_command
    assert run(args, out) == 0
    return out.getvalue()


def _rows(output: Path, name: str) -> list[dict[str, Any]]:
    rows = DeltaTable(str(output / name)).to_pyarrow_table().to_pylist()
    return sorted(rows, key=repr)


def test_state_and_replay_read_a_rocksdb_checkpoint(
    session: None, hdfs: Path, rocksdb: Path, tmp_path: Path
) -> None:
    """``faultline state`` prints the same state after a batch for both providers, and a replay
    from the batch the crash cut writes the original rows."""
    for batch in (CRASH - 1, BATCHES - 1):
        printed = [
            _command("state", "--checkpoint", str(f / "ck"), "--batch", str(batch))
            for f in (hdfs, rocksdb)
        ]
        assert printed[0].startswith(f"state after batch {batch}\n")
        assert "cluster QuickCluster: clock" in printed[0]
        assert printed[1] == printed[0]
    out = _command(
        "replay", "--checkpoint", str(rocksdb / "ck"), "--output", str(tmp_path / "rep"),
        "--from-batch", str(CRASH),
    )  # fmt: skip
    assert f"replaying batches {CRASH}..{BATCHES - 1}" in out
    for name in OUTPUT_TABLES:
        expected = [r for r in _rows(rocksdb / "out", name) if r["batch_id"] >= CRASH]
        assert _rows(tmp_path / "rep", name) == expected, name


def test_a_checkpoint_is_not_resumed_with_the_other_state_store(
    job: Job, hdfs: Path, rocksdb: Path
) -> None:
    """Refused before Spark starts, in one line naming the key and both values."""
    for folder, other, made in ((rocksdb, "hdfs", "rocksdb"), (hdfs, "rocksdb", "hdfs")):
        result = job(*_args(folder, "--state-store", other), cwd=folder)
        assert result.returncode == 2
        assert result.stderr.strip() == (
            f"faultline: state_store: the checkpoint {folder / 'ck' / 'faultline'} was made with "
            f"state_store={made}, this run has {other}; its state cannot be read another way: "
            f"keep {made}, or give this job a new --checkpoint (and --output)"
        )


def test_a_checkpoint_of_an_older_faultline_keeps_the_provider_sparks_log_names(
    tmp_path: Path,
) -> None:
    """Without the state store in faultline's mark, the provider Spark logged for the newest
    batch decides."""
    from streaming.config import load_job_config
    from udfs.errors import ConfigError

    for made, other in (("hdfs", "rocksdb"), ("rocksdb", "hdfs")):
        ck = tmp_path / made / "faultline"
        (ck / "offsets").mkdir(parents=True)
        (ck / LAYOUT_MARK).write_text(json.dumps({"stateful_shards": 1}))
        for batch, provider in ((0, other), (1, made)):  # Spark's own conf, as it logs it
            meta = {"batchWatermarkMs": 0, "conf": {PROVIDER_CLASS: STATE_STORES[provider]}}
            (ck / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{{}}")
        check_layout(load_job_config(None, {"state_store": made}), ck, record=False)
        refused = f"was made with state_store={made}, this run has {other}"
        with pytest.raises(ConfigError, match=refused):
            check_layout(load_job_config(None, {"state_store": other}), ck, record=False)
