"""The filesystem process: ``python -m tests.support.lossy_fs --backing DIR MOUNTPOINT [--mode strict|any-fsync]``.

It mounts a view of the durable state kept under DIR at MOUNTPOINT and serves it until unmounted (``fusermount3
-u MOUNTPOINT``, or SIGINT/SIGTERM). Unmounting is a power cut: what was never fsynced is not in DIR, and the
next mount of DIR shows only what was.

With ``--control`` (how ``LossyFs`` runs it) it reads commands on stdin, one a line, and answers each with one
JSON line on stdout; the first line it prints is ``{"event": "ready"}`` once the kernel has connected:

* ``stats``: the counters (calls, bytes, fsyncs) and what is unsynced right now.
* ``freeze``: the power goes off now: no later fsync makes anything durable. The answer lists what the cut
  drops (files with unsynced bytes or sizes, directories with unsynced entries).

The end of stdin (its owner died) detaches the mount and exits, so a mount never outlives the test that made it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from typing import Any

from tests.support.lossy_fs.kernel_mount import unmount
from tests.support.lossy_fs.namespace import MODES, STRICT, Namespace
from tests.support.lossy_fs.operations import LossyOperations, serve


class _Control:
    """The stdin/stdout command channel of ``--control``."""

    def __init__(self, operations: LossyOperations, mountpoint: str) -> None:
        self._ops = operations
        self._mountpoint = mountpoint
        self._out = threading.Lock()

    def say(self, message: dict[str, Any]) -> None:
        with self._out:
            sys.stdout.write(json.dumps(message) + "\n")
            sys.stdout.flush()

    def run(self) -> None:
        for line in sys.stdin:
            command = line.strip()
            if command == "stats":
                self.say(self._ops.stats())
            elif command == "freeze":
                self.say(self._ops.freeze())
            elif command:
                self.say({"error": f"unknown command {command!r}: use stats or freeze"})
        # The owner is gone: nothing will unmount us, so detach now and end the process, which closes the
        # FUSE connection (the kernel drops whatever it still wanted to write).
        unmount(self._mountpoint, lazy=True)
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.lossy_fs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backing", required=True, help="directory holding the durable state (created if absent)")
    parser.add_argument("mountpoint", help="an existing, empty directory")
    parser.add_argument("--mode", choices=MODES, default=STRICT,
                        help="strict: only a directory's fsync makes its entries durable; any-fsync: any fsync "
                             "makes every pending name change durable (ext4-like)")
    parser.add_argument("--control", action="store_true", help="take commands on stdin (see the module doc)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not os.path.isdir(args.mountpoint):
        parser.error(f"mount point {args.mountpoint} is not a directory")
    os.makedirs(args.backing, exist_ok=True)
    namespace = Namespace(os.path.abspath(args.backing), args.mode)
    control: _Control | None = None

    def ready() -> None:
        print(f"lossy_fs: {args.backing} mounted at {args.mountpoint} ({args.mode})", file=sys.stderr, flush=True)
        if control is not None:
            control.say({"event": "ready", "pid": os.getpid()})

    operations = LossyOperations(namespace, ready)
    if args.control:
        control = _Control(operations, args.mountpoint)
        threading.Thread(target=control.run, name="control", daemon=True).start()
    serve(operations, args.mountpoint)
    return 0
