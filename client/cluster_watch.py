"""``raftmq cluster status --watch``: the table redrawn in place on a terminal, plain lines when piped, and the
events between two looks ("leader n1 -> n0 at 15:30:16", a member unreachable or back) as they happen.

Events are what an operator in a failover drill wants to read afterwards, so they are derived here by comparing
consecutive answers rather than left to be spotted in a redrawn table.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable
from typing import TextIO

from raftmq.client.cluster_view import ClusterView
from raftmq.client.errors import RaftmqError
from raftmq.client.types import ClusterStatus, MemberStatus
from raftmq.text import short_reason

MAX_EVENTS_SHOWN = 10
# cursor home, then each line cleared to its end, then everything below cleared: no flicker, no scrollback growth
_HOME, _CLEAR_EOL, _CLEAR_BELOW = "\x1b[H", "\x1b[K", "\x1b[J"


def _now() -> str:
    return dt.datetime.now().strftime("%H:%M:%S")


def _state(m: MemberStatus) -> str:
    if m.role == "unreachable":
        return f"unreachable ({short_reason(m.error)})" if m.error else "unreachable"
    if m.error:
        return f"error ({short_reason(m.error)})"
    if not m.healthy:
        return "unhealthy"
    return "running" if m.ready else "not ready"


def _describe(m: MemberStatus) -> str:
    """Role and state in a few words ("follower running", "unreachable (connection refused)")."""
    return _state(m) if m.role == "unreachable" else f"{m.role or '?'} {_state(m)}"


def events_between(old: ClusterStatus | None, new: ClusterStatus, at: str) -> list[str]:
    """What changed from ``old`` to ``new``: leader, term, each member's role and state."""
    if old is None:
        return []
    out = []
    if old.leader_id != new.leader_id:
        term = max((m.term for m in new.members if m.id == new.leader_id), default=0)
        out.append(f"leader {old.leader_id or 'none'} -> {new.leader_id or 'none'} at {at}"
                   + (f" (term {term})" if term else ""))
    before = {m.id: m for m in old.members}
    for m in sorted(new.members, key=lambda m: m.id):
        was = before.get(m.id)
        if was is None:
            out.append(f"{m.id} joined ({_describe(m)}) at {at}")
            continue
        if _describe(was) != _describe(m):
            out.append(f"{m.id} {_describe(was)} -> {_describe(m)} at {at}")
    for gone in sorted(set(before) - {m.id for m in new.members}):
        out.append(f"{gone} no longer listed at {at}")
    return out


def summary_line(status: ClusterStatus, at: str) -> str:
    members = ", ".join(f"{m.id} {_describe(m)}" for m in sorted(status.members, key=lambda m: m.id))
    return f"{at} leader {status.leader_id or 'none'}: {members}"


def view_events(old: ClusterView | None, new: ClusterView, at: str) -> list[str]:
    """What changed in every group (issue 38): each group's events as ``events_between`` finds them, named
    "group g1: ...", and a group that stopped or started answering."""
    if old is None:
        return []
    before = {g.name: g for g in old.groups}
    out = []
    for g in new.groups:
        was = before.get(g.name)
        if was is None:
            continue
        if g.status is None:
            if was.status is not None:
                out.append(f"group {g.name} unavailable ({short_reason(g.error)}) at {at}")
            continue
        if was.status is None:
            out.append(f"group {g.name} answers again (leader {g.status.leader_id or 'none'}) at {at}")
            continue
        out += [f"group {g.name}: {e}" for e in events_between(was.status, g.status, at)]
    return out


def view_summary(view: ClusterView, at: str) -> str:
    """One line per look at every group: each group's leader and members, or why it did not answer."""
    parts = [f"{g.name} unavailable ({short_reason(g.error)})" if g.status is None else
             f"{g.name} " + summary_line(g.status, "").strip() for g in view.groups]
    return f"{at} " + "; ".join(parts)


class Watch:
    """One look per ``tick()``; ``table(status)`` renders the full table."""

    def __init__(self, fetch: Callable[[], ClusterStatus], table: Callable[[ClusterStatus], str], *,
                 out: TextIO | None = None, tty: bool | None = None, events=events_between, summary=summary_line):
        """``events`` and ``summary``: how two looks differ and one look in a line (``view_events`` and
        ``view_summary`` watch every group of a ClusterView)."""
        self.fetch = fetch
        self.table = table
        self.events_of = events
        self.summary = summary
        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.last: ClusterStatus | None = None
        self.events: list[str] = []
        self.failing: str | None = None  # the reason the last look failed, while it keeps failing

    def tick(self) -> None:
        at = _now()
        try:
            status = self.fetch()
        except RaftmqError as exc:  # keep watching through a failover or a restart
            reason = short_reason(exc.message)
            if self.failing != reason:
                self._event(f"cluster status unavailable ({reason}) at {at}")
            self.failing = reason
            if self.tty:
                self._draw(self.last, at, note=f"(no answer: {reason})")
            return
        if self.failing is not None:
            self._event(f"cluster status answered again by {status.answered_by} at {at}")
            self.failing = None
        for e in self.events_of(self.last, status, at):
            self._event(e)
        first = self.last is None
        self.last = status
        if self.tty:
            self._draw(status, at)
        else:
            if first:
                self.out.write(self.table(status) + "\n")
            self.out.write(self.summary(status, at) + "\n")
            self.out.flush()

    def _event(self, text: str) -> None:
        self.events.append(text)
        if not self.tty:
            self.out.write("event: " + text + "\n")
            self.out.flush()

    def _draw(self, status: ClusterStatus | None, at: str, note: str = "") -> None:
        lines = [f"{at}  " + (f"(answered by {status.answered_by})" if status is not None else "") + " " + note]
        if status is not None:
            lines += self.table(status).splitlines()
        if self.events:
            lines += ["", "Events:"] + [f"  {e}" for e in self.events[-MAX_EVENTS_SHOWN:]]
        self.out.write(_HOME + "".join(line + _CLEAR_EOL + "\n" for line in lines) + _CLEAR_BELOW)
        self.out.flush()
