"""The scheduling model on the pages, with Django's test client on the real database: the
submit form's priority and its dry run's answer (start now, or queue where and until when), a
waiting job's "why it is not running" box, predicted starts in the jobs list (one forecast
for the page), and the group page."""

from __future__ import annotations

import re

import pytest

from accounts.models import Membership, Team
from accounts.services import quota_set
from jobs.models import Job
from tests.dashboard.test_job_pages import _Element, element, form_data, text
from tests.factories import submit_job

# Jobs are admitted (they hold the quota), not started (held_tasks).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("held_tasks"),
              pytest.mark.package("print('hello')\n")]

GiB = 2**30
# A predicted start in words, with its range: "around 2026-11-26 21:05 UTC (in 30 min),
# between 2026-11-26 20:50 and 2026-11-26 21:05 UTC".
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d"
PREDICTED = (rf"around {WHEN} UTC \(in 30 min\), between {WHEN} and {WHEN} UTC")


@pytest.fixture
def one_cpu(alice, datacenter, package):
    """alice's quota holds one CPU, and her job ``holder`` holds it (for half an hour at
    most: its deadline)."""
    quota_set(None, datacenter, alice, cpu=1000, jobs=10, queued=10)
    holder = submit_job(alice, datacenter, "holder", deadline_seconds=1800)
    assert holder.state == "starting"
    return holder


class _Words(_Element):
    """An element's text, its cells, terms and paragraphs apart (as a reader sees them)."""

    BLOCKS = frozenset({"dt", "dd", "td", "th", "tr", "p", "h2", "div", "li"})

    def handle_starttag(self, tag, attrs):
        if self.depth and tag in self.BLOCKS:
            self.parts.append(" ")
        super().handle_starttag(tag, attrs)


def words(response, element_id: str) -> str:
    parser = _Words(element_id)
    parser.feed(response.content.decode())
    assert parser.attrs is not None, f"no element #{element_id} on the page"
    return " ".join("".join(parser.parts).split())


# -- the submit form --------------------------------------------------------------------------

def test_the_form_offers_priorities_normal_first_and_submits_the_one_chosen(browser, package):
    page = text(browser.get("/jobs/new/"))
    assert '<label for="id_priority">Priority</label>' in page
    select = page[page.index('<select name="priority"'):]
    select = select[:select.index("</select>")]
    assert re.findall(r'<option value="(\w+)"', select) == ["normal", "high", "low"]
    assert '<option value="normal" selected>' in select

    response = browser.post("/jobs/new/", form_data(name="urgent", priority="high"),
                            follow=True)
    assert response.redirect_chain == [("/jobs/urgent/", 302)]
    assert Job.objects.get(name="urgent").priority == 100
    spec = " ".join(re.sub(r"<[^>]+>", " ", text(response)).split())
    assert "Priority high" in spec


def test_a_priority_not_offered_is_named_beside_the_field(browser, package):
    response = browser.post("/jobs/new/", form_data(priority="urgent"))
    assert not Job.objects.exists()
    assert "urgent is not one of the available choices" in words(response, "error-summary")


def test_a_dry_run_says_the_job_would_start_now(browser, package):
    response = browser.post("/jobs/new/", form_data(dry_run="1"))
    assert words(response, "admission") == "It would start now."
    assert not Job.objects.exists()


def test_a_dry_run_says_where_the_job_would_queue_why_and_when_it_would_start(
        browser, one_cpu, alice, datacenter):
    submit_job(alice, datacenter, "waiting")  # queued: #1
    response = browser.post("/jobs/new/", form_data(dry_run="1"))
    said = words(response, "admission")
    # Behind a job whose run time nothing tells (her first, no deadline): no time made up.
    assert said == ("It would queue at #2 (waiting behind job waiting); its start cannot be "
                    "predicted: it waits for room that job waiting (alice's) holds, and nothing "
                    "tells when that ends: no job of its owner has ended yet to tell how long "
                    "it runs."), said
    # High priority goes before her normal job, and waits for the quota itself.
    said = words(browser.post("/jobs/new/", form_data(dry_run="1", priority="high")),
                 "admission")
    assert re.fullmatch(r"It would queue at #1 \(waiting for quota: cpu 1 asked, 0 of 1 "
                        rf"free\); start predicted {PREDICTED}\.", said), said
    assert Job.objects.count() == 2  # nothing more was created


# -- the job page -----------------------------------------------------------------------------

def test_a_waiting_job_says_why_it_is_not_running_and_when_it_should_start(
        browser, one_cpu, alice, datacenter):
    submit_job(alice, datacenter, "later", priority="low")
    submit_job(alice, datacenter, "urgent", priority="high")
    response = browser.get("/jobs/urgent/")
    assert "hidden" not in element(response, "waiting")[0]
    said = words(response, "waiting")
    assert re.fullmatch(
        r"Why it is not running Waiting for your quota Reason waiting for quota: cpu 1 "
        r"asked, 0 of 1 free Place in your queue #1 of your waiting jobs Priority high "
        rf"Predicted start {PREDICTED} Predicted from .*", said), said
    # The state line says it too, in short.
    assert re.fullmatch(r"queued #1 starts ~in 30 min waiting for quota: cpu 1 asked, 0 of 1 "
                        r"free", words(response, "job-state"))

    # The low one waits behind the high one, at #2.
    said = words(browser.get("/jobs/later/"), "waiting")
    assert ("Waiting for another of your jobs, ahead of it in your queue Reason waiting "
            "behind job urgent Place in your queue #2 of your waiting jobs Priority low") in said


def test_a_job_that_runs_after_another_says_so_and_starts_after_it(
        browser, one_cpu, alice, datacenter):
    """Issue 40.4: the waiting box names what it runs after and why it waits; its predicted
    start is after holder's end (its deadline, in 30 min)."""
    submit_job(alice, datacenter, "report", after="holder")
    response = browser.get("/jobs/report/")
    said = words(response, "waiting")
    assert re.fullmatch(
        r"Why it is not running Waiting for the jobs it runs after to end Reason waiting for "
        r"job holder to succeed Place in your queue #1 of your waiting jobs Priority normal "
        rf"Runs after holder Predicted start {PREDICTED} Predicted from .*", said), said
    assert words(response, "runs-after") == "holder"


def test_the_form_submits_what_a_job_runs_after_and_names_a_mistake_beside_it(
        browser, one_cpu):
    response = browser.post("/jobs/new/", form_data(after="nosuch"))
    assert not Job.objects.filter(name="fit-a-line").exists()
    assert ("you have no job named 'nosuch' in datacenter 'datacenter1'"
            in words(response, "error-summary"))
    response = browser.post("/jobs/new/", form_data(after="holder"), follow=True)
    assert response.redirect_chain == [("/jobs/fit-a-line/", 302)]
    assert Job.objects.get(name="fit-a-line").state_reason == "waiting for job holder to succeed"


def test_a_running_job_has_no_waiting_box_and_shows_its_priority(browser, one_cpu):
    response = browser.get("/jobs/holder/")
    attrs, _ = element(response, "waiting")
    assert "hidden" in attrs
    assert "starts ~" not in words(response, "job-state")
    spec = " ".join(re.sub(r"<[^>]+>", " ", text(response)).split())
    assert "Priority normal" in spec


# -- the jobs list ----------------------------------------------------------------------------

def test_a_queued_row_shows_its_place_and_predicted_start(browser, one_cpu, alice, datacenter):
    submit_job(alice, datacenter, "waiting")
    response = browser.get("/jobs/")
    page = text(response)
    row = page[page.index('<tr data-name="waiting">'):]
    row = " ".join(re.sub(r"<[^>]+>", " ", row[:row.index("</tr>")]).split())
    assert "queued #1 starts ~in 30 min waiting for quota" in row
    holder = page[page.index('<tr data-name="holder">'):]
    assert "starts ~" not in holder[:holder.index("</tr>")]
    # The predicted time is on the element, for the page's script to count down.
    assert re.search(r'data-part="predicted" data-at="\d{4}-\d\d-\d\dT[\d:.+]+" '
                     rf'title="predicted start {WHEN} UTC, between {WHEN} and {WHEN}"', page)


def test_the_list_forecasts_once_for_the_page_not_once_a_row(
        browser, one_cpu, alice, datacenter, django_assert_max_num_queries):
    # Each runs 10 min at most (a deadline): what waits behind it has a start to predict.
    submit_job(alice, datacenter, "w1", deadline_seconds=600)
    with django_assert_max_num_queries(1000) as few:
        browser.get("/jobs/")
    for n in range(2, 7):
        submit_job(alice, datacenter, f"w{n}", deadline_seconds=600)
    with django_assert_max_num_queries(1000) as many:
        response = browser.get("/jobs/")
    assert text(response).count("starts ~in") == 6
    assert len(many.captured_queries) == len(few.captured_queries)


# -- the group page ---------------------------------------------------------------------------

@pytest.fixture
def vision(alice, make_user, datacenter, pfs_home):
    """alice and bob's group, weight 3, whose jobs together hold at most 2 CPUs; bob has a
    job running and one queued for the group's quota."""
    bob = make_user("bob")
    (pfs_home.parent / "bob" / "pkg").mkdir(parents=True)
    (pfs_home / "pkg").mkdir()
    for user in (alice, bob):
        quota_set(None, datacenter, user, cpu=64000, memory=64 * GiB, jobs=50, queued=50)
    team = Team.objects.create(datacenter=datacenter, name="vision", cpu=2000, weight=3)
    Membership.objects.filter(user__in=[alice, bob], datacenter=datacenter).update(team=team)
    Membership.objects.filter(user=bob, datacenter=datacenter).update(weight=2)
    submit_job(bob, datacenter, "bobs-run")
    submit_job(alice, datacenter, "alices-run")
    submit_job(bob, datacenter, "bobs-wait")
    return team


def test_the_group_page_shows_the_group_its_quota_and_its_members_jobs(browser, vision):
    response = browser.get("/group/")
    assert response.status_code == 200
    assert words(response, "group-weight") == "3"
    assert words(response, "members") == "Member Weight alice you 1 bob 2"
    assert words(response, "group-quota-cpu") == "CPU 2 of 2"
    page = text(response)
    assert 'class="meter full" id="group-quota-cpu"' in page
    assert words(response, "group-quota-gpu") == "GPUs 0, no limit"

    jobs = words(response, "group-jobs")
    # The group's running jobs are its members' first: nothing tells when they end.
    assert re.search(r"bobs-wait bob queued #1 start unknown waiting for group "
                     r"vision's quota: cpu 1 asked, 0 of 2 free", jobs), jobs
    assert "alices-run alice starting" in jobs and "bobs-run bob starting" in jobs
    # Only her own job links to its page; nothing here kills or deletes.
    assert 'href="/jobs/alices-run/"' in page
    assert "/jobs/bobs-run/" not in page and "/jobs/bobs-wait/" not in page
    assert "Kill" not in page and "Delete" not in page
    # The header links the page (it is the current one).
    assert '<a href="/group/" aria-current="page">Group</a>' in page


def test_another_members_job_is_not_reachable_from_the_group(browser, vision):
    assert browser.get("/jobs/bobs-run/").status_code == 404


def test_a_member_of_no_group_is_told_and_has_no_group_link(browser, package):
    response = browser.get("/group/")
    assert response.status_code == 200
    assert words(response, "no-group-title") == "You are in no group"
    assert "You are in no group in datacenter 'datacenter1'" in text(response)
    assert 'href="/group/"' not in text(browser.get("/jobs/"))


def test_the_group_link_is_only_in_the_group_s_datacenter(browser, vision, alice,
                                                          other_datacenter):
    Membership.objects.create(user=alice, datacenter=other_datacenter)
    assert 'href="/group/"' in text(browser.get("/jobs/"))
    browser.post("/datacenter", {"datacenter": "datacenter2", "next": "/jobs/"})
    assert 'href="/group/"' not in text(browser.get("/jobs/"))
