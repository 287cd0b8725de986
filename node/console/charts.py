"""Small inline SVG line charts, rendered on the server (no JS, no chart library).

The live refresh in console.js simply swaps in the freshly rendered chart, so there is one renderer only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from raftmq.node.console.safe import Markup, esc, html

PALETTE = ("#2f6fde", "#e0711b", "#2e9e5b", "#b03ab5", "#c7353b", "#6b7280")


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]  # (epoch seconds, value)
    color: str = ""
    step: bool = False  # a step line (a value that holds until the next sample, e.g. the Raft term)


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * exp:
            return m * exp
    return 10 * exp


def _fmt(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.3g}M"
    if v >= 1e3:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}"


def line_chart(series: Sequence[Series], *, title: str, unit: str = "", span_s: float = 360.0,
               width: int = 560, height: int = 150, now: float | None = None, chart_id: str = "") -> Markup:
    """An SVG chart of at most the last ``span_s`` seconds (less while the history is younger, at least a
    minute); an empty chart says "collecting samples" instead."""
    now = time.time() if now is None else now
    oldest = min((t for s in series for t, _ in s.points), default=now)
    span_s = min(span_s, max(60.0, math.ceil((now - oldest) / 60) * 60))
    left, right, top, bottom = 44, 8, 22, 20
    pw, ph = width - left - right, height - top - bottom
    t0 = now - span_s
    visible = [[(t, v) for t, v in s.points if t >= t0] for s in series]
    vmax = _nice_max(max((v for pts in visible for _, v in pts), default=0.0))

    def x(t: float) -> float:
        return left + (t - t0) / span_s * pw

    def y(v: float) -> float:
        return top + ph - (v / vmax) * ph

    parts = [html('<svg class="chart" id="{}" data-live="1" viewBox="0 0 {} {}" width="{}" height="{}" '
                  'role="img" aria-label="{}">', chart_id, width, height, width, height, title),
             html('<text class="title" x="{}" y="14">{}</text>', left, title)]
    for frac in (0.0, 0.5, 1.0):
        yy = top + ph - frac * ph
        parts.append(html('<line class="grid" x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}"/>', left, left + pw, yy, yy))
        parts.append(html('<text class="axis" x="{}" y="{:.1f}" text-anchor="end">{}</text>',
                          left - 4, yy + 4, _fmt(frac * vmax)))
    for label, tt in ((f"-{int(span_s // 60)} min", t0), ("now", now)):
        anchor = "start" if tt == t0 else "end"
        parts.append(html('<text class="axis" x="{:.1f}" y="{}" text-anchor="{}">{}</text>',
                          x(tt), height - 4, anchor, label))
    lx = left + 4
    for i, (s, pts) in enumerate(zip(series, visible, strict=True)):
        color = s.color or PALETTE[i % len(PALETTE)]
        if pts:
            coords = []
            for j, (t, v) in enumerate(pts):
                if s.step and j:
                    coords.append(f"{x(t):.1f},{y(pts[j - 1][1]):.1f}")
                coords.append(f"{x(t):.1f},{y(v):.1f}")
            parts.append(html('<polyline fill="none" stroke="{}" stroke-width="1.8" points="{}"/>',
                              color, " ".join(coords)))
        last = f" {_fmt(pts[-1][1])}{unit}" if pts else ""
        text = f"{s.label}{last}"
        parts.append(html('<rect x="{}" y="{}" width="10" height="3" fill="{}"/>', lx + 0.0, top + 4, color))
        parts.append(html('<text class="legend" x="{}" y="{}">{}</text>', lx + 14, top + 9, text))
        lx += 24 + 6.5 * len(text)
    if not any(visible):
        parts.append(html('<text class="axis" x="{}" y="{}" text-anchor="middle">collecting samples…</text>',
                          left + pw / 2, top + ph / 2))
    parts.append(Markup("</svg>"))
    return Markup("".join(esc(p) for p in parts))
