"""The compare page in Chromium against the real ASGI server: jobs ticked in the list open one
page with their curves on a canvas (legend, metric, smoothing, log scale, time along x), the
table of final and best values, and what differs in their specs and environments — a
secret-looking variable's value never in the page; 20 runs of 10 000 points each shown, their
curves thinned by the portal. Metrics files written as a replica writes them."""

from __future__ import annotations

import json

from playwright.sync_api import expect

from tests.e2e.conftest import login, screenshot
from tests.factories import job_row
from tests.jobs.files import metrics_path


def run(portal, name: str, steps: int, scale: float, floor: float = 0.0, **fields):
    """``portal``'s user's job ``name`` whose trainer 0 reported ``steps`` points: a loss
    falling from ``floor + scale`` towards ``floor``, and an accuracy."""
    job = job_row(portal.user, portal.datacenter, name, replicas={}, **fields)
    path = metrics_path(job, job.replicas.get(role="trainer", index=0))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(
        json.dumps({"step": step, "time": 1763700000.0 + 2 * step,
                    "loss": floor + scale / (step + 1), "acc": 1 - 1 / (step + 2)}) + "\n"
        for step in range(steps)))


def test_ticked_jobs_open_one_page_with_curves_values_and_what_differs(page, live_portal):
    run(live_portal, "lr-small", 500, 1.0, env={"LR": "0.01", "API_KEY": "sk-small-secret"})
    run(live_portal, "lr-large", 300, 4.0, env={"LR": "0.5", "API_KEY": "sk-large-secret"},
        trainers=2)
    run(live_portal, "not-picked", 10, 9.0)
    login(page, next_path="/jobs/")
    page.get_by_label("compare lr-small").check()
    page.get_by_label("compare lr-large").check()
    page.get_by_role("button", name="Compare").click()
    page.wait_for_url("**/compare/?jobs=*")

    canvas = page.locator("#compare-canvas")
    expect(canvas).to_have_attribute("data-loaded", "loss")
    assert canvas.get_attribute("data-points") == "800"
    # thinned per pixel column: far fewer vertices than points, at least one a column
    assert 100 < int(canvas.get_attribute("data-drawn")) < 800 * 4
    legend = page.locator("#compare-legend li")
    expect(legend).to_have_count(2)
    expect(legend.filter(has_text="lr-small")).to_contain_text("500 points")
    expect(legend.filter(has_text="lr-large")).to_contain_text("300 points")
    expect(page.locator("#compare-legend")).not_to_contain_text("not-picked")

    page.get_by_label("log scale").check()
    expect(canvas).to_have_attribute("data-scale", "log")
    page.get_by_label("Along", exact=True).select_option("time")
    expect(canvas).to_have_attribute("data-along", "time")
    page.get_by_label("Metric", exact=True).select_option("acc")
    expect(canvas).to_have_attribute("data-loaded", "acc")
    page.locator("#compare-smoothing").fill("0.9")
    expect(page.locator("#compare-smoothing-value")).to_have_text("0.9")
    expect(canvas).to_have_attribute("data-smoothing", "0.9")  # the portal's smoothed curve
    expect(canvas).to_have_attribute("data-along", "time")

    values = page.locator("#compare-values")
    small_loss = values.locator('tr[data-metric="loss"][data-job="lr-small"]')
    expect(small_loss).to_contain_text("0.002")  # its final: 1/500
    expect(small_loss).to_have_class("winner")  # the lowest loss of the two
    expect(values.locator('tr[data-metric="acc"][data-job="lr-small"]')).to_contain_text(
        "highest")

    diff = page.locator("#compare-diff")
    expect(diff.locator('tr[data-field="env.LR"]')).to_contain_text("0.01")
    expect(diff.locator('tr[data-field="trainers"]')).to_contain_text("2")
    expect(diff.locator('tr[data-field="env.API_KEY"]')).to_contain_text("(hidden)")
    assert "secret" not in diff.locator('tr[data-field="env.API_KEY"] td').all_text_contents()
    assert "sk-small-secret" not in page.content() and "sk-large-secret" not in page.content()
    screenshot(page, "compare")


def test_more_than_twenty_sends_back_to_the_list_saying_why(page, live_portal):
    for i in range(21):
        job_row(live_portal.user, live_portal.datacenter, f"j{i}")
    login(page, next_path="/jobs/")
    for i in range(21):
        page.get_by_label(f"compare j{i}", exact=True).check()
    page.get_by_role("button", name="Compare").click()
    expect(page.get_by_role("alert")).to_contain_text("at most 20 jobs, not 21")
    assert page.url.endswith("/jobs/")


# Which of ``colours`` the canvas shows: a pixel is one's when it is that colour (an edge of a
# line over the transparent canvas is the colour, less opaque; where two cross, neither).
COLOURS_DRAWN = """([canvas, colours]) => {
  const rgb = colours.map((c) => c.match(/\\d+/g).map(Number));
  const { data } = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height);
  const counts = colours.map(() => 0);
  for (let i = 0; i < data.length; i += 4) {
    if (data[i + 3] < 64) continue;
    rgb.forEach(([r, g, b], n) => {
      if (Math.abs(data[i] - r) + Math.abs(data[i + 1] - g) + Math.abs(data[i + 2] - b) <= 6) {
        counts[n]++;
      }
    });
  }
  return counts;
}"""


def test_twenty_runs_of_ten_thousand_points_show_every_curve_and_value(page, live_portal):
    names = [f"run-{i:02}" for i in range(20)]
    for i, name in enumerate(names):
        run(live_portal, name, 10_000, 1.0 + i, floor=1.0 + i)  # a curve a level
    login(page, next_path="/compare/?jobs=" + ",".join(names))

    canvas = page.locator("#compare-canvas")
    expect(canvas).to_have_attribute("data-loaded", "loss")
    assert canvas.get_attribute("data-points") == "200000"  # every point reported …
    assert 20 * 2 <= int(canvas.get_attribute("data-sent")) <= 20 * 2400  # … a few sent
    legend = page.locator("#compare-legend li")
    expect(legend).to_have_count(20)
    for name in names:
        expect(legend.filter(has_text=name)).to_contain_text("10000 points")
    colours = page.evaluate(
        "() => [...document.querySelectorAll('#compare-legend .swatch')]"
        ".map((s) => getComputedStyle(s).backgroundColor)")
    assert len(set(colours)) == 20
    drawn = page.evaluate(COLOURS_DRAWN, [canvas.element_handle(), colours])
    missing = [name for name, pixels in zip(names, drawn, strict=True) if pixels < 50]
    assert not missing, f"no curve drawn for {missing}: {drawn}"

    values = page.locator("#compare-values")
    expect(values.locator('tr[data-metric="loss"]')).to_have_count(20)
    # each final from the last of its 10 000 points: floor + scale / 10 000
    expect(values.locator('tr[data-metric="loss"][data-job="run-19"]')).to_contain_text(
        "20.002")
    expect(values.locator('tr[data-metric="loss"][data-job="run-00"]')).to_contain_text(
        "1.0001")
    expect(values.locator('tr[data-metric="loss"][data-job="run-00"]')).to_have_class(
        "winner")

    page.get_by_label("Along", exact=True).select_option("time")
    expect(canvas).to_have_attribute("data-along", "time")
    page.locator("#compare-smoothing").fill("0.5")
    expect(canvas).to_have_attribute("data-smoothing", "0.5")
    page.get_by_label("log scale").check()
    expect(canvas).to_have_attribute("data-scale", "log")
    assert canvas.get_attribute("data-points") == "200000"
    screenshot(page, "compare-twenty")
