"""A backend is one package and one registry line (``jobs/backends/__init__.py``): registered,
it is offered as a datacenter's backend (the admin, ``adddatacenter``, the API), its settings
are the admin's and the command's fields, checked by its own rules, and its ``spec_problems``
refuse what it cannot run when a job is submitted. Here a throw-away backend, registered by
the test, shows it; and the Kubernetes settings that left ``Datacenter``'s columns come over
on upgrade."""

from __future__ import annotations

import pytest
from django import forms
from django.core.management import CommandError

from accounts.execution import BackendKind, backend_register, backend_unregister
from accounts.models import Datacenter
from jobs.backends import _backend, backend_for
from jobs.backends.base import Backend
from jobs.spec import job_spec_validate
from tests.accounts.test_admin_and_pages import DATACENTER_FORM, page
from tests.accounts.test_commands import run
from tests.conftest import assert_error


class ToyBackend(Backend):
    """Runs nothing: the registry is what is tried here."""

    def prepare(self, job, attempt=0):
        raise NotImplementedError

    def paths(self, job):
        raise NotImplementedError

    def topology(self, job, replicas):
        raise NotImplementedError

    def start(self, job, replica, env):
        raise NotImplementedError

    def observe(self, job, replica):
        raise NotImplementedError

    def stop(self, job, replicas, grace):
        raise NotImplementedError

    def orphans_stop(self, datacenters, known, grace):
        raise NotImplementedError

    def cleanup(self, job):
        raise NotImplementedError


class ToySettings(forms.Form):
    toy_speed = forms.IntegerField(label="toy speed", min_value=1, initial=1,
                                   help_text="How fast its toys run.")

    def clean(self):
        values = super().clean()
        if values.get("toy_speed") == 13:
            self.add_error("toy_speed", "an unlucky speed: the toys refuse it")
        return values


def toy_spec_problems(datacenter, spec):
    if spec["trainers"] > datacenter.backend_settings["toy_speed"]:
        return [("trainers", f"at most {datacenter.backend_settings['toy_speed']} toys run")]
    return []


def toy_arguments(parser):
    parser.add_argument("--toy-speed", dest="toy_speed", type=int)


TOY = BackendKind(name="toy", label="toy machines", backend=f"{__name__}.ToyBackend",
                  settings_form=ToySettings, spec_problems=toy_spec_problems,
                  arguments=toy_arguments)


@pytest.fixture
def toy():
    backend_register(TOY)
    yield TOY
    backend_unregister(TOY.name)
    _backend.cache_clear()


@pytest.mark.django_db
def test_a_registered_backend_is_a_datacenter_choice_with_its_settings_checked(toy):
    out = run("adddatacenter", "toys", "--backend", "toy", "--toy-speed", "3")
    assert out.startswith("Created datacenter toys (backend toy, ")
    datacenter = Datacenter.objects.get(name="toys")
    assert datacenter.backend_settings == {"toy_speed": 3}
    backend = backend_for(datacenter)
    assert isinstance(backend, ToyBackend) and backend.name == "toy"

    with pytest.raises(CommandError, match="toy_speed: an unlucky speed: the toys refuse it"):
        run("adddatacenter", "toys", "--toy-speed", "13")
    with pytest.raises(CommandError, match="toy_speed: Ensure this value is greater than"):
        run("adddatacenter", "toys", "--toy-speed", "0")
    with pytest.raises(CommandError, match="kube_queue: not a setting of the toy backend"):
        run("adddatacenter", "toys", "--queue", "team")
    datacenter.refresh_from_db()
    assert datacenter.backend_settings == {"toy_speed": 3}

    # Another backend's settings are not its own: a datacenter moved off it leaves them.
    run("adddatacenter", "toys", "--backend", "local")
    datacenter.refresh_from_db()
    assert (datacenter.backend, datacenter.backend_settings) == ("local", {})


def test_a_backend_not_registered_is_no_choice():
    with pytest.raises(CommandError, match="invalid choice: 'toy'"):
        run("adddatacenter", "toys", "--backend", "toy")


def test_the_admin_offers_it_and_its_settings_with_their_rules(toy, admin_browser, datacenter):
    url = f"/admin/accounts/datacenter/{datacenter.pk}/change/"
    shown = page(admin_browser.get(url))
    assert '<option value="toy">toy machines</option>' in shown
    assert 'name="toy_speed"' in shown and "How fast its toys run." in shown
    form = {**DATACENTER_FORM, "backend": "toy", "quotas-TOTAL_FORMS": "0",
            "quotas-INITIAL_FORMS": "0"}
    refused = admin_browser.post(url, {**form, "toy_speed": "13"})
    assert refused.status_code == 200
    assert "an unlucky speed: the toys refuse it" in page(refused)
    assert admin_browser.post(url, {**form, "toy_speed": "5"}).status_code == 302
    datacenter.refresh_from_db()
    assert (datacenter.backend, datacenter.backend_settings) == ("toy", {"toy_speed": 5})


def test_the_api_names_it_as_a_datacenters_backend(toy, datacenter, token_client):
    Datacenter.objects.filter(pk=datacenter.pk).update(backend="toy")
    assert token_client.get("/api/v1/me/").json()["datacenter"]["backend"] == "toy"


@pytest.mark.django_db
def test_its_spec_problems_refuse_a_submission(toy, alice, datacenter, token_client, settings,
                                               tmp_path):
    settings.PADDLECLOUD_PFS_ROOT = tmp_path
    (tmp_path / "datacenter1" / "home" / "alice" / "pkg").mkdir(parents=True)
    Datacenter.objects.filter(pk=datacenter.pk).update(backend="toy",
                                                       backend_settings={"toy_speed": 2})
    body = assert_error(token_client.post("/api/v1/jobs/", {
        "name": "many", "package": "/pfs/datacenter1/home/alice/pkg", "entry": "x",
        "trainers": 3}, format="json"), 400, "invalid")
    assert body["fields"] == {"trainers": ["at most 2 toys run"]}

    datacenter.refresh_from_db()  # what the backend can run passes its check
    assert job_spec_validate(alice, datacenter, {
        "name": "few", "package": "/pfs/datacenter1/home/alice/pkg", "entry": "x",
        "trainers": 2}).trainers == 2


@pytest.mark.django_db(transaction=True)
def test_the_kubernetes_settings_come_over_from_their_old_columns():
    """Upgrading: migration 0013 moves a Kubernetes datacenter's kube_* columns into its
    backend_settings, as they were; a local one had no use for them."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before = [("accounts", "0012_datacenter_package_indexes")]
    after = [("accounts", "0013_datacenter_backend_settings")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("accounts", "Datacenter")
    old.objects.create(name="east", backend="kubernetes", kubeconfig="/etc/k",
                       kube_volume={"nfs": {"server": "nfs", "path": "/pfs"}},
                       kube_scheduler="kueue", kube_queue="team", kube_run_as_user=1000,
                       kube_gpu_tolerations=[{"key": "gpu", "operator": "Exists"}])
    old.objects.create(name="here", backend="local", kube_context="unused")
    try:
        MigrationExecutor(connection).migrate(after)
        # (read as values: the model has columns of later migrations)
        settings_of = Datacenter.objects.values_list("backend_settings", flat=True)
        assert settings_of.get(name="east") == {
            "kube_in_cluster": False, "kubeconfig": "/etc/k", "kube_context": "",
            "kube_volume": {"nfs": {"server": "nfs", "path": "/pfs"}},
            "kube_scheduler": "kueue", "kube_queue": "team", "kube_run_as_user": 1000,
            "kube_run_as_group": None, "kube_gpu_tolerations": [{"key": "gpu",
                                                                 "operator": "Exists"}],
            "kube_gpu_node_selector": {}}
        assert settings_of.get(name="here") == {}
    finally:  # the database as every other test has it: every migration applied
        latest = MigrationExecutor(connection)
        latest.migrate(latest.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_csi_volume_handles_made_before_become_the_templates_of_the_same_handles():
    """Upgrading: a CSI PersistentVolume's handle became the administrator's template
    (``{namespace}`` in it); migration 0014 writes what the portal did before (the handle, or
    paddlecloud-pfs, then -<namespace>) as the template, so existing volumes keep theirs."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from jobs.backends.kubernetes.settings import volume_handle

    before = [("accounts", "0013_datacenter_backend_settings")]
    after = [("accounts", "0014_datacenter_volume_handle")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("accounts", "Datacenter")

    def csi(**fields) -> dict:
        return {"kube_volume": {"persistentVolume": {"csi": {"driver": "cephfs.csi.ceph.com",
                                                             **fields}}}}

    old.objects.create(name="named", backend="kubernetes", backend_settings=csi(
        volumeHandle="pfs"))
    old.objects.create(name="unnamed", backend="kubernetes", backend_settings=csi())
    nfs = {"kube_volume": {"nfs": {"server": "nfs", "path": "/pfs"}}}
    old.objects.create(name="inline", backend="kubernetes", backend_settings=nfs)
    try:
        MigrationExecutor(connection).migrate(after)
        settings_of = Datacenter.objects.values_list("backend_settings", flat=True)
        handles = {name: settings_of.get(name=name)["kube_volume"]["persistentVolume"]["csi"]
                   for name in ("named", "unnamed")}
        assert {n: h["volumeHandle"] for n, h in handles.items()} == {
            "named": "pfs-{namespace}", "unnamed": "paddlecloud-pfs-{namespace}"}
        # the handles the volumes were made with
        assert volume_handle(handles["named"], "paddle-alice") == "pfs-paddle-alice"
        assert volume_handle(handles["unnamed"], "paddle-bob") == "paddlecloud-pfs-paddle-bob"
        assert settings_of.get(name="inline") == nfs
        MigrationExecutor(connection).migrate(before)  # and back
        assert old.objects.get(name="named").backend_settings == csi(volumeHandle="pfs")
    finally:  # the database as every other test has it: every migration applied
        latest = MigrationExecutor(connection)
        latest.migrate(latest.loader.graph.leaf_nodes())
