"""Three real node processes: a member without a majority is not ready; followers redirect writes to the leader."""

from __future__ import annotations

import time

import grpc
import pytest

from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.processes import node_specs, start_nodes, stop_all

REDIRECT = (("x-raftmq-redirect", "1"),)


def _error(call, req) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        call(req, timeout=10, metadata=REDIRECT)  # ask for the redirect, not forwarding (test_forwarding.py)
    return e.value


def test_lone_member_not_ready_then_followers_redirect(tmp_path):
    # a short grace (node.ready_without_leader_seconds, 15 s by default): the member that loses its majority at
    # the end stops reporting ready after it, and the test waits for exactly that state
    specs = node_specs(tmp_path, 3, node={"ready_without_leader_seconds": 3})
    nodes = start_nodes(specs[:1], wait=False)
    try:
        lone = nodes[0]
        reason = ""
        deadline = time.monotonic() + 60
        while "leader" not in reason:  # recovering the store first, then waiting for a leader that cannot exist
            assert lone.alive and time.monotonic() < deadline, lone.log_tail()
            try:
                status, reason = lone.http_get("/ready", timeout=2)
                assert status == 503, reason
            except OSError:
                pass
            time.sleep(0.1)
        assert lone.http_get("/health")[0] == 200
        err = _error(pb_grpc.MessagingServiceStub(lone.channel()).SendMessage,
                     pb.SendMessageRequest(message=pb.Message(topic="T", body=b"x")))
        assert err.code() == grpc.StatusCode.UNAVAILABLE and "not ready" in err.details()

        nodes += start_nodes(specs[1:], wait=False)
        for n in nodes:
            n.wait_ready()
        status = pb_grpc.AdminServiceStub(nodes[0].channel()).ClusterStatus(pb.ClusterStatusRequest(), timeout=10)
        leader = next(n for n in nodes if n.spec.id == status.leader_id)
        follower = next(n for n in nodes if n is not leader)
        pb_grpc.AdminServiceStub(leader.channel()).CreateTopic(
            pb.CreateTopicRequest(topic=pb.TopicConfig(name="T")), timeout=10)

        messaging = pb_grpc.MessagingServiceStub(follower.channel())
        admin = pb_grpc.AdminServiceStub(follower.channel())
        for call, req in [
            (messaging.SendMessage, pb.SendMessageRequest(message=pb.Message(topic="T", body=b"x"))),
            (messaging.PullMessage, pb.PullMessageRequest(topic="T", from_leader=True)),
            (admin.CreateTopic, pb.CreateTopicRequest(topic=pb.TopicConfig(name="U"))),
        ]:
            err = _error(call, req)
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err
            assert dict(err.trailing_metadata())["x-raftmq-leader"] == leader.grpc_address
            assert leader.grpc_address in err.details()
        # reads are served by any member
        assert messaging.PullMessage(pb.PullMessageRequest(topic="T"), timeout=10).status == pb.NO_NEW_MSG

        # The majority goes away: the last member loses its leader and reports not ready, but still serves reads.
        for n in nodes:
            if n is not follower:
                assert n.stop() == 0
        deadline = time.monotonic() + 60
        while True:
            status, reason = follower.http_get("/ready")
            if status == 503:
                break
            assert time.monotonic() < deadline, "a member without a majority must stop reporting ready"
            time.sleep(0.2)
        assert "no leader" in reason
        messaging = pb_grpc.MessagingServiceStub(follower.channel())
        assert messaging.PullMessage(pb.PullMessageRequest(topic="T"), timeout=10).status == pb.NO_NEW_MSG
    finally:
        stop_all(nodes)
