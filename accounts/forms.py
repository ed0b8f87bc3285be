"""The browser login form, throttled by the same counters as the token endpoint."""

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from paddlecloud.errors import ThrottledError

from .throttling import (
    client_address,
    login_failure_record,
    login_success_record,
    login_throttle_check,
)


class ThrottledAuthenticationForm(AuthenticationForm):
    def clean(self):
        username = self.cleaned_data.get("username") or ""
        address = client_address(self.request)
        try:
            login_throttle_check(username, address)
        except ThrottledError as exc:
            raise forms.ValidationError(exc.message, code="throttled") from None
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            login_failure_record(username, address)
            raise
        login_success_record(username, address)
        return cleaned
