"""The Kubernetes tier: one real control plane (etcd, API server, controllers, scheduler, kwok) per session."""

from __future__ import annotations

import pytest

from tests.k8s.control_plane import ControlPlane, require_tools


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    plane = ControlPlane(require_tools(), tmp_path_factory.mktemp("k8s"))
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
