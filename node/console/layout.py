"""The page frame, tables and small widgets every console page shares."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from raftmq.node.console.safe import Markup, esc, html, join

NAV = (("cluster", "/ui/cluster", "Cluster"), ("topics", "/ui/topics", "Topics"),
       ("groups", "/ui/groups", "Consumer groups"), ("messages", "/ui/messages", "Messages"),
       ("check", "/ui/check", "Replica check"))

# Pages only load their own stylesheet and script: no inline script or style can run even if escaping failed.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class BadRequest(Exception):
    """A console request the user can fix (bad offset, unknown topic): shown on the page with status 400/404."""

    def __init__(self, message: str, code: int = 400):
        super().__init__(message)
        self.code = code


@dataclass
class Response:
    code: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Frame:
    """Who serves the page: shown in the header of every page. A visitor who is not logged in (authentication
    on) gets an ``anonymous`` frame: no cluster, node or leader names, no tabs (issue 34)."""

    cluster: str
    node_id: str
    role: str
    leader: str
    user: str = ""  # the user logged in (auth on), shown with a log-out button
    anonymous: bool = False
    tabs: tuple[str, ...] = tuple(key for key, _, _ in NAV)  # NAV keys this viewer may open


def utc(ms: int) -> str:
    """Epoch milliseconds as ``2026-11-23 20:16:39.123`` UTC ("-" for 0)."""
    if ms <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}"


def page(frame: Frame, active: str, title: str, body: Markup, code: int = 200) -> Response:
    if frame.anonymous:  # before login nothing about the cluster: who runs what is for its users
        return _page(title, body, code, who=Markup(""), nav=Markup(""), account=Markup(""), tail=Markup(""),
                     cluster="")
    nav = join(html('<a href="{}"{}>{}</a>', href, Markup(' class="active"') if key == active else Markup(""),
                    label) for key, href, label in NAV if key in frame.tabs)
    leader = frame.leader or "none (election)"
    account = (html('<form class="account" method="post" action="/ui/logout"><span>{}</span> '
                    '<button type="submit">log out</button></form>', frame.user) if frame.user else Markup(""))
    who = html('<span class="who">cluster <b>{}</b> · this node <b>{}</b> ({}) · leader <b>{}</b></span>',
               frame.cluster, frame.node_id, frame.role, leader)
    return _page(title, body, code, who=who, nav=nav, account=account, tail=html(" by {}", frame.node_id),
                 cluster=f" {frame.cluster}")


def _page(title: str, body: Markup, code: int, *, who: Markup, nav: Markup, account: Markup, tail: Markup,
          cluster: str) -> Response:
    doc = html(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<title>{title} · raftmq{cluster}</title>'
        '<link rel="stylesheet" href="/ui/static/console.css"><script src="/ui/static/console.js" defer></script>'
        '</head><body><header><div class="bar"><span class="brand">raftmq</span>{who}'
        '<label class="live"><input type="checkbox" id="live-toggle" checked> live</label>{account}</div>'
        '<nav>{nav}</nav></header><main><h1>{title}</h1>{body}</main>'
        '<footer>raftmq console · rendered {now} UTC{tail}</footer></body></html>',
        title=title, cluster=cluster, who=who, nav=nav, body=body, now=utc(int(time.time() * 1000)),
        account=account, tail=tail)
    return Response(code, doc.encode("utf-8"), headers=dict(SECURITY_HEADERS))


def table(headers: Sequence[object], rows: Iterable[Sequence[object]], *, table_id: str = "",
          empty: str = "nothing to show", numeric: Sequence[int] = (), wrap: Sequence[int] = (),
          cls: str = "") -> Markup:
    """A table; cells are escaped unless Markup; ``numeric`` columns are right-aligned, only ``wrap`` columns
    break lines (long free text: bodies, errors)."""

    def attrs(i: int) -> Markup:
        classes = " ".join(c for c, on in (("num", i in numeric), ("nw", i not in wrap)) if on)
        return html(' class="{}"', classes) if classes else Markup("")

    head = join(html("<th{}>{}</th>", attrs(i), h) for i, h in enumerate(headers))
    body = [join(html("<td{}>{}</td>", attrs(i), c) for i, c in enumerate(row)) for row in rows]
    id_attr = html(' id="{}"', table_id) if table_id else Markup("")
    if not body:
        return html('<p class="muted"{}>{}</p>', id_attr, empty)
    trs = join(html("<tr>{}</tr>", r) for r in body)
    return html('<div class="tw"><table{}{}><thead><tr>{}</tr></thead><tbody>{}</tbody></table></div>', id_attr,
                html(' class="{}"', cls) if cls else Markup(""), head, trs)


def link(href: str, text: object) -> Markup:
    return html('<a href="{}">{}</a>', href, text)


def badge(text: str, kind: str = "") -> Markup:
    return html('<span class="badge {}">{}</span>', kind or text.split(":", 1)[0].split(" ", 1)[0], text)


def yes_no(v: bool) -> Markup:
    return badge("yes", "ok") if v else badge("no", "bad")


def cards(items: Iterable[tuple[str, object]], card_id: str = "") -> Markup:
    inner = join(html('<div class="card"><div class="k">{}</div><div class="v">{}</div></div>', k, v)
                 for k, v in items)
    if card_id:
        return html('<div class="cards" id="{}" data-live="1">{}</div>', card_id, inner)
    return html('<div class="cards">{}</div>', inner)


def section(title: str, content: Markup, section_id: str = "", live: bool = False, note: str = "") -> Markup:
    attrs = Markup("")
    if section_id:
        # (str + str is a plain str, which html() would escape: the id and data-live were lost, so sections
        # never refreshed live)
        attrs = Markup(html(' id="{}"', section_id) + (Markup(' data-live="1"') if live else Markup("")))
    note_html = html('<p class="note">{}</p>', note) if note else Markup("")
    return html("<section{}><h2>{}</h2>{}{}</section>", attrs, title, note_html, content)


def notice(text: object, kind: str = "info") -> Markup:
    return html('<p class="notice {}">{}</p>', kind, text)


def esc_or_dash(v: object) -> Markup:
    return esc(v) if v not in (None, "") else Markup('<span class="muted">-</span>')


def shorten(text: str, limit: int = 160) -> str:
    """One line of at most ``limit`` characters (long peer error texts become a readable reason)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def int_arg(q: dict[str, str], name: str, default: int, lo: int, hi: int | None) -> int:
    """A whole number from a query or form field, within [lo, hi]; BadRequest naming the field otherwise."""
    text = q.get(name, "").strip()
    if not text:
        return default
    try:
        v = int(text)
    except ValueError:
        raise BadRequest(f"{name} {text!r} is not a whole number") from None
    if v < lo or (hi is not None and v > hi):
        raise BadRequest(f"{name} {v} is out of range: give {lo}..{hi if hi is not None else 'any'}")
    return v


def time_arg(q: dict[str, str], name: str, default: int) -> int:
    """A UTC time from a datetime-local input (``2026-11-23T20:16[:39]``) or epoch milliseconds."""
    text = q.get(name, "").strip()
    if not text:
        return default
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"{name} {text!r} is not a time: give YYYY-MM-DDTHH:MM[:SS] (UTC) or epoch ms") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)
