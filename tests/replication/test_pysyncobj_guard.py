"""The pysyncobj guard (replication/pysyncobj_guard.py): one list of every pysyncobj internal raftmq touches,
checked at import with a one-line refusal naming what is missing and the release to pin."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raftmq.replication import pysyncobj_guard
from raftmq.replication.pysyncobj_guard import PysyncobjMismatchError, check

REPLICATION = Path(pysyncobj_guard.__file__).resolve().parent
MANGLED = re.compile(r"\b_(SyncObj|TcpConnection|FileJournal|ResizableFile|MetaStorer|TCPTransport)__[A-Za-z]\w*")


def test_every_mangled_pysyncobj_name_used_in_replication_is_listed():
    listed = {name for names in pysyncobj_guard.TOUCHED.values() for name in names}
    used = set()
    for path in REPLICATION.glob("*.py"):
        if path.name != "pysyncobj_guard.py":
            used.update(m.group(0) for m in MANGLED.finditer(path.read_text()))
    assert used, "the pattern finds raftmq's uses of pysyncobj internals"
    assert sorted(used - listed) == []


def test_the_installed_pysyncobj_passes():
    check()
    assert list(pysyncobj_guard.missing_names()) == []


def test_a_missing_field_or_method_is_named_with_the_release_to_pin(monkeypatch):
    touched = dict(pysyncobj_guard.TOUCHED)
    touched["pysyncobj.syncobj:SyncObj"] += ("_SyncObj__renamedInANewRelease",)
    touched["pysyncobj.journal"] += ("GONE",)
    monkeypatch.setattr(pysyncobj_guard, "TOUCHED", touched)
    with pytest.raises(PysyncobjMismatchError) as e:
        check()
    text = str(e.value)
    assert "\n" not in text
    assert "pysyncobj.syncobj.SyncObj._SyncObj__renamedInANewRelease" in text
    assert "pysyncobj.journal.GONE" in text
    assert f"pip install pysyncobj=={pysyncobj_guard.PYSYNCOBJ_VERSION}" in text


def test_another_release_is_refused_even_with_every_name(monkeypatch):
    monkeypatch.setattr(pysyncobj_guard.importlib.metadata, "version", lambda name: "0.3.99")
    with pytest.raises(PysyncobjMismatchError, match=r"pysyncobj 0\.3\.99 is installed.*pysyncobj==0\.3\.17"):
        check()


def test_a_field_is_found_in_the_class_code_not_only_on_instances():
    from pysyncobj.syncobj import SyncObj

    assert not hasattr(SyncObj, "_SyncObj__raftState")  # an instance field, assigned in __init__
    assert "_SyncObj__raftState" in pysyncobj_guard._code_names(SyncObj)
