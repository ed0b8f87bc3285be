"""A trainer package's ``requirements.txt``, read as data (issue 33, item 5).

pip's requirements format is a command line in a file: it can name other files (``-r``,
``-c``), install a directory (``-e``, a local path), and send the installer anywhere
(``--index-url``, ``--find-links``, ``name @ URL``). The portal installs it for every backend
and must never act on what it names with its own privileges, nor let it make the installer
fetch from the portal's own machine. So it is read here with a strict grammar, and anything
outside it is refused with the line and the rule, before anything is installed:

- a requirement: a name, extras, version specifiers and environment markers (PEP 508), with
  ``--hash=ALGO:HEX`` options after it; never a direct reference (``name @ URL``), a URL or a
  path, apart from a wheel of the package itself (``wheels/tinydep-1.0-py3-none-any.whl``);
- ``--index-url``/``-i``, ``--extra-index-url``, ``--find-links``/``-f`` with a URL that is one
  of the datacenter's allowed package indexes (or below one), or — ``--find-links`` only — a
  directory of the package; ``--no-index``, ``--pre``, ``--prefer-binary``, ``--only-binary``;
- nothing else: no ``-r``, ``-c``, ``-e``, ``--trusted-host``, ``--cert``, ``--config-settings``…,
  no absolute path, no ``..``, no ``$`` (pip and uv expand variables), no link.

A path the file names is relative to the package and stays in it; the caller reads it without
following links. The text is bounded (``limit``): a larger file is refused unread.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

REQUIREMENTS_FILE = "requirements.txt"
REQUIREMENTS_MAX = 64 * 1024  # the portal's default bound (PADDLECLOUD_REQUIREMENTS_MAX)

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_VERSION = r"[A-Za-z0-9_.*+!-]+"
_SPEC = rf"(?:~=|===|==|!=|<=|>=|<|>)\s*{_VERSION}"
_MARKER = r"""[A-Za-z0-9_.'"<>=!~ (),*+-]+"""
REQUIREMENT_RE = re.compile(
    rf"(?P<name>{_NAME})\s*(?:\[\s*{_NAME}(?:\s*,\s*{_NAME})*\s*\])?\s*"
    rf"(?:\(?\s*{_SPEC}(?:\s*,\s*{_SPEC})*\s*\)?)?\s*(?:;\s*{_MARKER})?")
HASH_RE = re.compile(r"--hash[= ](?:sha256|sha384|sha512):[0-9a-fA-F]+")
WHEEL_RE = re.compile(r"[A-Za-z0-9._+-]+\.whl")
PATH_RE = re.compile(r"[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*")
# Options and whether they take a value; their short and long spellings.
FLAGS = {"--no-index", "--pre", "--prefer-binary"}
VALUED = {"--index-url": "--index-url", "-i": "--index-url",
          "--extra-index-url": "--extra-index-url",
          "--find-links": "--find-links", "-f": "--find-links",
          "--only-binary": "--only-binary"}
ONLY_BINARY_RE = re.compile(rf":all:|:none:|{_NAME}(?:,{_NAME})*")


class RequirementsError(ValueError):
    """The file breaks the grammar; ``problems`` are one sentence each (with the line)."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Requirements:
    """A checked ``requirements.txt``: its lines (continuations joined, comments and blanks
    gone, spaces folded) and the package paths they name (directories of wheels, wheels)."""

    lines: tuple[str, ...]
    paths: tuple[str, ...]


def requirements_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines that count: continuations joined, comments and blanks
    gone, spaces folded."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        line = re.sub(r"(^|\s)#.*$", "", pending + raw)
        pending = ""
        line = " ".join(line.split())
        if line:
            lines.append((start, line))
    if pending.strip():
        lines.append((start, " ".join(re.sub(r"(^|\s)#.*$", "", pending).split())))
    return lines


def url_allowed(url: str, indexes: Iterable[str]) -> bool:
    """Whether ``url`` is one of ``indexes`` or below one (same scheme, host and port; its path
    under the index's)."""
    try:
        asked = urlsplit(url)
        asked_port = asked.port
    except ValueError:
        return False
    if asked.scheme not in ("http", "https") or not asked.hostname or asked.username \
            or asked.password or asked.query or asked.fragment:
        return False
    for index in indexes:
        allowed = urlsplit(index)
        if (allowed.scheme, allowed.hostname, allowed.port) != (
                asked.scheme, asked.hostname, asked_port):
            continue
        base = allowed.path.rstrip("/")
        if asked.path.rstrip("/") == base or asked.path.startswith(base + "/"):
            return True
    return False


def _shown(url: str) -> str:
    """An allowed index as users are told it: without the credentials a machine's own index
    URL may hold."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _package_path(value: str) -> bool:
    return bool(PATH_RE.fullmatch(value)) and not {".", ".."} & set(value.split("/"))


def _option(line: str) -> tuple[str, str | None, str]:
    """(option, value, rest) of an option line: ``--opt=value``, ``--opt value``, ``-i value``."""
    head, _, rest = line.partition(" ")
    if "=" in head and head.startswith("--"):
        head, _, value = head.partition("=")
        return head, value, rest
    if head in VALUED:
        value, _, rest = rest.partition(" ")
        return head, value or None, rest
    return head, None, rest


def requirements_check(text: str, indexes: Iterable[str]) -> Requirements:
    """``text`` read with the grammar above, ``indexes`` the URLs the datacenter allows.
    Raises ``RequirementsError`` naming every line that breaks it."""
    indexes = list(indexes)
    allowed = ", ".join(map(_shown, indexes)) or "none"
    problems: list[str] = []
    lines: list[str] = []
    paths: list[str] = []
    if "\0" in text:
        raise RequirementsError(["it is not a text file (a NUL byte)"])
    for number, line in requirements_lines(text):
        say = f"line {number} ({line[:80]!r})"
        if "$" in line:
            problems.append(f"{say}: no variables ('$'): the file is read as data")
            continue
        if line.startswith("-"):
            option, value, rest = _option(line)
            name = VALUED.get(option, option)
            if option not in FLAGS and option not in VALUED:
                problems.append(f"{say}: {option} is not allowed (allowed: --index-url, "
                                f"--extra-index-url, --find-links, --no-index, --pre, "
                                f"--prefer-binary, --only-binary, and --hash after a "
                                f"requirement; no -r, -c or -e: one file, nothing installed "
                                f"from a path)")
            elif rest.strip():
                problems.append(f"{say}: one option a line")
            elif option in FLAGS and value is None:
                lines.append(option)
            elif name in VALUED.values() and value:
                if name == "--only-binary":
                    if not ONLY_BINARY_RE.fullmatch(value):
                        problems.append(f"{say}: --only-binary takes :all:, :none: or names")
                        continue
                elif "://" in value:
                    if not url_allowed(value, indexes):
                        problems.append(f"{say}: {value} is not one of the package indexes "
                                        f"this datacenter allows ({allowed})")
                        continue
                elif name == "--find-links" and _package_path(value):
                    paths.append(value)
                else:
                    problems.append(f"{say}: {name} takes an allowed index's URL"
                                    + (" or a directory of the package (a relative path "
                                       "without '..')" if name == "--find-links" else ""))
                    continue
                lines.append(f"{name} {value}")
            else:
                problems.append(f"{say}: {option} takes a value" if value is None
                                else f"{say}: {option} takes no value")
            continue
        requirement, *hashes = re.split(r"\s+(?=--)", line)
        bad_hashes = [h for h in hashes if not HASH_RE.fullmatch(h)]
        if bad_hashes:
            problems.append(f"{say}: after a requirement only --hash=ALGO:HEX may follow")
        elif WHEEL_RE.fullmatch(requirement.rsplit("/", 1)[-1]) and _package_path(requirement):
            paths.append(requirement)
            lines.append(line)
        elif not REQUIREMENT_RE.fullmatch(requirement):
            problems.append(f"{say}: not a requirement (a name, extras, versions and markers; "
                            f"no URL, no path, no 'name @ URL')")
        else:
            lines.append(line)
    if problems:
        raise RequirementsError(problems)
    return Requirements(lines=tuple(lines), paths=tuple(dict.fromkeys(paths)))


def requirements_text(chunks: Iterable[bytes], limit: int = REQUIREMENTS_MAX) -> str:
    """The file's text from its ``chunks``, read no further than ``limit`` bytes (a larger
    file, or a sparse one, is refused there, not read whole). Raises ``RequirementsError``."""
    data = bytearray()
    for chunk in chunks:
        data += chunk
        if len(data) > limit:
            raise RequirementsError([f"it is larger than the {limit} bytes allowed"])
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise RequirementsError(["it is not UTF-8 text"]) from None
