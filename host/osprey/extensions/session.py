"""A session's extensions: what discovery found, applied to its tool catalogue, its interceptors
and its system prompt, and found again at the next turn boundary after a reload request
(`/reload`, or a change `extension_manage` made). Each load is recorded in the home for
`osprey extensions` (`loaded`), and the record removed when the session closes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..tools.base import ToolSource
from .discovery import Extensions, discover

if TYPE_CHECKING:
    from ..config import Settings
    from ..interception import Interceptor, InterceptorChain
    from ..messages import Message
    from ..tools.base import Tool, ToolRegistry


class SessionExtensions(ToolSource):
    """Owns the session's view of its layers, as one of its tool sources: `start` discovers them,
    `apply` makes the catalogue (the other sources' tools with description overrides, the active
    custom tools, narrowed to the toolset) and the interceptors (the hooks) match them;
    `turn_boundary` reloads first when a reload was requested."""

    name = "extensions"

    def __init__(
        self,
        settings: Settings,
        *,
        builtin: Sequence[Tool],
        toolset: str | None = None,
        env: Mapping[str, str] | None = None,
        session_id: str = "",
        warn: Callable[[str], None] = lambda _: None,
        emit: Callable[[Any], None] = lambda _: None,
        messages: Callable[[], Sequence[Message]] = lambda: (),
        permission_mode: str = "",
        only: Sequence[str] | None = None,
    ) -> None:
        self.settings = settings
        self.builtin = list(builtin)
        self.toolset = toolset
        self.env = dict(env) if env is not None else None
        self.session_id = session_id
        self.warn = warn
        self.emit = emit
        self.messages = messages
        self.permission_mode = permission_mode
        self.only = set(only) if only is not None else None  # a child's subset of the tools
        self.found: Extensions | None = None
        self.reload_pending = False
        self.wanted: set[str] | None = None  # the toolset's tool names, when one was asked for
        self._hooks: Interceptor | None = None
        self._guard: Interceptor | None = None
        self._custom: list[Tool] = []
        self.announced: set[str] = set()  # the notices already given, so a reload repeats none

    async def start(self) -> None:
        if self.found is None:
            self.load()

    def tools(self) -> Sequence[Tool]:
        """The custom tools of the last `apply`."""
        return list(self._custom)

    def load(self) -> Extensions:
        """Discover (again); the toolset asked for must exist (a ToolsetError when it does not)."""
        found = discover(self.settings, {tool.name for tool in self.builtin})
        self.wanted = None
        if self.toolset is not None:
            from .toolsets import select

            self.wanted = select(found.toolsets, self.toolset, problem=found.toolsets_problem)
        for warning in found.warnings:
            self.warn(warning)
        self.found = found
        if self.session_id:
            from .loaded import record_loaded

            try:
                record_loaded(self.settings.home, self.session_id, self.settings.cwd, found)
            except OSError:
                pass  # only `osprey extensions` misses what this session loaded
        return found

    async def close(self) -> None:
        if self.session_id:
            from .loaded import forget_loaded

            forget_loaded(self.settings.home, self.session_id)

    def apply(self, registry: ToolRegistry, interceptors: InterceptorChain) -> None:
        """The catalogue: the built-in tools (with description overrides) and the active custom
        tools, narrowed to the toolset (and to `only`); the hooks interceptor at its declared place."""
        found = self.found if self.found is not None else self.load()
        tools: dict[str, Tool] = {tool.name: tool for tool in self.builtin}
        self._custom = []
        if found.tools:
            from .custom_tools import custom_tool

            for item in found.tools:
                self._custom.append(custom_tool(item.manifest, item.manifest_dir, env=self.env, program=item.program, pin=item.pin))
                tools[item.manifest.name] = self._custom[-1]
        for name, text in found.descriptions.items():
            if name in tools:
                tools[name] = dataclasses.replace(tools[name], description=text)
            else:
                self.warn(f"tool-descriptions.toml describes {name!r}, which is not a tool of this session; it is ignored")
        wanted = self.wanted
        if wanted is not None:
            # MCP servers' tools join later (`Session._sync_mcp`), when their servers are ready.
            for name in sorted(n for n in wanted - set(tools) if not n.startswith("mcp__")):
                self.warn(f"the toolset {self.toolset!r} names {name!r}, which is not a tool of this session")
            tools = {name: tool for name, tool in tools.items() if name in wanted}
        if self.only is not None:
            tools = {name: tool for name, tool in tools.items() if name in self.only}
        registry.tools.clear()
        registry.tools.update(tools)
        from .manage_tool import TOOL_NAME

        if TOOL_NAME in tools and self._guard not in interceptors:
            from .guard import UserHooksGuard

            self._guard = UserHooksGuard(self.settings.home)
            interceptors.add(self._guard)
        if self._hooks is not None:
            interceptors.remove(self._hooks)
        self._hooks = None
        if found.hook_sets:
            from .hooks import HooksInterceptor, claude_permission_mode

            self._hooks = HooksInterceptor(
                found.hook_sets, cwd=str(self.settings.cwd), session_id=self.session_id, env=self.env, warn=self.warn,
                emit=self.emit, messages=self.messages, transcript_dir=self.settings.home / "transcripts",
                permission_mode=claude_permission_mode(self.permission_mode), project_dir=str(self.settings.workspace_root),
            )
            interceptors.add(self._hooks)

    def announce(self, stopped: Sequence[str] = ()) -> None:
        """Emit a warning notice for each custom tool and hooks file that is present but does not
        run, naming it and the command that trusts it; one not given before, and for each hooks
        file in `stopped` (active before a reload) that no longer runs."""
        from ..events import Notice

        found = self.found
        if found is None:
            return
        lines: list[str] = []
        running = {str(path) for path in found.hooks_paths}
        for path in stopped:
            if path in running:
                continue
            entry = next((a for a in found.artifacts if a.kind == "hooks" and a.path == path), None)
            if entry is None:
                lines.append(f"the hooks in {path} no longer run: the file is gone")
            elif entry.status in ("inactive", "skipped"):
                lines.append("since the reload, " + found.notice(entry))
            else:
                lines.append(f"the hooks in {path} no longer run ({entry.reason or entry.status})")
        lines += [line for line in map(found.notice, found.inactive()) if line not in self.announced and f"since the reload, {line}" not in lines]
        self.announced = set(map(found.notice, found.inactive()))  # one that runs again and stops again is told again
        for line in lines:
            self.emit(Notice(message=line, level="warning"))

    def request_reload(self) -> None:
        """Discover again at the next turn boundary."""
        self.reload_pending = True

    def turn_boundary(self, registry: ToolRegistry, interceptors: InterceptorChain) -> bool:
        """Reload now if one was requested; True when it did. A reload that fails keeps what was
        loaded and says why."""
        if not self.reload_pending:
            return False
        self.reload_pending = False
        running = [str(path) for path in self.found.hooks_paths] if self.found is not None else []
        try:
            self.load()
        except Exception as exc:  # noqa: BLE001 - a broken layer must not end the session
            self.warn(f"the extensions were not reloaded: {exc}")
            return False
        self.apply(registry, interceptors)
        self.announce(stopped=running)
        return True

    def compose(self, builtin_base: str) -> str:
        found = self.found
        return found.prompt.compose(builtin_base) if found is not None else builtin_base
