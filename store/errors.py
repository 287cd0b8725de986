"""Exceptions raised by the store.

Every error a caller can cause carries a message that says what to fix. Damaged data on disk raises the errors
of ``store.integrity``: ``CorruptionError`` at open (nothing was changed), ``CorruptReadError`` on a read (the
damaged record's bytes are never returned).
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""


class StoreLockedError(StoreError):
    """Another process (or another MessageStore in this process) already has this store directory open."""


class StoreLoadError(StoreError):
    """The files on disk cannot be loaded (e.g. a segment of the wrong size); the store refuses to start."""


class StoreClosedError(StoreError):
    """The store is not open (never opened, or already shut down)."""


class MessageIllegalError(StoreError):
    """A message violates a limit (topic name, body size, total size, ...): RocketMQ's MESSAGE_ILLEGAL."""


class PropertiesSizeExceededError(MessageIllegalError):
    """The encoded properties string is longer than 32,767 bytes: RocketMQ's PROPERTIES_SIZE_EXCEEDED."""


class BatchFormatError(StoreError):
    """An encoded batch (the replicated append command) is malformed or fails its CRC check."""


class OffsetMismatchError(StoreError):
    """A raw commit-log append (catch-up) does not start at the current end of the commit log."""


class DiskFullError(StoreError):
    """The disk holding the store cannot take the next write (no space, or below the free-space threshold, or
    above the configured usage ratio); writes are refused, reads keep working."""


class StorageIOError(StoreError):
    """A write or fsync of the store failed with an I/O error: the member takes no more writes until restarted."""


class ConsumeQueueUnitError(StoreError):
    """A read met a consume-queue unit that does not point at its record and could not be rebuilt from the commit
    log (gRPC DATA_LOSS): nothing after it is skipped, the read stops there."""
