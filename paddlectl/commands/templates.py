"""``paddlectl templates``: the job templates your administrators published (issue 39), to
submit from with ``paddlectl submit --template NAME``: each one's values, the fields it locks
and the bounds it keeps others within (``-o json|yaml``: the API's answer)."""

from __future__ import annotations

from paddlectl.output import TEMPLATE_COLUMNS


def setup_templates(parser) -> None:
    parser.description = ("The job templates you may submit from (paddlectl submit --template "
                          "NAME):\ntheir values, locked fields and limits.")


def run_templates(ctx, args) -> None:
    templates = ctx.client.templates()
    if not templates and ctx.output_format() not in ("json", "yaml"):
        ctx.info("no templates are published in this datacenter's portal")
        return
    ctx.emit(templates, templates, TEMPLATE_COLUMNS)
