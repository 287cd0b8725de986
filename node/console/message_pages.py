"""The message browser: by msgId / UNIQ_KEY, by key and time range, by queue offset or time; one message with
its properties and safely rendered body; the raw body as a download."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from raftmq.node.console import safe
from raftmq.node.console.layout import (
    SECURITY_HEADERS,
    BadRequest,
    Response,
    esc_or_dash,
    int_arg,
    link,
    page,
    section,
    table,
    time_arg,
    utc,
)
from raftmq.node.console.safe import Markup, html, join, seg
from raftmq.node.validation import ValidationError, check_topic_name
from raftmq.store.errors import StoreError

if TYPE_CHECKING:
    from raftmq.node.console.context import ConsoleContext

BROWSE_MAX = 64  # messages per browser page (RocketMQ's query cap)
BROWSE_DEFAULT = 20


def messages_page(c: ConsoleContext, query: dict[str, str], msg_id: str | None = None, part: str | None = None) -> Response:
    if msg_id is not None:
        return _message(c, msg_id, part)
    c.store()
    by = query.get("by", "")
    results: Markup = Markup("")
    if by:
        found, title = _browse(c, by, query)
        rows = [[link(f"/ui/messages/{seg(m.msg_id)}", m.msg_id), link(f"/ui/topics/{seg(m.topic)}", m.topic),
                 m.queue_id, m.queue_offset, utc(m.store_timestamp), esc_or_dash(m.tags),
                 esc_or_dash(" ".join(m.keys)), m.body and safe.human_bytes(len(m.body)) or "0 B",
                 safe.preview(m.body)] for m in found]
        results = section(title, table(["msgId", "topic", "queue", "offset", "stored (UTC)", "tags", "keys",
                                        "size", "body"], rows, table_id="results", numeric=(2, 3, 7),
                                       wrap=(5, 8),
                                       empty="no message matched"), "results-section")
    body = join([_browse_forms(query), results])
    return page(c.frame(), "messages", "Messages", body)

def _browse(c: ConsoleContext, by: str, q: dict[str, str]) -> tuple[list, str]:
    st = c.store()
    if by not in ("id", "key", "offset"):
        raise BadRequest(f"unknown search {by!r}: use by=id, by=key or by=offset")
    if by == "id":
        msg_id = q.get("id", "").strip()
        if not msg_id:
            raise BadRequest("give a msgId (or a UNIQ_KEY together with a topic)")
        topic = q.get("topic", "").strip()
        return _find_by_id(c, msg_id, topic), f"message {msg_id}"
    topic = _topic_arg(c, st, q)
    if by == "key":
        key = q.get("key", "")
        if not key.strip():
            raise BadRequest("give the key to look up (a KEYS entry or a UNIQ_KEY)")
        begin = time_arg(q, "from", 0)
        end = time_arg(q, "to", int(time.time() * 1000))
        if end < begin:
            raise BadRequest(f"the range ends ({utc(end)}) before it begins ({utc(begin)})")
        limit = int_arg(q, "count", BROWSE_DEFAULT, 1, BROWSE_MAX)
        try:
            found = st.query_messages(topic, key, limit, begin, end)
        except StoreError as e:
            raise BadRequest(str(e)) from None
        return sorted(found, key=lambda m: (m.store_timestamp, m.physical_offset)), \
            f"key {key!r} in {topic}"
    cfg = st.topics.get(topic)  # by == "offset"
    queue = int_arg(q, "queue", 0, 0, cfg.read_queue_nums - 1)
    lo, hi = st.min_offset_in_queue(topic, queue), st.max_offset_in_queue(topic, queue)
    count = int_arg(q, "count", BROWSE_DEFAULT, 1, BROWSE_MAX)
    if q.get("offset", "").strip() or not q.get("at", "").strip():
        offset = int_arg(q, "offset", max(lo, hi - count), 0, None)
    else:  # the first message stored at or after a time (as SearchOffset), when no offset is given
        offset = st.get_offset_by_time(topic, queue, time_arg(q, "at", 0))
        if offset >= hi:
            return [], f"{topic} queue {queue} has nothing stored at or after {utc(time_arg(q, 'at', 0))}"
    if hi == lo:
        return [], f"{topic} queue {queue} is empty (offsets {lo}..{hi})"
    if not lo <= offset < hi:
        raise BadRequest(f"offset {offset} is outside queue {queue} of {topic}: it holds offsets "
                         f"{lo}..{hi - 1}")
    got = st.get_messages(topic, queue, offset, count, 8 << 20, None)
    return got.messages, f"{topic} queue {queue} from offset {offset} (queue holds {lo}..{hi - 1})"

def _find_by_id(c: ConsoleContext, msg_id: str, topic: str) -> list:
    """As ViewMessage: an offset msgId anywhere, or a UNIQ_KEY within a topic."""
    st = c.store()
    is_offset_id = len(msg_id) in (32, 56) and all(ch in "0123456789abcdefABCDEF" for ch in msg_id)
    if topic:
        _topic_arg(c, st, {"topic": topic})
        found = [m for m in st.query_messages(topic, msg_id, BROWSE_MAX, 0, int(time.time() * 1000))
                 if m.uniq_key == msg_id]
        if found:
            return [min(found, key=lambda m: m.physical_offset)]
    elif not is_offset_id:
        raise BadRequest(f"{msg_id!r} is not an offset msgId (32 or 56 hex characters); to look up a UNIQ_KEY, "
                         "also give the topic")
    if is_offset_id:
        m = st.view_message_by_id(msg_id.upper())
        if m is not None and (not topic or m.topic == topic):
            c.require("SUB", "topic", m.topic)
            return [m]
    return []

def _message(c: ConsoleContext, msg_id: str, part: str | None) -> Response:
    st = c.store()
    try:
        m = st.view_message_by_id(msg_id.strip().upper())
    except StoreError as e:
        raise BadRequest(str(e)) from None
    if m is None:
        raise BadRequest(f"no message with msgId {msg_id!r} (removed by retention, or never stored)", 404)
    c.require("SUB", "topic", m.topic)
    if part == "body":
        headers = dict(SECURITY_HEADERS)
        headers["Content-Disposition"] = f'attachment; filename="{m.msg_id}.bin"'
        return Response(200, bytes(m.body), "application/octet-stream", headers)
    if part is not None:
        raise BadRequest(f"no page {part!r} under a message; its body is at /ui/messages/{msg_id}/body", 404)
    view = safe.render_body(m.body)
    download = link(f"/ui/messages/{seg(m.msg_id)}/body", f"download the whole body ({len(m.body)} bytes)")
    if view.truncated:
        shown = html('<p class="notice warn" id="truncated">showing the first {} of {} bytes: {}</p>',
                     view.shown, view.size, download)
    else:
        shown = html('<p class="muted">{}</p>', download)
    body_html = html('<pre class="body {}" id="body" data-kind="{}">{}</pre>', view.kind, view.kind, view.html)
    props = table(["property", "value"], sorted(m.properties.items()), table_id="properties", wrap=(1,),
                  cls="kv")
    meta = table(["field", "value"], [
        ["msgId", m.msg_id], ["UNIQ_KEY", esc_or_dash(m.uniq_key)],
        ["topic", link(f"/ui/topics/{seg(m.topic)}", m.topic)], ["queue", m.queue_id],
        ["queue offset", m.queue_offset], ["physical offset", m.physical_offset],
        ["stored (UTC)", utc(m.store_timestamp)], ["born (UTC)", utc(m.born_timestamp)],
        ["born host", _host(m.born_host)], ["store host", _host(m.store_host)],
        ["tags", esc_or_dash(m.tags)], ["keys", esc_or_dash(" ".join(m.keys))],
        ["body", f"{len(m.body)} bytes, {view.kind}"], ["reconsume times", m.reconsume_times],
        ["sys flag", m.sys_flag], ["flag", m.flag], ["body CRC", m.body_crc],
    ], table_id="message-meta", wrap=(1,), cls="kv")
    body = join([html('<div class="cols">{}{}</div>', section("Message", meta), section("Properties", props)),
                 section("Body", join([shown, body_html]))])
    return page(c.frame(), "messages", f"Message {m.msg_id}", body)


def _browse_forms(q: dict[str, str]) -> Markup:
    by = q.get("by", "")

    def val(name: str, mode: str) -> str:
        return q.get(name, "") if by == mode else ""

    return html(
        '<div class="forms">'
        '<form method="get" action="/ui/messages" id="form-id"><h3>By msgId</h3><input type="hidden" name="by" '
        'value="id"><label>msgId or UNIQ_KEY <input name="id" value="{id}"></label>'
        '<label>topic (for a UNIQ_KEY) <input name="topic" value="{id_topic}"></label>'
        '<button type="submit">Find</button></form>'
        '<form method="get" action="/ui/messages" id="form-key"><h3>By key and time</h3><input type="hidden" '
        'name="by" value="key"><label>topic <input name="topic" value="{key_topic}" required></label>'
        '<label>key <input name="key" value="{key}" required></label>'
        '<label>from (UTC) <input type="datetime-local" step="1" name="from" value="{key_from}"></label>'
        '<label>to (UTC) <input type="datetime-local" step="1" name="to" value="{key_to}"></label>'
        '<label>at most <input name="count" size="4" value="{key_count}" placeholder="20"></label>'
        '<button type="submit">Search</button></form>'
        '<form method="get" action="/ui/messages" id="form-offset"><h3>By queue offset</h3><input type="hidden" '
        'name="by" value="offset"><label>topic <input name="topic" value="{off_topic}" required></label>'
        '<label>queue <input name="queue" size="4" value="{queue}"></label>'
        '<label>offset <input name="offset" size="10" value="{offset}" placeholder="latest"></label>'
        '<label>or from time (UTC) <input type="datetime-local" step="1" name="at" value="{at}"></label>'
        '<label>count <input name="count" size="4" value="{count}" placeholder="20"></label>'
        '<button type="submit">Browse</button></form></div>',
        id=val("id", "id"), id_topic=val("topic", "id"), key_topic=val("topic", "key"), key=val("key", "key"),
        key_from=val("from", "key"), key_to=val("to", "key"), key_count=val("count", "key"),
        off_topic=val("topic", "offset"), queue=val("queue", "offset") or "0", offset=val("offset", "offset"), at=val("at", "offset"),
        count=val("count", "offset"))


def _topic_arg(c: ConsoleContext, st, q: dict[str, str]) -> str:
    """The request's topic: named, valid, readable by the viewer (SUB, as the gRPC reads) and existing."""
    topic = q.get("topic", "").strip()
    if not topic:
        raise BadRequest("give a topic")
    try:
        check_topic_name(topic, allow_system=True)
    except ValidationError as e:
        raise BadRequest(str(e)) from None
    c.require("SUB", "topic", topic)
    if st.topics.get(topic) is None:
        raise BadRequest(f"topic {topic!r} does not exist", 404)
    return topic


def _host(addr: tuple[str, int]) -> str:
    host, port = addr
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
