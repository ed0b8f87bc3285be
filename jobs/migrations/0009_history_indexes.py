"""The indexes of a long job history (issue 20; bench/history.py measures them).

- ``job_owner_recent`` now leads with the datacenter too: a user's list is filtered by both,
  so its order, its cursor and its count come from the index alone.
- ``job_owner_state``: the state filter, and the waiting jobs ahead of each listed job.
- ``job_name_trgm`` (PostgreSQL only): a trigram index of the names, for the list's "part of
  the name" filter (``LIKE '%bert%'``), with the ``pg_trgm`` extension (trusted since
  PostgreSQL 13: the database's owner may create it). On SQLite both are skipped, and the
  filter scans the user's jobs as before.
"""

from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations, models

NAME_TRGM = "job_name_trgm"


class PgTrgm(TrigramExtension):
    """``CREATE EXTENSION pg_trgm``; skipped on SQLite both ways (Django's skips it only
    forwards)."""

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


def name_trgm_create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"CREATE INDEX {NAME_TRGM} ON jobs_job USING gin "
                              f"(name gin_trgm_ops)")


def name_trgm_drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {NAME_TRGM}")


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0007_datacenter_build_registry'),
        ('jobs', '0008_build'),
        ('registries', '0001_initial'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='job',
            name='job_owner_recent',
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(fields=['owner', 'datacenter', '-created_at', '-id'], name='job_owner_recent'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(fields=['owner', 'datacenter', 'state', 'created_at', 'id'], name='job_owner_state'),
        ),
        PgTrgm(),
        migrations.RunPython(name_trgm_create, name_trgm_drop, elidable=False),
    ]
