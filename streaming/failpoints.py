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
"""

from __future__ import annotations

import os
import signal

ENV = "FAULTLINE_FAILPOINT"
ACTION_ENV = "FAULTLINE_FAILPOINT_ACTION"


class Crash(Exception):
    """Raised at the failpoint when ``FAULTLINE_FAILPOINT_ACTION=raise``."""


def reach(point: str, batch_id: int) -> None:
    """Stop here if this is the configured failpoint."""
    if os.environ.get(ENV) != f"{point}:{batch_id}":
        return
    if os.environ.get(ACTION_ENV) == "raise":
        raise Crash(f"failpoint {point}:{batch_id}")
    os.kill(os.getpid(), signal.SIGKILL)
