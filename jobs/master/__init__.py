"""A job's master (docs/master.md): its dataset cut into tasks, pass after pass, dispatched to
its trainers.

- ``dataset``  — the files a job's ``-dataset`` matches, and how they are cut into tasks;
- ``dispatch`` — passes and leases over the ``Task`` rows, who may call, and each call;
- ``app``      — the calls answered on the raw ASGI interface, before Django (the API's views
  answer the same calls elsewhere).
"""
