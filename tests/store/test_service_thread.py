"""store/service_thread.py: the one shape of every background loop."""

from __future__ import annotations

import threading
import time

from raftmq.store.service_thread import ServiceThread


class Ticker(ServiceThread):
    def __init__(self, interval: float = 3600.0) -> None:
        super().__init__("ticker-test")
        self.interval = interval
        self.ticks = 0
        self.woken = threading.Event()

    def run(self) -> None:
        while not self.wait(self.interval):
            self.ticks += 1
            self.woken.set()


def test_shutdown_cuts_the_wait_short_and_joins():
    t = Ticker(interval=3600.0)
    t.start()
    assert t.running and t.alive
    started = time.monotonic()
    t.shutdown()
    assert time.monotonic() - started < 30  # not the hour-long interval
    assert not t.running and not t.alive and t.stopped


def test_start_twice_is_one_loop_and_start_after_shutdown_resumes():
    t = Ticker(interval=0.01)
    t.start()
    first = t._thread
    t.start()
    assert t._thread is first
    assert t.woken.wait(30)
    t.shutdown()
    t.woken.clear()
    t.start()
    assert t.woken.wait(30), "a service started again after a shutdown loops again"
    t.shutdown()


def test_an_unexpected_error_is_logged_not_raised(caplog):
    class Broken(ServiceThread):
        def run(self) -> None:
            raise RuntimeError("disk on fire")

    b = Broken("broken-test")
    with caplog.at_level("ERROR", logger="raftmq.store.service_thread"):
        b.start()
        b.join(30)
    assert not b.alive
    assert "broken-test stopped on an unexpected error" in caplog.text


def test_every_background_loop_is_a_service_thread():
    from raftmq.node.pop_core import OffsetSync
    from raftmq.replication.anti_entropy import AntiEntropy
    from raftmq.store.flush import GroupCommitService, PeriodicFlushService
    from raftmq.store.index_service import IndexFileFlush
    from raftmq.store.reput import ReputMessageService
    from raftmq.store.retention import RetentionService
    from raftmq.store.schedule import ScheduleMessageService
    from raftmq.store.scrubber import Scrubber
    from raftmq.store.timer import TimerMessageService

    for cls in (AntiEntropy, GroupCommitService, PeriodicFlushService, IndexFileFlush, RetentionService,
                ReputMessageService, ScheduleMessageService, Scrubber, TimerMessageService, OffsetSync):
        assert issubclass(cls, ServiceThread), cls
