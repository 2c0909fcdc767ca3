"""Approval rules, `Tool(pattern)`: which tool calls a saved "allow always" covers.

- `read_file`, `bash`, `mcp.server.tool`: a bare name covers every call of that tool.
- `bash(git diff *)`, `process(npm run test:*)`, `bash(git status)`: a command prefix, in shell
  words. A last word `*` (or a last word ending in `:*`) stands for any further arguments; without
  it the words must be the whole command. A command line is covered only when every simple command
  in it matches, so `bash(git status)` does not cover `git status && curl x | sh`; a `for` loop's
  header counts as a command. A line that runs code no argv word shows (`shell.coverage_hazard`:
  a substitution left as text, an evaluated subscript, `${x@P}`...) or writes a file through a
  redirection is never covered, and a call whose `workdir` is another directory is covered only
  when neither its programs nor the rule's words are relative paths.
- `write_file(src/**)`, `read_file(docs/*.md)`: a path glob relative to the workspace root (`**`
  any number of segments, `*` any characters within one segment, `?` one character). The call's
  path is taken relative to the call's working directory and normalised without touching the
  filesystem; a path outside the workspace is never covered by a pattern.
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_PATTERN = 1024  # characters in a pattern
MAX_PATH = 4096  # a longer call path is never covered by a path pattern
MAX_COMMAND = 64 * 1024  # a longer command line is never covered by a command pattern

COMMAND_TOOLS = ("bash", "process")
PATH_TOOLS = ("read_file", "write_file", "edit_file", "find_files", "grep", "list_directory", "tree")

SYNTAX = (
    "a rule is a tool name (`read_file`), a command prefix (`bash(git diff *)`, `bash(git status)`, "
    "`process(npm run test:*)`) or a workspace path glob (`write_file(src/**)`, `read_file(docs/*.md)`)"
)


class RuleError(ValueError):
    """A rule's text is not a valid rule; the message says what is wrong and shows the syntax."""


def _fail(text: str, what: str) -> RuleError:
    shown = text if len(text) <= 80 else text[:77] + "..."
    return RuleError(f"invalid rule {shown!r}: {what}; {SYNTAX}")


@dataclass(frozen=True)
class Rule:
    """One parsed rule. `pattern` is None for a bare tool name, else its canonical form."""

    tool: str
    pattern: str | None = None

    @classmethod
    def parse(cls, text: str) -> Rule:
        """Parse `Tool` or `Tool(pattern)`; raises RuleError saying what is wrong."""
        if not isinstance(text, str):
            raise RuleError(f"a rule is text, not {type(text).__name__}; {SYNTAX}")
        if len(text) > MAX_PATTERN + 80:
            raise _fail(text, f"longer than {MAX_PATTERN} characters")
        stripped = text.strip()
        if not stripped:
            raise _fail(text, "it is empty")
        open_at = stripped.find("(")
        if open_at < 0:
            if stripped.endswith(")"):
                raise _fail(text, "a ')' without '('")
            cls._check_name(text, stripped)
            return cls(stripped, None)
        name, body = stripped[:open_at].rstrip(), stripped[open_at + 1:]
        cls._check_name(text, name)
        if not body.endswith(")"):
            raise _fail(text, "the pattern must end with ')'")
        raw = body[:-1].strip()
        if not raw:
            raise _fail(text, f"the pattern is empty; write `{name}` alone to cover every call of {name}")
        if len(raw) > MAX_PATTERN:
            raise _fail(text, f"the pattern is longer than {MAX_PATTERN} characters")
        if name in COMMAND_TOOLS:
            words, rest = _command_pattern(text, raw)
            return cls(name, _join_command(words, rest))
        if name in PATH_TOOLS:
            return cls(name, _join_path(*_path_pattern(text, raw)))
        raise _fail(text, (
            f"{name} takes no pattern: patterns are only for {', '.join(COMMAND_TOOLS)} (commands) and "
            f"{', '.join(PATH_TOOLS)} (paths); tool names are case-sensitive. Write `{name}` alone to cover every call"
        ))

    @staticmethod
    def _check_name(text: str, name: str) -> None:
        if not NAME.fullmatch(name):
            raise _fail(text, f"{name!r} is not a tool name (letters, digits, '_', '.', '-', at most 64)")

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}({self.pattern})"

    def check_workspace(self, workspace: str) -> None:
        """Raise RuleError when an absolute path pattern lies outside `workspace` (so it could never
        cover anything there)."""
        if self.tool not in PATH_TOOLS or self.pattern is None or not self.pattern.startswith("/"):
            return
        if _relative_segments(_path_parts(self.pattern)[1], _norm_abs(workspace)) is None:
            raise RuleError(
                f"invalid rule {str(self)!r}: the absolute path {self.pattern} is outside the workspace "
                f"{workspace}; give a path relative to the workspace root, such as `{self.tool}(src/**)`"
            )

    def covers(self, tool: str, arguments: Mapping[str, Any], *, cwd: str, workspace: str) -> bool:
        """Whether this rule pre-approves calling `tool` with `arguments` from `cwd` in `workspace`."""
        if tool != self.tool:
            return False
        if self.pattern is None:
            return True
        if not isinstance(arguments, Mapping):
            return False
        try:
            if tool in COMMAND_TOOLS:
                return _covers_command(self.pattern, arguments, cwd)
            if tool in PATH_TOOLS:
                return _covers_path(self.pattern, arguments, cwd, workspace)
        except RuleError:  # a Rule built by hand with a pattern `parse` would refuse
            return False
        return False


# ---------------------------------------------------------------------------------------------
# Command prefixes


def _command_pattern(text: str, raw: str) -> tuple[list[str], bool]:
    """Words and whether any further arguments may follow ("rest"). A `*` or `:*` ending counts
    only when it is unquoted and unescaped: `bash(echo '*')` is the literal word."""
    try:
        words = shlex.split(raw)
    except ValueError as exc:
        raise _fail(text, f"the command pattern cannot be split into words ({exc})") from None
    if not words:
        raise _fail(text, "the command pattern has no words")
    if raw == "*" or (raw.endswith("*") and raw[-2].isspace() and _split_or_none(raw[:-1]) == words[:-1] and words[-1] == "*"):
        return words[:-1], True
    if raw.endswith(":*"):
        body = _split_or_none(raw[:-2])
        if body and body[:-1] == words[:-1] and words[-1] == body[-1] + ":*":
            return body, True
        if words[-1] == ":*":
            raise _fail(text, "':*' must directly follow a word, as in `npm run test:*`")
    return words, False


def _split_or_none(text: str) -> list[str] | None:
    try:
        return shlex.split(text)
    except ValueError:
        return None


@functools.lru_cache(maxsize=512)
def _command_parts(pattern: str) -> tuple[tuple[str, ...], bool]:
    words, rest = _command_pattern(pattern, pattern)
    return tuple(words), rest


def _join_command(words: list[str], rest: bool) -> str:
    if not words:
        return "*"
    return shlex.join(words) + (" *" if rest else "")


def _argv_matches(words: tuple[str, ...], rest: bool, argv: list[str]) -> bool:
    if not isinstance(argv, list) or not all(isinstance(w, str) for w in argv):
        return False
    if rest:
        return len(argv) >= len(words) and tuple(argv[: len(words)]) == words
    return tuple(argv) == words


def _covers_command(pattern: str, arguments: Mapping[str, Any], cwd: str) -> bool:
    command = arguments.get("command")
    if not isinstance(command, str) or not command.strip() or len(command) > MAX_COMMAND:
        return False
    words, rest = _command_parts(pattern)
    commands = _simple_commands(command)
    if not commands:
        return False  # unparseable, empty, hiding code from its words, or writing a file through a redirection
    if not all(_argv_matches(words, rest, argv) for argv in commands):
        return False
    return _workdir_keeps_meaning(arguments.get("workdir"), cwd, words, commands)


def _workdir_keeps_meaning(workdir: Any, cwd: str, words: tuple[str, ...], commands: tuple[list[str], ...]) -> bool:
    """Whether the call's `workdir` leaves the rule's meaning alone: it is empty or names the call's
    working directory, or no program the line runs and no word the rule fixes is a relative path
    (`bash(./scripts/test)` approves the file in the working directory, not one in another)."""
    if workdir is None or workdir == "":
        return True
    if not isinstance(workdir, str):
        return False
    if _same_directory(workdir, cwd):
        return True
    fixed = list(words) + [argv[0] for argv in commands if argv]
    return not any(_relative_path(w) for w in fixed)


def _same_directory(workdir: str, cwd: str) -> bool:
    """`workdir` names `cwd` lexically, with no `..` (which a symlink could send elsewhere) and no
    backslash (the tool service reads `\\xNN` escapes in paths)."""
    if "\\" in workdir or "\x00" in workdir or len(workdir) > MAX_PATH:
        return False
    segments = [s for s in workdir.split("/") if s not in ("", ".")]
    if ".." in segments:
        return False
    if not workdir.startswith("/"):
        return not segments
    here = _norm_abs(cwd)
    return here is not None and segments == here


def _relative_path(word: str) -> bool:
    return "/" in word and not word.startswith(("/", "~"))


@functools.lru_cache(maxsize=64)
def _simple_commands(command: str) -> tuple[list[str], ...]:
    """The line's simple commands, or () when no command pattern may cover it: it cannot be
    parsed, it runs code no argv word shows (`shell.coverage_hazard`: a substitution the parser
    sees only as text, an evaluated subscript, `${x@P}`, `${!x}`...), or it writes a file through a
    redirection (`git status > ~/.bashrc` is not `git status`)."""
    from .shell import ShellParseError, commands_of, coverage_hazard, parse

    try:
        parsed = parse(command)
        if coverage_hazard(parsed) is not None or _writes_through_redirection(parsed):
            return ()
        commands = commands_of(parsed)
    except (ShellParseError, RecursionError, ValueError):
        return ()
    return tuple(commands)


_FD = re.compile(r"[0-9]+-?|-")


def _writes_through_redirection(parsed: Any) -> bool:
    """Whether any redirection in the line may write a file: every one except input (`<`),
    duplicating or closing a descriptor (`2>&1`, `>&-`) and /dev/null."""
    for cmd in parsed.commands:
        if cmd.kind != "redirect":
            continue
        operator = next((parsed.text(c) for c in cmd.node.children if not c.is_named), "")
        targets = [parsed.text(c) for c in cmd.node.children if c.is_named and c.type != "file_descriptor"]
        target = targets[-1] if targets else ""
        if operator in ("<", ">&-", "<&-") or target == "/dev/null":
            continue
        if operator in (">&", "<&") and _FD.fullmatch(target):
            continue
        return True
    return False


# ---------------------------------------------------------------------------------------------
# Path globs


def _path_pattern(text: str, raw: str) -> tuple[bool, list[str]]:
    """Whether the pattern is absolute, and its segments with '.' and empty ones dropped."""
    if "\x00" in raw:
        raise _fail(text, "the path pattern holds a NUL character")
    absolute = raw.startswith("/")
    segments = [s for s in raw.split("/") if s not in ("", ".")]
    if ".." in segments:
        raise _fail(text, "'..' is not allowed in a path pattern; write the path from the workspace root")
    return absolute, segments


@functools.lru_cache(maxsize=512)
def _path_parts(pattern: str) -> tuple[bool, list[str]]:
    return _path_pattern(pattern, pattern)


def _join_path(absolute: bool, segments: list[str]) -> str:
    if absolute:
        return "/" + "/".join(segments)
    return "/".join(segments) or "."


def _norm_abs(path: str) -> list[str] | None:
    """Segments of an absolute path, normalised lexically; None when `path` is not absolute."""
    if not path.startswith("/") or "\x00" in path:
        return None
    return [s for s in posixpath.normpath(path).split("/") if s]


def _relative_segments(path: list[str] | None, workspace: list[str] | None) -> list[str] | None:
    """`path` relative to `workspace` (both as segments), or None when it is not inside."""
    if path is None or workspace is None or path[: len(workspace)] != workspace:
        return None
    return path[len(workspace):]


def _covers_path(pattern: str, arguments: Mapping[str, Any], cwd: str, workspace: str) -> bool:
    path = arguments.get("path", "")
    if path is None:
        path = ""
    if not isinstance(path, str) or len(path) > MAX_PATH or len(cwd) > MAX_PATH:
        return False
    ws = _norm_abs(workspace)
    base = _norm_abs(cwd)
    if ws is None or base is None:
        return False
    target = _norm_abs(path) if path.startswith("/") else _norm_abs(posixpath.join(cwd, path))
    relative = _relative_segments(target, ws)
    if relative is None:
        return False  # outside the workspace: never covered by a pattern
    absolute, segments = _path_parts(pattern)
    if absolute:
        segments_in_ws = _relative_segments(segments, ws)
        if segments_in_ws is None:
            return False
        segments = segments_in_ws
    return match_segments(segments, relative)


def match_segments(pattern: list[str], path: list[str]) -> bool:
    """Whether path segments match pattern segments, where a `**` segment matches any number of
    segments (none included). Groups between `**` are placed leftmost-first, which is exact because
    `**` absorbs whatever lies between them; the cost is bounded by the product of the lengths."""
    groups: list[list[str]] = [[]]
    for seg in pattern:
        if seg == "**":
            groups.append([])
        else:
            groups[-1].append(seg)
    if len(groups) == 1:
        return len(path) == len(pattern) and all(match_segment(p, s) for p, s in zip(pattern, path, strict=True))
    first, middle, last = groups[0], groups[1:-1], groups[-1]
    if len(first) + len(last) > len(path):
        return False
    if not all(match_segment(p, s) for p, s in zip(first, path[:len(first)], strict=True)):
        return False
    end = len(path) - len(last)
    if not all(match_segment(p, s) for p, s in zip(last, path[end:], strict=True)):
        return False
    at = len(first)
    for group in middle:
        if not group:
            continue
        found = -1
        for start in range(at, end - len(group) + 1):
            if all(match_segment(p, s) for p, s in zip(group, path[start:start + len(group)], strict=True)):
                found = start
                break
        if found < 0:
            return False
        at = found + len(group)
    return True


def match_segment(pattern: str, text: str) -> bool:
    """Whether one path segment matches a pattern segment (`*` any run of characters, `?` one
    character, everything else literal). Chunks between stars are found leftmost-first."""
    chunks = pattern.split("*")
    if len(chunks) == 1:
        return len(text) == len(pattern) and _chunk_at(pattern, text, 0)
    head, middle, tail = chunks[0], chunks[1:-1], chunks[-1]
    if len(head) + len(tail) > len(text):
        return False
    if not _chunk_at(head, text, 0) or not _chunk_at(tail, text, len(text) - len(tail)):
        return False
    at, end = len(head), len(text) - len(tail)
    for chunk in middle:
        if not chunk:
            continue
        found = _find_chunk(chunk, text, at, end)
        if found < 0:
            return False
        at = found + len(chunk)
    return True


def _chunk_at(chunk: str, text: str, at: int) -> bool:
    if len(text) - at < len(chunk):
        return False
    return all(c == "?" or c == t for c, t in zip(chunk, text[at:at + len(chunk)], strict=True))


def _find_chunk(chunk: str, text: str, start: int, end: int) -> int:
    if "?" not in chunk:
        return text.find(chunk, start, end)
    for at in range(start, end - len(chunk) + 1):
        if _chunk_at(chunk, text, at):
            return at
    return -1
