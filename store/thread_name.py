"""Kernel names for raftmq's threads, so ``top -H``, ``ps -L`` and ``/proc/<pid>/task/<tid>/comm`` say which
thread uses the CPU (reput, Raft, group commit, ...), and the CPU time of a process read back by those names.
Python 3.11 names threads only inside the interpreter: the kernel shows every one as ``python``. Linux keeps 15
bytes of a name; the main thread keeps the process's name.
"""

from __future__ import annotations

import ctypes
import os
import threading

_PR_SET_NAME = 15

try:  # the C library this process has loaded already (dlopen(NULL)): find_library would run /sbin/ldconfig
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux / no prctl: names stay as they are
    _prctl = None


def name_native_thread(name: str | None = None) -> None:
    """Give the calling thread the kernel name ``name`` (default: its Python name), cut to 15 bytes."""
    if _prctl is None or threading.current_thread() is threading.main_thread():
        return
    text = (name or threading.current_thread().name).encode("ascii", "replace")[:15]
    _prctl(_PR_SET_NAME, ctypes.c_char_p(text), 0, 0, 0)


def cpu_seconds_by_thread(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of process ``pid``'s live threads by kernel name, threads of one name added up;
    the main thread is ``main``. Empty where there is no /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        name = "main" if int(tid) == pid else raw[raw.index("(") + 1 : raw.rindex(")")]
        out[name] = out.get(name, 0.0) + _stat_cpu_ticks(raw) / tick
    return out


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of every thread of process ``pid``; NaN when it is gone or there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return float("nan")
    return _stat_cpu_ticks(raw) / os.sysconf("SC_CLK_TCK")


def _stat_cpu_ticks(raw: str) -> int:
    """utime + stime, in clock ticks, of a /proc ``stat`` line (fields after the parenthesised name)."""
    fields = raw.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])
