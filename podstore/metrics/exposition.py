"""Getting the metrics out: the text exposition, an atomic textfile for node_exporter, and the
HTTP endpoint of ``podstore watch --metrics-addr`` (``/metrics``, ``/healthz``, ``/readyz``)."""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import generate_latest, make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from podstore.errors import InvalidInputError, PodStoreError
from podstore.fsutil import replace_file

#: Where ``--metrics-addr :PORT`` binds: loopback only, unless a host is given.
DEFAULT_HOST = "127.0.0.1"


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of ``registry``."""
    return generate_latest(registry)


def write_textfile(path: str | os.PathLike[str], registry: CollectorRegistry) -> None:
    """Replace ``path`` with the exposition atomically and durably (``fsutil.replace_file``).
    Raises PodStoreError when the file cannot be written."""
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


#: An extra path of the endpoint: a function answering (HTTP status, JSON body) at once.
Route = Callable[[], tuple[int, bytes]]

_REASONS = {200: "200 OK", 503: "503 Service Unavailable"}

#: The one path the metrics are served on.
METRICS_PATH = "/metrics"


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per request, so that a health probe never waits behind a scrape (which
    reads the whole store)."""

    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged (a probe every few seconds would fill the log)."""


def _app(registry: CollectorRegistry, routes: Mapping[str, Route]) -> Any:
    """The metrics on ``/metrics`` (prometheus_client's app), ``routes`` by path, and 404 for
    any other path (a mistyped scrape path must fail, not look like the metrics)."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == METRICS_PATH:
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        route = routes.get(path)
        if route is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: the metrics are on /metrics\n"]
        if environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        status, body = route()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        start_response(_REASONS.get(status, f"{status} Status"), headers)
        return [b"" if environ["REQUEST_METHOD"] == "HEAD" else body]

    return app


def serve(
    host: str,
    port: int,
    registry: CollectorRegistry,
    routes: Mapping[str, Route] | None = None,
) -> tuple[str, int]:
    """Serve ``GET /metrics`` and ``routes`` from a daemon thread; returns the bound (host,
    port). Raises PodStoreError when the address cannot be bound."""

    class Server(_Server):
        pass

    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        Server.address_family = info[0][0]
        server = make_server(host, port, _app(registry, routes or {}), Server, handler_class=_Quiet)
    except OSError as exc:
        reason = exc.strerror or exc
        raise PodStoreError(f"cannot serve metrics on {host}:{port}: {reason}") from None
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    bound = server.server_address
    return str(bound[0]), int(bound[1])
