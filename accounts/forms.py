"""The browser login form, throttled by the same counters as the token endpoint."""

from django import forms
from django.contrib.auth.forms import AuthenticationForm

from paddlecloud.errors import ThrottledError

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
        cleaned = super().clean()  # a wrong password raises: the attempt stays counted
        login_success_record(username, address)
        return cleaned
