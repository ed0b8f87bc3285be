"""Run one of examples/ as the demo user, through the portal's API, and follow it to the end.

    paddlecloud runexample fit_a_line --endpoint http://127.0.0.1:8000

The example directory is copied into the demo user's PFS home (``examples/<name>``); its
``job.json`` is the submission (everything but the package). The job's log is followed until
the job ends; the command exits 0 only if it succeeded. An ended job of the same name is
deleted first, so the command can be run again.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from accounts.models import Datacenter

from .demo import DATACENTER, USERNAME

EXAMPLES = settings.BASE_DIR / "examples"


class Api:
    def __init__(self, endpoint: str):
        self.base = endpoint.rstrip("/") + "/api/v1"
        self.token: str | None = None

    def call(self, method: str, path: str, body: dict | None = None, *, stream: bool = False):
        request = urllib.request.Request(self.base + path, method=method)  # noqa: S310 - ours
        if body is not None:
            request.data = json.dumps(body).encode()
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            response = urllib.request.urlopen(request, timeout=None if stream else 30)  # noqa: S310
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read())["message"]
            except (ValueError, KeyError):
                message = exc.reason
            raise CommandError(f"{method} {path}: {exc.code} {message}") from None
        except urllib.error.URLError as exc:
            raise CommandError(f"the portal at {self.base} does not answer: {exc.reason}") from None
        if stream:
            return response
        with response:
            data = response.read()
        return json.loads(data) if data else None


class Command(BaseCommand):
    help = "Submit one of examples/ as the demo user and follow it until it ends."

    def add_arguments(self, parser):
        names = sorted(p.name for p in EXAMPLES.iterdir() if (p / "job.json").exists())
        parser.add_argument("example", choices=names)
        parser.add_argument("--endpoint", default="http://127.0.0.1:8000")
        parser.add_argument("--timeout", type=float, default=600)

    def handle(self, *args, example, endpoint, timeout, **options):
        password_file = settings.VAR_DIR / "demo-password"
        if not password_file.exists():
            raise CommandError("no demo user yet: run `paddlecloud demo` first")
        datacenter = Datacenter.objects.get(name=DATACENTER)
        target = datacenter.pfs_root_path / "home" / USERNAME / "examples" / example
        source = EXAMPLES / example
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        spec = json.loads((source / "job.json").read_text())
        spec["package"] = f"/pfs/{DATACENTER}/home/{USERNAME}/examples/{example}"
        name = spec["name"]

        api = Api(endpoint)
        api.token = api.call("POST", "/auth/token/", {
            "username": USERNAME, "password": password_file.read_text().strip(),
            "name": "runexample"})["token"]
        try:
            existing = api.call("GET", f"/jobs/{name}/")
        except CommandError:
            existing = None
        if existing and existing["state"] in ("succeeded", "failed", "killed"):
            api.call("DELETE", f"/jobs/{name}/")
        job = api.call("POST", "/jobs/", spec)
        self.stdout.write(f"Submitted job {job['name']}: {job['trainers']} trainer(s), "
                          f"{job['pservers']} pserver(s); following trainer-0's log\n")
        self.stdout.flush()
        with api.call("GET", f"/jobs/{name}/logs?worker=trainer-0&follow=1", stream=True) as log:
            for line in log:
                sys.stdout.write(line.decode(errors="replace"))
                sys.stdout.flush()
        deadline = time.monotonic() + timeout
        while (job := api.call("GET", f"/jobs/{name}/"))["state"] not in (
                "succeeded", "failed", "killed"):
            if time.monotonic() > deadline:
                raise CommandError(f"job {name} is still {job['state']} after {timeout:.0f}s")
            time.sleep(0.5)
        for worker in api.call("GET", f"/jobs/{name}/workers"):
            self.stdout.write(f"  {worker['name']:<12} {worker['state']:<10} {worker['reason']}")
        output = Path(datacenter.pfs_root_path) / "home" / USERNAME / "jobs" / name / "output"
        self.stdout.write(f"Job {name} {job['state']}: {job['state_reason']}")
        self.stdout.write(f"Its output (model, metrics, logs): /pfs/{DATACENTER}/home/"
                          f"{USERNAME}/jobs/{name}/output/ (on disk: {output})")
        api.call("DELETE", "/auth/token/")
        if job["state"] != "succeeded":
            raise CommandError(f"job {name} {job['state']}")
