"""The producer accumulator: sends from many threads share one ``SendStream`` to the leader (issue 17).

Why: a unary call costs the broker an RPC, an event-loop task and a Raft round trip's worth of waiting per
message. Here every send waits in a queue; one sender thread packs whatever is queued (after a short linger,
and only while earlier requests are still unanswered, so a lone send leaves at once) into one
``SendStreamRequest``, keeps up to ``window`` requests in flight, and a receiver thread hands each send its own
``SendOutcome`` in order. A send in a stream request is exactly a unary send to the broker (same checks, same
write path), so the outcome a caller sees is the same:

* ``code`` 0: stored; the results.
* a definite failure the unary path would retry (not the leader, not ready, busy, connection never made,
  broker without SendStream): :class:`Resend` - the producer sends it again the unary way, which follows
  redirects and backs off exactly as before (it was not stored, so this cannot duplicate it);
* any other definite failure: the typed SDK error the unary call would have raised;
* the stream broke, or the caller's timeout passed, while the send was in flight:
  :class:`~client.errors.UnknownOutcomeError` with its UNIQ_KEYs.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Any

import grpc

from raftmq.client import errors
from raftmq.client.connection import ServerPool
from raftmq.v1 import raftmq_pb2 as pb

_END = object()
_METHOD = "/raftmq.v1.MessagingService/SendStream"


class Resend(Exception):
    """Not stored, and the unary path knows how to retry it (redirect, back-off, another address)."""

    def __init__(self, cause: errors.RaftmqError):
        super().__init__(str(cause))
        self.cause = cause


class _StatusError(grpc.RpcError):
    """A per-send status from a SendOutcome, shaped like a failed call so errors.from_rpc_error maps it."""

    def __init__(self, code: grpc.StatusCode, details: str, leader: str):
        super().__init__(details)
        self._code, self._details, self._leader = code, details, leader

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return ((errors.LEADER_METADATA_KEY, self._leader),) if self._leader else ()


_CODES = {c.value[0]: c for c in grpc.StatusCode}


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2): the tag byte, the length, the bytes."""
    return bytes((tag,)) + _varint(len(payload)) + payload


# SendStreamRequest on the wire: field 1 (id, varint) = 0x08, field 2 (sends, SendStreamItem) = 0x12; in a
# SendStreamItem, field 1 (messages, Message) = 0x0A. Built from each send's bytes so the sender thread joins
# bytes instead of copying every message into a new request object (protobuf copies on assignment).
_ID_TAG, _SENDS_TAG, _MESSAGES_TAG = 0x08, 0x12, 0x0A


def encode_request(request_id: int, items: list[bytes]) -> bytes:
    """A serialized SendStreamRequest from serialized SendStreamItems (``pb.SendStreamRequest.FromString`` of
    it equals the object built field by field)."""
    return b"".join([bytes((_ID_TAG,)) + _varint(request_id), *(_field(_SENDS_TAG, i) for i in items)])


_SETTLING = threading.Lock()  # makes a send's first outcome its only one (a few threads may try to settle it)


class _Send:
    """One caller's send and its outcome. The caller waits on ``_done``, a lock taken at birth and released
    once when the outcome is set: one futex wake-up, where a Future's Condition makes a lock per wait."""

    __slots__ = ("item", "uniq_keys", "nbytes", "abandoned", "outcome", "_done")

    def __init__(self, messages: list[pb.Message]):
        # serialized in the caller's thread: one SendStreamItem
        self.item = b"".join([_field(_MESSAGES_TAG, m.SerializeToString()) for m in messages])
        self.uniq_keys = [m.uniq_key for m in messages]
        self.nbytes = len(self.item)
        self.abandoned = False
        self.outcome: tuple[str, Any] | None = None
        self._done = threading.Lock()
        self._done.acquire()

    def settle(self, kind: str, value: Any) -> None:
        """Set the outcome unless one is set already, and wake the caller."""
        with _SETTLING:
            if self.outcome is not None:
                return
            self.outcome = (kind, value)
        self._done.release()

    def wait(self, timeout: float) -> tuple[str, Any] | None:
        """The outcome, or None when there was none within ``timeout`` seconds."""
        return self.outcome if self._done.acquire(timeout=timeout) else None


class _Stream:
    """One open SendStream call: its request queue and the sends of each request still unanswered."""

    def __init__(self, address: str, channel: grpc.Channel):
        self.address = address
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.inflight: collections.deque[tuple[int, list[_Send]]] = collections.deque()
        self.alive = True
        self.receiver: threading.Thread | None = None
        self.call = channel.stream_stream(_METHOD, request_serializer=None,  # requests are bytes already
                                          response_deserializer=pb.SendStreamResponse.FromString)(
            iter(self.requests.get, _END))


class SendAccumulator:
    """Coalesces sends into SendStream requests; ``send()`` blocks until that send's outcome is known."""

    def __init__(self, pool: ServerPool, *, linger_s: float, window: int, max_sends: int = 1024,
                 max_bytes: int = 1 << 20):
        self._pool = pool
        self.linger_s = linger_s
        self.window = window
        self.max_sends = max_sends
        self.max_bytes = max_bytes
        self._cond = threading.Condition()
        self._queue: collections.deque[_Send] = collections.deque()
        self._stream: _Stream | None = None
        self._next_id = 0
        self._closed = False
        self.supported = True  # False once a broker answered UNIMPLEMENTED: the producer goes unary
        self._thread = threading.Thread(target=self._run, name="raftmq-producer-accumulator", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ caller side
    def send(self, messages: list[pb.Message], timeout: float) -> list[pb.SendResult]:
        """The results of one send; raises Resend, a typed SDK error, or UnknownOutcomeError."""
        s = _Send(messages)
        if s.nbytes > self.max_bytes:
            # alone bigger than a stream request may be: the unary call names a size limit it runs into, where a
            # refused stream request would break the stream and leave the other sends on it unknown
            raise Resend(errors.RaftmqError(f"send of {s.nbytes} bytes is larger than a stream request"))
        with self._cond:
            if self._closed:
                raise errors.RaftmqError("producer is closed")
            q = self._queue
            q.append(s)
            # wake the sender only when this send gives it something to do: it was idle (empty queue), or its
            # linger may end early (a full request). Waiting for a free window slot, it is woken by the receiver.
            if len(q) == 1 or len(q) >= self.max_sends:
                self._cond.notify_all()
        outcome = s.wait(timeout)
        if outcome is None:
            s.abandoned = True
            with self._cond:
                stream = self._stream
            address = stream.address if stream is not None else self._pool.write_address()
            if stream is not None:  # a member that does not answer: later sends must not queue behind it
                self._pool.report_timeout(stream.address)
                self._retire(stream)
            raise errors.UnknownOutcomeError(
                f"no answer within {timeout:.1f} s; the send ({_which(s.uniq_keys)}) may or may not have been "
                "stored", uniq_keys=s.uniq_keys, code=grpc.StatusCode.DEADLINE_EXCEEDED,
                address=address)
        kind, value = outcome
        if kind == "ok":
            return value
        raise value

    def close(self) -> None:
        with self._cond:
            self._closed = True
            left = list(self._queue)
            self._queue.clear()
            stream, self._stream = self._stream, None
            self._cond.notify_all()
        for s in left:  # never sent: safe to say so
            s.settle("error", errors.RaftmqError("producer closed before the message was sent"))
        if stream is not None:  # half-close, then let the broker answer what is in flight
            self._retire(stream)
            if stream.receiver is not None:
                stream.receiver.join(self._pool.timeout)
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------ sender thread
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._queue:
                    self._cond.wait()
                if self._closed:
                    return
                stream = self._stream
                if stream is not None and not stream.alive:
                    stream = self._stream = None
                # window full: wait for an answer (the receiver notifies)
                while stream is not None and stream.alive and len(stream.inflight) >= self.window \
                        and not self._closed:
                    self._cond.wait(0.5)
                if stream is not None and stream.inflight:
                    # earlier requests are unanswered: a short linger lets concurrent callers join this request
                    deadline = time.monotonic() + self.linger_s
                    while len(self._queue) < self.max_sends and not self._closed:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                sends = self._take()
                if not sends:
                    continue
            if stream is None or not stream.alive:
                try:
                    stream = self._open()
                except errors.RaftmqError as e:  # cannot even make the call: not sent
                    for s in sends:
                        s.settle("error", Resend(e))
                    continue
            self._next_id += 1
            request = encode_request(self._next_id, [s.item for s in sends])
            with self._cond:
                if not stream.alive:  # broke meanwhile; these never left this process
                    for s in sends:
                        s.settle("error", Resend(errors.ConnectionError("stream closed before sending",
                                                                          address=stream.address)))
                    continue
                stream.inflight.append((self._next_id, sends))
                stream.requests.put(request)  # under the lock: never behind the _END of a retired stream

    def _take(self) -> list[_Send]:
        sends: list[_Send] = []
        nbytes = 0
        q = self._queue
        while q and len(sends) < self.max_sends:
            s = q[0]
            if sends and nbytes + s.nbytes > self.max_bytes:
                break
            q.popleft()
            if s.abandoned:
                continue
            sends.append(s)
            nbytes += s.nbytes
        return sends

    def _open(self) -> _Stream:
        address = self._pool.write_address()
        stream = _Stream(address, self._pool.stubs(address).channel)
        with self._cond:
            self._stream = stream
        stream.receiver = threading.Thread(target=self._receive, args=(stream,), name="raftmq-producer-acks",
                                           daemon=True)
        stream.receiver.start()
        return stream

    # ------------------------------------------------------------------ receiver thread (one per stream)
    def _receive(self, stream: _Stream) -> None:
        failure: grpc.RpcError | None = None
        try:
            for response in stream.call:
                with self._cond:
                    rid, sends = stream.inflight.popleft()
                    if len(stream.inflight) + 1 >= self.window:  # the window was full: the sender may wait for it
                        self._cond.notify_all()
                if rid != response.id or len(response.outcomes) != len(sends):
                    raise errors.RaftmqError(f"the broker answered stream request {response.id} with "
                                             f"{len(response.outcomes)} outcomes, expected {rid} with {len(sends)}")
                redirect = False
                for s, o in zip(sends, response.outcomes, strict=True):
                    redirect |= self._settle_outcome(s, o, stream.address)
                if redirect:  # this member does not lead: later sends must go elsewhere
                    self._retire(stream)
        except grpc.RpcError as e:
            failure = e
        except errors.RaftmqError as e:
            failure = _StatusError(grpc.StatusCode.INTERNAL, e.message, "")
        self._retire(stream)
        with self._cond:
            left = list(stream.inflight)
            stream.inflight.clear()
            self._cond.notify_all()
        for _, sends in left:
            for s in sends:
                s.settle(*self._stream_failure(failure, s, stream.address))

    def _settle_outcome(self, s: _Send, o: pb.SendOutcome, address: str) -> bool:
        """Hand one outcome to its caller; True when it says this member is not the leader."""
        if o.code == 0:
            s.settle("ok", list(o.results))
            return False
        code = _CODES.get(o.code, grpc.StatusCode.UNKNOWN)
        err = errors.from_rpc_error(_StatusError(code, o.error, o.leader), address, write=True,
                                    uniq_keys=s.uniq_keys)
        if isinstance(err, errors.NotLeaderError | errors.UnavailableError | errors.BusyError):
            s.settle("error", Resend(err))
            return isinstance(err, errors.NotLeaderError)
        s.settle("error", err)
        return False

    def _stream_failure(self, failure: grpc.RpcError | None, s: _Send, address: str) -> tuple[str, Exception]:
        if failure is None:
            return "error", errors.UnknownOutcomeError(
                f"SendStream at {address} ended with the send ({_which(s.uniq_keys)}) unanswered; it may or may "
                "not have been stored", uniq_keys=s.uniq_keys, address=address)
        if failure.code() == grpc.StatusCode.UNIMPLEMENTED and not errors.is_broken_transport(failure):
            self.supported = False  # a broker without SendStream never processed it
            return "error", Resend(errors.RaftmqError("the broker does not support streaming sends", address=address))
        err = errors.from_rpc_error(failure, address, write=True, uniq_keys=s.uniq_keys)
        if isinstance(err, errors.ConnectionError | errors.NotLeaderError) or (
                isinstance(err, errors.UnavailableError) and failure.code() == grpc.StatusCode.UNAVAILABLE):
            return "error", Resend(err)  # the stream was refused as a whole: none of its sends were stored
        if isinstance(err, errors.PermissionDeniedError | errors.UnauthenticatedError):
            # the node checks credentials and networks when the stream opens, before it reads any request (a
            # topic a user may not write is refused in that send's own outcome): nothing on it was stored
            return "error", err
        if not isinstance(err, errors.UnknownOutcomeError):
            err = errors.UnknownOutcomeError(
                f"SendStream at {address} failed ({err.message}) with the send ({_which(s.uniq_keys)}) unanswered; "
                "it may or may not have been stored", uniq_keys=s.uniq_keys, address=address, code=err.code)
        return "error", err

    def _retire(self, stream: _Stream) -> None:
        with self._cond:
            if not stream.alive:
                return
            stream.alive = False
            if self._stream is stream:
                self._stream = None
            self._cond.notify_all()
            stream.requests.put(_END)  # half-close: the broker answers what it has, then ends the call


def _which(keys: list[str]) -> str:
    return f"UNIQ_KEY {keys[0]}" if len(keys) == 1 else f"{len(keys)} messages, UNIQ_KEYs {keys[0]} .. {keys[-1]}"

