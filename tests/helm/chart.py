"""Render and lint helm/raftmq with the real Helm engine.

helm-python-sdk ships no `helm` executable: it binds Helm's Go SDK (v4, compiled into libhelm_c) through ctypes.
``Chart.render`` is what `helm template` runs (values merged with the defaults, values.schema.json enforced,
templates executed, `lookup` empty because no cluster is contacted) and ``lint(strict=True)`` is `helm lint
--strict`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate.utils as kv
import yaml

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "raftmq"
RELEASE = "rel"
NAMESPACE = "mq"
# The newest Kubernetes version kubernetes-validate ships schemas for, and the oldest the chart supports
# (Chart.yaml kubeVersion): manifests must be valid for both.
K8S_VERSION = kv.latest_version()
K8S_MIN_VERSION = "1.27"


def render(values: dict[str, Any] | None = None, *, release: str = RELEASE, namespace: str = NAMESPACE,
           include_notes: bool = False) -> dict[str, list[dict]]:
    """Template path -> the Kubernetes objects it rendered (empty documents dropped)."""
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    out: dict[str, list[dict]] = {}
    for path, text in rendered.items():
        if path.endswith("NOTES.txt"):
            if include_notes:
                out[path] = [{"notes": text}]
            continue
        docs = [d for d in yaml.safe_load_all(text) if d]
        if docs:
            out[path] = docs
    return out


def objects(values: dict[str, Any] | None = None, **kw) -> list[dict]:
    return [doc for docs in render(values, **kw).values() for doc in docs]


def notes(values: dict[str, Any] | None = None) -> str:
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in rendered.items() if path.endswith("NOTES.txt"))


def lint(values: dict[str, Any] | None = None, kube_version: str | None = None) -> dict[str, Any]:
    return helm.lint(str(CHART_DIR), values, strict=True, namespace=NAMESPACE,
                     kube_version=None if kube_version is None else f"v{kube_version}.0")


def one(objs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def all_of(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]
