import pytest

from raftmq.client.commands.cluster import cluster_table
from raftmq.client.errors import InvalidArgumentError
from raftmq.client.table import render_table
from raftmq.client.tags import format_tag_expression, parse_tag_expression
from raftmq.client.types import ClusterStatus, MemberStatus


@pytest.mark.parametrize("expr,tags", [
    (None, None), ("", None), ("*", None), ("  * ", None),
    ("A", ["A"]), ("A||B", ["A", "B"]), (" A || B ||  C ", ["A", "B", "C"]), ("A || || B", ["A", "B"]),
    ("A || A", ["A"]), ("tag with space", ["tag with space"]),
])
def test_parse_tag_expression(expr, tags):
    assert parse_tag_expression(expr) == tags


@pytest.mark.parametrize("bad", ["A | B", "A || *", "||", " || || ", "A ||| B"])
def test_bad_tag_expressions_say_what_to_fix(bad):
    with pytest.raises(InvalidArgumentError) as exc_info:
        parse_tag_expression(bad)
    assert repr(bad) in str(exc_info.value)


def test_format_tag_expression():
    assert format_tag_expression(None) == "*"
    assert format_tag_expression("*") == "*"
    assert format_tag_expression("A||B") == "A || B"
    assert format_tag_expression(["A", "B", "A"]) == "A || B"
    assert format_tag_expression([]) == "*"


def test_render_table_aligns_numbers_right_and_text_left():
    out = render_table(["Name", "Count"], [["a", 5], ["longer", 12345], ["c", None]], title="T")
    lines = out.splitlines()
    assert lines[0].startswith("+ T ")
    assert len({len(line) for line in lines}) == 1, "every line has the same width"
    assert "| a      |     5 |" in lines
    assert "| longer | 12345 |" in lines
    assert "| c      |       |" in lines


def test_render_table_title_longer_than_table():
    out = render_table(["A"], [["x"]], title="a very long title indeed")
    assert out.splitlines()[0] == "+ a very long title indeed +"


def test_cluster_table_has_every_column_and_member():
    members = [
        MemberStatus("n1", "127.0.0.1:8082", "127.0.0.1:8092", "follower", 3, 41, 41, 1000, 0, 24, True, True),
        MemberStatus("n0", "127.0.0.1:8081", "127.0.0.1:8091", "leader", 3, 42, 42, 1024, 7, 0, True, True),
        MemberStatus("n2", "127.0.0.1:8083", "127.0.0.1:8093", "unreachable", 0, 0, 0, 0, 0, 0, False, False,
                     "connection refused"),
    ]
    out = cluster_table(ClusterStatus("DefaultCluster", "n0", "sync", members))
    lines = out.splitlines()
    assert lines[0].startswith("+ Cluster: DefaultCluster (leader: n0, durability: sync) ")
    header = lines[1]
    for col in ("Member", "Address", "Role", "Term", "Commit index", "Applied offset", "Dispatch behind",
                "Lag", "State"):
        assert col in header
    rows = [line for line in lines if line.startswith("| n")]
    assert [r.split("|")[1].strip() for r in rows] == ["n0", "n1", "n2"]
    leader = [c.strip() for c in rows[0].split("|")[1:-1]]
    assert leader == ["n0", "127.0.0.1:8081", "Leader", "3", "42", "1024", "7", "0", "running"]
    assert "unreachable: connection refused" in rows[2]
    assert [c.strip() for c in rows[2].split("|")[4:9]] == ["-"] * 5  # unknown, not a fake zero lag


def test_message_json_keeps_binary_bodies_intact():
    import base64
    import json

    from raftmq.client.commands.output import message_json
    from raftmq.client.types import MessageView

    def view(body: bytes) -> MessageView:
        return MessageView("ID", "UK", "T", 0, 1, 2, 3, body, "", [], {}, 0, "", 0, "")

    assert json.loads(json.dumps(message_json(view("héllo".encode()))))["body"] == "héllo"
    binary = message_json(view(b"\xff\x00\xfe"))
    assert "body" not in binary and base64.b64decode(binary["body_base64"]) == b"\xff\x00\xfe"
