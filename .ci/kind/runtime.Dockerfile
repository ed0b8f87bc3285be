# The image the real-cluster tests' pods run (PADDLECLOUD_TEST_IMAGE): Python, the PaddleCloud
# client (paddlecloud_sdk, which the examples read the environment with), PaddlePaddle's CPU
# build and numpy (the `examples` extra). python:3.11-slim is Debian: /bin/sh, coreutils,
# flock and setsid (util-linux) and getent (libc-bin), which the pods' scripts need, are there.
#
#   docker build -f .ci/kind/runtime.Dockerfile -t paddlecloud-runtime:test .
FROM python:3.11-slim
COPY . /src
RUN pip install --no-cache-dir "/src[examples]" && rm -rf /src
