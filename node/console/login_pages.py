"""``/ui/login`` and ``/ui/logout``: a user logs in with access key and secret key (authentication on).

The form posts to this node; a good login answers 303 to the page asked for with a session cookie
(node.auth.console_sessions), a bad one shows the form again with the reason (401/403) and one audit line.
With authentication off there is nothing to log in to, and the page says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftmq.node.auth import audit
from raftmq.node.auth import console_sessions as session
from raftmq.node.console.cluster_calls import cluster_calls, member_credentials
from raftmq.node.console.layout import Response, link, notice, page
from raftmq.node.console.safe import Markup, html

if TYPE_CHECKING:
    from raftmq.node.console.context import ConsoleContext


def handle(console: ConsoleContext, method: str, path: str, query: dict[str, str], form: dict[str, str],
           address: str) -> Response:
    sessions = console.node.console_sessions
    if path == session.LOGOUT_PATH:
        if method != "POST":
            return _allow_post(console, "log out with the button in the page header (POST /ui/logout)")
        clear = session.ConsoleSessions.clear_cookie(console.secure_cookies)
        user = console.request_user()
        problem = _end_on_server(console, console.request_cookie()) if user else ""
        if user:
            audit("console_logout", user=user, peer=address, **({"error": problem} if problem else {}))
        if problem:  # out of this browser anyway; say that a copy of the cookie may still work
            resp = page(console.frame(), "", "Logged out here only", notice(
                f"logged out in this browser, but the session could not be ended on the server ({problem}): a "
                "copy of its cookie keeps working until it expires. Log in and out again once the cluster has a "
                "leader.", "bad"), 503)
            resp.headers["Set-Cookie"] = clear
            return resp
        return Response(303, b"", headers={"Location": session.LOGIN_PATH, "Set-Cookie": clear})
    if sessions is None:
        return page(console.frame(), "", "Log in", notice(html(
            "Authentication is off on this cluster: the console needs no login. {}",
            link("/ui/cluster", "Open the cluster page")), "info"))
    if method == "GET":
        return _form(console, session.safe_next(query.get("next", "")), "", "", 200)
    if method != "POST":
        return _allow_post(console, "the login form posts here")
    access_key, secret_key = form.get("access_key", "").strip(), form.get("secret_key", "")
    target = session.safe_next(form.get("next", ""))
    try:
        value = sessions.login(access_key, secret_key, address, console.node.catch_up_with_leader_blocking)
    except session.LoginRefused as e:
        audit("denied" if e.code == 403 else "unauthenticated", method=f"HTTP POST {path}", peer=address,
              port="http", user=access_key, reason=str(e))
        return _form(console, target, access_key, str(e), e.code)
    audit("console_login", user=access_key, peer=address)
    return Response(303, b"", headers={"Location": target,
                                       "Set-Cookie": sessions.set_cookie(value, console.secure_cookies)})


def _end_on_server(console: ConsoleContext, cookie: str) -> str:
    """End the session of ``cookie`` (its value) on every member (AclService.EndConsoleSession, called as this
    member, so a follower reaches the leader); "" when done, else why not."""
    node = console.node
    calls = cluster_calls()
    try:
        calls.end_console_session(node.config.advertised_address, member_credentials(node.config), cookie)
    except calls.Error as e:
        return str(e)
    return ""


def _form(console: ConsoleContext, target: str, access_key: str, error: str, code: int) -> Response:
    hours = console.node.config.security.console_session_hours
    body = html(
        '{error}<form class="login" method="post" action="/ui/login">'
        '<input type="hidden" name="next" value="{target}">'
        '<label>Access key <input name="access_key" value="{access_key}" autocomplete="username" required '
        'autofocus></label>'
        '<label>Secret key <input name="secret_key" type="password" autocomplete="current-password" required>'
        '</label><button type="submit">Log in</button></form>'
        '<p class="note">Authentication is on: log in as a user of this cluster (<code>raftmq acl user add '
        'NAME</code>). The pages show what the user\'s rules allow (topics and their messages with SUB on the '
        'topic, consumer groups with SUB on the group, the replica check with ADMIN on the cluster), as the '
        'API does. The login lasts {hours} h on every member of the cluster and ends when the user is deleted or '
        'its secret changes. Scripts sign their requests instead.</p>',
        error=notice(error, "bad") if error else Markup(""), target=target, access_key=access_key, hours=f"{hours:g}")
    return page(console.frame(), "", "Log in", body, code)


def _allow_post(console: ConsoleContext, why: str) -> Response:
    resp = page(console.frame(), "", "Read-only", notice(f"only POST here: {why}", "bad"), 405)
    resp.headers["Allow"] = "POST"
    return resp
