"""A service's error shown where a form's user will look for it: beside the field it names."""

from __future__ import annotations

from collections.abc import Callable

from django import forms

from kernel.errors import PaddleCloudError


def form_error_add(form: forms.Form, exc: PaddleCloudError,
                   rename: dict[str, str] | None = None, skip=()) -> None:
    """Put ``exc``'s messages beside the fields they name (``rename`` maps a service's field
    name to the form's; ``env.KEY`` goes beside ``env`` as ``KEY: message``). What names no
    field of the form goes to the top, with its name; an error naming no field, as it is.
    Fields in ``skip`` (already flagged by the form) keep their own message."""
    rename = rename or {}
    for field, messages in exc.fields.items():
        name, _, key = field.partition(".")
        name = rename.get(name, name)
        if name in skip:
            continue
        target, prefix = (name, key) if name in form.fields else (None, field)
        for message in messages:
            form.add_error(target, f"{prefix}: {message}" if prefix else message)
    if not exc.fields:
        form.add_error(None, exc.message)


def form_valid_or_all_errors(form: forms.Form, check: Callable[[dict], object]) -> bool:
    """Whether the form is valid. If it is not, the service's ``check`` still runs on the
    values as typed, so every mistake shows at once, not the service's after the form's."""
    if form.is_valid():
        return True
    values = {name: form.cleaned_data.get(name, form.data.get(form.add_prefix(name), ""))
              for name in form.fields}
    try:
        check(values)
    except PaddleCloudError as exc:
        form_error_add(form, exc, skip=set(form.errors))
    return False
