"""Start-up of a member with no Raft state: join Raft at once when the group provably holds no term or vote from
before this member's process, otherwise wait out one election timeout first (docs/design/fresh-start.md).

Why the wait: Raft's safety rests on every member voting at most once per term, so the term and the vote are
durable. A member that lost its disk (a wiped member) lost them too. It may have voted in the current term just
before, and a second vote in that term could elect a second leader in it. So it waits one election timeout
(``cluster.raft.raft_max_timeout``) after its process started before it votes: any election it took part in has
ended by then (a candidate gives up its term after one timeout, and an elected leader has made the others move on).

When it need not: a vote given before this process started can only be counted by a member whose Raft state (its
terms, its candidacies) is older than this process. Each other member proves its state younger with one of two
answers to GetStartupState:

* it is still starting and has no Raft state at all (whatever state it gets later begins after this answer); or
* it started with no Raft state and heard this process's incarnation (a random id, new at every start) before it
  joined Raft: this process asked it, or answered its own question.

When every other member answers so, the whole group's Raft history is younger than this process, the lost vote
counts in no election, and the member joins at once. A new group started all at once proves it within a fraction
of a second. A wiped member rejoining a running group never can (its peers hold older state) and waits as before,
and so does a member when some peer does not answer (a peer that is down may hold older state), answers that it
restarted with a journal, or runs a version without GetStartupState.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

import grpc

from raftmq.replication.peers import Peers
from raftmq.v1 import replica_pb2

log = logging.getLogger(__name__)

PROBE_INTERVAL_S = 0.05  # how often the members that have not answered yet are asked again
CALL_TIMEOUT_S = 0.5


class StartupRecord:
    """This member's side: what it answers GetStartupState with, and whom it heard ask before it joined Raft.

    Used from the starting thread (``set_fresh``, ``mark_raft_started``) and gRPC handlers (``answer``)."""

    def __init__(self, member_id: str):
        self.member_id = member_id
        self.incarnation = os.urandom(8).hex()
        self._lock = threading.Lock()
        self._fresh: bool | None = None  # unknown until start() looked at this member's Raft files
        self._raft_started = False
        self._heard: set[str] = set()  # incarnations heard (asking, or answering) while fresh and not in Raft yet

    @property
    def fresh(self) -> bool:
        """This member started with no Raft state (False while unknown)."""
        return bool(self._fresh)

    def set_fresh(self, fresh: bool) -> None:
        with self._lock:
            self._fresh = fresh

    def mark_raft_started(self) -> None:
        """Call before the member can vote: from here on it answers for its Raft state, and stops recording."""
        with self._lock:
            self._raft_started = True

    def heard_answer(self, state: replica_pb2.StartupState) -> None:
        """A peer's answer to this member's own question names the peer's incarnation: heard it, too."""
        with self._lock:
            self._hear(state.incarnation)

    def _hear(self, incarnation: str) -> None:
        if self._fresh and not self._raft_started and incarnation:
            self._heard.add(incarnation)

    def answer(self, asker_incarnation: str) -> replica_pb2.StartupState | None:
        """The answer to a member asking with ``asker_incarnation``; None while this member does not know yet
        whether it is fresh (the caller answers UNAVAILABLE and is asked again)."""
        with self._lock:
            if self._fresh is None:
                return None
            self._hear(asker_incarnation)
            return replica_pb2.StartupState(
                member_id=self.member_id, incarnation=self.incarnation, raft_started=self._raft_started,
                fresh=self._fresh, heard_asker_before_raft=self._fresh and asker_incarnation in self._heard)


def younger_than_asker(state: replica_pb2.StartupState) -> bool:
    """The answering member holds no term or vote from before the asker's process (see the module doc)."""
    return (state.fresh and not state.raft_started) or state.heard_asker_before_raft


@dataclass(frozen=True)
class GroupProof:
    """The outcome of ``prove_group_younger``."""

    proven: bool          # every other member's Raft state is younger than this process: join at once
    all_starting: bool    # every other member was still starting with no Raft state (none has data to copy)
    reason: str           # for the log line


def prove_group_younger(peers: Peers, record: StartupRecord, until: float) -> GroupProof:
    """Ask every other member for its StartupState until each has proven its Raft state younger than this process,
    one answer rules that out, or ``until`` (time.monotonic()) passes. An answer that does not prove it never
    will later (a member that joined Raft stops recording, and a restarted member keeps its journal), so it ends
    the probe at once; only members that do not answer yet (starting, or down) are asked again."""
    request = replica_pb2.GetStartupStateRequest(incarnation=record.incarnation)
    pending = {m.id for m in peers.others}
    starting: set[str] = set()
    unanswered: dict[str, str] = {}
    while True:
        calls = {mid: peers.stub(mid).GetStartupState.future(request, timeout=CALL_TIMEOUT_S,
                                                               metadata=peers.metadata)
                 for mid in sorted(pending)}
        for mid, call in calls.items():
            try:
                state = call.result()
            except grpc.RpcError as e:
                if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    unanswered[mid] = e.code().name  # not up yet, still opening its store, or down: ask again
                    continue
                return GroupProof(False, False, f"member {mid} answered {e.code().name}: {e.details()}")
            record.heard_answer(state)
            if not younger_than_asker(state):
                what = "restarted with its Raft state" if not state.fresh else "joined Raft before it heard us"
                return GroupProof(False, False, f"member {mid} {what}")
            pending.discard(mid)
            unanswered.pop(mid, None)
            if not state.raft_started:
                starting.add(mid)
        if not pending:
            everyone = len(starting) == len(peers.others)
            return GroupProof(True, everyone, "every other member is new too" if everyone else
                              "every other member started new after this member did")
        if time.monotonic() + PROBE_INTERVAL_S >= until:
            missing = ", ".join(f"{mid} ({unanswered.get(mid, 'no answer')})" for mid in sorted(pending))
            return GroupProof(False, False, f"no answer from {missing}")
        time.sleep(PROBE_INTERVAL_S)
