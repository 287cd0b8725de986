"""Test ports (tests/support/processes.py): reserved per test process in locked blocks below the kernel's
ephemeral range, so a node restarted on its ports finds them free."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support import processes


@pytest.fixture
def reservations(tmp_path, monkeypatch):
    monkeypatch.setattr(processes._PortReservations, "LOCK_DIR", tmp_path / "locks")
    monkeypatch.setattr(processes._PortReservations, "BLOCK", 8)
    made = []

    def make() -> processes._PortReservations:
        r = processes._PortReservations()
        made.append(r)
        return r

    yield make
    for r in made:  # what process exit does: the locks go with the descriptors
        for fd in r._held:
            processes.os.close(fd)


def test_two_test_processes_never_share_a_port(reservations):
    a, b = reservations(), reservations()  # each holds its blocks by a lock of its own, as two processes do
    first = a.take(5)
    theirs = b.take(20)
    more = a.take(10)
    assert len(set(first + more)) == 15 and not set(first + more) & set(theirs)
    assert len(a._held) == 2 and len(b._held) == 3


def test_ports_are_below_the_ephemeral_range_and_one_in_use_is_skipped(reservations):
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    r = reservations()
    [port] = r.take(1)
    assert 10000 <= port < low
    with socket.socket() as busy:
        busy.bind((processes.HOST, port + 1))
        busy.listen()
        assert r.take(1) == [port + 2]
