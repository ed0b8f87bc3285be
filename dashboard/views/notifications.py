"""The notifications page: your subscriptions in the current datacenter (add, test, remove; a
webhook's secret shown once, as it is added) and what your dashboard subscriptions told."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from kernel.errors import PaddleCloudError
from notifications import services

from ..context import dashboard_datacenter
from ..forms_account import NotificationAddForm
from ..service_errors import form_error_add


@never_cache  # the answer that shows a new webhook's secret must not be kept by any cache
@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def notification_list(request):
    datacenter = dashboard_datacenter(request)
    form, created = NotificationAddForm(), None
    if datacenter is not None and request.method == "POST":
        action = request.POST.get("action")
        if action == "add":
            form = NotificationAddForm(request.POST)
            created = _add(request, datacenter, form)
            if created is not None and created[1] is None:
                return redirect("dashboard:notifications")
            if created is not None:
                form = NotificationAddForm()
        elif action in ("test", "remove"):
            _act(request, datacenter, action, request.POST.get("subscription", ""))
            return redirect("dashboard:notifications")
        else:
            messages.error(request, "unknown action: nothing was changed")
            return redirect("dashboard:notifications")
    context = {"form": form, "created": created and created[0],
               "secret": created and created[1], "here": datacenter}
    if datacenter is not None:
        context["subscriptions"] = services.subscription_list(request.user, datacenter)
        context["told"] = services.dashboard_notifications(request.user, datacenter)
    return render(request, "dashboard/notifications.html", context)


def _add(request, datacenter, form: NotificationAddForm):
    """The subscription added and its secret (a webhook's), or None."""
    if not form.is_valid():
        return None
    try:
        subscription, secret = services.subscription_create(request.user, datacenter,
                                                            form.service_data())
    except PaddleCloudError as exc:
        form_error_add(form, exc)
        return None
    messages.success(request, f"Subscribed: {', '.join(subscription.events)} to "
                              f"{subscription.target or 'the dashboard'}.")
    return subscription, secret


def _act(request, datacenter, action: str, subscription: str) -> None:
    try:
        if action == "test":
            services.subscription_test(request.user, datacenter, subscription)
            messages.success(request, f"A test notification is on its way to subscription "
                                      f"{subscription}.")
        else:
            services.subscription_delete(request.user, datacenter, subscription)
            messages.success(request, f"Removed subscription {subscription}.")
    except PaddleCloudError as exc:
        messages.error(request, exc.message)
