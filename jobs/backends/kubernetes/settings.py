"""The settings a datacenter's Kubernetes backend owns: how the portal reaches the cluster, how
pods mount the PFS, who starts a job's pods together, the pods' ids and GPU nodes.

They are kept in ``Datacenter.backend_settings`` under the names of ``KubernetesSettingsForm``'s
fields, which the admin and ``adddatacenter`` show and errors name (``kube_volume``, …); the
form's rules are the settings' (``accounts.execution``). The backend reads them with
``kube_settings``. Pure: no API server here (the manifests read them too).
"""

from __future__ import annotations

import argparse
import ipaddress
import json

from django import forms
from django.core.validators import RegexValidator
from django.db import models

from accounts.execution import BackendKind
from paddlecloud_core.contract import STOP_GRACE_SECONDS
from paddlecloud_core.quantity import QuantityError, parse_bytes

# What a datacenter's ``kube_volume`` may be: one volume source of these kinds, whose root holds
# home/ and public/. Each but ``persistentVolume`` is put in every pod as it is given; a
# ``persistentVolume`` holds a PersistentVolume's source (the way for CSI drivers such as
# CephFS's, whose volumes are not inline): the portal makes a PersistentVolume and a claim bound
# to it in each user namespace, as a claim is seen in its own namespace only.
KUBE_VOLUME_SOURCES = ("nfs", "cephfs", "csi", "hostPath", "persistentVolume")
PERSISTENT_VOLUME_SOURCES = ("csi", "nfs", "cephfs", "hostPath", "local")
# What a csi persistentVolume's volumeHandle holds for the user namespace it is made in: a
# driver that takes one handle for one volume gets a handle of each namespace's; one that
# takes the same handle many times (EFS, Filestore, GCS FUSE) the same handle everywhere.
NAMESPACE_FIELD = "{namespace}"
KUBE_VOLUME_CLAIM_HINT = (
    "a persistentVolumeClaim is seen in its own namespace only, and jobs run in each user's: "
    'give the volume instead, as {"persistentVolume": {"csi": {…}}}, and the portal makes a '
    "PersistentVolume and a claim bound to it in each user namespace")


def kube_volume_problem(source) -> str | None:
    """Why ``source`` cannot be a datacenter's ``kube_volume``, or None."""
    if isinstance(source, dict) and "persistentVolumeClaim" in source:
        return KUBE_VOLUME_CLAIM_HINT
    if (not isinstance(source, dict) or len(source) != 1
            or next(iter(source)) not in KUBE_VOLUME_SOURCES
            or not isinstance(next(iter(source.values())), dict)):
        return ("one volume source: an object with one key, "
                + ", ".join(KUBE_VOLUME_SOURCES) + ", holding its settings")
    kind, settings_ = next(iter(source.items()))
    if kind == "persistentVolume" and (
            len(settings_) != 1 or next(iter(settings_)) not in PERSISTENT_VOLUME_SOURCES
            or not isinstance(next(iter(settings_.values())), dict)):
        return ("persistentVolume holds one PersistentVolume source: "
                + ", ".join(PERSISTENT_VOLUME_SOURCES)
                + ', e.g. {"persistentVolume": {"csi": {"driver": "cephfs.csi.ceph.com", …}}}')
    if kind == "csi" and not isinstance(settings_.get("driver"), str):
        return "a csi volume names its driver"
    if kind == "persistentVolume" and "csi" in settings_:
        return _volume_handle_problem(settings_["csi"])
    return None


def _volume_handle_problem(csi: dict) -> str | None:
    handle = csi.get("volumeHandle")
    example = ('e.g. "fs-0123456789abcdef0::fsap-0123456789abcdef0" (EFS, one for every '
               'namespace) or "pfs-{namespace}"')
    if not isinstance(csi.get("driver"), str):
        return "a csi volume names its driver"
    if not isinstance(handle, str) or not handle:
        return ("a csi persistentVolume names its volumeHandle: the driver's handle of the "
                "PFS root, the same for every user namespace, or a template in which "
                f"{NAMESPACE_FIELD} is each namespace, {example}")
    if "{" in handle.replace(NAMESPACE_FIELD, "") or "}" in handle.replace(NAMESPACE_FIELD, ""):
        return (f"volumeHandle {handle!r}: {NAMESPACE_FIELD} is the only field a handle may "
                f"hold, {example}")
    return None


def volume_handle(csi: dict, namespace: str) -> str:
    """A user namespace's handle of the datacenter's CSI volume (``volumeHandle`` with
    ``{namespace}`` filled in)."""
    return csi["volumeHandle"].replace(NAMESPACE_FIELD, namespace)


# What each container of a job asks for and may use of its node's disk (its writable layer, its
# logs, the pod's workspace and home emptyDirs) where the datacenter says nothing; none where
# Kueue decides, as Kueue admits no pod asking for a resource its ClusterQueue does not cover.
EPHEMERAL_STORAGE_DEFAULT = "4Gi"


def _storage_amount(value: str) -> None:
    try:
        parse_bytes(value)
    except QuantityError as exc:
        raise forms.ValidationError(str(exc)) from None


class Scheduler(models.TextChoices):
    DEFAULT = "default", "Kubernetes' own scheduler (the start timeout guards against deadlock)"
    KUEUE = "kueue", "Kueue: jobs wait suspended until a ClusterQueue admits them whole"
    VOLCANO = "volcano", "Volcano: a PodGroup schedules all of a job's pods or none"


# Where a job's pods may connect outside their namespace, DNS and the portal (the NetworkPolicy
# "paddlecloud-egress" of each user namespace): anywhere, by default. The clouds' instance
# metadata (credentials of the node's role on EC2, GCE, Azure) is taken out of every range
# that holds it: a range naming one of these exactly is how an admin lets pods reach it.
DEFAULT_EGRESS = ("0.0.0.0/0", "::/0")
METADATA_ADDRESSES = ("169.254.169.254/32", "fd00:ec2::254/128")


def egress_problem(ranges) -> str | None:
    """Why ``ranges`` cannot be a datacenter's ``kube_egress``, or None."""
    if not isinstance(ranges, list):
        return 'a JSON list of CIDR ranges, e.g. ["10.0.0.0/8", "0.0.0.0/0"]'
    for cidr in ranges:
        try:
            if not isinstance(cidr, str) or "/" not in cidr:
                raise ValueError(cidr)
            ipaddress.ip_network(cidr)
        except ValueError:
            return (f"{cidr!r} is not a CIDR range (an address and a prefix length, host "
                    'bits zero, e.g. "10.0.0.0/8")')
    return None


class Builder(models.TextChoices):
    """Where and how runtime images are built (builder.py has the matrix of managed clusters)."""
    ROOTLESS = "rootless", ("BuildKit rootless in the user's namespace, under the nodes' "
                            "default seccomp and AppArmor profiles")
    UNCONFINED = "unconfined", ("BuildKit rootless with seccomp and AppArmor unconfined, in the "
                                "namespace kube_builder_namespace (made by the administrator)")
    PORTAL = "portal", ("buildah on the portal's machine (its worker), pushed to the build "
                        "registry, which the pods pull from: nothing of the build in the cluster")
    OFF = "off", "no image builds on this datacenter"


class JSONSetting(forms.JSONField):
    """A JSON setting whose empty value is ``empty`` ({} or []), not None; its default
    ``default`` (a callable), else empty."""

    def __init__(self, *, empty: type, default=None, **kwargs):
        super().__init__(required=False, initial=default or empty, **kwargs)
        self.empty = empty

    def clean(self, value):
        cleaned = super().clean(value)
        return self.empty() if cleaned is None else cleaned


class KubernetesSettingsForm(forms.Form):
    kube_in_cluster = forms.BooleanField(
        label="in-cluster config", required=False, initial=False,
        help_text="Use the service account of the pod the portal runs in.")
    kubeconfig = forms.CharField(
        max_length=1024, required=False, initial="",
        help_text="Path to a kubeconfig file; empty means the default (~/.kube/config).")
    kube_context = forms.CharField(label="kubeconfig context", max_length=253, required=False,
                                   initial="")
    kube_volume = JSONSetting(
        empty=dict, label="PFS volume in pods",
        help_text='How pods mount the PFS root (the directory holding home/ and public/): one '
                  'Kubernetes volume source, e.g. {"cephfs": {"monitors": ["10.0.0.1:6789"], '
                  '"user": "admin", "secretRef": {"name": "ceph-secret"}, "path": "/"}}, '
                  '{"nfs": {"server": "nfs.example.com", "path": "/pfs"}}, '
                  '{"hostPath": {"path": "/mnt/pfs"}}, or a PersistentVolume source the '
                  'portal makes a volume and claim of in each user namespace, '
                  '{"persistentVolume": {"csi": {"driver": "efs.csi.aws.com", "volumeHandle": '
                  '"fs-0123456789abcdef0::fsap-0123456789abcdef0"}}}: its volumeHandle the '
                  'same in every namespace, or a template in which {namespace} is each '
                  'namespace ("pfs-{namespace}"), as the driver needs.')
    kube_scheduler = forms.ChoiceField(
        label="gang scheduler", choices=Scheduler.choices, initial=Scheduler.DEFAULT,
        help_text="Who decides that a job's pods start together. Kueue and Volcano must be "
                  "installed in the cluster (docs/admin/kubernetes.md).")
    kube_queue = forms.CharField(
        label="scheduler queue", max_length=253, required=False, initial="",
        validators=[RegexValidator(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                                   "a Kubernetes object name")],
        help_text="Kueue: the ClusterQueue each user's LocalQueue feeds (required). Volcano: "
                  "the Queue of the jobs' PodGroups; empty means \"default\".")
    kube_run_as_user = forms.IntegerField(
        label="pods' user id", min_value=0, required=False,
        help_text="The uid every container of a job runs as, and so the owner of what jobs "
                  "write in PFS. Empty means the portal's own uid, so that the portal can "
                  "clear away what jobs leave and users can delete their output.")
    kube_run_as_group = forms.IntegerField(
        label="pods' group id", min_value=0, required=False,
        help_text="Empty means the portal's gid.")
    kube_ephemeral_storage = forms.CharField(
        label="ephemeral storage per container", max_length=32, required=False, initial="",
        validators=[_storage_amount],
        help_text="The ephemeral-storage request and limit of each container of a job (its "
                  "writable layer and logs, the pod's workspace and home): the kubelet evicts "
                  "a pod that writes more. Empty means " + EPHEMERAL_STORAGE_DEFAULT + ", or "
                  "none with Kueue (which admits no pod asking for ephemeral-storage unless "
                  "the ClusterQueue covers it: set it once yours does); 0 means none.")
    kube_termination_grace = forms.IntegerField(
        label="termination grace (seconds)", min_value=0, required=False,
        initial=STOP_GRACE_SECONDS,
        help_text="How long a stopped job's containers have between SIGTERM and SIGKILL "
                  "(terminationGracePeriodSeconds): give a job that checkpoints when it is "
                  f"stopped the time it needs. Empty means {STOP_GRACE_SECONDS}.")
    kube_gpu_tolerations = JSONSetting(
        empty=list, label="GPU tolerations",
        help_text='Tolerations of the pods of replicas that ask for GPUs, e.g. [{"key": '
                  '"nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}].')
    kube_gpu_node_selector = JSONSetting(
        empty=dict, label="GPU node selector",
        help_text='Node labels the pods of GPU replicas need, e.g. '
                  '{"nvidia.com/gpu.present": "true"}.')
    kube_egress = JSONSetting(
        empty=list, default=lambda: list(DEFAULT_EGRESS), label="pods' egress",
        help_text="Where a job's pods may connect, beside their own namespace, the cluster's "
                  "DNS and the portal: CIDR ranges, e.g. [\"10.0.0.0/8\"]; [] for nowhere "
                  "else. The default is anywhere but the cloud's instance metadata "
                  "(169.254.169.254), which is taken out of every range unless given on its "
                  "own. Enforced by the cluster's network plugin (one that implements "
                  "NetworkPolicy).")
    kube_builder = forms.ChoiceField(
        label="image builder", choices=Builder.choices, initial=Builder.ROOTLESS,
        required=False,  # a form from before this setting: the default
        help_text="How runtime images are built: rootless needs nodes that let a process make "
                  "a user namespace (not GKE on COS, nor kubelets with --seccomp-default); "
                  "unconfined works there, in a namespace you make for it; portal builds on "
                  "the portal's machine with buildah, for clusters where nothing can build "
                  "(GKE Autopilot); off builds nothing.")
    kube_builder_namespace = forms.CharField(
        label="builder namespace", max_length=63, required=False, initial="",
        validators=[RegexValidator(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "a namespace name")],
        help_text="The unconfined builder's namespace: labelled pod-security.kubernetes.io/"
                  "enforce=privileged and app.kubernetes.io/managed-by=paddlecloud.")

    def clean(self):
        values = super().clean()
        if "kube_builder" in values:
            values["kube_builder"] = values["kube_builder"] or Builder.ROOTLESS
        # (imported here: buildah's module reads the jobs' files, and the backends' registry
        # imports this one where Django is not set up: the sandbox's probes, the tests' tools)
        from ..buildah import buildah_problem

        if values.get("kube_builder") == Builder.PORTAL and (problem := buildah_problem()):
            self.add_error("kube_builder", f"the portal builder builds on the portal's "
                                           f"machine, with buildah: {problem}")
        if values.get("kube_builder") == Builder.UNCONFINED \
                and not values.get("kube_builder_namespace") \
                and "kube_builder_namespace" not in self.errors:
            self.add_error("kube_builder_namespace",
                           "required with the unconfined builder: the namespace its pods run "
                           "in (Pod Security privileged, labelled "
                           "app.kubernetes.io/managed-by=paddlecloud)")
        if (volume := values.get("kube_volume")) and (problem := kube_volume_problem(volume)):
            self.add_error("kube_volume", problem)
        if problem := egress_problem(values.get("kube_egress", [])):
            self.add_error("kube_egress", problem)
        tolerations = values.get("kube_gpu_tolerations", [])
        if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
            self.add_error("kube_gpu_tolerations", "a JSON list of toleration objects")
        selector = values.get("kube_gpu_node_selector", {})
        if not isinstance(selector, dict) or not all(isinstance(v, str)
                                                     for v in selector.values()):
            self.add_error("kube_gpu_node_selector",
                           'an object of node labels, e.g. {"gpu": "true"}')
        if values.get("kube_scheduler") == Scheduler.KUEUE and not values.get("kube_queue") \
                and "kube_queue" not in self.errors:
            self.add_error("kube_queue", "required with Kueue: the ClusterQueue users' jobs go to")
        return values


def kube_settings(datacenter):
    """The datacenter's Kubernetes settings, as attributes (``kube_settings(dc).kube_volume``)."""
    return KUBERNETES.settings_of(datacenter)


def termination_grace(datacenter) -> int:
    """Seconds a job's containers have between SIGTERM and SIGKILL."""
    grace = kube_settings(datacenter).kube_termination_grace
    return STOP_GRACE_SECONDS if grace is None else grace


def ephemeral_storage(datacenter) -> int:
    """Bytes of ephemeral storage each container of a job asks for and may use; 0: none."""
    settings_ = kube_settings(datacenter)
    if settings_.kube_ephemeral_storage:
        return parse_bytes(settings_.kube_ephemeral_storage)
    if settings_.kube_scheduler == Scheduler.KUEUE:
        return 0
    return parse_bytes(EPHEMERAL_STORAGE_DEFAULT)


def spec_problems(datacenter, spec: dict) -> list[tuple[str, str]]:
    """What a Kubernetes datacenter cannot run of a submission: Kueue admits a job at one
    size, so a range of trainers is not offered where it decides."""
    if spec["trainers_min"] is not None \
            and kube_settings(datacenter).kube_scheduler == Scheduler.KUEUE:
        return [("trainers", f"a range ({spec['trainers_min']}:{spec['trainers']}) is not "
                             f"offered in datacenter {datacenter.name!r}: Kueue admits its "
                             "jobs at one size; give a number")]
    return []


def _json_of(kind: type, example: str):
    """An argparse type: the text as JSON of ``kind`` (a dict, a list), else what to write."""
    def parse(text: str):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
        if not isinstance(value, kind):
            raise argparse.ArgumentTypeError(example)
        return value
    return parse


_json_object = _json_of(dict, 'a JSON object, e.g. {"hostPath": {"path": "/mnt/pfs"}}')
_json_list = _json_of(list, 'a JSON list, e.g. [{"key": "nvidia.com/gpu", "operator": '
                            '"Exists"}]')


def arguments(parser) -> None:
    """``adddatacenter``'s options of these settings (each ``dest`` a setting's name)."""
    parser.add_argument("--kubeconfig", help="kubeconfig path (kubernetes backend)")
    parser.add_argument("--kube-context", help="kubeconfig context (kubernetes backend)")
    parser.add_argument("--in-cluster", dest="kube_in_cluster", action="store_true",
                        default=None, help="use the portal pod's service account")
    parser.add_argument("--no-in-cluster", dest="kube_in_cluster", action="store_false")
    parser.add_argument("--kube-volume", type=_json_object, metavar="JSON",
                        help='how pods mount the PFS root: one Kubernetes volume source, '
                             'e.g. \'{"nfs": {"server": "nfs.example.com", "path": '
                             '"/exports/pfs/dc1"}}\', or {"persistentVolume": '
                             '{"csi": {…}}} for a volume the portal makes a '
                             'PersistentVolume and claim of in each user namespace (its '
                             'volumeHandle the same in all, or with {namespace} in it)')
    parser.add_argument("--scheduler", dest="kube_scheduler", choices=Scheduler.values,
                        help="who starts a job's pods together (default: Kubernetes')")
    parser.add_argument("--queue", dest="kube_queue",
                        help="Kueue's ClusterQueue, or Volcano's Queue, of the jobs")
    parser.add_argument("--run-as-user", dest="kube_run_as_user", type=int, metavar="UID",
                        help="uid of the jobs' containers (default: the portal's)")
    parser.add_argument("--run-as-group", dest="kube_run_as_group", type=int,
                        metavar="GID", help="gid of the jobs' containers (default: the "
                                            "portal's)")
    parser.add_argument("--ephemeral-storage", dest="kube_ephemeral_storage", metavar="BYTES",
                        help="ephemeral-storage request and limit of each job container, "
                             "e.g. 8Gi (default: " + EPHEMERAL_STORAGE_DEFAULT + ", none "
                             "with Kueue; 0: none)")
    parser.add_argument("--termination-grace", dest="kube_termination_grace", type=int,
                        metavar="SECONDS", help="seconds a stopped job's containers have "
                                                "after SIGTERM (default: "
                                                f"{STOP_GRACE_SECONDS})")
    parser.add_argument("--egress", dest="kube_egress", type=_json_list, metavar="JSON",
                        help="CIDR ranges jobs' pods may connect to beside their namespace, "
                             "DNS and the portal, a JSON list (default: anywhere but the "
                             "cloud's instance metadata)")
    parser.add_argument("--builder", dest="kube_builder", choices=Builder.values,
                        help="how runtime images are built (default: rootless)")
    parser.add_argument("--builder-namespace", dest="kube_builder_namespace",
                        help="the unconfined builder's namespace, made by you")
    parser.add_argument("--gpu-tolerations", dest="kube_gpu_tolerations",
                        type=_json_list, metavar="JSON",
                        help="tolerations of GPU replicas' pods, a JSON list")
    parser.add_argument("--gpu-node-selector", dest="kube_gpu_node_selector",
                        type=_json_object, metavar="JSON",
                        help="node labels GPU replicas' pods need, a JSON object")


KUBERNETES = BackendKind(
    name="kubernetes", label="Kubernetes",
    backend="jobs.backends.kubernetes.backend.KubernetesBackend",
    settings_form=KubernetesSettingsForm, spec_problems=spec_problems, reads_capacity=True,
    arguments=arguments, place="jobs.backends.kubernetes.client.api_server")
