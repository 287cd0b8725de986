"""RocketMQ 5 status codes: every v2 answer carries a ``Status{code, message}`` in its body (gRPC status OK), as
the Java proxy does, because the official clients act on that code (``code == 0`` is "response is illegal").

``V2Error`` is what a v2 handler raises for a refusal it decides itself; ``from_rpc_error`` maps raftmq's own
errors (node.errors, one table for raftmq's API) to the v2 code a RocketMQ client understands.
"""

from __future__ import annotations

import grpc

from raftmq.node.errors import RpcError
from raftmq.rocketmq.v2 import definition_pb2 as v2

Code = v2.Code


class V2Error(Exception):
    """A refusal with a RocketMQ 5 code and a message that says what to fix."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> v2.Status:
        return v2.Status(code=self.code, message=self.message)


def ok(message: str = "OK") -> v2.Status:
    return v2.Status(code=v2.OK, message=message)


def status(code: int, message: str) -> v2.Status:
    return v2.Status(code=code, message=message)


# raftmq's gRPC code -> the v2 code with the same meaning for a RocketMQ client (what it retries, what it raises)
_BY_GRPC_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: v2.BAD_REQUEST,
    grpc.StatusCode.NOT_FOUND: v2.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED: v2.FORBIDDEN,
    grpc.StatusCode.UNAUTHENTICATED: v2.UNAUTHORIZED,
    grpc.StatusCode.RESOURCE_EXHAUSTED: v2.TOO_MANY_REQUESTS,
    # not the leader / no leader / stopping: retryable on the client (the next queue, the same endpoints)
    grpc.StatusCode.FAILED_PRECONDITION: v2.HA_NOT_AVAILABLE,
    grpc.StatusCode.UNAVAILABLE: v2.HA_NOT_AVAILABLE,
    # the write may or may not be stored (a lost answer, a forwarded call without reply in time)
    grpc.StatusCode.UNKNOWN: v2.MASTER_PERSISTENCE_TIMEOUT,
    grpc.StatusCode.DEADLINE_EXCEEDED: v2.PROXY_TIMEOUT,
    grpc.StatusCode.CANCELLED: v2.PROXY_TIMEOUT,
    grpc.StatusCode.DATA_LOSS: v2.INTERNAL_SERVER_ERROR,
    grpc.StatusCode.INTERNAL: v2.INTERNAL_SERVER_ERROR,
    grpc.StatusCode.UNIMPLEMENTED: v2.NOT_IMPLEMENTED,
}


def from_rpc_error(err: RpcError) -> v2.Status:
    return v2.Status(code=_BY_GRPC_CODE.get(err.code, v2.INTERNAL_SERVER_ERROR), message=err.message)
