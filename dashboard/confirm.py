"""Confirmation of destructive POSTs (delete, revoke), enforced by the server.

A form that destroys something is marked ``data-confirm="…"``: with JavaScript, ``api.js`` asks
in a dialog and adds ``confirm=yes``; without it, the view answers the bare POST with a page
that asks, repeating the form's fields. Either way nothing is destroyed unconfirmed.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse

from kernel.errors import ConflictError

SKIPPED = ("csrfmiddlewaretoken", "confirm")


def confirmed(request) -> bool:
    return request.POST.get("confirm") == "yes"


def confirm_page(request, *, title: str, message: str, button: str, cancel_url: str):
    """The page asking for confirmation; confirming posts the same fields again."""
    fields = [(name, value) for name, values in request.POST.lists() if name not in SKIPPED
              for value in values]
    return render(request, "dashboard/confirm_action.html", {
        "title": title, "message": message, "button": button, "cancel_url": cancel_url,
        "fields": fields, "action": request.get_full_path()})


def confirmed_do(request, *, title: str, message: str, button: str, back: str,
                 do: Callable[[], object], done: str):
    """A destructive action from a page's button: the confirmation first (``confirm_page``),
    then ``do()``, and back to the page named ``back`` saying ``done`` (or the conflict that
    stopped it: the thing ended meanwhile)."""
    if request.method == "GET" or not confirmed(request):
        return confirm_page(request, title=title, message=message, button=button,
                            cancel_url=reverse(back))
    try:
        do()
    except ConflictError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, done)
    return redirect(back)
