"""Text shown to a person that came from elsewhere: made safe for a terminal or a page, and short.

Shared by the SDK's CLI (client/render.py, client/commands) and the node's web console, so both say the same
thing about the same error.

* ``escape``: control characters (C0, DEL, C1: ESC, CR, BEL, ...) and the bidirectional-override characters
  become visible ``\\x1b`` / ``\\u202e`` escapes, so a text can neither move the cursor nor reorder text.
* ``short_reason``: a long transport error as the reason an operator acts on.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls; bidi embeddings/overrides/isolates (U+202A-202E, U+2066-2069); line/paragraph
# separators. Newline and tab are handled by the caller's choice (one line or several).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _replace(m: re.Match) -> str:
    ch = m.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str, *, one_line: bool = True) -> str:
    """``text`` safe for a terminal; ``one_line`` also escapes newlines and tabs."""
    return (_UNSAFE_ONE_LINE if one_line else _UNSAFE).sub(_replace, text)


# What a long transport error boils down to, most specific first.
_REASONS = (
    ("connection refused", "connection refused"),
    ("deadline exceeded", "no answer in time"),
    ("did not answer in time", "no answer in time"),
    ("timed out", "no answer in time"),
    ("connection reset", "connection reset"),
    ("socket closed", "connection closed"),
    ("no route to host", "no route to host"),
    ("name resolution", "host name not resolved"),
    ("dns resolution", "host name not resolved"),
    ("permission denied", "permission denied"),
)
_DETAILS = re.compile(r'details = "([^"]*)"')


def short_reason(text: str, width: int = 60) -> str:
    """A long error (gRPC's multi-line repr, "failed to connect ...: ipv4:...: Connection refused") as the
    reason an operator acts on, at most ``width`` characters and escaped."""
    text = " ".join(str(text).split())
    low = text.lower()
    for marker, reason in _REASONS:
        if marker in low:
            return reason
    m = _DETAILS.search(text)
    if m:
        text = m.group(1)
    if len(text) > width:
        text = text.rsplit(": ", 1)[-1] if ": " in text else text
    text = escape(text)
    return text if len(text) <= width else text[: width - 3] + "..."
