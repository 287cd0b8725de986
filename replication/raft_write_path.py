"""RaftWritePath: leader-only writes replicated through pysyncobj (docs/design/replication.md#a-put-from-the-leaders-point-of-view).

How a put travels: the group committer (leader only) encodes concurrent puts into one store batch with the
leader's clock and the group STOREHOST, proposes it as ONE Raft command, and the future resolves when pysyncobj's
callback reports the entry committed by a majority and applied here (``sync`` mode additionally waits until a
majority has fsynced the entry in its Raft journal, from which a power cut's losses of the commit log are
rebuilt). Every replica applies the same bytes in log order, so commit logs, consume queues and index files are
byte-identical.

Safety: a put is acknowledged only on SUCCESS from the apply callback; pysyncobj commits only current-term
entries by majority match, so a deposed or partitioned leader cannot acknowledge; when this node stops being
leader every in-flight put fails with UnknownOutcomeError at once and queued ones with NotLeaderError. A new
leader accepts writes only after a barrier entry of its own term has been applied.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import grpc
from pysyncobj import FAIL_REASON, SyncObjConf

from raftmq.replication import catch_up, fresh_start, membership, pysyncobj_patches, snapshot
from raftmq.replication.applied_index import AppliedIndex
from raftmq.replication.applier import NAMED_TOPIC_OPS, StoreApplier
from raftmq.replication.catch_up_throttle import CatchUpThrottle
from raftmq.replication.deduplicator import Deduplicator
from raftmq.replication.errors import (
    BusyError,
    NoLeaderError,
    NotLeaderError,
    ReplicationError,
    TransferLeadershipError,
    UnknownOutcomeError,
    WritePathStoppedError,
)
from raftmq.replication.group_commit import GroupCommitter, PendingPut
from raftmq.replication.member_changes import MembershipChanges
from raftmq.replication.peers import Peers
from raftmq.replication.raft_log import ReplicatedLog
from raftmq.replication.state_machine import StateMachine, frame_batch
from raftmq.replication.write_path import MemberInfo, raise_refusal
from raftmq.store.json_file import fsync_dir, makedirs_durably
from raftmq.store.mapped_file import sync_fd
from raftmq.store.setting import setting
from raftmq.store.thread_name import name_native_thread
from raftmq.v1 import replica_pb2

log = logging.getLogger(__name__)

_LEADER = 2
BIND_RETRIES = 5  # then start() fails with a clear error instead of running unbound
CATCH_UP_POLL_S = 0.002  # catch_up_with_leader: how often a follower looks at its applied index
PEER_STATUS_TIMEOUT_S = 1.0  # members_status asks all peers at once; a stopped one costs this, once
SYNC_ROUND_TIMEOUT_S = 3.0  # one durability round; the write's own deadline cuts it shorter
INLINE_RESOLVE_MAX_PUTS = 64  # async batches this small are resolved on the tick thread (bigger: completion thread)


MEMBERSHIP_POLL_S = 0.5  # the membership thread looks at promotions, learners and the group this often
MAX_COPY_ROUNDS = 20  # a new member copies again what the group wrote during its copy, at most this often
GROUP_CHECK_S = 2.0  # at most this often a member asks its peers for the group's membership


@dataclass
class _GroupView:
    """What the peers said about the group: the newest record, and the leader of the highest term."""

    answered: bool = False
    record: membership.Membership | None = None
    leader_id: str | None = None
    leader_term: int = -1
    leader_voters: set[str] = field(default_factory=set)
    leader_record: membership.Membership | None = None

    @classmethod
    def of(cls, statuses: dict) -> _GroupView:
        """From the peers' GetReplicaStatus answers."""
        view = cls(answered=bool(statuses))
        for st in statuses.values():
            record = membership.Membership.from_dict(json.loads(st.membership)) if st.membership else None
            if record is not None and (view.record is None or record.index > view.record.index):
                view.record = record
            if st.is_leader and st.raft_term >= view.leader_term:
                view.leader_id, view.leader_term = st.member_id, st.raft_term
                view.leader_voters = set(st.voters)
                view.leader_record = record
        if view.leader_record is not None:
            view.record = view.leader_record  # the leader applies first: its record is the newest committed one
        return view


_ROLE_NAMES = {0: "follower", 1: "candidate", 2: "leader"}
LEADERSHIP_LOST = "this member lost the leadership before the entry was confirmed"  # UnknownOutcomeError detail


def _now_ms() -> int:
    return int(time.time() * 1000)


def _topic_op_size(op: tuple[str, Any]) -> int:
    """What one topic operation adds to a ``topics`` command (a config in topics.json's shape, ~250 bytes)."""
    return 300


def _named(target: Callable[[], None], name: str) -> Callable[[], None]:
    """``target`` run under the kernel thread name ``name`` (see store.thread_name)."""
    def run() -> None:
        name_native_thread(name)
        target()
    return run


@dataclass
class RaftSettings:
    """Raft and group-commit tuning. The defaults worked on a shared 2-core box; invalid combinations are refused
    (``leader_fallback_timeout < raft_min_timeout < raft_max_timeout <= connection_timeout``).

    The node's ``cluster.raft`` section sets the fields by name (``durability`` is ``cluster.durability``); each
    field documents itself (``store.setting``), and docs/operations/configuration.md is generated from that."""

    durability: str = setting("`async` or `sync`; set it as `cluster.durability`.", "async")
    put_timeout_s: float = setting(
        "Seconds a put waits for its entry to be committed and applied; then it answers UNKNOWN (outcome "
        "unknown).", 8.0)
    max_batch_bytes: int = setting(
        "Group commit: concurrent puts are joined into one Raft command of at most this many bytes (a single "
        "larger put is sent alone).", 512 * 1024)
    linger_s: float = setting(
        "Group commit: seconds to wait for more puts before proposing a batch, only while earlier batches are in "
        "flight (0: never wait).", 0.002)
    max_inflight_batches: int = setting(
        "Raft commands awaiting a majority at once; fewer in flight make the queue, and so the batches, "
        "bigger.", 4)
    max_pending_bytes: int = setting(
        "Bytes of puts queued for the group commit; a put beyond them is refused as busy (RESOURCE_EXHAUSTED, "
        "retried by the SDK).", 64 << 20)
    offsets_linger_s: float = setting(
        "Seconds consumer-offset commits are coalesced into one Raft command (0: none).", 0.02)
    append_entries_period: float = setting("Seconds between the leader's heartbeats / replication rounds.", 0.05)
    raft_min_timeout: float = setting(
        "Election timeout, lower bound in seconds (more than 3 x `append_entries_period`).", 1.5)
    raft_max_timeout: float = setting("Election timeout, upper bound in seconds.", 3.0)
    leader_fallback_timeout: float = setting(
        "Seconds without answers from a majority after which a leader steps down; below `raft_min_timeout`, so "
        "a cut-off leader stops before a new one is elected.", 1.2)
    connection_timeout: float = setting(
        "Seconds after which a silent peer connection is dropped and dialled again (>= `raft_max_timeout`).",
        3.5)
    connection_retry_time: float = setting("Seconds between two attempts to connect to a peer.", 1.0)
    compaction_min_entries: int = setting(
        "The Raft journal is compacted (a snapshot is written and the entries it covers dropped) once it holds "
        "more than this many entries.", 2000)
    compaction_min_time: float = setting(
        "The Raft journal is compacted at the latest this many seconds after the previous compaction.", 120.0)
    compaction_max_bytes: int = setting(
        "The Raft journal is compacted once this many bytes were proposed since the previous compaction.",
        256 << 20)
    dns_cache_time: float = setting(
        "Seconds between two resolutions of a peer's host name (a restarted pod's new IP is picked up).", 5.0)
    catch_up_bytes_per_s: int = setting(
        "Bytes per second of commit log this member serves to catching-up or rebuilding peers, shared by all "
        "copies (0: unlimited).", 64 << 20)
    catch_up_max_streams: int = setting(
        "Copies this member serves at once; more are answered RESOURCE_EXHAUSTED and retry with backoff.", 2)
    anti_entropy_bytes_per_s: int = setting(
        "Anti-entropy: bytes per second of commit log this member compares with its peers' (SHA-256 of 1 MiB "
        "chunks, then 4 KiB blocks); a block that differs from the copy a majority holds is replaced with a "
        "verified copy (0: off).", 8 << 20)
    learner_max_lag_entries: int = setting(
        "A learner becomes a voter once it is within this many Raft entries of the leader's commit index (and "
        "`learner_max_lag_bytes`); a voter this far behind does not count as healthy for a membership change.", 100)
    learner_max_lag_bytes: int = setting(
        "A learner becomes a voter once its commit log is within this many bytes of the leader's.", 4 << 20)
    anti_entropy_interval_s: float = setting(
        "Anti-entropy: seconds between the end of a pass and the start of the next (the first starts 30 s after "
        "the start, or after this interval when shorter).", 600.0)

    def __post_init__(self) -> None:
        if self.durability not in ("async", "sync"):
            raise ValueError(f"durability must be 'async' or 'sync', got {self.durability!r}")
        if not self.leader_fallback_timeout < self.raft_min_timeout < self.raft_max_timeout:
            raise ValueError("need leader_fallback_timeout < raft_min_timeout < raft_max_timeout")
        if self.connection_timeout < self.raft_max_timeout:
            raise ValueError("connection_timeout must be >= raft_max_timeout (pysyncobj drops idle peers sooner)")
        if self.raft_min_timeout <= 3 * self.append_entries_period:
            raise ValueError("raft_min_timeout must be more than 3 x append_entries_period")
        if self.catch_up_bytes_per_s < 0:
            raise ValueError("catch_up_bytes_per_s must be >= 0 (0 = unlimited)")
        if self.catch_up_max_streams < 1:
            raise ValueError("catch_up_max_streams must be >= 1")
        if self.learner_max_lag_entries < 1 or self.learner_max_lag_bytes < 0:
            raise ValueError("learner_max_lag_entries must be >= 1 and learner_max_lag_bytes >= 0")
        if self.anti_entropy_bytes_per_s < 0:
            raise ValueError("anti_entropy_bytes_per_s must be >= 0 (0 = off)")


class _InFlight:
    __slots__ = ("puts", "deadline", "done", "proposed_at")

    def __init__(self, puts: list[PendingPut], deadline: float, proposed_at: float):
        self.puts = puts
        self.deadline = deadline
        self.done = False
        self.proposed_at = proposed_at  # time.monotonic() when handed to pysyncobj (the raft_round stage)


class RaftWritePath:
    """The replicated WritePath. ``members`` includes this node; ids, Raft and gRPC addresses come from config."""

    def __init__(self, store: Any, node_config: Any = None, *, node_id: str = "", members: list[MemberInfo] = (),
                 raft_listen: str = "", cluster_name: str = "DefaultCluster",
                 store_host: tuple[str, int] = ("127.0.0.1", 10911), secret: str = "", raft_dir: str | None = None,
                 settings: RaftSettings | None = None, channel_credentials: Any = None,
                 channel_options: Any = (), accept_peer: Callable[[str], bool] | None = None,
                 raft_tls: Any = None, auto_join: bool = False, join_policy: Callable[[str], str] | None = None,
                 retiring: Callable[[list[str]], list[str]] | None = None,
                 on_membership_event: Callable[..., None] | None = None, dedup: Deduplicator | None = None):
        """``channel_credentials`` (a callable returning grpc.ChannelCredentials) and ``channel_options``: how to
        reach the members' gRPC ports when they use TLS. ``accept_peer(ip)``: whether the Raft port keeps a
        connection from that address (the node's member allow-list; None: every address). ``raft_tls``: a
        replication.raft_tls.RaftTls to run the Raft port over mutual TLS (None: pysyncobj's plain TCP). ``dedup``:
        screens puts against the de-duplication window (docs/design/deduplication.md; None: off).

        Membership (docs/design/membership.md): ``members`` is the seed configuration (the group's own record
        wins once it has one). ``auto_join``: a member the group does not list asks the leader to add it as a
        learner, and as leader this member accepts such requests, when ``join_policy(id)`` has no objection (it
        returns the refusal). ``retiring(member ids)``: as leader, the members that must leave (Kubernetes: pods
        beyond the StatefulSet's replicas), removed one at a time. ``on_membership_event(event, **fields)``: an
        audit line for every change this member makes as leader."""
        if node_config is not None:  # the node's NodeConfig (node/config.py): one source of truth
            node_id = node_config.node.id
            members = [MemberInfo(m.id, m.raft, m.grpc) for m in node_config.members]
            raft_listen = node_config.cluster.raft_listen
            cluster_name = node_config.cluster.name
            store_host = node_config.store_host
            secret = node_config.cluster.secret
            settings = settings or node_config.raft_settings()  # cluster.raft + cluster.durability
            auto_join = node_config.cluster.auto_join
        members = list(members)
        ids = [m.id for m in members]
        if node_id not in ids:
            raise ValueError(f"cluster.members must contain this node's id {node_id!r} (members: {ids})")
        if len(set(ids)) != len(ids) or len({m.raft_address for m in members}) != len(members):
            raise ValueError("cluster.members has duplicate ids or Raft addresses; each member needs its own")
        if secret:
            try:
                import cryptography  # noqa: F401  (pysyncobj encrypts the Raft port with it)
            except ImportError as e:
                raise ValueError("cluster.secret needs the 'cryptography' package (pysyncobj encrypts the Raft "
                                 "port with it); install it or leave cluster.secret empty") from e
        self.store = store
        self.dedup = dedup
        self.node_id = node_id
        self.members = members
        self.me = next(m for m in members if m.id == node_id)
        self.raft_listen = raft_listen or self.me.raft_address
        self.cluster_name = cluster_name
        self.store_host = store_host
        self.settings = settings or RaftSettings()
        if dedup is not None:  # under sync a retry waits for the original's acknowledgement (durable), not its apply
            dedup.settle_at_apply = self.settings.durability == "async"
            dedup.lead(None)  # screening waits for this member's barrier of a term (``_become_leader``)
        self.raft_dir = raft_dir or os.path.join(store.config.root_dir, "raft")
        self.peers = Peers(members, node_id, secret, channel_credentials, channel_options)
        # membership (docs/design/membership.md)
        self.seed = membership.Membership(tuple(sorted(members, key=lambda m: m.id)))
        self.role: str | None = None  # membership.VOTER / LEARNER while the Raft member runs, else None
        self.not_member = ""  # why this member runs no Raft member: not added yet, or removed (not ready)
        self.removed = False  # the group removed this member (its data is not the group's any more)
        self._phase = ""  # what start() is doing, for the node's readiness (``phase``)
        self._copying: tuple[str, int, int] | None = None  # a copy from a peer running: (peer, from, to offset)
        self.auto_join = auto_join
        self.changes = MembershipChanges(self, join_policy=join_policy, retiring=retiring,
                                         on_event=on_membership_event or (lambda event, **fields: None))
        self._startup_voters: list[str] = []
        self._group_hint: membership.Membership | None = None  # the group's record as a peer last told it
        self._stop_event = threading.Event()
        self._membership_event = threading.Event()
        self._last_group_check = 0.0
        self.startup = fresh_start.StartupRecord(node_id)  # answers peers' GetStartupState
        self._secret = secret
        self._accept_peer = accept_peer
        self._raft_tls = raft_tls
        self.machine: StateMachine | None = None
        self._log: ReplicatedLog | None = None
        self._committer = GroupCommitter(
            self._commit, name="raftmq-raft-commit", max_batch_bytes=self.settings.max_batch_bytes,
            linger_s=self.settings.linger_s, max_pending_bytes=self.settings.max_pending_bytes,
            should_linger=lambda: bool(self._inflight))
        # topic changes of concurrent callers share one Raft command: proposed at once when none is in flight,
        # otherwise with those that arrived while it was (a create costs one round, not one round per topic)
        self._topic_committer = GroupCommitter(
            self._commit_topics, name="raftmq-topic-commit", max_batch_bytes=self.settings.max_batch_bytes,
            linger_s=0.0, max_pending_puts=1_000_000, size_of=_topic_op_size)
        self._inflight_slots = threading.BoundedSemaphore(self.settings.max_inflight_batches)
        self._inflight: dict[int, _InFlight] = {}
        self._inflight_lock = threading.Lock()
        self._next_id = 0
        self._writable_term = -1               # term in which the barrier succeeded; writable iff == current term
        self._transferring = False
        self._role_events: collections.deque = collections.deque()
        self._wake = threading.Condition()
        self._tick_tasks: collections.deque = collections.deque()
        self._offsets: dict[tuple[str, str], dict[int, int]] = {}
        self._offset_waiters: list[Future] = []
        self._offsets_lock = threading.Lock()
        self._done_q: collections.deque = collections.deque()
        self._done_cv = threading.Condition()
        self._proposed_bytes = 0
        self._running = False
        self._threads: list[threading.Thread] = []
        self.leader_changes = 0   # leaders this member has seen take over (metrics)
        self.term_changes = 0     # Raft term increments seen since start (metrics; a climbing term = flapping)
        self.leaderless_seconds = 0.0  # time this member knew no leader, since start (metrics)
        self._observed_lock = threading.Lock()  # guards the three counters above and what they were counted from
        self._observed: tuple[str | None, int, float] | None = None  # (leader address, term, when) last seen
        self.catch_up_bytes = 0   # commit-log bytes copied from peers (start-up rebuild + snapshot gaps; metrics)
        self.durable_ack_rounds = 0  # sync batches made durable on a majority without a SyncJournal round (metrics)
        self.catch_up_throttle = CatchUpThrottle(self.settings.catch_up_bytes_per_s,  # copies served to peers
                                                 self.settings.catch_up_max_streams)
        self.acked_batches = 0
        self._flushed_applied_index = -1  # applied index the last commit-log flush made durable (see below)

    # ================================================================== lifecycle
    def start(self) -> None:
        """Recover, find this member's place in the group, catch up if new, run the Raft member.

        A voter or learner starts its Raft member before this returns; a member the group does not list (new and
        not added yet, or removed) starts without one and the membership thread takes it from there
        (docs/design/membership.md)."""
        pysyncobj_patches.apply()
        makedirs_durably(self.raft_dir)
        applied = AppliedIndex(os.path.join(self.raft_dir, "applied.idx"))
        try:
            self._reconcile_store(applied)
        except BaseException:
            applied.close()
            raise
        machine = StateMachine(self.store, applied, self.dedup)
        machine.seed_membership = self.seed
        machine.snapshot_voters = self._snapshot_voters
        machine.on_membership = self._on_membership_applied
        machine.gap_fetcher = self._fetch_gap
        machine.gap_prover = self._prove_gap
        self.machine = machine
        journal = self._journal_path()
        if os.path.exists(journal) and os.path.getsize(journal) == 0:
            os.remove(journal)  # created but never written (crash at first start): pysyncobj cannot map it
        dump = os.path.join(self.raft_dir, "raft.dump")
        # no Raft state at all: no journal, no term or vote (the journal's meta file), no snapshot
        self.startup.set_fresh(not any(os.path.exists(p) for p in (journal, journal + ".meta", dump)))
        try:
            if not os.path.exists(journal) and self.peers.others:
                role = self._role_of_new_member()
            else:
                role = self._configuration().role(self.node_id) or self._role_in_group()
            self._running = True
            if role is not None:
                campaign = False
                if not os.path.exists(journal) and self.peers.others:
                    campaign = self._copy_from_peers(voter=role == membership.VOTER)
                machine.rebuild_dedup_window()  # from what recovery or the copy left; the journal replays on top
                self._start_log(role, campaign=campaign)
        except BaseException:
            self._running = False
            machine.applied.close()
            raise
        self.store.before_commit_log_flush = self._before_commit_log_flush
        self._committer.start()
        self._topic_committer.start()
        for name, target in (("raftmq-raft-roles", self._role_loop), ("raftmq-raft-housekeeping", self._housekeeping),
                             ("raftmq-raft-completion", self._completion_loop),
                             ("raftmq-raft-membership", self._membership_loop)):
            t = threading.Thread(target=_named(target, name.removeprefix("raftmq-")), name=name, daemon=True)
            t.start()
            self._threads.append(t)
        log.info("Raft write path started: member %s at %s as %s, durability %s; %s", self.node_id,
                 self.me.raft_address, role or "no member of the group", self.settings.durability,
                 self._configuration().describe())

    @property
    def phase(self) -> str:
        """What ``start`` (or a learner's start) is doing, for the node's readiness; "" when nothing."""
        copying = self._copying
        if copying is not None:
            peer, start, end = copying
            done = max(0, self.store.commit_log_max_offset - start)
            return (f"copying the group's commit log from {peer}: {done} of {max(0, end - start)} bytes "
                    f"({100 * done // max(1, end - start)}%)")
        return self._phase

    def _journal_path(self) -> str:
        return os.path.join(self.raft_dir, "raft.journal")

    def _copy_from_peers(self, voter: bool) -> bool:
        """Fresh or wiped member: copy what the group already has before joining Raft. A wiped voter also lost its
        term and vote, so it waits out one election timeout since this process started, unless the group provably
        holds no term or vote from before this process (replication/fresh_start.py, docs/design/fresh-start.md).
        The marker says the commit log holds only copied, committed records while the copy runs, so a restart after
        an interrupted copy resumes it instead of refusing an "unexplained" commit log. What the group wrote while
        the first round copied is copied by another round, and so on until a round copies at most
        ``learner_max_lag_bytes``: Raft then brings the rest, from the leader's journal or in one snapshot's gap
        (fetched on its tick thread, so it must be small). True when this voter should stand for election at once:
        the group is proven new and this is the first of the configured members."""
        began = time.monotonic()
        wait = self.settings.raft_max_timeout
        proof = fresh_start.GroupProof(False, False, "this member has Raft state of its own")
        if self.startup.fresh and voter:
            proof = fresh_start.prove_group_younger(self.peers, self.startup, began + wait)
        machine = self.machine
        applied = machine.applied
        before = self.store.commit_log_max_offset
        marker = self._copy_marker()
        with open(marker, "wb") as f:
            os.fsync(f.fileno())
        fsync_dir(self.raft_dir)
        self._phase = "copying the group's commit log from a peer"
        copied_any = False
        for round_no in range(1, MAX_COPY_ROUNDS + 1):
            if proof.all_starting:  # every other member still starting holds nothing to copy
                break
            round_start = self.store.commit_log_max_offset
            try:
                copied = catch_up.rebuild_from_peer(self.peers, self.store, machine.applier, applied,
                                                    self.store.config.mapped_file_size_commit_log,
                                                    copying=lambda peer, start, end: setattr(
                                                        self, "_copying", (peer, start, end)))
            except catch_up.CatchUpError as e:
                if not copied_any:
                    raise
                log.warning("copy round %d failed (%s): Raft brings the rest", round_no, e)
                break
            finally:
                self._copying = None
            if copied:
                copied_any = True
                dump = os.path.join(self.raft_dir, "raft.dump")
                if os.path.exists(dump):
                    os.remove(dump)  # a dump without its journal would describe a log this member no longer has
                self.store.wait_flushed(self.store.commit_log_max_offset, 60.0)
                applied.fsync()
            behind = self.store.commit_log_max_offset - round_start
            if not copied or (round_no > 1 and behind <= self.settings.learner_max_lag_bytes) or \
                    self._stop_event.is_set():
                break
            log.info("copy round %d copied %d bytes; copying what the group wrote meanwhile", round_no, behind)
        self.catch_up_bytes += max(0, self.store.commit_log_max_offset - before)
        if not copied_any and applied.last == (0, 0) and self.store.commit_log_max_offset > 0:
            # half a copy and no peer to finish it from: joining now would apply the log over those bytes
            raise ReplicationError("this member's start-up copy from its peers was interrupted and no peer is "
                                   "reachable to finish it; start it again once a majority of members is up")
        os.remove(marker)
        fsync_dir(self.raft_dir)
        self._phase = ""
        if not voter:
            return False
        if proof.proven:
            log.info("joining Raft at once: %s, so no member holds a vote this member may have given before it "
                     "started", proof.reason)
            return self.members[0].id == self.node_id
        # it may have voted in the current term before it lost its disk: let any such election end first
        left = began + wait - time.monotonic()
        log.info("joining Raft after one election timeout (%.1fs more): %s", max(0.0, left), proof.reason)
        if left > 0:
            self._stop_event.wait(left)
        return False

    def _start_log(self, role: str, campaign: bool = False) -> None:
        """Run the Raft member as a voter, or as a learner (a pysyncobj read-only node), with the configuration
        from the log (``_configuration``); ``campaign``: stand for election at once (``_copy_from_peers``)."""
        self.startup.mark_raft_started()  # from here on this member may vote
        s = self.settings
        voter = role == membership.VOTER
        config = self._configuration()
        self._startup_voters = [m.raft_address for m in config.voters]
        conf = SyncObjConf(
            journalFile=self._journal_path(), fullDumpFile=os.path.join(self.raft_dir, "raft.dump"),
            serializer=self.machine.serialize, deserializer=self.machine.deserialize,
            appendEntriesUseBatch=False, appendEntriesPeriod=s.append_entries_period,
            appendEntriesBatchSizeBytes=max(8 << 20, 2 * self.store.config.max_message_size + s.max_batch_bytes),
            raftMinTimeout=s.raft_min_timeout, raftMaxTimeout=s.raft_max_timeout,
            leaderFallbackTimeout=s.leader_fallback_timeout, connectionTimeout=s.connection_timeout,
            connectionRetryTime=s.connection_retry_time,
            commandsQueueSize=4 * s.max_inflight_batches + 64, commandsWaitLeader=False,
            logCompactionMinEntries=s.compaction_min_entries, logCompactionMinTime=s.compaction_min_time,
            # the split schedules compactions by the member's place among the voters: a learner has none
            logCompactionSplit=voter, sendBufferSize=1 << 20, recvBufferSize=1 << 20,
            dnsCacheTime=s.dns_cache_time, dnsFailCacheTime=1.0, bindAddress=self.raft_listen if voter else None,
            onStateChanged=self._on_state_changed, password=self._secret or None,
            maxBindRetries=BIND_RETRIES, bindRetryTime=1.0, dynamicMembershipChange=True,
        )
        others = [a for a in self._startup_voters if a != self.me.raft_address]
        lg = ReplicatedLog(self.me.raft_address if voter else None, others, conf, self.machine,
                           accept_peer=self._accept_peer, tls=self._raft_tls,
                           durable_acks=s.durability == "sync", learner_address=self.me.raft_address)
        try:
            if voter:  # a read-only node listens on no port (pysyncobj never signals its bind)
                lg.waitBinded()
        except Exception:
            lg.destroy()
            raise ReplicationError(f"cannot listen for Raft peers on {self.raft_listen} (port in use, or the address "
                                   "is not on this host); fix cluster.raft_listen / the member's raft address") from None
        lg.on_config_change = self._on_config_change
        self.machine.entry_term = lg.entry_term
        if campaign:
            self._tick_tasks.append((lg.campaign_now, Future()))
        self._tick_tasks.append((lambda: name_native_thread("raft-tick"), Future()))  # pysyncobj's thread
        lg.addOnTickCallback(self._on_tick)
        self._log = lg
        self.role = role
        self._refresh_peers()

    def _stop_log(self) -> None:
        """Stop the Raft member (a role change or a removal); the write path keeps running."""
        lg, self._log = self._log, None
        if lg is None:
            return
        lg.destroy()
        deadline = time.monotonic() + 5
        while lg.tick_thread_alive() and time.monotonic() < deadline:
            time.sleep(0.02)

    # ================================================================== membership (docs/design/membership.md)
    def _record(self) -> membership.Membership:
        """The group's membership record as of this member's applied index, else the seed (``cluster.members``)."""
        record = self.machine.membership if self.machine is not None else None
        return record if record is not None else self._group_hint or self.seed

    def configuration(self) -> membership.Membership:
        """This member's view of the configuration: who votes now (appended changes count) and who learns."""
        return self._configuration()

    def _configuration(self) -> membership.Membership:
        """The record plus the voter changes appended after it: before the Raft member runs, the journal's
        ``MEMBERSHIP`` entries replayed in order; while it runs, pysyncobj's voters (it applies each change as it
        is appended or truncated), named by the record."""
        record = self._record()
        lg = self._log
        if lg is None:
            changes = []
            for index, command in pysyncobj_patches.journal_commands(self._journal_path(),
                                                                     membership.MEMBERSHIP_COMMAND):
                change = membership.decode_change(command)
                if change is not None:
                    changes.append((index, change))
            return membership.replay(record, changes)
        addresses = lg.voter_addresses
        known = {m.raft_address: m for m in (*self.seed.voters, *record.voters, *record.learners)}
        voters = tuple(sorted((known.get(a) or MemberInfo(a, a, "") for a in addresses), key=lambda m: m.id))
        learners = tuple(m for m in record.learners if m.raft_address not in addresses)
        return membership.Membership(voters, learners, record.replaces, record.index)

    def _snapshot_voters(self, record: membership.Membership | None, from_leader: bool) -> list[str]:
        """The voters pysyncobj runs with after loading a snapshot (tick thread). Its dump names the voters as they
        were when it was written, uncommitted changes included (PySyncObj#133): at start the configuration from
        the log is used instead, for a leader's snapshot the committed record it carries."""
        if from_leader and record is not None:
            return [m.raft_address for m in record.voters]
        if from_leader and self._log is not None:  # a leader of a version without records: keep ours
            return sorted(self._log.voter_addresses)
        return list(self._startup_voters)

    def _on_membership_applied(self) -> None:
        """The state machine applied a change to the record (tick thread, under its lock): wake the membership
        thread, nothing more."""
        self._membership_event.set()

    def _on_config_change(self) -> None:
        """pysyncobj changed the voters (tick thread): wake the membership thread."""
        self._membership_event.set()

    def _refresh_peers(self) -> None:
        config = self._configuration()
        self.peers.update(config.voters, config.learners)

    def _role_of_new_member(self) -> str | None:
        """A member without a Raft journal: its place in the group's record (asked from the peers). A brand-new
        group has no record yet: every member of ``cluster.members`` is then a voter (a simultaneous start)."""
        deadline = time.monotonic() + 3 * self.settings.raft_max_timeout
        while True:
            view = self._ask_group()
            if view.answered or time.monotonic() >= deadline or self._stop_event.is_set():
                break
            self._phase = "asking the members of cluster.members for the group's membership"
            self._stop_event.wait(0.5)
        self._phase = ""
        if view.record is None:
            if view.answered:
                log.info("no member has a membership record yet: joining as a voter of cluster.members")
            else:
                log.warning("no member of cluster.members answered: starting as a voter of cluster.members")
            return membership.VOTER
        return self._role_from(view, fresh=True)

    def _role_in_group(self) -> str | None:
        """A member whose own configuration does not list it: the group may have added it back as a learner;
        otherwise it was removed."""
        return self._role_from(self._ask_group(), fresh=False)

    def _role_from(self, view: _GroupView, fresh: bool) -> str | None:
        if view.leader_voters and self.me.raft_address in view.leader_voters:
            return membership.VOTER  # promoted, the record not applied yet
        role = view.record.role(self.node_id) if view.record is not None else None
        if role is not None:
            return role
        if view.record is None:
            self.not_member = ("its own membership record does not list it and no member has answered with the "
                               "group's yet; asking again")
        elif fresh:
            self._not_a_member(view)
        else:
            self._become_removed(f"removed from the group (its membership is {view.record.describe()})")
        return None

    def _not_a_member(self, view: _GroupView) -> None:
        voters = view.record.describe() if view.record is not None else "unknown"
        how = ("it asks the leader to add it as a learner (cluster.auto_join)" if self.auto_join else
               f"add it with `raftmq cluster add-member {self.node_id} --raft {self.me.raft_address} --grpc "
               f"{self.me.grpc_address}`")
        self.not_member = f"not a member of the group yet ({voters}): {how}"

    def _become_removed(self, why: str) -> None:
        """The group no longer lists this member: stop the Raft member, keep the data, report it (not ready)."""
        if self._log is not None:
            self._stop_log()
        self.role = None
        self.removed = True
        self.not_member = (f"{why}; it no longer takes part in the group. Its data is kept: to add it again, move its "
                           "data directory away and add it with `raftmq cluster add-member`")
        log.error("member %s: %s", self.node_id, self.not_member)

    def cancel_start(self) -> None:
        """The node is stopping while ``start`` waits for the group: give up waiting."""
        self._stop_event.set()

    def _ask_group(self) -> _GroupView:
        """Ask every member this one knows of (voters and learners of its configuration and of the seed) for its
        record, role and voters; the leader of the highest term among the answers speaks for the group."""
        statuses = catch_up.peer_statuses(self.peers, timeout=PEER_STATUS_TIMEOUT_S, with_metadata=False,
                                          members=self.peers.everyone())
        view = _GroupView.of(statuses)
        if view.record is not None:
            self._group_hint = view.record  # names the group for a member without a record of its own
        return view

    def _membership_loop(self) -> None:
        while self._running:
            self._membership_event.wait(MEMBERSHIP_POLL_S)
            self._membership_event.clear()
            if not self._running:
                return
            try:
                self._membership_step()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad step; it is retried
                log.exception("membership step failed; retrying")

    def _membership_step(self) -> None:
        self._refresh_peers()
        lg = self._log
        now = time.monotonic()
        if lg is None:
            if not self.removed and now - self._last_group_check >= GROUP_CHECK_S:
                self._last_group_check = now
                self._try_to_join()
            return
        if self.role == membership.LEARNER and self.me.raft_address in lg.voter_addresses:
            log.warning("member %s was promoted to voter: restarting its Raft member as a voter", self.node_id)
            self._switch(membership.VOTER)
            return
        leader, age = self.leader_contact()
        record = self.machine.membership
        suspicious = leader is None or age > self.settings.raft_max_timeout or (
            record is not None and record.role(self.node_id) is None)
        if suspicious and now - self._last_group_check >= GROUP_CHECK_S:
            self._last_group_check = now
            self._check_still_member(lg)
        if lg.is_leader() and self.is_writable():
            self.changes.leader_step()

    def _check_still_member(self, lg: ReplicatedLog) -> None:
        """No leader for a while, or this member's record does not list it: ask the group's leader whether this
        member is still in its configuration (a removed voter is never told: the leader stops talking to it)."""
        view = self._ask_group()
        if view.leader_id is None or view.leader_id == self.node_id or view.leader_term < lg.raftCurrentTerm:
            return
        if self.me.raft_address in view.leader_voters:
            return
        group_role = view.leader_record.role(self.node_id) if view.leader_record is not None else None
        if group_role == membership.LEARNER and self.role == membership.VOTER:
            log.warning("member %s: the leader %s (term %d) does not count it as a voter (its promotion did not "
                        "commit): running as a learner again", self.node_id, view.leader_id, view.leader_term)
            self._switch(membership.LEARNER)
        elif group_role is None and view.leader_record is not None:
            self._become_removed(f"removed from the group: the leader {view.leader_id} (term {view.leader_term}) "
                                 f"no longer lists it (the group's membership is {view.leader_record.describe()})")

    def _try_to_join(self) -> None:
        """Not a member yet: start once the group lists this member; with ``auto_join`` ask the leader first."""
        view = self._ask_group()
        if not view.answered:
            return
        fresh = not os.path.exists(self._journal_path())
        role = self._role_from(view, fresh=fresh)
        if self.removed:
            return
        if role is not None:
            log.info("member %s is a %s of the group (%s): starting its Raft member", self.node_id, role,
                     view.record.describe())
            self.not_member = ""
            campaign = self._copy_from_peers(voter=role == membership.VOTER) if fresh else False
            self.machine.rebuild_dedup_window()  # what the copy brought
            self._start_log(role, campaign=campaign)
            return
        if not self.auto_join or view.leader_id is None or not fresh:
            return
        try:
            resp = self.peers.stub(view.leader_id).JoinGroup(replica_pb2.JoinGroupRequest(
                member_id=self.node_id, raft_address=self.me.raft_address, grpc_address=self.me.grpc_address),
                timeout=self.settings.put_timeout_s + 2, metadata=self.peers.metadata)
        except grpc.RpcError as e:
            self.not_member = (f"not a member of the group yet: asking the leader {view.leader_id} to add it "
                               f"failed: {e.code().name} {e.details()}")
            log.warning("member %s: %s", self.node_id, self.not_member)
            return
        if resp.refusal:
            self.not_member = f"not a member of the group: the leader {view.leader_id} refused to add it: {resp.refusal}"
            log.warning("member %s: %s", self.node_id, self.not_member)
        else:
            log.info("member %s: the leader %s added it as a learner", self.node_id, view.leader_id)
            self._membership_event.set()

    def _switch(self, role: str) -> None:
        """Restart the Raft member in another role on the same journal (promotion, or a promotion undone)."""
        self._stop_log()
        self._start_log(role)

    def _reconcile_store(self, applied: AppliedIndex) -> None:
        """Restart rule (docs/design/durability.md): the store recovered its commit log to V. Frames whose bytes did
        not reach the disk (beyond V), or whose entries this member's Raft log no longer holds, are forgotten.
        Commit-log bytes beyond the last remaining frame are withheld, not cut: replaying the entries adopts them
        when they are exactly what those entries wrote, and a committed entry that differs cuts them."""
        v = self.store.commit_log_max_offset
        idx, end = applied.drop_beyond(v)
        reach = self._raft_log_reach()
        if reach is not None and idx > reach:
            log.warning("the applied index says Raft entry %d was applied but this member's Raft log ends at entry "
                        "%d (a power cut kept one and not the other): forgetting the entries after %d; their "
                        "commit-log bytes wait for the log to confirm them", idx, reach, reach)
            idx, end = applied.drop_beyond_index(reach)
        if end < v:
            if idx == 0 and end == 0 and os.path.exists(self._copy_marker()):
                log.info("resuming the interrupted copy from peers at commit-log offset %d", v)
                self.store.confirm_offset = v  # copied records are committed ones
                return
            if idx == 0 and end == 0 and reach is None:
                raise ReplicationError(
                    f"the store at {self.store.config.root_dir} holds {v} bytes of commit log written outside Raft "
                    "(e.g. by a single-node run); a replicated member must start from an empty data directory "
                    "(it then copies the group's data) or from a copy of another member's data directory. Move "
                    "this data directory away and start again.")
            log.warning("commit log [%d, %d) lies beyond the last Raft entry this member knows it applied (entry %d)"
                        ": withheld until replayed entries confirm it", end, v, idx)
            self.store.withhold_tail(end)
        self.store.confirm_offset = end

    def _raft_log_reach(self) -> int | None:
        """The last Raft index this member's own log still holds or covers with its snapshot; None when it has
        neither a journal file nor a snapshot (a new or wiped member)."""
        span = pysyncobj_patches.journal_span(os.path.join(self.raft_dir, "raft.journal"))
        try:
            dumped = snapshot.read_file(os.path.join(self.raft_dir, "raft.dump"))[0].raft_index
        except FileNotFoundError:
            dumped = None
        except snapshot.SnapshotError as e:
            log.error("%s; it is ignored", e)
            dumped = None
        if span is None and dumped is None:
            return None
        return max(span.last[0] if span is not None and span.last is not None else 0, dumped or 0)

    def _before_commit_log_flush(self) -> None:
        """The store's flush thread, before commit-log bytes go to disk: the Raft journal holding the entries that
        wrote them, then the applied index mapping them, are synced first (docs/design/durability.md). Under
        ``async`` this is also what bounds a power cut's loss to what arrived since the last flush: the journal is
        synced nowhere else. The journal is opened by name (the tick thread owns pysyncobj's descriptor; a
        compaction replaces the file only after syncing it)."""
        machine = self.machine
        if machine is None or not self._running:
            return
        applied = machine.applied.last[0]
        if applied == self._flushed_applied_index:
            return  # nothing applied since the last flush: both files are already synced that far
        if self.settings.durability == "async":
            try:
                fd = os.open(os.path.join(self.raft_dir, "raft.journal"), os.O_RDONLY)
            except FileNotFoundError:
                fd = -1
            if fd >= 0:
                try:
                    sync_fd(fd)
                finally:
                    os.close(fd)
        machine.applied.fsync()
        self._flushed_applied_index = applied

    def _copy_marker(self) -> str:
        """Present while the start-up copy from peers runs (see ``start``)."""
        return os.path.join(self.raft_dir, "catch-up.partial")

    def hand_off_leadership(self, timeout: float = 3.0) -> None:
        """Graceful stop, first step: a leader hands leadership to a caught-up member and logs to whom. Never
        raises (a stop goes on without a hand-off); nothing to do on a follower or a single member.

        The node calls it before it drains its calls: a leader that drained first refused every write until its
        calls stopped, and under load (clients retrying, members forwarding to it) they never stopped. From here
        on this member no longer stands for election (it still votes): a stopping member that won the next
        election had to hand leadership away again, and a rolling restart stalled ~20 s on it."""
        log_ = self._log
        if log_ is not None:
            log_.retiring = True
        if not (self._running and self.is_leader() and self.peers.others):
            return
        if not any(log_.isNodeConnected(n) for n in list(log_.otherNodes)):
            # e.g. the last member of a group stopping (`make stop`): waiting for a transfer would only time out
            log.info("graceful stop: no other member is connected to hand leadership to")
            return
        try:
            self.transfer_leadership(None, timeout=timeout)
            new = self.leader()
            if new is not None and new.id != self.node_id:
                log.info("graceful stop: handed leadership to %s", new.id)
            else:  # e.g. `make stop` stops every member at once: nobody is left to be elected
                log.info("graceful stop: stepped down as leader; no new leader elected yet (the other members "
                         "may be stopping too)")
        except ReplicationError as e:
            log.warning("graceful stop could not hand off leadership: %s", e)

    def stop(self) -> None:
        self._stop_event.set()
        if not self._running:
            return
        self.hand_off_leadership()  # the node did it already, unless this member became leader again meanwhile
        leader = self.leader()
        redirect = NotLeaderError(leader.grpc_address) if leader and leader.id != self.node_id \
            else WritePathStoppedError()
        self._running = False
        self.store.before_commit_log_flush = None
        self._writable_term = -1
        self._committer.stop(redirect)
        self._topic_committer.stop(redirect)
        self._fail_inflight(UnknownOutcomeError("node shutting down"))
        if self.dedup is not None:
            self.dedup.leadership_lost(UnknownOutcomeError("node shutting down"))
        with self._wake:
            self._wake.notify_all()
        with self._done_cv:
            self._done_cv.notify_all()
        self._membership_event.set()
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()
        self._stop_log()
        if self.machine is not None:
            self.machine.applied.close()
        self.peers.close()

    # ================================================================== state helpers
    def is_leader(self) -> bool:
        return self._log is not None and self._log.is_leader()

    def term(self) -> int:
        return self._log.raftCurrentTerm if self._log is not None else 0

    def commit_index(self) -> int:
        return self._log.raftCommitIndex if self._log is not None else 0

    def raft_applied_index(self) -> int:
        return self._log.raftLastApplied if self._log is not None else 0

    @property
    def snapshot_installs(self) -> int:
        """Snapshots received from a leader since start; a steady rise means compaction outruns a lagging member."""
        return self.machine.snapshot_installs if self.machine is not None else 0

    @property
    def snapshot_bytes_kept(self) -> int:
        """Commit-log bytes a snapshot install kept because a peer's digests proved them (not copied again)."""
        return self.machine.snapshot_bytes_proven if self.machine is not None else 0

    def election_counters(self) -> dict[str, int]:
        """Elections this member started, pre-votes it asked for, tick-thread stalls it survived (metrics)."""
        lg = self._log
        return {"elections": getattr(lg, "elections_started", 0), "pre_votes": getattr(lg, "pre_votes_started", 0),
                "tick_stalls": getattr(lg, "tick_stalls", 0),
                "resent_known_entries": getattr(lg, "resent_known_entries", 0),
                "stale_acks_dropped": getattr(lg, "stale_acks_dropped", 0),
                "journal_torn_tail_bytes": getattr(lg, "journal_torn_tail_bytes", 0),
                "rewound_entries": getattr(lg, "rewound_entries", 0),
                "withheld_bytes_adopted": self.machine.tail_bytes_adopted if self.machine is not None else 0,
                "withheld_bytes_cut": self.machine.tail_bytes_cut if self.machine is not None else 0,
                "stale_batches_dropped": self.machine.stale_batches_dropped if self.machine is not None else 0}

    def is_writable(self) -> bool:
        return (self._running and not self._transferring and self.machine is not None and not self.machine.fenced
                and self.is_leader() and self._writable_term == self.term())

    def leader(self) -> MemberInfo | None:
        if self._log is None:
            return None
        return self.peers.by_raft_address(self._observe_leadership())

    def _observe_leadership(self) -> str | None:
        """The leader's Raft address as pysyncobj knows it now, counting a new leader, term increments and time
        without a leader (metrics). Housekeeping calls it every tick and every ``leader()`` read does, so whoever
        has seen a leader (a scrape's has_leader gauge) also finds its taking over counted."""
        current = self._log.leader_address() if self._log is not None else None
        term = self.term()
        with self._observed_lock:
            now = time.monotonic()
            if self._observed is None:
                seen_leader, seen_term, last = None, term, now
            else:
                seen_leader, seen_term, last = self._observed
            if current is not None and current != seen_leader:  # a leader other than the last one took over
                self.leader_changes += 1
                seen_leader = current
            if term > seen_term:
                self.term_changes += term - seen_term
                seen_term = term
            if current is None:
                self.leaderless_seconds += now - last
            self._observed = (seen_leader, seen_term, now)
        return current

    def catch_up_with_leader(self, timeout: float) -> bool:
        """Wait until this member has applied what the leader had committed when asked (its commit index, read
        over the replica service), so a change acknowledged before the call (a new ACL user or rule) is seen here
        too: a follower learns of commits up to COMMIT_NOTICE_S late. True at once on the leader, which applies
        before it acknowledges; False when the leader cannot be asked or this member does not get there in time."""
        if self._log is None or self.is_leader():
            return self._log is not None
        leader = self.leader()
        if leader is None or leader.id == self.node_id:
            return False
        deadline = time.monotonic() + timeout
        try:
            status = self.peers.stub(leader.id).GetReplicaStatus(replica_pb2.GetReplicaStatusRequest(
                skip_metadata=True), timeout=timeout, metadata=self.peers.metadata)
        except grpc.RpcError as e:
            log.info("could not read the leader's commit index from %s: %s", leader.id, e.code().name)
            return False
        while self.raft_applied_index() < status.commit_index:
            if time.monotonic() >= deadline:
                return False
            time.sleep(CATCH_UP_POLL_S)
        return True

    def not_ready_reason(self) -> str:
        """Why this member must not take traffic yet ("" when it may): it cannot apply the next committed entry,
        or it has not yet applied what its leader had committed in the leader's term since it started
        (``ReplicatedLog.caught_up``), so it would serve a store that is behind the group's."""
        lg = self._log
        if lg is None:
            return self.not_member or self.phase or "the Raft write path is not started"
        if lg.apply_stuck:
            return lg.apply_stuck
        if not lg.caught_up:
            where = f"applied Raft index {lg.raftLastApplied}, commit index {lg.raftCommitIndex}"
            if self.leader() is None:
                return f"no leader to catch up with (election in progress or no majority reachable; {where})"
            return f"catching up with the group's log ({where})"
        return ""

    def leader_contact(self) -> tuple[MemberInfo | None, float]:
        """(leader, seconds since this member last heard from it); 0 on the leader itself. A follower that has
        not heard its leader for a while (stopped, cut off) should not hand it work (node/forwarding.py)."""
        leader = self.leader()
        if leader is None or self._log is None:
            return None, float("inf")
        if leader.id == self.node_id:
            return leader, 0.0
        return leader, time.monotonic() - self._log.leader_heard_at

    def _not_writable_error(self) -> ReplicationError:
        if not self._running:
            return WritePathStoppedError()
        if self.machine is not None and self.machine.fenced:
            return NoLeaderError(f"this member is fenced ({self.machine.fenced})")
        if self.is_leader():
            return NoLeaderError("this member was just elected and is applying its barrier entry"
                                 if not self._transferring else "leadership transfer in progress")
        leader = self.leader()
        if leader is None:
            return NoLeaderError()
        return NotLeaderError(leader.grpc_address)

    # ================================================================== tick-thread tasks
    def _on_tick(self) -> None:
        while self._tick_tasks:
            fn, fut = self._tick_tasks.popleft()
            try:
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)

    def _on_tick_thread(self, fn, timeout: float) -> Any:
        """Run ``fn`` on pysyncobj's tick thread (where its state may be touched) and wait for the result."""
        fut: Future = Future()
        self._tick_tasks.append((fn, fut))
        notifier = getattr(self._log, "_SyncObj__pipeNotifier", None)
        if notifier is not None:
            notifier.notify()
        return fut.result(timeout)

    # ================================================================== role changes
    def _on_state_changed(self, old: int, new: int) -> None:  # tick thread: only enqueue
        self._role_events.append((old, new))
        with self._wake:
            self._wake.notify_all()

    def _role_loop(self) -> None:
        while self._running:
            with self._wake:
                if not self._role_events:
                    self._wake.wait(0.5)
            while self._role_events:
                old, new = self._role_events.popleft()
                if new == _LEADER:
                    self._become_leader()
                elif old == _LEADER:
                    self._writable_term = -1
                    log.warning("member %s is no longer leader (term %d); failing in-flight writes", self.node_id,
                                self.term())
                    self._committer.fail_queued(self._not_writable_error())
                    self._topic_committer.fail_queued(self._not_writable_error())
                    self._fail_inflight(UnknownOutcomeError("leadership lost while the write was in flight"))
                    if self.dedup is not None:  # retries waiting for an original: unknown too
                        self.dedup.leadership_lost(UnknownOutcomeError(LEADERSHIP_LOST))
                    if self.settings.durability == "sync":  # committed, but not known durable on a majority
                        self._fail_completions(UnknownOutcomeError("leadership lost before the sync round "
                                                                   "completed"))

    def _become_leader(self) -> None:
        term = self.term()
        try:
            self._propose_meta("barrier", {"term": term, "member": self.node_id}, require_writable=False)
        except ReplicationError as e:
            log.warning("barrier for term %d failed (%s); not accepting writes", term, e)
            return
        if self.is_leader() and self.term() == term:
            if self.dedup is not None:  # before writes are taken: screening registers ids for this term only
                self.dedup.lead(term)
            self._writable_term = term
            log.info("member %s is leader for term %d and accepts writes", self.node_id, term)

    # ================================================================== puts
    def put(self, msgs: list[Any]) -> Future:
        if not self.is_writable():
            f: Future = Future()
            f.set_exception(self._not_writable_error())
            return f
        return self._committer.submit(list(msgs))

    def put_many(self, puts: list[list[Any]]) -> list[Future]:
        """Independent puts queued together (a stream request's sends): one group commit, one Raft entry."""
        if not self.is_writable():
            err = self._not_writable_error()
            out = []
            for _ in puts:
                f: Future = Future()
                f.set_exception(err)
                out.append(f)
            return out
        return self._committer.submit_many([list(m) for m in puts])

    def group_commit_stats(self) -> tuple[int, int, int]:
        """(group commits, messages, requests) so far; each group commit is proposed as one Raft entry."""
        c = self._committer
        return c.batches, c.batched_msgs, c.batched_puts

    def write_stage_seconds(self) -> dict[str, tuple[int, float]]:
        return self.machine.stage_times.snapshot() if self.machine is not None else {}

    def _commit(self, batch: list[PendingPut]) -> None:
        """Committer thread: one Raft command per group commit."""
        # The term whose window the screening below trusts, read before anything else: the command carries it, and
        # a command appended in any other term is dropped at apply (StateMachine.apply_batch). Read later, a term
        # this member learned meanwhile as a follower would let pysyncobj's forward of the batch to the new leader
        # pass as screened by it.
        term = self._writable_term
        if not self.is_writable() or term != self.term():
            err = self._not_writable_error()
            for p in batch:
                p.fail(err)
            return
        took = time.monotonic()
        now = _now_ms()
        if self.dedup is not None:
            screened = self.dedup.screen(batch, now, term)  # duplicates answered or waiting: not proposed again
            if screened is None:  # leadership of ``term`` lost meanwhile: nothing registered, nothing proposed
                err = self._not_writable_error()
                for p in batch:
                    p.fail(err)
                return
            batch = screened
            if not batch:
                return
        if not self._inflight_slots.acquire(timeout=self.settings.put_timeout_s):
            for p in batch:
                p.fail(BusyError(f"{self.settings.max_inflight_batches} batches waiting for a majority"))
            return
        try:
            encoded = self.machine.applier.encode_isolating(batch, now)
        except BaseException as e:
            self._inflight_slots.release()
            for p in batch:
                p.fail(e)
            raise
        if encoded is None:
            self._inflight_slots.release()
            return
        blob, puts = encoded
        command = frame_batch(blob, self.dedup.keys_of(puts) if self.dedup is not None else (), term)
        proposed = time.monotonic()
        stages = self.machine.stage_times
        stages.add("group_commit_wait", took - batch[0].enqueued_at)
        stages.add("propose", proposed - took)
        with self._inflight_lock:
            self._next_id += 1
            rid = self._next_id
            self._inflight[rid] = _InFlight(puts, proposed + self.settings.put_timeout_s, proposed)
        self._proposed_bytes += len(command)
        self._log.apply_batch(command, callback=lambda res, err, rid=rid: self._on_batch_done(rid, res, err))

    def _take_inflight(self, rid: int, release: bool = True) -> _InFlight | None:
        with self._inflight_lock:
            rec = self._inflight.pop(rid, None)
        if rec is not None and release:
            self._inflight_slots.release()
        return rec

    def _on_batch_done(self, rid: int, res: Any, err: int) -> None:
        """Tick thread: resolve a small ``async`` batch here, hand any other outcome to the completion thread;
        never raise (an exception here would abort pysyncobj's tick after the entry was applied)."""
        try:
            ok = self._confirmed(res, err)
            # sync mode keeps the in-flight slot until the fsync round: the queue grows, batches get bigger
            hold = ok and self.settings.durability == "sync"
            rec = self._take_inflight(rid, release=not hold)
            if rec is None:
                return  # already timed out or failed on a role change
            if ok:
                index, term, results = res
                self.acked_batches += 1
                self.machine.stage_times.add("raft_round", time.monotonic() - rec.proposed_at)
                if not hold and len(rec.puts) <= INLINE_RESOLVE_MAX_PUTS:
                    # nothing left to wait for: a hop to the completion thread would only add a wake-up
                    self._resolve(rec.puts, results)
                    return
                with self._done_cv:
                    self._done_q.append((index, term, rec.puts, results, rec.deadline))
                    self._done_cv.notify()
                return
            exc = self._error_for(err)
            for p in rec.puts:
                p.fail(exc)
        except Exception:
            log.exception("completing Raft batch %d failed", rid)

    def _confirmed(self, res: Any, err: int) -> bool:
        """In an apply callback (tick thread): the entry was applied and this member still leads the term it was
        proposed in (``res`` is StateMachine's (index, term, outcome)).

        Only then is an applied entry of its own known to be committed by the group: a deposed member may apply
        an entry that only its log holds if a commit rule has a hole (pysyncobj had one: see
        ``ReplicatedLog._on_snapshot_message``). Its outcome is then unknown, never acknowledged."""
        return (err == FAIL_REASON.SUCCESS and res is not None and res[1] is not None and self._log.is_leader()
                and self._log.raftCurrentTerm == res[1])

    def _error_for(self, err: int) -> ReplicationError:
        """The error of an apply callback that was not ``_confirmed``."""
        if err == FAIL_REASON.SUCCESS:
            return UnknownOutcomeError(LEADERSHIP_LOST)
        if err in (FAIL_REASON.QUEUE_FULL,):
            return BusyError("Raft command queue full")
        if err in (FAIL_REASON.MISSING_LEADER, FAIL_REASON.NOT_LEADER, FAIL_REASON.LEADER_CHANGED):
            return self._not_writable_error()
        return UnknownOutcomeError(f"pysyncobj reported {err}")

    def _fail_inflight(self, exc: ReplicationError) -> None:
        with self._inflight_lock:
            recs = list(self._inflight.values())
            n = len(recs)
            self._inflight.clear()
        for _ in range(n):
            self._inflight_slots.release()
        for rec in recs:
            for p in rec.puts:
                p.fail(exc)

    # ================================================================== sync durability
    def sync_local(self, index: int, term: int, timeout: float = 5.0) -> tuple[bool, int]:
        """Make this member's Raft journal durable and say whether entry (index, term) is in it.

        The journal is what makes an entry durable, on the leader as on a follower: the commit log is derived from
        it, reaches the disk by the store's flush service and before every Raft snapshot (pysyncobj drops journal
        entries only then), and on restart whatever a power cut took of it is replayed from the journal. So no
        commit-log or applied-index fsync here: they cost every ``sync`` group commit two more disk round trips
        and did not make anything more durable. Only the journal sync and the reading of positions run on
        pysyncobj's tick thread (the journal may be rewritten by compaction there). A leader in ``sync`` mode syncs
        its journal right after sending entries (``ReplicatedLog.journal_synced``): an entry of that term at or
        below the synced index needs no turn of the tick thread (a leader never truncates its own log within its
        term)."""
        def do() -> tuple[bool, int]:
            lg = self._log
            last = lg.last_log_index()
            lg.flush_journal()
            if index > last:
                return False, last
            t = lg.entry_term(index)
            if t is None:  # compacted away: in a snapshot, written only after the commit log was flushed up to it
                return self.machine.applied.last[0] >= index or lg.raftLastApplied >= index, last
            return t == term, last
        if self._log is None:
            return False, 0
        synced_index, synced_term = self._log.journal_synced
        if synced_term == term and synced_index >= index:
            return True, synced_index
        return self._on_tick_thread(do, timeout)

    def _completion_loop(self) -> None:
        """Resolve committed batches off the tick thread: every ``sync`` batch and the ``async`` ones too big to
        resolve there. In ``sync`` mode, first one fsync round on a majority covers every batch committed since the
        previous round (group commit for durability)."""
        while self._running:
            with self._done_cv:
                while self._running and not self._done_q:
                    self._done_cv.wait(0.5)
                items = list(self._done_q)
                self._done_q.clear()
            if not items:
                continue
            ok = True
            if self.settings.durability == "sync":
                lg = self._log
                majority = len(lg.voter_addresses) // 2 + 1 if lg is not None else 1  # the configuration now
                index, term = max((it[0], it[1]) for it in items)
                deadline = max(it[4] for it in items)
                ok = False
                while self._running and time.monotonic() < deadline and self.is_leader():
                    if self._durable_on_majority(index, term, majority, deadline):
                        ok = True
                        break
                    time.sleep(0.05)
            for it in items:
                if ok:
                    self._resolve(it[2], it[3])
                else:
                    for p in it[2]:
                        p.fail(UnknownOutcomeError("could not make the write durable on a majority in time"))
            if self.settings.durability == "sync":
                for _ in items:
                    self._inflight_slots.release()

    def _resolve(self, puts: list[PendingPut], results: list[Any]) -> None:
        try:
            self.machine.applier.resolve(puts, results)
        except Exception as e:
            log.exception("resolving a committed batch failed")
            for p in puts:
                p.fail(e)

    def _durable_on_majority(self, index: int, term: int, majority: int, deadline: float) -> bool:
        """After entry (index, term) committed: when every peer acknowledges only what its journal holds on disk
        (raft_log: durable acks), the peers that made the commit already did, and this member's own fsync
        completes the majority; otherwise one SyncJournal round."""
        if self._log is not None and self._log.peers_ack_durably():
            self.durable_ack_rounds += 1
            return self.sync_local(index, term, max(0.05, deadline - time.monotonic()))[0]
        return self._sync_round(index, term, majority, deadline)

    def _sync_round(self, index: int, term: int, majority: int, deadline: float | None = None) -> bool:
        """Ask every member to make (index, term) durable; True as soon as a majority says it is.

        Replies are counted as they arrive, so one silent or slow peer never delays the round while the others
        can form the majority (a round used to wait for the peers in list order, each with its own deadline).
        """
        timeout = SYNC_ROUND_TIMEOUT_S if deadline is None else \
            max(0.05, min(SYNC_ROUND_TIMEOUT_S, deadline - time.monotonic()))
        req = replica_pb2.SyncJournalRequest(index=index, term=term)
        done = threading.Condition()
        state = {"durable": 0, "answered": 0}

        def on_reply(fut) -> None:
            try:
                durable = (not fut.cancelled()) and fut.exception() is None and fut.result().durable
            except Exception:  # noqa: BLE001 - any failed call simply does not count
                durable = False
            with done:
                state["answered"] += 1
                state["durable"] += 1 if durable else 0
                done.notify_all()

        futs = [self.peers.stub(m.id).SyncJournal.future(req, timeout=timeout, metadata=self.peers.metadata)
                for m in self.peers.others]
        for f in futs:
            f.add_done_callback(on_reply)
        local = False
        try:
            local = self.sync_local(index, term, timeout)[0]
        except Exception as e:  # noqa: BLE001
            log.warning("local sync failed: %s", e)
        need = majority - (1 if local else 0)
        end = time.monotonic() + timeout
        with done:
            while state["durable"] < need and state["answered"] < len(futs):
                left = end - time.monotonic()
                if left <= 0:
                    break
                done.wait(left)
            ok = state["durable"] >= need
        if ok:
            for f in futs:
                f.cancel()  # the stragglers' answers are no longer needed
        return ok

    def _fail_completions(self, exc: ReplicationError) -> None:
        with self._done_cv:
            items = list(self._done_q)
            self._done_q.clear()
        for it in items:
            self._inflight_slots.release()
            for p in it[2]:
                p.fail(exc)

    # ================================================================== metadata commands
    def _propose_meta_indexed(self, kind: str, arg: Any) -> tuple[Any, int]:
        """``_propose_meta`` that also says at which Raft index the command was applied."""
        res = self._propose_meta(kind, arg, with_index=True)
        return res[2], res[0]

    def _propose_meta(self, kind: str, arg: Any, require_writable: bool = True, with_index: bool = False) -> Any:
        if require_writable and not self.is_writable():
            raise self._not_writable_error()
        done = threading.Event()
        box: list = []

        def cb(res, err):  # tick thread
            box.append((res, err, self._confirmed(res, err)))
            done.set()

        self._log.apply_meta(kind, json.dumps(arg).encode(), callback=cb)
        if not done.wait(self.settings.put_timeout_s):
            raise UnknownOutcomeError(f"{kind} not confirmed within {self.settings.put_timeout_s}s")
        res, err, ok = box[0]
        if not ok:
            raise self._error_for(err)
        return res if with_index else res[2]

    def _meta_or_raise(self, kind: str, arg: Any) -> None:
        refusal = self._propose_meta(kind, arg)
        if refusal:
            from raftmq.store.errors import StoreError
            raise StoreError(refusal)

    def change_topics(self, ops: list[tuple[str, Any]]) -> list[str | None]:
        if not self.is_writable():
            raise self._not_writable_error()
        for op, arg in ops:
            if op not in NAMED_TOPIC_OPS:
                arg.validate()
        return self._topic_committer.submit(list(ops)).result()

    def _commit_topics(self, batch: list[PendingPut]) -> None:
        """The topic committer's thread: every queued caller's operations as one ``topics`` command."""
        ops = [op for p in batch for op in p.msgs]
        refusals = self._propose_meta("topics", {"ops": StoreApplier.topic_ops_to_json(ops), "ts": _now_ms()})
        i = 0
        for p in batch:
            p.resolve(refusals[i:i + len(p.msgs)])
            i += len(p.msgs)

    def create_topic(self, cfg: Any) -> None:
        raise_refusal(self.change_topics([("create", cfg)]))

    def update_topic(self, cfg: Any) -> None:
        raise_refusal(self.change_topics([("update", cfg)]))

    def delete_topic(self, name: str) -> None:
        raise_refusal(self.change_topics([("delete", name)]))

    def update_group_config(self, group: str, cfg: Any, mark_ms: int | None = None) -> None:
        """Replicate a consumer group's settings (store.subscription_groups.SubscriptionGroup), or drop them
        (``cfg`` None); ``mark_ms``: remembered as when (a cluster of several groups). StoreError when refused."""
        marked = {} if mark_ms is None else {"mark": int(mark_ms)}
        if cfg is None:
            self._meta_or_raise("group_config", {"op": "delete", "group": group, "ts": _now_ms(), **marked})
            return
        cfg.validate()
        self._meta_or_raise("group_config", {"op": "put", "cfg": cfg.to_json(), "ts": _now_ms(), **marked})

    def end_console_session(self, session: str, until_s: int) -> None:
        """Replicate the end of a web-console session (refused on every member from then on)."""
        self._meta_or_raise("console_logout", {"session": session, "until": int(until_s), "now": _now_ms() // 1000})

    def update_acl(self, cmd: dict) -> None:
        """Replicate a user / access-rule change (replication.acl_table); StoreError when refused."""
        self._meta_or_raise("acl", cmd)

    def acl_table(self) -> Any:
        return self.machine.applier.acl if self.machine is not None else None

    def update_delay_offsets(self, offsets: dict[int, int]) -> None:
        """Replicate the schedule service's progress ({level: next schedule-queue offset}); returns once applied
        here, so a new leader continues from it."""
        self._meta_or_raise("delay_offsets", {str(level): int(o) for level, o in offsets.items()})

    def update_timer_progress(self, low: int, scanned: int, delivered_up_to: int) -> None:
        """Replicate the timer service's progress (store.timer_progress); returns once applied here, so a new
        leader rebuilds the pending timers from it."""
        self._meta_or_raise("timer_progress", {"low": int(low), "scanned": int(scanned),
                                               "deliveredUpTo": int(delivered_up_to)})

    def apply_pop(self, ops: list[list]) -> list[str | None]:
        """Replicate pop-consumption changes (store.pop_state) as one command; returns once applied here, with one
        refusal (str) or None per op."""
        return self._propose_meta("pop", ops)

    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Coalesced: one Raft command per ``offsets_linger_s`` carries every group's latest offsets; returns when
        the command carrying these offsets is committed and applied."""
        if not self.is_writable():
            raise self._not_writable_error()
        if not group or "@" in group or "@" in topic:
            from raftmq.store.errors import StoreError
            raise StoreError(f"consumer group {group!r} / topic {topic!r} must be non-empty and contain no '@'")
        fut: Future = Future()
        with self._offsets_lock:
            self._offsets.setdefault((group, topic), {}).update({int(q): int(o) for q, o in offsets.items()})
            self._offset_waiters.append(fut)
        with self._wake:
            self._wake.notify_all()
        try:
            fut.result(self.settings.put_timeout_s + self.settings.offsets_linger_s + 1)
        except TimeoutError as e:
            raise UnknownOutcomeError("offset commit not confirmed in time") from e

    def _flush_offsets(self) -> None:
        with self._offsets_lock:
            if not self._offset_waiters:
                return
            pending, waiters = self._offsets, self._offset_waiters
            self._offsets, self._offset_waiters = {}, []
        try:
            self._propose_meta("offsets", [[g, t, {str(q): o for q, o in offs.items()}]
                                           for (g, t), offs in pending.items()])
            for w in waiters:
                w.set_result(None)
        except BaseException as e:
            for w in waiters:
                w.set_exception(e)

    # ================================================================== housekeeping
    def _housekeeping(self) -> None:
        last_offsets = time.monotonic()
        while self._running:
            self._observe_leadership()
            with self._wake:
                self._wake.wait(self.settings.offsets_linger_s)
            now = time.monotonic()
            if now - last_offsets >= self.settings.offsets_linger_s:
                last_offsets = now
                self._flush_offsets()
            with self._inflight_lock:
                expired = [rid for rid, rec in self._inflight.items() if rec.deadline < now]
            for rid in expired:
                rec = self._take_inflight(rid)
                if rec is not None:
                    for p in rec.puts:
                        p.fail(UnknownOutcomeError(f"no commit within {self.settings.put_timeout_s}s"))
            if self._proposed_bytes > self.settings.compaction_max_bytes and self._log is not None:
                self._proposed_bytes = 0
                self._log.forceLogCompaction()
            if self.machine is not None and self.machine.metadata_stale:
                self._take_leaders_metadata()

    def _take_leaders_metadata(self) -> None:
        """After a rewind dropped applied metadata entries (StateMachine.rewind), replace topics, offsets, pop,
        timer, delay and access-control state with the leader's; the leader's entries applied from then on are
        idempotent over it (later ones win, pop ops are guarded by index), so every member ends with the same.
        Queue offsets are not taken: they must stay those of this member's own commit log."""
        leader = self.leader()
        if leader is None or leader.id == self.node_id:
            return
        try:
            status = self.peers.stub(leader.id).GetReplicaStatus(replica_pb2.GetReplicaStatusRequest(),
                                                                 timeout=PEER_STATUS_TIMEOUT_S,
                                                                 metadata=self.peers.metadata)
        except grpc.RpcError as e:
            log.info("could not read the leader's metadata from %s (%s); trying again", leader.id, e.code().name)
            return
        metadata = json.loads(status.metadata)
        metadata.pop("queue_offsets", None)
        with self.machine.lock:
            self.machine.applier.import_metadata(metadata)
            self.machine.metadata_stale = False
        log.warning("took the leader's metadata (%s, applied index %d) after rewinding entries that changed it",
                    leader.id, status.applied_index)

    def _gap_sources(self) -> list[str]:
        """Who supplies or proves a snapshot's commit-log gap: the leader first, then the other voters."""
        leader = self.leader()
        return ([leader.id] if leader and leader.id != self.node_id else []) + \
            [m.id for m in self.peers.others if not leader or m.id != leader.id]

    def _prove_gap(self, from_offset: int, to_offset: int) -> bool:
        """Snapshot install (tick thread): True when the leader (else a voter, as ``_fetch_gap`` would copy from it)
        applied exactly the local commit-log bytes [from_offset, to_offset), compared by digest
        (``catch_up.range_matches``)."""
        return any(catch_up.range_matches(self.peers, mid, self.store, from_offset, to_offset)
                   for mid in self._gap_sources())

    def _fetch_gap(self, from_offset: int, up_to_index: int) -> tuple[int, int]:
        """Snapshot install (tick thread): copy the commit-log gap from the leader, else any peer. On failure the
        deserializer raises, pysyncobj keeps its old state and the leader sends the snapshot again."""
        order = self._gap_sources()
        last_err: Exception | None = None
        for mid in order:
            try:
                end_offset, end_index = catch_up.fetch_range(self.peers, mid, self.store, from_offset, up_to_index,
                                                             timeout=catch_up.INLINE_FETCH_TIMEOUT_S, retry=False)
                self.catch_up_bytes += max(0, end_offset - from_offset)
                return end_offset, end_index
            except catch_up.CatchUpError as e:
                last_err = e
        raise catch_up.CatchUpError(f"no peer could supply the commit log from {from_offset}: {last_err}")

    # ================================================================== operations
    def transfer_leadership(self, to_id: str | None, timeout: float = 5.0) -> None:
        if not self.is_leader():
            raise self._not_writable_error() if self.leader() is None else NotLeaderError(self.leader().grpc_address)
        target = None
        if to_id == self.node_id:
            return  # already the leader: nothing to hand over
        if to_id is not None:
            voter = next((m for m in self.peers.others if m.id == to_id), None)
            if voter is None:
                what = "a learner, not a voter" if any(m.id == to_id for m in self.peers.learners) else "unknown"
                raise TransferLeadershipError(f"member id {to_id!r} is {what}; choose one of "
                                              f"{[m.id for m in self.peers.others]}")
            target = voter.raft_address
        deadline = time.monotonic() + timeout
        self._transferring = True
        try:
            # drain: new puts are refused while the target catches up to our last index
            while time.monotonic() < deadline:
                with self._inflight_lock:
                    busy = bool(self._inflight)
                if not busy:
                    break
                time.sleep(0.01)
            result: list = []
            while time.monotonic() < deadline:
                result.clear()
                self._on_tick_thread(lambda: self._log.transferLeadership(
                    target, callback=lambda res, err: result.append(err)), timeout=2.0)
                if result and result[0] == FAIL_REASON.SUCCESS:
                    break
                time.sleep(0.05)  # target not caught up yet (match index != last index): retry
            else:
                raise TransferLeadershipError("the target did not catch up with the leader's log in time; "
                                              "check that it is connected and healthy, then retry")
            while time.monotonic() < deadline:
                if not self.is_leader():
                    break
                time.sleep(0.02)
            else:
                raise TransferLeadershipError("the transfer request was sent but no new leader took over in time; "
                                              "this member stays leader")
            while time.monotonic() < deadline + 2.0:  # until this member has heard from the new leader
                new = self.leader()
                if new is not None and new.id != self.node_id:
                    return
                time.sleep(0.02)
        finally:
            self._transferring = False

    def members_status(self) -> list[dict]:
        """One row per voter and learner of this member's configuration (this member first), as it sees them:
        role, Raft indexes, applied offset, lag; a learner's catch-up progress as the leader measured it."""
        def read() -> tuple[dict, int]:  # on the tick thread: the journal may be rewritten by compaction
            return self._log.getStatus(), self._log.last_log_index()

        lg = self._log
        stuck = lg.apply_stuck if lg is not None else ""
        health = ("fenced: " + self.machine.fenced) if self.machine.fenced else ("stuck: " + stuck) if stuck else "ok"
        try:
            st, last_index = self._on_tick_thread(read, 2.0) if lg is not None else ({}, 0)
        except TimeoutError:
            st, last_index = {}, 0
            health = "stalled: the Raft tick thread did not answer within 2 s (overloaded host or stuck apply)"
        leader = self.leader()
        config = self._configuration()
        _, end = self.machine.applied_position()  # not status_view: exporting every topic and offset per poll
        if lg is None:
            role = "removed" if self.removed else "not a member"
            health = self.not_member or health
        elif self.role == membership.LEARNER:
            role = "learner"
        else:
            role = _ROLE_NAMES.get(st.get("state"), "unknown")
        me = {
            "id": self.node_id, "address": self.me.grpc_address, "raft_address": self.me.raft_address,
            "role": role, "membership": config.role(self.node_id) or "", "term": st.get("raft_term", self.term()),
            "commit_index": st.get("commit_idx", 0), "applied_index": st.get("last_applied", 0),
            "applied_offset": end, "dispatch_behind_bytes": self.store.dispatch_behind_bytes(),
            "lag": 0, "health": health,
        }
        out = [me]
        errors: dict[str, str] = {}
        members = self.peers.everyone()
        statuses = catch_up.peer_statuses(self.peers, timeout=PEER_STATUS_TIMEOUT_S, errors=errors,
                                          with_metadata=False, members=members)
        progress = self.changes.learner_progress() if self.is_leader() else {}
        for m in members:
            kind = config.role(m.id) or ""
            # an unreachable member has no known indexes or lag (None), only the reason it could not be asked
            row = {"id": m.id, "address": m.grpc_address, "raft_address": m.raft_address, "role": "unreachable",
                   "membership": kind, "term": None, "commit_index": None, "applied_index": None,
                   "applied_offset": None, "dispatch_behind_bytes": None, "lag": None, "health": "unreachable",
                   "ready": False, "error": errors.get(m.id, "no answer")}
            rs = statuses.get(m.id)
            if rs is not None:
                if kind == membership.LEARNER:
                    peer_role = "learner"
                else:
                    peer_role = "leader" if rs.is_leader else ("follower" if leader and leader.id != m.id else "unknown")
                row.update(role=peer_role, term=rs.raft_term, commit_index=rs.commit_index,
                           applied_index=rs.raft_applied_index, applied_offset=rs.commit_log_max_offset,
                           dispatch_behind_bytes=rs.dispatch_behind_bytes, health="ok", error="",
                           ready=rs.ready if rs.HasField("ready") else None,
                           not_ready_reason=rs.not_ready_reason, storage_integrity=rs.storage_integrity)
            match = st.get("match_idx_server_" + m.raft_address)
            if match is not None and self.is_leader():
                row["lag_entries"] = max(0, last_index - match)
                if st.get("partner_node_status_server_" + m.raft_address) != 2:
                    row["health"] = "disconnected"
            if m.id in progress:
                row["progress"] = progress[m.id]
            out.append(row)
        leader_row = next((r for r in out if r["role"] == "leader"), None)
        if leader_row is not None:  # lag: bytes of commit log behind the leader's applied end
            for r in out:
                if r["applied_offset"] is not None:
                    r["lag"] = max(0, leader_row["applied_offset"] - r["applied_offset"])
        return out
