"""The tools the model sees of the MCP servers: one `mcp__SERVER__TOOL` per tool of a ready
server, and `list_mcp_resources` / `read_mcp_resource` while a ready server offers resources.

A tool's name, description and schema come from its server, which is not trusted: the name is
made safe for every provider, the description bounded, the schema checked before it is offered.
A tool is read-only only when its server is trusted and says so (`readOnlyHint`). Names are made
over all servers at once so that one never changes owner, and a session offers at most
`MAX_TOOLS` of them (`MAX_TOOLS_BYTES` as JSON)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..tools.base import Invocation, Tool, ToolContext, ToolInput, ToolOutcome

if TYPE_CHECKING:
    from .connection import McpContent, McpServer, McpServers, McpToolInfo

PREFIX = "mcp__"
MAX_NAME = 64  # the longest tool name both providers accept
MAX_DESCRIPTION = 2048  # characters of a server's description the model sees
MAX_SCHEMA = 64 * 1024  # characters of a tool's input schema (as JSON) offered to the model
MAX_LISTED = 200  # resources one listing shows per server
MAX_COMPARED = 1 << 20  # characters of a result's text read as JSON to compare with its structured content
MAX_TOOLS = 100  # MCP tools one session offers, over all its servers
MAX_TOOLS_BYTES = 512 * 1024  # bytes of their names, descriptions and schemas (as JSON), over all its servers
LIST_RESOURCES = "list_mcp_resources"
READ_RESOURCE = "read_mcp_resource"

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:8]


def prefix(server: str) -> str:
    """The start of the names of a server's tools: `mcp__SERVER__`."""
    return f"{PREFIX}{_UNSAFE.sub('_', server)}__"


def tool_names(server: str, tools: Iterable[str], *, taken: set[str] | None = None, reserved: Sequence[str] = (),
               moved: Callable[[str, str], None] = lambda _t, _n: None) -> dict[str, str]:
    """The name the model sees for each of a server's tools (real name -> model's name):
    `mcp__SERVER__TOOL` with characters outside [A-Za-z0-9_-] made `_`; a name longer than
    `MAX_NAME`, or one that two tools would share, is cut and ends with a short hash of the real
    name, the same in every session. Names that need no change are placed first, so a tool whose
    name was already safe keeps it. `taken` holds the names of the servers named before (it gets
    these too) and `reserved` their prefixes: a name among them, or under one of them, is another
    server's, so it gets the hash and `moved(tool, wanted)` is told. A tool whose hashed name is
    taken as well is left out of the result."""
    own = prefix(server)
    wanted = {tool: own + _UNSAFE.sub("_", tool) for tool in tools}
    others = set() if taken is None else taken
    mine: set[str] = set()
    names: dict[str, str] = {}
    for tool in sorted(wanted, key=lambda t: (wanted[t] != f"{PREFIX}{server}__{t}", t)):
        name = wanted[tool]
        foreign = name in others or any(name.startswith(before) for before in reserved)
        if len(name) > MAX_NAME or name in mine or foreign:
            suffix = f"_{_digest(server, tool)}"
            name = name[: MAX_NAME - len(suffix)] + suffix
            if name in others or name in mine:
                continue
            if foreign:
                moved(tool, wanted[tool])
        names[tool] = name
        mine.add(name)
    others.update(mine)
    return names


def offered_by(names: Iterable[str], server: str, name: str) -> bool:
    """Whether a tools list (a persona's, a toolset's, a child's) offers the tool `name` of the
    MCP server `server`: by its name, or all of the server's tools by `mcp__SERVER` or
    `mcp__SERVER__*`."""
    found = set(names)
    return name in found or f"{PREFIX}{server}" in found or f"{PREFIX}{server}__*" in found


def _schema(info: McpToolInfo) -> dict[str, Any] | None:
    """The tool's input schema as the model is offered it (an object schema), or None when it
    cannot be offered (too large, or not an object schema)."""
    schema = info.input_schema
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return None
    try:
        if len(json.dumps(schema)) > MAX_SCHEMA:
            return None
    except (TypeError, ValueError):
        return None
    schema = {key: value for key, value in schema.items() if key != "$schema"}  # only tokens to the model
    schema["type"] = "object"
    schema.setdefault("properties", {})
    return schema


def _description(server: str, info: McpToolInfo) -> str:
    text = (info.description or info.title or "").strip()
    if len(text) > MAX_DESCRIPTION:
        text = text[: MAX_DESCRIPTION - 1] + "…"
    return text or f"The tool {info.name} of the MCP server {server}."


def _says(text: str, structured: dict[str, Any]) -> bool:
    """Whether the text already says the structured content: the same JSON, or the one value that
    servers wrap as `{"result": ...}`."""
    if len(text) > MAX_COMPARED:
        return False
    try:
        value = json.loads(text) if text.strip() else None
    except ValueError:
        value = text
    if value == structured:
        return True
    return list(structured) == ["result"] and structured["result"] in (value, text)


def content_text(content: McpContent) -> str:
    """What the model reads of a result: its text, then its structured content (JSON) when the
    text does not already say it."""
    text = content.text
    if content.structured is not None and not _says(text, content.structured):
        dumped = json.dumps(content.structured, ensure_ascii=False, indent=1)
        text = f"{text}\n\nstructured content:\n{dumped}" if text else dumped
    if not text and not content.images:
        text = "(the tool returned nothing)"
    return text


def outcome_of(content: McpContent, *, error_category: str = "mcp_tool_error") -> ToolOutcome:
    """The tool outcome of an MCP result, its images as attachments (one that cannot be sent is a
    note in the text); `is_error` makes it an error outcome."""
    from ..messages import ImageBlock, image_or_note

    text = content_text(content)
    images: list[ImageBlock] = []
    for mime, data in content.images:
        image = image_or_note(mime, data)
        if isinstance(image, str):
            text += f"\n{image}"
        else:
            images.append(image)
    if content.is_error:
        text = f"Error ({error_category}): {text}"
    return ToolOutcome(text, content.is_error, error_category if content.is_error else None, images=images)


def failure(exc: BaseException) -> ToolOutcome:
    """The error outcome of a call the server could not answer (`McpError`: its message says what
    happened and what to do), a timeout (category `timeout`) or not."""
    text = str(exc)
    # A call that ran out of its time names the setting that gives it more.
    if getattr(exc, "timed_out", False) or isinstance(exc, TimeoutError) or "tool_timeout_sec" in text[:2000]:
        return ToolOutcome(f"Error (timeout): {text}", True, "timeout")
    return ToolOutcome(f"Error (mcp_unavailable): {text}", True, "mcp_unavailable")


def unknown_server(server: str, servers: McpServers) -> ToolOutcome:
    return ToolOutcome(f"Error (mcp_unavailable): there is no MCP server named {server!r}; the servers of this session: "
                       f"{', '.join(servers.servers) or '(none)'}.", True, "mcp_unavailable")


def server_tool(server: McpServer, info: McpToolInfo, name: str, servers: McpServers) -> Tool | None:
    """The `Tool` of one tool of a server (None when its schema cannot be offered). A call goes to
    the server by its real name; while the server is not ready it fails with the server's reason."""
    schema = _schema(info)
    if schema is None:
        return None
    spec = server.spec
    real = info.name

    async def run(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        current = servers.servers.get(spec.name)
        if current is None:
            return unknown_server(spec.name, servers)
        from ..errors import OspreyError

        try:
            content = await current.call_tool(real, dict(call.arguments), timeout=spec.tool_timeout_sec)
        except (OspreyError, TimeoutError) as exc:
            return failure(exc)
        return outcome_of(content)

    try:
        # The server checks its own arguments: its schema's patterns and references never run here.
        return Tool(name, _description(spec.name, info), schema, run, read_only=spec.trusted and info.read_only_hint is True,
                    validate_arguments=False)
    except ValueError:
        return None  # an invalid JSON Schema


class ListResources(ToolInput):
    server: str | None = Field(None, max_length=64, description="Only this MCP server's resources (default: every server's).")


class ReadResource(ToolInput):
    server: str = Field(min_length=1, max_length=64, description="The MCP server that offers the resource.")
    uri: str = Field(min_length=1, max_length=4096, description="The resource's URI, as list_mcp_resources shows it.")


def _with_resources(servers: McpServers) -> list[McpServer]:
    return [s for s in servers.servers.values() if s.state == "ready" and s.resources]


def _not_offered(server: str) -> ToolOutcome:
    return ToolOutcome(f"Error: the MCP server {server!r} is not among this session's tools (the persona's, toolset's or child's "
                       "tools list, or the server's `enabled_tools`, leaves it out); its resources cannot be read here.",
                       True, "invalid_arguments")


def resource_tools(servers: McpServers, reaches: Callable[[str], bool] = lambda _s: True) -> list[Tool]:
    """`list_mcp_resources` and `read_mcp_resource` over the resources of the servers the session
    offers (`reaches(server)`): read-only only when every server offering resources is trusted."""

    async def list_resources(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        wanted: ListResources = call.input
        found = [s for s in _with_resources(servers) if reaches(s.spec.name)]
        if wanted.server is not None:
            if wanted.server not in servers.servers:
                return ToolOutcome(f"Error: there is no MCP server named {wanted.server!r}; the servers with resources: "
                                   f"{', '.join(s.spec.name for s in found) or '(none)'}.", True, "invalid_arguments")
            if not reaches(wanted.server):
                return _not_offered(wanted.server)
            found = [s for s in found if s.spec.name == wanted.server]
        if not found:
            return ToolOutcome("No MCP server offers resources now.")
        lines: list[str] = []
        for server in found:
            lines.append(f"{server.spec.name}:")
            for resource in server.resources[:MAX_LISTED]:
                about = " ".join(part for part in (resource.name, f"({resource.mime_type})" if resource.mime_type else "",
                                                   f"- {resource.description[:300]}" if resource.description else "") if part)
                lines.append(f"  {resource.uri}" + (f"  {about}" if about else ""))
            if len(server.resources) > MAX_LISTED:
                lines.append(f"  ... and {len(server.resources) - MAX_LISTED} more")
        return ToolOutcome("\n".join(lines))

    async def read_resource(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        wanted: ReadResource = call.input
        server = servers.servers.get(wanted.server)
        if server is None:
            return unknown_server(wanted.server, servers)
        if not reaches(wanted.server):
            return _not_offered(wanted.server)
        from ..errors import OspreyError

        try:
            content = await server.read_resource(wanted.uri)
        except (OspreyError, TimeoutError) as exc:
            return failure(exc)
        return outcome_of(content)

    read_only = all(server.spec.trusted for server in _with_resources(servers))
    return [
        Tool.from_model(LIST_RESOURCES, "List the resources the MCP servers offer (their URIs, names and types).",
                        ListResources, list_resources, read_only=read_only),
        Tool.from_model(READ_RESOURCE, "Read one resource of an MCP server by its URI (list them with list_mcp_resources).",
                        ReadResource, read_resource, read_only=read_only),
    ]


def server_tools(servers: McpServers, *, known: Mapping[str, Sequence[McpToolInfo]] | None = None,
                 skipped: Callable[[str, str], None] = lambda _s, _t: None,
                 moved: Callable[[str, str, str], None] = lambda _s, _t, _n: None,
                 reaches: Callable[[str], bool] = lambda _s: True) -> list[tuple[str | None, Tool]]:
    """The tools of every ready server (those its `enabled_tools`/`disabled_tools` keep), each with
    its server's name, then the resource tools (with None) when a ready server offers resources.
    A restarting server's tools are those it had when it was last ready (`known`, by server), so a
    call to one meanwhile fails with the server's reason. `skipped(server, tool)` is told of a tool
    whose schema cannot be offered.

    Names are made over all servers at once, in their configured order and whatever their state
    (a server not ready holds its last known tools' names and its whole `mcp__SERVER__` prefix), so
    a name never changes owner: a later server's tool whose name an earlier server holds gets a
    hashed name, and `moved(server, tool, wanted)` is told."""
    made: list[tuple[str | None, Tool]] = []
    taken: set[str] = set()
    reserved: list[str] = []
    for server in servers.servers.values():
        name = server.spec.name
        infos: Sequence[McpToolInfo] = server.tools if server.state == "ready" else (known or {}).get(name, ())
        offer = server.state == "ready" or (server.state == "restarting" and known is not None)
        kept = [info for info in infos if server.spec.keeps(info.name)]

        def told(tool: str, wanted: str, server_name: str = name, offer: bool = offer) -> None:
            if offer:
                moved(server_name, tool, wanted)

        names = tool_names(name, [info.name for info in kept], taken=taken, reserved=reserved, moved=told)
        reserved.append(prefix(name))
        if not offer:
            continue
        for info in kept:
            if info.name not in names:
                continue
            tool = server_tool(server, info, names[info.name], servers)
            if tool is None:
                skipped(name, info.name)
            else:
                made.append((name, tool))
    if _with_resources(servers):
        made.extend((None, tool) for tool in resource_tools(servers, reaches))
    return made


def within_budget(entries: Sequence[tuple[str | None, Tool]],
                  left_out: Callable[[str, int], None] = lambda _s, _n: None) -> list[tuple[str | None, Tool]]:
    """The entries that fit the budget of a session's MCP tools (at most `MAX_TOOLS` tools and
    `MAX_TOOLS_BYTES` of names, descriptions and schemas as JSON), taken in order (servers in their
    configured order, each one's tools in its order); the resource tools always fit.
    `left_out(server, count)` is told how many of a server's tools were left out."""
    kept: list[tuple[str | None, Tool]] = []
    count = size = 0
    over: dict[str, int] = {}
    for server, tool in entries:
        if server is None:
            kept.append((server, tool))
            continue
        if not over:
            spec = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
            size += len(json.dumps(spec, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            count += 1
            if count <= MAX_TOOLS and size <= MAX_TOOLS_BYTES:
                kept.append((server, tool))
                continue
        over[server] = over.get(server, 0) + 1
    for server, excess in over.items():
        left_out(server, excess)
    return kept
