# The PaddleCloud portal image: web (ASGI), Celery worker and beat all run from it.
#
#   docker build -t paddlecloud .
#   docker build -t paddlecloud --build-arg BASE=my-base:bookworm .   # another Python 3.11+ base
#
# BASE is any Debian-based image with Python 3.11 or newer as `python3`, its `venv` module and
# apt: the official python:3.11-slim by default. The tests build it FROM a Debian bookworm root
# filesystem made with debootstrap (tests/test_image.py), as a machine without Docker Hub can.
# Two stages: the builder installs the portal and its dependencies into a virtualenv and
# collects the static files; the image gets the virtualenv and /app, not pip's leftovers.
# (Metadata first and few steps: each step copies the image on some storage drivers.)
ARG BASE=python:3.11-slim

# --- builder ---------------------------------------------------------------------------------
FROM ${BASE} AS builder
ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/paddlecloud/bin:$PATH
WORKDIR /app
# The dependencies first, from pyproject.toml alone (the portal's: the `server` extra): a change
# to the code reuses this layer.
COPY pyproject.toml ./
RUN python3 -m venv /opt/paddlecloud \
 && python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
print("\n".join(p["dependencies"] + p["optional-dependencies"]["server"]))' \
    > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
# The code: what .dockerignore lets in (the packages, templates/, static/, manage.py).
COPY . ./
# Installed in place: the portal reads templates/ and static/ beside its code, in /app.
RUN pip install --no-deps -e ".[server]" \
 && DEBUG=0 SECRET_KEY=only-for-collectstatic STATIC_ROOT=/app/staticfiles \
    PADDLECLOUD_VAR_DIR=/tmp/var python3 manage.py collectstatic --no-input -v 0 \
 && rm -rf /tmp/var

# --- the image ---------------------------------------------------------------------------------
FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/paddlecloud/bin:$PATH \
    PADDLECLOUD_VAR_DIR=/var/lib/paddlecloud \
    STATIC_ROOT=/app/staticfiles
# bubblewrap: the sandboxes of the local backend's replicas (the worker service runs local
# jobs: docs/admin/compose.md); nginx-light: runportal runs it in front of the portal (PFS
# downloads sent with sendfile: paddlecloud/front.py); passwd: useradd, should the base lack it.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap \
    nginx-light passwd \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 999 --home-dir /var/lib/paddlecloud --shell /usr/sbin/nologin \
    paddlecloud \
 && mkdir -p /var/lib/paddlecloud && chown paddlecloud: /var/lib/paddlecloud
USER paddlecloud
WORKDIR /app
EXPOSE 8000
# The static files were collected in the builder, into a directory the portal's user cannot
# write.
CMD ["paddlecloud", "runportal", "--host", "0.0.0.0", "--port", "8000", "--no-worker", \
     "--skip-collectstatic"]
# Owned by root (COPY ignores USER): the portal's user can read its code, not change it.
COPY --from=builder /opt/paddlecloud /opt/paddlecloud
COPY --from=builder /app /app
