"""``make run`` / ``make stop``: start local nodes in the background on loopback, and stop them.

Why a module and not shell in the Makefile: the member list, the ports of member i, the pid files and the
readiness wait are the same for one node and for three, so going to a 3-node cluster is ``--nodes 3``.
Member i listens on 127.0.0.1 with HTTP BASE+100*i, gRPC BASE+1+100*i, Raft BASE+11+100*i (BASE is
``--port-base``, ``make run RUN_PORT_BASE=...``, default 8080); its data lives in ``DIR/n<i>/``, its config in
``DIR/n<i>.yaml``, its log in ``DIR/n<i>.log``, its pid in ``DIR/n<i>.pid``.

Readiness is only believed from the process we started: ``/ready`` names the node id and pid that answered,
so another raftmq holding the same ports is reported as such instead of being mistaken for ours.

Settings stay those the run was started with (issue 34): a member's config file is written once (edits to it
are kept), and the ``RAFTMQ_*`` environment of the first start is kept in ``DIR/environment`` and given to every
member started later, whatever the environment of that later ``make run`` says (a difference is named). A member
restarted alone therefore never runs with other settings than its peers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

HOST = "127.0.0.1"
ENV_PREFIX = "RAFTMQ_"  # the node's settings from the environment (node.config)
PORT_STRIDE = 100
DEFAULT_PORT_BASE = 8080
MAX_NODES = 9


def member(i: int, port_base: int = DEFAULT_PORT_BASE) -> dict[str, str | int]:
    at = port_base + PORT_STRIDE * i
    return {"id": f"n{i}", "grpc": at + 1, "http": at, "raft": at + 11}


def write_configs(base: Path, n: int, port_base: int = DEFAULT_PORT_BASE, groups: int = 1) -> list[Path]:
    """Each member's config file: written when missing, kept (with the user's edits) when it exists. ``groups``
    > 1: that many Raft groups of ``n`` members each (cluster.groups, docs/design/scale-out.md): members
    n0..n(n-1) are group g0, the next n g1, ..."""
    members = [member(i, port_base) for i in range(n * groups)]
    peers = [{"id": m["id"], "raft": f"{HOST}:{m['raft']}", "grpc": f"{HOST}:{m['grpc']}"} for m in members]
    listed = [{"name": f"g{g}", "store_host": f"{HOST}:{10911 + g}", "members": peers[g * n:(g + 1) * n]}
              for g in range(groups)]
    paths = []
    for i, m in enumerate(members):
        cluster: dict = {"raft_listen": f"{HOST}:{m['raft']}", "raft_address": f"{HOST}:{m['raft']}"}
        if groups > 1:
            cluster.update(group=f"g{i // n}", groups=listed)
        else:
            cluster["members"] = peers if n > 1 else []
        cfg = {
            "node": {"id": m["id"], "data_dir": str(base / str(m["id"])), "grpc_listen": f"{HOST}:{m['grpc']}",
                     "http_listen": f"{HOST}:{m['http']}"},
            "cluster": cluster,
            "kubernetes": {"role_label": "false"},
        }
        path = base / f"{m['id']}.yaml"
        if not path.exists():
            path.write_text("# written by `make run`; edit and `make stop run` to apply\n"
                            + yaml.safe_dump(cfg, sort_keys=False))
        paths.append(path)
    return paths


def run_environment(base: Path, environ: dict[str, str]) -> dict[str, str]:
    """The environment to start members with: ``environ`` without its RAFTMQ_* settings plus those of the run's
    first start (recorded in ``base/environment`` then, owner-only: they may hold secrets). A difference from
    ``environ``'s own RAFTMQ_* settings is said on stderr: the recorded ones win."""
    path = base / "environment"
    current = {k: v for k, v in environ.items() if k.startswith(ENV_PREFIX)}
    if path.exists():
        recorded = json.loads(path.read_text())
    else:
        recorded = current
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(recorded, f, indent=1, sort_keys=True)
    if current != recorded:
        changed = sorted(k for k in set(current) | set(recorded) if current.get(k) != recorded.get(k))
        print(f"make run: the environment differs from the one this cluster was started with in {', '.join(changed)};"
              f" members start with the recorded settings ({path}) so that they all run alike. To change a "
              f"setting, edit {base}/n<i>.yaml and `make stop run`, or `make stop` and remove {base}/ to start "
              "fresh with the new environment.", file=sys.stderr)
    return {**{k: v for k, v in environ.items() if not k.startswith(ENV_PREFIX)}, **recorded}


def _running_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process is still our node (pids get reused)."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError):
        return None
    return pid if "node" in cmdline and "--config" in cmdline else None


def _ready(http_port: int) -> tuple[int, str]:
    """(HTTP status, body) of ``/ready``; (0, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{http_port}/ready", timeout=1) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return 0, str(e)


def _answered_by(body: str) -> dict[str, str]:
    """The ``node=.. pid=..`` line of a ``/ready`` body as a dict (empty when an older node or no raftmq)."""
    lines = body.splitlines()
    fields = dict(f.split("=", 1) for f in (lines[1].split() if len(lines) > 1 else []) if "=" in f)
    return fields


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_own_ready(base: Path, m: dict, pid: int, proc: subprocess.Popen | None, deadline: float) -> str | None:
    """Wait until ``/ready`` of member ``m`` is answered 200 by process ``pid``; None, or why not."""
    log_path = base / f"{m['id']}.log"
    seen = ""
    while True:
        if proc is not None and proc.poll() is not None:
            return (f"{m['id']} (pid {pid}) exited with status {proc.returncode}; last lines of {log_path}:\n"
                    f"{_log_tail(log_path)}")
        status, body = _ready(int(m["http"]))
        who = _answered_by(body) if status else {}
        if status and who.get("pid") != str(pid):
            other = (f"node {who.get('node', '?')} pid {who['pid']}" if "pid" in who
                     else "a process that is not this run's node")
            seen = (f"port {m['http']} is answered by {other}, not by {m['id']} (pid {pid}) started by this run: "
                    f"another raftmq (or other server) holds these ports; stop it or use RUN_PORT_BASE")
        elif status == 200:
            return None
        else:
            seen = f"last /ready answer: {body.strip().splitlines()[0] if body.strip() else status}"
        if time.monotonic() > deadline:
            return f"{m['id']} did not become ready ({seen}); last lines of {log_path}:\n{_log_tail(log_path)}"
        time.sleep(0.1)


def start(base: Path, n: int, timeout: float, port_base: int = DEFAULT_PORT_BASE, groups: int = 1) -> int:
    """Start ``n`` members (``groups`` > 1: that many groups of ``n`` members) and wait until each is ready."""
    if groups < 1 or not 1 <= n * groups <= MAX_NODES:
        print(f"--nodes x --groups must be 1..{MAX_NODES}, got {n} x {groups}", file=sys.stderr)
        return 2
    per_group, n = n, n * groups
    if not 1024 <= port_base <= 65535 - PORT_STRIDE * n:
        print(f"RUN_PORT_BASE must be 1024..{65535 - PORT_STRIDE * n} for {n} node(s), got {port_base}",
              file=sys.stderr)
        return 2
    base.mkdir(parents=True, exist_ok=True)
    layout = base / "layout"
    want = f"nodes={per_group} groups={groups} port_base={port_base}" if groups > 1 else \
        f"nodes={n} port_base={port_base}"
    was = layout.read_text().strip() if layout.exists() else want
    if " " not in was:  # written before RUN_PORT_BASE existed: the default ports
        was += f" port_base={DEFAULT_PORT_BASE}"
    if was != want:
        print(f"{base}/ holds the data of another run ({was}); a store cannot join a group it was not started in. "
              f"Run `make stop` and remove {base}/ to start {n} node(s) fresh on port base {port_base}.",
              file=sys.stderr)
        return 1
    layout.write_text(want + "\n")
    configs = write_configs(base, per_group, port_base, groups)
    env = run_environment(base, dict(os.environ))
    started: dict[str, tuple[int, subprocess.Popen | None]] = {}
    for i, cfg_path in enumerate(configs):
        m = member(i, port_base)
        pid_file = base / f"{m['id']}.pid"
        running = _running_pid(pid_file)
        if running:
            print(f"{m['id']} is already running (pid {running}); `make stop` first to restart")
            started[str(m["id"])] = (running, None)
            continue
        log = open(base / f"{m['id']}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "raftmq.node", "node", "--config", str(cfg_path)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
        log.close()
        pid_file.write_text(f"{proc.pid}\n")
        started[str(m["id"])] = (proc.pid, proc)
    deadline = time.monotonic() + timeout
    problems = []
    for i in range(n):
        m = member(i, port_base)
        pid, proc = started[str(m["id"])]
        why = _wait_own_ready(base, m, pid, proc, deadline)
        if why is not None:
            problems.append(why)
    if problems:
        for why in problems:
            print(f"make run: FAILED: {why}\n", file=sys.stderr)
        ours = [(mid, p) for mid, (_, p) in started.items() if p is not None and p.poll() is None]
        for _, p in ours:
            p.terminate()
        for mid, p in ours:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
            (base / f"{mid}.pid").unlink(missing_ok=True)
        print(f"make run: FAILED: {len(problems)} of {n} node(s) not serving"
              + (f"; stopped the {len(ours)} this run had started" if ours else ""), file=sys.stderr)
        return 1
    _print_usage(base, n, port_base)
    return 0


def _print_usage(base: Path, n: int, port_base: int) -> None:
    m0 = member(0, port_base)
    grpc_addrs = ",".join(f"{HOST}:{member(i, port_base)['grpc']}" for i in range(n))
    server = "" if port_base == DEFAULT_PORT_BASE else f"export RAFTMQ_SERVER={grpc_addrs}\n  "
    print(f"""
raftmq is running: {n} node(s), data and logs under {base}/
  gRPC     {grpc_addrs}   (MessagingService, AdminService)
  metrics  http://{HOST}:{m0['http']}/metrics   health: /health   ready: /ready
  logs     {base}/n0.log

Try the CLI (from this directory; the CLI's default server is 127.0.0.1:8081):
  . .venv/bin/activate
  {server}raftmq topic create demo
  raftmq produce demo --body "hello raftmq" --tags greeting --keys order-1
  raftmq consume demo-group demo --from-beginning --idle-timeout 3
  raftmq query demo --key order-1
  raftmq offsets demo
  raftmq cluster status

Stop with: make stop
""")


def stop(base: Path, timeout: float) -> int:
    pid_files = sorted(base.glob("n*.pid"))
    code = 0
    stopping = []
    for pid_file in pid_files:
        pid = _running_pid(pid_file)
        if pid is None:
            pid_file.unlink(missing_ok=True)
            continue
        os.kill(pid, signal.SIGTERM)
        stopping.append((pid_file, pid))
    for pid_file, pid in stopping:
        deadline = time.monotonic() + timeout
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
            if state == "Z":  # exited; its parent (make run's python) is gone, init reaps it
                break
            time.sleep(0.1)
        if Path(f"/proc/{pid}").exists() and time.monotonic() >= deadline:
            print(f"{pid_file.stem} (pid {pid}) did not stop within {timeout}s; it is still running", file=sys.stderr)
            code = 1
            continue
        pid_file.unlink(missing_ok=True)
        print(f"stopped {pid_file.stem} (pid {pid})")
    if not stopping:
        print(f"no raftmq node running from {base}/")
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m raftmq.node.local_cluster", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("--dir", default="data", type=Path)
    s.add_argument("--nodes", default=1, type=int, help="members (per group with --groups)")
    s.add_argument("--groups", default=1, type=int, help="Raft groups of --nodes members each (cluster.groups)")
    s.add_argument("--timeout", default=60.0, type=float)
    s.add_argument("--port-base", default=DEFAULT_PORT_BASE, type=int,
                   help="member i uses HTTP BASE+100*i, gRPC +1, Raft +11 (default 8080)")
    t = sub.add_parser("stop")
    t.add_argument("--dir", default="data", type=Path)
    t.add_argument("--timeout", default=30.0, type=float)
    args = p.parse_args(argv)
    base = args.dir.resolve()
    if args.cmd == "start":
        return start(base, args.nodes, args.timeout, args.port_base, args.groups)
    return stop(base, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
