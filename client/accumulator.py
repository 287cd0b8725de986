"""The producer accumulator: sends from many threads share one ``SendStream`` to the leader (issue 17).

Why: a unary call costs the broker an RPC, an event-loop task and a Raft round trip's worth of waiting per
message. Here every send waits in a queue; a writer task packs whatever is queued (after a short linger, and
only while earlier requests are still unanswered, so a lone send leaves at once) into one
``SendStreamRequest``, keeps up to ``window`` requests in flight, and a reader task hands each send its own
``SendOutcome`` in order. Both run on one asyncio event loop in a background thread (grpc.aio): the blocking
streaming API adds a request-iterator, a channel-poller and a response-reader thread and their wake-ups to
every request (64 threads of single sends: 13% more client CPU per send, 15% fewer sends per second).

A send in a stream request is exactly a unary send to the broker (same checks, same write path), so the outcome a
caller sees is the same:

* ``code`` 0: stored; the results.
* a definite failure the unary path would retry (not the leader, not ready, busy, connection never made,
  broker without SendStream): :class:`Resend` - the producer sends it again the unary way, which follows
  redirects and backs off exactly as before (it was not stored, so this cannot duplicate it);
* any other definite failure: the typed SDK error the unary call would have raised;
* the stream broke, or the caller's timeout passed, while the send was in flight:
  :class:`~client.errors.UnknownOutcomeError` with its UNIQ_KEYs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from typing import Any

import grpc

from raftmq.client import errors
from raftmq.client.connection import CHANNEL_OPTIONS, ServerPool
from raftmq.v1 import raftmq_pb2 as pb

_METHOD = "/raftmq.v1.MessagingService/SendStream"
log = logging.getLogger(__name__)
ACCEPT_WAIT_S = 1.0  # longest wait for a new stream's accepted header (see SendAccumulator._accepted)


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
# SendStreamItem, field 1 (messages, Message) = 0x0A. Built from each send's bytes so the writer task joins
# bytes instead of copying every message into a new request object (protobuf copies on assignment).
_ID_TAG, _SENDS_TAG, _MESSAGES_TAG = 0x08, 0x12, 0x0A


def encode_request(request_id: int, items: list[bytes]) -> bytes:
    """A serialized SendStreamRequest from serialized SendStreamItems (``pb.SendStreamRequest.FromString`` of
    it equals the object built field by field)."""
    return b"".join([bytes((_ID_TAG,)) + _varint(request_id), *(_field(_SENDS_TAG, i) for i in items)])


_SETTLING = threading.Lock()  # makes a send's first outcome its only one (a few threads may try to settle it)


class _Send:
    """One caller's send and its outcome. A blocking caller waits on ``_done``, a lock taken at birth and
    released once when the outcome is set: one futex wake-up, where a Future's Condition makes a lock per wait."""

    __slots__ = ("item", "uniq_keys", "nbytes", "abandoned", "outcome", "_done")

    def __init__(self, messages: list[pb.Message]):
        # serialized in the caller's thread: one SendStreamItem
        self.item = b"".join([_field(_MESSAGES_TAG, m.SerializeToString()) for m in messages])
        self.uniq_keys = [m.uniq_key for m in messages]
        self.nbytes = len(self.item)
        self.abandoned = False
        self.outcome: tuple[str, Any] | None = None
        self._done = self._waiter()

    def _waiter(self) -> Any:
        done = threading.Lock()
        done.acquire()
        return done

    def _wake(self) -> None:
        self._done.release()

    def settle(self, kind: str, value: Any) -> None:
        """Set the outcome unless one is set already, and wake the caller."""
        with _SETTLING:
            if self.outcome is not None:
                return
            self.outcome = (kind, value)
        self._wake()

    def wait(self, timeout: float) -> tuple[str, Any] | None:
        """The outcome, or None when there was none within ``timeout`` seconds."""
        return self.outcome if self._done.acquire(timeout=timeout) else None


class _AsyncSend(_Send):
    """A send whose caller awaits it on the accumulator's own loop (``AsyncProducer``): ``_done`` is a future of
    that loop, and every settle runs on it (the reader, the writer, ``aclose``), so no thread is woken."""

    __slots__ = ()

    def _waiter(self) -> Any:
        return asyncio.get_running_loop().create_future()

    def _wake(self) -> None:
        if not self._done.done():
            self._done.set_result(None)

    async def wait_async(self, timeout: float) -> tuple[str, Any] | None:
        """The outcome, or None when there was none within ``timeout`` seconds (the timeout cancels the
        future; an outcome that arrives later is recorded and nobody is woken)."""
        try:
            async with asyncio.timeout(timeout):
                await self._done
        except TimeoutError:
            return None
        return self.outcome


class _Stream:
    """One open SendStream call (used on the event loop) and the sends of each request still unanswered."""

    def __init__(self, address: str, call: Any):
        self.address = address
        self.call = call
        self.inflight: collections.deque[tuple[int, list[_Send]]] = collections.deque()
        self.alive = True
        self.ended = threading.Event()  # the reader has settled everything that was in flight
        self.writing = asyncio.Lock()   # the half-close waits for a request being written
        self.reader: asyncio.Task | None = None


class SendAccumulator:
    """Coalesces sends into SendStream requests; ``send()`` blocks until that send's outcome is known,
    ``await send_async()`` waits for it on the loop.

    Shared state (the queue, the current stream, each stream's in-flight requests) is guarded by ``_cond``.
    The stream I/O runs on ``_loop``: a private loop in the ``raftmq-producer-io`` thread for blocking callers,
    or, given ``loop``, the caller's own running loop (``AsyncProducer``: no thread, no cross-thread wake-up;
    only ``send_async`` and ``aclose`` may be used then, from that loop)."""

    def __init__(self, pool: ServerPool, *, linger_s: float, window: int, max_sends: int = 1024,
                 max_bytes: int = 1 << 20, loop: asyncio.AbstractEventLoop | None = None):
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
        self._kicked = False  # the writer will look at the queue again (set by a caller that woke it)
        self.supported = True  # False once a broker answered UNIMPLEMENTED: the producer goes unary
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._wake = asyncio.Event()   # the queue has sends (set by callers, through the loop)
        self._slot = asyncio.Event()   # a request was answered, or a stream ended
        self._tasks: set[asyncio.Task] = set()  # this accumulator's own tasks (never the caller's)
        self._thread: threading.Thread | None = None
        if loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._run_loop, name="raftmq-producer-io", daemon=True)
            self._thread.start()
        else:
            self._loop = loop
            self._spawn(self._writer())

    # ------------------------------------------------------------------ caller side
    def send(self, messages: list[pb.Message], timeout: float) -> list[pb.SendResult]:
        """The results of one send; raises Resend, a typed SDK error, or UnknownOutcomeError."""
        s = _Send(messages)
        self._enqueue(s)
        return self._result(s, s.wait(timeout), timeout)

    async def send_async(self, messages: list[pb.Message], timeout: float) -> list[pb.SendResult]:
        """``send`` for a caller on the accumulator's own loop (made with ``loop``)."""
        s = _AsyncSend(messages)
        self._enqueue(s)
        try:
            outcome = await s.wait_async(timeout)
        except asyncio.CancelledError:
            s.abandoned = True  # the caller gave up on it: still queued, it is never sent
            raise
        return self._result(s, outcome, timeout)

    def _enqueue(self, s: _Send) -> None:
        if s.nbytes > self.max_bytes:
            # alone bigger than a stream request may be: the unary call names a size limit it runs into, where a
            # refused stream request would break the stream and leave the other sends on it unknown
            raise Resend(errors.RaftmqError(f"send of {s.nbytes} bytes is larger than a stream request"))
        with self._cond:
            if self._closed:
                raise errors.RaftmqError("producer is closed")
            self._queue.append(s)
            kick = not self._kicked  # one wake-up per idle-to-busy turn of the writer, not one per send
            self._kicked = True
        if kick:
            if self._thread is None:  # on the loop already
                self._wake.set()
            else:
                with contextlib.suppress(RuntimeError):  # closed meanwhile: close() settles this send
                    self._loop.call_soon_threadsafe(self._wake.set)

    def _result(self, s: _Send, outcome: tuple[str, Any] | None, timeout: float) -> list[pb.SendResult]:
        """The results for a settled send; raises its error, or UnknownOutcomeError when it timed out (None)."""
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
        """Blocking callers: stop taking sends and let the broker answer those in flight."""
        assert self._thread is not None, "an accumulator on the caller's loop closes with aclose()"
        closing, stream = self._start_closing()
        if not closing:
            return
        if stream is not None:
            stream.ended.wait(self._pool.timeout)
        with contextlib.suppress(RuntimeError):  # the loop already stopped
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
        self._thread.join(timeout=5)

    async def aclose(self) -> None:
        """``close`` on the accumulator's own loop."""
        closing, stream = self._start_closing()
        if not closing:
            return
        if stream is not None:
            self._start_reader(stream)  # (if none yet) it settles what is in flight, then the stream ends
            assert stream.reader is not None
            await asyncio.wait([stream.reader], timeout=self._pool.timeout)
        await self._shutdown()

    def _start_closing(self) -> tuple[bool, _Stream | None]:
        """Refuse new sends, fail the queued ones, half-close the stream: (False, None) when closed already."""
        with self._cond:
            if self._closed:
                return False, None
            self._closed = True
            left = list(self._queue)
            self._queue.clear()
            stream, self._stream = self._stream, None
        for s in left:  # never sent: safe to say so
            s.settle("error", errors.RaftmqError("producer closed before the message was sent"))
        if stream is not None:  # half-close, then let the broker answer what is in flight
            self._retire(stream)
        return True, stream

    # ------------------------------------------------------------------ the event loop
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._spawn(self._writer())
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _shutdown(self) -> None:
        for channel in self._channels.values():
            await channel.close(grace=None)  # any reader still waiting ends with CANCELLED: unknown outcome
        self._channels.clear()
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._thread is not None:
            self._loop.call_soon(self._loop.stop)

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._send_queued()
            except Exception as e:  # a bug must not leave every later send waiting for its timeout
                log.exception("SendStream writer failed")
                with self._cond:
                    left = list(self._queue)
                    self._queue.clear()
                    self._kicked = False
                for s in left:  # never sent
                    s.settle("error", errors.RaftmqError(f"the producer could not send: {type(e).__name__}: {e}"))

    async def _send_queued(self) -> None:
        """Send requests until the queue is empty (then ``_kicked`` is cleared under the lock)."""
        while True:
            with self._cond:
                stream = self._live_stream()
                if self._closed or not self._queue:
                    self._kicked = False
                    return
                full = stream is not None and len(stream.inflight) >= self.window
                if full:
                    self._slot.clear()
            if full:  # wait for an answer (or the stream's end)
                await self._slot.wait()
                continue
            if stream is not None and stream.inflight and self.linger_s > 0:
                # earlier requests are unanswered: a short linger lets concurrent callers join this request
                await asyncio.sleep(self.linger_s)
            with self._cond:
                stream = self._live_stream()
                sends = self._take()
            if not sends:
                continue
            if stream is None:
                try:
                    stream = self._open()
                except errors.RaftmqError as e:  # cannot even make the call: not sent
                    for s in sends:
                        s.settle("error", Resend(e))
                    continue
                await self._accepted(stream)
            self._next_id += 1
            request = encode_request(self._next_id, [s.item for s in sends])
            with self._cond:
                if not stream.alive or self._closed:  # broke meanwhile; these never left this process
                    for s in sends:
                        s.settle("error", Resend(errors.ConnectionError("stream closed before sending",
                                                                          address=stream.address)))
                    continue
                stream.inflight.append((self._next_id, sends))
            async with stream.writing:
                with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
                    await stream.call.write(request)  # a failed call: its reader settles these sends
            self._start_reader(stream)

    def _live_stream(self) -> _Stream | None:
        """Lock held: the current stream, forgotten once it is retired."""
        stream = self._stream
        if stream is not None and not stream.alive:
            stream = self._stream = None
        return stream

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
        """A new SendStream call to the write address (on the loop); its reader starts after the first write."""
        address = self._pool.write_address()
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = self._pool.security.aio_channel(address, CHANNEL_OPTIONS)
        call = channel.stream_stream(_METHOD, request_serializer=None,  # requests are bytes already
                                     response_deserializer=pb.SendStreamResponse.FromString)(
            metadata=self._pool.security.call_metadata())
        stream = _Stream(address, call)
        with self._cond:
            self._stream = stream
        return stream

    async def _accepted(self, stream: _Stream) -> None:
        """Wait for the broker's headers (it accepted the stream) or the call's end (it refused it) before the
        first write: a write in progress when a refusal arrives ends the call INTERNAL ("Internal error from
        Core") instead of with the refusal's own status (grpc.aio, observed), and that status decides whether
        the sends may be sent again. A broker older than its accepted header answers nothing until the first
        request: after ACCEPT_WAIT_S the write goes ahead (a refusal may then read as an unknown outcome)."""
        with contextlib.suppress(asyncio.TimeoutError, grpc.RpcError):
            await asyncio.wait_for(asyncio.shield(stream.call.initial_metadata()), ACCEPT_WAIT_S)

    def _start_reader(self, stream: _Stream) -> None:
        """Read ``stream``'s answers from now on: after its first request is written (the same race as in
        ``_accepted``, with a read pending instead of a write)."""
        if stream.reader is None:
            stream.reader = self._spawn(self._read(stream))

    # ------------------------------------------------------------------ reader task (one per stream)
    async def _read(self, stream: _Stream) -> None:
        failure: grpc.RpcError | None = None
        try:
            while True:
                response = await stream.call.read()
                if response is grpc.aio.EOF:
                    break
                with self._cond:
                    if not stream.inflight:
                        raise errors.RaftmqError(f"the broker answered stream request {response.id}, which was "
                                                 "never sent")
                    rid, sends = stream.inflight.popleft()
                self._slot.set()
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
        finally:
            self._retire(stream)
            with self._cond:
                left = list(stream.inflight)
                stream.inflight.clear()
            for _, sends in left:
                for s in sends:
                    s.settle(*self._stream_failure(failure, s, stream.address))
            stream.ended.set()
            self._slot.set()  # the writer opens a new stream for what is queued

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
        """No more requests on ``stream``: half-close it; the broker answers what it has, then ends the call."""
        with self._cond:
            if not stream.alive:
                return
            stream.alive = False
            if self._stream is stream:
                self._stream = None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to half-close any more
            self._loop.call_soon_threadsafe(self._half_close, stream)

    def _half_close(self, stream: _Stream) -> None:
        async def done_writing() -> None:
            async with stream.writing:
                with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
                    await stream.call.done_writing()

        self._spawn(done_writing())
        self._start_reader(stream)  # retired before its first request: the reader still ends it
        self._slot.set()  # a writer waiting for this stream's window looks again (and opens a new one)


def _which(keys: list[str]) -> str:
    return f"UNIQ_KEY {keys[0]}" if len(keys) == 1 else f"{len(keys)} messages, UNIQ_KEYs {keys[0]} .. {keys[-1]}"

