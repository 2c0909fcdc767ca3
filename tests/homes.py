"""The homes a ToolService can run in, for tests parametrised over all of them.

Each entry opens a started `ToolServiceHome` for a list of allowed roots: "local" is the local
dispatcher (a child process), "lane" a fresh sandbox lane (a Docker container).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

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
