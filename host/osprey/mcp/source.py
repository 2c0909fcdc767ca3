"""The MCP servers as a session's tool source: started in the background when the session starts
(the first model request never waits for them), their tools made again whenever a server's state
or tools change, their changes told as `mcp_server` events and, for a failure, a crash or a
return, one notice each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..events import Event, McpServerState, Notice
from ..tools.base import Tool, ToolSource
from .tools import MAX_TOOLS, MAX_TOOLS_BYTES, server_tools

if TYPE_CHECKING:
    from ..config.mcp import McpServerSpec
    from ..toolservice.client import ToolClient
    from .connection import McpServer, McpServers, McpToolInfo


class McpTools(ToolSource):
    """The tools of a session's MCP servers. Made from the servers' specs, it owns the servers:
    `start` starts them (and returns at once), `close` closes them. Made from another session's
    `servers` (a child borrowing its lead's), it neither starts nor closes them."""

    name = "mcp"

    def __init__(
        self,
        specs: Sequence[McpServerSpec] = (),
        *,
        client: ToolClient | None = None,
        workdir: str = ".",
        emit: Callable[[Event], None] = lambda _: None,
        servers: McpServers | None = None,
        http_client_factory: Any = None,
    ) -> None:
        self.emit = emit
        self._closing = False
        self._said: dict[str, tuple[str, int, str | None]] = {}  # server -> (state, tools, error) last told
        self._made: tuple[int, list[tuple[str | None, Tool]]] | None = None  # (generation, tools) last made
        self._skipped: set[tuple[str, str]] = set()
        self._moved: set[tuple[str, str]] = set()
        self._over: set[str] = set()
        # Each server's tools when it was last ready: a restarting server's tools, and the names
        # every server holds whatever its state.
        self._known: dict[str, tuple[McpToolInfo, ...]] = {}
        # The servers whose resources the session's tools lists offer (None: every server).
        self.reachable: frozenset[str] | None = None
        if servers is not None:
            self.servers, self.owned = servers, False
        else:
            from .connection import McpServers

            self.servers = McpServers(list(specs), client=client, workdir=workdir, on_state=self._on_state,
                                      http_client_factory=http_client_factory)
            self.owned = True

    @property
    def generation(self) -> int:
        """Changes whenever a server's state or tools change."""
        return self.servers.generation

    async def start(self) -> None:
        if self.owned:
            self.servers.start()

    def entries(self) -> list[tuple[str | None, Tool]]:
        """The current tools, each with its server's name (None for the resource tools)."""
        generation = self.servers.generation
        if self._made is None or self._made[0] != generation:
            self._remember()
            self._made = (generation, server_tools(self.servers, known=self._known, skipped=self._skip, moved=self._move,
                                                   reaches=self.reaches))
        return list(self._made[1])

    def reaches(self, server: str) -> bool:
        """Whether the resource tools may reach this server (the session's tools lists offer it)."""
        return self.reachable is None or server in self.reachable

    def left_out(self, server: str, count: int) -> None:
        """Tell (once per server) that `count` of its tools are over the session's budget."""
        if server in self._over or self._closing:
            return
        self._over.add(server)
        self.emit(Notice(message=f"{count} tools of the MCP server {server} are left out: a session offers at most {MAX_TOOLS} "
                                 f"MCP tools and {MAX_TOOLS_BYTES // 1024} KiB of their names, descriptions and schemas, "
                                 "servers in their configured order; choose the tools you need with the server's "
                                 "`enabled_tools`", level="warning"))

    def tools(self) -> Sequence[Tool]:
        return [tool for _, tool in self.entries()]

    def prompt_block(self) -> str:
        """A line for the system prompt while servers are still starting, so that a model asked
        to use one of them knows its tools are on the way (none once every server has settled)."""
        starting = sorted(name for name, server in self.servers.servers.items() if server.state == "starting")
        if not starting:
            return ""
        return ("MCP servers still starting: " + ", ".join(starting) + ". Their tools (named mcp__SERVER__TOOL) are "
                "added to your tools at a later turn, once each server is ready; if the task needs them, do the "
                "other work first.")

    async def close(self) -> None:
        self._closing = True  # the session has ended: the servers' stopping is not told
        if self.owned:
            await self.servers.close()

    def _remember(self) -> None:
        for name, server in self.servers.servers.items():
            if server.state == "ready":
                self._known[name] = server.tools

    def _skip(self, server: str, tool: str) -> None:
        if (server, tool) not in self._skipped and not self._closing:
            self._skipped.add((server, tool))
            self.emit(Notice(message=f"the tool {tool!r} of the MCP server {server} is left out: its input schema is not a valid "
                                     "JSON Schema of an object (or is larger than 64 KB)", level="warning"))

    def _move(self, server: str, tool: str, wanted: str) -> None:
        if (server, tool) not in self._moved and not self._closing:
            self._moved.add((server, tool))
            self.emit(Notice(message=f"the tool {tool!r} of the MCP server {server} is offered under a hashed name: {wanted} "
                                     "belongs to an MCP server configured before it", level="warning"))

    def _on_state(self, server: McpServer) -> None:
        self._remember()
        if self._closing:
            return
        name = server.spec.name
        tools = sum(1 for info in server.tools if server.spec.keeps(info.name)) if server.state == "ready" else 0
        error = (server.error or None) if server.state in ("failed", "restarting", "stopped") else None
        now = (server.state, tools, error)
        before = self._said.get(name)
        if before == now:
            return
        self._said[name] = now
        self.emit(McpServerState(server=name, state=server.state, tools=tools, error=error))
        was = before[0] if before is not None else None
        # The runtime's error names the server; the notice already does.
        reason = error
        for prefix in (f"the MCP server {name!r} could not be started: ", f"the MCP server {name!r} "):
            if reason is not None and reason.startswith(prefix):
                reason = reason.removeprefix(prefix)
                break
        why = f": {reason}" if reason else ""
        if server.state == "failed" and was in (None, "starting"):
            self.emit(Notice(message=f"the MCP server {name} did not start{why}; its tools are left out", level="warning"))
        elif server.state == "failed":
            self.emit(Notice(message=f"the MCP server {name} stopped and could not be started again{why}; its tools are left out",
                             level="warning"))
        elif server.state == "restarting" and was != "restarting":
            self.emit(Notice(message=f"the MCP server {name} stopped{why}; it is being started again, and its tools fail until it is back",
                             level="warning"))
        elif server.state == "ready" and was in ("restarting", "failed"):
            self.emit(Notice(message=f"the MCP server {name} is back ({tools} tools)", level="info"))
