"""The portal's kernel: what every app builds on, and nothing else.

Errors and their one JSON shape (``errors``), input the database cannot store (``storable``)
and the API's parser (``parsers``), the security middleware and forwarded headers
(``security``), the requests answered before Django (``before_django``), the API views' reading
of a request (``api``), the Celery app and the one place that queues work (``celery``,
``queue``), the portal's Prometheus metrics (``metrics``), settings read from the environment
(``env``).

Apps import the kernel; the kernel imports no app and nothing of the wiring (``paddlecloud``:
settings, URLs, ASGI, the worker), which names its middleware and handlers by string. Held by
the ``kernel`` and ``wiring`` contracts in pyproject.toml.
"""
