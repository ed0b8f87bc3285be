"""The files page with Django's test client: browsing, mkdir and delete without JavaScript,
and the paths a user may not see."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

import pytest
from django.test import Client

from tests.dashboard.test_account_pages import field_errors, messages_of
from tests.factories import HOME

pytestmark = pytest.mark.django_db

PUBLIC = "/pfs/datacenter1/public"


def text(response) -> str:
    return html.unescape(response.content.decode()).replace("\xa0", " ")


def files(path: str) -> str:
    return f"/files/?path={quote(path, safe='')}"


@pytest.fixture
def home(pfs_home):
    (pfs_home / "data").mkdir()
    (pfs_home / "data" / "train.csv").write_bytes(b"x" * 2048)
    (pfs_home / "notes.txt").write_text("hello")
    return pfs_home


@pytest.fixture
def public(home, settings):
    root = settings.PADDLECLOUD_PFS_ROOT / "datacenter1" / "public"
    (root / "mnist").mkdir(parents=True)
    (root / "README").write_text("datasets")
    return root


def rows(body: str) -> list[str]:
    return re.findall(r'<tr data-name="([^"]+)">', body)


def test_the_home_is_listed_folders_first_with_sizes_and_links(browser, home):
    response = browser.get("/files/")
    assert response.status_code == 200
    body = text(response)
    assert rows(body) == ["data", "notes.txt"]
    assert f'href="{files(HOME + "/data")}"' in html.unescape(body)
    assert "5B" in body
    download = f"/api/v1/pfs/content?path={quote(HOME + '/notes.txt', safe='')}" \
               "&datacenter=datacenter1"
    assert f'href="{download}" download' in body
    assert 'id="upload-input"' in body and 'name="action" value="mkdir"' in body
    assert "2.0Ki of 10Gi used" in body


def test_a_folder_has_breadcrumbs_back_to_the_home(browser, home):
    body = text(browser.get(files(HOME + "/data")))
    assert rows(body) == ["train.csv"]
    crumbs = re.search(r'<ol class="breadcrumbs".*?</ol>', body, re.S).group(0)
    assert f'<a href="{files(HOME)}"><bdi>home/alice</bdi></a>' in crumbs
    assert '<span aria-current="page"><bdi>data</bdi></span>' in crumbs
    assert "2Ki" in body


def test_an_empty_folder_says_so(browser, home):
    (home / "empty").mkdir()
    assert "This folder is empty." in text(browser.get(files(HOME + "/empty")))


def test_a_file_path_downloads_the_file(browser, home):
    response = browser.get(files(HOME + "/notes.txt"))
    assert response.status_code == 302
    assert response["Location"] == ("/api/v1/pfs/content?path="
                                    f"{quote(HOME + '/notes.txt', safe='')}"
                                    "&datacenter=datacenter1")


def test_the_public_directory_is_read_only(browser, public):
    body = text(browser.get(files(PUBLIC)))
    assert rows(body) == ["mnist", "README"]
    assert "read-only" in body
    for control in ('id="upload-input"', 'value="mkdir"', 'value="delete"', "files.js"):
        assert control not in body, control
    assert "Download" in body


def test_mkdir_then_delete_without_javascript(browser, home):
    response = browser.post("/files/", {"action": "mkdir", "path": HOME + "/data",
                                        "name": "run 1"})
    assert response.status_code == 302
    assert response["Location"] == files(HOME + "/data")
    assert (home / "data" / "run 1").is_dir()
    page = browser.get(response["Location"])
    assert messages_of(page) == ["Created folder run 1."]
    assert rows(text(page)) == ["run 1", "train.csv"]

    asked = browser.post("/files/", {"action": "delete", "path": HOME, "name": "data"})
    assert asked.status_code == 200
    assert "Delete data?" in text(asked)
    assert (home / "data").is_dir()  # not before it is confirmed

    done = browser.post("/files/", {"action": "delete", "path": HOME, "name": "data",
                                    "confirm": "yes"})
    assert done.status_code == 302
    assert not (home / "data").exists()
    assert messages_of(browser.get(done["Location"])) == ["Deleted data (2Ki freed)."]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("data", f"{HOME}/data already exists"),
        ("a/b", "one name, without '/'"),
        ("..", "'..' is not allowed"),
        (".pfs-upload-x", "reserved for uploads in progress"),
        ("", "This field is required."),
    ],
)
def test_a_bad_folder_name_is_shown_beside_the_field(browser, home, name, says):
    before = sorted(p.name for p in home.iterdir())
    response = browser.post("/files/", {"action": "mkdir", "path": HOME, "name": name})
    assert response.status_code == 200
    body = text(response)
    errors = field_errors(body, "id_name")
    assert len(errors) == 1 and says in errors[0], errors
    assert rows(body) == ["data", "notes.txt"]  # the listing is still there
    assert sorted(p.name for p in home.iterdir()) == before


def test_nothing_can_be_made_in_the_public_directory(browser, public):
    response = browser.post("/files/", {"action": "mkdir", "path": PUBLIC, "name": "mine"})
    assert f"{PUBLIC}/mine: {PUBLIC} is read-only" in text(response)
    assert not (public / "mine").exists()
    browser.post("/files/", {"action": "delete", "path": PUBLIC, "name": "README",
                             "confirm": "yes"})
    assert (public / "README").exists()


def test_bob_cannot_browse_nor_change_alices_home(make_user, home):
    bob = Client()
    bob.force_login(make_user("bob"))
    response = bob.get(files(HOME))
    assert response.status_code == 404
    body = text(response)
    assert "Not found" in body and "your home is /pfs/datacenter1/home/bob" in body
    assert "notes.txt" not in body

    bob.post("/files/", {"action": "mkdir", "path": HOME, "name": "x"})
    bob.post("/files/", {"action": "delete", "path": HOME, "name": "notes.txt",
                         "confirm": "yes"})
    assert sorted(p.name for p in home.iterdir()) == ["data", "notes.txt"]


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/pfs/datacenter2/home/alice", 403, "you are working in 'datacenter1'"),
        ("/etc/passwd", 400, "is not a PFS path"),
        (HOME + "/../bob", 400, "'..' is not allowed"),
        (HOME + "/missing", 404, f"{HOME}/missing does not exist"),
    ],
)
def test_paths_the_user_may_not_see_get_an_error_page(browser, home, path, status, says):
    response = browser.get(files(path))
    assert response.status_code == status
    body = text(response)
    assert says in body
    assert "Traceback" not in body
    assert 'id="upload-input"' not in body


def test_switching_datacenter_on_the_files_page_goes_to_the_new_home(make_user, home,
                                                                    other_datacenter):
    client = Client()
    client.force_login(make_user("alice", datacenters=("datacenter1", "datacenter2")))
    body = text(client.get(files(HOME + "/data")))
    assert '<input type="hidden" name="next" value="/files/">' in body
    response = client.post("/datacenter", {"datacenter": "datacenter2", "next": "/files/"})
    page = client.get(response["Location"])
    assert page.status_code == 200
    assert "/pfs/datacenter2/home/alice" in text(page)
