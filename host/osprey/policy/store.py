"""Saved approvals: the rules a person allowed "always", in `$OSPREY_HOME/approvals.toml`.

```toml
[[rules]]
id = "r-3f9a1c"
rule = "bash(git diff *)"
project = "/abs/workspace"   # absent: the rule applies in every workspace
created = 2026-12-02T19:30:00Z
```

Reading never fails a run: a missing file is an empty store; a file that cannot be read or parsed
is an empty store with a warning; an entry whose rule no longer parses is skipped with a warning
(and kept in the file). Every change takes an exclusive lock on `approvals.toml.lock`, re-reads
the file under it, and replaces it crash-atomically (temporary file in the same directory, fsync,
rename, fsync of the directory). A file that cannot be read is moved aside before a new one is
written, never overwritten.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import tomlfile
from ..errors import ConfigError, OspreyError
from ..files import LockBusy, exclusive_lock, read_bounded
from ..tomlfile import TEMPORARY_PATTERN, toml_string, toml_value, write_atomic

if TYPE_CHECKING:
    from .rules import Rule  # loaded when a rule is parsed: a home without saved rules never needs it

APPROVALS_FILE = "approvals.toml"
MAX_BYTES = 1024 * 1024
HEADER = (
    "# Saved approvals: tool calls Osprey runs without asking (`osprey approvals list`, `add`, `revoke`).\n"
    "# Each rule applies in its project, or everywhere when it has no project.\n"
)
_T = TypeVar("_T")


class ApprovalStoreError(OspreyError):
    """The approvals file cannot be changed (locked too long, too big, not writable)."""


def approvals_path(home: Path) -> Path:
    """Where the saved approvals of an Osprey home live."""
    return home / APPROVALS_FILE


class SavedRule(BaseModel):
    """One saved rule, as `approvals.toml` records it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    id: str = Field(min_length=1, max_length=64)
    rule: str = Field(max_length=2048)
    project: str | None = Field(None, description="the workspace root it applies in; None: everywhere")
    created: datetime

    def parsed(self) -> Rule:
        """The rule, parsed (raises RuleError when its text is no longer a valid rule)."""
        return _parse(self.rule)

    def applies_to(self, workspace: str) -> bool:
        """Global rules apply everywhere; a project rule in its own workspace (paths compared resolved)."""
        return self.project is None or _same_place(self.project, workspace)


@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> Rule:
    from .rules import Rule

    return Rule.parse(text)


def _realpath(path: str) -> str:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return "\x00" + path  # matches nothing resolved


def _same_place(a: str, b: str) -> bool:
    return a == b or _realpath(a) == _realpath(b)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    rules: list[SavedRule] = Field(default_factory=list)


@dataclass
class _Read:
    """The file as read: its entries, or the problem that made it unreadable (`missing` when absent)."""

    entries: list[SavedRule] = field(default_factory=list)
    problem: str | None = None
    missing: bool = False


class ApprovalStore:
    """Saved approval rules in one file. `warn` receives each distinct problem once."""

    lock_timeout = 10.0  # seconds to wait for another process's update

    def __init__(self, path: Path, *, warn: Callable[[str], None] = lambda m: None) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._warn = warn
        self._warned: set[str] = set()
        self._cache: tuple[tuple[int, ...], list[SavedRule]] | None = None

    @classmethod
    def for_home(cls, home: Path, *, warn: Callable[[str], None] = lambda m: None) -> ApprovalStore:
        """The store of an Osprey home (`settings.home`)."""
        return cls(approvals_path(home), warn=warn)

    # -- reading

    def load(self) -> list[SavedRule]:
        """The usable saved rules; [] when the file is missing, and [] with a warning when it cannot
        be read or parsed. Entries whose rule no longer parses are skipped with a warning."""
        signature = self._signature()
        if signature is not None and self._cache is not None and self._cache[0] == signature:
            return list(self._cache[1])
        read = self._read()
        if read.problem:
            self._warn_once(f"{read.problem}; saved approvals are ignored until it is fixed or removed "
                            f"(the next `osprey approvals add` moves it aside and starts a new file)")
        usable = []
        if read.entries:
            from .rules import RuleError
        for entry in read.entries:
            try:
                entry.parsed()
            except RuleError as exc:
                self._warn_once(f"{self.path}: skipped saved rule {entry.id}: {exc}. "
                                f"Remove it with `osprey approvals revoke {entry.id}`")
                continue
            usable.append(entry)
        if signature is not None:
            self._cache = (signature, usable)
        return list(usable)

    def problem(self) -> str | None:
        """Why the file, as it is now, cannot be read (None when it is fine or missing)."""
        return self._read().problem

    def covering(self, tool: str, arguments: Mapping[str, Any], *, cwd: str, workspace: str) -> SavedRule | None:
        """The first saved rule for this workspace that pre-approves the call, or None."""
        real: list[str] = []  # the workspace resolved, once, when a project rule needs it
        for entry in self.load():
            if entry.project is not None and entry.project != workspace:
                if not real:
                    real.append(_realpath(workspace))
                if _realpath(entry.project) != real[0]:
                    continue
            if entry.parsed().covers(tool, arguments, cwd=cwd, workspace=workspace):
                return entry
        return None

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self._warn(message)

    def _signature(self) -> tuple[int, ...] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _read(self) -> _Read:
        import tomli

        try:
            raw = read_bounded(self.path, "the approvals file", MAX_BYTES)
        except ConfigError as exc:
            return _Read(problem=str(exc))
        if raw is None:
            if os.path.isdir(self.path):
                return _Read(problem=f"{self.path}: a directory, not an approvals file")
            return _Read(missing=True)
        try:
            data = tomlfile.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return _Read(problem=f"{self.path}: not UTF-8 text")
        except tomli.TOMLDecodeError as exc:
            return _Read(problem=f"{self.path}: not valid TOML ({exc})")
        try:
            return _Read(entries=_File.model_validate(data).rules)
        except ValidationError as exc:
            where = ", ".join(".".join(str(p) for p in e["loc"]) or "(top level)" for e in exc.errors()[:3])
            return _Read(problem=f"{self.path}: not an approvals file Osprey understands (at {where})")

    # -- changing

    def add(self, rule: str | Rule, *, project: str | None) -> SavedRule:
        """Save `rule` for the workspace `project` (an absolute path) or, with None, everywhere.
        The same rule already saved with the same scope is returned as it is."""
        from .rules import Rule

        parsed = Rule.parse(str(rule))  # a Rule built by hand is checked like typed text
        if project is not None:
            if not isinstance(project, str) or not os.path.isabs(project):
                raise ValueError(f"a rule's project must be an absolute path, not {project!r}")
            project = os.path.normpath(project)
            parsed.check_workspace(project)
        text = str(parsed)
        for value in (text, project or ""):
            toml_string(value)  # refuse what the file cannot hold before taking the lock

        def change(entries: list[SavedRule]) -> tuple[SavedRule, list[SavedRule] | None]:
            for entry in entries:
                if _same_scope(entry.project, project) and _parses_to(entry.rule) == parsed:
                    return entry, None
            taken = {e.id for e in entries}
            new_id = "r-" + secrets.token_hex(3)
            while new_id in taken:
                new_id = "r-" + secrets.token_hex(3)
            saved = SavedRule(id=new_id, rule=text, project=project, created=datetime.now(UTC).replace(microsecond=0))
            return saved, [*entries, saved]

        return self._update(change, repair=True)

    def revoke(self, rule_id: str) -> SavedRule | None:
        """Remove the saved rule with this id (every entry bearing it); None when there is none."""

        def change(entries: list[SavedRule]) -> tuple[SavedRule | None, list[SavedRule] | None]:
            gone = [e for e in entries if e.id == rule_id]
            if not gone:
                return None, None
            return gone[0], [e for e in entries if e.id != rule_id]

        return self._update(change, repair=False)

    def _update(self, change: Callable[[list[SavedRule]], tuple[_T, list[SavedRule] | None]], *, repair: bool) -> _T:
        """Run `change` on the current entries under the lock; write what it returns (None: nothing
        changed). With `repair`, an unreadable file is moved aside and the change starts afresh."""
        with self._locked():
            self._remove_stale_temporaries()
            read = self._read()
            if read.problem:
                if not repair:
                    self._warn_once(f"{read.problem}; nothing was changed: fix or remove it")
                    return change([])[0]
                aside = self._move_aside()
                self._warn_once(f"{read.problem}. Moved it to {aside} and started a new approvals file; "
                                "copy any rules you still need from it with `osprey approvals add`")
            result, entries = change(read.entries)
            if entries is not None:
                self._write(render(entries))
                self._cache = None
            return result

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold an exclusive flock on the sibling lock file, waiting at most `lock_timeout`."""
        with ExitStack() as stack:
            home = self.path.parent
            try:
                home.mkdir(parents=True, exist_ok=True, mode=0o700)
                stack.enter_context(exclusive_lock(self.lock_path, self.lock_timeout))
            except LockBusy:
                raise ApprovalStoreError(
                    f"{self.path} is locked by another process (waited {self.lock_timeout:g} s for {self.lock_path}); "
                    "try again when the other osprey command has finished"
                ) from None
            except OSError as exc:
                raise ApprovalStoreError(f"cannot lock {self.lock_path}: {exc.strerror}; check that {home} is a "
                                         "directory you own and can write") from None
            yield

    def _remove_stale_temporaries(self) -> None:
        """Temporary files left by a writer that died before its rename (we hold the lock, so no
        writer is using one now)."""
        stale = re.compile(re.escape(self.path.name) + TEMPORARY_PATTERN)
        with suppress(OSError), os.scandir(self.path.parent) as it:
            for entry in it:
                if stale.fullmatch(entry.name):
                    with suppress(OSError):
                        os.unlink(entry.path)

    def _move_aside(self) -> Path:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        aside = self.path.with_name(f"{self.path.name}.malformed-{stamp}")
        n = 1
        while os.path.lexists(aside):
            n += 1
            aside = self.path.with_name(f"{self.path.name}.malformed-{stamp}-{n}")
        try:
            os.rename(self.path, aside)
        except OSError as exc:
            raise ApprovalStoreError(f"{self.path} cannot be read, and moving it aside to {aside} failed "
                                     f"({exc.strerror}); move or remove it yourself, then try again") from None
        return aside

    def _write(self, text: str) -> None:
        if len(text.encode("utf-8")) > MAX_BYTES:
            raise ApprovalStoreError(f"{self.path} would grow past {MAX_BYTES // (1024 * 1024)} MiB; "
                                     "revoke rules you no longer need (`osprey approvals list --all`, `osprey approvals revoke ID`)")
        try:
            write_atomic(self.path, text)
        except OSError as exc:
            raise ApprovalStoreError(f"cannot write {self.path}: {exc.strerror}") from None


def _same_scope(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    return _same_place(a, b)


def _parses_to(text: str) -> Rule | None:
    from .rules import Rule, RuleError

    try:
        return Rule.parse(text)
    except RuleError:
        return None


# ---------------------------------------------------------------------------------------------
# Writing TOML: the file holds only strings and datetimes, so a small writer is enough.


def render(entries: list[SavedRule]) -> str:
    """The text of an approvals file holding `entries`."""
    lines = [HEADER]
    for entry in entries:
        lines.append("[[rules]]")
        lines.append(f"id = {toml_string(entry.id)}")
        lines.append(f"rule = {toml_string(entry.rule)}")
        if entry.project is not None:
            lines.append(f"project = {toml_string(entry.project)}")
        lines.append(f"created = {toml_value(entry.created)}")
        lines.append("")
    return "\n".join(lines)
