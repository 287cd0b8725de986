"""Errors of the write path. Each message says what the caller should do next.

The node maps them to gRPC statuses: NotLeaderError -> FAILED_PRECONDITION with the leader's address as a
redirect hint, NoLeaderError -> UNAVAILABLE, BusyError -> RESOURCE_EXHAUSTED, UnknownOutcomeError -> UNAVAILABLE
(retryable, may duplicate).
"""

from __future__ import annotations


class ReplicationError(Exception):
    """Base class of every error the write path raises on purpose."""


class NotLeaderError(ReplicationError):
    """This node is not the leader; ``leader_grpc_address`` (may be None if unknown) is where writes go."""

    def __init__(self, leader_grpc_address: str | None):
        self.leader_grpc_address = leader_grpc_address
        if leader_grpc_address:
            msg = f"this node is not the leader; send writes to the leader at {leader_grpc_address}"
        else:
            msg = "this node is not the leader and does not know the leader yet; retry shortly or try another member"
        super().__init__(msg)


class NoLeaderError(ReplicationError):
    """No leader is elected (election in progress, or no majority of members reachable)."""

    def __init__(self, detail: str = ""):
        msg = ("no leader right now (an election is in progress or a majority of members is unreachable); "
               "retry in a second")
        super().__init__(f"{msg}: {detail}" if detail else msg)


class BusyError(ReplicationError):
    """The write path has too much pending work; the caller should back off and retry."""

    def __init__(self, detail: str = ""):
        msg = "the write path is overloaded; back off and retry"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class UnknownOutcomeError(ReplicationError):
    """The write timed out or leadership was lost while it was in flight: it may or may not be stored.

    Retrying can store it twice; the UNIQ_KEY property lets a consumer or checker tell a retry from a loss.
    """

    def __init__(self, detail: str = ""):
        msg = ("outcome unknown: the write may or may not have been stored (timed out or leadership changed); "
               "retrying may create a duplicate, which the message's UNIQ_KEY identifies")
        super().__init__(f"{msg} [{detail}]" if detail else msg)


class WritePathStoppedError(ReplicationError):
    """The write path is stopped (node shutting down or not started); retry on another member."""

    def __init__(self) -> None:
        super().__init__("the write path is not running (node starting or shutting down); retry on another member")


class TransferLeadershipError(ReplicationError):
    """A leadership transfer could not be done; the message says why and what to check."""


class MembershipChangeError(ReplicationError):
    """A membership change was refused (another one in progress, no healthy majority after it, an unknown or
    conflicting member); the message says why and what to do (docs/design/membership.md)."""
