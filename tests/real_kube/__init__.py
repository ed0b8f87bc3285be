"""The real Kubernetes the tests run against: its Go build module's binaries (build.py), a
control plane of them on this machine (control_plane.py; ``python -m tests.real_kube up``,
which ``./dev kube up`` runs) and the pytest fixture that gives tests one (fixtures.py)."""
