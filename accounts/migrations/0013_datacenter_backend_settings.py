# The Kubernetes backend's settings leave their columns for Datacenter.backend_settings, a JSON
# object the backend owns (jobs/backends/kubernetes/settings.py), under the same names.

import accounts.execution
import accounts.models
from django.db import migrations, models

KUBE_FIELDS = ["kube_in_cluster", "kubeconfig", "kube_context", "kube_volume", "kube_scheduler",
               "kube_queue", "kube_run_as_user", "kube_run_as_group", "kube_gpu_tolerations",
               "kube_gpu_node_selector"]


def settings_carry(apps, schema_editor):
    """A Kubernetes datacenter's settings, as they were; another backend used none of them."""
    Datacenter = apps.get_model("accounts", "Datacenter")
    for datacenter in Datacenter.objects.filter(backend="kubernetes"):
        datacenter.backend_settings = {name: getattr(datacenter, name) for name in KUBE_FIELDS}
        datacenter.save(update_fields=["backend_settings"])


def settings_return(apps, schema_editor):
    Datacenter = apps.get_model("accounts", "Datacenter")
    for datacenter in Datacenter.objects.filter(backend="kubernetes"):
        for name in KUBE_FIELDS:
            if name in datacenter.backend_settings:
                setattr(datacenter, name, datacenter.backend_settings[name])
        datacenter.save(update_fields=KUBE_FIELDS)


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0012_datacenter_package_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='datacenter',
            name='backend_settings',
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
        migrations.AlterField(
            model_name='datacenter',
            name='backend',
            field=models.CharField(choices=accounts.execution.backend_choices, default=accounts.models._default_backend, max_length=16),
        ),
        migrations.RunPython(settings_carry, settings_return),
    ] + [migrations.RemoveField(model_name='datacenter', name=name) for name in KUBE_FIELDS]
