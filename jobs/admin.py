"""Admins see every job with its replicas and its history. Jobs are changed only through the
services (submit, kill, delete), never edited by hand here."""

from django.contrib import admin

from .models import Job, JobEvent, Replica


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

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
