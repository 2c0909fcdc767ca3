"""The hardline floor: shell command lines that are refused under every approval policy.

`check` parses the line with tree-sitter-bash (see `shell`), follows every simple command it would
run (lists, pipelines, subshells, substitutions, function bodies, `sh -c` and `eval` strings,
`xargs` and `find -exec` commands, wrappers such as `sudo` and `env`), expands words the way bash
would where the line itself says what they hold, and applies the rules in `RULES`. A line that
cannot be parsed is refused only when its text matches one of the floor's patterns. The rules,
their reasons and the floor's limits are documented in docs/hardline.md.
"""

from __future__ import annotations

import base64
import bisect
import fnmatch
import posixpath
import re
import shlex
from dataclasses import dataclass, field

from tree_sitter import Node

from .shell import (
    ANYTHING,
    HOME,
    SETTERS,
    UNKNOWN,
    Budget,
    Command,
    Expander,
    Parsed,
    Shell,
    ShellParseError,
    evaluated_operands,
    literal,
    parse,
    printed,
    substitution_texts,
)
from .wrappers import MAX_WRAPPERS, getopt
from .wrappers import unwrap as unwrap_words

RULES: dict[str, str] = {
    "recursive-delete-root": "Recursive deletion (rm -r, find -delete or -exec rm, xargs rm -r, rsync --delete) of /, a home directory or a top-level system directory, or a glob over everything in one.",
    "device-write": "Writing to or formatting a disk device: dd of=/dev/sdX, mkfs, wipefs, blkdiscard, shred, or a redirection, tee or cp onto a disk device.",
    "fork-bomb": "A function that calls itself at least twice through a pipe or in the background (:(){ :|:& };: and renamed variants), or inline code that forks in a loop.",
    "recursive-chmod-root": "Recursive chmod, chown or chgrp of /, a home directory or a top-level system directory.",
    "download-exec": "Downloaded content run as code: piped into a shell or interpreter (curl ... | sh), or substituted into one (bash <(curl ...), sh -c \"$(wget -O- ...)\", eval \"$(curl ...)\").",
    "inline-code-delete-root": "Inline interpreter code (python -c, perl -e, node -e, ruby -e, ...) that deletes /, a home directory or a top-level system directory.",
    "sysrq-trigger": "Writing to /proc/sysrq-trigger, which reboots, crashes or powers off the kernel at once.",
    "kill-all-processes": "Signalling every process (kill -9 -1, kill -s KILL -1, kill -- -1) or every process of a user (pkill -u USER, killall -u USER with no name).",
    "power-off": "Shutting down or rebooting the machine (shutdown, reboot, poweroff, halt, systemctl reboot, init 0).",
    "unparseable-dangerous": "A command line that cannot be parsed (syntax error, too large, too complex or nested too deeply) whose text matches one of the floor's patterns.",
}

MAX_DEPTH = 4  # nested shell strings (sh -c, eval, su -c, heredocs fed to a shell, code's system())
MAX_CODE = 64 * 1024  # inline interpreter code examined
MAX_SCAN = 1024 * 1024  # text examined by the fallback for unparseable lines
CUT = 200


@dataclass(frozen=True)
class Refusal:
    rule: str  # stable rule id, e.g. "recursive-delete-root"
    reason: str  # one sentence: what the command would do and why it is refused
    command: str  # the offending (sub)command as the floor saw it, cut to ~200 chars


def check(command: str) -> Refusal | None:
    """The floor's verdict on a bash command line (also used for `process` starts): None when it may run."""
    if not isinstance(command, str) or not command.strip():
        return None
    try:
        return analyse(command)
    except ShellParseError as e:
        return textual(command, str(e))
    except Exception as e:  # noqa: BLE001 - the floor must answer; what it cannot analyse gets the textual check
        return textual(command, f"the floor could not analyse it ({type(e).__name__})")


def analyse(command: str) -> Refusal | None:
    """The parsed verdict; raises ShellParseError when the line cannot be analysed within the bounds."""
    # The analysis marks home and unknown text with two private-use characters; the line's own
    # copies of them must not pass for either.
    command = command.replace(HOME, "\ufffd").replace(UNKNOWN, "\ufffd").replace(ANYTHING, "\ufffd")
    return _Analysis(Budget()).run(command, Shell(), 0, {})


# ---------------------------------------------------------------------------------------------
# Names

SHELLS = frozenset(["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "oksh", "pdksh", "lksh", "rbash", "fish", "csh", "tcsh"])
DOWNLOADERS = frozenset(["curl", "wget", "wget2", "fetch", "aria2c", "http", "https", "xh", "xhs", "httpie", "lwp-request", "lwp-download", "GET", "nc", "ncat", "netcat"])
DELETERS = frozenset(["rm", "unlink", "shred", "srm", "wipe", "rmdir"])
MKFS = re.compile(r"mkfs(\..+)?|mke2fs|mkswap|mkntfs|mkdosfs|mkexfatfs|mkfs_\w+|newfs(_\w+)?")
INTERPRETER = re.compile(r"(python|pypy)[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node(js)?|php[0-9.]*|lua(jit|[0-9.]+)?")
GNU_PREFIXED = frozenset(["rm", "find", "xargs", "chmod", "chown", "chgrp", "dd", "shred", "tee", "cp", "mv", "install", "kill"])

SYSTEM_DIRS = frozenset([
    "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "media", "mnt", "opt", "proc", "root",
    "run", "sbin", "snap", "srv", "sys", "usr", "var",
    "Applications", "Library", "System", "Users", "Volumes", "private",  # macOS
])
HOME_PARENTS = frozenset({"home", "Users"})
DEVICE_PREFIXES = ("sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk", "rdisk", "md", "dm-", "nbd", "mapper/", "root", "mem", "kmem", "port")
SYSRQ = "/proc/sysrq-trigger"
OUTPUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&", "&>|"})
STDIN_PATHS = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
Arg = tuple[str, Node | None]


def _name(word: str) -> str:
    base = word.rsplit("/", 1)[-1]
    if base.startswith("g") and base[1:] in GNU_PREFIXED:
        return base[1:]
    return base


def _show(text: str) -> str:
    text = text.replace(HOME, "~").replace(UNKNOWN, "<unknown>").replace(ANYTHING, "<anything>")
    return text if len(text) <= CUT else text[: CUT - 1] + "…"


def _join(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


# ---------------------------------------------------------------------------------------------
# Paths


def _match_all(component: str) -> bool:
    """A glob component that names everything in its directory (`*`, `.*`, `[a-z]*`, an unknown)."""
    rest = re.sub(r"\[[^]]*\]", "", component)
    return bool(rest) and set(rest) <= set("*?." + UNKNOWN + HOME + ANYTHING) and bool(set(rest) & {"*", UNKNOWN, HOME, ANYTHING})


def _has_wild(component: str) -> bool:
    return any(c in component for c in "*?[" + UNKNOWN + HOME + ANYTHING)


def _could_name_system_dir(component: str) -> bool:
    if len(component) > 255:
        return True
    pattern = component.replace(UNKNOWN, "*").replace(HOME, "*").replace(ANYTHING, "*")
    return any(fnmatch.fnmatchcase(d, pattern) for d in SYSTEM_DIRS)


def danger(path: str, cwd: str | None) -> tuple[str, bool] | None:
    """What deleting `path` recursively would destroy, when that is /, a home directory or a
    top-level system directory: (description, named through a glob). None otherwise."""
    if not path:
        return None
    if path.startswith(ANYTHING):
        return "a path computed only when the command runs (it may be / or a home directory)", False
    if path.startswith(HOME):
        comps = ["~"]
        rest = path[1:]
    elif path.startswith("/"):
        comps = []
        rest = path
    elif path.startswith(UNKNOWN) or cwd is None:
        return None
    else:
        return danger(cwd.rstrip("/") + "/" + path, None)
    for part in rest.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if comps == ["~"]:
                comps = ["home"]  # the directory holding the home directories
            elif comps:
                comps.pop()
            continue
        comps.append(part)
    glob = False
    while comps and comps != ["~"] and _match_all(comps[-1]):
        comps.pop()
        glob = True
    what = _describe(comps)
    return (("everything in " + what) if glob else what, glob) if what else None


def _describe(comps: list[str]) -> str | None:
    if not comps:
        return "/"
    if comps == ["~"]:
        return "the home directory"
    if comps[0] == "~":
        return None
    top = comps[0]
    if len(comps) == 1:
        if top in SYSTEM_DIRS:
            return f"/{top}"
        if _has_wild(top) and _could_name_system_dir(top):
            return f"the top-level directories matching /{_show(top)}"
        return None
    if len(comps) == 2 and top in HOME_PARENTS:
        return f"the home directory /{top}/{_show(comps[1])}"
    if len(comps) == 2 and top == "usr" and comps[1] not in ("local", "src"):
        return f"/usr/{_show(comps[1])}"
    return None


def _normal(path: str) -> str:
    if not path.startswith("/"):
        return path
    return posixpath.normpath(path).replace("//", "/")


def _could_be(path: str, exact: str) -> bool:
    """Whether `path` names `exact`, or may once its unknown or glob part is known."""
    path = _normal(path)
    cut = min((i for i, c in enumerate(path) if c in "*?[" + UNKNOWN + HOME + ANYTHING), default=-1)
    if cut < 0:
        return path == exact
    head = path[:cut]
    return head.startswith("/") and exact.startswith(head)


def is_device(path: str) -> bool:
    """A disk device (or one that an unknown part could make one): /dev/sda, /dev/nvme0n1, /dev/mapper/x."""
    path = _normal(path)
    if not path.startswith("/dev/"):
        return False
    name = path[5:]
    cut = min((i for i, c in enumerate(name) if c in "*?[" + UNKNOWN + HOME + ANYTHING), default=-1)
    if cut >= 0:
        head = name[:cut]
        return any(p.startswith(head) or head.startswith(p) for p in DEVICE_PREFIXES)
    exact = ("root", "mem", "kmem", "port")
    return any(name == p if p in exact else name.startswith(p) for p in DEVICE_PREFIXES)


# ---------------------------------------------------------------------------------------------
# Options


def _getopt(args: list[Arg], start: int, short_arg: str, long_arg: frozenset[str] = frozenset()) -> tuple[list[tuple[str, str]], int]:
    """Leading options of args[start:]: ([(option, value)], index of the first operand)."""
    return getopt([a for a, _ in args], start, short_arg, long_arg)


def _long_prefix(option: str, full: str, minimum: int) -> bool:
    return len(option) >= minimum and full.startswith(option)


@dataclass
class _Unwrapped:
    argv: list[Arg]
    strings: list[str] = field(default_factory=list)  # shell text a wrapper runs (env -S)
    env: dict[str, str] = field(default_factory=dict)


def unwrap(argv: list[Arg]) -> _Unwrapped:
    """The command a chain of wrappers (sudo, env, nice, timeout, ...) finally runs (`wrappers.unwrap`).
    Raises ShellParseError past the bound on stacked wrappers."""
    found = unwrap_words([a for a, _ in argv])
    if found.exhausted:
        raise ShellParseError(f"the command has more than {MAX_WRAPPERS} wrappers (sudo, env, nice, ...) stacked")
    return _Unwrapped(argv[found.start:], found.strings, found.env)


# ---------------------------------------------------------------------------------------------
# The analysis


@dataclass(eq=False)
class _Run:
    """A command of the line with what pass one learnt: the shell state before it and its words."""

    cmd: Command
    shell: Shell
    argv: list[Arg] = field(default_factory=list)
    inner: list[Arg] = field(default_factory=list)
    name: str = ""
    download: bool = False


class _Analysis:
    """One floor check: shared budget, nested strings analysed with bounded depth."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget

    def run(self, text: str, shell: Shell, depth: int, functions: dict[str, str]) -> Refusal | None:
        return _Level(self, parse(text), shell, depth, dict(functions)).check()

    def nested(self, text: str, shell: Shell, depth: int, functions: dict[str, str]) -> Refusal | None:
        """A shell string run by the line (sh -c, eval, a heredoc fed to bash, ...)."""
        if not text.strip():
            return None
        if depth > MAX_DEPTH:
            return textual(text, f"shell strings are nested more than {MAX_DEPTH} levels deep")
        try:
            return self.run(text, shell, depth, functions)
        except ShellParseError as e:
            return textual(text, str(e))


class _Level:
    """The commands of one parsed line (the top one or a nested string)."""

    def __init__(self, analysis: _Analysis, parsed: Parsed, shell: Shell, depth: int, functions: dict[str, str]) -> None:
        self.analysis = analysis
        self.budget = analysis.budget
        self.parsed = parsed
        self.expander = Expander(parsed, analysis.budget)
        self.start = shell
        self.depth = depth
        self.functions = functions
        self.runs: list[_Run] = []
        self.starts: list[int] = []  # runs' start bytes, for finding the runs inside a word
        self.by_pipeline: dict[int, list[tuple[int, _Run]]] = {}

    # -- pass one: state, words, wrappers

    def check(self) -> Refusal | None:
        shell = self.start
        for cmd in self.parsed.commands:
            self.budget.spend()
            if cmd.kind == "for" and cmd.variable:
                values: list[str] = []
                for node in cmd.values:
                    values.extend(self.expander.word(node, shell))
                shell = self._with(shell, {cmd.variable: values or [""]})
            elif cmd.kind == "assign":
                shell = self._assign(cmd.assigns, shell)
            elif cmd.kind == "function":
                if cmd.body is not None:
                    self.functions[cmd.variable] = self.parsed.text(cmd.body)
                self._add(_Run(cmd, shell))
            elif cmd.kind == "redirect":
                self._add(_Run(cmd, shell))
            elif cmd.kind == "command":
                if cmd.prefix:
                    shell = self._assign(cmd.prefix, shell)
                run = _Run(cmd, shell, self.expander.argv(cmd.words, shell))
                unwrapped = unwrap(run.argv)
                run.inner = unwrapped.argv
                run.name = _name(run.inner[0][0]) if run.inner else ""
                run.download = run.name in DOWNLOADERS or self._reads_network(cmd)
                self._add(run)
                if cmd.words and not cmd.words[0].is_named:  # export/declare/local/readonly
                    shell = self._assign(cmd.assigns, shell)
                    shell = self._nameref(run, shell)
                if run.name in ("cd", "pushd"):
                    shell = self._cd(run, shell)
                elif run.name == "printf":
                    shell = self._printf_v(run, shell)
                elif run.name in ("read", "mapfile", "readarray"):
                    shell = self._read(run, shell)
                elif run.name in ("alias", "hash"):
                    self._alias(run)
        for run in self.runs:
            refusal = self._judge_run(run)
            if refusal is not None:
                return refusal
        return self._evaluated(shell)

    def _evaluated(self, shell: Shell) -> Refusal | None:
        """Code bash runs that no command of the parse shows: command substitutions the grammar
        left as text, the substitutions in values bash expands again (prompt expansion, indirection,
        a subscript met by arithmetic: `x='a[$(cmd)]'; echo $((x))`), in names with subscripts given
        to builtins (`printf -v 'a[$(cmd)]'`, `read`, `declare`, `let`, `test -v`, `[[ -v ]]`), and
        mapfile callbacks. Each is checked as a shell string run by the line."""
        texts = [h.text for h in self.parsed.hidden()]
        texts.extend(self.expander.code)
        for run in self.runs:
            if run.cmd.kind == "command" and run.inner:
                texts.extend(self._evaluated_words(run))
        for node in evaluated_operands(self.parsed):
            self.budget.spend()
            texts.extend(substitution_texts(literal(self.parsed, node)))
        for values in shell.variables.values():
            for value in values:
                self.budget.spend(1 + len(value) // 4096)
                texts.extend(substitution_texts(value))
        for text in dict.fromkeys(texts):
            refusal = self.analysis.nested(text, shell, self.depth + 1, self.functions)
            if refusal is not None:
                return refusal
        return None

    def _evaluated_words(self, run: _Run) -> list[str]:
        words = [a for a, _ in run.inner[1:]]
        texts: list[str] = []
        if run.name in ("mapfile", "readarray"):
            texts.extend(_option_values([run.name] + words, ("-C",)))  # the callback is shell code
        options = SETTERS.get(run.name)
        if options is None or (options and not any(w.startswith(o) for w in words for o in options)):
            return texts
        for word in words:
            self.budget.spend(1 + len(word) // 4096)
            texts.extend(substitution_texts(word))
        return texts

    def _nameref(self, run: _Run, shell: Shell) -> Shell:
        """`declare -n r=HOME` (also local, typeset): r stands for the variable it names."""
        words = [a for a, _ in run.inner[1:]]
        if not any(re.fullmatch(r"-[A-Za-z]*n[A-Za-z]*", w) for w in words):
            return shell
        refs: dict[str, list[str]] = {}
        for w in words:
            name, eq, target = w.partition("=")
            if eq and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                refs.setdefault(name, []).extend(self.expander.indirect(target, shell))
        return self._with(shell, refs) if refs else shell

    def _alias(self, run: _Run) -> None:
        """`alias x='rm -rf'` (used on a later line) and `hash -p /bin/rm ls` make a name run other
        code: the name is then followed like a function whose body is that code plus its arguments."""
        words = [a for a, _ in run.inner[1:]]
        if run.name == "alias":
            for w in words:
                name, eq, value = w.partition("=")
                if eq and name and not name.startswith("-"):
                    self.functions[name] = value + ' "$@"'
            return
        opts, rest = _getopt([(w, None) for w in ["hash"] + words], 1, "p")
        paths = [v for o, v in opts if o == "-p"]
        if paths:
            for name in ["hash", *words][rest:]:
                self.functions[name] = shlex.quote(paths[-1]) + ' "$@"'

    def _printf_v(self, run: _Run, shell: Shell) -> Shell:
        """`printf -v NAME FORMAT ARGS...` assigns what printf would print."""
        words = [a for a, _ in run.inner[1:]]
        if words and words[0] == "-v" and len(words) > 1:
            target, rest = words[1], words[2:]
        elif words and words[0].startswith("-v") and len(words[0]) > 2:
            target, rest = words[0][2:], words[1:]
        else:
            return shell
        if rest and rest[0] == "--":
            rest = rest[1:]
        name = re.match(r"[A-Za-z_][A-Za-z0-9_]*", target)
        if name is None:
            return shell
        return self._with(shell, {name.group(0): [printed("printf", rest) if rest else ""]})

    def _read(self, run: _Run, shell: Shell) -> Shell:
        """`read NAME... <<< TEXT` and `mapfile NAME < <<EOF`: the variables may hold the text given
        on standard input by the line (whole, or one line of it), or anything when it gives none."""
        words = [a for a, _ in run.inner[1:]]
        with_arg = "adinNptu" if run.name == "read" else "dnOsuCc"
        names: list[str] = []
        i = 0
        while i < len(words):
            w = words[i]
            if w == "--":
                names.extend(words[i + 1:])
                break
            if w.startswith("-") and len(w) > 1:
                for j in range(1, len(w)):
                    if w[j] in with_arg:
                        value = w[j + 1:] or (words[i + 1] if i + 1 < len(words) else "")
                        if not w[j + 1:]:
                            i += 1
                        if w[j] == "a" and run.name == "read":
                            names.append(value)
                        break
                i += 1
                continue
            names.append(w)
            i += 1
        if run.name != "read":
            names = names[-1:] or ["MAPFILE"]
        texts = self._own_input(run.cmd, shell)
        values = list(dict.fromkeys([t for t in texts] + [line for t in texts for line in t.splitlines()])) or [UNKNOWN]
        plain = [n for n in names if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)] or (["REPLY"] if run.name == "read" else [])
        return self._with(shell, {n: values[:64] for n in plain}) if plain else shell

    def _add(self, run: _Run) -> None:
        self.runs.append(run)
        self.starts.append(run.cmd.node.start_byte)
        for pid, stage in run.cmd.pipes:
            self.by_pipeline.setdefault(pid, []).append((stage, run))

    def _with(self, shell: Shell, values: dict[str, list[str]]) -> Shell:
        self.budget.spend(1 + len(shell.variables) // 16)
        new = shell.copy()
        for name, vals in values.items():
            new.assign(name, vals)
        return new

    def _assign(self, assigns: list[Node], shell: Shell) -> Shell:
        values: dict[str, list[str]] = {}
        for node in assigns:
            name_node = node.child_by_field_name("name")
            if name_node is None:
                continue
            if name_node.type == "subscript":
                name_node = name_node.child_by_field_name("name") or name_node
            name = self.parsed.text(name_node)
            values.setdefault(name, []).extend(self.expander.value(node.child_by_field_name("value"), shell))
        return self._with(shell, values) if values else shell

    def _cd(self, run: _Run, shell: Shell) -> Shell:
        operands = [a for a, _ in run.inner[1:] if not (a.startswith("-") and len(a) > 1)]
        target = operands[0] if operands else HOME
        new = shell.copy()
        if target == "-" or target.startswith((UNKNOWN, ANYTHING)) or len(target) > 4096:
            new.cwd = None
        elif target.startswith(("/", HOME)):
            new.cwd = target
        else:
            new.cwd = None if shell.cwd is None else shell.cwd.rstrip("/") + "/" + target
        return new

    def _reads_network(self, cmd: Command) -> bool:
        for node in cmd.redirects:
            if node.type == "file_redirect" and _operator(node) in ("<", "<&", "<>"):
                for dest in node.children_by_field_name("destination"):
                    if self.parsed.text(dest).startswith(("/dev/tcp/", "/dev/udp/")):
                        return True
        return False

    # -- pass two: rules

    def _judge_run(self, run: _Run) -> Refusal | None:
        kind = run.cmd.kind
        if kind == "redirect":
            return self._redirect(run)
        if kind == "function":
            return self._fork_bomb(run)
        if kind != "command":
            return None
        if run.cmd.words and self._downloads_within(run.cmd.words[0]):
            return self._refuse("download-exec", run, "the command name is the output of a download, so downloaded text would run as a command")
        shown = self.parsed.text(run.cmd.node)
        if run.cmd.words and run.cmd.words[0].type != "word":
            # A first word with several values (`x=a; x='rm -rf /'; $x`, a word split on an IFS the
            # line sets) is judged once per value: each may be the command.
            first = run.cmd.words[0]
            alternatives = self.expander.alternatives(first, run.shell)
            if len(alternatives) > 1:
                rest = [(a, n) for a, n in run.argv if n is not first]
                for fields in alternatives:
                    refusal = self.judge([(w, first) for w in fields] + rest, run.shell, run, shown, 0)
                    if refusal is not None:
                        return refusal
        return self.judge(run.argv, run.shell, run, shown, 0)

    def _refuse(self, rule: str, run: _Run | None, reason: str, shown: str | None = None) -> Refusal:
        text = shown if shown is not None else (self.parsed.text(run.cmd.node) if run is not None else "")
        return Refusal(rule, reason, _show(text))

    def judge(self, argv: list[Arg], shell: Shell, run: _Run | None, shown: str, hops: int) -> Refusal | None:
        """The rules for one command's argv (run: its place in the line, when it has one)."""
        self.budget.spend()
        if hops > 8:
            return None
        unwrapped = unwrap(argv)
        if unwrapped.env:
            shell = self._with(shell, {k: [v] for k, v in unwrapped.env.items()})
        for text in unwrapped.strings:
            refusal = self.analysis.nested(text, shell, self.depth + 1, self.functions)
            if refusal is not None:
                return refusal
        inner = unwrapped.argv
        if not inner:
            return None
        word = inner[0][0]
        name = _name(word)
        words = [a for a, _ in inner]

        def refuse(rule: str, reason: str) -> Refusal:
            return Refusal(rule, reason, _show(shown))

        if UNKNOWN in name or ANYTHING in name:
            # An unresolved command name (`$CMD -rf /`) is judged as if it were rm.
            what = _rm(words[1:], shell.cwd)
            if what:
                return refuse("recursive-delete-root", f"a command whose name is not known before it runs would get rm's recursive-delete arguments on {what}; name the command and a narrower path")
            return None
        if name in self.functions and hops < 4:
            # The function's body with these arguments; the name's own rules apply too, since
            # `command`, `sudo` or a later `unset -f` would reach the program of that name.
            positional = [name] + words[1:]
            refusal = self.analysis.nested(self.functions[name], Shell(dict(shell.variables), positional, shell.cwd), self.depth + 1, self.functions)
            if refusal is not None:
                return refusal
        if name == "rm":
            what = _rm(words[1:], shell.cwd)
            if what:
                return refuse("recursive-delete-root", f"rm would delete {what}, which the floor never runs; delete the exact subdirectory you mean instead")
        elif name == "find":
            return self._find(inner, shell, shown, hops)
        elif name == "xargs":
            return self._xargs(inner, shell, run, shown, hops)
        elif name == "parallel" and ":::" in words:
            # parallel CMD ::: ARGS runs CMD once per argument ({} marks where it goes)
            cut = words.index(":::")
            _, first = _getopt(inner[:cut], 1, "jSI", frozenset({"--jobs", "-j"}))
            command = inner[first:cut]
            for item in words[cut + 1:][:16]:
                argv = [(a.replace("{}", item), n) for a, n in command] if any("{}" in a for a, _ in command) else command + [(item, None)]
                refusal = self.judge(argv, shell, None, shown, hops + 1)
                if refusal is not None:
                    return refusal
        elif name == "rsync":
            what = _rsync(words[1:], shell.cwd)
            if what:
                return refuse("recursive-delete-root", f"rsync --delete would delete everything in {what} that the source lacks; sync into a narrower directory")
        elif name in ("chmod", "chown", "chgrp"):
            what = _chmod(words[1:], shell.cwd)
            if what:
                return refuse("recursive-chmod-root", f"{name} -R would change every file under {what}, which can make the system or the account unusable; change the exact subdirectory instead")
        elif name in ("kill", "pkill", "killall", "killall5"):
            why = _kill(name, words[1:])
            if why:
                return refuse("kill-all-processes", why)
        elif name in ("shutdown", "reboot", "poweroff", "halt", "systemctl", "init", "telinit", "loginctl"):
            why = _power(name, words[1:])
            if why:
                return refuse("power-off", why)
        elif name in SHELLS:
            return self._shell(inner, shell, run, shown, name)
        elif INTERPRETER.fullmatch(name):
            return self._interpreter(inner, shell, run, shown, name)
        elif name == "eval":
            for _, node in inner[1:]:
                if node is not None and self._downloads_within(node):
                    return refuse("download-exec", "eval would run downloaded text as shell code; download to a file, read it, then run it")
            return self.analysis.nested(" ".join(words[1:]), shell, self.depth + 1, self.functions)
        elif name in ("source", "."):
            if len(inner) > 1:
                target, node = inner[1]
                if node is not None and self._downloads_within(node):
                    return refuse("download-exec", f"{name} would run downloaded text as shell code; download to a file, read it, then run it")
                if target in STDIN_PATHS and run is not None:
                    return self._stdin(run, shell, shown, "shell")
        elif name == "trap":
            # trap ACTION SIGNAL...: the action is shell code run later, on the signal or at exit
            action = words[2] if len(words) > 2 and words[1] == "--" else words[1] if len(words) > 1 else ""
            if action and not action.startswith("-"):
                return self.analysis.nested(action, shell, self.depth + 1, self.functions)
        elif name in ("su", "runuser", "flock", "watch", "script", "sg"):
            return self._string_runner(name, inner, shell, shown, hops)
        device = self._device(name, words, shell)
        if device:
            rule, why = device
            return refuse(rule, why)
        return None

    # -- rule helpers that need the line

    def _downloads_within(self, node: Node) -> bool:
        """Whether a download runs inside this word (`$(curl ...)`, `<(wget -O- ...)`)."""
        lo = bisect.bisect_left(self.starts, node.start_byte)
        hi = bisect.bisect_right(self.starts, node.end_byte)
        self.budget.spend(1 + (hi - lo) // 16)
        return any(r.download and r.cmd.within(node) for r in self.runs[lo:hi])

    def _feeders(self, run: _Run) -> list[_Run]:
        """The commands in earlier stages of the pipelines this command sits in."""
        found: list[_Run] = []
        for pid, stage in run.cmd.pipes:
            members = self.by_pipeline.get(pid, [])
            self.budget.spend(1 + len(members) // 16)
            found.extend(r for s, r in members if s < stage and r is not run and r.cmd.kind == "command")
        return list(dict.fromkeys(found))

    def _stdin_texts(self, run: _Run, shell: Shell) -> tuple[list[str], _Run | None]:
        """What a command reading its standard input would read, as far as the line says: its
        heredocs and here-strings, and echo/printf/cat-heredoc output piped in. Also the download
        piped in, if any."""
        texts = self._own_input(run.cmd, shell)
        download = run if run.download else None
        decoded = False
        for feeder in self._feeders(run):
            if feeder.download:
                download = download or feeder
            elif feeder.name in ("echo", "printf"):
                texts.append(printed(feeder.name, [a for a, _ in feeder.inner[1:]]))
            elif feeder.name == "cat":
                texts.extend(self._own_input(feeder.cmd, feeder.shell))
            elif feeder.name == "base64" and any(a in ("-d", "--decode", "-D") for a, _ in feeder.inner[1:]):
                decoded = True
        if decoded:
            # `echo cm0gLXJmIC8K | base64 -d | sh`: what the decoder hands on is checked too
            texts.extend(t for t in (_base64(t) for t in list(texts)) if t)
        return texts, download

    def _own_input(self, cmd: Command, shell: Shell) -> list[str]:
        texts: list[str] = []
        for node in cmd.redirects:
            if node.type == "heredoc_redirect":
                texts.extend(self.parsed.text(c) for c in node.children if c.type == "heredoc_body")
            elif node.type == "herestring_redirect":
                for child in node.named_children:
                    texts.append(" ".join(self.expander.word(child, shell)))
        return texts

    def _stdin(self, run: _Run, shell: Shell, shown: str, as_what: str) -> Refusal | None:
        texts, download = self._stdin_texts(run, shell)
        if download is not None:
            return Refusal("download-exec", f"the output of {download.name or 'a download'} is piped into {run.name}, which would run downloaded text as code; save it to a file and read it first", _show(shown))
        for text in texts:
            refusal = self.analysis.nested(text, shell, self.depth + 1, self.functions) if as_what == "shell" else self._code(text, shell, shown, as_what)
            if refusal is not None:
                return refusal
        return None

    def _shell(self, inner: list[Arg], shell: Shell, run: _Run | None, shown: str, name: str) -> Refusal | None:
        command_mode = stdin_mode = False
        i = 1
        while i < len(inner):
            a = inner[i][0]
            if a in ("--", "-"):
                i += 1
                break
            if a.startswith("--"):
                i += 2 if a in ("--rcfile", "--init-file") else 1
                continue
            if a[:1] in ("-", "+") and len(a) > 1:
                cluster = a[1:]
                command_mode = command_mode or (a[0] == "-" and "c" in cluster)
                stdin_mode = stdin_mode or (a[0] == "-" and "s" in cluster)
                i += 2 if ("o" in cluster or "O" in cluster) else 1
                continue
            break
        operands = inner[i:]
        if command_mode:
            if not operands:
                return None
            script, node = operands[0]
            if node is not None and self._downloads_within(node):
                return Refusal("download-exec", f"{name} -c would run downloaded text as shell code; download to a file, read it, then run it", _show(shown))
            positional = [a for a, _ in operands[1:]]
            return self.analysis.nested(script, Shell(dict(shell.variables), positional, shell.cwd), self.depth + 1, self.functions)
        if not stdin_mode and operands and operands[0][0] not in STDIN_PATHS:
            node = operands[0][1]
            if node is not None and self._downloads_within(node):
                return Refusal("download-exec", f"{name} would run a downloaded script; download to a file, read it, then run it", _show(shown))
            return None
        if run is None:
            return None
        return self._stdin(run, shell, shown, "shell")

    def _interpreter(self, inner: list[Arg], shell: Shell, run: _Run | None, shown: str, name: str) -> Refusal | None:
        family = re.match(r"[a-z]+", name)
        spec = _INTERPRETERS.get(family.group(0) if family else "", _INTERPRETERS["python"])
        codes: list[Arg] = []
        module = False
        script: Arg | None = None
        i = 1
        while i < len(inner):
            a, node = inner[i]
            if a == "--":
                script = inner[i + 1] if i + 1 < len(inner) else None
                break
            if a.startswith("--") and len(a) > 2:
                option, eq, value = a.partition("=")
                if option in spec.code:
                    if not eq and i + 1 < len(inner):
                        i += 1
                        value, node = inner[i]
                    codes.append((value, node))
                elif option in spec.with_arg and not eq:
                    i += 1
                i += 1
                continue
            if a.startswith("-") and len(a) > 1:
                consumed = False
                for j in range(1, len(a)):
                    flag = "-" + a[j]
                    if flag in spec.code or flag in spec.with_arg or flag in spec.module:
                        value = a[j + 1:]
                        if not value and i + 1 < len(inner):
                            i += 1
                            value, node = inner[i]
                        if flag in spec.code:
                            codes.append((value, node))
                        module = module or flag in spec.module
                        consumed = True
                        break
                i += 1
                if consumed and module:
                    break
                continue
            script = inner[i]
            break

        def refuse(why: str) -> Refusal:
            return Refusal("download-exec", why, _show(shown))

        for code, node in codes:
            if node is not None and self._downloads_within(node):
                return refuse(f"{name} would run downloaded code; download to a file, read it, then run it")
            refusal = self._code(code, shell, shown, name)
            if refusal is not None:
                return refusal
        if codes or module:
            return None
        if script is not None and script[0] not in STDIN_PATHS:
            if script[1] is not None and self._downloads_within(script[1]):
                return refuse(f"{name} would run a downloaded script; download to a file, read it, then run it")
            return None
        if run is None:
            return None
        return self._stdin(run, shell, shown, name)

    def _code(self, code: str, shell: Shell, shown: str, language: str) -> Refusal | None:
        """Inline interpreter code: deletions of /, home or a system directory, fork loops, and the
        shell strings it hands to system() and friends."""
        code = code[:MAX_CODE]
        self.budget.spend(1 + len(code) // 1024)
        for count, m in enumerate(_DELETE_CALL.finditer(code)):
            if count >= 256:
                break
            target = _code_path(code[m.end(): m.end() + 300])
            what = danger(target, shell.cwd) if target is not None else None
            if what:
                return Refusal("inline-code-delete-root", f"the inline code calls {m.group(1) or m.group(2)} on {what[0]}, which the floor never runs; delete the exact subdirectory you mean instead", _show(shown))
        if _FORK_LOOP.search(code):
            return Refusal("fork-bomb", "the inline code forks in an endless loop, which exhausts the machine's processes", _show(shown))
        for text in _code_shell_strings(code, backticks=language.startswith(("perl", "ruby", "php"))):
            refusal = self.analysis.nested(text, shell, self.depth + 1, self.functions)
            if refusal is not None:
                return refusal
        return None

    def _find(self, inner: list[Arg], shell: Shell, shown: str, hops: int) -> Refusal | None:
        args = [a for a, _ in inner]
        i = 1
        while i < len(args) and (args[i] in ("-H", "-L", "-P") or args[i].startswith(("-D", "-O"))):
            i += 2 if args[i] == "-D" else 1
        roots: list[str] = []
        while i < len(args) and not (args[i].startswith("-") or args[i] in ("(", "!", ")", ",")):
            roots.append(args[i])
            i += 1
        expression = args[i:]
        roots = roots or ["."]
        dangerous = [(r, w) for r in roots if (w := danger(r, shell.cwd))]
        narrowed = _narrowed(expression)
        if "-delete" in expression and dangerous and not narrowed:
            return Refusal("recursive-delete-root", f"find -delete would delete everything under {dangerous[0][1][0]}; narrow it with -name or start from the exact subdirectory", _show(shown))
        j = 0
        while j < len(expression):
            if expression[j] in ("-exec", "-execdir", "-ok", "-okdir"):
                end = j + 1
                while end < len(expression) and expression[end] not in (";", "+"):
                    end += 1
                command = inner[i + j + 1: i + end]
                j = end
                if not command:
                    continue
                runs = unwrap(command).argv
                run_name = _name(runs[0][0]) if runs else ""
                if dangerous and not narrowed and run_name in DELETERS:
                    return Refusal("recursive-delete-root", f"find -exec {run_name} would delete every file under {dangerous[0][1][0]}; narrow it with -name or start from the exact subdirectory", _show(shown))
                for root in (roots if not narrowed else ["{}"]):
                    argv = [(a.replace("{}", root), n) for a, n in command]
                    refusal = self.judge(argv, Shell(shell.variables, shell.positional, shell.cwd if not narrowed else None), None, shown, hops + 1)
                    if refusal is not None:
                        return refusal
            j += 1
        return None

    def _xargs(self, inner: list[Arg], shell: Shell, run: _Run | None, shown: str, hops: int) -> Refusal | None:
        opts, rest = _getopt(inner, 1, "adEILnPs", frozenset({"--arg-file", "--delimiter", "--eof", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var"}))
        replace = None
        for option, value in opts:
            if option == "-I" or option == "--replace" or option == "-i":
                replace = value or "{}"
        command = inner[rest:] or [("echo", None)]
        items: list[str] = []
        if run is not None:
            runs = unwrap(command).argv
            target = _name(runs[0][0]) if runs else ""
            download = next((f for f in self._feeders(run) if f.download), None)
            if download is not None and (target in SHELLS or INTERPRETER.fullmatch(target) or target in ("eval", "source", ".")):
                return Refusal("download-exec", f"xargs would hand the output of {download.name} to {target} as code; save it to a file and read it first", _show(shown))
            for text in self._stdin_texts(run, shell)[0]:
                items.extend(text.split())
            for feeder in self._feeders(run):
                if feeder.name == "find":
                    # find prints its starting points too, unless its expression only matches names
                    fargs = [a for a, _ in feeder.inner[1:]]
                    first = next((k for k, a in enumerate(fargs) if a.startswith("-") or a in ("(", "!")), len(fargs))
                    if not _narrowed(fargs[first:]):
                        items.extend(fargs[:first])
        items = list(dict.fromkeys(items))[:16]
        candidates = [command]
        for item in items:
            if replace:
                candidates.append([(a.replace(replace, item), n) for a, n in command])
            else:
                candidates.append(command + [(item, None)])
        for argv in candidates:
            refusal = self.judge(argv, shell, None, shown, hops + 1)
            if refusal is not None:
                return refusal
        return None

    def _string_runner(self, name: str, inner: list[Arg], shell: Shell, shown: str, hops: int) -> Refusal | None:
        """su -c, runuser, flock -c, watch, script -c, sg: commands given as one shell string."""
        if name in ("su", "runuser", "script", "sg"):
            # These permute their options: `su - root -c CMD`, `su root -c CMD`.
            words = [a for a, _ in inner]
            strings = _option_values(words, ("-c", "--command"))
            if name == "runuser" and not strings:
                opts, rest = _getopt(inner, 1, "gGu", frozenset({"--group", "--supp-group", "--user"}))
                if any(o in ("-u", "--user") for o, _ in opts):
                    return self.judge(inner[rest:], shell, None, shown, hops + 1)
            if name == "sg" and not strings and len(words) > 2:
                strings = [words[2]]
        elif name == "flock":
            opts, rest = _getopt(inner, 1, "wEc", frozenset({"--timeout", "--conflict-exit-code", "--command"}))
            strings = [v for o, v in opts if o in ("-c", "--command")]
            if not strings and rest + 1 < len(inner):
                if inner[rest + 1][0] in ("-c", "--command") and rest + 2 < len(inner):
                    strings = [inner[rest + 2][0]]
                else:
                    return self.judge(inner[rest + 1:], shell, None, shown, hops + 1)
        else:  # watch
            opts, rest = _getopt(inner, 1, "nq", frozenset({"--interval", "--equexit"}))
            if any(o in ("-x", "--exec") for o, _ in opts):
                return self.judge(inner[rest:], shell, None, shown, hops + 1)
            strings = [" ".join(a for a, _ in inner[rest:])]
        for text in strings:
            refusal = self.analysis.nested(text, shell, self.depth + 1, self.functions)
            if refusal is not None:
                return refusal
        return None

    def _device(self, name: str, words: list[str], shell: Shell) -> tuple[str, str] | None:
        targets: list[str] = []
        formats = False
        if name == "dd":
            targets = [w[3:] for w in words[1:] if w.startswith("of=")]
        elif name == "tee":
            targets = [w for w in words[1:] if not w.startswith("-")]
        elif name in ("cp", "mv", "install", "ddrescue", "pv") and len(words) > 2:
            targets = [words[-1]]
        elif MKFS.fullmatch(name) or name in ("wipefs", "blkdiscard") or (
            name == "sgdisk" and any(w in ("-Z", "--zap-all", "-z", "--zap", "-o", "--clear") for w in words[1:])
        ):
            formats = True
            targets = [w for w in words[1:] if not w.startswith("-")]
        elif name == "shred" or (name == "badblocks" and any(w.startswith("-") and "w" in w for w in words[1:])):
            targets = [w for w in words[1:] if not w.startswith("-")]
        for target in targets:
            if _could_be(target, SYSRQ):
                return "sysrq-trigger", f"{name} would write to {SYSRQ}, which reboots, crashes or powers off the kernel at once"
            if is_device(target) or (formats and target.startswith((UNKNOWN, ANYTHING)) and target.strip(UNKNOWN + ANYTHING) == ""):
                return "device-write", f"{name} would overwrite the disk device {_show(target)}, destroying its file systems; write to an image file instead"
        return None

    def _redirect(self, run: _Run) -> Refusal | None:
        node = run.cmd.node
        if _operator(node) not in OUTPUT_REDIRECTS:
            return None
        for dest in node.children_by_field_name("destination"):
            if dest.type == "number":
                continue
            for target in self.expander.word(dest, run.shell):
                if _could_be(target, SYSRQ):
                    return self._refuse("sysrq-trigger", run, f"the redirection writes to {SYSRQ}, which reboots, crashes or powers off the kernel at once", self._statement_text(node))
                if is_device(target):
                    return self._refuse("device-write", run, f"the redirection overwrites the disk device {_show(target)}, destroying its file systems; write to an image file instead", self._statement_text(node))
        return None

    def _statement_text(self, node: Node) -> str:
        parent = node.parent
        return self.parsed.text(parent if parent is not None and parent.type in ("redirected_statement", "command") else node)

    def _fork_bomb(self, run: _Run) -> Refusal | None:
        body = run.cmd.body
        if body is None:
            return None
        name = run.cmd.variable
        inside = self.runs[bisect.bisect_left(self.starts, body.start_byte):bisect.bisect_right(self.starts, body.end_byte)]
        self.budget.spend(1 + len(inside) // 16)
        calls = [r for r in inside if r.cmd.kind == "command" and r.cmd.within(body) and r.cmd.words and self.parsed.text(r.cmd.words[0]) == name]
        if not calls:
            return None
        piped = any(len(r.cmd.pipes) > len(run.cmd.pipes) for r in calls)
        background = looped = False
        stack = [body]
        seen = 0
        while stack and seen < 10_000:
            node = stack.pop()
            seen += 1
            background = background or node.type == "&"
            looped = looped or node.type in ("while_statement", "for_statement", "c_style_for_statement")
            stack.extend(node.children)
        self.budget.spend(1 + seen // 64)
        if (piped or background) and (len(calls) >= 2 or looped):
            return self._refuse("fork-bomb", run, f"the function {name} starts copies of itself faster than they end (a fork bomb), which exhausts the machine's processes", self.parsed.text(run.cmd.node))
        return None


def _base64(text: str) -> str | None:
    try:
        decoded = base64.b64decode("".join(text.split()), validate=True).decode("utf-8")
        return decoded.replace(HOME, "\ufffd").replace(UNKNOWN, "\ufffd").replace(ANYTHING, "\ufffd")
    except (ValueError, UnicodeDecodeError):
        return None


def _operator(redirect: Node) -> str:
    return next((c.type for c in redirect.children if not c.is_named), "")


# ---------------------------------------------------------------------------------------------
# Argument rules without line context


def _rm(args: list[str], cwd: str | None) -> str | None:
    recursive = maybe = False
    operands: list[str] = []
    options_done = False
    for a in args:
        if not options_done and a == "--":
            options_done = True
        elif not options_done and a.startswith("--"):
            recursive = recursive or _long_prefix(a, "--recursive", 3)
        elif not options_done and a.startswith("-") and len(a) > 1:
            recursive = recursive or "r" in a or "R" in a
        else:
            if a and a.strip(UNKNOWN + ANYTHING) == "":
                maybe = True  # `rm $flags /`: the unknown word may be -rf
            operands.append(a)
    for operand in operands:
        what = danger(operand, cwd)
        if what and (recursive or maybe or what[1]):
            return what[0]
    return None


def _rsync(args: list[str], cwd: str | None) -> str | None:
    if not any(a.startswith("--del") or a == "--remove-source-files" for a in args):
        return None
    operands = [a for a in args if not a.startswith("-")]
    if len(operands) < 2:
        return None
    what = danger(operands[-1], cwd)
    return what[0] if what else None


def _chmod(args: list[str], cwd: str | None) -> str | None:
    recursive = False
    operands: list[str] = []
    options_done = False
    for a in args:
        if not options_done and a == "--":
            options_done = True
        elif not options_done and a.startswith("--"):
            recursive = recursive or _long_prefix(a, "--recursive", 5)
        elif not options_done and a.startswith("-") and len(a) > 1 and "R" in a:
            recursive = True
        else:
            operands.append(a)
    if not recursive:
        return None
    for operand in operands:
        what = danger(operand, cwd)
        if what:
            return what[0]
    return None


def _option_values(words: list[str], names: tuple[str, ...]) -> list[str]:
    """Values of an option anywhere in argv: `-c X`, `-cX`, `--command X`, `--command=X`."""
    values = []
    for k, w in enumerate(words[1:], 1):
        for name in names:
            if w == name and k + 1 < len(words):
                values.append(words[k + 1])
            elif name.startswith("--") and w.startswith(name + "="):
                values.append(w[len(name) + 1:])
            elif not name.startswith("--") and w.startswith(name) and len(w) > len(name) and not w.startswith("--"):
                values.append(w[len(name):])
    return values


def _signal_of(word: str) -> str:
    return word.upper().removeprefix("SIG")


def _kill(name: str, args: list[str]) -> str | None:
    if name == "killall5":
        return "killall5 signals every process on the machine, Osprey included"
    if name == "kill":
        signal = "TERM"
        pids: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--":
                pids.extend(args[i + 1:])
                break
            if a in ("-s", "-n", "--signal") and i + 1 < len(args):
                signal = _signal_of(args[i + 1])
                i += 2
                continue
            if a in ("-l", "-L", "--list", "--table"):
                return None
            if a.startswith("-") and not pids and i == 0 and len(a) > 1:
                signal = _signal_of(a[1:])
                i += 1
                continue
            pids.append(a)
            i += 1
        if "-1" in pids and signal not in ("0",):
            return f"kill -{signal} -1 signals every process the user may signal, Osprey and the session included; name the process ids instead"
        return None
    # pkill / killall: a user's processes with no name or pattern to narrow them
    opts, rest = _getopt([(a, None) for a in [name] + args], 1, "ugGPstUFLoOcJ" if name == "pkill" else "uoyn", frozenset({"--user", "--group", "--parent", "--session", "--terminal", "--euid", "--uid", "--pidfile", "--older-than", "--younger-than", "--signal", "--ns", "--nslist"}))
    operands = ([name] + args)[rest:]
    users = [o for o, _ in opts if o in ("-u", "-U", "--user", "--euid", "--uid")]
    if users and not operands:
        return f"{name} with only a user would signal every process of that user, Osprey and the session included; name the program to stop"
    return None


def _power(name: str, args: list[str]) -> str | None:
    operands = [a for a in args if not a.startswith("-")]
    if name in ("shutdown", "reboot", "poweroff", "halt"):
        if any(a in ("-c", "--help", "-k", "--version") for a in args):
            return None
        return f"{name} would stop or restart the machine, ending this session and everything else running on it"
    if name in ("systemctl", "loginctl"):
        if operands and operands[0] in ("poweroff", "reboot", "halt", "kexec", "soft-reboot"):
            return f"{name} {operands[0]} would stop or restart the machine, ending this session and everything else running on it"
        return None
    if operands and operands[0] in ("0", "6"):
        return f"{name} {operands[0]} would stop or restart the machine, ending this session and everything else running on it"
    return None


def _narrowed(expression: list[str]) -> bool:
    """Whether a find expression only matches some names (so -delete cannot empty a tree)."""
    if any(a in ("-o", "-or", ",") for a in expression):
        return False
    tests = ("-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex", "-lname", "-ilname", "-inum", "-samefile")
    for k, a in enumerate(expression):
        if a in tests and k + 1 < len(expression):
            negated = k > 0 and expression[k - 1] in ("!", "-not")
            pattern = expression[k + 1]
            if not negated and pattern.strip("*.") != "" and not _match_all(pattern):
                return True
    return False


# ---------------------------------------------------------------------------------------------
# Inline interpreter code


@dataclass(frozen=True)
class _Spec:
    code: frozenset[str]
    with_arg: frozenset[str]
    module: frozenset[str] = frozenset()


_INTERPRETERS = {
    "python": _Spec(frozenset({"-c"}), frozenset({"-W", "-X", "-Q"}), frozenset({"-m"})),
    "pypy": _Spec(frozenset({"-c"}), frozenset({"-W", "-X"}), frozenset({"-m"})),
    "perl": _Spec(frozenset({"-e", "-E"}), frozenset({"-I", "-M", "-m", "-x", "-i"})),
    "ruby": _Spec(frozenset({"-e"}), frozenset({"-r", "-I", "-C", "-E", "-F"})),
    "node": _Spec(frozenset({"-e", "--eval", "-p", "--print"}), frozenset({"-r", "--require", "--import", "--loader", "-C", "--conditions", "--input-type"})),
    "nodejs": _Spec(frozenset({"-e", "--eval", "-p", "--print"}), frozenset({"-r", "--require", "--import", "--loader", "-C", "--conditions", "--input-type"})),
    "php": _Spec(frozenset({"-r", "-B", "-R", "-E"}), frozenset({"-c", "-d", "-z"}), frozenset({"-f"})),
    "lua": _Spec(frozenset({"-e"}), frozenset({"-l"})),
    "luajit": _Spec(frozenset({"-e"}), frozenset({"-l", "-j", "-O"})),
}

_DELETE_CALL = re.compile(
    r"\b(rmtree|rmSync|rmdirSync|rmdir|rm_rf|rm_r|rm|remove_dir|remove_entry_secure|remove_entry|remove_tree"
    r"|rimraf(?:\.sync)?|removeSync|emptyDirSync|remove)\s*\(\s*"
    r"|\b(rmtree|remove_tree)\s+(?=['\"$])"
)
_FORK_LOOP = re.compile(r"\bfork\s+while\s+fork\b|while\s*\(?\s*(?:True|1|true)\s*\)?\s*:?\s*\{?\s*(?:os\.)?fork\s*\(|\bloop\s*\{\s*fork\b")
_QUOTED = re.compile(r"'((?:[^'\\\n]|\\.){0,4096})'|\"((?:[^\"\\\n]|\\.){0,4096})\"|`((?:[^`\\]|\\.){0,4096})`", re.DOTALL)
_HOME_EXPRESSION = re.compile(
    r"(?:os\.)?(?:path\.)?expanduser\((['\"])~/?\1\)|(?:pathlib\.)?Path\.home\(\)|os\.environ\[(['\"])HOME\2\]"
    r"|os\.environ\.get\((['\"])HOME\3\)|os\.getenv\((['\"])HOME\4\)|\$ENV\{(['\"]?)HOME\5\}|ENV\[(['\"])HOME\6\]"
    r"|ENV\.fetch\((['\"])HOME\7\)|Dir\.home(?:\(\))?|(?:require\((['\"])os\8\)|os)\.homedir\(\)|process\.env\.HOME"
    r"|process\.env\[(['\"])HOME\9\]|\$HOME|~/?"
)
_PATH_WRAPPER = re.compile(r"(?:[\w.]*\.)?(?:Path|PurePath|abspath|realpath|resolve|normpath|expand_path|new)\((.*)\)", re.DOTALL)
_EXEC_CALL = re.compile(r"\b(?:system|popen|popen2|popen3|spawnSync|spawn|execSync|execFileSync|exec|execFile|check_output|check_call|call|run|Popen|getoutput|getstatusoutput|capture2|capture3|qx|sh)\s*[(\[{]|%x[({\[]")
_BACKTICKS = re.compile(r"`([^`]{1,4096})`")


def _code_path(after: str) -> str | None:
    """The first argument of a deletion call, as a path the floor can judge (markers for home)."""
    after = after.lstrip()
    if after[:1] in ("'", '"'):
        m = _QUOTED.match(after)
        if m is None:
            return None
        literal = next(g for g in m.groups() if g is not None)
        return _code_literal(literal)
    depth = 0
    end = len(after)
    for k, c in enumerate(after):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                end = k
                break
            depth -= 1
        elif c in ",;" and depth == 0:
            end = k
            break
    expression = re.sub(r"\s+", "", after[:end])
    for _ in range(4):
        m = _PATH_WRAPPER.fullmatch(expression)
        if m is None:
            break
        expression = m.group(1).split(",")[0]
        if expression[:1] in ("'", '"'):
            q = _QUOTED.match(expression)
            if q is not None:
                return _code_literal(next(g for g in q.groups() if g is not None))
    if expression.startswith(("os.path.expanduser(", "expanduser(")):
        inner = _QUOTED.search(expression)
        if inner is not None:
            return _code_literal(next(g for g in inner.groups() if g is not None))
    if _HOME_EXPRESSION.fullmatch(expression):
        return HOME
    return None


def _code_literal(literal: str) -> str:
    if literal.startswith("~"):
        slash = literal.find("/")
        return HOME + (literal[slash:] if slash >= 0 else "")
    if literal.startswith("$HOME"):
        return HOME + literal[5:]
    return literal


def _code_shell_strings(code: str, backticks: bool) -> list[str]:
    """Shell command lines inline code runs: the string literals given to system(), popen(),
    subprocess, child_process, backticks and qx(), each alone and joined as an argv."""
    found: list[str] = []
    if backticks:
        found.extend(m.group(1) for _, m in zip(range(64), _BACKTICKS.finditer(code), strict=False))
    for count, m in enumerate(_EXEC_CALL.finditer(code)):
        if count >= 128 or len(found) > 128:
            break
        segment = _balanced(code, m.end() - 1)
        literals = [_unquote(next(g for g in q.groups() if g is not None)) for q in _QUOTED.finditer(segment)][:32]
        found.extend(literals)
        if len(literals) > 1:
            found.extend((_join(literals), "".join(literals), " ".join(literals)))
    return list(dict.fromkeys(s for s in found if s.strip()))


def _balanced(code: str, open_at: int) -> str:
    opener = code[open_at]
    closer = {"(": ")", "[": "]", "{": "}"}.get(opener, ")")
    depth = 0
    for k in range(open_at, min(len(code), open_at + 4096)):
        if code[k] == opener:
            depth += 1
        elif code[k] == closer:
            depth -= 1
            if depth == 0:
                return code[open_at:k + 1]
    return code[open_at:open_at + 4096]


def _unquote(literal: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), literal)


# ---------------------------------------------------------------------------------------------
# Lines that cannot be parsed

_ROOTISH = re.compile(
    r"(?:(?<=[\s'\"=(`])|^)"
    r"(?:/+(?:\*|\.\*|\{[^}\s]{0,20}\})?|~[\w.-]{0,32}/?\*?|\$\{?HOME\}?/?\*?"
    r"|/(?:bin|boot|dev|etc|home|lib|lib64|opt|proc|root|sbin|srv|sys|usr|var)/?\*?)"
    r"(?=$|[\s'\";&|)`])",
    re.MULTILINE,
)
_RM = re.compile(r"(?<![\w.-])\\?r(?:''|\"\")?m(?![\w.-])")
_RECURSIVE = re.compile(r"(?<![\w-])(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)(?![\w-])")
_CHMOD = re.compile(r"\b(?:chmod|chown|chgrp)\b")
_CHMOD_RECURSIVE = re.compile(r"(?<![\w-])(?:-[a-zA-Z]*R[a-zA-Z]*|--recursive)(?![\w-])")
_FIND = re.compile(r"\bfind\b")
_FIND_ACTION = re.compile(r"-delete\b|-exec(?:dir)?\b")
_DISKS = r"/dev/(?:sd|nvme|hd|vd|xvd|mmcblk|disk|mapper)"
_TEXT_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("a write to a disk device", re.compile(rf"\bmkfs\b|\bmkfs\.|\bwipefs\b|\bblkdiscard\b|\bof={_DISKS}|>\s*{_DISKS}|\b(?:tee|shred)\b[^\n]{{0,100}}{_DISKS}")),
    ("a write to /proc/sysrq-trigger", re.compile(r"sysrq-trigger")),
    ("a fork bomb", re.compile(r":\s*\(\s*\)\s*\{|\(\s*\)\s*\{[^}]{0,100}\|[^}]{0,100}&")),
    ("a download run as code", re.compile(
        r"\b(?:curl|wget)\b[^\n]{0,400}?\|\s*(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+)?(?:(?:ba|da|z|k|mk|c|tc|fi|a)?sh|python[\d.]*|perl|ruby|node|php)\b"
        r"|(?:<\(|\$\(|`)\s*(?:curl|wget)\b")),
    ("kill -9 -1", re.compile(r"\bkill\s+(?:(?:-(?:9|KILL|SIGKILL)|-s\s*(?:9|KILL|SIGKILL)|-n\s*9)\s+)?(?:--\s+)?-1(?![\w-])")),
    ("inline code deleting / or home", re.compile(r"\b(?:rmtree|rmSync|rm_rf|remove_tree|rimraf)\b[^\n]{0,60}?(?:['\"](?:/|~/?)['\"]|homedir|expanduser|Path\.home|\$ENV\{HOME\}|environ\[)")),
    ("a shutdown or reboot", re.compile(r"(?:^|[;&|({]\s*|\bsudo\s+)(?:shutdown|reboot|poweroff|halt)\b", re.MULTILINE)),
]


def _window_hits(text: str, head: re.Pattern[str], flag: re.Pattern[str], target: re.Pattern[str]) -> bool:
    for count, m in enumerate(head.finditer(text)):
        if count > 2000:
            return True  # that many is itself suspicious
        window = text[m.end(): m.end() + 300]
        if flag.search(window) and target.search(window):
            return True
    return False


def textual(text: str, why: str) -> Refusal | None:
    """The conservative check for a line the parser cannot analyse: refused with
    `unparseable-dangerous` when its text resembles one of the floor's patterns, else None."""
    sample = text[:MAX_SCAN]
    what = None
    if _window_hits(sample, _RM, _RECURSIVE, _ROOTISH):
        what = "a recursive deletion of / or home"
    elif _window_hits(sample, _CHMOD, _CHMOD_RECURSIVE, _ROOTISH):
        what = "a recursive chmod or chown of / or home"
    elif _window_hits(sample, _FIND, _FIND_ACTION, _ROOTISH):
        what = "a find that deletes from / or home"
    else:
        what = next((label for label, pattern in _TEXT_PATTERNS if pattern.search(sample)), None)
    if what is None:
        return None
    first = sample.strip().splitlines()[0] if sample.strip() else ""
    return Refusal(
        "unparseable-dangerous",
        f"the command could not be analysed ({why}) and its text looks like {what}; fix the syntax or split it into simpler commands",
        _show(first),
    )

