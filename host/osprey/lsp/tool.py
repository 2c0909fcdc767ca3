"""The `lsp` tool: ask the configured language servers about the workspace's code (diagnostics,
definition, references, hover, document and workspace symbols, a rename's edits as a preview).

`LspTools` is its tool source: at the session's start it checks, where the tools run, which
configured servers' programs exist (a short bounded check, made only when servers are configured),
and offers the tool when one does. `LspChanges` is its interceptor: after a successful `write_file`
or `edit_file` it sends the file's new text to the servers that have it open."""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..errors import OspreyError, ToolError
from ..interception import Interceptor, PendingCall
from ..tools.base import Invocation, Tool, ToolContext, ToolInput, ToolOutcome, ToolSource

if TYPE_CHECKING:
    from ..config.schema import LspSettings
    from ..toolservice.client import ToolClient
    from .servers import LspServers, Server

START_CHECK_TIMEOUT_S = 30.0  # the ToolService's own start is inside it
CHANGE_SYNC_TIMEOUT_S = 10.0
MAX_FILES_READ = 20  # files read to show the lines of a result
MAX_LINE_CHARS = 240
MAX_HOVER_CHARS = 6_000

Operation = Literal["diagnostics", "definition", "references", "hover", "document_symbols", "workspace_symbols", "rename"]
POSITIONED = ("definition", "references", "hover", "rename")

DESCRIPTION = (
    "Ask the workspace's language servers about code. Operations: diagnostics (a file's errors and warnings, current "
    "with your edits), definition, references, hover (type and docs), document_symbols (a file's outline), "
    "workspace_symbols (find symbols by name: query), rename (a preview of the edits renaming a symbol to new_name; "
    "nothing is changed). definition, references, hover and rename need a position: path, line (1-based, as read_file "
    "shows it) and symbol (a name on that line) or column (1-based). Paths are relative to the working directory."
)


class LspInput(ToolInput):
    operation: Operation = Field(description="What to ask.")
    path: str = Field("", max_length=4096, description="The file (every operation but workspace_symbols, where it picks the language).")
    line: int = Field(0, ge=0, le=10_000_000, description="1-based line number, as read_file shows it.")
    symbol: str = Field("", max_length=200, description="A name on that line (its first occurrence is used).")
    column: int = Field(0, ge=0, le=100_000, description="1-based column in characters, instead of symbol.")
    query: str = Field("", max_length=200, description="workspace_symbols: the name or part of it.")
    new_name: str = Field("", max_length=200, description="rename: the new name.")
    include_declaration: bool = Field(True, description="references: list the declaration too.")


def _converter() -> Any:
    from lsprotocol.converters import get_converter

    return get_converter()


def _structure(method: str, raw: Any, server: str) -> Any:
    """A server's answer to `method` as lsprotocol's types."""
    from lsprotocol import types as t

    response_type = t.METHOD_TO_TYPES[method][1]
    try:
        return _converter().structure({"id": 0, "jsonrpc": "2.0", "result": raw}, response_type).result
    except Exception as exc:  # noqa: BLE001 - cattrs raises many kinds; the server spoke out of the protocol
        raise ToolError("lsp_error", f"the language server {server!r} answered {method} with something that is not "
                                     f"what the protocol allows ({type(exc).__name__}); try again or check the server's version") from None


class _Call:
    """One call's view: the workspace, the files it read, and how it shows paths and lines."""

    def __init__(self, servers: LspServers, cwd: str, max_results: int) -> None:
        self.servers = servers
        self.cwd = posixpath.normpath(cwd)
        self.max_results = max_results
        self.texts: dict[str, list[str] | None] = {}

    def shown(self, path: str) -> str:
        from .servers import inside

        return posixpath.relpath(path, self.cwd) if inside(path, self.cwd) else path

    async def lines(self, path: str) -> list[str] | None:
        from .positions import lines_of
        from .servers import inside, read_text

        if path not in self.texts:
            if len(self.texts) >= MAX_FILES_READ or not any(inside(path, r) for r in self.servers.roots):
                return None
            try:
                self.texts[path] = lines_of(await read_text(self.servers.client, path, self.servers.roots))
            except OspreyError:
                self.texts[path] = None
        return self.texts[path]

    async def place(self, uri: str, line: int, character: int) -> str:
        """`path:line:column: text of the line` (1-based) for an LSP position."""
        from .positions import to_character
        from .servers import uri_path

        path = uri_path(uri)
        if path is None:
            return f"{uri}:{line + 1}:{character + 1}"
        lines = await self.lines(path)
        if lines is None or line >= len(lines):
            return f"{self.shown(path)}:{line + 1}:{character + 1}"
        text = lines[line]
        return f"{self.shown(path)}:{line + 1}:{to_character(text, character) + 1}: {_cut(text.strip())}"

    def more(self, total: int) -> str:
        return f"\n... and {total - self.max_results} more (narrow the request to see them)" if total > self.max_results else ""


def _cut(text: str, limit: int = MAX_LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LspTools(ToolSource):
    """The `lsp` tool of one session, over the servers of `settings` that exist where the tools run."""

    name = "lsp"

    def __init__(self, settings: LspSettings, client: ToolClient, roots: Sequence[str], *, warn: Any = None) -> None:
        self.settings = settings
        self.client = client
        self.roots = list(roots)
        self.warn = warn or (lambda _: None)
        self.servers: LspServers | None = None
        self.changes = LspChanges(self)

    async def start(self) -> None:
        from .servers import LspServers, programs_found

        enabled = [(name, s) for name, s in self.settings.servers.items() if s.enabled]
        if not enabled:
            return
        try:
            found = await asyncio.wait_for(programs_found(self.client, [s.command[0] for _, s in enabled]), START_CHECK_TIMEOUT_S)
        except (OspreyError, TimeoutError) as exc:
            self.warn(f"lsp: could not check for the configured language servers where the tools run ({exc or 'timed out'}); the lsp tool is off")
            return
        available = [name for (name, _), ok in zip(enabled, found, strict=True) if ok]
        if not available:
            return
        self.servers = LspServers(self.settings, self.client, self.roots, available=available)

    def tools(self) -> Sequence[Tool]:
        if self.servers is None:
            return ()
        served = "; ".join(f"{n}: {' '.join(c.extensions)}" for n, c in self.servers.configs.items())
        return (Tool.from_model("lsp", f"{DESCRIPTION} Servers: {served}.", LspInput, self._run, read_only=True, trusted=True),)

    async def close(self) -> None:
        if self.servers is not None:
            await self.servers.close()

    async def changed(self, path: str, cwd: str) -> None:
        """A file was written: its new text goes to the servers that have it open (bounded)."""
        if self.servers is None or not self.servers.running:
            return
        from .servers import resolve

        try:
            absolute = resolve(path, cwd, self.servers.roots)
            await asyncio.wait_for(self.servers.changed(absolute), CHANGE_SYNC_TIMEOUT_S)
        except (OspreyError, TimeoutError):
            return  # the next lsp call sends the file's text again anyway

    async def _run(self, call: Invocation, ctx: ToolContext) -> str:
        from .positions import lines_of, position
        from .servers import path_uri, read_text, resolve

        a: LspInput = call.input
        servers = self.servers
        assert servers is not None  # the tool exists only with servers
        view = _Call(servers, ctx.cwd, self.settings.max_results)
        if a.operation == "workspace_symbols":
            return await self._workspace_symbols(a, ctx, view)
        if not a.path:
            raise ToolError("invalid_argument", f"{a.operation} needs path (the file)")
        if a.operation in POSITIONED and not a.line:
            raise ToolError("invalid_argument", f"{a.operation} needs line (1-based, as read_file shows it) and symbol or column")
        if a.operation == "rename" and not a.new_name:
            raise ToolError("invalid_argument", "rename needs new_name")
        path = resolve(a.path, ctx.cwd, servers.roots)
        server, restarted = await servers.for_file(path)
        text = await read_text(servers.client, path, servers.roots)
        await server.sync(path, text)
        lines = lines_of(text)
        view.texts[path] = lines
        note = f"(the language server {server.name!r} was started again: it had stopped)\n" if restarted else ""
        doc = {"uri": path_uri(path)}
        if a.operation == "diagnostics":
            return note + await self._diagnostics(server, path, view)
        if a.operation == "document_symbols":
            return note + await self._document_symbols(server, path, doc, view)
        at = position(lines, a.line, a.column or None, a.symbol or None, a.path)
        params: dict[str, Any] = {"textDocument": doc, "position": at}
        where = f"{view.shown(path)}:{a.line}" + (f" ({a.symbol})" if a.symbol else f":{a.column}")
        if a.operation == "hover":
            return note + self._hover(server, await server.lsp.request("textDocument/hover", params), where)
        if a.operation == "definition":
            raw = await server.ask("textDocument/definition", params)
            return note + await self._locations(server, "textDocument/definition", raw, f"Definition of {where}", view)
        if a.operation == "references":
            raw = await server.ask("textDocument/references", {**params, "context": {"includeDeclaration": a.include_declaration}})
            return note + await self._locations(server, "textDocument/references", raw, f"References to {where}", view)
        raw = await server.lsp.request("textDocument/rename", {**params, "newName": a.new_name})
        return note + await self._rename(server, raw, where, a.new_name, view)

    async def _diagnostics(self, server: Server, path: str, view: _Call) -> str:
        from lsprotocol import types as t

        from .servers import path_uri

        uri = path_uri(path)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.diagnostics_wait
        published = server.current(path)
        while published is None:
            left = deadline - loop.time()
            if left <= 0 or await server.lsp.wait_diagnostics(uri, server.lsp.serial, left) is None:
                return (f"{server.name} published no diagnostics for {view.shown(path)} within {self.settings.diagnostics_wait:g} s "
                        "(it may still be analysing: try again)")
            published = server.current(path)
        found = []
        for raw in published.diagnostics[: self.settings.max_results * 4]:
            try:
                found.append(_converter().structure(raw, t.Diagnostic))
            except Exception:  # noqa: BLE001, S112 - a malformed diagnostic is left out; the others are shown
                continue
        if not found:
            return f"{view.shown(path)}: no diagnostics from {server.name}."
        found.sort(key=lambda d: (d.severity or 4, d.range.start.line, d.range.start.character))
        out = [f"{view.shown(path)}: {len(published.diagnostics)} diagnostic{'s' if len(published.diagnostics) != 1 else ''} from {server.name}:"]
        for d in found[: self.settings.max_results]:
            severity = t.DiagnosticSeverity(d.severity).name.lower() if d.severity else "problem"
            code = f" [{d.source or server.name}{f' {d.code}' if d.code is not None else ''}]"
            place = await view.place(uri, d.range.start.line, d.range.start.character)
            head, _, text = place.partition(": ")
            message = _cut("; ".join(part.strip() for part in d.message.splitlines() if part.strip()), 600)
            out.append(f"{head}: {severity}: {message}{code}" + (f"\n    {text}" if text else ""))
        return "\n".join(out) + view.more(len(published.diagnostics))

    def _hover(self, server: Server, raw: Any, where: str) -> str:
        from lsprotocol import types as t

        hover = _structure("textDocument/hover", raw, server.name)
        if hover is None:
            return f"{server.name} has nothing to show for {where}."

        def text_of(part: Any) -> str:
            if isinstance(part, str):
                return part
            if isinstance(part, (t.MarkupContent, t.MarkedStringWithLanguage)):
                return part.value
            if isinstance(part, (list, tuple)):
                return "\n\n".join(text_of(p) for p in part)
            return str(part)

        body = text_of(hover.contents).strip()
        if len(body) > MAX_HOVER_CHARS:
            body = body[:MAX_HOVER_CHARS] + f"\n[... {len(body) - MAX_HOVER_CHARS} characters dropped]"
        return f"Hover at {where}:\n{body}" if body else f"{server.name} has nothing to show for {where}."

    async def _locations(self, server: Server, method: str, raw: Any, title: str, view: _Call) -> str:
        from lsprotocol import types as t

        result = _structure(method, raw, server.name)
        items = [] if result is None else [result] if not isinstance(result, (list, tuple)) else list(result)
        places: list[tuple[str, int, int]] = []
        for item in items:
            if isinstance(item, t.LocationLink):
                places.append((item.target_uri, item.target_selection_range.start.line, item.target_selection_range.start.character))
            elif isinstance(item, t.Location):
                places.append((item.uri, item.range.start.line, item.range.start.character))
        if not places:
            return f"{title}: {server.name} found none."
        shown = [await view.place(*p) for p in places[: view.max_results]]
        return f"{title}: {len(places)} found\n" + "\n".join(shown) + view.more(len(places))

    async def _document_symbols(self, server: Server, path: str, doc: dict[str, str], view: _Call) -> str:
        from lsprotocol import types as t

        raw = await server.lsp.request("textDocument/documentSymbol", {"textDocument": doc})
        result = _structure("textDocument/documentSymbol", raw, server.name) or []
        rows: list[str] = []
        total = 0

        def walk(symbols: Sequence[Any], depth: int) -> None:
            nonlocal total
            for s in symbols:
                total += 1
                if len(rows) < view.max_results:
                    if isinstance(s, t.DocumentSymbol):
                        line = s.selection_range.start.line + 1
                        detail = f" {_cut(s.detail, 80)}" if s.detail else ""
                    else:
                        line, detail = s.location.range.start.line + 1, ""
                    rows.append(f"{'  ' * depth}{t.SymbolKind(s.kind).name.lower()} {s.name}{detail} (line {line})")
                if isinstance(s, t.DocumentSymbol) and s.children and depth < 20:
                    walk(s.children, depth + 1)

        walk(result, 0)
        if not rows:
            return f"{view.shown(path)}: {server.name} found no symbols."
        return f"Symbols of {view.shown(path)} ({total}):\n" + "\n".join(rows) + view.more(total)

    async def _workspace_symbols(self, a: LspInput, ctx: ToolContext, view: _Call) -> str:
        from lsprotocol import types as t

        from .servers import find_root, resolve

        servers = self.servers
        assert servers is not None
        if not a.query:
            raise ToolError("invalid_argument", "workspace_symbols needs query (a name or part of one)")
        if a.path:
            server, restarted = await servers.for_file(resolve(a.path, ctx.cwd, servers.roots))
        elif len(servers.configs) == 1:
            name, config = next(iter(servers.configs.items()))
            probe = posixpath.join(posixpath.normpath(ctx.cwd), "_")
            root = await find_root(servers.client, probe, config.root_markers, servers.roots)
            server, restarted = await servers.server(name, config, root)
        else:
            raise ToolError("invalid_argument", f"several language servers are configured ({', '.join(servers.configs)}): "
                                                "give path (a file of the language) with workspace_symbols")
        raw = await server.ask("workspace/symbol", {"query": a.query})
        result = _structure("workspace/symbol", raw, server.name) or []
        note = f"(the language server {server.name!r} was started again: it had stopped)\n" if restarted else ""
        if not result:
            return note + f"{server.name} found no symbol matching {a.query!r}."
        rows = []
        for s in list(result)[: view.max_results]:
            container = f" in {s.container_name}" if s.container_name else ""
            kind = t.SymbolKind(s.kind).name.lower()
            location = s.location
            if isinstance(location, t.Location):
                rows.append(f"{kind} {s.name}{container}: {await view.place(location.uri, location.range.start.line, location.range.start.character)}")
            else:
                from .servers import uri_path

                rows.append(f"{kind} {s.name}{container}: {view.shown(uri_path(location.uri) or location.uri)}")
        return note + f"Symbols matching {a.query!r} ({len(result)}):\n" + "\n".join(rows) + view.more(len(result))

    async def _rename(self, server: Server, raw: Any, where: str, new_name: str, view: _Call) -> str:
        from lsprotocol import types as t

        from .servers import uri_path

        edit = _structure("textDocument/rename", raw, server.name)
        if edit is None:
            return f"{server.name} cannot rename {where}."
        by_uri: dict[str, list[Any]] = {}
        others: list[str] = []
        for uri, edits in (edit.changes or {}).items():
            by_uri.setdefault(uri, []).extend(edits)
        for change in edit.document_changes or ():
            if isinstance(change, t.TextDocumentEdit):
                by_uri.setdefault(change.text_document.uri, []).extend(e for e in change.edits if isinstance(e, t.TextEdit))
            elif isinstance(change, t.RenameFile):
                others.append(f"rename file {view.shown(uri_path(change.old_uri) or change.old_uri)} to {view.shown(uri_path(change.new_uri) or change.new_uri)}")
            elif isinstance(change, t.CreateFile):
                others.append(f"create file {view.shown(uri_path(change.uri) or change.uri)}")
            elif isinstance(change, t.DeleteFile):
                others.append(f"delete file {view.shown(uri_path(change.uri) or change.uri)}")
        if not by_uri and not others:
            return f"{server.name} found nothing to change renaming {where}."
        total = sum(len(e) for e in by_uri.values())
        out = [f"Rename {where} to {new_name!r}: {total} edit{'s' if total != 1 else ''} in {len(by_uri)} file{'s' if len(by_uri) != 1 else ''} "
               "(a preview: nothing was changed; apply it with edit_file)"]
        shown = 0
        for uri, edits in sorted(by_uri.items()):
            path = uri_path(uri)
            out.append(f"\n{view.shown(path) if path else uri}:")
            lines = await view.lines(path) if path else None
            for line, new_text in _edited_lines(lines, edits):
                if shown >= view.max_results:
                    break
                shown += 1
                out.append(f"  {line}: {_cut(new_text.strip())}")
        changed_lines = sum(len({e.range.start.line for e in edits}) for edits in by_uri.values())
        if changed_lines > shown:
            out.append(f"... and {changed_lines - shown} more changed lines (narrow the request to see them)")
        out.extend(others)
        return "\n".join(out)


def _edited_lines(lines: list[str] | None, edits: Sequence[Any]) -> list[tuple[int, str]]:
    """Each changed line (1-based) with its new text: the edits that start on a line are applied
    to it together (a multi-line edit shows its new text from its first line)."""
    from .positions import to_character

    starts: dict[int, list[Any]] = {}
    for e in edits:
        starts.setdefault(e.range.start.line, []).append(e)
    out = []
    for line in sorted(starts):
        group = sorted(starts[line], key=lambda e: e.range.start.character, reverse=True)
        if lines is None or line >= len(lines):
            out.append((line + 1, " … ".join(e.new_text for e in reversed(group))))
            continue
        text = lines[line]
        for e in group:
            start = to_character(text, e.range.start.character)
            end = to_character(text, e.range.end.character) if e.range.end.line == line else len(text)
            text = text[:start] + e.new_text + text[end:]
        out.append((line + 1, text))
    return out


class LspChanges(Interceptor):
    """After a successful write_file or edit_file, the file's new text goes to the language
    servers that have it open, so their diagnostics follow the edit."""

    name = "lsp changes"

    def __init__(self, source: LspTools) -> None:
        self.source = source

    async def after_call(self, call: PendingCall, outcome: ToolOutcome) -> ToolOutcome | None:
        if call.name in ("write_file", "edit_file") and not outcome.is_error:
            path = call.arguments.get("path")
            if isinstance(path, str) and path:
                with contextlib.suppress(Exception):
                    await self.source.changed(path, call.cwd)
        return None
