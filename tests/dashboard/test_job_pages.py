"""The job pages with Django's test client on the real database: what each page shows, the
submit form (errors beside their fields, dry runs), kill and delete, the log download, and
that nobody sees another user's jobs."""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser

import pytest
from django.test import Client

from jobs.models import Job
from paddlecloud_core.spec import FIELDS
from tests.conftest import PASSWORD, streamed
from tests.factories import HOME, PACKAGE, package_write
from tests.jobs.files import log_path, metrics_path

# Jobs are recorded, not started (held_tasks): these tests look at pages, not processes.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("held_tasks")]


class _Element(HTMLParser):
    """The text and attributes of the element with a given id."""

    def __init__(self, element_id: str):
        super().__init__()
        self.element_id, self.depth, self.attrs, self.parts = element_id, 0, None, []

    def handle_starttag(self, tag, attrs):
        if self.depth:
            self.depth += tag not in ("input", "br", "img", "meta", "link", "option")
        elif dict(attrs).get("id") == self.element_id:
            self.attrs, self.depth = dict(attrs), 1

    def handle_endtag(self, tag):
        if self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.parts.append(data)


def element(response, element_id: str) -> tuple[dict, str]:
    """(attributes, text) of the element ``element_id`` of the page; fails when missing."""
    parser = _Element(element_id)
    parser.feed(response.content.decode())
    assert parser.attrs is not None, f"no element #{element_id} on the page"
    return parser.attrs, " ".join("".join(parser.parts).split())


def text(response) -> str:
    return html.unescape(response.content.decode())


@pytest.fixture
def package(pfs_home) -> str:
    """The package, and beside it an earlier job's uploaded package and its output."""
    (pfs_home / "jobs" / "old" / "pkg2").mkdir(parents=True)
    (pfs_home / "jobs" / "old" / "output").mkdir()
    return package_write(pfs_home, "print('hello')\n")


def form_data(**fields) -> dict:
    return {"name": "fit-a-line", "package": PACKAGE, "entry": "python train.py", **fields}


# -- login ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/jobs/", "/jobs/new/", "/jobs/fit/", "/jobs/fit/kill",
                                  "/jobs/fit/delete", "/jobs/fit/logs/trainer-0.log"])
def test_anonymous_users_go_to_the_login_page_and_back(client, path):
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


def test_after_logging_in_the_user_is_back_on_the_page(client, alice):
    response = client.post("/login/?next=/jobs/new/", {"username": "alice",
                                                       "password": PASSWORD,
                                                       "next": "/jobs/new/"})
    assert response.status_code == 302 and response["Location"] == "/jobs/new/"


# -- list -------------------------------------------------------------------------------------

def test_the_list_shows_each_job_with_its_state_and_numbers(browser, submit):
    submit("first", trainers=2, pservers=1)
    done = submit("second")
    Job.objects.filter(pk=done.pk).update(state="failed", state_reason="trainer-0 failed")
    response = browser.get("/jobs/")
    assert response.status_code == 200
    _, first = element(response, "jobs")
    assert "first" in first and "second" in first
    page = text(response)
    assert 'href="/jobs/first/"' in page
    assert "trainer-0 failed" in page
    assert '<td class="num" data-label="Trainers" data-field="trainers">2</td>' in page
    assert '<td class="num" data-label="Pservers" data-field="pservers">1</td>' in page
    # Newest first; the script that keeps it live is on the page.
    assert page.index('data-name="second"') < page.index('data-name="first"')
    assert "js/jobs.js" in page


@pytest.mark.parametrize(("query", "shown", "hidden"), [
    ("state=ended", ["ended-one"], ["running-one"]),
    ("state=active", ["running-one"], ["ended-one"]),
    ("state=running", ["running-one"], ["ended-one"]),
    ("q=ended", ["ended-one"], ["running-one"]),
    ("state=all&q=one", ["ended-one", "running-one"], []),
])
def test_the_list_filters_by_state_and_name(browser, submit, query, shown, hidden):
    Job.objects.filter(pk=submit("running-one").pk).update(state="running")
    Job.objects.filter(pk=submit("ended-one").pk).update(state="succeeded")
    _, rows = element(browser.get(f"/jobs/?{query}"), "jobs")
    assert all(name in rows for name in shown), rows
    assert not any(name in rows for name in hidden), rows


def test_an_unknown_state_filter_shows_every_job_and_says_so(browser, submit):
    submit("fit")
    response = browser.get("/jobs/?state=bogus")
    assert response.status_code == 200
    assert "unknown state filter 'bogus'" in text(response)
    assert "fit" in element(response, "jobs")[1]


def test_the_list_says_when_there_are_no_jobs(browser, package):
    response = browser.get("/jobs/")
    attrs, empty = element(response, "jobs-empty")
    assert "hidden" not in attrs and "No jobs yet" in empty


# -- submit -----------------------------------------------------------------------------------

SUBMIT_FIELDS = [f.name for f in FIELDS if f.label]  # the table's fields the form shows


def test_the_submit_form_has_every_field_and_offers_the_home_directories(
        browser, alice, datacenter, package):
    from registries.services import registry_create

    registry_create(alice, datacenter, {"name": "private", "server": "registry.example.com",
                                        "username": "alice", "password": "secret"})
    response = browser.get("/jobs/new/")
    assert response.status_code == 200
    for field in SUBMIT_FIELDS:
        attrs, _ = element(response, f"id_{field}")
        assert attrs["name"] == field
        element(response, f"id_{field}_helptext")  # each explained
        label = f'<label for="id_{field}">'
        assert label in response.content.decode(), label
    element(response, "package-dirs")
    page = text(response)
    assert f'<option value="{PACKAGE}">' in page
    assert '<option value="/pfs/datacenter1/home/alice/jobs/old/pkg2">' in page
    assert "jobs/old/output" not in page  # a job's output is no package
    assert element(response, "id_package")[0]["list"] == "package-dirs"
    assert '<option value="private">private</option>' in page


def test_submitting_creates_the_job_and_opens_its_page(browser, package):
    response = browser.post("/jobs/new/", form_data(
        trainers="2", cpu="500m", memory="512Mi", pservers="1", passes="3",
        env="BATCH=64\n\n# a comment\nLR=0.1", restart_limit="1", deadline_seconds="600"))
    assert response.status_code == 302
    assert response["Location"] == "/jobs/fit-a-line/"
    job = Job.objects.get(name="fit-a-line")
    assert (job.trainers, job.cpu, job.memory, job.pservers, job.passes) == (
        2, 500, 512 * 2**20, 1, 3)
    assert job.env == {"BATCH": "64", "LR": "0.1"}
    assert (job.restart_limit, job.deadline_seconds, job.ttl_seconds_after_finished) == (
        1, 600, None)
    page = browser.get(response["Location"])
    assert "job fit-a-line submitted" in text(page)


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"trainers": "0"}, "trainers", "must be between 1 and 1000, not 0"),
    ({"name": "Bad_Name"}, "name", "'_' is not allowed"),
    ({"memory": "lots"}, "memory", "lots"),
    ({"package": f"{HOME}/nowhere"}, "package", "is not a directory"),
    ({"env": "JUST_A_NAME"}, "env", "line 1: write KEY=VALUE"),
    ({"env": "PADDLE_INIT_PORT=1"}, "env", "PADDLE_INIT_PORT: reserved"),
    ({"entry": ""}, "entry", "required"),
])
def test_a_mistake_is_shown_beside_its_field_and_nothing_is_created(
        browser, package, fields, field, message):
    response = browser.post("/jobs/new/", form_data(**fields))
    assert response.status_code == 200
    assert not Job.objects.exists()
    attrs, _ = element(response, f"id_{field}")
    assert attrs["aria-invalid"] == "true"
    assert f"id_{field}_error" in attrs["aria-describedby"].split()
    _, beside = element(response, f"id_{field}_error")
    assert message in html.unescape(beside), beside
    _, summary = element(response, "error-summary")
    assert message in html.unescape(summary)
    # The other values are kept.
    if field != "entry":
        assert element(response, "id_entry")[0]["value"] == "python train.py"


def test_every_mistake_is_shown_at_once(browser, package):
    response = browser.post("/jobs/new/", form_data(name="", trainers="0", cpu="-1"))
    for field in ("name", "trainers", "cpu"):
        assert element(response, f"id_{field}")[0]["aria-invalid"] == "true"
    assert not Job.objects.exists()


def test_mistakes_of_every_kind_are_shown_at_once(browser, package):
    """A form's own rules (a required field, an env line), the spec's (name, cpu) and those
    that need the database or PFS (the package): one submission shows them all."""
    response = browser.post("/jobs/new/", form_data(
        name="Bad_Name", package=f"{HOME}/nowhere", cpu="lots",
        entry="", env="JUST_A_NAME"))
    invalid = {field for field in ("name", "package", "cpu", "entry", "env")
               if element(response, f"id_{field}")[0].get("aria-invalid") == "true"}
    assert invalid == {"name", "package", "cpu", "entry", "env"}
    assert "5 things to fix" in text(response)
    assert not Job.objects.exists()


def test_a_name_already_taken_is_shown_beside_the_name(browser, submit):
    submit("fit-a-line")
    response = browser.post("/jobs/new/", form_data())
    assert "you already have a job named 'fit-a-line'" in html.unescape(
        element(response, "id_name_error")[1])
    assert Job.objects.count() == 1


def test_a_job_over_the_quota_is_refused_on_the_form(browser, package, alice):
    from accounts.models import Quota

    Quota.objects.filter(user=alice).update(cpu=1000)
    response = browser.post("/jobs/new/", form_data(trainers="4"))
    assert response.status_code == 200
    assert element(response, "error-summary")[1]
    assert not Job.objects.exists()
    # With another mistake: both at once, the quota's beside the CPU (not once the other
    # is fixed)
    response = browser.post("/jobs/new/", form_data(trainers="4", name="Bad_Name"))
    invalid = {field for field in ("name", "trainers", "cpu")
               if element(response, f"id_{field}")[0].get("aria-invalid") == "true"}
    assert invalid == {"name", "cpu"}
    assert "more than your quota" in html.unescape(element(response, "id_cpu_error")[1])
    assert not Job.objects.exists()


def test_a_dry_run_shows_the_plan_keeps_the_values_and_creates_nothing(browser, package):
    response = browser.post("/jobs/new/", form_data(trainers="2", pservers="1",
                                                    dry_run="1"))
    assert response.status_code == 200
    assert not Job.objects.exists()
    _, plan = element(response, "plan")
    assert "Dry run: nothing was created" in plan
    for replica in ("pserver-0", "trainer-0", "trainer-1"):
        assert replica in plan
    assert "no Kubernetes objects" in plan  # the local backend creates none
    assert "as processes on the portal's machine (no image)" in plan  # as the API says
    assert element(response, "id_trainers")[0]["value"] == "2"
    assert element(response, "id_name")[0]["value"] == "fit-a-line"


def test_a_dry_run_on_kubernetes_shows_the_objects_as_yaml(browser, package, monkeypatch):
    objects = [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "fit-a-line"}}]
    monkeypatch.setattr("jobs.backends.local.backend.LocalBackend.objects",
                        lambda self, job, quota=None: objects)
    response = browser.post("/jobs/new/", form_data(dry_run="1"))
    _, plan = element(response, "plan")
    assert "The 1 Kubernetes object that would be created" in plan
    assert "kind: Service" in plan and "name: fit-a-line" in plan
    assert not Job.objects.exists()


# -- detail -----------------------------------------------------------------------------------


def write_log(job, worker: str, lines: list[str]):
    replica = next(r for r in job.replicas.all() if r.name == worker)
    path = log_path(job, replica)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def test_the_job_page_shows_spec_workers_events_and_the_log(browser, submit):
    job = submit("fit", trainers=2, env={"BATCH": "64"}, deadline_seconds=600)
    write_log(job, "trainer-0", [f"line {i}" for i in range(1500)])
    response = browser.get("/jobs/fit/")
    assert response.status_code == 200
    page = text(response)
    assert "python train.py" in page and PACKAGE in page and "BATCH=64" in page
    assert "600 s" in page
    # A local datacenter runs processes: no image is named as if it were used.
    assert "none: the workers run as processes on the portal's machine" in page
    assert job.image not in page
    _, workers = element(response, "workers")
    assert "trainer-0" in workers and "trainer-1" in workers and "pending" in workers
    _, events = element(response, "events")
    assert "submitted by alice" in events
    # The last 1000 lines of trainer-0, numbered as in the whole log; the script resumes.
    _, lines = element(response, "log")
    assert '<div class="line" data-n="501">line 500</div>' in page
    assert '<div class="line" data-n="1500">line 1499</div>' in page
    assert "line 499" not in lines
    root, _ = element(response, "job")
    assert (root["data-log-worker"], root["data-log-from"]) == ("trainer-0", "0")
    assert root["data-metrics-worker"] == "trainer-0"
    # Kill is offered (asked in a dialog), not delete, while it is active.
    assert "hidden" not in element(response, "kill")[0]
    assert "hidden" in element(response, "delete")[0]
    assert "Kill job fit?" in element(response, "confirm-kill")[1]


def test_the_job_page_shows_each_pass_of_the_dataset_and_who_holds_what(
        browser, submit, pfs_home):
    from jobs.master import dispatch

    data = pfs_home / "data"
    data.mkdir()
    for part in range(3):
        (data / f"part-{part}.txt").write_text("a\nb\n")
    job = submit("reader", trainers=2, passes=2,
                 dataset=f"{HOME}/data/part-*.txt")
    assert "No task dispatched yet" in element(browser.get("/jobs/reader/"), "dataset")[1]
    held = dispatch.task_next(job, 1)["task"]
    response = browser.get("/jobs/reader/")
    attrs, shown = element(response, "dataset")
    assert attrs["data-tasks-url"] == "/api/v1/jobs/reader/tasks?datacenter=datacenter1"
    assert "1 of 2" in shown and "0 of 3" in shown  # pass 1 of 2; none of its 3 tasks done
    assert f"trainer-1: task {held['index']}" in element(response, "held")[1]
    assert "/pfs/datacenter1/home/alice/data/part-*.txt" in text(response)
    # What the page's script asks for, with the browser's session.
    report = browser.get(attrs["data-tasks-url"]).json()
    assert report["passes"][0]["leased"] == 1


def test_a_job_without_a_dataset_has_no_dataset_card(browser, submit):
    submit("fit")
    assert 'id="dataset"' not in text(browser.get("/jobs/fit/"))


def test_the_job_page_shows_another_worker_log_when_asked(browser, submit):
    job = submit("fit", trainers=2)
    write_log(job, "trainer-1", ["from one"])
    response = browser.get("/jobs/fit/?worker=trainer-1")
    assert "from one" in element(response, "log")[1]
    assert element(response, "log-download")[0]["href"] == "/jobs/fit/logs/trainer-1.log"
    # An unknown worker falls back to the first trainer.
    assert element(browser.get("/jobs/fit/?worker=nope"), "job")[0][
        "data-log-worker"] == "trainer-0"


def test_a_queued_job_says_why_its_log_is_empty_and_offers_no_download(browser, submit,
                                                                        alice):
    from accounts.models import Quota

    Quota.objects.filter(user=alice).update(jobs=1)
    submit("first")
    assert submit("second").state == "queued"
    response = browser.get("/jobs/second/")
    assert element(response, "log-status")[1] == \
        "trainer-0 has not started: the job is queued"
    assert "hidden" in element(response, "log-download")[0]
    assert element(response, "log")[1] == ""  # empty, and so not shown (.log:empty)


def test_without_scripts_the_page_shows_the_last_metrics_reported(browser, submit):
    job = submit("fit")
    replica = job.replicas.get(role="trainer", index=0)
    assert "hidden" not in element(browser.get("/jobs/fit/"), "charts-empty")[0]
    path = metrics_path(job, replica)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": step, "time": 1.0, "loss": 1 / step,
                                        "acc": None}) + "\n" for step in range(1, 91)))
    response = browser.get("/jobs/fit/")
    assert "hidden" in element(response, "charts-empty")[0]  # not "No metrics reported yet"
    assert element(response, "metrics-last")[1] == \
        "trainer-0 reported step 90: loss 0.011111, acc —."


@pytest.mark.parametrize("debug", [False, True])
def test_an_unknown_job_is_the_404_page(browser, package, settings, debug):
    settings.DEBUG = debug  # ./dev up runs with DEBUG on: still the page, not Django's
    response = browser.get("/jobs/nothing/")
    assert response.status_code == 404
    body = text(response)
    assert "you have no job named 'nothing'" in body.lower()
    assert '<a href="/jobs/">Your jobs</a>' in body
    assert "URLconf" not in body and "Django" not in body


def test_an_unknown_address_is_the_same_404_page(browser):
    response = browser.get("/no-such-page/")
    assert response.status_code == 404
    assert "There is no page at this address." in text(response)


# -- kill, delete -----------------------------------------------------------------------------

def test_kill_asks_first_without_scripts_then_kills(browser, submit):
    submit("fit")
    response = browser.get("/jobs/fit/kill")
    assert response.status_code == 200
    assert "Kill job fit?" in text(response)
    assert '<form method="post" action="/jobs/fit/kill">' in text(response)
    assert Job.objects.get(name="fit").state != "killed"
    response = browser.post("/jobs/fit/kill")
    assert response.status_code == 302 and response["Location"] == "/jobs/fit/"
    job = Job.objects.get(name="fit")
    assert (job.state, job.state_reason) == ("killed", "killed by alice")
    page = browser.get("/jobs/fit/")
    assert "job fit killed" in text(page)
    assert "hidden" in element(page, "kill")[0] and "hidden" not in element(page, "delete")[0]


def test_killing_an_ended_job_says_why(browser, submit):
    Job.objects.filter(pk=submit("fit").pk).update(state="succeeded")
    response = browser.post("/jobs/fit/kill", follow=True)
    assert response.status_code == 200
    assert "job 'fit' has already ended (succeeded)" in text(response)


def test_delete_removes_an_ended_job(browser, submit):
    Job.objects.filter(pk=submit("fit").pk).update(state="failed")
    assert "Delete job fit?" in text(browser.get("/jobs/fit/delete"))
    response = browser.post("/jobs/fit/delete")
    assert response.status_code == 302 and response["Location"] == "/jobs/"
    assert not Job.objects.exists()
    assert "job fit deleted" in text(browser.get("/jobs/"))


def test_deleting_an_active_job_says_to_kill_it_first(browser, submit):
    submit("fit")
    response = browser.post("/jobs/fit/delete", follow=True)
    assert "kill it first" in text(response)
    assert Job.objects.filter(name="fit").exists()


# -- log download -----------------------------------------------------------------------------

def test_the_log_download_is_the_whole_log_as_an_attachment(browser, submit):
    job = submit("fit")
    write_log(job, "trainer-0", [f"line {i}" for i in range(3000)])
    response = browser.get("/jobs/fit/logs/trainer-0.log")
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="fit-trainer-0.log"'
    assert response["Content-Type"].startswith("text/plain")
    assert streamed(response).decode().splitlines() == [f"line {i}" for i in range(3000)]


def test_the_log_download_of_a_worker_not_started_is_empty(browser, submit):
    submit("fit")
    response = browser.get("/jobs/fit/logs/trainer-0.log")
    assert response.status_code == 200
    assert streamed(response) == b""


def test_the_log_download_of_an_unknown_worker_is_404(browser, submit):
    submit("fit")
    assert browser.get("/jobs/fit/logs/trainer-7.log").status_code == 404


# -- other users ------------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path"), [
    ("get", "/jobs/fit/"), ("get", "/jobs/fit/kill"), ("post", "/jobs/fit/kill"),
    ("get", "/jobs/fit/delete"), ("post", "/jobs/fit/delete"),
    ("get", "/jobs/fit/logs/trainer-0.log"),
])
def test_another_users_job_is_not_found(make_user, submit, method, path):
    submit("fit")
    make_user("bob")
    bob = Client()
    assert bob.login(username="bob", password=PASSWORD)
    response = getattr(bob, method)(path)
    assert response.status_code == 404
    assert "fit" not in element(bob.get("/jobs/"), "jobs")[1]
    assert Job.objects.get(name="fit").state == "starting"  # neither killed nor deleted


def test_a_user_of_no_datacenter_is_told(make_user, package):
    make_user("carol", datacenters=())
    carol = Client()
    assert carol.login(username="carol", password=PASSWORD)
    response = carol.get("/jobs/")
    assert response.status_code == 403
    assert "not a member of any datacenter" in text(response)
