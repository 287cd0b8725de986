"""Progress of a long job on stderr: phases, notes, and a task counter polled from Spark's status tracker.

Spark's own console progress bar is switched off (it is noisy and unreadable in logs); instead a daemon
thread prints one line every ``interval`` seconds while stages run: which stage, tasks done / total, elapsed.
The first line comes as the job starts, and Spark's start-up (tens of seconds of JVM and library loading on a
busy machine) is ticked like any other wait, so a job is never silent for longer than ``interval``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # importing pyspark takes seconds: not before the first line is out
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
        self._print("started")

    def _print(self, text: str, *, always: bool = False) -> None:
        if always or not self.quiet:
            print(f"[{self.job} {time.monotonic() - self.started:6.1f}s] {text}", file=self.out, flush=True)

    def phase(self, text: str) -> None:
        self._print(text)

    def note(self, text: str) -> None:
        """Something the user must hear about (torn tail, corruption): printed even with --quiet."""
        self._print(f"warning: {text}", always=True)

    @contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """``what`` now, "still <what>" every ``interval`` while the block runs, and how long it took."""
        self._print(what)
        done = threading.Event()
        start = time.monotonic()

        def tick() -> None:
            while not done.wait(self.interval):
                self._print(f"still {what} ({time.monotonic() - start:.0f}s)")

        ticker = None if self.quiet else threading.Thread(target=tick, name="pipeline-waiting", daemon=True)
        if ticker is not None:
            ticker.start()
        try:
            yield
        finally:
            done.set()
            if ticker is not None:
                ticker.join(timeout=1)
            self._print(f"done {what} in {time.monotonic() - start:.1f}s")

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
