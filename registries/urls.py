from django.urls import path

from . import views

urlpatterns = [
    path("registries/", views.RegistryListView.as_view(), name="api-registries"),
    path("registries/<str:name>/", views.RegistryDetailView.as_view(), name="api-registry"),
]
