"""Benchmark: the job history at scale. With 100 000 jobs in PostgreSQL, 10 000 of them one
user's (with their replicas and events), how fast the portal answers that user's job list,
a job, its workers, its events and the dashboard's jobs page.

    .venv/bin/python bench/history.py [--jobs 100000] [--mine 10000] [--users 90]
                                      [--requests 200] [--budget 60] [--deep-page 150]
                                      [--debug-off]
                                      [--pg postgres://postgres@127.0.0.1:5432]
                                      [--database paddlecloud_history_bench] [--port P] [--keep]

It creates a fresh PostgreSQL database and a role of the same name (``--database``, on
``--pg``; neither may exist), and sets the portal up as a user would (``manage.py migrate``,
``manage.py demo``) with DATABASE_URL pointing there, in a fresh temporary PADDLECLOUD_VAR_DIR.
A ``manage.py shell`` then fills the history with COPY (columns and defaults from the models):
``--users`` more users, ``--jobs`` jobs over two years, every ``jobs/mine``-th of them the demo
user's, each with 2 or 3 replicas and an event for every state change of the job and its
replicas; then VACUUM ANALYZE, as autovacuum would. It serves the portal with ``manage.py
runportal --no-worker`` (nothing here runs jobs) and, on one keep-alive connection, times
``--requests`` GETs of each figure (after 5 untimed ones; at most ``--budget`` seconds a
figure), each answer checked. Figures go
to standard output as a table and one JSON line; progress to standard error. The portal is
always stopped, the database and role dropped and the temporary directory removed, even on
Ctrl-C (unless --keep). Exit 1 if a request failed; a missed target only prints ``MISSED``.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:  # portal.py, submit.py, master.py, when not run as a script
    sys.path.insert(0, str(BENCH))
from master import Database  # noqa: E402
from portal import BenchError, Stopped, cell, free_port, handle_signals, log  # noqa: E402
from submit import DATACENTER, USERNAME, Client, DemoPortal, login, percentile  # noqa: E402

TARGET_P95_MS = 100.0  # issue 20: every figure
WARMUP = 5  # untimed requests of each figure
FILL_TIMEOUT = 1800.0  # the manage.py shell that fills the history
PAGE = 50  # the API's and the dashboard's page size (their defaults)
FILTER_STATE = "failed"
FILTER_NAME = "bert"  # a family of names: one job in ten
RARE_NAME = "77"  # in few names (the job numbers ...77...): the filter must find them anyway

# The fill, in the portal's own environment: the models give the columns and the defaults.
FILL_CODE = r"""
import random, time
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.db import connection
from django.test import Client
from django.utils import timezone
from accounts.models import Datacenter
from jobs.models import Job, JobEvent, Replica

began = time.monotonic()
rng = random.Random(20)
User = get_user_model()
dc = Datacenter.objects.get(name=P["datacenter"])
me = User.objects.get(username=P["user"])
unusable = make_password(None)
others = [u.pk for u in User.objects.bulk_create(
    [User(username=f"history{i:03d}", password=unusable) for i in range(P["users"])])]
FAMILIES = ["fit-a-line", "resnet50", "bert-base", "word2vec", "ctr-dnn", "mnist-cnn",
            "seq2seq", "wide-deep", "vgg16", "lstm-lm"]
ENDED = (["succeeded"] * 14 + ["failed"] * 3 + ["killed"] * 2 + ["failed"])
ACTIVE = ["running"] * 4 + ["queued"] * 3 + ["pending", "starting"]
total, mine = P["jobs"], P["mine"]
now = timezone.now()
start, step = now - timedelta(days=730), timedelta(days=730) / total

def next_id(model):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(max(id), 0) FROM {model._meta.db_table}")
        return cursor.fetchone()[0] + 1

def copy(model, rows):
    fields = model._meta.concrete_fields
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    count = 0
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {model._meta.db_table} ({columns}) FROM STDIN") as out:
            for row in rows:
                out.write_row([f.get_db_prep_save(row[f.attname] if f.attname in row else
                                                  (now if getattr(f, "auto_now", False)
                                                   else f.get_default()), connection)
                               for f in fields])
                count += 1
        cursor.execute(f"SELECT setval(pg_get_serial_sequence('{model._meta.db_table}', "
                       f"'id'), (SELECT max(id) FROM {model._meta.db_table}))")
    return count

# One line per job: (id, owner, name, state, created, pservers); mine are every total/mine-th.
plan, first = [], next_id(Job)
for i in range(total):
    owner = me.pk if (i + 1) * mine // total > i * mine // total else rng.choice(others)
    state = rng.choice(ACTIVE if i >= total - total // 100 else ENDED)
    created = start + step * i + step * rng.random() / 2
    plan.append((first + i, owner, f"{rng.choice(FAMILIES)}-{i:06d}", state, created,
                 rng.randrange(2)))

def times(created, state):
    started = created + timedelta(seconds=30) if state not in ("pending", "queued") else None
    finished = created + timedelta(minutes=20) if state in ("succeeded", "failed", "killed") \
        else None
    return started, finished

def jobs():
    for pk, owner, name, state, created, pservers in plan:
        started, finished = times(created, state)
        yield {"id": pk, "owner_id": owner, "datacenter_id": dc.pk, "name": name,
               "state": state, "package": f"/pfs/{dc.name}/home/u/{name.rsplit('-', 1)[0]}",
               "entry": "python train.py", "image": dc.image, "trainers": 2,
               "pservers": pservers, "passes": 5, "created_at": created,
               "started_at": started, "admitted_at": started, "finished_at": finished,
               "state_reason": "exit code 1" if state == "failed" else ""}

def replica_state(state):
    return {"pending": "pending", "queued": "pending", "starting": "starting",
            "running": "running", "succeeded": "succeeded", "failed": "failed",
            "killed": "killed"}[state]

first_replica = next_id(Replica)

def replicas():
    pk = first_replica
    for job, owner, name, state, created, pservers in plan:
        started, finished = times(created, state)
        for role, index in [("pserver", 0)] * pservers + [("trainer", 0), ("trainer", 1)]:
            yield {"id": pk, "job_id": job, "role": role, "index": index,
                   "state": replica_state(state), "started_at": started,
                   "finished_at": finished, "exit_code": {"succeeded": 0, "failed": 1}.get(
                       replica_state(state)), "host": "127.0.0.1",
                   "backend_ref": str(100000 + pk % 100000)}
            pk += 1

PATH = {"pending": [], "queued": ["queued"], "starting": ["queued", "starting"],
        "running": ["queued", "starting", "running"]}

first_event = next_id(JobEvent)  # (not while a COPY holds the connection)

def events():
    pk, replica = first_event, first_replica
    for job, owner, name, state, created, pservers in plan:
        steps = PATH.get(state, ["queued", "starting", "running", state])
        before, at = "pending", created
        for to in steps:
            at += timedelta(seconds=10)
            yield {"id": pk, "job_id": job, "replica_id": None, "time": at,
                   "from_state": before, "to_state": to, "reason": f"{before} -> {to}"}
            before, pk = to, pk + 1
        for _ in range(pservers + 2):
            if state not in ("pending", "queued"):
                yield {"id": pk, "job_id": job, "replica_id": replica, "time": at,
                       "from_state": "pending", "to_state": replica_state(state),
                       "reason": "the worker's state"}
                pk += 1
            replica += 1

counts = {"jobs": copy(Job, jobs()), "replicas": copy(Replica, replicas()),
          "events": copy(JobEvent, events())}
with connection.cursor() as cursor:
    for model in (User, Job, Replica, JobEvent):
        cursor.execute(f"VACUUM ANALYZE {model._meta.db_table}")
names = [name for pk, owner, name, state, created, pservers in plan if owner == me.pk]
client = Client()
client.force_login(me)
answer({**counts, "mine": len(names), "job": names[len(names) // 2],
        "session": client.cookies["sessionid"].value,
        "seconds": round(time.monotonic() - began, 1)})
"""


class HistoryPortal(DemoPortal):
    """The portal as a user runs it (migrate, demo, runportal --no-worker) on our database,
    with the history filled in before it serves."""

    serve_args = ("--no-worker",)

    def __init__(self, port: int, *, keep: bool, database_url: str, more_env: dict[str, str],
                 fill: dict):
        super().__init__(port, keep=keep, redis=False)
        self.database_url = database_url
        self.more_env = more_env
        self.fill = fill
        self.filled: dict = {}

    def extra_env(self) -> dict[str, str]:
        return {"DATABASE_URL": self.database_url, **self.more_env}

    def setup(self) -> None:
        super().setup()
        log(f"filling: {self.fill['jobs']} jobs, {self.fill['mine']} of them "
            f"{USERNAME}'s, {self.fill['users']} more users")
        self.filled = self.django(FILL_CODE, timeout=FILL_TIMEOUT, datacenter=DATACENTER,
                                  user=USERNAME, **self.fill)
        log(f"filled in {self.filled['seconds']} s: {self.filled['jobs']} jobs, "
            f"{self.filled['replicas']} replicas, {self.filled['events']} events")


@dataclass
class Figure:
    name: str
    path: str
    check: object = field(repr=False)  # answer -> None, or what is wrong with it
    latencies: list[float] = field(default_factory=list, repr=False)
    error: str | None = None
    cut: bool = False  # stopped by the time budget

    def p(self, q: float) -> float | None:
        return percentile(self.latencies, q) * 1000 if self.latencies else None

    def as_dict(self) -> dict:
        p50, p95 = self.p(50), self.p(95)
        return {"path": self.path, "p50_ms": None if p50 is None else round(p50, 1),
                "p95_ms": None if p95 is None else round(p95, 1),
                "p95_over_target": None if p95 is None else round(p95 / TARGET_P95_MS, 2),
                "requests": len(self.latencies), "cut": self.cut, "error": self.error}


def measure(client: Client, figure: Figure, requests: int, budget: float) -> None:
    """``requests`` timed GETs after WARMUP untimed ones, or as many as ``budget`` seconds
    allow (then the untimed ones count too, when there is nothing else)."""
    untimed: list[float] = []
    deadline = time.monotonic() + budget
    for i in range(WARMUP + requests):
        if time.monotonic() > deadline:
            figure.cut = True
            figure.latencies = figure.latencies or untimed
            return
        began = time.perf_counter()
        status, answer = client.request("GET", figure.path)
        spent = time.perf_counter() - began
        wrong = (f"answered {status}: {str(answer)[:300]}" if status != 200
                 else figure.check(answer))
        if wrong:
            figure.error = f"GET {figure.path} {wrong}"
            return
        (figure.latencies if i >= WARMUP else untimed).append(spent)


class Page(Client):
    """The dashboard with the demo user's session (pages are HTML: the answer is text)."""

    def __init__(self, base: str, session: str):
        super().__init__(base)
        self.session = session

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        return self.send(method, path, None, {"Cookie": f"sessionid={self.session}",
                                              "Accept": "text/html"}, limit=None)


def jobs_of(answer) -> list[dict]:
    return answer["results"] if isinstance(answer, dict) else []


def a_page(count: int = PAGE, **rule):
    """The check of a list page: ``count`` jobs (at least one when None), each matching
    ``rule`` (a field -> a test of its value)."""
    def check(answer) -> str | None:
        results = jobs_of(answer)
        if (count is None and not results) or (count is not None and len(results) != count):
            return f"listed {len(results)} jobs, not {count or 'some'}"
        for job in results:
            for name, test in rule.items():
                if not test(job[name]):
                    return f"listed job {job['name']} with {name} {job[name]!r}"
        return None
    return check


def deep_cursor(client: Client, page: int) -> str:
    """The path of the API's page ``page`` (from 1), following the cursor's next links."""
    path = f"/api/v1/jobs/?limit={PAGE}"
    for _ in range(page - 1):
        status, answer = client.request("GET", path)
        if status != 200 or not isinstance(answer, dict) or not answer.get("next"):
            raise BenchError(f"GET {path} answered {status} without a next page")
        parts = urlsplit(answer["next"])
        path = f"{parts.path}?{parts.query}"
    return path


def html_rows(expected: int, needle: str):
    def check(answer) -> str | None:
        text = answer if isinstance(answer, str) else ""
        found = text.count(needle)
        return None if found == expected else f"showed {found} rows, not {expected}"
    return check


def figures(api: Client, filled: dict, deep_page: int) -> list[Figure]:
    job = filled["job"]
    ended = {"succeeded", "failed", "killed"}
    return [
        Figure("list: first page", f"/api/v1/jobs/?limit={PAGE}", a_page()),
        Figure(f"list: state {FILTER_STATE} + name {FILTER_NAME!r}",
               f"/api/v1/jobs/?{urlencode({'state': FILTER_STATE, 'name': FILTER_NAME})}",
               a_page(None, state=lambda s: s == FILTER_STATE,
                      name=lambda n: FILTER_NAME in n)),
        Figure(f"list: state ended + name {RARE_NAME!r}",
               f"/api/v1/jobs/?{urlencode({'state': ','.join(sorted(ended)), 'name': RARE_NAME})}",
               a_page(None, state=lambda s: s in ended, name=lambda n: RARE_NAME in n)),
        Figure(f"list: page {deep_page}", deep_cursor(api, deep_page), a_page()),
        Figure("job detail", f"/api/v1/jobs/{job}/",
               lambda a: None if isinstance(a, dict) and a.get("name") == job else "wrong job"),
        Figure("job workers", f"/api/v1/jobs/{job}/workers",
               lambda a: None if isinstance(a, list) and len(a) in (2, 3) else "not 2-3"),
        Figure("job events", f"/api/v1/jobs/{job}/events",
               lambda a: None if isinstance(a, list) and a else "no events"),
    ]


def page_figures(deep_page: int) -> list[Figure]:
    row = 'class="job-name" data-field="link" href="/jobs/'  # one per job shown
    return [Figure("dashboard: jobs page", "/jobs/", html_rows(PAGE, row)),
            Figure(f"dashboard: jobs page {deep_page}", f"/jobs/?page={deep_page}",
                   html_rows(PAGE, row))]


def table(results: list[Figure]) -> str:
    lines = [f"{'figure':<40} {'p50 ms':>8} {'p95 ms':>8} {'target ms':>10} "
             f"{'p95/target':>11}  result"]
    for figure in results:
        p50, p95 = figure.p(50), figure.p(95)
        ratio = None if p95 is None else p95 / TARGET_P95_MS
        result = (f"error: {figure.error}" if figure.error else
                  "ok" if ratio is not None and ratio <= 1 else "MISSED")
        if figure.cut:
            result += f" (time budget: {len(figure.latencies)} requests)"
        lines.append(f"{figure.name:<40} {cell(p50):>8} {cell(p95):>8} "
                     f"{TARGET_P95_MS:>10.0f} {cell(ratio, 2):>11}  {result}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="How fast the portal answers one user's job history with 100 000 jobs "
                    "in PostgreSQL.")
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs in all (100000)")
    parser.add_argument("--mine", type=int, default=10_000,
                        help="of them the measured user's (10000)")
    parser.add_argument("--users", type=int, default=90, help="other users (90)")
    parser.add_argument("--requests", type=int, default=200,
                        help="timed requests per figure (200)")
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds per figure at most (60): a slow one stops there")
    parser.add_argument("--deep-page", type=int, default=150,
                        help="the deep page measured, of 50 jobs (150)")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432",
                        help="the PostgreSQL server (default postgres://postgres@127.0.0.1:5432)")
    parser.add_argument("--database", default="paddlecloud_history_bench",
                        help="the database (and role) created for the run and dropped after")
    parser.add_argument("--debug-off", action="store_true",
                        help="run the portal as docker-compose.yml and deploy/ do: DEBUG=0")
    parser.add_argument("--port", type=int, default=0, help="portal port (default: a free one)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory, the portal log and the database")
    args = parser.parse_args(argv)
    if not 0 < args.mine <= args.jobs:
        parser.error("--mine: from 1 to --jobs")
    if args.users < 1 or args.requests < 1:
        parser.error("--users and --requests: at least 1")
    if args.deep_page * PAGE > args.mine:
        parser.error(f"--deep-page: the user has {args.mine // PAGE} pages")
    more_env = ({"DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(50),
                 "SECURE_SSL_REDIRECT": "0"} if args.debug_off else {})

    handle_signals()
    began = time.monotonic()
    database = Database(args.pg, args.database, connection_limit=20)
    portal = HistoryPortal(args.port or free_port(), keep=args.keep, database_url=database.url,
                           more_env=more_env,
                           fill={"jobs": args.jobs, "mine": args.mine, "users": args.users})
    api = page = None
    results: list[Figure] = []
    code = 0
    try:
        database.create()
        portal.start()
        api = Client(portal.base, login(portal.base, portal.password))
        page = Page(portal.base, portal.filled["session"])
        for client, figure in ([(api, f) for f in figures(api, portal.filled, args.deep_page)]
                               + [(page, f) for f in page_figures(args.deep_page)]):
            log(f"{figure.name}: {args.requests} requests")
            measure(client, figure, args.requests, args.budget)
            results.append(figure)
            if figure.error:
                log(figure.error)
                code = 1
    except BenchError as exc:
        log(f"failed: {exc}")
        code = 1
    except (KeyboardInterrupt, Stopped):
        log("interrupted")
        code = 130
    finally:
        def first():
            for client in (api, page):
                if client is not None:
                    client.close()

        try:
            portal.shut_down(first)
        finally:
            database.close(args.keep)
    if results:
        print(json.dumps({"bench": "history", "jobs": args.jobs, "mine": args.mine,
                          "target_p95_ms": TARGET_P95_MS, "debug": not args.debug_off,
                          "figures": {f.name: f.as_dict() for f in results},
                          "ok": code == 0}), flush=True)
        print(table(results), flush=True)
        missed = sum(1 for f in results if f.p(95) is not None and f.p(95) > TARGET_P95_MS)
        print(f"target (issue 20): p95 <= {TARGET_P95_MS:.0f} ms each; p95/target <= 1 meets "
              f"it; {missed or 'none'} MISSED", flush=True)
    log(f"run time {time.monotonic() - began:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
