"""The kernel's side of a FUSE mount: is FUSE there, is a path mounted, take a mount away."""

from __future__ import annotations

import os
import re
import subprocess

FUSE_DEVICE = "/dev/fuse"


def fuse_missing() -> str | None:
    """Why this kernel cannot mount FUSE, or None when it can."""
    if not os.path.exists(FUSE_DEVICE):
        return f"the kernel has no FUSE ({FUSE_DEVICE} is missing)"
    return None


_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """A mountinfo path: spaces, tabs, newlines and backslashes are written as octal escapes (``\\040``)."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def is_mounted(path: str) -> bool:
    """Whether something is mounted at ``path`` (per /proc/self/mountinfo)."""
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return any(_unescape(line.split(" ", 5)[4]) == target for line in f)


def unmount(path: str, *, lazy: bool = False) -> str | None:
    """``fusermount3 -u`` (``-z``: detach now, even while files are open); the error text, or None when done."""
    result = subprocess.run(["fusermount3", "-u", *(["-z"] if lazy else []), path], capture_output=True,
                            text=True)
    return None if result.returncode == 0 else (result.stderr.strip() or f"exit {result.returncode}")
