"""The tier hook (tests/support/tiers.py) on small suites of its own, run in-process by pytester."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
from tests.support import tiers
from tests.support.tiers import _unit_tests_start_no_process  # noqa: F401

def pytest_collection_modifyitems(config, items):
    tiers.apply(items)
"""

SUITE = """
import importlib
import subprocess
import sys

import pytest


def start_helper():
    return subprocess.run([sys.executable, "-c", "pass"], check=True)


class Server:
    def start(self):
        start_helper()


@pytest.fixture
def server():
    s = Server()
    s.start()
    return s


def test_pure():
    assert 1 + 1 == 2


def test_uses_a_starting_fixture(server):
    pass


def test_calls_a_helper_that_starts_one():
    start_helper()


@pytest.mark.e2e
def test_declared_e2e():
    pass


def test_starts_one_where_the_walk_cannot_see():
    getattr(importlib.import_module("subproc" + "ess"), "run")([sys.executable, "-c", "pass"])
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _tiers(pytester: pytest.Pytester, *args: str) -> set[str]:
    result = pytester.runpytest("--collect-only", "-q", *args)
    return {line.split("::")[1] for line in result.outlines if "::" in line}


def test_each_test_gets_the_tier_its_code_reaches(suite):
    assert _tiers(suite, "-m", "unit") == {"test_pure", "test_starts_one_where_the_walk_cannot_see"}
    assert _tiers(suite, "-m", "integration") == {"test_uses_a_starting_fixture",
                                                    "test_calls_a_helper_that_starts_one"}
    assert _tiers(suite, "-m", "e2e") == {"test_declared_e2e"}
    assert _tiers(suite, "-m", "not slow") == _tiers(suite, "-m", "unit")


def test_a_unit_test_that_starts_a_process_fails_even_if_the_walk_missed_it(suite):
    result = suite.runpytest("-m", "unit", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*a unit-tier test started a process (subprocess.Popen)*"])


def test_a_test_marked_unit_that_starts_processes_fails_collection(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_marked=SUITE.replace("def test_uses_a_starting_fixture",
                                                  "@pytest.mark.unit\ndef test_uses_a_starting_fixture"))
    result = pytester.runpytest("--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_uses_a_starting_fixture: marked unit but fixture server -> Server*"])
