"""Where a run's time goes, per folder: tests, seconds (setup + call + teardown) and node processes started.

Printed at the end of every run (beside ``--durations=30``, which pyproject.toml turns on). Node processes are
counted where tests start them, ``tests.support.processes.NodeProcess.start``; nodes a test starts through
``make run``'s local_cluster or inside Kubernetes are not. With pytest-xdist each worker's counts travel in the
reports' user_properties and the controller adds them up.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from tests.support import processes

_PROPERTY = "node_starts"


def _folder(nodeid: str) -> str:
    parts = nodeid.split("::")[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


class SuiteReport:
    def __init__(self) -> None:
        self.tests: dict[str, int] = defaultdict(int)
        self.seconds: dict[str, float] = defaultdict(float)
        self.starts: dict[str, int] = defaultdict(int)
        self.tiers: dict[str, int] = defaultdict(int)
        self.began = time.monotonic()
        self.counted = 0  # NodeProcess.started at the last report

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        # every start since the last report happened in this phase of this test (a shared fixture's starts
        # count where it is first set up)
        now = processes.NodeProcess.started
        outcome.get_result().user_properties.append((_PROPERTY, now - self.counted))
        self.counted = now

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        folder = _folder(report.nodeid)
        self.seconds[folder] += report.duration
        props = dict(report.user_properties)
        self.starts[folder] += props.get(_PROPERTY, 0)
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.tests[folder] += 1
            self.tiers[props.get("tier", "?")] += 1

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.tests:
            return
        tr = terminalreporter
        tr.write_sep("=", "time per folder (tests/support/suite_report.py)")
        tr.write_line(f"{'folder':<22} {'tests':>6} {'seconds':>9} {'node starts':>12}")
        for folder in sorted(self.tests, key=lambda f: -self.seconds[f]):
            tr.write_line(f"{folder:<22} {self.tests[folder]:>6} {self.seconds[folder]:>9.1f} "
                          f"{self.starts[folder]:>12}")
        tr.write_line(f"{'all':<22} {sum(self.tests.values()):>6} {sum(self.seconds.values()):>9.1f} "
                      f"{sum(self.starts.values()):>12}   wall {time.monotonic() - self.began:.0f} s; tiers: "
                      + ", ".join(f"{t} {n}" for t, n in sorted(self.tiers.items())))
