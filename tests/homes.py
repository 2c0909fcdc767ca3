"""The homes a ToolService can run in, for tests parametrised over all of them.

Each entry opens a ToolService for a list of allowed roots and yields its ToolClient.
The lane (a Docker container) joins this table with the sandbox work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from osprey.dispatch import open_tool_service
from osprey.toolclient import ToolClient


@asynccontextmanager
async def local_home(roots: Sequence[str]) -> AsyncIterator[ToolClient]:
    async with open_tool_service(roots) as service:
        yield service.client


HOMES: dict[str, Callable[[Sequence[str]], AbstractAsyncContextManager[ToolClient]]] = {
    "local": local_home,
}
