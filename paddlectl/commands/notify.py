"""``notify add | ls | rm ID... | test ID``: your notification subscriptions in the current
datacenter. A webhook's signing secret is printed once, as it is added."""

from __future__ import annotations

from paddlecloud_client.errors import UsageError
from paddlectl.args import flag
from paddlectl.output import Column

COLUMNS = [Column("id", "id"), Column("events", lambda r: ",".join(r["events"])),
           Column("channel", "channel"), Column("target", "target"),
           Column("format", "format", wide_only=True),
           Column("group", lambda r: r.get("group") or ""),
           Column("status", lambda r: "disabled" if r.get("disabled_at") else
                  "failing" if r.get("failing_since") else "ok"),
           Column("created", "created_at", "time", wide_only=True)]
USAGE = ("paddlectl notify add -events E[,E...] -channel C [-target T] [...] | ls | rm ID... "
         "| test ID")


def setup_notify(parser) -> None:
    parser.usage = USAGE
    parser.description += (
        "\n\n  add      subscribe: -events, -channel email|webhook|dashboard, -target (an"
        "\n           e-mail address, default yours; a webhook's https:// URL)"
        "\n  ls       list your subscriptions (-o wide, json, yaml)"
        "\n  rm ID    remove subscriptions"
        "\n  test ID  send a test notification"
        "\n\nEvents: job.started, job.succeeded, job.failed, job.killed, job.resumed (from a"
        "\ncheckpoint), job.waiting (with -wait-minutes), job.earlier (with"
        "\n-earlier-minutes), budget.warning, budget.spent"
        "\n(the portal's list: an unknown event's error names them all)."
        "\n\nA webhook's requests carry PaddleCloud-Signature: t=TIME,v1=HMAC-SHA256(secret,"
        "\n\"TIME.BODY\") and PaddleCloud-Notification-Id (the same at each retry: drop one"
        "\nyou have seen). Its secret is printed once, by add.")
    parser.add_argument("action", choices=("add", "ls", "rm", "test"), metavar="ACTION",
                        help="add, ls, rm or test")
    parser.add_argument("ids", nargs="*", metavar="ID", help="a subscription (rm, test)")
    flag(parser, "events", metavar="EVENTS", help="comma-separated events (add)")
    flag(parser, "channel", choices=("email", "webhook", "dashboard"), help="where to (add)")
    flag(parser, "target", metavar="TARGET", help="an e-mail address or a webhook's URL (add)")
    flag(parser, "format", choices=("json", "slack"),
         help="a webhook's payload: generic JSON or Slack/Mattermost (add)")
    flag(parser, "wait-minutes", type=int, metavar="N", help="job.waiting: after N minutes")
    flag(parser, "earlier-minutes", type=int, metavar="N",
         help="job.earlier: when a predicted start moves more than N minutes earlier")
    flag(parser, "group", metavar="GROUP", help="your group's jobs (its lead or an administrator)")


def run_notify(ctx, args) -> None:
    takes_ids = {"add": (0, 0), "ls": (0, 0), "rm": (1, None), "test": (1, 1)}[args.action]
    low, high = takes_ids
    if len(args.ids) < low or (high is not None and len(args.ids) > high):
        raise UsageError(f"usage: {USAGE}")
    client = ctx.client
    if args.action == "ls":
        found = client.notify_list()
        if ctx.output_format() in ("table", "wide") and not found:
            ctx.info(f"no subscriptions in datacenter {ctx.datacenter.name}")
            return
        ctx.emit(found, found, COLUMNS)
    elif args.action == "rm":
        for subscription in args.ids:
            client.notify_delete(subscription)
            ctx.info(f"subscription {subscription} removed")
    elif args.action == "test":
        sent = client.notify_test(args.ids[0])
        ctx.info(f"test notification {sent['id']} queued for subscription {args.ids[0]}")
    else:
        _add(ctx, args)


def _add(ctx, args) -> None:
    if not args.events or not args.channel:
        raise UsageError("notify add: -events and -channel required (see `paddlectl help "
                         "notify`)")
    fields = {"events": [e.strip() for e in args.events.split(",") if e.strip()],
              "channel": args.channel}
    for key in ("target", "format", "wait_minutes", "earlier_minutes", "group"):
        if getattr(args, key) is not None:
            fields[key] = getattr(args, key)
    added = ctx.client.notify_create(fields)
    if ctx.output_format() in ("json", "yaml"):
        ctx.emit(added)
        return
    where = added["target"] or "the dashboard"
    ctx.stdout.write(f"subscription {added['id']} added: {', '.join(added['events'])} to "
                     f"{where}\n")
    if added.get("secret"):
        ctx.stdout.write(f"signing secret (shown this once): {added['secret']}\n")
