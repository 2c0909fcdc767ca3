"""Approval policies: whether a tool call may run, must be asked about, or is denied.

The policy is an interceptor of the tool-call path. It answers allow, deny or ask; an `Approver`
(the front end) answers an ask: the TUI asks a person, a headless run denies deterministically.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from ..interception import TRUSTED_READ_ONLY, Interceptor, Order, PendingCall, Verdict

if TYPE_CHECKING:
    from ..tools.base import ToolOutcome
    from .rules import Rule
    from .store import ApprovalStore

from . import POLICIES


def preset_policy(preset: Literal["yolo", "read-only"], *, interactive: bool) -> str:
    """The policy a preset flag stands for: --yolo is never; --read-only is unless-trusted in the
    TUI (a person can still approve) and deny-untrusted headless (nobody can)."""
    if preset == "yolo":
        return "never"
    return "unless-trusted" if interactive else "deny-untrusted"


def policy_from_flags(*, yolo: bool, read_only: bool, approval_policy: str | None, interactive: bool) -> str | None:
    """The policy the command-line flags ask for (None: the settings decide). ValueError when more
    than one of --yolo, --read-only and --approval-policy is given."""
    if sum(bool(x) for x in (yolo, read_only, approval_policy)) > 1:
        raise ValueError("choose one of --yolo, --read-only and --approval-policy")
    if yolo:
        return preset_policy("yolo", interactive=interactive)
    if read_only:
        return preset_policy("read-only", interactive=interactive)
    return approval_policy


POLICY_SOURCE = "approvals"


class ApprovalRequest(BaseModel):
    """What a front end shows a person who must approve a call."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built at first use: most sessions never make one

    call_id: str
    tool: str
    arguments: dict[str, Any]
    policy: str
    reason: str
    # The narrowest rule for the call, e.g. `bash(git diff *)` (headless hints name it).
    suggested_rule: str
    # Who asks: the approval policy ("approvals"), or an interceptor that asks whatever the policy
    # (a hook's "ask", the guard on the user's own hooks file). Only the policy's question can be
    # answered once and for all by a saved rule, --allow or --yolo.
    asked_by: str = POLICY_SOURCE
    # A broader rule to offer for "allow always" (`proposed_rule`), e.g. `write_file(src/pkg/**)`;
    # empty: the suggested rule.
    proposed_rule: str = ""

    @property
    def always_rule(self) -> str:
        """The rule "allow always" offers to save (the person may edit it first)."""
        return self.proposed_rule or self.suggested_rule

    @property
    def rememberable(self) -> bool:
        """Whether "allow always" (a saved rule) answers this question."""
        return self.asked_by == POLICY_SOURCE


class ApprovalAnswer(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built at first use: most sessions never make one

    decision: Literal["allow_once", "allow_always", "deny"]
    scope: Literal["project", "global"] = "project"
    # The rule to save with allow_always (default: the request's suggested rule); a front end that
    # offers the proposed rule, edited or not, sends it here.
    rule: str | None = None
    # With deny: a reason the model sees.
    reason: str = ""


class Approver(Protocol):
    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer: ...


class HeadlessApprover:
    """No person to ask: every ask is denied, with a message that says how to allow it."""

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        if not request.rememberable:
            # An interceptor's own question (a hook's, or one no policy skips): --allow and --yolo do not answer it.
            return ApprovalAnswer(decision="deny", reason=f"{request.reason.rstrip('.')}. This headless run has no way to ask, so it was not run.")
        return ApprovalAnswer(decision="deny", reason=(
            f"{request.tool} needs approval under the policy {request.policy}, and this headless run has no way to ask. "
            f"The user can pre-approve it with --allow {shlex.quote(request.suggested_rule)}, or rerun with --yolo."
        ))


# Programs whose first argument is not a subcommand but what they act on: "allow always" for
# `rm build` must not become every `rm`.
BROAD_PROGRAMS = frozenset({
    "rm", "rmdir", "mv", "cp", "dd", "chmod", "chown", "chgrp", "ln", "tee", "truncate", "shred", "kill", "pkill", "killall",
    "sh", "bash", "zsh", "dash", "env", "sudo", "doas", "xargs", "eval", "exec", "nohup", "timeout", "nice", "find",
    "curl", "wget", "python", "python3", "node", "perl", "ruby", "docker", "ssh", "scp", "rsync",
})


def suggested_rule(tool: str, arguments: Mapping[str, Any], *, cwd: str = "", workspace: str = "") -> str:
    """The narrowest useful rule for "allow always": a program and its subcommand, the exact command
    (also when the call uses an option a trailing `*` does not cover), or the exact path the tool
    service will open (relative to the workspace, as rules are); the bare tool name only when
    nothing narrower fits (a line running several different programs, a path no rule can name)."""
    if tool in ("bash", "process"):
        from .rules import risky_option
        from .shell import ShellParseError, simple_commands

        command = arguments.get("command")
        if isinstance(command, str):
            try:
                commands = simple_commands(command)
            except ShellParseError:
                commands = []
            if len(commands) == 1 and commands[0]:
                argv = commands[0]
                if (len(argv) > 1 and not argv[1].startswith("-") and posixpath.basename(argv[0]) not in BROAD_PROGRAMS
                        and risky_option(argv, 2) is None):
                    return f"{tool}({shlex.join(argv[:2])} *)"  # a program and its subcommand: `git diff`
                return f"{tool}({shlex.join(argv)})"  # exactly this command
            programs = {c[0] for c in commands if c}
            if len(programs) == 1 and not {posixpath.basename(p) for p in programs} & BROAD_PROGRAMS:
                return f"{tool}({shlex.quote(programs.pop())} *)"  # `make && make install`
        return tool
    path = arguments.get("path")
    if isinstance(path, str) and path and tool in ("read_file", "write_file", "edit_file"):
        from .rules import opened_paths

        base = workspace or cwd
        opened = opened_paths(path, cwd or base or "/")
        real_base = os.path.realpath(base) if base else ""
        if opened and real_base:
            full = opened[-1]  # with `\\xNN` escapes, the decoded path (the one that names a file)
            if full == real_base or full.startswith(real_base.rstrip("/") + "/"):
                relative = os.path.relpath(full, real_base)
                if relative != "." and not any(c in relative for c in "*?()[]\n"):
                    return f"{tool}({relative})"  # the file the service opens: a symlink's target
    return tool


# What a proposed command prefix may fix: plain words, which the shell leaves as they are (no
# quote, expansion, glob, `~` or space), so the rule names what the call ran.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]{1,256}")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}=[A-Za-z0-9_@%+=:,./-]{0,256}")
_PYTHON = re.compile(r"python(?:[0-9]+(?:\.[0-9]+)?)?")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}(?:\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,7}")
MAX_ASSIGNMENTS = 4  # leading `NAME=value` words a proposed prefix may fix
# `python -m MODULE` for these runs code or a script its arguments name: no prefix is proposed.
CODE_MODULES = frozenset({"timeit", "pdb", "profile", "cProfile", "trace", "runpy", "code", "idlelib", "IPython", "doctest"})
# Modules with subcommands: the subcommand is part of the proposal (`python3 -m pip install *`).
SUBCOMMAND_MODULES = frozenset({"pip"})
# Programs whose options come first and that have no subcommands: the program alone is proposed.
NO_SUBCOMMANDS = frozenset({"pytest", "py.test"})
# A subcommand whose next word names the script it runs: the script is part of the proposal.
SCRIPT_RUNNERS = frozenset({("npm", "run"), ("npm", "run-script"), ("pnpm", "run"), ("yarn", "run"), ("go", "run")})
# A subcommand whose next word is a program it runs: the proposal is made for that program.
PROGRAM_RUNNERS = frozenset({("uv", "run"), ("poetry", "run"), ("pipenv", "run"), ("pdm", "run"), ("hatch", "run"), ("bundle", "exec")})


def proposed_rule(tool: str, arguments: Mapping[str, Any], *, cwd: str = "", workspace: str = "") -> str:
    """A rule to offer for "allow always", broader than `suggested_rule` where that is useful: for a
    command, its program and subcommand or script (`bash(python3 -m unittest *)`, `bash(npm run test *)`),
    else the exact command; for a file, its directory (`write_file(src/pkg/**)`) or, at the workspace
    root, its extension (`write_file(*.txt)`). What it proposes in place of `suggested_rule` always
    parses and covers this call; it falls back to `suggested_rule` when nothing else does (a line of
    several commands, a protected name, a path outside the workspace, any other tool)."""
    from .rules import Rule, RuleError

    suggested = suggested_rule(tool, arguments, cwd=cwd, workspace=workspace)
    base = workspace or cwd
    if tool in ("bash", "process"):
        candidates = _command_proposals(tool, arguments.get("command"))
    elif tool in ("read_file", "write_file", "edit_file"):
        candidates = _path_proposals(tool, arguments.get("path"), cwd=cwd, base=base)
    else:
        candidates = []
    for text in candidates:
        try:
            rule = Rule.parse(text)
        except RuleError:
            continue
        if rule.pattern is not None and rule.covers(tool, arguments, cwd=cwd or base, workspace=base):
            return str(rule)
    return suggested


def _command_proposals(tool: str, command: Any) -> list[str]:
    """For one simple command: its fixed prefix and `*` when it has a safe one, then the exact command."""
    from .rules import MAX_COMMAND, risky_option
    from .shell import ShellParseError, simple_commands

    if not isinstance(command, str) or len(command) > MAX_COMMAND:
        return []
    try:
        commands = simple_commands(command)
    except (ShellParseError, RecursionError, ValueError):
        return []
    if len(commands) != 1 or not commands[0]:
        return []
    argv = commands[0]
    exact = f"{tool}({shlex.join(argv)})"
    fixed = _fixed_words(argv)
    if fixed is None or risky_option(argv, 0) is not None:
        return [exact]
    return [f"{tool}({shlex.join(argv[:fixed])} *)", exact]


def _fixed_words(argv: list[str], *, runner: bool = True) -> int | None:
    """How many leading words of a command a proposed `words *` rule fixes, or None when only the
    exact command fits: a broad program, options before the subcommand, words the shell changes."""
    assignments = 0
    while assignments < min(len(argv), MAX_ASSIGNMENTS) and _ASSIGNMENT.fullmatch(argv[assignments]):
        assignments += 1  # `PYTHONPATH=src python3 -m unittest`: part of the command's meaning
    rest = argv[assignments:]
    if not rest or not _PLAIN_WORD.fullmatch(rest[0]) or rest[0].startswith("-"):
        return None
    name = rest[0].rsplit("/", 1)[-1]
    if _PYTHON.fullmatch(name):  # only `python -m MODULE`, options after the module
        if len(rest) < 3 or rest[1] != "-m" or not _MODULE.fullmatch(rest[2]) or rest[2] in CODE_MODULES:
            return None
        if rest[2] in SUBCOMMAND_MODULES:
            return assignments + 4 if len(rest) > 3 and _subcommand(rest[3]) else None
        return assignments + 3
    if name in BROAD_PROGRAMS or "=" in name:
        return None
    if name in NO_SUBCOMMANDS:
        return assignments + 1
    if len(rest) < 2 or not _subcommand(rest[1]):
        return None
    if (name, rest[1]) in SCRIPT_RUNNERS:
        return assignments + 3 if len(rest) > 2 and _subcommand(rest[2]) else None
    if (name, rest[1]) in PROGRAM_RUNNERS:
        inner = _fixed_words(rest[2:], runner=False) if runner else None
        return None if inner is None else assignments + 2 + inner
    return assignments + 2


def _subcommand(word: str) -> bool:
    """A word that can be a subcommand or a target: plain, not an option, not a variable definition."""
    return bool(_PLAIN_WORD.fullmatch(word)) and not word.startswith("-") and "=" not in word


def _path_proposals(tool: str, path: Any, *, cwd: str, base: str) -> list[str]:
    """The directory of the file the service opens (`src/pkg/**`), or at the workspace root the
    file's extension (`*.txt`); none for a protected name, or when what the pattern must spell
    holds a character a pattern cannot (a glob character, a backslash, edge spaces)."""
    from .rules import opened_paths, protected

    if not isinstance(path, str) or not path or not base:
        return []
    opened = opened_paths(path, cwd or base)
    if not opened:
        return []
    real_base = os.path.realpath(base)
    full = opened[-1]  # as suggested_rule: the decoded path when it holds `\\xNN` escapes
    if not full.startswith(real_base.rstrip("/") + "/"):
        return []
    segments = os.path.relpath(full, real_base).split("/")
    if any(protected(s) for s in segments):
        return []
    if len(segments) > 1:
        spelled = segments[:-1]
        text = "/".join(spelled) + "/**"
    else:
        stem, extension = os.path.splitext(segments[0])
        if not stem or len(extension) < 2:
            return []
        spelled, text = [extension], "*" + extension
    if any(s != s.strip() or any(c in s for c in "*?()[]\\\n\r") for s in spelled):
        return []
    return [f"{tool}({text})"]


class ApprovalPolicy(Interceptor):
    """One policy across a session, with saved rules and rules given for this run (`--allow`).

    - never: every call runs (the hardline floor still applies; it is not part of this policy);
    - on-request: read-only tools run; others run when a rule covers them, else ask;
    - on-failure: calls run until one fails; the next batch's requesting calls need a rule or an ask,
      and a later success clears the latch;
    - unless-trusted: the trusted read-only built-ins run; others need a rule, else ask;
    - deny-untrusted: the trusted read-only built-ins run; others are denied without asking and
      without reading saved approvals (rules given for this run still apply: the user gave them).
    """

    name = POLICY_SOURCE
    order = Order.APPROVALS

    def __init__(self, policy: str, *, store: ApprovalStore | None = None, allow: Sequence[Rule] = (), workspace: str = "") -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown approval policy {policy!r}; one of {', '.join(POLICIES)}")
        self.policy = policy
        self.store = store
        self.allow = list(allow)
        self.workspace = workspace
        self.failure_latched = False
        self._batch_latched = False
        self._batch_failed = False
        self._approved_success = False

    def begin_batch(self, turn: int = 0) -> None:
        """Start deciding the calls of one model turn (the on-failure latch is read per batch)."""
        self._batch_latched = self.failure_latched
        self._batch_failed = self._approved_success = False

    def end_batch(self, turn: int = 0) -> None:
        """on-failure: a failure arms the latch for the next batch; a batch that ran under the
        latch clears it only when a call that needed approval (and got it) succeeded and nothing
        in the batch failed. Decided when the batch ends, so concurrent calls cannot race it."""
        if self.policy != "on-failure":
            return
        if self._batch_failed:
            self.failure_latched = True
        elif self._batch_latched and self._approved_success:
            self.failure_latched = False

    def _requests(self, call: PendingCall) -> bool:
        tool = call.tool
        # A tool that changes only Osprey's own state (memory) is judged as a trusted read-only one.
        own = tool is not None and tool.own_state
        trusted = own or (tool is not None and tool.trusted and tool.read_only)
        if self.policy == "never":
            return False
        if self.policy in ("unless-trusted", "deny-untrusted"):
            return not trusted
        read_only = own or (tool is not None and tool.read_only)
        if self.policy == "on-failure":
            return self._batch_latched and not read_only
        return not read_only  # on-request

    def covering_rule(self, call: PendingCall, *, saved: bool = True) -> str | None:
        """The rule (text) that pre-approves this call, or None."""
        for rule in self.allow:
            if rule.covers(call.name, call.arguments, cwd=call.cwd, workspace=self.workspace or call.workspace):
                return str(rule)
        if saved and self.store is not None:
            found = self.store.covering(call.name, call.arguments, cwd=call.cwd, workspace=self.workspace or call.workspace)
            if found is not None:
                return found.rule
        return None

    async def before_call(self, call: PendingCall) -> Verdict:
        if not self._requests(call):
            return Verdict.allow(self.name)
        if self.policy == "deny-untrusted":
            rule = self.covering_rule(call, saved=False)
            if rule is not None:
                return Verdict.allow(self.name, f"allowed by --allow {rule}")
            return Verdict.deny(self.name, (
                f"denied by the approval policy deny-untrusted: only the trusted read-only tools ({', '.join(TRUSTED_READ_ONLY)}) "
                "run without approval. Work with those tools; the user can pre-approve calls with --allow RULE, or rerun with --yolo."
            ))
        rule = self.covering_rule(call)
        if rule is not None:
            return Verdict.allow(self.name, f"allowed by the saved rule {rule}")
        return Verdict.ask(self.name, f"{call.name} needs approval under the policy {self.policy}")

    async def after_call(self, call: PendingCall, outcome: ToolOutcome) -> None:
        if self.policy == "on-failure":
            if outcome.is_error:
                self._batch_failed = True
            elif self._requests(call):
                self._approved_success = True  # it needed approval, ran, so was approved
        return None

    async def remember(self, rule: Rule, scope: Literal["project", "global"]) -> str:
        """An "allow always" answer: the rule applies for the rest of the session, and is saved."""
        self.allow.append(rule)
        if self.store is None:
            return f"allowed {rule} for this session (no approvals file to save it in)"
        from ..errors import OspreyError
        from .rules import RuleError

        try:
            # The store may wait for its file lock: not on the event loop.
            saved = await asyncio.to_thread(self.store.add, rule, project=self.workspace if scope == "project" else None)
        except (RuleError, OspreyError, OSError) as exc:
            return f"allowed {rule} for this session; saving it failed: {exc}"
        return f"saved {saved.rule} ({'this project' if saved.project else 'everywhere'}, id {saved.id})"
