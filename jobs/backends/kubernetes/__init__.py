"""The Kubernetes backend. The objects a job needs are built as plain data by pure functions
(``manifests``, with ``names`` and the pods' ``scripts``), checked against the Kubernetes
schemas (``validation``) and printed for dry runs (``jobs.documents``); what the cluster says
of a job's replicas is read by pure functions too (``observe``). Talking to the API server is
a separate thin layer (``client``, ``pods_watch``), which ``backend`` orchestrates; a runtime
image's builder is ``builder`` (its objects) and ``builder_follow`` (following it)."""
