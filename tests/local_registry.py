"""A container registry for the tests: Debian's `docker-registry` (the distribution registry)
serving plain HTTP on a loopback port, its storage in a directory of its own. Engines treat a
registry on 127.0.0.0/8 as insecure by default, so both of the tests' engines can push and pull.

    with LocalRegistry(tmp_path / "registry") as registry:
        registry.address          # "127.0.0.1:PORT"
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

START_BOUND_S = 30.0


class LocalRegistry:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LocalRegistry:
        binary = shutil.which("docker-registry")
        if binary is None:
            message = "the docker-registry package is not installed (apt-get install docker-registry; .ci/run does)"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
        self.root.mkdir(parents=True, exist_ok=True)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = self.root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.root / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n"
        )
        log = open(self.root / "registry.log", "wb")  # noqa: SIM115 - the child's output, closed with it
        self.proc = subprocess.Popen([binary, "serve", str(config)], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + START_BOUND_S
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the registry did not start:\n{(self.root / 'registry.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
        try:
            connection.request("GET", "/v2/")
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> LocalRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
