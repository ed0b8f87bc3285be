"""docker-compose.yml describes the full stack. This checks what can be checked without a
Docker engine, at once: the services, that every command they run exists, and that the image
built by the Dockerfile holds every package and file the project is made of. (Building and
running the image, alone and with docker-compose: tests/test_image.py.)"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import tomllib
from pathlib import Path

import yaml
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parent.parent
# Beside the packages: what the portal reads at run time, and what ``pip install`` reads.
NEEDED_FILES = ("templates", "static", "manage.py", "pyproject.toml", "README.md")


def load() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_full_stack_is_there():
    services = load()["services"]
    assert set(services) == {"postgres", "redis", "web", "worker", "beat"}
    for name in ("web", "worker", "beat"):
        env = services[name]["environment"]
        assert env["DEBUG"] == "0"
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["REDIS_URL"].startswith("redis://redis:")
        assert set(services[name]["depends_on"]) == {"postgres", "redis"}


def test_the_web_is_healthy_when_it_is_ready():
    """Compose waits on a service's health check: the web's is readiness (its database and
    Redis answer), not liveness."""
    test = " ".join(load()["services"]["web"]["healthcheck"]["test"])
    assert "http://127.0.0.1:8000/readyz" in test


def test_commands_name_things_that_exist():
    services = load()["services"]
    commands = get_commands()
    web = services["web"]["command"]
    for word in ("migrate", "runportal"):
        assert f"paddlecloud {word}" in web
        assert word in commands
    assert "--no-worker" in web  # the worker and beat services do that work
    assert services["worker"]["command"].startswith("celery -A paddlecloud worker")
    assert services["beat"]["command"].startswith("celery -A paddlecloud beat")


def packages() -> list[str]:
    """The top-level packages of the distribution: the directories with an ``__init__.py`` at
    the root that pyproject.toml's ``[tool.setuptools.packages.find]`` takes."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]
    return sorted(
        path.name for path in ROOT.iterdir() if (path / "__init__.py").is_file()
        and any(fnmatch.fnmatchcase(path.name, p) for p in find.get("include", ["*"]))
        and not any(fnmatch.fnmatchcase(path.name, p) for p in find.get("exclude", [])))


def instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions as (keyword, arguments): continued lines joined, comments
    and blank lines dropped."""
    found, pending = [], ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).partition(" ")
        found.append((keyword.upper(), arguments.strip()))
        pending = ""
    return found


def image_copies(text: str) -> tuple[dict[str, str], str]:
    """Where the build context lands in the image: {path in the context: path in the image}
    for every COPY or ADD from the context (a directory's contents land at its destination),
    and the final WORKDIR, where the portal is installed and runs."""
    copies, workdir = {}, "/"
    for keyword, arguments in instructions(text):
        if keyword == "WORKDIR":
            workdir = posixpath.join(workdir, arguments)
        if keyword not in ("COPY", "ADD"):
            continue
        flags, words = re.fullmatch(r"((?:--\S+\s+)*)(.*)", arguments).groups()
        if any(flag.startswith("--from=") for flag in flags.split()):
            continue  # from another stage or image, not from the context
        *sources, dest = json.loads(words) if words.startswith("[") else words.split()
        target = posixpath.normpath(posixpath.join(workdir, dest))
        into = dest.endswith("/") or len(sources) > 1 or target == posixpath.normpath(workdir)
        for source in sources:
            source = posixpath.normpath(source.lstrip("/") or ".")
            for rel in ([p.relative_to(ROOT).as_posix() for p in sorted(ROOT.glob(source))]
                        if re.search(r"[*?[]", source) else [source]):
                # A file copied into a directory keeps its name; a directory's contents land
                # at the destination itself.
                copies[rel] = (posixpath.join(target, posixpath.basename(rel))
                               if into and (ROOT / rel).is_file() else target)
    return copies, posixpath.normpath(workdir)


def dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` out of the build context: as Docker decides, by
    the last pattern that matches the path or a directory above it (``!`` lets it back in)."""
    ignore = ROOT / ".dockerignore"
    lines = ignore.read_text().splitlines() if ignore.is_file() else []
    parts = path.split("/")
    above = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    ignored = False
    for line in (line.strip() for line in lines):
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        pattern = posixpath.normpath(line.lstrip("!").strip().lstrip("/"))
        regex = "".join({"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
            token, re.escape(token)) for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern))
        if any(re.fullmatch(regex, candidate) for candidate in above):
            ignored = not keep
    return ignored


def lands(path: str, copies: dict[str, str]) -> str | None:
    """Where ``path`` of the context lands in the image (None: it is not copied)."""
    for source, dest in copies.items():
        if source == ".":
            return posixpath.join(dest, path)
        if path == source or path.startswith(source + "/"):
            return posixpath.join(dest, path[len(source):].lstrip("/")).rstrip("/")
    return None


def test_the_image_holds_every_package_and_file_of_the_project():
    """pip installs the project in the image from what the Dockerfile copied: a package or
    file it leaves out is missing from the image (as dashboard/ once was)."""
    needed = [*packages(), *NEEDED_FILES]
    assert {"paddlecloud", "jobs", "paddlectl"} <= set(needed)  # pyproject.toml was read
    assert [path for path in needed if not (ROOT / path).exists()] == []
    assert [path for path in needed if dockerignored(path)] == [], "kept out by .dockerignore"
    copies, workdir = image_copies((ROOT / "Dockerfile").read_text())
    missing = [path for path in needed if lands(path, copies) != posixpath.join(workdir, path)]
    assert missing == [], f"the Dockerfile does not copy these to {workdir}/: {missing}"


def test_the_image_installs_the_portal_not_only_the_client():
    """``pip install .`` is the client (paddlectl, the SDK); the portal is the ``server``
    extra, which the image must ask for."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(dep.lower().startswith("django") for dep in project["dependencies"])
    assert any(dep.lower().startswith("django") for dep in project["optional-dependencies"]
               ["server"])
    dockerfile = (ROOT / "Dockerfile").read_text()
    installs = re.findall(r"pip install\s+((?:-\S+\s+)*)(\S+)", dockerfile)
    # The project itself, with the extra; the dependencies before it (a layer of their own)
    # from a requirements file: pyproject.toml's dependencies and those of the server extra.
    project = [target for flags, target in installs if "-r" not in flags.split()]
    assert project and all(target.strip("\"'") == ".[server]" for target in project), installs
    if len(project) < len(installs):
        assert '["optional-dependencies"]["server"]' in dockerfile


def test_the_docs_compose_steps_set_every_variable_compose_requires():
    """docker-compose.yml refuses to start without each ``${NAME:?…}``; the steps of the docs'
    "Docker Compose" page (docs/admin/compose.md) put every one of them in .env (they once
    left PADDLECLOUD_CREDENTIAL_KEYS out)."""
    required = set(re.findall(r"\$\{(\w+):\?", (ROOT / "docker-compose.yml").read_text()))
    assert required >= {"SECRET_KEY", "PADDLECLOUD_CREDENTIAL_KEYS"}
    section = (ROOT / "docs" / "admin" / "compose.md").read_text()
    steps = section[section.index("```bash"):section.index("docker compose up")]
    written = set(re.findall(r'^echo "(\w+)=.*>>? \.env$', steps, re.M))
    assert written == required
