"""The store's busy threads carry kernel names (store.thread_name), so `top -H` tells reput from flushing."""

import importlib
import math
import os
import sys
import threading
import time

from raftmq.store import MessageStore, StoreConfig
from raftmq.store.thread_name import cpu_seconds_by_thread, name_native_thread, process_cpu_seconds


def _kernel_names(pid: int) -> set[str]:
    names = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            names.add(f.read().strip())
    return names


def test_an_open_store_shows_its_reput_and_flush_threads_by_name(tmp_path):
    with MessageStore(StoreConfig(root_dir=str(tmp_path))):
        names = _kernel_names(os.getpid())
        by_thread = cpu_seconds_by_thread(os.getpid())
    assert "reput" in names
    assert "FlushRealTimeSe" in names  # FlushRealTimeService, cut to the kernel's 15 bytes
    assert {"main", "reput", "FlushRealTimeSe"} <= set(by_thread) and all(v >= 0 for v in by_thread.values())


def test_a_long_name_is_cut_and_the_main_thread_keeps_the_process_name():
    process_name = open("/proc/self/comm").read().strip()
    seen = []

    def run():
        name_native_thread("a-rather-long-thread-name")
        seen.append(open(f"/proc/self/task/{threading.get_native_id()}/comm").read().strip())

    t = threading.Thread(target=run)
    t.start()
    t.join()
    name_native_thread("main-renamed")
    assert seen == ["a-rather-long-t"]
    assert open("/proc/self/comm").read().strip() == process_name


def test_process_cpu_counts_every_thread_and_is_nan_for_a_gone_process():
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:  # burn some CPU so both readings are well above zero
        pass
    by_thread = sum(cpu_seconds_by_thread(os.getpid()).values())
    whole = process_cpu_seconds(os.getpid())
    assert whole > 0 and whole >= by_thread - 0.05  # read a moment later; ticks are 10 ms
    assert math.isnan(process_cpu_seconds(2**22 + 1))  # above Linux's pid_max limit: no such process


def test_importing_it_starts_no_process(monkeypatch):
    """Code that imports it lazily (the CLI's commands) may first do so inside a unit-tier test, where starting a
    process fails (tests/support/tiers.py): finding the C library must not run /sbin/ldconfig."""
    monkeypatch.delitem(sys.modules, "raftmq.store.thread_name")
    fresh = importlib.import_module("raftmq.store.thread_name")
    assert fresh._prctl is not None  # Linux: threads still get their kernel names
