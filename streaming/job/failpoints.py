"""Crash points for the crash tests, off unless ``FAULTLINE_FAILPOINT`` names one.

``FAULTLINE_FAILPOINT=POINT:BATCH`` stops the driver when micro-batch ``BATCH`` reaches
``POINT``: with SIGKILL (a crash, as the operating system would do it), or, with
``FAULTLINE_FAILPOINT_ACTION=raise``, by raising :class:`Crash` inside the batch, which fails the
query at the same place without killing the process (so a test can restart the job in the same
interpreter). Either way Spark has logged the batch's offsets and not its commit, so the restart
replays the batch, as after a real crash.

The points, in the order a batch passes them (``TABLE`` is each table the batch writes, in
:data:`udfs.schema.TABLES` order, then ``batches``):

- ``before-publish``, ``after-publish``: around publishing to Kafka (only with Kafka outputs);
- ``before-commit-TABLE``, ``after-commit-TABLE``: around each table's Delta commit;
  ``after-commit-batches`` is the last one, just before Spark's own commit log.

``FAULTLINE_TASK_FAILPOINT=POINT:BATCH:FOLDER`` holds a task of the stateful operator (on an
executor) when micro-batch ``BATCH`` reaches ``POINT``, so that a test can kill the executor
mid-batch: the first task to get there writes its process id to ``FOLDER/held`` and waits to be
killed; the retried task, and every other, passes. Its one point is ``after-files``: the task
has written its Parquet files and not yet returned them. The driver hands the variable on to the
executors (:func:`executor_env`).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

ENV = "FAULTLINE_FAILPOINT"
ACTION_ENV = "FAULTLINE_FAILPOINT_ACTION"
TASK_ENV = "FAULTLINE_TASK_FAILPOINT"
HOLD_S = 300
"""How long a held task waits to be killed before it fails on its own."""


class Crash(Exception):
    """Raised at the failpoint when ``FAULTLINE_FAILPOINT_ACTION=raise``."""


def reach(point: str, batch_id: int) -> None:
    """Stop here if this is the configured failpoint."""
    if os.environ.get(ENV) != f"{point}:{batch_id}":
        return
    if os.environ.get(ACTION_ENV) == "raise":
        raise Crash(f"failpoint {point}:{batch_id}")
    os.kill(os.getpid(), signal.SIGKILL)


def executor_env() -> dict[str, str]:
    """The failpoint variables an executor's tasks need (``spark.executorEnv.*``)."""
    return {TASK_ENV: os.environ[TASK_ENV]} if TASK_ENV in os.environ else {}


def hold(point: str, batch_id: int) -> None:
    """Executor side: wait here to be killed if this is the configured task failpoint and no
    task has waited here before."""
    setting = os.environ.get(TASK_ENV, "")
    prefix = f"{point}:{batch_id}:"
    if not setting.startswith(prefix):
        return
    marker = Path(setting[len(prefix) :]) / "held"
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:  # held once already: this is the retry
        return
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(HOLD_S)
    raise Crash(f"task failpoint {point}:{batch_id}: not killed within {HOLD_S} s")
