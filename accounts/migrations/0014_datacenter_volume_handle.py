# A Kubernetes datacenter's CSI PersistentVolume handle becomes the administrator's template, in
# which "{namespace}" is each user namespace (jobs/backends/kubernetes/settings.py); before, the
# portal appended "-<namespace>" to the handle given (or to "paddlecloud-pfs"). Datacenters
# made before keep the handles their volumes have: that rule, written as a template.

from django.db import migrations

FIELD = "{namespace}"
SUFFIX = "-" + FIELD


def _csi(datacenter) -> dict | None:
    volume = datacenter.backend_settings.get("kube_volume") or {}
    source = volume.get("persistentVolume") if isinstance(volume, dict) else None
    csi = source.get("csi") if isinstance(source, dict) else None
    return csi if isinstance(csi, dict) else None


def handles_as_templates(apps, schema_editor):
    Datacenter = apps.get_model("accounts", "Datacenter")
    for datacenter in Datacenter.objects.filter(backend="kubernetes"):
        csi = _csi(datacenter)
        if csi is None or FIELD in str(csi.get("volumeHandle", "")):
            continue
        csi["volumeHandle"] = (csi.get("volumeHandle") or "paddlecloud-pfs") + SUFFIX
        datacenter.save(update_fields=["backend_settings"])


def templates_as_handles(apps, schema_editor):
    Datacenter = apps.get_model("accounts", "Datacenter")
    for datacenter in Datacenter.objects.filter(backend="kubernetes"):
        csi = _csi(datacenter)
        if csi is None or not str(csi.get("volumeHandle", "")).endswith(SUFFIX):
            continue
        csi["volumeHandle"] = csi["volumeHandle"].removesuffix(SUFFIX)
        datacenter.save(update_fields=["backend_settings"])


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0013_datacenter_backend_settings'),
    ]

    operations = [
        migrations.RunPython(handles_as_templates, templates_as_handles),
    ]
