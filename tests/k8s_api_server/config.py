"""Knobs of the fake cluster. Tests may change them on a running server (``server.settings``):
every component reads them at the moment it needs them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Settings:
    """Timings are seconds of wall time; defaults keep a whole test suite fast."""

    kubernetes_version: str = "1.31"  # schema version objects are validated against
    history_size: int = 1000  # changes kept for watch replay; older ones answer 410 Expired
    token: str = "fake-token"  # the bearer token requests must carry
    # The portal's bearer token (``FakeKubernetes.portal_kubeconfig_path``): its requests are
    # allowed only by these RBAC rules (a ClusterRole's, bound cluster-wide), when they are
    # set, and in a namespace also by the ClusterRoles named here (name: rules) that a
    # RoleBinding of that namespace binds it to (rbac.py).
    portal_token: str = "portal-token"
    portal_rules: list[dict] | None = None
    portal_namespace_roles: dict[str, list[dict]] = field(default_factory=dict)
    field_validation: str = "Strict"  # when the request names none: Strict, Warn or Ignore
    node_count: int = 3
    pod_start_seconds: float = 0.05  # ContainerCreating -> Running
    pod_termination_seconds: float = 0.0  # how long a deleted running pod stays Terminating
    image_pull_backoff_seconds: float = 0.1  # ErrImagePull -> ImagePullBackOff
    crash_backoff_seconds: float = 0.1  # a restarted container waits this long (CrashLoopBackOff)
    create_retry_seconds: float = 0.2  # a controller retries a refused pod creation after this
    job_backoff_seconds: float = 0.05  # a Job's first retry of a failed pod (real: 10 s),
    # doubling with each failure of the index (or of the Job), at most 36 times this (6 min)
    service_account_delay_seconds: float = 0.05  # a new namespace's "default" ServiceAccount
    # How long after a namespace is made admission still answers creates in it 404
    # 'namespace "NAME" not found': a ValidatingAdmissionPolicy's matcher read namespaces
    # from an informer's cache, which had not seen a new one yet, and did not look it up
    # (fixed in the patches of late 2025); 0: the fix (a real server's lag is milliseconds to
    # seconds under load, which a test cannot choose there).
    admission_namespace_lag_seconds: float = 0.0
    # How long after a RoleBinding is made the portal's requests are still authorized without
    # it: the RBAC authorizer reads RoleBindings from an informer, which sees a new one a
    # moment later (on a cluster of several API servers, each its own); 0: at once.
    rbac_binding_lag_seconds: float = 0.0
    tick_seconds: float = 0.01  # the controller loop's period when nothing wakes it
    # The Job controller looks at every Job at least this often; between, at those that
    # changed, whose pods changed or that wait for a moment (a back-off, a deadline, a TTL).
    full_pass_seconds: float = 1.0
    bookmark_seconds: float = 60.0  # BOOKMARK interval of watches that allow them
    watch_timeout_seconds: float = 1800.0  # a watch without timeoutSeconds ends after this
    # The process kubelet's nfs volumes: "server:/path" -> the directory on this machine that
    # stands for that export (an unmapped export fails to mount, as an unreachable server).
    nfs_exports: dict[str, str] = field(default_factory=dict)
    # Add-ons installed when the server is made: "kueue", "volcano" (addons.py); a running
    # server takes more with ``FakeKubernetes.install(...)``.
    addons: tuple[str, ...] = ()
