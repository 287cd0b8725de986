"""Malformed credentials sent over a real gRPC connection: every one is UNAUTHENTICATED, the node keeps serving."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftmq.client.security import signed_headers
from raftmq.v1 import raftmq_pb2 as pb
from raftmq.v1 import raftmq_pb2_grpc as pbg
from tests.support.processes import running_nodes

# what gRPC lets a client put in a metadata value: printable ASCII
_ASCII = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=120)
_PIECES = st.lists(st.sampled_from(["MQv2-HMAC-SHA1 ", "Credential=", "root", "//Rocketmq", ", ", "SignedHeaders=",
                                    "x-mq-date-time", "Signature=", "0" * 40, "=", ";", " "]), max_size=12).map("".join)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    security = {"auth_enabled": True, "auth_admin_access_key": "root", "auth_admin_secret_key": "root-secret-1"}
    with running_nodes(tmp_path_factory.mktemp("fuzz"), 1, security=security) as [n]:
        yield n


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(auth_value=st.one_of(_ASCII, _PIECES), date_value=st.one_of(_ASCII, st.just("20261123T120000Z")),
       with_date=st.booleans())
def test_malformed_metadata_is_unauthenticated(node, auth_value, date_value, with_date):
    stub = pbg.AdminServiceStub(node.channel())
    metadata = [("authorization", auth_value)] + ([("x-mq-date-time", date_value)] if with_date else [])
    with pytest.raises(grpc.RpcError) as err:
        stub.ListTopics(pb.ListTopicsRequest(), metadata=metadata, timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, err.value.details()
    assert err.value.details().startswith("unauthenticated: ")


def test_the_node_still_serves_a_good_signature_afterwards(node):
    stub = pbg.AdminServiceStub(node.channel())
    assert stub.ListTopics(pb.ListTopicsRequest(), metadata=signed_headers("root", "root-secret-1"),
                           timeout=10).topics is not None
    assert node.alive
