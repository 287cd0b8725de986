"""The automatic leader rebalance (``cluster.auto_balance_leaders``; docs/design/leader-balance.md).

Why: after a failover a group stays led by whichever member won the election, so two groups' leaders can end up
on one machine and the cluster writes through one machine's cores. When this member leads its group and is not
the group's preferred leader (node/preferred_leaders.py), it watches the preferred one; once that member has been
healthy, ready, a voter and caught up at every look for ``cluster.auto_balance_after_s``, it hands leadership to
it with the same transfer ``raftmq cluster transfer-leader`` uses. Each move (or failed attempt) is counted
(``raftmq_leader_balance_moves``) and written as an audit event line; `cluster status --watch` shows the leader
change it causes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)

POLL_S = 2.0  # between two looks at the preferred leader (each asks the peers, as `cluster status` does)
CAUGHT_UP_BYTES = 1 << 20  # under writes a follower is always a little behind; the transfer drains the rest


class LeaderBalancer:
    """One per member; acts only while this member leads its group and another member is preferred."""

    def __init__(self, node: BrokerCore, after_s: float, poll_s: float = POLL_S):
        self.node = node
        self.after_s = after_s
        self.poll_s = min(poll_s, max(after_s / 2, 0.2))
        self.preferred = node.groups.preferred.get(node.groups.own, "")
        self.fit_since: float | None = None  # monotonic time the preferred leader was first seen fit, in a row
        self.waiting_for = ""  # why the preferred leader may not take over, as last logged

    async def run(self) -> None:
        if not self.preferred:
            return
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                await asyncio.to_thread(self.step, time.monotonic())
            except Exception:  # noqa: BLE001 - one failed look must not end the rebalance
                log.exception("leader balance: look at %s failed", self.preferred)
                self.fit_since = None

    def unfit_reason(self) -> str:
        """Why the preferred leader may not take over now ("" when it may), from this leader's view."""
        wp = self.node.write_path
        row = next((r for r in wp.members_status() if r.get("id") == self.preferred), None)
        if row is None:
            return "it is not a member of the group (removed online?)"
        if row.get("membership") != "voter":
            return f"it is a {row.get('membership') or 'non-member'}, not a voter"
        if row.get("health") != "ok":
            return f"it is {row.get('health')}"
        if row.get("ready") is False:
            return f"it is not ready ({row.get('not_ready_reason') or 'no reason given'})"
        lag = row.get("lag")
        if lag is None or lag > CAUGHT_UP_BYTES:
            return f"it lags {lag} bytes"
        return ""

    def step(self, now: float) -> bool:
        """One look; True when leadership was handed over."""
        wp = self.node.write_path
        if wp is None or self.preferred == self.node.node_id or not wp.is_leader():
            self.fit_since = None
            return False
        reason = self.unfit_reason()
        if reason != self.waiting_for:  # said once per change, not every look
            if reason:
                log.info("leader balance: group %s stays led by %s for now: its preferred leader %s: %s",
                         self.node.groups.own, self.node.node_id, self.preferred, reason)
            self.waiting_for = reason
        if reason:
            self.fit_since = None
            return False
        if self.fit_since is None:
            self.fit_since = now
        if now - self.fit_since < self.after_s:
            return False
        return self.hand_over(now)

    def hand_over(self, now: float) -> bool:
        from raftmq.node.auth import audit

        group, me, to = self.node.groups.own, self.node.node_id, self.preferred
        self.fit_since = None  # a failed attempt waits a whole period again
        waited = round(self.after_s, 1)
        try:
            self.node.write_path.transfer_leadership(to)
        except Exception as e:  # noqa: BLE001 - refused or timed out: counted, logged, tried again later
            self.node.metrics.record_leader_move(to, "failed")
            audit("leader_balance", by=me, group=group, to=to, outcome="failed", reason=str(e))
            log.warning("leader balance: group %s: handing leadership from %s to its preferred leader %s failed: "
                        "%s (tried again after %.0f s)", group, me, to, e, self.after_s)
            return False
        self.node.metrics.record_leader_move(to, "moved")
        audit("leader_balance", by=me, group=group, to=to, outcome="moved", healthy_for_s=waited)
        log.warning("leader balance: group %s: leadership handed from %s back to its preferred leader %s (healthy "
                    "and caught up for %.0f s)", group, me, to, self.after_s)
        return True
