"""How the node's log lines look: ``text`` for people, ``json`` (one object per line) for log pipelines.

Every JSON line carries the member id, the Raft term at the time of the line and, inside a gRPC call, the request
id (the caller's ``x-request-id`` metadata, else one made up per call and sent back in the trailing metadata), so
a log pipeline can follow one request and one term across members.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
from collections.abc import Callable

LOG_FORMATS = ("text", "json")
REQUEST_ID_METADATA_KEY = "x-request-id"

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("raftmq_request_id", default="")
_term_source: list[Callable[[], int]] = []


def set_term_source(term: Callable[[], int]) -> None:
    """Where JSON lines read the current Raft term from (the broker, once its write path exists)."""
    _term_source[:] = [term]


def _term() -> int | None:
    if not _term_source:
        return None
    try:
        return int(_term_source[0]())
    except Exception:  # noqa: BLE001 - a log line must never fail because the write path is not up (yet)
        return None


class JsonFormatter(logging.Formatter):
    def __init__(self, member: str):
        super().__init__()
        self.member = member

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "member": self.member,
            "term": _term(),
            "msg": record.getMessage(),
        }
        rid = request_id.get()
        if rid:
            line["request_id"] = rid
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def configure(level: str, member: str, fmt: str) -> None:
    """Set up the root logger once, for the whole process."""
    if fmt == "json":
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter(member))
        logging.basicConfig(level=level, handlers=[handler], force=True)
    else:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s [" + member + "] %(message)s")
