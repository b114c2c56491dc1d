"""The Docker client's own configuration: the proxies it puts into every container it creates.

docker-py, like the docker CLI, reads ~/.docker/config.json (or $DOCKER_CONFIG/config.json) and sets
`proxies.default` (httpProxy, httpsProxy, noProxy, ...) as HTTP_PROXY/http_proxy... in the container
(docker.api.container create_container(use_config_proxy=True), the default). A proxy there without
loopback in noProxy sends SGLang's own warm-up to the proxy (kit/proxyenv.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kit.proxyenv import docker_client_env


def client_config_path() -> Path:
    folder = os.environ.get("DOCKER_CONFIG")
    return (Path(folder) if folder else Path.home() / ".docker") / "config.json"


def read_client_proxy_env(path: Path | None = None) -> dict[str, str]:
    """The variables the Docker client adds to a container; {} when there is no config or no proxy."""
    try:
        config = json.loads((path or client_config_path()).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return docker_client_env(config) if isinstance(config, dict) else {}
