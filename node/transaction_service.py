"""TransactionService: half messages, commit/rollback, and the leader's check-back over producers' streams.

Why this shape: every step of a transaction is a put through the write path (half, commit + op as one atomic
batch, renewed or discarded copies) and the check progress is the ``CID_RMQ_SYS_TRANS`` consumer offsets, so all
of it is replicated and a new leader resumes from its own store (``store.transaction.TransactionLog``). The check
loop runs on every node and acts only while this node leads with its election barrier applied (it polls
``write_path.is_writable()``; no leadership hook needed).
Producers keep a ``CheckTransactions`` stream open to the leader; when this node stops leading, their streams are
closed with FAILED_PRECONDITION and the leader hint, and the SDK reconnects there.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import TYPE_CHECKING

import grpc

from raftmq.node import convert
from raftmq.node.errors import RpcError, invalid, to_rpc_error
from raftmq.node.rpc import rpc_handler
from raftmq.node.send_path import SendPath, peer_host
from raftmq.node.validation import check_group_name, check_topic_name
from raftmq.store import StoreError
from raftmq.store.message import decode_message_id
from raftmq.store.topic_config import TRANSACTION, TopicConfig
from raftmq.store.transaction import (
    CHECK_MAX_TOPIC,
    COMMITTED,
    HALF_TOPIC,
    OP_TOPIC,
    ROLLED_BACK,
    SYSTEM_GROUP,
    TransactionLog,
    TransactionStateError,
    check_times,
    commit_message,
    discarded_message,
    op_message,
    producer_group,
    real_topic,
    renewed_half,
)
from raftmq.store.transaction import half_message as make_half
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

IDLE_POLL_SECONDS = 0.2  # how soon a node notices it leads / stopped leading
REGISTER_TIMEOUT_SECONDS = 10.0


class _Checker:
    """One producer's open CheckTransactions stream: checks are queued to it; None closes it."""

    def __init__(self, group: str):
        self.group = group
        self.queue: asyncio.Queue[pb.TransactionCheck | None] = asyncio.Queue()
        self.close_reason: RpcError | None = None


class TransactionService(pb_grpc.TransactionServiceServicer):
    def __init__(self, node: BrokerCore, sends: SendPath):
        self.node = node
        self.sends = sends  # the node's one prepared write path: halves, outcomes and renewed halves go through it
        # one outcome at a time per transaction: "still open?" and the put are one step (other transactions
        # proceed in parallel, so their puts share group commits)
        self._end_locks: dict[str, list] = {}  # transaction id -> [lock, users]
        self._checkers: dict[str, list[_Checker]] = {}
        self._pick = itertools.count()
        self._tlog: TransactionLog | None = None  # its op cache is dropped whenever this node stops leading
        self._metrics_log: TransactionLog | None = None  # rocketmq_half_messages on every member, leader or not
        node.metrics.half_messages_pending = self._pending
        self._task = asyncio.get_running_loop().create_task(self._check_loop())

    def _pending(self) -> dict[str, int]:
        log_ = self._metrics_log
        if log_ is None or log_.store is not self.node.store:
            log_ = self._metrics_log = TransactionLog(self.node.store)
        return log_.pending()

    @property
    def _log(self) -> TransactionLog:
        log_ = self._tlog
        if log_ is None or log_.store is not self.node.store:
            log_ = self._tlog = TransactionLog(self.node.store)
        return log_

    # ------------------------------------------------------------------ half message
    @rpc_handler("SendHalfMessage")
    async def SendHalfMessage(self, request: pb.SendHalfMessageRequest, context):  # noqa: N802
        if not request.producer_group:
            raise invalid("producer_group is empty; transactional messages need a producer group (checks go to it)")
        check_group_name(request.producer_group)
        m = request.message
        check_topic_name(m.topic)
        if m.delay_level:
            raise invalid(f"delay_level {m.delay_level}: a transactional message cannot be delayed; send it with "
                          "delay_level 0")
        if m.deliver_at_ms:
            raise invalid(f"deliver_at_ms {m.deliver_at_ms}: a transactional message cannot be a timer message; "
                          "send it with deliver_at_ms 0")
        result, half = await self.store_half(m, request.producer_group, peer_host(context.peer()))
        broker = self.node.groups.answer_name
        return pb.SendHalfMessageResponse(result=convert.send_result(result, half, broker),
                                          transaction_id=half.uniq_key or "")

    async def store_half(self, m: pb.Message, group: str, born_host: tuple[str, int],
                         extra_properties: dict[str, str] | None = None):
        """Store ``m`` as the half message of a new transaction of producer ``group``: (put result, half).

        The one half-message path of both APIs (raftmq's SendHalfMessage and RocketMQ 5's TRANSACTION sends);
        ``extra_properties`` are system properties the caller's protocol carries (e.g. a trace context)."""
        node = self.node
        sends = self.sends
        sends.route_group([m])  # issue 37: a half for another group's queue is that group's transaction
        cfg = await sends.writable_topic_for_send(m.topic, TRANSACTION)
        await self._ensure_system_topic(HALF_TOPIC)
        await self._ensure_system_topic(OP_TOPIC)
        msgs = sends.convert_send(cfg, [m], born_host, TRANSACTION, "a half message of a transaction")
        if extra_properties:
            msgs[0].properties.update(extra_properties)
        half = make_half(msgs[0], group, node.config.cluster.name)
        results = await sends.put_internal([half])
        node.metrics.record_put(HALF_TOPIC, 1, len(half.body))
        node.metrics.record_transaction(node.metrics.half_messages_in, m.topic)
        return results[0], half

    # ------------------------------------------------------------------ outcome
    @rpc_handler("EndTransaction")
    async def EndTransaction(self, request: pb.EndTransactionRequest, context):  # noqa: N802
        result = await self.end(request)
        return pb.EndTransactionResponse(result=result) if result is not None else pb.EndTransactionResponse()

    async def end(self, request: pb.EndTransactionRequest) -> pb.SendResult | None:
        """Commit or roll back one transaction: the one outcome path of raftmq's EndTransaction, its check
        answers and RocketMQ 5's EndTransaction (node.rocketmq5.producer)."""
        node = self.node
        check_group_name(request.producer_group)
        if not request.transaction_id:
            raise invalid("the transaction id is empty; pass the one the half message's send (or the check) returned")
        resolution = request.resolution
        if resolution not in (pb.TX_COMMIT, pb.TX_ROLLBACK):
            raise invalid(f"resolution {pb.TransactionResolution.Name(resolution)} cannot end a transaction; use "
                          "TX_COMMIT or TX_ROLLBACK")
        try:
            (host, port), physical_offset = decode_message_id(request.msg_id.strip().upper())
        except (ValueError, TypeError, StoreError):
            raise invalid(f"{request.msg_id!r} is not an offset message id; pass the message id the half message's "
                          "send (or the check) returned") from None
        node.check_group(node.groups.of_store_host(host, port))  # issue 37: the half's group ends it (relayed)
        node.check_leader()
        tx = request.transaction_id
        entry = self._end_locks.get(tx)
        if entry is None:
            entry = self._end_locks[tx] = [asyncio.Lock(), 0]
        entry[1] += 1  # callers holding or waiting for this lock; the last one out removes it
        try:
            async with entry[0]:
                return await self._end_locked(request, physical_offset)
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._end_locks[tx]

    async def _end_locked(self, request: pb.EndTransactionRequest, physical_offset: int) -> pb.SendResult | None:
        node = self.node
        resolution = request.resolution
        try:
            half = await node.run_blocking(self._log.open_half, physical_offset, request.transaction_id,
                                           request.producer_group)
        except TransactionStateError as e:
            if e.kind == "finished" and e.outcome == (COMMITTED if resolution == pb.TX_COMMIT else ROLLED_BACK):
                return self._repeated_outcome(e)
            code = {"not_found": grpc.StatusCode.NOT_FOUND,
                    "busy": grpc.StatusCode.UNAVAILABLE}.get(e.kind, grpc.StatusCode.FAILED_PRECONDITION)
            message = str(e)
            if e.kind == "finished":
                asked = "a commit" if resolution == pb.TX_COMMIT else "a rollback"
                message += f"; {asked} cannot change a finished transaction"
            raise RpcError(code, message) from None
        op = op_message(half.queue_offset, node.config.store_host)
        msgs = [commit_message(half), op] if resolution == pb.TX_COMMIT else [op]
        results = await self.sends.put_internal(msgs)  # one batch: commit and op, atomically
        if resolution != pb.TX_COMMIT:
            node.metrics.record_transaction(node.metrics.rollback_messages, real_topic(half))
            return None
        node.metrics.record_put(msgs[0].topic, 1, len(msgs[0].body))
        node.metrics.record_transaction(node.metrics.commit_messages, msgs[0].topic)
        return convert.send_result(results[0], msgs[0])

    @staticmethod
    def _repeated_outcome(e: TransactionStateError) -> pb.SendResult | None:
        """The same outcome asked again (an SDK retry after UNKNOWN, a check answer racing an explicit end):
        success without a second put; a commit answers where the first one stored the message."""
        log.info("%s; the same outcome asked again is answered as success", e)
        if e.outcome != COMMITTED:
            return None
        if e.committed is None:  # committed, but retention removed the record: nothing to point at
            return pb.SendResult(note="already committed; the committed record is no longer kept")
        return convert.send_result(e.committed, e.committed, duplicate=True)  # the first commit's, nothing stored

    # ------------------------------------------------------------------ producers' check streams
    @rpc_handler("CheckTransactions", long_lived=True)
    async def CheckTransactions(self, request_iterator, context):  # noqa: N802
        self.node.check_leader()
        try:
            first = await asyncio.wait_for(request_iterator.__anext__(), REGISTER_TIMEOUT_SECONDS)
        except (TimeoutError, StopAsyncIteration):
            return
        if first.WhichOneof("kind") != "register_group" or not first.register_group:
            raise invalid("the transaction-check stream must start by registering the producer group")
        check_group_name(first.register_group)
        checker = _Checker(first.register_group)
        self._checkers.setdefault(checker.group, []).append(checker)
        log.info("transaction checker registered for producer group %s (%s)", checker.group, context.peer())
        answers = asyncio.get_running_loop().create_task(self._read_answers(request_iterator, checker))
        try:
            while True:
                item = await checker.queue.get()
                if item is None:
                    break
                yield item
        finally:
            answers.cancel()
            group = self._checkers.get(checker.group, [])
            if checker in group:
                group.remove(checker)
        if checker.close_reason is not None:
            raise checker.close_reason

    async def _read_answers(self, request_iterator, checker: _Checker) -> None:
        try:
            async for req in request_iterator:
                if req.WhichOneof("kind") != "check_answer":
                    continue
                answer = req.check_answer
                if answer.resolution == pb.TX_UNKNOWN:
                    continue  # checked again after the next timeout
                if not answer.producer_group:
                    answer.producer_group = checker.group
                try:
                    await self.end(answer)
                except Exception as exc:  # an answer for a finished transaction, or leadership moved
                    err = to_rpc_error(exc)
                    log.info("check answer for transaction %s not applied: %s", answer.transaction_id,
                             err.message if err else exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            pass  # the stream broke: the producer reconnects
        finally:
            checker.queue.put_nowait(None)

    def _close_checkers(self) -> None:
        leader = self.node.write_path.leader() if self.node.write_path is not None else None
        reason = RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                          f"node {self.node.node_id} is not the leader any more; reconnect to the leader",
                          leader=leader.grpc_address if leader is not None and leader.grpc_address else None)
        if self.node.stopping:
            reason = RpcError(grpc.StatusCode.UNAVAILABLE, f"node {self.node.node_id} is shutting down")
        for group in self._checkers.values():
            for c in group:
                c.close_reason = reason
                c.queue.put_nowait(None)

    def add_checker(self, checker) -> None:
        """Register another kind of checker (issue 13: a RocketMQ 5 producer's Telemetry stream): an object with
        ``group``, ``close_reason`` and ``queue.put_nowait(TransactionCheck | None)``; None means "this node does
        not lead any more"."""
        self._checkers.setdefault(checker.group, []).append(checker)

    def remove_checker(self, checker) -> None:
        group = self._checkers.get(checker.group, [])
        if checker in group:
            group.remove(checker)

    def _checker_for(self, group: str) -> _Checker | None:
        group_checkers = self._checkers.get(group)
        if not group_checkers:
            return None
        return group_checkers[next(self._pick) % len(group_checkers)]

    # ------------------------------------------------------------------ the check loop (leader only)
    def _leads(self) -> bool:
        node = self.node
        # writable = leader with its election barrier applied: the replicated progress in the store is current
        return node.serving and node.write_path is not None and node.write_path.is_writable()

    async def _check_loop(self) -> None:
        node = self.node
        last_pass = 0.0
        while not node.stopping:
            await asyncio.sleep(IDLE_POLL_SECONDS)
            if not self._leads():
                self._tlog = None
                leader = node.write_path.leader() if node.write_path is not None else None
                # another leader (or none): producers reconnect there; while this node still leads but is not
                # writable yet (its election barrier), their streams stay open
                if (leader is None or leader.id != node.node_id) and any(self._checkers.values()):
                    self._close_checkers()
                continue
            interval = node.store_config.transaction_check_interval_ms / 1000.0
            if time.monotonic() - last_pass < interval:
                continue
            last_pass = time.monotonic()
            try:
                await self.check_once()
            except Exception as exc:  # no leader for a moment, a stopping write path: try again next pass
                err = to_rpc_error(exc)
                log.warning("transaction check pass failed: %s", err.message if err else repr(exc))
        self._close_checkers()

    async def check_once(self) -> int:
        """One pass over the half queue: renew + check, or discard, each due half message; returns how many."""
        total = 0
        while True:  # window after window until the rest of the queue is not due yet
            n, more = await self._check_window()
            total += n
            if not more or not self._leads():
                return total

    async def _check_window(self) -> tuple[int, bool]:
        node = self.node
        cfg = node.store_config
        scan = await node.run_blocking(self._log.scan, int(time.time() * 1000), cfg.transaction_timeout_ms)
        if not scan.due and scan.half_offset == scan.half_from and scan.op_offset == scan.op_from:
            return 0, False
        puts, checks = [], []
        now_ms = int(time.time() * 1000)
        reserved_ms = cfg.file_reserved_time * 3_600_000
        discarded: dict[str, int] = {}
        for half in scan.due:
            times = check_times(half)
            # RocketMQ's needDiscard / needSkip: too many checks, or older than the commit log is kept
            if times >= cfg.transaction_check_max or now_ms - half.born_timestamp > reserved_ms:
                log.warning("transaction %s of group %s discarded to %s after %d checks (born %d ms ago)",
                            half.uniq_key, producer_group(half), CHECK_MAX_TOPIC, times, now_ms - half.born_timestamp)
                await self._ensure_system_topic(CHECK_MAX_TOPIC)
                puts.append(discarded_message(half))
                checks.append(None)
                discarded[real_topic(half)] = discarded.get(real_topic(half), 0) + 1
                continue
            # every attempt spends one check, asked or not (RocketMQ's needDiscard counts before sendCheckMessage
            # finds no channel): with no producer of the group connected, the message still reaches
            # TRANS_CHECK_MAX_TIME_TOPIC after transaction_check_max passes instead of staying open forever
            puts.append(renewed_half(half, times + 1))
            checks.append((self._checker_for(producer_group(half)), half, times + 1))
        if puts:
            results = await self.sends.put_internal(puts)
            sent: dict[tuple[str, str], int] = {}
            for r, check in zip(results, checks, strict=True):
                if check is None:
                    continue
                checker, half, times = check
                key = (producer_group(half), "true" if checker is not None else "false")
                sent[key] = sent.get(key, 0) + 1
                if checker is None:
                    continue
                checker.queue.put_nowait(pb.TransactionCheck(
                    transaction_id=half.uniq_key or "", msg_id=r.msg_id, message=convert.message_view(half),
                    check_times=times))
            metrics = node.metrics
            for (group, was_sent), n in sent.items():
                metrics.record_transaction(metrics.transaction_checks, group, was_sent, count=n)
                if was_sent == "false":
                    log.warning("%d open transaction(s) of producer group %s due for a check, but no producer of "
                                "the group is connected: each spent one of its %d checks", n, group,
                                cfg.transaction_check_max)
            for topic, n in discarded.items():
                metrics.record_transaction(metrics.transaction_discarded, topic, count=n)
        wp = node.write_path
        if scan.half_offset != scan.half_from:
            await node.run_blocking(wp.commit_offsets, SYSTEM_GROUP, HALF_TOPIC, {0: scan.half_offset})
        if scan.op_offset != scan.op_from:
            await node.run_blocking(wp.commit_offsets, SYSTEM_GROUP, OP_TOPIC, {0: scan.op_offset})
        return len(scan.due), scan.more

    async def _ensure_system_topic(self, name: str) -> None:
        """Register a transaction system topic on first use, as RocketMQ's selectTopicConfig /
        createTopicOfTranCheckMaxTime do (1 queue, perm READ|WRITE), through the write path so every member's
        topics.json gets it from the same replicated command."""
        node = self.node
        if node.topic_config(name) is None:
            try:
                await node.run_blocking(node.write_path.create_topic,
                                        TopicConfig(topic_name=name, read_queue_nums=1, write_queue_nums=1))
            except StoreError:
                pass  # created concurrently
