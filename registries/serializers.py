from rest_framework import serializers

from .models import Registry


class RegistrySerializer(serializers.ModelSerializer):
    """A credential as the API shows it: never its password."""

    datacenter = serializers.CharField(source="datacenter.name")

    class Meta:
        model = Registry
        fields = ["name", "server", "username", "datacenter", "created_at", "updated_at"]


class RegistryWriteSerializer(serializers.Serializer):
    """For the schema only: the body is checked by registries.services."""

    name = serializers.CharField(help_text="your name for it; what `-registry NAME` names")
    server = serializers.CharField(help_text="host[:port], e.g. registry.example.com:5000")
    username = serializers.CharField()
    password = serializers.CharField(write_only=True, help_text="stored encrypted, never shown")
