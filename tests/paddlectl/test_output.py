"""Sizes, times and tables as users see them; json and yaml as the API sent them."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from paddlecloud_client.progress import Progress, format_rate, format_size
from paddlectl.output import Column, emit, format_age, format_time, tabulate


@pytest.mark.parametrize(("size", "shown"), [
    (0, "0"), (512, "512"), (1023, "1023"), (4096, "4.0K"), (1536, "1.5K"),
    (int(1.2 * 2**30), "1.2G"), (120 * 2**20, "120.0M"), (None, "-"),
])
def test_sizes_are_human_readable(size, shown):
    assert format_size(size) == shown


def test_sizes_are_exact_when_asked():
    assert format_size(int(1.2 * 2**30), exact=True) == "1288490188"


@pytest.mark.parametrize(("seconds", "shown"), [
    (5, "5s ago"), (180, "3m ago"), (7200, "2h ago"), (3 * 86400, "3d ago"),
    (400 * 86400, "1y ago"), (-30 * 86400, "in 30d"),
])
def test_ages(seconds, shown):
    assert format_age(seconds) == shown


def test_times_are_local_with_their_age():
    now = datetime(2026, 11, 21, 10, 5, tzinfo=UTC)
    local = datetime(2026, 11, 21, 10, 2, tzinfo=UTC).astimezone()
    assert format_time("2026-11-21T10:02:00Z", now=now) == f"{local:%Y-%m-%d %H:%M} (3m ago)"
    assert format_time(None) == "-"


def test_tables_align_columns_with_spaces_as_kubectl_does():
    text = tabulate([["NAME", "STATUS", "START"],
                     ["paddle-cluster-job-trainer-3s4nz", "Running", "2017-05-24 10:02 (3m ago)"],
                     ["x", "Pending", "-"]])
    lines = text.splitlines()
    assert "\t" not in text
    for column, words in enumerate((["STATUS", "Running", "Pending"], ["START", "2017", "-"])):
        starts = {line.index(word) for line, word in zip(lines, words, strict=True)}
        assert starts == {len("paddle-cluster-job-trainer-3s4nz   ") + column * len("Running   ")}
    assert lines[0] == "NAME" + " " * 31 + "STATUS    START"
    assert cells(lines[1]) == ["paddle-cluster-job-trainer-3s4nz", "Running",
                               "2017-05-24 10:02 (3m ago)"]


def cells(line: str) -> list[str]:
    """A table's line as its cells (columns are 3 spaces apart at least)."""
    return re.split(r" {2,}", line.strip())


COLUMNS = [Column("name", "name"), Column("size", "size", "size"),
           Column("modified", "mtime", "time"), Column("target", "target", wide_only=True)]
ROWS = [{"name": "big.bin", "size": 5 * 2**30, "mtime": "2020-01-01T00:00:00Z", "target": None}]


def printed(fmt: str) -> str:
    out = io.StringIO()
    emit(out, fmt, {"entries": ROWS}, ROWS, COLUMNS)
    return out.getvalue()


def test_table_and_wide():
    table = printed("table").splitlines()
    assert table[0].split() == ["NAME", "SIZE", "MODIFIED"]
    assert cells(table[1])[1] == "5.0G" and table[1].endswith(" ago)")
    wide = printed("wide").splitlines()
    assert wide[0].split() == ["NAME", "SIZE", "MODIFIED", "TARGET"]
    assert str(5 * 2**30) in wide[1]


def test_json_and_yaml_are_the_raw_data():
    assert json.loads(printed("json")) == {"entries": ROWS}
    assert printed("json").startswith('{\n  "entries"')
    assert yaml.safe_load(printed("yaml")) == {"entries": ROWS}


def test_progress_draws_only_when_enabled():
    out = io.StringIO()
    with Progress(out, "fit_a_line.tar", 120 * 2**20, enabled=True) as progress:
        progress.started -= 1
        progress.update(45 * 2**20)
    line = out.getvalue()
    assert line.startswith("\r  fit_a_line.tar  45.0M/120.0M  37%  ")
    assert line.endswith(" MB/s\n")
    quiet = io.StringIO()
    with Progress(quiet, "x", 10, enabled=False) as silent:
        silent.update(5)
    assert quiet.getvalue() == ""


def test_progress_ends_its_line_when_a_transfer_fails():
    out = io.StringIO()
    with pytest.raises(OSError), Progress(out, "x", 100, enabled=True) as progress:
        progress.drawn -= 1
        progress.update(10)
        raise OSError("disk full")
    assert out.getvalue().startswith("\r  x  10/100  10%  ")
    assert out.getvalue().endswith("\n") and out.getvalue().count("\r") == 1


def test_rates():
    assert format_rate(62.1 * 2**20) == "62.1 MB/s"
    assert format_rate(100) == "100 B/s"


def test_future_times_count_down():
    shown = format_time((datetime.now(UTC) + timedelta(days=30, minutes=1)).isoformat())
    assert shown.endswith("(in 30d)")
