"""The documentation site's generated pages (a MkDocs hook, named in mkdocs.yml).

Nothing here is written into docs/: each page is made when the site is built, from what it
documents, so it cannot drift from it:

- ``users/paddlectl-reference.md``: every command's usage, description and flags, from the
  parsers ``paddlectl help CMD`` prints (paddlectl/commands);
- ``users/api-reference.md``: the OpenAPI schema the portal serves at /api/schema/
  (drf-spectacular, ``paddlecloud spectacular``), rendered by the ReDoc that
  drf-spectacular-sidecar ships — a file of the site, no CDN;
- ``repository/…``: the repository's own READMEs the pages link to (bench/, deploy/,
  tests/k8s_api_server/), as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY_FILES = ("bench/README.md", "deploy/README.md", "deploy/grafana-dashboard.json",
                    "tests/k8s_api_server/README.md")
PADDLECTL_PAGE = "users/paddlectl-reference.md"
API_PAGE = "users/api-reference.md"


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _flags_table(parser: argparse.ArgumentParser) -> str:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        invocation = formatter._format_action_invocation(action)
        meaning = formatter._expand_help(action) if action.help else ""
        rows.append(f"| `{invocation}` | {_cell(meaning)} |")
    if not rows:
        return "No flags or arguments of its own.\n"
    return "| flag or argument | meaning |\n| --- | --- |\n" + "\n".join(rows) + "\n"


def paddlectl_reference() -> str:
    sys.path.insert(0, str(ROOT))  # the tree being documented, not an installed copy
    from paddlecloud_client.errors import EXIT_CODES
    from paddlectl.cli import top_parser
    from paddlectl.commands import COMMANDS
    from paddlectl.commands.help import CONFIG_HELP

    parts = [
        "# `paddlectl` reference\n\n"
        "Generated from paddlectl's own parsers (`paddlectl/commands`) when the site is built: "
        "what `paddlectl help COMMAND` prints. How to use it: [paddlectl](paddlectl.md).\n\n"
        "```text\npaddlectl [flags] COMMAND [arguments and flags]\n```\n\n"
        "Long flags work with one dash too (`-jobname x`, as in the seeds) and flags may come "
        "before or after the command's arguments.\n\n## Top-level flags\n\n"
        "Accepted before or after the command.\n\n",
        _flags_table(top_parser()),
        "\n## Exit codes\n\n| code | meaning |\n| --- | --- |\n",
        "".join(f"| {code} | {_cell(meaning)} |\n" for code, meaning in EXIT_CODES),
        "\n## The config file\n\n```text\n" + CONFIG_HELP.replace("\t", "    ") + "```\n",
        "\n## Commands\n",
    ]
    for name in sorted(COMMANDS):
        command = COMMANDS[name]
        parts.append(f"\n### `paddlectl {name}`\n\n{command.summary[:1].upper()}"
                     f"{command.summary[1:]}.\n\n")
        if not command.available:
            parts.append("Not available in this version yet.\n")
            continue
        parser = command.parser()
        parts.append(f"```text\n{parser.format_usage().strip()}\n```\n\n")
        if parser.description and parser.description != command.summary:
            parts.append(f"```text\n{parser.description.strip()}\n```\n\n")
        parts.append(_flags_table(parser))
    return "".join(parts)


def openapi_schema() -> dict:
    """The schema as the portal serves it, from the tree being documented (a throwaway
    embedded default: it reads no database)."""
    with tempfile.TemporaryDirectory() as var:
        env = {**os.environ, "PADDLECLOUD_VAR_DIR": var, "DATABASE_URL": "",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        made = subprocess.run(
            [sys.executable, "manage.py", "spectacular", "--format", "openapi-json"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if made.returncode != 0:
        raise RuntimeError(f"paddlecloud spectacular failed:\n{made.stderr}")
    return json.loads(made.stdout)


API_REFERENCE = """\
---
hide: [navigation, toc]
---

# API reference

The OpenAPI 3 schema of the portal's API, generated from the code when this site is built
(the portal serves the same schema at `/api/schema/`, and this view of it at `/api/redoc/`).
How to log in, the error shape and the WebSockets: [Using the API](api.md).

<div id="api-reference"></div>
<script src="../assets/openapi.js"></script>
<script src="../assets/redoc.standalone.js"></script>
<script src="../assets/api-reference.js"></script>
"""

# ReDoc, started on the schema's element once the scripts are loaded (a file of its own: the
# page's Markdown keeps no inline script).
API_REFERENCE_JS = """\
Redoc.init(window.PADDLECLOUD_OPENAPI,
           {disableSearch: true, hideDownloadButton: false, scrollYOffset: 0},
           document.getElementById("api-reference"));
"""


def _redoc_bundle() -> Path:
    import drf_spectacular_sidecar

    return (Path(drf_spectacular_sidecar.__file__).parent / "static" / "drf_spectacular_sidecar"
            / "redoc" / "bundles" / "redoc.standalone.js")


def on_files(files, config):
    files.append(File.generated(config, PADDLECTL_PAGE, content=paddlectl_reference()))
    files.append(File.generated(config, API_PAGE, content=API_REFERENCE))
    schema = json.dumps(openapi_schema(), sort_keys=True)
    files.append(File.generated(config, "assets/openapi.js",
                                content=f"window.PADDLECLOUD_OPENAPI = {schema};\n"))
    files.append(File.generated(config, "assets/redoc.standalone.js",
                                abs_src_path=str(_redoc_bundle())))
    files.append(File.generated(config, "assets/api-reference.js", content=API_REFERENCE_JS))
    for path in REPOSITORY_FILES:
        files.append(File.generated(config, f"repository/{path}",
                                    abs_src_path=str(ROOT / path)))
    return files
