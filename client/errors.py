"""Typed exceptions for the SDK, mapped from the gRPC status codes of the v1 API.

The mapping follows the header comment of ``proto/raftmq/v1/raftmq.proto``. Every exception carries the
server address it came from and the CLI exit code it maps to, so the CLI can turn any of them into one line on
stderr and a distinct exit status.
"""

from __future__ import annotations

import re

import grpc

LEADER_METADATA_KEY = "x-raftmq-leader"

# Fragments of gRPC transport messages. A call that failed before reaching the server was never sent, so a
# write can safely go to another address; one that broke mid-flight may have been stored.
_NOT_SENT_MARKERS = (
    "failed to connect to all addresses",
    "errors resolving",
    "dns resolution failed",
    "name resolution failure",
)
_BROKEN_TRANSPORT_MARKERS = (
    "stream removed",
    "socket closed",
    "connection reset",
    "broken pipe",
    "goaway",
    "rst_stream",
    "keepalive",
    "transport closed",
    "received http2 header",
    "endpoint closing",
    "cancelling all calls",
    "fd shutdown",
    "os error",
    "connection timed out",
    "delayed close",
    "channel destroyed",
)
# What a raftmq node says when it refuses a write before storing anything (UNAVAILABLE: starting, stopping, no
# leader, store not taking writes). An UNAVAILABLE write failure that matches none of these is treated as an
# unknown outcome, the safe side: never re-sent silently.
_REFUSAL_MARKERS = ("retry", "not ready", "no leader", "starting", "shutting down", "stopping", "not running")


class RaftmqError(Exception):
    """Base class of every error the SDK raises. ``exit_code`` is the status the ``raftmq`` CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, *, address: str | None = None, code: grpc.StatusCode | None = None):
        super().__init__(message)
        self.message = message
        self.address = address
        self.code = code


class InvalidArgumentError(RaftmqError):
    """The request was rejected as malformed (bad topic name, oversized body, bad tag expression, ...)."""

    exit_code = 4


class NotFoundError(RaftmqError):
    """An unknown topic, queue or message."""

    exit_code = 3


class TopicNotFoundError(NotFoundError):
    """The topic does not exist (and the node does not auto-create topics)."""


class PermissionDeniedError(RaftmqError):
    """The topic's permission forbids this read or write (e.g. a read-only topic)."""

    exit_code = 8


class AlreadyExistsError(RaftmqError):
    """The topic to create exists already."""

    exit_code = 6


class NotLeaderError(RaftmqError):
    """A write reached a node that is not the leader. ``leader`` is the leader's gRPC address, when known."""

    def __init__(self, message: str, *, leader: str | None = None, **kw):
        super().__init__(message, **kw)
        self.leader = leader


class UnavailableError(RaftmqError):
    """The node cannot serve now (not ready, no leader elected, shutting down) or did not answer in time."""

    exit_code = 5


class BusyError(UnavailableError):
    """The node pushed back (RESOURCE_EXHAUSTED); nothing was stored, try again later."""


class StorageFullError(RaftmqError):
    """The node's disk is full (RESOURCE_EXHAUSTED "disk full on <member>: <path>, N bytes free"): nothing was
    stored, and retrying will not help until an operator frees space. Never retried by the SDK."""

    exit_code = 10


class ConnectionError(UnavailableError):  # noqa: A001 - the SDK's own, deliberately named like the builtin
    """No connection could be made to the server(s); the request was never sent."""


class TlsError(ConnectionError):
    """TLS could not be set up: the server requires TLS, speaks plaintext, or a certificate is not trusted
    (unknown CA, expired, wrong name, missing client certificate). Retrying does not help; fix the settings."""


class UnauthenticatedError(RaftmqError):
    """The server did not accept the credentials (unknown access key, wrong secret, stale or missing signature)."""

    exit_code = 8


class NotRaftmqServerError(ConnectionError):
    """The address answers, but not as a raftmq node (an HTTP server, the Raft port, another service): the
    request never reached raftmq, so nothing was stored."""


class RequestTooLargeError(InvalidArgumentError):
    """The request is larger than gRPC lets through (this client's send limit or the server's receive limit,
    which the node sets from ``store.max_message_size``); it was refused whole, nothing was stored."""


class ReplicasDifferError(RaftmqError):
    """``raftmq cluster check`` found members whose committed commit-log bytes are not identical."""

    exit_code = 9


class ReplicaLagsError(RaftmqError):
    """``raftmq cluster check``: a member stayed behind what the others had applied for the whole wait (stuck, or
    far behind), so the range compared does not prove it holds the group's data."""

    exit_code = 11


class LeadersNotBalancedError(RaftmqError):
    """``raftmq cluster balance-leaders``: some group is not led by its preferred leader (a dry run that would move
    one, a member that cannot take over now, or a move that failed)."""

    exit_code = 12


class UnknownOutcomeError(RaftmqError):
    """A write whose outcome is unknown: it may or may not have been stored.

    ``uniq_keys`` are the producer-side UNIQ_KEYs of the messages concerned: query for them before resending,
    or resend and let consumers drop duplicates by UNIQ_KEY.
    """

    exit_code = 7

    def __init__(self, message: str, *, uniq_keys: list[str] | None = None, **kw):
        super().__init__(message, **kw)
        self.uniq_keys = list(uniq_keys or [])


def is_not_sent(err: grpc.RpcError) -> bool:
    """True when the call failed before it reached any server (connection refused, name not resolved)."""
    if err.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    details = (err.details() or "").lower()
    return any(m in details for m in _NOT_SENT_MARKERS)


def is_broken_transport(err: grpc.RpcError) -> bool:
    """True when the connection broke during the call, so the server may have processed it."""
    if err.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
                          grpc.StatusCode.UNIMPLEMENTED):
        return False
    details = (err.details() or "").lower()
    return any(m in details for m in _BROKEN_TRANSPORT_MARKERS)


def _is_topic_missing(details: str) -> bool:
    """NOT_FOUND is about the topic itself (not one of its queues, not a message)."""
    text = details.lower()
    return "topic" in text and "queue" not in text and "message" not in text


def _is_refusal(details: str) -> bool:
    text = details.lower()
    return not any(m in text for m in _BROKEN_TRANSPORT_MARKERS) and any(m in text for m in _REFUSAL_MARKERS)


def leader_hint(err: grpc.RpcError) -> str | None:
    """The leader address a non-leader put in the trailing metadata, if any."""
    for key, value in err.trailing_metadata() or ():
        if key == LEADER_METADATA_KEY and value:
            return value if isinstance(value, str) else value.decode()
    return None


def from_rpc_error(err: grpc.RpcError, address: str, *, write: bool = False,
                   uniq_keys: list[str] | None = None) -> RaftmqError:
    """Translate a failed call into the typed exception a caller can act on.

    ``write`` marks calls that change state: for them a deadline, an UNKNOWN status or a transport that broke
    mid-call means the outcome is unknown rather than a plain failure.
    """
    code = err.code()
    details = err.details() or code.name
    kw = {"address": address, "code": code}
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgumentError(details, **kw)
    if code == grpc.StatusCode.NOT_FOUND:
        cls = TopicNotFoundError if _is_topic_missing(details) else NotFoundError
        return cls(details, **kw)
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return PermissionDeniedError(details, **kw)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return UnauthenticatedError(details, **kw)
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return AlreadyExistsError(details, **kw)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        hint = leader_hint(err)
        if hint is None and not any(m in details.lower() for m in ("not the leader", "not leader")):
            return RaftmqError(f"{details} (at {address})", **kw)  # a precondition other than leadership
        msg = details if hint is None or hint in details else f"{details} (leader: {hint})"
        return NotLeaderError(msg, leader=hint, **kw)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if details.lower().startswith("disk full"):
            return StorageFullError(details, **kw)
        too_large = _TOO_LARGE.search(details)
        if too_large:
            return _too_large(too_large, address, kw)
        return BusyError(f"server {address} is busy: {details}", **kw)
    not_raftmq = _not_raftmq(code, details)
    if not_raftmq:
        return NotRaftmqServerError(f"not a raftmq server at {address}: {not_raftmq}; check --server (the gRPC "
                                    "port of a raftmq node, 8081 by default); nothing was sent to raftmq", **kw)
    if is_not_sent(err):
        return ConnectionError(f"cannot connect to raftmq server {address}: {_short(details)}", **kw)
    if write and (code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN,
                           grpc.StatusCode.CANCELLED) or is_broken_transport(err)
                  or (code == grpc.StatusCode.UNAVAILABLE and not _is_refusal(details))):
        keys = list(uniq_keys or [])
        which = f" (UNIQ_KEY {keys[0]})" if len(keys) == 1 else (
            f" ({len(keys)} messages, UNIQ_KEYs {keys[0]} .. {keys[-1]})" if keys else "")
        return UnknownOutcomeError(
            f"outcome unknown at {address} ({code.name}: {details}); the write{which} may or may not have been "
            "stored", uniq_keys=keys, **kw)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return UnavailableError(f"server {address} did not answer in time", **kw)
    if code == grpc.StatusCode.UNAVAILABLE:
        return UnavailableError(f"server {address} unavailable: {details}", **kw)
    return RaftmqError(f"server {address} failed: {code.name}: {details}", **kw)


# gRPC's own size check: "SERVER: Received message larger than max (41943094 vs. 9437184)" from the server's
# receive limit, "CLIENT: Sent message larger than max (...)" from this process before anything was sent.
_TOO_LARGE = re.compile(r"(Received|Sent) message larger than max \((\d+) vs\. (\d+)\)", re.IGNORECASE)
_HTTP_STATUS = re.compile(r"received http2 header with status: (\d+)", re.IGNORECASE)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _too_large(m: re.Match, address: str, kw: dict) -> RequestTooLargeError:
    size, limit = int(m.group(2)), int(m.group(3))
    if m.group(1).lower() == "sent":
        where = f"this client's send limit of {limit} bytes ({_mib(limit)}); nothing was sent"
    else:
        where = (f"the receive limit of server {address}, {limit} bytes ({_mib(limit)}: twice its "
                 "store.max_message_size plus 1 MiB); it was refused whole, nothing was stored")
    return RequestTooLargeError(f"request of {size} bytes ({_mib(size)}) is larger than {where} - send smaller "
                                "bodies or smaller batches (--batch)", **kw)


def _not_raftmq(code: grpc.StatusCode, details: str) -> str | None:
    """Why the peer is not a raftmq node (an HTTP answer instead of gRPC), or None."""
    status = _HTTP_STATUS.search(details)
    if code == grpc.StatusCode.UNIMPLEMENTED and status and status.group(1).startswith("4"):
        return f"it answered HTTP status {status.group(1)} instead of gRPC"
    low = details.lower()
    if code == grpc.StatusCode.UNAVAILABLE and ("failed parsing http/2" in low or "http1.x server" in low):
        return "it does not speak gRPC (HTTP/2): an HTTP/1 server such as a node's metrics port?"
    return None


def _short(details: str) -> str:
    """The useful tail of gRPC's connection messages ("... last error: ...: Connection refused")."""
    tail = details.rsplit(": ", 1)[-1].strip()
    return tail or details
