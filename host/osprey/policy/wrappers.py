"""Command wrappers: programs that run the command their arguments name (`sudo`, `env A=1`,
`timeout 5`, `nice -n 5`, `nohup`, `command`, `exec`, `time`, `uv run`, `npx`, ...), and `unwrap`,
which finds the command a chain of them finally runs, reading each wrapper's options the way that
wrapper reads them.

The words are one simple command's argv after quote removal, as the parse in `shell` gives them
(`simple_commands`, `literal`, or the hardline floor's expanded words). This module imports no
parser, so a caller that only has words does not load one. `xargs` and `find -exec` are not
wrappers here: what they run depends on their input, and the hardline floor reads them itself.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

MAX_WRAPPERS = 16  # wrappers read off one command; past it the rest is left as it is

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
# Run the rest of their arguments as the command, with no options to read (but a leading `--`).
_PLAIN = frozenset({"builtin", "nohup", "nocorrect", "noglob", "eatmydata", "unbuffer", "catchsegv", "busybox", "toybox"})
# A project's tool running a command in the project's environment: `uv run pytest`, `bundle exec rspec`.
RUNNER_PAIRS = frozenset({
    ("uv", "run"), ("poetry", "run"), ("pdm", "run"), ("pipenv", "run"), ("hatch", "run"),
    ("pnpm", "exec"), ("yarn", "exec"), ("npm", "exec"), ("bundle", "exec"),
})
# Package runners: `npx jest`, `bunx eslint .`; `npx -c 'text'` runs text as shell.
_PACKAGE_RUNNERS = frozenset({"npx", "bunx", "npm exec", "pnpm exec", "yarn exec"})
# GNU programs some systems install with a `g` prefix (coreutils from Homebrew).
_GNU = frozenset({"env", "nice", "nohup", "stdbuf", "timeout", "chroot"})
# Every wrapper `unwrap` reads (the first word of a runner pair too).
WRAPPERS = _PLAIN | {first for first, _ in RUNNER_PAIRS} | {
    "sudo", "doas", "pkexec", "env", "npx", "bunx", "command", "coproc", "setsid", "chronic", "exec", "time", "nice",
    "timeout", "stdbuf", "ionice", "chroot", "taskset", "chrt", "strace", "ltrace", "fakeroot", "valgrind",
}


def getopt(words: Sequence[str], start: int, short_arg: str, long_arg: frozenset[str] = frozenset()) -> tuple[list[tuple[str, str]], int]:
    """The leading options of words[start:] as getopt reads them: ([(option, value)], index of the
    first operand). `short_arg` holds the short options that take a value, `long_arg` the long
    ones that take the next word as their value when not given with `=`."""
    found: list[tuple[str, str]] = []
    i = start
    while i < len(words):
        a = words[i]
        if a == "--":
            return found, i + 1
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            if not eq and name in long_arg and i + 1 < len(words):
                i += 1
                value = words[i]
            found.append((name, value))
            i += 1
            continue
        if a.startswith("-") and len(a) > 1:
            for j in range(1, len(a)):
                if a[j] in short_arg:
                    value = a[j + 1:]
                    if not value and i + 1 < len(words):
                        i += 1
                        value = words[i]
                    found.append(("-" + a[j], value))
                    break
                found.append(("-" + a[j], ""))
            i += 1
            continue
        break
    return found, i


@dataclass
class Unwrapped:
    """What `unwrap` found. `start` is the index of the command finally run; it is the number of
    words when the wrappers run none (`command -v x`, `sudo -l`, `env -S '...'`, nothing left).
    `env` holds the variables `env` or `sudo` set for it, `strings` shell text a wrapper runs
    (`env -S`, `npx -c`), and `exhausted` says more than MAX_WRAPPERS wrappers were stacked, so
    the words from `start` on may still begin with one."""

    start: int
    env: dict[str, str] = field(default_factory=dict)
    strings: list[str] = field(default_factory=list)
    exhausted: bool = False


def _assignment(word: str) -> bool:
    return "=" in word and _ASSIGNMENT.fullmatch(word) is not None


def wrapper_name(word: str) -> str:
    """The program a command word names, as the wrappers are known: `/usr/bin/sudo` is `sudo`,
    `gtimeout` is `timeout`."""
    base = word.rsplit("/", 1)[-1]
    return base[1:] if base.startswith("g") and base[1:] in _GNU else base


def _assignments(words: Sequence[str], i: int, env: dict[str, str]) -> int:
    while i < len(words) and _assignment(words[i]):
        key, _, value = words[i].partition("=")
        env[key] = value
        i += 1
    return i


def _wrapped(words: Sequence[str], i: int, out: Unwrapped) -> int | None:
    """Where the command run by the wrapper at words[i] starts; None when words[i] is no wrapper,
    len(words) when the wrapper runs no command."""
    n = len(words)
    name = wrapper_name(words[i])
    if name not in WRAPPERS:
        return None
    if i + 1 < n and (name, words[i + 1]) in RUNNER_PAIRS:
        name, i = f"{name} {words[i + 1]}", i + 1
        if name not in _PACKAGE_RUNNERS:
            return i + 2 if i + 1 < n and words[i + 1] == "--" else i + 1
    if name == "sudo":
        opts, rest = getopt(words, i + 1, "ugCDhprtTUR", frozenset({
            "--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type", "--command-timeout",
            "--other-user", "--chroot"}))
        if any(o in ("-e", "-l", "-v", "-V", "-K", "--edit", "--list", "--validate", "--version", "--remove-timestamp", "--help", "-h")
               and not (o == "-h" and v) for o, v in opts):
            return n
        return _assignments(words, rest, out.env)
    if name == "doas":
        return getopt(words, i + 1, "uC")[1]
    if name == "pkexec":
        return getopt(words, i + 1, "", frozenset({"--user"}))[1]
    if name == "env":
        opts, rest = getopt(words, i + 1, "uCS", frozenset({"--unset", "--chdir", "--split-string"}))
        if rest < n and words[rest] == "-":  # `env -`: an empty environment
            rest += 1
        rest = _assignments(words, rest, out.env)
        split = [v for o, v in opts if o in ("-S", "--split-string")]
        if split:
            out.strings.append(" ".join(split + [shlex.quote(a) for a in words[rest:]]))
            return n
        return rest
    if name in _PACKAGE_RUNNERS:
        opts, rest = getopt(words, i + 1, "pc", frozenset({"--package", "--call"}))
        calls = [v for o, v in opts if o in ("-c", "--call")]
        if calls:
            out.strings.extend(calls)
            return n
        return rest
    if name == "command":
        opts, rest = getopt(words, i + 1, "")
        return n if any(o in ("-v", "-V") for o, _ in opts) else rest
    if name == "coproc":
        # coproc CMD, coproc { CMD; }, coproc NAME { CMD; } (the grammar splits the group at `;`)
        if i + 2 < n and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", words[i + 1]) and words[i + 2] in ("{", "("):
            return i + 3
        if i + 1 < n and words[i + 1] in ("{", "("):
            return i + 2
        return i + 1
    if name in _PLAIN:
        return i + 2 if i + 1 < n and words[i + 1] == "--" else i + 1
    if name in ("setsid", "chronic"):
        return getopt(words, i + 1, "")[1]
    if name == "exec":
        return getopt(words, i + 1, "a")[1]
    if name == "time":
        return getopt(words, i + 1, "fo", frozenset({"--format", "--output"}))[1]
    if name == "nice":
        return getopt(words, i + 1, "n", frozenset({"--adjustment"}))[1]
    if name == "timeout":
        return getopt(words, i + 1, "sk", frozenset({"--signal", "--kill-after"}))[1] + 1  # the duration
    if name == "stdbuf":
        return getopt(words, i + 1, "ioe", frozenset({"--input", "--output", "--error"}))[1]
    if name == "ionice":
        opts, rest = getopt(words, i + 1, "cnpPu", frozenset({"--class", "--classdata", "--pid", "--pgid", "--uid"}))
        return n if any(o in ("-p", "-P", "-u", "--pid", "--pgid", "--uid") for o, _ in opts) else rest
    if name == "chroot":
        return getopt(words, i + 1, "", frozenset({"--userspec", "--groups"}))[1] + 1  # the new root
    if name in ("taskset", "chrt"):
        opts, rest = getopt(words, i + 1, "")
        return n if any(o in ("-p", "--pid") for o, _ in opts) else rest + 1  # the mask or priority
    if name in ("strace", "ltrace"):
        return getopt(words, i + 1, "oepsuEaIOSXPA", frozenset({"--output", "--expr", "--attach", "--string-limit", "--user"}))[1]
    if name == "fakeroot":
        return getopt(words, i + 1, "lsi", frozenset({"--lib", "--faked"}))[1]
    if name == "valgrind":
        return getopt(words, i + 1, "")[1]
    return None


def unwrap(words: Sequence[str]) -> Unwrapped:
    """The command a chain of wrappers finally runs: in `FOO=1 sudo -E timeout 30 make test` it is
    `make test`, from index 5. Assignments before a command are passed over; each wrapper's
    options are read as it reads them (`sudo -u root`, `timeout -s KILL 10`, `env -i A=1`,
    `nice -n 5`). At most MAX_WRAPPERS wrappers are read."""
    out = Unwrapped(0)
    i = 0
    for _ in range(MAX_WRAPPERS):
        while i < len(words) and _assignment(words[i]):
            i += 1
        if i >= len(words):
            out.start = len(words)
            return out
        rest = _wrapped(words, i, out)
        if rest is None:
            out.start = i
            return out
        i = min(rest, len(words))
    while i < len(words) and _assignment(words[i]):
        i += 1
    out.start = i
    out.exhausted = i < len(words) and _wrapped(words, i, Unwrapped(i)) is not None
    return out
