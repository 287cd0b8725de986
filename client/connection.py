"""The set of server addresses a client talks to, and the retry rules for reads and writes.

Reads go to any replica: the last one that answered first, the others when it cannot serve.
Writes go to the leader: a node that is not the leader answers FAILED_PRECONDITION with the leader's address in
the ``x-raftmq-leader`` trailing metadata, and the write is sent there. A write is only re-sent when it is known
not to have been stored: connection never made, not the leader, no leader yet / not ready (UNAVAILABLE from the
server), busy (RESOURCE_EXHAUSTED). A write whose outcome is unknown (deadline, broken connection, UNKNOWN) is
raised as ``UnknownOutcomeError`` unless the call is idempotent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc
from raftmq.v1 import raftmq_pb2_grpc as pbg

from client import errors
from client.security import ClientSecurity, diagnose_connection

DEFAULT_SERVER = "127.0.0.1:8081"
_MAX_MESSAGE_BYTES = 64 << 20
_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    # Fail fast on a dead address instead of backing off for minutes inside gRPC: we have others to try.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
_MAX_REDIRECTS = 8


def parse_server(address: str) -> str:
    """Validate one ``host:port`` (IPv6 as ``[::1]:8081``) and return it stripped."""
    addr = address.strip()
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise errors.InvalidArgumentError(f"bad server address {address!r}: expected host:port, e.g. 127.0.0.1:8081")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise errors.InvalidArgumentError(f"bad server address {address!r}: write IPv6 hosts as [::1]:8081")
    return addr


def parse_servers(servers: str | Iterable[str] | None) -> list[str]:
    """Addresses from a list and/or comma-separated strings, de-duplicated in order; default 127.0.0.1:8081."""
    if servers is None:
        return [DEFAULT_SERVER]
    items = [servers] if isinstance(servers, str) else list(servers)
    out: list[str] = []
    for item in items:
        for part in str(item).split(","):
            if part.strip():
                addr = parse_server(part)
                if addr not in out:
                    out.append(addr)
    if not out:
        raise errors.InvalidArgumentError("no server address given: expected host:port, e.g. 127.0.0.1:8081")
    return out


_UNREACHABLE_MARKERS = ("connection refused", "timeout", "timed out", "deadline", "no route", "unreachable",
                        "resolution", "dns", "resolve")


def _plainly_unreachable(message: str) -> bool:
    """Refused, timed out, unresolvable: no handshake happened, so there is no TLS mismatch to diagnose (and a
    black-holed address must not cost a second connect timeout)."""
    text = message.lower()
    return any(m in text for m in _UNREACHABLE_MARKERS)


class _Stubs:
    def __init__(self, channel: grpc.Channel):
        self.channel = channel
        self.messaging = pbg.MessagingServiceStub(channel)
        self.admin = pbg.AdminServiceStub(channel)
        self._acl = None

    @property
    def acl(self) -> pbg.AclServiceStub:
        """Built on first use: only ``raftmq acl`` needs it."""
        if self._acl is None:
            self._acl = pbg.AclServiceStub(self.channel)
        return self._acl


class ServerPool:
    """Channels to every known address plus the retry rules (see the module docstring).

    ``timeout`` bounds each call; ``retry_timeout`` bounds the whole retry loop of one operation (waiting out
    a leader election, back-pressure, a restarting node). ``security``: TLS and credentials (default: from the
    ``RAFTMQ_TLS*`` / ``RAFTMQ_ACCESS_KEY`` / ``RAFTMQ_SECRET_KEY`` environment, plaintext when unset).
    """

    def __init__(self, servers: str | Iterable[str] | None = None, *, timeout: float = 10.0,
                 retry_timeout: float = 15.0, security: ClientSecurity | None = None):
        self.addresses = parse_servers(servers)
        self.security = ClientSecurity.from_env() if security is None else security
        self.timeout = timeout
        self.retry_timeout = retry_timeout
        self._stubs: dict[str, _Stubs] = {}
        self._lock = threading.Lock()
        self._read_address = self.addresses[0]
        self._leader: str | None = None
        self._closed = False

    # ------------------------------------------------------------------ channels

    def stubs(self, address: str) -> _Stubs:
        with self._lock:
            if self._closed:
                raise errors.RaftmqError("client is closed")
            s = self._stubs.get(address)
            if s is None:
                s = self._stubs[address] = _Stubs(self.security.channel(address, _CHANNEL_OPTIONS))
            return s

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stubs, self._stubs = list(self._stubs.values()), {}
        for s in stubs:
            s.channel.close()

    @property
    def leader(self) -> str | None:
        """The leader address learned from the last redirect or successful write."""
        return self._leader

    # ------------------------------------------------------------------ calls

    def read(self, call: Callable[[_Stubs, float], Any], *, timeout: float | None = None) -> tuple[Any, str]:
        """Run ``call(stubs, timeout)`` on a replica that can serve; return (response, address)."""
        return self._run(call, write=False, idempotent=True, timeout=timeout, uniq_keys=None)

    def write(self, call: Callable[[_Stubs, float], Any], *, idempotent: bool = False,
              uniq_keys: list[str] | None = None, timeout: float | None = None) -> tuple[Any, str]:
        """Run ``call(stubs, timeout)`` on the leader, following redirects; return (response, address)."""
        return self._run(call, write=True, idempotent=idempotent, timeout=timeout, uniq_keys=uniq_keys)

    def _order(self, write: bool) -> list[str]:
        first = (self._leader or self._read_address) if write else self._read_address
        return [first] + [a for a in self.addresses if a != first]

    def _run(self, call, *, write: bool, idempotent: bool, timeout: float | None,
             uniq_keys: list[str] | None) -> tuple[Any, str]:
        per_call = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + self.retry_timeout
        backoff = 0.05
        while True:
            candidates = self._order(write)
            unreachable: list[errors.ConnectionError] = []
            last: errors.RaftmqError | None = None
            redirects = 0
            i = 0
            while i < len(candidates):
                address = candidates[i]
                i += 1
                # A read never waits past the operation's budget; a write keeps its full deadline (cutting it
                # short would only turn more writes into unknown outcomes).
                budget = per_call if write else max(0.1, min(per_call, deadline - time.monotonic()))
                try:
                    response = call(self.stubs(address), budget)
                except grpc.RpcError as rpc_err:
                    err = errors.from_rpc_error(rpc_err, address, write=write and not idempotent,
                                                uniq_keys=uniq_keys)
                else:
                    if write:
                        self._leader = address
                    else:
                        self._read_address = address
                    return response, address
                if isinstance(err, errors.NotLeaderError):
                    if self._leader == address:
                        self._leader = None
                    if err.leader and err.leader != address and redirects < _MAX_REDIRECTS:
                        redirects += 1
                        self._leader = err.leader
                        candidates.insert(i, err.leader)
                    last = err
                elif isinstance(err, errors.ConnectionError):
                    why = None if _plainly_unreachable(err.message) else diagnose_connection(address, self.security)
                    if why is not None:  # a TLS mismatch does not heal by retrying: say so now
                        raise errors.TlsError(f"cannot connect to raftmq server {address}: {why}",
                                              address=address, code=err.code)
                    unreachable.append(err)
                    last = err
                elif isinstance(err, errors.UnavailableError):  # refused by the server: not stored
                    last = err
                elif isinstance(err, errors.UnknownOutcomeError):
                    raise err
                elif write and idempotent and err.code in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                                           grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED):
                    last = err
                else:
                    raise err
            tried = list(dict.fromkeys(candidates))
            if len(unreachable) == len(candidates):
                if len(tried) == 1:
                    raise unreachable[0]
                raise errors.ConnectionError(
                    f"cannot connect to any raftmq server ({', '.join(tried)}): "
                    + "; ".join(f"{e.address}: {e.message.rsplit(': ', 1)[-1]}" for e in unreachable),
                    address=tried[0], code=grpc.StatusCode.UNAVAILABLE)
            assert last is not None
            if time.monotonic() + backoff > deadline:
                raise last
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
