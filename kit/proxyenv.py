"""Does a server's environment send its own loopback requests to a proxy? (pure)

SGLang's warm-up is a request the server sends itself: `requests.get(server_args.url() +
"/model_info")`, where url() turns `--host 0.0.0.0` into 127.0.0.1, retried once a second for 120 s
before "Initialization failed. warmup error" (python/sglang/srt/entrypoints/http_server.py,
`_execute_server_warmup`, sglang 0.5.23). `requests` takes http_proxy/HTTPS_PROXY/all_proxy from
the environment unless no_proxy/NO_PROXY covers the host, so a proxy variable without a NO_PROXY
for loopback sends the warm-up to the proxy, which answers 403/502/503 or nothing, and start-up
fails although the server is fine. Docker injects the client's configured proxies
(~/.docker/config.json `proxies.default`) into every container it creates.

The matching follows requests' `should_bypass_proxies` (requests/utils.py, 2.34.2 as the images lock
it): entries separated by commas, `*` for every host, an IP or a CIDR block for IP hosts, a domain
suffix for names. Which variable it reads follows the same function: `os.environ.get("no_proxy") or
os.environ.get("NO_PROXY")`, the lowercase one alone when it is set and not empty; urllib, which it
asks too (`proxy_bypass`), keeps the lowercase one over the uppercase in `getproxies_environment`
(Lib/urllib/request.py, CPython 3.11). So `no_proxy=localhost` with `NO_PROXY=127.0.0.1` sends
127.0.0.1 to the proxy. The kit's own requests never use a proxy (kit/runtime/http.py); this is
about the server's.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0")
NO_PROXY_FIX = "NO_PROXY=127.0.0.1,localhost,0.0.0.0 (and no_proxy, the same)"
# Docker's config.json `proxies.default` keys and the variables it sets in a container.
DOCKER_CONFIG_KEYS = {
    "httpProxy": ("HTTP_PROXY", "http_proxy"),
    "httpsProxy": ("HTTPS_PROXY", "https_proxy"),
    "allProxy": ("ALL_PROXY", "all_proxy"),
    "noProxy": ("NO_PROXY", "no_proxy"),
    "ftpProxy": ("FTP_PROXY", "ftp_proxy"),
}
_CREDENTIALS = re.compile(r"(//)[^/@\s]+@")


@dataclass(frozen=True)
class ProxyGap:
    """A proxy the server's loopback requests would go through."""

    variables: tuple[str, ...]  # the proxy variables set
    proxy: str  # the first one's value, credentials removed
    no_proxy: str  # the value requests reads ("" when neither is set)
    uncovered: tuple[str, ...]  # the loopback hosts NO_PROXY does not cover
    no_proxy_name: str = "NO_PROXY"  # the variable it comes from: no_proxy wins when set

    def describe(self, where: str = "the server's environment") -> str:
        no = f"{self.no_proxy_name}={self.no_proxy!r}" if self.no_proxy else "no NO_PROXY"
        if self.no_proxy_name == "no_proxy":
            no += " (requests reads no_proxy alone when it is set, not NO_PROXY)"
        return (
            f"{where} sets a proxy ({', '.join(self.variables)}={self.proxy}) and {no}: "
            f"NO_PROXY does not cover {', '.join(self.uncovered)}, so SGLang's own warm-up request "
            "goes to the proxy"
        )


def redact(url: str) -> str:
    """A proxy URL without its user:password."""
    return _CREDENTIALS.sub(r"\1***@", url)


def _covers(entry: str, host: str) -> bool:
    entry = entry.strip().lower()
    if not entry:
        return False
    if entry == "*":
        return True
    entry = entry.split(":", 1)[0] if entry.count(":") == 1 else entry  # host:port
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        suffix = entry.lstrip(".")
        return host == suffix or host.endswith("." + suffix)
    try:
        return address in ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False


def covered(no_proxy: str, host: str) -> bool:
    """Does a NO_PROXY value send requests for `host` direct?"""
    return any(_covers(entry, host) for entry in no_proxy.replace(" ", ",").split(","))


def no_proxy_of(env: Mapping[str, str]) -> tuple[str, str]:
    """(name, value) of the no-proxy variable requests reads: `no_proxy` when set and not empty, else
    `NO_PROXY` (requests' `get_proxy`: `os.environ.get(key) or os.environ.get(key.upper())`)."""
    if env.get("no_proxy"):
        return "no_proxy", env["no_proxy"]
    return "NO_PROXY", env.get("NO_PROXY", "")


def loopback_gap(env: Mapping[str, str]) -> ProxyGap | None:
    """The gap, or None when no proxy is set or NO_PROXY covers 127.0.0.1, localhost and 0.0.0.0."""
    variables = tuple(name for name in PROXY_VARIABLES if env.get(name, "").strip())
    if not variables:
        return None
    name, no_proxy = no_proxy_of(env)
    uncovered = tuple(host for host in LOOPBACK_HOSTS if not covered(no_proxy, host))
    if not uncovered:
        return None
    return ProxyGap(variables, redact(env[variables[0]].strip()), no_proxy, uncovered, name)


def docker_client_env(config: Mapping[str, object]) -> dict[str, str]:
    """The variables Docker sets in every container from a client config.json (`proxies.default`)."""
    proxies = config.get("proxies")
    default = proxies.get("default") if isinstance(proxies, Mapping) else None
    if not isinstance(default, Mapping):
        return {}
    env: dict[str, str] = {}
    for key, names in DOCKER_CONFIG_KEYS.items():
        value = default.get(key)
        if isinstance(value, str) and value:
            for name in names:
                env[name] = value
    return env


def env_from_list(pairs: list[str] | tuple[str, ...] | None) -> dict[str, str]:
    """`["NAME=value", ...]` (a container's Config.Env) as a mapping."""
    return dict(pair.split("=", 1) for pair in pairs or () if "=" in pair)
