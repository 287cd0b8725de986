"""Why did nothing answer? A second look at an address after a call ran out of time.

A deadline alone cannot tell a slow raftmq node from a peer that is not a gRPC server at all: the Raft port
(pysyncobj) or any other TCP service accepts the connection and then stays silent, so the call waits for an
HTTP/2 handshake that never comes. A fresh channel that cannot become ready while TCP connects is that case.
"""

from __future__ import annotations

import socket

import grpc

PROBE_SECONDS = 2.0


def silent_peer(address: str, timeout: float = PROBE_SECONDS) -> bool:
    """True when ``address`` accepts TCP connections but no gRPC (HTTP/2) handshake completes in ``timeout``."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except (OSError, ValueError):
        return False  # nothing listens: the ordinary "cannot connect" errors say that already
    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        return False
    except grpc.FutureTimeoutError:
        return True
    finally:
        channel.close()
