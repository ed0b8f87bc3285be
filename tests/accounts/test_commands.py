"""The operator's management commands: adddatacenter, adduser and demo."""

from __future__ import annotations

import io
import re
import stat
import sys

import pytest
import yaml
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts.models import Datacenter, Membership, Quota, User
from accounts.selectors import quota_get
from tests.conftest import PASSWORD
from tests.k8s_api_server import fixtures

k8s_api = fixtures.k8s_api  # the fake API server, a fixture

pytestmark = pytest.mark.django_db

GiB = 2**30
NEW_PASSWORD = "another long passphrase 42"


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# adddatacenter


def test_adddatacenter_creates_a_datacenter(db):
    out = run("adddatacenter", "gpu-east", "--description", "GPUs in the east",
              "--backend", "kubernetes", "--pfs-root", "/srv/pfs/east", "--in-cluster",
              "--namespace-prefix", "pc-", "--default-image", "paddle:gpu",
              "--skip-cluster-check")  # no cluster here: its own test below
    assert out.strip() == ("Created datacenter gpu-east (backend kubernetes, "
                           "PFS root /srv/pfs/east)")
    dc = Datacenter.objects.get(name="gpu-east")
    assert dc.description == "GPUs in the east"
    assert dc.backend == "kubernetes"
    assert dc.pfs_root == "/srv/pfs/east"
    assert dc.backend_settings["kube_in_cluster"] is True
    assert dc.namespace_prefix == "pc-"
    assert dc.image == "paddle:gpu"


def test_adddatacenter_again_changes_only_the_options_given(db):
    run("adddatacenter", "gpu-east", "--description", "first", "--backend", "kubernetes",
        "--pfs-root", "/srv/pfs/east", "--in-cluster", "--kube-context", "prod",
        "--skip-cluster-check")

    out = run("adddatacenter", "gpu-east", "--description", "second", "--skip-cluster-check")
    assert out.startswith("Updated datacenter gpu-east (backend kubernetes, ")
    dc = Datacenter.objects.get(name="gpu-east")
    kube = dc.backend_settings
    assert (dc.description, dc.backend, dc.pfs_root, kube["kube_in_cluster"],
            kube["kube_context"]) == ("second", "kubernetes", "/srv/pfs/east", True, "prod")

    run("adddatacenter", "gpu-east", "--no-in-cluster", "--skip-cluster-check")
    dc.refresh_from_db()
    assert dc.backend_settings["kube_in_cluster"] is False
    assert (dc.description, dc.backend, dc.pfs_root, dc.backend_settings["kube_context"]) == (
        "second", "kubernetes", "/srv/pfs/east", "prod")

    # No options at all: nothing changes, and there is still just one of it.
    run("adddatacenter", "gpu-east", "--skip-cluster-check")
    dc.refresh_from_db()
    assert (dc.description, dc.backend, dc.pfs_root, dc.backend_settings["kube_in_cluster"]) == (
        "second", "kubernetes", "/srv/pfs/east", False)
    assert Datacenter.objects.filter(name="gpu-east").count() == 1


def test_adddatacenter_with_an_s3_pfs(db):
    with pytest.raises(CommandError) as info:
        run("adddatacenter", "objects", "--pfs-storage", "s3")
    assert "s3_bucket" in str(info.value) and "required" in str(info.value)
    assert not Datacenter.objects.filter(name="objects").exists()
    out = run("adddatacenter", "objects", "--pfs-storage", "s3", "--s3-bucket", "team-pfs",
              "--s3-endpoint", "http://minio:9000", "--s3-region", "eu-1")
    assert out.strip().endswith("(backend local, PFS s3://team-pfs)")
    dc = Datacenter.objects.get(name="objects")
    assert (dc.pfs_storage, dc.s3_bucket, dc.s3_endpoint_url, dc.s3_region) == (
        "s3", "team-pfs", "http://minio:9000", "eu-1")


def test_adddatacenter_on_kubernetes_with_the_pfs_volume_of_pods(db, k8s_api):
    out = run("adddatacenter", "k8s", "--backend", "kubernetes", "--kubeconfig",
              str(k8s_api.kubeconfig_path), "--kube-volume",
              '{"nfs": {"server": "nfs.example.com", "path": "/exports/pfs/k8s"}}')
    assert "(backend kubernetes, Kubernetes 1.31, PFS root " in out  # the cluster was asked
    dc = Datacenter.objects.get(name="k8s")
    kube = dc.backend_settings
    assert (dc.backend, kube["kubeconfig"], kube["kube_volume"]) == (
        "kubernetes", str(k8s_api.kubeconfig_path),
        {"nfs": {"server": "nfs.example.com", "path": "/exports/pfs/k8s"}})
    with pytest.raises(CommandError, match="kube_volume: one volume source"):
        run("adddatacenter", "k8s", "--kube-volume", '{"emptyDir": {}}')
    with pytest.raises(CommandError, match="not JSON"):
        run("adddatacenter", "k8s", "--kube-volume", "{nfs")
    kept = Datacenter.objects.get(name="k8s").backend_settings["kube_volume"]
    assert kept["nfs"]["server"] == "nfs.example.com"


def test_adddatacenter_sets_the_pods_egress(db, k8s_api):
    """Anywhere but the instance metadata unless told; CIDR ranges, or a clear refusal."""
    run("adddatacenter", "net", "--backend", "kubernetes", "--kubeconfig",
        str(k8s_api.kubeconfig_path))
    assert Datacenter.objects.get(name="net").backend_settings["kube_egress"] == [
        "0.0.0.0/0", "::/0"]
    run("adddatacenter", "net", "--egress", '["10.0.0.0/8", "fd00::/8"]')
    assert Datacenter.objects.get(name="net").backend_settings["kube_egress"] == [
        "10.0.0.0/8", "fd00::/8"]
    for wrong in ('["10.0.0.1/8"]', '["10.0.0.0"]', '["example.com"]', "[8]"):
        with pytest.raises(CommandError, match=r"kube_egress: .* is not a CIDR range"):
            run("adddatacenter", "net", "--egress", wrong)
    with pytest.raises(CommandError, match="a JSON list"):
        run("adddatacenter", "net", "--egress", '"0.0.0.0/0"')
    assert Datacenter.objects.get(name="net").backend_settings["kube_egress"] == [
        "10.0.0.0/8", "fd00::/8"]


def test_adddatacenter_sets_the_image_builder(db, k8s_api):
    """Rootless unless told; unconfined names the namespace the administrator made for it."""
    run("adddatacenter", "cos", "--backend", "kubernetes", "--kubeconfig",
        str(k8s_api.kubeconfig_path))
    assert Datacenter.objects.get(name="cos").backend_settings["kube_builder"] == "rootless"
    with pytest.raises(CommandError, match="kube_builder_namespace: required with the "
                                           "unconfined builder"):
        run("adddatacenter", "cos", "--builder", "unconfined")
    with pytest.raises(CommandError, match="kube_builder_namespace: a namespace name"):
        run("adddatacenter", "cos", "--builder", "unconfined", "--builder-namespace", "Builds")
    run("adddatacenter", "cos", "--builder", "unconfined", "--builder-namespace", "builds")
    kube = Datacenter.objects.get(name="cos").backend_settings
    assert (kube["kube_builder"], kube["kube_builder_namespace"]) == ("unconfined", "builds")


def test_adddatacenter_offers_the_portal_builder_where_the_portal_has_buildah(
        db, k8s_api, monkeypatch, tmp_path):
    """GKE Autopilot: builds on the portal's machine, which needs buildah there; without it
    the choice is refused naming the setting and saying how to install it."""
    run("adddatacenter", "autopilot", "--backend", "kubernetes", "--kubeconfig",
        str(k8s_api.kubeconfig_path))
    with monkeypatch.context() as patch, pytest.raises(
            CommandError, match=r"kube_builder: the portal builder builds on the portal's "
                                r"machine, with buildah: buildah is not installed on the "
                                r"portal's machine: install it \(apt-get install buildah"):
        patch.setenv("PATH", str(tmp_path))  # a machine where buildah is not installed
        run("adddatacenter", "autopilot", "--builder", "portal")
    assert Datacenter.objects.get(name="autopilot").backend_settings["kube_builder"] == \
        "rootless"
    run("adddatacenter", "autopilot", "--builder", "portal")
    assert Datacenter.objects.get(name="autopilot").backend_settings["kube_builder"] == "portal"


def test_adddatacenter_sets_the_clusters_choices(db, k8s_api):
    """Scheduler, queue, uid, GPU nodes, start timeout: given as flags, kept when not given;
    a choice that cannot work is refused and nothing is saved."""
    run("adddatacenter", "gpus", "--backend", "kubernetes", "--kubeconfig",
        str(k8s_api.kubeconfig_path), "--kube-volume",
        '{"persistentVolume": {"csi": {"driver": "cephfs.csi.ceph.com", "volumeHandle": "p"}}}',
        "--scheduler", "kueue", "--queue", "gpu-team", "--run-as-user", "2000",
        "--run-as-group", "2000", "--gpu-tolerations",
        '[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]',
        "--gpu-node-selector", '{"gpu": "a100"}', "--start-timeout", "900",
        "--start-tries", "5")
    dc = Datacenter.objects.get(name="gpus")
    kube = dc.backend_settings
    assert (kube["kube_scheduler"], kube["kube_queue"], kube["kube_run_as_user"],
            kube["kube_run_as_group"], kube["kube_gpu_node_selector"], dc.start_timeout,
            dc.start_tries) == (
        "kueue", "gpu-team", 2000, 2000, {"gpu": "a100"}, 900, 5)
    assert kube["kube_gpu_tolerations"][0]["key"] == "nvidia.com/gpu"
    with pytest.raises(CommandError, match="kube_queue: required with Kueue"):
        run("adddatacenter", "other", "--backend", "kubernetes", "--kubeconfig",
            str(k8s_api.kubeconfig_path), "--scheduler", "kueue")
    with pytest.raises(CommandError, match="seen in its own namespace only"):
        run("adddatacenter", "gpus", "--kube-volume",
            '{"persistentVolumeClaim": {"claimName": "pfs"}}')
    with pytest.raises(CommandError, match="start_tries"):
        run("adddatacenter", "gpus", "--start-tries", "0")
    with pytest.raises(CommandError, match="a JSON list"):
        run("adddatacenter", "gpus", "--gpu-tolerations", '{"key": "x"}')
    assert not Datacenter.objects.filter(name="other").exists()
    assert Datacenter.objects.get(name="gpus").start_tries == 5


def test_adddatacenter_refuses_a_cluster_too_old_or_out_of_reach_unless_told(db, k8s_api,
                                                                              tmp_path):
    k8s_api.settings.kubernetes_version = "1.29"
    with pytest.raises(CommandError) as refused:
        run("adddatacenter", "old", "--backend", "kubernetes", "--kubeconfig",
            str(k8s_api.kubeconfig_path))
    assert str(refused.value) == (
        "datacenter old: its cluster runs Kubernetes 1.29, older than PaddleCloud needs "
        "(1.30 or newer: the trainers' indexed Job uses backoffLimitPerIndex and "
        "podReplacementPolicy, deploy/'s admission policy admissionregistration.k8s.io/v1); "
        "upgrade the cluster (--skip-cluster-check saves it anyway)")
    assert not Datacenter.objects.exists()  # nothing half-made
    missing = tmp_path / "nowhere"
    with pytest.raises(CommandError, match=f"cannot load kubeconfig {missing}"):
        run("adddatacenter", "old", "--backend", "kubernetes", "--kubeconfig", str(missing))
    assert not Datacenter.objects.exists()
    out = run("adddatacenter", "old", "--backend", "kubernetes", "--kubeconfig",
              str(missing), "--skip-cluster-check")
    assert out.startswith("Created datacenter old (backend kubernetes, PFS root ")


def test_adddatacenter_refuses_a_namespace_prefix_another_datacenter_uses_on_its_cluster(
        db, k8s_api, tmp_path):
    """Two datacenters on one API server (whatever their kubeconfigs and contexts are
    called) whose prefixes make the same names would share users' namespaces, their quota and
    PFS claim: the second is refused, naming the field and the other datacenter, and nothing
    is saved; on another cluster, or with a prefix apart, it is made."""
    from tests.k8s_api_server.kubeconfig import write_kubeconfig

    first = str(k8s_api.kubeconfig_path)
    run("adddatacenter", "dc1", "--backend", "kubernetes", "--kubeconfig", first)
    same = yaml.safe_load(k8s_api.kubeconfig_path.read_text())
    same["clusters"][0]["cluster"]["server"] += "/"  # the same server, written another way
    same["contexts"][0]["name"] = same["current-context"] = "prod"
    again = tmp_path / "again.kubeconfig"
    again.write_text(yaml.safe_dump(same))
    for prefix in ("paddle-", "paddle-dc2-", "pad"):
        with pytest.raises(CommandError) as refused:
            run("adddatacenter", "dc2", "--backend", "kubernetes", "--kubeconfig", str(again),
                "--namespace-prefix", prefix)
        assert str(refused.value) == (
            f"namespace_prefix: {prefix!r} would share users' namespaces with datacenter dc1 "
            f"on the same cluster ({k8s_api.url.lower()}), whose prefix is 'paddle-': on one "
            "cluster each datacenter's prefix must neither equal nor begin another's, e.g. "
            "dc2-")
        assert not Datacenter.objects.filter(name="dc2").exists()
    run("adddatacenter", "dc2", "--backend", "kubernetes", "--kubeconfig", str(again),
        "--namespace-prefix", "dc2-")
    elsewhere = write_kubeconfig(tmp_path / "elsewhere.kubeconfig", "https://10.0.0.9:6443", "t")
    run("adddatacenter", "dc3", "--backend", "kubernetes", "--kubeconfig", str(elsewhere),
        "--skip-cluster-check")
    assert Datacenter.objects.get(name="dc3").namespace_prefix == "paddle-"
    with pytest.raises(CommandError, match="namespace_prefix: 'dc2-' would share users' "
                                           "namespaces with datacenter dc2"):
        run("adddatacenter", "dc1", "--namespace-prefix", "dc2-")
    assert Datacenter.objects.get(name="dc1").namespace_prefix == "paddle-"


def test_adddatacenter_sets_the_image_of_gpu_jobs(db):
    run("adddatacenter", "gpus", "--default-image", "registry.example.com/paddle:2.6.1",
        "--gpu-image", "registry.example.com/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6")
    dc = Datacenter.objects.get(name="gpus")
    assert (dc.image, dc.image_gpu) == ("registry.example.com/paddle:2.6.1",
                                        "registry.example.com/paddle:2.6.1-gpu-cuda12.0-"
                                        "cudnn8.9-trt8.6")


def test_adddatacenter_sets_preemption_off_by_default(db):
    run("adddatacenter", "dc1")
    assert Datacenter.objects.get(name="dc1").preempt_after is None  # off unless set
    run("adddatacenter", "dc1", "--preempt-after", "30m")
    assert Datacenter.objects.get(name="dc1").preempt_after == 1800
    with pytest.raises(CommandError, match=r"preempt_after: at least 60 seconds \(0 or empty: "
                                           r"no preemption\)"):
        run("adddatacenter", "dc1", "--preempt-after", "30s")
    with pytest.raises(CommandError, match="'soon' is not a length of time: use a whole number "
                                           "with s, m, h or d"):
        run("adddatacenter", "dc1", "--preempt-after", "soon")
    assert Datacenter.objects.get(name="dc1").preempt_after == 1800  # neither was saved
    run("adddatacenter", "dc1", "--preempt-after", "0")
    assert Datacenter.objects.get(name="dc1").preempt_after is None


def test_adddatacenter_without_pfs_root_reports_the_default_one(db, settings, tmp_path):
    settings.PADDLECLOUD_PFS_ROOT = tmp_path / "pfs"
    settings.PADDLECLOUD_BACKEND = "local"
    out = run("adddatacenter", "dc-a")
    assert out.strip() == f"Created datacenter dc-a (backend local, PFS root {tmp_path}/pfs/dc-a)"
    assert Datacenter.objects.get(name="dc-a").backend == "local"


@pytest.mark.parametrize("name", ["Data_Center", "DC1", "edge-", "dc.one"])
def test_adddatacenter_refuses_a_name_that_is_not_a_dns_label(db, name):
    with pytest.raises(CommandError) as raised:
        run("adddatacenter", name)
    message = str(raised.value)
    assert message.startswith("name: ")
    assert "lower-case letters, digits and '-'" in message
    assert not Datacenter.objects.exists()


def test_adddatacenter_refuses_an_unknown_backend(db):
    with pytest.raises(CommandError, match="invalid choice: 'slurm'"):
        run("adddatacenter", "dc-a", "--backend", "slurm")
    assert not Datacenter.objects.exists()


# ---------------------------------------------------------------------------------------------
# adduser


def quota_of(username: str, datacenter: str = "datacenter1") -> Quota:
    """The user's effective quota (their own numbers, else the defaults)."""
    return quota_get(User.objects.get(username=username),
                     Datacenter.objects.get(name=datacenter))


def test_adduser_creates_a_member_with_a_quota(datacenter):
    out = run("adduser", "bob@example.com", "--password", PASSWORD, "--email",
              "bob@example.com", "--datacenter", "datacenter1", "--cpu", "500m",
              "--memory", "16Gi", "--gpu", "2", "--jobs", "3", "--queued", "20",
              "--storage", "100Gi")
    assert out.strip() == "Created user bob@example.com (member of datacenter1)"

    user = User.objects.get(username="bob@example.com")
    assert user.check_password(PASSWORD)
    assert user.email == "bob@example.com"
    assert not user.is_staff
    assert not user.is_superuser
    assert Membership.objects.filter(user=user, datacenter=datacenter).exists()
    quota = quota_of("bob@example.com")
    assert (quota.cpu, quota.memory, quota.gpu, quota.jobs, quota.queued, quota.storage) == (
        500, 16 * GiB, 2, 3, 20, 100 * GiB)
    assert authenticate(username="bob@example.com", password=PASSWORD) == user


def test_adduser_again_keeps_the_password_and_changes_only_the_quota_given(datacenter):
    run("adduser", "bob", "--password", PASSWORD, "--datacenter", "datacenter1",
        "--cpu", "8", "--memory", "16Gi", "--gpu", "1", "--jobs", "4", "--storage", "1Ti")

    out = run("adduser", "bob", "--datacenter", "datacenter1", "--cpu", "2", "--jobs", "5")
    assert out.strip() == "Updated user bob (member of datacenter1)"

    user = User.objects.get(username="bob")
    assert user.check_password(PASSWORD)
    quota = quota_of("bob")
    assert (quota.cpu, quota.memory, quota.gpu, quota.jobs, quota.storage) == (
        2000, 16 * GiB, 1, 5, 2**40)
    assert User.objects.filter(username="bob").count() == 1
    assert Membership.objects.filter(user=user).count() == 1


def test_adduser_adds_an_existing_user_to_another_datacenter_with_default_quota(
        datacenter, other_datacenter):
    run("adduser", "bob", "--password", PASSWORD, "--datacenter", "datacenter1",
        "--cpu", "1")
    out = run("adduser", "bob", "--datacenter", "datacenter2")
    assert out.strip() == "Updated user bob (member of datacenter1, datacenter2)"
    assert quota_of("bob", "datacenter1").cpu == 1000
    second = quota_of("bob", "datacenter2")
    assert (second.cpu, second.memory, second.gpu, second.jobs, second.storage) == (
        4000, 8 * GiB, 0, 2, 10 * GiB)


def test_adduser_quota_applies_to_every_datacenter_named(datacenter, other_datacenter):
    run("adduser", "bob", "--password", PASSWORD, "--datacenter", "datacenter1",
        "--datacenter", "datacenter2", "--gpu", "4")
    assert quota_of("bob", "datacenter1").gpu == 4
    assert quota_of("bob", "datacenter2").gpu == 4


def test_adduser_without_a_datacenter_creates_a_user_of_none(db):
    out = run("adduser", "bob", "--password", PASSWORD)
    assert out.strip() == "Created user bob (member of no datacenter)"
    assert not Membership.objects.exists()


def test_adduser_password_changes_the_password(datacenter):
    run("adduser", "bob", "--password", PASSWORD)
    run("adduser", "bob", "--password", NEW_PASSWORD)
    user = User.objects.get(username="bob")
    assert user.check_password(NEW_PASSWORD)
    assert not user.check_password(PASSWORD)


def test_adduser_reads_the_password_from_stdin(db, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{NEW_PASSWORD}\nignored second line\n"))
    run("adduser", "bob", "--password-stdin")
    user = User.objects.get(username="bob")
    assert user.check_password(NEW_PASSWORD)


def test_adduser_reads_the_password_from_the_environment(db, monkeypatch):
    monkeypatch.setenv("BOB_PASSWORD", NEW_PASSWORD)
    run("adduser", "bob", "--password-env", "BOB_PASSWORD")
    assert User.objects.get(username="bob").check_password(NEW_PASSWORD)


def test_adduser_password_env_must_be_set(db, monkeypatch):
    monkeypatch.delenv("NO_SUCH_PASSWORD_VAR", raising=False)
    with pytest.raises(CommandError, match="--password-env: NO_SUCH_PASSWORD_VAR is not set"):
        run("adduser", "bob", "--password-env", "NO_SUCH_PASSWORD_VAR")
    assert not User.objects.exists()


def test_adduser_takes_one_password_source_only(db, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{NEW_PASSWORD}\n"))
    with pytest.raises(CommandError, match="not allowed with argument"):
        run("adduser", "bob", "--password", PASSWORD, "--password-stdin")
    assert not User.objects.exists()


def test_adduser_a_new_user_needs_a_password(datacenter):
    with pytest.raises(CommandError) as raised:
        run("adduser", "bob", "--datacenter", "datacenter1")
    assert str(raised.value) == "password: a new user needs a password"
    assert not User.objects.exists()


def test_adduser_names_an_unknown_datacenter(datacenter):
    with pytest.raises(CommandError) as raised:
        run("adduser", "bob", "--password", PASSWORD, "--datacenter", "nowhere")
    assert "no datacenter named 'nowhere'" in str(raised.value)
    assert "adddatacenter" in str(raised.value)
    # Nothing is half-done: the user was not created either.
    assert not User.objects.exists()


def test_adduser_quota_options_need_a_datacenter(datacenter):
    run("adduser", "bob", "--password", PASSWORD, "--datacenter", "datacenter1")
    with pytest.raises(CommandError, match="quota options need --datacenter"):
        run("adduser", "bob", "--cpu", "2")
    assert quota_of("bob").cpu == 4000


def test_adduser_refuses_a_negative_quota(datacenter):
    with pytest.raises(CommandError, match=r"^gpu: Ensure this value is greater than or equal"):
        run("adduser", "bob", "--password", PASSWORD, "--datacenter", "datacenter1",
            "--gpu", "-1")
    assert not User.objects.exists()


@pytest.mark.parametrize(
    ("option", "value"),
    [("--memory", "lots"), ("--memory", "1.5"), ("--storage", "many"), ("--cpu", "1Gi"),
     ("--cpu", "-1")],
)
def test_adduser_refuses_a_bad_quantity(datacenter, option, value):
    # From call_command the parser's complaint is a CommandError (the command line exits 2).
    with pytest.raises(CommandError) as raised:
        run("adduser", "bob", "--password", PASSWORD, "--datacenter", "datacenter1",
            option, value)
    message = str(raised.value)
    assert f"argument {option}: {value!r} is not" in message  # says what is expected
    assert not User.objects.exists()


def test_adduser_refuses_a_quota_too_large_to_store(datacenter):
    with pytest.raises(CommandError, match=r"^cpu: Ensure this value is less than or equal"):
        run("adduser", "bob", "--password", PASSWORD, "--datacenter", "datacenter1",
            "--cpu", "3000000")
    assert not User.objects.exists()  # nothing half-written


def test_adduser_refuses_a_weak_password(db):
    with pytest.raises(CommandError) as raised:
        run("adduser", "bob", "--password", "123")
    message = str(raised.value)
    assert message.startswith("password: ")
    assert "too short" in message
    assert not User.objects.exists()


def test_adduser_weak_new_password_keeps_the_old_one(db):
    run("adduser", "bob", "--password", PASSWORD)
    with pytest.raises(CommandError, match=r"^password: .*too common"):
        run("adduser", "bob", "--password", "password")
    assert User.objects.get(username="bob").check_password(PASSWORD)


def test_adduser_staff_and_superuser_flags(db):
    run("adduser", "bob", "--password", PASSWORD, "--staff")
    bob = User.objects.get(username="bob")
    assert bob.is_staff
    assert not bob.is_superuser

    # Not given again: stays staff.
    run("adduser", "bob", "--email", "bob@example.com")
    bob.refresh_from_db()
    assert bob.is_staff
    assert bob.email == "bob@example.com"

    run("adduser", "bob", "--no-staff")
    bob.refresh_from_db()
    assert not bob.is_staff

    run("adduser", "carol", "--password", PASSWORD, "--superuser")
    carol = User.objects.get(username="carol")
    assert carol.is_superuser
    assert carol.is_staff  # a superuser can open the admin


def test_adduser_refuses_an_invalid_email(db):
    with pytest.raises(CommandError, match="email: "):
        run("adduser", "bob", "--password", PASSWORD, "--email", "not-an-address")
    assert not User.objects.exists()


# ---------------------------------------------------------------------------------------------
# demo


def printed_password(out: str) -> str:
    found = re.search(r"^  password  (\S+)$", out, re.MULTILINE)
    assert found, out
    return found.group(1)


def test_demo_creates_the_datacenter_and_user_and_prints_how_to_log_in(db, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    out = run("demo", "--endpoint", "http://portal.example:8080")

    password = printed_password(out)
    assert "  username  demo\n" in out
    assert "  open      http://portal.example:8080/\n" in out
    assert ("~/.paddle/config for paddlectl:\n"
            "  datacenters:\n"
            "  - name: datacenter1\n"
            "    username: demo\n"
            f"    password: {password}\n"
            "    endpoint: http://portal.example:8080\n"
            "  current-datacenter: datacenter1\n") in out

    assert Datacenter.objects.filter(name="datacenter1").exists()
    demo = User.objects.get(username="demo")
    assert demo.is_staff and demo.is_superuser
    assert Membership.objects.filter(user=demo, datacenter__name="datacenter1").exists()
    assert authenticate(username="demo", password=password) == demo


def test_demo_twice_prints_the_same_working_password(db, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    first = printed_password(run("demo"))
    second_out = run("demo")
    second = printed_password(second_out)
    assert first == second
    assert "    endpoint: http://127.0.0.1:8000\n" in second_out
    assert User.objects.filter(username="demo").count() == 1
    assert Datacenter.objects.filter(name="datacenter1").count() == 1
    assert authenticate(username="demo", password=second) is not None

    kept = tmp_path / "demo-password"
    assert kept.read_text().strip() == second
    assert stat.S_IMODE(kept.stat().st_mode) & 0o077 == 0, "others must not read it"


def test_demo_uses_an_existing_datacenter1(datacenter, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    password = printed_password(run("demo"))
    assert Datacenter.objects.count() == 1
    assert authenticate(username="demo", password=password) is not None
