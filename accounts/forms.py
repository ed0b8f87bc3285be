"""The browser login form, throttled by the same counters as the token endpoint."""

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm

from paddlecloud.errors import ThrottledError

from .sso import sso_only
from .throttling import client_address, login_attempt_reserve, login_success_record


class ThrottledAuthenticationForm(AuthenticationForm):
    def clean(self):
        username = self.cleaned_data.get("username")
        if username is None or not self.cleaned_data.get("password"):
            return super().clean()  # a field is missing: no password is checked
        address = client_address(self.request)
        try:
            login_attempt_reserve(username, address)
        except ThrottledError as exc:
            raise forms.ValidationError(exc.message, code="throttled") from None
        try:
            cleaned = super().clean()  # a wrong password raises: the attempt stays counted
        except forms.ValidationError:
            user = get_user_model().objects.filter(username=username).first()
            if user is not None and sso_only(user):
                raise forms.ValidationError(
                    f"{username} logs in with single sign-on and has no password: use the "
                    f"“Log in with {settings.PADDLECLOUD_OIDC_PROVIDER_NAME}” button",
                    code="sso_user") from None
            raise
        login_success_record(username, address)
        return cleaned
