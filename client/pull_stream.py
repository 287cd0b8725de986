"""One PullStream call that keeps a consumer's queues flowing, on a thread of its own (issue 17, streaming consume).

Why: pulling queue by queue costs one RPC per batch and per queue, and a caught-up consumer keeps one long poll in
flight per queue. On a stream the server reads every queue in turn and parks on all of them at once; the
consumer only receives. Each response is exactly what PullMessage would answer for that queue, so the consumer
applies it the same way.

The stream follows the consumer, not the other way round: ``request()`` builds the request from the consumer's
positions every time the stream (re)opens, ``deliver(queue_id, response)`` hands each response over and returns
False once the consumer no longer wants this stream (its queues or positions changed: it opens a new one). A
broken stream (member gone, restart, the call's lifetime over) is reopened from the consumer's positions on
another member when this one is unreachable; an error retrying cannot fix goes to ``fail(error)`` and ends it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc

from raftmq.client import errors
from raftmq.client.connection import ServerPool
from raftmq.v1 import raftmq_pb2 as pb

log = logging.getLogger(__name__)

LIFETIME_S = 120.0  # one call's deadline; the server ends the stream cleanly just before it, and it is reopened
_RETRIED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN,
                      grpc.StatusCode.INTERNAL, grpc.StatusCode.CANCELLED, grpc.StatusCode.RESOURCE_EXHAUSTED,
                      grpc.StatusCode.ABORTED})
_MAX_BACKOFF_S = 2.0


class QueueStream:
    """A PullStream kept open (and reopened) until ``close()``, ``deliver`` declines, or ``fail`` is called."""

    def __init__(self, pool: ServerPool, request: Callable[[], pb.PullStreamRequest | None],
                 deliver: Callable[[int, pb.PullMessageResponse], bool],
                 fail: Callable[[errors.RaftmqError], None]):
        self._pool = pool
        self._request = request
        self._deliver = deliver
        self._fail = fail
        self._closed = threading.Event()
        self._call_lock = threading.Lock()
        self._call: grpc.Call | None = None
        self._thread = threading.Thread(target=self._run, name="raftmq-pull-stream", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop: cancel the call in flight (never blocks; the thread ends on its own)."""
        self._closed.set()
        with self._call_lock:
            if self._call is not None:
                self._call.cancel()

    def _run(self) -> None:
        backoff = 0.05
        while not self._closed.is_set():
            request = self._request()
            if request is None:
                return
            try:
                call, address = self._pool.read(lambda s, t, r=request: s.messaging.PullStream(r, timeout=LIFETIME_S))
            except errors.RaftmqError as exc:  # the client was closed under us
                if not self._closed.is_set():
                    self._fail(exc)
                return
            with self._call_lock:
                if self._closed.is_set():
                    call.cancel()
                    return
                self._call = call
            try:
                for response in call:
                    backoff = 0.05
                    if not self._deliver(response.queue_id, response.pull):
                        self.close()
                        return
            except grpc.RpcError as rpc_err:
                if self._closed.is_set():
                    return
                err = errors.from_rpc_error(rpc_err, address)
                if rpc_err.code() not in _RETRIED and not isinstance(err, errors.ConnectionError):
                    self._fail(err)
                    return
                if rpc_err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    self._pool.report_timeout(address)  # reopen on another member first
                log.info("pull stream from %s broke (%s); reopening", address, err.message)
                self._closed.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
            # else: the server ended the stream (its lifetime): reopen at once from the consumer's positions
