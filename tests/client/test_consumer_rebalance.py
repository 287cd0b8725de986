"""The consumer's side of a rebalance against a scripted server: what it commits when a queue leaves it, that it
unregisters on close, and that it reads every queue from a server without consumer groups."""

from __future__ import annotations

import time

import grpc

from raftmq.client import PullConsumer
from raftmq.v1 import raftmq_pb2 as pb
from tests.client.scripted_server import Abort
from tests.client.test_cli_e2e import eventually

QUEUES = 4
COMMITTED = 5


def queues(_request) -> pb.GetQueueOffsetsResponse:
    return pb.GetQueueOffsetsResponse(queues=[pb.QueueOffsets(queue_id=q, min_offset=0, max_offset=1000)
                                              for q in range(QUEUES)])


def one_message(request: pb.PullMessageRequest) -> pb.PullMessageResponse:
    """Every queue holds a message at every offset."""
    m = pb.MessageView(topic=request.topic, queue_id=request.queue_id, queue_offset=request.offset,
                       body=f"{request.queue_id}:{request.offset}".encode())
    return pb.PullMessageResponse(status=pb.FOUND, messages=[m], next_offset=request.offset + 1, max_offset=1000)


def serve_topic(s) -> None:
    s.defaults["GetQueueOffsets"] = queues
    s.defaults["FetchOffset"] = pb.FetchOffsetResponse(offsets={q: COMMITTED for q in range(QUEUES)})
    s.defaults["PullMessage"] = one_message


def test_a_revoked_queue_is_committed_at_what_was_handed_out(scripted):
    s = scripted()
    serve_topic(s)
    s.defaults["ConsumerHeartbeat"] = pb.ConsumerHeartbeatResponse(client_ids=["a"], generation=1,
                                                                  read_queue_nums=QUEUES)
    c = PullConsumer("g", "T", s.address, client_id="a", heartbeat_interval=0.05, auto_commit_interval=3600)
    try:
        c.start()
        assert c.assigned_queues() == [0, 1, 2, 3]
        handed: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while not {2, 3} <= set(handed) and time.monotonic() < deadline:
            for m in c.poll(timeout=0.05):
                handed[m.queue_id] = m.queue_offset + 1
        assert {2, 3} <= set(handed)
        s.defaults["ConsumerHeartbeat"] = pb.ConsumerHeartbeatResponse(client_ids=["a", "b"], generation=2,
                                                                      read_queue_nums=QUEUES)
        while c.assigned_queues() != [0, 1] and time.monotonic() < deadline:
            for m in c.poll(timeout=0.05):
                handed[m.queue_id] = m.queue_offset + 1
        assert c.assigned_queues() == [0, 1] and c.members() == ["a", "b"]

        def commits() -> dict[int, int]:
            out: dict[int, int] = {}
            for req in list(s.received["CommitOffset"]):
                out.update(req.offsets)
            return out

        commits = eventually(commits, lambda got: {2, 3} <= set(got), timeout=30)  # committed right after release
        for q in (2, 3):  # what was handed out of a released queue is committed, nothing beyond it
            assert commits.get(q) == handed[q], (q, commits, handed)
        assert set(commits) <= {2, 3}, "only the released queues are committed at a rebalance"
        assert all(m.queue_id in (0, 1) for m in c.poll(timeout=0.2)), "a released queue is no longer read"
    finally:
        c.close()
    assert [r.client_id for r in s.received["UnregisterConsumer"]] == ["a"]
    assert all(r.group == "g" and r.topic == "T" for r in s.received["ConsumerHeartbeat"])


def test_server_without_consumer_groups_gets_a_consumer_of_every_queue(scripted):
    s = scripted()
    serve_topic(s)
    s.defaults["ConsumerHeartbeat"] = Abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
    with PullConsumer("g", "T", s.address, client_id="solo") as c:
        c.start()
        assert c.assigned_queues() == [0, 1, 2, 3]
        assert c.poll(timeout=1.0)
    assert len(s.received["ConsumerHeartbeat"]) == 1, "no heartbeat thread against such a server"
    assert not s.received["UnregisterConsumer"]
