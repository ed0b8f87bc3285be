"""The notebooks page: your notebooks (JupyterLab, each a job of yours: ``interactive.sessions``)
with their state and idle limit, "New notebook" (a small form), and for each one Open (through
the portal's proxy, at an origin of its own: ``interactive.opening``), Keep and Stop."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from interactive import sessions
from interactive.opening import session_open
from kernel.errors import ConflictError, PaddleCloudError
from paddlecloud_core.quantity import format_bytes, format_cpu

from ..confirm import confirmed_do
from ..service_errors import form_error_add
from .jobs import dashboard_page


class NotebookForm(forms.Form):
    cpu = forms.CharField(label="CPU", required=False, max_length=32,
                          widget=forms.TextInput(attrs={"placeholder": "1"}),
                          help_text="1, 0.5 or 500m")
    memory = forms.CharField(label="Memory", required=False, max_length=32,
                             widget=forms.TextInput(attrs={"placeholder": "1Gi"}),
                             help_text="1Gi, 512Mi")
    gpu = forms.IntegerField(label="GPUs", required=False, min_value=0,
                             widget=forms.NumberInput(attrs={"placeholder": "0"}))
    idle = forms.CharField(label="Stop when idle for", required=False, max_length=32,
                           widget=forms.TextInput(attrs={"placeholder": "1h"}),
                           help_text="its kernels idle this long: 90s, 30m, 1h")
    image = forms.CharField(label="Image", required=False, max_length=512,
                            widget=forms.TextInput(attrs={"spellcheck": "false"}),
                            help_text="default: the datacenter's")
    name = forms.CharField(label="Name", required=False, max_length=100,
                           widget=forms.TextInput(attrs={"placeholder": "notebook-xxxxx",
                                                         "spellcheck": "false",
                                                         "autocomplete": "off"}))


@dashboard_page
def notebook_list(request, datacenter):
    form = NotebookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            session = sessions.session_start(request.user, datacenter, "notebook",
                                             **form.cleaned_data)
        except PaddleCloudError as exc:
            form_error_add(form, exc)
        else:
            messages.success(request, f"notebook {session.job.name} started: open it once it "
                                      "runs")
            return redirect("dashboard:notebooks")
    return render(request, "dashboard/notebooks.html", {
        "form": form, "notebooks": [
            _row(session) for session in sessions.session_list(request.user, datacenter,
                                                               kind="notebook")]})


def _row(session) -> dict:
    job = session.job
    resources = f"{format_cpu(job.cpu)} CPU · {format_bytes(job.memory)}" + (
        f" · {job.gpu} GPU" if job.gpu else "")
    return {"job": job, "kept": session.kept, "resources": resources,
            "idle": sessions.idle_shown(session.idle_seconds),
            "idle_at": sessions.session_idle_at(session)}


@dashboard_page
def notebook_open(request, datacenter, name: str):
    """Into the notebook (a redirect to its route's origin, with a one-time ticket)."""
    try:
        return redirect(session_open(request.user, datacenter, name, request))
    except ConflictError as exc:
        messages.error(request, exc.message)
        return redirect("dashboard:notebooks")


@require_POST
@dashboard_page
def notebook_keep(request, datacenter, name: str):
    keep = request.POST.get("keep") != "no"
    try:
        sessions.session_keep(request.user, datacenter, name, keep)
    except ConflictError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"notebook {name} kept: never stopped when idle" if keep
                         else f"notebook {name} is stopped once idle again")
    return redirect("dashboard:notebooks")


@require_http_methods(["GET", "POST"])
@dashboard_page
def notebook_stop(request, datacenter, name: str):
    session = sessions.session_get(request.user, datacenter, name)
    return confirmed_do(
        request, title=f"Stop notebook {name}?",
        message="Its kernels are stopped and what they hold in memory is lost; the files in "
                "your home stay.",
        button=f"Stop {name}", back="dashboard:notebooks",
        do=lambda: sessions.session_stop(request.user, datacenter, session.job.name),
        done=f"notebook {name} stopped")
