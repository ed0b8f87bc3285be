from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from accounts import sso_views
from kernel import errors

from . import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("login/", sso_views.LoginView.as_view(), name="login"),
    # Single sign-on (accounts/sso_views.py): 404 unless PADDLECLOUD_OIDC_ISSUER is set.
    path("oidc/authenticate/", sso_views.SsoLoginView.as_view(),
         name="oidc_authentication_init"),
    path("oidc/callback/", sso_views.SsoCallbackView.as_view(),
         name="oidc_authentication_callback"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("dashboard.urls")),
    path("api/v1/", include("accounts.urls")),
    path("api/v1/", include("jobs.urls")),
    path("api/v1/", include("pfs.urls")),
    path("api/v1/", include("registries.urls")),
    path("api/v1/", include("notifications.urls")),
    path("api/v1/", include("experiments.urls")),
    path("api/v1/", include("interactive.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # (Split: Swagger UI's settings come as a script of their own, not inline; see the CSP.)
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    # Anything else under /api/ is a JSON 404, with DEBUG on or off.
    # (CSRF-exempt: a POST to a path that does not exist is a 404, whoever sends it.)
    re_path(r"^api/", csrf_exempt(errors.handler404)),
]

handler400 = "kernel.errors.handler400"
handler404 = "kernel.errors.handler404"
handler500 = "kernel.errors.handler500"
