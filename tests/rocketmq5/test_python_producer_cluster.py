"""The official RocketMQ 5 Python Producer against a 3-member raftmq group: the client knows only its access
point (the members' addresses); followers relay its writes to the leader, a leader SIGKILL mid-stream loses no
acknowledged message, and what it sent is readable by raftmq's own CLI (issue 13)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.rocketmq5.raftmq_side import create_topic, leader_of, read_keys
from tests.support.metrics import samples
from tests.support.processes import REPO_ROOT, running_nodes
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.rocketmq5]

STORE = {"transaction_timeout_ms": 1000, "transaction_check_interval_ms": 300}


def _plan(nodes, topics, steps, **kw):
    return {"endpoints": ";".join(n.grpc_address for n in nodes), "topics": topics, "steps": steps, **kw}


def _consume_with_cli(node, topic: str, expected: int, credentials=None) -> list[dict]:
    env = {"PYTHONPATH": str(REPO_ROOT / "proto"), "PATH": "/usr/bin:/bin"}
    if credentials:
        env["RAFTMQ_ACCESS_KEY"], env["RAFTMQ_SECRET_KEY"] = credentials
    out = subprocess.run([sys.executable, "-m", "raftmq.client", "--server", node.grpc_address, "consume", "cli",
                          topic, "--from-beginning", "--max", str(expected), "--idle-timeout", "20", "--json"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


AUTH = ("mq-admin", "mq-admin-secret")


@pytest.mark.parametrize("auth", [False, True], ids=["open", "signed"])
def test_sends_and_transactions_through_any_member_are_readable_by_raftmqs_cli(tmp_path, run_driver, auth):
    """With authentication on, what a follower does on the client's behalf (relayed sends and ends, the
    transaction-check stream to the leader) carries the client's own credentials and passes the leader's checks."""
    creds = AUTH if auth else None
    extra = {"security": {"auth_enabled": True, "auth_admin_access_key": AUTH[0], "auth_admin_secret_key": AUTH[1]},
             "cluster": {"secret": "cluster-secret"}} if auth else {}
    with running_nodes(tmp_path, 3, store=STORE, **extra) as nodes:
        create_topic(leader_of(nodes, creds), "orders", credentials=creds, message_type="MIXED")  # every kind
        # the client's channel goes to the first address that answers: put a follower first, so every call
        # (sends, telemetry, transaction ends, checker answers) goes through a member that relays to the leader
        leader = leader_of(nodes, creds)
        followers = [n for n in nodes if n is not leader]
        steps = [{"op": "send", "topic": "orders", "body": f"m-{i}", "tag": "T", "keys": [f"k{i}"]} for i in range(5)]
        steps += [{"op": "send", "topic": "orders", "body": f"fifo-{i}", "group": "g"} for i in range(3)]
        steps += [{"op": "tx", "topic": "orders", "body": "tx-commit", "end": "commit"},
                  {"op": "tx", "topic": "orders", "body": "tx-rollback", "end": "rollback"},
                  {"op": "tx", "topic": "orders", "body": "tx-orphan", "end": "none"},
                  {"op": "wait_checks", "body": "tx-orphan", "timeout": 60},
                  {"op": "sleep", "seconds": 1}]
        checker = {"tx-commit": "commit", "tx-rollback": "rollback", "tx-orphan": "commit"}  # as the client does
        plan = _plan(followers, ["orders"], steps, checker=checker, **({"ak": AUTH[0], "sk": AUTH[1]} if auth else {}))
        lines = run_driver("producer.py", plan).all()
        sent = [x for x in lines if x["op"] in ("send", "tx")]
        assert all(x["ok"] for x in sent), lines
        assert next(x for x in lines if x["op"] == "wait_checks")["ok"], lines
        visible = [x["message_id"] for x in sent if x.get("op") == "send"] + [sent[5 + 3]["message_id"],
                                                                              sent[5 + 3 + 2]["message_id"]]
        for n in nodes:  # every member has them (each runs its own reput over the same commit log)
            read_keys(n, "orders", visible, credentials=creds)
        consumed = _consume_with_cli(followers[0], "orders", len(visible), creds)
        assert sorted(m["uniq_key"] for m in consumed) == sorted(visible)
        assert "tx-rollback" not in {m["body"] for m in consumed}


def _lead_from(nodes, wanted, avoid=None):
    """Make ``wanted`` the leader (or, with ``avoid``, any member but it); returns the leader."""
    from raftmq.v1 import raftmq_pb2 as pb
    from raftmq.v1 import raftmq_pb2_grpc as pb_grpc

    def settled():
        leader = leader_of(nodes)
        return leader if (leader is wanted if wanted else leader is not avoid) else None

    leader = leader_of(nodes)
    if not settled():
        to = wanted.spec.id if wanted else next(n for n in nodes if n is not avoid).spec.id
        pb_grpc.AdminServiceStub(leader.channel()).TransferLeader(pb.TransferLeaderRequest(to_id=to), timeout=30)
    return wait_for(settled, "the leadership transfer", timeout=60)


@pytest.mark.parametrize("client_on", ["leader", "follower"])
def test_a_leader_sigkill_mid_stream_loses_no_acknowledged_send(tmp_path, run_driver, client_on):
    """The client's one channel goes to the first of its addresses in sorted order (gRPC pick-first): that
    member is made the leader and killed (the channel must move on), or a follower relaying to the leader that
    is killed (the relay must follow the new leader)."""
    with running_nodes(tmp_path, 3) as nodes:
        first = min(nodes, key=lambda n: n.grpc_address)
        leader = _lead_from(nodes, first) if client_on == "leader" else _lead_from(nodes, None, avoid=first)
        create_topic(leader, "stream")
        d = run_driver("producer.py", _plan(nodes, ["stream"], [
            {"op": "stream", "topic": "stream", "count": 300, "prefix": "s"}], request_timeout=5))
        d.until("started", timeout=60)
        acked = []
        while len(acked) < 40:
            line = d.until("stream", timeout=60)
            if line["ok"]:
                acked.append(line)
        leader.kill()
        rest = d.all(timeout=300)
        acked += [x for x in rest if x["op"] == "stream" and x["ok"]]
        failed = [x for x in rest if x["op"] == "stream" and not x["ok"]]
        survivors = [n for n in nodes if n is not leader]
        print(f"acknowledged {len(acked)}, refused {len(failed)} (e.g. {failed[:1]})")
        assert len(acked) > 40 + len(failed), (len(acked), failed[:5])  # the stream went on after the kill
        new_leader = leader_of(survivors)
        stored = read_keys(new_leader, "stream", [x["message_id"] for x in acked], timeout=60)
        by_body = {m.body.decode() for m in stored.values()}
        assert {x["body"] for x in acked} <= by_body
        assert len({(m.queue_id, m.queue_offset) for m in stored.values()}) == len(stored)


def test_a_followers_streaming_call_is_relayed_to_the_leader(shared_cluster):
    """ReceiveMessage (a server stream) reaching a follower is answered by the leader through the follower: the
    relay the consumer side builds on (node.rocketmq5.calls.v2_stream)."""
    from raftmq.rocketmq.v2 import definition_pb2 as v2
    from raftmq.rocketmq.v2 import service_pb2 as v2s
    from raftmq.rocketmq.v2 import service_pb2_grpc as v2_grpc

    nodes = shared_cluster
    leader = leader_of(nodes)
    follower = next(n for n in nodes if n is not leader)
    relayed, served = _receive_calls(follower, forwarded=True), _receive_calls(leader, forwarded=False)
    request = v2s.ReceiveMessageRequest(group=v2.Resource(name="g"), message_queue=v2.MessageQueue(
        topic=v2.Resource(name="t")))
    answers = list(v2_grpc.MessagingServiceStub(follower.channel()).ReceiveMessage(
        request, metadata=(("x-mq-client-id", "test@1@0@x"),), timeout=10))
    assert len(answers) == 1 and answers[0].status.code != v2.CODE_UNSPECIFIED
    assert _receive_calls(follower, forwarded=True) > relayed, "the follower did not relay the stream"
    assert _receive_calls(leader, forwarded=False) > served, "the leader did not answer it"


def _receive_calls(node, forwarded: bool) -> float:
    """rmq5.ReceiveMessage calls ``node`` counted, relayed to the leader (code FORWARDED) or answered itself."""
    return sum(s.value for s in samples(node) if s.name.endswith(("_total", "_count"))
               and s.labels.get("method") == "rmq5.ReceiveMessage" and (s.labels.get("code") == "FORWARDED") == forwarded)
