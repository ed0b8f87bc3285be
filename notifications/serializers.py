from rest_framework import serializers

from .events import EVENTS
from .models import Notification, Subscription


class SubscriptionSerializer(serializers.ModelSerializer):
    """A subscription as the API shows it: never its secret."""

    datacenter = serializers.CharField(source="datacenter.name")
    group = serializers.CharField(source="team.name", default=None)

    class Meta:
        model = Subscription
        fields = ["id", "events", "channel", "target", "format", "wait_minutes",
                  "earlier_minutes", "group", "datacenter", "created_at", "failing_since",
                  "disabled_at", "disabled_reason"]


class SubscriptionCreatedSerializer(SubscriptionSerializer):
    secret = serializers.CharField(
        allow_null=True, help_text="a webhook's signing secret: shown this once, never again")

    class Meta(SubscriptionSerializer.Meta):
        fields = [*SubscriptionSerializer.Meta.fields, "secret"]


class SubscriptionWriteSerializer(serializers.Serializer):
    """For the schema only: the body is checked by notifications.services."""

    events = serializers.ListField(child=serializers.ChoiceField(choices=list(EVENTS)))
    channel = serializers.ChoiceField(choices=Subscription.Channel.choices)
    target = serializers.CharField(required=False, help_text="an e-mail address (default: "
                                   "yours) or a webhook's https:// URL")
    format = serializers.ChoiceField(choices=Subscription.Format.choices, required=False)
    wait_minutes = serializers.IntegerField(required=False)
    earlier_minutes = serializers.IntegerField(required=False)
    group = serializers.CharField(required=False, help_text="a group's (administrators only)")


class NotificationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "kind", "payload", "created_at", "sent_at", "attempts", "last_error"]
