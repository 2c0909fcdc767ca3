"""The nine base tools: eight through the ToolService, and `process` on the host."""

from __future__ import annotations

from pydantic import Field

from ..interception import TRUSTED_READ_ONLY
from .base import Invocation, RunFunction, Tool, ToolContext, ToolInput, ToolOutcome


class ReadFileInput(ToolInput):
    path: str = Field(description="File to read, relative to the working directory or absolute.")
    offset: int = Field(0, ge=0, description="First line to return (1-based). Omit to start at the top.")
    limit: int = Field(0, ge=0, description="Most lines to return (default 2000).")


async def _read_file(call: Invocation, ctx: ToolContext) -> str:
    a: ReadFileInput = call.input
    r = await ctx.client.read_file(a.path, a.offset, a.limit)
    if r.total_lines == 0:
        return f"{a.path} is empty."
    text = r.content
    if r.more:
        total = f"at least {r.total_lines}" if r.total_lines_is_lower_bound else f"{r.total_lines}"
        text += f"\n[lines {r.start_line}-{r.end_line} of {total}; call again with offset={r.end_line + 1} to read on]"
    if r.long_lines_cut:
        text += f"\n[{r.long_lines_cut} long lines were cut]"
    return text


class WriteFileInput(ToolInput):
    path: str = Field(description="File to create or overwrite; parent directories are created.")
    content: str = Field(description="The complete new content of the file.")


async def _write_file(call: Invocation, ctx: ToolContext) -> str:
    a: WriteFileInput = call.input
    r = await ctx.client.write_file(a.path, a.content)
    return f"{'Created' if r.created else 'Overwrote'} {a.path} ({r.bytes_written} bytes)."


class EditFileInput(ToolInput):
    path: str = Field(description="File to edit.")
    old_string: str = Field(description="Exact text to replace, including whitespace; it must occur exactly once unless replace_all is set.")
    new_string: str = Field(description="Text to put in its place.")
    replace_all: bool = Field(False, description="Replace every occurrence instead of exactly one.")


async def _edit_file(call: Invocation, ctx: ToolContext) -> str:
    a: EditFileInput = call.input
    r = await ctx.client.edit_file(a.path, a.old_string, a.new_string, a.replace_all)
    what = "1 occurrence" if r.replacements == 1 else f"{r.replacements} occurrences"
    return f"Edited {a.path}: replaced {what} (first at line {r.first_line})."


class BashInput(ToolInput):
    command: str = Field(description="A bash command line. It runs in the working directory with no input; output is stdout and stderr interleaved.")
    timeout_ms: int = Field(0, ge=0, le=600_000, description="Timeout in milliseconds (default 120000, at most 600000).")
    workdir: str = Field("", description="Directory to run in (default: the working directory).")


async def _bash(call: Invocation, ctx: ToolContext) -> ToolOutcome:
    a: BashInput = call.input
    r = await ctx.client.bash(a.command, timeout_ms=a.timeout_ms, workdir=a.workdir, max_output_bytes=ctx.bash_max_output_bytes, on_output=call.on_output)
    text = r.output.rstrip("\n")
    if r.timed_out:
        status = f"[timed out after {(a.timeout_ms or 120_000) / 1000:g} s; the command's process group was killed]"
    elif r.signal == 9:
        status = "[killed by signal 9 (SIGKILL): out of memory, or killed from outside]"
    elif r.signal:
        status = f"[killed by signal {r.signal}]"
    else:
        status = f"[exit code {r.exit_code}]"
    if r.killed_background:
        status += " [processes left running in the background were stopped; use the process tool for long-running work]"
    text = f"{text}\n{status}" if text else status
    failed = r.timed_out or r.signal != 0 or r.exit_code != 0
    return ToolOutcome(text, failed, "timeout" if r.timed_out else ("exit_status" if failed else None))


class FindFilesInput(ToolInput):
    pattern: str = Field(description="Glob such as '**/*.py' or 'src/**/test_*.py'; a pattern without '/' matches file names at any depth.")
    path: str = Field("", description="Directory to search (default: the working directory).")
    limit: int = Field(0, ge=0, description="Most paths to return (default 1000).")


async def _find_files(call: Invocation, ctx: ToolContext) -> str:
    a: FindFilesInput = call.input
    r = await ctx.client.find_files(a.pattern, a.path, a.limit)
    if not r.paths:
        return f"No files match {a.pattern!r}."
    text = "\n".join(r.paths)
    if r.truncated:
        text += f"\n[at least {r.total - len(r.paths)} more files match; narrow the pattern or raise limit]"
    return text


class GrepInput(ToolInput):
    pattern: str = Field(description="Regular expression to search for, line by line.")
    path: str = Field("", description="File or directory to search (default: the working directory).")
    glob: str = Field("", description="Only search files matching this glob, e.g. '*.py'.")
    ignore_case: bool = Field(False, description="Match without regard to case.")
    max_matches: int = Field(0, ge=0, description="Most matching lines to return (default 500).")


async def _grep(call: Invocation, ctx: ToolContext) -> str:
    a: GrepInput = call.input
    r = await ctx.client.grep(a.pattern, a.path, a.glob, a.ignore_case, a.max_matches)
    if not r.matches:
        return f"No matches for {a.pattern!r}."
    text = "\n".join(f"{m.path}:{m.line}:{m.text}" for m in r.matches)
    if r.truncated:
        text += f"\n[at least {r.total - len(r.matches)} more matching lines; narrow the pattern or path, or raise max_matches]"
    return text


class ListDirectoryInput(ToolInput):
    path: str = Field("", description="Directory to list (default: the working directory).")


async def _list_directory(call: Invocation, ctx: ToolContext) -> str:
    a: ListDirectoryInput = call.input
    r = await ctx.client.list_directory(a.path)
    if not r.entries:
        return f"{a.path or '.'} is empty."
    rows = []
    for e in r.entries:
        if e.kind == "directory":
            rows.append(f"{e.name}/")
        elif e.kind == "file":
            rows.append(f"{e.name}  ({e.size} bytes)")
        else:
            rows.append(f"{e.name}  ({e.kind})")
    return "\n".join(rows)


class TreeInput(ToolInput):
    path: str = Field("", description="Directory to draw (default: the working directory).")
    max_depth: int = Field(0, ge=0, le=20, description="Levels to descend (default 3).")


async def _tree(call: Invocation, ctx: ToolContext) -> str:
    a: TreeInput = call.input
    r = await ctx.client.tree(a.path, a.max_depth)
    return r.rendered + f"\n[{r.directories} directories, {r.files} files]"


def _trusted(name: str, description: str, model: type[ToolInput], run: RunFunction) -> Tool:
    assert name in TRUSTED_READ_ONLY
    return Tool.from_model(name, description, model, run, read_only=True, trusted=True)


def sandboxed_tools() -> list[Tool]:
    """The eight tools the ToolService serves, in both homes."""
    return [
        _trusted("read_file", "Read a text file with line numbers. Use offset and limit for long files.", ReadFileInput, _read_file),
        Tool.from_model("write_file", "Create or overwrite a file with the given content (atomic).", WriteFileInput, _write_file),
        Tool.from_model("edit_file", "Replace an exact string in a file. Read the file first and copy the text exactly.", EditFileInput, _edit_file),
        Tool.from_model("bash", "Run a bash command in the working directory and return its output and exit code.", BashInput, _bash),
        _trusted("find_files", "Find files by glob, honouring .gitignore.", FindFilesInput, _find_files),
        _trusted("grep", "Search file contents by regular expression, honouring .gitignore. Returns path:line:text.", GrepInput, _grep),
        _trusted("list_directory", "List one directory's entries with their sizes.", ListDirectoryInput, _list_directory),
        _trusted("tree", "Show a directory tree to a depth, honouring .gitignore.", TreeInput, _tree),
    ]


def base_tools(*, host_processes: bool) -> list[Tool]:
    """The base tool surface; `process` exists only where tools run on the host."""
    tools = sandboxed_tools()
    if host_processes:
        from .process import process_tool

        tools.insert(4, process_tool())
    return tools
