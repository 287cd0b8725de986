"""The accumulator builds SendStreamRequest bytes from each send's serialized messages: they must parse to
exactly the request built field by field, for any id and message size (multi-byte lengths included)."""

from __future__ import annotations

import pytest

from raftmq.client.accumulator import _Send, encode_request
from raftmq.v1 import raftmq_pb2 as pb


def _msg(i: int, size: int) -> pb.Message:
    m = pb.Message(topic="T", body=bytes([i % 251]) * size, tags="a", keys=["k1", "k2"],
                   properties={"p": str(i), "q": "x" * (i % 5)}, born_timestamp=1_700_000_000_000 + i,
                   uniq_key=f"U{i:030d}", delay_level=i % 3)
    if i % 2:
        m.queue_id = i % 7
    return m


@pytest.mark.parametrize("request_id", [0, 1, 127, 128, 300, 2**32 + 5, 2**63 - 1])
@pytest.mark.parametrize("sizes", [[0], [1, 127, 128], [16383, 16384, 70_000], [5] * 40])
def test_encoded_request_parses_to_the_same_request(request_id, sizes):
    sends = [[_msg(i, n)] if j % 3 else [_msg(i, n), _msg(i + 1, n // 2)] for j, (i, n) in enumerate(
        zip(range(len(sizes)), sizes, strict=True))]
    wire = encode_request(request_id, [_Send(ms).item for ms in sends])
    expected = pb.SendStreamRequest(id=request_id, sends=[pb.SendStreamItem(messages=ms) for ms in sends])
    assert pb.SendStreamRequest.FromString(wire) == expected
