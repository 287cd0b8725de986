"""ServiceThread: the one shape of every background loop (RocketMQ's ServiceThread).

Why one base: each loop (flush, reput, retention, scrubber, delayed and timer delivery, index flushing, and
replication's anti-entropy) needs the same things, and each hand-written copy got one of them slightly different:
a named daemon thread with its kernel name set (``top -H`` shows which loop burns CPU), a stop event the loop
sleeps on so shutdown never waits out an interval, a wake-up to run at once, a start that is a no-op while running
(and works again after a shutdown), a shutdown that joins with a bound, and an unexpected exception logged instead
of ending the loop silently. Subclasses write ``run()``: a loop on ``while not self.wait(interval)``.
"""

from __future__ import annotations

import logging
import threading

from raftmq.store.thread_name import name_native_thread

log = logging.getLogger(__name__)


class ServiceThread:
    """A named background loop; ``run()`` returns when ``stopped`` is set."""

    shutdown_timeout: float | None = None  # how long shutdown() waits for run(); None: until it returns

    def __init__(self, name: str, native_name: str | None = None) -> None:
        """``name``: the Python thread's name; ``native_name``: the kernel's (15 bytes), default ``name``."""
        self.name = name
        self._native_name = native_name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ what run() uses
    def run(self) -> None:
        raise NotImplementedError

    @property
    def stopped(self) -> bool:
        """True once shutdown was asked for: the loop finishes its step and returns."""
        return self._stop.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, cut short by shutdown; True when the loop should stop."""
        return self._stop.wait(seconds)

    def wakeup(self) -> None:
        """Ask the loop to run now; subclasses that sleep on their own condition signal it here."""

    # ------------------------------------------------------------------ life cycle
    @property
    def running(self) -> bool:
        """Started and not shut down (a one-shot service stays "running" after run() returned: see ``alive``)."""
        return self._thread is not None

    @property
    def alive(self) -> bool:
        """``run()`` is executing right now."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the loop; nothing while it runs (start again after a shutdown to resume it)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run_safely, name=self.name, daemon=True)
        self._thread.start()

    def _run_safely(self) -> None:
        name_native_thread(self._native_name)
        try:
            self.run()
        except Exception:  # a loop that dies must be visible, and must not take the process down
            log.exception("%s stopped on an unexpected error", self.name)

    def join(self, timeout: float | None = None) -> None:
        """Wait for ``run()`` to return by itself (a one-shot service), at most ``timeout`` seconds."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def shutdown(self) -> None:
        """Stop the loop and wait for it (at most ``shutdown_timeout``)."""
        self._stop.set()
        self.wakeup()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(self.shutdown_timeout)
            if thread.is_alive():
                log.error("%s did not stop within %.0f s", self.name, self.shutdown_timeout)
