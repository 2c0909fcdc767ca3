"""The built-in memory provider: two plain-text files under `$OSPREY_HOME/memory`.

Format. `MEMORY.md` (target `memory`) and `USER.md` (target `user`) each hold entries separated by
the delimiter line `§` and nothing else: the file is the entries joined by "\\n§\\n", ending with one
newline; no header, no blank lines around a delimiter. An entry may span several lines, but none
of its lines may look like a delimiter. A missing or blank file is an empty store.

Character use of a target: the number of characters (code points) of its file with leading and
trailing whitespace left out, which is the entries' characters plus 3 for each delimiter between
two entries. A write may not take it above the target's limit (a file already above it after a
manual edit may still shrink). A file is never read beyond `read_bound` bytes.

Writes. Content is stored stripped, with CRLF as LF; empty content, content with a delimiter-like
line, instruction injections and credentials (`safety`) are refused. An exact duplicate add
succeeds without a write. Replace and remove take a non-empty substring found (case-sensitively)
in exactly one entry. A batch applies its operations in order in memory and writes once, or not at
all. Each write holds an exclusive `flock` on `.lock` (a bounded wait), reads, changes and replaces
the target atomically: a 0600 file beside it, fsync, rename, fsync of the directory. Readers take
no lock: they see the old file or the new one.

Drift. Manual edits can break the format. Before a replace, a remove, or a batch that holds one,
the target file is checked; it has drifted when it is larger than the read bound, is not UTF-8 or
starts with a byte order mark; when an entry is empty or only whitespace (a delimiter first, last,
or twice in a row); when a line is made of `§` characters but is not exactly `§` (stray spaces,
`§§`, a CRLF line end); or when an entry begins or ends with whitespace (a blank line beside a
delimiter). On drift the file is copied to `MEMORY.<UTC time>.md.bak` (`USER.<UTC time>.md.bak`)
and the mutation is refused. Adds append to the file as it is; recall and the snapshot read a
drifted file leniently (every `§`-only line separates) and show unsafe entries as `BLOCKED`."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from ..files import LockBusy, exclusive_lock
from ..tomlfile import TEMPORARY_PATTERN, write_atomic
from .base import BLOCKED, TARGETS, MemoryEntry, MemoryOperation, MemoryStoreError, Target
from .checked import CheckedEntries
from .safety import MAX_CHECKED, secret, unsafe

DELIMITER = "§"
SEPARATOR = f"\n{DELIMITER}\n"
FILES: dict[Target, str] = {"memory": "MEMORY.md", "user": "USER.md"}
LOCK_NAME = ".lock"
MIN_READ_BOUND = 64 * 1024  # bytes

# A line made only of delimiter characters and blanks: the separator as a lenient reader sees it.
_DELIMITER_LIKE = re.compile(r"[ \t\r\f\v]*§+[ \t\r\f\v]*")


def read_bound(limit: int) -> int:
    """The most bytes read of a target with character limit `limit`: room for four times the
    limit in the widest UTF-8 (4 bytes a character), and at least 64 KiB."""
    return max(16 * limit, MIN_READ_BOUND)


def _split(body: str) -> list[str]:
    """The entries of a stripped file text, split exactly at the delimiter line; joining them with
    `SEPARATOR` gives `body` back."""
    return body.split(SEPARATOR) if body else []


def _lenient(body: str) -> list[str]:
    """The entries as a reader shows them: any `§`-only line separates, blank entries are skipped
    (and a byte order mark)."""
    entries: list[str] = []
    current: list[str] = []
    for line in body.removeprefix("\ufeff").split("\n"):
        if _DELIMITER_LIKE.fullmatch(line):
            entries.append("\n".join(current).strip())
            current = []
        else:
            current.append(line)
    entries.append("\n".join(current).strip())
    return [entry for entry in entries if entry]


def drift(text: str) -> str | None:
    """How `text` (a target file's contents) breaks the delimiter-only format, or None."""
    if text.startswith("\ufeff"):
        return "it starts with a byte order mark (an editor's encoding setting?)"
    for number, entry in enumerate(_split(text.strip()), 1):
        if not entry.strip():
            return f"entry {number} is empty (a delimiter line first, last, or twice in a row)"
        for line in entry.split("\n"):
            if _DELIMITER_LIKE.fullmatch(line):
                return f"entry {number} has the line {line!r}, which is not exactly the delimiter line {DELIMITER!r}"
        if entry != entry.strip():
            return f"entry {number} begins or ends with blank space (a blank line beside a delimiter?)"
    return None


def _content(content: str) -> str:
    """`content` as stored (line ends normalised, stripped), or a MemoryStoreError saying why it
    cannot be stored."""
    text = content.replace("\r\n", "\n").strip()
    if not text:
        raise MemoryStoreError("the content is empty; give the fact to remember")
    if len(text) > MAX_CHECKED:
        raise MemoryStoreError(f"the content is {len(text):,} characters long; an entry holds at most {MAX_CHECKED:,}: store a short fact")
    if any(_DELIMITER_LIKE.fullmatch(line) for line in text.split("\n")):
        raise MemoryStoreError(f"the content has a line made of {DELIMITER!r}, the delimiter between entries; rewrite that line")
    reason = unsafe(text)
    if reason is not None:
        raise MemoryStoreError(f"refused: the content {reason}; store durable facts only, never instructions to the model")
    kind = secret(text)
    if kind is not None:
        raise MemoryStoreError(f"refused: the content seems to hold {kind}; never store credentials or other secrets")
    return text


def _needle(old_text: str) -> str:
    needle = old_text.replace("\r\n", "\n")
    if not needle.strip():
        raise MemoryStoreError("old_text is empty; give a substring found in exactly one entry")
    return needle


def _find(entries: list[str], needle: str, target: Target) -> int:
    """The index of the one entry holding `needle`, or a MemoryStoreError saying none or how many."""
    found = [i for i, entry in enumerate(entries) if needle in entry]
    if not found:
        raise MemoryStoreError(f"no {target} entry contains {needle!r} (the match is exact and case-sensitive); "
                               "recall to see the entries, then use text from one of them")
    if len(found) > 1:
        raise MemoryStoreError(f"{needle!r} is in {len(found)} {target} entries; use a longer substring found in only one of them")
    return found[0]


class BuiltinMemory:
    """Memory in `directory` (`$OSPREY_HOME/memory`): `MEMORY.md`, `USER.md`, `.lock` and
    `.checked` (the entries the injection check has passed, `checked`)."""

    name = "builtin"

    def __init__(self, directory: Path, *, memory_char_limit: int = 2200, user_char_limit: int = 1375, lock_timeout: float = 10.0) -> None:
        self.directory = Path(directory)
        self.limits: dict[Target, int] = {"memory": memory_char_limit, "user": user_char_limit}
        self.lock_timeout = lock_timeout

    def path(self, target: Target) -> Path:
        """The file of `target`."""
        return self.directory / FILES[target]

    # The protocol: each call runs the file work in a thread.

    async def add(self, content: str, target: Target = "memory") -> str:
        return await asyncio.to_thread(self._batch, [MemoryOperation(action="add", content=content)], target, "add")

    async def replace(self, old_text: str, content: str, target: Target = "memory") -> str:
        return await asyncio.to_thread(self._batch, [MemoryOperation(action="replace", old_text=old_text, content=content)], target, "replace")

    async def remove(self, old_text: str, target: Target = "memory") -> str:
        return await asyncio.to_thread(self._batch, [MemoryOperation(action="remove", old_text=old_text)], target, "remove")

    async def batch(self, operations: Sequence[MemoryOperation], target: Target = "memory") -> str:
        return await asyncio.to_thread(self._batch, list(operations), target, "batch")

    async def recall(self, query: str) -> list[MemoryEntry]:
        return await asyncio.to_thread(self._recall, query)

    async def snapshot(self) -> str:
        return await asyncio.to_thread(self._snapshot)

    async def aclose(self) -> None:
        return None

    # Reading.

    def _read(self, target: Target, *, write: bool) -> bytes | None:
        """The bytes of `target`'s file (b"" when it is missing), or None when it is larger than
        the read bound. Never reads more than the bound and one byte."""
        path = self.path(target)
        bound = read_bound(self.limits[target])
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise MemoryStoreError(f"cannot open {path}: {exc.strerror}; check that it is a file you can read", write=write) from None
        try:
            chunks: list[bytes] = []
            size = 0
            while size <= bound:
                chunk = os.read(fd, bound + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as exc:
            raise MemoryStoreError(f"cannot read {path}: {exc.strerror}; check that it is a regular file you can read", write=write) from None
        finally:
            os.close(fd)
        return None if size > bound else b"".join(chunks)

    def _text(self, target: Target) -> str:
        """`target`'s text for a reader: invalid UTF-8 replaced, stripped; an over-large file is an error."""
        data = self._read(target, write=False)
        if data is None:
            raise MemoryStoreError(f"{self.path(target)} is larger than {read_bound(self.limits[target]):,} bytes, far above the "
                                   f"{target} limit of {self.limits[target]:,} characters; shorten it by hand to entries separated by "
                                   f"lines {DELIMITER!r}", write=False)
        return data.decode("utf-8", errors="replace").strip()

    def _recall(self, query: str) -> list[MemoryEntry]:
        terms = [term.casefold() for term in query.split()]
        if not terms:
            raise MemoryStoreError("the recall query is empty; give one or more words to look for", write=False)
        found: list[MemoryEntry] = []
        checked = CheckedEntries(self.directory)
        for target in TARGETS:
            texts = _lenient(self._text(target))
            for text in reversed(texts):  # entries are appended: the newest is last
                folded = text.casefold()
                if all(term in folded for term in terms):
                    blocked = checked.unsafe(text) is not None
                    found.append(MemoryEntry(target=target, text=BLOCKED if blocked else text, blocked=blocked))
        checked.save()
        return found

    def _snapshot(self) -> str:
        sections = []
        checked = CheckedEntries(self.directory)  # an entry checked before is not checked again
        for target in TARGETS:
            body = self._text(target)
            texts = [BLOCKED if checked.unsafe(text) is not None else text for text in _lenient(body)]
            if texts:
                sections.append(f"## {target} ({len(body):,}/{self.limits[target]:,} characters)\n" + SEPARATOR.join(texts))
        checked.save(prune=True)
        return "\n\n".join(sections)

    # Writing.

    def _batch(self, operations: list[MemoryOperation], target: Target, action: str) -> str:
        """Apply `operations` to `target` in order, in memory, then write once (or not at all)."""
        if target not in FILES:
            raise MemoryStoreError(f"unknown memory target {target!r}; use one of: {', '.join(TARGETS)}")
        if not operations:
            raise MemoryStoreError("the batch has no operations; give at least one add, replace or remove")
        # Check the arguments before touching the files, so a bad call costs no lock.
        checked_ops: list[tuple[str, str, str]] = []
        for number, op in enumerate(operations, 1):
            try:
                content = _content(op.content) if op.action in ("add", "replace") else ""
                needle = _needle(op.old_text) if op.action in ("replace", "remove") else ""
            except MemoryStoreError as exc:
                raise MemoryStoreError(self._where(action, number, op, f"{exc}; nothing was written")) from None
            checked_ops.append((op.action, content, needle))
        mutates = any(kind != "add" for kind, _, _ in checked_ops)
        path = self.path(target)
        limit = self.limits[target]
        with self._locked():
            body = self._writable_text(target, check=mutates)
            entries = _split(body)
            changes = 0
            for number, (kind, content, needle) in enumerate(checked_ops, 1):
                try:
                    changes += self._apply(entries, kind, content, needle, target)
                except MemoryStoreError as exc:
                    raise MemoryStoreError(self._where(action, number, operations[number - 1], f"{exc}; nothing was written")) from None
            new_body = SEPARATOR.join(entries)
            before, after = len(body), len(new_body)
            if new_body == body:
                return self._said(action, changes, target, after, unchanged=True)
            if after > limit and after > before:
                raise MemoryStoreError(
                    f"{target} would use {after:,} of its {limit:,} characters (it uses {before:,} now); nothing was written. "
                    "Replace or remove entries to make room, or shorten the entry")
            self._remove_stale_temporaries(path)
            try:
                write_atomic(path, new_body + "\n" if new_body else "")
            except OSError as exc:
                raise MemoryStoreError(f"cannot write {path}: {exc.strerror}; check that {self.directory} is a directory you own "
                                       "and can write, with space left") from None
            checked = CheckedEntries(self.directory)
            for kind, content, _ in checked_ops:
                if kind != "remove" and content in entries:
                    checked.passed(content)  # `_content` checked it
            checked.save()
            return self._said(action, changes, target, after, unchanged=False)

    @staticmethod
    def _where(action: str, number: int, op: MemoryOperation, message: str) -> str:
        return f"operation {number} ({op.action}): {message}" if action == "batch" else message

    def _said(self, action: str, changes: int, target: Target, use: int, *, unchanged: bool) -> str:
        usage = f"{target} uses {use:,} of {self.limits[target]:,} characters"
        if action == "add":
            return f"Already in {target}; nothing written ({usage})." if unchanged else f"Added to {target} ({usage})."
        if action == "replace":
            return f"That entry already reads so; nothing written ({usage})." if unchanged else f"Replaced the entry in {target} ({usage})."
        if action == "remove":
            return f"Removed the entry from {target} ({usage})."
        if unchanged:
            return f"Nothing to change in {target}; nothing written ({usage})."
        return f"Applied {changes} change{'' if changes == 1 else 's'} to {target} ({usage})."

    @staticmethod
    def _apply(entries: list[str], kind: str, content: str, needle: str, target: Target) -> int:
        """Apply one checked operation to `entries` in place; the number of changes (0 or 1)."""
        if kind == "add":
            if content in _lenient(SEPARATOR.join(entries)):
                return 0
            entries.append(content)
            return 1
        index = _find(entries, needle, target)
        if kind == "remove":
            del entries[index]
            return 1
        if entries[index] == content:
            return 0
        if content in entries:  # the new text is another entry already: the two become one
            del entries[index]
        else:
            entries[index] = content
        return 1

    def _writable_text(self, target: Target, *, check: bool) -> str:
        """`target`'s stripped text for a write. With `check` (a replace or remove follows) a
        drifted file is copied to a timestamped backup and the write refused."""
        path = self.path(target)
        data = self._read(target, write=True)
        problem: str | None = None
        text = ""
        if data is None:
            problem = f"it is larger than {read_bound(self.limits[target]):,} bytes"
        else:
            try:
                text = data.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                problem = f"it is not UTF-8 (byte {exc.start})"
        if problem is None and check:
            problem = drift(text)
        if problem is None:
            return text
        if not check:  # an add: it would have to rewrite a file it cannot read
            raise MemoryStoreError(f"{path} cannot be read as memory: {problem}; fix it by hand to entries separated by lines "
                                   f"{DELIMITER!r}, then retry")
        backup = self._backup(target)
        raise MemoryStoreError(f"{path} has been edited out of its format: {problem}. It was copied to {backup.name}. "
                               f"Restore entries separated only by the delimiter line {DELIMITER!r} before retrying")

    def _backup(self, target: Target) -> Path:
        """Copy `target`'s file to `NAME.<UTC time>.md.bak` beside it (a new name each time)."""
        path = self.path(target)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        stem = path.name.removesuffix(".md")
        for n in range(1000):
            backup = path.with_name(f"{stem}.{stamp}{'' if n == 0 else f'-{n}'}.md.bak")
            try:
                out = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue
            except OSError as exc:
                raise MemoryStoreError(f"{path} has been edited out of its format, and cannot be backed up to {backup}: "
                                       f"{exc.strerror}; restore entries separated only by the delimiter line {DELIMITER!r}") from None
            try:
                with os.fdopen(out, "wb") as sink, open(path, "rb") as source:
                    while chunk := source.read(1 << 16):
                        sink.write(chunk)
                    sink.flush()
                    os.fsync(sink.fileno())
            except OSError as exc:
                raise MemoryStoreError(f"cannot back up {path} to {backup}: {exc.strerror}; restore entries separated only by "
                                       f"the delimiter line {DELIMITER!r}") from None
            return backup
        raise MemoryStoreError(f"too many backups of {path} named for {stamp}; remove some {stem}.*.md.bak files")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold an exclusive flock on `.lock`, waiting at most `lock_timeout` seconds."""
        with ExitStack() as stack:
            lock_path = self.directory / LOCK_NAME
            try:
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                stack.enter_context(exclusive_lock(lock_path, self.lock_timeout))
            except LockBusy:
                raise MemoryStoreError(f"memory is locked by another process (waited {self.lock_timeout:g} s for {lock_path}); "
                                       "try again when the other session has finished writing") from None
            except OSError as exc:
                raise MemoryStoreError(f"cannot lock {lock_path}: {exc.strerror}; check that {self.directory} is a directory you own and can write") from None
            yield

    @staticmethod
    def _remove_stale_temporaries(path: Path) -> None:
        """Temporary files left by a writer killed before its rename (the lock is held: no writer
        is using one now)."""
        stale = re.compile(re.escape(path.name) + TEMPORARY_PATTERN)
        with suppress(OSError), os.scandir(path.parent) as it:
            for entry in it:
                if stale.fullmatch(entry.name):
                    with suppress(OSError):
                        os.unlink(entry.path)
