"""The sweeps page: your sweeps with their progress, best so far and predicted end, a form that
starts one (the spec ``paddlectl sweep`` reads, as YAML), and a sweep's kill. Each calls one of
``experiments.services``."""

from __future__ import annotations

import yaml
from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from experiments import services
from kernel.errors import PaddleCloudError

from ..confirm import confirmed_do
from ..service_errors import form_error_add
from .jobs import dashboard_page

EXAMPLE = """\
name: lr
job:                 # the fields of a job (Submit), without its name
  package: /pfs/DC/home/YOU/fit_a_line
  entry: python train.py
  passes: 20
space:
  env.LEARNING_RATE: [0.1, 0.03, 0.001, 0.0001]
parallel: 2
objective: {metric: loss, mode: minimize}
stopping: {rule: median, grace_steps: 20}
"""


class SweepForm(forms.Form):
    spec = forms.CharField(label="Sweep (YAML)", widget=forms.Textarea(attrs={
        "rows": 14, "spellcheck": "false", "class": "mono"}),
        help_text="the spec paddlectl sweep reads: name, job, space, method, max_trials, "
                  "parallel, objective, stopping (docs: Experiments)")

    def data_read(self) -> dict | None:
        """The spec as data, or None with the form's error said."""
        if not self.is_valid():
            return None
        try:
            data = yaml.safe_load(self.cleaned_data["spec"])
        except yaml.YAMLError as exc:
            self.add_error("spec", f"not YAML: {exc}")
            return None
        if not isinstance(data, dict):
            self.add_error("spec", "a mapping of name, job, space, …")
            return None
        return data


@dashboard_page
def sweep_list(request, datacenter):
    form = SweepForm(request.POST or None, initial={"spec": EXAMPLE.replace(
        "/pfs/DC/home/YOU", f"/pfs/{datacenter.name}/home/{request.user.username}")})
    if request.method == "POST" and (data := form.data_read()) is not None:
        try:
            sweep = services.sweep_submit(request.user, datacenter, data)
        except PaddleCloudError as exc:
            form_error_add(form, exc)
        else:
            messages.success(request, f"sweep {sweep.name} started: its first trials are "
                                      "submitted")
            return redirect("dashboard:sweeps")
    return render(request, "dashboard/sweeps.html", {
        "form": form, "sweeps": services.sweep_list(request.user, datacenter)})


@require_http_methods(["GET", "POST"])
@dashboard_page
def sweep_kill(request, datacenter, name: str):
    sweep = services.sweep_get(request.user, datacenter, name)
    return confirmed_do(
        request, title=f"Kill sweep {sweep.name}?",
        message="Every trial still waiting or running is stopped, and no more are "
                "submitted. Their output stays in PFS.",
        button=f"Kill {sweep.name}", back="dashboard:sweeps",
        do=lambda: services.sweep_kill(request.user, datacenter, name),
        done=f"sweep {name} killed: its trials are being stopped")
