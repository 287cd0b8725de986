"""The official RocketMQ 5 Python Producer over TLS with signed requests (its Credentials), as a team would
point it at a secured raftmq: the node's certificate from files, the client trusting the CA, the access key and
secret key checked against raftmq's users; unknown topics auto-created when the node is configured to."""

from __future__ import annotations

import ssl

import grpc
import pytest

from raftmq.client.security import signed_headers
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.certs import CertificateAuthority
from tests.support.processes import NodeProcess, node_specs, stop_all
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.rocketmq5]

AK, SK = "rocketmq-admin", "admin-secret-1"


def test_tls_and_credentials(tmp_path, run_driver):
    ca = CertificateAuthority(tmp_path)
    server = ca.issue("node")
    security = {"tls_cert_file": str(server.cert), "tls_key_file": str(server.key), "auth_enabled": True,
                "auth_admin_access_key": AK, "auth_admin_secret_key": SK}
    [spec] = node_specs(tmp_path, 1, security=security, node={"auto_create_topics": True})
    node = NodeProcess(spec)
    node.http_context = ssl.create_default_context(cafile=str(ca.cert_file))
    try:
        node.start().wait_ready(90)
        env = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca.cert_file)}  # the client trusts system roots + this
        plan = {"endpoints": node.grpc_address, "topics": ["secure"], "tls": True, "ak": AK, "sk": SK,
                "steps": [{"op": "send", "topic": "secure", "body": f"s-{i}"} for i in range(3)]}
        lines = run_driver("producer.py", plan, env).all()
        sent = [x for x in lines if x["op"] == "send"]
        assert len(sent) == 3 and all(x["ok"] for x in sent), lines
        wrong_driver = run_driver("producer.py", {**plan, "sk": "not-the-secret"}, env)
        wrong = wrong_driver.all()
        refused = [x for x in wrong if x["op"] == "send"]
        assert refused and not any(x["ok"] for x in refused), wrong
        # the refusal reaches the client as RocketMQ's UNAUTHORIZED (40100) status, with our reason
        assert "40100, unauthenticated: signature does not match" in wrong_driver.client_log()
        # read back through raftmq's own API, over the same TLS port, signed
        channel = grpc.secure_channel(node.grpc_address, grpc.ssl_channel_credentials(ca.cert_file.read_bytes()))
        stub = pb_grpc.MessagingServiceStub(channel)

        def stored():
            md = signed_headers(AK, SK)
            got = []
            for q in stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic="secure"), metadata=md, timeout=10).queues:
                if q.max_offset > q.min_offset:
                    got += stub.PullMessage(pb.PullMessageRequest(topic="secure", queue_id=q.queue_id,
                                                                  offset=q.min_offset), metadata=md,
                                            timeout=10).messages
            return got if len(got) >= 3 else None

        got = wait_for(stored, "the 3 messages over TLS", timeout=30)
        assert sorted(m.uniq_key for m in got) == sorted(x["message_id"] for x in sent)
        # a user allowed to publish to one topic only: the rule is checked on the v2 request's topic
        acl = pb_grpc.AclServiceStub(channel)
        acl.PutAclUser(pb.PutAclUserRequest(access_key="alice", secret_key="alice-secret"),
                       metadata=signed_headers(AK, SK), timeout=10)
        acl.AddAclRule(pb.AddAclRuleRequest(access_key="alice", rule=pb.AclRule(
            effect="allow", actions=["PUB"], resources=["topic:secure"])), metadata=signed_headers(AK, SK), timeout=10)
        alice = {**plan, "ak": "alice", "sk": "alice-secret", "topics": ["secure", "other", "new"],
                 "steps": [{"op": "send", "topic": "secure", "body": "mine"},
                           {"op": "send", "topic": "other", "body": "not mine"},
                           {"op": "send", "topic": "new", "body": "no right to create it"}]}
        created = pb_grpc.AdminServiceStub(channel).CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(
            name="other")), metadata=signed_headers(AK, SK), timeout=10)
        assert created.topic.name == "other"
        mine, other, new = wait_for(lambda: _sends_once_rule_applied(run_driver, alice, env),
                                    "alice's rule in force", timeout=60)
        assert mine["ok"], mine
        assert not other["ok"] and "40300" in other["message"] and "may not PUB on topic:other" in other["message"]
        assert not new["ok"]  # a route does not auto-create a topic for a user who may not send to it
        topics = pb_grpc.AdminServiceStub(channel).ListTopics(pb.ListTopicsRequest(), metadata=signed_headers(AK, SK),
                                                             timeout=10)
        assert "new" not in {t.name for t in topics.topics}
        channel.close()
        assert "signature does not match" in spec.log_path.read_text(errors="replace")
    finally:
        stop_all([node])


def _sends_once_rule_applied(run_driver, plan, env):
    """Alice's two sends, once the first one passes (the rule reaches every member as it applies it)."""
    sends = [x for x in run_driver("producer.py", plan, env).all() if x["op"] == "send"]
    return sends if sends[0]["ok"] else None
