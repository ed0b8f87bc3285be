"""Admins manage datacenters, users, memberships and quotas here."""

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

from paddlecloud.quantity import QuantityError, format_bytes, format_cpu, parse_bytes, parse_cpu

from .models import ApiToken, Datacenter, Membership, Quota, User


class QuantityField(forms.CharField):
    """A text field for ``500m`` / ``8Gi`` style amounts, stored as integers."""

    def __init__(self, *, parse, format, **kwargs):
        self.parse, self.format = parse, format
        super().__init__(**kwargs)

    def prepare_value(self, value):
        return self.format(value) if isinstance(value, int) else value

    def to_python(self, value):
        value = super().to_python(value)
        if value in self.empty_values:
            return None
        try:
            return self.parse(value)
        except QuantityError as exc:
            raise forms.ValidationError(str(exc)) from None


class QuotaForm(forms.ModelForm):
    cpu = QuantityField(parse=parse_cpu, format=format_cpu,
                        help_text="cores (4, 0.5) or millicores (500m)")
    memory = QuantityField(parse=parse_bytes, format=format_bytes, help_text="e.g. 16Gi")
    storage = QuantityField(parse=parse_bytes, format=format_bytes, help_text="e.g. 100Gi")

    class Meta:
        model = Quota
        fields = ["user", "datacenter", "cpu", "memory", "gpu", "jobs", "storage"]


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["datacenter"]


class QuotaInline(admin.TabularInline):
    model = Quota
    form = QuotaForm
    extra = 0
    autocomplete_fields = ["datacenter"]


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    inlines = [MembershipInline, QuotaInline]
    list_display = ["username", "email", "is_staff", "is_active", "datacenter_names"]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("datacenters")

    @admin.display(description="datacenters")
    def datacenter_names(self, user):
        return ", ".join(dc.name for dc in user.datacenters.all())


@admin.register(Datacenter)
class DatacenterAdmin(admin.ModelAdmin):
    list_display = ["name", "backend", "description", "pfs_root_path"]
    search_fields = ["name", "description"]
    fieldsets = [
        (None, {"fields": ["name", "description", "backend", "default_image"]}),
        ("Kubernetes", {"fields": ["kube_in_cluster", "kubeconfig", "kube_context",
                                   "namespace_prefix"]}),
        ("PFS", {"fields": ["pfs_storage", "pfs_root", "public_dir", "s3_bucket",
                            "s3_endpoint_url", "s3_region"]}),
    ]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    form = QuotaForm
    list_display = ["user", "datacenter", "cpu_display", "memory_display", "gpu", "jobs",
                    "storage_display"]
    list_filter = ["datacenter"]
    list_select_related = ["user", "datacenter"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user", "datacenter"]

    @admin.display(description="CPU", ordering="cpu")
    def cpu_display(self, quota):
        return format_cpu(quota.cpu)

    @admin.display(description="memory", ordering="memory")
    def memory_display(self, quota):
        return format_bytes(quota.memory)

    @admin.display(description="storage", ordering="storage")
    def storage_display(self, quota):
        return format_bytes(quota.storage)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens can be seen and revoked here, never created: a token is shown only once."""

    list_display = ["prefix", "user", "datacenter", "name", "state", "created_at", "expires_at",
                    "last_used_at"]
    list_filter = ["datacenter"]
    list_select_related = ["user", "datacenter"]
    search_fields = ["user__username", "name", "prefix"]
    readonly_fields = ["user", "datacenter", "name", "prefix", "created_at", "expires_at",
                       "last_used_at", "revoked_at"]
    exclude = ["digest"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        from django.utils import timezone

        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).")
