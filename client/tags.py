"""Tag expressions ("*" or "TagA || TagB"), parsed and normalised the way RocketMQ's SubscriptionData reads
them, but strict about the mistakes people make (a single "|", "*" inside a list)."""

from __future__ import annotations

from collections.abc import Iterable

from raftmq.client.errors import InvalidArgumentError

ALL = "*"


def parse_tag_expression(expr: str | None) -> list[str] | None:
    """The tags an expression selects, in order, or None for every message ("", "*")."""
    text = (expr or "").strip()
    if text in ("", ALL):
        return None
    tags: list[str] = []
    for part in text.split("||"):
        tag = part.strip()
        if not tag:
            continue
        if "|" in tag:
            raise InvalidArgumentError(f"bad tag expression {expr!r}: separate tags with '||', e.g. 'A || B'")
        if tag == ALL:
            raise InvalidArgumentError(f"bad tag expression {expr!r}: '*' selects everything and must stand alone")
        if tag not in tags:
            tags.append(tag)
    if not tags:
        raise InvalidArgumentError(f"bad tag expression {expr!r}: no tag in it; use '*' for all messages")
    return tags


def format_tag_expression(tags: str | Iterable[str] | None) -> str:
    """The canonical expression for a tag list or an expression: "*" or "A || B"."""
    if tags is None:
        return ALL
    parsed = parse_tag_expression(tags) if isinstance(tags, str) else parse_tag_expression(" || ".join(tags))
    return ALL if parsed is None else " || ".join(parsed)
