"""The core PaddleCloud's portal, ``paddlectl`` and the SDK share: the rules and facts they all
apply, in one copy, with no Django in it.

- ``quantity``  — cpu and memory as users write them (``500m``, ``2Gi``);
- ``spec``      — a job's fields and every rule on them (names, ranges, env, topology);
- ``contract``  — the environment every replica gets (DESIGN.md, "Environment contract");
- ``layout``    — PFS paths (``/pfs/{dc}/home/{user}``) and where a job's files are;
- ``status``, ``processes``, ``replica_runner`` — replicas as local processes, for the
  portal's local backend and ``paddlectl local train``.

Standard library only (an import-linter contract holds it): a laptop that installs the client
and a trainer image that imports the SDK need nothing else.
"""

__version__ = "0.1.0"  # the one copy: the package's (pyproject.toml), the portal's, paddlectl's
