"""``local train``: run a training on this machine, without a portal (seed 000's
``paddle local train``). The work is done by ``paddlectl.local``."""

from __future__ import annotations

import shutil

from paddlectl.args import flag
from paddlectl.local import (
    DEFAULT_IMAGE,
    IN_CONTAINER,
    INPUT_VARIABLE,
    docker_problem,
    plan_build,
    plan_run,
)

USAGE = ("paddlectl local train --package-path DIR (--module MOD | --entry CMD)\n"
         "       --input DIR --output DIR [--image IMG] [-e K=V]... [--trainers N]\n"
         "       [--pservers M] [--passes N] [--jobname NAME] [--no-docker]")

DESCRIPTION = f"""

Runs --pservers M parameter servers and --trainers N trainers on this machine and waits for
the trainers; when every trainer has exited 0 the pservers are stopped and paddlectl exits 0.
No portal, config file or login is needed.

With a Docker engine (`docker` on PATH and `docker info` succeeds), each replica is
    docker run --rm -v INPUT:{IN_CONTAINER['input']} -v OUTPUT:{IN_CONTAINER['output']} \\
      -v PACKAGE:{IN_CONTAINER['package']} --network host --init --pull never \\
      -w {IN_CONTAINER['package']} --name ... -e K=V ... IMAGE python -m MOD   (or: CMD)
as in the seed, the command in a process group of its own (a SIGTERM stops it all), as
your uid when you are not root; IMAGE is --image, else {DEFAULT_IMAGE}. Nothing is
pulled: an image the engine does not have is an error (docker pull it, or build it, e.g.
paddlectl build). Every container of the run is removed when it ends, however it ends.

Otherwise each replica is a local process, started, watched and stopped as the portal's local
backend does it: its own process group, the package directory as working directory and
first on PYTHONPATH, your environment otherwise (requirements.txt is not installed: use
your own virtualenv). --module demo.train with --package-path ./demo runs demo/train.py, as
in the seeds.

Every replica gets the portal's environment contract (TRAINING_ROLE, PADDLE_TRAINER_ID,
PADDLE_TRAINERS_NUM, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINER_ENDPOINTS,
PADDLE_CURRENT_ENDPOINT, PADDLE_PORT, PADDLE_INIT_*, TRAINER_ID, ...; endpoints on free
ports of 127.0.0.1), PADDLE_OUTPUT_DIR (--output) and {INPUT_VARIABLE} (--input; there is
no PFS here, so PADDLE_PFS_HOME and PADDLE_PFS_PUBLIC name it too); in Docker, the paths
inside the container. -e may not set these names.

Every replica's output is printed prefixed with its name (trainer-0 | ...) and kept in
OUTPUT/node_N/train.log (trainers) and OUTPUT/node_N/server.log (pservers), as on the
portal; an earlier run's logs there are replaced. --output is created if missing; --input
is required and must exist.

Exit status: 0 when every trainer exited 0. When a replica fails, the others are stopped
(SIGTERM, SIGKILL 10 s later) and paddlectl names it and exits with its exit status (128+N
for signal N). 1 for a mistake in the arguments (then nothing is started). 130 after Ctrl-C,
which stops every replica."""


def setup_local(parser) -> None:
    parser.usage = USAGE
    parser.description += DESCRIPTION
    parser.add_argument("action", choices=("train",), metavar="ACTION",
                        help="train: run a training on this machine")
    # --output is the output directory here, not the global output format (-o still is).
    train = parser.add_argument_group("local train", conflict_handler="resolve")
    flag(train, "package-path", dest="package", metavar="DIR",
         help="the trainer package: a directory on this machine")
    flag(train, "module", metavar="MOD", help="the trainer's entrance: runs python -m MOD")
    flag(train, "entry", metavar="CMD", help="or a shell command that starts a trainer")
    flag(train, "input", dest="input_dir", metavar="DIR", help="input directory (must exist)")
    flag(train, "output", dest="output_dir", metavar="DIR",
         help="output directory (created if missing): the results and node_N/ logs")
    flag(train, "image", metavar="IMG",
         help=f"the PaddlePaddle image, with Docker (default {DEFAULT_IMAGE})")
    train.add_argument("-e", "--e", "--env", "-env", dest="env", action="append", default=[],
                       metavar="K=V", help="an environment variable (repeatable)")
    flag(train, "trainers", type=int, default=1, metavar="N", help="trainers (default 1)")
    flag(train, "pservers", type=int, default=0, metavar="M",
         help="parameter servers (default 0: a collective job)")
    flag(train, "passes", type=int, default=1, metavar="N",
         help="PADDLE_INIT_NUM_PASSES (default 1)")
    flag(train, "jobname", metavar="NAME",
         help="JOB_NAME (default: the package directory's name)")
    flag(train, "no-docker", action="store_true",
         help="local processes even when a Docker engine is available")


def run_local(ctx, args) -> int:
    plan = plan_build(package=args.package, module=args.module, entry=args.entry,
                      input_dir=args.input_dir, output_dir=args.output_dir, image=args.image,
                      env=args.env, trainers=args.trainers, pservers=args.pservers,
                      passes=args.passes, jobname=args.jobname)
    docker = None
    if not args.no_docker:
        client = shutil.which("docker")
        problem = docker_problem(client)
        if problem is None:
            docker = client
        elif args.image:
            ctx.warn(f"no Docker engine here ({problem}): running local processes; --image "
                     "is not used")
        else:
            ctx.info(f"running the replicas as local processes, not in containers: no Docker "
                     f"engine here ({problem})")
    return plan_run(plan, docker=docker, stdout=ctx.stdout, stderr=ctx.stderr, info=ctx.info)
