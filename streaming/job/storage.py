"""A full disk or a folder the job cannot write: one line that names the folder and says what to
do, wherever it happens (a task's Parquet file, a Delta commit, Spark's checkpoint).

Nothing is lost when it happens: a batch whose files or commits fail is not in Spark's commit log,
so the next run replays it, deletes what the failed attempt left and commits it once (see
:mod:`streaming.job.sink`)."""

from __future__ import annotations

import errno
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from udfs.errors import FaultlineError

ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)
"""The errors of a write that the operator fixes on the machine, not in faultline."""
ADVICE = "free space or fix the folder, then run again: the job resumes from its checkpoint"
PROBE_BYTES = 64 * 1024


class StorageError(FaultlineError):
    """A folder of the job could not be written; the message names it, the error and the fix."""


def cannot_write(folder: Path | str, code: int) -> StorageError:
    """The error for ``folder`` and the errno ``code``."""
    return StorageError(f"cannot write {folder}: {os.strerror(code)} (errno {code}); {ADVICE}")


def _code(exc: BaseException | str) -> int | None:
    """The errno of a failed write: the exception's own, or read out of its text (delta-rs says
    ``(os error 28)``, Arrow ``[errno 28]``, Java only the operating system's words)."""
    if isinstance(exc, OSError) and exc.errno in ERRNOS:
        return exc.errno
    text = str(exc)
    for found in re.findall(r"(?:os error|errno) (\d+)", text, re.IGNORECASE):
        if int(found) in ERRNOS:
            return int(found)
    for code in ERRNOS:
        if os.strerror(code) in text:
            return code
    return None


@contextmanager
def writing(folder: Path) -> Iterator[None]:
    """Writes into ``folder``: a failure that a full disk or an unwritable folder explains is
    raised as :class:`StorageError` naming the folder."""
    try:
        yield
    except StorageError:
        raise
    except Exception as exc:
        code = _code(exc)
        if code is None:
            raise
        raise cannot_write(folder, code) from exc


FROM_TASK = re.compile(r"StorageError: (cannot write .*)$", re.MULTILINE)


def from_failure(error: BaseException | str, roots: tuple[Path, ...]) -> StorageError | None:
    """The storage error behind a failed batch or query, if there is one: a task's own (it
    arrives inside Spark's long error), else one Spark met writing the checkpoint, named by the
    path in its message, or else by the first of ``roots`` that cannot take a small file now."""
    if isinstance(error, StorageError):
        return error
    if isinstance(error, FaultlineError):  # says what to do already
        return None
    text = str(error)
    task = FROM_TASK.search(text)
    if task is not None:
        return StorageError(task.group(1).strip())
    code = _code(error)
    if code is None:
        return None
    for root in roots:
        named = re.search(re.escape(str(root)) + r"[^\s'\":,()]*", text)
        if named is not None:
            path = Path(named.group(0))
            return cannot_write(path if path.is_dir() else path.parent, code)
    for root in roots:
        probed = _probe(root)
        if probed is not None:
            return cannot_write(root, probed)
    return cannot_write("Spark's local folders (spark.local.dir, /tmp by default)", code)


def _probe(folder: Path) -> int | None:
    """The errno of writing a small file into ``folder`` now, None if it can be written."""
    try:
        with tempfile.TemporaryFile(dir=folder) as f:
            f.write(b"\0" * PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        return exc.errno if exc.errno in ERRNOS else None
    return None
