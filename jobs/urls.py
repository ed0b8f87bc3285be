from django.urls import path

from . import views

urlpatterns = [
    path("jobs/", views.JobListView.as_view(), name="api-jobs"),
    path("jobs/<str:name>/", views.JobDetailView.as_view(), name="api-job"),
    path("jobs/<str:name>/kill", views.JobKillView.as_view(), name="api-job-kill"),
    path("jobs/<str:name>/workers", views.JobWorkersView.as_view(), name="api-job-workers"),
    path("jobs/<str:name>/events", views.JobEventsView.as_view(), name="api-job-events"),
    path("jobs/<str:name>/logs", views.JobLogsView.as_view(), name="api-job-logs"),
    path("jobs/<str:name>/metrics", views.JobMetricsView.as_view(), name="api-job-metrics"),
    path("quota", views.QuotaView.as_view(), name="api-quota"),
]
