"""What a cluster's nodes offer jobs: a datacenter's capacity from its cluster, as data (the
nodes are listed by ``client``; nothing here talks to the API server).

A node offers its allocatable (``status.allocatable``: what its kubelet leaves for pods) when
it can take pods at all: its ``Ready`` condition is True and it is not cordoned
(``spec.unschedulable``). Then:

- its CPU and memory count if it has no NoSchedule or NoExecute taint: job pods tolerate
  none (PreferNoSchedule only steers the scheduler, so it is no obstacle);
- its GPUs (``nvidia.com/gpu``, what GPU trainers ask for) count if GPU trainers' pods may go
  there: it has the labels of the datacenter's GPU node selector, and the datacenter's GPU
  tolerations tolerate each of its NoSchedule and NoExecute taints.

So a GPU node tainted for GPU work counts for its GPUs only. The CPU and memory that GPU
jobs use beside their GPUs there are left out: the capacity is one pool for every job, and
jobs without GPUs could not use them — the safe side.
"""

from __future__ import annotations

from paddlecloud_core.quantity import QuantityError, parse_bytes, parse_cpu

from ..base import BackendError, Capacity

GPU = "nvidia.com/gpu"
HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # keep pods off; PreferNoSchedule does not


def nodes_capacity(nodes: list[dict], gpu_tolerations: list[dict],
                   gpu_node_selector: dict[str, str]) -> Capacity:
    """The allocatable of ``nodes`` that job pods may use, added up (the rule above).
    ``BackendError`` if a node's allocatable is not a quantity."""
    cpu = memory = gpu = 0
    for node in nodes:
        if not _takes_pods(node):
            continue
        taints = [taint for taint in (node.get("spec") or {}).get("taints") or []
                  if taint.get("effect") in HARD_EFFECTS]
        if not taints:
            cpu += _allocatable(node, "cpu", parse_cpu)
            memory += _allocatable(node, "memory", parse_bytes)
        labels = node["metadata"].get("labels") or {}
        if (all(labels.get(key) == value for key, value in gpu_node_selector.items())
                and all(any(tolerates(t, taint) for t in gpu_tolerations) for taint in taints)):
            gpu += _allocatable(node, GPU, _count)
    return Capacity(cpu=cpu, memory=memory, gpu=gpu)


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' rule (``ToleratesTaint``): the effect, if given, and the key, if given,
    are the taint's, and the operator ``Exists``, or ``Equal`` (the default) to its value."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator") == "Exists":
        return True
    return (toleration.get("operator") in (None, "", "Equal")
            and toleration.get("value", "") == taint.get("value", ""))


def _takes_pods(node: dict) -> bool:
    """Ready and not cordoned."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ready and not (node.get("spec") or {}).get("unschedulable")


def _allocatable(node: dict, resource: str, parse) -> int:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    if value is None:
        return 0
    try:
        return parse(value)
    except QuantityError as exc:
        raise BackendError(f"node {node['metadata']['name']}: allocatable {resource} "
                           f"{value!r}: {exc}") from None


def _count(value: str) -> int:
    """A count of devices ("8")."""
    if not str(value).isdigit():
        raise QuantityError(f"{value!r} is not a whole number of devices")
    return int(value)
