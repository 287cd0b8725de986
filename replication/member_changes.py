"""MembershipChanges: the leader's side of growing, shrinking and replacing the group (docs/design/membership.md).

Why apart from the write path: the requests (add, remove, a new member asking to join) and the leader's loop
(record the first membership, promote caught-up learners, finish replacements, retire members Kubernetes scaled
away) share one set of checks: one change at a time, and never a configuration without a healthy majority.
Everything runs on the leader, on the calling thread (a gRPC handler's, or the membership thread); proposals go
through pysyncobj (voters) or the replicated metadata commands (learners and the record).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pysyncobj import FAIL_REASON

from raftmq.replication import catch_up, membership
from raftmq.replication.errors import (
    MembershipChangeError,
    NotLeaderError,
    ReplicationError,
    UnknownOutcomeError,
)
from raftmq.replication.write_path import MemberInfo

log = logging.getLogger(__name__)

STATUS_TIMEOUT_S = 1.0  # asking learners for their progress
TICK_TIMEOUT_S = 2.0    # reading pysyncobj's state on its tick thread


class MembershipChanges:
    """The leader's side of membership changes for one ``RaftWritePath`` (``wp``: typed ``Any`` because the write
    path owns this object, and the room's import contract allows no cycle)."""

    def __init__(self, wp: Any, *, join_policy: Callable[[str], str] | None,
                 retiring: Callable[[list[str]], list[str]] | None, on_event: Callable[..., None]):
        self.wp = wp
        self.join_policy = join_policy
        self.retiring = retiring
        self.on_event = on_event
        self._lock = threading.Lock()  # one request at a time on this member
        self._progress: dict[str, str] = {}  # learner id -> its catch-up as last measured (cluster status)

    # ------------------------------------------------------------------ requests
    def add(self, member: MemberInfo, *, replaces: str = "", dry_run: bool = False, by: str = "") -> dict:
        """Record ``member`` as a learner (it is promoted once caught up; with ``replaces``, that voter is removed
        after it). Returns {plan, voters, learners, index}."""
        with self._lock:
            self._require_leader()
            config = self.wp.configuration()
            existing = config.member(member.id)
            if existing == member and config.role(member.id) == membership.LEARNER and \
                    config.replaces.get(member.id, "") == replaces:
                return self._answer(config, f"{member.id} is already a learner; it becomes a voter once caught up")
            conflict = config.conflict(member)
            if conflict:
                raise MembershipChangeError(f"cannot add {member.id}: {conflict}")
            if replaces:
                if replaces == member.id or config.role(replaces) != membership.VOTER:
                    raise MembershipChangeError(f"cannot replace {replaces!r}: it is not a voter (voters: "
                                                f"{', '.join(config.voter_ids)})")
            healthy = self._healthy_voters(config)
            after = [*config.voter_ids, member.id]
            refusal = membership.health_refusal(after, [*healthy, member.id], f"adding {member.id}")
            if not refusal and replaces:
                refusal = membership.health_refusal([v for v in after if v != replaces],
                                                    [h for h in [*healthy, member.id] if h != replaces],
                                                    f"replacing {replaces} with {member.id}")
            if refusal:
                raise MembershipChangeError(refusal)
            plan = (f"{member.id} ({member.raft_address}) joins as a learner, copies the group's data and becomes a "
                    f"voter once within {self.wp.settings.learner_max_lag_entries} entries of the leader: voters "
                    f"{len(config.voters)} -> {len(after)}, majority {len(after) // 2 + 1}")
            if replaces:
                plan += f"; then {replaces} is removed: voters {len(after)} -> {len(after) - 1}"
            if dry_run:
                return self._answer(config, plan)
            self._ensure_record()
            index = self._propose_meta("learner_add", {"id": member.id, "raft": member.raft_address,
                                                       "grpc": member.grpc_address, "replaces": replaces})
            self.on_event("member_add", member=member.id, raft=member.raft_address, grpc=member.grpc_address,
                          replaces=replaces, user=by, index=index)
            log.warning("membership: %s added as a learner at Raft index %d%s", member.id, index,
                        f" (replacing {replaces})" if replaces else "")
            self.wp._membership_event.set()
            return self._answer(self.wp.configuration(), plan, index)

    def remove(self, member_id: str, *, dry_run: bool = False, by: str = "") -> dict:
        """Remove a learner, or a voter (one at a time; the leader hands leadership away first and the new leader
        removes it). Returns {plan, voters, learners, index}."""
        with self._lock:
            self._require_leader()
            config = self.wp.configuration()
            role = config.role(member_id)
            if role is None:
                raise MembershipChangeError(f"{member_id!r} is not a member; voters: {', '.join(config.voter_ids)}"
                                            + (f"; learners: {', '.join(config.learner_ids)}" if config.learners
                                               else ""))
            if role == membership.LEARNER:
                plan = f"learner {member_id} is removed (it never counted for a majority)"
                if dry_run:
                    return self._answer(config, plan)
                index = self._propose_meta("learner_remove", {"id": member_id})
                self._progress.pop(member_id, None)
                self.on_event("member_remove", member=member_id, role=role, user=by, index=index)
                log.warning("membership: learner %s removed at Raft index %d", member_id, index)
                return self._answer(self.wp.configuration(), plan, index)
            after = [v for v in config.voter_ids if v != member_id]
            if not after:
                raise MembershipChangeError(f"{member_id} is the only voter: a group cannot remove its last voter")
            if self._uncommitted():
                raise MembershipChangeError("another membership change is not committed yet; retry in a moment")
            refusal = membership.health_refusal(after, self._healthy_voters(config), f"removing {member_id}")
            if refusal:
                raise MembershipChangeError(refusal)
            plan = f"voter {member_id} is removed: voters {len(config.voters)} -> {len(after)}, majority " \
                   f"{len(after) // 2 + 1}"
            if member_id == self.wp.node_id:
                plan += " (it leads the group: it hands leadership to another voter first, which removes it)"
            if dry_run:
                return self._answer(config, plan)
            if member_id == self.wp.node_id:
                self._step_down(config)  # raises NotLeaderError naming the new leader: the caller asks it again
            self._ensure_record()
            index = self._propose_voter("rem", config.member(member_id))
            self.on_event("member_remove", member=member_id, role=role, user=by, index=index)
            return self._answer(self.wp.configuration(), plan, index)

    def admit(self, member: MemberInfo) -> str:
        """A member asking to join (``JoinGroup``): added as a learner unless this group does not take members that
        ask (``cluster.auto_join``) or the join policy objects; returns the refusal ("" when added)."""
        if not self.wp.auto_join:
            return ("this group does not add members that ask to join (cluster.auto_join is off on its leader): add "
                    f"it with `raftmq cluster add-member {member.id} --raft {member.raft_address} --grpc "
                    f"{member.grpc_address}`")
        refusal = self.join_policy(member.id) if self.join_policy is not None else ""
        if refusal:
            return refusal
        try:
            self.add(member, by="auto-join")
        except (MembershipChangeError, ReplicationError) as e:
            return str(e)
        return ""

    # ------------------------------------------------------------------ the leader's loop
    def leader_step(self) -> None:
        """Called by the membership thread while this member leads and takes writes: record the first
        membership, then at most one voter change: finish a replacement, retire a member, promote a learner."""
        wp = self.wp
        if wp.machine.membership is None:
            self._ensure_record()
            return
        if not self._lock.acquire(blocking=False):
            return  # a request is being handled
        try:
            config = wp.configuration()
            if config.learners:
                self._measure_learners(config)
            if self._uncommitted():
                return
            for new, old in sorted(config.replaces.items()):
                if config.role(new) == membership.VOTER and config.role(old) == membership.VOTER:
                    self._retire(config, old, f"replaced by {new}")
                    return
            if self.retiring is not None:
                going = self.retiring([*config.voter_ids, *config.learner_ids])
                if going:
                    self._retire(config, max(going), "beyond the StatefulSet's replicas")
                    return
            for learner in config.learners:
                if self._promote(config, learner):
                    return
        except NotLeaderError:
            pass
        except ReplicationError as e:
            log.warning("membership: %s", e)
        finally:
            self._lock.release()

    def learner_progress(self) -> dict[str, str]:
        return dict(self._progress)

    def _measure_learners(self, config: membership.Membership) -> None:
        """Each learner's distance from this leader: entries (its applied Raft index against the commit index)
        and bytes of commit log; while it copies, what it says it is doing."""
        wp = self.wp
        statuses = catch_up.peer_statuses(wp.peers, timeout=STATUS_TIMEOUT_S, with_metadata=False,
                                          members=list(config.learners))
        commit = wp.commit_index()
        _, end = wp.machine.applied_position()
        for m in config.learners:
            st = statuses.get(m.id)
            if st is None:
                self._progress[m.id] = "unreachable"
            elif st.membership_role != membership.LEARNER or st.leader_id != wp.node_id:
                self._progress[m.id] = st.not_ready_reason or "starting"
            else:
                entries, lag = max(0, commit - st.raft_applied_index), max(0, end - st.commit_log_max_offset)
                caught_up = entries <= wp.settings.learner_max_lag_entries and \
                    lag <= wp.settings.learner_max_lag_bytes
                self._progress[m.id] = (f"{entries} entries / {lag} bytes behind" +
                                        (": ready to become a voter" if caught_up else ": catching up"))
        for gone in set(self._progress) - {m.id for m in config.learners}:
            del self._progress[gone]

    def _promote(self, config: membership.Membership, learner: MemberInfo) -> bool:
        if not self._progress.get(learner.id, "").endswith("ready to become a voter"):
            return False
        after = [*config.voter_ids, learner.id]
        refusal = membership.health_refusal(after, [*self._healthy_voters(config), learner.id],
                                            f"promoting {learner.id}")
        if refusal:
            self._progress[learner.id] += f" ({refusal})"
            return False
        index = self._propose_voter("add", learner)
        self.on_event("member_promote", member=learner.id, index=index)
        return True

    def _retire(self, config: membership.Membership, member_id: str, why: str) -> None:
        role = config.role(member_id)
        if role == membership.LEARNER:
            index = self._propose_meta("learner_remove", {"id": member_id})
            self.on_event("member_remove", member=member_id, role=role, reason=why, index=index)
            return
        after = [v for v in config.voter_ids if v != member_id]
        refusal = membership.health_refusal(after, self._healthy_voters(config), f"removing {member_id}")
        if refusal or not after:
            log.warning("membership: %s should leave (%s) but waits: %s", member_id, why,
                        refusal or "it is the last voter")
            return
        if member_id == self.wp.node_id:
            self._step_down(config)
            return
        index = self._propose_voter("rem", config.member(member_id))
        self.on_event("member_remove", member=member_id, role=role, reason=why, index=index)

    # ------------------------------------------------------------------ helpers
    def _ensure_record(self) -> None:
        """The first leader of a new group (or after an upgrade) records the voters it runs with: from then on the
        group's membership comes from its log, not from any member's cluster.members."""
        if self.wp.machine.membership is not None:
            return
        config = self.wp.configuration()
        voters = [{"id": m.id, "raft": m.raft_address, "grpc": m.grpc_address} for m in config.voters]
        self._propose_meta("membership_init", {"voters": voters})
        log.info("membership: recorded the group's voters %s", ", ".join(config.voter_ids))

    def _require_leader(self) -> None:
        wp = self.wp
        if not wp.is_writable():
            raise wp._not_writable_error()
        if wp._log is None or wp._log.is_learner:
            raise MembershipChangeError("this member is not a voter")

    def _healthy_voters(self, config: membership.Membership) -> list[str]:
        """The voters connected to this leader, answering within the fallback timeout and within
        ``learner_max_lag_entries`` of its log; this leader included."""
        wp = self.wp
        lg = wp._log
        health = wp._on_tick_thread(lg.voter_health, TICK_TIMEOUT_S)
        limit = wp.settings.learner_max_lag_entries
        fresh = wp.settings.leader_fallback_timeout
        ok = [wp.node_id]
        for m in config.voters:
            h = health.get(m.raft_address)
            if m.id != wp.node_id and h is not None and h[0] and h[1] <= limit and h[2] <= fresh:
                ok.append(m.id)
        return ok

    def _uncommitted(self) -> bool:
        lg = self.wp._log
        return lg is None or self.wp._on_tick_thread(lg.uncommitted_change, TICK_TIMEOUT_S)

    def _step_down(self, config: membership.Membership) -> None:
        """The leader is the member to remove: hand leadership to the healthiest other voter, which removes it."""
        wp = self.wp
        healthy = [v for v in self._healthy_voters(config) if v != wp.node_id]
        if not healthy:
            raise MembershipChangeError(f"{wp.node_id} leads the group and no other voter is healthy to take over")
        wp.transfer_leadership(None)
        leader = wp.leader()
        raise NotLeaderError(leader.grpc_address if leader is not None and leader.id != wp.node_id else None)

    def _propose_meta(self, kind: str, arg: dict) -> int:
        refusal, index = self.wp._propose_meta_indexed(kind, arg)
        if refusal:
            raise MembershipChangeError(refusal)
        return index

    def _propose_voter(self, op: str, member: MemberInfo) -> int:
        """Append a ``MEMBERSHIP`` entry and wait until it is applied here; its Raft index."""
        wp = self.wp
        done = threading.Event()
        box: list[Any] = []

        def callback(res: Any, err: int) -> None:  # tick thread
            box.append((res, err))
            done.set()

        wp._log.propose_voter_change(membership.VoterChange(op, member), callback)
        if not done.wait(wp.settings.put_timeout_s):
            raise UnknownOutcomeError(f"{'adding' if op == 'add' else 'removing'} voter {member.id} was not "
                                      f"confirmed within {wp.settings.put_timeout_s}s; check `raftmq cluster status`")
        res, err = box[0]
        if err == FAIL_REASON.REQUEST_DENIED:
            raise MembershipChangeError("another membership change is not committed yet (or this leader has not "
                                        "committed an entry of its term); retry in a moment")
        if not wp._confirmed(res, err):
            raise wp._error_for(err)
        what = "added as a voter" if op == "add" else "removed from the voters"
        log.warning("membership: %s %s at Raft index %d", member.id, what, res[0])
        wp._membership_event.set()
        return res[0]

    def _answer(self, config: membership.Membership, plan: str, index: int = 0) -> dict:
        return {"plan": plan, "voters": config.voter_ids, "learners": config.learner_ids, "index": index,
                "at": time.time()}
