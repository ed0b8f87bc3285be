from django.contrib import admin

from .models import Notification, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ["id", "owner", "datacenter", "team", "channel", "target", "failing_since",
                    "disabled_at"]
    list_filter = ["channel", "datacenter"]
    search_fields = ["owner__username", "target"]
    exclude = ["secret_encrypted"]
    readonly_fields = ["failing_since", "disabled_at", "disabled_reason"]


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["id", "subscription", "kind", "created_at", "sent_at", "attempts",
                    "given_up_at", "last_error"]
    list_filter = ["kind"]
    readonly_fields = [f.name for f in Notification._meta.fields]

    def has_add_permission(self, request):
        return False
