"""``node.log_format: json``: every line of a real node's log is one JSON object with its member id and Raft term,
and lines written inside a gRPC call carry that call's request id (the caller's ``x-request-id``)."""

from __future__ import annotations

import json

import grpc
import pytest

from raftmq.node.config import ConfigError, load_config
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pb_grpc
from tests.support.processes import running_nodes
from tests.support.waiting import wait_for


def test_json_log_lines_carry_member_term_and_request_id(tmp_path):
    with running_nodes(tmp_path, 3, node={"log_format": "json", "log_level": "DEBUG"}) as nodes:
        n0 = nodes[0]
        stub = pb_grpc.AdminServiceStub(n0.channel())
        stub.ListTopics(pb.ListTopicsRequest(), timeout=10, metadata=(("x-request-id", "drill-42"),))
        with pytest.raises(grpc.RpcError) as e:
            stub.CreateTopic(pb.CreateTopicRequest(topic=pb.TopicConfig(name="bad name!")), timeout=10)
        sent_back = dict(e.value.trailing_metadata() or ())
        assert sent_back.get("x-request-id")  # an id the user can quote, made up when the caller sent none
        path = n0.spec.log_path

        def lines():
            return [line for line in path.read_text().splitlines() if line.strip()]

        wait_for(lambda: any("drill-42" in line for line in lines()), "the request's log line")
    records = [json.loads(line) for line in lines()]  # every line is JSON: a text line fails here
    assert {r["member"] for r in records} == {"n0"}
    assert all({"ts", "level", "logger", "msg", "term"} <= set(r) for r in records)
    assert any(isinstance(r["term"], int) and r["term"] > 0 for r in records)
    ours = [r for r in records if r.get("request_id") == "drill-42"]
    assert ours and "ListTopics" in ours[0]["msg"]
    assert any(r.get("request_id") == sent_back["x-request-id"] for r in records)


def test_unknown_log_format_is_refused():
    with pytest.raises(ConfigError) as e:
        load_config(None, environ={}, assignments=["node.log_format=xml"])
    assert "node.log_format" in e.value.problems[0]
