"""Every pysyncobj name raftmq touches, checked against the installed pysyncobj when replication is imported.

Why: raftmq subclasses pysyncobj's SyncObj and TcpConnection, reads and writes their private (name-mangled)
fields, overrides private methods and patches module attributes (replication/raft_log.py, raft_tls.py,
pysyncobj_patches.py; docs/design/replication.md#what-raftmq-changes-in-pysyncobj). None of that is pysyncobj's
public API: a different release may rename a field, and then a member would misbehave deep inside Raft (a vote
forgotten, a journal not durable) instead of failing at start. So the installed version and the presence of each
name below are checked once, at import, and a mismatch stops the import with one line that names what is missing
and the release to pin.

Adding a use of another pysyncobj internal means adding it here (tests/replication/test_pysyncobj_guard.py reads
replication/ for mangled names and fails on one this list lacks).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import types
from collections.abc import Iterator

PYSYNCOBJ_VERSION = "0.3.17"  # the release these names were read from; pyproject.toml pins the same

# "module:Class" (or "module" alone) -> the names raftmq uses there. For a class, a name is either an attribute of
# the class (a method raftmq calls or overrides) or a field its methods assign or read (``self.__raftState`` in
# SyncObj's code is the field ``_SyncObj__raftState``).
TOUCHED: dict[str, tuple[str, ...]] = {
    "pysyncobj": ("SyncObj", "SyncObjConf", "replicated", "FAIL_REASON"),
    "pysyncobj.syncobj:SyncObj": (
        # fields
        "_SyncObj__conf", "_SyncObj__connectedToAnyone", "_SyncObj__lastResponseTime", "_SyncObj__leaderCommitIndex",
        "_SyncObj__newAppendEntriesTime", "_SyncObj__otherNodes", "_SyncObj__pipeNotifier",
        "_SyncObj__raftCommitIndex", "_SyncObj__raftElectionDeadline", "_SyncObj__raftLastApplied",
        "_SyncObj__raftLeader", "_SyncObj__raftLog", "_SyncObj__raftState", "_SyncObj__selfNode",
        "_SyncObj__transferInProgress", "_SyncObj__transport", "_SyncObj__votedForNodeId",
        "_SyncObj__connectedNodes", "_SyncObj__noopIDx", "_SyncObj__raftMatchIndex",
        # methods called or overridden
        "_SyncObj__applyLogEntries", "_SyncObj__deleteEntriesFrom", "_SyncObj__deleteEntriesTo",
        "_SyncObj__getCurrentLogIndex",
        "_SyncObj__getCurrentLogTerm", "_SyncObj__getEntries", "_SyncObj__onMessageReceived",
        "_SyncObj__sendAppendEntries", "_SyncObj__sendNextNodeIdx", "_onTick", "_checkCommandsToApply",
        "_isLeader", "_getLeader", "addOnTickCallback", "forceLogCompaction", "getStatus", "destroy",
        "transferLeadership", "waitBinded", "raftCommitIndex", "raftCurrentTerm", "raftLastApplied",
        # membership changes (raft_log, docs/design/membership.md)
        "_SyncObj__changeCluster", "_SyncObj__doChangeCluster", "_SyncObj__doApplyCommand", "_SyncObj__setState",
        "_SyncObj__updateClusterConfiguration",
    ),
    "pysyncobj.transport:TCPTransport": ("_onTick", "_onNewIncomingConnection", "addNode", "_syncObj"),
    "pysyncobj.tcp_connection": ("TcpConnection", "CONNECTION_STATE", "zlib"),
    "pysyncobj.tcp_connection:TcpConnection": (
        "_TcpConnection__fileno", "_TcpConnection__lastReadTime", "_TcpConnection__poller",
        "_TcpConnection__readBuffer", "_TcpConnection__recvBufferSize", "_TcpConnection__socket",
        "_TcpConnection__writeBuffer", "_TcpConnection__processConnection", "_TcpConnection__processRead",
        "_TcpConnection__trySendBuffer", "send", "connect", "disconnect",
    ),
    "pysyncobj.journal": ("APP_NAME", "APP_VERSION", "FIRST_RECORD_OFFSET", "JOURNAL_FORMAT_VERSION",
                          "LAST_RECORD_OFFSET_OFFSET", "NAME_SIZE", "VERSION_SIZE", "ResizableFile", "FileJournal",
                          "MetaStorer"),
    "pysyncobj.journal:FileJournal": ("__init__", "deleteEntriesTo", "_FileJournal__currentOffset",
                                      "_FileJournal__journal", "_FileJournal__journalFile"),
    "pysyncobj.journal:ResizableFile": ("write", "_ResizableFile__fileName", "_ResizableFile__f",
                                        "_ResizableFile__mm"),
    "pysyncobj.journal:MetaStorer": ("getMeta", "storeMeta", "getPath"),
    "pysyncobj.pickle": ("__protocol", "dumps", "to_bytes"),
    "pysyncobj.serializer": ("atomicReplace",),
    "pysyncobj.poller": ("POLL_EVENT_TYPE",),
    "pysyncobj.monotonic": ("monotonic",),
}


class PysyncobjMismatchError(ImportError):
    """The installed pysyncobj is not the one raftmq's replication was written against."""


def _code_names(cls: type) -> set[str]:
    """Every name the functions defined in ``cls`` (and its bases inside pysyncobj) load or store, nested code
    included: the mangled fields its methods use."""
    names: set[str] = set()

    def walk(code: types.CodeType) -> None:
        names.update(code.co_names)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                walk(const)

    for klass in cls.__mro__:
        if not klass.__module__.startswith("pysyncobj"):
            continue
        for value in vars(klass).values():
            fn = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            code = getattr(fn, "__code__", None)
            if code is not None:
                walk(code)
    return names


def missing_names() -> Iterator[str]:
    """``module:Class.name`` (or ``module.name``) of each touched name the installed pysyncobj lacks."""
    for where, names in TOUCHED.items():
        module_name, _, class_name = where.partition(":")
        try:
            owner: object = importlib.import_module(module_name)
        except ImportError:
            yield f"module {module_name}"
            continue
        if class_name:
            owner = getattr(owner, class_name, None)
            if not isinstance(owner, type):
                yield f"{module_name}.{class_name}"
                continue
            fields = _code_names(owner)
            for name in names:
                if not hasattr(owner, name) and name not in fields:
                    yield f"{module_name}.{class_name}.{name}"
        else:
            for name in names:
                if not hasattr(owner, name):
                    yield f"{module_name}.{name}"


def check() -> None:
    """Raise PysyncobjMismatchError (one line: what differs, what to pin) unless the installed pysyncobj is the
    release raftmq was written against and has every name in TOUCHED."""
    pin = f"pip install pysyncobj=={PYSYNCOBJ_VERSION}"
    try:
        installed = importlib.metadata.version("pysyncobj")
    except importlib.metadata.PackageNotFoundError:
        raise PysyncobjMismatchError(f"raftmq's replication needs pysyncobj {PYSYNCOBJ_VERSION}, which is not "
                                     f"installed: {pin}") from None
    missing = list(missing_names())
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise PysyncobjMismatchError(f"pysyncobj {installed} lacks what raftmq's replication uses ({shown}): "
                                     f"{pin}")
    if installed != PYSYNCOBJ_VERSION:
        raise PysyncobjMismatchError(f"pysyncobj {installed} is installed, but raftmq's replication relies on the "
                                     f"internals of {PYSYNCOBJ_VERSION}: {pin}")


check()
