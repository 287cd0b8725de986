"""The settings reconcile pass: each group's leader brings its own group's access users and consumer-group settings
to what the latest cluster-wide change of each left, as any group saw it (issue 37,
docs/design/scale-out.md#settings-in-every-group).

Why: a change of a user, its rules or networks, or of a consumer group's settings is made in every group at once,
but a group that is down at that moment misses it. Each group remembers when it last changed or deleted each user
and each consumer group's settings in such a change (a mark, replicated with the change:
replication.acl_table, store.subscription_groups), so its leader can compare, by the rule of the topic pass
(node/topic_reconcile.py): the latest state among the groups that answer wins. A user's secret is copied sealed
and sealed again by this group (so a member never sees another group's token it cannot open). Each leader
changes only its own group, through its own write path, marking the change with the time of the state it
follows, so the passes of all groups agree and stop.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftmq.node.admin import settings_of
from raftmq.node.errors import RpcError
from raftmq.node.topic_reconcile import GroupTopics, LeaderPass, latest
from raftmq.v1 import raftmq_pb2 as pb

if TYPE_CHECKING:
    from raftmq.node.core import BrokerCore

log = logging.getLogger(__name__)


def view(entries) -> GroupTopics:
    """One group's users or consumer-group settings as the pass sees them: records (JSON) and marks, by name."""
    return GroupTopics({e.name: e.record for e in entries if e.present}, {e.name: e for e in entries if e.marked})


def setting_changes(views: dict[str, GroupTopics], own: str,
                    same: Callable[[str, str], bool]) -> list[tuple[str, int, str, str]]:
    """What group ``own`` must do to reach the latest state of every user (or consumer group's settings) among
    ``views``: ``(name, the latest state's time, the group it is from, "set" | "delete")``. A record held by both
    is copied only when the other group's state is strictly newer and ``same`` says it differs."""
    mine = views[own]
    names = sorted({n for v in views.values() for n in (*v.topics, *v.marks)})
    out = []
    for name in names:
        since_ms, present, source = latest(views, name)
        mine_since, mine_present = mine.state(name)
        if present != mine_present:
            out.append((name, since_ms, source, "set" if present else "delete"))
        elif present and since_ms > mine_since and not same(views[source].topics[name], mine.topics[name]):
            out.append((name, since_ms, source, "set"))
    return out


class SettingsReconcile(LeaderPass):
    """Runs on every member of a cluster of several groups; acts while the member leads its group."""

    what = "settings reconcile"

    def __init__(self, node: BrokerCore, interval_s: float):
        super().__init__(node, interval_s)
        self.changed = 0  # users and consumer groups' settings this member changed in a pass (tests)

    def _open(self, token: str) -> str:
        """A sealed secret's digest (never the secret) when this member can open it, else the token."""
        try:
            return hashlib.sha256(self.node.auth.box.open(token).encode()).hexdigest()
        except Exception:  # noqa: BLE001 - sealed under a key this member does not have
            return token

    def _same_user(self, a: str, b: str) -> bool:
        ra, rb = json.loads(a), json.loads(b)
        ra["secret"], rb["secret"] = self._open(ra["secret"]), self._open(rb["secret"])
        return ra == rb

    async def pass_once(self) -> list[str]:
        """One pass over every group's users and consumer-group settings; what it changed in this member's group
        (``user set NAME``, ``group deleted NAME``, ...)."""
        node, groups = self.node, self.node.groups
        answers = {groups.own: settings_of(node)}
        for group in groups.names:
            if group == groups.own:
                continue
            try:
                answers[group] = await groups.relay(group, "ListSettings", pb.ListSettingsRequest(broker=group),
                                                    self._context())
            except RpcError as e:
                log.info("settings reconcile: group %s not asked this time: %s", group, e.message)
        if len(answers) == 1:
            return []
        done: list[str] = []
        group_views = {g: view(a.groups) for g, a in answers.items()}
        for name, since_ms, source, kind in setting_changes(group_views, groups.own, str.__eq__):
            record = group_views[source].topics.get(name)
            if await self._apply(f"consumer group {name!r}'s settings", source, since_ms, self._group_change(
                    name, kind, record, since_ms)):
                done.append(f"group {kind} {name}")
        if node.auth is not None and all(a.auth for a in answers.values()):
            user_views = {g: view(a.users) for g, a in answers.items()}
            for name, since_ms, source, kind in setting_changes(user_views, groups.own, self._same_user):
                cmd = self._user_command(name, kind, user_views[source].topics.get(name), since_ms)
                if cmd is not None and await self._apply(f"user {name!r}", source, since_ms,
                                                         lambda cmd=cmd: node.write_path.update_acl(cmd)):
                    node.auth.forget(name)
                    done.append(f"user {kind} {name}")
        return done

    def _group_change(self, name: str, kind: str, record: str | None, since_ms: int) -> Callable[[], Any]:
        from raftmq.store.subscription_groups import SubscriptionGroup

        wp = self.node.write_path
        if kind == "delete":
            return lambda: wp.update_group_config(name, None, since_ms)
        cfg = SubscriptionGroup.from_json(json.loads(record or "{}"))
        return lambda: wp.update_group_config(name, cfg, since_ms)

    def _user_command(self, name: str, kind: str, record: str | None, since_ms: int) -> dict | None:
        if kind == "delete":
            return {"op": "user_delete", "user": name, "mark": since_ms}
        rec = json.loads(record or "{}")
        box = self.node.auth.box
        try:
            rec["secret"] = box.seal(box.open(rec["secret"]))
        except Exception as e:  # noqa: BLE001 - the groups' bootstrap admin secrets differ
            log.warning("settings reconcile: user %r cannot be copied to group %s: its secret does not open here "
                        "(%s); set the same security.auth_admin_secret_key in every group", name,
                        self.node.groups.own, e)
            return None
        return {"op": "user_set", "user": name, "record": rec, "mark": since_ms}

    async def _apply(self, what: str, source: str, since_ms: int, change: Callable[[], Any]) -> bool:
        try:
            await self.node.run_blocking(change)
        except Exception as e:  # noqa: BLE001 - changed meanwhile (refused): the next pass looks again
            log.info("settings reconcile: %s not changed this time: %s", what, e)
            return False
        self.changed += 1
        log.warning("settings reconcile: %s in group %s brought to group %s's state of %d ms (the change had not "
                    "reached this group)", what, self.node.groups.own, source, since_ms)
        return True
