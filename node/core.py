"""BrokerCore: what every service of a node shares, and the one thing they depend on.

The store, the write path, leadership, the topic table, offsets, long polls and metrics, plus the node's serving
state (ready, stopping, calls in flight) and the blocking-call pool. Services (node/messaging.py, admin.py,
acl_service.py, transaction_service.py, rocketmq5/, console/, ...) receive a BrokerCore and never see how the node
was put together; node/server.py builds the core, opens the store into it, builds the services around it,
registers them on gRPC and HTTP and owns their life cycle. Nothing here imports a service or the server, so the
node's modules import one way (lint-imports checks it; docs/architecture.md#the-node-a-core-and-its-composition).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import grpc

from raftmq.node.config import NodeConfig
from raftmq.node.consumer_groups import ConsumerGroupRegistry
from raftmq.node.convert import StoreMessageBuilder
from raftmq.node.errors import RpcError, not_found, unavailable
from raftmq.node.forwarding import Forwarder
from raftmq.node.groups import GroupDirectory, GroupRedirect
from raftmq.node.long_poll import LongPollRegistry
from raftmq.node.metrics import BrokerMetrics
from raftmq.node.networks import NetworkPolicy
from raftmq.node.validation import PERM_READ, PERM_WRITE, is_system_topic
from raftmq.replication.write_path import WritePath
from raftmq.store import StoreError
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.auth import Authenticator
    from raftmq.node.auth.console_sessions import ConsoleSessions
    from raftmq.node.pop_core import PopCore
    from raftmq.replication.acl_table import AclTable
    from raftmq.store.message_store import MessageStore
    from raftmq.store.topic_config import TopicConfig

log = logging.getLogger(__name__)

READ_THREADS = 4
AUTO_CREATE_QUEUE_NUMS = 4  # as CreateTopic's default
ACL_CATCH_UP_S = 1.0  # a follower about to refuse on its ACL first catches up with the leader for at most this long


class BrokerCore:
    """One node's shared state and the operations every service uses on it."""

    def __init__(self, cfg: NodeConfig):
        self.config = cfg
        self.node_id = cfg.node.id
        self.store_config = cfg.store_config()
        self.metrics = BrokerMetrics(cfg.cluster.name, cfg.node.id, cfg.group_name)
        self.converter = StoreMessageBuilder(max_message_size=self.store_config.max_message_size,
                                             uniq_key_ip=cfg.store_host[0])
        # set by the server as the node comes up (None until then; services run only once ``serving``)
        self.store: MessageStore | None = None
        self.write_path: WritePath | None = None
        self.write_path_started = False
        self.long_polls: LongPollRegistry | None = None
        self.pop: PopCore | None = None  # receive/ack decisions, once the store is open
        self.auth: Authenticator | None = None  # when security.auth_enabled
        self.console_sessions: ConsoleSessions | None = None  # when security.auth_enabled
        self.consumer_groups = ConsumerGroupRegistry()  # live group members; meaningful on the leader only
        # source-address allow-lists of the client and member ports (node/networks.py); validated with the config
        self.networks = NetworkPolicy(cfg.security.allowed_client_networks, cfg.security.allowed_member_networks)
        # relays calls a follower cannot serve to the leader (issue 11; node/forwarding.py, hook in node/rpc.py)
        self.forwarder = Forwarder(cfg.node.id, cfg.cluster.secret, enabled=cfg.cluster.forward_to_leader,
                                   leader_contact=self._leader_contact,
                                   fresh_s=cfg.raft_settings().raft_min_timeout / 2 if cfg.members else 0.75,
                                   own_address=cfg.advertised_address,
                                   channel_credentials=self.member_channel_credentials,
                                   channel_options=self.member_channel_options)
        # the cluster's groups (issue 37): calls for another group's queues are relayed to it (node/groups.py)
        self.groups = GroupDirectory(cfg, self.forwarder)
        # serving state: every RPC scope (node/rpc.py) counts itself in and out
        self.serving = False
        self.stopping = False  # asked to stop: start-up and background loops give up
        self.phase = "starting: opening the store"
        self.rpcs_in_flight = 0
        self.last_rpc_started = 0.0  # time.monotonic()
        self._leader_seen_at: float | None = None  # monotonic time readiness last saw a leader
        # the process: the server points stop_process at its graceful stop; a rebuild asks for a restart
        self.stop_process: Callable[[], None] = self.request_stop
        self.restart_requested = False
        self._pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="raftmq-read")

    # ------------------------------------------------------------------ serving state
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
            return False, f"not ready: {phase or self.phase}"
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

    def check_serving(self) -> None:
        """Raise RpcError(UNAVAILABLE) when the node cannot answer yet (starting) or any more (stopping)."""
        if self.serving:
            return
        leader = self.write_path.leader() if self.stopping and self.write_path is not None else None
        if leader is not None and leader.id != self.node_id and leader.grpc_address:
            # a stopping member names the leader, as a follower does: a client (or a SendStream) moves there at
            # once instead of coming back here until this member stops listening
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION, f"node {self.node_id} is shutting down; send to "
                           f"the leader {leader.id} at {leader.grpc_address}", leader=leader.grpc_address)
        raise unavailable(f"node {self.node_id} is not ready ({self.phase}); retry shortly or use another member")

    def request_stop(self) -> None:
        """Make a running start-up give up at its next step (SIGTERM during recovery)."""
        self.stopping = True
        cancel = getattr(self.write_path, "cancel_start", None)
        if cancel is not None:
            cancel()

    def restart_to_rebuild(self) -> None:
        """``RebuildMember`` marked the data directory: stop as on SIGTERM; run_broker then starts the process
        again, which sets the files aside and copies from a peer (node.rebuild)."""
        log.warning("node %s: stopping to rebuild from its peers (requested through RebuildMember)", self.node_id)
        self.restart_requested = True
        self.stop_process()

    async def run_blocking(self, fn, *args):
        """Run a store call on the read pool so a slow disk never stalls the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))

    def close_pool(self) -> None:
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------------ leadership
    def leader_term(self) -> int:
        """The Raft term (0 for a single node): it changes exactly when an election happened."""
        return self.write_path.term() if self.write_path is not None else 0

    def is_leader(self) -> bool:
        leader = self.write_path.leader() if self.write_path is not None else None
        return leader is not None and leader.id == self.node_id

    def check_leader(self) -> None:
        leader = self.write_path.leader()
        if leader is None:
            raise unavailable("no leader right now (election in progress); retry in a second")
        if leader.id != self.node_id:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"this node ({self.node_id}) is not the leader; the leader is {leader.id} at "
                           f"{leader.grpc_address or 'an unknown address'}", leader=leader.grpc_address or None)

    def _leader_contact(self) -> tuple[str | None, float]:
        """(leader's gRPC address, seconds since this member heard from it) for the forwarder."""
        if self.write_path is None:
            return None, float("inf")
        leader, age = self.write_path.leader_contact()
        return (leader.grpc_address or None, age) if leader is not None else (None, age)

    def check_group(self, broker: str) -> None:
        """A call naming a queue of another group (``broker``, its name) is relayed there: raises GroupRedirect,
        which the RPC scope hands to the group directory (docs/design/scale-out.md#one-write-path). "" and this
        member's own group are served here; an unknown group is NOT_FOUND naming the cluster's groups."""
        if broker and self.groups.resolve(broker) != self.groups.own:
            raise GroupRedirect(broker)

    def on_corrupt_read(self, record) -> str:
        """A read met a damaged record (its bytes were not returned; the store reported it, which started the
        repair from a peer on a replicated member). Returns the hint for the caller's error ("" on a single
        node, whose error already says what to run)."""
        if self.write_path is None or self.write_path.peers is None:
            return ""
        return f"member {self.node_id} is repairing it from a peer: retry in a moment"

    # ------------------------------------------------------------------ access control state
    def acl_table(self) -> AclTable | None:
        wp = self.write_path
        return wp.acl_table() if wp is not None and self.write_path_started else None

    def catch_up_with_leader_blocking(self) -> bool:
        """Before a refusal on this member's copy of the ACL: apply what the leader has committed (auth)."""
        wp = self.write_path
        return wp is not None and self.write_path_started and wp.catch_up_with_leader(ACL_CATCH_UP_S)

    async def catch_up_with_leader(self) -> bool:
        """``catch_up_with_leader_blocking`` for the gRPC interceptor, off the event loop."""
        return await self.run_blocking(self.catch_up_with_leader_blocking)

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

    # ------------------------------------------------------------------ topics
    def topic_config(self, name: str) -> TopicConfig | None:
        return self.store.topics.get(name)

    def existing_topic(self, name: str) -> TopicConfig:
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

    async def writable_topic(self, name: str, message_type: str = "NORMAL") -> TopicConfig:
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
            where = f" in group {self.groups.own}" if self.groups.many else ""  # a drained group names itself
            raise RpcError(grpc.StatusCode.PERMISSION_DENIED,
                           f"topic {name!r} is not writable{where} (perm {cfg.perm}); update it with perm 6 "
                           "(read-write)")
        return cfg

    def readable_topic(self, name: str) -> TopicConfig:
        cfg = self.existing_topic(name)
        if not cfg.perm & PERM_READ:
            raise RpcError(grpc.StatusCode.PERMISSION_DENIED,
                           f"topic {name!r} is not readable (perm {cfg.perm}); update it with perm 6 (read-write)")
        return cfg

    @staticmethod
    def check_read_queue(cfg: TopicConfig, queue_id: int) -> None:
        n = cfg.read_queue_nums
        if not 0 <= queue_id < n:
            raise not_found(f"topic {cfg.topic_name!r} has {n} read queues (0..{n - 1}); queue {queue_id} does not "
                            "exist")

    # ------------------------------------------------------------------ offsets
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
