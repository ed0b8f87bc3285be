"""Admins see every credential (never its password) and may delete one, e.g. when it leaked;
only its owner adds or changes it, so the password is never typed into the admin."""

from django.contrib import admin, messages

from kernel.errors import PaddleCloudError

from .models import Registry
from .services import registry_delete


@admin.register(Registry)
class RegistryAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "datacenter", "server", "username", "updated_at"]
    list_filter = ["datacenter"]
    list_select_related = ["owner", "datacenter"]
    search_fields = ["name", "owner__username", "server"]
    fields = ["name", "owner", "datacenter", "server", "username", "created_at", "updated_at"]
    readonly_fields = fields
    actions = ["delete_credentials"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # through the action, which also removes the pull secret and audits

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @admin.action(description="Delete the selected credentials (and their pull secrets)")
    def delete_credentials(self, request, queryset):
        deleted = 0
        for registry in queryset.select_related("owner", "datacenter"):
            try:
                registry_delete(registry.owner, registry.datacenter, registry.name,
                                by=request.user)
            except PaddleCloudError as exc:
                self.message_user(request, exc.message, messages.WARNING)
            else:
                deleted += 1
        self.message_user(request, f"Deleted {deleted} credential(s).")
