"""The transactional producer (RocketMQ's ``TransactionMQProducer``): half message, local transaction, outcome.

``send_in_transaction`` stores a half message (invisible to consumers), runs ``local_tx(half)`` and ends the
transaction with its answer: COMMIT delivers the message, ROLLBACK drops it, UNKNOWN (or an exception in
``local_tx``) leaves it to the broker's check-back. For the check-back, a producer with a ``checker`` keeps one
``CheckTransactions`` stream open to the leader of every group of the cluster (one in a one-group cluster), each on
a background thread: a group's leader asks about its half messages left open longer than its transaction timeout,
and ``checker(message_view)`` answers. Each stream follows its group's leader (redirect hint, else the next
address) and reconnects after failures. Any producer of the same group may answer,
so a restarted process (or another one) resolves what a crashed one left open.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import grpc

from raftmq.client import errors
from raftmq.client.connection import ServerPool
from raftmq.client.producer import _body, _keys
from raftmq.client.routing import ROUTE_RETRY_S, ROUTE_TTL_S, Router
from raftmq.client.security import ClientSecurity
from raftmq.client.types import MessageView, SendResult
from raftmq.client.uniq_key import UniqKeyGenerator
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pbg

log = logging.getLogger(__name__)
_MAX_BACKOFF = 2.0


class TransactionState(enum.Enum):
    COMMIT = pb.TX_COMMIT
    ROLLBACK = pb.TX_ROLLBACK
    UNKNOWN = pb.TX_UNKNOWN


@dataclass(frozen=True)
class HalfResult:
    """Where the half message is stored, and the transaction's id (its UNIQ_KEY)."""

    transaction_id: str
    msg_id: str  # the half message's offset id: what EndTransaction names
    send_result: SendResult


@dataclass(frozen=True)
class TransactionResult:
    state: TransactionState  # what local_tx answered (UNKNOWN when it raised)
    half: HalfResult
    committed: SendResult | None = None  # where the real message is stored, after a commit
    end_error: str = ""  # the outcome could not be sent; the broker's check-back resolves it


Checker = Callable[[MessageView], TransactionState]


class TransactionProducer:
    """Sends transactional messages for ``group``; thread-safe. ``close()`` it (or use ``with``)."""

    def __init__(self, servers: str | Iterable[str] | None = None, *, group: str,
                 checker: Checker | None = None, timeout: float = 10.0, retry_timeout: float = 15.0,
                 security: ClientSecurity | None = None):
        if not group:
            raise errors.InvalidArgumentError("group is empty: a transactional producer needs a producer group")
        self.group = group
        self._pool = ServerPool(servers, timeout=timeout, retry_timeout=retry_timeout, security=security)
        self._ids = UniqKeyGenerator()
        self._checker = checker
        self._closed = threading.Event()
        self._router = Router(self._pool, lambda addresses: ServerPool(
            addresses, timeout=timeout, retry_timeout=retry_timeout, security=self._pool.security))
        self._streams: list[_CheckStream] = []
        self._thread: threading.Thread | None = None
        if checker is not None:
            self._thread = threading.Thread(target=self._serve_checks, name=f"raftmq-tx-checker-{group}",
                                            daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ sending
    def send_half(self, topic: str, body: bytes | str, *, tags: str | None = None,
                  keys: list[str] | str | None = None, properties: Mapping[str, str] | None = None,
                  queue_id: int | None = None, broker: str | None = None) -> HalfResult:
        """Store the half message; ``broker``: in that group of the cluster (else the receiving member's)."""
        m = pb.Message(topic=topic, body=_body(body), tags=tags or "", keys=_keys(keys),
                       properties=dict(properties or {}), born_timestamp=time.time_ns() // 1_000_000,
                       uniq_key=self._ids.next())
        if queue_id is not None:
            m.queue_id = queue_id
        if broker:
            m.broker = broker
        req = pb.SendHalfMessageRequest(message=m, producer_group=self.group)
        resp, _ = self._pool.write(lambda s, t: pbg.TransactionServiceStub(s.channel).SendHalfMessage(req, timeout=t),
                                   uniq_keys=[m.uniq_key])
        return HalfResult(resp.transaction_id, resp.result.msg_id, SendResult.from_pb(resp.result))

    def end(self, half: HalfResult, state: TransactionState) -> SendResult | None:
        """Commit or roll back; returns where the committed message is stored (None after a rollback).

        Safe to repeat: asking again for the outcome the transaction already has (this call retried after a lost
        answer, or a check-back answer that got there first) succeeds without storing anything twice, and a
        repeated commit returns where the first one stored the message. Raises NotFoundError (no such half
        message) or RaftmqError with FAILED_PRECONDITION when it already ended the other way ("already finished
        (committed); a rollback cannot change ...", also after a discard to TRANS_CHECK_MAX_TIME_TOPIC).
        """
        if state not in (TransactionState.COMMIT, TransactionState.ROLLBACK):
            raise errors.InvalidArgumentError(f"{state}: only COMMIT or ROLLBACK end a transaction")
        req = pb.EndTransactionRequest(producer_group=self.group, transaction_id=half.transaction_id,
                                       msg_id=half.msg_id, resolution=state.value)
        # idempotent: after a lost answer (deadline, broken connection, UNKNOWN) the same request is sent again;
        # the broker answers a repeated outcome as success and never applies it twice
        resp, _ = self._pool.write(lambda s, t: pbg.TransactionServiceStub(s.channel).EndTransaction(req, timeout=t),
                                   idempotent=True)
        return SendResult.from_pb(resp.result) if resp.HasField("result") else None

    def send_in_transaction(self, topic: str, body: bytes | str, *,
                            local_tx: Callable[[HalfResult], TransactionState], tags: str | None = None,
                            keys: list[str] | str | None = None, properties: Mapping[str, str] | None = None,
                            queue_id: int | None = None, broker: str | None = None) -> TransactionResult:
        """Half message, then ``local_tx(half)``, then its outcome (see the module docstring)."""
        half = self.send_half(topic, body, tags=tags, keys=keys, properties=properties, queue_id=queue_id,
                              broker=broker)
        try:
            state = local_tx(half)
            if not isinstance(state, TransactionState):
                raise TypeError(f"local_tx returned {state!r}, not a TransactionState")
        except Exception:
            log.exception("local transaction of %s failed; its outcome is left to the check-back",
                          half.transaction_id)
            state = TransactionState.UNKNOWN
        if state == TransactionState.UNKNOWN:
            return TransactionResult(state, half)
        try:
            committed = self.end(half, state)
        except errors.RaftmqError as e:
            return TransactionResult(state, half, None, str(e))
        return TransactionResult(state, half, committed)

    # ------------------------------------------------------------------ check-back streams
    def _serve_checks(self) -> None:
        """One check stream per group of the cluster (a group's leader asks only the producers connected to it,
        docs/design/scale-out.md#consumers): the groups are learnt from the route, and asked again every
        ``ROUTE_TTL_S`` so a group added later is reached too; a one-group cluster is the servers given."""
        streams: dict[str, _CheckStream] = {}
        while not self._closed.is_set():
            route = self._router.route("")
            if route is not None:
                pools = {g.name: self._router.pool(g.name) for g in route.groups if g.endpoints}
            else:  # one group (or a server from before routes); not known yet: ask again shortly
                pools = {"": self._pool} if self._router.single else {}
            for name, pool in pools.items():
                if name not in streams:
                    streams[name] = stream = _CheckStream(self, pool, name)
                    stream.start()
            self._streams = list(streams.values())
            self._closed.wait(ROUTE_TTL_S if pools else ROUTE_RETRY_S)

    def _ask(self, check: pb.TransactionCheck) -> TransactionState:
        assert self._checker is not None
        try:
            state = self._checker(MessageView.from_pb(check.message))
            if isinstance(state, TransactionState):
                return state
            log.error("transaction checker returned %r, not a TransactionState; answering UNKNOWN", state)
        except Exception:
            log.exception("transaction checker failed for %s; answering UNKNOWN", check.transaction_id)
        return TransactionState.UNKNOWN

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for stream in self._streams:
            stream.stop()
        self._router.close()
        self._pool.close()

    def __enter__(self) -> TransactionProducer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _CheckStream:
    """The ``CheckTransactions`` stream of one group (``pool``: its endpoints), on a thread of its own: follows
    the group's leader (redirect hint, else the next address) and reconnects after failures."""

    def __init__(self, producer: TransactionProducer, pool: ServerPool, group: str):
        self._producer = producer
        self._pool = pool
        self._closed = producer._closed
        self._call: grpc.Future | None = None
        self._target: str | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name=f"raftmq-tx-checker-{producer.group}{'-' + group if group else ''}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        call = self._call
        if call is not None:
            call.cancel()
        self._thread.join(timeout=5)

    def _targets(self) -> list[str]:
        first = self._target or self._pool.leader or self._pool.addresses[0]
        return [first] + [a for a in self._pool.addresses if a != first]

    def _serve(self) -> None:
        backoff = 0.1
        while not self._closed.is_set():
            for address in self._targets():
                if self._closed.is_set():
                    return
                if self._stream_once(address):
                    backoff = 0.1
                    break
            self._closed.wait(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF)

    def _stream_once(self, address: str) -> bool:
        """One stream to ``address`` until it ends; True when it was accepted (worth reconnecting at once)."""
        group = self._producer.group
        outbox: queue.Queue[pb.TransactionStreamRequest | None] = queue.Queue()
        outbox.put(pb.TransactionStreamRequest(register_group=group))

        def requests():
            while True:
                item = outbox.get()
                if item is None:
                    return
                yield item

        accepted = False
        try:
            stub = pbg.TransactionServiceStub(self._pool.stubs(address).channel)
            call = stub.CheckTransactions(requests())
            self._call = call
            if self._closed.is_set():
                call.cancel()
            for check in call:
                accepted = True
                self._target = address
                outbox.put(pb.TransactionStreamRequest(check_answer=pb.EndTransactionRequest(
                    producer_group=group, transaction_id=check.transaction_id, msg_id=check.msg_id,
                    resolution=self._producer._ask(check).value)))
            accepted = True  # ended cleanly (the server closed it): reconnect
        except grpc.RpcError as rpc_err:
            err = errors.from_rpc_error(rpc_err, address)
            if isinstance(err, errors.NotLeaderError) and err.leader:
                self._target = err.leader
                accepted = True  # go straight to the leader
            elif self._target == address:
                self._target = None
            if not self._closed.is_set():
                log.debug("transaction check stream to %s ended: %s", address, err)
        except errors.RaftmqError:
            pass  # closed
        finally:
            outbox.put(None)
        return accepted
