from django.urls import path

from . import session_views, views

urlpatterns = [
    path("jobs/<str:name>/ports/<int:port>/open", views.PortOpenView.as_view(),
         name="api-job-port-open"),
    path("sessions/", session_views.SessionListView.as_view(), name="api-sessions"),
    path("sessions/<str:name>/", session_views.SessionDetailView.as_view(), name="api-session"),
    path("sessions/<str:name>/stop", session_views.SessionStopView.as_view(),
         name="api-session-stop"),
    path("sessions/<str:name>/keep", session_views.SessionKeepView.as_view(),
         name="api-session-keep"),
]
