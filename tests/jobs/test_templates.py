"""Job templates (issue 39): an administrator's spec with fields locked or limited, that users
list (``GET /api/v1/templates/``) and submit from (``"template": NAME``) — the template's
values fill in what is not given, and a locked field changed or a limited one out of bounds is
refused with a 400 naming the field and the template; a template with mistakes is refused by
the admin's check, beside its part."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError as FormError

from jobs.models import Job, JobTemplate
from tests.conftest import assert_error
from tests.factories import PACKAGE, package_write

URL = "/api/v1/jobs/"
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("held_tasks")]


@pytest.fixture
def template(pfs_home):
    package_write(pfs_home)
    return JobTemplate.objects.create(
        name="small-cpu", description="fit-a-line on CPUs",
        spec={"package": PACKAGE, "entry": "python train.py", "image": "paddle:2.6",
              "passes": 2, "env": {"DATA": "/pfs/x"}},
        locked=["image", "entry"],
        limits={"trainers": {"min": 1, "max": 4}, "memory": {"max": "2Gi"},
                "priority": {"choices": ["low", "normal"]}})


def test_users_list_templates_and_submit_from_one(token_client, template, datacenter):
    JobTemplate.objects.create(name="hidden", published=False)
    listed = token_client.get("/api/v1/templates/").json()
    assert [t["name"] for t in listed] == ["small-cpu"]
    assert listed[0]["locked"] == ["image", "entry"]

    answer = token_client.post(URL, {"name": "tpl-job", "template": "small-cpu", "trainers": 3,
                                     "env": {"LR": "0.1"}}, format="json")
    assert answer.status_code == 201, answer.content
    job = Job.objects.get(name="tpl-job")
    assert (job.entry, job.passes, job.trainers, job.env) == (
        "python train.py", 2, 3, {"DATA": "/pfs/x", "LR": "0.1"})


@pytest.mark.parametrize(("given", "field", "words"), [
    ({"image": "other:1"}, "image", "locked by template 'small-cpu' to 'paddle:2.6'"),
    ({"entry": "python evil.py"}, "entry", "locked by template 'small-cpu'"),
    ({"trainers": 5}, "trainers", "template 'small-cpu' allows 1…4, not 5"),
    ({"trainers": "2:8", "pservers": 1}, "trainers", "allows 1…4, not '2:8'"),
    ({"memory": "4Gi"}, "memory", "allows …2Gi, not '4Gi'"),
    ({"priority": "high"}, "priority", "allows low, normal, not 'high'"),
])
def test_a_locked_or_limited_field_is_refused_naming_it(token_client, template, given, field,
                                                        words):
    body = assert_error(token_client.post(URL, {"name": "bad", "template": "small-cpu",
                                                **given}, format="json"), 400, "invalid",
                        field=field)
    assert words in body["fields"][field][0], body
    assert not Job.objects.filter(name="bad").exists()


def test_the_same_value_as_a_locked_one_and_an_unknown_template(token_client, template):
    answer = token_client.post(URL, {"name": "same", "template": "small-cpu",
                                     "image": "paddle:2.6", "memory": "1Gi",
                                     "dry_run": True}, format="json")
    assert answer.status_code == 200, answer.content
    body = assert_error(token_client.post(URL, {"name": "x", "template": "nope"},
                                          format="json"), 400, "invalid", field="template")
    assert "no template named 'nope'" in body["message"]


@pytest.mark.parametrize(("fields", "part", "words"), [
    ({"spec": {"colour": "red"}}, "spec", "not fields of a job: colour"),
    ({"locked": ["image"]}, "locked", "locked without a value in spec: image"),
    ({"locked": ["wings"], "spec": {}}, "locked", "not fields of a job: wings"),
    ({"limits": {"trainers": {"most": 3}}}, "limits", "trainers:"),
])
def test_a_template_with_mistakes_is_refused_beside_its_part(fields, part, words):
    with pytest.raises(FormError) as caught:
        JobTemplate(name="t", **fields).full_clean()
    assert words in caught.value.message_dict[part][0]


def test_the_management_command_publishes_and_updates_a_template():
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("addtemplate", "gpu-1", "--spec", '{"gpu": 1, "image": "paddle:gpu"}',
                 "--lock", "image", "--limits", '{"trainers": {"max": 8}}', stdout=out)
    assert out.getvalue() == "template gpu-1 created\n"
    call_command("addtemplate", "gpu-1", "--unpublish", stdout=out)
    template = JobTemplate.objects.get(name="gpu-1")
    assert (template.locked, template.limits, template.published) == (
        ["image"], {"trainers": {"max": 8}}, False)
    with pytest.raises(CommandError, match="locked: locked without a value in spec: entry"):
        call_command("addtemplate", "gpu-1", "--lock", "entry")
    with pytest.raises(CommandError, match="--spec: not JSON"):
        call_command("addtemplate", "gpu-2", "--spec", "{gpu")
    assert not JobTemplate.objects.filter(name="gpu-2").exists()
