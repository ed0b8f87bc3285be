"""A job field is written once: ``paddlecloud_core.spec.FIELDS``. Every way of submitting a job
— the API (its serializer, hence the schema), ``paddlectl submit``, the SDK's ``PaddleJob`` and
the dashboard's form — offers each field of the table as the table says, and restates none of
it; and a field added to the table, the model and a migration, in a copy of the project,
shows up in all four (run there in subprocesses)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from django import forms as django_forms
from rest_framework import serializers

from dashboard.forms import JobSubmitForm
from jobs.models import Job
from jobs.serializers import JobSerializer, JobSubmitSerializer
from paddlecloud_core.spec import FIELD, FIELDS, JobSpec
from paddlecloud_sdk import PaddleJob
from paddlecloud_sdk.errors import JobSpecError
from paddlectl.args import CliParser
from paddlectl.commands.jobs import _submission, setup_submit

ROOT = Path(__file__).resolve().parents[1]
PKG = "/pfs/dc/home/u/pkg"


def submit_parser() -> CliParser:
    parser = CliParser("paddlectl submit")
    setup_submit(parser)
    return parser


def test_jobspec_and_the_model_hold_every_field():
    assert [f.name for f in FIELDS] == list(JobSpec.__dataclass_fields__)
    for f in FIELDS:
        held = JobSpec.__dataclass_fields__[f.name]
        if f.required:
            assert held.default is held.default_factory is dataclasses.MISSING, f.name
        elif f.type == "env":
            assert held.default_factory() == f.default
        else:
            assert held.default == f.default, f.name
    columns = {field.name for field in Job._meta.get_fields()}
    assert set(FIELD) <= columns, set(FIELD) - columns


def test_the_api_takes_and_shows_every_field():
    taken = JobSubmitSerializer().fields
    assert set(taken) == {*FIELD, "dry_run", "placement", "template"}  # the submission's own
    for f in FIELDS:
        field = taken[f.name]
        assert (field.required, field.help_text) == (f.required, f.help), f.name
        if f.type == "integer":
            assert isinstance(field, serializers.IntegerField), f.name
            assert (field.min_value, field.max_value) == (f.minimum, f.maximum), f.name
        elif f.choices:
            assert list(field.choices) == list(f.values), f.name
        elif f.type == "env":
            assert isinstance(field, serializers.DictField)
        else:
            assert type(field) is serializers.CharField, f.name
    shown = JobSerializer.Meta.fields
    assert set(FIELD) <= set(shown)
    assert len(shown) == len(set(shown))


def test_every_flag_of_submit_is_a_field():
    actions = {action.dest: action for action in submit_parser()._actions}
    flagged = [f for f in FIELDS if f.flag]
    for f in flagged:
        action = actions[f.name]
        strings = set(action.option_strings)
        for name in f.flag:
            assert (f"-{name}" if len(name) == 1 else f"--{name}") in strings, (f.name, name)
        assert action.metavar == f.metavar and action.help.startswith(f.help), f.name
    # Beside the fields: help, --dry-run, --template, -y (a re-run's confirmation) and the
    # package (PACKAGE, or -package PATH); no flag of its own for a field.
    assert set(actions) == {f.name for f in flagged} | {"help", "dry_run", "template", "yes",
                                                        "package", "package_flag"}
    # What the flags send is each field under its API name, whole numbers as numbers.
    argv = []
    for f in flagged:
        value = {"integer": str(f.minimum or 1), "trainers": "2", "choice": f.values[0] if
                 f.values else "", "priority": "high", "env": "A=1"}.get(f.type, "x")
        argv += [f"--{f.flag[-1]}" if len(f.flag[-1]) > 1 else f"-{f.flag[-1]}", value]
    sent = _submission(submit_parser().parse_intermixed_args([*argv, PKG]))
    assert set(sent) == {f.name for f in flagged}
    for f in flagged:
        if f.type in ("integer", "trainers"):
            assert isinstance(sent[f.name], int), f.name


def test_paddlejob_takes_every_field():
    # Its arguments are the table's: __init__ itself names none of them.
    code = PaddleJob.__init__.__code__
    assert code.co_varnames[:code.co_argcount + code.co_kwonlyargcount] == ("self",)
    parameters = inspect.signature(PaddleJob).parameters
    on_sdk = [f for f in FIELDS if f.sdk_name is not None]
    for f in on_sdk:
        assert parameters[f.sdk_name].default == f.sdk_default, f.name
        assert f"{f.sdk_name}: {f.help}" in PaddleJob.__init__.__doc__
    assert {f.name for f in FIELDS} - {f.name for f in on_sdk} == {"trainers_min"}  # MIN:MAX
    # Each argument reaches the API under the field's name.
    given = {"job_name": "fit", "entry_point": "python t.py", "trainer_package": PKG,
             "env": {"A": "1"}, "dataset": "/pfs/dc/home/u/data/*", "dataset_unit": "records",
             "task_records": 5, "priority": "low", "pservers": 1, "trainers": (1, 2),
             "runtime_image": "paddle:2", "registry": "mine", "topology": "t.py",
             "pscpu": "500m", "psmemory": "1Gi", "resume_from": "base:10", "rerun_of": "base",
             "after": ["prepare", "clean:any"]}
    for f in on_sdk:
        if f.sdk_name not in given and f.type == "integer":
            given[f.sdk_name] = f.minimum + 1
    body = PaddleJob(**given).spec()
    assert set(body) == {f.name for f in on_sdk}
    assert body["deadline_seconds"] == FIELD["deadline_seconds"].minimum + 1
    assert body["after"] == "prepare,clean:any"  # a repeated flag's values, joined
    # Its rules are the core's, under its names.
    limits = FIELD["deadline_seconds"]
    with pytest.raises(JobSpecError, match=f"deadline_seconds: must be between {limits.minimum} "
                                        f"and {limits.maximum}"):
        PaddleJob(**{**given, "deadline_seconds": 0})


def test_the_form_offers_every_field_it_shows():
    form = JobSubmitForm(registries=["mine"])
    on_form = [f for f in FIELDS if f.label]
    assert list(form.fields) == [f.name for f in on_form]
    assert [name for _, names in form.GROUPS for name in names] == [f.name for f in on_form]
    for f in on_form:
        field = form.fields[f.name]
        assert (field.label, field.required) == (f.label, False), f.name
        assert field.help_text.startswith(f.help), f.name
        if f.choices:
            offered = [value for value, _ in field.choices if value]  # the default first
            assert sorted(offered) == sorted(f.values), f.name
        if f.widget == "number":
            assert isinstance(field.widget, django_forms.NumberInput), f.name
            assert field.widget.attrs["min"] == f.minimum, f.name
    assert {f.name for f in FIELDS} - {f.name for f in on_form} == {"trainers_min"}


def _restated(f) -> dict[str, set]:
    """What a consumer could copy of a field: its help, its label and example, its flags."""
    return {"help": {f.help}, "label": {f.label, f.placeholder} - {""},
            "flag": {f"--{name}" if len(name) > 1 else f"-{name}" for name in f.flag}
            | {f.metavar} - {""}}


# Each consumer (and where in it, if not all of it), and what of the table it could restate.
CONSUMERS = {
    "jobs/serializers.py": (None, ("help",)),
    "paddlectl/commands/jobs.py": ({"setup_submit", "_submission"}, ("help", "flag")),
    "paddlecloud_sdk/job.py": (None, ("help",)),
    "dashboard/forms.py": (None, ("help", "label")),
}


@pytest.mark.parametrize("path", CONSUMERS)
def test_no_consumer_restates_the_table(path):
    """No help text, label, flag or list of choices of a field is written in a consumer."""
    where, kinds = CONSUMERS[path]
    tree = ast.parse((ROOT / path).read_text())
    nodes = [node for node in tree.body if where is None or getattr(node, "name", "") in where]
    assert where is None or len(nodes) == len(where)
    copies = {(f.name, text) for f in FIELDS for kind in kinds for text in _restated(f)[kind]}
    choices = [set(f.values) for f in FIELDS if f.choices]
    for node in (inner for outer in nodes for inner in ast.walk(outer)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found = [(name, text) for name, text in copies
                     if text == node.value or (len(text) > 20 and text in node.value)]
            assert not found, (path, node.lineno, found)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            words = {e.value for e in node.elts if isinstance(e, ast.Constant)}
            assert words not in choices, (path, node.lineno, words)


# --- a field added in a copy of the project --------------------------------------------------

# What a reviewer writes: a row of the table, and the model's column (its migration is made).
ROW = '''\
    Field("cooldown_seconds", "integer", "wait this long between passes (a throw-away field)",
          minimum=1, maximum=600, flag=("cooldown",), metavar="SECONDS",
          label="Cool-down (seconds)", widget="number", group="Runtime"),
'''
COLUMN = '''\
    cooldown_seconds = models.PositiveIntegerField(null=True, blank=True)
'''
# The project's packages (as the import contracts list them), its templates and manage.py.
COPIED = [*tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
          ["root_packages"], "templates", "manage.py"]

PORTAL_SIDE = textwrap.dedent('''\
    import io, json, django
    django.setup()
    from django.core.management import call_command
    out = io.StringIO()
    call_command("spectacular", "--format", "openapi-json", stdout=out)
    schemas = json.loads(out.getvalue())["components"]["schemas"]
    from dashboard.forms import JobSubmitForm
    form = JobSubmitForm()
    print(json.dumps({"taken": schemas["JobSubmitRequest"]["properties"]["cooldown_seconds"],
                      "shown": schemas["Job"]["properties"]["cooldown_seconds"],
                      "input": str(form["cooldown_seconds"]),
                      "groups": dict(form.GROUPS)}))
''')
CLIENT_SIDE = textwrap.dedent('''\
    import contextlib, inspect, io, json
    from paddlectl.cli import main
    from paddlecloud_core.spec import spec_check
    from paddlecloud_sdk import PaddleJob
    from paddlecloud_sdk.errors import JobSpecError
    out = io.StringIO()
    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(out):
        main(["submit", "--help"], stdout=out)
    job = PaddleJob("fit", "python t.py", "/pfs/dc/home/u/pkg", cooldown_seconds=30)
    try:
        PaddleJob("fit", "python t.py", "/pfs/dc/home/u/pkg", cooldown_seconds=0)
    except JobSpecError as exc:
        refused = str(exc)
    check = spec_check({"cooldown_seconds": "700"}, default_image="x")
    print(json.dumps({"help": out.getvalue(),
                      "parameter": str(inspect.signature(PaddleJob).parameters[
                          "cooldown_seconds"]),
                      "doc": PaddleJob.__init__.__doc__, "sent": job.spec(), "refused": refused,
                      "checked": check.errors.get("cooldown_seconds")}))
''')


def _run(where: Path, script: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(where), "DJANGO_SETTINGS_MODULE":
           "paddlecloud.settings"}
    result = subprocess.run([sys.executable, "-c", script], cwd=where, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_a_field_added_to_the_table_the_model_and_a_migration_is_everywhere(tmp_path):
    copy = tmp_path / "project"
    copy.mkdir()
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, copy / name)
    spec = copy / "paddlecloud_core" / "spec.py"
    text = spec.read_text()
    end = text.index("\n)\nFIELD = ")
    spec.write_text(text[:end + 1] + ROW + text[end + 1:])
    models = copy / "jobs" / "models.py"
    text = models.read_text()
    anchor = re.search(r"\n    deadline_seconds = models\.", text).start() + 1
    models.write_text(text[:anchor] + COLUMN + text[anchor:])
    env = {**os.environ, "PYTHONPATH": str(copy)}
    made = subprocess.run([sys.executable, "manage.py", "makemigrations", "jobs", "--name",
                           "cooldown_seconds"], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert made.returncode == 0 and "cooldown_seconds" in made.stdout, made.stdout + made.stderr

    portal = _run(copy, PORTAL_SIDE)
    assert portal["taken"] == {"type": "integer", "minimum": 1, "maximum": 600,
                               "description": "wait this long between passes (a throw-away "
                                              "field)"}
    assert portal["shown"]["type"] == "integer"
    assert 'type="number"' in portal["input"] and 'min="1"' in portal["input"]
    assert "cooldown_seconds" in portal["groups"]["Runtime"]

    client = _run(copy, CLIENT_SIDE)
    assert re.search(r"--cooldown SECONDS\s+wait this long between passes", client["help"])
    assert client["parameter"] == "cooldown_seconds: int | None = None"
    assert "cooldown_seconds: wait this long between passes" in client["doc"]
    assert client["sent"]["cooldown_seconds"] == 30
    assert "cooldown_seconds: must be between 1 and 600, not 0" in client["refused"]
    assert client["checked"] == ["must be between 1 and 600, not 700"]
