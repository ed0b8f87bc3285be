"""paddlecloud_client: what ``paddlectl`` and the SDK (``paddlecloud_sdk``) both talk to the
portal with, and nothing of the portal itself (no Django; the ``client`` import contract).

- ``config``: the config file (``~/.paddle/config``, ``$PADDLE_CONFIG``) and its datacenters.
- ``tokens``: the token cache beside the config.
- ``api``: ``ApiClient``, the portal's HTTP API (logins, jobs, files, registries).
- ``errors``: what goes wrong, each class with its exit status.
- ``transfer``: uploads and downloads of PFS files and directories, resumable.
- ``progress``: a transfer's progress line, and sizes as people read them.
- ``pfspath``: PFS paths as users write them (the layout itself is ``paddlecloud_core.layout``).
- ``jobs``: submitting a job whose trainer package is a local directory.

``paddlectl`` adds the command line (arguments, commands, output); the SDK adds ``PaddleJob``.
Neither imports the other.
"""
