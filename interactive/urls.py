from django.urls import path

from . import views

urlpatterns = [
    path("jobs/<str:name>/ports/<int:port>/open", views.PortOpenView.as_view(),
         name="api-job-port-open"),
]
