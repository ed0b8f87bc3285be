"""The portal's kernel: what every app builds on, and nothing else.

Errors and their JSON answers, input the database cannot store, the API's parser, the
security middleware and forwarded headers, the answering of requests before Django, reading
the environment (and later: the Celery app, queued work, the portal's metrics, the API views'
request reading). Apps import the kernel; the kernel imports no app and nothing of the wiring
(``paddlecloud``: settings, URLs, ASGI), which names it by string. Held by the ``kernel``
contracts in pyproject.toml.
"""
