"""The files page in Chromium against the live portal: uploads (file chooser, drag and drop,
in one request and in chunks) with their progress bars, mkdir, download, delete, the
read-only public directory, and the errors a user can act on."""

from __future__ import annotations

import os
import re

import pytest
from playwright.sync_api import expect

from accounts.models import Quota
from tests.e2e.conftest import login, screenshot
from tests.factories import HOME

pytestmark = pytest.mark.browser


def upload_row(page, name: str):
    return page.locator(f'#uploads li[data-name="{name}"]')


def listed(page, name: str):
    return page.locator(f'#listing tr[data-name="{name}"]')


def expect_uploaded(page, name: str) -> None:
    row = upload_row(page, name)
    expect(row.get_by_role("progressbar")).to_have_attribute("aria-valuenow", "100")
    expect(row.locator(".status")).to_have_text("Uploaded")
    expect(listed(page, name)).to_be_visible()  # the listing was fetched again


def test_upload_with_the_file_chooser_then_by_dropping(page, live_portal, tmp_path):
    package = tmp_path / "train.py"
    package.write_bytes(b"print('training')\n" * 2000)
    login(page, next_path="/files/")
    expect(page.get_by_role("heading", name="Files")).to_be_visible()
    expect(page.locator("#listing")).to_contain_text("This folder is empty.")

    with page.expect_file_chooser() as chooser:
        page.get_by_text("Upload files", exact=True).click()
    chooser.value.set_files(str(package))
    expect_uploaded(page, "train.py")
    assert (live_portal.home / "train.py").read_bytes() == package.read_bytes()
    expect(listed(page, "train.py")).to_contain_text("35.2Ki")

    # Dropped anywhere on the page: the page shows it is ready, then uploads.
    drop = page.evaluate_handle("""() => {
        const data = new DataTransfer();
        data.items.add(new File(["dropped bytes\\n"], "dropped.txt", {type: "text/plain"}));
        return data;
    }""")
    page.dispatch_event("main", "dragenter", {"dataTransfer": drop})
    expect(page.locator("body")).to_have_class(re.compile(r"\bdragging\b"))
    expect(page.locator(".drop-overlay")).to_be_visible()
    page.dispatch_event("main", "drop", {"dataTransfer": drop})
    expect(page.locator("body")).not_to_have_class(re.compile(r"\bdragging\b"))
    expect_uploaded(page, "dropped.txt")
    assert (live_portal.home / "dropped.txt").read_bytes() == b"dropped bytes\n"
    screenshot(page, "files")


def test_a_large_file_goes_up_in_chunks(page, live_portal, tmp_path, settings):
    settings.PADDLECLOUD_PFS_CHUNK_SIZE = 64 << 10  # a 300 KB file takes 5 requests
    data = os.urandom(300_000)
    (tmp_path / "weights.bin").write_bytes(data)
    login(page, next_path="/files/")
    requests = []
    page.on("request", lambda r: requests.append((r.method, r.url))
            if "/api/v1/pfs/" in r.url else None)
    page.locator("#upload-input").set_input_files(str(tmp_path / "weights.bin"))
    expect_uploaded(page, "weights.bin")
    assert (live_portal.home / "weights.bin").read_bytes() == data
    assert [m for m, _ in requests] == ["POST"] + ["PATCH"] * 5


def test_mkdir_download_and_delete_with_confirmation(page, live_portal):
    data = os.urandom(70_000)
    (live_portal.home / "model.bin").write_bytes(data)
    login(page, next_path="/files/")

    page.get_by_label("New folder").fill("experiments")
    page.get_by_role("button", name="Create folder").click()
    expect(page.get_by_role("status")).to_have_text("Created folder experiments.")
    assert (live_portal.home / "experiments").is_dir()
    page.get_by_role("link", name="experiments/").click()
    expect(page.locator(".breadcrumbs [aria-current=page]")).to_have_text("experiments")
    expect(page.locator("#listing")).to_contain_text("This folder is empty.")
    page.get_by_role("link", name="home/alice").click()

    with page.expect_download() as download:
        page.get_by_role("link", name="Download model.bin").click()
    assert download.value.suggested_filename == "model.bin"
    with open(download.value.path(), "rb") as saved:
        assert saved.read() == data

    # Deleting asks first; cancelling keeps the file.
    page.get_by_role("button", name="Delete model.bin").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete model.bin?")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_have_count(0)
    assert (live_portal.home / "model.bin").exists()

    page.get_by_role("button", name="Delete model.bin").click()
    page.get_by_role("dialog").get_by_role("button", name="Delete").click()
    expect(page.get_by_role("status")).to_contain_text("Deleted model.bin")
    expect(listed(page, "model.bin")).to_have_count(0)
    assert not (live_portal.home / "model.bin").exists()


def test_the_public_directory_has_no_upload_controls(page, live_portal, settings):
    public = settings.PADDLECLOUD_PFS_ROOT / "datacenter1" / "public"
    (public / "mnist").mkdir(parents=True)
    (public / "README.md").write_text("shared datasets\n")
    login(page, next_path="/files/")
    page.get_by_role("link", name="Public").click()
    expect(page.locator(".breadcrumbs [aria-current=page]")).to_have_text("public")
    expect(listed(page, "mnist")).to_be_visible()
    expect(listed(page, "README.md")).to_be_visible()
    expect(page.get_by_text("is read-only")).to_be_visible()
    for absent in ("#upload-input", "#uploads", "form:has(input[value=mkdir])",
                   "form:has(input[value=delete])"):
        expect(page.locator(absent)).to_have_count(0)
    expect(page.get_by_role("link", name="Download README.md")).to_be_visible()


def test_errors_are_shown_where_the_user_acts(page, live_portal, tmp_path):
    (live_portal.home / "notes.txt").write_text("old\n")
    (tmp_path / "notes.txt").write_text("new\n")
    login(page, next_path="/files/")

    # A name the file service refuses: beside the field, the listing still there.
    page.get_by_label("New folder").fill("..")
    page.get_by_role("button", name="Create folder").click()
    expect(page.locator(".field:has(#id_name) .field-error")).to_contain_text(
        "'..' is not allowed")
    expect(listed(page, "notes.txt")).to_be_visible()

    # An upload onto an existing file: said so, and replaced only when asked.
    page.console.allow("409 (Conflict)")
    page.locator("#upload-input").set_input_files(str(tmp_path / "notes.txt"))
    row = upload_row(page, "notes.txt")
    expect(row.get_by_role("alert")).to_have_text(f"path: {HOME}/notes.txt already exists")
    expect(row.locator(".status")).to_have_text("Failed")
    assert (live_portal.home / "notes.txt").read_text() == "old\n"
    row.get_by_role("button", name="Replace it").click()
    expect(row.locator(".status")).to_have_text("Uploaded")
    assert (live_portal.home / "notes.txt").read_text() == "new\n"

    # Over the storage quota: refused before any byte is stored.
    Quota.objects.filter(user=live_portal.user).update(storage=100)
    page.console.allow("403 (Forbidden)")
    (tmp_path / "big.bin").write_bytes(b"x" * 1000)
    page.locator("#upload-input").set_input_files(str(tmp_path / "big.bin"))
    expect(upload_row(page, "big.bin").get_by_role("alert")).to_contain_text(
        "over your storage quota of 100")
    assert not (live_portal.home / "big.bin").exists()


def test_names_show_what_they_are_and_long_ones_keep_the_buttons_in_view(page, live_portal):
    """A right-to-left override makes ``gpj.exe`` look like ``exe.jpg``; a name of 255
    characters pushed the row's buttons off the table (issue 33, item 15)."""
    spoof = "holiday\u202egpj.exe"
    long = "a" * 251 + ".bin"
    for name in (spoof, long, "line\nbreak.txt"):
        (live_portal.home / name).write_bytes(b"x")
    login(page, next_path="/files/")

    row = page.locator("#listing tr", has=page.get_by_role("button", name="Delete holiday"))
    expect(row.locator(".ctrl")).to_have_text("\\u202e")  # shown, not obeyed
    expect(row.locator(".entry-name")).to_have_text("holiday\\u202egpj.exe")
    expect(page.locator("#listing .ctrl", has_text="\\x0a")).to_have_count(1)

    cut = page.locator(f'#listing span[title="{long}"] .entry-name')
    expect(cut).to_be_visible()
    assert cut.evaluate("e => e.scrollWidth > e.clientWidth")  # cut short, whole on hover
    delete = page.get_by_role("button", name=f"Delete {long}")
    box, width = delete.bounding_box(), page.viewport_size["width"]
    assert box["x"] + box["width"] <= width, (box, width)  # in view, no scrolling

    # The real name is what is deleted.
    page.get_by_role("button", name="Delete holiday\\u202egpj.exe").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete holiday\\u202egpj.exe?")
    dialog.get_by_role("button", name="Delete").click()
    expect(page.get_by_role("status")).to_contain_text("Deleted holiday\\u202egpj.exe")
    assert not (live_portal.home / spoof).exists() and (live_portal.home / long).exists()


def test_a_large_folder_is_shown_a_page_at_a_time(page, live_portal):
    many = live_portal.home / "many"
    many.mkdir()
    for index in range(20_000):
        (many / f"f{index:05d}").touch()
    login(page, next_path=f"/files/?path={HOME}/many")

    rows = page.locator("#listing tbody tr")
    expect(rows).to_have_count(200)
    expect(page.locator(".pager")).to_contain_text("1\u2013200 of 20000 · page 1 of 100")
    expect(rows.first).to_have_attribute("data-name", "f00000")
    page.get_by_role("link", name="Next →").click()
    expect(page.locator(".pager")).to_contain_text("201\u2013400 of 20000")
    expect(rows.first).to_have_attribute("data-name", "f00200")
    size = len(page.content().encode())
    assert size < 400_000, size  # was every row: megabytes
