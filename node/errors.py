"""From exceptions to gRPC statuses, in one place (the conventions in the header of raftmq.proto).

Why one table: every handler raises what it means (a validation problem, an unknown topic, a write-path error)
and this module decides the status code and the leader hint, so the same failure gets the same status on every
RPC and a client can act on the code alone.
"""

from __future__ import annotations

import grpc

from raftmq.node.validation import ValidationError
from raftmq.replication.errors import (
    BusyError,
    MembershipChangeError,
    NoLeaderError,
    NotLeaderError,
    ReplicationError,
    TransferLeadershipError,
    UnknownOutcomeError,
    WritePathStoppedError,
)
from raftmq.store.errors import (
    ConsumeQueueUnitError,
    DiskFullError,
    MessageIllegalError,
    StorageIOError,
    StoreClosedError,
    StoreError,
)
from raftmq.store.integrity import CorruptReadError
from raftmq.store.sql_filter import InvalidFilterExpressionError
from raftmq.store.tag_filter import InvalidTagExpressionError

LEADER_METADATA_KEY = "x-raftmq-leader"


class RpcError(Exception):
    """A handler's decision to fail the call with ``code``; ``leader`` becomes the redirect hint."""

    def __init__(self, code: grpc.StatusCode, message: str, leader: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.leader = leader


def not_found(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.NOT_FOUND, message)


def invalid(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.INVALID_ARGUMENT, message)


def unavailable(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.UNAVAILABLE, message)


def to_rpc_error(exc: BaseException) -> RpcError | None:
    """The status for an exception a handler let through; None means a bug (the caller logs it, INTERNAL)."""
    if isinstance(exc, RpcError):
        return exc
    code = grpc.StatusCode
    if isinstance(exc, (ValidationError, InvalidTagExpressionError, InvalidFilterExpressionError, MessageIllegalError)):
        return RpcError(code.INVALID_ARGUMENT, str(exc))
    if isinstance(exc, NotLeaderError):
        return RpcError(code.FAILED_PRECONDITION, str(exc), leader=exc.leader_grpc_address or None)
    if isinstance(exc, (NoLeaderError, WritePathStoppedError, StoreClosedError, StorageIOError)):
        return RpcError(code.UNAVAILABLE, str(exc))
    if isinstance(exc, (BusyError, DiskFullError)):
        return RpcError(code.RESOURCE_EXHAUSTED, str(exc))
    if isinstance(exc, UnknownOutcomeError):
        return RpcError(code.UNKNOWN, str(exc))
    if isinstance(exc, (TransferLeadershipError, MembershipChangeError)):
        return RpcError(code.FAILED_PRECONDITION, str(exc))
    if isinstance(exc, (CorruptReadError, ConsumeQueueUnitError)):
        return RpcError(code.DATA_LOSS, str(exc))
    if isinstance(exc, (ReplicationError, StoreError)):
        return RpcError(code.INTERNAL, f"{type(exc).__name__}: {exc}")
    return None
