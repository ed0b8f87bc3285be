"""Numbered lines of a growing file (a worker's log, its metrics): where each line ends,
reading and skipping them by number, and the last lines of a file.

A line's number is its place in the file, counted from 0. A line ends at "\n", "\r\n" or a
lone "\r" (a progress bar redrawing itself), and one longer than MAX_LINE bytes is split there,
as container runtimes split log lines (16 KiB). The WebSocket consumers, their pumps
(``jobs.logs.pumps``), the log tail over HTTP and the metrics all count lines this way.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from kernel.errors import ValidationError

from ..files import JobFile

BLOCK = 256 * 1024  # read at a time when counting lines
BATCH_BYTES = 1 << 20  # read at most this much of a file per batch: bounded messages
BATCH_LINES = 1000  # per message, to browsers and over the channel layer
MAX_LINE = 16 * 1024  # a longer line is split here

_END = re.compile(rb"[\r\n]")
_ENDS = re.compile(rb"\r\n|\r|\n")


@dataclass
class Cursor:
    """A reader's place in a file: the byte ``offset`` where line number ``line`` begins."""

    line: int = 0
    offset: int = 0


MAX_LINE_NUMBER = 10**12


def line_number(text: str, field: str = "from") -> int:
    """A line number a client asks to start from (``?from=``)."""
    if not text.isdigit() or int(text) > MAX_LINE_NUMBER:
        raise ValidationError.for_field(field, "the line number to start from: a whole number "
                                               "from 0")
    return int(text)


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def line_end(data: bytes, start: int, final: bool) -> tuple[int, int] | None:
    """Where the line that begins at ``data[start]`` ends: the end of its text and where the
    next line begins; None while that cannot be told (the writer may add to it). ``final``:
    ``data`` runs to the end of a file whose writer has ended."""
    found = _END.search(data, start, start + MAX_LINE + 1)
    if found is not None:
        end = found.start()
        if data[end] == 0x0A:
            return end, end + 1
        if end + 1 < len(data):  # "\r\n" is one line end
            return end, end + (2 if data[end + 1] == 0x0A else 1)
        return (end, end + 1) if final else None
    if len(data) - start > MAX_LINE:
        return start + MAX_LINE, start + MAX_LINE
    if final and start < len(data):
        return len(data), len(data)
    return None


def _whole_lines(chunk: bytes) -> int | None:
    """How many lines ``chunk`` holds when it is whole lines ending in "\n" none of which is
    split (counted at C speed), else None."""
    count = chunk.count(b"\n")
    if b"\r" in chunk:
        count += chunk.count(b"\r") - chunk.count(b"\r\n")
    if len(chunk) > MAX_LINE and max(map(len, _ENDS.split(chunk))) > MAX_LINE:
        return None
    return count


def lines_read(file: JobFile, cursor: Cursor, *, ended: bool = False,
               limit: int = BATCH_LINES) -> list[str]:
    """Up to ``limit`` lines from ``cursor`` on (from at most BATCH_BYTES of the file),
    advancing it. A last line without its end is returned only once the writer has ``ended``
    (until then it is being written)."""
    f = file.open()
    if f is None:
        return []
    with f:
        size = os.fstat(f.fileno()).st_size
        data = os.pread(f.fileno(), BATCH_BYTES, cursor.offset)
    final = ended and cursor.offset + len(data) >= size
    lines, start = _plain_lines(data, limit), 0
    if lines:
        start = sum(map(len, lines)) + len(lines)
    while len(lines) < limit and (span := line_end(data, start, final)) is not None:
        lines.append(data[start:span[0]])
        start = span[1]
    cursor.line += len(lines)
    cursor.offset += start
    return [decode(line) for line in lines]


def _plain_lines(data: bytes, limit: int) -> list[bytes]:
    """The first ``limit`` whole lines of ``data`` when those up to its last "\n" are plain —
    no "\r", none longer than MAX_LINE — split at C speed (``line_end`` splits them the same,
    a line at a time); else none (the caller splits them)."""
    whole = data.rfind(b"\n") + 1
    if not whole or data.find(b"\r", 0, whole) >= 0:
        return []
    count = min(data.count(b"\n"), limit)
    lines = data.split(b"\n", count)[:count]
    return lines if max(map(len, lines), default=0) <= MAX_LINE else []


def lines_skip(file: JobFile, cursor: Cursor, line: int) -> None:
    """Move ``cursor`` forward to line number ``line``, or to the end of the whole lines
    written so far if there are fewer."""
    f = file.open()
    if f is None:
        return
    with f:
        while cursor.line < line and (data := os.pread(f.fileno(), BLOCK, cursor.offset)):
            whole = data.rfind(b"\n") + 1
            count = _whole_lines(data[:whole]) if whole else None
            if count is not None and cursor.line + count <= line:
                cursor.line += count
                cursor.offset += whole
                continue
            start = 0
            while cursor.line < line and (span := line_end(data, start, False)) is not None:
                start = span[1]
                cursor.line += 1
            if not start:  # no whole line left: the rest is still being written
                return
            cursor.offset += start


def lines_end(file: JobFile) -> Cursor:
    """Where the whole lines written so far end."""
    cursor = Cursor()
    lines_skip(file, cursor, 1 << 62)
    return cursor


def lines_tail(file: JobFile, count: int) -> tuple[int, list[str]]:
    """The last ``count`` lines of the file as it is now (a last one without its end
    counts), and the number of the first of them: what a page shows before it follows."""
    if count <= 0:
        return lines_end(file).line, []
    end = lines_end(file)
    unfinished = file.size() > end.offset
    cursor = Cursor()
    lines_skip(file, cursor, max(0, end.line - count + unfinished))
    first, tail = cursor.line, []
    while len(tail) < count and (batch := lines_read(file, cursor, ended=True)):
        tail += batch
    return first, tail[:count]


def tail_offset(file: JobFile, count: int) -> int:
    """The byte offset where the last ``count`` lines of the file begin, reading no more of it
    than ``count`` + 1 lines can span. (Inside a line longer than that, where it is split is
    counted from there, so it may differ from how ``lines_read`` splits it from its start.)"""
    size = file.size()
    if count <= 0:
        return size
    start = max(0, size - (count + 1) * (MAX_LINE + 2))
    if start:  # from the beginning of the first line that begins in that window
        f = file.open()
        if f is None:
            return 0
        with f:
            data = os.pread(f.fileno(), MAX_LINE + 2, start)
        if (found := _ENDS.search(data)) is not None:
            start += found.end()
    window = Cursor(offset=start)
    lines_skip(file, window, 1 << 62)
    lines = window.line + (size > window.offset)
    cursor = Cursor(offset=start)
    lines_skip(file, cursor, max(0, lines - count))
    return cursor.offset
