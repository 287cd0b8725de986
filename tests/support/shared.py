"""One single node and one 3-member cluster per test session (per pytest-xdist worker), for every test that
neither kills, pauses, partitions, wipes nor damages a member (docs/development/testing.md).

A test on them uses names no other test uses (``unique_name``, or a literal only that module uses) and finds the
leader when it needs it (another test may have moved it). Whatever it would do to a member beyond that, it
does on nodes of its own (``running_nodes``, ``start_nodes``, tests/replication/conftest.py's Cluster)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.support.processes import NodeProcess, node_specs, start_nodes, stop_all

_names = itertools.count()


def unique_name(prefix: str = "t") -> str:
    """A topic or group name no other test of this session uses."""
    return f"{prefix}-{next(_names)}"


@pytest.fixture(scope="session")
def shared_node(tmp_path_factory) -> Iterator[NodeProcess]:
    nodes = start_nodes(node_specs(tmp_path_factory.mktemp("shared-node")))
    yield nodes[0]
    stop_all(nodes, kill=True)  # nobody checks how it stops; its data dies with the session


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory) -> Iterator[list[NodeProcess]]:
    nodes = start_nodes(node_specs(tmp_path_factory.mktemp("shared-cluster"), 3), timeout=90)
    yield nodes
    stop_all(nodes, kill=True)
