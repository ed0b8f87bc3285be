"""Shell completion: what ``paddlectl __complete`` offers (subcommands and flags from the
parsers; job names, registry names and PFS paths from the live portal), and the bash, zsh and
fish scripts of ``paddlectl completion SHELL`` run by the real shells."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from accounts.models import Datacenter, User
from registries.services import registry_create
from tests.factories import HOME, job_row

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def portal(live_cli):
    """alice's portal with two jobs, a registry and a few files in her home."""
    alice, datacenter = User.objects.get(username="alice"), Datacenter.objects.get()
    job_row(alice, datacenter, "fit-a-line")
    job_row(alice, datacenter, "fit-more")
    registry_create(alice, datacenter, {"name": "mine", "server": "registry.example.com",
                                        "username": "alice", "password": "secret"})
    home = live_cli.portal.home
    (home / "data" / "fit").mkdir(parents=True)
    (home / "data" / "fit" / "part-0").write_text("1 2\n")
    (home / "data.txt").write_text("x\n")
    return live_cli


def offered(cli, *words: str) -> tuple[list[str], str]:
    """What ``__complete`` offers for the last of ``words``, and what the shell does then."""
    result = cli("__complete", *words)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    *candidates, then = result.stdout.splitlines()
    return candidates, then


def test_subcommands_and_flags_come_from_the_parsers(offline_cli):
    assert offered(offline_cli, "")[0][:5] == ["build", "commands", "compare", "completion",
                                                "config"]
    assert offered(offline_cli, "lo") == (["local", "login", "logout", "logs"], ":")
    # flags as the user started them: the seeds' one dash, or two
    assert offered(offline_cli, "submit", "-par") == (["-parallelism"], ":")
    assert offered(offline_cli, "submit", "--jobn") == (["--jobname"], ":")
    assert offered(offline_cli, "-o", "") == (["table", "wide", "json", "yaml", "csv"], ":")
    assert offered(offline_cli, "get", "jobs", "-o", "w") == (["wide"], ":")
    assert offered(offline_cli, "get", "") == (
        ["audit", "checkpoints", "group", "jobs", "quota", "registry", "sweeps", "tasks",
         "usage", "workers"], ":")
    assert offered(offline_cli, "get", "usage", "-by", "") == (["day", "week", "month"], ":")
    assert offered(offline_cli, "delete", "") == (["job", "registry", "sweep"], ":")
    assert offered(offline_cli, "help", "k") == (["kill"], ":")
    assert offered(offline_cli, "completion", "") == (["bash", "zsh", "fish"], ":")
    assert offered(offline_cli, "config", "use-datacenter", "") == (["datacenter1"], ":")
    # local paths: the shell completes them
    assert offered(offline_cli, "submit", "examp") == ([], ":files")
    assert offered(offline_cli, "submit", "-jobname", "x", "examp") == ([], ":files")
    assert offered(offline_cli, "cp", "mo") == ([], ":files")
    # what needs the portal, which does not answer: nothing, quietly
    assert offered(offline_cli, "logs", "") == ([], ":")


def test_names_and_paths_come_from_the_portal(portal):
    assert offered(portal, "logs", "fit") == (["fit-a-line", "fit-more"], ":")
    assert offered(portal, "kill", "fit-a-line", "fit-m") == (["fit-more"], ":")
    assert offered(portal, "get", "workers", "") == (["fit-a-line", "fit-more"], ":")
    assert offered(portal, "get", "checkpoints", "") == (["fit-a-line", "fit-more"], ":")
    assert offered(portal, "delete", "registry", "") == (["mine"], ":")
    assert offered(portal, "ls", "") == ([f"{HOME}/"], ":")
    assert offered(portal, "ls", f"{HOME}/da") == (
        [f"{HOME}/data/", f"{HOME}/data.txt"], ":")
    assert offered(portal, "cp", "-r", f"{HOME}/data/") == ([f"{HOME}/data/fit/"], ":")


def in_bash(cli, line: str) -> list[str]:
    """The completions real bash offers for ``line`` (the cursor at its end), through the
    script of ``paddlectl completion bash``."""
    script = cli("completion", "bash").stdout
    words = line.split(" ")
    program = (f"{script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)})\n"
               f"COMP_CWORD={len(words) - 1}\n_paddlectl\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"")
    result = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True,
                            timeout=60, env=cli.environ(), cwd=cli.home)
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line]


def test_bash_completes_through_the_portal(portal):
    (portal.home / "examples" / "fit_a_line").mkdir(parents=True)
    assert in_bash(portal, "paddlectl lo") == ["local", "login", "logout", "logs"]
    assert in_bash(portal, "paddlectl logs fit-a") == ["fit-a-line"]
    assert in_bash(portal, f"paddlectl ls {HOME}/data/") == [f"{HOME}/data/fit/"]
    assert in_bash(portal, "paddlectl submit exa") == ["examples"]  # a local directory


@pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed (./dev test "
                                                     "installs it)")
def test_fish_completes_through_the_portal(portal):
    script = portal("completion", "fish").stdout
    result = subprocess.run(
        ["fish", "--no-config", "-c", f"{script}\ncomplete -C'paddlectl logs fit-'"],
        capture_output=True, text=True, timeout=60, env=portal.environ(), cwd=portal.home)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["fit-a-line", "fit-more"]


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed (./dev test "
                                                    "installs it)")
def test_zsh_completes_through_the_portal(portal):
    """zsh's completion widgets run only inside its line editor: ``compadd`` and ``_files``
    are replaced by functions that print what they were given; the script's own logic (the
    words it sends, how it reads the answer) runs in the real zsh."""
    script = portal("completion", "zsh").stdout
    program = (
        "compdef() { :; }\n"
        "compadd() { while [[ $1 == -* ]]; do [[ $1 == -- ]] && { shift; break; };"
        " [[ $1 == -S ]] && shift; shift; done; print -l -- \"$@\"; }\n"
        "_files() { print -- FILES; }\n"
        f"{script}\n"
        "words=(paddlectl logs fit-); CURRENT=3; _paddlectl\n"
        f"words=(paddlectl ls {HOME}/d); CURRENT=3; _paddlectl\n"
        "words=(paddlectl submit exa); CURRENT=3; _paddlectl\n")
    result = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True,
                            timeout=60, env=portal.environ(), cwd=portal.home)
    assert result.returncode == 0, result.stderr
    # (a directory is added apart: no space after it, the path goes on)
    assert result.stdout.split() == ["fit-a-line", "fit-more", f"{HOME}/data.txt",
                                     f"{HOME}/data/", "FILES"]
