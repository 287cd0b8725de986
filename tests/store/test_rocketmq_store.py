"""A store that ``raftmq store repair`` fixed reads without loss through RocketMQ 4.9.8's own store code (issue 33
item 3).

The reader (tests/store/rocketmq_store, built once per source hash by its build.sh into ~/.cache/raftmq/) opens
the repaired directory with RocketMQ's ``DefaultMessageStore`` and pulls every queue with ``getMessage``, in
batches of 32 as a consumer does and one message at a time (which record each queue offset holds). Twice: on the
consume queues raftmq rebuilt, and with them deleted, so that RocketMQ rebuilds them from the log itself.

Before, repair padded the lost queue offsets with blank units ``(0, 0x7FFFFFFF, 0)``: RocketMQ rolled to the next
commit-log segment on one and skipped the intact messages of the pull below it (26 here), and a RocketMQ that
rebuilt the queues shifted every later unit by one. In CI a missing JDK/Maven is an error; elsewhere these tests
skip.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from raftmq.store import MessageStore, StoreConfig
from tests.store import crash_writer as cw
from tests.store.store_helpers import wait_dispatched

pytestmark = pytest.mark.slow
BUILD = Path(__file__).resolve().parent / "rocketmq_store" / "build.sh"
ROOT = Path(__file__).resolve().parents[2]
SEG = 64 * 1024
CONFIG = {"mapped_file_size_commit_log": SEG, "mapped_file_size_consume_queue": 50 * 20, "max_hash_slot_num": 64,
          "max_index_num": 256, "preallocate": False}
JVM_OPENS = ["--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
             "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED"]  # RocketMQ 4.9 unmaps with reflection


@pytest.fixture(scope="session")
def rocketmq_classpath() -> str:
    if not (shutil.which("java") and shutil.which("mvn")):
        if os.environ.get("CI"):
            raise RuntimeError("the RocketMQ store reader needs a JDK 17 and Maven on the CI machine")
        pytest.skip("no JDK/Maven here: reading with RocketMQ's store code needs both")
    built = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=900)
    if built.returncode != 0:
        raise RuntimeError(f"building the RocketMQ store reader failed:\n{built.stderr[-3000:]}")
    return built.stdout.strip().splitlines()[-1]


def rocketmq_read(classpath: str, root: Path) -> dict[str, list[tuple]]:
    """What RocketMQ's getMessage returns for every queue of the store at ``root`` (a copy: it writes to it)."""
    out = subprocess.run(["java", *JVM_OPENS, "-cp", classpath, "io.raftmq.rmqstore.ReadStore", str(root), str(SEG),
                          str(CONFIG["mapped_file_size_consume_queue"]), str(CONFIG["max_hash_slot_num"]),
                          str(CONFIG["max_index_num"])], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines: dict[str, list[tuple]] = {"M": [], "S": [], "Q": []}
    for line in out.stdout.splitlines():
        kind, *fields = line.split()
        if kind in lines:
            lines[kind].append(tuple(int(f) if f.isdigit() else f for f in fields))
    return lines


def _write(root: Path, n: int) -> list:
    st = MessageStore(StoreConfig(root_dir=str(root), **CONFIG))
    st.open()
    try:
        results = [st.put_message(cw.make_message(s, "DmgT", s % 3)) for s in range(n)]
        wait_dispatched(st)
    finally:
        st.shutdown()
    return results


def test_a_repaired_store_reads_without_loss_through_rocketmqs_store_code(tmp_path, rocketmq_classpath):
    root = tmp_path / "s"
    results = _write(root, 330)
    segment = {s: r.physical_offset // SEG for s, r in enumerate(results)}
    lost = {40, 41, 250}  # two neighbours in segment 0 (queues 1 and 2), one in a later segment (queue 1)
    assert segment[250] > segment[40]
    for s in (40, 250):
        r = results[s]
        path = root / "commitlog" / f"{r.physical_offset - r.physical_offset % SEG:020d}"
        with open(path, "r+b") as f:
            f.seek(r.physical_offset % SEG + 40)
            span = r.wrote_bytes + (results[s + 1].wrote_bytes if s + 1 in lost else 0) - 60
            f.write(random.Random(s).randbytes(span))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'proto'}"}
    rep = subprocess.run([sys.executable, "-m", "raftmq.node", "store", "repair", str(root)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    intact = {(r.queue_id, r.queue_offset): cw.uniq_key_for(s) for s, r in enumerate(results) if s not in lost}
    tombstones = {(results[s].queue_id, results[s].queue_offset) for s in lost}
    for rebuilt_by in ("raftmq", "rocketmq"):
        copy = tmp_path / rebuilt_by
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns("lock", "quarantine"))
        if rebuilt_by == "rocketmq":  # RocketMQ rebuilds the consume queues and index from the repaired log
            shutil.rmtree(copy / "consumequeue")
            shutil.rmtree(copy / "index")
        got = rocketmq_read(rocketmq_classpath, copy)
        assert sorted(q[:3] for q in got["Q"]) == [("DmgT", q, 0) for q in range(3)]
        assert {q[1]: q[3] for q in got["Q"]} == {q: 110 for q in range(3)}  # no offset lost or reused
        batch = {(m[1], m[3]): m[5] for m in got["M"] if m[0] == "DmgT" and m[5] != "-"}
        assert batch == intact, f"{rebuilt_by}: missing {sorted(set(intact) - set(batch))[:10]}"
        single = [m for m in got["S"] if m[0] == "DmgT"]
        assert all(m[2] == m[3] for m in single), [m for m in single if m[2] != m[3]][:5]  # offset = its record
        assert {(m[1], m[3]) for m in single if m[5] == "-"} == tombstones  # the lost ones: a tombstone each
