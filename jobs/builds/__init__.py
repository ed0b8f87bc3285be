"""Runtime images built from trainer packages (issue 19; the seeds' ``build_docker.sh``, done by
the portal): ``FROM`` a base image, the package at ``/train/package`` (the seeds' path), its
``requirements.txt`` installed, pushed to the datacenter's build registry.

When: a datacenter that names a build registry (``Datacenter.build_registry``) builds the
runtime image of every job whose package has a ``requirements.txt`` (the Dockerfile below) or
a ``Dockerfile`` (used as given, the package as its context); ``paddlectl build`` builds one
without a job. A package with neither builds nothing.

Where: ``<build registry>/<the owner's namespace>/runtime:pc-<digest>``, the digest (sha256)
of what decides the image: this recipe's version, the base image, the Dockerfile and every file
of the package (name and contents; a link's target). Pushed with the owner's registry
credentials for that host (the job's ``-registry``, else the owner's credentials whose server
is the registry's host, else none). The job's pods then run that image pinned to the pushed
digest, pulled with the same credentials.

Once: before building, the registry is asked for the tag; a job whose image is there already
builds nothing. Jobs that need an image being built wait for that build (one ``building``
``Build`` per image: a database constraint); a failed build fails them all and is not kept —
the next job builds again.

How: the datacenter's backend runs the builder (``Backend.image_build``): BuildKit, rootless,
as a Kubernetes Job in the owner's namespace (or the administrator's, ``kube_builder``); buildah
on the portal's machine (``jobs.backends.buildah``) for the local backend (``paddlectl build``
only, where PADDLECLOUD_LOCAL_BUILDS allows it) and for a Kubernetes datacenter whose cluster
cannot build (``kube_builder`` portal). Its output is the
build's log (``.paddlecloud/builds/<uid>.log`` in the owner's home), which ``paddlectl logs JOB
-w build`` and the job's page follow like any worker's.

- ``recipe``   — what an image is made of (the Dockerfile, the digest) and where it goes;
- ``registry`` — the owner's credentials for it, and whether the registry has it already;
- ``runs``     — a job's build (found, joined or run) and ``paddlectl build``'s.
"""
