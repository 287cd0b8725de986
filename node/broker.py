"""The broker process: store + write path + gRPC services + HTTP health, and its lifecycle.

Start order: HTTP (so probes answer at once), gRPC (answers UNAVAILABLE "starting" instead of refusing
connections), then the store is opened (recovery may take a while) off the event loop, the write path starts, and
the node turns ready once the reput thread has caught up with the commit log (and, when replicated, a leader is
known). SIGTERM: a leader hands leadership to a caught-up member first, then the node stops taking requests,
releases parked long polls, lets in-flight requests finish (bounded by ``node.shutdown_grace_seconds``), stops the
write path (flushing pending group commits), shuts the store down (flush, remove the abort file), exits 0.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from raftmq.node.admin import AdminService
from raftmq.node.config import NodeConfig
from raftmq.node.console import Console
from raftmq.node.consumer_groups import ConsumerGroupRegistry
from raftmq.node.convert import StoreMessageBuilder
from raftmq.node.errors import RpcError, not_found, unavailable
from raftmq.node.forwarding import Forwarder
from raftmq.node.http_server import HealthServer
from raftmq.node.long_poll import LongPollRegistry
from raftmq.node.messaging import MAX_PULL_BYTES, MessagingService
from raftmq.node.metrics import BrokerMetrics, ConsumerGroupCollector, RaftCollector, StoreCollector
from raftmq.node.validation import PERM_READ, PERM_WRITE, is_system_topic
from raftmq.replication import LocalWritePath, RaftWritePath
from raftmq.store import StoreError, StoreLockedError
from raftmq.store.integrity import CorruptionError
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

READ_THREADS = 4
ROLE_POLL_SECONDS = 1.0
AUTO_CREATE_QUEUE_NUMS = 4  # as CreateTopic's default
DRAIN_QUIET_SECONDS = 0.2  # SIGTERM: no new call for this long before the gRPC server stops
PEER_REPAIR_RETRY_S = 5.0  # a damaged member asks its peers again this often while none has the range
ACL_CATCH_UP_S = 1.0  # a follower about to refuse on its ACL first catches up with the leader for at most this long


class Broker:
    """One node. Handlers reach the store, write path, metrics and long-poll registry through it."""

    def __init__(self, cfg: NodeConfig):
        self.config = cfg
        self.node_id = cfg.node.id
        self.stop_process: Callable[[], None] = self.request_stop  # serve() points it at its graceful stop
        self.restart_requested = False  # RebuildMember: run_broker starts the process again after the stop
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
        # relays calls a follower cannot serve to the leader (issue 11; node/forwarding.py, hook in node/rpc.py)
        self.forwarder = Forwarder(cfg.node.id, cfg.cluster.secret, enabled=cfg.cluster.forward_to_leader,
                                   leader_contact=self._leader_contact,
                                   fresh_s=cfg.raft_settings().raft_min_timeout / 2 if cfg.members else 0.75,
                                   own_address=cfg.advertised_address,
                                   channel_credentials=self.member_channel_credentials,
                                   channel_options=self.member_channel_options)
        self.serving = False
        self.rpcs_in_flight = 0
        self.last_rpc_started = 0.0
        self._phase = "starting: opening the store"
        self._leader_seen_at: float | None = None  # monotonic time readiness last saw a leader
        self._stopping = False  # asked to stop: start() and background loops give up
        self._repair_lock = threading.Lock()
        self._repairing = False  # a repair of found commit-log damage from peers is running
        self._stopped = False
        self._store_open = False
        self._write_path_started = False
        self.schedule: Any = None  # store.schedule.ScheduleMessageService: delivers delayed messages while leading
        self.timer: Any = None  # store.timer.TimerMessageService: delivers timer messages while leading
        self.anti_entropy: Any = None  # replication.anti_entropy.AntiEntropy on a replicated member
        self._pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="raftmq-read")
        self._grpc: grpc.aio.Server | None = None
        self._http: HealthServer | None = None
        self.console: Console | None = None
        self._labeler: Any = None
        self.grpc_port = 0
        self.certificates: Any = None  # node.tls.CertificateFiles when TLS is on
        self.auth: Any = None  # node.auth.Authenticator when security.auth_enabled
        self.console_sessions: Any = None  # node.console.session.ConsoleSessions when security.auth_enabled
        from raftmq.node.networks import NetworkList, NetworkPolicy

        # source-address allow-lists of the client and member ports (node/networks.py); validated with the config
        self.networks = NetworkPolicy(cfg.security.allowed_client_networks, cfg.security.allowed_member_networks)
        self._http_proxies = NetworkList(cfg.security.trusted_http_proxies)
        self.metrics.add_collector(StoreCollector(cfg.cluster.name, cfg.node.id, self._store_stats,
                                                  lambda: self.readiness()[0]))
        self.metrics.add_collector(RaftCollector(cfg.cluster.name, cfg.node.id, lambda: self.write_path))
        from raftmq.node.log_format import set_term_source

        set_term_source(self.leader_term)  # JSON log lines carry the term
        self.metrics.add_collector(ConsumerGroupCollector(cfg.cluster.name, cfg.node.id, self.consumer_groups,
                                                          self._is_leader))
        from raftmq.node.pop_metrics import PopCollector

        self.pop = None  # node.pop_core.PopCore once the store is open
        self.metrics.add_collector(PopCollector(cfg.cluster.name, cfg.node.id, lambda: self.pop))

    # ------------------------------------------------------------------ state seen by handlers and probes
    def readiness(self) -> tuple[bool, str]:
        """``/ready``: serving and a leader is known, or was known moments ago.

        An election (a peer restarting in a rolling update, a leader handing off) leaves every member without a
        leader for a moment; reads keep working and writes are retried by clients, so a member that had a leader
        stays ready for ``node.ready_without_leader_seconds``. Otherwise every member of a StatefulSet would go
        unready together at each restart, emptying the Services and stalling the rollout. A member that never
        saw a leader since it started, or lost it for longer, is not ready.
        """
        if not self.serving:
            phase = getattr(self.write_path, "phase", "") if self.write_path is not None else ""
            return False, f"not ready: {phase or self._phase}"
        behind = self.write_path.not_ready_reason()
        if behind:  # it cannot apply, or it is behind the group: it would serve an old store
            return False, f"not ready: {behind}"
        disk = self.store.disk.reason() if self.store is not None else ""
        if disk:  # reads still work; writes are refused with this reason (RESOURCE_EXHAUSTED / UNAVAILABLE)
            return False, f"not ready: {disk}"
        now = time.monotonic()
        if self.write_path.leader() is not None:
            self._leader_seen_at = now
            return True, "ready"
        seen = self._leader_seen_at
        grace = self.config.node.ready_without_leader_seconds
        if seen is not None and now - seen <= grace:
            return True, f"ready (no leader for {now - seen:.1f}s: election in progress)"
        return False, "not ready: no leader (election in progress or no majority reachable)"

    def leader_term(self) -> int:
        """The Raft term (0 for a single node): it changes exactly when an election happened."""
        term = getattr(self.write_path, "term", None)
        return int(term()) if callable(term) else 0

    def _is_leader(self) -> bool:
        leader = self.write_path.leader() if self.write_path is not None else None
        return leader is not None and leader.id == self.node_id

    def check_serving(self) -> None:
        if self.serving:
            return
        leader = self.write_path.leader() if self._stopping and self.write_path is not None else None
        if leader is not None and leader.id != self.node_id and leader.grpc_address:
            # a stopping member names the leader, as a follower does: a client (or a SendStream) moves there at
            # once instead of coming back here until this member stops listening
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION, f"node {self.node_id} is shutting down; send to "
                           f"the leader {leader.id} at {leader.grpc_address}", leader=leader.grpc_address)
        raise unavailable(f"node {self.node_id} is not ready ({self._phase}); retry shortly or use another member")

    def _leader_contact(self) -> tuple[str | None, float]:
        """(leader's gRPC address, seconds since this member heard from it) for the forwarder."""
        contact = getattr(self.write_path, "leader_contact", None)
        if contact is None:
            return None, float("inf")
        leader, age = contact()
        return (leader.grpc_address or None, age) if leader is not None else (None, age)

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
        stats = self.store.stats()
        if self.timer is not None:
            stats["timer_messages_pending"] = self.timer.pending()
            stats["timer_messages_delivered"] = self.timer.delivered
        if self.anti_entropy is not None:
            stats.update(self.anti_entropy.stats())
        return stats

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
            raise not_found(f"topic {name!r} does not exist; create it first with `raftmq topic create {name}` "
                            "(SDK: Admin.create_topic)")
        return cfg

    async def writable_topic(self, name: str, message_type: str = "NORMAL"):
        """The config of a topic a send may go to; ``node.auto_create_topics`` creates a missing one, taking
        the kind of message (``message_type``) of the send that needs it."""
        cfg = self.topic_config(name)
        if cfg is None and self.config.node.auto_create_topics and not is_system_topic(name):
            from raftmq.store.topic_config import TopicConfig

            try:
                await self.run_blocking(self.write_path.create_topic,
                                        TopicConfig(topic_name=name, read_queue_nums=AUTO_CREATE_QUEUE_NUMS,
                                                    write_queue_nums=AUTO_CREATE_QUEUE_NUMS
                                                    ).with_message_type(message_type))
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
            tls = cfg.tls_files()
            accept = self.raft_peer_allowed if self.networks.members else None
            membership = self._membership_options()
            if tls is None:
                return RaftWritePath(self.store, cfg, accept_peer=accept, **membership)
            from raftmq.node.tls import member_channel_options

            return RaftWritePath(self.store, cfg, channel_credentials=self.member_channel_credentials,
                                 channel_options=member_channel_options(tls), accept_peer=accept,
                                 raft_tls=self._raft_tls(tls) if cfg.security.tls_raft else None, **membership)
        return LocalWritePath(self.store, cfg.cluster.name, cfg.store_host, node_id=cfg.node.id,
                              grpc_address=cfg.advertised_address, linger_s=0.0)

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
        return PopCore(self.store, self.write_path, default_policy=default, group_policies=groups,
                       max_inflight_per_queue=n.pop_max_inflight_per_queue)

    async def start(self) -> None:
        """Bring the node up; returns once it serves (raises when it cannot start)."""
        await self.start_endpoints()
        await self.open()

    async def start_endpoints(self) -> None:
        """HTTP and gRPC listen; until open() finishes they answer "not ready" (probes 503, RPCs UNAVAILABLE)."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        self.long_polls = LongPollRegistry(loop)
        from raftmq.node.auth import refusal_listeners

        refusal_listeners.append(self.metrics.record_refusal)  # refusals on /metrics, from the first request on
        if cfg.security.auth_enabled:  # before either port listens: no request is ever served unchecked
            from raftmq.node.auth import Authenticator
            from raftmq.node.console.session import ConsoleSessions

            self.auth = Authenticator(cfg.security, self._acl_table, catch_up=self._catch_up_with_leader)
            self.console_sessions = ConsoleSessions(cfg.security, self.auth, ended=self._console_session_ended)
        http = cfg.http_listen
        self.console = Console(self)
        tls = cfg.tls_files()
        if tls is not None:
            from raftmq.node.tls import CertificateFiles

            self.certificates = CertificateFiles(tls)  # raises TlsConfigError naming a bad file
        http_tls = self._http_tls()
        self.console.secure_cookies = http_tls is not None  # session cookies then travel only over TLS
        try:
            self._http = HealthServer(http.host, http.port, self.metrics.registry, self.readiness,
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
            self.networks.check_client(address, "HTTP")
        except NetworkRefused as e:
            audit("refused_network", method=f"HTTP GET {path}", peer=address, port="http", reason=str(e))
            return 403, f"forbidden: {e}"
        if self.auth is None:
            return None
        if path == "/ui" or path.startswith("/ui/"):
            from raftmq.node.console import session

            if path in (session.LOGIN_PATH, session.LOGOUT_PATH) or path.startswith("/ui/static/"):
                return None  # the login form and what it loads; logging out needs no rights
            try:
                if self.console_sessions.user(session.cookie_value(headers), address) is not None:
                    return None
            except NetworkRefused as e:
                audit("refused_network", method=f"HTTP GET {path}", peer=address, port="http", reason=str(e))
                return 403, f"forbidden: {e}"
            if not any(k.lower() == "authorization" for k in headers.keys()):
                return 303, "log in first: " + session.LOGIN_PATH, {"Location": session.login_url(target or path)}
        # this is an HTTP server thread: it may block on the catch-up
        return self.auth.check_http(path, headers, address, self.catch_up_with_leader_blocking)

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
            self.networks.check_member(address, "Raft port")
            return True
        except NetworkRefused as e:
            audit("refused_network", peer=address, port="raft", reason=str(e))
            return False

    def client_address(self, context) -> str:
        """The IP of the real client of a gRPC call (a trusted relay's forwarded-for, else the peer)."""
        from raftmq.node.networks import peer_ip

        return peer_ip(self.forwarder.client_peer(context))

    def _console_session_ended(self, session: str) -> bool:
        table = self._acl_table()
        return table is not None and table.session_ended(session)

    def _acl_table(self):
        wp = self.write_path
        return wp.acl_table() if wp is not None and self._write_path_started else None

    def catch_up_with_leader_blocking(self) -> bool:
        """Before a refusal on this member's copy of the ACL: apply what the leader has committed (auth)."""
        wp = self.write_path
        return wp is not None and self._write_path_started and wp.catch_up_with_leader(ACL_CATCH_UP_S)

    async def _catch_up_with_leader(self) -> bool:
        """``catch_up_with_leader_blocking`` for the gRPC interceptor, off the event loop."""
        return await self.run_blocking(self.catch_up_with_leader_blocking)

    def member_client_security(self):
        """client.ClientSecurity for this node's own SDK calls to the cluster (the console's replica check):
        its member TLS files and, with authentication on, the bootstrap admin's credentials."""
        from raftmq.client.security import ClientSecurity

        tls, sec = self.config.tls_files(), self.config.security
        return ClientSecurity(
            tls=tls is not None, ca_file=tls.trust_file if tls else "", cert_file=tls.cert_file if tls else "",
            key_file=tls.key_file if tls else "", server_name=tls.server_name if tls else "",
            access_key=sec.auth_admin_access_key if sec.auth_enabled else "",
            secret_key=sec.auth_admin_secret_key if sec.auth_enabled else "")

    def member_channel_options(self) -> list:
        """Extra channel options for calls to other members (the TLS server-name override, if set)."""
        tls = self.config.tls_files()
        if tls is None:
            return []
        from raftmq.node.tls import member_channel_options

        return member_channel_options(tls)

    def member_channel_credentials(self):
        """Channel credentials for this node's calls to other members' gRPC ports (None: plaintext)."""
        tls = self.config.tls_files()
        if tls is None:
            return None
        from raftmq.node.tls import member_channel_credentials

        return member_channel_credentials(tls)

    async def open(self) -> None:
        """Open (recover) the store, start the write path, wait until caught up; then serve."""
        cfg = self.config
        log.info("node %s: opening store %s", cfg.node.id, cfg.node.data_dir)
        # Kubernetes: a restarted pod may still carry "leader" from its previous life; drop it before anything
        # else, so the leader Service never selects this pod while it is not (yet) the leader (issue 11)
        await self.run_blocking(self._start_labeler)
        if self._labeler is not None:
            self._phase = "setting this pod's role label to 'unknown' before serving"
            limit = cfg.kubernetes.role_label_clear_timeout_s
            if not await self.run_blocking(self._labeler.wait_applied, "unknown", limit):
                log.warning("node %s: could not set the pod's role label to 'unknown' within %.0fs "
                            "(kubernetes.role_label_clear_timeout_s); starting anyway", cfg.node.id, limit)
            if self._stopping:
                return
        self._phase = "recovering the store"
        from raftmq.store.message_store import MessageStore

        small = cfg.volume_problem()
        if small:  # it still starts: what is stored stays readable; writes fail with "disk full" and this reason
            log.error("node %s: %s", cfg.node.id, small)

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
        if cfg.members:  # commit-log damage the scrubber or a read finds is repaired from a peer while serving
            self.store.add_commit_log_damage_listener(self._on_commit_log_damage)
        self.write_path = self._make_write_path()
        await self.run_blocking(self.write_path.start)
        self._write_path_started = True
        self._start_anti_entropy()
        self.pop = self._make_pop_core()
        self.pop.start(self.write_path.is_writable)
        self._start_schedule()
        await self._wait_caught_up()
        if self._stopping:
            return
        self.serving = True
        self._phase = "ready"
        self.console.start()  # samples for its charts from now on
        log.info("node %s ready: commit log [%d, %d), gRPC clients use %s", cfg.node.id,
                 self.store.commit_log_min_offset, self.store.commit_log_max_offset, cfg.advertised_address)

    def _start_anti_entropy(self) -> None:
        """Replicated member: compare the commit log with the peers' in the background and replace blocks that
        differ from the majority (replication/anti_entropy.py; cluster.raft.anti_entropy_*)."""
        settings = self.config.raft_settings() if self.config.members else None
        if settings is None or not settings.anti_entropy_bytes_per_s or not hasattr(self.write_path, "peers"):
            return
        from raftmq.replication.anti_entropy import AntiEntropy

        self.anti_entropy = AntiEntropy(self.store, self.write_path.peers,
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
                      self.member_channel_credentials if tls else None, self.member_channel_options())
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

    def on_corrupt_read(self, record) -> str:
        """A read met a damaged record (its bytes were not returned; the store reported it, which started the
        repair from a peer on a replicated member). Returns the hint for the caller's error ("" on a single
        node, whose error already says what to run)."""
        if not self.config.members or self.write_path is None or not hasattr(self.write_path, "peers"):
            return ""
        return f"member {self.node_id} is repairing it from a peer: retry in a moment"

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
            peers = getattr(self.write_path, "peers", None)
            for r in records:
                if peers is None:
                    continue
                try:
                    mid = repair_range_live(peers, self.store, r)
                    repaired.append(r)
                    log.warning("node %s: damaged commit-log range [%d, %d) replaced with %s's copy", self.node_id,
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

    async def _wait_caught_up(self) -> None:
        """Ready = reput has dispatched everything recovered, a leader is known, and the write path has caught up
        with the group (``not_ready_reason``)."""
        last_log = 0.0
        while not self._stopping:
            behind = self.store.dispatch_behind_bytes()
            leader = self.write_path.leader()
            catching_up = self.write_path.not_ready_reason()
            if behind == 0 and leader is not None and not catching_up:
                return
            if getattr(self.write_path, "removed", False) and self.config.cluster.auto_join:
                self._rejoin()
                return
            self._phase = (f"dispatching recovered messages ({behind} bytes behind)" if behind
                           else catching_up or "waiting for a leader")
            if time.monotonic() - last_log > 5:
                log.info("node %s not ready yet: %s", self.node_id, self._phase)
                last_log = time.monotonic()
            await asyncio.sleep(0.02)

    def _make_grpc_server(self) -> grpc.aio.Server:
        # Requests: room for a maximal message (or batch) and then some, so an oversized body reaches our check
        # and gets a message that names the limit; above it gRPC refuses the request whole ("larger than max"), which
        # the client reports as too large, naming this limit. Responses: a pull of MAX_PULL_BYTES plus one maximal message.
        max_message = self.store_config.max_message_size
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if self.networks.active:
            from raftmq.node.auth import audit
            from raftmq.node.networks import NetworkInterceptor

            interceptors.append(NetworkInterceptor(self.networks, self.forwarder.forwarded_for, audit))
        if self.auth is not None:
            from raftmq.node.auth import AuthInterceptor

            interceptors.append(AuthInterceptor(self.auth, self.client_address))
        server = grpc.aio.server(interceptors=interceptors, options=[
            ("grpc.max_receive_message_length", 2 * max_message + (1 << 20)),
            ("grpc.max_send_message_length", MAX_PULL_BYTES + 2 * max_message + (1 << 20)),
            ("grpc.so_reuseport", 0),
        ])
        self.messaging = MessagingService(self)
        pb_grpc.add_MessagingServiceServicer_to_server(self.messaging, server)
        pb_grpc.add_AdminServiceServicer_to_server(AdminService(self), server)
        from raftmq.node.acl_service import AclService

        pb_grpc.add_AclServiceServicer_to_server(AclService(self), server)
        from raftmq.node.transaction_service import TransactionService

        self.transactions = TransactionService(self)  # its check loop acts while this node leads
        pb_grpc.add_TransactionServiceServicer_to_server(self.transactions, server)
        # issue 13: the official RocketMQ 5 clients' protocol, same port, TLS and authentication
        from raftmq.node.rocketmq5.service import RocketMQ5Service
        from raftmq.rocketmq.v2 import service_pb2_grpc as rmq5_grpc

        self.rocketmq5 = RocketMQ5Service(self, self.messaging)
        rmq5_grpc.add_MessagingServiceServicer_to_server(self.rocketmq5, server)
        # peers' catch-up and sync-durability calls (replication owns it; answers UNAVAILABLE until Raft runs)
        from raftmq.replication.replica_service import ReplicaServicer
        from raftmq.v1 import replica_pb2_grpc

        replica_pb2_grpc.add_ReplicaServiceServicer_to_server(
            ReplicaServicer(lambda: self.write_path, self.config.cluster.secret, self.readiness,
                            lambda: self.auth.box.key_ids if self.auth is not None else []), server)
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
        leader with its barrier applied, so the replicated progress is current); they re-put through the write
        path."""
        from raftmq.store.schedule import ScheduleMessageService
        from raftmq.store.timer import TimerMessageService

        wp = self.write_path
        self.schedule = ScheduleMessageService(self.store, wp.put, wp.update_delay_offsets, wp.is_writable)
        self.schedule.start()
        self.timer = TimerMessageService(self.store, wp.put, wp.update_timer_progress, wp.is_writable)
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
        while not self._stopping:
            if getattr(self.write_path, "removed", False) and self.config.cluster.auto_join:
                self._rejoin()  # removed while running (issue 39)
                return
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
        cancel = getattr(self.write_path, "cancel_start", None)
        if cancel is not None:
            cancel()

    def _rejoin(self) -> None:
        """The group removed this member and ``cluster.auto_join`` is on (Kubernetes: a pod scaled away earlier
        is back with its old volume): its data is not the group's any more. Discard it and restart empty; the new
        start asks to join as a learner and copies the group's data (as ``raftmq cluster rebuild-member
        --discard`` does)."""
        from raftmq.node import rebuild

        log.warning("node %s: %s; cluster.auto_join: discarding its data and starting again empty to join as a "
                    "learner", self.node_id, self.write_path.not_member)
        rebuild.request(self.config.node.data_dir, "auto-join", True)
        self.restart_to_rebuild()
        self._stopping = True

    def restart_to_rebuild(self) -> None:
        """``RebuildMember`` marked the data directory: stop as on SIGTERM; run_broker then starts the process
        again, which sets the files aside and copies from a peer (node.rebuild)."""
        log.warning("node %s: stopping to rebuild from its peers (requested through RebuildMember)", self.node_id)
        self.restart_requested = True
        self.stop_process()

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
        self.forwarder.stopping = True
        log.info("node %s shutting down", self.node_id)
        if self._write_path_started and self.serving:
            # Hand leadership away first, still answering: writes are refused only while the transfer runs, then
            # redirected (or forwarded) to the new leader. Draining first kept this member leader, refusing every
            # write, until its calls stopped coming, and under load they never did (issue 34).
            self._phase = "shutting down: handing leadership to another member"
            await self.run_blocking(self.write_path.hand_off_leadership)
        self.serving = False
        self._phase = "shutting down"
        if self.long_polls is not None:
            self.long_polls.close()
        if self._grpc is not None:
            grace = self.config.node.shutdown_grace_seconds
            await self._drain(grace)
            await self._grpc.stop(grace)
        await self.forwarder.close()
        ok = True
        # Each step runs even if an earlier one failed: a store that is not shut down keeps its abort file,
        # so the next start recovers it as after a crash.
        for what, step in (("anti-entropy", self.anti_entropy.stop if self.anti_entropy is not None else None),
                           ("pop offsets", self.pop.stop if self.pop is not None else None),
                           ("delayed delivery", self.schedule.shutdown if self.schedule is not None else None),
                           ("timer delivery", self.timer.shutdown if self.timer is not None else None),
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
        if self.console is not None:
            self.console.stop()
        if self._http is not None:
            self._http.stop()
        from raftmq.node.auth import refusal_listeners

        if self.metrics.record_refusal in refusal_listeners:
            refusal_listeners.remove(self.metrics.record_refusal)
        self._pool.shutdown(wait=True)
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
        from raftmq.node.acl_rotation import reseal_loop

        reseal = asyncio.ensure_future(reseal_loop(broker)) if broker.auth is not None else None
        await stopped
        role.cancel()
        if reseal is not None:
            reseal.cancel()
    stopped.cancel()
    if not await broker.stop():
        code = 1
    return RESTART if broker.restart_requested else code


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
