"""MCP prompts as slash commands: `/mcp__SERVER__PROMPT ARGUMENTS` asks the server for its prompt
filled with the arguments and sends what it returns as the person's message.

The names are those of the ready servers' prompts, sanitized like tool names (letters, digits, `_`
and `-`) and in lower case, as every command's name. The text after the command fills the prompt's
declared arguments: words in declared order, or `key=value` words, quoted as in a shell. What the
server returns is untrusted: it is cleaned of control characters and cut to `MAX_PROMPT_CHARS`."""

from __future__ import annotations

import asyncio
import hashlib
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import OspreyError
from ..terminal_text import clean

if TYPE_CHECKING:
    from .connection import McpServers

PREFIX = "mcp__"
MAX_PROMPT_CHARS = 100_000  # of the rendered prompt sent to the model
MAX_ARGUMENTS_CHARS = 100_000  # of the text typed after the command
MAX_NAME_CHARS = 128  # of a command's name
MAX_DESCRIPTION_CHARS = 160  # of a description in the menu and /help
MAX_ARGUMENTS_SHOWN = 16  # of a prompt's arguments its usage names
DEFAULT_TIMEOUT = 60.0  # seconds for `prompts/get` when the server names none
TIMEOUT_MARGIN = 1.5  # seconds past the server's own bound on the request
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_KEYED = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]{0,127})=(.*)$", re.DOTALL)
# Control characters but newline and tab (terminal sequences start with ESC), and the bidi overrides.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]+")


class McpPromptError(OspreyError):
    """An MCP prompt command could not be run: its arguments, or the server's answer."""


class PromptInfo(Protocol):
    """What a server says of one of its prompts (`McpPromptInfo`)."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str | None: ...
    @property
    def arguments(self) -> Sequence[tuple[str, str | None, bool]]: ...


class PromptServer(Protocol):
    """The part of a running server (`McpServer`) the prompt commands use."""

    @property
    def spec(self) -> Any: ...
    @property
    def state(self) -> str: ...
    @property
    def prompts(self) -> Sequence[PromptInfo]: ...

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> list[tuple[str, str]]: ...


@dataclass(frozen=True)
class Argument:
    name: str  # as the server declares it (and is sent back)
    description: str
    required: bool

    @property
    def shown(self) -> str:
        """The name as the menu and /help show it: one line, bounded."""
        return _one_line(self.name, 64)


@dataclass(frozen=True)
class PromptCommand:
    """`/NAME`: the prompt `prompt` of the server `server`."""

    name: str
    server: str
    prompt: str
    description: str
    arguments: tuple[Argument, ...]

    @property
    def usage(self) -> str:
        """`/mcp__git__review FILE [FOCUS]`: required arguments bare, optional ones in brackets."""
        words = [a.shown.upper() if a.required else f"[{a.shown.upper()}]" for a in self.arguments[:MAX_ARGUMENTS_SHOWN]]
        return " ".join([f"/{self.name}", *words, *(["…"] if len(self.arguments) > MAX_ARGUMENTS_SHOWN else [])])

    @property
    def about(self) -> str:
        """One line for the menu and /help: the description, then the arguments' names."""
        text = self.description or f"The prompt {_one_line(self.prompt, 64)} of the MCP server {self.server}."
        if self.arguments:
            names = [a.shown + ("" if a.required else "?") for a in self.arguments[:MAX_ARGUMENTS_SHOWN]]
            text += " (arguments: " + ", ".join(names) + (", …" if len(self.arguments) > MAX_ARGUMENTS_SHOWN else "") + ")"
        return text


def sanitized(name: str) -> str:
    """A name as a part of a command's name: every other character becomes `_`."""
    return _UNSAFE.sub("_", name)


def command_name(server: str, prompt: str) -> str:
    """`mcp__server__prompt`, in lower case (what is typed after `/` is read in lower case)."""
    return f"{PREFIX}{sanitized(server)}__{sanitized(prompt)}".lower()[:MAX_NAME_CHARS]


def _one_line(text: str | None, limit: int) -> str:
    return " ".join(_CONTROL.sub(" ", text or "").split())[:limit]


def commands_of(servers: Iterable[PromptServer]) -> list[PromptCommand]:
    """The prompt commands of the ready servers, in their order; a name another prompt has already
    taken once sanitized (`Review` and `review`) ends with a short hash of the prompt's real name,
    the same in every session."""
    found: dict[str, PromptCommand] = {}
    for server in servers:
        if server.state != "ready":
            continue
        server_name = str(server.spec.name)
        for info in server.prompts:
            name = command_name(server_name, str(info.name))
            if name in found:
                digest = hashlib.sha256(f"{server_name}\0{info.name}".encode("utf-8", "surrogatepass")).hexdigest()[:8]
                name = f"{name[:MAX_NAME_CHARS - 9]}_{digest}"
                if name in found:
                    continue  # the same prompt listed twice
            arguments = tuple(Argument(str(a[0]), _one_line(a[1], MAX_DESCRIPTION_CHARS), bool(a[2]))
                              for a in (info.arguments or ()))
            found[name] = PromptCommand(name, server_name, str(info.name), _one_line(info.description, MAX_DESCRIPTION_CHARS), arguments)
    return list(found.values())


def prompt_commands(mcp: McpServers | None) -> list[PromptCommand]:
    """The prompt commands of a session's MCP servers (`Session.mcp`, None without servers)."""
    if mcp is None:
        return []
    return commands_of(list(mcp.servers.values()))


def _usage_line(command: PromptCommand) -> str:
    usage = f"usage: {command.usage}"
    if command.arguments:
        usage += "; or name them: " + " ".join(f"{a.shown}=VALUE" for a in command.arguments[:MAX_ARGUMENTS_SHOWN])
    return usage


def parse_arguments(command: PromptCommand, text: str) -> dict[str, str]:
    """The prompt's arguments from what was typed after the command: `key=value` words name one;
    the other words fill the arguments not named, in declared order. Raises `McpPromptError` for
    an unknown or repeated name, too many words, or a required argument left out."""
    if len(text) > MAX_ARGUMENTS_CHARS:
        raise McpPromptError(f"/{command.name}: the arguments are {len(text):,} characters; at most {MAX_ARGUMENTS_CHARS:,} are taken")
    try:
        words = shlex.split(text)
    except ValueError as exc:  # an unclosed quotation mark
        raise McpPromptError(f"/{command.name}: {exc}; {_usage_line(command)}") from None
    declared = {a.name: a for a in command.arguments}
    named: dict[str, str] = {}
    loose: list[str] = []
    for word in words:
        keyed = _KEYED.match(word)
        if keyed is None:
            loose.append(word)
            continue
        key, value = keyed.groups()
        if key not in declared:
            known = ", ".join(a.shown for a in command.arguments[:MAX_ARGUMENTS_SHOWN]) or "none"
            raise McpPromptError(f"/{command.name}: it has no argument {key!r} (its arguments: {known}); a value holding '=' "
                                 f"is given by name, as in {command.arguments[0].shown if command.arguments else 'NAME'}='{word[:100]}'; "
                                 f"{_usage_line(command)}")
        if key in named:
            raise McpPromptError(f"/{command.name}: the argument {key!r} is given twice; {_usage_line(command)}")
        named[key] = value
    free = [a for a in command.arguments if a.name not in named]
    if len(loose) > len(free):
        extra = " ".join(shlex.quote(w) for w in loose[len(free):])[:200]
        what = "it takes no arguments" if not command.arguments else f"too many values ({extra} left over); quote a value holding spaces"
        raise McpPromptError(f"/{command.name}: {what}; {_usage_line(command)}")
    named.update((argument.name, value) for argument, value in zip(free, loose, strict=False))
    missing = [a.name for a in command.arguments if a.required and a.name not in named]
    if missing:
        missing = [_one_line(m, 64) for m in missing[:MAX_ARGUMENTS_SHOWN]]
        raise McpPromptError(f"/{command.name}: the required argument{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                             f"{'are' if len(missing) > 1 else 'is'} missing; {_usage_line(command)}")
    return {a.name: named[a.name] for a in command.arguments if a.name in named}


def render(messages: Sequence[tuple[str, str]], *, limit: int = MAX_PROMPT_CHARS) -> str:
    """One prompt text from the prompt's messages: joined by blank lines, an assistant's marked as
    such; cleaned of terminal sequences and control characters, and cut to `limit` with a note."""
    parts = []
    for role, content in messages:
        body = clean(content)
        parts.append(body if role == "user" else f"[{_one_line(role, 32) or 'assistant'} message]\n{body}")
    text = "\n\n".join(parts).strip()
    if len(text) > limit:
        text = text[:limit] + f"\n[cut: {len(text) - limit:,} more characters of the prompt]"
    return text


def _server(mcp: McpServers | None, name: str) -> PromptServer:
    server = None if mcp is None else mcp.servers.get(name)
    if server is None:
        raise McpPromptError(f"the MCP server {name} is not part of this session")
    if server.state != "ready":
        error = f": {_one_line(server.error, 300)}" if server.error else ""
        raise McpPromptError(f"the MCP server {name} is {server.state}{error}; /status shows its state")
    return server


async def run_prompt(mcp: McpServers | None, command: PromptCommand, text: str) -> str:
    """The text `/NAME TEXT` sends: the arguments parsed, the prompt got from its server (within
    the server's tool timeout), its messages rendered. Raises `McpPromptError`."""
    arguments = parse_arguments(command, text)
    server = _server(mcp, command.server)
    # The server bounds its own request by its tool timeout; this bounds a server that never gives up.
    timeout = float(server.spec.tool_timeout_sec or DEFAULT_TIMEOUT) + TIMEOUT_MARGIN
    try:
        async with asyncio.timeout(timeout):
            messages = await server.get_prompt(command.prompt, arguments)
    except TimeoutError:
        raise McpPromptError(f"/{command.name}: the MCP server {command.server} did not return the prompt within {timeout:g} s") from None
    except OspreyError as exc:
        raise McpPromptError(f"/{command.name}: {exc}") from exc
    rendered = render(messages)
    if not rendered:
        raise McpPromptError(f"/{command.name}: the MCP server {command.server} returned an empty prompt")
    return rendered


def find(commands: Iterable[PromptCommand], name: str) -> PromptCommand | None:
    """The command `/NAME` (read in lower case)."""
    wanted = name.lower()
    return next((c for c in commands if c.name == wanted), None)
