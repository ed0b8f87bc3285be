"""The PodSecurity admission plugin: the Pod Security Standards (privileged, baseline,
restricted) a namespace enforces through its ``pod-security.kubernetes.io/enforce`` label
(``enforce-version``: ``latest`` or ``v1.N``), with the checks, check versions, overrides,
order and wording of Kubernetes' ``pod-security-admission/policy`` package.

A pod that violates its namespace's level is refused with 403 ``pods "x" is forbidden:
violates PodSecurity "restricted:latest": <reason> (<detail>), ...``, the violated checks
in the plugin's order (baseline check IDs sorted, then restricted ones sorted; a restricted
check replaces the baseline check it overrides). Workload objects are never refused, as on a
real server. A namespace with a bad level or version in a pod-security label is 422.

``latest`` (and a newer version than the server) is the policy of the fake's Kubernetes
version, ``config.Settings.kubernetes_version`` (1.31): that server's plugin knows no newer
check. An older ``enforce-version`` gets that version's policy, as on a real cluster."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from . import errors, resources
from .config import Settings

PREFIX = "pod-security.kubernetes.io/"
ENFORCE = PREFIX + "enforce"
ENFORCE_VERSION = PREFIX + "enforce-version"
_MODES = ("enforce", "audit", "warn")  # the order the plugin reads (and reports) its labels
LEVELS = ("privileged", "baseline", "restricted")
_VERSION = re.compile(r"^v1\.([0-9]|[1-9][0-9]*)$")

Version = tuple[int, int]
SERVER_VERSION: Version = tuple(int(p) for p in Settings.kubernetes_version.split(".")[:2])
Result = tuple[str, str] | None  # (forbidden reason, detail) of a failed check, None: allowed


# --- namespace labels ----------------------------------------------------------------------

def _parse_level(value: str) -> tuple[str, str | None]:
    if value in LEVELS:
        return value, None
    return "restricted", "must be one of " + ", ".join(LEVELS)  # fails closed


def _parse_version(value: str) -> tuple[Version | None, str | None]:
    """(version, problem); None is ``latest`` (also what a bad value counts as)."""
    if value == "latest":
        return None, None
    match = _VERSION.match(value)
    if not match:
        return None, 'must be "latest" or "v1.x"'
    return (1, int(match.group(1))), None


def label_causes(labels: dict | None) -> list[dict]:
    """The 422 causes for pod-security labels with bad values, in the plugin's order."""
    causes = []
    for mode in _MODES:
        for key, parse in ((PREFIX + mode, _parse_level),
                           (PREFIX + mode + "-version", _parse_version)):
            if key in (labels or {}):
                problem = parse(labels[key])[1]
                if problem:
                    causes.append(errors.invalid_value(f"metadata.labels[{key}]", labels[key],
                                                       problem))
    return causes


def admit_namespace(namespace: dict) -> None:
    """Namespace create: every pod-security label must hold a valid level or version."""
    causes = label_causes(namespace["metadata"].get("labels"))
    if causes:
        raise errors.invalid(resources.NAMESPACES, namespace["metadata"]["name"], causes)


def enforced(labels: dict | None) -> tuple[str, Version | None]:
    """(level, version) a namespace enforces; version None is ``latest``. No label:
    privileged. A bad level counts as restricted, a bad version as latest."""
    labels = labels or {}
    level = _parse_level(labels[ENFORCE])[0] if ENFORCE in labels else "privileged"
    version = _parse_version(labels[ENFORCE_VERSION])[0] if ENFORCE_VERSION in labels else None
    return level, version


def policy_name(level: str, version: Version | None) -> str:
    return f"{level}:{'latest' if version is None else f'v{version[0]}.{version[1]}'}"


# --- pod admission -------------------------------------------------------------------------

def admit_pod(namespace: dict | None, pod: dict) -> None:
    """Pod create: 403 when the pod violates the level its namespace enforces."""
    why = violation((namespace or {}).get("metadata", {}).get("labels"), pod)
    if why:
        raise errors.forbidden(resources.PODS, pod["metadata"]["name"], why)


def violation(labels: dict | None, pod: dict) -> str | None:
    """``violates PodSecurity "<level>:<version>": ...`` for a pod (or a pod template:
    ``metadata`` and ``spec``) in a namespace with these labels, or None when allowed."""
    level, version = enforced(labels)
    found = evaluate(level, version, pod.get("metadata") or {}, pod.get("spec") or {})
    if not found:
        return None
    return f'violates PodSecurity "{policy_name(level, version)}": {forbidden_detail(found)}'


def forbidden_detail(found: list[tuple[str, str]]) -> str:
    return ", ".join(f"{reason} ({detail})" if detail else reason for reason, detail in found)


def evaluate(level: str, version: Version | None, metadata: dict,
             spec: dict) -> list[tuple[str, str]]:
    """The (reason, detail) of every check the pod fails at that level and version."""
    if level == "privileged":
        return []
    newest = min(SERVER_VERSION, max(c.versions[-1][0] for c in CHECKS))
    at = newest if version is None or version > newest else version
    active = {}
    for check in CHECKS:
        fn = check.at(at)
        if fn is not None and (check.level == "baseline" or level == "restricted"):
            active[check.id] = (check, fn)
    overridden = {o for check, _ in active.values() if check.level == "restricted"
                  for o in check.overrides}
    order = sorted(i for i, (c, _) in active.items() if c.level == "baseline") + \
        sorted(i for i, (c, _) in active.items() if c.level == "restricted")
    results = (active[i][1](metadata, spec) for i in order if i not in overridden)
    return [r for r in results if r is not None]


@dataclass(frozen=True)
class Check:
    id: str
    level: str  # baseline or restricted
    versions: tuple[tuple[Version, Callable[[dict, dict], Result]], ...]  # increasing
    overrides: tuple[str, ...] = ()  # baseline checks this one replaces at restricted

    def at(self, version: Version):
        found = None
        for minimum, fn in self.versions:
            if minimum <= version:
                found = fn
        return found


# --- helpers as in policy/helpers.go and visitor.go ------------------------------------------

def _join_quote(items) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _containers(spec: dict) -> list[dict]:
    return [c for group in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(group) or []]


def _sc(obj: dict) -> dict:
    return obj.get("securityContext") or {}


def _named(containers: list[str]) -> str:
    return f"{_plural('container', 'containers', len(containers))} {_join_quote(containers)}"


def _go_quote(text: str) -> str:
    """Go's %q of a string."""
    escapes = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n",
               "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    out = []
    for ch in text:
        if ch in escapes:
            out.append(escapes[ch])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return '"' + "".join(out) + '"'


def _windows(spec: dict) -> bool:
    return (spec.get("os") or {}).get("name") == "windows"


def _user_namespace(spec: dict) -> bool:
    return spec.get("hostUsers") is False


def _unless(skip: Callable[[dict], bool], check: Callable[[dict, dict], Result]):
    """A check's later version that allows some pods outright (Windows, user namespaces)."""
    def versioned(metadata: dict, spec: dict) -> Result:
        return None if skip(spec) else check(metadata, spec)
    return versioned


def _setters(pod_bad: bool, containers: list[str]) -> list[str]:
    setters = ["pod"] if pod_bad else []
    if containers:
        setters.append(_named(containers))
    return setters


# --- baseline checks ---------------------------------------------------------------------------

_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _app_armor_profile(metadata: dict, spec: dict) -> Result:
    bad_values: set[str] = set()

    def bad(obj: dict) -> bool:
        profile = _sc(obj).get("appArmorProfile")
        if profile is not None and profile.get("type") not in ("RuntimeDefault", "Localhost"):
            bad_values.add(profile.get("type") or "")
            return True
        return False

    setters = _setters(bad(spec), [c.get("name", "") for c in _containers(spec) if bad(c)])
    annotations = sorted(
        f"{key}={_go_quote(value)}" for key, value in (metadata.get("annotations") or {}).items()
        if key.startswith(_APPARMOR_ANNOTATION)
        and not (value in ("", "runtime/default") or value.startswith("localhost/")))
    values = sorted(bad_values) + annotations
    if annotations:
        setters.append(_plural("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    return (_plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(values)),
            f"{' and '.join(setters)} must not set AppArmor profile type to "
            f"{_join_quote(values)}")


_DEFAULT_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT"}


def _capabilities_baseline(metadata: dict, spec: dict) -> Result:
    bad, added = [], set()
    for container in _containers(spec):
        extra = [c for c in (_sc(container).get("capabilities") or {}).get("add") or []
                 if c not in _DEFAULT_CAPABILITIES]
        if extra:
            bad.append(container.get("name", ""))
            added.update(extra)
    if not bad:
        return None
    return ("non-default capabilities", f"{_named(bad)} must not include "
            f"{_join_quote(sorted(added))} in securityContext.capabilities.add")


def _host_namespaces(metadata: dict, spec: dict) -> Result:
    found = [f"{field}=true" for field in ("hostNetwork", "hostPID", "hostIPC")
             if spec.get(field)]
    return ("host namespaces", ", ".join(found)) if found else None


def _host_path_volumes(metadata: dict, spec: dict) -> Result:
    names = [v.get("name", "") for v in spec.get("volumes") or []
             if v.get("hostPath") is not None]
    if not names:
        return None
    return "hostPath volumes", f"{_plural('volume', 'volumes', len(names))} {_join_quote(names)}"


def _host_ports(metadata: dict, spec: dict) -> Result:
    bad, ports = [], set()
    for container in _containers(spec):
        used = [str(p["hostPort"]) for p in container.get("ports") or [] if p.get("hostPort")]
        if used:
            bad.append(container.get("name", ""))
            ports.update(used)
    if not bad:
        return None
    return ("hostPort", f"{_named(bad)} {_plural('uses', 'use', len(bad))} "
            f"{_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}")


def _hosts(handler: dict | None) -> list[str]:
    handler = handler or {}
    return [h for kind in ("httpGet", "tcpSocket") if (h := (handler.get(kind) or {}).get("host"))]


def _host_probes_and_lifecycle(metadata: dict, spec: dict) -> Result:
    bad, hosts = set(), set()
    for container in _containers(spec):
        lifecycle = container.get("lifecycle") or {}
        found = [h for handler in (container.get("livenessProbe"),
                                   container.get("readinessProbe"),
                                   container.get("startupProbe"), lifecycle.get("postStart"),
                                   lifecycle.get("preStop"))
                 for h in _hosts(handler)]
        if found:
            bad.add(container.get("name", ""))
            hosts.update(found)
    if not bad:
        return None
    return ("probe or lifecycle host",
            f"{_named(sorted(bad))} {_plural('uses', 'use', len(bad))} "
            f"{_plural('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} "
            f"{_join_quote(sorted(hosts))}")


def _privileged(metadata: dict, spec: dict) -> Result:
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("privileged")]
    if not bad:
        return None
    return "privileged", f"{_named(bad)} must not set securityContext.privileged=true"


def _proc_mount(metadata: dict, spec: dict) -> Result:
    bad, types = [], set()
    for container in _containers(spec):
        mount = _sc(container).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(container.get("name", ""))
            types.add(mount)
    if not bad:
        return None
    return ("procMount", f"{_named(bad)} must not set securityContext.procMount to "
            f"{_join_quote(sorted(types))}")


def _se_linux_options(allowed_types: set[str]):
    def check(metadata: dict, spec: dict) -> Result:
        bad_types: set[str] = set()
        seen = {"user": False, "role": False}

        def bad(obj: dict) -> bool:
            options = _sc(obj).get("seLinuxOptions")
            if options is None:
                return False
            valid = True
            if options.get("type", "") not in allowed_types:
                valid = False
                bad_types.add(options.get("type", ""))
            for field in ("user", "role"):
                if options.get(field):
                    seen[field] = True
                    valid = False
            return not valid

        setters = _setters(bad(spec), [c.get("name", "") for c in _containers(spec) if bad(c)])
        if not setters:
            return None
        data = [f"{_plural('type', 'types', len(bad_types))} {_join_quote(sorted(bad_types))}"
                ] if bad_types else []
        data += [f"{field} may not be set" for field in ("user", "role") if seen[field]]
        return ("seLinuxOptions", f"{' and '.join(setters)} set forbidden "
                f"securityContext.seLinuxOptions: {'; '.join(data)}")
    return check


_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}
_SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
_SECCOMP_CONTAINER_ANNOTATION = "container.seccomp.security.alpha.kubernetes.io/"


def _seccomp_annotations(metadata: dict, spec: dict) -> Result:
    """Before v1.19 seccomp was set by annotations."""
    annotations = metadata.get("annotations") or {}
    keys = [_SECCOMP_POD_ANNOTATION] + [_SECCOMP_CONTAINER_ANNOTATION + c.get("name", "")
                                        for c in _containers(spec)]
    forbidden = {f"{key}={_go_quote(annotations[key])}" for key in keys
                 if key in annotations
                 and annotations[key] not in ("runtime/default", "docker/default")
                 and not annotations[key].startswith("localhost/")}
    if not forbidden:
        return None
    return ("seccompProfile", f"forbidden {_plural('annotation', 'annotations', len(forbidden))} "
            f"{', '.join(sorted(forbidden))}")


def _valid_seccomp(obj: dict) -> bool | None:
    """None: no seccompProfile set; else whether its type is RuntimeDefault or Localhost."""
    profile = _sc(obj).get("seccompProfile")
    if profile is None:
        return None
    return profile.get("type") in ("RuntimeDefault", "Localhost")


def _bad_seccomp(spec: dict, containers: list[dict]) -> Result:
    """The pod or containers that set a seccompProfile type other than those two."""
    pod_bad = _valid_seccomp(spec) is False
    if not pod_bad and not containers:
        return None
    values = {(_sc(o).get("seccompProfile") or {}).get("type") or ""
              for o in containers + ([spec] if pod_bad else [])}
    setters = _setters(pod_bad, [c.get("name", "") for c in containers])
    return ("seccompProfile", f"{' and '.join(setters)} must not set "
            f"securityContext.seccompProfile.type to {_join_quote(sorted(values))}")


def _seccomp_profile_baseline(metadata: dict, spec: dict) -> Result:
    return _bad_seccomp(spec, [c for c in _containers(spec) if _valid_seccomp(c) is False])


def _sysctls(allowed: set[str]):
    def check(metadata: dict, spec: dict) -> Result:
        bad = [s.get("name", "") for s in _sc(spec).get("sysctls") or []
               if s.get("name", "") not in allowed]
        return ("forbidden sysctls", ", ".join(bad)) if bad else None
    return check


_SYSCTLS_1_0 = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
                "net.ipv4.ip_unprivileged_port_start"}
_SYSCTLS_1_27 = _SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
_SYSCTLS_1_29 = _SYSCTLS_1_27 | {"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                                 "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
_SYSCTLS_1_32 = _SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
_SYSCTLS_1_37 = _SYSCTLS_1_32 | {"net.ipv4.tcp_slow_start_after_idle",
                                 "net.ipv4.tcp_notsent_lowat"}


def _host_process(obj: dict) -> bool:
    return bool((_sc(obj).get("windowsOptions") or {}).get("hostProcess"))


def _windows_host_process(metadata: dict, spec: dict) -> Result:
    setters = _setters(_host_process(spec),
                       [c.get("name", "") for c in _containers(spec) if _host_process(c)])
    if not setters:
        return None
    return ("hostProcess", f"{' and '.join(setters)} must not set "
            f"securityContext.windowsOptions.hostProcess=true")


# --- restricted checks -------------------------------------------------------------------------

def _allow_privilege_escalation(metadata: dict, spec: dict) -> Result:
    bad = [c.get("name", "") for c in _containers(spec)
           if _sc(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return ("allowPrivilegeEscalation != false",
            f"{_named(bad)} must set securityContext.allowPrivilegeEscalation=false")


def _capabilities_restricted(metadata: dict, spec: dict) -> Result:
    missing_drop, adding, added = [], [], set()
    for container in _containers(spec):
        capabilities = _sc(container).get("capabilities")
        if capabilities is None:
            missing_drop.append(container.get("name", ""))
            continue
        if "ALL" not in (capabilities.get("drop") or []):
            missing_drop.append(container.get("name", ""))
        extra = [c for c in capabilities.get("add") or [] if c != "NET_BIND_SERVICE"]
        if extra:
            adding.append(container.get("name", ""))
            added.update(extra)
    details = []
    if missing_drop:
        details.append(f'{_named(missing_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(f"{_named(adding)} must not include {_join_quote(sorted(added))} in "
                       f"securityContext.capabilities.add")
    return ("unrestricted capabilities", "; ".join(details)) if details else None


_ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                    "persistentVolumeClaim", "projected", "secret")
_IMAGE_VOLUMES_ALLOWED = SERVER_VERSION >= (1, 33)  # allowed in every version since 1.33
_RESTRICTED_VOLUMES = ("hostPath", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "nfs",
                       "iscsi", "glusterfs", "rbd", "flexVolume", "cinder", "cephfs", "flocker",
                       "fc", "azureFile", "vsphereVolume", "quobyte", "azureDisk",
                       "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos")


def _restricted_volumes(metadata: dict, spec: dict) -> Result:
    allowed = _ALLOWED_VOLUMES + (("image",) if _IMAGE_VOLUMES_ALLOWED else ())
    bad, types = [], set()
    for volume in spec.get("volumes") or []:
        if any(volume.get(kind) is not None for kind in allowed):
            continue
        bad.append(volume.get("name", ""))
        types.add(next((kind for kind in _RESTRICTED_VOLUMES if volume.get(kind) is not None),
                       "unknown"))
    if not bad:
        return None
    return ("restricted volume types",
            f"{_plural('volume', 'volumes', len(bad))} {_join_quote(bad)} "
            f"{_plural('uses', 'use', len(bad))} "
            f"{_plural('restricted volume type', 'restricted volume types', len(types))} "
            f"{_join_quote(sorted(types))}")


def _run_as_non_root(metadata: dict, spec: dict) -> Result:
    pod_value = _sc(spec).get("runAsNonRoot")
    explicit, implicit = [], []
    for container in _containers(spec):
        value = _sc(container).get("runAsNonRoot")
        if value is not None:
            if not value:
                explicit.append(container.get("name", ""))
        elif not pod_value:
            implicit.append(container.get("name", ""))
    setters = _setters(pod_value is not None and not pod_value, explicit)
    if setters:
        return ("runAsNonRoot != true",
                f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false")
    if implicit:
        return ("runAsNonRoot != true",
                f"pod or {_named(implicit)} must set securityContext.runAsNonRoot=true")
    return None


def _root(obj: dict) -> bool:
    value = _sc(obj).get("runAsUser")
    return type(value) is int and value == 0


def _run_as_user(metadata: dict, spec: dict) -> Result:
    setters = _setters(_root(spec), [c.get("name", "") for c in _containers(spec) if _root(c)])
    if not setters:
        return None
    return "runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0"


def _seccomp_profile_restricted(metadata: dict, spec: dict) -> Result:
    bad = _bad_seccomp(spec, [c for c in _containers(spec) if _valid_seccomp(c) is False])
    if bad:
        return bad
    implicit = [c.get("name", "") for c in _containers(spec)
                if _valid_seccomp(c) is None and not _valid_seccomp(spec)]
    if implicit:
        return ("seccompProfile", f"pod or {_named(implicit)} must set "
                f'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"')
    return None


# --- the registry (policy/check_*.go) ----------------------------------------------------------

CHECKS = (
    Check("appArmorProfile", "baseline", (((1, 0), _app_armor_profile),)),
    Check("capabilities_baseline", "baseline", (((1, 0), _capabilities_baseline),)),
    Check("hostNamespaces", "baseline", (((1, 0), _host_namespaces),)),
    Check("hostPathVolumes", "baseline", (((1, 0), _host_path_volumes),)),
    Check("hostPorts", "baseline", (((1, 0), _host_ports),)),
    Check("hostProbesAndHostLifecycle", "baseline", (((1, 34), _host_probes_and_lifecycle),)),
    Check("privileged", "baseline", (((1, 0), _privileged),)),
    Check("procMount", "baseline", (((1, 0), _proc_mount),
                                    ((1, 35), _unless(_user_namespace, _proc_mount)))),
    Check("seLinuxOptions", "baseline", (
        ((1, 0), _se_linux_options(_SELINUX_TYPES)),
        ((1, 31), _se_linux_options(_SELINUX_TYPES | {"container_engine_t"})))),
    Check("seccompProfile_baseline", "baseline", (((1, 0), _seccomp_annotations),
                                                  ((1, 19), _seccomp_profile_baseline))),
    Check("sysctls", "baseline", (((1, 0), _sysctls(_SYSCTLS_1_0)),
                                  ((1, 27), _sysctls(_SYSCTLS_1_27)),
                                  ((1, 29), _sysctls(_SYSCTLS_1_29)),
                                  ((1, 32), _sysctls(_SYSCTLS_1_32)),
                                  ((1, 37), _sysctls(_SYSCTLS_1_37)))),
    Check("windowsHostProcess", "baseline", (((1, 0), _windows_host_process),)),
    Check("allowPrivilegeEscalation", "restricted", (
        ((1, 8), _allow_privilege_escalation),
        ((1, 25), _unless(_windows, _allow_privilege_escalation)))),
    Check("capabilities_restricted", "restricted", (
        ((1, 22), _capabilities_restricted),
        ((1, 25), _unless(_windows, _capabilities_restricted))),
        overrides=("capabilities_baseline",)),
    Check("procMount_restricted", "restricted", (((1, 35), _proc_mount),),
          overrides=("procMount",)),
    Check("restrictedVolumes", "restricted", (((1, 0), _restricted_volumes),),
          overrides=("hostPathVolumes",)),
    Check("runAsNonRoot", "restricted", (((1, 0), _run_as_non_root),
                                         ((1, 35), _unless(_user_namespace, _run_as_non_root)))),
    Check("runAsUser", "restricted", (((1, 23), _run_as_user),
                                      ((1, 35), _unless(_user_namespace, _run_as_user)))),
    Check("seccompProfile_restricted", "restricted", (
        ((1, 19), _seccomp_profile_restricted),
        ((1, 25), _unless(_windows, _seccomp_profile_restricted))),
        overrides=("seccompProfile_baseline",)),
)
