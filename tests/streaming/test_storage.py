"""A full disk or a table folder the job cannot write: one line naming the folder, exit code 2, and
a run after the fix that loses nothing. The faults are real: a small tmpfs mounted as the output
root, and ``chattr +i`` on a folder (root ignores permission bits, not the immutable flag)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest

from streaming.job import sink
from streaming.job.storage import ADVICE, StorageError, from_failure
from tests.streaming.conftest import (
    Job,
    batches_committed,
    faultline,
    no_stray_files,
    same_batches,
    same_tables,
)
from udfs.schema import TABLES


def _root(*command: str) -> None:
    """A command that sets up a fault; the test fails, saying why, if it cannot."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, (
        f"cannot set up the fault with {' '.join(command)!r} ({done.stderr.strip()}): these tests "
        "need root (or CAP_SYS_ADMIN and CAP_LINUX_IMMUTABLE) to mount a tmpfs and chattr +i"
    )


@contextmanager
def _tmpfs(folder: Path, size: str) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    _root("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder))
    try:
        yield
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


@contextmanager
def _immutable(folder: Path) -> Iterator[None]:
    _root("chattr", "+i", str(folder))
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=False)


def _the_line(stderr: str, folder: Path, error: str) -> None:
    """The job's own words are one line, the last one, naming the folder and what to do (Spark's
    log lines come before it)."""
    ours = [line for line in stderr.splitlines() if line.startswith("faultline:")]
    expected = rf"faultline: cannot write {re.escape(str(folder))}\S*: {error}; {re.escape(ADVICE)}"
    assert len(ours) == 1 and re.fullmatch(expected, ours[0]), stderr[-3000:]
    assert stderr.rstrip().splitlines()[-1] == ours[0]


def _args(out: Path, ck: Path) -> tuple[str, ...]:
    return ("run", "--scenario", "quick", "--max-records-per-batch", "200", "--output", str(out),
            "--checkpoint", str(ck))  # fmt: skip


def test_a_delta_commit_into_a_folder_that_cannot_be_written_names_the_table(
    tmp_path: Path,
) -> None:
    sink.create_tables(tmp_path)
    name = "heartbeats"
    row = {"cluster": "c", "broker_name": "b", "event_id": "e", "event_time": 1_000}
    metas = sink.write_file(tmp_path, name, pa.Table.from_pylist([row], TABLES[name]), 0, "app")
    with _immutable(tmp_path / name / "_delta_log"), pytest.raises(StorageError) as raised:
        sink.commit_batch(tmp_path, 0, metas, "app", 0)
    assert str(raised.value) == (
        f"cannot write {tmp_path / name}: Operation not permitted (errno 1); {ADVICE}"
    )


def test_a_checkpoint_write_that_spark_reports_is_named_by_its_path(tmp_path: Path) -> None:
    java = (
        "org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] ...\n"
        f"java.io.FileNotFoundException: {tmp_path}/ck/offsets/.3.tmp (Read-only file system)"
    )
    fault = from_failure(java, (tmp_path / "out", tmp_path / "ck"))
    assert (
        str(fault)
        == f"cannot write {tmp_path}/ck/offsets: Read-only file system (errno 30); {ADVICE}"
    )
    assert from_failure(RuntimeError("[Errno 2] no such file"), (tmp_path,)) is None


@pytest.mark.jvm
def test_a_full_disk_stops_the_job_with_one_line_and_the_next_run_loses_nothing(
    job: Job, reference: Path, tmp_path: Path
) -> None:
    """The ``faultline`` process on a full disk; the run after the fix in this process."""
    disk = tmp_path / "disk"  # output and checkpoint on one small disk, which the tables fill
    out, ck = disk / "out", disk / "ck"
    with _tmpfs(disk, "1200k"):
        full = faultline(*_args(out, ck), cwd=tmp_path)
        assert full.returncode == 2, full.stderr[-3000:]
        _the_line(full.stderr, disk, r"No space left on device \(errno 28\)")
        assert 0 < batches_committed(out) < batches_committed(reference)  # it stopped mid-run
        _root("mount", "-o", "remount,size=32m", str(disk))
        again = job(*_args(out, ck), cwd=tmp_path)
        assert again.returncode == 0, again.stderr[-3000:]
        same_tables(reference, out)
        same_batches(reference, out)
        no_stray_files(out)


@pytest.mark.jvm
def test_a_table_folder_that_cannot_be_written_stops_the_job_and_the_next_run_loses_nothing(
    job: Job, reference: Path, tmp_path: Path
) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    sink.create_tables(out)
    with _immutable(out / "broker_decisions"):
        refused = job(*_args(out, ck), cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr[-3000:]
    _the_line(refused.stderr, out / "broker_decisions", r"Operation not permitted \(errno 1\)")
    again = job(*_args(out, ck), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    same_tables(reference, out)
    same_batches(reference, out)
    no_stray_files(out)
