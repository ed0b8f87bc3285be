"""Admins see every job with its replicas and its history. Jobs are changed only through the
services (submit, kill, delete), never edited by hand here."""

from django.contrib import admin, messages

from paddlecloud.errors import PaddleCloudError

from .models import Job, JobEvent, Replica
from .services import job_kill


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


class JobEventInline(ReadOnlyInline):
    model = JobEvent
    fields = ["time", "replica", "from_state", "to_state", "reason"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "datacenter", "state", "trainers", "pservers",
                    "created_at", "finished_at"]
    list_filter = ["state", "datacenter"]
    list_select_related = ["owner", "datacenter"]
    search_fields = ["name", "owner__username"]
    date_hierarchy = "created_at"
    inlines = [ReplicaInline, JobEventInline]
    show_full_result_count = False  # counting tens of thousands of jobs on every page is slow
    actions = ["kill"]

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
