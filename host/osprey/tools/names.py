"""Every built-in tool's name, the conditional ones included, in one place.

Custom tools (`tools/*.toml`), the tools `extension_manage` writes and, once they exist, workflows
cannot take one of these names, whether or not that tool is on in a session: a custom tool named
`web_search` would otherwise shadow the real one in the next session that configures a search
service. A new built-in tool is added here (tests/test_extension_names.py builds sessions with
every option on and fails for a tool this list lacks).
"""

from __future__ import annotations

# name -> when a session offers it (shown in the refusal, so a person sees why the name is taken)
BUILTIN_TOOLS: dict[str, str] = {
    # the file and process tools (both homes; `process` where tools run on the host)
    "read_file": "always",
    "write_file": "always",
    "edit_file": "always",
    "bash": "always",
    "process": "when tools run on the host",
    "find_files": "always",
    "grep": "always",
    "list_directory": "always",
    "tree": "always",
    # control and web tools
    "todo_write": "always",
    "task_status": "always",
    "question": "always",
    "switch_persona": "with a persona",
    "web_fetch": "always",
    "web_search": "when a search service is configured",
    # conditional tools
    "lsp": "when a language server is configured",
    "retrieve": "when tool results are kept for retrieval",
    "memory": "when a memory provider is active",
    "load_skill": "when skills are found",
    "session_search": "in a lead session with saved sessions",
    "extension_manage": "when extensions are on",
    # persona output contracts (the bundled terminal tools and the default one)
    "submit_result": "with a persona whose output contract names no tool",
    "submit_plan": "with the architect persona",
    "submit_verification": "with the verifier persona",
    "dev_tooling": "reserved for the development-tooling report",
    # subagents
    "spawn_subagent": "when subagents are on",
    "send_input": "when subagents are on",
    "wait_agent": "when subagents are on",
    "cancel_agent": "when subagents are on",
    # workflows
    "run_workflow": "when workflows are enabled",
    "propose_workflow": "when workflows are enabled",
    # MCP servers' resources
    "list_mcp_resources": "when a running MCP server offers resources",
    "read_mcp_resource": "when a running MCP server offers resources",
}

RESERVED: frozenset[str] = frozenset(BUILTIN_TOOLS)


def reserved_reason(name: str) -> str | None:
    """Why `name` cannot be a custom tool's or a workflow's name; None when it can."""
    when = BUILTIN_TOOLS.get(name)
    if when is None:
        return None
    offered = "every session offers it" if when == "always" else f"a session offers it {when}"
    return f"{name!r} is the name of a built-in tool ({offered}), which a custom tool or workflow cannot take, whether or not that tool is on in this session"
