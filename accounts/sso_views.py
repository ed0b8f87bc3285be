"""The pages of single sign-on: the login page (with its "Log in with …" button), the start of
the code flow and its callback (mozilla-django-oidc's views, answering 404 while single
sign-on is off and a clear message, never a 500, when it fails)."""

from __future__ import annotations

import logging

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.core.exceptions import SuspiciousOperation
from django.http import Http404
from django.shortcuts import redirect
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from .forms import ThrottledAuthenticationForm
from .sso import SsoError, oidc_setting, sso_enabled

logger = logging.getLogger(__name__)

FAILED = "Single sign-on failed: "


class LoginView(auth_views.LoginView):
    """The password form, and beside it (or, with PADDLECLOUD_OIDC_ONLY, instead of it) the
    button that logs in with the identity provider."""

    authentication_form = ThrottledAuthenticationForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        enabled = sso_enabled()
        context.update(sso_enabled=enabled,
                       sso_name=settings.PADDLECLOUD_OIDC_PROVIDER_NAME,
                       password_login=not (enabled and settings.PADDLECLOUD_OIDC_ONLY))
        return context

    def post(self, request, *args, **kwargs):
        if sso_enabled() and settings.PADDLECLOUD_OIDC_ONLY:
            messages.error(request, "Log in with "
                           f"{settings.PADDLECLOUD_OIDC_PROVIDER_NAME}: passwords are off here.")
            return redirect("login")
        return super().post(request, *args, **kwargs)


def _failed(request, reason: str):
    messages.error(request, FAILED + reason)
    return redirect("login")


class SsoLoginView(OIDCAuthenticationRequestView):
    """GET /oidc/authenticate/?next=…: off to the provider, with state, nonce and PKCE."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)  # endpoints: later

    def get(self, request):
        if not sso_enabled():
            raise Http404("single sign-on is not configured")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = self.get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except SsoError as exc:
            return _failed(request, str(exc))
        self.OIDC_RP_CLIENT_ID = settings.PADDLECLOUD_OIDC_CLIENT_ID
        return super().get(request)


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """GET /oidc/callback/?code=…&state=…: the provider sends the browser back here."""

    get_settings = staticmethod(oidc_setting)

    def get(self, request):
        if not sso_enabled():
            raise Http404("single sign-on is not configured")
        if request.GET.get("error"):
            logger.info("single sign-on: the provider answered %s",
                        request.GET.get("error")[:100])
        try:
            return super().get(request)
        except SsoError as exc:
            return _failed(request, str(exc))
        except SuspiciousOperation as exc:
            # A state this browser never sent, a token whose signature, issuer, audience or
            # nonce is wrong: refused (and logged, without the token).
            logger.warning("single sign-on refused: %s", exc)
            return _failed(request, "the answer of the identity provider was refused; "
                                    "log in again")
        except requests.RequestException as exc:
            logger.warning("single sign-on: the identity provider failed: %s",
                           type(exc).__name__)
            return _failed(request, "the identity provider did not answer as expected; "
                                    "try again later")

    def login_failure(self):
        if self.request.GET.get("error"):
            return _failed(self.request, "the identity provider refused the login "
                           f"({self.request.GET.get('error')[:100]})")
        user = getattr(self, "user", None)
        if user is not None and not user.is_active:
            return _failed(self.request, "your account is disabled; ask an administrator")
        return _failed(self.request, "the login could not be completed; log in again")
