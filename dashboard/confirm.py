"""Confirmation of destructive POSTs (delete, revoke), enforced by the server.

A form that destroys something is marked ``data-confirm="…"``: with JavaScript, ``api.js`` asks
in a dialog and adds ``confirm=yes``; without it, the view answers the bare POST with a page
that asks, repeating the form's fields. Either way nothing is destroyed unconfirmed.
"""

from __future__ import annotations

from django.shortcuts import render

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
