"""``paddlectl notebook start|ls|stop|keep``: JupyterLab as a job of yours (the portal's
sessions: ``interactive.sessions``). It waits for your quota as any job, runs in your home with
``PADDLE_NOTEBOOK=YES`` (``PaddleJob(…).submit()`` and ``dist_train`` submit from it), is
opened from the dashboard (through the portal's login: its server's token is never shown), and
is stopped once its kernels are idle for its ``-idle`` time unless kept."""

from __future__ import annotations

from paddlecloud_client.errors import UsageError
from paddlectl.args import flag
from paddlectl.output import Column

ACTIONS = ("start", "ls", "stop", "keep")
USAGE = ("paddlectl notebook start [-gpu N] [-cpu CPU] [-memory SIZE] [-image IMAGE] "
         "[-idle 1h] [-name NAME] | ls [-a] | stop NAME... | keep NAME [--off]")


def _idle(row: dict) -> str:
    if row["kept"]:
        return "kept"
    return row["idle"] + (f" (stops {row['idle_stop_at']})" if row.get("idle_stop_at") else "")


COLUMNS = [
    Column("name", "name"), Column("state", "state"), Column("cpu", "cpu"),
    Column("memory", "memory"), Column("gpu", "gpu"), Column("idle", _idle),
    Column("age", "created_at", "age"), Column("image", "image", wide_only=True),
    Column("reason", "state_reason", wide_only=True),
]


def setup_notebook(parser) -> None:
    parser.usage = USAGE
    parser.description += (
        "\n\n  start   a JupyterLab of yours, as a job: its resources as a job's (default 1 CPU,"
        "\n          1Gi, no GPU), stopped once its kernels are idle for -idle (default 1h);"
        "\n          opened from the dashboard's Notebooks page"
        "\n  ls      your notebooks that have not ended (-a: all still in the history)"
        "\n  stop    stop notebooks (their jobs are killed; what they wrote stays in your home)"
        "\n  keep    never stop NAME when idle (--off: its idle limit applies again)")
    parser.add_argument("action", choices=ACTIONS, metavar="ACTION", help=", ".join(ACTIONS))
    parser.add_argument("names", nargs="*", metavar="NAME")
    flag(parser, "gpu", metavar="N", type=int, help="GPUs (default 0)")
    flag(parser, "cpu", metavar="CPU", help="CPU: 1, 0.5 or 500m (default 1)")
    flag(parser, "memory", metavar="SIZE", help="memory: 1Gi, 512Mi (default 1Gi)")
    flag(parser, "image", metavar="IMAGE",
         help="its image (default: the datacenter's; on Kubernetes one with JupyterLab)")
    flag(parser, "idle", metavar="TIME",
         help="stop it once its kernels are idle this long: 90s, 30m, 1h (default 1h)")
    flag(parser, "name", metavar="NAME", help="its job's name (default notebook-xxxxx)")
    flag(parser, "a", "all", dest="all", action="store_true",
         help="ls: also the notebooks that have ended")
    flag(parser, "off", action="store_true", help="keep: let its idle limit apply again")


def _open_url(ctx, name: str) -> str:
    return f"{ctx.datacenter.endpoint}/notebooks/{name}/open"


def run_notebook(ctx, args) -> None:
    names = args.names
    if args.action == "start":
        if names:
            raise UsageError(f"notebook start takes no NAME (give -name NAME); usage: {USAGE}")
        body = {"kind": "notebook", **{key: value for key in ("gpu", "cpu", "memory", "image",
                                                              "idle", "name")
                                       if (value := getattr(args, key)) is not None}}
        session = ctx.client.session_start(body)
        if ctx.output_format() in ("json", "yaml"):
            ctx.emit(session)
            return
        ctx.info(f"notebook {session['name']} {session['state']}: open it at "
                 f"{_open_url(ctx, session['name'])} once it runs (paddlectl notebook ls); "
                 f"stopped once idle for {session['idle']}")
    elif args.action == "ls":
        if names:
            raise UsageError(f"notebook ls takes no NAME; usage: {USAGE}")
        found = ctx.client.session_list(kind="notebook", ended=args.all)
        if not found and ctx.output_format() not in ("json", "yaml"):
            ctx.info(f"no notebooks in datacenter {ctx.datacenter.name}")
            return
        ctx.emit(found, found, COLUMNS)
    elif args.action == "stop":
        if not names:
            raise UsageError(f"notebook stop needs a NAME; usage: {USAGE}")
        for name in names:
            session = ctx.client.session_stop(name)
            ctx.info(f"notebook {name} stopped")
            if ctx.output_format() in ("json", "yaml"):
                ctx.emit(session)
    else:
        if len(names) != 1:
            raise UsageError(f"notebook keep needs one NAME; usage: {USAGE}")
        session = ctx.client.session_keep(names[0], not args.off)
        if ctx.output_format() in ("json", "yaml"):
            ctx.emit(session)
        elif args.off:
            ctx.info(f"notebook {names[0]} is stopped once idle for {session['idle']}")
        else:
            ctx.info(f"notebook {names[0]} kept: never stopped when idle "
                     f"(paddlectl notebook keep {names[0]} --off undoes it)")
