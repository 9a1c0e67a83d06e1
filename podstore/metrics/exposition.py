"""Getting the metrics out: the text exposition, an atomic textfile for node_exporter's
textfile collector, and the HTTP endpoint of ``podstore watch --metrics-addr``."""

from __future__ import annotations

import ipaddress
import os

from prometheus_client import generate_latest, start_http_server
from prometheus_client.registry import CollectorRegistry

from podstore.errors import InvalidInputError, PodStoreError
from podstore.fsutil import replace_file

#: Where ``--metrics-addr :PORT`` binds: loopback only, unless a host is given.
DEFAULT_HOST = "127.0.0.1"


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of ``registry``."""
    return generate_latest(registry)


def write_textfile(path: str | os.PathLike[str], registry: CollectorRegistry) -> None:
    """Replace ``path`` with the exposition atomically: a temp file in the same directory
    (named so that node_exporter's ``*.prom`` glob skips it), fsync, rename, fsync of the
    directory. Raises PodStoreError when the file cannot be written."""
    data = render(registry)
    try:
        replace_file(path, data, 0o644)
    except OSError as exc:
        target = os.path.abspath(os.fspath(path))
        raise PodStoreError(f"{target}: cannot write metrics: {exc.strerror or exc}") from None


def parse_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT``, ``:PORT`` or ``PORT`` → (host, port); a missing host is
    loopback. Raises InvalidInputError for anything else."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidInputError(f"{text!r}: {host!r} is not an IPv6 address") from None
    elif ":" in host:
        raise InvalidInputError(f"{text!r}: write an IPv6 host in brackets, [::1]:9465")
    try:
        port = int(port_text)
    except ValueError:
        raise InvalidInputError(f"{text!r}: expected HOST:PORT") from None
    if not 0 <= port <= 65535:
        raise InvalidInputError(f"{text!r}: port must be 0-65535")
    return host or DEFAULT_HOST, port


def serve(host: str, port: int, registry: CollectorRegistry) -> tuple[str, int]:
    """Serve ``GET /metrics`` from a daemon thread; returns the bound (host, port) (port 0
    picks a free one). Raises PodStoreError when the address cannot be bound."""
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        reason = exc.strerror or exc
        raise PodStoreError(f"cannot serve metrics on {host}:{port}: {reason}") from None
    bound = server.server_address
    return str(bound[0]), int(bound[1])
