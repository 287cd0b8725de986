"""Kubernetes glue for membership (issue 39): the StatefulSet's ``replicas`` decides which pods are members.

With the chart, pod ``<statefulset>-<n>`` is meant to be a member exactly while ``n < replicas``. A new pod asks to
join by itself (``cluster.auto_join``); this module gives the leader the other half: which members must leave
(pods at or beyond ``replicas``: a scale-down), and which join requests to refuse (a pod that is about to be
removed must not join again). The leader removes them one at a time, through the same checks as
``raftmq cluster remove-member`` (replication/member_changes.py). Members that are not pods of this StatefulSet
(added by hand) are never touched.

Reads the StatefulSet through the API (``get`` on that one StatefulSet, granted by the chart's Role), at most
every ``CACHE_S``; when the API cannot be read, nothing is removed.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from raftmq.node.kube import _parse_mode, in_cluster_api_client

log = logging.getLogger(__name__)

CACHE_S = 5.0
_ORDINAL = re.compile(r"^(?P<set>.+)-(?P<n>\d+)$")


class KubeMembershipError(Exception):
    """``kubernetes.membership`` is true but this process cannot read its StatefulSet; says what is missing."""


class StatefulSetMembers:
    def __init__(self, api: Any, namespace: str, statefulset: str):
        self.api = api  # kubernetes.client.AppsV1Api
        self.namespace = namespace
        self.statefulset = statefulset
        self._lock = threading.Lock()
        self._replicas: int | None = None
        self._read_at = 0.0

    @classmethod
    def from_environment(cls, mode: str, environ: Mapping[str, str] | None = None) -> StatefulSetMembers | None:
        """From the pod's environment (``POD_NAME`` = ``<statefulset>-<ordinal>``), or None when not in a pod or
        ``mode`` (``kubernetes.membership``) is false."""
        parsed = _parse_mode(mode)
        if parsed == "false":
            return None
        env = os.environ if environ is None else environ
        match = _ORDINAL.match(env.get("POD_NAME", ""))
        if match is None:
            if parsed == "true":
                raise KubeMembershipError("kubernetes.membership is true but POD_NAME is not <statefulset>-<ordinal>")
            return None
        client = in_cluster_api_client("kubernetes.membership", parsed == "true", env, error=KubeMembershipError)
        if client is None:
            return None
        from kubernetes import client as k8s

        return cls(k8s.AppsV1Api(client), env["POD_NAMESPACE"], match["set"])

    def replicas(self) -> int | None:
        """The StatefulSet's ``spec.replicas`` (cached for ``CACHE_S``); None when it cannot be read."""
        with self._lock:
            if time.monotonic() - self._read_at < CACHE_S:
                return self._replicas
            self._read_at = time.monotonic()
            try:
                sts = self.api.read_namespaced_stateful_set(self.statefulset, self.namespace, _request_timeout=5)
                self._replicas = int(sts.spec.replicas)
            except Exception as e:  # noqa: BLE001 - any API failure: keep everyone, try again later
                log.warning("cannot read StatefulSet %s/%s (%s): no member is retired meanwhile", self.namespace,
                            self.statefulset, e)
                self._replicas = None
            return self._replicas

    def _ordinal(self, member_id: str) -> int | None:
        match = _ORDINAL.match(member_id)
        return int(match["n"]) if match is not None and match["set"] == self.statefulset else None

    def retiring(self, member_ids: list[str]) -> list[str]:
        """The members that are pods of this StatefulSet at or beyond its replicas (the leader removes them)."""
        replicas = self.replicas()
        if replicas is None:
            return []
        return [m for m in member_ids if (n := self._ordinal(m)) is not None and n >= replicas]

    def join_refusal(self, member_id: str) -> str:
        """Why a pod asking to join is refused ("" when it may join): it is beyond the replicas."""
        n = self._ordinal(member_id)
        replicas = self.replicas()
        if n is not None and replicas is not None and n >= replicas:
            return f"{member_id} is beyond the StatefulSet's {replicas} replicas: it is being scaled away"
        return ""
