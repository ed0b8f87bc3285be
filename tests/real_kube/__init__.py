"""The real control plane for the tests and for trials (issue 34): Kubernetes' own components
built from their Go modules, and Kueue (``kueue``)."""
