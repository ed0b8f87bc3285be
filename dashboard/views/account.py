"""The account pages: registry credentials, quota, API tokens, and the datacenter switch.

Each view checks a form, calls the service the API calls, and answers with the page:
POST/redirect/GET with a message on success, the page again with errors beside the fields
otherwise.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from accounts import device as account_device
from accounts import selectors as account_selectors
from accounts import services as account_services
from accounts.throttling import client_address
from jobs.states import FINAL_JOB_STATES
from kernel.errors import PaddleCloudError
from registries import services as registry_services
from scheduling.admission import quota_report
from scheduling.budgets import budget_report

from ..confirm import confirm_page, confirmed
from ..context import SESSION_KEY, dashboard_datacenter, dashboard_datacenters
from ..forms_account import RegistryAddForm, RegistryChangeForm, TokenCreateForm
from ..meters import meter
from ..paddle_config import config_snippet, tokens_snippet
from ..service_errors import form_error_add, form_valid_or_all_errors

GET_POST = require_http_methods(["GET", "HEAD", "POST"])


def _endpoint(request) -> str:
    return request.build_absolute_uri("/").rstrip("/")


# -- registries -------------------------------------------------------------------------------


def _registry_rows(request, datacenter, failed: tuple[str, RegistryChangeForm] | None):
    """Each credential, how many jobs that have not ended pull with it, and its change form:
    open when asked for (``?change=NAME``), or bound with its errors when it failed."""
    opened = request.GET.get("change")
    registries = registry_services.registry_list(request.user, datacenter).annotate(
        active_jobs=Count("jobs", filter=~Q(jobs__state__in=FINAL_JOB_STATES)))
    rows = []
    for registry in registries:
        if failed is not None and failed[0] == registry.name:
            form = failed[1]
        else:
            form = RegistryChangeForm(initial={"server": registry.server,
                                               "username": registry.username},
                                      auto_id=f"id_{registry.name}_%s")
        rows.append({"registry": registry, "form": form,
                     "open": registry.name in (failed and failed[0], opened)})
    return rows


@login_required
@GET_POST
def registry_list(request):
    datacenter = dashboard_datacenter(request)
    add_form, failed = RegistryAddForm(), None
    if datacenter is not None and request.method == "POST":
        action = request.POST.get("action")
        if action == "add":
            add_form = RegistryAddForm(request.POST)
            if _registry_add(request, datacenter, add_form):
                return redirect("dashboard:registries")
        elif action == "change":
            name = request.POST.get("name", "")
            form = RegistryChangeForm(request.POST, auto_id=f"id_{name}_%s")
            if _registry_change(request, datacenter, name, form):
                return redirect("dashboard:registries")
            failed = (name, form)
        elif action == "delete":
            return _registry_delete(request, datacenter, request.POST.get("name", ""))
        else:
            messages.error(request, "unknown action: nothing was changed")
            return redirect("dashboard:registries")
    rows = _registry_rows(request, datacenter, failed) if datacenter is not None else []
    return render(request, "dashboard/registries.html",
                  {"rows": rows, "add_form": add_form})


def _registry_add(request, datacenter, form: RegistryAddForm) -> bool:
    if not form_valid_or_all_errors(form, lambda values: registry_services.registry_create_check(
            request.user, datacenter, values)):
        return False
    try:
        registry = registry_services.registry_create(request.user, datacenter,
                                                     form.service_data())
    except PaddleCloudError as exc:
        form_error_add(form, exc)
        return False
    messages.success(request, f"Added registry credentials {registry.name!r} "
                              f"({registry.username}@{registry.server}).")
    return True


def _registry_change(request, datacenter, name: str, form: RegistryChangeForm) -> bool:
    if not form_valid_or_all_errors(form, lambda values: registry_services.registry_update_check(
            {key: value for key, value in values.items() if key != "password" or value})):
        return False
    try:
        registry_services.registry_update(request.user, datacenter, name, form.service_data())
    except PaddleCloudError as exc:
        if "registry" in exc.fields:  # gone meanwhile
            messages.error(request, exc.message)
            return True
        form_error_add(form, exc)
        return False
    messages.success(request, f"Changed registry credentials {name!r}.")
    return True


def _registry_delete(request, datacenter, name: str):
    if not confirmed(request):
        return confirm_page(
            request, title="Delete registry credentials?",
            message=f"Jobs will no longer be able to pull images with {name!r}.",
            button="Delete", cancel_url=reverse("dashboard:registries"))
    try:
        registry_services.registry_delete(request.user, datacenter, name)
    except PaddleCloudError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Deleted registry credentials {name!r}.")
    return redirect("dashboard:registries")


# -- quota ------------------------------------------------------------------------------------

METERS = (("cpu", "CPU"), ("memory", "Memory"), ("gpu", "GPUs"), ("jobs", "Running jobs"),
          ("queued", "Queued jobs"), ("storage", "Storage"))


def _meter(resource: str, label: str, figures: dict) -> dict:
    """Storage's bar also shows what uploads in progress have reserved."""
    reserved = figures.get("reserved_value", 0)
    return {"resource": resource, "label": label, "used": figures["used"],
            "limit": figures["limit"], "reserved": figures["reserved"] if reserved else "",
            **meter(figures["used_value"] + reserved, figures["limit_value"])}


BUDGET_LABELS = {"gpu_hours": "GPU-hours", "cpu_hours": "CPU-hours"}


def _budget_meters(report: list[dict]) -> list[dict]:
    """A bar for each budgeted resource, with the use over its window as a bar chart (an
    hour or a day a bar, its height against the busiest)."""
    out = []
    for budget in report:
        for key, label in BUDGET_LABELS.items():
            figures = budget[key]
            if figures is None:
                continue
            series = [bucket[key] for bucket in budget["series"]]
            top = max(series) or 1.0
            step = "hour" if budget["window"] == "day" else "day"
            out.append({
                "label": f"{label} {budget['in_words']}", "whose": budget["whose"],
                "kind": budget["kind"], "used": f"{figures['used']:.1f}",
                "limit": f"{figures['limit']:g}", "left": f"{figures['left']:.1f}",
                "lost": f"{figures['lost']:.1f}" if figures["lost"] else "",
                **meter(figures["used"], figures["limit"]),
                "step": step, "count": len(series),
                "bars": [{"x": i + 0.1, "height": round(100 * value / top, 1),
                          "y": round(100 - 100 * value / top, 1),
                          "title": f"{bucket['start'][:16].replace('T', ' ')} UTC: "
                                   f"{value:.2f} {label}"}
                         for i, (bucket, value) in enumerate(zip(budget["series"], series,
                                                                 strict=True))]})
    return out


@login_required
@require_http_methods(["GET", "HEAD"])
def quota(request):
    datacenters = dashboard_datacenters(request)
    datacenter = dashboard_datacenter(request, datacenters)
    meters, budgets = [], []
    if datacenter is not None:
        report = quota_report(request.user, datacenter)
        meters = [_meter(resource, label, report[resource]) for resource, label in METERS]
        budgets = _budget_meters(budget_report(request.user, datacenter))
    rows = [(dc, account_selectors.quota_get(request.user, dc).limits()) for dc in datacenters]
    return render(request, "dashboard/quota.html", {"meters": meters, "rows": rows,
                                                    "budgets": budgets})


# -- tokens -----------------------------------------------------------------------------------

SENT = "dashboard:tokens-sent"  # in the session: the token forms already sent (``once``)
SENT_KEPT = 20


@never_cache  # the page that shows a new token must not be kept by any cache
@login_required
@GET_POST
def token_list(request):
    datacenters = dashboard_datacenters(request)
    current = dashboard_datacenter(request, datacenters)
    form = TokenCreateForm(datacenters=datacenters, current=current)
    issued = None
    if request.method == "POST":
        action = request.POST.get("action")
        if action == "revoke":
            return _token_revoke(request)
        if action != "create":
            messages.error(request, "unknown action: nothing was changed")
            return redirect("dashboard:tokens")
        form = TokenCreateForm(request.POST, datacenters=datacenters, current=current)
        if form.is_valid() and form.cleaned_data["once"] in request.session.get(SENT, []):
            messages.warning(request, "That form was sent already: its token was created and "
                                      "shown once. Create another one if you did not copy it.")
            return redirect("dashboard:tokens")
        issued = _token_create(request, form)
        if issued is not None:
            form = TokenCreateForm(datacenters=datacenters, current=current)
    tokens = list(account_selectors.token_list(request.user))
    endpoint = _endpoint(request)
    context = {"form": form, "issued": issued, "endpoint": endpoint,
               "active": [t for t in tokens if t.state == "active"],
               "inactive": [t for t in tokens if t.state != "active"]}
    if datacenters:
        shown = issued.token.datacenter if issued else current
        tokens = None
        if not request.user.has_usable_password():  # single sign-on: the config holds tokens
            tokens = {issued.token.datacenter.name: issued.raw} if issued else {}
        context["config"] = config_snippet(request.user.username, endpoint, datacenters,
                                           shown.name, tokens)
        context["token_config"] = tokens is not None
    if issued:
        context["tokens_json"] = tokens_snippet(endpoint, issued)
    return render(request, "dashboard/tokens.html", context)


def _token_create(request, form: TokenCreateForm):
    """The token just issued (its raw value is shown on this answer only), or None."""
    if not form.is_valid():
        return None
    data = form.cleaned_data
    try:
        issued = account_services.token_create(
            request.user, datacenter_name=data["datacenter"], name=data["name"],
            ttl_days=data["expires_in_days"])
    except PaddleCloudError as exc:
        form_error_add(form, exc)
        return None
    if data["once"]:
        request.session[SENT] = [*request.session.get(SENT, [])[-(SENT_KEPT - 1):],
                                 data["once"]]
    return issued


def _token_revoke(request):
    token_id = request.POST.get("token", "")
    if not token_id.isdigit():
        messages.error(request, "token: which token to revoke is missing")
        return redirect("dashboard:tokens")
    if not confirmed(request):
        return confirm_page(
            request, title="Revoke this token?",
            message="Scripts and paddlectl sessions using it will be refused from now on.",
            button="Revoke", cancel_url=reverse("dashboard:tokens"))
    try:
        token = account_services.token_revoke(request.user, int(token_id))
    except PaddleCloudError as exc:
        messages.error(request, exc.message)
    else:
        label = f"{token.name} ({token.prefix}…)" if token.name else f"{token.prefix}…"
        messages.success(request, f"Revoked token {label}.")
    return redirect("dashboard:tokens")


# -- paddlectl login --web --------------------------------------------------------------------


@never_cache
@login_required
@GET_POST
def device_login(request):
    """Approve (or deny) the paddlectl that shows a code: ``paddlectl login --web``."""
    code = (request.POST.get("code") if request.method == "POST"
            else request.GET.get("code", "")).strip()
    context = {"code": account_device.user_code_normal(code) if code else "", "login": None}
    try:
        if request.method == "POST":
            action = request.POST.get("action")
            if action == "approve":
                login = account_device.device_login_approve(request.user, code,
                                                            client_address(request))
                context["done"] = "approved"
                context["login"] = login
            elif action == "deny":
                account_device.device_login_deny(request.user, code, client_address(request))
                context["done"] = "denied"
            else:
                messages.error(request, "unknown action: nothing was changed")
        elif code:
            context["login"] = account_device.device_login_lookup(request.user, code,
                                                                  client_address(request))
    except PaddleCloudError as exc:
        context["error"] = exc.message
    return render(request, "dashboard/device.html", context,
                  status=400 if "error" in context and request.method == "POST" else 200)


# -- datacenter -------------------------------------------------------------------------------


def _safe_next(request) -> str:
    target = request.POST.get("next", "")
    if target.startswith("/") and url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return reverse("home")


@login_required
@require_POST
def datacenter_switch(request):
    """Act in another of the user's datacenters (kept in the session), then go back."""
    name = request.POST.get("datacenter", "")
    try:
        account_selectors.membership_get(request.user, name)
    except PaddleCloudError as exc:
        messages.error(request, exc.message)
    else:
        request.session[SESSION_KEY] = name
    return redirect(_safe_next(request))
