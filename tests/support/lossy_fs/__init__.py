"""A FUSE filesystem that forgets every write not made durable by an fsync (the power-loss test tier's disk).

The technique Jepsen uses with LazyFS: writes (``write(2)``, and the kernel's writeback of shared writable mmaps)
stay in a volatile layer until the file is fsynced (``msync(MS_SYNC)`` reaches it as an fsync); name changes
stay volatile until a directory fsync (``strict``) or any fsync (``any-fsync``) makes them durable. A power cut
drops the volatile layer. Modules:

* ``file_data``: one file's durable bytes and its volatile chunks.
* ``namespace``: the current and the durable tree, and the rules for what becomes durable when.
* ``operations``: the FUSE calls (libfuse 3 through mfusepy) mapped onto the namespace.
* ``daemon``: the filesystem process (``python -m tests.support.lossy_fs --backing DIR MOUNTPOINT``).
* ``kernel_mount``: is FUSE there, is a path mounted, unmount.
* ``mount``: ``LossyFs``, what tests call: ``mount()``, ``cut()``, ``freeze()``, ``unmount()``, ``remount()``,
  ``counters()``; ``cut_together(mounts)`` for a whole cluster.
"""

from tests.support.lossy_fs.kernel_mount import fuse_missing
from tests.support.lossy_fs.mount import CutReport, LossyFs, cut_together
from tests.support.lossy_fs.namespace import ANY_FSYNC, STRICT

__all__ = ["ANY_FSYNC", "STRICT", "CutReport", "LossyFs", "cut_together", "fuse_missing"]
