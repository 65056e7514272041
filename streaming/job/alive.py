"""The running job's liveness mark, which ``faultline status`` and the dashboard read."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

ALIVE = Path("_job") / "alive.json"
"""Where, under the output, the running job keeps its liveness mark (:class:`Alive`)."""


class Alive:
    """The liveness mark of a running job: ``output/_job/alive.json`` holds the wall time of the
    driver's latest sign of life (``at``, epoch seconds), the last batch Spark reported and the
    driver's pid, rewritten atomically at every sign. Spark runs no micro-batch for a trigger that
    finds no records, so the ``batches`` table alone cannot tell an idle job from a stalled or
    killed one; the mark can: the job's wait loop beats every ``progress_interval`` and the
    listener at every progress and idle event (``spark.sql.streaming.noDataProgressEventInterval``,
    10 s by default). A mark older than ``streaming.tools.status.LIVE_S`` without a recorded end
    means the driver is gone or stuck."""

    def __init__(self, output: Path | None) -> None:
        self.path = None if output is None else output / ALIVE
        self.batch_id: int | None = None
        self._lock = threading.Lock()

    def beat(self, batch_id: int | None = None) -> None:
        """Rewrite the mark now (with ``batch_id``, the latest batch Spark reported)."""
        if self.path is None:
            return
        with self._lock:
            if batch_id is not None:
                self.batch_id = max(batch_id, self.batch_id or 0)
            mark = {"at": round(time.time(), 3), "batch_id": self.batch_id, "pid": os.getpid()}
            written = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                written.write_text(json.dumps(mark) + "\n", encoding="utf-8")
                os.replace(written, self.path)  # a reader sees the old mark or the new
            except OSError:  # a full disk stops the mark, not the job: status says stalled
                pass


def read_alive(output: Path) -> dict[str, Any] | None:
    """The job's liveness mark (:class:`Alive`), or None: a job that wrote none (older than the
    mark, or never started), or a mark that cannot be read."""
    try:
        mark: dict[str, Any] = json.loads((output / ALIVE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) and isinstance(mark.get("at"), int | float) else None
