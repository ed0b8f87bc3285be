"""The submit form's "Start from template" (issue 39): the form filled in from a template, and
a locked field changed shown beside that field, naming the template."""

from __future__ import annotations

import re

import pytest

from jobs.models import Job
from tests.factories import PACKAGE
from tests.jobs import test_templates

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("held_tasks")]
template = test_templates.template  # the fixture: small-cpu, its entry locked, passes 2




def test_the_form_starts_from_a_template_and_keeps_its_locks(browser, template):
    page = browser.get("/jobs/new/").content.decode()
    assert '<option value="small-cpu">small-cpu: fit-a-line on CPUs</option>' in page
    form = browser.get("/jobs/new/", {"template": "small-cpu"}).content.decode()
    assert re.search(r'name="entry"[^>]*value="python train.py"', form)
    assert '<input type="hidden" name="template" value="small-cpu">' in form
    assert "image, entry locked to its values" in form

    answer = browser.post("/jobs/new/", {"template": "small-cpu", "name": "mine",
                                         "package": PACKAGE, "entry": "python other.py",
                                         "passes": "2"})
    assert answer.status_code == 200
    assert re.search(r'id="id_entry"[\s\S]*?locked by template &#x27;small-cpu&#x27;',
                     answer.content.decode())
    assert not Job.objects.filter(name="mine").exists()

    answer = browser.post("/jobs/new/", {"template": "small-cpu", "name": "mine",
                                         "package": PACKAGE, "entry": "python train.py"})
    assert answer.status_code == 302, answer.content.decode()[-2000:]
    assert Job.objects.get(name="mine").passes == 2  # left empty: the template's
