"""Plain-text tables for the CLI, boxed like ``patronictl list`` (title in the top border)."""

from __future__ import annotations

from collections.abc import Sequence

from raftmq.client.render import escape


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return escape(str(value))  # cells can hold producer-controlled text (tags, keys, bodies, error texts)


def _is_numeric(column) -> bool:
    """A column is right-aligned when every filled cell is a number ("-" and blanks do not count)."""
    filled = [v for v in column if v not in (None, "", "-")]
    return bool(filled) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in filled)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, title: str = "") -> str:
    """A boxed table; numbers are right-aligned, text left-aligned. ``title`` goes into the top border."""
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [_is_numeric(row[i] for row in rows) for i in range(len(headers))]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    border = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(values: Sequence[str], align: bool) -> str:
        parts = [v.rjust(w) if align and numeric[i] else v.ljust(w)
                 for i, (v, w) in enumerate(zip(values, widths, strict=True))]
        return "| " + " | ".join(parts) + " |"

    top = border
    if title:
        label = f"+ {title} "
        top = label + border[len(label):] if len(label) < len(border) else label + "+"
    out = [top, line(headers, False), border]
    out += [line(r, True) for r in cells]
    out.append(border)
    return "\n".join(out)
