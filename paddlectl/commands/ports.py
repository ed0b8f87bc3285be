"""``port-forward``: a local port carried to a port of a running job's replica, through the
portal (``paddlecloud_client.ports``); nothing of the cluster is needed on this machine."""

from __future__ import annotations

from paddlecloud_client.errors import ApiError, UsageError
from paddlecloud_client.ports import PortForward, Refusal
from paddlectl.args import flag


def setup_port_forward(parser) -> None:
    parser.description = (
        "Listen on 127.0.0.1:LOCAL (LOCAL: PORT when not given; 0: any free port) and carry "
        "each connection to PORT of a worker of a running job, through the portal, until "
        "Ctrl-C. Only the job's owner may; every forward is written to the audit log.")
    parser.add_argument("job", metavar="JOB")
    parser.add_argument("ports", metavar="[LOCAL:]PORT")
    flag(parser, "w", "worker", metavar="WORKER",
         help="the worker whose port it is: trainer-0 (the default), pserver-1, ... "
              "(see `paddlectl get workers`)")
    flag(parser, "address", metavar="ADDRESS", default="127.0.0.1",
         help="the local address to listen on (default: 127.0.0.1)")


def _port(text: str, what: str, low: int) -> int:
    if not text.isdigit() or not low <= int(text) <= 65535:
        raise UsageError(f"{what}: a port number from {low} to 65535, not {text!r} "
                         "(as in `paddlectl port-forward JOB 8080` or `… 9000:8080`)")
    return int(text)


def run_port_forward(ctx, args) -> int:
    local, _, remote = args.ports.rpartition(":")
    port = _port(remote, "PORT", 1)
    local_port = _port(local, "LOCAL", 0) if local else port
    job = ctx.client.job_get(args.job)  # 404 (exit 3) for a job the user has not
    if job["state"] != "running":
        raise UsageError(f"job {args.job!r} is {job['state']}, not running: only a running "
                         "job's ports can be forwarded")

    def said(refusal: Refusal) -> None:
        ctx.stderr.write(f"paddlectl: port-forward: {refusal.message}\n")
        ctx.stderr.flush()

    try:
        forward = PortForward(ctx.client, args.job, port, local_port=local_port,
                              worker=args.worker, host=args.address, on_error=said)
    except OSError as exc:
        raise UsageError(f"cannot listen on {args.address}:{local_port}: "
                         f"{exc.strerror or exc}") from None
    ctx.stdout.write(f"Forwarding from {args.address}:{forward.local_port} -> "
                     f"{args.job} {args.worker or 'trainer-0'}:{port}\n")
    ctx.stdout.flush()
    try:
        refusal = forward.serve()
    finally:
        forward.stop()
    if refusal is not None:
        return ApiError(404 if refusal.code == "not_found" else 409, refusal.code,
                        refusal.message).exit_code
    return 0
