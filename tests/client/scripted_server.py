"""A real gRPC server on loopback whose handlers a test scripts, to see how the SDK treats each status.

It answers the v1 services with whatever a test queues: a response, or an abort with a status, message and
trailing metadata. It records every request it received, so tests can count resends and compare UNIQ_KEYs.
Used only for error mapping and routing; behaviour against the real broker is tested end to end.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from concurrent import futures
from dataclasses import dataclass

import grpc

from raftmq.v1 import raftmq_pb2 as pb


@dataclass
class Abort:
    code: grpc.StatusCode
    message: str
    trailing: tuple = ()
    delay: float = 0.0


@dataclass
class Sleep:
    """Hold the call for ``seconds`` (past the client's deadline), then answer ``then``."""

    seconds: float
    then: object


class ScriptedServer:
    def __init__(self) -> None:
        self.script: dict[str, deque] = defaultdict(deque)
        self.defaults: dict[str, object] = {}
        self.received: dict[str, list] = defaultdict(list)
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handlers = {}
        for service, names in (("MessagingService", pb.DESCRIPTOR.services_by_name["MessagingService"]),
                               ("AdminService", pb.DESCRIPTOR.services_by_name["AdminService"])):
            methods = {}
            for m in names.methods:
                if m.client_streaming or m.server_streaming:
                    continue  # scripts unary answers only; a streaming call gets UNIMPLEMENTED (SDK: unary path)
                req_cls = getattr(pb, m.input_type.name)
                resp_cls = getattr(pb, m.output_type.name)
                methods[m.name] = grpc.unary_unary_rpc_method_handler(
                    self._handler(m.name, resp_cls), request_deserializer=req_cls.FromString,
                    response_serializer=resp_cls.SerializeToString)
            handlers[service] = grpc.method_handlers_generic_handler(f"raftmq.v1.{service}", methods)
        self.server.add_generic_rpc_handlers(tuple(handlers.values()))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"
        self.server.start()

    def push(self, method: str, *answers) -> None:
        with self._lock:
            self.script[method].extend(answers)

    def _next(self, method: str):
        with self._lock:
            if self.script[method]:
                return self.script[method].popleft()
            return self.defaults.get(method)

    def _handler(self, method: str, resp_cls):
        def handle(request, context):
            with self._lock:
                self.received[method].append(request)
            answer = self._next(method)
            while isinstance(answer, Sleep):
                time.sleep(answer.seconds)
                answer = answer.then
            if isinstance(answer, Abort):
                time.sleep(answer.delay)
                if answer.trailing:
                    context.set_trailing_metadata(answer.trailing)
                context.abort(answer.code, answer.message)
            if answer is None:
                return resp_cls()
            return answer(request) if callable(answer) else answer
        return handle

    def stop(self) -> None:
        self.server.stop(grace=None)
