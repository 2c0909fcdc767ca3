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
from collections.abc import Iterable
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
    redirect_descriptor,
    redirect_destination,
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
    "move-root": "Moving or renaming /, a home directory or a top-level system directory (mv / x, mv ~ x, mv /usr /usr.old, mv /etc /dev/null).",
    "firewall-lockout": "Removing every firewall rule while leaving a default that drops traffic (iptables -F with iptables -P INPUT DROP, nft flush ruleset with a policy drop input chain, ufw default deny with ufw enable and no allow rule), or firewalld panic mode.",
    "crontab-wipe": "Removing or emptying the user's crontab (crontab -r, crontab /dev/null, an empty crontab -).",
    "reverse-shell": "A shell or interpreter whose commands come from or go to a network connection (bash -i >& /dev/tcp/H/P 0>&1, nc -e /bin/sh, ncat -c, socat exec:sh tcp:H:P, a shell piped into nc), or inline code that connects a socket to a shell.",
    "unparseable-dangerous": "A command line that cannot be parsed (syntax error, too large, too complex or nested too deeply) whose text matches one of the floor's patterns.",
}

MAX_DEPTH = 4  # nested shell strings (sh -c, eval, su -c, heredocs fed to a shell, code's system())
MAX_CODE = 64 * 1024  # inline interpreter code examined
MAX_SCAN = 1024 * 1024  # text examined by the fallback for unparseable lines
CUT = 200
MAX_RESPELLINGS = 64  # brace-expanded command words and `<>` rewritten per line
MAX_RESPELLED = 16 * 1024  # longer lines that do not parse are not parsed a second time
MAX_LINKS = 64  # links to dangerous targets one line may make


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
    analysis = _Analysis(Budget())
    # A line runs as `bash -c LINE` with no further arguments: $1, $9, $@ and $* are empty.
    verdict = analysis.run(command, Shell(positional=["bash"]), 0, {}) or analysis.firewall.verdict()
    if verdict is None and _IFS_EXPANSION.search(command) and not _IFS_SET.search(command):
        # The grammar splits some spellings (`rm$IFS$9-rf$IFS$9/`) into words bash does not: the
        # line is judged again as bash reads it, with $IFS a blank and the empty parameters gone.
        respelled = _EMPTY_PARAMETER.sub("", _IFS_EXPANSION.sub(" ", command))
        again = _Analysis(Budget())
        verdict = again.run(respelled, Shell(positional=["bash"]), 0, {}) or again.firewall.verdict()
    return verdict


_IFS_EXPANSION = re.compile(r"\$\{IFS(?::0:1|:0|%%?\S{0,8})?\}|\$IFS(?![A-Za-z0-9_])")
_IFS_SET = re.compile(r"(?:^|[\s;&|({])(?:export\s+|local\s+|declare\s+(?:-\w+\s+)*)?IFS\+?=|\bread\b[^\n;|&]*\bIFS\b")
_EMPTY_PARAMETER = re.compile(r"\$(?:\{[1-9@*]\}|[1-9@*])")


# A word at a command's start that opens with `{` and no blank is a brace expansion (`{rm,-rf,/}`
# runs `rm -rf /`), not a group; tree-sitter-bash cannot parse it there, so the floor reads it as
# the argument of a `command` wrapper. tree-sitter-bash cannot parse `<>` either; the floor reads it
# as `>` (both open the file for writing; a network path is judged for either).
_BRACE_COMMAND = re.compile(r"(^|[;&|(`\n!]|\b(?:then|do|else|elif|if|while|until|time)[ \t]+)([ \t]*)(?=\{[^\s}])", re.MULTILINE)
_READ_WRITE = re.compile(r"(?<![<>])<>(?![<>])")


def _respelled(text: str) -> str | None:
    """The line with brace-expanded command words and `<>` in forms the grammar parses, or None."""
    new = _BRACE_COMMAND.sub(lambda m: m.group(1) + m.group(2) + "command ", text, count=MAX_RESPELLINGS)
    new = _READ_WRITE.sub(">", new, count=MAX_RESPELLINGS)
    return new if new != text else None


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
DEVICE_PREFIXES = ("sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk", "rdisk", "md", "dm-", "nbd", "mapper/", "block/", "zd", "rbd", "drbd", "root", "mem", "kmem", "port")
SYSRQ = "/proc/sysrq-trigger"
OUTPUT_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&", "&>|"})
STDIN_PATHS = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
NETWORK_PATHS = ("/dev/tcp/", "/dev/udp/")
IPTABLES = frozenset({"iptables", "ip6tables", "iptables-nft", "iptables-legacy", "ip6tables-nft", "ip6tables-legacy"})
NETWORK_CLIENTS = frozenset({"nc", "ncat", "netcat", "socat", "telnet", "cryptcat", "pwncat"})
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
    for part in rest.split("/")[:4096]:
        if part in ("", "."):
            continue
        if part == "..":
            if comps == ["~"]:
                comps = ["home"]  # the directory holding the home directories
            elif comps:
                comps.pop()
            continue
        comps.append(part)
        if _proc_root(comps):
            comps = []  # /proc/self/root is a link to /
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


def _proc_root(comps: list[str]) -> bool:
    """/proc/PID/root or /proc/PID/task/TID/root (PID: a number, self, thread-self, or a part the
    line cannot know): a link to the process's root directory, which is /."""
    if len(comps) not in (3, 5) or comps[0] != "proc" or comps[-1] != "root":
        return False
    if len(comps) == 5 and comps[2] != "task":
        return False
    return all(c in ("self", "thread-self") or c.isdigit() or _has_wild(c) for c in comps[1:-1:2])


def _normal(path: str) -> str:
    if not path.startswith("/"):
        return path
    path = posixpath.normpath(path).replace("//", "/")
    for _ in range(8):
        comps = path.split("/")
        cut = next((n for n in (4, 6) if len(comps) > n - 1 and _proc_root(comps[1:n])), None)
        if cut is None:
            break
        path = "/" + "/".join(comps[cut:])
    return path


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
        self.firewall = _Firewall()

    def run(self, text: str, shell: Shell, depth: int, functions: dict[str, str]) -> Refusal | None:
        try:
            parsed = parse(text)
        except ShellParseError as error:
            respelled = _respelled(text) if len(text) <= MAX_RESPELLED else None
            if respelled is None:
                raise
            try:
                parsed = parse(respelled)
            except ShellParseError:
                raise error from None
        return _Level(self, parsed, shell, depth, dict(functions)).check()

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
        self.network_fds: set[str] = set()  # descriptors `exec N<>/dev/tcp/...` opened on a connection
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
                if run.argv and run.argv[0][0] == "exec":
                    self._exec_fds(cmd)
                if run.name in ("cd", "pushd"):
                    shell = self._cd(run, shell)
                elif run.name == "ln":
                    shell = self._ln(run, shell)
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
        if shell.links and target not in ("-", ""):
            through = _through_links(target.rstrip("/") + "/", shell)
            target = through if through != target.rstrip("/") + "/" else target
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
                dest = redirect_destination(node)
                if dest is not None and self.parsed.text(dest).startswith(NETWORK_PATHS):
                    return True
        return False

    def _ln(self, run: _Run, shell: Shell) -> Shell:
        """`ln -s TARGET LINK` where TARGET is /, a home or a system directory: LINK/ stands for it."""
        opts, rest = _getopt(run.inner, 1, "St", frozenset({"--suffix", "--target-directory"}))
        if not any(o in ("-s", "--symbolic") or (o.startswith("--sym") and "--symbolic".startswith(o)) for o, _ in opts):
            return shell
        operands = [a for a, _ in run.inner[rest:]]
        if "--" in operands:  # GNU ln takes options after operands: `ln -s / -- x`
            operands.remove("--")
        directory = next((v for o, v in opts if o in ("-t", "--target-directory")), None)
        pairs: list[tuple[str, str]] = []
        if directory is not None:
            pairs = [(t, directory.rstrip("/") + "/" + posixpath.basename(t.rstrip("/"))) for t in operands]
        elif len(operands) == 1:
            pairs = [(operands[0], posixpath.basename(operands[0].rstrip("/")))]
        elif len(operands) >= 2:
            # TARGET LINK, or TARGET... DIR (and TARGET DIR when LINK is a directory)
            pairs = [(operands[0], operands[1])] if len(operands) == 2 else []
            pairs += [(t, operands[-1].rstrip("/") + "/" + posixpath.basename(t.rstrip("/"))) for t in operands[:-1]]
        links: dict[str, str] = {}
        for target, link in pairs[:16]:
            if not link or link.endswith("/"):
                continue  # the link would be named after `/`, which has no name: ln fails
            target = _through_links(target.rstrip("/") + "/", shell)
            if not target.startswith(("/", HOME)):
                if shell.cwd is None:
                    continue
                target = shell.cwd.rstrip("/") + "/" + target
            what = danger(target, shell.cwd)
            key = _link_key(link)
            if what is None or what[1] or not key or key in (".", "/"):
                continue
            links[key] = target
            if shell.cwd is not None and not key.startswith(("/", HOME)):
                links[_link_key(shell.cwd.rstrip("/") + "/" + key)] = target
        if not links:
            return shell
        new = shell.copy()
        new.links.update(links)
        if len(new.links) > MAX_LINKS:
            raise ShellParseError(f"the command line makes more than {MAX_LINKS} links to /, a home or a system directory")
        self.budget.spend(len(new.links))
        return new

    def _exec_fds(self, cmd: Command) -> None:
        for node in cmd.redirects:
            dest = redirect_destination(node) if node.type == "file_redirect" else None
            fd = next((c for c in node.children if c.type == "file_descriptor"), None)
            if dest is not None and fd is not None and self.parsed.text(dest).startswith(NETWORK_PATHS):
                self.network_fds.add(self.parsed.text(fd))

    def _network_redirect(self, run: _Run | None) -> str | None:
        """The network connection this command's standard streams are redirected to, if any: by
        its own redirections, or by those of a loop, group or pipeline it runs in
        (`while read c; do $c; done < /dev/tcp/H/P`)."""
        if run is None:
            return None
        found = self._network_in(run.cmd.redirects)
        node, hops = run.cmd.node.parent, 0
        while found is None and node is not None and hops < 32:
            self.budget.spend()
            if node.type == "redirected_statement":
                found = self._network_in([c for c in node.named_children if c.type == "file_redirect"])
            node, hops = node.parent, hops + 1
        return found

    def _network_in(self, redirects: Iterable[Node]) -> str | None:
        for node in redirects:
            if node.type != "file_redirect":
                continue
            dest = redirect_destination(node)
            if dest is None:
                continue
            text = self.parsed.text(dest)
            if text.startswith(NETWORK_PATHS):
                return text
            if _operator(node) in (">&", "<&") and text in self.network_fds:
                return f"descriptor {text} (opened on {'/'.join(NETWORK_PATHS)})"
        return None

    def _consumers(self, run: _Run) -> list[_Run]:
        """The commands in later stages of the pipelines this command sits in."""
        found: list[_Run] = []
        for pid, stage in run.cmd.pipes:
            members = self.by_pipeline.get(pid, [])
            self.budget.spend(1 + len(members) // 16)
            found.extend(r for s, r in members if s > stage and r is not run and r.cmd.kind == "command")
        return list(dict.fromkeys(found))

    def _remote_shell(self, run: _Run | None, name: str, shown: str) -> Refusal | None:
        """A shell or interpreter reading its commands from standard input, with that input or its
        output on a network connection: a reverse or bind shell."""
        if run is None:
            return None
        network = self._network_redirect(run)
        if network is None:
            feeders = self._feeders(run)
            # A shell whose commands are text the line gives it only sends its output on: not remote.
            local = bool(self._own_input(run.cmd, run.shell)) or (bool(feeders) and all(f.name in ("echo", "printf") for f in feeders))
            peers = feeders + ([] if local else self._consumers(run))
            peer = next((r for r in peers if _network_client(r.name, [a for a, _ in r.inner]) or self._network_redirect(r) is not None), None)
            network = f"{peer.name} in the same pipeline" if peer is not None else None
        if network is None:
            return None
        return Refusal("reverse-shell", f"{name} would read commands from and answer to a network connection ({_show(network)}), a remote shell into this machine; use ssh or a proper service instead", _show(shown))

    # -- pass two: rules

    def _judge_run(self, run: _Run) -> Refusal | None:
        kind = run.cmd.kind
        if kind == "redirect":
            return self._redirect(run)
        if kind == "function":
            return self._fork_bomb(run)
        if kind != "command":
            return None
        if run.cmd.words and self._downloads_within(run.cmd.words[0], run):
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
        if shell.links:
            inner = inner[:1] + [(_through_links(a, shell), n) for a, n in inner[1:]]
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
            network = self._network_redirect(run)
            if network is not None:
                # `while read c <&5; do $c >&5; done` after `exec 5<>/dev/tcp/...`, or a loop
                # reading /dev/tcp/H/P whose lines are run as commands
                return refuse("reverse-shell", f"commands read from a network connection would run with their output sent back ({_show(network)}), a remote shell into this machine; use ssh or a proper service instead")
            return None
        if name in self.functions and hops < 4:
            # The function's body with these arguments; the name's own rules apply too, since
            # `command`, `sudo` or a later `unset -f` would reach the program of that name.
            positional = [name] + words[1:]
            refusal = self.analysis.nested(self.functions[name], Shell(dict(shell.variables), positional, shell.cwd, shell.links), self.depth + 1, self.functions)
            if refusal is not None:
                return refusal
        if name in ("eval", "source", ".") and any(UNKNOWN in w or ANYTHING in w or w in STDIN_PATHS for w in words[1:]):
            network = self._network_redirect(run)
            if network is not None:
                return refuse("reverse-shell", f"{name} would run text read from a network connection ({_show(network)}), a remote shell into this machine; use ssh or a proper service instead")
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
        elif name == "mv":
            what = _move(words[1:], shell.cwd)
            if what:
                return refuse("move-root", f"mv would move {what} away, which breaks the system or the account at once; move the exact subdirectory or files you mean instead")
        elif name == "crontab":
            why = self._crontab(words, run, shell)
            if why:
                return refuse("crontab-wipe", why)
        elif _NC_VARIANT.sub("", name) in ("nc", "ncat", "netcat", "socat"):
            why = _network_exec(_NC_VARIANT.sub("", name), words)
            if why:
                return refuse("reverse-shell", why)
        elif name == "firewall-cmd":
            if any(w == "--panic-on" for w in words[1:]):
                return refuse("firewall-lockout", "firewall-cmd --panic-on drops every packet, cutting this machine off the network (and any remote session); change the zone's rules instead")
        elif name in IPTABLES or name in ("nft", "ufw"):
            self.analysis.firewall.record(name, words, shown)
        device = self._device(name, words, shell)
        if device:
            rule, why = device
            return refuse(rule, why)
        return None

    # -- rule helpers that need the line

    def _downloads_within(self, node: Node, outside: _Run | None = None) -> bool:
        """Whether a download runs inside this word (`$(curl ...)`, `<(wget -O- ...)`); `outside`
        is the command the word belongs to, which is not inside it."""
        lo = bisect.bisect_left(self.starts, node.start_byte)
        hi = bisect.bisect_right(self.starts, node.end_byte)
        self.budget.spend(1 + (hi - lo) // 16)
        return any(r.download and r is not outside and r.cmd.within(node) for r in self.runs[lo:hi])

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
        download = run if run.download or self._input_downloaded(run.cmd) else None
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

    def _input_downloaded(self, cmd: Command) -> bool:
        """Whether the command's standard input is a download: `< <(curl ...)`, `<<< "$(wget ...)"`."""
        for node in cmd.redirects:
            if node.type == "herestring_redirect" and any(self._downloads_within(c) for c in node.named_children):
                return True
            if node.type == "file_redirect" and _operator(node) in ("<", "<>"):
                fd = redirect_descriptor(self.parsed.source, node)
                dest = redirect_destination(node)
                if dest is not None and fd in (None, "0") and self._downloads_within(dest):
                    return True
        return False

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
        if download is run:
            return Refusal("download-exec", f"{run.name} would read downloaded text as code on its standard input; save it to a file and read it first", _show(shown))
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
            return self.analysis.nested(script, Shell(dict(shell.variables), positional, shell.cwd, shell.links), self.depth + 1, self.functions)
        if not stdin_mode and operands and operands[0][0] not in STDIN_PATHS:
            node = operands[0][1]
            if node is not None and self._downloads_within(node):
                return Refusal("download-exec", f"{name} would run a downloaded script; download to a file, read it, then run it", _show(shown))
            return None
        if run is None:
            return None
        return self._stdin(run, shell, shown, "shell") or self._remote_shell(run, name, shown)

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
        return self._stdin(run, shell, shown, name) or self._remote_shell(run, name, shown)

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
        # `\n` written in a shell string often stands for a newline (`python -c 'import os\nwhile 1: ...'`)
        lines = code.replace("\\n", "\n")
        if _FORK_LOOP.search(code) or _fork_loop(code) or (lines != code and (_FORK_LOOP.search(lines) or _fork_loop(lines))):
            return Refusal("fork-bomb", "the inline code forks in an endless loop, which exhausts the machine's processes", _show(shown))
        if _code_remote_shell(code):
            return Refusal("reverse-shell", "the inline code connects a network socket to a shell, a remote shell into this machine; use ssh or a proper service instead", _show(shown))
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
        if shell.links and any(a in ("-L", "-H", "-follow") for a in args):
            roots = [_through_links(r.rstrip("/") + "/", shell) for r in roots]  # find follows the named link
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
                    refusal = self.judge(argv, Shell(shell.variables, shell.positional, shell.cwd if not narrowed else None, shell.links), None, shown, hops + 1)
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

    def _crontab(self, words: list[str], run: _Run | None, shell: Shell) -> str | None:
        """`crontab -r` (also `-ir`, `-r -u USER`), `crontab /dev/null`, or `crontab -` (or no file)
        given nothing on standard input: the user's scheduled jobs are gone, with no copy kept."""
        opts, rest = getopt(words, 1, "uTsnc")
        if any(o == "-r" for o, _ in opts):
            return "crontab -r deletes the user's crontab without a copy; edit it with crontab -e or save crontab -l to a file first"
        if any(o in ("-l", "-e", "-T", "-V", "-n", "-c") for o, _ in opts):
            return None
        operand = words[rest] if rest < len(words) else "-"
        if operand in ("/dev/null", "/dev/zero") or _normal(operand) == "/dev/null":
            return f"crontab {operand} replaces the user's crontab with nothing; edit it with crontab -e or save crontab -l to a file first"
        if operand in STDIN_PATHS and run is not None and self._empty_input(run, shell):
            return "crontab would install an empty table read from standard input, deleting the user's scheduled jobs; edit it with crontab -e or save crontab -l to a file first"
        return None

    def _empty_input(self, run: _Run, shell: Shell) -> bool:
        """Whether the line gives this command nothing on standard input (`< /dev/null`, `echo -n |`,
        `true |`, an empty here-string), with no input from elsewhere."""
        known = self._own_input(run.cmd, shell)
        for node in run.cmd.redirects:
            if node.type == "file_redirect" and _operator(node) == "<":
                dest = redirect_destination(node)
                if dest is None or self.parsed.text(dest) != "/dev/null":
                    return False
                known.append("")
        for feeder in self._feeders(run):
            args = [a for a, _ in feeder.inner[1:]]
            if feeder.name in ("echo", "printf"):
                known.append(printed(feeder.name, args))
            elif feeder.name in ("true", ":", "false") or (feeder.name == "cat" and args == ["/dev/null"]):
                known.append("")
            else:
                return False
        return bool(known) and all(not t.strip() for t in known)

    def _string_runner(self, name: str, inner: list[Arg], shell: Shell, shown: str, hops: int) -> Refusal | None:
        """su -c, runuser, flock -c, watch, script -c, sg: commands given as one shell string."""
        if name in ("su", "runuser", "script", "sg"):
            # These permute their options: `su - root -c CMD`, `su root -c CMD`.
            words = [a for a, _ in inner]
            strings = list(dict.fromkeys(_option_values(words, ("-c", "--command")) + _cluster_values(words, "c", "gGswEIOBTmouS")))
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
        elif name == "nvme" and len(words) > 2 and words[1] in ("format", "sanitize", "delete-ns"):
            formats = True
            targets = [w for w in words[2:] if not w.startswith("-")]
        elif name == "cryptsetup":
            action = next((k for k, w in enumerate(words) if w in ("luksFormat", "erase", "luksErase")), None)
            if action is not None:
                formats = True
                targets = [w for w in words[action + 1:] if not w.startswith("-")][:1]
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
        for dest in [d for d in [redirect_destination(node)] if d is not None]:
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


def _cluster_values(words: list[str], letter: str, with_value: str) -> list[str]:
    """Values of a short option given in a cluster (`script -qc CMD`, `su -lc CMD`): the cluster's
    letters are read until `letter` (its value is the rest or the next word) or another option
    that takes a value."""
    values = []
    for k, w in enumerate(words[1:], 1):
        if not w.startswith("-") or w.startswith("--") or len(w) < 3:
            continue
        for j in range(1, len(w)):
            if w[j] == letter:
                value = w[j + 1:] or (words[k + 1] if k + 1 < len(words) else "")
                if j > 1 and value:
                    values.append(value)
                break
            if w[j] in with_value:
                break
    return values


def _link_key(path: str) -> str:
    path = re.sub(r"/+", "/", path)
    while path.startswith("./"):
        path = path[2:]
    return path.rstrip("/") if path != "/" else path


def _through_links(word: str, shell: Shell) -> str:
    """A path written through a link the line made to a dangerous directory (`x/`, `x/*` after
    `ln -s / x`), as the path it reaches. A path naming the link itself (`x`) is the link."""
    if not shell.links or len(word) > 4096:
        return word
    for _ in range(4):
        path = re.sub(r"/+", "/", word)
        while path.startswith("./"):
            path = path[2:]
        # A relative path also reaches a link made by its absolute name (`ln -s / /tmp/x; cd /tmp`).
        paths = [path] + ([shell.cwd.rstrip("/") + "/" + path] if shell.cwd and not path.startswith(("/", HOME)) else [])
        found = next(((p, key, target) for p in paths for key, target in shell.links.items()
                      if p.startswith(key + "/") or (key.endswith("/") and p.startswith(key))), None)
        if found is None:
            return word
        p, key, target = found
        word = target.rstrip("/") + "/" + p[len(key) + 1:]
    return word


def _move(args: list[str], cwd: str | None) -> str | None:
    """What `mv` would move away when a source is /, a home or a system directory (or all of one)."""
    opts, rest = getopt(args, 0, "tS", frozenset({"--target-directory", "--suffix"}))
    operands = args[rest:]
    options_done = rest > 0 and args[rest - 1] == "--"
    if not options_done:
        # GNU mv permutes: options may follow operands
        more = [a for a in operands if a.startswith("-") and len(a) > 1]
        operands = [a for a in operands if not (a.startswith("-") and len(a) > 1)]
        extra, _ = getopt(more, 0, "tS", frozenset({"--target-directory", "--suffix"}))
        opts += extra
    target = any(o in ("-t", "--target-directory") or o.startswith("--target-directory=") for o, _ in opts)
    sources = operands if target else operands[:-1]
    for source in sources:
        what = danger(source, cwd)
        if what:
            return what[0]
    return None


# Debian's alternatives for netcat: nc.traditional, nc.openbsd, netcat.traditional, ...
_NC_VARIANT = re.compile(r"\.(?:traditional|openbsd|openbsd-netcat|gnu)$")


def _network_client(name: str, words: list[str]) -> bool:
    if _NC_VARIANT.sub("", name) in NETWORK_CLIENTS:
        return True
    return name == "openssl" and len(words) > 1 and words[1] in ("s_client", "s_server")


_SOCAT_EXEC = re.compile(r"(?i)(?:exec|system):(.*)", re.DOTALL)
_SOCAT_NETWORK = re.compile(r"(?i)(?:tcp|tcp4|tcp6|udp|udp4|udp6|sctp|sctp4|sctp6|dccp|ssl|openssl|socks4a?|socks5|proxy|vsock|udp-datagram|udp-sendto|udp-recvfrom|udp-recv)(?:-listen|-l|-connect)?:")


def _network_exec(name: str, words: list[str]) -> str | None:
    """nc/ncat/netcat running a program on its connection (-e, -c, --exec, --sh-exec, --lua-exec),
    or socat joining a network address to a shell or interpreter (EXEC:, SYSTEM:)."""
    if name != "socat":
        for w in words[1:]:
            if w.startswith("--"):
                option = w.partition("=")[0]
                if option in ("--exec", "--sh-exec", "--lua-exec"):
                    return f"{name} {option} would give a program's input and output to a network connection, a remote shell into this machine; use ssh or a proper service instead"
                continue
            if w.startswith("-") and len(w) > 1:
                for ch in w[1:]:
                    if ch in "ec":
                        return f"{name} -{ch} would give a program's input and output to a network connection, a remote shell into this machine; use ssh or a proper service instead"
                    if ch in "pswiqogGxXTIOVbm":
                        break
        return None
    addresses = [w for w in words[1:] if not w.startswith("-") or w == "-"]
    if not any(_SOCAT_NETWORK.match(a) for a in addresses):
        return None
    for a in addresses:
        m = _SOCAT_EXEC.match(a)
        if m is None:
            continue
        program = m.group(1).split(",")[0].strip("'\"")
        try:
            argv = shlex.split(program)[:64]
        except ValueError:
            argv = program.split()[:64]
        run = _name(argv[0]) if argv else ""
        reads_input = not any(not a.startswith("-") or a in ("-c", "-e", "-m") for a in argv[1:])
        if ((run in SHELLS or INTERPRETER.fullmatch(run)) and reads_input) or UNKNOWN in run or ANYTHING in run:
            return f"socat would join a network connection to {run or 'a program'}, a remote shell into this machine; use ssh or a proper service instead"
    return None


class _Firewall:
    """What the firewall commands of one line do, judged together once the line is read: every
    rule removed while a default drops traffic, with no rule let through."""

    def __init__(self) -> None:
        self.flushed: set[tuple[str, str]] = set()  # (family, chain or "*") of the filter table
        self.dropping: dict[tuple[str, str], str] = {}  # (family, INPUT|OUTPUT) with a DROP policy -> command
        self.accepting: set[tuple[str, str]] = set()  # (family, chain) given an ACCEPT rule
        self.nft: list[str] = []
        self.nft_shown = ""
        self.ufw_deny = ""
        self.ufw_enable = self.ufw_allow = False

    def record(self, name: str, words: list[str], shown: str) -> None:
        if len(self.nft) > 256:
            return
        if name == "nft":
            self.nft.append(" ".join(words[1:])[:MAX_CODE])
            if re.search(r"\bpolicy\s+drop\b", self.nft[-1]):
                self.nft_shown = self.nft_shown or shown
        elif name == "ufw":
            operands = [w for w in words[1:] if not w.startswith("-")]
            if operands[:2] in (["default", "deny"], ["default", "reject"]) and (len(operands) < 3 or operands[2] in ("incoming", "outgoing")):
                self.ufw_deny = self.ufw_deny or shown
            elif operands[:1] == ["enable"]:
                self.ufw_enable = True
            elif operands[:1] in (["allow"], ["limit"]) or (operands[:2] in (["route", "allow"], ["insert"]) and "allow" in operands):
                self.ufw_allow = True
        else:
            self._iptables("6" if name.startswith("ip6") else "4", words, shown)

    def _iptables(self, family: str, words: list[str], shown: str) -> None:
        table = "filter"
        action = chain = target = ""
        i = 1
        while i < len(words):
            w = words[i]
            value = words[i + 1] if i + 1 < len(words) else ""
            if w in ("-t", "--table"):
                table, i = value, i + 2
                continue
            if w.startswith("--table="):
                table = w.partition("=")[2]
            elif w.startswith("-t") and not w.startswith("--") and len(w) > 2:
                table = w[2:]
            elif w in ("-F", "--flush"):
                action, chain = "flush", value if value and not value.startswith("-") else "*"
            elif w in ("-P", "--policy"):
                action, chain = "policy", value
                target = words[i + 2] if i + 2 < len(words) else ""
            elif w in ("-A", "--append", "-I", "--insert"):
                action, chain = "add", value
            elif w in ("-j", "--jump"):
                target = value
            i += 1
        if table != "filter":
            return
        if action == "flush":
            self.flushed.add((family, chain))
        elif action == "policy" and chain in ("INPUT", "OUTPUT") and target == "DROP":
            self.dropping.setdefault((family, chain), shown)
        elif action == "add" and target == "ACCEPT":
            self.accepting.add((family, chain))

    def verdict(self) -> Refusal | None:
        for (family, chain), shown in self.dropping.items():
            if ((family, "*") in self.flushed or (family, chain) in self.flushed) and (family, chain) not in self.accepting:
                return Refusal("firewall-lockout", f"the line removes every firewall rule and drops all {chain} traffic by default, cutting this machine off the network (and any remote session); add the rules that keep your access in the same command, or change rules one at a time", _show(shown))
        text = "\n".join(self.nft)
        if (self.nft_shown and re.search(r"\bflush\s+(?:ruleset|table|chain)\b|\bdelete\s+table\b", text)
                and re.search(r"\bhook\s+(?:input|output)\b", text) and not re.search(r"\b(?:add|insert)\s+rule\b[^;\n]{0,2000}\baccept\b", text)):
            return Refusal("firewall-lockout", "the line flushes the nftables rules and adds an input or output chain whose policy drops all traffic, with no rule letting any through; this cuts the machine off the network (and any remote session)", _show(self.nft_shown))
        if self.ufw_deny and self.ufw_enable and not self.ufw_allow:
            return Refusal("firewall-lockout", "the line enables ufw with a deny default and no allow rule, cutting this machine off the network (and any remote session); allow the access you need (ufw allow ssh) in the same command", _show(self.ufw_deny))
        return None


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
_FORK_LOOP = re.compile(
    r"\bfork\b[^;\n]{0,80}?\b(?:while\s*(?:\(\s*)?(?:fork|1|!\s*0|true)|until\s*(?:\(\s*)?(?:0|false))(?![\w.<>=!+\-*/%&|])"  # Perl and Ruby modifiers
    r"|\b1\s+while\s+fork\b|\b(?:while|until)\s*\(\s*fork\s*(?:\(\s*\))?\s*\)"
)
# An endless loop (`while True:`, `while(1)`, `for(;;)`, `loop {`, `loop do`, `until false`, a count()
# that never ends) with a process-creating call in the 300 characters after its head.
_ENDLESS = re.compile(
    r"\bwhile\s*(?:\(\s*)?(?:True|1|true|!\s*0|not\s+(?:False|0))(?!\s*[\w.<>=!+\-*/%&|])|\bfor\s*\(\s*;\s*;\s*\)|\bloop\s*(?:\{|do\b)"
    r"|\buntil\s*(?:\(\s*)?(?:false|0|False)(?!\s*[\w.<>=!+\-*/%&|])|\bfor\s+\w+\s+in\s+(?:itertools\.)?(?:count\(\s*\)|iter\(\s*int\s*,)"
)
_FORK_CALL = re.compile(
    r"\bfork\b|\b(?:pcntl_fork|forkpty|spawn|spawnv|spawnvp|spawnl|spawnlp)\s*\("
    r"|\b(?:child_process|cp)\s*\.\s*(?:exec|execFile)\s*\(|\bchild_process['\"]\s*\)\s*\.\s*(?:exec|execFile)\s*\("
)
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


def _fork_loop(code: str) -> bool:
    for count, m in enumerate(_ENDLESS.finditer(code)):
        if count >= 256:
            return False
        if _FORK_CALL.search(code, m.end(), m.end() + 300):
            return True
    return False


_SOCKET = re.compile(r"\bsocket\s*\.\s*socket\s*\(|\bsocket\s*\(\s*[A-Z]|\bfsockopen\s*\(|\bTCPSocket\b|\bIO::Socket|\bnet\s*\.\s*(?:connect|createConnection|Socket)\b|\bnew\s+net\s*\.\s*Socket\b|\bsocket\.create_connection\s*\(")
_DUP = re.compile(r"\bdup2\s*\(|\bopen\s*\(\s*STD(?:IN|OUT|ERR)\s*,\s*['\"]?[<>+]*&|\bpipe\s*\(|\.pipe\s*\(|\breopen\s*\(|<&%d|>&%d|<&3|>&3")
_SHELL_PROGRAM = re.compile(r"['\"](?:/bin/|/usr/bin/)?(?:ba|da|z|k)?sh(?:\s+-i)?['\"]|\bpty\s*\.\s*spawn\s*\(|/bin/(?:ba|da|z|k)?sh\b|\bcmd\.exe\b")


def _code_remote_shell(code: str) -> bool:
    """Inline code that opens a socket, ties standard streams to it and runs a shell (the usual
    Python, Perl, Ruby, PHP and Node reverse shells)."""
    return bool(_SOCKET.search(code) and _DUP.search(code) and _SHELL_PROGRAM.search(code))


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
_DISKS = r"/dev/(?:sd|nvme|hd|vd|xvd|mmcblk|disk|mapper|block/)"
_TEXT_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("a write to a disk device", re.compile(
        rf"\bmkfs\b|\bmkfs\.|\bwipefs\b|\bblkdiscard\b|\bof={_DISKS}|>\s*{_DISKS}|\b(?:tee|shred)\b[^\n]{{0,100}}{_DISKS}"
        r"|\bnvme\s+(?:format|sanitize|delete-ns)\b|\bcryptsetup\b[^\n]{0,100}\b(?:luksFormat|luksErase|erase)\b")),
    ("a write to /proc/sysrq-trigger", re.compile(r"sysrq-trigger")),
    ("a fork bomb", re.compile(r":\s*\(\s*\)\s*\{|\(\s*\)\s*\{[^}]{0,100}\|[^}]{0,100}&")),
    ("a download run as code", re.compile(
        r"\b(?:curl|wget)\b[^\n]{0,400}?\|\s*(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+)?(?:(?:ba|da|z|k|mk|c|tc|fi|a)?sh|python[\d.]*|perl|ruby|node|php)\b"
        r"|(?:<\(|\$\(|`)\s*(?:curl|wget)\b")),
    ("kill -9 -1", re.compile(r"\bkill\s+(?:(?:-(?:9|KILL|SIGKILL)|-s\s*(?:9|KILL|SIGKILL)|-n\s*9)\s+)?(?:--\s+)?-1(?![\w-])")),
    ("inline code deleting / or home", re.compile(r"\b(?:rmtree|rmSync|rm_rf|remove_tree|rimraf)\b[^\n]{0,60}?(?:['\"](?:/|~/?)['\"]|homedir|expanduser|Path\.home|\$ENV\{HOME\}|environ\[)")),
    ("a shutdown or reboot", re.compile(r"(?:^|[;&|({]\s*|\bsudo\s+)(?:shutdown|reboot|poweroff|halt)\b", re.MULTILINE)),
    ("a link to / or home", re.compile(r"(?<![\w.-])ln\s+(?:-[a-zA-Z-]+\s+){0,8}?(?:-[a-zA-Z]*s[a-zA-Z]*|--symbolic)\s+(?:-[a-zA-Z-]+\s+){0,8}?['\"]?(?:/|~|\$\{?HOME\}?)['\"]?/?\s")),
    ("a firewall lock-out", re.compile(r"--panic-on\b")),
]
_NETWORK_PATH = re.compile(r"/dev/(?:tcp|udp)/")
# (label, command name, what within the next 200 characters of that command makes it one)
_COMMAND_TEXT: list[tuple[str, re.Pattern[str], re.Pattern[str]]] = [
    ("a crontab removal", re.compile(r"\bcrontab\b"), re.compile(r"\s-[a-zA-Z]*r[a-zA-Z]*\b|\s/dev/null\b")),
    ("a reverse shell", re.compile(r"\b(?:nc|ncat|netcat)\b"), re.compile(r"\s-[a-zA-Z]*[ec]\b|\s--(?:sh-|lua-)?exec\b")),
    ("a reverse shell", re.compile(r"\bsocat\b"), re.compile(r"\b(?:exec|system):", re.IGNORECASE)),
]
_SEPARATOR = re.compile(r"[;&|\n]")
_SHELL_WORD = re.compile(r"\b(?:ba|da|z|k)?sh\b")
_IPTABLES_FLUSH = re.compile(r"\bip6?tables\b[^;&|\n]{0,60}\s(?:-F|--flush)\b")
_DROP_POLICY = re.compile(r"\s(?:-P|--policy)\s+(?:INPUT|OUTPUT)\s+DROP\b")
_MV = re.compile(r"(?<![\w.-])mv(?![\w.-])")


def _window_hits(text: str, head: re.Pattern[str], flag: re.Pattern[str], target: re.Pattern[str]) -> bool:
    for count, m in enumerate(head.finditer(text)):
        if count > 2000:
            return True  # that many is itself suspicious
        window = text[m.end(): m.end() + 300]
        if flag.search(window) and target.search(window):
            return True
    return False


def _in_command(text: str, head: re.Pattern[str], tail: re.Pattern[str]) -> bool:
    """Whether `tail` occurs in the 200 characters after `head`, before the command ends."""
    for count, m in enumerate(head.finditer(text)):
        if count > 2000:
            return True
        window = text[m.end(): m.end() + 200]
        end = _SEPARATOR.search(window)
        if tail.search(window[: end.start()] if end else window):
            return True
    return False


def _shell_on_network(text: str) -> bool:
    """A shell's name within 200 characters before or 300 after a /dev/tcp or /dev/udp path."""
    for count, m in enumerate(_NETWORK_PATH.finditer(text)):
        if count > 2000:
            return True
        if _SHELL_WORD.search(text, max(0, m.start() - 200), m.end() + 300):
            return True
    return False


def _moves_root(text: str) -> bool:
    for count, m in enumerate(_MV.finditer(text)):
        if count > 2000:
            return True
        command = re.split(r"[;&|\n]", text[m.end(): m.end() + 300], maxsplit=1)[0]
        words = command.split()
        if len(words) >= 2 and any(_ROOTISH.search(" " + w + " ") for w in words[:-1]):
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
    elif _moves_root(sample):
        what = "a move of / or home"
    elif _IPTABLES_FLUSH.search(sample) and _DROP_POLICY.search(sample):
        what = "a firewall lock-out"
    elif _shell_on_network(sample):
        what = "a reverse shell"
    else:
        what = next((label for label, head, tail in _COMMAND_TEXT if _in_command(sample, head, tail)), None)
        what = what or next((label for label, pattern in _TEXT_PATTERNS if pattern.search(sample)), None)
    if what is None:
        return None
    first = sample.strip().splitlines()[0] if sample.strip() else ""
    return Refusal(
        "unparseable-dangerous",
        f"the command could not be analysed ({why}) and its text looks like {what}; fix the syntax or split it into simpler commands",
        _show(first),
    )

