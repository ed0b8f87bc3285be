# The PaddleCloud portal image: web (ASGI), Celery worker and beat all run from it.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PADDLECLOUD_VAR_DIR=/var/lib/paddlecloud \
    STATIC_ROOT=/app/staticfiles

WORKDIR /app
COPY pyproject.toml README.md ./
COPY paddlecloud_core ./paddlecloud_core
COPY paddlecloud ./paddlecloud
COPY accounts ./accounts
COPY jobs ./jobs
COPY pfs ./pfs
COPY registries ./registries
COPY dashboard ./dashboard
COPY paddlecloud_sdk ./paddlecloud_sdk
COPY paddlectl ./paddlectl
COPY templates ./templates
COPY static ./static
COPY manage.py ./
RUN pip install -e ".[server]" \
 && DEBUG=0 SECRET_KEY=only-for-collectstatic python manage.py collectstatic --no-input -v 0 \
 && useradd --system --uid 999 --home /var/lib/paddlecloud paddlecloud \
 && mkdir -p /var/lib/paddlecloud && chown paddlecloud /var/lib/paddlecloud

USER paddlecloud
EXPOSE 8000
# The static files were collected above, into a directory the portal's user cannot write.
CMD ["paddlecloud", "runportal", "--host", "0.0.0.0", "--port", "8000", "--no-worker", \
     "--skip-collectstatic"]
