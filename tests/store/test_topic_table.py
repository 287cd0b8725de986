"""The topic table's change log (issue 43): a change costs the same whatever the table's size, is durable before it
is visible, and topics.json (RocketMQ's file) is folded from the log and stays what RocketMQ reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from raftmq.store.errors import StoreLoadError
from raftmq.store.topic_config import CREATE, DELETE, PUT, TopicConfig, TopicConfigTable

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _table(path) -> TopicConfigTable:
    t = TopicConfigTable(str(path))
    t.load()
    return t


def _log_lines(path) -> list[str]:
    return (path / "topics.json.changes").read_text().splitlines()


def test_a_change_appends_one_line_and_leaves_topics_json_alone_whatever_the_table_size(tmp_path):
    t = _table(tmp_path)
    t.apply([(CREATE, TopicConfig(f"t{i:05d}", 8, 8)) for i in range(5000)], 1000)  # one change, one line
    t.fold()
    before = (tmp_path / "topics.json").stat()
    sizes = []
    for i in range(20):
        start = (tmp_path / "topics.json.changes").stat().st_size
        t.put(TopicConfig(f"late{i:02d}", 8, 8), 2000 + i)
        sizes.append((tmp_path / "topics.json.changes").stat().st_size - start)
    after = (tmp_path / "topics.json").stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    assert len(set(sizes)) == 1 and sizes[0] < 400  # one short line per change: not the 5,000-topic table
    assert t.data_version == {"counter": 5020, "timestamp": 2019}
    reloaded = _table(tmp_path)
    assert reloaded.to_json() == t.to_json()


def test_the_log_is_folded_once_it_outgrows_topics_json_and_topics_json_is_rocketmqs_shape(tmp_path):
    t = _table(tmp_path)
    t.FOLD_MIN_BYTES = 4096
    for i in range(200):
        t.put(TopicConfig(f"t{i:03d}"), 10 + i)
    assert t.folds >= 1
    assert (tmp_path / "topics.json.changes").stat().st_size <= 2 * max(4096, (tmp_path / "topics.json").stat().st_size)
    t.fold()
    data = json.loads((tmp_path / "topics.json").read_text())
    assert data["dataVersion"] == {"counter": 200, "timestamp": 209}
    assert data["topicConfigTable"]["t007"] == {"order": False, "perm": 6, "readQueueNums": 16,
                                                "topicFilterType": "SINGLE_TAG", "topicName": "t007",
                                                "topicSysFlag": 0, "writeQueueNums": 16}
    assert (tmp_path / "topics.json").read_text().startswith('{\n\t"dataVersion":{\n\t\t"counter":200,')


def test_batches_are_one_change_with_a_verdict_per_operation(tmp_path):
    t = _table(tmp_path)
    t.put(TopicConfig("A"), 1)
    lines = len(_log_lines(tmp_path))
    verdicts = t.apply([(CREATE, TopicConfig("A")), (CREATE, TopicConfig("B")), (CREATE, TopicConfig("B")),
                        (PUT, TopicConfig("A", perm=4)), (DELETE, "nope"), (CREATE, TopicConfig("bad name")),
                        (DELETE, "B")], 2)
    assert verdicts[0] == "topic A already exists" and verdicts[1] is None
    assert verdicts[2] == "topic B already exists" and verdicts[3] is None
    assert verdicts[4] == "topic nope does not exist" and "invalid topic name" in verdicts[5]
    assert verdicts[6] is None
    assert len(_log_lines(tmp_path)) == lines + 1
    assert t.get("A").perm == 4 and t.get("B") is None and t.data_version["counter"] == 1 + 3
    assert t.apply([(CREATE, TopicConfig("A"))], 3) == ["topic A already exists"]  # nothing applied: no line
    assert len(_log_lines(tmp_path)) == lines + 1 and t.data_version["counter"] == 4


def test_a_torn_last_line_is_dropped_and_damage_before_whole_lines_stops_the_load(tmp_path):
    t = _table(tmp_path)
    for name in ("A", "B", "C"):
        t.put(TopicConfig(name), 1)
    t.close()
    path = tmp_path / "topics.json.changes"
    whole = path.read_bytes()
    path.write_bytes(whole + b'0badc0de {"v":4,"ts":2,"ops":[["put",{"topicNa')  # a crash mid-append
    assert [c.topic_name for c in _table(tmp_path).list() if c.topic_name in "ABC"] == ["A", "B", "C"]
    assert path.read_bytes() == whole  # cut back to the last whole line
    lines = whole.split(b"\n")
    lines[2] = lines[2].replace(b'"B"', b'"X"')  # a synced line changed under us: its checksum fails
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(StoreLoadError, match=r"damaged at line 3 .* acknowledged are unreadable"):
        _table(tmp_path)


def test_a_stale_topics_json_is_brought_up_to_date_from_the_log_and_the_bak_too(tmp_path):
    t = _table(tmp_path)
    t.put(TopicConfig("A"), 1)
    t.fold()  # topics.json holds A
    t.put(TopicConfig("B"), 2)
    t.fold()  # topics.json holds A, B; its .bak A
    t.put(TopicConfig("C"), 3)  # only in the log
    t.close()
    assert set(json.loads((tmp_path / "topics.json").read_text())["topicConfigTable"]) >= {"A", "B"}
    assert _table(tmp_path).get("C") is not None
    (tmp_path / "topics.json").write_text("{ torn")  # the file is damaged: its .bak is older still
    t2 = _table(tmp_path)
    assert all(t2.get(n) is not None for n in "ABC") and t2.data_version["counter"] == 3
    # a log that does not continue the file it is loaded with would silently lose topics: refused
    (tmp_path / "topics.json").write_text(json.dumps({"dataVersion": {"counter": 1, "timestamp": 999},
                                                      "topicConfigTable": {}}))
    (tmp_path / "topics.json.bak").unlink()
    with pytest.raises(StoreLoadError, match="older than its change log"):
        _table(tmp_path)


def test_a_crash_between_writing_topics_json_and_restarting_the_log_loses_nothing(tmp_path):
    t = _table(tmp_path)
    for name in ("A", "B"):
        t.put(TopicConfig(name), 1)
    old_log = (tmp_path / "topics.json.changes").read_bytes()
    t.fold()  # writes topics.json, then the log restarts
    t.close()
    (tmp_path / "topics.json.changes").write_bytes(old_log)  # as if the crash came before the log's rename
    t2 = _table(tmp_path)
    assert t2.get("A") and t2.get("B") and t2.data_version["counter"] == 2
    t2.put(TopicConfig("C"), 5)
    assert _table(tmp_path).data_version["counter"] == 3


def test_a_restored_snapshot_replaces_the_file_and_the_log(tmp_path):
    src = _table(tmp_path / "a")
    src.put(TopicConfig("S"), 7)
    t = _table(tmp_path / "b")
    for i in range(5):
        t.put(TopicConfig(f"old{i}"), 1)
    t.restore(src.snapshot())
    t.close()
    again = _table(tmp_path / "b")
    assert again.get("S") is not None and again.get("old0") is None
    assert again.data_version == {"counter": 1, "timestamp": 7}


def test_a_killed_writer_loses_no_acknowledged_change(tmp_path):
    """A process applies changes and says so after each returns; SIGKILL at a random moment; every change it
    acknowledged is there after the load, and nothing it did not make."""
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{REPO!r}, {os.path.join(REPO, "proto")!r}]
        from raftmq.store.topic_config import CREATE, TopicConfig, TopicConfigTable
        t = TopicConfigTable(sys.argv[1])
        t.load()
        t.FOLD_MIN_BYTES = 8192  # folds happen during the run too
        i = 0
        while True:
            t.apply([(CREATE, TopicConfig(f"k{{i + j:06d}}", 2, 2)) for j in range(3)], 1000 + i)
            print(i + 2, flush=True)
            i += 3
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    acked = -1
    try:
        for line in proc.stdout:
            acked = int(line)
            if acked > 1500:
                break
    finally:
        proc.kill()
        proc.wait()
    t = _table(tmp_path)
    names = {c.topic_name for c in t.list() if c.topic_name.startswith("k")}
    assert {f"k{i:06d}" for i in range(acked + 1)} <= names
    assert len(names) % 3 == 0 and t.data_version["counter"] == len(names)  # whole changes only
