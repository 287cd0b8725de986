"""The broker process: store + write path + gRPC services + HTTP health, and its lifecycle.

Start order: HTTP (so probes answer at once), gRPC (answers UNAVAILABLE "starting" instead of refusing
connections), then the store is opened (recovery may take a while) off the event loop, the write path starts, and
the node turns ready once the reput thread has caught up with the commit log (and, when replicated, a leader is
known). SIGTERM: stop taking requests, release parked long polls, let in-flight requests finish (bounded by
``node.shutdown_grace_seconds``), stop the write path (flushing pending group commits), shut the store down
(flush, remove the abort file), exit 0.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

from node.admin import AdminService
from node.config import NodeConfig
from node.consumer_groups import ConsumerGroupRegistry
from node.convert import StoreMessageBuilder
from node.errors import RpcError, not_found, unavailable
from node.http_server import HealthServer
from node.long_poll import LongPollRegistry
from node.messaging import MAX_PULL_BYTES, MessagingService
from node.metrics import BrokerMetrics, ConsumerGroupCollector, RaftCollector, StoreCollector
from node.validation import PERM_READ, PERM_WRITE, is_system_topic
from replication import LocalWritePath, RaftWritePath
from store import StoreError, StoreLockedError
from store.integrity import CorruptionError

log = logging.getLogger(__name__)

READ_THREADS = 4
ROLE_POLL_SECONDS = 1.0
AUTO_CREATE_QUEUE_NUMS = 4  # as CreateTopic's default
DRAIN_QUIET_SECONDS = 0.2  # SIGTERM: no new call for this long before the gRPC server stops
PEER_REPAIR_RETRY_S = 5.0  # a damaged member asks its peers again this often while none has the range


class Broker:
    """One node. Handlers reach the store, write path, metrics and long-poll registry through it."""

    def __init__(self, cfg: NodeConfig):
        self.config = cfg
        self.node_id = cfg.node.id
        self.metrics = BrokerMetrics(cfg.cluster.name, cfg.node.id)
        self.store_config = cfg.store_config()
        self.converter = StoreMessageBuilder(
            max_message_size=self.store_config.max_message_size,
            uniq_key_ip=cfg.store_host[0],
        )
        self.store: Any = None
        self.write_path: Any = None
        self.long_polls: LongPollRegistry | None = None
        self.consumer_groups = ConsumerGroupRegistry()  # live group members; meaningful on the leader only
        self.serving = False
        self.rpcs_in_flight = 0
        self._live_repairs: set[tuple[int, int]] = set()  # damaged ranges a read found, being fetched from peers
        self.last_rpc_started = 0.0
        self._phase = "starting: opening the store"
        self._stopping = False  # asked to stop: start() and background loops give up
        self._repair_lock = threading.Lock()
        self._repairing = False  # a repair of scrubber-found commit-log damage from peers is running
        self._stopped = False
        self._store_open = False
        self._write_path_started = False
        self.schedule: Any = None  # store.schedule.ScheduleMessageService: delivers delayed messages while leading
        self._pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="raftmq-read")
        self._grpc: grpc.aio.Server | None = None
        self._http: HealthServer | None = None
        self._labeler: Any = None
        self.grpc_port = 0
        self.metrics.add_collector(StoreCollector(cfg.cluster.name, cfg.node.id, self._store_stats,
                                                  lambda: self.readiness()[0]))
        self.metrics.add_collector(RaftCollector(cfg.cluster.name, cfg.node.id, lambda: self.write_path))
        self.metrics.add_collector(ConsumerGroupCollector(cfg.cluster.name, cfg.node.id, self.consumer_groups,
                                                          self._is_leader))

    # ------------------------------------------------------------------ state seen by handlers and probes
    def readiness(self) -> tuple[bool, str]:
        """``/ready``: serving and a leader is known (reads still work during an election; writes do not)."""
        if not self.serving:
            return False, f"not ready: {self._phase}"
        if self.write_path.leader() is None:
            return False, "not ready: no leader (election in progress or no majority reachable)"
        disk = self.store.disk.reason() if self.store is not None else ""
        if disk:  # reads still work; writes are refused with this reason (RESOURCE_EXHAUSTED / UNAVAILABLE)
            return False, f"not ready: {disk}"
        return True, "ready"

    def leader_term(self) -> int:
        """The Raft term (0 for a single node): it changes exactly when an election happened."""
        term = getattr(self.write_path, "term", None)
        return int(term()) if callable(term) else 0

    def _is_leader(self) -> bool:
        leader = self.write_path.leader() if self.write_path is not None else None
        return leader is not None and leader.id == self.node_id

    def check_serving(self) -> None:
        if not self.serving:
            raise unavailable(f"node {self.node_id} is not ready ({self._phase}); retry shortly or use another member")

    def check_leader(self) -> None:
        leader = self.write_path.leader()
        if leader is None:
            raise unavailable("no leader right now (election in progress); retry in a second")
        if leader.id != self.node_id:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"this node ({self.node_id}) is not the leader; the leader is {leader.id} at "
                           f"{leader.grpc_address or 'an unknown address'}", leader=leader.grpc_address or None)

    async def run_blocking(self, fn, *args):
        """Run a store call on the read pool so a slow disk never stalls the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))

    def _store_stats(self) -> dict:
        if self.store is None:
            raise RuntimeError("store not open")
        return self.store.stats()

    # ------------------------------------------------------------------ topics
    def topic_config(self, name: str):
        return self.store.topics.get(name)

    def existing_topic(self, name: str):
        cfg = self.topic_config(name)
        if cfg is None:
            leader = self.write_path.leader()
            if leader is not None and leader.id != self.node_id and leader.grpc_address:
                # a follower's table lags the leader's by a moment: a topic created just now is not here yet
                raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"topic {name!r} is not on this member ({self.node_id}) yet; the leader {leader.id} "
                               f"at {leader.grpc_address} has the current topic table", leader=leader.grpc_address)
            raise not_found(f"topic {name!r} does not exist; create it first (AdminService.CreateTopic, "
                            f"`raftmq topic create {name}`)")
        return cfg

    async def writable_topic(self, name: str):
        cfg = self.topic_config(name)
        if cfg is None and self.config.node.auto_create_topics and not is_system_topic(name):
            from store.topic_config import TopicConfig

            try:
                await self.run_blocking(self.write_path.create_topic,
                                        TopicConfig(topic_name=name, read_queue_nums=AUTO_CREATE_QUEUE_NUMS,
                                                    write_queue_nums=AUTO_CREATE_QUEUE_NUMS))
            except StoreError:
                pass  # created concurrently by another request
            cfg = self.topic_config(name)
        cfg = cfg or self.existing_topic(name)
        self.store.check_writable()  # a full or failed disk refuses at once, before anything is queued
        if not cfg.perm & PERM_WRITE:
            raise RpcError(grpc.StatusCode.PERMISSION_DENIED,
                           f"topic {name!r} is not writable (perm {cfg.perm}); update it with perm 6 (read-write)")
        return cfg

    def readable_topic(self, name: str):
        cfg = self.existing_topic(name)
        if not cfg.perm & PERM_READ:
            raise RpcError(grpc.StatusCode.PERMISSION_DENIED,
                           f"topic {name!r} is not readable (perm {cfg.perm}); update it with perm 6 (read-write)")
        return cfg

    @staticmethod
    def check_read_queue(cfg, queue_id: int) -> None:
        n = cfg.read_queue_nums
        if not 0 <= queue_id < n:
            raise not_found(f"topic {cfg.topic_name!r} has {n} read queues (0..{n - 1}); queue {queue_id} does not "
                            "exist")

    def queue_offsets(self, topic: str, nqueues: int) -> list[pb.QueueOffsets]:
        st = self.store
        out = []
        for qid in range(nqueues):
            lo, hi = st.min_offset_in_queue(topic, qid), st.max_offset_in_queue(topic, qid)
            last_ts = 0
            if hi > lo:
                got = st.get_messages(topic, qid, hi - 1, 1, 1 << 30, None)
                if got.messages:
                    last_ts = got.messages[0].store_timestamp
            out.append(pb.QueueOffsets(queue_id=qid, min_offset=lo, max_offset=hi, last_store_timestamp=last_ts))
        return out

    def group_offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.store.consumer_offsets.offsets(group, topic))

    # ------------------------------------------------------------------ lifecycle
    def _make_write_path(self):
        """Raft when cluster.members lists the group, otherwise the local single-node path."""
        cfg = self.config
        if cfg.members:
            return RaftWritePath(self.store, cfg)
        return LocalWritePath(self.store, cfg.cluster.name, cfg.store_host, node_id=cfg.node.id,
                              grpc_address=cfg.advertised_address, linger_s=0.0)

    async def start(self) -> None:
        """Bring the node up; returns once it serves (raises when it cannot start)."""
        await self.start_endpoints()
        await self.open()

    async def start_endpoints(self) -> None:
        """HTTP and gRPC listen; until open() finishes they answer "not ready" (probes 503, RPCs UNAVAILABLE)."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        self.long_polls = LongPollRegistry(loop)
        http = cfg.http_listen
        try:
            self._http = HealthServer(http.host, http.port, self.metrics.registry, self.readiness)
        except OSError as e:
            raise RuntimeError(f"cannot listen for HTTP on {http}: {e.strerror or e} (port in use?)") from None
        self._http.start()
        self._grpc = self._make_grpc_server()
        await self._grpc.start()
        log.info("node %s: gRPC on %s, HTTP on %s", cfg.node.id, cfg.node.grpc_listen, cfg.node.http_listen)

    async def open(self) -> None:
        """Open (recover) the store, start the write path, wait until caught up; then serve."""
        cfg = self.config
        log.info("node %s: opening store %s", cfg.node.id, cfg.node.data_dir)
        self._phase = "recovering the store"
        from store.message_store import MessageStore

        self.store = MessageStore(self.store_config)
        self.store.disk.member = cfg.node.id  # errors say "disk full on <member>"
        try:
            await self.run_blocking(self.store.open)
        except CorruptionError as exc:
            if not cfg.members:
                raise  # single node: refuse; the message names the damage and `raftmq store repair`
            if not await self._repair_from_peers(exc):
                return
        self._store_open = True
        self.store.add_arrival_listener(self.long_polls.on_arrival)
        if cfg.members:  # the scrubber's commit-log findings are repaired from a healthy peer while serving
            self.store.add_commit_log_damage_listener(self._on_commit_log_damage)
        self.write_path = self._make_write_path()
        await self.run_blocking(self.write_path.start)
        self._write_path_started = True
        self._start_schedule()
        await self.run_blocking(self._start_labeler)
        await self._wait_caught_up()
        if self._stopping:
            return
        self.serving = True
        self._phase = "ready"
        log.info("node %s ready: commit log [%d, %d), gRPC clients use %s", cfg.node.id,
                 self.store.commit_log_min_offset, self.store.commit_log_max_offset, cfg.advertised_address)

    async def _repair_from_peers(self, exc: CorruptionError) -> bool:
        """Replicated member whose commit log is damaged: fetch the ranges from peers, verify, write them back,
        re-open re-dispatching from the first one. Not ready (with the reason) until then; False if stopped."""
        from replication.peer_repair import repair_from_peers
        from replication.peers import Peers
        from replication.write_path import MemberInfo

        cfg = self.config
        peers = Peers([MemberInfo(m.id, m.raft, m.grpc) for m in cfg.members], cfg.node.id, cfg.cluster.secret)
        file_size = self.store_config.mapped_file_size_commit_log
        try:
            while not self._stopping:
                damage = exc.records
                desc = "; ".join(r.describe() for r in damage[:5])
                self._phase = f"commit log damaged ({desc}): repairing from peers"
                log.error("node %s: commit log damaged, repairing from peers before serving: %s", self.node_id, desc)
                outcome = await self.run_blocking(repair_from_peers, peers, self.store_config.commit_log_dir,
                                                  file_size, damage)
                if outcome.complete:
                    self.store.redispatch_from_hint = min(r.start for r in damage)
                    try:
                        await self.run_blocking(self.store.open)
                    except CorruptionError as again:  # more damage behind the first (e.g. a missing segment)
                        exc = again
                        continue
                    log.warning("node %s: commit log repaired from peers (%s)", self.node_id,
                                ", ".join(f"[{r.start}, {r.end}) from {mid}" for r, mid in outcome.repaired))
                    return True
                why = "; ".join(f"[{r.start}, {r.end}) of {r.path}: {reason}" for r, reason in outcome.unrepaired)
                self._phase = (f"commit log damaged and no healthy peer has the range yet ({why}); retrying every "
                               f"{PEER_REPAIR_RETRY_S:.0f}s")
                log.error("node %s not ready: %s", self.node_id, self._phase)
                for _ in range(int(PEER_REPAIR_RETRY_S / 0.1)):
                    if self._stopping:
                        break
                    await asyncio.sleep(0.1)
            return False
        finally:
            peers.close()

    def _on_commit_log_damage(self, records: list) -> None:
        """Scrubber thread: damaged ranges of sealed segments; replace them with a peer's verified copy in the
        background, as a damaged read does (one repair at a time; a range still damaged is reported again by the
        next pass and retried then)."""
        with self._repair_lock:
            if self._repairing:
                return
            self._repairing = True
        threading.Thread(target=self._repair_while_serving, args=(list(records),), name="peer-repair",
                         daemon=True).start()

    def _repair_while_serving(self, records: list) -> None:
        """``repair_range_live`` for each range (reads of it answer DATA_LOSS meanwhile), then let the store
        verify the ranges and re-check the consume-queue units derived from them."""
        from replication.peer_repair import PeerRepairError, repair_range_live

        repaired = []
        try:
            peers = getattr(self.write_path, "peers", None)
            for r in records:
                if peers is None or (r.start, r.end) in self._live_repairs:
                    continue
                try:
                    mid = repair_range_live(peers, self.store, r)
                    repaired.append(r)
                    log.warning("node %s: scrubber-found damage [%d, %d) replaced with %s's copy", self.node_id,
                                r.start, r.end, mid)
                except PeerRepairError as e:
                    log.error("node %s: commit-log range [%d, %d) stays damaged: %s", self.node_id, r.start,
                              r.end, e)
            if repaired:
                self.store.commit_log_repaired(repaired)
        except Exception:
            log.exception("node %s: repair from peers failed", self.node_id)
        finally:
            with self._repair_lock:
                self._repairing = False

    def on_corrupt_read(self, record) -> str:
        """A read met a damaged record (its bytes were not returned). Replicated: fetch the range from a peer in
        the background; the caller's error says to retry. Returns that hint ("" on a single node)."""
        if not self.config.members or self.write_path is None or not hasattr(self.write_path, "peers"):
            return ""
        key = (record.start, record.end)
        if key not in self._live_repairs:
            self._live_repairs.add(key)
            asyncio.get_running_loop().create_task(self._live_repair(record))
        return f"member {self.node_id} is repairing it from a peer: retry in a moment"

    async def _live_repair(self, record) -> None:
        from replication.peer_repair import PeerRepairError, repair_range_live

        try:
            mid = await self.run_blocking(repair_range_live, self.write_path.peers, self.store, record)
            log.warning("node %s: damaged commit-log range [%d, %d) replaced with %s's copy", self.node_id,
                        record.start, record.end, mid)
        except PeerRepairError as e:
            log.error("node %s: damaged commit-log range [%d, %d) of %s (%s) could not be repaired: %s", self.node_id,
                      record.start, record.end, record.path, record.reason, e)
        except Exception:
            log.exception("node %s: repairing commit-log range [%d, %d) failed", self.node_id, record.start,
                          record.end)
        finally:
            self._live_repairs.discard((record.start, record.end))

    async def _wait_caught_up(self) -> None:
        """Ready = reput has dispatched everything recovered, and a leader is known."""
        last_log = 0.0
        while not self._stopping:
            behind = self.store.dispatch_behind_bytes()
            leader = self.write_path.leader()
            if behind == 0 and leader is not None:
                return
            self._phase = (f"dispatching recovered messages ({behind} bytes behind)" if behind
                           else "waiting for a leader")
            if time.monotonic() - last_log > 5:
                log.info("node %s not ready yet: %s", self.node_id, self._phase)
                last_log = time.monotonic()
            await asyncio.sleep(0.02)

    def _make_grpc_server(self) -> grpc.aio.Server:
        # Requests: room for a maximal message (or batch) and then some, so an oversized body reaches our check
        # and gets a message that names the limit. Responses: a pull of MAX_PULL_BYTES plus one maximal message.
        max_message = self.store_config.max_message_size
        server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", 2 * max_message + (1 << 20)),
            ("grpc.max_send_message_length", MAX_PULL_BYTES + 2 * max_message + (1 << 20)),
            ("grpc.so_reuseport", 0),
        ])
        pb_grpc.add_MessagingServiceServicer_to_server(MessagingService(self), server)
        pb_grpc.add_AdminServiceServicer_to_server(AdminService(self), server)
        from node.transaction_service import TransactionService

        self.transactions = TransactionService(self)  # its check loop acts while this node leads
        pb_grpc.add_TransactionServiceServicer_to_server(self.transactions, server)
        # peers' catch-up and sync-durability calls (replication owns it; answers UNAVAILABLE until Raft runs)
        from raftmq.v1 import replica_pb2_grpc

        from replication.replica_service import ReplicaServicer

        replica_pb2_grpc.add_ReplicaServiceServicer_to_server(
            ReplicaServicer(lambda: self.write_path, self.config.cluster.secret, self.readiness), server)
        listen = str(self.config.grpc_listen)
        try:
            self.grpc_port = server.add_insecure_port(listen)
        except RuntimeError as e:
            raise RuntimeError(f"cannot listen for gRPC on {listen}: {e} (port in use?)") from None
        return server

    def _start_schedule(self) -> None:
        """Delayed delivery runs on every member but acts only while this one accepts writes (Raft: leader with
        its barrier applied, so the replicated progress is current); it re-puts through the write path."""
        from store.schedule import ScheduleMessageService

        wp = self.write_path
        self.schedule = ScheduleMessageService(self.store, wp.put, wp.update_delay_offsets, wp.is_writable)
        self.schedule.start()

    def _start_labeler(self) -> None:
        mode = self.config.kubernetes.role_label
        if mode == "false" or (mode == "auto" and not os.environ.get("KUBERNETES_SERVICE_HOST")):
            return  # not in a pod: skip importing the Kubernetes client (a second of start-up)
        from node.kube import RoleLabeler

        self._labeler = RoleLabeler.from_environment(mode)
        if self._labeler is not None:
            self._labeler.start()

    async def watch_role(self) -> None:
        """Mirror leadership into the pod label (when on Kubernetes) once a second; a leader whose disk failed
        with an I/O error hands leadership to a healthy member (it takes no writes any more)."""
        handed_off = False
        while not self._stopping:
            if self._labeler is not None and self.write_path is not None:
                leader = self.write_path.leader()
                role = "unknown" if leader is None else "leader" if leader.id == self.node_id else "follower"
                self._labeler.set_role(role)
            if (not handed_off and self.config.members and self.store is not None and self.write_path is not None
                    and self.store.disk.io_error_reason() and self._is_leader()):
                handed_off = True
                log.error("node %s: handing leadership away after an I/O error on its disk", self.node_id)
                try:
                    await asyncio.to_thread(self.write_path.transfer_leadership, None)
                except Exception as e:  # no caught-up follower: stay, refusing writes with the reason
                    log.error("node %s: leadership hand-off after the I/O error failed: %s", self.node_id, e)
                    handed_off = False
            await asyncio.sleep(ROLE_POLL_SECONDS)

    def request_stop(self) -> None:
        """Make a running start() give up at its next step (SIGTERM during recovery)."""
        self._stopping = True

    async def _drain(self, grace: float) -> None:
        """Answer UNAVAILABLE until in-flight calls are done and callers have noticed (no call for a moment).

        Why before the gRPC server's own stop: a call that reaches gRPC while its server shuts down is CANCELLED
        without running, which a client cannot tell from a lost reply; an UNAVAILABLE from us is unambiguous.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while loop.time() < deadline:
            if self.rpcs_in_flight == 0 and time.monotonic() - self.last_rpc_started >= DRAIN_QUIET_SECONDS:
                return
            await asyncio.sleep(0.01)

    async def stop(self) -> bool:
        """Graceful stop, after start() has returned or failed; False when a step failed (logged)."""
        if self._stopped:
            return True
        self._stopped = self._stopping = True
        self.serving = False
        self._phase = "shutting down"
        log.info("node %s shutting down", self.node_id)
        if self.long_polls is not None:
            self.long_polls.close()
        if self._grpc is not None:
            grace = self.config.node.shutdown_grace_seconds
            await self._drain(grace)
            await self._grpc.stop(grace)
        ok = True
        # Each step runs even if an earlier one failed: a store that is not shut down keeps its abort file,
        # so the next start recovers it as after a crash.
        for what, step in (("delayed delivery", self.schedule.shutdown if self.schedule is not None else None),
                           ("write path", self.write_path.stop if self._write_path_started else None),
                           ("role labeler", self._labeler.stop if self._labeler is not None else None),
                           ("store", self.store.shutdown if self._store_open else None)):
            if step is None:
                continue
            try:
                await self.run_blocking(step)
            except Exception:
                log.exception("node %s: stopping the %s failed", self.node_id, what)
                ok = False
        if self._http is not None:
            self._http.stop()
        self._pool.shutdown(wait=True)
        log.info("node %s stopped%s", self.node_id, "" if ok else " (with errors, see above)")
        return ok


async def serve(cfg: NodeConfig) -> int:
    """Run until SIGTERM/SIGINT; the exit code of the process."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    broker = Broker(cfg)
    starting = asyncio.ensure_future(broker.start())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # stop requested while starting: let start() reach a safe point first
        broker.request_stop()
        await asyncio.wait({starting})
    code = 0
    if starting.exception() is not None:
        exc = starting.exception()
        if isinstance(exc, StoreLockedError):
            log.error("cannot start: %s (is another node using %s?)", exc, cfg.node.data_dir)
        else:
            log.error("cannot start: %s", exc, exc_info=not isinstance(exc, (RuntimeError, StoreError, OSError)))
        code = 1
    elif not stopped.done():
        role = asyncio.ensure_future(broker.watch_role())
        await stopped
        role.cancel()
    stopped.cancel()
    if not await broker.stop():
        code = 1
    return code


def run_broker(cfg: NodeConfig) -> int:
    logging.basicConfig(level=cfg.node.log_level,
                        format="%(asctime)s %(levelname)s %(name)s [" + cfg.node.id + "] %(message)s")
    return asyncio.run(serve(cfg))
