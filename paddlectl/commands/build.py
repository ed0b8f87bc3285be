"""``paddlectl build``: the seeds' ``build_docker.sh``, done by the portal. The trainer package
(a local directory is uploaded first) becomes a runtime image: the base image, the package at
/train/package, its requirements.txt installed (or its own Dockerfile, used as given); pushed,
and its digest printed, so that ``paddlectl submit -image`` can run it."""

from __future__ import annotations

from paddlecloud_client import pfspath
from paddlecloud_client.errors import PaddlectlError
from paddlecloud_client.jobs import package_upload
from paddlecloud_core.layout import package_path
from paddlectl.args import flag
from paddlectl.commands.jobs import local_package


class BuildFailed(PaddlectlError):
    exit_code = 1


def setup_build(parser) -> None:
    parser.description = (
        "Build a runtime image from a trainer package and push it: the base image, the\n"
        "package at /train/package and its requirements.txt installed (or the package's own\n"
        "Dockerfile). Prints the pushed image's digest: run it with paddlectl submit -image.")
    parser.add_argument("package", metavar="PACKAGE",
                        help="the trainer package: a /pfs/... directory or a local one")
    flag(parser, "base", metavar="IMAGE",
         help="the base image (default: the datacenter's default image)")
    flag(parser, "image", metavar="NAME",
         help="where it is pushed, host/repository[:tag] (default: the datacenter's build "
              "registry; the tag: the package's digest)")
    flag(parser, "registry", metavar="CRED",
         help="your registry credentials to push with (default: yours for the image's host)")


def run_build(ctx, args) -> int | None:
    body = {key: getattr(args, key) for key in ("base", "image", "registry")
            if getattr(args, key)}
    if pfspath.is_remote(args.package):
        body["package"] = args.package
    else:
        local = local_package("build", args.package)
        body["package"] = package_path(ctx.home, f"build-{local.resolve().name}",
                                       local.resolve().name)
        ctx.stderr.write(f"paddlectl: uploading {local} to {body['package']}\n")
        with ctx.progress(f"{local.resolve().name}/") as progress:
            package_upload(ctx.client, local, body["package"], progress, ctx.warn)
    build = ctx.client.build_create(body)
    ctx.stderr.write(f"paddlectl: building {build['image']} (build {build['id']})\n")
    response = ctx.client.build_logs(build["id"], follow=True)
    try:
        for block in ctx.client.iter_content(response):
            ctx.stderr.write(block.decode(errors="replace"))
            ctx.stderr.flush()
    finally:
        response.close()
    build = ctx.client.build_get(build["id"])
    if build["state"] != "succeeded":
        raise BuildFailed(f"build failed: {build['reason'] or build['state']}")
    if ctx.output_format("text") in ("json", "yaml"):
        ctx.emit(build)
    else:
        ctx.stdout.write(f"{build['reference']}\n")
    return None
