"""The set of server addresses a client talks to, and the retry rules for reads and writes.

Reads go to any replica: the last one that answered first, the others when it cannot serve.
Writes go to the leader: a node that is not the leader answers FAILED_PRECONDITION with the leader's address in
the ``x-raftmq-leader`` trailing metadata, and the write is sent there. A write is only re-sent when it is known
not to have been stored: connection never made, not the leader, no leader yet / not ready (UNAVAILABLE from the
server), busy (RESOURCE_EXHAUSTED). A write whose outcome is unknown (deadline, broken connection, UNKNOWN) is
raised as ``UnknownOutcomeError`` unless the call is idempotent.

Failover (issue 11): a member that timed out or could not be reached is *suspect* for a while and tried last,
so no write waits on a dead leader twice. While the leader itself is suspect, writes go to the other members
without asking for a redirect: they forward the call to the leader over the cluster's own channel (a client cut
off from the leader keeps writing through the followers), and a member that knows of a newer leader names it.
Otherwise writes ask for the redirect (``x-raftmq-redirect: 1``) and go straight to the leader.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from raftmq.client import errors
from raftmq.client.security import ClientSecurity, diagnose_connection
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pbg

DEFAULT_SERVER = "127.0.0.1:8081"
_MAX_MESSAGE_BYTES = 64 << 20
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    # Fail fast on a dead address instead of backing off for minutes inside gRPC: we have others to try.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
_MAX_REDIRECTS = 8
REDIRECT_METADATA = (("x-raftmq-redirect", "1"),)  # "answer with the leader hint rather than forwarding"
SUSPECT_S = 5.0       # a member that timed out / refused is tried last for this long (doubling on repeats)
MAX_SUSPECT_S = 30.0


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


class _WithMetadata:
    """A stub whose calls carry fixed metadata (the same call signatures as the generated stub)."""

    def __init__(self, stub: Any, metadata: tuple[tuple[str, str], ...]):
        self._stub = stub
        self._metadata = metadata

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)
        wrapped = _MethodWithMetadata(method, self._metadata)
        setattr(self, name, wrapped)
        return wrapped


class _MethodWithMetadata:
    def __init__(self, method: Any, metadata: tuple[tuple[str, str], ...]):
        self._method = method
        self._metadata = metadata

    def _kw(self, kw: dict) -> dict:
        kw["metadata"] = tuple(kw.get("metadata") or ()) + self._metadata
        return kw

    def __call__(self, request: Any, **kw: Any) -> Any:
        return self._method(request, **self._kw(kw))

    def future(self, request: Any, **kw: Any) -> Any:
        return self._method.future(request, **self._kw(kw))

    def with_call(self, request: Any, **kw: Any) -> Any:
        return self._method.with_call(request, **self._kw(kw))
_UNREACHABLE_MARKERS = ("connection refused", "timeout", "timed out", "deadline", "no route", "unreachable",
                        "resolution", "dns", "resolve")


def _plainly_unreachable(message: str) -> bool:
    """Refused, timed out, unresolvable: no handshake happened, so there is no TLS mismatch to diagnose (and a
    black-holed address must not cost a second connect timeout)."""
    text = message.lower()
    return any(m in text for m in _UNREACHABLE_MARKERS)


class _Stubs:
    def __init__(self, channel: grpc.Channel, metadata: tuple[tuple[str, str], ...] = ()):
        self.channel = channel
        self.messaging: Any = pbg.MessagingServiceStub(channel)
        self.admin: Any = pbg.AdminServiceStub(channel)
        if metadata:
            self.messaging = _WithMetadata(self.messaging, metadata)
            self.admin = _WithMetadata(self.admin, metadata)
        self._acl = None

    @property
    def acl(self) -> pbg.AclServiceStub:
        """Built on first use: only ``raftmq acl`` needs it."""
        if self._acl is None:
            self._acl = pbg.AclServiceStub(self.channel)
        return self._acl


def _check_seconds(name: str, value: object, *, zero_allowed: bool) -> None:
    """A duration argument must be a number of seconds (> 0, or >= 0 when zero is allowed)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (value == 0 and not zero_allowed):
        raise ValueError(f"{name} must be a number of seconds {'>= 0' if zero_allowed else '> 0'}, got {value!r}")


class ServerPool:
    """Channels to every known address plus the retry rules (see the module docstring).

    ``timeout`` bounds each call; ``retry_timeout`` bounds the whole retry loop of one operation (waiting out
    a leader election, back-pressure, a restarting node). ``security``: TLS and credentials (default: from the
    ``RAFTMQ_TLS*`` / ``RAFTMQ_ACCESS_KEY`` / ``RAFTMQ_SECRET_KEY`` environment, plaintext when unset).
    """

    def __init__(self, servers: str | Iterable[str] | None = None, *, timeout: float = 10.0,
                 retry_timeout: float = 15.0, security: ClientSecurity | None = None):
        _check_seconds("timeout", timeout, zero_allowed=False)
        _check_seconds("retry_timeout", retry_timeout, zero_allowed=True)
        self.addresses = parse_servers(servers)
        self.security = ClientSecurity.from_env() if security is None else security
        self.timeout = timeout
        self.retry_timeout = retry_timeout
        self._stubs: dict[str, _Stubs] = {}
        self._redirect_stubs: dict[str, _Stubs] = {}
        self._lock = threading.Lock()
        self._read_address = self.addresses[0]
        self._leader: str | None = None
        self._suspect: dict[str, tuple[float, float]] = {}  # address -> (suspect until, last period)
        self._unreachable_leader: str | None = None  # the leader as the cluster sees it, but we cannot reach it
        self._probing = False
        self._closed = False

    # ------------------------------------------------------------------ channels

    def stubs(self, address: str, *, redirect: bool = False) -> _Stubs:
        """Stubs on the shared channel to ``address``; ``redirect``: ask a non-leader for the hint, not to forward."""
        with self._lock:
            if self._closed:
                raise errors.RaftmqError("client is closed")
            s = self._stubs.get(address)
            if s is None:
                s = self._stubs[address] = _Stubs(self.security.channel(address, CHANNEL_OPTIONS))
            if not redirect:
                return s
            r = self._redirect_stubs.get(address)
            if r is None:
                r = self._redirect_stubs[address] = _Stubs(s.channel, REDIRECT_METADATA)
            return r

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stubs, self._stubs, self._redirect_stubs = list(self._stubs.values()), {}, {}
        for s in stubs:
            s.channel.close()

    # ------------------------------------------------------------------ suspects

    def _is_suspect(self, address: str) -> bool:
        entry = self._suspect.get(address)
        return entry is not None and entry[0] > time.monotonic()

    def _mark_suspect(self, address: str) -> None:
        _, last = self._suspect.get(address, (0.0, 0.0))
        period = min(MAX_SUSPECT_S, last * 2) if last else SUSPECT_S
        self._suspect[address] = (time.monotonic() + period, period)
        if self._leader == address:
            self._leader = None
            self._unreachable_leader = address
        if self._read_address == address:
            self._read_address = next((a for a in self.addresses if not self._is_suspect(a)), address)

    def _maybe_probe(self) -> None:
        """Once the unreachable leader's suspicion ran out, check it with a read (in the background, so no write
        waits on it); reachable again -> writes go to it directly, else it stays suspect for longer."""
        address = self._unreachable_leader
        if address is None or self._is_suspect(address) or self._probing:
            return
        self._probing = True

        via = self._leader  # the member that forwards for us, if any

        def probe() -> None:
            budget = min(1.0, self.timeout)
            try:
                if via is not None and via != address:  # has the group moved on to another leader meanwhile?
                    st = self.stubs(via).admin.ClusterStatus(pb.ClusterStatusRequest(), timeout=budget)
                    now = next((m.grpc_address for m in st.members if m.id == st.leader_id), None)
                    if now and now != address:
                        self._unreachable_leader = None
                        if not self._is_suspect(now):
                            self._leader = now
                        return
                self.stubs(address).admin.ListTopics(pb.ListTopicsRequest(), timeout=budget)
            except Exception:  # noqa: BLE001 - any failure: still out of reach
                self._mark_suspect(address)
            else:
                self._clear_suspect(address)
            finally:
                self._probing = False

        threading.Thread(target=probe, name="raftmq-leader-probe", daemon=True).start()

    def _clear_suspect(self, address: str) -> None:
        self._suspect.pop(address, None)
        if self._unreachable_leader == address:
            self._unreachable_leader = None

    @property
    def leader(self) -> str | None:
        """The leader address learned from the last redirect or successful write."""
        return self._leader

    @property
    def leader_unreachable(self) -> bool:
        """True while the leader is out of this client's reach and writes go through forwarding members."""
        return self._unreachable_leader is not None

    def write_address(self) -> str:
        """Where the next write goes first: the leader unless it is suspect (streams open there)."""
        return self._order(True)[0]

    def report_timeout(self, address: str) -> None:
        """A call to ``address`` got no answer in time (e.g. on a stream): try the other members first for a
        while, exactly as a unary timeout does."""
        self._mark_suspect(address)

    # ------------------------------------------------------------------ calls

    def read(self, call: Callable[[_Stubs, float], Any], *, timeout: float | None = None) -> tuple[Any, str]:
        """Run ``call(stubs, timeout)`` on a replica that can serve; return (response, address)."""
        return self._run(call, write=False, idempotent=True, timeout=timeout, uniq_keys=None)

    def read_once(self, call: Callable[[_Stubs, float], Any], timeout: float) -> Any:
        """Run ``call(stubs, timeout)`` once on each address in turn until one answers (no waiting, no back-off):
        for what a caller can do without (a route). Raises the last failure."""
        last: errors.RaftmqError | None = None
        for address in self._order(False):
            try:
                return call(self.stubs(address), timeout)
            except grpc.RpcError as rpc_err:
                last = errors.from_rpc_error(rpc_err, address, write=False, uniq_keys=None)
                if last.code == grpc.StatusCode.UNIMPLEMENTED:
                    break
        assert last is not None
        raise last

    def write(self, call: Callable[[_Stubs, float], Any], *, idempotent: bool = False,
              uniq_keys: list[str] | None = None, timeout: float | None = None) -> tuple[Any, str]:
        """Run ``call(stubs, timeout)`` on the leader, following redirects; return (response, address)."""
        return self._run(call, write=True, idempotent=idempotent, timeout=timeout, uniq_keys=uniq_keys)

    def _order(self, write: bool) -> list[str]:
        first = (self._leader or self._read_address) if write else self._read_address
        rest = [a for a in self.addresses if a != first]
        order = [first] + rest
        # suspects last, the one whose suspicion ends first (failed longest ago) first among them: when every
        # member has failed lately, the one that just timed out must not be first again
        suspects = sorted((a for a in order if self._is_suspect(a)), key=lambda a: self._suspect[a][0])
        return [a for a in order if not self._is_suspect(a)] + suspects

    def _run(self, call, *, write: bool, idempotent: bool, timeout: float | None,
             uniq_keys: list[str] | None) -> tuple[Any, str]:
        per_call = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + self.retry_timeout
        backoff = 0.05
        while True:
            if write:
                self._maybe_probe()
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
                # while the leader is out of our reach, let the other members forward the write to it
                forwarding = write and self._unreachable_leader is not None and address != self._unreachable_leader
                try:
                    response = call(self.stubs(address, redirect=write and not forwarding), budget)
                except grpc.RpcError as rpc_err:
                    err = errors.from_rpc_error(rpc_err, address, write=write and not idempotent,
                                                uniq_keys=uniq_keys)
                else:
                    self._clear_suspect(address)
                    if write:
                        self._leader = address  # the leader, or a member that forwards to it for us
                    else:
                        self._read_address = address
                    return response, address
                if isinstance(err, errors.NotLeaderError):
                    if self._leader == address:
                        self._leader = None
                    hint = err.leader
                    if hint and hint == self._unreachable_leader and not forwarding and redirects < _MAX_REDIRECTS:
                        redirects += 1  # we cannot reach that leader: ask this member to forward instead
                        candidates.insert(i, address)
                    elif hint and hint != address and redirects < _MAX_REDIRECTS:
                        redirects += 1
                        if hint != self._unreachable_leader:
                            self._unreachable_leader = None  # a new leader: try it directly
                            self._suspect.pop(hint, None)
                        self._leader = hint
                        candidates.insert(i, hint)
                    last = err
                elif isinstance(err, errors.ConnectionError):
                    why = None if _plainly_unreachable(err.message) else diagnose_connection(address, self.security)
                    if why is not None:  # a TLS mismatch does not heal by retrying: say so now
                        raise errors.TlsError(f"cannot connect to raftmq server {address}: {why}",
                                              address=address, code=err.code)
                    self._mark_suspect(address)
                    unreachable.append(err)
                    last = err
                elif isinstance(err, errors.UnavailableError):  # refused by the server: not stored
                    if err.code == grpc.StatusCode.DEADLINE_EXCEEDED:
                        self._mark_suspect(address)
                    last = err
                elif isinstance(err, errors.UnknownOutcomeError):
                    if err.code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE):
                        self._mark_suspect(address)  # never wait on this member again for the next write
                    raise err
                elif write and idempotent and err.code in (grpc.StatusCode.DEADLINE_EXCEEDED,
                                                           grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED):
                    if err.code == grpc.StatusCode.DEADLINE_EXCEEDED:
                        self._mark_suspect(address)
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
