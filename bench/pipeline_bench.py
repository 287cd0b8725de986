"""Reindex throughput: the Spark pipeline with local[1] and local[2] against the broker's single reput thread.

One run builds one store with ``store.MessageStore``, then rebuilds its consume queues and index three ways
on copies of the same commit log:

* ``reput``: the store's own ``ReputMessageService`` (one thread, what a broker does after losing its CQ/index);
* ``spark local[1]`` and ``spark local[2]``: ``raftmq pipeline reindex`` in-process, each on a fresh session that
  first reindexed a small store (so the figure is the job, not the JVM start or JIT warm-up; that time is
  printed separately).

Every rebuild is checked byte for byte against the broker's own files. Throughput is commit-log bytes
(MB = 10**6) and messages per second; the scaling line is the ratio against reput measured in this run.
Numbers on a shared 2-core box are noisy: read the ratios, not the absolutes.

    .venv/bin/python bench/pipeline_bench.py [--messages 150000] [--body 256]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from raftmq.store import MessageStore, StoreConfig  # noqa: E402
from raftmq.store.checkpoint import StoreCheckpoint  # noqa: E402
from raftmq.store.commit_log import CommitLog  # noqa: E402
from raftmq.store.consume_queue import ConsumeQueueTable  # noqa: E402
from raftmq.store.index_service import IndexService  # noqa: E402
from raftmq.store.message import Message  # noqa: E402
from raftmq.store.reput import ReputMessageService  # noqa: E402


def build(root: str, cfg_kw: dict, messages: int, body: int) -> tuple[StoreConfig, int]:
    cfg = StoreConfig(root_dir=root, **cfg_kw)
    st = MessageStore(cfg)
    st.open()
    try:
        payload = os.urandom(body)
        i = 0
        while i < messages:
            qid = (i // 32) % 8
            topic = f"Bench{(i // 256) % 4}"
            batch = [Message(topic=topic, queue_id=qid, body=payload,
                             properties={"TAGS": f"t{(i + j) % 10}", "KEYS": f"order-{i + j} cust-{(i + j) % 997}"})
                     for j in range(min(32, messages - i))]
            st.put_messages(batch)
            i += len(batch)
        while st.dispatch_behind_bytes() > 0:
            time.sleep(0.05)
        data = st.commit_log_max_offset - st.commit_log_min_offset
    finally:
        st.shutdown()
    return cfg, data


def copy_commit_log(src: str, dst: str) -> None:
    os.makedirs(dst)
    shutil.copytree(os.path.join(src, "commitlog"), os.path.join(dst, "commitlog"))


def reput_rebuild(root: str, cfg_kw: dict) -> float:
    """The broker's own reput over a commit log with no consume queue and no index; seconds."""
    cfg = StoreConfig(root_dir=root, **cfg_kw)
    cp = StoreCheckpoint(cfg.checkpoint_path)
    cl = CommitLog(cfg, cp)
    cl.load()
    cl.recover_normally()
    cqs = ConsumeQueueTable.from_config(cfg)
    idx = IndexService.from_config(cfg, checkpoint=cp)
    reput = ReputMessageService(cl, cqs, idx, reput_from_offset=cl.min_offset, checkpoint=cp)
    t0 = time.perf_counter()
    while reput.dispatch_behind_bytes() > 0:
        if reput.do_reput() == 0 and reput.dispatch_behind_bytes() > 0:
            raise RuntimeError(f"reput stopped early: {reput.last_error}")
    for q in cqs.queues():
        q.flush_all()
    idx.flush()
    elapsed = time.perf_counter() - t0
    idx.close()
    for q in cqs.queues():
        q.close()
    cl.close()
    return elapsed


def spark_rebuild(master: str, root: str, out: str, cfg_kw: dict, split: int, warm_root: str) -> tuple[float, float]:
    """``(startup seconds, job seconds)`` of ``pipeline reindex`` on a fresh session with ``master``.

    The session first reindexes a small store (``warm_root``), so the measured run meets warm Python workers
    and a JIT-compiled JVM whichever configuration runs first.
    """
    from raftmq.pipeline.jobs.common import JobContext
    from raftmq.pipeline.jobs.reindex import reindex
    from raftmq.pipeline.layout import IndexGeometry, open_layout
    from raftmq.pipeline.spark import get_session
    from raftmq.store.message import parse_delay_levels

    t0 = time.perf_counter()
    spark = get_session(master, app_name="pipeline-bench")
    args = SimpleNamespace(master=master, split_size=split, quiet=True, progress_interval=60)
    geometry = IndexGeometry(cfg_kw["max_hash_slot_num"], cfg_kw["max_index_num"])
    delays = parse_delay_levels(StoreConfig().message_delay_level)
    try:
        with JobContext("reindex", args) as ctx:
            warm_out = out + "-warmup"
            reindex(ctx, open_layout(warm_root), warm_out, cfg_kw["mapped_file_size_consume_queue"], geometry, [],
                    delays)
            shutil.rmtree(warm_out)
            startup = time.perf_counter() - t0
            layout = open_layout(root)
            t1 = time.perf_counter()
            reindex(ctx, layout, out, cfg_kw["mapped_file_size_consume_queue"], geometry, [], delays)
            job = time.perf_counter() - t1
    finally:
        spark.stop()
    return startup, job


def same_bytes(a: str, b: str, sub: str, by_order: bool = False) -> bool:
    da, db = os.path.join(a, sub), os.path.join(b, sub)
    fa = sorted(os.path.relpath(os.path.join(d, f), da) for d, _, fs in os.walk(da) for f in fs)
    fb = sorted(os.path.relpath(os.path.join(d, f), db) for d, _, fs in os.walk(db) for f in fs)
    if len(fa) != len(fb) or (not by_order and fa != fb):
        return False
    return all(filecmp.cmp(os.path.join(da, x), os.path.join(db, y), shallow=False)
               for x, y in zip(fa, fb, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=150_000)
    ap.add_argument("--body", type=int, default=256, help="body bytes per message")
    ap.add_argument("--segment", type=int, default=16 << 20, help="commit-log segment size")
    ap.add_argument("--split", type=int, default=8 << 20, help="pipeline split size")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed)")
    a = ap.parse_args()
    cfg_kw = dict(mapped_file_size_commit_log=a.segment, mapped_file_size_consume_queue=300_000 * 20,
                  max_hash_slot_num=500_000, max_index_num=2_000_000, preallocate=False)
    work = a.dir or tempfile.mkdtemp(prefix="pipeline-bench-")
    try:
        t = time.perf_counter()
        _, data = build(os.path.join(work, "broker"), cfg_kw, a.messages, a.body)
        mb = data / 1e6
        print(f"store: {a.messages:,} messages, {mb:,.1f} MB of commit log in "
              f"{len(os.listdir(os.path.join(work, 'broker', 'commitlog')))} segment(s) of {a.segment >> 20} MiB, "
              f"2 keys + uniq key per message (built in {time.perf_counter() - t:.1f}s)")
        print(f"machine: {os.cpu_count()} cores (shared), load average {os.getloadavg()[0]:.1f} at start; "
              "durability of the build: async flush")
        build(os.path.join(work, "warm"), cfg_kw, 5_000, a.body)
        results = []
        copy_commit_log(os.path.join(work, "broker"), os.path.join(work, "reput"))
        secs = reput_rebuild(os.path.join(work, "reput"), cfg_kw)
        ok = same_bytes(os.path.join(work, "broker"), os.path.join(work, "reput"), "consumequeue") and \
            same_bytes(os.path.join(work, "broker"), os.path.join(work, "reput"), "index", by_order=True)
        results.append(("reput (1 thread)", secs, None, ok))
        for master in ("local[1]", "local[2]"):
            out = os.path.join(work, f"spark-{master[6]}")
            startup, secs = spark_rebuild(master, os.path.join(work, "broker"), out, cfg_kw, a.split,
                                          os.path.join(work, "warm"))
            ok = same_bytes(os.path.join(work, "broker"), out, "consumequeue") and \
                same_bytes(os.path.join(work, "broker"), out, "index", by_order=True)
            results.append((f"spark {master}", secs, startup, ok))
        base = results[0][1]
        print(f"{'rebuild':<18} {'seconds':>8} {'MB/s':>8} {'msgs/s':>10} {'vs reput':>9}  identical  (start-up + warm-up)")
        for name, secs, startup, ok in results:
            print(f"{name:<18} {secs:8.2f} {mb / secs:8.2f} {a.messages / secs:10,.0f} {base / secs:8.2f}x  "
                  f"{'yes' if ok else 'NO':<9}  {'' if startup is None else f'{startup:.1f}s'}")
        s1, s2 = results[1][1], results[2][1]
        print(f"scaling local[1] -> local[2]: {s1 / s2:.2f}x; load average at end {os.getloadavg()[0]:.1f}")
    finally:
        if a.dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
