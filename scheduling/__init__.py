"""When jobs start: admission, the pool it plans with, forecasts, budgets and capacity — the
portal's side of the pure scheduling model (``paddlecloud_core.scheduling``, README
"Scheduling").

- ``pool``      — a datacenter as the model sees it, read from the database;
- ``admission`` — the one place jobs are admitted (or queued, or failed as never fitting), and
  the quota checks of a submission;
- ``forecasts`` — when each waiting job is predicted to start;
- ``budgets``   — what owners and groups spent of their budgets;
- ``capacity``  — a datacenter's capacity taken from its cluster;
- ``tasks``     — admission and home measures, queued by name (``kernel.queue``).

It sits between the jobs' records (models, states, transitions, signals, backends) and the
jobs' API (services, serializers, views, consumers, tasks): it moves jobs through
``jobs.transitions`` and hears what the jobs' lower layers announce (``jobs.signals``), and
the API asks it; nothing below it in ``jobs`` imports it (pyproject.toml's contracts).
"""
