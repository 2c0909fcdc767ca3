"""scripts/demo when a Docker engine answers but no lane image can be built: it runs on the host.

The engine is a small Docker API server on a unix socket (`DOCKER_HOST`) that answers pings and
`docker info` but has no images and builds nothing, and `debootstrap` is off `PATH`; so
`osprey sandbox build` fails the way it does on a machine without root or debootstrap, while the
real engine (and its images) stay untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Self

import pytest

REPO = Path(__file__).resolve().parents[1]


class EmptyEngine:
    """A Docker engine API with no images and no containers, that refuses everything else."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.requests: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def address_string(self) -> str:
                return "unix"

            def _answer(self, status: int, body: Any) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(body, bytes) else "application/json")
                self.send_header("Api-Version", "1.41")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def route(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(min(length, 1 << 20))
                parts = self.path.split("?", 1)[0].strip("/").split("/")
                if parts and parts[0].startswith("v1."):
                    parts = parts[1:]
                path = "/" + "/".join(parts)
                owner.requests.append(f"{self.command} {path}")
                if path == "/_ping":
                    self._answer(200, b"OK")
                elif path == "/version":
                    self._answer(200, {"ApiVersion": "1.41", "MinAPIVersion": "1.12", "Version": "0-test", "Os": "linux", "Arch": "amd64"})
                elif path == "/info":
                    self._answer(200, {"ID": "test", "ServerVersion": "0-test", "OperatingSystem": "an engine without images", "Containers": 0, "Images": 0})
                elif path.startswith("/images/") and path.endswith("/json"):
                    self._answer(404, {"message": f"No such image: {path[len('/images/'):-len('/json')]}"})
                elif path == "/containers/json":
                    self._answer(200, [])
                else:
                    self._answer(500, {"message": f"this engine cannot do {self.command} {path}"})

            do_GET = do_POST = do_HEAD = do_DELETE = route

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True

        self.server = Server(str(socket_path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[EmptyEngine]:
    with EmptyEngine(tmp_path / "docker.sock") as server:
        yield server


def path_without_debootstrap() -> str:
    entries = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not os.path.exists(os.path.join(d, "debootstrap"))]
    path = os.pathsep.join(entries)
    missing = [tool for tool in ("bash", "docker", "mktemp", "diff") if shutil.which(tool, path=path) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not on PATH once debootstrap's directory is left out")
    return path


def test_the_demo_runs_on_the_host_when_no_lane_image_can_be_built(tmp_path: Path, engine: EmptyEngine) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{engine.socket_path}", "PATH": path_without_debootstrap(),
           "OSPREY_HOME": str(tmp_path / "osprey-home")}
    run = subprocess.run([str(REPO / "scripts" / "demo")], check=False, capture_output=True, text=True, timeout=600, env=env)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert "a Docker engine answers" in out
    # Why: the build's own error, on the line that announces the fallback.
    reason = next(line for line in out.splitlines() if line.startswith("no lane image could be built"))
    assert "building the lane base image needs" in reason and ("debootstrap" in reason or "root" in reason), reason
    assert "falling back to the local dispatcher (tools run on this host)" in out
    assert "osprey: error: building the lane base image needs" in run.stderr
    assert '"tool_service":"local"' in out and '"tool_service":"lane"' not in out
    assert "+        total += price * quantity" in out
    # The build was really tried against the engine, and no lane was.
    assert "GET /images/osprey-base:bookworm/json" in engine.requests
    assert not [r for r in engine.requests if r.startswith(("POST /build", "POST /containers"))], engine.requests
