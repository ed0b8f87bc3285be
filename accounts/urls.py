from django.urls import path, re_path

from . import views

urlpatterns = [
    re_path(r"^version/?$", views.VersionView.as_view(), name="api-version"),
    re_path(r"^me/?$", views.MeView.as_view(), name="api-me"),
    path("auth/token/", views.TokenView.as_view(), name="api-token"),
    path("auth/tokens/", views.TokenListView.as_view(), name="api-tokens"),
    path("auth/device/", views.DeviceLoginView.as_view(), name="api-device-login"),
    path("auth/device/token/", views.DeviceTokenView.as_view(), name="api-device-token"),
    path("auth/tokens/<int:token_id>/", views.TokenDetailView.as_view(), name="api-token-detail"),
    path("audit", views.AuditView.as_view(), name="api-audit"),
]
