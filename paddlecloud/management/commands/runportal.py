"""Serve the portal: the ASGI app (HTTP + WebSockets) with the Celery worker and beat."""

import ipaddress
import logging
import signal

import uvicorn
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from accounts.models import Datacenter
from jobs.backends.local import LOCAL
from jobs.backends.local.backend import isolation_notice
from paddlecloud.front import FrontApp, NginxFront, nginx_binary
from paddlecloud.serving import server_config
from paddlecloud.worker import EmbeddedWorker

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = ("Serve PaddleCloud: the web app, API and WebSockets, plus (unless --no-worker) a "
            "Celery worker and the periodic reconciler in the same process.")

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-worker", action="store_true",
                            help="serve only; Celery worker and beat run elsewhere")
        parser.add_argument("--concurrency", type=int, default=2,
                            help="threads of the embedded worker")
        parser.add_argument("--quiet", action="store_true",
                            help="no 'serving on' line (./dev up says it once its example "
                                 "has run)")
        parser.add_argument("--no-access-log", action="store_true",
                            help="no line per request (./dev up: the example's output reads "
                                 "on its own)")
        parser.add_argument("--front", choices=["auto", "on", "off"],
                            default=settings.PADDLECLOUD_FRONT,
                            help="nginx in front (paddlecloud.front): auto (the default, "
                                 "PADDLECLOUD_FRONT) runs it when nginx is installed")
        parser.add_argument("--front-socket", metavar="PATH",
                            help="serve on this Unix socket behind an nginx run elsewhere "
                                 "(deploy/: the sidecar), instead of --host/--port")
        parser.add_argument("--skip-collectstatic", action="store_true",
                            help="the static files were collected already (the image does "
                                 "it when it is built)")

    def handle(self, *args, host, port, no_worker, concurrency, skip_collectstatic, quiet,
               no_access_log, front, front_socket, **options):
        if settings.DEBUG and not _loopback(host):
            raise CommandError(
                f"DEBUG is on, and its error pages show code and settings to anyone who can "
                f"reach {host}:{port}: serve on 127.0.0.1, or set DEBUG=0 with SECRET_KEY, "
                f"PADDLECLOUD_CREDENTIAL_KEYS and ALLOWED_HOSTS (docs/admin/configuration.md)")
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError("the database has unapplied migrations: run "
                               "`paddlecloud migrate` (or ./manage.py migrate) first")
        if not settings.DEBUG and not skip_collectstatic:
            call_command("collectstatic", interactive=False, verbosity=0)
        if not no_worker and Datacenter.objects.filter(backend=LOCAL.name).exists():
            self.stdout.write(isolation_notice()[1])  # what local jobs can reach
        connection.close()  # the server and worker threads open their own
        nginx = portal_socket = None
        if front_socket is None and front != "off":
            if nginx_binary() is not None:
                nginx = NginxFront(host=host, port=port, pfs_root=settings.PADDLECLOUD_PFS_ROOT,
                                   var_dir=settings.VAR_DIR)
                try:
                    portal_socket = nginx.listen()
                    nginx.start()  # before the worker: nothing to stop if it cannot start
                except (OSError, RuntimeError) as exc:
                    if portal_socket is not None:
                        portal_socket.close()
                        portal_socket = None
                    nginx.stop()
                    if front == "on":
                        raise CommandError(f"--front on (PADDLECLOUD_FRONT=on): {exc}") from None
                    logger.warning("serving without nginx in front: %s", exc)
                    nginx = None
            elif front == "on":
                raise CommandError("--front on (PADDLECLOUD_FRONT=on): nginx is not installed "
                                   "(Debian: apt-get install nginx-light), or set it to auto")

        worker = None
        if not no_worker:
            if settings.CELERY_BROKER_URL.startswith("memory://"):
                self.stdout.write("Embedded worker: tasks stay in this process (no REDIS_URL)")
            worker = EmbeddedWorker(concurrency=concurrency)
            try:
                worker.start()
            except BaseException:
                if nginx is not None:
                    nginx.stop()
                    portal_socket.close()
                raise
        if not quiet:
            self.stdout.write(f"PaddleCloud is serving on http://{host}:{port}/ "
                              "(Ctrl-C stops it)")
            self.stdout.flush()
        app, listen = "paddlecloud.asgi:application", {"host": host, "port": port}
        if nginx is not None or front_socket is not None:
            from paddlecloud.asgi import application

            app = FrontApp(application, pfs_root=settings.PADDLECLOUD_PFS_ROOT)
            listen = {"fd": portal_socket.fileno()} if nginx else {"uds": front_socket}
        config = server_config(
            app, **listen, lifespan="on",
            log_level=settings.LOGGING["root"]["level"].lower(), access_log=not no_access_log,
            ws_per_message_deflate=settings.PADDLECLOUD_WS_DEFLATE,
        )
        # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the
        # handler that was there before it; ours just lets run() return, so the worker is
        # stopped too and Ctrl-C or `docker stop` exits 0.
        received: list[int] = []
        previous = {sig: signal.signal(sig, lambda sig, frame: received.append(sig))
                    for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            uvicorn.Server(config).run()
        finally:
            if nginx is not None:
                nginx.stop()
                portal_socket.close()
            if worker is not None:
                worker.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.stdout.write("PaddleCloud stopped")


def _loopback(host: str) -> bool:
    """Whether only this machine can reach an address (127.0.0.1, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
