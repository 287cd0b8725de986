"""Kubernetes glue: keep this pod's ``raftmq.io/role`` label equal to its Raft role.

The chart's leader Service selects the pod labelled ``raftmq.io/role=leader``, so clients (and humans) can reach
the current leader through one stable name. The label is a convenience, never a source of truth: writes sent to
a stale leader are answered with a redirect to the real one. So the labeler must never slow or break the data
path. ``set_role`` only records the desired role and wakes a background thread; that thread patches the pod
through the Kubernetes API and retries with capped exponential backoff, logging every failure.

Inside a pod the chart provides ``POD_NAME`` and ``POD_NAMESPACE`` through the downward API, and the service
account token (with a Role that allows ``patch`` on the member pods only) is mounted as usual.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the client is imported only when a labeler is really built (it is the optional [k8s] extra)
    from kubernetes import client as k8s

__all__ = ["ROLE_LABEL", "RoleLabeler", "RoleLabelerError"]

log = logging.getLogger(__name__)

# Where Kubernetes mounts the pod's service-account credentials.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_TOKEN_FILENAME = f"{SERVICE_ACCOUNT_DIR}/token"
SERVICE_CERT_FILENAME = f"{SERVICE_ACCOUNT_DIR}/ca.crt"

ROLE_LABEL = "raftmq.io/role"
# Written at start, before the node reports a role: a container restarted in the same pod keeps the pod's
# labels, so a stale "leader" would otherwise route leader traffic to a node that is not leading any more.
UNKNOWN_ROLE = "unknown"
_LABEL_VALUE = re.compile(r"^(?:[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?)$")
_MERGE_PATCH = "application/merge-patch+json"


class RoleLabelerError(Exception):
    """The labeler was explicitly enabled but cannot run here; the message says what to fix."""


def _parse_mode(mode: str | bool | None) -> str:
    """Normalise the ``kubernetes.role_label`` config value to "auto", "true" or "false"."""
    if mode is None:
        return "auto"
    if isinstance(mode, bool):
        return "true" if mode else "false"
    text = str(mode).strip().lower()
    if text in ("auto", ""):
        return "auto"
    if text in ("true", "yes", "on", "1"):
        return "true"
    if text in ("false", "no", "off", "0"):
        return "false"
    raise RoleLabelerError(f"kubernetes.role_label must be auto, true or false, not {mode!r}")


class RoleLabeler:
    """Mirrors the node's Raft role into its own pod label from a background thread.

    ``set_role`` never blocks and never raises; API failures (HTTP errors, refused connections, timeouts) are
    logged and retried with backoff until they succeed or ``stop`` is called.
    """

    def __init__(
        self,
        api: k8s.CoreV1Api,
        pod_name: str,
        namespace: str,
        *,
        label: str = ROLE_LABEL,
        initial_backoff: float = 0.5,
        max_backoff: float = 30.0,
        request_timeout: float = 5.0,
        resync_interval: float = 300.0,
    ) -> None:
        self._api = api
        self.pod_name = pod_name
        self.namespace = namespace
        self.label = label
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._request_timeout = request_timeout
        self._resync_interval = resync_interval
        self._cond = threading.Condition()
        self._desired = UNKNOWN_ROLE
        self._applied: str | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.failures = 0  # API calls that failed, for metrics and tests

    @classmethod
    def from_environment(
        cls,
        mode: str | bool | None = "auto",
        *,
        environ: Mapping[str, str] | None = None,
        token_path: str | None = None,
        ca_path: str | None = None,
        **options: float,
    ) -> RoleLabeler | None:
        """Build a labeler from the pod's environment, or return None when not in a pod or disabled.

        ``mode`` is the ``kubernetes.role_label`` config value: ``auto`` runs only inside a pod (the
        Kubernetes service env, ``POD_NAME``/``POD_NAMESPACE`` and a service-account token are present),
        ``false`` never runs, ``true`` must run and raises ``RoleLabelerError`` naming what is missing.
        """
        parsed = _parse_mode(mode)
        if parsed == "false":
            return None
        env = os.environ if environ is None else environ
        client = in_cluster_api_client("kubernetes.role_label", parsed == "true", env, token_path, ca_path,
                                       RoleLabelerError)
        if client is None:
            return None
        from kubernetes import client as k8s

        api = k8s.CoreV1Api(client)
        return cls(api, env["POD_NAME"], env["POD_NAMESPACE"], **options)

    # ------------------------------------------------------------------ public API

    def start(self) -> None:
        """Start the background thread; it first clears any stale role left by a previous container."""
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="raftmq-role-labeler", daemon=True)
            self._thread.start()
        log.info("role labeler started for pod %s/%s (label %s)", self.namespace, self.pod_name, self.label)

    def set_role(self, role: str) -> None:
        """Record the desired role ("leader", "follower", "candidate", ...); returns at once, never raises."""
        value = str(role).strip().lower()
        if not _LABEL_VALUE.match(value):
            log.error("role labeler: ignoring role %r, not a valid Kubernetes label value", role)
            return
        with self._cond:
            if value != self._desired:
                self._desired = value
                self._cond.notify_all()

    def stop(self, timeout: float = 2.0, final_role: str | None = UNKNOWN_ROLE) -> None:
        """Stop the thread after one last attempt, bounded by ``timeout``, to publish ``final_role``.

        A stopping node holds no role any more, so by default the pod drops out of the leader Service at once
        instead of when it is gone; ``final_role=None`` publishes the latest role set instead.
        """
        if final_role is not None:
            self.set_role(final_role)
        with self._cond:
            thread = self._thread
            self._stopping = True
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout)
            with self._cond:
                self._thread = None

    def wait_applied(self, role: str, timeout: float) -> bool:
        """Block until ``role`` is the label written on the pod (True) or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._applied != role:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    @property
    def desired_role(self) -> str:
        with self._cond:
            return self._desired

    @property
    def applied_role(self) -> str | None:
        """The role last written successfully, or None before the first success."""
        with self._cond:
            return self._applied

    # ------------------------------------------------------------------ worker

    def _run(self) -> None:
        backoff = self._initial_backoff
        while True:
            with self._cond:
                if not self._stopping and self._desired == self._applied:
                    # Re-assert now and then: someone may have edited the label by hand.
                    if not self._cond.wait(self._resync_interval):
                        self._applied = None
                    continue
                role, last_try = self._desired, self._stopping
            if self._desired_already_published(role, last_try):
                return
            try:
                self._patch(role)
            except Exception as exc:  # any API or transport failure: log, back off, retry; never propagate
                self.failures += 1
                if last_try:
                    log.warning("role labeler: could not set %s=%s on shutdown: %s", self.label, role, _brief(exc))
                    return
                delay = backoff * random.uniform(0.8, 1.2)
                log.warning(
                    "role labeler: could not set %s=%s on pod %s/%s (%s); retrying in %.1fs",
                    self.label, role, self.namespace, self.pod_name, _brief(exc), delay,
                )
                backoff = min(backoff * 2, self._max_backoff)
                self._sleep_unless_stopping(delay)
                continue
            backoff = self._initial_backoff
            with self._cond:
                self._applied = role
                self._cond.notify_all()  # wait_applied()
            log.info("role labeler: pod %s/%s now %s=%s", self.namespace, self.pod_name, self.label, role)
            if last_try:
                return

    def _sleep_unless_stopping(self, delay: float) -> None:
        """Back off for the full delay (role changes do not cut it short: the API is failing); stop does."""
        deadline = time.monotonic() + delay
        with self._cond:
            while not self._stopping:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._cond.wait(remaining)

    def _desired_already_published(self, role: str, last_try: bool) -> bool:
        """On stop, exit at once when the latest role is already on the pod."""
        with self._cond:
            return last_try and self._applied == role

    def _patch(self, role: str) -> None:
        body = {"metadata": {"labels": {self.label: role}}}
        self._api.patch_namespaced_pod(
            self.pod_name,
            self.namespace,
            body,
            _content_type=_MERGE_PATCH,
            _request_timeout=self._request_timeout,
        )


def in_cluster_api_client(setting_name: str, required: bool, env: Mapping[str, str], token_path: str | None = None,
                          ca_path: str | None = None, error: type[Exception] = RoleLabelerError):
    """A kubernetes ApiClient with this pod's service account, or None when not in a pod (logged). ``required``
    (the setting is ``true``): raise ``error`` naming what is missing instead."""
    # RAFTMQ_SERVICE_ACCOUNT_DIR: credentials mounted somewhere else than Kubernetes' usual place
    account_dir = env.get("RAFTMQ_SERVICE_ACCOUNT_DIR") or SERVICE_ACCOUNT_DIR
    token_path = token_path or f"{account_dir}/token"
    ca_path = ca_path or f"{account_dir}/ca.crt"
    missing = [
        name
        for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAME", "POD_NAMESPACE")
        if not env.get(name)
    ]
    if not os.path.isfile(token_path):
        missing.append(f"service-account token {token_path}")
    if missing:
        if required:
            raise error(
                f"{setting_name} is true but this process is not set up to reach the Kubernetes API; missing: "
                + ", ".join(missing)
                + " (set POD_NAME/POD_NAMESPACE from the downward API and mount a service-account token)"
            )
        log.debug("%s off: not running in a pod (missing %s)", setting_name, ", ".join(missing))
        return None
    try:
        from kubernetes import client as k8s
        from kubernetes.config import incluster_config
        from kubernetes.config.config_exception import ConfigException
    except ImportError as exc:
        if required:
            raise error(
                f"{setting_name} is true but the Kubernetes client is not installed ({exc}); "
                "install raftmq with the k8s extra: pip install 'raftmq[k8s]'"
            ) from exc
        log.warning("%s off: the Kubernetes client is not installed (pip install 'raftmq[k8s]')", setting_name)
        return None
    configuration = k8s.Configuration()
    try:
        incluster_config.InClusterConfigLoader(
            token_filename=token_path, cert_filename=ca_path, environ=env
        ).load_and_set(configuration)
    except ConfigException as exc:
        if required:
            raise error(f"{setting_name} is true but the in-cluster config failed: {exc}") from exc
        log.warning("%s off: in-cluster Kubernetes config failed: %s", setting_name, exc)
        return None
    # Retries are ours (with backoff, in the background); urllib3's own would only hide failures.
    configuration.retries = False
    return k8s.ApiClient(configuration)


def _brief(exc: Exception) -> str:
    """One line for the log: HTTP status and reason for API errors, the exception text otherwise."""
    status = getattr(exc, "status", None)
    if status is not None:
        return f"HTTP {status} {getattr(exc, 'reason', '')}".strip()
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
