"""Signature parsing and verification, the replay window, rule decisions and the RPC access table."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.client.security import signed_headers
from raftmq.node.auth import (
    ACCESS,
    EXEMPT_PREFIXES,
    AccessDenied,
    Authenticator,
    AuthError,
    Principal,
    SecretBox,
    check_rule,
)
from raftmq.node.auth.rules import decide, required_access
from raftmq.node.auth.signing import parse_authorization
from raftmq.node.config import SecuritySection
from raftmq.replication.acl_table import AclTable
from raftmq.v1 import raftmq_pb2 as pb

NOW = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.UTC)


def _security(**kw) -> SecuritySection:
    base = {"auth_enabled": True, "auth_admin_access_key": "root", "auth_admin_secret_key": "root-secret-1"}
    return SecuritySection(**{**base, **kw})


@pytest.fixture
def table() -> AclTable:
    return AclTable(None)


@pytest.fixture
def auth(table) -> Authenticator:
    return Authenticator(_security(), lambda: table, clock=lambda: NOW)


def _add_user(auth: Authenticator, table: AclTable, ak: str, sk: str, *rules: dict, admin: bool = False) -> None:
    assert table.apply({"op": "user_put", "user": ak, "secret": auth.box.seal(sk), "admin": admin}) is None
    for r in rules:
        assert table.apply({"op": "rule_add", "user": ak, "rule": check_rule(r)}) is None


def test_the_signature_of_the_official_clients_is_what_we_send():
    # Value from RocketMQ's own authentication test (DefaultAuthenticationContextBuilderTest): the proxy reads
    # Signature=D18A... for date 20231227T194619Z; any case of hex is accepted.
    a = parse_authorization("MQv2-HMAC-SHA1 Credential=abc, SignedHeaders=x-mq-date-time, "
                            "Signature=D18A9CBCDDBA9041D6693268FEF15A989E64430B")
    assert (a.access_key, a.signature) == ("abc", "d18a9cbcddba9041d6693268fef15a989e64430b")
    # the Go / C++ clients append //Rocketmq to the credential
    assert parse_authorization("MQv2-HMAC-SHA1 Credential=abc//Rocketmq, SignedHeaders=x-mq-date-time, "
                               "Signature=" + "0" * 40).access_key == "abc"


def test_good_signature_is_accepted_for_bootstrap_admin_and_replicated_user(auth, table):
    assert auth.authenticate(signed_headers("root", "root-secret-1", NOW)) == Principal("root", True)
    _add_user(auth, table, "alice", "alice-secret")
    assert auth.authenticate(signed_headers("alice", "alice-secret", NOW)) == Principal("alice", False)


@pytest.mark.parametrize("headers,message", [
    (lambda: signed_headers("alice", "wrong-secret", NOW), "signature does not match for access key 'alice'"),
    (lambda: signed_headers("bob", "bob-secret", NOW), "unknown access key 'bob'"),
    (lambda: signed_headers("alice", "alice-secret", NOW - dt.timedelta(seconds=301)), "from this node's clock"),
    (lambda: signed_headers("alice", "alice-secret", NOW + dt.timedelta(seconds=400)), "from this node's clock"),
    (lambda: [], "requires signed requests and none was sent"),
])
def test_bad_credentials_are_refused_with_a_reason(auth, table, headers, message):
    _add_user(auth, table, "alice", "alice-secret")
    with pytest.raises(AuthError, match=message):
        auth.authenticate(headers())


def test_a_replayed_signature_stops_working_once_outside_the_window(table):
    clock = [NOW]
    auth = Authenticator(_security(auth_max_clock_skew_seconds=60), lambda: table, clock=lambda: clock[0])
    _add_user(auth, table, "alice", "alice-secret")
    captured = signed_headers("alice", "alice-secret", NOW)
    assert auth.authenticate(captured).access_key == "alice"  # now in the verification cache too
    clock[0] = NOW + dt.timedelta(seconds=61)
    with pytest.raises(AuthError, match="replayed request"):
        auth.authenticate(captured)


def test_deleted_user_and_changed_secret_stop_working(auth, table):
    """Also for headers verified (and cached) before the change: the table's version drops every cached verdict,
    on every member, not only on the one that served the change."""
    _add_user(auth, table, "alice", "alice-secret")
    headers = signed_headers("alice", "alice-secret", NOW)
    auth.authenticate(headers)
    auth.authorize(Principal("alice", False), "/raftmq.v1.AdminService/ListTopics", None)
    table.apply({"op": "user_put", "user": "alice", "secret": auth.box.seal("new-secret-1")})
    with pytest.raises(AuthError, match="does not match"):
        auth.authenticate(headers)
    table.apply({"op": "user_delete", "user": "alice"})
    with pytest.raises(AuthError, match="unknown access key"):
        auth.authenticate(signed_headers("alice", "new-secret-1", NOW))


def test_secrets_are_stored_sealed(auth, table):
    _add_user(auth, table, "alice", "alice-secret")
    stored = table.snapshot()["alice"]["secret"]
    assert "alice-secret" not in stored
    assert SecretBox("root-secret-1").open(stored) == "alice-secret"
    with pytest.raises(AuthError, match="cannot be decrypted"):
        SecretBox("another-admin-secret").open(stored)


_PRINTABLE = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=200)
_PIECES = st.sampled_from(["MQv2-HMAC-SHA1", " ", ",", "=", "Credential", "SignedHeaders", "Signature",
                           "x-mq-date-time", "abc", "//Rocketmq", "0" * 40, "g" * 40, ";", "\x00", "é"])


@settings(max_examples=400, deadline=None)
@given(auth_value=st.one_of(_PRINTABLE, st.binary(max_size=200), st.lists(_PIECES, max_size=20).map("".join),
                            st.none(), st.integers()),
       date_value=st.one_of(_PRINTABLE, st.binary(max_size=40), st.none(),
                            st.just("20261123T120000Z"), st.just("99999999T999999Z")),
       extra=st.lists(st.tuples(st.sampled_from(["authorization", "x-mq-date-time", "other"]),
                                st.one_of(_PRINTABLE, st.binary(max_size=30))), max_size=3))
def test_fuzzed_metadata_is_always_an_auth_error_never_a_crash(auth_value, date_value, extra):
    auth = Authenticator(_security(), lambda: None, clock=lambda: NOW)
    metadata = [("authorization", auth_value), ("x-mq-date-time", date_value), *extra]
    with pytest.raises(AuthError):
        auth.authenticate(metadata)


def test_rules_deny_wins_prefix_and_literal_default_deny():
    rules = [check_rule({"effect": "allow", "actions": ["PUB", "SUB"], "resources": ["topic:orders-*"]}),
             check_rule({"effect": "deny", "actions": ["SUB"], "resources": ["topic:orders-secret"]}),
             check_rule({"effect": "allow", "actions": ["SUB"], "resources": ["group:billing"]})]
    assert decide(rules, "PUB", "topic", "orders-eu", "deny")
    assert decide(rules, "SUB", "topic", "orders-eu", "deny")
    assert not decide(rules, "SUB", "topic", "orders-secret", "deny")      # deny wins
    assert decide(rules, "PUB", "topic", "orders-secret", "deny")          # deny was for SUB only
    assert not decide(rules, "PUB", "topic", "orders", "deny")              # prefix "orders-" does not match
    assert decide(rules, "SUB", "group", "billing", "deny")
    assert not decide(rules, "SUB", "group", "billing2", "deny")            # literal
    assert not decide(rules, "ADMIN", "topic", "orders-eu", "deny")
    assert decide(rules, "ADMIN", "topic", "orders-eu", "allow")            # acl_default allow


@pytest.mark.parametrize("rule,message", [
    ({"effect": "maybe", "actions": ["PUB"], "resources": ["topic:a"]}, "allow or deny"),
    ({"effect": "allow", "actions": ["READ"], "resources": ["topic:a"]}, "PUB, SUB, ADMIN"),
    ({"effect": "allow", "actions": ["PUB"], "resources": ["queue:a"]}, "bad resource"),
    ({"effect": "allow", "actions": ["PUB"], "resources": ["topic:a*b"]}, "bad resource"),
    ({"effect": "allow", "actions": ["PUB"], "resources": []}, "at least one resource"),
])
def test_bad_rules_are_refused(rule, message):
    with pytest.raises(ValueError, match=message):
        check_rule(rule)


def test_every_client_rpc_is_in_the_access_table():
    """A new RPC must be registered in node.auth.ACCESS (unlisted ones are admin-only, but say so in review)."""
    from raftmq.rocketmq.v2 import service_pb2 as v2s  # issue 13: the RocketMQ 5 service is served too

    methods = {f"/{svc.full_name}/{m.name}" for proto in (pb.DESCRIPTOR, v2s.DESCRIPTOR)
               for svc in proto.services_by_name.values() for m in svc.methods}
    missing = {m for m in methods if m not in ACCESS and not m.startswith(EXEMPT_PREFIXES)}
    assert not missing, f"add these RPCs to node.auth.ACCESS: {sorted(missing)}"
    assert not set(ACCESS) - methods, "ACCESS names RPCs that do not exist"


def test_required_access_reads_the_rocketmq5_request_fields():
    from raftmq.rocketmq.v2 import definition_pb2 as v2
    from raftmq.rocketmq.v2 import service_pb2 as v2s

    send = v2s.SendMessageRequest(messages=[v2.Message(topic=v2.Resource(name="a")),
                                            v2.Message(topic=v2.Resource(name="b"))])
    assert required_access("/apache.rocketmq.v2.MessagingService/SendMessage", send) == [("PUB", "topic", "a"),
                                                                                          ("PUB", "topic", "b")]
    receive = v2s.ReceiveMessageRequest(group=v2.Resource(name="g"),
                                        message_queue=v2.MessageQueue(topic=v2.Resource(name="t")))
    assert required_access("/apache.rocketmq.v2.MessagingService/ReceiveMessage", receive) == [
        ("SUB", "topic", "t"), ("SUB", "group", "g")]


def test_required_access_reads_the_request_fields():
    send = pb.SendBatchRequest(messages=[pb.Message(topic="a"), pb.Message(topic="b"), pb.Message(topic="a")])
    assert required_access("/raftmq.v1.MessagingService/SendBatch", send) == [("PUB", "topic", "a"),
                                                                               ("PUB", "topic", "b")]
    pull = pb.PullMessageRequest(topic="t", consumer_group="")
    assert required_access("/raftmq.v1.MessagingService/PullMessage", pull) == [("SUB", "topic", "t")]
    view = pb.ViewMessageRequest(msg_id="x")
    assert required_access("/raftmq.v1.MessagingService/ViewMessage", view) == [("SUB", "topic", "*")]
    assert required_access("/raftmq.v1.FutureService/NewCall", None) == [("ADMIN", "cluster", "")]


# every action x allowed / denied, through the same function the interceptor calls
_CASES = [
    ("/raftmq.v1.MessagingService/SendMessage", pb.SendMessageRequest(message=pb.Message(topic="t1")),
     {"effect": "allow", "actions": ["PUB"], "resources": ["topic:t1"]}, "PUB", "topic:t1"),
    ("/raftmq.v1.MessagingService/PullMessage", pb.PullMessageRequest(topic="t1", consumer_group="g1"),
     {"effect": "allow", "actions": ["SUB"], "resources": ["topic:t1", "group:g1"]}, "SUB", "topic:t1"),
    ("/raftmq.v1.MessagingService/CommitOffset", pb.CommitOffsetRequest(topic="t1", group="g1"),
     {"effect": "allow", "actions": ["SUB"], "resources": ["topic:t*", "group:g*"]}, "SUB", "topic:t1"),
    ("/raftmq.v1.AdminService/CreateTopic", pb.CreateTopicRequest(topic=pb.TopicConfig(name="t1")),
     {"effect": "allow", "actions": ["ADMIN"], "resources": ["topic:t1"]}, "ADMIN", "topic:t1"),
    ("/raftmq.v1.AdminService/DeleteTopic", pb.DeleteTopicRequest(name="t1"),
     {"effect": "allow", "actions": ["ADMIN"], "resources": ["topic:*"]}, "ADMIN", "topic:t1"),
    ("/raftmq.v1.AdminService/TransferLeader", pb.TransferLeaderRequest(),
     {"effect": "allow", "actions": ["ADMIN"], "resources": ["cluster"]}, "ADMIN", "cluster"),
    ("/raftmq.v1.AclService/PutAclUser", pb.PutAclUserRequest(access_key="x"),
     {"effect": "allow", "actions": ["ADMIN"], "resources": ["cluster"]}, "ADMIN", "cluster"),
]


@pytest.mark.parametrize("method,request_,rule,action,resource", _CASES, ids=[c[0].rsplit("/", 1)[1] for c in _CASES])
def test_each_action_allowed_with_a_rule_and_denied_without(auth, table, method, request_, rule, action, resource):
    _add_user(auth, table, "alice", "alice-secret")
    alice = Principal("alice", False)
    with pytest.raises(AccessDenied) as denied:
        auth.authorize(alice, method, request_)
    assert (denied.value.user, denied.value.action, denied.value.resource) == ("alice", action, resource)
    assert "alice" in str(denied.value) and action in str(denied.value) and resource in str(denied.value)
    table.apply({"op": "rule_add", "user": "alice", "rule": check_rule(rule)})
    auth.authorize(alice, method, request_)  # the cached "denied" verdict went with the table's version
    auth.authorize(alice, method, request_)  # and the cached "allowed" one is used
    table.apply({"op": "rule_add", "user": "alice",
                 "rule": check_rule({**rule, "effect": "deny", "actions": [action]})})
    with pytest.raises(AccessDenied):
        auth.authorize(alice, method, request_)


def test_a_refusal_names_the_deny_rule_that_matched_not_an_allow_that_cannot_work(auth, table):
    """issue 34: with a deny rule matching, the hint suggested adding an allow, which a deny always beats."""
    _add_user(auth, table, "bob", "bob-secret-1",
              {"effect": "allow", "actions": ["SUB"], "resources": ["topic:*"]},
              {"effect": "deny", "actions": ["SUB", "PUB"], "resources": ["topic:payroll*"]})
    with pytest.raises(AccessDenied) as denied:
        auth.authorize(Principal("bob", False), "/raftmq.v1.MessagingService/PullMessage",
                       pb.PullMessageRequest(topic="payroll-2026"))
    text = str(denied.value)
    assert "its rule 1 denies it (deny SUB,PUB on topic:payroll*)" in text, text
    assert "raftmq acl policy remove bob 1" in text and "--allow" not in text, text


def test_a_lookup_without_a_topic_suggests_naming_it(auth, table):
    """issue 34: `raftmq view MSGID` for a user allowed a prefix of topics asked for SUB on topic:*; the hint
    must suggest --topic (a lookup that names the topic needs only that topic)."""
    _add_user(auth, table, "ann", "ann-secret-1", {"effect": "allow", "actions": ["SUB"], "resources": ["topic:o-*"]})
    ann = Principal("ann", False)
    with pytest.raises(AccessDenied) as denied:
        auth.authorize(ann, "/raftmq.v1.MessagingService/ViewMessage", pb.ViewMessageRequest(msg_id="AB" * 16))
    text = str(denied.value)
    assert "may not SUB on topic:*" in text and "`raftmq view MSGID --topic TOPIC`" in text, text
    auth.authorize(ann, "/raftmq.v1.MessagingService/ViewMessage", pb.ViewMessageRequest(msg_id="AB" * 16,
                                                                                        topic="o-1"))


def test_admin_user_may_do_everything(auth, table):
    _add_user(auth, table, "ops", "ops-secret-1", admin=True)
    for method, request_, *_ in _CASES:
        auth.authorize(Principal("ops", True), method, request_)


def test_acl_table_survives_a_restart_and_keeps_refusals_deterministic(tmp_path):
    path = str(tmp_path / "acl.json")
    t = AclTable(path)
    assert t.apply({"op": "rule_add", "user": "ghost", "rule": {}}).startswith("no user")
    assert t.apply({"op": "user_put", "user": "a", "secret": "tok"}) is None
    assert t.apply({"op": "rule_remove", "user": "a", "index": 0}) == "user 'a' has 0 rule(s); there is no rule 0"
    t.persist()
    assert AclTable(path).snapshot() == {"a": {"secret": "tok", "admin": False, "rules": [], "networks": []}}


def test_a_refusal_never_rides_on_a_catch_up_that_started_before_it(table):
    """Refusals at once share one catch-up with the leader, but one already running may have read the leader's
    commit index before the change the caller saw acknowledged: a later refusal waits for a fresh one."""
    async def scenario() -> list[str]:
        runs: list[str] = []
        gates: list[asyncio.Event] = []

        async def catch_up() -> bool:
            gate = asyncio.Event()
            gates.append(gate)
            runs.append("started")
            await gate.wait()
            return True

        auth = Authenticator(_security(), lambda: table, clock=lambda: NOW, catch_up=catch_up)
        first = asyncio.ensure_future(auth.caught_up())
        await asyncio.sleep(0)
        later = [asyncio.ensure_future(auth.caught_up()) for _ in range(3)]  # decided while run 1 is going
        await asyncio.sleep(0)
        gates[0].set()
        assert await first is True
        await asyncio.sleep(0)
        assert not any(t.done() for t in later), "a refusal decided during run 1 was answered by run 1"
        assert len(gates) == 2  # the three later refusals share run 2
        gates[1].set()
        assert await asyncio.gather(*later) == [True] * 3
        return runs

    assert asyncio.run(scenario()) == ["started", "started"]


def test_without_a_leader_to_catch_up_with_the_refusal_stands(auth, table):
    assert asyncio.run(auth.caught_up()) is False


def test_a_signed_http_request_is_decided_again_after_catching_up(auth, table):
    headers = dict(signed_headers("alice", "alice-secret", NOW))
    status, reason = auth.check_http("/ui", headers, "10.0.0.7")
    assert (status, "unknown access key 'alice'" in reason) == (401, True)

    def catch_up() -> bool:  # what applying the leader's committed entries brings to this member
        _add_user(auth, table, "alice", "alice-secret")
        return True

    assert auth.check_http("/ui", headers, "10.0.0.7", catch_up) is None
    assert auth.check_http("/ui", dict(signed_headers("alice", "wrong-secret", NOW)), "10.0.0.7",
                           lambda: True)[0] == 401


def test_acl_marks_record_cluster_wide_changes_and_user_set_copies_a_record(tmp_path):
    """issue 37: a change carrying ``mark`` is remembered per user (a delete as deleted) in acl.json, for the
    settings reconcile pass; ``user_set`` replaces a whole record; a table without marks keeps its file shape."""
    import json

    path = str(tmp_path / "acl.json")
    t = AclTable(path)
    assert t.apply({"op": "user_put", "user": "alice", "secret": "s1", "admin": False}) is None
    t.persist()
    assert "marks" not in json.loads(open(path).read())
    t.apply({"op": "user_put", "user": "bob", "secret": "s2", "admin": False, "mark": 1000})
    t.apply({"op": "user_delete", "user": "bob", "mark": 2000})
    rec = {"secret": "s3", "admin": True, "rules": [{"effect": "allow", "actions": ["PUB"], "resources": ["*"]}],
           "networks": ["10.0.0.0/8"]}
    assert t.apply({"op": "user_set", "user": "carol", "record": rec, "mark": 3000}) is None
    assert t.marks() == {"bob": (True, 2000), "carol": (False, 3000)}
    assert t.snapshot_user("carol") == rec
    t.persist()
    again = AclTable(path)
    assert again.marks() == t.marks() and again.snapshot() == t.snapshot()
    other = AclTable(None)
    other.restore_marks(t.snapshot_marks())
    assert other.marks() == t.marks()
