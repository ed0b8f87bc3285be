"""The one place a password is checked: Django's check, behind the failed-login counters."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend

from .throttling import client_address, login_attempt_reserve, login_success_record


class PasswordBackend(ModelBackend):
    """Django's password check, behind the failed-login counters (``accounts.throttling``).

    Every password the portal takes reaches it through ``authenticate()`` — the login page,
    the admin's login page, the token endpoint — so each way counts on the same counters, and
    a way added later (a form of a package, say) does too, without remembering to. The
    attempt is counted before the password is checked, and ``ThrottledError`` (429) raised
    when it is one too many; callers with a request pass it, the token endpoint passes the
    client's ``address``; a check with neither (``manage.py shell``) counts as from
    "unknown"."""

    def authenticate(self, request, username=None, password=None, address=None, **kwargs):
        if username is None:
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        if username is None or password is None:
            return None  # not a password login
        if address is None:
            address = client_address(request) if request is not None else "unknown"
        login_attempt_reserve(username, address)  # a failure until it proves right
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None:
            login_success_record(username, address)
        return user
