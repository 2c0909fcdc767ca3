"""The language servers of one session: which server serves a file (by its extension), the root it
runs for (the nearest directory holding one of its `root_markers`, walking up from the file within
the workspace), and the running servers, one per (server, root), started on first use through the
ToolService (`ToolClient.program`), reused, and started again after a crash or a hang.

Files are read where the tools run (never from the host's disk: under --sandbox the server runs in
the lane) and opened on the server with that text; a file whose text changed since is sent again
as a change (the whole new text), so diagnostics follow the model's edits.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ..config.schema import LspServerSettings, LspSettings
from ..errors import OspreyError, ToolError
from ..toolservice.client import ToolClient
from .client import LspClient, LspServerError, Published

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_OPEN_DOCUMENTS = 50  # per server; the least recently used is closed beyond
READ_TIMEOUT_MS = 20_000
CHECK_TIMEOUT_MS = 15_000
WARM_UP_S = 8.0

LANGUAGE_IDS = {
    ".py": "python", ".pyi": "python", ".ts": "typescript", ".mts": "typescript", ".cts": "typescript",
    ".tsx": "typescriptreact", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascriptreact",
    ".go": "go", ".rs": "rust", ".sh": "shellscript", ".bash": "shellscript", ".zsh": "shellscript", ".c": "c",
    ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp", ".java": "java", ".rb": "ruby", ".lua": "lua",
}


def path_uri(path: str) -> str:
    """The file:// URI of an absolute POSIX path."""
    return "file://" + quote(path, safe="/:@!$&'()*+,;=-._~")


def uri_path(uri: str) -> str | None:
    """The normalized path of a file:// URI (None for another scheme): `..` in a server's answer
    cannot step out of a directory a check saw."""
    parts = urlsplit(uri)
    return posixpath.normpath(unquote(parts.path)) if parts.scheme == "file" else None


def language_id(path: str) -> str:
    suffix = PurePosixPath(path).suffix.lower()
    return LANGUAGE_IDS.get(suffix, suffix.lstrip(".") or "plaintext")


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def resolve(path: str, cwd: str, roots: Sequence[str]) -> str:
    """`path` (absolute or relative to `cwd`) as a normalized absolute path beneath one of `roots`."""
    absolute = posixpath.normpath(posixpath.join(cwd, path))
    if not any(inside(absolute, posixpath.normpath(root)) for root in roots):
        raise ToolError("outside_root", f"{path} is outside the workspace ({', '.join(roots)}); the lsp tool works on the workspace's files")
    return absolute


# Resolves the file where the tools run (symlinks followed), prints the roots resolved the same
# way and the file's resolved path, NUL-separated, then the file's bytes, read from that resolved
# path: the caller keeps the text only when that path is beneath a root.
_READ_SCRIPT = 'f=$(realpath -e -- "$1") || exit 3; shift; for r in "$@"; do printf "%s\\0" "$(realpath -m -- "$r")"; done; ' \
               'printf "%s\\0" "$f"; exec cat -- "$f"'


async def read_text(client: ToolClient, path: str, roots: Sequence[str]) -> str:
    """The text of `path` as the tools see it (read where they run), bounded; a ToolError when
    `path`, its symlinks followed, is not a file beneath one of `roots`."""
    r = await client.exec(["sh", "-c", _READ_SCRIPT, "sh", path, *roots], timeout_ms=READ_TIMEOUT_MS,
                          max_output_bytes=MAX_FILE_BYTES + (len(roots) + 1) * 8192)
    if r.exit_code != 0 or r.signal:
        problem = r.stderr.text().strip().splitlines()
        detail = "no such file" if r.exit_code == 3 else (problem[-1] if problem else f"cat exited with {r.exit_code}")
        raise ToolError("not_found", f"{path} could not be read: {detail}")
    if r.stdout.dropped_bytes:
        raise ToolError("too_large", f"{path} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; the lsp tool reads files up to that size")
    fields = (r.stdout.head + r.stdout.tail).split(b"\0", len(roots) + 1)
    if len(fields) != len(roots) + 2:
        raise ToolError("not_found", f"{path} could not be read")
    real_roots = [f.decode("utf-8", "surrogateescape") for f in fields[:len(roots)]]
    real = fields[len(roots)].decode("utf-8", "surrogateescape")
    if not any(inside(real, root) for root in real_roots):
        raise ToolError("outside_root", f"{path} leads outside the workspace (to {real}); the lsp tool reads only the workspace's files")
    return fields[-1].decode("utf-8", "replace")


async def programs_found(client: ToolClient, programs: Sequence[str]) -> list[bool]:
    """Whether each program (a name on PATH or a path) exists where the tools run."""
    script = 'for p in "$@"; do if command -v "$p" >/dev/null 2>&1; then echo yes; else echo no; fi; done'
    r = await client.exec(["sh", "-c", script, "sh", *programs], timeout_ms=CHECK_TIMEOUT_MS, max_output_bytes=64 * 1024)
    answers = r.stdout.text().split()
    return [i < len(answers) and answers[i] == "yes" for i in range(len(programs))]


async def find_root(client: ToolClient, path: str, markers: Sequence[str], roots: Sequence[str]) -> str:
    """The nearest directory at or above `path`'s holding one of `markers`, not above the
    workspace root holding `path`; that workspace root when none does."""
    top = max((posixpath.normpath(r) for r in roots if inside(path, posixpath.normpath(r))), key=len, default=posixpath.dirname(path))
    directories = []
    directory = posixpath.dirname(path)
    while inside(directory, top):
        directories.append(directory)
        if directory == top:
            break
        directory = posixpath.dirname(directory)
    if not markers or not directories:
        return top
    candidates = [posixpath.join(d, m) for d in directories for m in markers]
    script = 'i=0; for p in "$@"; do if [ -e "$p" ]; then echo "$i"; exit 0; fi; i=$((i+1)); done'
    r = await client.exec(["sh", "-c", script, "sh", *candidates], timeout_ms=CHECK_TIMEOUT_MS, max_output_bytes=1024)
    found = r.stdout.text().strip()
    if found.isdigit() and int(found) < len(candidates):
        return directories[int(found) // len(markers)]
    return top


@dataclass
class Document:
    version: int
    text: str
    sent_at: int  # the server's publication serial when this version was sent


@dataclass
class Server:
    """A running language server for one root, and the documents it has open."""

    name: str
    root: str
    lsp: LspClient
    documents: OrderedDict[str, Document] = field(default_factory=OrderedDict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    started: float = field(default_factory=time.monotonic)

    async def ask(self, method: str, params: Any) -> Any:
        """`method`'s answer; an empty one in the server's first seconds, while it may still be
        reading the workspace in the background, is asked again until WARM_UP_S have passed."""
        while True:
            answer = await self.lsp.request(method, params)
            if answer or time.monotonic() - self.started >= WARM_UP_S:
                return answer
            await asyncio.sleep(0.5)

    async def sync(self, path: str, text: str) -> bool:
        """Make the server's copy of `path` hold `text` (open it, or send the whole new text);
        whether anything was sent."""
        uri = path_uri(path)
        async with self.lock:
            doc = self.documents.get(uri)
            if doc is not None:
                self.documents.move_to_end(uri)
                if doc.text == text:
                    return False
                doc.version += 1
                doc.text = text
                doc.sent_at = self.lsp.serial
                await self.lsp.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": doc.version},
                                                                 "contentChanges": [{"text": text}]})
                return True
            while len(self.documents) >= MAX_OPEN_DOCUMENTS:
                old, _ = self.documents.popitem(last=False)
                await self.lsp.notify("textDocument/didClose", {"textDocument": {"uri": old}})
            self.documents[uri] = Document(1, text, self.lsp.serial)
            await self.lsp.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language_id(path), "version": 1, "text": text}})
            return True

    def current(self, path: str) -> Published | None:
        """The diagnostics published for `path`'s text as last sent, if any came yet."""
        uri = path_uri(path)
        doc, published = self.documents.get(uri), self.lsp.diagnostics.get(uri)
        if doc is None or published is None or published.serial <= doc.sent_at:
            return None
        return published if published.version is None or published.version >= doc.version else None


def client_capabilities() -> dict[str, Any]:
    """What this client tells servers it understands (built with lsprotocol's types)."""
    from lsprotocol import types as t
    from lsprotocol.converters import get_converter

    capabilities = t.ClientCapabilities(
        general=t.GeneralClientCapabilities(position_encodings=[t.PositionEncodingKind.Utf16]),
        workspace=t.WorkspaceClientCapabilities(configuration=True, workspace_folders=True,
                                                symbol=t.WorkspaceSymbolClientCapabilities(dynamic_registration=False)),
        text_document=t.TextDocumentClientCapabilities(
            synchronization=t.TextDocumentSyncClientCapabilities(dynamic_registration=False),
            publish_diagnostics=t.PublishDiagnosticsClientCapabilities(version_support=True, related_information=False),
            definition=t.DefinitionClientCapabilities(link_support=True),
            references=t.ReferenceClientCapabilities(),
            hover=t.HoverClientCapabilities(content_format=[t.MarkupKind.PlainText, t.MarkupKind.Markdown]),
            document_symbol=t.DocumentSymbolClientCapabilities(hierarchical_document_symbol_support=True),
            rename=t.RenameClientCapabilities(prepare_support=False),
        ),
    )
    unstructured: dict[str, Any] = get_converter().unstructure(capabilities)
    return unstructured


# Language servers one session keeps running at once (the ToolService runs at most 16 programs).
MAX_RUNNING = 4


class LspServers:
    """The session's language servers (see the module's docstring)."""

    def __init__(self, settings: LspSettings, client: ToolClient, roots: Sequence[str], *, available: Sequence[str] | None = None) -> None:
        self.settings = settings
        self.client = client
        self.roots = [posixpath.normpath(r) for r in roots]
        # The enabled servers whose program exists where the tools run, by name.
        names = available if available is not None else [n for n, s in settings.servers.items() if s.enabled]
        self.configs: dict[str, LspServerSettings] = {n: settings.servers[n] for n in names}
        self.running: dict[tuple[str, str], Server] = {}
        self._starting: dict[tuple[str, str], asyncio.Lock] = {}
        self.restarts = 0

    def server_for(self, path: str) -> tuple[str, LspServerSettings]:
        suffix = PurePosixPath(path).suffix.lower()
        for name, config in self.configs.items():
            if suffix and suffix in (e.lower() for e in config.extensions):
                return name, config
        known = ", ".join(f"{n} ({' '.join(c.extensions) or 'no extensions'})" for n, c in self.configs.items())
        raise ToolError("invalid_argument", f"no language server is configured for {suffix or 'files without an extension'} files "
                                            f"(configured: {known}); see `osprey docs lsp`")

    async def server(self, name: str, config: LspServerSettings, root: str) -> tuple[Server, bool]:
        """The running server `name` for `root` (started now if needed), and whether it was
        started again after it crashed or hung."""
        key = (name, root)
        lock = self._starting.setdefault(key, asyncio.Lock())
        async with lock:
            running = self.running.get(key)
            if running is not None and running.lsp.alive:
                self.running[key] = self.running.pop(key)  # most recently used last
                return running, False
            restarted = running is not None
            if running is not None:
                del self.running[key]
                await self._close(running)
                self.restarts += 1
            while len(self.running) >= MAX_RUNNING:
                # A monorepo's many roots would otherwise start a server each: the least
                # recently used is closed (and started again if it is asked for again).
                oldest = next(iter(self.running))
                await self._close(self.running.pop(oldest))
            server = await self._start(name, config, root)
            self.running[key] = server
            return server, restarted

    async def _start(self, name: str, config: LspServerSettings, root: str) -> Server:
        try:
            handle = await self.client.program(list(config.command), workdir=root, env=dict(config.env) or None)
        except OspreyError as exc:
            raise LspServerError(f"the language server {name!r} ({config.command[0]}) could not be started: {exc}") from None
        options = config.initialization_options
        folders = [{"uri": path_uri(root), "name": PurePosixPath(root).name or root}]
        lsp = LspClient(name, handle, request_timeout=self.settings.request_timeout, settings=options, workspace_folders=folders)
        lsp.start()
        params = {"processId": None, "clientInfo": {"name": "osprey"}, "rootUri": path_uri(root), "rootPath": root,
                  "capabilities": client_capabilities(), "initializationOptions": options, "workspaceFolders": folders}
        try:
            answer = await lsp.request("initialize", params, timeout=self.settings.initialize_timeout)
            await lsp.notify("initialized", {})
            if options:
                await lsp.notify("workspace/didChangeConfiguration", {"settings": options})
        except BaseException:
            await asyncio.shield(lsp.close())
            raise
        lsp.capabilities = answer.get("capabilities", {}) if isinstance(answer, dict) else {}
        return Server(name, root, lsp)

    async def for_file(self, path: str) -> tuple[Server, bool]:
        name, config = self.server_for(path)
        root = await find_root(self.client, path, config.root_markers, self.roots)
        return await self.server(name, config, root)

    async def changed(self, path: str) -> None:
        """`path` was written: send its new text to every running server that has it open."""
        uri = path_uri(path)
        holders = [s for s in self.running.values() if uri in s.documents and s.lsp.alive]
        if not holders:
            return
        text = await read_text(self.client, path, self.roots)
        for server in holders:
            with contextlib.suppress(OspreyError):
                await server.sync(path, text)

    @staticmethod
    async def _close(server: Server) -> None:
        with contextlib.suppress(Exception):
            await server.lsp.close()

    async def close(self) -> None:
        """Shut every server down (shutdown, exit, then end its program)."""
        servers, self.running = list(self.running.values()), {}
        await asyncio.gather(*(self._close(s) for s in servers))
