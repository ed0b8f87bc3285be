"""Admins see every job with its replicas and its history. Jobs are changed only through the
services (submit, kill, delete), never edited by hand here: deleting one here removes it as
its owner's delete does (``services.job_remove``)."""

from django.contrib import admin, messages
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import Truncator

from accounts.admin import RecordAdmin
from kernel.errors import PaddleCloudError

from .models import Job, JobEvent, JobTemplate, Replica, Usage
from .services import job_kill, job_remove
from .states import ACTIVE_STATES, FINAL_JOB_STATES, WAITING_STATES

REASON_SHOWN = 60  # characters of a job's state reason in the list (its page has all of it)


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ReplicaInline(ReadOnlyInline):
    model = Replica
    fields = ["role", "index", "state", "restarts", "exit_code", "host", "endpoint", "reason",
              "started_at", "finished_at"]

    def get_queryset(self, request):  # each row is titled with its job's name
        return super().get_queryset(request).select_related("job")


class JobEventInline(ReadOnlyInline):
    model = JobEvent
    fields = ["time", "replica", "from_state", "to_state", "reason", "repeats", "repeated_until"]

    def get_queryset(self, request):  # each row is titled with its job's and replica's names
        return super().get_queryset(request).select_related("job", "replica__job")


class ActivityFilter(admin.SimpleListFilter):
    """Everyone's running and queued jobs at a click (the admin's usual question)."""

    title = "activity"
    parameter_name = "activity"

    def lookups(self, request, model_admin):
        return [("active", "running or queued"), ("queued", "queued"), ("ended", "ended")]

    def queryset(self, request, queryset):
        states = {"active": [*WAITING_STATES, *ACTIVE_STATES], "queued": WAITING_STATES,
                  "ended": FINAL_JOB_STATES}.get(self.value())
        return queryset.filter(state__in=states) if states else queryset


def _when(moment) -> str:
    """A time in the admin's time zone, short: ``2026-11-26 13:56``."""
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M") if moment else "-"


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    # As few columns as say it all, so that the list fits a laptop beside the admin's sidebar
    # and filters: the reason under the state, trainers and pservers as one.
    list_display = ["name", "owner", "datacenter", "state_and_reason", "replicas", "created",
                    "ended"]
    list_filter = [ActivityFilter, "state", "datacenter"]
    list_select_related = ["owner", "datacenter"]
    search_fields = ["name", "owner__username"]
    date_hierarchy = "created_at"
    inlines = [ReplicaInline, JobEventInline]
    show_full_result_count = False  # counting tens of thousands of jobs on every page is slow
    actions = ["kill"]

    @admin.display(description="state", ordering="state")
    def state_and_reason(self, job):
        return format_html('{}<br><span class="quiet">{}</span>', job.get_state_display(),
                           Truncator(job.state_reason).chars(REASON_SHOWN))

    @admin.display(description="trainers / ps")
    def replicas(self, job):
        return f"{job.trainers} / {job.pservers}"

    @admin.display(description="created", ordering="created_at")
    def created(self, job):
        return _when(job.created_at)

    @admin.display(description="ended", ordering="finished_at")
    def ended(self, job):
        return _when(job.finished_at)

    @admin.action(description="Kill the selected jobs")
    def kill(self, request, queryset):
        killed = 0
        for job in queryset.select_related("owner", "datacenter"):
            try:
                job_kill(job.owner, job.datacenter, job.name, by=request.user)
            except PaddleCloudError as exc:
                self.message_user(request, exc.message, messages.WARNING)
            else:
                killed += 1
        self.message_user(request, f"Killed {killed} job(s).")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        """An ended job may be deleted (a live one is killed first, as its owner's is)."""
        return (super().has_delete_permission(request, obj)
                and (obj is None or obj.state in FINAL_JOB_STATES))

    def delete_model(self, request, obj):
        """Removed as every job is (``job_remove``): audited, what may still run of it
        stopped, its use kept in the usage ledger and its runs there ended."""
        job_remove(obj, by=request.user)

    def delete_queryset(self, request, queryset):
        for job in queryset.filter(state__in=FINAL_JOB_STATES).select_related("owner",
                                                                              "datacenter"):
            job_remove(job, by=request.user)


@admin.register(Usage)
class UsageAdmin(RecordAdmin):
    """The usage ledger, to read: every run of every replica, of jobs deleted since too (what
    budgets are summed from). Nobody adds, edits or deletes a row here."""

    list_display = ["job_name", "owner", "datacenter", "role", "index", "attempt", "cpu", "gpu",
                    "started_at", "ended_at"]
    list_filter = ["datacenter"]
    list_select_related = ["owner", "datacenter"]
    search_fields = ["job_name", "owner__username"]
    date_hierarchy = "started_at"
    show_full_result_count = False


@admin.register(JobTemplate)
class JobTemplateAdmin(admin.ModelAdmin):
    """Templates users submit from (``paddlectl templates``, ``submit --template``): a
    template's spec, locked fields and limits are checked on save, each mistake beside its
    part."""

    list_display = ("name", "published", "description")
    list_filter = ("published",)
    search_fields = ("name", "description")
