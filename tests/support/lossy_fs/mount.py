"""``LossyFs``: one lose-unsynced-writes mount, as tests drive it (mount, power cut, unmount, counters).

    fs = LossyFs(tmp_path / "n0.disk", spec.data_dir, mode="strict").mount()
    try:
        ...start the node on spec.data_dir, load it, SIGKILL it...
        report = fs.cut()         # everything never fsynced is gone; the same path shows the durable state
        ...start the node again and check what it recovered...
    finally:
        fs.unmount()

A cut needs every process using the mount dead first (SIGKILL and reap them): ``cut`` freezes the filesystem
(from then on no fsync makes anything durable), unmounts it (the kernel writes its dirty pages back into the
frozen, volatile layer, which dies with the filesystem process, so the old page cache can never reach the new
state) and mounts the durable state again at the same path.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.lossy_fs.kernel_mount import is_mounted, unmount
from tests.support.lossy_fs.namespace import MODES, STRICT

REPO_ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 60.0
ANSWER_TIMEOUT_S = 60.0
BUSY_TIMEOUT_S = 10.0  # how long a normal unmount may fail with "busy" (processes still closing files)


@dataclass
class CutReport:
    """What a power cut dropped: paths are inside the mount (``/commitlog/00000000000000000000``)."""

    unsynced_bytes: int  # bytes written and never fsynced, over all files
    files: dict[str, dict[str, int]] = field(default_factory=dict)  # path -> size, durable_size, unsynced_bytes
    # directory -> its entry changes that were not durable: "+name" vanished, "-name" came back, "~name" came back
    # as the file it named before (a rename over it undone)
    dirs: dict[str, list[str]] = field(default_factory=dict)


class LossyFs:
    """A lossy mount of the durable state under ``backing`` at ``mountpoint`` (see the module doc)."""

    def __init__(self, backing: str | os.PathLike, mountpoint: str | os.PathLike, mode: str = STRICT) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
        self.backing = Path(backing)
        self.mountpoint = Path(mountpoint)
        self.mode = mode
        self.log_path = self.backing.with_name(self.backing.name + ".log")
        self._proc: subprocess.Popen | None = None
        self._answers: queue.Queue[str | None] = queue.Queue()

    def __repr__(self) -> str:
        return f"LossyFs({str(self.backing)!r}, {str(self.mountpoint)!r}, mode={self.mode!r})"

    @property
    def mounted(self) -> bool:
        return self._proc is not None

    # ------------------------------------------------------------------ power on
    def mount(self) -> LossyFs:
        """Mount the durable state (a fresh backing directory is an empty filesystem)."""
        if self._proc is not None:
            raise RuntimeError(f"{self} is already mounted")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        if is_mounted(str(self.mountpoint)):
            raise RuntimeError(f"something else is mounted at {self.mountpoint}; unmount it first")
        self.backing.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.lossy_fs", "--backing", str(self.backing),
                 str(self.mountpoint), "--mode", self.mode, "--control"],
                cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                start_new_session=True)
        self._answers = queue.Queue()
        threading.Thread(target=self._read_answers, args=(self._proc, self._answers), daemon=True).start()
        try:
            ready = self._answer(START_TIMEOUT_S, "to come up")
            if ready.get("event") != "ready":
                raise RuntimeError(f"{self} started with {ready} instead of a ready event")
        except BaseException:
            self._stop(force=True)
            raise
        return self

    def remount(self) -> LossyFs:
        """Mount again after ``unmount`` (the power comes back): only what was durable is there."""
        return self.mount()

    # ------------------------------------------------------------------ power off
    def cut(self) -> CutReport:
        """A power cut: ``unmount`` (everything not fsynced is dropped), then ``remount``. Kill every process
        using the mount first."""
        report = self.unmount()
        if report is None:
            raise RuntimeError(f"{self} is not mounted: nothing to cut")
        self.remount()
        return report

    def unmount(self) -> CutReport | None:
        """Power off: freeze, unmount and stop the filesystem process; what was not fsynced is gone. None when it
        was not mounted. Safe to call in any teardown."""
        if self._proc is None:
            return None
        report = None
        try:
            report = self.freeze()
        finally:
            self._stop(force=report is None)
        return report

    def freeze(self) -> CutReport:
        """The instant of the power cut, without unmounting yet: from now on no fsync makes anything durable (it
        fails with EIO). Freeze several mounts first to cut them at one instant. Returns what is unsynced."""
        if self._proc is None:
            raise RuntimeError(f"{self} is not mounted")
        self._send("freeze")
        frozen = self._answer(ANSWER_TIMEOUT_S, "to freeze")
        return CutReport(frozen["unsynced_bytes"], frozen["files"], frozen["dirs"])

    def _stop(self, force: bool) -> None:
        """Unmount and reap the process; after BUSY_TIMEOUT_S of "busy" (or with ``force``), detach the mount
        lazily and kill the process, which aborts the connection: nothing of the old mount reaches the disk."""
        proc, self._proc = self._proc, None
        mountpoint = str(self.mountpoint)
        deadline = time.monotonic() + (0 if force else BUSY_TIMEOUT_S)
        error = None
        while is_mounted(mountpoint) and proc.poll() is None:
            error = unmount(mountpoint)
            if error is None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if error is not None and is_mounted(mountpoint):
            unmount(mountpoint, lazy=True)
        if proc.stdin is not None:
            proc.stdin.close()  # end of stdin: a daemon still serving detaches and exits by itself
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if is_mounted(mountpoint):  # the process died without unmounting (a crash): a dead mount
            unmount(mountpoint, lazy=True)
        if error is not None and not force:
            raise RuntimeError(f"{self}: unmount failed ({error}); detached it lazily. Is a process still "
                               f"using {mountpoint}?")

    # ------------------------------------------------------------------ counters
    def counters(self) -> dict[str, Any]:
        """Calls and bytes since this mount (reads, writes, written_bytes, fsyncs, dir_fsyncs, synced_bytes,
        name_changes) and what a cut would drop right now (unsynced_bytes, unsynced_files,
        dirs_with_unsynced_entries)."""
        if self._proc is None:
            raise RuntimeError(f"{self} is not mounted")
        self._send("stats")
        return self._answer(ANSWER_TIMEOUT_S, "to answer stats")

    # ------------------------------------------------------------------ the control channel
    @staticmethod
    def _read_answers(proc: subprocess.Popen, answers: queue.Queue) -> None:
        for line in proc.stdout:
            answers.put(line)
        answers.put(None)

    def _send(self, command: str) -> None:
        try:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(f"{self} exited:\n{self._log_tail()}") from None

    def _answer(self, timeout: float, what: str) -> dict[str, Any]:
        try:
            line = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{self} took over {timeout}s {what}:\n{self._log_tail()}") from None
        if line is None:
            raise RuntimeError(f"{self} exited before {what.removeprefix('to ')}:\n{self._log_tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self}: {answer['error']}")
        return answer

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # ------------------------------------------------------------------ with-statement
    def __enter__(self) -> LossyFs:
        return self.mount() if self._proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.unmount()


def cut_together(mounts: list[LossyFs]) -> list[CutReport]:
    """One power cut for several mounts (every member of a cluster): all frozen at one instant first, then each
    unmounted and mounted again. Kill every process using them first."""
    reports = [fs.freeze() for fs in mounts]
    for fs in mounts:
        fs.unmount()
        fs.remount()
    return reports
