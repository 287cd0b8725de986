"""Suite-wide settings that must be in place before anything imports grpc, and the test tiers."""

import os

import pytest

# gRPC's fork handlers run whenever this process forks (Spark launching its JVM, subprocesses with preexec_fn)
# and, with calls of earlier tests' channels still winding down in other threads, have made the forked child die
# before it could exec (a full run saw Spark's gateway exit at start: "skipping fork() handlers", then "epoll_wait
# error: Bad file descriptor" in the child). Nothing here forks to keep using gRPC in the child, so turn them off.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from tests.support import tiers  # noqa: E402
from tests.support.shared import shared_cluster, shared_node  # noqa: E402,F401  (session fixtures)
from tests.support.suite_report import SuiteReport  # noqa: E402
from tests.support.tiers import _unit_tests_start_no_process  # noqa: E402,F401  (autouse fixture)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SuiteReport(), "raftmq-suite-report")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.apply(items)
