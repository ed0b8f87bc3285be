"""The Kubernetes backend. The objects a job needs are built as plain data by pure functions
(``manifests``, with ``names`` and the pods' ``scripts``), checked against the Kubernetes
schemas (``validation``) and printed for dry runs (``jobs.documents``); talking to the API server is
a separate thin layer."""
