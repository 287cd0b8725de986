"""`raftmq cluster balance-leaders` (issue 38): what the plan says for each state of a group, and its errors
when nothing answers. The moves themselves run against real clusters in tests/replication/test_leader_balance.py."""

from __future__ import annotations

from raftmq.client.cli import run
from raftmq.client.commands.balance import BALANCED, MOVE, Balancer, GroupPlan, plan_for
from raftmq.client.routing import GroupRoute
from raftmq.client.security import ClientSecurity
from raftmq.client.types import ClusterStatus, MemberStatus
from tests.support.processes import free_ports


def _route(preferred: str = "n0") -> GroupRoute:
    return GroupRoute("g0", ("h:1",), "", True, "", False, 0, 0, 0, preferred)


def _member(mid: str, role: str = "follower", *, healthy: bool = True, ready: bool = True, error: str = "",
            membership: str = "voter") -> MemberStatus:
    return MemberStatus(mid, f"{mid}:8081", f"{mid}:8091", role, 3, 10, 10, 100, 0, 0, healthy, ready, error,
                        membership=membership)


def _status(leader: str, *members: MemberStatus) -> ClusterStatus:
    return ClusterStatus("c", leader, "async", list(members), answered_by="h:1")


def test_the_plan_moves_only_to_a_ready_voter_and_says_why_not():
    up = [_member("n0"), _member("n1", "leader")]
    assert plan_for(_route(), _status("n1", *up)).action == MOVE
    assert plan_for(_route(), _status("n0", _member("n0", "leader"), _member("n1"))).action == BALANCED
    assert "no leader" in plan_for(_route(), _status("", *up)).action
    down = plan_for(_route(), _status("n1", _member("n0", "unreachable", healthy=False, ready=False,
                                                    error="connection refused"), _member("n1", "leader")))
    assert down.action == "cannot move: n0 is unreachable (connection refused)"
    learner = plan_for(_route(), _status("n1", _member("n0", membership="learner"), _member("n1", "leader")))
    assert "learner" in learner.action
    assert "not a member" in plan_for(_route("n9"), _status("n1", *up)).action
    assert "older than issue 38" in plan_for(_route(""), _status("n1", *up)).action
    assert "does not answer (timed out)" in plan_for(_route(), None, "timed out").action


def test_nothing_answering_is_unavailable_in_one_line(capsys):
    port = free_ports(1)[0]
    assert run(["cluster", "balance-leaders", "--server", f"127.0.0.1:{port}", "--timeout", "2"]) == 5
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("raftmq: error: "), err


def test_a_single_node_and_a_one_group_cluster_are_balanced_by_their_own_rule(tmp_path, capsys):
    from tests.replication.cluster_util import lead_by, wait_leader
    from tests.support.processes import running_nodes

    with running_nodes(tmp_path / "single") as (node,):
        assert run(["cluster", "balance-leaders", "--dry-run", "--server", node.grpc_address]) == 0
        assert "every group (1) is led by its preferred leader" in capsys.readouterr().out
    with running_nodes(tmp_path / "three", 3) as nodes:
        lead_by(nodes, nodes[2].spec.id)  # a one-group cluster prefers its first member
        servers = ",".join(n.grpc_address for n in nodes)
        assert run(["cluster", "balance-leaders", "--dry-run", "--server", servers]) == 12
        assert run(["cluster", "balance-leaders", "--json", "--server", servers]) == 0
        assert '"result": "moved"' in capsys.readouterr().out
        assert wait_leader(nodes).spec.id == nodes[0].spec.id
        # a move the leader refuses is a failure with the server's reason (here: a member the group does not have)
        route = GroupRoute("c", tuple(n.grpc_address for n in nodes), "", True, "", False, 0, 0, 0, "n9")
        plan = GroupPlan("c", nodes[0].spec.id, "n9", MOVE)
        Balancer(route.endpoints, ClientSecurity(), timeout=10, wait_timeout=10).move(route, plan)
        assert plan.result.startswith("FAILED: 'n9' (transfer-leader --to) is not a voter"), plan.result
