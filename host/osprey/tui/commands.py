"""Slash commands: the registry, parsing a line, and completing what is typed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("help", "/help", "List the commands."),
    Command("quit", "/quit", "Close the session and leave."),
    Command("new", "/new", "Close this session and start a fresh one."),
    Command("tools", "/tools", "The tools the model has, with their descriptions."),
    Command("status", "/status", "Provider, model, approval policy, tool home, session id and usage."),
    Command("approvals", "/approvals", "The saved approval rules that apply in this workspace."),
    Command("timestamps", "/timestamps", "Show or hide the times of messages."),
    Command("export", "/export [PATH]", "Write the transcript as Markdown to PATH (default: osprey-<session>.md)."),
    Command("copy", "/copy [all]", "Copy the last answer (or the whole transcript) to the clipboard."),
)
BY_NAME = {c.name: c for c in COMMANDS}


def parse(line: str) -> tuple[str, str] | None:
    """`("export", "notes.md")` for "/export notes.md"; None when the line is not a command."""
    text = line.strip()
    if not text.startswith("/") or text.startswith("//"):
        return None
    name, _, rest = text[1:].partition(" ")
    return name.lower(), rest.strip()


def matching(text: str) -> list[Command]:
    """The commands whose name starts with what was typed after `/` (all of them for a bare `/`)."""
    if not text.startswith("/") or " " in text or "\n" in text:
        return []
    prefix = text[1:].lower()
    return [c for c in COMMANDS if c.name.startswith(prefix)]


def complete(text: str) -> str | None:
    """The line with the command name completed (the common prefix of the matches), or None."""
    found = matching(text)
    if not found:
        return None
    if len(found) == 1:
        return f"/{found[0].name} "
    names = [c.name for c in found]
    common = names[0]
    for name in names[1:]:
        while not name.startswith(common):
            common = common[:-1]
    return f"/{common}" if len(common) > len(text) - 1 else None


def help_text() -> str:
    width = max(len(c.usage) for c in COMMANDS)
    return "\n".join(f"{c.usage.ljust(width)}  {c.help}" for c in COMMANDS)
