from __future__ import annotations

from rest_framework import serializers

from .models import ApiToken, Datacenter
from .services import MAX_TOKEN_TTL_DAYS


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, trim_whitespace=False,
                                     style={"input_type": "password"})
    datacenter = serializers.CharField(
        max_length=63, required=False, allow_blank=True,
        help_text="Datacenter the token acts in; default: the user's first datacenter.",
    )
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)


class TokenCreateSerializer(serializers.Serializer):
    datacenter = serializers.CharField(max_length=63, required=False, allow_blank=True)
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)
    expires_in_days = serializers.IntegerField(min_value=1, max_value=MAX_TOKEN_TTL_DAYS,
                                               required=False)


class DeviceLoginRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150,
                                     help_text="Who logs in (the approving user must be them).")
    datacenter = serializers.CharField(max_length=63, required=False, allow_blank=True)
    name = serializers.CharField(max_length=100, required=False, allow_blank=True)


class DeviceLoginSerializer(serializers.Serializer):
    device_code = serializers.CharField(help_text="Secret: poll with it.")
    user_code = serializers.CharField(help_text="Show it: the user approves it in the browser.")
    verification_uri = serializers.CharField()
    verification_uri_complete = serializers.CharField()
    expires_in = serializers.IntegerField()
    interval = serializers.IntegerField()


class DevicePollSerializer(serializers.Serializer):
    device_code = serializers.CharField(max_length=100)


class ApiTokenSerializer(serializers.ModelSerializer):
    datacenter = serializers.CharField(source="datacenter.name")
    state = serializers.CharField()
    current = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "datacenter", "state", "current", "created_at",
                  "expires_at", "last_used_at", "revoked_at"]

    def get_current(self, token) -> bool:
        request = self.context.get("request")
        return bool(request is not None and isinstance(request.auth, ApiToken)
                    and request.auth.pk == token.pk)


class IssuedTokenSerializer(ApiTokenSerializer):
    """A token just issued: the only answer that carries the token itself."""

    token = serializers.SerializerMethodField(help_text="Shown once; only its digest is stored.")
    username = serializers.CharField(source="user.username")

    def get_token(self, token) -> str:
        return self.context["raw"]

    class Meta(ApiTokenSerializer.Meta):
        fields = ["token", "username", *ApiTokenSerializer.Meta.fields]


class DatacenterSerializer(serializers.ModelSerializer):
    class Meta:
        model = Datacenter
        fields = ["name", "description", "backend"]


class QuotaResourceSerializer(serializers.Serializer):
    limit = serializers.CharField()
    limit_value = serializers.IntegerField()


class QuotaSerializer(serializers.Serializer):
    cpu = QuotaResourceSerializer()
    memory = QuotaResourceSerializer()
    gpu = QuotaResourceSerializer()
    jobs = QuotaResourceSerializer()
    queued = QuotaResourceSerializer(help_text="how many of your jobs may wait at once")
    storage = QuotaResourceSerializer()


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.CharField()
    is_staff = serializers.BooleanField()
    datacenter = DatacenterSerializer(help_text="The datacenter this request acts in.")
    datacenters = DatacenterSerializer(many=True)
    quota = QuotaSerializer(help_text="Your quota in the current datacenter.")


class VersionSerializer(serializers.Serializer):
    server = serializers.CharField()
    api = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    """The body of every error answer."""

    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))
