"""The forms of the account pages. They check what a browser sends (present, not too long);
the rules themselves are the services' (``registries.services``, ``accounts.services``,
``notifications.services``), whose errors ``dashboard.service_errors`` puts beside these
fields."""

from __future__ import annotations

import secrets

from django import forms
from django.conf import settings

from accounts.services import MAX_TOKEN_TTL_DAYS
from notifications.events import EVENTS
from notifications.models import Subscription
from notifications.webhooks import URL_MAX
from registries.services import NAME_MAX, PASSWORD_MAX, USERNAME_MAX

# The password is write-only: never rendered back, not even after an error.
PASSWORD = forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"})


class RegistryAddForm(forms.Form):
    name = forms.CharField(max_length=NAME_MAX, help_text="How jobs name it: "
                                                          "paddlectl submit -registry NAME")
    server = forms.CharField(max_length=253, help_text="host[:port], e.g. "
                                                       "registry.example.com:5000")
    username = forms.CharField(max_length=USERNAME_MAX, label="Username at the registry",
                               widget=forms.TextInput(attrs={"autocomplete": "off"}))
    password = forms.CharField(max_length=PASSWORD_MAX, strip=False, widget=PASSWORD,
                               label="Password or access token",
                               help_text="Stored encrypted; never shown again.")

    def service_data(self) -> dict:
        return dict(self.cleaned_data)


class RegistryChangeForm(forms.Form):
    server = forms.CharField(max_length=253)
    username = forms.CharField(max_length=USERNAME_MAX, label="Username at the registry",
                               widget=forms.TextInput(attrs={"autocomplete": "off"}))
    password = forms.CharField(max_length=PASSWORD_MAX, strip=False, widget=PASSWORD,
                               required=False, label="New password",
                               help_text="Leave empty to keep the current one.")

    def service_data(self) -> dict:
        """What changes: the password only when a new one was typed."""
        data = {"server": self.cleaned_data["server"],
                "username": self.cleaned_data["username"]}
        if self.cleaned_data["password"]:
            data["password"] = self.cleaned_data["password"]
        return data


class TokenCreateForm(forms.Form):
    name = forms.CharField(max_length=100, required=False, label="Label",
                           help_text="What it is for, e.g. laptop or ci.")
    datacenter = forms.ChoiceField()
    expires_in_days = forms.IntegerField(min_value=1, max_value=MAX_TOKEN_TTL_DAYS,
                                         label="Expires in (days)")
    # Tells this form's sending from a second one (a reload, a double click), which must not
    # make a second token.
    once = forms.CharField(widget=forms.HiddenInput, required=False, max_length=64)

    def __init__(self, *args, datacenters=(), current=None, **kwargs):
        kwargs.setdefault("initial", {
            "datacenter": current.name if current else None,
            "expires_in_days": settings.PADDLECLOUD_TOKEN_TTL_DAYS,
            "once": secrets.token_urlsafe(16)})
        super().__init__(*args, **kwargs)
        self.fields["datacenter"].choices = [(dc.name, dc.name) for dc in datacenters]


class NotificationAddForm(forms.Form):
    """A subscription (``notifications.services`` checks it)."""

    events = forms.MultipleChoiceField(
        choices=[(kind, f"{kind}: {event.summary}") for kind, event in EVENTS.items()],
        widget=forms.CheckboxSelectMultiple)
    channel = forms.ChoiceField(choices=Subscription.Channel.choices)
    target = forms.CharField(max_length=URL_MAX, required=False, help_text=(
        "An e-mail address (empty: yours) or a webhook's https:// URL; none for the "
        "dashboard."))
    format = forms.ChoiceField(choices=Subscription.Format.choices, required=False,
                               help_text="A webhook's payload.")
    wait_minutes = forms.IntegerField(required=False, min_value=1, label="Waiting longer than "
                                      "(minutes)", help_text="With job.waiting.")
    earlier_minutes = forms.IntegerField(required=False, min_value=1, label="Start earlier by "
                                         "more than (minutes)", help_text="With job.earlier.")

    def service_data(self) -> dict:
        return {key: value for key, value in self.cleaned_data.items()
                if value not in (None, "")}
