"""Where the ToolService runs for a session, chosen in one place (`open_tool_service`).

- the local dispatcher: the sidecar's servicer in this process, on a private unix socket;
- a sandbox lane: the sidecar in a Docker container provisioned for the session (`lanes.py`);
- an attached lane: a sidecar someone else started (compose, a test fixture), by socket path.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import DispatcherError, SandboxError
from .toolclient import ToolClient

if TYPE_CHECKING:
    from .config import SandboxSettings

READY_DEADLINE_S = 10.0


@dataclass
class ToolService:
    """A reachable ToolService: its client, the home serving it, and how to recover it."""

    client: ToolClient
    home: str  # "local" or "lane"
    roots: list[str]
    # For a lane: replaces a dead lane with a fresh one and says what happened.
    recover: Callable[[], Awaitable[str | None]] | None = field(default=None, repr=False)


class LocalDispatcher:
    """The sidecar's servicer run in this process on a private unix socket (0600 in a 0700 dir)."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = [os.path.realpath(r) for r in roots]
        self.dir: str | None = None
        self.server = None
        self.client: ToolClient | None = None

    async def start(self) -> ToolClient:
        from osprey_sidecar.server import build_server

        from .config import tool_environment

        self.dir = tempfile.mkdtemp(prefix="osprey-tools-")  # mkdtemp makes it 0700
        socket_path = os.path.join(self.dir, "tools.sock")
        token = secrets.token_hex(32)
        try:
            self.server = build_server(self.roots, socket_path, token, env=tool_environment())
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


class LaneSupervisor:
    """Owns the session's lane: provisions it, replaces it when it dies, always removes it."""

    def __init__(self, workspace: str, session_id: str, options: "SandboxSettings", progress: Callable[[str], None], home: Path | None) -> None:
        self.workspace = workspace
        self.session_id = session_id
        self.options = options
        self.progress = progress
        self.home = home
        self.lane = None
        self.generation = 0
        self.service: ToolService | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> ToolService:
        from .lanes import provision_lane

        self.lane = await provision_lane(self.workspace, self.session_id, self.options, progress=self.progress, home=self.home)
        self.service = ToolService(client=self.lane.client, home="lane", roots=[self.lane.workspace], recover=self.recover)
        return self.service

    async def recover(self) -> str | None:
        """If the lane has stopped, start a new one and describe what happened; else None."""
        from .lanes import destroy_lane, lane_state, provision_lane

        if self.service is None:
            return None
        async with self._lock:  # one replacement at a time, however many calls failed
            if self.lane is not None:
                state = await lane_state(self.lane)
                if state.get("Running"):
                    return None
                if state.get("OOMKilled"):
                    why = f"the sandbox lane ran out of memory ({self.options.memory_limit}) and was killed"
                elif state.get("Gone"):
                    why = "the sandbox lane's container disappeared"
                else:
                    why = f"the sandbox lane stopped (exit code {state.get('ExitCode')})"
                lane, self.lane = self.lane, None
                await destroy_lane(lane)
            else:
                why = "there was no sandbox lane (starting one failed before)"
            self.generation += 1
            self.lane = await provision_lane(self.workspace, f"{self.session_id}-{self.generation}", self.options, progress=self.progress, home=self.home)
            self.service.client = self.lane.client
        return f"{why}; a new lane was started with the same workspace, so the call can be retried (files written before are kept, processes and /tmp are not)"

    async def close(self) -> None:
        from .lanes import destroy_lane

        if self.lane is not None:
            lane, self.lane = self.lane, None
            await destroy_lane(lane)


async def _attach(options: "SandboxSettings", roots: list[str]) -> ToolService:
    assert options.socket is not None
    if not os.path.exists(options.socket):
        raise SandboxError(f"there is no lane socket at {options.socket}; start the lane first (or check the path)")
    token = None
    if options.token_file:
        try:
            token = Path(options.token_file).read_text().strip()
        except OSError as exc:
            raise SandboxError(f"the lane token file {options.token_file} cannot be read: {exc.strerror}") from None
    client = ToolClient.for_socket(options.socket, token=token)
    try:
        await client.wait_ready(options.ready_timeout)
    except DispatcherError:
        await client.close()
        raise SandboxError(f"no lane answers on {options.socket} within {options.ready_timeout:g} s (is the lane running, and is the token right?)") from None
    return ToolService(client=client, home="lane", roots=roots)


@asynccontextmanager
async def open_tool_service(
    roots: Sequence[str],
    *,
    sandbox: "SandboxSettings | None" = None,
    session_id: str = "session",
    progress: Callable[[str], None] = lambda _: None,
    home: Path | None = None,
) -> AsyncIterator[ToolService]:
    """The ToolService for a session; torn down (container, socket and all) when the block exits."""
    real_roots = [os.path.realpath(r) for r in roots]
    if sandbox is not None and sandbox.enabled and sandbox.socket:
        service = await _attach(sandbox, real_roots)
        try:
            yield service
        finally:
            await service.client.close()
    elif sandbox is not None and sandbox.enabled:
        supervisor = LaneSupervisor(real_roots[0], session_id, sandbox, progress, home)
        try:
            yield await supervisor.start()
        finally:
            await supervisor.close()
    else:
        dispatcher = LocalDispatcher(real_roots)
        try:
            client = await dispatcher.start()
            yield ToolService(client=client, home="local", roots=dispatcher.roots)
        finally:
            await dispatcher.close()
