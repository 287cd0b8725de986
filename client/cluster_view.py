"""Every group's members in one view (issue 38): what ``raftmq cluster status`` and ``cluster check`` walk.

Why: a cluster of several Raft groups is one cluster to its operator
(docs/design/scale-out.md#status-check-and-the-console-across-groups). The groups come from the route (``Admin.groups``); each group's members from
``ClusterStatus`` pinned to that group, which the answering member relays to one of the group's members as it
relays every call for another group (node/groups.py). So there is one read path for a group's status, whichever
member the client reached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftmq.client.admin import Admin
from raftmq.client.errors import ConnectionError, NotFoundError, RaftmqError  # noqa: A004
from raftmq.client.routing import GroupRoute
from raftmq.client.types import ClusterStatus


@dataclass
class GroupStatus:
    """One group's members as one of them sees them, or why the group could not be asked."""

    name: str
    status: ClusterStatus | None = None
    error: str = ""


@dataclass
class ClusterView:
    """Every group of the cluster (or the one ``--group`` named), in configuration order."""

    cluster_name: str
    groups: list[GroupStatus] = field(default_factory=list)
    answered_by: str = ""
    many: bool = False  # the cluster has several groups (a one-group cluster is shown as before groups)

    def members(self):
        """(group name, member) of every group that answered."""
        return [(g.name, m) for g in self.groups if g.status is not None for m in g.status.members]


def groups_of(admin: Admin, only: str | None = None) -> tuple[list[GroupRoute], bool]:
    """The cluster's groups in configuration order and whether there are several; ``only``: that group, checked
    against them (NotFoundError naming the cluster's groups). An older server without routes is one unnamed
    group, and so is a member that cannot answer a route yet (still starting)."""
    try:
        routes = admin.groups()
    except ConnectionError:  # no server answers at all: so would the status
        raise
    except RaftmqError:
        if only is not None:
            raise
        routes = []  # a member still starting answers its status but no route: its own group, as before groups
    routes = routes or [GroupRoute("", (), "", True, "", False, 0, 0, 0)]
    if only is not None:
        chosen = [g for g in routes if g.name == only]
        if not chosen:
            raise NotFoundError(f"unknown group {only!r} (--group): this cluster's groups are "
                                f"{', '.join(g.name for g in routes if g.name) or 'not named (an older server)'}")
        return chosen, len(routes) > 1
    return routes, len(routes) > 1


def cluster_view(admin: Admin, only: str | None = None) -> ClusterView:
    """Every group's members (``only``: that group's). A one-group cluster is asked exactly as before groups;
    a group that cannot be asked (the route already says it does not answer, or the relayed call fails) is in
    the view with the reason, the others are still shown."""
    routes, many = groups_of(admin, only)
    if not many and only is None:
        status = admin.cluster_status()
        return ClusterView(status.cluster_name, [GroupStatus(status.group or routes[0].name, status)],
                           status.answered_by)
    view = ClusterView("", many=many)
    for route in routes:
        if not route.available:
            view.groups.append(GroupStatus(route.name, error=" ".join(route.error.split()) or "does not answer"))
            continue
        try:
            status = admin.cluster_status(group=route.name)
        except RaftmqError as exc:
            view.groups.append(GroupStatus(route.name, error=" ".join(exc.message.split())))
            continue
        view.groups.append(GroupStatus(route.name, status))
        view.cluster_name = view.cluster_name or status.cluster_name
        view.answered_by = view.answered_by or status.answered_by
    return view
