# The kit itself, for Compose's optional watcher service (compose.yaml, profile `watch`):
#   docker compose --profile gpu --profile watch up qwen-base-watch -d
# It runs `kit watch SERVICE --serve` (docs/serving.md) against the engine's socket.
FROM python:3.12-slim
COPY pyproject.toml README.md Dockerfile compose.yaml /opt/kit-src/
COPY kit/ /opt/kit-src/kit/
COPY images/ /opt/kit-src/images/
COPY docs/schema/ /opt/kit-src/docs/schema/
RUN pip install --no-cache-dir /opt/kit-src && rm -rf /opt/kit-src
ENTRYPOINT ["kit"]
