from django.urls import path

from . import views

urlpatterns = [
    path("jobs/<str:name>/ports/<int:port>/open", views.PortOpenView.as_view(),
         name="api-job-port-open"),
    path("sessions/", views.SessionListView.as_view(), name="api-sessions"),
    path("sessions/<str:name>/", views.SessionDetailView.as_view(), name="api-session"),
    path("sessions/<str:name>/stop", views.SessionStopView.as_view(), name="api-session-stop"),
    path("sessions/<str:name>/keep", views.SessionKeepView.as_view(), name="api-session-keep"),
]
