"""The broker process's composition root: builds the core (node/core.py) and the services around it, registers
them on gRPC and HTTP, and owns their life cycle. No service imports this module.

Start order: HTTP (so probes answer at once), gRPC (answers UNAVAILABLE "starting" instead of refusing
connections), then the store is opened (recovery may take a while) off the event loop, the write path starts, and
the node turns ready once the reput thread has caught up with the commit log (and, when replicated, a leader is
known). SIGTERM: a leader hands leadership to a caught-up member first, then the node stops taking requests,
releases parked long polls, lets in-flight requests finish (bounded by ``node.shutdown_grace_seconds``), stops the
write path (flushing pending group commits), shuts the store down (flush, remove the abort file), exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from raftmq.node.admin import AdminService
from raftmq.node.config import NodeConfig
from raftmq.node.console import Console
from raftmq.node.core import BrokerCore
from raftmq.node.http_server import HealthServer
from raftmq.node.log_format import set_term_source
from raftmq.node.long_poll import LongPollRegistry
from raftmq.node.messaging import MessagingService
from raftmq.node.metrics import ConsumerGroupCollector, RaftCollector, StoreCollector
from raftmq.node.networks import NetworkList
from raftmq.node.pop_metrics import PopCollector
from raftmq.node.read_path import MAX_PULL_BYTES, ReadPath
from raftmq.node.receive_path import ReceivePath
from raftmq.node.send_path import SendPath
from raftmq.replication import LocalWritePath, RaftWritePath
from raftmq.replication.dedup_window import DedupWindow, TopicWindows
from raftmq.replication.deduplicator import Deduplicator
from raftmq.store import StoreError, StoreLockedError
from raftmq.store.integrity import CorruptionError
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from raftmq.node.kube import RoleLabeler
    from raftmq.node.tls import CertificateFiles
    from raftmq.node.transaction_service import TransactionService
    from raftmq.replication.anti_entropy import AntiEntropy
    from raftmq.store.schedule import ScheduleMessageService
    from raftmq.store.timer import TimerMessageService

log = logging.getLogger(__name__)

ROLE_POLL_SECONDS = 1.0
DRAIN_QUIET_SECONDS = 0.2  # SIGTERM: no new call for this long before the gRPC server stops
PEER_REPAIR_RETRY_S = 5.0  # a damaged member asks its peers again this often while none has the range


class Broker:
    """One node's composition root: builds the core and the services around it, registers them on gRPC and
    HTTP, and owns their life cycle (start order and graceful stop: the module docstring). Services get the
    ``core`` (node/core.py), never this object."""

    def __init__(self, cfg: NodeConfig):
        self.config = cfg
        self.core = core = BrokerCore(cfg)
        # the one write, read and receive paths every API shares (node/send_path.py, read_path.py, receive_path.py)
        self.sends = SendPath(core)
        self.reads = ReadPath(core)
        self.receives = ReceivePath(core, self.reads)
        self.node_id = cfg.node.id
        self._repair_lock = threading.Lock()
        self._repairing = False  # a repair of found commit-log damage from peers is running
        self._stopped = False
        self._store_open = False
        self.schedule: ScheduleMessageService | None = None  # delivers delayed messages while leading
        self.timer: TimerMessageService | None = None  # delivers timer messages while leading
        self.anti_entropy: AntiEntropy | None = None  # on a replicated member
        self.transactions: TransactionService | None = None
        self._grpc: grpc.aio.Server | None = None
        self._http: HealthServer | None = None
        self.console: Console | None = None
        self._labeler: RoleLabeler | None = None  # the pod's role label, on Kubernetes
        self.grpc_port = 0
        self.certificates: CertificateFiles | None = None  # when TLS is on
        self._http_proxies = NetworkList(cfg.security.trusted_http_proxies)
        metrics = core.metrics
        metrics.add_collector(StoreCollector(cfg.cluster.name, cfg.node.id, self._store_stats,
                                             lambda: core.readiness()[0]))
        metrics.add_collector(RaftCollector(cfg.cluster.name, cfg.node.id, lambda: core.write_path))
        set_term_source(core.leader_term)  # JSON log lines carry the term
        metrics.add_collector(ConsumerGroupCollector(cfg.cluster.name, cfg.node.id, core.consumer_groups,
                                                     core.is_leader))
        metrics.add_collector(PopCollector(cfg.cluster.name, cfg.node.id, lambda: core.pop))

    @property
    def stop_process(self) -> Callable[[], None]:
        return self.core.stop_process

    @stop_process.setter
    def stop_process(self, fn: Callable[[], None]) -> None:
        self.core.stop_process = fn

    def _store_stats(self) -> dict:
        if self.core.store is None:
            raise RuntimeError("store not open")
        stats = self.core.store.stats()
        if self.timer is not None:
            stats["timer_messages_pending"] = self.timer.pending()
            stats["timer_messages_delivered"] = self.timer.delivered
        if self.anti_entropy is not None:
            stats.update(self.anti_entropy.stats())
        return stats

    # ------------------------------------------------------------------ lifecycle
    def _make_write_path(self):
        """Raft when cluster.members lists the group, otherwise the local single-node path."""
        cfg = self.config
        if cfg.members:
            tls = cfg.tls_files()
            accept = self.raft_peer_allowed if self.core.networks.members else None
            membership = self._membership_options()
            if tls is None:
                return RaftWritePath(self.core.store, cfg, accept_peer=accept, dedup=self._deduplicator(),
                                     **membership)
            from raftmq.node.tls import member_channel_options

            return RaftWritePath(self.core.store, cfg, channel_credentials=self.core.member_channel_credentials,
                                 channel_options=member_channel_options(tls), accept_peer=accept,
                                 raft_tls=self._raft_tls(tls) if cfg.security.tls_raft else None,
                                 dedup=self._deduplicator(), **membership)
        return LocalWritePath(self.core.store, cfg.cluster.name, cfg.store_host, node_id=cfg.node.id,
                              grpc_address=cfg.advertised_address, linger_s=0.0, dedup=self._deduplicator())

    def _deduplicator(self) -> Deduplicator | None:
        """node.dedup_*: the de-duplication window (docs/design/deduplication.md); None when turned off."""
        n = self.config.node
        if n.dedup_max_entries <= 0:
            return None
        store = self.core.store
        return Deduplicator(DedupWindow(TopicWindows(store.topics, n.dedup_window_seconds), n.dedup_max_entries),
                            store)

    def _membership_options(self) -> dict:
        """Membership changes (issue 39): each one an audit line; on Kubernetes the StatefulSet's replicas retire
        members and refuse pods that are being scaled away (node/kube_members.py)."""
        from raftmq.node.auth import audit
        from raftmq.node.kube_members import StatefulSetMembers

        sts = StatefulSetMembers.from_environment(self.config.kubernetes.membership)
        return {"join_policy": sts.join_refusal if sts is not None else None,
                "retiring": sts.retiring if sts is not None else None,
                "on_membership_event": lambda event, **fields: audit(event, by=self.node_id, **fields)}

    def _raft_tls(self, tls):
        """security.tls_raft: the Raft port speaks mutual TLS with the members' certificates (same files as gRPC)."""
        from raftmq.node.tls import CertificateFiles, RaftTlsContexts
        from raftmq.replication.raft_tls import RaftTls

        contexts = RaftTlsContexts(self.certificates or CertificateFiles(tls))
        return RaftTls(contexts.server_context, contexts.client_context, tls.server_name)

    def _make_pop_core(self):
        """Receive/ack/retry/DLQ decisions (leader only) over the replicated pop state; see node.pop_core."""
        from raftmq.node.pop_core import PopCore, parse_policy

        n = self.config.node
        default = parse_policy(n.max_delivery_attempts, n.retry_backoff, "node")
        groups = {g: parse_policy(o.get("max_delivery_attempts", default.max_delivery_attempts),
                                  o.get("retry_backoff", n.retry_backoff), f"node.group_policies.{g}",
                                  o.get("fifo", False))
                  for g, o in n.group_policies.items()}
        return PopCore(self.core.store, self.core.write_path, put=self.sends.put_internal_blocking,
                       default_policy=default, group_policies=groups,
                       max_inflight_per_queue=n.pop_max_inflight_per_queue)

    async def start(self) -> None:
        """Bring the node up; returns once it serves (raises when it cannot start)."""
        await self.start_endpoints()
        await self.open()

    async def start_endpoints(self) -> None:
        """HTTP and gRPC listen; until open() finishes they answer "not ready" (probes 503, RPCs UNAVAILABLE)."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        self.core.long_polls = LongPollRegistry(loop)
        from raftmq.node.auth import refusal_listeners

        refusal_listeners.append(self.core.metrics.record_refusal)  # refusals on /metrics, from the first call on
        if cfg.security.auth_enabled:  # before either port listens: no request is ever served unchecked
            from raftmq.node.auth import Authenticator
            from raftmq.node.auth.console_sessions import ConsoleSessions

            core = self.core
            core.auth = Authenticator(cfg.security, core.acl_table, catch_up=core.catch_up_with_leader)
            core.console_sessions = ConsoleSessions(cfg.security, core.auth, ended=self._console_session_ended)
        http = cfg.http_listen
        self.console = Console(self.core)
        tls = cfg.tls_files()
        if tls is not None:
            from raftmq.node.tls import CertificateFiles

            self.certificates = CertificateFiles(tls)  # raises TlsConfigError naming a bad file
        http_tls = self._http_tls()
        self.console.secure_cookies = http_tls is not None  # session cookies then travel only over TLS
        try:
            self._http = HealthServer(http.host, http.port, self.core.metrics.exposition, self.core.readiness,
                                      self.console.handle, tls=http_tls, guard=self.http_guard,
                                      client_address=self.http_client_address,
                                      identity=f"node={cfg.node.id} pid={os.getpid()}")
        except OSError as e:
            raise RuntimeError(f"cannot listen for HTTP on {http}: {e.strerror or e} (port in use?)") from None
        self._http.start()
        self._grpc = self._make_grpc_server()
        await self._grpc.start()
        scheme = "TLS" + (" (mutual)" if tls is not None and tls.mutual else "") if tls is not None else "plaintext"
        log.info("node %s: gRPC on %s, HTTP on %s (%s%s)", cfg.node.id, cfg.node.grpc_listen, cfg.node.http_listen,
                 scheme, ", auth on" if cfg.security.auth_enabled else "")

    def _http_tls(self):
        if self.certificates is None or not self.config.security.tls_http:
            return None
        from raftmq.node.tls import HttpServerTls

        return HttpServerTls(self.certificates, self.config.security.tls_http_client_auth)

    def http_guard(self, path: str, headers, address: str = "",
                   target: str = "") -> tuple[int, str] | tuple[int, str, dict] | None:
        """HTTP requests outside ``security.open_http_paths`` must come from an allowed network and, when auth is
        on, carry a valid signature (of a user allowed to sign from ``address``); console pages also take a login
        session, and a browser without either is sent to the login page (303 with its Location), which leads back
        to ``target`` (path and query) afterwards."""
        if path in self.config.security.open_http_paths:
            return None
        from raftmq.node.auth import audit
        from raftmq.node.networks import NetworkRefused, plain_ip

        address = plain_ip(address)
        try:
            self.core.networks.check_client(address, "HTTP")
        except NetworkRefused as e:
            audit("refused_network", method=f"HTTP GET {path}", peer=address, port="http", reason=str(e))
            return 403, f"forbidden: {e}"
        if self.core.auth is None:
            return None
        if path == "/ui" or path.startswith("/ui/"):
            from raftmq.node.auth import console_sessions as session

            if path in (session.LOGIN_PATH, session.LOGOUT_PATH) or path.startswith("/ui/static/"):
                return None  # the login form and what it loads; logging out needs no rights
            try:
                if self.core.console_sessions.user(session.cookie_value(headers), address) is not None:
                    return None
            except NetworkRefused as e:
                audit("refused_network", method=f"HTTP GET {path}", peer=address, port="http", reason=str(e))
                return 403, f"forbidden: {e}"
            if not any(k.lower() == "authorization" for k in headers.keys()):
                return 303, "log in first: " + session.LOGIN_PATH, {"Location": session.login_url(target or path)}
        # this is an HTTP server thread: it may block on the catch-up
        return self.core.auth.check_http(path, headers, address, self.core.catch_up_with_leader_blocking)

    def http_client_address(self, peer: str, headers) -> str:
        """Who sent an HTTP request: the peer, or behind ``security.trusted_http_proxies`` the client their
        X-Forwarded-For names (node.networks.forwarded_http_client)."""
        from raftmq.node.networks import forwarded_http_client, plain_ip

        return forwarded_http_client(plain_ip(peer), headers.get("X-Forwarded-For"), self._http_proxies)

    def raft_peer_allowed(self, address: str) -> bool:
        """The Raft port's accept check (security.allowed_member_networks); a refusal is one audit line."""
        from raftmq.node.auth import audit
        from raftmq.node.networks import NetworkRefused

        try:
            self.core.networks.check_member(address, "Raft port")
            return True
        except NetworkRefused as e:
            audit("refused_network", peer=address, port="raft", reason=str(e))
            return False

    def _console_session_ended(self, session: str) -> bool:
        table = self.core.acl_table()
        return table is not None and table.session_ended(session)

    def client_address(self, context) -> str:
        """The IP of the real client of a gRPC call (a trusted relay's forwarded-for, else the peer)."""
        from raftmq.node.networks import peer_ip

        return peer_ip(self.core.forwarder.client_peer(context))

    async def open(self) -> None:
        """Open (recover) the store, start the write path, wait until caught up; then serve."""
        cfg = self.config
        log.info("node %s: opening store %s", cfg.node.id, cfg.node.data_dir)
        # Kubernetes: a restarted pod may still carry "leader" from its previous life; drop it before anything
        # else, so the leader Service never selects this pod while it is not (yet) the leader (issue 11)
        await self.core.run_blocking(self._start_labeler)
        if self._labeler is not None:
            self.core.phase = "setting this pod's role label to 'unknown' before serving"
            limit = cfg.kubernetes.role_label_clear_timeout_s
            if not await self.core.run_blocking(self._labeler.wait_applied, "unknown", limit):
                log.warning("node %s: could not set the pod's role label to 'unknown' within %.0fs "
                            "(kubernetes.role_label_clear_timeout_s); starting anyway", cfg.node.id, limit)
            if self.core.stopping:
                return
        self.core.phase = "recovering the store"
        from raftmq.store.message_store import MessageStore

        small = cfg.volume_problem()
        if small:  # it still starts: what is stored stays readable; writes fail with "disk full" and this reason
            log.error("node %s: %s", cfg.node.id, small)

        self.core.store = MessageStore(self.core.store_config)
        self.core.store.disk.member = cfg.node.id  # errors say "disk full on <member>"
        try:
            await self.core.run_blocking(self.core.store.open)
        except CorruptionError as exc:
            if not cfg.members:
                raise  # single node: refuse; the message names the damage and `raftmq store repair`
            if not await self._repair_from_peers(exc):
                return
        self._store_open = True
        self.core.store.add_arrival_listener(self.core.long_polls.on_arrival)
        if cfg.members:  # commit-log damage the scrubber or a read finds is repaired from a peer while serving
            self.core.store.add_commit_log_damage_listener(self._on_commit_log_damage)
        self.core.write_path = self._make_write_path()
        await self.core.run_blocking(self.core.write_path.start)
        self.core.write_path_started = True
        self._start_anti_entropy()
        self.core.pop = self._make_pop_core()
        self.core.pop.start(self.core.write_path.is_writable)
        self._start_schedule()
        await self._wait_caught_up()
        if self.core.stopping:
            return
        self.core.serving = True
        self.core.phase = "ready"
        self.console.start()  # samples for its charts from now on
        log.info("node %s ready: commit log [%d, %d), gRPC clients use %s", cfg.node.id,
                 self.core.store.commit_log_min_offset, self.core.store.commit_log_max_offset, cfg.advertised_address)

    def _start_anti_entropy(self) -> None:
        """Replicated member: compare the commit log with the peers' in the background and replace blocks that
        differ from the majority (replication/anti_entropy.py; cluster.raft.anti_entropy_*)."""
        settings = self.config.raft_settings() if self.config.members else None
        if settings is None or not settings.anti_entropy_bytes_per_s or self.core.write_path.peers is None:
            return
        from raftmq.replication.anti_entropy import AntiEntropy

        self.anti_entropy = AntiEntropy(self.core.store, self.core.write_path.peers,
                                        settings.anti_entropy_bytes_per_s, settings.anti_entropy_interval_s)
        self.anti_entropy.start()

    async def _repair_from_peers(self, exc: CorruptionError) -> bool:
        """Replicated member whose commit log is damaged: fetch the ranges from peers, verify, write them back,
        re-open re-dispatching from the first one. Not ready (with the reason) until then; False if stopped."""
        from raftmq.replication.peer_repair import repair_from_peers
        from raftmq.replication.peers import Peers
        from raftmq.replication.write_path import MemberInfo

        cfg = self.config
        # the write path (and its peers) does not exist yet: the same member channels it will use, TLS included
        tls = cfg.tls_files() is not None
        peers = Peers([MemberInfo(m.id, m.raft, m.grpc) for m in cfg.members], cfg.node.id, cfg.cluster.secret,
                      self.core.member_channel_credentials if tls else None, self.core.member_channel_options())
        file_size = self.core.store_config.mapped_file_size_commit_log
        try:
            while not self.core.stopping:
                damage = exc.records
                desc = "; ".join(r.describe() for r in damage[:5])
                self.core.phase = f"commit log damaged ({desc}): repairing from peers"
                log.error("node %s: commit log damaged, repairing from peers before serving: %s", self.node_id, desc)
                outcome = await self.core.run_blocking(repair_from_peers, peers, self.core.store_config.commit_log_dir,
                                                  file_size, damage)
                if outcome.complete:
                    self.core.store.redispatch_from_hint = min(r.start for r in damage)
                    try:
                        await self.core.run_blocking(self.core.store.open)
                    except CorruptionError as again:  # more damage behind the first (e.g. a missing segment)
                        exc = again
                        continue
                    log.warning("node %s: commit log repaired from peers (%s)", self.node_id,
                                ", ".join(f"[{r.start}, {r.end}) from {mid}" for r, mid in outcome.repaired))
                    return True
                why = "; ".join(f"[{r.start}, {r.end}) of {r.path}: {reason}" for r, reason in outcome.unrepaired)
                self.core.phase = (f"commit log damaged and no healthy peer has the range yet ({why}); retrying every "
                               f"{PEER_REPAIR_RETRY_S:.0f}s")
                log.error("node %s not ready: %s", self.node_id, self.core.phase)
                for _ in range(int(PEER_REPAIR_RETRY_S / 0.1)):
                    if self.core.stopping:
                        break
                    await asyncio.sleep(0.1)
            return False
        finally:
            peers.close()

    def _on_commit_log_damage(self, records: list) -> None:
        """Damaged commit-log ranges found by the scrubber or by a read (any thread): replace them with a peer's
        verified copy in the background (one repair at a time; a range still damaged is reported again by the
        next pass or read and retried then)."""
        with self._repair_lock:
            if self._repairing:
                return
            self._repairing = True
        threading.Thread(target=self._repair_while_serving, args=(list(records),), name="peer-repair",
                         daemon=True).start()

    def _repair_while_serving(self, records: list) -> None:
        """``repair_range_live`` for each range (reads of it answer DATA_LOSS meanwhile), then let the store
        verify the ranges and re-check the consume-queue units derived from them."""
        from raftmq.replication.peer_repair import PeerRepairError, repair_range_live

        repaired = []
        try:
            peers = self.core.write_path.peers
            for r in records:
                if peers is None:
                    continue
                try:
                    mid = repair_range_live(peers, self.core.store, r)
                    repaired.append(r)
                    log.warning("node %s: damaged commit-log range [%d, %d) replaced with %s's copy", self.node_id,
                                r.start, r.end, mid)
                except PeerRepairError as e:
                    log.error("node %s: commit-log range [%d, %d) stays damaged: %s", self.node_id, r.start,
                              r.end, e)
            if repaired:
                self.core.store.commit_log_repaired(repaired)
        except Exception:
            log.exception("node %s: repair from peers failed", self.node_id)
        finally:
            with self._repair_lock:
                self._repairing = False

    async def _wait_caught_up(self) -> None:
        """Ready = reput has dispatched everything recovered, a leader is known, and the write path has caught up
        with the group (``not_ready_reason``)."""
        last_log = 0.0
        while not self.core.stopping:
            behind = self.core.store.dispatch_behind_bytes()
            leader = self.core.write_path.leader()
            catching_up = self.core.write_path.not_ready_reason()
            if behind == 0 and leader is not None and not catching_up:
                return
            if getattr(self.core.write_path, "removed", False) and self.config.cluster.auto_join:
                self._rejoin()
                return
            self.core.phase = (f"dispatching recovered messages ({behind} bytes behind)" if behind
                               else catching_up or "waiting for a leader")
            if time.monotonic() - last_log > 5:
                log.info("node %s not ready yet: %s", self.node_id, self.core.phase)
                last_log = time.monotonic()
            await asyncio.sleep(0.02)

    def _make_grpc_server(self) -> grpc.aio.Server:
        # Requests: room for a maximal message (or batch) and then some, so an oversized body reaches our check
        # and gets a message that names the limit; above it gRPC refuses the request whole ("larger than max"), which
        # the client reports as too large, naming this limit. Responses: a pull of MAX_PULL_BYTES plus one maximal message.
        max_message = self.core.store_config.max_message_size
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if self.core.networks.active:
            from raftmq.node.auth import audit
            from raftmq.node.networks import NetworkInterceptor

            interceptors.append(NetworkInterceptor(self.core.networks, self.core.forwarder.forwarded_for, audit))
        if self.core.auth is not None:
            from raftmq.node.auth import AuthInterceptor

            interceptors.append(AuthInterceptor(self.core.auth, self.client_address))
        server = grpc.aio.server(interceptors=interceptors, options=[
            ("grpc.max_receive_message_length", 2 * max_message + (1 << 20)),
            ("grpc.max_send_message_length", MAX_PULL_BYTES + 2 * max_message + (1 << 20)),
            ("grpc.so_reuseport", 0),
        ])
        self.messaging = MessagingService(self.core, self.sends, self.reads, self.receives)
        pb_grpc.add_MessagingServiceServicer_to_server(self.messaging, server)
        pb_grpc.add_AdminServiceServicer_to_server(AdminService(self.core), server)
        from raftmq.node.acl_service import AclService

        pb_grpc.add_AclServiceServicer_to_server(AclService(self.core), server)
        from raftmq.node.transaction_service import TransactionService

        self.transactions = TransactionService(self.core, self.sends)  # its check loop acts while this node leads
        pb_grpc.add_TransactionServiceServicer_to_server(self.transactions, server)
        # issue 13: the official RocketMQ 5 clients' protocol, same port, TLS and authentication
        from raftmq.node.rocketmq5.service import RocketMQ5Service
        from raftmq.rocketmq.v2 import service_pb2_grpc as rmq5_grpc

        self.rocketmq5 = RocketMQ5Service(self.core, self.sends, self.reads, self.receives, self.transactions)
        rmq5_grpc.add_MessagingServiceServicer_to_server(self.rocketmq5, server)
        # peers' catch-up and sync-durability calls (replication owns it; answers UNAVAILABLE until Raft runs)
        from raftmq.replication.replica_service import ReplicaServicer
        from raftmq.v1 import replica_pb2_grpc

        replica_pb2_grpc.add_ReplicaServiceServicer_to_server(
            ReplicaServicer(lambda: self.core.write_path, self.config.cluster.secret, self.core.readiness,
                            lambda: self.core.auth.box.key_ids if self.core.auth is not None else []), server)
        listen = str(self.config.grpc_listen)
        try:
            if self.certificates is not None:
                from raftmq.node.tls import GrpcServerTls

                self.grpc_port = server.add_secure_port(listen, GrpcServerTls(self.certificates).credentials())
            else:
                self.grpc_port = server.add_insecure_port(listen)
        except RuntimeError as e:
            raise RuntimeError(f"cannot listen for gRPC on {listen}: {e} (port in use?)") from None
        return server

    def _start_schedule(self) -> None:
        """Delayed and timer delivery run on every member but act only while this one accepts writes (Raft:
        leader with its barrier applied, so the replicated progress is current); they re-put through the node's
        one write path."""
        from raftmq.store.schedule import ScheduleMessageService
        from raftmq.store.timer import TimerMessageService

        wp, put = self.core.write_path, self.sends.submit_internal
        self.schedule = ScheduleMessageService(self.core.store, put, wp.update_delay_offsets, wp.is_writable)
        self.schedule.start()
        self.timer = TimerMessageService(self.core.store, put, wp.update_timer_progress, wp.is_writable)
        self.timer.start()

    def _start_labeler(self) -> None:
        mode = self.config.kubernetes.role_label
        if mode == "false" or (mode == "auto" and not os.environ.get("KUBERNETES_SERVICE_HOST")):
            return  # not in a pod: skip importing the Kubernetes client (a second of start-up)
        from raftmq.node.kube import RoleLabeler

        self._labeler = RoleLabeler.from_environment(mode)
        if self._labeler is not None:
            self._labeler.start()

    async def watch_role(self) -> None:
        """Mirror leadership into the pod label (when on Kubernetes) once a second; a leader whose disk failed
        with an I/O error hands leadership to a healthy member (it takes no writes any more)."""
        handed_off = False
        while not self.core.stopping:
            if getattr(self.core.write_path, "removed", False) and self.config.cluster.auto_join:
                self._rejoin()  # removed while running (issue 39)
                return
            if self._labeler is not None and self.core.write_path is not None:
                leader = self.core.write_path.leader()
                role = "unknown" if leader is None else "leader" if leader.id == self.node_id else "follower"
                self._labeler.set_role(role)
            if (not handed_off and self.config.members and self.core.store is not None and self.core.write_path is not None
                    and self.core.store.disk.io_error_reason() and self.core.is_leader()):
                handed_off = True
                log.error("node %s: handing leadership away after an I/O error on its disk", self.node_id)
                try:
                    await asyncio.to_thread(self.core.write_path.transfer_leadership, None)
                except Exception as e:  # no caught-up follower: stay, refusing writes with the reason
                    log.error("node %s: leadership hand-off after the I/O error failed: %s", self.node_id, e)
                    handed_off = False
            await asyncio.sleep(ROLE_POLL_SECONDS)

    def _rejoin(self) -> None:
        """The group removed this member and ``cluster.auto_join`` is on (Kubernetes: a pod scaled away earlier
        is back with its old volume): its data is not the group's any more. Discard it and restart empty; the new
        start asks to join as a learner and copies the group's data (as ``raftmq cluster rebuild-member
        --discard`` does)."""
        from raftmq.node import rebuild

        log.warning("node %s: %s; cluster.auto_join: discarding its data and starting again empty to join as a "
                    "learner", self.node_id, self.core.write_path.not_member)
        rebuild.request(self.config.node.data_dir, "auto-join", True)
        self.core.restart_to_rebuild()
        self.core.stopping = True

    async def _drain(self, grace: float) -> None:
        """Answer UNAVAILABLE until in-flight calls are done and callers have noticed (no call for a moment).

        Why before the gRPC server's own stop: a call that reaches gRPC while its server shuts down is CANCELLED
        without running, which a client cannot tell from a lost reply; an UNAVAILABLE from us is unambiguous.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while loop.time() < deadline:
            if self.core.rpcs_in_flight == 0 and time.monotonic() - self.core.last_rpc_started >= DRAIN_QUIET_SECONDS:
                return
            await asyncio.sleep(0.01)

    async def stop(self) -> bool:
        """Graceful stop, after start() has returned or failed; False when a step failed (logged)."""
        if self._stopped:
            return True
        self._stopped = self.core.stopping = True
        self.core.forwarder.stopping = True
        log.info("node %s shutting down", self.node_id)
        if self.core.write_path_started and self.core.serving:
            # Hand leadership away first, still answering: writes are refused only while the transfer runs, then
            # redirected (or forwarded) to the new leader. Draining first kept this member leader, refusing every
            # write, until its calls stopped coming, and under load they never did (issue 34).
            self.core.phase = "shutting down: handing leadership to another member"
            await self.core.run_blocking(self.core.write_path.hand_off_leadership)
        self.core.serving = False
        self.core.phase = "shutting down"
        if self.core.long_polls is not None:
            self.core.long_polls.close()
        if self._grpc is not None:
            grace = self.config.node.shutdown_grace_seconds
            await self._drain(grace)
            await self._grpc.stop(grace)
        await self.core.forwarder.close()
        ok = True
        # Each step runs even if an earlier one failed: a store that is not shut down keeps its abort file,
        # so the next start recovers it as after a crash.
        for what, step in (("anti-entropy", self.anti_entropy.shutdown if self.anti_entropy is not None else None),
                           ("pop offsets", self.core.pop.stop if self.core.pop is not None else None),
                           ("delayed delivery", self.schedule.shutdown if self.schedule is not None else None),
                           ("timer delivery", self.timer.shutdown if self.timer is not None else None),
                           ("write path", self.core.write_path.stop if self.core.write_path_started else None),
                           ("role labeler", self._labeler.stop if self._labeler is not None else None),
                           ("store", self.core.store.shutdown if self._store_open else None)):
            if step is None:
                continue
            try:
                await self.core.run_blocking(step)
            except Exception:
                log.exception("node %s: stopping the %s failed", self.node_id, what)
                ok = False
        if self.console is not None:
            self.console.stop()
        if self._http is not None:
            self._http.stop()
        from raftmq.node.auth import refusal_listeners

        if self.core.metrics.record_refusal in refusal_listeners:
            refusal_listeners.remove(self.core.metrics.record_refusal)
        self.core.close_pool()
        log.info("node %s stopped%s", self.node_id, "" if ok else " (with errors, see above)")
        return ok


RESTART = -1  # serve(): start this process again (a rebuild was requested) instead of exiting


async def serve(cfg: NodeConfig) -> int:
    """Run until SIGTERM/SIGINT; the exit code of the process, or RESTART."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    broker = Broker(cfg)
    broker.stop_process = stop.set
    starting = asyncio.ensure_future(broker.start())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # stop requested while starting: let start() reach a safe point first
        broker.core.request_stop()
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
        from raftmq.node.acl_rotation import reseal_loop

        reseal = asyncio.ensure_future(reseal_loop(broker.core)) if broker.core.auth is not None else None
        reconcile: list = []
        discovery = None
        if cfg.cluster.group_discovery:  # issue 38: groups added later are learned from DNS, without a restart
            from raftmq.node.group_discovery import GroupDiscovery

            discovery = asyncio.ensure_future(GroupDiscovery(broker.core).run())
        if broker.core.groups.many or discovery is not None:  # issue 37: what a group missed of a cluster-wide
            from raftmq.node.settings_reconcile import SettingsReconcile  # change, done by its leader
            from raftmq.node.topic_reconcile import TopicReconcile

            reconcile = [asyncio.ensure_future(kind(broker.core, cfg.cluster.topic_reconcile_interval_s).run())
                         for kind in (TopicReconcile, SettingsReconcile)]
        balance = None
        if cfg.cluster.auto_balance_leaders and cfg.members:  # issue 38: leaders back to the preferred members
            from raftmq.node.leader_balancer import LeaderBalancer

            balance = asyncio.ensure_future(LeaderBalancer(broker.core, cfg.cluster.auto_balance_after_s).run())
        await stopped
        role.cancel()
        for task in (*reconcile, discovery, balance):
            if task is not None:
                task.cancel()
        if reseal is not None:
            reseal.cancel()
    stopped.cancel()
    if not await broker.stop():
        code = 1
    return RESTART if broker.core.restart_requested else code


def run_broker(cfg: NodeConfig) -> int:
    from raftmq.node import rebuild
    from raftmq.node.log_format import configure

    configure(cfg.node.log_level, cfg.node.id, cfg.node.log_format)
    try:
        rebuild.set_aside(cfg.node.data_dir, replicated=bool(cfg.members))
    except (rebuild.RebuildError, OSError) as e:
        log.error("cannot start: %s", e)
        return 1
    code = asyncio.run(serve(cfg))
    if code == RESTART:
        rebuild.restart_process()  # does not return
    return code
