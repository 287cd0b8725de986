"""Where a RocketMQ 5 client sends its calls: the topic's queues and the endpoints that serve them.

A one-group raftmq cluster is ONE broker from a client's point of view (the replicated group): every queue is on
broker ``<cluster name>``, id 0 (master), and any member answers any call (followers relay writes to the
leader). So the endpoints a route names are the ones the client asked through, as the Java proxy's cluster mode
does: a Kubernetes Service stays the client's one address, a list of members stays that list, and a failover
changes nothing the client knows. Only when the request names none do we fall back to the members' own addresses.

A cluster of several groups (issue 37, docs/design/scale-out.md#routes) is one broker per group, named after the
group, with that group's endpoints: a RocketMQ 5 send names a queue id but no broker, so the endpoints must tell
the groups apart.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from raftmq.node.validation import PERM_READ, PERM_WRITE
from raftmq.rocketmq.v2 import definition_pb2 as v2

ACCEPT_MESSAGE_TYPES = (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION)


def accept_message_types(cfg) -> tuple[int, ...]:
    """The message types a topic's queues take (issue 34), as the Java proxy lists them: the topic's own type,
    or every type for MIXED (and for a topic from before message types, which takes them all). A client that
    validates message types (its settings say so) refuses a send of another type itself."""
    kind = cfg.message_type
    return ACCEPT_MESSAGE_TYPES if kind in ("", "MIXED") else (v2.MessageType.Value(kind),)


def _scheme(host: str) -> int:
    try:
        return v2.IPv6 if ipaddress.ip_address(host.strip("[]")).version == 6 else v2.IPv4
    except ValueError:
        return v2.DOMAIN_NAME


def _split(address: str) -> tuple[str, int] | None:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def endpoints_of(addresses: list[str]) -> v2.Endpoints:
    """``host:port`` strings as v2 Endpoints; the scheme comes from the first host (as the clients do)."""
    pairs = [p for p in (_split(a) for a in addresses if a) if p is not None]
    if not pairs:
        return v2.Endpoints()
    scheme = _scheme(pairs[0][0])
    if scheme == v2.DOMAIN_NAME:
        pairs = pairs[:1]  # a client accepts one name (a Service), not a list of names
    return v2.Endpoints(scheme=scheme, addresses=[v2.Address(host=h, port=p) for h, p in pairs])


def route_endpoints(requested: v2.Endpoints, member_addresses: list[str]) -> v2.Endpoints:
    """The request's endpoints when it names any (with a scheme), else the members' gRPC addresses."""
    if requested.addresses and requested.scheme != v2.ADDRESS_SCHEME_UNSPECIFIED:
        out = v2.Endpoints()
        out.CopyFrom(requested)
        return out
    return endpoints_of(member_addresses)


def permission(perm: int, readable: bool, writable: bool) -> int:
    """A queue's v2 permission from the topic's perm bits and whether the queue id is a read/write queue."""
    r = readable and bool(perm & PERM_READ)
    w = writable and bool(perm & PERM_WRITE)
    return v2.READ_WRITE if r and w else v2.READ if r else v2.WRITE if w else v2.NONE


def broker(name: str, endpoints: v2.Endpoints) -> v2.Broker:
    return v2.Broker(name=name, id=0, endpoints=endpoints)


@dataclass(frozen=True)
class GroupQueues:
    """A topic's queues in one group of a cluster of several (issue 37), as ``message_queues`` reads a topic
    config: the group's counts and perm, the topic's message type."""

    read_queue_nums: int
    write_queue_nums: int
    perm: int
    message_type: str


def message_queues(topic: v2.Resource, cfg, broker_name: str, endpoints: v2.Endpoints) -> list[v2.MessageQueue]:
    """One MessageQueue per queue id of ``cfg`` (a store TopicConfig), as the Java proxy builds them."""
    b = broker(broker_name, endpoints)
    out = []
    for qid in range(max(cfg.read_queue_nums, cfg.write_queue_nums)):
        out.append(v2.MessageQueue(topic=topic, id=qid, broker=b,
                                   permission=permission(cfg.perm, qid < cfg.read_queue_nums,
                                                         qid < cfg.write_queue_nums),
                                   accept_message_types=accept_message_types(cfg)))
    return out
