"""Benchmark: what the environment cache (jobs/backends/local/envs.py) saves a job with
requirements.

    .venv/bin/python bench/envs.py [--requirements "numpy requests six"] [--repeat 3] [--keep]

It starts the embedded portal as bench/submit.py does (a fresh PADDLECLOUD_VAR_DIR: the uv
download cache and the environment cache start empty), puts two trainer packages in the demo
user's PFS home — one without ``requirements.txt``, one with — and times, through the API, from
the submission to the job being ``running``:

- ``none``: a job without requirements (the floor), ``--repeat`` times;
- ``first``: the first job with the requirements: the full install (download and install);
- ``second``: a job with the same requirements afterwards: the environment is found,
  ``--repeat`` times.

Target: ``second`` within 1 s of ``none`` (medians). One job at a time; each is killed once
running, and deleted. Figures go to standard output (a table and one JSON line); progress to
standard error. Exits 1 if a job failed or the target is missed. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
from portal import BenchError, Stopped, free_port, handle_signals, log  # noqa: E402
from submit import DATACENTER, USERNAME, Client, DemoPortal, login  # noqa: E402

ENTRY = "python -c 'import time; time.sleep(30)'"
TARGET_S = 1.0
POLL = 0.02
HOME = f"/pfs/{DATACENTER}/home/{USERNAME}"


def make_packages(var: Path, requirements: str) -> None:
    home = var / "pfs" / DATACENTER / "home" / USERNAME
    for name, reqs in (("plain", None), ("reqs", requirements)):
        package = home / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "README").write_text("A trainer package for bench/envs.py.\n")
        if reqs:
            (package / "requirements.txt").write_text("\n".join(reqs.split()) + "\n")


def to_running(client: Client, name: str, package: str, timeout: float) -> float:
    """Seconds from the submission until the job is running; the job is then killed and
    deleted."""
    body = {"name": name, "package": f"{HOME}/{package}", "entry": ENTRY, "trainers": 1}
    start = time.perf_counter()
    status, answer = client.request("POST", "/api/v1/jobs/", body)
    if status != 201:
        raise BenchError(f"submitting {name} answered {status}: {answer}")
    deadline = time.monotonic() + timeout
    while True:
        status, job = client.request("GET", f"/api/v1/jobs/{name}/")
        if status != 200 or not isinstance(job, dict):
            raise BenchError(f"GET {name} answered {status}: {job}")
        if job["state"] == "running":
            took = time.perf_counter() - start
            break
        if job["state"] in ("failed", "killed", "succeeded"):
            raise BenchError(f"{name} {job['state']}: {job['state_reason']}")
        if time.monotonic() > deadline:
            raise BenchError(f"{name} not running after {timeout:.0f} s: {job['state']}")
        time.sleep(POLL)
    client.request("POST", f"/api/v1/jobs/{name}/kill")
    while True:
        status, job = client.request("GET", f"/api/v1/jobs/{name}/")
        if status != 200 or job["state"] in ("failed", "killed", "succeeded"):
            break
        if time.monotonic() > deadline:
            raise BenchError(f"{name} not ended after {timeout:.0f} s")
        time.sleep(0.1)
    client.request("DELETE", f"/api/v1/jobs/{name}/")
    log(f"  {name}: running after {took:.2f} s")
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requirements", default="numpy requests six",
                        help="the requirements, separated by spaces (default: numpy requests "
                             "six)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of none and second")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)

    handle_signals()
    portal = DemoPortal(args.port or free_port(), keep=args.keep, redis=False)
    code = 0
    client = None
    try:
        portal.start()
        make_packages(portal.var, args.requirements)
        client = Client(portal.base, login(portal.base, portal.password))
        none = [to_running(client, f"none-{i}", "plain", args.timeout)
                for i in range(args.repeat)]
        first = to_running(client, "first", "reqs", args.timeout)
        second = [to_running(client, f"second-{i}", "reqs", args.timeout)
                  for i in range(args.repeat)]
        none_s, second_s = statistics.median(none), statistics.median(second)
        extra = second_s - none_s
        ok = extra < TARGET_S
        print(json.dumps({"bench": "envs", "requirements": args.requirements,
                          "none_s": round(none_s, 2), "first_s": round(first, 2),
                          "second_s": round(second_s, 2), "second_extra_s": round(extra, 2),
                          "target_extra_s": TARGET_S, "ok": ok}), flush=True)
        print(f"{'job':<28}  {'to running s':>12}  {'vs none':>8}")
        print(f"{'none (no requirements)':<28}  {none_s:>12.2f}  {'':>8}")
        print(f"{'first (full install)':<28}  {first:>12.2f}  {first - none_s:>+8.2f}")
        print(f"{'second (environment found)':<28}  {second_s:>12.2f}  {extra:>+8.2f}")
        print(f"target: second within {TARGET_S:.1f} s of none: "
              f"{'ok' if ok else 'MISSED'} ({extra:+.2f} s; the first took "
              f"{first / second_s:.1f}x the second)")
        code = 0 if ok else 1
    except BenchError as exc:
        log(f"failed: {exc}; portal log:\n{portal.log_tail()}")
        code = 1
    except (KeyboardInterrupt, Stopped):
        log("interrupted")
        code = 130
    finally:
        if client is not None:
            client.close()
        portal.shut_down()
    return code


if __name__ == "__main__":
    sys.exit(main())
