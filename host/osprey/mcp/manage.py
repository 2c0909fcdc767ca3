"""Managing MCP servers from the command line (`osprey mcp`): each declared server with its state
and tools (the servers that run are started where the settings say, listed, and closed), and
adding or removing a `[mcp_servers.NAME]` table of a config file.

A config file is changed in place: the server's table is cut out or appended, the rest of the file
kept as written (its comments too), the whole result checked as a configuration before the file
is replaced atomically, under a lock held on its directory."""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .. import tomlfile
from ..config.environment import carries_credential, is_secret_name
from ..config.mcp import McpServerConfig, McpServerSpec, server_name_problem
from ..errors import ConfigError
from ..terminal_text import clean

if TYPE_CHECKING:
    from ..config.schema import Settings
    from .connection import McpServer, McpServers

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,100}$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
# Header names whose values are credentials: given only as a variable's name (--env-header).
# What a token looks like, as opposed to a variable's name (GITHUB_TOKEN): long, with lower case and digits.
_TOKEN_LIKE = re.compile(r"^(?=.*[a-z])(?=.*[0-9]).{20,}$")
_SECRET_HEADER = re.compile(r"auth|token|secret|key|cookie|pass|credential|session|signature|jwt|bearer", re.IGNORECASE)
# Linear in the line: the key runs to the first `]`, and nothing before or after it can match the
# same characters two ways (its spaces are stripped afterwards).
_TABLE_HEADER = re.compile(r"^\s*\[\[?(?P<key>[^\]\n]*)\]\]?\s*(?:#.*)?$")
MAX_HEADER_LINE = 4096  # a longer line is never taken for a table's header
_KEY_PART = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^.\s\"']+")
SETTLE_SLACK_S = 2.0  # beyond the longest startup timeout, for the runners to report


# ---------------------------------------------------------------------------------------------
# Listing


@dataclass
class ToolReport:
    name: str
    read_only: bool  # the server's readOnlyHint, counted only for a trusted server
    offered: bool  # kept by enabled_tools / disabled_tools


@dataclass
class ServerReport:
    """One declared server: `state` is skipped (with `reason`), or the runtime's state once
    started (ready, failed with `reason`, ...)."""

    name: str
    origin: str
    state: str
    transport: str | None = None
    target: str | None = None  # the command line or the URL, as written (before ${VAR} expansion)
    trusted: bool | None = None
    reason: str | None = None
    tools: list[ToolReport] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _report(spec: McpServerSpec, server: _Frozen | None) -> ServerReport:
    report = ServerReport(spec.name, spec.origin, "not started", spec.transport, spec.target(), spec.trusted)
    if server is not None:
        report.state = server.state
        report.reason = server.error
        report.tools = [ToolReport(t.name, bool(t.read_only_hint and spec.trusted), spec.keeps(t.name)) for t in server.tools]
    return report


async def probe(settings: Settings, *, names: Sequence[str] | None = None) -> list[ServerReport]:
    """Every declared server (or those of `names`): the skipped ones with their reason, and the
    others started (stdio ones in the home the settings choose: the local dispatcher, or a lane
    with the sandbox on), given their startup timeouts, listed and closed."""
    wanted = set(names) if names is not None else None
    specs = [s for s in settings.mcp.servers if wanted is None or s.name in wanted]
    reports = {s.name: _report(s, None) for s in specs}
    reports.update({s.name: ServerReport(s.name, s.origin, "skipped", reason=s.reason)
                    for s in settings.mcp.skipped if wanted is None or s.name in wanted})
    if specs:
        for spec, server in zip(specs, await _start_and_list(settings, specs), strict=True):
            reports[spec.name] = _report(spec, server)
    return list(reports.values())


async def _start_and_list(settings: Settings, specs: list[McpServerSpec]) -> list[_Frozen]:
    from ..config import settings_tool_environment
    from .connection import McpServers

    timeout = max(s.startup_timeout_sec for s in specs) + SETTLE_SLACK_S
    if not any(s.transport == "stdio" for s in specs):
        servers = McpServers(specs, client=None, workdir=str(settings.cwd), restart_delays=())
        return await _run(servers, timeout)
    from ..toolservice.homes import open_tool_service

    async with open_tool_service([str(settings.cwd)], sandbox=settings.sandbox, session_id="mcp-list", home=settings.home,
                                 env=settings_tool_environment(settings)) as home:
        servers = McpServers(specs, client=home.client, workdir=str(settings.cwd), restart_delays=())
        return await _run(servers, timeout)


async def _run(servers: McpServers, timeout: float) -> list[_Frozen]:
    servers.start()
    try:
        await servers.wait_started(timeout)
        # What each server is and offers, as it stood before closing stops them all.
        snapshot = [_Frozen(s) for s in servers.servers.values()]
    finally:
        await asyncio.shield(servers.close())
    return snapshot


class _Frozen:
    """A server's state, error and tools as they were before the close."""

    def __init__(self, server: McpServer) -> None:
        self.state = server.state
        self.error = server.error
        self.tools = server.tools


def format_reports(reports: list[ServerReport]) -> str:
    """The text `osprey mcp list` prints: what comes from a server or a file (names, the command
    line, reasons and the stderr in them, tool names) without terminal control sequences."""
    if not reports:
        return "No MCP servers are configured. Add one with `osprey mcp add NAME -- COMMAND [ARGS...]` or `osprey mcp add NAME --url URL`."
    lines = []
    for r in reports:
        head = f"{clean(r.name)}  ({r.origin}{', ' + r.transport if r.transport else ''}{'' if r.trusted in (None, True) else ', untrusted'})  {clean(r.state)}"
        lines.append(head)
        if r.target:
            lines.append("  " + clean(r.target).replace("\n", " "))
        if r.reason:
            lines.append("  " + clean(r.reason).replace("\n", "\n  "))
        if r.tools:
            marks = [f"{clean(t.name).replace(chr(10), ' ')}{' (read-only)' if t.read_only else ''}{'' if t.offered else ' (not offered: enabled_tools/disabled_tools)'}"
                     for t in r.tools]
            lines.append(f"  tools ({len(r.tools)}): " + ", ".join(marks))
        elif r.state == "ready":
            lines.append("  tools: none")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Adding and removing


def config_file(home: Path, project_root: Path | None) -> Path:
    """The file `osprey mcp add/remove` change: the user's config.toml, or with a project root,
    that project's `.osprey/config.toml`."""
    return project_root / ".osprey" / "config.toml" if project_root is not None else home / "config.toml"


def _pairs(items: Sequence[str], sep: str, what: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, found, value = item.partition(sep)
        if not found:
            raise ConfigError(f"{what}: write it as {'NAME' if sep == '=' else 'Name'}{sep}{'VALUE' if sep == '=' else ' value'} (got {item[:80]!r})")
        out.append((key.strip(), value.strip() if sep == ":" else value))
    return out


def server_table(*, command: Sequence[str] = (), url: str | None = None, env: Sequence[str] = (),
                 bearer_token_env_var: str | None = None, headers: Sequence[str] = (), env_headers: Sequence[str] = ()) -> dict[str, Any]:
    """The `[mcp_servers.NAME]` table the options of `osprey mcp add` describe; a ConfigError says
    what is wrong with them."""
    if command and url:
        raise ConfigError("give either a command (after --) or --url, not both")
    if not command and not url:
        raise ConfigError("give the server's command after -- (osprey mcp add NAME -- COMMAND [ARGS...]) or its --url")
    if command and (bearer_token_env_var or headers or env_headers):
        raise ConfigError("--bearer-token-env-var, --header and --env-header are for HTTP servers (--url)")
    if url and env:
        raise ConfigError("--env is for stdio servers (a command); an HTTP server reads no environment of ours")
    table: dict[str, Any] = {}
    if command:
        table["command"] = command[0]
        if len(command) > 1:
            table["args"] = list(command[1:])
        pairs = _pairs(env, "=", "--env")
        for key, value in pairs:
            if not _ENV_NAME.match(key):
                raise ConfigError(f"--env: {key[:80]!r} is not a variable name (letters, digits and '_', not starting with a digit)")
            if is_secret_name(key) or carries_credential(value):
                raise ConfigError(
                    f"--env {key}: that looks like a credential, and a credential is never written into a file. Put it in your "
                    f"environment or $OSPREY_HOME/.env instead, and let the server read it: add {key!r} to `passthrough` under "
                    f"[shell_environment] (the model's commands then see it too), or declare the server in the project's .mcp.json "
                    f"with \"env\": {{\"{key}\": \"${{{key}}}\"}} and trust the file (`osprey trust`)")
        if pairs:
            table["env"] = dict(pairs)
    else:
        table["url"] = url
        if bearer_token_env_var is not None:
            if not _ENV_NAME.match(bearer_token_env_var) or _TOKEN_LIKE.match(bearer_token_env_var):
                raise ConfigError("--bearer-token-env-var takes the NAME of the variable that holds the token (e.g. GITHUB_TOKEN), "
                                  "never the token itself: a token is read from the environment, not written into a file")
            table["bearer_token_env_var"] = bearer_token_env_var
        literal = {}
        for name, value in _pairs(headers, ":", "--header"):
            if not _HEADER_NAME.match(name):
                raise ConfigError(f"--header: {name[:80]!r} is not a header name")
            if _SECRET_HEADER.search(name) or carries_credential(value):
                raise ConfigError(f"--header {name}: a credential is never written into a file; put it in a variable and give "
                                  f"--env-header '{name}=VARIABLE' (or --bearer-token-env-var VARIABLE for a bearer token)")
            literal[name] = value
        if literal:
            table["http_headers"] = literal
        from_env = {}
        for name, var in _pairs(env_headers, "=", "--env-header"):
            if not _HEADER_NAME.match(name) or not _ENV_NAME.match(var):
                raise ConfigError(f"--env-header: write it as Header-Name=VARIABLE (got {name[:80]}={var[:80]})")
            from_env[name] = var
        if from_env:
            table["env_http_headers"] = from_env
    try:
        problem = McpServerConfig.model_validate(table).problem()
    except ValidationError as exc:
        problem = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'server'}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors()[:5])
    if problem:
        raise ConfigError(problem)
    return table


def check_name(name: str) -> None:
    """A ConfigError when `name` cannot name a server (`server_name_problem`)."""
    problem = server_name_problem(name)
    if problem:
        raise ConfigError(problem)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Serialise changes to a config file between processes (a lock on its directory)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    """The file's text and its parsed data (both empty when there is no file)."""
    from ..config.editing import read_for_edit

    return read_for_edit(path, "its MCP servers")


def _header_path(key: str) -> list[str]:
    return [part.strip("\"'") for part in _KEY_PART.findall(key)]


def _without_table(text: str, name: str) -> str:
    """`text` without the `[mcp_servers.NAME]` table and its sub-tables."""
    kept: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        header = _TABLE_HEADER.match(line) if len(line) <= MAX_HEADER_LINE else None
        if header is not None:
            skipping = _header_path(header.group("key").strip())[:2] == ["mcp_servers", name]
        if not skipping:
            kept.append(line)
    return "".join(kept)


def _table_text(name: str, table: Mapping[str, Any]) -> str:
    lines = [f"[mcp_servers.{tomlfile.toml_key(name)}]"]
    lines += [f"{tomlfile.toml_key(key)} = {tomlfile.toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


@dataclass
class Changed:
    """What `add_server` / `remove_server` did: the file written (a symlink's target), whether a
    server was replaced, and whether the file was written out from its data (its comments lost)."""

    written: Path
    replaced: bool = False
    rewritten: bool = False


def _destination(path: Path) -> Path:
    """The file to write for `path`: itself, or the target of a symlink (a config kept in one's
    dotfiles) when that is a regular file of this user; anything else is a ConfigError."""
    if not path.is_symlink():
        return path
    target = path.resolve()
    try:
        info = target.stat()
    except OSError:
        info = None
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        raise ConfigError(f"{path} is a symlink to {target}, which is not a regular file of yours, so it was not changed; "
                          "edit that file by hand, or replace the link with a regular file")
    return target


def _write(path: Path, text: str, wanted: dict[str, Any]) -> Changed:
    from ..config.schema import FileConfig

    try:
        FileConfig.model_validate(wanted)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        raise ConfigError(f"{path} was not changed: the result would not be a valid configuration ({problems})") from None
    try:
        same = tomlfile.loads(text) == wanted
    except Exception:  # noqa: BLE001 - the line-wise edit did not keep the file whole: written from its data instead
        same = False
    if not same:
        # The file spells its servers in a way the cut cannot keep apart (dotted keys, an inline
        # table): its values are kept, its comments and layout are not.
        text = tomlfile.dumps_toml(wanted)
    destination = _destination(path)
    try:
        tomlfile.write_atomic(destination, text)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"could not write {destination}: {getattr(exc, 'strerror', None) or exc}") from None
    return Changed(destination, rewritten=not same)


def add_server(path: Path, name: str, table: Mapping[str, Any], *, force: bool = False) -> Changed:
    """Write `[mcp_servers.NAME]` into the config file at `path` (`replaced` when it replaced one,
    with `force`). An existing server without `force` is a ConfigError."""
    check_name(name)
    with _locked(path.parent):
        text, data = _read(path)
        servers = data.get("mcp_servers")
        existed = isinstance(servers, Mapping) and name in servers
        if existed and not force:
            raise ConfigError(f"{path} already declares the MCP server {name!r}; remove it first (`osprey mcp remove {name}`) or pass --force to replace it")
        wanted = {**data, "mcp_servers": {**(servers if isinstance(servers, Mapping) else {}), name: dict(table)}}
        kept = _without_table(text, name) if existed else text
        new = kept.rstrip("\n") + ("\n\n" if kept.strip() else "") + _table_text(name, table)
        changed = _write(path, new, wanted)
    changed.replaced = existed
    return changed


def remove_server(path: Path, name: str) -> Changed:
    """Remove `[mcp_servers.NAME]` from the config file at `path`; a ConfigError naming the file's
    servers when it declares no such server."""
    with _locked(path.parent):
        text, data = _read(path)
        found = data.get("mcp_servers")
        servers: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        if name not in servers:
            have = ", ".join(sorted(servers)) if servers else "none"
            raise ConfigError(f"{path} declares no MCP server {name[:80]!r} (its servers: {have})")
        rest = {k: v for k, v in servers.items() if k != name}
        wanted = {**data, "mcp_servers": rest} if rest else {k: v for k, v in data.items() if k != "mcp_servers"}
        return _write(path, _without_table(text, name), wanted)
