"""The documentation site's build is strict, as `./dev docs` and `./dev test` run it: a link to
a page or an anchor that is not there, or a page the navigation names that does not exist, fails
the build, naming each (mkdocs.yml's ``validation``). The site as it is builds and is read in
the browser by tests/e2e/test_docs.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_a_broken_link_an_unknown_anchor_or_a_missing_page_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    page = docs / "users" / "files.md"
    page.write_text(page.read_text() + "\nSee [the old page](no-such-page.md) and "
                    "[jobs' lost section](jobs.md#no-such-anchor).\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), site_dir=str(tmp_path / "site"),
                  hooks=[str(ROOT / "docs" / "hooks.py")])
    config["nav"].append({"Gone": "users/gone.md"})
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))

    made = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
        cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True,
        text=True, timeout=300)
    assert made.returncode != 0
    warnings = [line for line in made.stderr.splitlines() if line.startswith("WARNING")]
    for named in ("no-such-page.md", "#no-such-anchor", "users/gone.md"):
        assert any(named in line for line in warnings), made.stderr
