"""The write path's interface: everything `node` calls, whatever the replication mode.

Why a Protocol: the node must not care whether a put is applied locally (one node) or replicated through Raft;
both implementations resolve a future with final offsets, and fail it with the errors in `replication.errors`.
It is complete: the node reads nothing of a write path that is not declared here (no probing for what one
implementation has), and the single-node path answers each Raft question with what a group of one means.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from raftmq.replication.members import MemberInfo

if TYPE_CHECKING:
    from raftmq.replication.catch_up_throttle import CatchUpThrottle
    from raftmq.replication.deduplicator import Deduplicator
    from raftmq.replication.peers import Peers


def raise_refusal(refusals: list[str | None]) -> None:
    """A lone operation's refusal (``change_topics``) as the StoreError the single-topic calls raise."""
    if refusals and refusals[0]:
        from raftmq.store.errors import StoreError

        raise StoreError(refusals[0])


@runtime_checkable
class WritePath(Protocol):
    """Writes (messages, topic configs, consumer offsets) go through here; reads go to the store directly."""

    # the other members (replication.peers.Peers) of a replicated group: repair and anti-entropy ask them;
    # None on a single node
    peers: Peers | None
    # commit-log copies this member serves to catching-up peers (metrics); None on a single node
    catch_up_throttle: CatchUpThrottle | None
    # the de-duplication window and the leader's screening (docs/design/deduplication.md); None when turned off
    dedup: Deduplicator | None
    # counters since start (metrics); 0 on a single node
    leader_changes: int
    term_changes: int
    leaderless_seconds: float
    snapshot_installs: int
    catch_up_bytes: int
    snapshot_bytes_kept: int
    durable_ack_rounds: int

    def start(self) -> None:
        """Open for writes (single node: at once; Raft: once elected and caught up)."""

    def hand_off_leadership(self) -> None:
        """A graceful stop's first step: a replicated leader hands leadership to a caught-up member (logged,
        never raises); nothing to do on a follower or a single node."""

    def stop(self) -> None:
        """Stop accepting writes, finish or fail in-flight ones, hand off leadership when replicated."""

    def put(self, msgs: list[Any]) -> Future:
        """Queue ``msgs`` (store.Message) for the next group commit; the future resolves to list[PutResult].

        Never raises for flow errors: the future fails with NotLeaderError, NoLeaderError, BusyError,
        UnknownOutcomeError, or a store.errors.MessageIllegalError for bad input.
        """

    def put_many(self, puts: list[list[Any]]) -> list[Future]:
        """Several independent puts queued together (one group commit when they fit); one future each, with
        ``put``'s contract."""

    def change_topics(self, ops: list[tuple[str, Any]]) -> list[str | None]:
        """Topic operations applied as one change, in order: ``("create", TopicConfig)`` (refused when the topic
        exists), ``("update", TopicConfig)`` (replaces it), ``("delete", name)`` or ``("mark", (name,
        at_ms or None))`` (a cluster of groups: when this group created or deleted the topic, at ``at_ms`` or
        now, store.topic_config.TopicMark); one replicated command when clustered (concurrent callers'
        operations may share it). Returns once applied here and durable, with one refusal (str) or None per
        operation."""

    def create_topic(self, cfg: Any) -> None:
        """Create a topic (store.topic_config.TopicConfig); StoreError when it exists or is invalid."""

    def update_topic(self, cfg: Any) -> None:
        """Replace a topic's config; StoreError when invalid."""

    def delete_topic(self, name: str) -> None:
        """Delete a topic's config and consume queues; StoreError when it does not exist."""

    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Record a consumer group's next offsets ({queue_id: offset}); replicated (coalesced) when clustered."""

    def update_delay_offsets(self, offsets: dict[int, int]) -> None:
        """Record delayed-delivery progress ({delay level: next schedule-queue offset}); replicated when
        clustered, persisted in config/delayOffset.json; returns once applied."""

    def update_timer_progress(self, low: int, scanned: int, delivered_up_to: int) -> None:
        """Record timer-delivery progress (store.timer_progress); replicated when clustered, persisted in
        config/timerProgress.json; returns once applied."""

    def apply_pop(self, ops: list[list]) -> list[str | None]:
        """Pop-consumption state changes (store.pop_state.PopStateTable.apply); replicated when clustered;
        returns once applied here, one refusal or None per op."""

    def update_group_config(self, group: str, cfg: Any, mark_ms: int | None = None) -> None:
        """Set a consumer group's own settings (store.subscription_groups.SubscriptionGroup) or drop them (``cfg``
        None: the node configuration applies again); replicated when clustered; StoreError when invalid.
        ``mark_ms``: remembered as when they were set or dropped (a cluster of several groups)."""

    def end_console_session(self, session: str, until_s: int) -> None:
        """End a web-console session on every member (its id, and when it would have expired, epoch s)."""

    def update_acl(self, cmd: dict) -> None:
        """Change users / access rules (replication.acl_table); replicated when clustered; StoreError when
        refused (unknown user, bad rule index)."""

    def acl_table(self) -> Any:
        """The applied replication.acl_table.AclTable (None before the write path started)."""

    def catch_up_with_leader(self, timeout: float) -> bool:
        """Wait until this member has applied everything the leader had committed when asked (a read barrier:
        a change acknowledged anywhere before now is then seen here). True when caught up within ``timeout``."""

    def not_ready_reason(self) -> str:
        """Why this member must not take traffic yet (it cannot apply, or it is still catching up with the group
        after a start); "" when it may."""

    def is_writable(self) -> bool:
        """True when a put submitted now can be accepted by this node."""

    def leader(self) -> MemberInfo | None:
        """The current leader as far as this node knows (None during an election)."""

    def leader_contact(self) -> tuple[MemberInfo | None, float]:
        """(leader, seconds since this member last heard from it; 0 on the leader itself): a follower does not
        relay work to a leader it has not heard from lately (node/forwarding.py)."""

    def term(self) -> int:
        """The Raft term (0 on a single node): it changes exactly when an election happened."""

    def commit_index(self) -> int:
        """The highest Raft index known committed by a majority (0 on a single node)."""

    def raft_applied_index(self) -> int:
        """The Raft index of the last entry applied here (0 on a single node)."""

    def election_counters(self) -> dict[str, int]:
        """Elections, pre-votes, tick stalls and the other Raft event counters since start (metrics); empty on a
        single node."""

    def group_commit_stats(self) -> tuple[int, int, int]:
        """(group commits, messages, send requests) since start: how well sends share one entry (metrics)."""

    def write_stage_seconds(self) -> dict[str, tuple[int, float]]:
        """{stage: (batches, seconds)} since start: where the leader's puts spent their time
        (replication/stage_times.py); empty on a single node."""

    def members_status(self) -> list[dict]:
        """One dict per member: id, address, role, term, commit_index, applied_offset,
        dispatch_behind_bytes, lag, health."""

    def transfer_leadership(self, to_id: str | None) -> None:
        """Hand leadership to member ``to_id`` (None: the most caught-up follower)."""
