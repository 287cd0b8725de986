"""Thousands of topics on one group (issue 43): creation rate, restart to ready, memory and descriptors.

Runs real node processes, one node and a group of 3 members, and goes the way users go: ``--topics`` topics of
``--queues`` queues created one after another with the SDK's ``Admin.create_topic`` (``--threads`` callers), then
``--batch-topics`` more with ``raftmq topic create --from-file``, one 100-byte message sent to each, the topics
listed page by page with ``raftmq topic list --limit``, a clean stop (SIGTERM) and a start. It prints

* the creation rate per slice of 1,000 topics (does it fall as the table grows?) and of the batch file;
* the size of ``config/topics.json`` (and of its change log) on the first member;
* resident memory (file pages and anonymous) and open descriptors of every member: after the sends, and at
  ready after the restart;
* whether the SIGTERM left a clean store (the stop log says when dispatch had not caught up), and how long
  it took;
* the time from the start of the processes to ``/ready`` on every member, against the restart of the same
  group while it was still empty (same run);
* whether every topic is still there after the restart.

With ``--baseline-ref REF`` the same measurement first runs with the nodes of commit REF (``git archive``, run
from a temporary directory; the client side stays this checkout's), then with this checkout's, and a last
table gives the ratios. Commit REF may lack ``--from-file`` and paged listing: those steps are skipped or fall
back to one full listing for it. Never fails on time; everything is deleted afterwards.

    .venv/bin/python bench/topics_bench.py                                  # 10,000 topics, 1 node and 3 members
    .venv/bin/python bench/topics_bench.py --baseline-ref main --baseline-topics 3000
    .venv/bin/python bench/topics_bench.py --topics 2000 --members 1 --batch-topics 500
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "proto")]

from raftmq.client import Admin, Producer  # noqa: E402
from tests.support.processes import NodeProcess, node_specs, stop_all  # noqa: E402

SLICE = 1000
BODY = b"x" * 100
STORE = {  # the node: 64 MiB segments, RocketMQ's default 6 MB consume-queue files
    "mapped_file_size_commit_log": 64 << 20,
    "mapped_file_size_consume_queue": 300_000 * 20,
    "max_hash_slot_num": 500_000,
    "max_index_num": 2_000_000,
    "max_message_size": 4 << 20,
    # 10,000 preallocated 6 MB queue files would need 60 GB: sparse files, as RocketMQ's
    "preallocate": False,
    "scrub_rate_bytes_per_s": 0,
}
UNCLEAN_STOP = "dispatch not caught up at shutdown"
UNCLEAN_START = "was not shut down cleanly"


@dataclass
class Memory:
    rss_mib: float
    file_mib: float
    anon_mib: float
    fds: int

    def text(self) -> str:
        return f"RSS {self.rss_mib:7.1f} MiB (file {self.file_mib:6.1f}, anon {self.anon_mib:6.1f}), {self.fds:6d} fds"


@dataclass
class Run:
    label: str
    members: int
    topics: int
    slice_rates: list[float] = field(default_factory=list)
    create_rate: float = 0.0
    batch_topics: int = 0
    batch_rate: float = 0.0
    send_rate: float = 0.0
    topics_json_kib: float = 0.0
    change_log_kib: float = 0.0
    after_sends: list[Memory] = field(default_factory=list)
    list_s: float = 0.0
    listed: int = 0
    stop_s: float = 0.0
    clean_stop: bool = True
    empty_ready_s: float = 0.0
    ready_s: float = 0.0
    clean_start: bool = True
    after_restart: list[Memory] = field(default_factory=list)
    kept: int = 0


def memory(pid: int) -> Memory:
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssFile", "RssAnon"):
                fields[key] = int(value.split()[0]) / 1024
    return Memory(fields.get("VmRSS", 0.0), fields.get("RssFile", 0.0), fields.get("RssAnon", 0.0),
                  len(os.listdir(f"/proc/{pid}/fd")))


def baseline_tree(ref: str, into: Path) -> Path:
    """Commit ``ref``'s sources laid out as the installed ``raftmq`` package (pyproject's package-dir)."""
    archive = into / "src.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "-C", str(REPO), "archive", ref], stdout=f, check=True)
    src = into / "src"
    with tarfile.open(archive) as t:
        t.extractall(src, filter="data")
    pkg = into / "pkg"
    shutil.copytree(src / "proto", pkg)
    for room in ("store", "replication", "node", "client", "pipeline"):
        shutil.copytree(src / room, pkg / "raftmq" / room)
    return pkg


class Group:
    """The members of one run, started from this checkout or from a baseline tree."""

    def __init__(self, base: Path, members: int, code: Path | None):
        self.specs = node_specs(base, members, store=STORE)
        self.code = code
        self.nodes: list[NodeProcess] = []

    @property
    def servers(self) -> list[str]:
        return [s.grpc_address for s in self.specs]

    def start(self) -> float:
        """Start every member; seconds until the last one is ready."""
        t = time.perf_counter()
        self.nodes = [NodeProcess(s) for s in self.specs]
        for n in self.nodes:
            if self.code is None:
                n.start()
            else:
                n.start(command=[sys.executable, "-m", "raftmq.node", "node"], env={"PYTHONPATH": str(self.code)})
        for n in self.nodes:
            n.wait_ready(timeout=600)
        return time.perf_counter() - t

    def stop(self) -> float:
        t = time.perf_counter()
        for n in self.nodes:
            n.stop(timeout=300)
        return time.perf_counter() - t

    def logs(self) -> str:
        return "".join(s.log_path.read_text(errors="replace") for s in self.specs)

    def kill(self) -> None:
        stop_all(self.nodes, kill=True)


def create_one_by_one(servers: list[str], names: list[str], queues: int, threads: int) -> list[float]:
    """Creates with Admin.create_topic from ``threads`` callers; the completion time of each, in order."""
    done: list[float] = []
    lock = threading.Lock()
    todo = iter(names)

    def work() -> None:
        with Admin(servers, timeout=30, retry_timeout=60) as admin:
            while True:
                with lock:
                    name = next(todo, None)
                if name is None:
                    return
                admin.create_topic(name, queues=queues)
                with lock:
                    done.append(time.perf_counter())

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sorted(done)


def cli(servers: list[str], *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raftmq.client", *argv, "--server", ",".join(servers)],
                          capture_output=True, text=True, cwd=REPO)


def send_one_each(servers: list[str], names: list[str], threads: int) -> None:
    todo = iter(names)
    lock = threading.Lock()
    with Producer(servers, timeout=30) as producer:
        def work() -> None:
            while True:
                with lock:
                    name = next(todo, None)
                if name is None:
                    return
                producer.send(name, BODY)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()


def list_paged(servers: list[str], page: int) -> int:
    """Topics counted through ``raftmq topic list --limit`` pages (one full listing if paging is missing)."""
    count, after = 0, ""
    while True:
        argv = ["topic", "list", "--json", "--limit", str(page)] + (["--after", after] if after else [])
        out = cli(servers, *argv)
        if out.returncode != 0:
            with Admin(servers, timeout=120) as admin:
                return len(admin.list_topics())
        rows = json.loads(out.stdout)
        count += len(rows)
        if len(rows) < page:
            return count
        after = rows[-1]["name"]


def run(label: str, members: int, topics: int, args: argparse.Namespace, code: Path | None, batch: bool) -> Run:
    base = Path(tempfile.mkdtemp(prefix="raftmq-topics-", dir=args.dir))
    r = Run(label, members, topics)
    group = Group(base, members, code)
    try:
        group.start()
        group.stop()
        r.empty_ready_s = group.start()
        servers = group.servers
        names = [f"bench-t{i:05d}" for i in range(topics)]
        t0 = time.perf_counter()
        done = create_one_by_one(servers, names, args.queues, args.threads)
        r.create_rate = topics / (done[-1] - t0)
        starts = [t0] + done[SLICE - 1::SLICE]
        r.slice_rates = [SLICE / (b - a) for a, b in zip(starts, starts[1:], strict=False)]
        print(f"  [{label}, {members} member(s)] created {topics} topics at {r.create_rate:.0f}/s", flush=True)
        if batch and args.batch_topics:
            extra = [f"bench-b{i:05d}" for i in range(args.batch_topics)]
            path = base / "topics.txt"
            path.write_text("".join(f"{n} --queues {args.queues}\n" for n in extra))
            t = time.perf_counter()
            out = cli(servers, "topic", "create", "--from-file", str(path))
            if out.returncode != 0:
                raise RuntimeError(f"topic create --from-file failed: {out.stderr.strip()}")
            r.batch_rate = len(extra) / (time.perf_counter() - t)
            r.batch_topics = len(extra)
            names += extra
        t = time.perf_counter()
        send_one_each(servers, names, args.send_threads)
        r.send_rate = len(names) / (time.perf_counter() - t)
        config = group.specs[0].data_dir / "config"
        r.topics_json_kib = (config / "topics.json").stat().st_size / 1024
        r.change_log_kib = sum(p.stat().st_size for p in config.glob("topics.json.*log")) / 1024
        time.sleep(args.settle)
        r.after_sends = [memory(n.proc.pid) for n in group.nodes]
        t = time.perf_counter()
        r.listed = list_paged(servers, args.page)
        r.list_s = time.perf_counter() - t
        before = len(group.logs())
        r.stop_s = group.stop()
        r.clean_stop = UNCLEAN_STOP not in group.logs()[before:]
        before = len(group.logs())
        r.ready_s = group.start()
        r.after_restart = [memory(n.proc.pid) for n in group.nodes]
        r.clean_start = UNCLEAN_START not in group.logs()[before:]
        with Admin(servers, timeout=120) as admin:
            r.kept = len(admin.list_topics())
        group.stop()
    except BaseException:
        group.kill()
        print(f"  [{label}] failed; logs under {base}", file=sys.stderr)
        raise
    shutil.rmtree(base, ignore_errors=True)
    return r


def report(r: Run) -> None:
    print(f"\n== {r.label}: {r.members} member(s), {r.topics} topics of queues created one by one"
          + (f" + {r.batch_topics} from a file" if r.batch_topics else ""))
    slices = ", ".join(f"{x:.0f}" for x in r.slice_rates)
    print(f"create (Admin.create_topic)   {r.create_rate:8.0f} topics/s; per {SLICE}: {slices}")
    if r.slice_rates:
        print(f"  last slice / first slice    {r.slice_rates[-1] / r.slice_rates[0]:8.2f}x")
    if r.batch_topics:
        print(f"create --from-file            {r.batch_rate:8.0f} topics/s")
    print(f"send one message to each      {r.send_rate:8.0f} msgs/s")
    print(f"topics.json                   {r.topics_json_kib:8.0f} KiB (+ change log {r.change_log_kib:.0f} KiB)")
    for i, m in enumerate(r.after_sends):
        print(f"after the sends, n{i}           {m.text()}")
    print(f"topic list (paged)            {r.list_s:8.2f} s for {r.listed} topics")
    print(f"SIGTERM to exit               {r.stop_s:8.2f} s; clean store: {'yes' if r.clean_stop else 'NO'}")
    print(f"start to ready, empty group   {r.empty_ready_s:8.2f} s")
    print(f"start to ready, all topics    {r.ready_s:8.2f} s ({r.ready_s / r.empty_ready_s:.1f}x the empty "
          f"group); recovered as clean: {'yes' if r.clean_start else 'NO'}")
    for i, m in enumerate(r.after_restart):
        print(f"at ready after restart, n{i}    {m.text()}")
    print(f"topics after the restart      {r.kept:8d} of {r.topics + r.batch_topics} (system topics not listed)")


def compare(before: Run, after: Run) -> None:
    def ratio(a: float, b: float) -> str:
        return f"{b / a:.2f}x" if a else "-"

    print(f"\n== {after.members} member(s): {after.label} against {before.label} "
          f"({after.topics} vs {before.topics} topics)")
    rows = [
        ("creation rate, one by one", before.create_rate, after.create_rate),
        ("creation rate, last slice", before.slice_rates[-1] if before.slice_rates else 0,
         after.slice_rates[-1] if after.slice_rates else 0),
        ("start to ready (s)", before.ready_s, after.ready_s),
        ("RSS at ready, n0 (MiB)", before.after_restart[0].rss_mib, after.after_restart[0].rss_mib),
        ("fds at ready, n0", before.after_restart[0].fds, after.after_restart[0].fds),
        ("RSS after sends, n0 (MiB)", before.after_sends[0].rss_mib, after.after_sends[0].rss_mib),
        ("fds after sends, n0", before.after_sends[0].fds, after.after_sends[0].fds),
    ]
    for name, a, b in rows:
        print(f"{name:30s} {a:10.1f} -> {b:10.1f}  ({ratio(a, b)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--batch-topics", type=int, default=2_000, help="more topics through --from-file (0: none)")
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--members", default="1,3", help="group sizes to run, comma-separated")
    ap.add_argument("--threads", type=int, default=1, help="callers of Admin.create_topic (default: one)")
    ap.add_argument("--send-threads", type=int, default=8)
    ap.add_argument("--page", type=int, default=500, help="topic list page size")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds between the sends and the measurement")
    ap.add_argument("--baseline-ref", help="first run the nodes of this commit (e.g. main)")
    ap.add_argument("--baseline-topics", type=int, help="topics for the baseline (default --topics)")
    ap.add_argument("--dir", default=None, help="where the data goes (default: the system temp dir)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.members.split(",")]
    scratch = Path(tempfile.mkdtemp(prefix="raftmq-topics-code-"))
    try:
        code = baseline_tree(args.baseline_ref, scratch) if args.baseline_ref else None
        for members in sizes:
            before = None
            if code is not None:
                before = run(args.baseline_ref, members, args.baseline_topics or args.topics, args, code, False)
                report(before)
            after = run("this checkout", members, args.topics, args, None, True)
            report(after)
            if before is not None:
                compare(before, after)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
