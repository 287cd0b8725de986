"""Safe HTML for the web console: everything that came from a producer or a peer is escaped exactly once.

Why a module of its own: message bodies, keys, properties and peer error texts are attacker-controlled. A body
with ``<script>`` must show as text, a body with terminal escapes or Unicode direction overrides must show
*visibly* (``\\x1b``, ``\\u202e``), a binary body as a hexdump, and a 4 MiB body must not become a 4 MiB page.
Pages are built from ``Markup`` (trusted HTML) and plain values that ``esc`` escapes; ``html()`` formats a trusted
template with escaped arguments, so a page cannot forget to escape.
"""

from __future__ import annotations

import html as _html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, urlencode

# C0 controls except tab and newline, DEL, C1 controls, and the Unicode format characters that reorder or hide
# text (bidi embeddings/overrides/isolates, zero-width characters, the BOM): shown as visible escapes.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
# "mostly control characters" (docs/operations/console.md): a UTF-8 body with more than this share of them is binary. A
# short log line with a colour escape or two (issue 34: "\x1b[31mred\x1b[0m") is text, shown with them visible.
_TEXT_CONTROL_LIMIT = 0.5

PREVIEW_BYTES = 160        # body preview in result lists
DETAIL_TEXT_BYTES = 16 << 10  # text shown on a message's page
DETAIL_HEX_BYTES = 4 << 10    # binary shown as hexdump on a message's page


class Markup(str):
    """A string that is already safe HTML (built by this module or from a trusted literal)."""

    __slots__ = ()


def _visible(ch: re.Match) -> str:
    c = ord(ch.group())
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def visible_controls(text: str) -> str:
    """``text`` with every control / invisible formatting character replaced by a visible escape."""
    return _CONTROL.sub(_visible, text)


def esc(value: object) -> Markup:
    """HTML-escape ``value`` (control characters made visible); Markup passes through unchanged."""
    if isinstance(value, Markup):
        return value
    return Markup(_html.escape(visible_controls(str(value)), quote=True))


def _arg(value: object) -> object:
    """Numbers stay numbers (so ``{:.1f}`` works; their text needs no escaping); everything else is escaped."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return esc(value)


def html(template: str, *args: object, **kwargs: object) -> Markup:
    """``template.format(...)`` with every argument escaped: the template is trusted, the arguments are not."""
    return Markup(template.format(*(_arg(a) for a in args), **{k: _arg(v) for k, v in kwargs.items()}))


def join(parts: Iterable[object], sep: str = "") -> Markup:
    return Markup(sep.join(esc(p) for p in parts))


def url(path: str, **params: object) -> str:
    """``path`` (segments given as ``/ui/topics/{name}`` already quoted by ``seg``) plus a query string of the
    non-empty ``params``."""
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return f"{path}?{query}" if query else path


def seg(value: str) -> str:
    """One URL path segment (a topic or group name may hold ``%`` or ``/``-like characters)."""
    return quote(value, safe="")


# ---------------------------------------------------------------------------------------------- bodies
@dataclass(frozen=True)
class BodyView:
    """How a body is shown: ``kind`` is "text", "binary" or "empty"; ``html`` the escaped content of the first
    ``shown`` bytes of ``size``."""

    kind: str
    html: Markup
    size: int
    shown: int

    @property
    def truncated(self) -> bool:
        return self.shown < self.size


def _decode_prefix(data: bytes) -> str | None:
    """UTF-8 text of ``data`` (a prefix of a body: a character cut at the end is dropped), or None if binary."""
    for cut in range(4):  # a UTF-8 character is at most 4 bytes: the prefix may end inside one
        try:
            return data[:len(data) - cut].decode("utf-8")
        except UnicodeDecodeError as e:
            if e.start < len(data) - 3:
                return None
    return None


def is_text(body: bytes, sample: int = 4096) -> bool:
    """UTF-8 without NULs and not mostly control characters (escape sequences in a log line are fine)."""
    text = _decode_prefix(body[:sample])
    if text is None or "\x00" in text:
        return False
    controls = len(_CONTROL.findall(text))
    return controls <= _TEXT_CONTROL_LIMIT * max(1, len(text))


def render_text(text: str) -> Markup:
    """Escaped text with control characters shown as highlighted escapes (``<span class=ctl>\\x1b</span>``)."""
    out = []
    pos = 0
    for m in _CONTROL.finditer(text):
        out.append(_html.escape(text[pos:m.start()], quote=True))
        out.append(f'<span class="ctl">{_visible(m)}</span>')
        pos = m.end()
    out.append(_html.escape(text[pos:], quote=True))
    return Markup("".join(out))


def hexdump(data: bytes, start: int = 0) -> str:
    """Classic 16-bytes-a-line dump: offset, hex bytes, printable ASCII (others as '.')."""
    lines = []
    for i in range(0, len(data), 16):
        row = data[i:i + 16]
        hexes = " ".join(f"{b:02x}" for b in row[:8]) + "  " + " ".join(f"{b:02x}" for b in row[8:])
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in row)
        lines.append(f"{start + i:08x}  {hexes:<48}  |{text}|")
    return "\n".join(lines)


def render_body(body: bytes, text_limit: int = DETAIL_TEXT_BYTES, hex_limit: int = DETAIL_HEX_BYTES) -> BodyView:
    """The safe view of a whole body: text escaped, binary as hexdump, each cut at its limit."""
    if not body:
        return BodyView("empty", Markup('<span class="muted">(empty body)</span>'), 0, 0)
    if is_text(body):
        text = _decode_prefix(body[:text_limit]) or ""
        shown = len(text.encode("utf-8"))
        return BodyView("text", render_text(text), len(body), shown)
    part = body[:hex_limit]
    return BodyView("binary", esc(hexdump(part)), len(body), len(part))


def preview(body: bytes, limit: int = PREVIEW_BYTES) -> Markup:
    """One line for result tables: the start of a text body (newlines shown as ⏎), or the first bytes in hex."""
    if not body:
        return Markup('<span class="muted">(empty)</span>')
    more = Markup('<span class="muted">…</span>') if len(body) > limit else Markup("")
    if is_text(body):
        text = (_decode_prefix(body[:limit]) or "").replace("\r\n", "\n").replace("\n", "⏎").replace("\t", " ")
        return Markup(render_text(text) + more)
    hexes = body[:min(limit, 32)].hex(" ")
    more = Markup('<span class="muted">…</span>') if len(body) > 32 else Markup("")
    return Markup(html('<span class="tag">binary</span> <code>{}</code>', hexes) + more)


def human_bytes(n: int | float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
