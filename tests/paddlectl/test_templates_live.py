"""``paddlectl templates`` and ``submit --template NAME``: templates listed, a job submitted
from one without a PACKAGE (the template's), and a locked or limited field refused with the
field and the template named — paddlectl in a subprocess against the live portal."""

from __future__ import annotations

import json

import pytest

from jobs.models import JobTemplate
from tests.factories import PACKAGE, package_write
from tests.paddlectl.test_jobs_live import fails, ok, table

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("held_tasks")]


@pytest.fixture
def template(live_cli):
    package_write(live_cli.portal.home)
    return JobTemplate.objects.create(
        name="small-cpu", spec={"package": PACKAGE, "entry": "python train.py", "passes": 2},
        locked=["entry"], limits={"trainers": {"min": 1, "max": 4}})


def test_templates_are_listed_and_submitted_from(live_cli, template):
    assert table(ok(live_cli("templates")).stdout) == [
        ["NAME", "VALUES", "LOCKED", "LIMITS"],
        ["small-cpu", f"package={PACKAGE} passes=2", "entry=python train.py", "trainers=1..4"]]
    assert json.loads(ok(live_cli("templates", "-o", "json")).stdout)[0]["name"] == "small-cpu"
    out = ok(live_cli("submit", "--template", "small-cpu", "-jobname", "from-tpl",
                      "-trainers", "2")).stdout
    assert out.startswith("job from-tpl submitted")
    job = json.loads(ok(live_cli("get", "jobs", "from-tpl", "-o", "json")).stdout)
    assert (job["entry"], job["passes"], job["trainers"]) == ("python train.py", 2, 2)


def test_a_locked_or_limited_field_is_refused_naming_it(live_cli, template):
    fails(live_cli("submit", "--template", "small-cpu", "-jobname", "big", "-trainers", "9"),
          1, "trainers: template 'small-cpu' allows 1…4, not 9")
    fails(live_cli("submit", "--template", "small-cpu", "-jobname", "other", "-entry",
                   "python other.py"), 1, "entry: locked by template 'small-cpu'")
    fails(live_cli("submit", "--template", "nope", "-jobname", "x"), 1,
          "template: no template named 'nope'")
    fails(live_cli("submit", "-jobname", "x"), 1, "required: PACKAGE")
