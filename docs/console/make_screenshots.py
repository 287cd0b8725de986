"""Take the screenshots of the web console in docs/console/ from a live local 3-member cluster.

    PYTHONPATH=.:proto .venv/bin/python docs/console/make_screenshots.py [--out docs/console] [--seconds 40]

Needs Debian's chromium at /usr/bin/chromium (``make browser-deps``) and the ``playwright`` Python package (the
``dev`` extra); it never downloads a browser. The cluster runs on free loopback ports in a temp directory and is
stopped at the end. For ``--seconds`` it produces and consumes a trickle of messages and moves leadership once,
so the charts and the leader-change list have something to show. Then a second cluster with authentication on,
for the login page and the pages with actions as an admin sees them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "proto")]

from playwright.sync_api import sync_playwright  # noqa: E402

from raftmq.client import Admin, Producer, RaftmqError  # noqa: E402
from tests.support.console_scenario import GROUP, TOPIC, populate  # noqa: E402
from tests.support.processes import node_specs, start_nodes, stop_all  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def traffic(servers: list[str], scenario, stop: threading.Event) -> None:
    """A few hundred messages a second in bursts, and the group consuming most of them."""
    with Producer(servers) as p:
        i = 0
        while not stop.is_set():
            try:
                p.send_batch(TOPIC, [f"order {i + k}" for k in range(20 + (i // 20) % 40)])
                p.send_batch("payments", [f"payment {i + k}" for k in range(5)])
                if scenario.consumer is not None:
                    scenario.consumer.poll(timeout=0.2)
                    scenario.consumer.commit()
            except RaftmqError as e:  # the leader transfer: an outcome may be unknown, carry on
                print(f"traffic: {e}", file=sys.stderr)
            i += 20
            stop.wait(0.1)


AUTH = {"auth_enabled": True, "auth_admin_access_key": "admin", "auth_admin_secret_key": "admin-secret-1"}


def auth_shots(out: Path, tmp: Path) -> None:
    """With authentication on: the login page, and the pages with actions as the admin sees them."""
    from raftmq.client.security import ClientSecurity

    nodes = start_nodes(node_specs(tmp / "auth", 3, security=AUTH, cluster={"secret": "screenshot-secret"}))
    try:
        servers = [n.grpc_address for n in nodes]
        scenario = populate(servers, security=ClientSecurity(access_key="admin", secret_key="admin-secret-1"))
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            page.goto(nodes[0].http_url + "/ui/cluster")  # no session: the login page, leading back here
            page.fill('input[name="access_key"]', "admin")
            for name, path in (("login", None), ("cluster-actions", "/ui/cluster"),
                               ("group-actions", f"/ui/groups/{GROUP}")):
                if path is None:
                    shot = out / f"{name}.png"
                    page.screenshot(path=str(shot))
                    page.fill('input[name="secret_key"]', "admin-secret-1")
                    page.click('button[type="submit"]')
                    page.wait_for_url("**/ui/cluster")
                else:
                    page.goto(nodes[0].http_url + path)
                    shot = out / f"{name}.png"
                    page.screenshot(path=str(shot), full_page=True)
                print(f"{shot.relative_to(ROOT)}: {shot.stat().st_size // 1024} KiB")
            browser.close()
        scenario.close()
    finally:
        stop_all(nodes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "console")
    ap.add_argument("--seconds", type=float, default=40.0, help="traffic before the screenshots (chart history)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="raftmq-console-") as tmp:
        nodes = start_nodes(node_specs(Path(tmp), 3))
        try:
            servers = [n.grpc_address for n in nodes]
            scenario = populate(servers)
            stop = threading.Event()
            t = threading.Thread(target=traffic, args=(servers, scenario, stop), daemon=True)
            t.start()
            time.sleep(args.seconds / 2)
            with Admin(servers) as admin:
                admin.transfer_leader()
            time.sleep(args.seconds / 2)
            with Admin(servers) as admin:
                leader = admin.cluster_status().leader_id
            node = next(n for n in nodes if n.spec.id == leader)
            shots = [
                ("cluster", "/ui/cluster"), ("topics", "/ui/topics"), ("topic", f"/ui/topics/{TOPIC}"),
                ("groups", "/ui/groups"), ("group", f"/ui/groups/{GROUP}"),
                ("messages", f"/ui/messages?by=offset&topic={TOPIC}&queue=0&offset=0&count=12"),
                ("message-text", f"/ui/messages/{scenario.hostile.msg_id}"),
                ("message-binary", f"/ui/messages/{scenario.binary.msg_id}"),
                ("check", "/ui/check?run=1&queues=1"),
            ]
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 760})
                for name, path in shots:
                    page.goto(node.http_url + path)
                    out = args.out / f"{name}.png"
                    page.screenshot(path=str(out), full_page=name not in ("messages",))
                    print(f"{out.relative_to(ROOT)}: {out.stat().st_size // 1024} KiB")
                browser.close()
            stop.set()
            t.join()
            scenario.close()
        finally:
            stop_all(nodes)
        auth_shots(args.out, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
