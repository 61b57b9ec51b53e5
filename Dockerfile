# Build the wheel in one stage, run it slim and non-root in the next.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY lua ./lua
# The server's `emq` is the client package's (echomq-client, a dependency): both wheels.
COPY clients/python ./clients/python
RUN pip install --no-cache-dir build==1.2.2 && python -m build --wheel --outdir /dist \
 && python -m build --wheel --outdir /dist clients/python

FROM python:3.11-slim
RUN useradd --create-home --uid 10001 emq
COPY --from=build /dist/*.whl /tmp/
RUN pip install --no-cache-dir /tmp/*.whl && rm /tmp/*.whl
USER 10001
WORKDIR /home/emq
# Tokens are required on a non-loopback address: pass EMQ_AUTH_TOKENS (or a tokens file).
ENV HOST=0.0.0.0 PORT=8080 EMQ_DATA_DIR=/home/emq/data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz').status != 200)"]
CMD ["emq-http"]
