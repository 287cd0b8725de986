"""Test tiers, applied at collection (docs/development/testing.md).

* ``unit``: in-process; starts no process of any kind. ``make test-fast`` runs this tier.
* ``integration``: starts processes: raftmq nodes (tests/support/processes.py), the CLI, helper programs.
* ``e2e``: drives a big outside system: Kubernetes (tests/k8s), the official RocketMQ 5 clients (their own venv
  or a JVM), Spark (marker ``spark``), a browser, a package installed into a new venv. A module says so with
  ``pytestmark = pytest.mark.e2e``.

Every test gets exactly one tier. ``e2e`` comes from the ``e2e`` and ``spark`` markers. Otherwise a test is ``integration``
when it, or any fixture it uses, reaches code that starts a process: found by following the names its code
uses through the functions and classes of the ``tests`` package down to ``subprocess``, ``os.fork`` and the
like (``starts_processes``). Everything else is ``unit``. ``slow`` is kept as the old name for "not unit".

Two checks keep ``unit`` honest: a test marked ``unit`` by hand that reaches such code fails collection, and a
``unit`` test that starts a process at run time anyway (through code the static walk cannot see) fails.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import types
from collections.abc import Iterator

import pytest

TIERS = ("unit", "integration", "e2e")
E2E_MARKERS = ("e2e", "spark")
_OS_SPAWNERS = {"fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "popen", "execv", "execve",
                "execvp", "spawnv", "spawnve", "spawnl"}
_SPAWNING_MODULES = {"subprocess", "multiprocessing", "pty", "asyncio.subprocess"}
# product code that starts processes itself (the static walk stays inside the tests package)
_SPAWNING_PRODUCT_MODULES = {"raftmq.node.local_cluster"}


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _in_tests(obj: object) -> bool:
    """Code of the test suite (followed by the walk), not of raftmq, the standard library or a dependency."""
    module = getattr(obj, "__module__", None) if not isinstance(obj, types.ModuleType) else obj.__name__
    if not isinstance(module, str):
        return False
    return module == "tests" or module.startswith(("tests.", "test_", "conftest")) or module.endswith(".conftest")


class _Walker:
    """Whether code reaches a process start, and through what (memoized over the whole session)."""

    def __init__(self) -> None:
        self._seen: dict[int, str | None] = {}

    def function(self, func: object) -> str | None:
        func = inspect.unwrap(getattr(func, "__func__", func))
        code = getattr(func, "__code__", None)
        if code is None:
            return None
        key = id(code)
        if key in self._seen:
            return self._seen[key]
        self._seen[key] = None  # recursion guard: a cycle proves nothing on its own
        found = self._names(code, getattr(func, "__globals__", {}), getattr(func, "__closure__", None))
        self._seen[key] = found
        return found

    def _names(self, code: types.CodeType, globals_: dict, closure) -> str | None:
        names: set[str] = set()
        for c in _code_objects(code):
            names.update(c.co_names)
            names.update(c.co_freevars)
        values: list[tuple[str, object]] = [(n, globals_[n]) for n in names if n in globals_]
        # a function-local ``import``/``from ... import`` names the module itself
        values += [(n, sys.modules[n]) for n in names if n not in globals_ and n in sys.modules
                   and (n in _SPAWNING_MODULES or n in _SPAWNING_PRODUCT_MODULES or _in_tests(sys.modules[n]))]
        if closure:
            for name, cell in zip(code.co_freevars, closure, strict=False):
                try:
                    values.append((name, cell.cell_contents))
                except ValueError:
                    pass
        for name, value in values:
            found = self._value(value, names)
            if found:
                return found if found == name else f"{name} -> {found}"
        return None

    def _value(self, value: object, names: set[str]) -> str | None:
        if isinstance(value, types.ModuleType):
            if value.__name__ in _SPAWNING_MODULES or value.__name__ in _SPAWNING_PRODUCT_MODULES:
                return value.__name__
            if value is os and names & _OS_SPAWNERS:
                return "os." + sorted(names & _OS_SPAWNERS)[0]
            if _in_tests(value):  # module.attribute: follow the attributes this code names
                for attr in sorted(names):
                    member = getattr(value, attr, None)
                    if member is not None and not isinstance(member, types.ModuleType):
                        found = self._value(member, names)
                        if found:
                            return f"{value.__name__}.{attr} -> {found}" if found != attr else found
            return None
        if getattr(value, "__module__", None) in _SPAWNING_MODULES or any(value is f for f in (os.fork, os.system)):
            return f"{value.__module__}.{getattr(value, '__name__', value)}"
        if getattr(value, "__module__", None) in _SPAWNING_PRODUCT_MODULES:
            return f"{value.__module__}.{getattr(value, '__name__', value)}"
        if not _in_tests(value):
            return None
        if inspect.isclass(value):
            members = [(a, m) for klass in reversed(value.__mro__) if _in_tests(klass) for a, m in vars(klass).items()]
            for attr, member in members:
                if isinstance(member, property):
                    member = member.fget
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if inspect.isfunction(member):
                    found = self.function(member)
                    if found:
                        return f"{value.__name__}.{attr} -> {found}"
            return None
        if callable(value):
            return self.function(value)
        return None


_walker = _Walker()


def starts_processes(item: pytest.Item) -> str | None:
    """How the test (its function or a fixture it uses, transitively) reaches a process start, or None."""
    found = _walker.function(getattr(item, "obj", None))
    if found:
        return f"{item.name} -> {found}"
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in sorted((info.name2fixturedefs if info else {}).items()):
        for fixturedef in defs:
            func = fixturedef.func
            if not _in_tests(func) or func.__module__ == __name__:  # not this module's own guard
                continue
            found = _walker.function(func)
            if found:
                return f"fixture {name} -> {found}"
    return None


def tier_of(item: pytest.Item) -> tuple[str, str]:
    """(tier, why) for one collected test."""
    if any(item.get_closest_marker(m) for m in E2E_MARKERS):
        return "e2e", "marked " + next(m for m in E2E_MARKERS if item.get_closest_marker(m))
    how = starts_processes(item)
    if how:
        return "integration", how
    if item.get_closest_marker("integration"):
        return "integration", "marked integration"
    return "unit", "starts no process"


def apply(items: list[pytest.Item]) -> None:
    """pytest_collection_modifyitems: give every test its tier (and ``slow`` unless unit)."""
    wrong = []
    for item in items:
        tier, why = tier_of(item)
        if tier != "unit" and item.get_closest_marker("unit"):
            wrong.append(f"{item.nodeid}: marked unit but {why}")
            continue
        item.add_marker(tier)
        item.user_properties.append(("tier", tier))
        if tier != "unit":
            item.add_marker("slow")
    if wrong:
        raise pytest.UsageError("tests marked `unit` start processes (drop the mark: they are integration tests, "
                                "docs/development/testing.md):\n  " + "\n  ".join(wrong))


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """In a unit-tier test, starting a process fails the test (pytest.fail's exception is a BaseException, so
    an ``except Exception`` in the code under test does not hide it)."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return

    def refuse(what: str):
        def refused(*args, **kwargs):
            pytest.fail(f"a unit-tier test started a process ({what}); it belongs to the integration tier: mark "
                        "its module `pytestmark = pytest.mark.integration` (docs/development/testing.md)",
                        pytrace=False)
        return refused

    patch = pytest.MonkeyPatch()
    patch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess.Popen"))  # after Popen set itself up
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            patch.setattr(os, name, refuse(f"os.{name}"))
    try:
        yield
    finally:
        patch.undo()
