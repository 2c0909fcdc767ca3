"""Slash commands: the registry, parsing a line, and completing what is typed."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("help", "/help [tools]", "List the commands; /help tools lists the tools the model has, with their descriptions."),
    Command("quit", "/quit", "Close the session and leave."),
    Command("new", "/new", "Close this session and start a fresh one."),
    Command("tools", "/tools", "Show or hide the finished tool rows (running ones stay); /help tools lists the tools."),
    Command("status", "/status", "Provider, model, approval policy, tool home, session id, usage, the number of tools, and the MCP servers' state."),
    Command("approvals", "/approvals", "Manage the saved approval rules that apply in this workspace: list, add and revoke them."),
    Command("timestamps", "/timestamps", "Show or hide the times of messages."),
    Command("export", "/export [PATH]", "Open the Markdown export dialog (path, with or without tool output); /export PATH writes at once."),
    Command("copy", "/copy [all]", "Copy the last answer (or the whole transcript) to the clipboard."),
    Command("model", "/model [NAME]", "Pick a model of this provider from the catalog, or switch to NAME."),
    Command("provider", "/provider NAME", "Switch to another provider (openai, anthropic) with its default model."),
    Command("effort", "/effort LEVEL", "Reasoning effort: minimal, low, medium, high, or off."),
    Command("moa", "/moa PROMPT", "Several models answer PROMPT in parallel and one merges them (the default preset); the session's model stays."),
    Command("moa-config", "/moa-config", "Manage the Mixture of Agents presets: list, add, edit, delete, pick the default."),
    Command("verify", "/verify", "Re-arm the verification checkpoint and have the agent audit the current task (not while it works)."),
    Command("compact", "/compact [INSTRUCTIONS]", "Replace the conversation with a summary the model writes."),
    Command("session", "/session", "This session's id, title, journal, turns and usage; rename, fork from here, or delete it."),
    Command("sessions", "/sessions", "The journaled sessions by directory; Enter on one resumes it."),
    Command("diff", "/diff", "The workspace's git diff (stat and patch)."),
    Command("sync", "/sync", "With a lane on another machine: bring back what it changed so far (conflicts are written beside your files)."),
    Command("debug", "/debug", "A dialog with version, date, system, terminal, session and model; shows or hides the raw events."),
    Command("extensions", "/extensions", "The custom tools loaded from the extension layers, the MCP servers, and what was left out."),
    Command("reload", "/reload", "Find the extensions (tools, hooks, prompts) again at the next turn boundary."),
    Command("agents", "/agents [PERSONA]", "Switch personas (from the next turn) or open the persona picker."),
    Command("skills", "/skills", "List the discovered skills; each project and user skill is also a command, /NAME [REQUEST]."),
    Command("skill", "/skill NAME", "Show a discovered skill's name, scope, description and path."),
    Command("bug-report", "/bug-report [WHAT]", "Interview you about a problem and, when you confirm, file an Osprey issue (or give a prefilled link)."),
    Command("run", "/run PATH [ARGS]", "Start the workflow in a .js file with ARGS; its result enters the conversation when it ends."),
    Command("workflows", "/workflows", "The running workflows and their agents' progress; each discovered workflow is also /NAME [ARGS]."),
    Command("deep-research", "/deep-research QUESTION", "Research QUESTION on the web with parallel agents; a report citing its sources by URL."),
)
BY_NAME = {c.name: c for c in COMMANDS}
# The commands `[workflows] enabled = false` removes (with the discovered workflow commands).
WORKFLOW_COMMANDS = frozenset({"run", "workflows", "deep-research"})


def parse(line: str) -> tuple[str, str] | None:
    """`("export", "notes.md")` for "/export notes.md"; None when the line is not a command."""
    text = line.strip()
    if not text.startswith("/") or text.startswith("//"):
        return None
    name, _, rest = text[1:].partition(" ")
    return name.lower(), rest.strip()


def matching(text: str, *, extra: Sequence[Command] = (), hidden: Collection[str] = ()) -> list[Command]:
    """The commands whose name starts with what was typed after `/` (all of them for a bare `/`):
    the built-in ones but `hidden`, then `extra` (a session's workflow commands)."""
    if not text.startswith("/") or " " in text or "\n" in text:
        return []
    prefix = text[1:].lower()
    return [c for c in (*COMMANDS, *extra) if c.name.startswith(prefix) and c.name not in hidden]


def complete(text: str, *, extra: Sequence[Command] = (), hidden: Collection[str] = ()) -> str | None:
    """The line with the command name completed (the common prefix of the matches), or None."""
    found = matching(text, extra=extra, hidden=hidden)
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


def help_text(*, extra: Sequence[Command] = (), hidden: Collection[str] = ()) -> str:
    width = max(len(c.usage) for c in (*COMMANDS, *extra))
    lines = [f"{c.usage.ljust(width)}  {c.help}" for c in COMMANDS if c.name not in hidden]
    if extra:
        lines += ["", "Workflows:"] + [f"{c.usage.ljust(width)}  {c.help}" for c in extra]
    return "\n".join(lines)

