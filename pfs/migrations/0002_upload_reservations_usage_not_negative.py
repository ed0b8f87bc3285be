from django.db import migrations, models
from django.db.models import F


def forwards(apps, schema_editor):
    """Uploads already in progress reserve their declared size; a negative usage (a stale
    figure) is put at zero before the constraint holds it there (the next walk measures it)."""
    apps.get_model("pfs", "UploadSession").objects.filter(completed_at__isnull=True).update(
        reserved=F("size"))
    apps.get_model("pfs", "Usage").objects.filter(used__lt=0).update(used=0)


class Migration(migrations.Migration):

    dependencies = [
        ('pfs', '0001_initial'),
    ]

    operations = [
        migrations.AddField(
            model_name='uploadsession',
            name='reserved',
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='uploadsession',
            name='resumable',
            field=models.BooleanField(default=True),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name='usage',
            constraint=models.CheckConstraint(condition=models.Q(('used__gte', 0)), name='pfs_usage_not_negative'),
        ),
    ]
