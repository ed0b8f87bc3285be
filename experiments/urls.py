from django.urls import path

from . import views

urlpatterns = [
    path("sweeps/", views.SweepListView.as_view(), name="api-sweeps"),
    path("sweeps/<str:name>/", views.SweepDetailView.as_view(), name="api-sweep"),
    path("sweeps/<str:name>/kill", views.SweepKillView.as_view(), name="api-sweep-kill"),
]
