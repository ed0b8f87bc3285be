"""Tests of the real control plane itself (tests/real_kube/): that it starts and stops whole,
and that the API server holds the portal's ServiceAccount to deploy/rbac.yaml and
deploy/admission-policy.yaml, and pods to Pod Security."""
