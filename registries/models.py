"""Users' credentials for private image registries. The password is kept encrypted (see
``crypto``): the database, its backups and the admin never see it in plain text."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from accounts.models import dns_label_validator


class Registry(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                              related_name="registries")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.CASCADE,
                                   related_name="registries")
    name = models.CharField(max_length=40, validators=[dns_label_validator],
                            help_text="How jobs name it: paddlectl submit -registry NAME.")
    server = models.CharField(max_length=253, help_text="host[:port], e.g. registry.example.com")
    username = models.CharField(max_length=256)
    password_encrypted = models.BinaryField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "registries"
        constraints = [
            models.UniqueConstraint(fields=["owner", "datacenter", "name"],
                                    name="unique_registry_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.username}@{self.server})"

    def __repr__(self) -> str:  # never the password, not even encrypted
        return f"<Registry {self.name!r} {self.username}@{self.server} owner={self.owner_id}>"
