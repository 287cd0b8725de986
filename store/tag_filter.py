"""Tag subscription expressions (``*``, ``A || B``) and RocketMQ's two-step tag match.

RocketMQ filters in two steps: the broker compares the consume-queue unit's tagsCode (the Java
``String.hashCode`` of TAGS) with the hash codes of the subscribed tags, which needs no commit-log read;
then the client compares the decoded TAGS string exactly, because different tags can share a hash code.
The store does both: ``matches_code`` while scanning units, ``matches_tags`` on the decoded message.

Unlike RocketMQ's lenient parser, a malformed expression is rejected with a message that says what is
wrong, so a typo such as ``A | B`` cannot silently subscribe to a tag named ``A | B``.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftmq.store.errors import StoreError
from raftmq.store.java import java_string_hash

SUB_ALL = "*"
_SEPARATOR = "||"


class InvalidTagExpressionError(StoreError, ValueError):
    """A tag subscription expression is malformed; the message names the problem and the valid forms."""


def tags_code(tags: str | None) -> int:
    """RocketMQ ``tagsString2tagsCode``: ``String.hashCode`` of TAGS (sign-extended), 0 when absent/empty."""
    return java_string_hash(tags) if tags else 0


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed subscription: ``is_all`` (``*`` or empty) or a set of tags and their hash codes."""

    expression: str
    tags: frozenset[str]
    codes: frozenset[int]

    @property
    def is_all(self) -> bool:
        return not self.tags

    @classmethod
    def all(cls) -> TagFilter:
        return cls(SUB_ALL, frozenset(), frozenset())

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        """Parse ``*``, ``""``/None (everything) or ``A || B || C`` (whitespace around tags is ignored)."""
        if expression is None:
            return cls.all()
        if not isinstance(expression, str):
            raise InvalidTagExpressionError(
                f"tag expression must be a string, got {type(expression).__name__}"
            )
        text = expression.strip()
        if text in ("", SUB_ALL):
            return cls.all()
        tags: list[str] = []
        pieces = text.split(_SEPARATOR)
        for i, piece in enumerate(pieces):
            tag = piece.strip()
            if not tag:
                where = (
                    "at the start" if i == 0 else "at the end" if i == len(pieces) - 1 else "between two '||'"
                )
                raise InvalidTagExpressionError(
                    f"invalid tag expression {expression!r}: empty tag {where}; "
                    "use '*' for all tags or 'A || B' for several"
                )
            _check_tag(expression, tag)
            tags.append(tag)
        frozen = frozenset(tags)
        return cls(expression, frozen, frozenset(java_string_hash(t) for t in frozen))

    def matches_code(self, code: int) -> bool:
        """Step one, on a consume-queue unit: may this tagsCode belong to a subscribed tag?"""
        return not self.tags or code in self.codes

    def matches_tags(self, tags: str | None) -> bool:
        """Step two, on the decoded message: is its TAGS exactly one of the subscribed tags?"""
        return not self.tags or (tags is not None and tags in self.tags)

    def __str__(self) -> str:
        return SUB_ALL if not self.tags else " || ".join(sorted(self.tags))


def _check_tag(expression: str, tag: str) -> None:
    if "|" in tag:
        raise InvalidTagExpressionError(
            f"invalid tag expression {expression!r}: stray '|' in {tag!r}; separate tags with '||'"
        )
    if "&" in tag:
        raise InvalidTagExpressionError(
            f"invalid tag expression {expression!r}: '&' in {tag!r}; only '||' (any of) is supported"
        )
    if tag == SUB_ALL:
        raise InvalidTagExpressionError(
            f"invalid tag expression {expression!r}: '*' must be the whole expression, not one of several tags"
        )
    if any(ch.isspace() for ch in tag):
        raise InvalidTagExpressionError(
            f"invalid tag expression {expression!r}: tag {tag!r} contains whitespace; separate tags with '||'"
        )
