"""Showing untrusted bytes on an operator's terminal: message bodies, keys, tags and properties come from
producers, and a terminal obeys escape sequences. Human output goes through here; ``--json`` does not.

* ``escape`` (raftmq/text.py): control and bidirectional-override characters become visible escapes, so a
  body can neither move the cursor nor reorder text.
* ``hexdump``: binary bodies (not UTF-8, or NUL bytes) as ``offset  hex bytes  |ascii|`` lines.
* ``body_text``: either of those, cut to a limit with a note saying how much more there is and how to get it.
"""

from __future__ import annotations

from raftmq.text import escape

TEXT_LIMIT = 2048  # characters of a text body shown by default
HEX_LIMIT = 256  # bytes of a binary body shown by default
LINE_LIMIT = 200  # characters of a body on a one-line listing (consume)


def is_binary(body: bytes) -> bool:
    """Not UTF-8 text, or text with NUL bytes: shown as a hexdump."""
    if b"\0" in body:
        return True
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def hexdump(data: bytes, *, start: int = 0) -> str:
    """16 bytes a line: ``00000000  48 65 6c 6c 6f 0a ...  |Hello.|``."""
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at:at + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        hexes = hexes[:23] + " " + hexes[23:] if len(chunk) > 8 else hexes
        ascii_ = "".join(chr(b) if 0x20 <= b < 0x7f else "." for b in chunk)
        lines.append(f"{start + at:08x}  {hexes.ljust(48)}  |{ascii_}|")
    return "\n".join(lines)


def _more(shown: int, total: int, unit: str) -> str:
    return (f"... ({total - shown} more {unit} of {total}; --full shows all, --body-file PATH writes the raw "
            f"body)")


def body_text(body: bytes, *, full: bool = False, one_line: bool = False, text_limit: int = TEXT_LIMIT,
              hex_limit: int = HEX_LIMIT) -> str:
    """The body as an operator should see it: escaped text, or a hexdump for binary, cut unless ``full``."""
    if is_binary(body):
        if one_line:
            shown = body if full else body[:32]
            return f"<binary, {len(body)} bytes> " + shown.hex(" ") + ("" if len(shown) == len(body) else " ...")
        shown = body if full else body[:hex_limit]
        return hexdump(shown) + ("" if len(shown) == len(body) else "\n" + _more(len(shown), len(body), "bytes"))
    text = body.decode("utf-8")
    if full or len(text) <= text_limit:
        return escape(text, one_line=one_line)
    return escape(text[:text_limit], one_line=one_line) + ("" if one_line else "\n") + _more(
        text_limit, len(text), "characters")
