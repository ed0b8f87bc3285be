"""Every page fits the screen it is read on, in Chromium: a phone (390 px) reaches every page of
the navigation and scrolls no page sideways (a wide table scrolls in its own box); the admin's
job list fits a 1280 px laptop; a placeholder does not look like a value typed in."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from accounts.services import user_upsert
from tests.conftest import PASSWORD
from tests.e2e.conftest import login, screenshot
from tests.factories import submit_job

pytestmark = [pytest.mark.browser, pytest.mark.package("print('hi')\n", "quick")]

PAGES = ("/jobs/", "/jobs/new/", "/files/", "/registries/", "/quota/", "/tokens/",
         "/notifications/")
NAV = ("Jobs", "Submit", "Files", "Registries", "Quota", "Tokens", "Notifications")


def sideways(page) -> int:
    """How far the page itself scrolls sideways (0: it fits)."""
    return page.evaluate("document.scrollingElement.scrollWidth - "
                         "document.scrollingElement.clientWidth")


def test_a_phone_reaches_every_page_and_scrolls_none_sideways(page, live_portal, package,
                                                              held_tasks):
    submit_job(live_portal.user, live_portal.datacenter, "a-long-job-name-for-a-narrow-phone",
               package=package)
    page.set_viewport_size({"width": 390, "height": 844})
    login(page, next_path="/jobs/")
    for path in PAGES:
        page.goto(path)
        nav = page.get_by_role("navigation", name="Pages")
        for name in NAV:
            link = nav.get_by_role("link", name=name, exact=True)
            expect(link).to_be_in_viewport(ratio=1)  # whole, not clipped at the edge
        assert sideways(page) == 0, (path, screenshot(page, f"phone{path.replace('/', '-')}"))
    page.goto("/jobs/a-long-job-name-for-a-narrow-phone/")
    assert sideways(page) == 0, screenshot(page, "phone-job")


def test_the_admins_job_list_fits_a_laptop(page, live_portal, package, held_tasks):
    user_upsert("root", password=PASSWORD, datacenter_names=["datacenter1"], superuser=True)
    submit_job(live_portal.user, live_portal.datacenter, "fit", package=package)
    login(page, "root", next_path="/admin/jobs/job/")
    expect(page.get_by_role("link", name="fit", exact=True)).to_be_visible()
    assert sideways(page) == 0, screenshot(page, "admin-jobs")
    # Django's own box around the table scrolls it: no column cut off in it either.
    clipped = page.evaluate("(box => box.scrollWidth - box.clientWidth)"
                            "(document.querySelector('#changelist .results'))")
    assert clipped == 0, screenshot(page, "admin-jobs")


def test_a_placeholder_does_not_look_typed_in(page, live_portal):
    login(page, next_path="/jobs/new/")
    placeholders = page.locator("form.submit [placeholder]")
    texts = [placeholders.nth(i).get_attribute("placeholder") for i in range(placeholders.count())]
    assert texts and all(t.startswith(("e.g. ", "default: ")) for t in texts), texts
    name = page.get_by_label("Name", exact=True)
    typed, placeholder, style = name.evaluate("""input => [getComputedStyle(input).color,
        getComputedStyle(input, '::placeholder').color,
        getComputedStyle(input, '::placeholder').fontStyle]""")
    assert style == "italic"
    # Lighter than the text: the sum of its channels is well above the typed text's.
    channels = [sum(int(c) for c in color[color.index("(") + 1:-1].split(",")[:3])
                for color in (typed, placeholder)]
    assert channels[1] - channels[0] >= 150, (typed, placeholder)


PHONE = {"width": 390, "height": 844}


def test_a_phone_reads_every_column_of_the_lists(page, live_portal, package, held_tasks):
    """At 390 px a list's rows are blocks, each cell named by its column: nothing cut off at
    the right, nothing to scroll sideways in the table's box either."""
    submit_job(live_portal.user, live_portal.datacenter, "a-long-job-name-for-a-narrow-phone",
               package=package, trainers=3)
    page.set_viewport_size(PHONE)
    login(page, next_path="/jobs/")
    for path, table in (("/jobs/", "#jobs"),
                        ("/jobs/a-long-job-name-for-a-narrow-phone/", "#workers")):
        page.goto(path)
        box = page.locator(table).locator("xpath=..")
        expect(page.locator(f"{table} tbody tr").first).to_be_visible()
        assert box.evaluate("b => b.scrollWidth - b.clientWidth") == 0, screenshot(
            page, f"phone-list{path.replace('/', '-')}")
        # Nothing cut off at the right (nor the left): the shown cells' edges, read in one go
        # (the live list may redraw its rows between two reads).
        cells = page.locator(f"{table} tbody tr").first.evaluate("""tr => [...tr.cells]
            .map(td => [td.dataset.label, td.getBoundingClientRect()])
            .filter(([, r]) => r.width > 0 && r.height > 0)
            .map(([label, r]) => [label, r.left, r.right])""")
        assert cells, f"no cell of {table}'s first row is shown"
        for label, left, right in cells:
            assert left >= 0 and right <= PHONE["width"], (label, left, right)
    first = page.locator("#workers tbody tr").first
    expect(first.locator('td[data-label="State"]')).to_be_visible()
    label = first.locator('td[data-label="State"]').evaluate(
        "td => getComputedStyle(td, '::before').content")
    assert label == '"State: "'
