"""The SDK against a real node process: produce, consume with committed offsets, admin and queries."""

from __future__ import annotations

import pytest

from raftmq.client import Admin, AlreadyExistsError, Message, Producer, PullConsumer, TopicNotFoundError
from tests.client.test_cli_e2e import eventually


@pytest.fixture(scope="module")
def server(shared_node):
    return shared_node.grpc_address


def drain(consumer: PullConsumer, expected: int, rounds: int = 40) -> list:
    """Poll until ``expected`` messages arrived (or the rounds run out, so a bug fails instead of hanging)."""
    got = []
    for _ in range(rounds):
        got += consumer.poll(timeout=0.5)
        if len(got) >= expected:
            break
    return got


def test_consumer_commits_and_resumes(server):
    with Admin(server) as admin:
        admin.create_topic("Resume", queues=3)
        with pytest.raises(AlreadyExistsError):
            admin.create_topic("Resume")
    with Producer([server]) as p:
        results = p.send_batch("Resume", [f"m{i}" for i in range(10)])
        assert len({r.queue_id for r in results}) == 1, "a batch lands in one queue"
        for i in range(10, 20):
            p.send("Resume", f"m{i}", keys=[f"k{i}"])

    with PullConsumer("grp", "Resume", server, start_from="first", auto_commit_interval=3600) as c:
        got = drain(c, 20)
        assert sorted(m.text for m in got) == sorted(f"m{i}" for i in range(20))
        assert sum(c.positions().values()) == 20
    # close() committed; a new consumer of the group starts after what was handed out
    with Admin(server) as admin:
        committed = admin.committed_offsets("grp", "Resume")
        assert sum(committed.values()) == 20
    with Producer(server) as p:
        p.send("Resume", "m20")
    with PullConsumer("grp", "Resume", server, start_from="first") as c:
        assert [m.text for m in drain(c, 1)] == ["m20"]
        assert c.poll(timeout=0.3) == []


def test_receive_commits_only_what_was_handed_out(server):
    with Admin(server) as admin:
        admin.create_topic("HandOut", queues=1)
    with Producer(server) as p:
        p.send_batch("HandOut", [Message(f"h{i}", tags="T") for i in range(5)], queue_id=0)
    with PullConsumer("g", "HandOut", server, start_from="first", auto_commit=False) as c:
        first = [c.receive(timeout=5), c.receive(timeout=5)]
        assert [m.text for m in first] == ["h0", "h1"]
        c.commit()
    with Admin(server) as admin:
        assert admin.committed_offsets("g", "HandOut") == {0: 2}
    with PullConsumer("g", "HandOut", server) as c:
        assert [m.text for m in drain(c, 3)] == ["h2", "h3", "h4"]


def test_start_from_last_sees_only_new_messages_and_tags_filter(server):
    with Admin(server) as admin:
        admin.create_topic("Latest", queues=2)
    with Producer(server) as p:
        p.send("Latest", "old")
        with PullConsumer("new-group", "Latest", server, tags="B || C") as c:
            c.start()
            p.send("Latest", "a", tags="A")
            p.send("Latest", "b", tags="B")
            p.send("Latest", "c", tags="C")
            assert sorted(m.text for m in drain(c, 2)) == ["b", "c"]


def test_admin_offsets_query_view_and_status(server):
    with Admin(server) as admin, Producer(server) as p:
        admin.create_topic("Adm", queues=2)
        r = p.send("Adm", b"\x00binary", keys="order-1 order-2", tags="X", properties={"a": "b"}, queue_id=1)
        assert r.queue_id == 1 and r.queue_offset == 0
        queues = eventually(lambda: admin.queue_offsets("Adm"), lambda qs: sum(q.max_offset for q in qs) == 1)
        assert [(q.queue_id, q.min_offset, q.max_offset) for q in queues] == [(0, 0, 0), (1, 0, 1)]
        assert admin.search_offset("Adm", 1, 0) == 0
        found = eventually(lambda: admin.query_by_key("Adm", "order-2"), lambda ms: len(ms) > 0)
        assert [m.msg_id for m in found] == [r.msg_id] and found[0].body == b"\x00binary"
        view = admin.view_message(r.msg_id)
        assert view.uniq_key == r.uniq_key and view.properties["a"] == "b" and view.keys == ["order-1", "order-2"]
        assert admin.view_message(r.uniq_key, topic="Adm").msg_id == r.msg_id
        updated = admin.update_topic("Adm", write_queues=3)
        assert (updated.read_queue_nums, updated.write_queue_nums) == (2, 3)
        status = admin.cluster_status()
        assert [m.id for m in status.members] == ["n0"] and status.answered_by == server
        admin.delete_topic("Adm")
        with pytest.raises(TopicNotFoundError):
            admin.queue_offsets("Adm")


def test_consumer_follows_topic_queue_changes(server):
    with Admin(server) as admin, Producer(server) as p:
        admin.create_topic("Grow", queues=1)
        p.send("Grow", "q0", queue_id=0)
        with PullConsumer("g", "Grow", server, start_from="first", queue_refresh_interval=0) as c:
            assert [m.text for m in drain(c, 1)] == ["q0"]
            admin.update_topic("Grow", queues=2)
            p.send("Grow", "q1", queue_id=1)
            assert [m.text for m in drain(c, 1)] == ["q1"], "a queue added later is read from its start"
            admin.update_topic("Grow", queues=1)
            p.send("Grow", "q0-again", queue_id=0)
            assert [m.text for m in drain(c, 1)] == ["q0-again"]
            c.commit()
        assert set(admin.committed_offsets("g", "Grow")) == {0}
