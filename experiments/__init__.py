"""Experiments: sweeps of trials (ordinary jobs) over a search space, stopped early by the
rules of ``paddlecloud_core.experiments``."""
