"""Progress of a long job on stderr: phases, notes, and a task counter polled from Spark's status tracker.

Spark's own console progress bar is switched off (it is noisy and unreadable in logs); instead a daemon
thread prints one line every ``interval`` seconds while stages run: which stage, tasks done / total, elapsed.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from pyspark import SparkContext


class Progress:
    def __init__(self, job: str, *, quiet: bool = False, interval: float = 5.0, out: TextIO | None = None) -> None:
        self.job = job
        self.quiet = quiet
        self.interval = interval
        self.out = out or sys.stderr
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _print(self, text: str, *, always: bool = False) -> None:
        if always or not self.quiet:
            print(f"[{self.job} {time.monotonic() - self.started:6.1f}s] {text}", file=self.out, flush=True)

    def phase(self, text: str) -> None:
        self._print(text)

    def note(self, text: str) -> None:
        """Something the user must hear about (torn tail, corruption): printed even with --quiet."""
        self._print(f"warning: {text}", always=True)

    def watch(self, sc: SparkContext) -> None:
        """Start printing task progress of running stages until ``close``."""
        if self.quiet or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._poll, args=(sc,), name="pipeline-progress", daemon=True)
        self._thread.start()

    def _poll(self, sc: SparkContext) -> None:
        last = ""
        while not self._stop.wait(self.interval):
            try:
                tracker = sc.statusTracker()
                parts = []
                for sid in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(sid)
                    if info is not None:
                        parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks"
                                     + (f" ({info.numActiveTasks} running)" if info.numActiveTasks else ""))
            except Exception:  # noqa: BLE001 - the context is stopping; progress is best effort
                return
            line = "; ".join(parts)
            if line and line != last:
                self._print(line)
                last = line

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None
