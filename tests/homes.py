"""The homes a ToolService can run in, for tests parametrised over all of them.

Each entry opens a started `ToolServiceHome` for a list of allowed roots: "local" is the local
dispatcher (a child process), "lane" a fresh sandbox lane (a Docker container). `remote_home`
is a lane on the tests' second engine, reached as one on another machine (the conformance suite
adds it).
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from helpers import require_docker

from osprey.config import SandboxSettings
from osprey.toolservice.homes import ToolServiceHome, open_tool_service


@asynccontextmanager
async def local_home(roots: Sequence[str]) -> AsyncIterator[ToolServiceHome]:
    async with open_tool_service(roots) as home:
        yield home


@asynccontextmanager
async def lane_home(roots: Sequence[str]) -> AsyncIterator[ToolServiceHome]:
    require_docker()
    async with open_tool_service(roots, sandbox=SandboxSettings(enabled=True), session_id=f"test-{os.getpid()}-{id(roots):x}") as home:
        yield home


HOMES: dict[str, Callable[[Sequence[str]], AbstractAsyncContextManager[ToolServiceHome]]] = {
    "local": local_home,
    "lane": lane_home,
}


class SyncingClient:
    """A lane on another machine's ToolClient for suites written for homes that share the
    workspace: before and after each call the workspace is synced both ways (`/sync`), so the
    files a test prepares reach the lane and what the lane wrote comes back before the test looks."""

    def __init__(self, supervisor: ToolServiceHome) -> None:
        self._supervisor = supervisor
        self._client = supervisor.client

    def __getattr__(self, name: str) -> object:
        attribute = getattr(self._client, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        async def synced(*args: object, **kwargs: object) -> object:
            await self._supervisor.sync()  # type: ignore[attr-defined]
            try:
                return await attribute(*args, **kwargs)
            finally:
                await asyncio.shield(self._supervisor.sync())  # type: ignore[attr-defined]

        return synced


@asynccontextmanager
async def remote_home(roots: Sequence[str], engine: object, home: Path) -> AsyncIterator[SyncingClient]:
    """A lane on the test's second engine (`remote_engine`), through the remote backend."""
    from osprey.toolservice.engines import EngineTarget
    from osprey.toolservice.homes import LaneSupervisor
    from osprey.toolservice.remote_lanes import RemoteDockerBackend

    target = EngineTarget(host=engine.host, tls_verify=True, cert_path=str(engine.cert_dir), source="the test engine")  # type: ignore[attr-defined]
    supervisor = LaneSupervisor(roots[0], f"test-{os.getpid()}-{id(roots):x}", SandboxSettings(enabled=True), home=home,
                                backend=RemoteDockerBackend(target))
    await supervisor.start()
    try:
        yield SyncingClient(supervisor)
    finally:
        await supervisor.close()
