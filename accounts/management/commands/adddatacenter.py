"""Create a datacenter, or update the settings given (running it again is safe)."""

from django.core.management.base import BaseCommand

from accounts.models import Datacenter
from accounts.services import datacenter_upsert

from ._errors import user_errors


class Command(BaseCommand):
    help = "Create or update a datacenter. Options not given keep their current value."

    def add_arguments(self, parser):
        parser.add_argument("name", help="datacenter name, as in ~/.paddle/config")
        parser.add_argument("--description")
        parser.add_argument("--backend", choices=[c.value for c in Datacenter.Backend],
                            help="execution backend (default: PADDLECLOUD_BACKEND)")
        parser.add_argument("--pfs-root", help="directory holding home/ and public/")
        parser.add_argument("--public-dir", help="read-only public dataset directory")
        parser.add_argument("--default-image", help="image for jobs that name none")
        parser.add_argument("--kubeconfig", help="kubeconfig path (kubernetes backend)")
        parser.add_argument("--kube-context", help="kubeconfig context (kubernetes backend)")
        parser.add_argument("--in-cluster", dest="kube_in_cluster", action="store_true",
                            default=None, help="use the portal pod's service account")
        parser.add_argument("--no-in-cluster", dest="kube_in_cluster", action="store_false")
        parser.add_argument("--namespace-prefix", help="prefix of users' namespaces")

    def handle(self, *args, name, **options):
        fields = {
            "description": options["description"],
            "backend": options["backend"],
            "pfs_root": options["pfs_root"],
            "public_dir": options["public_dir"],
            "default_image": options["default_image"],
            "kubeconfig": options["kubeconfig"],
            "kube_context": options["kube_context"],
            "kube_in_cluster": options["kube_in_cluster"],
            "namespace_prefix": options["namespace_prefix"],
        }
        with user_errors():
            datacenter, created = datacenter_upsert(name, **fields)
        verb = "Created" if created else "Updated"
        self.stdout.write(
            f"{verb} datacenter {datacenter.name} (backend {datacenter.backend}, "
            f"PFS root {datacenter.pfs_root_path})"
        )
