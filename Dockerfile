# Build the wheel in one stage, run it slim and non-root in the next; both take their versions
# from requirements.lock. The tag names its Debian release, so the tini package stays the same.
FROM python:3.11-slim-trixie AS build
WORKDIR /src
COPY requirements.lock pyproject.toml README.md LICENSE ./
COPY service ./service
COPY lua ./lua
# The server's `emq` is the client package's (echomq-client, a dependency): both wheels, built
# by the locked setuptools and hatchling (no isolated build environment with whatever is newest).
COPY clients/python ./clients/python
RUN pip install --no-cache-dir -c requirements.lock setuptools hatchling \
 && pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /dist . ./clients/python

FROM python:3.11-slim-trixie
# tini is PID 1: it hands SIGTERM to the service (which stops its embedded Valkey last) and reaps
# zombies. Not pinned: the release is fixed by the tag, and a pinned revision vanishes from the
# mirror at Debian's next security update.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 emq
COPY requirements.lock /tmp/
COPY --from=build /dist/*.whl /tmp/
RUN pip install --no-cache-dir -c /tmp/requirements.lock /tmp/*.whl && rm /tmp/*.whl /tmp/requirements.lock
USER 10001
WORKDIR /home/emq
# Tokens are required on a non-loopback address: pass EMQ_AUTH_TOKENS (or a tokens file).
ENV HOST=0.0.0.0 PORT=8080 EMQ_DATA_DIR=/home/emq/data
# Without EMQ_REDIS_URL the embedded Valkey keeps its AOF here: mount a named volume on it
# (-v emq-data:/home/emq/data). Made by emq, so a fresh named volume mounted on it belongs to emq
# too. No VOLUME: it would give every container an anonymous volume, even one that uses Redis.
RUN mkdir -m 700 /home/emq/data
EXPOSE 8080
# /healthz needs no token; no proxy for a loopback call, whatever the environment says.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request as u; u.build_opener(u.ProxyHandler({})).open('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8080'), timeout=2)"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["emq-http"]
