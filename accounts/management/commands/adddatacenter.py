"""Create a datacenter, or update the settings given (running it again is safe)."""

from django.core.management.base import BaseCommand

from accounts.execution import backend_kinds, backend_settings_fields
from accounts.models import Datacenter
from accounts.services import datacenter_upsert
from jobs.backends import backend_for
from jobs.backends.base import BackendError
from kernel.errors import ValidationError
from paddlecloud_core.quantity import parse_bytes, parse_cpu, parse_seconds

from ._errors import quantity_argument, user_errors


class Command(BaseCommand):
    help = "Create or update a datacenter. Options not given keep their current value."

    def add_arguments(self, parser):
        parser.add_argument("name", help="datacenter name, as in ~/.paddle/config")
        parser.add_argument("--description")
        parser.add_argument("--backend", choices=[kind.name for kind in backend_kinds()],
                            help="execution backend (default: PADDLECLOUD_BACKEND)")
        parser.add_argument("--pfs-root", help="directory holding home/ and public/")
        parser.add_argument("--public-dir", help="read-only public dataset directory")
        parser.add_argument("--pfs-storage", choices=[c.value for c in Datacenter.PfsStorage],
                            help="where the file service keeps files (default posix)")
        parser.add_argument("--s3-bucket", help="bucket of an S3 PFS")
        parser.add_argument("--s3-endpoint", dest="s3_endpoint_url",
                            help="endpoint of an S3-compatible store (default: AWS)")
        parser.add_argument("--s3-region", help="region of the bucket")
        parser.add_argument("--default-image", help="image for jobs that name none")
        parser.add_argument("--gpu-image", help="image for GPU jobs that name none (default: "
                                                "PADDLECLOUD_DEFAULT_GPU_IMAGE, the CUDA "
                                                "build of the default image's Paddle)")
        parser.add_argument("--namespace-prefix", help="prefix of users' namespaces")
        for kind in backend_kinds():  # the settings each backend owns
            if kind.arguments is not None:
                kind.arguments(parser)
        parser.add_argument("--start-timeout", type=int, metavar="SECONDS",
                            help="requeue a job whose replicas do not all run by then "
                                 "(0: never; default 300)")
        parser.add_argument("--start-tries", type=int, metavar="N",
                            help="fail a job after N starts that timed out (default 3)")
        parser.add_argument("--build-registry", metavar="HOST[:PORT]/PATH",
                            help="where runtime images built from trainer packages are pushed "
                                 "(empty: no builds)")
        parser.add_argument("--build-registry-insecure", action="store_true", default=None,
                            help="the build registry speaks plain HTTP")
        parser.add_argument("--builder-image", metavar="IMAGE",
                            help="the rootless BuildKit image of builder Jobs (default: "
                                 "PADDLECLOUD_BUILDER_IMAGE)")
        parser.add_argument("--capacity-cpu", type=quantity_argument(parse_cpu),
                            help="CPU all jobs together may hold, shared fairly when contended: "
                                 "64, 500m (default: no limit but each user's quota)")
        parser.add_argument("--capacity-memory", type=quantity_argument(parse_bytes),
                            help="memory all jobs together may hold: 256Gi")
        parser.add_argument("--capacity-gpu", type=int, metavar="N",
                            help="GPUs all jobs together may hold")
        parser.add_argument("--capacity-from-cluster", action="store_true", default=None,
                            help="kubernetes backend: the capacity is what the cluster's ready, "
                                 "schedulable nodes offer, read again by the reconciler")
        parser.add_argument("--no-capacity-from-cluster", dest="capacity_from_cluster",
                            action="store_false")
        parser.add_argument("--preempt-after", type=quantity_argument(parse_seconds),
                            metavar="DURATION",
                            help="a job below its owner's fair share that waited this long "
                                 "(90s, 30m, 2h; at least 60s) may stop running jobs of users "
                                 "over theirs, the cheapest since their last checkpoint "
                                 "(0: never, the default)")

        parser.add_argument("--skip-cluster-check", action="store_true",
                            help="save it even if its cluster cannot be reached (or is too "
                                 "old) now")

    def handle(self, *args, name, skip_cluster_check, **options):
        fields = {
            "description": options["description"],
            "backend": options["backend"],
            "pfs_root": options["pfs_root"],
            "public_dir": options["public_dir"],
            "default_image": options["default_image"],
            "gpu_image": options["gpu_image"],
            "pfs_storage": options["pfs_storage"],
            "s3_bucket": options["s3_bucket"],
            "s3_endpoint_url": options["s3_endpoint_url"],
            "s3_region": options["s3_region"],
            "namespace_prefix": options["namespace_prefix"],
            "start_timeout": options["start_timeout"],
            "start_tries": options["start_tries"],
            "build_registry": options["build_registry"],
            "build_registry_insecure": options["build_registry_insecure"],
            "builder_image": options["builder_image"],
            "capacity_cpu": options["capacity_cpu"],
            "capacity_memory": options["capacity_memory"],
            "capacity_gpu": options["capacity_gpu"],
            "capacity_from_cluster": options["capacity_from_cluster"],
            "preempt_after": options["preempt_after"],
        }
        fields.update({name: options[name] for name in backend_settings_fields()
                       if name in options})
        found = []

        def cluster_check(datacenter):
            """Its backend can run jobs (its cluster answers, and is recent enough)."""
            try:
                found.append(backend_for(datacenter).datacenter_check(datacenter))
            except BackendError as exc:
                raise ValidationError(f"{exc} (--skip-cluster-check saves it anyway)",
                                      fields={"backend": [str(exc)]}) from None

        with user_errors():
            datacenter, created = datacenter_upsert(
                name, check=None if skip_cluster_check else cluster_check, **fields)
        verb = "Created" if created else "Updated"
        pfs = (f"PFS s3://{datacenter.s3_bucket}" if datacenter.pfs_storage == "s3"
               else f"PFS root {datacenter.pfs_root_path}")
        backend = ", ".join(filter(None, [f"backend {datacenter.backend}", *found]))
        self.stdout.write(f"{verb} datacenter {datacenter.name} ({backend}, {pfs})")

