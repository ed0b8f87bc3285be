"""Admins manage datacenters, users, memberships and quotas here."""

from contextlib import suppress
from decimal import Decimal

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.utils import timezone

from paddlecloud_core.quantity import (
    QuantityError,
    format_bytes,
    format_cpu,
    parse_bytes,
    parse_cpu,
)

from .execution import backend_kind, backend_kinds, backend_settings_fields
from .forms import ThrottledAdminAuthenticationForm
from .models import (
    QUOTA_RESOURCES,
    ApiToken,
    AuditEntry,
    Budget,
    Datacenter,
    Membership,
    Quota,
    SsoGroupMapping,
    SsoIdentity,
    Team,
    User,
)
from .services import quota_change_record, share_change_record

# The admin's login page takes passwords too (and stays when PADDLECLOUD_OIDC_ONLY turns the
# login page's off): its form is refused as the login page's is, on the same counters.
admin.site.login_form = ThrottledAdminAuthenticationForm

SHARE_FIELDS = ("team_id", "weight")  # a membership's part in sharing its datacenter
TEAM_FIELDS = ("weight", "cpu", "memory", "gpu", "jobs")
CAPACITY_FIELDS = ("capacity_cpu", "capacity_memory", "capacity_gpu")
BUDGET_FIELDS = ("gpu_hours", "cpu_hours", "window", "kind")


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
    cpu = QuantityField(parse=parse_cpu, format=format_cpu, required=False,
                        help_text="cores (4, 0.5) or millicores (500m); empty: the default")
    memory = QuantityField(parse=parse_bytes, format=format_bytes, required=False,
                           help_text="e.g. 16Gi; empty: the default")
    storage = QuantityField(parse=parse_bytes, format=format_bytes, required=False,
                            help_text="e.g. 100Gi; empty: the default")

    class Meta:
        model = Quota
        fields = ["user", "datacenter", "cpu", "memory", "gpu", "jobs", "queued", "storage"]


def _values(data) -> dict:
    return {name: data.get(name) for name in QUOTA_RESOURCES}


class QuotaAuditMixin:
    """Quota edits made in the admin are audited and release queued jobs, like any other."""

    def save_model(self, request, obj, form, change):
        before = _values(form.initial) if change else {}
        super().save_model(request, obj, form, change)
        if isinstance(obj, Quota):
            quota_change_record(request.user, obj.datacenter, obj.user, before,
                                _values(vars(obj)))

    def save_formset(self, request, form, formset, change):
        if formset.model is not Quota:
            return super().save_formset(request, form, formset, change)
        edits = [(f.instance, _values(f.initial) if f.instance.pk else {})
                 for f in formset.forms if f.has_changed() and f not in formset.deleted_forms]
        removed = [(f.instance, _values(f.initial)) for f in formset.deleted_forms
                   if f.instance.pk]
        super().save_formset(request, form, formset, change)
        for quota, before in edits:
            quota_change_record(request.user, quota.datacenter, quota.user, before,
                                _values(vars(quota)))
        for quota, before in removed:
            quota_change_record(request.user, quota.datacenter, quota.user, before, {})


class UserRowsInline(admin.TabularInline):
    """A user's rows, each titled with the user and the datacenter."""

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("user", "datacenter")


class MembershipInline(UserRowsInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["datacenter"]
    fields = ["datacenter", "team", "lead", "weight", "granted_by_sso"]
    readonly_fields = ["granted_by_sso"]  # an admin's membership is theirs, never single sign-on's


class SsoIdentityInline(admin.TabularInline):
    model = SsoIdentity
    extra = 0
    fields = ["issuer", "subject", "created_at", "last_login_at"]
    readonly_fields = fields
    verbose_name_plural = "single sign-on identities (delete one to unlink it)"

    def has_add_permission(self, request, obj=None):
        return False


class QuotaInline(UserRowsInline):
    model = Quota
    form = QuotaForm
    extra = 0
    autocomplete_fields = ["datacenter"]
    verbose_name_plural = "quotas (empty resources take the datacenter's default)"


class DefaultQuotaInline(admin.TabularInline):
    """The datacenter's default quota: the row without a user."""

    model = Quota
    form = QuotaForm
    fields = ["cpu", "memory", "gpu", "jobs", "queued", "storage"]
    max_num = 1
    extra = 1
    verbose_name = verbose_name_plural = "default quota of its users"

    def get_queryset(self, request):
        return super().get_queryset(request).filter(user__isnull=True)


@admin.register(User)
class UserAdmin(QuotaAuditMixin, BaseUserAdmin):
    inlines = [MembershipInline, QuotaInline, SsoIdentityInline]

    def save_formset(self, request, form, formset, change):
        if formset.model is not Membership:
            return super().save_formset(request, form, formset, change)
        edited = [f.instance for f in formset.forms
                  if f.has_changed() and f not in formset.deleted_forms]
        before = {row["pk"]: row for row in Membership.objects.filter(
            pk__in=[m.pk for m in edited if m.pk]).values("pk", *SHARE_FIELDS)}
        super().save_formset(request, form, formset, change)
        for membership in edited:  # a new group or weight: audited, and admits what may start
            share_change_record(request.user, membership.datacenter,
                                f"{membership.user.username} (membership)",
                                before.get(membership.pk, {}),
                                {k: getattr(membership, k) for k in SHARE_FIELDS})

    list_display = ["username", "email", "is_staff", "is_active", "datacenter_names"]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("datacenters")

    @admin.display(description="datacenters")
    def datacenter_names(self, user):
        return ", ".join(dc.name for dc in user.datacenters.all())


class DatacenterForm(forms.ModelForm):
    capacity_cpu = QuantityField(
        parse=parse_cpu, format=format_cpu, required=False, label="capacity: CPU",
        help_text="cores (64, 0.5) or millicores (500m); all jobs together hold at most this, "
                  "shared fairly when contended. Empty: no limit but each user's quota.")
    capacity_memory = QuantityField(parse=parse_bytes, format=format_bytes, required=False,
                                    label="capacity: memory", help_text="e.g. 256Gi")

    class Meta:
        model = Datacenter
        fields = ["capacity_cpu", "capacity_memory"]  # the admin's fieldsets add the rest

    # The backends' settings fields are added by DatacenterAdmin.get_form (they are registered
    # when Django is ready, after this module): each shows what the datacenter holds, else its
    # default; those of the backend chosen are its settings, checked by its rules.

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, value in self.instance.backend_settings.items():
            if name in self.fields:
                self.initial.setdefault(name, value)

    def clean(self):
        cleaned = super().clean()
        with suppress(ValueError):  # no such backend: its field says so
            kind = backend_kind(cleaned.get("backend", ""))
            self.instance.backend_settings = {name: cleaned[name] for name in kind.settings_fields
                                              if name in cleaned}
        return cleaned


@admin.register(Datacenter)
class DatacenterAdmin(QuotaAuditMixin, admin.ModelAdmin):
    form = DatacenterForm
    inlines = [DefaultQuotaInline]
    list_display = ["name", "backend", "description", "pfs_root_path"]
    search_fields = ["name", "description"]
    fieldsets = [
        (None, {"fields": ["name", "description", "backend", "namespace_prefix",
                           "default_image", "gpu_image", "start_timeout", "start_tries"]}),
        # here: a fieldset of each backend's settings (get_fieldsets)
        ("PFS", {"fields": ["pfs_storage", "pfs_root", "public_dir", "s3_bucket",
                            "s3_endpoint_url", "s3_region"]}),
        ("Runtime images", {"fields": ["build_registry", "build_registry_insecure",
                                       "builder_image"]}),
        ("Packages", {"fields": ["package_indexes"]}),
        ("Capacity", {"fields": ["capacity_cpu", "capacity_memory", "capacity_gpu",
                                 "capacity_from_cluster", "capacity_updated_at"]}),
        ("Budgets", {"fields": ["budget_spent", "budget_grace_seconds"]}),
        ("Preemption", {"fields": ["preempt_after"]}),
    ]
    readonly_fields = ["capacity_updated_at"]

    def get_fieldsets(self, request, obj=None):
        general, *rest = self.fieldsets
        return [general, *[(kind.label, {"fields": list(kind.settings_fields)})
                           for kind in backend_kinds() if kind.settings_fields], *rest]

    def get_form(self, request, obj=None, **kwargs):
        kwargs["form"] = type("DatacenterForm", (self.form,), backend_settings_fields())
        return super().get_form(request, obj, **kwargs)

    def save_model(self, request, obj, form, change):
        before = {k: form.initial.get(k) for k in CAPACITY_FIELDS} if change else {}
        super().save_model(request, obj, form, change)
        if change:  # a capacity set by hand: audited, and what now fits is admitted
            share_change_record(request.user, obj, f"datacenter {obj.name} (capacity)",
                                before, {k: getattr(obj, k) for k in CAPACITY_FIELDS})


class TeamMemberInline(admin.TabularInline):
    """The group's members, to see: a member is put in a group on their user's page."""

    model = Membership
    fk_name = "team"
    extra = 0
    fields = ["user", "lead", "weight"]
    readonly_fields = ["user", "lead", "weight"]
    can_delete = False
    verbose_name_plural = "members (put a user in a group on their user's page)"

    def has_add_permission(self, request, obj=None):
        return False


class TeamForm(forms.ModelForm):
    cpu = QuantityField(parse=parse_cpu, format=format_cpu, required=False,
                        help_text="cores (16, 0.5) or millicores; empty: no group limit")
    memory = QuantityField(parse=parse_bytes, format=format_bytes, required=False,
                           help_text="e.g. 256Gi; empty: no group limit")

    class Meta:
        model = Team
        fields = ["datacenter", "name", "weight", "cpu", "memory", "gpu", "jobs"]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """Groups (teams): a quota their members share and a fair-share weight."""

    form = TeamForm
    inlines = [TeamMemberInline]
    list_display = ["name", "datacenter", "weight", "cpu", "memory", "gpu", "jobs"]
    list_filter = ["datacenter"]
    search_fields = ["name"]
    autocomplete_fields = ["datacenter"]

    def save_model(self, request, obj, form, change):
        before = {k: form.initial.get(k) for k in TEAM_FIELDS} if change else {}
        super().save_model(request, obj, form, change)
        share_change_record(request.user, obj.datacenter, f"group {obj.name}", before,
                            {k: getattr(obj, k) for k in TEAM_FIELDS})


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    """GPU-hours and CPU-hours a user or a group may use per window (docs/admin/scheduling.md)."""

    list_display = ["__str__", "gpu_hours", "cpu_hours", "window", "kind"]
    list_filter = ["datacenter", "window", "kind"]
    autocomplete_fields = ["datacenter", "user"]
    fields = ["datacenter", "user", "team", "gpu_hours", "cpu_hours", "window", "kind"]

    def save_model(self, request, obj, form, change):
        def plain(value):  # hours as numbers in the audit's JSON
            return float(value) if isinstance(value, Decimal) else value

        before = {k: plain(form.initial.get(k)) for k in BUDGET_FIELDS} if change else {}
        super().save_model(request, obj, form, change)
        whose = f"group {obj.team.name}" if obj.team_id else obj.user.username
        share_change_record(request.user, obj.datacenter, f"{whose} (budget)", before,
                            {k: plain(getattr(obj, k)) for k in BUDGET_FIELDS})


@admin.register(SsoGroupMapping)
class SsoGroupMappingAdmin(admin.ModelAdmin):
    """Members of an identity provider group are members of a datacenter (single sign-on): at
    each login, added when the group claim names the group, removed when it no longer does."""

    list_display = ["group", "datacenter", "created_at"]
    list_filter = ["datacenter"]
    list_select_related = ["datacenter"]
    search_fields = ["group"]
    autocomplete_fields = ["datacenter"]


@admin.register(Quota)
class QuotaAdmin(QuotaAuditMixin, admin.ModelAdmin):
    form = QuotaForm
    list_display = ["user", "datacenter", "cpu_display", "memory_display", "gpu", "jobs",
                    "queued", "storage_display"]
    list_filter = ["datacenter"]
    list_select_related = ["user", "datacenter"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user", "datacenter"]

    @admin.display(description="CPU", ordering="cpu")
    def cpu_display(self, quota):
        return "default" if quota.cpu is None else format_cpu(quota.cpu)

    @admin.display(description="memory", ordering="memory")
    def memory_display(self, quota):
        return "default" if quota.memory is None else format_bytes(quota.memory)

    @admin.display(description="storage", ordering="storage")
    def storage_display(self, quota):
        return "default" if quota.storage is None else format_bytes(quota.storage)


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
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).")


class RecordAdmin(admin.ModelAdmin):
    """A record to read, that nobody adds, changes or deletes here: the audit log, the usage
    ledger (``jobs.admin``)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(RecordAdmin):
    """Who did what, when: read-only, kept for as long as the database is."""

    list_display = ["time", "actor_name", "action", "datacenter", "target", "details"]
    list_filter = ["action", "datacenter"]
    search_fields = ["actor_name", "target"]
    date_hierarchy = "time"
    show_full_result_count = False
