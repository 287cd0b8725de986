"""Rotating the bootstrap admin secret (security.auth_admin_secret_key), from which the key that seals users'
stored secrets is derived: a rolling restart with the previous secret kept, after which the leader re-encrypts
every user under the new key through the write path; a second rolling restart drops the old secret and every
user still authenticates on every member."""

from __future__ import annotations

import json

import pytest

from raftmq.client.admin import Admin
from raftmq.client.errors import PermissionDeniedError, RaftmqError, UnauthenticatedError
from raftmq.client.security import ClientSecurity
from raftmq.node.auth import AuthError, SecretBox
from raftmq.replication.acl_table import AclTable
from tests.support.processes import NodeProcess, node_specs, stop_all
from tests.support.waiting import wait_for

ROOT_AK = "root"
OLD, NEW = "old-admin-secret-1", "new-admin-secret-2"
USERS = {"reader": "reader-secret-1", "writer": "writer-secret-2", "ops": "ops-secret-333",
         "midway": "midway-secret-4"}
INITIAL = ("reader", "writer", "ops")
added: list[str] = []  # users that exist so far (the test adds "midway" during the rotation)


def test_secret_box_opens_the_previous_key_and_reseals_under_the_new_one():
    old_box = SecretBox(OLD)
    token = old_box.seal("s3cret-value")
    with pytest.raises(AuthError, match="auth_admin_previous_secret_key"):
        SecretBox(NEW).open(token)
    box = SecretBox(NEW, previous=OLD)
    assert box.open(token) == "s3cret-value" and not box.is_current(token)
    assert box.key_ids == [SecretBox(NEW).current_key_id, old_box.current_key_id]
    new = box.reseal(token)
    assert box.is_current(new) and SecretBox(NEW).open(new) == "s3cret-value"
    with pytest.raises(AuthError):
        old_box.open(new)
    mid_rotation = box.seal("added-meanwhile")  # sealed for members that still run the old secret
    assert old_box.open(mid_rotation) == "added-meanwhile" and not box.is_current(mid_rotation)
    assert SecretBox(NEW).is_current(SecretBox(NEW).seal("x"))


def test_reseal_is_compare_and_set_on_the_old_token():
    t = AclTable(None)
    t.apply({"op": "user_put", "user": "a", "secret": "tok1"})
    assert "changed since" in t.apply({"op": "user_reseal", "user": "a", "secret": "tok3", "old": "tok0"})
    assert t.apply({"op": "user_reseal", "user": "a", "secret": "tok2", "old": "tok1"}) is None
    assert t.snapshot_user("a")["secret"] == "tok2"
    assert "changed since" in t.apply({"op": "user_reseal", "user": "gone", "secret": "x", "old": "y"})


def _sec(ak: str, sk: str) -> ClientSecurity:
    return ClientSecurity(access_key=ak, secret_key=sk)


def _answer(node: NodeProcess, ak: str, sk: str) -> str:
    try:
        with Admin(node.grpc_address, timeout=5, retry_timeout=1, security=_sec(ak, sk)) as admin:
            admin.queue_offsets("orders")
        return "ok"
    except UnauthenticatedError as e:
        return f"unauthenticated: {e}"
    except PermissionDeniedError as e:
        return f"denied: {e}"
    except RaftmqError as e:
        return f"error: {e}"


def _every_user_everywhere(nodes: list[NodeProcess]) -> None:
    for n in nodes:
        for ak in added:
            sk = USERS[ak]
            wait_for(lambda n=n, ak=ak, sk=sk: _answer(n, ak, sk) == "ok", f"{ak} authenticated on {n.spec.id} "
                     f"(last answer: {_answer(n, ak, sk)})", timeout=60)


def _audit(nodes: list[NodeProcess]) -> list[dict]:
    return [json.loads(line.split("raftmq.audit", 1)[1].split("] ", 1)[1]) for n in nodes
            for line in n.spec.log_path.read_text().splitlines() if "raftmq.audit" in line]


def _rolling_restart(nodes: list[NodeProcess], security: dict, admin_secret_now: str, after_first=None) -> None:
    """Restart the members one by one with ``security``; after each, every user works on every member.
    ``after_first(node)`` runs once the first member is back."""
    for i, n in enumerate(nodes):
        n.stop()
        n.spec.overrides["security"].update(security)
        if "auth_admin_previous_secret_key" not in security:
            n.spec.overrides["security"].pop("auth_admin_previous_secret_key", None)
        n.start()
        n.wait_ready(90)
        if i == 0 and after_first is not None:
            after_first(n)
        _every_user_everywhere(nodes)
        assert _answer(n, ROOT_AK, admin_secret_now) == "ok"


def _add_user_on_a_rotated_leader(nodes: list[NodeProcess], first: NodeProcess) -> None:
    """Mid-rotation: the only member with the new key leads and a user is added; the members still on the old
    key must read it too."""
    addresses = [n.grpc_address for n in nodes]
    with Admin(addresses, security=_sec(ROOT_AK, OLD)) as admin:
        wait_for(lambda: _transfer(admin, first.spec.id), f"{first.spec.id} leading", timeout=60)
    from raftmq.client.acl import AclAdmin

    with AclAdmin(addresses, security=_sec(ROOT_AK, OLD)) as acl:
        acl.put_user("midway", USERS["midway"])
        acl.add_rule("midway", "allow", ["SUB"], ["topic:orders"])
    added.append("midway")


def _transfer(admin: Admin, to_id: str) -> bool:
    try:
        return admin.transfer_leader(to_id) == to_id
    except RaftmqError:
        return False


def test_rotating_the_admin_secret_on_a_live_cluster_keeps_every_user(tmp_path):
    added.clear()
    specs = node_specs(tmp_path, 3, cluster={"secret": "cluster-secret"}, security={
        "auth_enabled": True, "auth_admin_access_key": ROOT_AK, "auth_admin_secret_key": OLD})
    nodes = [NodeProcess(s) for s in specs]
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_ready(90)
        addresses = [n.grpc_address for n in nodes]
        from raftmq.client.acl import AclAdmin

        with Admin(addresses, security=_sec(ROOT_AK, OLD)) as admin:
            admin.create_topic("orders")
        with AclAdmin(addresses, security=_sec(ROOT_AK, OLD)) as acl:
            for ak in INITIAL:
                acl.put_user(ak, USERS[ak], admin=ak == "ops")
                added.append(ak)
                if ak != "ops":
                    acl.add_rule(ak, "allow", ["SUB"], ["topic:orders"])
        _every_user_everywhere(nodes)

        # round 1: the new secret, the old one kept as previous; the admin may sign with either meanwhile
        _rolling_restart(nodes, {"auth_admin_secret_key": NEW, "auth_admin_previous_secret_key": OLD}, NEW,
                         after_first=lambda first: _add_user_on_a_rotated_leader(nodes, first))
        assert all(_answer(n, ROOT_AK, OLD) == "ok" for n in nodes)
        resealed = wait_for(lambda: {a["user"] for a in _audit(nodes) if a.get("op") == "user_reseal"} >= set(USERS)
                            and {a["user"] for a in _audit(nodes) if a.get("op") == "user_reseal"},
                            "the leader re-encrypting every user under the new key", timeout=90)
        assert resealed == set(USERS)
        box = SecretBox(NEW)
        for n in nodes:  # every member's applied table holds tokens the new key alone opens
            wait_for(lambda n=n: all(box.is_current(rec["secret"]) for rec in json.loads(
                (n.spec.data_dir / "config" / "acl.json").read_text())["users"].values()),
                f"{n.spec.id}'s acl.json re-encrypted", timeout=60)
            assert set(json.loads((n.spec.data_dir / "config" / "acl.json").read_text())["users"]) == set(USERS)
        logs = "".join(n.spec.log_path.read_text() for n in nodes)
        assert OLD not in logs and NEW not in logs and not any(sk in logs for sk in USERS.values())

        # round 2: the previous secret removed; nothing depends on it any more
        _rolling_restart(nodes, {"auth_admin_secret_key": NEW}, NEW)
        assert all(_answer(n, ROOT_AK, OLD).startswith("unauthenticated") for n in nodes)
        with AclAdmin(addresses, security=_sec("ops", USERS["ops"])) as acl:  # a replicated admin still rules
            acl.put_user("late", "late-secret-1")
        for n in nodes:  # sealed under the new key alone once the rotation is over
            wait_for(lambda n=n: "late" in json.loads((n.spec.data_dir / "config" / "acl.json").read_text())["users"],
                     f"the new user in {n.spec.id}'s acl.json", timeout=60)
            stored = json.loads((n.spec.data_dir / "config" / "acl.json").read_text())["users"]["late"]["secret"]
            assert SecretBox(NEW).open(stored) == "late-secret-1"
    finally:
        stop_all(nodes)
