"""ReplicatedLog: the pysyncobj SyncObj subclass. It holds no state of its own; every replicated function hands
the command to the StateMachine (the store beside it), on every replica, in Raft log order, on the tick thread.

Why so thin: pysyncobj snapshots a SyncObj's attributes; ours has none worth snapshotting (a custom serializer
writes the tiny dump instead), and keeping the logic in StateMachine keeps it testable without a cluster.
"""

from __future__ import annotations

import logging
import random
import ssl
import time
from collections.abc import Callable
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.tcp_connection import CONNECTION_STATE
from pysyncobj.transport import TCPTransport

from raftmq.replication import membership
from raftmq.replication.raft_tls import RaftTls, TlsTcpConnection
from raftmq.store.mapped_file import sync_fd

log = logging.getLogger(__name__)

_FOLLOWER, _CANDIDATE, _LEADER = 0, 1, 2
PRE_VOTE = "raftmq_pre_vote"
PRE_VOTE_RESPONSE = "raftmq_pre_vote_response"
# how soon after an entry commits the followers hear of it when no new entry carries the news earlier
COMMIT_NOTICE_S = 0.005
DURABLE_KEY = "durable"  # in a follower's next_node_idx: the acknowledged entries are on disk in its journal
TERM_KEY = "term"  # in a follower's next_node_idx: the term of the append_entries it answers (pysyncobj sends none)
_KEEP_TAIL = "raftmq_keep_tail"  # set by _skip_known_entries on a message that ends inside this member's log


class ReplicatedLog(SyncObj):
    """pysyncobj's SyncObj with three fixes to its election behaviour (issue 11), all on the tick thread:

    * **Pre-vote** (Raft thesis 9.6): when its election timer fires, a member first asks the others whether they
      would vote for it, without raising its term. They say yes only if they have not heard from a leader for a
      minimum election timeout and its log is at least as up to date as theirs. Only with a majority of yeses does
      it start pysyncobj's real election. A member that was partitioned away (or paused) therefore cannot disrupt
      a healthy leader with its inflated term when it returns.
    * **Stall grace**: a tick that starts much later than the previous one means this thread was starved (busy
      CPU, GC, a slow disk), not that the peers were silent: their messages are waiting in the socket. pysyncobj
      checks its election deadline (follower) and its majority-response deadline (leader) *before* reading them,
      so a stall turned into a needless election or step-down. After a stall both deadlines get one short grace
      period, so the waiting messages are read first.
    * Counters for metrics: elections and pre-votes started, stalls seen.

    And one to its message count (issue 17): one append_entries per tick for the entries it added, with the
    commit index riding on the next one instead of a message of its own (see ``_checkCommandsToApply``).

    Membership (docs/design/membership.md): pysyncobj's ``MEMBERSHIP`` entries change the voters when appended; this
    class enforces one uncommitted change at a time (pysyncobj's guard is never armed), records a committed change
    in the replicated membership instead of performing it again, and runs a learner as a pysyncobj read-only
    node (``self_address`` None): it receives and applies the log, never votes and never counts.
    """

    def __init__(self, self_address: str | None, peer_addresses: list[str], conf: SyncObjConf, machine: Any,
                 accept_peer: Callable[[str], bool] | None = None, tls: RaftTls | None = None,
                 durable_acks: bool = False, learner_address: str = ""):
        """``accept_peer(ip)``: whether an incoming Raft connection from that address is kept (None: all);
        ``tls``: mutual TLS on the Raft connections (replication.raft_tls; None: pysyncobj's plain TCP);
        ``durable_acks`` (``sync`` durability): as a follower, sync the journal to disk before acknowledging
        entries; as the leader, right after sending them. ``self_address`` None: a learner, whose own Raft
        address is ``learner_address`` (it becomes a voter when that address joins the voters)."""
        self._machine = machine  # set before SyncObj.__init__ so pysyncobj never treats it as replicated state
        self.own_address = self_address or learner_address
        self.voter_addresses: frozenset[str] = frozenset()  # the configuration (this member's view), any thread
        self.on_config_change: Callable[[], None] = lambda: None  # tick thread, after the voters changed
        self.durable_acks = durable_acks
        self._durable_ackers: set[Any] = set()  # peers whose last acknowledgement said its entries were on disk
        self.journal_synced: tuple[int, int] = (0, -1)  # (last index, term) on disk at the leader's last own sync
        self.accept_peer = accept_peer
        self.raft_tls = tls
        self.leader_heard_at = 0.0  # time.monotonic() of the last append_entries from a current leader
        self.resent_known_entries = 0  # entries a leader re-sent that this member held already (metrics)
        self._keep_tail = False  # handling a message that ends inside our log: pysyncobj must not truncate it
        self.stale_acks_dropped = 0  # acknowledgements of another term a leader ignored
        self.pre_votes_started = 0
        self.elections_started = 0
        self.tick_stalls = 0
        self.apply_stuck = ""  # why this member cannot apply the next committed entry ("" when it can)
        self.rewound_entries = 0  # applied entries the leader's log replaced (async + a majority's power cut)
        self.caught_up = False  # applied what the leader had committed in its term, once since start
        # a member stopping gracefully still votes but never stands for election again (``_maybe_pre_vote``):
        # it handed leadership away and would only have to hand it away again, stalling the group's writes
        self.retiring = False
        self._last_tick_start = 0.0
        self._pre_vote_term = -1  # the term this member is asking pre-votes for (-1: none in progress)
        self._pre_vote_grants: set = set()
        self._stall_s = max(0.5, conf.raftMinTimeout / 3)
        self._stall_grace_s = max(0.2, 4 * conf.appendEntriesPeriod)
        super().__init__(self_address, peer_addresses, conf, transportClass=RaftTransport)
        self._note_voters()
        poll = self._poller.poll

        def poll_until_append_entries_due(timeout: float) -> None:
            """A leader's tick sleeps no longer than its next append_entries is due (a commit notice, below)."""
            if self._SyncObj__raftState == _LEADER:
                timeout = min(timeout, max(0.0, self._SyncObj__newAppendEntriesTime - monotonic_time()))
            poll(timeout)

        self._poller.poll = poll_until_append_entries_due

    # ------------------------------------------------------------------ tick
    def _onTick(self, timeToWait: float = 0.0) -> None:  # noqa: N802,N803 - pysyncobj's names
        now = time.monotonic()
        if self._last_tick_start and now - self._last_tick_start > self._stall_s:
            self.tick_stalls += 1
            self._grant_stall_grace(now)
        self._last_tick_start = now
        self._maybe_pre_vote(now)
        term_before = self.raftCurrentTerm
        SyncObj._onTick(self, timeToWait)
        if self.raftCurrentTerm > term_before and self._SyncObj__selfNode is not None and \
                self._SyncObj__votedForNodeId == self._SyncObj__selfNode.id:
            self.elections_started += 1  # this member raised the term to campaign (not: learned a higher one)
        journal = self._SyncObj__raftLog
        if len(journal) and journal[0][1] > self._SyncObj__raftLastApplied + 1:
            self._resume_past_compaction()
        elif self.apply_stuck:
            self.apply_stuck = ""  # a snapshot from the leader brought what was missing
        if not self.caught_up:
            self._check_caught_up()

    def _check_caught_up(self) -> None:
        """``caught_up`` once this member has applied everything its leader had committed *in the leader's term*.

        pysyncobj's own readiness compares with the leader's commit index as it is; right after an election that
        is the new leader's old (possibly stale) one until an entry of its term commits, so a member behind the
        group's log counted as caught up (issue 32: members came up ready with a regressed store). An entry of the
        current term at the commit index means everything before it is committed and counted."""
        commit = self._SyncObj__leaderCommitIndex
        if commit is None or self._SyncObj__raftLastApplied < commit or self._SyncObj__raftLeader is None:
            return
        if self.entry_term(commit) == self.raftCurrentTerm:
            self.caught_up = True

    # ------------------------------------------------------------------ applying after a compaction without a dump
    def _resume_past_compaction(self) -> None:
        """The journal starts after the next entry pysyncobj would apply, so it can apply nothing.

        That is the state a compacted journal without its snapshot leaves (a dump lost after the compaction
        reached the disk; patch 7 of pysyncobj_patches prevents it from now on). pysyncobj's applied index is only
        a cursor over the journal: the state is the store, and its applied index (AppliedIndex) says how far it
        got. When that reaches the journal's start, the cursor moves there and applying resumes from the
        journal; otherwise entries are missing here and only a snapshot from the leader can bring them:
        ``apply_stuck`` says so (the member is not ready)."""
        first = self._SyncObj__raftLog[0][1]
        last = self._SyncObj__getCurrentLogIndex()
        ours = min(self._machine.applied_index(), last)
        if ours >= first - 1:
            log.warning("Raft journal starts at entry %d but pysyncobj's applied index was %d (no snapshot): "
                        "resuming from the store's applied index %d", first, self._SyncObj__raftLastApplied, ours)
            self._SyncObj__raftLastApplied = ours
            if self._SyncObj__raftCommitIndex < ours:
                self._SyncObj__raftCommitIndex = ours
            self.apply_stuck = ""
        elif not self.apply_stuck:
            self.apply_stuck = (f"cannot apply: the Raft journal starts at entry {first}, this member applied up to "
                                f"{self._machine.applied_index()}, and no snapshot covers the entries between; "
                                "rebuild it from its peers with `raftmq cluster rebuild-member`")
            log.error("member cannot catch up: %s", self.apply_stuck)

    def _SyncObj__deleteEntriesTo(self, toIDx: int) -> None:  # noqa: N802,N803 - pysyncobj's names
        """pysyncobj's compaction once a dump is written (drop the journal entries before ``toIDx``), never of
        entries the journal no longer holds.

        The dump is written on one tick and the journal compacted on a later one. A snapshot the leader sends in
        between replaces the journal with the snapshot's last two entries; when its index is below the dump's,
        pysyncobj's compaction deleted them all, and every later tick failed on the empty journal (IndexError
        on its first entry): the member never applied or voted again. The journal then stays as the leader's
        snapshot left it; the next dump compacts it."""
        journal = self._SyncObj__raftLog
        if not len(journal) or toIDx > journal[-1][1]:
            log.warning("not compacting the Raft journal to entry %d: it ends at entry %s (a leader's snapshot "
                        "replaced it after this member's dump)", toIDx, journal[-1][1] if len(journal) else None)
            return
        SyncObj._SyncObj__deleteEntriesTo(self, toIDx)

    # ------------------------------------------------------------------ append_entries per entry, not per event
    # pysyncobj (appendEntriesUseBatch=False) sends every follower an append_entries for each command it adds and
    # another each time its commit index advances, and every follower answers each one. So a Raft entry cost
    # four messages per follower, half of them only to say "committed". These two overrides send one
    # append_entries per tick for the commands added in it, and let the commit index ride on the next one (due
    # within COMMIT_NOTICE_S, so an idle follower still applies at once): the leader's acknowledgement does not
    # wait for followers to apply, only for a majority to hold the entry.
    def _SyncObj__applyLogEntries(self) -> bool:  # noqa: N802 - pysyncobj's name
        """pysyncobj's apply; on a leader that applied something, the commit notice is scheduled, not sent."""
        if not SyncObj._SyncObj__applyLogEntries(self):
            return False
        if self._SyncObj__raftState != _LEADER:
            return True
        due = monotonic_time() + COMMIT_NOTICE_S
        if due < self._SyncObj__newAppendEntriesTime:
            self._SyncObj__newAppendEntriesTime = due
        return False

    def _checkCommandsToApply(self) -> None:  # noqa: N802 - pysyncobj's name
        """pysyncobj's, with one append_entries for all the commands it adds instead of one per command."""
        conf = self._SyncObj__conf
        before = self._SyncObj__getCurrentLogIndex()
        conf.appendEntriesUseBatch = True
        try:
            SyncObj._checkCommandsToApply(self)
        finally:
            conf.appendEntriesUseBatch = False
        if self._SyncObj__raftState == _LEADER and self._SyncObj__getCurrentLogIndex() > before:
            self._SyncObj__sendAppendEntries()
            if self.durable_acks:
                self._sync_journal_as_leader()

    def _sync_journal_as_leader(self) -> None:
        """``sync`` durability: the leader syncs the entries it just sent while the followers write theirs, and
        records how far, so the fsync that completes a commit's majority (RaftWritePath.sync_local) need not wait
        for a turn of this thread to do it (that wait was half of it under load)."""
        index, term = self._SyncObj__getCurrentLogIndex(), self.raftCurrentTerm
        # on failure sync_local syncs it on this thread again, and fails the write if that fails too
        if self._journal_synced_now("leaving sync_local to sync it"):
            self.journal_synced = (index, term)

    def _grant_stall_grace(self, now: float) -> None:
        until = now + self._stall_grace_s
        if self._SyncObj__raftState != _LEADER:
            if self._SyncObj__raftElectionDeadline < until and not self._SyncObj__transferInProgress:
                self._SyncObj__raftElectionDeadline = until
        else:
            floor = until - self._SyncObj__conf.leaderFallbackTimeout
            last = self._SyncObj__lastResponseTime
            for node in list(last):
                if last[node] < floor:
                    last[node] = floor

    def campaign_now(self) -> None:
        """Stand for election as soon as a peer is connected instead of after a random election timeout (on the
        tick thread). Still through pre-vote, so it disrupts no leader the others already follow: for the first
        member of a group that starts new (replication/fresh_start.py), where nobody leads yet."""
        if self._SyncObj__raftState != _LEADER and not self._SyncObj__transferInProgress:
            self._SyncObj__raftElectionDeadline = min(self._SyncObj__raftElectionDeadline, monotonic_time())

    def _maybe_pre_vote(self, now: float) -> None:
        """Run pre-vote instead of letting pysyncobj start an election when the timer fires (see the class doc)."""
        if self._SyncObj__selfNode is None or self._SyncObj__raftState == _LEADER:
            return
        if self._SyncObj__transferInProgress or self._SyncObj__raftElectionDeadline == 0:
            return  # a leader asked for this election (TimeoutNow) or the pre-vote already succeeded
        if self._SyncObj__raftElectionDeadline >= now or not self._SyncObj__connectedToAnyone():
            return
        if self.retiring:  # the timer fired on a member that is stopping: let the others elect among themselves
            self._SyncObj__raftElectionDeadline = now + self._SyncObj__conf.raftMinTimeout
            return
        # The timer fired: ask first; pysyncobj's own election waits unless the pre-vote wins. A lost pre-vote is
        # asked again soon (it changes nobody's term, so it is cheap): a peer that heard the old leader just
        # before our timer fired says yes a moment later, and a dead leader is replaced without a second timeout.
        conf = self._SyncObj__conf
        self._SyncObj__raftElectionDeadline = now + conf.raftMinTimeout * random.uniform(0.25, 0.5)
        self._pre_vote_term = self.raftCurrentTerm + 1
        self._pre_vote_grants = set()
        self.pre_votes_started += 1
        message = {"type": PRE_VOTE, "term": self._pre_vote_term,
                   "last_log_index": self._SyncObj__getCurrentLogIndex(),
                   "last_log_term": self._SyncObj__getCurrentLogTerm()}
        for node in self._SyncObj__otherNodes:
            self._SyncObj__transport.send(node, message)
        self._check_pre_vote_majority()

    def _check_pre_vote_majority(self) -> None:
        voters = len(self._SyncObj__otherNodes) + 1
        if len(self._pre_vote_grants) + 1 > voters / 2:  # + our own
            self._pre_vote_term = -1
            self._SyncObj__raftElectionDeadline = 0  # pysyncobj starts the real election on this tick

    def _on_pre_vote(self, node: Any, message: dict) -> None:
        """Would we vote for this member? Changes no state of ours (that is the point of a pre-vote)."""
        heard_recently = time.monotonic() - self.leader_heard_at < self._SyncObj__conf.raftMinTimeout
        up_to_date = (message["last_log_term"], message["last_log_index"]) >= \
            (self._SyncObj__getCurrentLogTerm(), self._SyncObj__getCurrentLogIndex())
        granted = (self._SyncObj__raftState != _LEADER and not heard_recently and up_to_date
                   and message["term"] > self.raftCurrentTerm)
        self._SyncObj__transport.send(node, {"type": PRE_VOTE_RESPONSE, "term": message["term"], "granted": granted})

    def _on_pre_vote_response(self, node: Any, message: dict) -> None:
        if message["term"] != self._pre_vote_term or not message.get("granted"):
            return
        self._pre_vote_grants.add(node)
        if self._SyncObj__raftState != _LEADER:
            self._check_pre_vote_majority()

    # ------------------------------------------------------------------ messages
    # pysyncobj binds its message handler by this (mangled) name in SyncObj.__init__, so this override sees every
    # message from a peer first; it runs on the tick thread, like the original.
    def _SyncObj__onMessageReceived(self, node: Any, message: dict) -> None:  # noqa: N802
        kind = message.get("type")
        if kind == PRE_VOTE:
            return self._on_pre_vote(node, message)
        if kind == PRE_VOTE_RESPONSE:
            return self._on_pre_vote_response(node, message)
        if kind == "append_entries" and message.get("term", -1) >= self.raftCurrentTerm:
            self.leader_heard_at = time.monotonic()
            self._pre_vote_term = -1  # a live leader: no election wanted
            if "prevLogIdx" not in message:
                return self._on_snapshot_message(node, message)
            if "transmission" not in message:
                message = self._skip_known_entries(message)
                if message.pop(_KEEP_TAIL, False):
                    return self._on_append_entries(node, message)
        if kind == "next_node_idx" and message.get(TERM_KEY, self.raftCurrentTerm) != self.raftCurrentTerm:
            self.stale_acks_dropped += 1
            return  # answers an append_entries of another term: says nothing of this term's log (see _send...Idx)
        if kind == "next_node_idx" and message.get("success"):  # before pysyncobj counts it towards a commit
            if message.get(DURABLE_KEY):
                self._durable_ackers.add(node)
            else:
                self._durable_ackers.discard(node)
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _on_snapshot_message(self, node: Any, message: dict) -> None:
        """pysyncobj's handling of a snapshot-transfer append_entries, without its jump of the commit index.

        Such a message has no ``prevLogIdx``: nothing checks that this member's log matches the leader's. Yet
        pysyncobj raised the commit index on it to min(leader's commit, own last index), and so committed and
        applied whatever its log held beyond the last entry it knew committed: entries of an old term that no
        majority ever had. A deposed leader holds such entries (it keeps proposing until it hears of the new
        term, e.g. right after resuming from a pause), and a follower may hold them from it. Seen: a leader
        resumed after SIGSTOP, took a few puts into its log, applied them on the new leader's snapshot message,
        then installed the snapshot on top; its commit log differed from the group's at those bytes. Raft
        advances a follower's commit index only on entries that passed the log-matching check, or to the end of
        a snapshot it installed, and so does this: the message is handled with the commit index it already had,
        and raised to what a loaded snapshot covers."""
        self._machine.from_leader = True  # a snapshot loaded now is the leader's, not this member's own
        try:
            self._receive_with_commit_capped(node, message, self._SyncObj__raftCommitIndex)
        finally:
            self._machine.from_leader = False
        installed = self._SyncObj__raftLastApplied  # a loaded snapshot sets it to the snapshot's last index
        if installed > self._SyncObj__raftCommitIndex:
            self._SyncObj__raftCommitIndex = installed
            self._SyncObj__raftLog.setRaftCommitIndex(installed)

    # ------------------------------------------------------------------ durable acknowledgements (sync mode)
    # Raft's own rule: a follower makes entries durable before it acknowledges them. Then an entry the leader
    # counts as committed is on disk on the majority minus the leader, and the leader's own fsync completes the
    # majority, with no separate fsync round trip to the followers. The acknowledgement says so (an extra key
    # pysyncobj ignores), so a leader falls back to the SyncJournal round while any peer does not (an older
    # member during a rolling upgrade, or one configured ``async``).
    def _SyncObj__sendNextNodeIdx(self, node: Any, reset: bool = False, nextNodeIdx: int | None = None,  # noqa: N802,N803
                                  success: bool = False) -> None:
        """pysyncobj's acknowledgement, with the term it answers; with ``durable_acks`` a positive one follows a
        journal sync.

        The term: pysyncobj's acknowledgement has none, so a leader counted one that reached it late (the member
        paused after answering, the leader deposed and elected again meanwhile) towards entries of its new term at
        the same indexes, which the member may not hold. The leader drops an acknowledgement of another term;
        one without the key (a member of an older version) counts as before."""
        # a plain acknowledgement when the sync fails: the leader then asks for an explicit fsync round
        durable = success and self.durable_acks and self._journal_synced_now("acknowledging without the durable flag")
        if nextNodeIdx is None:
            nextNodeIdx = self._SyncObj__getCurrentLogIndex() + 1
        message = {"type": "next_node_idx", "next_node_idx": nextNodeIdx, "reset": reset, "success": success,
                   TERM_KEY: self.raftCurrentTerm}
        if durable:
            message[DURABLE_KEY] = True
        self._SyncObj__transport.send(node, message)

    def peers_ack_durably(self) -> bool:
        """Every other member's latest acknowledgement came after its journal sync (tick thread or not: a read
        of a set that only the tick thread changes)."""
        ackers = self._durable_ackers
        return all(n in ackers for n in list(self._SyncObj__otherNodes))

    def _skip_known_entries(self, message: dict) -> dict:
        """Raft's append rule on top of pysyncobj's: drop the re-sent entries this member already holds (same index
        and term), truncate only from the first that conflicts, and never drop matching entries after the message's
        end. Applied entries that conflict are rolled back.

        Why: pysyncobj truncates the follower's log after ``prevLogIdx`` whenever the follower has more entries,
        even matching ones. Leaders re-send ranges routinely (a follower stalled for a moment, a reconnect, a
        next-index reset), and such a re-send dropped entries this member had acknowledged (as durable, under
        ``sync``) and that counted towards their commit: until the leader sent them again, a committed entry could
        be on fewer members than a majority, and a power cut of the group then lost acknowledged messages. With
        applied entries among them pysyncobj also logged CRITICAL "truncating already-applied log entries ... state
        machine may have diverged" with no fault at all.

        Why skipping is safe: same index and term is the same entry (log matching), so a message whose entries all
        match ours up to some index is equivalent to one with ``prevLogIdx`` at that index carrying only the rest.
        When the message ends inside our log, its end becomes ``prevLogIdx`` with no entries: pysyncobj then
        acknowledges exactly what the message proved (not our whole log), and the entries after it are kept but not
        committed by it (Raft: the commit index goes no further than the last entry the message covered;
        ``_on_append_entries``).

        A re-sent entry whose term differs from an *applied* one means one thing: under ``async`` a power cut of a
        majority lost entries that this member had applied (they were in memory on a majority, on disk only here),
        and the leader's log has others at those indexes. Those are the group's entries now: this member rewinds
        its state machine to before the first differing one (``rewind``: their commit-log bytes are withheld, then
        adopted or cut as the leader's entries apply) and pysyncobj its applied and commit indexes, so the leader's
        entries are applied when the leader says they are committed.
        """
        prev = message["prevLogIdx"]
        last = self._SyncObj__getCurrentLogIndex()
        if prev is None or prev >= last:
            # None: the leader no longer holds the entry before what it sends (compacted); pysyncobj answers with a
            # reset. Otherwise nothing of ours after prevLogIdx: pysyncobj appends (or answers a gap).
            return message
        entries = message.get("entries") or []
        covered = min(last, prev + len(entries))  # our entries the message can be compared with
        ours = self._SyncObj__getEntries(prev, covered - prev + 1)
        if len(ours) != covered - prev + 1 or ours[0][1] != prev or ours[0][2] != message["prevLogTerm"]:
            return message  # compacted away, or a conflict at prevLogIdx: pysyncobj's own handling applies
        term_at = {e[1]: e[2] for e in ours}
        upto = covered  # our entries up to here are the message's
        for entry in entries:
            if entry[1] > covered:
                break
            if term_at[entry[1]] != entry[2]:
                upto = entry[1] - 1
                # what this member applied: pysyncobj's cursor, or the store's applied index, which after a
                # restart is ahead of it until the leader says again what is committed
                applied = max(self.raftLastApplied, min(self._machine.applied_index(), last))
                if upto < applied:
                    self._rewind_applied(upto, applied)
                break
        kept = [e for e in entries if e[1] > upto]
        self.resent_known_entries += len(entries) - len(kept)
        out = {**message, "prevLogIdx": upto, "prevLogTerm": term_at[upto], "entries": kept}
        if not kept and upto < last:
            out[_KEEP_TAIL] = True
        return out

    def _on_append_entries(self, node: Any, message: dict) -> None:
        """pysyncobj's handling of a message that ends inside this member's log (``_skip_known_entries``): its
        truncation after ``prevLogIdx`` is skipped, and the commit index rises no further than that index (pysyncobj
        raises it to our last index, which here would commit entries the leader's message did not vouch for)."""
        self._keep_tail = True
        try:
            self._receive_with_commit_capped(node, message, message["prevLogIdx"])
        finally:
            self._keep_tail = False

    def _receive_with_commit_capped(self, node: Any, message: dict, cap: int) -> None:
        """pysyncobj's handling of ``message`` with the commit index it may raise this member's to lowered to
        ``cap``; the leader's own commit index is still recorded as the leader's (readiness compares with it)."""
        leader_commit = message.get("commit_index", 0)
        SyncObj._SyncObj__onMessageReceived(self, node, {**message, "commit_index": min(leader_commit, cap)})
        self._SyncObj__leaderCommitIndex = leader_commit

    def _SyncObj__deleteEntriesFrom(self, fromIDx: int) -> None:  # noqa: N802,N803 - pysyncobj's names
        """pysyncobj drops its log from ``fromIDx`` to take the leader's entries. Not when the message ends inside
        our log with every entry matching (``_on_append_entries``). Entries the state machine applied there are not
        the group's any more: rewind first (``_skip_known_entries`` keeps matching ones from ever getting here;
        this covers what it cannot see, e.g. a log compacted past the re-sent range)."""
        if self._keep_tail:
            return
        applied = self._machine.applied_index()
        if fromIDx <= applied:
            self._rewind_applied(fromIDx - 1, applied)
        SyncObj._SyncObj__deleteEntriesFrom(self, fromIDx)

    def _rewind_applied(self, index: int, applied: int) -> None:
        log.error("the leader's entries %d..%d differ from the ones this member applied (the group lost them in a "
                  "power cut of a majority under async durability): rewinding to entry %d", index + 1, applied,
                  index)
        self._machine.rewind(index)
        self._SyncObj__raftLastApplied = index
        if self._SyncObj__raftCommitIndex > index:
            self._SyncObj__raftCommitIndex = index
        self.rewound_entries += applied - index

    def _SyncObj__setState(self, newState: int) -> None:  # noqa: N802,N803 - pysyncobj's names
        """pysyncobj's role change, logged when this member takes leadership: one line per term led, so a test (or
        an operator) can check that no term ever had two leaders."""
        if newState == _LEADER and self._SyncObj__raftState != _LEADER:
            log.info("became the Raft leader of term %d", self.raftCurrentTerm)
        SyncObj._SyncObj__setState(self, newState)

    # ------------------------------------------------------------------ membership
    @property
    def is_learner(self) -> bool:
        return self._SyncObj__selfNode is None

    def _note_voters(self) -> None:
        voters = {n.address for n in list(self._SyncObj__otherNodes)}
        if self._SyncObj__selfNode is not None:
            voters.add(self._SyncObj__selfNode.address)
        self.voter_addresses = frozenset(voters)

    def _SyncObj__doChangeCluster(self, request: list, reverse: bool = False) -> bool:  # noqa: N802
        """pysyncobj's change of the voters (a ``MEMBERSHIP`` entry appended, or reversed by a truncation), then
        the write path is told (peers follow the configuration; a learner sees its own promotion)."""
        changed = SyncObj._SyncObj__doChangeCluster(self, request, reverse)
        if changed:
            self._note_voters()
            log.warning("Raft configuration %s: voters now %s", ("reverted" if reverse else "changed"),
                        ", ".join(sorted(self.voter_addresses)))
            self.on_config_change()
        return changed

    def _SyncObj__updateClusterConfiguration(self, newNodes: list) -> None:  # noqa: N802,N803 - pysyncobj's names
        """pysyncobj replaces the voters with a loaded snapshot's (``StateMachine.deserialize`` chose them)."""
        SyncObj._SyncObj__updateClusterConfiguration(self, newNodes)
        self._note_voters()
        self.on_config_change()

    def _SyncObj__changeCluster(self, request: list) -> bool:  # noqa: N802 - pysyncobj's name
        """The leader's check before appending a ``MEMBERSHIP`` entry. pysyncobj refuses while a previous change is
        uncommitted only if ``__changeClusterIDx`` is set, and nothing sets it: with two changes in flight the
        majorities of configurations two voters apart need not overlap. Refused here while any ``MEMBERSHIP``
        entry lies beyond the applied index, and before this term's no-op is applied (a new leader may hold an
        uncommitted change of the previous term that it does not know is committed)."""
        noop = self._SyncObj__noopIDx
        if noop is None or self.raftLastApplied < noop or self.uncommitted_change():
            return False
        return self._SyncObj__doChangeCluster(request)

    def uncommitted_change(self) -> bool:
        """A ``MEMBERSHIP`` entry this member holds beyond its applied index (tick thread)."""
        entries = self._SyncObj__getEntries(self.raftLastApplied + 1)
        return any(e[0][:1] == bytes([membership.MEMBERSHIP_COMMAND]) for e in entries)

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:  # noqa: N802 - pysyncobj's name
        """A committed ``MEMBERSHIP`` entry updates the replicated record; pysyncobj would perform the change again
        (it already took effect when appended, and a later appended change may have superseded it)."""
        change = membership.decode_change(command)
        if change is None:
            return SyncObj._SyncObj__doApplyCommand(self, command)
        return self._machine.apply_membership(self.raftLastApplied + 1, change)

    def voter_health(self) -> dict[str, tuple[bool, int, float]]:
        """Leader, tick thread: per other voter (Raft address): connected, entries behind this member's last one,
        seconds since it last answered."""
        last, now = self._SyncObj__getCurrentLogIndex(), monotonic_time()
        match, answered = self._SyncObj__raftMatchIndex, self._SyncObj__lastResponseTime
        connected = self._SyncObj__connectedNodes
        return {n.address: (n in connected, last - match.get(n, 0), now - answered.get(n, 0.0))
                for n in list(self._SyncObj__otherNodes)}

    def propose_voter_change(self, change: membership.VoterChange, callback: Callable[[Any, int], None]) -> None:
        """Append a ``MEMBERSHIP`` entry (leader only; refused with REQUEST_DENIED while another is uncommitted,
        before this term's no-op is applied, or when it changes nothing)."""
        self._applyCommand(membership.encode_change(change), callback, membership.MEMBERSHIP_COMMAND)

    @replicated
    def apply_batch(self, blob: bytes) -> Any:
        return self._machine.apply_batch(self.raftLastApplied + 1, blob)

    @replicated
    def apply_meta(self, kind: str, payload: bytes) -> Any:
        return self._machine.apply_meta(self.raftLastApplied + 1, kind, payload)

    # pysyncobj internals we need, behind names that say what they are ----------------------------------
    def entry_term(self, index: int) -> int | None:
        """Term of log entry ``index`` if it is still in the (uncompacted) log."""
        entries = self._SyncObj__getEntries(index, 1)
        if not entries or entries[0][1] != index:
            return None
        return entries[0][2]

    def last_log_index(self) -> int:
        return self._SyncObj__getCurrentLogIndex()

    def flush_journal(self) -> None:
        """Make the journal durable (pysyncobj never does outside destroy). Tick thread only: the journal reopens
        its file when it grows there.

        An fdatasync of the journal's file, not its ``flush()`` (an msync holding the GIL for the disk's round
        trip; see ``store.mapped_file.sync_mapped``)."""
        resizable = getattr(self._SyncObj__raftLog, "_FileJournal__journalFile", None)
        if resizable is not None:  # None: an in-memory journal
            sync_fd(resizable._ResizableFile__f.fileno())

    def _journal_synced_now(self, otherwise: str) -> bool:
        """``flush_journal``, False (logged with what happens ``otherwise``) when the disk refused it."""
        try:
            self.flush_journal()
        except OSError:
            log.exception("sync of the Raft journal failed; %s", otherwise)
            return False
        return True

    @property
    def journal_torn_tail_bytes(self) -> int:
        """Bytes of a torn journal tail dropped when this member opened its journal (pysyncobj_patches, patch 6)."""
        return getattr(self._SyncObj__raftLog, "torn_tail_bytes", 0)

    def leader_address(self) -> str | None:
        node = self._getLeader()
        return node.address if node is not None else None

    def is_leader(self) -> bool:
        return self._isLeader()


class RaftTransport(TCPTransport):
    """pysyncobj's TCP transport with raftmq's guards: incoming connections from addresses the node does not
    allow (``ReplicatedLog.accept_peer``) are dropped before a byte of them is read, with
    ``ReplicatedLog.raft_tls`` every connection, both ways, speaks mutual TLS (replication.raft_tls), and the
    utility messages that would change the voters or the code version (``syncobj_admin -add/-remove``) are not
    answered: membership changes go through raftmq's checks (docs/design/membership.md)."""

    REFUSED_UTILITY_MESSAGES = ("add", "remove", "set_version")

    def _onUtilityMessage(self, conn: Any, message: list) -> bool:  # noqa: N802 - pysyncobj's name
        if message and message[0] in self.REFUSED_UTILITY_MESSAGES:
            conn.send(f"FAIL {message[0]}: refused by raftmq: change members with `raftmq cluster add-member` / "
                      "`remove-member`")
            return True
        return super()._onUtilityMessage(conn, message)

    def _onTick(self) -> None:  # noqa: N802 - pysyncobj's name
        self._drop_stuck_connects()
        super()._onTick()

    def _drop_stuck_connects(self) -> None:
        """Give up a connect that got no answer within ``connectionTimeout``, so it is retried (and the peer's
        name resolved again). pysyncobj checks that timeout only when the socket reports an event, and a connect
        to an address that silently drops it (a pod's old IP after a restart moved it) reports none until the
        kernel gives up, about two minutes; pysyncobj does not retry meanwhile. On Kubernetes that kept a
        restarted member unreachable to the peer that dials it for a minute or more, and a rolling restart
        without a leader for as long."""
        timeout = self._syncObj.conf.connectionTimeout
        now = monotonic_time()
        for node, conn in list(self._connections.items()):
            if conn.state == CONNECTION_STATE.CONNECTING and now - conn._TcpConnection__lastReadTime > timeout:
                log.info("Raft connection to %s: no answer within %.1fs; retrying", getattr(node, "address", node),
                         timeout)
                conn.disconnect()

    def _onNewIncomingConnection(self, conn: Any) -> None:  # noqa: N802 - pysyncobj's name
        accept = getattr(self._syncObj, "accept_peer", None)
        tls = getattr(self._syncObj, "raft_tls", None)
        address = ""
        if accept is not None or tls is not None:
            try:
                address, port = conn._TcpConnection__socket.getpeername()[:2]
            except OSError:
                address, port = "", 0
            if accept is not None and not accept(address):
                conn.disconnect()
                return
            if tls is not None:
                try:
                    TlsTcpConnection.start_server(conn, tls, f"{address}:{port}")
                except (ssl.SSLError, OSError) as e:
                    log.error("Raft TLS: cannot build the server context: %s", e)
                    conn.disconnect()
                    return
        super()._onNewIncomingConnection(conn)

    def addNode(self, node: Any) -> None:  # noqa: N802 - pysyncobj's name
        super().addNode(node)
        tls = getattr(self._syncObj, "raft_tls", None)
        conn = self._connections.get(node)
        if tls is not None and conn is not None:
            TlsTcpConnection.make_client(conn, tls)
