"""How client commands print: message lines and JSON, times, progress on stderr."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import sys
import time
from collections.abc import Callable

from raftmq.client.render import LINE_LIMIT, body_text, escape
from raftmq.client.types import MessageView, SendResult


def ms_to_text(ms: int) -> str:
    if ms <= 0:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def message_json(m: MessageView) -> dict:
    """A message as JSON: the body as text when it is UTF-8, else base64 in ``body_base64``."""
    d = dataclasses.asdict(m)
    try:
        d["body"] = m.body.decode("utf-8")
    except UnicodeDecodeError:
        del d["body"]
        d["body_base64"] = base64.b64encode(m.body).decode()
    return d


def print_json(obj) -> None:
    print(json.dumps(obj), flush=True)


def message_line(m: MessageView, *, full: bool = False) -> str:
    """One consumed message on one line: producer-controlled text escaped, a long body cut unless ``full``."""
    parts = [f"queue={m.queue_id}", f"offset={m.queue_offset}", f"msgId={m.msg_id}"]
    if m.tags:
        parts.append(f"tags={escape(m.tags)}")
    if m.keys:
        parts.append(f"keys={escape(','.join(m.keys))}")
    return " ".join(parts) + " | " + body_text(m.body, full=full, one_line=True, text_limit=LINE_LIMIT)


def send_line(r: SendResult) -> str:
    line = (f"SEND_OK msgId={r.msg_id} topic={r.topic} queue={r.queue_id} offset={r.queue_offset} "
            f"uniqKey={r.uniq_key}")
    line += " duplicate=true" if r.duplicate else ""  # a re-send answered with the first send's result
    return line + (f" note={r.note}" if r.note else "")


def sent_text(done: int, total: int, elapsed: float) -> str:
    return f"sent {done}/{total} ({100 * done // max(total, 1)}%), {done / elapsed:,.0f} msg/s"


def checked_text(done: int, total: int, elapsed: float) -> str:
    mib = 1 << 20
    return (f"checked {done / mib:,.1f}/{total / mib:,.1f} MiB ({100 * done // max(total, 1)}%), "
            f"{done / mib / elapsed:,.1f} MiB/s")


class Progress:
    """A progress line on stderr: redrawn in place on a terminal, a plain line every few seconds otherwise."""

    def __init__(self, total: int, stream=None, render: Callable[[int, int, float], str] | None = None):
        """``render(done, total, elapsed_s)`` makes the text (default: messages sent)."""
        self.total = total
        self.render = render or sent_text
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self._last = self.start
        self._interval = 0.25 if self.tty else 2.0
        self._shown = False

    def update(self, done: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self._interval:
            return
        self._last = now
        text = self.render(done, self.total, max(now - self.start, 1e-9))
        self._shown = True
        if self.tty:
            self.stream.write("\r" + text.ljust(60))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()


def preview(body: bytes, width: int = 40) -> str:
    text = body_text(body, one_line=True, text_limit=width)
    return text if len(text) <= width else text[: width - 3] + "..."
