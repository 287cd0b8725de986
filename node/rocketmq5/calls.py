"""How the v2 RPCs run: node/rpc.py's one RPC scope with the RocketMQ 5 ``Protocol``: a failure is answered
with the response's ``Status`` (never a gRPC error), the metrics label is ``rmq5.<method>``, the forwarder knows
the method by its full path, and a unary call waits out an election while its deadline allows.

A follower that is asked for a write answers "not the leader" internally; the scope then relays the request to
the leader over the cluster's channel and passes the leader's answer back unchanged, so a client that only knows
its access point (a Kubernetes Service, or a list of members) keeps working through a failover.
"""

from __future__ import annotations

import functools
from typing import Any

import grpc

from raftmq.node.errors import RpcError
from raftmq.node.rocketmq5.status import V2Error, from_rpc_error
from raftmq.node.rpc import Protocol, rpc_handler
from raftmq.rocketmq.v2 import definition_pb2 as v2
from raftmq.rocketmq.v2 import service_pb2

SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
SERVICE_PATH = f"/{SERVICE.full_name}/"
CLIENT_ID_KEY = "x-mq-client-id"
METRIC_PREFIX = "rmq5."  # rpc metric label of the v2 methods (raftmq's own methods share names with them)



def method_path(name: str) -> str:
    """``/apache.rocketmq.v2.MessagingService/<name>``: the key node.forwarding and node.auth use."""
    return SERVICE_PATH + name


@functools.cache
def response_class(name: str) -> Any:
    return getattr(service_pb2, SERVICE.methods_by_name[name].output_type.name)


def metadata_value(context: grpc.aio.ServicerContext, key: str) -> str:
    for k, v in context.invocation_metadata() or ():
        if k == key and isinstance(v, str):
            return v
    return ""


def client_id(context: grpc.aio.ServicerContext) -> str:
    """The official clients' identity (``x-mq-client-id``: host@pid@index@time); "" when absent."""
    return metadata_value(context, CLIENT_ID_KEY)[:256]


class V2Protocol(Protocol):
    """apache.rocketmq.v2: every answer is a response whose ``Status`` says how the call went."""

    metric_prefix = METRIC_PREFIX
    waits_out_elections = True

    def forward_key(self, method: str) -> str:
        return method_path(method)

    def direct_answer(self, method: str, exc: BaseException) -> tuple[str, Any] | None:
        if isinstance(exc, V2Error):
            return v2.Code.Name(exc.code), response_class(method)(status=exc.status())
        return None

    def answer(self, method: str, err: RpcError) -> tuple[str, Any] | None:
        status = from_rpc_error(err)
        return v2.Code.Name(status.code), response_class(method)(status=status)


V2 = V2Protocol()


def v2_rpc(name: str, *, needs_ready: bool = True, long_lived: bool = False):
    """node.rpc.rpc_handler for a v2 method (unary, or streaming as an async generator)."""
    response_class(name)  # an unknown method name fails at import, not at the first call
    return rpc_handler(name, protocol=V2, needs_ready=needs_ready, long_lived=long_lived)
