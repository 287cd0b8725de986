"""Forwarding (issue 11): any member accepts write and admin calls and relays them to the leader.

Real 3-member cluster with a cluster secret; the client talks to a follower only.
"""

from __future__ import annotations

import grpc
import pytest

from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.replication.cluster_util import REDIRECT, wait_leader
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for

SECRET = "fw-secret"


def test_a_follower_forwards_writes_and_admin_calls_to_the_leader(tmp_path):
    with running_nodes(tmp_path, 3, cluster={"secret": SECRET}) as nodes:
        leader = wait_leader(nodes)
        follower = next(n for n in nodes if n is not leader)
        admin = pb_grpc.AdminServiceStub(follower.channel())
        messaging = pb_grpc.MessagingServiceStub(follower.channel())

        r = admin.CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(name="Fw", write_queue_nums=1,
                                                                          read_queue_nums=1)), timeout=30)
        assert r.topic.name == "Fw"
        sent = messaging.SendMessage(pb.SendMessageRequest(message=pb.Message(topic="Fw", body=b"one")), timeout=30)
        batch = messaging.SendBatch(pb.SendBatchRequest(messages=[pb.Message(topic="Fw", body=b"two"),
                                                                  pb.Message(topic="Fw", body=b"three")]), timeout=30)
        assert [x.queue_offset for x in batch.results] == [sent.result.queue_offset + 1, sent.result.queue_offset + 2]
        messaging.CommitOffset(pb.CommitOffsetRequest(group="g", topic="Fw", offsets={0: 2}), timeout=30)

        # the leader stored them (one write path)
        pull = pb.PullMessageRequest(topic="Fw", queue_id=0, offset=0, max_count=10, long_poll_timeout_ms=200)
        got = wait_for(lambda: (lambda ms: ms if len(ms) >= 3 else None)(
            pb_grpc.MessagingServiceStub(leader.channel()).PullMessage(pull, timeout=30).messages),
            "the three messages to be dispatched on the leader")
        assert [m.body for m in got] == [b"one", b"two", b"three"]
        fetched = pb_grpc.MessagingServiceStub(leader.channel()).FetchOffset(
            pb.FetchOffsetRequest(group="g", topic="Fw"), timeout=30)
        assert dict(fetched.offsets) == {0: 2}

        # a client that wants to go direct still gets the redirect
        with pytest.raises(grpc.RpcError) as e:
            messaging.SendMessage(pb.SendMessageRequest(message=pb.Message(topic="Fw", body=b"x")), timeout=30,
                                  metadata=REDIRECT)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert dict(e.value.trailing_metadata())["x-raftmq-leader"] == leader.grpc_address

        # a definite failure at the leader comes back as such through the relay
        with pytest.raises(grpc.RpcError) as e:
            admin.CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(name="Fw")), timeout=30)
        assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS, e.value.details()

        # a call that claims to be relayed without the cluster secret is refused
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.MessagingServiceStub(leader.channel()).SendMessage(
                pb.SendMessageRequest(message=pb.Message(topic="Fw", body=b"forged")), timeout=30,
                metadata=(("x-raftmq-forwarded-by", "n9"), ("x-raftmq-forwarded-for", "ipv4:10.9.9.9:1")))
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # with the secret, the relay's word for the client's address is the message's born host
        r = pb_grpc.MessagingServiceStub(leader.channel()).SendMessage(
            pb.SendMessageRequest(message=pb.Message(topic="Fw", body=b"relayed")), timeout=30,
            metadata=(("x-raftmq-forwarded-by", "n9"), ("x-raftmq-forwarded-for", "ipv4:10.9.9.9:1234"),
                      ("x-raftmq-secret", SECRET)))
        pull = pb.PullMessageRequest(topic="Fw", queue_id=0, offset=r.result.queue_offset, max_count=1,
                                     long_poll_timeout_ms=200)
        got = wait_for(lambda: pb_grpc.MessagingServiceStub(leader.channel()).PullMessage(pull, timeout=30).messages,
                       "the relayed message to be dispatched")
        assert got[0].born_host == "10.9.9.9:1234"
