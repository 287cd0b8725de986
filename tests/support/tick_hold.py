"""Hold a pysyncobj member's tick thread for a while, so that whatever is queued meanwhile is handled in one tick."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def tick_thread_held(member: Any, timeout: float = 30.0) -> Iterator[None]:
    """Inside the block, ``member``'s (a SyncObj's) tick thread waits in an on-tick callback; on leaving, it goes
    on. Commands proposed inside the block are all added to the log in the next tick."""
    entered, release = threading.Event(), threading.Event()
    held = [False]

    def hold_once() -> None:
        if not held[0]:
            held[0] = True
            entered.set()
            release.wait(timeout)

    member.addOnTickCallback(hold_once)
    try:
        assert entered.wait(timeout), "the tick thread never ran the hold"
        yield
    finally:
        release.set()
        member.removeOnTickCallback(hold_once)  # waits for the tick's callbacks to finish (pysyncobj holds a lock)
