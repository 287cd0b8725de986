"""Network allow-lists (issue 14): which source addresses may use this member's ports.

Three lists, like RocketMQ 4 ACL's ``globalWhiteRemoteAddresses`` and per-account ``whiteRemoteAddress``:

* ``security.allowed_client_networks``: clients of the gRPC and HTTP ports (HTTP's open paths, the probes and
  the scrape, stay open);
* ``security.allowed_member_networks``: the cluster's own traffic: the Raft port and the member-to-member
  replica service. Members may also call the client API (forwarding, the console's cluster views);
* per user (replicated with the user, ``raftmq acl user add --network``): where that access key may sign from.

An empty list allows every address. Entries are CIDRs (``10.0.0.0/8``, ``fd00::/8``) or single addresses; an
IPv4 client seen on an IPv6 socket (``::ffff:10.1.2.3``) is judged by its IPv4 address. A call forwarded by a
member (node.forwarding, trusted only with the cluster secret) is judged by the original client's address, and
an HTTP request through a proxy listed in ``security.trusted_http_proxies`` by its ``X-Forwarded-For`` client.
"""

from __future__ import annotations

import inspect
import ipaddress
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

import grpc

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_network(text: Any) -> IPNetwork:
    """``10.0.0.0/8`` or ``10.1.2.3`` -> the network; ValueError saying what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{text!r} is not a network: use a CIDR such as 10.0.0.0/8 or fd00::/8, or one address")
    text = text.strip()
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError:
        try:
            loose = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(f"{text!r} is not a network: use a CIDR such as 10.0.0.0/8 or fd00::/8, or one "
                             "address") from None
        raise ValueError(f"{text!r} has bits set beyond its prefix length (did you mean {loose}?)") from None


def check_networks(values: Any, where: str) -> list[str]:
    """Problems of a configured list, each naming ``where`` (``security.allowed_client_networks[2]``)."""
    if not isinstance(values, list):
        return [f"{where}: must be a list of networks (CIDRs such as 10.0.0.0/8, fd00::/8), got {values!r}"]
    problems = []
    for i, v in enumerate(values):
        try:
            parse_network(v)
        except ValueError as e:
            problems.append(f"{where}[{i}]: {e}")
    return problems


def peer_ip(peer: str) -> str:
    """The IP address in a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``, URL-quoted or not) or a bare
    address; "" when there is none (a unix socket)."""
    peer = urllib.parse.unquote(str(peer)).strip()
    kind, sep, rest = peer.partition(":")
    if sep and kind == "ipv4":
        return rest.rpartition(":")[0]
    if sep and kind == "ipv6":
        host = rest[1:rest.find("]")] if rest.startswith("[") else rest
        return plain_ip(host.split("%", 1)[0])
    if sep and kind.startswith("unix"):
        return ""
    return peer.strip("[]").split("%", 1)[0]


def plain_ip(address: str) -> str:
    """An IPv4 client seen on an IPv6 socket (``::ffff:10.1.2.3``) as its IPv4 address; others unchanged."""
    if address.startswith("::ffff:"):
        try:
            mapped = ipaddress.IPv6Address(address).ipv4_mapped
        except ValueError:
            return address
        if mapped is not None:
            return str(mapped)
    return address


class NetworkList:
    """A parsed allow-list; empty = every address is allowed."""

    def __init__(self, networks: Iterable[str] = ()):
        self.texts = [str(n).strip() for n in networks]
        self._networks = [parse_network(n) for n in self.texts]

    def __bool__(self) -> bool:
        return bool(self._networks)

    def allows(self, address: str) -> bool:
        """True for an address inside one of the networks (or any address when the list is empty). An address
        that cannot be parsed (a unix socket: a local process) is allowed only when the list is empty."""
        if not self._networks:
            return True
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in n for n in self._networks)

    def text(self) -> str:
        return ", ".join(self.texts)


def host_network(address: str) -> str:
    """The one-address network for a hint: ``10.1.2.3/32``, ``fd00::1/128``."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address or "?"
    return f"{ip}/{ip.max_prefixlen}"


class NetworkRefused(Exception):
    """A source address outside an allow-list; the message names the address and the key to change."""


class NetworkPolicy:
    """The node-wide lists of a member's configuration (``security.allowed_*_networks``)."""

    def __init__(self, clients: Sequence[str], members: Sequence[str]):
        self.clients = NetworkList(clients)
        self.members = NetworkList(members)
        self._client_verdicts: dict[str, bool] = {}  # address -> allowed (clients reconnect from few addresses)

    @property
    def active(self) -> bool:
        return bool(self.clients) or bool(self.members)

    def check_client(self, address: str, port: str) -> None:
        """A client of the ``port`` ("gRPC", "HTTP") at ``address``; members' networks are allowed too."""
        if not self.clients:
            return
        allowed = self._client_verdicts.get(address)
        if allowed is None:
            allowed = self.clients.allows(address) or (bool(self.members) and self.members.allows(address))
            if len(self._client_verdicts) > 10000:
                self._client_verdicts.clear()
            self._client_verdicts[address] = allowed
        if allowed:
            return
        raise NetworkRefused(
            f"client address {address or 'unknown'} may not use this member's {port} port: it is not in "
            f"security.allowed_client_networks [{self.clients.text()}]; to let it in, add its network (e.g. "
            f"{host_network(address)}) to security.allowed_client_networks on every member")

    def check_member(self, address: str, port: str) -> None:
        """A member's connection to the ``port`` ("Raft", "replica service") from ``address``."""
        if self.members.allows(address):
            return
        raise NetworkRefused(
            f"member connection from {address or 'unknown'} to the {port} refused: it is not in "
            f"security.allowed_member_networks [{self.members.text()}]; if it is a member, add its network (e.g. "
            f"{host_network(address)}) to security.allowed_member_networks on every member")


def forwarded_http_client(peer: str, forwarded_for: str | None, proxies: NetworkList) -> str:
    """The HTTP client behind ``security.trusted_http_proxies`` (an ingress, a load balancer): each proxy appends
    the address it got the request from to ``X-Forwarded-For``, so walking it from the right, the first address
    that is not a trusted proxy is the client. ``peer`` itself when it is not a trusted proxy (then the header
    is anybody's claim and ignored) or sent none; a malformed entry ends the walk at the proxy before it."""
    if not proxies or not forwarded_for or not proxies.allows(peer):
        return peer
    client = peer
    for hop in reversed(forwarded_for.split(",")):
        hop = plain_ip(hop.strip().strip("[]"))
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            return client
        client = hop
        if not proxies.allows(hop):
            return client
    return client


def user_network_refusal(user: str, allowed: NetworkList, address: str) -> str:
    """The refusal of a user's request from outside its allowed networks: who, from where, what to change."""
    return (f"user {user!r} may not connect from {address or 'unknown'}: its allowed networks are "
            f"[{allowed.text()}]; an admin can change them: raftmq acl user networks {user} --network "
            f"{host_network(address)} (or --any)")


class NetworkInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls from outside the node-wide lists with PERMISSION_DENIED before anything else runs: the
    member-to-member replica service against the member networks, everything else against the client networks
    (a trusted forwarded call: the relay against the member networks, its original client against the client
    networks). ``forwarded_client(context)`` returns the forwarded-for address of a trusted relay, None for a
    direct call (and raises for an untrusted claim)."""

    MEMBER_PREFIXES = ("/raftmq.v1.ReplicaService/",)

    def __init__(self, policy: NetworkPolicy, forwarded_client: Any, audit: Any):
        self.policy = policy
        self._forwarded_client = forwarded_client
        self._audit = audit
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._wrapped[method] = (handler, guard_handler(handler, self._checker(method)))
        return cached[1]

    def _checker(self, method: str):
        member_call = method.startswith(self.MEMBER_PREFIXES)

        async def check(context: Any) -> None:
            peer = peer_ip(context.peer())
            try:
                if member_call:
                    self.policy.check_member(peer, "replica service")
                    return
                try:
                    forwarded = self._forwarded_client(context)
                except Exception as e:  # noqa: BLE001 - a forged relay claim: its own clear refusal
                    raise NetworkRefused(str(getattr(e, "message", e))) from None
                if forwarded is not None:
                    self.policy.check_member(peer, "forwarding relay")
                    peer = peer_ip(forwarded)
                self.policy.check_client(peer, "gRPC")
            except NetworkRefused as e:
                self._audit("refused_network", method=method, peer=peer, port="grpc", reason=str(e))
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))

        return check


def guard_handler(handler: grpc.RpcMethodHandler, check: Any) -> grpc.RpcMethodHandler:
    """``handler`` with ``await check(context)`` before it runs (once per call, streaming or not)."""
    if handler.unary_unary:
        inner = handler.unary_unary

        async def unary_unary(request, context):
            await check(context)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, handler.request_deserializer,
                                                   handler.response_serializer)
    if handler.unary_stream and inspect.iscoroutinefunction(handler.unary_stream):
        inner_uw = handler.unary_stream  # writes its responses with context.write: wrapped as a coroutine too

        async def unary_write(request, context):
            await check(context)
            await inner_uw(request, context)

        return grpc.unary_stream_rpc_method_handler(unary_write, handler.request_deserializer,
                                                    handler.response_serializer)
    if handler.unary_stream:
        inner_us = handler.unary_stream

        async def unary_stream(request, context):
            await check(context)
            result = inner_us(request, context)
            if hasattr(result, "__aiter__"):
                async for item in result:
                    yield item
            else:
                for item in (await result) or ():
                    yield item

        return grpc.unary_stream_rpc_method_handler(unary_stream, handler.request_deserializer,
                                                    handler.response_serializer)
    if handler.stream_unary:
        inner_su = handler.stream_unary

        async def stream_unary(requests, context):
            await check(context)
            return await inner_su(requests, context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, handler.request_deserializer,
                                                    handler.response_serializer)
    inner_ss = handler.stream_stream

    async def stream_stream(requests, context):
        await check(context)
        result = inner_ss(requests, context)
        if hasattr(result, "__aiter__"):
            async for item in result:
                yield item
        else:
            for item in (await result) or ():
                yield item

    return grpc.stream_stream_rpc_method_handler(stream_stream, handler.request_deserializer,
                                                 handler.response_serializer)
