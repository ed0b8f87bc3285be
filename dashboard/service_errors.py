"""A service's error shown where a form's user will look for it: beside the field it names."""

from __future__ import annotations

from django import forms

from paddlecloud.errors import PaddleCloudError


def form_error_add(form: forms.Form, exc: PaddleCloudError,
                   rename: dict[str, str] | None = None) -> None:
    """Put ``exc``'s messages beside the fields they name (``rename`` maps a service's field
    name to the form's; ``env.KEY`` goes beside ``env`` as ``KEY: message``). What names no
    field of the form goes to the top, with its name; an error naming no field, as it is."""
    rename = rename or {}
    for field, messages in exc.fields.items():
        name, _, key = field.partition(".")
        name = rename.get(name, name)
        target, prefix = (name, key) if name in form.fields else (None, field)
        for message in messages:
            form.add_error(target, f"{prefix}: {message}" if prefix else message)
    if not exc.fields:
        form.add_error(None, exc.message)
