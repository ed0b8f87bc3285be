"""What a production cluster asks of a job's objects, shown on the real control plane
(``real_kube``: its API server validates and stores them, its scheduler places the pods, the
node agent runs them as the datacenter's uid): containers that work as a uid the image does not
know, with their disk requested and limited and the datacenter's termination grace."""

from __future__ import annotations

import pwd
import shutil

import pytest

from jobs import engine
from jobs.backends.kubernetes.names import object_base
from tests.factories import submit_job
from tests.kube import datacenter_set
from tests.polling import wait
from tests.real_kube import kueue as rest

from .test_backend import NS, state

# A uid that no /etc/passwd names (the node's, which the node agent's containers see): its
# HOME would be "/", where it cannot write.
NAMELESS_UID = 48123
# The trainer: it writes where Python's libraries put their caches (~/.cache, and
# $XDG_CACHE_HOME), says where, and lingers a little so that its pod can be read.
CACHING_TRAINER = """\
import os, pathlib, time
cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"))
(cache / "paddle" / "dataset").mkdir(parents=True, exist_ok=True)
(cache / "paddle" / "dataset" / "uci_housing.data").write_text("cached")
home = pathlib.Path(os.path.expanduser("~"))
(home / ".config").mkdir(exist_ok=True)
print("cached in", cache, "home", home, flush=True)
time.sleep(3)
"""

pytestmark = [pytest.mark.real_kubernetes, pytest.mark.timeout(300)]


@pytest.fixture
def api(real_kube):
    made = rest.Api(real_kube.admin_kubeconfig)
    yield made
    made.close()


def _trainer_pod(api, job) -> dict:
    pods = api.call("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
    return next((p for p in pods if p["metadata"]["name"].startswith(f"{object_base(job)}-tr")),
                None)


@pytest.mark.django_db
@pytest.mark.package(CACHING_TRAINER)
def test_a_job_running_as_a_uid_without_a_name_writes_its_cache_and_asks_for_its_disk(
        real_kube_datacenter, api, alice, datacenter, package, pfs_home, held_starts):
    """The datacenter runs jobs as a uid its images do not name, asks 2Gi of ephemeral
    storage a container and gives stopped jobs 45 s: the trainer writes ~/.cache (HOME and
    XDG_CACHE_HOME on a writable emptyDir) and succeeds; the pods the API server stored and
    the scheduler placed carry the requests, the limits and the grace."""
    with pytest.raises(KeyError):
        pwd.getpwuid(NAMELESS_UID)
    shutil.chown(pfs_home, NAMELESS_UID, NAMELESS_UID)  # the datacenter's uid owns its PFS
    datacenter_set(datacenter, kube_run_as_user=NAMELESS_UID, kube_run_as_group=NAMELESS_UID,
                   kube_ephemeral_storage="2Gi", kube_termination_grace=45)
    job = submit_job(alice, datacenter)
    engine.job_launch(job.pk)
    pod = wait(lambda: _trainer_pod(api, job), timeout=60, message="the trainer's pod")
    assert pod["spec"]["terminationGracePeriodSeconds"] == 45
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        limits, requests = container["resources"]["limits"], container["resources"]["requests"]
        assert requests["ephemeral-storage"] == limits["ephemeral-storage"] == str(2 * 2**30), \
            container["name"]
    wait(lambda: (engine.job_sync(job.pk) or True) and state(job) in ("succeeded", "failed"),
         timeout=120, every=0.3, message="the job to end")
    job.refresh_from_db()
    assert job.state == "succeeded", job.state_reason
    log = (pfs_home / "jobs" / "fit" / "output" / "node_0" / "train.log").read_text()
    assert "cached in /home/paddlecloud/.cache home /home/paddlecloud" in log


# --- the PFS volume on the usual CSI drivers -----------------------------------------------------

# Each driver's documented PersistentVolume (static provisioning) of one shared file system, as
# the datacenter's administrator gives it, and the handle each user namespace's volume gets.
CSI_VOLUMES = {
    # AWS EFS: the file system and an access point, "fs-…[::fsap-…]"; the same in every
    # namespace (the driver mounts one file system for many volumes).
    "efs": ({"driver": "efs.csi.aws.com",
             "volumeHandle": "fs-0123456789abcdef0::fsap-0fedcba9876543210"},
            "fs-0123456789abcdef0::fsap-0fedcba9876543210"),
    # GKE Filestore: "modeInstance/<location>/<instance>/<share>", with its address.
    "filestore": ({"driver": "filestore.csi.storage.gke.io",
                   "volumeHandle": "modeInstance/us-central1-c/pfs/share1",
                   "volumeAttributes": {"ip": "10.0.0.2", "volume": "share1"}},
                  "modeInstance/us-central1-c/pfs/share1"),
    # GCS FUSE: the bucket's name.
    "gcsfuse": ({"driver": "gcsfuse.csi.storage.gke.io", "volumeHandle": "team-pfs-bucket",
                 "volumeAttributes": {"gcsfuseLoggingSeverity": "warning"}},
                "team-pfs-bucket"),
    # NFS CSI: any handle unique to a volume, the share in its attributes: the namespace's.
    "nfs-csi": ({"driver": "nfs.csi.k8s.io", "volumeHandle": "nfs.example.com/pfs##{namespace}",
                 "volumeAttributes": {"server": "nfs.example.com", "share": "/pfs"}},
                f"nfs.example.com/pfs##{NS}"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("driver", CSI_VOLUMES)
def test_each_usual_csi_drivers_handle_is_the_one_the_administrator_gave(
        real_kube_datacenter, api, alice, datacenter, package, held_starts, driver):
    """The PersistentVolume the portal makes in the user's namespace, as the real API server
    stores it and binds its claim to it, has the handle its driver takes: the administrator's,
    ``{namespace}`` in it the namespace's name (never one with the namespace appended, which
    EFS, Filestore and GCS FUSE do not know)."""
    csi, handle = CSI_VOLUMES[driver]
    datacenter_set(datacenter, kube_volume={"persistentVolume": {"csi": csi}})
    engine.job_launch(submit_job(alice, datacenter).pk)
    claim = wait(lambda: (c := api.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/"
                                       "paddlecloud-pfs"))
                 and c.get("status", {}).get("phase") == "Bound" and c,
                 timeout=60, message="the claim to bind")
    volume = api.get(f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}")
    assert volume["spec"]["csi"] == {**csi, "volumeHandle": handle}
