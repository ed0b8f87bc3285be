"""The process kubelet's runtime: pods as real processes on this machine, each pod in a network
namespace of its own on a private bridge, with cluster DNS and its volumes mounted in a private
mount namespace (bubblewrap). See ../README.md, "Pods that really run"."""
