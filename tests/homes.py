"""The homes a ToolService can run in, for tests parametrised over all of them.

Each entry opens a ToolService for a list of allowed roots and yields its ToolClient:
"local" is the in-process dispatcher, "lane" a fresh sandbox lane (a Docker container).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from osprey.config import SandboxSettings
from osprey.dispatch import open_tool_service
from osprey.toolclient import ToolClient


def require_docker() -> None:
    """Skip without a Docker engine, except under CI, where its absence is a failure."""
    from osprey.errors import SandboxError
    from osprey.lane_image import docker_client

    try:
        docker_client().close()
    except SandboxError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs a Docker engine for the lane tests: {exc}")
        pytest.skip(f"no Docker engine: {exc}")


@asynccontextmanager
async def local_home(roots: Sequence[str]) -> AsyncIterator[ToolClient]:
    async with open_tool_service(roots) as service:
        yield service.client


@asynccontextmanager
async def lane_home(roots: Sequence[str]) -> AsyncIterator[ToolClient]:
    require_docker()
    async with open_tool_service(roots, sandbox=SandboxSettings(enabled=True), session_id=f"test-{os.getpid()}-{id(roots):x}") as service:
        yield service.client


HOMES: dict[str, Callable[[Sequence[str]], AbstractAsyncContextManager[ToolClient]]] = {
    "local": local_home,
    "lane": lane_home,
}
