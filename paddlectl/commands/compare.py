"""``paddlectl compare JOB...``: runs side by side (issue 39) — each job's metrics, final and
best, a row per job and metric (``-o json|yaml``: the API's whole answer; ``-o csv``: the rows),
then what differs in their specs and environments, a column per job (the values of
secret-looking variables are never sent: ``(hidden)``)."""

from __future__ import annotations

from paddlectl.args import flag
from paddlectl.output import COMPARE_COLUMNS, tabulate


def setup_compare(parser) -> None:
    parser.description = ("Compare up to 20 of your jobs: the final and best value of each "
                          "metric they reported\n(paddlecloud_sdk.report), and what differs "
                          "in their specs and environments.")
    parser.add_argument("names", nargs="+", metavar="JOB")
    flag(parser, "metric", metavar="NAME",
         help="only this metric's rows (-o json: and each job's curve of it)")


def _diff_rows(data: dict) -> list[list[str]]:
    names = [job["name"] for job in data["jobs"]]
    shown = lambda value: "-" if value is None else str(value)  # noqa: E731
    return [["FIELD", *(name.upper() for name in names)]] + [
        [row["field"], *(shown(row["values"].get(name)) for name in names)]
        for row in data["diff"]]


def run_compare(ctx, args) -> None:
    data = ctx.client.compare(args.names, metric=args.metric)
    rows = [row for row in data["table"] if not args.metric or row["metric"] == args.metric]
    fmt = ctx.output_format()
    if fmt in ("json", "yaml"):
        ctx.emit(data)
        return
    if rows:
        ctx.emit(data, rows, COMPARE_COLUMNS)
    elif fmt != "csv":
        ctx.info("none of these jobs has reported "
                 + (f"metric {args.metric}" if args.metric else "metrics")
                 + " (paddlecloud_sdk.report)")
    if fmt in ("table", "wide"):
        if data["diff"]:
            ctx.stdout.write("\n" + tabulate(_diff_rows(data)))
        else:
            ctx.info("\ntheir specs and environments are the same")

