"""What a trust pin of a hook or custom tool covers, and the check before each run.

A pinned command runs only what was trusted. `plan_hook` (a hook's `sh -c` line) and `plan_tool`
(a manifest's argument vector) find every file the command line names: its program, the scripts
an interpreter is given (`sh x.sh`, `python3 x.py`), files given to `source`/`.`, files read
through `<`, and files given as `--option=FILE`. A named file inside the workspace (or the
artifact's own layer) counts with its bytes, one outside with its path. A command Osprey cannot
pin soundly is refused with the reason (`Unpinnable`):

- inline code given to a shell or an interpreter (`sh -c`, `bash -c`, `python3 -c`, `node -e`,
  `perl -e`, ...), which may source or import anything;
- a Python module run by name (`python3 -m pkg`), a module loaded by option (`node -r`,
  `perl -M`, `ruby -r`), an include path (`-I`), or a directory given to an interpreter: code
  found by a lookup, not named;
- a runner that executes code it finds in the workspace by convention (`make`, `npm`, `pytest`,
  `cargo`, `go`, ...);
- a hook line with expansions Osprey cannot resolve (`$VAR` other than `$OSPREY_PROJECT_DIR` and
  `$CLAUDE_PROJECT_DIR`, `$(...)`, backquotes, `~`, glob patterns, brace lists), `eval`,
  here-documents, or an assignment of a variable that makes programs load code
  (`PYTHONPATH=...`, `LD_PRELOAD=...`, `BASH_ENV=...`).

`prepare_hook` and `prepare_tool` run right before each run: they make the plan again, refuse a
run whose plan differs from the trusted one (`PinMismatch`), and copy the bytes they checked into
a private directory outside the workspace; the command that runs names those copies, never the
workspace files, so a rewrite between the check and the run changes nothing that runs.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..lazy import Pattern
from .layers import ArtifactError, inside, read_inside, real_path
from .report import sha256

MAX_PROGRAM_BYTES = 64 * 1024 * 1024
MAX_NAMED_FILES = 64

PROJECT_VARIABLES = ("OSPREY_PROJECT_DIR", "CLAUDE_PROJECT_DIR")
_SHELLS = r"(?:sh|bash|dash|zsh|ksh|mksh|ash|yash|posh|fish|busybox)"
# Per interpreter (by its program's base name): the options that run code not named as a file.
# The patterns compile at their first use: only a session with hooks or custom tools needs them.
_INLINE: tuple[tuple[Pattern, Pattern], ...] = (
    (Pattern(rf"{_SHELLS}"), Pattern(r"-[A-Za-z]*c[A-Za-z]*|--command")),
    (Pattern(r"(?:python|pypy)[0-9.]*[a-z]?"), Pattern(r"-[A-Za-z]*[cm][A-Za-z0-9]*")),
    (Pattern(r"node|nodejs|bun|deno"), Pattern(r"-e|-p|-pe|--eval(?:=.*)?|--print(?:=.*)?|-r|--require(?:=.*)?|--import(?:=.*)?|"
                                                      r"--(?:experimental-)?loader(?:=.*)?|eval")),
    (Pattern(r"perl[0-9.]*"), Pattern(r"-[A-Za-z]*[eEMmI].*")),
    (Pattern(r"ruby[0-9.]*"), Pattern(r"-[A-Za-z]*[erI].*")),
    (Pattern(r"php[0-9.]*"), Pattern(r"-[A-Za-z]*[rBERd].*")),
    (Pattern(r"lua(?:jit)?[0-9.]*"), Pattern(r"-[el].*")),
    (Pattern(r"(?:R|Rscript|julia|tclsh|wish|osascript|jshell|guile|racket|sbcl|ghci|runghc)"), Pattern(r"-e|--eval|-E|-l|--load")),
    (Pattern(r"env"), Pattern(r"-[A-Za-z]*S.*|--split-string(?:=.*)?")),
)
_INTERPRETER = Pattern(rf"{_SHELLS}|(?:python|pypy)[0-9.]*[a-z]?|node|nodejs|bun|deno|perl[0-9.]*|ruby[0-9.]*|php[0-9.]*|lua(?:jit)?[0-9.]*|"
                          r"R|Rscript|julia|tclsh|wish|osascript|guile|racket|sbcl|runghc")
# Programs that run code they find in the working directory by convention (a Makefile, package
# scripts, test files, build scripts): nothing on the command line names it.
_RUNNERS = frozenset({
    "make", "gmake", "bmake", "npm", "npx", "pnpm", "pnpx", "yarn", "pytest", "py.test", "tox", "nox", "cargo", "go", "gradle",
    "gradlew", "mvn", "mvnw", "rake", "just", "task", "invoke", "pre-commit", "ant", "cmake", "ninja", "meson", "poetry", "uv", "uvx",
    "pipenv", "hatch", "pdm", "bundle", "composer", "mix", "dotnet", "sbt", "lein", "direnv", "scons", "bazel", "bazelisk", "buck",
})
# Programs that build the commands they run from their input, and the options that make a
# finder run a command per file found.
_FROM_INPUT = frozenset({"xargs", "parallel", "entr", "watchexec", "sem"})
_FINDERS = frozenset({"find", "gfind", "bfs", "fd", "fdfind"})
_FIND_EXEC = Pattern(r"-(?:exec|execdir|ok|okdir)|-[xX]|--exec(?:-batch)?(?:=.*)?")
# Variables that make programs load code from where they point.
_CODE_VARIABLES = Pattern(r"PYTHON(?:PATH|STARTUP|HOME|USERBASE)|LD_[A-Z_]+|BASH_ENV|ENV|NODE_(?:PATH|OPTIONS)|PERL5?LIB|PERL5OPT|"
                             r"RUBYLIB|RUBYOPT|LUA_(?:C?PATH)[A-Z0-9_]*|CLASSPATH|GIT_[A-Z_]+|PATH|IFS|PS4|PROMPT_COMMAND|SHELLOPTS|BASHOPTS")
_RESERVED = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "exec", "command", "builtin", "nohup",
                       "env", "nice", "xargs", "sudo", "doas", "timeout", "stdbuf", "setsid", "unbuffer"})
_OPERATORS = ("&&", "||", ";;", "<<", ">>", "<&", ">&", "<>", ">|", "&", "|", ";", "<", ">", "(", ")", "\n")


class Unpinnable(ArtifactError):
    """A command whose program or script cannot be pinned; the message says why."""


class PinMismatch(Exception):
    """What a command would run now is not what was trusted; the message says what changed."""


@dataclass(frozen=True)
class NamedFile:
    """A file a command line names: `word` is its place (an index into the hook's words, or into
    the tool's argument vector), `prefix` what precedes the path in that word (`--config=`).
    `local` files count with their bytes (`digest`), the others with their path."""

    word: int
    path: str  # the real path
    shown: str  # as the identity names it: relative to the base, or the path
    local: bool
    digest: str | None = None
    prefix: str = ""
    executable: bool = False
    data: bytes | None = field(default=None, repr=False, compare=False)

    def identity(self) -> tuple[str, str]:
        return ("bytes", f"{self.shown}:{self.digest}") if self.local else ("path", self.shown)


@dataclass(frozen=True)
class Plan:
    """The files one command names, in order, and the words of a hook line (their spans)."""

    files: tuple[NamedFile, ...]
    spans: tuple[tuple[int, int], ...] = ()

    def identities(self) -> list[tuple[str, str]]:
        return [f.identity() for f in self.files]


@dataclass(frozen=True)
class Scope:
    """Where a command's files are judged: `boundaries` hold local files (bytes pinned), `base`
    is what their shown names are relative to."""

    boundaries: tuple[Path, ...]
    base: Path

    def local(self, real: str) -> Path | None:
        return next((b for b in self.boundaries if inside(real, b)), None)

    def shown(self, real: str) -> str:
        path = Path(real)
        return path.relative_to(self.base).as_posix() if path.is_relative_to(self.base) else real


@dataclass(frozen=True)
class Pin:
    """What a pinned command's trust covers: the identities of the files it names, and where
    they are judged. Checked again before each run."""

    identities: tuple[tuple[str, str], ...]
    scope: Scope


# ------------------------------------------------------------------ a hook's shell line


@dataclass
class _Word:
    start: int
    end: int
    value: str
    digits: bool = False  # an unquoted number right before a redirection (`2>`)


def _expansion(text: str, i: int, project_dir: str | None) -> tuple[str, int]:
    """The value of the `$...` at `text[i]` and the index after it; only the project directory
    variables resolve, everything else is Unpinnable."""
    for name in PROJECT_VARIABLES:
        for spelled in ("${" + name + "}", "$" + name):
            if text.startswith(spelled, i) and (spelled[1] == "{" or not re.match(r"[A-Za-z0-9_]", text[i + len(spelled):i + len(spelled) + 1])):
                if project_dir is None:
                    raise Unpinnable(f"it uses ${name}, and there is no project directory to resolve it")
                return project_dir, i + len(spelled)
    shown = re.match(r"\$(\{[^}]{0,40}\}?|\([^)]{0,40}\)?|[A-Za-z_][A-Za-z0-9_]{0,40}|.?)", text[i:])
    raise Unpinnable(f"it uses {shown.group(0) if shown else '$'!r}, which Osprey cannot resolve to the files it names; write the path out "
                     "(or use $OSPREY_PROJECT_DIR)")


def split_shell(command: str, project_dir: str | None = None) -> list[_Word | str]:
    """A shell line as words (with their spans in `command`) and operators (strings), for the
    subset of the POSIX shell a pinned hook may use; Unpinnable for anything else."""
    out: list[_Word | str] = []
    i, n = 0, len(command)
    while i < n:
        c = command[i]
        if c in " \t":
            i += 1
            continue
        if c == "\\" and command.startswith("\\\n", i):
            i += 2
            continue
        op = next((o for o in _OPERATORS if command.startswith(o, i)), None)
        if op is not None:
            if op == "<<":
                raise Unpinnable("it uses a here-document, which Osprey does not pin; put the script in a file")
            out.append(op)
            i += len(op)
            continue
        if c == "#":
            end = command.find("\n", i)
            i = n if end < 0 else end
            continue
        start, value, quoted = i, [], False
        while i < n:
            c = command[i]
            if c in " \t" or any(command.startswith(o, i) for o in _OPERATORS):
                break
            if c == "\\":
                if i + 1 < n and command[i + 1] != "\n":
                    value.append(command[i + 1])
                i += 2
                quoted = True
            elif c == "'":
                end = command.find("'", i + 1)
                if end < 0:
                    raise Unpinnable("its quotes are not balanced")
                value.append(command[i + 1:end])
                i, quoted = end + 1, True
            elif c == '"':
                i += 1
                quoted = True
                while True:
                    if i >= n:
                        raise Unpinnable("its quotes are not balanced")
                    c = command[i]
                    if c == '"':
                        i += 1
                        break
                    if c == "\\" and i + 1 < n and command[i + 1] in '$`"\\\n':
                        value.append(command[i + 1] if command[i + 1] != "\n" else "")
                        i += 2
                    elif c == "$":
                        text, i = _expansion(command, i, project_dir)
                        value.append(text)
                    elif c == "`":
                        raise Unpinnable("it uses a command substitution (`...`), whose output Osprey cannot pin")
                    else:
                        value.append(c)
                        i += 1
            elif c == "$":
                text, i = _expansion(command, i, project_dir)
                value.append(text)
            elif c == "`":
                raise Unpinnable("it uses a command substitution (`...`), whose output Osprey cannot pin")
            elif c in "*?" or (c == "[" and not _lone(command, i, "[")) or (c == "~" and i == start):
                raise Unpinnable(f"it uses {c!r} unquoted, a pattern or expansion Osprey cannot resolve to the files it names; quote it or write the paths out")
            elif c == "{" and re.match(r"\{[^}\s]*(,|\.\.)[^}\s]*\}", command[i:]):
                raise Unpinnable("it uses a brace list ({a,b}), which Osprey cannot resolve to the files it names")
            else:
                value.append(c)
                i += 1
        text = "".join(value)
        out.append(_Word(start, i, text, digits=not quoted and text.isdigit() and i < n and command[i] in "<>"))
    return out


def _lone(command: str, i: int, what: str) -> bool:
    """Whether `what` at `command[i]` is a word of its own (`[ -f x ]`), not a pattern."""
    before = command[i - 1] if i else " "
    after = command[i + len(what)] if i + len(what) < len(command) else " "
    return before in " \t\n;&|(" and after in " \t\n;&|)"


def plan_hook(command: str, *, cwd: str, project_dir: str | None, scope: Scope, search_path: str | None = None,
              keep_bytes: bool = False) -> Plan:
    """The files a hook's command line names (see the module docstring); Unpinnable when it
    cannot be pinned."""
    tokens = split_shell(command, project_dir)
    files: list[NamedFile] = []
    spans: list[tuple[int, int]] = []
    words: list[tuple[_Word, bool, str]] = []  # (word, at command position, redirection before it)
    simple: list[list[str]] = [[]]  # the words of each simple command, for the inline-code check
    stdin_files: list[bool] = [False]  # whether each reads its standard input from a file it names
    at_command, redirect = True, ""
    for token in tokens:
        if isinstance(token, str):
            if token in ("<", ">", ">>", ">|", "<>", "<&", ">&"):
                redirect = token
            else:
                at_command, redirect = True, ""
                simple.append([])
                stdin_files.append(False)
            continue
        if token.digits:
            continue
        if redirect:
            words.append((token, False, redirect))
            stdin_files[-1] = stdin_files[-1] or (redirect == "<" and not token.value.startswith(("/dev/", "/proc/")))
            redirect = ""
            continue
        assignment = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", token.value, flags=re.DOTALL)
        if at_command and assignment:
            if _CODE_VARIABLES.fullmatch(assignment.group(1)):
                raise Unpinnable(f"it sets {assignment.group(1)}, which changes what code programs load; set it inside a pinned script")
            words.append((token, False, "="))
            continue
        if at_command:
            _check_runner(token.value)
        words.append((token, at_command, ""))
        simple[-1].append(token.value)
        if at_command and token.value in ("eval", "trap"):
            raise Unpinnable(f"it uses {token.value}, which runs text as code Osprey cannot pin")
        # Wrappers keep the next word a program: `nice -n 5 make`, `timeout 10 ./x.sh`.
        at_command = at_command and (token.value in _RESERVED or re.fullmatch(r"-.*|[0-9.]+[smhd]?", token.value) is not None)
    for argv, stdin_file in zip(simple, stdin_files, strict=True):
        _check_inline(argv)
        _interpreter_directories(argv, cwd, scope)
        _check_indirect(argv, stdin_file)
    for index, (word, command_position, redirect_) in enumerate(words):
        spans.append((word.start, word.end))
        if redirect_ in (">", ">>", ">|", ">&", "<&"):
            continue  # written, or a descriptor: not code
        value = word.value
        prefix = ""
        if redirect_ == "=":
            prefix, value = value.split("=", 1)[0] + "=", value.split("=", 1)[1]
        elif value.startswith("-") and "=" in value:
            prefix, value = value.split("=", 1)[0] + "=", value.split("=", 1)[1]
        if not value:
            continue
        if command_position and "/" not in value:
            found = shutil.which(value, path=search_path if search_path is not None else os.environ.get("PATH", os.defpath))
            if found is None:
                continue
            if not os.path.isabs(found):  # a relative PATH entry: found from the working directory
                found = os.path.join(cwd, found)
            real = real_path(found)
            if scope.local(real) is None:
                continue  # a system program found on PATH: its name is in the pinned line
            candidate = found
        else:
            candidate = value if os.path.isabs(value) else os.path.join(cwd, value)
        named = _named(index, candidate, scope, prefix, command_position, keep_bytes, outside=command_position)
        if named is not None:
            if redirect_ == "=" and named.local:
                raise Unpinnable(f"it sets a variable to {named.shown}, a file in the workspace a program may load; set it inside a pinned script")
            files.append(named)
        if len(files) > MAX_NAMED_FILES:
            raise Unpinnable(f"it names more than {MAX_NAMED_FILES} files")
    return Plan(tuple(files), tuple(spans))


def _check_runner(program: str) -> None:
    name = os.path.basename(program)
    if name in _RUNNERS:
        raise Unpinnable(f"it runs {name}, which runs code it finds in the workspace by convention (a Makefile, package scripts, "
                         "tests), not code the command names, so Osprey cannot pin it; name a script file that does the work")


def _check_indirect(words: Sequence[str], stdin_file: bool = False) -> None:
    """Unpinnable when a simple command runs code it gets from data rather than from its own
    words: commands built from input (`xargs`, `find -exec`), or an interpreter given no script
    operand, which reads its program from standard input (`git ls-files | sh`) unless that is a
    file the line names (`sh < guard.sh`, pinned like any named file)."""
    for i, word in enumerate(words):
        name = os.path.basename(word)
        if name in _FROM_INPUT:
            raise Unpinnable(f"it runs {name}, which builds the commands it runs from its input, so Osprey cannot know the code; "
                             "name a script file that does the work")
        if name in _FINDERS and any(_FIND_EXEC.fullmatch(later) for later in words[i + 1:]):
            raise Unpinnable(f"it runs {name} with a command for each file found, so the files it finds decide the code; "
                             "name a script file that does the work")
    start = next((i for i, w in enumerate(words) if os.path.basename(w) not in _RESERVED and not w.startswith("-")
                  and not re.fullmatch(r"[0-9.]+[smhd]?", w)), None)
    if start is None or not _INTERPRETER.fullmatch(os.path.basename(words[start])):
        return
    name = os.path.basename(words[start])
    operands = [w for w in words[start + 1:] if not w.startswith("-") or (w.startswith("--") and "=" in w)]
    if not operands and not stdin_file:
        raise Unpinnable(f"it runs {name} without a script file it names, so {name} reads its program from standard input "
                         "(or finds it by name), which Osprey cannot pin; name the script file")


def _check_inline(words: Sequence[str]) -> None:
    """Unpinnable when a simple command gives an interpreter inline code (or code by lookup)."""
    for i, word in enumerate(words):
        name = os.path.basename(word)
        for program, options in _INLINE:
            if not program.fullmatch(name):
                continue
            for later in words[i + 1:]:
                if options.fullmatch(later):
                    raise Unpinnable(f"it runs {name} {later} ...: inline code, or code {name} looks up by name, which Osprey cannot pin; "
                                     "put the code in a script file the command names")


def _named(index: int, candidate: str, scope: Scope, prefix: str, program: bool, keep_bytes: bool, *, outside: bool) -> NamedFile | None:
    """A named file, or None when nothing is at `candidate` (or it is outside and `outside` is
    false: its path is in the pinned text already). A missing program path inside counts as
    empty bytes, so a file made there later does not run unchecked."""
    try:
        st = os.stat(candidate)
    except OSError:
        if program and os.path.isabs(candidate) or (program and "/" in candidate):
            real = real_path(candidate)
            where = scope.local(real)
            if where is None:
                return NamedFile(index, real, candidate, False, prefix=prefix)  # a program path outside: its path counts
            return NamedFile(index, real, scope.shown(real), True, digest=sha256(b""), prefix=prefix, data=b"" if keep_bytes else None)
        return None
    real = real_path(candidate)
    where = scope.local(real)
    if stat.S_ISDIR(st.st_mode):
        return None
    if where is None:
        return NamedFile(index, real, candidate, False, prefix=prefix) if outside else None
    try:
        data = read_inside(Path(real), where, MAX_PROGRAM_BYTES)
    except ArtifactError as exc:
        raise ArtifactError(f"the file {candidate} it names {exc}") from None
    data = data or b""
    return NamedFile(index, real, scope.shown(real), True, digest=sha256(data), prefix=prefix, executable=bool(st.st_mode & 0o111),
                     data=data if keep_bytes else None)


def _interpreter_directories(argv: Sequence[str], cwd: str, scope: Scope) -> None:
    """Unpinnable when an interpreter is given a directory of the workspace (it runs code in it)."""
    for i, word in enumerate(argv):
        if not _INTERPRETER.fullmatch(os.path.basename(word)):
            continue
        for later in argv[i + 1:]:
            if later.startswith("-"):
                continue
            candidate = later if os.path.isabs(later) else os.path.join(cwd, later)
            if os.path.isdir(candidate) and scope.local(real_path(candidate)) is not None:
                raise Unpinnable(f"it gives {os.path.basename(word)} the directory {later}, whose code Osprey cannot pin; name the script file")
            break  # the script; what follows are its arguments


# ------------------------------------------------------------------ a tool's argument vector


def plan_tool(argv: Sequence[str], program: str | None, *, workdir: str, scope: Scope, keep_bytes: bool = False) -> Plan:
    """The files a tool's command names: `program` (its resolved path, None when it was not
    found), then each fixed argument that names a file (relative to `workdir`)."""
    _check_inline(argv)
    _interpreter_directories(argv, workdir, scope)
    _check_indirect(argv)
    for word in argv:
        _check_runner(word)
        if os.path.basename(word) not in _RESERVED and not word.startswith("-") and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*|[0-9.]+[smhd]?", word):
            break  # the program, after wrappers (`env`, `nice`, `timeout 5`) and their options
    files: list[NamedFile] = []
    if program is not None:
        named = _named(0, program, scope, "", True, keep_bytes, outside=True)
        if named is not None:
            files.append(named)
    for index, argument in enumerate(argv[1:], start=1):
        prefix, value = "", argument
        if argument.startswith("-") and "=" in argument:
            prefix, value = argument.split("=", 1)[0] + "=", argument.split("=", 1)[1]
        if not value:
            continue
        candidate = os.path.normpath(os.path.join(workdir, value))
        if candidate in {f.path for f in files} or not os.path.isfile(candidate):
            continue
        named = _named(index, candidate, scope, prefix, False, keep_bytes, outside=True)
        if named is not None:
            files.append(named)
        if len(files) > MAX_NAMED_FILES:
            raise Unpinnable(f"it names more than {MAX_NAMED_FILES} files")
    return Plan(tuple(files))


# ------------------------------------------------------------------ before each run


def _compare(trusted: Sequence[tuple[str, str]], now: Plan, what: str) -> None:
    current = now.identities()
    if current == list(trusted):
        return
    was = {text.rsplit(":sha256:", 1)[0] if kind == "bytes" else text: text for kind, text in trusted}
    for kind, text in current:
        name = text.rsplit(":sha256:", 1)[0] if kind == "bytes" else text
        if name not in was:
            raise PinMismatch(f"{what} now runs {name}, which was not there when it was trusted")
        if was[name] != text:
            raise PinMismatch(f"{what} runs {name}, which changed since it was trusted")
    raise PinMismatch(f"the files {what} runs changed since it was trusted")


def _private_dir() -> str:
    base = os.environ.get("XDG_RUNTIME_DIR")
    if not base or not os.path.isdir(base) or not os.access(base, os.W_OK | os.X_OK):
        base = None
    return tempfile.mkdtemp(prefix="osprey-pinned-", dir=base)


def _copies(plan: Plan, directory: str) -> dict[int, str]:
    """Write each local file's checked bytes into `directory`; their paths by word index."""
    out: dict[int, str] = {}
    for number, named in enumerate(plan.files):
        if not named.local:
            continue
        assert named.data is not None
        sub = os.path.join(directory, str(number))
        os.mkdir(sub, 0o700)
        path = os.path.join(sub, os.path.basename(named.path) or "program")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(named.data)
        os.chmod(path, 0o500 if named.executable else 0o400)
        out[named.word] = named.prefix + path
    return out


@dataclass
class Prepared:
    """A run's private copies: the hook line (`line`) or the tool's `argv` and `executable` that
    name them. `close` removes them."""

    directory: str
    line: str = ""
    argv: list[str] = field(default_factory=list)
    executable: str | None = None

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _prepare(plan: Plan, trusted: Sequence[tuple[str, str]]) -> tuple[Prepared, dict[int, str]]:
    _compare(trusted, plan, "it")
    prepared = Prepared(_private_dir())
    try:
        return prepared, _copies(plan, prepared.directory)
    except OSError as exc:
        prepared.close()
        raise PinMismatch(f"its private copy could not be written: {exc.strerror or exc}") from None
    except BaseException:
        prepared.close()
        raise


def prepare_hook(command: str, trusted: Sequence[tuple[str, str]], *, cwd: str, project_dir: str | None, scope: Scope,
                 search_path: str | None) -> Prepared:
    """The hook line to run: the pinned files it names replaced by private copies of the bytes
    just checked against `trusted` (the identities of the pin). PinMismatch when they differ."""
    import shlex

    try:
        plan = plan_hook(command, cwd=cwd, project_dir=project_dir, scope=scope, search_path=search_path, keep_bytes=True)
    except ArtifactError as exc:
        raise PinMismatch(f"it can no longer be checked: {exc}") from None
    prepared, copies = _prepare(plan, trusted)
    line = command
    for index in sorted(copies, reverse=True):
        start, end = plan.spans[index]
        line = line[:start] + shlex.quote(copies[index]) + line[end:]
    prepared.line = line
    return prepared


def prepare_tool(argv: Sequence[str], program: str | None, trusted: Sequence[tuple[str, str]], *, workdir: str, scope: Scope) -> Prepared:
    """The tool's `argv` and `executable` to run: the pinned program and the files fixed
    arguments name replaced by private copies of the bytes just checked against `trusted`.
    PinMismatch when they differ."""
    try:
        plan = plan_tool(argv, program, workdir=workdir, scope=scope, keep_bytes=True)
    except ArtifactError as exc:
        raise PinMismatch(f"it can no longer be checked: {exc}") from None
    prepared, copies = _prepare(plan, trusted)
    prepared.argv = [copies.get(i, word) for i, word in enumerate(argv)]
    prepared.executable = copies.get(0, program)
    return prepared


def scope_of(boundaries: Sequence[Path | str], base: Path | str) -> Scope:
    return Scope(tuple(Path(os.path.realpath(b)) for b in boundaries), Path(os.path.realpath(base)))
