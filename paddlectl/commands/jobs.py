"""The job commands of the seeds: ``submit``, ``get``, ``logs``, ``kill`` and ``delete``; and
``metrics``, what a job's trainers reported with ``paddlecloud_sdk.report``.

Every value of ``submit`` goes to the server as typed, so mistakes are reported by the server,
all at once and each under its field. A local package directory is first checked with a dry
run (your home standing in for the package), then uploaded to
``/pfs/{dc}/home/{user}/jobs/{name}/{dirname}``, then the job is submitted.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import threading
import time
from pathlib import Path

from paddlecloud_client import pfspath
from paddlecloud_client.errors import ApiError, PaddlectlError, UsageError
from paddlecloud_client.jobs import (
    job_probe,
    name_problem,
    package_path,
    package_upload,
    topology_problem,
)
from paddlecloud_client.placement import datacenter_choose
from paddlecloud_core.layout import output_path
from paddlecloud_core.placement import AUTO, spec_in
from paddlecloud_core.spec import FIELDS
from paddlecloud_core.status import FINAL_STATES
from paddlectl.args import flag
from paddlectl.commands.registry import registry_delete, registry_get
from paddlectl.commands.sweeps import sweep_row, sweeps_get
from paddlectl.output import (
    AUDIT_COLUMNS,
    BUDGET_COLUMNS,
    CHECKPOINT_COLUMNS,
    JOB_COLUMNS,
    PLAN_COLUMNS,
    QUOTA_COLUMNS,
    TASK_COLUMNS,
    TASK_PASS_COLUMNS,
    USAGE_COLUMNS,
    WORKER_COLUMNS,
    Column,
    format_metric,
    predicted_start,
)

KILL_WAIT = 60.0  # seconds kill -rm waits for the job to end
POLL = 0.25

# -- helpers ----------------------------------------------------------------------------------

def _command(ctx, text: str) -> str:
    """A paddlectl command line to suggest, in the datacenter this one used."""
    chosen = getattr(ctx.options, "datacenter", None)
    return f"paddlectl {'--datacenter ' + chosen + ' ' if chosen else ''}{text}"


def _machine_output(ctx) -> bool:
    return ctx.output_format() in ("json", "yaml")


# -- submit -----------------------------------------------------------------------------------

SUBMIT_HELP = """\
PACKAGE is the trainer package: a directory in PFS (/pfs/{dc}/home/{user}/... or
/pfs/{dc}/public/...), copied into /pfs/{dc}/home/{user}/jobs/NAME/package as the job is
submitted, or a local directory, which is uploaded to /pfs/{dc}/home/{user}/jobs/NAME/DIRNAME
first (replacing an earlier upload there). The job runs that snapshot of it, whose digest it
records (package_digest). Values are checked by the server, which names every mistake at
once."""


def setup_submit(parser) -> None:
    parser.epilog = SUBMIT_HELP
    for field in FIELDS:  # a flag for each field a user sets (paddlecloud_core.spec)
        if field.flag:
            extra, said = {}, field.help
            if field.type == "env":  # -e KEY=VALUE, once a variable
                extra = {"action": "append", "default": []}
                said += " (repeatable); KEY alone takes its value from here"
            elif field.repeated:
                extra = {"action": "append"}
                said += " (repeatable)"
            flag(parser, *field.flag, dest=field.name, metavar=field.metavar, help=said, **extra)
    flag(parser, "dry-run", dest="dry_run", action="store_true",
         help="check everything and show what would be started; start nothing, upload "
              "nothing (-o yaml: the whole job)")
    flag(parser, "template", metavar="TEMPLATE",
         help="start from this template (see `paddlectl templates`): its values fill in "
              "what you do not give")
    flag(parser, "y", "yes", action="store_true",
         help="with -from: submit without asking (after showing what changes)")
    flag(parser, "package", dest="package_flag", metavar="PATH",
         help="the trainer package, as PACKAGE; with -from: run this package as it is now "
              "instead of the job's snapshot")
    parser.add_argument("package", metavar="PACKAGE", nargs="?",
                        help="the trainer package: a /pfs/... directory or a local one "
                             "(with -from: the job's snapshot, unless given)")


def _env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            if key not in os.environ:
                raise UsageError(f"submit: -e {pair}: use KEY=VALUE (or KEY for a variable "
                                 "set here)")
            value = os.environ[key]
        env[key] = value
    return env


def _submission(args) -> dict:
    body: dict = {}
    for field in FIELDS:
        value = getattr(args, field.name, None)
        if not field.flag or value is None or field.type == "env":
            continue
        if field.repeated:
            value = ",".join(value)
        whole = field.type in ("integer", "trainers")
        body[field.name] = int(value) if whole and value.strip().isdigit() else value
    if args.env:
        body["env"] = _env(args.env)
    return body


def local_package(command: str, package: str) -> Path:
    """A PACKAGE argument that is not a /pfs path: a directory here, else a usage error."""
    local = Path(package)
    if not local.is_dir():
        what = "does not exist" if not os.path.lexists(local) else "is not a directory"
        raise UsageError(f"{command}: {package} {what}: the package is a directory here or "
                         "in PFS (/pfs/...)")
    return local


def _upload(ctx, local: Path, remote: str) -> None:
    if not _machine_output(ctx):
        ctx.info(f"uploading {local} to {remote}")
    with ctx.progress(f"{local.resolve().name or local}/") as progress:
        package_upload(ctx.client, local, remote, progress, ctx.warn)


def _show_plan(ctx, plan: dict, upload: tuple[Path, str] | None) -> None:
    if ctx.output_format() == "yaml" and plan.get("yaml"):
        # The Kubernetes objects alone, as the portal writes them for `kubectl apply -f`.
        ctx.stdout.write(plan["yaml"])
        return
    if _machine_output(ctx):
        ctx.emit(plan)
        return
    job, replicas = plan.get("job") or {}, plan.get("replicas")
    out = ctx.stdout
    out.write(f"dry run: nothing was created. Job {job.get('name')} would run "
              f"{job.get('entry')!r} in {job.get('package')}")
    if replicas:
        out.write(f" on {len(replicas)} replica{'s' if len(replicas) > 1 else ''}:\n")
    else:
        out.write(".\n")
    if upload is not None:
        out.write(f"The local package {upload[0]} would be uploaded there first "
                  "(dry run: not uploaded).\n")
    if replicas:
        ctx.emit(plan, replicas, PLAN_COLUMNS)
    else:
        out.write("The server could not check it without the package; this is what would be "
                  "sent:\n")
        ctx.emit(plan, [job], [c for c in PLAN_COLUMNS if c.header != "role"])
    if admission := plan.get("admission"):
        if admission["starts"] == "now":
            out.write("It would start now.\n")
        else:
            out.write(f"It would queue at #{admission['position']} ({admission['reason']}); "
                      f"start predicted {predicted_start(admission['predicted_start'])}.\n")
            _show_sooner(out, admission.get("sooner"))
    if objects := plan.get("objects"):
        kinds = ", ".join(sorted({o.get("kind", "?") for o in objects}))
        ctx.info(f"{len(objects)} Kubernetes objects would be created ({kinds}): "
                 "see them with --dry-run -o yaml")


def _show_sooner(out, sooner: list | None) -> None:
    """What would start a waiting job sooner (the portal's search), one change a line."""
    if sooner:
        out.write("It would start sooner if submitted so changed:\n")
        for alternative in sooner:
            out.write(f"  {alternative['message']}\n")


def _place(ctx, args, body: dict) -> None:
    """``-datacenter auto``: the command goes on in the datacenter where the job would start
    first (paddlecloud_client.placement), the why printed and sent with it."""
    remote = args.package is None or pfspath.is_remote(args.package)  # None: the template's
    local = None if remote else local_package("submit", args.package)
    probe = body if local or args.package is None else {**body, "package": args.package}
    chosen, why = datacenter_choose(ctx.config, probe, local)
    body.update(spec_in(body, chosen.name))
    if local is None and args.package is not None:
        args.package = spec_in(probe, chosen.name)["package"]
    ctx.options.datacenter = chosen.name
    ctx.datacenter = chosen  # a cached property: the client is made anew for it
    ctx.__dict__.pop("client", None)
    body["placement"] = why
    if not _machine_output(ctx):
        ctx.info(why)


def run_submit(ctx, args) -> int | None:
    if args.package_flag is not None:
        if args.package is not None and args.package != args.package_flag:
            raise UsageError("submit: give the package once: as PACKAGE or with -package")
        args.package = args.package_flag
    if args.rerun_of:
        from paddlectl.commands.rerun import rerun

        return rerun(ctx, args)
    body = _submission(args)
    if args.template:
        body["template"] = args.template
    elif args.package is None:
        raise UsageError("submit: the following arguments are required: PACKAGE")
    if getattr(ctx.options, "datacenter", None) == AUTO:
        _place(ctx, args, body)
    upload = None  # without a PACKAGE: the template's
    if args.package is not None and pfspath.is_remote(args.package):
        body["package"] = args.package
    elif args.package is not None:
        local = local_package("submit", args.package)
        if (problem := name_problem(args.name)) is not None:
            raise UsageError(f"submit: jobname: {problem}")
        if args.topology and (problem := topology_problem(args.topology, local)):
            raise UsageError(f"submit: topology: {problem}")
        upload = (local, package_path(ctx.home, args.name, local))
        plan = job_probe(ctx.client, ctx.home, body)  # every other mistake before uploading
        body["package"] = upload[1]
        if args.dry_run:
            if plan is None:
                plan = {"dry_run": True, "job": dict(body), "replicas": None}
            else:
                plan["job"].update(package=upload[1], topology=body.get("topology", ""))
            plan["upload"] = {"from": str(local.resolve()), "to": upload[1]}
            _show_plan(ctx, plan, upload)
            return
        _upload(ctx, local, upload[1])

    if args.dry_run:
        _show_plan(ctx, ctx.client.job_submit({**body, "dry_run": True}), None)
        return
    job = ctx.client.job_submit(body)
    if _machine_output(ctx):
        ctx.emit(job)
        return
    state = job["state"]
    if job.get("queue_position"):  # over the quota's free part: it waits its turn
        state = f"queued #{job['queue_position']} ({job['state_reason']})"
    ctx.stdout.write(f"job {job['name']} submitted: {state}\n")
    if job.get("predicted_start"):
        ctx.info(f"start predicted {predicted_start(job['predicted_start'])}")
    ctx.info(f"follow its log:   {_command(ctx, 'logs ' + job['name'] + ' -f')}\n"
             f"see its workers:  {_command(ctx, 'get workers ' + job['name'])}")


# -- get --------------------------------------------------------------------------------------

RESOURCES = {"jobs": "jobs", "job": "jobs", "workers": "workers", "worker": "workers",
             "tasks": "tasks", "task": "tasks", "checkpoints": "checkpoints",
             "checkpoint": "checkpoints",
             "registry": "registry", "registries": "registry", "quota": "quota",
             "group": "group", "usage": "usage", "audit": "audit", "sweeps": "sweeps",
             "sweep": "sweeps"}


def setup_get(parser) -> None:
    parser.description = (
        "get jobs [NAME...]     your jobs in this datacenter, newest first (a sweep's\n"
        "                       trials folded into one row of the sweep)\n"
        "get workers JOB        the job's workers (parameter servers and trainers)\n"
        "get tasks JOB          what the job's master has handed out, pass by pass\n"
        "                       (-o wide: and each task of the current pass)\n"
        "get checkpoints JOB    the job's checkpoints, newest first, and the runs that\n"
        "                       resumed from each\n"
        "get registry           your registry credentials\n"
        "get quota              your quota in this datacenter: each resource's limit and use\n"
        "get group              your group: its members, its quota and use, and its\n"
        "                       members' jobs (to look at; each changes only their own)\n"
        "get usage              GPU-hours, CPU-hours, jobs and median wait, period by\n"
        "                       period (yours; your group's as its lead; all as an admin)\n"
        "get audit              the audit trail you may read, newest first\n"
        "get sweeps [NAME]      your sweeps and their progress (one name: and its trials)")
    parser.add_argument("resource", metavar="RESOURCE",
                        help="jobs, workers, tasks, checkpoints, registry, quota, group, usage, "
                             "audit or sweeps")
    parser.add_argument("names", nargs="*", metavar="NAME")
    flag(parser, "state", metavar="STATES",
         help="jobs only in these states, comma-separated (running,failed)")
    flag(parser, "since", metavar="DATE",
         help="usage and audit: from this date or time (2026-11-01, 2026-11-01T09:00Z)")
    flag(parser, "until", metavar="DATE", help="usage and audit: before this date or time")
    flag(parser, "by", choices=("day", "week", "month"), metavar="PERIOD",
         help="usage: a row per day (default), week or month")
    flag(parser, "per", choices=("user", "group", "datacenter"), metavar="WHO",
         help="usage: a row per user (default), group or the datacenter")
    flag(parser, "group", metavar="GROUP", help="usage: only this group's members")
    flag(parser, "user", metavar="USER", help="usage and audit: only this user's")
    flag(parser, "action", metavar="ACTIONS",
         help="audit: only these actions, comma-separated (job.kill,token.create)")


def _get_jobs(ctx, args) -> None:
    if args.names:
        jobs = [ctx.client.job_get(name) for name in args.names]
        data = jobs[0] if len(jobs) == 1 else jobs
    else:
        # a sweep's trials fold into one row of the sweep; scripts get every job
        data = jobs = ctx.client.job_list(args.state, folded=not _machine_output(ctx))
        jobs = [sweep_row(row) if row.get("kind") == "sweep" else row for row in jobs]
    if not jobs and not _machine_output(ctx):
        ctx.info(f"no jobs in datacenter {ctx.datacenter.name}")
        return
    ctx.emit(data, jobs, JOB_COLUMNS)
    if len(jobs) == 1 and not _machine_output(ctx):
        _show_sooner(ctx.stdout, jobs[0].get("sooner"))


def _get_workers(ctx, args) -> None:
    if len(args.names) != 1:
        raise UsageError("get workers: name one job: paddlectl get workers JOB")
    workers = ctx.client.job_workers(args.names[0])
    ctx.emit(workers, workers, WORKER_COLUMNS)


def _get_tasks(ctx, args) -> None:
    if len(args.names) != 1:
        raise UsageError("get tasks: name one job: paddlectl get tasks JOB")
    name = args.names[0]
    data = ctx.client.job_tasks(name)
    if _machine_output(ctx):
        ctx.emit(data)
        return
    passes = data.get("passes") or []
    if not passes:
        job = ctx.client.job_get(name)
        if not job.get("dataset"):
            ctx.info(f"job {name} has no dataset, so no master and no tasks (submit it with "
                     "-dataset GLOB)")
        else:
            ctx.info(f"job {name} has no tasks yet: its master cuts {job['dataset']} into "
                     "tasks when a trainer first asks for one")
        return
    current = data.get("current_pass")
    rows = [{**entry, "current": entry["pass"] == current} for entry in passes]
    made = {entry["pass"] for entry in passes}
    total = data.get("total_passes") or 0
    rows += [{"pass": number, "made": False} for number in range(total) if number not in made]
    ctx.emit(data, rows, TASK_PASS_COLUMNS)
    if ctx.output_format() == "wide" and data.get("tasks"):
        ctx.stdout.write("\n")
        ctx.emit(data, data["tasks"], TASK_COLUMNS)


def _get_checkpoints(ctx, args) -> None:
    if len(args.names) != 1:
        raise UsageError("get checkpoints: name one job: paddlectl get checkpoints JOB")
    name = args.names[0]
    data = ctx.client.job_checkpoints(name)
    if not data["checkpoints"] and not _machine_output(ctx):
        ctx.info(f"job {name} has no checkpoints in {data['directory']} (its trainers save "
                 "them with paddlecloud_sdk.checkpoint.save)")
        return
    ctx.emit(data, data["checkpoints"], CHECKPOINT_COLUMNS)


def _get_quota(ctx, args) -> None:
    quota, budgets = ctx.client.quota(), ctx.client.budgets()
    if _machine_output(ctx):
        ctx.emit({"datacenter": ctx.datacenter.name, "quota": quota, "budgets": budgets})
        return
    rows = [{"resource": resource, **entry} for resource, entry in quota.items()]
    ctx.emit(quota, rows, QUOTA_COLUMNS)
    rows = [{"budget": f"{b['whose']}: {resource.replace('_', '-')} {b['in_words']}",
             **b[resource]} for b in budgets for resource in ("gpu_hours", "cpu_hours")
            if b[resource]]
    if rows:
        ctx.stdout.write("\n")
        ctx.emit(budgets, rows, BUDGET_COLUMNS)


def _get_group(ctx, args) -> None:
    group = ctx.client.group()
    jobs = ctx.client.job_list(args.state, group=True)
    if _machine_output(ctx):
        ctx.emit({**group, "jobs": jobs})
        return
    members = ", ".join(m["username"] + (f" (weight {m['weight']})" if m["weight"] != 1 else "")
                        for m in group["members"])
    ctx.stdout.write(f"group {group['name']} (weight {group['weight']}): {members}\n")
    rows = [{"resource": resource, **entry, "limit": entry["limit"] or "no limit"}
            for resource, entry in group["quota"].items()]
    ctx.emit(group, rows, QUOTA_COLUMNS)
    if jobs:
        ctx.stdout.write("\n")
        ctx.emit(jobs, jobs, [Column("owner", "owner"), *JOB_COLUMNS])


def _get_usage(ctx, args) -> None:
    params = {"since": args.since, "until": args.until, "by": args.by, "per": args.per,
              "group": args.group, "user": args.user}
    if ctx.output_format() == "csv":
        ctx.stdout.write(ctx.client.usage(params, "csv"))
        return
    report = ctx.client.usage(params)
    if not report["rows"] and not _machine_output(ctx):
        ctx.info(f"no use in datacenter {ctx.datacenter.name} since {report['since'][:10]}")
        return
    ctx.emit(report, report["rows"], USAGE_COLUMNS)


def _get_audit(ctx, args) -> None:
    params = {"since": args.since, "until": args.until, "user": args.user,
              "action": args.action}
    if ctx.output_format() == "csv":
        ctx.stdout.write(ctx.client.audit(params, "csv"))
        return
    entries = ctx.client.audit(params)
    if not entries and not _machine_output(ctx):
        ctx.info("no audit entries")
        return
    ctx.emit(entries, entries, AUDIT_COLUMNS)


def run_get(ctx, args) -> None:
    resource = RESOURCES.get(args.resource)
    if resource is None:
        raise UsageError(f"get: unknown resource {args.resource!r}: use jobs, workers JOB, "
                         "tasks JOB, checkpoints JOB, registry, quota, group, usage, audit or "
                         "sweeps")
    if args.state and resource not in ("jobs", "group"):
        raise UsageError("get: -state is for get jobs and get group")
    if resource in ("quota", "group", "usage", "audit") and args.names:
        raise UsageError(f"get {resource} takes no names")
    for name, only in (("since", "usage audit"), ("until", "usage audit"), ("by", "usage"),
                       ("per", "usage"), ("group", "usage"), ("user", "usage audit"),
                       ("action", "audit")):
        if getattr(args, name) and resource not in only.split():
            raise UsageError(f"get: -{name} is for get {' and get '.join(only.split())}")
    {"jobs": _get_jobs, "workers": _get_workers, "tasks": _get_tasks,
     "checkpoints": _get_checkpoints, "quota": _get_quota, "group": _get_group,
     "usage": _get_usage, "audit": _get_audit,
     "sweeps": lambda ctx, args: sweeps_get(ctx, args.names),
     "registry": lambda ctx, args: registry_get(ctx, args.names)}[resource](ctx, args)


# -- logs -------------------------------------------------------------------------------------

def setup_logs(parser) -> None:
    parser.description = ("Print the logs of a job's workers, each line after its worker's "
                          "name (or one worker's log, as it is, with -w).")
    parser.add_argument("job", metavar="JOB")
    flag(parser, "w", "worker", metavar="WORKER",
         help="only this worker: trainer-0, pserver-1, ... (see `paddlectl get workers`), "
              "or build: the build of the job's runtime image")
    flag(parser, "f", "follow", action="store_true",
         help="keep printing what is written until the workers end")
    flag(parser, "tail", metavar="N", help="only the last N lines")


def run_logs(ctx, args) -> None:
    if args.worker:
        workers = [args.worker]
    elif ctx.client.job_get(args.job)["state"] == "building":  # its build's log
        workers = ["build"]
    else:
        workers = [worker["name"] for worker in ctx.client.job_workers(args.job)]
    if args.worker:  # one worker asked for: its log as it is
        _print_log(ctx, args, workers[0], prefix="")
        return
    # Each line after its worker's name (even a job's only worker, as help says); several
    # workers followed side by side.
    width = max(len(name) for name in workers)
    lock = threading.Lock()
    if not args.follow:
        for name in workers:
            _print_log(ctx, args, name, prefix=f"{name:<{width}} | ", lock=lock)
        return
    failures: list[BaseException] = []

    def follow(name: str) -> None:
        try:
            _print_log(ctx, args, name, prefix=f"{name:<{width}} | ", lock=lock)
        except BaseException as exc:  # reported once every worker is done
            failures.append(exc)

    threads = [threading.Thread(target=follow, args=(name,), daemon=True) for name in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():  # a timeout, so that Ctrl-C gets through
            thread.join(0.2)
    if failures:
        raise failures[0]


def _print_log(ctx, args, worker: str, *, prefix: str, lock=None) -> None:
    """One worker's log to stdout: as it is, or line by line after ``prefix``. Followed, it
    goes on after the portal restarts (``job_log_blocks``), from where it was."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    blocks = ctx.client.job_log_blocks(args.job, worker=worker, tail=args.tail,
                                       follow=args.follow)
    with contextlib.closing(blocks):
        for block in blocks:
            text = decoder.decode(block)
            if not prefix:
                ctx.stdout.write(text)
                ctx.stdout.flush()
                continue
            *lines, pending = (pending + text).split("\n")
            _write_lines(ctx, [f"{prefix}{line}\n" for line in lines], lock)
    rest = pending + decoder.decode(b"", final=True)
    if rest:
        _write_lines(ctx, [f"{prefix}{rest}\n" if prefix else rest], lock)


def _write_lines(ctx, lines: list[str], lock) -> None:
    if lines:
        with lock or contextlib.nullcontext():
            ctx.stdout.write("".join(lines))
            ctx.stdout.flush()


# -- metrics ----------------------------------------------------------------------------------

def setup_metrics(parser) -> None:
    parser.description = ("Print what a job's worker reported with\n"
                          "paddlecloud_sdk.report(step=..., **metrics): a row per report,\n"
                          "a column per metric (-o json|yaml: the records as they are).")
    parser.add_argument("job", metavar="JOB")
    flag(parser, "w", "worker", metavar="WORKER",
         help="the worker: trainer-0 (default), pserver-1, ... (see `paddlectl get workers`)")


def run_metrics(ctx, args) -> None:
    data = ctx.client.job_metrics(args.job, worker=args.worker)
    if _machine_output(ctx):
        ctx.emit(data)
        return
    if not data["records"]:
        ctx.info(f"{data['worker']} of job {args.job} has reported no metrics yet "
                 "(paddlecloud_sdk.report)")
        return
    columns = [Column("step", "step")] + [
        Column(name, lambda row, name=name: format_metric(row["metrics"].get(name)))
        for name in data["names"]]
    ctx.emit(data, data["records"], columns)


# -- kill, delete -----------------------------------------------------------------------------

def setup_kill(parser) -> None:
    parser.description = "kill JOB... or SWEEP...: a sweep's trials all stop at once"
    parser.add_argument("names", nargs="+", metavar="JOB")
    flag(parser, "rm", action="store_true",
         help="also remove the job from the history once it has ended (its output stays)")


def _wait_ended(ctx, name: str) -> dict:
    """The job once it and every worker of it have ended (a killed job's workers take a moment
    to stop); a PaddlectlError after ``KILL_WAIT`` seconds."""
    deadline = time.monotonic() + KILL_WAIT
    while True:
        job = ctx.client.job_get(name)
        running = [] if job["state"] not in FINAL_STATES else [
            worker["name"] for worker in ctx.client.job_workers(name)
            if worker["state"] not in FINAL_STATES]
        if job["state"] in FINAL_STATES and not running:
            return job
        if time.monotonic() > deadline:
            what = f"still {job['state']}" if not running else \
                f"{job['state']}, but {', '.join(running)} still stopping"
            raise PaddlectlError(f"job {name} is {what} after {KILL_WAIT:.0f} s; delete it "
                                 f"later: {_command(ctx, 'delete job ' + name)}")
        time.sleep(POLL)


def run_kill(ctx, args) -> None:
    for name in args.names:
        try:
            job = ctx.client.job_kill(name)
        except ApiError as exc:
            if exc.status == 404 and not args.rm and _sweep_killed(ctx, name):
                continue
            if not (args.rm and exc.status == 409 and exc.code == "job_ended"):
                raise
            job = None  # it has ended already: -rm only removes it
        if args.rm:
            job = _wait_ended(ctx, name)
            ctx.client.job_delete(name)
        if _machine_output(ctx):
            ctx.emit(job)
        elif args.rm:
            ctx.info(f"job {name} {job['state']} and removed from the history (its output "
                     f"stays in {output_path(ctx.home, name)})")
        else:
            ctx.info(f"job {name} killed: its workers are being stopped")


def _sweep_killed(ctx, name: str) -> bool:
    """Kill the sweep ``name`` (every trial of it) if there is one; False: none is."""
    try:
        sweep = ctx.client.sweep_kill(name)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    if _machine_output(ctx):
        ctx.emit(sweep)
    else:
        ctx.info(f"sweep {name} killed: its {len(sweep['trials'])} trials are being stopped, "
                 "no more are submitted")
    return True


def setup_delete(parser) -> None:
    parser.description = (
        "delete job JOB...        remove ended jobs from the history (their output stays)\n"
        "delete registry NAME...  remove registry credentials\n"
        "delete sweep NAME...     remove ended sweeps and their trials' jobs")
    parser.add_argument("resource", metavar="RESOURCE", help="job, registry or sweep")
    parser.add_argument("names", nargs="+", metavar="NAME")


def run_delete(ctx, args) -> None:
    resource = RESOURCES.get(args.resource)
    if resource == "registry":
        registry_delete(ctx, args.names)
        return
    if resource == "sweeps":
        for name in args.names:
            ctx.client.sweep_delete(name)
            ctx.info(f"sweep {name} deleted with its trials' jobs (their output stays)")
        return
    if resource != "jobs":
        raise UsageError(f"delete: unknown resource {args.resource!r}: use job, registry or "
                         "sweep")
    for name in args.names:
        ctx.client.job_delete(name)
        ctx.info(f"job {name} deleted (its output stays in {output_path(ctx.home, name)})")
