"""`raftmq produce --count`: how a load accounts for each send's outcome and what --on-unknown does, against a
real gRPC server on loopback that answers as scripted (the failover itself: test_produce_failover_e2e)."""

from __future__ import annotations

import json

import grpc

from raftmq.client.cli import run
from raftmq.v1 import raftmq_pb2 as pb
from tests.client.scripted_server import Abort

UNKNOWN = Abort(grpc.StatusCode.UNKNOWN, "outcome unknown: leadership changed")


def ok_send(request, duplicate: bool = False):
    m = request.message
    return pb.SendMessageResponse(result=pb.SendResult(msg_id="7F00000100002A9F0000000000000000",
                                                       uniq_key=m.uniq_key, topic=m.topic, queue_id=1,
                                                       duplicate=duplicate))


def duplicate_send(request):
    """The broker's answer to a re-send of a message it had stored (de-duplication)."""
    return ok_send(request, duplicate=True)


def _load(capsys, address: str, *extra: str) -> tuple[int, dict, str]:
    code = run(["produce", "T", "--count", "5", "--json", "-s", address, *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out.strip().splitlines()[-1]), err


def test_count_goes_on_after_an_unknown_outcome(scripted, capsys):
    s = scripted()
    s.push("SendMessage", UNKNOWN, ok_send, UNKNOWN)
    s.defaults["SendMessage"] = ok_send
    code, summary, err = _load(capsys, s.address, "--on-unknown", "count")
    keys = [r.message.uniq_key for r in s.received["SendMessage"]]
    assert code == 7, err
    assert (summary["ok"], summary["unknown"], summary["failed"], summary["retried"]) == (3, 2, 0, 0)
    assert summary["unknown_uniq_keys"] == [keys[0], keys[2]] and len(keys) == 5
    assert "2 message(s) with unknown outcome" in err


def test_retry_is_the_default_and_resends_the_same_uniq_key_counting_duplicates_avoided(scripted, capsys):
    s = scripted()
    s.push("SendMessage", UNKNOWN, UNKNOWN, duplicate_send)   # stored by the first try, recognised by the third
    s.defaults["SendMessage"] = ok_send
    code, summary, err = _load(capsys, s.address)
    keys = [r.message.uniq_key for r in s.received["SendMessage"]]
    assert code == 0, err
    assert summary["on_unknown"] == "retry" and len(keys) == 7 and keys[0] == keys[1] == keys[2]
    assert len(set(keys)) == 5
    assert (summary["ok"], summary["unknown"], summary["duplicates_avoided"]) == (5, 0, 1)
    assert summary["unknown_uniq_keys"] == []


def test_stop_ends_the_load_at_the_first_unknown(scripted, capsys):
    s = scripted()
    s.push("SendMessage", ok_send, UNKNOWN)
    s.defaults["SendMessage"] = ok_send
    code, summary, err = _load(capsys, s.address, "--on-unknown", "stop")
    assert code == 7, err
    assert (summary["ok"], summary["unknown"], summary["not_sent"]) == (1, 1, 3)


def test_refusals_are_resent_then_counted_failed(scripted, capsys):
    s = scripted()
    s.defaults["SendMessage"] = Abort(grpc.StatusCode.UNAVAILABLE, "node n0 is not ready (starting); retry shortly")
    code = run(["produce", "T", "--count", "1", "--json", "--timeout", "0.2", "-s", s.address])
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert code == 5, err
    assert (summary["ok"], summary["failed"], summary["retried"]) == (0, 1, 3)


def test_human_summary_names_counts_and_the_longest_gap(scripted, capsys):
    s = scripted()
    s.push("SendMessage", UNKNOWN)
    s.defaults["SendMessage"] = ok_send
    code = run(["produce", "T", "--count", "3", "--on-unknown", "count", "-s", s.address])
    out, err = capsys.readouterr()
    assert code == 7
    assert "ok 2, unknown 1, failed 0, retried 0; longest gap without an ack" in out
    assert s.received["SendMessage"][0].message.uniq_key in out


def test_on_unknown_needs_a_load(capsys):
    assert run(["produce", "T", "--body", "x", "--on-unknown", "retry"]) == 2


def test_human_summary_names_the_duplicates_avoided(scripted, capsys):
    s = scripted()
    s.push("SendMessage", UNKNOWN, duplicate_send)
    s.defaults["SendMessage"] = ok_send
    code = run(["produce", "T", "--count", "3", "-s", s.address])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "ok 3, unknown 0, failed 0, retried 0, duplicates avoided 1; longest gap" in out
