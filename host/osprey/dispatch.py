"""Where the ToolService runs for a session, chosen in one place (`open_tool_service`)."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from .errors import DispatcherError
from .toolclient import ToolClient

READY_DEADLINE_S = 10.0


@dataclass
class ToolService:
    """A reachable ToolService: its client and a name for the home serving it."""

    client: ToolClient
    home: str  # "local" or "lane"
    roots: list[str]


class LocalDispatcher:
    """The sidecar's servicer run in this process on a private unix socket (0600 in a 0700 dir)."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = [os.path.realpath(r) for r in roots]
        self.dir: str | None = None
        self.server = None
        self.client: ToolClient | None = None

    async def start(self) -> ToolClient:
        from osprey_sidecar.server import build_server

        self.dir = tempfile.mkdtemp(prefix="osprey-tools-")  # mkdtemp makes it 0700
        socket_path = os.path.join(self.dir, "tools.sock")
        token = secrets.token_hex(32)
        try:
            self.server = build_server(self.roots, socket_path, token)
        except Exception as exc:  # grpc raises RuntimeError for a socket it cannot bind
            await self.close()
            raise DispatcherError(f"the local dispatcher could not listen on {socket_path}: {exc}") from None
        self.client = ToolClient.for_socket(socket_path, token=token)
        await self.client.wait_ready(READY_DEADLINE_S)
        return self.client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None
        if self.server is not None:
            self.server.stop(grace=None)
            self.server = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


@asynccontextmanager
async def open_tool_service(roots: Sequence[str]) -> AsyncIterator[ToolService]:
    """The ToolService for a session; torn down (socket and all) when the block exits."""
    dispatcher = LocalDispatcher(roots)
    try:
        client = await dispatcher.start()
        yield ToolService(client=client, home="local", roots=dispatcher.roots)
    finally:
        await dispatcher.close()
