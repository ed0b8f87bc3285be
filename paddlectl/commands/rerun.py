"""``paddlectl submit -from JOB [flags]``: re-run one of your jobs with changes (issue 39).

The new job starts from JOB's spec as the portal shows it (every field of
``paddlecloud_core.spec.FIELDS`` a flag sets); the flags given change it (``-e K=V`` adds to
or replaces one variable of its environment), and ``rerun_of`` records JOB. What changes is
shown field by field, then the portal's dry run of the whole job, and the job is submitted
once confirmed (``-y``: without asking). Its name is ``-jobname``'s, else JOB-r1, JOB-r2, …,
the first that is free.

By default it reproduces JOB byte for byte (``rerun_submission``): the package is the snapshot
JOB ran (``package_snapshot``, whose digest the portal checks against JOB's ``package_digest``
before it copies it again), the image pinned to the digest JOB ran (``image_digest``). A
package given (PACKAGE or ``-package PATH``: a directory in PFS, as it is now) or ``-image``
is a change like any other, and the table shows the package's digest beside JOB's. Nothing is
uploaded.
"""

from __future__ import annotations

import sys

from paddlecloud_client.errors import ApiError, UsageError
from paddlecloud_core.contract import JOB_NAME_MAX
from paddlecloud_core.spec import FIELDS, rerun_submission
from paddlectl.commands.jobs import _env, _show_plan, _submission
from paddlectl.output import tabulate

RERUN_NAMES = 50  # JOB-r1 … JOB-r50 tried for a free name


def _free_name(ctx, base: str) -> str:
    for number in range(1, RERUN_NAMES + 1):
        suffix = f"-r{number}"
        name = base[:JOB_NAME_MAX - len(suffix)].rstrip("-") + suffix
        try:
            ctx.client.job_get(name)
        except ApiError as exc:
            if exc.status == 404:
                return name
            raise
    raise UsageError(f"submit -from {base}: {base}-r1 to -r{RERUN_NAMES} are taken; name the "
                     "job with -jobname")


def spec_changes(before: dict, after: dict) -> list[tuple[str, str, str]]:
    """``(field, before, after)`` for each field that differs (each variable of env apart)."""
    shown = lambda value: "-" if value in (None, "") else str(value)  # noqa: E731
    rows = []
    for f in FIELDS:
        if f.type == "env":
            old, new = before.get("env") or {}, after.get("env") or {}
            rows += [(f"env.{key}", shown(old.get(key)), shown(new.get(key)))
                     for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)]
        elif f.name != "rerun_of" and str(before.get(f.name) or "") != str(
                after.get(f.name) or ""):
            rows.append((f.name, shown(before.get(f.name)), shown(after.get(f.name))))
    return rows


def rerun(ctx, args) -> int | None:
    origin = args.rerun_of
    job = ctx.client.job_get(origin)
    before = rerun_submission(job)
    if args.package is None and not job.get("package_snapshot"):
        raise UsageError(f"submit -from {origin}: package_snapshot: job {origin} has no "
                         "package snapshot (it was submitted before snapshots were kept), so "
                         "it cannot be re-run byte for byte; give -package PATH to run a "
                         "package as it is now")
    given = _submission(args)
    after = {**before, **given, "rerun_of": origin}
    if args.package:
        after["package"] = args.package
    if args.env:
        after["env"] = {**before.get("env", {}), **_env(args.env)}
    after["name"] = given.get("name") or _free_name(ctx, origin)
    before["name"] = origin

    plan = ctx.client.job_submit({**after, "dry_run": True})  # the snapshot checked first
    digest = (plan.get("job") or {}).get("package_digest") or ""
    changes = spec_changes(before, after)
    if digest != (job.get("package_digest") or ""):
        at = next((i for i, row in enumerate(changes) if row[0] == "package"), len(changes))
        changes.insert(at + 1, ("package_digest", job.get("package_digest") or "-", digest))
    out = ctx.stdout
    out.write(f"job {after['name']}: a re-run of {origin}"
              + (", changed:\n" if len(changes) > 1 else ", the same spec.\n"))
    if len(changes) > 1:  # the name always changes
        out.write(tabulate([["FIELD", origin.upper(), after["name"].upper()],
                            *(list(row) for row in changes if row[0] != "name")]))
    if after["package"] == job.get("package_snapshot"):
        out.write(f"package: {origin}'s snapshot, {digest} (byte for byte)\n")
    if after.get("image") and after["image"] == before.get("image") and job.get("image_digest"):
        out.write(f"image: the one {origin} ran, {after['image']}\n")
    _show_plan(ctx, plan, None)
    if args.dry_run:
        return None
    if not args.yes:
        out.write("Submit it? [y/N] ")
        out.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            ctx.info("nothing submitted")
            return 1
    created = ctx.client.job_submit(after)
    out.write(f"job {created['name']} submitted: {created['state']} (a re-run of {origin})\n")
    return None
