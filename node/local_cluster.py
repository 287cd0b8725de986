"""``make run`` / ``make stop``: start local nodes in the background on loopback, and stop them.

Why a module and not shell in the Makefile: the member list, the ports of member i, the pid files and the
readiness wait are the same for one node and for three, so going to a 3-node cluster is ``--nodes 3``.
Member i listens on 127.0.0.1 with gRPC 8081+100*i, HTTP 8080+100*i, Raft 8091+100*i; its data lives in
``DIR/n<i>/``, its config in ``DIR/n<i>.yaml``, its log in ``DIR/n<i>.log``, its pid in ``DIR/n<i>.pid``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

HOST = "127.0.0.1"
PORT_STRIDE = 100


def member(i: int) -> dict[str, str | int]:
    return {"id": f"n{i}", "grpc": 8081 + PORT_STRIDE * i, "http": 8080 + PORT_STRIDE * i,
            "raft": 8091 + PORT_STRIDE * i}


def write_configs(base: Path, n: int) -> list[Path]:
    members = [member(i) for i in range(n)]
    peers = [{"id": m["id"], "raft": f"{HOST}:{m['raft']}", "grpc": f"{HOST}:{m['grpc']}"} for m in members]
    paths = []
    for m in members:
        cfg = {
            "node": {"id": m["id"], "data_dir": str(base / str(m["id"])), "grpc_listen": f"{HOST}:{m['grpc']}",
                     "http_listen": f"{HOST}:{m['http']}"},
            "cluster": {"raft_listen": f"{HOST}:{m['raft']}", "raft_address": f"{HOST}:{m['raft']}",
                        "members": peers if n > 1 else []},
            "kubernetes": {"role_label": "false"},
        }
        path = base / f"{m['id']}.yaml"
        path.write_text("# written by `make run`; edit and `make stop run` to apply\n"
                        + yaml.safe_dump(cfg, sort_keys=False))
        paths.append(path)
    return paths


def _running_pid(pid_file: Path) -> int | None:
    """The pid in ``pid_file`` if that process is still our node (pids get reused)."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, ValueError):
        return None
    return pid if "node" in cmdline and "--config" in cmdline else None


def _ready(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{http_port}/ready", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def start(base: Path, n: int, timeout: float) -> int:
    base.mkdir(parents=True, exist_ok=True)
    layout = base / "layout"
    if layout.exists() and layout.read_text().strip() != f"nodes={n}":
        was = layout.read_text().strip().removeprefix("nodes=")
        print(f"{base}/ holds the data of a {was}-node run; a store cannot join a group it was not started in. "
              f"Run `make stop` and remove {base}/ to start {n} node(s) fresh.", file=sys.stderr)
        return 1
    layout.write_text(f"nodes={n}\n")
    configs = write_configs(base, n)
    procs: dict[str, subprocess.Popen | None] = {}
    for i, cfg_path in enumerate(configs):
        m = member(i)
        pid_file = base / f"{m['id']}.pid"
        if _running_pid(pid_file):
            print(f"{m['id']} is already running (pid {pid_file.read_text().strip()}); `make stop` first to restart")
            procs[str(m["id"])] = None
            continue
        log = open(base / f"{m['id']}.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "node", "node", "--config", str(cfg_path)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        pid_file.write_text(f"{proc.pid}\n")
        procs[str(m["id"])] = proc
    deadline = time.monotonic() + timeout
    for i in range(n):
        m = member(i)
        proc = procs[str(m["id"])]
        while not _ready(int(m["http"])):
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                log_path = base / f"{m['id']}.log"
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
                print(f"{m['id']} did not become ready; last lines of {log_path}:\n{tail}", file=sys.stderr)
                return 1
            time.sleep(0.1)
    _print_usage(base, n)
    return 0


def _print_usage(base: Path, n: int) -> None:
    m0 = member(0)
    grpc_addrs = ",".join(f"{HOST}:{member(i)['grpc']}" for i in range(n))
    print(f"""
raftmq is running: {n} node(s), data and logs under {base}/
  gRPC     {grpc_addrs}   (MessagingService, AdminService)
  metrics  http://{HOST}:{m0['http']}/metrics   health: /health   ready: /ready
  logs     {base}/n0.log

Try the CLI (from this directory; the default server is {HOST}:{m0['grpc']}):
  . .venv/bin/activate
  raftmq topic create demo
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
    p = argparse.ArgumentParser(prog="python -m node.local_cluster", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("--dir", default="data", type=Path)
    s.add_argument("--nodes", default=1, type=int)
    s.add_argument("--timeout", default=60.0, type=float)
    t = sub.add_parser("stop")
    t.add_argument("--dir", default="data", type=Path)
    t.add_argument("--timeout", default=30.0, type=float)
    args = p.parse_args(argv)
    base = args.dir.resolve()
    if args.cmd == "start":
        return start(base, args.nodes, args.timeout)
    return stop(base, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
