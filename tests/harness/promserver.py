"""A real Prometheus server and a real node_exporter for the deploy tests, on loopback.

The binaries are the distribution's (Debian's ``prometheus`` and
``prometheus-node-exporter`` packages; ``.ci/run`` installs them when missing), looked up as
``$PODSTORE_PROMETHEUS_BINDIR/NAME``, then on ``PATH``. Each server gets a free loopback port
(picked, then bound by the server; a lost race is retried) and a temporary directory; it is
stopped (SIGTERM, then SIGKILL) and the directory removed by :meth:`stop`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

_INSTALL = (
    "install the distribution's prometheus and prometheus-node-exporter packages "
    "(.ci/run does: apt-get install prometheus prometheus-node-exporter)"
)


class BinaryUnavailable(RuntimeError):
    """A Prometheus tool is not installed."""


def find(*names: str) -> str:
    """The first of ``names`` found ($PODSTORE_PROMETHEUS_BINDIR, then PATH)."""
    bindir = os.environ.get("PODSTORE_PROMETHEUS_BINDIR")
    for name in names:
        if bindir and os.access(os.path.join(bindir, name), os.X_OK):
            return os.path.join(bindir, name)
        found = shutil.which(name)
        if found:
            return found
    raise BinaryUnavailable(f"none of {', '.join(names)} found; {_INSTALL}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


class _Server:
    """A subprocess listening on a loopback port, with its log in its directory."""

    name = "server"

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"podstore-{self.name}-"))
        self.log_path = self.root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def argv(self, port: int) -> list[str]:
        raise NotImplementedError

    def ready_path(self) -> str:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        for _attempt in range(5):
            self.port = free_port()
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    self.argv(self.port),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.root,
                )
            if self._wait_ready(timeout):
                return
            self._kill()
            if "address already in use" not in self.log().lower():
                break
        raise RuntimeError(f"{self.name} did not start:\n{self.log()[-3000:]}")

    def _wait_ready(self, timeout: float) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            with contextlib.suppress(OSError):
                get(self.url + self.ready_path(), timeout=2)
                return True
            time.sleep(0.1)
        return False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _kill(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)

    def stop(self) -> None:
        try:
            self._kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class Prometheus(_Server):
    """``prometheus`` with ``config`` (a dict, written as YAML into its directory; rule files
    given by absolute path) and its TSDB in its directory."""

    name = "prometheus"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.binary = find("prometheus")
        self.config_path = self.root / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")

    def argv(self, port: int) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ]

    def ready_path(self) -> str:
        return "/-/ready"

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/PATH?params``: its ``data``; raises on a non-success status."""
        query = urllib.parse.urlencode(params)
        body = json.loads(get(f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")))
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])


class NodeExporter(_Server):
    """``prometheus-node-exporter`` with only its textfile collector, reading ``directory``."""

    name = "node-exporter"

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.binary = find("prometheus-node-exporter", "node_exporter")
        self.directory = directory

    def argv(self, port: int) -> list[str]:
        return [
            self.binary,
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={self.directory}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]

    def ready_path(self) -> str:
        return "/metrics"

    def metrics(self) -> str:
        return get(self.url + "/metrics").decode()
