"""Access rules: which action on which resource each RPC needs (the ``ACCESS`` table, ONE place), a user's
allow/deny rules and the decision between them.

Rules (replication.acl_table, replicated): per user, ``allow``/``deny`` of actions PUB, SUB, ADMIN on resources
``topic:NAME``, ``group:NAME`` (trailing ``*`` = prefix) and ``cluster``. A matching deny wins; no match falls to
``security.acl_default`` (deny). Admin users (and the bootstrap admin from the config) may do everything.

A new RPC is registered by adding its full method name with the (action, resource kind, request field) it needs;
an RPC missing from the table needs ADMIN on ``cluster`` (fail closed) and logs a warning once, so a forgotten
entry is safe and visible."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ACTIONS = ("PUB", "SUB", "ADMIN")
EFFECTS = ("allow", "deny")
RESOURCE_KINDS = ("topic", "group")
CLUSTER = "cluster"
MIN_SECRET_LENGTH = 8

# RPC full method -> what it needs: (action, resource kind, field path in the request). The kind "cluster" has no
# field. "messages[].topic" means every element's topic. An empty group field needs nothing (e.g. a pull without
# a group); an empty topic field means every topic ("topic:*"). () = any authenticated user.
Requirement = tuple[str, str, str]
ACCESS: dict[str, tuple[Requirement, ...]] = {
    "/raftmq.v1.MessagingService/SendMessage": (("PUB", "topic", "message.topic"),),
    "/raftmq.v1.MessagingService/SendBatch": (("PUB", "topic", "messages[].topic"),),
    "/raftmq.v1.MessagingService/PullMessage": (("SUB", "topic", "topic"), ("SUB", "group", "consumer_group")),
    "/raftmq.v1.MessagingService/QueryMessageByKey": (("SUB", "topic", "topic"),),
    "/raftmq.v1.MessagingService/ViewMessage": (("SUB", "topic", "topic"),),
    "/raftmq.v1.MessagingService/GetQueueOffsets": (("SUB", "topic", "topic"),),
    "/raftmq.v1.MessagingService/SearchOffset": (("SUB", "topic", "topic"),),
    "/raftmq.v1.MessagingService/CommitOffset": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/FetchOffset": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/ConsumerHeartbeat": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/UnregisterConsumer": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    # issue 17: each request of the stream is checked (every message's topic)
    "/raftmq.v1.MessagingService/SendStream": (("PUB", "topic", "sends[].messages[].topic"),),
    "/raftmq.v1.MessagingService/PullStream": (("SUB", "topic", "topic"), ("SUB", "group", "consumer_group")),
    # issue 12: pop consumption; a reset of a group's offsets is an admin action (as in RocketMQ)
    "/raftmq.v1.MessagingService/ReceiveMessage": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/AckMessage": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/ChangeInvisibleDuration": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/ForwardToDeadLetterQueue": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/SendMessageBack": (("SUB", "topic", "topic"), ("SUB", "group", "group")),
    "/raftmq.v1.MessagingService/ResetGroupOffsets": (("ADMIN", "group", "group"),),
    # issue 37: a route names groups, endpoints and queue counts, never messages (as RocketMQ 5's QueryRoute)
    "/raftmq.v1.MessagingService/QueryRoute": (),
    "/raftmq.v1.AdminService/CreateTopic": (("ADMIN", "topic", "topic.name"),),
    "/raftmq.v1.AdminService/CreateTopics": (("ADMIN", "topic", "topics[].name"),),
    "/raftmq.v1.AdminService/UpdateTopic": (("ADMIN", "topic", "topic.name"),),
    "/raftmq.v1.AdminService/DeleteTopic": (("ADMIN", "topic", "name"),),
    "/raftmq.v1.AdminService/ListTopics": (),
    "/raftmq.v1.AdminService/ListSettings": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AdminService/ClusterStatus": (),
    "/raftmq.v1.AdminService/TransferLeader": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AdminService/RebuildMember": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AdminService/AddMember": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AdminService/RemoveMember": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AdminService/DescribeConsumerGroup": (("SUB", "group", "group"),),
    "/raftmq.v1.AdminService/UpdateConsumerGroup": (("ADMIN", "group", "group"),),
    "/raftmq.v1.TransactionService/SendHalfMessage": (("PUB", "topic", "message.topic"),),
    "/raftmq.v1.TransactionService/EndTransaction": (("PUB", "group", "producer_group"),),
    "/raftmq.v1.TransactionService/CheckTransactions": (("PUB", "group", "register_group"),
                                                         ("PUB", "group", "check_answer.producer_group")),
    "/raftmq.v1.AclService/PutAclUser": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/DeleteAclUser": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/ListAclUsers": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/AddAclRule": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/RemoveAclRule": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/SetAclUserNetworks": (("ADMIN", CLUSTER, ""),),
    "/raftmq.v1.AclService/EndConsoleSession": (("ADMIN", CLUSTER, ""),),  # the console calls it as a member
    # issue 13: RocketMQ 5 clients (apache.rocketmq.v2). Sends and transactions publish to the topic; consumers
    # subscribe with their group; route, telemetry, heartbeat and goodbye only identify the client (any signed
    # user: they reveal no messages); a DLQ forward or offset change is the group's own consumption state.
    "/apache.rocketmq.v2.MessagingService/QueryRoute": (),
    "/apache.rocketmq.v2.MessagingService/Heartbeat": (),
    "/apache.rocketmq.v2.MessagingService/Telemetry": (),
    "/apache.rocketmq.v2.MessagingService/NotifyClientTermination": (),
    "/apache.rocketmq.v2.MessagingService/SendMessage": (("PUB", "topic", "messages[].topic.name"),),
    "/apache.rocketmq.v2.MessagingService/EndTransaction": (("PUB", "topic", "topic.name"),),
    "/apache.rocketmq.v2.MessagingService/RecallMessage": (("PUB", "topic", "topic.name"),),
    "/apache.rocketmq.v2.MessagingService/QueryAssignment": (("SUB", "topic", "topic.name"),
                                                             ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/ReceiveMessage": (("SUB", "topic", "message_queue.topic.name"),
                                                            ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/AckMessage": (("SUB", "topic", "topic.name"), ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/ChangeInvisibleDuration": (("SUB", "topic", "topic.name"),
                                                                     ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/ForwardMessageToDeadLetterQueue": (("SUB", "topic", "topic.name"),
                                                                             ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/PullMessage": (("SUB", "topic", "message_queue.topic.name"),
                                                         ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/UpdateOffset": (("SUB", "topic", "message_queue.topic.name"),
                                                          ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/GetOffset": (("SUB", "topic", "message_queue.topic.name"),
                                                       ("SUB", "group", "group.name")),
    "/apache.rocketmq.v2.MessagingService/QueryOffset": (("SUB", "topic", "message_queue.topic.name"),),
    "/apache.rocketmq.v2.MessagingService/SyncLiteSubscription": (("SUB", "topic", "topic.name"),
                                                                  ("SUB", "group", "group.name")),
}
# Authenticated by other means: the member-to-member ReplicaService checks cluster.secret itself.
EXEMPT_PREFIXES = ("/raftmq.v1.ReplicaService/",)
_UNLISTED: tuple[Requirement, ...] = (("ADMIN", CLUSTER, ""),)


class AccessDenied(Exception):
    """PERMISSION_DENIED naming user, action and resource, and what would change the answer: the deny rule that
    matched (an allow cannot beat it), or a narrower request, or an allow rule to add."""

    def __init__(self, user: str, action: str, resource: str, *, deny: tuple[int, dict] | None = None):
        if deny is not None:
            index, rule = deny
            why = (f"its rule {index} denies it ({rule.get('effect')} {','.join(rule.get('actions', ()))} on "
                   f"{', '.join(rule.get('resources', ()))}), and a deny wins over any allow; an admin can remove "
                   f"it: raftmq acl policy remove {user} {index}")
        elif resource == "topic:*":
            why = ("the request names no topic, so it needs the right on every topic; name the topic (`raftmq view "
                   "MSGID --topic TOPIC`, SDK: view_message(msg_id, topic=...)), or an admin can grant every topic: "
                   f"raftmq acl policy add {user} --allow {action} --resource 'topic:*'")
        else:
            why = (f"no rule allows it; an admin can grant it: raftmq acl policy add {user} --allow {action} "
                   f"--resource {resource}")
        super().__init__(f"user {user!r} may not {action} on {resource} ({why})")
        self.user, self.action, self.resource = user, action, resource


@dataclass(frozen=True)
class Principal:
    access_key: str
    admin: bool


def parse_resource(text: str) -> tuple[str, str]:
    """``topic:orders`` -> ("topic", "orders"); ``cluster`` -> ("cluster", ""). ValueError when malformed."""
    text = text.strip()
    if text == CLUSTER:
        return CLUSTER, ""
    kind, sep, name = text.partition(":")
    if not sep or kind not in RESOURCE_KINDS or not name or "*" in name[:-1]:
        raise ValueError(f"bad resource {text!r}: use topic:NAME, group:NAME (a trailing * for a prefix, e.g. "
                         "topic:orders-*) or cluster")
    return kind, name


def check_rule(rule: dict) -> dict:
    """A validated, normalised rule; ValueError naming what to fix."""
    effect = str(rule.get("effect", "")).lower()
    if effect not in EFFECTS:
        raise ValueError(f"rule effect {rule.get('effect')!r} must be allow or deny")
    actions = [str(a).upper() for a in rule.get("actions", [])]
    if not actions or any(a not in ACTIONS for a in actions):
        raise ValueError(f"rule actions {rule.get('actions')!r} must be one or more of {', '.join(ACTIONS)}")
    resources = [str(r).strip() for r in rule.get("resources", [])]
    if not resources:
        raise ValueError("a rule needs at least one resource (topic:NAME, group:NAME or cluster)")
    for r in resources:
        parse_resource(r)
    return {"effect": effect, "actions": actions, "resources": resources}


def _matches(pattern: str, kind: str, name: str) -> bool:
    pkind, pname = parse_resource(pattern)
    if pkind != kind:
        return False
    if kind == CLUSTER:
        return True
    if pname.endswith("*"):
        return name.startswith(pname[:-1])
    return pname == name


def matching_deny(rules: Sequence[dict], action: str, kind: str, name: str) -> tuple[int, dict] | None:
    """(index, rule) of the first deny rule that matches (the one ``decide`` refused on), else None."""
    for i, rule in enumerate(rules):
        if rule.get("effect") == "deny" and action in rule.get("actions", ()) and \
                any(_matches(p, kind, name) for p in rule.get("resources", ())):
            return i, rule
    return None


def decide(rules: Sequence[dict], action: str, kind: str, name: str, default: str) -> bool:
    """True when ``rules`` allow ``action`` on the resource: a matching deny wins, then an allow, else default."""
    allowed = None
    for rule in rules:
        if action not in rule.get("actions", ()):
            continue
        if any(_matches(p, kind, name) for p in rule.get("resources", ())):
            if rule.get("effect") == "deny":
                return False
            allowed = True
    return bool(allowed) if allowed is not None else default == "allow"


def _values(request: Any, path: str) -> list[str]:
    """Field values at ``path`` ("a.b", "items[].x") of a protobuf message."""
    objs = [request]
    for part in path.split("."):
        many = part.endswith("[]")
        name = part[:-2] if many else part
        nxt = []
        for o in objs:
            v = getattr(o, name, None)
            if v is None:
                continue
            nxt.extend(v if many else [v])
        objs = nxt
    return [str(o) for o in objs]


def required_access(method: str, request: Any) -> list[tuple[str, str, str]]:
    """(action, kind, name) triples a call needs; see ``ACCESS``."""
    reqs = ACCESS.get(method)
    if reqs is None:
        reqs = _UNLISTED
    out: list[tuple[str, str, str]] = []
    for action, kind, path in reqs:
        if kind == CLUSTER:
            out.append((action, CLUSTER, ""))
            continue
        values = _values(request, path) if request is not None else []
        for v in dict.fromkeys(values):
            if v:
                out.append((action, kind, v))
            elif kind == "topic":
                out.append((action, kind, "*"))
    return out


def resource_text(kind: str, name: str) -> str:
    return CLUSTER if kind == CLUSTER else f"{kind}:{name}"
