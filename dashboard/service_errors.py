"""A service's error shown where a form's user will look for it: beside the field it names."""

from __future__ import annotations

from django import forms

from paddlecloud.errors import PaddleCloudError


def form_error_add(form: forms.Form, exc: PaddleCloudError,
                   rename: dict[str, str] | None = None) -> None:
    """Put ``exc``'s field messages on the form's fields (``rename`` maps a service's field
    name to the form's); anything else becomes a form-wide error."""
    rename = rename or {}
    placed = False
    for field, messages in exc.fields.items():
        name = rename.get(field, field)
        if name in form.fields:
            for message in messages:
                form.add_error(name, message)
            placed = True
    if not placed:
        form.add_error(None, exc.message)
