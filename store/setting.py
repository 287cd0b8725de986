"""A configuration field that carries its own documentation.

Why: every setting is documented once, beside its default. ``raftmq config sample``,
docs/operations/configuration.md and the Helm chart's values comments are generated from this metadata
(node/config_docs.py), and a test fails when a field has none, so the three can never disagree again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

DOC = "doc"    # what the setting does, its unit and its range: one or more sentences (Markdown code spans)
HELM = "helm"  # the Helm chart value that sets it one to one (e.g. "auth.aclDefault"); "" when none does
CHOICES = "choices"  # the only values it takes, when they are few (the loader refuses any other)


def setting(doc: str, default: Any = dataclasses.MISSING, *, default_factory: Callable[[], Any] | None = None,
            helm: str = "", choices: tuple[str, ...] = ()) -> Any:
    """A dataclass field with ``default`` (or ``default_factory``) whose metadata holds its documentation."""
    metadata = {DOC: doc, HELM: helm, CHOICES: tuple(choices)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def doc_of(f: dataclasses.Field) -> str:
    """The documentation a field carries ("" when it has none)."""
    return str(f.metadata.get(DOC, "")).strip()


def helm_of(f: dataclasses.Field) -> str:
    """The Helm chart value that sets this field one to one ("" when none does)."""
    return str(f.metadata.get(HELM, ""))


def choices_of(f: dataclasses.Field) -> tuple[str, ...]:
    """The only values the field takes (empty: not a fixed set)."""
    return tuple(f.metadata.get(CHOICES, ()))


def default_of(f: dataclasses.Field) -> Any:
    """The field's default value (a fresh one for ``default_factory`` fields; None when there is none)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None
