"""The dashboard's pages. Each page calls the same services as the API; the live parts (job
states, log lines, metrics) come over the WebSockets in ``paddlecloud/routing.py``."""

from django.urls import path

from .views import (
    account,
    compare,
    files,
    group,
    jobs,
    notebooks,
    notifications,
    reports,
    sweeps,
    visualdl,
)

app_name = "dashboard"

urlpatterns = [
    path("jobs/", jobs.job_list, name="jobs"),
    path("jobs/new/", jobs.job_submit, name="job-submit"),
    path("jobs/<str:name>/", jobs.job_detail, name="job"),
    path("jobs/<str:name>/events/", jobs.job_events, name="job-events"),
    path("jobs/<str:name>/kill", jobs.job_kill, name="job-kill"),
    path("jobs/<str:name>/delete", jobs.job_delete, name="job-delete"),
    path("jobs/<str:name>/logs/<str:worker>.log", jobs.job_log_download, name="job-log"),
    path("sweeps/", sweeps.sweep_list, name="sweeps"),
    path("sweeps/<str:name>/kill", sweeps.sweep_kill, name="sweep-kill"),
    path("notebooks/", notebooks.notebook_list, name="notebooks"),
    path("notebooks/<str:name>/open", notebooks.notebook_open, name="notebook-open"),
    path("notebooks/<str:name>/keep", notebooks.notebook_keep, name="notebook-keep"),
    path("notebooks/<str:name>/stop", notebooks.notebook_stop, name="notebook-stop"),
    path("visualdl/", visualdl.visualdl_start, name="visualdl-start"),
    path("visualdl/<str:name>/", visualdl.visualdl_page, name="visualdl"),
    path("compare/", compare.compare, name="compare"),
    path("group/", group.group, name="group"),
    path("files/", files.file_browse, name="files"),
    path("registries/", account.registry_list, name="registries"),
    path("quota/", account.quota, name="quota"),
    path("tokens/", account.token_list, name="tokens"),
    path("notifications/", notifications.notification_list, name="notifications"),
    path("usage/", reports.usage, name="usage"),
    path("audit/", reports.audit, name="audit"),
    path("device/", account.device_login, name="device"),
    path("datacenter", account.datacenter_switch, name="datacenter"),
]
