"""Approval rules, `Tool(pattern)`: which tool calls a saved "allow always" covers.

- `read_file`, `bash`, `mcp.server.tool`: a bare name covers every call of that tool.
- `bash(git diff *)`, `process(npm run test:*)`, `bash(git status)`: a command prefix, in shell
  words. A last word `*` (or a last word ending in `:*`) stands for any further arguments; without
  it the words must be the whole command. A command line is covered only when every simple command
  in it matches, so `bash(git status)` does not cover `git status && curl x | sh`; a `for` loop's
  header counts as a command. A line that runs code no argv word shows (`shell.coverage_hazard`:
  a substitution left as text, an evaluated subscript, `${x@P}`...) or writes a file through a
  redirection is never covered, and a call whose `workdir` is another directory is covered only
  when neither its programs nor the rule's words are relative paths. A trailing `*` does not cover
  the options of git, pytest, npm, make, cargo and go that write elsewhere, run code or delete
  (`RISKY_OPTIONS`), nor a word the shell may expand into one.
- `write_file(src/**)`, `read_file(docs/*.md)`: a path glob relative to the workspace root (`**`
  any number of segments, `*` any characters within one segment, `?` one character), matched
  against the path the tool service will open (`opened_paths`: `\\xNN` escapes, `..` and symlinks
  resolved); a path outside the workspace is never covered by a pattern, and `.git`,
  `.gitmodules`, `.osprey` and `.env` only by a pattern that names them (`protected`).
"""

from __future__ import annotations

import bisect
import functools
import os
import posixpath
import re
import shlex
import stat
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
    if rest and any(risky_option(argv, len(words)) is not None for argv in commands):
        return False  # an option that writes elsewhere, runs code or deletes: not what `*` trusts
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
# Options a trailing `*` does not cover


@dataclass(frozen=True)
class RiskyOptions:
    """Options of one program that write outside what the command names, run other code or
    delete; a command prefix rule's trailing `*` does not cover them.

    `long` names are matched as written and by any prefix (`--out` for `--output`: the program
    may accept an abbreviation), except the names in `exact`, which are other options of the
    program. `short` letters count anywhere in a cluster (`-xpfoo` holds `-p`)."""

    long: tuple[str, ...]
    short: str = ""
    # Other options whose names are prefixes of a `long` name.
    exact: frozenset[str] = frozenset()
    # Long names match only in full (the program accepts no abbreviation).
    no_prefixes: bool = False
    # A single dash may start a long option too (`-toolexec`, npm's `-global`).
    single_dash_long: bool = False
    # `--` ends the options: the words after it are operands.
    dashdash_ends: bool = True
    # Words after `--` go to another program the rule does not name: not covered at all.
    dashdash_hands_on: bool = False
    # Words with `=` are variable definitions (make's `CC=...`, which may run anything).
    assignments: bool = False
    # Short letters that count only after these subcommands (git: `clone -u`, `rebase -x`).
    subcommand_short: Mapping[str, str] | None = None
    # Options before the subcommand that count (git's `-c`, `-C`); None: no subcommands.
    global_short: str | None = None
    # Subcommands that write configuration or run commands they are given (`git config`,
    # `git bisect run`, `npm config set`): not covered when a rule does not name the subcommand.
    risky_subcommands: frozenset[str] = frozenset()

    def shown(self, subcommand: str | None = None) -> list[str]:
        """The options, as docs and messages list them: all of them, or with a `subcommand` (git's
        `diff`) those that count after it."""
        dash = "-" if self.no_prefixes and self.single_dash_long else "--"
        if subcommand is None:
            shorts = self.short + (self.global_short or "") + "".join((self.subcommand_short or {}).values())
        else:
            shorts = self.short + (self.subcommand_short or {}).get(subcommand, "")
        return ([dash + n for n in self.long] + [f"-{c}" for c in dict.fromkeys(shorts)]
                + ([] if subcommand is not None else sorted(self.risky_subcommands)))


_GIT = RiskyOptions(
    long=(
        "output", "ext-diff", "exec-path", "upload-pack", "receive-pack", "config", "config-env", "output-directory",
        "exec", "template", "separate-git-dir", "open-files-in-pager", "extcmd", "git-dir", "work-tree", "namespace",
        "super-prefix", "env-filter", "tree-filter", "index-filter", "parent-filter", "msg-filter", "commit-filter",
        "tag-name-filter", "sendmail-cmd", "to-cmd", "cc-cmd", "header-cmd", "smtp-server", "no-index",
    ),
    exact=frozenset({"cc", "to", "index", "commit", "tag", "tree", "msg", "env", "parent", "name"}),
    subcommand_short={"clone": "cu", "format-patch": "o", "archive": "o", "rebase": "x", "grep": "O", "difftool": "x"},
    global_short="cC",
    risky_subcommands=frozenset({"config", "submodule", "bisect", "filter-branch", "filter-repo", "difftool", "mergetool",
                                 "credential", "hook", "daemon", "instaweb", "send-email", "alias"}),
)
_PYTEST = RiskyOptions(
    long=(
        "basetemp", "rootdir", "confcutdir", "override-ini", "config-file", "junitxml", "junit-xml", "debug", "log-file",
        "pastebin", "pdbcls", "result-log", "report-log", "html", "cov-report",
    ),
    short="pco",
    exact=frozenset({"co", "cov", "pdb"}),
)
_NPM = RiskyOptions(
    long=(
        "prefix", "script-shell", "node-options", "userconfig", "globalconfig", "global", "call", "git", "shell", "cache",
        "editor", "browser", "viewer", "onload-script", "init-module", "location", "registry", "dir", "cwd", "package",
        "global-dir", "global-folder", "store-dir", "modules-dir", "modules-folder", "virtual-store-dir", "node-arg",
    ),
    short="gcCp",
    risky_subcommands=frozenset({"config", "set", "exec", "x", "explore", "edit", "dlx"}),
    single_dash_long=True,
    dashdash_ends=False,
    dashdash_hands_on=True,
)
_MAKE = RiskyOptions(
    long=("file", "makefile", "directory", "eval", "include-dir"),
    short="fCEI",
    dashdash_ends=False,
    assignments=True,
)
_CARGO = RiskyOptions(
    long=("manifest-path", "config", "target-dir", "out-dir", "artifact-dir", "root", "git", "index", "lockfile-path"),
    short="ZC",
    no_prefixes=True,
)
_GO = RiskyOptions(
    long=(
        "exec", "toolexec", "o", "C", "modfile", "overlay", "pkgdir", "ldflags", "gcflags", "asmflags", "gccgoflags",
        "compiler", "coverprofile", "cpuprofile", "memprofile", "blockprofile", "mutexprofile", "trace", "outputdir",
        "fuzzcachedir", "vettool",
    ),
    no_prefixes=True,
    single_dash_long=True,
    dashdash_ends=False,
    global_short="",
    subcommand_short={"env": "wu"},  # `go env -w GOFLAGS=-toolexec=...` persists for every later go command
)

# Programs by name (the last part of the command word), and what `python -m NAME` runs.
RISKY_OPTIONS: Mapping[str, RiskyOptions] = {
    "git": _GIT, "pytest": _PYTEST, "py.test": _PYTEST, "npm": _NPM, "npx": _NPM, "pnpm": _NPM, "yarn": _NPM,
    "make": _MAKE, "gmake": _MAKE, "cargo": _CARGO, "go": _GO,
}
_PYTHON = re.compile(r"python(?:[0-9]+(?:\.[0-9]+)?)?")
_GLOB = re.compile(r"[*?\[]|\{[^}]*(?:,|\.\.)")
_GIT_GLOBAL_VALUE = frozenset({"-c", "-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"})


def program_options(argv: list[str], after: int = 0) -> tuple[str, RiskyOptions, int] | None:
    """The first program named in `argv` from index `after` on that has options a trailing `*` does
    not cover (as the command or as a word a runner runs: `uv run pytest`, `python3 -m pytest`):
    its name, its options and the index of its first argument."""
    for index in range(after, len(argv)):
        name = argv[index].rsplit("/", 1)[-1]
        if _PYTHON.fullmatch(name) and argv[index + 1:index + 2] == ["-m"] and index + 2 < len(argv):
            name, index = argv[index + 2], index + 2
        options = RISKY_OPTIONS.get(name)
        if options is not None:
            return name, options, index + 1
    return None


MAX_PROGRAMS = 3  # programs named in one command whose options are checked (`uv run --with git pytest`)


def risky_option(argv: list[str], fixed: int) -> str | None:
    """The first word at or after `fixed` (the words a rule names come before it) that is, or may
    become once the shell expands it, an option a trailing `*` does not cover, for any of the first
    MAX_PROGRAMS programs the command names; None when there is none."""
    start = 0
    for _ in range(MAX_PROGRAMS):
        found = program_options(argv, start)
        if found is None:
            return None
        _, options, start = found
        word = _risky_for(options, argv, start, fixed)
        if word is not None:
            return word
    return None


def _risky_for(options: RiskyOptions, argv: list[str], start: int, fixed: int) -> str | None:
    subcommand = _git_subcommand(argv, start) if options.global_short is not None else None
    if subcommand is not None and subcommand[0] >= fixed and subcommand[1] in options.risky_subcommands:
        return subcommand[1]
    if options.risky_subcommands and options.global_short is None:
        first = next((w for w in argv[start:] if not w.startswith("-")), None)
        if first is not None and first in options.risky_subcommands and argv.index(first, start) >= fixed:
            return first
    for index in range(start, len(argv)):
        word = argv[index]
        if word == "--":
            if index >= fixed and options.dashdash_hands_on:
                return word
            if options.dashdash_ends:
                return None
            continue
        if index < fixed:
            continue
        shorts = options.short
        if subcommand is not None:
            if index < subcommand[0]:
                shorts += options.global_short or ""
            else:
                shorts += (options.subcommand_short or {}).get(subcommand[1], "")
        if _risky_word(word, options, shorts):
            return word
    return None


def _git_subcommand(argv: list[str], start: int) -> tuple[int, str]:
    """Where git's subcommand is (after its global options) and its name; (len(argv), "") when none."""
    index = start
    while index < len(argv):
        word = argv[index]
        if not word.startswith("-"):
            return index, word
        index += 2 if word in _GIT_GLOBAL_VALUE else 1
    return len(argv), ""


def _risky_word(word: str, options: RiskyOptions, shorts: str) -> bool:
    if "$" in word or "`" in word:
        # Kept as source text: an expansion may become an option (or a make variable) the text
        # does not show, and an unquoted one is split into further words anywhere in the word
        # (`a$x` with x=`b --output=f`).
        return True
    if options.assignments and not word.startswith("-") and ("=" in word or _GLOB.search(word)):
        return True  # a variable definition, or a glob that may name a file called like one
    if word[:1] in ("*", "?", "[", "{") and _GLOB.search(word):
        return True  # a glob may expand to names of files that are options (`--output=x`)
    if not word.startswith("-") or word == "-":
        return False
    name = word.split("=", 1)[0]
    if not _plain(name):
        return True
    if name.startswith("--"):
        return _risky_long(name[2:], options)
    letters = name[1:]
    if options.single_dash_long and (options.no_prefixes or len(letters) > 1) and _risky_long(letters, options):
        return True
    return any(c in shorts for c in word[1:])


def _plain(name: str) -> bool:
    """An option name the shell leaves as it is (no quote, expansion or glob left in it)."""
    return not any(c in name for c in "\"'\\$`") and not _GLOB.search(name)


def _risky_long(name: str, options: RiskyOptions) -> bool:
    name = name.replace("_", "-")
    if not name or name in options.exact:
        return False
    if options.no_prefixes:
        return name in options.long or (name.startswith("test.") and name[5:] in options.long)
    return any(option.startswith(name) for option in options.long)


def describe(rule: Rule) -> str:
    """What a rule covers and what it does not, in a sentence or two for a person saving it."""
    if rule.pattern is None:
        return f"{rule} covers every call of {rule.tool}."
    if rule.tool in PATH_TOOLS:
        return (f"{rule} covers {rule.tool} on workspace paths matching {rule.pattern}, matched as the tool service "
                f"will open them (`..`, symlinks and `\\xNN` escapes resolved); never {', '.join(PROTECTED_NAMES)} "
                "or `.env.*` unless the pattern names them.")
    words, rest = _command_parts(rule.pattern)
    shown = shlex.join(words)
    if not rest:
        return f"{rule} covers exactly the command `{shown}` (a line only when each of its commands is covered)."
    if not words:
        return (f"{rule} covers every command Osprey can parse, except options of {', '.join(sorted(set(RISKY_OPTIONS)))} "
                "that write elsewhere, run code or delete (docs/approvals.md lists them).")
    lead = f"{rule} covers `{shown}` followed by any further arguments"
    found = program_options(list(words))
    if found is None:
        return f"{lead}, options included, whatever they do."
    name, options, start = found
    subcommand = None
    if options.global_short is not None:
        index, subcommand = _git_subcommand(list(words), start)
        subcommand = subcommand if index < len(words) else None
    listed = options.shown(subcommand)
    more = f" and {len(listed) - 8} more" if len(listed) > 8 else ""
    extra = "; nor a word the shell may expand into one of them"
    if options.dashdash_hands_on:
        extra += ", nor `--`, which hands the rest to another program"
    if options.assignments:
        extra += ", nor variable definitions (`NAME=value`)"
    return (f"{lead}, but not the {name} options that write elsewhere, run code or delete "
            f"({', '.join(listed[:8])}{more}; docs/approvals.md lists them){extra}. Those calls are asked about.")


# ---------------------------------------------------------------------------------------------
# Path globs


# Names no path pattern covers unless one of its segments names them literally: what runs code
# on the host (`.git`, `.gitmodules`, `.osprey`) or holds secrets (`.env`, `.env.local`...).
PROTECTED_NAMES = (".git", ".gitmodules", ".osprey", ".env")

# The tool service reads `\xNN` in a path argument as the byte NN when the path, read literally,
# names nothing (so a model can name a file whose name is not UTF-8). The same reading as the
# service's `paths.from_wire`, which the broker does not import.
_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")


def protected(segment: str) -> bool:
    """Whether a path segment is one no pattern covers unless it names it: `.git`, `.gitmodules`,
    `.osprey`, `.env` and `.env.*`, in any letter case (a file system may ignore it)."""
    folded = segment.casefold()
    return folded in PROTECTED_NAMES or folded.startswith(".env.")


def decode_escapes(path: str) -> str:
    """`path` with its `\\xNN` escapes read as bytes, as the tool service reads a path that names
    nothing literally (UnicodeEncodeError for a lone surrogate, which the service cannot take)."""
    raw = path.encode("utf-8")
    if not _ESCAPE.search(raw):
        return path
    return os.fsdecode(_ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw))


def opened_paths(path: str, cwd: str) -> list[str] | None:
    """The resolved absolute paths the tool service may open for the path argument `path` of a
    call made from `cwd`: `path` read literally and, when it holds `\\xNN` escapes, `path` with them
    decoded (the service takes the second when the first names nothing, which can change between
    now and the call), each joined to `cwd` with `..` and every symlink resolved as the service
    resolves them. None when the service would refuse the path or it cannot be resolved here
    (a NUL, a lone surrogate, an unreadable link), and for a regular file with other hard links
    (another name of the same file may lie anywhere)."""
    if "\x00" in path or len(path) > MAX_PATH or len(cwd) > MAX_PATH or not cwd.startswith("/"):
        return None
    try:
        decoded = decode_escapes(path)
    except UnicodeEncodeError:
        return None
    names = [path]
    if decoded != path:
        if "\x00" in decoded:
            return None
        names.append(decoded)
    opened = []
    for name in names:
        joined = name if name.startswith("/") else os.path.join(cwd, name)
        try:
            real = os.path.realpath(joined)  # what the service does
        except (OSError, ValueError):
            return None
        if _walk_links(joined) != real:
            return None  # through /proc (another process resolves it elsewhere), or changing meanwhile
        try:
            st = os.stat(real)
        except FileNotFoundError:
            pass  # a file to create: realpath resolved every directory that exists
        except (OSError, ValueError):
            return None
        else:
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                return None
        opened.append(real)
    return opened


MAX_LINKS = 40  # symlinks followed in one path, as the kernel allows


def _walk_links(path: str) -> str | None:
    """`path` resolved as `os.path.realpath` resolves it, or None when a symlink on the way lies
    under /proc (`/proc/self/cwd`, `/dev/fd/N`: magic links that name something else in each
    process, the tool service's included) or there are more than MAX_LINKS of them."""
    followed = 0

    def walk(base: str, rest: str) -> str | None:
        nonlocal followed
        for name in rest.split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                base = posixpath.dirname(base) or "/"
                continue
            step = posixpath.join(base, name)
            try:
                link = stat.S_ISLNK(os.lstat(step).st_mode)
            except OSError:
                link = False
            if not link:
                base = step
                continue
            followed += 1
            if followed > MAX_LINKS or step == "/proc" or step.startswith("/proc/"):
                return None
            try:
                target = os.readlink(step)
            except OSError:
                return None
            resolved = walk("/" if target.startswith("/") else base, target)
            if resolved is None:
                return None
            base = resolved
        return base

    return walk("/", path)


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


def _real_abs(path: str) -> list[str] | None:
    """Segments of an absolute path with its symlinks resolved; None when it is not absolute."""
    if not path.startswith("/") or "\x00" in path or len(path) > MAX_PATH:
        return None
    try:
        return [s for s in os.path.realpath(path).split("/") if s]
    except (OSError, ValueError):
        return None


def _relative_segments(path: list[str] | None, workspace: list[str] | None) -> list[str] | None:
    """`path` relative to `workspace` (both as segments), or None when it is not inside."""
    if path is None or workspace is None or path[: len(workspace)] != workspace:
        return None
    return path[len(workspace):]


def _covers_path(pattern: str, arguments: Mapping[str, Any], cwd: str, workspace: str) -> bool:
    path = arguments.get("path", "")
    if path is None:
        path = ""
    if not isinstance(path, str):
        return False
    ws = _real_abs(workspace)
    opened = opened_paths(path, cwd)
    if ws is None or not opened:
        return False
    absolute, segments = _path_parts(pattern)
    if absolute:
        in_ws = _relative_segments(segments, _norm_abs(workspace))
        if in_ws is None:
            in_ws = _relative_segments(segments, ws)
        if in_ws is None:
            return False
        segments = in_ws
    for real in opened:
        relative = _relative_segments([s for s in real.split("/") if s], ws)
        if relative is None or not match_segments(segments, relative):
            return False  # outside the workspace (never covered by a pattern), or not matched
    return True


def match_segments(pattern: list[str], path: list[str]) -> bool:
    """Whether path segments match pattern segments, where a `**` segment matches any number of
    segments (none included). A protected segment (`protected`) matches only a pattern segment
    that is the same name, never `*`, `?` or `**`. Groups between `**` are placed leftmost-first:
    a placement found is always a valid match, so nothing is covered that should not be (a
    contrived pattern may miss a protected name it does spell out, and is then asked about);
    the cost is bounded by the product of the lengths."""
    groups: list[list[str]] = [[]]
    for seg in pattern:
        if seg == "**":
            groups.append([])
        else:
            groups[-1].append(seg)
    marks = [i for i, s in enumerate(path) if protected(s)]

    def free(lo: int, hi: int) -> bool:  # no protected segment in path[lo:hi], which `**` absorbs
        k = bisect.bisect_left(marks, lo)
        return k == len(marks) or marks[k] >= hi

    def run(group: list[str], at: int) -> bool:
        return all(_segment_matches(p, s) for p, s in zip(group, path[at:at + len(group)], strict=True))

    if len(groups) == 1:
        return len(path) == len(pattern) and run(pattern, 0)
    first, middle, last = groups[0], groups[1:-1], groups[-1]
    if len(first) + len(last) > len(path):
        return False
    end = len(path) - len(last)
    if not run(first, 0) or not run(last, end):
        return False
    at = len(first)
    for group in middle:
        if not group:
            continue
        found = -1
        for start in range(at, end - len(group) + 1):
            if not free(at, start):
                break
            if run(group, start):
                found = start
                break
        if found < 0:
            return False
        at = found + len(group)
    return free(at, end)


def _segment_matches(pattern: str, segment: str) -> bool:
    if protected(segment):
        return pattern == segment
    return match_segment(pattern, segment)


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
