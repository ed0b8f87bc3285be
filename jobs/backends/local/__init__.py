"""The local backend: a job's replicas run as processes on the portal's machine, each in a
sandbox (``sandbox``) and its job's network, reaching the portal through the job's relay
(``relay``); their exits are announced (``exits``); requirements are installed in shared
environments (``envs``) and images built with buildah (``buildah``), both through a network
whose one way out is a proxy to the allowed package indexes (``egress``)."""

from accounts.execution import BackendKind

LOCAL = BackendKind(name="local", label="local processes on the portal's machine",
                    backend="jobs.backends.local.backend.LocalBackend")
