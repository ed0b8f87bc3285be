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
    path("jobs/<str:name>/tasks", views.JobTasksView.as_view(), name="api-job-tasks"),
    path("jobs/<str:name>/checkpoints", views.JobCheckpointsView.as_view(),
         name="api-job-checkpoints"),
    path("compare/", views.CompareView.as_view(), name="api-compare"),
    path("templates/", views.TemplateListView.as_view(), name="api-templates"),
    path("master/<uuid:uid>/next", views.MasterNextView.as_view(), name="api-master-next"),
    path("master/<uuid:uid>/position", views.MasterPositionView.as_view(),
         name="api-master-position"),
    path("master/<uuid:uid>/resume", views.MasterResumeView.as_view(),
         name="api-master-resume"),
    path("master/<uuid:uid>/tasks/<int:task_id>/<str:action>", views.MasterTaskView.as_view(),
         name="api-master-task"),
    path("builds/", views.BuildListView.as_view(), name="api-builds"),
    path("builds/<uuid:uid>/", views.BuildDetailView.as_view(), name="api-build"),
    path("builds/<uuid:uid>/logs", views.BuildLogsView.as_view(), name="api-build-logs"),
    path("quota", views.QuotaView.as_view(), name="api-quota"),
    path("quota/budgets", views.BudgetsView.as_view(), name="api-budgets"),
    path("usage", views.UsageView.as_view(), name="api-usage"),
    path("group", views.GroupView.as_view(), name="api-group"),
    path("group/jobs/", views.GroupJobsView.as_view(), name="api-group-jobs"),
]
